/* bench_hostk: host kernel throughput. The GEMM path (hk_linear_fwd through
 * OpenBLAS) is printed beside a plain triple loop on the same shape, its
 * peer; bf16 storage beside f32 (the conversion cost); attention and
 * layernorm beside the memory-bound figure they would reach at the bytes
 * they move. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "half.h"
#include "hostk.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fill(float *p, int64_t n) {
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
}

int main(void) {
    enum { M = 512, K = 768, N = 768 };
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * K * N), *y = malloc(sizeof(float) * M * N);
    uint16_t *xb = malloc(2 * M * K), *wb = malloc(2 * K * N), *yb = malloc(2 * M * N);
    if (!x || !w || !y || !xb || !wb || !yb) return 1;
    fill(x, (int64_t)M * K);
    fill(w, (int64_t)K * N);
    for (int64_t i = 0; i < (int64_t)M * K; i++) xb[i] = half_f32_to_bf16(x[i]);
    for (int64_t i = 0; i < (int64_t)K * N; i++) wb[i] = half_f32_to_bf16(w[i]);
    double flop = 2.0 * M * N * K;

    /* the plain triple loop (i, k, j order: unit stride inner) */
    double t0 = now();
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) y[(int64_t)i * N + j] = 0;
        for (int k = 0; k < K; k++) {
            float a = x[(int64_t)i * K + k];
            for (int j = 0; j < N; j++) y[(int64_t)i * N + j] += a * w[(int64_t)k * N + j];
        }
    }
    double t_loop = now() - t0;

    int64_t dx[2] = {M, K}, dw[2] = {K, N}, dy[2] = {M, N};
    HkTensor X = hk_tensor(x, DT_F32, 2, dx), W = hk_tensor(w, DT_F32, 2, dw), Y = hk_tensor(y, DT_F32, 2, dy);
    int reps = 10;
    hk_linear_fwd(&X, &W, NULL, &Y, NULL);
    t0 = now();
    for (int r = 0; r < reps; r++) hk_linear_fwd(&X, &W, NULL, &Y, NULL);
    double t_f32 = (now() - t0) / reps;

    HkTensor XB = hk_tensor(xb, DT_BF16, 2, dx), WB = hk_tensor(wb, DT_BF16, 2, dw), YB = hk_tensor(yb, DT_BF16, 2, dy);
    size_t wsb = hk_linear_workspace_bytes(&XB, &WB, &YB);
    void *ws = malloc(wsb);
    hk_linear_fwd(&XB, &WB, NULL, &YB, ws);
    t0 = now();
    for (int r = 0; r < reps; r++) hk_linear_fwd(&XB, &WB, NULL, &YB, ws);
    double t_bf16 = (now() - t0) / reps;
    free(ws);
    printf("gemm %dx%dx%d  f32 via OpenBLAS %7.2f GFLOP/s   plain triple loop %7.2f GFLOP/s  (x%.1f)\n", M, K, N,
           flop / t_f32 * 1e-9, flop / t_loop * 1e-9, t_loop / t_f32);
    printf("gemm %dx%dx%d  bf16 storage     %7.2f GFLOP/s   f32 storage       %7.2f GFLOP/s\n", M, K, N,
           flop / t_bf16 * 1e-9, flop / t_f32 * 1e-9);

    /* attention forward + backward, B=1, T=256, H=8, KV=8, hd=64 */
    {
        enum { T = 256, H = 8, HD = 64, C = H * HD };
        int64_t d[3] = {1, T, C};
        float *q = malloc(sizeof(float) * T * C), *k = malloc(sizeof(float) * T * C), *v = malloc(sizeof(float) * T * C);
        float *o = malloc(sizeof(float) * T * C), *g = calloc(3 * T * C, sizeof(float));
        if (!q || !k || !v || !o || !g) return 1;
        fill(q, T * C);
        fill(k, T * C);
        fill(v, T * C);
        HkTensor Q = hk_tensor(q, DT_F32, 3, d), Kt = hk_tensor(k, DT_F32, 3, d), V = hk_tensor(v, DT_F32, 3, d),
                 O = hk_tensor(o, DT_F32, 3, d), dQ = hk_tensor(g, DT_F32, 3, d), dK = hk_tensor(g + T * C, DT_F32, 3, d),
                 dV = hk_tensor(g + 2 * T * C, DT_F32, 3, d);
        void *aws = malloc(hk_attention_workspace_bytes(&Q, H));
        t0 = now();
        hk_attention_fwd(&Q, &Kt, &V, &O, H, H, aws);
        double tf = now() - t0;
        t0 = now();
        hk_attention_bwd(&Q, &Kt, &V, &O, &dQ, &dK, &dV, H, H, aws);
        double tb = now() - t0;
        double fl = 4.0 * T * T * HD * H; /* forward: QK^T and PV, full (unmasked) products */
        printf("attention T=%d H=%d hd=%d  forward %7.2f GFLOP/s  backward %7.2f GFLOP/s  (gemm f32 above: %.2f)\n", T, H,
               HD, fl / tf * 1e-9, 2 * fl / tb * 1e-9, flop / t_f32 * 1e-9);
        free(q), free(k), free(v), free(o), free(g), free(aws);
    }

    /* layernorm over [4096, 768]: bytes moved (read x, write y) per second */
    {
        enum { R = 4096, D = 768 };
        float *a = malloc(sizeof(float) * R * D), *b = malloc(sizeof(float) * R * D);
        if (!a || !b) return 1;
        fill(a, R * D);
        int64_t d[2] = {R, D};
        HkTensor A = hk_tensor(a, DT_F32, 2, d), B = hk_tensor(b, DT_F32, 2, d);
        void *lws = malloc(hk_layernorm_workspace_bytes(&A));
        hk_layernorm_fwd(&A, NULL, NULL, &B, 1e-5, lws);
        t0 = now();
        for (int r = 0; r < 5; r++) hk_layernorm_fwd(&A, NULL, NULL, &B, 1e-5, lws);
        double t = (now() - t0) / 5;
        /* memcpy of the same bytes is the memory-bound peer */
        t0 = now();
        for (int r = 0; r < 5; r++) memcpy(b, a, sizeof(float) * R * D);
        double tc = (now() - t0) / 5;
        printf("layernorm [%d, %d] f32  %6.2f GB/s   memcpy of the same bytes %6.2f GB/s\n", R, D,
               2.0 * R * D * 4 / t * 1e-9, 2.0 * R * D * 4 / tc * 1e-9);
        free(a), free(b), free(lws);
    }
    free(x), free(w), free(y), free(xb), free(wb), free(yb);
    return 0;
}
