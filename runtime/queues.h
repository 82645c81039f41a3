/* queues: runs a range of a plan's instruction stream on one worker thread
 * per queue, each instruction after the ones it names.
 *
 * The stream is in program order; each queue takes its own instructions in
 * that order, one at a time, and waits for every dependency to have
 * completed in this run (dependencies outside the range completed in an
 * earlier run). The first failure stops every queue: workers waiting on a
 * dependency give up, and qrun_range returns the first error.
 * Each instruction's start and end times are recorded (for --trace), and
 * the part of them it spent waiting rather than working (qrun_add_wait: a
 * collective waiting for its peers to arrive), so a queue's busy time is
 * its work, not its waiting.
 *
 * Waiting workers sleep on a condition variable: a queue thread that has
 * nothing to run takes no core from the threads that do. */
#ifndef ZINF_QUEUES_H
#define ZINF_QUEUES_H
#include <stdbool.h>
#include <stdint.h>
#include "plan.h"

/* Executes instruction i; returns 0 or -1 with a message in err. */
typedef int (*QrunExecFn)(void *ctx, uint32_t i, int worker, char *err, size_t errlen);

/* Executes instructions idx[0, n) of one queue together (each ready, no
 * two touching the same bytes where one writes); 0 or -1 with err. */
typedef int (*QrunBatchFn)(void *ctx, const uint32_t *idx, int n, int worker, char *err, size_t errlen);

/* The most instructions one batch takes. */
enum { QRUN_BATCH_MAX = 32 };

typedef struct QrunTiming {
    double start, end; /* seconds since the runner's epoch */
    double wait;       /* seconds of [start, end) spent waiting (for peers), not working */
} QrunTiming;

typedef struct Qrun {
    const Plan *plan;
    QrunExecFn fn;
    void *ctx;
    uint64_t *done;     /* per instruction: the run generation it completed in */
    QrunTiming *timing; /* per instruction, last run */
    uint64_t gen;
    double epoch;
    double busy[PLAN_NQUEUES];   /* accumulated seconds each queue spent executing, less waiting */
    double waited[PLAN_NQUEUES]; /* accumulated seconds inside instructions spent waiting */
    double wait_now[PLAN_NQUEUES]; /* per worker: the wait noted for the instruction at hand */
    int failed;
    char err[512];
    void *sync;         /* mutex + condition variable, opaque */
    QrunBatchFn batch[PLAN_NQUEUES]; /* qrun_set_batch; NULL: one instruction at a time */
    uint64_t batches[PLAN_NQUEUES], batched[PLAN_NQUEUES]; /* batches run, instructions in them */
} Qrun;

int qrun_init(Qrun *q, const Plan *p, QrunExecFn fn, void *ctx);
/* Lets `queue` run its ready instructions together: when the next one is
 * ready, the following ones of the queue that are ready too (their
 * dependencies ended) and touch none of the bytes the ones before them
 * touch where either writes (block-granular: NVMe transfers are widened
 * to whole blocks) join it, up to QRUN_BATCH_MAX, and fn runs them at once
 * (the nvme queue: one io_uring submission). Each gets the batch's start
 * and end; its busy share is the batch's time over its size, the rest is
 * noted as waiting (in flight beside the others). */
void qrun_set_batch(Qrun *q, int queue, QrunBatchFn fn);
void qrun_free(Qrun *q);
/* Runs instrs[begin, end). Returns 0, or -1 with q->err set. */
int qrun_range(Qrun *q, uint32_t begin, uint32_t end);
/* The instructions i of instrs[begin, end) with run[i] != 0 (run: ninstrs
 * flags; NULL: all of them). A dependency on one left out counts as met:
 * the caller makes sure none that runs needs one left out (rt_eval). */
int qrun_subset(Qrun *q, uint32_t begin, uint32_t end, const uint8_t *run);
double qrun_now(const Qrun *q);
/* Called by an instruction running on `worker`: `seconds` of it were
 * waiting (a collective before every rank arrived), not work. */
void qrun_add_wait(Qrun *q, int worker, double seconds);

#endif
