/* sema: constants, scopes, layer instantiation, naming, dtypes, errors, and
 * the exact parameter counts of the example models (loaded from examples/
 * through program_load, as zinfc does). Run from the repository root. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "arena.h"
#include "diag.h"
#include "graph.h"
#include "loader.h"
#include "sema.h"
#include "autodiff.h"
#include "prim.h"
#include "sema_fixture.h"

static void setup(void) { fixture_tmp_make("test_sema"); }
static void teardown(void) { fixture_tmp_remove(); }

static int find_tensor(const Graph *g, const char *name) {
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].name && strcmp(g->tensors[i].name, name) == 0) return i;
    return -1;
}

static void expect_has(const Run *r, const char *needle) {
    if (!strstr(r->text, needle)) ck_abort_msg("diagnostics lack \"%s\"; got:\n%.2000s", needle, r->text);
}

/* Evaluates NAME in the main file's scope. */
static SemaValue value_of(Run *r, const char *name) {
    Expr e;
    memset(&e, 0, sizeof e);
    e.kind = EX_NAME;
    e.str = name;
    e.span = SPAN_NONE;
    SemaValue v;
    ck_assert(sema_eval(r->sema, &e, &v));
    return v;
}

/* A tiny valid model, with room for a body. */
#define MODEL_HEAD "const V = 32, T = 8, D = 16\nmodel m(tokens: i32[B, T], targets: i32[B, T]) {\n" \
                   "  wte = param [V, D] init normal(0.02)\n  x = embedding(wte, tokens)\n"
#define MODEL_TAIL "  loss cross_entropy(matmul(x, wte, transpose_b), targets)\n}\n"

START_TEST(const_units_and_arithmetic) {
    Run r;
    run_src(&r, "const M = 32 GiB, K = 4 K, R = 100 GB/s, H = 1.5 T\n"
                "const A = 7 / 2, Rm = 7 % 3, N = -A * 3, F = 1 / 4.0, S = \"hi\"\n"
                "const E = M / 2\n" MODEL_HEAD MODEL_TAIL);
    ck_assert_msg(r.ok, "%s", r.text);
    SemaValue v = value_of(&r, "M");
    ck_assert_int_eq(v.kind, SV_INT);
    ck_assert_int_eq(v.i, 34359738368LL);
    ck_assert_int_eq(v.unit, UNIT_BYTES);
    ck_assert_int_eq(value_of(&r, "K").i, 4000);
    ck_assert_int_eq(value_of(&r, "R").i, 100000000000LL);
    ck_assert_int_eq(value_of(&r, "R").unit, UNIT_RATE);
    v = value_of(&r, "H");
    ck_assert_int_eq(v.kind, SV_FLOAT);
    ck_assert_double_eq_tol(v.f, 1.5e12, 1);
    ck_assert_int_eq(value_of(&r, "A").i, 3);
    ck_assert_int_eq(value_of(&r, "Rm").i, 1);
    ck_assert_int_eq(value_of(&r, "N").i, -9);
    ck_assert_double_eq_tol(value_of(&r, "F").f, 0.25, 1e-15);
    ck_assert_str_eq(value_of(&r, "S").s, "hi");
    ck_assert_int_eq(value_of(&r, "E").i, 17179869184LL);
    int64_t i;
    Expr e = {.kind = EX_NAME, .str = "B", .span = SPAN_NONE};
    ck_assert(sema_eval_int(r.sema, &e, &i));
    ck_assert_int_eq(i, 1); /* no train block: B = 1 */
    run_free(&r);
}
END_TEST

START_TEST(const_errors) {
    Run r;
    run_src(&r, "const X = 9223372036854775807 + 1\n"
                "const Y = 5 / (3 - 3)\n"
                "const Z = Q + 1\n"
                "const Q = 2\n"
                "const U = 90000000 TB\n"
                "const W = 99999999999999999999\n" MODEL_HEAD MODEL_TAIL);
    ck_assert(!r.ok);
    expect_has(&r, "main.zl:1:11: error: integer overflow: 9223372036854775807 + 1 does not fit in 64 bits");
    expect_has(&r, "main.zl:2:11: error: division by zero");
    expect_has(&r, "main.zl:3:11: error: constant 'Q' is used before its definition");
    expect_has(&r, "main.zl:4:7: note: 'Q' defined here");
    expect_has(&r, "error: 90000000 with its unit (x 1000000000000) overflows a 64-bit integer");
    expect_has(&r, "main.zl:6:11: error: integer literal does not fit in 64 bits");
    ck_assert_int_eq(r.d.errors, 5);
    run_free(&r);
}
END_TEST

START_TEST(deep_expression_is_an_error_not_a_crash) {
    Run r;
    size_t n = 20000;
    char *src = malloc(n * 2 + 256);
    ck_assert_ptr_nonnull(src);
    strcpy(src, "const X = 1");
    size_t o = strlen(src);
    for (size_t i = 0; i < n; i++) {
        src[o++] = '+';
        src[o++] = '1';
    }
    src[o] = 0;
    strcat(src, "\n" MODEL_HEAD MODEL_TAIL);
    run_src(&r, src);
    free(src);
    ck_assert(!r.ok);
    /* the parser may refuse it first (a statement-length limit); either way one error */
    if (!strstr(r.text, "error: statement too long"))
        expect_has(&r, "error: expression nested too deeply (more than 1000 levels)");
    ck_assert_int_eq(r.d.errors, 1);
    run_free(&r);
}
END_TEST

START_TEST(imports_and_duplicates) {
    Run r;
    write_file("lib.zl", "const W = 3 * 4\nlayer twice(x: [B, T, D]) { return x + x }\n");
    run_src(&r, "import \"lib\"\nconst K = W + 1\n" MODEL_HEAD "  x = twice(x)\n" MODEL_TAIL);
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_int_eq(value_of(&r, "K").i, 13);
    run_free(&r);
    run_src(&r, "import \"lib\"\nconst W = 1\nlayer f(x) { return x }\nlayer f(y) { return y }\n" MODEL_HEAD
                MODEL_TAIL);
    ck_assert(!r.ok);
    expect_has(&r, "main.zl:4:7: error: 'f' is defined twice");
    expect_has(&r, "main.zl:3:7: note: first defined here");
    expect_has(&r, "main.zl:2:7: error: 'W' is already defined in imported file lib.zl");
    expect_has(&r, "lib.zl:1:7: note: 'W' defined here");
    ck_assert_int_eq(r.d.errors, 2);
    run_free(&r);
    run_src(&r, "const B = 2\nlayer gelu(x) { return x }\n" MODEL_HEAD MODEL_TAIL);
    expect_has(&r, "main.zl:1:7: error: 'B' is reserved (the micro-batch, from train { micro_batch }) and cannot be defined");
    expect_has(&r, "main.zl:2:7: error: 'gelu' is a primitive; a layer cannot have its name");
    run_free(&r);
}
END_TEST

START_TEST(gpt2_tiny_graph) {
    Run r;
    run_path(&r, "examples/gpt2-tiny.zl");
    ck_assert_msg(r.ok, "%s", r.text);
    const Graph *g = &r.g;
    ck_assert_str_eq(g->model_name, "gpt2_tiny");
    ck_assert_int_eq(g->train.micro_batch, 4);
    ck_assert_int_eq(g->ninputs, 2);
    ck_assert_int_eq(g->tensors[g->inputs[0]].cls, TC_INPUT);
    ck_assert_int_eq(g->tensors[g->inputs[0]].dims[0], 4);
    ck_assert_int_eq(g->tensors[g->inputs[0]].dims[1], 64);
    ck_assert_int_eq(g->nsegments, 4);
    ck_assert_int_eq(g->nforward, g->nops);
    ck_assert_int_eq(g->ops[g->nops - 1].prim, PRIM_CROSS_ENTROPY);
    ck_assert_int_eq(g->loss, g->ops[g->nops - 1].out[0]);
    /* 11 ops per block, 4 before the blocks, 3 after */
    ck_assert_int_eq(g->nops, 4 + 4 * 11 + 3);
    /* names by call path; a second call of ln in a block is ln_1 */
    const char *names[] = {"wte", "wpe", "block.0.attn.wqkv", "block.3.attn.wqkv", "block.0.ln.g", "block.0.ln_1.b",
                           "block.2.mlp.w2", "ln.g", "ln.b"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(find_tensor(g, names[i]) >= 0, "no param %s", names[i]);
    ck_assert_int_lt(find_tensor(g, "block.4.attn.wqkv"), 0);
    int w = find_tensor(g, "block.1.attn.wqkv");
    ck_assert_int_eq(g->tensors[w].cls, TC_PARAM);
    ck_assert_int_eq(g->tensors[w].dims[0], 128);
    ck_assert_int_eq(g->tensors[w].dims[1], 384);
    ck_assert_int_eq(g->tensors[w].init, INIT_NORMAL);
    ck_assert_double_eq(g->tensors[w].init_std, 0.02);
    ck_assert_int_eq(g->tensors[w].segment, 1);
    ck_assert_int_eq(g->tensors[find_tensor(g, "block.0.ln.g")].init, INIT_ONES);
    /* ops of block 2 are segment 2 with scope block.2...; the embeddings are outside */
    int seen_attn = 0;
    for (int k = 0; k < g->nops; k++) {
        const GOp *o = &g->ops[k];
        if (o->prim == PRIM_ATTENTION) {
            ck_assert_int_eq(o->iattr[IA_ATTENTION_HEADS], 4);
            ck_assert_int_eq(o->iattr[IA_ATTENTION_KV_HEADS], 4);
            char want[32];
            snprintf(want, sizeof want, "block.%d.attn", seen_attn);
            ck_assert_str_eq(o->scope, want);
            ck_assert_int_eq(o->segment, seen_attn);
            seen_attn++;
        }
        if (o->prim == PRIM_SPLIT) {
            ck_assert_int_eq(o->nout, 3);
            ck_assert_int_eq(o->iattr[IA_SPLIT_N], 3);
        }
    }
    ck_assert_int_eq(seen_attn, 4);
    ck_assert_int_eq(g->ops[0].segment, -1);
    ck_assert_int_eq(g->ops[1].prim, PRIM_ARANGE);
    ck_assert_int_eq(g->tensors[g->ops[1].out[0]].cls, TC_CONST);
    ck_assert_int_eq(g->tensors[g->ops[1].out[0]].dtype, DT_I32);
    /* GPT-2 block count: 12 D^2 + 13 D per layer, tied embeddings */
    int64_t D = 128, V = 256, T = 64;
    ck_assert_int_eq(graph_param_count(g), V * D + T * D + 4 * (12 * D * D + 13 * D) + 2 * D);
    run_free(&r);
}
END_TEST

START_TEST(stdlib_gpt_layer) {
    /* the whole model as one stdlib layer: same parameters as examples/gpt2-tiny.zl, one level deeper */
    Run r;
    run_src(&r, "import \"gpt\"\nconst T = 64\nmodel tiny(tokens: i32[B, T], targets: i32[B, T]) {\n"
                "  loss cross_entropy(gpt(tokens, 256, 128, 4, 4), targets)\n}\ntrain { micro_batch = 4 }\n");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_int_eq(graph_param_count(&r.g), 834304);
    ck_assert_int_ge(find_tensor(&r.g, "gpt.block.3.attn.wqkv"), 0);
    ck_assert_int_ge(find_tensor(&r.g, "gpt.ln.g"), 0);
    ck_assert_int_eq(r.g.nsegments, 4);
    run_free(&r);
}
END_TEST

START_TEST(dtype_rules) {
    Run r;
    run_src(&r, MODEL_HEAD "  g = param f32 [D] init ones\n  x = rmsnorm(x, g)\n" MODEL_TAIL
                "train { dtype = bf16; micro_batch = 3 }\n");
    ck_assert_msg(r.ok, "%s", r.text);
    const Graph *g = &r.g;
    ck_assert_int_eq(g->train.dtype, DT_BF16);
    ck_assert_int_eq(g->tensors[find_tensor(g, "wte")].dtype, DT_BF16);
    ck_assert_int_eq(g->tensors[find_tensor(g, "g")].dtype, DT_F32);
    ck_assert_int_eq(g->tensors[g->inputs[0]].dtype, DT_I32);
    ck_assert_int_eq(g->tensors[g->inputs[0]].dims[0], 3);
    ck_assert_int_eq(g->tensors[g->ops[0].out[0]].dtype, DT_BF16); /* activation */
    ck_assert_int_eq(g->tensors[g->loss].dtype, DT_F32);
    ck_assert_int_eq(g->tensors[g->loss].rank, 0);
    run_free(&r);
    /* embedding ids must be i32 */
    run_src(&r, MODEL_HEAD "  y = embedding(wte, x)\n" MODEL_TAIL);
    ck_assert(!r.ok);
    expect_has(&r, "error: embedding: ids must be i32, but they are f32");
    run_free(&r);
}
END_TEST

START_TEST(tuple_split_and_repeat_index) {
    Run r;
    run_src(&r, "layer two(x: [B, T, D]) { a, b = split(x, [4, D - 4])\n return b, a }\n" MODEL_HEAD
                "  p, q = two(x)\n  u, v, w = split(x, [2 + 2, 4, 2 * 4])\n"
                "  repeat 2 as i { w2 = param [D, D + 0 * i] init uniform(0.1)\n x = linear(x, w2) }\n" MODEL_TAIL);
    ck_assert_msg(r.ok, "%s", r.text);
    const Graph *g = &r.g;
    int sp = -1;
    for (int k = 0; k < g->nops; k++)
        if (g->ops[k].prim == PRIM_SPLIT && sp < 0) sp = k;
    ck_assert_int_ge(sp, 0);
    ck_assert_int_eq(g->ops[sp].nout, 2);
    ck_assert_int_eq(g->ops[sp].iattr[IA_SPLIT_N], 2);
    ck_assert_int_eq(g->tensors[g->ops[sp].out[0]].dims[2], 4);
    ck_assert_int_eq(g->tensors[g->ops[sp].out[1]].dims[2], 12);
    ck_assert_str_eq(g->ops[sp].scope, "two");
    ck_assert_int_ge(find_tensor(g, "w2.0"), 0);
    ck_assert_int_ge(find_tensor(g, "w2.1"), 0);
    ck_assert_int_eq(g->tensors[find_tensor(g, "w2.1")].init, INIT_UNIFORM);
    ck_assert_double_eq(g->tensors[find_tensor(g, "w2.1")].init_std, 0.1);
    ck_assert_int_eq(g->nsegments, 2);
    run_free(&r);
    run_src(&r, MODEL_HEAD "  a, b = split(x, 3)\n  c, d = split(x, 2)\n  e, f, h = split(x, 2)\n"
                "  k, l = x\n" MODEL_TAIL);
    ck_assert(!r.ok);
    expect_has(&r, "error: split: x's last dimension 16 does not divide into 3 equal pieces (x is [1, 8, 16])");
    expect_has(&r, "error: cannot destructure a tuple of 2 into 3 names");
    expect_has(&r, "error: cannot destructure a tensor into 2 names: it is not a tuple");
    ck_assert_int_eq(r.d.errors, 3);
    run_free(&r);
}
END_TEST

START_TEST(naming_of_repeats_and_second_calls) {
    Run r;
    write_file("lib.zl", "layer lin(x: [B, T, D]) { w = param [D, D] init zeros\n return linear(x, w) }\n"
                         "layer pair(x: [B, T, D]) { x = lin(x)\n return lin(x) }\n");
    run_src(&r, "import \"lib\"\n" MODEL_HEAD "  x = lin(x)\n  repeat 2 { x = pair(x) }\n"
                "  repeat 2 { x = pair(x)\n repeat 2 { x = lin(x) } }\n" MODEL_TAIL);
    ck_assert_msg(r.ok, "%s", r.text);
    const char *names[] = {"lin.w", "pair.0.lin.w", "pair.0.lin_1.w", "pair.1.lin_1.w", "pair_1.0.lin.w",
                           "pair_1.1.lin_1.w", "lin_1.0.0.w", "lin_1.0.1.w", "lin_1.1.1.w"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(find_tensor(&r.g, names[i]) >= 0, "no param %s", names[i]);
    ck_assert_int_eq(graph_param_count(&r.g), 32 * 16 + 13 * 16 * 16);
    /* an inner repeat does not start segments of its own */
    ck_assert_int_eq(r.g.nsegments, 4);
    ck_assert_int_eq(r.g.tensors[find_tensor(&r.g, "lin_1.1.1.w")].segment, 3);
    run_free(&r);
    /* the same full name twice */
    run_src(&r, MODEL_HEAD "  repeat 1 { w = param [D] init zeros }\n  repeat 1 { w = param [D] init zeros }\n" MODEL_TAIL);
    expect_has(&r, "error: parameter 'w.0' is defined twice");
    expect_has(&r, "note: first defined here");
    run_free(&r);
}
END_TEST

START_TEST(layer_binding) {
    Run r;
    /* shape variables, defaults over earlier params, checked dims, named args */
    run_src(&r, "layer proj(x: [B, T, E], out = 2 * E, scale = 1) {\n w = param [E, out * scale] init zeros\n"
                " return linear(x, w) }\n"
                "layer same(x: [B, T, D], y: [B, T, D]) { return x + y }\n" MODEL_HEAD
                "  a = proj(x)\n  b = proj(x, scale = 3, out = 4)\n  c = same(x, x)\n" MODEL_TAIL);
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_int_eq(r.g.tensors[find_tensor(&r.g, "proj.w")].dims[1], 32);
    ck_assert_int_eq(r.g.tensors[find_tensor(&r.g, "proj_1.w")].dims[1], 12);
    run_free(&r);
    run_src(&r, "layer same(x: [B, T, D], y: [B, T, D]) { return x + y }\n"
                "layer need(x: [B, T, D], heads) { return x }\n"
                "layer noret(x) { y = x }\n" MODEL_HEAD
                "  w = param [D, 24] init zeros\n  a = linear(x, w)\n  c = same(a, a)\n  d = need(x)\n"
                "  e = need(x, 1, 2)\n  f = need(wte, 2)\n  g = noret(x)\n  h = same(x, 3)\n" MODEL_TAIL);
    ck_assert(!r.ok);
    /* a is [1, 8, 24]: D is the const 16 in this scope, so the dim is checked */
    expect_has(&r, "error: same: argument 'x' has dimension 2 of size 24, but [B, T, D] expects D = 16 (x is [1, 8, 24])");
    expect_has(&r, "error: layer 'need': missing argument 'heads'");
    expect_has(&r, "error: layer 'need' takes 2 arguments (x, heads), got 3");
    expect_has(&r, "error: need: argument 'x' must have rank 3 ([B, T, D]), but it is [32, 16]");
    expect_has(&r, "error: layer 'noret' has no return statement");
    expect_has(&r, "error: same: argument 'y' must be a tensor [B, T, D], got an integer");
    run_free(&r);
}
END_TEST

START_TEST(operators_and_misc_errors) {
    Run r;
    run_src(&r, MODEL_HEAD "  a = x - x\n  b = x / x\n  c = -x\n  d = x + 1\n  e = param [D] init normal(0.02)\n"
                "  f = matmul(x, wte, transpose_b = 2)\n  g = attention(x, x, x)\n  h = param [0, D] init zeros\n"
                "  return x\n  repeat 2.5 { x = gelu(x) }\n" MODEL_TAIL);
    ck_assert(!r.ok);
    expect_has(&r, "error: tensors cannot be subtracted: the primitives are add (+) and mul (*)");
    expect_has(&r, "error: tensors cannot be divided");
    expect_has(&r, "error: cannot negate a tensor (there is no negation primitive)");
    expect_has(&r, "error: cannot add a tensor and an integer");
    expect_has(&r, "error: matmul: 'transpose_b' is a flag: true or false, got an integer");
    expect_has(&r, "error: attention: missing attribute 'heads'");
    expect_has(&r, "error: a dimension must be positive, got 0");
    expect_has(&r, "error: a model does not return; it ends with a loss statement");
    expect_has(&r, "error: a repeat count must be a positive integer constant, got 2.5");
    ck_assert_int_eq(r.d.errors, 9);
    run_free(&r);
}
END_TEST

START_TEST(element_counts_past_64_bits) {
    Run r;
    run_src(&r, "const G = 4611686018427387904\n"
                "model m(tokens: i32[B, G], big: i32[G, 4], targets: i32[B, G]) {\n"
                "  w = param [G, 4] init zeros\n  e = param [8, G] init zeros\n"
                "  x = embedding(e, tokens)\n  loss cross_entropy(x, targets)\n}\n");
    ck_assert(!r.ok);
    expect_has(&r, "error: input 'big' has more than 2^63 elements");
    expect_has(&r, "main.zl:3:7: error: the param's element count overflows 64 bits");
    expect_has(&r, "main.zl:4:7: error: the param's element count overflows 64 bits");
    ck_assert_int_eq(r.d.errors, 3); /* x and the loss are poison: nothing more */
    run_free(&r);
    run_src(&r, "const G = 4611686018427387904\n"
                "model m(tokens: i32[B, G], targets: i32[B, G]) {\n"
                "  e = param [8, 4] init zeros\n"
                "  x = embedding(e, tokens)\n  loss cross_entropy(x, targets)\n}\n");
    expect_has(&r, "error: embedding: the result [1, 4611686018427387904, 4] has more than 2^63 elements");
    ck_assert_int_eq(r.d.errors, 1);
    run_free(&r);
}
END_TEST

START_TEST(runaway_repeats_are_bounded) {
    Run r;
    run_src(&r, "layer l(x: [B, T, D]) { w = param [D, D] init zeros\n v = param [D, D] init zeros\n"
                " return gelu(linear(linear(x, w), v)) }\n" MODEL_HEAD
                "  repeat 65536 { x = l(x) }\n  repeat 65537 { x = l(x) }\n" MODEL_TAIL);
    ck_assert(!r.ok);
    expect_has(&r, "error: the model is too large: more than 262144 tensors (is a repeat count too large?)");
    expect_has(&r, "error: repeat count 65537 is too large (at most 65536)");
    ck_assert_int_eq(r.d.errors, 2);
    run_free(&r);
}
END_TEST

START_TEST(every_error_reported_without_cascade) {
    Run r;
    /* three independent mistakes; the poisoned values raise nothing further */
    run_src(&r, MODEL_HEAD "  y = gelu(tokns)\n  z = linear(y, wte)\n  q = layernrm(x)\n  p = linear(q, wte)\n"
                "  w = param [D, 5] init zeros\n  o = linear(x, wte)\n" MODEL_TAIL);
    ck_assert(!r.ok);
    expect_has(&r, "main.zl:5:12: error: unknown name 'tokns'; did you mean 'tokens'?");
    expect_has(&r, "main.zl:7:7: error: unknown layer or primitive 'layernrm'; did you mean 'layernorm'?");
    expect_has(&r, "main.zl:10:7: error: linear: x has last dimension 16 but w has 32 rows (x is [1, 8, 16], w is [32, 16])");
    expect_has(&r, "main.zl:4:7: note: x declared here as [1, 8, 16]");
    expect_has(&r, "main.zl:3:9: note: wte declared here as [32, 16]");
    ck_assert_int_eq(r.d.errors, 3);
    run_free(&r);
    /* one error inside a repeated layer is reported once */
    run_src(&r, "layer bad(x: [B, T, D]) { w = param [3, 3] init zeros\n return linear(x, w) }\n" MODEL_HEAD
                "  repeat 6 { x = bad(x) }\n" MODEL_TAIL);
    ck_assert_int_eq(r.d.errors, 1);
    run_free(&r);
}
END_TEST

START_TEST(model_rules) {
    Run r;
    run_src(&r, "model a(t: i32[B, 4]) { loss 1 }\nmodel b(t: i32[B, 4]) { x = 1 }\n");
    expect_has(&r, "main.zl:2:7: error: a program has exactly one model; 'b' is a second one");
    expect_has(&r, "main.zl:1:7: note: model 'a' is defined here");
    expect_has(&r, "error: the loss must be a scalar tensor, got an integer");
    run_free(&r);
    run_src(&r, "const T = 4\nmodel a(t: i32[B, T], x) { w = param [T] init zeros }\n");
    expect_has(&r, "error: model input 'x' needs a type");
    expect_has(&r, "error: model 'a' has no loss statement");
    run_free(&r);
    run_src(&r, "const T = 4\n");
    expect_has(&r, "error: no model in this program");
    run_free(&r);
    /* after a syntax error, a missing loss (or return, or model) is its cascade: not reported */
    run_src(&r, "const V = 3\nmodel m(t: i32[B, 4]) {\n  w = param [V] init zeros\n  loss = 3\n}\n"
                "layer f(x) {\n  return = 2\n}\n");
    ck_assert_int_eq(r.d.errors, 2);
    ck_assert_ptr_null(strstr(r.text, "no loss"));
    run_free(&r);
    run_src(&r, "layer f(x) { return g(x) }\nlayer g(x) { return f(x) }\n" MODEL_HEAD "  y = f(x)\n" MODEL_TAIL);
    expect_has(&r, "error: layer 'f' calls itself (f -> g -> f)");
    ck_assert_int_eq(r.d.errors, 1);
    run_free(&r);
}
END_TEST

START_TEST(train_settings) {
    Run r;
    run_src(&r, MODEL_HEAD MODEL_TAIL
                "const MB = 2\ntrain { micro_batch = MB * 2; steps = 10; seed = 7; dtype = f16\n"
                "  optimizer = adam(lr = 1e-3, beta2 = 0.99, weight_decay = 0.1); warmup = 5; min_lr = 1e-4\n"
                "  grad_clip = 0; checkpoint = \"none\"; grad_accum = 3 }\n");
    ck_assert_msg(r.ok, "%s", r.text);
    const TrainConfig *t = &r.g.train;
    ck_assert_int_eq(t->micro_batch, 4);
    ck_assert_int_eq(r.g.tensors[r.g.inputs[0]].dims[0], 4);
    ck_assert_int_eq(t->steps, 10);
    ck_assert_int_eq(t->seed, 7);
    ck_assert_int_eq(t->dtype, DT_F16);
    ck_assert_double_eq(t->lr, 1e-3);
    ck_assert_double_eq(t->beta1, 0.9);
    ck_assert_double_eq(t->beta2, 0.99);
    ck_assert_double_eq(t->weight_decay, 0.1);
    ck_assert_int_eq(t->warmup_steps, 5);
    ck_assert_int_eq(t->schedule, LR_COSINE);
    ck_assert_double_eq(t->min_lr, 1e-4);
    ck_assert_double_eq(t->grad_clip, 0);
    ck_assert_double_eq(t->loss_scale, 65536);
    ck_assert_int_eq(t->checkpoint_every, 0);
    ck_assert_int_eq(t->grad_accum, 3);
    run_free(&r);
    run_src(&r, MODEL_HEAD MODEL_TAIL);
    t = &r.g.train;
    ck_assert_int_eq(t->micro_batch, 1);
    ck_assert_int_eq(t->dtype, DT_F32);
    ck_assert_int_eq(t->checkpoint_every, 1);
    ck_assert_double_eq(t->loss_scale, 1);
    ck_assert_double_eq(t->min_lr, t->lr);
    run_free(&r);
    run_src(&r, MODEL_HEAD MODEL_TAIL "train { micro_bach = 2; dtype = f64; optimizer = adam(lr = 0, betta1 = 1)\n"
                "  checkpoint = every(3); steps = 0 }\ntrain { steps = 1 }\n");
    expect_has(&r, "error: unknown train setting 'micro_bach'; did you mean 'micro_batch'?");
    expect_has(&r, "error: dtype must be f32, bf16 or f16");
    expect_has(&r, "error: lr must be a number > 0, got 0");
    expect_has(&r, "error: adam has no argument 'betta1'; did you mean 'beta1'?");
    expect_has(&r, "error: steps must be an integer >= 1, got 0");
    expect_has(&r, "error: a program has one train block; this is a second one");
    ck_assert_int_eq(r.g.train.checkpoint_every, 3);
    run_free(&r);
    /* how Adam stores its moments */
    run_src(&r, MODEL_HEAD MODEL_TAIL "train { optimizer = adam(lr = 1e-3, state = \"8bit\") }\n");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_int_eq(r.g.train.opt_state, OPT_STATE_8BIT);
    run_free(&r);
    run_src(&r, MODEL_HEAD MODEL_TAIL "train { optimizer = adam(state = \"bf16\") }\n");
    ck_assert_int_eq(r.g.train.opt_state, OPT_STATE_BF16);
    run_free(&r);
    run_src(&r, MODEL_HEAD MODEL_TAIL "train { optimizer = adam(state = \"4bit\", stat = 1) }\n");
    expect_has(&r, "error: adam: state must be \"fp32\", \"bf16\" or \"8bit\" (how the moments are stored)");
    expect_has(&r, "error: adam has no argument 'stat'; did you mean 'state'?");
    run_free(&r);
    run_src(&r, MODEL_HEAD MODEL_TAIL "train { grad_accum = 65 }\n");
    expect_has(&r, "error: grad_accum must be at most 64 (micro-batches per step the runtime holds), got 65");
    run_free(&r);
    /* a fine-tune's usual schedule: a short warmup, then a straight line to 0 (transformers' default) */
    run_src(&r, MODEL_HEAD MODEL_TAIL "train { optimizer = adam(lr = 2e-5); warmup = 3; schedule = linear }\n");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_int_eq(r.g.train.schedule, LR_LINEAR);
    ck_assert_double_eq(r.g.train.min_lr, 0);
    run_free(&r);
    run_src(&r, MODEL_HEAD MODEL_TAIL "train { schedule = linear; min_lr = 1e-6 }\n");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert(r.g.train.schedule == LR_LINEAR && r.g.train.min_lr == 1e-6); /* min_lr after the schedule keeps it */
    run_free(&r);
    run_src(&r, MODEL_HEAD MODEL_TAIL "train { schedule = step }\n");
    expect_has(&r, "error: schedule must be cosine, linear or constant");
    run_free(&r);
}
END_TEST

/* Every forward op's outputs re-derived through the shared prim table agree
 * with the graph, and autodiff accepts the graph. */
static void graph_contract(const char *path) {
    Run r;
    run_path(&r, path);
    ck_assert_msg(r.ok, "%s: %.2000s", path, r.text);
    Graph *g = &r.g;
    for (int k = 0; k < g->nforward; k++) {
        const GOp *o = &g->ops[k];
        PrimCall c;
        memset(&c, 0, sizeof c);
        c.prim = o->prim;
        c.nin = o->nin;
        for (int i = 0; i < o->nin; i++) {
            const GTensor *t = &g->tensors[o->in[i]];
            c.in[i].dtype = t->dtype;
            c.in[i].rank = t->rank;
            memcpy(c.in[i].dims, t->dims, sizeof t->dims);
        }
        memcpy(c.iattr, o->iattr, sizeof c.iattr);
        memcpy(c.fattr, o->fattr, sizeof c.fattr);
        const PrimInfo *p = prim_info(o->prim);
        for (int i = 0; i < p->nattr; i++) c.attr_set[i] = true;
        if (o->prim == PRIM_SPLIT) { /* sizes are the outputs' last dims */
            c.nsizes = o->nout;
            for (int i = 0; i < o->nout; i++) {
                const GTensor *t = &g->tensors[o->out[i]];
                c.sizes[i] = t->dims[t->rank - 1];
            }
        }
        c.act_dtype = g->train.dtype;
        PrimShape out[GRAPH_MAX_OUT];
        int nout;
        PrimError err;
        ck_assert_msg(prim_infer(&c, out, &nout, &err), "%s op %d: %s", path, k, err.msg);
        ck_assert_int_eq(nout, o->nout);
        for (int i = 0; i < nout; i++) {
            const GTensor *t = &g->tensors[o->out[i]];
            ck_assert_int_eq(out[i].dtype, t->dtype);
            ck_assert_int_eq(out[i].rank, t->rank);
            for (int j = 0; j < t->rank; j++) ck_assert_int_eq(out[i].dims[j], t->dims[j]);
            ck_assert_int_eq(t->producer, k);
        }
    }
    ck_assert_msg(ad_build(g, &r.d), "%s: autodiff refused the graph", path);
    ck_assert_int_gt(g->nops, g->nforward);
    run_free(&r);
}

START_TEST(graphs_satisfy_the_prim_table_and_autodiff) {
    graph_contract("examples/gpt2-tiny.zl");
    graph_contract("examples/llama-tiny.zl");
    graph_contract("examples/gpt2-small.zl");
    graph_contract("examples/llama2-70b.zl");
}
END_TEST

/* ---- parameter counts of the real example files ---- */

static int64_t count_of(const char *path, Graph *keep_name_check) {
    Run r;
    run_path(&r, path);
    ck_assert_msg(r.ok, "%s: %s", path, r.text);
    int64_t n = graph_param_count(&r.g);
    (void)keep_name_check;
    run_free(&r);
    return n;
}

START_TEST(exact_counts) {
    ck_assert_int_eq(count_of("examples/gpt2-small.zl", NULL), 124439808LL);
    ck_assert_int_eq(count_of("examples/llama2-7b.zl", NULL), 6738415616LL);
    ck_assert_int_eq(count_of("examples/llama2-70b.zl", NULL), 68976648192LL);
    /* GPT-3 175B: "175B" is 12 L D^2 plus embeddings; within 1% */
    double g3 = (double)count_of("examples/gpt3-175b.zl", NULL);
    ck_assert_double_le(fabs(g3 - 175e9) / 175e9, 0.01);
    ck_assert_int_gt(count_of("examples/llama-tiny.zl", NULL), 100000);
}
END_TEST

START_TEST(zero_infinity_table1) {
    static const struct {
        const char *file;
        int64_t layers, hidden;
    } t1[] = {
        {"examples/zero-infinity/zi-0.1t.zl", 80, 10240},  {"examples/zero-infinity/zi-0.5t.zl", 100, 20480},
        {"examples/zero-infinity/zi-1t.zl", 128, 25600},   {"examples/zero-infinity/zi-10t.zl", 195, 65536},
        {"examples/zero-infinity/zi-100t.zl", 315, 163840},
    };
    for (size_t i = 0; i < sizeof t1 / sizeof t1[0]; i++) {
        double want = 12.0 * (double)t1[i].layers * (double)t1[i].hidden * (double)t1[i].hidden;
        double got = (double)count_of(t1[i].file, NULL);
        ck_assert_msg(fabs(got - want) / want <= 0.01, "%s: %.0f parameters, 12 L D^2 = %.0f", t1[i].file, got, want);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("sema");
    TCase *t = tcase_create("check");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, const_units_and_arithmetic);
    tcase_add_test(t, const_errors);
    tcase_add_test(t, deep_expression_is_an_error_not_a_crash);
    tcase_add_test(t, imports_and_duplicates);
    tcase_add_test(t, gpt2_tiny_graph);
    tcase_add_test(t, stdlib_gpt_layer);
    tcase_add_test(t, dtype_rules);
    tcase_add_test(t, tuple_split_and_repeat_index);
    tcase_add_test(t, naming_of_repeats_and_second_calls);
    tcase_add_test(t, layer_binding);
    tcase_add_test(t, operators_and_misc_errors);
    tcase_add_test(t, element_counts_past_64_bits);
    tcase_add_test(t, runaway_repeats_are_bounded);
    tcase_add_test(t, every_error_reported_without_cascade);
    tcase_add_test(t, model_rules);
    tcase_add_test(t, train_settings);
    tcase_add_test(t, graphs_satisfy_the_prim_table_and_autodiff);
    tcase_add_test(t, exact_counts);
    tcase_add_test(t, zero_infinity_table1);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
