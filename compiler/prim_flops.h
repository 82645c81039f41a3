/* prim_flops: the floating-point operations the planner counts for an op,
 * which the cost model prices (runtime/plan/cost.h) and zinfrun reports.
 *
 * Each primitive family (runtime/plan/prim.def's family column) has its
 * rule flops_<family> in prim_flops.c; a family without one does not
 * compile. A backward op counts twice its forward. */
#ifndef ZINF_PRIM_FLOPS_H
#define ZINF_PRIM_FLOPS_H
#include "graph.h"

/* FLOPs of op (a forward, recompute or backward op of g). */
double prim_flops(const Graph *g, const GOp *op);

#endif
