/* packing: best-fit rows hold every sample once, whole, in input order
 * within a row; the first token of each sample and the padding are
 * untrained; the same seed gives the same rows and another seed others;
 * lengths drawn log-normally around T/8 pack at 95% or better; a sample
 * longer than a row is refused to the letter. The packed token file
 * (tokens.h, version 4): round trip, each input's sample start, the data
 * order's rows of it, and every corrupt sample table refused with a
 * message naming the file and the fault. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dataorder.h"
#include "packing.h"
#include "tokens.h"

static char g_path[256];

static void setup(void) {
    const char *b = getenv("ZINF_BUILD");
    snprintf(g_path, sizeof g_path, "%s/tmp-test-packing-%d.bin", b ? b : "/tmp", (int)getpid());
}
static void teardown(void) { unlink(g_path); }

/* n samples of lengths len[], ids k*1000 + i (sample k, token i), all trained */
typedef struct Samples {
    uint32_t *ids;
    uint8_t *trained;
    size_t *ends;
    int64_t n;
} Samples;

static Samples make_samples(const int64_t *len, int64_t n) {
    Samples s = {0};
    size_t total = 0;
    for (int64_t k = 0; k < n; k++) total += (size_t)len[k];
    s.ids = malloc(sizeof *s.ids * (total + 1));
    s.trained = malloc(total + 1);
    s.ends = malloc(sizeof *s.ends * (size_t)(n + 1));
    s.n = n;
    size_t at = 0;
    for (int64_t k = 0; k < n; k++) {
        for (int64_t i = 0; i < len[k]; i++) {
            s.ids[at] = (uint32_t)(k * 1000 + i);
            s.trained[at++] = 1;
        }
        s.ends[k] = at;
    }
    return s;
}

static void free_samples(Samples *s) {
    free(s->ids);
    free(s->trained);
    free(s->ends);
}

/* every sample once, whole, in order within its row; masks as packing.h says */
static void check_rows(const PackRows *r, const int64_t *len, int64_t n, uint32_t pad) {
    int64_t cap = r->T + 1, real = 0;
    int *seen = calloc((size_t)n, sizeof *seen);
    for (int64_t i = 0; i < r->rows; i++) {
        const uint32_t *row = r->ids + i * cap;
        const uint8_t *tr = r->trained + i * cap;
        int64_t last = -1, end = 0;
        for (int32_t j = r->row_first[i]; j < r->row_first[i + 1]; j++) {
            int64_t a = r->starts[j], k = row[a] / 1000;
            ck_assert_int_eq(a, end);
            ck_assert_int_lt(k, n);
            ck_assert_int_gt(k, last);
            last = k;
            ck_assert_int_eq(seen[k]++, 0);
            for (int64_t t = 0; t < len[k]; t++) {
                ck_assert_uint_eq(row[a + t], (uint32_t)(k * 1000 + t));
                ck_assert_int_eq(tr[a + t], t > 0);
            }
            end = a + len[k];
        }
        for (int64_t t = end; t < cap; t++) {
            ck_assert_uint_eq(row[t], pad);
            ck_assert_int_eq(tr[t], 0);
        }
        real += end;
    }
    for (int64_t k = 0; k < n; k++) ck_assert_int_eq(seen[k], 1);
    ck_assert_int_eq(real, r->real);
    free(seen);
}

START_TEST(test_pack_rows) {
    const int64_t len[] = {5, 9, 3, 17, 1, 8, 8, 2, 12, 4, 6, 10};
    int64_t n = sizeof len / sizeof *len;
    Samples s = make_samples(len, n);
    PackRows a, b, c;
    char err[512];
    ck_assert_msg(pack_samples(s.ids, s.trained, s.ends, n, 16, 7, 3, &a, err, sizeof err) == 0, "%s", err);
    check_rows(&a, len, n, 7);
    ck_assert_int_eq(a.samples, n);
    /* 85 tokens in rows of 17: best fit decreasing fills 5 rows exactly */
    ck_assert_int_eq(a.rows, 5);
    ck_assert_msg(pack_efficiency(&a) == 1.0, "efficiency %g", pack_efficiency(&a));
    ck_assert_int_eq(pack_samples(s.ids, s.trained, s.ends, n, 16, 7, 3, &b, err, sizeof err), 0);
    ck_assert_int_eq(a.rows, b.rows);
    ck_assert(!memcmp(a.ids, b.ids, sizeof *a.ids * (size_t)(a.rows * 17)));
    ck_assert(!memcmp(a.starts, b.starts, sizeof *a.starts * (size_t)n));
    /* another seed: other rows order */
    bool differs = false;
    for (uint64_t seed = 4; seed < 12 && !differs; seed++) {
        ck_assert_int_eq(pack_samples(s.ids, s.trained, s.ends, n, 16, 7, seed, &c, err, sizeof err), 0);
        check_rows(&c, len, n, 7);
        differs = memcmp(a.ids, c.ids, sizeof *a.ids * (size_t)(a.rows * 17)) != 0;
        pack_rows_free(&c);
    }
    ck_assert_msg(differs, "the seed changes nothing");
    pack_rows_free(&a);
    pack_rows_free(&b);
    /* a sample longer than T+1 */
    ck_assert_int_eq(pack_samples(s.ids, s.trained, s.ends, n, 15, 7, 3, &a, err, sizeof err), -1);
    ck_assert_str_eq(err, "sample 4 (of 12) has 17 tokens, more than a row of T+1 = 16: cut the samples to fit "
                          "(JSONL samples: --max-tokens 16)");
    free_samples(&s);
}
END_TEST

/* lengths log-normal around T/8 (sigma 0.8, 1..T+1): at least 95% of the row tokens are samples' */
START_TEST(test_pack_efficiency) {
    enum { N = 20000, TT = 2048 };
    int64_t *len = malloc(sizeof *len * N);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        double u[2];
        for (int j = 0; j < 2; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            u[j] = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
        }
        double z = sqrt(-2 * log(u[0])) * cos(2 * M_PI * u[1]);
        double l = exp(log(TT / 8.0) + 0.8 * z);
        len[i] = l < 1 ? 1 : l > TT + 1 ? TT + 1 : (int64_t)l;
    }
    PackPlan p;
    char err[256];
    ck_assert_int_eq(pack_best_fit(len, N, TT + 1, 1, &p, err, sizeof err), 0);
    int64_t total = 0;
    for (int i = 0; i < N; i++) total += len[i];
    double eff = (double)total / ((double)p.rows * (TT + 1));
    ck_assert_msg(eff >= 0.95, "efficiency %.4f", eff);
    pack_plan_free(&p);
    free(len);
}
END_TEST

static void write_packed(const PackRows *r) {
    char err[512];
    ck_assert_msg(tok_write_packed(g_path, r->ids, r->trained, r->rows, r->T, r->row_first, r->starts, r->samples,
                                   20000, 0, err, sizeof err) == 0, "%s", err);
}

START_TEST(test_packed_file) {
    const int64_t len[] = {5, 9, 3, 17, 1, 8, 8, 2, 12, 4, 6, 10};
    int64_t n = sizeof len / sizeof *len;
    Samples s = make_samples(len, n);
    PackRows a;
    char err[512];
    ck_assert_int_eq(pack_samples(s.ids, s.trained, s.ends, n, 16, 7, 3, &a, err, sizeof err), 0);
    write_packed(&a);
    TokReader r;
    ck_assert_msg(tok_open(&r, g_path, 20000, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.version, TOK_VERSION_PACKED);
    ck_assert_int_eq(r.pack_T, 16);
    ck_assert_int_eq(r.pack_rows, a.rows);
    ck_assert_int_eq(r.ntokens, a.rows * 17);
    int32_t seg[16];
    for (int64_t i = 0; i < a.rows; i++) {
        ck_assert_int_eq(tok_row_segments(&r, i, seg, err, sizeof err), 0);
        for (int t = 0; t < 16; t++) {
            int32_t want = 0;
            for (int32_t j = a.row_first[i]; j < a.row_first[i + 1]; j++)
                if (a.starts[j] <= t) want = a.starts[j];
            ck_assert_int_eq(seg[t], want);
        }
    }
    /* the data order: rows of the file, in either order; the model's T must be the file's */
    DataOrder d;
    DordOptions o = {DORD_SHUFFLE, 5, -1};
    ck_assert_msg(dord_open(&d, &r, &o, 2, 16, 1, err, sizeof err) == 0, "%s", err);
    ck_assert(d.packed);
    ck_assert_int_eq(d.rows, a.rows);
    int32_t tok[32], tgt[32], sg[32];
    ck_assert_int_eq(dord_batch(&d, 0, 1, tok, tgt, err, sizeof err), 0);
    ck_assert_int_eq(dord_segments(&d, 0, 1, sg, err, sizeof err), 0);
    for (int b = 0; b < 2; b++) {
        int64_t row = dord_global_row_start(&d, 2 + b) / 17;
        ck_assert_int_eq(tok_row_segments(&r, row, seg, err, sizeof err), 0);
        ck_assert(!memcmp(seg, sg + b * 16, sizeof seg));
        for (int t = 0; t < 16; t++) {
            ck_assert_int_eq(tok[b * 16 + t], (int32_t)a.ids[row * 17 + t]);
            ck_assert_int_eq(tgt[b * 16 + t], a.trained[row * 17 + t + 1] ? (int32_t)a.ids[row * 17 + t + 1] : -1);
        }
    }
    dord_close(&d);
    ck_assert_int_eq(dord_open(&d, &r, &o, 2, 15, 1, err, sizeof err), -1);
    char want[800];
    snprintf(want, sizeof want, "%s: packed into rows of T = 16 tokens, but the model's T is 15: pack the samples again "
             "with zinftok --pack 15", g_path);
    ck_assert_str_eq(err, want);
    o.eos = 3;
    ck_assert_int_eq(dord_open(&d, &r, &o, 2, 16, 1, err, sizeof err), -1);
    snprintf(want, sizeof want, "--eos does not apply to %s: a packed file's rows are its samples already", g_path);
    ck_assert_str_eq(err, want);
    tok_close(&r);
    pack_rows_free(&a);
    free_samples(&s);
}
END_TEST

/* Overwrites the int32 at byte `at` of the file. */
static void poke(long at, int32_t v) {
    FILE *f = fopen(g_path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, at, SEEK_SET);
    fwrite(&v, 4, 1, f);
    fclose(f);
}

static void expect_open_error(const char *want) {
    TokReader r;
    char err[512], full[800];
    ck_assert_int_eq(tok_open(&r, g_path, 0, err, sizeof err), -1);
    snprintf(full, sizeof full, "%s: %s", g_path, want);
    ck_assert_str_eq(err, full);
}

START_TEST(test_corrupt_table) {
    /* rows of T+1 = 5: [0 2] [0] */
    uint32_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    uint8_t tr[10] = {0, 1, 0, 1, 0, 0, 1, 1, 0, 0};
    int32_t first[3] = {0, 2, 3}, starts[3] = {0, 2, 0};
    char err[512];
    ck_assert_int_eq(tok_write_packed(g_path, ids, tr, 2, 4, first, starts, 3, 100, 0, err, sizeof err), 0);
    long table = 1024 + 2 * 10 + 2; /* after the ids and the mask */
    poke(table + 4 * 3 + 4, 7);       /* row 0's second start past T+1 */
    expect_open_error("corrupt sample table: row 0's sample 1 starts at token 7 (starts run from 0 upwards, below T+1 = 5)");
    poke(table + 4 * 3 + 4, 2);
    poke(table + 4 * 3 + 8, 1);       /* row 1's first start not 0 */
    expect_open_error("corrupt sample table: row 1's sample 0 starts at token 1 (starts run from 0 upwards, below T+1 = 5)");
    poke(table + 4 * 3 + 8, 0);
    poke(table + 4, 0);               /* row 0 holds no sample */
    expect_open_error("corrupt sample table: row 0 has samples 0..-1 (of 3)");
    poke(table + 4, 2);
    poke(table + 8, 2);
    expect_open_error("corrupt sample table: the row offsets run from 0 to 2, expected 0 to 3");
    poke(table + 8, 3);
    poke(4 * 9, 3);                   /* header: 3 rows of 5 for 10 tokens */
    expect_open_error("corrupt packed header: 3 rows of T+1 = 5 tokens and 3 samples for 10 tokens");
    poke(4 * 9, 2);
    TokReader r;
    ck_assert_msg(tok_open(&r, g_path, 0, err, sizeof err) == 0, "%s", err);
    tok_close(&r);
    /* the writer checks the table too */
    starts[1] = 0;
    ck_assert_int_eq(tok_write_packed(g_path, ids, tr, 2, 4, first, starts, 3, 100, 0, err, sizeof err), -1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("packing");
    TCase *tc = tcase_create("packing");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pack_rows);
    tcase_add_test(tc, test_pack_efficiency);
    tcase_add_test(tc, test_packed_file);
    tcase_add_test(tc, test_corrupt_table);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
