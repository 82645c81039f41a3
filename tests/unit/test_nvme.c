/* nvme: round trips over 1 and 3 paths (ring and synchronous fallback),
 * the striping layout on disk, short-transfer resumption, real end-of-file,
 * refusal of misaligned requests, the error of every failing setup, tags
 * kept in flight and retired one by one (nvme_progress), and registered
 * buffers moved to huge pages with their contents intact. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nvme.h"

#define KB 1024u
#define MB (1024u * 1024u)

static char g_root[256];
static char g_dirs[3][300];

static void rm_tree(const char *dir) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void setup(void) {
    const char *b = getenv("ZINF_BUILD");
    snprintf(g_root, sizeof g_root, "%s/tmp-test-nvme-%d", b ? b : "/tmp", (int)getpid());
    mkdir(g_root, 0700);
    for (int i = 0; i < 3; i++) {
        snprintf(g_dirs[i], sizeof g_dirs[i], "%s/d%d", g_root, i);
        ck_assert_int_eq(mkdir(g_dirs[i], 0700), 0);
    }
}

static void teardown(void) { rm_tree(g_root); }

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void *abuf(size_t n) {
    void *p = aligned_alloc(NVME_ALIGN, n);
    ck_assert_ptr_nonnull(p);
    return p;
}

static void fill_random(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(rnd() >> 32);
}

/* Writes the whole space in random-sized pieces, overwrites random ranges,
 * reads random ranges back, and checks each file against the documented
 * striping formula with plain pread. */
static void round_trip(int npaths, int use_registered, uint64_t debug_max_io) {
    const uint64_t per_path = 1 * MB;
    const uint32_t stripe = 64 * KB;
    const char *paths[3] = {g_dirs[0], g_dirs[1], g_dirs[2]};
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    ck_assert_msg(nvme_open(&e, paths, npaths, 3, per_path, stripe, 8, &err) == NVME_OK, "%s",
                  nvme_error_format(&err, msg, sizeof msg));
    e.debug_max_io = debug_max_io;
    uint64_t cap = per_path * (uint64_t)npaths;
    unsigned char *ref = abuf(cap), *io = abuf(cap), *back = abuf(cap);
    fill_random(ref, cap);
    if (use_registered) {
        void *bufs[2] = {io, back};
        size_t lens[2] = {cap, cap};
        ck_assert_msg(nvme_register_buffers(&e, bufs, lens, 2, &err) == NVME_OK, "%s",
                      nvme_error_format(&err, msg, sizeof msg));
    }
    /* Whole space in pieces of 1..40 pages, each under its own tag. */
    memcpy(io, ref, cap);
    uint32_t tag = 1;
    for (uint64_t off = 0; off < cap;) {
        uint64_t len = (1 + rnd() % 40) * NVME_ALIGN;
        if (len > cap - off) len = cap - off;
        ck_assert_int_eq(nvme_submit_write(&e, off, len, io + off, tag++, &err), NVME_OK);
        off += len;
    }
    ck_assert_msg(nvme_wait(&e, NVME_TAG_ALL, &err) == NVME_OK, "%s", nvme_error_format(&err, msg, sizeof msg));
    ck_assert_uint_eq(nvme_outstanding(&e, NVME_TAG_ALL), 0);
    /* Overwrite 20 random ranges. */
    for (int k = 0; k < 20; k++) {
        uint64_t pages = cap / NVME_ALIGN;
        uint64_t p0 = rnd() % pages, np = 1 + rnd() % 48;
        if (p0 + np > pages) np = pages - p0;
        fill_random(ref + p0 * NVME_ALIGN, np * NVME_ALIGN);
        memcpy(io + p0 * NVME_ALIGN, ref + p0 * NVME_ALIGN, np * NVME_ALIGN);
        ck_assert_int_eq(nvme_submit_write(&e, p0 * NVME_ALIGN, np * NVME_ALIGN, io + p0 * NVME_ALIGN,
                                           (uint32_t)(100 + k), &err),
                         NVME_OK);
        ck_assert_int_eq(nvme_wait(&e, (uint32_t)(100 + k), &err), NVME_OK);
        ck_assert_uint_eq(nvme_outstanding(&e, (uint32_t)(100 + k)), 0);
    }
    /* Random reads, then one full read. */
    for (int k = 0; k < 40; k++) {
        uint64_t pages = cap / NVME_ALIGN;
        uint64_t p0 = rnd() % pages, np = 1 + rnd() % 64;
        if (p0 + np > pages) np = pages - p0;
        memset(back, 0xAB, np * NVME_ALIGN);
        ck_assert_int_eq(nvme_submit_read(&e, p0 * NVME_ALIGN, np * NVME_ALIGN, back, 7, &err), NVME_OK);
        ck_assert_int_eq(nvme_wait(&e, 7, &err), NVME_OK);
        ck_assert_msg(memcmp(back, ref + p0 * NVME_ALIGN, np * NVME_ALIGN) == 0,
                      "read of %llu pages at page %llu differs", (unsigned long long)np,
                      (unsigned long long)p0);
    }
    memset(back, 0, cap);
    ck_assert_int_eq(nvme_submit_read(&e, 0, cap, back, 9, &err), NVME_OK);
    ck_assert_int_eq(nvme_wait(&e, 9, &err), NVME_OK);
    ck_assert(memcmp(back, ref, cap) == 0);
    if (debug_max_io) ck_assert_uint_gt(e.stats.short_resumed, 0);
    if (use_registered && !e.sync) ck_assert_uint_gt(e.stats.fixed_ops, 0);
    ck_assert_uint_ge(e.stats.bytes_read, 2 * cap);

    /* The files hold the stripe units where nvme.h says they are. */
    for (int p = 0; p < npaths; p++) {
        char fn[1024];
        snprintf(fn, sizeof fn, "%s/zinf-rank3.swap", g_dirs[p]);
        FILE *f = fopen(fn, "rb");
        ck_assert_ptr_nonnull(f);
        unsigned char *file = malloc(per_path);
        ck_assert_uint_eq(fread(file, 1, per_path, f), per_path);
        fclose(f);
        for (uint64_t fo = 0; fo < per_path; fo += stripe) {
            uint64_t unit = (fo / stripe) * (uint64_t)npaths + (uint64_t)p;
            ck_assert_msg(memcmp(file + fo, ref + unit * stripe, stripe) == 0,
                          "path %d file offset %llu does not hold stripe unit %llu", p,
                          (unsigned long long)fo, (unsigned long long)unit);
            int mp;
            uint64_t mo;
            nvme_map(&e, unit * stripe + 4096, &mp, &mo);
            ck_assert_int_eq(mp, p);
            ck_assert_uint_eq(mo, fo + 4096);
        }
        free(file);
    }
    nvme_close(&e, 1);
    char fn[1024];
    snprintf(fn, sizeof fn, "%s/zinf-rank3.swap", g_dirs[0]);
    ck_assert_int_ne(access(fn, F_OK), 0);
    free(ref);
    free(io);
    free(back);
}

START_TEST(test_round_trip_1_path) { round_trip(1, 0, 0); }
END_TEST
START_TEST(test_round_trip_3_paths) { round_trip(3, 0, 0); }
END_TEST
START_TEST(test_round_trip_3_paths_registered) { round_trip(3, 1, 0); }
END_TEST
START_TEST(test_short_transfers_resumed) { round_trip(3, 1, 4096); }
END_TEST
START_TEST(test_sync_fallback) {
    nvme_set_options(&(NvmeOptions){.sync = "asked for by the test"});
    const char *paths[1] = {g_dirs[0]};
    NvmeEngine e;
    NvmeError err;
    ck_assert_int_eq(nvme_open(&e, paths, 1, 0, 256 * KB, 64 * KB, 4, &err), NVME_OK);
    ck_assert_int_eq(e.sync, 1);
    ck_assert_str_eq(e.sync_reason, "asked for by the test");
    nvme_close(&e, 1);
    round_trip(1, 0, 0);
    round_trip(3, 1, 8192);
    nvme_set_options(NULL);
}
END_TEST

/* A file shorter than the engine expects: the read comes back short, is
 * resumed, meets end of file and fails naming file, offset and progress. */
START_TEST(test_real_short_read_eof) {
    const char *paths[1] = {g_dirs[0]};
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    ck_assert_int_eq(nvme_open(&e, paths, 1, 0, 256 * KB, 64 * KB, 4, &err), NVME_OK);
    unsigned char *buf = abuf(64 * KB);
    fill_random(buf, 64 * KB);
    ck_assert_int_eq(nvme_submit_write(&e, 64 * KB, 64 * KB, buf, 1, &err), NVME_OK);
    ck_assert_int_eq(nvme_wait(&e, 1, &err), NVME_OK);
    /* Cut the file 8 KiB into the second stripe unit. */
    ck_assert_int_eq(truncate(e.files[0], 72 * KB), 0);
    unsigned char *back = abuf(64 * KB);
    ck_assert_int_eq(nvme_submit_read(&e, 64 * KB, 64 * KB, back, 2, &err), NVME_OK);
    ck_assert_int_eq(nvme_wait(&e, 2, &err), NVME_FAIL);
    nvme_error_format(&err, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "nvme: read of 57344 bytes at offset 73728 in "));
    ck_assert_ptr_nonnull(strstr(msg, e.files[0]));
    ck_assert_ptr_nonnull(strstr(msg, "unexpected end of file after 8192 of 65536 bytes"));
    ck_assert_uint_ge(e.stats.short_resumed, 1);
    ck_assert(memcmp(back, buf, 8 * KB) == 0);
    ck_assert_uint_eq(nvme_outstanding(&e, NVME_TAG_ALL), 0);
    /* The failure was reported once; the tag is clear afterwards. */
    ck_assert_int_eq(nvme_wait(&e, 2, &err), NVME_OK);
    nvme_close(&e, 1);
    free(buf);
    free(back);
}
END_TEST

START_TEST(test_misaligned_refused) {
    const char *paths[2] = {g_dirs[0], g_dirs[1]};
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    ck_assert_int_eq(nvme_open(&e, paths, 2, 0, 256 * KB, 64 * KB, 4, &err), NVME_OK);
    unsigned char *buf = abuf(64 * KB);
    ck_assert_int_eq(nvme_submit_write(&e, 100, 4096, buf, 1, &err), NVME_FAIL);
    ck_assert_str_eq(nvme_error_format(&err, msg, sizeof msg),
                     "nvme: write of 4096 bytes at logical offset 100 refused: offset 100 is not a "
                     "multiple of 4096 (O_DIRECT)");
    ck_assert_int_eq(nvme_submit_read(&e, 4096, 1000, buf, 1, &err), NVME_FAIL);
    ck_assert_str_eq(nvme_error_format(&err, msg, sizeof msg),
                     "nvme: read of 1000 bytes at logical offset 4096 refused: length 1000 is not a "
                     "multiple of 4096 (O_DIRECT)");
    ck_assert_int_eq(nvme_submit_read(&e, 4096, 4096, buf + 512, 1, &err), NVME_FAIL);
    ck_assert_ptr_nonnull(strstr(nvme_error_format(&err, msg, sizeof msg), "buffer address"));
    ck_assert_int_eq(nvme_submit_read(&e, 512 * KB - 4096, 8192, buf, 1, &err), NVME_FAIL);
    ck_assert_ptr_nonnull(strstr(nvme_error_format(&err, msg, sizeof msg),
                                 "beyond the end of the 524288-byte swap space"));
    ck_assert_int_eq(nvme_submit_read(&e, 0, 4096, buf, NVME_TAG_ALL, &err), NVME_FAIL);
    ck_assert_uint_eq(nvme_outstanding(&e, NVME_TAG_ALL), 0);
    ck_assert_uint_eq(e.stats.ops, 0);
    void *bad[1] = {buf + 8};
    size_t lens[1] = {4096};
    ck_assert_int_eq(nvme_register_buffers(&e, bad, lens, 1, &err), NVME_FAIL);
    ck_assert_ptr_nonnull(strstr(nvme_error_format(&err, msg, sizeof msg), "not 4096-byte aligned"));
    nvme_close(&e, 1);
    free(buf);
}
END_TEST

START_TEST(test_bad_arguments) {
    const char *paths[1] = {g_dirs[0]};
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    ck_assert_int_eq(nvme_open(&e, paths, 1, 0, 256 * KB, 1000, 4, &err), NVME_FAIL);
    ck_assert_ptr_nonnull(strstr(nvme_error_format(&err, msg, sizeof msg), "stripe 1000"));
    ck_assert_int_eq(nvme_open(&e, paths, 1, 0, 100 * KB, 64 * KB, 4, &err), NVME_FAIL);
    ck_assert_ptr_nonnull(strstr(nvme_error_format(&err, msg, sizeof msg), "not a positive multiple of the stripe"));
    ck_assert_int_eq(nvme_open(&e, paths, 0, 0, 256 * KB, 64 * KB, 4, &err), NVME_FAIL);
    ck_assert_int_eq(nvme_open(&e, paths, 1, 0, 256 * KB, 64 * KB, 0, &err), NVME_FAIL);
    const char *twice[2] = {g_dirs[0], g_dirs[0]};
    ck_assert_int_eq(nvme_open(&e, twice, 2, 0, 256 * KB, 64 * KB, 4, &err), NVME_FAIL);
    ck_assert_ptr_nonnull(strstr(nvme_error_format(&err, msg, sizeof msg), "given twice"));
    nvme_close(&e, 0); /* closing a failed engine is harmless */
}
END_TEST

START_TEST(test_missing_dir) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/no/such/dir", g_root);
    const char *paths[2] = {g_dirs[0], dir};
    NvmeEngine e;
    NvmeError err;
    char msg[2048], want[4096];
    ck_assert_int_eq(nvme_open(&e, paths, 2, 1, 256 * KB, 64 * KB, 4, &err), NVME_FAIL);
    ck_assert_int_eq(err.err, ENOENT);
    snprintf(want, sizeof want,
             "nvme: open of %s/zinf-rank1.swap failed: No such file or directory (swap directory %s "
             "does not exist)",
             dir, dir);
    ck_assert_str_eq(nvme_error_format(&err, msg, sizeof msg), want);
    /* The file created in the first path before the failure is removed. */
    char fn[1024];
    snprintf(fn, sizeof fn, "%s/zinf-rank1.swap", g_dirs[0]);
    ck_assert_int_ne(access(fn, F_OK), 0);
}
END_TEST

START_TEST(test_file_instead_of_dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/plainfile", g_root);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    const char *paths[1] = {path};
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    ck_assert_int_eq(nvme_open(&e, paths, 1, 0, 256 * KB, 64 * KB, 4, &err), NVME_FAIL);
    ck_assert_int_eq(err.err, ENOTDIR);
    ck_assert_ptr_nonnull(strstr(nvme_error_format(&err, msg, sizeof msg), "is not a directory"));
    ck_assert_ptr_nonnull(strstr(msg, path));
}
END_TEST

/* Read-only directory: permission bits do not stop root, so use a read-only
 * bind mount (EROFS), which does. */
START_TEST(test_read_only_dir) {
    const char *dir = g_dirs[2];
    if (mount(dir, dir, NULL, MS_BIND, NULL) != 0) {
        fprintf(stderr, "SKIP test_read_only_dir: bind mount not permitted (%s)\n", strerror(errno));
        return;
    }
    if (mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0) {
        fprintf(stderr, "SKIP test_read_only_dir: read-only remount not permitted\n");
        umount(dir);
        return;
    }
    const char *paths[1] = {dir};
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    NvmeStatus st = nvme_open(&e, paths, 1, 0, 256 * KB, 64 * KB, 4, &err);
    umount(dir);
    ck_assert_int_eq(st, NVME_FAIL);
    ck_assert_int_eq(err.err, EROFS);
    nvme_error_format(&err, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "nvme: open of "));
    ck_assert_ptr_nonnull(strstr(msg, "zinf-rank0.swap failed: Read-only file system (swap directory is not writable)"));
}
END_TEST

/* A full device: a 1 MiB tmpfs when mounting is allowed, else a file size
 * limit (EFBIG) which the engine reports the same way. */
START_TEST(test_no_space) {
    const char *dir = g_dirs[1];
    int mounted = mount("tmpfs", dir, "tmpfs", 0, "size=1m") == 0;
    struct rlimit old;
    if (!mounted) {
        fprintf(stderr, "note: tmpfs mount refused (%s); using RLIMIT_FSIZE\n", strerror(errno));
        signal(SIGXFSZ, SIG_IGN);
        getrlimit(RLIMIT_FSIZE, &old);
        struct rlimit lim = {1 * MB, old.rlim_max};
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    }
    const char *paths[1] = {dir};
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    NvmeStatus st = nvme_open(&e, paths, 1, 0, 4 * MB, 64 * KB, 4, &err);
    char fn[1024];
    snprintf(fn, sizeof fn, "%s/zinf-rank0.swap", dir);
    int left = access(fn, F_OK) == 0;
    if (mounted) umount(dir);
    else setrlimit(RLIMIT_FSIZE, &old);
    ck_assert_int_eq(st, NVME_FAIL);
    nvme_error_format(&err, msg, sizeof msg);
    char want[2048];
    snprintf(want, sizeof want, "nvme: fallocate of 4194304 bytes at offset 0 in %s failed: %s", fn,
             mounted ? "No space left on device" : "File too large");
    ck_assert_msg(strncmp(msg, want, strlen(want)) == 0, "got: %s", msg);
    ck_assert_int_eq(left, 0);
}
END_TEST

START_TEST(test_error_format) {
    NvmeError e;
    memset(&e, 0, sizeof e);
    e.err = ENOSPC;
    strcpy(e.op, "write");
    strcpy(e.path, "/nvme/zinf-rank0.swap");
    e.offset = 4096;
    e.len = 1048576;
    char msg[512];
    ck_assert_str_eq(nvme_error_format(&e, msg, sizeof msg),
                     "nvme: write of 1048576 bytes at offset 4096 in /nvme/zinf-rank0.swap failed: No "
                     "space left on device");
    e.err = EIO;
    strcpy(e.op, "read");
    ck_assert_str_eq(nvme_error_format(&e, msg, sizeof msg),
                     "nvme: read of 1048576 bytes at offset 4096 in /nvme/zinf-rank0.swap failed: "
                     "Input/output error");
    /* Truncation is safe. */
    char small[16];
    nvme_error_format(&e, small, sizeof small);
    ck_assert_str_eq(small, "nvme: read of 1");
}
END_TEST

/* Waiting on one tag leaves the others' work to finish later. */
START_TEST(test_tags_independent) {
    const char *paths[3] = {g_dirs[0], g_dirs[1], g_dirs[2]};
    NvmeEngine e;
    NvmeError err;
    ck_assert_int_eq(nvme_open(&e, paths, 3, 0, 1 * MB, 64 * KB, 2, &err), NVME_OK);
    unsigned char *a = abuf(1 * MB), *b = abuf(1 * MB);
    fill_random(a, MB);
    fill_random(b, MB);
    ck_assert_int_eq(nvme_submit_write(&e, 0, MB, a, 1, &err), NVME_OK);
    ck_assert_int_eq(nvme_submit_write(&e, MB, MB, b, 2, &err), NVME_OK);
    ck_assert_uint_gt(nvme_outstanding(&e, 2), 0);
    ck_assert_int_eq(nvme_wait(&e, 1, &err), NVME_OK);
    ck_assert_uint_eq(nvme_outstanding(&e, 1), 0);
    ck_assert_int_eq(nvme_wait(&e, 2, &err), NVME_OK);
    unsigned char *c = abuf(2 * MB);
    ck_assert_int_eq(nvme_submit_read(&e, 0, 2 * MB, c, 5, &err), NVME_OK);
    ck_assert_int_eq(nvme_wait(&e, NVME_TAG_ALL, &err), NVME_OK);
    ck_assert(memcmp(c, a, MB) == 0 && memcmp(c + MB, b, MB) == 0);
    nvme_close(&e, 1);
    free(a);
    free(b);
    free(c);
}
END_TEST

/* Several tags in flight, retired as each ends (nvme_progress and
 * nvme_tag_done, the executor's pipeline): a batch is submitted only by
 * progress, every tag ends, a failing one reports its own error and the
 * others theirs (none), and the data round-trips. */
START_TEST(test_progress_tags) {
    const char *paths[3] = {g_dirs[0], g_dirs[1], g_dirs[2]};
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    ck_assert_int_eq(nvme_open(&e, paths, 3, 0, 1 * MB, 64 * KB, 4, &err), NVME_OK);
    unsigned char *a = abuf(3 * MB), *b = abuf(3 * MB);
    fill_random(a, 3 * MB);
    memset(b, 0, 3 * MB);
    nvme_batch_begin(&e);
    for (uint32_t t = 0; t < 12; t++) /* 12 tags of 256 KiB, 4 chunks each */
        ck_assert_int_eq(nvme_submit_write(&e, t * 256 * KB, 256 * KB, a + t * 256 * KB, 10 + t, &err), NVME_OK);
    ck_assert_uint_eq(e.stats.submits, 0); /* queued only */
    int left = 12, seen[12] = {0};
    for (int rounds = 0; left > 0 && rounds < 10000; rounds++) {
        ck_assert_int_eq(nvme_progress(&e, 1, &err), NVME_OK);
        ck_assert_int_le(e.inflight, 4);
        for (uint32_t t = 0; t < 12; t++)
            if (!seen[t] && nvme_tag_done(&e, 10 + t)) {
                ck_assert_int_eq(nvme_wait(&e, 10 + t, &err), NVME_OK);
                seen[t] = 1;
                left--;
            }
    }
    ck_assert_int_eq(left, 0);
    ck_assert_uint_eq(nvme_outstanding(&e, NVME_TAG_ALL), 0);
    ck_assert_int_eq(nvme_progress(&e, 1, &err), NVME_OK); /* nothing in flight: returns */
    /* read back in 3 tags; the file of path 2 cut short: the tag reading
     * from it fails with its own message, the others do not */
    ck_assert_int_eq(truncate(e.files[2], 64 * KB), 0);
    nvme_batch_begin(&e);
    ck_assert_int_eq(nvme_submit_read(&e, 0, 128 * KB, b, 1, &err), NVME_OK);          /* paths 0, 1 */
    ck_assert_int_eq(nvme_submit_read(&e, 128 * KB, 64 * KB, b + 128 * KB, 2, &err), NVME_OK); /* path 2, unit 0 */
    ck_assert_int_eq(nvme_submit_read(&e, 320 * KB, 64 * KB, b + 320 * KB, 3, &err), NVME_OK); /* path 2, its unit 1: past its end */
    int done[4] = {0}, fails = 0;
    for (int rounds = 0; (!done[1] || !done[2] || !done[3]) && rounds < 10000; rounds++) {
        ck_assert_int_eq(nvme_progress(&e, 1, &err), NVME_OK);
        for (uint32_t t = 1; t <= 3; t++)
            if (!done[t] && nvme_tag_done(&e, t)) {
                done[t] = 1;
                if (nvme_wait(&e, t, &err) != NVME_OK) {
                    fails++;
                    ck_assert_uint_eq(t, 3);
                    nvme_error_format(&err, msg, sizeof msg);
                    ck_assert_ptr_nonnull(strstr(msg, "nvme: read of 65536 bytes at offset 65536 in "));
                    ck_assert_ptr_nonnull(strstr(msg, "unexpected end of file after 0 of 65536 bytes"));
                }
            }
    }
    ck_assert_int_eq(fails, 1);
    ck_assert(memcmp(a, b, 192 * KB) == 0);
    nvme_close(&e, 1);
    free(a);
    free(b);
}
END_TEST

/* Registration backs the buffers' whole 2 MiB pages with huge pages where
 * the kernel agrees, and never changes their contents;
 * NvmeOptions.no_huge_pages leaves them be. */
START_TEST(test_register_huge_pages) {
    const char *paths[1] = {g_dirs[0]};
    for (int off = 0; off < 2; off++) {
        nvme_set_options(&(NvmeOptions){.no_huge_pages = off});
        NvmeEngine e;
        NvmeError err;
        ck_assert_int_eq(nvme_open(&e, paths, 1, 0, 8 * MB, 64 * KB, 8, &err), NVME_OK);
        const size_t n = 6 * MB + 64 * KB;
        unsigned char *buf = aligned_alloc(2 * MB, 8 * MB), *ref = abuf(n);
        ck_assert_ptr_nonnull(buf);
        unsigned char *p = buf + 64 * KB; /* not on a huge page: its first 2 MiB page is the one at buf + 2 MiB */
        fill_random(ref, n);
        memcpy(p, ref, n);
        void *bufs[1] = {p};
        size_t lens[1] = {n};
        ck_assert_int_eq(nvme_register_buffers(&e, bufs, lens, 1, &err), NVME_OK);
        ck_assert_uint_eq(e.reg_bytes, n);
        ck_assert_uint_eq(e.huge_bytes % (2 * MB), 0);
        ck_assert_uint_le(e.huge_bytes, 4 * MB); /* the pages at buf + 2 and 4 MiB, at most */
        if (off) ck_assert_uint_eq(e.huge_bytes, 0);
        ck_assert(memcmp(p, ref, n) == 0);
        ck_assert_int_eq(nvme_submit_write(&e, 0, n, p, 1, &err), NVME_OK);
        ck_assert_int_eq(nvme_wait(&e, 1, &err), NVME_OK);
        memset(p, 0, n);
        ck_assert_int_eq(nvme_submit_read(&e, 0, n, p, 1, &err), NVME_OK);
        ck_assert_int_eq(nvme_wait(&e, 1, &err), NVME_OK);
        ck_assert(memcmp(p, ref, n) == 0);
        ck_assert_uint_eq(e.stats.fixed_ops, e.stats.ops);
        nvme_close(&e, 1);
        free(buf);
        free(ref);
    }
    nvme_set_options(NULL);
}
END_TEST

/* A second open of existing files keeps their contents. */
START_TEST(test_reopen_keeps_data) {
    const char *paths[2] = {g_dirs[0], g_dirs[1]};
    NvmeEngine e;
    NvmeError err;
    unsigned char *a = abuf(256 * KB), *b = abuf(256 * KB);
    fill_random(a, 256 * KB);
    ck_assert_int_eq(nvme_open(&e, paths, 2, 0, 256 * KB, 64 * KB, 4, &err), NVME_OK);
    ck_assert_int_eq(nvme_submit_write(&e, 128 * KB, 256 * KB, a, 1, &err), NVME_OK);
    ck_assert_int_eq(nvme_wait(&e, NVME_TAG_ALL, &err), NVME_OK);
    nvme_close(&e, 0);
    ck_assert_int_eq(nvme_open(&e, paths, 2, 0, 256 * KB, 64 * KB, 4, &err), NVME_OK);
    ck_assert_int_eq(nvme_submit_read(&e, 128 * KB, 256 * KB, b, 1, &err), NVME_OK);
    ck_assert_int_eq(nvme_wait(&e, NVME_TAG_ALL, &err), NVME_OK);
    ck_assert(memcmp(a, b, 256 * KB) == 0);
    nvme_close(&e, 1);
    free(a);
    free(b);
}
END_TEST

/* A swap file has one live owner: a second engine on the same directory
 * and rank is refused by name, and takes the file over once it is free. */
START_TEST(test_one_owner) {
    const char *paths[1] = {g_dirs[0]};
    NvmeEngine a, b;
    NvmeError err;
    ck_assert_int_eq(nvme_open(&a, paths, 1, 3, 256 * KB, 64 * KB, 4, &err), NVME_OK);
    ck_assert_int_eq(nvme_open(&b, paths, 1, 3, 256 * KB, 64 * KB, 4, &err), NVME_FAIL);
    char msg[1024];
    nvme_error_format(&err, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "zinf-rank3.swap") && strstr(msg, "in use by another live process"), "%s", msg);
    /* the refused open left the owner's file alone */
    char path[400];
    snprintf(path, sizeof path, "%s/zinf-rank3.swap", g_dirs[0]);
    ck_assert_int_eq(access(path, F_OK), 0);
    ck_assert_int_eq(nvme_open(&b, paths, 1, 4, 256 * KB, 64 * KB, 4, &err), NVME_OK);
    nvme_close(&b, 1);
    nvme_close(&a, 0);
    ck_assert_int_eq(nvme_open(&b, paths, 1, 3, 256 * KB, 64 * KB, 4, &err), NVME_OK);
    nvme_close(&b, 1);
    ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("nvme");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_round_trip_1_path);
    tcase_add_test(tc, test_round_trip_3_paths);
    tcase_add_test(tc, test_round_trip_3_paths_registered);
    tcase_add_test(tc, test_short_transfers_resumed);
    tcase_add_test(tc, test_sync_fallback);
    tcase_add_test(tc, test_real_short_read_eof);
    tcase_add_test(tc, test_misaligned_refused);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_missing_dir);
    tcase_add_test(tc, test_file_instead_of_dir);
    tcase_add_test(tc, test_read_only_dir);
    tcase_add_test(tc, test_no_space);
    tcase_add_test(tc, test_error_format);
    tcase_add_test(tc, test_tags_independent);
    tcase_add_test(tc, test_progress_tags);
    tcase_add_test(tc, test_register_huge_pages);
    tcase_add_test(tc, test_reopen_keeps_data);
    tcase_add_test(tc, test_one_owner);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
