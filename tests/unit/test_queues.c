/* queues: dependencies are honoured across queues, a failure stops every
 * queue without a hang, and ranges run independently. */
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

int main(void) {
    Suite *s = suite_create("queues");
    TCase *tc = tcase_create("queues");
    tcase_add_test(tc, test_order);
    tcase_add_test(tc, test_failure_stops_all);
    tcase_add_test(tc, test_ranges);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
