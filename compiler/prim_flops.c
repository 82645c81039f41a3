#include "prim_flops.h"
#include "flops.h"

double prim_flops(const Graph *g, const GOp *op) {
    const GTensor *o = op->nout > 0 && op->out[0] >= 0 ? &g->tensors[op->out[0]] : NULL;
    double out = o ? (double)o->numel : 1;
    if (op->kind == OP_BWD && op->fwd >= 0 && op->fwd < g->nops) {
        const GOp *f = &g->ops[op->fwd];
        /* linear_cross_entropy's forward computes the gradients for dloss = 1 (flops_linxent
         * counts them); its backward scales them into dx and dw */
        if (f->prim == PRIM_LINEAR_CROSS_ENTROPY && f->nin >= 2 && f->in[0] >= 0 && f->in[1] >= 0)
            return 2.0 * (double)(g->tensors[f->in[0]].numel + g->tensors[f->in[1]].numel);
        /* gated_mlp's backward recomputes its forward, tile by tile, before the gradients */
        return (f->prim == PRIM_GATED_MLP ? 3 : 2) * prim_flops(g, f);
    }
    FlopsOperand in[3] = {{0}};
    int nin = op->nin < 3 ? op->nin : 3;
    for (int i = 0; i < nin; i++)
        if (op->in[i] >= 0) {
            const GTensor *t = &g->tensors[op->in[i]];
            in[i] = (FlopsOperand){t->rank, t->dims, t->numel};
        }
    return flops_forward(op->prim, op->iattr, in, nin, out);
}
