/* A small training graph built by hand (no front end needed) for the
 * planner, plan, verify and cost suites: an embedding, `layers` MLP blocks
 * with residuals (one repeat instance each) and a cross-entropy head; then
 * autodiff appends backward, recompute and Adam. */
#ifndef ZINF_TEST_PLAN_FIXTURE_H
#define ZINF_TEST_PLAN_FIXTURE_H
#include <string.h>
#include "autodiff.h"
#include "graph.h"
#include "graph_fixture.h"

typedef struct FixtureShape {
    int64_t batch, seq, vocab, hidden, layers;
    DType dtype;
    int64_t checkpoint_every;
    double grad_clip;
} FixtureShape;

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
    int tgt, wte;
    int x = fx_embed_inputs(g, B, T, V, D, s.dtype, "%x0", &tgt, &wte);
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
    fx_loss(g, logits, tgt);
    return ad_build(g, d);
}

static FixtureShape fx_small(void) {
    return (FixtureShape){.batch = 2, .seq = 16, .vocab = 256, .hidden = 64, .layers = 2, .dtype = DT_BF16, .checkpoint_every = 1};
}
#endif
