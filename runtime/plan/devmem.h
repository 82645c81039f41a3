/* devmem: what the CUDA executor allocates on the GPU beside the arenas,
 * from the plan alone. It owns the rules (runtime/exec/exec_cuda.c allocates
 * by them, zinfdump and zinfc report them before launch, zinfc refuses a
 * plan they do not fit): which instructions run on a device stream (decided
 * by their operands' arenas), and which queues hold
 *   - a kernel workspace: the largest op_code / tile_code ws_bytes, rounded
 *     to 256, on every queue that launches kernels (kernels, GPU Adam, GPU
 *     accumulation, the accumulation after a reduce-scatter);
 *   - a collective scratch: the largest padded all-gather (ranks x the
 *     slice) or reduce-scatter ((ranks + 1) x the shard), rounded to 256,
 *     on every queue that runs one on the GPU;
 *   - a cuBLASLt workspace: the largest ws_off + ws_bytes of the plan's
 *     cuBLASLt GEMMs, on every queue that runs kernel instructions (none
 *     when cuBLASLt is off or does not load).
 * Not counted: the CUDA context, NCCL's own buffers, and the sample starts
 * of packed rows a plan without their buffer (an older zinfc's) has
 * allocated at its first input. */
#ifndef ZINF_DEVMEM_H
#define ZINF_DEVMEM_H
#include <stdbool.h>
#include <stdint.h>
#include "plan.h"

typedef enum PlanDevItem { PLAN_DEV_KERNEL_WS, PLAN_DEV_COLL_SCRATCH, PLAN_DEV_GEMM_WS, PLAN_DEV_NITEMS } PlanDevItem;
extern const char *const plan_dev_item_names[PLAN_DEV_NITEMS];

typedef struct PlanDevMem {
    uint64_t arena;                          /* the gpu arena as allocated: its size rounded up to 4 KiB */
    uint64_t bytes[PLAN_DEV_NITEMS];         /* one queue's */
    bool on[PLAN_DEV_NITEMS][PLAN_NQUEUES];  /* the queues that hold it (bytes > 0) */
    int nqueues[PLAN_DEV_NITEMS];
    uint64_t extra;                          /* sum of bytes x nqueues */
    uint64_t total;                          /* arena + extra: the process's device allocations */
    bool code;                               /* the plan has GPU code; without it the workspaces are unknown */
} PlanDevMem;

/* Whether the CUDA executor enqueues instruction `in` on its queue's
 * stream (else it runs on the host). The executor refuses what it cannot
 * run (runtime/exec/exec_cuda.c classify); this decides only where. */
bool plan_instr_on_device(const Plan *p, const PlanInstr *in);

/* The cuBLASLt workspace one queue that runs gemms needs: the largest
 * ws_off + ws_bytes of the plan's cuBLASLt GEMMs, 0 when none. */
uint64_t plan_gemm_ws_bytes(const Plan *p);

/* What the CUDA executor allocates on the device for plan p; gemm_lt:
 * cuBLASLt runs the GEMMs (zinfrun: it loaded and is not off; before
 * launch: true, the most it allocates). */
void plan_devmem(const Plan *p, bool gemm_lt, PlanDevMem *out);

/* "kernel workspace 176 MiB x 2 queues (compute, comm), ..." or "none" */
const char *plan_devmem_items_str(const PlanDevMem *m, char *buf, size_t n);

#endif
