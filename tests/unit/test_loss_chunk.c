/* loss_chunk: the chunked loss's graph rewrite (compiler/loss_chunk.h).
 * The pattern is found for a linear head and for a tied matmul head
 * (transpose_b), and not where the logits feed anything else or the head
 * has a bias; the rewrite leaves one linear_cross_entropy op on x, w and
 * the targets that autodiff differentiates into dx and dw; the chunk rows
 * keep their scratch within 1/64 of GPU memory; the workspace the planner
 * keeps free is the one the host kernel asks for; and the rewritten graph
 * plans. */
#include <check.h>
#include <stdlib.h>
#include "arena.h"
#include "diag.h"
#include "hostk.h"
#include "loss_chunk.h"
#include "autodiff.h"
#include "graph.h"
#include "graph_fixture.h"
#include "planner.h"
#include "target.h"
#include <string.h>

/* The fixture's forward graph, its head a linear (or, tied, a matmul of
 * wte transposed); extra: the logits also feed an add (not the pattern). */
static void forward(Graph *g, Arena *a, bool tied, bool extra, bool bias, DType dt) {
    graph_init(g, a);
    g->model_name = "head";
    TrainConfig *tc = &g->train;
    *tc = (TrainConfig){.micro_batch = 2, .steps = 1, .dtype = dt, .seed = 1, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95,
                        .eps = 1e-8, .min_lr = 1e-3, .loss_scale = 1, .grad_accum = 1};
    int64_t B = 2, T = 24, V = 300, D = 32;
    int tgt, wte;
    int x = fx_embed_inputs(g, B, T, V, D, dt, "%x", &tgt, &wte);
    int logits = fx_tensor(g, "%logits", dt, 3, B, T, V, TC_ACT, -1);
    if (tied) {
        int o = fx_op(g, PRIM_MATMUL, -1, x, wte, -1, logits);
        g->ops[o].iattr[IA_MATMUL_TRANSPOSE_B] = 1;
    } else {
        int w = fx_tensor(g, "head", dt, 2, D, V, 0, TC_PARAM, -1);
        int b = bias ? fx_tensor(g, "head.b", dt, 1, V, 0, 0, TC_PARAM, -1) : -1;
        fx_op(g, PRIM_LINEAR, -1, x, w, b, logits);
    }
    int lin = logits;
    if (extra) {
        lin = fx_tensor(g, "%l2", dt, 3, B, T, V, TC_ACT, -1);
        fx_op(g, PRIM_ADD, -1, logits, logits, -1, lin);
    }
    fx_loss(g, lin, tgt);
    g->nforward = g->nbackward_end = g->nops; /* as the checker leaves it */
}

START_TEST(rewrite) {
    for (int tied = 0; tied < 2; tied++) {
        Arena a;
        arena_init(&a);
        Graph g;
        forward(&g, &a, tied, false, false, DT_F32);
        int proj, xent;
        ck_assert(loss_chunk_find(&g, &proj, &xent));
        ck_assert_int_eq(proj, 1);
        ck_assert_int_eq(xent, 2);
        int64_t R, V;
        loss_chunk_shape(&g, xent, &R, &V);
        ck_assert_int_eq(R, 48);
        ck_assert_int_eq(V, 300);
        int x = g.ops[proj].in[0], w = g.ops[proj].in[1], tg = g.ops[xent].in[1];
        Graph copy;
        ck_assert(loss_chunk_copy_graph(&g, &copy));
        ck_assert(loss_chunk_apply(&g, 5));
        ck_assert_int_eq(g.nops, 2);
        ck_assert_int_eq(g.nforward, 2);
        const GOp *f = &g.ops[1];
        ck_assert_int_eq(f->prim, PRIM_LINEAR_CROSS_ENTROPY);
        ck_assert(f->nin == 3 && f->in[0] == x && f->in[1] == w && f->in[2] == tg);
        ck_assert_int_eq(f->iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK], 5);
        ck_assert_int_eq(f->iattr[IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B], tied);
        ck_assert_int_eq(g.tensors[g.loss].producer, 1);
        ck_assert_int_eq(g.tensors[x].producer, 0);
        /* the copy is the graph as it was */
        ck_assert_int_eq(copy.nops, 3);
        ck_assert_int_eq(copy.ops[2].prim, PRIM_CROSS_ENTROPY);
        /* autodiff: the fused op's backward gives dx and dw */
        DiagSink d;
        diag_init(&d);
        ck_assert(ad_build(&g, &d));
        bool found = false;
        for (int i = g.nforward; i < g.nbackward_end; i++)
            if (g.ops[i].kind == OP_BWD && g.ops[i].prim == PRIM_LINEAR_CROSS_ENTROPY) {
                found = true;
                ck_assert(g.ops[i].out[0] >= 0 && g.ops[i].out[1] >= 0 && g.ops[i].out[1] == g.tensors[w].grad);
            }
        ck_assert(found);
        /* the workspace the planner keeps is the host kernel's */
        int64_t xd[3] = {2, 24, 32}, wd[2] = {tied ? 300 : 32, tied ? 32 : 300}, td[2] = {2, 24};
        HkTensor hx = hk_tensor(NULL, DT_F32, 3, xd), hw = hk_tensor(NULL, DT_F32, 2, wd), ht = hk_tensor(NULL, DT_I32, 2, td);
        int one = 1;
        hx.data = hw.data = ht.data = &one; /* present; the size reads shapes */
        ck_assert_uint_eq(loss_chunk_workspace_bytes(&g), hk_linear_cross_entropy_workspace_bytes(&hx, &hw, &ht, 5, tied));
        /* and the rewritten graph plans, keeping it free */
        PlannerResult r;
        ck_assert_msg(fx_plan_host(&g, &a, &d, &r), "the chunked graph does not plan");
        ck_assert(strstr(r.explain, "kept for the chunked loss's workspace"));
        plan_free(r.plan);
        diag_free(&d);
        arena_free(&a);
    }
}
END_TEST

START_TEST(bf16_workspace) {
    Arena a;
    arena_init(&a);
    Graph g;
    forward(&g, &a, true, false, false, DT_BF16);
    ck_assert(loss_chunk_apply(&g, 7));
    int64_t xd[3] = {2, 24, 32}, wd[2] = {300, 32}, td[2] = {2, 24};
    int one = 1;
    HkTensor hx = hk_tensor(&one, DT_BF16, 3, xd), hw = hk_tensor(&one, DT_BF16, 2, wd), ht = hk_tensor(&one, DT_I32, 2, td);
    ck_assert_uint_eq(loss_chunk_workspace_bytes(&g), hk_linear_cross_entropy_workspace_bytes(&hx, &hw, &ht, 7, true));
    arena_free(&a);
}
END_TEST

START_TEST(not_the_pattern) {
    Arena a;
    arena_init(&a);
    Graph g;
    int proj, xent;
    forward(&g, &a, false, true, false, DT_F32); /* the logits feed an add too */
    ck_assert(!loss_chunk_find(&g, &proj, &xent));
    ck_assert(!loss_chunk_apply(&g, 4));
    ck_assert_uint_eq(loss_chunk_workspace_bytes(&g), 0);
    forward(&g, &a, false, false, true, DT_F32); /* a biased head */
    ck_assert(!loss_chunk_find(&g, &proj, &xent));
    arena_free(&a);
}
END_TEST

START_TEST(chunk_rows) {
    Arena a;
    arena_init(&a);
    Graph g;
    forward(&g, &a, false, false, false, DT_F32);
    Target t;
    ck_assert(target_builtin("host", &t));
    t.gpu_memory = 1ull << 40; /* plenty: all 48 rows */
    ck_assert_int_eq(loss_chunk_rows(&g, &t), 48);
    t.gpu_memory = 64ull * 300 * 8 * 20; /* 20 rows' scratch in 1/64 */
    ck_assert_int_eq(loss_chunk_rows(&g, &t), 20);
    t.gpu_memory = 1000; /* not even one: one */
    ck_assert_int_eq(loss_chunk_rows(&g, &t), 1);
    arena_free(&a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("loss_chunk");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, rewrite);
    tcase_add_test(tc, bf16_workspace);
    tcase_add_test(tc, not_the_pattern);
    tcase_add_test(tc, chunk_rows);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
