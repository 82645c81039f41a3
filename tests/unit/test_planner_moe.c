/* The planner's tiles by expert: a moe_expert's [E, O, I] weight cut into
 * tiles of whole experts, pinned by the plan block or chosen when it takes
 * more than 1/16 of GPU memory, on the host and CUDA backends; the
 * refusals (E not divisible, a weight of another shape) name what is wrong. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "autodiff.h"
#include "loader.h"
#include "planner.h"
#include "sema.h"
#include "target.h"
#include "verify.h"

#ifndef ZINF_STDLIB_DIR
#define ZINF_STDLIB_DIR "stdlib"
#endif

/* Two Mixtral-style layers of E = 8 experts: wg, wu [8, 256, 64], wd [8, 64, 256] (512 KiB each in f32). */
static const char *MODEL = "import \"llama\"\n"
                           "import \"moe\"\n"
                           "const V = 96, T = 12, D = 64, H = 4, KV = 2, E = 8, K = 2, F = 256, L = 2\n"
                           "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
                           "  tok = param [V, D] init normal(0.02)\n"
                           "  x = embedding(tok, tokens)\n"
                           "  load = moe_load(experts = E)\n"
                           "  repeat L { x, load = moe_block(x, load, H, KV, E, K, F, normalize = true, eps = 1e-6) }\n"
                           "  x = rms(x, 1e-6)\n"
                           "  head = param [D, V] init normal(0.02)\n"
                           "  loss cross_entropy(linear(x, head), targets) + moe_aux_loss(load, E, L, B * T, 0.05)\n"
                           "}\n"
                           "train { micro_batch = 2; dtype = f32; optimizer = adam(lr = 1e-3) }\n";

typedef struct Ctx {
    Arena a;
    SourceSet src;
    DiagSink d;
    Graph g;
    Target t;
    PlannerOptions o;
    PlannerResult r;
    char msgs[4096];
} Ctx;

static Ctx *ctx_new(const char *target, int ranks) {
    Ctx *c = calloc(1, sizeof *c);
    arena_init(&c->a);
    source_set_init(&c->src);
    diag_init(&c->d);
    Program prog;
    LoadOptions lo = {.stdlib_dir = ZINF_STDLIB_DIR};
    ck_assert(program_load_text(&c->a, &c->src, &c->d, "moe.zl", MODEL, &lo, &prog) && c->d.errors == 0);
    Sema *s = sema_new(&c->a, &prog, &c->src, &c->d);
    ck_assert_ptr_nonnull(s);
    ck_assert(sema_check(s, &c->g));
    ck_assert(ad_build(&c->g, &c->d));
    ck_assert(target_builtin(target, &c->t));
    planner_options_default(&c->o);
    c->o.ranks = ranks;
    return c;
}

static void ctx_free(Ctx *c) {
    plan_free(c->r.plan);
    diag_free(&c->d);
    source_set_free(&c->src);
    arena_free(&c->a);
    free(c);
}

static const char *first_error(const Ctx *c) {
    for (int i = 0; i < c->d.len; i++)
        if (c->d.items[i].level == DIAG_ERROR) return c->d.items[i].msg;
    return "";
}

static void plan_ok(Ctx *c) {
    bool ok = planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r);
    ck_assert_msg(ok, "planner failed: %s", first_error(c));
    int n = verify_plan(c->r.plan, c->msgs, sizeof c->msgs);
    ck_assert_msg(n == 0, "verifier: %d problems:\n%s", n, c->msgs);
}

static int tiles_of(const Plan *p, const char *name) {
    for (uint32_t i = 0; i < p->ntensors; i++)
        if (p->tensors[i].name && !strcmp(p->tensors[i].name, name)) return p->shards[p->tensors[i].shard].ntiles;
    ck_abort_msg("no tensor %s", name);
    return 0;
}

/* Each moe_expert kernel of a tiled weight: n instructions, tile t of n
 * reading exactly E/n experts of the weight (and, backward, writing E/n
 * experts of its gradient): the charge is one tile's, not the layer's. */
static void check_expert_kernels(const Plan *p, const char *wname, int n) {
    int32_t w = -1;
    for (uint32_t i = 0; i < p->ntensors; i++)
        if (p->tensors[i].name && !strcmp(p->tensors[i].name, wname)) w = (int32_t)i;
    ck_assert_int_ge(w, 0);
    uint64_t tile_bytes = (uint64_t)p->tensors[w].numel / (uint64_t)n * 4;
    int seen[2][16] = {{0}};
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *in = &p->instrs[i];
        if (in->op != PI_KERNEL) continue;
        const PlanOp *o = &p->ops[in->arg];
        if (o->kind != OP_FWD && o->fwd < 0) continue; /* zero_grad, loss_grad: no forward op */
        const PlanOp *fo = o->kind == OP_FWD ? o : &p->ops[o->fwd];
        if (fo->prim != PRIM_MOE_EXPERT || fo->in[2] != w) continue;
        ck_assert_int_eq(in->ntiles, n);
        ck_assert_int_lt(in->tile, n);
        ck_assert_uint_eq(p->operands[in->opnd + 2].bytes, tile_bytes);
        if (o->kind == OP_BWD) {
            ck_assert_uint_eq(p->operands[in->opnd + (uint32_t)o->nin + 2].bytes, tile_bytes);
            seen[1][in->tile]++;
        } else {
            seen[0][in->tile]++;
        }
    }
    for (int t = 0; t < n; t++) ck_assert(seen[0][t] >= 1 && seen[1][t] == 1);
}

START_TEST(pinned_by_expert) {
    for (int ranks = 1; ranks <= 2; ranks++) {
        Ctx *c = ctx_new("host", ranks);
        TilePin pins[2] = {{"*.moe_mlp.wg", 2, SPAN_NONE}, {"moe_block.1.moe_mlp.wd", 8, SPAN_NONE}};
        c->o.tiles = pins;
        c->o.ntiles = 2;
        plan_ok(c);
        const Plan *p = c->r.plan;
        ck_assert_int_eq(tiles_of(p, "moe_block.0.moe_mlp.wg"), 2);
        ck_assert_int_eq(tiles_of(p, "moe_block.1.moe_mlp.wg"), 2);
        ck_assert_int_eq(tiles_of(p, "moe_block.1.moe_mlp.wd"), 8);
        ck_assert_int_eq(tiles_of(p, "moe_block.0.moe_mlp.wd"), 1);
        ck_assert_int_eq(tiles_of(p, "moe_block.0.moe_mlp.wu"), 1);
        check_expert_kernels(p, "moe_block.0.moe_mlp.wg", 2);
        check_expert_kernels(p, "moe_block.1.moe_mlp.wd", 8);
        ck_assert_ptr_nonnull(strstr(c->r.explain, "tile moe_block.0.moe_mlp.wg [8, 256, 64] in 2 tiles of 4 experts"));
        ck_assert_ptr_nonnull(strstr(c->r.explain, "tile moe_block.1.moe_mlp.wd [8, 64, 256] in 8 tiles of 1 expert:"));
        ctx_free(c);
    }
}
END_TEST

START_TEST(chosen_by_expert) {
    /* 2 MiB of GPU memory: a 512 KiB expert weight is over its 128 KiB share, so 4 tiles of 2 experts */
    Ctx *c = ctx_new("host", 1);
    c->t.gpu_memory = 2u << 20;
    plan_ok(c);
    const Plan *p = c->r.plan;
    for (int l = 0; l < 2; l++)
        for (const char *w = "gud"; *w; w++) {
            char name[64];
            snprintf(name, sizeof name, "moe_block.%d.moe_mlp.w%c", l, *w);
            ck_assert_int_eq(tiles_of(p, name), 4);
            check_expert_kernels(p, name, 4);
        }
    ck_assert_ptr_nonnull(strstr(c->r.explain, "in 4 tiles of 2 experts: 512.00 KiB whole, more than 1/16 of GPU memory"));
    ctx_free(c);
    /* a CUDA target chooses them the same way: 4 MiB, a 256 KiB share, 2 tiles of 4 experts */
    c = ctx_new("h200", 1);
    c->t.gpu_memory = 4u << 20;
    plan_ok(c);
    for (int l = 0; l < 2; l++)
        for (const char *w = "gud"; *w; w++) {
            char name[64];
            snprintf(name, sizeof name, "moe_block.%d.moe_mlp.w%c", l, *w);
            ck_assert_int_eq(tiles_of(c->r.plan, name), 2);
            check_expert_kernels(c->r.plan, name, 2);
        }
    ck_assert_ptr_nonnull(strstr(c->r.explain, "in 2 tiles of 4 experts: 512.00 KiB whole, more than 1/16 of GPU memory"));
    ctx_free(c);
    /* the default budget: nothing over its share, nothing tiled */
    c = ctx_new("host", 1);
    plan_ok(c);
    ck_assert_int_eq(tiles_of(c->r.plan, "moe_block.0.moe_mlp.wg"), 1);
    ctx_free(c);
}
END_TEST

START_TEST(bad_expert_pin) {
    Ctx *c = ctx_new("host", 1);
    TilePin pin = {"moe_block.0.moe_mlp.wu", 3, SPAN_NONE};
    c->o.tiles = &pin;
    c->o.ntiles = 1;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c),
                     "cannot cut 'moe_block.0.moe_mlp.wu' into 3 tiles: 3 does not divide its 8 experts (a tile holds whole experts)");
    ctx_free(c);
    c = ctx_new("host", 1);
    TilePin pin2 = {"moe_block.0.rms.g", 2, SPAN_NONE};
    c->o.tiles = &pin2;
    c->o.ntiles = 1;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "cannot tile 'moe_block.0.rms.g': only 2-D weights of linear, matmul and embedding, "
                                     "and the [E, O, I] experts of moe_expert, are tiled");
    ctx_free(c);
}
END_TEST

/* A CUDA target tiles by expert as the host does: the same instructions
 * (its tiles run the grouped expert GEMMs over the tile's experts). */
START_TEST(cuda_by_expert) {
    for (int ranks = 1; ranks <= 2; ranks++) {
        Ctx *c = ctx_new("h200", ranks);
        TilePin pin3 = {"moe_block.0.moe_mlp.wg", 2, SPAN_NONE};
        c->o.tiles = &pin3;
        c->o.ntiles = 1;
        plan_ok(c);
        ck_assert_int_eq(tiles_of(c->r.plan, "moe_block.0.moe_mlp.wg"), 2);
        ck_assert_int_eq(tiles_of(c->r.plan, "moe_block.1.moe_mlp.wg"), 1);
        check_expert_kernels(c->r.plan, "moe_block.0.moe_mlp.wg", 2);
        ck_assert_ptr_nonnull(strstr(c->r.explain, "tile moe_block.0.moe_mlp.wg [8, 256, 64] in 2 tiles of 4 experts"));
        ctx_free(c);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("planner_moe");
    TCase *t = tcase_create("tiles");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, pinned_by_expert);
    tcase_add_test(t, chosen_by_expert);
    tcase_add_test(t, bad_expert_pin);
    tcase_add_test(t, cuda_by_expert);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
