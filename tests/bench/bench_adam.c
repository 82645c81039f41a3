/* bench_adam: the CPU AdamW step (runtime/adam) beside two peers measured
 * in the same run, on the same number of elements and threads:
 *   - the memory: a STREAM triad a[i] = b[i] + s*c[i] over three arrays of
 *     n floats (far larger than the caches), written with the same
 *     intrinsics and target attributes as Adam's kernels (so it runs ymm /
 *     zmm instructions, not scalar code) and run on the same thread pool
 *     (hk_parallel, 64K-element units, the same team). Each Adam row has
 *     its own triad, of the same ISA, measured interleaved with its steps
 *     (triad pass, Adam step, best of each), so that the noise of shared
 *     cores falls on both. Bytes are those that cross the memory bus, for
 *     both: the triad 16 per element (read b, c; a's write-allocate read;
 *     write a: STREAM itself counts 12, printed too);
 *   - torch.optim.AdamW with fused=True and with foreach=True, on one f32
 *     parameter with an f32 gradient (tests/bench/torch_adam.py), with
 *     torch.set_num_threads(threads); skipped with a message when the
 *     Python of tests/pyenv.sh ($ZINF_PY, else python3) has no torch.
 * Adam's bytes per element are the bytes it really moves:
 *   bf16 grad + bf16 copy (the plans' layout): read master, m, v (12) and
 *     the gradient (2), write master, m, v (12) and the copy (2), and the
 *     copy's write-allocate read (2): 30 (in place, master, m and v need
 *     none);
 *   f32 grad, no copy (torch's layout): read 12 + 4, write 12: 28.
 *   bench_adam [--n ELEMENTS] [--threads N] [--reps R]
 * Defaults: 64M elements, hk_threads(), best of 3 steps after a warm-up. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "adam.h"
#include "hostk_threads.h"
#include "main_env.h"

enum { UNIT = 65536 }; /* elements per hk_parallel unit, as adam.c's ADAM_BLOCK */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct Triad {
    float *a;
    const float *b, *c;
    int64_t n;
    float s;
} Triad;

static void unit_range(const Triad *t, int64_t u, int64_t *lo, int64_t *len) {
    *lo = u * UNIT;
    *len = t->n - *lo < UNIT ? t->n - *lo : UNIT;
}

static void triad_scalar(void *ctx, int64_t u) {
    const Triad *t = ctx;
    int64_t lo, len;
    unit_range(t, u, &lo, &len);
    float *a = t->a + lo;
    const float *b = t->b + lo, *c = t->c + lo;
    for (int64_t i = 0; i < len; i++) a[i] = b[i] + t->s * c[i];
}

/* The same target strings as runtime/hostk/adam.c's AVX2 and AVX-512 kernels. */
__attribute__((target("avx2,fma,f16c"))) static void triad_avx2(void *ctx, int64_t u) {
    const Triad *t = ctx;
    int64_t lo, len, i = 0;
    unit_range(t, u, &lo, &len);
    float *a = t->a + lo;
    const float *b = t->b + lo, *c = t->c + lo;
    const __m256 s = _mm256_set1_ps(t->s);
    for (; i + 8 <= len; i += 8)
        _mm256_storeu_ps(a + i, _mm256_fmadd_ps(s, _mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i)));
    for (; i < len; i++) a[i] = b[i] + t->s * c[i];
}

__attribute__((target("avx512f"))) static void triad_avx512(void *ctx, int64_t u) {
    const Triad *t = ctx;
    int64_t lo, len, i = 0;
    unit_range(t, u, &lo, &len);
    float *a = t->a + lo;
    const float *b = t->b + lo, *c = t->c + lo;
    const __m512 s = _mm512_set1_ps(t->s);
    for (; i + 16 <= len; i += 16)
        _mm512_storeu_ps(a + i, _mm512_fmadd_ps(s, _mm512_loadu_ps(c + i), _mm512_loadu_ps(b + i)));
    for (; i < len; i++) a[i] = b[i] + t->s * c[i];
}

static HkUnitFn triad_fn(AdamIsa isa) {
    return isa == ADAM_ISA_AVX512 ? triad_avx512 : isa == ADAM_ISA_AVX2 ? triad_avx2 : triad_scalar;
}

/* Interleaved: a triad pass, then an Adam step, reps + 1 times (the first
 * of each a warm-up); the best seconds of each into *triad and *adam.
 * Returns 0, or -1 when adam_step fails. */
static int measure(AdamIsa isa, int threads, int reps, Triad *t, double *triad, double *adam, float *w, float *m,
                   float *v, const void *g, DType gdt, void *p, DType pdt, int64_t n) {
    AdamParams ap = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                     .isa = isa, .threads = threads};
    *triad = *adam = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        hk_parallel(threads, (t->n + UNIT - 1) / UNIT, triad_fn(isa), t);
        double t1 = now();
        AdamStatus st = adam_step(&ap, r + 1, w, m, v, g, gdt, p, pdt, n, 1.0f);
        double t2 = now();
        if (st != ADAM_OK) {
            fprintf(stderr, "bench_adam: %s\n", adam_status_str(st));
            return -1;
        }
        if (r > 0 && t1 - t0 < *triad) *triad = t1 - t0;
        if (r > 0 && t2 - t1 < *adam) *adam = t2 - t1;
    }
    return 0;
}

/* torch.optim.AdamW's best step time per implementation (fused, foreach):
 * secs[k] > 0, or 0 with why[k] saying why not. Returns 0 when torch ran. */
static int torch_secs(int64_t n, int threads, int reps, double secs[2], char why[2][160], char *ver, size_t nver) {
    const char *py = getenv("ZINF_PY");
    if (!py || !*py) py = "python3";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch; print(torch.__version__)' 2>/dev/null", py);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    ver[0] = 0;
    if (!fgets(ver, (int)nver, f)) ver[0] = 0;
    if (pclose(f) != 0 || !ver[0]) return -1;
    ver[strcspn(ver, "\n")] = 0;
    snprintf(cmd, sizeof cmd, "'%s' '%s/../tests/bench/torch_adam.py' --n %lld --threads %d --reps %d 2>&1", py,
             ZINF_STDLIB_DIR, (long long)n, threads, reps);
    f = popen(cmd, "r");
    if (!f) return -1;
    const char *impls[2] = {"fused", "foreach"};
    for (int k = 0; k < 2; k++) {
        secs[k] = 0;
        snprintf(why[k], 160, "no output from torch_adam.py");
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        for (int k = 0; k < 2; k++) {
            size_t l = strlen(impls[k]);
            if (strncmp(line, impls[k], l) || line[l] != ' ') continue;
            if (!strncmp(line + l + 1, "skipped: ", 9)) snprintf(why[k], 160, "%s", line + l + 10);
            else secs[k] = strtod(line + l + 1, NULL);
        }
    }
    return pclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    MainEnv env; /* the ZINF_* variables, as the programs take them (docs/environment.md) */
    char env_err[256];
    if (main_env_read(&env, env_err, sizeof env_err) || main_env_apply(&env, env_err, sizeof env_err)) {
        fprintf(stderr, "%s: %s\n", argv[0], env_err);
        return 2;
    }
    int64_t n = 64ll << 20;
    int threads = 0, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_adam [--n ELEMENTS] [--threads N] [--reps R]\n");
            return 2;
        }
    }
    if (n < 1 || reps < 1) {
        fprintf(stderr, "bench_adam: --n and --reps must be positive\n");
        return 2;
    }
    if (threads > 0) hk_threads_set(threads);
    threads = hk_threads();
    size_t fb = sizeof(float) * (size_t)n, hb = sizeof(uint16_t) * (size_t)n;
    float *w = malloc(fb), *m = malloc(fb), *v = malloc(fb), *g32 = malloc(fb);
    uint16_t *g = malloc(hb), *p = malloc(hb);
    if (!w || !m || !v || !g32 || !g || !p) {
        fprintf(stderr, "bench_adam: out of memory for %lld elements\n", (long long)n);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) {
        w[i] = (float)(i % 1000) * 1e-3f;
        m[i] = v[i] = 0;
        g[i] = (uint16_t)(0x3c00 + (i % 256)); /* bf16 values near 2^-7 */
        g32[i] = 0.01f;
        p[i] = 0;
    }
    const AdamIsa isas[] = {ADAM_ISA_SCALAR, ADAM_ISA_AVX2, ADAM_ISA_AVX512};
    /* The triad's arrays: three more of n floats, apart from Adam's. */
    float *ta = malloc(fb), *tb = malloc(fb), *tc = malloc(fb);
    if (!ta || !tb || !tc) {
        fprintf(stderr, "bench_adam: out of memory for the triad's arrays\n");
        return 1;
    }
    for (int64_t i = 0; i < n; i++) ta[i] = tb[i] = tc[i] = (float)(i % 7);
    Triad t = {.a = ta, .b = tb, .c = tc, .n = n, .s = 0.5f};

    printf("bench_adam: %lld elements, %d threads (one hk_parallel team for triad, Adam and torch), "
           "best of %d after a warm-up\n",
           (long long)n, threads, reps);
    printf("  peer: STREAM triad a[i] = b[i] + s*c[i], 3 arrays x %lld MiB, same ISA and team, interleaved with "
           "each row's Adam steps\n",
           (long long)(fb >> 20));
    printf("  GB/s count bytes over the memory bus: triad 16 B/element (STREAM's own count, 12 B, in brackets),\n"
           "  Adam 30 (bf16 grad + bf16 copy, with the copy's write-allocate) or 28 (f32 grad, no copy)\n");
    printf("  %-22s %-7s %8s %9s %6s %8s %16s %9s\n", "zinf adam_step layout", "isa", "ms/step", "Melem/s", "B/el",
           "GB/s", "triad GB/s", "of triad");
    double best_f32 = 0, tri_f32 = 0; /* zinf's best time on torch's layout, and its row's triad GB/s */
    for (int lay = 0; lay < 2; lay++) {
        for (int k = 0; k < 3; k++) {
            const char *name = lay ? "f32 grad, no copy" : "bf16 grad + bf16 copy";
            double bytes = lay ? 28.0 : 30.0;
            if (!adam_isa_supported(isas[k])) {
                printf("  %-22s %-7s %s\n", name, adam_isa_name(isas[k]), "not available on this processor");
                continue;
            }
            for (int64_t i = 0; i < n; i++) {
                w[i] = (float)(i % 1000) * 1e-3f;
                m[i] = v[i] = 0;
            }
            double ts, as;
            int rc = lay ? measure(isas[k], threads, reps, &t, &ts, &as, w, m, v, g32, DT_F32, NULL, DT_NONE, n)
                         : measure(isas[k], threads, reps, &t, &ts, &as, w, m, v, g, DT_BF16, p, DT_BF16, n);
            if (rc) return 1;
            double gbs = bytes * (double)n / as / 1e9, tgbs = 16.0 * (double)n / ts / 1e9;
            printf("  %-22s %-7s %8.2f %9.1f %6.0f %8.2f %7.2f (%6.2f) %8.0f%%\n", name, adam_isa_name(isas[k]),
                   as * 1e3, (double)n / as / 1e6, bytes, gbs, tgbs, 12.0 * (double)n / ts / 1e9, 100.0 * gbs / tgbs);
            if (lay && (best_f32 == 0 || as < best_f32)) {
                best_f32 = as;
                tri_f32 = tgbs;
            }
        }
    }
    free(ta);
    free(tb);
    free(tc);

    double ts[2];
    char why[2][160], ver[64];
    free(g);
    free(p);
    free(w);
    free(m);
    free(v);
    free(g32); /* torch allocates its own 4 arrays of n floats */
    if (torch_secs(n, threads, reps, ts, why, ver, sizeof ver) != 0) {
        printf("  torch.optim.AdamW: skipped ($ZINF_PY or python3 has no torch, or torch_adam.py failed)\n");
        return 0;
    }
    const double bytes = 28.0;
    printf("  torch %s torch.optim.AdamW, f32 grad, no copy (28 B/element), torch.set_num_threads(%d), "
           "beside zinf's best ISA on the same layout\n  (of triad: against that zinf row's triad)\n",
           ver, threads);
    printf("  %-22s %8s %9s %8s %9s %14s\n", "implementation", "ms/step", "Melem/s", "GB/s", "of triad",
           "zinf is faster");
    printf("  %-22s %8.2f %9.1f %8.2f %8.0f%% %14s\n", "zinf adam_step", best_f32 * 1e3, (double)n / best_f32 / 1e6,
           bytes * (double)n / best_f32 / 1e9, 100.0 * bytes * (double)n / best_f32 / 1e9 / tri_f32, "-");
    const char *impls[2] = {"AdamW(fused=True)", "AdamW(foreach=True)"};
    for (int k = 0; k < 2; k++) {
        if (ts[k] <= 0) {
            printf("  %-22s skipped: %s\n", impls[k], why[k]);
            continue;
        }
        double gbs = bytes * (double)n / ts[k] / 1e9;
        printf("  %-22s %8.2f %9.1f %8.2f %8.0f%% %13.2fx\n", impls[k], ts[k] * 1e3, (double)n / ts[k] / 1e6, gbs,
               100.0 * gbs / tri_f32, ts[k] / best_f32);
    }
    return 0;
}
