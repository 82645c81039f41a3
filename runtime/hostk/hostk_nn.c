/* hostk_nn: the non-GEMM primitives. Layernorm, rmsnorm, gelu, silu and
 * cross-entropy check their operands here and run through the vectorised
 * drivers of hostk_rows.c; attention is in hostk_attn.c. */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"
#include "hostk_rows.h"
#include "hostk_threads.h"

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
    hk_rows_embed_fwd(table, ids->data, hk_numel(ids), y);
    return HK_OK;
}

int hk_embedding_bwd(const HkTensor *ids, const HkTensor *dy, HkTensor *dtable) {
    if (!hk_present(dtable)) return HK_OK;
    int rc = embedding_check(dtable, ids, dy);
    if (rc) return rc;
    /* ids repeat: each unit owns a block of columns, so no two threads add to one element */
    hk_rows_embed_bwd(ids->data, hk_numel(ids), dy, dtable);
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
    if (bc.ns == 0) return HK_OK;
    hk_rows_binary_fwd(bc.big, bc.small, y, mul);
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
    if (bc.ns == 0) return HK_OK;
    hk_rows_binary_bwd(bc.big, bc.small, dy, dbig, dsmall, mul);
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

/* mean, rstd per row (saved by the forward), then the backward's double
 * partials of dg and db per chunk of rows (hostk_rows.c) */
size_t hk_layernorm_workspace_bytes(const HkTensor *x) {
    return 2 * hk_align((size_t)rows_of(x) * sizeof(float)) + hk_norm_partial_bytes(rows_of(x), last_dim(x), 2);
}
size_t hk_rmsnorm_workspace_bytes(const HkTensor *x) {
    return hk_align((size_t)rows_of(x) * sizeof(float)) + hk_norm_partial_bytes(rows_of(x), last_dim(x), 1);
}

int hk_layernorm_fwd(const HkTensor *x, const HkTensor *g, const HkTensor *b, HkTensor *y, double eps, void *ws) {
    int rc = norm_check(x, g, b, y);
    if (rc) return rc;
    if (!(eps >= 0)) return HK_ERR_ATTR;
    if (!ws && hk_layernorm_workspace_bytes(x)) return HK_ERR_WORKSPACE;
    int64_t R = rows_of(x);
    HkWs w = {ws, 0};
    float *mean = hk_ws_take(&w, R), *rstd = hk_ws_take(&w, R);
    hk_rows_ln_fwd(x, g, b, y, eps, mean, rstd);
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
    int64_t R = rows_of(x);
    HkWs w = {ws, 0};
    const float *mean = hk_ws_take(&w, R), *rstd = hk_ws_take(&w, R);
    hk_rows_ln_bwd(x, g, dy, dx, dg, db, mean, rstd, (double *)(void *)((char *)ws + w.used));
    return HK_OK;
}

int hk_rmsnorm_fwd(const HkTensor *x, const HkTensor *g, HkTensor *y, double eps, void *ws) {
    int rc = norm_check(x, g, NULL, y);
    if (rc) return rc;
    if (!(eps >= 0)) return HK_ERR_ATTR;
    if (!ws && hk_rmsnorm_workspace_bytes(x)) return HK_ERR_WORKSPACE;
    HkWs w = {ws, 0};
    hk_rows_rms_fwd(x, g, y, eps, hk_ws_take(&w, rows_of(x)));
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
    HkWs w = {ws, 0};
    const float *rstd = hk_ws_take(&w, rows_of(x));
    hk_rows_rms_bwd(x, g, dy, dx, dg, rstd, (double *)(void *)((char *)ws + w.used));
    return HK_OK;
}

/* ---- gelu, silu ---- */

static int unary_check(const HkTensor *x, const HkTensor *y) {
    int rc;
    if ((rc = check_float(x)) || (rc = check_float(y))) return rc;
    return hk_numel(x) == hk_numel(y) ? HK_OK : HK_ERR_SHAPE;
}

int hk_gelu_fwd(const HkTensor *x, HkTensor *y) {
    int rc = unary_check(x, y);
    if (rc) return rc;
    hk_rows_unary_fwd(HK_UNARY_GELU, x, y);
    return HK_OK;
}

int hk_gelu_bwd(const HkTensor *x, const HkTensor *dy, HkTensor *dx) {
    int rc = unary_check(x, dy);
    if (rc) return rc;
    if (!hk_present(dx)) return HK_OK;
    if ((rc = unary_check(x, dx))) return rc;
    hk_rows_unary_bwd(HK_UNARY_GELU, x, dy, dx);
    return HK_OK;
}

int hk_silu_fwd(const HkTensor *x, HkTensor *y) {
    int rc = unary_check(x, y);
    if (rc) return rc;
    hk_rows_unary_fwd(HK_UNARY_SILU, x, y);
    return HK_OK;
}

int hk_silu_bwd(const HkTensor *x, const HkTensor *dy, HkTensor *dx) {
    int rc = unary_check(x, dy);
    if (rc) return rc;
    if (!hk_present(dx)) return HK_OK;
    if ((rc = unary_check(x, dx))) return rc;
    hk_rows_unary_bwd(HK_UNARY_SILU, x, dy, dx);
    return HK_OK;
}

/* ---- scale ---- */

int hk_scale_fwd(const HkTensor *x, HkTensor *y, double by) {
    int rc = unary_check(x, y);
    if (rc) return rc;
    float s = (float)by;
    for (int64_t i = 0, n = hk_numel(x); i < n; i++) ST(y, i, s * LD(x, i));
    return HK_OK;
}

int hk_scale_bwd(const HkTensor *dy, HkTensor *dx, double by) {
    if (!hk_present(dx)) return check_float(dy);
    int rc = unary_check(dy, dx);
    if (rc) return rc;
    float s = (float)by;
    for (int64_t i = 0, n = hk_numel(dy); i < n; i++) ACC(dx, i, s * LD(dy, i));
    return HK_OK;
}

/* ---- softcap: y = cap tanh(x / cap) ---- */

int hk_softcap_fwd(const HkTensor *x, HkTensor *y, double cap) {
    int rc = unary_check(x, y);
    if (rc) return rc;
    if (!(cap > 0)) return HK_ERR_ATTR;
    float c = (float)cap;
    for (int64_t i = 0, n = hk_numel(x); i < n; i++) ST(y, i, c * tanhf(LD(x, i) / c));
    return HK_OK;
}

/* dx += dy (1 - tanh^2(x / cap)) */
int hk_softcap_bwd(const HkTensor *x, const HkTensor *dy, HkTensor *dx, double cap) {
    if (!hk_present(dx)) return check_float(dy);
    int rc = unary_check(dy, dx);
    if (rc || (rc = unary_check(x, dy))) return rc;
    if (!(cap > 0)) return HK_ERR_ATTR;
    float c = (float)cap;
    for (int64_t i = 0, n = hk_numel(dy); i < n; i++) {
        float t = tanhf(LD(x, i) / c);
        ACC(dx, i, LD(dy, i) * (1.0f - t * t));
    }
    return HK_OK;
}

/* ---- rope ---- */

HkRope hk_rope_attrs(const int64_t *iattr, const double *fattr, const double *table, int64_t ntable) {
    HkRope r = {0, 10000.0, ROPE_NONE, 1.0, 1.0, 4.0, 8192.0, 0, 0, 0, 0, NULL, NULL};
    if (iattr) {
        r.heads = iattr[IA_ROPE_HEADS];
        r.scaling = (int)iattr[IA_ROPE_SCALING];
        if (iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] > 0) r.original_max = (double)iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS];
        r.rotary_dim = iattr[IA_ROPE_ROTARY_DIM];
    }
    if (fattr) {
        if (fattr[FA_ROPE_THETA] != 0) r.theta = fattr[FA_ROPE_THETA];
        r.factor = fattr[FA_ROPE_FACTOR];
        r.low_freq_factor = fattr[FA_ROPE_LOW_FREQ_FACTOR];
        r.high_freq_factor = fattr[FA_ROPE_HIGH_FREQ_FACTOR];
        r.beta_fast = fattr[FA_ROPE_BETA_FAST];
        r.beta_slow = fattr[FA_ROPE_BETA_SLOW];
        r.attention_factor = fattr[FA_ROPE_ATTENTION_FACTOR];
    }
    /* longrope's two tables, half the list each (the shape rule made them equal) */
    if (table && ntable > 0 && ntable % 2 == 0) {
        r.short_factor = table;
        r.long_factor = table + ntable / 2;
        if (!r.rotary_dim) r.rotary_dim = ntable; /* the check compares it with the head */
    }
    return r;
}

/* YaRN (Hugging Face's _compute_yarn_parameters, truncate = true): pair j
 * of a head of hd keeps its frequency f (extrapolation) below the ramp,
 * takes f / factor (interpolation) above it, and blends linearly on it; the
 * ramp runs over the pairs [low, high] whose wavelength makes between
 * beta_fast and beta_slow rotations in original_max positions (floored and
 * ceiled to whole pairs, within [0, hd - 1]). */
static double yarn_freq(const HkRope *r, double f, int64_t j, int64_t hd) {
    double fast = r->beta_fast > 0 ? r->beta_fast : 32, slow = r->beta_slow > 0 ? r->beta_slow : 1;
    double lb = 2.0 * log(r->theta), d = (double)hd;
    double low = floor(d * log(r->original_max / (fast * 2.0 * M_PI)) / lb);
    double high = ceil(d * log(r->original_max / (slow * 2.0 * M_PI)) / lb);
    if (low < 0) low = 0;
    if (high > d - 1) high = d - 1;
    if (low == high) high += 0.001; /* as transformers: no division by zero */
    double ramp = ((double)j - low) / (high - low);
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    return f / r->factor * ramp + f * (1.0 - ramp);
}

/* theta^(-2j/hd), then scaled: linear divides every frequency by factor;
 * llama3 (Hugging Face's _compute_llama3_parameters) keeps wavelengths
 * below original_max/high_freq_factor, divides those above
 * original_max/low_freq_factor, and blends linearly in between. */
double hk_rope_freq(const HkRope *r, int64_t j, int64_t hd, int64_t seq) {
    double f = pow(r->theta, -2.0 * (double)j / (double)hd);
    if (r->scaling == ROPE_LONGROPE) return f / ((double)seq > r->original_max ? r->long_factor : r->short_factor)[j];
    if (r->scaling == ROPE_LINEAR) return f / r->factor;
    if (r->scaling == ROPE_YARN) return yarn_freq(r, f, j, hd);
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
    if (r->rotary_dim < 0 || r->rotary_dim % 2 || r->rotary_dim > x->dims[2] / heads) return HK_ERR_ATTR;
    if (r->scaling < ROPE_NONE || r->scaling > ROPE_LONGROPE || !(r->attention_factor >= 0)) return HK_ERR_ATTR;
    if (r->scaling == ROPE_LONGROPE &&
        !(r->short_factor && r->long_factor && r->original_max > 0 &&
          (r->rotary_dim ? r->rotary_dim : x->dims[2] / heads) == (r->long_factor - r->short_factor) * 2))
        return HK_ERR_ATTR;
    if (r->scaling == ROPE_YARN && !(r->original_max > 0 && r->theta > 1 && r->beta_fast >= 0 && r->beta_slow >= 0))
        return HK_ERR_ATTR;
    if (r->scaling != ROPE_NONE && r->scaling != ROPE_LONGROPE && !(r->factor > 0)) return HK_ERR_ATTR;
    if (r->scaling == ROPE_LLAMA3 &&
        !(r->low_freq_factor > 0 && r->high_freq_factor > r->low_freq_factor && r->original_max > 0))
        return HK_ERR_ATTR;
    return HK_OK;
}

/* y = R(sign * a) x per pair; forward sign +1, backward (the transpose) -1, accumulating. */
typedef struct RopeJob {
    const HkTensor *x;
    HkTensor *y;
    const HkRope *r;
    int sign;
    bool acc;
    int64_t pos0;              /* the position of row t = 0 (a decode step's) */
    const int32_t *seg;        /* packed rows: where each position's sample begins (hostk.h); NULL: 0 */
    int64_t seq;               /* the sequence's length: the last position + 1 (longrope's choice) */
} RopeJob;

/* one position bt of [B*T] (a unit of the rank's pool, hostk_threads.h) */
static void rope_unit(void *ctx, int64_t bt) {
    const RopeJob *jb = ctx;
    const HkTensor *x = jb->x;
    HkTensor *y = jb->y;
    const HkRope *r = jb->r;
    int sign = jb->sign;
    bool acc = jb->acc;
    int64_t T = x->dims[1], C = x->dims[2], heads = r->heads, hd = C / heads;
    int64_t rd = r->rotary_dim ? r->rotary_dim : hd, half = rd / 2;
    {
        int64_t t = bt % T + jb->pos0 - (jb->seg ? jb->seg[bt] : 0);
        /* partial rotary: the columns past rd of each head are x itself (its transpose too) */
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = bt * C + h * hd + rd; i < bt * C + (h + 1) * hd; i++) {
                if (acc) ACC(y, i, LD(x, i));
                else ST(y, i, LD(x, i));
            }
        double af = r->attention_factor > 0 ? r->attention_factor : 1.0;
        for (int64_t j = 0; j < half; j++) {
            double a = (double)t * hk_rope_freq(r, j, rd, jb->seq);
            float c = (float)(cos(a) * af), s = (float)(sign * sin(a) * af);
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

static void rope_apply(const HkTensor *x, HkTensor *y, const HkRope *r, int sign, bool acc, int64_t pos0,
                       const int32_t *seg, int64_t seq_at_least) {
    int64_t rows = x->dims[0] * x->dims[1], seq = pos0 + x->dims[1];
    if (seq_at_least > seq) seq = seq_at_least;
    if (seg) { /* packed: the longest sample's last position, as position_ids' maximum */
        seq = 0;
        for (int64_t i = 0; i < rows; i++)
            if (i % x->dims[1] - seg[i] + 1 > seq) seq = i % x->dims[1] - seg[i] + 1;
    }
    RopeJob jb = {x, y, r, sign, acc, pos0, seg, seq};
    hk_parallel(hk_team((double)(rows * x->dims[2]) * 2.0), rows, rope_unit, &jb);
}

int hk_rope_fwd(const HkTensor *x, HkTensor *y, const HkRope *r) { return hk_rope_fwd_at(x, y, r, 0); }

int hk_rope_fwd_at(const HkTensor *x, HkTensor *y, const HkRope *r, int64_t pos0) {
    return hk_rope_fwd_seq(x, y, r, pos0, 0);
}

int hk_rope_fwd_seq(const HkTensor *x, HkTensor *y, const HkRope *r, int64_t pos0, int64_t seq) {
    int rc = rope_check(x, y, r);
    if (rc) return rc;
    if (pos0 < 0) return HK_ERR_ATTR;
    rope_apply(x, y, r, 1, false, pos0, NULL, seq);
    return HK_OK;
}

int hk_rope_bwd(const HkTensor *dy, HkTensor *dx, const HkRope *r) {
    if (!hk_present(dx)) return HK_OK;
    int rc = rope_check(dy, dx, r);
    if (rc) return rc;
    rope_apply(dy, dx, r, -1, true, 0, NULL, 0);
    return HK_OK;
}

/* a packed layout: every start at or before its position */
static bool seg_ok(const HkTensor *x, const int32_t *seg) {
    int64_t T = x->dims[1], n = x->dims[0] * T;
    for (int64_t i = 0; i < n; i++)
        if (seg[i] < 0 || seg[i] > i % T) return false;
    return true;
}

int hk_rope_fwd_packed(const HkTensor *x, HkTensor *y, const HkRope *r, const int32_t *seg) {
    int rc = rope_check(x, y, r);
    if (rc) return rc;
    if (!seg_ok(x, seg)) return HK_ERR_ARG;
    rope_apply(x, y, r, 1, false, 0, seg, 0);
    return HK_OK;
}

int hk_rope_bwd_packed(const HkTensor *dy, HkTensor *dx, const HkRope *r, const int32_t *seg) {
    if (!hk_present(dx)) return HK_OK;
    int rc = rope_check(dy, dx, r);
    if (rc) return rc;
    if (!seg_ok(dy, seg)) return HK_ERR_ARG;
    rope_apply(dy, dx, r, -1, true, 0, seg, 0);
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
    hk_rows_split_fwd(x, pieces, n);
    return HK_OK;
}

int hk_split_bwd(const HkTensor *dpieces, int n, HkTensor *dx) {
    if (!hk_present(dx)) return HK_OK;
    int rc = split_check(dx, dpieces, n, true);
    if (rc) return rc;
    hk_rows_split_bwd(dpieces, n, dx);
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
        if (tg[i] >= V) return HK_ERR_INDEX; /* negative: untrained */
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
    hk_rows_ce_lse(logits, lse);
    /* the sum in row order, so the loss does not depend on the thread count */
    double total = 0;
    for (int64_t r = 0; r < R; r++)
        if (tg[r] >= 0) total += (double)lse[r] - LD(logits, r * V + tg[r]);
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
    int64_t R = rows_of(logits);
    if (R == 0) return HK_OK;
    HkWs w = {ws, 0};
    const float *lse = hk_ws_take(&w, R);
    const int32_t *tg = targets->data;
    float dl = (float)((double)LD(dloss, 0) / (double)R);
    hk_rows_ce_bwd(logits, tg, lse, dl, dlogits);
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

/* ---- families (runtime/plan/prim.def) ---- */

static int fam_embedding_fwd(const HkCall *c) { return hk_embedding_fwd(c->a, c->b, &c->out[0]); }
static int fam_embedding_bwd(const HkCall *c) { return hk_embedding_bwd(c->b, c->dy, c->da); }
const HkFamily hk_family_embedding = {fam_embedding_fwd, fam_embedding_bwd, NULL};

static int fam_binary_fwd(const HkCall *c) {
    if (hk_packed_binary(c)) return hk_packed_binary_fwd(c);
    return c->prim == PRIM_ADD ? hk_add_fwd(c->a, c->b, &c->out[0]) : hk_mul_fwd(c->a, c->b, &c->out[0]);
}
static int fam_binary_bwd(const HkCall *c) {
    if (hk_packed_binary(c)) return hk_packed_binary_bwd(c);
    return c->prim == PRIM_ADD ? hk_add_bwd(c->a, c->b, c->dy, c->da, c->db) : hk_mul_bwd(c->a, c->b, c->dy, c->da, c->db);
}
const HkFamily hk_family_binary = {fam_binary_fwd, fam_binary_bwd, NULL};

/* rmsnorm per head: the same kernels on x seen as [rows*H, D/H]. With an
 * offset the gain is offset + g, formed in f32 after the kernels' workspace
 * (Gemma's RMSNorm scales by 1 + w in f32); its gradient is g's. */
static double norm_offset(const HkCall *c) { return c->prim == PRIM_RMSNORM && c->fattr ? c->fattr[FA_RMSNORM_OFFSET] : 0; }
static size_t rms_ws_bytes(const HkCall *c) {
    HkTensor v = hk_heads_view(c->a, hk_attr_i(c->iattr, IA_RMSNORM_HEADS));
    return (hk_rmsnorm_workspace_bytes(&v) + 63) / 64 * 64;
}
static size_t fam_norm_ws(const HkCall *c) {
    if (c->prim == PRIM_LAYERNORM) return hk_layernorm_workspace_bytes(c->a);
    size_t n = rms_ws_bytes(c);
    /* room for offset + g whatever the offset: the size is asked without the attributes' values */
    if (hk_present(c->b)) n += sizeof(float) * (size_t)hk_numel(c->b);
    return n;
}
/* the gain offset + g in the workspace's tail, or g itself */
static const HkTensor *offset_gain(const HkCall *c, HkTensor *buf) {
    double off = norm_offset(c);
    if (off == 0 || !hk_present(c->b) || !c->ws) return c->b;
    *buf = *c->b;
    buf->dtype = DT_F32;
    buf->data = (char *)c->ws + rms_ws_bytes(c);
    float *d = buf->data;
    for (int64_t i = 0, n = hk_numel(c->b); i < n; i++) d[i] = (float)off + hk_ld(c->b->data, c->b->dtype, i);
    return buf;
}
static int fam_norm_fwd(const HkCall *c) {
    double eps = hk_attr_eps(c->fattr);
    if (c->prim == PRIM_LAYERNORM) return hk_layernorm_fwd(c->a, c->b, c->c, &c->out[0], eps, c->ws);
    if (!c->a) return HK_ERR_ARG;
    if (norm_offset(c) != 0 && !hk_present(c->b)) return HK_ERR_ATTR; /* an offset scales a gain */
    int64_t h = hk_attr_i(c->iattr, IA_RMSNORM_HEADS);
    HkTensor xv = hk_heads_view(c->a, h), yv = hk_heads_view(&c->out[0], h), gb;
    return hk_rmsnorm_fwd(&xv, offset_gain(c, &gb), &yv, eps, c->ws);
}
static int fam_norm_bwd(const HkCall *c) {
    if (c->prim == PRIM_LAYERNORM) return hk_layernorm_bwd(c->a, c->b, c->dy, c->da, c->db, c->dc, c->ws);
    if (!c->a) return HK_ERR_ARG;
    if (norm_offset(c) != 0 && !hk_present(c->b)) return HK_ERR_ATTR;
    int64_t h = hk_attr_i(c->iattr, IA_RMSNORM_HEADS);
    HkTensor xv = hk_heads_view(c->a, h), dyv = hk_heads_view(c->dy, h), dav, gb;
    if (c->da) dav = hk_heads_view(c->da, h);
    return hk_rmsnorm_bwd(&xv, offset_gain(c, &gb), &dyv, c->da ? &dav : NULL, c->db, c->ws);
}
const HkFamily hk_family_norm = {fam_norm_fwd, fam_norm_bwd, fam_norm_ws};

static int fam_act_fwd(const HkCall *c) { return c->prim == PRIM_GELU ? hk_gelu_fwd(c->a, &c->out[0]) : hk_silu_fwd(c->a, &c->out[0]); }
static int fam_act_bwd(const HkCall *c) { return c->prim == PRIM_GELU ? hk_gelu_bwd(c->a, c->dy, c->da) : hk_silu_bwd(c->a, c->dy, c->da); }
const HkFamily hk_family_act = {fam_act_fwd, fam_act_bwd, NULL};

/* scale and softcap: one attribute at slot 0 */
static int fam_scale_fwd(const HkCall *c) {
    if (c->prim == PRIM_SOFTCAP) return hk_softcap_fwd(c->a, &c->out[0], c->fattr ? c->fattr[FA_SOFTCAP_CAP] : 0);
    return hk_scale_fwd(c->a, &c->out[0], c->fattr ? c->fattr[FA_SCALE_BY] : 1.0);
}
static int fam_scale_bwd(const HkCall *c) {
    if (c->prim == PRIM_SOFTCAP) return c->a ? hk_softcap_bwd(c->a, c->dy, c->da, c->fattr ? c->fattr[FA_SOFTCAP_CAP] : 0) : HK_ERR_ARG;
    return hk_scale_bwd(c->dy, c->da, c->fattr ? c->fattr[FA_SCALE_BY] : 1.0);
}
const HkFamily hk_family_scale = {fam_scale_fwd, fam_scale_bwd, NULL};

static int fam_rope_fwd(const HkCall *c) {
    HkRope r = hk_rope_attrs(c->iattr, c->fattr, c->table, c->ntable);
    if (c->seg) return hk_rope_fwd_packed(c->a, &c->out[0], &r, c->seg);
    return hk_rope_fwd(c->a, &c->out[0], &r);
}
static int fam_rope_bwd(const HkCall *c) {
    HkRope r = hk_rope_attrs(c->iattr, c->fattr, c->table, c->ntable);
    if (c->seg) return hk_rope_bwd_packed(c->dy, c->da, &r, c->seg);
    return hk_rope_bwd(c->dy, c->da, &r);
}
const HkFamily hk_family_rope = {fam_rope_fwd, fam_rope_bwd, NULL};

static int fam_split_fwd(const HkCall *c) {
    int64_t n = hk_attr_i(c->iattr, IA_SPLIT_N);
    if (n && n != c->nout) return HK_ERR_ATTR;
    return hk_split_fwd(c->a, c->out, c->nout);
}
static int fam_split_bwd(const HkCall *c) { return hk_split_bwd(c->dout, c->nout, c->da); }
const HkFamily hk_family_split = {fam_split_fwd, fam_split_bwd, NULL};

static size_t fam_xent_ws(const HkCall *c) { return hk_cross_entropy_workspace_bytes(c->a); }
static int fam_xent_fwd(const HkCall *c) { return hk_cross_entropy_fwd(c->a, c->b, &c->out[0], c->ws); }
static int fam_xent_bwd(const HkCall *c) { return hk_cross_entropy_bwd(c->a, c->b, c->dy, c->da, c->ws); }
const HkFamily hk_family_xent = {fam_xent_fwd, fam_xent_bwd, fam_xent_ws};

static int fam_arange_fwd(const HkCall *c) { return hk_arange_fwd(&c->out[0], hk_attr_i(c->iattr, IA_ARANGE_N)); }
const HkFamily hk_family_arange = {fam_arange_fwd, NULL, NULL};
