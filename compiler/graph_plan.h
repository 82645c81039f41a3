/* graph_plan: the Graph's tables as the Plan carries them. Copies every
 * tensor, every op and the Hugging Face mapping of a Graph into a Plan's
 * arena, ids unchanged; depends on the Graph and the Plan only, so the
 * planner and anything else that turns a Graph into a Plan share it. */
#ifndef ZINF_GRAPH_PLAN_H
#define ZINF_GRAPH_PLAN_H
#include <stdbool.h>
#include <stddef.h>
#include "graph.h"
#include "plan.h"

/* Fills p->tensors/ntensors (every shard -1: the planner places them),
 * p->ops/nops and p->hf (when g has a mapping), allocated in p->arena.
 * Returns false with a message in err when the arena runs out. */
bool graph_plan_tables(const Graph *g, Plan *p, char *err, size_t errlen);

#endif
