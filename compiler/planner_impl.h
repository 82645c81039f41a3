/* planner_impl: what the planner's files share (private to
 * compiler/planner*.c): the builder state of one placement's build
 * (PlanBuilder), its buffers (PlanBuf), instructions, steps and fetches,
 * and the functions each stage offers the others. Symbols shared between the files carry the prefix pl_.
 *
 * The pipeline (planner.c drives it): pl_partition once (planner_partition.c);
 * then for every candidate placement pl_build (planner_build.c, emitting
 * through planner_step.c and planner_optim.c, allocating through
 * planner_alloc.c, all of them writing the tables of planner_tables.c),
 * pl_fits, and pl_emit_plan (planner_plan.c) to cost it; pl_refine
 * (planner_refine.c) after the search. The driver and the refinement write
 * the explanation through planner_explain.c. Calls go one way: down from
 * planner.c, and from each stage to the files below it. */
#ifndef ZINF_PLANNER_IMPL_H
#define ZINF_PLANNER_IMPL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "planner.h"
#include "cost.h"

enum { IO_ALIGN = 4096, GPU_ALIGN = 256, TILE_FRACTION = 16 };

typedef struct PlanBuf {
    PlanBuffer b;
    int32_t first, last;           /* program-order lifetime */
    int32_t lastq[PLAN_NQUEUES];   /* last use on each queue */
    int32_t writer;                /* hazard tracking */
    int32_t readq[PLAN_NQUEUES];
} PlanBuf;

typedef struct Ins {
    PlanInstr s;
    int32_t depq[PLAN_NQUEUES];    /* the latest instruction waited for on each queue */
} Ins;

typedef struct Req {               /* a fetch a step needs */
    int step, tensor, tile;        /* tile -1: every tile into one buffer */
    bool ckpt;                     /* a checkpoint reload rather than a parameter */
    int alias;                     /* >= 0: reuse that earlier fetch's buffer (recompute -> backward) */
    int buf;
    uint64_t off;
} Req;

typedef struct Step {
    int op, tile, ntiles;
    int req0, nreq;
} Step;

typedef struct Place {
    int tier[PC_COUNT];
    int prefetch;
    bool reuse;                    /* keep weights gathered for a recompute until their backward */
    bool overlap;                  /* CPU Adams of state in CPU memory start in the backward, as gradients become final */
    bool overlap_nvme;             /* the same for CPU Adams of state on NVMe */
    bool hoist;                    /* the optimizer's first reads of NVMe state are issued in the backward */
} Place;

/* An Adam sub-group emitted in the backward (planner_optim.c): with a
 * gradient norm, speculative, and redone after the norm from its backup
 * when the step clips or is skipped. */
typedef struct SpecAdam {
    int op;                        /* the graph's OP_ADAM */
    int64_t e0, ne;                /* elements [e0, e0+ne) of the shard */
    int backup;                    /* the backup buffer (-1: none) */
    bool twin;                     /* steps the state into its twins instead (b->twin) */
    bool nvtwin;                   /* state on NVMe: stepped in its staging, written to its twins on NVMe */
} SpecAdam;

struct AdamViews; /* an Adam sub-group's operands (planner_optim.c) */

typedef struct PlanBuilder {
    const Graph *g;
    const Target *t;
    const PlannerOptions *o;
    DiagSink *d;
    int R;
    Place pl;
    /* partition (per tensor, computed once) */
    int *ntiles;
    bool *part;
    /* per tensor, for parameters only: the tier of the parameter's home
     * (ptier) and of its gradient and optimizer state (otier) where a
     * `pin` or the refinement (planner_refine.c) moved it off its class's
     * tier; -1: the class's. NULL: no tensor moved. */
    int8_t *ptier, *otier;
    bool *name_pinned;             /* per tensor: a `pin` names this parameter (NULL: none does) */
    int64_t *tile_shard;
    bool *tile_pinned;
    const char ***tile_name;       /* per tiled parameter, the names "name#k" of its tiles' buffers (made once, on first use) */
    /* per build */
    int *home;                     /* state tensor -> home buffer */
    int *cur;                      /* tensor -> current GPU buffer version */
    int *ckpt_cpu;
    uint64_t *gflushed;            /* grad tensor -> tiles already flushed this micro-batch (NVMe grads) */
    bool *grad_rmw;                /* grad tensor -> accumulated on NVMe (zeroed after its Adam) */
    PlanBuf *bufs;
    int nbufs, cbufs;
    int persist_end;               /* every persistent buffer is below this index (the homes and twins come first) */
    Ins *ins;
    int nins, cins;
    PlanOperand *opnds;
    int nopnds, copnds;
    Step *steps;
    int nsteps;
    Req *reqs;
    int nreqs;
    uint32_t opt_begin;
    uint32_t redo_begin, redo_end; /* the speculative optimizer's ranges (Plan.redo_begin) */
    /* the overlapped optimizer, per build: per parameter, the step after
     * which its gradient is final (-1: none), whether its Adam ran in the
     * backward; the Adams that did, in order */
    int *grad_final_step;
    bool *adam_early;
    int *early_at, *early_op;      /* per step s, the Adam ops early_op[early_at[s] .. early_at[s+1]) it makes ready */
    int *twin;                     /* per state tensor: its twin buffer (-1: none) */
    SpecAdam *spec;
    int nspec, cspec;
    uint64_t spec_copy_bytes;      /* the twins' and backups' bytes (CPU memory) */
    uint64_t spec_nvme_bytes;      /* the twins' bytes on NVMe */
    bool early_any;                /* some Adam was emitted in the backward */
    /* the optimizer's first NVMe reads, hoisted into the backward (b->pl.hoist):
     * the sub-groups, their step, how many emitted so far */
    struct AdamViews *hoist;
    int *hoist_step;
    int nhoist, hoist_done;
    uint64_t cap[PLAN_NARENAS];
    uint64_t loss_ws;      /* the chunked loss's workspace kept out of cap[ARENA_GPU] (compiler/loss_chunk.h), 0: none */
    uint64_t mlp_ws;       /* the tiled MLP's workspace kept out of cap[ARENA_GPU] (compiler/mlp_tile.h), 0: none */
    uint64_t size[PLAN_NARENAS];
    /* Whether this build fitting matters and by how much it does not, not
     * (the deepest look-ahead, tried first: search_prefetch): then its
     * tight packing stops once the GPU arena outgrows the target, and
     * size_partial says size[] holds what was placed until then. */
    bool fits_only, size_partial;
    bool oom, internal;
    char why[256];
} PlanBuilder;

/* planner_explain.c: the explanation --explain prints, a line per pl_say */
typedef struct PlText {
    char *s;
    size_t len, cap;
} PlText;
void pl_say(PlText *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The split of each class over the tiers in plan p, a line per class. */
void pl_explain_split(const PlanBuilder *b, const Plan *p, PlText *ex);

static inline int pl_dsz(const PlanBuilder *b, int t) {
    int n = plan_dtype_size(b->g->tensors[t].dtype);
    return n ? n : 4;
}

static inline const char *pl_tname(const PlanBuilder *b, int t) { return b->g->tensors[t].name ? b->g->tensors[t].name : "?"; }

/* bytes of n elements of tensor t: whole blocks when it is stored
 * quantized or is an 8-bit moment (a parameter's tiles and shards are
 * whole blocks: sema and pl_partition see to it; an untiled tensor's last
 * 8-bit block may be short, and takes a whole block's bytes) */
static inline uint64_t pl_ebytes(const PlanBuilder *b, int t, int64_t n) {
    int dt = b->g->tensors[t].dtype;
    return dtype_is_blocked(dt) ? plan_dtype_bytes(dt, n) : (uint64_t)n * (uint64_t)pl_dsz(b, t);
}

/* per-rank bytes of a state tensor's home */
static inline uint64_t pl_shard_bytes(const PlanBuilder *b, int t) {
    return (uint64_t)b->ntiles[t] * pl_ebytes(b, t, b->tile_shard[t]);
}

/* the tier of parameter p's home, of its optimizer state (master,
 * momentum, variance), and of its gradient: on the GPU for GPU Adam, else
 * the class's CPU or NVMe (CPU when the class is on the GPU) */
static inline int pl_param_tier(const PlanBuilder *b, int p) {
    return b->ptier && b->ptier[p] >= 0 ? b->ptier[p] : b->pl.tier[PC_PARAMS];
}
static inline int pl_opt_tier(const PlanBuilder *b, int p) {
    return b->otier && b->otier[p] >= 0 ? b->otier[p] : b->pl.tier[PC_OPTIMIZER];
}
static inline int pl_grad_tier(const PlanBuilder *b, int p) {
    if (pl_opt_tier(b, p) == TIER_GPU) return TIER_GPU;
    return b->pl.tier[PC_GRADS] == TIER_GPU ? TIER_CPU : b->pl.tier[PC_GRADS];
}

static inline bool pl_is_kernel_op(OpKind k) { return k == OP_FWD || k == OP_BWD || k == OP_RECOMPUTE || k == OP_LOSS_GRAD; }

/* planner_options.c: does a tiles pin's pattern name this parameter */
bool pl_pin_matches(const char *pat, const char *name);

/* planner_partition.c: steps 1 and 2, once per planner_run */
bool pl_tileable_use(const GOp *op, int slot);
uint64_t pl_gpu_capacity(const Target *t);
uint64_t pl_cpu_capacity(const Target *t);
bool pl_partition(PlanBuilder *b, Arena *a);

/* planner_tables.c: the tables a build writes (below every stage of it);
 * every arena's alignment, by PlanArena index */
extern const uint64_t pl_arena_align[PLAN_NARENAS];
bool pl_grow(void **p, int *cap, int need, size_t elem);
/* The builder's big tables (bufs, ins, opnds: millions of entries on a
 * deep model) in their own mappings, grown by mremap, which moves pages
 * where realloc would copy the table at every doubling (zinfc keeps all
 * of its heap, mallopt in main_zinfc.c, so realloc cannot remap). Freed
 * with pl_table_free and the capacity they were grown to. */
bool pl_table_grow(void **p, int *cap, int need, size_t elem);
void pl_table_free(void *p, int cap, size_t elem);
int pl_newbuf(PlanBuilder *b, int arena, uint64_t bytes, int tensor, const char *name, bool persistent);
void pl_dep_on(PlanBuilder *b, int i, int j);
/* pl_dep_on for j on queue q, known without reading instruction j (a
 * buffer's lastq[q] or readq[q]): the packing adds these for millions of
 * buffers, and j lies far back in the table. */
static inline void pl_dep_on_queue(PlanBuilder *b, int i, int j, int q) {
    if (j < 0 || j >= i || q == b->ins[i].s.queue) return;
    if (b->ins[i].depq[q] < j) b->ins[i].depq[q] = j;
}
int pl_ins(PlanBuilder *b, int op, int queue, int arg, int tile, int ntiles, double flops);
void pl_opnd(PlanBuilder *b, int i, int buf, int mode, uint64_t off, uint64_t bytes);
int pl_tiled_param_of(const PlanBuilder *b, const GOp *op);

/* planner_build.c: one whole build for b->pl; false with b->oom or
 * b->internal (and b->why) set when it could not be built */
bool pl_build(PlanBuilder *b, Arena *a);

/* planner_step.c: a fetch, and a step of the forward or backward */
void pl_emit_fetch(PlanBuilder *b, Req *r);
void pl_emit_step(PlanBuilder *b, const Step *s);

/* planner_optim.c: the ops from bwd_end on (gradient norm, Adam, zeroing).
 * With b->pl.overlap (state in CPU memory) or overlap_nvme (on NVMe),
 * pl_overlap_prepare (before the backward is emitted) finds where each
 * gradient becomes final and pl_emit_early_adams, after step s, emits the
 * Adams of the parameters whose gradient step s made final: CPU Adams, one
 * micro-batch per step; speculative (a backup, twins, or for NVMe state
 * twins on NVMe) when the step has a gradient norm. False: out of memory. */
bool pl_overlap_prepare(PlanBuilder *b, Arena *a, int bwd_end);
void pl_emit_early_adams(PlanBuilder *b, int s);
/* After the homes: the twin buffers of the state that speculative Adams
 * step out of place (masters, moments of mixed-precision parameters in CPU
 * memory; on NVMe every state tensor, the parameter without a master). */
bool pl_overlap_twins(PlanBuilder *b, Arena *a);
void pl_emit_optimizer(PlanBuilder *b, int bwd_end);
/* With b->pl.hoist: pl_hoist_prepare (after the homes, before the step is
 * emitted) chooses the sub-groups whose state the optimizer reads first,
 * the window its read-ahead would fill, and the backward steps they are
 * read after; pl_emit_hoisted, after step s, emits the reads due there.
 * pl_emit_optimizer then starts with them loaded. False: out of memory. */
bool pl_hoist_prepare(PlanBuilder *b, Arena *a, int bwd_end);
void pl_emit_hoisted(PlanBuilder *b, int s);
/* Whether b->pl with hoist set would issue any such read, from the
 * build just made for b->pl (its Adams stepped in the backward, which
 * the hoist leaves as they are): without one the hoisted build is that
 * build again. */
bool pl_hoist_any(const PlanBuilder *b);

/* planner_alloc.c: step 5, and whether its arenas fit the target (the
 * first that does not, in why) */
bool pl_allocate(PlanBuilder *b);
bool pl_fits(const PlanBuilder *b, char *why, size_t n);

/* planner_plan.c: the Plan of the build (NULL when out of memory) */
Plan *pl_emit_plan(PlanBuilder *b);

/* planner_options.c: the plan block's `pin "pattern" = "tier"` settings
 * into b->ptier, b->otier and b->name_pinned; false (reported) when out of
 * memory, a pattern names no parameter, or a pin needs NVMe the target
 * lacks */
bool pl_apply_pins(PlanBuilder *b, Arena *a);

/* planner_refine.c: after the class search, the refinement (step 3b of
 * docs/tuning.md): moves the state of single parameters to a faster tier
 * while the build fits and the predicted step improves. b->pl is the
 * chosen placement, *plan its plan and *time its step; they become the
 * refined ones. known: *plan's cost where the caller has it (its busy
 * times and pass are read), else NULL (it is simulated again). *builds
 * counts the builds. False only when a build failed (out of memory,
 * internal error: b->oom, b->internal, b->why). */
bool pl_refine(PlanBuilder *b, Arena *a, PlText *ex, Plan **plan, double *time, int *builds, const CostResult *known);

#endif
