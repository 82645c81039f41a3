/* tokens: write/read round trip (uint16 version 1 and uint32 version 2
 * files), the window formula of tokens.h, ranks' windows disjoint and
 * deterministic, and every malformed file refused with a message naming
 * the file and the fault. The data order (dataorder.h): the permutation is
 * a seeded bijection, the row stream is the same on every world size,
 * epochs read every row once, EOS documents, the checkpoint's position. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dataorder.h"
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
    write_raw(20240520, 5, 0, 1024, 0);
    expect_open_error(256, "unsupported version 5 (expected 1: uint16 tokens, 2: uint32 tokens, 3: tokens with a "
                           "trained-token mask, or 4: packed rows)");
    write_raw(20240520, 3, 0, 1024, 0); /* [4], bytes per id, 0 */
    expect_open_error(256, "version 3 header says 0 bytes per token id (expected 2 or 4)");
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

/* The permutation of [0, n) is a bijection for every n, seed and epoch. */
START_TEST(test_permute_bijection) {
    const int64_t ns[] = {1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 100, 1000, 4097, 65537};
    const uint64_t seeds[] = {0, 1, 42, UINT64_MAX};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof seeds / sizeof *seeds; b++)
            for (uint64_t e = 0; e < 3; e++) {
                int64_t n = ns[a];
                unsigned char *seen = calloc((size_t)n, 1);
                for (int64_t i = 0; i < n; i++) {
                    int64_t j = dord_permute(seeds[b], e, n, i);
                    if (j < 0 || j >= n || seen[j])
                        ck_abort_msg("n %lld seed %llu epoch %llu: %lld -> %lld", (long long)n,
                                     (unsigned long long)seeds[b], (unsigned long long)e, (long long)i, (long long)j);
                    seen[j] = 1;
                }
                free(seen);
            }
    ck_assert_int_eq(dord_permute(1, 0, 10, 10), -1);
    ck_assert_int_eq(dord_permute(1, 0, 10, -1), -1);
    ck_assert_int_eq(dord_permute(1, 0, 0, 0), -1);
    /* a large domain: no overflow, still in range */
    int64_t big = (INT64_C(1) << 62) - 3;
    for (int64_t i = big - 5; i < big; i++) {
        int64_t j = dord_permute(7, 3, big, i);
        ck_assert(j >= 0 && j < big);
    }
}
END_TEST

/* Seed and epoch determine the permutation: equal for equal ones, far
 * apart for others, and not the identity. */
START_TEST(test_permute_seeded) {
    enum { N = 1000 };
    int64_t same = 0, seed_eq = 0, epoch_eq = 0, fixed = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t a = dord_permute(5, 0, N, i);
        same += a == dord_permute(5, 0, N, i);
        seed_eq += a == dord_permute(6, 0, N, i);
        epoch_eq += a == dord_permute(5, 1, N, i);
        fixed += a == i;
    }
    ck_assert_int_eq(same, N);
    /* a random pair of permutations agrees on ~1 point */
    ck_assert_int_lt(seed_eq, 10);
    ck_assert_int_lt(epoch_eq, 10);
    ck_assert_int_lt(fixed, 10);
    /* pinned: a checkpoint resumed by another version must read the same order */
    const int64_t e0[] = {117, 330, 387, 191, 286, 148}, e1[] = {309, 164, 278, 26, 81, 323};
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(dord_permute(1234, 0, 391, i), e0[i]);
        ck_assert_int_eq(dord_permute(1234, 1, 391, i), e1[i]);
    }
}
END_TEST

/* Documents of these lengths, each ended by EOS 0 (the last one by the end
 * of the file); other tokens 1 + (i mod 200). */
static const int64_t doc_len[] = {5, 40, 17, 18, 3, 50, 33, 1, 70, 29};
enum { NDOCS = sizeof doc_len / sizeof *doc_len };

static int64_t write_docs(void) {
    int64_t n = 0;
    for (int d = 0; d < NDOCS; d++) n += doc_len[d];
    uint16_t *t = malloc(sizeof *t * (size_t)n);
    int64_t k = 0;
    for (int d = 0; d < NDOCS; d++)
        for (int64_t i = 0; i < doc_len[d]; i++, k++)
            t[k] = (uint16_t)(i == doc_len[d] - 1 && d < NDOCS - 1 ? 0 : 1 + k % 200);
    char err[512];
    ck_assert_msg(tok_write(g_path, t, n, err, sizeof err) == 0, "%s", err);
    free(t);
    return n;
}

/* EOS documents: rows start at a document's start and step T, never read
 * past the document's last token (its EOS); a document's last row (a short
 * document's only one) is padded with EOS, its padding untrained. */
START_TEST(test_eos_rows) {
    int64_t n = write_docs();
    TokReader r;
    char err[512];
    ck_assert_int_eq(tok_open(&r, g_path, 256, err, sizeof err), 0);
    const int64_t T = 16;
    DataOrder d;
    DordOptions o = {.order = DORD_SEQUENTIAL, .seed = 0, .eos = 0};
    ck_assert_msg(dord_open(&d, &r, &o, 2, T, 1, err, sizeof err) == 0, "%s", err);
    /* expected rows: ceil((len-1)/T) per document, and how many tokens of the document each reads */
    int64_t want[64], wlen[64], nw = 0, start = 0, used = 0, with = 0;
    for (int k = 0; k < NDOCS; k++) {
        int64_t rows = doc_len[k] >= 2 ? (doc_len[k] - 2) / T + 1 : 0;
        for (int64_t j = 0; j < rows; j++) {
            want[nw] = start + j * T;
            wlen[nw++] = doc_len[k] - j * T < T + 1 ? doc_len[k] - j * T : T + 1;
        }
        if (rows) { used += doc_len[k]; with++; }
        start += doc_len[k];
    }
    ck_assert_int_eq(nw, 1 + 3 + 1 + 2 + 1 + 4 + 2 + 5 + 2); /* 5:1 40:3 17:1 18:2 3:1 50:4 33:2 1:0 70:5 29:2 */
    ck_assert_int_eq(d.rows, nw);
    ck_assert_int_eq(d.ndocs, with);
    ck_assert_int_eq(d.docs_all, NDOCS);
    ck_assert_int_eq(d.eos_count, NDOCS - 1);
    ck_assert_int_eq(d.longest, 70);
    ck_assert_int_eq(d.tokens_used, used);
    for (int64_t j = 0; j < nw; j++) ck_assert_int_eq(dord_row_start(&d, j), want[j]);
    ck_assert_int_eq(dord_row_start(&d, nw), -1);
    /* batches in sequential order wrap after an epoch: the document's tokens, then EOS padding whose targets are
     * untrained; no EOS but as a document's last token */
    uint32_t row[17];
    int32_t tok[32], tgt[32];
    int64_t trained = 0;
    for (int64_t g = 0; g < 3 * nw; g++) {
        ck_assert_int_eq(dord_batch(&d, 0, g, tok, tgt, err, sizeof err), 0);
        int64_t c = dord_trained(&d, g, err, sizeof err);
        int64_t count = 0;
        for (int b = 0; b < 2; b++) {
            int64_t before = count;
            int64_t q = (g * 2 + b) % nw, len = wlen[q];
            ck_assert_int_eq(tok_read(&r, want[q], len, row, err, sizeof err), 0);
            for (int t = 0; t < T; t++) {
                int32_t wt = t < len ? (int32_t)row[t] : 0, wg = t + 1 < len ? (int32_t)row[t + 1] : -1;
                if (tok[b * T + t] != wt || tgt[b * T + t] != wg)
                    ck_abort_msg("micro-batch %lld row %d token %d: %d -> %d, expected %d -> %d", (long long)g, b, t,
                                 tok[b * T + t], tgt[b * T + t], wt, wg);
                if (t + 1 < len) ck_assert_int_ne(tok[b * T + t], 0);
                count += tgt[b * T + t] >= 0;
            }
            if (g * 2 + b < nw) trained += count - before;
        }
        ck_assert_int_eq(c, count);
    }
    /* an epoch trains every target of every document once: a document of L tokens has L - 1 */
    ck_assert_int_eq(trained, n - NDOCS);
    ck_assert_int_eq(dord_epoch(&d, nw / 2 - 1), 0);
    ck_assert_int_eq(dord_epoch(&d, 3 * nw), 6);
    dord_close(&d);
    (void)n;
    /* documents longer than a row hold one too */
    char want_err[800];
    ck_assert_int_eq(dord_open(&d, &r, &o, 1, 80, 1, err, sizeof err), 0);
    ck_assert_int_eq(d.rows, NDOCS - 1);
    dord_close(&d);
    ck_assert_int_eq(dord_open(&d, &r, &o, 4, T, 6, err, sizeof err), -1);
    snprintf(want_err, sizeof want_err,
             "%s: the documents split at EOS 0 hold 21 rows of T+1 = 17 tokens, fewer than the 24 of one global "
             "micro-batch (B=4 on 6 ranks)", g_path);
    ck_assert_str_eq(err, want_err);
    o.eos = 256;
    ck_assert_int_eq(dord_open(&d, &r, &o, 1, T, 1, err, sizeof err), -1);
    ck_assert_str_eq(err, "--eos 256 is not a token id of the vocabulary of 256 ids (0..255)");
    /* an id that does not occur: one document */
    o.eos = 255;
    ck_assert_int_eq(dord_open(&d, &r, &o, 1, T, 1, err, sizeof err), 0);
    ck_assert_int_eq(d.eos_count, 0);
    ck_assert_int_eq(d.docs_all, 1);
    ck_assert_int_eq(d.rows, (n - 2) / T + 1); /* ceil((n-1)/T): the last row padded */
    dord_close(&d);
    tok_close(&r);
}
END_TEST

/* Every layout but sequential windows: the global stream of rows is the
 * same for 1 rank of B=4, 2 of B=2, 4 of B=1 and 1 of B=2 with two
 * accumulations; a shuffled epoch reads every row once; epochs differ. */
START_TEST(test_order_world_size) {
    write_docs();
    TokReader r;
    char err[512];
    ck_assert_int_eq(tok_open(&r, g_path, 256, err, sizeof err), 0);
    const int64_t T = 8;
    const DordOptions opts[] = {{DORD_SHUFFLE, 9, -1}, {DORD_SHUFFLE, 9, 0}, {DORD_SEQUENTIAL, 0, 0}};
    for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) {
        DataOrder ref;
        ck_assert_int_eq(dord_open(&ref, &r, &opts[k], 4, T, 1, err, sizeof err), 0);
        int64_t E = ref.rows, nref = 4 * 12;
        int32_t (*want)[8] = malloc(sizeof *want * (size_t)nref);
        int32_t tok[32], tgt[32];
        for (int64_t g = 0; g < 12; g++) {
            ck_assert_int_eq(dord_batch(&ref, 0, g, tok, tgt, err, sizeof err), 0);
            memcpy(want[g * 4], tok, sizeof tok);
        }
        /* world R of micro-batch 4/R; A accumulations */
        const int cfg[][3] = {{2, 2, 1}, {4, 1, 1}, {1, 2, 2}, {1, 1, 4}};
        for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
            int R = cfg[c][0], Bm = cfg[c][1], A = cfg[c][2];
            DataOrder d;
            ck_assert_msg(dord_open(&d, &r, &opts[k], Bm, T, R, err, sizeof err) == 0, "%s", err);
            ck_assert_int_eq(d.rows, E);
            for (int64_t s = 0; s < 12; s++)
                for (int a = 0; a < A; a++)
                    for (int rk = 0; rk < R; rk++) {
                        ck_assert_int_eq(dord_batch(&d, rk, s * A + a, tok, tgt, err, sizeof err), 0);
                        int64_t row0 = ((s * A + a) * R + rk) * Bm; /* the global row of its first row */
                        if (memcmp(tok, want[row0], sizeof(int32_t) * (size_t)(Bm * T)))
                            ck_abort_msg("options %zu, %d ranks of B=%d, A=%d: step %lld rank %d differs", k, R, Bm, A,
                                         (long long)s, rk);
                    }
            dord_close(&d);
        }
        /* epochs: each reads every row once; a shuffle's epochs differ */
        int64_t *rows = malloc(sizeof *rows * (size_t)E), *first = malloc(sizeof *first * (size_t)E);
        int diff = 0;
        for (int64_t e = 0; e < 3; e++) {
            for (int64_t i = 0; i < E; i++) rows[i] = dord_global_row_start(&ref, e * E + i);
            for (int64_t i = 0; i < E; i++) {
                if (e == 0) first[i] = rows[i];
                else diff += rows[i] != first[i];
                int found = 0;
                for (int64_t j = 0; j < E; j++) found += rows[j] == dord_row_start(&ref, i);
                ck_assert_int_eq(found, 1);
            }
        }
        if (opts[k].order == DORD_SHUFFLE) ck_assert_int_gt(diff, 0);
        else ck_assert_int_eq(diff, 0);
        free(rows);
        free(first);
        free(want);
        dord_close(&ref);
    }
    tok_close(&r);
}
END_TEST

/* Sequential without EOS is tok_batch's walk, window for window; a
 * shuffle of the same file differs from it and between seeds. */
START_TEST(test_sequential_is_windows) {
    write_seq(5000);
    TokReader r;
    char err[512];
    ck_assert_int_eq(tok_open(&r, g_path, 256, err, sizeof err), 0);
    DataOrder d, sh, sh2;
    DordOptions seq = {DORD_SEQUENTIAL, 0, -1}, shuf = {DORD_SHUFFLE, 1, -1}, shuf2 = {DORD_SHUFFLE, 2, -1};
    ck_assert_int_eq(dord_open(&d, &r, &seq, 2, 8, 3, err, sizeof err), 0);
    ck_assert(d.windows);
    ck_assert_int_eq(d.rows, tok_windows(5000, 2, 8) * 2);
    ck_assert_int_eq(dord_open(&sh, &r, &shuf, 2, 8, 3, err, sizeof err), 0);
    ck_assert_int_eq(dord_open(&sh2, &r, &shuf2, 2, 8, 3, err, sizeof err), 0);
    ck_assert_int_eq(sh.rows, 4999 / 8);
    int32_t a[16], at[16], b[16], bt[16];
    int differ = 0, seeds_differ = 0;
    for (int64_t g = 0; g < 500; g++)
        for (int rk = 0; rk < 3; rk++) {
            ck_assert_int_eq(dord_batch(&d, rk, g, a, at, err, sizeof err), 0);
            ck_assert_int_eq(tok_batch(&r, rk, 3, g, 2, 8, b, bt, err, sizeof err), 0);
            ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
            ck_assert_int_eq(memcmp(at, bt, sizeof at), 0);
            ck_assert_int_eq(dord_global_row_start(&d, (g * 3 + rk) * 2 + 1), tok_window_offset(5000, g * 3 + rk, 2, 8) + 8);
            ck_assert_int_eq(dord_batch(&sh, rk, g, b, bt, err, sizeof err), 0);
            differ += memcmp(a, b, sizeof a) != 0;
            /* targets are the inputs shifted by one */
            ck_assert_int_eq(memcmp(b + 1, bt, sizeof(int32_t) * 7), 0);
            ck_assert_int_eq(dord_batch(&sh2, rk, g, a, at, err, sizeof err), 0);
            seeds_differ += memcmp(a, b, sizeof a) != 0;
        }
    ck_assert_int_gt(differ, 1400);
    ck_assert_int_gt(seeds_differ, 1400);
    /* 312 windows, 3 ranks: micro-batch 104 starts epoch 2 */
    ck_assert_int_eq(dord_epoch(&d, 103), 0);
    ck_assert_int_eq(dord_epoch(&d, 104), 1);
    dord_close(&d);
    dord_close(&sh);
    dord_close(&sh2);
    /* too short, too few rows for the ranks */
    char want[800];
    ck_assert_int_eq(dord_open(&d, &r, &shuf, 1, 5000, 1, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: 5000 tokens is too short for one row of T+1 = 5001 tokens", g_path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(dord_open(&d, &r, &shuf, 2, 1000, 3, err, sizeof err), -1);
    snprintf(want, sizeof want,
             "%s: 5000 tokens hold 4 rows of T+1 = 1001 tokens, fewer than the 6 of one global micro-batch (B=2 on 3 ranks)",
             g_path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(dord_open(&d, &r, &seq, 4, 2000, 1, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: 5000 tokens is too short for one window of B*T+1 = 8001 tokens (B=4, T=2000)", g_path);
    ck_assert_str_eq(err, want);
    tok_close(&r);
}
END_TEST

/* The checkpoint's data position: written, read back, every difference named. */
START_TEST(test_state_check) {
    write_seq(5000);
    TokReader r, r2;
    char err[1024], js[400], st[600];
    ck_assert_int_eq(tok_open(&r, g_path, 256, err, sizeof err), 0);
    DataOrder d, e;
    DordOptions shuf = {DORD_SHUFFLE, 7, -1};
    ck_assert_int_eq(dord_open(&d, &r, &shuf, 2, 8, 1, err, sizeof err), 0);
    dord_state_json(&d, 40, js, sizeof js);
    ck_assert_str_eq(js, "{\"order\": \"shuffle\", \"seed\": 7, \"eos\": -1, \"tokens\": 5000, \"micro_batches\": 40, \"epoch\": 1}");
    snprintf(st, sizeof st, "{\"step\": 20, \"loss_scale\": 1, \"good_steps\": 0, \"run\": {\"data\": %s}}", js);
    ck_assert_msg(dord_state_check(&d, st, 40, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(dord_state_check(&d, st, 42, err, sizeof err), -1);
    ck_assert_str_eq(err, "the checkpoint has read 40 global micro-batches, but its step and the plan give 42");
    /* another seed, EOS and file */
    DordOptions other = {DORD_SHUFFLE, 8, 3};
    write_seq(4000);
    ck_assert_int_eq(tok_open(&r2, g_path, 256, err, sizeof err), 0);
    ck_assert_int_eq(dord_open(&e, &r2, &other, 2, 8, 1, err, sizeof err), 0);
    ck_assert_int_eq(dord_state_check(&e, st, 40, err, sizeof err), -1);
    char want[1200];
    snprintf(want, sizeof want,
             "the checkpoint was trained on another data order (--data-seed: the checkpoint's 7, this run's 8; --eos: the "
             "checkpoint's none, this run's 3; the data file: the checkpoint's had 5000 tokens, %s has 4000): resuming would "
             "not continue it; resume with the options and data file it was trained with, or use --start-over instead of "
             "--resume to train from step 0",
             g_path);
    ck_assert_str_eq(err, want);
    dord_close(&e);
    /* a checkpoint from before data orders: sequential, no EOS */
    const char *old = "{\"step\": 20, \"loss_scale\": 1, \"good_steps\": 0, \"run\": {}}";
    ck_assert_int_eq(dord_state_check(&d, old, 40, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--data-order: the checkpoint's sequential (it records no data order: written before "
                                      "--data-order existed), this run's shuffle"));
    DordOptions seq = {DORD_SEQUENTIAL, 0, -1};
    ck_assert_int_eq(dord_open(&e, &r2, &seq, 2, 8, 1, err, sizeof err), 0);
    ck_assert_msg(dord_state_check(&e, old, 40, err, sizeof err) == 0, "%s", err);
    /* sequential runs ignore the seed */
    dord_state_json(&e, 40, js, sizeof js);
    snprintf(st, sizeof st, "{\"run\": {\"data\": %s}}", js);
    e.o.seed = 99;
    ck_assert_msg(dord_state_check(&e, st, 40, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(dord_state_check(&e, "{\"run\": {\"data\": {\"order\": \"random\"}}}", 40, err, sizeof err), -1);
    ck_assert_str_eq(err, "the checkpoint's data position has no order it knows ('random')");
    dord_close(&e);
    /* --eos: the layout that pads documents is recorded; a checkpoint from before it is refused */
    DordOptions eos = {DORD_SEQUENTIAL, 0, 3};
    ck_assert_int_eq(dord_open(&e, &r2, &eos, 2, 8, 1, err, sizeof err), 0);
    dord_state_json(&e, 40, js, sizeof js);
    ck_assert_str_eq(js, "{\"order\": \"sequential\", \"seed\": 0, \"eos\": 3, \"tokens\": 4000, \"micro_batches\": 40, "
                         "\"epoch\": 1, \"eos_rows\": \"padded\"}");
    snprintf(st, sizeof st, "{\"run\": {\"data\": %s}}", js);
    ck_assert_msg(dord_state_check(&e, st, 40, err, sizeof err) == 0, "%s", err);
    const char *before = "{\"run\": {\"data\": {\"order\": \"sequential\", \"seed\": 0, \"eos\": 3, \"tokens\": 4000, "
                         "\"micro_batches\": 40, \"epoch\": 1}}}";
    ck_assert_int_eq(dord_state_check(&e, before, 40, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "(--eos: the checkpoint's rows left out documents of at most T tokens and the tails "
                                      "of longer ones (written before they were padded to a row), this run's pad them)"));
    dord_close(&e);
    dord_close(&d);
    tok_close(&r2);
    tok_close(&r);
}
END_TEST

/* Version 3: ids and mask round trip for both widths; windows, rows and
 * counts see the mask; an all-trained mask writes version 1 or 2. */
START_TEST(test_masked) {
    enum { N = 203 };
    uint32_t ids[N];
    uint8_t tr[N];
    int64_t ntr = 0;
    for (int64_t i = 0; i < N; i++) {
        ids[i] = tok_at(i);
        tr[i] = (uint8_t)(i % 3 != 0 && i % 17 != 5);
        ntr += tr[i];
    }
    char err[512];
    for (int wide = 0; wide < 2; wide++) {
        int64_t vocab = wide ? 70000 : 256;
        ck_assert_msg(tok_write_masked(g_path, ids, tr, N, vocab, 0x5eedull, err, sizeof err) == 0, "%s", err);
        TokReader r;
        ck_assert_msg(tok_open(&r, g_path, vocab, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(r.version, 3);
        ck_assert_int_eq(r.width, wide ? 4 : 2);
        ck_assert_int_eq(r.ntrained, ntr);
        ck_assert(r.tokenizer == 0x5eedull); /* the fingerprint beside the version 3 fields */
        uint8_t got[N];
        ck_assert_int_eq(tok_read_trained(&r, 0, N, got, err, sizeof err), 0);
        ck_assert_mem_eq(got, tr, N);
        ck_assert_int_eq(tok_read_trained(&r, 13, 50, got, err, sizeof err), 0);
        ck_assert_mem_eq(got, tr + 13, 50);
        int64_t want = 0;
        for (int64_t i = 9; i < 9 + 100; i++) want += tr[i];
        ck_assert_int_eq(tok_count_trained(&r, 9, 100, err, sizeof err), want);
        /* window 1 of B=2, T=10: tokens 20..40, targets 21..40 */
        int32_t tok[20], tgt[20];
        ck_assert_msg(tok_window(&r, 1, 2, 10, tok, tgt, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < 20; i++) {
            ck_assert_int_eq(tok[i], tok_at(20 + i));
            ck_assert_int_eq(tgt[i], tr[21 + i] ? tok_at(21 + i) : TOK_UNTRAINED);
        }
        /* the shuffled rows and their global count agree with the mask */
        DataOrder d;
        DordOptions o = {.order = DORD_SHUFFLE, .seed = 5, .eos = -1};
        ck_assert_msg(dord_open(&d, &r, &o, 2, 10, 2, err, sizeof err) == 0, "%s", err);
        int64_t count = 0;
        for (int rank = 0; rank < 2; rank++) {
            ck_assert_msg(dord_batch(&d, rank, 3, tok, tgt, err, sizeof err) == 0, "%s", err);
            for (int i = 0; i < 20; i++) count += tgt[i] != TOK_UNTRAINED;
        }
        ck_assert_int_eq(dord_trained(&d, 3, err, sizeof err), count);
        dord_close(&d);
        tok_close(&r);
    }
    /* a file of 203 ids + 26 mask bytes, less one byte: truncated */
    FILE *f = fopen(g_path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(ftruncate(fileno(f), 1024 + 4 * N + (N + 7) / 8 - 1), 0);
    fclose(f);
    expect_open_error(70000, "truncated: the header says 203 tokens (1862 bytes) but the file has 1861 bytes");
    /* all trained: version 1, read as every token trained */
    memset(tr, 1, sizeof tr);
    ck_assert_msg(tok_write_masked(g_path, ids, tr, N, 256, 0, err, sizeof err) == 0, "%s", err);
    TokReader r;
    ck_assert_msg(tok_open(&r, g_path, 256, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.version, 1);
    ck_assert_int_eq(tok_count_trained(&r, 0, N, err, sizeof err), N);
    tok_close(&r);
}
END_TEST

/* tok_check_ids finds a bad id anywhere in the file in one pass (here
 * past the first read chunk, not at a window that reads it), and the
 * tokenizer's fingerprint is written to header words 4 and 5 and read
 * back; 0 means not recorded. */
START_TEST(test_check_ids_and_fingerprint) {
    enum { N = 3000000 }; /* more than one read chunk */
    uint16_t *t = malloc(sizeof *t * N);
    for (int i = 0; i < N; i++) t[i] = (uint16_t)(i % 500);
    t[N - 7] = 700;
    char err[512];
    ck_assert_msg(tok_write(g_path, t, N, err, sizeof err) == 0, "%s", err);
    TokReader r;
    ck_assert_msg(tok_open(&r, g_path, 600, err, sizeof err) == 0, "%s", err);
    ck_assert(r.tokenizer == 0);
    ck_assert_int_eq(tok_check_ids(&r, err, sizeof err), -1);
    char want[128];
    snprintf(want, sizeof want, "token 700 at position %d is not below the vocabulary size 600", N - 7);
    ck_assert_msg(strstr(err, want), "%s", err);
    tok_close(&r);
    ck_assert_msg(tok_open(&r, g_path, 1000, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(tok_check_ids(&r, err, sizeof err), 0);
    tok_close(&r);
    free(t);

    uint32_t ids[4] = {1, 2, 3, 999};
    uint64_t fp = 0x0123456789abcdefull;
    ck_assert_msg(tok_write_ids_of(g_path, ids, 4, 1000, fp, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(tok_open(&r, g_path, 1000, err, sizeof err) == 0, "%s", err);
    ck_assert(r.tokenizer == fp);
    ck_assert_int_eq(tok_check_ids(&r, err, sizeof err), 0);
    tok_close(&r);
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
    tcase_add_test(tc, test_masked);
    tcase_add_test(tc, test_permute_bijection);
    tcase_add_test(tc, test_permute_seeded);
    tcase_add_test(tc, test_eos_rows);
    tcase_add_test(tc, test_order_world_size);
    tcase_add_test(tc, test_sequential_is_windows);
    tcase_add_test(tc, test_state_check);
    tcase_add_test(tc, test_check_ids_and_fingerprint);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
