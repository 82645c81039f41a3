/* bench_hostk: each host kernel family's rate beside its limit, measured in
 * the same run at the same thread count:
 *   - memory-bound families (layernorm, rmsnorm, gelu, silu, cross-entropy,
 *     add, casts) in GB/s of the bytes they must move, beside a STREAM-style
 *     copy (memcpy in blocks on the same pool of threads) over arrays as
 *     large as theirs (all beyond the last-level cache);
 *   - attention forward and backward in GFLOP/s of the causal products they
 *     must compute (forward QK^T and PV, backward dV, dP, dQ, dK over the
 *     T(T+1)/2 query-key pairs), and the GEMM of linear, beside the sgemm
 *     rate: OpenBLAS's sgemm on a 1024^3 product, cut into panels on the same
 *     pool (OpenBLAS's own threading at the same count is printed last, for
 *     reference: its threads keep spinning after a call, which would slow
 *     whatever is measured next);
 *   - the plain triple loop and bf16 storage beside the GEMM, as before.
 * Every figure is the median over --reps repetitions of (kernel, limit)
 * measured back to back, and the fraction is the median of the per-rep
 * fractions, so a noisy machine moves both alike. Goals (printed, never
 * asserted): norms >= 50% of copy, attention >= 40% of sgemm (seq >= 256).
 *   - long context: attention at T = 8192 (4 heads of 64), forward and
 *     backward, beside sgemm (goal >= 50%), and with a sliding window of
 *     1024 in the same run: its time beside the full one's, and the ratio
 *     of their query-key pairs (what a window that skips the key tiles
 *     outside it should save); at most 3 repetitions (the full backward
 *     takes seconds).
 *   bench_hostk [--threads LIST] [--reps R] [--quick]
 * LIST: thread counts, e.g. 1,2 (default: 1 and the rank policy's count of
 * runtime/hostk/hostk_threads.h when it differs). */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "half.h"
#include "hostk.h"
#include "hostk_threads.h"
#include "hostk_vec.h"
#include "main_env.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fill(float *p, int64_t n, uint64_t seed) {
    uint64_t s = 88172645463325252ull ^ seed;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench_hostk: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the copy peer: memcpy in 256 KiB blocks on the pool ---- */

typedef struct Copy {
    float *dst;
    const float *src;
    int64_t n;
} Copy;
enum { COPY_BLOCK = 65536 };
static void copy_unit(void *ctx, int64_t u) {
    const Copy *c = ctx;
    int64_t lo = u * COPY_BLOCK, len = c->n - lo < COPY_BLOCK ? c->n - lo : COPY_BLOCK;
    memcpy(c->dst + lo, c->src + lo, sizeof(float) * (size_t)len);
}
static double copy_seconds(float *dst, const float *src, int64_t n) {
    Copy c = {dst, src, n};
    double t0 = now();
    hk_parallel(hk_threads(), (n + COPY_BLOCK - 1) / COPY_BLOCK, copy_unit, &c);
    return now() - t0;
}

/* ---- the families ---- */

enum { R = 8192, D = 1024, N = R * D };                /* memory-bound shapes: 32 MiB per f32 tensor */
enum { CR = 1024, CV = 8192 };                          /* cross-entropy logits [CR, CV] */

typedef struct Bufs {
    float *x, *y, *dy, *dx, *g, *b, *dg, *db, *cpy;
    uint16_t *h;
    int32_t *tgt;
    void *ws;
} Bufs;

typedef enum Fam {
    F_LN_FWD, F_LN_BWD, F_RMS_FWD, F_RMS_BWD, F_GELU_FWD, F_GELU_BWD, F_SILU_FWD, F_SILU_BWD, F_CE_FWD, F_CE_BWD,
    F_ADD_FWD, F_CAST_TO_BF16, F_CAST_FROM_BF16, F_MEM_COUNT
} Fam;
static const char *fam_name[F_MEM_COUNT] = {"layernorm fwd", "layernorm bwd", "rmsnorm fwd", "rmsnorm bwd", "gelu fwd",
                                            "gelu bwd", "silu fwd", "silu bwd", "cross-entropy fwd", "cross-entropy bwd",
                                            "add fwd", "cast f32->bf16", "cast bf16->f32"};
/* bytes each must move per element: reads and writes (a backward's dx is read and written: it accumulates) */
static const double fam_bytes[F_MEM_COUNT] = {8, 16, 8, 16, 8, 16, 8, 16, 4, 12, 12, 6, 6};
static const double fam_goal[F_MEM_COUNT] = {0.5, 0.5, 0.5, 0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static double run_family(Fam f, Bufs *bf) {
    int64_t d2[2] = {R, D}, d1[1] = {D}, dc[2] = {CR, CV}, dt[1] = {CR};
    HkTensor X = hk_tensor(bf->x, DT_F32, 2, d2), Y = hk_tensor(bf->y, DT_F32, 2, d2), DY = hk_tensor(bf->dy, DT_F32, 2, d2),
             DX = hk_tensor(bf->dx, DT_F32, 2, d2), G = hk_tensor(bf->g, DT_F32, 1, d1), B = hk_tensor(bf->b, DT_F32, 1, d1),
             DG = hk_tensor(bf->dg, DT_F32, 1, d1), DB = hk_tensor(bf->db, DT_F32, 1, d1);
    HkTensor L = hk_tensor(bf->x, DT_F32, 2, dc), DL = hk_tensor(bf->dx, DT_F32, 2, dc), T = hk_tensor(bf->tgt, DT_I32, 1, dt);
    float loss, one = 1;
    HkTensor LS = hk_tensor(&loss, DT_F32, 0, NULL), ONE = hk_tensor(&one, DT_F32, 0, NULL);
    HkTensor H = hk_tensor(bf->h, DT_BF16, 2, d2);
    double t0 = now();
    int rc = 0;
    switch (f) {
    case F_LN_FWD: rc = hk_layernorm_fwd(&X, &G, &B, &Y, 1e-5, bf->ws); break;
    case F_LN_BWD: rc = hk_layernorm_bwd(&X, &G, &DY, &DX, &DG, &DB, bf->ws); break;
    case F_RMS_FWD: rc = hk_rmsnorm_fwd(&X, &G, &Y, 1e-5, bf->ws); break;
    case F_RMS_BWD: rc = hk_rmsnorm_bwd(&X, &G, &DY, &DX, &DG, bf->ws); break;
    case F_GELU_FWD: rc = hk_gelu_fwd(&X, &Y); break;
    case F_GELU_BWD: rc = hk_gelu_bwd(&X, &DY, &DX); break;
    case F_SILU_FWD: rc = hk_silu_fwd(&X, &Y); break;
    case F_SILU_BWD: rc = hk_silu_bwd(&X, &DY, &DX); break;
    case F_CE_FWD: rc = hk_cross_entropy_fwd(&L, &T, &LS, bf->ws); break;
    case F_CE_BWD: rc = hk_cross_entropy_bwd(&L, &T, &ONE, &DL, bf->ws); break;
    case F_ADD_FWD: rc = hk_add_fwd(&X, &DY, &Y); break;
    case F_CAST_TO_BF16: rc = hk_cast(&X, &H); break;
    case F_CAST_FROM_BF16: rc = hk_cast(&H, &Y); break;
    default: break;
    }
    double t = now() - t0;
    if (rc) {
        fprintf(stderr, "bench_hostk: %s: %s\n", fam_name[f], hk_strerror(rc));
        exit(1);
    }
    return t;
}

static int64_t fam_elems(Fam f) { return f == F_CE_FWD || f == F_CE_BWD ? (int64_t)CR * CV : N; }

/* ---- GEMM and attention ---- */

/* the sgemm limit: 1024^3 through matmul (OpenBLAS's kernel, panels on the pool) */
static double gemm_limit(float *a, float *b, float *c, int n) {
    int64_t d[2] = {n, n};
    HkTensor A = hk_tensor(a, DT_F32, 2, d), B = hk_tensor(b, DT_F32, 2, d), C = hk_tensor(c, DT_F32, 2, d);
    double t0 = now();
    if (hk_matmul_fwd(&A, &B, &C, false, false, NULL)) exit(1);
    return now() - t0;
}

static double gemm_blas_own_threads(const float *a, const float *b, float *c, int n, int threads) {
    openblas_set_num_threads(threads);
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double t = now() - t0;
    openblas_set_num_threads(1);
    return t;
}

/* Attention at T = 8192, 4 heads of 64: full, then a window of 1024, each
 * rep measured beside sgemm; rates in GFLOP/s of the pairs each computes. */
static void long_attention(int r, float *ga, float *gb, float *gc, int G, double gflop, double sgemm) {
    enum { T = 8192, H = 4, HD = 64, C = H * HD, WIN = 1024 };
    int64_t d[3] = {1, T, C};
    float *q = xmalloc(sizeof(float) * T * C), *k = xmalloc(sizeof(float) * T * C), *v = xmalloc(sizeof(float) * T * C);
    float *o = xmalloc(sizeof(float) * T * C), *g = calloc(3 * (size_t)T * C, sizeof(float));
    if (!g) exit(1);
    fill(q, (int64_t)T * C, 20), fill(k, (int64_t)T * C, 21), fill(v, (int64_t)T * C, 22);
    HkTensor Q = hk_tensor(q, DT_F32, 3, d), Kt = hk_tensor(k, DT_F32, 3, d), V = hk_tensor(v, DT_F32, 3, d),
             O = hk_tensor(o, DT_F32, 3, d), dQ = hk_tensor(g, DT_F32, 3, d), dK = hk_tensor(g + T * C, DT_F32, 3, d),
             dV = hk_tensor(g + 2 * T * C, DT_F32, 3, d);
    void *aws = xmalloc(hk_attention_workspace_bytes(&Q, H));
    /* query-key pairs: full causal T(T+1)/2; windowed W(W+1)/2 + (T-W)W */
    double pairs[2] = {(double)T * (T + 1) / 2, (double)WIN * (WIN + 1) / 2 + (double)(T - WIN) * WIN};
    int64_t wins[2] = {0, WIN};
    double tf[2][64], tb[2][64], qf[2][64], qb[2][64];
    for (int kk = 0; kk < r; kk++)
        for (int w = 0; w < 2; w++) {
            double ff = 2 * 2.0 * HD * H * pairs[w], fb = 2 * ff;
            double s = gflop / gemm_limit(ga, gb, gc, G) * 1e-9;
            double t0 = now();
            hk_attention_fwd_window(&Q, &Kt, &V, &O, H, H, wins[w], NULL, aws);
            double t1 = now();
            hk_attention_bwd_window(&Q, &Kt, &V, &O, &dQ, &dK, &dV, H, H, wins[w], NULL, aws);
            double t2 = now();
            tf[w][kk] = t1 - t0, tb[w][kk] = t2 - t1;
            qf[w][kk] = ff / tf[w][kk] * 1e-9 / s, qb[w][kk] = fb / tb[w][kk] * 1e-9 / s;
        }
    for (int w = 0; w < 2; w++) {
        char name[64];
        double ff = 2 * 2.0 * HD * H * pairs[w], mf = median(qf[w], r), mb = median(qb[w], r);
        snprintf(name, sizeof name, w ? "attn fwd T=8192 W=1024" : "attention fwd T=8192");
        printf("%-22s %10.2f %12.2f %7.0f%%   %.3f s%s\n", name, ff / median(tf[w], r) * 1e-9, sgemm, 100 * mf,
               median(tf[w], r), w ? "" : (mf >= 0.5 ? "   >= 50%: met" : "   >= 50%: below"));
        snprintf(name, sizeof name, w ? "attn bwd T=8192 W=1024" : "attention bwd T=8192");
        printf("%-22s %10.2f %12.2f %7.0f%%   %.3f s%s\n", name, 2 * ff / median(tb[w], r) * 1e-9, sgemm, 100 * mb,
               median(tb[w], r), w ? "" : (mb >= 0.5 ? "   >= 50%: met" : "   >= 50%: below"));
    }
    printf("%-22s %10s %12s %8s   full / windowed time: forward %.2fx, backward %.2fx (pairs %.2fx)\n", "window 1024 of 8192",
           "", "", "", median(tf[0], r) / median(tf[1], r), median(tb[0], r) / median(tb[1], r), pairs[0] / pairs[1]);
    free(q), free(k), free(v), free(o), free(g), free(aws);
}

static void run_threads(int threads, int reps, bool quick) {
    hk_threads_set(threads);
    printf("-- %d thread%s (kernels %s)\n", threads, threads == 1 ? "" : "s", hk_isa_name(hk_isa()));
    Bufs bf;
    bf.x = xmalloc(sizeof(float) * N), bf.y = xmalloc(sizeof(float) * N), bf.dy = xmalloc(sizeof(float) * N);
    bf.dx = xmalloc(sizeof(float) * N), bf.cpy = xmalloc(sizeof(float) * N);
    bf.g = xmalloc(sizeof(float) * D), bf.b = xmalloc(sizeof(float) * D), bf.dg = xmalloc(sizeof(float) * D);
    bf.db = xmalloc(sizeof(float) * D), bf.h = xmalloc(2 * (size_t)N), bf.tgt = xmalloc(sizeof(int32_t) * CR);
    fill(bf.x, N, 1), fill(bf.dy, N, 2), fill(bf.dx, N, 3), fill(bf.g, D, 4), fill(bf.b, D, 5);
    memset(bf.dg, 0, sizeof(float) * D), memset(bf.db, 0, sizeof(float) * D);
    for (int i = 0; i < CR; i++) bf.tgt[i] = (int32_t)(i * 7919 % CV);
    int64_t d2[2] = {R, D}, dc[2] = {CR, CV};
    HkTensor X = hk_tensor(bf.x, DT_F32, 2, d2), L = hk_tensor(bf.x, DT_F32, 2, dc);
    size_t wsb = hk_layernorm_workspace_bytes(&X);
    if (hk_cross_entropy_workspace_bytes(&L) > wsb) wsb = hk_cross_entropy_workspace_bytes(&L);
    bf.ws = xmalloc(wsb);
    for (int i = 0; i < N; i++) bf.h[i] = half_f32_to_bf16(bf.x[i]);

    printf("%-22s %10s %12s %8s %s\n", "memory-bound family", "GB/s", "copy GB/s", "fraction", "goal");
    double copy_all[64];
    int ncopy = 0;
    for (int f = 0; f < F_MEM_COUNT; f++) {
        double rate[64], frac[64], cp[64];
        int r = quick ? 1 : reps;
        run_family((Fam)f, &bf); /* warm-up */
        for (int k = 0; k < r; k++) {
            double tc = copy_seconds(bf.cpy, bf.dy, N);
            double tk = run_family((Fam)f, &bf);
            rate[k] = fam_bytes[f] * (double)fam_elems((Fam)f) / tk * 1e-9;
            cp[k] = 8.0 * N / tc * 1e-9;
            frac[k] = rate[k] / cp[k];
            if (ncopy < 64) copy_all[ncopy++] = cp[k];
        }
        double fm = median(frac, r);
        printf("%-22s %10.2f %12.2f %7.0f%% %s\n", fam_name[f], median(rate, r), median(cp, r), 100 * fm,
               fam_goal[f] > 0 ? (fm >= fam_goal[f] ? ">= 50%: met" : ">= 50%: below") : "");
    }
    printf("%-22s %10s %12.2f   (STREAM-style copy, median of the %d measurements above)\n", "copy", "", median(copy_all, ncopy), ncopy);
    free(bf.x), free(bf.y), free(bf.dy), free(bf.dx), free(bf.cpy), free(bf.g), free(bf.b), free(bf.dg), free(bf.db);
    free(bf.h), free(bf.tgt), free(bf.ws);

    /* GEMM: the sgemm limit (OpenBLAS, its own threads), linear through the pool, bf16 storage, the triple loop */
    enum { G = 1024 };
    float *ga = xmalloc(sizeof(float) * G * G), *gb = xmalloc(sizeof(float) * G * G), *gc = xmalloc(sizeof(float) * G * G);
    fill(ga, G * G, 6), fill(gb, G * G, 7);
    double gflop = 2.0 * G * G * G;
    double sg[64];
    int r = quick ? 1 : reps;
    gemm_limit(ga, gb, gc, G);
    for (int k = 0; k < r; k++) sg[k] = gflop / gemm_limit(ga, gb, gc, G) * 1e-9;
    double sgemm = median(sg, r);
    printf("%-22s %10s %12s %8s\n", "compute-bound family", "GFLOP/s", "sgemm", "fraction");
    printf("%-22s %10.2f %12s %8s   (OpenBLAS sgemm %dx%dx%d, panels on the pool)\n", "sgemm", sgemm, "", "", G, G, G);
    {
        enum { M = 2048, K = 768, Nn = 3072 };
        float *x = xmalloc(sizeof(float) * M * K), *w = xmalloc(sizeof(float) * K * Nn), *y = xmalloc(sizeof(float) * M * Nn);
        fill(x, (int64_t)M * K, 8), fill(w, (int64_t)K * Nn, 9);
        int64_t dx[2] = {M, K}, dw[2] = {K, Nn}, dy[2] = {M, Nn};
        HkTensor Xt = hk_tensor(x, DT_F32, 2, dx), W = hk_tensor(w, DT_F32, 2, dw), Y = hk_tensor(y, DT_F32, 2, dy);
        double fl = 2.0 * M * K * Nn, rt[64], fr[64];
        hk_linear_fwd(&Xt, &W, NULL, &Y, NULL);
        for (int k = 0; k < r; k++) {
            double ts = gemm_limit(ga, gb, gc, G);
            double t0 = now();
            hk_linear_fwd(&Xt, &W, NULL, &Y, NULL);
            rt[k] = fl / (now() - t0) * 1e-9;
            fr[k] = rt[k] / (gflop / ts * 1e-9);
        }
        printf("%-22s %10.2f %12.2f %7.0f%%   (linear [%d,%d]x[%d,%d], panels on the pool)\n", "gemm (linear fwd)",
               median(rt, r), sgemm, 100 * median(fr, r), M, K, K, Nn);
        free(x), free(w), free(y);
    }
    /* attention, GPT-2 small's heads: B=1, H=12, hd=64 */
    int Ts[2] = {256, 1024};
    for (int ti = 0; ti < 2; ti++) {
        int T = Ts[ti];
        enum { H = 12, HD = 64, C = H * HD };
        int64_t d[3] = {1, T, C};
        float *q = xmalloc(sizeof(float) * T * C), *k = xmalloc(sizeof(float) * T * C), *v = xmalloc(sizeof(float) * T * C);
        float *o = xmalloc(sizeof(float) * T * C), *g = calloc(3 * (size_t)T * C, sizeof(float));
        if (!g) exit(1);
        fill(q, (int64_t)T * C, 10), fill(k, (int64_t)T * C, 11), fill(v, (int64_t)T * C, 12);
        HkTensor Q = hk_tensor(q, DT_F32, 3, d), Kt = hk_tensor(k, DT_F32, 3, d), V = hk_tensor(v, DT_F32, 3, d),
                 O = hk_tensor(o, DT_F32, 3, d), dQ = hk_tensor(g, DT_F32, 3, d), dK = hk_tensor(g + T * C, DT_F32, 3, d),
                 dV = hk_tensor(g + 2 * T * C, DT_F32, 3, d);
        void *aws = xmalloc(hk_attention_workspace_bytes(&Q, H));
        double pairs = (double)H * T * (T + 1) / 2, ff = 2 * 2.0 * HD * pairs, fb = 2 * ff;
        double rf[64], rb[64], qf[64], qb[64];
        hk_attention_fwd(&Q, &Kt, &V, &O, H, H, aws);
        for (int kk = 0; kk < r; kk++) {
            double s = gflop / gemm_limit(ga, gb, gc, G) * 1e-9;
            double t0 = now();
            hk_attention_fwd(&Q, &Kt, &V, &O, H, H, aws);
            double t1 = now();
            hk_attention_bwd(&Q, &Kt, &V, &O, &dQ, &dK, &dV, H, H, aws);
            double t2 = now();
            rf[kk] = ff / (t1 - t0) * 1e-9, rb[kk] = fb / (t2 - t1) * 1e-9;
            qf[kk] = rf[kk] / s, qb[kk] = rb[kk] / s;
        }
        double mf = median(qf, r), mb = median(qb, r);
        char name[64];
        snprintf(name, sizeof name, "attention fwd T=%d", T);
        printf("%-22s %10.2f %12.2f %7.0f%%   %s\n", name, median(rf, r), sgemm, 100 * mf, mf >= 0.4 ? ">= 40%: met" : ">= 40%: below");
        snprintf(name, sizeof name, "attention bwd T=%d", T);
        printf("%-22s %10.2f %12.2f %7.0f%%   %s\n", name, median(rb, r), sgemm, 100 * mb, mb >= 0.4 ? ">= 40%: met" : ">= 40%: below");
        free(q), free(k), free(v), free(o), free(g), free(aws);
    }
    long_attention(r < 3 ? r : 3, ga, gb, gc, G, gflop, sgemm);
    /* the plain triple loop and bf16 storage, beside the GEMM, on [512,768]x[768,768] */
    {
        enum { M = 512, K = 768, Nn = 768 };
        float *x = xmalloc(sizeof(float) * M * K), *w = xmalloc(sizeof(float) * K * Nn), *y = xmalloc(sizeof(float) * M * Nn);
        uint16_t *xb = xmalloc(2 * M * K), *wb = xmalloc(2 * K * Nn), *yb = xmalloc(2 * M * Nn);
        fill(x, (int64_t)M * K, 13), fill(w, (int64_t)K * Nn, 14);
        for (int64_t i = 0; i < (int64_t)M * K; i++) xb[i] = half_f32_to_bf16(x[i]);
        for (int64_t i = 0; i < (int64_t)K * Nn; i++) wb[i] = half_f32_to_bf16(w[i]);
        double fl = 2.0 * M * N * K / ((double)N / Nn);
        double t0 = now();
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < Nn; j++) y[(int64_t)i * Nn + j] = 0;
            for (int kk = 0; kk < K; kk++) {
                float a = x[(int64_t)i * K + kk];
                for (int j = 0; j < Nn; j++) y[(int64_t)i * Nn + j] += a * w[(int64_t)kk * Nn + j];
            }
        }
        double t_loop = now() - t0;
        int64_t dx[2] = {M, K}, dw[2] = {K, Nn}, dy[2] = {M, Nn};
        HkTensor XB = hk_tensor(xb, DT_BF16, 2, dx), WB = hk_tensor(wb, DT_BF16, 2, dw), YB = hk_tensor(yb, DT_BF16, 2, dy);
        HkTensor Xf = hk_tensor(x, DT_F32, 2, dx), Wf = hk_tensor(w, DT_F32, 2, dw), Yf = hk_tensor(y, DT_F32, 2, dy);
        void *ws = xmalloc(hk_linear_workspace_bytes(&XB, &WB, &YB));
        hk_linear_fwd(&XB, &WB, NULL, &YB, ws);
        hk_linear_fwd(&Xf, &Wf, NULL, &Yf, NULL);
        t0 = now();
        for (int i = 0; i < 5; i++) hk_linear_fwd(&Xf, &Wf, NULL, &Yf, NULL);
        double t_f32 = (now() - t0) / 5;
        t0 = now();
        for (int i = 0; i < 5; i++) hk_linear_fwd(&XB, &WB, NULL, &YB, ws);
        double t_bf16 = (now() - t0) / 5;
        fl = 2.0 * M * K * Nn;
        printf("%-22s %10.2f %12s %8s   (bf16 storage, converted to f32 in the workspace: %.2f GFLOP/s; plain triple loop %.2f)\n",
               "linear [512,768]x768", fl / t_f32 * 1e-9, "", "", fl / t_bf16 * 1e-9, fl / t_loop * 1e-9);
        free(x), free(w), free(y), free(xb), free(wb), free(yb), free(ws);
    }
    /* last: OpenBLAS with its own threads, for reference */
    gemm_blas_own_threads(ga, gb, gc, G, threads);
    for (int k = 0; k < r; k++) sg[k] = gflop / gemm_blas_own_threads(ga, gb, gc, G, threads) * 1e-9;
    printf("%-22s %10.2f %12s %8s   (OpenBLAS's own threading, %d thread%s, for reference)\n", "sgemm", median(sg, r), "", "",
           threads, threads == 1 ? "" : "s");
    free(ga), free(gb), free(gc);
}

int main(int argc, char **argv) {
    main_blas_core(argv); /* OpenBLAS on this processor's kernels (blas_core.h) */
    MainEnv env; /* the ZINF_* variables, as the programs take them (docs/environment.md) */
    char env_err[256];
    if (main_env_read(&env, env_err, sizeof env_err) || main_env_apply(&env, env_err, sizeof env_err)) {
        fprintf(stderr, "%s: %s\n", argv[0], env_err);
        return 2;
    }
    int list[8], nl = 0, reps = 5;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            for (char *s = argv[++i]; *s && nl < 8;) {
                list[nl++] = (int)strtol(s, &s, 10);
                if (*s == ',') s++;
                else if (*s) break;
            }
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else {
            fprintf(stderr, "usage: bench_hostk [--threads LIST] [--reps R] [--quick]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 64) reps = 5;
    if (!nl) {
        list[nl++] = 1;
        if (hk_threads() != 1) list[nl++] = hk_threads();
    }
    char line[256];
    hk_threads_describe(line, sizeof line);
    printf("policy: %s\n", line);
    for (int i = 0; i < nl; i++)
        if (list[i] >= 1) run_threads(list[i], reps, quick);
    return 0;
}
