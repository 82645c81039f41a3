/* tokens: write/read round trip (uint16 version 1 and uint32 version 2
 * files), the window formula of tokens.h, ranks' windows disjoint and
 * deterministic, and every malformed file refused with a message naming
 * the file and the fault. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tokens.h"

static char g_path[256];

static void setup(void) {
    const char *b = getenv("ZINF_BUILD");
    snprintf(g_path, sizeof g_path, "%s/tmp-test-tokens-%d.bin", b ? b : "/tmp", (int)getpid());
}
static void teardown(void) { unlink(g_path); }

/* Tokens i -> (i * 7 + 3) mod 251: every window is recognisable. */
static uint16_t tok_at(int64_t i) { return (uint16_t)((i * 7 + 3) % 251); }

static void write_seq(int64_t n) {
    uint16_t *t = malloc(sizeof *t * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) t[i] = tok_at(i);
    char err[512];
    ck_assert_msg(tok_write(g_path, t, n, err, sizeof err) == 0, "%s", err);
    free(t);
}

/* A raw file: header ints h0,h1,h2 then `body` bytes of zeros. */
static void write_raw(int32_t h0, int32_t h1, int32_t h2, size_t header_bytes, size_t body) {
    FILE *f = fopen(g_path, "wb");
    ck_assert_ptr_nonnull(f);
    int32_t h[256] = {h0, h1, h2};
    fwrite(h, 1, header_bytes, f);
    for (size_t i = 0; i < body; i++) fputc(0, f);
    fclose(f);
}

static void expect_open_error(int64_t vocab, const char *want) {
    TokReader r;
    char err[512], full[800];
    ck_assert_int_eq(tok_open(&r, g_path, vocab, err, sizeof err), -1);
    snprintf(full, sizeof full, "%s: %s", g_path, want);
    ck_assert_str_eq(err, full);
}

START_TEST(test_round_trip) {
    write_seq(10000);
    FILE *f = fopen(g_path, "rb");
    int32_t h[256];
    ck_assert_uint_eq(fread(h, 4, 256, f), 256);
    fseek(f, 0, SEEK_END);
    ck_assert_int_eq(ftell(f), 1024 + 2 * 10000);
    fclose(f);
    ck_assert_int_eq(h[0], 20240520);
    ck_assert_int_eq(h[1], 1);
    ck_assert_int_eq(h[2], 10000);
    for (int i = 3; i < 256; i++) ck_assert_int_eq(h[i], 0);
    TokReader r;
    char err[512];
    ck_assert_msg(tok_open(&r, g_path, 256, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.ntokens, 10000);
    int B = 4, T = 16;
    int32_t tok[64], tgt[64];
    /* W = 9999 / 64 = 156 windows. */
    ck_assert_int_eq(tok_windows(10000, B, T), 156);
    for (int64_t m = 0; m < 400; m += 7) {
        ck_assert_int_eq(tok_window(&r, m, B, T, tok, tgt, err, sizeof err), 0);
        int64_t off = (m % 156) * 64;
        ck_assert_int_eq(tok_window_offset(10000, m, B, T), off);
        for (int i = 0; i < 64; i++) {
            if (tok[i] != tok_at(off + i) || tgt[i] != tok_at(off + i + 1))
                ck_abort_msg("window %lld element %d wrong", (long long)m, i);
        }
    }
    /* The last window ends exactly within the file. */
    ck_assert_int_le(tok_window_offset(10000, 155, B, T) + 65, 10000);
    tok_close(&r);
    /* No temporary file is left beside the output. */
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", g_path, (int)getpid());
    ck_assert_int_ne(access(tmp, F_OK), 0);
}
END_TEST

START_TEST(test_ranks_disjoint_deterministic) {
    write_seq(5000);
    TokReader r;
    char err[512];
    ck_assert_int_eq(tok_open(&r, g_path, 256, err, sizeof err), 0);
    const int world = 3, A = 2, B = 2, T = 8;
    int32_t tok[16], tgt[16], again[16], tg2[16];
    int64_t W = tok_windows(5000, B, T);
    for (int64_t s = 0; s < 200; s++)
        for (int a = 0; a < A; a++) {
            int64_t starts[3];
            for (int rk = 0; rk < world; rk++) {
                int64_t g = s * A + a;
                ck_assert_int_eq(tok_batch(&r, rk, world, g, B, T, tok, tgt, err, sizeof err), 0);
                int64_t off = ((g * world + rk) % W) * B * T;
                starts[rk] = off;
                if (tok[0] != tok_at(off) || tgt[15] != tok_at(off + 16)) ck_abort_msg("rank %d step %lld", rk, (long long)s);
                ck_assert_int_eq(tok_batch(&r, rk, world, g, B, T, again, tg2, err, sizeof err), 0);
                if (memcmp(tok, again, sizeof tok) || memcmp(tgt, tg2, sizeof tgt)) ck_abort_msg("not deterministic");
            }
            for (int x = 0; x < world; x++)
                for (int y = x + 1; y < world; y++)
                    if (!(starts[x] + B * T <= starts[y] || starts[y] + B * T <= starts[x]))
                        ck_abort_msg("ranks %d and %d overlap at step %lld", x, y, (long long)s);
        }
    /* Huge indices wrap without overflow. */
    ck_assert_int_eq(tok_batch(&r, 2, 3, INT64_MAX / 2, B, T, tok, tgt, err, sizeof err), 0);
    tok_close(&r);
}
END_TEST

START_TEST(test_bad_magic) {
    write_raw(0x1234, 1, 0, 1024, 0);
    expect_open_error(256, "bad magic 0x1234 (expected 20240520): not a token file");
}
END_TEST

START_TEST(test_bad_version) {
    write_raw(20240520, 3, 0, 1024, 0);
    expect_open_error(256, "unsupported version 3 (expected 1: uint16 tokens, or 2: uint32 tokens)");
}
END_TEST

START_TEST(test_truncated_header) {
    write_raw(20240520, 1, 0, 100, 0);
    expect_open_error(256, "truncated header: the file has 100 bytes, a token file starts with a 1024-byte header");
}
END_TEST

START_TEST(test_truncated_body) {
    write_raw(20240520, 1, 1000, 1024, 1500);
    expect_open_error(256, "truncated: the header says 1000 tokens (3024 bytes) but the file has 2524 bytes");
}
END_TEST

START_TEST(test_count_mismatch) {
    write_raw(20240520, 1, 10, 1024, 100);
    expect_open_error(256, "token count mismatch: the header says 10 tokens (1044 bytes) but the file has 1124 bytes");
    write_raw(20240520, 1, -5, 1024, 0);
    expect_open_error(256, "negative token count -5 in the header");
}
END_TEST

START_TEST(test_missing_file) {
    expect_open_error(256, "cannot open token file: No such file or directory");
    write_seq(10);
    expect_open_error(-1, "vocabulary size -1 is not 0 (unchecked) or 1..2147483647");
}
END_TEST

START_TEST(test_too_short_and_world) {
    write_seq(64);
    TokReader r;
    char err[512], want[800];
    ck_assert_int_eq(tok_open(&r, g_path, 256, err, sizeof err), 0);
    int32_t tok[64], tgt[64];
    ck_assert_int_eq(tok_batch(&r, 0, 1, 0, 4, 16, tok, tgt, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: 64 tokens is too short for one window of B*T+1 = 65 tokens (B=4, T=16)", g_path);
    ck_assert_str_eq(err, want);
    /* 64 tokens hold 3 windows of 21: fine for 3 ranks, not for 4. */
    ck_assert_int_eq(tok_batch(&r, 2, 3, 5, 4, 5, tok, tgt, err, sizeof err), 0);
    ck_assert_int_eq(tok_batch(&r, 0, 4, 0, 4, 5, tok, tgt, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: 64 tokens hold 3 disjoint windows of B*T+1 = 21 tokens, fewer than the 4 ranks", g_path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(tok_batch(&r, 3, 3, 0, 4, 5, tok, tgt, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "rank 3 is not in a world of 3"));
    ck_assert_int_eq(tok_batch(&r, 0, 1, -1, 4, 5, tok, tgt, err, sizeof err), -1);
    ck_assert_int_eq(tok_window(&r, 0, 0, 5, tok, tgt, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "bad micro-batch shape"));
    tok_close(&r);
}
END_TEST

START_TEST(test_vocab_checked) {
    uint16_t t[200];
    for (int i = 0; i < 200; i++) t[i] = (uint16_t)(i == 150 ? 300 : i % 50);
    char err[512], want[800];
    ck_assert_int_eq(tok_write(g_path, t, 200, err, sizeof err), 0);
    TokReader r;
    ck_assert_int_eq(tok_open(&r, g_path, 256, err, sizeof err), 0);
    int32_t tok[64], tgt[64];
    ck_assert_int_eq(tok_window(&r, 0, 4, 16, tok, tgt, err, sizeof err), 0);     /* tokens 0..64 */
    ck_assert_int_eq(tok_window(&r, 2, 4, 16, tok, tgt, err, sizeof err), -1);    /* tokens 128..192 */
    snprintf(want, sizeof want, "%s: token 300 at position 150 is not below the vocabulary size 256", g_path);
    ck_assert_str_eq(err, want);
    tok_close(&r);
    /* vocab 0: unchecked. */
    ck_assert_int_eq(tok_open(&r, g_path, 0, err, sizeof err), 0);
    ck_assert_int_eq(tok_window(&r, 2, 4, 16, tok, tgt, err, sizeof err), 0);
    ck_assert_int_eq(tok[22], 300);
    tok_close(&r);
}
END_TEST

START_TEST(test_write_errors) {
    char err[512];
    uint16_t t[4] = {1, 2, 3, 4};
    ck_assert_int_eq(tok_write("/nonexistent-dir-zinf/x.bin", t, 4, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir-zinf/x.bin: cannot create"));
    ck_assert_ptr_nonnull(strstr(err, "No such file or directory"));
    ck_assert_int_eq(tok_write(g_path, t, (int64_t)INT32_MAX + 1, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "do not fit the int32 count"));
    ck_assert_int_ne(access(g_path, F_OK), 0);
}
END_TEST

/* Version 2: uint32 ids above 65535, the vocabulary in the header, windows
 * and ranges read back exactly. */
START_TEST(test_uint32_round_trip) {
    enum { N = 5000 };
    uint32_t *ids = malloc(N * sizeof *ids);
    for (int i = 0; i < N; i++) ids[i] = (uint32_t)((i * 7919u + 3u) % 128256u);
    char err[512];
    ck_assert_msg(tok_write_ids(g_path, ids, N, 128256, err, sizeof err) == 0, "%s", err);
    FILE *f = fopen(g_path, "rb");
    int32_t h[256];
    ck_assert_uint_eq(fread(h, 4, 256, f), 256);
    fseek(f, 0, SEEK_END);
    ck_assert_int_eq(ftell(f), 1024 + 4 * N);
    fclose(f);
    ck_assert_int_eq(h[0], 20240520);
    ck_assert_int_eq(h[1], 2);
    ck_assert_int_eq(h[2], N);
    ck_assert_int_eq(h[3], 128256);
    for (int i = 4; i < 256; i++) ck_assert_int_eq(h[i], 0);
    TokReader r;
    ck_assert_msg(tok_open(&r, g_path, 128256, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.width, 4);
    ck_assert_int_eq(r.file_vocab, 128256);
    int32_t tok[64], tgt[64];
    for (int64_t m = 0; m < 200; m += 13) {
        ck_assert_int_eq(tok_window(&r, m, 4, 16, tok, tgt, err, sizeof err), 0);
        int64_t off = tok_window_offset(N, m, 4, 16);
        for (int i = 0; i < 64; i++)
            if ((uint32_t)tok[i] != ids[off + i] || (uint32_t)tgt[i] != ids[off + i + 1]) ck_abort_msg("window %lld", (long long)m);
    }
    uint32_t *back = malloc(N * sizeof *back);
    ck_assert_int_eq(tok_read(&r, 0, N, back, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(back, ids, N * sizeof *ids), 0);
    ck_assert_int_eq(tok_read(&r, 4990, 11, back, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "tokens 4990..5001 are outside the file's 5000"));
    tok_close(&r);
    /* A model with a smaller vocabulary refuses the file at once. */
    char want[800];
    snprintf(want, sizeof want, "%s: made for a vocabulary of 128256 ids, more than the 50000 expected", g_path);
    ck_assert_int_eq(tok_open(&r, g_path, 50000, err, sizeof err), -1);
    ck_assert_str_eq(err, want);
    /* Truncated: the size is checked with 4 bytes an id. */
    ck_assert_int_eq(truncate(g_path, 1024 + 4 * N - 2), 0);
    expect_open_error(0, "truncated: the header says 5000 tokens (21024 bytes) but the file has 21022 bytes");
    free(back);
    free(ids);
}
END_TEST

/* Version 1 from uint32 ids when the vocabulary fits, every id checked. */
START_TEST(test_write_ids_narrow) {
    uint32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = (uint32_t)(i * 211 % 65536);
    char err[512], want[800];
    ck_assert_msg(tok_write_ids(g_path, ids, 300, 65536, err, sizeof err) == 0, "%s", err);
    TokReader r;
    ck_assert_int_eq(tok_open(&r, g_path, 65536, err, sizeof err), 0);
    ck_assert_int_eq(r.width, 2);
    ck_assert_int_eq(r.file_vocab, 65536);
    uint32_t back[300];
    ck_assert_int_eq(tok_read(&r, 0, 300, back, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(back, ids, sizeof ids), 0);
    tok_close(&r);
    /* ids checked on reading against the caller's vocabulary */
    ck_assert_int_eq(tok_open(&r, g_path, 0, err, sizeof err), 0);
    r.vocab = 1000;
    ck_assert_int_eq(tok_read(&r, 0, 300, back, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: token 1055 at position 5 is not below the vocabulary size 1000", g_path);
    ck_assert_str_eq(err, want);
    tok_close(&r);
    unlink(g_path);
    ids[7] = 70000;
    ck_assert_int_eq(tok_write_ids(g_path, ids, 300, 65536, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: token 70000 at position 7 is not below the vocabulary size 65536", g_path);
    ck_assert_str_eq(err, want);
    ck_assert_int_ne(access(g_path, F_OK), 0);
    ck_assert_int_eq(tok_write_ids(g_path, ids, 300, 0, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "vocabulary size 0 is not 1..2147483647"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("tokens");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_ranks_disjoint_deterministic);
    tcase_add_test(tc, test_bad_magic);
    tcase_add_test(tc, test_bad_version);
    tcase_add_test(tc, test_truncated_header);
    tcase_add_test(tc, test_truncated_body);
    tcase_add_test(tc, test_count_mismatch);
    tcase_add_test(tc, test_missing_file);
    tcase_add_test(tc, test_too_short_and_world);
    tcase_add_test(tc, test_vocab_checked);
    tcase_add_test(tc, test_write_errors);
    tcase_add_test(tc, test_uint32_round_trip);
    tcase_add_test(tc, test_write_ids_narrow);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
