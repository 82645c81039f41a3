/* timeline: a plan's step in time, predicted (cost.c) or measured (the
 * Chrome trace `zinfrun --trace` writes), and what `zinfdump --compare`
 * says of the two: busy time per queue and per instruction class, ranked by
 * how far measurement and prediction part, and each one's critical path.
 * A Timeline owns its arrays (timeline_free); rows and paths are malloc'd
 * and owned by the caller. Nothing here prints. */
#ifndef ZINF_TIMELINE_H
#define ZINF_TIMELINE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cost.h"
#include "plan.h"

typedef struct Timeline {
    uint32_t n;          /* the plan's instruction count */
    double *start, *end; /* seconds from the timeline's origin, per instruction */
    double *wait;        /* seconds of [start, end) the instruction spent waiting (for peers, in a
                            collective), not working: args.wait of a trace; 0 in a prediction */
    uint8_t *have;       /* 1 where the instruction has a time (a trace may leave some out) */
    uint32_t count;      /* how many have one */
    double span;         /* the last end */
    int rank;            /* the trace's rank (its pid); -1 for a prediction */
} Timeline;

/* The cost model's timeline (a copy of c's times). false: out of memory. */
bool timeline_predicted(const Plan *p, const CostResult *c, Timeline *t);
/* A measured trace of plan p from text[0, len): every complete ("X")
 * event's args.i is an instruction of p with the plan's opcode (the first
 * word of its name) and queue (cat and tid), times in microseconds (ts,
 * dur), all of one rank (pid). Times are moved so the first start is 0.
 * 0, or -1 with err set ("event 12: ..."; t then holds nothing). */
int timeline_read_trace(const Plan *p, const char *text, size_t len, Timeline *t, char *err, size_t errlen);
void timeline_free(Timeline *t);
/* Instruction i's busy seconds: its duration less its waiting. */
double timeline_busy(const Timeline *t, uint32_t i);

/* An instruction's class: its opcode, and for a KERNEL the op's kind and
 * primitive ("kernel bwd linear"). Classes are numbered [0, TIMELINE_NCLASSES). */
int timeline_class(const Plan *p, uint32_t i);
int timeline_nclasses(void);
void timeline_class_name(int cls, char *buf, size_t n);

/* One line of a comparison: seconds predicted and measured (busy) over
 * count instructions, and the measured seconds they spent waiting. */
typedef struct TimelineRow {
    char name[48];
    uint32_t count;
    double pred, meas;
    double wait;
} TimelineRow;

/* Busy time (less waiting) per queue (PLAN_NQUEUES rows, every queue) and per class (the
 * classes p has; *rows malloc'd, their number in *nrows), each sorted by
 * |meas - pred|, largest first, then by name. Only instructions measured in
 * `meas` count on either side, so a partial trace compares like with like.
 * false: out of memory. */
bool timeline_queue_rows(const Plan *p, const Timeline *pred, const Timeline *meas, TimelineRow rows[PLAN_NQUEUES]);
bool timeline_class_rows(const Plan *p, const Timeline *pred, const Timeline *meas, TimelineRow **rows, uint32_t *nrows);

/* The critical path: from the instruction that ends last, back through
 * whichever of its dependencies and its queue's previous instruction ended
 * last (what it waited for), to one that waited for nothing. */
typedef struct TimelinePath {
    uint32_t *instr; /* in time order (malloc'd) */
    uint32_t n;
    double span;     /* the first start to the last end */
    double busy;     /* the sum of its instructions' busy times; span - busy is time spent waiting
                        (between instructions, and inside them for peers) */
} TimelinePath;

/* false: out of memory. A timeline with no times gives an empty path. */
bool timeline_critical_path(const Plan *p, const Timeline *t, TimelinePath *path);
void timeline_path_free(TimelinePath *path);
/* Whether each instruction is on the path: a malloc'd array of p->ninstrs
 * flags (NULL: out of memory). */
uint8_t *timeline_path_marks(const Plan *p, const TimelinePath *path);

#endif
