/* qrun: dependencies are honoured across queues, a failure stops every
 * queue without a hang, ranges run independently, a pipelined queue keeps
 * its ready instructions in flight together (never two that touch the
 * same bytes where one writes, never one whose dependencies have not
 * ended, one that is not a transfer alone) and retires them in program
 * order whatever order they end in, a failed transfer stops the run with
 * its message and nothing left in flight, and waiting noted by an
 * instruction is not its queue's busy time. */
#include <check.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "qrun.h"

typedef struct Ctx {
    atomic_int clock;
    int order[64];
    int fail_at;
} Ctx;

static int exec_fn(void *ctx, uint32_t i, int worker, char *err, size_t n) {
    (void)worker;
    Ctx *c = ctx;
    if ((int)i == c->fail_at) {
        snprintf(err, n, "instruction %u failed on purpose", i);
        return -1;
    }
    usleep(200 * (i % 3)); /* uneven work so that queues interleave */
    c->order[i] = atomic_fetch_add(&c->clock, 1);
    return 0;
}

/* A chain across queues: 0 (nvme) -> 1 (h2d) -> 2 (compute) -> 3 (cpu), plus
 * independent work on every queue. */
static Plan *make_plan(void) {
    Plan *p = plan_new();
    ck_assert_ptr_nonnull(p);
    static PlanInstr ins[12];
    static uint32_t deps[16];
    memset(ins, 0, sizeof ins);
    uint8_t qs[12] = {Q_NVME, Q_H2D, Q_COMPUTE, Q_CPU, Q_NVME, Q_H2D, Q_COMPUTE, Q_COMM, Q_COMM, Q_CPU, Q_D2H, Q_COMPUTE};
    for (int i = 0; i < 12; i++) ins[i].queue = qs[i];
    int nd = 0;
    ins[1].dep = (uint32_t)nd; deps[nd++] = 0; ins[1].ndeps = 1;
    ins[2].dep = (uint32_t)nd; deps[nd++] = 1; ins[2].ndeps = 1;
    ins[3].dep = (uint32_t)nd; deps[nd++] = 2; ins[3].ndeps = 1;
    ins[10].dep = (uint32_t)nd; deps[nd++] = 6; deps[nd++] = 8; ins[10].ndeps = 2;
    ins[11].dep = (uint32_t)nd; deps[nd++] = 10; deps[nd++] = 3; ins[11].ndeps = 2;
    p->instrs = ins;
    p->ninstrs = 12;
    p->deps = deps;
    p->ndeps = (uint32_t)nd;
    return p;
}

static void release(Plan *p) {
    p->instrs = NULL;
    p->ninstrs = 0;
    p->deps = NULL;
    p->ndeps = 0;
    plan_free(p);
}

START_TEST(test_order) {
    Plan *p = make_plan();
    for (int rep = 0; rep < 20; rep++) {
        Ctx c = {.fail_at = -1};
        Qrun q;
        ck_assert_int_eq(qrun_init(&q, p, exec_fn, &c), 0);
        ck_assert_int_eq(qrun_range(&q, 0, 12), 0);
        ck_assert_int_eq(atomic_load(&c.clock), 12);
        ck_assert_int_lt(c.order[0], c.order[1]);
        ck_assert_int_lt(c.order[1], c.order[2]);
        ck_assert_int_lt(c.order[2], c.order[3]);
        ck_assert_int_lt(c.order[6], c.order[10]);
        ck_assert_int_lt(c.order[8], c.order[10]);
        ck_assert_int_lt(c.order[10], c.order[11]);
        ck_assert_int_lt(c.order[3], c.order[11]);
        /* Same queue: stream order. */
        ck_assert_int_lt(c.order[2], c.order[6]);
        ck_assert_int_lt(c.order[7], c.order[8]);
        ck_assert_double_ge(q.timing[11].start, q.timing[10].end);
        qrun_free(&q);
    }
    release(p);
}
END_TEST

START_TEST(test_failure_stops_all) {
    Plan *p = make_plan();
    Ctx c = {.fail_at = 1};
    Qrun q;
    ck_assert_int_eq(qrun_init(&q, p, exec_fn, &c), 0);
    ck_assert_int_eq(qrun_range(&q, 0, 12), -1);
    ck_assert_str_eq(q.err, "instruction 1 failed on purpose");
    /* Nothing that depends on 1 ran. */
    ck_assert_int_eq(q.done[2], 0);
    ck_assert_int_eq(q.done[3], 0);
    ck_assert_int_eq(q.done[11], 0);
    qrun_free(&q);
    release(p);
}
END_TEST

START_TEST(test_ranges) {
    Plan *p = make_plan();
    Ctx c = {.fail_at = -1};
    Qrun q;
    ck_assert_int_eq(qrun_init(&q, p, exec_fn, &c), 0);
    ck_assert_int_eq(qrun_range(&q, 0, 4), 0);
    ck_assert_int_eq(atomic_load(&c.clock), 4);
    /* Deps before the range count as done. */
    ck_assert_int_eq(qrun_range(&q, 4, 12), 0);
    ck_assert_int_eq(atomic_load(&c.clock), 12);
    ck_assert_int_eq(qrun_range(&q, 0, 13), -1);
    qrun_free(&q);
    release(p);
}
END_TEST

/* ---- pipelines and waiting ---- */

/* A fake engine for the nvme queue's pipeline: transfers end only when
 * progress is asked to wait, the most recently started first (the worst
 * order for a queue that must retire in program order). Every breach of
 * the contract is counted in bad. */
typedef struct PCtx {
    Qrun *q;
    int slot_instr[QRUN_PIPE_MAX]; /* the instruction in each slot, -1: free */
    int ended[QRUN_PIPE_MAX];
    int stack[64], nstack;         /* slots in flight, latest on top */
    int ran[16], inflight, peak, bad, fail_at;
    uint64_t gen;
} PCtx;

static int p_exec(void *ctx, uint32_t i, int worker, char *err, size_t n) {
    (void)worker, (void)err, (void)n;
    PCtx *c = ctx;
    c->ran[i]++;
    /* 7 (compute) waits for read 2 only: reads 0 and 1 must be done too (queue order) */
    if (i == 7 && (c->q->done[0] != c->q->gen || c->q->done[1] != c->q->gen)) c->bad++;
    return 0;
}

static int p_start(void *ctx, uint32_t i, int slot, int inflight, int worker, char *err, size_t n) {
    (void)worker, (void)err, (void)n;
    PCtx *c = ctx;
    if (inflight != c->inflight) c->bad++;
    if (c->q->plan->instrs[i].op != PI_NVME_READ) { /* not a transfer: alone */
        if (inflight) return QRUN_PIPE_ALONE;
        c->ran[i]++;
        return 0;
    }
    if (slot < 0 || slot >= QRUN_PIPE_MAX || c->slot_instr[slot] >= 0) {
        c->bad++;
        return -1;
    }
    for (int k = 0; k < QRUN_PIPE_MAX; k++) /* read 3 writes where read 1 wrote: never beside it */
        if (i == 3 && c->slot_instr[k] == 1 && !c->ended[k]) c->bad++;
    c->slot_instr[slot] = (int)i;
    c->stack[c->nstack++] = slot;
    if (++c->inflight > c->peak) c->peak = c->inflight;
    return 1;
}

static int p_progress(void *ctx, int wait, int worker, char *err, size_t n) {
    (void)worker, (void)err, (void)n;
    PCtx *c = ctx;
    if (wait && c->nstack > 0) c->ended[c->stack[--c->nstack]] = 1;
    return 0;
}

static int p_finished(void *ctx, int slot, int worker, char *err, size_t n) {
    (void)worker;
    PCtx *c = ctx;
    if (c->slot_instr[slot] < 0) {
        c->bad++;
        return -1;
    }
    if (!c->ended[slot]) return 0;
    int i = c->slot_instr[slot];
    c->slot_instr[slot] = -1;
    c->ended[slot] = 0;
    c->inflight--;
    c->ran[i]++;
    if (i == c->fail_at) {
        snprintf(err, n, "nvme: read %d failed on purpose", i);
        return -1;
    }
    return 1;
}

/* Six NVMe reads into pinned buffers (read 3 writes where read 1 wrote;
 * read 5 waits for an h2d, 6, that waits for read 4), a compute (7) that
 * waits for read 2 only, and a zero on the nvme queue (8) that is not a
 * transfer. */
static Plan *pipe_plan(void) {
    Plan *p = plan_new();
    static PlanInstr ins[9];
    static PlanOperand ops[18];
    static PlanBuffer bufs[8];
    static uint32_t deps[3];
    memset(ins, 0, sizeof ins);
    memset(ops, 0, sizeof ops);
    memset(bufs, 0, sizeof bufs);
    for (int b = 0; b < 6; b++) bufs[b] = (PlanBuffer){"stage", ARENA_PINNED, 0, -1, (uint64_t)b * 4096, 512};
    bufs[3].offset = 4096; /* the same block as buffer 1 */
    bufs[6] = (PlanBuffer){"home", ARENA_NVME, 0, -1, 0, 1 << 20};
    bufs[7] = (PlanBuffer){"gpu", ARENA_GPU, 0, -1, 0, 1 << 20};
    for (int i = 0; i < 6; i++) {
        ins[i] = (PlanInstr){.op = PI_NVME_READ, .queue = Q_NVME, .opnd = (uint32_t)(2 * i), .nopnd = 2};
        ops[2 * i] = (PlanOperand){6, PLAN_R, (uint64_t)i * 4096, 512};
        ops[2 * i + 1] = (PlanOperand){i, PLAN_W, 0, 512};
    }
    ins[6] = (PlanInstr){.op = PI_H2D, .queue = Q_H2D, .opnd = 12, .nopnd = 2, .dep = 0, .ndeps = 1};
    ops[12] = (PlanOperand){4, PLAN_R, 0, 512};
    ops[13] = (PlanOperand){7, PLAN_W, 0, 512};
    deps[0] = 4;
    deps[1] = 6;
    deps[2] = 2;
    ins[5].dep = 1;
    ins[5].ndeps = 1;
    ins[7] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .opnd = 14, .nopnd = 1, .dep = 2, .ndeps = 1};
    ops[14] = (PlanOperand){2, PLAN_R, 0, 512};
    ins[8] = (PlanInstr){.op = PI_ZERO, .queue = Q_NVME, .opnd = 15, .nopnd = 1};
    ops[15] = (PlanOperand){6, PLAN_W, 1 << 19, 4096};
    p->instrs = ins;
    p->ninstrs = 9;
    p->operands = ops;
    p->noperands = 16;
    p->buffers = bufs;
    p->nbuffers = 8;
    p->deps = deps;
    p->ndeps = 3;
    return p;
}

static void pipe_release(Plan *p) {
    p->instrs = NULL, p->ninstrs = 0, p->operands = NULL, p->noperands = 0, p->buffers = NULL, p->nbuffers = 0;
    p->deps = NULL, p->ndeps = 0;
    plan_free(p);
}

static void pctx_init(PCtx *c, Qrun *q, int fail_at) {
    memset(c, 0, sizeof *c);
    c->q = q;
    c->fail_at = fail_at;
    for (int k = 0; k < QRUN_PIPE_MAX; k++) c->slot_instr[k] = -1;
}

START_TEST(test_pipe) {
    Plan *p = pipe_plan();
    for (int rep = 0; rep < 20; rep++) {
        Qrun q;
        PCtx c;
        pctx_init(&c, &q, -1);
        ck_assert_int_eq(qrun_init(&q, p, p_exec, &c), 0);
        QrunPipe pipe = {p_start, p_progress, p_finished};
        qrun_set_pipe(&q, Q_NVME, &pipe);
        ck_assert_int_eq(qrun_range(&q, 0, 9), 0);
        ck_assert_int_eq(c.bad, 0);
        for (int i = 0; i < 9; i++) ck_assert_int_eq(c.ran[i], 1);
        for (int i = 0; i < 9; i++) ck_assert_uint_eq(q.done[i], q.gen);
        ck_assert_int_eq(c.inflight, 0);
        /* 0, 1, 2 in flight together (3 clashes with 1) */
        ck_assert_int_ge(q.peak[Q_NVME], 3);
        ck_assert_int_eq(c.peak, q.peak[Q_NVME]);
        ck_assert_uint_ge(q.overlapped[Q_NVME], 2);
        /* read 5 started after the h2d it waits for ended; the zero after every read ended */
        ck_assert_double_ge(q.timing[5].start, q.timing[6].end);
        for (int i = 0; i < 6; i++) ck_assert_double_ge(q.timing[8].start, q.timing[i].end);
        /* the busy shares of the queue's instructions add up to its busy time */
        double span = 0;
        int nv[7] = {0, 1, 2, 3, 4, 5, 8};
        for (int k = 0; k < 7; k++) span += q.timing[nv[k]].end - q.timing[nv[k]].start - q.timing[nv[k]].wait;
        ck_assert(span > 0 && span <= q.busy[Q_NVME] + 1e-9 && span >= q.busy[Q_NVME] - 1e-9);
        qrun_free(&q);
    }
    pipe_release(p);
}
END_TEST

/* A transfer that fails: the run fails with its message, nothing is left
 * in flight, nothing that waits for it ran, and no later read is done. */
START_TEST(test_pipe_failure) {
    Plan *p = pipe_plan();
    for (int fail = 0; fail < 6; fail++) {
        Qrun q;
        PCtx c;
        pctx_init(&c, &q, fail);
        ck_assert_int_eq(qrun_init(&q, p, p_exec, &c), 0);
        QrunPipe pipe = {p_start, p_progress, p_finished};
        qrun_set_pipe(&q, Q_NVME, &pipe);
        ck_assert_int_eq(qrun_range(&q, 0, 9), -1);
        char want[64];
        snprintf(want, sizeof want, "nvme: read %d failed on purpose", fail);
        ck_assert_str_eq(q.err, want);
        ck_assert_int_eq(c.inflight, 0);
        ck_assert_int_eq(c.bad, 0);
        for (int i = fail; i < 6; i++) ck_assert_uint_ne(q.done[i], q.gen);
        ck_assert_uint_ne(q.done[8], q.gen);
        if (fail <= 2) ck_assert_int_eq(c.ran[7], 0);
        if (fail == 4) ck_assert_int_eq(c.ran[6], 0);
        qrun_free(&q);
    }
    pipe_release(p);
}
END_TEST

/* A pipelined transfer whose start first waits for something else (the
 * CUDA backend waits there for the GPU work the transfer depends on) and
 * says so with qrun_add_wait: with nothing else in flight that wait is
 * neither the transfer's time nor the queue's busy time. */
typedef struct WPipe {
    Qrun *q;
    double t0, w;
    bool ended;
} WPipe;

static int w_start(void *ctx, uint32_t i, int slot, int inflight, int worker, char *err, size_t n) {
    (void)i, (void)slot, (void)inflight, (void)err, (void)n;
    WPipe *c = ctx;
    c->t0 = qrun_now(c->q);
    usleep(50000);
    c->w = qrun_now(c->q) - c->t0;
    qrun_add_wait(c->q, worker, c->w);
    return 1;
}

static int w_progress(void *ctx, int wait, int worker, char *err, size_t n) {
    (void)wait, (void)worker, (void)err, (void)n;
    ((WPipe *)ctx)->ended = true;
    return 0;
}

static int w_finished(void *ctx, int slot, int worker, char *err, size_t n) {
    (void)slot, (void)worker, (void)err, (void)n;
    return ((WPipe *)ctx)->ended ? 1 : 0;
}

START_TEST(test_pipe_wait_before_start) {
    Plan *p = pipe_plan();
    Qrun q;
    WPipe c = {&q, 0, 0, false};
    ck_assert_int_eq(qrun_init(&q, p, p_exec, &c), 0);
    QrunPipe pipe = {w_start, w_progress, w_finished};
    qrun_set_pipe(&q, Q_NVME, &pipe);
    ck_assert_int_eq(qrun_range(&q, 0, 1), 0);
    ck_assert(c.w >= 0.049);
    /* its span begins after the wait (counted from the start call, it would begin before c.t0) */
    ck_assert_msg(q.timing[0].start > c.t0 + 0.5 * c.w, "start %g, the call at %g waited %g", q.timing[0].start, c.t0, c.w);
    /* alone in flight, the queue was busy exactly its span */
    double span = q.timing[0].end - q.timing[0].start;
    ck_assert_msg(fabs(q.busy[Q_NVME] - span) < 1e-6, "busy %g, span %g", q.busy[Q_NVME], span);
    qrun_free(&q);
    pipe_release(p);
}
END_TEST

typedef struct WCtx {
    Qrun *q;
} WCtx;

static int waiting_fn(void *ctx, uint32_t i, int worker, char *err, size_t n) {
    (void)err, (void)n;
    WCtx *c = ctx;
    usleep(20000);
    if (i == 0) qrun_add_wait(c->q, worker, 0.015); /* 15 of its 20 ms were waiting */
    return 0;
}

START_TEST(test_wait_is_not_busy) {
    Plan *p = make_plan();
    Qrun q;
    WCtx c = {&q};
    ck_assert_int_eq(qrun_init(&q, p, waiting_fn, &c), 0);
    ck_assert_int_eq(qrun_range(&q, 0, 1), 0);
    ck_assert(q.timing[0].wait > 0.0149 && q.timing[0].wait < 0.0151);
    ck_assert(q.waited[Q_NVME] > 0.0149 && q.waited[Q_NVME] < 0.0151);
    double d = q.timing[0].end - q.timing[0].start;
    ck_assert(q.busy[Q_NVME] > d - 0.0151 && q.busy[Q_NVME] < d - 0.0149);
    qrun_free(&q);
    release(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("qrun");
    TCase *tc = tcase_create("qrun");
    tcase_add_test(tc, test_order);
    tcase_add_test(tc, test_failure_stops_all);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_pipe);
    tcase_add_test(tc, test_pipe_failure);
    tcase_add_test(tc, test_wait_is_not_busy);
    tcase_add_test(tc, test_pipe_wait_before_start);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
