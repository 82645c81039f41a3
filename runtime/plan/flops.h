/* flops: the floating-point operations a plan counts for an op. The
 * planner writes them into its kernel instructions, the cost model prices
 * them (cost.h), zinfprobe times its kernel calls in the same counting and
 * zinfrun reports them.
 *
 * Each primitive family (prim.def's family column) has its rule
 * flops_<family> in flops.c; a family without one does not compile. */
#ifndef ZINF_FLOPS_H
#define ZINF_FLOPS_H
#include <stdint.h>

/* An input of the op as its count reads it: dims NULL when absent. */
typedef struct FlopsOperand {
    int rank;
    const int64_t *dims;
    int64_t numel;
} FlopsOperand;

/* A forward op of primitive prim (PrimId of vocab.h), attributes iattr
 * (a PlanOp's; NULL: all 0), inputs in[0..nin) and `out` elements in its
 * first output (1 where it has none). A backward op counts twice its
 * forward: its caller doubles it. */
double flops_forward(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out);

#endif
