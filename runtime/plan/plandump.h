/* plandump: a plan in words and pictures, for zinfdump and the golden
 * schedule tests. Each function prints to the FILE* it is given. */
#ifndef ZINF_PLANDUMP_H
#define ZINF_PLANDUMP_H
#include <stdio.h>
#include "cost.h"
#include "plan.h"
#include "timeline.h"

/* Memory per tier and rank, predicted step time, queue busy times, the bottleneck. */
void plandump_summary(const Plan *p, const CostResult *c, FILE *out);
/* The summary's line for a CUDA plan: what zinfrun holds on the GPU, the
 * gpu arena and the allocations beside it (devmem.h), against the target's
 * GPU memory; zinfc --explain prints it too. */
void plandump_devmem(const Plan *p, FILE *out);
/* A mixture-of-experts plan's expert FLOPs (active: k of E experts a
 * token) against all experts', and its expert parameter bytes, one line;
 * nothing for a plan without experts (plandump_moe.c). */
void plandump_moe(const Plan *p, FILE *out);
/* One instruction per line. rank >= 0 also shows that rank's slice of each
 * partitioned tensor an instruction moves. */
void plandump_schedule(const Plan *p, int rank, FILE *out);
/* Each arena's buffers by offset, with lifetimes in instructions. */
void plandump_memory(const Plan *p, FILE *out);
/* The embedded CUDA units with their ptxas reports, then every op's
 * launches (entry <<<grid, block, smem>>> (arguments) unit) and the
 * utility launches. */
void plandump_kernels(const Plan *p, FILE *out);
/* The Hugging Face mapping: a header line ("hf ARCH: N pieces of M
 * parameters, config.json of B bytes"), then one line per piece:
 *   piece PARAM [d0,d1][INDEX] LAYOUT <- HF_NAME T|- FIRST COUNT
 * (T: the HF tensor is transposed first; columns FIRST .. FIRST+COUNT;
 * [INDEX] for a stacked piece, LAYOUT expert_rows or expert_cols for a
 * piece of PEFT's expert layouts, both only when they apply). */
void plandump_hf(const Plan *p, FILE *out);
/* The predicted timeline as Chrome trace JSON (chrome://tracing, Perfetto). */
void plandump_trace(const Plan *p, const CostResult *c, FILE *out);
/* The predicted timeline and GPU memory in use over the step, as SVG: a
 * time axis in ms, one lane per queue, the critical path's boxes outlined,
 * memory scaled to its peak with the budget marked. */
void plandump_svg(const Plan *p, const CostResult *c, FILE *out);
/* The same with a measured timeline's lanes (and its critical path) under
 * the predicted ones on the same axis; meas NULL: plandump_svg. false: out of memory. */
bool plandump_svg_measured(const Plan *p, const CostResult *c, const Timeline *meas, FILE *out);
/* --compare: busy time per queue and per instruction class, predicted
 * against measured (ratio measured / predicted), the largest divergence
 * first, then each one's critical path with its longest instructions.
 * source names the measured trace in the header. false: out of memory. */
bool plandump_compare(const Plan *p, const Timeline *pred, const Timeline *meas, const char *source, FILE *out);

#endif
