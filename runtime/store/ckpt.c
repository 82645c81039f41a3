#include "ckpt.h"
#include "safetensors.h"
#include "ckpt_impl.h"
#include "errorf.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CKPT_VERSION = 2, CKPT_MANIFEST_VERSION = 2 }; /* shard files (2: chunk checksums); manifests (2: with the layout) */

static int chunk_shift = CKPT_CHUNK_SHIFT;

void ckpt_set_chunk_shift(int shift) {
    chunk_shift = shift == 0 || (shift >= CKPT_CHUNK_SHIFT_MIN && shift <= CKPT_CHUNK_SHIFT_MAX) ? shift : CKPT_CHUNK_SHIFT;
}
static const char ckpt_magic[8] = {'Z', 'I', 'N', 'F', 'C', 'K', 'P', 'T'};



const char *ckpt_step_dir(const char *root, int64_t step, char *buf, size_t n) {
    snprintf(buf, n, "%s/step-%08" PRId64, root, step);
    return buf;
}

static int mkdir_p(const char *path, char *err, size_t errlen) {
    char tmp[4096];
    if (strlen(path) >= sizeof tmp) return errorf(err, errlen, "%s: path too long", path);
    strcpy(tmp, path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return errorf(err, errlen, "cannot create directory %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return errorf(err, errlen, "cannot create directory %s: %s", tmp, strerror(errno));
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
        return errorf(err, errlen, "%s is not a directory", tmp);
    return 0;
}

static int fsync_dir_of(const char *path) {
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    char *s = strrchr(d, '/');
    if (s) *s = 0; else strcpy(d, ".");
    int fd = open(d, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* ckpt_write_file_atomic, telling progress (NULL: nobody) the bytes written. */
static int write_file_atomic(const char *path, const void *const *parts, const size_t *lens, int nparts, Progress *progress,
                             char *err, size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errorf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    /* Held until the rename: a cleaner that can take it knows the writer is
     * gone, even when the PID in the name is another machine's. */
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {}
    uint64_t total = 0, done = 0;
    for (int i = 0; i < nparts; i++) total += lens[i];
    for (int i = 0; i < nparts; i++) {
        const char *p = parts[i];
        size_t left = lens[i];
        while (left) {
            /* 64 MiB at a time, so that progress moves on a large shard */
            ssize_t w = write(fd, p, left > (64u << 20) ? (64u << 20) : left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                int e = w < 0 ? errno : EIO;
                close(fd);
                unlink(tmp);
                return errorf(err, errlen, "write to %s failed: %s", tmp, strerror(e));
            }
            p += w;
            left -= (size_t)w;
            done += (uint64_t)w;
            if (done < total) progress_report(progress, "writing the checkpoint", "B", done, total);
        }
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return errorf(err, errlen, "fsync of %s failed: %s", tmp, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return errorf(err, errlen, "close of %s failed: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return errorf(err, errlen, "rename %s -> %s failed: %s", tmp, path, strerror(e));
    }
    if (fsync_dir_of(path) != 0) return errorf(err, errlen, "fsync of the directory of %s failed: %s", path, strerror(errno));
    if (total) progress_report(progress, "writing the checkpoint", "B", total, total); /* on the disk: the phase ends */
    return 0;
}

int ckpt_write_file_atomic(const char *path, const void *const *parts, const size_t *lens, int nparts,
                           char *err, size_t errlen) {
    return write_file_atomic(path, parts, lens, nparts, NULL, err, errlen);
}

/* A little-endian byte builder for headers. */
typedef struct Buf {
    unsigned char *p;
    size_t len, cap;
    bool oom;
} Buf;

static void buf_put(Buf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->len + n) nc *= 2;
        unsigned char *np = realloc(b->p, nc);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}
static void put_u8(Buf *b, uint8_t v) { buf_put(b, &v, 1); }
static void put_u16(Buf *b, uint16_t v) { unsigned char c[2] = {(unsigned char)v, (unsigned char)(v >> 8)}; buf_put(b, c, 2); }
static void put_u32(Buf *b, uint32_t v) {
    unsigned char c[4];
    for (int i = 0; i < 4; i++) c[i] = (unsigned char)(v >> (8 * i));
    buf_put(b, c, 4);
}
static void put_u64(Buf *b, uint64_t v) {
    unsigned char c[8];
    for (int i = 0; i < 8; i++) c[i] = (unsigned char)(v >> (8 * i));
    buf_put(b, c, 8);
}

int ckpt_write_shard(const char *root, int64_t step, int rank, int world, uint64_t plan_hash,
                     const CkptEntry *e, int n, Progress *progress, char *err, size_t errlen) {
    char dir[4096], path[4200];
    ckpt_step_dir(root, step, dir, sizeof dir);
    if (mkdir_p(dir, err, errlen)) return -1;
    snprintf(path, sizeof path, "%s/rank-%05d.zck", dir, rank);
    /* Layout: header, then per entry a small header followed by its bytes;
     * written as a list of parts so the tensors are not copied. */
    int nparts = 2 + 3 * n;
    const void **parts = calloc((size_t)nparts, sizeof *parts);
    size_t *lens = calloc((size_t)nparts, sizeof *lens);
    Buf *hdrs = calloc((size_t)2 * n + 2, sizeof *hdrs);
    if (!parts || !lens || !hdrs) { free(parts); free(lens); free(hdrs); return errorf(err, errlen, "out of memory writing %s", path); }
    uint64_t h = CKPT_FNV_INIT;
    Buf *hb = &hdrs[0];
    buf_put(hb, ckpt_magic, 8);
    put_u32(hb, chunk_shift ? CKPT_VERSION : 1);
    put_u32(hb, (uint32_t)rank);
    put_u32(hb, (uint32_t)world);
    put_u64(hb, (uint64_t)step);
    put_u64(hb, plan_hash);
    put_u32(hb, (uint32_t)n);
    int k = 0;
    parts[k] = hb->p; lens[k] = hb->len; k++;
    for (int i = 0; i < n; i++) {
        Buf *eb = &hdrs[1 + i];
        size_t nl = strlen(e[i].name);
        if (nl > 65535) nl = 65535;
        put_u16(eb, (uint16_t)nl);
        buf_put(eb, e[i].name, nl);
        put_u8(eb, e[i].dtype);
        put_u64(eb, e[i].bytes);
        put_u64(eb, ckpt_fnv_update(CKPT_FNV_INIT, e[i].data, e[i].bytes));
        if (chunk_shift) put_u32(eb, (uint32_t)chunk_shift);
        parts[k] = eb->p; lens[k] = eb->len; k++;
        /* a checksum per chunk, so that a reader of a few ranges verifies what it reads, not the whole entry */
        Buf *cb = &hdrs[1 + n + i];
        uint64_t cs = (uint64_t)1 << chunk_shift;
        for (uint64_t c0 = 0; chunk_shift && c0 < e[i].bytes; c0 += cs)
            put_u64(cb, ckpt_fnv_update(CKPT_FNV_INIT, (const uint8_t *)e[i].data + c0, e[i].bytes - c0 < cs ? e[i].bytes - c0 : cs));
        parts[k] = cb->p; lens[k] = cb->len; k++;
        parts[k] = e[i].data; lens[k] = e[i].bytes; k++;
    }
    bool oom = false;
    for (int i = 0; i < 2 * n + 1; i++) oom |= hdrs[i].oom;
    int rc;
    if (oom) {
        rc = errorf(err, errlen, "out of memory writing %s", path);
    } else {
        for (int i = 0; i < k; i++) h = ckpt_fnv_update(h, parts[i], lens[i]);
        Buf *tb = &hdrs[2 * n + 1];
        put_u64(tb, h);
        parts[k] = tb->p; lens[k] = tb->len; k++;
        rc = tb->oom ? errorf(err, errlen, "out of memory writing %s", path)
                     : write_file_atomic(path, parts, lens, k, progress, err, errlen);
    }
    for (int i = 0; i < 2 * n + 2; i++) free(hdrs[i].p);
    free(hdrs);
    free(parts);
    free(lens);
    return rc;
}

/* JSON string escaping for names we write. */
static void json_str(Buf *b, const char *s) {
    put_u8(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { put_u8(b, '\\'); put_u8(b, c); }
        else if (c < 0x20) { char u[8]; snprintf(u, sizeof u, "\\u%04x", c); buf_put(b, u, 6); }
        else put_u8(b, c);
    }
    put_u8(b, '"');
}

static void bprintf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(Buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* The manifest's "layout" (ckpt.h): what another plan needs to read it. */
static void layout_json(Buf *b, const CkptLayout *l) {
    bprintf(b, ",\n  \"layout\": {\"micro_batch\": %" PRId64 ", \"grad_accum\": %" PRId64 ", \"dtype\": %u, \"tensors\": [",
            l->micro_batch, l->grad_accum, l->train_dtype);
    for (int i = 0; i < l->n; i++) {
        const CkptTensorLayout *t = &l->t[i];
        bprintf(b, "%s\n    {\"name\": ", i ? "," : "");
        json_str(b, t->name);
        bprintf(b, ", \"dtype\": %u, \"class\": %u, \"shape\": [", t->dtype, t->cls);
        for (int d = 0; d < t->rank && d < 6; d++) bprintf(b, "%s%" PRId64, d ? ", " : "", t->dims[d]);
        bprintf(b, "], \"numel\": %" PRId64 ", \"ntiles\": %d, \"tile_elems\": %" PRId64 ", \"tile_shard\": %" PRId64
                   ", \"partitioned\": %s}",
                t->s.numel, (int)t->s.ntiles, t->s.tile_elems, t->s.tile_shard, t->s.partitioned ? "true" : "false");
    }
    bprintf(b, "\n  ]}");
}

int ckpt_write_manifest(const char *root, int64_t step, int world, uint64_t plan_hash,
                        const char *model, const char *state_json, const CkptLayout *layout, char *err, size_t errlen) {
    char dir[4096], path[4200];
    ckpt_step_dir(root, step, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    /* Every shard must be there before the checkpoint is declared complete. */
    for (int r = 0; r < world; r++) {
        char sp[4200];
        snprintf(sp, sizeof sp, "%s/rank-%05d.zck", dir, r);
        if (access(sp, R_OK) != 0) return errorf(err, errlen, "checkpoint %s is missing %s", dir, sp);
    }
    Buf b = {0};
    bprintf(&b, "{\n  \"format\": \"zinf-checkpoint\",\n  \"version\": %d,\n  \"model\": ", layout ? CKPT_MANIFEST_VERSION : 1);
    json_str(&b, model ? model : "");
    bprintf(&b, ",\n  \"step\": %" PRId64 ",\n  \"world\": %d,\n  \"plan_hash\": \"%016" PRIx64 "\",\n  \"state\": ",
            step, world, plan_hash);
    const char *st = state_json && *state_json ? state_json : "{}";
    buf_put(&b, st, strlen(st));
    if (layout) layout_json(&b, layout);
    bprintf(&b, "\n}\n");
    if (b.oom) { free(b.p); return errorf(err, errlen, "out of memory"); }
    const void *parts[1] = {b.p};
    size_t lens[1] = {b.len};
    int rc = ckpt_write_file_atomic(path, parts, lens, 1, err, errlen);
    free(b.p);
    return rc;
}

/* A whole small file (at most max bytes), NUL-terminated; NULL when it
 * cannot be read (errno says why). */
static char *read_small_file(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat sb;
    size_t want = fstat(fileno(f), &sb) == 0 && sb.st_size >= 0 && (uint64_t)sb.st_size < max ? (size_t)sb.st_size : max;
    char *buf = malloc(want + 1);
    if (!buf) { fclose(f); return NULL; }
    size_t n = fread(buf, 1, want, f);
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* Minimal field lookups in our own manifest (we wrote it; still, bounds-safe). */
static bool manifest_field(const char *m, const char *key, char *out, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(m, pat);
    if (!p) return false;
    p += strlen(pat);
    while (*p == ' ') p++;
    size_t i = 0;
    if (*p == '"') {
        p++;
        while (*p && *p != '"' && i + 1 < n) out[i++] = *p++;
    } else {
        while (*p && *p != ',' && *p != '\n' && *p != '}' && i + 1 < n) out[i++] = *p++;
    }
    out[i] = 0;
    return true;
}

/* The manifest's identity, strictly: a file we did not write, or one cut
 * short, is garbage and said to be, never taken for another run's. */
static bool manifest_parse(const char *m, int64_t dir_step, CkptInfo *ci) {
    char fmt[32] = "", w[32] = "", ph[32] = "", st[32] = "";
    if (!manifest_field(m, "format", fmt, sizeof fmt) || strcmp(fmt, "zinf-checkpoint")) {
        snprintf(ci->why, sizeof ci->why, "manifest.json is not a zinf checkpoint manifest");
        return false;
    }
    if (!manifest_field(m, "world", w, sizeof w) || !manifest_field(m, "plan_hash", ph, sizeof ph) ||
        !manifest_field(m, "step", st, sizeof st) || !strstr(m, "\"state\":") || !strrchr(m, '}')) {
        snprintf(ci->why, sizeof ci->why, "manifest.json lacks a field (world, plan_hash, step or state)");
        return false;
    }
    char *e1, *e2, *e3;
    long long wv = strtoll(w, &e1, 10), sv = strtoll(st, &e2, 10);
    unsigned long long hv = strtoull(ph, &e3, 16);
    if (*e1 || *e2 || *e3 || strlen(ph) != 16 || wv < 1 || wv > (1 << 24) || sv != dir_step) {
        snprintf(ci->why, sizeof ci->why, "manifest.json has a bad world '%.8s', plan_hash '%.20s' or step '%.20s'", w, ph, st);
        return false;
    }
    ci->world = (int)wv;
    ci->plan_hash = hv;
    ci->ident_known = true;
    ci->layout = strstr(m, "\"layout\":") != NULL;
    return true;
}

/* A shard's identity from its header (a shard file or a temporary one). */
static bool shard_ident(const char *path, int *world, uint64_t *plan_hash) {
    unsigned char hdr[36];
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(hdr, 1, sizeof hdr, f);
    fclose(f);
    if (n != sizeof hdr || memcmp(hdr, ckpt_magic, 8) != 0) return false;
    *world = (int)ckpt_get_le(hdr + 16, 4);
    *plan_hash = ckpt_get_le(hdr + 28, 8);
    return true;
}

static bool step_name(const char *name, int64_t *step) {
    char tail;
    return sscanf(name, "step-%" SCNd64 "%c", step, &tail) == 1 && *step >= 0;
}

/* "NAME<sep>PID" (sep ".tmp." or ".deleting."): the PID of the process
 * that was writing or removing it, or 0. */
static long pid_after(const char *name, const char *sep) {
    const char *t = strstr(name, sep);
    if (!t) return 0;
    char *end;
    long pid = strtol(t + strlen(sep), &end, 10);
    return *end || pid <= 0 ? 0 : pid;
}

static bool pid_alive(long pid) { return kill((pid_t)pid, 0) == 0 || errno == EPERM; }

/* Whether the writer of temporary `path` (PID pid) is gone: its PID is not
 * alive here and nobody holds the lock it took (ckpt_write_file_atomic).
 * Unknown (-1) where the file system has no flock. */
static int writer_gone(const char *path, long pid) {
    if (pid_alive(pid)) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 1 : -1;
    int got = flock(fd, LOCK_EX | LOCK_NB);
    int e = errno;
    close(fd);
    return got == 0 ? 1 : e == EWOULDBLOCK ? 0 : -1;
}

static int by_step_desc(const void *a, const void *b) {
    const CkptInfo *x = a, *y = b;
    return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

int ckpt_scan(const char *root, CkptInfo **out, int *count, char *err, size_t errlen) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return 0;
        return errorf(err, errlen, "cannot open checkpoint directory %s: %s", root, strerror(errno));
    }
    CkptInfo *v = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t s;
        if (!step_name(de->d_name, &s)) continue;
        if (n == cap) {
            CkptInfo *nv = realloc(v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 16));
            if (!nv) { rc = errorf(err, errlen, "out of memory listing %s", root); break; }
            v = nv;
        }
        CkptInfo *ci = &v[n++];
        memset(ci, 0, sizeof *ci);
        ci->step = s;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s/manifest.json", root, de->d_name);
        size_t len = 0;
        char *m = read_small_file(path, CKPT_MANIFEST_MAX, &len);
        if (m) {
            ci->state = manifest_parse(m, s, ci) ? CKPT_COMPLETE : CKPT_BAD_MANIFEST;
            free(m);
            continue;
        }
        /* incomplete: who was writing it, from any shard or temporary shard */
        ci->state = CKPT_INCOMPLETE;
        snprintf(path, sizeof path, "%s/%s", root, de->d_name);
        DIR *sd = opendir(path);
        struct dirent *fe;
        while (sd && (fe = readdir(sd)) && !ci->ident_known) {
            if (strncmp(fe->d_name, "rank-", 5)) continue;
            char fp[4700];
            snprintf(fp, sizeof fp, "%s/%s", path, fe->d_name);
            ci->ident_known = shard_ident(fp, &ci->world, &ci->plan_hash);
        }
        if (sd) closedir(sd);
    }
    closedir(d);
    if (rc) { free(v); return rc; }
    if (n > 1) qsort(v, (size_t)n, sizeof *v, by_step_desc);
    *out = v;
    *count = n;
    return 0;
}

bool ckpt_is_own(const CkptInfo *ci, int world, uint64_t plan_hash) {
    return ci->ident_known && ci->world == world && ci->plan_hash == plan_hash;
}

int ckpt_find_latest(const char *root, int world, uint64_t plan_hash, int64_t *step,
                     char *why, size_t whylen, char *err, size_t errlen) {
    if (why && whylen) why[0] = 0;
    CkptInfo *v;
    int n, found = 0;
    if (ckpt_scan(root, &v, &n, err, errlen)) return -1;
    for (int i = 0; i < n && !found; i++) {
        if (v[i].state == CKPT_COMPLETE && ckpt_is_own(&v[i], world, plan_hash)) {
            *step = v[i].step;
            found = 1;
        } else if (why && whylen && !why[0]) {
            snprintf(why, whylen, "%s/step-%08" PRId64 " %s: skipped", root, v[i].step,
                     v[i].state == CKPT_INCOMPLETE     ? "has no manifest (incomplete)"
                     : v[i].state == CKPT_BAD_MANIFEST ? v[i].why
                                                       : "is for another plan or world size");
        }
    }
    free(v);
    return found;
}

/* Removes every file of a directory, then the directory. */
static int remove_dir(const char *dir, char *err, size_t errlen) {
    DIR *sd = opendir(dir);
    if (sd) {
        struct dirent *de;
        char p[4400];
        while ((de = readdir(sd))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (unlink(p) != 0 && errno != ENOENT) {
                int e = errno;
                closedir(sd);
                return errorf(err, errlen, "cannot remove %s: %s", p, strerror(e));
            }
        }
        closedir(sd);
    }
    if (rmdir(dir) != 0 && errno != ENOENT) return errorf(err, errlen, "cannot remove %s: %s", dir, strerror(errno));
    return 0;
}

/* Removes a step directory: first renamed out of the checkpoints' names
 * (step-N.deleting.PID), so a kill midway leaves no half checkpoint, only
 * a name that the next start finishes removing. */
static int remove_step(const char *root, int64_t step, char *err, size_t errlen) {
    char dir[4096], gone[4200];
    ckpt_step_dir(root, step, dir, sizeof dir);
    snprintf(gone, sizeof gone, "%s.deleting.%d", dir, (int)getpid());
    if (rename(dir, gone) != 0) return errno == ENOENT ? 0 : errorf(err, errlen, "cannot remove %s: %s", dir, strerror(errno));
    return remove_dir(gone, err, errlen);
}

/* Whether a directory has no entries but . and .. */
static bool dir_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *de;
    bool empty = true;
    while (empty && (de = readdir(d))) empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(d);
    return empty;
}

static void note(char *report, size_t replen, size_t *used, const char *dir, const char *what) {
    if (!report || *used + 1 >= replen) return;
    int w = snprintf(report + *used, replen - *used, "%s%s (%s)", *used ? ", " : "", dir, what);
    if (w > 0) *used = (size_t)w < replen - *used ? *used + (size_t)w : replen - 1;
}

/* Root entries "step-N.deleting.PID" whose remover is gone and whose shards
 * (if any are left) are this run's: finishes their removal. */
static int finish_removals(const char *root, int world, uint64_t plan_hash, int *removed, char *report, size_t replen,
                           size_t *used, char *err, size_t errlen) {
    DIR *d = opendir(root);
    if (!d) return errno == ENOENT ? 0 : errorf(err, errlen, "cannot open checkpoint directory %s: %s", root, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        long pid = pid_after(de->d_name, ".deleting.");
        if (strncmp(de->d_name, "step-", 5) || !pid || pid_alive(pid)) continue;
        char dir[4400];
        snprintf(dir, sizeof dir, "%s/%s", root, de->d_name);
        bool mine = true;
        DIR *sd = opendir(dir);
        struct dirent *fe;
        while (sd && (fe = readdir(sd)) && mine) {
            char fp[4700];
            int w;
            uint64_t h;
            snprintf(fp, sizeof fp, "%s/%s", dir, fe->d_name);
            if (!strncmp(fe->d_name, "rank-", 5) && shard_ident(fp, &w, &h)) mine = w == world && h == plan_hash;
        }
        if (sd) closedir(sd);
        if (mine && !(rc = remove_dir(dir, err, errlen))) {
            (*removed)++;
            note(report, replen, used, dir, "interrupted removal");
        }
    }
    closedir(d);
    return rc;
}

int ckpt_clean_debris(const char *root, int world, uint64_t plan_hash, char *report, size_t replen, char *err, size_t errlen) {
    if (report && replen) report[0] = 0;
    size_t used = 0;
    CkptInfo *v;
    int n;
    if (ckpt_scan(root, &v, &n, err, errlen)) return -1;
    int removed = 0, rc = finish_removals(root, world, plan_hash, &removed, report, replen, &used, err, errlen);
    for (int i = 0; i < n && !rc; i++) {
        char dir[4096];
        ckpt_step_dir(root, v[i].step, dir, sizeof dir);
        /* a writer killed between making the directory and its first file */
        if (v[i].state == CKPT_INCOMPLETE && dir_empty(dir)) {
            if (rmdir(dir) == 0) {
                removed++;
                note(report, replen, &used, dir, "empty");
            }
            continue;
        }
        /* Temporaries whose writer is gone can never become a checkpoint:
         * removed whoever's they are (a kill before the shard's header
         * leaves one that names no run). A live writer keeps its whole
         * directory. Without flock, the old test: this run's only. */
        bool live = false, mine = ckpt_is_own(&v[i], world, plan_hash);
        int tmps = 0;
        DIR *sd = opendir(dir);
        struct dirent *de;
        while (sd && (de = readdir(sd))) {
            long pid = pid_after(de->d_name, ".tmp.");
            if (!pid) continue;
            char fp[4400];
            snprintf(fp, sizeof fp, "%s/%s", dir, de->d_name);
            int gone = writer_gone(fp, pid);
            if (!gone) { live = true; continue; }
            int w = 0;
            uint64_t h = 0;
            bool known = shard_ident(fp, &w, &h);
            if (gone > 0 || (known ? (w == world && h == plan_hash) : mine)) {
                if (unlink(fp) != 0 && errno != ENOENT) rc = errorf(err, errlen, "cannot remove %s: %s", fp, strerror(errno));
                else tmps++;
                if (!v[i].ident_known && known) mine = w == world && h == plan_hash;
            }
        }
        if (sd) closedir(sd);
        const char *what = NULL;
        if (v[i].state == CKPT_INCOMPLETE && !live && !rc && (mine || dir_empty(dir))) {
            rc = remove_step(root, v[i].step, err, errlen);
            what = "incomplete checkpoint";
        } else if (tmps) {
            what = "temporary files";
        }
        if (what && !rc) {
            removed++;
            note(report, replen, &used, dir, what);
        }
    }
    free(v);
    return rc ? rc : removed;
}
int ckpt_read_shard(const char *root, int64_t step, int rank, int world, uint64_t plan_hash,
                    CkptEntry *e, int n, Progress *progress, char *err, size_t errlen) {
    char dir[4096], path[4200];
    ckpt_step_dir(root, step, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/rank-%05d.zck", dir, rank);
    FILE *f = fopen(path, "rb");
    if (!f) return errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    uint64_t h = CKPT_FNV_INIT;
    unsigned char hdr[36];
    int rc = -1;
    uint64_t total = 0, read_bytes = 0;
    for (int i = 0; i < n; i++) total += e[i].bytes;
    if (fread(hdr, 1, 36, f) != 36) { errorf(err, errlen, "%s: truncated header", path); goto out; }
    h = ckpt_fnv_update(h, hdr, 36);
    if (memcmp(hdr, ckpt_magic, 8) != 0) { errorf(err, errlen, "%s: not a zinf checkpoint shard (bad magic)", path); goto out; }
    unsigned version = (unsigned)ckpt_get_le(hdr + 8, 4);
    if (version != 1 && version != CKPT_VERSION) { errorf(err, errlen, "%s: unsupported version %u", path, version); goto out; }
    if ((int)ckpt_get_le(hdr + 12, 4) != rank || (int)ckpt_get_le(hdr + 16, 4) != world) {
        errorf(err, errlen, "%s: shard of rank %u of %u, expected rank %d of %d", path, (unsigned)ckpt_get_le(hdr + 12, 4),
             (unsigned)ckpt_get_le(hdr + 16, 4), rank, world);
        goto out;
    }
    if ((int64_t)ckpt_get_le(hdr + 20, 8) != step || ckpt_get_le(hdr + 28, 8) != plan_hash) {
        errorf(err, errlen, "%s: shard is for another step or plan", path);
        goto out;
    }
    unsigned char nb[4];
    if (fread(nb, 1, 4, f) != 4) { errorf(err, errlen, "%s: truncated", path); goto out; }
    h = ckpt_fnv_update(h, nb, 4);
    if ((int)ckpt_get_le(nb, 4) != n) { errorf(err, errlen, "%s: holds %u tensors, the plan has %d", path, (unsigned)ckpt_get_le(nb, 4), n); goto out; }
    for (int i = 0; i < n; i++) {
        unsigned char l2[2];
        if (fread(l2, 1, 2, f) != 2) { errorf(err, errlen, "%s: truncated", path); goto out; }
        h = ckpt_fnv_update(h, l2, 2);
        size_t nl = (size_t)ckpt_get_le(l2, 2);
        char name[65536];
        if (fread(name, 1, nl, f) != nl) { errorf(err, errlen, "%s: truncated", path); goto out; }
        h = ckpt_fnv_update(h, name, nl);
        name[nl] = 0;
        unsigned char eh[17];
        if (fread(eh, 1, 17, f) != 17) { errorf(err, errlen, "%s: truncated", path); goto out; }
        h = ckpt_fnv_update(h, eh, 17);
        if (strcmp(name, e[i].name) != 0 || eh[0] != e[i].dtype || ckpt_get_le(eh + 1, 8) != e[i].bytes) {
            errorf(err, errlen, "%s: entry %d is '%s' (%" PRIu64 " bytes), the plan expects '%s' (%" PRIu64 " bytes)", path, i,
                 name, ckpt_get_le(eh + 1, 8), e[i].name, e[i].bytes);
            goto out;
        }
        if (version >= 2) { /* the chunk checksums: the entry's whole checksum below covers the same bytes */
            unsigned char sh[4], cbuf[8];
            if (fread(sh, 1, 4, f) != 4) { errorf(err, errlen, "%s: truncated", path); goto out; }
            h = ckpt_fnv_update(h, sh, 4);
            unsigned shift = (unsigned)ckpt_get_le(sh, 4);
            if (shift < CKPT_CHUNK_SHIFT_MIN || shift > CKPT_CHUNK_SHIFT_MAX) { errorf(err, errlen, "%s: '%s' has chunks of 2^%u bytes", path, name, shift); goto out; }
            for (uint64_t c = 0; c < (e[i].bytes + ((uint64_t)1 << shift) - 1) >> shift; c++) {
                if (fread(cbuf, 1, 8, f) != 8) { errorf(err, errlen, "%s: truncated", path); goto out; }
                h = ckpt_fnv_update(h, cbuf, 8);
            }
        }
        for (uint64_t at = 0; at < e[i].bytes;) { /* 64 MiB at a time, so that progress moves */
            size_t want = e[i].bytes - at > (64u << 20) ? (64u << 20) : (size_t)(e[i].bytes - at);
            if (fread((char *)e[i].data + at, 1, want, f) != want) { errorf(err, errlen, "%s: truncated in '%s'", path, name); goto out; }
            at += want;
            read_bytes += want;
            if (read_bytes < total) progress_report(progress, "reading the checkpoint", "B", read_bytes, total);
        }
        h = ckpt_fnv_update(h, e[i].data, e[i].bytes);
        if (ckpt_fnv_update(CKPT_FNV_INIT, e[i].data, e[i].bytes) != ckpt_get_le(eh + 9, 8)) {
            errorf(err, errlen, "%s: checksum mismatch in '%s' (file corrupt)", path, name);
            goto out;
        }
    }
    unsigned char tail[8];
    if (fread(tail, 1, 8, f) != 8) { errorf(err, errlen, "%s: truncated", path); goto out; }
    if (ckpt_get_le(tail, 8) != h) { errorf(err, errlen, "%s: file checksum mismatch (file corrupt)", path); goto out; }
    if (fgetc(f) != EOF) { errorf(err, errlen, "%s: trailing bytes after the shard", path); goto out; }
    if (total) progress_report(progress, "reading the checkpoint", "B", total, total);
    rc = 0;
out:
    fclose(f);
    return rc;
}

char *ckpt_read_state(const char *root, int64_t step, char *err, size_t errlen) {
    char dir[4096], path[4200];
    ckpt_step_dir(root, step, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *m = read_small_file(path, CKPT_MANIFEST_MAX, NULL);
    if (!m) { errorf(err, errlen, "cannot read %s: %s", path, strerror(errno)); return NULL; }
    char *p = strstr(m, "\"state\":");
    if (!p) { free(m); errorf(err, errlen, "%s: no state", path); return NULL; }
    p += 8;
    while (*p == ' ') p++;
    /* The state object runs to the matching brace. */
    int depth = 0;
    char *q = p;
    for (; *q; q++) {
        if (*q == '{') depth++;
        else if (*q == '}' && --depth == 0) { q++; break; }
    }
    size_t n = (size_t)(q - p);
    char *s = malloc(n + 1);
    if (s) { memcpy(s, p, n); s[n] = 0; }
    free(m);
    return s;
}

int ckpt_set_aside(const char *root, int64_t step, char *to, size_t ton, char *err, size_t errlen) {
    char dir[4096];
    ckpt_step_dir(root, step, dir, sizeof dir);
    for (int k = 0; k < 100; k++) {
        if (k) snprintf(to, ton, "%s.bad.%d", dir, k);
        else snprintf(to, ton, "%s.bad", dir);
        struct stat st;
        if (stat(to, &st) == 0) continue;
        if (rename(dir, to) != 0) return errorf(err, errlen, "cannot rename %s to %s: %s", dir, to, strerror(errno));
        return fsync_dir_of(dir) ? errorf(err, errlen, "fsync of %s failed: %s", root, strerror(errno)) : 0;
    }
    return errorf(err, errlen, "cannot set %s aside: %s.bad to .bad.99 all exist", dir, dir);
}

int ckpt_prune(const char *root, int world, uint64_t plan_hash, int64_t upto, int keep, char *err, size_t errlen) {
    CkptInfo *v;
    int n;
    if (ckpt_scan(root, &v, &n, err, errlen)) return -1;
    int kept = 0, rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        /* another run's, or a later one of this run's that a user started over from: not ours to judge */
        if (v[i].state != CKPT_COMPLETE || !ckpt_is_own(&v[i], world, plan_hash) || v[i].step > upto) continue;
        if (kept++ < keep) continue;
        rc = remove_step(root, v[i].step, err, errlen);
    }
    free(v);
    return rc;
}

int safetensors_write(const char *path, const StTensor *t, int n, const char *model, char *err, size_t errlen) {
    StOutTensor *out = calloc((size_t)n + 1, sizeof *out);
    const void **parts = calloc((size_t)n + 1, sizeof *parts);
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    uint8_t *hdr = NULL;
    size_t hlen = 0;
    int rc = 0;
    if (!out || !parts || !lens) rc = errorf(err, errlen, "out of memory writing %s", path);
    for (int i = 0; i < n && !rc; i++) {
        int d = st_dtype_from_plan(t[i].dtype);
        if (d < 0 || t[i].rank < 0 || t[i].rank > ST_MAX_RANK) {
            rc = errorf(err, errlen, "%s: tensor '%s' has no safetensors dtype or too many dimensions", path, t[i].name);
            break;
        }
        out[i] = (StOutTensor){.name = t[i].name, .dtype = (StDtype)d, .rank = t[i].rank};
        memcpy(out[i].shape, t[i].dims, sizeof(int64_t) * (size_t)t[i].rank);
    }
    const char *meta[] = {"format", "pt", "producer", "zinf", "model", model ? model : ""};
    if (!rc) rc = st_header_build(out, (size_t)n, meta, 3, &hdr, &hlen, err, errlen);
    for (int i = 0; i < n && !rc; i++)
        if (out[i].bytes != t[i].bytes) rc = errorf(err, errlen, "%s: tensor '%s' has %" PRIu64 " bytes, its shape says %" PRIu64, path,
                                                  t[i].name, t[i].bytes, out[i].bytes);
    if (!rc) {
        parts[0] = hdr;
        lens[0] = hlen;
        for (int i = 0; i < n; i++) {
            parts[1 + i] = t[i].data;
            lens[1 + i] = t[i].bytes;
        }
        rc = ckpt_write_file_atomic(path, parts, lens, n + 1, err, errlen);
    }
    free(hdr);
    free(out);
    free(parts);
    free(lens);
    return rc;
}
