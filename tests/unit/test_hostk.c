/* hostk: every primitive's forward against a float64 reference written
 * plainly here, and its backward against central finite differences of that
 * reference (so the kernels are checked against nothing of their own).
 *
 * Error measure (normwise relative): max_i |got_i - want_i| / max_i |want_i|.
 * Tolerances, by storage dtype of the float tensors:
 *   f32 : forward 1e-5, backward 1e-5 (fp32 kernels against float64 FD;
 *         observed <= 4e-7 on these shapes)
 *   f16 : forward 1e-3, backward 1.5e-3 (the output rounded once to 11 bits:
 *         2^-11 = 4.9e-4 relative per element; observed <= 4.2e-4)
 *   bf16: forward 8e-3, backward 1e-2 (8 bits: 2^-8 = 3.9e-3; observed <= 3.6e-3)
 * The inputs are rounded to the storage dtype first and the reference runs on
 * the rounded values, so the tolerances measure the kernel, not the format.
 * Backward kernels accumulate: f32 gradients start from random values and
 * the test checks the increment. FD step h = 1e-4 on the float64 reference:
 * truncation ~1e-8, far below every tolerance. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "half.h"
#include "arena.h"
#include "graph.h"
#include "graph_plan.h"
#include "hostk.h"

/* ---- deterministic random numbers ---- */
static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 2654435761u + 12345; }
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double rng_unif(void) { return (double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }

/* ---- test cases ---- */
enum { MAXT = 8 };
typedef struct Case {
    const char *name;
    PrimId prim;
    int nin, nout;
    int rank[3];
    int64_t dims[3][6];
    int64_t int_hi[3];  /* > 0: an i32 input with values in [0, int_hi) */
    int orank[MAXT];
    int64_t odims[MAXT][6];
    int64_t iattr[6];
    double fattr[PLAN_MAX_FATTR];
    unsigned diff;      /* differentiable inputs */
    DType idt[3];       /* an input's own dtype (DT_NONE: the run's); its gradient has it too */
} Case;

static int64_t numel(int rank, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    return n;
}

/* ---- float64 reference forwards ---- */

static void ref_matmul(const Case *c, double *const *in, double **out) {
    int ra = c->rank[0], rb = c->rank[1];
    const int64_t *da = c->dims[0], *db = c->dims[1];
    int ta = (int)c->iattr[0], tb = (int)c->iattr[1];
    int64_t K = tb ? db[rb - 1] : db[rb - 2], N = tb ? db[rb - 2] : db[rb - 1], M, nb = 1;
    /* a is [S..., M, K] ([K, M] transposed), or a vector [K] */
    M = ra == 1 ? 1 : ta ? da[ra - 1] : da[ra - 2];
    for (int i = 0; i < ra - 2; i++) nb *= da[i];
    for (int64_t s = 0; s < nb; s++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    double a = ta ? in[0][s * K * M + k * M + m] : in[0][s * M * K + m * K + k];
                    int64_t bs = rb == 2 ? 0 : s * K * N;
                    double b = tb ? in[1][bs + n * K + k] : in[1][bs + k * N + n];
                    acc += a * b;
                }
                out[0][s * M * N + m * N + n] = acc;
            }
}

static void ref_linear(const Case *c, double *const *in, double **out) {
    int64_t I = c->dims[1][0], O = c->dims[1][1], R = numel(c->rank[0], c->dims[0]) / I;
    for (int64_t r = 0; r < R; r++)
        for (int64_t o = 0; o < O; o++) {
            double acc = c->nin > 2 ? in[2][o] : 0;
            for (int64_t i = 0; i < I; i++) acc += in[0][r * I + i] * in[1][i * O + o];
            out[0][r * O + o] = acc;
        }
}

static void ref_embedding(const Case *c, double *const *in, double **out) {
    int64_t D = c->dims[0][1], n = numel(c->rank[1], c->dims[1]);
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < D; d++) out[0][i * D + d] = in[0][(int64_t)in[1][i] * D + d];
}

static void ref_binary(const Case *c, double *const *in, double **out) {
    int64_t na = numel(c->rank[0], c->dims[0]), nb = numel(c->rank[1], c->dims[1]);
    int64_t n = na > nb ? na : nb;
    for (int64_t i = 0; i < n; i++) {
        double a = in[0][i % na], b = in[1][i % nb];
        out[0][i] = c->prim == PRIM_MUL ? a * b : a + b;
    }
}

static void ref_layernorm(const Case *c, double *const *in, double **out) {
    int r0 = c->rank[0];
    /* rmsnorm with heads = H: rows of D/H values */
    int64_t H = c->prim == PRIM_RMSNORM && c->iattr[0] > 1 ? c->iattr[0] : 1;
    int64_t D = c->dims[0][r0 - 1] / H, R = numel(r0, c->dims[0]) / D;
    double eps = c->fattr[0];
    for (int64_t r = 0; r < R; r++) {
        const double *x = in[0] + r * D;
        double mu = 0, var = 0, ms = 0;
        for (int64_t j = 0; j < D; j++) mu += x[j] / (double)D;
        for (int64_t j = 0; j < D; j++) var += (x[j] - mu) * (x[j] - mu) / (double)D;
        for (int64_t j = 0; j < D; j++) ms += x[j] * x[j] / (double)D;
        for (int64_t j = 0; j < D; j++) {
            /* rmsnorm's offset: the gain is offset + g (Gemma's 1 + w) */
            double g = c->nin > 1 ? (c->prim == PRIM_RMSNORM ? c->fattr[1] : 0) + in[1][j] : 1;
            if (c->prim == PRIM_LAYERNORM)
                out[0][r * D + j] = (x[j] - mu) / sqrt(var + eps) * g + (c->nin > 2 ? in[2][j] : 0);
            else
                out[0][r * D + j] = x[j] / sqrt(ms + eps) * g;
        }
    }
}

static void ref_unary(const Case *c, double *const *in, double **out) {
    int64_t n = numel(c->rank[0], c->dims[0]);
    for (int64_t i = 0; i < n; i++) {
        double x = in[0][i];
        out[0][i] = c->prim == PRIM_GELU ? 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                                         : x / (1 + exp(-x));
    }
}

/* The frequency of pair j, written from Hugging Face's rope initialisers:
 * linear divides by factor; llama3 keeps wavelengths < L/high, divides
 * those > L/low, and interpolates with s = (L/wavelength - low)/(high - low). */
static double ref_rope_freq(const Case *c, double theta, int64_t j, int64_t hd) {
    double f = 1.0 / pow(theta, (double)(2 * j) / (double)hd), factor = c->fattr[1];
    if (c->iattr[1] == ROPE_LINEAR) return f / factor;
    if (c->iattr[1] != ROPE_LLAMA3) return f;
    double L = (double)c->iattr[2], lo = c->fattr[2], hi = c->fattr[3], wl = 2 * M_PI / f;
    if (wl < L / hi) return f;
    if (wl > L / lo) return f / factor;
    double sm = (L / wl - lo) / (hi - lo);
    return (1 - sm) * f / factor + sm * f;
}

static void ref_rope(const Case *c, double *const *in, double **out) {
    int64_t B = c->dims[0][0], T = c->dims[0][1], C = c->dims[0][2], H = c->iattr[0], hd = C / H;
    /* rotary_dim (iattr 3): the first rd columns of a head turn as a head of rd; the others are x */
    int64_t rd = c->iattr[3] ? c->iattr[3] : hd;
    double theta = c->fattr[0];
    for (int64_t i = 0; i < B * T * C; i++) out[0][i] = in[0][i];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 0; j < rd / 2; j++) {
                    int64_t i0 = (b * T + t) * C + h * hd + j, i1 = i0 + rd / 2;
                    double a = (double)t * ref_rope_freq(c, theta, j, rd);
                    out[0][i0] = in[0][i0] * cos(a) - in[0][i1] * sin(a);
                    out[0][i1] = in[0][i0] * sin(a) + in[0][i1] * cos(a);
                }
}

static void ref_attention(const Case *c, double *const *in, double **out) {
    int64_t B = c->dims[0][0], T = c->dims[0][1], H = c->iattr[0], KV = c->iattr[1];
    int64_t hd = c->dims[0][2] / H, qc = H * hd, kc = KV * hd, W = c->iattr[2];
    /* the scale attribute (0: 1/sqrt(hd)) and soft-capping of the scaled scores */
    double scale = c->fattr[0] > 0 ? c->fattr[0] : 1 / sqrt((double)hd), cap = c->fattr[1];
    double p[512];
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / (H / KV);
            for (int64_t t = 0; t < T; t++) {
                double m = -1e300, sum = 0;
                int64_t lo = W > 0 && t - W + 1 > 0 ? t - W + 1 : 0; /* the window's first key */
                for (int64_t s = lo; s <= t; s++) {
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++)
                        d += in[0][(b * T + t) * qc + h * hd + e] * in[1][(b * T + s) * kc + g * hd + e];
                    p[s] = cap > 0 ? cap * tanh(d * scale / cap) : d * scale;
                    if (p[s] > m) m = p[s];
                }
                for (int64_t s = lo; s <= t; s++) sum += p[s] = exp(p[s] - m);
                for (int64_t e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int64_t s = lo; s <= t; s++) acc += p[s] / sum * in[2][(b * T + s) * kc + g * hd + e];
                    out[0][(b * T + t) * qc + h * hd + e] = acc;
                }
            }
        }
}

static void ref_split(const Case *c, double *const *in, double **out) {
    int r = c->rank[0];
    int64_t N = c->dims[0][r - 1], R = numel(r, c->dims[0]) / N, off = 0;
    for (int k = 0; k < c->nout; k++) {
        int64_t w = c->odims[k][r - 1];
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < w; j++) out[k][i * w + j] = in[0][i * N + off + j];
        off += w;
    }
}

static void ref_cross_entropy(const Case *c, double *const *in, double **out) {
    int r = c->rank[0];
    int64_t V = c->dims[0][r - 1], R = numel(r, c->dims[0]) / V;
    double tot = 0;
    for (int64_t i = 0; i < R; i++) {
        double m = -1e300, s = 0;
        for (int64_t j = 0; j < V; j++) m = fmax(m, in[0][i * V + j]);
        for (int64_t j = 0; j < V; j++) s += exp(in[0][i * V + j] - m);
        tot += m + log(s) - in[0][i * V + (int64_t)in[1][i]];
    }
    out[0][0] = tot / (double)R;
}

static void ref_forward(const Case *c, double *const *in, double **out) {
    switch (c->prim) {
    case PRIM_EMBEDDING: ref_embedding(c, in, out); break;
    case PRIM_LINEAR: ref_linear(c, in, out); break;
    case PRIM_MATMUL: ref_matmul(c, in, out); break;
    case PRIM_ADD: case PRIM_MUL: ref_binary(c, in, out); break;
    case PRIM_LAYERNORM: case PRIM_RMSNORM: ref_layernorm(c, in, out); break;
    case PRIM_GELU: case PRIM_SILU: ref_unary(c, in, out); break;
    case PRIM_SCALE:
        for (int64_t i = 0; i < numel(c->rank[0], c->dims[0]); i++) out[0][i] = c->fattr[0] * in[0][i];
        break;
    case PRIM_SOFTCAP:
        for (int64_t i = 0; i < numel(c->rank[0], c->dims[0]); i++) out[0][i] = c->fattr[0] * tanh(in[0][i] / c->fattr[0]);
        break;
    case PRIM_ROPE: ref_rope(c, in, out); break;
    case PRIM_ATTENTION: ref_attention(c, in, out); break;
    case PRIM_SPLIT: ref_split(c, in, out); break;
    case PRIM_CROSS_ENTROPY: ref_cross_entropy(c, in, out); break;
    default: ck_abort_msg("no reference for %s", c->name);
    }
}

/* ---- the driver ---- */

static double store_round(DType dt, double v) {
    switch (dt) {
    case DT_BF16: return half_bf16_to_f32(half_f32_to_bf16((float)v));
    case DT_F16: return half_f16_to_f32(half_f32_to_f16((float)v));
    default: return (float)v;
    }
}

static void *alloc_tensor(HkTensor *t, DType dt, int rank, const int64_t *dims) {
    int64_t n = numel(rank, dims);
    void *p = calloc((size_t)(n ? n : 1), 4);
    ck_assert_ptr_nonnull(p);
    *t = hk_tensor(p, dt, rank, dims);
    return p;
}

static double norm_err(const double *got, const double *want, int64_t n) {
    double md = 0, mw = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs(got[i] - want[i]));
        mw = fmax(mw, fabs(want[i]));
    }
    return md / (mw > 1e-30 ? mw : 1e-30);
}

/* L = sum_j <ref_out_j(x), dy_j> */
static double ref_loss(const Case *c, double *const *in, double **ro, double *const *dy) {
    ref_forward(c, in, ro);
    double L = 0;
    for (int j = 0; j < c->nout; j++) {
        int64_t n = numel(c->orank[j], c->odims[j]);
        for (int64_t i = 0; i < n; i++) L += ro[j][i] * dy[j][i];
    }
    return L;
}

static double tol_fwd(DType dt) { return dt == DT_F32 ? 1e-5 : dt == DT_F16 ? 1e-3 : 8e-3; }
static double tol_bwd(DType dt) { return dt == DT_F32 ? 1e-5 : dt == DT_F16 ? 1.5e-3 : 1e-2; }
static const char *dt_name(DType dt) { return dt == DT_F32 ? "f32" : dt == DT_F16 ? "f16" : "bf16"; }

/* samples > 0: check the backward on that many random elements of each input
 * (for shapes too large for a full finite-difference sweep). */
static void run_case(const Case *c, DType dt, uint64_t seed, int samples) {
    rng_seed(seed);
    HkTensor in[3], out[MAXT], dout[MAXT], din[3];
    double *xin[3], *yref[MAXT], *ytmp[MAXT], *dyv[MAXT], *prior[3] = {0};
    void *mem[32];
    int nm = 0;
    memset(din, 0, sizeof din);
    for (int i = 0; i < c->nin; i++) {
        int64_t n = numel(c->rank[i], c->dims[i]);
        xin[i] = malloc(sizeof(double) * (size_t)(n ? n : 1));
        mem[nm++] = xin[i];
        DType it = c->int_hi[i] ? DT_I32 : c->idt[i] ? c->idt[i] : dt;
        mem[nm++] = alloc_tensor(&in[i], it, c->rank[i], c->dims[i]);
        for (int64_t e = 0; e < n; e++) {
            if (c->int_hi[i]) {
                int32_t v = (int32_t)(rng_next() % (uint64_t)c->int_hi[i]);
                ((int32_t *)in[i].data)[e] = v;
                xin[i][e] = v;
            } else {
                xin[i][e] = store_round(it, rng_unif() * 1.5);
                hk_set(&in[i], e, (float)xin[i][e]);
            }
        }
    }
    for (int j = 0; j < c->nout; j++) {
        int64_t n = numel(c->orank[j], c->odims[j]);
        DType odt = c->prim == PRIM_CROSS_ENTROPY ? DT_F32 : dt;
        mem[nm++] = alloc_tensor(&out[j], odt, c->orank[j], c->odims[j]);
        mem[nm++] = alloc_tensor(&dout[j], odt, c->orank[j], c->odims[j]);
        yref[j] = malloc(sizeof(double) * (size_t)n);
        ytmp[j] = malloc(sizeof(double) * (size_t)n);
        dyv[j] = malloc(sizeof(double) * (size_t)n);
        mem[nm++] = yref[j];
        mem[nm++] = ytmp[j];
        mem[nm++] = dyv[j];
        for (int64_t e = 0; e < n; e++) {
            dyv[j][e] = store_round(odt, rng_unif());
            hk_set(&dout[j], e, (float)dyv[j][e]);
        }
    }
    size_t wsb = hk_workspace_bytes(c->prim, in, c->nin, out, c->nout, c->iattr);
    void *ws = malloc(wsb ? wsb : 1);
    mem[nm++] = ws;
    int rc = hk_run_fwd(c->prim, in, c->nin, out, c->nout, c->iattr, c->fattr, ws, wsb);
    ck_assert_msg(rc == HK_OK, "%s/%s forward: %s", c->name, dt_name(dt), hk_strerror(rc));
    ref_forward(c, xin, yref);
    double fe = 0;
    for (int j = 0; j < c->nout; j++) {
        int64_t n = numel(c->orank[j], c->odims[j]);
        for (int64_t e = 0; e < n; e++) ytmp[j][e] = hk_get(&out[j], e);
        double e = norm_err(ytmp[j], yref[j], n);
        fe = fmax(fe, e);
        ck_assert_msg(e <= tol_fwd(out[j].dtype), "%s/%s forward error %.3g > %.3g", c->name, dt_name(dt), e,
                      tol_fwd(out[j].dtype));
    }

    /* backward: gradients start at random values (f32) or zero, and accumulate */
    for (int i = 0; i < c->nin; i++) {
        if (!(c->diff >> i & 1)) continue;
        int64_t n = numel(c->rank[i], c->dims[i]);
        mem[nm++] = alloc_tensor(&din[i], in[i].dtype, c->rank[i], c->dims[i]);
        prior[i] = calloc((size_t)(n ? n : 1), sizeof(double));
        mem[nm++] = prior[i];
        for (int64_t e = 0; e < n; e++) {
            /* an O(1) prior would swamp the tiny per-element gradients of the big cases
             * (cross-entropy over 400 rows: ~1e-5) in fp32 rounding; the small cases test += */
            prior[i][e] = in[i].dtype == DT_F32 && samples == 0 ? rng_unif() : 0;
            hk_set(&din[i], e, (float)prior[i][e]);
        }
    }
    rc = hk_run_bwd(c->prim, in, c->nin, out, dout, c->nout, din, c->iattr, c->fattr, ws, wsb);
    ck_assert_msg(rc == HK_OK, "%s/%s backward: %s", c->name, dt_name(dt), hk_strerror(rc));
    double be = 0;
    for (int i = 0; i < c->nin; i++) {
        if (!(c->diff >> i & 1)) continue;
        int64_t n = numel(c->rank[i], c->dims[i]);
        int64_t ns = samples > 0 && n > samples ? samples : n;
        double *fd = malloc(sizeof(double) * (size_t)ns), *got = malloc(sizeof(double) * (size_t)ns);
        for (int64_t k = 0; k < ns; k++) {
            int64_t e = ns == n ? k : (int64_t)(rng_next() % (uint64_t)n);
            double x0 = xin[i][e], h = 1e-4;
            xin[i][e] = x0 + h;
            double lp = ref_loss(c, xin, ytmp, dyv);
            xin[i][e] = x0 - h;
            double lm = ref_loss(c, xin, ytmp, dyv);
            xin[i][e] = x0;
            fd[k] = (lp - lm) / (2 * h);
            got[k] = hk_get(&din[i], e) - prior[i][e];
        }
        double err = norm_err(got, fd, ns);
        be = fmax(be, err);
        ck_assert_msg(err <= tol_bwd(din[i].dtype), "%s/%s backward of input %d: error %.3g > %.3g", c->name,
                      dt_name(dt), i, err, tol_bwd(din[i].dtype));
        free(fd);
        free(got);
    }
    printf("%-28s %-4s forward %.2e  backward %.2e\n", c->name, dt_name(dt), fe, be);
    for (int k = 0; k < nm; k++) free(mem[k]);
}

#define D(...) {__VA_ARGS__}
static const Case cases[] = {
    {"embedding", PRIM_EMBEDDING, 2, 1, {2, 2}, {D(7, 5), D(2, 3)}, {0, 7}, {3}, {D(2, 3, 5)}, {0}, {0}, 0x1, {0}},
    {"linear+bias", PRIM_LINEAR, 3, 1, {3, 2, 1}, {D(2, 3, 5), D(5, 4), D(4)}, {0}, {3}, {D(2, 3, 4)}, {0}, {0}, 0x7, {0}},
    {"linear", PRIM_LINEAR, 2, 1, {2, 2}, {D(7, 3), D(3, 6)}, {0}, {2}, {D(7, 6)}, {0}, {0}, 0x3, {0}},
    {"matmul", PRIM_MATMUL, 2, 1, {3, 2}, {D(2, 3, 5), D(5, 4)}, {0}, {3}, {D(2, 3, 4)}, {0, 0}, {0}, 0x3, {0}},
    {"matmul ta", PRIM_MATMUL, 2, 1, {3, 2}, {D(2, 5, 3), D(5, 4)}, {0}, {3}, {D(2, 3, 4)}, {1, 0}, {0}, 0x3, {0}},
    {"matmul tb", PRIM_MATMUL, 2, 1, {2, 2}, {D(3, 5), D(4, 5)}, {0}, {2}, {D(3, 4)}, {0, 1}, {0}, 0x3, {0}},
    {"matmul ta tb", PRIM_MATMUL, 2, 1, {3, 2}, {D(2, 5, 3), D(4, 5)}, {0}, {3}, {D(2, 3, 4)}, {1, 1}, {0}, 0x3, {0}},
    {"matmul batched b", PRIM_MATMUL, 2, 1, {3, 3}, {D(2, 3, 5), D(2, 5, 4)}, {0}, {3}, {D(2, 3, 4)}, {0, 0}, {0}, 0x3, {0}},
    {"matmul batched ta tb", PRIM_MATMUL, 2, 1, {3, 3}, {D(2, 5, 3), D(2, 4, 5)}, {0}, {3}, {D(2, 3, 4)}, {1, 1}, {0}, 0x3, {0}},
    {"matmul vector", PRIM_MATMUL, 2, 1, {1, 2}, {D(5), D(5, 3)}, {0}, {1}, {D(3)}, {0, 0}, {0}, 0x3, {0}},
    {"add bcast b", PRIM_ADD, 2, 1, {3, 1}, {D(2, 3, 4), D(4)}, {0}, {3}, {D(2, 3, 4)}, {0}, {0}, 0x3, {0}},
    {"add bcast a", PRIM_ADD, 2, 1, {2, 3}, {D(3, 4), D(2, 3, 4)}, {0}, {3}, {D(2, 3, 4)}, {0}, {0}, 0x3, {0}},
    {"add same", PRIM_ADD, 2, 1, {2, 2}, {D(3, 5), D(3, 5)}, {0}, {2}, {D(3, 5)}, {0}, {0}, 0x3, {0}},
    {"mul bcast b", PRIM_MUL, 2, 1, {3, 2}, {D(2, 3, 5), D(3, 5)}, {0}, {3}, {D(2, 3, 5)}, {0}, {0}, 0x3, {0}},
    {"mul bcast a", PRIM_MUL, 2, 1, {1, 2}, {D(5), D(3, 5)}, {0}, {2}, {D(3, 5)}, {0}, {0}, 0x3, {0}},
    {"layernorm g b", PRIM_LAYERNORM, 3, 1, {3, 1, 1}, {D(2, 3, 7), D(7), D(7)}, {0}, {3}, {D(2, 3, 7)}, {0}, {1e-5}, 0x7, {0}},
    {"layernorm bare", PRIM_LAYERNORM, 1, 1, {2}, {D(5, 6)}, {0}, {2}, {D(5, 6)}, {0}, {1e-3}, 0x1, {0}},
    {"scale", PRIM_SCALE, 1, 1, {3}, {D(2, 3, 5)}, {0}, {3}, {D(2, 3, 5)}, {0}, {-2.5}, 0x1, {0}},
    {"rmsnorm g", PRIM_RMSNORM, 2, 1, {3, 1}, {D(2, 3, 7), D(7)}, {0}, {3}, {D(2, 3, 7)}, {0}, {1e-5}, 0x3, {0}},
    {"rmsnorm bare", PRIM_RMSNORM, 1, 1, {2}, {D(4, 5)}, {0}, {2}, {D(4, 5)}, {0}, {1e-5}, 0x1, {0}},
    {"gelu", PRIM_GELU, 1, 1, {2}, {D(3, 7)}, {0}, {2}, {D(3, 7)}, {0}, {0}, 0x1, {0}},
    {"silu", PRIM_SILU, 1, 1, {3}, {D(2, 3, 5)}, {0}, {3}, {D(2, 3, 5)}, {0}, {0}, 0x1, {0}},
    {"rope h2 hd6", PRIM_ROPE, 1, 1, {3}, {D(2, 5, 12)}, {0}, {3}, {D(2, 5, 12)}, {2}, {10000}, 0x1, {0}},
    {"rope h3 hd4 theta500", PRIM_ROPE, 1, 1, {3}, {D(1, 7, 12)}, {0}, {3}, {D(1, 7, 12)}, {3}, {500}, 0x1, {0}},
    {"rope linear x4", PRIM_ROPE, 1, 1, {3}, {D(2, 6, 16)}, {0}, {3}, {D(2, 6, 16)}, {2, ROPE_LINEAR}, {10000, 4},
     0x1, {0}},
    /* hd 16, L 64: pair 0 kept, pairs 1-2 blended, 3-7 divided by 8 */
    {"rope llama3", PRIM_ROPE, 1, 1, {3}, {D(2, 9, 32)}, {0}, {3}, {D(2, 9, 32)}, {2, ROPE_LLAMA3, 64},
     {10000, 8, 1, 4}, 0x1, {0}},
    /* partial rotary (Phi-4-mini's partial_rotary_factor): 6 of 10 columns, then 4 of 16 under llama3 */
    {"rope rotary_dim 6 of 10", PRIM_ROPE, 1, 1, {3}, {D(2, 5, 20)}, {0}, {3}, {D(2, 5, 20)}, {2, 0, 0, 6}, {10000}, 0x1,
     {0}},
    {"rope rotary_dim 4 llama3", PRIM_ROPE, 1, 1, {3}, {D(1, 9, 32)}, {0}, {3}, {D(1, 9, 32)}, {2, ROPE_LLAMA3, 64, 4},
     {10000, 8, 1, 4}, 0x1, {0}},
    {"rmsnorm heads 3", PRIM_RMSNORM, 2, 1, {3, 1}, {D(2, 3, 12), D(4)}, {0}, {3}, {D(2, 3, 12)}, {3}, {1e-6}, 0x3,
     {0}},
    {"attention H4 KV2", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(2, 5, 12), D(2, 5, 6), D(2, 5, 6)}, {0}, {3},
     {D(2, 5, 12)}, {4, 2}, {0}, 0x7, {0}},
    {"attention H2 KV2", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 6, 8), D(1, 6, 8), D(1, 6, 8)}, {0}, {3},
     {D(1, 6, 8)}, {2, 2}, {0}, 0x7, {0}},
    {"attention H3 KV1", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(2, 3, 6), D(2, 3, 2), D(2, 3, 2)}, {0}, {3},
     {D(2, 3, 6)}, {3, 1}, {0}, 0x7, {0}},
    /* sliding windows: a query sees itself alone (1), its neighbour (2), three positions */
    /* window 1: y = v, whatever q and k (their gradients are zero, no relative error to take) */
    {"attention window 1", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 5, 8), D(1, 5, 4), D(1, 5, 4)}, {0}, {3},
     {D(1, 5, 8)}, {2, 1, 1}, {0}, 0x4, {0}},
    {"attention window 2 H4 KV2", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(2, 6, 12), D(2, 6, 6), D(2, 6, 6)}, {0}, {3},
     {D(2, 6, 12)}, {4, 2, 2}, {0}, 0x7, {0}},
    {"attention window 3", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 7, 8), D(1, 7, 8), D(1, 7, 8)}, {0}, {3},
     {D(1, 7, 8)}, {2, 2, 3}, {0}, 0x7, {0}},
    {"split unequal", PRIM_SPLIT, 1, 3, {3}, {D(2, 3, 9)}, {0}, {3, 3, 3}, {D(2, 3, 2), D(2, 3, 4), D(2, 3, 3)},
     {3}, {0}, 0x1, {0}},
    {"split equal", PRIM_SPLIT, 1, 2, {2}, {D(3, 8)}, {0}, {2, 2}, {D(3, 4), D(3, 4)}, {2}, {0}, 0x1, {0}},
    {"cross_entropy 3d", PRIM_CROSS_ENTROPY, 2, 1, {3, 2}, {D(2, 3, 7), D(2, 3)}, {0, 7}, {0}, {D(0)}, {0}, {0}, 0x1, {0}},
    {"linear mixed x bf16 b f16", PRIM_LINEAR, 3, 1, {2, 2, 1}, {D(4, 6), D(6, 3), D(3)}, {0}, {2}, {D(4, 3)}, {0}, {0}, 0x7,
     {DT_BF16, DT_NONE, DT_F16}},
    {"matmul mixed b f32", PRIM_MATMUL, 2, 1, {3, 2}, {D(2, 3, 5), D(4, 5)}, {0}, {3}, {D(2, 3, 4)}, {0, 1}, {0}, 0x3,
     {DT_NONE, DT_F32}},
    {"attention mixed k v f32", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 4, 8), D(1, 4, 4), D(1, 4, 4)}, {0}, {3},
     {D(1, 4, 8)}, {2, 1}, {0}, 0x7, {DT_NONE, DT_F32, DT_F32}},
    {"layernorm mixed g b f32", PRIM_LAYERNORM, 3, 1, {2, 1, 1}, {D(3, 6), D(6), D(6)}, {0}, {2}, {D(3, 6)}, {0}, {1e-5}, 0x7,
     {DT_NONE, DT_F32, DT_F32}},
    {"cross_entropy 2d", PRIM_CROSS_ENTROPY, 2, 1, {2, 1}, {D(4, 11), D(4)}, {0, 11}, {0}, {D(0)}, {0}, {0}, 0x1, {0}},
    /* Gemma: rmsnorm's offset (per head too), attention's scale and softcap, softcap */
    {"rmsnorm offset 1", PRIM_RMSNORM, 2, 1, {3, 1}, {D(2, 3, 7), D(7)}, {0}, {3}, {D(2, 3, 7)}, {0}, {1e-6, 1.0}, 0x3, {0}},
    {"rmsnorm heads 2 offset", PRIM_RMSNORM, 2, 1, {3, 1}, {D(2, 3, 8), D(4)}, {0}, {3}, {D(2, 3, 8)}, {2}, {1e-6, 1.0},
     0x3, {0}},
    {"attention scale softcap", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(2, 5, 12), D(2, 5, 6), D(2, 5, 6)}, {0}, {3},
     {D(2, 5, 12)}, {4, 2}, {0.7, 0.8}, 0x7, {0}},
    {"attention scale", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 6, 8), D(1, 6, 8), D(1, 6, 8)}, {0}, {3},
     {D(1, 6, 8)}, {2, 2}, {0.3}, 0x7, {0}},
    {"softcap", PRIM_SOFTCAP, 1, 1, {3}, {D(2, 3, 5)}, {0}, {3}, {D(2, 3, 5)}, {0}, {0.6}, 0x1, {0}},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

START_TEST(test_prim_f32) { run_case(&cases[_i], DT_F32, 100 + (uint64_t)_i, 0); }
END_TEST
START_TEST(test_prim_bf16) { run_case(&cases[_i], DT_BF16, 200 + (uint64_t)_i, 0); }
END_TEST
START_TEST(test_prim_f16) { run_case(&cases[_i], DT_F16, 300 + (uint64_t)_i, 0); }
END_TEST

/* Larger shapes: the paths that only run above the OpenMP threshold, column
 * reductions over several 64-wide blocks, GEMMs bigger than a register tile.
 * Forward checked in full, backward on 12 random elements of each input. */
static const Case big[] = {
    {"big linear+bias", PRIM_LINEAR, 3, 1, {2, 2, 1}, {D(130, 67), D(67, 150), D(150)}, {0}, {2}, {D(130, 150)}, {0}, {0}, 0x7, {0}},
    {"big attention", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 200, 32), D(1, 200, 16), D(1, 200, 16)}, {0}, {3},
     {D(1, 200, 32)}, {2, 1}, {0}, 0x7, {0}},
    /* windows across tiles of 64 rows (hd 16): shorter than a tile, a tile exactly, longer than one, past T */
    {"big attention window 37", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 200, 32), D(1, 200, 16), D(1, 200, 16)}, {0}, {3},
     {D(1, 200, 32)}, {2, 1, 37}, {0}, 0x7, {0}},
    {"big attention window 64 H4 KV2", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(2, 150, 64), D(2, 150, 32), D(2, 150, 32)}, {0},
     {3}, {D(2, 150, 64)}, {4, 2, 64}, {0}, 0x7, {0}},
    {"big attention window 100 hd 40", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 230, 80), D(1, 230, 40), D(1, 230, 40)}, {0},
     {3}, {D(1, 230, 80)}, {2, 1, 100}, {0}, 0x7, {0}},
    {"big attention window past T", PRIM_ATTENTION, 3, 1, {3, 3, 3}, {D(1, 130, 16), D(1, 130, 16), D(1, 130, 16)}, {0},
     {3}, {D(1, 130, 16)}, {1, 1, 500}, {0}, 0x7, {0}},
    {"big layernorm", PRIM_LAYERNORM, 3, 1, {2, 1, 1}, {D(300, 129), D(129), D(129)}, {0}, {2}, {D(300, 129)}, {0}, {1e-5}, 0x7, {0}},
    {"big rmsnorm", PRIM_RMSNORM, 2, 1, {2, 1}, {D(300, 129), D(129)}, {0}, {2}, {D(300, 129)}, {0}, {1e-5}, 0x3, {0}},
    {"big embedding", PRIM_EMBEDDING, 2, 1, {2, 1}, {D(50, 200), D(400)}, {0, 50}, {2}, {D(400, 200)}, {0}, {0}, 0x1, {0}},
    {"big add bcast", PRIM_ADD, 2, 1, {2, 1}, {D(300, 130), D(130)}, {0}, {2}, {D(300, 130)}, {0}, {0}, 0x3, {0}},
    {"big mul bcast", PRIM_MUL, 2, 1, {1, 2}, {D(130), D(300, 130)}, {0}, {2}, {D(300, 130)}, {0}, {0}, 0x3, {0}},
    {"big cross_entropy", PRIM_CROSS_ENTROPY, 2, 1, {2, 1}, {D(400, 97), D(400)}, {0, 97}, {0}, {D(0)}, {0}, {0}, 0x1, {0}},
    {"big split", PRIM_SPLIT, 1, 2, {2}, {D(300, 150)}, {0}, {2, 2}, {D(300, 70), D(300, 80)}, {2}, {0}, 0x1, {0}},
    {"big gelu", PRIM_GELU, 1, 1, {1}, {D(70001)}, {0}, {1}, {D(70001)}, {0}, {0}, 0x1, {0}},
    {"big silu", PRIM_SILU, 1, 1, {1}, {D(70001)}, {0}, {1}, {D(70001)}, {0}, {0}, 0x1, {0}},
    {"big rope", PRIM_ROPE, 1, 1, {3}, {D(2, 110, 160)}, {0}, {3}, {D(2, 110, 160)}, {4}, {10000}, 0x1, {0}},
    {"big rope llama3", PRIM_ROPE, 1, 1, {3}, {D(2, 110, 160)}, {0}, {3}, {D(2, 110, 160)}, {4, ROPE_LLAMA3, 32},
     {500000, 32, 1, 4}, 0x1, {0}},
    {"big rmsnorm heads", PRIM_RMSNORM, 2, 1, {3, 1}, {D(3, 50, 128), D(32)}, {0}, {3}, {D(3, 50, 128)}, {4}, {1e-6},
     0x3, {0}},
};
enum { NBIG = sizeof big / sizeof big[0] };

START_TEST(test_big_f32) { run_case(&big[_i], DT_F32, 900 + (uint64_t)_i, 12); }
END_TEST
START_TEST(test_big_bf16) { run_case(&big[_i], DT_BF16, 950 + (uint64_t)_i, 12); }
END_TEST

/* ---- arange, errors, graph-free helpers ---- */

START_TEST(test_arange) {
    int32_t v[6] = {9, 9, 9, 9, 9, 9};
    int64_t d[1] = {6};
    HkTensor y = hk_tensor(v, DT_I32, 1, d);
    int64_t ia[4] = {6};
    ck_assert_int_eq(hk_run_fwd(PRIM_ARANGE, NULL, 0, &y, 1, ia, NULL, NULL, 0), HK_OK);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(v[i], i);
    ia[0] = 5;
    ck_assert_int_eq(hk_run_fwd(PRIM_ARANGE, NULL, 0, &y, 1, ia, NULL, NULL, 0), HK_ERR_SHAPE);
    y.dtype = DT_F32;
    ck_assert_int_eq(hk_arange_fwd(&y, 6), HK_ERR_DTYPE);
    ck_assert_int_eq(hk_run_bwd(PRIM_ARANGE, NULL, 0, &y, &y, 1, NULL, ia, NULL, NULL, 0), HK_ERR_PRIM);
}
END_TEST

START_TEST(test_errors) {
    float a[24] = {0}, b[24] = {0}, y[24];
    int32_t ids[4] = {0, 1, 7, 2};
    int64_t d23[2] = {2, 3}, d32[2] = {3, 2}, d24[2] = {2, 4}, d4[1] = {4}, d34[2] = {3, 4};
    HkTensor A = hk_tensor(a, DT_F32, 2, d23), B = hk_tensor(b, DT_F32, 2, d24), Y = hk_tensor(y, DT_F32, 2, d24);
    /* matmul [2,3] x [2,4]: K mismatch */
    ck_assert_int_eq(hk_matmul_fwd(&A, &B, &Y, false, false, NULL), HK_ERR_SHAPE);
    /* add: [2,3] + [2,4] is not a suffix broadcast */
    ck_assert_int_eq(hk_add_fwd(&A, &B, &Y), HK_ERR_SHAPE);
    /* embedding: id 7 outside [0, 3): nothing written */
    HkTensor T = hk_tensor(a, DT_F32, 2, d32), I = hk_tensor(ids, DT_I32, 1, d4);
    int64_t d42[2] = {4, 2};
    HkTensor E = hk_tensor(y, DT_F32, 2, d42);
    for (int i = 0; i < 8; i++) y[i] = 5;
    ck_assert_int_eq(hk_embedding_fwd(&T, &I, &E), HK_ERR_INDEX);
    for (int i = 0; i < 8; i++) ck_assert_float_eq(y[i], 5);
    /* ids must be i32 */
    HkTensor If = hk_tensor(b, DT_F32, 1, d4);
    ck_assert_int_eq(hk_embedding_fwd(&T, &If, &E), HK_ERR_DTYPE);
    /* cross entropy: target 7 outside [0, 4) */
    float loss;
    HkTensor L = hk_tensor(&loss, DT_F32, 0, NULL), LG = hk_tensor(a, DT_F32, 2, d34);
    int32_t tg[3] = {0, 7, 1};
    int64_t d3[1] = {3};
    HkTensor TG = hk_tensor(tg, DT_I32, 1, d3);
    char ws[256];
    ck_assert_int_eq(hk_cross_entropy_fwd(&LG, &TG, &L, ws), HK_ERR_INDEX);
    tg[1] = 3;
    ck_assert_int_eq(hk_cross_entropy_fwd(&LG, &TG, &L, ws), HK_OK);
    ck_assert_float_eq_tol(loss, logf(4.0f), 1e-6f); /* all-zero logits: log V */
    /* an untrained target (negative): no loss, no gradient, still in the divisor */
    tg[1] = -1;
    ck_assert_int_eq(hk_cross_entropy_fwd(&LG, &TG, &L, ws), HK_OK);
    ck_assert_float_eq_tol(loss, 2.0f * logf(4.0f) / 3.0f, 1e-6f);
    {
        float dlg[12], one = 1.0f;
        for (int i = 0; i < 12; i++) dlg[i] = 0.5f;
        HkTensor DL = hk_tensor(&one, DT_F32, 0, NULL), DLG = hk_tensor(dlg, DT_F32, 2, d34);
        ck_assert_int_eq(hk_cross_entropy_bwd(&LG, &TG, &DL, &DLG, ws), HK_OK);
        for (int v = 0; v < 4; v++) ck_assert_float_eq(dlg[4 + v], 0.5f); /* row 1 untouched */
        ck_assert_float_eq_tol(dlg[0], 0.5f + (0.25f - 1.0f) / 3.0f, 1e-6f);
    }
    tg[1] = 3;
    /* workspace: declared but not given, or too small */
    HkTensor in2[2] = {LG, TG};
    ck_assert_int_eq(hk_run_fwd(PRIM_CROSS_ENTROPY, in2, 2, &L, 1, NULL, NULL, NULL, 0), HK_ERR_WORKSPACE);
    ck_assert_int_eq(hk_run_fwd(PRIM_CROSS_ENTROPY, in2, 2, &L, 1, NULL, NULL, ws, 4), HK_ERR_WORKSPACE);
    /* rope: hd odd; heads not dividing */
    int64_t d113[3] = {1, 1, 6};
    HkTensor R = hk_tensor(a, DT_F32, 3, d113), RY = hk_tensor(y, DT_F32, 3, d113);
    HkRope ro = {2, 10000, ROPE_NONE, 1, 1, 4, 8192, 0, 0, 0, 0, NULL, NULL};
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_ERR_ATTR); /* hd 3 */
    ro.heads = 4;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_ERR_ATTR);
    ro.heads = 3;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_OK);
    /* rotary_dim: odd, or past the head */
    ro.heads = 1;
    ro.rotary_dim = 3;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_ERR_ATTR);
    ro.rotary_dim = 8;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_ERR_ATTR);
    ro.rotary_dim = 4;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_OK);
    ro.rotary_dim = 0;
    ro.heads = 3;
    /* scaling: unknown kind, factor not positive, llama3 with high <= low */
    ro.scaling = 7;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_ERR_ATTR);
    ro.scaling = ROPE_LINEAR;
    ro.factor = 0;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_ERR_ATTR);
    ro.scaling = ROPE_LLAMA3;
    ro.factor = 8;
    ro.high_freq_factor = 1;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_ERR_ATTR);
    ro.high_freq_factor = 4;
    ck_assert_int_eq(hk_rope_fwd(&R, &RY, &ro), HK_OK);
    /* rmsnorm per head: the gain must have the head's size */
    int64_t d2[1] = {2};
    HkTensor G4 = hk_tensor(b, DT_F32, 1, d4), G2 = hk_tensor(b, DT_F32, 1, d2), RH[2] = {R, G4};
    int64_t ih[6] = {3};
    double fe[6] = {1e-6};
    ck_assert_int_eq(hk_run_fwd(PRIM_RMSNORM, RH, 2, &RY, 1, ih, fe, ws, sizeof ws), HK_ERR_SHAPE);
    RH[1] = G2;
    ck_assert_int_eq(hk_run_fwd(PRIM_RMSNORM, RH, 2, &RY, 1, ih, fe, ws, sizeof ws), HK_OK);
    /* attention: H not a multiple of KV; k's width wrong */
    int64_t dk[3] = {1, 1, 4};
    HkTensor K = hk_tensor(b, DT_F32, 3, dk);
    ck_assert_int_eq(hk_attention_fwd(&R, &R, &R, &RY, 3, 2, ws), HK_ERR_ATTR);
    ck_assert_int_eq(hk_attention_fwd(&R, &K, &K, &RY, 3, 3, ws), HK_ERR_SHAPE);
    /* split: sizes not summing to N */
    HkTensor P[2] = {hk_tensor(y, DT_F32, 2, d23), hk_tensor(y + 6, DT_F32, 2, d23)};
    HkTensor X = hk_tensor(a, DT_F32, 2, d24);
    ck_assert_int_eq(hk_split_fwd(&X, P, 2), HK_ERR_SHAPE);
    /* missing operands, unknown primitive */
    ck_assert_int_eq(hk_gelu_fwd(NULL, &Y), HK_ERR_ARG);
    ck_assert_int_eq(hk_run_fwd((PrimId)99, &A, 1, &Y, 1, NULL, NULL, NULL, 0), HK_ERR_PRIM);
    ck_assert_int_eq(hk_run_fwd(PRIM_GELU, &A, 1, &Y, 2, NULL, NULL, NULL, 0), HK_ERR_ARG);
    /* empty tensors: nothing to do, no workspace needed */
    int64_t d05[2] = {0, 5}, d0[1] = {0};
    HkTensor Z = hk_tensor(a, DT_F32, 2, d05), ZY = hk_tensor(y, DT_F32, 2, d05), ZT = hk_tensor(tg, DT_I32, 1, d0);
    ck_assert_int_eq(hk_layernorm_fwd(&Z, NULL, NULL, &ZY, 1e-5, NULL), HK_OK);
    ck_assert_int_eq(hk_rmsnorm_bwd(&Z, NULL, &ZY, &ZY, NULL, NULL), HK_OK);
    loss = 7;
    ck_assert_int_eq(hk_cross_entropy_fwd(&Z, &ZT, &L, NULL), HK_OK);
    ck_assert_float_eq(loss, 0.0f);
    /* every code has its own message */
    for (int c = 0; c >= -7; c--)
        for (int e = c - 1; e >= -7; e--) ck_assert_str_ne(hk_strerror(c), hk_strerror(e));
    ck_assert_str_eq(hk_strerror(-1000), "unknown host kernel error");
}
END_TEST

START_TEST(test_optimizer_helpers) {
    /* AdamW against the formula evaluated by hand in double. */
    float p[3] = {0.5f, -1.0f, 2.0f}, g[3] = {0.1f, -0.2f, 0.0f}, m[3] = {0}, v[3] = {0};
    int64_t d3[1] = {3};
    HkTensor P = hk_tensor(p, DT_F32, 1, d3), G = hk_tensor(g, DT_F32, 1, d3);
    HkAdam a = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = 1, .grad_scale = 2};
    double w0[3] = {0.5, -1.0, 2.0}, mm[3] = {0}, vv[3] = {0};
    for (int s = 1; s <= 3; s++) {
        a.step = s;
        ck_assert_int_eq(hk_adamw(&P, &G, NULL, m, v, &a), HK_OK);
        for (int i = 0; i < 3; i++) {
            double gi = (double)g[i] * 2;
            mm[i] = 0.9 * mm[i] + 0.1 * gi;
            vv[i] = 0.95 * vv[i] + 0.05 * gi * gi;
            double mh = mm[i] / (1 - pow(0.9, s)), vh = vv[i] / (1 - pow(0.95, s));
            w0[i] -= 0.01 * (mh / (sqrt(vh) + 1e-8) + 0.1 * w0[i]);
            ck_assert_double_eq_tol(p[i], w0[i], 1e-6);
        }
    }
    /* mixed precision: master fp32, param bf16 rounded from it */
    uint16_t pb[3];
    float master[3] = {0.5f, -1.0f, 2.0f}, m2[3] = {0}, v2[3] = {0};
    HkTensor PB = hk_tensor(pb, DT_BF16, 1, d3);
    a.step = 1;
    ck_assert_int_eq(hk_adamw(&PB, &G, master, m2, v2, &a), HK_OK);
    for (int i = 0; i < 3; i++) ck_assert_uint_eq(pb[i], half_f32_to_bf16(master[i]));
    ck_assert_int_eq(hk_adamw(&PB, &G, NULL, m2, v2, &a), HK_ERR_DTYPE); /* bf16 needs a master */
    a.step = 0;
    ck_assert_int_eq(hk_adamw(&P, &G, NULL, m, v, &a), HK_ERR_ATTR);

    float s[4] = {1, -2, 3, 0.5f};
    int64_t d4[1] = {4};
    HkTensor S = hk_tensor(s, DT_F32, 1, d4);
    ck_assert_double_eq_tol(hk_sum_squares(&S), 14.25, 1e-12);
    ck_assert_int_eq(hk_scale(&S, -2), HK_OK);
    ck_assert_float_eq(s[1], 4.0f);
    ck_assert(hk_all_finite(&S));
    s[2] = INFINITY;
    ck_assert(!hk_all_finite(&S));
    s[2] = NAN;
    ck_assert(!hk_all_finite(&S));
    uint16_t h[4];
    float back[4];
    s[2] = 1.0f / 3;
    HkTensor H = hk_tensor(h, DT_F16, 1, d4), Bk = hk_tensor(back, DT_F32, 1, d4);
    ck_assert_int_eq(hk_cast(&S, &H), HK_OK);
    ck_assert_int_eq(hk_cast(&H, &Bk), HK_OK);
    ck_assert_float_eq(back[0], -2.0f);
    ck_assert_float_eq(back[2], half_f16_to_f32(half_f32_to_f16(1.0f / 3)));
    int32_t iv[4];
    HkTensor IV = hk_tensor(iv, DT_I32, 1, d4);
    ck_assert_int_eq(hk_cast(&Bk, &IV), HK_OK);
    ck_assert_int_eq(iv[1], 4);
    hk_set(&IV, 0, 3e10f);
    hk_set(&IV, 1, -3e10f);
    hk_set(&IV, 2, NAN);
    hk_set(&IV, 3, -2.7f);
    ck_assert_int_eq(iv[0], INT32_MAX);
    ck_assert_int_eq(iv[1], INT32_MIN);
    ck_assert_int_eq(iv[2], 0);
    ck_assert_int_eq(iv[3], -2);
    HkTensor S3 = hk_tensor(s, DT_F32, 1, d3);
    ck_assert_int_eq(hk_cast(&S3, &H), HK_ERR_SHAPE);
    hk_zero(&H);
    for (int i = 0; i < 4; i++) ck_assert_uint_eq(h[i], 0);
}
END_TEST


/* The graph-level entries run an OP_FWD / OP_BWD with the operand layout of
 * docs/autodiff.md and give what the direct kernels give. */
START_TEST(test_graph_ops) {
    Arena ar;
    arena_init(&ar);
    Graph g;
    graph_init(&g, &ar);
    int64_t dx[2] = {3, 5}, dgm[1] = {5};
    int x = graph_add_tensor(&g, "x", DT_F32, 2, dx, TC_ACT);
    int gm = graph_add_tensor(&g, "ln.g", DT_F32, 1, dgm, TC_PARAM);
    int y = graph_add_tensor(&g, "y", DT_F32, 2, dx, TC_ACT);
    int dy = graph_add_tensor(&g, "dy", DT_F32, 2, dx, TC_ACT);
    int gx = graph_add_tensor(&g, "dx", DT_F32, 2, dx, TC_ACT);
    int gg = graph_add_tensor(&g, "grad.ln.g", DT_F32, 1, dgm, TC_GRAD);
    ck_assert_int_ge(gg, 0);
    GOp f;
    memset(&f, 0, sizeof f);
    f.kind = OP_FWD;
    f.prim = PRIM_LAYERNORM;
    f.nin = 2;
    f.in[0] = x;
    f.in[1] = gm;
    f.nout = 1;
    f.out[0] = y;
    f.fattr[0] = 1e-5;
    f.fwd = -1;
    ck_assert_int_eq(graph_add_op(&g, &f), 0);
    GOp b = f;
    b.kind = OP_BWD;
    b.fwd = 0;
    b.nfin = 2;
    b.nin = 4;
    b.in[2] = y;
    b.in[3] = dy;
    b.nout = 2;
    b.out[0] = gx;
    b.out[1] = gg;
    ck_assert_int_eq(graph_add_op(&g, &b), 1);

    float bx[15], bg[5], by[15], bdy[15], bdx[15] = {0}, bdg[5] = {0};
    rng_seed(77);
    for (int i = 0; i < 15; i++) bx[i] = (float)rng_unif(), bdy[i] = (float)rng_unif();
    for (int i = 0; i < 5; i++) bg[i] = (float)rng_unif();
    void *buf[6] = {bx, bg, by, bdy, bdx, bdg};
    char msg[200];
    Plan *pl = plan_new();
    ck_assert(pl && graph_plan_tables(&g, pl, msg, sizeof msg));
    size_t wsb = hk_op_workspace_bytes(pl, 0);
    /* mean and rstd of 3 rows, then the backward's dg, db partials (one chunk of rows: 2 x 5 doubles),
     * each block 64-byte aligned */
    ck_assert_uint_eq(wsb, 2 * 64 + 128);
    void *ws = malloc(wsb);
    ck_assert_int_eq(hk_op_forward(pl, &pl->ops[0], buf, ws, wsb), HK_OK);
    ck_assert_int_eq(hk_op_backward(pl, &pl->ops[1], buf, ws, wsb), HK_OK);
    ck_assert_int_eq(hk_op_forward(pl, &pl->ops[1], buf, ws, wsb), HK_ERR_PRIM);
    ck_assert_int_eq(hk_op_backward(pl, &pl->ops[0], buf, ws, wsb), HK_ERR_PRIM);
    ck_assert_int_eq(hk_op_forward(pl, &pl->ops[0], buf, ws, wsb - 1), HK_ERR_WORKSPACE);

    float ry[15], rdx[15] = {0}, rdg[5] = {0};
    HkTensor X = hk_tensor(bx, DT_F32, 2, dx), G = hk_tensor(bg, DT_F32, 1, dgm), Y = hk_tensor(ry, DT_F32, 2, dx);
    HkTensor DY = hk_tensor(bdy, DT_F32, 2, dx), DX = hk_tensor(rdx, DT_F32, 2, dx), DG = hk_tensor(rdg, DT_F32, 1, dgm);
    void *ws2 = malloc(hk_layernorm_workspace_bytes(&X));
    ck_assert_int_eq(hk_layernorm_fwd(&X, &G, NULL, &Y, 1e-5, ws2), HK_OK);
    ck_assert_int_eq(hk_layernorm_bwd(&X, &G, &DY, &DX, &DG, NULL, ws2), HK_OK);
    ck_assert_int_eq(memcmp(ry, by, sizeof ry), 0);
    ck_assert_int_eq(memcmp(rdx, bdx, sizeof rdx), 0);
    ck_assert_int_eq(memcmp(rdg, bdg, sizeof rdg), 0);
    float s = 0;
    for (int i = 0; i < 15; i++) s += fabsf(bdx[i]);
    ck_assert(s > 0.1f); /* something was computed */
    free(ws);
    free(ws2);
    plan_free(pl);
    arena_free(&ar);
}
END_TEST


/* Results are bit-identical whatever the OpenMP thread count (shapes above
 * the parallel threshold): what makes the reference deterministic. */
START_TEST(test_thread_invariance) {
    enum { R = 700, V = 97 };
    float *lg = malloc(sizeof(float) * R * V), *dl[2];
    int32_t *tg = malloc(sizeof(int32_t) * R);
    rng_seed(11);
    for (int i = 0; i < R * V; i++) lg[i] = (float)(3 * rng_unif());
    for (int i = 0; i < R; i++) tg[i] = (int32_t)(rng_next() % V);
    int64_t d2[2] = {R, V}, d1[1] = {R};
    HkTensor L = hk_tensor(lg, DT_F32, 2, d2), T = hk_tensor(tg, DT_I32, 1, d1);
    float loss[2], one = 1;
    HkTensor DL1 = hk_tensor(&one, DT_F32, 0, NULL);
    double ss[2];
    void *ws = malloc(hk_cross_entropy_workspace_bytes(&L));
    int threads[2] = {1, 3};
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(threads[k]);
        HkTensor LS = hk_tensor(&loss[k], DT_F32, 0, NULL);
        dl[k] = calloc((size_t)R * V, sizeof(float));
        HkTensor DLG = hk_tensor(dl[k], DT_F32, 2, d2);
        ck_assert_int_eq(hk_cross_entropy_fwd(&L, &T, &LS, ws), HK_OK);
        ck_assert_int_eq(hk_cross_entropy_bwd(&L, &T, &DL1, &DLG, ws), HK_OK);
        ss[k] = hk_sum_squares(&L);
    }
    omp_set_num_threads(2);
    ck_assert_uint_eq(half_f32_bits(loss[0]), half_f32_bits(loss[1]));
    ck_assert_int_eq(memcmp(dl[0], dl[1], sizeof(float) * R * V), 0);
    ck_assert(ss[0] == ss[1]);
    free(lg), free(tg), free(dl[0]), free(dl[1]), free(ws);
}
END_TEST


/* matmul(x, x): both gradients land in one buffer, in every dtype. */
START_TEST(test_matmul_aliased_grads) {
    enum { n = 5 };
    DType dts[3] = {DT_F32, DT_BF16, DT_F16};
    for (int k = 0; k < 3; k++) {
        float xs[n * n], dys[n * n], gs[n * n] = {0}, ys[n * n];
        double x[n * n], dy[n * n];
        int64_t d[2] = {n, n};
        HkTensor X = hk_tensor(xs, dts[k], 2, d), DY = hk_tensor(dys, dts[k], 2, d), G = hk_tensor(gs, dts[k], 2, d),
                 Y = hk_tensor(ys, dts[k], 2, d);
        rng_seed(40 + (uint64_t)k);
        for (int i = 0; i < n * n; i++) {
            x[i] = store_round(dts[k], rng_unif());
            dy[i] = store_round(dts[k], rng_unif());
            hk_set(&X, i, (float)x[i]);
            hk_set(&DY, i, (float)dy[i]);
        }
        hk_zero(&G);
        void *ws = malloc(hk_matmul_workspace_bytes(&X, &X, &Y) + 1);
        ck_assert_int_eq(hk_matmul_bwd(&X, &X, &DY, &G, &G, false, false, ws), HK_OK);
        /* d/dx <x x, dy> = dy x^T + x^T dy */
        double want[n * n], got[n * n];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int m = 0; m < n; m++) s += dy[i * n + m] * x[j * n + m] + x[m * n + i] * dy[m * n + j];
                want[i * n + j] = s;
                got[i * n + j] = hk_get(&G, i * n + j);
            }
        double e = norm_err(got, want, n * n);
        ck_assert_msg(e <= tol_bwd(dts[k]), "%s: error %.3g", dt_name(dts[k]), e);
        free(ws);
    }
}
END_TEST

/* ---- half: conversions ---- */

static float bits(uint32_t u) { return half_bits_f32(u); }

#define BAD_INIT() \
    long bad = 0;  \
    uint32_t first_bad = 0
#define BAD_IF(cond, v)               \
    do {                              \
        if (cond) {                   \
            if (!bad++) first_bad = (v); \
        }                             \
    } while (0)
#define BAD_CHECK(what) \
    ck_assert_msg(bad == 0, "%s: %ld failures, first at 0x%08x", what, bad, (unsigned)first_bad)

START_TEST(test_bf16) {
    ck_assert_uint_eq(half_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(half_f32_to_bf16(-2.0f), 0xc000);
    /* exact halfway cases round to even */
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x3f808000)), 0x3f80);
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x3f818000)), 0x3f82);
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x3f808001)), 0x3f81);
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x3f807fff)), 0x3f80);
    /* inf, overflow, NaN (even a NaN whose payload is in the dropped bits) */
    ck_assert_uint_eq(half_f32_to_bf16(INFINITY), 0x7f80);
    ck_assert_uint_eq(half_f32_to_bf16(-INFINITY), 0xff80);
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x7f7fffff)), 0x7f80);
    ck_assert(isnan(half_bf16_to_f32(half_f32_to_bf16(NAN))));
    ck_assert(isnan(half_bf16_to_f32(half_f32_to_bf16(bits(0x7f800001)))));
    ck_assert(isnan(half_bf16_to_f32(half_f32_to_bf16(bits(0xff800001)))));
    /* denormals */
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x00000001)), 0x0000);
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x00008000)), 0x0000);
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x00018000)), 0x0002);
    ck_assert_uint_eq(half_f32_to_bf16(bits(0x00010000)), 0x0001);
    ck_assert_uint_eq(half_f32_to_bf16(-0.0f), 0x8000);
    /* every bf16 round-trips exactly (failures counted: one assert per value
     * would cost a syscall each under Check's fork mode) */
    BAD_INIT();
    for (uint32_t h = 0; h < 65536; h++) {
        float f = half_bf16_to_f32((uint16_t)h);
        BAD_IF(half_f32_bits(f) != h << 16, h);
        BAD_IF(!isnan(f) && half_f32_to_bf16(f) != h, h);
    }
    BAD_CHECK("bf16 round trip");
    /* random floats: the result is a nearest bf16, ties to even */
    rng_seed(5);
    for (int k = 0; k < 200000; k++) {
        uint32_t u = (uint32_t)rng_next();
        float f = bits(u);
        if (!isfinite(f) || fabsf(f) >= bits(0x7f7f0000)) continue;
        uint16_t h = half_f32_to_bf16(f);
        double d = f, r = half_bf16_to_f32(h);
        uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u; /* the two bf16 neighbours (same sign) */
        double dl = fabs(d - half_bits_f32(lo)), dh = fabs(d - half_bits_f32(hi));
        BAD_IF(fabs(d - r) != fmin(dl, dh), u);
        BAD_IF(dl == dh && (h & 1), u);
    }
    BAD_CHECK("bf16 nearest");
}
END_TEST

/* An independent decoder for f16. */
static double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

START_TEST(test_f16) {
    ck_assert_uint_eq(half_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(half_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(half_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(half_f32_to_f16(65519.99f), 0x7bff);
    ck_assert_uint_eq(half_f32_to_f16(65520.0f), 0x7c00); /* halfway to 65536: even is inf */
    ck_assert_uint_eq(half_f32_to_f16(1e10f), 0x7c00);
    ck_assert_uint_eq(half_f32_to_f16(-1e10f), 0xfc00);
    ck_assert_uint_eq(half_f32_to_f16(INFINITY), 0x7c00);
    ck_assert_uint_eq(half_f32_to_f16(-INFINITY), 0xfc00);
    ck_assert(isnan(half_f16_to_f32(half_f32_to_f16(NAN))));
    ck_assert(isnan(half_f16_to_f32(half_f32_to_f16(bits(0x7f800001)))));
    ck_assert_uint_eq(half_f32_to_f16(-0.0f), 0x8000);
    /* normal halfway cases */
    ck_assert_uint_eq(half_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);
    ck_assert_uint_eq(half_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
    ck_assert_uint_eq(half_f32_to_f16(nextafterf(1.0f + ldexpf(1, -11), 2)), 0x3c01);
    /* subnormals */
    ck_assert_uint_eq(half_f32_to_f16(ldexpf(1, -24)), 0x0001);
    ck_assert_uint_eq(half_f32_to_f16(ldexpf(1, -25)), 0x0000);  /* tie: to even (0) */
    ck_assert_uint_eq(half_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 0x0001);
    ck_assert_uint_eq(half_f32_to_f16(3 * ldexpf(1, -25)), 0x0002); /* tie between 1 and 2 */
    ck_assert_uint_eq(half_f32_to_f16(ldexpf(1, -26)), 0x0000);
    ck_assert_uint_eq(half_f32_to_f16(-ldexpf(1, -24)), 0x8001);
    ck_assert_uint_eq(half_f32_to_f16(1023 * ldexpf(1, -24)), 0x03ff);
    ck_assert_uint_eq(half_f32_to_f16(ldexpf(1, -14) - ldexpf(1, -25)), 0x0400); /* tie: to even, the normal */
    ck_assert_uint_eq(half_f32_to_f16(ldexpf(1, -14)), 0x0400);
    ck_assert_uint_eq(half_f32_to_f16(bits(0x00000001)), 0x0000); /* f32 denormal */
    /* every f16 decodes exactly and round-trips */
    BAD_INIT();
    for (uint32_t h = 0; h < 65536; h++) {
        float f = half_f16_to_f32((uint16_t)h);
        if (((h >> 10) & 31) == 31) {
            BAD_IF(((h & 1023) != 0) != (isnan(f) != 0), h);
            if (h & 1023) continue;
        } else {
            BAD_IF((double)f != f16_value((uint16_t)h), h);
        }
        BAD_IF(half_f32_to_f16(f) != h, h);
    }
    BAD_CHECK("f16 round trip");
    /* random floats in range: the result is a nearest f16, ties to even */
    rng_seed(6);
    for (int k = 0; k < 200000; k++) {
        double d = (float)(ldexp(rng_unif(), (int)(rng_next() % 44) - 28));
        if (fabs(d) >= 65504) continue;
        uint16_t h = half_f32_to_f16((float)d);
        double r = f16_value(h);
        uint16_t mag = h & 0x7fff;
        double up = f16_value((uint16_t)((h & 0x8000) | (mag + 1)));
        double dn = mag ? f16_value((uint16_t)((h & 0x8000) | (mag - 1))) : r;
        double e = fabs(d - r);
        BAD_IF(!(e <= fabs(d - up) && e <= fabs(d - dn)), half_f32_bits((float)d));
        BAD_IF((e == fabs(d - up) || (mag && e == fabs(d - dn))) && e != 0 && (h & 1), half_f32_bits((float)d));
    }
    BAD_CHECK("f16 nearest");
}
END_TEST

/* ---- packed rows (several samples a row) ---- */

/* tensor [1, n, c] at position t0 of row b of x [B, T, c] (f32) */
static HkTensor row_view(const HkTensor *x, int64_t b, int64_t t0, int64_t n) {
    HkTensor v = *x;
    v.data = (float *)x->data + (b * x->dims[1] + t0) * x->dims[2];
    v.dims[0] = 1;
    v.dims[1] = n;
    return v;
}

static void fill_rand(HkTensor *t) {
    for (int64_t i = 0; i < numel(t->rank, t->dims); i++) ((float *)t->data)[i] = (float)rng_unif();
}

/* Attention, rope and a position table added to packed rows equal the
 * samples run one by one (each a row of its own, positions from 0): the
 * same kernels on each sample's view, so exactly; and a segment table that
 * is no sample layout is refused. Without a window (the packed functions)
 * and with windows of 5 and 20 positions (a query sees
 * [max(start, t - W + 1), t]). */
static const int64_t packed_windows[] = {0, 5, 20};
START_TEST(test_packed_rows) {
    enum { B = 2, T = 70, H = 4, KV = 2, HD = 8 };
    const int64_t W = packed_windows[_i];
    const int64_t starts[B][4] = {{0, 13, 50, -1}, {0, 66, -1, -1}};
    int32_t seg[B * T];
    for (int b = 0; b < B; b++)
        for (int t = 0, k = 0; t < T; t++) {
            if (k + 1 < 4 && starts[b][k + 1] >= 0 && starts[b][k + 1] <= t) k++;
            seg[b * T + t] = (int32_t)starts[b][k];
        }
    rng_seed(4242);
    int64_t dq_[3] = {B, T, H * HD}, dk_[3] = {B, T, KV * HD};
    HkTensor q, k, v, y, dy, dq, dk, dv, y1, dq1, dk1, dv1;
    HkTensor *all[] = {&q, &k, &v, &y, &dy, &dq, &dk, &dv, &y1, &dq1, &dk1, &dv1};
    for (int i = 0; i < 12; i++) {
        bool kv = all[i] == &k || all[i] == &v || all[i] == &dk || all[i] == &dv || all[i] == &dk1 || all[i] == &dv1;
        alloc_tensor(all[i], DT_F32, 3, kv ? dk_ : dq_);
        memset(all[i]->data, 0, sizeof(float) * (size_t)numel(3, kv ? dk_ : dq_));
    }
    fill_rand(&q), fill_rand(&k), fill_rand(&v), fill_rand(&dy);
    size_t wsb = hk_attention_workspace_bytes(&q, H);
    void *ws = malloc(wsb), *ws1 = malloc(wsb);
    if (W == 0) {
        ck_assert_int_eq(hk_attention_fwd_packed(&q, &k, &v, &y, H, KV, seg, ws), HK_OK);
        ck_assert_int_eq(hk_attention_bwd_packed(&q, &k, &v, &dy, &dq, &dk, &dv, H, KV, seg, ws), HK_OK);
    } else {
        ck_assert_int_eq(hk_attention_fwd_window(&q, &k, &v, &y, H, KV, W, seg, ws), HK_OK);
        ck_assert_int_eq(hk_attention_bwd_window(&q, &k, &v, &dy, &dq, &dk, &dv, H, KV, W, seg, ws), HK_OK);
    }
    /* one by one */
    int nsamples = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < 4 && starts[b][j] >= 0; j++) {
            int64_t t0 = starts[b][j], t1 = j + 1 < 4 && starts[b][j + 1] >= 0 ? starts[b][j + 1] : T, n = t1 - t0;
            HkTensor qs = row_view(&q, b, t0, n), ks = row_view(&k, b, t0, n), vs = row_view(&v, b, t0, n);
            HkTensor ys = row_view(&y1, b, t0, n), dys = row_view(&dy, b, t0, n);
            HkTensor dqs = row_view(&dq1, b, t0, n), dks = row_view(&dk1, b, t0, n), dvs = row_view(&dv1, b, t0, n);
            ck_assert_int_eq(hk_attention_fwd_window(&qs, &ks, &vs, &ys, H, KV, W, NULL, ws1), HK_OK);
            ck_assert_int_eq(hk_attention_bwd_window(&qs, &ks, &vs, &dys, &dqs, &dks, &dvs, H, KV, W, NULL, ws1), HK_OK);
            nsamples++;
        }
    ck_assert_int_eq(nsamples, 5);
    size_t nq = sizeof(float) * (size_t)(B * T * H * HD), nk = sizeof(float) * (size_t)(B * T * KV * HD);
    ck_assert_msg(!memcmp(y.data, y1.data, nq), "packed attention differs from the samples one by one");
    ck_assert_msg(!memcmp(dq.data, dq1.data, nq) && !memcmp(dk.data, dk1.data, nk) && !memcmp(dv.data, dv1.data, nk),
                  "packed attention's gradients differ from the samples one by one");
    /* a gradient not wanted is left out, the others the same */
    memset(dk1.data, 0, nk);
    ck_assert_int_eq(hk_attention_bwd_window(&q, &k, &v, &dy, NULL, &dk1, NULL, H, KV, W, seg, ws), HK_OK);
    ck_assert_msg(!memcmp(dk.data, dk1.data, nk), "packed attention's dk differs without dq and dv");
    /* and differs from attention over the whole rows: the test can fail */
    ck_assert_int_eq(hk_attention_fwd(&q, &k, &v, &y1, H, KV, ws1), HK_OK);
    ck_assert_msg(memcmp(y.data, y1.data, nq), "packed attention is the whole rows' attention");
    /* rope: positions from each sample's start */
    HkRope rope = {H, 10000.0, ROPE_NONE, 1, 1, 4, 8192, 0, 0, 0, 0, NULL, NULL};
    ck_assert_int_eq(hk_rope_fwd_packed(&q, &y, &rope, seg), HK_OK);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < 4 && starts[b][j] >= 0; j++) {
            int64_t t0 = starts[b][j], t1 = j + 1 < 4 && starts[b][j + 1] >= 0 ? starts[b][j + 1] : T;
            HkTensor qs = row_view(&q, b, t0, t1 - t0), ys = row_view(&y1, b, t0, t1 - t0);
            ck_assert_int_eq(hk_rope_fwd(&qs, &ys, &rope), HK_OK);
        }
    ck_assert_msg(!memcmp(y.data, y1.data, nq), "packed rope differs from the samples one by one");
    /* a start after its position, or a start that is neither the position's nor its predecessor's */
    int32_t bad[B * T];
    memcpy(bad, seg, sizeof bad);
    bad[20] = 21;
    ck_assert_int_eq(hk_attention_fwd_packed(&q, &k, &v, &y, H, KV, bad, ws), HK_ERR_ARG);
    ck_assert_int_eq(hk_rope_fwd_packed(&q, &y, &rope, bad), HK_ERR_ARG);
    memcpy(bad, seg, sizeof bad);
    bad[20] = 5;
    ck_assert_int_eq(hk_attention_fwd_packed(&q, &k, &v, &y, H, KV, bad, ws), HK_ERR_ARG);
    for (int i = 0; i < 12; i++) free(all[i]->data);
    free(ws);
    free(ws1);
}
END_TEST

/* YaRN's frequencies equal transformers' _compute_yarn_parameters (its
 * float32 inv_freq, printed for a head of 32, theta 10000): factor 4 over
 * an original context of 64 with the default betas, and factor 8 over 256
 * with beta_fast 16, beta_slow 2. */
START_TEST(test_rope_yarn) {
    static const double want[2][16] = {
        {1, 0.477990121, 0.221359432, 0.0978053659, 0.0399999991, 0.0140585322, 0.00790569466, 0.00444569858,
         0.00249999994, 0.00140585331, 0.000790569466, 0.000444569858, 0.000250000012, 0.000140585325, 7.90569466e-05,
         4.44569851e-05},
        {1, 0.562341332, 0.260887921, 0.115588166, 0.0474999994, 0.0168702379, 0.00395284733, 0.00222284929,
         0.00124999997, 0.000702926656, 0.000395284733, 0.000222284929, 0.000125000006, 7.02926627e-05, 3.95284733e-05,
         2.22284925e-05}};
    const HkRope r[2] = {{2, 10000, ROPE_YARN, 4, 1, 4, 64, 0, 0, 0, 0, NULL, NULL}, {2, 10000, ROPE_YARN, 8, 1, 4, 256, 16, 2, 0, 0, NULL, NULL}};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 16; j++) {
            double got = hk_rope_freq(&r[k], j, 32, 0);
            ck_assert_msg(fabs(got - want[k][j]) <= 1e-6 * want[k][j], "yarn %d pair %d: %.9g, transformers %.9g", k, j, got,
                          want[k][j]);
        }
}
END_TEST

/* linear_cross_entropy, chunked or not, equals matmul + cross_entropy (the
 * unfused kernels) for the loss and both gradients, with the projection's
 * weight transposed (tied embeddings) or not, untrained targets, a chunk
 * that does not divide the rows, a dloss other than 1, f32 (1e-6
 * relative) and bf16 (the loss the same; the gradients to bf16 rounding:
 * the logits' gradient is rounded before the dloss scaling, and dw's fp32
 * sums over the chunks are ordered otherwise). The gradients accumulate
 * into random starting values. */
static double max_rel(const HkTensor *a, const HkTensor *b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < hk_numel(a); i++) {
        double d = fabs((double)hk_get(a, i) - (double)hk_get(b, i)), m = fabs((double)hk_get(b, i));
        num = d > num ? d : num;
        den = m > den ? m : den;
    }
    return den > 0 ? num / den : num;
}

START_TEST(test_linear_cross_entropy) {
    enum { B = 2, T = 23, D = 24, V = 37 };
    const int64_t chunks[] = {0, 1, 5, 16, 46, 100};
    for (int tbi = 0; tbi < 2; tbi++)
        for (int dti = 0; dti < 2; dti++) {
            bool tb = tbi;
            DType dt = dti ? DT_BF16 : DT_F32;
            rng_seed(77 + (uint64_t)(tbi * 2 + dti));
            int64_t dx_[3] = {B, T, D}, dw_[2] = {tb ? V : D, tb ? D : V}, dl_[3] = {B, T, V}, dt_[2] = {B, T};
            HkTensor x, w, lg, dlg, dx0, dw0, dx1, dw1, tg;
            alloc_tensor(&x, dt, 3, dx_), alloc_tensor(&w, dt, 2, dw_), alloc_tensor(&lg, dt, 3, dl_);
            alloc_tensor(&dlg, dt, 3, dl_), alloc_tensor(&dx0, dt, 3, dx_), alloc_tensor(&dw0, dt, 2, dw_);
            alloc_tensor(&dx1, dt, 3, dx_), alloc_tensor(&dw1, dt, 2, dw_), alloc_tensor(&tg, DT_I32, 2, dt_);
            for (int64_t i = 0; i < B * T * D; i++) hk_set(&x, i, (float)(2 * rng_unif()));
            for (int64_t i = 0; i < V * D; i++) hk_set(&w, i, (float)rng_unif());
            int32_t *t = tg.data;
            for (int64_t i = 0; i < B * T; i++) t[i] = i % 9 == 4 ? -1 : (int32_t)((rng_next() >> 20) % V);
            float loss0 = 0, loss1 = 0, one = 0.37f; /* dloss: the gradients scale with it */
            HkTensor L0 = hk_tensor(&loss0, DT_F32, 0, NULL), L1 = hk_tensor(&loss1, DT_F32, 0, NULL);
            HkTensor DL = hk_tensor(&one, DT_F32, 0, NULL);
            /* the unfused pair */
            void *wm = malloc(hk_matmul_workspace_bytes(&x, &w, &lg) + 64), *wc = malloc(hk_cross_entropy_workspace_bytes(&lg));
            for (int64_t i = 0; i < B * T * D; i++) hk_set(&dx0, i, (float)rng_unif());
            for (int64_t i = 0; i < V * D; i++) hk_set(&dw0, i, (float)rng_unif());
            memcpy(dx1.data, dx0.data, (size_t)(B * T * D) * hk_dtype_size(dt));
            memcpy(dw1.data, dw0.data, (size_t)(V * D) * hk_dtype_size(dt));
            HkTensor dxs = dx0, dws = dw0; /* the starting values, kept */
            dxs.data = malloc((size_t)(B * T * D) * hk_dtype_size(dt)), dws.data = malloc((size_t)(V * D) * hk_dtype_size(dt));
            memcpy(dxs.data, dx0.data, (size_t)(B * T * D) * hk_dtype_size(dt));
            memcpy(dws.data, dw0.data, (size_t)(V * D) * hk_dtype_size(dt));
            ck_assert_int_eq(hk_matmul_fwd(&x, &w, &lg, false, tb, wm), HK_OK);
            ck_assert_int_eq(hk_cross_entropy_fwd(&lg, &tg, &L0, wc), HK_OK);
            memset(dlg.data, 0, (size_t)(B * T * V) * hk_dtype_size(dt));
            ck_assert_int_eq(hk_cross_entropy_bwd(&lg, &tg, &DL, &dlg, wc), HK_OK);
            ck_assert_int_eq(hk_matmul_bwd(&x, &w, &dlg, &dx0, &dw0, false, tb, wm), HK_OK);
            for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
                int64_t ia[PLAN_MAX_IATTR] = {0};
                ia[IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B] = tb;
                ia[IA_LINEAR_CROSS_ENTROPY_CHUNK] = chunks[c];
                HkTensor in[3] = {x, w, tg}, out[1] = {L1}, din[3] = {dx1, dw1, {0}}, dout[1] = {DL};
                memcpy(dx1.data, dxs.data, (size_t)(B * T * D) * hk_dtype_size(dt));
                memcpy(dw1.data, dws.data, (size_t)(V * D) * hk_dtype_size(dt));
                size_t wsb = hk_workspace_bytes(PRIM_LINEAR_CROSS_ENTROPY, in, 3, out, 1, ia);
                ck_assert_uint_eq(wsb, hk_linear_cross_entropy_workspace_bytes(&x, &w, &tg, chunks[c], tb));
                void *ws = malloc(wsb);
                ck_assert_int_eq(hk_run_fwd(PRIM_LINEAR_CROSS_ENTROPY, in, 3, out, 1, ia, NULL, ws, wsb), HK_OK);
                ck_assert_int_eq(hk_run_bwd(PRIM_LINEAR_CROSS_ENTROPY, in, 3, out, dout, 1, din, ia, NULL, ws, wsb), HK_OK);
                ck_assert_msg(fabs((double)loss1 - loss0) <= 1e-6 * fabs((double)loss0), "chunk %lld tb %d %s: loss %.9g, unfused %.9g",
                              (long long)chunks[c], tbi, dti ? "bf16" : "f32", loss1, loss0);
                double ex = max_rel(&dx1, &dx0), ew = max_rel(&dw1, &dw0);
                ck_assert_msg(ex <= (dti ? 8e-3 : 1e-6) && ew <= (dti ? 8e-3 : 1e-6), "chunk %lld tb %d %s: dx %.3g dw %.3g from the unfused",
                              (long long)chunks[c], tbi, dti ? "bf16" : "f32", ex, ew);
                /* and the gradients moved: the check can fail */
                ck_assert(max_rel(&dx1, &dxs) > 1e-3 && max_rel(&dw1, &dws) > 1e-3);
                /* the workspace is needed */
                ck_assert_int_eq(hk_linear_cross_entropy_fwd(&x, &w, &tg, &L1, chunks[c], tb, NULL), HK_ERR_WORKSPACE);
                free(ws);
            }
            t[3] = V;
            void *ws = malloc(hk_linear_cross_entropy_workspace_bytes(&x, &w, &tg, 4, tb));
            ck_assert_int_eq(hk_linear_cross_entropy_fwd(&x, &w, &tg, &L1, 4, tb, ws), HK_ERR_INDEX);
            ck_assert_int_eq(hk_linear_cross_entropy_fwd(&x, &w, &tg, &L1, -1, tb, ws), HK_ERR_ATTR);
            ck_assert_int_eq(hk_linear_cross_entropy_fwd(&x, &x, &tg, &L1, 4, tb, ws), HK_ERR_SHAPE);
            free(ws);
            HkTensor *all[] = {&x, &w, &lg, &dlg, &dx0, &dw0, &dx1, &dw1, &tg, &dxs, &dws};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
            free(wm), free(wc);
        }
}
END_TEST

int main(void) {
    Suite *s = suite_create("hostk");
    TCase *tc = tcase_create("prims");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_prim_f32, 0, NCASES);
    tcase_add_loop_test(tc, test_prim_bf16, 0, NCASES);
    tcase_add_loop_test(tc, test_prim_f16, 0, NCASES);
    tcase_add_loop_test(tc, test_big_f32, 0, NBIG);
    tcase_add_loop_test(tc, test_big_bf16, 0, NBIG);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("misc");
    tcase_add_test(tm, test_arange);
    tcase_add_test(tm, test_graph_ops);
    tcase_add_test(tm, test_matmul_aliased_grads);
    tcase_add_test(tm, test_thread_invariance);
    tcase_add_test(tm, test_errors);
    tcase_add_test(tm, test_optimizer_helpers);
    tcase_add_test(tm, test_bf16);
    tcase_add_test(tm, test_rope_yarn);
    tcase_add_test(tm, test_f16);
    tcase_add_loop_test(tm, test_packed_rows, 0, (int)(sizeof packed_windows / sizeof *packed_windows));
    tcase_add_test(tm, test_linear_cross_entropy);
    suite_add_tcase(s, tm);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
