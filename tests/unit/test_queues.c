/* queues: dependencies are honoured across queues, a failure stops every
 * queue without a hang, ranges run independently, a queue with a batch
 * function runs its ready instructions together (never two that touch the
 * same bytes where one writes, never one whose dependencies have not
 * ended), and waiting noted by an instruction is not its queue's busy time. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "queues.h"

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

/* ---- batches and waiting ---- */

typedef struct BCtx {
    int calls, sizes[16], first[16];
    int ran[16];
} BCtx;

static int single_fn(void *ctx, uint32_t i, int worker, char *err, size_t n) {
    (void)worker, (void)err, (void)n;
    BCtx *c = ctx;
    c->ran[i]++;
    return 0;
}

static int batch_fn(void *ctx, const uint32_t *idx, int n, int worker, char *err, size_t errlen) {
    (void)worker, (void)err, (void)errlen;
    BCtx *c = ctx;
    c->sizes[c->calls] = n;
    c->first[c->calls++] = (int)idx[0];
    for (int k = 0; k < n; k++) c->ran[idx[k]]++;
    return 0;
}

/* Six NVMe reads into pinned buffers; read 3 writes where read 1 wrote (it
 * must not join 1's batch), read 5 waits for an h2d (6) that waits for 4. */
START_TEST(test_batches) {
    Plan *p = plan_new();
    static PlanInstr ins[7];
    static PlanOperand ops[14];
    static PlanBuffer bufs[8];
    static uint32_t deps[2];
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
    /* 6: an h2d after read 4; read 5 (index 5) waits for it */
    ins[6] = (PlanInstr){.op = PI_H2D, .queue = Q_H2D, .opnd = 12, .nopnd = 2, .dep = 0, .ndeps = 1};
    ops[12] = (PlanOperand){4, PLAN_R, 0, 512};
    ops[13] = (PlanOperand){7, PLAN_W, 0, 512};
    deps[0] = 4;
    deps[1] = 6;
    ins[5].dep = 1;
    ins[5].ndeps = 1;
    p->instrs = ins;
    p->ninstrs = 7;
    p->operands = ops;
    p->noperands = 14;
    p->buffers = bufs;
    p->nbuffers = 8;
    p->deps = deps;
    p->ndeps = 2;
    Qrun q;
    BCtx c;
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(qrun_init(&q, p, single_fn, &c), 0);
    qrun_set_batch(&q, Q_NVME, batch_fn);
    ck_assert_int_eq(qrun_range(&q, 0, 7), 0);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(c.ran[i], 1);
    /* 0, 1, 2 together (3 clashes with 1); then 3 and 4; then 5 alone, after the h2d */
    ck_assert_int_eq(c.calls, 2);
    ck_assert_int_eq(c.first[0], 0);
    ck_assert_int_eq(c.sizes[0], 3);
    ck_assert_int_eq(c.first[1], 3);
    ck_assert_int_eq(c.sizes[1], 2);
    ck_assert_uint_eq(q.batches[Q_NVME], 2);
    ck_assert_uint_eq(q.batched[Q_NVME], 5);
    /* a batch's members share its span; their busy shares add up to it */
    ck_assert(q.timing[0].start == q.timing[2].start && q.timing[0].end == q.timing[2].end);
    double span = 0;
    for (int i = 0; i < 6; i++) span += q.timing[i].end - q.timing[i].start - q.timing[i].wait;
    ck_assert(span > 0 && span <= q.busy[Q_NVME] + 1e-9 && span >= q.busy[Q_NVME] - 1e-9);
    qrun_free(&q);
    p->instrs = NULL, p->ninstrs = 0, p->operands = NULL, p->noperands = 0, p->buffers = NULL, p->nbuffers = 0;
    p->deps = NULL, p->ndeps = 0;
    plan_free(p);
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
    Suite *s = suite_create("queues");
    TCase *tc = tcase_create("queues");
    tcase_add_test(tc, test_order);
    tcase_add_test(tc, test_failure_stops_all);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_batches);
    tcase_add_test(tc, test_wait_is_not_busy);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
