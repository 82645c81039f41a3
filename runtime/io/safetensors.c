#include "safetensors.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "errorf.h"
#include "half.h"
#include "json.h"

/* lang/ast.h DType codes, without the front end's header. */
enum { PDT_F32 = 1, PDT_BF16 = 2, PDT_F16 = 3 };

static const char *const dtype_names[ST_NDTYPES] = {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                                    "BF16", "I32", "U32", "F32", "F64", "I64", "U64"};
static const uint8_t dtype_sizes[ST_NDTYPES] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};

const char *st_dtype_name(StDtype d) { return (unsigned)d < ST_NDTYPES ? dtype_names[d] : "?"; }
size_t st_dtype_size(StDtype d) { return (unsigned)d < ST_NDTYPES ? dtype_sizes[d] : 0; }
bool st_dtype_is_float(StDtype d) { return d == ST_F32 || d == ST_F16 || d == ST_BF16; }

int st_dtype_parse(const char *s, size_t len) {
    for (int d = 0; d < ST_NDTYPES; d++)
        if (strlen(dtype_names[d]) == len && !memcmp(dtype_names[d], s, len)) return d;
    return -1;
}

int st_dtype_from_plan(int pd) { return pd == PDT_F32 ? ST_F32 : pd == PDT_BF16 ? ST_BF16 : pd == PDT_F16 ? ST_F16 : -1; }
int st_dtype_to_plan(StDtype d) { return d == ST_F32 ? PDT_F32 : d == ST_BF16 ? PDT_BF16 : d == ST_F16 ? PDT_F16 : -1; }

void st_to_f32(StDtype d, const void *src, int64_t stride, float *dst, int64_t n) {
    if (d == ST_F32) {
        const float *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i * stride];
    } else if (d == ST_BF16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = half_bf16_to_f32(s[i * stride]);
    } else if (d == ST_F16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = half_f16_to_f32(s[i * stride]);
    }
}

void st_from_f32(StDtype d, const float *src, void *dst, int64_t n) {
    if (d == ST_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
    } else if (d == ST_BF16) {
        uint16_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = half_f32_to_bf16(src[i]);
    } else if (d == ST_F16) {
        uint16_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = half_f32_to_f16(src[i]);
    }
}

/* ---- the header ---- */

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* "[2, 3]" */
static const char *shape_str(const StEntry *e, char *buf, size_t n) {
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < e->rank && u < n; d++) u += (size_t)snprintf(buf + u, n - u, "%s%" PRId64, d ? ", " : "", e->shape[d]);
    if (u < n) snprintf(buf + u, n - u, "]");
    return buf;
}

static bool nonneg_int(const JsonValue *v, uint64_t *out) {
    if (!v || v->type != JSON_NUMBER || !v->is_integer || v->integer < 0) return false;
    *out = (uint64_t)v->integer;
    return true;
}

/* One tensor's entry: dtype, shape and offsets, checked against the data size. */
static int parse_entry(const char *fn, const JsonValue *m, uint64_t data_size, StEntry *e, char *err, size_t n) {
    const char *nm = m->key;
    if (m->type != JSON_OBJECT) return errorf(err, n, "%s: tensor '%s': %s, not an object", fn, nm, json_type_phrase(m->type));
    const JsonValue *dt = json_get_type(m, "dtype", JSON_STRING);
    if (!dt) return errorf(err, n, "%s: tensor '%s': no \"dtype\" string", fn, nm);
    int d = st_dtype_parse(dt->string, dt->len);
    if (d < 0) return errorf(err, n, "%s: tensor '%s': unknown dtype '%s'", fn, nm, dt->string);
    e->dtype = (StDtype)d;
    const JsonValue *sh = json_get_type(m, "shape", JSON_ARRAY);
    if (!sh) return errorf(err, n, "%s: tensor '%s': no \"shape\" array", fn, nm);
    if (sh->count > ST_MAX_RANK) return errorf(err, n, "%s: tensor '%s': %zu axes (at most %d)", fn, nm, sh->count, ST_MAX_RANK);
    e->rank = (int)sh->count;
    e->numel = 1;
    for (size_t k = 0; k < sh->count; k++) {
        uint64_t x;
        if (!nonneg_int(&sh->items[k], &x)) return errorf(err, n, "%s: tensor '%s': shape[%zu] is not a non-negative integer", fn, nm, k);
        e->shape[k] = (int64_t)x;
        if (__builtin_mul_overflow(e->numel, x, &e->numel)) return errorf(err, n, "%s: tensor '%s': the shape's size overflows", fn, nm);
    }
    const JsonValue *of = json_get_type(m, "data_offsets", JSON_ARRAY);
    uint64_t b, en, need;
    if (!of || of->count != 2 || !nonneg_int(&of->items[0], &b) || !nonneg_int(&of->items[1], &en))
        return errorf(err, n, "%s: tensor '%s': \"data_offsets\" is not a pair of non-negative integers", fn, nm);
    if (en < b) return errorf(err, n, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin", fn, nm, b, en);
    char ss[200], ns[32] = "more than 2^64";
    bool over = __builtin_mul_overflow(e->numel, (uint64_t)st_dtype_size(e->dtype), &need);
    if (!over) snprintf(ns, sizeof ns, "%" PRIu64, need);
    if (over || en - b != need)
        return errorf(err, n, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64 " bytes, but shape %s of %s needs %s",
                      fn, nm, b, en, en - b, shape_str(e, ss, sizeof ss), dtype_names[d], ns);
    if (en > data_size)
        return errorf(err, n, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the end of the file (%" PRIu64
                      " bytes of data after the header): the file is truncated or the header lies", fn, nm, b, en, data_size);
    e->offset = b;
    e->bytes = en - b;
    return 0;
}

static int by_offset(const void *a, const void *b) {
    const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}
static int by_name(const void *a, const void *b) { return strcmp(((const StEntry *)a)->name, ((const StEntry *)b)->name); }

/* No two tensors share a byte (messages give offsets from base, as the
 * header does); no name is given twice. */
static int check_layout(const char *fn, StEntry *v, size_t cnt, uint64_t base, char *err, size_t n) {
    const StEntry **o = malloc(sizeof *o * (cnt ? cnt : 1));
    if (!o) return errorf(err, n, "%s: out of memory", fn);
    size_t k = 0;
    for (size_t i = 0; i < cnt; i++)
        if (v[i].bytes) o[k++] = &v[i];
    qsort(o, k, sizeof *o, by_offset);
    for (size_t i = 1; i < k; i++)
        if (o[i]->offset < o[i - 1]->offset + o[i - 1]->bytes) {
            errorf(err, n, "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' [%" PRIu64 ", %" PRIu64 "] overlap", fn,
                   o[i - 1]->name, o[i - 1]->offset - base, o[i - 1]->offset + o[i - 1]->bytes - base, o[i]->name, o[i]->offset - base,
                   o[i]->offset + o[i]->bytes - base);
            free(o);
            return -1;
        }
    free(o);
    qsort(v, cnt, sizeof *v, by_name);
    for (size_t i = 1; i < cnt; i++)
        if (!strcmp(v[i].name, v[i - 1].name)) return errorf(err, n, "%s: tensor '%s' is named twice in the header", fn, v[i].name);
    return 0;
}

static int parse_header(StFile *f, const char *fn, const char *text, size_t hlen, uint64_t data_size, char *err, size_t n) {
    JsonDoc doc;
    char jerr[256];
    if (json_parse(text, hlen, &doc, jerr, sizeof jerr)) {
        json_free(&doc);
        return errorf(err, n, "%s: header: %s", fn, jerr);
    }
    const JsonValue *root = doc.root;
    int rc = 0;
    if (root->type != JSON_OBJECT) rc = errorf(err, n, "%s: header: a JSON %s, not an object", fn, json_type_name(root->type));
    size_t cnt = 0;
    if (!rc) {
        f->entries = ARENA_NEWN(&f->arena, StEntry, root->count ? root->count : 1);
        if (!f->entries) rc = errorf(err, n, "%s: out of memory", fn);
    }
    for (size_t i = 0; !rc && i < root->count; i++) {
        const JsonValue *m = &root->items[i];
        if (!strcmp(m->key, "__metadata__")) {
            if (m->type != JSON_OBJECT) rc = errorf(err, n, "%s: header: __metadata__ is %s, not an object", fn, json_type_phrase(m->type));
            continue;
        }
        StEntry *e = &f->entries[cnt];
        memset(e, 0, sizeof *e);
        rc = parse_entry(fn, m, data_size, e, err, n);
        if (rc) break;
        e->name = arena_strdup(&f->arena, m->key);
        e->offset += f->data_start;
        if (!e->name) rc = errorf(err, n, "%s: out of memory", fn);
        cnt++;
    }
    json_free(&doc);
    if (rc) return rc;
    f->n = cnt;
    return check_layout(fn, f->entries, cnt, f->data_start, err, n);
}

/* The header length's checks, shared by st_open and st_parse: buf holds
 * the file's first len bytes. */
static int header_length(const char *fn, const uint8_t *buf, size_t len, uint64_t file_size, uint64_t *hl, char *err, size_t n) {
    if (file_size < 8 || len < 8)
        return errorf(err, n, "%s: %" PRIu64 " bytes: too short for a safetensors file (an 8-byte header length, the header, the data)", fn,
                      file_size);
    *hl = le64(buf);
    if (*hl > ST_MAX_HEADER)
        return errorf(err, n, "%s: header length %" PRIu64 " is absurd (the format allows at most %llu bytes): not a safetensors file?", fn,
                      *hl, ST_MAX_HEADER);
    if (*hl > file_size - 8)
        return errorf(err, n, "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes): truncated?", fn, *hl,
                      file_size);
    return 0;
}

static int init_file(StFile *f, const char *name) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    arena_init(&f->arena);
    f->path = arena_strdup(&f->arena, name);
    return f->path ? 0 : -1;
}

int st_parse(StFile *f, const char *name, const uint8_t *buf, size_t len, uint64_t file_size, char *err, size_t n) {
    if (init_file(f, name)) return errorf(err, n, "%s: out of memory", name);
    uint64_t hl;
    int rc = header_length(name, buf, len, file_size, &hl, err, n);
    if (!rc && len < 8 + hl) rc = errorf(err, n, "%s: only %zu of the header's %" PRIu64 " bytes given", name, len - 8, hl);
    if (!rc) {
        f->size = file_size;
        f->data_start = 8 + hl;
        rc = parse_header(f, name, (const char *)buf + 8, (size_t)hl, file_size - 8 - hl, err, n);
    }
    if (rc) st_close(f);
    return rc;
}

int st_open(StFile *f, const char *path, char *err, size_t n) {
    if (init_file(f, path)) return errorf(err, n, "%s: out of memory", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    int rc = 0;
    if (f->fd < 0) rc = errorf(err, n, "%s: %s", path, strerror(errno));
    else if (fstat(f->fd, &sb) || !S_ISREG(sb.st_mode)) rc = errorf(err, n, "%s: not a regular file", path);
    uint8_t len8[8];
    uint64_t hl = 0;
    if (!rc) {
        f->size = (uint64_t)sb.st_size;
        if (f->size >= 8) rc = st_read(f, 0, len8, 8, err, n);
        if (!rc) rc = header_length(path, len8, f->size >= 8 ? 8 : 0, f->size, &hl, err, n);
    }
    char *text = NULL;
    if (!rc && !(text = malloc(hl ? hl : 1))) rc = errorf(err, n, "%s: out of memory for a header of %" PRIu64 " bytes", path, hl);
    if (!rc) rc = st_read(f, 8, text, hl, err, n);
    if (!rc) {
        f->data_start = 8 + hl;
        rc = parse_header(f, path, text, (size_t)hl, f->size - 8 - hl, err, n);
    }
    free(text);
    if (rc) st_close(f);
    return rc;
}

void st_close(StFile *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    arena_free(&f->arena);
    f->entries = NULL;
    f->n = 0;
}

const StEntry *st_find(const StFile *f, const char *name) {
    StEntry key = {.name = name};
    return f->n ? bsearch(&key, f->entries, f->n, sizeof key, by_name) : NULL;
}

int st_read(const StFile *f, uint64_t off, void *dst, uint64_t bytes, char *err, size_t n) {
    uint8_t *d = dst;
    while (bytes) {
        size_t want = bytes > (1u << 30) ? (1u << 30) : (size_t)bytes;
        ssize_t got = pread(f->fd, d, want, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return errorf(err, n, "%s: read of %zu bytes at offset %" PRIu64 " failed: %s", f->path, want, off, strerror(errno));
        if (got == 0)
            return errorf(err, n, "%s: the file ends at byte %" PRIu64 ", before the data its header promises (did it shrink?)", f->path, off);
        d += got;
        off += (uint64_t)got;
        bytes -= (uint64_t)got;
    }
    return 0;
}

/* ---- a checkpoint: one file or a sharded directory ---- */

static char *slurp(const char *path, size_t max, size_t *len, char *err, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { errorf(err, n, "%s: %s", path, strerror(errno)); return NULL; }
    struct stat sb;
    char *buf = NULL;
    if (fstat(fd, &sb) || (uint64_t)sb.st_size > max) errorf(err, n, "%s: larger than %zu bytes", path, max);
    else if (!(buf = malloc((size_t)sb.st_size + 1))) errorf(err, n, "%s: out of memory", path);
    size_t got = 0;
    while (buf && got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            errorf(err, n, "%s: read failed: %s", path, r < 0 ? strerror(errno) : "the file shrank");
            free(buf);
            buf = NULL;
        } else {
            got += (size_t)r;
        }
    }
    close(fd);
    if (buf) buf[got] = 0;
    *len = got;
    return buf;
}

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Shard file names the index gives, in first-seen order, and a check of
 * each: a plain file name in the directory. */
static int index_files(StSet *s, const char *ipath, const JsonValue *wm, const char ***names, int *count, char *err, size_t n) {
    const char **v = ARENA_NEWN(&s->arena, const char *, wm->count ? wm->count : 1);
    if (!v) return errorf(err, n, "%s: out of memory", ipath);
    int k = 0;
    for (size_t i = 0; i < wm->count; i++) {
        const JsonValue *m = &wm->items[i];
        if (m->type != JSON_STRING || !m->len || strlen(m->string) != m->len || strchr(m->string, '/') || !strcmp(m->string, "..") ||
            !strcmp(m->string, "."))
            return errorf(err, n, "%s: weight_map gives '%s' a file that is not a plain file name in the directory", ipath, m->key);
        int j = 0;
        while (j < k && strcmp(v[j], m->string)) j++;
        if (j == k) v[k++] = m->string;
    }
    *names = v;
    *count = k;
    return 0;
}

/* Every tensor the index places must be in that file. */
static int index_agrees(const StSet *s, const char *ipath, const JsonValue *wm, const char *const *names, char *err, size_t n) {
    for (size_t i = 0; i < wm->count; i++) {
        const JsonValue *m = &wm->items[i];
        int j = 0;
        while (j < s->nfiles && strcmp(names[j], m->string)) j++;
        if (!st_find(&s->files[j], m->key))
            return errorf(err, n, "%s: the index puts '%s' in %s, which does not hold it", ipath, m->key, m->string);
    }
    return 0;
}

static int open_index(StSet *s, const char *dir, const char *ipath, char *err, size_t n) {
    size_t len;
    char *text = slurp(ipath, ST_MAX_HEADER, &len, err, n);
    if (!text) return -1;
    JsonDoc doc;
    char jerr[256];
    int rc = 0;
    if (json_parse(text, len, &doc, jerr, sizeof jerr)) rc = errorf(err, n, "%s: %s", ipath, jerr);
    free(text);
    const JsonValue *wm = rc ? NULL : json_get_type(doc.root, "weight_map", JSON_OBJECT);
    if (!rc && !wm) rc = errorf(err, n, "%s: no \"weight_map\" object", ipath);
    const char **names = NULL;
    int nf = 0;
    if (!rc) rc = index_files(s, ipath, wm, &names, &nf, err, n);
    if (!rc && !(s->files = ARENA_NEWN(&s->arena, StFile, nf ? nf : 1))) rc = errorf(err, n, "%s: out of memory", ipath);
    for (int j = 0; !rc && j < nf; j++) {
        char *fp = arena_printf(&s->arena, "%s/%s", dir, names[j]);
        if (!fp) { rc = errorf(err, n, "%s: out of memory", ipath); break; }
        if (access(fp, F_OK)) {
            rc = errorf(err, n, "%s names the shard %s, which does not exist", ipath, names[j]);
            break;
        }
        rc = st_open(&s->files[j], fp, err, n);
        if (!rc) s->nfiles++;
    }
    if (!rc) rc = index_agrees(s, ipath, wm, names, err, n);
    json_free(&doc);
    return rc;
}

static int by_name_file(const void *a, const void *b) {
    const StEntry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->file - y->file;
}

/* Every file's entries in one sorted array; a name in two files is an error. */
static int merge_entries(StSet *s, char *err, size_t n) {
    size_t total = 0;
    for (int j = 0; j < s->nfiles; j++) total += s->files[j].n;
    s->all = ARENA_NEWN(&s->arena, StEntry, total ? total : 1);
    if (!s->all) return errorf(err, n, "%s: out of memory", s->path);
    for (int j = 0; j < s->nfiles; j++)
        for (size_t i = 0; i < s->files[j].n; i++) {
            s->all[s->n] = s->files[j].entries[i];
            s->all[s->n++].file = j;
        }
    qsort(s->all, s->n, sizeof *s->all, by_name_file);
    for (size_t i = 1; i < s->n; i++)
        if (!strcmp(s->all[i].name, s->all[i - 1].name))
            return errorf(err, n, "tensor '%s' is in both %s and %s", s->all[i].name, s->files[s->all[i - 1].file].path,
                          s->files[s->all[i].file].path);
    return 0;
}

int st_set_open(StSet *s, const char *path, char *err, size_t n) {
    memset(s, 0, sizeof *s);
    arena_init(&s->arena);
    s->path = arena_strdup(&s->arena, path);
    struct stat sb;
    int rc = 0;
    if (!s->path) rc = errorf(err, n, "%s: out of memory", path);
    else if (stat(path, &sb)) rc = errorf(err, n, "%s: %s", path, strerror(errno));
    else if (S_ISDIR(sb.st_mode)) {
        char *ip = arena_printf(&s->arena, "%s/model.safetensors.index.json", path);
        char *one = arena_printf(&s->arena, "%s/model.safetensors", path);
        char *bin = arena_printf(&s->arena, "%s/pytorch_model.bin", path);
        if (!ip || !one || !bin) rc = errorf(err, n, "%s: out of memory", path);
        else if (is_file(ip)) rc = open_index(s, path, ip, err, n);
        else if (is_file(one)) {
            s->files = ARENA_NEW(&s->arena, StFile);
            rc = s->files ? st_open(&s->files[0], one, err, n) : errorf(err, n, "%s: out of memory", path);
            if (!rc) s->nfiles = 1;
        } else
            rc = errorf(err, n, "%s: neither model.safetensors nor model.safetensors.index.json is there%s", path,
                        is_file(bin) ? " (only pytorch_model.bin: zinf reads safetensors; save it with safe_serialization=True)" : "");
    } else {
        s->files = ARENA_NEW(&s->arena, StFile);
        rc = s->files ? st_open(&s->files[0], path, err, n) : errorf(err, n, "%s: out of memory", path);
        if (!rc) s->nfiles = 1;
    }
    if (!rc) rc = merge_entries(s, err, n);
    if (rc) st_set_close(s);
    return rc;
}

void st_set_close(StSet *s) {
    for (int j = 0; j < s->nfiles; j++) st_close(&s->files[j]);
    s->nfiles = 0;
    s->n = 0;
    s->all = NULL;
    arena_free(&s->arena);
}

const StEntry *st_set_find(const StSet *s, const char *name) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->all[mid].name, name);
        if (!c) return &s->all[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const StFile *st_set_file(const StSet *s, const StEntry *e) { return &s->files[e->file]; }

/* ---- writing ---- */

void st_buf_put(StBuf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    b->p[b->len] = 0;
}

void st_buf_printf(StBuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof tmp) { b->oom = true; return; }
    st_buf_put(b, tmp, (size_t)w);
}

void st_buf_json_string(StBuf *b, const char *s) {
    st_buf_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            st_buf_put(b, e, 2);
        } else if (*c < 0x20) {
            st_buf_printf(b, "\\u%04x", *c);
        } else {
            st_buf_put(b, c, 1);
        }
    }
    st_buf_put(b, "\"", 1);
}

void st_buf_free(StBuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

int st_header_build(StOutTensor *t, size_t n, const char *const *meta, size_t nmeta, uint8_t **hdr, size_t *hdr_len,
                    char *err, size_t errlen) {
    StBuf b = {0};
    st_buf_put(&b, "\0\0\0\0\0\0\0\0{\"__metadata__\":{", 25);
    for (size_t i = 0; i < nmeta; i++) {
        if (i) st_buf_put(&b, ",", 1);
        st_buf_json_string(&b, meta[2 * i]);
        st_buf_put(&b, ":", 1);
        st_buf_json_string(&b, meta[2 * i + 1]);
    }
    st_buf_put(&b, "}", 1);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < t[i].rank; d++) numel *= (uint64_t)t[i].shape[d];
        t[i].offset = off;
        t[i].bytes = numel * st_dtype_size(t[i].dtype);
        off += t[i].bytes;
        st_buf_put(&b, ",", 1);
        st_buf_json_string(&b, t[i].name);
        st_buf_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].rank; d++) st_buf_printf(&b, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
        st_buf_printf(&b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", t[i].offset, t[i].offset + t[i].bytes);
    }
    st_buf_put(&b, "}", 1);
    while (b.len % 8) st_buf_put(&b, " ", 1);
    if (b.oom) {
        st_buf_free(&b);
        return errorf(err, errlen, "out of memory building a safetensors header");
    }
    uint64_t hl = b.len - 8;
    for (int i = 0; i < 8; i++) b.p[i] = (char)(hl >> (8 * i));
    *hdr = (uint8_t *)b.p;
    *hdr_len = b.len;
    return 0;
}
