/* memmodel: the paper's Table 1 from the closed forms (to the printed
 * decimals), and counted graphs (GPT-like layers built by hand, before and
 * after autodiff) against independently worked-out byte counts. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include "autodiff.h"
#include "loader.h"
#include "sema.h"
#include "memmodel.h"
#include "planner.h"
#include "target.h"

static const double TiB = 1099511627776.0, GiB = 1073741824.0;

static const char *fmt2(double v, char *buf) {
    snprintf(buf, 32, "%.2f", v);
    return buf;
}

/* ---- closed forms: the paper's printed cells ---- */

START_TEST(table1_params_and_model_states) {
    /* Table 1: parameters (trillions) and model states (TB = 2^40 bytes) */
    static const char *const params[] = {"0.10", "0.50", "1.01", "10.05", "101.47"};
    static const char *const states[] = {"1.83", "9.16", "18.31", "182.81", "1845.70"};
    Table1Assume as;
    memmodel_table1_assume_default(&as);
    for (int i = 0; i < MEM_TABLE1_ROWS; i++) {
        const Table1Shape *s = &memmodel_table1_shapes[i];
        Table1Row r;
        char b[32];
        ck_assert(memmodel_table1_row(s, &as, &r));
        ck_assert_int_eq(r.params, 12 * s->layers * s->hidden * s->hidden);
        ck_assert_int_eq(r.model_states, 240 * s->layers * s->hidden * s->hidden);
        ck_assert_str_eq(fmt2((double)r.params / 1e12, b), params[i]);
        ck_assert_str_eq(fmt2((double)r.model_states / TiB, b), states[i]);
    }
    /* the shapes themselves: K = 1024 */
    ck_assert_int_eq(memmodel_table1_shapes[0].hidden, 10240);
    ck_assert_int_eq(memmodel_table1_shapes[4].hidden, 163840);
    ck_assert_int_eq(memmodel_table1_shapes[4].heads, 1024);
}
END_TEST

START_TEST(table1_working_memory) {
    /* 4 * hd * 4hd bytes: fp16 parameters and gradients of the hd x 4hd linear */
    static const char *const gb[] = {"1.56", "6.25", "9.77", "64.00", "400.00"};
    Table1Assume as;
    memmodel_table1_assume_default(&as);
    for (int i = 0; i < MEM_TABLE1_ROWS; i++) {
        Table1Row r;
        char b[32];
        ck_assert(memmodel_table1_row(&memmodel_table1_shapes[i], &as, &r));
        int64_t hd = memmodel_table1_shapes[i].hidden;
        ck_assert_int_eq(r.ms_working_gpu, 2 * 2 * hd * 4 * hd);
        ck_assert_str_eq(fmt2((double)r.ms_working_gpu / GiB, b), gb[i]);
    }
    /* the 64K row: 64 GiB whole, so the paper tiles it 16 ways (4 GiB a tile) */
    Table1Row r;
    ck_assert(memmodel_table1_row(&memmodel_table1_shapes[3], &as, &r));
    ck_assert_int_eq(r.ms_working_gpu / 16, 4 * (int64_t)GiB);
}
END_TEST

START_TEST(table1_activations) {
    /* batch 32 per node (2 per GPU on 16 GPUs), seq 1024, a checkpoint per layer */
    Table1Assume as;
    memmodel_table1_assume_default(&as);
    ck_assert_int_eq(as.batch_per_node, 32);
    ck_assert_int_eq(as.batch_per_gpu, 2);
    ck_assert_int_eq(as.seq, 1024);
    ck_assert_int_eq(as.ci, 1);
    static const char *const ckpt[] = {"0.05", "0.12", "0.20", "0.76", "3.08"};
    static const char *const awm[] = {"0.81", "1.25", "1.78", "4.00", "9.00"};
    /* worked out by hand: 2*32*1024*hd*nl and 2*1024*(16*hd + 2*heads*1024) */
    static const int64_t ckpt_bytes[] = {53687091200LL, 134217728000LL, 214748364800LL, 837518622720LL, 3382286745600LL};
    static const int64_t awm_bytes[] = {872415232LL, 1342177280LL, 1912602624LL, 4294967296LL, 9663676416LL};
    for (int i = 0; i < MEM_TABLE1_ROWS; i++) {
        Table1Row r;
        char b[32];
        ck_assert(memmodel_table1_row(&memmodel_table1_shapes[i], &as, &r));
        ck_assert_int_eq(r.act_ckpt_node, ckpt_bytes[i]);
        ck_assert_int_eq(r.act_working_gpu, awm_bytes[i]);
        ck_assert_str_eq(fmt2((double)r.act_ckpt_node / TiB, b), ckpt[i]);
        ck_assert_str_eq(fmt2((double)r.act_working_gpu / GiB, b), awm[i]);
    }
    /* ci = 5 on 80 layers: checkpoints / 5, working memory * 5 */
    Table1Row r1, r5;
    ck_assert(memmodel_table1_row(&memmodel_table1_shapes[0], &as, &r1));
    as.ci = 5;
    ck_assert(memmodel_table1_row(&memmodel_table1_shapes[0], &as, &r5));
    ck_assert_int_eq(r5.act_ckpt_node * 5, r1.act_ckpt_node);
    ck_assert_int_eq(r5.act_working_gpu, 5 * r1.act_working_gpu);
    ck_assert_int_eq(r5.model_states, r1.model_states);
}
END_TEST

START_TEST(table1_bad_inputs) {
    Table1Assume as;
    memmodel_table1_assume_default(&as);
    Table1Row r = {.params = 77};
    Table1Shape s = {80, 10240, 128};
    as.ci = 3; /* does not divide 80 */
    ck_assert(!memmodel_table1_row(&s, &as, &r));
    as.ci = 0;
    ck_assert(!memmodel_table1_row(&s, &as, &r));
    as.ci = 1;
    s.hidden = 0;
    ck_assert(!memmodel_table1_row(&s, &as, &r));
    s.hidden = (int64_t)1 << 31; /* 240 * 80 * 2^62 overflows */
    ck_assert(!memmodel_table1_row(&s, &as, &r));
    ck_assert(!memmodel_table1_row(NULL, &as, &r));
    ck_assert_int_eq(r.params, 77); /* untouched */
}
END_TEST

START_TEST(table1_print_golden) {
    Table1Assume as;
    memmodel_table1_assume_default(&as);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    memmodel_table1_print(&as, f);
    fclose(f);
    const char *want =
        "| Params (T) | Layers | Hidden | Heads | Model states (TB/model) | MS working mem (GB/GPU) | Act. ckpt (TB/node) | Act. working mem (GB/GPU) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        "| 0.10 | 80 | 10K | 128 | 1.83 | 1.56 | 0.05 | 0.81 |\n"
        "| 0.50 | 100 | 20K | 160 | 9.16 | 6.25 | 0.12 | 1.25 |\n"
        "| 1.01 | 128 | 25K | 256 | 18.31 | 9.77 | 0.20 | 1.78 |\n"
        "| 10.05 | 195 | 64K | 512 | 182.81 | 64.00 | 0.76 | 4.00 |\n"
        "| 101.47 | 315 | 160K | 1024 | 1845.70 | 400.00 | 3.08 | 9.00 |\n";
    ck_assert_str_eq(buf, want);
    free(buf);
}
END_TEST

START_TEST(human_units) {
    char b[32];
    ck_assert_str_eq(memmodel_human(0, b, sizeof b), "0.00 B");
    ck_assert_str_eq(memmodel_human(1023, b, sizeof b), "1023.00 B");
    ck_assert_str_eq(memmodel_human(1536, b, sizeof b), "1.50 KiB");
    ck_assert_str_eq(memmodel_human((int64_t)400 << 30, b, sizeof b), "400.00 GiB");
    ck_assert_str_eq(memmodel_human(240LL * 80 * 10240 * 10240, b, sizeof b), "1.83 TiB");
    ck_assert_str_eq(memmodel_human((int64_t)3 << 50, b, sizeof b), "3.00 PiB");
}
END_TEST

/* ---- a GPT-like forward graph built by hand ---- */

typedef struct Gpt {
    int64_t B, T, D, H, V, L;
    DType dt;
    int64_t ckpt_every;
} Gpt;

static int ten(Graph *g, const char *name, DType dt, int rank, int64_t a, int64_t b, int64_t c, TensorClass cls, int seg) {
    int64_t dims[3] = {a, b, c};
    int t = graph_add_tensor(g, name, dt, rank, dims, cls);
    ck_assert_int_ge(t, 0);
    g->tensors[t].segment = seg;
    if (cls == TC_PARAM) {
        g->tensors[t].init = INIT_NORMAL;
        g->tensors[t].init_std = 0.02;
    }
    return t;
}

static int opn(Graph *g, PrimId prim, int seg, const int *in, int nin, const int *out, int nout) {
    GOp o;
    memset(&o, 0, sizeof o);
    o.kind = OP_FWD;
    o.prim = prim;
    o.segment = seg;
    o.fwd = -1;
    o.scope = "";
    o.span = SPAN_NONE;
    for (int i = 0; i < GRAPH_MAX_IN; i++) o.in[i] = i < nin ? in[i] : -1;
    for (int i = 0; i < GRAPH_MAX_OUT; i++) o.out[i] = i < nout ? out[i] : -1;
    o.nin = nin;
    o.nout = nout;
    if (prim == PRIM_LAYERNORM) o.fattr[FA_LAYERNORM_EPS] = 1e-5;
    int k = graph_add_op(g, &o);
    ck_assert_int_ge(k, 0);
    return k;
}

#define IN(...) (const int[]){__VA_ARGS__}, (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int))

/* Per layer: ln1, qkv linear, split, attention, output linear, residual,
 * ln2, fc1 linear, gelu, fc2 linear, residual: 12 D^2 + 13 D parameters,
 * 21 B*T*D activation elements (the last one, the layer's output, is the
 * next group's checkpoint). Returns the fc1 op index of layer 0. */
static int build_gpt(Graph *g, Arena *a, Gpt s) {
    graph_init(g, a);
    g->model_name = "gpt-test";
    g->train.micro_batch = s.B;
    g->train.steps = 1;
    g->train.dtype = s.dt;
    g->train.lr = 1e-3;
    g->train.beta1 = 0.9;
    g->train.beta2 = 0.95;
    g->train.eps = 1e-8;
    g->train.min_lr = 1e-3;
    g->train.loss_scale = 1;
    g->train.grad_accum = 1;
    g->train.checkpoint_every = s.ckpt_every;
    int64_t B = s.B, T = s.T, D = s.D, V = s.V;
    int tok = ten(g, "tokens", DT_I32, 2, B, T, 0, TC_INPUT, -1);
    int tgt = ten(g, "targets", DT_I32, 2, B, T, 0, TC_INPUT, -1);
    g->inputs[0] = tok;
    g->inputs[1] = tgt;
    g->ninputs = 2;
    int wte = ten(g, "wte", s.dt, 2, V, D, 0, TC_PARAM, -1);
    int x = ten(g, "%x0", s.dt, 3, B, T, D, TC_ACT, -1);
    opn(g, PRIM_EMBEDDING, -1, IN(wte, tok), &x, 1);
    int fc1 = -1;
    for (int l = 0; l < s.L; l++) {
#define P(nm, r, d0, d1) ten(g, arena_printf(a, "block.%d." nm, l), s.dt, r, d0, d1, 0, TC_PARAM, l)
#define A(w) ten(g, arena_printf(a, "%%a%d", g->ntensors), s.dt, 3, B, T, (w), TC_ACT, l)
        int g1 = P("ln1.g", 1, D, 0), b1 = P("ln1.b", 1, D, 0);
        int wqkv = P("attn.wqkv", 2, D, 3 * D), bqkv = P("attn.bqkv", 1, 3 * D, 0);
        int wo = P("attn.wo", 2, D, D), bo = P("attn.bo", 1, D, 0);
        int g2 = P("ln2.g", 1, D, 0), b2 = P("ln2.b", 1, D, 0);
        int w1 = P("mlp.w1", 2, D, 4 * D), bb1 = P("mlp.b1", 1, 4 * D, 0);
        int w2 = P("mlp.w2", 2, 4 * D, D), bb2 = P("mlp.b2", 1, D, 0);
        int a1 = A(D);
        opn(g, PRIM_LAYERNORM, l, IN(x, g1, b1), &a1, 1);
        int qkv = A(3 * D);
        opn(g, PRIM_LINEAR, l, IN(a1, wqkv, bqkv), &qkv, 1);
        int q = A(D), k = A(D), v = A(D);
        int k_split = opn(g, PRIM_SPLIT, l, IN(qkv), IN(q, k, v));
        g->ops[k_split].iattr[IA_SPLIT_N] = 3;
        int at = A(D);
        int k_att = opn(g, PRIM_ATTENTION, l, IN(q, k, v), &at, 1);
        g->ops[k_att].iattr[IA_ATTENTION_HEADS] = s.H;
        g->ops[k_att].iattr[IA_ATTENTION_KV_HEADS] = s.H;
        int pr = A(D);
        opn(g, PRIM_LINEAR, l, IN(at, wo, bo), &pr, 1);
        int x1 = A(D);
        opn(g, PRIM_ADD, l, IN(x, pr), &x1, 1);
        int a2 = A(D);
        opn(g, PRIM_LAYERNORM, l, IN(x1, g2, b2), &a2, 1);
        int h = A(4 * D);
        int kf = opn(g, PRIM_LINEAR, l, IN(a2, w1, bb1), &h, 1);
        if (l == 0) fc1 = kf;
        int hg = A(4 * D);
        opn(g, PRIM_GELU, l, IN(h), &hg, 1);
        int y = A(D);
        opn(g, PRIM_LINEAR, l, IN(hg, w2, bb2), &y, 1);
        int x2 = A(D);
        opn(g, PRIM_ADD, l, IN(x1, y), &x2, 1);
        x = x2;
#undef P
#undef A
    }
    g->nsegments = (int)s.L;
    int gf = ten(g, "lnf.g", s.dt, 1, D, 0, 0, TC_PARAM, -1), bf = ten(g, "lnf.b", s.dt, 1, D, 0, 0, TC_PARAM, -1);
    int xf = ten(g, "%xf", s.dt, 3, B, T, D, TC_ACT, -1);
    opn(g, PRIM_LAYERNORM, -1, IN(x, gf, bf), &xf, 1);
    int logits = ten(g, "%logits", s.dt, 3, B, T, V, TC_ACT, -1);
    int km = opn(g, PRIM_MATMUL, -1, IN(xf, wte), &logits, 1);
    g->ops[km].iattr[IA_MATMUL_TRANSPOSE_B] = 1;
    int loss = ten(g, "%loss", DT_F32, 0, 0, 0, 0, TC_ACT, -1);
    opn(g, PRIM_CROSS_ENTROPY, -1, IN(logits, tgt), &loss, 1);
    g->loss = loss;
    g->nforward = g->nops;
    return fc1;
}

static int64_t gpt_params(Gpt s) { return s.L * (12 * s.D * s.D + 13 * s.D) + s.V * s.D + 2 * s.D; }

static Gpt small(void) { return (Gpt){.B = 2, .T = 16, .D = 64, .H = 4, .V = 128, .L = 4, .dt = DT_BF16, .ckpt_every = 1}; }

static void compute_ok(const Graph *g, const MemOptions *o, MemModel *m) {
    int rc = memmodel_compute(g, o, m);
    ck_assert_msg(rc == 0, "%s", m->err);
}

START_TEST(graph_model_states_mixed) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = small();
    build_gpt(&g, &a, s);
    MemModel m;
    compute_ok(&g, NULL, &m);
    int64_t P = gpt_params(s);
    ck_assert(!m.training_graph);
    ck_assert(m.mixed);
    ck_assert_int_eq(m.params, P);
    ck_assert_int_eq(m.nparam_tensors, 12 * 4 + 3);
    ck_assert_int_eq(m.model[TC_PARAM], 2 * P);
    ck_assert_int_eq(m.model[TC_GRAD], 2 * P);
    ck_assert_int_eq(m.model[TC_MASTER], 4 * P);
    ck_assert_int_eq(m.model[TC_MOMENTUM], 4 * P);
    ck_assert_int_eq(m.model[TC_VARIANCE], 4 * P);
    ck_assert_int_eq(m.grad32_model, 4 * P);
    ck_assert_int_eq(m.model_states, 20 * P);
    ck_assert_int_eq(m.model_states_alloc, 16 * P);
    /* one rank: per rank is the whole model */
    ck_assert_int_eq(m.model_states_rank, m.model_states);
    for (int c = TC_PARAM; c <= TC_VARIANCE; c++) ck_assert_int_eq(m.rank[c], m.model[c]);
    arena_free(&a);
}
END_TEST

START_TEST(graph_model_states_f32) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = small();
    s.dt = DT_F32;
    build_gpt(&g, &a, s);
    MemModel m;
    compute_ok(&g, NULL, &m);
    int64_t P = gpt_params(s);
    ck_assert(!m.mixed);
    ck_assert_int_eq(m.model[TC_MASTER], 0);
    ck_assert_int_eq(m.grad32_model, 0);
    ck_assert_int_eq(m.model_states, 16 * P);
    ck_assert_int_eq(m.model_states_alloc, 16 * P);
    /* f32 activations: 4 bytes each */
    ck_assert_int_eq(m.rank[TC_CKPT], (s.L + 1) * s.B * s.T * s.D * 4);
    arena_free(&a);
}
END_TEST

START_TEST(graph_matches_closed_form_table1_shapes) {
    /* every Table 1 shape as a real graph (tensors only cost their
     * descriptors): params within 1% of 12*nl*hd^2, model states within 1% of
     * the paper's cell; without the embedding and biases, to the byte */
    Table1Assume as;
    memmodel_table1_assume_default(&as);
    for (int i = 0; i < MEM_TABLE1_ROWS; i++) {
        const Table1Shape *sh = &memmodel_table1_shapes[i];
        Arena a;
        arena_init(&a);
        Graph g;
        Gpt s = {.B = 1, .T = 1024, .D = sh->hidden, .H = sh->heads, .V = 50304, .L = sh->layers, .dt = DT_F16, .ckpt_every = 1};
        build_gpt(&g, &a, s);
        MemModel m;
        compute_ok(&g, NULL, &m);
        Table1Row r;
        ck_assert(memmodel_table1_row(sh, &as, &r));
        double dp = (double)(m.params - r.params) / (double)r.params;
        double ds = (double)(m.model_states - r.model_states) / (double)r.model_states;
        ck_assert_msg(dp >= 0 && dp < 0.01, "row %d: params %lld vs %lld", i, (long long)m.params, (long long)r.params);
        ck_assert_msg(ds >= 0 && ds < 0.01, "row %d: model states off by %g", i, ds);
        int64_t extra = s.L * 13 * s.D + s.V * s.D + 2 * s.D;
        ck_assert_int_eq(m.params - extra, r.params);
        ck_assert_int_eq(m.model_states - 20 * extra, r.model_states);
        /* working memory: fc1 with its bias = closed form + 4 bytes * 4hd,
         * unless the 50304-word embedding (tied head) is larger (10K row) */
        int64_t fc1 = r.ms_working_gpu + 4 * 4 * s.D, emb = s.V * s.D * 4;
        ck_assert_int_eq(m.ms_working, fc1 > emb ? fc1 : emb);
        arena_free(&a);
    }
}
END_TEST

START_TEST(graph_sharding_per_rank) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = small();
    s.D = 256; /* wqkv 196608, w1, w2 262144 elements: over the 100000 threshold; wo 65536 stays whole */
    s.L = 1;
    s.V = 64;
    build_gpt(&g, &a, s);
    MemOptions o;
    memmodel_options_default(&o);
    o.ranks = 5;
    MemModel m;
    compute_ok(&g, &o, &m);
    ck_assert_int_eq(m.nsharded, 3);
    /* ceil(196608/5) = 39322 -> 40960; ceil(262144/5) = 52429 -> 53248 */
    int64_t sharded = 40960 + 2 * 53248;
    int64_t whole = m.params - 196608 - 2 * 262144;
    ck_assert_int_eq(m.rank[TC_PARAM], 2 * (sharded + whole));
    ck_assert_int_eq(m.rank[TC_GRAD], 2 * (sharded + whole));
    ck_assert_int_eq(m.rank[TC_MASTER], 4 * (sharded + whole));
    ck_assert_int_eq(m.rank[TC_VARIANCE], 4 * (sharded + whole));
    ck_assert_int_eq(m.model_states_rank, 20 * (sharded + whole));
    ck_assert_int_eq(m.model[TC_PARAM], 2 * m.params); /* whole model unpadded */
    /* every shard's byte size is a multiple of 4096 */
    ck_assert_int_eq((40960 * 2) % 4096, 0);
    /* lower the threshold: everything splits; a 256-element bias becomes one 2048-element shard */
    o.whole_below = 1;
    compute_ok(&g, &o, &m);
    ck_assert_int_eq(m.nsharded, m.nparam_tensors);
    o.ranks = 4;
    o.whole_below = 1;
    Graph g1;
    graph_init(&g1, &a);
    int64_t d1[1] = {256}, d2[2] = {256, 768};
    graph_add_tensor(&g1, "b", DT_BF16, 1, d1, TC_PARAM);
    graph_add_tensor(&g1, "w", DT_BF16, 2, d2, TC_PARAM);
    compute_ok(&g1, &o, &m);
    ck_assert_int_eq(m.rank[TC_PARAM], 2 * (2048 + 49152)); /* 196608 / 4 = 49152 = 24 * 2048 */
    ck_assert_int_eq(m.rank[TC_MOMENTUM], 4 * (2048 + 49152));
    /* per node: 4 ranks on 2 nodes */
    o.nodes = 2;
    compute_ok(&g1, &o, &m);
    ck_assert_int_eq(m.nodes, 2);
    arena_free(&a);
}
END_TEST

START_TEST(graph_activations) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = small();
    build_gpt(&g, &a, s);
    int64_t btd = s.B * s.T * s.D;
    int64_t outside = (btd + s.B * s.T * s.V) * 2 + 4; /* final layernorm, logits (bf16), loss (f32) */
    MemModel m;
    compute_ok(&g, NULL, &m); /* checkpoint every layer */
    ck_assert_int_eq(m.ci, 1);
    ck_assert_int_eq(m.ngroups, 4);
    ck_assert_int_eq(m.rank[TC_CKPT], (s.L + 1) * btd * 2);
    ck_assert_int_eq(m.act_working, 20 * btd * 2);
    ck_assert_int_eq(m.act_kept, (s.L + 1) * btd * 2 + outside);
    ck_assert_int_eq(m.rank[TC_ACT] + m.rank[TC_CKPT], (s.L * 21 + 1) * btd * 2 + outside);
    ck_assert_int_eq(m.rank[TC_INPUT], 2 * s.B * s.T * 4);
    ck_assert_int_eq(m.model[TC_CKPT], m.rank[TC_CKPT]); /* one rank */

    /* every 2 layers: 2 groups, 3 checkpoints, the working set doubles */
    MemOptions o;
    memmodel_options_default(&o);
    o.ci = 2;
    compute_ok(&g, &o, &m);
    ck_assert_int_eq(m.ngroups, 2);
    ck_assert_int_eq(m.rank[TC_CKPT], 3 * btd * 2);
    ck_assert_int_eq(m.act_working, (2 * 21 - 1) * btd * 2);

    /* no checkpointing: everything is kept, nothing recomputed */
    o.ci = -1;
    compute_ok(&g, &o, &m);
    ck_assert_int_eq(m.ci, 0);
    ck_assert_int_eq(m.rank[TC_CKPT], 0);
    ck_assert_int_eq(m.act_working, 0);
    ck_assert_int_eq(m.act_kept, (s.L * 21 + 1) * btd * 2 + outside);

    /* 8 ranks: activations per rank unchanged, whole job 8x */
    o.ci = 0;
    o.ranks = 8;
    compute_ok(&g, &o, &m);
    ck_assert_int_eq(m.rank[TC_CKPT], (s.L + 1) * btd * 2);
    ck_assert_int_eq(m.model[TC_CKPT], 8 * m.rank[TC_CKPT]);
    arena_free(&a);
}
END_TEST

START_TEST(graph_batch_and_seq_override) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = small();
    build_gpt(&g, &a, s);
    MemModel m0, m;
    compute_ok(&g, NULL, &m0);
    MemOptions o;
    memmodel_options_default(&o);
    o.micro_batch = 8; /* 4x the graph's 2 */
    o.seq = 64;        /* 4x the graph's 16 */
    compute_ok(&g, &o, &m);
    ck_assert_int_eq(m.micro_batch, 8);
    ck_assert_int_eq(m.seq, 64);
    ck_assert_int_eq(m.rank[TC_CKPT], 16 * m0.rank[TC_CKPT]);
    ck_assert_int_eq(m.act_working, 16 * m0.act_working);
    ck_assert_int_eq(m.act_kept - 4, 16 * (m0.act_kept - 4)); /* the scalar loss does not scale */
    ck_assert_int_eq(m.rank[TC_INPUT], 16 * m0.rank[TC_INPUT]);
    ck_assert_int_eq(m.model_states, m0.model_states); /* parameters untouched */
    arena_free(&a);
}
END_TEST

START_TEST(graph_working_memory_op) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = small();
    int fc1 = build_gpt(&g, &a, s);
    MemModel m;
    compute_ok(&g, NULL, &m);
    ck_assert_int_eq(m.ms_working_op, fc1);
    ck_assert_int_eq(m.ms_working, (s.D * 4 * s.D + 4 * s.D) * 2 * 2);
    /* a vocabulary larger than 4D: the embedding (and the tied head) wins */
    s.V = 1000;
    build_gpt(&g, &a, s);
    compute_ok(&g, NULL, &m);
    ck_assert_int_eq(m.ms_working_op, 0);
    ck_assert_int_eq(m.ms_working, s.V * s.D * 4);
    arena_free(&a);
}
END_TEST

/* After autodiff the same figures come from the training graph's own
 * gradient, master, moment tensors and TC_CKPT marks, whatever the
 * moments' storage (train { optimizer = adam(state) }). */
START_TEST(training_graph_agrees) {
    for (int st = 0; st < OPT_NSTATES; st++)
    for (int dt = 0; dt < 2; dt++)
        for (int ci = 0; ci <= 2; ci++) {
            Arena a;
            arena_init(&a);
            Graph g;
            Gpt s = small();
            s.dt = dt ? DT_F32 : DT_BF16;
            s.ckpt_every = ci;
            build_gpt(&g, &a, s);
            g.train.opt_state = (uint8_t)st;
            MemOptions o;
            memmodel_options_default(&o);
            o.ranks = 3;
            o.whole_below = 1000;
            MemModel mf, mt;
            compute_ok(&g, &o, &mf);
            DiagSink d;
            diag_init(&d);
            ck_assert_msg(ad_build(&g, &d), "autodiff failed");
            diag_free(&d);
            compute_ok(&g, &o, &mt);
            ck_assert(mt.training_graph);
            ck_assert(!mf.training_graph);
            for (int c = TC_PARAM; c <= TC_VARIANCE; c++) {
                ck_assert_int_eq(mt.model[c], mf.model[c]);
                ck_assert_int_eq(mt.rank[c], mf.rank[c]);
            }
            ck_assert_int_eq(mt.model_states, mf.model_states);
            ck_assert_int_eq(mt.model_states_rank, mf.model_states_rank);
            ck_assert_int_eq(mt.moment_dtype[0], mf.moment_dtype[0]);
            ck_assert_int_eq(mt.moment_dtype[1], mf.moment_dtype[1]);
            /* the moments' bytes: 4, 2 or 8-bit blocks (f32 below 4096 elements) per element */
            int64_t want = 0;
            for (int i = 0; i < g.ntensors; i++)
                if (g.tensors[i].cls == TC_PARAM) {
                    int64_t n = g.tensors[i].numel;
                    want += st == OPT_STATE_FP32 ? 4 * n : st == OPT_STATE_BF16 ? 2 * n : n >= OPT_STATE_8BIT_MIN ? dtype_bytes(DT_DYN8, n) : 4 * n;
                }
            ck_assert_int_eq(mf.model[TC_MOMENTUM], want);
            ck_assert_int_eq(mf.model[TC_VARIANCE], want);
            ck_assert_int_eq(mf.moment_dtype[0], st == OPT_STATE_FP32 ? DT_F32 : st == OPT_STATE_BF16 ? DT_BF16 : DT_DYN8);
            ck_assert_int_eq(mt.ms_working, mf.ms_working);
            ck_assert_int_eq(mt.rank[TC_CKPT], mf.rank[TC_CKPT]);
            ck_assert_int_eq(mt.act_working, mf.act_working);
            ck_assert_int_eq(mt.act_kept, mf.act_kept);
            /* autodiff's own marks: the TC_CKPT tensors' bytes */
            int64_t marked = 0;
            for (int i = 0; i < g.ntensors; i++)
                if (g.tensors[i].cls == TC_CKPT) marked += g.tensors[i].numel * (s.dt == DT_F32 ? 4 : 2);
            ck_assert_int_eq(mt.rank[TC_CKPT], marked);
            arena_free(&a);
        }
}
END_TEST

START_TEST(bad_options_and_graphs) {
    Arena a;
    arena_init(&a);
    Graph g;
    build_gpt(&g, &a, small());
    MemOptions o;
    MemModel m;
    memmodel_options_default(&o);
    o.ranks = 3;
    o.nodes = 2;
    ck_assert_int_eq(memmodel_compute(&g, &o, &m), -1);
    ck_assert_str_eq(m.err, "memory model: 3 ranks cannot be spread evenly over 2 nodes");
    memmodel_options_default(&o);
    o.ranks = -2;
    ck_assert_int_eq(memmodel_compute(&g, &o, &m), -1);
    ck_assert_str_eq(m.err, "memory model: ranks must be positive (got -2)");
    memmodel_options_default(&o);
    o.ci = -5;
    ck_assert_int_eq(memmodel_compute(&g, &o, &m), -1);
    ck_assert(strstr(m.err, "checkpoint interval") != NULL);
    ck_assert_int_eq(memmodel_compute(NULL, NULL, &m), -1);
    ck_assert_str_eq(m.err, "memory model: no graph");

    /* a graph with no inputs cannot take a sequence override */
    Graph g2;
    graph_init(&g2, &a);
    int64_t d2[2] = {1000, 1000};
    graph_add_tensor(&g2, "w", DT_BF16, 2, d2, TC_PARAM);
    memmodel_options_default(&o);
    o.seq = 128;
    ck_assert_int_eq(memmodel_compute(&g2, &o, &m), -1);
    ck_assert_str_eq(m.err, "memory model: the graph has no [batch, seq] input to override the sequence length of");
    /* no dtype */
    int64_t d1[1] = {10};
    graph_add_tensor(&g2, "nodtype", DT_NONE, 1, d1, TC_PARAM);
    ck_assert_int_eq(memmodel_compute(&g2, NULL, &m), -1);
    ck_assert_str_eq(m.err, "memory model: tensor 'nodtype' has no dtype");
    /* overflow: 2^31 x 2^31 elements, 20 bytes each */
    Graph g3;
    graph_init(&g3, &a);
    g3.model_name = "huge";
    int64_t dh[2] = {(int64_t)1 << 31, (int64_t)1 << 31};
    graph_add_tensor(&g3, "w", DT_BF16, 2, dh, TC_PARAM);
    ck_assert_int_eq(memmodel_compute(&g3, NULL, &m), -1);
    ck_assert_str_eq(m.err, "memory model: byte counts of 'huge' overflow 63 bits");
    /* a tensor of rank 9 */
    Graph g4;
    graph_init(&g4, &a);
    graph_add_tensor(&g4, "w", DT_BF16, 1, d1, TC_PARAM);
    g4.tensors[0].rank = 9;
    ck_assert_int_eq(memmodel_compute(&g4, NULL, &m), -1);
    ck_assert_str_eq(m.err, "memory model: malformed graph: tensor 0 has rank 9, 10 elements");
    /* an op pointing past the tensors */
    g.ops[3].in[0] = g.ntensors + 7;
    ck_assert_int_eq(memmodel_compute(&g, NULL, &m), -1);
    ck_assert(strstr(m.err, "malformed graph: op 3 reads tensor") != NULL);
    arena_free(&a);
}
END_TEST

START_TEST(print_table) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = {.B = 1, .T = 1024, .D = 10240, .H = 128, .V = 50304, .L = 80, .dt = DT_BF16, .ckpt_every = 1};
    build_gpt(&g, &a, s);
    MemOptions o;
    memmodel_options_default(&o);
    o.ranks = 32;
    o.nodes = 2;
    MemModel m;
    compute_ok(&g, &o, &m);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    memmodel_print(&m, f);
    fclose(f);
    char line[256];
    /* the model-states row: 20 bytes/param, whole model in TiB and exact bytes,
     * per node (16 ranks' shards), per rank */
    snprintf(line, sizeof line, "%-36s %7s  %11s %17lld  %11s %17lld  %11s %17lld\n", "model states (paper's count)", "20", "1.84 TiB",
             (long long)m.model_states, "945.48 GiB", (long long)m.model_states_rank * 16, "59.09 GiB", (long long)m.model_states_rank);
    ck_assert_msg(strstr(buf, line) != NULL, "no '%s' in:\n%s", line, buf);
    ck_assert_int_eq(m.model_states, 20 * m.params);
    ck_assert(strstr(buf, "gpt-test, 101189079040 parameters in 963 tensors, bf16 mixed-precision Adam (forward graph)\n") != NULL);
    /* 4 big weights a layer and the embedding split; biases and norms (< 100000 elements) whole */
    ck_assert(strstr(buf, "ZeRO-3 over 32 ranks on 2 nodes: 321 of 963 parameters split") != NULL);
    ck_assert(strstr(buf, "a checkpoint every 1 repeat instance (80 groups)\n") != NULL);
    ck_assert(strstr(buf, "fp32 master parameters (f32)") != NULL);
    ck_assert(strstr(buf, "fp32 gradients (paper only)") != NULL);
    /* working memory: the embedding (50304 x 10240, 2 + 2 bytes) per GPU */
    snprintf(line, sizeof line, "%-36s %7s  %11s %17s  %11s %17s  %11s %17lld\n", "model-state working memory", "", "-", "", "-", "", "1.92 GiB",
             50304LL * 10240 * 4);
    ck_assert_msg(strstr(buf, line) != NULL, "no '%s' in:\n%s", line, buf);
    /* 81 checkpoints of [1, 1024, 10240] bf16 per rank */
    snprintf(line, sizeof line, "%-36s %7s  %11s %17lld  %11s %17lld  %11s %17lld\n", "activation checkpoints", "", "50.62 GiB", 81LL * 1024 * 10240 * 2 * 32,
             "25.31 GiB", 81LL * 1024 * 10240 * 2 * 16, "1.58 GiB", 81LL * 1024 * 10240 * 2);
    ck_assert_msg(strstr(buf, line) != NULL, "no '%s' in:\n%s", line, buf);
    free(buf);
    arena_free(&a);
}
END_TEST

/* The planner partitions by the same rule: for an untiled plan, its shards'
 * bytes per class are exactly memmodel's per-rank figures. */
START_TEST(planner_shards_agree) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = small();
    s.D = 256;
    s.L = 2;
    s.T = 8;
    build_gpt(&g, &a, s);
    DiagSink d;
    diag_init(&d);
    ck_assert(ad_build(&g, &d));
    Target t;
    ck_assert(target_builtin("host", &t));
    PlannerOptions po;
    planner_options_default(&po);
    po.ranks = 3;
    PlannerResult r;
    memset(&r, 0, sizeof r);
    bool ok = planner_run(&g, &t, &po, &a, &d, &r);
    ck_assert_msg(ok, "planner failed: %s", d.len ? d.items[0].msg : "");
    MemOptions o;
    memmodel_options_default(&o);
    o.ranks = 3;
    o.whole_below = po.whole_below;
    MemModel m;
    compute_ok(&g, &o, &m);
    int64_t by[TC_COUNT] = {0};
    int nsplit = 0;
    for (uint32_t i = 0; i < r.plan->nshards; i++) {
        const PlanShard *sh = &r.plan->shards[i];
        ck_assert_int_eq(sh->ntiles, 1); /* the premise: nothing tiled */
        TensorClass c = g.tensors[sh->tensor].cls;
        if (c >= TC_PARAM && c <= TC_VARIANCE) by[c] += (int64_t)sh->bytes;
        nsplit += c == TC_PARAM && sh->partitioned;
    }
    ck_assert_int_eq(nsplit, m.nsharded);
    ck_assert_int_gt(m.nsharded, 0);
    for (int c = TC_PARAM; c <= TC_VARIANCE; c++) ck_assert_int_eq(by[c], m.rank[c]);
    plan_free(r.plan);
    diag_free(&d);
    arena_free(&a);
}
END_TEST

/* The real Table 1 models, the .zl files of examples/zero-infinity, through the front
 * end: each one's counted parameters within 1% of 12 * nl * hd^2 and model
 * states within 1% of the paper's cell. */
START_TEST(table1_example_files) {
    const char *dir = ZINF_STDLIB_DIR "/../examples/zero-infinity";
    DIR *dp = opendir(dir);
    ck_assert_msg(dp != NULL, "cannot open %s", dir);
    bool seen[MEM_TABLE1_ROWS] = {false};
    int nfiles = 0;
    Table1Assume as;
    memmodel_table1_assume_default(&as);
    struct dirent *e;
    while ((e = readdir(dp))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, ".zl")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        Arena a;
        arena_init(&a);
        SourceSet src;
        source_set_init(&src);
        DiagSink d;
        diag_init(&d);
        LoadOptions lo = {NULL, 0, ZINF_STDLIB_DIR};
        Program prog;
        memset(&prog, 0, sizeof prog);
        ck_assert_msg(program_load(&a, &src, &d, path, &lo, &prog) && d.errors == 0, "%s does not load", path);
        Graph g;
        ck_assert_msg(sema_build(&a, &prog, &src, &d, &g) && d.errors == 0, "%s does not check: %s", path, d.len ? d.items[0].msg : "");
        MemOptions o;
        memmodel_options_default(&o);
        o.ranks = 16;
        MemModel m;
        compute_ok(&g, &o, &m);
        int row = -1;
        for (int i = 0; i < MEM_TABLE1_ROWS; i++)
            if (memmodel_table1_shapes[i].layers == g.nsegments) row = i;
        ck_assert_msg(row >= 0, "%s: %d layers is no Table 1 shape", path, g.nsegments);
        ck_assert_msg(!seen[row], "%s: a second file for row %d", path, row);
        seen[row] = true;
        Table1Row r;
        ck_assert(memmodel_table1_row(&memmodel_table1_shapes[row], &as, &r));
        double dp_ = (double)m.params / (double)r.params - 1, ds = (double)m.model_states / (double)r.model_states - 1;
        ck_assert_msg(dp_ > -0.01 && dp_ < 0.01, "%s: %lld parameters, 12 nl hd^2 = %lld", path, (long long)m.params, (long long)r.params);
        ck_assert_msg(ds > -0.01 && ds < 0.01, "%s: model states %lld, paper %lld", path, (long long)m.model_states, (long long)r.model_states);
        ck_assert(m.mixed);
        ck_assert_int_eq(m.model_states, 20 * m.params);
        nfiles++;
        diag_free(&d);
        source_set_free(&src);
        arena_free(&a);
    }
    closedir(dp);
    ck_assert_int_eq(nfiles, MEM_TABLE1_ROWS);
}
END_TEST

static char *print_to_string(const MemModel *m) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    memmodel_print(m, f);
    fclose(f);
    return buf;
}

/* f32, one rank, no checkpointing: no master or fp32-gradient rows, one
 * activation row, no per-node column. */
START_TEST(print_variants) {
    Arena a;
    arena_init(&a);
    Graph g;
    Gpt s = small();
    s.dt = DT_F32;
    s.ckpt_every = 0;
    build_gpt(&g, &a, s);
    MemModel m;
    compute_ok(&g, NULL, &m);
    char *buf = print_to_string(&m);
    ck_assert_msg(strstr(buf, "1 rank: nothing partitioned\n") != NULL, "%s", buf);
    ck_assert(strstr(buf, "no activation checkpointing\n") != NULL);
    ck_assert(strstr(buf, "f32 Adam (forward graph)") != NULL);
    ck_assert(strstr(buf, "master") == NULL);
    ck_assert(strstr(buf, "fp32 gradients") == NULL);
    ck_assert(strstr(buf, "per node") == NULL);
    ck_assert(strstr(buf, "activation checkpoints") == NULL);
    char line[256];
    snprintf(line, sizeof line, "%-36s %7s  %11s %17lld  %11s %17lld\n", "activations (all kept)", "", memmodel_human(m.act_kept, (char[32]){0}, 32),
             (long long)m.act_kept, memmodel_human(m.act_kept, (char[32]){0}, 32), (long long)m.act_kept);
    ck_assert_msg(strstr(buf, line) != NULL, "no '%s' in:\n%s", line, buf);
    snprintf(line, sizeof line, "%-36s %7s", "model states (paper's count)", "16");
    ck_assert(strstr(buf, line) != NULL);
    free(buf);
    arena_free(&a);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("memmodel");
    TCase *t = tcase_create("table1");
    tcase_add_test(t, table1_params_and_model_states);
    tcase_add_test(t, table1_working_memory);
    tcase_add_test(t, table1_activations);
    tcase_add_test(t, table1_bad_inputs);
    tcase_add_test(t, table1_print_golden);
    tcase_add_test(t, human_units);
    suite_add_tcase(s, t);
    TCase *c = tcase_create("graph");
    tcase_add_test(c, graph_model_states_mixed);
    tcase_add_test(c, graph_model_states_f32);
    tcase_add_test(c, graph_matches_closed_form_table1_shapes);
    tcase_add_test(c, graph_sharding_per_rank);
    tcase_add_test(c, graph_activations);
    tcase_add_test(c, graph_batch_and_seq_override);
    tcase_add_test(c, graph_working_memory_op);
    tcase_add_test(c, training_graph_agrees);
    tcase_add_test(c, bad_options_and_graphs);
    tcase_add_test(c, print_table);
    tcase_add_test(c, print_variants);
    tcase_add_test(c, planner_shards_agree);
    tcase_add_test(c, table1_example_files);
    suite_add_tcase(s, c);
    return s;
}

int main(void) {
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
