/* bench_nvrtc: cold NVRTC compile time of the kernels the example models
 * need, per family, for sm_80 and sm_90, as zinfc compiles them: one
 * nvrtc_compile_many batch on every CPU into a fresh cache; then the warm
 * (cache hit) time of the same batch.
 *
 * What is compiled: the distinct units (by source hash) of every example
 * model, each once: the models share most of them (24 units for the six
 * examples, against 64 when each model is compiled on its own). The old
 * form of this benchmark compiled each model's units from a cold cache of
 * its own, one at a time and then again as a batch: 636 s on 2 cores, the
 * same GEMM and attention sources many times over.
 *
 * Budget: this whole benchmark in 90 s on 2 cores (test_nvrtc's cold
 * compile takes 60-90 s); its wall time is printed against it. It is a
 * figure, not a failure: the benchmark fails only when a compile does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../unit/cuda_models.h"
#include "cuda_gen.h"
#include "nvrtc.h"

enum { MAX_UNITS = 256, MAX_FAMS = 32 };
#define BUDGET_S 90.0

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The distinct units to compile: sources live in the arena `a`. */
typedef struct Set {
    const char *src[MAX_UNITS], *family[MAX_UNITS];
    char hash[MAX_UNITS][65];
    int n;
} Set;

static int set_has(const Set *s, const char *hash) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->hash[i], hash)) return 1;
    return 0;
}

/* Generates the units of examples/NAME.zl and adds those `set` lacks.
 * Prints one line. Returns 0 or 1. */
static int model_units(const char *example, Arena *a, Set *set) {
    DiagSink d;
    diag_init(&d);
    SourceSet src;
    source_set_init(&src);
    char path[512];
    snprintf(path, sizeof path, "%s/../examples/%s.zl", ZINF_STDLIB_DIR, example);
    Graph g;
    int rc = 1;
    if (!cm_load_zl(&g, a, &src, path, &d)) {
        diag_render(&d, &src, stderr, false);
        fprintf(stderr, "bench_nvrtc: %s does not check\n", path);
        goto done;
    }
    CudaGen cg;
    CudaGenOptions o = {.kernel_dir = ZINF_STDLIB_DIR "/kernels"};
    cuda_gen_init(&cg, a, &o);
    CudaModule m;
    if (cuda_gen_graph(&cg, &g, &m, &d) != 0) {
        diag_render(&d, NULL, stderr, false);
        goto done;
    }
    int fresh = 0;
    for (int u = 0; u < m.nunits; u++) {
        if (set_has(set, m.units[u].hash)) continue;
        fresh++;
        if (set->n == MAX_UNITS) {
            fprintf(stderr, "bench_nvrtc: more than %d units\n", MAX_UNITS);
            goto done;
        }
        set->src[set->n] = m.units[u].source;
        set->family[set->n] = m.units[u].family;
        snprintf(set->hash[set->n], 65, "%s", m.units[u].hash);
        set->n++;
    }
    printf("  %-11s %-5s %6d launches %3d units, %3d %s\n", example, cuda_dtype_name(g.train.dtype), m.nkernels,
           m.nunits, fresh, "new to the set");
    rc = 0;
done:
    source_set_free(&src);
    diag_free(&d);
    return rc;
}

/* One batch of every (unit, arch); wall seconds into *wall, or -1. */
static int batch(const Set *s, const char *cache, int cold, double famt[MAX_FAMS], int famn[MAX_FAMS],
                 const char *fams[MAX_FAMS], int *nf, double *wall, double *cpu) {
    const char *archs[2] = {"sm_80", "sm_90"};
    NvrtcJob *jobs = calloc((size_t)(2 * s->n), sizeof *jobs);
    if (!jobs) return -1;
    for (int u = 0; u < s->n; u++)
        for (int ai = 0; ai < 2; ai++) {
            jobs[2 * u + ai].source = s->src[u];
            jobs[2 * u + ai].name = s->family[u];
            jobs[2 * u + ai].arch = archs[ai];
        }
    NvrtcOptions po = {.cache_dir = cache};
    double t0 = now();
    int bad = nvrtc_compile_many(jobs, 2 * s->n, &po, 0);
    *wall = now() - t0;
    *cpu = 0;
    for (int i = 0; i < 2 * s->n; i++) {
        NvrtcResult *r = &jobs[i].result;
        if (jobs[i].rc != 0) fprintf(stderr, "bench_nvrtc: %s %s: %s\n", jobs[i].name, jobs[i].arch, r->error);
        else if (cold && r->cached) {
            fprintf(stderr, "bench_nvrtc: %s %s was a cache hit in a fresh cache\n", jobs[i].name, jobs[i].arch);
            bad++;
        }
        *cpu += r->seconds;
        if (cold) {
            int f = 0;
            while (f < *nf && strcmp(fams[f], jobs[i].name)) f++;
            if (f == *nf && *nf < MAX_FAMS) fams[(*nf)++] = jobs[i].name;
            if (f < MAX_FAMS) {
                famt[f] += r->seconds;
                famn[f]++;
            }
        }
        nvrtc_result_free(r);
    }
    free(jobs);
    return bad ? -1 : 0;
}

int main(void) {
    double t0 = now();
    char why[512];
    if (!nvrtc_available(why, sizeof why)) {
        fprintf(stderr, "bench_nvrtc: %s\n", why);
        return 1;
    }
    char dir[] = "/tmp/zinf-bench-nvrtc-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench_nvrtc: mkdtemp");
        return 1;
    }
    int maj = 0, min = 0;
    nvrtc_version(&maj, &min);
    printf("bench_nvrtc: NVRTC %d.%d, fresh cache %s, %ld CPUs; budget %.0f s for this benchmark\n", maj, min, dir,
           sysconf(_SC_NPROCESSORS_ONLN), BUDGET_S);
    Arena a;
    arena_init(&a);
    static Set set;
    const char *ex[] = {"gpt2-tiny", "gpt2-small", "gpt3-175b", "llama-tiny", "llama2-7b", "llama2-70b"};
    int rc = 0;
    for (size_t i = 0; i < sizeof ex / sizeof *ex && !rc; i++) rc = model_units(ex[i], &a, &set);
    const char *fams[MAX_FAMS];
    double famt[MAX_FAMS] = {0}, cold = 0, warm = 0, cpu = 0, wcpu = 0;
    int famn[MAX_FAMS] = {0}, nf = 0;
    if (!rc) rc = batch(&set, dir, 1, famt, famn, fams, &nf, &cold, &cpu) != 0;
    if (!rc) rc = batch(&set, dir, 0, famt, famn, fams, &nf, &warm, &wcpu) != 0;
    if (!rc) {
        printf("  %d units x sm_80, sm_90 = %d cold compilations, one nvrtc_compile_many batch on every CPU:\n", set.n,
               2 * set.n);
        printf("  %-12s %13s %12s\n", "family", "compilations", "NVRTC s");
        for (int f = 0; f < nf; f++) printf("  %-12s %13d %12.2f\n", fams[f], famn[f], famt[f]);
        printf("  %-12s %13d %12.2f   (sum of per-compilation times)\n", "total", 2 * set.n, cpu);
        printf("  cold batch %.2f s wall; warm batch (cache hits) %.3f s wall\n", cold, warm);
    }
    arena_free(&a);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) rc = 1;
    double total = now() - t0;
    printf("  budget: %.1f s wall for the whole benchmark against %.0f s: %s (printed, not a failure)\n", total,
           BUDGET_S, total <= BUDGET_S ? "within" : "OVER");
    return rc;
}
