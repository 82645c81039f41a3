#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "calibrate.h"
#include "vocab.h"

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-9 * fabs(b) + 1e-15, "%.12g != %.12g", (double)(a), (double)(b))

enum { MAXI = 80 };
static PlanInstr ins[MAXI];
static PlanOp ops[2];

/* A 2-rank host plan: ops 0 linear, 1 gelu; the target times a gemm and a
 * norm call of its own and launches in 1 us. */
static Plan *plan_of(uint32_t n) {
    Plan *p = plan_new();
    p->ranks = 2;
    p->target.name = "box";
    p->target.backend = "host";
    p->target.nodes = 1;
    p->target.gpus_per_node = 2;
    p->target.kernel_latency = 1e-6;
    p->target.net_bandwidth = p->target.net_inter = 1e9;
    p->target.net_latency = 1e-5;
    p->target.nkernel_points = 2;
    p->target.kernel_points[0] = (PlanKernelPoint){FAM_GEMM, 1e6, 1e-3};
    p->target.kernel_points[1] = (PlanKernelPoint){FAM_NORM, 5e4, 7e-6};
    memset(ops, 0, sizeof ops);
    ops[0].prim = PRIM_LINEAR;
    ops[1].prim = PRIM_GELU;
    p->ops = ops;
    p->nops = 2;
    p->instrs = ins;
    p->ninstrs = n;
    return p;
}

static void release(Plan *p) {
    p->instrs = NULL;
    p->ops = NULL;
    plan_free(p);
}

static Timeline timeline_of(uint32_t n) {
    Timeline t = {.n = n, .rank = 0};
    t.start = calloc(n, sizeof *t.start);
    t.end = calloc(n, sizeof *t.end);
    t.wait = calloc(n, sizeof *t.wait);
    t.have = calloc(n, 1);
    ck_assert(t.start && t.end && t.wait && t.have);
    return t;
}

static void took(Timeline *t, uint32_t i, double secs) {
    t->start[i] = i;
    t->end[i] = i + secs;
    t->have[i] = 1;
    t->count++;
}

/* Each family's calls from the run: one per FLOP count, the mean of its
 * kernels less the launch; a kernel without a time does not count; the
 * family the run has none of (norm) keeps the target's call; the
 * all-reduces, generated from 50 us per ring step and 2 GB/s, give those
 * back; other instructions are not kernels. */
START_TEST(kernel_calls_and_net) {
    memset(ins, 0, sizeof ins);
    for (int i = 0; i < 3; i++) ins[i] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e6, .arg = 0, .ntiles = 1};
    ins[3] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 4e6, .arg = 0, .ntiles = 1};
    ins[4] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e5, .arg = 1, .ntiles = 1};
    ins[5] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 9e6, .arg = 0, .ntiles = 1}; /* no time */
    ins[6] = (PlanInstr){.op = PI_ALLREDUCE, .queue = Q_COMM, .bytes = 1000000, .ntiles = 1};
    ins[7] = (PlanInstr){.op = PI_ALLREDUCE, .queue = Q_COMM, .bytes = 4000000, .ntiles = 1};
    ins[8] = (PlanInstr){.op = PI_NVME_READ, .queue = Q_NVME, .bytes = 4096, .ntiles = 1};
    Plan *p = plan_of(9);
    Timeline t = timeline_of(9);
    took(&t, 0, 10e-6);
    took(&t, 1, 20e-6);
    took(&t, 2, 30e-6);
    took(&t, 3, 50e-6);
    took(&t, 4, 5e-6);
    took(&t, 6, 2 * 50e-6 + 1e6 / 2e9); /* an all-reduce on 2 ranks: 2 steps, the bytes once */
    took(&t, 7, 2 * 50e-6 + 4e6 / 2e9);
    t.wait[7] = 1e-5; /* waiting for the peer is part of the collective's time here */
    took(&t, 8, 1);
    PlanTarget out;
    CalibrateInfo info;
    ck_assert(plan_calibrate(p, &t, &out, &info));
    ck_assert_int_eq(info.kernels, 5);
    ck_assert_int_eq(info.calls[FAM_GEMM], 2);
    ck_assert_int_eq(info.calls[FAM_ACTIVATION], 1);
    ck_assert_int_eq(info.calls[FAM_NORM], 0);
    ck_assert_int_eq(info.thinned, 0);
    ck_assert_int_eq(out.nkernel_points, 4);
    ck_assert(out.kernel_points[0].family == FAM_NORM && out.kernel_points[0].flops == 5e4 && out.kernel_points[0].secs == 7e-6);
    ck_assert(out.kernel_points[1].family == FAM_GEMM && out.kernel_points[1].flops == 1e6);
    NEAR(out.kernel_points[1].secs, 19e-6);
    ck_assert(out.kernel_points[2].family == FAM_GEMM && out.kernel_points[2].flops == 4e6);
    NEAR(out.kernel_points[2].secs, 49e-6);
    ck_assert(out.kernel_points[3].family == FAM_ACTIVATION && out.kernel_points[3].flops == 1e5);
    NEAR(out.kernel_points[3].secs, 4e-6);
    ck_assert_int_eq(info.collectives, 2);
    ck_assert(info.net);
    NEAR(out.net_latency, 50e-6);
    NEAR(out.net_bandwidth, 2e9);
    NEAR(out.net_inter, 2e9);
    ck_assert_str_eq(out.name, "box");
    ck_assert(out.kernel_latency == 1e-6);
    /* one size of collective: the net figures stay */
    t.have[7] = 0;
    ck_assert(plan_calibrate(p, &t, &out, &info));
    ck_assert(!info.net && info.collectives == 1);
    ck_assert(out.net_latency == 1e-5 && out.net_bandwidth == 1e9);
    /* no kernel with a time: nothing to calibrate */
    for (int i = 0; i < 5; i++) t.have[i] = 0;
    ck_assert(!plan_calibrate(p, &t, &out, &info));
    ck_assert_int_eq(info.kernels, 0);
    timeline_free(&t);
    release(p);
}
END_TEST

/* More FLOP counts than a target holds: each family thinned evenly, its
 * smallest and largest kept, the count of those left out said; with the
 * target's own calls of other families it still fits. */
START_TEST(thinned_to_fit) {
    enum { N = 70 };
    memset(ins, 0, sizeof ins);
    for (int i = 0; i < N; i++) ins[i] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e6 * (i + 1), .arg = i % 7 == 0, .ntiles = 1};
    Plan *p = plan_of(N);
    Timeline t = timeline_of(N);
    for (int i = 0; i < N; i++) took(&t, (uint32_t)i, 1e-5 * (i + 1));
    PlanTarget out;
    CalibrateInfo info;
    ck_assert(plan_calibrate(p, &t, &out, &info));
    ck_assert_int_le(out.nkernel_points, PLAN_MAX_KERNEL_POINTS);
    ck_assert_int_eq(info.calls[FAM_GEMM] + info.calls[FAM_ACTIVATION] + info.thinned, N);
    ck_assert_int_eq(out.nkernel_points, 1 + info.calls[FAM_GEMM] + info.calls[FAM_ACTIVATION]); /* + the norm kept */
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < out.nkernel_points; i++)
        if (out.kernel_points[i].family == FAM_GEMM) {
            lo = fmin(lo, out.kernel_points[i].flops);
            hi = fmax(hi, out.kernel_points[i].flops);
        }
    ck_assert(lo == 2e6 && hi == 70e6); /* the gemms' smallest and largest FLOP counts */
    timeline_free(&t);
    release(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("calibrate");
    TCase *t = tcase_create("core");
    tcase_add_test(t, kernel_calls_and_net);
    tcase_add_test(t, thinned_to_fit);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
