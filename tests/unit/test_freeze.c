/* Frozen parameters (train { freeze = [...] }), stage by stage:
 *  - sema: the patterns (names, globs, prefixes), `param [..] init zeros
 *    frozen`, and the errors: a misspelt flag, a pattern
 *    matching nothing (with a "did you mean"), every parameter frozen, a
 *    value that is not a list of strings;
 *  - autodiff: no gradient, optimizer state or Adam for a frozen parameter,
 *    its backward ops' out[] entry -1, the backward through it still run;
 *    the trainable parameters' gradients bit-identical to an unfrozen run's
 *    (reference executor);
 *  - memmodel: exactly the frozen parameters' gradient and optimizer bytes
 *    saved, forward and training graph alike, f32 and bf16;
 *  - planner: frozen parameters placed and fetched, no reduce-scatter,
 *    accumulation or Adam for them, the plan verified; the verifier rejects
 *    a frozen parameter with optimizer state, an Adam on one, and a plan
 *    with nothing trained;
 *  - train { quantize }: which frozen weights are stored quantized (by
 *    default the repeated blocks' linear weights; quantize_params' patterns),
 *    the errors naming a trained or unfit parameter, and their bytes in the
 *    memory model and in a 2-rank plan's shards (36 per 64 for nf4).
 * Run from the repository root. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "autodiff.h"
#include "loader.h"
#include "memmodel.h"
#include "planner.h"
#include "refexec.h"
#include "sema.h"
#include "target.h"
#include "verify.h"
#include "sema_fixture.h"

/* A two-layer model with the given train block body. */
static void run_train(Run *r, const char *train) {
    char path[128];
    snprintf(path, sizeof path, "%s/main.zl", tmpdir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "import \"nn\"\nconst V = 64, T = 8, D = 32, H = 2\n"
               "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
               "  wte = param [V, D] init normal(0.02)\n  x = embedding(wte, tokens)\n"
               "  repeat 2 { x = block(x, H) }\n  x = ln(x)\n"
               "  loss cross_entropy(matmul(x, wte, transpose_b), targets)\n}\n"
               "train { micro_batch = 2\n%s }\n", train);
    fclose(f);
    run_path(r, path);
}

static void setup(void) { fixture_tmp_make("test_freeze"); }
static void teardown(void) { fixture_tmp_remove(); }

static int find_tensor(const Graph *g, const char *name) {
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].name && strcmp(g->tensors[i].name, name) == 0) return i;
    return -1;
}

static bool frozen(const Graph *g, const char *name) {
    int t = find_tensor(g, name);
    ck_assert_msg(t >= 0, "no tensor %s", name);
    return g->tensors[t].frozen;
}

static void expect_error(const char *train, const char *needle) {
    Run r;
    run_train(&r, train);
    ck_assert_msg(!r.ok, "accepted: %s", train);
    ck_assert_msg(strstr(r.text, needle) != NULL, "diagnostics lack \"%s\"; got:\n%s", needle, r.text);
    run_free(&r);
}

START_TEST(patterns) {
    Run r;
    run_train(&r, "freeze = [\"wte\", \"block.*.attn.*\"]");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert(frozen(&r.g, "wte"));
    ck_assert(frozen(&r.g, "block.0.attn.wqkv") && frozen(&r.g, "block.1.attn.bo"));
    ck_assert(!frozen(&r.g, "block.0.mlp.w1") && !frozen(&r.g, "block.1.ln.g") && !frozen(&r.g, "ln.g"));
    int n;
    ck_assert_int_eq(graph_frozen_count(&r.g, &n), 64 * 32 + 2 * (32 * 96 + 96 + 32 * 32 + 32));
    ck_assert_int_eq(n, 1 + 2 * 4);
    run_free(&r);
    /* a name without '*' is also a prefix ending at a dot; a single string is one pattern */
    run_train(&r, "freeze = \"block.1\"");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert(frozen(&r.g, "block.1.mlp.w2") && frozen(&r.g, "block.1.ln_1.b"));
    ck_assert(!frozen(&r.g, "block.0.mlp.w2") && !frozen(&r.g, "wte"));
    run_free(&r);
    /* nothing frozen: no mark anywhere */
    run_train(&r, "steps = 3");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_int_eq(graph_frozen_count(&r.g, &n), 0);
    ck_assert_int_eq(n, 0);
    run_free(&r);
}
END_TEST

START_TEST(errors) {
    expect_error("freeze = [\"blok.*.attn.*\"]", "freeze: the pattern \"blok.*.attn.*\" matches no parameter; did you mean \"block.*.attn.*\"?");
    expect_error("freeze = [\"wte\", \"block.0.atn\"]", "did you mean \"block.0.attn\"?");
    expect_error("freeze = [\"*\"]", "freeze: every parameter is frozen; nothing would be trained");
    expect_error("freeze = [\"wte\", \"block\", \"ln\"]", "every parameter is frozen");
    expect_error("freeze = 3", "freeze must be a list of parameter patterns");
    expect_error("freeze = [\"wte\", 2]", "freeze must be a list of parameter patterns");
    expect_error("frieze = [\"wte\"]", "unknown train setting 'frieze'; did you mean 'freeze'?");
}
END_TEST

#define PER_PARAM(FLAG_W, FLAG_B) \
    "const V = 32, T = 8, D = 16\nmodel m(tokens: i32[B, T], targets: i32[B, T]) {\n" \
    "  wte = param [V, D] init normal(0.02)" FLAG_W "\n  b = param f32[D] init zeros" FLAG_B "\n" \
    "  x = embedding(wte, tokens) + b\n  loss cross_entropy(matmul(x, wte, transpose_b), targets)\n}\n"

/* param [..] init ... frozen: the per-parameter form, alone and with the
 * train block's; a misspelt word; every parameter frozen this way */
START_TEST(per_param) {
    Run r;
    run_src(&r, PER_PARAM("", " frozen"));
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert(frozen(&r.g, "b") && !frozen(&r.g, "wte"));
    run_free(&r);
    run_src(&r, PER_PARAM(" frozen", " frozen"));
    ck_assert(!r.ok);
    ck_assert_msg(strstr(r.text, "every parameter is frozen") != NULL, "%s", r.text);
    run_free(&r);
    run_src(&r, PER_PARAM("", " froze"));
    ck_assert(!r.ok);
    ck_assert_msg(strstr(r.text, "unexpected 'froze' after the param's initialiser") && strstr(r.text, "did you mean 'frozen'?"), "%s", r.text);
    run_free(&r);
    run_src(&r, PER_PARAM("", " frozen") "train { freeze = [\"wte\"] }\n");
    ck_assert(!r.ok);
    ck_assert_msg(strstr(r.text, "every parameter is frozen") != NULL, "%s", r.text);
    run_free(&r);
}
END_TEST

/* gpt2-tiny with parameters frozen by name prefix (set on the forward graph
 * as sema does), then autodiff. */
typedef struct Model {
    Arena a;
    SourceSet src;
    DiagSink d;
    Graph g;
} Model;

static const char *const FROZEN[] = {"wte", "block.0.", "block.1.attn."};

static bool in_frozen(const char *name) {
    for (size_t k = 0; k < sizeof FROZEN / sizeof FROZEN[0]; k++)
        if (strncmp(name, FROZEN[k], strlen(FROZEN[k])) == 0 && (FROZEN[k][strlen(FROZEN[k]) - 1] == '.' || !name[strlen(FROZEN[k])]))
            return true;
    return false;
}

static void load(Model *m, const char *path, bool freeze, DType dt) {
    arena_init(&m->a);
    source_set_init(&m->src);
    diag_init(&m->d);
    Program prog;
    LoadOptions lo = {.stdlib_dir = ZINF_STDLIB_DIR};
    ck_assert(program_load(&m->a, &m->src, &m->d, path, &lo, &prog));
    Sema *s = sema_new(&m->a, &prog, &m->src, &m->d);
    ck_assert_ptr_nonnull(s);
    TrainConfig *tc = (TrainConfig *)sema_train(s);
    tc->micro_batch = 2;
    if (dt) tc->dtype = dt;
    ck_assert(sema_check(s, &m->g));
    for (int t = 0; freeze && t < m->g.ntensors; t++)
        if (m->g.tensors[t].cls == TC_PARAM && in_frozen(m->g.tensors[t].name)) m->g.tensors[t].frozen = true;
}

static void unload(Model *m) {
    diag_free(&m->d);
    source_set_free(&m->src);
    arena_free(&m->a);
}

START_TEST(training_graph) {
    Model m;
    load(&m, "examples/gpt2-tiny.zl", true, DT_NONE);
    ck_assert(ad_build(&m.g, &m.d));
    const Graph *g = &m.g;
    int nfrozen = 0, ntrain = 0, nadam = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const GTensor *x = &g->tensors[t];
        if (x->cls != TC_PARAM) {
            if (x->param >= 0) ck_assert_msg(!g->tensors[x->param].frozen, "%s is state of a frozen parameter", x->name);
            continue;
        }
        if (x->frozen) {
            nfrozen++;
            ck_assert_int_eq(x->grad, -1);
            ck_assert(x->master < 0 && x->momentum < 0 && x->variance < 0);
        } else {
            ntrain++;
            ck_assert(x->grad >= 0 && x->momentum >= 0 && x->variance >= 0);
        }
    }
    ck_assert_int_gt(nfrozen, 0);
    ck_assert_int_gt(ntrain, 0);
    /* frozen weights are read by backward ops, which write the gradient of
     * what is upstream (x) but not the weight's (-1) */
    int bwd_reading_frozen = 0;
    for (int k = g->nforward; k < g->nops; k++) {
        const GOp *o = &g->ops[k];
        nadam += o->kind == OP_ADAM;
        if (o->kind == OP_ADAM) ck_assert(!g->tensors[o->in[0]].frozen);
        if (o->kind == OP_ZERO_GRAD && o->out[0] >= 0) ck_assert_int_ne(g->tensors[o->out[0]].cls, TC_PARAM);
        if (o->kind != OP_BWD) continue;
        for (int i = 0; i < o->nfin; i++) {
            int x = o->in[i];
            if (x < 0 || g->tensors[x].cls != TC_PARAM || !g->tensors[x].frozen) continue;
            ck_assert_int_eq(o->out[i], -1);
            bool other = false;
            for (int j = 0; j < o->nout; j++) other |= j != i && o->out[j] >= 0;
            bwd_reading_frozen += other;
        }
    }
    ck_assert_int_eq(nadam, ntrain);
    ck_assert_int_gt(bwd_reading_frozen, 0);
    unload(&m);
}
END_TEST

static void fake_batch(const Graph *g, int32_t *tok, int32_t *tgt) {
    uint64_t seed = 11;
    for (int64_t i = 0; i < g->tensors[g->inputs[0]].numel; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((seed >> 33) % 256);
        tgt[i] = (int32_t)((tok[i] * 31 + 7) % 256);
    }
}

/* The trainable parameters' gradients are the unfrozen model's, bit for bit:
 * the backward through frozen layers still runs for what is upstream. */
START_TEST(same_gradients_upstream) {
    Model a, b;
    load(&a, "examples/gpt2-tiny.zl", false, DT_NONE);
    load(&b, "examples/gpt2-tiny.zl", true, DT_NONE);
    ck_assert(ad_build(&a.g, &a.d) && ad_build(&b.g, &b.d));
    RefExec ra, rb;
    ck_assert_int_eq(ref_init(&ra, &a.g, 3), 0);
    ck_assert_int_eq(ref_init(&rb, &b.g, 3), 0);
    int64_t n = a.g.tensors[a.g.inputs[0]].numel;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *tgt = malloc(sizeof(int32_t) * (size_t)n);
    fake_batch(&a.g, tok, tgt);
    float la, lb;
    ck_assert_int_eq(ref_forward_backward(&ra, tok, tgt, 1.0f, &la), 0);
    ck_assert_int_eq(ref_forward_backward(&rb, tok, tgt, 1.0f, &lb), 0);
    ck_assert(la == lb);
    int compared = 0;
    for (int t = 0; t < a.g.ntensors; t++) {
        if (a.g.tensors[t].cls != TC_PARAM || b.g.tensors[t].frozen) continue;
        ck_assert_str_eq(a.g.tensors[t].name, b.g.tensors[t].name);
        int ga = a.g.tensors[t].grad, gb = b.g.tensors[t].grad;
        for (int64_t i = 0; i < a.g.tensors[t].numel; i++)
            ck_assert_msg(ref_get(&ra, ga, i) == ref_get(&rb, gb, i), "%s[%lld] differs", a.g.tensors[t].name, (long long)i);
        compared++;
    }
    ck_assert_int_gt(compared, 0);
    /* a step moves the trainable parameters and not the frozen ones */
    ck_assert_int_eq(ref_optimizer_step(&rb), 0);
    RefExec r0;
    ck_assert_int_eq(ref_init(&r0, &b.g, 3), 0);
    for (int t = 0; t < b.g.ntensors; t++) {
        if (b.g.tensors[t].cls != TC_PARAM) continue;
        bool moved = false;
        for (int64_t i = 0; i < b.g.tensors[t].numel; i++) moved |= ref_get(&rb, t, i) != ref_get(&r0, t, i);
        ck_assert_msg(moved != b.g.tensors[t].frozen, "%s: moved %d, frozen %d", b.g.tensors[t].name, moved, b.g.tensors[t].frozen);
    }
    free(tok);
    free(tgt);
    ref_free(&r0);
    ref_free(&ra);
    ref_free(&rb);
    unload(&a);
    unload(&b);
}
END_TEST

/* Bytes: the frozen parameters' gradient (their dtype) + master (mixed) +
 * momentum + variance, exactly; forward and training graph agree. */
static void memory_case(DType dt, int ranks) {
    Model a, b, c;
    load(&a, "examples/gpt2-tiny.zl", false, dt);
    load(&b, "examples/gpt2-tiny.zl", true, dt);
    load(&c, "examples/gpt2-tiny.zl", true, dt);
    MemOptions o;
    memmodel_options_default(&o);
    o.ranks = ranks;
    o.whole_below = 1000;
    MemModel fwd, ma, mb;
    ck_assert_int_eq(memmodel_compute(&c.g, &o, &fwd), 0);
    ck_assert(ad_build(&a.g, &a.d) && ad_build(&b.g, &b.d));
    ck_assert_int_eq(memmodel_compute(&a.g, &o, &ma), 0);
    ck_assert_int_eq(memmodel_compute(&b.g, &o, &mb), 0);
    int64_t per = (dt == DT_F32 ? 4 : 2) + (dt == DT_F32 ? 0 : 4) + 8;
    int64_t fz = graph_frozen_count(&b.g, NULL);
    ck_assert_int_eq(ma.nfrozen, 0);
    ck_assert_int_eq(mb.frozen_params, fz);
    ck_assert_int_eq(mb.frozen_saved, fz * per);
    ck_assert_int_eq(ma.model_states_alloc - mb.model_states_alloc, mb.frozen_saved);
    ck_assert_int_eq(ma.model_states_alloc_rank - mb.model_states_alloc_rank, mb.frozen_saved_rank);
    if (ranks == 1) ck_assert_int_eq(mb.frozen_saved_rank, mb.frozen_saved);
    else ck_assert_int_lt(mb.frozen_saved_rank, mb.frozen_saved);
    ck_assert_int_eq(ma.params, mb.params);
    ck_assert_int_eq(ma.model[TC_PARAM], mb.model[TC_PARAM]);
    /* the forward graph derives the same */
    ck_assert_int_eq(fwd.frozen_saved, mb.frozen_saved);
    ck_assert_int_eq(fwd.frozen_saved_rank, mb.frozen_saved_rank);
    ck_assert_int_eq(fwd.model_states_alloc, mb.model_states_alloc);
    ck_assert_int_eq(fwd.model_states_alloc_rank, mb.model_states_alloc_rank);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    memmodel_print(&mb, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "frozen: "));
    ck_assert_ptr_nonnull(strstr(text, "no gradient or optimizer state"));
    free(text);
    unload(&a);
    unload(&b);
    unload(&c);
}

START_TEST(memory_saved) {
    memory_case(DT_F32, 1);
    memory_case(DT_BF16, 4);
}
END_TEST

static Plan *plan_for(Model *m, const char *target, int ranks, PlannerResult *r) {
    ck_assert(ad_build(&m->g, &m->d));
    Target t;
    ck_assert(target_builtin(target, &t));
    PlannerOptions o;
    planner_options_default(&o);
    o.ranks = ranks;
    o.whole_below = 1000;
    ck_assert_msg(planner_run(&m->g, &t, &o, &m->a, &m->d, r), "planner failed");
    char msgs[2048];
    ck_assert_msg(verify_plan(r->plan, msgs, sizeof msgs) == 0, "%s", msgs);
    return r->plan;
}

START_TEST(plan_instructions) {
    Model m;
    load(&m, "examples/gpt2-tiny.zl", true, DT_NONE);
    PlannerResult r;
    Plan *p = plan_for(&m, "host", 2, &r);
    bool *fetched = calloc(p->nbuffers + 1, sizeof *fetched);
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op == PI_REDUCE_SCATTER || s->op == PI_ACCUM || s->op == PI_CPU_ADAM || s->op == PI_GPU_ADAM) {
            const PlanTensor *t = &p->tensors[s->arg];
            int param = t->cls == TC_PARAM ? s->arg : t->param;
            ck_assert_msg(param >= 0 && p->tensors[param].grad >= 0, "%s on '%s'", plan_opcode_names[s->op], t->name);
        }
        for (uint32_t k = 0; k < s->nopnd; k++) fetched[p->operands[s->opnd + k].buffer + 1] = true;
    }
    int nfrozen = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const PlanTensor *x = &p->tensors[t];
        if (x->cls != TC_PARAM || x->grad >= 0) continue;
        nfrozen++;
        ck_assert_int_ge(x->shard, 0); /* placed like any parameter, and read */
        ck_assert_msg(fetched[p->shards[x->shard].buffer + 1], "%s is never read", x->name);
    }
    int gfrozen;
    graph_frozen_count(&m.g, &gfrozen);
    ck_assert_int_eq(nfrozen, gfrozen);
    ck_assert_int_gt(nfrozen, 0);
    free(fetched);
    /* the verifier: optimizer state on a frozen parameter, an Adam on one, nothing trained */
    char msgs[2048];
    int fz = -1, tr = -1;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        if (p->tensors[t].cls != TC_PARAM) continue;
        if (p->tensors[t].grad < 0 && fz < 0) fz = (int)t;
        if (p->tensors[t].grad >= 0 && tr < 0) tr = (int)t;
    }
    p->tensors[fz].momentum = p->tensors[tr].momentum;
    ck_assert_int_gt(verify_plan(p, msgs, sizeof msgs), 0);
    ck_assert_ptr_nonnull(strstr(msgs, "has optimizer state"));
    p->tensors[fz].momentum = -1;
    int32_t g = p->tensors[tr].grad;
    p->tensors[tr].grad = -1;
    ck_assert_int_gt(verify_plan(p, msgs, sizeof msgs), 0);
    ck_assert_ptr_nonnull(strstr(msgs, "steps the frozen parameter"));
    p->tensors[tr].grad = g;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].cls == TC_PARAM) p->tensors[t].grad = -1, p->tensors[t].master = p->tensors[t].momentum = p->tensors[t].variance = -1;
    ck_assert_int_gt(verify_plan(p, msgs, sizeof msgs), 0);
    ck_assert_ptr_nonnull(strstr(msgs, "every parameter is frozen"));
    plan_free(p);
    unload(&m);
}
END_TEST

static DType dtype_of(const Graph *g, const char *name) {
    int t = find_tensor(g, name);
    ck_assert_msg(t >= 0, "no tensor %s", name);
    return g->tensors[t].dtype;
}

START_TEST(quantized) {
    Run r;
    run_train(&r, "freeze = [\"*\", \"!ln.*\"]\nquantize = \"nf4\"");
    ck_assert_msg(r.ok, "%s", r.text);
    const char *q[] = {"block.0.attn.wqkv", "block.0.attn.wo", "block.1.mlp.w1", "block.1.mlp.w2"};
    for (int i = 0; i < 4; i++) ck_assert_msg(dtype_of(&r.g, q[i]) == DT_NF4, "%s", q[i]);
    /* the embedding (also the head here), norms and biases stay f32 */
    const char *f[] = {"wte", "block.0.ln.g", "block.0.attn.bqkv", "block.1.mlp.b1", "ln.g"};
    for (int i = 0; i < 5; i++) ck_assert_msg(dtype_of(&r.g, f[i]) == DT_F32, "%s", f[i]);
    /* the memory model counts 36 bytes per 64 quantized weights */
    ck_assert(ad_build(&r.g, &r.d));
    MemModel mm;
    MemOptions mo;
    memmodel_options_default(&mo);
    ck_assert_int_eq(memmodel_compute(&r.g, &mo, &mm), 0);
    int64_t pbytes = 0;
    for (int t = 0; t < r.g.ntensors; t++) {
        const GTensor *x = &r.g.tensors[t];
        if (x->cls == TC_PARAM) pbytes += x->dtype == DT_NF4 ? x->numel / 64 * 36 : x->numel * 4;
    }
    ck_assert_int_eq(mm.model[TC_PARAM], pbytes);
    /* a 2-rank plan: the quantized weights' shards are whole blocks, their bytes the blocks' */
    Target t;
    ck_assert(target_builtin("host", &t));
    PlannerOptions o;
    planner_options_default(&o);
    o.ranks = 2;
    o.whole_below = 1000;
    PlannerResult pr;
    ck_assert_msg(planner_run(&r.g, &t, &o, &r.a, &r.d, &pr), "planner failed");
    char msgs[2048];
    ck_assert_msg(verify_plan(pr.plan, msgs, sizeof msgs) == 0, "%s", msgs);
    int nq = 0;
    for (uint32_t k = 0; k < pr.plan->ntensors; k++) {
        const PlanTensor *x = &pr.plan->tensors[k];
        if (x->dtype != DT_NF4) continue;
        const PlanShard *sh = &pr.plan->shards[x->shard];
        ck_assert(sh->partitioned && sh->tile_shard % 64 == 0);
        ck_assert_uint_eq(sh->bytes, (uint64_t)sh->ntiles * (uint64_t)(sh->tile_shard / 64 * 36));
        nq++;
    }
    ck_assert_int_eq(nq, 8);
    plan_free(pr.plan);
    run_free(&r);
    /* quantize_params: a pattern list, "!" taking one out */
    run_train(&r, "freeze = [\"block.*\"]\nquantize = \"int8\"\nquantize_params = [\"*.attn.w*\", \"!block.1.*\"]");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert(dtype_of(&r.g, "block.0.attn.wqkv") == DT_INT8 && dtype_of(&r.g, "block.0.attn.wo") == DT_INT8);
    ck_assert(dtype_of(&r.g, "block.1.attn.wqkv") == DT_F32 && dtype_of(&r.g, "block.0.mlp.w1") == DT_F32);
    run_free(&r);
}
END_TEST

START_TEST(quantize_errors) {
    expect_error("freeze = [\"*\", \"!ln.*\"]\nquantize = \"fp4\"", "quantize must be \"nf4\", \"int8\" or \"none\"");
    expect_error("quantize = \"nf4\"", "quantize: no frozen linear weight to store quantized");
    expect_error("freeze = [\"block.*\"]\nquantize = \"nf4\"\nquantize_params = [\"block.0.attn.wqkv\", \"ln.g\"]",
                 "quantize: cannot store 'ln.g' quantized: it is trained (only frozen parameters are stored quantized: add it to freeze)");
    expect_error("freeze = [\"block.*\"]\nquantize = \"nf4\"\nquantize_params = [\"block.0.attn.bqkv\"]",
                 "cannot store 'block.0.attn.bqkv' quantized: only the weights of linear and matmul are stored quantized");
    expect_error("freeze = [\"block.*\"]\nquantize = \"nf4\"\nquantize_params = [\"block.0.atn.*\"]",
                 "the pattern \"block.0.atn.*\" matches no parameter; did you mean \"block.0.attn.*\"?");
    expect_error("freeze = [\"block.*\"]\nquantize_params = [\"block.0.attn.wo\"]", "quantize_params without quantize");
}
END_TEST

Suite *freeze_suite(void) {
    Suite *s = suite_create("freeze");
    TCase *t = tcase_create("core");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, patterns);
    tcase_add_test(t, errors);
    tcase_add_test(t, per_param);
    tcase_add_test(t, training_graph);
    tcase_add_test(t, same_gradients_upstream);
    tcase_add_test(t, memory_saved);
    tcase_add_test(t, plan_instructions);
    tcase_add_test(t, quantized);
    tcase_add_test(t, quantize_errors);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(freeze_suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
