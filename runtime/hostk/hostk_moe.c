/* hostk_moe: the mixture-of-experts family's host kernels (docs/primitives.md,
 * "Mixture of experts"): routing (moe_topk, moe_gate), the grouped expert
 * GEMMs (moe_expert), the weighted combination (moe_combine) and the
 * load-balancing statistics and loss (moe_load, moe_balance).
 *
 * moe_expert groups the routed rows by expert: the k * R (row, slot) pairs
 * are listed expert by expert (each expert's in row order), and each
 * expert's rows are gathered into one block, multiplied by its [O, I]
 * weight in one GEMM that runs as panels on the rank's team, and scattered
 * back to their (row, slot) places. The output is [R, k, O] whatever the
 * routing, so no buffer depends on how the tokens were routed; the gather
 * block holds at most R rows (an expert takes a row at most once when
 * moe_topk made idx, so at most R rows; an idx naming one expert twice for
 * a row is run in blocks of R rows). Experts run one after another, so the
 * sums (dx's scatter-add above all) come in a fixed order: the results do
 * not depend on the thread count.
 *
 * Tiled by expert (a plan's tiles of the [E, O, I] weight, docs/tuning.md
 * "Tile"), a call sees experts [e0, e0 + E/n) only and lists only the pairs
 * routed to them; its workspace is the untiled call's bound, whatever the
 * routing. The tiles run in order, so dx's sums come in the same order
 * as untiled. */
#include <math.h>
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"
#include "hostk_rows.h"
#include "hostk_threads.h"

static int64_t lead_rows(const HkTensor *t) {
    int64_t r = 1;
    for (int i = 0; i < t->rank - 1; i++) r *= t->dims[i];
    return r;
}

static int64_t last_dim(const HkTensor *t) { return t->rank ? t->dims[t->rank - 1] : 1; }

/* idx is i32 [R, k] with R the rows of `of` (its last dim aside). */
static int idx_rows(const HkTensor *of, const HkTensor *idx) {
    if (!hk_present(idx) || !hk_present(of)) return HK_ERR_ARG;
    if (idx->dtype != DT_I32) return HK_ERR_DTYPE;
    if (idx->rank < 1 || lead_rows(idx) != lead_rows(of)) return HK_ERR_SHAPE;
    return HK_OK;
}

/* Softmax of one row of E logits into p (double: sums over a row are exact enough). */
static void softmax_row(const HkTensor *logits, int64_t r, int64_t E, double *p) {
    double mx = -INFINITY;
    for (int64_t e = 0; e < E; e++) {
        double v = hk_ld(logits->data, logits->dtype, r * E + e);
        if (v > mx) mx = v;
    }
    double s = 0;
    for (int64_t e = 0; e < E; e++) {
        p[e] = exp((double)hk_ld(logits->data, logits->dtype, r * E + e) - mx);
        s += p[e];
    }
    for (int64_t e = 0; e < E; e++) p[e] /= s;
}

/* ---- moe_topk ---- */

int hk_moe_topk_fwd(const HkTensor *logits, HkTensor *idx) {
    if (!hk_present(logits) || !hk_present(idx)) return HK_ERR_ARG;
    if (!hk_is_float(logits)) return HK_ERR_DTYPE;
    int rc = idx_rows(logits, idx);
    if (rc) return rc;
    int64_t R = lead_rows(logits), E = last_dim(logits), k = last_dim(idx);
    if (k < 1 || k > E) return HK_ERR_ATTR;
    int32_t *out = idx->data;
    for (int64_t r = 0; r < R; r++) {
        /* selection: the largest not yet taken, the lower expert first on ties (NaN never wins) */
        int32_t *o = out + r * k;
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            float bv = 0;
            for (int64_t e = 0; e < E; e++) {
                bool taken = false;
                for (int64_t i = 0; i < j && !taken; i++) taken = o[i] == e;
                if (taken) continue;
                float v = hk_ld(logits->data, logits->dtype, r * E + e);
                if (best < 0 || v > bv || (isnan(bv) && !isnan(v))) best = e, bv = v;
            }
            o[j] = (int32_t)best;
        }
    }
    return HK_OK;
}

/* ---- moe_gate ---- */

static int gate_check(const HkTensor *logits, const HkTensor *idx, const HkTensor *y) {
    if (!hk_present(logits) || !hk_present(y)) return HK_ERR_ARG;
    if (!hk_is_float(logits) || !hk_is_float(y)) return HK_ERR_DTYPE;
    int rc = idx_rows(logits, idx);
    if (rc) return rc;
    if (hk_numel(y) != hk_numel(idx) || last_dim(idx) > last_dim(logits)) return HK_ERR_SHAPE;
    return HK_OK;
}

/* Row r's probabilities p[E] and its k gates g[k] (HK_ERR_INDEX: an expert outside [0, E)). */
static int gate_row(const HkTensor *logits, const int32_t *idx, int64_t r, int64_t E, int64_t k, bool normalize,
                    double *p, double *g, double *sum) {
    softmax_row(logits, r, E, p);
    double s = 0;
    for (int64_t j = 0; j < k; j++) {
        int32_t e = idx[r * k + j];
        if (e < 0 || e >= E) return HK_ERR_INDEX;
        g[j] = p[e];
        s += g[j];
    }
    if (normalize)
        for (int64_t j = 0; j < k; j++) g[j] /= s;
    *sum = s;
    return HK_OK;
}

typedef struct GateCtx {
    const HkTensor *logits, *idx, *dy;
    HkTensor *y, *dlogits;
    int64_t E, k, per;
    bool normalize;
    double *scratch; /* per unit: E + 2 k doubles */
    int rc;
} GateCtx;

enum { MOE_ROWS_PER_UNIT = 64 };

static void gate_unit(void *vctx, int64_t u) {
    GateCtx *c = vctx;
    int64_t R = lead_rows(c->logits), E = c->E, k = c->k;
    double *p = c->scratch + u * (E + 2 * k), *g = p + E, *dp = g + k;
    const int32_t *idx = c->idx->data;
    for (int64_t r = u * c->per; r < R && r < (u + 1) * c->per; r++) {
        double s;
        if (gate_row(c->logits, idx, r, E, k, c->normalize, p, g, &s)) {
            c->rc = HK_ERR_INDEX;
            return;
        }
        if (!c->dy) {
            for (int64_t j = 0; j < k; j++) hk_st(c->y->data, c->y->dtype, r * k + j, (float)g[j]);
            continue;
        }
        /* dp_j for the picked experts: through the normalisation when there is one */
        double dot = 0;
        for (int64_t j = 0; j < k; j++) {
            dp[j] = hk_ld(c->dy->data, c->dy->dtype, r * k + j);
            dot += dp[j] * g[j];
        }
        if (c->normalize)
            for (int64_t j = 0; j < k; j++) dp[j] = (dp[j] - dot) / s;
        double pd = 0;
        for (int64_t j = 0; j < k; j++) pd += dp[j] * p[idx[r * k + j]];
        /* dlogits_e = p_e (dp_e - sum_j p_j dp_j), dp_e = 0 for an expert not picked */
        for (int64_t e = 0; e < E; e++) {
            double d = 0;
            for (int64_t j = 0; j < k; j++)
                if (idx[r * k + j] == e) d += dp[j];
            double v = hk_ld(c->dlogits->data, c->dlogits->dtype, r * E + e) + p[e] * (d - pd);
            hk_st(c->dlogits->data, c->dlogits->dtype, r * E + e, (float)v);
        }
    }
}

size_t hk_moe_gate_workspace_bytes(const HkTensor *logits, const HkTensor *idx) {
    int64_t R = lead_rows(logits), units = (R + MOE_ROWS_PER_UNIT - 1) / MOE_ROWS_PER_UNIT;
    return hk_align((size_t)units * (size_t)(last_dim(logits) + 2 * last_dim(idx)) * sizeof(double));
}

static int gate_run(GateCtx *c, void *ws) {
    if (!ws) return HK_ERR_WORKSPACE;
    int64_t R = lead_rows(c->logits);
    c->per = MOE_ROWS_PER_UNIT;
    c->scratch = ws;
    c->E = last_dim(c->logits);
    c->k = last_dim(c->idx);
    int64_t units = (R + c->per - 1) / c->per;
    hk_parallel(hk_team((double)R * (double)c->E * 20), units, gate_unit, c);
    return c->rc;
}

int hk_moe_gate_fwd(const HkTensor *logits, const HkTensor *idx, HkTensor *y, bool normalize, void *ws) {
    int rc = gate_check(logits, idx, y);
    if (rc) return rc;
    GateCtx c = {.logits = logits, .idx = idx, .y = y, .normalize = normalize};
    return gate_run(&c, ws);
}

int hk_moe_gate_bwd(const HkTensor *logits, const HkTensor *idx, const HkTensor *dy, HkTensor *dlogits,
                    bool normalize, void *ws) {
    int rc = gate_check(logits, idx, dy);
    if (rc) return rc;
    if (!hk_present(dlogits)) return HK_OK;
    if (!hk_is_float(dlogits)) return HK_ERR_DTYPE;
    if (hk_numel(dlogits) != hk_numel(logits)) return HK_ERR_SHAPE;
    GateCtx c = {.logits = logits, .idx = idx, .dy = dy, .dlogits = dlogits, .normalize = normalize};
    return gate_run(&c, ws);
}

/* ---- moe_expert ---- */

/* x [R, I] (shared by a row's k slots) or [R*k, I]; idx [R, k]; w [E, O, I]; y [R*k, O].
 * Tiled by expert, w holds experts [e0, e0 + E) of `all`. */
typedef struct ExpShape {
    int64_t R, k, E, O, I, e0, all;
    bool shared; /* x has a row per token, not per (token, slot) */
} ExpShape;

static int expert_shape(const HkTensor *x, const HkTensor *idx, const HkTensor *w, const HkTensor *y, ExpShape *s) {
    if (!hk_present(x) || !hk_present(idx) || !hk_present(w) || !hk_present(y)) return HK_ERR_ARG;
    if (!hk_is_float(x) || !hk_is_float(w) || !hk_is_float(y)) return HK_ERR_DTYPE;
    if (idx->dtype != DT_I32) return HK_ERR_DTYPE;
    if (w->rank != 3 || idx->rank < 1 || x->rank < 1) return HK_ERR_SHAPE;
    s->k = last_dim(idx);
    s->R = hk_numel(idx) / (s->k ? s->k : 1);
    s->E = w->dims[0];
    s->e0 = 0;
    s->all = s->E;
    s->O = w->dims[1];
    s->I = w->dims[2];
    if (last_dim(x) != s->I) return HK_ERR_SHAPE;
    int64_t xr = lead_rows(x);
    if (xr == s->R) s->shared = true;
    else if (xr == s->R * s->k) s->shared = false;
    else return HK_ERR_SHAPE;
    if (hk_numel(y) != s->R * s->k * s->O) return HK_ERR_SHAPE;
    return HK_OK;
}

/* Bytes of the expert kernels' workspace: fp32 views of x, w, y (dy) and of
 * the two gradients, the routing lists, and the gather blocks of R rows. */
static size_t expert_ws(const ExpShape *s, const HkTensor *x, const HkTensor *w, DType ydt) {
    HkTensor yv = {.data = (void *)1, .dtype = ydt, .rank = 1, .dims = {s->R * s->k * s->O}};
    size_t b = 2 * hk_f32_copy_bytes(x) + 2 * hk_f32_copy_bytes(w) + hk_f32_copy_bytes(&yv);
    b += hk_align((size_t)(s->R * s->k) * sizeof(int32_t)) + hk_align((size_t)(s->E + 1) * sizeof(int64_t));
    b += hk_align((size_t)s->R * (size_t)(2 * s->I + s->O) * sizeof(float));
    return b;
}

size_t hk_moe_expert_workspace_bytes(const HkTensor *x, const HkTensor *idx, const HkTensor *w, const HkTensor *y) {
    ExpShape s;
    HkTensor yy = {.data = (void *)1, .dtype = y && hk_is_float(y) ? y->dtype : x->dtype, .rank = 1, .dims = {0}};
    if (!hk_present(x) || !hk_present(idx) || !hk_present(w) || w->rank != 3) return 0;
    yy.dims[0] = hk_numel(idx) * w->dims[1];
    if (expert_shape(x, idx, w, &yy, &s)) return 0;
    return expert_ws(&s, x, w, yy.dtype);
}

/* The (row, slot) pairs p = r k + j listed by expert: order[start[e] .. start[e+1])
 * for the experts e0 + e of w (a tile's: the pairs routed elsewhere are left out). */
static int expert_group(const ExpShape *s, const int32_t *idx, int32_t *order, int64_t *start) {
    int64_t n = s->R * s->k;
    memset(start, 0, (size_t)(s->E + 1) * sizeof *start);
    for (int64_t p = 0; p < n; p++) {
        if (idx[p] < 0 || idx[p] >= s->all) return HK_ERR_INDEX;
        if (idx[p] >= s->e0 && idx[p] < s->e0 + s->E) start[idx[p] - s->e0 + 1]++;
    }
    for (int64_t e = 0; e < s->E; e++) start[e + 1] += start[e];
    /* fill in row order: start[e] walks forward, then is restored */
    for (int64_t p = 0; p < n; p++)
        if (idx[p] >= s->e0 && idx[p] < s->e0 + s->E) order[start[idx[p] - s->e0]++] = (int32_t)p;
    for (int64_t e = s->E; e > 0; e--) start[e] = start[e - 1];
    start[0] = 0;
    return HK_OK;
}

typedef struct ExpWs {
    HkWs w;
    int32_t *order;
    int64_t *start;
    float *xb, *yb, *gb; /* gather blocks: [R, I], [R, O], [R, I] */
} ExpWs;

static void expert_ws_take(const ExpShape *s, ExpWs *x) {
    x->order = (int32_t *)(x->w.base + x->w.used);
    x->w.used += hk_align((size_t)(s->R * s->k) * sizeof(int32_t));
    x->start = (int64_t *)(x->w.base + x->w.used);
    x->w.used += hk_align((size_t)(s->E + 1) * sizeof(int64_t));
    x->xb = (float *)(x->w.base + x->w.used);
    x->yb = x->xb + s->R * s->I;
    x->gb = x->yb + s->R * s->O;
    x->w.used += hk_align((size_t)s->R * (size_t)(2 * s->I + s->O) * sizeof(float));
}

static int64_t src_row(const ExpShape *s, int32_t p) { return s->shared ? p / s->k : p; }

/* A tile of experts [e0, e0 + w's E) of `all`: checked, else HK_ERR_SHAPE. */
static int expert_tile(ExpShape *s, int64_t e0, int64_t all) {
    if (e0 < 0 || all < s->E || e0 > all - s->E) return HK_ERR_SHAPE;
    s->e0 = e0;
    s->all = all;
    return HK_OK;
}

int hk_moe_expert_fwd(const HkTensor *x, const HkTensor *idx, const HkTensor *w, HkTensor *y, void *ws) {
    return hk_moe_expert_fwd_tile(x, idx, w, 0, w && w->rank == 3 ? w->dims[0] : 0, y, ws);
}

int hk_moe_expert_fwd_tile(const HkTensor *x, const HkTensor *idx, const HkTensor *w, int64_t e0, int64_t all, HkTensor *y,
                           void *ws) {
    ExpShape s;
    int rc = expert_shape(x, idx, w, y, &s);
    if (rc || (rc = expert_tile(&s, e0, all))) return rc;
    if (!ws) return HK_ERR_WORKSPACE;
    ExpWs W = {.w = {ws, 0}};
    expert_ws_take(&s, &W);
    if ((rc = expert_group(&s, idx->data, W.order, W.start))) return rc;
    const float *X = hk_view_in(x, &W.w), *Wt = hk_view_in(w, &W.w);
    /* a tile writes its experts' rows only: the other tiles' stay */
    float *Y = hk_view_out(y, &W.w, s.E < s.all);
    for (int64_t e = 0; e < s.E; e++)
        for (int64_t b = W.start[e]; b < W.start[e + 1]; b += s.R) {
            int64_t n = W.start[e + 1] - b < s.R ? W.start[e + 1] - b : s.R;
            for (int64_t i = 0; i < n; i++) memcpy(W.xb + i * s.I, X + src_row(&s, W.order[b + i]) * s.I, (size_t)s.I * sizeof(float));
            /* [n, O] = [n, I] [O, I]^T */
            hk_sgemm(false, true, n, s.O, s.I, W.xb, Wt + e * s.O * s.I, 0.0f, W.yb);
            for (int64_t i = 0; i < n; i++) memcpy(Y + (int64_t)W.order[b + i] * s.O, W.yb + i * s.O, (size_t)s.O * sizeof(float));
        }
    hk_view_done(y, Y);
    return HK_OK;
}

int hk_moe_expert_bwd(const HkTensor *x, const HkTensor *idx, const HkTensor *w, const HkTensor *dy, HkTensor *dx,
                      HkTensor *dw, void *ws) {
    return hk_moe_expert_bwd_tile(x, idx, w, 0, w && w->rank == 3 ? w->dims[0] : 0, dy, dx, dw, ws);
}

int hk_moe_expert_bwd_tile(const HkTensor *x, const HkTensor *idx, const HkTensor *w, int64_t e0, int64_t all,
                           const HkTensor *dy, HkTensor *dx, HkTensor *dw, void *ws) {
    ExpShape s;
    int rc = expert_shape(x, idx, w, dy, &s);
    if (rc || (rc = expert_tile(&s, e0, all))) return rc;
    bool wx = hk_present(dx), ww = hk_present(dw);
    if ((wx && (!hk_is_float(dx) || hk_numel(dx) != hk_numel(x))) || (ww && (!hk_is_float(dw) || hk_numel(dw) != hk_numel(w))))
        return wx && !hk_is_float(dx) ? HK_ERR_DTYPE : HK_ERR_SHAPE;
    if (!wx && !ww) return HK_OK;
    if (!ws) return HK_ERR_WORKSPACE;
    ExpWs W = {.w = {ws, 0}};
    expert_ws_take(&s, &W);
    if ((rc = expert_group(&s, idx->data, W.order, W.start))) return rc;
    const float *X = hk_view_in(x, &W.w), *Wt = hk_view_in(w, &W.w), *dY = hk_view_in(dy, &W.w);
    float *dX = wx ? hk_view_out(dx, &W.w, true) : NULL, *dW = ww ? hk_view_out(dw, &W.w, true) : NULL;
    for (int64_t e = 0; e < s.E; e++)
        for (int64_t b = W.start[e]; b < W.start[e + 1]; b += s.R) {
            int64_t n = W.start[e + 1] - b < s.R ? W.start[e + 1] - b : s.R;
            for (int64_t i = 0; i < n; i++) memcpy(W.yb + i * s.O, dY + (int64_t)W.order[b + i] * s.O, (size_t)s.O * sizeof(float));
            if (ww) {
                for (int64_t i = 0; i < n; i++)
                    memcpy(W.xb + i * s.I, X + src_row(&s, W.order[b + i]) * s.I, (size_t)s.I * sizeof(float));
                /* dW_e [O, I] += dY_e^T [O, n] X_e [n, I] */
                hk_sgemm(true, false, s.O, s.I, n, W.yb, W.xb, 1.0f, dW + e * s.O * s.I);
            }
            if (wx) {
                /* dX_e [n, I] = dY_e [n, O] W_e [O, I], added to the rows it came from */
                hk_sgemm(false, false, n, s.I, s.O, W.yb, Wt + e * s.O * s.I, 0.0f, W.gb);
                for (int64_t i = 0; i < n; i++) {
                    float *d = dX + src_row(&s, W.order[b + i]) * s.I;
                    const float *g = W.gb + i * s.I;
                    for (int64_t c = 0; c < s.I; c++) d[c] += g[c];
                }
            }
        }
    if (ww) hk_view_done(dw, dW);
    if (wx) hk_view_done(dx, dX);
    return HK_OK;
}

/* ---- moe_combine ---- */

typedef struct CombCtx {
    const HkTensor *o, *wt, *dy;
    HkTensor *y, *dout, *dwt;
    int64_t R, k, D;
} CombCtx;

static void comb_unit(void *vctx, int64_t r) {
    CombCtx *c = vctx;
    int64_t k = c->k, D = c->D;
    if (!c->dy) {
        for (int64_t d = 0; d < D; d++) {
            double acc = 0;
            for (int64_t j = 0; j < k; j++)
                acc += (double)hk_ld(c->wt->data, c->wt->dtype, r * k + j) * hk_ld(c->o->data, c->o->dtype, (r * k + j) * D + d);
            hk_st(c->y->data, c->y->dtype, r * D + d, (float)acc);
        }
        return;
    }
    for (int64_t j = 0; j < k; j++) {
        float g = hk_ld(c->wt->data, c->wt->dtype, r * k + j);
        double dot = 0;
        for (int64_t d = 0; d < D; d++) {
            float dyv = hk_ld(c->dy->data, c->dy->dtype, r * D + d);
            int64_t at = (r * k + j) * D + d;
            dot += (double)dyv * hk_ld(c->o->data, c->o->dtype, at);
            if (c->dout) hk_st(c->dout->data, c->dout->dtype, at, hk_ld(c->dout->data, c->dout->dtype, at) + g * dyv);
        }
        if (c->dwt)
            hk_st(c->dwt->data, c->dwt->dtype, r * k + j, (float)(hk_ld(c->dwt->data, c->dwt->dtype, r * k + j) + dot));
    }
}

static int comb_check(const HkTensor *o, const HkTensor *wt, const HkTensor *y, CombCtx *c) {
    if (!hk_present(o) || !hk_present(wt) || !hk_present(y)) return HK_ERR_ARG;
    if (!hk_is_float(o) || !hk_is_float(wt) || !hk_is_float(y)) return HK_ERR_DTYPE;
    if (o->rank < 2) return HK_ERR_SHAPE;
    c->D = last_dim(o);
    c->k = o->dims[o->rank - 2];
    c->R = c->D > 0 && c->k > 0 ? hk_numel(o) / (c->D * c->k) : 0;
    if (hk_numel(wt) != c->R * c->k || hk_numel(y) != c->R * c->D) return HK_ERR_SHAPE;
    return HK_OK;
}

int hk_moe_combine_fwd(const HkTensor *o, const HkTensor *wt, HkTensor *y) {
    CombCtx c = {.o = o, .wt = wt, .y = y};
    int rc = comb_check(o, wt, y, &c);
    if (rc) return rc;
    hk_parallel(hk_team((double)c.R * (double)c.k * (double)c.D * 2), c.R, comb_unit, &c);
    return HK_OK;
}

int hk_moe_combine_bwd(const HkTensor *o, const HkTensor *wt, const HkTensor *dy, HkTensor *dout, HkTensor *dwt) {
    CombCtx c = {.o = o, .wt = wt, .dy = dy, .dout = hk_present(dout) ? dout : NULL, .dwt = hk_present(dwt) ? dwt : NULL};
    int rc = comb_check(o, wt, dy, &c);
    if (rc) return rc;
    if ((c.dout && (!hk_is_float(c.dout) || hk_numel(c.dout) != hk_numel(o))) ||
        (c.dwt && (!hk_is_float(c.dwt) || hk_numel(c.dwt) != hk_numel(wt))))
        return HK_ERR_SHAPE;
    if (!c.dout && !c.dwt) return HK_OK;
    hk_parallel(hk_team((double)c.R * (double)c.k * (double)c.D * 4), c.R, comb_unit, &c);
    return HK_OK;
}

/* ---- moe_load, moe_balance ---- */

size_t hk_moe_load_workspace_bytes(const HkTensor *logits) {
    return logits && hk_present(logits) ? hk_align((size_t)(2 * last_dim(logits)) * sizeof(double)) : 0;
}

int hk_moe_load_fwd(const HkTensor *logits, const HkTensor *idx, const HkTensor *acc, HkTensor *y, void *ws) {
    if (!hk_present(y)) return HK_ERR_ARG;
    if (y->dtype != DT_F32 || hk_numel(y) % 2) return HK_ERR_SHAPE;
    int64_t E = hk_numel(y) / 2;
    float *Y = y->data;
    if (hk_present(acc)) {
        if (acc->dtype != DT_F32 || hk_numel(acc) != 2 * E) return HK_ERR_SHAPE;
        if (acc->data != y->data) memcpy(Y, acc->data, (size_t)(2 * E) * sizeof(float));
    } else {
        memset(Y, 0, (size_t)(2 * E) * sizeof(float));
    }
    if (!hk_present(logits)) return hk_present(idx) ? HK_ERR_ARG : HK_OK; /* moe_load(experts = E): zeros */
    if (!hk_is_float(logits)) return HK_ERR_DTYPE;
    int rc = idx_rows(logits, idx);
    if (rc) return rc;
    if (last_dim(logits) != E) return HK_ERR_SHAPE;
    if (!ws) return HK_ERR_WORKSPACE;
    double *p = ws, *sum = p + E;
    int64_t R = lead_rows(logits), k = last_dim(idx);
    const int32_t *ix = idx->data;
    memset(sum, 0, (size_t)E * sizeof(double));
    for (int64_t r = 0; r < R; r++) {
        softmax_row(logits, r, E, p);
        for (int64_t e = 0; e < E; e++) sum[e] += p[e];
        for (int64_t j = 0; j < k; j++) {
            if (ix[r * k + j] < 0 || ix[r * k + j] >= E) return HK_ERR_INDEX;
            Y[ix[r * k + j]] += 1.0f; /* counts: exact in f32 up to 2^24 */
        }
    }
    for (int64_t e = 0; e < E; e++) Y[E + e] = (float)((double)Y[E + e] + sum[e]);
    return HK_OK;
}

/* dlogits[r, e] += p_e (dS_e - sum_e' p_e' dS_e') with dS = dy[1]; dacc += dy. The
 * counts (row 0) are a choice: no gradient flows through them. */
int hk_moe_load_bwd(const HkTensor *logits, const HkTensor *dy, HkTensor *dlogits, HkTensor *dacc, void *ws) {
    if (!hk_present(dy) || dy->dtype != DT_F32 || hk_numel(dy) % 2) return HK_ERR_SHAPE;
    int64_t E = hk_numel(dy) / 2;
    const float *dY = dy->data;
    if (hk_present(dacc)) {
        if (dacc->dtype != DT_F32 || hk_numel(dacc) != 2 * E) return HK_ERR_SHAPE;
        float *d = dacc->data;
        for (int64_t i = 0; i < 2 * E; i++) d[i] += dY[i];
    }
    if (!hk_present(dlogits)) return HK_OK;
    if (!hk_present(logits) || !hk_is_float(logits) || !hk_is_float(dlogits)) return HK_ERR_DTYPE;
    if (last_dim(logits) != E || hk_numel(dlogits) != hk_numel(logits)) return HK_ERR_SHAPE;
    if (!ws) return HK_ERR_WORKSPACE;
    double *p = ws;
    int64_t R = lead_rows(logits);
    for (int64_t r = 0; r < R; r++) {
        softmax_row(logits, r, E, p);
        double pd = 0;
        for (int64_t e = 0; e < E; e++) pd += p[e] * dY[E + e];
        for (int64_t e = 0; e < E; e++) {
            double v = hk_ld(dlogits->data, dlogits->dtype, r * E + e) + p[e] * (dY[E + e] - pd);
            hk_st(dlogits->data, dlogits->dtype, r * E + e, (float)v);
        }
    }
    return HK_OK;
}

int hk_moe_balance_fwd(const HkTensor *load, HkTensor *y, double scale) {
    if (!hk_present(load) || !hk_present(y)) return HK_ERR_ARG;
    if (load->dtype != DT_F32 || hk_numel(load) % 2 || y->dtype != DT_F32 || hk_numel(y) != 1) return HK_ERR_SHAPE;
    int64_t E = hk_numel(load) / 2;
    const float *L = load->data;
    double s = 0;
    for (int64_t e = 0; e < E; e++) s += (double)L[e] * L[E + e];
    ((float *)y->data)[0] = (float)(scale * s);
    return HK_OK;
}

int hk_moe_balance_bwd(const HkTensor *load, const HkTensor *dy, HkTensor *dload, double scale) {
    if (!hk_present(load) || !hk_present(dy)) return HK_ERR_ARG;
    if (!hk_present(dload)) return HK_OK;
    if (load->dtype != DT_F32 || dload->dtype != DT_F32 || hk_numel(dload) != hk_numel(load) || hk_numel(load) % 2)
        return HK_ERR_SHAPE;
    int64_t E = hk_numel(load) / 2;
    const float *L = load->data;
    float *d = dload->data, g = hk_get(dy, 0);
    for (int64_t e = 0; e < E; e++) d[E + e] += (float)(scale * L[e] * g);
    return HK_OK;
}

/* ---- moe_shared_gate ---- */

typedef struct SgCtx {
    const HkTensor *y, *g, *dout;
    HkTensor *out, *dy, *dg;
    int64_t D;
} SgCtx;

static void sg_unit(void *vctx, int64_t r) {
    SgCtx *c = vctx;
    int64_t D = c->D;
    double s = 1 / (1 + exp(-(double)hk_ld(c->g->data, c->g->dtype, r)));
    if (!c->dout) {
        for (int64_t d = 0; d < D; d++)
            hk_st(c->out->data, c->out->dtype, r * D + d, (float)(s * hk_ld(c->y->data, c->y->dtype, r * D + d)));
        return;
    }
    double dot = 0;
    for (int64_t d = 0; d < D; d++) {
        float o = hk_ld(c->dout->data, c->dout->dtype, r * D + d);
        dot += (double)o * hk_ld(c->y->data, c->y->dtype, r * D + d);
        if (c->dy) hk_st(c->dy->data, c->dy->dtype, r * D + d, (float)(hk_ld(c->dy->data, c->dy->dtype, r * D + d) + s * o));
    }
    if (c->dg) hk_st(c->dg->data, c->dg->dtype, r, (float)(hk_ld(c->dg->data, c->dg->dtype, r) + dot * s * (1 - s)));
}

static int sg_check(const HkTensor *y, const HkTensor *g, const HkTensor *o, int64_t *D) {
    if (!hk_present(y) || !hk_present(g) || !hk_present(o)) return HK_ERR_ARG;
    if (!hk_is_float(y) || !hk_is_float(g) || !hk_is_float(o)) return HK_ERR_DTYPE;
    *D = last_dim(y);
    if (hk_numel(g) != lead_rows(y) || hk_numel(o) != hk_numel(y)) return HK_ERR_SHAPE;
    return HK_OK;
}

int hk_moe_shared_gate_fwd(const HkTensor *y, const HkTensor *logit, HkTensor *out) {
    SgCtx c = {.y = y, .g = logit, .out = out};
    int rc = sg_check(y, logit, out, &c.D);
    if (rc) return rc;
    hk_parallel(hk_team((double)hk_numel(y) * 2), lead_rows(y), sg_unit, &c);
    return HK_OK;
}

int hk_moe_shared_gate_bwd(const HkTensor *y, const HkTensor *logit, const HkTensor *dout, HkTensor *dy, HkTensor *dlogit) {
    SgCtx c = {.y = y, .g = logit, .dout = dout, .dy = hk_present(dy) ? dy : NULL, .dg = hk_present(dlogit) ? dlogit : NULL};
    int rc = sg_check(y, logit, dout, &c.D);
    if (rc) return rc;
    if ((c.dy && (!hk_is_float(c.dy) || hk_numel(c.dy) != hk_numel(y))) ||
        (c.dg && (!hk_is_float(c.dg) || hk_numel(c.dg) != hk_numel(logit))))
        return HK_ERR_SHAPE;
    if (!c.dy && !c.dg) return HK_OK;
    hk_parallel(hk_team((double)hk_numel(y) * 4), lead_rows(y), sg_unit, &c);
    return HK_OK;
}

/* ---- family (runtime/plan/prim.def) ---- */

static size_t fam_moe_ws(const HkCall *c) {
    switch (c->prim) {
    case PRIM_MOE_GATE: return c->b ? hk_moe_gate_workspace_bytes(c->a, c->b) : 0;
    case PRIM_MOE_EXPERT: return c->b && c->c ? hk_moe_expert_workspace_bytes(c->a, c->b, c->c, c->y) : 0;
    case PRIM_MOE_LOAD: return hk_moe_load_workspace_bytes(c->a);
    default: return 0;
    }
}

static int fam_moe_fwd(const HkCall *c) {
    switch (c->prim) {
    case PRIM_MOE_TOPK: return hk_moe_topk_fwd(c->a, &c->out[0]);
    case PRIM_MOE_GATE: return hk_moe_gate_fwd(c->a, c->b, &c->out[0], hk_attr_flag(c->iattr, IA_MOE_GATE_NORMALIZE), c->ws);
    case PRIM_MOE_EXPERT: return hk_moe_expert_fwd(c->a, c->b, c->c, &c->out[0], c->ws);
    case PRIM_MOE_COMBINE: return hk_moe_combine_fwd(c->a, c->b, &c->out[0]);
    case PRIM_MOE_LOAD: return hk_moe_load_fwd(c->a, c->b, c->c, &c->out[0], c->ws);
    case PRIM_MOE_BALANCE: return hk_moe_balance_fwd(c->a, &c->out[0], c->fattr ? c->fattr[FA_MOE_BALANCE_SCALE] : 1.0);
    case PRIM_MOE_SHARED_GATE: return hk_moe_shared_gate_fwd(c->a, c->b, &c->out[0]);
    default: return HK_ERR_PRIM;
    }
}

static int fam_moe_bwd(const HkCall *c) {
    switch (c->prim) {
    case PRIM_MOE_TOPK: return HK_OK; /* an integer choice: nothing flows back */
    case PRIM_MOE_GATE:
        return hk_moe_gate_bwd(c->a, c->b, c->dy, c->da, hk_attr_flag(c->iattr, IA_MOE_GATE_NORMALIZE), c->ws);
    case PRIM_MOE_EXPERT: return hk_moe_expert_bwd(c->a, c->b, c->c, c->dy, c->da, c->dc, c->ws);
    case PRIM_MOE_COMBINE: return hk_moe_combine_bwd(c->a, c->b, c->dy, c->da, c->db);
    case PRIM_MOE_LOAD: return hk_moe_load_bwd(c->a, c->dy, c->da, c->dc, c->ws);
    case PRIM_MOE_BALANCE: return hk_moe_balance_bwd(c->a, c->dy, c->da, c->fattr ? c->fattr[FA_MOE_BALANCE_SCALE] : 1.0);
    case PRIM_MOE_SHARED_GATE: return hk_moe_shared_gate_bwd(c->a, c->b, c->dy, c->da, c->db);
    default: return HK_ERR_PRIM;
    }
}

const HkFamily hk_family_moe = {fam_moe_fwd, fam_moe_bwd, fam_moe_ws};
