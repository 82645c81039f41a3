/* safetensors: the file format Hugging Face checkpoints use, read with the
 * file treated as untrusted (zinfrun --init), plus the header a writer
 * needs (zinfrun --export-hf; runtime/hfio).
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON (an
 * object: tensor name -> {"dtype", "shape", "data_offsets": [begin, end]},
 * and an optional "__metadata__" object of strings), then the data; the
 * offsets count from the first byte after the header.
 *
 * st_open reads only the header and checks everything the data reads will
 * rely on: a sane header length (at most ST_MAX_HEADER, inside the file),
 * strict JSON (runtime/json), known dtypes, shapes whose size matches the
 * byte range, ranges inside the file that do not overlap, names given once.
 * Every message names the file and, where there is one, the tensor. Data is
 * then read with pread at the checked offsets (st_read), so a rank reads
 * only the ranges it needs. A checkpoint directory (one model.safetensors,
 * or shards named by model.safetensors.index.json) is an StSet.
 *
 * Nothing here prints or exits; errors are returned (-1 and a message). */
#ifndef ZINF_SAFETENSORS_H
#define ZINF_SAFETENSORS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "arena.h"

/* safetensors' own limit on the header (the Rust reader refuses more). */
#define ST_MAX_HEADER 100000000ull
enum { ST_MAX_RANK = 8 };

typedef enum StDtype {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_NDTYPES
} StDtype;

/* "F32", "BF16", ... as the format spells them. */
const char *st_dtype_name(StDtype d);
/* Bytes per element. */
size_t st_dtype_size(StDtype d);
/* The dtype named s (len bytes), or -1. */
int st_dtype_parse(const char *s, size_t len);
/* The float dtypes zinf converts: F32, F16, BF16. */
bool st_dtype_is_float(StDtype d);
/* Between the plan's DType codes (lang/ast.h: DT_F32, DT_BF16, DT_F16)
 * and StDtype; -1 for anything else. */
int st_dtype_from_plan(int plan_dtype);
int st_dtype_to_plan(StDtype d);

/* n elements of float dtype d (F32, F16, BF16) to and from f32.
 * dst[i] = src[i * stride] for st_to_f32, so a strided read can be
 * transposed while it is converted. */
void st_to_f32(StDtype d, const void *src, int64_t stride, float *dst, int64_t n);
void st_from_f32(StDtype d, const float *src, void *dst, int64_t n);

typedef struct StEntry {
    const char *name;
    StDtype dtype;
    int rank;
    int64_t shape[ST_MAX_RANK];
    uint64_t numel;
    uint64_t offset;            /* absolute, in the file */
    uint64_t bytes;
    int file;                   /* in an StSet: index of its file */
} StEntry;

typedef struct StFile {
    Arena arena;                /* the path, names */
    const char *path;
    int fd;                     /* -1 when closed */
    uint64_t size;              /* of the file, when opened */
    uint64_t data_start;        /* 8 + header length */
    StEntry *entries;           /* sorted by name */
    size_t n;
} StFile;

/* Opens and checks path's header (the file stays open for st_read). On
 * failure f holds nothing (st_close is still safe). */
int st_open(StFile *f, const char *path, char *err, size_t errlen);
/* The same checks on a header already in memory: hdr[0..len) is the whole
 * file's prefix of at least 8 bytes, file_size the file's size. For tests
 * and fuzzing; f->fd stays -1. */
int st_parse(StFile *f, const char *name, const uint8_t *buf, size_t len, uint64_t file_size, char *err, size_t errlen);
void st_close(StFile *f);
/* The entry named name, or NULL (binary search). */
const StEntry *st_find(const StFile *f, const char *name);
/* bytes bytes at absolute offset off (pread, retried on short reads); an
 * end of file before them is an error naming the file (it shrank). */
int st_read(const StFile *f, uint64_t off, void *dst, uint64_t bytes, char *err, size_t errlen);

/* A checkpoint: a model directory (model.safetensors, or the shards that
 * model.safetensors.index.json names) or a single .safetensors file. */
typedef struct StSet {
    Arena arena;
    const char *path;           /* as given */
    StFile *files;
    int nfiles;
    StEntry *all;               /* every file's entries, sorted by name (file set) */
    size_t n;
} StSet;

int st_set_open(StSet *s, const char *path, char *err, size_t errlen);
void st_set_close(StSet *s);
const StEntry *st_set_find(const StSet *s, const char *name);
/* The file an entry (from st_set_find or s->all) lives in. */
const StFile *st_set_file(const StSet *s, const StEntry *e);

/* ---- writing ---- */

typedef struct StOutTensor {
    const char *name;
    StDtype dtype;
    int rank;
    int64_t shape[ST_MAX_RANK];
    uint64_t offset;            /* filled by st_header_build: relative to the data */
    uint64_t bytes;             /* filled: numel * dtype size */
} StOutTensor;

/* The header of a file holding t[0..n) in that order, data offsets
 * assigned back to back: *hdr (malloc'd, caller frees) holds the 8-byte
 * length and the JSON, padded with spaces to a multiple of 8; the data
 * starts at *hdr_len. metadata: "key", "value" pairs (nmeta pairs). */
int st_header_build(StOutTensor *t, size_t n, const char *const *metadata, size_t nmeta, uint8_t **hdr,
                    size_t *hdr_len, char *err, size_t errlen);
/* A growable text buffer for headers and index files; oom is sticky. */
typedef struct StBuf {
    char *p;
    size_t len, cap;
    bool oom;
} StBuf;
void st_buf_put(StBuf *b, const void *d, size_t n);
void st_buf_printf(StBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string: quotes, escapes of '"', '\\' and control characters. */
void st_buf_json_string(StBuf *b, const char *s);
void st_buf_free(StBuf *b);

#endif
