/* memmodel: bytes of every class of training state, for the whole model, per
 * node and per data-parallel rank; and the ZeRO-Infinity paper's Table 1.
 *
 * Two ways to the same figures (docs/memory-model.md):
 *  - memmodel_compute counts the tensors of a Graph. A FORWARD graph (what
 *    the checker builds) is enough: gradients and optimizer state are derived
 *    from the parameters (mixed precision: 2-byte parameter and gradient plus
 *    fp32 master, momentum and variance, and the paper's fp32 gradient copy;
 *    f32: parameter, gradient, momentum, variance), and activation
 *    checkpoints from the segments and TrainConfig.checkpoint_every with the
 *    rule autodiff applies. A TRAINING graph (after ad_build) is counted as it
 *    is: its gradient and optimizer tensors and its TC_CKPT marks.
 *  - memmodel_table1_row evaluates the paper's closed forms from
 *    (layers, hidden, heads, batch, seq, ci).
 * Per rank, model states are ZeRO-3 shards: each parameter of at least
 * whole_below elements is split over the ranks, ceil(numel / ranks) elements
 * rounded up to a multiple of MEM_SHARD_ALIGN elements (4096 bytes of a
 * 2-byte dtype; the planner's rule, untiled); smaller ones stay whole on every
 * rank. Activations are per rank: one micro-batch each.
 * Nothing here prints except memmodel_print / memmodel_table1_print, which
 * write to the FILE* they are given. */
#ifndef ZINF_MEMMODEL_H
#define ZINF_MEMMODEL_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "graph.h"

enum { MEM_SHARD_ALIGN = 2048, MEM_WHOLE_BELOW_DEFAULT = 100000 };

typedef struct MemOptions {
    int ranks;            /* data-parallel ranks; 0: 1 */
    int nodes;            /* nodes the ranks are spread over, must divide ranks; 0: 1 */
    int64_t micro_batch;  /* 0: the graph's (activations rescaled from the graph's batch) */
    int64_t seq;          /* 0: the graph's (activations' [B, T, ...] rescaled; parameters untouched) */
    int64_t ci;           /* checkpoint every ci repeat instances; 0: g->train.checkpoint_every; -1: none */
    int64_t whole_below;  /* parameters below this many elements stay whole; 0: MEM_WHOLE_BELOW_DEFAULT */
} MemOptions;

void memmodel_options_default(MemOptions *o);

/* Rows of the table beyond the graph's own classes. */
typedef struct MemModel {
    /* what was counted */
    const char *model_name;
    DType dtype;              /* parameter dtype (training dtype) */
    bool mixed;               /* parameters not f32: fp32 master copies exist */
    bool training_graph;      /* counted a graph after autodiff */
    int ranks, nodes;
    int64_t micro_batch, seq, ci, whole_below;
    int64_t params;           /* parameter elements */
    int nparam_tensors, nsharded;  /* parameters, of which split over the ranks */
    int ngroups;              /* checkpoint groups (0 without checkpointing) */
    /* frozen parameters (train { freeze }): how many tensors and elements,
     * and the bytes of gradient and optimizer state they do not have
     * (gradient in the parameter's dtype, fp32 master when mixed, momentum,
     * variance), whole model and per rank; counted in params above */
    int nfrozen;
    int64_t frozen_params, frozen_saved, frozen_saved_rank;
    /* Adam's momentum [0] and variance [1] dtype (train { optimizer =
     * adam(state) }) of the largest trained parameter, of moment_numel
     * elements; DT_NONE before any (under state = "8bit" the smaller ones
     * may be f32) */
    DType moment_dtype[2];
    int64_t moment_numel;

    /* bytes per tensor class. model[] is the whole job: model states
     * unsharded, activations, inputs and workspace one micro-batch on every
     * rank (ranks * rank[]); rank[] is one rank's. Per node = rank[] * ranks
     * / nodes.
     * TC_ACT: forward activations other than checkpoints (the activation
     * gradients of a training graph are not counted); TC_CKPT: checkpoints. */
    int64_t model[TC_COUNT];
    int64_t rank[TC_COUNT];
    /* the paper's fp32 gradient copy (mixed precision; zinf's CPU Adam reads
     * the 2-byte gradient and allocates none) */
    int64_t grad32_model, grad32_rank;
    /* model states = param + grad + master + momentum + variance + grad32:
     * 20 bytes/param mixed, 16 f32 (the paper's count); _alloc excludes the
     * fp32 gradient copy: what zinf's plan allocates (16 and 16) */
    int64_t model_states, model_states_rank;
    int64_t model_states_alloc, model_states_alloc_rank;

    /* model-state working memory: the largest operator's parameters and
     * their gradients, gathered whole on one GPU (untiled) */
    int64_t ms_working;
    int ms_working_op;        /* op index, -1 when no op reads a parameter */
    /* activations, per rank: kept from forward to backward (checkpoints,
     * and the activations outside every group; all of them without
     * checkpointing), and the working set rebuilt between two checkpoints
     * (largest group's non-checkpoint forward activations; 0 without) */
    int64_t act_kept, act_working;
    int act_working_group;    /* that group, -1 */

    char err[200];            /* memmodel_compute's message when it fails */
} MemModel;

/* Counts g. opt may be NULL (defaults). Returns 0, or -1 with out->err set
 * (bad options, malformed graph, byte counts overflowing 63 bits). */
int memmodel_compute(const Graph *g, const MemOptions *opt, MemModel *out);

/* The table a person reads: one row per class, columns whole model, per
 * node, per rank, each in TiB/GiB/MiB/KiB with 2 decimals and exact bytes. */
void memmodel_print(const MemModel *m, FILE *out);

/* "1.83 TiB", "400.00 GiB", "12.00 B" (units of 1024). */
const char *memmodel_human(int64_t bytes, char *buf, size_t n);

/* ---- the paper's closed forms (ZeRO-Infinity, Table 1 and section 4) ---- */

typedef struct Table1Shape {
    int64_t layers, hidden, heads;
} Table1Shape;

typedef struct Table1Assume {
    int64_t batch_per_node;   /* activation checkpoints per node */
    int64_t batch_per_gpu;    /* activation working memory per GPU */
    int64_t seq;
    int64_t ci;               /* layers between checkpoints */
} Table1Assume;

typedef struct Table1Row {
    int64_t params;           /* 12 * nl * hd^2 */
    int64_t model_states;     /* 20 bytes/param, whole model */
    int64_t ms_working_gpu;   /* 4 * hd * 4hd: fp16 params + grads of the hd x 4hd linear */
    int64_t act_ckpt_node;    /* 2 * bsz * seq * hd * nl / ci */
    int64_t act_working_gpu;  /* bsz * seq * ci * (16 * hd + 2 * heads * seq) */
} Table1Row;

/* The paper's five rows (80/10K/128 ... 315/160K/1024) and its assumptions
 * as this project reads them (docs/memory-model.md). */
enum { MEM_TABLE1_ROWS = 5 };
extern const Table1Shape memmodel_table1_shapes[MEM_TABLE1_ROWS];
void memmodel_table1_assume_default(Table1Assume *a);

/* Returns false (row untouched) on a non-positive input, ci not dividing
 * layers, or overflow. */
bool memmodel_table1_row(const Table1Shape *s, const Table1Assume *a, Table1Row *out);
/* The reproduced table (markdown), paper units: TB = 2^40, GB = 2^30. */
void memmodel_table1_print(const Table1Assume *a, FILE *out);

#endif
