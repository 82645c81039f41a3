#include "exec_impl.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "adam.h"
#include "ckpt.h"
#include "half.h"
#include "hostk.h"
#include "initrng.h"
#include "rtio.h"


int rt_fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

int64_t rt_steps_done(const Rt *r) { return r->step; }
double rt_busy_seconds(const Rt *r, int q) {
    if (q < 0 || q >= PLAN_NQUEUES) return 0;
    return r->cu ? rtc_busy_seconds(r, q) : r->q.busy[q];
}
uint64_t rt_arena_bytes(const Rt *r, int k) { return r->arena_bytes[k]; }
uint64_t rt_gpu_memory_used(const Rt *r) { return r->cu ? rtc_gpu_memory_used(r) : 0; }

double rt_step_flops(const Rt *r, int accum) {
    const Plan *p = r->p;
    double f = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].op == PI_KERNEL) f += p->instrs[i].flops * (i < p->opt_begin ? (accum > 0 ? accum : 1) : 1);
    return f;
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
    return r->arena[b->arena] + b->offset + o->offset;
}

static uint64_t nvme_off(const Rt *r, const PlanOperand *o) {
    return r->p->buffers[o->buffer].offset + o->offset;
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
    if (b->arena == ARENA_GPU && r->cu) return rtc_home_read(r, b->offset + off, dst, bytes, err, n);
    if (b->arena != ARENA_NVME) {
        memcpy(dst, r->arena[b->arena] + b->offset + off, bytes);
        return 0;
    }
    return rtio_read(&r->io, b->offset + off, dst, bytes, err, n);
}

int rt_home_write(Rt *r, int buffer, uint64_t off, const void *src, uint64_t bytes, char *err, size_t n) {
    const PlanBuffer *b = &r->p->buffers[buffer];
    if (b->arena == ARENA_GPU && r->cu) return rtc_home_write(r, b->offset + off, src, bytes, err, n);
    if (b->arena != ARENA_NVME) {
        memcpy(r->arena[b->arena] + b->offset + off, src, bytes);
        return 0;
    }
    return rtio_write(&r->io, b->offset + off, src, bytes, err, n);
}

/* ---- initial state ---- */

/* Parameters from (seed, name, element) and fp32 masters equal to them;
 * everything else zero. In chunks of INIT_CHUNK elements, so the memory it
 * takes does not grow with the largest shard (NVMe homes of any size). */
enum { INIT_CHUNK = 1 << 20 };

static int init_shard(Rt *r, const PlanShard *s, uint8_t *tmp, float *vals, char *err, size_t n) {
    const Plan *p = r->p;
    const PlanTensor *t = &p->tensors[s->tensor];
    const PlanTensor *src = t->cls == TC_MASTER && t->param >= 0 ? &p->tensors[t->param] : t;
    bool values = t->cls == TC_PARAM || t->cls == TC_MASTER;
    size_t es = rt_dsz(t->dtype);
    uint64_t total = s->bytes / es, done = 0;
    while (done < total) {
        int64_t m = (int64_t)(total - done < INIT_CHUNK ? total - done : INIT_CHUNK);
        memset(tmp, 0, (size_t)m * es);
        for (int64_t k = 0; values && k < m;) {
            /* element done+k of the buffer: tile u, position j of this rank's slice */
            int64_t pos = (int64_t)done + k, u = pos / s->tile_shard, j = pos % s->tile_shard;
            int64_t run = s->tile_shard - j < m - k ? s->tile_shard - j : m - k;
            int64_t w0 = s->partitioned ? (int64_t)r->c->rank * s->tile_shard : 0;
            int64_t valid = s->tile_elems - w0 - j; /* the rest of the slice is padding */
            if (valid > run) valid = run;
            if (u < s->ntiles && valid > 0) {
                init_fill_f32(vals, u * s->tile_elems + w0 + j, valid, p->train.seed, src->name, (InitKind)src->init, src->init_std);
                for (int64_t i = 0; i < valid; i++) {
                    /* The master holds the parameter's value as rounded to the parameter's dtype. */
                    double v = vals[i];
                    if (src->dtype == DT_BF16) v = half_bf16_to_f32(half_f32_to_bf16(vals[i]));
                    else if (src->dtype == DT_F16) v = half_f16_to_f32(half_f32_to_f16(vals[i]));
                    rt_elem_set(tmp, t->dtype, k + i, v);
                }
            }
            k += run;
        }
        if (rt_home_write(r, s->buffer, done * es, tmp, (uint64_t)m * es, err, n)) return -1;
        done += (uint64_t)m;
    }
    return 0;
}

static int init_state(Rt *r, char *err, size_t n) {
    uint8_t *tmp = malloc((size_t)INIT_CHUNK * 4);
    float *vals = malloc(sizeof(float) * INIT_CHUNK);
    int rc = tmp && vals ? 0 : rt_fail(err, n, "out of memory initialising the parameters");
    for (uint32_t si = 0; si < r->p->nshards && !rc; si++) rc = init_shard(r, &r->p->shards[si], tmp, vals, err, n);
    free(tmp);
    free(vals);
    return rc;
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
static void add_into(uint8_t *dst, int dt, const uint8_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) rt_elem_set(dst, dt, i, rt_elem_get(dst, dt, i) + rt_elem_get(src, dt, i));
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
        rc = hk_op_backward(r->p, o, tb, r->ws[f], r->ws_bytes[f]);
    } else {
        rc = hk_op_forward(r->p, o, tb, r->ws[f], r->ws_bytes[f]);
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

static int comm_err(Rt *r, char *err, size_t n) { return rt_fail(err, n, "%s", comm_last_error(r->c)); }

static int exec_allgather(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
    uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
    if (!sp || !dp) return rt_fail(err, n, "allgather operands must be in memory");
    uint64_t sb = s->bytes, tb = d->bytes, R = (uint64_t)r->c->size;
    if (sb * R == tb) {
        if (comm_allgather(r->c, sp, dp, sb)) return comm_err(r, err, n);
    } else {
        /* The last rank's slice is padded: gather into scratch, keep the tile's bytes. */
        if (sb * R > r->scratch_bytes) return rt_fail(err, n, "allgather scratch too small");
        if (comm_allgather(r->c, sp, r->scratch[worker], sb)) return comm_err(r, err, n);
        memcpy(dp, r->scratch[worker], tb);
    }
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
    if (comm_reduce_scatter_f32(r->c, send, recv, (size_t)se)) return comm_err(r, err, n);
    for (int64_t i = 0; i < se; i++) rt_elem_set(dp, dt, i, rt_elem_get(dp, dt, i) + recv[i]);
    return 0;
}

static int exec_allreduce(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const PlanOperand *m = rt_opnd(r, in, 0);
    uint8_t *mp = rt_opnd_ptr(r, m);
    if (!mp) return rt_fail(err, n, "allreduce operand must be in memory");
    int dt = r->p->tensors[in->arg].dtype;
    int64_t ne = (int64_t)(m->bytes / rt_dsz(dt));
    if (dt == DT_F32) return comm_allreduce_sum_f32(r->c, (float *)mp, (size_t)ne) ? comm_err(r, err, n) : 0;
    if ((size_t)ne * sizeof(float) > r->scratch_bytes) return rt_fail(err, n, "allreduce scratch too small");
    float *f = (float *)r->scratch[worker];
    to_f32(f, mp, dt, ne);
    if (comm_allreduce_sum_f32(r->c, f, (size_t)ne)) return comm_err(r, err, n);
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
    int on_gpu = r->cu ? rtc_grad_sumsq(r, in, worker, &ss, err, n) : 0; /* the GPU-resident shards, summed there */
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
            bool dev = r->cu && r->p->buffers[o->buffer].arena == ARENA_GPU;
            if (dev ? rtc_copy_from_gpu(r, in->queue, o, r->scratch[worker], err, n)
                    : rtio_read(&r->io, nvme_off(r, o), r->scratch[worker], o->bytes, err, n))
                return -1;
            gp = r->scratch[worker];
        }
        for (int64_t i = 0; i < ne; i++) {
            double v = rt_elem_get(gp, dt, i);
            ss += v * v;
        }
    }
    if (comm_allreduce_sum_f64(r->c, &ss, 1)) return comm_err(r, err, n);
    double norm = sqrt(ss) / r->loss_scale;
    r->grad_norm = norm;
    r->skip = !isfinite(norm);
    const PlanOperand *o = rt_opnd(r, in, in->nopnd - 1);
    /* The GPU Adam (zk_adam) reads the norm of the scaled gradients; the
     * CPU Adam takes r->grad_norm. */
    float v = (float)(r->cu ? sqrt(ss) : norm);
    if (r->cu && o->buffer >= 0 && r->p->buffers[o->buffer].arena == ARENA_GPU)
        return rtc_copy_to_gpu(r, in->queue, o, &v, sizeof v, err, n);
    uint8_t *np = rt_opnd_ptr(r, o);
    if (np) memcpy(np, &v, sizeof v);
    return 0;
}

static int exec_adam(Rt *r, const PlanInstr *in, char *err, size_t n) {
    if (in->nopnd < 6) return rt_fail(err, n, "adam needs 6 operands, has %u", in->nopnd);
    if (r->skip) return 0;
    const PlanTrain *t = &r->p->train;
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
    double clip = t->grad_clip > 0 ? fmin(1.0, t->grad_clip / (r->grad_norm + 1e-6)) : 1.0;
    AdamSchedule sch = {.lr = t->lr, .warmup_steps = t->warmup_steps, .cosine = t->cosine, .min_lr = t->min_lr, .steps = t->steps};
    AdamParams ap = {.lr = (float)adam_lr(&sch, r->step + 1), .beta1 = (float)t->beta1, .beta2 = (float)t->beta2,
                     .eps = (float)t->eps, .weight_decay = (float)t->weight_decay, .isa = ADAM_ISA_AUTO, .threads = 0};
    /* Without an fp32 master (f32 training) the parameter is the master. */
    if (!mp && pdt != DT_F32) return rt_fail(err, n, "adam on '%s': a %s parameter needs an fp32 master", r->p->tensors[pt].name, dtype_name((DType)pdt));
    float *master = mp ? (float *)mp : (float *)pp;
    AdamStatus as = adam_step(&ap, r->step + 1, master, (float *)m1p, (float *)v1p, gp, (DType)gdt, mp ? pp : NULL,
                              (DType)pdt, ne, (float)(clip / r->loss_scale));
    if (as != ADAM_OK) return rt_fail(err, n, "adam on '%s': %s", r->p->tensors[pt].name, adam_status_str(as));
    return 0;
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
    case PI_NVME_READ: {
        const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        r->bytes[in->queue] += s->bytes;
        return rtio_read(&r->io, nvme_off(r, s), rt_opnd_ptr(r, d), s->bytes, err, n);
    }
    case PI_NVME_WRITE: {
        const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        r->bytes[in->queue] += s->bytes;
        return rtio_write(&r->io, nvme_off(r, d), rt_opnd_ptr(r, s), s->bytes, err, n);
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

static int exec_instr(void *ctx, uint32_t i, int worker, char *err, size_t n) { return rt_host_instr(ctx, i, worker, err, n); }

/* ---- life cycle ---- */

static size_t instr_scratch(const Rt *r, const PlanInstr *in) {
    const Plan *p = r->p;
    uint64_t R = (uint64_t)r->c->size;
    switch ((PlanOpcode)in->op) {
    case PI_ALLGATHER: return in->nopnd > 0 ? (size_t)(R * p->operands[in->opnd].bytes) : 0;
    case PI_REDUCE_SCATTER: {
        if (in->nopnd < 2) return 0;
        uint64_t se = p->operands[in->opnd + 1].bytes / rt_dsz(p->tensors[in->arg].dtype);
        return (size_t)(sizeof(float) * (R + 1) * se);
    }
    case PI_ALLREDUCE:
        return in->nopnd > 0 ? (size_t)(sizeof(float) * (p->operands[in->opnd].bytes / rt_dsz(p->tensors[in->arg].dtype))) : 0;
    case PI_ZERO:
    case PI_GRAD_NORM: {
        size_t m = 0;
        for (uint32_t k = 0; k < in->nopnd; k++)
            if (p->operands[in->opnd + k].bytes > m) m = p->operands[in->opnd + k].bytes;
        return m;
    }
    case PI_KERNEL: {
        if (in->ntiles <= 1 || in->arg < 0 || (uint32_t)in->arg >= p->nops) return 0;
        const PlanOp *o = &r->p->ops[in->arg];
        const PlanOp *fo = o->kind == OP_FWD ? o : &r->p->ops[o->fwd];
        size_t b = 256;
        if (fo->in[0] >= 0) b += 2 * (size_t)r->p->tensors[fo->in[0]].numel * rt_dsz(r->p->tensors[fo->in[0]].dtype);
        if (fo->out[0] >= 0) b += 2 * (size_t)r->p->tensors[fo->out[0]].numel * rt_dsz(r->p->tensors[fo->out[0]].dtype);
        return b;
    }
    default: return 0;
    }
}

Rt *rt_create(const Plan *p, Comm *c, const RtOptions *o, char *err, size_t n) {
    if (p->ranks != c->size) {
        rt_fail(err, n, "the plan is for %d rank%s but this job has %d: run it with mpirun -np %d (or recompile for %d ranks)",
             p->ranks, p->ranks == 1 ? "" : "s", c->size, p->ranks, c->size);
        return NULL;
    }
    Rt *r = calloc(1, sizeof *r);
    if (!r) { rt_fail(err, n, "out of memory"); return NULL; }
    r->p = p;
    r->c = c;
    if (o) r->o = *o;
    r->loss_scale = p->train.dtype == DT_F16 ? (p->train.loss_scale > 0 ? p->train.loss_scale : 65536.0) : 1.0;
    if (r->o.backend == RT_BACKEND_CUDA && rtc_create(r, err, n)) goto bad;
    for (int k = 0; k < PLAN_NARENAS && !r->cu; k++) {
        if (k == ARENA_NVME) continue;
        uint64_t sz = p->arenas[k].size;
        if (!sz) continue;
        uint64_t rounded = (sz + 4095) / 4096 * 4096;
        r->arena[k] = aligned_alloc(4096, rounded);
        if (!r->arena[k]) {
            rt_fail(err, n, "cannot allocate the %s arena (%llu bytes)", plan_arena_names[k], (unsigned long long)sz);
            goto bad;
        }
        memset(r->arena[k], 0, rounded);
        r->arena_bytes[k] = sz;
    }
    if (p->arenas[ARENA_NVME].size) {
        const char *dirs[16];
        int nd = 0;
        if (r->o.nvme_dir) dirs[nd++] = r->o.nvme_dir;
        else
            for (int i = 0; i < p->target.nvme_npaths && nd < 16; i++) dirs[nd++] = p->target.nvme_paths[i];
        if (!nd) { rt_fail(err, n, "the plan keeps state on NVMe but names no NVMe path: pass --nvme DIR"); goto bad; }
        if (rtio_open(&r->io, dirs, nd, c->rank, p->arenas[ARENA_NVME].size, r->o.queue_depth, err, n)) goto bad;
        r->io_open = true;
        if (r->arena[ARENA_PINNED] &&
            rtio_register(&r->io, r->arena[ARENA_PINNED], (p->arenas[ARENA_PINNED].size + 4095) / 4096 * 4096, err, n))
            goto bad;
        r->arena_bytes[ARENA_NVME] = p->arenas[ARENA_NVME].size;
    }
    r->ws = calloc(p->nops ? p->nops : 1, sizeof *r->ws);
    r->ws_bytes = calloc(p->nops ? p->nops : 1, sizeof *r->ws_bytes);
    if (!r->ws || !r->ws_bytes) { rt_fail(err, n, "out of memory"); goto bad; }
    for (uint32_t k = 0; k < r->p->nops && !r->cu; k++) { /* the GPU kernels keep no host state */
        if (r->p->ops[k].kind != OP_FWD) continue;
        size_t b = hk_op_workspace_bytes(r->p, (int)k);
        if (!b) continue;
        r->ws[k] = calloc(1, b);
        if (!r->ws[k]) { rt_fail(err, n, "out of memory for kernel workspace"); goto bad; }
        r->ws_bytes[k] = b;
        r->ws_total += b;
    }
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        size_t b = instr_scratch(r, &p->instrs[i]);
        if (b > r->scratch_bytes) r->scratch_bytes = b;
    }
    r->scratch_bytes = (r->scratch_bytes + 63) & ~(size_t)63;
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        r->table[q] = calloc(p->ntensors ? p->ntensors : 1, sizeof(void *));
        r->scratch[q] = r->scratch_bytes ? aligned_alloc(64, r->scratch_bytes) : NULL;
        if (!r->table[q] || (r->scratch_bytes && !r->scratch[q])) { rt_fail(err, n, "out of memory for scratch"); goto bad; }
    }
    if (init_state(r, err, n)) goto bad;
    if (qrun_init(&r->q, p, r->cu ? rtc_instr : exec_instr, r)) { rt_fail(err, n, "out of memory"); goto bad; }
    return r;
bad:
    rt_destroy(r);
    return NULL;
}

void rt_destroy(Rt *r) {
    if (!r) return;
    if (r->io_open) rtio_close(&r->io, 1);
    if (r->cu) rtc_destroy(r); /* its host arenas are page-locked: freed there */
    else
        for (int k = 0; k < PLAN_NARENAS; k++) free(r->arena[k]);
    if (r->ws)
        for (uint32_t k = 0; k < r->p->nops; k++) free(r->ws[k]);
    free(r->ws);
    free(r->ws_bytes);
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        free(r->table[q]);
        free(r->scratch[q]);
    }
    if (r->q.plan) qrun_free(&r->q);
    free(r);
}

void rt_memory_report(const Rt *r, FILE *out) {
    char a[32], b[32];
    for (int k = 0; k < PLAN_NARENAS; k++) {
        if (!r->p->arenas[k].size && !r->arena_bytes[k]) continue;
        fprintf(out, "  arena %-6s %12llu bytes (%s) allocated; the plan says %llu (%s)%s\n", plan_arena_names[k],
                (unsigned long long)r->arena_bytes[k], plan_bytes_str(r->arena_bytes[k], a, sizeof a),
                (unsigned long long)r->p->arenas[k].size, plan_bytes_str(r->p->arenas[k].size, b, sizeof b),
                r->arena_bytes[k] == r->p->arenas[k].size ? "" : "  MISMATCH");
    }
    if (r->io_open) {
        char m[256];
        fprintf(out, "  nvme staging: %s\n", rtio_mode(&r->io, m, sizeof m));
    }
    fprintf(out, "  cpu adam: %s\n", adam_isa_name(adam_isa_resolve(ADAM_ISA_AUTO)));
    if (r->cu) {
        rtc_memory_report(r, out);
        return;
    }
    fprintf(out, "  host kernel workspace %llu bytes (%s), scratch %llu bytes x %d queues\n",
            (unsigned long long)r->ws_total, plan_bytes_str(r->ws_total, a, sizeof a),
            (unsigned long long)r->scratch_bytes, PLAN_NQUEUES);
}

/* m without a leading "rank R: " of this rank (the caller names it). */
static const char *unranked(const Rt *r, const char *m) {
    char own[32];
    int ol = snprintf(own, sizeof own, "rank %d: ", r->c->rank);
    return strncmp(m, own, (size_t)ol) ? m : m + ol;
}

int rt_step(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, int accum, RtStepStats *st,
            char *err, size_t n) {
    const Plan *p = r->p;
    double t0 = qrun_now(&r->q);
    memset(r->bytes, 0, sizeof r->bytes);
    r->loss_sum = 0;
    r->loss_n = 0;
    r->skip = false;
    r->grad_norm = 0;
    if (accum < 1) accum = 1;
    r->loss_grad = (float)(1.0 / ((double)accum * r->c->size));
    uint32_t ob = p->opt_begin <= p->ninstrs ? p->opt_begin : p->ninstrs;
    if (r->cu) rtc_step_begin(r);
    for (int a = 0; a <= accum; a++) {
        /* ranges: one per micro-batch, then the optimizer */
        uint32_t b0 = a < accum ? 0 : ob, b1 = a < accum ? ob : p->ninstrs;
        if (a < accum) {
            r->tokens = tokens[a];
            r->targets = targets[a];
        }
        if (qrun_range(&r->q, b0, b1)) {
            if (r->cu) rtc_abort(r); /* before anything waits on the GPU */
            return rt_fail(err, n, "rank %d, step %lld: %s", r->c->rank, (long long)r->step + 1, unranked(r, r->q.err));
        }
        /* Under CUDA the range has been enqueued, not run: wait for it (and
         * collect its losses and error words) before the next reuses buffers. */
        char cerr[512];
        if (r->cu && rtc_range_end(r, b0, b1, cerr, sizeof cerr)) {
            rtc_abort(r);
            return rt_fail(err, n, "rank %d, step %lld: %s", r->c->rank, (long long)r->step + 1, unranked(r, cerr));
        }
    }
    double loss[2] = {r->loss_sum, (double)r->loss_n};
    if (comm_allreduce_sum_f64(r->c, loss, 2)) return comm_err(r, err, n);
    if (r->skip && p->train.dtype != DT_F16)
        return rt_fail(err, n, "step %lld: the gradient norm is not finite: training diverged", (long long)r->step + 1);
    if (r->skip) {
        r->loss_scale /= 2;
        r->good_steps = 0;
    } else {
        r->step++;
        if (p->train.dtype == DT_F16 && ++r->good_steps >= 1000) {
            r->loss_scale *= 2;
            r->good_steps = 0;
        }
    }
    if (st) {
        memset(st, 0, sizeof *st);
        st->loss = loss[1] > 0 ? loss[0] / loss[1] : NAN;
        st->seconds = qrun_now(&r->q) - t0;
        st->grad_norm = r->grad_norm;
        st->skipped = r->skip;
        memcpy(st->bytes, r->bytes, sizeof st->bytes);
    }
    return 0;
}

uint64_t rt_plan_hash(const Rt *r) {
    const Plan *p = r->p;
    uint64_t h = 14695981039346656037ull;
#define MIX(v)                                       \
    do {                                             \
        uint64_t x_ = (uint64_t)(v);                 \
        h = (h ^ x_) * 1099511628211ull;             \
    } while (0)
    MIX(p->ranks);
    for (uint32_t s = 0; s < p->nshards; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        h ^= plan_fnv1a64(t->name, strlen(t->name));
        MIX(t->dtype);
        MIX(sh->ntiles);
        MIX(sh->tile_shard);
        MIX(sh->partitioned);
    }
#undef MIX
    return h;
}

static bool ckpt_class(int cls) { return cls == TC_PARAM || cls == TC_MASTER || cls == TC_MOMENTUM || cls == TC_VARIANCE; }

/* Every rank learns whether any rank failed, so no rank waits forever. */
static int agree(Rt *r, int rc) {
    int64_t v = rc != 0;
    if (comm_allreduce_max_i64(r->c, &v)) return -1;
    return v ? -1 : 0;
}

int rt_checkpoint_save(Rt *r, const char *dir, const char *state_json, char *err, size_t n) {
    const Plan *p = r->p;
    CkptEntry *e = calloc(p->nshards ? p->nshards : 1, sizeof *e);
    int ne = 0, rc = 0;
    if (!e) rc = rt_fail(err, n, "out of memory");
    for (uint32_t s = 0; s < p->nshards && !rc; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (!ckpt_class(t->cls)) continue;
        void *d = malloc(sh->bytes ? sh->bytes : 1);
        if (!d) { rc = rt_fail(err, n, "out of memory"); break; }
        e[ne] = (CkptEntry){t->name, t->dtype, sh->bytes, d};
        ne++;
        rc = rt_home_read(r, sh->buffer, 0, d, sh->bytes, err, n);
    }
    uint64_t h = rt_plan_hash(r);
    int64_t next = r->step;
    if (!rc) rc = ckpt_write_shard(dir, next, r->c->rank, r->c->size, h, e, ne, err, n);
    for (int i = 0; i < ne; i++) free(e[i].data);
    free(e);
    if (agree(r, rc)) return rc ? rc : rt_fail(err, n, "another rank failed to write its checkpoint shard; the previous checkpoint is kept");
    rc = 0;
    if (r->c->rank == 0) {
        char st[1024];
        snprintf(st, sizeof st, "{\"step\": %lld, \"loss_scale\": %.17g, \"good_steps\": %d, \"run\": %s}",
                 (long long)r->step, r->loss_scale, r->good_steps, state_json && *state_json ? state_json : "{}");
        rc = ckpt_write_manifest(dir, next, r->c->size, h, p->model_name, st, err, n);
        if (!rc) rc = ckpt_prune(dir, r->c->size, h, next, 2, err, n);
    }
    if (agree(r, rc)) return rc ? rc : rt_fail(err, n, "rank 0 failed to write the checkpoint manifest; the previous checkpoint is kept");
    return 0;
}

int rt_checkpoint_load(Rt *r, const char *dir, int64_t step, bool *mine, char *err, size_t n) {
    const Plan *p = r->p;
    CkptEntry *e = calloc(p->nshards ? p->nshards : 1, sizeof *e);
    int *buf = calloc(p->nshards ? p->nshards : 1, sizeof *buf);
    int ne = 0, rc = 0;
    int64_t why = 0; /* 1: the checkpoint does not load, 2: something else failed */
    if (!e || !buf) rc = rt_fail(err, n, "out of memory");
    for (uint32_t s = 0; s < p->nshards && !rc; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (!ckpt_class(t->cls)) continue;
        void *d = malloc(sh->bytes ? sh->bytes : 1);
        if (!d) { rc = rt_fail(err, n, "out of memory"); break; }
        e[ne] = (CkptEntry){t->name, t->dtype, sh->bytes, d};
        buf[ne++] = sh->buffer;
    }
    if (rc) why = 2;
    else if ((rc = ckpt_read_shard(dir, step, r->c->rank, r->c->size, rt_plan_hash(r), e, ne, err, n))) why = 1;
    for (int i = 0; i < ne && !rc; i++)
        if ((rc = rt_home_write(r, buf[i], 0, e[i].data, e[i].bytes, err, n))) why = 2;
    for (int i = 0; i < ne; i++) free(e[i].data);
    free(e);
    free(buf);
    if (!rc) {
        char *st = ckpt_read_state(dir, step, err, n);
        if (!st) {
            rc = -1;
            why = 1;
        } else {
            const char *q = strstr(st, "\"step\":");
            const char *ls = strstr(st, "\"loss_scale\":");
            const char *gs = strstr(st, "\"good_steps\":");
            r->step = q ? atoll(q + 7) : step;
            if (ls) r->loss_scale = atof(ls + 13);
            if (gs) r->good_steps = atoi(gs + 13);
            free(st);
        }
    }
    if (mine) *mine = rc != 0;
    int64_t all = why;
    if (comm_allreduce_max_i64(r->c, &all)) {
        if (mine) *mine = true;
        rt_fail(err, n, "%s", comm_last_error(r->c));
        return RT_LOAD_FAILED;
    }
    if (all && !rc)
        rt_fail(err, n, "another rank %s step %" PRId64, all == 1 ? "found a defect in its shard of" : "failed loading", step);
    return all == 0 ? 0 : all == 1 ? RT_LOAD_DEFECT : RT_LOAD_FAILED;
}

int rt_export_safetensors(Rt *r, const char *path, char *err, size_t n) {
    const Plan *p = r->p;
    int np = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) np += p->tensors[t].cls == TC_PARAM && p->tensors[t].shard >= 0;
    StTensor *st = calloc((size_t)np + 1, sizeof *st);
    int k = 0, rc = st ? 0 : rt_fail(err, n, "out of memory");
    for (uint32_t t = 0; t < p->ntensors && !rc; t++) {
        const PlanTensor *pt = &p->tensors[t];
        if (pt->cls != TC_PARAM || pt->shard < 0) continue;
        const PlanShard *sh = &p->shards[pt->shard];
        size_t es = rt_dsz(pt->dtype);
        uint8_t *mine = malloc(sh->bytes ? sh->bytes : 1);
        uint8_t *all = malloc((size_t)sh->tile_shard * es * (size_t)r->c->size + 1);
        uint8_t *full = r->c->rank == 0 ? malloc((size_t)pt->numel * es + 1) : NULL;
        if (!mine || !all || (r->c->rank == 0 && !full)) rc = rt_fail(err, n, "out of memory exporting %s", pt->name);
        if (!rc) rc = rt_home_read(r, sh->buffer, 0, mine, sh->bytes, err, n);
        for (int32_t u = 0; u < sh->ntiles && !rc; u++) {
            size_t sb = (size_t)sh->tile_shard * es;
            if (sh->partitioned) {
                if (comm_allgather(r->c, mine + (size_t)u * sb, all, sb)) { rc = comm_err(r, err, n); break; }
            } else {
                memcpy(all, mine + (size_t)u * sb, sb);
            }
            if (full) memcpy(full + (size_t)u * (size_t)sh->tile_elems * es, all, (size_t)sh->tile_elems * es);
        }
        free(mine);
        free(all);
        st[k] = (StTensor){pt->name, pt->dtype, pt->rank, {0}, full, (uint64_t)pt->numel * es};
        memcpy(st[k].dims, pt->dims, sizeof st[k].dims);
        k++;
    }
    if (!rc && r->c->rank == 0) rc = safetensors_write(path, st, k, p->model_name, err, n);
    for (int i = 0; i < k; i++) free((void *)st[i].data);
    free(st);
    if (agree(r, rc)) return rc ? rc : rt_fail(err, n, "the export failed on another rank");
    return 0;
}

int rt_write_trace(const Rt *r, FILE *out) {
    const Plan *p = r->p;
    fprintf(out, "{\"traceEvents\":[\n");
    for (int q = 0; q < PLAN_NQUEUES; q++)
        fprintf(out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n", r->c->rank, q,
                plan_queue_names[q]);
    bool first = true;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *in = &p->instrs[i];
        const QrunTiming *t = &r->q.timing[i];
        if (t->end <= 0) continue;
        const char *what = in->op == PI_KERNEL && in->arg >= 0 && (uint32_t)in->arg < p->nops
                               ? prim_names[r->p->ops[in->arg].prim]
                               : (in->arg >= 0 && (uint32_t)in->arg < p->ntensors ? p->tensors[in->arg].name : "");
        fprintf(out, "%s{\"name\":\"%s %s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"i\":%u}}",
                first ? "" : ",\n", plan_opcode_names[in->op], what, plan_queue_names[in->queue < PLAN_NQUEUES ? in->queue : 0],
                r->c->rank, in->queue, t->start * 1e6, (t->end - t->start) * 1e6, i);
        first = false;
    }
    fprintf(out, "\n],\"displayTimeUnit\":\"ms\"}\n");
    return ferror(out) ? -1 : 0;
}
