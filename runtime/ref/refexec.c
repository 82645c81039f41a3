#include "refexec.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "half.h"
#include "adam.h"
#include "hostk.h"
#include "graph_plan.h"
#include "initrng.h"

static int fail(RefExec *r, const char *fmt, const char *a) {
    snprintf(r->err, sizeof r->err, fmt, a ? a : "");
    return -1;
}

static size_t tensor_bytes(const GTensor *t) {
    int es = (int)hk_dtype_size(t->dtype);
    return (size_t)(t->numel > 0 ? t->numel : 1) * (size_t)(es ? es : 4);
}

double ref_get(const RefExec *r, int t, int64_t i) {
    const GTensor *gt = &r->g->tensors[t];
    const void *p = r->buf[t];
    switch (gt->dtype) {
    case DT_BF16: return half_bf16_to_f32(((const uint16_t *)p)[i]);
    case DT_F16: return half_f16_to_f32(((const uint16_t *)p)[i]);
    case DT_I32: return ((const int32_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

void ref_set(RefExec *r, int t, int64_t i, double v) {
    const GTensor *gt = &r->g->tensors[t];
    void *p = r->buf[t];
    switch (gt->dtype) {
    case DT_BF16: ((uint16_t *)p)[i] = half_f32_to_bf16((float)v); break;
    case DT_F16: ((uint16_t *)p)[i] = half_f32_to_f16((float)v); break;
    case DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

int ref_init(RefExec *r, const Graph *g, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->g = g;
    r->loss_scale = g->train.dtype == DT_F16 ? (g->train.loss_scale > 0 ? g->train.loss_scale : 65536.0) : 1.0;
    r->buf = calloc((size_t)g->ntensors, sizeof *r->buf);
    r->ws = calloc((size_t)(g->nops ? g->nops : 1), sizeof *r->ws);
    r->ws_bytes = calloc((size_t)(g->nops ? g->nops : 1), sizeof *r->ws_bytes);
    if (!r->buf || !r->ws || !r->ws_bytes) return fail(r, "out of memory%s", NULL);
    /* The host kernels read a plan's tables: the graph's, copied once. */
    char msg[200];
    r->tables = plan_new();
    if (!r->tables) return fail(r, "out of memory%s", NULL);
    if (!graph_plan_tables(g, r->tables, msg, sizeof msg)) return fail(r, "%s", msg);
    for (int t = 0; t < g->ntensors; t++) {
        r->buf[t] = calloc(1, tensor_bytes(&g->tensors[t]));
        if (!r->buf[t]) return fail(r, "out of memory for tensor %s", g->tensors[t].name);
    }
    /* Workspace per forward op, big enough for its forward and backward. */
    for (int k = 0; k < g->nforward; k++) {
        size_t b = hk_op_workspace_bytes(r->tables, k);
        if (b) {
            r->ws[k] = calloc(1, b);
            if (!r->ws[k]) return fail(r, "out of memory for workspace of %s", prim_names[g->ops[k].prim]);
            r->ws_bytes[k] = b;
        }
    }
    /* Parameters from (seed, name, index); masters start equal to them. */
    float *tmp = NULL;
    size_t tmpn = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const GTensor *p = &g->tensors[t];
        if (p->cls != TC_PARAM) continue;
        if ((size_t)p->numel > tmpn) {
            free(tmp);
            tmpn = (size_t)p->numel;
            tmp = malloc(tmpn * sizeof *tmp);
            if (!tmp) return fail(r, "out of memory initialising %s", p->name);
        }
        init_fill_f32(tmp, 0, p->numel, seed, p->name, p->init, p->init_std);
        for (int64_t i = 0; i < p->numel; i++) ref_set(r, t, i, tmp[i]);
        if (p->master >= 0)
            for (int64_t i = 0; i < p->numel; i++) ((float *)r->buf[p->master])[i] = (float)ref_get(r, t, i);
    }
    free(tmp);
    return 0;
}

void ref_free(RefExec *r) {
    if (r->buf)
        for (int t = 0; t < r->g->ntensors; t++) free(r->buf[t]);
    if (r->ws)
        for (int k = 0; k < r->g->nops; k++) free(r->ws[k]);
    free(r->buf);
    free(r->ws);
    free(r->ws_bytes);
    if (r->tables) plan_free(r->tables);
    memset(r, 0, sizeof *r);
}

double ref_lr(const TrainConfig *t, int64_t s) {
    AdamSchedule sch = {.lr = t->lr, .warmup_steps = t->warmup_steps, .schedule = t->schedule, .min_lr = t->min_lr, .steps = t->steps};
    return adam_lr(&sch, s);
}

static int run_ops(RefExec *r, int begin, int end, float grad_scale) {
    const Graph *g = r->g;
    for (int k = begin; k < end; k++) {
        const GOp *o = &g->ops[k];
        int rc = 0;
        switch (o->kind) {
        case OP_FWD:
        case OP_RECOMPUTE: {
            int f = o->kind == OP_FWD ? k : o->fwd;
            rc = hk_op_forward(r->tables, &r->tables->ops[k], r->buf, r->ws[f], r->ws_bytes[f]);
            break;
        }
        case OP_BWD:
            rc = hk_op_backward(r->tables, &r->tables->ops[k], r->buf, r->ws[o->fwd], r->ws_bytes[o->fwd]);
            break;
        case OP_ZERO_GRAD:
            memset(r->buf[o->out[0]], 0, tensor_bytes(&g->tensors[o->out[0]]));
            break;
        case OP_LOSS_GRAD:
            ref_set(r, o->out[0], 0, grad_scale * r->loss_scale);
            break;
        default:
            break; /* optimizer ops run in ref_optimizer_step */
        }
        if (rc != 0) {
            snprintf(r->err, sizeof r->err, "%s %s (op %d): %s", op_kind_names[o->kind], prim_names[o->prim], k,
                     hk_strerror(rc));
            return -1;
        }
    }
    return 0;
}

static void set_inputs(RefExec *r, const int32_t *tokens, const int32_t *targets) {
    const Graph *g = r->g;
    const int32_t *src[2] = {tokens, targets};
    for (int i = 0; i < g->ninputs && i < 2; i++)
        if (src[i]) memcpy(r->buf[g->inputs[i]], src[i], tensor_bytes(&g->tensors[g->inputs[i]]));
}

int ref_forward(RefExec *r, const int32_t *tokens, const int32_t *targets, float *loss) {
    set_inputs(r, tokens, targets);
    if (run_ops(r, 0, r->g->nforward, 1)) return -1;
    *loss = (float)ref_get(r, r->g->loss, 0);
    return 0;
}

int ref_forward_backward(RefExec *r, const int32_t *tokens, const int32_t *targets, float grad_scale, float *loss) {
    set_inputs(r, tokens, targets);
    if (run_ops(r, 0, r->g->nbackward_end, grad_scale)) return -1;
    *loss = (float)ref_get(r, r->g->loss, 0);
    return 0;
}

int ref_optimizer_step(RefExec *r) {
    const Graph *g = r->g;
    const TrainConfig *tc = &g->train;
    /* Global gradient norm, unscaled, in double. */
    double ss = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const GTensor *p = &g->tensors[t];
        if (p->cls != TC_PARAM || p->grad < 0) continue;
        HkTensor gt = hk_plan_tensor(r->tables, p->grad, r->buf);
        ss += hk_sum_squares(&gt);
    }
    ss /= r->loss_scale * r->loss_scale;
    double norm = sqrt(ss);
    r->last_grad_norm = norm;
    r->skipped = false;
    if (!isfinite(norm)) {
        if (tc->dtype == DT_F16) {
            r->loss_scale /= 2;
            r->good_steps = 0;
            r->skipped = true;
        } else {
            snprintf(r->err, sizeof r->err, "the gradient norm is not finite (%g): training diverged", norm);
            return -1;
        }
    }
    if (!r->skipped) {
        r->step++;
        double lr = ref_lr(tc, r->step);
        double clip = tc->grad_clip > 0 ? fmin(1.0, tc->grad_clip / (norm + 1e-6)) : 1.0;
        HkAdam ad = {.lr = lr, .beta1 = tc->beta1, .beta2 = tc->beta2, .eps = tc->eps,
                     .weight_decay = tc->weight_decay, .step = r->step, .grad_scale = clip / r->loss_scale};
        for (int t = 0; t < g->ntensors; t++) {
            const GTensor *p = &g->tensors[t];
            if (p->cls != TC_PARAM || p->grad < 0) continue;
            HkTensor pt = hk_plan_tensor(r->tables, t, r->buf), gt = hk_plan_tensor(r->tables, p->grad, r->buf);
            DType mdt = g->tensors[p->momentum].dtype, vdt = g->tensors[p->variance].dtype;
            if (mdt != DT_F32) {
                /* bf16 or 8-bit moments (train { optimizer = adam(state) }): the
                 * runtime's Adam on the whole tensor, whose blocks start where
                 * every shard layout's do */
                AdamParams ap = {.lr = (float)lr, .beta1 = (float)tc->beta1, .beta2 = (float)tc->beta2, .eps = (float)tc->eps,
                                 .weight_decay = p->no_decay ? 0.f : (float)tc->weight_decay};
                float *w = p->master >= 0 ? r->buf[p->master] : r->buf[t];
                AdamStatus as = adam_step_state(&ap, r->step, w, r->buf[p->momentum], r->buf[p->variance], w, r->buf[p->momentum],
                                                r->buf[p->variance], mdt, vdt, gt.data, gt.dtype, p->master >= 0 ? pt.data : NULL,
                                                pt.dtype, p->numel, (float)(clip / r->loss_scale));
                if (as != ADAM_OK) {
                    snprintf(r->err, sizeof r->err, "adamw on %s: %s", p->name, adam_status_str(as));
                    return -1;
                }
                continue;
            }
            int rc = hk_adamw(&pt, &gt, p->master >= 0 ? r->buf[p->master] : NULL, r->buf[p->momentum],
                              r->buf[p->variance], &ad);
            if (rc) {
                snprintf(r->err, sizeof r->err, "adamw on %s: %s", p->name, hk_strerror(rc));
                return -1;
            }
        }
        if (tc->dtype == DT_F16 && ++r->good_steps >= 1000) {
            r->loss_scale *= 2;
            r->good_steps = 0;
        }
    }
    for (int t = 0; t < g->ntensors; t++) {
        const GTensor *p = &g->tensors[t];
        if (p->cls == TC_PARAM && p->grad >= 0) memset(r->buf[p->grad], 0, tensor_bytes(&g->tensors[p->grad]));
    }
    return 0;
}
