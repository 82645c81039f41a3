/* verify_kernels: the checks of CUDA launches, tile code, GEMM descriptors
 * and the operands of kernels (docs/plan-format.md). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verify_impl.h"
#include "vocab.h"

/* ---- 1b. CUDA launches (docs/plan-format.md): what the executor indexes
 * and hands to the driver must be in range and launchable ---- */
static const char *lentry(const Plan *p, uint32_t i) {
    return p->launches[i].entry ? p->launches[i].entry : "";
}

/* ws: the bytes of the workspace the launch shares (its op's, or its tile's when tile). */
static void check_launch(V *v, uint32_t i, int64_t ws, bool tile) {
    const Plan *p = v->p;
    const PlanLaunch *l = &p->launches[i];
    const char *e = lentry(p, i);
    bool unit = false;
    for (uint32_t k = 0; k < p->nkernels && !unit; k++)
        unit = l->unit && p->kernels[k].name && !strcmp(l->unit, p->kernels[k].name);
    if (!unit) vf_problem(v, "launch %u (%s) names unit '%s', which the plan does not embed", i, e, l->unit ? l->unit : "");
    if (!*e) vf_problem(v, "launch %u has no entry point", i);
    if (l->op < -1 || l->op >= (int64_t)p->nops) vf_problem(v, "launch %u (%s): op %d out of range", i, e, l->op);
    if (!l->grid[0] || !l->grid[1] || !l->grid[2] || !l->block[0] || !l->block[1] || !l->block[2])
        vf_problem(v, "launch %u (%s): empty grid (%u,%u,%u) or block (%u,%u,%u)", i, e, l->grid[0], l->grid[1], l->grid[2],
                l->block[0], l->block[1], l->block[2]);
    else if ((uint64_t)l->block[0] * l->block[1] * l->block[2] > 1024 || l->block[2] > 64)
        vf_problem(v, "launch %u (%s): block (%u,%u,%u) exceeds CUDA's 1024 threads (z at most 64)", i, e, l->block[0],
                l->block[1], l->block[2]);
    else if (l->grid[0] > INT32_MAX || l->grid[1] > 65535 || l->grid[2] > 65535)
        vf_problem(v, "launch %u (%s): grid (%u,%u,%u) exceeds CUDA's limits", i, e, l->grid[0], l->grid[1], l->grid[2]);
    if ((uint64_t)l->arg + l->nargs > p->nlaunch_args) {
        vf_problem(v, "launch %u (%s): arguments [%u, +%u) out of range (%u arguments)", i, e, l->arg, l->nargs, p->nlaunch_args);
        return;
    }
    for (uint32_t k = 0; k < l->nargs; k++) {
        const PlanLaunchArg *a = &p->launch_args[l->arg + k];
        if (a->kind >= PLAN_NARGKINDS) {
            vf_problem(v, "launch %u (%s): argument %u has unknown kind %u", i, e, k, a->kind);
            continue;
        }
        if (a->rt >= PLAN_NRT) vf_problem(v, "launch %u (%s): argument %u: run-time value %u out of range", i, e, k, a->rt);
        if (a->tensor < -1 || a->tensor >= (int64_t)p->ntensors)
            vf_problem(v, "launch %u (%s): argument %u: tensor %d out of range", i, e, k, a->tensor);
        else if ((a->kind == PARG_TENSOR || a->kind == PARG_NUMEL) && a->tensor < 0 && l->op >= 0)
            vf_problem(v, "launch %u (%s) of op %d: argument %u binds no tensor", i, e, l->op, k);
        if (a->kind == PARG_WS && p->op_code && (a->i < 0 || a->i >= ws))
            vf_problem(v, "launch %u (%s): argument %u: workspace offset %" PRId64 " outside the %s's %" PRId64 " bytes", i, e, k,
                    a->i, tile ? "tile" : "op", ws);
    }
}

/* The tile code entry of (op, tile, ntiles): binary search (entries are
 * sorted, check_tile_code says so when they are not); -1 when none. */
static int64_t tile_code_find(const Plan *p, int32_t op, int32_t tile, int32_t ntiles) {
    uint32_t lo = 0, hi = p->ntile_code;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const PlanTileCode *t = &p->tile_code[mid];
        int c = t->op != op ? (t->op < op ? -1 : 1) : t->tile != tile ? (t->tile < tile ? -1 : 1)
                                                  : t->ntiles != ntiles ? (t->ntiles < ntiles ? -1 : 1) : 0;
        if (!c) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Tile launches (docs/plan-format.md, tile_code): each entry names a tile
 * of a real op, its launches are that op's, entries are sorted by (op,
 * tile, ntiles) and distinct (so the executor's lookup finds the one), and
 * the op's error word, which the executor reads after the tile, fits the
 * tile's workspace. */
static void check_tile_code(V *v) {
    const Plan *p = v->p;
    if (p->ntile_code && !p->op_code) vf_problem(v, "the plan has %u tile code entries but no op code table", p->ntile_code);
    for (uint32_t k = 0; k < p->ntile_code && !STOP(v); k++) {
        const PlanTileCode *t = &p->tile_code[k];
        if (t->op < 0 || t->op >= (int64_t)p->nops) {
            vf_problem(v, "tile code %u: op %d out of range", k, t->op);
            continue;
        }
        if (t->ntiles < 2 || t->tile < 0 || t->tile >= t->ntiles)
            vf_problem(v, "tile code %u (op %d): tile %d of %d does not exist", k, t->op, t->tile, t->ntiles);
        if ((uint64_t)t->first + t->count > p->nlaunches) {
            vf_problem(v, "tile code %u (op %d): launches [%u, +%u) out of range (%u launches)", k, t->op, t->first, t->count,
                    p->nlaunches);
            continue;
        }
        for (uint32_t i = t->first; i < t->first + t->count; i++)
            if (p->launches[i].op != t->op) {
                vf_problem(v, "tile code %u (op %d): its launch %u (%s) belongs to op %d", k, t->op, i, lentry(p, i),
                        p->launches[i].op);
                break;
            }
        if (t->ws_bytes < 0) vf_problem(v, "tile code %u (op %d): workspace of %" PRId64 " bytes", k, t->op, t->ws_bytes);
        else if (p->op_code && p->op_code[t->op].err_off >= 0 && p->op_code[t->op].err_off <= INT64_MAX - 12 &&
                 p->op_code[t->op].err_off + 12 > t->ws_bytes)
            vf_problem(v, "tile code %u (op %d): the op's error word at %" PRId64 " does not fit the tile's %" PRId64 "-byte workspace",
                    k, t->op, p->op_code[t->op].err_off, t->ws_bytes);
        if (k > 0) {
            const PlanTileCode *q = &p->tile_code[k - 1];
            if (q->op > t->op || (q->op == t->op && (q->tile > t->tile || (q->tile == t->tile && q->ntiles >= t->ntiles))))
                vf_problem(v, "tile code %u (op %d, tile %d of %d) is not after entry %u (op %d, tile %d of %d): entries are sorted and distinct",
                        k, t->op, t->tile, t->ntiles, k - 1, q->op, q->tile, q->ntiles);
        }
    }
}

/* ---- 1c. GEMM descriptors (docs/plan-format.md, gemms): each one says
 * what its zk_gemm launch computes, so the library call and the fallback
 * launch run the same product: the launch's arguments must be the
 * descriptor's, and every matrix it touches must lie inside its tensor ---- */

/* The last element + 1 of a rows x cols matrix with leading dim ld at off,
 * repeated nb times by stride sb and nr times by stride sr (elements); false
 * on overflow or when the leading dim is shorter than a row. */
static bool gemm_extent(int64_t off, int64_t rows, int64_t cols, int64_t ld, int64_t nb, int64_t sb, int64_t nr,
                        int64_t sr, int64_t *end) {
    if (!rows || !cols) {
        *end = off;
        return true;
    }
    int64_t a, b, c;
    if (ld < cols || __builtin_mul_overflow(rows - 1, ld, &a) || __builtin_mul_overflow(nb - 1, sb, &b) ||
        __builtin_mul_overflow(nr - 1, sr, &c))
        return false;
    return !__builtin_add_overflow(off, a, end) && !__builtin_add_overflow(*end, b, end) &&
           !__builtin_add_overflow(*end, c, end) && !__builtin_add_overflow(*end, cols, end);
}

static void check_gemm(V *v, uint32_t gi) {
    const Plan *p = v->p;
    const PlanGemm *g = &p->gemms[gi];
    uint32_t li = g->launch;
    const PlanLaunch *l = &p->launches[li];
    if (strcmp(lentry(p, li), "zk_gemm") || l->nargs != 18 || (uint64_t)l->arg + l->nargs > p->nlaunch_args) {
        vf_problem(v, "gemm %u: launch %u (%s) is not a zk_gemm launch", gi, li, lentry(p, li));
        return;
    }
    const PlanLaunchArg *a = &p->launch_args[l->arg];
    bool ta = g->flags & PLAN_GEMM_TA, tb = g->flags & PLAN_GEMM_TB;
    int64_t ints[12] = {g->m, g->n, g->k, g->lda, g->ldb, g->ldc, g->stride_a, g->stride_b, g->stride_c, g->rbatch,
                        g->rstride_a, g->rstride_b};
    /* B dequantized into the op's workspace: argument 2 is the workspace, b the quantized weight it comes from */
    bool bws = g->why == PLAN_GEMM_WHY_DEQUANT;
    int32_t ts[4] = {g->c, g->a, g->b, g->bias};
    int64_t offs[3] = {g->off_c, g->off_a, g->off_b};
    bool same = true;
    for (int k = 0; k < 3; k++) /* a tensor at its byte offset, or the op's workspace (PLAN_GEMM_OP_WS) at it */
        if (k == 2 && bws)
            same = same && a[2].kind == PARG_WS && g->b >= 0 && dtype_is_quant(p->tensors[g->b].dtype);
        else
            same = same &&
                   (ts[k] == PLAN_GEMM_OP_WS ? a[k].kind == PARG_WS : a[k].kind == PARG_TENSOR && a[k].tensor == ts[k]) &&
                   a[k].i == offs[k];
    same = same &&
                (g->bias < 0 ? a[3].kind == PARG_NULL : a[3].kind == PARG_TENSOR && a[3].tensor == g->bias && a[3].i == 0) &&
                a[16].kind == PARG_F32 && a[16].f == 1.0f && a[17].kind == PARG_F32 &&
                a[17].f == ((g->flags & PLAN_GEMM_ACCUM) ? 1.0f : 0.0f) && (int64_t)l->grid[2] == g->batch;
    for (int k = 0; k < 12 && same; k++) same = a[4 + k].kind == PARG_I64 && a[4 + k].i == ints[k];
    if (!same) vf_problem(v, "gemm %u: its launch %u's arguments are not the descriptor's (tensors, sizes, strides, beta, batches)", gi, li);
    int es = plan_dtype_size(g->dtype);
    if (bws) ts[2] = -1;
    for (int k = 0; k < 4; k++)
        if (ts[k] >= 0 && p->tensors[ts[k]].dtype != g->dtype)
            vf_problem(v, "gemm %u: tensor '%s' is %s, the gemm %s", gi, p->tensors[ts[k]].name,
                    dtype_name((DType)p->tensors[ts[k]].dtype), dtype_name((DType)g->dtype));
    for (int k = 0; k < 3; k++)
        if (es && offs[k] % es) vf_problem(v, "gemm %u: byte offset %" PRId64 " is not a whole element", gi, offs[k]);
    if (!es || STOP(v)) return;
    /* rows x cols as stored: C m x n; A m x k (k x m transposed); B k x n (n x k) */
    int64_t dims[3][3] = {{g->m, g->n, g->ldc}, {ta ? g->k : g->m, ta ? g->m : g->k, g->lda}, {tb ? g->n : g->k, tb ? g->k : g->n, g->ldb}};
    int64_t sb[3] = {g->stride_c, g->stride_a, g->stride_b}, sr[3] = {0, g->rstride_a, g->rstride_b};
    static const char *const what[3] = {"C", "A", "B"};
    /* a workspace operand lies inside its op's workspace */
    int64_t ws_elems = l->op >= 0 && (uint32_t)l->op < p->nops && p->op_code ? p->op_code[l->op].ws_bytes / es : 0;
    for (int k = 0; k < 3; k++) {
        int64_t end;
        if (ts[k] == -1) { /* B in the op's workspace, from its argument's offset */
            int64_t ws = l->op >= 0 && l->op < (int64_t)p->nops && p->op_code ? p->op_code[l->op].ws_bytes : 0;
            if (!gemm_extent(offs[k] / es, dims[k][0], dims[k][1], dims[k][2], g->batch, sb[k], g->rbatch, sr[k], &end) ||
                end > (ws - a[2].i) / es)
                vf_problem(v, "gemm %u: B, dequantized, does not fit its op's %" PRId64 "-byte workspace from byte %" PRId64, gi, ws,
                        a[2].i);
            continue;
        }
        bool ws = ts[k] == PLAN_GEMM_OP_WS;
        const char *name = ws ? "the op's workspace" : p->tensors[ts[k]].name;
        int64_t numel = ws ? ws_elems : p->tensors[ts[k]].numel;
        if (!gemm_extent(offs[k] / es, dims[k][0], dims[k][1], dims[k][2], g->batch, sb[k], k ? g->rbatch : 1, sr[k], &end))
            vf_problem(v, "gemm %u: %s (%s) has leading dim %" PRId64 " for %" PRId64 " columns, or its extent overflows", gi,
                    what[k], name, dims[k][2], dims[k][1]);
        else if (end > numel)
            vf_problem(v, "gemm %u: %s reaches element %" PRId64 " of '%s', which has %" PRId64, gi, what[k], end, name, numel);
    }
    if (g->bias >= 0 && p->tensors[g->bias].numel < g->n)
        vf_problem(v, "gemm %u: bias '%s' has %" PRId64 " elements for %" PRId64 " columns", gi, p->tensors[g->bias].name,
                p->tensors[g->bias].numel, g->n);
    if ((g->path == PLAN_GEMM_NVRTC) != (g->why != PLAN_GEMM_WHY_NONE))
        vf_problem(v, "gemm %u: path %s with reason '%s'", gi, plan_gemm_path_names[g->path], plan_gemm_why_names[g->why]);
    if (g->path == PLAN_GEMM_LT && g->rbatch != 1)
        vf_problem(v, "gemm %u: a cuBLASLt gemm cannot sum %" PRId64 " batches", gi, g->rbatch);
    if (g->ws_off > PLAN_GEMM_MAX_WS || g->ws_bytes > PLAN_GEMM_MAX_WS - g->ws_off || g->ws_off % 256)
        vf_problem(v, "gemm %u: workspace [%" PRId64 ", +%" PRId64 ") beyond %" PRId64 " bytes or not 256-aligned", gi, g->ws_off,
                g->ws_bytes, (int64_t)PLAN_GEMM_MAX_WS);
}

static void check_gemms(V *v) {
    const Plan *p = v->p;
    for (uint32_t gi = 0; gi < p->ngemms && !STOP(v); gi++) {
        const PlanGemm *g = &p->gemms[gi];
        if (g->launch >= p->nlaunches) {
            vf_problem(v, "gemm %u: launch %u out of range", gi, g->launch);
            continue;
        }
        if (gi && g->launch <= p->gemms[gi - 1].launch) vf_problem(v, "gemm %u: not sorted by launch", gi);
        check_gemm(v, gi);
    }
    /* a plan with descriptors has one for every gemm launch (a version-3 plan has none) */
    if (!p->ngemms) return;
    for (uint32_t i = 0; i < p->nlaunches && !STOP(v); i++)
        if (!strcmp(lentry(p, i), "zk_gemm") && plan_gemm_of_launch(p, i) < 0)
            vf_problem(v, "launch %u (zk_gemm) has no gemm descriptor", i);
}

void vf_check_launches(V *v) {
    const Plan *p = v->p;
    if (p->nlaunches && !p->op_code) vf_problem(v, "the plan has %u launches but no op code table", p->nlaunches);
    /* A tile's launches share the tile's workspace, the others their op's. */
    int32_t *tile_of = malloc(sizeof *tile_of * (p->nlaunches ? p->nlaunches : 1));
    if (!tile_of) {
        vf_problem(v, "out of memory verifying the launches");
        return;
    }
    for (uint32_t i = 0; i < p->nlaunches; i++) tile_of[i] = -1;
    for (uint32_t k = 0; k < p->ntile_code; k++) {
        const PlanTileCode *t = &p->tile_code[k];
        for (uint64_t i = t->first; i < (uint64_t)t->first + t->count && i < p->nlaunches; i++) tile_of[i] = (int32_t)k;
    }
    for (uint32_t i = 0; i < p->nlaunches && !STOP(v); i++) {
        const PlanLaunch *l = &p->launches[i];
        int64_t ws = l->op >= 0 && l->op < (int64_t)p->nops && p->op_code ? p->op_code[l->op].ws_bytes : 0;
        if (tile_of[i] >= 0) ws = p->tile_code[tile_of[i]].ws_bytes;
        check_launch(v, i, ws, tile_of[i] >= 0);
    }
    check_gemms(v);
    free(tile_of);
    for (uint32_t o = 0; p->op_code && o < p->nops && !STOP(v); o++) {
        const PlanOpCode *c = &p->op_code[o];
        if ((uint64_t)c->first + c->count > p->nlaunches) {
            vf_problem(v, "op %u: launches [%u, +%u) out of range (%u launches)", o, c->first, c->count, p->nlaunches);
            continue;
        }
        for (uint32_t k = c->first; k < c->first + c->count; k++)
            if (p->launches[k].op != (int32_t)o) {
                vf_problem(v, "op %u: its launch %u (%s) belongs to op %d", o, k, lentry(p, k), p->launches[k].op);
                break;
            }
        if (c->ws_bytes < 0) vf_problem(v, "op %u: workspace of %" PRId64 " bytes", o, c->ws_bytes);
        if (c->err_off < -1 || (c->err_off >= 0 && (c->err_off > INT64_MAX - 12 || c->err_off + 12 > c->ws_bytes)))
            vf_problem(v, "op %u: error word at %" PRId64 " does not fit its %" PRId64 "-byte workspace", o, c->err_off, c->ws_bytes);
    }
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++) {
            int32_t l = p->util[u][t];
            if (l < -1 || l >= (int64_t)p->nlaunches) vf_problem(v, "utility launch %d for dtype %d: launch %d out of range", u, t, l);
            else if (l >= 0 && p->launches[l].op != -1)
                vf_problem(v, "utility launch %d for dtype %d: launch %d (%s) belongs to op %d", u, t, l, lentry(p, (uint32_t)l),
                        p->launches[l].op);
        }
    check_tile_code(v);
    if (!p->nlaunches || !p->op_code) return;
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op != PI_KERNEL || s->arg < 0 || (uint32_t)s->arg >= p->nops) continue;
        if (s->ntiles <= 1 && !p->op_code[s->arg].count)
            vf_problem(v, "instruction %u (kernel) runs op %d, which has no launches", i, s->arg);
        else if (s->ntiles > 1 && tile_code_find(p, s->arg, s->tile, s->ntiles) < 0)
            vf_problem(v, "instruction %u (kernel) runs tile %d of %d of op %d, which has no tile launches", i, s->tile,
                    s->ntiles, s->arg);
    }
}


/* ---- 2e. what the executor addresses: operands it reads and writes as
 * memory are not in the NVMe arena (and NVMe transfers have their NVMe side
 * there), a kernel's operand covers the tensor bound to it (a tile's weight
 * and weight gradient one tile of rows), Adam's operands its shard ---- */

void vf_check_kernel_operands(V *v, uint32_t i) {
    const Plan *p = v->p;
    const PlanInstr *s = &p->instrs[i];
    const PlanOp *o = &p->ops[s->arg];
    const PlanOp *fo = o;
    if (o->kind != OP_FWD && o->kind != OP_LOSS_GRAD) {
        if (o->fwd < 0 || p->ops[o->fwd].kind != OP_FWD || p->ops[o->fwd].prim != o->prim) {
            vf_problem(v, "instruction %u (kernel): op %d names no forward op of its primitive", i, s->arg);
            return;
        }
        fo = &p->ops[o->fwd];
    }
    int32_t wt = -1, dw = -1;
    int64_t rows = 0;
    if (s->ntiles > 1) {
        bool emb = fo->prim == PRIM_EMBEDDING, moe = fo->prim == PRIM_MOE_EXPERT; /* moe: whole experts a tile */
        if ((!emb && !moe && fo->prim != PRIM_LINEAR && fo->prim != PRIM_MATMUL) || o->kind == OP_LOSS_GRAD || fo->nin < (moe ? 3 : 2)) {
            vf_problem(v, "instruction %u (kernel) tiles op %d, which is not a linear, matmul, embedding or moe_expert", i, s->arg);
            return;
        }
        int slot = emb ? 0 : moe ? 2 : 1;
        wt = fo->in[slot];
        const PlanTensor *w = wt >= 0 ? &p->tensors[wt] : NULL;
        if (!w || w->rank != (moe ? 3 : 2) || w->dims[0] % s->ntiles) {
            vf_problem(v, "instruction %u (kernel): %d tiles of a weight that is not 2-D (3-D experts) with rows divisible by them", i, s->ntiles);
            return;
        }
        rows = w->dims[0] / s->ntiles;
        if (o->kind == OP_BWD) dw = o->out[slot];
    }
    uint32_t k = 0;
    for (int pass = 0; pass < 2; pass++) {
        int cnt = pass ? o->nout : o->nin;
        const int32_t *ids = pass ? o->out : o->in;
        for (int j = 0; j < cnt && k < s->nopnd; j++, k++) {
            const PlanOperand *x = &p->operands[s->opnd + k];
            if (ids[j] < 0 || x->buffer < 0) continue;
            const PlanTensor *t = &p->tensors[ids[j]];
            uint64_t need = vf_tensor_bytes(t);
            if (ids[j] == wt || ids[j] == dw) need = (uint64_t)rows * (uint64_t)(t->numel / t->dims[0]) * (uint64_t)plan_dtype_size(t->dtype);
            if (x->bytes < need)
                vf_problem(v, "instruction %u (kernel): operand %u holds %" PRIu64 " bytes of '%s', which needs %" PRIu64, i, k,
                        x->bytes, t->name, need);
        }
    }
}

/* The buffer of tensor t's home, -1 for none. */
