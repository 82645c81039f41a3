/* losschart: a --losses file read (steps sorted, a step written twice keeps
 * its last line, eval lines apart), refusals with FILE:LINE, and the SVG's
 * points placed by the axes' ticks (first and last step at the plot's
 * edges, the highest loss above the lowest). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "losschart.h"

static char g_path[256];

static void setup(void) {
    const char *b = getenv("ZINF_BUILD");
    snprintf(g_path, sizeof g_path, "%s/tmp-test-losschart-%d", b ? b : "/tmp", (int)getpid());
}
static void teardown(void) { unlink(g_path); }

static void write_text(const char *t) {
    FILE *f = fopen(g_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(t, f);
    fclose(f);
}

START_TEST(test_read_resumed) {
    /* steps 1-3, a crash, a resume from the checkpoint at 2 redoing step 3 */
    write_text("eval step 0 loss 6 batches 2\n"
               "step 1 loss 5.5 grad_norm 1\nstep 2 loss 5.0 grad_norm 1\nstep 3 loss 4.9 grad_norm 1\n"
               "\n"
               "step 3 loss 4.75 grad_norm 1\nstep 4 loss 4.5 grad_norm 1\neval step 4 loss 4.6 batches 2\n");
    LossSeries s;
    char err[512];
    ck_assert_msg(losschart_read(g_path, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.ntrain, 4);
    ck_assert_int_eq(s.neval, 2);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(s.train[i].step, i + 1);
    ck_assert(s.train[2].loss == 4.75); /* the redone step's line */
    ck_assert_int_eq(s.eval[0].step, 0);
    ck_assert(s.eval[1].loss == 4.6);
    /* the chart: step 1 at x = 80 is not required (ticks round the range);
     * the first and last points lie inside the plot, the higher loss above */
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    ck_assert_int_eq(losschart_svg(m, &s, "t<&>", NULL, err, sizeof err), 0);
    fclose(m);
    ck_assert_ptr_nonnull(strstr(buf, ">t&lt;&amp;&gt;</text>"));
    ck_assert_ptr_null(strstr(buf, "learning rate"));
    const char *pts = strstr(buf, "id=\"train\" points=\"");
    ck_assert_ptr_nonnull(pts);
    double x[4], y[4];
    ck_assert_int_eq(sscanf(pts + strlen("id=\"train\" points=\""), "%lf,%lf %lf,%lf %lf,%lf %lf,%lf", &x[0], &y[0], &x[1], &y[1], &x[2],
                            &y[2], &x[3], &y[3]),
                     8);
    for (int i = 0; i < 4; i++) ck_assert(x[i] >= 80 && x[i] <= 790 && y[i] >= 60 && y[i] <= 430);
    ck_assert(x[0] < x[1] && x[1] < x[2] && x[2] < x[3]);
    ck_assert(y[0] < y[3]); /* 5.5 drawn above 4.5: y grows downwards */
    free(buf);
    losschart_free(&s);
}
END_TEST

START_TEST(test_refusals) {
    LossSeries s;
    char err[512], want[600];
    write_text("step 1 loss 5.5 grad_norm 1\nstep 2 lost 5\n");
    ck_assert_int_eq(losschart_read(g_path, &s, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:2: not a line of zinfrun --losses: 'step 2 lost 5'", g_path);
    ck_assert_str_eq(err, want);
    losschart_free(&s);
    write_text("step 1 loss nan grad_norm 1\n");
    ck_assert_int_eq(losschart_read(g_path, &s, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:1: step 1 with loss nan", g_path);
    ck_assert_str_eq(err, want);
    losschart_free(&s);
    write_text("\n\n");
    ck_assert_int_eq(losschart_read(g_path, &s, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: no step or eval lines (a file zinfrun --losses wrote has them)", g_path);
    ck_assert_str_eq(err, want);
    losschart_free(&s);
    unlink(g_path);
    ck_assert_int_eq(losschart_read(g_path, &s, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: No such file or directory", g_path);
    ck_assert_str_eq(err, want);
    losschart_free(&s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("losschart");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_read_resumed);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
