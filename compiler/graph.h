/* graph: the IR every stage after the checker works on.
 *
 * A Graph is a flat list of ops over tensors with concrete shapes and dtypes,
 * in execution order. The checker (sema) builds the forward graph with layers
 * instantiated; autodiff appends the backward ops and the optimizer; the
 * memory model and the planner read it. A graph and everything it points to
 * live in one Arena (the compilation's).
 *
 * Every tensor has a class (what kind of state it is), because the memory
 * model counts bytes per class and the planner places each class.
 */
#ifndef ZINF_GRAPH_H
#define ZINF_GRAPH_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "arena.h"
#include "ast.h"
#include "vocab.h" /* DType, PrimId, TensorClass, OpKind, RopeScaling */
#include "plan.h" /* PLAN_MAX_IATTR, PLAN_MAX_FATTR: ops carry their attributes into the plan */

enum { GRAPH_MAX_RANK = 6, GRAPH_MAX_IN = 24, GRAPH_MAX_OUT = 8, GRAPH_MAX_OPOUT = 12 };
/* split makes at most GRAPH_MAX_OUT pieces; a backward op lists up to
 * 3 + 2 * GRAPH_MAX_OUT tensors. An op has at most GRAPH_MAX_OPOUT
 * outputs: a backward op one gradient per input of its forward op (11 of
 * gated_mlp with its adapters), a forward op GRAPH_MAX_OUT. */

typedef struct GTensor {
    const char *name;   /* parameters: hierarchical "block.3.attn.wqkv"; others: "%12" style */
    DType dtype;
    int rank;
    int64_t dims[GRAPH_MAX_RANK];
    int64_t numel;
    TensorClass cls;
    InitKind init;      /* parameters */
    double init_std;    /* INIT_NORMAL: std; INIT_UNIFORM: half-width */
    int producer;       /* op index, -1 for inputs and parameters */
    int param;          /* grad/master/momentum/variance: the parameter's tensor id; else -1 */
    int grad;           /* parameter: its gradient tensor id (after autodiff), else -1 */
    int grad_of;        /* a gradient tensor (TC_GRAD or an activation gradient): whose, else -1 */
    int master, momentum, variance; /* parameter: its optimizer state tensor ids, else -1 */
    int segment;        /* checkpoint segment (a repeat instance) it belongs to, -1 outside */
    bool frozen;        /* parameter: not trained (train { freeze = [...] }): no gradient,
                         * no optimizer state, no Adam; still fetched for forward and backward */
    bool no_decay;      /* parameter: AdamW steps it without weight decay (train { no_decay = [...] }); its
                         * OP_ADAM's iattr[GRAPH_ADAM_NO_DECAY] is 1 */
    Span span;          /* where it was written in the source */
} GTensor;

/* OP_ADAM's attribute slot: 1 = no weight decay (runtime/plan/plan.h's PLAN_ADAM_NO_DECAY). */
enum { GRAPH_ADAM_NO_DECAY = 0 };

typedef struct GOp {
    OpKind kind;
    PrimId prim;
    int nin, nout;
    int in[GRAPH_MAX_IN];
    int out[GRAPH_MAX_OPOUT];
    /* Attributes (meaning per primitive in docs/primitives.md), each at the
     * slot runtime/plan/prim.def names: iattr[IA_<PRIM>_<NAME>] (integers,
     * flags, words) and fattr[FA_<PRIM>_<NAME>] (numbers), e.g.
     * iattr[IA_ROPE_HEADS], fattr[FA_ROPE_THETA]. */
    int64_t iattr[PLAN_MAX_IATTR];
    double fattr[PLAN_MAX_FATTR];
    int segment;        /* repeat instance (checkpoint segment), -1 outside any repeat */
    int fwd;            /* OP_BWD, OP_RECOMPUTE: index of the forward op; else -1 */
    int nfin;           /* OP_BWD: how many of in[] are the forward op's inputs */
    const char *scope;  /* call path, e.g. "block.3.attn" ("" at model level) */
    Span span;          /* the .zl expression it lowers */
    /* list attributes (compiler/prim.c's PA_FLOATS), concatenated in slot
     * order (runtime/plan/plan.h's PlanOp.table); NULL, 0: none */
    const double *table;
    int ntable;
} GOp;

/* How Adam stores its moments (train { optimizer = adam(state = ...) },
 * docs/training.md): f32; bf16 (rounded to nearest even); 8-bit blocks of
 * bitsandbytes' dynamic maps (DT_DYN8 momentum, DT_UDYN8 variance), for
 * parameters of at least OPT_STATE_8BIT_MIN elements, as bitsandbytes
 * keeps smaller ones in f32. */
typedef enum OptState { OPT_STATE_FP32, OPT_STATE_BF16, OPT_STATE_8BIT, OPT_NSTATES } OptState;
enum { OPT_STATE_8BIT_MIN = 4096 };
extern const char *const opt_state_names[OPT_NSTATES]; /* "fp32", "bf16", "8bit" */

typedef struct TrainConfig {
    int64_t micro_batch;     /* B */
    int64_t steps;
    DType dtype;             /* parameter/activation dtype: f32, bf16 or f16 */
    uint64_t seed;
    /* AdamW */
    double lr, beta1, beta2, eps, weight_decay;
    uint8_t opt_state;       /* OptState of the moments */
    int64_t warmup_steps;    /* linear warmup from 0 */
    double min_lr;           /* the schedule's end: from lr to min_lr over steps (LrSchedule) */
    uint8_t schedule;        /* LrSchedule */
    double grad_clip;        /* global-norm clipping; 0 = off */
    double loss_scale;       /* f16: initial dynamic loss scale; else 1 */
    int64_t checkpoint_every;/* activation checkpoint every N repeat instances; 0 = none */
    int64_t grad_accum;      /* micro-batches per step */
} TrainConfig;

/* The Hugging Face mapping (compiler/hfmap.h, from the program's hf blocks;
 * the planner copies it into Plan.hf): a parameter is the concatenation,
 * along its last axis, of its pieces, which are adjacent and in order; a
 * piece is columns [src_col, src_col + cols) of HF tensor hf_name read in
 * zinf's [in, out] layout (transposed first when `transpose`); a stacked
 * piece does so for the slice P[index, ...] alone (PlanHfPiece). */
typedef struct GraphHfPiece {
    int tensor;              /* a TC_PARAM tensor id */
    const char *hf_name;
    bool transpose;
    int64_t src_col, cols;
    bool stacked;            /* the piece makes only P[index, ...] (stack(): one expert's tensor) */
    int32_t index;
    uint8_t layout;          /* PLAN_HF_PLAIN, or expert_rows()/expert_cols(): PEFT's expert layouts (plan.h) */
} GraphHfPiece;

typedef struct GraphHf {
    const char *arch;        /* NULL: the program has no mapping */
    const char *config;      /* config.json text to write on export ("" if none) */
    GraphHfPiece *pieces;
    int npieces;
} GraphHf;

typedef struct Graph {
    Arena *arena;
    GTensor *tensors;
    int ntensors, tcap;
    GOp *ops;
    int nops, ocap;
    int nforward;            /* ops[0..nforward) are the forward pass; autodiff appends
                              * backward (with recompute) and then the optimizer ops */
    int nbackward_end;       /* ops[nforward..nbackward_end) backward; the rest optimizer */
    int loss;                /* tensor id of the scalar loss */
    int inputs[4];           /* tensor ids of the model's inputs in signature order */
    int ninputs;
    int nsegments;           /* number of repeat instances */
    const char *model_name;
    TrainConfig train;
    GraphHf hf;              /* empty unless the model's file has an hf block */
} Graph;

/* The dtype of Adam's momentum (variance: its variance) for a parameter of
 * numel elements under t's opt_state. */
DType graph_moment_dtype(const TrainConfig *t, int64_t numel, bool variance);

void graph_init(Graph *g, Arena *a);
/* Adds a tensor and returns its id (-1 on out of memory). */
int graph_add_tensor(Graph *g, const char *name, DType dt, int rank, const int64_t *dims, TensorClass cls);
/* An op of kind k with nothing in it: no tensors (-1), no attributes,
 * outside any segment, no forward op, no scope or source span. */
GOp graph_op_blank(OpKind k);
/* Adds an op and returns its index; sets producer of its outputs. */
int graph_add_op(Graph *g, const GOp *op);
/* Parameters: total element count over TC_PARAM tensors. */
int64_t graph_param_count(const Graph *g);
/* Frozen parameters: element count, and their number in *ntensors (may be NULL). */
int64_t graph_frozen_count(const Graph *g, int *ntensors);
/* "[4, 64, 768]" */
const char *graph_shape_str(const Graph *g, int tensor, char *buf, size_t n);
/* The --emit=graph listing. */
void graph_dump(const Graph *g, FILE *out);

#endif
