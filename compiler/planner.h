/* planner: training Graph + Target -> Plan.
 *
 * The steps (docs/schedule.md, docs/tuning.md):
 *   1 partition every parameter and its gradient and optimizer state over
 *     all ranks (ZeRO-3), each rank's slice padded to 4096 bytes; tensors
 *     below whole_below elements stay whole on every rank;
 *   2 tile a parameter whose gathered copy would take more than 1/16 of GPU
 *     memory into tiles fetched and run one after another;
 *   3 place parameters, gradients, optimizer state and activation
 *     checkpoints in GPU, CPU or NVMe, the fastest predicted placement that
 *     fits the target;
 *   4 schedule one instruction stream for every rank on the queues nvme,
 *     h2d, d2h, comm, compute, cpu, fetches hoisted `prefetch` fetches ahead;
 *   5 allocate every arena from the buffers' lifetimes in the schedule;
 *   6 cost it (runtime/plan/cost.h).
 * A `plan { }` block pins any choice. Problems (infeasible placement, bad
 * pins) go to the DiagSink.
 */
#ifndef ZINF_PLANNER_H
#define ZINF_PLANNER_H
#include <stdbool.h>
#include <stdint.h>
#include "ast.h"
#include "diag.h"
#include "graph.h"
#include "plan.h"
#include "target.h"

/* The classes of state the planner places. */
typedef enum PlanClass { PC_PARAMS, PC_GRADS, PC_OPTIMIZER, PC_CHECKPOINTS, PC_COUNT } PlanClass;
extern const char *const planner_class_names[PC_COUNT];

typedef struct TilePin {
    const char *pattern; /* a parameter name, a prefix of one ("block.3.mlp"), or a glob with '*' */
    int tiles;
    Span span;
} TilePin;

/* `pin "block.0.*" = "gpu"`: the named parameters, with their gradients
 * and optimizer state, live on that tier; the refinement leaves them. */
typedef struct TierPin {
    const char *pattern; /* as TilePin's */
    int tier;            /* PlanTier */
    Span span;
} TierPin;

typedef struct PlannerOptions {
    int tier[PC_COUNT];    /* PlanTier, or -1: the planner chooses */
    int prefetch;          /* fetches in flight ahead of use; 0: the planner chooses */
    int64_t whole_below;   /* tensors with fewer elements stay whole on every rank (default 100000) */
    TilePin *tiles;
    int ntiles;
    TierPin *pins;
    int npins;
    int ranks;             /* 0: the target's; else overrides it (host targets, tests) */
    int overlap;           /* optimizer_overlap: 0 "auto" (the planner costs both), 1 "on" (overlapped only), -1 "off" (serial) */
    bool sample_starts;    /* the plan gets CUDA kernels, which read packed rows' sample starts: a persistent GPU
                            * buffer of B*T int32 that the input of the tokens also writes (zinfc sets it) */
    int64_t loss_chunk;    /* loss_chunk: -1 "auto" (whole logits when the plan fits with them), 0 whole, N rows a chunk
                            * (compiler/loss_chunk.h; zinfc applies it before autodiff) */
    bool verify_by_caller; /* the caller runs verify_plan on the plan and planner_verified on its verdict (zinfc
                            * does, beside the plan's encoding); false: planner_run does before it returns */
    int64_t mlp_tile;      /* mlp_tile: -1 "auto" (the MLP as written when the plan fits with it), 0 as written, N rows a
                            * tile (compiler/mlp_tile.h; zinfc applies it before autodiff) */
    uint64_t gpu_keep;     /* GPU bytes per rank kept free beside the arena for what zinfrun allocates there (kernel and
                            * cuBLASLt workspaces, collective scratch: runtime/plan/devmem.h), as a first plan's kernels
                            * showed; 0: the chunked loss's and the tiled MLP's workspaces only (zinfc sets it) */
} PlannerOptions;

void planner_options_default(PlannerOptions *o);
/* Reads a `plan { params = "nvme"; optimizer = "cpu"; checkpoints = "cpu";
 * grads = "cpu"; prefetch = 3; whole_below = 100000; tiles "block.*.mlp" = 4;
 * pin "block.0.*" = "gpu"; optimizer_overlap = "off"; loss_chunk = 4096;
 * mlp_tile = 8192 }`
 * declaration into o (which holds the defaults). */
bool planner_options_from_decl(const Decl *decl, Arena *a, DiagSink *d, PlannerOptions *o);
/* Every plan block of the program, in order (later settings win). */
bool planner_options_from_program(const Program *prog, Arena *a, DiagSink *d, PlannerOptions *o);

typedef struct PlannerResult {
    Plan *plan;            /* owned by the caller: plan_free */
    const char *explain;   /* the choices and why, several lines (in the arena) */
    double step_time;      /* predicted seconds per step */
} PlannerResult;

/* Plans g for t. Returns false with diagnostics in d when no plan fits. */
bool planner_run(const Graph *g, const Target *t, const PlannerOptions *o, Arena *a, DiagSink *d, PlannerResult *out);
/* The verdict of verify_plan (its count of problems and its messages,
 * whose first line is kept) on a planned plan: false, reported to d as an
 * internal planner error, when there are problems. */
bool planner_verified(int problems, char *msgs, DiagSink *d);

#endif
