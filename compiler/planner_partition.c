/* planner_partition: steps 1 and 2 of the planner (compiler/planner.h):
 * which state tensors are split over the ranks, each rank's slice, which
 * parameters are cut into tiles; and the memory a rank may use per tier. */
#include "planner_impl.h"
#include <inttypes.h>
#include <string.h>

bool pl_tileable_use(const GOp *op, int slot) {
    if (op->kind != OP_FWD && op->kind != OP_BWD && op->kind != OP_RECOMPUTE) return false;
    return (op->prim == PRIM_LINEAR && slot == 1) || (op->prim == PRIM_MATMUL && slot == 1) ||
           (op->prim == PRIM_EMBEDDING && slot == 0) || (op->prim == PRIM_MOE_EXPERT && slot == 2);
}

uint64_t pl_gpu_capacity(const Target *t) {
    if (!strcmp(t->backend, "host")) return t->gpu_memory;
    return t->gpu_memory / 100 * 92; /* the rest: CUDA context, library workspaces */
}

uint64_t pl_cpu_capacity(const Target *t) {
    uint64_t share = target_cpu_per_rank(t);
    if (!strcmp(t->backend, "host")) return share > t->gpu_memory ? share - t->gpu_memory : 0;
    return share / 10 * 9; /* the operating system keeps a tenth */
}

/* Parameters some use of which cannot take a tile: anything but the weight
 * of a linear or matmul, the table of an embedding or the experts' weights
 * of a moe_expert (use: USE_EXPERTS for those, USE_ROWS for the others). */
enum { USE_ROWS = 1, USE_EXPERTS = 2 };
static void find_untileable(const Graph *g, bool *untileable, uint8_t *use) {
    for (int i = 0; i < g->nops; i++) {
        const GOp *op = &g->ops[i];
        if (op->kind != OP_FWD && op->kind != OP_BWD && op->kind != OP_RECOMPUTE) continue;
        int nfin = op->kind == OP_BWD ? op->nfin : op->nin;
        for (int k = 0; k < op->nin; k++) {
            int x = op->in[k];
            if (x < 0 || g->tensors[x].cls != TC_PARAM) continue;
            if (k >= nfin || !pl_tileable_use(op, k)) untileable[x] = true;
            else use[x] |= op->prim == PRIM_MOE_EXPERT ? USE_EXPERTS : USE_ROWS;
        }
    }
}

/* Whether parameter i has a shape its uses take tiles of: a 2-D weight cut
 * by rows, or a moe_expert's [E, O, I] experts cut into whole experts. */
static bool tile_shape(const GTensor *t, bool untileable, uint8_t use) {
    return !untileable && ((use == USE_ROWS && t->rank == 2) || (use == USE_EXPERTS && t->rank == 3));
}

/* Whether parameter t's Adam moments are stored in 8-bit blocks, whose
 * tiles must then be whole blocks (blocks start at multiples of 2048
 * elements of the tensor whatever the tiling and world size, which keeps
 * a checkpoint readable on any other). */
static bool qstate_moments(const Graph *g, const GTensor *t) {
    return t->momentum >= 0 && t->momentum < g->ntensors && dtype_is_qstate(g->tensors[t->momentum].dtype);
}

/* How many tiles each parameter is cut into: the plan block's pins (2-D
 * weights' rows, or moe_expert weights' experts, divided evenly), else
 * enough that a tile takes at most 1/TILE_FRACTION of GPU memory. Expert
 * weights are tiled by whole experts on both backends (the CUDA tiles run
 * the grouped expert GEMMs over the tile's experts, compiler/cuda_gen_moe.c).
 * False (reported) on a bad pin. */
static bool choose_tiles(PlanBuilder *b, const bool *untileable, const uint8_t *use) {
    const Graph *g = b->g;
    int n = g->ntensors;
    uint64_t limit = b->t->gpu_memory / TILE_FRACTION;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const GTensor *t = &g->tensors[i];
        b->ntiles[i] = 1;
        if (t->cls != TC_PARAM) continue;
        uint64_t bytes = pl_ebytes(b, i, t->numel);
        int want = 0;
        Span sp = SPAN_NONE;
        for (int k = 0; k < b->o->ntiles; k++)
            if (pl_pin_matches(b->o->tiles[k].pattern, t->name ? t->name : "")) {
                want = b->o->tiles[k].tiles;
                sp = b->o->tiles[k].span;
            }
        if (want > 1) {
            if (dtype_is_quant(t->dtype)) { /* its blocks run across the rows' ends */
                diag_error(b->d, sp, "cannot tile '%s': it is stored quantized (train { quantize })", t->name);
                ok = false;
                continue;
            }
            if (!tile_shape(t, untileable[i], use[i])) {
                diag_error(b->d, sp, "cannot tile '%s': only 2-D weights of linear, matmul and embedding, and the [E, O, I] "
                           "experts of moe_expert, are tiled", t->name);
                ok = false;
                continue;
            }
            if (t->dims[0] % want) {
                diag_error(b->d, sp, "cannot cut '%s' into %d tiles: %d does not divide its %" PRId64 " %s", t->name, want, want,
                           t->dims[0], use[i] == USE_EXPERTS ? "experts (a tile holds whole experts)" : "rows");
                ok = false;
                continue;
            }
            if (qstate_moments(g, t) && (t->numel / want) % DTYPE_QSTATE_BLOCK) {
                diag_error(b->d, sp, "cannot cut '%s' into %d tiles: its 8-bit Adam moments need tiles of whole blocks of %d elements, "
                           "and a tile has %" PRId64, t->name, want, DTYPE_QSTATE_BLOCK, t->numel / want);
                ok = false;
                continue;
            }
            b->ntiles[i] = want;
            b->tile_pinned[i] = true;
        } else if (!want && tile_shape(t, untileable[i], use[i]) && bytes > limit &&
                   !dtype_is_quant(t->dtype)) {
            int64_t need = (int64_t)((bytes + limit - 1) / limit);
            int64_t nt = need;
            bool q8 = qstate_moments(g, t);
            while (nt < t->dims[0] && (t->dims[0] % nt || (q8 && (t->numel / nt) % DTYPE_QSTATE_BLOCK))) nt++;
            if (nt > t->dims[0]) nt = t->dims[0];
            if (q8 && (t->numel / nt) % DTYPE_QSTATE_BLOCK) nt = 1; /* no tiling holds whole blocks */
            b->ntiles[i] = (int)nt;
        }
    }
    return ok;
}

/* Each state tensor's slice per rank. */
static void state_layout(PlanBuilder *b) {
    const Graph *g = b->g;
    int n = g->ntensors;
    /* state tensors share their parameter's layout */
    for (int i = 0; i < n; i++) {
        const GTensor *t = &g->tensors[i];
        int p = t->cls == TC_PARAM ? i : (t->cls >= TC_GRAD && t->cls <= TC_VARIANCE ? t->param : -1);
        if (p < 0) continue;
        const GTensor *pt = &g->tensors[p];
        b->ntiles[i] = b->ntiles[p];
        int64_t tile = pt->numel / b->ntiles[p];
        b->part[i] = b->R > 1 && pt->numel >= b->o->whole_below;
        if (b->part[i]) {
            int64_t per = (tile + b->R - 1) / b->R;
            int64_t al = IO_ALIGN / 2; /* elements: 4096 bytes of the narrowest state dtype */
            b->tile_shard[i] = (per + al - 1) / al * al;
        } else {
            b->tile_shard[i] = tile;
        }
    }
}

bool pl_partition(PlanBuilder *b, Arena *a) {
    const Graph *g = b->g;
    int n = g->ntensors;
    b->ntiles = ARENA_NEWN(a, int, n + 1);
    b->part = ARENA_NEWN(a, bool, n + 1);
    b->tile_shard = ARENA_NEWN(a, int64_t, n + 1);
    bool *untileable = ARENA_NEWN(a, bool, n + 1);
    uint8_t *use = ARENA_NEWN(a, uint8_t, n + 1);
    b->tile_pinned = ARENA_NEWN(a, bool, n + 1);
    if (!b->ntiles || !b->part || !b->tile_shard || !untileable || !use || !b->tile_pinned) return false;
    find_untileable(g, untileable, use);
    bool ok = choose_tiles(b, untileable, use);
    state_layout(b);
    return ok;
}

