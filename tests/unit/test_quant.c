/* quant: NF4 and int8 blocks of 64 (runtime/hostk/quant.h). Checked by
 * hand: the sizes, bitsandbytes' levels and nibble order (the even element
 * high), the boundaries at the midpoints (a value on one takes the lower
 * level), zero blocks, int8's rounding, a short last block, decoding a run
 * of blocks from the middle of a tensor, and the error bound of each form
 * on random data. tests/e2e/quant_codec.sh checks the same bytes against a
 * numpy reference. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "quant.h"

START_TEST(sizes_and_names) {
    ck_assert_uint_eq(quant_block_bytes(QUANT_NF4), 36);
    ck_assert_uint_eq(quant_block_bytes(QUANT_INT8), 68);
    ck_assert_uint_eq(quant_bytes(QUANT_NF4, 64), 36);
    ck_assert_uint_eq(quant_bytes(QUANT_NF4, 65), 72);
    ck_assert_uint_eq(quant_bytes(QUANT_INT8, 4096), 64 * 68);
    ck_assert_uint_eq(quant_bytes(QUANT_NONE, 64), 0);
    ck_assert_int_eq(quant_parse("nf4", 3), QUANT_NF4);
    ck_assert_int_eq(quant_parse("int8", 4), QUANT_INT8);
    ck_assert_int_eq(quant_parse("none", 4), QUANT_NONE);
    ck_assert_int_eq(quant_parse("fp4", 3), -1);
    ck_assert_str_eq(quant_name(QUANT_NF4), "nf4");
    ck_assert_float_eq(quant_nf4_levels[7], 0.0f);
    ck_assert_float_eq(quant_nf4_levels[0], -1.0f);
    ck_assert_float_eq(quant_nf4_levels[15], 1.0f);
}
END_TEST

/* Every level times an absmax of 2 (exact in f32) encodes to its own index
 * and decodes to itself; bytes hold (even << 4 | odd). */
START_TEST(nf4_levels_and_nibbles) {
    float x[64], y[64];
    int c[64];
    for (int i = 0; i < 64; i++) c[i] = (i * 7 + 3) % 16; /* every level; 15 (the absmax, 2) at i = 4 */
    for (int i = 0; i < 64; i++) x[i] = 2.0f * quant_nf4_levels[c[i]];
    uint8_t q[36];
    quant_encode(QUANT_NF4, x, 64, q);
    for (int i = 0; i < 32; i++) ck_assert_int_eq(q[i], c[2 * i] << 4 | c[2 * i + 1]);
    float absmax;
    memcpy(&absmax, q + 32, 4);
    ck_assert_float_eq(absmax, 2.0f);
    quant_decode(QUANT_NF4, q, 64, y);
    for (int i = 0; i < 64; i++) ck_assert_float_eq(y[i], x[i]);
}
END_TEST

/* With absmax 1, the midpoint of levels 8 and 9 gives 8, the next float up 9. */
START_TEST(nf4_boundaries) {
    float mid = (float)(((double)quant_nf4_levels[8] + (double)quant_nf4_levels[9]) / 2.0);
    float x[64] = {1.0f, mid, nextafterf(mid, 1.0f), -1.0f, -0.0f, 0.04f, 0.0397f};
    uint8_t q[36];
    quant_encode(QUANT_NF4, x, 64, q);
    ck_assert_int_eq(q[0], 15 << 4 | 8);
    ck_assert_int_eq(q[1], 9 << 4 | 0);
    ck_assert_int_eq(q[2], 7 << 4 | 8); /* 0.04 is above the midpoint 0.03979 of 0 and 0.0796 */
    ck_assert_int_eq(q[3], 7 << 4 | 7);
}
END_TEST

START_TEST(zero_block) {
    float x[64] = {0}, y[64];
    uint8_t q[68];
    quant_encode(QUANT_NF4, x, 64, q);
    for (int i = 0; i < 32; i++) ck_assert_int_eq(q[i], 0x77);
    quant_decode(QUANT_NF4, q, 64, y);
    for (int i = 0; i < 64; i++) ck_assert(y[i] == 0.0f);
    quant_encode(QUANT_INT8, x, 64, q);
    for (int i = 0; i < 64; i++) ck_assert_int_eq(q[i], 0);
}
END_TEST

/* absmax 127: the scale is 1, so q = rint(x), half to even; decode q * 1. */
START_TEST(int8_rounding) {
    float x[64] = {127.0f, 2.5f, 3.5f, -2.5f, -127.0f, 0.49f, 126.6f}, y[64];
    uint8_t q[68];
    quant_encode(QUANT_INT8, x, 64, q);
    int8_t want[7] = {127, 2, 4, -2, -127, 0, 127};
    for (int i = 0; i < 7; i++) ck_assert_int_eq((int8_t)q[i], want[i]);
    quant_decode(QUANT_INT8, q, 64, y);
    for (int i = 0; i < 7; i++) ck_assert_float_eq(y[i], (float)want[i]);
}
END_TEST

/* 70 elements: two blocks, the second of 6 padded with zero codes. */
START_TEST(short_last_block) {
    float x[70], y[70];
    for (int i = 0; i < 70; i++) x[i] = (float)(i % 11) - 5.0f;
    uint8_t q[72];
    memset(q, 0xee, sizeof q);
    quant_encode(QUANT_NF4, x, 70, q);
    for (int i = 36 + 3; i < 36 + 32; i++) ck_assert_int_eq(q[i], 0x77);
    float absmax;
    memcpy(&absmax, q + 36 + 32, 4);
    ck_assert_float_eq(absmax, 5.0f);
    quant_decode(QUANT_NF4, q, 70, y);
    for (int i = 0; i < 70; i++) ck_assert(fabsf(y[i] - x[i]) <= 0.1521f * 5.0f);
}
END_TEST

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((float)(*s >> 8) / 16777216.0f - 0.5f) * 0.2f;
}

/* Random blocks: NF4 within half the widest gap between levels (0.16) of
 * absmax, int8 within half a step (absmax / 254, with f32's slack); blocks
 * 3.. decoded from their own bytes equal the whole tensor's decode. */
START_TEST(error_bounds_and_ranges) {
    enum { N = 64 * 8 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *z = malloc(N * sizeof *z);
    uint8_t *q = malloc(quant_bytes(QUANT_INT8, N));
    unsigned s = 7;
    for (int i = 0; i < N; i++) x[i] = frand(&s) * (float)(1 + i / 64);
    for (int k = QUANT_NF4; k <= QUANT_INT8; k++) {
        quant_encode((QuantKind)k, x, N, q);
        quant_decode((QuantKind)k, q, N, y);
        for (int b = 0; b < N / 64; b++) {
            float m = 0;
            for (int i = 0; i < 64; i++) m = fmaxf(m, fabsf(x[b * 64 + i]));
            float tol = k == QUANT_NF4 ? 0.1603f * m : m / 254.0f * 1.0001f;
            for (int i = 0; i < 64; i++) ck_assert_msg(fabsf(y[b * 64 + i] - x[b * 64 + i]) <= tol, "kind %d block %d", k, b);
        }
        quant_decode((QuantKind)k, q + 3 * quant_block_bytes((QuantKind)k), N - 3 * 64, z);
        ck_assert(!memcmp(z, y + 3 * 64, (N - 3 * 64) * sizeof *z));
    }
    free(x);
    free(y);
    free(z);
    free(q);
}
END_TEST

int main(void) {
    Suite *s = suite_create("quant");
    TCase *t = tcase_create("quant");
    tcase_add_test(t, sizes_and_names);
    tcase_add_test(t, nf4_levels_and_nibbles);
    tcase_add_test(t, nf4_boundaries);
    tcase_add_test(t, zero_block);
    tcase_add_test(t, int8_rounding);
    tcase_add_test(t, short_last_block);
    tcase_add_test(t, error_bounds_and_ranges);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
