/* calibrate: a target that has a run's own kernel times (zinfdump
 * --calibrate, docs/schedule.md "Calibrating from a run").
 *
 * The probe times kernels alone; in a step they share the rank's cores and
 * caches with its other queues and ranks (on 2 host ranks here they took
 * 1.1-1.4x their probed time), and on a GPU the probe times only GEMMs.
 * A trace of the step has every kernel as it ran. From it each kernel
 * family's timed calls (kernels { FAMILY = [flops, us, ...] }) become the
 * run's: one call per distinct FLOP count of the family, the mean busy
 * time of its kernels (what a step's sum of them expects, interruptions
 * included) less the target's launch time (the cost model adds that back).
 * Families the run has no kernel of keep the target's calls. On more than
 * one rank the collectives' times, each from its start to its end (the
 * wait for peers included: the cost model has no other place for it), are
 * fitted to the ring model as the probe fits its own (probe_fit), giving
 * net.latency_us and the bandwidth. The NVMe transfers set the level of
 * the timed transfers of their direction (nvme { reads = [...]; writes =
 * [...] }), the target's shape by size kept: those that ran alone scale
 * the time of one alone, those that ran beside others (their share of the
 * queue's busy time) the drive's time per transfer. Every other figure is
 * the plan's target's. Nothing here prints or allocates beyond what it frees. */
#ifndef ZINF_CALIBRATE_H
#define ZINF_CALIBRATE_H
#include <stdbool.h>
#include "plan.h"
#include "timeline.h"

typedef struct CalibrateInfo {
    int kernels;                  /* measured kernel instructions used */
    int calls[PLAN_NFAMILIES];    /* timed calls per family from the run (0: the target's kept) */
    int thinned;                  /* calls left out to stay within PLAN_MAX_KERNEL_POINTS */
    int collectives;              /* measured collectives */
    bool net;                     /* their fit replaced the net figures */
    int transfers;                /* measured NVMe transfers */
    int nvme_points[2];           /* timed transfers written: reads, writes (0: none, or the target's kept) */
    double nvme_scale[2][2];      /* [read, write][drive, alone]: the run's level over the target's (0: kept) */
} CalibrateInfo;

/* out = p's target with the run's kernel calls (out's strings point into
 * p). false: out of memory, or meas has no kernel with a time. */
bool plan_calibrate(const Plan *p, const Timeline *meas, PlanTarget *out, CalibrateInfo *info);

#endif
