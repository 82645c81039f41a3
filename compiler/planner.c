/* planner: planner_run (compiler/planner.h), the driver. The search for a
 * placement is a pipeline: enumerate the candidate placements -> build the
 * schedule of one (planner_build.c) -> check that its arenas fit the target
 * -> cost it (runtime/plan/cost.h) -> keep the fastest. Each stage adds its
 * reasons to the explanation --explain prints; when nothing fits, the
 * diagnostics say why. */
#include "planner_impl.h"
#include "loss_chunk.h"
#include "mlp_tile.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"
#include "verify.h"

/* ---- the search's state ---- */

typedef struct Search {
    PlanBuilder *b;
    Arena *a;
    DiagSink *d;
    const PlannerOptions *o;
    PlText ex;                       /* the explanation */
    uint64_t need[PC_COUNT];       /* model states per rank, by class */
    uint64_t ckpt_bytes;           /* every checkpoint */
    Place best;
    double best_time;
    Plan *plan;                    /* the fastest so far, or NULL */
    bool any_state_fit, any_pins_met;
    char last_why[512];            /* why the last candidate did not fit */
    int tried;                     /* builds */
    /* what cost_and_keep found of the plan it kept last, while no build
     * followed (kept_tried == tried) and nothing restored another: its
     * cost (no times per instruction) and its hoisted bytes, not worked
     * out again for the refinement and the last line */
    CostResult kept_cost;
    uint64_t kept_hoisted;
    int kept_tried;
    bool overlap_auto;             /* optimizer_overlap "auto": the orders are costed */
    bool host;                     /* the host backend: CPU Adams share the kernels' cores */
} Search;

/* What came of a candidate: OUT_ERROR has been reported to the DiagSink and
 * ends the search. */
typedef enum Outcome { OUT_ERROR = -1, OUT_NOFIT = 0, OUT_PLACED = 1 } Outcome;

static void state_bytes(const PlanBuilder *b, uint64_t per_class[PC_COUNT]) {
    memset(per_class, 0, sizeof(uint64_t) * PC_COUNT);
    for (int i = 0; i < b->g->ntensors; i++) {
        const GTensor *t = &b->g->tensors[i];
        if (t->cls == TC_PARAM) per_class[PC_PARAMS] += pl_shard_bytes(b, i);
        else if (t->cls == TC_GRAD && t->param >= 0) per_class[PC_GRADS] += pl_shard_bytes(b, i);
        else if ((t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE) && t->param >= 0)
            per_class[PC_OPTIMIZER] += pl_shard_bytes(b, i);
    }
}

static const char *place_str(const Place *pl, char *buf, size_t n) {
    snprintf(buf, n, "params=%s grads=%s optimizer=%s checkpoints=%s", plan_tier_names[pl->tier[PC_PARAMS]],
             plan_tier_names[pl->tier[PC_GRADS]], plan_tier_names[pl->tier[PC_OPTIMIZER]],
             plan_tier_names[pl->tier[PC_CHECKPOINTS]]);
    return buf;
}

/* The bytes of optimizer state plan p reads from NVMe in the backward
 * for Adams that step after it (the optimizer's first reads, hoisted: not
 * those of an Adam stepped in the backward itself). 0 when out of memory. */
static uint64_t plan_hoisted_bytes(const Plan *p) {
    /* one pass: per parameter, whether a CPU Adam steps it in the backward
     * and the bytes of its state read from NVMe there */
    uint8_t *early = p ? calloc(p->ntensors + 1, 1) : NULL;
    uint64_t *read = p ? calloc(p->ntensors + 1, sizeof *read) : NULL;
    if (!early || !read) {
        free(early);
        free(read);
        return 0;
    }
    for (uint32_t i = 0; i < p->opt_begin && i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op == PI_CPU_ADAM && s->arg >= 0 && (uint32_t)s->arg < p->ntensors) early[s->arg] = 1;
        const PlanOperand *o = s->nopnd ? &p->operands[s->opnd] : NULL;
        if (s->op != PI_NVME_READ || !o || o->buffer < 0) continue;
        int32_t t = p->buffers[o->buffer].tensor;
        if (t < 0 || (uint32_t)t >= p->ntensors) continue;
        const PlanTensor *x = &p->tensors[t];
        bool state = x->cls == TC_MASTER || x->cls == TC_MOMENTUM || x->cls == TC_VARIANCE;
        if (state && x->param >= 0 && (uint32_t)x->param < p->ntensors) read[x->param] += o->bytes;
    }
    uint64_t n = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (!early[t]) n += read[t];
    free(early);
    free(read);
    return n;
}

/* How the build's optimizer runs, for the explanation: "" when serial
 * (its first reads hoisted into the backward count as not serial). */
static const char *overlap_str(const PlanBuilder *b, uint64_t hoisted, char *buf, size_t n) {
    char s1[32], s2[32], s3[96];
    s3[0] = 0;
    if (hoisted) snprintf(s3, sizeof s3, ", optimizer state read from NVMe in the backward (%s)", plan_bytes_str(hoisted, s2, sizeof s2));
    if (!b->early_any) {
        snprintf(buf, n, "%s", s3);
        return buf;
    }
    if (!b->nspec) snprintf(buf, n, ", optimizer in the backward%s", s3);
    else if (!b->spec_nvme_bytes)
        snprintf(buf, n, ", optimizer speculative in the backward (twins and backups %s)%s",
                 plan_bytes_str(b->spec_copy_bytes, s1, sizeof s1), s3);
    else
        snprintf(buf, n, ", optimizer speculative in the backward (twins and backups %s in CPU memory, twins %s on NVMe)%s",
                 plan_bytes_str(b->spec_copy_bytes, s1, sizeof s1), plan_bytes_str(b->spec_nvme_bytes, s2, sizeof s2), s3);
    return buf;
}

/* ---- before the search: the target and the partition ---- */

/* The target as planned: o->ranks overrides its ranks (the same machines,
 * fewer or more of them). */
static Target ranked_target(const Target *t, const PlannerOptions *o) {
    Target local = *t;
    if (o->ranks > 0) {
        if (!strcmp(t->backend, "host") || o->ranks < t->gpus_per_node) {
            local.nodes = 1;
            local.gpus_per_node = o->ranks;
        } else {
            local.nodes = (o->ranks + t->gpus_per_node - 1) / t->gpus_per_node;
        }
    }
    return local;
}

/* The ranks and what each may use of every tier; false (reported) when the
 * target has no ranks or the plan block pins state to NVMe it lacks. */
static bool setup(PlanBuilder *b, const Graph *g, const Target *t, const PlannerOptions *o, DiagSink *d) {
    b->g = g;
    b->t = t;
    b->o = o;
    b->d = d;
    b->R = o->ranks > 0 ? o->ranks : target_ranks(t);
    if (b->R < 1) {
        diag_error(d, SPAN_NONE, "target '%s' has no ranks", t->name);
        return false;
    }
    b->cap[ARENA_GPU] = pl_gpu_capacity(t);
    /* the chunked loss's and the tiled MLP's workspaces, outside the arenas, are kept free; or, when
     * zinfc knows them from a first plan's kernels, everything zinfrun allocates beside the arena */
    uint64_t lws = loss_chunk_workspace_bytes(g), mws = mlp_tile_workspace_bytes(g);
    uint64_t keep = o->gpu_keep > lws + mws ? o->gpu_keep : lws + mws;
    b->cap[ARENA_GPU] = b->cap[ARENA_GPU] > keep ? b->cap[ARENA_GPU] - keep : 0;
    b->loss_ws = lws;
    b->mlp_ws = mws;
    b->cap[ARENA_CPU] = b->cap[ARENA_PINNED] = pl_cpu_capacity(t);
    b->cap[ARENA_NVME] = t->nvme_capacity / (uint64_t)(t->gpus_per_node > 0 ? t->gpus_per_node : 1);
    for (int c = 0; c < PC_COUNT; c++)
        if (o->tier[c] == TIER_NVME && !b->cap[ARENA_NVME]) {
            diag_error(d, SPAN_NONE, "the plan block puts %s on \"nvme\", but target '%s' has no NVMe", planner_class_names[c], t->name);
            diag_hint(d, "add an nvme { paths = [...]; capacity = ... } block to the target, or pin \"cpu\"");
            return false;
        }
    return true;
}

/* The first lines of the explanation: the target, the tiled parameters, the
 * partition; and the model states per rank the search places (S->need). */
static void explain_partition(Search *S) {
    const PlanBuilder *b = S->b;
    const Graph *g = b->g;
    const Target *t = b->t;
    bool host = !strcmp(t->backend, "host");
    char s1[32], s2[32], s3[32], s4[160];
    pl_say(&S->ex, "target %s: %d rank%s (%s), %s %s, %s CPU memory and %s NVMe per rank", t->name, b->R, b->R > 1 ? "s" : "",
        host ? "host processes" : arena_printf(S->a, "%d node%s x %d GPUs", t->nodes, t->nodes > 1 ? "s" : "", t->gpus_per_node),
        plan_bytes_str(b->cap[ARENA_GPU], s1, sizeof s1),
        b->o->gpu_keep > b->loss_ws + b->mlp_ws
            ? arena_printf(S->a, "%s (%s kept for the kernel and cuBLASLt workspaces and collective scratch beside the arena, "
                                 "as the first plan's kernels need)",
                           host ? "working budget" : "GPU memory usable", plan_bytes_str(b->o->gpu_keep, s4, sizeof s4))
        : b->loss_ws || b->mlp_ws
            ? arena_printf(S->a, "%s (%s kept for the %s workspace)", host ? "working budget" : "GPU memory usable",
                           plan_bytes_str(b->loss_ws + b->mlp_ws, s4, sizeof s4),
                           !b->mlp_ws ? "chunked loss's" : !b->loss_ws ? "tiled MLP's" : "chunked loss's and the tiled MLP's")
            : host ? "working budget" : "GPU memory usable",
        plan_bytes_str(b->cap[ARENA_CPU], s2, sizeof s2), b->cap[ARENA_NVME] ? plan_bytes_str(b->cap[ARENA_NVME], s3, sizeof s3) : "no");
    if (host) /* the tiers keep the plan block's names; on this backend the first is not a GPU */
        pl_say(&S->ex, "host backend: the tier called gpu (plan { ... = \"gpu\" }) is each rank's device arena, in host memory; "
               "compute is the host kernels");
    int nsplit = 0, nwhole = 0, ntiled = 0;
    for (int i = 0; i < g->ntensors; i++) {
        if (g->tensors[i].cls != TC_PARAM) continue;
        if (b->part[i]) nsplit++;
        else nwhole++;
        if (b->ntiles[i] > 1) {
            if (ntiled < 6)
                pl_say(&S->ex, "tile %s %s in %d tiles of %" PRId64 " %s: %s whole, %s", pl_tname(b, i),
                    graph_shape_str(g, i, s4, sizeof s4), b->ntiles[i], g->tensors[i].dims[0] / b->ntiles[i],
                    g->tensors[i].rank != 3 ? "rows" : g->tensors[i].dims[0] == b->ntiles[i] ? "expert" : "experts",
                    plan_bytes_str(pl_ebytes(b, i, g->tensors[i].numel), s1, sizeof s1),
                    b->tile_pinned[i] ? "pinned by the plan block" : "more than 1/16 of GPU memory");
            ntiled++;
        }
    }
    if (ntiled > 6) pl_say(&S->ex, "... and %d more tiled parameters", ntiled - 6);
    if (b->R > 1)
        pl_say(&S->ex, "partition: %d parameters split over %d ranks (slices padded to 4096 bytes), %d under %" PRId64
                    " elements whole on every rank", nsplit, b->R, nwhole, S->o->whole_below);
    else
        pl_say(&S->ex, "partition: one rank, every tensor whole");
    state_bytes(b, S->need);
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].cls == TC_CKPT) S->ckpt_bytes += (uint64_t)g->tensors[i].numel * (uint64_t)pl_dsz(b, i);
    pl_say(&S->ex, "model states per rank: params %s, grads %s, optimizer %s", plan_bytes_str(S->need[PC_PARAMS], s1, sizeof s1),
        plan_bytes_str(S->need[PC_GRADS], s2, sizeof s2), plan_bytes_str(S->need[PC_OPTIMIZER], s3, sizeof s3));
    int nfrozen;
    graph_frozen_count(g, &nfrozen);
    if (nfrozen)
        pl_say(&S->ex, "frozen: %d parameter tensors placed and fetched like the others, with no gradient or optimizer state "
                    "(no reduce-scatter, no Adam)", nfrozen);
    uint64_t qbytes = 0, qplain = 0;
    int nq = 0, qdt = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].cls == TC_PARAM && dtype_is_quant(g->tensors[i].dtype)) {
            nq++;
            qdt = g->tensors[i].dtype;
            qbytes += pl_shard_bytes(b, i);
            qplain += (uint64_t)b->ntiles[i] * (uint64_t)b->tile_shard[i] * (uint64_t)plan_dtype_size(g->train.dtype);
        }
    if (nq)
        pl_say(&S->ex, "quantized: %d frozen weights stored %s, %s per rank, %.3g of their %s in %s: their homes, fetches and "
                    "NVMe staging move these bytes; each GEMM that reads one decodes it first, a pass the predicted step "
                    "counts (its blocks read, its elements written in the compute dtype, at memory bandwidth)", nq, dtype_name((DType)qdt),
               plan_bytes_str(qbytes, s1, sizeof s1), qplain ? (double)qbytes / (double)qplain : 0.0,
               plan_bytes_str(qplain, s2, sizeof s2), dtype_name(g->train.dtype));
}

/* ---- cost and keep the best ---- */

/* The plan of the build just made, costed; kept when it is the fastest yet
 * (by more than 0.1%, so that ties go to the earlier candidate). */
static Outcome cost_and_keep(Search *S, const Place *cand) {
    PlanBuilder *b = S->b;
    char s1[32], s4[160], ov[224];
    Plan *p = pl_emit_plan(b);
    CostResult cr;
    if (!p || !cost_simulate(p, &cr)) {
        plan_free(p);
        diag_error(S->d, SPAN_NONE, "out of memory while planning");
        return OUT_ERROR;
    }
    uint64_t hoisted = plan_hoisted_bytes(p);
    pl_say(&S->ex, "  %s prefetch %d%s%s: %.4g s/step, %s peak %s", place_str(cand, s4, sizeof s4), cand->prefetch,
        cand->reuse ? ", weights kept from recompute to backward" : "", overlap_str(b, hoisted, ov, sizeof ov), cr.step_time,
        strcmp(b->t->backend, "host") ? "GPU" : "device", plan_bytes_str(b->size[ARENA_GPU], s1, sizeof s1));
    if (cr.step_time < S->best_time * 0.999) {
        S->best_time = cr.step_time;
        S->best = *cand;
        plan_free(S->plan);
        S->plan = p;
        S->kept_cost = cr;
        S->kept_cost.start = S->kept_cost.end = S->kept_cost.wait = NULL; /* freed below */
        S->kept_hoisted = hoisted;
        S->kept_tried = S->tried;
    } else {
        plan_free(p);
    }
    cost_free(&cr);
    return OUT_PLACED;
}

/* ---- build one and check it fits ---- */

/* Whether placement pl keeps some trained parameter's optimizer state on
 * tier (CPU memory: what the overlap applies to; NVMe: what the hoisted
 * reads and the NVMe overlap apply to), with b's single-parameter moves. */
static bool plan_homed_adams(const PlanBuilder *b, const Place *pl, int tier) {
    for (int t = 0; t < b->g->ntensors; t++) {
        if (b->g->tensors[t].cls != TC_PARAM || b->g->tensors[t].grad < 0) continue;
        int o = b->otier && b->otier[t] >= 0 ? b->otier[t] : pl->tier[PC_OPTIMIZER];
        if (o == tier) return true;
    }
    return false;
}

static Outcome build_one(Search *S, Place *cand, int k, bool *cpu_short, char *why, size_t n);

/* cand with look-ahead k, in the optimizer's order cand says (serial
 * unless the plan block says "on"); under "auto" the other orders that
 * apply as well, each costed (cost_and_keep keeps the fastest):
 * - with optimizer state on NVMe, its first reads hoisted into the
 *   backward, and then also its Adams stepped there where the gradients
 *   are in CPU memory and the step has no norm (no clipping, not f16). With
 *   a norm those Adams would speculate, and a step that clips redoes them
 *   by reading and writing all their state on NVMe again (early in
 *   training that is most steps): "on" still builds them;
 * - on a GPU target with state in CPU memory, those Adams overlapped. (On
 *   the host backend the CPU Adam and the kernels share the rank's cores
 *   and run one team at a time, runtime/hostk/hostk_threads.h: nothing to overlap
 *   with; NVMe transfers do overlap there.) */
static Outcome try_prefetch(Search *S, Place *cand, int k, bool *cpu_short, char *why, size_t n) {
    Outcome r = build_one(S, cand, k, cpu_short, why, n);
    if (r != OUT_PLACED || !S->overlap_auto) return r;
    bool nvme = plan_homed_adams(S->b, cand, TIER_NVME), cpu = !S->host && plan_homed_adams(S->b, cand, TIER_CPU);
    const TrainConfig *tc = &S->b->g->train;
    bool nvme_early = cand->tier[PC_GRADS] != TIER_NVME && tc->grad_accum <= 1 && !(tc->grad_clip > 0) && tc->dtype != DT_F16;
    char why2[256];
    Place other = *cand;
    if (nvme) {
        other.hoist = true;
        /* nothing to hoist (the first sub-group's gradient is on NVMe): that build is cand's again */
        if (pl_hoist_any(S->b) && build_one(S, &other, k, cpu_short, why2, sizeof why2) == OUT_ERROR) return OUT_ERROR;
        other.overlap_nvme = nvme_early;
        if (nvme_early && build_one(S, &other, k, cpu_short, why2, sizeof why2) == OUT_ERROR) return OUT_ERROR;
    }
    if (!cpu) return OUT_PLACED;
    other = *cand;
    other.overlap = true;
    other.hoist = nvme;
    return build_one(S, &other, k, cpu_short, why2, sizeof why2) == OUT_ERROR ? OUT_ERROR : OUT_PLACED;
}

/* Builds cand with look-ahead k; when its arenas fit, costs it. OUT_NOFIT
 * leaves the reason in why (and S->last_why). */
static Outcome build_one(Search *S, Place *cand, int k, bool *cpu_short, char *why, size_t n) {
    PlanBuilder *b = S->b;
    char s4[160];
    cand->prefetch = k;
    b->pl = *cand;
    if (!pl_build(b, S->a)) {
        if (b->internal) diag_error(S->d, SPAN_NONE, "internal planner error: %s", b->why);
        else diag_error(S->d, SPAN_NONE, "out of memory while planning");
        return OUT_ERROR;
    }
    S->tried++;
    if (!pl_fits(b, why, n)) {
        *cpu_short |= !strncmp(why, "CPU memory", 10);
        snprintf(S->last_why, sizeof S->last_why, "%s (%s, prefetch %d)", why, place_str(cand, s4, sizeof s4), k);
        return OUT_NOFIT;
    }
    return cost_and_keep(S, cand);
}

/* The look-aheads to try, into ks: the deepest first; if it does not fit,
 * the least (if that does not fit, nothing does), then the ones between. */
static int prefetch_order(const PlannerOptions *o, int ks[66]) {
    int kmax = o->prefetch > 0 ? o->prefetch : o->prefetch < 0 ? 0 : 4;
    int kmin = o->prefetch ? kmax : 0;
    int nk = 0;
    ks[nk++] = kmax;
    if (kmin < kmax) ks[nk++] = kmin;
    for (int k = kmax - 1; k > kmin; k--) ks[nk++] = k;
    return nk;
}

/* One placement over its look-aheads (prefetch_order): the deepest that
 * fits is built and costed, and the least as well when the deepest does
 * not fit. The least is tried first keeping the weights a recompute
 * gathered until their backward, then without; the ones between keep what
 * the least needed. */
static Outcome search_prefetch(Search *S, Place cand, bool *cpu_short) {
    int ks[66];
    int nk = prefetch_order(S->o, ks);
    char why[256], s4[160];
    Outcome r;
    cand.reuse = true;
    /* When the deepest does not fit, the least is tried next, and what it
     * says supersedes why the deepest did not fit: that the deepest does
     * not is all that matters (b->fits_only). */
    if (nk > 1) {
        S->b->fits_only = true;
        r = try_prefetch(S, &cand, ks[0], cpu_short, why, sizeof why);
        S->b->fits_only = false;
        if (r != OUT_NOFIT) return r;
    }
    int least = ks[nk > 1 ? 1 : 0];
    r = try_prefetch(S, &cand, least, cpu_short, why, sizeof why);
    if (r == OUT_NOFIT) { /* again without holding weights from recompute to backward */
        cand.reuse = false;
        r = try_prefetch(S, &cand, least, cpu_short, why, sizeof why);
    }
    if (r == OUT_NOFIT) pl_say(&S->ex, "  %s: does not fit: %s", place_str(&cand, s4, sizeof s4), why);
    if (r != OUT_PLACED || nk == 1) return r;
    for (int ki = 2; ki < nk; ki++)
        if ((r = try_prefetch(S, &cand, ks[ki], cpu_short, why, sizeof why)) != OUT_NOFIT) return r;
    return OUT_PLACED;
}

/* ---- enumerate the candidates ---- */

/* Whether the model states (and, a lower bound, every checkpoint, all live
 * at the end of the forward) fit the tiers of cand; gradients go to NVMe
 * (in cand, *grads_nvme_tried) when CPU memory is short for them. */
static bool states_fit(Search *S, Place *cand, bool *cpu_short, bool *grads_nvme_tried) {
    const PlanBuilder *b = S->b;
    const PlannerOptions *o = S->o;
    uint64_t tier_use[PLAN_NTIERS] = {0};
    for (int c = 0; c < PC_CHECKPOINTS; c++) tier_use[cand->tier[c]] += S->need[c];
    if (tier_use[TIER_CPU] > b->cap[ARENA_CPU] && cand->tier[PC_GRADS] == TIER_CPU && b->cap[ARENA_NVME] && o->tier[PC_GRADS] < 0) {
        /* gradients go to NVMe only when CPU memory is short */
        cand->tier[PC_GRADS] = TIER_NVME;
        *grads_nvme_tried = true;
        tier_use[TIER_CPU] -= S->need[PC_GRADS];
        tier_use[TIER_NVME] += S->need[PC_GRADS];
    }
    if (tier_use[TIER_GPU] > b->cap[ARENA_GPU] || tier_use[TIER_CPU] > b->cap[ARENA_CPU] || tier_use[TIER_NVME] > b->cap[ARENA_NVME])
        return false;
    S->any_state_fit = true;
    /* every checkpoint is live at the end of the forward: a lower bound */
    tier_use[cand->tier[PC_CHECKPOINTS]] += S->ckpt_bytes;
    static const int tier_arena[PLAN_NTIERS] = {ARENA_GPU, ARENA_CPU, ARENA_NVME};
    int over = -1;
    for (int k = 0; k < PLAN_NTIERS; k++)
        if (tier_use[k] > b->cap[tier_arena[k]]) over = k;
    if (over < 0) return true;
    char s1[32], s2[32], s4[160];
    *cpu_short |= over == TIER_CPU;
    pl_say(&S->ex, "  %s: does not fit: model states and checkpoints need %s of %s per rank, it has %s", place_str(cand, s4, sizeof s4),
        plan_bytes_str(tier_use[over], s1, sizeof s1), plan_tier_names[over], plan_bytes_str(b->cap[tier_arena[over]], s2, sizeof s2));
    snprintf(S->last_why, sizeof S->last_why, "model states and checkpoints need %s of %s per rank, it has %s (%s)",
             plan_bytes_str(tier_use[over], s1, sizeof s1), plan_tier_names[over],
             plan_bytes_str(b->cap[tier_arena[over]], s2, sizeof s2), place_str(cand, s4, sizeof s4));
    return false;
}

/* One placement: against the plan block's pins and the target's tiers, then
 * over its look-aheads. */
static Outcome try_placement(Search *S, Place cand, bool *cpu_short, bool *grads_nvme_tried) {
    const PlannerOptions *o = S->o;
    bool pinned_out = false;
    for (int c = 0; c < PC_COUNT; c++) pinned_out |= o->tier[c] >= 0 && o->tier[c] != cand.tier[c];
    if (pinned_out) return OUT_NOFIT;
    S->any_pins_met = true;
    if (!S->b->cap[ARENA_NVME] &&
        (cand.tier[PC_PARAMS] == TIER_NVME || cand.tier[PC_OPTIMIZER] == TIER_NVME || cand.tier[PC_CHECKPOINTS] == TIER_NVME))
        return OUT_NOFIT;
    if (!states_fit(S, &cand, cpu_short, grads_nvme_tried)) return OUT_NOFIT;
    return search_prefetch(S, cand, cpu_short);
}

/* The candidate with these tiers for parameters, optimizer state and
 * checkpoints; gradients live where the optimizer steps (GPU), else in CPU
 * memory unless the plan block pins them to NVMe. A placement whose
 * gradients do not fit in CPU memory (homes or staging) is tried again with
 * the gradients on NVMe. */
static Outcome try_candidate(Search *S, int params, int optimizer, int ckpts) {
    const PlannerOptions *o = S->o;
    Place cand;
    memset(&cand, 0, sizeof cand);
    cand.tier[PC_PARAMS] = params;
    cand.tier[PC_OPTIMIZER] = optimizer;
    cand.tier[PC_GRADS] = optimizer == TIER_GPU ? TIER_GPU : o->tier[PC_GRADS] == TIER_NVME ? TIER_NVME : TIER_CPU;
    cand.tier[PC_CHECKPOINTS] = ckpts;
    /* the class search in the serial order ("on": every overlapped form);
     * "auto" costs the other forms with each candidate (try_prefetch) and
     * refines the chosen placement in the other order too (refine) */
    cand.overlap = cand.overlap_nvme = cand.hoist = o->overlap > 0;
    bool cpu_short = false, grads_nvme_tried = false;
    Outcome r = try_placement(S, cand, &cpu_short, &grads_nvme_tried);
    if (r != OUT_NOFIT) return r;
    if (!cpu_short || grads_nvme_tried || cand.tier[PC_GRADS] != TIER_CPU || o->tier[PC_GRADS] >= 0 || !S->b->cap[ARENA_NVME])
        return OUT_NOFIT;
    cand.tier[PC_GRADS] = TIER_NVME;
    return try_placement(S, cand, &cpu_short, &grads_nvme_tried);
}

/* Every candidate: parameters' tier outermost, then the optimizer's, then
 * the checkpoints', each GPU, CPU, NVMe. */
static Outcome search_placements(Search *S) {
    static const int order[] = {TIER_GPU, TIER_CPU, TIER_NVME};
    for (int ip = 0; ip < 3; ip++)
        for (int io = 0; io < 3; io++)
            for (int ic = 0; ic < 3; ic++)
                if (try_candidate(S, order[ip], order[io], order[ic]) == OUT_ERROR) return OUT_ERROR;
    return S->plan ? OUT_PLACED : OUT_NOFIT;
}

/* ---- after the search ---- */

/* Why no candidate was left: the pins, the model states, or the builds. */
static void report_no_plan(const Search *S) {
    const PlannerOptions *o = S->o;
    DiagSink *d = S->d;
    if (!S->any_pins_met) {
        /* Gradients live where the optimizer steps: a pin against that
         * rule leaves no candidate at all, whatever the memory. */
        const char *gt = o->tier[PC_GRADS] >= 0 ? plan_tier_names[o->tier[PC_GRADS]] : NULL;
        const char *ot = o->tier[PC_OPTIMIZER] >= 0 ? plan_tier_names[o->tier[PC_OPTIMIZER]] : NULL;
        if (gt && o->tier[PC_GRADS] == TIER_GPU)
            diag_error(d, SPAN_NONE, "grads = \"gpu\" needs optimizer = \"gpu\"%s%s%s: gradients stay where the optimizer steps",
                       ot ? " (the plan block says \"" : "", ot ? ot : "", ot ? "\")" : "");
        else if (gt && ot && o->tier[PC_OPTIMIZER] == TIER_GPU)
            diag_error(d, SPAN_NONE, "optimizer = \"gpu\" keeps the gradients in GPU memory, but the plan block says grads = \"%s\"", gt);
        else diag_error(d, SPAN_NONE, "no placement satisfies the plan block's pins");
        diag_hint(d, "pin fewer classes in the plan block and let the planner choose the rest");
        return;
    }
    if (S->any_state_fit) {
        diag_error(d, SPAN_NONE, "no placement fits the target: %s", S->last_why);
        diag_hint(d, "tile large parameters (plan { tiles \"name\" = N }), lower the micro-batch, or checkpoint more often");
        return;
    }
    const PlanBuilder *b = S->b;
    uint64_t total = S->need[PC_PARAMS] + S->need[PC_GRADS] + S->need[PC_OPTIMIZER];
    uint64_t gpu_all = b->cap[ARENA_GPU] * (uint64_t)b->R, cpu_all = b->cap[ARENA_CPU] * (uint64_t)b->R,
             nvme_all = b->cap[ARENA_NVME] * (uint64_t)b->R;
    char s1[32], s2[32], s3[32], s4[32], s5[32];
    /* A tier the plan block's pins overfill is the cause: named first,
     * with its shortfall (the totals alone do not say which tier). */
    static const int arena_of[PLAN_NTIERS] = {ARENA_GPU, ARENA_CPU, ARENA_NVME};
    bool pinned = false, named = false;
    for (int c = 0; c < PC_COUNT; c++) pinned |= o->tier[c] >= 0;
    for (int t = 0; t < PLAN_NTIERS; t++) {
        uint64_t pinned_need = 0;
        char classes[96] = "";
        for (int c = 0; c < PC_CHECKPOINTS; c++)
            if (o->tier[c] == t) {
                pinned_need += S->need[c];
                size_t u = strlen(classes);
                snprintf(classes + u, sizeof classes - u, "%s%s", u ? " and " : "", planner_class_names[c]);
            }
        uint64_t cap = b->cap[arena_of[t]];
        if (!pinned_need || pinned_need <= cap) continue;
        diag_error(d, SPAN_NONE, "the plan block puts %s on %s: %s per rank, more than the target's %s of %s per rank (short by %s)",
                   classes, plan_tier_names[t], plan_bytes_str(pinned_need, s1, sizeof s1), plan_bytes_str(cap, s2, sizeof s2),
                   plan_tier_names[t], plan_bytes_str(pinned_need - cap, s3, sizeof s3));
        named = true;
    }
    if (named) {
        diag_hint(d, "give that tier more room in the target (its capacity or memory), plan for more ranks, or pin less");
        return;
    }
    /* by how much, when even every tier together is too small */
    uint64_t all = gpu_all + cpu_all + nvme_all, need_all = total * (uint64_t)b->R;
    char short_by[64] = "", s6[32];
    if (need_all > all) snprintf(short_by, sizeof short_by, ": %s short", plan_bytes_str(need_all - all, s6, sizeof s6));
    diag_error(d, SPAN_NONE, "model states need %s (%s per rank over %d rank%s); the target has %s GPU memory, %s CPU memory and %s%s%s",
               plan_bytes_str(need_all, s1, sizeof s1), plan_bytes_str(total, s2, sizeof s2), b->R,
               b->R > 1 ? "s" : "", plan_bytes_str(gpu_all, s3, sizeof s3), plan_bytes_str(cpu_all, s4, sizeof s4),
               nvme_all ? plan_bytes_str(nvme_all, s5, sizeof s5) : "no NVMe", nvme_all ? " NVMe" : "", short_by);
    if (pinned) diag_hint(d, "the plan block pins where state lives; unpin it to let the planner use every tier");
    else diag_hint(d, "add NVMe to the target, more ranks, or more CPU memory");
}

/* The refinement of the chosen placement (planner_refine.c), and the split
 * of each class it leaves. */
static bool refine_failed(Search *S) {
    if (S->b->internal) diag_error(S->d, SPAN_NONE, "internal planner error: %s", S->b->why);
    else diag_error(S->d, SPAN_NONE, "out of memory while planning");
    return false;
}

/* Whether plan p steps CPU Adams in the backward (the optimizer overlapped). */
static bool plan_overlaps(const Plan *p) {
    for (uint32_t i = 0; p && i < p->opt_begin; i++)
        if (p->instrs[i].op == PI_CPU_ADAM) return true;
    return false;
}


/* The cost of S->plan, where cost_and_keep costed it and no build followed. */
static const CostResult *kept_cost(const Search *S) { return S->kept_tried == S->tried ? &S->kept_cost : NULL; }

static bool refine(Search *S) {
    PlanBuilder *b = S->b;
    int nt = b->g->ntensors;
    /* the tiers before any refinement, and after the first */
    int8_t *tiers0 = ARENA_NEWN(S->a, int8_t, 2 * (size_t)nt + 2), *tiers1 = ARENA_NEWN(S->a, int8_t, 2 * (size_t)nt + 2);
    if (!tiers0 || !tiers1) return refine_failed(S);
    memset(tiers0, -1, 2 * (size_t)nt + 2);
    if (b->ptier) memcpy(tiers0, b->ptier, (size_t)nt), memcpy(tiers0 + nt, b->otier, (size_t)nt);
    b->pl = S->best;
    if (!pl_refine(b, S->a, &S->ex, &S->plan, &S->best_time, &S->tried, kept_cost(S))) return refine_failed(S);
    /* "auto" on a GPU target: the chosen placement with the optimizer
     * overlapped, refined as well, where some Adam steps state in CPU
     * memory. (On the host backend the CPU Adam and the kernels share the
     * rank's cores and run one team at a time, runtime/hostk/hostk_threads.h:
     * nothing to overlap with.) Which parameters' state is worth which tier
     * depends on whether the CPU optimizer hides behind the backward, so
     * each order is refined from the placement on its own. */
    if (S->overlap_auto && !S->host && plan_homed_adams(b, &S->best, TIER_CPU)) {
        Plan *plan1 = S->plan;
        double time1 = S->best_time;
        Place best1 = S->best;
        memcpy(tiers1, b->ptier, (size_t)nt);
        memcpy(tiers1 + nt, b->otier, (size_t)nt);
        memcpy(b->ptier, tiers0, (size_t)nt);
        memcpy(b->otier, tiers0 + nt, (size_t)nt);
        S->plan = NULL;
        S->best_time = INFINITY;
        Place other = best1;
        other.overlap = !best1.overlap;
        char why[256];
        pl_say(&S->ex, "the same placement with the optimizer %s, refined as well:",
               other.overlap ? "overlapped with the backward" : "after the backward");
        Outcome r = build_one(S, &other, other.prefetch, &(bool){false}, why, sizeof why);
        if (r == OUT_ERROR) {
            plan_free(plan1);
            return false;
        }
        if (r == OUT_PLACED) {
            b->pl = S->best;
            if (!pl_refine(b, S->a, &S->ex, &S->plan, &S->best_time, &S->tried, kept_cost(S))) {
                plan_free(plan1);
                return refine_failed(S);
            }
        }
        const char *o1 = best1.overlap ? "overlapped" : "serial", *o2 = other.overlap ? "overlapped" : "serial";
        if (r == OUT_PLACED && S->best_time < time1 * 0.999) {
            pl_say(&S->ex, "kept the %s order: %.4g s/step against %.4g %s", o2, S->best_time, time1, o1);
            plan_free(plan1);
        } else {
            if (r == OUT_PLACED) pl_say(&S->ex, "kept the %s order: %.4g s/step against %.4g %s", o1, time1, S->best_time, o2);
            else pl_say(&S->ex, "kept the %s order: %.4g s/step (%s, it does not fit)", o1, time1, o2);
            plan_free(S->plan);
            S->plan = plan1;
            S->kept_tried = -1; /* S->plan is no longer the one cost_and_keep kept last */
            S->best_time = time1;
            S->best = best1;
            b->pl = best1;
            memcpy(b->ptier, tiers1, (size_t)nt);
            memcpy(b->otier, tiers1 + nt, (size_t)nt);
        }
    }
    pl_explain_split(b, S->plan, &S->ex);
    return true;
}

/* The last line of the explanation, and the independent check of what is
 * handed on (runtime/plan/verify.c). */
static bool finish(Search *S) {
    char s4[160], s1[32], hs[96] = "";
    bool early = plan_overlaps(S->plan);
    uint64_t hoisted = S->kept_tried == S->tried ? S->kept_hoisted : plan_hoisted_bytes(S->plan);
    if (hoisted)
        snprintf(hs, sizeof hs, ", optimizer state read from NVMe in the backward (%s)", plan_bytes_str(hoisted, s1, sizeof s1));
    pl_say(&S->ex, "chosen: %s, prefetch %d%s%s%s (of %d builds): %.4g s/step predicted", place_str(&S->best, s4, sizeof s4),
        S->best.prefetch, S->best.reuse ? ", weights kept from recompute to backward" : "",
        !early ? "" : plan_speculative(S->plan) ? ", optimizer overlapped with the backward (speculative)" :
        ", optimizer overlapped with the backward", hs, S->tried, S->best_time);
    if (S->o->verify_by_caller) return true;
    char vm[1024];
    int problems = verify_plan(S->plan, vm, sizeof vm);
    return planner_verified(problems, vm, S->d);
}

bool planner_verified(int problems, char *msgs, DiagSink *d) {
    if (!problems) return true;
    char *nl = strchr(msgs, '\n');
    if (nl) *nl = 0;
    diag_error(d, SPAN_NONE, "internal planner error: the plan fails verification (%d problem%s): %s", problems,
               problems > 1 ? "s" : "", msgs);
    return false;
}

/* ---- the driver ---- */

bool planner_run(const Graph *g, const Target *t, const PlannerOptions *o, Arena *a, DiagSink *d, PlannerResult *out) {
    memset(out, 0, sizeof *out);
    PlannerOptions defopt;
    if (!o) {
        planner_options_default(&defopt);
        o = &defopt;
    }
    Target local = ranked_target(t, o);
    PlanBuilder b = {0};
    Search S = {.b = &b, .a = a, .d = d, .o = o, .best_time = INFINITY,
                .overlap_auto = o->overlap == 0, .kept_tried = -1, .host = strcmp(local.backend, "host") == 0};
    bool ok = setup(&b, g, &local, o, d) && pl_partition(&b, a) && pl_apply_pins(&b, a);
    if (ok) {
        explain_partition(&S);
        Outcome r = search_placements(&S);
        if (r == OUT_NOFIT) report_no_plan(&S);
        ok = r == OUT_PLACED && refine(&S) && finish(&S);
    }
    if (ok) {
        out->plan = S.plan;
        out->step_time = S.best_time;
        out->explain = arena_strdup(a, S.ex.s ? S.ex.s : "");
    } else {
        plan_free(S.plan);
    }
    free(S.ex.s);
    pl_table_free(b.bufs, b.cbufs, sizeof *b.bufs);
    pl_table_free(b.ins, b.cins, sizeof *b.ins);
    free(b.spec);
    pl_table_free(b.opnds, b.copnds, sizeof *b.opnds);
    free(b.reqs);
    return ok;
}
