/* hostk_vec, hostk_rows, hostk_attn, hostk_threads: the vectorised host
 * kernels.
 *
 * - Approximations against the C library's double functions over dense
 *   sweeps (2^20 evenly spaced inputs over the working range plus every
 *   4099th float bit pattern: negatives, subnormals, infinities, NaNs), on
 *   every instruction set the processor has; the measured maximum error
 *   must stay below the bound hostk_vec.h states (HK_EXP_REL, ...), and is
 *   printed.
 * - Elementwise functions give bit-identical results on every instruction
 *   set; casts are exact replicas of half.h (all 65536 16-bit values, a
 *   sweep of float bit patterns, every tail length).
 * - The register-blocked GEMM against a float64 triple loop (strides,
 *   transposed A, accumulate, every edge size up to two register tiles);
 *   the blocked transpose at every edge size.
 * - Layernorm, rmsnorm, attention, cross-entropy, gelu on every
 *   instruction set against the default one (normwise 1e-5 in f32; the
 *   float64 references of test_hostk.c check the default one).
 * - Results bit-identical for 1, 2 and 3 threads; the pool runs every unit
 *   once, nested calls inline. */
#include <check.h>
#include <float.h>
#include <sched.h>
#include <stdbool.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "half.h"
#include "hostk.h"
#include "hostk_threads.h"
#include "hostk_vec.h"

/* An assertion for loops over millions of elements: check's own macros
 * write to the runner's pipe on every call. */
#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) ck_abort_msg("failed: " #cond " " __VA_ARGS__); \
    } while (0)

static const HkIsa ALL_ISA[] = {HK_ISA_SCALAR, HK_ISA_AVX2, HK_ISA_AVX512};
enum { NISA = 3 };

static uint64_t rng = 88172645463325252ull;
static uint64_t rnext(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float runif(void) { return (float)((double)(rnext() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* ---- references in double ---- */

static const double GK = 0.79788456080286535588; /* sqrt(2/pi) */
static const double GC = 0.044715;

/* gelu = 0.5 x (1 + tanh u) = x / (1 + exp(-2u)); the second form keeps
 * its relative accuracy where 1 + tanh u cancels (x << 0) */
static double ref_gelu(double x) {
    double u = GK * (x + GC * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}
static double ref_gelu_tanh(double x) { return 0.5 * x * (1.0 + tanh(GK * (x + GC * x * x * x))); }
static double ref_gelu_grad(double x) {
    double u = GK * (x + GC * x * x * x), du = GK * (1.0 + 3.0 * GC * x * x);
    double t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double ref_silu_grad(double x) {
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 + x * (1.0 - s));
}

/* The inputs: 2^20 evenly spaced over [lo, hi] and every 4099th bit pattern. */
static float *sweep(double lo, double hi, int64_t *n) {
    int64_t nl = 1 << 20, nb = (int64_t)(4294967296.0 / 4099.0) + 1;
    float *x = malloc(sizeof(float) * (size_t)(nl + nb));
    ck_assert_ptr_nonnull(x);
    for (int64_t i = 0; i < nl; i++) x[i] = (float)(lo + (hi - lo) * (double)i / (double)(nl - 1));
    for (int64_t i = 0; i < nb; i++) x[nl + i] = half_bits_f32((uint32_t)((uint64_t)i * 4099u));
    *n = nl + nb;
    return x;
}

typedef struct Err {
    double rel, abs;
} Err;

START_TEST(test_tanh_forms_agree) {
    /* the two double forms of the reference agree where 1 + tanh u does not cancel much */
    for (double x = -3; x <= 5; x += 1.0 / 1024) {
        double a = ref_gelu(x), b = ref_gelu_tanh(x);
        CHECK(fabs(a - b) <= 1e-12 * fabs(a) + 1e-300, "x %g: %.17g vs %.17g", x, a, b);
    }
}
END_TEST

START_TEST(test_exp_bound) {
    int64_t n;
    float *x = sweep(-103.9, 88.72, &n), *y = malloc(sizeof(float) * (size_t)n);
    ck_assert_ptr_nonnull(y);
    for (int k = 0; k < NISA; k++) {
        const HkVec *V = hk_vec_for(ALL_ISA[k]);
        if (!V) continue;
        V->exp(x, y, n);
        double rel = 0, sub = 0;
        for (int64_t i = 0; i < n; i++) {
            double r = exp((double)x[i]);
            if (isnan(x[i])) {
                CHECK(isnan(y[i]));
                continue;
            }
            if (r > FLT_MAX) {
                CHECK(isinf(y[i]) && y[i] > 0, "exp(%a) = %a, want inf", (double)x[i], (double)y[i]);
                continue;
            }
            if (r >= FLT_MIN) {
                double e = fabs((double)y[i] - r) / r;
                if (e > rel) rel = e;
            } else {
                double e = fabs((double)y[i] - r);
                if (e > sub) sub = e;
            }
        }
        printf("exp      %-6s max relative error %.3g (bound %.3g), subnormal results absolute %.3g\n",
               hk_isa_name(ALL_ISA[k]), rel, HK_EXP_REL, sub);
        ck_assert_msg(rel <= HK_EXP_REL, "%s exp relative error %g", hk_isa_name(ALL_ISA[k]), rel);
        ck_assert(sub <= 0x1p-149);
    }
    free(x), free(y);
}
END_TEST

/* f: 0 gelu, 1 silu */
static void check_activation(int f) {
    int64_t n;
    float *x = sweep(-20, 20, &n), *y = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    float *one = malloc(sizeof(float) * (size_t)n);
    ck_assert(y && g && one);
    for (int64_t i = 0; i < n; i++) one[i] = 1.0f;
    const char *name = f ? "silu" : "gelu";
    double rel_bound = f ? HK_SILU_REL : HK_GELU_REL, grad_bound = f ? HK_SILU_GRAD_ABS : HK_GELU_GRAD_ABS;
    double tail_bound = f ? HK_SILU_REL : HK_GELU_REL_TAIL;
    for (int k = 0; k < NISA; k++) {
        const HkVec *V = hk_vec_for(ALL_ISA[k]);
        if (!V) continue;
        memset(g, 0, sizeof(float) * (size_t)n);
        (f ? V->silu_fwd : V->gelu_fwd)(x, y, n);
        (f ? V->silu_bwd : V->gelu_bwd)(x, one, g, n);
        double rel = 0, rel_tail = 0, tiny = 0, gabs = 0;
        for (int64_t i = 0; i < n; i++) {
            double xi = x[i];
            if (isnan(xi)) {
                CHECK(isnan(y[i]));
                continue;
            }
            if (isinf(xi)) {
                /* gelu, silu (+inf) = inf; (-inf) = -0 (x e^x -> 0) */
                CHECK(xi > 0 ? y[i] == INFINITY : y[i] == 0.0f, "x %g -> %g", xi, (double)y[i]);
                continue;
            }
            double r = f ? ref_silu(xi) : ref_gelu(xi);
            if (fabs(r) >= 1e-30) {
                double e = fabs((double)y[i] - r) / fabs(r);
                if (xi >= -4) {
                    if (e > rel) rel = e;
                } else if (e > rel_tail) rel_tail = e;
            } else {
                double e = fabs((double)y[i] - r);
                if (e > tiny) tiny = e;
            }
            if (fabs(xi) < 1e4) { /* beyond, x^3 overflows the float argument: the limits 0 and 1 */
                double rg = f ? ref_silu_grad(xi) : ref_gelu_grad(xi);
                double e = fabs((double)g[i] - rg);
                if (e > gabs) gabs = e;
            } else {
                CHECK(g[i] == (xi > 0 ? 1.0f : 0.0f) || fabs(g[i] - (xi > 0 ? 1.0 : 0.0)) < 1e-30, "x %g -> %g", xi, (double)g[i]);
            }
        }
        printf("%s     %-6s max relative error %.3g for x >= -4 (bound %.3g), %.3g below (bound %.3g; |f| >= 1e-30), "
               "absolute %.3g where |f| < 1e-30; derivative absolute %.3g (bound %.3g)\n",
               name, hk_isa_name(ALL_ISA[k]), rel, rel_bound, rel_tail, tail_bound, tiny, gabs, grad_bound);
        ck_assert_msg(rel <= rel_bound, "%s %s relative error %g", name, hk_isa_name(ALL_ISA[k]), rel);
        ck_assert_msg(rel_tail <= tail_bound, "%s %s relative error below -4 %g", name, hk_isa_name(ALL_ISA[k]), rel_tail);
        ck_assert(tiny <= 1e-30);
        ck_assert_msg(gabs <= grad_bound, "%s' %s absolute error %g", name, hk_isa_name(ALL_ISA[k]), gabs);
    }
    free(x), free(y), free(g), free(one);
}

START_TEST(test_gelu_bound) { check_activation(0); }
END_TEST
START_TEST(test_silu_bound) { check_activation(1); }
END_TEST

/* Elementwise results are the same bits on every instruction set and at
 * every position (vector body or tail). */
START_TEST(test_isa_bit_identical) {
    enum { N = 4099 };
    float x[N], dy[N];
    for (int i = 0; i < N; i++) x[i] = 12 * runif(), dy[i] = runif();
    float ref[5][N], got[5][N];
    for (int k = 0; k < NISA; k++) {
        const HkVec *V = hk_vec_for(ALL_ISA[k]);
        if (!V) continue;
        float(*out)[N] = k == 0 ? ref : got;
        V->gelu_fwd(x, out[0], N);
        V->silu_fwd(x, out[1], N);
        V->exp(x, out[2], N);
        memset(out[3], 0, sizeof out[3]);
        memset(out[4], 0, sizeof out[4]);
        V->gelu_bwd(x, dy, out[3], N);
        V->silu_bwd(x, dy, out[4], N);
        if (k) ck_assert_msg(!memcmp(ref, got, sizeof ref), "%s differs from scalar", hk_isa_name(ALL_ISA[k]));
        /* position independence: each element alone */
        for (int i = 0; i < 40; i++) {
            float one;
            V->gelu_fwd(&x[i * 97], &one, 1);
            CHECK(half_f32_bits(one) == half_f32_bits(out[0][i * 97]));
        }
    }
}
END_TEST

START_TEST(test_casts_replicate_half) {
    uint16_t all[65536];
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    float f[65536];
    uint16_t back[65536];
    enum { NB = 1 << 20 };
    float *src = malloc(sizeof(float) * NB);
    uint16_t *h = malloc(2 * NB);
    ck_assert(src && h);
    for (int i = 0; i < NB; i++) src[i] = half_bits_f32((uint32_t)((uint64_t)i * 4099u) ^ (uint32_t)(i & 0xff));
    for (int k = 0; k < NISA; k++) {
        const HkVec *V = hk_vec_for(ALL_ISA[k]);
        if (!V) continue;
        for (int dt = 0; dt < 2; dt++) {
            DType t = dt ? DT_F16 : DT_BF16;
            V->cast(all, t, f, DT_F32, 65536);
            for (int i = 0; i < 65536; i++) {
                float want = dt ? half_f16_to_f32((uint16_t)i) : half_bf16_to_f32((uint16_t)i);
                CHECK(half_f32_bits(f[i]) == half_f32_bits(want), "%04x", i);
            }
            V->cast(f, DT_F32, back, t, 65536);
            for (int i = 0; i < 65536; i++) {
                uint16_t want = dt ? half_f32_to_f16(f[i]) : half_f32_to_bf16(f[i]);
                CHECK(back[i] == want, "%s %s: %04x -> %04x, want %04x", hk_isa_name(ALL_ISA[k]),
                              dt ? "f16" : "bf16", i, back[i], want);
            }
            V->cast(src, DT_F32, h, t, NB);
            for (int i = 0; i < NB; i++) {
                uint16_t want = dt ? half_f32_to_f16(src[i]) : half_f32_to_bf16(src[i]);
                CHECK(h[i] == want, "%s %s: %08x -> %04x, want %04x", hk_isa_name(ALL_ISA[k]),
                              dt ? "f16" : "bf16", half_f32_bits(src[i]), h[i], want);
            }
            /* every tail length, and acc (dst += src rounded once) */
            for (int len = 0; len <= 33; len++) {
                uint16_t o[40];
                memset(o, 0xab, sizeof o);
                V->cast(src + 1000, DT_F32, o, t, len);
                for (int i = 0; i < 40; i++) {
                    uint16_t want = i < len ? (dt ? half_f32_to_f16(src[1000 + i]) : half_f32_to_bf16(src[1000 + i])) : 0xabab;
                    CHECK(o[i] == want);
                }
                float acc[40];
                for (int i = 0; i < 40; i++) acc[i] = (float)i;
                V->acc(o, t, acc, DT_F32, len);
                for (int i = 0; i < 40; i++) {
                    float want = i < len ? (float)i + (dt ? half_f16_to_f32(o[i]) : half_bf16_to_f32(o[i])) : (float)i;
                    CHECK(half_f32_bits(acc[i]) == half_f32_bits(want) || (isnan(acc[i]) && isnan(want)));
                }
            }
        }
    }
    free(src), free(h);
}
END_TEST

START_TEST(test_gemm_tiles) {
    enum { MX = 37, NX = 70, KX = 19 };
    float A[MX * KX * 2], B[KX * (NX + 3)], C[MX * (NX + 5)], C0[MX * (NX + 5)];
    for (size_t i = 0; i < sizeof A / 4; i++) A[i] = runif();
    for (size_t i = 0; i < sizeof B / 4; i++) B[i] = runif();
    for (size_t i = 0; i < sizeof C0 / 4; i++) C0[i] = runif();
    for (int k = 0; k < NISA; k++) {
        const HkVec *V = hk_vec_for(ALL_ISA[k]);
        if (!V) continue;
        for (int M = 1; M <= MX; M += (M < 13 ? 1 : 12))
            for (int N = 1; N <= NX; N += (N < 34 ? 1 : 9))
                for (int K = 0; K <= KX; K += 6)
                    for (int tr = 0; tr < 2; tr++)
                        for (int acc = 0; acc < 2; acc++) {
                            int64_t ldb = NX + 3, ldc = NX + 5, sam = tr ? 1 : KX, sak = tr ? MX : 1;
                            memcpy(C, C0, sizeof C);
                            V->gemm(M, N, K, A, sam, sak, B, ldb, C, ldc, acc);
                            for (int m = 0; m < MX; m++)
                                for (int n = 0; n < NX + 5; n++) {
                                    float got = C[m * ldc + n];
                                    if (m >= M || n >= N) {
                                        CHECK(got == C0[m * ldc + n]); /* outside: untouched */
                                        continue;
                                    }
                                    double want = acc ? C0[m * ldc + n] : 0, mag = fabs(want);
                                    for (int q = 0; q < K; q++) {
                                        double p = (double)A[m * sam + q * sak] * B[q * ldb + n];
                                        want += p;
                                        mag += fabs(p);
                                    }
                                    CHECK(fabs(got - want) <= 1e-6 * (mag + 1e-30), "%s M%d N%d K%d", hk_isa_name(ALL_ISA[k]), M, N, K);
                                }
                        }
    }
}
END_TEST

START_TEST(test_transpose) {
    float src[37 * 41], dst[41 * 40];
    for (int i = 0; i < 37 * 41; i++) src[i] = (float)i;
    for (int k = 0; k < NISA; k++) {
        const HkVec *V = hk_vec_for(ALL_ISA[k]);
        if (!V) continue;
        for (int rows = 0; rows <= 37; rows += (rows < 17 ? 1 : 10))
            for (int cols = 0; cols <= 35; cols += (cols < 17 ? 1 : 9)) {
                for (int i = 0; i < 41 * 40; i++) dst[i] = -1;
                V->transpose(src, 41, rows, cols, dst, 40);
                for (int c = 0; c < 41; c++)
                    for (int r = 0; r < 40; r++)
                        CHECK(dst[c * 40 + r] == (r < rows && c < cols ? src[r * 41 + c] : -1.0f), "%s %dx%d",
                              hk_isa_name(ALL_ISA[k]), rows, cols);
            }
    }
}
END_TEST

START_TEST(test_sumsq) {
    enum { N = 1037 };
    float x[N];
    uint16_t h[N];
    double want = 0, wanth = 0;
    for (int i = 0; i < N; i++) {
        x[i] = 3 * runif();
        h[i] = half_f32_to_bf16(x[i]);
        want += (double)x[i] * x[i];
        wanth += (double)half_bf16_to_f32(h[i]) * half_bf16_to_f32(h[i]);
    }
    for (int k = 0; k < NISA; k++) {
        const HkVec *V = hk_vec_for(ALL_ISA[k]);
        if (!V) continue;
        ck_assert(fabs(V->sumsq(x, DT_F32, N) - want) <= 1e-13 * want);
        ck_assert(fabs(V->sumsq(h, DT_BF16, N) - wanth) <= 1e-13 * wanth);
        ck_assert(V->sumsq(x, DT_F32, 0) == 0);
    }
    int64_t d1[1] = {N};
    HkTensor X = hk_tensor(x, DT_F32, 1, d1);
    ck_assert(fabs(hk_sum_squares(&X) - want) <= 1e-13 * want);
}
END_TEST

/* ---- whole kernels on each instruction set against the default ---- */

static double normwise(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

enum { KB = 2, KT = 77, KH = 4, KKV = 2, KHD = 24, KC = KH * KHD, KKC = KKV * KHD, KD = 200 };

typedef struct Outs {
    float att_y[KB * KT * KC], att_dq[KB * KT * KC], att_dk[KB * KT * KKC], att_dv[KB * KT * KKC];
    float ln_y[KB * KT * KD], ln_dx[KB * KT * KD], ln_dg[KD], ln_db[KD];
    float rms_y[KB * KT * KD], rms_dx[KB * KT * KD], rms_dg[KD];
    float ce_dl[KB * KT * KD], ce_loss;
    float ge_y[KB * KT * KD], ge_dx[KB * KT * KD];
} Outs;

static float in_q[KB * KT * KC], in_k[KB * KT * KKC], in_v[KB * KT * KKC], in_do[KB * KT * KC];
static float in_x[KB * KT * KD], in_g[KD], in_b[KD], in_dy[KB * KT * KD];
static int32_t in_t[KB * KT];

static void fill_inputs(void) {
    rng = 99;
    for (int i = 0; i < KB * KT * KC; i++) in_q[i] = runif(), in_do[i] = runif();
    for (int i = 0; i < KB * KT * KKC; i++) in_k[i] = runif(), in_v[i] = runif();
    for (int i = 0; i < KB * KT * KD; i++) in_x[i] = 3 * runif(), in_dy[i] = runif();
    for (int i = 0; i < KD; i++) in_g[i] = 1 + runif() / 2, in_b[i] = runif();
    for (int i = 0; i < KB * KT; i++) in_t[i] = (int32_t)(rnext() % KD);
}

static void run_kernels(Outs *o) {
    memset(o, 0, sizeof *o);
    int64_t dq[3] = {KB, KT, KC}, dk[3] = {KB, KT, KKC}, dx[3] = {KB, KT, KD}, dg[1] = {KD}, dt[2] = {KB, KT};
    HkTensor Q = hk_tensor(in_q, DT_F32, 3, dq), K = hk_tensor(in_k, DT_F32, 3, dk), Vv = hk_tensor(in_v, DT_F32, 3, dk);
    HkTensor DO = hk_tensor(in_do, DT_F32, 3, dq), Y = hk_tensor(o->att_y, DT_F32, 3, dq);
    HkTensor DQ = hk_tensor(o->att_dq, DT_F32, 3, dq), DK = hk_tensor(o->att_dk, DT_F32, 3, dk),
             DV = hk_tensor(o->att_dv, DT_F32, 3, dk);
    void *ws = malloc(hk_attention_workspace_bytes(&Q, KH));
    ck_assert_int_eq(hk_attention_fwd(&Q, &K, &Vv, &Y, KH, KKV, ws), HK_OK);
    ck_assert_int_eq(hk_attention_bwd(&Q, &K, &Vv, &DO, &DQ, &DK, &DV, KH, KKV, ws), HK_OK);
    free(ws);
    HkTensor X = hk_tensor(in_x, DT_F32, 3, dx), G = hk_tensor(in_g, DT_F32, 1, dg), Bt = hk_tensor(in_b, DT_F32, 1, dg);
    HkTensor DY = hk_tensor(in_dy, DT_F32, 3, dx);
    HkTensor LY = hk_tensor(o->ln_y, DT_F32, 3, dx), LDX = hk_tensor(o->ln_dx, DT_F32, 3, dx),
             LDG = hk_tensor(o->ln_dg, DT_F32, 1, dg), LDB = hk_tensor(o->ln_db, DT_F32, 1, dg);
    ws = malloc(hk_layernorm_workspace_bytes(&X));
    ck_assert_int_eq(hk_layernorm_fwd(&X, &G, &Bt, &LY, 1e-5, ws), HK_OK);
    ck_assert_int_eq(hk_layernorm_bwd(&X, &G, &DY, &LDX, &LDG, &LDB, ws), HK_OK);
    free(ws);
    HkTensor RY = hk_tensor(o->rms_y, DT_F32, 3, dx), RDX = hk_tensor(o->rms_dx, DT_F32, 3, dx),
             RDG = hk_tensor(o->rms_dg, DT_F32, 1, dg);
    ws = malloc(hk_rmsnorm_workspace_bytes(&X));
    ck_assert_int_eq(hk_rmsnorm_fwd(&X, &G, &RY, 1e-5, ws), HK_OK);
    ck_assert_int_eq(hk_rmsnorm_bwd(&X, &G, &DY, &RDX, &RDG, ws), HK_OK);
    free(ws);
    HkTensor Tg = hk_tensor(in_t, DT_I32, 2, dt), L = hk_tensor(&o->ce_loss, DT_F32, 0, NULL), DL = hk_tensor(o->ce_dl, DT_F32, 3, dx);
    float one = 1;
    HkTensor ONE = hk_tensor(&one, DT_F32, 0, NULL);
    ws = malloc(hk_cross_entropy_workspace_bytes(&X));
    ck_assert_int_eq(hk_cross_entropy_fwd(&X, &Tg, &L, ws), HK_OK);
    ck_assert_int_eq(hk_cross_entropy_bwd(&X, &Tg, &ONE, &DL, ws), HK_OK);
    free(ws);
    HkTensor GY = hk_tensor(o->ge_y, DT_F32, 3, dx), GDX = hk_tensor(o->ge_dx, DT_F32, 3, dx);
    ck_assert_int_eq(hk_gelu_fwd(&X, &GY), HK_OK);
    ck_assert_int_eq(hk_gelu_bwd(&X, &DY, &GDX), HK_OK);
}

#define CMP(field, tol) \
    ck_assert_msg(normwise(o->field, ref->field, (int64_t)(sizeof o->field / 4)) <= (tol), "%s: %s %g", name, #field, \
                  normwise(o->field, ref->field, (int64_t)(sizeof o->field / 4)))

static void compare(const Outs *o, const Outs *ref, const char *name, double tol) {
    CMP(att_y, tol);
    CMP(att_dq, tol);
    CMP(att_dk, tol);
    CMP(att_dv, tol);
    CMP(ln_y, tol);
    CMP(ln_dx, tol);
    CMP(ln_dg, tol);
    CMP(ln_db, tol);
    CMP(rms_y, tol);
    CMP(rms_dx, tol);
    CMP(rms_dg, tol);
    CMP(ce_dl, tol);
    CMP(ge_y, tol);
    CMP(ge_dx, tol);
    ck_assert(fabs(o->ce_loss - ref->ce_loss) <= tol * fabs(ref->ce_loss));
}

START_TEST(test_kernels_every_isa) {
    fill_inputs();
    Outs *ref = malloc(sizeof *ref), *o = malloc(sizeof *o);
    ck_assert(ref && o);
    hk_isa_set(HK_ISA_AUTO);
    run_kernels(ref);
    for (int k = 0; k < NISA; k++) {
        if (hk_isa_set(ALL_ISA[k])) continue;
        run_kernels(o);
        compare(o, ref, hk_isa_name(ALL_ISA[k]), 1e-5);
    }
    hk_isa_set(HK_ISA_AUTO);
    free(ref), free(o);
}
END_TEST

START_TEST(test_thread_invariance) {
    fill_inputs();
    Outs *ref = malloc(sizeof *ref), *o = malloc(sizeof *o);
    ck_assert(ref && o);
    int th[3] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        hk_threads_set(th[k]);
        run_kernels(k ? o : ref);
        if (k) ck_assert_msg(!memcmp(o, ref, sizeof *o), "%d threads differ from 1", th[k]);
    }
    /* a GEMM split into panels: linear [700, 300] x [300, 520] */
    enum { M = 700, I = 300, N = 520 };
    float *x = malloc(sizeof(float) * M * I), *w = malloc(sizeof(float) * I * N), *y[3];
    for (int i = 0; i < M * I; i++) x[i] = runif();
    for (int i = 0; i < I * N; i++) w[i] = runif();
    int64_t dxm[2] = {M, I}, dw[2] = {I, N}, dy[2] = {M, N};
    HkTensor X = hk_tensor(x, DT_F32, 2, dxm), W = hk_tensor(w, DT_F32, 2, dw);
    for (int k = 0; k < 3; k++) {
        hk_threads_set(th[k]);
        y[k] = malloc(sizeof(float) * M * N);
        HkTensor Y = hk_tensor(y[k], DT_F32, 2, dy);
        ck_assert_int_eq(hk_linear_fwd(&X, &W, NULL, &Y, NULL), HK_OK);
        if (k) ck_assert(!memcmp(y[k], y[0], sizeof(float) * M * N));
    }
    hk_threads_set(0);
    free(x), free(w), free(y[0]), free(y[1]), free(y[2]), free(ref), free(o);
}
END_TEST

/* ---- the pool ---- */

typedef struct Count {
    int *hits;
    int nested;
} Count;

static void count_unit(void *ctx, int64_t u) {
    Count *c = ctx;
    __atomic_fetch_add(&c->hits[u], 1, __ATOMIC_RELAXED);
}

static void nest_unit(void *ctx, int64_t u) {
    Count *c = ctx;
    (void)u;
    int h[5] = {0};
    Count in = {h, 0};
    hk_parallel(4, 5, count_unit, &in); /* inside a unit: runs here, in order */
    for (int i = 0; i < 5; i++)
        if (h[i] != 1) __atomic_fetch_add(&c->nested, 1, __ATOMIC_RELAXED);
}

START_TEST(test_pool) {
    hk_threads_set(3);
    ck_assert_int_eq(hk_threads(), 3);
    for (int rep = 0; rep < 200; rep++) {
        int n = 1 + rep * 7 % 300;
        int *hits = calloc((size_t)n, sizeof(int));
        Count c = {hits, 0};
        hk_parallel(1 + rep % 4, n, count_unit, &c);
        for (int i = 0; i < n; i++) CHECK(hits[i] == 1, "unit %d ran %d times", i, hits[i]);
        free(hits);
    }
    int h[16] = {0};
    Count c = {h, 0};
    hk_parallel(3, 16, nest_unit, &c);
    ck_assert_int_eq(c.nested, 0);
    char line[256];
    ck_assert(hk_threads_describe(line, sizeof line) > 0);
    ck_assert(strstr(line, "threads: 3 per rank") != NULL);
    hk_threads_set(0);
    ck_assert(hk_threads() >= 1);
    ck_assert(hk_team(0) == 1);
}
END_TEST

/* The ranks on this node that MPI counted decide the team when no
 * variable does (an srun without --ntasks-per-node sets none). Runs in its
 * own forked process: the policy is decided once per process. */
START_TEST(test_local_ranks) {
    if (getenv("CK_FORK") && !strcmp(getenv("CK_FORK"), "no")) return; /* the policy may be decided already */
    static const char *const vars[] = {"OMP_NUM_THREADS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                       "PMI_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    setenv("SLURM_NTASKS_PER_NODE", "7", 1); /* MPI's count wins over the launcher's variables */
    hk_threads_local_ranks(2);
    char line[256];
    ck_assert(hk_threads_describe(line, sizeof line) > 0);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    bool bound = sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < online;
    if (bound) ck_assert_msg(strstr(line, "bound to") != NULL, "%s", line);
    else ck_assert_msg(strstr(line, "cores / 2 ranks on this node") != NULL, "%s", line);
    ck_assert_int_eq(hk_threads(), bound ? CPU_COUNT(&set) : (online / 2 > 0 ? (int)(online / 2) : 1));
}
END_TEST

/* A count the program asked for (zinfrun's ZINF_THREADS) wins over
 * OMP_NUM_THREADS and is described with the words it came with. Forked,
 * as above. */
START_TEST(test_threads_asked) {
    if (getenv("CK_FORK") && !strcmp(getenv("CK_FORK"), "no")) return; /* the policy may be decided already */
    setenv("OMP_NUM_THREADS", "2", 1);
    hk_threads_ask(3, "ZINF_THREADS");
    ck_assert_int_eq(hk_threads(), 3);
    char line[256];
    ck_assert(hk_threads_describe(line, sizeof line) > 0);
    ck_assert_msg(strstr(line, "threads: 3 per rank (ZINF_THREADS)") != NULL, "%s", line);
    unsetenv("OMP_NUM_THREADS");
}
END_TEST

START_TEST(test_isa_choice) {
    ck_assert(hk_isa() != HK_ISA_AUTO);
    ck_assert(hk_isa_supported(HK_ISA_SCALAR));
    ck_assert_int_eq(hk_isa_set(HK_ISA_SCALAR), 0);
    ck_assert_int_eq(hk_isa(), HK_ISA_SCALAR);
    ck_assert_int_eq(hk_vec()->width, 1);
    ck_assert_int_eq(hk_isa_set(HK_ISA_AUTO), 0);
    ck_assert_str_eq(hk_isa_name(HK_ISA_AVX512), "avx512");
    /* by name, as the programs pass ZINF_HK_ISA */
    ck_assert_int_eq(hk_threads_kernels_isa("scalar"), 0);
    ck_assert_int_eq(hk_isa(), HK_ISA_SCALAR);
    ck_assert_int_eq(hk_threads_kernels_isa("sse9"), -1);
    ck_assert_int_eq(hk_isa(), HK_ISA_SCALAR);
    ck_assert_int_eq(hk_threads_kernels_isa("avx512"), hk_isa_supported(HK_ISA_AVX512) ? 0 : -2);
    ck_assert_int_eq(hk_threads_kernels_isa("auto"), 0);
    ck_assert(hk_isa() != HK_ISA_SCALAR || !hk_isa_supported(HK_ISA_AVX2));
    for (int k = 0; k < NISA; k++)
        ck_assert((hk_vec_for(ALL_ISA[k]) != NULL) == hk_isa_supported(ALL_ISA[k]));
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("hostk_vec");
    TCase *a = tcase_create("approximations");
    tcase_set_timeout(a, 300);
    tcase_add_test(a, test_tanh_forms_agree);
    tcase_add_test(a, test_exp_bound);
    tcase_add_test(a, test_gelu_bound);
    tcase_add_test(a, test_silu_bound);
    tcase_add_test(a, test_isa_bit_identical);
    tcase_add_test(a, test_casts_replicate_half);
    suite_add_tcase(s, a);
    TCase *k = tcase_create("kernels");
    tcase_set_timeout(k, 300);
    tcase_add_test(k, test_gemm_tiles);
    tcase_add_test(k, test_transpose);
    tcase_add_test(k, test_sumsq);
    tcase_add_test(k, test_kernels_every_isa);
    tcase_add_test(k, test_thread_invariance);
    tcase_add_test(k, test_pool);
    tcase_add_test(k, test_local_ranks);
    tcase_add_test(k, test_threads_asked);
    tcase_add_test(k, test_isa_choice);
    suite_add_tcase(s, k);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
