/* probe: the latency/bandwidth fit on synthetic timings, the efficiencies
 * from kernel rates, and the target file it writes, read back by the
 * compiler's target reader (the file zinfc plans with). */
#include <check.h>
#include <math.h>
#include <string.h>
#include "loader.h"
#include "probe.h"
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
    r.nrates = 5;
    probe_summarise_rates(&r);
    r.launch = 12e-6;
    r.copy = 8e-6;
    r.nvme = true;
    snprintf(r.nvme_dir, sizeof r.nvme_dir, "/tmp/zinf nvme");
    r.nvme_capacity = 4ull << 30;
    r.nvme_read = (ProbeFit){60e-6, 1.5e9};
    r.nvme_write = (ProbeFit){40e-6, 0.5e9};
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
}
END_TEST

/* The file the probe writes is a target the compiler reads, with every figure. */
START_TEST(target_file_compiles) {
    ProbeResult r = sample_result();
    char text[4096];
    int n = probe_target_text(&r, text, sizeof text);
    ck_assert(n > 0 && (size_t)n < sizeof text);
    ck_assert_msg(strstr(text, "target probe_box_1 {\n") != NULL, "%s", text);
    Arena a;
    arena_init(&a);
    SourceSet src;
    source_set_init(&src);
    DiagSink d;
    diag_init(&d);
    LoadOptions lo = {NULL, 0, "stdlib"};
    Program prog;
    memset(&prog, 0, sizeof prog);
    ck_assert_msg(program_load_text(&a, &src, &d, "probe.zl", text, &lo, &prog) && d.errors == 0, "%s", text);
    Target t;
    ck_assert_msg(target_from_program(&prog, NULL, &a, &d, &t), "%s\n%s", d.len ? d.items[0].msg : "", text);
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
    ck_assert_uint_eq(t.nvme_capacity, 4ull << 30);
    ck_assert_str_eq(t.nvme_paths[0], "/tmp/zinf nvme");
    NEAR(t.net_bandwidth, 3e9, 1e-9);
    NEAR(t.net_latency, 7e-6, 1e-6);
    /* one rank, no NVMe: no nvme or net block, and it still compiles */
    r.nvme = r.net = false;
    r.ranks = 1;
    n = probe_target_text(&r, text, sizeof text);
    ck_assert(strstr(text, "nvme {") == NULL && strstr(text, "net ") == NULL);
    memset(&prog, 0, sizeof prog);
    ck_assert(program_load_text(&a, &src, &d, "probe1.zl", text, &lo, &prog) && d.errors == 0);
    ck_assert(target_from_program(&prog, NULL, &a, &d, &t));
    ck_assert_int_eq(target_ranks(&t), 1);
    ck_assert_uint_eq(t.nvme_capacity, 0);
    /* a buffer too small: the length it needs, a terminated prefix */
    char small[16];
    ck_assert_int_eq(probe_target_text(&r, small, sizeof small), n);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    diag_free(&d);
    source_set_free(&src);
    arena_free(&a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("probe");
    TCase *t = tcase_create("probe");
    tcase_add_test(t, fit_exact);
    tcase_add_test(t, fit_edges);
    tcase_add_test(t, efficiencies);
    tcase_add_test(t, target_file_compiles);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
