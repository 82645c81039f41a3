/* planner_step: the instructions of one forward or backward step: fetching
 * parameters and checkpoints, the kernel, gradients to their homes, and
 * checkpoints off the GPU. */
#include "planner_impl.h"
#include "prim_flops.h"
#include <stdio.h>
#include <string.h>

/* A checkpoint back to the GPU from where the forward saved it (through
 * pinned staging from NVMe). */
static void fetch_checkpoint(PlanBuilder *b, Req *r) {
    int p = r->tensor;
    uint64_t ds = (uint64_t)pl_dsz(b, p);
    uint64_t bytes = (uint64_t)b->g->tensors[p].numel * ds;
    int src = b->ckpt_cpu[p];
    if (src < 0) {
        b->internal = true;
        snprintf(b->why, sizeof b->why, "checkpoint '%s' reloaded but never saved", pl_tname(b, p));
        return;
    }
    if (b->bufs[src].b.arena == ARENA_NVME) {
        int stg = pl_newbuf(b, ARENA_PINNED, bytes, p, pl_tname(b, p), false);
        int rd = pl_ins(b, PI_NVME_READ, Q_NVME, p, 0, 1, 0);
        pl_opnd(b, rd, src, PLAN_R, 0, bytes);
        pl_opnd(b, rd, stg, PLAN_W, 0, bytes);
        src = stg;
    }
    int dst = pl_newbuf(b, ARENA_GPU, bytes, p, pl_tname(b, p), false);
    int i = pl_ins(b, PI_H2D, Q_H2D, p, 0, 1, 0);
    pl_opnd(b, i, src, PLAN_R, 0, bytes);
    pl_opnd(b, i, dst, PLAN_W, 0, bytes);
    b->cur[p] = dst;
    r->buf = dst;
}

/* The name of tile k of parameter p's buffers, "name#k": made once per
 * planning (every build fetches the same tiles), in the graph's arena. */
static const char *tile_name(PlanBuilder *b, int p, int k) {
    Arena *a = b->g->arena;
    if (!b->tile_name) b->tile_name = ARENA_NEWN(a, const char **, b->g->ntensors + 1);
    if (!b->tile_name) return pl_tname(b, p);
    if (!b->tile_name[p]) b->tile_name[p] = ARENA_NEWN(a, const char *, b->ntiles[p] + 1);
    if (!b->tile_name[p]) return pl_tname(b, p);
    if (!b->tile_name[p][k]) b->tile_name[p][k] = arena_printf(a, "%s#%d", pl_tname(b, p), k);
    return b->tile_name[p][k] ? b->tile_name[p][k] : pl_tname(b, p);
}

void pl_emit_fetch(PlanBuilder *b, Req *r) {
    int p = r->tensor;
    if (r->alias >= 0) {
        r->buf = b->reqs[r->alias].buf;
        r->off = b->reqs[r->alias].off;
        return;
    }
    if (r->ckpt) {
        fetch_checkpoint(b, r);
        return;
    }
    int n = b->ntiles[p];
    int64_t tile = b->g->tensors[p].numel / n;
    uint64_t tb = pl_ebytes(b, p, tile), sb = pl_ebytes(b, p, b->tile_shard[p]);
    int home = b->home[p], P = pl_param_tier(b, p);
    int t0 = r->tile < 0 ? 0 : r->tile, t1 = r->tile < 0 ? n : r->tile + 1;
    if (P == TIER_GPU && !b->part[p]) {
        r->buf = home;
        r->off = (uint64_t)t0 * tb;
        return;
    }
    const char *nm = n > 1 && r->tile >= 0 ? tile_name(b, p, r->tile) : pl_tname(b, p);
    int full = pl_newbuf(b, ARENA_GPU, (uint64_t)(t1 - t0) * tb, p, nm, false);
    for (int u = t0; u < t1; u++) {
        uint64_t fo = (uint64_t)(u - t0) * tb;
        int src = home;
        uint64_t so = (uint64_t)u * sb;
        if (P != TIER_GPU) {
            int dst = b->part[p] ? pl_newbuf(b, ARENA_GPU, sb, p, nm, false) : full;
            uint64_t doff = b->part[p] ? 0 : fo;
            int from = home;
            uint64_t fromoff = so;
            if (P == TIER_NVME) {
                int stg = pl_newbuf(b, ARENA_PINNED, sb, p, nm, false);
                int i = pl_ins(b, PI_NVME_READ, Q_NVME, p, u, n, 0);
                pl_opnd(b, i, home, PLAN_R, so, sb);
                pl_opnd(b, i, stg, PLAN_W, 0, sb);
                from = stg;
                fromoff = 0;
            }
            int i = pl_ins(b, PI_H2D, Q_H2D, p, u, n, 0);
            pl_opnd(b, i, from, PLAN_R, fromoff, sb);
            pl_opnd(b, i, dst, PLAN_W, doff, sb);
            src = dst;
            so = 0;
        }
        if (b->part[p]) {
            int i = pl_ins(b, PI_ALLGATHER, Q_COMM, p, u, n, 0);
            pl_opnd(b, i, src, PLAN_R, so, sb);
            pl_opnd(b, i, full, PLAN_W, fo, tb);
            b->ins[i].s.bytes = tb;
        }
    }
    r->buf = full;
    r->off = 0;
}

/* Where a backward step accumulates parameter p's gradient (tile or whole). */
static int grad_target(PlanBuilder *b, int p, int tile, uint64_t *off) {
    int gt = b->g->tensors[p].grad;
    uint64_t ds = (uint64_t)pl_dsz(b, gt);
    int n = b->ntiles[p];
    uint64_t tb = (uint64_t)(b->g->tensors[p].numel / n) * ds;
    uint64_t bytes = tile >= 0 ? tb : tb * (uint64_t)n;
    *off = 0;
    if (pl_grad_tier(b, p) == TIER_GPU && b->R == 1) {
        *off = tile >= 0 ? (uint64_t)tile * tb : 0;
        return b->home[gt];
    }
    int tmp = pl_newbuf(b, ARENA_GPU, bytes, gt, pl_tname(b, gt), false);
    int i = pl_ins(b, PI_ZERO, Q_COMPUTE, gt, tile < 0 ? 0 : tile, n, 0);
    pl_opnd(b, i, tmp, PLAN_W, 0, bytes);
    return tmp;
}

/* Adds a gradient slice now in pinned staging to its home (CPU or NVMe) for
 * tiles [t0, t1) of n. On NVMe, the first flush of a tile in a step without
 * accumulation overwrites the home; every other one reads, adds and writes. */
static void grad_to_home(PlanBuilder *b, int gt, int stg, int home, uint64_t hoff, uint64_t bytes, int t0, int t1, int n) {
    int tq = t1 - t0 == 1 ? t0 : 0, tn = t1 - t0 == 1 ? n : 1;
    if (pl_grad_tier(b, b->g->tensors[gt].param) != TIER_NVME) {
        int a = pl_ins(b, PI_ACCUM, Q_CPU, gt, tq, tn, 0);
        pl_opnd(b, a, stg, PLAN_R, 0, bytes);
        pl_opnd(b, a, home, PLAN_M, hoff, bytes);
        return;
    }
    uint64_t mask = 0;
    for (int u = t0; u < t1 && u < 64; u++) mask |= 1ull << u;
    bool first = n <= 64 && b->g->train.grad_accum <= 1 && !(b->gflushed[gt] & mask);
    b->gflushed[gt] |= mask;
    int src = stg;
    if (!first) {
        b->grad_rmw[gt] = true;
        int old = pl_newbuf(b, ARENA_PINNED, bytes, gt, pl_tname(b, gt), false);
        int r = pl_ins(b, PI_NVME_READ, Q_NVME, gt, tq, tn, 0);
        pl_opnd(b, r, home, PLAN_R, hoff, bytes);
        pl_opnd(b, r, old, PLAN_W, 0, bytes);
        int a = pl_ins(b, PI_ACCUM, Q_CPU, gt, tq, tn, 0);
        pl_opnd(b, a, stg, PLAN_R, 0, bytes);
        pl_opnd(b, a, old, PLAN_M, 0, bytes);
        src = old;
    }
    int w = pl_ins(b, PI_NVME_WRITE, Q_NVME, gt, tq, tn, 0);
    pl_opnd(b, w, src, PLAN_R, 0, bytes);
    pl_opnd(b, w, home, PLAN_W, hoff, bytes);
}

/* Whether this flush of tiles [t0, t1) of n of a gradient homed in CPU
 * memory is the first of each of those tiles in a step of one micro-batch:
 * it then copies over the home (D2H straight into it) instead of staging
 * and adding, and the home needs no zeroing for the next step when every
 * tile is first flushed this way (emit_zero_grad). Marks the tiles. */
static bool cpu_first_flush(PlanBuilder *b, int gt, int t0, int t1, int n) {
    if (pl_grad_tier(b, b->g->tensors[gt].param) != TIER_CPU || b->g->train.grad_accum > 1 || n > 64) return false;
    uint64_t mask = 0;
    for (int u = t0; u < t1; u++) mask |= 1ull << u;
    if (b->gflushed[gt] & mask) return false;
    b->gflushed[gt] |= mask;
    return true;
}

static void grad_flush(PlanBuilder *b, int p, int tile, int tmp) {
    int gt = b->g->tensors[p].grad;
    int home = b->home[gt];
    if (tmp == home) return;
    uint64_t ds = (uint64_t)pl_dsz(b, gt);
    int n = b->ntiles[p];
    uint64_t tb = (uint64_t)(b->g->tensors[p].numel / n) * ds, sb = (uint64_t)b->tile_shard[gt] * ds;
    bool gpu = pl_grad_tier(b, p) == TIER_GPU;
    int t0 = tile < 0 ? 0 : tile, t1 = tile < 0 ? n : tile + 1;
    if (b->part[gt]) {
        for (int u = t0; u < t1; u++) {
            uint64_t to = (uint64_t)(u - t0) * tb;
            int dst = home;
            uint64_t doff = (uint64_t)u * sb;
            if (!gpu) {
                dst = pl_newbuf(b, ARENA_GPU, sb, gt, pl_tname(b, gt), false);
                doff = 0;
                int z = pl_ins(b, PI_ZERO, Q_COMPUTE, gt, u, n, 0);
                pl_opnd(b, z, dst, PLAN_W, 0, sb);
            }
            int i = pl_ins(b, PI_REDUCE_SCATTER, Q_COMM, gt, u, n, 0);
            pl_opnd(b, i, tmp, PLAN_R, to, tb);
            pl_opnd(b, i, dst, PLAN_M, doff, sb);
            b->ins[i].s.bytes = tb;
            if (!gpu && cpu_first_flush(b, gt, u, u + 1, n)) {
                int c = pl_ins(b, PI_D2H, Q_D2H, gt, u, n, 0);
                pl_opnd(b, c, dst, PLAN_R, 0, sb);
                pl_opnd(b, c, home, PLAN_W, (uint64_t)u * sb, sb);
            } else if (!gpu) {
                int stg = pl_newbuf(b, ARENA_PINNED, sb, gt, pl_tname(b, gt), false);
                int c = pl_ins(b, PI_D2H, Q_D2H, gt, u, n, 0);
                pl_opnd(b, c, dst, PLAN_R, 0, sb);
                pl_opnd(b, c, stg, PLAN_W, 0, sb);
                grad_to_home(b, gt, stg, home, (uint64_t)u * sb, sb, u, u + 1, n);
            }
        }
        return;
    }
    uint64_t bytes = (uint64_t)(t1 - t0) * tb, hoff = (uint64_t)t0 * tb;
    if (b->R > 1) {
        int i = pl_ins(b, PI_ALLREDUCE, Q_COMM, gt, t0, tile < 0 ? 1 : n, 0);
        pl_opnd(b, i, tmp, PLAN_M, 0, bytes);
        b->ins[i].s.bytes = bytes;
    }
    int src = tmp;
    if (!gpu && cpu_first_flush(b, gt, t0, t1, n)) {
        int c = pl_ins(b, PI_D2H, Q_D2H, gt, t0, tile < 0 ? 1 : n, 0);
        pl_opnd(b, c, tmp, PLAN_R, 0, bytes);
        pl_opnd(b, c, home, PLAN_W, hoff, bytes);
        return;
    }
    if (!gpu) {
        src = pl_newbuf(b, ARENA_PINNED, bytes, gt, pl_tname(b, gt), false);
        int c = pl_ins(b, PI_D2H, Q_D2H, gt, t0, tile < 0 ? 1 : n, 0);
        pl_opnd(b, c, tmp, PLAN_R, 0, bytes);
        pl_opnd(b, c, src, PLAN_W, 0, bytes);
    }
    if (!gpu) {
        grad_to_home(b, gt, src, home, hoff, bytes, t0, t1, n);
        return;
    }
    int a = pl_ins(b, PI_ACCUM, Q_COMPUTE, gt, t0, tile < 0 ? 1 : n, 0);
    pl_opnd(b, a, src, PLAN_R, 0, bytes);
    pl_opnd(b, a, home, PLAN_M, hoff, bytes);
}

/* The operands of a step's kernel, in the op's order (inputs, then
 * outputs), and the parameter gradients to flush after it. */
typedef struct Pend {
    int buf, mode;
    uint64_t off, bytes;
} Pend;

typedef struct StepOps {
    Pend pend[PLAN_MAX_IN + PLAN_MAX_OUT];
    int np;
    int gflush[PLAN_MAX_OUT], gtile[PLAN_MAX_OUT], gbuf[PLAN_MAX_OUT], ng;
} StepOps;

static void emit_zero_grad(PlanBuilder *b, const GOp *op) {
    const Graph *g = b->g;
    int y = op->out[0];
    if (y < 0) return;
    uint64_t bytes = (uint64_t)g->tensors[y].numel * (uint64_t)pl_dsz(b, y);
    int buf;
    if (g->tensors[y].cls == TC_GRAD) {
        buf = b->home[y];
        if (buf < 0 || b->bufs[buf].b.arena == ARENA_NVME) return; /* NVMe: zeroed by its optimizer sub-group */
        int n = b->ntiles[g->tensors[y].param];
        if (b->bufs[buf].b.arena == ARENA_CPU && n <= 64 && b->gflushed[y] == (n == 64 ? ~0ull : (1ull << n) - 1))
            return; /* every tile's first flush copies over the home (cpu_first_flush) */
    } else {
        buf = pl_newbuf(b, ARENA_GPU, bytes, y, pl_tname(b, y), false);
        b->cur[y] = buf;
    }
    int i = pl_ins(b, PI_ZERO, b->bufs[buf].b.arena == ARENA_GPU ? Q_COMPUTE : Q_CPU, y, 0, 1, 0);
    pl_opnd(b, i, buf, PLAN_W, 0, g->tensors[y].cls == TC_GRAD ? b->bufs[buf].b.bytes : bytes);
}

/* The step's inputs: parameters where their fetch put them, the rest where
 * they were made; false (b->internal) when one was never made. */
static bool step_inputs(PlanBuilder *b, const Step *s, const GOp *op, StepOps *so) {
    const Graph *g = b->g;
    for (int k = 0; k < op->nin; k++) {
        int x = op->in[k];
        Pend pe = {-1, PLAN_R, 0, 0};
        if (x >= 0) {
            const GTensor *xt = &g->tensors[x];
            if (xt->cls == TC_PARAM) {
                const Req *r = NULL;
                for (int q = s->req0; q < s->req0 + s->nreq; q++)
                    if (b->reqs[q].tensor == x && !b->reqs[q].ckpt) r = &b->reqs[q];
                if (r) {
                    uint64_t tb = pl_ebytes(b, x, xt->numel / b->ntiles[x]);
                    pe = (Pend){r->buf, PLAN_R, r->off, r->tile >= 0 ? tb : tb * (uint64_t)b->ntiles[x]};
                }
            } else {
                if (b->cur[x] < 0) {
                    b->internal = true;
                    snprintf(b->why, sizeof b->why, "op %d reads '%s' before anything produces it", s->op, pl_tname(b, x));
                    return false;
                }
                pe = (Pend){b->cur[x], PLAN_R, 0, (uint64_t)xt->numel * (uint64_t)pl_dsz(b, x)};
            }
        }
        so->pend[so->np++] = pe;
    }
    return true;
}

/* The step's outputs: parameter gradients into their accumulation target
 * (tp: the parameter tiled in this step, or -1), other gradients
 * accumulated from zero, activations in new buffers (tile 0) or the one the
 * first tile made. */
static void step_outputs(PlanBuilder *b, const Step *s, const GOp *op, int tp, StepOps *so) {
    const Graph *g = b->g;
    for (int k = 0; k < op->nout; k++) {
        int y = op->out[k];
        Pend pe = {-1, PLAN_W, 0, 0};
        if (y >= 0) {
            const GTensor *yt = &g->tensors[y];
            uint64_t bytes = (uint64_t)yt->numel * (uint64_t)pl_dsz(b, y);
            if (yt->cls == TC_GRAD && yt->param >= 0) {
                int p = yt->param;
                if (p != tp && s->tile > 0) {
                    so->pend[so->np++] = pe; /* a bias's gradient: tile 0 computes it */
                    continue;
                }
                uint64_t off;
                int buf = grad_target(b, p, p == tp ? s->tile : -1, &off);
                uint64_t tb = (uint64_t)(g->tensors[p].numel / b->ntiles[p]) * (uint64_t)pl_dsz(b, y);
                pe = (Pend){buf, PLAN_M, off, p == tp ? tb : tb * (uint64_t)b->ntiles[p]};
                so->gflush[so->ng] = p;
                so->gtile[so->ng] = p == tp ? s->tile : -1;
                so->gbuf[so->ng++] = buf;
            } else if (op->kind == OP_BWD) {
                if (b->cur[y] < 0) {
                    int buf = pl_newbuf(b, ARENA_GPU, bytes, y, pl_tname(b, y), false);
                    int z = pl_ins(b, PI_ZERO, Q_COMPUTE, y, 0, 1, 0);
                    pl_opnd(b, z, buf, PLAN_W, 0, bytes);
                    b->cur[y] = buf;
                }
                pe = (Pend){b->cur[y], PLAN_M, 0, bytes};
            } else if (s->tile == 0) {
                int buf = pl_newbuf(b, ARENA_GPU, bytes, y, pl_tname(b, y), false);
                b->cur[y] = buf;
                pe = (Pend){buf, PLAN_W, 0, bytes};
            } else {
                pe = (Pend){b->cur[y], PLAN_M, 0, bytes};
            }
        }
        so->pend[so->np++] = pe;
    }
}

/* checkpoints leave the GPU as soon as the forward has made them */
static void save_checkpoints(PlanBuilder *b, const GOp *op) {
    const Graph *g = b->g;
    for (int k = 0; k < op->nout; k++) {
        int y = op->out[k];
        if (y < 0 || g->tensors[y].cls != TC_CKPT) continue;
        uint64_t bytes = (uint64_t)g->tensors[y].numel * (uint64_t)pl_dsz(b, y);
        bool nvme = b->pl.tier[PC_CHECKPOINTS] == TIER_NVME;
        int cpu = pl_newbuf(b, nvme ? ARENA_PINNED : ARENA_CPU, bytes, y, pl_tname(b, y), false);
        int c = pl_ins(b, PI_D2H, Q_D2H, y, 0, 1, 0);
        pl_opnd(b, c, b->cur[y], PLAN_R, 0, bytes);
        pl_opnd(b, c, cpu, PLAN_W, 0, bytes);
        if (nvme) { /* through pinned staging to the swap space */
            int sw = pl_newbuf(b, ARENA_NVME, bytes, y, pl_tname(b, y), false);
            int w = pl_ins(b, PI_NVME_WRITE, Q_NVME, y, 0, 1, 0);
            pl_opnd(b, w, cpu, PLAN_R, 0, bytes);
            pl_opnd(b, w, sw, PLAN_W, 0, bytes);
            cpu = sw;
        }
        b->ckpt_cpu[y] = cpu;
    }
}

void pl_emit_step(PlanBuilder *b, const Step *s) {
    const GOp *op = &b->g->ops[s->op];
    if (op->kind == OP_ZERO_GRAD) {
        emit_zero_grad(b, op);
        return;
    }
    if (!pl_is_kernel_op(op->kind)) return;
    StepOps so;
    so.np = so.ng = 0;
    int tp = s->ntiles > 1 ? pl_tiled_param_of(b, op) : -1;
    if (!step_inputs(b, s, op, &so)) return;
    step_outputs(b, s, op, tp, &so);
    int i = pl_ins(b, PI_KERNEL, Q_COMPUTE, s->op, s->tile, s->ntiles, prim_flops(b->g, op) / s->ntiles);
    for (int k = 0; k < so.np; k++) pl_opnd(b, i, so.pend[k].buf, so.pend[k].mode, so.pend[k].off, so.pend[k].bytes);
    for (int k = 0; k < so.ng; k++) grad_flush(b, so.gflush[k], so.gtile[k], so.gbuf[k]);
    if (op->kind == OP_FWD && s->tile == s->ntiles - 1 && b->pl.tier[PC_CHECKPOINTS] != TIER_GPU) save_checkpoints(b, op);
}
