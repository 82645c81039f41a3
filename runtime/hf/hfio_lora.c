/* hfio_lora: LoRA adapters in the Hugging Face mapping. An adapter's
 * pieces name PEFT's tensors (base_model.model.<module>.lora_A.weight and
 * .lora_B.weight, nn.Linear layout); the module's base weight is
 * <module>.weight. Found from the names alone, plus the scale: the `by` of
 * the scale op that the product with B feeds (stdlib's adapters compute
 * scale(linear(linear(x, A), B), alpha / rank)). Used by the export: the
 * PEFT adapter's config, and the merged model's W + A B scale. */
#include "hfio_impl.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int find_group(const HfLayout *l, const char *name) {
    for (int g = 0; g < l->ngroups; g++)
        if (!strcmp(l->groups[g].name, name)) return g;
    return -1;
}

/* The scale op fed by forward op o's result, or by the product with B. */
static int scale_of(const Plan *p, int btensor, double *s) {
    for (uint32_t i = 0; i < p->nops; i++) {
        const PlanOp *o = &p->ops[i];
        if (o->kind != OP_FWD || (o->prim != PRIM_LINEAR && o->prim != PRIM_MATMUL) || o->nin < 2 || o->in[1] != btensor) continue;
        for (uint32_t j = 0; j < p->nops; j++) {
            const PlanOp *q = &p->ops[j];
            if (q->kind == OP_FWD && q->prim == PRIM_SCALE && q->nin >= 1 && q->in[0] == o->out[0]) {
                *s = q->fattr[FA_SCALE_BY];
                return 0;
            }
        }
    }
    return -1;
}

/* The module path of an adapter group ("model.layers.0.self_attn.q_proj"
 * into buf) and which matrix it is ('A', 'B'); 0 when it is not one. */
static char adapter_module(const char *name, char *buf, size_t n) {
    if (!hf_is_adapter(name)) return 0;
    const char *m = name + strlen(HF_PEFT_PREFIX);
    size_t len = strlen(m), suf = strlen(".lora_A.weight");
    if (len <= suf || strncmp(m + len - suf, ".lora_", 6) || strcmp(m + len - suf + 7, ".weight")) return 0;
    char which = m[len - suf + 6];
    if ((which != 'A' && which != 'B') || len - suf >= n) return 0;
    memcpy(buf, m, len - suf);
    buf[len - suf] = 0;
    return which;
}

/* ---- LoRA on the experts: found from the ops (stdlib/moe.zl's moe_mlp) ----
 * base:    y = moe_expert(x, idx, W)
 * adapter: d = scale(moe_expert(moe_expert(x, idx, A), idx, B), alpha / r)
 *          and y + d, or (gate and up sharing B) split(d, 2) and y + piece k */

/* The forward op of primitive prim whose input slot `slot` is tensor t, from op `from` on; -1: none. */
static int op_with(const Plan *p, int prim, int slot, int t, uint32_t from) {
    for (uint32_t i = from; i < p->nops; i++) {
        const PlanOp *o = &p->ops[i];
        if (o->kind == OP_FWD && o->prim == prim && slot < o->nin && o->in[slot] == t) return (int)i;
    }
    return -1;
}

/* The layout of parameter t's first piece (PLAN_HF_PLAIN when unmapped). */
static int layout_of(const HfLayout *l, int t) {
    for (int i = 0; i < l->npieces; i++)
        if (l->pieces[i].tensor == t) return l->pieces[i].layout;
    return PLAN_HF_PLAIN;
}

/* From adapter A (moe_expert op ua): B, the scale op, and whether a split follows it (*split: its op, -1 none). */
static int expert_chain(const Plan *p, const HfLayout *l, int ua, int *b, int *sc, int *split) {
    int ub = op_with(p, PRIM_MOE_EXPERT, 0, p->ops[ua].out[0], 0);
    if (ub < 0 || layout_of(l, p->ops[ub].in[2]) != PLAN_HF_EXPERT_COLS) return -1;
    *b = p->ops[ub].in[2];
    *sc = op_with(p, PRIM_SCALE, 0, p->ops[ub].out[0], 0);
    if (*sc < 0) return -1;
    *split = op_with(p, PRIM_SPLIT, 0, p->ops[*sc].out[0], 0);
    return 0;
}

/* The expert adapter of stacked base group g: 1 and *lo, 0 when none. */
static int expert_lora_of(const Plan *p, const HfLayout *l, int g, HfLora *lo, char *err, size_t n) {
    int w = l->pieces[l->groups[g].first].tensor;
    const PlanTensor *W = &p->tensors[w];
    for (int uw = op_with(p, PRIM_MOE_EXPERT, 2, w, 0); uw >= 0; uw = op_with(p, PRIM_MOE_EXPERT, 2, w, (uint32_t)uw + 1)) {
        int x = p->ops[uw].in[0];
        for (int ua = op_with(p, PRIM_MOE_EXPERT, 0, x, 0); ua >= 0; ua = op_with(p, PRIM_MOE_EXPERT, 0, x, (uint32_t)ua + 1)) {
            int a = p->ops[ua].in[2], b, sc, split;
            if (a == w || layout_of(l, a) != PLAN_HF_EXPERT_ROWS || expert_chain(p, l, ua, &b, &sc, &split)) continue;
            const PlanTensor *A = &p->tensors[a], *B = &p->tensors[b];
            *lo = (HfLora){.a = a, .b = b, .rank = A->dims[1], .scale = p->ops[sc].fattr[FA_SCALE_BY], .experts = A->dims[0],
                           .wper = W->dims[1], .bper = B->dims[1], .brow0 = 0};
            if (split >= 0) { /* W's rows are the piece of the split that is added to W's product */
                const PlanOp *s = &p->ops[split];
                int k = -1;
                for (int j = 0; j < s->nout && k < 0; j++)
                    for (int ad = op_with(p, PRIM_ADD, 0, p->ops[uw].out[0], 0); ad >= 0 && k < 0;
                         ad = op_with(p, PRIM_ADD, 0, p->ops[uw].out[0], (uint32_t)ad + 1))
                        if (p->ops[ad].in[1] == s->out[j]) k = j;
                if (k < 0) continue;
                lo->brow0 = (int64_t)k * W->dims[1];
            }
            if (A->rank != 3 || B->rank != 3 || A->dims[0] != W->dims[0] || B->dims[0] != W->dims[0] || A->dims[2] != W->dims[2] ||
                B->dims[2] != lo->rank || lo->brow0 + lo->wper > lo->bper)
                return errorf(err, n, "LoRA adapter of '%s': '%s' and '%s' are not [E, r, in] and [E, out, r] of its experts", W->name,
                              A->name, B->name);
            return 1;
        }
    }
    return 0;
}

int hf_expert_target(const Plan *p, const HfLayout *l, int ga, char *buf, size_t bn, char *err, size_t n) {
    const char *nm = l->groups[ga].name;
    int a = l->pieces[l->groups[ga].first].tensor, b, sc, split;
    int ua = op_with(p, PRIM_MOE_EXPERT, 2, a, 0);
    if (ua < 0 || expert_chain(p, l, ua, &b, &sc, &split))
        return errorf(err, n, "LoRA adapter '%s': no moe_expert(moe_expert(x, idx, A), idx, B) of it (stdlib/moe.zl's)", nm);
    /* the module: PEFT's prefix and the nested wrappers' ".base_layer" left out */
    const char *m = nm + strlen(HF_PEFT_PREFIX);
    size_t len = strlen(m) - strlen(".lora_A.weight");
    while (len > 11 && !strncmp(m + len - 11, ".base_layer", 11)) len -= 11;
    size_t s = len;
    while (s > 0 && m[s - 1] != '.') s--;
    snprintf(buf, bn, "%.*s.%s", (int)(len - s), m + s, split >= 0 ? "gate_up_proj" : "down_proj");
    return 0;
}

int hf_lora_of(const Plan *p, const HfLayout *l, int g, HfLora *lo, char *err, size_t n) {
    if (!l->groups[g].adapter && l->pieces[l->groups[g].first].stacked) return expert_lora_of(p, l, g, lo, err, n);
    const char *base = l->groups[g].name;
    size_t bl = strlen(base);
    if (l->groups[g].adapter || bl < 8 || strcmp(base + bl - 7, ".weight")) return 0;
    char an[1024], bn[1024];
    snprintf(an, sizeof an, "%s%.*s.lora_A.weight", HF_PEFT_PREFIX, (int)(bl - 7), base);
    snprintf(bn, sizeof bn, "%s%.*s.lora_B.weight", HF_PEFT_PREFIX, (int)(bl - 7), base);
    int ga = find_group(l, an), gb = find_group(l, bn);
    if (ga < 0 && gb < 0) return 0;
    if (ga < 0 || gb < 0) return errorf(err, n, "LoRA adapter of '%s': the mapping has %s but not %s", base, ga < 0 ? bn : an, ga < 0 ? an : bn);
    *lo = (HfLora){.a = l->pieces[l->groups[ga].first].tensor, .b = l->pieces[l->groups[gb].first].tensor};
    const PlanTensor *A = &p->tensors[lo->a], *B = &p->tensors[lo->b];
    lo->rank = A->rank == 2 ? A->dims[1] : -1;
    if (A->rank != 2 || B->rank != 2 || B->dims[0] != lo->rank)
        return errorf(err, n, "LoRA adapter of '%s': '%s' and '%s' are not [in, r] and [r, out]", base, A->name, B->name);
    if (scale_of(p, lo->b, &lo->scale))
        return errorf(err, n, "LoRA adapter of '%s': no scale(...) of the product with '%s' (the stdlib's adapters compute "
                              "scale(linear(linear(x, A), B), alpha / rank))", base, B->name);
    return 1;
}

/* Whether every base weight of a module named ...<.t> has an adapter: then
 * PEFT's short target t (it matches every module whose path ends in .t)
 * adapts exactly those; else the config lists full module paths. */
static bool short_name_exact(const HfLayout *l, const char *t) {
    size_t tl = strlen(t);
    for (int g = 0; g < l->ngroups; g++) {
        const char *nm = l->groups[g].name;
        size_t len = strlen(nm);
        /* a stacked expert's tensor (experts.N.gate_proj) is a slice of a fused parameter to
         * transformers, no module the short name could match */
        if (l->groups[g].adapter || l->pieces[l->groups[g].first].stacked || len < tl + 7 || strcmp(nm + len - 7, ".weight") ||
            strncmp(nm + len - 7 - tl, t, tl) || (len > tl + 7 && nm[len - 8 - tl] != '.'))
            continue;
        char an[1100];
        snprintf(an, sizeof an, "%s%.*s.lora_A.weight", HF_PEFT_PREFIX, (int)(len - 7), nm);
        if (find_group(l, an) < 0) return false;
    }
    return true;
}

/* Adds target t (the module's last component, or its path when full) to the list, once. */
static void add_target(StBuf *b, const char *m, bool full, int *count) {
    const char *dot = strrchr(m, '.');
    const char *t = full || !dot ? m : dot + 1;
    char q[1100];
    snprintf(q, sizeof q, "\"%s\"", t);
    if (b->p && b->len && strstr(b->p, q)) return;
    if ((*count)++) st_buf_put(b, ", ", 2);
    st_buf_json_string(b, t);
}

/* target_modules: PEFT's short names when they adapt exactly the adapted
 * modules, else every adapted module's full path. */
static void put_targets(const HfLayout *l, StBuf *b, int *count) {
    bool full = false;
    char m[1024];
    for (int g = 0; g < l->ngroups; g++)
        if (adapter_module(l->groups[g].name, m, sizeof m) == 'A' && !l->pieces[l->groups[g].first].layout) {
            const char *dot = strrchr(m, '.');
            full |= !short_name_exact(l, dot ? dot + 1 : m);
        }
    for (int g = 0; g < l->ngroups; g++)
        if (adapter_module(l->groups[g].name, m, sizeof m) == 'A' && !l->pieces[l->groups[g].first].layout)
            add_target(b, m, full, count);
}

char *hf_adapter_config(const Plan *p, const HfLayout *l, char *err, size_t n) {
    StBuf targets = {0}, params = {0};
    int ntargets = 0, nparams = 0;
    int64_t rank = 0;
    double alpha = 0;
    bool fan_in_fan_out = false;
    for (int g = 0; g < l->ngroups; g++) {
        char m[1024], wn[1100];
        if (adapter_module(l->groups[g].name, m, sizeof m) != 'A') continue;
        snprintf(wn, sizeof wn, "%s.weight", m);
        bool expert = l->pieces[l->groups[g].first].layout == PLAN_HF_EXPERT_ROWS;
        int base = expert ? -1 : find_group(l, wn), b = -1, sc = -1, split = -1, ua = -1;
        HfLora lo = {0};
        int k;
        if (expert) { /* PEFT's target_parameters: experts.gate_up_proj, experts.down_proj */
            k = hf_expert_target(p, l, g, wn, sizeof wn, err, n) ? -1 : 1;
            if (k > 0) {
                ua = op_with(p, PRIM_MOE_EXPERT, 2, l->pieces[l->groups[g].first].tensor, 0);
                expert_chain(p, l, ua, &b, &sc, &split);
                lo = (HfLora){.rank = p->tensors[p->ops[ua].in[2]].dims[1], .scale = p->ops[sc].fattr[FA_SCALE_BY]};
                char q[1200];
                snprintf(q, sizeof q, "\"%s\"", wn);
                if (!params.p || !strstr(params.p, q)) {
                    if (nparams++) st_buf_put(&params, ", ", 2);
                    st_buf_json_string(&params, wn);
                }
            }
        } else
            k = base < 0 ? errorf(err, n, "LoRA adapter '%s': the mapping has no base weight '%s'", l->groups[g].name, wn)
                         : hf_lora_of(p, l, base, &lo, err, n);
        if (k <= 0) {
            if (!k) errorf(err, n, "LoRA adapter '%s' is incomplete", l->groups[g].name);
            st_buf_free(&targets);
            st_buf_free(&params);
            return NULL;
        }
        double al = lo.scale * (double)lo.rank;
        if (rank && (lo.rank != rank || al != alpha)) {
            errorf(err, n, "LoRA adapters of different ranks or alphas (%s: r = %" PRId64 ", alpha = %g; others r = %" PRId64 ", alpha = %g): "
                   "the export writes one r and lora_alpha", m, lo.rank, al, rank, alpha);
            st_buf_free(&targets);
            st_buf_free(&params);
            return NULL;
        }
        rank = lo.rank;
        alpha = al;
        if (!expert) fan_in_fan_out |= !l->groups[base].transpose; /* GPT-2's Conv1D keeps [in, out] */
    }
    if (rank) put_targets(l, &targets, &ntargets);
    StBuf b = {0};
    /* the lists put whole: every module's path can be longer than st_buf_printf's line */
    st_buf_printf(&b, "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"base_model_name_or_path\": null,\n"
                      "  \"r\": %" PRId64 ",\n  \"lora_alpha\": %.17g,\n  \"lora_dropout\": 0.0,\n  \"target_modules\": [",
                  rank, alpha);
    st_buf_put(&b, targets.p ? targets.p : "", targets.len);
    st_buf_printf(&b, "],\n  \"fan_in_fan_out\": %s,\n  \"bias\": \"none\",\n  \"modules_to_save\": null,\n  \"inference_mode\": true",
                  fan_in_fan_out ? "true" : "false");
    if (nparams) { /* LoRA on the experts */
        st_buf_printf(&b, ",\n  \"target_parameters\": [");
        st_buf_put(&b, params.p, params.len);
        st_buf_printf(&b, "]");
    }
    st_buf_printf(&b, "\n}\n");
    st_buf_free(&targets);
    st_buf_free(&params);
    if (b.oom || !rank) {
        if (!rank) errorf(err, n, "the plan's mapping has no LoRA adapter");
        else errorf(err, n, "out of memory");
        st_buf_free(&b);
        return NULL;
    }
    st_buf_put(&b, "", 1);
    return b.p;
}

void hf_lora_add(const HfLora *lo, const float *A, const float *B, int64_t out, float *f, int64_t r0, int64_t r1, int64_t c0,
                 int64_t c1) {
    int64_t w = c1 - c0, R = lo->rank;
    if (lo->experts) { /* out: I, W's columns */
        for (int64_t i = r0; i < r1; i++) {
            int64_t e = i / lo->wper, o = i % lo->wper;
            const float *b = B + (e * lo->bper + lo->brow0 + o) * R, *a = A + e * R * out;
            for (int64_t j = c0; j < c1; j++) {
                double acc = 0;
                for (int64_t k = 0; k < R; k++) acc += (double)b[k] * (double)a[k * out + j];
                float *y = &f[(i - r0) * w + (j - c0)];
                *y = (float)((double)*y + acc * lo->scale);
            }
        }
        return;
    }
    for (int64_t i = r0; i < r1; i++)
        for (int64_t j = c0; j < c1; j++) {
            double acc = 0;
            for (int64_t k = 0; k < R; k++) acc += (double)A[i * R + k] * (double)B[k * out + j];
            float *y = &f[(i - r0) * w + (j - c0)];
            *y = (float)((double)*y + acc * lo->scale);
        }
}

static int fetch_one(Rt *r, int t, float **out, char *err, size_t n) {
    const PlanTensor *pt = &r->p->tensors[t];
    StDtype sd = (StDtype)st_dtype_from_plan(pt->dtype);
    bool lead = r->c->rank == 0;
    void *raw = lead ? malloc((size_t)pt->numel * st_dtype_size(sd)) : NULL;
    *out = lead ? malloc((size_t)pt->numel * sizeof(float)) : NULL;
    int rc = lead && (!raw || !*out) ? errorf(err, n, "out of memory") : 0;
    /* every rank takes part in the gather, even one that failed */
    int g = hfio_gather(r, t, rc ? NULL : raw, NULL, err, n);
    if (!rc) rc = g;
    if (!rc && lead) st_to_f32(sd, raw, 1, *out, pt->numel);
    free(raw);
    return rc;
}

int hf_lora_fetch(Rt *r, const HfLora *lo, float **fa, float **fb, char *err, size_t n) {
    *fa = *fb = NULL;
    int rc = fetch_one(r, lo->a, fa, err, n);
    int k = fetch_one(r, lo->b, fb, err, n);
    return rc ? rc : k;
}
