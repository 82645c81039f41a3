/* hostk_nn: the non-GEMM primitives (and attention, whose GEMMs are per head). */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"

static int64_t rows_of(const HkTensor *t) {
    int64_t r = 1;
    for (int i = 0; i < t->rank - 1; i++) r *= t->dims[i];
    return r;
}

static int64_t last_dim(const HkTensor *t) { return t->rank ? t->dims[t->rank - 1] : 1; }

static bool same_shape(const HkTensor *a, const HkTensor *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

/* A wanted gradient must be a float tensor of its input's shape. */
static int check_grad(const HkTensor *g, const HkTensor *t) {
    if (!hk_present(g)) return HK_OK;
    if (!hk_is_float(g)) return HK_ERR_DTYPE;
    return same_shape(g, t) ? HK_OK : HK_ERR_SHAPE;
}

static int check_float(const HkTensor *t) {
    if (!hk_present(t)) return HK_ERR_ARG;
    return hk_is_float(t) ? HK_OK : HK_ERR_DTYPE;
}

#define LD(t, i) hk_ld((t)->data, (t)->dtype, (i))
#define ST(t, i, v) hk_st((t)->data, (t)->dtype, (i), (v))
#define ACC(t, i, v) hk_st((t)->data, (t)->dtype, (i), hk_ld((t)->data, (t)->dtype, (i)) + (v))

/* ---- embedding ---- */

static int embedding_check(const HkTensor *table, const HkTensor *ids, const HkTensor *y) {
    if (!hk_present(table) || !hk_present(ids) || !hk_present(y)) return HK_ERR_ARG;
    if (!hk_is_float(table) || ids->dtype != DT_I32 || !hk_is_float(y)) return HK_ERR_DTYPE;
    if (table->rank != 2 || y->rank != ids->rank + 1 || y->dims[y->rank - 1] != table->dims[1]) return HK_ERR_SHAPE;
    for (int i = 0; i < ids->rank; i++)
        if (ids->dims[i] != y->dims[i]) return HK_ERR_SHAPE;
    const int32_t *id = ids->data;
    int64_t n = hk_numel(ids);
    for (int64_t i = 0; i < n; i++)
        if (id[i] < 0 || id[i] >= table->dims[0]) return HK_ERR_INDEX;
    return HK_OK;
}

int hk_embedding_fwd(const HkTensor *table, const HkTensor *ids, HkTensor *y) {
    int rc = embedding_check(table, ids, y);
    if (rc) return rc;
    int64_t n = hk_numel(ids), D = table->dims[1];
    const int32_t *id = ids->data;
#pragma omp parallel for if (n * D > HK_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < D; j++) ST(y, i * D + j, LD(table, (int64_t)id[i] * D + j));
    return HK_OK;
}

int hk_embedding_bwd(const HkTensor *ids, const HkTensor *dy, HkTensor *dtable) {
    if (!hk_present(dtable)) return HK_OK;
    int rc = embedding_check(dtable, ids, dy);
    if (rc) return rc;
    int64_t n = hk_numel(ids), D = dtable->dims[1];
    const int32_t *id = ids->data;
    /* ids repeat: each thread owns a block of columns, so no two threads add to one element */
    int64_t nblk = (D + 63) / 64;
#pragma omp parallel for if (n * D > HK_PAR_MIN) schedule(static)
    for (int64_t bk = 0; bk < nblk; bk++) {
        int64_t j0 = bk * 64, j1 = j0 + 64 < D ? j0 + 64 : D;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = j0; j < j1; j++) ACC(dtable, (int64_t)id[i] * D + j, LD(dy, i * D + j));
    }
    return HK_OK;
}

/* ---- add, mul: the smaller operand's shape is a suffix of the larger's ---- */

typedef struct Bcast {
    const HkTensor *big, *small;
    bool a_big;
    int64_t n, ns; /* numel of the big and the small operand */
} Bcast;

static int bcast(const HkTensor *a, const HkTensor *b, const HkTensor *y, Bcast *bc) {
    if (check_float(a) || check_float(b) || check_float(y)) return !hk_present(a) || !hk_present(b) || !hk_present(y) ? HK_ERR_ARG : HK_ERR_DTYPE;
    bc->a_big = a->rank >= b->rank;
    bc->big = bc->a_big ? a : b;
    bc->small = bc->a_big ? b : a;
    int off = bc->big->rank - bc->small->rank;
    for (int i = 0; i < bc->small->rank; i++)
        if (bc->small->dims[i] != bc->big->dims[off + i]) return HK_ERR_SHAPE;
    if (!same_shape(y, bc->big)) return HK_ERR_SHAPE;
    bc->n = hk_numel(bc->big);
    bc->ns = hk_numel(bc->small);
    return HK_OK;
}

static int binary_fwd(const HkTensor *a, const HkTensor *b, HkTensor *y, bool mul) {
    Bcast bc;
    int rc = bcast(a, b, y, &bc);
    if (rc) return rc;
    const HkTensor *B = bc.big, *S = bc.small;
    int64_t n = bc.n, ns = bc.ns;
    if (ns == 0) return HK_OK;
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float x = LD(B, i), s = LD(S, i % ns);
        ST(y, i, mul ? x * s : x + s);
    }
    return HK_OK;
}

int hk_add_fwd(const HkTensor *a, const HkTensor *b, HkTensor *y) { return binary_fwd(a, b, y, false); }
int hk_mul_fwd(const HkTensor *a, const HkTensor *b, HkTensor *y) { return binary_fwd(a, b, y, true); }

/* d big[i] += dy[i] * (mul ? small[i % ns] : 1);
 * d small[j] += sum over rows r of dy[r ns + j] * (mul ? big[r ns + j] : 1). */
static int binary_bwd(const HkTensor *a, const HkTensor *b, const HkTensor *dy, HkTensor *da, HkTensor *db,
                      bool mul) {
    Bcast bc;
    int rc = bcast(a, b, dy, &bc);
    if (rc) return rc;
    if ((rc = check_grad(da, a)) || (rc = check_grad(db, b))) return rc;
    HkTensor *dbig = bc.a_big ? da : db, *dsmall = bc.a_big ? db : da;
    const HkTensor *B = bc.big, *S = bc.small;
    int64_t n = bc.n, ns = bc.ns;
    if (ns == 0) return HK_OK;
    if (hk_present(dbig)) {
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) ACC(dbig, i, mul ? LD(dy, i) * LD(S, i % ns) : LD(dy, i));
    }
    if (hk_present(dsmall)) {
        int64_t R = n / ns, nblk = (ns + 63) / 64;
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
        for (int64_t bk = 0; bk < nblk; bk++) {
            double acc[64] = {0};
            int64_t j0 = bk * 64, j1 = j0 + 64 < ns ? j0 + 64 : ns;
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = j0; j < j1; j++) {
                    float g = LD(dy, r * ns + j);
                    acc[j - j0] += mul ? g * LD(B, r * ns + j) : g;
                }
            for (int64_t j = j0; j < j1; j++) ACC(dsmall, j, (float)acc[j - j0]);
        }
    }
    return HK_OK;
}

int hk_add_bwd(const HkTensor *a, const HkTensor *b, const HkTensor *dy, HkTensor *da, HkTensor *db) {
    return binary_bwd(a, b, dy, da, db, false);
}
int hk_mul_bwd(const HkTensor *a, const HkTensor *b, const HkTensor *dy, HkTensor *da, HkTensor *db) {
    return binary_bwd(a, b, dy, da, db, true);
}

/* ---- layernorm, rmsnorm ---- */

static int norm_check(const HkTensor *x, const HkTensor *g, const HkTensor *b, const HkTensor *y) {
    int rc;
    if ((rc = check_float(x)) || (rc = check_float(y))) return rc;
    if (x->rank < 1 || !same_shape(x, y)) return HK_ERR_SHAPE;
    const HkTensor *gb[2] = {g, b};
    for (int i = 0; i < 2; i++)
        if (hk_present(gb[i])) {
            if (!hk_is_float(gb[i])) return HK_ERR_DTYPE;
            if (gb[i]->rank != 1 || gb[i]->dims[0] != last_dim(x)) return HK_ERR_SHAPE;
        }
    return HK_OK;
}

HkTensor hk_heads_view(const HkTensor *x, int64_t heads) {
    HkTensor v = *x;
    if (heads <= 1 || x->rank < 1 || x->dims[x->rank - 1] % heads) return v; /* the kernels then reject g's size */
    int64_t hd = x->dims[x->rank - 1] / heads;
    v.rank = 2;
    v.dims[0] = hk_numel(x) / (hd ? hd : 1);
    v.dims[1] = hd;
    return v;
}

size_t hk_layernorm_workspace_bytes(const HkTensor *x) { return 2 * hk_align((size_t)rows_of(x) * sizeof(float)); }
size_t hk_rmsnorm_workspace_bytes(const HkTensor *x) { return hk_align((size_t)rows_of(x) * sizeof(float)); }

int hk_layernorm_fwd(const HkTensor *x, const HkTensor *g, const HkTensor *b, HkTensor *y, double eps, void *ws) {
    int rc = norm_check(x, g, b, y);
    if (rc) return rc;
    if (!(eps >= 0)) return HK_ERR_ATTR;
    if (!ws && hk_layernorm_workspace_bytes(x)) return HK_ERR_WORKSPACE;
    int64_t R = rows_of(x), D = last_dim(x);
    HkWs w = {ws, 0};
    float *mean = hk_ws_take(&w, R), *rstd = hk_ws_take(&w, R);
    bool hg = hk_present(g), hb = hk_present(b);
#pragma omp parallel for if (R * D > HK_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < R; r++) {
        double s = 0, ss = 0;
        for (int64_t j = 0; j < D; j++) s += LD(x, r * D + j);
        double mu = D ? s / (double)D : 0;
        for (int64_t j = 0; j < D; j++) {
            double d = LD(x, r * D + j) - mu;
            ss += d * d;
        }
        float m = (float)mu, rs = (float)(1.0 / sqrt((D ? ss / (double)D : 0) + eps));
        mean[r] = m;
        rstd[r] = rs;
        for (int64_t j = 0; j < D; j++) {
            float v = (LD(x, r * D + j) - m) * rs;
            if (hg) v *= LD(g, j);
            if (hb) v += LD(b, j);
            ST(y, r * D + j, v);
        }
    }
    return HK_OK;
}

int hk_layernorm_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *dy, HkTensor *dx, HkTensor *dg,
                     HkTensor *db, void *ws) {
    int rc = norm_check(x, g, NULL, dy);
    if (rc) return rc;
    if ((rc = check_grad(dx, x))) return rc;
    const HkTensor *gd[2] = {dg, db};
    for (int i = 0; i < 2; i++)
        if (hk_present(gd[i])) {
            if (!hk_is_float(gd[i])) return HK_ERR_DTYPE;
            if (hk_numel(gd[i]) != last_dim(x)) return HK_ERR_SHAPE;
        }
    if (!ws && hk_layernorm_workspace_bytes(x)) return HK_ERR_WORKSPACE;
    int64_t R = rows_of(x), D = last_dim(x);
    HkWs w = {ws, 0};
    const float *mean = hk_ws_take(&w, R), *rstd = hk_ws_take(&w, R);
    bool hg = hk_present(g);
    if (hk_present(dx)) {
#pragma omp parallel for if (R * D > HK_PAR_MIN) schedule(static)
        for (int64_t r = 0; r < R; r++) {
            double s1 = 0, s2 = 0;
            float m = mean[r], rs = rstd[r];
            for (int64_t j = 0; j < D; j++) {
                float xh = (LD(x, r * D + j) - m) * rs;
                float dh = LD(dy, r * D + j) * (hg ? LD(g, j) : 1.0f);
                s1 += dh;
                s2 += (double)dh * xh;
            }
            float m1 = (float)(s1 / (double)D), m2 = (float)(s2 / (double)D);
            for (int64_t j = 0; j < D; j++) {
                float xh = (LD(x, r * D + j) - m) * rs;
                float dh = LD(dy, r * D + j) * (hg ? LD(g, j) : 1.0f);
                ACC(dx, r * D + j, rs * (dh - m1 - xh * m2));
            }
        }
    }
    if (hk_present(dg) || hk_present(db)) {
        int64_t nblk = (D + 63) / 64;
#pragma omp parallel for if (R * D > HK_PAR_MIN) schedule(static)
        for (int64_t bk = 0; bk < nblk; bk++) {
            double ag[64] = {0}, ab[64] = {0};
            int64_t j0 = bk * 64, j1 = j0 + 64 < D ? j0 + 64 : D;
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = j0; j < j1; j++) {
                    float d = LD(dy, r * D + j);
                    ag[j - j0] += d * ((LD(x, r * D + j) - mean[r]) * rstd[r]);
                    ab[j - j0] += d;
                }
            for (int64_t j = j0; j < j1; j++) {
                if (hk_present(dg)) ACC(dg, j, (float)ag[j - j0]);
                if (hk_present(db)) ACC(db, j, (float)ab[j - j0]);
            }
        }
    }
    return HK_OK;
}

int hk_rmsnorm_fwd(const HkTensor *x, const HkTensor *g, HkTensor *y, double eps, void *ws) {
    int rc = norm_check(x, g, NULL, y);
    if (rc) return rc;
    if (!(eps >= 0)) return HK_ERR_ATTR;
    if (!ws && hk_rmsnorm_workspace_bytes(x)) return HK_ERR_WORKSPACE;
    int64_t R = rows_of(x), D = last_dim(x);
    HkWs w = {ws, 0};
    float *rstd = hk_ws_take(&w, R);
    bool hg = hk_present(g);
#pragma omp parallel for if (R * D > HK_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t j = 0; j < D; j++) {
            double v = LD(x, r * D + j);
            ss += v * v;
        }
        float rs = (float)(1.0 / sqrt((D ? ss / (double)D : 0) + eps));
        rstd[r] = rs;
        for (int64_t j = 0; j < D; j++) ST(y, r * D + j, LD(x, r * D + j) * rs * (hg ? LD(g, j) : 1.0f));
    }
    return HK_OK;
}

int hk_rmsnorm_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *dy, HkTensor *dx, HkTensor *dg, void *ws) {
    int rc = norm_check(x, g, NULL, dy);
    if (rc) return rc;
    if ((rc = check_grad(dx, x))) return rc;
    if (hk_present(dg)) {
        if (!hk_is_float(dg)) return HK_ERR_DTYPE;
        if (hk_numel(dg) != last_dim(x)) return HK_ERR_SHAPE;
    }
    if (!ws && hk_rmsnorm_workspace_bytes(x)) return HK_ERR_WORKSPACE;
    int64_t R = rows_of(x), D = last_dim(x);
    HkWs w = {ws, 0};
    const float *rstd = hk_ws_take(&w, R);
    bool hg = hk_present(g);
    if (hk_present(dx)) {
#pragma omp parallel for if (R * D > HK_PAR_MIN) schedule(static)
        for (int64_t r = 0; r < R; r++) {
            double s = 0;
            float rs = rstd[r];
            for (int64_t j = 0; j < D; j++)
                s += (double)(LD(dy, r * D + j) * (hg ? LD(g, j) : 1.0f)) * LD(x, r * D + j);
            float c = (float)(s / (double)D) * rs * rs;
            for (int64_t j = 0; j < D; j++) {
                float dh = LD(dy, r * D + j) * (hg ? LD(g, j) : 1.0f);
                ACC(dx, r * D + j, rs * (dh - LD(x, r * D + j) * c));
            }
        }
    }
    if (hk_present(dg)) {
        int64_t nblk = (D + 63) / 64;
#pragma omp parallel for if (R * D > HK_PAR_MIN) schedule(static)
        for (int64_t bk = 0; bk < nblk; bk++) {
            double ag[64] = {0};
            int64_t j0 = bk * 64, j1 = j0 + 64 < D ? j0 + 64 : D;
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = j0; j < j1; j++) ag[j - j0] += LD(dy, r * D + j) * LD(x, r * D + j) * rstd[r];
            for (int64_t j = j0; j < j1; j++) ACC(dg, j, (float)ag[j - j0]);
        }
    }
    return HK_OK;
}

/* ---- gelu, silu ---- */

static int unary_check(const HkTensor *x, const HkTensor *y) {
    int rc;
    if ((rc = check_float(x)) || (rc = check_float(y))) return rc;
    return hk_numel(x) == hk_numel(y) ? HK_OK : HK_ERR_SHAPE;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

int hk_gelu_fwd(const HkTensor *x, HkTensor *y) {
    int rc = unary_check(x, y);
    if (rc) return rc;
    int64_t n = hk_numel(x);
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float v = LD(x, i);
        ST(y, i, 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_C * v * v * v))));
    }
    return HK_OK;
}

int hk_gelu_bwd(const HkTensor *x, const HkTensor *dy, HkTensor *dx) {
    int rc = unary_check(x, dy);
    if (rc) return rc;
    if (!hk_present(dx)) return HK_OK;
    if ((rc = unary_check(x, dx))) return rc;
    int64_t n = hk_numel(x);
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float v = LD(x, i);
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        ACC(dx, i, LD(dy, i) * d);
    }
    return HK_OK;
}

static inline float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }

int hk_silu_fwd(const HkTensor *x, HkTensor *y) {
    int rc = unary_check(x, y);
    if (rc) return rc;
    int64_t n = hk_numel(x);
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float v = LD(x, i);
        ST(y, i, v * sigmoidf(v));
    }
    return HK_OK;
}

int hk_silu_bwd(const HkTensor *x, const HkTensor *dy, HkTensor *dx) {
    int rc = unary_check(x, dy);
    if (rc) return rc;
    if (!hk_present(dx)) return HK_OK;
    if ((rc = unary_check(x, dx))) return rc;
    int64_t n = hk_numel(x);
#pragma omp parallel for if (n > HK_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float v = LD(x, i), s = sigmoidf(v);
        ACC(dx, i, LD(dy, i) * s * (1.0f + v * (1.0f - s)));
    }
    return HK_OK;
}

/* ---- rope ---- */

HkRope hk_rope_attrs(const int64_t *iattr, const double *fattr) {
    HkRope r = {0, 10000.0, ROPE_NONE, 1.0, 1.0, 4.0, 8192.0};
    if (iattr) {
        r.heads = iattr[0];
        r.scaling = (int)iattr[1];
        if (iattr[2] > 0) r.original_max = (double)iattr[2];
    }
    if (fattr) {
        if (fattr[0] != 0) r.theta = fattr[0];
        r.factor = fattr[1];
        r.low_freq_factor = fattr[2];
        r.high_freq_factor = fattr[3];
    }
    return r;
}

/* theta^(-2j/hd), then scaled: linear divides every frequency by factor;
 * llama3 (Hugging Face's _compute_llama3_parameters) keeps wavelengths
 * below original_max/high_freq_factor, divides those above
 * original_max/low_freq_factor, and blends linearly in between. */
double hk_rope_freq(const HkRope *r, int64_t j, int64_t hd) {
    double f = pow(r->theta, -2.0 * (double)j / (double)hd);
    if (r->scaling == ROPE_LINEAR) return f / r->factor;
    if (r->scaling != ROPE_LLAMA3) return f;
    double wavelen = 2.0 * M_PI / f;
    if (wavelen < r->original_max / r->high_freq_factor) return f;
    if (wavelen > r->original_max / r->low_freq_factor) return f / r->factor;
    double smooth = (r->original_max / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    return (1.0 - smooth) * f / r->factor + smooth * f;
}

static int rope_check(const HkTensor *x, const HkTensor *y, const HkRope *r) {
    int rc;
    if ((rc = check_float(x)) || (rc = check_float(y))) return rc;
    if (x->rank != 3 || !same_shape(x, y)) return HK_ERR_SHAPE;
    int64_t heads = r->heads;
    if (heads <= 0 || !(r->theta > 0) || x->dims[2] % heads || (x->dims[2] / heads) % 2) return HK_ERR_ATTR;
    if (r->scaling < ROPE_NONE || r->scaling > ROPE_LLAMA3) return HK_ERR_ATTR;
    if (r->scaling != ROPE_NONE && !(r->factor > 0)) return HK_ERR_ATTR;
    if (r->scaling == ROPE_LLAMA3 &&
        !(r->low_freq_factor > 0 && r->high_freq_factor > r->low_freq_factor && r->original_max > 0))
        return HK_ERR_ATTR;
    return HK_OK;
}

/* y = R(sign * a) x per pair; forward sign +1, backward (the transpose) -1, accumulating. */
static void rope_apply(const HkTensor *x, HkTensor *y, const HkRope *r, int sign, bool acc) {
    int64_t B = x->dims[0], T = x->dims[1], C = x->dims[2], heads = r->heads, hd = C / heads, half = hd / 2;
#pragma omp parallel for if (B * T * C > HK_PAR_MIN) schedule(static)
    for (int64_t bt = 0; bt < B * T; bt++) {
        int64_t t = bt % T;
        for (int64_t j = 0; j < half; j++) {
            double a = (double)t * hk_rope_freq(r, j, hd);
            float c = (float)cos(a), s = (float)(sign * sin(a));
            for (int64_t h = 0; h < heads; h++) {
                int64_t i0 = bt * C + h * hd + j, i1 = i0 + half;
                float x0 = LD(x, i0), x1 = LD(x, i1);
                float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
                if (acc) {
                    ACC(y, i0, y0);
                    ACC(y, i1, y1);
                } else {
                    ST(y, i0, y0);
                    ST(y, i1, y1);
                }
            }
        }
    }
}

int hk_rope_fwd(const HkTensor *x, HkTensor *y, const HkRope *r) {
    int rc = rope_check(x, y, r);
    if (rc) return rc;
    rope_apply(x, y, r, 1, false);
    return HK_OK;
}

int hk_rope_bwd(const HkTensor *dy, HkTensor *dx, const HkRope *r) {
    if (!hk_present(dx)) return HK_OK;
    int rc = rope_check(dy, dx, r);
    if (rc) return rc;
    rope_apply(dy, dx, r, -1, true);
    return HK_OK;
}

/* ---- attention ---- */

typedef struct AttnShape {
    int64_t B, T, H, KV, hd, qc, kc; /* qc = H*hd, kc = KV*hd: row lengths */
} AttnShape;

static int attn_check(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *y, int64_t heads,
                      int64_t kv_heads, AttnShape *s) {
    int rc;
    if ((rc = check_float(q)) || (rc = check_float(k)) || (rc = check_float(v)) || (rc = check_float(y))) return rc;
    if (q->rank != 3 || k->rank != 3 || !same_shape(k, v) || !same_shape(q, y)) return HK_ERR_SHAPE;
    if (heads <= 0 || kv_heads <= 0 || heads % kv_heads || q->dims[2] % heads) return HK_ERR_ATTR;
    s->B = q->dims[0];
    s->T = q->dims[1];
    s->H = heads;
    s->KV = kv_heads;
    s->hd = q->dims[2] / heads;
    s->qc = q->dims[2];
    s->kc = kv_heads * s->hd;
    if (k->dims[0] != s->B || k->dims[1] != s->T || k->dims[2] != s->kc) return HK_ERR_SHAPE;
    return HK_OK;
}

size_t hk_attention_workspace_bytes(const HkTensor *q, int64_t heads) {
    if (!q || q->rank != 3 || heads <= 0) return 0;
    int64_t B = q->dims[0], T = q->dims[1], hd = q->dims[2] / heads;
    return hk_align((size_t)(B * heads * T) * 4) + 2 * hk_align((size_t)(T * T) * 4) +
           8 * hk_align((size_t)(T * hd) * 4);
}

typedef struct AttnWs {
    float *lse, *P, *dP, *Q, *K, *V, *O, *dO, *dQ, *dK, *dV;
} AttnWs;

static AttnWs attn_ws(void *ws, const AttnShape *s) {
    HkWs w = {ws, 0};
    AttnWs a;
    a.lse = hk_ws_take(&w, s->B * s->H * s->T);
    a.P = hk_ws_take(&w, s->T * s->T);
    a.dP = hk_ws_take(&w, s->T * s->T);
    float **blk[8] = {&a.Q, &a.K, &a.V, &a.O, &a.dO, &a.dQ, &a.dK, &a.dV};
    for (int i = 0; i < 8; i++) *blk[i] = hk_ws_take(&w, s->T * s->hd);
    return a;
}

/* dst [T,hd] <- head `h` of t (row length c) in batch b. */
static void gather(const HkTensor *t, int64_t b, int64_t h, const AttnShape *s, int64_t c, float *dst) {
    for (int64_t i = 0; i < s->T; i++)
        for (int64_t d = 0; d < s->hd; d++) dst[i * s->hd + d] = LD(t, (b * s->T + i) * c + h * s->hd + d);
}

static void scatter(HkTensor *t, int64_t b, int64_t h, const AttnShape *s, int64_t c, const float *src, bool acc) {
    for (int64_t i = 0; i < s->T; i++)
        for (int64_t d = 0; d < s->hd; d++) {
            int64_t o = (b * s->T + i) * c + h * s->hd + d;
            if (acc) ACC(t, o, src[i * s->hd + d]);
            else ST(t, o, src[i * s->hd + d]);
        }
}

static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B, float beta,
                 float *C) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)M,
                (blasint)N, (blasint)K, 1.0f, A, (blasint)(ta ? M : K), B, (blasint)(tb ? K : N), beta, C,
                (blasint)N);
}

int hk_attention_fwd(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                     int64_t kv_heads, void *ws) {
    AttnShape s;
    int rc = attn_check(q, k, v, y, heads, kv_heads, &s);
    if (rc) return rc;
    if (!ws && hk_attention_workspace_bytes(q, heads)) return HK_ERR_WORKSPACE;
    if (s.T == 0 || s.hd == 0 || s.B == 0) return HK_OK;
    AttnWs a = attn_ws(ws, &s);
    int64_t T = s.T, hd = s.hd, grp = s.H / s.KV;
    float scale = (float)(1.0 / sqrt((double)hd));
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.H; h++) {
            int64_t g = h / grp;
            if (h % grp == 0) {
                gather(k, b, g, &s, s.kc, a.K);
                gather(v, b, g, &s, s.kc, a.V);
            }
            gather(q, b, h, &s, s.qc, a.Q);
            gemm(false, true, T, T, hd, a.Q, a.K, 0.0f, a.P); /* S = Q K^T */
            float *lse = a.lse + (b * s.H + h) * T;
#pragma omp parallel for if (T * T > HK_PAR_MIN) schedule(static)
            for (int64_t t = 0; t < T; t++) {
                float *row = a.P + t * T;
                float m = -INFINITY;
                for (int64_t u = 0; u <= t; u++) {
                    row[u] *= scale;
                    if (row[u] > m) m = row[u];
                }
                double sum = 0;
                for (int64_t u = 0; u <= t; u++) sum += exp((double)(row[u] - m));
                float l = m + (float)log(sum);
                lse[t] = l;
                for (int64_t u = 0; u <= t; u++) row[u] = expf(row[u] - l);
                for (int64_t u = t + 1; u < T; u++) row[u] = 0.0f;
            }
            gemm(false, false, T, hd, T, a.P, a.V, 0.0f, a.O); /* O = P V */
            scatter(y, b, h, &s, s.qc, a.O, false);
        }
    return HK_OK;
}

int hk_attention_bwd(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                     HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, void *ws) {
    AttnShape s;
    int rc = attn_check(q, k, v, dy, heads, kv_heads, &s);
    if (rc) return rc;
    if ((rc = check_grad(dq, q)) || (rc = check_grad(dk, k)) || (rc = check_grad(dv, v))) return rc;
    if (!ws && hk_attention_workspace_bytes(q, heads)) return HK_ERR_WORKSPACE;
    if (s.T == 0 || s.hd == 0 || s.B == 0) return HK_OK;
    AttnWs a = attn_ws(ws, &s);
    int64_t T = s.T, hd = s.hd, grp = s.H / s.KV;
    float scale = (float)(1.0 / sqrt((double)hd));
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t g = 0; g < s.KV; g++) {
            gather(k, b, g, &s, s.kc, a.K);
            gather(v, b, g, &s, s.kc, a.V);
            memset(a.dK, 0, sizeof(float) * (size_t)(T * hd));
            memset(a.dV, 0, sizeof(float) * (size_t)(T * hd));
            for (int64_t h = g * grp; h < (g + 1) * grp; h++) {
                gather(q, b, h, &s, s.qc, a.Q);
                gather(dy, b, h, &s, s.qc, a.dO);
                const float *lse = a.lse + (b * s.H + h) * T;
                gemm(false, true, T, T, hd, a.Q, a.K, 0.0f, a.P);   /* S = Q K^T */
                gemm(false, true, T, T, hd, a.dO, a.V, 0.0f, a.dP); /* dP = dO V^T */
#pragma omp parallel for if (T * T > HK_PAR_MIN) schedule(static)
                for (int64_t t = 0; t < T; t++) {
                    float *p = a.P + t * T, *dp = a.dP + t * T;
                    double D = 0;
                    for (int64_t u = 0; u <= t; u++) {
                        p[u] = expf(p[u] * scale - lse[t]);
                        D += (double)p[u] * dp[u];
                    }
                    for (int64_t u = 0; u <= t; u++) dp[u] = p[u] * (dp[u] - (float)D) * scale; /* dS, scaled */
                    for (int64_t u = t + 1; u < T; u++) p[u] = dp[u] = 0.0f;
                }
                gemm(true, false, T, hd, T, a.P, a.dO, 1.0f, a.dV);  /* dV += P^T dO */
                gemm(true, false, T, hd, T, a.dP, a.Q, 1.0f, a.dK);  /* dK += dS^T Q */
                if (hk_present(dq)) {
                    gemm(false, false, T, hd, T, a.dP, a.K, 0.0f, a.dQ); /* dQ = dS K */
                    scatter(dq, b, h, &s, s.qc, a.dQ, true);
                }
            }
            if (hk_present(dk)) scatter(dk, b, g, &s, s.kc, a.dK, true);
            if (hk_present(dv)) scatter(dv, b, g, &s, s.kc, a.dV, true);
        }
    return HK_OK;
}

/* ---- split ---- */

static int split_check(const HkTensor *x, const HkTensor *pieces, int n, bool allow_absent) {
    if (!hk_present(x)) return HK_ERR_ARG;
    if (!hk_is_float(x)) return HK_ERR_DTYPE;
    if (n < 1 || x->rank < 1) return n < 1 ? HK_ERR_ATTR : HK_ERR_SHAPE;
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        const HkTensor *p = &pieces[i];
        if (!p->data && !allow_absent) return HK_ERR_ARG;
        if (p->data && !hk_is_float(p)) return HK_ERR_DTYPE;
        if (p->rank != x->rank) return HK_ERR_SHAPE;
        for (int d = 0; d < x->rank - 1; d++)
            if (p->dims[d] != x->dims[d]) return HK_ERR_SHAPE;
        sum += p->dims[p->rank - 1];
    }
    return sum == last_dim(x) ? HK_OK : HK_ERR_SHAPE;
}

int hk_split_fwd(const HkTensor *x, HkTensor *pieces, int n) {
    int rc = split_check(x, pieces, n, false);
    if (rc) return rc;
    int64_t R = rows_of(x), N = last_dim(x), off = 0;
    for (int i = 0; i < n; i++) {
        HkTensor *p = &pieces[i];
        int64_t w = last_dim(p);
#pragma omp parallel for if (R * w > HK_PAR_MIN) schedule(static)
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < w; j++) ST(p, r * w + j, LD(x, r * N + off + j));
        off += w;
    }
    return HK_OK;
}

int hk_split_bwd(const HkTensor *dpieces, int n, HkTensor *dx) {
    if (!hk_present(dx)) return HK_OK;
    int rc = split_check(dx, dpieces, n, true);
    if (rc) return rc;
    int64_t R = rows_of(dx), N = last_dim(dx), off = 0;
    for (int i = 0; i < n; i++) {
        const HkTensor *p = &dpieces[i];
        int64_t w = last_dim(p);
        if (p->data) {
#pragma omp parallel for if (R * w > HK_PAR_MIN) schedule(static)
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < w; j++) ACC(dx, r * N + off + j, LD(p, r * w + j));
        }
        off += w;
    }
    return HK_OK;
}

/* ---- cross_entropy ---- */

static int ce_check(const HkTensor *logits, const HkTensor *targets, const HkTensor *loss) {
    if (!hk_present(logits) || !hk_present(targets) || !hk_present(loss)) return HK_ERR_ARG;
    if (!hk_is_float(logits) || targets->dtype != DT_I32 || !hk_is_float(loss)) return HK_ERR_DTYPE;
    if (logits->rank < 1 || targets->rank != logits->rank - 1 || hk_numel(loss) != 1) return HK_ERR_SHAPE;
    for (int i = 0; i < targets->rank; i++)
        if (targets->dims[i] != logits->dims[i]) return HK_ERR_SHAPE;
    int64_t n = hk_numel(targets), V = last_dim(logits);
    const int32_t *tg = targets->data;
    for (int64_t i = 0; i < n; i++)
        if (tg[i] < 0 || tg[i] >= V) return HK_ERR_INDEX;
    return HK_OK;
}

size_t hk_cross_entropy_workspace_bytes(const HkTensor *logits) {
    return hk_align((size_t)rows_of(logits) * sizeof(float));
}

int hk_cross_entropy_fwd(const HkTensor *logits, const HkTensor *targets, HkTensor *loss, void *ws) {
    int rc = ce_check(logits, targets, loss);
    if (rc) return rc;
    if (!ws && hk_cross_entropy_workspace_bytes(logits)) return HK_ERR_WORKSPACE;
    int64_t R = rows_of(logits), V = last_dim(logits);
    HkWs w = {ws, 0};
    float *lse = hk_ws_take(&w, R);
    const int32_t *tg = targets->data;
#pragma omp parallel for if (R * V > HK_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < R; r++) {
        float m = -INFINITY;
        for (int64_t j = 0; j < V; j++) {
            float l = LD(logits, r * V + j);
            if (l > m) m = l;
        }
        double s = 0;
        for (int64_t j = 0; j < V; j++) s += exp((double)(LD(logits, r * V + j) - m));
        lse[r] = (float)((double)m + log(s));
    }
    /* the mean in row order, so the loss does not depend on the thread count */
    double total = 0;
    for (int64_t r = 0; r < R; r++) total += (double)lse[r] - LD(logits, r * V + tg[r]);
    ST(loss, 0, R ? (float)(total / (double)R) : 0.0f);
    return HK_OK;
}

int hk_cross_entropy_bwd(const HkTensor *logits, const HkTensor *targets, const HkTensor *dloss,
                         HkTensor *dlogits, void *ws) {
    int rc = ce_check(logits, targets, dloss);
    if (rc) return rc;
    if (!hk_present(dlogits)) return HK_OK;
    if ((rc = check_grad(dlogits, logits))) return rc;
    if (!ws && hk_cross_entropy_workspace_bytes(logits)) return HK_ERR_WORKSPACE;
    int64_t R = rows_of(logits), V = last_dim(logits);
    if (R == 0) return HK_OK;
    HkWs w = {ws, 0};
    const float *lse = hk_ws_take(&w, R);
    const int32_t *tg = targets->data;
    float dl = (float)((double)LD(dloss, 0) / (double)R);
#pragma omp parallel for if (R * V > HK_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < V; j++) {
            float p = expf(LD(logits, r * V + j) - lse[r]);
            ACC(dlogits, r * V + j, (p - (j == tg[r] ? 1.0f : 0.0f)) * dl);
        }
    return HK_OK;
}

/* ---- arange ---- */

int hk_arange_fwd(HkTensor *y, int64_t n) {
    if (!hk_present(y)) return HK_ERR_ARG;
    if (y->dtype != DT_I32) return HK_ERR_DTYPE;
    if (n < 0 || n > INT32_MAX) return HK_ERR_ATTR;
    if (hk_numel(y) != n) return HK_ERR_SHAPE;
    int32_t *p = y->data;
    for (int64_t i = 0; i < n; i++) p[i] = (int32_t)i;
    return HK_OK;
}
