/* planner_build: one whole build of the schedule for one placement (step 4
 * of compiler/planner.h): the steps and the fetches each needs, the homes,
 * the step's instructions (planner_step.c, planner_optim.c) written into
 * the tables of planner_tables.c, then the allocation of every arena
 * (planner_alloc.c). */
#include "planner_impl.h"
#include <stdlib.h>
#include <string.h>

static bool build_steps(PlanBuilder *b, Arena *a, int bwd_end) {
    const Graph *g = b->g;
    int cap = 0;
    for (int i = 0; i < bwd_end; i++) {
        int tp = pl_is_kernel_op(g->ops[i].kind) ? pl_tiled_param_of(b, &g->ops[i]) : -1;
        cap += tp >= 0 ? b->ntiles[tp] : 1;
    }
    b->steps = ARENA_NEWN(a, Step, cap + 1);
    bool *reloaded = ARENA_NEWN(a, bool, g->ntensors + 1);
    int *last_req = ARENA_NEWN(a, int, g->ntensors + 1);
    int rcap = 0;
    for (int i = 0; i < bwd_end; i++) {
        int tp = pl_is_kernel_op(g->ops[i].kind) ? pl_tiled_param_of(b, &g->ops[i]) : -1;
        rcap += g->ops[i].nin * (tp >= 0 ? b->ntiles[tp] : 1);
    }
    free(b->reqs);
    b->reqs = malloc(sizeof(Req) * (size_t)(rcap + 1));
    if (!b->steps || !reloaded || !b->reqs || !last_req) return false;
    for (int i = 0; i < g->ntensors; i++) last_req[i] = -1;
    b->nsteps = b->nreqs = 0;
    for (int i = 0; i < bwd_end; i++) {
        const GOp *op = &g->ops[i];
        int tp = pl_is_kernel_op(op->kind) ? pl_tiled_param_of(b, op) : -1;
        int n = tp >= 0 ? b->ntiles[tp] : 1;
        for (int t = 0; t < n; t++) {
            Step *s = &b->steps[b->nsteps];
            *s = (Step){i, t, n, b->nreqs, 0};
            if (pl_is_kernel_op(op->kind)) {
                int nfin = op->kind == OP_BWD ? op->nfin : op->nin;
                for (int k = 0; k < op->nin; k++) {
                    int x = op->in[k];
                    if (x < 0) continue;
                    const GTensor *xt = &g->tensors[x];
                    if (xt->cls == TC_PARAM) {
                        bool dup = false;
                        for (int r = s->req0; r < b->nreqs; r++) dup |= b->reqs[r].tensor == x && !b->reqs[r].ckpt;
                        if (dup) continue;
                        if (x == tp && k < nfin && pl_tileable_use(op, k)) b->reqs[b->nreqs++] = (Req){b->nsteps, x, t, false, -1, -1, 0};
                        else if (t == 0) {
                            int alias = -1, prev = last_req[x];
                            /* the weights a recompute gathered serve the backward of the same layer */
                            if (b->pl.reuse && prev >= 0 && b->ntiles[x] == 1 && op->kind == OP_BWD) {
                                const GOp *po = &g->ops[b->steps[b->reqs[prev].step].op];
                                if (po->kind == OP_RECOMPUTE && po->segment == op->segment) alias = prev;
                            }
                            last_req[x] = b->nreqs;
                            b->reqs[b->nreqs++] = (Req){b->nsteps, x, b->ntiles[x] > 1 ? -1 : 0, false, alias, -1, 0};
                        }
                    } else if (xt->cls == TC_CKPT && b->pl.tier[PC_CHECKPOINTS] != TIER_GPU && i >= g->nforward && !reloaded[x]) {
                        reloaded[x] = true;
                        b->reqs[b->nreqs++] = (Req){b->nsteps, x, 0, true, -1, -1, 0};
                    }
                }
            }
            s->nreq = b->nreqs - s->req0;
            b->nsteps++;
        }
    }
    return true;
}


static void reset(PlanBuilder *b) {
    b->nbufs = b->nins = b->nopnds = b->persist_end = 0;
    b->oom = b->internal = b->size_partial = false;
    b->why[0] = 0;
}

bool pl_build(PlanBuilder *b, Arena *a) {
    const Graph *g = b->g;
    reset(b);
    int nt = g->ntensors;
    int bwd_end = g->nbackward_end > g->nforward ? g->nbackward_end : g->nforward;
    if (!b->home) {
        b->home = ARENA_NEWN(a, int, nt + 1);
        b->cur = ARENA_NEWN(a, int, nt + 1);
        b->ckpt_cpu = ARENA_NEWN(a, int, nt + 1);
        b->gflushed = ARENA_NEWN(a, uint64_t, nt + 1);
        b->grad_rmw = ARENA_NEWN(a, bool, nt + 1);
        if (!b->home || !b->cur || !b->ckpt_cpu || !b->gflushed || !b->grad_rmw) return false;
    }
    if (!build_steps(b, a, bwd_end)) return false;
    if (!pl_overlap_prepare(b, a, bwd_end)) return false;
    static const uint8_t arena_of_tier[PLAN_NTIERS] = {ARENA_GPU, ARENA_CPU, ARENA_NVME};
    for (int i = 0; i < nt; i++) {
        b->home[i] = b->cur[i] = b->ckpt_cpu[i] = -1;
        b->gflushed[i] = 0;
        b->grad_rmw[i] = false;
        const GTensor *t = &g->tensors[i];
        int tier = -1;
        if (t->cls == TC_PARAM) tier = pl_param_tier(b, i);
        else if (t->cls == TC_GRAD && t->param >= 0) tier = pl_grad_tier(b, t->param);
        else if ((t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE) && t->param >= 0) tier = pl_opt_tier(b, t->param);
        if (tier < 0) continue;
        b->home[i] = pl_newbuf(b, arena_of_tier[tier], pl_shard_bytes(b, i), i, pl_tname(b, i), true);
    }
    /* packed rows: the micro-batch's sample starts, one int32 a token, that
     * the CUDA kernels read (PARG_SEG) all through the micro-batch; the
     * input of the tokens writes them, and they count as its bytes */
    int seg_buf = -1;
    uint64_t seg_bytes = 0;
    if (b->o->sample_starts && g->ninputs > 0 && g->inputs[0] >= 0) {
        seg_bytes = (uint64_t)g->tensors[g->inputs[0]].numel * sizeof(int32_t);
        seg_buf = pl_newbuf(b, ARENA_GPU, seg_bytes, -1, "sample_starts", true);
    }
    if (!pl_overlap_twins(b, a) || !pl_hoist_prepare(b, a, bwd_end)) return false;
    /* the step: inputs, forward, backward with fetches hoisted, optimizer */
    for (int k = 0; k < g->ninputs; k++) {
        int x = g->inputs[k];
        if (x < 0) continue;
        uint64_t bytes = (uint64_t)g->tensors[x].numel * (uint64_t)pl_dsz(b, x);
        int buf = pl_newbuf(b, ARENA_GPU, bytes, x, pl_tname(b, x), false);
        int i = pl_ins(b, PI_INPUT, Q_H2D, k, 0, 1, 0);
        pl_opnd(b, i, buf, PLAN_W, 0, bytes);
        if (k == 0 && seg_buf >= 0) {
            pl_opnd(b, i, seg_buf, PLAN_W, 0, seg_bytes);
            if (i >= 0 && !b->oom) b->ins[i].s.bytes += seg_bytes; /* a copy counts its largest operand: both move */
        }
        b->cur[x] = buf;
    }
    int f = 0, k = b->pl.prefetch;
    for (int s = 0; s < b->nsteps && !b->oom && !b->internal; s++) {
        const Step *st = &b->steps[s];
        int upto = st->req0 + st->nreq + k;
        while (f < b->nreqs && (f < st->req0 + st->nreq || f < upto)) {
            /* a checkpoint can only come back once it has been saved */
            /* and comes back only once the backward has begun */
            if (b->reqs[f].ckpt && b->reqs[f].step > s && (b->ckpt_cpu[b->reqs[f].tensor] < 0 || st->op < g->nforward)) break;
            pl_emit_fetch(b, &b->reqs[f++]);
        }
        pl_emit_step(b, st);
        pl_emit_early_adams(b, s); /* none unless b->pl.overlap or overlap_nvme */
        pl_emit_hoisted(b, s);
    }
    b->opt_begin = (uint32_t)b->nins;
    b->redo_begin = b->redo_end = b->opt_begin;
    pl_emit_optimizer(b, bwd_end);
    int e = pl_ins(b, PI_STEP_END, Q_COMPUTE, 0, 0, 1, 0);
    if (e >= 0) {
        int lastq[PLAN_NQUEUES];
        for (int q = 0; q < PLAN_NQUEUES; q++) lastq[q] = -1;
        for (int i = 0; i < e; i++) lastq[b->ins[i].s.queue] = i;
        for (int q = 0; q < PLAN_NQUEUES; q++) pl_dep_on(b, e, lastq[q]);
    }
    if (b->oom || b->internal) return false;
    return pl_allocate(b);
}

