#include "prim_flops.h"

/* A family's count from the op and its first output's element count
 * (1 where it has none). */
typedef double (*FlopsRule)(const Graph *g, const GOp *op, double out);

/* Element-wise work: a few operations an output element. */
static double flops_elementwise(const Graph *g, const GOp *op, double out) {
    (void)g, (void)op;
    return 5 * out;
}

/* 2 K per output element, K the weight's inner dimension. */
static double flops_gemm(const Graph *g, const GOp *op, double out) {
    int w = op->in[1];
    if (w < 0 || op->in[0] < 0) return out;
    const GTensor *wt = &g->tensors[w];
    double k = wt->rank >= 2 ? (double)(op->prim == PRIM_MATMUL && op->iattr[IA_MATMUL_TRANSPOSE_B] ? wt->dims[1] : wt->dims[0]) : 1;
    return 2 * out * k;
}

static double flops_attention(const Graph *g, const GOp *op, double out) {
    const GTensor *q = op->in[0] >= 0 ? &g->tensors[op->in[0]] : NULL;
    if (!q || q->rank < 3) return out;
    return 2.0 * (double)q->numel * (double)q->dims[1]; /* causal: half of 4*B*T*T*D */
}

/* Per logit, not per (scalar) output. */
static double flops_xent(const Graph *g, const GOp *op, double out) {
    return op->in[0] >= 0 ? 5.0 * (double)g->tensors[op->in[0]].numel : out;
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

double prim_flops(const Graph *g, const GOp *op) {
    const GTensor *o = op->nout > 0 && op->out[0] >= 0 ? &g->tensors[op->out[0]] : NULL;
    double out = o ? (double)o->numel : 1;
    if (op->kind == OP_BWD && op->fwd >= 0 && op->fwd < g->nops) {
        const GOp *f = &g->ops[op->fwd];
        return 2 * prim_flops(g, f);
    }
    return (unsigned)op->prim < PRIM_COUNT ? rules[op->prim](g, op, out) : 5 * out;
}
