/* qrun: runs a range of a plan's instruction stream on one worker thread
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
#ifndef ZINF_QRUN_H
#define ZINF_QRUN_H
#include <stdbool.h>
#include <stdint.h>
#include "plan.h"

/* Executes instruction i; returns 0 or -1 with a message in err. */
typedef int (*QrunExecFn)(void *ctx, uint32_t i, int worker, char *err, size_t errlen);

/* A queue whose instructions may be in flight several at once (the host
 * nvme queue of either backend: transfers through io_uring). qrun_set_pipe's
 * worker starts the queue's instructions in program order, each as soon
 * as its dependencies have ended and it touches none of the bytes of one
 * still in flight where either writes (block-granular: NVMe transfers are
 * widened to whole blocks), up to QRUN_PIPE_MAX unretired; while it cannot
 * start the next it waits for a completion; it retires them in program
 * order (an instruction counts as done for its dependants only once every
 * earlier one of its queue is: plans leave out the dependencies that
 * queue order implies). So the device never idles while ready work
 * exists, and what the dependants see is the queue's order.
 *   start: begin instruction i in `slot` (0 .. QRUN_PIPE_MAX-1, not in
 *     use), `inflight` others of the queue being in flight: 1 when it is
 *     in flight now, 0 when it ended already (done there and then),
 *     QRUN_PIPE_ALONE when it must run with nothing in flight (only when
 *     inflight > 0: the worker asks again once the queue has drained; the
 *     nvme queue's instructions that are not transfers, and on CUDA a
 *     transfer whose GPU work still runs),
 *     -1 with err. Time start notes with qrun_add_wait is taken as spent
 *     before the instruction began (waiting for what it depends on, e.g.
 *     the GPU work whose output it writes to disk): the instruction's
 *     timing starts after it, and the queue counts it as busy only when
 *     others were in flight meanwhile.
 *   progress: move what is in flight on; when wait, block until at least
 *     one of it ends. 0 or -1 with err.
 *   finished: slot's instruction: 1 ended well, 0 still in flight, -1
 *     failed (err says why). A slot reported ended is free again.
 * After a failure (its own or another queue's) the worker starts nothing
 * more and waits for what it has in flight before it returns, so no
 * buffer is left in the kernel's hands. */
typedef struct QrunPipe {
    int (*start)(void *ctx, uint32_t i, int slot, int inflight, int worker, char *err, size_t errlen);
    int (*progress)(void *ctx, int wait, int worker, char *err, size_t errlen);
    int (*finished)(void *ctx, int slot, int worker, char *err, size_t errlen);
} QrunPipe;

enum { QRUN_PIPE_MAX = 32, QRUN_PIPE_ALONE = 2 };

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
    QrunPipe pipe[PLAN_NQUEUES];     /* qrun_set_pipe; start NULL: one instruction at a time */
    uint64_t overlapped[PLAN_NQUEUES]; /* instructions started while others of the queue were in flight */
    int peak[PLAN_NQUEUES];            /* the most of the queue's instructions in flight at once */
    int slice_us;       /* the I/O workers' scheduler slice (qrun_init: 100; 0: the kernel's default); set before the first run */
} Qrun;

int qrun_init(Qrun *q, const Plan *p, QrunExecFn fn, void *ctx);
/* Runs `queue` as a pipeline (QrunPipe above). Each instruction's timing
 * is from its start to its end; its busy share is, at every moment, the
 * queue's busy time over the number then in flight, the rest noted as
 * waiting, so the queue's busy time is the time it had anything in
 * flight. */
void qrun_set_pipe(Qrun *q, int queue, const QrunPipe *pipe);
void qrun_free(Qrun *q);
/* Runs instrs[begin, end). Returns 0, or -1 with q->err set. */
int qrun_range(Qrun *q, uint32_t begin, uint32_t end);
/* The instructions i of instrs[begin, end) with run[i] != 0 (run: ninstrs
 * flags; NULL: all of them). A dependency on one left out counts as met:
 * the caller makes sure none that runs needs one left out (rt_eval). */
int qrun_subset(Qrun *q, uint32_t begin, uint32_t end, const uint8_t *run);
double qrun_now(const Qrun *q);
/* Called by an instruction running on `worker`: `seconds` of it were
 * waiting (a collective before every rank arrived), not work. From a
 * pipelined queue's start: waiting before it began (QrunPipe). */
void qrun_add_wait(Qrun *q, int worker, double seconds);

#endif
