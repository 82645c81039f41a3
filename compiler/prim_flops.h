/* prim_flops: the floating-point operations the planner counts for a
 * graph op: runtime/plan/flops.h's count of its forward (each family's
 * rule is there), twice that for a backward op. */
#ifndef ZINF_PRIM_FLOPS_H
#define ZINF_PRIM_FLOPS_H
#include "graph.h"

/* FLOPs of op (a forward, recompute or backward op of g). */
double prim_flops(const Graph *g, const GOp *op);

#endif
