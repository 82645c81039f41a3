#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"
#include "plandump.h"
#include "timeline.h"
#include "vocab.h"

/* The plan of test_cost.c: 8 instructions on a target with round numbers,
 * 4 ranks. Predicted: h2d 0 [0,.1], h2d 1 [.1,.2], kernel 2 [.1,.2] after 0,
 * kernel 3 [.2,.3] after 1, allgather 4 [.3,.375] after 3, nvme_read 5
 * [0,.5], cpu_adam 6 [.5,.6] after 5, step_end 7 at .6 after 4 and 6.
 * Both kernels run op 0, the backward of a linear. */
static PlanInstr ins[8];
static uint32_t deps[8];
static PlanOp ops[1];

static Plan *hand_plan(void) {
    Plan *p = plan_new();
    p->ranks = 4;
    p->model_name = "hand";
    p->target.name = "round";
    p->target.nodes = 1;
    p->target.gpus_per_node = 4;
    p->target.gpu_pcie = 10e9;
    p->target.gpu_flops = 10e12;
    p->target.gpu_hbm = 1e12;
    p->target.net_bandwidth = 10e9;
    p->target.net_inter = 10e9;
    p->target.nvme_read = 8e9;
    p->target.nvme_write = 4e9;
    p->target.cpu_bandwidth = 80e9;
    memset(ins, 0, sizeof ins);
    ins[0] = (PlanInstr){.op = PI_H2D, .queue = Q_H2D, .bytes = 1000000000, .ntiles = 1, .arg = -1};
    ins[1] = ins[0];
    ins[2] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e12, .bytes = 1000, .ntiles = 1, .dep = 0, .ndeps = 1};
    ins[3] = ins[2];
    ins[3].dep = 1;
    ins[4] = (PlanInstr){.op = PI_ALLGATHER, .queue = Q_COMM, .bytes = 1000000000, .ntiles = 1, .dep = 2, .ndeps = 1, .arg = -1};
    ins[5] = (PlanInstr){.op = PI_NVME_READ, .queue = Q_NVME, .bytes = 1000000000, .ntiles = 1, .arg = -1};
    ins[6] = (PlanInstr){.op = PI_CPU_ADAM, .queue = Q_CPU, .bytes = 2000000000, .ntiles = 1, .dep = 3, .ndeps = 1, .arg = -1};
    ins[7] = (PlanInstr){.op = PI_STEP_END, .queue = Q_COMPUTE, .ntiles = 1, .dep = 4, .ndeps = 2, .arg = -1};
    uint32_t d[6] = {0, 1, 3, 5, 4, 6};
    memcpy(deps, d, sizeof d);
    memset(ops, 0, sizeof ops);
    ops[0].kind = OP_BWD;
    ops[0].prim = PRIM_LINEAR;
    ops[0].scope = "";
    p->instrs = ins;
    p->ninstrs = 8;
    p->deps = deps;
    p->ndeps = 6;
    p->ops = ops;
    p->nops = 1;
    p->opt_begin = 5;
    p->train.grad_accum = 1;
    return p;
}

static void release(Plan *p) {
    p->instrs = NULL;
    p->deps = NULL;
    p->ops = NULL;
    p->model_name = NULL;
    plan_free(p);
}

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) < 1e-9, "%.12g != %.12g", (double)(a), (double)(b))

/* A measured run of the hand plan where the copies to the GPU took ten
 * times the prediction (1 s each, not 0.1) and the all-gather 0.1 s, with
 * timestamps from an epoch 5 s before (the origin moves to the first start). */
static const char *measured =
    "{\"traceEvents\":[\n"
    "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":2,\"tid\":0,\"args\":{\"name\":\"nvme\"}},\n"
    "{\"name\":\"h2d \",\"cat\":\"h2d\",\"ph\":\"X\",\"pid\":2,\"tid\":1,\"ts\":5000000,\"dur\":1000000,\"args\":{\"i\":0}},\n"
    "{\"name\":\"h2d \",\"cat\":\"h2d\",\"ph\":\"X\",\"pid\":2,\"tid\":1,\"ts\":6000000,\"dur\":1000000,\"args\":{\"i\":1}},\n"
    "{\"name\":\"kernel linear\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":2,\"tid\":4,\"ts\":6000000,\"dur\":100000,\"args\":{\"i\":2}},\n"
    "{\"name\":\"kernel linear\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":2,\"tid\":4,\"ts\":7000000,\"dur\":100000,\"args\":{\"i\":3}},\n"
    "{\"name\":\"allgather \",\"cat\":\"comm\",\"ph\":\"X\",\"pid\":2,\"tid\":3,\"ts\":7100000,\"dur\":100000,\"args\":{\"i\":4}},\n"
    "{\"name\":\"nvme_read \",\"cat\":\"nvme\",\"ph\":\"X\",\"pid\":2,\"tid\":0,\"ts\":5000000,\"dur\":500000,\"args\":{\"i\":5}},\n"
    "{\"name\":\"cpu_adam \",\"cat\":\"cpu\",\"ph\":\"X\",\"pid\":2,\"tid\":5,\"ts\":5500000,\"dur\":100000,\"args\":{\"i\":6}},\n"
    "{\"name\":\"step_end \",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":2,\"tid\":4,\"ts\":7200000,\"dur\":0,\"args\":{\"i\":7}}\n"
    "],\"displayTimeUnit\":\"ms\"}\n";

static void both(Plan *p, CostResult *c, Timeline *pred, Timeline *meas) {
    char err[256] = "";
    ck_assert(cost_simulate(p, c));
    ck_assert(timeline_predicted(p, c, pred));
    ck_assert_msg(timeline_read_trace(p, measured, strlen(measured), meas, err, sizeof err) == 0, "%s", err);
}

START_TEST(reads_a_trace) {
    Plan *p = hand_plan();
    CostResult c;
    Timeline pred, meas;
    both(p, &c, &pred, &meas);
    ck_assert_int_eq(meas.rank, 2);
    ck_assert_uint_eq(meas.count, 8);
    NEAR(meas.start[0], 0);
    NEAR(meas.end[1], 2.0);
    NEAR(meas.start[7], 2.2);
    NEAR(meas.span, 2.2);
    NEAR(pred.span, 0.6);
    timeline_free(&meas);
    timeline_free(&pred);
    cost_free(&c);
    release(p);
}
END_TEST

/* args.wait: the all-gather's 0.1 s was 0.06 s waiting for the other
 * ranks; busy is the rest, in the rows and on the critical path. */
START_TEST(waiting_is_not_busy) {
    Plan *p = hand_plan();
    CostResult c;
    Timeline pred, meas;
    char *text = strdup(measured), err[256] = "";
    char *at = strstr(text, "\"args\":{\"i\":4}");
    ck_assert_ptr_nonnull(at);
    size_t len = strlen(text) + 32;
    char *t2 = malloc(len);
    snprintf(t2, len, "%.*s\"args\":{\"i\":4,\"wait\":60000}%s", (int)(at - text), text, at + strlen("\"args\":{\"i\":4}"));
    ck_assert(cost_simulate(p, &c));
    ck_assert(timeline_predicted(p, &c, &pred));
    ck_assert_msg(timeline_read_trace(p, t2, strlen(t2), &meas, err, sizeof err) == 0, "%s", err);
    NEAR(meas.wait[4], 0.06);
    NEAR(timeline_busy(&meas, 4), 0.04);
    TimelineRow q[PLAN_NQUEUES];
    ck_assert(timeline_queue_rows(p, &pred, &meas, q));
    for (int k = 0; k < PLAN_NQUEUES; k++)
        if (!strcmp(q[k].name, "comm")) {
            NEAR(q[k].meas, 0.04);
            NEAR(q[k].wait, 0.06);
        }
    TimelinePath path;
    ck_assert(timeline_critical_path(p, &meas, &path));
    NEAR(path.span, 2.2);
    NEAR(path.busy, 2.14); /* the all-gather is on it */
    timeline_path_free(&path);
    timeline_free(&meas);
    /* a wait longer than the event is refused */
    snprintf(t2, len, "%.*s\"args\":{\"i\":4,\"wait\":200000}%s", (int)(at - text), text, at + strlen("\"args\":{\"i\":4}"));
    ck_assert_int_eq(timeline_read_trace(p, t2, strlen(t2), &meas, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "args.wait must be a number from 0 to dur"), "%s", err);
    free(t2);
    free(text);
    timeline_free(&pred);
    cost_free(&c);
    release(p);
}
END_TEST

START_TEST(rows_by_divergence) {
    Plan *p = hand_plan();
    CostResult c;
    Timeline pred, meas;
    both(p, &c, &pred, &meas);
    TimelineRow q[PLAN_NQUEUES];
    ck_assert(timeline_queue_rows(p, &pred, &meas, q));
    /* h2d: 0.2 predicted, 2.0 measured; comm: 0.075 and 0.1; the rest agree */
    ck_assert_str_eq(q[0].name, "h2d");
    ck_assert_uint_eq(q[0].count, 2);
    NEAR(q[0].pred, 0.2);
    NEAR(q[0].meas, 2.0);
    ck_assert_str_eq(q[1].name, "comm");
    NEAR(q[1].pred, 0.075);
    NEAR(q[1].meas, 0.1);
    TimelineRow *r;
    uint32_t n;
    ck_assert(timeline_class_rows(p, &pred, &meas, &r, &n));
    ck_assert_uint_eq(n, 6); /* h2d, kernel bwd linear, allgather, nvme_read, cpu_adam, step_end */
    ck_assert_str_eq(r[0].name, "h2d");
    ck_assert_str_eq(r[1].name, "allgather");
    bool kernel = false;
    for (uint32_t k = 0; k < n; k++)
        if (!strcmp(r[k].name, "kernel bwd linear")) {
            kernel = true;
            ck_assert_uint_eq(r[k].count, 2);
            NEAR(r[k].pred, 0.2);
            NEAR(r[k].meas, 0.2);
        }
    ck_assert(kernel);
    free(r);
    timeline_free(&meas);
    timeline_free(&pred);
    cost_free(&c);
    release(p);
}
END_TEST

static void assert_path(const TimelinePath *path, const uint32_t *want, uint32_t n) {
    ck_assert_uint_eq(path->n, n);
    for (uint32_t k = 0; k < n; k++) ck_assert_uint_eq(path->instr[k], want[k]);
}

START_TEST(critical_paths) {
    Plan *p = hand_plan();
    CostResult c;
    Timeline pred, meas;
    both(p, &c, &pred, &meas);
    TimelinePath path;
    /* predicted: the NVMe read, then Adam, then the step's end */
    ck_assert(timeline_critical_path(p, &pred, &path));
    assert_path(&path, (uint32_t[]){5, 6, 7}, 3);
    NEAR(path.span, 0.6);
    NEAR(path.busy, 0.6);
    timeline_path_free(&path);
    /* measured: the slow copies, kernel 3 (after copy 1), the all-gather, the step's end */
    ck_assert(timeline_critical_path(p, &meas, &path));
    assert_path(&path, (uint32_t[]){0, 1, 3, 4, 7}, 5);
    NEAR(path.span, 2.2);
    NEAR(path.busy, 2.2);
    uint8_t *m = timeline_path_marks(p, &path);
    ck_assert(m && m[3] && !m[2] && !m[5]);
    free(m);
    timeline_path_free(&path);
    timeline_free(&meas);
    timeline_free(&pred);
    cost_free(&c);
    release(p);
}
END_TEST

/* The table and the picture, as text. */
START_TEST(compare_and_svg) {
    Plan *p = hand_plan();
    CostResult c;
    Timeline pred, meas;
    both(p, &c, &pred, &meas);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert(plandump_compare(p, &pred, &meas, "run.json", f));
    fclose(f);
    ck_assert_msg(strstr(buf, "compare: hand on round, 4 ranks: the cost model against run.json (rank 2), 8 of 8 instructions measured\n"
                              "pass: predicted 600.000 ms, measured 2200.000 ms, ratio 3.67\n"), "%s", buf);
    ck_assert_msg(strstr(buf, "  h2d          2      200.000     2000.000   10.00  +1800.000\n"), "%s", buf);
    ck_assert_msg(strstr(buf, "critical path, measured: 5 instructions, 2200.000 ms (busy 2200.000 ms, waiting 0.000 ms); "
                              "on h2d 2000.000 ms, comm 100.000 ms, compute 100.000 ms\n"), "%s", buf);
    free(buf);
    f = open_memstream(&buf, &len);
    ck_assert(plandump_svg_measured(p, &c, &meas, f));
    fclose(f);
    ck_assert(strstr(buf, ">measured (rank 2)</text>") && strstr(buf, ">measured h2d</text>"));
    ck_assert(strstr(buf, ">0 ms</text>") && strstr(buf, ">2000 ms</text>") && strstr(buf, ">time (ms)</text>"));
    ck_assert(strstr(buf, "stroke=\"#e6007e\"") && strstr(buf, ">critical path</text>"));
    ck_assert(strstr(buf, "</svg>\n"));
    free(buf);
    timeline_free(&meas);
    timeline_free(&pred);
    cost_free(&c);
    release(p);
}
END_TEST

/* A trace that is not of this plan, or not a trace: one message each. */
static void refused(const char *text, const char *want) {
    Plan *p = hand_plan();
    Timeline t;
    char err[256] = "";
    ck_assert_int_eq(timeline_read_trace(p, text, strlen(text), &t, err, sizeof err), -1);
    ck_assert_str_eq(err, want);
    ck_assert(t.start == NULL && t.have == NULL);
    release(p);
}

#define EV(name, cat, tid, i) "{\"name\":\"" name "\",\"cat\":\"" cat "\",\"ph\":\"X\",\"pid\":0,\"tid\":" #tid ",\"ts\":1,\"dur\":2,\"args\":{\"i\":" #i "}}"

START_TEST(bad_traces) {
    refused("{\"traceEvents\":[" EV("h2d x", "h2d", 1, 8) "]}",
            "event 0: instruction 8, but the plan has 8 instructions: a trace of another plan?");
    refused("{\"traceEvents\":[" EV("kernel linear", "compute", 4, 0) "]}",
            "event 0: instruction 0 is kernel on compute in the trace but h2d on h2d in the plan: a trace of another plan?");
    refused("{\"traceEvents\":[" EV("h2d x", "d2h", 1, 0) "]}",
            "event 0: instruction 0 is h2d on d2h in the trace but h2d on h2d in the plan: a trace of another plan?");
    refused("{\"traceEvents\":[" EV("h2d x", "h2d", 1, 0) "," EV("h2d x", "h2d", 1, 0) "]}", "event 1: instruction 0 appears twice");
    refused("{\"traceEvents\":[" EV("h2d x", "h2d", 1, 0), "not valid JSON: line 1, column 100: unexpected end of the text in an array");
    refused("{\"traceEvents\":[]}", "no measured instructions (an empty trace)");
    refused("", "not valid JSON: line 1, column 1: unexpected end of the text");
    refused("[1, 2]", "not a Chrome trace (no traceEvents array)");
    refused("{\"traceEvents\":[" EV("h2d", "h2d", 1, 0) ",{\"name\":\"h2d\",\"cat\":\"h2d\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":2,"
            "\"args\":{\"i\":1}}]}",
            "events of rank 0 and rank 1 in one trace: give one rank's file");
    refused("{\"traceEvents\":[{\"name\":\"h2d\",\"ph\":\"X\"}]}", "event 0 has no args.i (the instruction's index)");
    refused("{\"traceEvents\":[{\"name\":\"h2d\",\"cat\":\"h2d\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":1,\"dur\":-2,\"args\":{\"i\":0}}]}",
            "event 0 (instruction 0): ts and dur must be numbers, dur not negative");
}
END_TEST

int main(void) {
    Suite *s = suite_create("timeline");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, reads_a_trace);
    tcase_add_test(tc, waiting_is_not_busy);
    tcase_add_test(tc, rows_by_divergence);
    tcase_add_test(tc, critical_paths);
    tcase_add_test(tc, compare_and_svg);
    tcase_add_test(tc, bad_traces);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
