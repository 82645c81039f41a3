#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "calibrate.h"
#include "cost.h"
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

/* The busy seconds of the NVMe transfers of direction w that t measured,
 * as the cost model gives them for p with target tg (independently of
 * calibrate.c: their end - start less the time beside others). */
static double model_busy(const Plan *p, const Timeline *t, const PlanTarget *tg, int w) {
    Plan q = *p;
    q.target = *tg;
    CostResult cr;
    ck_assert(cost_simulate(&q, &cr));
    double sum = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (t->have[i] && p->instrs[i].op == (w ? PI_NVME_WRITE : PI_NVME_READ)) sum += cr.end[i] - cr.start[i] - cr.wait[i];
    cost_free(&cr);
    return sum;
}

static double run_busy(const Plan *p, const Timeline *t, int w) {
    double sum = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (t->have[i] && p->instrs[i].op == (w ? PI_NVME_WRITE : PI_NVME_READ)) sum += timeline_busy(t, i);
    return sum;
}

/* The NVMe transfers of a run set the level of the target's timed
 * transfers: afterwards the cost model gives the run's transfers of each
 * direction the run's busy time (within 1%), at the run's sizes when the
 * target timed none; a direction the run did not use keeps the target's
 * timed transfers as they were. */
START_TEST(nvme_levels) {
    memset(ins, 0, sizeof ins);
    ins[0] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e6, .arg = 0, .ntiles = 1};
    for (int i = 1; i <= 8; i++) ins[i] = (PlanInstr){.op = PI_NVME_READ, .queue = Q_NVME, .bytes = 65536, .ntiles = 1};
    for (int i = 9; i <= 10; i++) ins[i] = (PlanInstr){.op = PI_NVME_READ, .queue = Q_NVME, .bytes = 4096, .ntiles = 1};
    for (int i = 11; i <= 13; i++) ins[i] = (PlanInstr){.op = PI_NVME_WRITE, .queue = Q_NVME, .bytes = 262144, .ntiles = 1};
    Plan *p = plan_of(14);
    p->target.nvme_read = p->target.nvme_write = 1e9;
    p->target.nvme_latency = 80e-6;
    Timeline t = timeline_of(14);
    took(&t, 0, 1e-3);
    for (int i = 1; i <= 8; i++) { /* beside each other: 300 us each, 250 of them beside the others */
        took(&t, (uint32_t)i, 300e-6);
        t.wait[i] = 250e-6;
    }
    took(&t, 9, 150e-6); /* alone */
    took(&t, 10, 170e-6);
    for (int i = 11; i <= 13; i++) took(&t, (uint32_t)i, 900e-6); /* alone, slow */
    PlanTarget out;
    CalibrateInfo info;
    ck_assert(plan_calibrate(p, &t, &out, &info));
    ck_assert_int_eq(info.transfers, 13);
    ck_assert_int_eq(info.nvme_points[0], 2); /* the reads' two sizes */
    ck_assert_int_eq(info.nvme_points[1], 1);
    ck_assert_int_eq(out.nnvme_points, 3);
    for (int w = 0; w < 2; w++) {
        double run = run_busy(p, &t, w), model = model_busy(p, &t, &out, w);
        ck_assert_msg(fabs(model / run - 1) < 0.011, "direction %d: the model gives %.6g s, the run %.6g s", w, model, run);
        ck_assert(info.nvme_scale[w][0] > 0 && info.nvme_scale[w][1] > 0);
    }
    ck_assert_msg(fabs(model_busy(p, &t, &p->target, 1) / run_busy(p, &t, 1) - 1) > 0.2, "the test must move the writes");
    /* a target with timed transfers: reads scaled in place, its writes (none in the run) kept */
    p->target.nnvme_points = 4;
    p->target.nvme_points[0] = (PlanNvmePoint){0, 4096, 10e-6, 90e-6};
    p->target.nvme_points[1] = (PlanNvmePoint){0, 1048576, 500e-6, 700e-6};
    p->target.nvme_points[2] = (PlanNvmePoint){1, 4096, 8e-6, 110e-6};
    p->target.nvme_points[3] = (PlanNvmePoint){1, 1048576, 300e-6, 280e-6};
    for (int i = 11; i <= 13; i++) t.have[i] = 0;
    ck_assert(plan_calibrate(p, &t, &out, &info));
    ck_assert_int_eq(info.nvme_points[0], 2);
    ck_assert_int_eq(info.nvme_points[1], 0);
    ck_assert_int_eq(out.nnvme_points, 4);
    int reads = 0;
    for (int i = 0; i < out.nnvme_points; i++) {
        const PlanNvmePoint *q = &out.nvme_points[i];
        if (q->write) { /* kept as they were */
            ck_assert(q->bytes == 4096 ? q->drive == 8e-6 && q->alone == 110e-6 : q->bytes == 1048576 && q->drive == 300e-6);
        } else { /* the target's sizes, scaled */
            ck_assert(q->bytes == 4096 || q->bytes == 1048576);
            reads++;
        }
    }
    ck_assert_int_eq(reads, 2);
    double run = run_busy(p, &t, 0), model = model_busy(p, &t, &out, 0);
    ck_assert_msg(fabs(model / run - 1) < 0.011, "reads: the model gives %.6g s, the run %.6g s", model, run);
    /* no transfer measured: every timed transfer kept */
    for (int i = 1; i <= 10; i++) t.have[i] = 0;
    ck_assert(plan_calibrate(p, &t, &out, &info));
    ck_assert_int_eq(info.transfers, 0);
    ck_assert_int_eq(out.nnvme_points, 4);
    ck_assert(memcmp(out.nvme_points, p->target.nvme_points, 4 * sizeof *out.nvme_points) == 0);
    timeline_free(&t);
    release(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("calibrate");
    TCase *t = tcase_create("core");
    tcase_add_test(t, kernel_calls_and_net);
    tcase_add_test(t, thinned_to_fit);
    tcase_add_test(t, nvme_levels);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
