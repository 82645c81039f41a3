/* errorf: the message formatted into the caller's buffer (cut to its
 * size), -1 returned, nothing written without a buffer; verrorf the same
 * from a va_list, as a module's own error function uses it to add a
 * prefix of its own. */
#include <check.h>
#include <stdarg.h>
#include <string.h>
#include "errorf.h"

/* A module's error function that adds a prefix, as nvme.c's adds fields. */
static int prefixed(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int prefixed(char *err, size_t n, const char *fmt, ...) {
    if (n < 6) return -1;
    memcpy(err, "mod: ", 5);
    va_list ap;
    va_start(ap, fmt);
    int rc = verrorf(err + 5, n - 5, fmt, ap);
    va_end(ap);
    return rc;
}

START_TEST(formats) {
    char err[64] = "";
    ck_assert_int_eq(errorf(err, sizeof err, "step %d of %s", 3, "run"), -1);
    ck_assert_str_eq(err, "step 3 of run");
    ck_assert_int_eq(prefixed(err, sizeof err, "%s at %u", "read", 4096u), -1);
    ck_assert_str_eq(err, "mod: read at 4096");
}
END_TEST

START_TEST(cut_and_absent) {
    char err[8] = "xxxxxxx";
    ck_assert_int_eq(errorf(err, sizeof err, "%s", "a long message"), -1);
    ck_assert_str_eq(err, "a long ");
    ck_assert_int_eq(errorf(NULL, 16, "%d", 1), -1);
    char keep[4] = "abc";
    ck_assert_int_eq(errorf(keep, 0, "%d", 1), -1);
    ck_assert_str_eq(keep, "abc");
}
END_TEST

int main(void) {
    Suite *s = suite_create("errorf");
    TCase *t = tcase_create("errorf");
    tcase_add_test(t, formats);
    tcase_add_test(t, cut_and_absent);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
