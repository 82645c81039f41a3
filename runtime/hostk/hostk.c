/* hostk: fp32 views of a tensor in the workspace and the GEMM-based
 * kernels (linear, matmul). The tensor helpers are in hostk_tensor.c, the
 * other primitives in hostk_nn.c and hostk_attn.c, the generic entries in
 * hostk_run.c. */
#include "hostk.h"
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "hostk_impl.h"
#include "hostk_rows.h"
#include "hostk_threads.h"

/* ---- fp32 views ---- */

/* Bytes of an fp32 copy of t, 0 when t is already f32 (or absent). */
size_t hk_f32_copy_bytes(const HkTensor *t) {
    if (!t || !t->data || t->dtype == DT_F32) return 0;
    return hk_align((size_t)hk_numel(t) * sizeof(float));
}

void hk_load_f32(const HkTensor *t, float *dst) {
    if (dtype_is_quant(t->dtype)) hk_dequant_f32(t, dst); /* a frozen weight stored quantized */
    else hk_rows_cast(t->data, t->dtype, dst, DT_F32, hk_numel(t));
}

void hk_store_f32(HkTensor *t, const float *src) { hk_rows_cast(src, DT_F32, t->data, t->dtype, hk_numel(t)); }

/* An fp32 view of an input: its own data when f32, else a converted copy. */
const float *hk_view_in(const HkTensor *t, HkWs *w) {
    if (t->dtype == DT_F32) return (const float *)t->data;
    float *p = hk_ws_take(w, hk_numel(t));
    hk_load_f32(t, p);
    return p;
}

/* An fp32 view of an output; `load` brings in the current values (accumulation). */
float *hk_view_out(HkTensor *t, HkWs *w, bool load) {
    if (t->dtype == DT_F32) return (float *)t->data;
    float *p = hk_ws_take(w, hk_numel(t));
    if (load) hk_load_f32(t, p);
    return p;
}

void hk_view_done(HkTensor *t, const float *p) {
    if (t->dtype != DT_F32) hk_store_f32(t, p);
}

/* ---- GEMM kernels ---- */

/* GEMMs run as panels on the rank's team (hostk_rows.c). */
#define sgemm hk_sgemm

/* The shapes of a matmul, checked: nb batches of op(A_s) [M,K] x op(B_s) [K,N];
 * b is shared over batches (bstride 0) or batched with a. */
typedef struct MmShape {
    int64_t nb, M, N, K, astride, bstride, ystride;
} MmShape;

static int mm_shape(const HkTensor *a, const HkTensor *b, const HkTensor *y, bool ta, bool tb, MmShape *s) {
    if (!hk_present(a) || !hk_present(b) || !hk_present(y)) return HK_ERR_ARG;
    /* b may be a weight stored quantized: read dequantized (hk_load_f32) */
    if (!hk_is_float(a) || !(hk_is_float(b) || dtype_is_quant(b->dtype)) || !hk_is_float(y)) return HK_ERR_DTYPE;
    if (a->rank < 1 || b->rank < 2 || (ta && a->rank < 2)) return HK_ERR_SHAPE;
    int64_t bk = tb ? b->dims[b->rank - 1] : b->dims[b->rank - 2];
    int64_t bn = tb ? b->dims[b->rank - 2] : b->dims[b->rank - 1];
    s->K = bk;
    s->N = bn;
    if (b->rank == 2) {
        s->bstride = 0;
        if (!ta) {
            if (a->dims[a->rank - 1] != bk) return HK_ERR_SHAPE;
            s->nb = 1;
            s->M = 1;
            for (int i = 0; i < a->rank - 1; i++) s->M *= a->dims[i];
        } else {
            if (a->dims[a->rank - 2] != bk) return HK_ERR_SHAPE;
            s->M = a->dims[a->rank - 1];
            s->nb = 1;
            for (int i = 0; i < a->rank - 2; i++) s->nb *= a->dims[i];
        }
    } else {
        if (a->rank != b->rank) return HK_ERR_SHAPE;
        for (int i = 0; i < a->rank - 2; i++)
            if (a->dims[i] != b->dims[i]) return HK_ERR_SHAPE;
        int64_t ak = ta ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
        if (ak != bk) return HK_ERR_SHAPE;
        s->M = ta ? a->dims[a->rank - 1] : a->dims[a->rank - 2];
        s->nb = 1;
        for (int i = 0; i < a->rank - 2; i++) s->nb *= a->dims[i];
        s->bstride = bk * bn;
    }
    s->astride = s->M * s->K;
    s->ystride = s->M * s->N;
    /* y: a's dims with the last (or, transposed, the last two) replaced: [S..., M, N] or [S..., N]. */
    if (y->rank != a->rank || y->dims[y->rank - 1] != s->N) return HK_ERR_SHAPE;
    for (int i = 0; i < a->rank - 1; i++) {
        int64_t want = (ta && i == a->rank - 2) ? s->M : a->dims[i];
        if (y->dims[i] != want) return HK_ERR_SHAPE;
    }
    return HK_OK;
}

size_t hk_matmul_workspace_bytes(const HkTensor *a, const HkTensor *b, const HkTensor *y) {
    /* backward: fp32 copies of a, b, dy, then of one gradient at a time (da, then db) */
    size_t ga = hk_f32_copy_bytes(a), gb = hk_f32_copy_bytes(b);
    return ga + gb + hk_f32_copy_bytes(y) + (ga > gb ? ga : gb);
}

size_t hk_linear_workspace_bytes(const HkTensor *x, const HkTensor *w, const HkTensor *y) {
    return hk_matmul_workspace_bytes(x, w, y);
}

static void mm_fwd(const MmShape *s, const float *A, const float *B, float *Y, bool ta, bool tb) {
    for (int64_t i = 0; i < s->nb; i++)
        sgemm(ta, tb, s->M, s->N, s->K, A + i * s->astride, B + i * s->bstride, 0.0f, Y + i * s->ystride);
}

/* dA += dY op(B)^T (per batch), dB += op(A)^T dY (summed over batches when shared). */
static void mm_bwd(const MmShape *s, const float *A, const float *B, const float *dY, float *dA, float *dB, bool ta,
                   bool tb) {
    for (int64_t i = 0; i < s->nb; i++) {
        const float *Ai = A + i * s->astride, *Bi = B + i * s->bstride, *dYi = dY + i * s->ystride;
        if (dA) {
            float *dAi = dA + i * s->astride;
            if (!ta) sgemm(false, !tb, s->M, s->K, s->N, dYi, Bi, 1.0f, dAi); /* [M,K] */
            else sgemm(tb, true, s->K, s->M, s->N, Bi, dYi, 1.0f, dAi);       /* [K,M] = op(B) dY^T */
        }
        if (dB) {
            float *dBi = dB + i * s->bstride;
            if (!tb) sgemm(!ta, false, s->K, s->N, s->M, Ai, dYi, 1.0f, dBi); /* [K,N] = op(A)^T dY */
            else sgemm(true, ta, s->N, s->K, s->M, dYi, Ai, 1.0f, dBi);       /* [N,K] = dY^T op(A) */
        }
    }
}

int hk_matmul_fwd(const HkTensor *a, const HkTensor *b, HkTensor *y, bool ta, bool tb, void *ws) {
    MmShape s;
    int rc = mm_shape(a, b, y, ta, tb, &s);
    if (rc) return rc;
    if (hk_matmul_workspace_bytes(a, b, y) && !ws) return HK_ERR_WORKSPACE;
    HkWs w = {ws, 0};
    const float *A = hk_view_in(a, &w), *B = hk_view_in(b, &w);
    float *Y = hk_view_out(y, &w, false);
    mm_fwd(&s, A, B, Y, ta, tb);
    hk_view_done(y, Y);
    return HK_OK;
}

static int grad_like(const HkTensor *g, const HkTensor *t) {
    if (!hk_present(g)) return HK_OK;
    if (!hk_is_float(g)) return HK_ERR_DTYPE;
    if (hk_numel(g) != hk_numel(t)) return HK_ERR_SHAPE;
    return HK_OK;
}

int hk_matmul_bwd(const HkTensor *a, const HkTensor *b, const HkTensor *dy, HkTensor *da, HkTensor *db, bool ta,
                  bool tb, void *ws) {
    MmShape s;
    int rc = mm_shape(a, b, dy, ta, tb, &s);
    if (rc) return rc;
    if ((rc = grad_like(da, a)) || (rc = grad_like(db, b))) return rc;
    if (hk_matmul_workspace_bytes(a, b, dy) && !ws) return HK_ERR_WORKSPACE;
    bool wa = hk_present(da), wb = hk_present(db);
    if (!wa && !wb) return HK_OK;
    HkWs w = {ws, 0};
    const float *A = hk_view_in(a, &w), *B = hk_view_in(b, &w), *dY = hk_view_in(dy, &w);
    /* one gradient after the other, so that da and db may be one buffer (matmul(x, x)) */
    size_t mark = w.used;
    if (wa) {
        float *dA = hk_view_out(da, &w, true);
        mm_bwd(&s, A, B, dY, dA, NULL, ta, tb);
        hk_view_done(da, dA);
    }
    w.used = mark;
    if (wb) {
        float *dB = hk_view_out(db, &w, true);
        mm_bwd(&s, A, B, dY, NULL, dB, ta, tb);
        hk_view_done(db, dB);
    }
    return HK_OK;
}

static int linear_check(const HkTensor *x, const HkTensor *w, const HkTensor *y) {
    if (!hk_present(x) || !hk_present(w) || !hk_present(y)) return HK_ERR_ARG;
    if (w->rank != 2 || x->rank < 1 || y->rank != x->rank) return HK_ERR_SHAPE;
    for (int i = 0; i < x->rank - 1; i++)
        if (x->dims[i] != y->dims[i]) return HK_ERR_SHAPE;
    return HK_OK;
}

int hk_linear_fwd(const HkTensor *x, const HkTensor *w, const HkTensor *b, HkTensor *y, void *ws) {
    int rc = linear_check(x, w, y);
    if (rc) return rc;
    MmShape s;
    if ((rc = mm_shape(x, w, y, false, false, &s))) return rc;
    if (hk_present(b)) {
        if (!hk_is_float(b)) return HK_ERR_DTYPE;
        if (hk_numel(b) != s.N || b->rank != 1) return HK_ERR_SHAPE;
    }
    if (hk_linear_workspace_bytes(x, w, y) && !ws) return HK_ERR_WORKSPACE;
    HkWs wk = {ws, 0};
    const float *X = hk_view_in(x, &wk), *W = hk_view_in(w, &wk);
    float *Y = hk_view_out(y, &wk, false);
    mm_fwd(&s, X, W, Y, false, false);
    if (hk_present(b)) hk_rows_bias(Y, s.M, s.N, b);
    hk_view_done(y, Y);
    return HK_OK;
}

/* Column sums of dy [R,N] accumulated into g [N] (double accumulation, one column block per thread). */
void hk_colsum_acc(const float *dy, int64_t R, int64_t N, HkTensor *g) { hk_rows_colsum(dy, R, N, g); }

int hk_linear_bwd(const HkTensor *x, const HkTensor *w, const HkTensor *dy, HkTensor *dx, HkTensor *dw,
                  HkTensor *db, void *ws) {
    int rc = linear_check(x, w, dy);
    if (rc) return rc;
    MmShape s;
    if ((rc = mm_shape(x, w, dy, false, false, &s))) return rc;
    if (hk_present(db)) {
        if (!hk_is_float(db)) return HK_ERR_DTYPE;
        if (hk_numel(db) != s.N) return HK_ERR_SHAPE;
    }
    if ((rc = grad_like(dx, x)) || (rc = grad_like(dw, w))) return rc;
    if (hk_linear_workspace_bytes(x, w, dy) && !ws) return HK_ERR_WORKSPACE;
    HkWs wk = {ws, 0};
    bool wx = hk_present(dx), ww = hk_present(dw);
    const float *dY = hk_view_in(dy, &wk);
    if (hk_present(db)) hk_colsum_acc(dY, s.M, s.N, db);
    if (!wx && !ww) return HK_OK;
    const float *X = hk_view_in(x, &wk), *W = hk_view_in(w, &wk);
    size_t mark = wk.used;
    if (wx) {
        float *dX = hk_view_out(dx, &wk, true);
        mm_bwd(&s, X, W, dY, dX, NULL, false, false);
        hk_view_done(dx, dX);
    }
    wk.used = mark;
    if (ww) {
        float *dW = hk_view_out(dw, &wk, true);
        mm_bwd(&s, X, W, dY, NULL, dW, false, false);
        hk_view_done(dw, dW);
    }
    return HK_OK;
}

/* ---- families (runtime/plan/prim.def) ---- */

static size_t fam_gemm_ws(const HkCall *c) { return c->b && c->y ? hk_matmul_workspace_bytes(c->a, c->b, c->y) : 0; }
static int fam_linear_fwd(const HkCall *c) { return hk_linear_fwd(c->a, c->b, c->c, &c->out[0], c->ws); }
static int fam_linear_bwd(const HkCall *c) { return hk_linear_bwd(c->a, c->b, c->dy, c->da, c->db, c->dc, c->ws); }
const HkFamily hk_family_linear = {fam_linear_fwd, fam_linear_bwd, fam_gemm_ws};

static int fam_matmul_fwd(const HkCall *c) {
    return hk_matmul_fwd(c->a, c->b, &c->out[0], hk_attr_flag(c->iattr, IA_MATMUL_TRANSPOSE_A), hk_attr_flag(c->iattr, IA_MATMUL_TRANSPOSE_B), c->ws);
}
static int fam_matmul_bwd(const HkCall *c) {
    return hk_matmul_bwd(c->a, c->b, c->dy, c->da, c->db, hk_attr_flag(c->iattr, IA_MATMUL_TRANSPOSE_A), hk_attr_flag(c->iattr, IA_MATMUL_TRANSPOSE_B), c->ws);
}
const HkFamily hk_family_matmul = {fam_matmul_fwd, fam_matmul_bwd, fam_gemm_ws};
