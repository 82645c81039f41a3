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
 * u8 dtype, u64 byte count, u64 FNV-1a-64 of the bytes, the bytes; then a
 * u64 FNV-1a-64 of everything before it. Little-endian.
 */
#ifndef ZINF_CKPT_H
#define ZINF_CKPT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct CkptEntry {
    const char *name;
    uint8_t dtype;  /* DType of lang/ast.h */
    uint64_t bytes;
    void *data;     /* write: source; read: destination of `bytes` bytes */
} CkptEntry;

/* "DIR/step-00000010" into buf. */
const char *ckpt_step_dir(const char *root, int64_t step, char *buf, size_t n);

/* Writes this rank's shard of step `step` (creating the directories). */
int ckpt_write_shard(const char *root, int64_t step, int rank, int world, uint64_t plan_hash,
                     const CkptEntry *e, int n, char *err, size_t errlen);
/* Rank 0, after every shard is written: the manifest that makes the
 * checkpoint complete. state_json is a JSON object of training state
 * (loss scale, data position...), copied verbatim under "state". */
int ckpt_write_manifest(const char *root, int64_t step, int world, uint64_t plan_hash,
                        const char *model, const char *state_json, char *err, size_t errlen);
/* The newest complete checkpoint under root for this world size and plan:
 * returns 1 and sets *step, 0 if there is none, -1 on error. Incomplete or
 * mismatched ones are skipped; `why` (optional) says what was skipped. */
int ckpt_find_latest(const char *root, int world, uint64_t plan_hash, int64_t *step,
                     char *why, size_t whylen, char *err, size_t errlen);
/* Reads this rank's shard into the entries' buffers, checking that names,
 * dtypes and sizes match and every checksum holds. */
int ckpt_read_shard(const char *root, int64_t step, int rank, int world, uint64_t plan_hash,
                    CkptEntry *e, int n, char *err, size_t errlen);
/* The manifest's "state" object (malloc'd; caller frees), or NULL. */
char *ckpt_read_state(const char *root, int64_t step, char *err, size_t errlen);
/* Removes complete checkpoints older than the newest `keep`. */
int ckpt_prune(const char *root, int keep, char *err, size_t errlen);

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
