/* bench_quant: a linear whose weight is stored quantized (NF4, int8:
 * runtime/hostk/quant.h) beside the same linear with a bf16 weight, on the
 * host kernels at the same thread count: x bf16 [M, K] times w [K, N] into
 * y bf16, the weight decoded (quantized) or converted (bf16) into the
 * workspace before the GEMM, as the training step runs them. Printed: each
 * rate in GFLOP/s (2 M K N per call), the quantized rate as a fraction of
 * bf16's (goal, printed, never asserted: >= 0.8), the decode alone in
 * GB/s of f32 written, and the bytes the weight moves per fetch against
 * bf16's (nf4 0.28). Every figure is the median over --reps repetitions of
 * the pair measured back to back.
 *   bench_quant [--threads N] [--reps R] [--quick] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "half.h"
#include "hostk.h"
#include "hostk_threads.h"
#include "quant.h"
#include "main_env.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_quant: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void fill(float *p, int64_t n, uint64_t seed) {
    uint64_t s = 88172645463325252ull ^ seed;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 0.04f;
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* seconds of `calls` linear forwards */
static double time_linear(const HkTensor *x, const HkTensor *w, HkTensor *y, void *ws, int calls) {
    double t0 = now();
    for (int i = 0; i < calls; i++)
        if (hk_linear_fwd(x, w, NULL, y, ws) != HK_OK) {
            fprintf(stderr, "bench_quant: hk_linear_fwd failed\n");
            exit(1);
        }
    return now() - t0;
}

static void one_shape(int64_t M, int64_t K, int64_t N, int reps) {
    int64_t nx = M * K, nw = K * N, ny = M * N;
    float *xf = xmalloc((size_t)nx * 4), *wf = xmalloc((size_t)nw * 4);
    fill(xf, nx, 1);
    fill(wf, nw, 2);
    uint16_t *xb = xmalloc((size_t)nx * 2), *wb = xmalloc((size_t)nw * 2), *yb = xmalloc((size_t)ny * 2);
    for (int64_t i = 0; i < nx; i++) xb[i] = half_f32_to_bf16(xf[i]);
    for (int64_t i = 0; i < nw; i++) wb[i] = half_f32_to_bf16(wf[i]);
    int64_t dx[2] = {M, K}, dw[2] = {K, N}, dy[2] = {M, N};
    HkTensor X = hk_tensor(xb, DT_BF16, 2, dx), Y = hk_tensor(yb, DT_BF16, 2, dy);
    HkTensor WB = hk_tensor(wb, DT_BF16, 2, dw);
    size_t wsb = hk_linear_workspace_bytes(&X, &WB, &Y);
    void *ws = xmalloc(wsb);
    double fl = 2.0 * (double)M * (double)K * (double)N;
    int calls = fl > 4e9 ? 1 : 3;
    for (int k = QUANT_NF4; k <= QUANT_INT8; k++) {
        uint8_t *wq = xmalloc(quant_bytes((QuantKind)k, nw));
        quant_encode((QuantKind)k, wf, nw, wq);
        HkTensor WQ = hk_tensor(wq, k == QUANT_NF4 ? DT_NF4 : DT_INT8, 2, dw);
        if (hk_linear_workspace_bytes(&X, &WQ, &Y) > wsb) {
            fprintf(stderr, "bench_quant: the quantized linear wants more workspace than bf16's\n");
            exit(1);
        }
        double *rb = xmalloc((size_t)reps * sizeof(double)), *rq = xmalloc((size_t)reps * sizeof(double)),
               *fr = xmalloc((size_t)reps * sizeof(double)), *dq = xmalloc((size_t)reps * sizeof(double));
        time_linear(&X, &WB, &Y, ws, 1); /* warm up both */
        time_linear(&X, &WQ, &Y, ws, 1);
        for (int r = 0; r < reps; r++) {
            double tb = time_linear(&X, &WB, &Y, ws, calls), tq = time_linear(&X, &WQ, &Y, ws, calls);
            rb[r] = fl * calls / tb * 1e-9;
            rq[r] = fl * calls / tq * 1e-9;
            fr[r] = tb / tq;
            double t0 = now();
            for (int i = 0; i < calls; i++) quant_decode((QuantKind)k, wq, nw, (float *)ws);
            dq[r] = (double)nw * 4.0 * calls / (now() - t0) * 1e-9;
        }
        double bytes_ratio = (double)quant_bytes((QuantKind)k, nw) / (double)(nw * 2);
        printf("linear [%lld,%lld]x[%lld,%lld]  bf16 %8.2f GFLOP/s  %-4s %8.2f GFLOP/s  %5.0f%% of bf16 (goal 80%%)  "
               "decode alone %6.2f GB/s  weight bytes %.4f of bf16\n",
               (long long)M, (long long)K, (long long)K, (long long)N, median(rb, reps), quant_name((QuantKind)k), median(rq, reps),
               100.0 * median(fr, reps), median(dq, reps), bytes_ratio);
        free(rb);
        free(rq);
        free(fr);
        free(dq);
        free(wq);
    }
    free(ws);
    free(xf);
    free(wf);
    free(xb);
    free(wb);
    free(yb);
}

int main(int argc, char **argv) {
    main_blas_core(argv); /* OpenBLAS on this processor's kernels (blas_core.h) */
    int reps = 5, threads = 0;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else {
            fprintf(stderr, "usage: bench_quant [--threads N] [--reps R] [--quick]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (threads > 0) hk_threads_set(threads);
    printf("threads %d, median of %d repetitions (the bf16 and quantized calls back to back)\n", hk_threads(), reps);
    one_shape(512, 1024, 1024, reps);
    if (!quick) {
        one_shape(512, 4096, 4096, reps);   /* a LLaMA-7B attention projection, 512 tokens */
        one_shape(512, 4096, 11008, reps);  /* its MLP's up projection */
    }
    return 0;
}
