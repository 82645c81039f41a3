/* outpath: the paths a run writes at its end, checked before step 1:
 * parent directories made, an existing file refused where asked, a
 * directory where a file is named refused, a parent that cannot take a
 * file named; and the free space of each file system against the sum of
 * what goes there. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "outpath.h"

static char g_dir[256];

static void setup(void) {
    const char *b = getenv("ZINF_BUILD");
    snprintf(g_dir, sizeof g_dir, "%s/tmp-test-outpath-%d", b ? b : "/tmp", (int)getpid());
    mkdir(g_dir, 0755);
}
static void teardown(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) {}
}

START_TEST(test_file_parents_made) {
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/a/b/m.safetensors", g_dir);
    ck_assert_msg(outpath_prepare_file("--export", path, true, err, sizeof err) == 0, "%s", err);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/a/b", g_dir);
    struct stat st;
    ck_assert(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    ck_assert(access(path, F_OK) != 0); /* checked, not created */
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(outpath_prepare_file("--export", path, true, err, sizeof err), -1);
    char want[700];
    snprintf(want, sizeof want, "--export %s already exists: zinfrun does not write over it (remove it or choose another name)", path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(outpath_prepare_file("--trace", path, false, err, sizeof err), 0); /* a trace may be rewritten */
}
END_TEST

START_TEST(test_refusals) {
    char path[512], err[1024], want[1200];
    ck_assert_int_eq(outpath_prepare_file("--trace", g_dir, false, err, sizeof err), -1);
    snprintf(want, sizeof want, "--trace %s is a directory: --trace names a file", g_dir);
    ck_assert_str_eq(err, want);
    snprintf(path, sizeof path, "%s/file", g_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    char under[600];
    snprintf(under, sizeof under, "%s/out", path);
    ck_assert_int_eq(outpath_prepare_dir("--export-hf", under, err, sizeof err), -1);
    snprintf(want, sizeof want, "--export-hf %s: %s is not a directory", under, path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(outpath_prepare_file("--export", "", true, err, sizeof err), -1);
    ck_assert_str_eq(err, "--export needs a file name");
}
END_TEST

START_TEST(test_space_summed_per_file_system) {
    OutNeed nd = {0};
    char a[512], b[512], err[1024];
    snprintf(a, sizeof a, "%s/ck", g_dir);
    snprintf(b, sizeof b, "%s/new/dir/m.safetensors", g_dir); /* not there yet: its existing ancestor counts */
    ck_assert_msg(outpath_need(&nd, "a checkpoint in ck", a, 1000, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(outpath_need(&nd, "--export m.safetensors", b, 2000, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(nd.n, 2);
    ck_assert(nd.dev[0] == nd.dev[1]);
    ck_assert_int_eq(outpath_check(&nd, err, sizeof err), 0);
    /* more than the file system holds, split in two: only the sum is too much */
    uint64_t half = nd.free_bytes[0] / 2 + 4096;
    nd.bytes[0] = nd.bytes[1] = half;
    ck_assert_int_eq(outpath_check(&nd, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not enough disk space for what this run writes: ") &&
                      strstr(err, "(a checkpoint in ck ") && strstr(err, ", --export m.safetensors ") &&
                      strstr(err, "free on that file system; free some space or write elsewhere"),
                  "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("outpath");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_file_parents_made);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_space_summed_per_file_system);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
