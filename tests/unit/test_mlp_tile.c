/* mlp_tile: the tiled MLP's graph rewrite (compiler/mlp_tile.h) and its
 * host kernels (runtime/hostk/hostk_gmlp.c). gated_mlp's forward and
 * backward equal the unfused ops' (rmsnorm, linear, silu or gelu, linear,
 * mul, linear run one after another by the same host kernels) within 1e-6
 * relative in f32, for tiles that divide the rows and tiles that do not,
 * with a gain offset and with gelu; in bf16 within bf16 rounding. The
 * rewrite finds every block of a two-block model, not a block with a bias
 * or whose intermediate feeds anything else, and leaves a graph that
 * autodiff differentiates; the tile rows keep their scratch within 1/64 of
 * GPU memory; the workspace the planner keeps free is the one the host
 * kernel asks for; the tiled graph plans with a smaller device arena. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "arena.h"
#include "autodiff.h"
#include "diag.h"
#include "graph.h"
#include "hostk.h"
#include "mlp_tile.h"
#include "planner.h"
#include "target.h"

/* ---- the kernels against the unfused ops ---- */

static uint64_t rng = 12345;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

typedef struct Buf {
    HkTensor t;
} Buf;

static HkTensor mk(DType dt, int rank, int64_t a, int64_t b, int64_t c, float scale) {
    int64_t d[3] = {a, b, c};
    HkTensor t = hk_tensor(NULL, dt, rank, d);
    t.data = calloc((size_t)hk_numel(&t), hk_dtype_size(dt));
    for (int64_t i = 0; scale != 0 && i < hk_numel(&t); i++) hk_set(&t, i, scale * frand());
    return t;
}

static HkTensor like(const HkTensor *s) {
    HkTensor t = *s;
    t.data = calloc((size_t)hk_numel(s), hk_dtype_size(s->dtype));
    return t;
}

static HkTensor none(void) {
    HkTensor t;
    memset(&t, 0, sizeof t);
    return t;
}

/* One op of the unfused chain: its inputs, output, workspace (kept to its backward). */
typedef struct Step {
    PrimId p;
    HkTensor in[2];
    int nin;
    HkTensor *out;
    void *ws;
    size_t wsb;
} Step;

static void run_fwd(Step *s, const int64_t *ia, const double *fa) {
    s->wsb = hk_workspace_bytes(s->p, s->in, s->nin, s->out, 1, ia);
    s->ws = s->wsb ? calloc(1, s->wsb) : NULL;
    ck_assert_int_eq(hk_run_fwd(s->p, s->in, s->nin, s->out, 1, ia, fa, s->ws, s->wsb), HK_OK);
}

static void run_bwd(Step *s, const HkTensor *dy, HkTensor *d0, HkTensor *d1, const int64_t *ia, const double *fa) {
    HkTensor din[2] = {d0 ? *d0 : none(), d1 ? *d1 : none()};
    ck_assert_int_eq(hk_run_bwd(s->p, s->in, s->nin, s->out, dy, 1, din, ia, fa, s->ws, s->wsb), HK_OK);
    free(s->ws);
}

/* max |a - b| / max |b| */
static double rel(const HkTensor *a, const HkTensor *b) {
    double m = 0, e = 0;
    for (int64_t i = 0; i < hk_numel(b); i++) {
        double x = hk_get(a, i), y = hk_get(b, i);
        if (fabs(y) > m) m = fabs(y);
        if (fabs(x - y) > e) e = fabs(x - y);
    }
    return m > 0 ? e / m : e;
}

static void check_kernels(DType dt, int64_t act, double offset, double tol) {
    int64_t B = 2, T = 10, D = 12, I = 20, R = B * T;
    HkTensor x = mk(dt, 3, B, T, D, 1), g = mk(dt, 1, D, 0, 0, 0.5f), wg = mk(dt, 2, D, I, 0, 0.3f), wu = mk(dt, 2, D, I, 0, 0.3f),
             wd = mk(dt, 2, I, D, 0, 0.3f), dy = mk(dt, 3, B, T, D, 1);
    HkTensor n = mk(dt, 3, B, T, D, 0), a = mk(dt, 3, B, T, I, 0), s = like(&a), u = like(&a), h = like(&a), y = like(&x);
    int64_t ia[PLAN_MAX_IATTR] = {0};
    double fa[PLAN_MAX_FATTR] = {0};
    ia[IA_RMSNORM_HEADS] = 1;
    fa[FA_RMSNORM_EPS] = 1e-5;
    fa[FA_RMSNORM_OFFSET] = offset;
    PrimId ap = act == GATED_MLP_GELU ? PRIM_GELU : PRIM_SILU;
    Step st[6] = {{PRIM_RMSNORM, {x, g}, 2, &n, NULL, 0}, {PRIM_LINEAR, {n, wg}, 2, &a, NULL, 0}, {ap, {a, none()}, 1, &s, NULL, 0},
                  {PRIM_LINEAR, {n, wu}, 2, &u, NULL, 0},  {PRIM_MUL, {s, u}, 2, &h, NULL, 0},       {PRIM_LINEAR, {h, wd}, 2, &y, NULL, 0}};
    for (int k = 0; k < 6; k++) run_fwd(&st[k], k == 0 ? ia : NULL, k == 0 ? fa : NULL);
    HkTensor dx = like(&x), dg = like(&g), dwg = like(&wg), dwu = like(&wu), dwd = like(&wd), dn = like(&n), da = like(&a),
             ds = like(&a), du = like(&a), dh = like(&a);
    run_bwd(&st[5], &dy, &dh, &dwd, NULL, NULL);
    run_bwd(&st[4], &dh, &ds, &du, NULL, NULL);
    run_bwd(&st[3], &du, &dn, &dwu, NULL, NULL);
    run_bwd(&st[2], &ds, &da, NULL, NULL, NULL);
    run_bwd(&st[1], &da, &dn, &dwg, NULL, NULL);
    run_bwd(&st[0], &dn, &dx, &dg, ia, fa);

    int64_t tiles[] = {0, 1, 4, 7, 20, 64}; /* all, one row, dividing 20, not dividing, exactly, more than the rows */
    for (size_t k = 0; k < sizeof tiles / sizeof *tiles; k++) {
        int64_t mia[PLAN_MAX_IATTR] = {0};
        double mfa[PLAN_MAX_FATTR] = {0};
        mia[IA_GATED_MLP_ACT] = act;
        mia[IA_GATED_MLP_ROWS] = tiles[k];
        mfa[FA_GATED_MLP_EPS] = 1e-5;
        mfa[FA_GATED_MLP_OFFSET] = offset;
        HkTensor in[5] = {x, g, wg, wu, wd}, y2 = like(&x);
        size_t wsb = hk_workspace_bytes(PRIM_GATED_MLP, in, 5, &y2, 1, mia);
        ck_assert_uint_gt(wsb, 0);
        void *ws = calloc(1, wsb);
        ck_assert_int_eq(hk_run_fwd(PRIM_GATED_MLP, in, 5, &y2, 1, mia, mfa, ws, wsb), HK_OK);
        HkTensor din[5] = {like(&x), like(&g), like(&wg), like(&wu), like(&wd)};
        ck_assert_int_eq(hk_run_bwd(PRIM_GATED_MLP, in, 5, &y2, &dy, 1, din, mia, mfa, ws, wsb), HK_OK);
        const HkTensor *want[6] = {&y, &dx, &dg, &dwg, &dwu, &dwd}, *got[6] = {&y2, &din[0], &din[1], &din[2], &din[3], &din[4]};
        for (int j = 0; j < 6; j++) {
            double e = rel(got[j], want[j]);
            ck_assert_msg(e <= tol, "%s act %d offset %g rows %d: %s differs from the unfused ops by %g relative",
                          dt == DT_F32 ? "f32" : "bf16", (int)act, offset, (int)tiles[k],
                          (const char *[]){"y", "dx", "dg", "dw_gate", "dw_up", "dw_down"}[j], e);
        }
        /* a smaller workspace than asked for is refused, not overrun */
        ck_assert_int_eq(hk_run_fwd(PRIM_GATED_MLP, in, 5, &y2, 1, mia, mfa, ws, wsb - 1), HK_ERR_WORKSPACE);
        free(ws);
        free(y2.data);
        for (int j = 0; j < 5; j++) free(din[j].data);
    }
    (void)R;
    HkTensor all[] = {x, g, wg, wu, wd, dy, n, a, s, u, h, y, dx, dg, dwg, dwu, dwd, dn, da, ds, du, dh};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) free(all[k].data);
}

START_TEST(kernels_f32) {
    check_kernels(DT_F32, GATED_MLP_SILU, 0, 1e-6);
    check_kernels(DT_F32, GATED_MLP_GELU, 1.0, 1e-6);
}
END_TEST

START_TEST(kernels_bf16) {
    /* each step rounds as the unfused op's output does; the sums' order differs */
    check_kernels(DT_BF16, GATED_MLP_SILU, 0, 2e-2);
}
END_TEST

/* ---- the rewrite ---- */

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
    GOp o = graph_op_blank(OP_FWD);
    o.prim = prim;
    o.segment = seg;
    o.in[0] = a;
    o.in[1] = b;
    o.in[2] = c;
    o.nin = c >= 0 ? 3 : b >= 0 ? 2 : 1;
    o.out[0] = out;
    o.nout = 1;
    if (prim == PRIM_RMSNORM) o.fattr[FA_RMSNORM_EPS] = 1e-5;
    return graph_add_op(g, &o);
}

enum { T_ = 24, B_ = 2, D_ = 32, I_ = 96, V_ = 64 };

/* Two blocks x = x + mlp(rmsnorm(x)) (segments 0 and 1), then a linear
 * head. bias: the second block's up linear has a bias; leak: the first
 * block's h also feeds the residual. */
static void forward(Graph *g, Arena *a, DType dt, bool bias, bool leak) {
    graph_init(g, a);
    g->model_name = "mlp";
    g->train = (TrainConfig){.micro_batch = B_, .steps = 1, .dtype = dt, .seed = 1, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95,
                             .eps = 1e-8, .min_lr = 1e-3, .loss_scale = 1, .grad_accum = 1, .checkpoint_every = 1};
    int tok = fx_tensor(g, "tokens", DT_I32, 2, B_, T_, 0, TC_INPUT, -1);
    int tgt = fx_tensor(g, "targets", DT_I32, 2, B_, T_, 0, TC_INPUT, -1);
    g->inputs[0] = tok, g->inputs[1] = tgt, g->ninputs = 2;
    int wte = fx_tensor(g, "wte", dt, 2, V_, D_, 0, TC_PARAM, -1);
    int x = fx_tensor(g, "%x", dt, 3, B_, T_, D_, TC_ACT, -1);
    fx_op(g, PRIM_EMBEDDING, -1, wte, tok, -1, x);
    for (int s = 0; s < 2; s++) {
        char nm[5][32];
        const char *pn[5] = {"g", "w1", "w3", "w2", "b3"};
        for (int k = 0; k < 5; k++) snprintf(nm[k], sizeof nm[k], "b.%d.%s", s, pn[k]);
        int gn = fx_tensor(g, arena_strdup(a, nm[0]), dt, 1, D_, 0, 0, TC_PARAM, s);
        int w1 = fx_tensor(g, arena_strdup(a, nm[1]), dt, 2, D_, I_, 0, TC_PARAM, s);
        int w3 = fx_tensor(g, arena_strdup(a, nm[2]), dt, 2, D_, I_, 0, TC_PARAM, s);
        int w2 = fx_tensor(g, arena_strdup(a, nm[3]), dt, 2, I_, D_, 0, TC_PARAM, s);
        int b3 = bias && s == 1 ? fx_tensor(g, arena_strdup(a, nm[4]), dt, 1, I_, 0, 0, TC_PARAM, s) : -1;
        int n = fx_tensor(g, "%n", dt, 3, B_, T_, D_, TC_ACT, s), av = fx_tensor(g, "%a", dt, 3, B_, T_, I_, TC_ACT, s),
            sv = fx_tensor(g, "%s", dt, 3, B_, T_, I_, TC_ACT, s), u = fx_tensor(g, "%u", dt, 3, B_, T_, I_, TC_ACT, s),
            h = fx_tensor(g, "%h", dt, 3, B_, T_, I_, TC_ACT, s), y = fx_tensor(g, "%y", dt, 3, B_, T_, D_, TC_ACT, s),
            x2 = fx_tensor(g, "%x2", dt, 3, B_, T_, D_, TC_ACT, s);
        fx_op(g, PRIM_RMSNORM, s, x, gn, -1, n);
        fx_op(g, PRIM_LINEAR, s, n, w1, -1, av);
        fx_op(g, PRIM_SILU, s, av, -1, -1, sv);
        fx_op(g, PRIM_LINEAR, s, n, w3, b3, u);
        fx_op(g, PRIM_MUL, s, sv, u, -1, h);
        fx_op(g, PRIM_LINEAR, s, h, w2, -1, y);
        fx_op(g, PRIM_ADD, s, x, y, -1, x2);
        x = x2;
        if (leak && s == 0) {
            int w4 = fx_tensor(g, "b.0.w4", dt, 2, I_, D_, 0, TC_PARAM, s), z = fx_tensor(g, "%z", dt, 3, B_, T_, D_, TC_ACT, s),
                x3 = fx_tensor(g, "%x3", dt, 3, B_, T_, D_, TC_ACT, s);
            fx_op(g, PRIM_LINEAR, s, h, w4, -1, z);
            fx_op(g, PRIM_ADD, s, x, z, -1, x3);
            x = x3;
        }
    }
    int head = fx_tensor(g, "head", dt, 2, D_, V_, 0, TC_PARAM, -1);
    int logits = fx_tensor(g, "%logits", dt, 3, B_, T_, V_, TC_ACT, -1);
    fx_op(g, PRIM_LINEAR, -1, x, head, -1, logits);
    int loss = fx_tensor(g, "%loss", DT_F32, 0, 0, 0, 0, TC_ACT, -1);
    fx_op(g, PRIM_CROSS_ENTROPY, -1, logits, tgt, -1, loss);
    g->loss = loss;
    g->nsegments = 2;
    g->nforward = g->nbackward_end = g->nops; /* as the checker leaves it */
}

START_TEST(rewrite) {
    Arena a;
    arena_init(&a);
    Graph g;
    forward(&g, &a, DT_F32, false, false);
    ck_assert_int_eq(mlp_tile_find(&g, NULL, 0), 2);
    int64_t rows, D, I;
    ck_assert(mlp_tile_shape(&g, &rows, &D, &I));
    ck_assert_int_eq(rows, B_ * T_);
    ck_assert_int_eq(D, D_);
    ck_assert_int_eq(I, I_);
    int before = g.nops;
    ck_assert_uint_eq(mlp_tile_workspace_bytes(&g), 0);
    ck_assert_int_eq(mlp_tile_apply(&g, 7), 2);
    ck_assert_int_eq(g.nops, before - 10);
    ck_assert_int_eq(g.nforward, g.nops);
    ck_assert_int_eq(mlp_tile_find(&g, NULL, 0), 0);
    int nm = 0;
    for (int i = 0; i < g.nops; i++) {
        const GOp *o = &g.ops[i];
        ck_assert_int_eq(g.tensors[o->out[0]].producer, i);
        if (o->prim != PRIM_GATED_MLP) continue;
        nm++;
        ck_assert_int_eq(o->nin, 5);
        ck_assert_int_eq(o->iattr[IA_GATED_MLP_ROWS], 7);
        ck_assert_int_eq(o->iattr[IA_GATED_MLP_ACT], GATED_MLP_SILU);
        ck_assert(o->fattr[FA_GATED_MLP_EPS] == 1e-5);
        ck_assert_int_eq(o->segment, nm - 1);
        const char *want[5] = {NULL, "g", "w1", "w3", "w2"};
        for (int k = 1; k < 5; k++) {
            const char *name = g.tensors[o->in[k]].name;
            ck_assert_str_eq(name + strlen(name) - strlen(want[k]), want[k]);
        }
        ck_assert_int_eq(g.ops[g.tensors[o->in[0]].producer].prim, nm == 1 ? PRIM_EMBEDDING : PRIM_ADD);
    }
    ck_assert_int_eq(nm, 2);
    /* the planner's workspace is the host kernel's */
    const GOp *o = NULL;
    for (int i = 0; i < g.nops && !o; i++)
        if (g.ops[i].prim == PRIM_GATED_MLP) o = &g.ops[i];
    HkTensor in[5], out;
    for (int k = 0; k < 5; k++) in[k] = hk_tensor(&in, g.tensors[o->in[k]].dtype, g.tensors[o->in[k]].rank, g.tensors[o->in[k]].dims);
    out = hk_tensor(&out, g.tensors[o->out[0]].dtype, g.tensors[o->out[0]].rank, g.tensors[o->out[0]].dims);
    ck_assert_uint_eq(mlp_tile_workspace_bytes(&g), hk_workspace_bytes(PRIM_GATED_MLP, in, 5, &out, 1, o->iattr));
    DiagSink d;
    diag_init(&d);
    ck_assert(ad_build(&g, &d));
    ck_assert_int_eq(d.errors, 0);
    /* the backward of each gated_mlp wants every input's gradient */
    int nb = 0;
    for (int i = g.nforward; i < g.nbackward_end; i++)
        if (g.ops[i].kind == OP_BWD && g.ops[i].prim == PRIM_GATED_MLP) {
            nb++;
            for (int k = 0; k < 5; k++) ck_assert_int_ge(g.ops[i].out[k], 0);
        }
    ck_assert_int_eq(nb, 2);
    diag_free(&d);
    arena_free(&a);
}
END_TEST

START_TEST(bf16_workspace) {
    Arena a;
    arena_init(&a);
    Graph g;
    forward(&g, &a, DT_BF16, false, false);
    ck_assert_int_eq(mlp_tile_apply(&g, 5), 2);
    const GOp *o = NULL;
    for (int i = 0; i < g.nops && !o; i++)
        if (g.ops[i].prim == PRIM_GATED_MLP) o = &g.ops[i];
    HkTensor in[5], out;
    for (int k = 0; k < 5; k++) in[k] = hk_tensor(&in, g.tensors[o->in[k]].dtype, g.tensors[o->in[k]].rank, g.tensors[o->in[k]].dims);
    out = hk_tensor(&out, g.tensors[o->out[0]].dtype, g.tensors[o->out[0]].rank, g.tensors[o->out[0]].dims);
    ck_assert_uint_eq(mlp_tile_workspace_bytes(&g), hk_workspace_bytes(PRIM_GATED_MLP, in, 5, &out, 1, o->iattr));
    arena_free(&a);
}
END_TEST

START_TEST(not_the_pattern) {
    Arena a;
    arena_init(&a);
    Graph g;
    forward(&g, &a, DT_F32, true, false); /* the second block has a bias */
    ck_assert_int_eq(mlp_tile_find(&g, NULL, 0), 1);
    forward(&g, &a, DT_F32, false, true); /* the first block's h feeds another linear */
    ck_assert_int_eq(mlp_tile_find(&g, NULL, 0), 1);
    ck_assert_int_eq(mlp_tile_apply(&g, 4), 1);
    arena_free(&a);
}
END_TEST

START_TEST(tile_rows) {
    Arena a;
    arena_init(&a);
    Graph g;
    forward(&g, &a, DT_F32, false, false);
    Target t;
    ck_assert(target_builtin("host", &t));
    t.gpu_memory = 1ull << 40; /* plenty: all 48 rows */
    ck_assert_int_eq(mlp_tile_rows(&g, &t), B_ * T_);
    /* a row's scratch: n and dn [D], eight [I] in f32 (3328 bytes), none of the linears' (all f32), and the
     * norm's rstd and fp64 partial sums (20 bytes): 1/64 of this memory holds 19 rows, not the 20 of the first part */
    t.gpu_memory = 64ull * 20 * (2 * D_ + 8 * I_) * 4;
    ck_assert_int_eq(mlp_tile_rows(&g, &t), 19);
    t.gpu_memory = 1000; /* not even one: one */
    ck_assert_int_eq(mlp_tile_rows(&g, &t), 1);
    arena_free(&a);
}
END_TEST

/* The tiled graph plans, its device arena smaller than the graph as written by
 * at least the intermediates the recompute of a block made. */
START_TEST(plans_smaller) {
    uint64_t peak[2];
    for (int tiled = 0; tiled < 2; tiled++) {
        Arena a;
        arena_init(&a);
        Graph g;
        forward(&g, &a, DT_F32, false, false);
        if (tiled) ck_assert_int_eq(mlp_tile_apply(&g, 8), 2);
        DiagSink d;
        diag_init(&d);
        ck_assert(ad_build(&g, &d));
        Target t;
        ck_assert(target_builtin("host", &t));
        PlannerOptions po;
        planner_options_default(&po);
        po.ranks = 1;
        PlannerResult r;
        ck_assert_msg(planner_run(&g, &t, &po, &a, &d, &r), "the %s graph does not plan", tiled ? "tiled" : "written");
        peak[tiled] = r.plan->arenas[ARENA_GPU].size;
        plan_free(r.plan);
        diag_free(&d);
        arena_free(&a);
    }
    /* a, s, u, h [48, 96] f32 of one block at least */
    ck_assert_msg(peak[1] + 4ull * B_ * T_ * I_ * 4 <= peak[0], "tiled %llu, as written %llu", (unsigned long long)peak[1],
                  (unsigned long long)peak[0]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("mlp_tile");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, kernels_f32);
    tcase_add_test(tc, kernels_bf16);
    tcase_add_test(tc, rewrite);
    tcase_add_test(tc, bf16_workspace);
    tcase_add_test(tc, not_the_pattern);
    tcase_add_test(tc, tile_rows);
    tcase_add_test(tc, plans_smaller);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
