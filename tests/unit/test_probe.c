/* probe: the latency/bandwidth fit on synthetic timings, the efficiencies
 * from kernel rates, and the target file it writes, read back by the
 * compiler's target reader (the file zinfc plans with). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "loader.h"
#include "probe.h"
#include "probe_gpu.h"
#include "target.h"

#define NEAR(a, b, tol) ck_assert_msg(fabs((a) - (b)) <= (tol) * fabs(b), "%.12g != %.12g", (double)(a), (double)(b))

START_TEST(fit_exact) {
    /* 20 us + bytes / 2 GB/s, at 4 KiB .. 8 MiB */
    ProbeSample s[4];
    double sizes[4] = {4096, 65536, 1 << 20, 8 << 20};
    for (int i = 0; i < 4; i++) s[i] = (ProbeSample){1, sizes[i], 20e-6 + sizes[i] / 2e9};
    ProbeFit f;
    ck_assert_int_eq(probe_fit(s, 4, &f), 0);
    NEAR(f.latency, 20e-6, 1e-9);
    NEAR(f.bandwidth, 2e9, 1e-9);
    /* ring samples: f steps, f (R-1)/R bytes; R = 4, 5 us a step, 10 GB/s */
    ProbeSample r[6];
    for (int op = 0; op < 2; op++)
        for (int k = 0; k < 3; k++) {
            double fac = op ? 1 : 2, steps = fac * 3, bytes = fac * 0.75 * sizes[k + 1];
            r[op * 3 + k] = (ProbeSample){steps, bytes, steps * 5e-6 + bytes / 10e9};
        }
    ck_assert_int_eq(probe_fit(r, 6, &f), 0);
    NEAR(f.latency, 5e-6, 1e-9);
    NEAR(f.bandwidth, 10e9, 1e-9);
}
END_TEST

START_TEST(fit_edges) {
    ProbeFit f;
    /* noise that would make the latency negative: latency 0, bandwidth alone */
    ProbeSample s[2] = {{1, 1000, 0.5e-6}, {1, 1e6, 1e-3}};
    ck_assert_int_eq(probe_fit(s, 2, &f), 0);
    ck_assert(f.latency == 0);
    ck_assert(f.bandwidth > 1e9 && f.bandwidth < 2e9); /* between the two samples' rates */
    /* the time does not grow with the bytes: latency alone, the best rate seen */
    ProbeSample flat[2] = {{1, 1000, 10e-6}, {1, 2000, 10e-6}};
    ck_assert_int_eq(probe_fit(flat, 2, &f), 0);
    NEAR(f.latency, 10e-6, 1e-9);
    NEAR(f.bandwidth, 2000 / 10e-6, 1e-9);
    /* nothing to fit */
    ProbeSample none[1] = {{1, 0, 1e-6}};
    ck_assert_int_eq(probe_fit(none, 1, &f), -1);
    ProbeSample notime[1] = {{1, 4096, 0}};
    ck_assert_int_eq(probe_fit(notime, 1, &f), -1);
}
END_TEST

static ProbeResult sample_result(void) {
    ProbeResult r;
    memset(&r, 0, sizeof r);
    snprintf(r.host, sizeof r.host, "box_1");
    r.ranks = 2;
    r.cores = 2;
    r.cpu_memory = 8ull << 30;
    r.mem_bandwidth = 12.5e9;
    /* GEMMs at 40 and 20 GFLOP/s: peak 40, median 30 -> 0.75; attention 4 -> 0.1; no norm rates -> 1 */
    r.rates[0] = (ProbeRate){FAM_GEMM, "linear a", 40e9, 1};
    r.rates[1] = (ProbeRate){FAM_GEMM, "linear b", 20e9, 1};
    r.rates[2] = (ProbeRate){FAM_ATTENTION, "attention", 4e9, 1};
    r.rates[3] = (ProbeRate){FAM_ELEMENTWISE, "gelu", 1e9, 0.5};
    r.rates[4] = (ProbeRate){FAM_ELEMENTWISE, "add", 3e9, 1};
    r.rates[5] = (ProbeRate){FAM_ACTIVATION, "gelu", 2e6, 25e-6};
    r.nrates = 6;
    probe_summarise_rates(&r);
    r.launch = 12e-6;
    r.copy = 8e-6;
    r.wake = 30e-6;
    r.cache_bytes = 32u << 20;
    r.cache_bandwidth = 80e9;
    r.adam_bandwidth = 20e9;
    r.read_bandwidth = 15e9;
    r.nvme = true;
    snprintf(r.nvme_dir, sizeof r.nvme_dir, "/tmp/zinf nvme");
    r.nvme_capacity = 4ull << 30;
    r.nvme_read = (ProbeFit){60e-6, 1.5e9};
    r.nvme_write = (ProbeFit){40e-6, 0.5e9};
    r.nvme_pipe_read = (ProbeFit){3e-6, 1.4e9}; /* per rank, 2 ranks: the drive's 1.5 and 2.5 us per request */
    r.nvme_pipe_write = (ProbeFit){5e-6, 0.4e9};
    r.nvme_cpu = 25e-6;
    r.nvme_sizes[0] = (ProbeNvmeSize){4096, {60e-6, 70e-6}, {5e-6, 6e-6}};
    r.nvme_sizes[1] = (ProbeNvmeSize){65536, {90e-6, 95e-6}, {25e-6, 16e-6}};
    r.nnvme_sizes = 2;
    r.net = true;
    r.coll = (ProbeFit){7e-6, 3e9};
    return r;
}

START_TEST(efficiencies) {
    ProbeResult r = sample_result();
    NEAR(r.peak_flops, 40e9, 1e-12);
    NEAR(r.eff[FAM_GEMM], 0.75, 1e-12);
    NEAR(r.eff[FAM_ATTENTION], 0.1, 1e-12);
    ck_assert(r.eff[FAM_NORM] == 1);
    NEAR(r.eff[FAM_ELEMENTWISE], 2.5e9 / 40e9, 1e-12); /* median of 2 and 3 GFLOP/s */
    NEAR(r.eff[FAM_ACTIVATION], 1.0, 1e-12); /* 80 GFLOP/s: capped at the peak */
}
END_TEST

/* What the compiler reads from a target file's text: one of these per
 * test owns the arena, sources and diagnostics the targets point into. */
typedef struct Reader {
    Arena a;
    SourceSet src;
    DiagSink d;
} Reader;

static void reader_init(Reader *x) {
    arena_init(&x->a);
    source_set_init(&x->src);
    diag_init(&x->d);
}

static void reader_free(Reader *x) {
    diag_free(&x->d);
    source_set_free(&x->src);
    arena_free(&x->a);
}

/* text, named name, read as a program and its target; fails the test (with the text) if either is refused */
static void read_target(Reader *x, const char *name, const char *text, Target *t) {
    LoadOptions lo = {NULL, 0, "stdlib"};
    Program prog;
    memset(&prog, 0, sizeof prog);
    ck_assert_msg(program_load_text(&x->a, &x->src, &x->d, name, text, &lo, &prog) && x->d.errors == 0, "%s", text);
    ck_assert_msg(target_from_program(&prog, NULL, &x->a, &x->d, t), "%s\n%s", x->d.len ? x->d.items[0].msg : "", text);
}

/* The file the probe writes is a target the compiler reads, with every figure. */
START_TEST(target_file_compiles) {
    ProbeResult r = sample_result();
    char text[4096];
    int n = probe_target_text(&r, text, sizeof text);
    ck_assert(n > 0 && (size_t)n < sizeof text);
    ck_assert_msg(strstr(text, "target probe_box_1 {\n") != NULL, "%s", text);
    Reader x;
    reader_init(&x);
    Target t;
    read_target(&x, "probe.zl", text, &t);
    ck_assert_str_eq(t.name, "probe_box_1");
    ck_assert_str_eq(t.backend, "host");
    ck_assert_int_eq(target_ranks(&t), 2);
    ck_assert_uint_eq(t.cpu_memory, 8ull << 30);
    ck_assert_uint_eq(t.gpu_memory, 1ull << 30); /* a quarter of memory over the ranks */
    NEAR(t.cpu_bandwidth, 12.5e9, 1e-9);
    NEAR(t.gpu_hbm, 12.5e9 / 2, 1e-9);         /* the node's bandwidth shared by its ranks */
    NEAR(t.gpu_flops, 40e9, 1e-9);
    NEAR(t.kernel_latency, 12e-6, 1e-6);
    NEAR(t.pcie_latency, 8e-6, 1e-6);
    NEAR(t.eff[FAM_GEMM], 0.75, 1e-4);
    NEAR(t.eff[FAM_NORM], 1.0, 1e-9);
    NEAR(t.nvme_read, 1.5e9, 1e-9);
    NEAR(t.nvme_write, 0.5e9, 1e-9);
    NEAR(t.nvme_latency, 50e-6, 1e-6);
    NEAR(t.nvme_request, 2e-6, 1e-6);
    NEAR(t.nvme_cpu, 25e-6, 1e-6);
    ck_assert_uint_eq(t.nvme_capacity, 4ull << 30);
    ck_assert_str_eq(t.nvme_paths[0], "/tmp/zinf nvme");
    NEAR(t.net_bandwidth, 3e9, 1e-9);
    NEAR(t.net_latency, 7e-6, 1e-6);
    NEAR(t.wake_latency, 30e-6, 1e-6);
    NEAR(t.cpu_cache, 32.0 * (1 << 20), 1e-9);
    NEAR(t.cache_bandwidth, 80e9, 1e-9);
    NEAR(t.adam_bandwidth, 20e9, 1e-9);
    NEAR(t.read_bandwidth, 15e9, 1e-9);
    /* every timed call, by family, in the plan's FLOPs and seconds */
    ck_assert_int_eq(t.nkernel_points, 6);
    int gemms = 0;
    for (int i = 0; i < t.nkernel_points; i++) {
        const PlanKernelPoint *q = &t.kernel_points[i];
        gemms += q->family == FAM_GEMM;
        if (q->family == FAM_ACTIVATION) NEAR(q->flops, 2e6, 1e-6), NEAR(q->secs, 25e-6, 1e-4);
        if (q->family == FAM_ATTENTION) NEAR(q->flops, 4e9, 1e-6), NEAR(q->secs, 1.0, 1e-4);
    }
    ck_assert_int_eq(gemms, 2);
    /* every timed transfer, by direction, in bytes and seconds */
    ck_assert_int_eq(t.nnvme_points, 4);
    for (int i = 0; i < t.nnvme_points; i++) {
        const PlanNvmePoint *q = &t.nvme_points[i];
        const ProbeNvmeSize *z = &r.nvme_sizes[q->bytes == 4096 ? 0 : 1];
        ck_assert(q->bytes == z->bytes);
        NEAR(q->drive, z->drive[q->write], 1e-3);
        NEAR(q->alone, z->alone[q->write], 1e-3);
    }
    ck_assert(t.nvme_points[0].write != t.nvme_points[3].write);
    /* none timed: the nvme block without the lists */
    r.nnvme_sizes = 0;
    probe_target_text(&r, text, sizeof text);
    ck_assert_msg(strstr(text, "reads =") == NULL && strstr(text, "cpu_us = 25.000 }\n"), "%s", text);
    read_target(&x, "probe0.zl", text, &t);
    ck_assert_int_eq(t.nnvme_points, 0);
    NEAR(t.nvme_request, 2e-6, 1e-6);
    /* one rank, no NVMe: no nvme or net block, and it still compiles */
    r.nvme = r.net = false;
    r.ranks = 1;
    n = probe_target_text(&r, text, sizeof text);
    ck_assert(strstr(text, "nvme {") == NULL && strstr(text, "net ") == NULL);
    read_target(&x, "probe1.zl", text, &t);
    ck_assert_int_eq(target_ranks(&t), 1);
    ck_assert_uint_eq(t.nvme_capacity, 0);
    /* a buffer too small: the length it needs, a terminated prefix */
    char small[16];
    ck_assert_int_eq(probe_target_text(&r, small, sizeof small), n);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    reader_free(&x);
}
END_TEST

/* ---- the GPU probe (runtime/probe/probe_gpu.h): its figures as a cuda target ---- */

static ProbeGpu sample_gpu(void) {
    ProbeGpu g;
    memset(&g, 0, sizeof g);
    g.on = true;
    g.ranks = 2;
    snprintf(g.name, sizeof g.name, "NVIDIA H200");
    snprintf(g.arch, sizeof g.arch, "sm_90");
    g.sms = 132;
    g.memory = 140ull << 30;
    g.pcie = (ProbeFit){3e-6, 50e9};
    g.hbm = 4e12;
    g.launch = 2.5e-6;
    /* bf16 at 800, 600, 400 TFLOP/s: peak 800, median 600 -> 0.75; f32 at 50 (reported only) and one with no algorithm */
    double r[5] = {800e12, 400e12, 600e12, 50e12, 0};
    for (int i = 0; i < 5; i++) {
        g.gemm[i] = (ProbeRate){FAM_GEMM, "gemm", 1e12, r[i] > 0 ? 1e12 / r[i] : 0};
        g.gemm_f32[i] = i == 3;
    }
    g.ngemm = 5;
    probe_gpu_summarise(&g);
    g.net = true;
    g.coll = (ProbeFit){9e-6, 150e9};
    return g;
}

START_TEST(gpu_summarise) {
    ProbeGpu g = sample_gpu();
    NEAR(g.flops, 800e12, 1e-9);
    NEAR(g.flops_f32, 50e12, 1e-9);
    NEAR(g.eff_gemm, 0.75, 1e-9);
    /* no rates: no peak, efficiency 1 */
    g.ngemm = 0;
    probe_gpu_summarise(&g);
    ck_assert(g.flops == 0 && g.eff_gemm == 1);
}
END_TEST

START_TEST(gpu_target_compiles) {
    ProbeResult h = sample_result();
    ProbeGpu g = sample_gpu();
    char text[4096];
    int n = probe_gpu_target_text(&h, &g, text, sizeof text);
    ck_assert(n > 0 && (size_t)n < sizeof text);
    ck_assert_msg(strstr(text, "target probe_box_1 {\n  backend = \"cuda\"\n  nodes = 1\n  gpus_per_node = 2\n"), "%s", text);
    /* the host's own dispatch figures would land in the GPU's fields: not written */
    ck_assert_msg(!strstr(text, "copy_us") && !strstr(text, "cpu  { memory = 8192 MiB; bandwidth = 12.500 GB/s; cores = 2; "),
                  "%s", text);
    Reader x;
    reader_init(&x);
    Target t;
    read_target(&x, "gpu.zl", text, &t);
    ck_assert_str_eq(t.backend, "cuda");
    ck_assert_int_eq(t.nodes, 1);
    ck_assert_int_eq(t.gpus_per_node, 2);
    ck_assert_uint_eq(t.gpu_memory, 140ull << 30);
    NEAR(t.gpu_flops, 800e12, 1e-6);
    NEAR(t.gpu_hbm, 4e12, 1e-6);
    NEAR(t.gpu_pcie, 50e9, 1e-6);
    ck_assert_str_eq(t.gpu_arch, "sm_90");
    ck_assert_int_eq(t.gpu_sms, 132);
    NEAR(t.pcie_latency, 3e-6, 1e-3);
    NEAR(t.kernel_latency, 2.5e-6, 1e-3);
    NEAR(t.eff[FAM_GEMM], 0.75, 1e-4);
    ck_assert_msg(t.eff[FAM_ATTENTION] == 0 || t.eff[FAM_ATTENTION] == 1, "attention %g", t.eff[FAM_ATTENTION]);
    ck_assert_uint_eq(t.cpu_memory, 8ull << 30);
    NEAR(t.cpu_bandwidth, 12.5e9, 1e-9);
    ck_assert_int_eq(t.cpu_cores, 2);
    NEAR(t.nvme_read, 1.5e9, 1e-9);
    NEAR(t.nvme_latency, 50e-6, 1e-6);
    ck_assert_str_eq(t.nvme_paths[0], "/tmp/zinf nvme");
    NEAR(t.net_bandwidth, 150e9, 1e-9);
    NEAR(t.net_latency, 9e-6, 1e-3);
    /* the three bf16 calls with an algorithm, not the f32 one (its rate is not the peak's dtype) */
    ck_assert_int_eq(t.nkernel_points, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(t.kernel_points[i].family, FAM_GEMM);
        NEAR(t.kernel_points[i].flops, 1e12, 1e-6);
    }
    NEAR(t.kernel_points[1].secs, 1e12 / 400e12, 1e-3);
    /* one GPU, no NVMe, figures that were not measured (NaN, 0): no net or
     * nvme block, the smallest positive values, and it still compiles */
    h.nvme = false;
    g.net = false;
    g.ranks = 1;
    g.hbm = NAN;
    g.launch = 0;
    n = probe_gpu_target_text(&h, &g, text, sizeof text);
    ck_assert_msg(!strstr(text, "nvme {") && !strstr(text, "net ") && strstr(text, "hbm = 0.001 GB/s"), "%s", text);
    read_target(&x, "gpu1.zl", text, &t);
    ck_assert_int_eq(t.gpus_per_node, 1);
    /* a buffer too small: the length it needs, a terminated prefix */
    char small[16];
    ck_assert_int_eq(probe_gpu_target_text(&h, &g, small, sizeof small), n);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    reader_free(&x);
}
END_TEST

START_TEST(gpu_report_host_only) {
    /* no GPU: one line that says why, and that the target is a host one */
    ProbeGpu g;
    memset(&g, 0, sizeof g);
    snprintf(g.why, sizeof g.why, "no CUDA driver: libcuda.so.1: cannot open shared object file");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert(f != NULL);
    probe_gpu_report(&g, f);
    fclose(f);
    ck_assert_str_eq(buf, "gpu: not measured (no CUDA driver: libcuda.so.1: cannot open shared object file): a host target\n");
    free(buf);
}
END_TEST

/* The CPUs' steal time from /proc/stat (a file written here), and the
 * warning a probe under a busy hypervisor writes into its target. */
START_TEST(steal_time) {
    char path[] = "/tmp/zinf-test-stat-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("cpu  100 5 50 800 10 0 5 30 0 0\ncpu0 50 2 25 400 5 0 2 15 0 0\n", f);
    fclose(f);
    double steal = -1, total = -1;
    ck_assert(probe_cpu_ticks(path, &steal, &total));
    NEAR(steal, 30.0, 1e-12);
    NEAR(total, 1000.0, 1e-12);
    f = fopen(path, "w");
    fputs("cpu  100 5 50 800\n", f); /* no steal column */
    fclose(f);
    ck_assert(!probe_cpu_ticks(path, &steal, &total));
    unlink(path);
    ck_assert(!probe_cpu_ticks(path, &steal, &total));
    ProbeResult r = sample_result();
    char text[4096];
    r.steal = 0.3;
    probe_target_text(&r, text, sizeof text);
    ck_assert_msg(strstr(text, "# Other machines took 30% of this one's CPU time while it measured (steal): the figures are low.\n"),
                  "%s", text);
    r.steal = 0.01;
    probe_target_text(&r, text, sizeof text);
    ck_assert(!strstr(text, "steal"));
}
END_TEST

/* The largest data cache from a sysfs tree (written here): the level-3
 * unified cache, not the level-1 instruction cache, sizes in K or M. */
START_TEST(cache_from_sysfs) {
    char dir[] = "/tmp/zinf-test-sysfs-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    static const char *const files[][3] = {{"1", "Data", "48K"}, {"1", "Instruction", "64M"}, {"2", "Unified", "1024K"},
                                           {"3", "Unified", "32M"}};
    char path[600];
    snprintf(path, sizeof path, "%s/cache", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/cache/index%d", dir, i);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        static const char *const names[3] = {"level", "type", "size"};
        for (int k = 0; k < 3; k++) {
            snprintf(path, sizeof path, "%s/cache/index%d/%s", dir, i, names[k]);
            FILE *f = fopen(path, "w");
            ck_assert_ptr_nonnull(f);
            fprintf(f, "%s\n", files[i][k]);
            fclose(f);
        }
    }
    ck_assert_uint_eq(probe_cache_bytes(dir), 32u << 20);
    snprintf(path, sizeof path, "%s/nothing", dir);
    ck_assert_uint_eq(probe_cache_bytes(path), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("probe");
    TCase *t = tcase_create("probe");
    tcase_add_test(t, fit_exact);
    tcase_add_test(t, fit_edges);
    tcase_add_test(t, efficiencies);
    tcase_add_test(t, target_file_compiles);
    tcase_add_test(t, gpu_summarise);
    tcase_add_test(t, gpu_target_compiles);
    tcase_add_test(t, gpu_report_host_only);
    tcase_add_test(t, cache_from_sysfs);
    tcase_add_test(t, steal_time);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
