/* ckpt_reshard: reading a checkpoint by global element ranges, whatever
 * world and plan wrote it (ckpt.h): the manifest's layout, the range
 * arithmetic between two shard layouts, and the reader that fetches a
 * slice's ranges from the writers' shard files with pread, verifying each
 * writer entry it uses once. */
#include "ckpt.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "json.h"
#include "vocab.h"
#include "ckpt_impl.h"
#include "errorf.h"




/* ---- the manifest ---- */

static bool get_i64(const JsonValue *o, const char *key, int64_t *v) {
    const JsonValue *x = json_get_type(o, key, JSON_NUMBER);
    if (!x || !x->is_integer) return false;
    *v = x->integer;
    return true;
}

int ckpt_layout_check(const CkptShardLayout *l, int world, char *err, size_t errlen) {
    if (l->numel < 0 || l->ntiles < 1 || l->tile_elems < 0 || l->tile_shard < 1 || world < 1 ||
        l->tile_elems > INT64_MAX / l->ntiles || (int64_t)l->ntiles * l->tile_elems != l->numel)
        return errorf(err, errlen, "tiles do not add up to the tensor (%d x %" PRId64 " elements, %" PRId64 " in all)",
                    (int)l->ntiles, l->tile_elems, l->numel);
    bool covers = l->partitioned ? l->tile_shard <= INT64_MAX / world && l->tile_shard * world >= l->tile_elems
                                 : l->tile_shard >= l->tile_elems;
    if (!covers || l->tile_shard > INT64_MAX / l->ntiles)
        return errorf(err, errlen, "slices of %" PRId64 " elements do not cover a tile of %" PRId64 " on %d rank%s", l->tile_shard,
                    l->tile_elems, world, world == 1 ? "" : "s");
    return 0;
}

static int parse_tensor(const JsonValue *o, int world, CkptTensorLayout *t, char *err, size_t errlen) {
    const char *name = json_get_str(o, "name");
    const JsonValue *shape = json_get_type(o, "shape", JSON_ARRAY);
    int64_t dt, cls, nt;
    int part = json_get_bool(o, "partitioned", -1);
    if (!name || !shape || shape->count > 6 || !get_i64(o, "dtype", &dt) || !get_i64(o, "class", &cls) ||
        !get_i64(o, "numel", &t->s.numel) || !get_i64(o, "ntiles", &nt) || !get_i64(o, "tile_elems", &t->s.tile_elems) ||
        !get_i64(o, "tile_shard", &t->s.tile_shard) || part < 0 || dt < 0 || dt > 255 || cls < 0 || cls > 255 ||
        nt < 1 || nt > INT32_MAX || dtype_bytes((DType)dt, 1) <= 0)
        return errorf(err, errlen, "a layout entry lacks a field or has a bad one");
    if (!(t->name = strdup(name))) return errorf(err, errlen, "out of memory");
    t->dtype = (uint8_t)dt;
    t->cls = (uint8_t)cls;
    t->s.ntiles = (int32_t)nt;
    t->s.partitioned = part == 1;
    t->rank = (int)shape->count;
    for (size_t d = 0; d < shape->count; d++) {
        const JsonValue *x = &shape->items[d];
        if (x->type != JSON_NUMBER || !x->is_integer || x->integer < 0) return errorf(err, errlen, "'%s': a bad shape", name);
        t->dims[d] = x->integer;
    }
    char why[200];
    if (ckpt_layout_check(&t->s, world, why, sizeof why)) return errorf(err, errlen, "'%s': %s", name, why);
    return 0;
}

static int parse_layout(const JsonValue *lo, int world, CkptLayout *l, char *err, size_t errlen) {
    const JsonValue *ts = json_get_type(lo, "tensors", JSON_ARRAY);
    int64_t dt;
    if (!ts || !get_i64(lo, "micro_batch", &l->micro_batch) || !get_i64(lo, "grad_accum", &l->grad_accum) ||
        !get_i64(lo, "dtype", &dt) || dt < 0 || dt > 255 || ts->count > (1u << 24))
        return errorf(err, errlen, "the layout lacks micro_batch, grad_accum, dtype or tensors");
    l->train_dtype = (uint8_t)dt;
    l->owned = true;
    l->t = calloc(ts->count + 1, sizeof *l->t);
    if (!l->t) return errorf(err, errlen, "out of memory");
    for (size_t i = 0; i < ts->count; i++) {
        l->n = (int)i + 1; /* what to free */
        if (ts->items[i].type != JSON_OBJECT) return errorf(err, errlen, "layout entry %zu is not an object", i);
        if (parse_tensor(&ts->items[i], world, &l->t[i], err, errlen)) return -1;
    }
    l->n = (int)ts->count;
    return 0;
}

static int parse_manifest(const JsonValue *root, CkptManifest *m, char *err, size_t errlen) {
    const char *fmt = json_get_str(root, "format"), *model = json_get_str(root, "model");
    const char *hash = json_get_str(root, "plan_hash");
    int64_t world;
    if (!fmt || strcmp(fmt, "zinf-checkpoint") || !model || !hash || !get_i64(root, "world", &world) || world < 1 ||
        world > (1 << 24) || strlen(hash) != 16)
        return errorf(err, errlen, "not a zinf checkpoint manifest, or it lacks model, world or plan_hash");
    char *end;
    m->plan_hash = strtoull(hash, &end, 16);
    if (*end) return errorf(err, errlen, "a bad plan_hash '%s'", hash);
    snprintf(m->model, sizeof m->model, "%s", model);
    m->world = (int)world;
    const JsonValue *lo = json_get_type(root, "layout", JSON_OBJECT);
    m->has_layout = lo != NULL;
    if (lo && parse_layout(lo, m->world, &m->layout, err, errlen)) return -1;
    return 0;
}

int ckpt_read_manifest(const char *root, int64_t step, CkptManifest *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    char dir[4096], path[4200];
    ckpt_step_dir(root, step, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return errorf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    struct stat sb;
    size_t len = fstat(fileno(f), &sb) == 0 && sb.st_size > 0 ? (size_t)sb.st_size : 0;
    if (len > CKPT_MANIFEST_MAX) len = CKPT_MANIFEST_MAX;
    char *text = malloc(len + 1);
    size_t got = text ? fread(text, 1, len, f) : 0;
    fclose(f);
    if (!text) return errorf(err, errlen, "out of memory reading %s", path);
    JsonDoc doc;
    char je[256];
    int rc = 0;
    if (json_parse(text, got, &doc, je, sizeof je)) {
        rc = errorf(err, errlen, "%s: %s", path, je);
    } else {
        char why[512];
        if (parse_manifest(doc.root, m, why, sizeof why)) rc = errorf(err, errlen, "%s: %s", path, why);
    }
    json_free(&doc);
    free(text);
    if (rc) ckpt_manifest_free(m);
    return rc;
}

void ckpt_manifest_free(CkptManifest *m) {
    if (m->layout.owned) {
        for (int i = 0; i < m->layout.n; i++) free((void *)m->layout.t[i].name);
        free(m->layout.t);
    }
    memset(&m->layout, 0, sizeof m->layout);
    m->has_layout = false;
}

/* ---- the range arithmetic ---- */

/* The reader counts a tensor in units of one element, or of one block
 * for a blocked one (DT_NF4, DT_INT8: 64; DT_DYN8, DT_UDYN8, 8-bit Adam
 * moments: 2048. Its tiles and shards are whole blocks, but for the short
 * last block of an untiled 8-bit moment, which takes a whole block's bytes;
 * so its byte ranges are linear in blocks, and blocks start at the same
 * elements in every layout): bytes per unit, and a layout in units. */
static size_t unit_bytes(int dt) {
    return (size_t)(dtype_is_blocked(dt) ? dtype_bytes((DType)dt, dtype_block(dt)) : dtype_size((DType)dt));
}
static int64_t blocks_of(int64_t n, int64_t blk) { return (n + blk - 1) / blk; }
/* A layout whose tiles and slices are whole blocks of dt (all but the
 * last block of an untiled tensor): what in_units assumes. */
static bool whole_blocks(const CkptShardLayout *s, int dt) {
    int64_t blk = dtype_block(dt);
    return !((s->ntiles > 1 && s->tile_elems % blk) || (s->partitioned && s->tile_shard % blk));
}
static CkptShardLayout in_units(const CkptShardLayout *s, int dt) {
    CkptShardLayout u = *s;
    if (dtype_is_blocked(dt)) {
        int64_t blk = dtype_block(dt);
        u.numel = blocks_of(u.numel, blk);
        u.tile_elems = blocks_of(u.tile_elems, blk);
        u.tile_shard = blocks_of(u.tile_shard, blk);
    }
    return u;
}

int ckpt_reshard_pieces(const CkptShardLayout *from, int from_world, const CkptShardLayout *to, int rank,
                        CkptPieceFn fn, void *ctx) {
    if (from->numel != to->numel || from_world < 1 || rank < 0) return -1;
    if (from->numel == 0) return 0;
    if (from->tile_elems <= 0 || from->tile_shard <= 0) return -1;
    const int64_t E = from->tile_elems, S = from->tile_shard;
    const int64_t w0 = to->partitioned ? (int64_t)rank * to->tile_shard : 0;
    int64_t valid = to->tile_elems - w0; /* the rest of each of the reader's slices is padding */
    if (valid > to->tile_shard) valid = to->tile_shard;
    for (int64_t u2 = 0; u2 < to->ntiles; u2++) {
        for (int64_t j = 0; j < valid;) {
            int64_t g = u2 * to->tile_elems + w0 + j; /* the global element */
            int64_t u = g / E, o = g % E, src, lim;
            int writer;
            if (from->partitioned) {
                int64_t w = o / S, so = o - w * S;
                if (w >= from_world) return -1;
                writer = (int)w;
                src = u * S + so;
                lim = S - so < E - o ? S - so : E - o;
            } else {
                writer = rank % from_world;
                src = u * S + o;
                lim = E - o;
            }
            int64_t run = lim < valid - j ? lim : valid - j;
            int rc = fn(ctx, writer, src, u2 * to->tile_shard + j, run);
            if (rc) return rc;
            j += run;
        }
    }
    return 0;
}

/* ---- the reader ---- */

int ckpt_reader_open(CkptReader *rd, const char *root, int64_t step, const CkptManifest *m, size_t stage_bytes,
                     char *err, size_t errlen) {
    memset(rd, 0, sizeof *rd);
    ckpt_step_dir(root, step, rd->dir, sizeof rd->dir);
    rd->step = step;
    rd->m = m;
    rd->stage_bytes = stage_bytes ? stage_bytes : 1;
    rd->fd = malloc(sizeof *rd->fd * (size_t)m->world);
    rd->off = calloc((size_t)m->world, sizeof *rd->off);
    rd->sum = calloc((size_t)m->world, sizeof *rd->sum);
    rd->tab = calloc((size_t)m->world, sizeof *rd->tab);
    rd->shift = calloc((size_t)m->world, sizeof *rd->shift);
    rd->stage = malloc(rd->stage_bytes);
    if (!rd->fd || !rd->off || !rd->sum || !rd->tab || !rd->shift || !rd->stage) {
        free(rd->fd);
        rd->fd = NULL; /* nothing opened */
        ckpt_reader_close(rd);
        return errorf(err, errlen, "out of memory reading %s", rd->dir);
    }
    for (int w = 0; w < m->world; w++) rd->fd[w] = -1;
    return 0;
}

void ckpt_reader_close(CkptReader *rd) {
    for (int w = 0; rd->m && w < rd->m->world; w++) {
        if (rd->fd && rd->fd[w] >= 0) close(rd->fd[w]);
        if (rd->off) free(rd->off[w]);
        if (rd->sum) free(rd->sum[w]);
        if (rd->tab) free(rd->tab[w]);
        if (rd->shift) free(rd->shift[w]);
    }
    free(rd->fd);
    free(rd->off);
    free(rd->sum);
    free(rd->tab);
    free(rd->shift);
    free(rd->stage);
    memset(rd, 0, sizeof *rd);
}

/* Reads exactly n bytes at off; 0, or -1 (a short file). */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* The entries of writer w's shard file, each checked against the manifest. */
static int index_writer(CkptReader *rd, int w, const char *path, char *err, size_t errlen) {
    const CkptManifest *m = rd->m;
    if (rd->fd[w] < 0 && (rd->fd[w] = open(path, O_RDONLY | O_CLOEXEC)) < 0) return errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    unsigned char hdr[40];
    if (pread_all(rd->fd[w], hdr, sizeof hdr, 0)) return errorf(err, errlen, "%s: truncated header", path);
    uint64_t version = ckpt_get_le(hdr + 8, 4);
    if (memcmp(hdr, "ZINFCKPT", 8) || (version != 1 && version != 2))
        return errorf(err, errlen, "%s: not a zinf checkpoint shard of version 1 or 2", path);
    if (ckpt_get_le(hdr + 12, 4) != (uint64_t)w || ckpt_get_le(hdr + 16, 4) != (uint64_t)m->world ||
        (int64_t)ckpt_get_le(hdr + 20, 8) != rd->step || ckpt_get_le(hdr + 28, 8) != m->plan_hash)
        return errorf(err, errlen, "%s: the shard's rank, world, step or plan is not the manifest's", path);
    if (ckpt_get_le(hdr + 36, 4) != (uint64_t)m->layout.n)
        return errorf(err, errlen, "%s: holds %u tensors, the manifest lists %d", path, (unsigned)ckpt_get_le(hdr + 36, 4), m->layout.n);
    free(rd->sum[w]);
    free(rd->tab[w]);
    free(rd->shift[w]);
    rd->off[w] = malloc(sizeof(uint64_t) * ((size_t)m->layout.n + 1));
    rd->sum[w] = malloc(sizeof(uint64_t) * ((size_t)m->layout.n + 1));
    rd->tab[w] = calloc((size_t)m->layout.n + 1, sizeof(uint64_t));
    rd->shift[w] = calloc((size_t)m->layout.n + 1, 1);
    if (!rd->off[w] || !rd->sum[w] || !rd->tab[w] || !rd->shift[w]) return errorf(err, errlen, "out of memory");
    struct stat sb;
    uint64_t size = fstat(rd->fd[w], &sb) == 0 ? (uint64_t)sb.st_size : 0, pos = sizeof hdr;
    for (int k = 0; k < m->layout.n; k++) {
        const CkptTensorLayout *t = &m->layout.t[k];
        unsigned char l2[2], eh[17];
        char name[65536];
        if (pread_all(rd->fd[w], l2, 2, pos)) return errorf(err, errlen, "%s: truncated", path);
        size_t nl = (size_t)ckpt_get_le(l2, 2);
        if (pread_all(rd->fd[w], name, nl, pos + 2) || pread_all(rd->fd[w], eh, 17, pos + 2 + nl))
            return errorf(err, errlen, "%s: truncated", path);
        name[nl] = 0;
        uint64_t bytes = (uint64_t)t->s.ntiles * (uint64_t)in_units(&t->s, t->dtype).tile_shard * (uint64_t)unit_bytes(t->dtype);
        if (strcmp(name, t->name) || eh[0] != t->dtype || ckpt_get_le(eh + 1, 8) != bytes)
            return errorf(err, errlen, "%s: entry %d is '%s' (%" PRIu64 " bytes), the manifest says '%s' (%" PRIu64 " bytes)", path, k,
                        name, ckpt_get_le(eh + 1, 8), t->name, bytes);
        rd->off[w][k] = pos + 2 + nl + 17;
        rd->sum[w][k] = ckpt_get_le(eh + 9, 8);
        if (version >= 2) { /* u32 chunk shift, the chunk checksums, then the data */
            unsigned char sh[4];
            if (pread_all(rd->fd[w], sh, 4, rd->off[w][k])) return errorf(err, errlen, "%s: truncated", path);
            uint64_t shift = ckpt_get_le(sh, 4);
            if (shift < CKPT_CHUNK_SHIFT_MIN || shift > CKPT_CHUNK_SHIFT_MAX)
                return errorf(err, errlen, "%s: '%s' has chunks of 2^%" PRIu64 " bytes", path, name, shift);
            rd->shift[w][k] = (uint8_t)shift;
            rd->tab[w][k] = rd->off[w][k] + 4;
            rd->off[w][k] = rd->tab[w][k] + 8 * ((bytes + ((uint64_t)1 << shift) - 1) >> shift);
        }
        pos = rd->off[w][k] + bytes;
        if (pos > size) return errorf(err, errlen, "%s: truncated in '%s'", path, name);
    }
    if (pos + 8 != size) return errorf(err, errlen, "%s: %" PRIu64 " bytes, its entries say %" PRIu64, path, size, pos + 8);
    return 0;
}

typedef struct Piece {
    int writer;
    int64_t src, dst, n;
} Piece;

typedef struct Pieces {
    Piece *v;
    size_t n, cap;
} Pieces;

static int piece_add(void *ctx, int writer, int64_t src, int64_t dst, int64_t n) {
    Pieces *ps = ctx;
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? 2 * ps->cap : 64;
        Piece *nv = realloc(ps->v, nc * sizeof *nv);
        if (!nv) return -2;
        ps->v = nv;
        ps->cap = nc;
    }
    ps->v[ps->n++] = (Piece){writer, src, dst, n};
    return 0;
}

static int by_writer_src(const void *a, const void *b) {
    const Piece *x = a, *y = b;
    if (x->writer != y->writer) return x->writer < y->writer ? -1 : 1;
    return x->src < y->src ? -1 : x->src > y->src;
}

/* Bytes [x0, x1) of writer w's entry k (at file offset base) into the
 * stage, part by part: each part hashed into *h and its overlap with the
 * pieces (sorted by src) copied to dst. */
static int stream_range(CkptReader *rd, int w, uint64_t base, uint64_t x0, uint64_t x1, const Piece *p, size_t np, size_t es,
                        uint8_t *dst, uint64_t *h) {
    for (uint64_t c0 = x0; c0 < x1; c0 += rd->stage_bytes) {
        uint64_t c1 = c0 + rd->stage_bytes < x1 ? c0 + rd->stage_bytes : x1;
        if (pread_all(rd->fd[w], rd->stage, (size_t)(c1 - c0), base + c0)) return -1;
        rd->bytes_read += c1 - c0;
        *h = ckpt_fnv_update(*h, rd->stage, (size_t)(c1 - c0));
        for (size_t i = 0; i < np; i++) {
            uint64_t a = (uint64_t)p[i].src * es, b = a + (uint64_t)p[i].n * es;
            if (a >= c1) break;
            uint64_t lo = a > c0 ? a : c0, hi = b < c1 ? b : c1;
            if (lo < hi) memcpy(dst + (uint64_t)p[i].dst * es + (lo - a), rd->stage + (lo - c0), (size_t)(hi - lo));
        }
    }
    return 0;
}

/* A version-2 entry: only the chunks the pieces touch, each checked
 * against its checksum. */
static int read_chunks(CkptReader *rd, int w, int k, const Piece *p, size_t np, uint8_t *dst, const char *path, char *err,
                       size_t errlen) {
    const CkptTensorLayout *t = &rd->m->layout.t[k];
    size_t es = unit_bytes(t->dtype);
    uint64_t bytes = (uint64_t)t->s.ntiles * (uint64_t)in_units(&t->s, t->dtype).tile_shard * es;
    unsigned shift = rd->shift[w][k];
    int64_t done = -1; /* the last chunk read */
    for (size_t i = 0; i < np; i++) {
        uint64_t a = (uint64_t)p[i].src * es, b = a + (uint64_t)p[i].n * es;
        if (a >= b) continue;
        int64_t c = (int64_t)(a >> shift) > done ? (int64_t)(a >> shift) : done + 1;
        for (; c <= (int64_t)((b - 1) >> shift); c++) {
            unsigned char want[8];
            uint64_t x0 = (uint64_t)c << shift, x1 = x0 + ((uint64_t)1 << shift) < bytes ? x0 + ((uint64_t)1 << shift) : bytes, h = CKPT_FNV_INIT;
            if (pread_all(rd->fd[w], want, 8, rd->tab[w][k] + 8 * (uint64_t)c) ||
                stream_range(rd, w, rd->off[w][k], x0, x1, p + i, np - i, es, dst, &h))
                return errorf(err, errlen, "%s: truncated in '%s'", path, t->name);
            if (h != ckpt_get_le(want, 8))
                return errorf(err, errlen, "%s: checksum mismatch in '%s' (file corrupt), in its bytes %" PRIu64 "..%" PRIu64, path, t->name, x0, x1);
            done = c;
        }
    }
    return 0;
}

/* Writer w's entry k: pieces [p, p + np) (sorted by src) copied to dst,
 * what was read verified: the chunks they touch (version 2), or the whole
 * entry once (version 1). */
static int read_entry(CkptReader *rd, int w, int k, const Piece *p, size_t np, uint8_t *dst, char *err, size_t errlen) {
    const CkptTensorLayout *t = &rd->m->layout.t[k];
    size_t es = unit_bytes(t->dtype);
    uint64_t bytes = (uint64_t)t->s.ntiles * (uint64_t)in_units(&t->s, t->dtype).tile_shard * es, h = CKPT_FNV_INIT;
    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%05d.zck", rd->dir, w);
    if (!rd->off[w] && index_writer(rd, w, path, err, errlen)) {
        free(rd->off[w]); /* so that nothing takes a half index for a whole one */
        rd->off[w] = NULL;
        return -1;
    }
    if (rd->tab[w][k]) return read_chunks(rd, w, k, p, np, dst, path, err, errlen);
    if (stream_range(rd, w, rd->off[w][k], 0, bytes, p, np, es, dst, &h)) return errorf(err, errlen, "%s: truncated in '%s'", path, t->name);
    if (h != rd->sum[w][k]) return errorf(err, errlen, "%s: checksum mismatch in '%s' (file corrupt)", path, t->name);
    return 0;
}

int ckpt_reader_read(CkptReader *rd, int k, const CkptShardLayout *to, int rank, void *dst, char *err, size_t errlen) {
    const CkptTensorLayout *t = &rd->m->layout.t[k];
    size_t es = unit_bytes(t->dtype);
    if (!whole_blocks(&t->s, t->dtype) || !whole_blocks(to, t->dtype))
        return errorf(err, errlen, "'%s' (%s): a tile or slice of the checkpoint's layout or this plan's is not whole blocks of %" PRId64
                      " elements", t->name, dtype_name((DType)t->dtype), dtype_block(t->dtype));
    CkptShardLayout from_u = in_units(&t->s, t->dtype), to_u = in_units(to, t->dtype);
    memset(dst, 0, (size_t)to->ntiles * (size_t)to_u.tile_shard * es);
    Pieces ps = {0};
    int rc = ckpt_reshard_pieces(&from_u, rd->m->world, &to_u, rank, piece_add, &ps);
    if (rc == -2) errorf(err, errlen, "out of memory reading '%s'", t->name);
    else if (rc) rc = errorf(err, errlen, "'%s': the checkpoint's layout and this plan's do not describe the same tensor", t->name);
    if (!rc && ps.n > 1) qsort(ps.v, ps.n, sizeof *ps.v, by_writer_src);
    for (size_t i = 0; i < ps.n && !rc;) {
        size_t j = i;
        while (j < ps.n && ps.v[j].writer == ps.v[i].writer) j++;
        rc = read_entry(rd, ps.v[i].writer, k, ps.v + i, j - i, dst, err, errlen);
        i = j;
    }
    free(ps.v);
    return rc;
}
