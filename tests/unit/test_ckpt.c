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
        if (ckpt_write_shard(root, step, r, world, hash, e, 2, NULL, err, sizeof err)) return -1;
    return ckpt_write_manifest(root, step, world, hash, "tiny", "{\"loss_scale\": 1, \"tokens\": 42}", NULL, err, sizeof err);
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
    return ckpt_read_shard(root, step, rank, world, 0xabcdef, e, 2, NULL, err, n);
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

/* What a listener hears of a shard's write and read: the phase, how many
 * reports, the last figures, and whether they ever went down. */
typedef struct Heard {
    Progress base;
    char phase[64];
    int reports;
    uint64_t done, total;
    bool backwards;
} Heard;

static void heard(Progress *p, const char *phase, const char *unit, uint64_t done, uint64_t total) {
    Heard *h = (Heard *)p;
    ck_assert_str_eq(unit, "B");
    if (h->reports && done < h->done) h->backwards = true;
    snprintf(h->phase, sizeof h->phase, "%s", phase);
    h->reports++;
    h->done = done;
    h->total = total;
}

START_TEST(test_progress) {
    char err[512];
    fill(5);
    CkptEntry e[2] = {{"w", 1, sizeof A, A}, {"master.w", 1, sizeof Bv, Bv}};
    Heard w = {.base = {heard}};
    ck_assert_int_eq(ckpt_write_shard(root, 5, 0, 1, 0xabcdef, e, 2, &w.base, err, sizeof err), 0);
    struct stat st;
    ck_assert_int_eq(stat(shard_path(5, 0), &st), 0);
    /* bytes written, up to the whole file, ended once it is on the disk */
    ck_assert_str_eq(w.phase, "writing the checkpoint");
    ck_assert_int_gt(w.reports, 2);
    ck_assert(!w.backwards);
    ck_assert_uint_eq(w.done, (uint64_t)st.st_size);
    ck_assert_uint_eq(w.total, (uint64_t)st.st_size);
    Heard r = {.base = {heard}};
    memset(A, 0, sizeof A);
    ck_assert_int_eq(ckpt_read_shard(root, 5, 0, 1, 0xabcdef, e, 2, &r.base, err, sizeof err), 0);
    ck_assert_str_eq(r.phase, "reading the checkpoint");
    ck_assert(!r.backwards);
    ck_assert_uint_eq(r.done, sizeof A + sizeof Bv); /* the tensors' bytes */
    ck_assert_uint_eq(r.total, sizeof A + sizeof Bv);
    ck_assert(A[3] == 7.5f);
}
END_TEST

START_TEST(test_incomplete_skipped) {
    ck_assert_int_eq(write_ckpt(3, 2), 0);
    /* Step 7: shards but no manifest (a crash before it was written). */
    char err[512];
    fill(7);
    CkptEntry e[2] = {{"w", 1, sizeof A, A}, {"master.w", 1, sizeof Bv, Bv}};
    ck_assert_int_eq(ckpt_write_shard(root, 7, 0, 2, 0xabcdef, e, 2, NULL, err, sizeof err), 0);
    /* The manifest refuses while a shard is missing. */
    ck_assert_int_eq(ckpt_write_manifest(root, 7, 2, 0xabcdef, "tiny", "{}", NULL, err, sizeof err), -1);
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
    ck_assert_int_eq(ckpt_write_shard(root, 7, 0, 1, 0xabcdef, e, 2, NULL, err, sizeof err), 0);
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
    ck_assert_int_eq(ckpt_write_shard(root, 2, 0, 2, 0xabcdef, e, 2, NULL, err, sizeof err), 0);
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
    ck_assert_int_eq(ckpt_write_shard(root, 3, 0, 4, 0x99, e, 2, NULL, err, sizeof err), 0);
    /* step 1: a dead writer's temporary manifest beside the complete one */
    char m[700];
    snprintf(m, sizeof m, "%s/manifest.json.tmp.%d", ckpt_step_dir(root, 1, d, sizeof d), (int)dead);
    FILE *f = fopen(m, "w");
    fputs("{", f);
    fclose(f);
    /* step 4: this run's, being written by a live process (us) */
    ck_assert_int_eq(ckpt_write_shard(root, 4, 0, 2, 0xabcdef, e, 2, NULL, err, sizeof err), 0);
    char live[700];
    snprintf(live, sizeof live, "%s/rank-00001.zck.tmp.%d", ckpt_step_dir(root, 4, d, sizeof d), (int)getpid());
    f = fopen(live, "w");
    fclose(f);
    /* step 9: a removal of this run's killed midway; step 11: a writer killed after its mkdir */
    ck_assert_int_eq(ckpt_write_shard(root, 9, 0, 2, 0xabcdef, e, 2, NULL, err, sizeof err), 0);
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

/* ---- resharding: reading a tensor by global element ranges ---- */

/* A layout of numel elements in T tiles on R ranks, slices padded by pad. */
static CkptShardLayout lay(int64_t numel, int T, int R, bool part, int64_t pad) {
    int64_t E = numel / T;
    int64_t S = part ? (E + R - 1) / R + pad : E;
    return (CkptShardLayout){numel, T, E, S, part};
}

/* Global element of element `e` of rank r's slice under l, or -1 for padding. */
static int64_t global_of(const CkptShardLayout *l, int r, int64_t e) {
    int64_t u = e / l->tile_shard, j = e % l->tile_shard, w0 = l->partitioned ? r * l->tile_shard : 0;
    if (w0 + j >= l->tile_elems) return -1;
    return u * l->tile_elems + w0 + j;
}

typedef struct Cover {
    const CkptShardLayout *from, *to;
    int rank;
    int *hits; /* per element of the reader's slice */
    bool bad;
} Cover;

static int cover_piece(void *ctx, int writer, int64_t src, int64_t dst, int64_t n) {
    Cover *c = ctx;
    for (int64_t i = 0; i < n; i++) {
        int64_t gw = global_of(c->from, writer, src + i), gr = global_of(c->to, c->rank, dst + i);
        if (gw < 0 || gr < 0 || gw != gr) c->bad = true; /* a writer's padding, the reader's, or the wrong element */
        c->hits[dst + i]++;
    }
    return 0;
}

START_TEST(test_reshard_pieces) {
    const int64_t numel = 2 * 3 * 5 * 7;
    const int Rs[] = {1, 2, 3, 4, 7}, Ts[] = {1, 2, 3, 5};
    int cases = 0;
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 5; c++)
                for (size_t d = 0; d < 4; d++)
                    for (int pad = 0; pad < 2; pad++) {
                        int R = Rs[a], T = Ts[b], R2 = Rs[c], T2 = Ts[d];
                        CkptShardLayout from = lay(numel, T, R, R > 1 || pad, pad * 3), to = lay(numel, T2, R2, R2 > 1, pad * 5);
                        char err[200];
                        ck_assert_int_eq(ckpt_layout_check(&from, R, err, sizeof err), 0);
                        ck_assert_int_eq(ckpt_layout_check(&to, R2, err, sizeof err), 0);
                        int64_t covered = 0;
                        for (int r = 0; r < R2; r++) {
                            int64_t n = to.ntiles * to.tile_shard;
                            Cover cv = {&from, &to, r, calloc((size_t)n, sizeof(int)), false};
                            ck_assert_int_eq(ckpt_reshard_pieces(&from, R, &to, r, cover_piece, &cv), 0);
                            ck_assert_msg(!cv.bad, "R %d T %d -> R %d T %d rank %d: a piece names padding or the wrong element", R, T, R2, T2, r);
                            for (int64_t e = 0; e < n; e++) {
                                ck_assert_int_eq(cv.hits[e], global_of(&to, r, e) >= 0 ? 1 : 0);
                                covered += cv.hits[e];
                            }
                            free(cv.hits);
                        }
                        /* unpartitioned readers each read the whole tensor */
                        ck_assert_int_eq(covered, to.partitioned ? numel : numel * R2);
                        cases++;
                    }
    ck_assert_int_eq(cases, 800);
    /* layouts of different tensors */
    CkptShardLayout x = lay(10, 1, 1, false, 0), y = lay(12, 1, 1, false, 0);
    ck_assert_int_eq(ckpt_reshard_pieces(&x, 1, &y, 0, cover_piece, NULL), -1);
    char err[200];
    CkptShardLayout z = {100, 3, 33, 33, false};
    ck_assert_int_eq(ckpt_layout_check(&z, 1, err, sizeof err), -1);
    CkptShardLayout short_slices = {100, 1, 100, 20, true};
    ck_assert_int_eq(ckpt_layout_check(&short_slices, 4, err, sizeof err), -1);
}
END_TEST

/* Writes tensor "w" (f32, value = global index) under layout l on R ranks,
 * writers' padding set to a sentinel, with the manifest's layout. */
static void write_layout_ckpt(int step, const CkptShardLayout *l, int R) {
    char err[512];
    int64_t n = l->ntiles * l->tile_shard;
    float *d = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < R; r++) {
        for (int64_t e = 0; e < n; e++) {
            int64_t g = global_of(l, r, e);
            d[e] = g < 0 ? 1e30f : (float)g;
        }
        CkptEntry e[1] = {{"w", 1, sizeof(float) * (uint64_t)n, d}};
        ck_assert_int_eq(ckpt_write_shard(root, step, r, R, 0x5eed, e, 1, NULL, err, sizeof err), 0);
    }
    free(d);
    CkptTensorLayout t = {.name = "w", .dtype = 1, .cls = 1, .rank = 1, .dims = {l->numel}, .s = *l};
    CkptLayout L = {.micro_batch = 2, .grad_accum = 1, .train_dtype = 1, .n = 1, .t = &t};
    ck_assert_int_eq(ckpt_write_manifest(root, step, R, 0x5eed, "tiny", "{\"step\": 1}", &L, err, sizeof err), 0);
}

/* Each case three times: version-1 shards (no chunk checksums), chunks of
 * 256 bytes (a reader reads and verifies only the chunks it needs), and
 * the default 1 MiB chunks (here each entry is one chunk). */
static const int shifts[] = {0, 8, CKPT_CHUNK_SHIFT};

START_TEST(test_reshard_read) {
    const int shift = shifts[_i];
    ckpt_set_chunk_shift(shift);
    CkptShardLayout from = lay(6 * 1000, 2, 3, true, 7);
    write_layout_ckpt(4, &from, 3);
    ckpt_set_chunk_shift(CKPT_CHUNK_SHIFT);
    char *p = shard_path(4, 1);
    FILE *f = fopen(p, "rb");
    unsigned char hdr[12];
    ck_assert(f && fread(hdr, 1, 12, f) == 12);
    fclose(f);
    ck_assert_int_eq(hdr[8], shift ? 2 : 1); /* the version */
    CkptManifest m;
    char err[512];
    ck_assert_int_eq(ckpt_read_manifest(root, 4, &m, err, sizeof err), 0);
    ck_assert(m.has_layout && m.world == 3 && m.plan_hash == 0x5eed && !strcmp(m.model, "tiny"));
    ck_assert_int_eq(m.layout.n, 1);
    ck_assert_str_eq(m.layout.t[0].name, "w");
    ck_assert(m.layout.t[0].s.tile_shard == from.tile_shard && m.layout.t[0].s.partitioned && m.layout.micro_batch == 2);
    const CkptShardLayout tos[] = {lay(6000, 3, 2, true, 11), lay(6000, 1, 5, true, 0), lay(6000, 6, 1, false, 0)};
    const int R2s[] = {2, 5, 1};
    for (int c = 0; c < 3; c++) {
        const CkptShardLayout *to = &tos[c];
        for (int r = 0; r < R2s[c]; r++) {
            CkptReader rd;
            ck_assert_int_eq(ckpt_reader_open(&rd, root, 4, &m, 100 + 4 * (size_t)c, err, sizeof err), 0);
            int64_t n = to->ntiles * to->tile_shard;
            float *d = malloc(sizeof(float) * (size_t)n);
            memset(d, 0xff, sizeof(float) * (size_t)n);
            ck_assert_msg(ckpt_reader_read(&rd, 0, to, r, d, err, sizeof err) == 0, "%s", err);
            /* 5 readers of 1200 elements: with small chunks each reads about its share, not whole entries */
            if (c == 1 && shift == 8) ck_assert_msg(rd.bytes_read <= 4 * 1200 + 4 * 256, "read %llu bytes", (unsigned long long)rd.bytes_read);
            if (c == 1 && shift != 8) ck_assert_uint_ge(rd.bytes_read, 4 * 1000);
            for (int64_t e = 0; e < n; e++) {
                int64_t g = global_of(to, r, e);
                ck_assert_msg(d[e] == (g < 0 ? 0.0f : (float)g), "case %d rank %d element %lld: %g", c, r, (long long)e, (double)d[e]);
            }
            free(d);
            ckpt_reader_close(&rd);
        }
    }
    /* a flipped byte near the end of writer 1's data (the last element of
     * its tile-1 slice) is caught by the checksum of what holds it */
    f = fopen(p, "r+b");
    fseek(f, -8 - 60, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -8 - 60, SEEK_END);
    fputc(ch ^ 1, f);
    fclose(f);
    CkptReader rd;
    ck_assert_int_eq(ckpt_reader_open(&rd, root, 4, &m, 4096, err, sizeof err), 0);
    float *d = malloc(sizeof(float) * 6000);
    ck_assert_int_eq(ckpt_reader_read(&rd, 0, &tos[2], 0, d, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "rank-00001.zck: checksum mismatch in 'w'"), "%s", err);
    ckpt_reader_close(&rd);
    /* a reader of the first elements only: with small chunks it never reads
     * the bad one and succeeds; otherwise it reads the whole entry and fails */
    ck_assert_int_eq(ckpt_reader_open(&rd, root, 4, &m, 4096, err, sizeof err), 0);
    ck_assert_int_eq(ckpt_reader_read(&rd, 0, &tos[1], 0, d, err, sizeof err), shift == 8 ? 0 : -1);
    free(d);
    ckpt_reader_close(&rd);
    ckpt_manifest_free(&m);
    /* an old manifest has no layout */
    ck_assert_int_eq(write_ckpt(9, 1), 0);
    ck_assert_int_eq(ckpt_read_manifest(root, 9, &m, err, sizeof err), 0);
    ck_assert(!m.has_layout && m.world == 1);
    ckpt_manifest_free(&m);
    CkptInfo *v;
    int nv;
    ck_assert_int_eq(ckpt_scan(root, &v, &nv, err, sizeof err), 0);
    ck_assert(nv == 2 && v[0].step == 9 && !v[0].layout && v[1].step == 4 && v[1].layout);
    free(v);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ckpt");
    TCase *tc = tcase_create("ckpt");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_corruption);
    tcase_add_test(tc, test_incomplete_skipped);
    tcase_add_test(tc, test_progress);
    tcase_add_test(tc, test_full_disk_keeps_previous);
    tcase_add_test(tc, test_prune);
    tcase_add_test(tc, test_prune_by_identity);
    tcase_add_test(tc, test_scan_states);
    tcase_add_test(tc, test_debris);
    tcase_add_test(tc, test_safetensors_layout);
    tcase_add_test(tc, test_reshard_pieces);
    tcase_add_loop_test(tc, test_reshard_read, 0, (int)(sizeof shifts / sizeof *shifts));
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
