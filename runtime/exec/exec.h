/* exec: zinfrun's executor of a verified plan: the host backend here, and
 * the CUDA backend (RtOptions.backend) in runtime/exec/exec_cuda.c behind the
 * same interface.
 *
 * Allocates every arena of the plan once, at exactly the planned size (GPU
 * arena: host memory standing for the device; pinned staging and CPU homes;
 * the NVMe arena as swap files through runtime/nvme), initialises this
 * rank's shards of every parameter from (seed, name, element) and zeroes
 * the optimizer state, then runs the plan's instruction stream step after
 * step on one worker per queue (runtime/exec/qrun): kernels through the host
 * kernels, collectives through runtime/comm, NVMe through io_uring, the
 * optimizer through the vectorised CPU Adam.
 *
 * Memory outside the plan's arenas: the host kernels' saved statistics
 * (layernorm mean/rstd, logsumexp rows; kernel workspace) and the scratch of
 * tiled kernels and padded collectives. Both are reported beside the arenas
 * (rt_memory_report), so the total is still known before the first step. */
#ifndef ZINF_EXEC_H
#define ZINF_EXEC_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "comm.h"
#include "vocab.h"
#include "plan.h"
#include "progress.h"
#include "qrun.h"

typedef enum RtBackend { RT_BACKEND_HOST, RT_BACKEND_CUDA } RtBackend;

/* The backend a job runs on: want "host", "cuda" (fails with a message
 * when it cannot run: no driver, another rank without a GPU, a plan without
 * GPU code) or "auto" (cuda when every rank has a GPU and the plan has GPU
 * code). The driver is loaded at run time, so a binary starts on machines
 * with and without GPUs; every rank (a collective over c) chooses the same.
 * said (optional): the "backend: ..." line that says what was chosen and
 * why; empty for "host". */
int rt_choose_backend(Comm *c, const char *want, const Plan *p, const char *plan_name, RtBackend *out, char *said,
                      size_t saidn, char *err, size_t n);

typedef struct RtOptions {
    RtBackend backend;      /* CUDA: runtime/exec/exec_cuda.c on this rank's GPU */
    const char *nvme_dir;   /* overrides the plan target's NVMe paths (tests, demos) */
    int queue_depth;        /* io_uring depth (default 32) */
    bool trace;             /* keep per-step timings for --trace */
    /* For comparison and tests; zero leaves the default (the programs take
     * them from ZINF_* variables: docs/environment.md). */
    bool nvme_unbatched;    /* NVMe transfers one at a time, not pipelined */
    bool no_huge_pages;     /* the pinned arena stays on 4 KiB pages */
    int queue_slice_us;     /* the I/O queues' scheduler slice: 0 -> 100 us, < 0 -> the kernel's default */
    const char *cublaslt_off; /* non-NULL: every GEMM runs its NVRTC launch, not cuBLASLt; the reason shown */
    Progress *progress;     /* checkpoint saves and loads say how far they have come (base/progress.h); NULL: nobody */
} RtOptions;

typedef struct RtStepStats {
    double loss;            /* mean over the step's trained targets (all ranks and micro-batches) */
    double seconds;
    double grad_norm;
    uint64_t bytes[PLAN_NQUEUES]; /* bytes moved per queue this step */
    bool skipped;
    bool redone;            /* a speculative plan redid its early Adams (the step clipped or was skipped) */
} RtStepStats;

typedef struct Rt Rt;

/* Builds the executor for plan p on this rank; returns NULL with err set. */
Rt *rt_create(const Plan *p, Comm *c, const RtOptions *o, char *err, size_t errlen);
void rt_destroy(Rt *r);
/* Writes "arena gpu: N bytes (planned N)" lines and the extra memory. */
void rt_memory_report(const Rt *r, FILE *out);
/* Bytes allocated for arena kind k (equals the plan's arenas[k].size). */
uint64_t rt_arena_bytes(const Rt *r, int k);

/* One optimizer step over `accum` micro-batches of inputs: tokens[a] and
 * targets[a] each hold micro_batch*T int32 for micro-batch a. */
int rt_step(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, int accum, RtStepStats *st,
            char *err, size_t errlen);
/* The same when some targets are untrained (TOK_UNTRAINED, tokens.h):
 * `trained` is the number of trained targets of the whole global batch
 * (every micro-batch of the step on every rank: dord_trained), known
 * before the step like its learning rate. The loss and its gradients are
 * then the mean over those targets, whatever their spread over
 * micro-batches and ranks (transformers' num_items_in_batch), with no
 * collective more. trained < 0: every target trained (rt_step); 0 is
 * refused: the caller skips such a step (rt_step_skip). */
int rt_step_trained(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, int accum, int64_t trained,
                    RtStepStats *st, char *err, size_t errlen);
/* Packed rows (runtime/data/tokens.h, "Packed rows"): seg[a] ([B*T],
 * dord_segments) says where each input's sample begins in its row, for
 * micro-batch a of every following rt_step / rt_step_trained (the caller
 * refills the arrays before each step, as it does tokens); NULL: a row is
 * one sample. Each sample then attends only to itself and its positions
 * count from its start: rope's, and a learned position embedding's (a
 * tensor [T, ...] added to the tokens' [B, T, ...] is read at each
 * token's position in its sample). Refused (-1 with err) on the CUDA
 * backend, whose kernels do not read the samples yet. */
int rt_set_segments(Rt *r, const int32_t *const *seg, char *err, size_t errlen);
/* Counts a step that had nothing to train as done, changing no weight
 * and no optimizer state: the learning-rate schedule and the data
 * position move on as if it had run. Not collective (every rank skips the
 * same step, having counted the same trained targets). */
void rt_step_skip(Rt *r);
int64_t rt_steps_done(const Rt *r);
/* The f16 loss scale in effect for the next step (1 for other dtypes). */
double rt_loss_scale(const Rt *r);
/* Seconds queue q has spent executing, over every step so far. */
double rt_busy_seconds(const Rt *r, int q);
/* Seconds queue q's instructions spent waiting inside them (a collective
 * until every rank arrived), not counted in rt_busy_seconds. */
double rt_wait_seconds(const Rt *r, int q);

/* Floating-point work of one optimizer step on this rank: the plan's kernel
 * FLOPs, micro-batch ranges counted `accum` times. */
double rt_step_flops(const Rt *r, int accum);
/* CUDA backend: device memory in use by this process now (what the driver
 * reports used since zinfrun started: arenas, workspace, NCCL's buffers);
 * 0 on the host backend. */
uint64_t rt_gpu_memory_used(const Rt *r);

/* Checkpoint this rank's persistent state (collective: every rank calls). */
int rt_checkpoint_save(Rt *r, const char *dir, const char *state_json, char *err, size_t errlen);
/* Collective: loads step `step` on every rank. 0 when every rank did;
 * RT_LOAD_DEFECT when some rank's shard or the manifest does not read back
 * (missing, truncated, checksum): a reason to fall back to an older
 * checkpoint; RT_LOAD_FAILED when something else failed (memory, NVMe).
 * *mine says whether this rank failed (err then says why). */
enum { RT_LOAD_DEFECT = -1, RT_LOAD_FAILED = -2, RT_LOAD_REFUSED = -3 };
int rt_checkpoint_load(Rt *r, const char *dir, int64_t step, bool *mine, char *err, size_t errlen);
/* What a load found: the writer's world and plan, and whether the
 * checkpoint was resharded (another world or plan of the same model). */
typedef struct RtCkptOrigin {
    bool resharded;
    int world;                  /* ranks that wrote it */
    uint64_t plan_hash;
    int64_t micro_batch, grad_accum; /* the writer's (0: unknown, an old manifest) */
} RtCkptOrigin;
/* The same, for any checkpoint this plan can read: its own, or one of the
 * same model written by another world or plan (resharded: each rank reads
 * its slices by global element ranges from the writers' files).
 * RT_LOAD_REFUSED when the checkpoint is not this model's (err names the
 * first difference); *from (optional) says who wrote it. */
int rt_checkpoint_load_from(Rt *r, const char *dir, int64_t step, bool *mine, RtCkptOrigin *from, char *err, size_t errlen);
/* Whether this plan can resume checkpoint `step` (its own, or the same
 * model's by resharding): 0 yes; 1 no, `why` says why (another model, no
 * layout recorded); -1 the manifest does not read (why). Not collective. */
int rt_checkpoint_check(Rt *r, const char *dir, int64_t step, char *why, size_t errlen);
/* The bytes of this rank's checkpoint shard (its parameters and optimizer
 * state, before the file's headers), and of the consolidated parameters
 * --export writes: what the disk must hold, checked before step 1. */
uint64_t rt_checkpoint_bytes(const Rt *r);
uint64_t rt_export_bytes(const Rt *r);
/* Consolidated parameters to a safetensors file (collective; rank 0 writes). */
int rt_export_safetensors(Rt *r, const char *path, char *err, size_t errlen);
/* A hash identifying the plan's persistent layout (checkpoint compatibility). */
uint64_t rt_plan_hash(const Rt *r);

/* The forward-only schedule (runtime/exec/exec_eval.c): the micro-batch range
 * up to and including the loss's forward kernel, less what touches
 * gradients or optimizer state; it reads the weights wherever the plan
 * keeps them and writes only transient buffers, so training continues
 * bit for bit as without it. Built at first use; an error when the plan's
 * forward cannot run alone. */
typedef struct RtForwardInfo {
    uint32_t instructions, prefix, left_out; /* run, in the prefix, left out of it */
    int64_t vocab;          /* the loss's logits: rows of vocab values */
    int64_t logits_rows;    /* B*T */
} RtForwardInfo;
int rt_forward_info(Rt *r, RtForwardInfo *fi, char *err, size_t errlen);
/* One forward of this rank's micro-batch (micro_batch*T ids each); *loss is
 * its mean loss on this rank. Every rank calls it together. */
int rt_forward(Rt *r, const int32_t *tokens, const int32_t *targets, double *loss, char *err, size_t errlen);
/* After rt_forward: the logits of row `row` (batch row b, position t: b*T+t)
 * as f32, vocab values (copied from the device under CUDA). */
int rt_logits(Rt *r, int64_t row, float *out, char *err, size_t errlen);
typedef struct RtEvalStats {
    double loss;            /* mean over the trained targets of every rank and batch (NaN: none) */
    double seconds;
    int batches;            /* per rank */
} RtEvalStats;
/* Evaluation (collective): the forward of `nb` micro-batches on this rank,
 * the loss averaged over every rank's; no gradient, no optimizer step.
 * Recorded for --trace (an instant event at the step it ran after). */
int rt_eval(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, int nb, RtEvalStats *st, char *err,
            size_t errlen);
/* The same on packed rows: seg[b] ([B*T], dord_segments) for batch b, as
 * rt_set_segments says; NULL: rt_eval. Refused on the CUDA backend. */
int rt_eval_packed(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, const int32_t *const *seg, int nb,
                   RtEvalStats *st, char *err, size_t errlen);

/* The measured timeline of the last step, Chrome trace JSON. */
int rt_write_trace(const Rt *r, FILE *out);

#endif
