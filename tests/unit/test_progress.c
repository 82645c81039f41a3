/* progress_meter: what a long phase prints, driven by a test clock: nothing
 * for a phase under a second, log lines every five seconds with the
 * percentage, rate and ETA computed from the figures given, a summary at the
 * end, a redrawn terminal line, unknown totals, and the units' formatting. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "progress_meter.h"

static double g_now;
static double test_clock(void) { return g_now; }

static char *g_buf;
static size_t g_len;
static FILE *g_out;

static void open_meter(ProgressMeter *m, int tty) {
    g_buf = NULL;
    g_len = 0;
    g_out = open_memstream(&g_buf, &g_len);
    ck_assert_ptr_nonnull(g_out);
    progress_meter_init(m, g_out, tty);
    m->clock = test_clock;
    g_now = 100.0;
}

static const char *text(void) {
    fflush(g_out);
    return g_buf ? g_buf : "";
}

static void close_meter(void) {
    fclose(g_out);
    free(g_buf);
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

START_TEST(test_short_phase_is_quiet) {
    ProgressMeter m;
    open_meter(&m, 0);
    progress_report(&m.base, "importing weights", "B", 0, 1000);
    g_now += 0.5;
    progress_report(&m.base, "importing weights", "B", 500, 1000);
    g_now += 0.4;
    progress_report(&m.base, "importing weights", "B", 1000, 1000);
    ck_assert_str_eq(text(), "");
    close_meter();
}
END_TEST

START_TEST(test_log_lines) {
    ProgressMeter m;
    open_meter(&m, 0);
    progress_report(&m.base, "tokenizing", "tokens", 0, 100000);
    g_now += 2.0; /* 30000 in 2 s: 15k/s, 70000 left: 4.67 s */
    progress_report(&m.base, "tokenizing", "tokens", 30000, 100000);
    ck_assert_str_eq(text(), "tokenizing:  30%, 30.0k tokens of 100k tokens, 15.0k tokens/s, ETA 5 s\n");
    g_now += 3.0; /* 3 s after the last line: too soon */
    progress_report(&m.base, "tokenizing", "tokens", 60000, 100000);
    ck_assert_int_eq(count(text(), "\n"), 1);
    g_now += 2.5; /* 5.5 s after it */
    progress_report(&m.base, "tokenizing", "tokens", 75000, 100000);
    ck_assert_int_eq(count(text(), "\n"), 2);
    ck_assert_ptr_nonnull(strstr(text(), "tokenizing:  75%, 75.0k tokens of 100k tokens, 10.0k tokens/s, ETA 3 s\n"));
    g_now += 0.5; /* 8 s in all */
    progress_report(&m.base, "tokenizing", "tokens", 100000, 100000);
    ck_assert_ptr_nonnull(strstr(text(), "tokenizing: 100k tokens in 8.0 s (12.5k tokens/s)\n"));
    ck_assert_ptr_null(strchr(text(), '\r'));
    /* the same name again is a new phase, quiet while short */
    progress_report(&m.base, "tokenizing", "tokens", 0, 10);
    g_now += 0.2;
    progress_report(&m.base, "tokenizing", "tokens", 10, 10);
    ck_assert_int_eq(count(text(), "\n"), 3);
    close_meter();
}
END_TEST

START_TEST(test_terminal_line) {
    ProgressMeter m;
    open_meter(&m, 1);
    uint64_t gib = 1ull << 30;
    progress_report(&m.base, "writing checkpoint", "B", 0, 4 * gib);
    g_now += 1.0;
    progress_report(&m.base, "writing checkpoint", "B", gib, 4 * gib);
    ck_assert_str_eq(text(), "\rwriting checkpoint [######..................]  25%, 1.00 GiB of 4.00 GiB, 1.00 GiB/s, "
                             "ETA 3 s\033[K");
    g_now += 0.05; /* under a tenth of a second: no redraw */
    progress_report(&m.base, "writing checkpoint", "B", gib + 1, 4 * gib);
    ck_assert_int_eq(count(text(), "\r"), 1);
    g_now += 1.0;
    progress_report(&m.base, "writing checkpoint", "B", 2 * gib, 4 * gib);
    ck_assert_int_eq(count(text(), "\r"), 2);
    g_now += 1.95; /* 4 s in all */
    progress_report(&m.base, "writing checkpoint", "B", 4 * gib, 4 * gib);
    const char *t = text();
    ck_assert_ptr_nonnull(strstr(t, "\rwriting checkpoint: 4.00 GiB in 4.0 s (1.00 GiB/s)\033[K\n"));
    ck_assert_int_eq(t[strlen(t) - 1], '\n');
    close_meter();
}
END_TEST

START_TEST(test_interrupted_phase_ends_its_line) {
    ProgressMeter m;
    open_meter(&m, 1);
    progress_report(&m.base, "exporting", "B", 0, 100);
    g_now += 2.0;
    progress_report(&m.base, "exporting", "B", 10, 100);
    ck_assert_int_eq(m.line_open, 1);
    progress_meter_finish(&m); /* an error stopped the phase */
    const char *t = text();
    ck_assert_int_eq(t[strlen(t) - 1], '\n');
    progress_meter_finish(&m); /* nothing more */
    ck_assert_int_eq(count(text(), "\n"), 1);
    /* a new phase after an unfinished one starts its own line */
    progress_report(&m.base, "other", "B", 0, 100);
    g_now += 2.0;
    progress_report(&m.base, "other", "B", 50, 100);
    ck_assert_ptr_nonnull(strstr(text(), "\n\rother ["));
    close_meter();
}
END_TEST

START_TEST(test_unknown_total) {
    ProgressMeter m;
    open_meter(&m, 0);
    progress_report(&m.base, "reading corpus", "B", 0, 0);
    g_now += 2.0;
    progress_report(&m.base, "reading corpus", "B", 3u << 20, 0);
    ck_assert_str_eq(text(), "reading corpus: 3.00 MiB, 1.50 MiB/s\n");
    close_meter();
}
END_TEST

START_TEST(test_nobody_listens) {
    progress_report(NULL, "x", "B", 1, 2); /* a library called with no Progress */
    Progress none = {0};
    progress_report(&none, "x", "B", 1, 2);
}
END_TEST

START_TEST(test_amounts_and_durations) {
    char b[64];
    progress_amount(b, sizeof b, "B", 512);
    ck_assert_str_eq(b, "512 B");
    progress_amount(b, sizeof b, "B", 1536);
    ck_assert_str_eq(b, "1.50 KiB");
    progress_amount(b, sizeof b, "B", 123.4 * 1048576);
    ck_assert_str_eq(b, "123 MiB");
    progress_amount(b, sizeof b, "B", 3.0 * 1099511627776.0 * 1024);
    ck_assert_str_eq(b, "3.00 PiB");
    progress_amount(b, sizeof b, "tensors", 7);
    ck_assert_str_eq(b, "7 tensors");
    progress_amount(b, sizeof b, "tokens", 1234567);
    ck_assert_str_eq(b, "1.23M tokens");
    progress_duration(b, sizeof b, 0.2);
    ck_assert_str_eq(b, "1 s");
    progress_duration(b, sizeof b, 200);
    ck_assert_str_eq(b, "3 min 20 s");
    progress_duration(b, sizeof b, 2 * 3600 + 5 * 60 + 1);
    ck_assert_str_eq(b, "2 h 05 min");
}
END_TEST

static Suite *progress_suite(void) {
    Suite *s = suite_create("progress");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_short_phase_is_quiet);
    tcase_add_test(tc, test_log_lines);
    tcase_add_test(tc, test_terminal_line);
    tcase_add_test(tc, test_interrupted_phase_ends_its_line);
    tcase_add_test(tc, test_unknown_total);
    tcase_add_test(tc, test_nobody_listens);
    tcase_add_test(tc, test_amounts_and_durations);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(progress_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
