/* exec_host: the host implementation of every opcode (kernels through the
 * host kernels, collectives through runtime/comm, NVMe through rtio, the
 * CPU Adam), the operand addressing both backends use, and the host
 * backend's table (rt_backend_host), and the nvme queue's pipeline
 * (rt_nvme_pipe) for both backends. The CUDA backend (exec_cuda.c) runs
 * the instructions that stay on the host through rt_host_instr. */
#include "exec_impl.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "adam.h"
#include "ckpt.h"
#include "comm_wait.h"
#include "half.h"
#include "hostk.h"
#include "hostk_threads.h"
#include "initrng.h"
#include "rtio.h"


int rt_fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- memory ---- */

size_t rt_dsz(int dt) {
    int s = plan_dtype_size(dt);
    return (size_t)(s > 0 ? s : 4);
}

uint8_t *rt_opnd_ptr(const Rt *r, const PlanOperand *o) {
    if (o->buffer < 0) return NULL;
    const PlanBuffer *b = &r->p->buffers[o->buffer];
    if (b->arena == ARENA_NVME || !r->arena[b->arena]) return NULL; /* NULL: device memory under CUDA */
    return r->arena[b->arena] + r->boff[o->buffer] + o->offset;
}

static uint64_t nvme_off(const Rt *r, const PlanOperand *o) {
    return r->boff[o->buffer] + o->offset;
}

const PlanOperand *rt_opnd(const Rt *r, const PlanInstr *in, uint32_t k) {
    return &r->p->operands[in->opnd + k];
}

double rt_elem_get(const void *p, int dt, int64_t i) {
    switch (dt) {
    case DT_BF16: return half_bf16_to_f32(((const uint16_t *)p)[i]);
    case DT_F16: return half_f16_to_f32(((const uint16_t *)p)[i]);
    case DT_I32: return ((const int32_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

void rt_elem_set(void *p, int dt, int64_t i, double v) {
    switch (dt) {
    case DT_BF16: ((uint16_t *)p)[i] = half_f32_to_bf16((float)v); break;
    case DT_F16: ((uint16_t *)p)[i] = half_f32_to_f16((float)v); break;
    case DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

/* Reads or writes bytes of a shard's home, wherever it lives. */
int rt_home_read(Rt *r, int buffer, uint64_t off, void *dst, uint64_t bytes, char *err, size_t n) {
    const PlanBuffer *b = &r->p->buffers[buffer];
    uint64_t at = r->boff[buffer] + off;
    if (b->arena == ARENA_GPU && r->be->device_memory) return r->be->home_read(r, at, dst, bytes, err, n);
    if (b->arena != ARENA_NVME) {
        memcpy(dst, r->arena[b->arena] + at, bytes);
        return 0;
    }
    return rtio_read(&r->io, at, dst, bytes, err, n);
}

int rt_home_write(Rt *r, int buffer, uint64_t off, const void *src, uint64_t bytes, char *err, size_t n) {
    const PlanBuffer *b = &r->p->buffers[buffer];
    uint64_t at = r->boff[buffer] + off;
    if (b->arena == ARENA_GPU && r->be->device_memory) return r->be->home_write(r, at, src, bytes, err, n);
    if (b->arena != ARENA_NVME) {
        memcpy(r->arena[b->arena] + at, src, bytes);
        return 0;
    }
    return rtio_write(&r->io, at, src, bytes, err, n);
}

/* ---- kernels ---- */

static HkTensor view(const Rt *r, int t, void *data) {
    HkTensor h = hk_plan_tensor(r->p, t, NULL);
    h.data = data;
    return h;
}

/* Copies columns [c0, c0+w) of the last dim of a [rows, cols] matrix of
 * element size es into dst [rows, w] (or back, adding, when add is set). */
static void cols_copy(uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols, int64_t c0, int64_t w, size_t es) {
    for (int64_t i = 0; i < rows; i++) memcpy(dst + (size_t)(i * w) * es, src + (size_t)(i * cols + c0) * es, (size_t)w * es);
}
static void cols_add_back(uint8_t *dst, int dt, const uint8_t *src, int64_t rows, int64_t cols, int64_t c0, int64_t w) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < w; j++) {
            int64_t d = i * cols + c0 + j;
            rt_elem_set(dst, dt, d, rt_elem_get(dst, dt, d) + rt_elem_get(src, dt, i * w + j));
        }
}
static void cols_put_back(uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols, int64_t c0, int64_t w, size_t es) {
    for (int64_t i = 0; i < rows; i++) memcpy(dst + (size_t)(i * cols + c0) * es, src + (size_t)(i * w) * es, (size_t)w * es);
}
/* dst += src over n elements of dtype dt: a gradient accumulated into its
 * home (ACCUM; the tied embedding's two gradients are 38.6 M elements in
 * gpt2-small), or a tile's partial output. Typed loops the compiler
 * vectorises, in chunks over the rank's team: element by element through
 * rt_elem_get/set it took 302 ms of a 478 ms step on an H200 machine
 * (docs/gpu-results.md). Each element is rounded once, from the f32 sum, as
 * before, so the result does not depend on the chunking. */
typedef struct AddJob {
    uint8_t *dst;
    const uint8_t *src;
    int dt;
    int64_t n;
} AddJob;
enum { ADD_CHUNK = 1 << 16 };

static void add_chunk(void *ctx, int64_t unit) {
    const AddJob *j = ctx;
    int64_t lo = unit * ADD_CHUNK, hi = lo + ADD_CHUNK < j->n ? lo + ADD_CHUNK : j->n;
    switch (j->dt) {
    case DT_F32: {
        float *d = (float *)j->dst;
        const float *a = (const float *)j->src;
        for (int64_t i = lo; i < hi; i++) d[i] += a[i];
        break;
    }
    case DT_BF16: {
        uint16_t *d = (uint16_t *)j->dst;
        const uint16_t *a = (const uint16_t *)j->src;
        for (int64_t i = lo; i < hi; i++) d[i] = half_f32_to_bf16(half_bf16_to_f32(d[i]) + half_bf16_to_f32(a[i]));
        break;
    }
    case DT_F16: {
        uint16_t *d = (uint16_t *)j->dst;
        const uint16_t *a = (const uint16_t *)j->src;
        for (int64_t i = lo; i < hi; i++) d[i] = half_f32_to_f16(half_f16_to_f32(d[i]) + half_f16_to_f32(a[i]));
        break;
    }
    default:
        for (int64_t i = lo; i < hi; i++) rt_elem_set(j->dst, j->dt, i, rt_elem_get(j->dst, j->dt, i) + rt_elem_get(j->src, j->dt, i));
        break;
    }
}

static void add_into(uint8_t *dst, int dt, const uint8_t *src, int64_t n) {
    AddJob j = {dst, src, dt, n};
    int64_t units = (n + ADD_CHUNK - 1) / ADD_CHUNK;
    /* about a nanosecond an element on one thread */
    hk_parallel(hk_team((double)n), units, add_chunk, &j);
}

/* Scratch for tiled kernels: a bump allocator over the worker's scratch. */
typedef struct Bump {
    uint8_t *p;
    size_t used, cap;
} Bump;
static void *bump(Bump *b, size_t n) {
    n = (n + 63) & ~(size_t)63;
    if (b->used + n > b->cap) return NULL;
    void *q = b->p + b->used;
    memset(q, 0, n);
    b->used += n;
    return q;
}

/* Tile t of n of an op whose 2-D weight (linear w, matmul b, embedding
 * table) is cut by rows: the weight operand holds only those rows. */
static int run_tiled(Rt *r, const PlanOp *o, const PlanOp *fo, void **tb, int tile, int ntiles, void *ws, int worker,
                     char *err, size_t n) {
    const Plan *g = r->p;
    Bump sc = {r->scratch[worker], 0, r->scratch_bytes};
    bool bwd = o->kind == OP_BWD;
    int slot = fo->prim == PRIM_EMBEDDING ? 0 : 1;
    int wt = fo->in[slot];
    const PlanTensor *W = &g->tensors[wt];
    int64_t rows = W->dims[0] / ntiles, r0 = (int64_t)tile * rows, cols = W->dims[1];
    HkTensor w = view(r, wt, tb[wt]);
    w.dims[0] = rows;
    int rc = 0;
    if (fo->prim == PRIM_EMBEDDING) {
        int ids = fo->in[1], y = fo->out[0];
        const int32_t *id = tb[ids];
        int64_t npos = g->tensors[ids].numel;
        if (!bwd) {
            uint8_t *yp = tb[y];
            size_t ye = rt_dsz(g->tensors[y].dtype);
            if (tile == 0) memset(yp, 0, (size_t)g->tensors[y].numel * ye);
            for (int64_t i = 0; i < npos; i++) {
                int64_t v = id[i] - r0;
                if (id[i] < 0 || id[i] >= W->dims[0]) return rt_fail(err, n, "embedding: id %d outside [0, %" PRId64 ")", id[i], W->dims[0]);
                if (v < 0 || v >= rows) continue;
                for (int64_t j = 0; j < cols; j++) rt_elem_set(yp, g->tensors[y].dtype, i * cols + j, rt_elem_get(tb[wt], W->dtype, v * cols + j));
            }
        } else {
            int dy = o->in[fo->nin + fo->nout], dw = o->out[0];
            if (dw < 0) return 0;
            uint8_t *dwp = tb[dw];
            int dwdt = g->tensors[dw].dtype;
            for (int64_t i = 0; i < npos; i++) {
                int64_t v = id[i] - r0;
                if (v < 0 || v >= rows) continue;
                for (int64_t j = 0; j < cols; j++)
                    rt_elem_set(dwp, dwdt, v * cols + j, rt_elem_get(dwp, dwdt, v * cols + j) + rt_elem_get(tb[dy], g->tensors[dy].dtype, i * cols + j));
            }
        }
        return 0;
    }
    bool tb_flag = fo->prim == PRIM_MATMUL && fo->iattr[1];
    if (fo->prim == PRIM_MATMUL && fo->iattr[0]) return rt_fail(err, n, "tiled matmul with transpose_a is not supported");
    int x = fo->in[0], y = fo->out[0];
    const PlanTensor *X = &g->tensors[x], *Y = &g->tensors[y];
    int64_t xr = X->numel / X->dims[X->rank - 1], xc = X->dims[X->rank - 1];
    int64_t yr = Y->numel / Y->dims[Y->rank - 1], yc = Y->dims[Y->rank - 1];
    size_t xe = rt_dsz(X->dtype), ye = rt_dsz(Y->dtype);
    HkTensor xs = view(r, x, NULL), ys = view(r, y, NULL);
    int bias = fo->prim == PRIM_LINEAR && fo->nin > 2 ? fo->in[2] : -1;
    HkTensor bt = bias >= 0 && tile == 0 ? view(r, bias, tb[bias]) : (HkTensor){0};
    if (!tb_flag) {
        /* The weight's rows are the reduction dim: this tile sees columns [r0, r0+rows) of x. */
        xs.dims[xs.rank - 1] = rows;
        xs.data = bump(&sc, (size_t)(xr * rows) * xe);
        if (!xs.data) return rt_fail(err, n, "tile scratch too small");
        cols_copy(xs.data, tb[x], xr, xc, r0, rows, xe);
        if (!bwd) {
            ys.data = bump(&sc, (size_t)Y->numel * ye);
            if (!ys.data) return rt_fail(err, n, "tile scratch too small");
            rc = fo->prim == PRIM_LINEAR ? hk_linear_fwd(&xs, &w, bias >= 0 && tile == 0 ? &bt : NULL, &ys, ws)
                                         : hk_matmul_fwd(&xs, &w, &ys, false, false, ws);
            if (rc) return rt_fail(err, n, "%s", hk_strerror(rc));
            if (tile == 0) memcpy(tb[y], ys.data, (size_t)Y->numel * ye);
            else add_into(tb[y], Y->dtype, ys.data, Y->numel);
        } else {
            int base = fo->nin + fo->nout;
            int dy = o->in[base];
            HkTensor dyt = view(r, dy, tb[dy]);
            int dx = o->out[0], dw = o->out[1], db = fo->nin > 2 ? o->out[2] : -1;
            HkTensor dxs = xs, dwt = view(r, wt, dw >= 0 ? tb[dw] : NULL), dbt = {0};
            dwt.dims[0] = rows;
            dxs.data = dx >= 0 ? bump(&sc, (size_t)(xr * rows) * xe) : NULL;
            if (dx >= 0 && !dxs.data) return rt_fail(err, n, "tile scratch too small");
            if (db >= 0 && tile == 0 && tb[db]) dbt = view(r, db, tb[db]);
            rc = fo->prim == PRIM_LINEAR
                     ? hk_linear_bwd(&xs, &w, &dyt, dx >= 0 ? &dxs : NULL, dw >= 0 ? &dwt : NULL, dbt.data ? &dbt : NULL, ws)
                     : hk_matmul_bwd(&xs, &w, &dyt, dx >= 0 ? &dxs : NULL, dw >= 0 ? &dwt : NULL, false, false, ws);
            if (rc) return rt_fail(err, n, "%s", hk_strerror(rc));
            if (dx >= 0) cols_add_back(tb[dx], g->tensors[dx].dtype, dxs.data, xr, xc, r0, rows);
        }
        return 0;
    }
    /* matmul(a, b, transpose_b): b is [N, K] and its rows are output columns [r0, r0+rows). */
    ys.dims[ys.rank - 1] = rows;
    if (!bwd) {
        ys.data = bump(&sc, (size_t)(yr * rows) * ye);
        if (!ys.data) return rt_fail(err, n, "tile scratch too small");
        HkTensor xa = view(r, x, tb[x]);
        rc = hk_matmul_fwd(&xa, &w, &ys, false, true, ws);
        if (rc) return rt_fail(err, n, "%s", hk_strerror(rc));
        cols_put_back(tb[y], ys.data, yr, yc, r0, rows, ye);
        return 0;
    }
    int dy = o->in[fo->nin + fo->nout];
    HkTensor dys = ys;
    dys.data = bump(&sc, (size_t)(yr * rows) * ye);
    if (!dys.data) return rt_fail(err, n, "tile scratch too small");
    cols_copy(dys.data, tb[dy], yr, yc, r0, rows, ye);
    int dx = o->out[0], dw = o->out[1];
    HkTensor xa = view(r, x, tb[x]);
    HkTensor dxt = dx >= 0 ? view(r, dx, tb[dx]) : (HkTensor){0};
    HkTensor dwt = view(r, wt, dw >= 0 ? tb[dw] : NULL);
    dwt.dims[0] = rows;
    rc = hk_matmul_bwd(&xa, &w, &dys, dx >= 0 ? &dxt : NULL, dw >= 0 ? &dwt : NULL, false, true, ws);
    if (rc) return rt_fail(err, n, "%s", hk_strerror(rc));
    return 0;
}

static int exec_kernel(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const Plan *p = r->p;
    if (in->arg < 0 || (uint32_t)in->arg >= p->nops) return rt_fail(err, n, "kernel of op %d outside the plan", in->arg);
    const PlanOp *o = &r->p->ops[in->arg];
    void **tb = r->table[worker];
    uint32_t k = 0;
    for (int i = 0; i < o->nin; i++, k++)
        if (o->in[i] >= 0) tb[o->in[i]] = k < in->nopnd ? rt_opnd_ptr(r, rt_opnd(r, in, k)) : NULL;
    for (int i = 0; i < o->nout; i++, k++)
        if (o->out[i] >= 0) tb[o->out[i]] = k < in->nopnd ? rt_opnd_ptr(r, rt_opnd(r, in, k)) : NULL;
    int rc = 0;
    if (o->kind == OP_LOSS_GRAD) {
        void *d = tb[o->out[0]];
        if (!d) return rt_fail(err, n, "loss_grad without its output");
        rt_elem_set(d, r->p->tensors[o->out[0]].dtype, 0, (double)r->loss_grad * r->loss_scale);
        return 0;
    }
    int f = o->kind == OP_FWD ? in->arg : o->fwd;
    if (f < 0 || (uint32_t)f >= r->p->nops) return rt_fail(err, n, "op %d names no forward op", in->arg);
    const PlanOp *fo = &r->p->ops[f];
    if (in->ntiles > 1) {
        rc = run_tiled(r, o, fo, tb, in->tile, in->ntiles, r->ws[f], worker, err, n);
        if (rc) return rc;
    } else if (o->kind == OP_BWD) {
        rc = hk_op_backward_packed(r->p, o, tb, r->ws[f], r->ws_bytes[f], r->seg);
    } else {
        rc = hk_op_forward_packed(r->p, o, tb, r->ws[f], r->ws_bytes[f], r->seg);
    }
    if (rc) {
        return rt_fail(err, n, "%s %s (op %d%s%s): %s", op_kind_names[o->kind], prim_names[o->prim], in->arg,
                    o->scope && *o->scope ? " in " : "", o->scope ? o->scope : "", hk_strerror(rc));
    }
    if (o->kind == OP_FWD && o->out[0] == p->loss && tb[p->loss] && in->tile == in->ntiles - 1) {
        r->loss_sum += rt_elem_get(tb[p->loss], r->p->tensors[p->loss].dtype, 0);
        r->loss_n++;
    }
    return 0;
}

/* ---- collectives over a tile, with padding ---- */

static int to_f32(float *dst, const void *src, int dt, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (float)rt_elem_get(src, dt, i);
    return 0;
}

int rt_comm_err(Rt *r, char *err, size_t n) { return rt_fail(err, n, "%s", comm_last_error(r->c)); }

/* A collective's waiting for its peers is noted as the instruction's
 * waiting, so the queue's busy time is its transfers (runtime/comm_wait). */
static int comm_done(Rt *r, int worker, CommStatus s, const CommWait *w, char *err, size_t n) {
    qrun_add_wait(&r->q, worker, w->wait_s);
    return s ? rt_comm_err(r, err, n) : 0;
}

static int exec_allgather(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
    uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
    if (!sp || !dp) return rt_fail(err, n, "allgather operands must be in memory");
    uint64_t sb = s->bytes, tb = d->bytes, R = (uint64_t)r->c->size;
    CommWait w;
    if (sb * R == tb) return comm_done(r, worker, commw_allgather(r->c, sp, dp, sb, &w), &w, err, n);
    /* The last rank's slice is padded: gather into scratch, keep the tile's bytes. */
    if (sb * R > r->scratch_bytes) return rt_fail(err, n, "allgather scratch too small");
    if (comm_done(r, worker, commw_allgather(r->c, sp, r->scratch[worker], sb, &w), &w, err, n)) return -1;
    memcpy(dp, r->scratch[worker], tb);
    return 0;
}

static int exec_reduce_scatter(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
    uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
    if (!sp || !dp) return rt_fail(err, n, "reduce_scatter operands must be in memory");
    int dt = r->p->tensors[in->arg].dtype;
    size_t es = rt_dsz(dt);
    int64_t te = (int64_t)(s->bytes / es), se = (int64_t)(d->bytes / es), R = r->c->size;
    size_t need = sizeof(float) * (size_t)(se * R + se);
    if (need > r->scratch_bytes) return rt_fail(err, n, "reduce_scatter scratch too small");
    float *send = (float *)r->scratch[worker], *recv = send + se * R;
    memset(send, 0, sizeof(float) * (size_t)(se * R));
    to_f32(send, sp, dt, te < se * R ? te : se * R);
    CommWait w;
    if (comm_done(r, worker, commw_reduce_scatter_f32(r->c, send, recv, (size_t)se, &w), &w, err, n)) return -1;
    for (int64_t i = 0; i < se; i++) rt_elem_set(dp, dt, i, rt_elem_get(dp, dt, i) + recv[i]);
    return 0;
}

static int exec_allreduce(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const PlanOperand *m = rt_opnd(r, in, 0);
    uint8_t *mp = rt_opnd_ptr(r, m);
    if (!mp) return rt_fail(err, n, "allreduce operand must be in memory");
    int dt = r->p->tensors[in->arg].dtype;
    int64_t ne = (int64_t)(m->bytes / rt_dsz(dt));
    CommWait w;
    if (dt == DT_F32) return comm_done(r, worker, commw_allreduce_sum_f32(r->c, (float *)mp, (size_t)ne, &w), &w, err, n);
    if ((size_t)ne * sizeof(float) > r->scratch_bytes) return rt_fail(err, n, "allreduce scratch too small");
    float *f = (float *)r->scratch[worker];
    to_f32(f, mp, dt, ne);
    if (comm_done(r, worker, commw_allreduce_sum_f32(r->c, f, (size_t)ne, &w), &w, err, n)) return -1;
    for (int64_t i = 0; i < ne; i++) rt_elem_set(mp, dt, i, f[i]);
    return 0;
}

/* ---- optimizer ---- */

bool rt_tensor_partitioned(const Rt *r, int t) {
    int s = r->p->tensors[t].shard;
    return s >= 0 && r->p->shards[s].partitioned;
}

static int exec_grad_norm(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    double ss = 0;
    int on_gpu = r->be->grad_sumsq(r, in, worker, &ss, err, n); /* the GPU-resident shards, summed there */
    if (on_gpu < 0) return -1;
    for (uint32_t k = 0; k + 1 < in->nopnd; k++) {
        const PlanOperand *o = rt_opnd(r, in, k);
        if (o->buffer < 0) continue;
        if (on_gpu && r->p->buffers[o->buffer].arena == ARENA_GPU) continue;
        int t = r->p->buffers[o->buffer].tensor;
        if (t < 0) continue;
        /* A whole (unpartitioned) gradient is the same on every rank: count it once. */
        if (!rt_tensor_partitioned(r, t) && r->c->rank != 0) continue;
        int dt = r->p->tensors[t].dtype;
        int64_t ne = (int64_t)(o->bytes / rt_dsz(dt));
        const uint8_t *gp = rt_opnd_ptr(r, o);
        if (!gp) {
            if (o->bytes > r->scratch_bytes) return rt_fail(err, n, "grad_norm scratch too small");
            bool dev = r->be->device_memory && r->p->buffers[o->buffer].arena == ARENA_GPU;
            if (dev ? r->be->copy_from_gpu(r, in->queue, o, r->scratch[worker], err, n)
                    : rtio_read(&r->io, nvme_off(r, o), r->scratch[worker], o->bytes, err, n))
                return -1;
            gp = r->scratch[worker];
        }
        /* the host kernels' sum of squares: vectorised, in double, in fixed
         * chunks (the same result on every run and thread count) */
        HkTensor g = hk_tensor((void *)gp, (DType)dt, 1, &ne);
        ss += hk_sum_squares(&g);
    }
    CommWait w;
    if (comm_done(r, worker, commw_allreduce_sum_f64(r->c, &ss, 1, &w), &w, err, n)) return -1;
    double norm = sqrt(ss) / r->loss_scale;
    r->grad_norm = norm;
    r->skip = !isfinite(norm);
    const PlanOperand *o = rt_opnd(r, in, in->nopnd - 1);
    /* The GPU Adam (zk_adam) reads the norm of the scaled gradients; the
     * CPU Adam takes r->grad_norm. */
    float v = (float)(r->be->device_memory ? sqrt(ss) : norm);
    if (r->be->device_memory && o->buffer >= 0 && r->p->buffers[o->buffer].arena == ARENA_GPU)
        return r->be->copy_to_gpu(r, in->queue, o, &v, sizeof v, err, n);
    uint8_t *np = rt_opnd_ptr(r, o);
    if (np) memcpy(np, &v, sizeof v);
    return 0;
}

/* The speculative optimizer's backup of an Adam (docs/schedule.md): what
 * the step changes and cannot recompute, in order: the parameter when it is
 * the fp32 state (read and written), the master, the moments. Saves them
 * (save) or puts them back. */
static int adam_backup(Rt *r, const PlanInstr *in, bool save, char *err, size_t n) {
    const PlanOperand *bk = rt_opnd(r, in, 6);
    uint8_t *bp = rt_opnd_ptr(r, bk);
    if (!bp) return rt_fail(err, n, "adam on '%s': its backup is not in memory", r->p->tensors[in->arg].name);
    uint64_t at = 0;
    for (uint32_t k = 0; k < 5; k++) {
        const PlanOperand *o = rt_opnd(r, in, k);
        if (k == 1 || o->buffer < 0 || (k == 0 && !(o->mode & PLAN_R))) continue;
        uint8_t *p = rt_opnd_ptr(r, o);
        if (!p || at + o->bytes > bk->bytes)
            return rt_fail(err, n, "adam on '%s': operand %u does not fit its backup", r->p->tensors[in->arg].name, k);
        if (save) memcpy(bp + at, p, o->bytes);
        else memcpy(p, bp + at, o->bytes);
        at += o->bytes;
    }
    return 0;
}

/* This step's clip coefficient (docs/training.md): min(1, c / (n + 1e-6)),
 * 1 without clipping. */
static double clip_coef(const Rt *r) {
    const PlanTrain *t = &r->p->train;
    return t->grad_clip > 0 ? fmin(1.0, t->grad_clip / (r->grad_norm + 1e-6)) : 1.0;
}

/* Whether this step's clipping or skip makes the speculative Adams wrong:
 * their coefficient was 1 (rt_step runs the redo range then). */
bool rt_speculation_failed(const Rt *r) { return r->skip || clip_coef(r) != 1.0; }

/* A skipped step's parameter where it is written apart from its state (a
 * staged copy, written home after the Adam) or a speculative step wrote
 * it: the old one again, the master rounded to the parameter's dtype, as
 * every step leaves it. */
static int param_from_master(Rt *r, const PlanInstr *in, uint8_t *pp, const float *master, int64_t ne, char *err,
                             size_t n) {
    HkTensor from = hk_tensor((void *)master, DT_F32, 1, &ne), to = hk_tensor(pp, (DType)r->p->tensors[in->arg].dtype, 1, &ne);
    if (hk_cast(&from, &to)) return rt_fail(err, n, "adam on '%s': cannot restore the parameter", r->p->tensors[in->arg].name);
    return 0;
}

/* The AdamW settings of this step (docs/training.md). */
static AdamParams adam_params(const Rt *r) {
    const PlanTrain *t = &r->p->train;
    AdamSchedule sch = adam_schedule_of(t);
    return (AdamParams){.lr = (float)adam_lr(&sch, r->step + 1), .beta1 = (float)t->beta1, .beta2 = (float)t->beta2,
                        .eps = (float)t->eps, .weight_decay = (float)t->weight_decay, .isa = ADAM_ISA_AUTO, .threads = 0};
}

/* A speculative Adam on twins (9 operands: param, grad, master, m, v
 * homes read, norm, their twins written): in the micro-batch without the
 * norm (coefficient 1), or its redo with it; under a skipped step the redo
 * leaves the parameter as the home's master has it (the old one). The
 * homes are never written, so nothing needs restoring; rt_step exchanges
 * twins and homes after a step that is not skipped. */
static int exec_adam_twin(Rt *r, const PlanInstr *in, char *err, size_t n) {
    int pt = in->arg;
    const char *name = r->p->tensors[pt].name;
    int pdt = r->p->tensors[pt].dtype;
    bool speculative = rt_opnd(r, in, 5)->buffer < 0;
    const PlanOperand *po = rt_opnd(r, in, 0);
    uint8_t *pp = rt_opnd_ptr(r, po), *gp = rt_opnd_ptr(r, rt_opnd(r, in, 1));
    float *src[3], *dst[3];
    for (int k = 0; k < 3; k++) {
        src[k] = (float *)rt_opnd_ptr(r, rt_opnd(r, in, 2 + (uint32_t)k));
        dst[k] = (float *)rt_opnd_ptr(r, rt_opnd(r, in, 6 + (uint32_t)k));
        if (!src[k] || !dst[k]) return rt_fail(err, n, "adam on '%s': its state or twin is not in memory", name);
    }
    if (!pp || !gp) return rt_fail(err, n, "adam on '%s': an operand is not in memory", name);
    int64_t ne = (int64_t)(po->bytes / rt_dsz(pdt));
    if (r->skip) return speculative ? 0 : param_from_master(r, in, pp, src[0], ne, err, n);
    int gt = r->p->tensors[pt].grad;
    int gdt = gt >= 0 ? r->p->tensors[gt].dtype : pdt;
    double clip = speculative ? 1.0 : clip_coef(r);
    AdamParams ap = adam_params(r);
    AdamStatus as = adam_step_to(&ap, r->step + 1, src[0], src[1], src[2], dst[0], dst[1], dst[2], gp, (DType)gdt, pp,
                                 (DType)pdt, ne, (float)(clip / r->loss_scale));
    if (as != ADAM_OK) return rt_fail(err, n, "adam on '%s': %s", name, adam_status_str(as));
    return 0;
}

static int exec_adam(Rt *r, const PlanInstr *in, char *err, size_t n) {
    if (in->nopnd < 6) return rt_fail(err, n, "adam needs 6 operands, has %u", in->nopnd);
    if (in->nopnd == 9) return exec_adam_twin(r, in, err, n);
    /* Without the norm operand: in the backward, before the norm exists:
     * coefficient 1, as the serial order has when the step neither clips
     * nor is skipped (in a plan without a norm it is 1 anyway). With 7
     * operands that is a speculative Adam (backup written); with 6, one on
     * a staged copy of NVMe state, written to twins. Its redo (the backup
     * read, or the copy staged again) runs only when the speculation
     * failed: restore, then the serial step. */
    bool speculative = rt_opnd(r, in, 5)->buffer < 0;
    if (in->nopnd == 7 && adam_backup(r, in, rt_opnd(r, in, 6)->mode == PLAN_W, err, n)) return -1;
    if (r->skip && !speculative) {
        /* (without this a skipped f16 step copied whatever the staging held into the parameter) */
        const PlanOperand *po = rt_opnd(r, in, 0), *mo = rt_opnd(r, in, 2);
        uint8_t *pp = rt_opnd_ptr(r, po), *mp = rt_opnd_ptr(r, mo);
        if (mo->buffer < 0 || (po->mode & PLAN_R)) return 0; /* no master: the parameter is the (restored) state */
        if (!pp || !mp) return rt_fail(err, n, "adam on '%s': an operand is not in memory", r->p->tensors[in->arg].name);
        return param_from_master(r, in, pp, (const float *)mp, (int64_t)(po->bytes / rt_dsz(r->p->tensors[in->arg].dtype)), err, n);
    }
    if (r->skip) return 0;
    int pt = in->arg;
    int pdt = r->p->tensors[pt].dtype;
    const PlanOperand *po = rt_opnd(r, in, 0), *go = rt_opnd(r, in, 1), *mo = rt_opnd(r, in, 2), *m1 = rt_opnd(r, in, 3),
                      *v1 = rt_opnd(r, in, 4);
    uint8_t *pp = rt_opnd_ptr(r, po), *gp = rt_opnd_ptr(r, go), *mp = rt_opnd_ptr(r, mo), *m1p = rt_opnd_ptr(r, m1),
            *v1p = rt_opnd_ptr(r, v1);
    if (!pp || !gp || !m1p || !v1p) return rt_fail(err, n, "adam on '%s': an operand is not in memory", r->p->tensors[pt].name);
    int64_t ne = (int64_t)(po->bytes / rt_dsz(pdt));
    int gt = r->p->tensors[pt].grad;
    int gdt = gt >= 0 ? r->p->tensors[gt].dtype : pdt;
    double clip = speculative ? 1.0 : clip_coef(r);
    AdamParams ap = adam_params(r);
    /* Without an fp32 master (f32 training) the parameter is the master. */
    if (!mp && pdt != DT_F32) return rt_fail(err, n, "adam on '%s': a %s parameter needs an fp32 master", r->p->tensors[pt].name, dtype_name((DType)pdt));
    float *master = mp ? (float *)mp : (float *)pp;
    AdamStatus as = adam_step(&ap, r->step + 1, master, (float *)m1p, (float *)v1p, gp, (DType)gdt, mp ? pp : NULL,
                              (DType)pdt, ne, (float)(clip / r->loss_scale));
    if (as != ADAM_OK) return rt_fail(err, n, "adam on '%s': %s", r->p->tensors[pt].name, adam_status_str(as));
    return 0;
}

/* ---- NVMe transfers ---- */

/* Whether operand o may be taken to the end of its last block: the buffer
 * starts on a block and its arena aligns every buffer to blocks, and no
 * operand of the plan addresses this buffer past o's end, so the rest of
 * that block is the buffer's rounding (the planner rounds buffers off the
 * GPU to whole blocks) or no buffer's at all. */
static bool widenable(const Rt *r, const PlanOperand *o) {
    const PlanBuffer *b = &r->p->buffers[o->buffer];
    const PlanArena *a = &r->p->arenas[b->arena];
    return o->offset + o->bytes == r->buf_reach[o->buffer] && b->offset % NVME_ALIGN == 0 && a->align &&
           a->align % NVME_ALIGN == 0 && (b->arena == ARENA_NVME || (r->arena[b->arena] && b->arena != ARENA_GPU));
}

/* An NVME_READ or NVME_WRITE as one rtio transfer. A transfer that is not
 * whole blocks (a 512-byte bias shard) is widened to its last block on
 * both sides when the rest of that block is nobody's data: O_DIRECT
 * then takes it as it is, where otherwise a read would go through the
 * bounce buffer and a write would read the block first. */
static void nvme_req(const Rt *r, const PlanInstr *in, RtioReq *q) {
    const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
    const PlanOperand *disk = in->op == PI_NVME_READ ? s : d, *mem = in->op == PI_NVME_READ ? d : s;
    q->write = in->op == PI_NVME_WRITE;
    q->off = nvme_off(r, disk);
    q->buf = rt_opnd_ptr(r, mem);
    q->bytes = s->bytes;
    uint64_t wide = (q->bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    if (wide != q->bytes && q->buf && q->off % NVME_ALIGN == 0 && widenable(r, disk) && widenable(r, mem)) q->bytes = wide;
}

/* The nvme queue as a pipeline (QrunPipe), on either backend: each
 * transfer in flight under its slot's tag, the engine's queue kept full,
 * after the backend's host_begin (on CUDA: the GPU work it depends on has
 * ended), whose time is noted as waiting before it began. One that would
 * wait there while others are in flight starts alone instead: the worker
 * reaps and retires those first, so what depends on them is not held up
 * by a wait that is not theirs. Anything else on the queue runs alone,
 * in order, through the backend's instr. */
static int nvme_pipe_start(void *ctx, uint32_t i, int slot, int inflight, int worker, char *err, size_t n) {
    Rt *r = ctx;
    const PlanInstr *in = &r->p->instrs[i];
    if (in->op != PI_NVME_READ && in->op != PI_NVME_WRITE) {
        if (inflight) return QRUN_PIPE_ALONE;
        return r->be->instr(r, i, worker, err, n) ? -1 : 0;
    }
    if (r->be->host_begin) {
        double t0 = qrun_now(&r->q);
        int rc = r->be->host_begin(r, i, worker, inflight == 0, err, n);
        if (rc < 0) return -1;
        if (rc > 0) return QRUN_PIPE_ALONE; /* inflight > 0 */
        qrun_add_wait(&r->q, worker, qrun_now(&r->q) - t0);
    }
    RtioReq q;
    nvme_req(r, in, &q);
    r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes;
    return rtio_start(&r->io, &q, RTIO_TAG_FIRST + (uint32_t)slot, err, n);
}

static int nvme_pipe_progress(void *ctx, int wait, int worker, char *err, size_t n) {
    (void)worker;
    return rtio_progress(&((Rt *)ctx)->io, wait, err, n);
}

static int nvme_pipe_finished(void *ctx, int slot, int worker, char *err, size_t n) {
    (void)worker;
    return rtio_finished(&((Rt *)ctx)->io, RTIO_TAG_FIRST + (uint32_t)slot, err, n);
}

void rt_nvme_pipe(Rt *r) {
    QrunPipe pipe = {nvme_pipe_start, nvme_pipe_progress, nvme_pipe_finished};
    qrun_set_pipe(&r->q, Q_NVME, &pipe);
}

/* ---- the instruction dispatcher ---- */

int rt_host_instr(Rt *r, uint32_t i, int worker, char *err, size_t n) {
    const Plan *p = r->p;
    const PlanInstr *in = &p->instrs[i];
    switch ((PlanOpcode)in->op) {
    case PI_INPUT: {
        const PlanOperand *o = rt_opnd(r, in, 0);
        uint8_t *d = rt_opnd_ptr(r, o);
        const int32_t *src = in->arg == 0 ? r->tokens : r->targets;
        if (!d || !src) return rt_fail(err, n, "input %d has no data", in->arg);
        memcpy(d, src, o->bytes);
        r->bytes[in->queue] += o->bytes;
        return 0;
    }
    case PI_NVME_READ:
    case PI_NVME_WRITE: {
        RtioReq q;
        nvme_req(r, in, &q);
        r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes;
        return q.write ? rtio_write(&r->io, q.off, q.buf, q.bytes, err, n) : rtio_read(&r->io, q.off, q.buf, q.bytes, err, n);
    }
    case PI_H2D:
    case PI_D2H: {
        const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
        if (!sp || !dp) return rt_fail(err, n, "%s operands must be in memory", plan_opcode_names[in->op]);
        memcpy(dp, sp, s->bytes < d->bytes ? s->bytes : d->bytes);
        r->bytes[in->queue] += s->bytes;
        return 0;
    }
    case PI_ALLGATHER: r->bytes[in->queue] += rt_opnd(r, in, 1)->bytes; return exec_allgather(r, in, worker, err, n);
    case PI_REDUCE_SCATTER: r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes; return exec_reduce_scatter(r, in, worker, err, n);
    case PI_ALLREDUCE: r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes; return exec_allreduce(r, in, worker, err, n);
    case PI_KERNEL: return exec_kernel(r, in, worker, err, n);
    case PI_ZERO: {
        const PlanOperand *o = rt_opnd(r, in, 0);
        uint8_t *d = rt_opnd_ptr(r, o);
        if (d) { memset(d, 0, o->bytes); return 0; }
        if (o->bytes > r->scratch_bytes) return rt_fail(err, n, "zero scratch too small");
        memset(r->scratch[worker], 0, o->bytes);
        return rtio_write(&r->io, nvme_off(r, o), r->scratch[worker], o->bytes, err, n);
    }
    case PI_ACCUM: {
        const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
        if (!sp || !dp) return rt_fail(err, n, "accum operands must be in memory");
        int dt = p->tensors[in->arg].dtype;
        add_into(dp, dt, sp, (int64_t)(s->bytes / rt_dsz(dt)));
        return 0;
    }
    case PI_GRAD_NORM: return exec_grad_norm(r, in, worker, err, n);
    case PI_CPU_ADAM:
    case PI_GPU_ADAM: return exec_adam(r, in, err, n);
    case PI_STEP_END: return 0;
    default: return rt_fail(err, n, "instruction %u: unknown opcode %u", i, in->op);
    }
}


/* ---- the host backend ---- */

static int host_instr(void *ctx, uint32_t i, int worker, char *err, size_t n) { return rt_host_instr(ctx, i, worker, err, n); }

enum { HUGE_PAGE = 2 << 20 };

/* The arenas in host memory, page-aligned and zeroed; the host kernels'
 * workspace per forward op, kept from forward to backward. The pinned
 * arena (the NVMe transfers' buffers, registered with io_uring) is
 * 2 MiB-aligned and asks for transparent huge pages before its first
 * touch, so it is born on them: registration (nvme.c) then has nothing to
 * collapse, and a 1 MiB request is one scatter-gather entry
 * (docs/runtime.md, "NVMe transfers"). Best effort: where the kernel
 * refuses, 4 KiB pages; ZINF_NVME_HUGEPAGES=0 leaves them too. */
static int host_create(Rt *r, char *err, size_t n) {
    const Plan *p = r->p;
    const char *huge = getenv("ZINF_NVME_HUGEPAGES");
    for (int k = 0; k < PLAN_NARENAS; k++) {
        if (k == ARENA_NVME) continue;
        uint64_t sz = p->arenas[k].size;
        if (!sz) continue;
        uint64_t align = k == ARENA_PINNED ? HUGE_PAGE : 4096;
        uint64_t rounded = (sz + align - 1) / align * align;
        r->arena[k] = aligned_alloc(align, rounded);
        if (!r->arena[k]) return rt_fail(err, n, "cannot allocate the %s arena (%llu bytes)", plan_arena_names[k], (unsigned long long)sz);
        if (k == ARENA_PINNED && !(huge && huge[0] == '0'))
            (void)madvise(r->arena[k], rounded, MADV_HUGEPAGE); /* a refusal leaves 4 KiB pages */
        memset(r->arena[k], 0, rounded);
        r->arena_bytes[k] = sz;
    }
    for (uint32_t k = 0; k < p->nops; k++) {
        if (p->ops[k].kind != OP_FWD) continue;
        size_t b = hk_op_workspace_bytes(p, (int)k);
        if (!b) continue;
        r->ws[k] = calloc(1, b);
        if (!r->ws[k]) return rt_fail(err, n, "out of memory for kernel workspace");
        r->ws_bytes[k] = b;
        r->ws_total += b;
    }
    return 0;
}

static void host_destroy(Rt *r) {
    for (int k = 0; k < PLAN_NARENAS; k++) free(r->arena[k]);
}

static int host_no_device(char *err, size_t n) { return rt_fail(err, n, "the host backend has no device memory"); }
static int host_home_read(Rt *r, uint64_t addr, void *dst, uint64_t bytes, char *err, size_t n) {
    (void)r, (void)addr, (void)dst, (void)bytes;
    return host_no_device(err, n);
}
static int host_home_write(Rt *r, uint64_t addr, const void *src, uint64_t bytes, char *err, size_t n) {
    (void)r, (void)addr, (void)src, (void)bytes;
    return host_no_device(err, n);
}
static int host_copy_from_gpu(Rt *r, int q, const PlanOperand *o, void *dst, char *err, size_t n) {
    (void)r, (void)q, (void)o, (void)dst;
    return host_no_device(err, n);
}
static int host_copy_to_gpu(Rt *r, int q, const PlanOperand *o, const void *src, size_t bytes, char *err, size_t n) {
    (void)r, (void)q, (void)o, (void)src, (void)bytes;
    return host_no_device(err, n);
}
static int host_grad_sumsq(Rt *r, const PlanInstr *in, int worker, double *ss, char *err, size_t n) {
    (void)r, (void)in, (void)worker, (void)ss, (void)err, (void)n;
    return 0; /* every shard is in host memory or on NVMe: summed by the caller */
}
static void host_step_begin(Rt *r) { (void)r; }
static int host_range_end(Rt *r, uint32_t begin, uint32_t end, char *err, size_t n) {
    (void)r, (void)begin, (void)end, (void)err, (void)n;
    return 0; /* the range ran to its end inside qrun_range */
}
static void host_abort(Rt *r) { (void)r; }
static double host_busy_seconds(const Rt *r, int q) { return r->q.busy[q]; }
static void host_memory_report(const Rt *r, FILE *out) {
    char a[32];
    fprintf(out, "  host kernel workspace %llu bytes (%s), scratch %llu bytes x %d queues\n",
            (unsigned long long)r->ws_total, plan_bytes_str(r->ws_total, a, sizeof a),
            (unsigned long long)r->scratch_bytes, PLAN_NQUEUES);
}
static uint64_t host_gpu_memory_used(const Rt *r) {
    (void)r;
    return 0;
}

const RtBackendOps rt_backend_host = {
    .name = "host",
    .device_memory = false,
    .create = host_create,
    .destroy = host_destroy,
    .instr = host_instr,
    .host_begin = NULL,
    .home_read = host_home_read,
    .home_write = host_home_write,
    .copy_from_gpu = host_copy_from_gpu,
    .copy_to_gpu = host_copy_to_gpu,
    .grad_sumsq = host_grad_sumsq,
    .step_begin = host_step_begin,
    .range_end = host_range_end,
    .abort = host_abort,
    .busy_seconds = host_busy_seconds,
    .memory_report = host_memory_report,
    .gpu_memory_used = host_gpu_memory_used,
};
