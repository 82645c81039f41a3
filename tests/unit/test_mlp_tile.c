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
#include "cuda_gen.h"
#include "diag.h"
#include "graph.h"
#include "graph_fixture.h"
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
    double by; /* scale */
    void *ws;
    size_t wsb;
} Step;

static void run_fwd(Step *s, const int64_t *ia, const double *fa) {
    double f[PLAN_MAX_FATTR] = {0};
    if (s->p == PRIM_SCALE) f[FA_SCALE_BY] = s->by, fa = f;
    s->wsb = hk_workspace_bytes(s->p, s->in, s->nin, s->out, 1, ia);
    s->ws = s->wsb ? calloc(1, s->wsb) : NULL;
    ck_assert_int_eq(hk_run_fwd(s->p, s->in, s->nin, s->out, 1, ia, fa, s->ws, s->wsb), HK_OK);
}

static void run_bwd(Step *s, const HkTensor *dy, HkTensor *d0, HkTensor *d1, const int64_t *ia, const double *fa) {
    double f[PLAN_MAX_FATTR] = {0};
    if (s->p == PRIM_SCALE) f[FA_SCALE_BY] = s->by, fa = f;
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

/* An unfused projection v -> out, linear(v, w) (+ by * linear(linear(v, A), B) with an adapter):
 * its steps appended to st from *n; its tensors in t (base, p, q, qs) and their gradients in dt. */
typedef struct Proj {
    HkTensor w, A, B, base, p, q, qs, dw, dA, dB, dbase, dp, dq, dqs;
    double by;
    int first;
} Proj;

static void proj_steps(Step *st, int *n, Proj *pr, const HkTensor *v, HkTensor *out, bool lora) {
    pr->first = *n;
    if (!lora) {
        st[(*n)++] = (Step){PRIM_LINEAR, {*v, pr->w}, 2, out, 0, NULL, 0};
        return;
    }
    st[(*n)++] = (Step){PRIM_LINEAR, {*v, pr->w}, 2, &pr->base, 0, NULL, 0};
    st[(*n)++] = (Step){PRIM_LINEAR, {*v, pr->A}, 2, &pr->p, 0, NULL, 0};
    st[(*n)++] = (Step){PRIM_LINEAR, {pr->p, pr->B}, 2, &pr->q, 0, NULL, 0};
    st[(*n)++] = (Step){PRIM_SCALE, {pr->q, none()}, 1, &pr->qs, pr->by, NULL, 0};
    st[(*n)++] = (Step){PRIM_ADD, {pr->base, pr->qs}, 2, out, 0, NULL, 0};
}

/* The projection's backward (its steps in reverse): dout into dv (+=). */
static void proj_back(Step *st, Proj *pr, const HkTensor *dout, HkTensor *dv, bool lora) {
    if (!lora) {
        run_bwd(&st[pr->first], dout, dv, &pr->dw, NULL, NULL);
        return;
    }
    run_bwd(&st[pr->first + 4], dout, &pr->dbase, &pr->dqs, NULL, NULL);
    run_bwd(&st[pr->first + 3], &pr->dqs, &pr->dq, NULL, NULL, NULL);
    run_bwd(&st[pr->first + 2], &pr->dq, &pr->dp, &pr->dB, NULL, NULL);
    run_bwd(&st[pr->first + 1], &pr->dp, dv, &pr->dA, NULL, NULL);
    run_bwd(&st[pr->first], &pr->dbase, dv, &pr->dw, NULL, NULL);
}

static void proj_make(Proj *pr, DType dt, int64_t vin, int64_t o, int64_t rows, int64_t r, bool lora, double by) {
    memset(pr, 0, sizeof *pr);
    pr->w = mk(dt, 2, vin, o, 0, 0.3f);
    pr->dw = like(&pr->w);
    pr->by = by;
    if (!lora) return;
    pr->A = mk(dt, 2, vin, r, 0, 0.3f), pr->B = mk(dt, 2, r, o, 0, 0.3f);
    pr->dA = like(&pr->A), pr->dB = like(&pr->B);
    pr->base = mk(dt, 2, rows, o, 0, 0), pr->q = like(&pr->base), pr->qs = like(&pr->base);
    pr->dbase = like(&pr->base), pr->dq = like(&pr->base), pr->dqs = like(&pr->base);
    pr->p = mk(dt, 2, rows, r, 0, 0), pr->dp = like(&pr->p);
}

static void proj_free(Proj *pr) {
    HkTensor *t[14] = {&pr->w, &pr->A, &pr->B, &pr->base, &pr->p, &pr->q, &pr->qs, &pr->dw, &pr->dA, &pr->dB, &pr->dbase, &pr->dp, &pr->dq, &pr->dqs};
    for (int i = 0; i < 14; i++) free(t[i]->data);
}

static void check_kernels(DType dt, int64_t act, double offset, bool lora, double tol) {
    int64_t B = 2, T = 10, D = 12, I = 20, R = B * T, r = 3;
    HkTensor x = mk(dt, 2, R, D, 0, 1), g = mk(dt, 1, D, 0, 0, 0.5f), dy = mk(dt, 2, R, D, 0, 1);
    Proj pg, pu, pd;
    proj_make(&pg, dt, D, I, R, r, lora, 0.5);
    proj_make(&pu, dt, D, I, R, r, lora, 2.0);
    proj_make(&pd, dt, I, D, R, r, lora, 1.5);
    HkTensor n = mk(dt, 2, R, D, 0, 0), a = mk(dt, 2, R, I, 0, 0), s = like(&a), u = like(&a), h = like(&a), y = like(&x);
    int64_t ia[PLAN_MAX_IATTR] = {0};
    double fa[PLAN_MAX_FATTR] = {0};
    ia[IA_RMSNORM_HEADS] = 1;
    fa[FA_RMSNORM_EPS] = 1e-5;
    fa[FA_RMSNORM_OFFSET] = offset;
    PrimId ap = act == GATED_MLP_GELU ? PRIM_GELU : PRIM_SILU;
    Step st[24];
    int ns = 0;
    st[ns++] = (Step){PRIM_RMSNORM, {x, g}, 2, &n, 0, NULL, 0};
    proj_steps(st, &ns, &pg, &n, &a, lora);
    int iact = ns;
    st[ns++] = (Step){ap, {a, none()}, 1, &s, 0, NULL, 0};
    proj_steps(st, &ns, &pu, &n, &u, lora);
    int imul = ns;
    st[ns++] = (Step){PRIM_MUL, {s, u}, 2, &h, 0, NULL, 0};
    proj_steps(st, &ns, &pd, &h, &y, lora);
    for (int k = 0; k < ns; k++) run_fwd(&st[k], k == 0 ? ia : NULL, k == 0 ? fa : NULL);
    HkTensor dx = like(&x), dg = like(&g), dn = like(&n), da = like(&a), ds = like(&a), du = like(&a), dh = like(&a);
    proj_back(st, &pd, &dy, &dh, lora);
    run_bwd(&st[imul], &dh, &ds, &du, NULL, NULL);
    proj_back(st, &pu, &du, &dn, lora);
    run_bwd(&st[iact], &ds, &da, NULL, NULL, NULL);
    proj_back(st, &pg, &da, &dn, lora);
    run_bwd(&st[0], &dn, &dx, &dg, ia, fa);

    int64_t tiles[] = {0, 1, 4, 7, 20, 64}; /* all, one row, dividing 20, not dividing, exactly, more than the rows */
    int nin = lora ? 11 : 5;
    for (size_t k = 0; k < sizeof tiles / sizeof *tiles; k++) {
        int64_t mia[PLAN_MAX_IATTR] = {0};
        double mfa[PLAN_MAX_FATTR] = {0};
        mia[IA_GATED_MLP_ACT] = act;
        mia[IA_GATED_MLP_ROWS] = tiles[k];
        mfa[FA_GATED_MLP_EPS] = 1e-5;
        mfa[FA_GATED_MLP_OFFSET] = offset;
        mfa[FA_GATED_MLP_LORA_GATE] = pg.by, mfa[FA_GATED_MLP_LORA_UP] = pu.by, mfa[FA_GATED_MLP_LORA_DOWN] = pd.by;
        HkTensor in[11] = {x, g, pg.w, pu.w, pd.w, pg.A, pg.B, pu.A, pu.B, pd.A, pd.B}, y2 = like(&x);
        size_t wsb = hk_workspace_bytes(PRIM_GATED_MLP, in, nin, &y2, 1, mia);
        ck_assert_uint_gt(wsb, 0);
        void *ws = calloc(1, wsb);
        ck_assert_int_eq(hk_run_fwd(PRIM_GATED_MLP, in, nin, &y2, 1, mia, mfa, ws, wsb), HK_OK);
        HkTensor din[11];
        for (int j = 0; j < nin; j++) din[j] = like(&in[j]);
        ck_assert_int_eq(hk_run_bwd(PRIM_GATED_MLP, in, nin, &y2, &dy, 1, din, mia, mfa, ws, wsb), HK_OK);
        const HkTensor *want[12] = {&y, &dx, &dg, &pg.dw, &pu.dw, &pd.dw, &pg.dA, &pg.dB, &pu.dA, &pu.dB, &pd.dA, &pd.dB};
        const char *names[12] = {"y", "dx", "dg", "dw_gate", "dw_up", "dw_down", "da_gate", "db_gate", "da_up", "db_up", "da_down", "db_down"};
        for (int j = 0; j < 1 + nin; j++) {
            double e = rel(j ? &din[j - 1] : &y2, want[j]);
            ck_assert_msg(e <= tol, "%s act %d offset %g lora %d rows %d: %s differs from the unfused ops by %g relative",
                          dt == DT_F32 ? "f32" : "bf16", (int)act, offset, lora, (int)tiles[k], names[j], e);
        }
        /* a smaller workspace than asked for is refused, not overrun */
        ck_assert_int_eq(hk_run_fwd(PRIM_GATED_MLP, in, nin, &y2, 1, mia, mfa, ws, wsb - 1), HK_ERR_WORKSPACE);
        /* frozen inputs (the base weights of LoRA) get no gradient */
        mia[IA_GATED_MLP_FROZEN] = 0x1c;
        HkTensor dz[11];
        for (int j = 0; j < nin; j++) dz[j] = like(&in[j]);
        size_t wsf = hk_workspace_bytes(PRIM_GATED_MLP, in, nin, &y2, 1, mia);
        ck_assert_uint_le(wsf, wsb);
        ck_assert_int_eq(hk_run_bwd(PRIM_GATED_MLP, in, nin, &y2, &dy, 1, dz, mia, mfa, ws, wsf), HK_OK);
        for (int j = 2; j < 5; j++) ck_assert(rel(&dz[j], &dz[j]) == 0 && hk_get(&dz[j], 0) == 0 && hk_get(&dz[j], 7) == 0);
        ck_assert(rel(&dz[0], &dx) <= tol);
        free(ws);
        free(y2.data);
        for (int j = 0; j < nin; j++) free(din[j].data), free(dz[j].data);
    }
    HkTensor all[] = {x, g, dy, n, a, s, u, h, y, dx, dg, dn, da, ds, du, dh};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) free(all[k].data);
    proj_free(&pg), proj_free(&pu), proj_free(&pd);
}

START_TEST(kernels_f32) {
    check_kernels(DT_F32, GATED_MLP_SILU, 0, false, 1e-6);
    check_kernels(DT_F32, GATED_MLP_GELU, 1.0, false, 1e-6);
    check_kernels(DT_F32, GATED_MLP_SILU, 0, true, 1e-6);
}
END_TEST

START_TEST(kernels_bf16) {
    /* each step rounds as the unfused op's output does; the sums' order differs */
    check_kernels(DT_BF16, GATED_MLP_SILU, 0, false, 2e-2);
    check_kernels(DT_BF16, GATED_MLP_GELU, 0, true, 2e-2);
}
END_TEST

/* ---- the rewrite ---- */

enum { T_ = 24, B_ = 2, D_ = 32, I_ = 96, V_ = 64 };

/* Two blocks x = x + mlp(rmsnorm(x)) (segments 0 and 1), then a linear
 * head. bias: the second block's up linear has a bias; leak: the first
 * block's h also feeds the residual. */
static bool fx_lora; /* forward(): LoRA adapters (rank 4) on every projection of the second block, its base frozen */

/* v by w into out, with fx_lora and segment 1 + scale(linear(linear(v, A), B)). */
static void fx_proj(Graph *g, int s, int v, int w, int b, int out, const char *name) {
    const GTensor *wt = &g->tensors[w];
    int64_t vin = wt->dims[0], o = wt->dims[1];
    DType dt = wt->dtype;
    if (!fx_lora || s != 1) {
        fx_op(g, PRIM_LINEAR, s, v, w, b, out);
        return;
    }
    g->tensors[w].frozen = true;
    char an[32], bn[32];
    snprintf(an, sizeof an, "b.1.lora_%s_a", name);
    snprintf(bn, sizeof bn, "b.1.lora_%s_b", name);
    int A = fx_tensor(g, arena_strdup(g->arena, an), dt, 2, vin, 4, 0, TC_PARAM, s), B = fx_tensor(g, arena_strdup(g->arena, bn), dt, 2, 4, o, 0, TC_PARAM, s);
    int base = fx_tensor(g, "%base", dt, 3, B_, T_, o, TC_ACT, s), p = fx_tensor(g, "%p", dt, 3, B_, T_, 4, TC_ACT, s),
        q = fx_tensor(g, "%q", dt, 3, B_, T_, o, TC_ACT, s), qs = fx_tensor(g, "%qs", dt, 3, B_, T_, o, TC_ACT, s);
    fx_op(g, PRIM_LINEAR, s, v, w, b, base);
    fx_op(g, PRIM_LINEAR, s, v, A, -1, p);
    fx_op(g, PRIM_LINEAR, s, p, B, -1, q);
    int sc = fx_op(g, PRIM_SCALE, s, q, -1, -1, qs);
    g->ops[sc].fattr[FA_SCALE_BY] = 0.25;
    fx_op(g, PRIM_ADD, s, base, qs, -1, out);
}

static void forward(Graph *g, Arena *a, DType dt, bool bias, bool leak) {
    graph_init(g, a);
    g->model_name = "mlp";
    g->train = (TrainConfig){.micro_batch = B_, .steps = 1, .dtype = dt, .seed = 1, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95,
                             .eps = 1e-8, .min_lr = 1e-3, .loss_scale = 1, .grad_accum = 1, .checkpoint_every = 1};
    int tgt, wte;
    int x = fx_embed_inputs(g, B_, T_, V_, D_, dt, "%x", &tgt, &wte);
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
        g->ops[fx_op(g, PRIM_RMSNORM, s, x, gn, -1, n)].fattr[FA_RMSNORM_EPS] = 1e-5;
        fx_proj(g, s, n, w1, -1, av, "gate");
        fx_op(g, PRIM_SILU, s, av, -1, -1, sv);
        fx_proj(g, s, n, w3, b3, u, "up");
        fx_op(g, PRIM_MUL, s, sv, u, -1, h);
        fx_proj(g, s, h, w2, -1, y, "down");
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
    fx_loss(g, logits, tgt);
    g->nsegments = 2;
    g->nforward = g->nbackward_end = g->nops; /* as the checker leaves it */
}

/* On the CUDA backend every gated_mlp op (forward, recompute or backward)
 * takes its host layout's workspace too (mlp_tile_layout, the largest of
 * which the planner keeps), rounded up to the 256 bytes every CUDA
 * workspace is aligned to. */
static void check_cuda_workspace(const Graph *g) {
    int seen = 0;
    uint64_t most = 0;
    for (int i = 0; i < g->nops; i++) {
        if (g->ops[i].prim != PRIM_GATED_MLP) continue;
        MlpTileWs L;
        ck_assert(mlp_tile_layout(g, &g->ops[i], 0, &L));
        uint64_t want = (L.total + 255) / 256 * 256;
        if (g->ops[i].kind == OP_FWD && L.total > most) most = L.total;
        Arena a;
        arena_init(&a);
        DiagSink d;
        diag_init(&d);
        CudaGen cg;
        CudaGenOptions opt = {.kernel_dir = ZINF_STDLIB_DIR "/kernels"};
        cuda_gen_init(&cg, &a, &opt);
        CudaKernel k[1];
        CudaOpInfo info;
        ck_assert_int_gt(cuda_gen_op(&cg, g, i, k, 1, &info, &d), 10);
        ck_assert_int_eq(d.errors, 0);
        ck_assert_uint_eq((uint64_t)info.ws_bytes, want);
        seen++;
        diag_free(&d);
        arena_free(&a);
    }
    ck_assert_int_gt(seen, 0);
    ck_assert_uint_eq(most, mlp_tile_workspace_bytes(g));
}

/* The workspace the planner keeps for g's tiled MLP is what the host
 * kernel asks for its first gated_mlp op. */
static void check_workspace(const Graph *g) {
    const GOp *o = NULL;
    for (int i = 0; i < g->nops && !o; i++)
        if (g->ops[i].prim == PRIM_GATED_MLP) o = &g->ops[i];
    HkTensor in[5], out;
    for (int k = 0; k < 5; k++) in[k] = hk_tensor(&in, g->tensors[o->in[k]].dtype, g->tensors[o->in[k]].rank, g->tensors[o->in[k]].dims);
    out = hk_tensor(&out, g->tensors[o->out[0]].dtype, g->tensors[o->out[0]].rank, g->tensors[o->out[0]].dims);
    ck_assert_uint_eq(mlp_tile_workspace_bytes(g), hk_workspace_bytes(PRIM_GATED_MLP, in, 5, &out, 1, o->iattr));
    check_cuda_workspace(g);
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
    check_workspace(&g);
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
    check_cuda_workspace(&g); /* the backward ops' workspace too */
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
    check_workspace(&g);
    arena_free(&a);
}
END_TEST

/* Adapters on the second block: both blocks are found; the second's op has
 * the 11 inputs, the adapters' scales and its frozen base weights marked;
 * its workspace is the host kernel's; autodiff differentiates it. */
START_TEST(lora_blocks) {
    Arena a;
    arena_init(&a);
    Graph g;
    fx_lora = true;
    forward(&g, &a, DT_BF16, false, false);
    fx_lora = false;
    ck_assert_int_eq(mlp_tile_find(&g, NULL, 0), 2);
    int before = g.nops;
    ck_assert_int_eq(mlp_tile_apply(&g, 9), 2);
    ck_assert_int_eq(g.nops, before - 10 - 12);
    const GOp *o = NULL;
    for (int i = 0; i < g.nops; i++) {
        ck_assert_int_eq(g.tensors[g.ops[i].out[0]].producer, i);
        if (g.ops[i].prim == PRIM_GATED_MLP && g.ops[i].segment == 1) o = &g.ops[i];
    }
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(o->nin, 11);
    const char *want[11] = {NULL, "g", "w1", "w3", "w2", "lora_gate_a", "lora_gate_b", "lora_up_a", "lora_up_b", "lora_down_a", "lora_down_b"};
    for (int k = 1; k < 11; k++) {
        const char *name = g.tensors[o->in[k]].name;
        ck_assert_str_eq(name + strlen(name) - strlen(want[k]), want[k]);
    }
    ck_assert_int_eq(o->iattr[IA_GATED_MLP_FROZEN], 0x1c);
    ck_assert(o->fattr[FA_GATED_MLP_LORA_GATE] == 0.25 && o->fattr[FA_GATED_MLP_LORA_UP] == 0.25 && o->fattr[FA_GATED_MLP_LORA_DOWN] == 0.25);
    /* the planner's workspace is the larger of the two ops' (the first block's: accumulators of its trained weights) */
    size_t ws[2] = {0, 0};
    for (int i = 0; i < g.nops; i++) {
        const GOp *m = &g.ops[i];
        if (m->prim != PRIM_GATED_MLP) continue;
        HkTensor in[11], out;
        for (int k = 0; k < m->nin; k++) in[k] = hk_tensor(&in, g.tensors[m->in[k]].dtype, g.tensors[m->in[k]].rank, g.tensors[m->in[k]].dims);
        out = hk_tensor(&out, g.tensors[m->out[0]].dtype, g.tensors[m->out[0]].rank, g.tensors[m->out[0]].dims);
        ws[m->segment] = hk_workspace_bytes(PRIM_GATED_MLP, in, m->nin, &out, 1, m->iattr);
    }
    ck_assert_uint_gt(ws[1], 0);
    ck_assert_uint_lt(ws[1], ws[0]);
    ck_assert_uint_eq(mlp_tile_workspace_bytes(&g), ws[0]);
    check_cuda_workspace(&g);
    /* and the adapters' op alone (the first one's set aside for a moment) */
    for (int i = 0; i < g.nops; i++)
        if (g.ops[i].prim == PRIM_GATED_MLP && g.ops[i].segment == 0) g.ops[i].kind = OP_RECOMPUTE;
    ck_assert_uint_eq(mlp_tile_workspace_bytes(&g), ws[1]);
    for (int i = 0; i < g.nops; i++)
        if (g.ops[i].prim == PRIM_GATED_MLP && g.ops[i].segment == 0) g.ops[i].kind = OP_FWD;
    DiagSink d;
    diag_init(&d);
    ck_assert(ad_build(&g, &d));
    int nb = 0;
    for (int i = g.nforward; i < g.nbackward_end; i++)
        if (g.ops[i].kind == OP_BWD && g.ops[i].prim == PRIM_GATED_MLP && g.ops[i].nout == 11) {
            nb++;
            for (int k = 2; k < 5; k++) ck_assert_int_eq(g.ops[i].out[k], -1); /* frozen: no gradient */
            for (int k = 5; k < 11; k++) ck_assert_int_ge(g.ops[i].out[k], 0);
        }
    ck_assert_int_eq(nb, 1);
    check_cuda_workspace(&g); /* the backward ops' (adapters in bf16: accumulators) */
    diag_free(&d);
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
        PlannerResult r;
        ck_assert_msg(fx_plan_host(&g, &a, &d, &r), "the %s graph does not plan", tiled ? "tiled" : "written");
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
    tcase_add_test(tc, lora_blocks);
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
