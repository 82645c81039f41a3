/* cost: discrete-event simulation of a plan's schedule on its target.
 *
 * Every queue runs its instructions in stream order, one at a time; an
 * instruction starts when its queue is free and every instruction it waits
 * for has ended. Durations come from the plan's copy of the target
 * (docs/schedule.md, "Cost model"): latency + bytes / bandwidth for
 * transfers and collectives; for kernels the longer of bytes / memory
 * bandwidth and the family's time for its flops (interpolated between the
 * probe's timed calls, else flops / (peak x the family's efficiency)); a
 * queue woken by another's instruction starts a wake-up later; NVMe
 * transfers overlap their latencies, COST_NVME_DEPTH at a time. A target
 * without measured figures (zinfprobe) has latency 0 and efficiency 1
 * there, and no timed calls. It reads nothing but the Plan, so
 * zinfdump can recompute a plan's timeline without the compiler's data.
 */
#ifndef ZINF_COST_H
#define ZINF_COST_H
#include <stdbool.h>
#include "plan.h"

/* How many NVMe transfers the nvme queue keeps in flight (runtime/exec/qrun.h
 * QRUN_PIPE_MAX; runtime/exec/exec.c checks they agree). */
enum { COST_NVME_DEPTH = 32 };

typedef struct CostResult {
    double step_time;              /* seconds per optimizer step (grad_accum micro-batches) */
    double pass_time;              /* seconds for one pass of the stream */
    double busy[PLAN_NQUEUES];     /* seconds each queue is busy in one pass */
    int bottleneck;                /* the busiest queue */
    double redo_time;              /* a speculative plan: seconds a step that clips or is skipped adds (its redo range) */
    double *start, *end;           /* per instruction (malloc'd; cost_free) */
    double *wait;                  /* per instruction: time in flight beside others (the nvme pipeline), not busy */
} CostResult;

/* The cost model's family of a primitive (PrimId of vocab.h): its prim.def
 * family's entry in cost.c; FAM_ELEMENTWISE for an id out of range. */
PlanFamily cost_family(int prim);
/* The share of peak the target gives family f: its eff[f], 1 where the
 * target gives none. */
double cost_efficiency(const PlanTarget *t, PlanFamily f);
/* Seconds of one call of family f doing `flops`, from the target's timed
 * calls (zinfprobe): between two sizes straight in log time over log
 * flops, outside them at the nearest call's rate; -1 where the target
 * timed none of the family. */
double cost_measured_kernel(const PlanTarget *t, PlanFamily f, double flops);
/* One transfer of `bytes` through the nvme queue, from the target's timed
 * transfers in that direction (zinfprobe): *drive, the node's time per
 * transfer with the queues full, and *alone, a rank's time for one with
 * nothing in flight; between two sizes straight in log time over log
 * bytes, above the largest at its rate, below the smallest as the
 * smallest (a smaller request costs the drive no less). false where the
 * target timed none in that direction. */
bool cost_measured_nvme(const PlanTarget *t, bool write, double bytes, double *drive, double *alone);
/* One transfer of `bytes` through plan p's nvme queue as the pipeline
 * prices it: *xfer, the time it holds the drive from the rank's view (the
 * node's time per transfer times its ranks, who share it), *alone, the time
 * of one with nothing else in flight (at least *xfer). From the timed
 * transfers where the target has them (cost_measured_nvme), else from its
 * rate, request and latency figures. */
void cost_nvme_transfer(const Plan *p, bool write, double bytes, double *xfer, double *alone);
/* A host plan whose ranks' memory (every arena but NVMe's, times the ranks
 * of a node) fits in the target's shared cache: its memory-bound
 * instructions stream at the cache's bandwidth. */
bool cost_in_cache(const Plan *p);
/* Bytes the pass that decodes a weight stored quantized (nf4, int8: train
 * { quantize }) moves before kernel instruction s's GEMM: for each such
 * input, its quantized blocks read and its elements written in the compute
 * dtype (the host kernels' f32, runtime/hostk/hostk_quant.c; CUDA's, the
 * activation's, stdlib/kernels/dequant.cu). A forward or recompute op
 * decodes it; a backward one only where it computes dx (out[0]); 0 for
 * any other instruction. The cost model prices them at memory bandwidth
 * (the host's: the CPU's per rank; CUDA's: HBM). */
double cost_dequant_bytes(const Plan *p, const PlanInstr *s);
/* Duration of one instruction on the plan's target, in seconds. */
double cost_instr_time(const Plan *p, const PlanInstr *s);
/* Simulates the schedule; false only on out of memory. */
bool cost_simulate(const Plan *p, CostResult *r);
void cost_free(CostResult *r);
/* One sentence naming what limits the step ("the step is bound by ..."). */
void cost_bottleneck_sentence(const Plan *p, const CostResult *r, char *buf, size_t n);

#endif
