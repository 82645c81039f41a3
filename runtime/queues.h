/* queues: runs a range of a plan's instruction stream on one worker thread
 * per queue, each instruction after the ones it names.
 *
 * The stream is in program order; each queue takes its own instructions in
 * that order, one at a time, and waits for every dependency to have
 * completed in this run (dependencies outside the range completed in an
 * earlier run). The first failure stops every queue: workers waiting on a
 * dependency give up, and qrun_range returns the first error.
 * Each instruction's start and end times are recorded (for --trace). */
#ifndef ZINF_QUEUES_H
#define ZINF_QUEUES_H
#include <stdbool.h>
#include <stdint.h>
#include "plan.h"

/* Executes instruction i; returns 0 or -1 with a message in err. */
typedef int (*QrunExecFn)(void *ctx, uint32_t i, int worker, char *err, size_t errlen);

typedef struct QrunTiming {
    double start, end; /* seconds since the runner's epoch */
} QrunTiming;

typedef struct Qrun {
    const Plan *plan;
    QrunExecFn fn;
    void *ctx;
    uint64_t *done;     /* per instruction: the run generation it completed in */
    QrunTiming *timing; /* per instruction, last run */
    uint64_t gen;
    double epoch;
    double busy[PLAN_NQUEUES]; /* accumulated seconds each queue spent executing */
    int failed;
    char err[512];
    void *sync;         /* mutex + condition variable, opaque */
} Qrun;

int qrun_init(Qrun *q, const Plan *p, QrunExecFn fn, void *ctx);
void qrun_free(Qrun *q);
/* Runs instrs[begin, end). Returns 0, or -1 with q->err set. */
int qrun_range(Qrun *q, uint32_t begin, uint32_t end);
/* The instructions i of instrs[begin, end) with run[i] != 0 (run: ninstrs
 * flags; NULL: all of them). A dependency on one left out counts as met:
 * the caller makes sure none that runs needs one left out (rt_eval). */
int qrun_subset(Qrun *q, uint32_t begin, uint32_t end, const uint8_t *run);
double qrun_now(const Qrun *q);

#endif
