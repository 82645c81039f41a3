#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan.h"
#include "plan_fixture_plan.h"
#include "verify.h"

static char msgs[8192];

/* a fresh, valid plan to break (4 ranks, parameters fetched from the CPU) */
static Plan *fresh(void) {
    Plan *p = fx_plan("host", 4, 2, 2, TIER_CPU);
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "the unbroken plan fails: %s", msgs);
    return p;
}

static void expect(Plan *p, const char *what) {
    int n = verify_plan(p, msgs, sizeof msgs);
    ck_assert_msg(n > 0, "not caught: %s", what);
    ck_assert_msg(strstr(msgs, what) != NULL, "expected \"%s\" among:\n%s", what, msgs);
    plan_free(p);
}

static int find_op(const Plan *p, int op, int from) {
    for (uint32_t i = (uint32_t)from; i < p->ninstrs; i++)
        if (p->instrs[i].op == op) return (int)i;
    return -1;
}

START_TEST(valid_plans_on_every_target) {
    for (int k = 0; k < target_nbuiltins; k++)
        for (int tier = -1; tier < PLAN_NTIERS; tier++) {
            Plan *p = fx_plan(target_builtin_names[k], 0, 2, 0, tier);
            int n = verify_plan(p, msgs, sizeof msgs);
            ck_assert_msg(n == 0, "%s params=%d: %s", target_builtin_names[k], tier, msgs);
            plan_free(p);
        }
}
END_TEST

START_TEST(overlapping_buffers) {
    Plan *p = fresh();
    /* a kernel's output moved onto its live input */
    int k = find_op(p, PI_KERNEL, 0);
    for (; k >= 0; k = find_op(p, PI_KERNEL, k + 1)) {
        const PlanInstr *s = &p->instrs[k];
        const PlanOperand *in = &p->operands[s->opnd], *out = &p->operands[s->opnd + s->nopnd - 1];
        if (in->buffer >= 0 && out->buffer >= 0 && !(p->buffers[in->buffer].flags & PLAN_BUF_PERSISTENT) &&
            p->buffers[in->buffer].arena == ARENA_GPU && p->buffers[out->buffer].arena == ARENA_GPU) {
            p->buffers[out->buffer].offset = p->buffers[in->buffer].offset;
            break;
        }
    }
    ck_assert_int_ge(k, 0);
    expect(p, "overlap in arena gpu while both are live");
}
END_TEST

START_TEST(missing_fetch) {
    Plan *p = fresh();
    int ag = find_op(p, PI_ALLGATHER, 0);
    ck_assert_int_ge(ag, 0);
    /* the all-gather no longer writes what the kernel reads */
    p->operands[p->instrs[ag].opnd + 1].mode = PLAN_R;
    expect(p, "before anything writes it (missing fetch?)");
}
END_TEST

START_TEST(dependency_cycle) {
    Plan *p = fresh();
    int k = find_op(p, PI_KERNEL, 0);
    while (k >= 0 && p->instrs[k].ndeps == 0) k = find_op(p, PI_KERNEL, k + 1);
    ck_assert_int_ge(k, 0);
    p->deps[p->instrs[k].dep] = p->ninstrs - 1; /* waits for the step's end, which waits for it */
    expect(p, "dependency cycle:");
}
END_TEST

START_TEST(over_capacity) {
    Plan *p = fresh();
    p->arenas[ARENA_GPU].capacity = p->arenas[ARENA_GPU].size - 1;
    expect(p, "arena gpu uses");
    p = fresh();
    p->target.cpu_memory = 1 << 20;
    expect(p, "more than the rank's share of host memory");
    p = fresh();
    p->buffers[p->nbuffers - 1].offset = p->arenas[p->buffers[p->nbuffers - 1].arena].size;
    expect(p, "lies outside arena");
}
END_TEST

START_TEST(race) {
    Plan *p = fresh();
    /* a kernel that no longer waits for the all-gather of its weight */
    int k = find_op(p, PI_KERNEL, 0);
    for (; k >= 0; k = find_op(p, PI_KERNEL, k + 1)) {
        bool waits_comm = false;
        for (uint32_t d = 0; d < p->instrs[k].ndeps; d++) waits_comm |= p->instrs[p->deps[p->instrs[k].dep + d]].queue == Q_COMM;
        if (waits_comm) break;
    }
    ck_assert_int_ge(k, 0);
    p->instrs[k].ndeps = 0;
    expect(p, "unordered with instruction");
}
END_TEST

START_TEST(shards) {
    Plan *p = fresh();
    int a = -1, b = -1;
    for (uint32_t i = 0; i < p->nshards; i++)
        if (p->tensors[p->shards[i].tensor].cls == TC_PARAM) {
            if (a < 0) a = (int)i;
            else if (b < 0) b = (int)i;
        }
    p->shards[b].tensor = p->shards[a].tensor;
    expect(p, "has 2 shards per rank, expected exactly one");
    p = fresh();
    for (uint32_t i = 0; i < p->nshards; i++)
        if (p->shards[i].partitioned) {
            p->shards[i].tile_shard /= 8;
            p->shards[i].bytes /= 8;
            break;
        }
    expect(p, "ranks x");
    p = fresh();
    p->shards[0].home = TIER_NVME;
    expect(p, "has home nvme but its buffer is in arena");
}
END_TEST

START_TEST(ranges_and_queues) {
    Plan *p = fresh();
    p->operands[3].buffer = (int32_t)p->nbuffers + 5;
    expect(p, "out of range");
    p = fresh();
    int k = find_op(p, PI_KERNEL, 0);
    p->instrs[k].queue = Q_H2D;
    expect(p, "is on queue h2d, its opcode runs on compute");
    p = fresh();
    p->operands[p->instrs[1].opnd].bytes = 1ull << 40;
    expect(p, "which has");
}
END_TEST

START_TEST(layouts) {
    Plan *p = fresh();
    int h = find_op(p, PI_ALLGATHER, 0);
    p->operands[p->instrs[h].opnd + 1].bytes *= 8;
    expect(p, "(allgather): 4 ranks x");
    p = fresh();
    int k = find_op(p, PI_KERNEL, 0);
    p->instrs[k].nopnd--;
    expect(p, "(kernel) has");
    p = fresh();
    int z = find_op(p, PI_ZERO, 0);
    p->operands[p->instrs[z].opnd].mode = PLAN_R;
    expect(p, "operand 0 is read, its opcode writes it");
}
END_TEST

START_TEST(message_cap) {
    Plan *p = fresh();
    for (uint32_t i = 0; i < p->nbuffers; i++) p->buffers[i].offset = 0;
    char small[64];
    int n = verify_plan(p, small, sizeof small);
    ck_assert_int_ge(n, 20);
    ck_assert_uint_lt(strlen(small), sizeof small);
    plan_free(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("verify");
    TCase *t = tcase_create("verify");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, valid_plans_on_every_target);
    tcase_add_test(t, overlapping_buffers);
    tcase_add_test(t, missing_fetch);
    tcase_add_test(t, dependency_cycle);
    tcase_add_test(t, over_capacity);
    tcase_add_test(t, race);
    tcase_add_test(t, shards);
    tcase_add_test(t, ranges_and_queues);
    tcase_add_test(t, layouts);
    tcase_add_test(t, message_cap);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
