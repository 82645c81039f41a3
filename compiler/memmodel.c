#include "memmodel.h"
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- checked arithmetic: every byte count fits in 63 bits or the call fails ---- */

typedef struct Acc {
    bool overflow;
} Acc;

static int64_t mul(Acc *a, int64_t x, int64_t y) {
    int64_t r;
    if (x < 0 || y < 0 || __builtin_mul_overflow(x, y, &r)) {
        a->overflow = true;
        return 0;
    }
    return r;
}

static int64_t add(Acc *a, int64_t x, int64_t y) {
    int64_t r;
    if (__builtin_add_overflow(x, y, &r)) {
        a->overflow = true;
        return 0;
    }
    return r;
}

static int fail(MemModel *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(MemModel *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Bytes per element (ast.h's dtype_size lives with the front end; the memory
 * model must not depend on it being linked). */
static int64_t dsize(DType t) {
    switch (t) {
    case DT_F32: case DT_I32: return 4;
    case DT_BF16: case DT_F16: return 2;
    default: return 0;
    }
}

/* Bytes of n elements of t: whole blocks for a quantized frozen weight
 * and an 8-bit moment. */
static int64_t tbytes(Acc *a, const GTensor *t, int64_t n) {
    return dtype_is_blocked(t->dtype) ? dtype_bytes(t->dtype, n) : mul(a, n, dsize(t->dtype));
}

static const char *dname(DType t) {
    switch (t) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    case DT_DYN8: return "dyn8";
    case DT_UDYN8: return "udyn8";
    default: return "?";
    }
}

void memmodel_options_default(MemOptions *o) {
    memset(o, 0, sizeof *o);
    o->ranks = 1;
    o->nodes = 1;
    o->whole_below = MEM_WHOLE_BELOW_DEFAULT;
}

/* ZeRO-3 shard of a parameter of n elements: ceil(n / R) rounded up to
 * MEM_SHARD_ALIGN elements, or n when it stays whole. */
static int64_t shard_elems(int64_t n, int R, int64_t whole_below) {
    if (R <= 1 || n < whole_below) return n;
    int64_t per = n / R + (n % R != 0);
    return (per + MEM_SHARD_ALIGN - 1) / MEM_SHARD_ALIGN * MEM_SHARD_ALIGN;
}

static int group_of(int64_t ci, int segment) {
    if (ci <= 0 || segment < 0) return -1;
    return (int)(segment / ci);
}

/* Elements of tensor t with the batch and sequence dims rescaled: a leading
 * dim equal to the graph's batch becomes B, a second one equal to the graph's
 * sequence length becomes T ([B, T, ...] layout). */
static int64_t scaled_numel(Acc *a, const GTensor *t, int64_t b0, int64_t b, int64_t t0, int64_t tt) {
    if (t->rank == 0) return t->numel;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        int64_t d = t->dims[i];
        if (i == 0 && b0 > 0 && d == b0) d = b;
        else if (i == 1 && t0 > 0 && d == t0 && t->dims[0] == b0) d = tt;
        n = mul(a, n, d);
    }
    return n;
}

static bool is_state(TensorClass c) { return c == TC_GRAD || c == TC_MASTER || c == TC_MOMENTUM || c == TC_VARIANCE; }

/* o's defaults filled in and every option and the graph's tables checked. */
static int check_options(const Graph *g, MemOptions *o, MemModel *m) {
    if (!g) return fail(m, "memory model: no graph");
    if (o->ranks == 0) o->ranks = 1;
    if (o->nodes == 0) o->nodes = 1;
    if (o->whole_below == 0) o->whole_below = MEM_WHOLE_BELOW_DEFAULT;
    if (o->ranks < 0) return fail(m, "memory model: ranks must be positive (got %d)", o->ranks);
    if (o->nodes < 0 || o->nodes > o->ranks || o->ranks % o->nodes)
        return fail(m, "memory model: %d ranks cannot be spread evenly over %d nodes", o->ranks, o->nodes);
    if (o->micro_batch < 0) return fail(m, "memory model: micro-batch must be positive (got %" PRId64 ")", o->micro_batch);
    if (o->seq < 0) return fail(m, "memory model: sequence length must be positive (got %" PRId64 ")", o->seq);
    if (o->ci < -1) return fail(m, "memory model: checkpoint interval must be positive, 0 (the graph's) or -1 (none), got %" PRId64, o->ci);
    if (o->whole_below < 0) return fail(m, "memory model: whole_below must not be negative");
    if (g->ntensors < 0 || g->nops < 0 || (g->ntensors && !g->tensors) || (g->nops && !g->ops))
        return fail(m, "memory model: malformed graph");
    return 0;
}

/* The ranks, the checkpoint interval, and the graph's batch and sequence
 * (*b0, *t0: TrainConfig, else the first input's [B, T]) with o's
 * overrides. */
static int shape(const Graph *g, const MemOptions *o, MemModel *m, int64_t *b0, int64_t *t0) {
    m->model_name = g->model_name ? g->model_name : "model";
    m->ranks = o->ranks;
    m->nodes = o->nodes;
    m->whole_below = o->whole_below;
    m->ci = o->ci == 0 ? g->train.checkpoint_every : o->ci < 0 ? 0 : o->ci;
    if (m->ci < 0) m->ci = 0;
    *b0 = g->train.micro_batch;
    *t0 = 0;
    if (g->ninputs > 0 && g->inputs[0] >= 0 && g->inputs[0] < g->ntensors) {
        const GTensor *in = &g->tensors[g->inputs[0]];
        if (*b0 <= 0 && in->rank >= 1) *b0 = in->dims[0];
        if (in->rank >= 2 && in->dims[0] == *b0) *t0 = in->dims[1];
    }
    if (o->micro_batch > 0 && *b0 <= 0) return fail(m, "memory model: the graph has no batch dimension to override");
    if (o->seq > 0 && *t0 <= 0) return fail(m, "memory model: the graph has no [batch, seq] input to override the sequence length of");
    m->micro_batch = o->micro_batch > 0 ? o->micro_batch : *b0;
    m->seq = o->seq > 0 ? o->seq : *t0;
    return 0;
}

/* Is it a training graph? Which ops are the forward pass (*fwd_end)? And
 * every op's tensor ids in range. */
static int check_ops(const Graph *g, MemModel *m, int *fwd_end) {
    *fwd_end = g->nops;
    for (int i = 0; i < g->ntensors; i++)
        if (is_state(g->tensors[i].cls)) m->training_graph = true;
    if (g->nforward > 0 && g->nforward <= g->nops) {
        if (g->nforward < g->nops) m->training_graph = true;
        *fwd_end = g->nforward;
    }
    for (int k = 0; k < g->nops; k++) {
        const GOp *op = &g->ops[k];
        if (op->nin < 0 || op->nin > GRAPH_MAX_IN || op->nout < 0 || op->nout > GRAPH_MAX_OPOUT)
            return fail(m, "memory model: malformed graph: op %d has %d inputs and %d outputs", k, op->nin, op->nout);
        for (int i = 0; i < op->nin; i++)
            if (op->in[i] < -1 || op->in[i] >= g->ntensors) return fail(m, "memory model: malformed graph: op %d reads tensor %d of %d", k, op->in[i], g->ntensors);
        for (int i = 0; i < op->nout; i++)
            if (op->out[i] < -1 || op->out[i] >= g->ntensors) return fail(m, "memory model: malformed graph: op %d writes tensor %d of %d", k, op->out[i], g->ntensors);
    }
    return 0;
}

/* A frozen parameter of n elements, sh per rank: the gradient and optimizer
 * state it does not have (gradient in its dtype, fp32 master when mixed,
 * momentum, variance) counted as saved; only the parameter itself is
 * allocated. True when its bytes are counted here (a forward graph). */
/* Bytes of n elements of a moment of dtype md. */
static int64_t moment_bytes(Acc *a, DType md, int64_t n) { return dtype_is_blocked(md) ? dtype_bytes(md, n) : mul(a, n, dsize(md)); }

static bool add_frozen(const GTensor *t, int64_t n, int64_t sh, MemModel *m, Acc *a, const TrainConfig *tc) {
    DType dt = dtype_is_quant(t->dtype) ? tc->dtype : t->dtype; /* quantized: what it would train in */
    int64_t per = dsize(dt) + (dt != DT_F32 ? 4 : 0);
    DType m1 = graph_moment_dtype(tc, n, false), m2 = graph_moment_dtype(tc, n, true);
    m->nfrozen++;
    m->frozen_params = add(a, m->frozen_params, n);
    m->frozen_saved = add(a, m->frozen_saved, add(a, mul(a, n, per), add(a, moment_bytes(a, m1, n), moment_bytes(a, m2, n))));
    m->frozen_saved_rank =
        add(a, m->frozen_saved_rank, add(a, mul(a, sh, per), add(a, moment_bytes(a, m1, sh), moment_bytes(a, m2, sh))));
    if (m->training_graph) return false;
    m->model[TC_PARAM] = add(a, m->model[TC_PARAM], tbytes(a, t, n));
    m->rank[TC_PARAM] = add(a, m->rank[TC_PARAM], tbytes(a, t, sh));
    return true;
}

/* A parameter of n elements, sh per rank: counted, and the paper's fp32
 * gradient copy (mixed precision). In a graph without state tensors
 * (inference), its gradient and optimizer state are derived from it: true
 * when that is done. */
static bool add_param(const GTensor *t, int64_t n, int64_t sh, int R, const MemOptions *o, MemModel *m, Acc *a, DType *pdt,
                      const TrainConfig *tc) {
    m->params = add(a, m->params, n);
    m->nparam_tensors++;
    m->nsharded += R > 1 && n >= o->whole_below;
    if (dtype_is_quant(t->dtype)) return add_frozen(t, n, sh, m, a, tc); /* frozen (sema_freeze.c) */
    if (*pdt == DT_NONE || t->dtype != DT_F32) *pdt = t->dtype;
    bool mixed = t->dtype != DT_F32;
    if (mixed) m->mixed = true;
    if (t->frozen) return add_frozen(t, n, sh, m, a, tc);
    /* the paper's fp32 gradient copy, whatever graph this is */
    if (mixed) {
        m->grad32_model = add(a, m->grad32_model, mul(a, n, 4));
        m->grad32_rank = add(a, m->grad32_rank, mul(a, sh, 4));
    }
    if (m->training_graph) return false;
    /* derived from the parameter: gradient in its dtype, fp32 master,
     * moments as train { optimizer = adam(state) } stores them */
    int64_t per[TC_COUNT] = {0};
    per[TC_PARAM] = dsize(t->dtype);
    per[TC_GRAD] = dsize(t->dtype);
    per[TC_MASTER] = mixed ? 4 : 0;
    for (int c = TC_PARAM; c <= TC_MASTER; c++) {
        m->model[c] = add(a, m->model[c], mul(a, n, per[c]));
        m->rank[c] = add(a, m->rank[c], mul(a, sh, per[c]));
    }
    if (n >= m->moment_numel) m->moment_numel = n;
    for (int c = TC_MOMENTUM; c <= TC_VARIANCE; c++) {
        DType md = graph_moment_dtype(tc, n, c == TC_VARIANCE);
        if (n >= m->moment_numel) m->moment_dtype[c == TC_VARIANCE] = md;
        m->model[c] = add(a, m->model[c], moment_bytes(a, md, n));
        m->rank[c] = add(a, m->rank[c], moment_bytes(a, md, sh));
    }
    return true;
}

/* Model states: parameters, gradients, optimizer state, whole and per rank. */
static int model_states(const Graph *g, const MemOptions *o, MemModel *m, Acc *a) {
    int R = o->ranks;
    DType pdt = DT_NONE;
    for (int i = 0; i < g->ntensors; i++) {
        const GTensor *t = &g->tensors[i];
        if ((unsigned)t->cls >= TC_COUNT) return fail(m, "memory model: tensor %d has class %d", i, (int)t->cls);
        if (t->numel < 0 || t->rank < 0 || t->rank > GRAPH_MAX_RANK)
            return fail(m, "memory model: malformed graph: tensor %d has rank %d, %" PRId64 " elements", i, t->rank, t->numel);
        if (t->cls != TC_PARAM && !is_state(t->cls)) continue;
        int64_t ds = dsize(t->dtype);
        if (!ds && !dtype_is_blocked(t->dtype)) return fail(m, "memory model: tensor '%s' has no dtype", t->name ? t->name : "?");
        int64_t n = t->numel, sh;
        if (t->cls == TC_PARAM) {
            sh = shard_elems(n, R, o->whole_below);
            if (add_param(t, n, sh, R, o, m, a, &pdt, &g->train)) continue;
        } else {
            if (!m->training_graph) continue;
            if (t->param >= 0 && t->param < g->ntensors && g->tensors[t->param].cls == TC_PARAM)
                sh = shard_elems(g->tensors[t->param].numel, R, o->whole_below);
            else
                sh = n;
            if (t->param >= 0 && t->param < g->ntensors && g->tensors[t->param].numel != n)
                return fail(m, "memory model: '%s' has %" PRId64 " elements, its parameter %" PRId64, t->name ? t->name : "?", n,
                            g->tensors[t->param].numel);
        }
        if ((t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE) && n >= m->moment_numel) {
            m->moment_dtype[t->cls == TC_VARIANCE] = t->dtype;
            if (t->cls == TC_VARIANCE) m->moment_numel = n;
        }
        m->model[t->cls] = add(a, m->model[t->cls], tbytes(a, t, n));
        m->rank[t->cls] = add(a, m->rank[t->cls], tbytes(a, t, sh));
    }
    m->dtype = g->train.dtype != DT_NONE ? g->train.dtype : pdt;
    m->model_states_alloc = m->model_states_alloc_rank = 0;
    for (int c = TC_PARAM; c <= TC_VARIANCE; c++) {
        m->model_states_alloc = add(a, m->model_states_alloc, m->model[c]);
        m->model_states_alloc_rank = add(a, m->model_states_alloc_rank, m->rank[c]);
    }
    m->model_states = add(a, m->model_states_alloc, m->grad32_model);
    m->model_states_rank = add(a, m->model_states_alloc_rank, m->grad32_rank);
    return 0;
}

/* model-state working memory: the forward op reading the most parameter
 * bytes, times two (each parameter's gradient has its dtype) */
static void ms_working(const Graph *g, MemModel *m, Acc *a, int fwd_end) {
    for (int k = 0; k < fwd_end; k++) {
        const GOp *op = &g->ops[k];
        if (op->kind != OP_FWD) continue;
        int64_t w = 0;
        for (int i = 0; i < op->nin; i++) {
            int x = op->in[i];
            if (x < 0 || g->tensors[x].cls != TC_PARAM) continue;
            bool dup = false;
            for (int j = 0; j < i; j++) dup |= op->in[j] == x;
            if (dup) continue;
            const GTensor *p = &g->tensors[x];
            int64_t gs = p->frozen ? 0 : dsize(p->dtype);
            if (p->grad >= 0 && p->grad < g->ntensors) gs = dsize(g->tensors[p->grad].dtype);
            w = add(a, w, add(a, tbytes(a, p, p->numel), mul(a, p->numel, gs)));
        }
        if (w > m->ms_working) {
            m->ms_working = w;
            m->ms_working_op = k;
        }
    }
}

/* Which tensors are forward activations (fwdact), and of those which are
 * checkpoints (ckpt): read by a forward op of another checkpoint group. */
static void find_checkpoints(const Graph *g, const MemModel *m, int fwd_end, bool *fwdact, bool *ckpt) {
    for (int i = 0; i < g->ntensors; i++) {
        const GTensor *t = &g->tensors[i];
        fwdact[i] = (t->cls == TC_ACT || t->cls == TC_CKPT) && t->grad_of < 0 && t->producer >= 0 && t->producer < fwd_end &&
                    g->ops[t->producer].kind == OP_FWD;
    }
    if (m->ci <= 0) return;
    for (int k = 0; k < fwd_end; k++) {
        const GOp *op = &g->ops[k];
        if (op->kind != OP_FWD) continue;
        int gk = group_of(m->ci, op->segment);
        for (int i = 0; i < op->nin; i++) {
            int x = op->in[i];
            if (x < 0 || !fwdact[x]) continue;
            int gp = group_of(m->ci, g->ops[g->tensors[x].producer].segment);
            if (gp != gk && (gp >= 0 || gk >= 0)) ckpt[x] = true;
        }
    }
}

/* Activations of one micro-batch on one rank, at the shape of
 * m->micro_batch and m->seq (the graph's: b0, t0); gbytes: per group. */
static void activations(const Graph *g, MemModel *m, Acc *a, int64_t b0, int64_t t0, const bool *fwdact, const bool *ckpt, int64_t *gbytes,
                        int maxg) {
    m->ngroups = maxg + 1;
    int64_t outside = 0;
    for (int i = 0; i < g->ntensors; i++) {
        const GTensor *t = &g->tensors[i];
        int64_t n = scaled_numel(a, t, b0, m->micro_batch, t0, m->seq);
        int64_t bytes = mul(a, n, dsize(t->dtype));
        if (fwdact[i]) {
            if (ckpt[i]) {
                m->rank[TC_CKPT] = add(a, m->rank[TC_CKPT], bytes);
                continue;
            }
            m->rank[TC_ACT] = add(a, m->rank[TC_ACT], bytes);
            int gp = group_of(m->ci, g->ops[t->producer].segment);
            if (gp >= 0) gbytes[gp] = add(a, gbytes[gp], bytes);
            else outside = add(a, outside, bytes);
        } else if (t->cls == TC_INPUT || t->cls == TC_WORKSPACE || t->cls == TC_CONST) {
            m->rank[t->cls] = add(a, m->rank[t->cls], bytes);
        }
    }
    if (m->ci > 0) {
        m->act_kept = add(a, m->rank[TC_CKPT], outside);
        for (int k = 0; k <= maxg; k++)
            if (gbytes[k] > m->act_working) {
                m->act_working = gbytes[k];
                m->act_working_group = k;
            }
    } else {
        m->act_kept = m->rank[TC_ACT];
    }
}

/* The activation side of the model: checkpoints, activations kept and
 * working, inputs, workspaces and constants, per rank. */
static int activation_memory(const Graph *g, MemModel *m, Acc *a, int fwd_end, int64_t b0, int64_t t0) {
    int nt = g->ntensors;
    bool *ckpt = calloc((size_t)nt + 1, sizeof *ckpt);
    bool *fwdact = calloc((size_t)nt + 1, sizeof *fwdact);
    int maxg = -1;
    for (int k = 0; k < fwd_end; k++) maxg = group_of(m->ci, g->ops[k].segment) > maxg ? group_of(m->ci, g->ops[k].segment) : maxg;
    int64_t *gbytes = calloc((size_t)maxg + 2, sizeof *gbytes);
    int rc = 0;
    if (!ckpt || !fwdact || !gbytes) {
        rc = fail(m, "memory model: out of memory");
    } else {
        find_checkpoints(g, m, fwd_end, fwdact, ckpt);
        activations(g, m, a, b0, t0, fwdact, ckpt, gbytes, maxg);
    }
    free(ckpt);
    free(fwdact);
    free(gbytes);
    return rc;
}

int memmodel_compute(const Graph *g, const MemOptions *opt, MemModel *m) {
    MemOptions o;
    if (opt) o = *opt;
    else memmodel_options_default(&o);
    memset(m, 0, sizeof *m);
    m->ms_working_op = -1;
    m->act_working_group = -1;
    int64_t b0 = 0, t0 = 0;
    int fwd_end = 0;
    Acc a = {false};
    int rc = check_options(g, &o, m);
    if (!rc) rc = shape(g, &o, m, &b0, &t0);
    if (!rc) rc = check_ops(g, m, &fwd_end);
    if (!rc) rc = model_states(g, &o, m, &a);
    if (rc) return rc;
    ms_working(g, m, &a, fwd_end);
    if ((rc = activation_memory(g, m, &a, fwd_end, b0, t0))) return rc;
    for (int c = 0; c < TC_COUNT; c++)
        if (c != TC_PARAM && !is_state((TensorClass)c)) m->model[c] = mul(&a, m->rank[c], o.ranks);
    if (a.overflow) return fail(m, "memory model: byte counts of '%s' overflow 63 bits", m->model_name);
    return 0;
}

/* ---- printing ---- */

const char *memmodel_human(int64_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (u < 6 && (v >= 1024.0 || v <= -1024.0)) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, n, "%.2f %s", v, units[u]);
    return buf;
}

/* one cell: "1.83 TiB  2013265920000" */
static void cell(FILE *out, int64_t bytes, bool blank) {
    char h[32];
    if (blank) fprintf(out, "  %11s %17s", "-", "");
    else fprintf(out, "  %11s %17" PRId64, memmodel_human(bytes, h, sizeof h), bytes);
}

static void row(FILE *out, const MemModel *m, const char *name, const char *bpp, int64_t whole, int64_t rank, bool per_node_blank) {
    fprintf(out, "%-36s %7s", name, bpp);
    cell(out, whole, whole < 0);
    if (m->nodes > 1) cell(out, rank * (m->ranks / m->nodes), per_node_blank);
    cell(out, rank, false);
    fputc('\n', out);
}

void memmodel_print(const MemModel *m, FILE *out) {
    char name[80], bpp[16];
    fprintf(out, "memory model: %s, %" PRId64 " parameters in %d tensors, %s%s (%s graph)\n", m->model_name, m->params, m->nparam_tensors,
            dname(m->dtype), m->mixed ? " mixed-precision Adam" : " Adam", m->training_graph ? "training" : "forward");
    if (m->nfrozen) {
        char h1[32], h2[32];
        fprintf(out, "frozen: %d of %d parameter tensors, %" PRId64 " parameters (%.1f%%): no gradient or optimizer state, saving %s (%" PRId64
                " bytes) whole, %s (%" PRId64 " bytes) per rank\n", m->nfrozen, m->nparam_tensors, m->frozen_params,
                100.0 * (double)m->frozen_params / (double)(m->params > 0 ? m->params : 1), memmodel_human(m->frozen_saved, h1, sizeof h1),
                m->frozen_saved, memmodel_human(m->frozen_saved_rank, h2, sizeof h2), m->frozen_saved_rank);
    }
    if (m->ranks > 1)
        fprintf(out, "ZeRO-3 over %d ranks on %d node%s: %d of %d parameters split, shards of %d-element multiples, the rest whole (< %" PRId64 " elements)\n",
                m->ranks, m->nodes, m->nodes == 1 ? "" : "s", m->nsharded, m->nparam_tensors, MEM_SHARD_ALIGN, m->whole_below);
    else
        fprintf(out, "1 rank: nothing partitioned\n");
    fprintf(out, "activations per rank for micro-batch %" PRId64, m->micro_batch);
    if (m->seq > 0) fprintf(out, ", seq %" PRId64, m->seq);
    fputs(", ", out);
    if (m->ci > 0) fprintf(out, "a checkpoint every %" PRId64 " repeat instance%s (%d group%s)\n", m->ci, m->ci == 1 ? "" : "s", m->ngroups, m->ngroups == 1 ? "" : "s");
    else fprintf(out, "no activation checkpointing\n");
    fprintf(out, "\n%-36s %7s  %29s", "class", "B/param", "whole model (all ranks)");
    if (m->nodes > 1) fprintf(out, "  %29s", "per node");
    fprintf(out, "  %29s\n", "per rank");

    int64_t P = m->params > 0 ? m->params : 1;
    static const TensorClass st[] = {TC_PARAM, TC_GRAD, TC_MASTER, TC_MOMENTUM, TC_VARIANCE};
    static const char *const sn[] = {"parameters", "gradients", "fp32 master parameters", "momentum", "variance"};
    for (int i = 0; i < 5; i++) {
        TensorClass c = st[i];
        if (c == TC_MASTER && !m->mixed) continue;
        DType dt = c == TC_PARAM || c == TC_GRAD ? m->dtype : c == TC_MASTER ? DT_F32 : m->moment_dtype[c == TC_VARIANCE];
        if (dt == DT_NONE) dt = DT_F32; /* nothing trained */
        snprintf(name, sizeof name, "%s (%s)", sn[i], dname(dt));
        /* 8-bit moments: 1 byte and a 4-byte absmax per 2048 */
        snprintf(bpp, sizeof bpp, dtype_is_qstate(dt) ? "%.3f" : "%.0f", (double)m->model[c] / (double)P);
        row(out, m, name, bpp, m->model[c], m->rank[c], false);
    }
    if (m->mixed) {
        snprintf(bpp, sizeof bpp, "%.0f", (double)m->grad32_model / (double)P);
        row(out, m, "fp32 gradients (paper only)", bpp, m->grad32_model, m->grad32_rank, false);
    }
    snprintf(bpp, sizeof bpp, "%.0f", (double)m->model_states / (double)P);
    row(out, m, "model states (paper's count)", bpp, m->model_states, m->model_states_rank, false);
    snprintf(bpp, sizeof bpp, "%.0f", (double)m->model_states_alloc / (double)P);
    row(out, m, "model states (zinf allocates)", bpp, m->model_states_alloc, m->model_states_alloc_rank, false);
    if (m->nfrozen) row(out, m, "frozen: no gradient, optimizer state", "", m->frozen_saved, m->frozen_saved_rank, false);
    row(out, m, "model-state working memory", "", -1, m->ms_working, true);
    row(out, m, "inputs", "", m->model[TC_INPUT], m->rank[TC_INPUT], false);
    if (m->ci > 0) {
        row(out, m, "activation checkpoints", "", m->model[TC_CKPT], m->rank[TC_CKPT], false);
        row(out, m, "activations kept (ckpts + outside)", "", m->act_kept * m->ranks, m->act_kept, false);
        row(out, m, "activation working memory (1 group)", "", -1, m->act_working, true);
    } else {
        row(out, m, "activations (all kept)", "", m->model[TC_ACT], m->rank[TC_ACT], false);
    }
    if (m->rank[TC_WORKSPACE]) row(out, m, "workspace", "", m->model[TC_WORKSPACE], m->rank[TC_WORKSPACE], false);
    fputc('\n', out);
}

/* ---- the paper's closed forms ---- */

const Table1Shape memmodel_table1_shapes[MEM_TABLE1_ROWS] = {
    {80, 10 * 1024, 128}, {100, 20 * 1024, 160}, {128, 25 * 1024, 256}, {195, 64 * 1024, 512}, {315, 160 * 1024, 1024},
};

void memmodel_table1_assume_default(Table1Assume *a) {
    a->batch_per_node = 32;
    a->batch_per_gpu = 2;
    a->seq = 1024;
    a->ci = 1;
}

bool memmodel_table1_row(const Table1Shape *s, const Table1Assume *as, Table1Row *out) {
    if (!s || !as || !out || s->layers <= 0 || s->hidden <= 0 || s->heads <= 0 || as->batch_per_node <= 0 || as->batch_per_gpu <= 0 ||
        as->seq <= 0 || as->ci <= 0 || s->layers % as->ci)
        return false;
    Acc a = {false};
    int64_t nl = s->layers, hd = s->hidden, hd2 = mul(&a, hd, hd);
    Table1Row r;
    r.params = mul(&a, mul(&a, 12, nl), hd2);
    r.model_states = mul(&a, r.params, 20);
    r.ms_working_gpu = mul(&a, mul(&a, 4, hd), mul(&a, 4, hd));
    r.act_ckpt_node = mul(&a, mul(&a, mul(&a, 2, as->batch_per_node), mul(&a, as->seq, hd)), nl / as->ci);
    int64_t per_tok = add(&a, mul(&a, 16, hd), mul(&a, mul(&a, 2, s->heads), as->seq));
    r.act_working_gpu = mul(&a, mul(&a, mul(&a, as->batch_per_gpu, as->seq), as->ci), per_tok);
    if (a.overflow) return false;
    *out = r;
    return true;
}

static const double TB = 1099511627776.0, GB = 1073741824.0;

static void hidden_str(int64_t hd, char *buf, size_t n) {
    if (hd % 1024 == 0) snprintf(buf, n, "%" PRId64 "K", hd / 1024);
    else snprintf(buf, n, "%" PRId64, hd);
}

void memmodel_table1_print(const Table1Assume *as, FILE *out) {
    fprintf(out, "| Params (T) | Layers | Hidden | Heads | Model states (TB/model) | MS working mem (GB/GPU) "
                 "| Act. ckpt (TB/node) | Act. working mem (GB/GPU) |\n");
    fprintf(out, "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < MEM_TABLE1_ROWS; i++) {
        const Table1Shape *s = &memmodel_table1_shapes[i];
        Table1Row r;
        char hs[32];
        hidden_str(s->hidden, hs, sizeof hs);
        if (!memmodel_table1_row(s, as, &r)) {
            fprintf(out, "| (invalid assumptions for %" PRId64 " layers) |\n", s->layers);
            continue;
        }
        fprintf(out, "| %.2f | %" PRId64 " | %s | %" PRId64 " | %.2f | %.2f | %.2f | %.2f |\n", (double)r.params / 1e12, s->layers, hs, s->heads,
                (double)r.model_states / TB, (double)r.ms_working_gpu / GB, (double)r.act_ckpt_node / TB, (double)r.act_working_gpu / GB);
    }
}
