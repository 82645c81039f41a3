/* bench_nvrtc: cold NVRTC compile time of the kernels each example model
 * (examples/NAME.zl through the front end) needs, per family and in total, for sm_80 and sm_90 (a fresh cache), then
 * the warm (cache hit) time of the same set. Printed beside the budget the
 * test suite holds it to (the cold compile of test_nvrtc: 60-90 s on 2 cores). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../unit/cuda_models.h"
#include "cuda_gen.h"
#include "nvrtc.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int bench_model(const char *example, const char *root) {
    char cdir[512];
    snprintf(cdir, sizeof cdir, "%s/%s", root, example);
    setenv("ZINF_CACHE_DIR", cdir, 1); /* a cold cache per model */
    Arena a;
    arena_init(&a);
    DiagSink d;
    diag_init(&d);
    SourceSet src;
    source_set_init(&src);
    char path[512];
    snprintf(path, sizeof path, "%s/../examples/%s.zl", ZINF_STDLIB_DIR, example);
    Graph g;
    if (!cm_load_zl(&g, &a, &src, path, &d)) {
        diag_render(&d, &src, stderr, false);
        fprintf(stderr, "bench_nvrtc: %s does not check\n", path);
        return 1;
    }
    CudaGen cg;
    CudaGenOptions o = {.kernel_dir = ZINF_STDLIB_DIR "/kernels"};
    cuda_gen_init(&cg, &a, &o);
    CudaModule m;
    if (cuda_gen_graph(&cg, &g, &m, &d) != 0) {
        diag_render(&d, NULL, stderr, false);
        return 1;
    }
    const char *archs[2] = {"sm_80", "sm_90"};
    const char *fams[16];
    double famt[16] = {0};
    int famn[16] = {0}, nf = 0;
    double total = 0, warm = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int u = 0; u < m.nunits; u++)
            for (int ai = 0; ai < 2; ai++) {
                NvrtcResult r;
                double t0 = now();
                if (nvrtc_compile(m.units[u].source, m.units[u].family, archs[ai], NULL, &r) != 0) {
                    fprintf(stderr, "bench_nvrtc: %s\n", r.error);
                    nvrtc_result_free(&r);
                    return 1;
                }
                double dt = now() - t0;
                nvrtc_result_free(&r);
                if (pass) {
                    warm += dt;
                    continue;
                }
                total += dt;
                int f = 0;
                while (f < nf && strcmp(fams[f], m.units[u].family)) f++;
                if (f == nf) fams[nf++] = m.units[u].family;
                famt[f] += dt;
                famn[f]++;
            }
    printf("%s (%s): %d launches, %d units, %d cold compilations\n", example, cuda_dtype_name(g.train.dtype), m.nkernels,
           m.nunits, 2 * m.nunits);
    for (int f = 0; f < nf; f++) printf("  %-12s %2d compilations  %7.2f s\n", fams[f], famn[f], famt[f]);
    printf("  total cold   %7.2f s (sm_80 + sm_90, one at a time)   warm (cache hits) %.3f s\n", total, warm);
    /* the same set as one batch on every CPU, into another cold cache */
    char pdir[600];
    snprintf(pdir, sizeof pdir, "%s-batch", cdir);
    NvrtcOptions po = {.cache_dir = pdir};
    NvrtcJob *jobs = calloc((size_t)(2 * m.nunits), sizeof *jobs);
    if (!jobs) return 1;
    for (int u = 0; u < m.nunits; u++)
        for (int ai = 0; ai < 2; ai++) {
            jobs[2 * u + ai].source = m.units[u].source;
            jobs[2 * u + ai].name = m.units[u].family;
            jobs[2 * u + ai].arch = archs[ai];
        }
    double t0 = now();
    int bad = nvrtc_compile_many(jobs, 2 * m.nunits, &po, 0);
    double tb = now() - t0;
    for (int i = 0; i < 2 * m.nunits; i++) nvrtc_result_free(&jobs[i].result);
    free(jobs);
    if (bad) {
        fprintf(stderr, "bench_nvrtc: %d batch compilations failed\n", bad);
        return 1;
    }
    printf("  total cold   %7.2f s as one nvrtc_compile_many batch on %ld CPUs\n", tb, sysconf(_SC_NPROCESSORS_ONLN));
    source_set_free(&src);
    diag_free(&d);
    arena_free(&a);
    return 0;
}

int main(void) {
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
    printf("bench_nvrtc: NVRTC %d.%d, cold cache %s\n", maj, min, dir);
    double t0 = now();
    const char *ex[] = {"gpt2-tiny", "gpt2-small", "gpt3-175b", "llama-tiny", "llama2-7b", "llama2-70b"};
    int rc = 0;
    for (size_t i = 0; i < sizeof ex / sizeof *ex && !rc; i++) rc = bench_model(ex[i], dir);
    printf("all models: %.2f s cold+warm   (test budget: 60-90 s for the whole cold compile of test_nvrtc)\n",
           now() - t0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) rc = 1;
    return rc;
}
