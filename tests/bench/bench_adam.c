/* bench_adam: CPU AdamW parameter updates per second and bytes moved per
 * second for each ISA this processor has, beside the machine's memory
 * bandwidth measured in the same run (a STREAM triad over similar bytes) and
 * beside torch.optim.AdamW (its default implementation) on the same size
 * when python3 has torch.
 *   bench_adam [--n PARAMS] [--threads N] [--reps R]
 * Defaults: 64M parameters (bf16 gradients, bf16 parameter copy), the
 * OpenMP default thread count, best of 3 steps. Bytes moved per parameter:
 * read master, m, v (12) + gradient (2); write master, m, v (12) + copy (2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "adam.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The memory peers are compiled for AVX2 as well as the baseline ISA, so
 * that they are limited by memory, not by scalar code (the baseline x86-64
 * cannot vectorise the 16-bit packing). */
#define PEERS(SUFFIX, ATTR)                                                                          \
    /* STREAM triad a = b + s*c over n floats: 12 bytes per element. */                             \
    ATTR static double triad_gbs##SUFFIX(float *a, const float *b, const float *c, int64_t n,       \
                                         int threads, int reps) {                                   \
        (void)threads; /* used by the OpenMP pragma only */                                         \
        double best = 1e30;                                                                         \
        for (int r = 0; r < reps + 1; r++) {                                                        \
            double t0 = now();                                                                      \
            _Pragma("omp parallel for num_threads(threads) schedule(static)")                       \
            for (int64_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];                              \
            double t = now() - t0;                                                                  \
            if (r > 0 && t < best) best = t; /* the first pass is a warm-up */                      \
        }                                                                                           \
        return 12.0 * (double)n / best / 1e9;                                                       \
    }                                                                                               \
    /* Adam's access pattern with trivial arithmetic: read w, m, v and a 16-bit gradient, write     \
     * w, m, v and a 16-bit copy, in place: 28 bytes per element. */                                \
    ATTR static double stream_rmw_gbs##SUFFIX(float *w, float *m, float *v, const uint16_t *g,      \
                                              uint16_t *p, int64_t n, int threads, int reps) {      \
        (void)threads;                                                                              \
        double best = 1e30;                                                                         \
        for (int r = 0; r < reps + 1; r++) {                                                        \
            double t0 = now();                                                                      \
            _Pragma("omp parallel for num_threads(threads) schedule(static)")                       \
            for (int64_t i = 0; i < n; i++) {                                                       \
                float gi = (float)g[i] * 1e-9f;                                                     \
                float mi = m[i] * 0.5f + gi, vi = v[i] * 0.5f + gi;                                 \
                float wi = w[i] - mi - vi;                                                          \
                m[i] = mi;                                                                          \
                v[i] = vi;                                                                          \
                w[i] = wi;                                                                          \
                p[i] = (uint16_t)(int)wi;                                                           \
            }                                                                                       \
            double t = now() - t0;                                                                  \
            if (r > 0 && t < best) best = t;                                                        \
        }                                                                                           \
        return 28.0 * (double)n / best / 1e9;                                                       \
    }

PEERS(_base, )
PEERS(_avx2, __attribute__((target("avx2"))))

static double triad_gbs(float *a, const float *b, const float *c, int64_t n, int threads, int reps) {
    return __builtin_cpu_supports("avx2") ? triad_gbs_avx2(a, b, c, n, threads, reps)
                                          : triad_gbs_base(a, b, c, n, threads, reps);
}

static double stream_rmw_gbs(float *w, float *m, float *v, const uint16_t *g, uint16_t *p, int64_t n,
                             int threads, int reps) {
    return __builtin_cpu_supports("avx2") ? stream_rmw_gbs_avx2(w, m, v, g, p, n, threads, reps)
                                          : stream_rmw_gbs_base(w, m, v, g, p, n, threads, reps);
}

int main(int argc, char **argv) {
    int64_t n = 64ll << 20;
    int threads = 0, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_adam [--n PARAMS] [--threads N] [--reps R]\n");
            return 2;
        }
    }
    if (n < 1 || reps < 1) {
        fprintf(stderr, "bench_adam: --n and --reps must be positive\n");
        return 2;
    }
#ifdef _OPENMP
    if (threads <= 0) threads = omp_get_max_threads();
#else
    threads = 1;
#endif
    float *w = malloc(sizeof(float) * (size_t)n), *m = malloc(sizeof(float) * (size_t)n);
    float *v = malloc(sizeof(float) * (size_t)n);
    uint16_t *g = malloc(sizeof(uint16_t) * (size_t)n), *p = malloc(sizeof(uint16_t) * (size_t)n);
    if (!w || !m || !v || !g || !p) {
        fprintf(stderr, "bench_adam: out of memory for %lld parameters\n", (long long)n);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) {
        w[i] = (float)(i % 1000) * 1e-3f;
        m[i] = 0;
        v[i] = 0;
        g[i] = (uint16_t)(0x3c00 + (i % 256)); /* bf16 values near 2^-7 */
    }
    /* Memory bandwidth over about the same footprint (w, m, v as the three arrays). */
    double triad = triad_gbs(w, m, v, n, threads, reps);
    for (int64_t i = 0; i < n; i++) m[i] = v[i] = 0;
    double bw = stream_rmw_gbs(w, m, v, g, p, n, threads, reps);
    for (int64_t i = 0; i < n; i++) {
        w[i] = (float)(i % 1000) * 1e-3f;
        m[i] = v[i] = 0;
    }

    printf("bench_adam: %lld parameters (bf16 grad, bf16 copy), %d threads, best of %d steps\n", (long long)n,
           threads, reps);
    printf("  memory bandwidth, same run: STREAM triad %.2f GB/s; in-place stream with Adam's access pattern %.2f GB/s\n",
           triad, bw);
    printf("  %-8s %14s %10s %14s %10s\n", "isa", "Mparams/s", "GB/s", "of in-place", "of triad");
    const AdamIsa isas[] = {ADAM_ISA_SCALAR, ADAM_ISA_AVX2, ADAM_ISA_AVX512};
    for (int k = 0; k < 3; k++) {
        if (!adam_isa_supported(isas[k])) {
            printf("  %-8s %14s\n", adam_isa_name(isas[k]), "not available on this processor");
            continue;
        }
        AdamParams ap = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .isa = isas[k], .threads = threads};
        double best = 1e30;
        for (int r = 0; r < reps + 1; r++) {
            double t0 = now();
            AdamStatus st = adam_step(&ap, r + 1, w, m, v, g, DT_BF16, p, DT_BF16, n, 1.0f);
            double t = now() - t0;
            if (st != ADAM_OK) {
                fprintf(stderr, "bench_adam: %s\n", adam_status_str(st));
                return 1;
            }
            if (r > 0 && t < best) best = t;
        }
        double ups = (double)n / best, gbs = 28.0 * (double)n / best / 1e9;
        printf("  %-8s %14.1f %10.2f %13.0f%% %9.0f%%\n", adam_isa_name(isas[k]), ups / 1e6, gbs, 100.0 * gbs / bw,
               100.0 * gbs / triad);
    }
    printf("  target: best ISA >= 80%% of the in-place stream bandwidth\n");

    if (system("python3 -c 'import torch' >/dev/null 2>&1") == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "python3 -c \"import torch,time; torch.set_num_threads(%d); n=%lld; "
                 "w=torch.zeros(n,requires_grad=True); w.grad=torch.full((n,),0.01); "
                 "o=torch.optim.AdamW([w],lr=1e-4,betas=(0.9,0.95),eps=1e-8,weight_decay=0.1); o.step(); "
                 "b=min((lambda t0:(o.step(),time.perf_counter()-t0)[1])(time.perf_counter()) for _ in range(%d)); "
                 "print('  torch.optim.AdamW (fp32 grad, no copy): %%.1f Mparams/s' %% (n/b/1e6))\"",
                 threads, (long long)n, reps);
        if (system(cmd) != 0) printf("  torch.optim.AdamW: run failed\n");
    } else {
        printf("  torch.optim.AdamW: skipped (python3 -c 'import torch' fails: torch not installed)\n");
    }
    free(w);
    free(m);
    free(v);
    free(g);
    free(p);
    return 0;
}
