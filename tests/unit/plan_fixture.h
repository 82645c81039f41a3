/* A small training graph built by hand (no front end needed) for the
 * planner, plan, verify and cost suites: an embedding, `layers` MLP blocks
 * with residuals (one repeat instance each) and a cross-entropy head; then
 * autodiff appends backward, recompute and Adam. */
#ifndef ZINF_TEST_PLAN_FIXTURE_H
#define ZINF_TEST_PLAN_FIXTURE_H
#include <string.h>
#include "autodiff.h"
#include "graph.h"

typedef struct FixtureShape {
    int64_t batch, seq, vocab, hidden, layers;
    DType dtype;
    int64_t checkpoint_every;
    double grad_clip;
} FixtureShape;

static int fx_tensor(Graph *g, const char *name, DType dt, int rank, int64_t a, int64_t b, int64_t c, TensorClass cls, int seg) {
    int64_t dims[3] = {a, b, c};
    int t = graph_add_tensor(g, name, dt, rank, dims, cls);
    g->tensors[t].segment = seg;
    if (cls == TC_PARAM) {
        g->tensors[t].init = INIT_NORMAL;
        g->tensors[t].init_std = 0.02;
    }
    return t;
}

static int fx_op(Graph *g, PrimId prim, int seg, int a, int b, int c, int out) {
    GOp o;
    memset(&o, 0, sizeof o);
    o.kind = OP_FWD;
    o.prim = prim;
    o.segment = seg;
    o.fwd = -1;
    o.scope = "";
    o.span = SPAN_NONE;
    for (int i = 0; i < GRAPH_MAX_IN; i++) o.in[i] = -1;
    for (int i = 0; i < GRAPH_MAX_OUT; i++) o.out[i] = -1;
    o.in[0] = a;
    o.in[1] = b;
    o.in[2] = c;
    o.nin = c >= 0 ? 3 : b >= 0 ? 2 : 1;
    o.out[0] = out;
    o.nout = 1;
    return graph_add_op(g, &o);
}

/* Builds the forward graph and runs autodiff; false if autodiff fails. */
static bool fx_build(Graph *g, Arena *a, DiagSink *d, FixtureShape s) {
    graph_init(g, a);
    g->model_name = "mlp-fixture";
    TrainConfig *tc = &g->train;
    tc->micro_batch = s.batch;
    tc->steps = 10;
    tc->dtype = s.dtype;
    tc->seed = 1;
    tc->lr = 1e-3;
    tc->beta1 = 0.9;
    tc->beta2 = 0.95;
    tc->eps = 1e-8;
    tc->weight_decay = 0.1;
    tc->min_lr = 1e-3;
    tc->grad_clip = s.grad_clip;
    tc->loss_scale = 1;
    tc->checkpoint_every = s.checkpoint_every;
    tc->grad_accum = 1;
    int64_t B = s.batch, T = s.seq, V = s.vocab, D = s.hidden;
    int tok = fx_tensor(g, "tokens", DT_I32, 2, B, T, 0, TC_INPUT, -1);
    int tgt = fx_tensor(g, "targets", DT_I32, 2, B, T, 0, TC_INPUT, -1);
    g->inputs[0] = tok;
    g->inputs[1] = tgt;
    g->ninputs = 2;
    int wte = fx_tensor(g, "wte", s.dtype, 2, V, D, 0, TC_PARAM, -1);
    int x = fx_tensor(g, "%x0", s.dtype, 3, B, T, D, TC_ACT, -1);
    fx_op(g, PRIM_EMBEDDING, -1, wte, tok, -1, x);
    for (int l = 0; l < s.layers; l++) {
        int w1 = fx_tensor(g, arena_printf(a, "block.%d.mlp.w1", l), s.dtype, 2, D, 4 * D, 0, TC_PARAM, l);
        int b1 = fx_tensor(g, arena_printf(a, "block.%d.mlp.b1", l), s.dtype, 1, 4 * D, 0, 0, TC_PARAM, l);
        int w2 = fx_tensor(g, arena_printf(a, "block.%d.mlp.w2", l), s.dtype, 2, 4 * D, D, 0, TC_PARAM, l);
        int b2 = fx_tensor(g, arena_printf(a, "block.%d.mlp.b2", l), s.dtype, 1, D, 0, 0, TC_PARAM, l);
        int h = fx_tensor(g, arena_printf(a, "%%h%d", l), s.dtype, 3, B, T, 4 * D, TC_ACT, l);
        int hg = fx_tensor(g, arena_printf(a, "%%g%d", l), s.dtype, 3, B, T, 4 * D, TC_ACT, l);
        int y = fx_tensor(g, arena_printf(a, "%%y%d", l), s.dtype, 3, B, T, D, TC_ACT, l);
        int xn = fx_tensor(g, arena_printf(a, "%%x%d", l + 1), s.dtype, 3, B, T, D, TC_ACT, l);
        fx_op(g, PRIM_LINEAR, l, x, w1, b1, h);
        fx_op(g, PRIM_GELU, l, h, -1, -1, hg);
        fx_op(g, PRIM_LINEAR, l, hg, w2, b2, y);
        fx_op(g, PRIM_ADD, l, x, y, -1, xn);
        x = xn;
    }
    g->nsegments = (int)s.layers;
    int wout = fx_tensor(g, "head.w", s.dtype, 2, D, V, 0, TC_PARAM, -1);
    int logits = fx_tensor(g, "%logits", s.dtype, 3, B, T, V, TC_ACT, -1);
    fx_op(g, PRIM_LINEAR, -1, x, wout, -1, logits);
    int loss = fx_tensor(g, "%loss", DT_F32, 0, 0, 0, 0, TC_ACT, -1);
    fx_op(g, PRIM_CROSS_ENTROPY, -1, logits, tgt, -1, loss);
    g->loss = loss;
    return ad_build(g, d);
}

static FixtureShape fx_small(void) {
    return (FixtureShape){.batch = 2, .seq = 16, .vocab = 256, .hidden = 64, .layers = 2, .dtype = DT_BF16, .checkpoint_every = 1};
}
#endif
