/* test_parser: every declaration, statement and expression form (through
 * ast_dump and direct AST checks), precedence, syntax errors to the letter
 * (rendered), recovery, robustness on hostile input, and the import loader. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "loader.h"
#include "parse.h"

static Arena A;
static DiagSink D;
static SourceSet S;

static void setup(void) {
    arena_init(&A);
    diag_init(&D);
    source_set_init(&S);
}
static void teardown(void) {
    source_set_free(&S);
    diag_free(&D);
    arena_free(&A);
}

static AstFile *parse_n(const char *src, size_t n) {
    int id = source_add(&S, "t.zl", src, n);
    ck_assert_int_ge(id, 0);
    AstFile *f = parse_source(&A, &S, id, &D);
    ck_assert_ptr_nonnull(f);
    return f;
}
static AstFile *parse(const char *src) { return parse_n(src, strlen(src)); }

static char *dump(const AstFile *f) {
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    ast_dump(f, m);
    fclose(m);
    char *r = arena_strdup(&A, buf);
    free(buf);
    return r;
}
static char *rendered(void) {
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    diag_render(&D, &S, m, false);
    fclose(m);
    char *r = arena_strdup(&A, buf);
    free(buf);
    return r;
}
/* Parses src, asserting no diagnostics, and compares the dump. */
static void roundtrip(const char *src, const char *want) {
    AstFile *f = parse(src);
    ck_assert_msg(D.len == 0, "%s: unexpected diagnostics:\n%s", src, rendered());
    ck_assert_str_eq(dump(f), want);
}

static const char *design_example =
    "import \"nn\"                                   # stdlib/nn.zl\n"
    "\n"
    "const V = 50304, T = 1024, D = 768, H = 12, L = 12\n"
    "\n"
    "model gpt2(tokens: i32[B, T], targets: i32[B, T]) {\n"
    "  wte = param [V, D] init normal(0.02)\n"
    "  wpe = param [T, D] init normal(0.02)\n"
    "  x = embedding(wte, tokens) + embedding(wpe, arange(T))\n"
    "  repeat L { x = block(x, H) }                # params instantiated per repeat\n"
    "  loss cross_entropy(matmul(layernorm(x), wte, transpose_b), targets)\n"
    "}\n"
    "\n"
    "train { micro_batch = 8; steps = 1000; dtype = bf16\n"
    "        optimizer = adam(lr = 6e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1) }\n"
    "\n"
    "layer mlp(x: [B, T, D], hidden) {\n"
    "  w1 = param [D, hidden] init normal(0.02);  b1 = param [hidden] init zeros\n"
    "  w2 = param [hidden, D] init normal(0.02);  b2 = param [D] init zeros\n"
    "  return linear(gelu(linear(x, w1, b1)), w2, b2)\n"
    "}\n"
    "\n"
    "target dgx2 {\n"
    "  nodes = 1; gpus_per_node = 16\n"
    "  gpu  { memory = 32 GiB; flops = 125 T; hbm = 900 GB/s; pcie = 12 GB/s }\n"
    "  cpu  { memory = 1.5 TiB; bandwidth = 100 GB/s }\n"
    "  nvme { paths = [\"/local_nvme\"]; read = 25 GB/s; write = 12 GB/s; capacity = 28 TB }\n"
    "  net  { bandwidth = 100 GB/s }\n"
    "}\n"
    "plan { offload \"params\" = \"nvme\"; tiles \"block.*.mlp.w1\" = 4 }\n";

START_TEST(design_example_parses) {
    roundtrip(design_example,
              "import \"nn\"\n"
              "const V = 50304\nconst T = 1024\nconst D = 768\nconst H = 12\nconst L = 12\n"
              "model gpt2(tokens: i32[B, T], targets: i32[B, T]) {\n"
              "  wte = param [V, D] init normal(0.02)\n"
              "  wpe = param [T, D] init normal(0.02)\n"
              "  x = (embedding(wte, tokens) + embedding(wpe, arange(T)))\n"
              "  repeat L {\n"
              "    x = block(x, H)\n"
              "  }\n"
              "  loss cross_entropy(matmul(layernorm(x), wte, transpose_b), targets)\n"
              "}\n"
              "train {\n"
              "  micro_batch = 8\n  steps = 1000\n  dtype = bf16\n"
              "  optimizer = adam(lr=0.0006, beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0.1)\n"
              "}\n"
              "layer mlp(x: [B, T, D], hidden) {\n"
              "  w1 = param [D, hidden] init normal(0.02)\n"
              "  b1 = param [hidden] init zeros\n"
              "  w2 = param [hidden, D] init normal(0.02)\n"
              "  b2 = param [D] init zeros\n"
              "  return linear(gelu(linear(x, w1, b1)), w2, b2)\n"
              "}\n"
              "target dgx2 {\n"
              "  nodes = 1\n  gpus_per_node = 16\n"
              "  gpu {\n    memory = 32 GiB\n    flops = 125 T\n    hbm = 900 GB/s\n    pcie = 12 GB/s\n  }\n"
              "  cpu {\n    memory = 1.5 TiB\n    bandwidth = 100 GB/s\n  }\n"
              "  nvme {\n    paths = [\"/local_nvme\"]\n    read = 25 GB/s\n    write = 12 GB/s\n    capacity = 28 TB\n  }\n"
              "  net {\n    bandwidth = 100 GB/s\n  }\n"
              "}\n"
              "plan {\n  offload \"params\" = \"nvme\"\n  tiles \"block.*.mlp.w1\" = 4\n}\n");
}
END_TEST

START_TEST(decl_fields) {
    AstFile *f = parse(design_example);
    ck_assert_int_eq(f->decls.len, 11);
    const Decl *imp = f->decls.items[0];
    ck_assert_int_eq(imp->kind, DL_IMPORT);
    ck_assert_str_eq(imp->name, "nn");
    ck_assert_uint_eq(imp->name_span.off, 7);
    ck_assert_uint_eq(imp->name_span.len, 4);
    const Decl *c = f->decls.items[2];
    ck_assert_int_eq(c->kind, DL_CONST);
    ck_assert_str_eq(c->name, "T");
    ck_assert_int_eq(c->value->kind, EX_INT);
    ck_assert_int_eq(c->value->ival, 1024);
    const Decl *m = f->decls.items[6];
    ck_assert_int_eq(m->kind, DL_MODEL);
    ck_assert_str_eq(m->name, "gpt2");
    ck_assert_int_eq(m->file, f->file);
    ck_assert_int_eq(m->params.len, 2);
    ck_assert(m->params.items[0].type.present);
    ck_assert_int_eq(m->params.items[0].type.dtype, DT_I32);
    ck_assert_int_eq(m->params.items[0].type.dims.len, 2);
    ck_assert_int_eq(m->body.len, 5);
    const Stmt *rep = m->body.items[3];
    ck_assert_int_eq(rep->kind, ST_REPEAT);
    ck_assert_int_eq(rep->count->kind, EX_NAME);
    ck_assert_ptr_null(rep->index);
    ck_assert_int_eq(rep->body.len, 1);
    ck_assert_int_eq(S.files[0].text[rep->open_brace.off], '{');
    ck_assert_uint_eq(rep->open_brace.len, 1);
    const Expr *p = m->body.items[0]->value;
    ck_assert_int_eq(p->kind, EX_PARAM);
    ck_assert_int_eq(p->init, INIT_NORMAL);
    ck_assert_int_eq(p->dtype, DT_NONE);
    ck_assert_int_eq(p->dims.len, 2);
    ck_assert_int_eq(p->args.len, 1);
    ck_assert_double_eq(p->args.items[0].value->fval, 0.02);
    const Decl *l = f->decls.items[8];
    ck_assert_int_eq(l->kind, DL_LAYER);
    ck_assert(!l->params.items[1].type.present);
    const Decl *t = f->decls.items[8 + 1];
    ck_assert_int_eq(t->kind, DL_TARGET);
    const Setting *gpu = t->settings.items[2];
    ck_assert(gpu->is_block);
    ck_assert_str_eq(gpu->key, "gpu");
    ck_assert_int_eq(gpu->block.len, 4);
    const Expr *mem = gpu->block.items[0]->value;
    ck_assert_int_eq(mem->unit.kind, UNIT_BYTES);
    ck_assert_uint_eq(mem->unit.scale, 1ull << 30);
    ck_assert_int_eq(mem->ival, 32);
}
END_TEST

START_TEST(precedence) {
    roundtrip("const a = 1 + 2 * -3 - 4 % 5 / x\n", "const a = ((1 + (2 * (-3))) - ((4 % 5) / x))\n");
    roundtrip("const a = -(1 + 2) * 3\n", "const a = ((-(1 + 2)) * 3)\n");
    roundtrip("const a = 1 - 2 - 3\n", "const a = ((1 - 2) - 3)\n");
    roundtrip("const a = - - f(x) * 2\n", "const a = ((-(-f(x))) * 2)\n");
}
END_TEST

START_TEST(statements) {
    roundtrip("layer attn(x: [B, T, D], heads, kv_heads = heads) {\n"
              "  q, k, v = split(qkv(x), 3)\n"
              "  repeat heads as i { y = f(i) }\n"
              "  repeat 2 {\n  }\n"
              "  ;;\n"
              "  return q, k\n"
              "}\n",
              "layer attn(x: [B, T, D], heads, kv_heads = heads) {\n"
              "  q, k, v = split(qkv(x), 3)\n"
              "  repeat heads as i {\n    y = f(i)\n  }\n"
              "  repeat 2 {\n  }\n"
              "  return q, k\n"
              "}\n");
    AstFile *f = parse("layer l(x) { a, b = s(x); repeat n as j { } ; return a }");
    const Decl *d = f->decls.items[0];
    ck_assert_int_eq(D.errors, 0);
    ck_assert_int_eq(d->body.items[0]->targets.len, 2);
    ck_assert_str_eq(d->body.items[0]->targets.items[1], "b");
    ck_assert_str_eq(d->body.items[1]->index, "j");
    ck_assert_int_eq(d->body.items[2]->kind, ST_RETURN);
    ck_assert_int_eq(d->body.items[2]->values.len, 1);
}
END_TEST

START_TEST(newlines_in_brackets) {
    roundtrip("const a = f(x\n  , y)\nconst b = [\n  1\n  ,2\n]\n", "const a = f(x, y)\nconst b = [1, 2]\n");
    roundtrip("const a = 1 +\n  2 *\n  3\n", "const a = (1 + (2 * 3))\n");
    roundtrip("\n\n;;const a = 1;;\n;\n", "const a = 1\n");
}
END_TEST

START_TEST(expressions) {
    roundtrip("const a = [1, \"s\", x, f(y = 2, z), []]\n", "const a = [1, \"s\", x, f(y=2, z), []]\n");
    roundtrip("const a = f(\n  1,\n  2,\n)\n", "const a = f(1, 2)\n");
    roundtrip("model m(t: bf16[D], u: f32) { w = param f32[D] init ones\n  v = param [D, 2] init uniform(0.1)\n  loss w }\n",
              "model m(t: bf16[D], u: f32[]) {\n  w = param f32[D] init ones\n  v = param [D, 2] init uniform(0.1)\n"
              "  loss w\n}\n");
    roundtrip("const s = \"a\\tb\\x41\"\n", "const s = \"a\\x09bA\"\n");
    roundtrip("train { dtype = f16 }\n", "train {\n  dtype = f16\n}\n");
    AstFile *f = parse("const big = 99999999999999999999\nconst h = 0xff\n");
    ck_assert(f->decls.items[0]->value->overflow);
    ck_assert_int_eq(f->decls.items[1]->value->ival, 255);
    ck_assert_int_eq(D.errors, 0);
}
END_TEST

START_TEST(spans) {
    AstFile *f = parse("const x = a + f(b, 2)\n");
    const Expr *e = f->decls.items[0]->value;
    ck_assert_int_eq(e->kind, EX_BINARY);
    ck_assert_uint_eq(e->span.off, 10);
    ck_assert_uint_eq(e->span.len, 11);
    ck_assert_uint_eq(e->rhs->span.off, 14);
    ck_assert_uint_eq(e->rhs->name_span.len, 1);
    ck_assert_str_eq(e->rhs->str, "f");
}
END_TEST

/* ---- errors, to the letter ---- */

static void expect_errors(const char *src, const char *want) {
    parse(src);
    ck_assert_str_eq(rendered(), want);
}

START_TEST(error_missing_paren) {
    expect_errors("layer f(x) {\n  y = g(x, 2\n  return y\n}\n",
                  "t.zl:2:13: error: expected ')' to close the call to 'g', found newline\n"
                  " 2 |   y = g(x, 2\n"
                  "   |             ^\n"
                  "t.zl:2:8: note: the '(' opened here\n"
                  " 2 |   y = g(x, 2\n"
                  "   |        ^\n");
}
END_TEST

START_TEST(error_crlf) {
    expect_errors("const a = 1\r\nconst b = 1 2\r\n",
                  "t.zl:2:13: error: expected an operator or the end of the statement, found number '2'\n"
                  " 2 | const b = 1 2\n"
                  "   |             ^\n");
}
END_TEST

START_TEST(error_hints_common_slips) {
    parse("const a = 1,\nconst b = 2\n");
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "expected a name, found keyword 'const'");
    ck_assert_str_eq(D.items[1].msg, "a ',' at the end of a line continues the list on the next line: remove it");
    diag_free(&D);
    diag_init(&D);
    parse("layer g(x) { y := x }\n");
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "expected ',' or '=', found ':'");
    ck_assert_str_eq(D.items[1].msg, "assignment is NAME = EXPR, without ':'");
    diag_free(&D);
    diag_init(&D);
    parse("layer g(x: i32) { y = x }\n"); /* a ':' in its place: no hint */
    ck_assert_int_eq(D.len, 0);
}
END_TEST

START_TEST(error_brace_on_next_line) {
    /* one error, and the block still parses (its statements are in the tree) */
    AstFile *f = parse("layer f(x)\n{\n  return x\n}\nconst c = 1\n");
    ck_assert_str_eq(rendered(), "t.zl:1:11: error: expected '{' on this line, found newline\n"
                                 " 1 | layer f(x)\n"
                                 "   |           ^\n"
                                 "hint: a '{' goes on the line of what it opens, as in Go: layer f(x) {\n");
    ck_assert_int_eq(f->decls.len, 2);
    ck_assert_int_eq(f->decls.items[0]->kind, DL_LAYER);
    ck_assert_int_eq(f->decls.items[0]->body.len, 1);
    diag_free(&D);
    diag_init(&D);
    /* a newline where '{' would do, then no '{': the usual message */
    expect_errors("model m(x) {\n  repeat 3\n  x = x\n  loss x\n}\n",
                  "t.zl:2:11: error: expected '{' to start the repeat body, found newline\n"
                  " 2 |   repeat 3\n"
                  "   |           ^\n"
                  "hint: repeat N { ... } or repeat N as i { ... }, the '{' on the line of the repeat\n");
    diag_free(&D);
    diag_init(&D);
    parse("layer f(x)");
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "expected '{', found end of file");
}
END_TEST

START_TEST(error_unclosed_brace) {
    expect_errors("model m(x) {\n  loss x\n",
                  "t.zl:3:1: error: expected '}' to close the model body, found end of file\n"
                  " 3 | \n"
                  "   | ^\n"
                  "t.zl:1:12: note: the '{' opened here\n"
                  " 1 | model m(x) {\n"
                  "   |            ^\n");
    /* the model is kept */
    ck_assert_int_eq(D.errors, 1);
}
END_TEST

START_TEST(error_unclosed_before_decl) {
    AstFile *f = parse("layer a(x) {\n  return x\n\nmodel m(t) {\n  loss a(t)\n}\n");
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "expected '}' to close the layer body, found keyword 'model'");
    ck_assert_int_eq(D.items[1].level, DIAG_NOTE);
    ck_assert_int_eq(f->decls.len, 2); /* both declarations survive */
    ck_assert_int_eq(f->decls.items[0]->body.len, 1);
    ck_assert_str_eq(f->decls.items[1]->name, "m");
}
END_TEST

START_TEST(error_messages) {
    static const struct { const char *src, *msg; } cases[] = {
        {"const V 50304\n", "expected '=', found number '50304'"},
        {"x = 1\n", "expected a declaration, found name 'x'"},
        {"}\n", "unmatched '}'"},
        {"const a = \n", "expected an expression, found end of file"},
        {"const a = 1 2\n", "expected an operator or the end of the statement, found number '2'"},
        {"layer f x\n", "expected '(', found name 'x'"},
        {"layer f(x) { = 2 }\n", "expected a statement or '}', found '='"},
        {"train { 3 }\n", "expected a setting or '}', found number '3'"},
        {"const a = f(1 2)\n", "expected ')' to close the call to 'f', found number '2'"},
        {"const a = [1 2]\n", "expected ']' to close the list, found number '2'"},
        {"const a = (1\n", "expected ')' to close the parenthesis, found end of file"},
        {"const a = f(=)\n", "expected an argument or ')', found '='"},
        {"model m(x) { w = param [4] init gauss(1) }\n", "unknown initialiser 'gauss'"},
        {"model m(x) { w = param [4] init zero }\n", "unknown initialiser 'zero'"},
        {"model m(x) { return\n }\n", "expected an expression, found newline"},
        {"import nn\n", "expected a string, found name 'nn'"},
        {"model m(x) { w = param [4]\n }\n", "expected 'init', found newline"},
        {"model m(x) { w = param [4] init\n }\n", "expected a name, found '}'"},
        {"model m(x) { repeat { } }\n", "expected an expression, found '{'"},
        {"model m(x) { repeat 2 as { } }\n", "expected a name, found '{'"},
        {"model m(x) { a, = 1 }\n", "expected a name, found '='"},
        {"layer f(x: ) { }\n", "expected '[' or a type, found ')'"},
        {"train { k \"s\" 3 }\n", "expected '=', found number '3'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        diag_free(&D);
        diag_init(&D);
        parse(cases[i].src);
        ck_assert_msg(D.errors >= 1, "%s: no error", cases[i].src);
        ck_assert_msg(!strcmp(D.items[0].msg, cases[i].msg), "%s: got \"%s\", want \"%s\"", cases[i].src, D.items[0].msg,
                      cases[i].msg);
    }
}
END_TEST

START_TEST(error_hints) {
    parse("target t { gpu { memory = 32 Gib } }\n");
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[1].msg, "did you mean the unit 'GiB'? (units are case-sensitive)");
    diag_free(&D);
    diag_init(&D);
    parse("model m(x) { w = param [4] init zero }\n");
    ck_assert_str_eq(D.items[1].msg, "did you mean 'zeros'?");
    static const struct { const char *src, *hint; } units[] = {
        {"const a = 32 mb\n", "did you mean the unit 'MB'? (units are case-sensitive)"},
        {"const a = 32 GiBs\n", "did you mean the unit 'GiB' or the rate 'GiB/s'?"},
        {"const a = 32 GiBB\n", "did you mean the unit 'GiB'?"},
        {"const a = 2 b\n", NULL},
    };
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        diag_free(&D);
        diag_init(&D);
        parse(units[i].src);
        ck_assert_int_eq(D.errors, 1);
        if (units[i].hint) ck_assert_str_eq(D.items[1].msg, units[i].hint);
        else ck_assert_int_eq(D.len, 1);
    }
    diag_free(&D);
    diag_init(&D);
    parse("model m(x) { f(x) }\n");
    ck_assert_str_eq(D.items[0].msg, "expected ',' or '=', found '('");
    ck_assert_str_eq(D.items[1].msg, "a call is not a statement: assign its result (y = f(x))");
    diag_free(&D);
    diag_init(&D);
    parse("model m(x) { loss = 3 }\n");
    ck_assert_str_eq(D.items[0].msg, "expected an expression, found '='");
    ck_assert_str_eq(D.items[1].msg, "'loss' is a keyword; it cannot be used as a name");
}
END_TEST

START_TEST(recovery_reports_each_error_once) {
    /* one error per broken statement; good statements between them still parse */
    AstFile *f = parse("const a = 1 +\n"
                       "const b = 2\n"
                       "layer l(x) {\n"
                       "  y = f(x,, 1)\n"
                       "  z = x\n"
                       "  w = (x\n"
                       "  v = x )\n"
                       "  u = x\n"
                       "}\n"
                       "train { steps = ; lr = 1 }\n"
                       "model m(t) { loss t }\n");
    char *r = rendered();
    ck_assert_msg(D.errors == 4, "%d errors:\n%s", D.errors, r);
    ck_assert_str_eq(D.items[0].msg, "expected an expression, found keyword 'const'");
    ck_assert_str_eq(D.items[1].msg, "expected an argument or ')', found ','");
    ck_assert_str_eq(D.items[2].msg, "expected ')' to close the parenthesis, found newline");
    int last = D.len - 1;
    ck_assert_str_eq(D.items[last].msg, "expected an expression, found ';'");
    /* declarations kept: const b, layer l, train, model m */
    ck_assert_int_eq(f->decls.len, 4);
    ck_assert_str_eq(f->decls.items[0]->name, "b");
    const Decl *l = f->decls.items[1];
    ck_assert_int_eq(l->body.len, 2); /* z = x and u = x */
    ck_assert_str_eq(l->body.items[0]->targets.items[0], "z");
    ck_assert_str_eq(l->body.items[1]->targets.items[0], "u");
    ck_assert_int_eq(f->decls.items[2]->settings.len, 1);
    ck_assert_str_eq(f->decls.items[3]->name, "m");
}
END_TEST

START_TEST(recovery_nested_junk_braces) {
    /* the '{' of a broken statement is matched inside the skipped text */
    AstFile *f = parse("layer l(x) {\n  y = f { a = 1 }\n  z = x\n}\nmodel m(t) { loss t }\n");
    ck_assert_int_eq(D.errors, 1);
    ck_assert_int_eq(f->decls.len, 2);
    ck_assert_int_eq(f->decls.items[0]->body.len, 1);
}
END_TEST

START_TEST(bad_character_costs_one_error) {
    AstFile *f = parse("model m(t) {\n  x = 1 @ 2\n  y = $\n  loss t\n}\n");
    ck_assert_int_eq(D.errors, 2);
    ck_assert_str_eq(D.items[0].msg, "unexpected character '@'");
    ck_assert_str_eq(D.items[1].msg, "unexpected character '$'");
    ck_assert_int_eq(f->decls.items[0]->body.len, 1);
}
END_TEST

/* ---- robustness ---- */

static char *repeat_str(const char *a, int n, const char *mid, const char *b, int m) {
    size_t la = strlen(a), lb = strlen(b), lm = strlen(mid);
    char *s = malloc(la * (size_t)n + lm + lb * (size_t)m + 1);
    char *p = s;
    for (int i = 0; i < n; i++, p += la) memcpy(p, a, la);
    memcpy(p, mid, lm);
    p += lm;
    for (int i = 0; i < m; i++, p += lb) memcpy(p, b, lb);
    *p = 0;
    return s;
}

START_TEST(deep_parentheses) {
    char *s = repeat_str("(", 100000, "const a = 1", ")", 100000);
    char *t = repeat_str("", 0, "const a = ", "(", 100000);
    parse(s);
    ck_assert_int_ge(D.errors, 1);
    diag_free(&D);
    diag_init(&D);
    parse(t);
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "brackets nested too deeply (more than 100)");
    free(s);
    free(t);
}
END_TEST

START_TEST(deep_nesting_allowed_up_to_limit) {
    char *s = repeat_str("", 0, "const a = ", "(", 99);
    char *all = malloc(strlen(s) + 200);
    sprintf(all, "%s1", s);
    for (int i = 0; i < 99; i++) strcat(all, ")");
    strcat(all, "\n");
    AstFile *f = parse(all);
    ck_assert_int_eq(D.errors, 0);
    ck_assert_int_eq(f->decls.len, 1);
    free(s);
    free(all);
}
END_TEST

START_TEST(long_expressions) {
    char *minus = repeat_str("", 0, "const a = ", "-", 200000);
    parse(minus);
    ck_assert_int_ge(D.errors, 1);
    char *sum = repeat_str("", 0, "const a = 1", " + 1", 200000);
    parse(sum);
    ck_assert_int_ge(D.errors, 2);
    ck_assert_str_eq(D.items[D.len - 2].msg, "statement too long: more than 500 operators");
    char *ok = repeat_str("", 0, "const a = 1", " + 1", 400);
    AstFile *f = parse(ok);
    ck_assert_int_eq(f->decls.len, 1);
    free(minus);
    free(sum);
    free(ok);
}
END_TEST

START_TEST(hostile_bytes) {
    static const char nul[] = "const a = 1\0const b = 2\n";
    AstFile *f = parse_n(nul, sizeof nul - 1);
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "unexpected NUL byte in the source");
    ck_assert_int_ge(f->decls.len, 1);
    parse("const s = \"\xff\xfe\"\nconst \xc3\xa9 = 1\n\x80\x81\n");
    ck_assert_int_ge(D.errors, 2);
    f = parse("");
    ck_assert_int_eq(f->decls.len, 0);
    parse("\n\n# nothing\n");
    parse("const huge = 123456789012345678901234567890123456789012345678901234567890 GiB\n");
    /* every byte value on its own line */
    char all[512];
    for (int i = 0; i < 256; i++) {
        all[2 * i] = (char)(i ? i : ' ');
        all[2 * i + 1] = '\n';
    }
    parse_n(all, 512);
}
END_TEST

START_TEST(every_prefix) {
    /* a file cut off anywhere: no crash, no hang, and an error unless the cut is clean */
    size_t n = strlen(design_example);
    for (size_t k = 0; k <= n; k++) {
        diag_free(&D);
        diag_init(&D);
        parse_n(design_example, k);
    }
}
END_TEST

START_TEST(every_token_removed) {
    /* a stray or missing token anywhere: still no crash */
    size_t n = strlen(design_example);
    char *buf = malloc(n + 1);
    for (size_t k = 0; k < n; k += 3) {
        memcpy(buf, design_example, k);
        memcpy(buf + k, design_example + k + 1, n - k - 1);
        diag_free(&D);
        diag_init(&D);
        parse_n(buf, n - 1);
    }
    free(buf);
}
END_TEST

START_TEST(random_mutations) {
    /* 3000 copies of the example, each with a few bytes replaced by bytes
     * that matter to the lexer (a fixed LCG, so failures reproduce) */
    static const char pool[] = "(){}[],;:=+-*/%\"\\#\n\t 0x9e_.aZ\xff\x00";
    size_t n = strlen(design_example);
    char *buf = malloc(n);
    uint64_t x = 12345;
    for (int k = 0; k < 3000; k++) {
        memcpy(buf, design_example, n);
        for (int m = 0; m < 1 + k % 5; m++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(x >> 33) % n;
            buf[at] = pool[(x >> 20) % (sizeof pool - 1)];
        }
        diag_free(&D);
        diag_init(&D);
        parse_n(buf, n);
        /* every error is located in this file */
        for (int i = 0; i < D.len; i++)
            if (D.items[i].level == DIAG_ERROR) ck_assert_int_eq(D.items[i].span.file, S.nfiles - 1);
    }
    free(buf);
}
END_TEST

START_TEST(random_megabytes) {
    /* 10 MB of random bytes (a fixed LCG): errors, capped, and a bounded
     * rendering (long lines are shown as a window around the span) */
    size_t n = 10u << 20;
    char *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    uint64_t x = 99;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (char)(x >> 56);
    }
    parse_n(buf, n);
    ck_assert_int_gt(D.errors, 0);
    ck_assert_int_le(D.len, 2 * D.max_errors + 2);
    char *r = rendered();
    ck_assert_uint_lt(strlen(r), 100000);
    ck_assert_ptr_nonnull(strstr(r, "too many errors"));
    free(buf);
}
END_TEST

START_TEST(long_line_window) {
    /* a 3200-byte line: the snippet is the 160 bytes from 80 before the
     * error, cut with "..." on both sides, the caret under the error */
    char src[3300];
    int n = snprintf(src, sizeof src, "const a = ");
    for (int i = 0; i < 400; i++) n += snprintf(src + n, sizeof src - (size_t)n, "1 + ");
    int at = n;
    n += snprintf(src + n, sizeof src - (size_t)n, "@");
    for (int i = 0; i < 400; i++) n += snprintf(src + n, sizeof src - (size_t)n, " + 2");
    snprintf(src + n, sizeof src - (size_t)n, "\n");
    parse(src);
    ck_assert_int_eq(D.errors, 1);
    char want[600];
    snprintf(want, sizeof want, "t.zl:1:%d: error: unexpected character '@'\n 1 | ...%.160s...\n   |    %80s^\n", at + 1,
             src + at - 80, "");
    ck_assert_str_eq(rendered(), want);
    ck_assert_ptr_nonnull(strstr(want, "1 + 1 + @ + 2 + 2"));
}
END_TEST

START_TEST(utf8_caret_columns) {
    /* multi-byte characters before the error take one column each under the caret */
    parse("const s = \"\xce\xbb\xce\xbb\" @\n");
    ck_assert_str_eq(rendered(), "t.zl:1:18: error: unexpected character '@'\n"
                                 " 1 | const s = \"\xce\xbb\xce\xbb\" @\n"
                                 "   |                ^\n");
}
END_TEST

START_TEST(dump_reparses_to_itself) {
    /* ast_dump prints .zl: parsing the dump gives the same dump, for the
     * design example and every example and stdlib file */
    const char *files[] = {"examples/gpt2-tiny.zl", "examples/llama-tiny.zl", "examples/gpt3-175b.zl",
                           "examples/targets/dgx2.zl", "stdlib/nn.zl", "stdlib/llama.zl", "stdlib/gpt.zl"};
    for (size_t i = 0; i <= sizeof files / sizeof *files; i++) {
        const char *text = design_example;
        char buf[1 << 16];
        if (i > 0) {
            FILE *fp = fopen(files[i - 1], "rb");
            ck_assert_msg(fp != NULL, "%s: run from the repository root", files[i - 1]);
            size_t n = fread(buf, 1, sizeof buf - 1, fp);
            fclose(fp);
            buf[n] = 0;
            text = buf;
        }
        char *d1 = dump(parse(text));
        ck_assert_msg(D.errors == 0, "%s", rendered());
        ck_assert_uint_gt(strlen(d1), 100);
        char *d2 = dump(parse(d1));
        ck_assert_msg(D.errors == 0, "dump of %s: %s", i ? files[i - 1] : "design example", rendered());
        ck_assert_str_eq(d2, d1);
    }
}
END_TEST

START_TEST(example_truncations) {
    /* examples/gpt2-tiny.zl cut at every 7th byte: an error or a clean
     * parse, never a crash (also run under ASan/UBSan) */
    FILE *fp = fopen("examples/gpt2-tiny.zl", "rb");
    ck_assert_msg(fp != NULL, "run from the repository root");
    char text[1 << 16];
    size_t n = fread(text, 1, sizeof text, fp);
    fclose(fp);
    ck_assert_uint_gt(n, 100);
    int with_errors = 0, cuts = 0;
    for (size_t k = 0; k <= n; k += 7) {
        diag_free(&D);
        diag_init(&D);
        parse_n(text, k);
        cuts++;
        with_errors += D.errors > 0;
        for (int i = 0; i < D.len; i++) ck_assert_ptr_nonnull(D.items[i].msg);
    }
    ck_assert_int_gt(with_errors, cuts / 2); /* most cuts leave a bracket or statement open */
    diag_free(&D);
    diag_init(&D);
    parse_n(text, n);
    ck_assert_msg(D.errors == 0, "%s", rendered());
}
END_TEST

/* ---- loader ---- */

static char tmpdir[64];
static void write_file(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}
static void mk_tmp(void) {
    strcpy(tmpdir, "/tmp/zinf-parser-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    char lib[128];
    snprintf(lib, sizeof lib, "%s/lib", tmpdir);
    mkdir(lib, 0700);
}
static void rm_tmp(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(loader_imports_once_in_order) {
    mk_tmp();
    write_file("main.zl", "import \"a\"\nimport \"b.zl\"\nimport \"a\"\nmodel m(t) { loss t }\n");
    write_file("lib/a.zl", "import \"b\"\nlayer la(x) { return x }\n");
    write_file("lib/b.zl", "import \"a\"\nimport \"b\"\nconst B1 = 1\n");
    char main[128], lib[128];
    snprintf(main, sizeof main, "%s/main.zl", tmpdir);
    snprintf(lib, sizeof lib, "%s/lib", tmpdir);
    const char *dirs[] = {lib};
    LoadOptions o = {dirs, 1, "/nonexistent"};
    Program p;
    ck_assert(program_load(&A, &S, &D, main, &o, &p));
    ck_assert_msg(D.len == 0, "%s", rendered());
    ck_assert_int_eq(p.nfiles, 3); /* main, a, b: each once, cycles harmless */
    ck_assert_str_eq(p.files[0]->decls.items[3]->name, "m");
    ck_assert_str_eq(p.files[1]->decls.items[1]->name, "la");
    ck_assert_str_eq(p.files[2]->decls.items[2]->name, "B1");
    ck_assert_int_eq(p.files[2]->decls.items[2]->file, p.files[2]->file);
    ck_assert_ptr_nonnull(strstr(S.files[p.files[1]->file].path, "lib/a.zl"));
    rm_tmp();
}
END_TEST

START_TEST(loader_missing_import) {
    mk_tmp();
    write_file("main.zl", "import \"nope\"\n");
    char main[128];
    snprintf(main, sizeof main, "%s/main.zl", tmpdir);
    const char *dirs[] = {"/inc1"};
    LoadOptions o = {dirs, 1, "/std"};
    Program p;
    ck_assert(program_load(&A, &S, &D, main, &o, &p));
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "cannot find import \"nope\"");
    ck_assert_uint_eq(D.items[0].span.off, 7);
    ck_assert_int_eq(D.items[1].level, DIAG_NOTE);
    char want[256];
    snprintf(want, sizeof want, "looked for nope.zl in %s, /inc1, /std", tmpdir);
    ck_assert_str_eq(D.items[1].msg, want);
    ck_assert_int_eq(D.items[1].span.file, -1); /* no second snippet of the same import */
    diag_free(&D);
    diag_init(&D);
    write_file("abs.zl", "import \"/nonexistent/x\"\nimport \"a\\tb\"\n");
    snprintf(main, sizeof main, "%s/abs.zl", tmpdir);
    ck_assert(program_load(&A, &S, &D, main, &o, &p));
    ck_assert_int_eq(D.errors, 2);
    ck_assert_str_eq(D.items[0].msg, "an import name cannot contain a control character (byte 0x09)");
    ck_assert_str_eq(D.items[1].msg, "cannot find import \"/nonexistent/x\"");
    ck_assert_str_eq(D.items[2].msg, "looked for /nonexistent/x.zl only (an absolute import is not searched for)");
    rm_tmp();
}
END_TEST

START_TEST(loader_bad_names) {
    mk_tmp();
    write_file("main.zl", "import \"\"\nimport \"a\\x00b\"\nimport \"d.zl\"\n");
    char main[128];
    snprintf(main, sizeof main, "%s/d.zl", tmpdir);
    mkdir(main, 0700);
    snprintf(main, sizeof main, "%s/main.zl", tmpdir);
    LoadOptions o = {NULL, 0, "/std"};
    Program p;
    ck_assert(program_load(&A, &S, &D, main, &o, &p));
    ck_assert_int_eq(D.errors, 3);
    ck_assert_str_eq(D.items[0].msg, "an import name cannot contain a NUL byte");
    ck_assert_str_eq(D.items[1].msg, "empty import name");
    ck_assert_str_eq(D.items[2].msg, "cannot find import \"d.zl\""); /* d.zl is a directory */
    ck_assert_int_eq(p.nfiles, 1);
    rm_tmp();
}
END_TEST

/* A model file named after a stdlib module (zinfc --from-hf --emit=zl >
 * llama.zl) imports the stdlib's module, not itself; a file beside it that
 * shadows a stdlib module is an error naming both, with the fix; ./ names
 * the local file and is not searched for. */
START_TEST(loader_stdlib_shadowing) {
    mk_tmp();
    char std[128], lib[128], path[256];
    snprintf(std, sizeof std, "%s/std", tmpdir);
    snprintf(lib, sizeof lib, "%s/lib", tmpdir);
    mkdir(std, 0700);
    write_file("std/llama.zl", "const FROM_STD = 1\n");
    write_file("std/nn.zl", "const NN_STD = 1\n");
    write_file("llama.zl", "import \"llama\"\nmodel m(t) { loss t }\n");
    LoadOptions o = {NULL, 0, std};
    Program p;
    snprintf(path, sizeof path, "%s/llama.zl", tmpdir);
    ck_assert(program_load(&A, &S, &D, path, &o, &p));
    ck_assert_msg(D.len == 0, "%s", rendered());
    ck_assert_int_eq(p.nfiles, 2);
    snprintf(path, sizeof path, "%s/std/llama.zl", tmpdir);
    ck_assert_str_eq(S.files[p.files[1]->file].path, path);
    ck_assert_int_eq(p.files[0]->decls.items[0]->import_file, p.files[1]->file); /* what the checker reads */

    /* main.zl imports "llama": the llama.zl beside it shadows the stdlib's */
    diag_free(&D);
    diag_init(&D);
    write_file("main.zl", "import \"llama\"\n");
    snprintf(path, sizeof path, "%s/main.zl", tmpdir);
    ck_assert(program_load(&A, &S, &D, path, &o, &p));
    ck_assert_int_eq(D.errors, 1);
    ck_assert_int_eq(D.len, 2);
    char want[512];
    snprintf(want, sizeof want, "import \"llama\" is ambiguous: %s/llama.zl shadows the standard library's %s/llama.zl",
             tmpdir, std);
    ck_assert_str_eq(D.items[0].msg, want);
    ck_assert_uint_eq(D.items[0].span.off, 7);
    ck_assert_int_eq(D.items[1].level, DIAG_HINT);
    snprintf(want, sizeof want,
             "rename %s/llama.zl to import the standard library's llama.zl, or write import \"./llama.zl\" to import "
             "the local file",
             tmpdir);
    ck_assert_str_eq(D.items[1].msg, want);
    ck_assert_int_eq(p.nfiles, 3); /* the local llama.zl (the search order's), and the stdlib's through it */

    /* "./llama.zl" is the local file, unambiguous */
    diag_free(&D);
    diag_init(&D);
    write_file("main.zl", "import \"./llama.zl\"\n");
    ck_assert(program_load(&A, &S, &D, path, &o, &p));
    ck_assert_msg(D.len == 0, "%s", rendered());
    ck_assert_int_eq(p.nfiles, 3);

    /* shadowing from an -I directory: the hint cannot offer ./ */
    diag_free(&D);
    diag_init(&D);
    write_file("lib/nn.zl", "const NN_LIB = 1\n");
    write_file("main.zl", "import \"nn\"\nimport \"./nope\"\n");
    const char *dirs[] = {lib};
    LoadOptions oi = {dirs, 1, std};
    ck_assert(program_load(&A, &S, &D, path, &oi, &p));
    ck_assert_int_eq(D.errors, 2);
    snprintf(want, sizeof want, "import \"nn\" is ambiguous: %s/nn.zl shadows the standard library's %s/nn.zl", lib,
             std);
    ck_assert_str_eq(D.items[0].msg, want);
    snprintf(want, sizeof want,
             "rename %s/nn.zl to import the standard library's nn.zl, or import the local file by its absolute path",
             lib);
    ck_assert_str_eq(D.items[1].msg, want);
    ck_assert_str_eq(D.items[2].msg, "cannot find import \"./nope\"");
    snprintf(want, sizeof want,
             "looked for %s/./nope.zl only (an import starting with ./ or ../ is relative to the importing file)", tmpdir);
    ck_assert_str_eq(D.items[3].msg, want);
    rm_tmp();
}
END_TEST

START_TEST(loader_stdlib_and_unreadable_main) {
    Program p;
    LoadOptions o = {NULL, 0, NULL};
    ck_assert(!program_load(&A, &S, &D, "/nonexistent/x.zl", &o, &p));
    ck_assert_str_eq(D.items[0].msg, "cannot read /nonexistent/x.zl: No such file or directory");
    ck_assert_int_eq(D.items[0].span.file, -1);
    diag_free(&D);
    diag_init(&D);
    mk_tmp();
    write_file("m.zl", "import \"nn\"\n");
    char main[128];
    snprintf(main, sizeof main, "%s/m.zl", tmpdir);
    ck_assert(program_load(&A, &S, &D, main, &o, &p)); /* the real stdlib */
    ck_assert_msg(D.errors == 0, "%s", rendered());
    ck_assert_int_ge(p.nfiles, 2);
    rm_tmp();
}
END_TEST

int main(void) {
    Suite *s = suite_create("parser");
    TCase *tc = tcase_create("parser");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, design_example_parses);
    tcase_add_test(tc, decl_fields);
    tcase_add_test(tc, precedence);
    tcase_add_test(tc, statements);
    tcase_add_test(tc, newlines_in_brackets);
    tcase_add_test(tc, expressions);
    tcase_add_test(tc, spans);
    tcase_add_test(tc, error_missing_paren);
    tcase_add_test(tc, error_crlf);
    tcase_add_test(tc, error_hints_common_slips);
    tcase_add_test(tc, error_brace_on_next_line);
    tcase_add_test(tc, error_unclosed_brace);
    tcase_add_test(tc, error_unclosed_before_decl);
    tcase_add_test(tc, error_messages);
    tcase_add_test(tc, error_hints);
    tcase_add_test(tc, recovery_reports_each_error_once);
    tcase_add_test(tc, recovery_nested_junk_braces);
    tcase_add_test(tc, bad_character_costs_one_error);
    tcase_add_test(tc, deep_parentheses);
    tcase_add_test(tc, deep_nesting_allowed_up_to_limit);
    tcase_add_test(tc, long_expressions);
    tcase_add_test(tc, hostile_bytes);
    tcase_add_test(tc, every_prefix);
    tcase_add_test(tc, every_token_removed);
    tcase_add_test(tc, random_mutations);
    tcase_add_test(tc, random_megabytes);
    tcase_add_test(tc, long_line_window);
    tcase_add_test(tc, utf8_caret_columns);
    tcase_add_test(tc, example_truncations);
    tcase_add_test(tc, dump_reparses_to_itself);
    tcase_add_test(tc, loader_imports_once_in_order);
    tcase_add_test(tc, loader_missing_import);
    tcase_add_test(tc, loader_bad_names);
    tcase_add_test(tc, loader_stdlib_shadowing);
    tcase_add_test(tc, loader_stdlib_and_unreadable_main);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
