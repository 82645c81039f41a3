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
 * dtypes and sizes match and every checksum holds. */
int ckpt_read_shard(const char *root, int64_t step, int rank, int world, uint64_t plan_hash,
                    CkptEntry *e, int n, char *err, size_t errlen);
/* The manifest's "state" object (malloc'd; caller frees), or NULL. */
char *ckpt_read_state(const char *root, int64_t step, char *err, size_t errlen);
/* Renames step `step`'s directory to step-N.bad (or .bad.K when taken), so
 * that neither --resume nor pruning sees it again and nothing is lost; the
 * new path into `to`. */
int ckpt_set_aside(const char *root, int64_t step, char *to, size_t ton, char *err, size_t errlen);
/* Removes this run identity's complete checkpoints of step <= upto beyond
 * the newest `keep` of them. Never another run's, never a later one. */
int ckpt_prune(const char *root, int world, uint64_t plan_hash, int64_t upto, int keep, char *err, size_t errlen);

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
