/* rtio: the nvme queue's pipeline API. Transfers started under their own
 * tags round-trip whatever their size (split into pieces) and however
 * many are in flight; an unaligned one is done at once through the bounce
 * buffer; a transfer outside the swap space is refused before anything is
 * queued; a transfer that fails reports its own error and the others
 * theirs (none). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rtio.h"

#define KB 1024u
#define MB (1024u * 1024u)

static char g_dir[256];

static void setup(void) {
    const char *b = getenv("ZINF_BUILD");
    snprintf(g_dir, sizeof g_dir, "%s/tmp-test-rtio-%d", b ? b : "/tmp", (int)getpid());
    ck_assert_int_eq(mkdir(g_dir, 0700), 0);
}

static void teardown(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
}

/* Waits until every tag of tags[0, n) has ended; returns how many failed,
 * the first failure's message in err. */
static int retire_all(RtIo *io, const uint32_t *tags, int n, char *err, size_t errlen) {
    int left = n, failed = 0, done[64] = {0};
    for (int rounds = 0; left > 0 && rounds < 100000; rounds++) {
        char e[1024];
        ck_assert_int_eq(rtio_progress(io, 1, e, sizeof e), 0);
        for (int k = 0; k < n; k++) {
            if (done[k]) continue;
            int r = rtio_finished(io, tags[k], e, sizeof e);
            if (r == 0) continue;
            done[k] = 1;
            left--;
            if (r < 0 && failed++ == 0) snprintf(err, errlen, "%s", e);
        }
    }
    ck_assert_int_eq(left, 0);
    return failed;
}

START_TEST(test_pipeline_round_trip) {
    const char *dirs[1] = {g_dir};
    RtIo io;
    char err[1024] = "";
    ck_assert_msg(rtio_open(&io, dirs, 1, 0, 4 * MB, 8, err, sizeof err) == 0, "%s", err);
    unsigned char *src = aligned_alloc(NVME_ALIGN, 4 * MB), *dst = aligned_alloc(NVME_ALIGN, 4 * MB);
    ck_assert(src && dst);
    fill(src, 4 * MB, 7);
    memset(dst, 0, 4 * MB);
    ck_assert_int_eq(rtio_register(&io, src, 4 * MB, err, sizeof err), 0);
    /* sizes from one block to several pieces; one unaligned in the middle */
    const uint64_t off[6] = {0, 4 * KB, 1 * MB, 1 * MB + 300 * KB, 2 * MB + 100, 3 * MB};
    const uint64_t len[6] = {4 * KB, 600 * KB, 300 * KB, 200 * KB, 5000, 1 * MB};
    uint32_t tags[6];
    for (int k = 0; k < 6; k++) {
        tags[k] = RTIO_TAG_FIRST + (uint32_t)k;
        RtioReq q = {off[k], len[k], src + off[k], 1};
        int r = rtio_start(&io, &q, tags[k], err, sizeof err);
        ck_assert_int_eq(r, k == 4 ? 0 : 1); /* the unaligned one is done at once */
    }
    ck_assert_int_eq(retire_all(&io, tags, 6, err, sizeof err), 0);
    ck_assert_uint_eq(nvme_outstanding(&io.e, NVME_TAG_ALL), 0);
    for (int k = 0; k < 6; k++) {
        RtioReq q = {off[k], len[k], dst + off[k], 0};
        ck_assert_int_ge(rtio_start(&io, &q, tags[k], err, sizeof err), 0);
    }
    ck_assert_int_eq(retire_all(&io, tags, 6, err, sizeof err), 0);
    for (int k = 0; k < 6; k++) ck_assert_msg(memcmp(src + off[k], dst + off[k], len[k]) == 0, "transfer %d", k);
    ck_assert_uint_gt(io.e.stats.fixed_ops, 0);
    rtio_close(&io, 1);
    free(src);
    free(dst);
}
END_TEST

START_TEST(test_pipeline_refusal_and_failure) {
    const char *dirs[1] = {g_dir};
    RtIo io;
    char err[1024] = "";
    ck_assert_msg(rtio_open(&io, dirs, 1, 0, 2 * MB, 8, err, sizeof err) == 0, "%s", err);
    unsigned char *buf = aligned_alloc(NVME_ALIGN, 2 * MB);
    ck_assert_ptr_nonnull(buf);
    fill(buf, 2 * MB, 3);
    RtioReq out = {2 * MB - 4 * KB, 8 * KB, buf, 1};
    ck_assert_int_eq(rtio_start(&io, &out, RTIO_TAG_FIRST, err, sizeof err), -1);
    ck_assert_str_eq(err, "nvme: write of 8192 bytes at 2093056 is outside the 2097152-byte swap space");
    ck_assert_uint_eq(nvme_outstanding(&io.e, NVME_TAG_ALL), 0);
    /* the swap file cut at 1 MiB: a read past it fails with the engine's line, one before it does not */
    ck_assert_int_eq(truncate(io.e.files[0], 1 * MB), 0);
    RtioReq a = {0, 256 * KB, buf, 0}, b = {1 * MB + 128 * KB, 128 * KB, buf + 1 * MB, 0}; /* one piece: one error */
    ck_assert_int_eq(rtio_start(&io, &a, RTIO_TAG_FIRST, err, sizeof err), 1);
    ck_assert_int_eq(rtio_start(&io, &b, RTIO_TAG_FIRST + 1, err, sizeof err), 1);
    uint32_t tags[2] = {RTIO_TAG_FIRST, RTIO_TAG_FIRST + 1};
    ck_assert_int_eq(retire_all(&io, tags, 2, err, sizeof err), 1);
    char want[1024];
    snprintf(want, sizeof want, "nvme: read of 131072 bytes at offset 1179648 in %s failed: Input/output error "
             "(unexpected end of file after 0 of 131072 bytes)", io.e.files[0]);
    ck_assert_str_eq(err, want);
    ck_assert_uint_eq(nvme_outstanding(&io.e, NVME_TAG_ALL), 0);
    rtio_close(&io, 1);
    free(buf);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rtio");
    TCase *tc = tcase_create("rtio");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_pipeline_round_trip);
    tcase_add_test(tc, test_pipeline_refusal_and_failure);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
