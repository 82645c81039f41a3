/* ckpt: training checkpoints and the safetensors export.
 *
 * A checkpoint of step S lives in DIR/step-SSSSSSSS/: one shard file per
 * rank (rank-RRRRR.zck) holding that rank's slices of every persistent tensor
 * (parameters, fp32 masters, Adam moments) and the training state, plus
 * manifest.json, written by rank 0 only after every rank's shard is durable.
 * Every file is written to a temporary name, fsynced, renamed, and the
 * directory fsynced: a crash or a full disk leaves either the whole new file
 * or none, and a checkpoint without its manifest is ignored. So the previous
 * complete checkpoint always still loads.
 *
 * Shard file: "ZINFCKPT" magic, u32 version, u32 rank, u32 world, i64 step,
 * u64 plan hash, u32 entry count, then per entry: u16 name length, name,
 * u8 dtype, u64 byte count, u64 FNV-1a-64 of the bytes, (version 2) u32
 * chunk shift s and the FNV-1a-64 of each chunk of 2^s bytes (the last one
 * shorter), the bytes; then a u64 FNV-1a-64 of everything before it.
 * Little-endian. The chunk checksums let a reader that needs a few ranges
 * of an entry (resharding onto more ranks) verify only the chunks it
 * reads; version 1 (no chunks) still reads, whole entries at a time.
 *
 * Manifest (JSON, version 2): format, version, model, step, world,
 * plan_hash, state, and "layout": the writer's micro-batch, grad_accum and
 * training dtype, and per checkpointed tensor, in the order of the shard
 * files' entries, its name, dtype, class, shape and shard layout (ntiles,
 * tile_elems, tile_shard, partitioned: docs/plan-format.md, Shards). With it
 * any plan of the same model on any world reads the checkpoint by global
 * element ranges (ckpt_reshard.c); a version-1 manifest has no layout and
 * only its own plan and world resume it.
 */
#ifndef ZINF_CKPT_H
#define ZINF_CKPT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "progress.h"

/* Chunks of 1 MiB by default; tests make them small. */
enum { CKPT_CHUNK_SHIFT = 20, CKPT_CHUNK_SHIFT_MIN = 6, CKPT_CHUNK_SHIFT_MAX = 40 };
/* The chunk size of the shards this process writes next (2^shift bytes;
 * 0: version-1 files, without chunks, as older zinf wrote them; outside
 * [CKPT_CHUNK_SHIFT_MIN, CKPT_CHUNK_SHIFT_MAX]: the default). For tests. */
void ckpt_set_chunk_shift(int shift);

typedef struct CkptEntry {
    const char *name;
    uint8_t dtype;  /* DType of lang/ast.h */
    uint64_t bytes;
    void *data;     /* write: source; read: destination of `bytes` bytes */
} CkptEntry;

/* How a tensor's elements are cut into this rank's slice (a PlanShard's
 * numbers): ntiles tiles of tile_elems; when partitioned rank r holds
 * elements [r*tile_shard, (r+1)*tile_shard) of each tile, clipped to it,
 * at element t*tile_shard of its slice (the rest is padding). */
typedef struct CkptShardLayout {
    int64_t numel;
    int32_t ntiles;
    int64_t tile_elems, tile_shard;
    bool partitioned;
} CkptShardLayout;

typedef struct CkptTensorLayout {
    const char *name;   /* owned by the CkptLayout when parsed */
    uint8_t dtype, cls; /* DType, TensorClass */
    int rank;
    int64_t dims[6];
    CkptShardLayout s;
} CkptTensorLayout;

/* What a reader needs to read a checkpoint by global element ranges. */
typedef struct CkptLayout {
    int64_t micro_batch, grad_accum;
    uint8_t train_dtype;
    int n;
    CkptTensorLayout *t;
    bool owned;         /* names and t are malloc'd (parsed) */
} CkptLayout;

/* The largest manifest read (a layout line per tensor: ~250 bytes each). */
enum { CKPT_MANIFEST_MAX = 256 << 20 };

/* "DIR/step-00000010" into buf. */
const char *ckpt_step_dir(const char *root, int64_t step, char *buf, size_t n);

/* Writes this rank's shard of step `step` (creating the directories);
 * progress (NULL: nobody listens) hears "writing the checkpoint" in bytes. */
int ckpt_write_shard(const char *root, int64_t step, int rank, int world, uint64_t plan_hash,
                     const CkptEntry *e, int n, Progress *progress, char *err, size_t errlen);
/* Rank 0, after every shard is written: the manifest that makes the
 * checkpoint complete. state_json is a JSON object of training state
 * (loss scale, data position...), copied verbatim under "state". */
int ckpt_write_manifest(const char *root, int64_t step, int world, uint64_t plan_hash,
                        const char *model, const char *state_json, const CkptLayout *layout, char *err, size_t errlen);
/* A checkpoint belongs to the run identity that wrote it: the plan hash
 * (which covers the world size) and the world size. What a step-* directory
 * under a checkpoint root holds: */
typedef enum CkptState {
    CKPT_COMPLETE,     /* its manifest parses: every shard was durable when it was written */
    CKPT_INCOMPLETE,   /* no manifest: a write was cut short (or is under way) */
    CKPT_BAD_MANIFEST, /* a manifest that is not ours or is damaged: `why` */
} CkptState;

typedef struct CkptInfo {
    int64_t step;          /* from the directory's name */
    CkptState state;
    bool ident_known;      /* complete: always; incomplete: when a shard header was readable */
    int world;
    uint64_t plan_hash;
    bool layout;           /* complete with a layout: other plans of the model can read it */
    char why[160];
} CkptInfo;

/* Every step-* directory under root, newest first, into a malloc'd array
 * the caller frees (none when root does not exist). 0, or -1 on error. */
int ckpt_scan(const char *root, CkptInfo **out, int *n, char *err, size_t errlen);
/* The newest complete checkpoint of this run identity: returns 1 and sets
 * *step, 0 if there is none, -1 on error; `why` (optional) names the first
 * newer one skipped and why. */
int ckpt_find_latest(const char *root, int world, uint64_t plan_hash, int64_t *step,
                     char *why, size_t whylen, char *err, size_t errlen);
/* Whether the run identity (world, plan_hash) wrote it. */
bool ckpt_is_own(const CkptInfo *ci, int world, uint64_t plan_hash);
/* Debris left by a killed writer: temporary files (NAME.tmp.PID) whose
 * writer is gone (its PID is not alive here and it no longer holds the
 * file's lock), whoever's they are, and this run identity's incomplete
 * step directories that no live process is writing (another run's only
 * once nothing is left in them). Returns how many directories it cleaned
 * (their names in report), or -1 on error. Other runs' shards are left
 * alone. Where the file system has no flock, the PID test is this host's
 * and only this run's temporaries are removed. */
int ckpt_clean_debris(const char *root, int world, uint64_t plan_hash, char *report, size_t replen, char *err, size_t errlen);
/* Reads this rank's shard into the entries' buffers, checking that names,
 * dtypes and sizes match and every checksum holds; progress (NULL: nobody
 * listens) hears "reading the checkpoint" in bytes. */
int ckpt_read_shard(const char *root, int64_t step, int rank, int world, uint64_t plan_hash,
                    CkptEntry *e, int n, Progress *progress, char *err, size_t errlen);
/* The manifest's "state" object (malloc'd; caller frees), or NULL. */
char *ckpt_read_state(const char *root, int64_t step, char *err, size_t errlen);
/* Renames step `step`'s directory to step-N.bad (or .bad.K when taken), so
 * that neither --resume nor pruning sees it again and nothing is lost; the
 * new path into `to`. */
int ckpt_set_aside(const char *root, int64_t step, char *to, size_t ton, char *err, size_t errlen);
/* Removes this run identity's complete checkpoints of step <= upto beyond
 * the newest `keep` of them. Never another run's, never a later one. */
int ckpt_prune(const char *root, int world, uint64_t plan_hash, int64_t upto, int keep, char *err, size_t errlen);

/* ---- reading another world's or plan's checkpoint (ckpt_reshard.c) ---- */

/* A manifest, parsed strictly (runtime/plan/json). */
typedef struct CkptManifest {
    char model[256];
    int world;
    uint64_t plan_hash;
    bool has_layout;
    CkptLayout layout;
} CkptManifest;
/* 0, or -1 with err (a manifest that does not parse, or a layout that does
 * not hold together). Free with ckpt_manifest_free. */
int ckpt_read_manifest(const char *root, int64_t step, CkptManifest *m, char *err, size_t errlen);
void ckpt_manifest_free(CkptManifest *m);
/* Checks a shard layout: tiles that add up to numel, slices that cover a
 * tile on `world` ranks. 0, or -1 with err. */
int ckpt_layout_check(const CkptShardLayout *l, int world, char *err, size_t errlen);

/* The range arithmetic: the elements of rank `rank`'s slice under layout
 * `to` that hold values (never its padding), and where each run of them is
 * in the entries of a checkpoint written under `from` by `from_world`
 * ranks: fn(ctx, writer, first element in the writer's entry, first element
 * in the reader's slice, count) per run, in the reader's order. A writer's
 * padding is never named. An unpartitioned tensor is read from writer
 * rank % from_world. Returns 0, fn's first non-zero, or -1 when the layouts
 * do not describe the same tensor. */
typedef int (*CkptPieceFn)(void *ctx, int writer, int64_t src, int64_t dst, int64_t n);
int ckpt_reshard_pieces(const CkptShardLayout *from, int from_world, const CkptShardLayout *to, int rank,
                        CkptPieceFn fn, void *ctx);

/* Reads tensors of a checkpoint (by the manifest's layout) into another
 * layout's slices. Each writer file's entries are found from their headers
 * (pread), checked against the manifest. Of a version-2 file only the
 * chunks that hold a needed range are read, each verified by its checksum
 * before its bytes are used; of a version-1 file each needed entry is read
 * whole once and verified. The writers' whole-file checksums are not read
 * (that would read every byte of every file). */
typedef struct CkptReader {
    char dir[4096];
    int64_t step;
    const CkptManifest *m;
    int *fd;              /* per writer, -1 until needed */
    uint64_t **off;       /* per writer: each entry's data offset, NULL until needed */
    uint64_t **sum;       /* per writer: each entry's checksum */
    uint64_t **tab;       /* per writer: each entry's chunk table offset (version 2), 0: none */
    uint8_t **shift;      /* per writer: each entry's chunk shift */
    uint8_t *stage;
    size_t stage_bytes;
    uint64_t bytes_read;  /* data bytes read so far (chunks, or whole entries) */
} CkptReader;
int ckpt_reader_open(CkptReader *rd, const char *root, int64_t step, const CkptManifest *m, size_t stage_bytes,
                     char *err, size_t errlen);
/* Tensor k of the manifest into dst, this rank's slice under `to`
 * (to->ntiles * to->tile_shard elements; padding set to zero). 0; -1 when
 * the checkpoint does not read back (err says why); -2 out of memory. */
int ckpt_reader_read(CkptReader *rd, int k, const CkptShardLayout *to, int rank, void *dst, char *err, size_t errlen);
void ckpt_reader_close(CkptReader *rd);

typedef struct StTensor {
    const char *name;
    uint8_t dtype;
    int rank;
    int64_t dims[6];
    const void *data;
    uint64_t bytes;
} StTensor;

/* A safetensors file (8-byte header length, JSON header, data), atomically. */
int safetensors_write(const char *path, const StTensor *t, int n, const char *model,
                      char *err, size_t errlen);

/* Writes a whole file atomically: temp name, fsync, rename, fsync dir. */
int ckpt_write_file_atomic(const char *path, const void *const *parts, const size_t *lens, int nparts,
                           char *err, size_t errlen);

#endif
