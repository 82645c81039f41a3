/* blas_core: which OPENBLAS_CORETYPE replaces a core OpenBLAS fell back to
 * (a table of processors and cores), none replacing a core it detected by
 * model, and the CPUID reading against the compiler's own
 * __builtin_cpu_supports. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "blas_core.h"

static const BlasCpu avx512 = {.avx = true, .avx2 = true, .fma = true, .avx512f = true, .avx512bw = true,
                               .avx512vl = true, .avx512dq = true};
static const BlasCpu avx2 = {.avx = true, .avx2 = true, .fma = true};
static const BlasCpu avx_only = {.avx = true};
static const BlasCpu sse = {0};

static void eq(const char *got, const char *want) {
    if (!want) ck_assert_msg(got == NULL, "want no change, got %s", got);
    else ck_assert_msg(got && !strcmp(got, want), "want %s, got %s", want, got ? got : "(none)");
}

START_TEST(fallback_replaced) {
    eq(blas_core_better("Prescott", avx512), "SkylakeX");
    eq(blas_core_better("prescott", avx512), "SkylakeX");
    eq(blas_core_better("Core2", avx2), "Haswell");
    eq(blas_core_better("Nehalem", avx_only), "Sandybridge");
    eq(blas_core_better("Unknown", avx2), "Haswell");
    eq(blas_core_better(NULL, avx512), "SkylakeX");
    /* AVX-512 F alone (Knights Landing's) is not SkylakeX's set: AVX2's kernels */
    BlasCpu knl = avx2;
    knl.avx512f = true;
    eq(blas_core_better("Prescott", knl), "Haswell");
    /* nothing better to run */
    eq(blas_core_better("Prescott", sse), NULL);
}
END_TEST

START_TEST(detected_kept) {
    eq(blas_core_better("SkylakeX", avx512), NULL);
    eq(blas_core_better("Haswell", avx512), NULL); /* OpenBLAS's choice for a model it knows */
    eq(blas_core_better("Zen", avx2), NULL);
    eq(blas_core_better("Cooperlake", avx512), NULL);
    eq(blas_core_better("SapphireRapids", avx512), NULL);
}
END_TEST

START_TEST(cpuid_as_the_compiler_reads_it) {
    BlasCpu c = blas_cpu_detect();
#if defined(__x86_64__)
    __builtin_cpu_init();
    ck_assert_int_eq(c.avx, !!__builtin_cpu_supports("avx"));
    ck_assert_int_eq(c.avx2, !!__builtin_cpu_supports("avx2"));
    ck_assert_int_eq(c.fma, !!__builtin_cpu_supports("fma"));
    ck_assert_int_eq(c.avx512f, !!__builtin_cpu_supports("avx512f"));
    ck_assert_int_eq(c.avx512bw, !!__builtin_cpu_supports("avx512bw"));
    ck_assert_int_eq(c.avx512vl, !!__builtin_cpu_supports("avx512vl"));
    ck_assert_int_eq(c.avx512dq, !!__builtin_cpu_supports("avx512dq"));
#else
    ck_assert(!c.avx && !c.avx512f);
#endif
    ck_assert_ptr_nonnull(blas_core_name());
}
END_TEST

int main(void) {
    Suite *s = suite_create("blas_core");
    TCase *t = tcase_create("blas_core");
    tcase_add_test(t, fallback_replaced);
    tcase_add_test(t, detected_kept);
    tcase_add_test(t, cpuid_as_the_compiler_reads_it);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
