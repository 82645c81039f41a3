/* planner_optim: the instructions of the optimizer phase (gradient norm,
 * Adam in sub-groups with its state staged through pinned memory, zeroing
 * of gradients). */
#include "planner_impl.h"
#include <string.h>

/* The optimizer works on sub-groups: at most ADAM_CHUNK elements of one
 * parameter's shard at a time, so its staging stays bounded however large
 * the shard (a multiple of 2048 elements, so NVMe ranges stay aligned). */
enum { ADAM_CHUNK = 1 << 25 };

struct AdamViews {
    int op;                     /* the graph's OP_ADAM */
    int64_t e0, ne;             /* the sub-group: elements [e0, e0+ne) of the shard */
    int state[3], sview[3];     /* master (or -1), momentum, variance; their views */
    uint64_t soff[3];           /* offset of the sub-group in each view */
    int pview;
    uint64_t poff;
    bool pread;
    int gview;                  /* the gradient's sub-group (NVMe grads: staged) */
    uint64_t goff;
    int backup, bmode;          /* a speculative Adam's backup (PLAN_W) or its redo's (PLAN_R); -1: none */
    bool twin;                  /* out of place: reads the state's homes, writes their twins */
    bool nvtwin;                /* state on NVMe: stepped in its staging, written to its twins on NVMe */
    bool early;                 /* in the backward: reads no gradient norm */
};
typedef struct AdamViews AdamViews;

/* Bytes of ne elements of t; a sub-group starts at a multiple of
 * ADAM_CHUNK elements, whole blocks of an 8-bit moment. */
static uint64_t ebytes(const PlanBuilder *b, int t, int64_t ne) { return pl_ebytes(b, t, ne); }

static void adam_load(PlanBuilder *b, AdamViews *v) {
    const Graph *g = b->g;
    const GOp *op = &g->ops[v->op];
    int p = op->in[0];
    int O = pl_opt_tier(b, p), P = pl_param_tier(b, p);
    v->state[0] = op->in[2];
    v->state[1] = op->in[3];
    v->state[2] = op->in[4];
    for (int k = 0; k < 3; k++) {
        int st = v->state[k];
        v->sview[k] = -1;
        v->soff[k] = 0;
        if (st < 0) continue;
        v->sview[k] = b->home[st];
        v->soff[k] = ebytes(b, st, v->e0);
        if (O == TIER_NVME) {
            uint64_t bytes = ebytes(b, st, v->ne);
            int stg = pl_newbuf(b, ARENA_PINNED, bytes, st, pl_tname(b, st), false);
            int i = pl_ins(b, PI_NVME_READ, Q_NVME, st, 0, 1, 0);
            pl_opnd(b, i, b->home[st], PLAN_R, v->soff[k], bytes);
            pl_opnd(b, i, stg, PLAN_W, 0, bytes);
            v->sview[k] = stg;
            v->soff[k] = 0;
        }
    }
    int gr = op->in[1];
    v->gview = gr >= 0 ? b->home[gr] : -1;
    v->goff = gr >= 0 ? ebytes(b, gr, v->e0) : 0;
    if (gr >= 0 && pl_grad_tier(b, p) == TIER_NVME) {
        uint64_t gb = ebytes(b, gr, v->ne);
        int stg = pl_newbuf(b, ARENA_PINNED, gb, gr, pl_tname(b, gr), false);
        int i = pl_ins(b, PI_NVME_READ, Q_NVME, gr, 0, 1, 0);
        pl_opnd(b, i, b->home[gr], PLAN_R, v->goff, gb);
        pl_opnd(b, i, stg, PLAN_W, 0, gb);
        v->gview = stg;
        v->goff = 0;
    }
    v->pread = v->state[0] < 0; /* no master: the parameter is the fp32 state */
    bool gpu = O == TIER_GPU;
    uint64_t pb = ebytes(b, p, v->ne), po = ebytes(b, p, v->e0);
    if ((gpu && P == TIER_GPU) || (!gpu && P == TIER_CPU)) {
        v->pview = b->home[p];
        v->poff = po;
        return;
    }
    v->pview = pl_newbuf(b, gpu ? ARENA_GPU : ARENA_PINNED, pb, p, pl_tname(b, p), false);
    v->poff = 0;
    if (!v->pread) return;
    if (gpu) {
        int from = b->home[p];
        uint64_t fo = po;
        if (P == TIER_NVME) {
            from = pl_newbuf(b, ARENA_PINNED, pb, p, pl_tname(b, p), false);
            fo = 0;
            int i = pl_ins(b, PI_NVME_READ, Q_NVME, p, 0, 1, 0);
            pl_opnd(b, i, b->home[p], PLAN_R, po, pb);
            pl_opnd(b, i, from, PLAN_W, 0, pb);
        }
        int i = pl_ins(b, PI_H2D, Q_H2D, p, 0, 1, 0);
        pl_opnd(b, i, from, PLAN_R, fo, pb);
        pl_opnd(b, i, v->pview, PLAN_W, 0, pb);
    } else {
        int i = P == TIER_NVME ? pl_ins(b, PI_NVME_READ, Q_NVME, p, 0, 1, 0) : pl_ins(b, PI_D2H, Q_D2H, p, 0, 1, 0);
        pl_opnd(b, i, b->home[p], PLAN_R, po, pb);
        pl_opnd(b, i, v->pview, PLAN_W, 0, pb);
    }
}

/* What a speculative Adam of sub-group v changes and cannot recompute:
 * the parameter when it is the fp32 state, the master, the moments
 * (docs/schedule.md, "The speculative optimizer"). */
static uint64_t backup_bytes(const PlanBuilder *b, const AdamViews *v) {
    uint64_t s = v->pread ? (uint64_t)v->ne * 4 : 0;
    for (int k = 0; k < 3; k++)
        if (v->state[k] >= 0) s += ebytes(b, v->state[k], v->ne);
    return s;
}

static void adam_step(PlanBuilder *b, const AdamViews *v) {
    const Graph *g = b->g;
    const GOp *op = &g->ops[v->op];
    int p = op->in[0], gr = op->in[1], gn = op->in[5];
    int O = pl_opt_tier(b, p), P = pl_param_tier(b, p);
    bool gpu = O == TIER_GPU;
    uint64_t pb = ebytes(b, p, v->ne), po = ebytes(b, p, v->e0);
    int i = pl_ins(b, gpu ? PI_GPU_ADAM : PI_CPU_ADAM, gpu ? Q_COMPUTE : Q_CPU, p, 0, 1, 10.0 * (double)v->ne);
    pl_opnd(b, i, v->pview, v->pread ? PLAN_M : PLAN_W, v->poff, pb);
    pl_opnd(b, i, v->gview, PLAN_R, v->goff, gr >= 0 ? ebytes(b, gr, v->ne) : 0);
    for (int k = 0; k < 3; k++)
        pl_opnd(b, i, v->sview[k], v->twin ? PLAN_R : PLAN_M, v->soff[k], v->state[k] >= 0 ? ebytes(b, v->state[k], v->ne) : 0);
    bool norm = gn >= 0 && !v->early;
    pl_opnd(b, i, norm ? b->cur[gn] : -1, PLAN_R, 0, norm ? 4 : 0);
    if (v->backup >= 0) pl_opnd(b, i, v->backup, v->bmode, 0, backup_bytes(b, v));
    if (v->twin)
        for (int k = 0; k < 3; k++) pl_opnd(b, i, b->twin[v->state[k]], PLAN_W, v->soff[k], ebytes(b, v->state[k], v->ne));
    if (O == TIER_NVME)
        for (int k = 0; k < 3; k++) {
            int st = v->state[k];
            if (st < 0) continue;
            uint64_t bytes = ebytes(b, st, v->ne);
            int w = pl_ins(b, PI_NVME_WRITE, Q_NVME, st, 0, 1, 0);
            pl_opnd(b, w, v->sview[k], PLAN_R, 0, bytes);
            pl_opnd(b, w, v->nvtwin ? b->twin[st] : b->home[st], PLAN_W, ebytes(b, st, v->e0), bytes);
        }
    if (gr >= 0 && pl_grad_tier(b, p) == TIER_NVME && (b->grad_rmw[gr] || b->g->train.grad_accum > 1)) {
        /* the next step accumulates into zeros */
        uint64_t gb = ebytes(b, gr, v->ne);
        int z = pl_ins(b, PI_ZERO, Q_CPU, gr, 0, 1, 0);
        pl_opnd(b, z, v->gview, PLAN_W, 0, gb);
        int w = pl_ins(b, PI_NVME_WRITE, Q_NVME, gr, 0, 1, 0);
        pl_opnd(b, w, v->gview, PLAN_R, 0, gb);
        pl_opnd(b, w, b->home[gr], PLAN_W, ebytes(b, gr, v->e0), gb);
    }
    if (v->pview == b->home[p]) return;
    if (gpu) {
        int from = v->pview;
        if (P == TIER_NVME) {
            int stg = pl_newbuf(b, ARENA_PINNED, pb, p, pl_tname(b, p), false);
            int c = pl_ins(b, PI_D2H, Q_D2H, p, 0, 1, 0);
            pl_opnd(b, c, from, PLAN_R, 0, pb);
            pl_opnd(b, c, stg, PLAN_W, 0, pb);
            int w = pl_ins(b, PI_NVME_WRITE, Q_NVME, p, 0, 1, 0);
            pl_opnd(b, w, stg, PLAN_R, 0, pb);
            pl_opnd(b, w, b->home[p], PLAN_W, po, pb);
        } else {
            int c = pl_ins(b, PI_D2H, Q_D2H, p, 0, 1, 0);
            pl_opnd(b, c, from, PLAN_R, 0, pb);
            pl_opnd(b, c, b->home[p], PLAN_W, po, pb);
        }
    } else {
        int w = P == TIER_NVME ? pl_ins(b, PI_NVME_WRITE, Q_NVME, p, 0, 1, 0) : pl_ins(b, PI_H2D, Q_H2D, p, 0, 1, 0);
        pl_opnd(b, w, v->pview, PLAN_R, 0, pb);
        /* without a master the parameter is state: a speculative step's goes to its twin */
        pl_opnd(b, w, v->nvtwin && v->pread ? b->twin[p] : b->home[p], PLAN_W, po, pb);
    }
}

/* The next sub-group after (j, e0) among the optimizer's Adam ops: false at the end. */
static bool adam_next(const PlanBuilder *b, int *j, int64_t *e0, int64_t *ne) {
    const Graph *g = b->g;
    if (*j >= 0 && g->ops[*j].kind == OP_ADAM) {
        int p = g->ops[*j].in[0];
        int64_t total = (int64_t)b->ntiles[p] * b->tile_shard[p];
        if (*e0 + *ne < total) {
            *e0 += *ne;
            *ne = total - *e0 < ADAM_CHUNK ? total - *e0 : ADAM_CHUNK;
            return true;
        }
    }
    for (int k = *j + 1; k < g->nops; k++) {
        if (g->ops[k].kind != OP_ADAM) continue;
        int p = g->ops[k].in[0];
        if (b->adam_early[p]) continue; /* stepped in the backward */
        int64_t total = (int64_t)b->ntiles[p] * b->tile_shard[p];
        *j = k;
        *e0 = 0;
        *ne = total < ADAM_CHUNK ? total : ADAM_CHUNK;
        return true;
    }
    return false;
}

/* Whether every gradient home is in GPU memory (the norm is then taken on
 * the GPU; with any on CPU or NVMe, on the CPU, where CPU Adam reads it). */
static bool grads_all_gpu(const PlanBuilder *b) {
    for (int t = 0; t < b->g->ntensors; t++)
        if (b->g->tensors[t].cls == TC_GRAD && b->home[t] >= 0 && b->bufs[b->home[t]].b.arena != ARENA_GPU) return false;
    return true;
}

/* Whether the Adam of sub-group (j, ...) reads its state from NVMe (its
 * reads are then issued before the previous sub-group steps). */
static bool adam_nvme(const PlanBuilder *b, int j) { return pl_opt_tier(b, b->g->ops[j].in[0]) == TIER_NVME; }

/* The most sub-groups whose reads are issued ahead of a step, and the
 * staging they may take (ADAM_AHEAD_BYTES, at most a sixteenth of the
 * CPU memory, or the largest sub-group's when that is more): reading
 * ahead in large windows keeps the NVMe busy in a few big batches, where
 * one sub-group at a time leaves it idle between small ones. */
enum { ADAM_AHEAD = 64 };
#define ADAM_AHEAD_BYTES ((uint64_t)64 << 20)

/* Bytes a sub-group of ne elements of Adam op j stages: its parameter,
 * gradient and state, whichever are staged (an upper bound). */
static uint64_t adam_staged_bytes(const PlanBuilder *b, int j, int64_t ne) {
    const GOp *op = &b->g->ops[j];
    uint64_t s = 0;
    for (int k = 0; k < 5 && k < op->nin; k++)
        if (op->in[k] >= 0) s += ebytes(b, op->in[k], ne);
    return s;
}

/* ---- the optimizer overlapped with the backward ---- */

/* Whether Adam op j may run in the backward (b->pl.overlap for state in
 * CPU memory, b->pl.overlap_nvme on NVMe): CPU Adam on a gradient in
 * CPU memory, one micro-batch per step (under accumulation the gradient is
 * final only in the last micro-batch, which the stream does not tell
 * apart), its state in CPU memory or on NVMe. On NVMe the state is stepped
 * in its pinned staging and, when a norm follows, written to twins on NVMe
 * (the homes stay intact for the redo); without a master the parameter is
 * state too, so it must be on NVMe then, where its twin goes. */
static bool early_eligible(const PlanBuilder *b, int j) {
    const GOp *op = &b->g->ops[j];
    int p = op->in[0];
    if (b->g->train.grad_accum > 1 || pl_grad_tier(b, p) != TIER_CPU) return false;
    int O = pl_opt_tier(b, p);
    if (O == TIER_CPU) return b->pl.overlap;
    return O == TIER_NVME && b->pl.overlap_nvme && (op->in[2] >= 0 || pl_param_tier(b, p) == TIER_NVME);
}

bool pl_overlap_prepare(PlanBuilder *b, Arena *a, int bwd_end) {
    const Graph *g = b->g;
    int nt = g->ntensors;
    if (!b->grad_final_step) {
        b->grad_final_step = ARENA_NEWN(a, int, nt + 1);
        b->adam_early = ARENA_NEWN(a, bool, nt + 1);
        if (!b->grad_final_step || !b->adam_early) {
            b->oom = true;
            return false;
        }
    }
    for (int t = 0; t < nt; t++) {
        b->grad_final_step[t] = -1;
        b->adam_early[t] = false;
    }
    b->nspec = 0;
    b->spec_copy_bytes = b->spec_nvme_bytes = 0;
    b->early_at = NULL;
    b->early_any = false;
    if (!b->pl.overlap && !b->pl.overlap_nvme) return true;
    /* the last step that flushes each parameter's gradient (step_outputs'
     * rule: a tiled op's tile > 0 flushes only the tiled parameter's) */
    for (int s = 0; s < b->nsteps; s++) {
        const Step *st = &b->steps[s];
        const GOp *op = &g->ops[st->op];
        if (!pl_is_kernel_op(op->kind) || st->op >= bwd_end) continue;
        int tp = st->ntiles > 1 ? pl_tiled_param_of(b, op) : -1;
        for (int k = 0; k < op->nout; k++) {
            int y = op->out[k];
            if (y < 0 || g->tensors[y].cls != TC_GRAD || g->tensors[y].param < 0) continue;
            int p = g->tensors[y].param;
            if (p != tp && st->tile > 0) continue;
            b->grad_final_step[p] = s;
        }
    }
    /* per step, the Adam ops whose gradient it makes final (early_at[s] ..
     * early_at[s+1] in early_op), in graph order */
    b->early_at = ARENA_NEWN(a, int, b->nsteps + 2);
    int nadam = 0;
    for (int j = 0; j < g->nops; j++) nadam += g->ops[j].kind == OP_ADAM;
    b->early_op = ARENA_NEWN(a, int, nadam + 1);
    if (!b->early_at || !b->early_op) {
        b->oom = true;
        return false;
    }
    memset(b->early_at, 0, sizeof *b->early_at * (size_t)(b->nsteps + 2));
    for (int j = 0; j < g->nops; j++) {
        int p = g->ops[j].kind == OP_ADAM ? g->ops[j].in[0] : -1;
        if (p >= 0 && b->grad_final_step[p] >= 0 && early_eligible(b, j)) b->early_at[b->grad_final_step[p] + 2]++;
    }
    for (int s = 0; s < b->nsteps; s++) b->early_at[s + 2] += b->early_at[s + 1];
    for (int j = 0; j < g->nops; j++) {
        int p = g->ops[j].kind == OP_ADAM ? g->ops[j].in[0] : -1;
        if (p >= 0 && b->grad_final_step[p] >= 0 && early_eligible(b, j)) {
            b->early_op[b->early_at[b->grad_final_step[p] + 1]++] = j;
            b->adam_early[p] = true; /* emitted in the backward: pl_emit_early_adams runs after every step */
        }
    }
    return true;
}

/* Tensor t's twin in arena (named "twin." and t's name); false: out of memory. */
static bool make_twin(PlanBuilder *b, Arena *a, int t, int arena) {
    const char *tn = pl_tname(b, t);
    char *name = ARENA_NEWN(a, char, strlen(tn) + 6);
    if (!name) {
        b->oom = true;
        return false;
    }
    memcpy(name, "twin.", 5);
    memcpy(name + 5, tn, strlen(tn) + 1);
    b->twin[t] = pl_newbuf(b, arena, pl_shard_bytes(b, t), t, name, true);
    if (b->twin[t] < 0) return false;
    b->bufs[b->twin[t]].b.flags |= PLAN_BUF_TWIN;
    if (arena == ARENA_NVME) b->spec_nvme_bytes += b->bufs[b->twin[t]].b.bytes;
    else b->spec_copy_bytes += b->bufs[b->twin[t]].b.bytes;
    return true;
}

bool pl_overlap_twins(PlanBuilder *b, Arena *a) {
    const Graph *g = b->g;
    int nt = g->ntensors;
    if (!b->twin) {
        b->twin = ARENA_NEWN(a, int, nt + 1);
        if (!b->twin) {
            b->oom = true;
            return false;
        }
    }
    for (int t = 0; t < nt; t++) b->twin[t] = -1;
    if (!b->early_at) return true;
    for (int k = 0; k < b->early_at[b->nsteps]; k++) {
        const GOp *op = &g->ops[b->early_op[k]];
        if (op->in[5] < 0) continue; /* no norm: nothing to redo */
        bool nvme = pl_opt_tier(b, op->in[0]) == TIER_NVME;
        if (!nvme && op->in[2] < 0) continue; /* CPU state without a master: backups */
        for (int s = 2; s < 5; s++)
            if (op->in[s] >= 0 && !make_twin(b, a, op->in[s], nvme ? ARENA_NVME : ARENA_CPU)) return false;
        if (nvme && op->in[2] < 0 && !make_twin(b, a, op->in[0], ARENA_NVME)) return false; /* the parameter is the state */
    }
    return true;
}

static bool spec_push(PlanBuilder *b, const AdamViews *v) {
    if (!pl_grow((void **)&b->spec, &b->cspec, b->nspec + 1, sizeof *b->spec)) {
        b->oom = true;
        return false;
    }
    b->spec[b->nspec++] = (SpecAdam){v->op, v->e0, v->ne, v->backup, v->twin, v->nvtwin};
    return true;
}

void pl_emit_early_adams(PlanBuilder *b, int s) {
    const Graph *g = b->g;
    if (!b->early_at) return;
    for (int k = b->early_at[s]; k < b->early_at[s + 1] && !b->oom; k++) {
        int j = b->early_op[k];
        const GOp *op = &g->ops[j];
        int p = op->in[0];
        b->early_any = true;
        int64_t total = (int64_t)b->ntiles[p] * b->tile_shard[p];
        for (int64_t e0 = 0; e0 < total && !b->oom; e0 += ADAM_CHUNK) {
            AdamViews v = {.op = j, .e0 = e0, .ne = total - e0 < ADAM_CHUNK ? total - e0 : ADAM_CHUNK, .backup = -1, .early = true};
            adam_load(b, &v);
            if (op->in[5] >= 0 && pl_opt_tier(b, p) == TIER_NVME) { /* a norm follows: the state's staging is a copy */
                v.nvtwin = true;
            } else if (op->in[5] >= 0 && b->twin[op->in[3]] >= 0) { /* a norm follows: speculate, out of place */
                v.twin = true;
            } else if (op->in[5] >= 0) { /* the same keeping a copy of what the step changes (no master) */
                uint64_t bb = backup_bytes(b, &v);
                v.backup = pl_newbuf(b, ARENA_CPU, bb, op->in[0], "adam_backup", false);
                v.bmode = PLAN_W;
                b->spec_copy_bytes += b->bufs[v.backup].b.bytes;
            }
            adam_step(b, &v);
            if (v.backup >= 0 || v.twin || v.nvtwin) spec_push(b, &v);
        }
    }
}

/* After the norm: the redo range, which the runtime runs only when the step
 * clips or is skipped: each speculative sub-group stepped again with the
 * norm, from its intact homes into its twins or from its restored backup,
 * its parameter written back again. */
static void emit_redo(PlanBuilder *b) {
    for (int k = 0; k < b->nspec && !b->oom; k++) {
        const SpecAdam *sa = &b->spec[k];
        AdamViews v = {.op = sa->op, .e0 = sa->e0, .ne = sa->ne, .backup = sa->backup, .bmode = PLAN_R, .twin = sa->twin,
                       .nvtwin = sa->nvtwin};
        adam_load(b, &v);
        adam_step(b, &v);
    }
}

/* What the optimizer may read ahead (ADAM_AHEAD_BYTES, at most a
 * sixteenth of the CPU memory, or the largest sub-group's staging when that
 * is more), over the sub-groups after Adam op cursor cj. */
static uint64_t adam_read_budget(const PlanBuilder *b, int cj) {
    uint64_t budget = b->cap[ARENA_CPU] / 16 < ADAM_AHEAD_BYTES ? b->cap[ARENA_CPU] / 16 : ADAM_AHEAD_BYTES;
    int64_t e0 = 0, ne = 0;
    for (int k = cj; adam_next(b, &k, &e0, &ne);) {
        uint64_t sb = adam_staged_bytes(b, k, ne);
        if (sb > budget) budget = sb;
    }
    return budget;
}

/* ---- the optimizer's first reads in the backward ---- */

/* The window pl_emit_optimizer's read-ahead loads first, into out (NULL:
 * only counted): the first sub-group and those after it within the
 * budget, all of NVMe state and none with a gradient on NVMe (that is
 * final only at the end). How many sub-groups it has. */
static int hoist_window(const PlanBuilder *b, int bwd_end, AdamViews *out) {
    int cj = bwd_end - 1, n = 0;
    int64_t e0 = 0, ne = 0;
    uint64_t budget = adam_read_budget(b, cj), ahead = 0;
    while (n <= ADAM_AHEAD && adam_next(b, &cj, &e0, &ne)) {
        int p = b->g->ops[cj].in[0];
        uint64_t sb = adam_staged_bytes(b, cj, ne);
        if (!adam_nvme(b, cj) || pl_grad_tier(b, p) == TIER_NVME || (n > 1 && ahead + sb > budget)) break;
        if (n) ahead += sb;
        if (out) out[n] = (AdamViews){.op = cj, .e0 = e0, .ne = ne, .backup = -1};
        n++;
    }
    return n;
}

bool pl_hoist_any(const PlanBuilder *b) {
    const Graph *g = b->g;
    int bwd_end = g->nbackward_end > g->nforward ? g->nbackward_end : g->nforward;
    return hoist_window(b, bwd_end, NULL) > 0;
}

bool pl_hoist_prepare(PlanBuilder *b, Arena *a, int bwd_end) {
    b->nhoist = b->hoist_done = 0;
    if (!b->pl.hoist) return true;
    if (!b->hoist) {
        b->hoist = ARENA_NEWN(a, AdamViews, ADAM_AHEAD + 1);
        b->hoist_step = ARENA_NEWN(a, int, ADAM_AHEAD + 1);
        if (!b->hoist || !b->hoist_step) {
            b->oom = true;
            return false;
        }
    }
    b->nhoist = hoist_window(b, bwd_end, b->hoist);
    /* spread over the backward's steps, so that the parameters' fetches
     * there keep their place in the NVMe queue's order */
    int first = b->nsteps;
    for (int s = 0; s < b->nsteps; s++)
        if (b->steps[s].op >= b->g->nforward) {
            first = s;
            break;
        }
    int nb = b->nsteps - first;
    for (int k = 0; k < b->nhoist; k++) b->hoist_step[k] = first + (int)((int64_t)k * nb / b->nhoist);
    return true;
}

void pl_emit_hoisted(PlanBuilder *b, int s) {
    while (b->hoist_done < b->nhoist && b->hoist_step[b->hoist_done] <= s && !b->oom) adam_load(b, &b->hoist[b->hoist_done++]);
}

void pl_emit_optimizer(PlanBuilder *b, int bwd_end) {
    const Graph *g = b->g;
    bool adam_done = false;
    for (int j = bwd_end; j < g->nops && !b->oom; j++) {
        const GOp *op = &g->ops[j];
        if (op->kind == OP_GRAD_NORM) {
            int y = op->out[0];
            bool gpu = grads_all_gpu(b);
            int buf = pl_newbuf(b, gpu ? ARENA_GPU : ARENA_PINNED, 4, y, y >= 0 ? pl_tname(b, y) : "grad_norm", false);
            int i = pl_ins(b, PI_GRAD_NORM, gpu ? Q_COMPUTE : Q_CPU, y, 0, 1, 0);
            for (int t = 0; t < g->ntensors; t++)
                if (g->tensors[t].cls == TC_GRAD && b->home[t] >= 0) pl_opnd(b, i, b->home[t], PLAN_R, 0, pl_shard_bytes(b, t));
            pl_opnd(b, i, buf, PLAN_W, 0, 4);
            if (y >= 0) b->cur[y] = buf;
            if (b->nspec) {
                b->redo_begin = (uint32_t)b->nins;
                emit_redo(b);
                b->redo_end = (uint32_t)b->nins;
            }
        } else if (op->kind == OP_ADAM && !adam_done) {
            /* every Adam, in sub-groups; for NVMe state the reads of the next
             * sub-groups are issued before this one steps: at least the next
             * one's, and more while what is read ahead stays within the
             * budget above, up to ADAM_AHEAD sub-groups; many small
             * parameters then read in a few batches instead of one at a time.
             * The first window may have been read in the backward (hoisted). */
            adam_done = true;
            int cj = j - 1;
            int64_t e0 = 0, ne = 0;
            uint64_t budget = adam_read_budget(b, cj);
            AdamViews ring[ADAM_AHEAD + 1];
            int head = 0, n = 0;
            uint64_t ahead = 0; /* staging of the loaded ones after the head */
            while (b->hoist_done < b->nhoist && !b->oom) adam_load(b, &b->hoist[b->hoist_done++]);
            for (int k = 0; k < b->nhoist; k++) {
                ring[n++] = b->hoist[k];
                if (k) ahead += adam_staged_bytes(b, ring[k].op, ring[k].ne);
                cj = ring[k].op, e0 = ring[k].e0, ne = ring[k].ne;
            }
            bool more = adam_next(b, &cj, &e0, &ne);
            while ((n > 0 || more) && !b->oom) {
                if (n == 0) { /* the first, or after a sub-group whose state is not on NVMe */
                    ring[head] = (AdamViews){.op = cj, .e0 = e0, .ne = ne, .backup = -1};
                    adam_load(b, &ring[head]);
                    n = 1;
                    more = adam_next(b, &cj, &e0, &ne);
                }
                while (more && adam_nvme(b, cj) && n <= ADAM_AHEAD &&
                       (n == 1 || ahead + adam_staged_bytes(b, cj, ne) <= budget)) {
                    AdamViews *v = &ring[(head + n) % (ADAM_AHEAD + 1)];
                    *v = (AdamViews){.op = cj, .e0 = e0, .ne = ne, .backup = -1};
                    adam_load(b, v);
                    ahead += adam_staged_bytes(b, cj, ne);
                    n++;
                    more = adam_next(b, &cj, &e0, &ne);
                }
                adam_step(b, &ring[head]);
                head = (head + 1) % (ADAM_AHEAD + 1);
                n--;
                if (n > 0) ahead -= adam_staged_bytes(b, ring[head].op, ring[head].ne);
            }
        } else if (op->kind == OP_ZERO_GRAD) {
            Step s = {j, 0, 1, 0, 0};
            pl_emit_step(b, &s);
        }
    }
}

