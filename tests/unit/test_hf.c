/* hf: the model side of Hugging Face interchange. compiler/hfmap (patterns,
 * matching, the hf blocks of a program -> Graph.hf, every error), the if
 * statement the stdlib layers' options need, rope scaling and per-head
 * rmsnorm from .zl, the stdlib layers' options, and compiler/hfconfig
 * (config.json -> .zl: what it writes checks and maps every parameter; its
 * errors at config.json:line:col). Run from the repository root. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "arena.h"
#include "diag.h"
#include "graph.h"
#include "hfconfig.h"
#include "hfmap.h"
#include "loader.h"
#include "sema.h"

#include "sema_fixture.h"

static void setup(void) { fixture_tmp_make("test_hf"); }
static void teardown(void) { fixture_tmp_remove(); }

static void expect_has(const Run *r, const char *needle) {
    if (!strstr(r->text, needle)) ck_abort_msg("diagnostics lack \"%s\"; got:\n%.3000s", needle, r->text);
}

static int find_tensor(const Graph *g, const char *name) {
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].name && strcmp(g->tensors[i].name, name) == 0) return i;
    return -1;
}

/* The pieces of parameter name, in order (NULL if none). */
static const GraphHfPiece *pieces_of(const Graph *g, const char *name, int *n) {
    int t = find_tensor(g, name);
    *n = 0;
    for (int i = 0; i < g->hf.npieces; i++)
        if (g->hf.pieces[i].tensor == t) {
            while (i + *n < g->hf.npieces && g->hf.pieces[i + *n].tensor == t) (*n)++;
            return &g->hf.pieces[i];
        }
    return NULL;
}

/* A model with a fused qkv [D, 3D] and an MLP [D, F] x2 fused into w13. */
#define FUSED "const V = 32, T = 8, D = 16, F = 24\n" \
    "model m(tokens: i32[B, T], targets: i32[B, T]) {\n" \
    "  tok = param [V, D] init normal(0.02)\n" \
    "  x = embedding(tok, tokens)\n" \
    "  repeat 2 { x = blk(x) }\n" \
    "  loss cross_entropy(matmul(x, tok, transpose_b), targets)\n}\n" \
    "layer blk(x: [B, T, D]) {\n" \
    "  wqkv = param [D, 3 * D] init normal(0.02)\n" \
    "  w13 = param [D, 2 * F] init normal(0.02)\n" \
    "  g = param [D] init ones\n" \
    "  w2 = param [F, D] init zeros\n" \
    "  a, b = split(linear(x, w13), 2)\n" \
    "  q, k, v = split(linear(x, wqkv), 3)\n" \
    "  return rmsnorm(x + q + k + v + linear(a * b, w2), g)\n}\n"

/* ---- patterns ---- */

START_TEST(patterns_match_and_substitute) {
    Arena a;
    arena_init(&a);
    ck_assert_ptr_null(hfmap_pattern_error(&a, "block.{i}.attn.wq"));
    ck_assert_ptr_null(hfmap_pattern_error(&a, "a.{i}.b.{j}.c.{i}"));
    ck_assert_str_eq(hfmap_pattern_error(&a, ""), "the pattern is empty");
    ck_assert_str_eq(hfmap_pattern_error(&a, "a}b"), "a '}' without its '{'");
    ck_assert_str_eq(hfmap_pattern_error(&a, "a.{1x}"),
                     "a placeholder is {NAME}: a letter or '_', then letters, digits or '_', then '}'");
    ck_assert_str_eq(hfmap_pattern_error(&a, "a{i}{j}"),
                     "the placeholder '{i}' is followed by another placeholder: what follows a placeholder must not "
                     "be a digit, so that the number it matches ends there");
    ck_assert_ptr_nonnull(strstr(hfmap_pattern_error(&a, "a{i}0"), "is followed by a digit"));
    ck_assert_str_eq(hfmap_pattern_error(&a, "{a}.{b}.{c}.{d}.{e}.{f}.{g}.{h}.{k}"), "more than 8 placeholders");
    const char *names[HFMAP_MAX_HOLES], *vals[HFMAP_MAX_HOLES];
    int n = -1;
    ck_assert(hfmap_match(&a, "block.{i}.attn.wq", "block.12.attn.wq", names, vals, &n));
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(names[0], "i");
    ck_assert_str_eq(vals[0], "12");
    ck_assert(!hfmap_match(&a, "block.{i}.attn.wq", "block.x.attn.wq", names, vals, &n));
    ck_assert(!hfmap_match(&a, "block.{i}.attn.wq", "block.1.attn.wqkv", names, vals, &n));
    ck_assert(!hfmap_match(&a, "block.{i}.attn", "block..attn", names, vals, &n));
    ck_assert(hfmap_match(&a, "f.{i}.g.{j}", "f.3.g.10", names, vals, &n));
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(vals[1], "10");
    ck_assert(hfmap_match(&a, "a.{i}.b.{i}", "a.4.b.4", names, vals, &n));
    ck_assert(!hfmap_match(&a, "a.{i}.b.{i}", "a.4.b.5", names, vals, &n)); /* a name repeated: one number */
    ck_assert(hfmap_match(&a, "wte", "wte", names, vals, &n));
    ck_assert_int_eq(n, 0);
    const char *nm[2] = {"i", "j"}, *vl[2] = {"7", "12"}, *bad = NULL;
    ck_assert_str_eq(hfmap_subst(&a, "model.layers.{i}.x.{j}.{i}", nm, vl, 2, &bad), "model.layers.7.x.12.7");
    ck_assert_ptr_null(hfmap_subst(&a, "model.{k}", nm, vl, 2, &bad));
    ck_assert_str_eq(bad, "k");
    arena_free(&a);
}
END_TEST

/* ---- the mapping ---- */

START_TEST(mapping_pieces) {
    Run r;
    run_src(&r, FUSED "hf \"Fused\" {\n"
                "  config = [\"{\", \"  \\\"model_type\\\": \\\"fused\\\"\", \"}\"]\n"
                "  \"tok\" = \"embed.weight\"\n"
                "  \"blk.{i}.wqkv\" = cat(transpose(\"l.{i}.q.weight\"), transpose(\"l.{i}.k.weight\"),\n"
                "                       transpose(\"l.{i}.v.weight\"))\n"
                "  \"blk.{i}.w13\" = cat(cols(transpose(\"l.{i}.gate_up.weight\"), 24, 24),\n"
                "                      cols(transpose(\"l.{i}.gate_up.weight\"), 0, 24))\n"
                "  \"blk.{i}.g\" = \"l.{i}.norm.weight\"\n"
                "  \"blk.{i}.w2\" = transpose(\"l.{i}.down.weight\")\n"
                "}\n");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_str_eq(r.text, "");
    const Graph *g = &r.g;
    ck_assert_str_eq(g->hf.arch, "Fused");
    ck_assert_str_eq(g->hf.config, "{\n  \"model_type\": \"fused\"\n}\n");
    int n;
    const GraphHfPiece *p = pieces_of(g, "blk.1.wqkv", &n);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(p[1].hf_name, "l.1.k.weight");
    ck_assert(p[1].transpose);
    ck_assert_int_eq(p[1].src_col, 0);
    ck_assert_int_eq(p[1].cols, 16); /* the 48 columns shared equally */
    p = pieces_of(g, "blk.0.w13", &n);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(p[0].hf_name, "l.0.gate_up.weight");
    ck_assert_int_eq(p[0].src_col, 24);
    ck_assert_int_eq(p[0].cols, 24);
    ck_assert_int_eq(p[1].src_col, 0);
    p = pieces_of(g, "tok", &n);
    ck_assert_int_eq(n, 1);
    ck_assert(!p[0].transpose);
    ck_assert_int_eq(p[0].cols, 16);
    p = pieces_of(g, "blk.0.g", &n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(p[0].hf_name, "l.0.norm.weight");
    /* every parameter's pieces adjacent, in parameter order */
    ck_assert_int_eq(g->hf.npieces, 1 + 2 * (3 + 2 + 1 + 1));
    for (int i = 1; i < g->hf.npieces; i++) ck_assert_int_le(g->hf.pieces[i - 1].tensor, g->hf.pieces[i].tensor);
    run_free(&r);
}
END_TEST

START_TEST(mapping_errors) {
    Run r;
    run_src(&r, FUSED "hf \"Fused\" {\n"
                "  \"tok\" = \"embed.weight\"\n"
                "  \"blk.{i}.wqkv\" = transpose(\"l.{i}.qkv.weight\")\n"
                "  \"blk.{i}.wqkv\" = \"x\"\n"
                "  \"blk.{i}.w13\" = cat(cols(\"a\", 0, 40), cols(\"b\", 0, 4))\n"
                "  \"blk.{i}.g\" = transpose(\"l.{i}.norm.weight\")\n"
                "  \"blk.{i}.w2\" = transpose(\"l.{j}.down\")\n"
                "  \"blok.{i}.g\" = \"n\"\n"
                "  \"x\" = transpose(cat(\"a\"))\n"
                "  \"y\" = cols(cat(\"a\"), 0, 1)\n"
                "  \"z\" = transpos(\"a\")\n"
                "  \"w\" = cat(\"a\", cat(\"b\"))\n"
                "  \"v\" = cols(\"a\", -1, 2)\n"
                "  config = \"{oops}\"\n"
                "  vocab = 3\n"
                "}\n");
    ck_assert(!r.ok);
    expect_has(&r, "main.zl:20:3: error: parameter 'blk.0.wqkv' is matched by two entries of this hf block");
    expect_has(&r, "main.zl:19:3: note: the first entry matching it is here");
    expect_has(&r, "main.zl:21:3: error: the columns of the pieces add up to 44, but 'blk.0.w13' has 48 in its last axis");
    expect_has(&r, "hint: give each piece its columns: cols(\"name\", first, count)");
    expect_has(&r, "main.zl:22:27: error: transpose needs a 2-D parameter, but 'blk.0.g' has rank 1");
    expect_has(&r, "main.zl:23:28: error: '{j}' is not a placeholder of the pattern \"blk.{i}.w2\"");
    expect_has(&r, "main.zl:24:3: error: the pattern \"blok.{i}.g\" matches no parameter");
    expect_has(&r, "hint: did you mean \"blk.0.g\"? (parameters are named by their call path: docs/checking.md)");
    expect_has(&r, "main.zl:25:9: error: transpose takes one HF tensor name: transpose(\"...weight\")");
    expect_has(&r, "main.zl:26:14: error: cols of cat: write the pieces of the cat instead");
    expect_has(&r, "main.zl:27:9: error: unknown hf function 'transpos'; did you mean 'transpose'?");
    expect_has(&r, "main.zl:28:18: error: cat goes outermost: cat(a, b, ...) of names, transposes and cols");
    expect_has(&r, "main.zl:29:19: error: the first column must be 0 or more, got -1");
    expect_has(&r, "main.zl:30:12: error: config is not valid JSON: line 1, column 2: expected a string key in an object");
    expect_has(&r, "main.zl:31:3: error: unknown hf setting 'vocab'");
    expect_has(&r, "hint: an hf block holds config = \"JSON\" and \"PARAMETER PATTERN\" = \"HF TENSOR\" entries");
    ck_assert_int_eq(r.d.errors, 12);
    run_free(&r);
}
END_TEST

/* PEFT's expert layouts: a rank-3 parameter, whole, alone */
START_TEST(mapping_expert_layout_errors) {
    Run r;
    run_src(&r, FUSED "hf \"Fused\" {\n"
                "  \"blk.{i}.g\" = expert_rows(\"n\")\n"
                "  \"blk.{i}.w13\" = cat(expert_cols(\"a\"), \"b\")\n"
                "  \"blk.{i}.w2\" = expert_rows(transpose(\"a\"))\n"
                "  \"blk.{i}.wqkv\" = cols(expert_cols(\"a\"), 0, 1)\n"
                "}\n");
    ck_assert(!r.ok);
    expect_has(&r, "main.zl:18:29: error: expert_rows needs a parameter [experts, rows, columns] of rank 3, but 'blk.0.g' has rank 1");
    expect_has(&r, "main.zl:19:35: error: expert_cols in a cat: an expert layout maps its parameter whole, alone");
    expect_has(&r, "main.zl:20:18: error: expert_rows takes one HF tensor name: expert_rows(\"...lora_A.weight\")");
    expect_has(&r, "main.zl:21:25: error: cols of expert_cols: an expert layout maps its parameter whole");
    run_free(&r);
}
END_TEST

START_TEST(mapping_from_several_files) {
    /* lib.zl's block names no architecture: it adds entries; other.zl's names
     * another one: it is left out. The model's file wins over both. */
    write_file("lib.zl", "hf {\n  \"blk.{i}.g\" = \"lib.{i}.g\"\n  \"blk.{i}.wqkv\" = \"lib.{i}.qkv\"\n"
                         "  \"never.matches\" = \"n\"\n}\n");
    write_file("other.zl", "hf \"Other\" {\n  \"blk.{i}.w13\" = \"other.{i}\"\n}\n");
    Run r;
    run_src(&r, "import \"lib\"\nimport \"other\"\n" FUSED "hf \"Fused\" {\n  \"blk.{i}.g\" = \"main.{i}.g\"\n}\n");
    ck_assert_msg(r.ok, "%s", r.text);
    int n;
    ck_assert_str_eq(pieces_of(&r.g, "blk.1.g", &n)->hf_name, "main.1.g");
    ck_assert_str_eq(pieces_of(&r.g, "blk.1.wqkv", &n)->hf_name, "lib.1.qkv");
    ck_assert_ptr_null(pieces_of(&r.g, "blk.0.w13", &n));
    /* the unmapped parameters: one warning */
    expect_has(&r, "main.zl:19:1: warning: 5 parameters have no Hugging Face tensor: tok, blk.0.w13, blk.0.w2, "
                   "blk.1.w13 and 1 more");
    expect_has(&r, "note: an export leaves them out and an import leaves them as initialised");
    ck_assert_int_eq(r.d.warnings, 1);
    run_free(&r);
    /* the model's file needs the architecture; one block per file; config only there */
    write_file("lib2.zl", "hf {\n  config = \"{}\"\n}\n");
    run_src(&r, "import \"lib2\"\n" FUSED "hf { \"tok\" = \"e\" }\nhf \"B\" { \"tok\" = \"e\" }\n");
    expect_has(&r, "main.zl:19:1: error: a file has one hf block; this is a second one");
    expect_has(&r, "main.zl:18:1: note: the first is here");
    expect_has(&r, "main.zl:18:1: error: the hf block of the model's file names the Hugging Face architecture");
    run_free(&r);
    run_src(&r, "import \"lib2\"\n" FUSED "hf \"B\" { \"tok\" = \"e\" }\n");
    expect_has(&r, "lib2.zl:2:3: error: config belongs in the hf block of the model's file");
    run_free(&r);
    /* no hf block in the model's file: no mapping, imports' blocks unused */
    run_src(&r, "import \"lib\"\n" FUSED);
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_ptr_null(r.g.hf.arch);
    ck_assert_int_eq(r.g.hf.npieces, 0);
    run_free(&r);
}
END_TEST

/* ---- if, and the primitives' new attributes from .zl ---- */

#define TINY "const V = 32, T = 8, D = 16\nmodel m(tokens: i32[B, T], targets: i32[B, T]) {\n" \
             "  wte = param [V, D] init normal(0.02)\n  x = embedding(wte, tokens)\n"
#define TAIL "  loss cross_entropy(matmul(x, wte, transpose_b), targets)\n}\n"

START_TEST(if_statement) {
    Run r;
    run_src(&r, TINY "  x = f(x, true)\n  x = f(x, false)\n" TAIL
                "layer f(x: [B, T, D], gain) {\n"
                "  if gain {\n    g = param [D] init ones\n    y = rmsnorm(x, g)\n"
                "  } else {\n    y = rmsnorm(x)\n    z = no_such_name\n  }\n"
                "  return y\n}\n");
    /* the branch not taken is not expanded: no error from it when gain */
    expect_has(&r, "main.zl:15:9: error: unknown name 'no_such_name'");
    ck_assert_int_eq(r.d.errors, 1);
    ck_assert_int_ge(find_tensor(&r.g, "f.g"), 0);
    ck_assert_int_lt(find_tensor(&r.g, "f_1.g"), 0);
    run_free(&r);
    run_src(&r, TINY "  x = f(x, 2)\n" TAIL "layer f(x: [B, T, D], c) {\n  if c { return x }\n  return x\n}\n");
    expect_has(&r, "main.zl:9:6: error: an if condition must be true or false (or an integer 0 or 1), got 2");
    run_free(&r);
    run_src(&r, TINY "  x = f(x, 1.0)\n" TAIL "layer f(x: [B, T, D], c) {\n  if c { return x }\n  return x\n}\n");
    expect_has(&r, "main.zl:9:6: error: an if condition must be true or false, got a number");
    run_free(&r);
    /* an integer 0 or 1: a pattern of the layers as arithmetic on the repeat index (a gain in the odd layers) */
    run_src(&r, TINY "  repeat 3 as i { x = f(x, i % 2) }\n" TAIL
                "layer f(x: [B, T, D], gain) {\n"
                "  if gain {\n    g = param [D] init ones\n    y = rmsnorm(x, g)\n"
                "  } else {\n    y = rmsnorm(x)\n  }\n"
                "  return y\n}\n");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_int_lt(find_tensor(&r.g, "f.0.g"), 0);
    ck_assert_int_ge(find_tensor(&r.g, "f.1.g"), 0);
    ck_assert_int_lt(find_tensor(&r.g, "f.2.g"), 0);
    run_free(&r);
    run_src(&r, TINY "  x = f(x, true)\n" TAIL "layer f(x: [B, T, D], c) {\n  if c { return x }\n  return x\n}\n");
    expect_has(&r, "main.zl:9:10: error: return inside if: a layer returns once, at its end");
    run_free(&r);
    /* else on the next line */
    run_src(&r, TINY "  if true { y = x }\n  else { y = x }\n" TAIL);
    expect_has(&r, "main.zl:6:3: error: expected a statement or '}', found keyword 'else'");
    expect_has(&r, "hint: else goes on the line of the '}' that closes the if body: } else {");
    run_free(&r);
}
END_TEST

START_TEST(rope_scaling_and_rmsnorm_heads_from_zl) {
    Run r;
    run_src(&r, TINY "  g = param [4] init ones\n"
                "  x = rmsnorm(x, g, eps = 1e-6, heads = 4)\n"
                "  x = rope(x, heads = 2, theta = 500000.0, scaling = \"llama3\", factor = 8.0,\n"
                "           low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_positions = 16)\n"
                "  x = rope(x, heads = 2, scaling = \"linear\", factor = 2.0)\n" TAIL);
    ck_assert_msg(r.ok, "%s", r.text);
    const GOp *nm = &r.g.ops[1], *ro = &r.g.ops[2], *li = &r.g.ops[3];
    ck_assert_int_eq(nm->prim, PRIM_RMSNORM);
    ck_assert_int_eq(nm->iattr[IA_RMSNORM_HEADS], 4);
    ck_assert_int_eq(ro->iattr[IA_ROPE_SCALING], ROPE_LLAMA3);
    ck_assert_int_eq(ro->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS], 16);
    ck_assert_double_eq(ro->fattr[FA_ROPE_FACTOR], 8.0);
    ck_assert_double_eq(ro->fattr[FA_ROPE_HIGH_FREQ_FACTOR], 4.0);
    ck_assert_int_eq(li->iattr[IA_ROPE_SCALING], ROPE_LINEAR);
    /* the graph listing shows them */
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    graph_dump(&r.g, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, " rmsnorm %3, g -> %5 f32 [1, 8, 16] eps=1e-06 heads=4\n"));
    ck_assert_ptr_nonnull(strstr(buf, " heads=2 theta=500000 scaling=llama3 factor=8 low_freq_factor=1 high_freq_factor=4 "
                                      "original_max_positions=16\n"));
    ck_assert_ptr_nonnull(strstr(buf, " heads=2 theta=10000 scaling=linear factor=2 low_freq_factor=1 high_freq_factor=4 "
                                      "original_max_positions=8192\n"));
    free(buf);
    run_free(&r);
    run_src(&r, TINY "  y = rope(x, heads = 2, scaling = \"dynamic\")\n  y = rope(x, heads = 2, factor = 4.0)\n"
                "  y = rope(x, heads = 2, scaling = 3)\n" TAIL);
    expect_has(&r, "main.zl:5:36: error: rope: 'scaling' must be one of \"none\", \"linear\", \"llama3\", \"yarn\", \"longrope\", got \"dynamic\"");
    expect_has(&r, "main.zl:6:7: error: rope: 'factor' is not used with scaling = \"none\" (it takes scaling = "
                   "\"linear\", \"llama3\" or \"yarn\")");
    expect_has(&r, "main.zl:7:36: error: rope: 'scaling' must be one of \"none\", \"linear\", \"llama3\", \"yarn\", \"longrope\", got an integer");
    run_free(&r);
}
END_TEST

/* The syntax tree of if/else and hf blocks, as --emit=ast prints it. */
START_TEST(ast_of_if_and_hf) {
    Run r;
    write_file("main.zl", "layer f(x, c) {\n  if c { y = x } else {\n    y = x\n  }\n  return y\n}\n"
                          "hf \"A\" {\n  config = \"{}\"\n  \"a.{i}\" = cat(transpose(\"b.{i}\"), cols(\"c\", 0, 2))\n}\n"
                          "hf { }\n");
    char path[256];
    snprintf(path, sizeof path, "%s/main.zl", tmpdir);
    run_init(&r);
    ck_assert(program_load(&r.a, &r.src, &r.d, path, NULL, &r.prog));
    ck_assert_int_eq(r.d.errors, 0);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    ast_dump(r.prog.files[0], f);
    fclose(f);
    ck_assert_str_eq(buf, "layer f(x, c) {\n  if c {\n    y = x\n  } else {\n    y = x\n  }\n  return y\n}\n"
                          "hf \"A\" {\n  config = \"{}\"\n  \"a.{i}\" = cat(transpose(\"b.{i}\"), cols(\"c\", 0, 2))\n}\n"
                          "hf {\n}\n");
    free(buf);
    run_render(&r);
    run_free(&r);
}
END_TEST

/* The stdlib's LLaMA options: Qwen2's biases, Qwen3's q/k norms and head_dim. */
/* stack(): the per-expert tensors of an MoE layer, each one slice of the
 * stacked [E, ...] parameter, with cols inside and cat of stacks; and its
 * errors. */
#define MOE_MODEL "import \"moe\"\nconst V = 32, T = 8, D = 16\n" \
    "model m(tokens: i32[B, T], targets: i32[B, T]) {\n" \
    "  tok = param [V, D] init normal(0.02)\n  x = embedding(tok, tokens)\n  load = moe_load(experts = 3)\n" \
    "  repeat 2 { x, load = moe_block(x, load, 4, 2, 3, 2, 8) }\n" \
    "  loss cross_entropy(matmul(x, tok, transpose_b), targets)\n}\n"

START_TEST(mapping_stack) {
    Run r;
    run_src(&r, MOE_MODEL "hf \"MixtralForCausalLM\" {\n"
                "  \"moe_block.{i}.moe_mlp.wg\" = stack(\"l.{i}.experts.{e}.w1.weight\")\n"
                "  \"moe_block.{i}.moe_mlp.wd\" = cat(stack(cols(\"l.{i}.experts.{x}.w2.weight\", 0, 5)),\n"
                "                                    stack(cols(\"l.{i}.experts.{x}.w2b.weight\", 2, 3)))\n"
                "}\n");
    ck_assert_msg(r.ok, "%s", r.text);
    const Graph *g = &r.g;
    int n;
    const GraphHfPiece *p = pieces_of(g, "moe_block.1.moe_mlp.wg", &n);
    ck_assert_int_eq(n, 3); /* [3, 8, 16]: one tensor per expert */
    for (int e = 0; e < 3; e++) {
        char want[64];
        snprintf(want, sizeof want, "l.1.experts.%d.w1.weight", e);
        ck_assert_str_eq(p[e].hf_name, want);
        ck_assert(p[e].stacked && p[e].index == e && !p[e].transpose);
        ck_assert_int_eq(p[e].cols, 16);
    }
    p = pieces_of(g, "moe_block.0.moe_mlp.wd", &n);
    ck_assert_int_eq(n, 6); /* [3, 16, 8]: per expert its two column ranges */
    ck_assert_str_eq(p[2].hf_name, "l.0.experts.1.w2.weight");
    ck_assert(p[3].stacked && p[3].index == 1 && p[3].src_col == 2 && p[3].cols == 3);
    ck_assert_str_eq(p[3].hf_name, "l.0.experts.1.w2b.weight");
    run_free(&r);
    run_src(&r, MOE_MODEL "hf \"MixtralForCausalLM\" {\n"
                "  \"moe_block.{i}.moe_mlp.wg\" = stack(\"l.{i}.experts.w1.weight\")\n"
                "  \"moe_block.{i}.moe_mlp.wu\" = stack(\"l.{i}.experts.{e}.{f}.weight\")\n"
                "  \"moe_block.{i}.moe_mlp.wd\" = cat(stack(\"l.{i}.{e}.a\"), \"l.{i}.b\")\n"
                "  \"moe_block.{i}.rms.g\" = stack(\"l.{i}.{e}.norm\")\n"
                "  \"moe_block.{i}.moe_mlp.wr\" = stack(transpose(\"l.{i}.{e}.gate\"))\n"
                "  \"tok\" = cols(stack(\"t.{e}\"), 0, 16)\n"
                "}\n");
    ck_assert(!r.ok);
    expect_has(&r, "main.zl:11:38: error: stack: \"l.{i}.experts.w1.weight\" has no placeholder for the index along the "
                   "first axis (all of its are the pattern \"moe_block.{i}.moe_mlp.wg\"'s)");
    expect_has(&r, "error: stack: \"l.{i}.experts.{e}.{f}.weight\" has two placeholders that are not the pattern's "
                   "('{e}' and '{f}'); one is the index along the parameter's first axis");
    expect_has(&r, "error: the pieces of one parameter are all stacked or none");
    expect_has(&r, "error: stack needs a parameter of rank 2 or more (the first axis indexes the stacked tensors), but "
                   "'moe_block.0.rms.g' has rank 1");
    expect_has(&r, "error: stack of transpose: a stacked tensor is a name, or cols of a name, in the parameter's own layout");
    expect_has(&r, "error: cols of stack: write stack(cols(...)) instead");
    run_free(&r);
}
END_TEST

START_TEST(stdlib_llama_options) {
    Run r;
    run_src(&r, "import \"llama\"\nconst V = 32, T = 8, D = 16\n"
                "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
                "  tok = param [V, D] init normal(0.02)\n  x = embedding(tok, tokens)\n"
                "  repeat 1 { x = llama_block(x, 4, 2, 24, eps = 1e-6, theta = 1e6, qkv_bias = true) }\n"
                "  repeat 1 { x = llama_block(x, 4, 2, 24, head_dim = 6, qk_norm = true, rope_scaling = \"linear\","
                " rope_factor = 2.0) }\n"
                "  x = rms(x, 1e-6)\n"
                "  loss cross_entropy(matmul(x, tok, transpose_b), targets)\n}\n");
    ck_assert_msg(r.ok, "%s", r.text);
    const Graph *g = &r.g;
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block.0.rope_attn.bk")].dims[0], 8);
    ck_assert_int_lt(find_tensor(g, "llama_block.0.rope_attn.q_norm"), 0);
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block_1.0.rope_attn.wq")].dims[1], 24);
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block_1.0.rope_attn.wo")].dims[0], 24);
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block_1.0.rope_attn.k_norm")].dims[0], 6);
    ck_assert_int_lt(find_tensor(g, "llama_block_1.0.rope_attn.bq"), 0);
    /* 512 + block 0: 16+256+128+128+256+16+8+8+16+3*384 + block 1: 16+384+192+192+384+6+6+16+3*384 + 16 */
    ck_assert_int_eq(graph_param_count(g), 512 + 1984 + 2348 + 16);
    run_free(&r);
}
END_TEST

/* The stdlib's bias options (LLaMA's attention_bias and mlp_bias) and OLMo 2's
 * block: post-norm, q/k RMSNorm over the whole projection. */
START_TEST(stdlib_bias_and_olmo2_options) {
    Run r;
    run_src(&r, "import \"llama\"\nimport \"olmo2\"\nconst V = 32, T = 8, D = 16\n"
                "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
                "  tok = param [V, D] init normal(0.02)\n  x = embedding(tok, tokens)\n"
                "  repeat 1 { x = llama_block(x, 4, 2, 24, head_dim = 6, qkv_bias = true, o_bias = true, mlp_bias = true) }\n"
                "  repeat 1 { x = olmo2_block(x, 4, 2, 24, attention_bias = true) }\n"
                "  x = rms(x, 1e-6)\n"
                "  loss cross_entropy(matmul(x, tok, transpose_b), targets)\n}\n");
    ck_assert_msg(r.ok, "%s", r.text);
    const Graph *g = &r.g;
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block.0.rope_attn.bq")].dims[0], 24);
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block.0.rope_attn.bo")].dims[0], 16);
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block.0.swiglu.b1")].dims[0], 24);
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block.0.swiglu.b3")].dims[0], 24);
    ck_assert_int_eq(g->tensors[find_tensor(g, "llama_block.0.swiglu.b2")].dims[0], 16);
    /* OLMo 2: q and k normalised over all heads at once: gains of 4 * 4 and 2 * 4 */
    ck_assert_int_eq(g->tensors[find_tensor(g, "olmo2_block.0.rope_attn.q_norm")].dims[0], 16);
    ck_assert_int_eq(g->tensors[find_tensor(g, "olmo2_block.0.rope_attn.k_norm")].dims[0], 8);
    ck_assert_int_eq(g->tensors[find_tensor(g, "olmo2_block.0.rope_attn.bo")].dims[0], 16);
    ck_assert_int_ge(find_tensor(g, "olmo2_block.0.rms_1.g"), 0);
    ck_assert_int_lt(find_tensor(g, "olmo2_block.0.rms_2.g"), 0);
    ck_assert_int_lt(find_tensor(g, "olmo2_block.0.swiglu.b1"), 0);
    /* 512 + llama: 16+384+192+192+384 + 24+12+12+16 + 16 + 3*384 + 24+24+16
     *     + olmo2: 256+128+128+256 + 16+8+8+16 + 16+8 + 16 + 3*384 + 16 + 16 */
    ck_assert_int_eq(graph_param_count(g), 512 + 2424 + 2064 + 16);
    run_free(&r);
    /* a hand-written OLMo 2 maps only its own parameters: stdlib/olmo2.zl's hf block maps the blocks */
    run_src(&r, "import \"llama\"\nimport \"olmo2\"\nconst V = 32, T = 8, D = 16\n"
                "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
                "  tok = param [V, D] init normal(0.02)\n  x = embedding(tok, tokens)\n"
                "  repeat 2 { x = olmo2_block(x, 4, 2, 24) }\n"
                "  x = rms(x, 1e-6)\n"
                "  loss cross_entropy(matmul(x, tok, transpose_b), targets)\n}\n"
                "hf \"Olmo2ForCausalLM\" {\n  \"tok\" = \"model.embed_tokens.weight\"\n"
                "  \"rms.g\" = \"model.norm.weight\"\n}\n");
    ck_assert_msg(r.ok, "%s", r.text);
    ck_assert_str_eq(r.text, "");
    int n;
    const GraphHfPiece *p = pieces_of(&r.g, "olmo2_block.1.rms_1.g", &n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(p->hf_name, "model.layers.1.post_feedforward_layernorm.weight");
    p = pieces_of(&r.g, "olmo2_block.0.rope_attn.q_norm", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.0.self_attn.q_norm.weight");
    ck_assert_int_eq(r.g.hf.npieces, 2 + 2 * 11);
    run_free(&r);
}
END_TEST

/* ---- config.json -> .zl ---- */

typedef struct Conv {
    Run r;
    const char *zl;
} Conv;

static void convert(Conv *c, const char *config, int64_t seq) {
    run_init(&c->r);
    int id = source_add(&c->r.src, "m/config.json", config, strlen(config));
    ck_assert_int_ge(id, 0);
    HfConfigOptions o = {.seq = seq};
    c->zl = hfconfig_text_to_zl(&c->r.a, &c->r.src, id, &c->r.d, &o);
    if (c->zl) {
        LoadOptions lo = {NULL, 0, ZINF_STDLIB_DIR};
        ck_assert(program_load_text(&c->r.a, &c->r.src, &c->r.d, "m/config.json.zl", c->zl, &lo, &c->r.prog));
        c->r.ok = sema_build(&c->r.a, &c->r.prog, &c->r.src, &c->r.d, &c->r.g) && c->r.d.errors == 0;
    }
    run_render(&c->r);
}

#define QWEN3 "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": 100,\n" \
    " \"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 3, \"num_attention_heads\": 4,\n" \
    " \"num_key_value_heads\": 2, \"head_dim\": 16, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-06,\n" \
    " \"rope_theta\": 1000000, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\",\n" \
    " \"attention_dropout\": 0.0, \"use_sliding_window\": false, \"sliding_window\": 32, \"max_window_layers\": 3,\n" \
    " \"bos_token_id\": 1, \"eos_token_id\": 2}\n"

START_TEST(config_to_zl) {
    Conv c;
    convert(&c, QWEN3, 0);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_str_eq(c.r.text, "");
    ck_assert_ptr_nonnull(strstr(c.zl, "const V = 100, T = 1024, D = 32, H = 4, KV = 2, F = 48, L = 3, HD = 16\n"));
    ck_assert_ptr_nonnull(strstr(c.zl, "x = llama_block(x, H, KV, F, eps = 1e-06, theta = 1000000.0, head_dim = HD, "
                                       "qk_norm = true)"));
    ck_assert_ptr_nonnull(strstr(c.zl, "loss cross_entropy(matmul(x, tok, transpose_b), targets)"));
    ck_assert_ptr_nonnull(strstr(c.zl, "  dtype = bf16\n"));
    ck_assert_ptr_nonnull(strstr(c.zl, "hf \"Qwen3ForCausalLM\" {\n  config = [\n    \"{\\\"architectures\\\": "));
    /* every parameter mapped, config.json carried as is */
    ck_assert_str_eq(c.r.g.hf.arch, "Qwen3ForCausalLM");
    ck_assert_str_eq(c.r.g.hf.config, QWEN3);
    int n;
    const GraphHfPiece *p = pieces_of(&c.r.g, "llama_block.2.rope_attn.q_norm", &n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(p->hf_name, "model.layers.2.self_attn.q_norm.weight");
    p = pieces_of(&c.r.g, "llama_block.1.swiglu.w2", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.1.mlp.down_proj.weight");
    ck_assert(p->transpose);
    ck_assert_int_eq(c.r.g.hf.npieces, 1 + 3 * 11 + 1);
    run_free(&c.r);
    /* --seq: a sliding window as long as the sequence is full attention; longer is fine too */
    convert(&c, "{\"architectures\": [\"MistralForCausalLM\"], \"vocab_size\": 10, \"hidden_size\": 8,"
                " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
                " \"max_position_embeddings\": 64, \"sliding_window\": 16, \"tie_word_embeddings\": false}", 16);
    ck_assert_msg(c.r.ok, "%s", c.r.text);
    ck_assert_ptr_nonnull(strstr(c.zl, ", T = 16,"));
    ck_assert_ptr_nonnull(strstr(c.zl, "\"head\" = transpose(\"lm_head.weight\")"));
    run_free(&c.r);
}
END_TEST

/* Sliding windows per layer: the emitted expression of the repeat index
 * gives each layer's attention the window transformers applies there (a
 * periodic layer_types, one of no period, Qwen2's max_window_layers; a
 * Qwen2 config without use_sliding_window has none). */
static void check_windows(const char *config, const int64_t *want, int L) {
    Conv c;
    convert(&c, config, 32);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    int k = 0;
    for (int i = 0; i < c.r.g.nops; i++)
        if (c.r.g.ops[i].kind == OP_FWD && c.r.g.ops[i].prim == PRIM_ATTENTION) {
            ck_assert_int_lt(k, L);
            ck_assert_msg(c.r.g.ops[i].iattr[IA_ATTENTION_WINDOW] == want[k], "layer %d: window %lld, want %lld\n%s", k,
                          (long long)c.r.g.ops[i].iattr[IA_ATTENTION_WINDOW], (long long)want[k], c.zl);
            k++;
        }
    ck_assert_int_eq(k, L);
    run_free(&c.r);
}

#define QWEN2_6 "{\"architectures\": [\"Qwen2ForCausalLM\"], \"vocab_size\": 10, \"hidden_size\": 8," \
    " \"intermediate_size\": 8, \"num_hidden_layers\": 6, \"num_attention_heads\": 2," \
    " \"max_position_embeddings\": 64, "

START_TEST(config_to_zl_windows) {
    const char *S = "\"sliding_attention\"", *F = "\"full_attention\"";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, QWEN2_6 "\"use_sliding_window\": true, \"sliding_window\": 7, \"layer_types\": [%s, %s, %s, %s, %s, %s]}",
             S, S, F, S, S, F);
    check_windows(cfg, (const int64_t[]){7, 7, 0, 7, 7, 0}, 6);
    snprintf(cfg, sizeof cfg, QWEN2_6 "\"use_sliding_window\": true, \"sliding_window\": 5, \"layer_types\": [%s, %s, %s, %s, %s, %s]}",
             F, S, F, F, S, S);
    check_windows(cfg, (const int64_t[]){0, 5, 0, 0, 5, 5}, 6);
    check_windows(QWEN2_6 "\"use_sliding_window\": true, \"sliding_window\": 9, \"max_window_layers\": 4}",
                  (const int64_t[]){0, 0, 0, 0, 9, 9}, 6);
    check_windows(QWEN2_6 "\"use_sliding_window\": false, \"sliding_window\": 9, \"max_window_layers\": 4}",
                  (const int64_t[]){0, 0, 0, 0, 0, 0}, 6);
    check_windows("{\"architectures\": [\"MistralForCausalLM\"], \"vocab_size\": 10, \"hidden_size\": 8,"
                  " \"intermediate_size\": 8, \"num_hidden_layers\": 3, \"num_attention_heads\": 2,"
                  " \"max_position_embeddings\": 64, \"sliding_window\": 4}",
                  (const int64_t[]){4, 4, 4}, 3);
}
END_TEST

/* LLaMA's biases, OLMo 2's block and Phi-3's fused tensors, cut by the mapping. */
START_TEST(config_to_zl_families) {
    Conv c;
    const char *dims = "\"vocab_size\": 50, \"hidden_size\": 32, \"intermediate_size\": 40, \"num_hidden_layers\": 2,"
                       " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 64";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "{\"architectures\": [\"LlamaForCausalLM\"], %s, \"head_dim\": 12, \"attention_bias\": true,"
             " \"mlp_bias\": true}", dims);
    convert(&c, cfg, 0);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_ptr_nonnull(strstr(c.zl, "head_dim = HD, qkv_bias = true, o_bias = true, mlp_bias = true)"));
    int n;
    const GraphHfPiece *p = pieces_of(&c.r.g, "llama_block.1.rope_attn.bo", &n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(p->hf_name, "model.layers.1.self_attn.o_proj.bias");
    p = pieces_of(&c.r.g, "llama_block.0.swiglu.b3", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.0.mlp.up_proj.bias");
    ck_assert_int_eq(c.r.g.hf.npieces, 1 + 2 * (1 + 4 + 4 + 1 + 3 + 3) + 2);
    run_free(&c.r);

    /* no head_dim: Qwen3's config class has 128, whatever hidden_size / heads is */
    convert(&c, "{\"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 50, \"hidden_size\": 32,"
                " \"intermediate_size\": 40, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
                " \"max_position_embeddings\": 64}", 0);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_ptr_nonnull(strstr(c.zl, ", HD = 128\n"));
    run_free(&c.r);

    snprintf(cfg, sizeof cfg, "{\"architectures\": [\"Olmo2ForCausalLM\"], %s, \"attention_bias\": true,"
             " \"tie_word_embeddings\": true}", dims);
    convert(&c, cfg, 0);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_ptr_nonnull(strstr(c.zl, "import \"llama\"\nimport \"olmo2\"\n"));
    ck_assert_ptr_nonnull(strstr(c.zl, "x = olmo2_block(x, H, KV, F, eps = 1e-06, theta = 10000.0, attention_bias = true)"));
    p = pieces_of(&c.r.g, "olmo2_block.0.rms.g", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.0.post_attention_layernorm.weight");
    p = pieces_of(&c.r.g, "olmo2_block.1.rms_1.g", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.1.post_feedforward_layernorm.weight");
    p = pieces_of(&c.r.g, "olmo2_block.1.rope_attn.k_norm", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.1.self_attn.k_norm.weight");
    ck_assert_int_eq(p->cols, 16);
    ck_assert_int_eq(c.r.g.hf.npieces, 1 + 2 * (4 + 4 + 2 + 2 + 3) + 1);
    run_free(&c.r);

    snprintf(cfg, sizeof cfg, "{\"architectures\": [\"Phi3ForCausalLM\"], %s, \"original_max_position_embeddings\": 64,"
             " \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"sliding_window\": null, \"attention_bias\": false}", dims);
    convert(&c, cfg, 0);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_str_eq(c.r.text, "");
    static const struct { const char *param, *hf; int64_t col, cols; } cut[] = {
        {"llama_block.1.rope_attn.wq", "model.layers.1.self_attn.qkv_proj.weight", 0, 32},
        {"llama_block.1.rope_attn.wk", "model.layers.1.self_attn.qkv_proj.weight", 32, 16},
        {"llama_block.1.rope_attn.wv", "model.layers.1.self_attn.qkv_proj.weight", 48, 16},
        {"llama_block.0.swiglu.w1", "model.layers.0.mlp.gate_up_proj.weight", 0, 40},
        {"llama_block.0.swiglu.w3", "model.layers.0.mlp.gate_up_proj.weight", 40, 40},
    };
    for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
        p = pieces_of(&c.r.g, cut[i].param, &n);
        ck_assert_int_eq(n, 1);
        ck_assert_str_eq(p->hf_name, cut[i].hf);
        ck_assert(p->transpose);
        ck_assert_int_eq(p->src_col, cut[i].col);
        ck_assert_int_eq(p->cols, cut[i].cols);
    }
    run_free(&c.r);
}
END_TEST

/* The MoE families: stdlib/moe.zl's blocks, each expert's tensor one slice
 * of a stacked parameter, the load-balancing loss with output_router_logits. */
START_TEST(config_to_zl_moe) {
    Conv c;
    convert(&c, "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"vocab_size\": 50, \"hidden_size\": 32,"
                " \"intermediate_size\": 40, \"moe_intermediate_size\": 12, \"shared_expert_intermediate_size\": 20,"
                " \"num_experts\": 4, \"num_experts_per_tok\": 2, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                " \"num_key_value_heads\": 2, \"max_position_embeddings\": 64, \"decoder_sparse_step\": 1,"
                " \"mlp_only_layers\": [], \"output_router_logits\": true, \"router_aux_loss_coef\": 0.01,"
                " \"use_sliding_window\": false, \"sliding_window\": 32, \"qkv_bias\": true}", 16);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_str_eq(c.r.text, "");
    ck_assert_ptr_nonnull(strstr(c.zl, "const V = 50, T = 16, D = 32, H = 4, KV = 2, E = 4, K = 2, F = 12, L = 2, S = 20\n"));
    ck_assert_ptr_nonnull(strstr(c.zl, "x, load = moe_block(x, load, H, KV, E, K, F, normalize = false, eps = 1e-06, "
                                       "theta = 10000.0, qkv_bias = true,\n"
                                       "                        shared_expert = true, shared_hidden = S)"));
    ck_assert_ptr_nonnull(strstr(c.zl, "loss cross_entropy(linear(x, head), targets) + moe_aux_loss(load, E, L, B * T, 0.01)"));
    int n;
    const GraphHfPiece *p = pieces_of(&c.r.g, "moe_block.1.moe_mlp.wu", &n);
    ck_assert_int_eq(n, 4);
    ck_assert_str_eq(p[3].hf_name, "model.layers.1.mlp.experts.3.up_proj.weight");
    ck_assert(p[3].stacked && p[3].index == 3 && !p[3].transpose);
    p = pieces_of(&c.r.g, "moe_block.0.moe_mlp.ws", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.0.mlp.shared_expert_gate.weight");
    p = pieces_of(&c.r.g, "moe_block.0.moe_mlp.swiglu.w2", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.0.mlp.shared_expert.down_proj.weight");
    ck_assert(p->transpose);
    /* tok, head, final norm; a layer: 2 norms, 4 + 3 attention, router, 3 x 4 experts, shared gate and 3 linears */
    ck_assert_int_eq(c.r.g.hf.npieces, 3 + 2 * (2 + 7 + 1 + 12 + 4));
    run_free(&c.r);

    /* Mixtral: block_sparse_moe's w1/w3/w2, gates renormalised, no load-balancing loss */
    convert(&c, "{\"architectures\": [\"MixtralForCausalLM\"], \"vocab_size\": 50, \"hidden_size\": 32,"
                " \"intermediate_size\": 24, \"num_local_experts\": 3, \"num_experts_per_tok\": 2, \"num_hidden_layers\": 1,"
                " \"num_attention_heads\": 4, \"max_position_embeddings\": 64, \"router_jitter_noise\": 0.0,"
                " \"sliding_window\": null, \"head_dim\": null}", 0);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_ptr_nonnull(strstr(c.zl, "normalize = true, eps = 1e-06, theta = 10000.0,\n                        aux = false)"));
    p = pieces_of(&c.r.g, "moe_block.0.moe_mlp.wd", &n);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(p[1].hf_name, "model.layers.0.block_sparse_moe.experts.1.w2.weight");
    p = pieces_of(&c.r.g, "moe_block.0.moe_mlp.wr", &n);
    ck_assert_str_eq(p->hf_name, "model.layers.0.block_sparse_moe.gate.weight");
    run_free(&c.r);

    /* OLMoE: q/k norms over the whole projections, experts intermediate_size wide */
    convert(&c, "{\"architectures\": [\"OlmoeForCausalLM\"], \"vocab_size\": 50, \"hidden_size\": 32,"
                " \"intermediate_size\": 20, \"num_experts\": 5, \"num_experts_per_tok\": 2, \"num_hidden_layers\": 1,"
                " \"num_attention_heads\": 4, \"max_position_embeddings\": 64, \"clip_qkv\": null,"
                " \"norm_topk_prob\": false}", 0);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_ptr_nonnull(strstr(c.zl, "E = 5, K = 2, F = 20, L = 1\n"));
    ck_assert_ptr_nonnull(strstr(c.zl, "qk_norm = true, qk_norm_full = true"));
    p = pieces_of(&c.r.g, "moe_block.0.rope_attn.q_norm", &n);
    ck_assert_int_eq(p->cols, 32);
    run_free(&c.r);

    /* Qwen3-MoE with dense layers: decoder_sparse_step 2 makes 1, 3 sparse, mlp_only_layers takes 3
     * out (4 past the layers matches none): only layer 1 sparse, the load-balancing loss over it alone */
    convert(&c, "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"vocab_size\": 50, \"hidden_size\": 32,"
                " \"intermediate_size\": 40, \"moe_intermediate_size\": 12, \"num_experts\": 4, \"num_experts_per_tok\": 2,"
                " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"head_dim\": 8, \"max_position_embeddings\": 64,"
                " \"decoder_sparse_step\": 2, \"mlp_only_layers\": [3, 4], \"output_router_logits\": true}", 16);
    ck_assert_msg(c.r.ok, "%s\n%s", c.r.text, c.zl ? c.zl : "");
    ck_assert_ptr_nonnull(strstr(c.zl, ", F = 12, L = 4,\n      FD = 40, LS = 1\n"));
    ck_assert_ptr_nonnull(strstr(c.zl, "a dense MLP of width FD: layers 0 2 3\n"));
    ck_assert_ptr_nonnull(strstr(c.zl, "    SP = 0 + (i % 3 + 3) / 4 - (i % 3 + 3) / 5\n"));
    ck_assert_ptr_nonnull(strstr(c.zl, "sparse = SP, dense_hidden = FD, qk_norm = true)"));
    ck_assert_ptr_nonnull(strstr(c.zl, "+ moe_aux_loss(load, E, LS, B * T, 0.001)"));
    for (int k = 0; k < 4; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "moe_block.%d.moe_mlp.wr", k);
        ck_assert_int_eq(find_tensor(&c.r.g, nm) >= 0, k == 1);
        snprintf(nm, sizeof nm, "moe_block.%d.swiglu.w2", k);
        ck_assert_int_eq(find_tensor(&c.r.g, nm) >= 0, k != 1);
    }
    p = pieces_of(&c.r.g, "moe_block.3.swiglu.w3", &n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(p->hf_name, "model.layers.3.mlp.up_proj.weight");
    ck_assert(p->transpose);
    run_free(&c.r);
    /* every layer dense: refused */
    convert(&c, "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"vocab_size\": 50, \"hidden_size\": 32,"
                " \"intermediate_size\": 40, \"moe_intermediate_size\": 12, \"num_experts\": 4, \"num_experts_per_tok\": 2,"
                " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 64,"
                " \"mlp_only_layers\": [0, 1]}", 16);
    ck_assert(!c.r.ok);
    ck_assert_ptr_nonnull(strstr(c.r.text, "error: every layer has a dense MLP (mlp_only_layers, decoder_sparse_step = 1): "
                                           "a Qwen3MoeForCausalLM without a sparse layer is not supported"));
    run_free(&c.r);
}
END_TEST

START_TEST(config_errors) {
    Conv c;
    convert(&c, "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 10, \"hidden_size\": 8,\n"
                " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 3,\n"
                " \"max_position_embeddings\": 64, \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2},\n"
                " \"hidden_act\": \"gelu\", \"mlp_bias\": true, \"num_experts\": 4, \"resid_pdrop\": 0.1,\n"
                " \"vocab_size\": 11, \"rms_norm_eps\": -1, \"novel\": [1, 2]}\n",
            0);
    ck_assert_ptr_null(c.zl);
    expect_has(&c.r, "m/config.json:1:1: error: hidden_size = 8 is not a multiple of num_attention_heads = 3 and there is "
                     "no head_dim");
    expect_has(&c.r, "m/config.json:3:58: error: rope_scaling.rope_type = \"dynamic\" is not supported (zinf has default, "
                     "linear, llama3, yarn and longrope)");
    expect_has(&c.r, "m/config.json:4:16: error: hidden_act = \"gelu\" is not supported (the MLP is SwiGLU: silu)");
    expect_has(&c.r, "m/config.json:4:57: error: num_experts = 4 is not supported (mixture of experts)");
    expect_has(&c.r, "m/config.json:5:36: error: rms_norm_eps must be a positive number, got -1");
    expect_has(&c.r, "m/config.json:4:75: warning: resid_pdrop = 0.1: zinf trains without dropout");
    expect_has(&c.r, "m/config.json:5:49: warning: novel = [...] is a key zinf does not know");
    run_free(&c.r);
    /* biases an architecture does not have, refused by name */
    convert(&c, "{\"architectures\": [\"MistralForCausalLM\"], \"vocab_size\": 10, \"hidden_size\": 8,"
                " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
                " \"max_position_embeddings\": 64, \"attention_bias\": true, \"mlp_bias\": true}", 0);
    ck_assert_ptr_null(c.zl);
    expect_has(&c.r, "m/config.json:1:202: error: attention_bias = true is not supported: MistralForCausalLM has no biases on "
                     "q, k, v and o");
    expect_has(&c.r, "m/config.json:1:220: error: mlp_bias = true is not supported: MistralForCausalLM has no biases in the MLP");
    run_free(&c.r);
    convert(&c, "[1, 2]", 0);
    expect_has(&c.r, "error: m/config.json must hold a JSON object");
    run_free(&c.r);
    convert(&c, "{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_positions\": 8, \"n_embd\": 8, \"n_layer\": 1,"
                " \"n_head\": 2, \"architectures\": [\"GPT2LMHeadModel\", \"X\"]}", 0);
    expect_has(&c.r, "error: architectures must list one architecture, got [...]");
    run_free(&c.r);
    /* model_type alone names the architecture; one that does not go with it is an error */
    convert(&c, "{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_positions\": 8, \"n_embd\": 8, \"n_layer\": 1,"
                " \"n_head\": 2}", 0);
    ck_assert_msg(c.r.ok, "%s", c.r.text);
    ck_assert_ptr_nonnull(strstr(c.zl, "hf \"GPT2LMHeadModel\""));
    run_free(&c.r);
    convert(&c, "{\"model_type\": \"llama\", \"architectures\": [\"Qwen2ForCausalLM\"]}", 0);
    expect_has(&c.r, "error: model_type = \"llama\" does not go with architecture Qwen2ForCausalLM (\"qwen2\")");
    run_free(&c.r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("hf");
    TCase *t = tcase_create("hf");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, patterns_match_and_substitute);
    tcase_add_test(t, mapping_pieces);
    tcase_add_test(t, mapping_errors);
    tcase_add_test(t, mapping_expert_layout_errors);
    tcase_add_test(t, mapping_stack);
    tcase_add_test(t, mapping_from_several_files);
    tcase_add_test(t, if_statement);
    tcase_add_test(t, config_to_zl_windows);
    tcase_add_test(t, ast_of_if_and_hf);
    tcase_add_test(t, rope_scaling_and_rmsnorm_heads_from_zl);
    tcase_add_test(t, stdlib_llama_options);
    tcase_add_test(t, stdlib_bias_and_olmo2_options);
    tcase_add_test(t, config_to_zl);
    tcase_add_test(t, config_to_zl_families);
    tcase_add_test(t, config_to_zl_moe);
    tcase_add_test(t, config_errors);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
