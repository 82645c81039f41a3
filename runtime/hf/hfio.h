/* hfio: Hugging Face weights into and out of a running executor
 * (zinfrun --init, --export-hf; docs/huggingface.md "Weights in and out").
 *
 * The plan's hf mapping (Plan.hf, runtime/plan/plan.h) says which HF tensors
 * make each parameter: a parameter is the concatenation along its last axis
 * of its pieces; a piece is a column range of one HF tensor read in zinf's
 * [in, out] layout (transposed first when the HF tensor is an nn.Linear
 * [out, in] weight).
 *
 * Import: every rank opens the checkpoint's headers (runtime/safetensors),
 * checks the whole mapping against them before writing anything (missing
 * tensors, dtypes, shapes), then reads only the byte ranges of its own
 * shards, block by block through a fixed staging buffer (a transposed piece
 * in square-ish blocks, so reads and writes stay long), converts them and
 * writes them to the shards' homes (GPU, CPU or NVMe). fp32 masters get the
 * file's values; Adam moments stay zero, the step counter 0.
 *
 * Export: each HF tensor (a "group": the pieces that name it) is assembled
 * block by block: every rank reads what it owns of the block, an all-reduce
 * (f32, -0.0 where not owned, so the sum is exact) brings the block to rank
 * 0, which writes it at its place in the shard file; memory is the staging
 * buffer whatever the model's size. Rank 0 writes everything into DIR.tmp.PID
 * (config.json, model.safetensors or model-0000k-of-0000n.safetensors and
 * model.safetensors.index.json), fsyncs it and renames it to DIR. A plan
 * with LoRA adapters (PEFT's names, runtime/hf/hfio_lora.c) exports them as
 * PEFT does (adapter_config.json, adapter_model.safetensors), or with
 * merge_lora the base model with them merged.
 *
 * Collective: every rank calls hfio_import, hfio_export and hfio_gather.
 * Nothing here prints or exits; errors come back as -1 and a message. */
#ifndef ZINF_HFIO_H
#define ZINF_HFIO_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "exec.h"
#include "progress.h"

#define HFIO_STAGING_DEFAULT ((size_t)64 << 20)
#define HFIO_SHARD_DEFAULT 5000000000ull /* save_pretrained's max_shard_size "5GB" */

typedef struct HfioOptions {
    size_t staging_bytes;     /* per rank; 0: HFIO_STAGING_DEFAULT */
    uint64_t max_shard_bytes; /* export: 0: HFIO_SHARD_DEFAULT */
    bool merge_lora;          /* export of a plan with LoRA adapters: the base model with them merged
                                 (W + A B alpha/r in the base names), not the PEFT adapter */
    const char *companions_from; /* export: a model directory (--init's) whose tokenizer files and
                                    generation_config.json are copied along; NULL: none */
    Progress *progress;          /* how far it has come (base/progress.h): import in bytes this rank
                                    reads, export in tensors written; NULL: nobody listens */
} HfioOptions;

enum { HFIO_LIST = 1024 };

typedef struct HfioReport {
    bool own_names;        /* import: the file names the plan's own parameters (zinfrun --export), not HF tensors */
    int files;             /* import: checkpoint files opened; export: safetensors files written */
    int tensors;           /* HF tensors imported or written */
    int params;            /* import: parameters set from the checkpoint */
    int params_kept;       /* import: parameters with no hf piece: their seeded initialisation stays */
    uint64_t bytes;        /* import: bytes this rank read; export: bytes rank 0 wrote */
    int nunused;           /* import: checkpoint tensors that map to nothing (a warning) */
    char unused[HFIO_LIST];
    int nignored;          /* import: ones known to have no zinf counterpart (not a warning) */
    char ignored[HFIO_LIST];
    int companions;        /* export: files copied from companions_from */
    char companion_list[HFIO_LIST];
} HfioReport;

/* Whether the plan's mapping can be imported and exported: a mapping at
 * all, parameters with shards and float dtypes, and for each HF tensor
 * pieces that agree on its rows and cover its columns once. */
int hfio_check_plan(const Plan *p, char *err, size_t errlen);
/* An export target must not exist yet or be an empty directory. */
int hfio_check_export_dir(const char *dir, char *err, size_t errlen);

/* Sets every mapped parameter (and its fp32 master) from the checkpoint at
 * path: a model directory or one .safetensors file. A file of zinfrun
 * --export (the plan's own parameter names, written by any world size or
 * plan of the same model) is read too, each parameter from the tensor of
 * its name: chosen when the file holds more of the plan's own names than of
 * the mapping's, or the plan has no mapping; then every parameter must be
 * there. */
int hfio_import(Rt *r, const char *path, const HfioOptions *o, HfioReport *rep, char *err, size_t errlen);
/* Writes DIR (config.json and the safetensors weights in HF names and
 * layouts), atomically. */
int hfio_export(Rt *r, const char *dir, const HfioOptions *o, HfioReport *rep, char *err, size_t errlen);
/* The whole of persistent tensor `tensor` (parameter, master, moment) in
 * its dtype into dst on rank 0 (dst may be NULL elsewhere), in blocks of
 * the staging size: for tests and inspection. */
int hfio_gather(Rt *r, int tensor, void *dst, const HfioOptions *o, char *err, size_t errlen);

#endif
