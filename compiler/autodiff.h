/* autodiff: forward graph -> training graph.
 *
 * Appends to a checked forward Graph (compiler/sema) everything one training
 * step needs, in execution order:
 *   backward  ops[nforward .. nbackward_end): OP_LOSS_GRAD, then for each
 *             forward op in reverse an OP_BWD (the primitive's VJP), with
 *             OP_ZERO_GRAD before the first write of each activation
 *             gradient and, under activation checkpointing, the OP_RECOMPUTE
 *             copies of a checkpoint group's forward ops before its first
 *             backward op;
 *   optimizer ops[nbackward_end .. nops): OP_GRAD_NORM (when clipping or f16
 *             loss scaling needs it), one OP_ADAM per parameter, then an
 *             OP_ZERO_GRAD per parameter gradient for the next step.
 * It creates the gradient, fp32 master (mixed precision only), momentum and
 * variance tensors of every parameter and records them on the parameter
 * (GTensor.grad/master/momentum/variance), and reclassifies the activations
 * kept from forward to backward as TC_CKPT. docs/autodiff.md is the exact
 * contract (operand layout of OP_BWD, which inputs are differentiable). */
#ifndef ZINF_AUTODIFF_H
#define ZINF_AUTODIFF_H
#include <stdbool.h>
#include "diag.h"
#include "graph.h"

/* Which tensor inputs of a primitive have a gradient (bit i = input i). */
unsigned ad_differentiable_inputs(PrimId p);

/* checkpoint_every: activation checkpoint every N repeat instances
 * (g->train.checkpoint_every; 0 = keep every activation, no recompute).
 * Returns false (with a diagnostic) on out of memory or a malformed graph. */
bool ad_build(Graph *g, DiagSink *d);

/* The checkpoint group of an op's segment, -1 when outside any group. */
int ad_group_of(const Graph *g, int segment);

#endif
