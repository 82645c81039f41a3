/* hostk_run: the generic entries (per primitive, per plan op) and the
 * optimizer-side helpers. */
#include <math.h>
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"
#include "hostk_rows.h"
#include "hostk_threads.h"
#include "hostk_vec.h"

static const HkTensor *arg(const HkTensor *t, int n, int i) { return i < n && t && t[i].data ? &t[i] : NULL; }
static HkTensor *garg(HkTensor *t, int n, int i) { return i < n && t && t[i].data ? &t[i] : NULL; }

static double attr_eps(const double *f) { return f && f[0] != 0 ? f[0] : 1e-5; }
static int64_t attr_i(const int64_t *a, int i) { return a ? a[i] : 0; }
static int64_t attr_kv(const int64_t *a) { return attr_i(a, 1) ? attr_i(a, 1) : attr_i(a, 0); }

size_t hk_workspace_bytes(PrimId p, const HkTensor *in, int nin, const HkTensor *out, int nout,
                          const int64_t *iattr) {
    const HkTensor *x = arg(in, nin, 0), *w = arg(in, nin, 1), *y = arg(out, nout, 0);
    if (!x) return 0;
    switch (p) {
    case PRIM_LINEAR:
    case PRIM_MATMUL: return w && y ? hk_matmul_workspace_bytes(x, w, y) : 0;
    case PRIM_LAYERNORM: return hk_layernorm_workspace_bytes(x);
    case PRIM_RMSNORM: {
        HkTensor v = hk_heads_view(x, attr_i(iattr, 0));
        return hk_rmsnorm_workspace_bytes(&v);
    }
    case PRIM_ATTENTION: return hk_attention_workspace_bytes(x, attr_i(iattr, 0));
    case PRIM_CROSS_ENTROPY: return hk_cross_entropy_workspace_bytes(x);
    default: return 0;
    }
}

static int ws_ok(PrimId p, const HkTensor *in, int nin, const HkTensor *out, int nout, const int64_t *iattr,
                 const void *ws, size_t ws_bytes) {
    size_t need = hk_workspace_bytes(p, in, nin, out, nout, iattr);
    return need && (!ws || ws_bytes < need) ? HK_ERR_WORKSPACE : HK_OK;
}

static int run_fwd(PrimId p, const HkTensor *in, int nin, HkTensor *out, int nout, const int64_t *iattr,
                   const double *fattr, void *ws, size_t ws_bytes) {
    if ((unsigned)p >= PRIM_COUNT) return HK_ERR_PRIM;
    if (nin < 0 || nout < 1 || (p != PRIM_SPLIT && nout != 1) || !out) return HK_ERR_ARG;
    int rc = ws_ok(p, in, nin, out, nout, iattr, ws, ws_bytes);
    if (rc) return rc;
    const HkTensor *a = arg(in, nin, 0), *b = arg(in, nin, 1), *c = arg(in, nin, 2);
    HkTensor *y = &out[0];
    switch (p) {
    case PRIM_EMBEDDING: return hk_embedding_fwd(a, b, y);
    case PRIM_LINEAR: return hk_linear_fwd(a, b, c, y, ws);
    case PRIM_MATMUL: return hk_matmul_fwd(a, b, y, attr_i(iattr, 0) != 0, attr_i(iattr, 1) != 0, ws);
    case PRIM_ADD: return hk_add_fwd(a, b, y);
    case PRIM_MUL: return hk_mul_fwd(a, b, y);
    case PRIM_LAYERNORM: return hk_layernorm_fwd(a, b, c, y, attr_eps(fattr), ws);
    case PRIM_RMSNORM: {
        if (!a) return HK_ERR_ARG;
        int64_t h = attr_i(iattr, 0);
        HkTensor xv = hk_heads_view(a, h), yv = hk_heads_view(y, h);
        return hk_rmsnorm_fwd(&xv, b, &yv, attr_eps(fattr), ws);
    }
    case PRIM_GELU: return hk_gelu_fwd(a, y);
    case PRIM_SILU: return hk_silu_fwd(a, y);
    case PRIM_ROPE: {
        HkRope r = hk_rope_attrs(iattr, fattr);
        return hk_rope_fwd(a, y, &r);
    }
    case PRIM_ATTENTION: return hk_attention_fwd(a, b, c, y, attr_i(iattr, 0), attr_kv(iattr), ws);
    case PRIM_SPLIT:
        if (attr_i(iattr, 0) && attr_i(iattr, 0) != nout) return HK_ERR_ATTR;
        return hk_split_fwd(a, out, nout);
    case PRIM_CROSS_ENTROPY: return hk_cross_entropy_fwd(a, b, y, ws);
    case PRIM_ARANGE: return hk_arange_fwd(y, attr_i(iattr, 0));
    default: return HK_ERR_PRIM;
    }
}

static int run_bwd(PrimId p, const HkTensor *in, int nin, const HkTensor *out, const HkTensor *dout, int nout,
                   HkTensor *din, const int64_t *iattr, const double *fattr, void *ws, size_t ws_bytes) {
    if ((unsigned)p >= PRIM_COUNT) return HK_ERR_PRIM;
    if (nin < 0 || nout < 1 || (p != PRIM_SPLIT && nout != 1) || !dout || !out) return HK_ERR_ARG;
    int rc = ws_ok(p, in, nin, out, nout, iattr, ws, ws_bytes);
    if (rc) return rc;
    const HkTensor *a = arg(in, nin, 0), *b = arg(in, nin, 1), *c = arg(in, nin, 2), *dy = arg(dout, nout, 0);
    HkTensor *da = garg(din, nin, 0), *db = garg(din, nin, 1), *dc = garg(din, nin, 2);
    if (!dy && p != PRIM_SPLIT) return HK_ERR_ARG;
    switch (p) {
    case PRIM_EMBEDDING: return hk_embedding_bwd(b, dy, da);
    case PRIM_LINEAR: return hk_linear_bwd(a, b, dy, da, db, dc, ws);
    case PRIM_MATMUL: return hk_matmul_bwd(a, b, dy, da, db, attr_i(iattr, 0) != 0, attr_i(iattr, 1) != 0, ws);
    case PRIM_ADD: return hk_add_bwd(a, b, dy, da, db);
    case PRIM_MUL: return hk_mul_bwd(a, b, dy, da, db);
    case PRIM_LAYERNORM: return hk_layernorm_bwd(a, b, dy, da, db, dc, ws);
    case PRIM_RMSNORM: {
        if (!a) return HK_ERR_ARG;
        int64_t h = attr_i(iattr, 0);
        HkTensor xv = hk_heads_view(a, h), dyv = hk_heads_view(dy, h), dav;
        if (da) dav = hk_heads_view(da, h);
        return hk_rmsnorm_bwd(&xv, b, &dyv, da ? &dav : NULL, db, ws);
    }
    case PRIM_GELU: return hk_gelu_bwd(a, dy, da);
    case PRIM_SILU: return hk_silu_bwd(a, dy, da);
    case PRIM_ROPE: {
        HkRope r = hk_rope_attrs(iattr, fattr);
        return hk_rope_bwd(dy, da, &r);
    }
    case PRIM_ATTENTION: return hk_attention_bwd(a, b, c, dy, da, db, dc, attr_i(iattr, 0), attr_kv(iattr), ws);
    case PRIM_SPLIT: return hk_split_bwd(dout, nout, da);
    case PRIM_CROSS_ENTROPY: return hk_cross_entropy_bwd(a, b, dy, da, ws);
    default: return HK_ERR_PRIM; /* arange has no backward */
    }
}

/* The executors' entries: the calling thread (a fresh queue thread, say)
 * takes the rank's team size, and one kernel of the rank runs at a time
 * (hostk_threads.h). */
int hk_run_fwd(PrimId p, const HkTensor *in, int nin, HkTensor *out, int nout, const int64_t *iattr,
               const double *fattr, void *ws, size_t ws_bytes) {
    hk_threads_adopt();
    hk_team_enter();
    int rc = run_fwd(p, in, nin, out, nout, iattr, fattr, ws, ws_bytes);
    hk_team_leave();
    return rc;
}

int hk_run_bwd(PrimId p, const HkTensor *in, int nin, const HkTensor *out, const HkTensor *dout, int nout,
               HkTensor *din, const int64_t *iattr, const double *fattr, void *ws, size_t ws_bytes) {
    hk_threads_adopt();
    hk_team_enter();
    int rc = run_bwd(p, in, nin, out, dout, nout, din, iattr, fattr, ws, ws_bytes);
    hk_team_leave();
    return rc;
}

/* ---- plan ops ---- */

HkTensor hk_plan_tensor(const Plan *p, int t, void *const *buf) {
    HkTensor z;
    memset(&z, 0, sizeof z);
    if (!p || t < 0 || (uint32_t)t >= p->ntensors) return z;
    const PlanTensor *pt = &p->tensors[t];
    return hk_tensor(buf ? buf[t] : NULL, (DType)pt->dtype, pt->rank, pt->dims);
}

static int collect(const Plan *p, const int32_t *ids, int n, void *const *buf, HkTensor *dst) {
    if (n < 0 || n > PLAN_MAX_IN) return HK_ERR_ARG;
    for (int i = 0; i < n; i++) dst[i] = hk_plan_tensor(p, ids[i], buf);
    return HK_OK;
}

size_t hk_op_workspace_bytes(const Plan *p, int k) {
    if (!p || k < 0 || (uint32_t)k >= p->nops) return 0;
    const PlanOp *o = &p->ops[k];
    HkTensor in[PLAN_MAX_IN], out[PLAN_MAX_OUT];
    if (o->nout > PLAN_MAX_OUT || collect(p, o->in, o->nin, NULL, in) || collect(p, o->out, o->nout, NULL, out))
        return 0;
    /* shapes only: mark present tensors with a dummy non-NULL pointer */
    static char present;
    for (int i = 0; i < o->nin; i++)
        if (o->in[i] >= 0) in[i].data = &present;
    for (int i = 0; i < o->nout; i++)
        if (o->out[i] >= 0) out[i].data = &present;
    return hk_workspace_bytes((PrimId)o->prim, in, o->nin, out, o->nout, o->iattr);
}

int hk_op_forward(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes) {
    if (!p || !o || !buf) return HK_ERR_ARG;
    if (o->kind != OP_FWD && o->kind != OP_RECOMPUTE) return HK_ERR_PRIM;
    HkTensor in[PLAN_MAX_IN], out[PLAN_MAX_OUT];
    if (o->nout > PLAN_MAX_OUT || collect(p, o->in, o->nin, buf, in) || collect(p, o->out, o->nout, buf, out))
        return HK_ERR_ARG;
    return hk_run_fwd((PrimId)o->prim, in, o->nin, out, o->nout, o->iattr, o->fattr, ws, ws_bytes);
}

int hk_op_backward(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes) {
    if (!p || !o || !buf) return HK_ERR_ARG;
    if (o->kind != OP_BWD) return HK_ERR_PRIM;
    int nfin = o->nfin, nout = (o->nin - nfin) / 2;
    if (nfin < 0 || nout < 1 || nfin + 2 * nout != o->nin || nfin > PLAN_MAX_OUT || o->nout > PLAN_MAX_OUT)
        return HK_ERR_ARG;
    HkTensor in[PLAN_MAX_IN], din[PLAN_MAX_OUT];
    if (collect(p, o->in, o->nin, buf, in)) return HK_ERR_ARG;
    for (int i = 0; i < nfin; i++) din[i] = hk_plan_tensor(p, i < o->nout ? o->out[i] : -1, buf);
    return hk_run_bwd((PrimId)o->prim, in, nfin, in + nfin, in + nfin + nout, nout, din, o->iattr, o->fattr, ws, ws_bytes);
}

/* ---- optimizer-side helpers ---- */

int hk_adamw(HkTensor *param, const HkTensor *grad, float *master, float *m, float *v, const HkAdam *a) {
    if (!hk_present(param) || !hk_present(grad) || !m || !v || !a) return HK_ERR_ARG;
    if (!hk_is_float(param) || !hk_is_float(grad) || (!master && param->dtype != DT_F32)) return HK_ERR_DTYPE;
    if (hk_numel(param) != hk_numel(grad)) return HK_ERR_SHAPE;
    if (a->step < 1) return HK_ERR_ATTR;
    int64_t n = hk_numel(param);
    float *w = master ? master : (float *)param->data;
    double b1 = a->beta1, b2 = a->beta2;
    double bc1 = 1 - pow(b1, (double)a->step), bc2 = 1 - pow(b2, (double)a->step);
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float g = (float)(hk_ld(grad->data, grad->dtype, i) * a->grad_scale);
        m[i] = (float)(b1 * m[i] + (1 - b1) * g);
        v[i] = (float)(b2 * v[i] + (1 - b2) * (double)g * g);
        double upd = (m[i] / bc1) / (sqrt(v[i] / bc2) + a->eps) + a->weight_decay * w[i];
        w[i] = (float)(w[i] - a->lr * upd);
        if (master) hk_st(param->data, param->dtype, i, w[i]);
    }
    return HK_OK;
}

/* Fixed chunks (each summed by the vector layer), then the chunks in order:
 * the result does not depend on the thread count. */
typedef struct SumSq {
    const HkTensor *t;
    int64_t n;
    double *part;
} SumSq;

static void sumsq_unit(void *ctx, int64_t c) {
    const SumSq *j = ctx;
    enum { CHUNKS = 64 };
    int64_t lo = j->n * c / CHUNKS, hi = j->n * (c + 1) / CHUNKS;
    j->part[c] = hk_vec()->sumsq((const char *)j->t->data + (size_t)lo * hk_dtype_size(j->t->dtype), j->t->dtype, hi - lo);
}

double hk_sum_squares(const HkTensor *t) {
    if (!hk_present(t) || !hk_is_float(t)) return 0;
    enum { CHUNKS = 64 };
    double part[CHUNKS];
    SumSq j = {t, hk_numel(t), part};
    hk_parallel(hk_team((double)j.n * 0.5), CHUNKS, sumsq_unit, &j);
    double s = 0;
    for (int c = 0; c < CHUNKS; c++) s += part[c];
    return s;
}

bool hk_all_finite(const HkTensor *t) {
    if (!hk_present(t) || !hk_is_float(t)) return true;
    int64_t n = hk_numel(t);
    int bad = 0;
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static) reduction(| : bad)
    for (int64_t i = 0; i < n; i++) bad |= !isfinite(hk_ld(t->data, t->dtype, i));
    return !bad;
}

int hk_scale(HkTensor *t, double s) {
    if (!hk_present(t)) return HK_ERR_ARG;
    if (!hk_is_float(t)) return HK_ERR_DTYPE;
    int64_t n = hk_numel(t);
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) hk_st(t->data, t->dtype, i, (float)(hk_ld(t->data, t->dtype, i) * s));
    return HK_OK;
}

int hk_cast(const HkTensor *src, HkTensor *dst) {
    if (!hk_present(src) || !hk_present(dst)) return HK_ERR_ARG;
    if (!hk_dtype_size(src->dtype) || !hk_dtype_size(dst->dtype)) return HK_ERR_DTYPE;
    if (hk_numel(src) != hk_numel(dst)) return HK_ERR_SHAPE;
    int64_t n = hk_numel(src);
    if (src->dtype == dst->dtype) {
        memmove(dst->data, src->data, (size_t)n * hk_dtype_size(src->dtype));
        return HK_OK;
    }
    if (src->dtype == DT_I32 || dst->dtype == DT_I32) {
        for (int64_t i = 0; i < n; i++) hk_set(dst, i, hk_get(src, i));
        return HK_OK;
    }
    hk_rows_cast(src->data, src->dtype, dst->data, dst->dtype, n);
    return HK_OK;
}

void hk_zero(HkTensor *t) {
    if (hk_present(t)) memset(t->data, 0, (size_t)hk_numel(t) * hk_dtype_size(t->dtype));
}
