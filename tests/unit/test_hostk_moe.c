/* hostk_moe: the mixture-of-experts kernels against float64 references
 * written plainly here (a loop per output, no grouping), their backwards
 * against central finite differences of those references, the routing
 * against sorting, and the load statistics against their closed form.
 * Routings that matter: an expert with no row, one expert taking every row,
 * and an idx naming one expert twice in a row (more rows for it than the
 * gather block holds: run in blocks). Error measure as test_hostk.c's:
 * max |got - want| / max |want|, f32 tolerance 1e-5; FD step 1e-4 on the
 * float64 reference. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "hostk.h"
#include "hostk_threads.h"

static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 2654435761u + 12345; }
static double rng_unif(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static float *rnd(int64_t n, double s) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(rng_unif() * s);
    return p;
}

static HkTensor t2(void *d, DType dt, int64_t a, int64_t b) {
    int64_t dims[2] = {a, b};
    return hk_tensor(d, dt, 2, dims);
}
static HkTensor t3(void *d, DType dt, int64_t a, int64_t b, int64_t c) {
    int64_t dims[3] = {a, b, c};
    return hk_tensor(d, dt, 3, dims);
}

/* max |got - want| / max |want| */
static double relerr(const float *got, const double *want, int64_t n) {
    double e = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return e / m;
}

static void *ws_for(size_t n) { return calloc(1, n ? n : 64); }

/* ---- float64 references ---- */

static void ref_softmax(const double *l, int64_t E, double *p) {
    double mx = l[0], s = 0;
    for (int64_t e = 1; e < E; e++) mx = fmax(mx, l[e]);
    for (int64_t e = 0; e < E; e++) s += p[e] = exp(l[e] - mx);
    for (int64_t e = 0; e < E; e++) p[e] /= s;
}

static void ref_gate(const double *logits, const int32_t *idx, int64_t R, int64_t E, int64_t k, bool norm, double *y) {
    double p[64];
    for (int64_t r = 0; r < R; r++) {
        ref_softmax(logits + r * E, E, p);
        double s = 0;
        for (int64_t j = 0; j < k; j++) s += y[r * k + j] = p[idx[r * k + j]];
        if (norm)
            for (int64_t j = 0; j < k; j++) y[r * k + j] /= s;
    }
}

/* y[r, j, o] = sum_i w[idx[r, j], o, i] x[r (, j), i] */
static void ref_expert(const double *x, const int32_t *idx, const double *w, int64_t R, int64_t k, int64_t O, int64_t I,
                       bool shared, double *y) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t o = 0; o < O; o++) {
                const double *xr = x + (shared ? r : r * k + j) * I, *wr = w + ((int64_t)idx[r * k + j] * O + o) * I;
                double a = 0;
                for (int64_t i = 0; i < I; i++) a += wr[i] * xr[i];
                y[(r * k + j) * O + o] = a;
            }
}

static void ref_combine(const double *o, const double *wt, int64_t R, int64_t k, int64_t D, double *y) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t d = 0; d < D; d++) {
            double a = 0;
            for (int64_t j = 0; j < k; j++) a += wt[r * k + j] * o[(r * k + j) * D + d];
            y[r * D + d] = a;
        }
}

static double *to_d(const float *p, int64_t n) {
    double *d = malloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = p[i];
    return d;
}

/* d/dv of sum(dy * f(v)) by central differences, f a reference over the array v. */
typedef void (*RefFn)(void *ctx, double *out);
static void fd_grad(double *v, int64_t n, const double *dy, int64_t ny, RefFn f, void *ctx, double *g) {
    double *yp = malloc((size_t)ny * sizeof *yp), *ym = malloc((size_t)ny * sizeof *ym);
    const double h = 1e-4;
    for (int64_t i = 0; i < n; i++) {
        double s = v[i];
        v[i] = s + h;
        f(ctx, yp);
        v[i] = s - h;
        f(ctx, ym);
        v[i] = s;
        double a = 0;
        for (int64_t q = 0; q < ny; q++) a += dy[q] * (yp[q] - ym[q]);
        g[i] = a / (2 * h);
    }
    free(yp);
    free(ym);
}

/* ---- moe_topk ---- */

START_TEST(test_topk) {
    rng_seed(1);
    enum { R = 9, E = 6, K = 3 };
    float *l = rnd(R * E, 2);
    /* ties in row 0: the lower expert first */
    for (int e = 0; e < E; e++) l[e] = e == 4 ? 1.0f : 0.5f;
    int32_t idx[R * K];
    HkTensor L = t2(l, DT_F32, R, E), I = t2(idx, DT_I32, R, K);
    ck_assert_int_eq(hk_moe_topk_fwd(&L, &I), HK_OK);
    ck_assert_int_eq(idx[0], 4);
    ck_assert_int_eq(idx[1], 0);
    ck_assert_int_eq(idx[2], 1);
    for (int r = 1; r < R; r++) {
        /* the k picked are the k largest, largest first, distinct */
        for (int j = 0; j < K; j++) {
            int above = 0;
            for (int e = 0; e < E; e++) above += l[r * E + e] > l[r * E + idx[r * K + j]];
            ck_assert_int_eq(above, j);
        }
    }
    /* k larger than the experts */
    int32_t big[R * 7];
    HkTensor Ib = t2(big, DT_I32, R, 7);
    ck_assert_int_eq(hk_moe_topk_fwd(&L, &Ib), HK_ERR_ATTR);
    free(l);
}
END_TEST

/* ---- moe_gate ---- */

typedef struct GateRef {
    double *logits;
    const int32_t *idx;
    int64_t R, E, k;
    bool norm;
} GateRef;
static void gate_fn(void *c, double *out) {
    GateRef *g = c;
    ref_gate(g->logits, g->idx, g->R, g->E, g->k, g->norm, out);
}

START_TEST(test_gate) {
    for (int norm = 0; norm < 2; norm++) {
        rng_seed(2 + (uint64_t)norm);
        enum { R = 7, E = 5, K = 2 };
        float *l = rnd(R * E, 2), *dy = rnd(R * K, 1), *dl = rnd(R * E, 1), y[R * K];
        int32_t idx[R * K];
        HkTensor L = t2(l, DT_F32, R, E), I = t2(idx, DT_I32, R, K), Y = t2(y, DT_F32, R, K);
        HkTensor DY = t2(dy, DT_F32, R, K), DL = t2(dl, DT_F32, R, E);
        ck_assert_int_eq(hk_moe_topk_fwd(&L, &I), HK_OK);
        void *ws = ws_for(hk_moe_gate_workspace_bytes(&L, &I));
        ck_assert_int_eq(hk_moe_gate_fwd(&L, &I, &Y, norm, ws), HK_OK);
        GateRef g = {to_d(l, R * E), idx, R, E, K, norm};
        double want[R * K], gl[R * E], *dyd = to_d(dy, R * K), *dl0 = to_d(dl, R * E);
        gate_fn(&g, want);
        ck_assert_msg(relerr(y, want, R * K) < 1e-5, "gate fwd normalize=%d: %g", norm, relerr(y, want, R * K));
        if (norm) {
            double s = 0;
            for (int j = 0; j < K; j++) s += y[j];
            ck_assert(fabs(s - 1) < 1e-6);
        }
        ck_assert_int_eq(hk_moe_gate_bwd(&L, &I, &DY, &DL, norm, ws), HK_OK);
        fd_grad(g.logits, R * E, dyd, R * K, gate_fn, &g, gl);
        for (int i = 0; i < R * E; i++) gl[i] += dl0[i];
        ck_assert_msg(relerr(dl, gl, R * E) < 1e-5, "gate bwd normalize=%d: %g", norm, relerr(dl, gl, R * E));
        free(l), free(dy), free(dl), free(ws), free(g.logits), free(dyd), free(dl0);
    }
}
END_TEST

/* ---- moe_expert ---- */

typedef struct ExpRef {
    double *x, *w;
    const int32_t *idx;
    int64_t R, k, O, I;
    bool shared;
} ExpRef;
static void exp_fn(void *c, double *out) {
    ExpRef *e = c;
    ref_expert(e->x, e->idx, e->w, e->R, e->k, e->O, e->I, e->shared, out);
}

/* One routing: fwd, and dx, dw against FD (they accumulate onto random values). */
static void check_expert(const int32_t *idx, int64_t R, int64_t k, int64_t E, int64_t O, int64_t I, bool shared,
                         const char *what) {
    int64_t nx = (shared ? R : R * k) * I, nw = E * O * I, ny = R * k * O;
    float *x = rnd(nx, 1), *w = rnd(nw, 0.5), *y = calloc((size_t)ny, sizeof *y), *dy = rnd(ny, 1);
    float *dx = rnd(nx, 1), *dw = rnd(nw, 1);
    int32_t *ix = malloc((size_t)(R * k) * sizeof *ix);
    memcpy(ix, idx, (size_t)(R * k) * sizeof *ix);
    HkTensor X = shared ? t2(x, DT_F32, R, I) : t3(x, DT_F32, R, k, I), Ix = t2(ix, DT_I32, R, k);
    HkTensor W = t3(w, DT_F32, E, O, I), Y = t3(y, DT_F32, R, k, O), DY = t3(dy, DT_F32, R, k, O);
    HkTensor DX = shared ? t2(dx, DT_F32, R, I) : t3(dx, DT_F32, R, k, I), DW = t3(dw, DT_F32, E, O, I);
    void *ws = ws_for(hk_moe_expert_workspace_bytes(&X, &Ix, &W, &Y));
    ck_assert_int_eq(hk_moe_expert_fwd(&X, &Ix, &W, &Y, ws), HK_OK);
    ExpRef r = {to_d(x, nx), to_d(w, nw), ix, R, k, O, I, shared};
    double *want = malloc((size_t)ny * sizeof *want);
    exp_fn(&r, want);
    ck_assert_msg(relerr(y, want, ny) < 1e-5, "%s: expert fwd %g", what, relerr(y, want, ny));
    double *dx0 = to_d(dx, nx), *dw0 = to_d(dw, nw), *dyd = to_d(dy, ny);
    double *gx = malloc((size_t)nx * sizeof *gx), *gw = malloc((size_t)nw * sizeof *gw);
    ck_assert_int_eq(hk_moe_expert_bwd(&X, &Ix, &W, &DY, &DX, &DW, ws), HK_OK);
    fd_grad(r.x, nx, dyd, ny, exp_fn, &r, gx);
    fd_grad(r.w, nw, dyd, ny, exp_fn, &r, gw);
    for (int64_t i = 0; i < nx; i++) gx[i] += dx0[i];
    for (int64_t i = 0; i < nw; i++) gw[i] += dw0[i];
    ck_assert_msg(relerr(dx, gx, nx) < 1e-5, "%s: expert dx %g", what, relerr(dx, gx, nx));
    ck_assert_msg(relerr(dw, gw, nw) < 1e-5, "%s: expert dw %g", what, relerr(dw, gw, nw));
    free(x), free(w), free(y), free(dy), free(dx), free(dw), free(ix), free(ws), free(r.x), free(r.w), free(want);
    free(dx0), free(dw0), free(dyd), free(gx), free(gw);
}

START_TEST(test_expert) {
    rng_seed(3);
    enum { R = 6, K = 2, E = 4, O = 5, I = 7 };
    /* expert 3 gets no row; expert 0 every row */
    int32_t some[R * K] = {0, 1, 0, 2, 1, 0, 0, 2, 2, 0, 0, 1};
    check_expert(some, R, K, E, O, I, true, "shared x");
    check_expert(some, R, K, E, O, I, false, "x per slot");
    /* every slot to expert 1: 12 rows of one expert, in blocks of R = 6 */
    int32_t one[R * K];
    for (int i = 0; i < R * K; i++) one[i] = 1;
    check_expert(one, R, K, E, O, I, true, "one expert twice a row");
    /* an expert outside [0, E) */
    int32_t bad[R * K] = {0, 1, 0, 2, 1, 0, 0, 2, 2, 4, 0, 1};
    float x[R * I] = {0}, w[E * O * I] = {0}, y[R * K * O];
    HkTensor X = t2(x, DT_F32, R, I), Ix = t2(bad, DT_I32, R, K), W = t3(w, DT_F32, E, O, I), Y = t3(y, DT_F32, R, K, O);
    void *ws = ws_for(hk_moe_expert_workspace_bytes(&X, &Ix, &W, &Y));
    ck_assert_int_eq(hk_moe_expert_fwd(&X, &Ix, &W, &Y, ws), HK_ERR_INDEX);
    ck_assert_int_eq(hk_moe_expert_fwd(&X, &Ix, &W, &Y, NULL), HK_ERR_WORKSPACE);
    HkTensor Wbad = t3(w, DT_F32, E, O, I - 1);
    ck_assert_int_eq(hk_moe_expert_fwd(&X, &Ix, &Wbad, &Y, ws), HK_ERR_SHAPE);
    free(ws);
}
END_TEST

/* The grouped GEMMs and the scatter-add run in a fixed order: the same bits on 1 and 4 threads. */
START_TEST(test_expert_threads) {
    enum { R = 40, K = 3, E = 5, O = 33, I = 29 };
    float *out[2][3];
    for (int t = 0; t < 2; t++) {
        hk_threads_set(t ? 4 : 1);
        rng_seed(9);
        float *x = rnd(R * I, 1), *w = rnd(E * O * I, 1), *dy = rnd(R * K * O, 1);
        float *y = calloc(R * K * O, sizeof *y), *dx = calloc(R * I, sizeof *dx), *dw = calloc(E * O * I, sizeof *dw);
        int32_t idx[R * K];
        for (int r = 0; r < R; r++)
            for (int j = 0; j < K; j++) idx[r * K + j] = (int32_t)((r * 7 + j * 3) % E);
        HkTensor X = t2(x, DT_F32, R, I), Ix = t2(idx, DT_I32, R, K), W = t3(w, DT_F32, E, O, I);
        HkTensor Y = t3(y, DT_F32, R, K, O), DY = t3(dy, DT_F32, R, K, O), DX = t2(dx, DT_F32, R, I);
        HkTensor DW = t3(dw, DT_F32, E, O, I);
        void *ws = ws_for(hk_moe_expert_workspace_bytes(&X, &Ix, &W, &Y));
        ck_assert_int_eq(hk_moe_expert_fwd(&X, &Ix, &W, &Y, ws), HK_OK);
        ck_assert_int_eq(hk_moe_expert_bwd(&X, &Ix, &W, &DY, &DX, &DW, ws), HK_OK);
        out[t][0] = y, out[t][1] = dx, out[t][2] = dw;
        free(x), free(w), free(dy), free(ws);
    }
    hk_threads_set(0);
    ck_assert(!memcmp(out[0][0], out[1][0], R * K * O * sizeof(float)));
    ck_assert(!memcmp(out[0][1], out[1][1], R * I * sizeof(float)));
    ck_assert(!memcmp(out[0][2], out[1][2], E * O * I * sizeof(float)));
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 3; i++) free(out[t][i]);
}
END_TEST

/* Tiled by expert: tiles of E/n experts run in order give the untiled
 * kernel's bits (y; dx's terms added in the same order; dw), with each
 * tile's workspace no more than the untiled call's. */
static void check_expert_tiles(const int32_t *idx, int64_t R, int64_t k, int64_t E, int64_t O, int64_t I, bool shared, int n,
                               const char *what) {
    int64_t nx = (shared ? R : R * k) * I, nw = E * O * I, ny = R * k * O, per = E / n;
    float *x = rnd(nx, 1), *w = rnd(nw, 0.5), *dy = rnd(ny, 1), *dx = rnd(nx, 1), *dw = rnd(nw, 1);
    float *y = calloc((size_t)ny, sizeof *y), *yt = malloc((size_t)ny * sizeof *yt);
    float *dxt = malloc((size_t)nx * sizeof *dxt), *dwt = malloc((size_t)nw * sizeof *dwt);
    memcpy(dxt, dx, (size_t)nx * sizeof *dx);
    memcpy(dwt, dw, (size_t)nw * sizeof *dw);
    for (int64_t i = 0; i < ny; i++) yt[i] = NAN; /* every place is some tile's to write */
    int32_t *ix = malloc((size_t)(R * k) * sizeof *ix);
    memcpy(ix, idx, (size_t)(R * k) * sizeof *ix);
    HkTensor X = shared ? t2(x, DT_F32, R, I) : t3(x, DT_F32, R, k, I), Ix = t2(ix, DT_I32, R, k);
    HkTensor W = t3(w, DT_F32, E, O, I), Y = t3(y, DT_F32, R, k, O), DY = t3(dy, DT_F32, R, k, O);
    HkTensor DX = shared ? t2(dx, DT_F32, R, I) : t3(dx, DT_F32, R, k, I), DW = t3(dw, DT_F32, E, O, I);
    size_t full = hk_moe_expert_workspace_bytes(&X, &Ix, &W, &Y);
    void *ws = ws_for(full);
    ck_assert_int_eq(hk_moe_expert_fwd(&X, &Ix, &W, &Y, ws), HK_OK);
    ck_assert_int_eq(hk_moe_expert_bwd(&X, &Ix, &W, &DY, &DX, &DW, ws), HK_OK);
    HkTensor YT = t3(yt, DT_F32, R, k, O), DXT = DX;
    DXT.data = dxt;
    for (int t = 0; t < n; t++) {
        HkTensor Wt = t3(w + t * per * O * I, DT_F32, per, O, I), DWt = t3(dwt + t * per * O * I, DT_F32, per, O, I);
        ck_assert_uint_le(hk_moe_expert_workspace_bytes(&X, &Ix, &Wt, &YT), full);
        ck_assert_int_eq(hk_moe_expert_fwd_tile(&X, &Ix, &Wt, t * per, E, &YT, ws), HK_OK);
        ck_assert_int_eq(hk_moe_expert_bwd_tile(&X, &Ix, &Wt, t * per, E, &DY, &DXT, &DWt, ws), HK_OK);
    }
    ck_assert_msg(!memcmp(y, yt, (size_t)ny * sizeof *y), "%s, %d tiles: y differs", what, n);
    ck_assert_msg(!memcmp(dx, dxt, (size_t)nx * sizeof *dx), "%s, %d tiles: dx differs", what, n);
    ck_assert_msg(!memcmp(dw, dwt, (size_t)nw * sizeof *dw), "%s, %d tiles: dw differs", what, n);
    /* a tile past the experts */
    HkTensor W2 = t3(w, DT_F32, per, O, I);
    ck_assert_int_eq(hk_moe_expert_fwd_tile(&X, &Ix, &W2, E - per + 1, E, &YT, ws), HK_ERR_SHAPE);
    free(x), free(w), free(dy), free(dx), free(dw), free(y), free(yt), free(dxt), free(dwt), free(ix), free(ws);
}

START_TEST(test_expert_tiles) {
    rng_seed(5);
    enum { R = 6, K = 2, E = 4, O = 5, I = 7 };
    int32_t some[R * K] = {0, 1, 0, 2, 1, 0, 0, 2, 2, 0, 0, 1}; /* expert 3 gets no row: tile 2 of 4 and 1 of 2 run empty */
    int32_t one[R * K];
    for (int i = 0; i < R * K; i++) one[i] = 1; /* every slot to expert 1 */
    for (int n = 2; n <= 4; n += 2) {
        check_expert_tiles(some, R, K, E, O, I, true, n, "shared x");
        check_expert_tiles(some, R, K, E, O, I, false, n, "x per slot");
        check_expert_tiles(one, R, K, E, O, I, true, n, "one expert");
    }
    /* top-1 over 8 experts, every row to expert 5 */
    int32_t top1[R];
    for (int i = 0; i < R; i++) top1[i] = 5;
    check_expert_tiles(top1, R, 1, 8, O, I, true, 4, "top-1");
}
END_TEST

/* ---- moe_combine ---- */

typedef struct CombRef {
    double *o, *wt;
    int64_t R, k, D;
} CombRef;
static void comb_fn(void *c, double *out) {
    CombRef *r = c;
    ref_combine(r->o, r->wt, r->R, r->k, r->D, out);
}

START_TEST(test_combine) {
    rng_seed(4);
    enum { R = 5, K = 3, D = 6 };
    float *o = rnd(R * K * D, 1), *wt = rnd(R * K, 1), *dy = rnd(R * D, 1), *dout = rnd(R * K * D, 1),
          *dwt = rnd(R * K, 1), y[R * D];
    HkTensor Ot = t3(o, DT_F32, R, K, D), Wt = t2(wt, DT_F32, R, K), Y = t2(y, DT_F32, R, D), DY = t2(dy, DT_F32, R, D);
    HkTensor DO = t3(dout, DT_F32, R, K, D), DW = t2(dwt, DT_F32, R, K);
    ck_assert_int_eq(hk_moe_combine_fwd(&Ot, &Wt, &Y), HK_OK);
    CombRef r = {to_d(o, R * K * D), to_d(wt, R * K), R, K, D};
    double want[R * D], go[R * K * D], gw[R * K], *dyd = to_d(dy, R * D), *do0 = to_d(dout, R * K * D),
                                                   *dw0 = to_d(dwt, R * K);
    comb_fn(&r, want);
    ck_assert(relerr(y, want, R * D) < 1e-5);
    ck_assert_int_eq(hk_moe_combine_bwd(&Ot, &Wt, &DY, &DO, &DW), HK_OK);
    fd_grad(r.o, R * K * D, dyd, R * D, comb_fn, &r, go);
    fd_grad(r.wt, R * K, dyd, R * D, comb_fn, &r, gw);
    for (int i = 0; i < R * K * D; i++) go[i] += do0[i];
    for (int i = 0; i < R * K; i++) gw[i] += dw0[i];
    ck_assert_msg(relerr(dout, go, R * K * D) < 1e-5, "combine do %g", relerr(dout, go, R * K * D));
    ck_assert_msg(relerr(dwt, gw, R * K) < 1e-5, "combine dweights %g", relerr(dwt, gw, R * K));
    free(o), free(wt), free(dy), free(dout), free(dwt), free(r.o), free(r.wt), free(dyd), free(do0), free(dw0);
}
END_TEST

/* ---- moe_load, moe_balance ---- */

typedef struct LoadRef {
    double *logits;
    int64_t R, E;
} LoadRef;
/* the differentiable half of moe_load: the summed probabilities */
static void load_fn(void *c, double *out) {
    LoadRef *l = c;
    double p[64];
    for (int64_t e = 0; e < l->E; e++) out[e] = 0;
    for (int64_t r = 0; r < l->R; r++) {
        ref_softmax(l->logits + r * l->E, l->E, p);
        for (int64_t e = 0; e < l->E; e++) out[e] += p[e];
    }
}

START_TEST(test_load_balance) {
    rng_seed(5);
    enum { R = 8, E = 5, K = 2 };
    float *l = rnd(R * E, 2), acc[2 * E], y[2 * E], zero[2 * E];
    for (int i = 0; i < 2 * E; i++) acc[i] = (float)i;
    int32_t idx[R * K];
    HkTensor L = t2(l, DT_F32, R, E), I = t2(idx, DT_I32, R, K), A = t2(acc, DT_F32, 2, E), Y = t2(y, DT_F32, 2, E);
    HkTensor Z = t2(zero, DT_F32, 2, E);
    ck_assert_int_eq(hk_moe_topk_fwd(&L, &I), HK_OK);
    void *ws = ws_for(hk_moe_load_workspace_bytes(&L));
    /* moe_load(experts = E): zeros */
    for (int i = 0; i < 2 * E; i++) zero[i] = 7;
    ck_assert_int_eq(hk_moe_load_fwd(NULL, NULL, NULL, &Z, NULL), HK_OK);
    for (int i = 0; i < 2 * E; i++) ck_assert(zero[i] == 0);
    ck_assert_int_eq(hk_moe_load_fwd(&L, &I, &A, &Y, ws), HK_OK);
    LoadRef lr = {to_d(l, R * E), R, E};
    double ps[E];
    load_fn(&lr, ps);
    double total = 0;
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int q = 0; q < R * K; q++) n += idx[q] == e;
        ck_assert_msg(y[e] == acc[e] + (float)n, "count of expert %d", e);
        ck_assert(fabs(y[E + e] - (acc[E + e] + ps[e])) < 1e-5);
        total += y[e] - acc[e];
    }
    ck_assert(total == R * K);
    /* backward: dlogits from dS = dy[1]; dacc += dy */
    float dy[2 * E], *dl = rnd(R * E, 1), dacc[2 * E] = {0};
    for (int i = 0; i < 2 * E; i++) dy[i] = (float)(rng_unif());
    HkTensor DY = t2(dy, DT_F32, 2, E), DL = t2(dl, DT_F32, R, E), DA = t2(dacc, DT_F32, 2, E);
    double *dl0 = to_d(dl, R * E), gl[R * E], *ds = to_d(dy + E, E);
    ck_assert_int_eq(hk_moe_load_bwd(&L, &DY, &DL, &DA, ws), HK_OK);
    fd_grad(lr.logits, R * E, ds, E, load_fn, &lr, gl);
    for (int i = 0; i < R * E; i++) gl[i] += dl0[i];
    ck_assert_msg(relerr(dl, gl, R * E) < 1e-5, "load dlogits %g", relerr(dl, gl, R * E));
    for (int i = 0; i < 2 * E; i++) ck_assert(dacc[i] == dy[i]);
    /* balance: scale * sum load[0] load[1]; the gradient only to load[1] */
    float b, db = 0.5f, dload[2 * E] = {0};
    HkTensor Bt = hk_tensor(&b, DT_F32, 0, NULL), DB = hk_tensor(&db, DT_F32, 0, NULL), DLd = t2(dload, DT_F32, 2, E);
    ck_assert_int_eq(hk_moe_balance_fwd(&Y, &Bt, 0.25), HK_OK);
    double want = 0;
    for (int e = 0; e < E; e++) want += (double)y[e] * y[E + e];
    ck_assert(fabs(b - 0.25 * want) < 1e-5 * fabs(want));
    ck_assert_int_eq(hk_moe_balance_bwd(&Y, &DB, &DLd, 0.25), HK_OK);
    for (int e = 0; e < E; e++) {
        ck_assert(dload[e] == 0);
        ck_assert(fabs(dload[E + e] - 0.25 * 0.5 * y[e]) < 1e-6);
    }
    free(l), free(ws), free(lr.logits), free(dl), free(dl0), free(ds);
}
END_TEST

/* ---- moe_shared_gate ---- */

typedef struct SgRef {
    double *y, *g;
    int64_t R, D;
} SgRef;
static void sg_fn(void *c, double *out) {
    SgRef *s = c;
    for (int64_t r = 0; r < s->R; r++)
        for (int64_t d = 0; d < s->D; d++) out[r * s->D + d] = s->y[r * s->D + d] / (1 + exp(-s->g[r]));
}

START_TEST(test_shared_gate) {
    rng_seed(6);
    enum { R = 7, D = 5 };
    float *y = rnd(R * D, 1), *g = rnd(R, 3), *dout = rnd(R * D, 1), *dy = rnd(R * D, 1), *dg = rnd(R, 1), o[R * D];
    HkTensor Y = t2(y, DT_F32, R, D), G = t2(g, DT_F32, R, 1), O = t2(o, DT_F32, R, D), DO = t2(dout, DT_F32, R, D);
    HkTensor DY = t2(dy, DT_F32, R, D), DG = t2(dg, DT_F32, R, 1);
    ck_assert_int_eq(hk_moe_shared_gate_fwd(&Y, &G, &O), HK_OK);
    SgRef s = {to_d(y, R * D), to_d(g, R), R, D};
    double want[R * D], gy[R * D], gg[R], *dod = to_d(dout, R * D), *dy0 = to_d(dy, R * D), *dg0 = to_d(dg, R);
    sg_fn(&s, want);
    ck_assert(relerr(o, want, R * D) < 1e-5);
    ck_assert_int_eq(hk_moe_shared_gate_bwd(&Y, &G, &DO, &DY, &DG), HK_OK);
    fd_grad(s.y, R * D, dod, R * D, sg_fn, &s, gy);
    fd_grad(s.g, R, dod, R * D, sg_fn, &s, gg);
    for (int i = 0; i < R * D; i++) gy[i] += dy0[i];
    for (int i = 0; i < R; i++) gg[i] += dg0[i];
    ck_assert_msg(relerr(dy, gy, R * D) < 1e-5, "shared gate dy %g", relerr(dy, gy, R * D));
    ck_assert_msg(relerr(dg, gg, R) < 1e-5, "shared gate dlogit %g", relerr(dg, gg, R));
    HkTensor Gbad = t2(g, DT_F32, R - 1, 1);
    ck_assert_int_eq(hk_moe_shared_gate_fwd(&Y, &Gbad, &O), HK_ERR_SHAPE);
    free(y), free(g), free(dout), free(dy), free(dg), free(s.y), free(s.g), free(dod), free(dy0), free(dg0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("hostk_moe");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, test_topk);
    tcase_add_test(tc, test_gate);
    tcase_add_test(tc, test_expert);
    tcase_add_test(tc, test_expert_threads);
    tcase_add_test(tc, test_expert_tiles);
    tcase_add_test(tc, test_combine);
    tcase_add_test(tc, test_load_balance);
    tcase_add_test(tc, test_shared_gate);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
