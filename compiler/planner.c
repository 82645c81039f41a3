#include "planner.h"
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"
#include "graph_plan.h"
#include "verify.h"

const char *const planner_class_names[PC_COUNT] = {"params", "grads", "optimizer", "checkpoints"};

enum { IO_ALIGN = 4096, GPU_ALIGN = 256, TILE_FRACTION = 16 };

void planner_options_default(PlannerOptions *o) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < PC_COUNT; i++) o->tier[i] = -1;
    o->whole_below = 100000;
}

/* ---- plan { } block ---- */

static int tier_of(const char *s) {
    for (int i = 0; i < PLAN_NTIERS; i++)
        if (!strcmp(s, plan_tier_names[i])) return i;
    return -1;
}

static bool int_value(const Setting *s, DiagSink *d, int64_t lo, int64_t hi, int64_t *out) {
    const Expr *e = s->value;
    if (!e || e->kind != EX_INT || (e->unit.kind != UNIT_NONE && e->unit.kind != UNIT_COUNT)) {
        diag_error(d, e ? e->span : s->span, "'%s' must be a whole number", s->key);
        return false;
    }
    int64_t v = e->ival * (int64_t)(e->unit.kind == UNIT_COUNT && e->unit.scale ? e->unit.scale : 1);
    if (e->overflow || v < lo || v > hi) {
        diag_error(d, e->span, "'%s' must be between %" PRId64 " and %" PRId64, s->key, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool planner_options_from_decl(const Decl *decl, Arena *a, DiagSink *d, PlannerOptions *o) {
    static const char *const keys[] = {"params", "grads", "optimizer", "checkpoints", "prefetch", "whole_below", "tiles"};
    bool ok = true;
    for (int i = 0; i < decl->settings.len; i++) {
        const Setting *s = decl->settings.items[i];
        int k = -1;
        for (int j = 0; j < 7; j++)
            if (!strcmp(s->key, keys[j])) k = j;
        if (k < 0 || s->is_block) {
            diag_error(d, s->span, "unknown plan setting '%s'", s->key);
            const char *near = diag_nearest(s->key, keys, 7);
            if (near) diag_hint(d, "did you mean '%s'?", near);
            ok = false;
            continue;
        }
        if (k < PC_COUNT) {
            const Expr *e = s->value;
            int t = e && e->kind == EX_STR ? tier_of(e->str) : -1;
            if (t < 0) {
                diag_error(d, e ? e->span : s->span, "'%s' must be \"gpu\", \"cpu\" or \"nvme\"", s->key);
                ok = false;
                continue;
            }
            o->tier[k] = t;
        } else if (k == 4) {
            int64_t v;
            if (int_value(s, d, 0, 64, &v)) o->prefetch = (int)v;
            else ok = false;
            if (ok && v == 0) o->prefetch = -1; /* pinned to no look-ahead */
        } else if (k == 5) {
            int64_t v;
            if (int_value(s, d, 0, INT64_MAX / 2, &v)) o->whole_below = v;
            else ok = false;
        } else {
            int64_t v;
            if (!s->selector) {
                diag_error(d, s->span, "tiles needs a parameter pattern: tiles \"block.*.mlp.w1\" = 4");
                ok = false;
                continue;
            }
            if (!int_value(s, d, 1, 1 << 20, &v)) {
                ok = false;
                continue;
            }
            TilePin *nt = ARENA_NEWN(a, TilePin, o->ntiles + 1);
            if (!nt) return false;
            if (o->ntiles) memcpy(nt, o->tiles, sizeof *nt * (size_t)o->ntiles);
            nt[o->ntiles++] = (TilePin){arena_strdup(a, s->selector), (int)v, s->selector_span};
            o->tiles = nt;
        }
    }
    return ok;
}

bool planner_options_from_program(const Program *prog, Arena *a, DiagSink *d, PlannerOptions *o) {
    bool ok = true;
    for (int f = 0; f < prog->nfiles; f++)
        for (int i = 0; i < prog->files[f]->decls.len; i++)
            if (prog->files[f]->decls.items[i]->kind == DL_PLAN) ok &= planner_options_from_decl(prog->files[f]->decls.items[i], a, d, o);
    return ok;
}

/* glob with '*' (any run of characters) */
static bool glob(const char *p, const char *s) {
    if (!*p) return !*s;
    if (*p == '*') return glob(p + 1, s) || (*s && glob(p, s + 1));
    return *s == *p && glob(p + 1, s + 1);
}
static bool pin_matches(const char *pat, const char *name) {
    size_t n = strlen(pat);
    return glob(pat, name) || (!strchr(pat, '*') && !strncmp(pat, name, n) && name[n] == '.');
}

/* ---- the builder ---- */

typedef struct Buf {
    PlanBuffer b;
    int32_t first, last;           /* program-order lifetime */
    int32_t lastq[PLAN_NQUEUES];   /* last use on each queue */
    int32_t writer;                /* hazard tracking */
    int32_t readq[PLAN_NQUEUES];
} Buf;

typedef struct Ins {
    PlanInstr s;
    int32_t depq[PLAN_NQUEUES];    /* the latest instruction waited for on each queue */
} Ins;

typedef struct Req {               /* a fetch a step needs */
    int step, tensor, tile;        /* tile -1: every tile into one buffer */
    bool ckpt;                     /* a checkpoint reload rather than a parameter */
    int alias;                     /* >= 0: reuse that earlier fetch's buffer (recompute -> backward) */
    int buf;
    uint64_t off;
} Req;

typedef struct Step {
    int op, tile, ntiles;
    int req0, nreq;
} Step;

typedef struct Place {
    int tier[PC_COUNT];
    int prefetch;
    bool reuse;                    /* keep weights gathered for a recompute until their backward */
} Place;

typedef struct B {
    const Graph *g;
    const Target *t;
    const PlannerOptions *o;
    DiagSink *d;
    int R;
    Place pl;
    /* partition (per tensor, computed once) */
    int *ntiles;
    bool *part;
    int64_t *tile_shard;
    bool *tile_pinned;
    /* per build */
    int *home;                     /* state tensor -> home buffer */
    int *cur;                      /* tensor -> current GPU buffer version */
    int *ckpt_cpu;
    uint64_t *gflushed;            /* grad tensor -> tiles already flushed this micro-batch (NVMe grads) */
    bool *grad_rmw;                /* grad tensor -> accumulated on NVMe (zeroed after its Adam) */
    Buf *bufs;
    int nbufs, cbufs;
    Ins *ins;
    int nins, cins;
    PlanOperand *opnds;
    int nopnds, copnds;
    Step *steps;
    int nsteps;
    Req *reqs;
    int nreqs;
    uint32_t opt_begin;
    uint64_t cap[PLAN_NARENAS];
    uint64_t size[PLAN_NARENAS];
    bool oom, internal;
    char why[256];
} B;

static bool grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int nc = *cap ? *cap * 2 : 256;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np) return false;
    *p = np;
    *cap = nc;
    return true;
}

static int dsz(const B *b, int t) {
    int n = plan_dtype_size(b->g->tensors[t].dtype);
    return n ? n : 4;
}

static const uint64_t arena_align[PLAN_NARENAS] = {GPU_ALIGN, IO_ALIGN, IO_ALIGN, IO_ALIGN};

static int newbuf(B *b, int arena, uint64_t bytes, int tensor, const char *name, bool persistent) {
    if (!grow((void **)&b->bufs, &b->cbufs, b->nbufs + 1, sizeof(Buf))) {
        b->oom = true;
        return -1;
    }
    Buf *x = &b->bufs[b->nbufs];
    memset(x, 0, sizeof *x);
    if (arena != ARENA_GPU) bytes = (bytes + IO_ALIGN - 1) / IO_ALIGN * IO_ALIGN;
    x->b = (PlanBuffer){name, (uint8_t)arena, persistent ? PLAN_BUF_PERSISTENT : 0, tensor, 0, bytes};
    x->first = x->last = -1;
    x->writer = -1;
    for (int q = 0; q < PLAN_NQUEUES; q++) x->lastq[q] = x->readq[q] = -1;
    return b->nbufs++;
}

static void dep_on(B *b, int i, int j) {
    if (j < 0 || j >= i) return;
    int q = b->ins[j].s.queue;
    if (q == b->ins[i].s.queue) return; /* queue order already */
    if (b->ins[i].depq[q] < j) b->ins[i].depq[q] = j;
}

static int ins(B *b, int op, int queue, int arg, int tile, int ntiles, double flops) {
    if (!grow((void **)&b->ins, &b->cins, b->nins + 1, sizeof(Ins))) {
        b->oom = true;
        return -1;
    }
    Ins *x = &b->ins[b->nins];
    memset(x, 0, sizeof *x);
    x->s.op = (uint8_t)op;
    x->s.queue = (uint8_t)(queue == Q_ANY ? Q_COMPUTE : queue);
    x->s.arg = arg;
    x->s.tile = tile;
    x->s.ntiles = ntiles;
    x->s.opnd = (uint32_t)b->nopnds;
    x->s.flops = flops;
    for (int q = 0; q < PLAN_NQUEUES; q++) x->depq[q] = -1;
    return b->nins++;
}

/* Adds an operand to instruction i (the latest) and the dependencies its
 * access needs: read after write, write after read and write. */
static void opnd(B *b, int i, int buf, int mode, uint64_t off, uint64_t bytes) {
    if (i < 0 || b->oom) return;
    if (!grow((void **)&b->opnds, &b->copnds, b->nopnds + 1, sizeof(PlanOperand))) {
        b->oom = true;
        return;
    }
    b->opnds[b->nopnds++] = (PlanOperand){buf, (uint8_t)mode, off, bytes};
    b->ins[i].s.nopnd++;
    int op = b->ins[i].s.op;
    if (op == PI_NVME_READ || op == PI_NVME_WRITE || op == PI_H2D || op == PI_D2H || op == PI_INPUT) {
        if (bytes > b->ins[i].s.bytes) b->ins[i].s.bytes = bytes; /* a copy moves its bytes once */
    } else {
        b->ins[i].s.bytes += bytes * (mode == PLAN_M ? 2 : 1);   /* memory touched */
    }
    if (buf < 0) return;
    Buf *x = &b->bufs[buf];
    int q = b->ins[i].s.queue;
    if (x->first < 0) x->first = i;
    x->last = i;
    x->lastq[q] = i;
    dep_on(b, i, x->writer);
    if (mode & PLAN_W) {
        for (int k = 0; k < PLAN_NQUEUES; k++) dep_on(b, i, x->readq[k]);
        x->writer = i;
        for (int k = 0; k < PLAN_NQUEUES; k++) x->readq[k] = -1;
    } else {
        x->readq[q] = i;
    }
}

static const char *tname(const B *b, int t) { return b->g->tensors[t].name ? b->g->tensors[t].name : "?"; }

/* ---- partition and tiling (step 1, 2) ---- */

static bool tileable_use(const GOp *op, int slot) {
    if (op->kind != OP_FWD && op->kind != OP_BWD && op->kind != OP_RECOMPUTE) return false;
    return (op->prim == PRIM_LINEAR && slot == 1) || (op->prim == PRIM_MATMUL && slot == 1) ||
           (op->prim == PRIM_EMBEDDING && slot == 0);
}

static uint64_t gpu_capacity(const Target *t) {
    if (!strcmp(t->backend, "host")) return t->gpu_memory;
    return t->gpu_memory / 100 * 92; /* the rest: CUDA context, library workspaces */
}

static uint64_t cpu_capacity(const Target *t) {
    uint64_t share = target_cpu_per_rank(t);
    if (!strcmp(t->backend, "host")) return share > t->gpu_memory ? share - t->gpu_memory : 0;
    return share / 10 * 9; /* the operating system keeps a tenth */
}

static bool partition(B *b, Arena *a) {
    const Graph *g = b->g;
    int n = g->ntensors;
    b->ntiles = ARENA_NEWN(a, int, n + 1);
    b->part = ARENA_NEWN(a, bool, n + 1);
    b->tile_shard = ARENA_NEWN(a, int64_t, n + 1);
    bool *untileable = ARENA_NEWN(a, bool, n + 1);
    b->tile_pinned = ARENA_NEWN(a, bool, n + 1);
    if (!b->ntiles || !b->part || !b->tile_shard || !untileable || !b->tile_pinned) return false;
    for (int i = 0; i < g->nops; i++) {
        const GOp *op = &g->ops[i];
        if (op->kind != OP_FWD && op->kind != OP_BWD && op->kind != OP_RECOMPUTE) continue;
        int nfin = op->kind == OP_BWD ? op->nfin : op->nin;
        for (int k = 0; k < op->nin; k++) {
            int x = op->in[k];
            if (x < 0 || g->tensors[x].cls != TC_PARAM) continue;
            if (k >= nfin || !tileable_use(op, k)) untileable[x] = true;
        }
    }
    uint64_t limit = b->t->gpu_memory / TILE_FRACTION;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const GTensor *t = &g->tensors[i];
        b->ntiles[i] = 1;
        if (t->cls != TC_PARAM) continue;
        uint64_t bytes = (uint64_t)t->numel * (uint64_t)dsz(b, i);
        int want = 0;
        Span sp = SPAN_NONE;
        for (int k = 0; k < b->o->ntiles; k++)
            if (pin_matches(b->o->tiles[k].pattern, t->name ? t->name : "")) {
                want = b->o->tiles[k].tiles;
                sp = b->o->tiles[k].span;
            }
        if (want > 1) {
            if (untileable[i] || t->rank != 2) {
                diag_error(b->d, sp, "cannot tile '%s': only 2-D weights of linear, matmul and embedding are tiled", t->name);
                ok = false;
                continue;
            }
            if (t->dims[0] % want) {
                diag_error(b->d, sp, "cannot cut '%s' into %d tiles: %d does not divide its %" PRId64 " rows", t->name, want, want, t->dims[0]);
                ok = false;
                continue;
            }
            b->ntiles[i] = want;
            b->tile_pinned[i] = true;
        } else if (!want && !untileable[i] && t->rank == 2 && bytes > limit) {
            int64_t need = (int64_t)((bytes + limit - 1) / limit);
            int64_t nt = need;
            while (nt < t->dims[0] && t->dims[0] % nt) nt++;
            if (nt > t->dims[0]) nt = t->dims[0];
            b->ntiles[i] = (int)nt;
        }
    }
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
    return ok;
}

/* per-rank bytes of a state tensor's home */
static uint64_t shard_bytes(const B *b, int t) {
    return (uint64_t)b->ntiles[t] * (uint64_t)b->tile_shard[t] * (uint64_t)dsz(b, t);
}

/* ---- flops ---- */

static double op_flops(const Graph *g, const GOp *op) {
    const GTensor *o = op->nout > 0 && op->out[0] >= 0 ? &g->tensors[op->out[0]] : NULL;
    double out = o ? (double)o->numel : 1;
    if (op->kind == OP_BWD && op->fwd >= 0 && op->fwd < g->nops) {
        const GOp *f = &g->ops[op->fwd];
        return 2 * op_flops(g, f);
    }
    switch (op->prim) {
    case PRIM_LINEAR:
    case PRIM_MATMUL: {
        int w = op->in[1];
        if (w < 0 || op->in[0] < 0) return out;
        const GTensor *wt = &g->tensors[w];
        double k = wt->rank >= 2 ? (double)(op->prim == PRIM_MATMUL && op->iattr[1] ? wt->dims[1] : wt->dims[0]) : 1;
        return 2 * out * k;
    }
    case PRIM_ATTENTION: {
        const GTensor *q = op->in[0] >= 0 ? &g->tensors[op->in[0]] : NULL;
        if (!q || q->rank < 3) return out;
        return 2.0 * (double)q->numel * (double)q->dims[1]; /* causal: half of 4*B*T*T*D */
    }
    case PRIM_CROSS_ENTROPY: return op->in[0] >= 0 ? 5.0 * (double)g->tensors[op->in[0]].numel : out;
    default: return 5 * out;
    }
}

/* ---- steps and fetch requirements ---- */

static int tiled_param_of(const B *b, const GOp *op) {
    int nfin = op->kind == OP_BWD ? op->nfin : op->nin;
    for (int k = 0; k < nfin; k++) {
        int x = op->in[k];
        if (x >= 0 && b->g->tensors[x].cls == TC_PARAM && b->ntiles[x] > 1 && tileable_use(op, k)) return x;
    }
    return -1;
}

static bool is_kernel_op(OpKind k) { return k == OP_FWD || k == OP_BWD || k == OP_RECOMPUTE || k == OP_LOSS_GRAD; }

static bool build_steps(B *b, Arena *a, int bwd_end) {
    const Graph *g = b->g;
    int cap = 0;
    for (int i = 0; i < bwd_end; i++) {
        int tp = is_kernel_op(g->ops[i].kind) ? tiled_param_of(b, &g->ops[i]) : -1;
        cap += tp >= 0 ? b->ntiles[tp] : 1;
    }
    b->steps = ARENA_NEWN(a, Step, cap + 1);
    bool *reloaded = ARENA_NEWN(a, bool, g->ntensors + 1);
    int *last_req = ARENA_NEWN(a, int, g->ntensors + 1);
    int rcap = 0;
    for (int i = 0; i < bwd_end; i++) {
        int tp = is_kernel_op(g->ops[i].kind) ? tiled_param_of(b, &g->ops[i]) : -1;
        rcap += g->ops[i].nin * (tp >= 0 ? b->ntiles[tp] : 1);
    }
    free(b->reqs);
    b->reqs = malloc(sizeof(Req) * (size_t)(rcap + 1));
    if (!b->steps || !reloaded || !b->reqs || !last_req) return false;
    for (int i = 0; i < g->ntensors; i++) last_req[i] = -1;
    b->nsteps = b->nreqs = 0;
    for (int i = 0; i < bwd_end; i++) {
        const GOp *op = &g->ops[i];
        int tp = is_kernel_op(op->kind) ? tiled_param_of(b, op) : -1;
        int n = tp >= 0 ? b->ntiles[tp] : 1;
        for (int t = 0; t < n; t++) {
            Step *s = &b->steps[b->nsteps];
            *s = (Step){i, t, n, b->nreqs, 0};
            if (is_kernel_op(op->kind)) {
                int nfin = op->kind == OP_BWD ? op->nfin : op->nin;
                for (int k = 0; k < op->nin; k++) {
                    int x = op->in[k];
                    if (x < 0) continue;
                    const GTensor *xt = &g->tensors[x];
                    if (xt->cls == TC_PARAM) {
                        bool dup = false;
                        for (int r = s->req0; r < b->nreqs; r++) dup |= b->reqs[r].tensor == x && !b->reqs[r].ckpt;
                        if (dup) continue;
                        if (x == tp && k < nfin && tileable_use(op, k)) b->reqs[b->nreqs++] = (Req){b->nsteps, x, t, false, -1, -1, 0};
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

/* ---- emission of the step's pieces ---- */

static void emit_fetch(B *b, Req *r) {
    int p = r->tensor;
    uint64_t ds = (uint64_t)dsz(b, p);
    if (r->alias >= 0) {
        r->buf = b->reqs[r->alias].buf;
        r->off = b->reqs[r->alias].off;
        return;
    }
    if (r->ckpt) {
        uint64_t bytes = (uint64_t)b->g->tensors[p].numel * ds;
        int src = b->ckpt_cpu[p];
        if (src < 0) {
            b->internal = true;
            snprintf(b->why, sizeof b->why, "checkpoint '%s' reloaded but never saved", tname(b, p));
            return;
        }
        if (b->bufs[src].b.arena == ARENA_NVME) {
            int stg = newbuf(b, ARENA_PINNED, bytes, p, tname(b, p), false);
            int rd = ins(b, PI_NVME_READ, Q_NVME, p, 0, 1, 0);
            opnd(b, rd, src, PLAN_R, 0, bytes);
            opnd(b, rd, stg, PLAN_W, 0, bytes);
            src = stg;
        }
        int dst = newbuf(b, ARENA_GPU, bytes, p, tname(b, p), false);
        int i = ins(b, PI_H2D, Q_H2D, p, 0, 1, 0);
        opnd(b, i, src, PLAN_R, 0, bytes);
        opnd(b, i, dst, PLAN_W, 0, bytes);
        b->cur[p] = dst;
        r->buf = dst;
        return;
    }
    int n = b->ntiles[p];
    int64_t tile = b->g->tensors[p].numel / n;
    uint64_t tb = (uint64_t)tile * ds, sb = (uint64_t)b->tile_shard[p] * ds;
    int home = b->home[p], P = b->pl.tier[PC_PARAMS];
    int t0 = r->tile < 0 ? 0 : r->tile, t1 = r->tile < 0 ? n : r->tile + 1;
    if (P == TIER_GPU && !b->part[p]) {
        r->buf = home;
        r->off = (uint64_t)t0 * tb;
        return;
    }
    const char *nm = n > 1 && r->tile >= 0 ? arena_printf(b->g->arena, "%s#%d", tname(b, p), r->tile) : tname(b, p);
    int full = newbuf(b, ARENA_GPU, (uint64_t)(t1 - t0) * tb, p, nm, false);
    for (int u = t0; u < t1; u++) {
        uint64_t fo = (uint64_t)(u - t0) * tb;
        int src = home;
        uint64_t so = (uint64_t)u * sb;
        if (P != TIER_GPU) {
            int dst = b->part[p] ? newbuf(b, ARENA_GPU, sb, p, nm, false) : full;
            uint64_t doff = b->part[p] ? 0 : fo;
            int from = home;
            uint64_t fromoff = so;
            if (P == TIER_NVME) {
                int stg = newbuf(b, ARENA_PINNED, sb, p, nm, false);
                int i = ins(b, PI_NVME_READ, Q_NVME, p, u, n, 0);
                opnd(b, i, home, PLAN_R, so, sb);
                opnd(b, i, stg, PLAN_W, 0, sb);
                from = stg;
                fromoff = 0;
            }
            int i = ins(b, PI_H2D, Q_H2D, p, u, n, 0);
            opnd(b, i, from, PLAN_R, fromoff, sb);
            opnd(b, i, dst, PLAN_W, doff, sb);
            src = dst;
            so = 0;
        }
        if (b->part[p]) {
            int i = ins(b, PI_ALLGATHER, Q_COMM, p, u, n, 0);
            opnd(b, i, src, PLAN_R, so, sb);
            opnd(b, i, full, PLAN_W, fo, tb);
            b->ins[i].s.bytes = tb;
        }
    }
    r->buf = full;
    r->off = 0;
}

/* Where a backward step accumulates parameter p's gradient (tile or whole). */
static int grad_target(B *b, int p, int tile, uint64_t *off) {
    int gt = b->g->tensors[p].grad;
    uint64_t ds = (uint64_t)dsz(b, gt);
    int n = b->ntiles[p];
    uint64_t tb = (uint64_t)(b->g->tensors[p].numel / n) * ds;
    uint64_t bytes = tile >= 0 ? tb : tb * (uint64_t)n;
    *off = 0;
    if (b->pl.tier[PC_GRADS] == TIER_GPU && b->R == 1) {
        *off = tile >= 0 ? (uint64_t)tile * tb : 0;
        return b->home[gt];
    }
    int tmp = newbuf(b, ARENA_GPU, bytes, gt, tname(b, gt), false);
    int i = ins(b, PI_ZERO, Q_COMPUTE, gt, tile < 0 ? 0 : tile, n, 0);
    opnd(b, i, tmp, PLAN_W, 0, bytes);
    return tmp;
}

/* Adds a gradient slice now in pinned staging to its home (CPU or NVMe) for
 * tiles [t0, t1) of n. On NVMe, the first flush of a tile in a step without
 * accumulation overwrites the home; every other one reads, adds and writes. */
static void grad_to_home(B *b, int gt, int stg, int home, uint64_t hoff, uint64_t bytes, int t0, int t1, int n) {
    int tq = t1 - t0 == 1 ? t0 : 0, tn = t1 - t0 == 1 ? n : 1;
    if (b->pl.tier[PC_GRADS] != TIER_NVME) {
        int a = ins(b, PI_ACCUM, Q_CPU, gt, tq, tn, 0);
        opnd(b, a, stg, PLAN_R, 0, bytes);
        opnd(b, a, home, PLAN_M, hoff, bytes);
        return;
    }
    uint64_t mask = 0;
    for (int u = t0; u < t1 && u < 64; u++) mask |= 1ull << u;
    bool first = n <= 64 && b->g->train.grad_accum <= 1 && !(b->gflushed[gt] & mask);
    b->gflushed[gt] |= mask;
    int src = stg;
    if (!first) {
        b->grad_rmw[gt] = true;
        int old = newbuf(b, ARENA_PINNED, bytes, gt, tname(b, gt), false);
        int r = ins(b, PI_NVME_READ, Q_NVME, gt, tq, tn, 0);
        opnd(b, r, home, PLAN_R, hoff, bytes);
        opnd(b, r, old, PLAN_W, 0, bytes);
        int a = ins(b, PI_ACCUM, Q_CPU, gt, tq, tn, 0);
        opnd(b, a, stg, PLAN_R, 0, bytes);
        opnd(b, a, old, PLAN_M, 0, bytes);
        src = old;
    }
    int w = ins(b, PI_NVME_WRITE, Q_NVME, gt, tq, tn, 0);
    opnd(b, w, src, PLAN_R, 0, bytes);
    opnd(b, w, home, PLAN_W, hoff, bytes);
}

static void grad_flush(B *b, int p, int tile, int tmp) {
    int gt = b->g->tensors[p].grad;
    int home = b->home[gt];
    if (tmp == home) return;
    uint64_t ds = (uint64_t)dsz(b, gt);
    int n = b->ntiles[p];
    uint64_t tb = (uint64_t)(b->g->tensors[p].numel / n) * ds, sb = (uint64_t)b->tile_shard[gt] * ds;
    bool gpu = b->pl.tier[PC_GRADS] == TIER_GPU;
    int t0 = tile < 0 ? 0 : tile, t1 = tile < 0 ? n : tile + 1;
    if (b->part[gt]) {
        for (int u = t0; u < t1; u++) {
            uint64_t to = (uint64_t)(u - t0) * tb;
            int dst = home;
            uint64_t doff = (uint64_t)u * sb;
            if (!gpu) {
                dst = newbuf(b, ARENA_GPU, sb, gt, tname(b, gt), false);
                doff = 0;
                int z = ins(b, PI_ZERO, Q_COMPUTE, gt, u, n, 0);
                opnd(b, z, dst, PLAN_W, 0, sb);
            }
            int i = ins(b, PI_REDUCE_SCATTER, Q_COMM, gt, u, n, 0);
            opnd(b, i, tmp, PLAN_R, to, tb);
            opnd(b, i, dst, PLAN_M, doff, sb);
            b->ins[i].s.bytes = tb;
            if (!gpu) {
                int stg = newbuf(b, ARENA_PINNED, sb, gt, tname(b, gt), false);
                int c = ins(b, PI_D2H, Q_D2H, gt, u, n, 0);
                opnd(b, c, dst, PLAN_R, 0, sb);
                opnd(b, c, stg, PLAN_W, 0, sb);
                grad_to_home(b, gt, stg, home, (uint64_t)u * sb, sb, u, u + 1, n);
            }
        }
        return;
    }
    uint64_t bytes = (uint64_t)(t1 - t0) * tb, hoff = (uint64_t)t0 * tb;
    if (b->R > 1) {
        int i = ins(b, PI_ALLREDUCE, Q_COMM, gt, t0, tile < 0 ? 1 : n, 0);
        opnd(b, i, tmp, PLAN_M, 0, bytes);
        b->ins[i].s.bytes = bytes;
    }
    int src = tmp;
    if (!gpu) {
        src = newbuf(b, ARENA_PINNED, bytes, gt, tname(b, gt), false);
        int c = ins(b, PI_D2H, Q_D2H, gt, t0, tile < 0 ? 1 : n, 0);
        opnd(b, c, tmp, PLAN_R, 0, bytes);
        opnd(b, c, src, PLAN_W, 0, bytes);
    }
    if (!gpu) {
        grad_to_home(b, gt, src, home, hoff, bytes, t0, t1, n);
        return;
    }
    int a = ins(b, PI_ACCUM, Q_COMPUTE, gt, t0, tile < 0 ? 1 : n, 0);
    opnd(b, a, src, PLAN_R, 0, bytes);
    opnd(b, a, home, PLAN_M, hoff, bytes);
}

typedef struct Pend {
    int buf, mode;
    uint64_t off, bytes;
} Pend;

static void emit_step(B *b, const Step *s) {
    const Graph *g = b->g;
    const GOp *op = &g->ops[s->op];
    if (op->kind == OP_ZERO_GRAD) {
        int y = op->out[0];
        if (y < 0) return;
        uint64_t bytes = (uint64_t)g->tensors[y].numel * (uint64_t)dsz(b, y);
        int buf;
        if (g->tensors[y].cls == TC_GRAD) {
            buf = b->home[y];
            if (buf < 0 || b->bufs[buf].b.arena == ARENA_NVME) return; /* NVMe: zeroed by its optimizer sub-group */
        } else {
            buf = newbuf(b, ARENA_GPU, bytes, y, tname(b, y), false);
            b->cur[y] = buf;
        }
        int i = ins(b, PI_ZERO, b->bufs[buf].b.arena == ARENA_GPU ? Q_COMPUTE : Q_CPU, y, 0, 1, 0);
        opnd(b, i, buf, PLAN_W, 0, g->tensors[y].cls == TC_GRAD ? b->bufs[buf].b.bytes : bytes);
        return;
    }
    if (!is_kernel_op(op->kind)) return;
    Pend pend[PLAN_MAX_IN + PLAN_MAX_OUT];
    int np = 0;
    int gflush[PLAN_MAX_OUT], gtile[PLAN_MAX_OUT], gbuf[PLAN_MAX_OUT], ng = 0;
    int tp = s->ntiles > 1 ? tiled_param_of(b, op) : -1;
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
                    uint64_t ds = (uint64_t)dsz(b, x), tb = (uint64_t)(xt->numel / b->ntiles[x]) * ds;
                    pe = (Pend){r->buf, PLAN_R, r->off, r->tile >= 0 ? tb : tb * (uint64_t)b->ntiles[x]};
                }
            } else {
                if (b->cur[x] < 0) {
                    b->internal = true;
                    snprintf(b->why, sizeof b->why, "op %d reads '%s' before anything produces it", s->op, tname(b, x));
                    return;
                }
                pe = (Pend){b->cur[x], PLAN_R, 0, (uint64_t)xt->numel * (uint64_t)dsz(b, x)};
            }
        }
        pend[np++] = pe;
    }
    for (int k = 0; k < op->nout; k++) {
        int y = op->out[k];
        Pend pe = {-1, PLAN_W, 0, 0};
        if (y >= 0) {
            const GTensor *yt = &g->tensors[y];
            uint64_t bytes = (uint64_t)yt->numel * (uint64_t)dsz(b, y);
            if (yt->cls == TC_GRAD && yt->param >= 0) {
                int p = yt->param;
                int tile = p == tp ? s->tile : (b->ntiles[p] > 1 ? -1 : 0);
                if (p != tp && s->tile > 0) {
                    pend[np++] = pe; /* a bias's gradient: tile 0 computes it */
                    continue;
                }
                uint64_t off;
                int buf = grad_target(b, p, p == tp ? s->tile : -1, &off);
                uint64_t tb = (uint64_t)(g->tensors[p].numel / b->ntiles[p]) * (uint64_t)dsz(b, y);
                pe = (Pend){buf, PLAN_M, off, p == tp ? tb : tb * (uint64_t)b->ntiles[p]};
                gflush[ng] = p;
                gtile[ng] = p == tp ? s->tile : -1;
                gbuf[ng++] = buf;
                (void)tile;
            } else if (op->kind == OP_BWD) {
                if (b->cur[y] < 0) {
                    int buf = newbuf(b, ARENA_GPU, bytes, y, tname(b, y), false);
                    int z = ins(b, PI_ZERO, Q_COMPUTE, y, 0, 1, 0);
                    opnd(b, z, buf, PLAN_W, 0, bytes);
                    b->cur[y] = buf;
                }
                pe = (Pend){b->cur[y], PLAN_M, 0, bytes};
            } else if (s->tile == 0) {
                int buf = newbuf(b, ARENA_GPU, bytes, y, tname(b, y), false);
                b->cur[y] = buf;
                pe = (Pend){buf, PLAN_W, 0, bytes};
            } else {
                pe = (Pend){b->cur[y], PLAN_M, 0, bytes};
            }
        }
        pend[np++] = pe;
    }
    int i = ins(b, PI_KERNEL, Q_COMPUTE, s->op, s->tile, s->ntiles, op_flops(g, op) / s->ntiles);
    for (int k = 0; k < np; k++) opnd(b, i, pend[k].buf, pend[k].mode, pend[k].off, pend[k].bytes);
    for (int k = 0; k < ng; k++) grad_flush(b, gflush[k], gtile[k], gbuf[k]);
    /* checkpoints leave the GPU as soon as the forward has made them */
    if (op->kind == OP_FWD && s->tile == s->ntiles - 1 && b->pl.tier[PC_CHECKPOINTS] != TIER_GPU)
        for (int k = 0; k < op->nout; k++) {
            int y = op->out[k];
            if (y < 0 || g->tensors[y].cls != TC_CKPT) continue;
            uint64_t bytes = (uint64_t)g->tensors[y].numel * (uint64_t)dsz(b, y);
            bool nvme = b->pl.tier[PC_CHECKPOINTS] == TIER_NVME;
            int cpu = newbuf(b, nvme ? ARENA_PINNED : ARENA_CPU, bytes, y, tname(b, y), false);
            int c = ins(b, PI_D2H, Q_D2H, y, 0, 1, 0);
            opnd(b, c, b->cur[y], PLAN_R, 0, bytes);
            opnd(b, c, cpu, PLAN_W, 0, bytes);
            if (nvme) { /* through pinned staging to the swap space */
                int sw = newbuf(b, ARENA_NVME, bytes, y, tname(b, y), false);
                int w = ins(b, PI_NVME_WRITE, Q_NVME, y, 0, 1, 0);
                opnd(b, w, cpu, PLAN_R, 0, bytes);
                opnd(b, w, sw, PLAN_W, 0, bytes);
                cpu = sw;
            }
            b->ckpt_cpu[y] = cpu;
        }
}

/* ---- optimizer ---- */

/* The optimizer works on sub-groups: at most ADAM_CHUNK elements of one
 * parameter's shard at a time, so its staging stays bounded however large
 * the shard (a multiple of 2048 elements, so NVMe ranges stay aligned). */
enum { ADAM_CHUNK = 1 << 25 };

typedef struct AdamViews {
    int op;                     /* the graph's OP_ADAM */
    int64_t e0, ne;             /* the sub-group: elements [e0, e0+ne) of the shard */
    int state[3], sview[3];     /* master (or -1), momentum, variance; their views */
    uint64_t soff[3];           /* offset of the sub-group in each view */
    int pview;
    uint64_t poff;
    bool pread;
    int gview;                  /* the gradient's sub-group (NVMe grads: staged) */
    uint64_t goff;
} AdamViews;

static uint64_t ebytes(const B *b, int t, int64_t ne) { return (uint64_t)ne * (uint64_t)dsz(b, t); }

static void adam_load(B *b, AdamViews *v) {
    const Graph *g = b->g;
    const GOp *op = &g->ops[v->op];
    int p = op->in[0];
    int O = b->pl.tier[PC_OPTIMIZER], P = b->pl.tier[PC_PARAMS];
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
            int stg = newbuf(b, ARENA_PINNED, bytes, st, tname(b, st), false);
            int i = ins(b, PI_NVME_READ, Q_NVME, st, 0, 1, 0);
            opnd(b, i, b->home[st], PLAN_R, v->soff[k], bytes);
            opnd(b, i, stg, PLAN_W, 0, bytes);
            v->sview[k] = stg;
            v->soff[k] = 0;
        }
    }
    int gr = op->in[1];
    v->gview = gr >= 0 ? b->home[gr] : -1;
    v->goff = gr >= 0 ? ebytes(b, gr, v->e0) : 0;
    if (gr >= 0 && b->pl.tier[PC_GRADS] == TIER_NVME) {
        uint64_t gb = ebytes(b, gr, v->ne);
        int stg = newbuf(b, ARENA_PINNED, gb, gr, tname(b, gr), false);
        int i = ins(b, PI_NVME_READ, Q_NVME, gr, 0, 1, 0);
        opnd(b, i, b->home[gr], PLAN_R, v->goff, gb);
        opnd(b, i, stg, PLAN_W, 0, gb);
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
    v->pview = newbuf(b, gpu ? ARENA_GPU : ARENA_PINNED, pb, p, tname(b, p), false);
    v->poff = 0;
    if (!v->pread) return;
    if (gpu) {
        int from = b->home[p];
        uint64_t fo = po;
        if (P == TIER_NVME) {
            from = newbuf(b, ARENA_PINNED, pb, p, tname(b, p), false);
            fo = 0;
            int i = ins(b, PI_NVME_READ, Q_NVME, p, 0, 1, 0);
            opnd(b, i, b->home[p], PLAN_R, po, pb);
            opnd(b, i, from, PLAN_W, 0, pb);
        }
        int i = ins(b, PI_H2D, Q_H2D, p, 0, 1, 0);
        opnd(b, i, from, PLAN_R, fo, pb);
        opnd(b, i, v->pview, PLAN_W, 0, pb);
    } else {
        int i = P == TIER_NVME ? ins(b, PI_NVME_READ, Q_NVME, p, 0, 1, 0) : ins(b, PI_D2H, Q_D2H, p, 0, 1, 0);
        opnd(b, i, b->home[p], PLAN_R, po, pb);
        opnd(b, i, v->pview, PLAN_W, 0, pb);
    }
}

static void adam_step(B *b, const AdamViews *v) {
    const Graph *g = b->g;
    const GOp *op = &g->ops[v->op];
    int p = op->in[0], gr = op->in[1], gn = op->in[5];
    int O = b->pl.tier[PC_OPTIMIZER], P = b->pl.tier[PC_PARAMS];
    bool gpu = O == TIER_GPU;
    uint64_t pb = ebytes(b, p, v->ne), po = ebytes(b, p, v->e0);
    int i = ins(b, gpu ? PI_GPU_ADAM : PI_CPU_ADAM, gpu ? Q_COMPUTE : Q_CPU, p, 0, 1, 10.0 * (double)v->ne);
    opnd(b, i, v->pview, v->pread ? PLAN_M : PLAN_W, v->poff, pb);
    opnd(b, i, v->gview, PLAN_R, v->goff, gr >= 0 ? ebytes(b, gr, v->ne) : 0);
    for (int k = 0; k < 3; k++)
        opnd(b, i, v->sview[k], PLAN_M, v->soff[k], v->state[k] >= 0 ? ebytes(b, v->state[k], v->ne) : 0);
    opnd(b, i, gn >= 0 ? b->cur[gn] : -1, PLAN_R, 0, gn >= 0 ? 4 : 0);
    if (O == TIER_NVME)
        for (int k = 0; k < 3; k++) {
            int st = v->state[k];
            if (st < 0) continue;
            uint64_t bytes = ebytes(b, st, v->ne);
            int w = ins(b, PI_NVME_WRITE, Q_NVME, st, 0, 1, 0);
            opnd(b, w, v->sview[k], PLAN_R, 0, bytes);
            opnd(b, w, b->home[st], PLAN_W, ebytes(b, st, v->e0), bytes);
        }
    if (gr >= 0 && b->pl.tier[PC_GRADS] == TIER_NVME && (b->grad_rmw[gr] || b->g->train.grad_accum > 1)) {
        /* the next step accumulates into zeros */
        uint64_t gb = ebytes(b, gr, v->ne);
        int z = ins(b, PI_ZERO, Q_CPU, gr, 0, 1, 0);
        opnd(b, z, v->gview, PLAN_W, 0, gb);
        int w = ins(b, PI_NVME_WRITE, Q_NVME, gr, 0, 1, 0);
        opnd(b, w, v->gview, PLAN_R, 0, gb);
        opnd(b, w, b->home[gr], PLAN_W, ebytes(b, gr, v->e0), gb);
    }
    if (v->pview == b->home[p]) return;
    if (gpu) {
        int from = v->pview;
        if (P == TIER_NVME) {
            int stg = newbuf(b, ARENA_PINNED, pb, p, tname(b, p), false);
            int c = ins(b, PI_D2H, Q_D2H, p, 0, 1, 0);
            opnd(b, c, from, PLAN_R, 0, pb);
            opnd(b, c, stg, PLAN_W, 0, pb);
            int w = ins(b, PI_NVME_WRITE, Q_NVME, p, 0, 1, 0);
            opnd(b, w, stg, PLAN_R, 0, pb);
            opnd(b, w, b->home[p], PLAN_W, po, pb);
        } else {
            int c = ins(b, PI_D2H, Q_D2H, p, 0, 1, 0);
            opnd(b, c, from, PLAN_R, 0, pb);
            opnd(b, c, b->home[p], PLAN_W, po, pb);
        }
    } else {
        int w = P == TIER_NVME ? ins(b, PI_NVME_WRITE, Q_NVME, p, 0, 1, 0) : ins(b, PI_H2D, Q_H2D, p, 0, 1, 0);
        opnd(b, w, v->pview, PLAN_R, 0, pb);
        opnd(b, w, b->home[p], PLAN_W, po, pb);
    }
}

/* The next sub-group after (j, e0) among the optimizer's Adam ops: false at the end. */
static bool adam_next(const B *b, int *j, int64_t *e0, int64_t *ne) {
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
        int64_t total = (int64_t)b->ntiles[p] * b->tile_shard[p];
        *j = k;
        *e0 = 0;
        *ne = total < ADAM_CHUNK ? total : ADAM_CHUNK;
        return true;
    }
    return false;
}

static void emit_optimizer(B *b, int bwd_end) {
    const Graph *g = b->g;
    int O = b->pl.tier[PC_OPTIMIZER];
    bool adam_done = false;
    for (int j = bwd_end; j < g->nops && !b->oom; j++) {
        const GOp *op = &g->ops[j];
        if (op->kind == OP_GRAD_NORM) {
            int y = op->out[0];
            bool gpu = b->pl.tier[PC_GRADS] == TIER_GPU;
            int buf = newbuf(b, gpu ? ARENA_GPU : ARENA_PINNED, 4, y, y >= 0 ? tname(b, y) : "grad_norm", false);
            int i = ins(b, PI_GRAD_NORM, gpu ? Q_COMPUTE : Q_CPU, y, 0, 1, 0);
            for (int t = 0; t < g->ntensors; t++)
                if (g->tensors[t].cls == TC_GRAD && b->home[t] >= 0) opnd(b, i, b->home[t], PLAN_R, 0, shard_bytes(b, t));
            opnd(b, i, buf, PLAN_W, 0, 4);
            if (y >= 0) b->cur[y] = buf;
        } else if (op->kind == OP_ADAM && !adam_done) {
            /* every Adam, in sub-groups; for NVMe state the next sub-group's
             * reads are issued before this one steps */
            adam_done = true;
            int cj = j - 1;
            int64_t e0 = 0, ne = 0;
            AdamViews cur, next;
            bool have = adam_next(b, &cj, &e0, &ne);
            if (have) {
                cur = (AdamViews){.op = cj, .e0 = e0, .ne = ne};
                adam_load(b, &cur);
            }
            while (have && !b->oom) {
                bool more = adam_next(b, &cj, &e0, &ne);
                if (more && O == TIER_NVME) {
                    next = (AdamViews){.op = cj, .e0 = e0, .ne = ne};
                    adam_load(b, &next);
                }
                adam_step(b, &cur);
                if (more && O != TIER_NVME) {
                    next = (AdamViews){.op = cj, .e0 = e0, .ne = ne};
                    adam_load(b, &next);
                }
                cur = next;
                have = more;
            }
        } else if (op->kind == OP_ZERO_GRAD) {
            Step s = {j, 0, 1, 0, 0};
            emit_step(b, &s);
        }
    }
}

/* ---- allocation (step 5) ---- */

typedef struct Seg {
    uint64_t lo, hi;
    int buf;
} Seg;

typedef struct Occ {          /* the last occupant of each address range */
    Seg *s;
    int n, cap;
} Occ;

static bool occ_place(B *b, Occ *o, uint64_t lo, uint64_t hi, int buf) {
    /* every previous occupant of [lo, hi) must be done before buf's first use */
    int first = b->bufs[buf].first;
    Seg out[2];
    int nout = 0, at = -1, w = 0;
    for (int k = 0; k < o->n; k++) {
        Seg sg = o->s[k];
        if (sg.hi <= lo || sg.lo >= hi) {
            o->s[w++] = sg;
            continue;
        }
        if (at < 0) at = w;
        const Buf *prev = &b->bufs[sg.buf];
        for (int q = 0; q < PLAN_NQUEUES && first >= 0; q++) dep_on(b, first, prev->lastq[q]);
        if (sg.lo < lo && nout < 2) out[nout++] = (Seg){sg.lo, lo, sg.buf};
        if (sg.hi > hi && nout < 2) out[nout++] = (Seg){hi, sg.hi, sg.buf};
    }
    o->n = w;
    if (!grow((void **)&o->s, &o->cap, o->n + 3, sizeof(Seg))) return false;
    o->s[o->n++] = (Seg){lo, hi, buf};
    for (int k = 0; k < nout; k++) o->s[o->n++] = out[k];
    (void)at;
    return true;
}

typedef struct Live {
    uint64_t lo, hi;
    int last;
} Live;

static bool allocate(B *b) {
    int n = b->nbufs;
    int *order = malloc(sizeof(int) * (size_t)(n + 1));
    Live *live[PLAN_NARENAS] = {0};
    int nlive[PLAN_NARENAS] = {0}, clive[PLAN_NARENAS] = {0};
    Occ occ[PLAN_NARENAS] = {{0}};
    uint64_t top[PLAN_NARENAS] = {0};
    bool ok = order != NULL;
    if (!ok) goto done;
    /* persistent homes first, at the bottom, for the whole step */
    for (int i = 0; i < n; i++) {
        Buf *x = &b->bufs[i];
        if (!(x->b.flags & PLAN_BUF_PERSISTENT)) continue;
        int a = x->b.arena;
        uint64_t al = arena_align[a];
        x->b.offset = (top[a] + al - 1) / al * al;
        top[a] = x->b.offset + x->b.bytes;
    }
    uint64_t base[PLAN_NARENAS];
    for (int a = 0; a < PLAN_NARENAS; a++) base[a] = (top[a] + arena_align[a] - 1) / arena_align[a] * arena_align[a];
    /* the rest in order of first use: counting sort by first instruction */
    int m = 0;
    {
        int *cnt = calloc((size_t)b->nins + 2, sizeof *cnt);
        if (!cnt) {
            ok = false;
            goto done;
        }
        for (int i = 0; i < n; i++)
            if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) cnt[b->bufs[i].first + 1]++;
        for (int i = 0; i < b->nins; i++) cnt[i + 1] += cnt[i];
        for (int i = 0; i < n; i++)
            if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) order[cnt[b->bufs[i].first]++] = i;
        for (int i = 0; i < n; i++)
            if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) m++;
        free(cnt);
    }
    for (int k = 0; k < m; k++) {
        Buf *x = &b->bufs[order[k]];
        int a = x->b.arena;
        uint64_t al = arena_align[a];
        /* retire what died before this buffer's first use */
        int w = 0;
        for (int j = 0; j < nlive[a]; j++)
            if (live[a][j].last >= x->first) live[a][w++] = live[a][j];
        nlive[a] = w;
        /* lowest gap that fits (live is kept sorted by offset) */
        uint64_t at = base[a];
        int pos = 0;
        for (; pos < nlive[a]; pos++) {
            if (live[a][pos].lo >= at + x->b.bytes) break;
            uint64_t nx = (live[a][pos].hi + al - 1) / al * al;
            if (nx > at) at = nx;
        }
        x->b.offset = at;
        if (!grow((void **)&live[a], &clive[a], nlive[a] + 1, sizeof(Live))) {
            ok = false;
            goto done;
        }
        memmove(&live[a][pos + 1], &live[a][pos], sizeof(Live) * (size_t)(nlive[a] - pos));
        live[a][pos] = (Live){at, at + x->b.bytes, x->last};
        nlive[a]++;
        if (at + x->b.bytes > top[a]) top[a] = at + x->b.bytes;
        if (x->b.bytes && !occ_place(b, &occ[a], at, at + x->b.bytes, order[k])) {
            ok = false;
            goto done;
        }
    }
    for (int a = 0; a < PLAN_NARENAS; a++) b->size[a] = top[a];
done:
    if (!ok) b->oom = true;
    free(order);
    for (int a = 0; a < PLAN_NARENAS; a++) {
        free(live[a]);
        free(occ[a].s);
    }
    return ok;
}

/* ---- one whole build for one placement ---- */

static void reset(B *b) {
    b->nbufs = b->nins = b->nopnds = 0;
    b->oom = b->internal = false;
    b->why[0] = 0;
}

static bool build(B *b, Arena *a) {
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
    static const uint8_t arena_of_tier[PLAN_NTIERS] = {ARENA_GPU, ARENA_CPU, ARENA_NVME};
    for (int i = 0; i < nt; i++) {
        b->home[i] = b->cur[i] = b->ckpt_cpu[i] = -1;
        b->gflushed[i] = 0;
        b->grad_rmw[i] = false;
        const GTensor *t = &g->tensors[i];
        int cls = -1;
        if (t->cls == TC_PARAM) cls = PC_PARAMS;
        else if (t->cls == TC_GRAD && t->param >= 0) cls = PC_GRADS;
        else if ((t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE) && t->param >= 0) cls = PC_OPTIMIZER;
        if (cls < 0) continue;
        b->home[i] = newbuf(b, arena_of_tier[b->pl.tier[cls]], shard_bytes(b, i), i, tname(b, i), true);
    }
    /* the step: inputs, forward, backward with fetches hoisted, optimizer */
    for (int k = 0; k < g->ninputs; k++) {
        int x = g->inputs[k];
        if (x < 0) continue;
        uint64_t bytes = (uint64_t)g->tensors[x].numel * (uint64_t)dsz(b, x);
        int buf = newbuf(b, ARENA_GPU, bytes, x, tname(b, x), false);
        int i = ins(b, PI_INPUT, Q_H2D, k, 0, 1, 0);
        opnd(b, i, buf, PLAN_W, 0, bytes);
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
            emit_fetch(b, &b->reqs[f++]);
        }
        emit_step(b, st);
    }
    b->opt_begin = (uint32_t)b->nins;
    emit_optimizer(b, bwd_end);
    int e = ins(b, PI_STEP_END, Q_COMPUTE, 0, 0, 1, 0);
    if (e >= 0) {
        int lastq[PLAN_NQUEUES];
        for (int q = 0; q < PLAN_NQUEUES; q++) lastq[q] = -1;
        for (int i = 0; i < e; i++) lastq[b->ins[i].s.queue] = i;
        for (int q = 0; q < PLAN_NQUEUES; q++) dep_on(b, e, lastq[q]);
    }
    if (b->oom || b->internal) return false;
    return allocate(b);
}

static bool fits(const B *b, char *why, size_t n) {
    char u[32], c[32];
    for (int a = 0; a < PLAN_NARENAS; a++) {
        uint64_t cap = a == ARENA_PINNED || a == ARENA_CPU ? b->cap[ARENA_CPU] : b->cap[a];
        uint64_t use = a == ARENA_PINNED || a == ARENA_CPU ? b->size[ARENA_PINNED] + b->size[ARENA_CPU] : b->size[a];
        if (use > cap) {
            snprintf(why, n, "%s needs %s per rank, has %s", a == ARENA_PINNED || a == ARENA_CPU ? "CPU memory" : plan_arena_names[a],
                     plan_bytes_str(use, u, sizeof u), plan_bytes_str(cap, c, sizeof c));
            return false;
        }
    }
    return true;
}

/* ---- the Plan ---- */

static Plan *emit_plan(B *b) {
    const Graph *g = b->g;
    Plan *p = plan_new();
    if (!p) return NULL;
    Arena *pa = &p->arena;
    p->model_name = arena_strdup(pa, g->model_name ? g->model_name : "");
    p->target = *b->t;
    p->target.name = arena_strdup(pa, b->t->name ? b->t->name : "");
    p->target.backend = arena_strdup(pa, b->t->backend ? b->t->backend : "cuda");
    p->target.gpu_arch = arena_strdup(pa, b->t->gpu_arch ? b->t->gpu_arch : "");
    p->target.nvme_paths = ARENA_NEWN(pa, const char *, b->t->nvme_npaths + 1);
    for (int i = 0; i < b->t->nvme_npaths; i++) p->target.nvme_paths[i] = arena_strdup(pa, b->t->nvme_paths[i]);
    const TrainConfig *tc = &g->train;
    p->train = (PlanTrain){tc->micro_batch, tc->steps, tc->warmup_steps, tc->checkpoint_every, tc->grad_accum > 0 ? tc->grad_accum : 1,
                           tc->seed, (uint8_t)tc->dtype, tc->cosine, tc->lr, tc->beta1, tc->beta2, tc->eps, tc->weight_decay,
                           tc->min_lr, tc->grad_clip, tc->loss_scale};
    p->ranks = b->R;
    p->loss = g->loss;
    p->ninputs = g->ninputs;
    for (int i = 0; i < 4; i++) p->inputs[i] = i < g->ninputs ? g->inputs[i] : -1;
    p->opt_begin = b->opt_begin;
    char err[160];
    if (!graph_plan_tables(g, p, err, sizeof err)) {
        plan_free(p);
        return NULL;
    }
    int nshards = 0;
    for (int i = 0; i < g->ntensors; i++) nshards += b->home[i] >= 0;
    p->shards = ARENA_NEWN(pa, PlanShard, nshards + 1);
    if (!p->shards) {
        plan_free(p);
        return NULL;
    }
    static const uint8_t tier_of_arena[PLAN_NARENAS] = {TIER_GPU, TIER_CPU, TIER_CPU, TIER_NVME};
    for (int i = 0; i < g->ntensors; i++) {
        if (b->home[i] < 0) continue;
        const GTensor *t = &g->tensors[i];
        p->tensors[i].shard = (int32_t)p->nshards;
        p->shards[p->nshards++] = (PlanShard){i, tier_of_arena[b->bufs[b->home[i]].b.arena], b->part[i], b->ntiles[i],
                                              t->numel / b->ntiles[i], b->tile_shard[i], shard_bytes(b, i), b->home[i]};
    }
    for (int a = 0; a < PLAN_NARENAS; a++)
        p->arenas[a] = (PlanArena){(uint8_t)a, 0, b->size[a], arena_align[a]};
    p->arenas[ARENA_GPU].capacity = b->cap[ARENA_GPU];
    p->arenas[ARENA_NVME].capacity = b->cap[ARENA_NVME];
    uint64_t host = b->cap[ARENA_CPU];
    p->arenas[ARENA_PINNED].capacity = host > b->size[ARENA_CPU] ? host - b->size[ARENA_CPU] : 0;
    p->arenas[ARENA_CPU].capacity = host > b->size[ARENA_PINNED] ? host - b->size[ARENA_PINNED] : 0;
    p->nbuffers = (uint32_t)b->nbufs;
    p->buffers = ARENA_NEWN(pa, PlanBuffer, b->nbufs + 1);
    for (int i = 0; i < b->nbufs; i++) {
        p->buffers[i] = b->bufs[i].b;
        p->buffers[i].name = arena_strdup(pa, b->bufs[i].b.name ? b->bufs[i].b.name : "");
    }
    p->noperands = (uint32_t)b->nopnds;
    p->operands = ARENA_NEWN(pa, PlanOperand, b->nopnds + 1);
    if (b->nopnds) memcpy(p->operands, b->opnds, sizeof(PlanOperand) * (size_t)b->nopnds);
    p->ninstrs = (uint32_t)b->nins;
    p->instrs = ARENA_NEWN(pa, PlanInstr, b->nins + 1);
    uint32_t ndeps = 0;
    for (int i = 0; i < b->nins; i++)
        for (int q = 0; q < PLAN_NQUEUES; q++) ndeps += b->ins[i].depq[q] >= 0;
    p->deps = ARENA_NEWN(pa, uint32_t, ndeps + 1);
    for (int i = 0; i < b->nins; i++) {
        p->instrs[i] = b->ins[i].s;
        p->instrs[i].dep = p->ndeps;
        p->instrs[i].ndeps = 0;
        for (int q = 0; q < PLAN_NQUEUES; q++)
            if (b->ins[i].depq[q] >= 0) {
                p->deps[p->ndeps++] = (uint32_t)b->ins[i].depq[q];
                p->instrs[i].ndeps++;
            }
    }
    if (pa->failed) {
        plan_free(p);
        return NULL;
    }
    return p;
}

/* ---- explanation text ---- */

typedef struct Text {
    char *s;
    size_t len, cap;
} Text;

static void say(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(Text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    int w = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    size_t n = (size_t)w < sizeof line ? (size_t)w : sizeof line - 1;
    if (t->len + n + 2 > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 1024;
        while (nc < t->len + n + 2) nc *= 2;
        char *ns = realloc(t->s, nc);
        if (!ns) return;
        t->s = ns;
        t->cap = nc;
    }
    memcpy(t->s + t->len, line, n);
    t->len += n;
    t->s[t->len++] = '\n';
    t->s[t->len] = 0;
}

/* ---- the driver: choose the placement ---- */

static void state_bytes(const B *b, uint64_t per_class[PC_COUNT]) {
    memset(per_class, 0, sizeof(uint64_t) * PC_COUNT);
    for (int i = 0; i < b->g->ntensors; i++) {
        const GTensor *t = &b->g->tensors[i];
        if (t->cls == TC_PARAM) per_class[PC_PARAMS] += shard_bytes(b, i);
        else if (t->cls == TC_GRAD && t->param >= 0) per_class[PC_GRADS] += shard_bytes(b, i);
        else if ((t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE) && t->param >= 0)
            per_class[PC_OPTIMIZER] += shard_bytes(b, i);
    }
}

static const char *place_str(const Place *pl, char *buf, size_t n) {
    snprintf(buf, n, "params=%s grads=%s optimizer=%s checkpoints=%s", plan_tier_names[pl->tier[PC_PARAMS]],
             plan_tier_names[pl->tier[PC_GRADS]], plan_tier_names[pl->tier[PC_OPTIMIZER]],
             plan_tier_names[pl->tier[PC_CHECKPOINTS]]);
    return buf;
}

bool planner_run(const Graph *g, const Target *t, const PlannerOptions *o, Arena *a, DiagSink *d, PlannerResult *out) {
    memset(out, 0, sizeof *out);
    PlannerOptions defopt;
    if (!o) {
        planner_options_default(&defopt);
        o = &defopt;
    }
    B b = {0};
    Target local = *t;
    if (o->ranks > 0) { /* ranks overridden: the same machines, fewer or more of them */
        if (!strcmp(t->backend, "host") || o->ranks < t->gpus_per_node) {
            local.nodes = 1;
            local.gpus_per_node = o->ranks;
        } else {
            local.nodes = (o->ranks + t->gpus_per_node - 1) / t->gpus_per_node;
        }
    }
    t = &local;
    b.g = g;
    b.t = t;
    b.o = o;
    b.d = d;
    b.R = o->ranks > 0 ? o->ranks : target_ranks(t);
    if (b.R < 1) {
        diag_error(d, SPAN_NONE, "target '%s' has no ranks", t->name);
        return false;
    }
    bool host = !strcmp(t->backend, "host");
    b.cap[ARENA_GPU] = gpu_capacity(t);
    b.cap[ARENA_CPU] = b.cap[ARENA_PINNED] = cpu_capacity(t);
    b.cap[ARENA_NVME] = t->nvme_capacity / (uint64_t)(t->gpus_per_node > 0 ? t->gpus_per_node : 1);
    for (int c = 0; c < PC_COUNT; c++)
        if (o->tier[c] == TIER_NVME && !b.cap[ARENA_NVME]) {
            diag_error(d, SPAN_NONE, "the plan block puts %s on \"nvme\", but target '%s' has no NVMe", planner_class_names[c], t->name);
            diag_hint(d, "add an nvme { paths = [...]; capacity = ... } block to the target, or pin \"cpu\"");
            return false;
        }
    if (!partition(&b, a)) return false;
    Text ex = {0};
    char s1[32], s2[32], s3[32], s4[160];
    say(&ex, "target %s: %d rank%s (%s), %s %s, %s CPU memory and %s NVMe per rank", t->name, b.R, b.R > 1 ? "s" : "",
        host ? "host processes" : arena_printf(a, "%d node%s x %d GPUs", t->nodes, t->nodes > 1 ? "s" : "", t->gpus_per_node),
        plan_bytes_str(b.cap[ARENA_GPU], s1, sizeof s1), host ? "working budget" : "GPU memory usable",
        plan_bytes_str(b.cap[ARENA_CPU], s2, sizeof s2), b.cap[ARENA_NVME] ? plan_bytes_str(b.cap[ARENA_NVME], s3, sizeof s3) : "no");
    int nsplit = 0, nwhole = 0, ntiled = 0;
    for (int i = 0; i < g->ntensors; i++) {
        if (g->tensors[i].cls != TC_PARAM) continue;
        if (b.part[i]) nsplit++;
        else nwhole++;
        if (b.ntiles[i] > 1) {
            if (ntiled < 6)
                say(&ex, "tile %s %s in %d tiles of %" PRId64 " rows: %s whole, %s", tname(&b, i),
                    graph_shape_str(g, i, s4, sizeof s4), b.ntiles[i], g->tensors[i].dims[0] / b.ntiles[i],
                    plan_bytes_str((uint64_t)g->tensors[i].numel * (uint64_t)dsz(&b, i), s1, sizeof s1),
                    b.tile_pinned[i] ? "pinned by the plan block" : "more than 1/16 of GPU memory");
            ntiled++;
        }
    }
    if (ntiled > 6) say(&ex, "... and %d more tiled parameters", ntiled - 6);
    if (b.R > 1)
        say(&ex, "partition: %d parameters split over %d ranks (slices padded to 4096 bytes), %d under %" PRId64
                 " elements whole on every rank", nsplit, b.R, nwhole, o->whole_below);
    else
        say(&ex, "partition: one rank, every tensor whole");
    uint64_t need[PC_COUNT];
    state_bytes(&b, need);
    uint64_t total = need[PC_PARAMS] + need[PC_GRADS] + need[PC_OPTIMIZER];
    uint64_t ckpt_bytes = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].cls == TC_CKPT) ckpt_bytes += (uint64_t)g->tensors[i].numel * (uint64_t)dsz(&b, i);
    say(&ex, "model states per rank: params %s, grads %s, optimizer %s", plan_bytes_str(need[PC_PARAMS], s1, sizeof s1),
        plan_bytes_str(need[PC_GRADS], s2, sizeof s2), plan_bytes_str(need[PC_OPTIMIZER], s3, sizeof s3));

    Place best, cand;
    memset(&best, 0, sizeof best);
    memset(&cand, 0, sizeof cand);
    double best_time = INFINITY;
    bool any_state_fit = false, any_pins_met = false;
    char last_why[512] = "";
    static const int order_p[] = {TIER_GPU, TIER_CPU, TIER_NVME};
    int tried = 0;
    for (int ip = 0; ip < 3; ip++)
        for (int io = 0; io < 3; io++)
            for (int ic = 0; ic < 3; ic++) {
                bool placed = false, grads_nvme_tried = false, cpu_short = false;
                for (int gtry = 0; gtry < 2 && !placed; gtry++) {
                    /* a placement whose gradients do not fit in CPU memory (homes or staging) is
                     * tried again with the gradients on NVMe */
                    cand.tier[PC_PARAMS] = order_p[ip];
                    cand.tier[PC_OPTIMIZER] = order_p[io];
                    cand.tier[PC_GRADS] = cand.tier[PC_OPTIMIZER] == TIER_GPU ? TIER_GPU
                                          : o->tier[PC_GRADS] == TIER_NVME ? TIER_NVME : TIER_CPU;
                    cand.tier[PC_CHECKPOINTS] = order_p[ic];
                    if (gtry == 1) {
                        if (!cpu_short || grads_nvme_tried || cand.tier[PC_GRADS] != TIER_CPU || o->tier[PC_GRADS] >= 0 ||
                            !b.cap[ARENA_NVME])
                            break;
                        cand.tier[PC_GRADS] = TIER_NVME;
                    }
                    bool pinned_out = false;
                    for (int c = 0; c < PC_COUNT; c++) pinned_out |= o->tier[c] >= 0 && o->tier[c] != cand.tier[c];
                    if (pinned_out) continue;
                    any_pins_met = true;
                    if (!b.cap[ARENA_NVME] && (cand.tier[PC_PARAMS] == TIER_NVME || cand.tier[PC_OPTIMIZER] == TIER_NVME ||
                                               cand.tier[PC_CHECKPOINTS] == TIER_NVME))
                        continue;
                    uint64_t tier_use[PLAN_NTIERS] = {0};
                    for (int c = 0; c < PC_CHECKPOINTS; c++) tier_use[cand.tier[c]] += need[c];
                    if (tier_use[TIER_CPU] > b.cap[ARENA_CPU] && cand.tier[PC_GRADS] == TIER_CPU && b.cap[ARENA_NVME] &&
                        o->tier[PC_GRADS] < 0) {
                        /* gradients go to NVMe only when CPU memory is short */
                        cand.tier[PC_GRADS] = TIER_NVME;
                        grads_nvme_tried = true;
                        tier_use[TIER_CPU] -= need[PC_GRADS];
                        tier_use[TIER_NVME] += need[PC_GRADS];
                    }
                    if (tier_use[TIER_GPU] > b.cap[ARENA_GPU] || tier_use[TIER_CPU] > b.cap[ARENA_CPU] ||
                        tier_use[TIER_NVME] > b.cap[ARENA_NVME])
                        continue;
                    any_state_fit = true;
                    /* every checkpoint is live at the end of the forward: a lower bound */
                    tier_use[cand.tier[PC_CHECKPOINTS]] += ckpt_bytes;
                    static const int tier_arena[PLAN_NTIERS] = {ARENA_GPU, ARENA_CPU, ARENA_NVME};
                    int over = -1;
                    for (int k = 0; k < PLAN_NTIERS; k++)
                        if (tier_use[k] > b.cap[tier_arena[k]]) over = k;
                    if (over >= 0) {
                        cpu_short |= over == TIER_CPU;
                        say(&ex, "  %s: does not fit: model states and checkpoints need %s of %s per rank, it has %s",
                            place_str(&cand, s4, sizeof s4), plan_bytes_str(tier_use[over], s1, sizeof s1), plan_tier_names[over],
                            plan_bytes_str(b.cap[tier_arena[over]], s2, sizeof s2));
                        snprintf(last_why, sizeof last_why, "model states and checkpoints need %s of %s per rank, it has %s (%s)",
                                 plan_bytes_str(tier_use[over], s1, sizeof s1), plan_tier_names[over],
                                 plan_bytes_str(b.cap[tier_arena[over]], s2, sizeof s2), place_str(&cand, s4, sizeof s4));
                        continue;
                    }
                    int kmax = o->prefetch > 0 ? o->prefetch : o->prefetch < 0 ? 0 : 4;
                    int kmin = o->prefetch ? kmax : 0;
                    /* the deepest look-ahead first; if it does not fit, the least (if
                     * that does not fit, nothing does), then the ones between */
                    int ks[66], nk = 0;
                    ks[nk++] = kmax;
                    if (kmin < kmax) ks[nk++] = kmin;
                    for (int k = kmax - 1; k > kmin; k--) ks[nk++] = k;
                    int floor_i = nk > 1 ? 1 : 0;
                    for (int ki = 0, reuse = 1; ki < nk; ki++) {
                        int k = ks[ki];
                        cand.prefetch = k;
                        cand.reuse = reuse;
                        b.pl = cand;
                        if (!build(&b, a)) {
                            if (b.internal) diag_error(d, SPAN_NONE, "internal planner error: %s", b.why);
                            else diag_error(d, SPAN_NONE, "out of memory while planning");
                            free(ex.s);
                            goto fail;
                        }
                        tried++;
                        char why[256];
                        if (!fits(&b, why, sizeof why)) {
                            cpu_short |= !strncmp(why, "CPU memory", 10);
                            snprintf(last_why, sizeof last_why, "%s (%s, prefetch %d)", why, place_str(&cand, s4, sizeof s4), k);
                            if (ki < floor_i) continue;
                            if (ki == floor_i && reuse) { /* again without holding weights from recompute to backward */
                                reuse = 0;
                                ki--;
                                continue;
                            }
                            if (ki == floor_i) {
                                say(&ex, "  %s: does not fit: %s", place_str(&cand, s4, sizeof s4), why);
                                break;
                            }
                            continue;
                        }
                        Plan *p = emit_plan(&b);
                        CostResult cr;
                        if (!p || !cost_simulate(p, &cr)) {
                            plan_free(p);
                            diag_error(d, SPAN_NONE, "out of memory while planning");
                            free(ex.s);
                            goto fail;
                        }
                        say(&ex, "  %s prefetch %d%s: %.4g s/step, GPU peak %s", place_str(&cand, s4, sizeof s4), k,
                            cand.reuse ? ", weights kept from recompute to backward" : "", cr.step_time,
                            plan_bytes_str(b.size[ARENA_GPU], s1, sizeof s1));
                        placed = true;
                        if (cr.step_time < best_time * 0.999) {
                            best_time = cr.step_time;
                            best = cand;
                            plan_free(out->plan);
                            out->plan = p;
                        } else {
                            plan_free(p);
                        }
                        cost_free(&cr);
                        if (ki != floor_i || nk == 1) break;
                    }
                }
            }
    if (!out->plan) {
        if (!any_pins_met) {
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
            free(ex.s);
            goto fail;
        }
        if (!any_state_fit) {
            uint64_t gpu_all = b.cap[ARENA_GPU] * (uint64_t)b.R, cpu_all = b.cap[ARENA_CPU] * (uint64_t)b.R,
                     nvme_all = b.cap[ARENA_NVME] * (uint64_t)b.R;
            char s5[32];
            diag_error(d, SPAN_NONE, "model states need %s (%s per rank over %d rank%s); the target has %s GPU memory, %s CPU memory and %s%s",
                       plan_bytes_str(total * (uint64_t)b.R, s1, sizeof s1), plan_bytes_str(total, s2, sizeof s2), b.R,
                       b.R > 1 ? "s" : "", plan_bytes_str(gpu_all, s3, sizeof s3), plan_bytes_str(cpu_all, s4, sizeof s4),
                       nvme_all ? plan_bytes_str(nvme_all, s5, sizeof s5) : "no NVMe", nvme_all ? " NVMe" : "");
            bool pinned = false;
            for (int c = 0; c < PC_COUNT; c++) pinned |= o->tier[c] >= 0;
            if (pinned) diag_hint(d, "the plan block pins where state lives; unpin it to let the planner use every tier");
            else diag_hint(d, "add NVMe to the target, more ranks, or more CPU memory");
        } else {
            diag_error(d, SPAN_NONE, "no placement fits the target: %s", last_why);
            diag_hint(d, "tile large parameters (plan { tiles \"name\" = N }), lower the micro-batch, or checkpoint more often");
        }
        free(ex.s);
        goto fail;
    }
    say(&ex, "chosen: %s, prefetch %d%s (of %d builds): %.4g s/step predicted", place_str(&best, s4, sizeof s4), best.prefetch,
        best.reuse ? ", weights kept from recompute to backward" : "", tried, best_time);
    {
        /* the independent check of what is handed on (runtime/verify.c) */
        char vm[1024];
        int problems = verify_plan(out->plan, vm, sizeof vm);
        if (problems) {
            char *nl = strchr(vm, '\n');
            if (nl) *nl = 0;
            diag_error(d, SPAN_NONE, "internal planner error: the plan fails verification (%d problem%s): %s", problems,
                       problems > 1 ? "s" : "", vm);
            free(ex.s);
            goto fail;
        }
    }
    out->step_time = best_time;
    out->explain = arena_strdup(a, ex.s ? ex.s : "");
    free(ex.s);
    free(b.bufs);
    free(b.ins);
    free(b.opnds);
    free(b.reqs);
    return true;
fail:
    plan_free(out->plan);
    out->plan = NULL;
    free(b.bufs);
    free(b.ins);
    free(b.opnds);
    free(b.reqs);
    return false;
}
