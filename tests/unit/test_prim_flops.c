/* prim_flops: the FLOPs the planner counts per op, worked out by hand:
 * 2 K per output element for linear and matmul (K from the weight, its
 * columns with transpose_b), causal attention's 2 B T^2 D, 5 per logit for
 * cross_entropy, 5 per output element for every other family, a backward
 * op twice its forward. */
#include <check.h>
#include "arena.h"
#include "prim_flops.h"

static Arena A;
static Graph G;

static int tensor(int rank, int64_t d0, int64_t d1, int64_t d2) {
    int64_t dims[3] = {d0, d1, d2};
    return graph_add_tensor(&G, NULL, DT_F32, rank, dims, TC_ACT);
}

static GOp op(PrimId p, int nin, int a, int b, int c, int y) {
    GOp o = {.kind = OP_FWD, .prim = p, .nin = nin, .nout = 1, .in = {a, b, c}, .out = {y}, .fwd = -1, .segment = -1};
    return o;
}

static void setup(void) {
    arena_init(&A);
    graph_init(&G, &A);
}

static void teardown(void) { arena_free(&A); }

START_TEST(gemm_counts_two_k_per_output) {
    int x = tensor(3, 2, 8, 16), w = tensor(2, 16, 32, 0), y = tensor(3, 2, 8, 32);
    GOp lin = op(PRIM_LINEAR, 2, x, w, -1, y);
    ck_assert(prim_flops(&G, &lin) == 2.0 * (2 * 8 * 32) * 16);
    /* matmul with transpose_b: w is [N, K] = [16, 32]; K is its columns */
    int wt = tensor(2, 32, 16, 0), y2 = tensor(3, 2, 8, 32);
    GOp mm = op(PRIM_MATMUL, 2, x, wt, -1, y2);
    mm.iattr[IA_MATMUL_TRANSPOSE_B] = 1;
    ck_assert(prim_flops(&G, &mm) == 2.0 * (2 * 8 * 32) * 16);
    mm.iattr[IA_MATMUL_TRANSPOSE_B] = 0; /* without it the rows: 32 */
    ck_assert(prim_flops(&G, &mm) == 2.0 * (2 * 8 * 32) * 32);
}
END_TEST

START_TEST(attention_and_xent) {
    int q = tensor(3, 2, 8, 16), y = tensor(3, 2, 8, 16);
    GOp at = op(PRIM_ATTENTION, 3, q, q, q, y);
    ck_assert(prim_flops(&G, &at) == 2.0 * (2 * 8 * 16) * 8);
    int logits = tensor(2, 8, 100, 0), t = tensor(1, 8, 0, 0), loss = tensor(0, 0, 0, 0);
    GOp xe = op(PRIM_CROSS_ENTROPY, 2, logits, t, -1, loss);
    ck_assert(prim_flops(&G, &xe) == 5.0 * 800);
}
END_TEST

START_TEST(elementwise_and_backward) {
    int x = tensor(2, 4, 10, 0), y = tensor(2, 4, 10, 0);
    PrimId five[] = {PRIM_ADD, PRIM_LAYERNORM, PRIM_GELU, PRIM_ROPE, PRIM_SCALE, PRIM_EMBEDDING};
    for (size_t i = 0; i < sizeof five / sizeof *five; i++) {
        GOp o = op(five[i], 1, x, -1, -1, y);
        ck_assert(prim_flops(&G, &o) == 5.0 * 40);
    }
    int w = tensor(2, 10, 6, 0), z = tensor(2, 4, 6, 0);
    GOp f = op(PRIM_LINEAR, 2, x, w, -1, z);
    int fi = graph_add_op(&G, &f);
    GOp b = {.kind = OP_BWD, .prim = PRIM_LINEAR, .nin = 0, .nout = 0, .fwd = fi, .segment = -1};
    ck_assert(prim_flops(&G, &b) == 2 * (2.0 * 24 * 10));
}
END_TEST

int main(void) {
    Suite *s = suite_create("prim_flops");
    TCase *t = tcase_create("counts");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, gemm_counts_two_k_per_output);
    tcase_add_test(t, attention_and_xent);
    tcase_add_test(t, elementwise_and_backward);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
