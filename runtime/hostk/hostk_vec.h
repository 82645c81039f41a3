/* hostk_vec: the vector layer of the host kernels (private to hostk).
 *
 * One table of row and tile functions per instruction set: AVX-512F,
 * AVX2+FMA+F16C, or plain C. The table in use is chosen once per process
 * like the CPU Adam's (runtime/hostk/adam.c): the best the processor has,
 * unless hk_isa_set() chose one (the programs pass ZINF_HK_ISA=scalar|avx2|avx512,
 * for comparison; tests). Every function is written once (runtime/hostk/hostk_simd.h) over a
 * small set of vector operations and compiled three times with per-function
 * target attributes, so this file builds with the default flags.
 *
 * Elementwise functions use only IEEE operations that every path rounds the
 * same way (add, mul, div, fma, round-to-integer, exponent arithmetic; the
 * plain C path calls fmaf), so they give bit-identical results on all three
 * paths and at any position in a tensor. Reductions (sums in double, the
 * GEMM tiles) group their terms by vector width, so they differ between
 * paths by rounding only.
 *
 * Approximations (bounds measured over dense sweeps against the C
 * library's double functions: tests/unit/test_hostk_vec.c):
 *   exp(x)            relative error <= HK_EXP_REL for results >= FLT_MIN
 *                     (subnormal results: absolute <= 2^-149; x < -103.98: 0;
 *                     x > 88.73: inf; NaN stays NaN)
 *   gelu(x) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)  (the tanh
 *                     form: 0.5 x (1 + tanh u) is the same function)
 *                     relative <= HK_GELU_REL where |gelu(x)| >= 1e-30
 *   gelu'(x)          absolute <= HK_GELU_GRAD_ABS (values in [-0.17, 1.13])
 *   silu(x) = x * sigmoid(x)       relative <= HK_SILU_REL where |silu(x)| >= 1e-30
 *   silu'(x)          absolute <= HK_SILU_GRAD_ABS
 * Casts between f32 and bf16/f16 are exact replicas of runtime/base/half.h
 * (round to nearest even, NaN kept quiet, f16 subnormals and overflow). */
#ifndef ZINF_HOSTK_VEC_H
#define ZINF_HOSTK_VEC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "vocab.h"

#define HK_EXP_REL 2e-7
#define HK_GELU_REL 2e-6
#define HK_GELU_REL_TAIL 1.5e-5
#define HK_GELU_GRAD_ABS 3e-7
#define HK_SILU_REL 4e-7
#define HK_SILU_GRAD_ABS 3e-7

typedef enum HkIsa { HK_ISA_AUTO = 0, HK_ISA_SCALAR, HK_ISA_AVX2, HK_ISA_AVX512 } HkIsa;

HkIsa hk_isa(void);                 /* the path in use (never AUTO) */
bool hk_isa_supported(HkIsa isa);   /* AUTO and SCALAR: always */
int hk_isa_set(HkIsa isa);          /* 0, or -1 when not supported; AUTO: back to the default */
const char *hk_isa_name(HkIsa isa);
int hk_isa_parse(const char *name, HkIsa *out); /* a name as hk_isa_name writes it; 0, or -1 when unknown */

/* One instruction set's functions. Pointers are f32 unless a DType says
 * otherwise; n, D: elements; no function allocates or keeps state. */
typedef struct HkVec {
    HkIsa isa;
    int width; /* floats per vector */
    /* dst[i] = src[i] converted (f32, bf16, f16 any to any; exact replica of half.h) */
    void (*cast)(const void *src, DType st, void *dst, DType dt, int64_t n);
    /* dst[i] += src[i] (dst rounded once into its dtype) */
    void (*acc)(const void *src, DType st, void *dst, DType dt, int64_t n);
    /* y = f(x); dx += dy * f'(x)  (f32 rows) */
    void (*gelu_fwd)(const float *x, float *y, int64_t n);
    void (*gelu_bwd)(const float *x, const float *dy, float *dx, int64_t n);
    void (*silu_fwd)(const float *x, float *y, int64_t n);
    void (*silu_bwd)(const float *x, const float *dy, float *dx, int64_t n);
    void (*exp)(const float *x, float *y, int64_t n);
    /* max of x (any float dtype; NaNs are passed over); -inf for n == 0 */
    float (*max)(const void *x, DType xt, int64_t n);
    /* sum of exp(x[i] - shift) in double */
    double (*exp_sum)(const void *x, DType xt, float shift, int64_t n);
    /* in place: x[i] = exp(a x[i] - shift) (one fma); returns the sum in double */
    double (*exp_shift_sum)(float *x, float a, float shift, int64_t n);
    /* in place: x[i] = exp(a x[i] - shift) */
    void (*exp_shift)(float *x, float a, float shift, int64_t n);
    /* d[i] += exp(x[i] - shift) * s   (d of dtype dt, rounded once) */
    void (*exp_axpy)(const void *x, DType xt, float shift, float s, void *d, DType dt, int64_t n);
    /* x[i] *= s */
    void (*scale)(float *x, float s, int64_t n);
    /* dp[i] = p[i] * (dp[i] - c) * s */
    void (*dsoftmax)(const float *p, float *dp, float c, float s, int64_t n);
    /* sum of a[i] * b[i] in double */
    double (*dot)(const float *a, const float *b, int64_t n);
    /* acc[i] += (double) x[i];  acc[i] += (double)(a[i] * b[i]) (b NULL: a[i]) */
    void (*dacc)(double *acc, const float *x, int64_t n);
    void (*dacc2)(double *acc, const void *a, DType at, const void *b, DType bt, int64_t n);
    /* sum of x[i]^2 in double */
    double (*sumsq)(const void *x, DType xt, int64_t n);
    /* y = a + b or a * b;  y += a * b (product rounded, then the sum) */
    void (*bin)(const void *a, DType at, const void *b, DType bt, void *y, DType yt, int64_t n, bool mul);
    void (*mul_acc)(const void *a, DType at, const void *b, DType bt, void *y, DType yt, int64_t n);
    /* layernorm / rmsnorm of one row (g, b may be NULL; dx, pg, pb may be NULL:
     * pg[j] += dy*xhat and pb[j] += dy are the caller's double partials for dg, db) */
    void (*ln_fwd)(const void *x, DType xt, const void *g, DType gt, const void *b, DType bt, void *y, DType yt,
                   int64_t D, double eps, float *mean, float *rstd);
    void (*ln_bwd)(const void *x, DType xt, const void *g, DType gt, const void *dy, DType dyt, void *dx, DType dxt,
                   double *pg, double *pb, int64_t D, float mean, float rstd);
    void (*rms_fwd)(const void *x, DType xt, const void *g, DType gt, void *y, DType yt, int64_t D, double eps,
                    float *rstd);
    void (*rms_bwd)(const void *x, DType xt, const void *g, DType gt, const void *dy, DType dyt, void *dx, DType dxt,
                    double *pg, int64_t D, float rstd);
    /* C[M,N] = (acc ? C : 0) + A B, A(m, k) = A[m*sam + k*sak], B row-major [K, ldb], C [M, ldc] */
    void (*gemm)(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B,
                 int64_t ldb, float *C, int64_t ldc, bool acc);
    /* one tile of an online softmax down the columns of S [rows, ld] (keys x queries):
     * m' = max(m, scale max S), corr = exp(m - m'), S = exp(scale S - m'), l = l corr + colsum S;
     * m, l, corr have cols rounded up to the width; diag: a diagonal tile, keys after
     * their query masked (row u, column c: u > c) */
    void (*softmax_cols)(float *S, int64_t ld, int64_t rows, int64_t cols, float scale, float *m, double *l,
                         float *corr, bool diag);
    /* dst[c * ldd + r] = src[r * lds + c], r < rows, c < cols */
    void (*transpose)(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd);
} HkVec;

const HkVec *hk_vec(void);             /* the table of hk_isa() */
const HkVec *hk_vec_for(HkIsa isa);    /* a given table (NULL when not supported) */

#endif
