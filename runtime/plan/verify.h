/* verify: an independent check of a plan, run by zinfc on what it writes and
 * by zinfrun and zinfdump on what they load. It shares no logic with the
 * planner: it re-derives the order of the schedule from the instructions'
 * dependencies and queues, and checks that
 *   - every index is in range, every opcode runs on its queue with the
 *     operands its layout in sched.def says (count, read/write), and copies
 *     and collectives move consistent sizes;
 *   - the dependency graph (waits plus each queue's stream order) is acyclic;
 *   - every buffer lies inside its arena, every arena within its capacity
 *     (pinned staging and CPU homes together within the rank's host memory);
 *   - every parameter and each of its gradient and optimizer states has
 *     exactly one shard per rank, covering the tensor, in a persistent buffer
 *     of the arena of its home tier;
 *   - every read is ordered after a write that fills it (or reads a
 *     persistent buffer), and no two accesses of a buffer of which one
 *     writes are unordered;
 *   - no two buffers whose address ranges overlap are live at the same time:
 *     every use of one is ordered before every use of the other.
 */
#ifndef ZINF_VERIFY_H
#define ZINF_VERIFY_H
#include <stddef.h>
#include "plan.h"

/* Returns the number of problems found (0: the plan is sound). The first
 * problems' messages, one per line, go into msgs (NUL-terminated, truncated
 * to n bytes); at most max_problems are collected before it stops looking. */
int verify_plan(const Plan *p, char *msgs, size_t n);

#endif
