/* bench_linxent: the loss head, fused and chunked (linear_cross_entropy,
 * runtime/hostk/hostk_linxent.c) beside the unfused pair it replaces
 * (matmul + cross_entropy, the logits [R, V] whole), forward and backward
 * of one step, measured back to back in the same run at the same thread
 * count: R = 2048 rows (T = 2048, micro-batch 1), D = 256, V = 32000, f32,
 * the weight transposed (tied embeddings), chunks of 256 and 1024 rows and
 * all of them. Median over --reps repetitions; the chunked time over the
 * whole one's is the figure (goal: at most 1.05, printed, never asserted).
 *   bench_linxent [--reps R] [--rows R] [--dim D] [--vocab V] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hostk.h"
#include "hostk_threads.h"
#include "main_env.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *xcalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_linxent: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void fill(float *p, int64_t n, uint64_t seed) {
    uint64_t s = 88172645463325252ull ^ seed;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct Head {
    int64_t R, D, V;
    HkTensor x, w, tg, lg, dlg, dx, dw, loss, dloss;
    void *wm, *wc;
} Head;

static double run_whole(Head *h) {
    double t0 = now();
    if (hk_matmul_fwd(&h->x, &h->w, &h->lg, false, true, h->wm) || hk_cross_entropy_fwd(&h->lg, &h->tg, &h->loss, h->wc))
        exit(1);
    memset(h->dlg.data, 0, sizeof(float) * (size_t)(h->R * h->V));
    if (hk_cross_entropy_bwd(&h->lg, &h->tg, &h->dloss, &h->dlg, h->wc) ||
        hk_matmul_bwd(&h->x, &h->w, &h->dlg, &h->dx, &h->dw, false, true, h->wm))
        exit(1);
    return now() - t0;
}

static double run_chunked(Head *h, int64_t chunk, void *ws) {
    double t0 = now();
    if (hk_linear_cross_entropy_fwd(&h->x, &h->w, &h->tg, &h->loss, chunk, true, ws) ||
        hk_linear_cross_entropy_bwd(&h->x, &h->w, &h->tg, &h->dloss, &h->dx, &h->dw, chunk, true, ws))
        exit(1);
    return now() - t0;
}

int main(int argc, char **argv) {
    main_blas_core(argv); /* OpenBLAS on this processor's kernels (blas_core.h) */
    MainEnv env;
    char env_err[256];
    if (main_env_read(&env, env_err, sizeof env_err) || main_env_apply(&env, env_err, sizeof env_err)) {
        fprintf(stderr, "%s: %s\n", argv[0], env_err);
        return 2;
    }
    int reps = 3;
    int64_t R = 2048, D = 256, V = 32000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows")) R = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--dim")) D = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab")) V = atoll(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_linxent [--reps R] [--rows R] [--dim D] [--vocab V]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 100 || R < 1 || D < 1 || V < 2) {
        fprintf(stderr, "bench_linxent: bad sizes\n");
        return 2;
    }
    Head h = {.R = R, .D = D, .V = V};
    int64_t dx_[2] = {R, D}, dw_[2] = {V, D}, dl_[2] = {R, V}, dt_[1] = {R};
    static float loss, one = 1.0f;
    h.x = hk_tensor(xcalloc(sizeof(float) * (size_t)(R * D)), DT_F32, 2, dx_);
    h.w = hk_tensor(xcalloc(sizeof(float) * (size_t)(V * D)), DT_F32, 2, dw_);
    h.dx = hk_tensor(xcalloc(sizeof(float) * (size_t)(R * D)), DT_F32, 2, dx_);
    h.dw = hk_tensor(xcalloc(sizeof(float) * (size_t)(V * D)), DT_F32, 2, dw_);
    h.lg = hk_tensor(xcalloc(sizeof(float) * (size_t)(R * V)), DT_F32, 2, dl_);
    h.dlg = hk_tensor(xcalloc(sizeof(float) * (size_t)(R * V)), DT_F32, 2, dl_);
    h.tg = hk_tensor(xcalloc(sizeof(int32_t) * (size_t)R), DT_I32, 1, dt_);
    h.loss = hk_tensor(&loss, DT_F32, 0, NULL);
    h.dloss = hk_tensor(&one, DT_F32, 0, NULL);
    fill(h.x.data, R * D, 1), fill(h.w.data, V * D, 2);
    for (int64_t i = 0; i < R; i++) ((int32_t *)h.tg.data)[i] = (int32_t)((i * 7919) % V);
    h.wm = xcalloc(hk_matmul_workspace_bytes(&h.x, &h.w, &h.lg));
    h.wc = xcalloc(hk_cross_entropy_workspace_bytes(&h.lg));
    char line[256];
    hk_threads_describe(line, sizeof line);
    printf("loss head fwd+bwd, R = %lld rows, D = %lld, V = %lld, f32, %s\n", (long long)R, (long long)D, (long long)V, line);
    const int64_t chunks[] = {256, 1024, 0};
    enum { NC = sizeof chunks / sizeof *chunks };
    void *ws[NC];
    for (int c = 0; c < NC; c++) ws[c] = xcalloc(hk_linear_cross_entropy_workspace_bytes(&h.x, &h.w, &h.tg, chunks[c], true));
    double *tw = xcalloc(sizeof(double) * (size_t)reps), *tc[NC], *fr[NC];
    for (int c = 0; c < NC; c++) tc[c] = xcalloc(sizeof(double) * (size_t)reps), fr[c] = xcalloc(sizeof(double) * (size_t)reps);
    run_whole(&h); /* warm-up: pages touched, threads started */
    for (int c = 0; c < NC; c++) run_chunked(&h, chunks[c], ws[c]);
    for (int k = 0; k < reps; k++) {
        tw[k] = run_whole(&h);
        for (int c = 0; c < NC; c++) {
            tc[c][k] = run_chunked(&h, chunks[c], ws[c]);
            fr[c][k] = tc[c][k] / tw[k];
        }
    }
    qsort(tw, (size_t)reps, sizeof *tw, cmp_d);
    printf("%-34s %10.1f ms   (logits [%lld, %lld] whole: %.0f MiB and as much for their gradient)\n",
           "matmul + cross_entropy", 1e3 * tw[reps / 2], (long long)R, (long long)V, (double)(R * V) * 4 / 1048576.0);
    for (int c = 0; c < NC; c++) {
        qsort(tc[c], (size_t)reps, sizeof *tc[c], cmp_d);
        qsort(fr[c], (size_t)reps, sizeof *fr[c], cmp_d);
        char name[64];
        snprintf(name, sizeof name, "linear_cross_entropy chunk %lld", (long long)(chunks[c] ? chunks[c] : R));
        printf("%-34s %10.1f ms   %.3f of the whole (goal <= 1.05)\n", name, 1e3 * tc[c][reps / 2], fr[c][reps / 2]);
    }
    return 0;
}
