/* initrng: values are a function of (seed, name, index) only; the stream
 * matches the documented SplitMix64/FNV-1a construction; moments are right. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "initrng.h"

START_TEST(test_known_constants) {
    /* FNV-1a 64 reference values (Fowler/Noll/Vo test vectors). */
    ck_assert_uint_eq(init_fnv1a64(""), 0xcbf29ce484222325ull);
    ck_assert_uint_eq(init_fnv1a64("a"), 0xaf63dc4c8601ec8cull);
    ck_assert_uint_eq(init_fnv1a64("foobar"), 0x85944171f73967e8ull);
    /* SplitMix64 seeded with 1234567: the reference generator's first outputs
     * (Vigna's splitmix64.c), i.e. init_bits(1234567, c) for c = 0, 1, 2. */
    ck_assert_uint_eq(init_bits(1234567, 0), 6457827717110365317ull);
    ck_assert_uint_eq(init_bits(1234567, 1), 3203168211198807973ull);
    ck_assert_uint_eq(init_bits(1234567, 2), 9817491932198370423ull);
}
END_TEST

/* The documented formula, written out independently of initrng.c. */
static double doc_normal(uint64_t seed, const char *name, int64_t i) {
    uint64_t h = 14695981039346656037ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    uint64_t z = seed ^ h, key;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    key = z ^ (z >> 31);
    double u[2];
    for (int k = 0; k < 2; k++) {
        uint64_t x = key + (uint64_t)(2 * i + k + 1) * 0x9E3779B97F4A7C15ull;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        x ^= x >> 31;
        u[k] = (double)(x >> 11) / 9007199254740992.0;
    }
    return sqrt(-2 * log(1 - u[0])) * cos(6.283185307179586 * u[1]);
}

START_TEST(test_matches_doc_formula) {
    float v[64];
    init_fill_f32(v, 1000, 64, 42, "blocks.3.attn.wqkv", INIT_NORMAL, 0.02);
    for (int i = 0; i < 64; i++) ck_assert_float_eq(v[i], (float)(0.02 * doc_normal(42, "blocks.3.attn.wqkv", 1000 + i)));
}
END_TEST

START_TEST(test_regression_values) {
    /* Fixed values for a fixed key: a change here breaks every saved run. */
    float v[4], u[2];
    init_fill_f32(v, 0, 4, 1, "wte", INIT_NORMAL, 1.0);
    init_fill_f32(u, 0, 2, 1, "wte", INIT_UNIFORM, 1.0);
    static const float want_v[4] = {0.847394824f, 0.877424061f, 0.125736773f, 0.565151334f};
    static const float want_u[2] = {-0.233352214f, -0.830670118f};
    for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(v[i], want_v[i], 1e-6f);
    for (int i = 0; i < 2; i++) ck_assert_float_eq_tol(u[i], want_u[i], 1e-6f);
}
END_TEST

START_TEST(test_slice_equals_whole) {
    enum { N = 3001 };
    static float whole[N], part[N];
    InitKind kinds[2] = {INIT_NORMAL, INIT_UNIFORM};
    for (int k = 0; k < 2; k++) {
        init_fill_f32(whole, 0, N, 7, "h.0.mlp.w1", kinds[k], 0.5);
        /* odd-sized pieces, filled in reverse order */
        int64_t cuts[] = {0, 1, 17, 1000, 1001, 2999, N};
        for (int c = 5; c >= 0; c--)
            init_fill_f32(part + cuts[c], cuts[c], cuts[c + 1] - cuts[c], 7, "h.0.mlp.w1", kinds[k], 0.5);
        ck_assert_int_eq(memcmp(whole, part, sizeof whole), 0);
    }
}
END_TEST

START_TEST(test_streams_differ) {
    float a[100], b[100], c[100];
    init_fill_f32(a, 0, 100, 7, "layer.w", INIT_NORMAL, 1);
    init_fill_f32(b, 0, 100, 7, "layer.b", INIT_NORMAL, 1);
    init_fill_f32(c, 0, 100, 8, "layer.w", INIT_NORMAL, 1);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 100; i++) {
        same_ab += a[i] == b[i];
        same_ac += a[i] == c[i];
    }
    ck_assert_int_eq(same_ab, 0);
    ck_assert_int_eq(same_ac, 0);
}
END_TEST

START_TEST(test_moments) {
    enum { N = 1000000 };
    float *x = malloc(sizeof(float) * N);
    ck_assert_ptr_nonnull(x);
    init_fill_f32(x, 0, N, 3, "big", INIT_NORMAL, 0.02);
    double s = 0, ss = 0, s4 = 0;
    for (int i = 0; i < N; i++) {
        s += x[i];
        ss += (double)x[i] * x[i];
        s4 += pow(x[i] / 0.02, 4);
    }
    double mean = s / N, sd = sqrt(ss / N - mean * mean);
    /* standard errors: mean 0.02/1000, sd 0.02/1414, kurtosis ~0.0025; 5 sigma */
    ck_assert_double_le(fabs(mean), 5 * 0.02 / 1000);
    ck_assert_double_le(fabs(sd - 0.02), 5 * 0.02 / 1414);
    ck_assert_double_le(fabs(s4 / N - 3.0), 0.05);
    init_fill_f32(x, 0, N, 3, "big", INIT_UNIFORM, 0.5);
    s = ss = 0;
    float lo = 1, hi = -1;
    for (int i = 0; i < N; i++) {
        s += x[i];
        ss += (double)x[i] * x[i];
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    /* U(-0.5, 0.5): mean 0 (se 2.9e-4), E x^2 = 1/12 (se 7.5e-5) */
    ck_assert_double_le(fabs(s / N), 5 * 2.9e-4);
    ck_assert_double_le(fabs(ss / N - 1.0 / 12), 5 * 7.5e-5);
    ck_assert(lo >= -0.5f && hi <= 0.5f && lo < -0.499f && hi > 0.499f);
    free(x);
}
END_TEST

START_TEST(test_constants) {
    float x[5] = {9, 9, 9, 9, 9};
    init_fill_f32(x, 3, 4, 1, "g", INIT_ONES, 0);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(x[i], 1.0f);
    ck_assert_float_eq(x[4], 9.0f);
    init_fill_f32(x, 0, 5, 1, "b", INIT_ZEROS, 0);
    for (int i = 0; i < 5; i++) ck_assert_float_eq(x[i], 0.0f);
    init_fill_f32(x, 0, 0, 1, "b", INIT_ONES, 0); /* n = 0 writes nothing */
    ck_assert_float_eq(x[0], 0.0f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("initrng");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_known_constants);
    tcase_add_test(tc, test_matches_doc_formula);
    tcase_add_test(tc, test_regression_values);
    tcase_add_test(tc, test_slice_equals_whole);
    tcase_add_test(tc, test_streams_differ);
    tcase_add_test(tc, test_moments);
    tcase_add_test(tc, test_constants);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
