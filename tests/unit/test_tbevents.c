/* tbevents: CRC-32C against its published check values, the TFRecord
 * mask, and event files read back by a decoder written here from the
 * format (record framing, both CRCs, the Event and Summary fields); a
 * directory that cannot be made is refused with its name. The tensorboard
 * package reads zinfrun's files in tests/e2e/tensorboard.sh. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tbevents.h"

static char g_dir[256];

static void setup(void) {
    const char *b = getenv("ZINF_BUILD");
    snprintf(g_dir, sizeof g_dir, "%s/tmp-test-tb-%d", b ? b : "/tmp", (int)getpid());
}

static void teardown(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_crc32c_check_values) {
    /* RFC 3720's and the CRC catalogue's check values for CRC-32C */
    ck_assert_uint_eq(tb_crc32c("123456789", 9), 0xe3069283u);
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof ones);
    ck_assert_uint_eq(tb_crc32c(zeros, 32), 0x8a9136aau);
    ck_assert_uint_eq(tb_crc32c(ones, 32), 0x62a8ab43u);
    ck_assert_uint_eq(tb_crc32c("", 0), 0u);
}
END_TEST

START_TEST(test_mask) {
    ck_assert_uint_eq(tb_masked_crc(0), 0xa282ead8u);
    ck_assert_uint_eq(tb_masked_crc(0x80000000u), 0xa283ead8u);
    ck_assert_uint_eq(tb_masked_crc(1), 0xa284ead8u); /* 1 rotated right by 15 is 1 << 17 */
}
END_TEST

/* ---- an independent reader ---- */

typedef struct Rd {
    const uint8_t *p;
    size_t len, at;
} Rd;

static uint64_t rd_varint(Rd *r) {
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        ck_assert_uint_lt(r->at, r->len);
        uint8_t b = r->p[r->at++];
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return v;
    }
    ck_abort_msg("varint too long");
    return 0;
}

static uint64_t rd_le(Rd *r, int n) {
    ck_assert_uint_le(r->at + (size_t)n, r->len);
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)r->p[r->at++] << (8 * i);
    return v;
}

typedef struct Event {
    double wall;
    int64_t step;
    char version[32];
    int nvalues;
    char tags[8][64];
    float values[8];
} Event;

static void decode_value(Rd r, Event *e) {
    int k = e->nvalues++;
    ck_assert_int_lt(k, 8);
    while (r.at < r.len) {
        uint64_t key = rd_varint(&r);
        if (key == (1 << 3 | 2)) {
            uint64_t n = rd_varint(&r);
            ck_assert_uint_lt(n, sizeof e->tags[k]);
            memcpy(e->tags[k], r.p + r.at, n);
            e->tags[k][n] = '\0';
            r.at += n;
        } else if (key == (2 << 3 | 5)) {
            uint32_t u = (uint32_t)rd_le(&r, 4);
            memcpy(&e->values[k], &u, 4);
        } else {
            ck_abort_msg("unexpected Value key %llu", (unsigned long long)key);
        }
    }
}

static void decode_event(const uint8_t *p, size_t len, Event *e) {
    memset(e, 0, sizeof *e);
    Rd r = {p, len, 0};
    while (r.at < r.len) {
        uint64_t key = rd_varint(&r);
        if (key == (1 << 3 | 1)) {
            uint64_t u = rd_le(&r, 8);
            memcpy(&e->wall, &u, 8);
        } else if (key == (2 << 3 | 0)) {
            e->step = (int64_t)rd_varint(&r);
        } else if (key == (3 << 3 | 2)) {
            uint64_t n = rd_varint(&r);
            ck_assert_uint_lt(n, sizeof e->version);
            memcpy(e->version, p + r.at, n);
            r.at += n;
        } else if (key == (5 << 3 | 2)) {
            uint64_t n = rd_varint(&r);
            Rd s = {p + r.at, n, 0};
            r.at += n;
            while (s.at < s.len) {
                ck_assert_uint_eq(rd_varint(&s), 1 << 3 | 2);
                uint64_t m = rd_varint(&s);
                decode_value((Rd){s.p + s.at, m, 0}, e);
                s.at += m;
            }
        } else {
            ck_abort_msg("unexpected Event key %llu", (unsigned long long)key);
        }
    }
}

/* Every record of the file at path, CRCs checked; returns the count. */
static int read_events(const char *path, Event *ev, int max) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    int n = 0;
    uint8_t head[12];
    while (fread(head, 1, 12, f) == 12) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)head[i] << (8 * i);
        uint32_t hc = (uint32_t)head[8] | (uint32_t)head[9] << 8 | (uint32_t)head[10] << 16 | (uint32_t)head[11] << 24;
        ck_assert_uint_eq(hc, tb_masked_crc(tb_crc32c(head, 8)));
        ck_assert_uint_lt(len, 1 << 20);
        uint8_t *data = malloc(len + 4);
        ck_assert_uint_eq(fread(data, 1, len + 4, f), len + 4);
        uint32_t dc = (uint32_t)data[len] | (uint32_t)data[len + 1] << 8 | (uint32_t)data[len + 2] << 16 |
                      (uint32_t)data[len + 3] << 24;
        ck_assert_uint_eq(dc, tb_masked_crc(tb_crc32c(data, len)));
        ck_assert_int_lt(n, max);
        decode_event(data, len, &ev[n++]);
        free(data);
    }
    ck_assert(feof(f));
    fclose(f);
    return n;
}

START_TEST(test_round_trip) {
    char err[512], sub[300];
    snprintf(sub, sizeof sub, "%s/run/a", g_dir); /* parents made */
    TbWriter *w = tb_open(sub, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    ck_assert_ptr_nonnull(strstr(tb_path(w), "/events.out.tfevents."));
    TbScalar s1[] = {{"train/loss", 5.25}, {"train/lr", 3e-4}};
    TbScalar s2[] = {{"train/loss", 4.5}, {"train/lr", 6e-4}, {"perf/tokens_per_s", 123456.0}};
    ck_assert_int_eq(tb_scalars(w, 1, s1, 2, err, sizeof err), 0);
    ck_assert_int_eq(tb_scalars(w, 300, s2, 3, err, sizeof err), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s", tb_path(w));
    ck_assert_int_eq(tb_close(w, err, sizeof err), 0);
    Event ev[4];
    ck_assert_int_eq(read_events(path, ev, 4), 3);
    ck_assert_str_eq(ev[0].version, "brain.Event:2");
    ck_assert_int_eq(ev[0].nvalues, 0);
    ck_assert(ev[0].wall > 1.6e9);
    ck_assert_int_eq(ev[1].step, 1);
    ck_assert_int_eq(ev[1].nvalues, 2);
    ck_assert_str_eq(ev[1].tags[0], "train/loss");
    ck_assert(ev[1].values[0] == 5.25f);
    ck_assert_str_eq(ev[1].tags[1], "train/lr");
    ck_assert(ev[1].values[1] == 3e-4f);
    ck_assert_int_eq(ev[2].step, 300);
    ck_assert_int_eq(ev[2].nvalues, 3);
    ck_assert_str_eq(ev[2].tags[2], "perf/tokens_per_s");
    ck_assert(ev[2].values[2] == 123456.0f);
    ck_assert(ev[2].wall >= ev[1].wall);
}
END_TEST

START_TEST(test_refusals) {
    char err[512], file[300], under[400];
    ck_assert_int_eq(mkdir(g_dir, 0755), 0);
    snprintf(file, sizeof file, "%s/plain", g_dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    snprintf(under, sizeof under, "%s/tb", file);
    ck_assert_ptr_null(tb_open(under, err, sizeof err));
    char want[512];
    snprintf(want, sizeof want, "%s is not a directory", file);
    ck_assert_str_eq(err, want);
    ck_assert_ptr_null(tb_open("", err, sizeof err));
    ck_assert_str_eq(err, "no directory given");
    /* a tag longer than an event holds is refused, not cut */
    TbWriter *w = tb_open(g_dir, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    char tag[600];
    memset(tag, 'x', sizeof tag - 1);
    tag[sizeof tag - 1] = '\0';
    TbScalar s = {tag, 1.0};
    ck_assert_int_eq(tb_scalars(w, 1, &s, 1, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "tag too long: xxxx"));
    ck_assert_int_eq(tb_close(w, err, sizeof err), 0);
    ck_assert_int_eq(tb_close(NULL, err, sizeof err), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tbevents");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_crc32c_check_values);
    tcase_add_test(tc, test_mask);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
