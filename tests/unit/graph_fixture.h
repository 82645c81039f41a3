/* What a unit test builds a training graph from by hand (no front end):
 * tensors, forward ops, the token inputs with their embedding and the
 * loss; and planning it on the host. plan_fixture.h, test_loss_chunk.c and test_mlp_tile.c build their
 * graphs from these. Static inline: a suite that needs only some of them
 * compiles without unused-function warnings. */
#ifndef ZINF_TEST_GRAPH_FIXTURE_H
#define ZINF_TEST_GRAPH_FIXTURE_H
#include "graph.h"
#include "planner.h"
#include "target.h"

/* A tensor of segment seg (-1: none); a parameter is initialised N(0, 0.02). */
static inline int fx_tensor(Graph *g, const char *name, DType dt, int rank, int64_t a, int64_t b, int64_t c,
                            TensorClass cls, int seg) {
    int64_t dims[3] = {a, b, c};
    int t = graph_add_tensor(g, name, dt, rank, dims, cls);
    g->tensors[t].segment = seg;
    if (cls == TC_PARAM) {
        g->tensors[t].init = INIT_NORMAL;
        g->tensors[t].init_std = 0.02;
    }
    return t;
}

/* out = prim(a[, b[, c]]) (an operand -1 is absent, and so are those after it). */
static inline int fx_op(Graph *g, PrimId prim, int seg, int a, int b, int c, int out) {
    GOp o = graph_op_blank(OP_FWD);
    o.prim = prim;
    o.segment = seg;
    o.in[0] = a;
    o.in[1] = b;
    o.in[2] = c;
    o.nin = c >= 0 ? 3 : b >= 0 ? 2 : 1;
    o.out[0] = out;
    o.nout = 1;
    return graph_add_op(g, &o);
}

/* The graph's inputs, the tokens and the targets [B, T] (*tgt), and x
 * [B, T, D] of dtype dt, named xname, the embedding of the tokens in wte
 * [V, D] (*wte): returns x. */
static inline int fx_embed_inputs(Graph *g, int64_t B, int64_t T, int64_t V, int64_t D, DType dt, const char *xname,
                                  int *tgt, int *wte) {
    int tok = fx_tensor(g, "tokens", DT_I32, 2, B, T, 0, TC_INPUT, -1);
    *tgt = fx_tensor(g, "targets", DT_I32, 2, B, T, 0, TC_INPUT, -1);
    g->inputs[0] = tok, g->inputs[1] = *tgt, g->ninputs = 2;
    *wte = fx_tensor(g, "wte", dt, 2, V, D, 0, TC_PARAM, -1);
    int x = fx_tensor(g, xname, dt, 3, B, T, D, TC_ACT, -1);
    fx_op(g, PRIM_EMBEDDING, -1, *wte, tok, -1, x);
    return x;
}

/* The graph's loss: cross_entropy(logits, tgt), an f32 scalar. */
static inline int fx_loss(Graph *g, int logits, int tgt) {
    int loss = fx_tensor(g, "%loss", DT_F32, 0, 0, 0, 0, TC_ACT, -1);
    fx_op(g, PRIM_CROSS_ENTROPY, -1, logits, tgt, -1, loss);
    g->loss = loss;
    return loss;
}

/* Plans g on the built-in host target, one rank, into r (false: it does not plan). */
static inline bool fx_plan_host(Graph *g, Arena *a, DiagSink *d, PlannerResult *r) {
    Target t;
    if (!target_builtin("host", &t)) return false;
    PlannerOptions po;
    planner_options_default(&po);
    po.ranks = 1;
    return planner_run(g, &t, &po, a, d, r);
}

#endif
