#include "flops.h"
#include <stdbool.h>
#include <stddef.h>
#include "vocab.h"

/* A family's count: the op's inputs in[0..nin) (absent ones with dims NULL)
 * and its first output's element count. */
typedef double (*FlopsRule)(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out);

static const FlopsOperand *input(const FlopsOperand *in, int nin, int i) { return i < nin && in[i].dims ? &in[i] : NULL; }

/* Element-wise work: a few operations an output element. */
static double flops_elementwise(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out) {
    (void)prim, (void)iattr, (void)in, (void)nin;
    return 5 * out;
}

/* 2 K per output element, K the weight's inner dimension (its columns
 * with matmul's transpose_b). */
static double flops_gemm(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out) {
    const FlopsOperand *x = input(in, nin, 0), *w = input(in, nin, 1);
    if (!w || !x) return out;
    bool tb = prim == PRIM_MATMUL && iattr && iattr[IA_MATMUL_TRANSPOSE_B];
    double k = w->rank >= 2 ? (double)(tb ? w->dims[1] : w->dims[0]) : 1;
    return 2 * out * k;
}

/* 4 flops a (query, key) pair a dim (q.k and p.v): causal, T^2/2 pairs a
 * row (half of 4*B*T*T*D); with a sliding window W < T, W T - W (W - 1) / 2
 * pairs, which the kernels of both backends visit (no more: they skip the
 * key tiles before the window). */
static double flops_attention(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out) {
    (void)prim;
    const FlopsOperand *q = input(in, nin, 0);
    if (!q || q->rank < 3) return out;
    double T = (double)q->dims[1], W = iattr ? (double)iattr[IA_ATTENTION_WINDOW] : 0;
    if (W > 0 && W < T) return 4.0 * (double)q->numel / T * (W * T - W * (W - 1) / 2);
    return 2.0 * (double)q->numel * T;
}

/* Per logit, not per (scalar) output. */
static double flops_xent(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out) {
    (void)prim, (void)iattr;
    const FlopsOperand *logits = input(in, nin, 0);
    return logits ? 5.0 * (double)logits->numel : out;
}

/* The projection's GEMM and, for dloss = 1, the two of its gradients
 * (3 x 2 D per logit: hostk_linxent.c computes them in the forward), and
 * cross_entropy's 5 per logit. */
static double flops_linxent(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out) {
    (void)prim;
    const FlopsOperand *x = input(in, nin, 0), *w = input(in, nin, 1);
    if (!x || !w || x->rank < 1 || w->rank != 2) return out;
    bool tb = iattr && iattr[IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B];
    double D = (double)x->dims[x->rank - 1], V = (double)(tb ? w->dims[0] : w->dims[1]);
    return (6 * D + 5) * ((double)x->numel / (D ? D : 1)) * V;
}

/* Mixture of experts: moe_expert is a GEMM of each routed row (k per token)
 * with its expert's [O, I] weight, 2 I per output element, so the count is
 * of the active experts only; the routing, the combination and the load
 * statistics are a few operations an element of their largest operand. */
static double flops_moe(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out) {
    (void)iattr;
    const FlopsOperand *a = input(in, nin, 0), *w = input(in, nin, 2);
    if (prim == PRIM_MOE_EXPERT) return w && w->rank == 3 ? 2 * out * (double)w->dims[2] : out;
    double n = a && (double)a->numel > out ? (double)a->numel : out;
    return 5 * n;
}

/* gated_mlp: its three GEMMs, 2 D I per row each, and a few operations
 * an element of the intermediates and of the norm. */
static double flops_gmlp(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out) {
    (void)prim, (void)iattr;
    const FlopsOperand *x = input(in, nin, 0), *wg = input(in, nin, 2);
    if (!x || !wg || x->rank < 1 || wg->rank != 2) return out;
    double D = (double)x->dims[x->rank - 1], I = (double)wg->dims[1], R = (double)x->numel / (D ? D : 1);
    return R * (6 * D * I + 4 * I + 5 * D);
}

#define flops_embedding flops_elementwise
#define flops_linear flops_gemm
#define flops_matmul flops_gemm
#define flops_binary flops_elementwise
#define flops_norm flops_elementwise
#define flops_act flops_elementwise
#define flops_rope flops_elementwise
#define flops_split flops_elementwise
#define flops_arange flops_elementwise
#define flops_scale flops_elementwise

static const FlopsRule rules[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = flops_##family,
#include "prim.def"
#undef PRIM
};

double flops_forward(int prim, const int64_t *iattr, const FlopsOperand *in, int nin, double out) {
    return (unsigned)prim < PRIM_COUNT ? rules[prim](prim, iattr, in, nin, out) : 5 * out;
}
