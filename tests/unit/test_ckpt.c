/* ckpt: shards round-trip, corruption and truncation are caught, incomplete
 * checkpoints are skipped, a full disk leaves the previous one loadable, and
 * the safetensors layout is right. */
#include <check.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "ckpt.h"

static char root[256];

static void setup(void) {
    snprintf(root, sizeof root, "/tmp/zinf-test-ckpt-%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    ck_assert_int_eq(system(cmd), 0);
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", root);
}

static float A[1000], Bv[37];
static void fill(int step) {
    for (int i = 0; i < 1000; i++) A[i] = (float)(i * step) * 0.5f;
    for (int i = 0; i < 37; i++) Bv[i] = (float)-i - (float)step;
}

static int write_ckpt_of(int step, int world, uint64_t hash) {
    char err[512];
    fill(step);
    CkptEntry e[2] = {{"w", 1, sizeof A, A}, {"master.w", 1, sizeof Bv, Bv}};
    for (int r = 0; r < world; r++)
        if (ckpt_write_shard(root, step, r, world, hash, e, 2, err, sizeof err)) return -1;
    return ckpt_write_manifest(root, step, world, hash, "tiny", "{\"loss_scale\": 1, \"tokens\": 42}", err, sizeof err);
}
static int write_ckpt(int step, int world) { return write_ckpt_of(step, world, 0xabcdef); }

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}
static bool step_exists(int step) {
    char d[400];
    return exists(ckpt_step_dir(root, step, d, sizeof d));
}

static int read_ckpt(int step, int rank, int world, char *err, size_t n) {
    memset(A, 0, sizeof A);
    memset(Bv, 0, sizeof Bv);
    CkptEntry e[2] = {{"w", 1, sizeof A, A}, {"master.w", 1, sizeof Bv, Bv}};
    return ckpt_read_shard(root, step, rank, world, 0xabcdef, e, 2, err, n);
}

static char *shard_path(int step, int rank) {
    static char p[512], d[400];
    ckpt_step_dir(root, step, d, sizeof d);
    snprintf(p, sizeof p, "%s/rank-%05d.zck", d, rank);
    return p;
}

START_TEST(test_round_trip) {
    ck_assert_int_eq(write_ckpt(10, 2), 0);
    char err[512];
    ck_assert_int_eq(read_ckpt(10, 1, 2, err, sizeof err), 0);
    ck_assert_float_eq(A[999], 999 * 10 * 0.5f);
    ck_assert_float_eq(Bv[36], -46.0f);
    int64_t s = -1;
    ck_assert_int_eq(ckpt_find_latest(root, 2, 0xabcdef, &s, NULL, 0, err, sizeof err), 1);
    ck_assert_int_eq(s, 10);
    char *st = ckpt_read_state(root, 10, err, sizeof err);
    ck_assert_ptr_nonnull(st);
    ck_assert_str_eq(st, "{\"loss_scale\": 1, \"tokens\": 42}");
    free(st);
    /* A different world size or plan finds nothing. */
    ck_assert_int_eq(ckpt_find_latest(root, 4, 0xabcdef, &s, NULL, 0, err, sizeof err), 0);
    ck_assert_int_eq(ckpt_find_latest(root, 2, 0x1234, &s, NULL, 0, err, sizeof err), 0);
}
END_TEST

START_TEST(test_corruption) {
    ck_assert_int_eq(write_ckpt(5, 1), 0);
    char *p = shard_path(5, 0);
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    /* Flip one byte at several places: header, entry header, data, trailer. */
    long where[] = {3, 45, 60, 2000, (long)st.st_size - 1};
    for (size_t k = 0; k < sizeof where / sizeof *where; k++) {
        FILE *f = fopen(p, "r+b");
        ck_assert_ptr_nonnull(f);
        fseek(f, where[k], SEEK_SET);
        int c = fgetc(f);
        fseek(f, where[k], SEEK_SET);
        fputc(c ^ 0x40, f);
        fclose(f);
        char err[512] = "";
        ck_assert_int_eq(read_ckpt(5, 0, 1, err, sizeof err), -1);
        ck_assert_msg(strstr(err, p) != NULL, "message names the file: %s", err);
        f = fopen(p, "r+b");
        fseek(f, where[k], SEEK_SET);
        fputc(c, f);
        fclose(f);
    }
    char err[512];
    ck_assert_int_eq(read_ckpt(5, 0, 1, err, sizeof err), 0);
    /* Truncation. */
    ck_assert_int_eq(truncate(p, st.st_size - 100), 0);
    ck_assert_int_eq(read_ckpt(5, 0, 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "truncated") != NULL || strstr(err, "checksum") != NULL, "%s", err);
}
END_TEST

START_TEST(test_incomplete_skipped) {
    ck_assert_int_eq(write_ckpt(3, 2), 0);
    /* Step 7: shards but no manifest (a crash before it was written). */
    char err[512];
    fill(7);
    CkptEntry e[2] = {{"w", 1, sizeof A, A}, {"master.w", 1, sizeof Bv, Bv}};
    ck_assert_int_eq(ckpt_write_shard(root, 7, 0, 2, 0xabcdef, e, 2, err, sizeof err), 0);
    /* The manifest refuses while a shard is missing. */
    ck_assert_int_eq(ckpt_write_manifest(root, 7, 2, 0xabcdef, "tiny", "{}", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "missing") != NULL, "%s", err);
    int64_t s = -1;
    char why[512];
    ck_assert_int_eq(ckpt_find_latest(root, 2, 0xabcdef, &s, why, sizeof why, err, sizeof err), 1);
    ck_assert_int_eq(s, 3);
    ck_assert_msg(strstr(why, "incomplete") != NULL, "%s", why);
}
END_TEST

START_TEST(test_full_disk_keeps_previous) {
    ck_assert_int_eq(write_ckpt(1, 1), 0);
    pid_t pid = fork();
    if (pid == 0) {
        /* A disk that fills: writes beyond 2 KiB fail with EFBIG. */
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {2048, 2048};
        setrlimit(RLIMIT_FSIZE, &rl);
        int rc = write_ckpt(2, 1);
        _exit(rc == -1 ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char err[512];
    int64_t s = -1;
    ck_assert_int_eq(ckpt_find_latest(root, 1, 0xabcdef, &s, NULL, 0, err, sizeof err), 1);
    ck_assert_int_eq(s, 1);
    ck_assert_int_eq(read_ckpt(1, 0, 1, err, sizeof err), 0);
    ck_assert_float_eq(A[2], 1.0f);
    /* No temporary file was left behind. */
    char d[400], cmd[600];
    ckpt_step_dir(root, 2, d, sizeof d);
    snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -q tmp", d);
    ck_assert_int_ne(system(cmd), 0);
}
END_TEST

START_TEST(test_prune) {
    for (int s = 1; s <= 4; s++) ck_assert_int_eq(write_ckpt(s, 1), 0);
    char err[512];
    ck_assert_int_eq(ckpt_prune(root, 1, 0xabcdef, 4, 2, err, sizeof err), 0);
    ck_assert(!step_exists(1) && !step_exists(2) && step_exists(3) && step_exists(4));
}
END_TEST

/* Regression: pruning kept the two highest steps whatever run wrote them,
 * so a run into a directory with later checkpoints deleted its own. */
START_TEST(test_prune_by_identity) {
    ck_assert_int_eq(write_ckpt_of(40, 2, 0x5555), 0); /* another plan, further along */
    ck_assert_int_eq(write_ckpt_of(30, 1, 0xabcdef), 0); /* this plan, a later run started over from */
    char err[512];
    for (int s = 1; s <= 4; s++) {
        ck_assert_int_eq(write_ckpt(s, 1), 0);
        ck_assert_int_eq(ckpt_prune(root, 1, 0xabcdef, s, 2, err, sizeof err), 0);
        ck_assert_msg(step_exists(s), "step %d pruned right after it was written", s);
    }
    ck_assert(!step_exists(1) && !step_exists(2) && step_exists(3) && step_exists(4));
    ck_assert(step_exists(40) && step_exists(30));
    /* the other plan's, seen from its own identity, is not touched by ours */
    ck_assert_int_eq(ckpt_prune(root, 2, 0x5555, 40, 1, err, sizeof err), 0);
    ck_assert(step_exists(40) && step_exists(3) && step_exists(4));
}
END_TEST

START_TEST(test_scan_states) {
    ck_assert_int_eq(write_ckpt(2, 1), 0);
    ck_assert_int_eq(write_ckpt_of(9, 2, 0x77), 0);
    char err[512], d[400], p[500];
    /* step 5: a manifest that is not ours */
    ck_assert_int_eq(write_ckpt(5, 1), 0);
    snprintf(p, sizeof p, "%s/manifest.json", ckpt_step_dir(root, 5, d, sizeof d));
    FILE *f = fopen(p, "w");
    fputs("{\"hello\": 1}", f);
    fclose(f);
    /* step 7: a shard but no manifest */
    fill(7);
    CkptEntry e[2] = {{"w", 1, sizeof A, A}, {"master.w", 1, sizeof Bv, Bv}};
    ck_assert_int_eq(ckpt_write_shard(root, 7, 0, 1, 0xabcdef, e, 2, err, sizeof err), 0);
    CkptInfo *v;
    int n;
    ck_assert_int_eq(ckpt_scan(root, &v, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 4);
    ck_assert(v[0].step == 9 && v[0].state == CKPT_COMPLETE && v[0].world == 2 && v[0].plan_hash == 0x77);
    ck_assert(!ckpt_is_own(&v[0], 1, 0xabcdef));
    ck_assert(v[1].step == 7 && v[1].state == CKPT_INCOMPLETE && ckpt_is_own(&v[1], 1, 0xabcdef));
    ck_assert(v[2].step == 5 && v[2].state == CKPT_BAD_MANIFEST && !v[2].ident_known);
    ck_assert_msg(strstr(v[2].why, "not a zinf checkpoint manifest") != NULL, "%s", v[2].why);
    ck_assert(v[3].step == 2 && v[3].state == CKPT_COMPLETE && ckpt_is_own(&v[3], 1, 0xabcdef));
    free(v);
    /* a missing root is an empty list */
    ck_assert_int_eq(ckpt_scan("/nonexistent/zinf", &v, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 0);
}
END_TEST

/* kill -9 while writing: temporaries and incomplete directories of this
 * run are removed at the next start, another run's and live ones are not;
 * a dead writer's temporary goes whoever's it is. */
START_TEST(test_debris) {
    char err[512], d[400], p[600], rep[1024];
    ck_assert_int_eq(write_ckpt(1, 1), 0);
    fill(2);
    CkptEntry e[2] = {{"w", 1, sizeof A, A}, {"master.w", 1, sizeof Bv, Bv}};
    /* step 2 of this run: one shard done, the other cut short by a dead writer */
    ck_assert_int_eq(ckpt_write_shard(root, 2, 0, 2, 0xabcdef, e, 2, err, sizeof err), 0);
    ckpt_step_dir(root, 2, d, sizeof d);
    snprintf(p, sizeof p, "%s/rank-00000.zck", d);
    char tmp[700];
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(tmp, sizeof tmp, "%s/rank-00001.zck.tmp.%d", d, (int)dead);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "head -c 100 %s > %s", p, tmp);
    ck_assert_int_eq(system(cmd), 0);
    /* step 3: another run's incomplete checkpoint, by a dead writer too */
    ck_assert_int_eq(ckpt_write_shard(root, 3, 0, 4, 0x99, e, 2, err, sizeof err), 0);
    /* step 1: a dead writer's temporary manifest beside the complete one */
    char m[700];
    snprintf(m, sizeof m, "%s/manifest.json.tmp.%d", ckpt_step_dir(root, 1, d, sizeof d), (int)dead);
    FILE *f = fopen(m, "w");
    fputs("{", f);
    fclose(f);
    /* step 4: this run's, being written by a live process (us) */
    ck_assert_int_eq(ckpt_write_shard(root, 4, 0, 2, 0xabcdef, e, 2, err, sizeof err), 0);
    char live[700];
    snprintf(live, sizeof live, "%s/rank-00001.zck.tmp.%d", ckpt_step_dir(root, 4, d, sizeof d), (int)getpid());
    f = fopen(live, "w");
    fclose(f);
    /* step 9: a removal of this run's killed midway; step 11: a writer killed after its mkdir */
    ck_assert_int_eq(ckpt_write_shard(root, 9, 0, 2, 0xabcdef, e, 2, err, sizeof err), 0);
    char gone[700], from[500];
    ckpt_step_dir(root, 9, from, sizeof from);
    snprintf(gone, sizeof gone, "%s.deleting.%d", from, (int)dead);
    ck_assert_int_eq(rename(from, gone), 0);
    ckpt_step_dir(root, 11, from, sizeof from);
    ck_assert_int_eq(mkdir(from, 0755), 0);
    /* step 12: a writer killed before its shard's first byte (an empty
     * temporary that names no run); step 13: a writer whose PID is not
     * alive here but which holds its lock (another machine's, live) */
    char empty[700], remote[700];
    ckpt_step_dir(root, 12, from, sizeof from);
    ck_assert_int_eq(mkdir(from, 0755), 0);
    snprintf(empty, sizeof empty, "%s/rank-00000.zck.tmp.%d", from, (int)dead);
    fclose(fopen(empty, "w"));
    ckpt_step_dir(root, 13, from, sizeof from);
    ck_assert_int_eq(mkdir(from, 0755), 0);
    snprintf(remote, sizeof remote, "%s/rank-00000.zck.tmp.%d", from, (int)dead);
    int held = open(remote, O_WRONLY | O_CREAT, 0644);
    ck_assert_int_ge(held, 0);
    ck_assert_int_eq(flock(held, LOCK_EX), 0);
    int n = ckpt_clean_debris(root, 2, 0xabcdef, rep, sizeof rep, err, sizeof err);
    ck_assert_msg(n == 5, "%d: %s %s", n, rep, err);
    ck_assert(!exists(gone) && !step_exists(11) && !step_exists(12));
    ck_assert_msg(strstr(rep, "(interrupted removal)") && strstr(rep, "step-00000011 (empty)"), "%s", rep);
    ck_assert_msg(strstr(rep, "step-00000012 (incomplete checkpoint)"), "%s", rep);
    ck_assert(!step_exists(2) && step_exists(3) && step_exists(4) && exists(live) && exists(remote));
    ck_assert_msg(strstr(rep, "step-00000002 (incomplete checkpoint)") != NULL, "%s", rep);
    /* a dead writer's temporary manifest goes, whoever's checkpoint it sat in; the checkpoint stays */
    ck_assert_msg(!exists(m) && step_exists(1), "%s", rep);
    ck_assert_msg(strstr(rep, "step-00000001 (temporary files)") != NULL, "%s", rep);
    ck_assert_int_eq(read_ckpt(1, 0, 1, err, sizeof err), 0);
    /* once the remote writer is gone, its temporary and directory go too */
    close(held);
    n = ckpt_clean_debris(root, 2, 0xabcdef, rep, sizeof rep, err, sizeof err);
    ck_assert_msg(n == 1 && !step_exists(13) && step_exists(3), "%d %s", n, rep);
}
END_TEST

START_TEST(test_safetensors_layout) {
    char path[300], err[512];
    snprintf(path, sizeof path, "%s.safetensors", root);
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[2] = {0x3f80, 0x4000};
    StTensor t[2] = {{"wte", 1, 2, {2, 3}, w, sizeof w}, {"ln.g", 2, 1, {2}, b, sizeof b}};
    ck_assert_int_eq(safetensors_write(path, t, 2, "tiny", err, sizeof err), 0);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char l8[8];
    ck_assert_int_eq(fread(l8, 1, 8, f), 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | l8[i];
    ck_assert_int_eq(hl % 8, 0);
    char *h = calloc(1, hl + 1);
    ck_assert_int_eq(fread(h, 1, hl, f), hl);
    ck_assert_msg(strstr(h, "\"wte\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}") != NULL, "%s", h);
    ck_assert_msg(strstr(h, "\"ln.g\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]}") != NULL, "%s", h);
    float back[6];
    ck_assert_int_eq(fread(back, 1, sizeof back, f), sizeof back);
    ck_assert_float_eq(back[5], 6.0f);
    free(h);
    fclose(f);
    unlink(path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ckpt");
    TCase *tc = tcase_create("ckpt");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_corruption);
    tcase_add_test(tc, test_incomplete_skipped);
    tcase_add_test(tc, test_full_disk_keeps_previous);
    tcase_add_test(tc, test_prune);
    tcase_add_test(tc, test_prune_by_identity);
    tcase_add_test(tc, test_scan_states);
    tcase_add_test(tc, test_debris);
    tcase_add_test(tc, test_safetensors_layout);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
