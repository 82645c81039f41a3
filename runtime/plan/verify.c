#include "verify.h"
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vocab.h"

enum { MAX_PROBLEMS = 20 };

typedef struct V {
    const Plan *p;
    char *msgs;
    size_t n, used;
    int problems;
    /* derived */
    uint32_t *qpos;   /* 1-based position of each instruction in its queue */
    uint32_t *vc;     /* ninstrs x PLAN_NQUEUES vector clocks */
    uint32_t *order;  /* a topological order */
    /* per buffer: uses */
    uint32_t *use_start, *use_list; /* CSR: instructions using each buffer */
    uint8_t *use_mode;
} V;

static void problem(V *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(V *v, const char *fmt, ...) {
    v->problems++;
    if (v->problems > MAX_PROBLEMS || !v->msgs || v->used + 1 >= v->n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(v->msgs + v->used, v->n - v->used, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    v->used += (size_t)w;
    if (v->used + 1 >= v->n) {
        v->used = v->n - 1;
        return;
    }
    v->msgs[v->used++] = '\n';
    v->msgs[v->used] = 0;
}
#define STOP(v) ((v)->problems >= MAX_PROBLEMS)

static const char *iname(const Plan *p, uint32_t i) {
    return p->instrs[i].op < PI_COUNT ? plan_opcode_names[p->instrs[i].op] : "?";
}
static const char *bname(const Plan *p, int32_t b) {
    return p->buffers[b].name ? p->buffers[b].name : "";
}

/* ---- 1. ranges ---- */
static bool check_ranges(V *v) {
    const Plan *p = v->p;
    int before = v->problems;
    int64_t nt = p->ntensors;
    if (p->ranks < 1) problem(v, "plan has %d ranks", p->ranks);
    for (uint32_t i = 0; i < p->ntensors; i++) {
        const PlanTensor *t = &p->tensors[i];
        int32_t refs[] = {t->param, t->grad, t->master, t->momentum, t->variance};
        for (int k = 0; k < 5; k++)
            if (refs[k] < -1 || refs[k] >= nt) problem(v, "tensor %u '%s' refers to tensor %d, out of range", i, t->name, refs[k]);
        if (t->shard < -1 || t->shard >= (int64_t)p->nshards) problem(v, "tensor %u '%s': shard %d out of range", i, t->name, t->shard);
        if (t->rank > PLAN_MAX_RANK) problem(v, "tensor %u '%s': rank %u", i, t->name, t->rank);
    }
    for (uint32_t i = 0; i < p->nops; i++) {
        const PlanOp *o = &p->ops[i];
        if (o->nin > PLAN_MAX_IN || o->nout > PLAN_MAX_OUT) {
            problem(v, "op %u: %u inputs, %u outputs", i, o->nin, o->nout);
            continue;
        }
        for (int k = 0; k < o->nin; k++) if (o->in[k] < -1 || o->in[k] >= nt) problem(v, "op %u: input tensor %d out of range", i, o->in[k]);
        for (int k = 0; k < o->nout; k++) if (o->out[k] < -1 || o->out[k] >= nt) problem(v, "op %u: output tensor %d out of range", i, o->out[k]);
    }
    for (uint32_t i = 0; i < p->nshards; i++) {
        const PlanShard *s = &p->shards[i];
        if (s->tensor < 0 || s->tensor >= nt) problem(v, "shard %u: tensor %d out of range", i, s->tensor);
        if (s->buffer < 0 || s->buffer >= (int64_t)p->nbuffers) problem(v, "shard %u: buffer %d out of range", i, s->buffer);
        if (s->home >= PLAN_NTIERS) problem(v, "shard %u: home tier %u out of range", i, s->home);
    }
    for (uint32_t i = 0; i < p->nbuffers; i++) {
        const PlanBuffer *b = &p->buffers[i];
        if (b->arena >= PLAN_NARENAS) problem(v, "buffer %u '%s': arena %u out of range", i, bname(p, (int32_t)i), b->arena);
        if (b->tensor < -1 || b->tensor >= nt) problem(v, "buffer %u '%s': tensor %d out of range", i, bname(p, (int32_t)i), b->tensor);
    }
    for (uint32_t i = 0; i < p->noperands; i++) {
        const PlanOperand *o = &p->operands[i];
        if (o->buffer < -1 || o->buffer >= (int64_t)p->nbuffers) problem(v, "operand %u: buffer %d out of range", i, o->buffer);
        else if (o->mode < PLAN_R || o->mode > PLAN_M) problem(v, "operand %u: access mode %u", i, o->mode);
    }
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op >= PI_COUNT) {
            problem(v, "instruction %u: unknown opcode %u", i, s->op);
            continue;
        }
        if (s->queue >= PLAN_NQUEUES) problem(v, "instruction %u (%s): queue %u out of range", i, iname(p, i), s->queue);
        else if (plan_opcode_queue[s->op] != Q_ANY && plan_opcode_queue[s->op] != s->queue)
            problem(v, "instruction %u (%s) is on queue %s, its opcode runs on %s", i, iname(p, i),
                    plan_queue_names[s->queue], plan_queue_names[plan_opcode_queue[s->op]]);
        if ((uint64_t)s->opnd + s->nopnd > p->noperands) problem(v, "instruction %u (%s): operands out of range", i, iname(p, i));
        if ((uint64_t)s->dep + s->ndeps > p->ndeps) problem(v, "instruction %u (%s): dependencies out of range", i, iname(p, i));
        if (s->op == PI_KERNEL && (s->arg < 0 || s->arg >= (int64_t)p->nops)) problem(v, "instruction %u (kernel): op %d out of range", i, s->arg);
    }
    /* Each instruction's operand and dependency ranges come after the
     * previous instruction's (gaps allowed, overlap not): the per-buffer use
     * lists and the dependency graph are then bounded by the arrays' sizes. */
    uint64_t opnd_end = 0, dep_end = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op >= PI_COUNT) continue;
        if (s->nopnd && s->opnd < opnd_end)
            problem(v, "instruction %u (%s): operands [%u, +%u) overlap the previous instruction's, which end at %" PRIu64, i,
                    iname(p, i), s->opnd, s->nopnd, opnd_end);
        else if (s->nopnd) opnd_end = (uint64_t)s->opnd + s->nopnd;
        if (s->ndeps && s->dep < dep_end)
            problem(v, "instruction %u (%s): dependencies [%u, +%u) overlap the previous instruction's, which end at %" PRIu64, i,
                    iname(p, i), s->dep, s->ndeps, dep_end);
        else if (s->ndeps) dep_end = (uint64_t)s->dep + s->ndeps;
    }
    for (uint32_t i = 0; i < p->ndeps; i++)
        if (p->deps[i] >= p->ninstrs) problem(v, "dependency %u names instruction %u, out of range", i, p->deps[i]);
    if (p->opt_begin > p->ninstrs) problem(v, "optimizer start %u is past the schedule's %u instructions", p->opt_begin, p->ninstrs);
    return v->problems == before;
}

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
    if (!unit) problem(v, "launch %u (%s) names unit '%s', which the plan does not embed", i, e, l->unit ? l->unit : "");
    if (!*e) problem(v, "launch %u has no entry point", i);
    if (l->op < -1 || l->op >= (int64_t)p->nops) problem(v, "launch %u (%s): op %d out of range", i, e, l->op);
    if (!l->grid[0] || !l->grid[1] || !l->grid[2] || !l->block[0] || !l->block[1] || !l->block[2])
        problem(v, "launch %u (%s): empty grid (%u,%u,%u) or block (%u,%u,%u)", i, e, l->grid[0], l->grid[1], l->grid[2],
                l->block[0], l->block[1], l->block[2]);
    else if ((uint64_t)l->block[0] * l->block[1] * l->block[2] > 1024 || l->block[2] > 64)
        problem(v, "launch %u (%s): block (%u,%u,%u) exceeds CUDA's 1024 threads (z at most 64)", i, e, l->block[0],
                l->block[1], l->block[2]);
    else if (l->grid[0] > INT32_MAX || l->grid[1] > 65535 || l->grid[2] > 65535)
        problem(v, "launch %u (%s): grid (%u,%u,%u) exceeds CUDA's limits", i, e, l->grid[0], l->grid[1], l->grid[2]);
    if ((uint64_t)l->arg + l->nargs > p->nlaunch_args) {
        problem(v, "launch %u (%s): arguments [%u, +%u) out of range (%u arguments)", i, e, l->arg, l->nargs, p->nlaunch_args);
        return;
    }
    for (uint32_t k = 0; k < l->nargs; k++) {
        const PlanLaunchArg *a = &p->launch_args[l->arg + k];
        if (a->kind >= PLAN_NARGKINDS) {
            problem(v, "launch %u (%s): argument %u has unknown kind %u", i, e, k, a->kind);
            continue;
        }
        if (a->rt >= PLAN_NRT) problem(v, "launch %u (%s): argument %u: run-time value %u out of range", i, e, k, a->rt);
        if (a->tensor < -1 || a->tensor >= (int64_t)p->ntensors)
            problem(v, "launch %u (%s): argument %u: tensor %d out of range", i, e, k, a->tensor);
        else if ((a->kind == PARG_TENSOR || a->kind == PARG_NUMEL) && a->tensor < 0 && l->op >= 0)
            problem(v, "launch %u (%s) of op %d: argument %u binds no tensor", i, e, l->op, k);
        if (a->kind == PARG_WS && p->op_code && (a->i < 0 || a->i >= ws))
            problem(v, "launch %u (%s): argument %u: workspace offset %" PRId64 " outside the %s's %" PRId64 " bytes", i, e, k,
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
    if (p->ntile_code && !p->op_code) problem(v, "the plan has %u tile code entries but no op code table", p->ntile_code);
    for (uint32_t k = 0; k < p->ntile_code && !STOP(v); k++) {
        const PlanTileCode *t = &p->tile_code[k];
        if (t->op < 0 || t->op >= (int64_t)p->nops) {
            problem(v, "tile code %u: op %d out of range", k, t->op);
            continue;
        }
        if (t->ntiles < 2 || t->tile < 0 || t->tile >= t->ntiles)
            problem(v, "tile code %u (op %d): tile %d of %d does not exist", k, t->op, t->tile, t->ntiles);
        if ((uint64_t)t->first + t->count > p->nlaunches) {
            problem(v, "tile code %u (op %d): launches [%u, +%u) out of range (%u launches)", k, t->op, t->first, t->count,
                    p->nlaunches);
            continue;
        }
        for (uint32_t i = t->first; i < t->first + t->count; i++)
            if (p->launches[i].op != t->op) {
                problem(v, "tile code %u (op %d): its launch %u (%s) belongs to op %d", k, t->op, i, lentry(p, i),
                        p->launches[i].op);
                break;
            }
        if (t->ws_bytes < 0) problem(v, "tile code %u (op %d): workspace of %" PRId64 " bytes", k, t->op, t->ws_bytes);
        else if (p->op_code && p->op_code[t->op].err_off >= 0 && p->op_code[t->op].err_off <= INT64_MAX - 12 &&
                 p->op_code[t->op].err_off + 12 > t->ws_bytes)
            problem(v, "tile code %u (op %d): the op's error word at %" PRId64 " does not fit the tile's %" PRId64 "-byte workspace",
                    k, t->op, p->op_code[t->op].err_off, t->ws_bytes);
        if (k > 0) {
            const PlanTileCode *q = &p->tile_code[k - 1];
            if (q->op > t->op || (q->op == t->op && (q->tile > t->tile || (q->tile == t->tile && q->ntiles >= t->ntiles))))
                problem(v, "tile code %u (op %d, tile %d of %d) is not after entry %u (op %d, tile %d of %d): entries are sorted and distinct",
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
        problem(v, "gemm %u: launch %u (%s) is not a zk_gemm launch", gi, li, lentry(p, li));
        return;
    }
    const PlanLaunchArg *a = &p->launch_args[l->arg];
    bool ta = g->flags & PLAN_GEMM_TA, tb = g->flags & PLAN_GEMM_TB;
    int64_t ints[12] = {g->m, g->n, g->k, g->lda, g->ldb, g->ldc, g->stride_a, g->stride_b, g->stride_c, g->rbatch,
                        g->rstride_a, g->rstride_b};
    bool same = a[0].kind == PARG_TENSOR && a[0].tensor == g->c && a[0].i == g->off_c && a[1].kind == PARG_TENSOR &&
                a[1].tensor == g->a && a[1].i == g->off_a && a[2].kind == PARG_TENSOR && a[2].tensor == g->b &&
                a[2].i == g->off_b &&
                (g->bias < 0 ? a[3].kind == PARG_NULL : a[3].kind == PARG_TENSOR && a[3].tensor == g->bias && a[3].i == 0) &&
                a[16].kind == PARG_F32 && a[16].f == 1.0f && a[17].kind == PARG_F32 &&
                a[17].f == ((g->flags & PLAN_GEMM_ACCUM) ? 1.0f : 0.0f) && (int64_t)l->grid[2] == g->batch;
    for (int k = 0; k < 12 && same; k++) same = a[4 + k].kind == PARG_I64 && a[4 + k].i == ints[k];
    if (!same) problem(v, "gemm %u: its launch %u's arguments are not the descriptor's (tensors, sizes, strides, beta, batches)", gi, li);
    int es = plan_dtype_size(g->dtype);
    int32_t ts[4] = {g->c, g->a, g->b, g->bias};
    int64_t offs[3] = {g->off_c, g->off_a, g->off_b};
    for (int k = 0; k < 4; k++)
        if (ts[k] >= 0 && p->tensors[ts[k]].dtype != g->dtype)
            problem(v, "gemm %u: tensor '%s' is %s, the gemm %s", gi, p->tensors[ts[k]].name,
                    dtype_name((DType)p->tensors[ts[k]].dtype), dtype_name((DType)g->dtype));
    for (int k = 0; k < 3; k++)
        if (es && offs[k] % es) problem(v, "gemm %u: byte offset %" PRId64 " is not a whole element", gi, offs[k]);
    if (!es || STOP(v)) return;
    /* rows x cols as stored: C m x n; A m x k (k x m transposed); B k x n (n x k) */
    int64_t dims[3][3] = {{g->m, g->n, g->ldc}, {ta ? g->k : g->m, ta ? g->m : g->k, g->lda}, {tb ? g->n : g->k, tb ? g->k : g->n, g->ldb}};
    int64_t sb[3] = {g->stride_c, g->stride_a, g->stride_b}, sr[3] = {0, g->rstride_a, g->rstride_b};
    static const char *const what[3] = {"C", "A", "B"};
    for (int k = 0; k < 3; k++) {
        int64_t end;
        const PlanTensor *t = &p->tensors[ts[k]];
        if (!gemm_extent(offs[k] / es, dims[k][0], dims[k][1], dims[k][2], g->batch, sb[k], k ? g->rbatch : 1, sr[k], &end))
            problem(v, "gemm %u: %s (%s) has leading dim %" PRId64 " for %" PRId64 " columns, or its extent overflows", gi,
                    what[k], t->name, dims[k][2], dims[k][1]);
        else if (end > t->numel)
            problem(v, "gemm %u: %s reaches element %" PRId64 " of '%s', which has %" PRId64, gi, what[k], end, t->name, t->numel);
    }
    if (g->bias >= 0 && p->tensors[g->bias].numel < g->n)
        problem(v, "gemm %u: bias '%s' has %" PRId64 " elements for %" PRId64 " columns", gi, p->tensors[g->bias].name,
                p->tensors[g->bias].numel, g->n);
    if ((g->path == PLAN_GEMM_NVRTC) != (g->why != PLAN_GEMM_WHY_NONE))
        problem(v, "gemm %u: path %s with reason '%s'", gi, plan_gemm_path_names[g->path], plan_gemm_why_names[g->why]);
    if (g->path == PLAN_GEMM_LT && g->rbatch != 1)
        problem(v, "gemm %u: a cuBLASLt gemm cannot sum %" PRId64 " batches", gi, g->rbatch);
    if (g->ws_off > PLAN_GEMM_MAX_WS || g->ws_bytes > PLAN_GEMM_MAX_WS - g->ws_off || g->ws_off % 256)
        problem(v, "gemm %u: workspace [%" PRId64 ", +%" PRId64 ") beyond %" PRId64 " bytes or not 256-aligned", gi, g->ws_off,
                g->ws_bytes, (int64_t)PLAN_GEMM_MAX_WS);
}

static void check_gemms(V *v) {
    const Plan *p = v->p;
    for (uint32_t gi = 0; gi < p->ngemms && !STOP(v); gi++) {
        const PlanGemm *g = &p->gemms[gi];
        if (g->launch >= p->nlaunches) {
            problem(v, "gemm %u: launch %u out of range", gi, g->launch);
            continue;
        }
        if (gi && g->launch <= p->gemms[gi - 1].launch) problem(v, "gemm %u: not sorted by launch", gi);
        check_gemm(v, gi);
    }
    /* a plan with descriptors has one for every gemm launch (a version-3 plan has none) */
    if (!p->ngemms) return;
    for (uint32_t i = 0; i < p->nlaunches && !STOP(v); i++)
        if (!strcmp(lentry(p, i), "zk_gemm") && plan_gemm_of_launch(p, i) < 0)
            problem(v, "launch %u (zk_gemm) has no gemm descriptor", i);
}

static void check_launches(V *v) {
    const Plan *p = v->p;
    if (p->nlaunches && !p->op_code) problem(v, "the plan has %u launches but no op code table", p->nlaunches);
    /* A tile's launches share the tile's workspace, the others their op's. */
    int32_t *tile_of = malloc(sizeof *tile_of * (p->nlaunches ? p->nlaunches : 1));
    if (!tile_of) {
        problem(v, "out of memory verifying the launches");
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
            problem(v, "op %u: launches [%u, +%u) out of range (%u launches)", o, c->first, c->count, p->nlaunches);
            continue;
        }
        for (uint32_t k = c->first; k < c->first + c->count; k++)
            if (p->launches[k].op != (int32_t)o) {
                problem(v, "op %u: its launch %u (%s) belongs to op %d", o, k, lentry(p, k), p->launches[k].op);
                break;
            }
        if (c->ws_bytes < 0) problem(v, "op %u: workspace of %" PRId64 " bytes", o, c->ws_bytes);
        if (c->err_off < -1 || (c->err_off >= 0 && (c->err_off > INT64_MAX - 12 || c->err_off + 12 > c->ws_bytes)))
            problem(v, "op %u: error word at %" PRId64 " does not fit its %" PRId64 "-byte workspace", o, c->err_off, c->ws_bytes);
    }
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++) {
            int32_t l = p->util[u][t];
            if (l < -1 || l >= (int64_t)p->nlaunches) problem(v, "utility launch %d for dtype %d: launch %d out of range", u, t, l);
            else if (l >= 0 && p->launches[l].op != -1)
                problem(v, "utility launch %d for dtype %d: launch %d (%s) belongs to op %d", u, t, l, lentry(p, (uint32_t)l),
                        p->launches[l].op);
        }
    check_tile_code(v);
    if (!p->nlaunches || !p->op_code) return;
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op != PI_KERNEL || s->arg < 0 || (uint32_t)s->arg >= p->nops) continue;
        if (s->ntiles <= 1 && !p->op_code[s->arg].count)
            problem(v, "instruction %u (kernel) runs op %d, which has no launches", i, s->arg);
        else if (s->ntiles > 1 && tile_code_find(p, s->arg, s->tile, s->ntiles) < 0)
            problem(v, "instruction %u (kernel) runs tile %d of %d of op %d, which has no tile launches", i, s->tile,
                    s->ntiles, s->arg);
    }
}

/* ---- 2. arenas, buffers, operands ---- */
static void check_memory(V *v) {
    const Plan *p = v->p;
    char a[32], b[32];
    for (int i = 0; i < PLAN_NARENAS; i++) {
        const PlanArena *ar = &p->arenas[i];
        if (ar->size > ar->capacity)
            problem(v, "arena %s uses %s per rank, more than its capacity %s", plan_arena_names[i],
                    plan_bytes_str(ar->size, a, sizeof a), plan_bytes_str(ar->capacity, b, sizeof b));
    }
    int rpn = p->target.gpus_per_node > 0 ? p->target.gpus_per_node : 1;
    uint64_t host = p->target.cpu_memory / (uint64_t)rpn;
    uint64_t used = p->arenas[ARENA_PINNED].size + p->arenas[ARENA_CPU].size;
    if (used > host)
        problem(v, "pinned staging and CPU homes take %s per rank, more than the rank's share of host memory %s",
                plan_bytes_str(used, a, sizeof a), plan_bytes_str(host, b, sizeof b));
    for (uint32_t i = 0; i < p->nbuffers && !STOP(v); i++) {
        const PlanBuffer *bf = &p->buffers[i];
        const PlanArena *ar = &p->arenas[bf->arena];
        if (bf->offset > ar->size || bf->bytes > ar->size - bf->offset)
            problem(v, "buffer '%s' [%" PRIu64 ", +%" PRIu64 ") lies outside arena %s of %" PRIu64 " bytes", bname(p, (int32_t)i),
                    bf->offset, bf->bytes, plan_arena_names[bf->arena], ar->size);
        else if (ar->align > 1 && bf->offset % ar->align)
            problem(v, "buffer '%s' at offset %" PRIu64 " is not aligned to %" PRIu64 " in arena %s", bname(p, (int32_t)i),
                    bf->offset, ar->align, plan_arena_names[bf->arena]);
    }
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        for (uint32_t k = 0; k < s->nopnd; k++) {
            const PlanOperand *o = &p->operands[s->opnd + k];
            if (o->buffer < 0) {
                if (strcmp(plan_opcode_operands[s->op], "*")) problem(v, "instruction %u (%s): operand %u names no buffer", i, iname(p, i), k);
                continue;
            }
            const PlanBuffer *bf = &p->buffers[o->buffer];
            if (o->offset > bf->bytes || o->bytes > bf->bytes - o->offset)
                problem(v, "instruction %u (%s) accesses [%" PRIu64 ", +%" PRIu64 ") of buffer '%s', which has %" PRIu64 " bytes",
                        i, iname(p, i), o->offset, o->bytes, bname(p, o->buffer), bf->bytes);
        }
    }
}

/* ---- 2b. operand layouts and transfer sizes ---- */
static void check_layouts(V *v) {
    const Plan *p = v->p;
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        const char *lay = plan_opcode_operands[s->op];
        const PlanOperand *o = &p->operands[s->opnd];
        if (!strcmp(lay, "*")) {
            if ((s->op == PI_CPU_ADAM || s->op == PI_GPU_ADAM) && s->nopnd != 6 &&
                !(s->op == PI_CPU_ADAM && (s->nopnd == 7 || s->nopnd == 9)))
                problem(v, "instruction %u (%s) has %u operands, expected 6 (a CPU Adam: 7 with a backup, 9 with twins)", i,
                        iname(p, i), s->nopnd);
            if (s->op == PI_KERNEL && s->arg >= 0 && (uint32_t)s->arg < p->nops &&
                s->nopnd != (uint32_t)p->ops[s->arg].nin + p->ops[s->arg].nout)
                problem(v, "instruction %u (kernel) has %u operands, its op %d has %u", i, s->nopnd, s->arg,
                        p->ops[s->arg].nin + p->ops[s->arg].nout);
            continue;
        }
        size_t n = strlen(lay);
        if (s->nopnd != n) {
            problem(v, "instruction %u (%s) has %u operands, expected %zu (%s)", i, iname(p, i), s->nopnd, n, lay);
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            int want = lay[k] == 'R' ? PLAN_R : lay[k] == 'W' ? PLAN_W : PLAN_M;
            if (o[k].mode != want)
                problem(v, "instruction %u (%s): operand %zu is %s, its opcode %s it", i, iname(p, i), k,
                        o[k].mode == PLAN_R ? "read" : o[k].mode == PLAN_W ? "written" : "updated",
                        want == PLAN_R ? "reads" : want == PLAN_W ? "writes" : "updates");
        }
        uint64_t r = (uint64_t)p->ranks;
        switch ((PlanOpcode)s->op) {
        case PI_NVME_READ:
        case PI_NVME_WRITE:
        case PI_H2D:
        case PI_D2H:
        case PI_ACCUM:
            if (o[0].bytes != o[1].bytes)
                problem(v, "instruction %u (%s) moves %" PRIu64 " bytes into a range of %" PRIu64, i, iname(p, i), o[0].bytes, o[1].bytes);
            break;
        case PI_ALLGATHER:
            if (o[1].bytes > r * o[0].bytes)
                problem(v, "instruction %u (allgather): %d ranks x %" PRIu64 " bytes cannot fill %" PRIu64, i, p->ranks, o[0].bytes, o[1].bytes);
            break;
        case PI_REDUCE_SCATTER:
            if (o[0].bytes > r * o[1].bytes)
                problem(v, "instruction %u (reduce_scatter): %" PRIu64 " bytes do not fit %d ranks x %" PRIu64, i, o[0].bytes, p->ranks, o[1].bytes);
            break;
        default: break;
        }
    }
}

/* ---- 2c. training settings and the token batch: what zinfrun sizes its
 * batches, loops and the INPUT copies by ---- */
static void check_train(V *v) {
    const Plan *p = v->p;
    const PlanTrain *t = &p->train;
    if (t->micro_batch < 1) problem(v, "micro_batch is %" PRId64 ", must be at least 1", t->micro_batch);
    if (t->schedule >= LR_NSCHEDULES) problem(v, "the learning-rate schedule is %u, not one of constant, cosine, linear", t->schedule);
    if (t->grad_accum < 1 || t->grad_accum > PLAN_MAX_ACCUM)
        problem(v, "grad_accum is %" PRId64 ", must be 1 to %d", t->grad_accum, PLAN_MAX_ACCUM);
    if (t->steps < 0 || t->steps > (INT64_MAX >> 8)) problem(v, "steps is %" PRId64 ", out of range", t->steps);
    if (t->warmup_steps < 0) problem(v, "warmup_steps is %" PRId64 ", must not be negative", t->warmup_steps);
    if (t->checkpoint_every < 0) problem(v, "checkpoint_every is %" PRId64 ", must not be negative", t->checkpoint_every);
    if (!plan_dtype_size(t->dtype)) problem(v, "training dtype %u is unknown", t->dtype);
    for (int k = 0; k < p->ninputs; k++) {
        int32_t id = p->inputs[k];
        if (id < 0 || (uint32_t)id >= p->ntensors) problem(v, "input %d: tensor %d out of range", k, id);
        else if (p->tensors[id].dtype != 4 /* i32 */)
            problem(v, "input %d '%s' is not i32: the runtime feeds token ids", k, p->tensors[id].name);
    }
    int64_t B = 0, T = 0;
    bool batch = plan_batch_shape(p, &B, &T);
    if (!batch)
        problem(v, "the plan defines no token batch (micro_batch %" PRId64 ", %d input%s): zinfrun feeds micro_batch rows of input 0's "
                "last dimension", t->micro_batch, p->ninputs, p->ninputs == 1 ? "" : "s");
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op != PI_INPUT || s->nopnd < 1) continue;
        if (s->arg < 0 || s->arg >= p->ninputs || p->inputs[s->arg] < 0 || (uint32_t)p->inputs[s->arg] >= p->ntensors) {
            problem(v, "instruction %u (input) feeds input %d, out of range (%d inputs)", i, s->arg, p->ninputs);
            continue;
        }
        if (!batch) {
            problem(v, "instruction %u (input) feeds a batch the plan does not define (micro_batch %" PRId64 ")", i, t->micro_batch);
            continue;
        }
        const PlanTensor *x = &p->tensors[p->inputs[s->arg]];
        uint64_t have = (uint64_t)x->numel * (uint64_t)plan_dtype_size(x->dtype), feed = (uint64_t)(B * T) * sizeof(int32_t);
        const PlanOperand *o = &p->operands[s->opnd];
        if (o->bytes != have)
            problem(v, "instruction %u (input) copies %" PRIu64 " bytes into input '%s' of %" PRIu64 " bytes", i, o->bytes, x->name,
                    have);
        else if (have != feed)
            problem(v, "input '%s' holds %" PRIu64 " bytes, but a micro-batch of %" PRId64 " x %" PRId64 " token ids is %" PRIu64
                    " bytes", x->name, have, B, T, feed);
    }
}

/* ---- 2e. what the executor addresses: operands it reads and writes as
 * memory are not in the NVMe arena (and NVMe transfers have their NVMe side
 * there), a kernel's operand covers the tensor bound to it (a tile's weight
 * and weight gradient one tile of rows), Adam's operands its shard ---- */
static bool on_nvme(const Plan *p, const PlanOperand *o) { return o->buffer >= 0 && p->buffers[o->buffer].arena == ARENA_NVME; }

static uint64_t tensor_bytes(const PlanTensor *t) { return (uint64_t)t->numel * (uint64_t)plan_dtype_size(t->dtype); }

static void check_kernel_operands(V *v, uint32_t i) {
    const Plan *p = v->p;
    const PlanInstr *s = &p->instrs[i];
    const PlanOp *o = &p->ops[s->arg];
    const PlanOp *fo = o;
    if (o->kind != OP_FWD && o->kind != OP_LOSS_GRAD) {
        if (o->fwd < 0 || p->ops[o->fwd].kind != OP_FWD || p->ops[o->fwd].prim != o->prim) {
            problem(v, "instruction %u (kernel): op %d names no forward op of its primitive", i, s->arg);
            return;
        }
        fo = &p->ops[o->fwd];
    }
    int32_t wt = -1, dw = -1;
    int64_t rows = 0;
    if (s->ntiles > 1) {
        bool emb = fo->prim == PRIM_EMBEDDING;
        if ((!emb && fo->prim != PRIM_LINEAR && fo->prim != PRIM_MATMUL) || o->kind == OP_LOSS_GRAD || fo->nin < 2) {
            problem(v, "instruction %u (kernel) tiles op %d, which is not a linear, matmul or embedding", i, s->arg);
            return;
        }
        wt = fo->in[emb ? 0 : 1];
        const PlanTensor *w = wt >= 0 ? &p->tensors[wt] : NULL;
        if (!w || w->rank != 2 || w->dims[0] % s->ntiles) {
            problem(v, "instruction %u (kernel): %d tiles of a weight that is not 2-D with rows divisible by them", i, s->ntiles);
            return;
        }
        rows = w->dims[0] / s->ntiles;
        if (o->kind == OP_BWD) dw = o->out[emb ? 0 : 1];
    }
    uint32_t k = 0;
    for (int pass = 0; pass < 2; pass++) {
        int cnt = pass ? o->nout : o->nin;
        const int32_t *ids = pass ? o->out : o->in;
        for (int j = 0; j < cnt && k < s->nopnd; j++, k++) {
            const PlanOperand *x = &p->operands[s->opnd + k];
            if (ids[j] < 0 || x->buffer < 0) continue;
            const PlanTensor *t = &p->tensors[ids[j]];
            uint64_t need = tensor_bytes(t);
            if (ids[j] == wt || ids[j] == dw) need = (uint64_t)rows * (uint64_t)t->dims[1] * (uint64_t)plan_dtype_size(t->dtype);
            if (x->bytes < need)
                problem(v, "instruction %u (kernel): operand %u holds %" PRIu64 " bytes of '%s', which needs %" PRIu64, i, k,
                        x->bytes, t->name, need);
        }
    }
}

/* The buffer of tensor t's home, -1 for none. */
static int32_t home_buffer(const Plan *p, int32_t t) {
    if (t < 0 || (uint32_t)t >= p->ntensors) return -1;
    int32_t sh = p->tensors[t].shard;
    return sh >= 0 && (uint32_t)sh < p->nshards ? p->shards[sh].buffer : -1;
}

/* Whether parameter t's optimizer state is on NVMe (its momentum's home
 * there): its speculative Adams step staged copies and write twins on NVMe. */
static bool state_on_nvme(const Plan *p, int32_t t) {
    if (t < 0 || (uint32_t)t >= p->ntensors) return false;
    int32_t b = home_buffer(p, p->tensors[t].momentum);
    return b >= 0 && (uint32_t)b < p->nbuffers && p->buffers[b].arena == ARENA_NVME;
}

/* Whether operand o is a copy, not a persistent buffer (a home or twin). */
static bool staged(const Plan *p, const PlanOperand *o) {
    return o->buffer >= 0 && !(p->buffers[o->buffer].flags & PLAN_BUF_PERSISTENT);
}

/* A 6-operand CPU Adam of NVMe state stepping staged copies of its state
 * (and of its parameter when that is the state): the speculative form, or
 * its redo, of docs/schedule.md "The speculative optimizer". */
static bool staged_adam(const Plan *p, const PlanInstr *s) {
    if (s->op != PI_CPU_ADAM || s->nopnd != 6 || !state_on_nvme(p, s->arg)) return false;
    const PlanOperand *o = &p->operands[s->opnd];
    for (int k = 2; k < 5; k++)
        if (o[k].buffer >= 0 && !staged(p, &o[k])) return false;
    return !(o[0].mode & PLAN_R) || staged(p, &o[0]);
}

/* The bytes a speculative Adam's backup holds: what the step changes that
 * it cannot recompute (docs/schedule.md, "The speculative optimizer"). */
static uint64_t adam_backup_bytes(const PlanOperand *o, uint64_t ne) {
    uint64_t b = (o[0].mode & PLAN_R) && o[0].buffer >= 0 ? ne * 4 : 0; /* the parameter, when it is the fp32 state */
    for (int k = 2; k < 5; k++)
        if (o[k].buffer >= 0) b += ne * 4;
    return b;
}

static void check_adam_operands(V *v, uint32_t i) {
    const Plan *p = v->p;
    const PlanInstr *s = &p->instrs[i];
    if (s->nopnd != 6 && s->nopnd != 7 && s->nopnd != 9) return; /* the layout check says so */
    const PlanTensor *t = &p->tensors[s->arg];
    const PlanOperand *o = &p->operands[s->opnd];
    int pdt = plan_dtype_size(t->dtype), gdt = t->grad >= 0 ? plan_dtype_size(p->tensors[t->grad].dtype) : pdt;
    uint64_t ne = o[0].bytes / (uint64_t)pdt;
    const uint64_t need[5] = {0, ne * (uint64_t)gdt, ne * 4, ne * 4, ne * 4};
    for (int k = 1; k < 5; k++)
        if (o[k].buffer >= 0 && o[k].bytes < need[k])
            problem(v, "instruction %u (%s) on '%s': operand %d holds %" PRIu64 " bytes, its %" PRIu64 " elements need %" PRIu64, i,
                    iname(p, i), t->name, k, o[k].bytes, ne, need[k]);
    bool in_batch = i < p->opt_begin;
    if (s->nopnd == 6) {
        /* in the backward without a backup only where no norm can change the
         * step, or on staged NVMe state (its writes go to twins: check_speculation) */
        bool norm = p->train.grad_clip > 0 || p->train.dtype == DT_F16;
        bool staged_spec = norm && staged_adam(p, s) && plan_speculative(p) && o[5].buffer < 0;
        if (in_batch && !staged_spec && (norm || p->train.grad_accum > 1 || s->op != PI_CPU_ADAM))
            problem(v, "instruction %u (%s) on '%s' steps in the micro-batch without a backup (%s)", i, iname(p, i), t->name,
                    norm ? "the step has a gradient norm" : p->train.grad_accum > 1 ? "several micro-batches a step" : "not a CPU Adam");
        return;
    }
    bool in_redo = plan_speculative(p) && i >= p->redo_begin && i < p->redo_end;
    if (s->nopnd == 9) { /* out of place: the state read from its homes, written to their twins */
        for (int k = 2; k < 5; k++) {
            const PlanOperand *h = &o[k], *w = &o[k + 4];
            bool twin = w->buffer >= 0 && h->buffer >= 0 && (p->buffers[w->buffer].flags & PLAN_BUF_TWIN) &&
                        p->buffers[w->buffer].tensor == p->buffers[h->buffer].tensor && !(p->buffers[h->buffer].flags & PLAN_BUF_TWIN);
            if (h->mode != PLAN_R || w->mode != PLAN_W || !twin || w->offset != h->offset || w->bytes != h->bytes)
                problem(v, "instruction %u (%s) on '%s': operand %d is not the twin of operand %d's home, written where that "
                        "is read", i, iname(p, i), t->name, k + 4, k);
        }
        if (in_batch && (o[5].buffer >= 0 || p->train.grad_accum > 1 || !plan_speculative(p)))
            problem(v, "instruction %u (%s) on '%s': a speculative Adam outside the micro-batch of a speculative plan with one "
                    "micro-batch per step, or reading the norm", i, iname(p, i), t->name);
        if (!in_batch && (!in_redo || o[5].buffer < 0))
            problem(v, "instruction %u (%s) on '%s': an Adam on twins outside the micro-batch and the redo range, or a redo "
                    "without the norm", i, iname(p, i), t->name);
        return;
    }
    const PlanOperand *bk = &o[6];
    uint64_t want = adam_backup_bytes(o, ne);
    if (bk->buffer < 0 || bk->bytes != want)
        problem(v, "instruction %u (%s) on '%s': its backup holds %" PRIu64 " bytes, what it changes is %" PRIu64, i, iname(p, i),
                t->name, bk->buffer < 0 ? 0 : bk->bytes, want);
    if (bk->mode == PLAN_W) { /* speculative: in the micro-batch, before the norm exists */
        if (!in_batch || !plan_speculative(p) || p->train.grad_accum > 1)
            problem(v, "instruction %u (%s) on '%s': a speculative Adam outside the micro-batch of a speculative plan with one "
                    "micro-batch per step", i, iname(p, i), t->name);
        if (o[5].buffer >= 0)
            problem(v, "instruction %u (%s) on '%s': a speculative Adam reads the gradient norm, which does not exist yet", i,
                    iname(p, i), t->name);
    } else if (bk->mode == PLAN_R) { /* the redo: only where the step clipped or was skipped */
        if (!in_redo)
            problem(v, "instruction %u (%s) on '%s': an Adam restoring a backup outside the redo range", i, iname(p, i), t->name);
    } else {
        problem(v, "instruction %u (%s) on '%s': its backup is neither written nor read", i, iname(p, i), t->name);
    }
}

/* Every speculative Adam has exactly one redo, on the same state and
 * backup bytes; the redo range holds nothing else that steps. */
typedef struct SpecKey {
    int32_t buf;
    uint64_t off;
    uint32_t instr;
} SpecKey;

static int spec_key_cmp(const void *a, const void *b) {
    const SpecKey *x = a, *y = b;
    if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The speculative Adams of NVMe state (docs/schedule.md, "The speculative
 * optimizer"): they step staged copies, so what keeps the step redoable is
 * where their results go. In the micro-batch nothing writes the home of
 * such state (master, moments, a parameter without a master); every twin
 * range on NVMe written there is written once more in the redo range, and
 * nowhere else; as many staged Adams redo as speculate. */
typedef struct TwinWrite {
    int32_t buf;
    uint64_t off, bytes;
} TwinWrite;

static int twin_write_cmp(const void *a, const void *b) {
    const TwinWrite *x = a, *y = b;
    if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

static void check_nvme_speculation(V *v) {
    const Plan *p = v->p;
    if (!plan_speculative(p)) return;
    uint32_t nw = 0, spec = 0, redo = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        bool in_batch = i < p->opt_begin, in_redo = i >= p->redo_begin && i < p->redo_end;
        if (staged_adam(p, s) && p->operands[s->opnd + 5].buffer < 0 && in_batch) spec++;
        if (staged_adam(p, s) && p->operands[s->opnd + 5].buffer >= 0 && in_redo) redo++;
        for (uint32_t k = 0; k < s->nopnd; k++) {
            const PlanOperand *o = &p->operands[s->opnd + k];
            if (o->buffer < 0 || !(o->mode & PLAN_W)) continue;
            const PlanBuffer *x = &p->buffers[o->buffer];
            if ((x->flags & PLAN_BUF_TWIN) && x->arena == ARENA_NVME) {
                if (!in_batch && !in_redo)
                    problem(v, "instruction %u (%s) writes twin '%s' outside the micro-batch and the redo range", i, iname(p, i),
                            bname(p, o->buffer));
                nw++;
            }
            if (!in_batch || (x->flags & PLAN_BUF_TWIN) || x->tensor < 0 || (uint32_t)x->tensor >= p->ntensors ||
                home_buffer(p, x->tensor) != o->buffer)
                continue;
            const PlanTensor *t = &p->tensors[x->tensor];
            bool state = t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE || (t->cls == TC_PARAM && t->master < 0);
            int32_t par = t->cls == TC_PARAM ? x->tensor : t->param;
            if (state && state_on_nvme(p, par))
                problem(v, "instruction %u (%s) writes the home of '%s' in the micro-batch, where a speculative step must leave "
                        "it intact", i, iname(p, i), t->name);
        }
    }
    if (spec != redo) problem(v, "%u speculative Adams of NVMe state but %u redos", spec, redo);
    if (!nw || STOP(v)) return;
    TwinWrite *w = malloc(sizeof *w * nw);
    if (!w) {
        problem(v, "out of memory verifying the speculative optimizer");
        return;
    }
    uint32_t nb = 0, nr = 0;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = pass ? p->redo_begin : 0; i < (pass ? p->redo_end : p->opt_begin) && i < p->ninstrs; i++) {
            const PlanInstr *s = &p->instrs[i];
            for (uint32_t k = 0; k < s->nopnd; k++) {
                const PlanOperand *o = &p->operands[s->opnd + k];
                if (o->buffer < 0 || !(o->mode & PLAN_W) || !(p->buffers[o->buffer].flags & PLAN_BUF_TWIN) ||
                    p->buffers[o->buffer].arena != ARENA_NVME || nb + nr >= nw)
                    continue;
                w[nb + nr] = (TwinWrite){o->buffer, o->offset, o->bytes};
                if (pass) nr++;
                else nb++;
            }
        }
    qsort(w, nb, sizeof *w, twin_write_cmp);
    qsort(w + nb, nr, sizeof *w, twin_write_cmp);
    bool same = nb == nr;
    for (uint32_t j = 0; j < nb && same; j++) same = twin_write_cmp(&w[j], &w[nb + j]) == 0 && (j == 0 || twin_write_cmp(&w[j - 1], &w[j]));
    if (!same)
        problem(v, "the twins on NVMe written in the micro-batch (%u ranges) are not each written once by the redo (%u ranges)", nb,
                nr);
    free(w);
}

static void check_speculation(V *v) {
    const Plan *p = v->p;
    /* twins: persistent, in CPU memory or on NVMe (the runtime exchanges
     * their roles with their homes'), each the twin of a master or moment's
     * home in the same arena, or on NVMe of a parameter without a master
     * (the parameter is then the state) */
    for (uint32_t b = 0; b < p->nbuffers && !STOP(v); b++) {
        const PlanBuffer *x = &p->buffers[b];
        if (!(x->flags & PLAN_BUF_TWIN)) continue;
        const PlanTensor *t = x->tensor >= 0 && (uint32_t)x->tensor < p->ntensors ? &p->tensors[x->tensor] : NULL;
        int32_t hb = t ? home_buffer(p, x->tensor) : -1;
        bool state = t && (t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE ||
                           (t->cls == TC_PARAM && t->master < 0 && x->arena == ARENA_NVME));
        if (!(x->flags & PLAN_BUF_PERSISTENT) || (x->arena != ARENA_CPU && x->arena != ARENA_NVME) || !state || hb < 0 ||
            (uint32_t)hb >= p->nbuffers || p->buffers[hb].arena != x->arena || p->buffers[hb].bytes != x->bytes ||
            !plan_speculative(p))
            problem(v, "buffer '%s' is a twin but not a persistent copy, in CPU memory or on NVMe, of an optimizer state "
                    "home of its size in the same arena in a speculative plan", x->name);
    }
    check_nvme_speculation(v);
    if (!plan_speculative(p)) return;
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].op == PI_CPU_ADAM && p->instrs[i].nopnd >= 7) n++;
    SpecKey *k = malloc(sizeof *k * (n ? n : 1));
    if (!k) {
        problem(v, "out of memory verifying the speculative optimizer");
        return;
    }
    uint32_t ns = 0, nr = 0;
    for (uint32_t pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < p->ninstrs; i++) {
            const PlanInstr *s = &p->instrs[i];
            if (s->op != PI_CPU_ADAM || s->nopnd < 7) continue;
            /* the speculative ones in the micro-batch, the redos in their range (what else steps there is refused above) */
            if (pass == 0 ? i >= p->opt_begin : i < p->redo_begin || i >= p->redo_end) continue;
            const PlanOperand *bk = &p->operands[s->opnd + 6];
            k[ns + nr] = (SpecKey){bk->buffer, bk->offset, i};
            if (pass == 0) ns++;
            else nr++;
        }
    if (ns != nr) problem(v, "%u speculative Adams but %u redos", ns, nr);
    uint32_t nstaged = 0;
    for (uint32_t i = 0; i < p->opt_begin && i < p->ninstrs; i++) nstaged += staged_adam(p, &p->instrs[i]);
    if (ns + nstaged == 0) problem(v, "a speculative plan (redo range %u..%u) with no speculative Adam", p->redo_begin, p->redo_end);
    if (ns == nr && ns > 0) {
        qsort(k, ns, sizeof *k, spec_key_cmp);
        qsort(k + ns, nr, sizeof *k, spec_key_cmp);
        for (uint32_t j = 0; j < ns && !STOP(v); j++) {
            const PlanInstr *a = &p->instrs[k[j].instr], *r = &p->instrs[k[ns + j].instr];
            bool same = spec_key_cmp(&k[j], &k[ns + j]) == 0 && a->arg == r->arg;
            for (int m = 1; m < 5 && same; m++) {
                const PlanOperand *x = &p->operands[a->opnd + m], *y = &p->operands[r->opnd + m];
                same = x->buffer == y->buffer && x->offset == y->offset && x->bytes == y->bytes;
            }
            if (!same)
                problem(v, "instruction %u (speculative Adam of '%s') has no redo on the same state and backup", k[j].instr,
                        a->arg >= 0 && (uint32_t)a->arg < p->ntensors ? p->tensors[a->arg].name : "?");
        }
    }
    free(k);
    for (uint32_t i = p->redo_begin; i < p->redo_end && i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        bool staged_redo = staged_adam(p, s) && p->operands[s->opnd + 5].buffer >= 0;
        if (s->op == PI_GPU_ADAM || (s->op == PI_CPU_ADAM && s->nopnd < 7 && !staged_redo) || s->op == PI_GRAD_NORM ||
            s->op == PI_KERNEL)
            problem(v, "instruction %u (%s) in the redo range, which only restores and redoes speculative Adams", i, iname(p, i));
    }
}

static void check_operands(V *v) {
    const Plan *p = v->p;
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        PlanOpcode op = (PlanOpcode)s->op;
        bool tensor_arg = op == PI_REDUCE_SCATTER || op == PI_ALLREDUCE || op == PI_ACCUM || op == PI_CPU_ADAM || op == PI_GPU_ADAM;
        if (tensor_arg && (s->arg < 0 || (uint32_t)s->arg >= p->ntensors || !plan_dtype_size(p->tensors[s->arg].dtype))) {
            problem(v, "instruction %u (%s) names tensor %d, out of range", i, iname(p, i), s->arg);
            continue;
        }
        for (uint32_t k = 0; k < s->nopnd; k++) {
            const PlanOperand *x = &p->operands[s->opnd + k];
            bool nvme_side = (op == PI_NVME_READ && k == 0) || (op == PI_NVME_WRITE && k == 1);
            bool any = op == PI_ZERO || op == PI_GRAD_NORM;
            if (x->buffer < 0 || any) continue;
            if (nvme_side != on_nvme(p, x))
                problem(v, "instruction %u (%s): operand %u is %s the nvme arena", i, iname(p, i), k, nvme_side ? "not in" : "in");
        }
        if (op == PI_KERNEL && s->arg >= 0 && (uint32_t)s->arg < p->nops) check_kernel_operands(v, i);
        if (op == PI_CPU_ADAM || op == PI_GPU_ADAM) check_adam_operands(v, i);
    }
}

/* ---- 2c'. trained and frozen parameters ----
 * A trained parameter's gradient is a gradient of it; a frozen one (no
 * gradient: train { freeze }) has no optimizer state, and no Adam steps it.
 * Some parameter is trained. */
static void check_frozen(V *v) {
    const Plan *p = v->p;
    int nparams = 0, nfrozen = 0;
    for (uint32_t i = 0; i < p->ntensors && !STOP(v); i++) {
        const PlanTensor *t = &p->tensors[i];
        if (t->cls != TC_PARAM) continue;
        nparams++;
        if (t->grad >= 0) {
            const PlanTensor *g = &p->tensors[t->grad];
            if (g->cls != TC_GRAD || g->param != (int32_t)i) problem(v, "parameter '%s' names '%s' as its gradient, which is not its gradient", t->name, g->name);
            continue;
        }
        nfrozen++;
        if (t->master >= 0 || t->momentum >= 0 || t->variance >= 0)
            problem(v, "frozen parameter '%s' (no gradient) has optimizer state", t->name);
    }
    if (nparams > 0 && nfrozen == nparams) problem(v, "every parameter is frozen (none has a gradient): nothing is trained");
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        if ((s->op != PI_CPU_ADAM && s->op != PI_GPU_ADAM) || s->arg < 0 || (uint32_t)s->arg >= p->ntensors) continue;
        if (p->tensors[s->arg].cls == TC_PARAM && p->tensors[s->arg].grad < 0)
            problem(v, "instruction %u (%s) steps the frozen parameter '%s' (no gradient)", i, iname(p, i), p->tensors[s->arg].name);
    }
}

/* ---- 2d. the Hugging Face mapping: what import and export index by ---- */
static void check_hf(V *v) {
    const Plan *p = v->p;
    const PlanHf *h = &p->hf;
    if (h->npieces && (!h->arch || !h->arch[0])) problem(v, "the hf mapping has %u pieces but no architecture", h->npieces);
    uint8_t *seen = calloc(p->ntensors ? p->ntensors : 1, 1);
    if (!seen) {
        problem(v, "out of memory verifying the hf mapping");
        return;
    }
    for (uint32_t i = 0; i < h->npieces && !STOP(v);) {
        int32_t id = h->pieces[i].tensor;
        const PlanTensor *t = &p->tensors[id];
        if (t->cls != TC_PARAM || t->rank < 1) problem(v, "hf piece %u maps '%s', which is not a parameter", i, t->name);
        if (seen[id]) problem(v, "hf pieces of '%s' are not adjacent", t->name);
        seen[id] = 1;
        int64_t cols = 0;
        uint32_t j = i;
        for (; j < h->npieces && h->pieces[j].tensor == id; j++) {
            const PlanHfPiece *x = &h->pieces[j];
            if (!x->hf_name || !x->hf_name[0]) problem(v, "hf piece %u of '%s' names no tensor", j, t->name);
            if (x->cols < 1 || x->src_col < 0 || x->src_col > INT64_MAX - x->cols || cols > INT64_MAX - x->cols)
                problem(v, "hf piece %u of '%s': columns [%" PRId64 ", +%" PRId64 ")", j, t->name, x->src_col, x->cols);
            else cols += x->cols;
            if (x->transpose && t->rank != 2) problem(v, "hf piece %u of '%s' transposes a tensor of rank %u", j, t->name, t->rank);
        }
        if (t->rank >= 1 && cols != t->dims[t->rank - 1])
            problem(v, "hf pieces of '%s' give %" PRId64 " columns, its last axis has %" PRId64, t->name, cols, t->dims[t->rank - 1]);
        i = j;
    }
    free(seen);
}

/* ---- 3. shards ---- */
static bool is_state(uint8_t cls) {
    return cls == TC_PARAM || cls == TC_GRAD || cls == TC_MASTER || cls == TC_MOMENTUM || cls == TC_VARIANCE;
}

static void check_shards(V *v) {
    const Plan *p = v->p;
    int *count = calloc(p->ntensors ? p->ntensors : 1, sizeof *count);
    if (!count) {
        problem(v, "out of memory verifying shards");
        return;
    }
    static const uint8_t tier_arena[PLAN_NTIERS] = {ARENA_GPU, ARENA_CPU, ARENA_NVME};
    for (uint32_t i = 0; i < p->nshards && !STOP(v); i++) {
        const PlanShard *s = &p->shards[i];
        const PlanTensor *t = &p->tensors[s->tensor];
        count[s->tensor]++;
        int ds = plan_dtype_size(t->dtype);
        int64_t elems, cover, shard_elems, shard_bytes;
        if (s->ntiles < 1 || s->tile_elems < 0 || s->tile_shard < 0 || __builtin_mul_overflow(s->tile_elems, (int64_t)s->ntiles, &elems) ||
            elems != t->numel) {
            problem(v, "shard of '%s': %d tiles of %" PRId64 " elements do not make its %" PRId64 " elements", t->name,
                    s->ntiles, s->tile_elems, t->numel);
            continue;
        }
        bool covers = s->partitioned ? !__builtin_mul_overflow(s->tile_shard, (int64_t)p->ranks, &cover) && cover >= s->tile_elems
                                     : s->tile_shard == s->tile_elems;
        if (!covers)
            problem(v, "shard of '%s': %d ranks x %" PRId64 " elements do not cover a tile of %" PRId64, t->name, p->ranks,
                    s->tile_shard, s->tile_elems);
        if (__builtin_mul_overflow((int64_t)s->ntiles, s->tile_shard, &shard_elems) ||
            __builtin_mul_overflow(shard_elems, (int64_t)ds, &shard_bytes) || (uint64_t)shard_bytes != s->bytes)
            problem(v, "shard of '%s': %" PRIu64 " bytes does not match its tiles", t->name, s->bytes);
        const PlanBuffer *b = &p->buffers[s->buffer];
        if (b->bytes < s->bytes)
            problem(v, "shard of '%s' (%" PRIu64 " bytes) does not fit its buffer '%s' (%" PRIu64 " bytes)", t->name, s->bytes,
                    bname(p, s->buffer), b->bytes);
        if (!(b->flags & PLAN_BUF_PERSISTENT)) problem(v, "shard of '%s' lives in buffer '%s', which is not persistent", t->name, bname(p, s->buffer));
        if (b->arena != tier_arena[s->home])
            problem(v, "shard of '%s' has home %s but its buffer is in arena %s", t->name, plan_tier_names[s->home], plan_arena_names[b->arena]);
        if (t->shard != (int32_t)i) problem(v, "tensor '%s' does not name its shard %u", t->name, i);
    }
    for (uint32_t i = 0; i < p->ntensors && !STOP(v); i++) {
        const PlanTensor *t = &p->tensors[i];
        bool want = t->cls == TC_PARAM || (is_state(t->cls) && t->param >= 0);
        if (want && count[i] == 0) problem(v, "%s '%s' has no shard on any rank", tensor_class_names[t->cls < TC_COUNT ? t->cls : 0], t->name);
        if (count[i] > 1) problem(v, "tensor '%s' has %d shards per rank, expected exactly one", t->name, count[i]);
        if (!is_state(t->cls) && count[i]) problem(v, "tensor '%s' is not model state but has a shard", t->name);
    }
    free(count);
}

/* ---- 4. order: topological sort and vector clocks ---- */
static bool build_order(V *v) {
    const Plan *p = v->p;
    uint32_t n = p->ninstrs;
    uint32_t *indeg = calloc(n + 1, sizeof *indeg), *succ_start = calloc(n + 2, sizeof *succ_start);
    uint32_t *prevq = malloc((n + 1) * sizeof *prevq), *succ = NULL;
    v->qpos = calloc(n + 1, sizeof *v->qpos);
    v->order = malloc((n + 1) * sizeof *v->order);
    v->vc = calloc((size_t)(n + 1) * PLAN_NQUEUES, sizeof *v->vc);
    bool ok = false;
    if (!indeg || !succ_start || !prevq || !v->qpos || !v->order || !v->vc) goto oom;
    uint32_t last[PLAN_NQUEUES], cnt[PLAN_NQUEUES] = {0};
    for (int q = 0; q < PLAN_NQUEUES; q++) last[q] = UINT32_MAX;
    uint64_t nedges = 0;
    for (uint32_t i = 0; i < n; i++) {
        const PlanInstr *s = &p->instrs[i];
        prevq[i] = last[s->queue];
        last[s->queue] = i;
        v->qpos[i] = ++cnt[s->queue];
        nedges += s->ndeps + (prevq[i] != UINT32_MAX);
    }
    succ = malloc((nedges + 1) * sizeof *succ);
    if (!succ) goto oom;
    for (uint32_t i = 0; i < n; i++) {
        const PlanInstr *s = &p->instrs[i];
        for (uint32_t k = 0; k < s->ndeps; k++) succ_start[p->deps[s->dep + k] + 1]++;
        if (prevq[i] != UINT32_MAX) succ_start[prevq[i] + 1]++;
        indeg[i] = s->ndeps + (prevq[i] != UINT32_MAX);
    }
    for (uint32_t i = 0; i < n; i++) succ_start[i + 1] += succ_start[i];
    uint32_t *fill = malloc((n + 1) * sizeof *fill);
    if (!fill) goto oom;
    memcpy(fill, succ_start, n * sizeof *fill);
    for (uint32_t i = 0; i < n; i++) {
        const PlanInstr *s = &p->instrs[i];
        for (uint32_t k = 0; k < s->ndeps; k++) succ[fill[p->deps[s->dep + k]]++] = i;
        if (prevq[i] != UINT32_MAX) succ[fill[prevq[i]]++] = i;
    }
    free(fill);
    uint32_t head = 0, tail = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!indeg[i]) v->order[tail++] = i;
    while (head < tail) {
        uint32_t i = v->order[head++];
        for (uint32_t e = succ_start[i]; e < succ_start[i + 1]; e++)
            if (--indeg[succ[e]] == 0) v->order[tail++] = succ[e];
    }
    if (tail < n) {
        char list[160];
        size_t used = 0;
        int shown = 0;
        for (uint32_t i = 0; i < n && shown < 6; i++)
            if (indeg[i]) {
                int w = snprintf(list + used, sizeof list - used, "%s%u (%s)", shown ? ", " : "", i, iname(p, i));
                if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
                shown++;
            }
        problem(v, "dependency cycle: %u instructions wait on each other, among them %s", n - tail, list);
        goto done;
    }
    /* vector clocks in topological order: vc[i][q] = the highest position on
     * queue q of an instruction ordered before or equal to i */
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = v->order[k];
        const PlanInstr *s = &p->instrs[i];
        uint32_t *c = v->vc + (size_t)i * PLAN_NQUEUES;
        for (uint32_t d = 0; d < s->ndeps; d++) {
            const uint32_t *o = v->vc + (size_t)p->deps[s->dep + d] * PLAN_NQUEUES;
            for (int q = 0; q < PLAN_NQUEUES; q++) if (o[q] > c[q]) c[q] = o[q];
        }
        if (prevq[i] != UINT32_MAX) {
            const uint32_t *o = v->vc + (size_t)prevq[i] * PLAN_NQUEUES;
            for (int q = 0; q < PLAN_NQUEUES; q++) if (o[q] > c[q]) c[q] = o[q];
        }
        c[s->queue] = v->qpos[i];
    }
    ok = true;
    goto done;
oom:
    problem(v, "out of memory verifying the schedule's order");
done:
    free(indeg);
    free(succ_start);
    free(prevq);
    free(succ);
    return ok;
}

/* a happens before b (a != b) */
static bool before(const V *v, uint32_t a, uint32_t b) {
    if (a == b) return false;
    return v->vc[(size_t)b * PLAN_NQUEUES + v->p->instrs[a].queue] >= v->qpos[a];
}

/* ---- 5. uses of each buffer ---- */
static bool build_uses(V *v) {
    const Plan *p = v->p;
    uint32_t nb = p->nbuffers;
    v->use_start = calloc(nb + 2, sizeof *v->use_start);
    v->use_list = malloc((p->noperands + 1) * sizeof *v->use_list);
    v->use_mode = malloc(p->noperands + 1);
    uint32_t *fill = malloc((nb + 1) * sizeof *fill);
    if (!v->use_start || !v->use_list || !v->use_mode || !fill) {
        free(fill);
        problem(v, "out of memory verifying buffer uses");
        return false;
    }
    for (uint32_t i = 0; i < p->ninstrs; i++)
        for (uint32_t k = 0; k < p->instrs[i].nopnd; k++) {
            int32_t b = p->operands[p->instrs[i].opnd + k].buffer;
            if (b >= 0) v->use_start[b + 1]++;
        }
    for (uint32_t b = 0; b < nb; b++) v->use_start[b + 1] += v->use_start[b];
    memcpy(fill, v->use_start, nb * sizeof *fill);
    for (uint32_t i = 0; i < p->ninstrs; i++)
        for (uint32_t k = 0; k < p->instrs[i].nopnd; k++) {
            const PlanOperand *o = &p->operands[p->instrs[i].opnd + k];
            if (o->buffer < 0) continue;
            v->use_list[fill[o->buffer]] = i;
            v->use_mode[fill[o->buffer]++] = o->mode;
        }
    free(fill);
    return true;
}

/* Whether buffer b's uses certainly pass check_dataflow, found without
 * comparing every use with every writer (a buffer can have thousands of
 * uses). Along a queue positions and vector clocks only grow, so the
 * writers on one queue that happen before a use r are a prefix of that
 * queue's writers and those r happens before are a suffix; a writer
 * between the two is unordered with r. False when there is one, or a read
 * with no writer before it: the exhaustive loop then finds and words the
 * problems, so the verdicts are the same. wq: room for b's uses. */
static bool dataflow_clean(const V *v, uint32_t b, uint32_t *wq) {
    const Plan *p = v->p;
    uint32_t s = v->use_start[b], e = v->use_start[b + 1];
    uint32_t start[PLAN_NQUEUES + 1] = {0}, fill[PLAN_NQUEUES];
    for (uint32_t w = s; w < e; w++)
        if (v->use_mode[w] & PLAN_W) start[p->instrs[v->use_list[w]].queue + 1]++;
    for (int q = 0; q < PLAN_NQUEUES; q++) start[q + 1] += start[q];
    memcpy(fill, start, sizeof fill);
    for (uint32_t w = s; w < e; w++) /* in instruction order: in queue order on each queue */
        if (v->use_mode[w] & PLAN_W) wq[fill[p->instrs[v->use_list[w]].queue]++] = v->use_list[w];
    bool persistent = p->buffers[b].flags & PLAN_BUF_PERSISTENT;
    for (uint32_t r = s; r < e; r++) {
        uint32_t ri = v->use_list[r], qr = p->instrs[ri].queue;
        const uint32_t *vr = v->vc + (size_t)ri * PLAN_NQUEUES;
        bool filled = persistent;
        for (int q = 0; q < PLAN_NQUEUES; q++) {
            const uint32_t *W = wq + start[q];
            uint32_t m = start[q + 1] - start[q];
            if (!m) continue;
            /* pre: the writers that happen before r (or are r) */
            uint32_t lo = 0, hi = m;
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (v->qpos[W[mid]] <= vr[q]) lo = mid + 1;
                else hi = mid;
            }
            uint32_t pre = lo;
            /* from post on: the writers r happens before */
            lo = 0, hi = m;
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (v->vc[(size_t)W[mid] * PLAN_NQUEUES + qr] < v->qpos[ri]) lo = mid + 1;
                else hi = mid;
            }
            if (lo > pre) return false;
            if ((uint32_t)q != qr) filled |= pre > 0;
            else filled |= pre > 0 && v->qpos[W[0]] < v->qpos[ri]; /* a writer before r on its queue, not r itself */
        }
        if ((v->use_mode[r] & PLAN_R) && !filled) return false;
    }
    return true;
}

static void check_dataflow(V *v) {
    const Plan *p = v->p;
    uint32_t most = 0;
    for (uint32_t b = 0; b < p->nbuffers; b++)
        if (v->use_start[b + 1] - v->use_start[b] > most) most = v->use_start[b + 1] - v->use_start[b];
    uint32_t *wq = malloc(((size_t)most + 1) * sizeof *wq); /* NULL: every buffer the exhaustive way */
    for (uint32_t b = 0; b < p->nbuffers && !STOP(v); b++) {
        uint32_t s = v->use_start[b], e = v->use_start[b + 1];
        if (e - s > 16 && wq && dataflow_clean(v, b, wq)) continue;
        bool persistent = p->buffers[b].flags & PLAN_BUF_PERSISTENT;
        for (uint32_t r = s; r < e && !STOP(v); r++) {
            uint32_t ri = v->use_list[r];
            bool reads = v->use_mode[r] & PLAN_R, writes = v->use_mode[r] & PLAN_W;
            bool filled = persistent;
            for (uint32_t w = s; w < e; w++) {
                uint32_t wi = v->use_list[w];
                if (!(v->use_mode[w] & PLAN_W) || wi == ri) continue;
                if (before(v, wi, ri)) filled = true;
                else if (!before(v, ri, wi) && (reads || (writes && w > r))) {
                    problem(v, "instruction %u (%s) writes buffer '%s' unordered with instruction %u (%s), which %s it (race)",
                            wi, iname(p, wi), bname(p, (int32_t)b), ri, iname(p, ri), reads ? "reads" : "writes");
                    break;
                }
            }
            if (reads && !filled)
                problem(v, "instruction %u (%s) reads buffer '%s' before anything writes it (missing fetch?)", ri, iname(p, ri),
                        bname(p, (int32_t)b));
        }
    }
    free(wq);
}

typedef struct Ext {
    uint32_t first[PLAN_NQUEUES], last[PLAN_NQUEUES];
    bool used;
} Ext;

static void extent(const V *v, uint32_t b, Ext *x) {
    x->used = false;
    for (int q = 0; q < PLAN_NQUEUES; q++) x->first[q] = x->last[q] = UINT32_MAX;
    for (uint32_t u = v->use_start[b]; u < v->use_start[b + 1]; u++) {
        uint32_t i = v->use_list[u];
        int q = v->p->instrs[i].queue;
        if (x->first[q] == UINT32_MAX || i < x->first[q]) x->first[q] = i;
        if (x->last[q] == UINT32_MAX || i > x->last[q]) x->last[q] = i;
        x->used = true;
    }
}

/* every use of a precedes every use of b; on failure *wa, *wb are a pair that is not ordered */
static bool all_before(const V *v, const Ext *a, const Ext *b, uint32_t *wa, uint32_t *wb) {
    for (int qa = 0; qa < PLAN_NQUEUES; qa++) {
        if (a->last[qa] == UINT32_MAX) continue;
        for (int qb = 0; qb < PLAN_NQUEUES; qb++) {
            if (b->first[qb] == UINT32_MAX) continue;
            if (!before(v, a->last[qa], b->first[qb])) {
                *wa = a->last[qa];
                *wb = b->first[qb];
                return false;
            }
        }
    }
    return true;
}

/* Overlap in time of buffers that share addresses. Buffers are taken in the
 * order of their first use in a topological order of the schedule; an
 * interval map keeps, for every address of each arena, the buffer that
 * occupied it last. Each buffer must come after (every use ordered after
 * every use of) each buffer it displaces. Checking only these neighbours is
 * enough: if A was displaced from an address by C and C by B, then A
 * precedes C precedes B. Two buffers that are properly ordered are always
 * met in their order, because the first use of the earlier one comes first
 * in every topological order. */
typedef struct Seg {
    uint64_t lo, hi;
    uint32_t buf;
} Seg;

typedef struct Map {
    Seg *s;
    uint32_t n, cap;
} Map;

typedef struct Item {
    uint64_t key; /* persistent buffers first, then by first use */
    uint32_t buf;
} Item;

static int by_key(const void *x, const void *y) {
    const Item *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->buf < b->buf ? -1 : a->buf > b->buf;
}

/* items by key, then buffer: a counting sort over the keys 0 ..= ninstrs
 * (items come in buffer order, and it keeps that order within a key), or
 * qsort when there is no memory for the counts */
static void sort_items(Item **items, uint32_t m, uint32_t ninstrs) {
    uint32_t *cnt = calloc((size_t)ninstrs + 2, sizeof *cnt);
    Item *out = malloc(((size_t)m + 1) * sizeof *out);
    if (!cnt || !out) {
        free(cnt);
        free(out);
        qsort(*items, m, sizeof **items, by_key);
        return;
    }
    for (uint32_t k = 0; k < m; k++) cnt[(*items)[k].key + 1]++;
    for (uint32_t k = 0; k <= ninstrs; k++) cnt[k + 1] += cnt[k];
    for (uint32_t k = 0; k < m; k++) out[cnt[(*items)[k].key]++] = (*items)[k];
    free(cnt);
    free(*items);
    *items = out;
}

static void overlap_problem(V *v, uint32_t x, uint32_t y, uint32_t ix, uint32_t iy) {
    const Plan *p = v->p;
    const PlanBuffer *a = &p->buffers[x], *b = &p->buffers[y];
    if ((a->flags | b->flags) & PLAN_BUF_PERSISTENT) {
        problem(v, "buffers '%s' and '%s' overlap in arena %s, and '%s' is persistent", a->name, b->name,
                plan_arena_names[a->arena], a->flags & PLAN_BUF_PERSISTENT ? a->name : b->name);
        return;
    }
    problem(v, "buffers '%s' [%" PRIu64 ", +%" PRIu64 ") and '%s' [%" PRIu64 ", +%" PRIu64 ") overlap in arena %s while both are live: "
            "instruction %u (%s) and instruction %u (%s) are not ordered",
            a->name, a->offset, a->bytes, b->name, b->offset, b->bytes, plan_arena_names[a->arena], ix, iname(p, ix), iy, iname(p, iy));
}

/* Places buffer b over [lo, hi) in m, checking it against what it displaces. */
static bool map_place(V *v, Map *m, const Ext *ext, uint32_t b, uint64_t lo, uint64_t hi) {
    uint32_t need = m->n + 3;
    if (need > m->cap) {
        uint32_t nc = m->cap ? m->cap * 2 : 64;
        while (nc < need) nc *= 2;
        Seg *ns = realloc(m->s, sizeof(Seg) * nc);
        if (!ns) return false;
        m->s = ns;
        m->cap = nc;
    }
    /* segments are sorted and disjoint: find the first that ends after lo */
    uint32_t l = 0, r = m->n;
    while (l < r) {
        uint32_t mid = (l + r) / 2;
        if (m->s[mid].hi <= lo) l = mid + 1;
        else r = mid;
    }
    uint32_t first = l, last = l;
    Seg keep[2];
    int nkeep = 0;
    uint32_t reported = UINT32_MAX;
    bool persistent = v->p->buffers[b].flags & PLAN_BUF_PERSISTENT;
    while (last < m->n && m->s[last].lo < hi) {
        Seg sg = m->s[last];
        uint32_t a = sg.buf, ia = 0, ib = 0;
        bool ok = !persistent && !(v->p->buffers[a].flags & PLAN_BUF_PERSISTENT) && all_before(v, &ext[a], &ext[b], &ia, &ib);
        if (!ok && a != reported && !STOP(v)) {
            overlap_problem(v, a, b, ia, ib);
            reported = a;
        }
        if (sg.lo < lo) keep[nkeep++] = (Seg){sg.lo, lo, a};
        if (sg.hi > hi) keep[nkeep++] = (Seg){hi, sg.hi, a};
        last++;
    }
    /* replace segments [first, last) by keep[0]?, [lo, hi), keep[1]? in address order */
    Seg repl[3];
    int nr = 0;
    if (nkeep && keep[0].lo < lo) repl[nr++] = keep[0];
    repl[nr++] = (Seg){lo, hi, b};
    for (int k = 0; k < nkeep; k++)
        if (keep[k].lo >= hi) repl[nr++] = keep[k];
    uint32_t removed = last - first;
    memmove(&m->s[first + (uint32_t)nr], &m->s[last], sizeof(Seg) * (m->n - last));
    memcpy(&m->s[first], repl, sizeof(Seg) * (size_t)nr);
    m->n = m->n - removed + (uint32_t)nr;
    return true;
}

static void check_overlap(V *v) {
    const Plan *p = v->p;
    uint32_t nb = p->nbuffers, n = p->ninstrs;
    Item *items = malloc((nb + 1) * sizeof *items);
    Ext *ext = malloc((nb + 1) * sizeof *ext);
    uint32_t *topo = malloc((n + 1) * sizeof *topo);
    Map maps[PLAN_NARENAS] = {{0}};
    if (!items || !ext || !topo) {
        problem(v, "out of memory verifying buffer overlap");
        goto done;
    }
    for (uint32_t k = 0; k < n; k++) topo[v->order[k]] = k;
    uint32_t m = 0;
    for (uint32_t b = 0; b < nb; b++) {
        extent(v, b, &ext[b]);
        bool persistent = p->buffers[b].flags & PLAN_BUF_PERSISTENT;
        if (!p->buffers[b].bytes || (!persistent && !ext[b].used)) continue;
        uint64_t first = UINT64_MAX;
        for (uint32_t u = v->use_start[b]; u < v->use_start[b + 1]; u++)
            if (topo[v->use_list[u]] < first) first = topo[v->use_list[u]];
        items[m++] = (Item){persistent ? 0 : first + 1, b};
    }
    sort_items(&items, m, n);
    for (uint32_t k = 0; k < m && !STOP(v); k++) {
        const PlanBuffer *bf = &p->buffers[items[k].buf];
        if (!map_place(v, &maps[bf->arena], ext, items[k].buf, bf->offset, bf->offset + bf->bytes)) {
            problem(v, "out of memory verifying buffer overlap");
            break;
        }
    }
done:
    for (int a = 0; a < PLAN_NARENAS; a++) free(maps[a].s);
    free(items);
    free(ext);
    free(topo);
}

int verify_plan(const Plan *p, char *msgs, size_t n) {
    V v = {.p = p, .msgs = msgs, .n = n};
    if (msgs && n) msgs[0] = 0;
    if (check_ranges(&v)) {
        check_launches(&v);
        check_memory(&v);
        check_layouts(&v);
        check_train(&v);
        check_operands(&v);
        check_frozen(&v);
        check_speculation(&v);
        check_hf(&v);
        check_shards(&v);
        if (build_order(&v) && build_uses(&v)) {
            check_dataflow(&v);
            check_overlap(&v);
        }
    }
    free(v.qpos);
    free(v.vc);
    free(v.order);
    free(v.use_start);
    free(v.use_list);
    free(v.use_mode);
    return v.problems;
}
