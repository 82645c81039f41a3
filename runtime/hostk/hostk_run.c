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

/* The primitives' families and output counts, from runtime/plan/prim.def. */
static const HkFamily *const families[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = &hk_family_##family,
#include "prim.def"
#undef PRIM
};
static const int prim_nout[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = nout,
#include "prim.def"
#undef PRIM
};

/* The call's operands; out is the forward outputs (written in forward). */
static HkCall make_call(PrimId p, const HkTensor *in, int nin, const HkTensor *out, int nout, const int64_t *iattr,
                        const double *fattr, void *ws) {
    HkCall c;
    memset(&c, 0, sizeof c);
    c.prim = p;
    c.in = in;
    c.nin = nin;
    c.a = arg(in, nin, 0);
    c.b = arg(in, nin, 1);
    c.c = arg(in, nin, 2);
    c.nout = nout;
    c.y = arg(out, nout, 0);
    c.iattr = iattr;
    c.fattr = fattr;
    c.ws = ws;
    return c;
}

size_t hk_workspace_bytes(PrimId p, const HkTensor *in, int nin, const HkTensor *out, int nout,
                          const int64_t *iattr) {
    if ((unsigned)p >= PRIM_COUNT || !families[p]->ws) return 0;
    HkCall c = make_call(p, in, nin, out, nout, iattr, NULL, NULL);
    return c.a ? families[p]->ws(&c) : 0;
}

static int ws_ok(PrimId p, const HkTensor *in, int nin, const HkTensor *out, int nout, const int64_t *iattr,
                 const void *ws, size_t ws_bytes) {
    size_t need = hk_workspace_bytes(p, in, nin, out, nout, iattr);
    return need && (!ws || ws_bytes < need) ? HK_ERR_WORKSPACE : HK_OK;
}

/* A primitive of variable outputs (split) takes any number; the rest one. */
static bool nout_ok(PrimId p, int nout) { return nout >= 1 && (prim_nout[p] < 0 || nout == prim_nout[p]); }

/* A packed micro-batch's sample starts and shape (hostk.h), seg NULL: none. */
typedef struct Packed {
    const int32_t *seg;
    int64_t T, tokens;
} Packed;

/* An op's list attributes (PlanOp.table); NULL for the per-primitive entries. */
typedef struct Table {
    const double *v;
    int64_t n;
} Table;

static int run_fwd(PrimId p, const HkTensor *in, int nin, HkTensor *out, int nout, const int64_t *iattr,
                   const double *fattr, void *ws, size_t ws_bytes, const Packed *pk, const Table *tab) {
    if ((unsigned)p >= PRIM_COUNT) return HK_ERR_PRIM;
    if (nin < 0 || !nout_ok(p, nout) || !out) return HK_ERR_ARG;
    int rc = ws_ok(p, in, nin, out, nout, iattr, ws, ws_bytes);
    if (rc) return rc;
    HkCall c = make_call(p, in, nin, out, nout, iattr, fattr, ws);
    c.out = out;
    if (pk) c.seg = pk->seg, c.seg_T = pk->T, c.seg_tokens = pk->tokens;
    if (tab) c.table = tab->v, c.ntable = tab->n;
    return families[p]->fwd(&c);
}

static int run_bwd(PrimId p, const HkTensor *in, int nin, const HkTensor *out, const HkTensor *dout, int nout,
                   HkTensor *din, const int64_t *iattr, const double *fattr, void *ws, size_t ws_bytes,
                   const Packed *pk, const Table *tab) {
    if ((unsigned)p >= PRIM_COUNT) return HK_ERR_PRIM;
    if (nin < 0 || !nout_ok(p, nout) || !dout || !out) return HK_ERR_ARG;
    int rc = ws_ok(p, in, nin, out, nout, iattr, ws, ws_bytes);
    if (rc) return rc;
    HkCall c = make_call(p, in, nin, out, nout, iattr, fattr, ws);
    c.dout = dout;
    if (pk) c.seg = pk->seg, c.seg_T = pk->T, c.seg_tokens = pk->tokens;
    if (tab) c.table = tab->v, c.ntable = tab->n;
    c.dy = arg(dout, nout, 0);
    c.da = garg(din, nin, 0);
    c.db = garg(din, nin, 1);
    c.dc = garg(din, nin, 2);
    c.din = din;
    if (!c.dy && prim_nout[p] >= 0) return HK_ERR_ARG;
    return families[p]->bwd ? families[p]->bwd(&c) : HK_ERR_PRIM; /* arange has no backward */
}

/* The executors' entries: the calling thread (a fresh queue thread, say)
 * takes the rank's team size, and one kernel of the rank runs at a time
 * (hostk_threads.h). */
int hk_run_fwd(PrimId p, const HkTensor *in, int nin, HkTensor *out, int nout, const int64_t *iattr,
               const double *fattr, void *ws, size_t ws_bytes) {
    hk_threads_adopt();
    hk_team_enter();
    int rc = run_fwd(p, in, nin, out, nout, iattr, fattr, ws, ws_bytes, NULL, NULL);
    hk_team_leave();
    return rc;
}

int hk_run_bwd(PrimId p, const HkTensor *in, int nin, const HkTensor *out, const HkTensor *dout, int nout,
               HkTensor *din, const int64_t *iattr, const double *fattr, void *ws, size_t ws_bytes) {
    hk_threads_adopt();
    hk_team_enter();
    int rc = run_bwd(p, in, nin, out, dout, nout, din, iattr, fattr, ws, ws_bytes, NULL, NULL);
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
    return hk_op_forward_packed(p, o, buf, ws, ws_bytes, NULL);
}

int hk_op_forward_packed(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes, const int32_t *seg) {
    if (!p || !o || !buf) return HK_ERR_ARG;
    if (o->kind != OP_FWD && o->kind != OP_RECOMPUTE) return HK_ERR_PRIM;
    HkTensor in[PLAN_MAX_IN], out[PLAN_MAX_OUT];
    if (o->nout > PLAN_MAX_OUT || collect(p, o->in, o->nin, buf, in) || collect(p, o->out, o->nout, buf, out))
        return HK_ERR_ARG;
    Packed pk = {seg, 0, 0};
    if (seg && !plan_batch_shape(p, &pk.tokens, &pk.T)) return HK_ERR_ARG;
    pk.tokens *= pk.T;
    hk_threads_adopt();
    hk_team_enter();
    Table tab = {o->table, o->ntable};
    int rc = run_fwd((PrimId)o->prim, in, o->nin, out, o->nout, o->iattr, o->fattr, ws, ws_bytes, seg ? &pk : NULL, &tab);
    hk_team_leave();
    return rc;
}

int hk_op_backward(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes) {
    return hk_op_backward_packed(p, o, buf, ws, ws_bytes, NULL);
}

int hk_op_backward_packed(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes,
                          const int32_t *seg) {
    if (!p || !o || !buf) return HK_ERR_ARG;
    if (o->kind != OP_BWD) return HK_ERR_PRIM;
    int nfin = o->nfin, nout = (o->nin - nfin) / 2;
    if (nfin < 0 || nout < 1 || nfin + 2 * nout != o->nin || nfin > PLAN_MAX_OUT || o->nout > PLAN_MAX_OUT)
        return HK_ERR_ARG;
    HkTensor in[PLAN_MAX_IN], din[PLAN_MAX_OUT];
    if (collect(p, o->in, o->nin, buf, in)) return HK_ERR_ARG;
    for (int i = 0; i < nfin; i++) din[i] = hk_plan_tensor(p, i < o->nout ? o->out[i] : -1, buf);
    Packed pk = {seg, 0, 0};
    if (seg && !plan_batch_shape(p, &pk.tokens, &pk.T)) return HK_ERR_ARG;
    pk.tokens *= pk.T;
    hk_threads_adopt();
    hk_team_enter();
    Table tab = {o->table, o->ntable};
    int rc = run_bwd((PrimId)o->prim, in, nfin, in + nfin, in + nfin + nout, nout, din, o->iattr, o->fattr, ws, ws_bytes,
                     seg ? &pk : NULL, &tab);
    hk_team_leave();
    return rc;
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
