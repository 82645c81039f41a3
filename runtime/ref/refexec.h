/* refexec: the reference executor — the oracle every other executor is
 * compared with.
 *
 * It runs a training Graph (compiler/autodiff) directly on the host kernels:
 * one process, no partitioning, no offload, every tensor in its own buffer,
 * every op in graph order. Keep it simple and obviously right: it is what
 * "the loss is the same whatever the world size, placement and tiling" is
 * measured against.
 *
 * Step semantics (shared with zinfrun, docs/training.md):
 *   lr(step)  = lr * step/warmup for step < warmup (steps count from 1),
 *               then constant, cosine or linear from lr to min_lr over the
 *               remaining steps (schedule);
 *   clip      = min(1, grad_clip / (norm + 1e-6)) when grad_clip > 0;
 *   AdamW     : m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *               p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p)
 *               on the fp32 master, then rounded into the parameter.
 */
#ifndef ZINF_REFEXEC_H
#define ZINF_REFEXEC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "graph.h"
#include "plan.h"

typedef struct RefExec {
    const Graph *g;
    Plan *tables;      /* the graph's tensors and ops as a plan holds them (the host kernels' input) */
    void **buf;        /* per tensor: its storage (dtype-sized elements) */
    void **ws;         /* per forward op: workspace shared by fwd, recompute, bwd */
    size_t *ws_bytes;
    int64_t step;      /* optimizer steps taken */
    double loss_scale; /* f16 dynamic loss scale, else 1 */
    int good_steps;    /* f16: steps since the scale last changed */
    double last_grad_norm;
    bool skipped;      /* the last step was skipped (f16 overflow) */
    char err[256];
} RefExec;

/* Allocates every tensor and initialises parameters from (seed, name, index)
 * (runtime/initrng). Returns 0, or -1 with ref->err set. */
int ref_init(RefExec *r, const Graph *g, uint64_t seed);
void ref_free(RefExec *r);

/* Forward and backward of one micro-batch: ops[0, nbackward_end). tokens and
 * targets are the model's two inputs (B*T int32 each). Gradients accumulate
 * over calls until ref_optimizer_step. grad_scale multiplies the loss
 * gradient (1/accumulation). */
int ref_forward_backward(RefExec *r, const int32_t *tokens, const int32_t *targets, float grad_scale, float *loss);
/* Forward only (evaluation, finite differences). */
int ref_forward(RefExec *r, const int32_t *tokens, const int32_t *targets, float *loss);
/* The optimizer ops: grad norm, AdamW for every parameter, zero the grads. */
int ref_optimizer_step(RefExec *r);
/* Learning rate of optimizer step `step` (1-based). */
double ref_lr(const TrainConfig *t, int64_t step);

/* Element i of a tensor as a double, and set it (for tests and export). */
double ref_get(const RefExec *r, int tensor, int64_t i);
void ref_set(RefExec *r, int tensor, int64_t i, double v);

#endif
