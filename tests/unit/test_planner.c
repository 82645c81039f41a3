#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"
#include "planner.h"
#include "plan_fixture.h"
#include "verify.h"

typedef struct Ctx {
    Arena a;
    DiagSink d;
    Graph g;
    Target t;
    PlannerOptions o;
    PlannerResult r;
    char msgs[4096];
} Ctx;

static Ctx *ctx_new(FixtureShape s, const char *target, int ranks) {
    Ctx *c = calloc(1, sizeof *c);
    arena_init(&c->a);
    diag_init(&c->d);
    ck_assert(fx_build(&c->g, &c->a, &c->d, s));
    ck_assert(target_builtin(target, &c->t));
    planner_options_default(&c->o);
    c->o.ranks = ranks;
    return c;
}

static void ctx_free(Ctx *c) {
    plan_free(c->r.plan);
    diag_free(&c->d);
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

START_TEST(host_one_rank) {
    Ctx *c = ctx_new(fx_small(), "host", 1);
    plan_ok(c);
    const Plan *p = c->r.plan;
    ck_assert_int_eq(p->ranks, 1);
    for (uint32_t i = 0; i < p->nshards; i++) ck_assert(!p->shards[i].partitioned);
    ck_assert(c->r.step_time > 0);
    ck_assert_ptr_nonnull(strstr(c->r.explain, "chosen:"));
    ctx_free(c);
}
END_TEST


START_TEST(host_four_ranks) {
    Ctx *c = ctx_new(fx_small(), "host", 4);
    c->o.whole_below = 1000;
    plan_ok(c);
    const Plan *p = c->r.plan;
    ck_assert_int_eq(p->ranks, 4);
    int split = 0, whole = 0;
    for (uint32_t i = 0; i < p->nshards; i++) {
        const PlanShard *sh = &p->shards[i];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (sh->partitioned) {
            split++;
            ck_assert_int_ge(sh->tile_shard * 4, sh->tile_elems);
            ck_assert_int_eq((sh->tile_shard * plan_dtype_size(t->dtype)) % 4096, 0);
        } else {
            whole++;
            ck_assert_int_lt(t->numel, 1000);
        }
    }
    ck_assert_int_gt(split, 0);
    ck_assert_int_gt(whole, 0);
    /* the schedule all-gathers and reduce-scatters */
    int ag = 0, rs = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        ag += p->instrs[i].op == PI_ALLGATHER;
        rs += p->instrs[i].op == PI_REDUCE_SCATTER;
    }
    ck_assert_int_gt(ag, 0);
    ck_assert_int_gt(rs, 0);
    ctx_free(c);
}
END_TEST

START_TEST(every_builtin_target) {
    for (int k = 0; k < target_nbuiltins; k++) {
        FixtureShape s = fx_small();
        s.grad_clip = 1.0;
        Ctx *c = ctx_new(s, target_builtin_names[k], 0);
        plan_ok(c);
        ck_assert_int_eq(c->r.plan->ranks, target_ranks(&c->t));
        ctx_free(c);
    }
}
END_TEST

START_TEST(every_pinned_placement) {
    static const char *const tiers[] = {"gpu", "cpu", "nvme"};
    for (int pp = 0; pp < 3; pp++)
        for (int op = 0; op < 3; op++)
            for (int cp = 0; cp < 3; cp++)
                for (int r = 1; r <= 4; r += 3) {
                    FixtureShape s = fx_small();
                    s.grad_clip = cp ? 1.0 : 0;
                    s.dtype = op == 1 ? DT_F32 : DT_BF16;
                    Ctx *c = ctx_new(s, "host", r);
                    c->o.whole_below = 2000;
                    c->o.tier[PC_PARAMS] = pp;
                    c->o.tier[PC_OPTIMIZER] = op;
                    c->o.tier[PC_CHECKPOINTS] = cp;
                    if (op != TIER_GPU && (pp + cp + r) % 2) c->o.tier[PC_GRADS] = TIER_NVME; /* half the cases */
                    c->o.prefetch = 1 + pp;
                    bool ok = planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r);
                    ck_assert_msg(ok, "params=%s optimizer=%s: %s", tiers[pp], tiers[op], first_error(c));
                    int n = verify_plan(c->r.plan, c->msgs, sizeof c->msgs);
                    ck_assert_msg(n == 0, "params=%s optimizer=%s ckpt=%s ranks=%d: %s", tiers[pp], tiers[op], tiers[cp], r, c->msgs);
                    const Plan *p = c->r.plan;
                    for (uint32_t i = 0; i < p->nshards; i++) {
                        const PlanTensor *t = &p->tensors[p->shards[i].tensor];
                        if (t->cls == TC_PARAM) ck_assert_int_eq(p->shards[i].home, pp);
                        if (t->cls == TC_MOMENTUM) ck_assert_int_eq(p->shards[i].home, op);
                    }
                    ctx_free(c);
                }
}
END_TEST

START_TEST(tiles_pinned) {
    Ctx *c = ctx_new(fx_small(), "host", 2);
    c->o.whole_below = 1000;
    TilePin pin = {"block.*.mlp.w1", 4, SPAN_NONE};
    c->o.tiles = &pin;
    c->o.ntiles = 1;
    plan_ok(c);
    const Plan *p = c->r.plan;
    int tiled = 0, tiled_kernels = 0;
    for (uint32_t i = 0; i < p->nshards; i++) {
        const char *nm = p->tensors[p->shards[i].tensor].name;
        if (strstr(nm, "mlp.w1")) {
            ck_assert_int_eq(p->shards[i].ntiles, 4);
            tiled++;
        } else {
            ck_assert_int_eq(p->shards[i].ntiles, 1);
        }
    }
    for (uint32_t i = 0; i < p->ninstrs; i++) tiled_kernels += p->instrs[i].op == PI_KERNEL && p->instrs[i].ntiles == 4;
    ck_assert_int_eq(tiled, 2 * 5); /* w1 of two layers, with grad, master, m, v */
    ck_assert_int_gt(tiled_kernels, 2 * 4 * 2);
    ctx_free(c);
}
END_TEST

START_TEST(automatic_tiling) {
    /* a weight of more than 1/16 of GPU memory is tiled */
    FixtureShape s = fx_small();
    s.hidden = 1024;
    s.vocab = 512;
    s.layers = 1;
    Ctx *c = ctx_new(s, "host", 1);
    c->t.gpu_memory = 64u << 20; /* 64 MiB: w1 (8 MiB) is over 4 MiB */
    c->t.cpu_memory = 4ull << 30;
    plan_ok(c);
    const Plan *p = c->r.plan;
    for (uint32_t i = 0; i < p->ntensors; i++)
        if (!strcmp(p->tensors[i].name, "block.0.mlp.w1")) ck_assert_int_eq(p->shards[p->tensors[i].shard].ntiles, 2);
    ck_assert_ptr_nonnull(strstr(c->r.explain, "tile block.0.mlp.w1"));
    ctx_free(c);
}
END_TEST

START_TEST(bad_tile_pin) {
    Ctx *c = ctx_new(fx_small(), "host", 1);
    TilePin pin = {"block.0.mlp.w1", 3, SPAN_NONE};
    c->o.tiles = &pin;
    c->o.ntiles = 1;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "cannot cut 'block.0.mlp.w1' into 3 tiles: 3 does not divide its 64 rows");
    TilePin pin2 = {"block.0.mlp.b1", 2, SPAN_NONE};
    c->o.tiles = &pin2;
    diag_free(&c->d);
    diag_init(&c->d);
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "cannot tile 'block.0.mlp.b1': only 2-D weights of linear, matmul and embedding, "
                                     "and the [E, O, I] experts of moe_expert, are tiled");
    ctx_free(c);
}
END_TEST

/* Gradients live where the optimizer steps: pins against that are named as
 * such, not reported as a shortage of memory. */
START_TEST(contradictory_pins) {
    Ctx *c = ctx_new(fx_small(), "host", 1);
    c->o.tier[PC_OPTIMIZER] = TIER_CPU;
    c->o.tier[PC_GRADS] = TIER_GPU;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "grads = \"gpu\" needs optimizer = \"gpu\" (the plan block says \"cpu\"): gradients "
                                     "stay where the optimizer steps");
    diag_free(&c->d);
    diag_init(&c->d);
    c->o.tier[PC_OPTIMIZER] = TIER_GPU;
    c->o.tier[PC_GRADS] = TIER_NVME;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "optimizer = \"gpu\" keeps the gradients in GPU memory, but the plan block says grads = \"nvme\"");
    ctx_free(c);
}
END_TEST

START_TEST(infeasible_states) {
    FixtureShape s = fx_small();
    s.hidden = 2048;
    s.vocab = 1024;
    s.layers = 8;
    Ctx *c = ctx_new(s, "host", 1);
    c->t.cpu_memory = 1ull << 30;
    c->t.gpu_memory = 256u << 20;
    c->t.nvme_capacity = 0;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "model states need 4.06 GiB (4.06 GiB per rank over 1 rank); the target has 256.00 MiB "
                                     "GPU memory, 768.00 MiB CPU memory and no NVMe: 3.06 GiB short");
    ctx_free(c);
}
END_TEST

START_TEST(size_independent_of_ranks) {
    uint32_t n[3];
    int ranks[3] = {2, 16, 256};
    for (int k = 0; k < 3; k++) {
        Ctx *c = ctx_new(fx_small(), "dgx2", ranks[k]);
        c->o.whole_below = 100;
        c->o.prefetch = 2;
        c->o.tier[PC_PARAMS] = TIER_CPU;
        c->o.tier[PC_OPTIMIZER] = TIER_CPU;
        c->o.tier[PC_CHECKPOINTS] = TIER_GPU;
        plan_ok(c);
        n[k] = c->r.plan->ninstrs;
        ctx_free(c);
    }
    ck_assert_uint_eq(n[0], n[1]);
    ck_assert_uint_eq(n[1], n[2]);
}
END_TEST


static Setting *mk_setting(Arena *a, const char *key, const char *sel, Expr *v) {
    Setting *s = ARENA_NEW(a, Setting);
    s->key = key;
    s->selector = sel;
    s->value = v;
    s->span = s->selector_span = SPAN_NONE;
    return s;
}
static Expr *mk_str(Arena *a, const char *v) {
    Expr *e = ARENA_NEW(a, Expr);
    e->kind = EX_STR;
    e->str = v;
    e->slen = strlen(v);
    e->span = SPAN_NONE;
    return e;
}
static Expr *mk_int(Arena *a, int64_t v) {
    Expr *e = ARENA_NEW(a, Expr);
    e->kind = EX_INT;
    e->ival = v;
    e->span = SPAN_NONE;
    return e;
}

START_TEST(plan_block) {
    Arena a;
    arena_init(&a);
    DiagSink d;
    diag_init(&d);
    Decl *dl = ARENA_NEW(&a, Decl);
    dl->kind = DL_PLAN;
    Setting *items[] = {mk_setting(&a, "params", NULL, mk_str(&a, "nvme")), mk_setting(&a, "optimizer", NULL, mk_str(&a, "cpu")),
                        mk_setting(&a, "checkpoints", NULL, mk_str(&a, "cpu")), mk_setting(&a, "prefetch", NULL, mk_int(&a, 3)),
                        mk_setting(&a, "whole_below", NULL, mk_int(&a, 5000)),
                        mk_setting(&a, "tiles", "block.*.mlp.w1", mk_int(&a, 4))};
    dl->settings = (SettingList){items, 6, 6};
    PlannerOptions o;
    planner_options_default(&o);
    ck_assert(planner_options_from_decl(dl, &a, &d, &o));
    ck_assert_int_eq(o.tier[PC_PARAMS], TIER_NVME);
    ck_assert_int_eq(o.tier[PC_OPTIMIZER], TIER_CPU);
    ck_assert_int_eq(o.tier[PC_CHECKPOINTS], TIER_CPU);
    ck_assert_int_eq(o.tier[PC_GRADS], -1);
    ck_assert_int_eq(o.prefetch, 3);
    ck_assert_int_eq(o.whole_below, 5000);
    ck_assert_int_eq(o.ntiles, 1);
    ck_assert_str_eq(o.tiles[0].pattern, "block.*.mlp.w1");
    ck_assert_int_eq(o.tiles[0].tiles, 4);

    Setting *bad[] = {mk_setting(&a, "parms", NULL, mk_str(&a, "gpu")), mk_setting(&a, "grads", NULL, mk_str(&a, "disk")),
                      mk_setting(&a, "prefetch", NULL, mk_str(&a, "3")), mk_setting(&a, "tiles", NULL, mk_int(&a, 2))};
    dl->settings = (SettingList){bad, 4, 4};
    ck_assert(!planner_options_from_decl(dl, &a, &d, &o));
    ck_assert_int_eq(d.errors, 4);
    ck_assert_str_eq(d.items[0].msg, "unknown plan setting 'parms'");
    ck_assert_str_eq(d.items[1].msg, "did you mean 'params'?");
    ck_assert_str_eq(d.items[2].msg, "'grads' must be \"gpu\", \"cpu\" or \"nvme\"");
    ck_assert_str_eq(d.items[3].msg, "'prefetch' must be a whole number");
    ck_assert_str_eq(d.items[4].msg, "tiles needs a parameter pattern: tiles \"block.*.mlp.w1\" = 4");
    diag_free(&d);
    arena_free(&a);
}
END_TEST

START_TEST(pins_are_obeyed) {
    Ctx *c = ctx_new(fx_small(), "dgx2", 0);
    c->o.tier[PC_PARAMS] = TIER_NVME;
    c->o.tier[PC_OPTIMIZER] = TIER_NVME;
    c->o.prefetch = 3;
    plan_ok(c);
    ck_assert_ptr_nonnull(strstr(c->r.explain, "chosen: params=nvme grads=cpu optimizer=nvme"));
    ck_assert_ptr_nonnull(strstr(c->r.explain, "prefetch 3"));
    int nvme = 0, adam = 0;
    for (uint32_t i = 0; i < c->r.plan->ninstrs; i++) {
        nvme += c->r.plan->instrs[i].queue == Q_NVME;
        adam += c->r.plan->instrs[i].op == PI_CPU_ADAM;
    }
    ck_assert_int_gt(nvme, 0);
    ck_assert_int_gt(adam, 0);
    ctx_free(c);
    /* a pin the target cannot honour */
    c = ctx_new(fx_small(), "dgx2", 0);
    c->t.nvme_capacity = 0;
    c->o.tier[PC_PARAMS] = TIER_NVME;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "the plan block puts params on \"nvme\", but target 'dgx2' has no NVMe");
    ctx_free(c);
    /* pins that make the states too big for what is left */
    c = ctx_new(fx_small(), "host", 1);
    c->t.gpu_memory = 1 << 20;
    c->o.tier[PC_PARAMS] = TIER_GPU;
    c->o.tier[PC_OPTIMIZER] = TIER_GPU;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "the plan block puts params and optimizer on gpu: 1.32 MiB per rank, more than the target's "
                                     "1.00 MiB of gpu per rank (short by 328.75 KiB)");
    ck_assert_str_eq(c->d.items[1].msg, "give that tier more room in the target (its capacity or memory), plan for more ranks, or pin less");
    ctx_free(c);
    /* the same on NVMe: the tier named is NVMe, not the GPU memory that would hold everything */
    c = ctx_new(fx_small(), "host", 1);
    c->t.nvme_capacity = 1 << 20;
    static const char *tmp_path[] = {"/tmp"};
    c->t.nvme_paths = tmp_path;
    c->t.nvme_npaths = 1;
    c->t.nvme_read = c->t.nvme_write = 1e9;
    c->o.tier[PC_PARAMS] = TIER_NVME;
    c->o.tier[PC_OPTIMIZER] = TIER_NVME;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_msg(strstr(first_error(c), "the plan block puts params and optimizer on nvme: 1.32 MiB per rank, more than the target's "
                                         "1.00 MiB of nvme per rank (short by 328.75 KiB)"), "%s", first_error(c));
    ctx_free(c);
}
END_TEST


START_TEST(optimizer_sub_groups) {
    /* a shard of more than 2^25 elements is stepped in sub-groups */
    FixtureShape s = fx_small();
    s.vocab = 600000; /* wte and head: 38.4M elements */
    s.layers = 1;
    s.batch = 1;
    s.seq = 4;
    Ctx *c = ctx_new(s, "h200", 0);
    c->o.tier[PC_OPTIMIZER] = TIER_NVME;
    plan_ok(c);
    const Plan *p = c->r.plan;
    int wte = -1, adams = 0, reads = 0;
    for (uint32_t i = 0; i < p->ntensors; i++)
        if (!strcmp(p->tensors[i].name, "wte")) wte = (int)i;
    uint64_t covered = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *in = &p->instrs[i];
        if (in->op == PI_CPU_ADAM && in->arg == wte) {
            adams++;
            covered += p->operands[in->opnd].bytes;
            ck_assert_uint_le(p->operands[in->opnd].bytes, (1u << 25) * 2);
        }
        reads += in->op == PI_NVME_READ && in->arg >= 0 && p->tensors[in->arg].param == wte;
    }
    ck_assert_int_eq(adams, 2);
    ck_assert_uint_eq(covered, 38400000ull * 2);
    ck_assert_int_eq(reads, 2 * 3); /* master, m, v of each sub-group */
    ctx_free(c);
}
END_TEST


START_TEST(grads_to_nvme_when_cpu_is_short) {
    FixtureShape s = fx_small();
    s.hidden = 512;
    s.vocab = 512;
    s.layers = 2;
    s.grad_clip = 1.0;
    Ctx *c = ctx_new(s, "host", 1);
    /* 4.7M parameters: 9 MiB of bf16 gradients; 24 MiB of host memory for homes and staging: the
     * gradients fit as homes but not beside the optimizer's staging */
    c->t.gpu_memory = 24u << 20;
    c->t.cpu_memory = 48u << 20;
    c->o.tier[PC_PARAMS] = TIER_NVME;
    c->o.tier[PC_OPTIMIZER] = TIER_NVME;
    plan_ok(c);
    ck_assert_ptr_nonnull(strstr(c->r.explain, "chosen: params=nvme grads=nvme optimizer=nvme"));
    const Plan *p = c->r.plan;
    for (uint32_t i = 0; i < p->nshards; i++)
        if (p->tensors[p->shards[i].tensor].cls == TC_GRAD) ck_assert_int_eq(p->shards[i].home, TIER_NVME);
    ck_assert_uint_lt(p->arenas[ARENA_CPU].size, 9u << 20);
    ctx_free(c);
}
END_TEST


/* ---- the refinement (planner_refine.c) ---- */

/* The fixture on one host rank whose "GPU" holds only part of the
 * optimizer state, with a slow CPU: the class search keeps the optimizer
 * on the CPU and the refinement moves some of it to the GPU. */
static Ctx *ctx_tight(void) {
    Ctx *c = ctx_new(fx_small(), "host", 1);
    c->t.gpu_memory = 1400 * 1024;
    c->t.cpu_bandwidth = 0.5e9;
    return c;
}

/* Counts the fixture's optimizer tensors (momentum) by home tier, and
 * checks that each parameter's gradient and optimizer state share a tier,
 * stepped by GPU Adam on the GPU and by CPU Adam elsewhere. */
static void count_split(const Plan *p, int n[PLAN_NTIERS]) {
    memset(n, 0, sizeof(int) * PLAN_NTIERS);
    int *home = calloc(p->ntensors, sizeof *home);
    for (uint32_t i = 0; i < p->nshards; i++) home[p->shards[i].tensor] = p->shards[i].home;
    for (uint32_t i = 0; i < p->nshards; i++) {
        const PlanTensor *t = &p->tensors[p->shards[i].tensor];
        if (t->cls != TC_MOMENTUM) continue;
        n[p->shards[i].home]++;
        int pt = t->param, gt = p->tensors[pt].grad;
        ck_assert_int_eq(home[gt] == TIER_GPU, p->shards[i].home == TIER_GPU);
        for (uint32_t k = 0; k < p->nshards; k++) {
            const PlanTensor *u = &p->tensors[p->shards[k].tensor];
            if (u->param == pt && (u->cls == TC_MASTER || u->cls == TC_VARIANCE)) ck_assert_int_eq(p->shards[k].home, p->shards[i].home);
        }
        for (uint32_t k = 0; k < p->ninstrs; k++)
            if ((p->instrs[k].op == PI_GPU_ADAM || p->instrs[k].op == PI_CPU_ADAM) && p->instrs[k].arg == pt)
                ck_assert_int_eq(p->instrs[k].op, p->shards[i].home == TIER_GPU ? PI_GPU_ADAM : PI_CPU_ADAM);
    }
    free(home);
}

START_TEST(refinement_splits_optimizer) {
    Ctx *c = ctx_tight();
    plan_ok(c);
    int n[PLAN_NTIERS];
    count_split(c->r.plan, n);
    ck_assert_msg(n[TIER_GPU] > 0 && n[TIER_CPU] > 0, "optimizer not split: %d on gpu, %d on cpu\n%s", n[TIER_GPU], n[TIER_CPU], c->r.explain);
    for (int k = 0; k < PLAN_NARENAS; k++) ck_assert_uint_le(c->r.plan->arenas[k].size, c->r.plan->arenas[k].capacity);
    ck_assert_ptr_nonnull(strstr(c->r.explain, "cpu -> gpu"));
    ck_assert_ptr_nonnull(strstr(c->r.explain, ", kept: cpu busy"));
    ck_assert_ptr_nonnull(strstr(c->r.explain, "optimizer: "));
    double refined = c->r.step_time;
    /* the same with the optimizer pinned to the CPU: no move, and slower */
    Ctx *u = ctx_tight();
    u->o.tier[PC_OPTIMIZER] = TIER_CPU;
    plan_ok(u);
    count_split(u->r.plan, n);
    ck_assert_int_eq(n[TIER_GPU], 0);
    ck_assert_msg(refined < u->r.step_time, "refined %g s, unrefined %g s", refined, u->r.step_time);
    ctx_free(u);
    ctx_free(c);
}
END_TEST

START_TEST(refinement_respects_pins) {
    /* a class pin on gradients forbids moving the optimizer to the GPU */
    Ctx *c = ctx_tight();
    c->o.tier[PC_GRADS] = TIER_CPU;
    plan_ok(c);
    int n[PLAN_NTIERS];
    count_split(c->r.plan, n);
    ck_assert_int_eq(n[TIER_GPU], 0);
    ctx_free(c);
    /* a pin by name: wte and its state stay in CPU memory, block.0's on the GPU */
    c = ctx_tight();
    c->o.pins = (TierPin[]){{"wte", TIER_CPU, SPAN_NONE}, {"block.0.*", TIER_GPU, SPAN_NONE}};
    c->o.npins = 2;
    plan_ok(c);
    const Plan *p = c->r.plan;
    for (uint32_t i = 0; i < p->nshards; i++) {
        const PlanTensor *t = &p->tensors[p->shards[i].tensor];
        const char *pn = t->cls == TC_PARAM ? t->name : t->param >= 0 ? p->tensors[t->param].name : "";
        if (!strcmp(pn, "wte")) ck_assert_int_eq(p->shards[i].home, TIER_CPU);
        if (!strncmp(pn, "block.0.", 8)) ck_assert_msg(p->shards[i].home == TIER_GPU, "%s on %d", t->name, p->shards[i].home);
    }
    count_split(p, n);
    ctx_free(c);
    /* a pin that names nothing */
    c = ctx_tight();
    c->o.pins = (TierPin[]){{"nothing.*", TIER_GPU, SPAN_NONE}};
    c->o.npins = 1;
    ck_assert(!planner_run(&c->g, &c->t, &c->o, &c->a, &c->d, &c->r));
    ck_assert_str_eq(first_error(c), "pin \"nothing.*\" names no parameter");
    ctx_free(c);
}
END_TEST

/* test_planner --write-plan OUT TARGET RANKS: plans the fixture and writes
 * it (for tests/e2e/golden_schedule.sh and the zinfdump tests). */
static int write_fixture(const char *out, const char *target, int ranks) {
    Arena a;
    DiagSink d;
    Graph g;
    Target t;
    arena_init(&a);
    diag_init(&d);
    PlannerOptions o;
    planner_options_default(&o);
    o.ranks = ranks;
    o.whole_below = 1000;
    PlannerResult r = {0};
    int rc = 1;
    char err[512];
    if (!target_builtin(target, &t)) fprintf(stderr, "unknown target %s\n", target);
    else if (!fx_build(&g, &a, &d, fx_small()) || !planner_run(&g, &t, &o, &a, &d, &r)) diag_render(&d, NULL, stderr, false);
    else if (!plan_write(r.plan, out, err, sizeof err)) fprintf(stderr, "%s\n", err);
    else rc = 0;
    plan_free(r.plan);
    diag_free(&d);
    arena_free(&a);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--write-plan")) return write_fixture(argv[2], argv[3], atoi(argv[4]));
    Suite *s = suite_create("planner");
    TCase *t = tcase_create("plan");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, host_one_rank);
    tcase_add_test(t, grads_to_nvme_when_cpu_is_short);
    tcase_add_test(t, optimizer_sub_groups);
    tcase_add_test(t, plan_block);
    tcase_add_test(t, pins_are_obeyed);
    tcase_add_test(t, host_four_ranks);
    tcase_add_test(t, every_builtin_target);
    tcase_add_test(t, every_pinned_placement);
    tcase_add_test(t, tiles_pinned);
    tcase_add_test(t, automatic_tiling);
    tcase_add_test(t, bad_tile_pin);
    tcase_add_test(t, contradictory_pins);
    tcase_add_test(t, infeasible_states);
    tcase_add_test(t, size_independent_of_ranks);
    tcase_add_test(t, refinement_splits_optimizer);
    tcase_add_test(t, refinement_respects_pins);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
