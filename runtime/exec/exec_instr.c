/* exec_instr: one instruction on the host (rt_host_instr): the host
 * backend runs every instruction through it, the CUDA backend the ones
 * that stay on the host (NVMe, CPU Adam, host-memory accumulation and
 * collectives). Kernels run here through the host kernels, tiled ones
 * included; collectives, the optimizer and NVMe transfers are
 * exec_comm.c's, exec_optim.c's and exec_nvme.c's. */
#include "exec_impl.h"
#include <inttypes.h>
#include <string.h>
#include "half.h"
#include "hostk.h"
#include "hostk_threads.h"
#include "rtio.h"

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

/* Tile t of n of moe_expert, its [E, O, I] weight cut by expert: the weight
 * operand (and dw's) holds experts [t E/n, (t+1) E/n). The forward writes
 * the places routed to them (tile 0 clears y first: the buffer is new); the
 * backward adds their share of dx, tile after tile in order. */
static int run_tiled_moe(Rt *r, const PlanOp *o, const PlanOp *fo, void **tb, int tile, int ntiles, void *ws, char *err,
                         size_t n) {
    const Plan *g = r->p;
    int x = fo->in[0], idx = fo->in[1], wt = fo->in[2], y = fo->out[0];
    const PlanTensor *W = &g->tensors[wt];
    int64_t per = W->dims[0] / ntiles;
    HkTensor w = view(r, wt, tb[wt]), xs = view(r, x, tb[x]), is = view(r, idx, tb[idx]);
    w.dims[0] = per;
    int rc;
    if (o->kind != OP_BWD) {
        HkTensor ys = view(r, y, tb[y]);
        if (tile == 0) memset(tb[y], 0, (size_t)g->tensors[y].numel * rt_dsz(g->tensors[y].dtype));
        rc = hk_moe_expert_fwd_tile(&xs, &is, &w, tile * per, W->dims[0], &ys, ws);
    } else {
        int dy = o->in[fo->nin + fo->nout], dx = o->out[0], dw = o->out[2];
        HkTensor dyt = view(r, dy, tb[dy]), dxt = dx >= 0 ? view(r, dx, tb[dx]) : (HkTensor){0};
        HkTensor dwt = dw >= 0 ? view(r, wt, tb[dw]) : (HkTensor){0};
        dwt.dims[0] = per;
        rc = hk_moe_expert_bwd_tile(&xs, &is, &w, tile * per, W->dims[0], &dyt, dx >= 0 ? &dxt : NULL, dw >= 0 ? &dwt : NULL, ws);
    }
    return rc ? errorf(err, n, "moe_expert tile %d of %d: %s", tile, ntiles, hk_strerror(rc)) : 0;
}

/* Tile t of n of an op whose 2-D weight (linear w, matmul b, embedding
 * table) is cut by rows: the weight operand holds only those rows. */
static int run_tiled(Rt *r, const PlanOp *o, const PlanOp *fo, void **tb, int tile, int ntiles, void *ws, int worker,
                     char *err, size_t n) {
    if (fo->prim == PRIM_MOE_EXPERT) return run_tiled_moe(r, o, fo, tb, tile, ntiles, ws, err, n);
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
                if (id[i] < 0 || id[i] >= W->dims[0]) return errorf(err, n, "embedding: id %d outside [0, %" PRId64 ")", id[i], W->dims[0]);
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
    bool tb_flag = fo->prim == PRIM_MATMUL && fo->iattr[IA_MATMUL_TRANSPOSE_B];
    if (fo->prim == PRIM_MATMUL && fo->iattr[IA_MATMUL_TRANSPOSE_A]) return errorf(err, n, "tiled matmul with transpose_a is not supported");
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
        if (!xs.data) return errorf(err, n, "tile scratch too small");
        cols_copy(xs.data, tb[x], xr, xc, r0, rows, xe);
        if (!bwd) {
            ys.data = bump(&sc, (size_t)Y->numel * ye);
            if (!ys.data) return errorf(err, n, "tile scratch too small");
            rc = fo->prim == PRIM_LINEAR ? hk_linear_fwd(&xs, &w, bias >= 0 && tile == 0 ? &bt : NULL, &ys, ws)
                                         : hk_matmul_fwd(&xs, &w, &ys, false, false, ws);
            if (rc) return errorf(err, n, "%s", hk_strerror(rc));
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
            if (dx >= 0 && !dxs.data) return errorf(err, n, "tile scratch too small");
            if (db >= 0 && tile == 0 && tb[db]) dbt = view(r, db, tb[db]);
            rc = fo->prim == PRIM_LINEAR
                     ? hk_linear_bwd(&xs, &w, &dyt, dx >= 0 ? &dxs : NULL, dw >= 0 ? &dwt : NULL, dbt.data ? &dbt : NULL, ws)
                     : hk_matmul_bwd(&xs, &w, &dyt, dx >= 0 ? &dxs : NULL, dw >= 0 ? &dwt : NULL, false, false, ws);
            if (rc) return errorf(err, n, "%s", hk_strerror(rc));
            if (dx >= 0) cols_add_back(tb[dx], g->tensors[dx].dtype, dxs.data, xr, xc, r0, rows);
        }
        return 0;
    }
    /* matmul(a, b, transpose_b): b is [N, K] and its rows are output columns [r0, r0+rows). */
    ys.dims[ys.rank - 1] = rows;
    if (!bwd) {
        ys.data = bump(&sc, (size_t)(yr * rows) * ye);
        if (!ys.data) return errorf(err, n, "tile scratch too small");
        HkTensor xa = view(r, x, tb[x]);
        rc = hk_matmul_fwd(&xa, &w, &ys, false, true, ws);
        if (rc) return errorf(err, n, "%s", hk_strerror(rc));
        cols_put_back(tb[y], ys.data, yr, yc, r0, rows, ye);
        return 0;
    }
    int dy = o->in[fo->nin + fo->nout];
    HkTensor dys = ys;
    dys.data = bump(&sc, (size_t)(yr * rows) * ye);
    if (!dys.data) return errorf(err, n, "tile scratch too small");
    cols_copy(dys.data, tb[dy], yr, yc, r0, rows, ye);
    int dx = o->out[0], dw = o->out[1];
    HkTensor xa = view(r, x, tb[x]);
    HkTensor dxt = dx >= 0 ? view(r, dx, tb[dx]) : (HkTensor){0};
    HkTensor dwt = view(r, wt, dw >= 0 ? tb[dw] : NULL);
    dwt.dims[0] = rows;
    rc = hk_matmul_bwd(&xa, &w, &dys, dx >= 0 ? &dxt : NULL, dw >= 0 ? &dwt : NULL, false, true, ws);
    if (rc) return errorf(err, n, "%s", hk_strerror(rc));
    return 0;
}

static int exec_kernel(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const Plan *p = r->p;
    if (in->arg < 0 || (uint32_t)in->arg >= p->nops) return errorf(err, n, "kernel of op %d outside the plan", in->arg);
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
        if (!d) return errorf(err, n, "loss_grad without its output");
        rt_elem_set(d, r->p->tensors[o->out[0]].dtype, 0, (double)r->loss_grad * r->loss_scale);
        return 0;
    }
    int f = o->kind == OP_FWD ? in->arg : o->fwd;
    if (f < 0 || (uint32_t)f >= r->p->nops) return errorf(err, n, "op %d names no forward op", in->arg);
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
        return errorf(err, n, "%s %s (op %d%s%s): %s", op_kind_names[o->kind], prim_names[o->prim], in->arg,
                   o->scope && *o->scope ? " in " : "", o->scope ? o->scope : "", hk_strerror(rc));
    }
    if (o->kind == OP_FWD && o->out[0] == p->loss && tb[p->loss] && in->tile == in->ntiles - 1) {
        r->loss_sum += rt_elem_get(tb[p->loss], r->p->tensors[p->loss].dtype, 0);
        r->loss_n++;
    }
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
        if (!d || !src) return errorf(err, n, "input %d has no data", in->arg);
        memcpy(d, src, o->bytes);
        r->bytes[in->queue] += o->bytes;
        return 0;
    }
    case PI_NVME_READ:
    case PI_NVME_WRITE: {
        RtioReq q;
        rt_nvme_req(r, in, &q);
        r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes;
        return q.write ? rtio_write(&r->io, q.off, q.buf, q.bytes, err, n) : rtio_read(&r->io, q.off, q.buf, q.bytes, err, n);
    }
    case PI_H2D:
    case PI_D2H: {
        const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
        if (!sp || !dp) return errorf(err, n, "%s operands must be in memory", plan_opcode_names[in->op]);
        memcpy(dp, sp, s->bytes < d->bytes ? s->bytes : d->bytes);
        r->bytes[in->queue] += s->bytes;
        return 0;
    }
    case PI_ALLGATHER: r->bytes[in->queue] += rt_opnd(r, in, 1)->bytes; return rt_allgather(r, in, worker, err, n);
    case PI_REDUCE_SCATTER: r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes; return rt_reduce_scatter(r, in, worker, err, n);
    case PI_ALLREDUCE: r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes; return rt_allreduce(r, in, worker, err, n);
    case PI_KERNEL: return exec_kernel(r, in, worker, err, n);
    case PI_ZERO: {
        const PlanOperand *o = rt_opnd(r, in, 0);
        uint8_t *d = rt_opnd_ptr(r, o);
        if (d) { memset(d, 0, o->bytes); return 0; }
        if (o->bytes > r->scratch_bytes) return errorf(err, n, "zero scratch too small");
        memset(r->scratch[worker], 0, o->bytes);
        return rtio_write(&r->io, rt_nvme_off(r, o), r->scratch[worker], o->bytes, err, n);
    }
    case PI_ACCUM: {
        const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
        if (!sp || !dp) return errorf(err, n, "accum operands must be in memory");
        int dt = p->tensors[in->arg].dtype;
        add_into(dp, dt, sp, (int64_t)(s->bytes / rt_dsz(dt)));
        return 0;
    }
    case PI_GRAD_NORM: return rt_grad_norm(r, in, worker, err, n);
    case PI_CPU_ADAM:
    case PI_GPU_ADAM: return rt_adam(r, in, err, n);
    case PI_STEP_END: return 0;
    default: return errorf(err, n, "instruction %u: unknown opcode %u", i, in->op);
    }
}
