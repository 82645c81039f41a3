/* flops: the plan's FLOP count of a forward op from its operands' shapes,
 * worked out by hand (the rules of each family, attention's window; absent operands; an
 * unknown primitive). tests/unit/test_prim_flops.c counts graph ops. */
#include <check.h>
#include "flops.h"
#include "plan.h"
#include "vocab.h"

START_TEST(rules_by_family) {
    int64_t x[] = {6, 16}, w[] = {16, 32}, wt[] = {32, 16}, q[] = {2, 8, 16};
    FlopsOperand in[3] = {{2, x, 96}, {2, w, 512}, {0}};
    int64_t attr[PLAN_MAX_IATTR] = {0};
    ck_assert(flops_forward(PRIM_LINEAR, NULL, in, 2, 6 * 32) == 2.0 * 6 * 32 * 16);
    in[1] = (FlopsOperand){2, wt, 512};
    attr[IA_MATMUL_TRANSPOSE_B] = 1;
    ck_assert(flops_forward(PRIM_MATMUL, attr, in, 2, 6 * 32) == 2.0 * 6 * 32 * 16);
    ck_assert(flops_forward(PRIM_MATMUL, NULL, in, 2, 6 * 32) == 2.0 * 6 * 32 * 32); /* NULL: no transpose */
    /* a linear without its weight counts its outputs */
    ck_assert(flops_forward(PRIM_LINEAR, NULL, in, 1, 6 * 32) == 6 * 32);
    FlopsOperand qs[3] = {{3, q, 256}, {3, q, 256}, {3, q, 256}};
    ck_assert(flops_forward(PRIM_ATTENTION, NULL, qs, 3, 256) == 2.0 * 256 * 8);
    /* a window of 3 of T = 8: 1 + 2 + 3 * 6 = 21 (query, key) pairs a row, 4 flops a pair a dim; as long as T: causal */
    int64_t wa[PLAN_MAX_IATTR] = {0};
    wa[IA_ATTENTION_WINDOW] = 3;
    ck_assert(flops_forward(PRIM_ATTENTION, wa, qs, 3, 256) == 4.0 * 2 * 16 * 21);
    wa[IA_ATTENTION_WINDOW] = 8;
    ck_assert(flops_forward(PRIM_ATTENTION, wa, qs, 3, 256) == 2.0 * 256 * 8);
    ck_assert(flops_forward(PRIM_CROSS_ENTROPY, NULL, in, 2, 1) == 5.0 * 96);
    ck_assert(flops_forward(PRIM_RMSNORM, NULL, in, 1, 96) == 5.0 * 96);
    ck_assert(flops_forward(PRIM_COUNT, NULL, in, 1, 96) == 5.0 * 96); /* a forged plan's code */
}
END_TEST

int main(void) {
    Suite *s = suite_create("flops");
    TCase *t = tcase_create("rules");
    tcase_add_test(t, rules_by_family);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
