/* hostk_linxent: linear_cross_entropy, the output projection and the
 * cross-entropy loss of cross_entropy(matmul(x, w; transpose_b), targets)
 * computed `chunk` rows at a time, so that the logits [R, V] are never held
 * whole: a chunk's logits live in the workspace while its row logsumexps,
 * its loss and its logits' gradient are taken.
 *
 * The loss is the last op of the forward and its gradient is linear in
 * the incoming dloss, so the forward also computes the gradients for
 * dloss = 1 while each chunk's logits are at hand (dx's rows and dw, in
 * fp32 in the workspace; as Liger's fused linear cross-entropy does) and
 * the backward only scales them by dloss into dx and dw: the three GEMMs
 * of the unfused pair, none again. A forward-only run (evaluation) pays
 * the two gradient GEMMs too.
 *
 * Every step is the unfused kernels' own (hk_sgemm, the logits rounded to
 * the activation dtype, hk_rows_ce_lse, hk_rows_ce_bwd on a chunk of
 * zeroed gradient), so that the result equals matmul + cross_entropy: to
 * the bit for the loss where the GEMM's rows do not depend on how many
 * there are, to fp32 rounding for the gradients (dw summed over the chunks,
 * the dloss scaling applied after the GEMMs). */
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"
#include "hostk_rows.h"
#include "hostk_threads.h"

typedef struct LxShape {
    int64_t R, D, V, C; /* rows, model width, vocabulary, rows per chunk */
    bool tb;
} LxShape;

static int lx_shape(const HkTensor *x, const HkTensor *w, const HkTensor *targets, bool tb, int64_t chunk, LxShape *s) {
    if (!hk_present(x) || !hk_present(w) || !hk_present(targets)) return HK_ERR_ARG;
    if (!hk_is_float(x) || !hk_is_float(w) || targets->dtype != DT_I32) return HK_ERR_DTYPE;
    if (x->rank < 1 || w->rank != 2 || targets->rank != x->rank - 1) return HK_ERR_SHAPE;
    for (int i = 0; i < targets->rank; i++)
        if (targets->dims[i] != x->dims[i]) return HK_ERR_SHAPE;
    if (chunk < 0) return HK_ERR_ATTR;
    s->tb = tb;
    s->D = x->dims[x->rank - 1];
    s->R = hk_numel(targets);
    s->V = tb ? w->dims[0] : w->dims[1];
    if ((tb ? w->dims[1] : w->dims[0]) != s->D) return HK_ERR_SHAPE;
    s->C = chunk == 0 || chunk > s->R ? s->R : chunk;
    return HK_OK;
}

static int lx_targets(const HkTensor *targets, int64_t V) {
    const int32_t *tg = targets->data;
    for (int64_t i = 0; i < hk_numel(targets); i++)
        if (tg[i] >= V) return HK_ERR_INDEX; /* negative: untrained */
    return HK_OK;
}

static size_t f32_bytes(int64_t n) { return hk_align((size_t)n * sizeof(float)); }
static size_t dt_bytes(DType dt, int64_t n) { return hk_align((size_t)n * hk_dtype_size(dt)); }

/* Layout: the row logsumexps [R], dx and dw for dloss = 1 in fp32 (the
 * forward's, read by the backward), then w in fp32 (when it is not), a
 * chunk of x in fp32, a chunk of logits in fp32 and in the activation
 * dtype, a chunk of their gradient in the activation dtype and in fp32
 * (each fp32 copy only where the tensor is not f32 itself). */
size_t hk_linear_cross_entropy_workspace_bytes(const HkTensor *x, const HkTensor *w, const HkTensor *targets,
                                               int64_t chunk, bool tb) {
    LxShape s;
    if (lx_shape(x, w, targets, tb, chunk, &s)) return 0;
    DType dt = x->dtype;
    bool f = dt == DT_F32;
    size_t cv = f32_bytes(s.C * s.V), cd = f32_bytes(s.C * s.D);
    return f32_bytes(s.R) + f32_bytes(s.R * s.D) + f32_bytes(s.V * s.D) + (w->dtype == DT_F32 ? 0 : f32_bytes(s.V * s.D)) +
           (f ? 0 : cd) + cv + (f ? 0 : dt_bytes(dt, s.C * s.V)) + dt_bytes(dt, s.C * s.V) + (f ? 0 : cv);
}

typedef struct LxWork {
    float *lse, *dXu, *dWu, *W, *X, *L32, *dL32;
    HkTensor L, dL; /* a chunk of logits and of their gradient, [C, V] in the activation dtype */
} LxWork;

static char *take_bytes(HkWs *w, size_t n) {
    char *p = w->base + w->used;
    w->used += hk_align(n);
    return p;
}

static void lx_carve(const LxShape *s, const HkTensor *x, const HkTensor *w, void *ws, LxWork *k) {
    HkWs b = {ws, 0};
    DType dt = x->dtype;
    bool f = dt == DT_F32;
    int64_t cv[2] = {s->C, s->V};
    k->lse = hk_ws_take(&b, s->R);
    k->dXu = hk_ws_take(&b, s->R * s->D);
    k->dWu = hk_ws_take(&b, s->V * s->D);
    k->W = w->dtype == DT_F32 ? (float *)w->data : hk_ws_take(&b, s->V * s->D);
    k->X = f ? NULL : hk_ws_take(&b, s->C * s->D);
    k->L32 = hk_ws_take(&b, s->C * s->V);
    k->L = hk_tensor(f ? (void *)k->L32 : take_bytes(&b, (size_t)(s->C * s->V) * hk_dtype_size(dt)), dt, 2, cv);
    k->dL = hk_tensor(take_bytes(&b, (size_t)(s->C * s->V) * hk_dtype_size(dt)), dt, 2, cv);
    k->dL32 = f ? (float *)k->dL.data : hk_ws_take(&b, s->C * s->V);
}

/* Rows [r0, r0 + n) of x as fp32 (x's own storage when f32). */
static const float *x_rows(const HkTensor *x, const LxShape *s, LxWork *k, int64_t r0, int64_t n) {
    const char *p = (const char *)x->data + (size_t)(r0 * s->D) * hk_dtype_size(x->dtype);
    if (x->dtype == DT_F32) return (const float *)p;
    hk_rows_cast(p, x->dtype, k->X, DT_F32, n * s->D);
    return k->X;
}

/* The logits of rows [r0, r0 + n) into k->L ([n, V], rounded to the
 * activation dtype as the matmul's output would be); the f32 view in k->L32. */
static void chunk_logits(const LxShape *s, const float *X, LxWork *k, int64_t n) {
    hk_sgemm(false, s->tb, n, s->V, s->D, X, k->W, 0.0f, k->L32);
    k->L.dims[0] = n;
    if (k->L.dtype != DT_F32) hk_rows_cast(k->L32, DT_F32, k->L.data, k->L.dtype, n * s->V);
}

int hk_linear_cross_entropy_fwd(const HkTensor *x, const HkTensor *w, const HkTensor *targets, HkTensor *loss,
                                int64_t chunk, bool tb, void *ws) {
    LxShape s;
    int rc = lx_shape(x, w, targets, tb, chunk, &s);
    if (rc) return rc;
    if (!hk_present(loss)) return HK_ERR_ARG;
    if (!hk_is_float(loss)) return HK_ERR_DTYPE;
    if (hk_numel(loss) != 1) return HK_ERR_SHAPE;
    if ((rc = lx_targets(targets, s.V))) return rc;
    if (!ws) return HK_ERR_WORKSPACE;
    LxWork k;
    lx_carve(&s, x, w, ws, &k);
    if (w->dtype != DT_F32) hk_load_f32(w, k.W);
    const int32_t *tg = targets->data;
    /* the gradients' scale for dloss = 1, as cross_entropy's backward takes dloss / R */
    float dl = s.R ? (float)(1.0 / (double)s.R) : 0.0f;
    /* the sum in row order, as cross_entropy's, so that chunking does not change it */
    double total = 0;
    for (int64_t r0 = 0; r0 < s.R; r0 += s.C) {
        int64_t n = s.R - r0 < s.C ? s.R - r0 : s.C;
        const float *X = x_rows(x, &s, &k, r0, n);
        chunk_logits(&s, X, &k, n);
        hk_rows_ce_lse(&k.L, k.lse + r0);
        for (int64_t r = 0; r < n; r++)
            if (tg[r0 + r] >= 0) total += (double)k.lse[r0 + r] - hk_ld(k.L.data, k.L.dtype, r * s.V + tg[r0 + r]);
        /* the chunk's logits' gradient, into zeros as the unfused one is */
        k.dL.dims[0] = n;
        memset(k.dL.data, 0, (size_t)(n * s.V) * hk_dtype_size(k.dL.dtype));
        hk_rows_ce_bwd(&k.L, tg + r0, k.lse + r0, dl, &k.dL);
        if (k.dL.dtype != DT_F32) hk_rows_cast(k.dL.data, k.dL.dtype, k.dL32, DT_F32, n * s.V);
        /* dx's rows = dL op(w)^T (op(w) is [D, V]); dw (+)= op-transposed products */
        hk_sgemm(false, !s.tb, n, s.D, s.V, k.dL32, k.W, 0.0f, k.dXu + r0 * s.D);
        float beta = r0 ? 1.0f : 0.0f;
        if (s.tb) hk_sgemm(true, false, s.V, s.D, n, k.dL32, X, beta, k.dWu); /* [V, D] = dL^T x */
        else hk_sgemm(true, false, s.D, s.V, n, X, k.dL32, beta, k.dWu);      /* [D, V] = x^T dL */
    }
    if (s.R == 0) memset(k.dWu, 0, (size_t)(s.V * s.D) * sizeof(float));
    hk_st(loss->data, loss->dtype, 0, s.R ? (float)(total / (double)s.R) : 0.0f);
    return HK_OK;
}

static int grad_of(const HkTensor *g, const HkTensor *t) {
    if (!hk_present(g)) return HK_OK;
    if (!hk_is_float(g)) return HK_ERR_DTYPE;
    return hk_numel(g) == hk_numel(t) ? HK_OK : HK_ERR_SHAPE;
}

/* g += scale * u, g of any float dtype (rounded once), in blocks of
 * ADD_BLOCK elements over the team. */
enum { ADD_BLOCK = 65536 };
typedef struct AddJob {
    HkTensor *g;
    const float *u;
    float scale;
    int64_t n;
} AddJob;

static void add_unit(void *ctx, int64_t k) {
    const AddJob *j = ctx;
    int64_t i0 = k * ADD_BLOCK, i1 = i0 + ADD_BLOCK < j->n ? i0 + ADD_BLOCK : j->n;
    if (j->g->dtype == DT_F32) {
        float *p = j->g->data;
        for (int64_t i = i0; i < i1; i++) p[i] += j->scale * j->u[i];
        return;
    }
    for (int64_t i = i0; i < i1; i++) hk_st(j->g->data, j->g->dtype, i, hk_ld(j->g->data, j->g->dtype, i) + j->scale * j->u[i]);
}

static void add_scaled(HkTensor *g, const float *u, float scale) {
    AddJob j = {g, u, scale, hk_numel(g)};
    hk_parallel(hk_team((double)j.n), (j.n + ADD_BLOCK - 1) / ADD_BLOCK, add_unit, &j);
}

int hk_linear_cross_entropy_bwd(const HkTensor *x, const HkTensor *w, const HkTensor *targets, const HkTensor *dloss,
                                HkTensor *dx, HkTensor *dw, int64_t chunk, bool tb, void *ws) {
    LxShape s;
    int rc = lx_shape(x, w, targets, tb, chunk, &s);
    if (rc) return rc;
    if (!hk_present(dloss)) return HK_ERR_ARG;
    if ((rc = grad_of(dx, x)) || (rc = grad_of(dw, w))) return rc;
    bool wx = hk_present(dx), ww = hk_present(dw);
    if (!wx && !ww) return HK_OK;
    if (!ws) return HK_ERR_WORKSPACE;
    LxWork k;
    lx_carve(&s, x, w, ws, &k);
    float scale = hk_get(dloss, 0);
    if (wx) add_scaled(dx, k.dXu, scale);
    if (ww) add_scaled(dw, k.dWu, scale);
    return HK_OK;
}

/* ---- family (runtime/plan/prim.def) ---- */

static int64_t lx_chunk(const HkCall *c) { return hk_attr_i(c->iattr, IA_LINEAR_CROSS_ENTROPY_CHUNK); }
static bool lx_tb(const HkCall *c) { return hk_attr_flag(c->iattr, IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B); }
static size_t fam_linxent_ws(const HkCall *c) {
    return c->b && c->c ? hk_linear_cross_entropy_workspace_bytes(c->a, c->b, c->c, lx_chunk(c), lx_tb(c)) : 0;
}
static int fam_linxent_fwd(const HkCall *c) {
    return hk_linear_cross_entropy_fwd(c->a, c->b, c->c, &c->out[0], lx_chunk(c), lx_tb(c), c->ws);
}
static int fam_linxent_bwd(const HkCall *c) {
    return hk_linear_cross_entropy_bwd(c->a, c->b, c->c, c->dy, c->da, c->db, lx_chunk(c), lx_tb(c), c->ws);
}
const HkFamily hk_family_linxent = {fam_linxent_fwd, fam_linxent_bwd, fam_linxent_ws};
