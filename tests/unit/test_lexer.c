/* test_lexer: tokens, numbers and units, strings, newline insertion,
 * brackets, error tokens and spans of the .zl lexer (lang/lexer.re). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "grammar.h"
#include "lex.h"

static Arena A;
static DiagSink D;
static Lexer L;

static void setup(void) {
    arena_init(&A);
    diag_init(&D);
}
static void teardown(void) {
    diag_free(&D);
    arena_free(&A);
}

static void start_n(const char *s, size_t n) { lex_init(&L, s, (uint32_t)n, 0, &A, &D); }
static void start(const char *s) { start_n(s, strlen(s)); }
static Token next(void) {
    Token t;
    lex_next(&L, &t);
    return t;
}
/* Kinds of every token up to the end, 0-terminated. */
static void kinds(const char *s, int *out, int max) {
    start(s);
    int n = 0;
    Token t;
    do {
        t = next();
        ck_assert_int_lt(n, max);
        out[n++] = t.kind;
    } while (t.kind != 0);
}
#define ASSERT_KINDS(src, ...)                                                      \
    do {                                                                            \
        int want_[] = {__VA_ARGS__, 0};                                             \
        int got_[64];                                                               \
        kinds(src, got_, 64);                                                       \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_ && (i_ == 0 || want_[i_ - 1]); i_++) \
            ck_assert_msg(got_[i_] == want_[i_], "%s: token %zu is %d, want %d", src, i_, got_[i_], want_[i_]); \
    } while (0)

START_TEST(punctuation_and_keywords) {
    ASSERT_KINDS("( ) [ ] { } , : = + - * / % ;", TK_LPAREN, TK_RPAREN, TK_LBRACK, TK_RBRACK, TK_LBRACE, TK_RBRACE,
                 TK_COMMA, TK_COLON, TK_ASSIGN, TK_PLUS, TK_MINUS, TK_STAR, TK_SLASH, TK_PERCENT, TK_SEMI);
    ASSERT_KINDS("import const layer model train target plan repeat as return loss param init", TK_IMPORT, TK_CONST,
                 TK_LAYER, TK_MODEL, TK_TRAIN, TK_TARGET, TK_PLAN, TK_REPEAT, TK_AS, TK_RETURN, TK_LOSS, TK_PARAM,
                 TK_INIT);
    ASSERT_KINDS("true false layers _x9 Layer", TK_IDENT, TK_IDENT, TK_IDENT, TK_IDENT, TK_IDENT, TK_NL);
    ck_assert_int_eq(D.errors, 0);
}
END_TEST

START_TEST(dtypes) {
    const char *names[] = {"i32", "f32", "f16", "bf16"};
    DType want[] = {DT_I32, DT_F32, DT_F16, DT_BF16};
    for (int i = 0; i < 4; i++) {
        start(names[i]);
        Token t = next();
        ck_assert_int_eq(t.kind, TK_DTYPE);
        ck_assert_int_eq(t.dtype, want[i]);
        ck_assert_str_eq(t.str, names[i]);
    }
    start("bf16x");
    ck_assert_int_eq(next().kind, TK_IDENT);
}
END_TEST

START_TEST(integers) {
    start("42 1_000_000 0x1F 0XfF 9223372036854775807 9223372036854775808 0x8000000000000000 99999999999999999999999");
    Token t = next();
    ck_assert_int_eq(t.kind, TK_INT);
    ck_assert_int_eq(t.ival, 42);
    ck_assert(!t.overflow);
    ck_assert_int_eq(t.unit.kind, UNIT_NONE);
    ck_assert_int_eq(next().ival, 1000000);
    ck_assert_int_eq(next().ival, 31);
    ck_assert_int_eq(next().ival, 255);
    t = next();
    ck_assert(!t.overflow);
    ck_assert_int_eq(t.ival, INT64_MAX);
    ck_assert(next().overflow);
    ck_assert(next().overflow);
    t = next();
    ck_assert_int_eq(t.kind, TK_INT);
    ck_assert(t.overflow);
    ck_assert_int_eq(D.errors, 0); /* overflow is the checker's to report */
}
END_TEST

START_TEST(floats) {
    const char *src[] = {"0.02", "6e-4", "1.5", "1e-5", "2E+3", "1_000.5"};
    double want[] = {0.02, 6e-4, 1.5, 1e-5, 2e3, 1000.5};
    for (int i = 0; i < 6; i++) {
        start(src[i]);
        Token t = next();
        ck_assert_msg(t.kind == TK_FLOAT, "%s", src[i]);
        ck_assert_double_eq_tol(t.fval, want[i], want[i] * 1e-15);
        ck_assert_uint_eq(t.span.len, strlen(src[i]));
    }
    start("1e999");
    ck_assert_int_eq(next().kind, TK_FLOAT);
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "number '1e999' is too large");
}
END_TEST

START_TEST(units) {
    static const struct { const char *src; UnitKind k; uint64_t scale; double v; uint32_t len; } cases[] = {
        {"32 GiB", UNIT_BYTES, 1ull << 30, 32, 6},   {"125 T", UNIT_COUNT, 1000000000000ull, 125, 5},
        {"900 GB/s", UNIT_RATE, 1000000000ull, 900, 8}, {"1.5 TiB", UNIT_BYTES, 1ull << 40, 1.5, 7},
        {"32GiB", UNIT_BYTES, 1ull << 30, 32, 5},    {"4\tKiB/s", UNIT_RATE, 1024, 4, 7},
        {"7 K", UNIT_COUNT, 1000, 7, 3},             {"7 M", UNIT_COUNT, 1000000, 7, 3},
        {"7 G", UNIT_COUNT, 1000000000ull, 7, 3},    {"3 KB", UNIT_BYTES, 1000, 3, 4},
        {"3 MB", UNIT_BYTES, 1000000, 3, 4},         {"3 GB", UNIT_BYTES, 1000000000ull, 3, 4},
        {"3 TB", UNIT_BYTES, 1000000000000ull, 3, 4}, {"3 MiB", UNIT_BYTES, 1ull << 20, 3, 5},
        {"3 KiB", UNIT_BYTES, 1024, 3, 5},           {"2 KB/s", UNIT_RATE, 1000, 2, 6},
        {"2 MB/s", UNIT_RATE, 1000000, 2, 6},        {"2 TB/s", UNIT_RATE, 1000000000000ull, 2, 6},
        {"2 MiB/s", UNIT_RATE, 1ull << 20, 2, 7},    {"2 GiB/s", UNIT_RATE, 1ull << 30, 2, 7},
        {"2 TiB/s", UNIT_RATE, 1ull << 40, 2, 7},    {"0x10 MiB", UNIT_BYTES, 1ull << 20, 16, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        start(cases[i].src);
        Token t = next();
        ck_assert_msg(t.unit.kind == cases[i].k && t.unit.scale == cases[i].scale, "%s: unit %d x %llu", cases[i].src,
                      t.unit.kind, (unsigned long long)t.unit.scale);
        if (t.kind == TK_INT) ck_assert_int_eq(t.ival, (int64_t)cases[i].v);
        else ck_assert_double_eq(t.fval, cases[i].v);
        ck_assert_uint_eq(t.span.off, 0);
        ck_assert_uint_eq(t.span.len, cases[i].len);
        ck_assert_int_eq(next().kind, TK_NL);
    }
    ck_assert_int_eq(D.errors, 0);
    /* a unit word only when no name goes on */
    ASSERT_KINDS("8 Marks", TK_INT, TK_IDENT, TK_NL);
    ASSERT_KINDS("8 GiBs", TK_INT, TK_IDENT, TK_NL);
    ASSERT_KINDS("2 T)", TK_INT, TK_RPAREN, TK_NL);
    start("5 K/s");
    Token t = next();
    ck_assert_int_eq(t.unit.kind, UNIT_COUNT);
    ck_assert_int_eq(next().kind, TK_SLASH);
    ck_assert_int_eq(next().kind, TK_IDENT);
    /* no unit across a newline */
    start("5\nGB");
    t = next();
    ck_assert_int_eq(t.unit.kind, UNIT_NONE);
    ck_assert_int_eq(next().kind, TK_NL);
    ck_assert_int_eq(next().kind, TK_IDENT);
}
END_TEST

START_TEST(bad_numbers) {
    static const struct { const char *src, *msg; } cases[] = {
        {"12abc", "invalid number '12abc'"},   {"1.5.3", "invalid number '1.5.3'"},
        {"0x", "invalid number '0x'"},         {"1e", "invalid number '1e'"},
        {"1__0", "misplaced '_' in number '1__0'"}, {"10_", "misplaced '_' in number '10_'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        diag_free(&D);
        diag_init(&D);
        start(cases[i].src);
        Token t = next();
        ck_assert_int_eq(t.kind, TK_INT == t.kind ? TK_INT : TK_FLOAT);
        ck_assert_uint_eq(t.span.len, strlen(cases[i].src)); /* one token for the whole run */
        ck_assert_int_eq(next().kind, TK_NL);
        ck_assert_int_eq(D.errors, 1);
        ck_assert_str_eq(D.items[0].msg, cases[i].msg);
    }
}
END_TEST

START_TEST(strings) {
    const char *src = "\"a\\n\\t\\\\\\\"\\x41\\x7e\" \"\"";
    start(src);
    Token t = next();
    ck_assert_int_eq(t.kind, TK_STRING);
    ck_assert_uint_eq(t.slen, 7);
    ck_assert_mem_eq(t.str, "a\n\t\\\"A~", 7);
    ck_assert_uint_eq(t.span.off, 0);
    ck_assert_uint_eq(t.span.len, strlen(src) - 3);
    t = next();
    ck_assert_int_eq(t.kind, TK_STRING);
    ck_assert_uint_eq(t.slen, 0);
    ck_assert_int_eq(D.errors, 0);
}
END_TEST

START_TEST(string_errors) {
    start("\"ab\\q\" x");
    Token t = next();
    ck_assert_int_eq(t.kind, TK_STRING);
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "unknown escape '\\q' in string");
    ck_assert_uint_eq(D.items[0].span.off, 3);
    ck_assert_uint_eq(D.items[0].span.len, 2);
    ck_assert_int_eq(next().kind, TK_IDENT); /* lexing goes on after the string */

    diag_free(&D);
    diag_init(&D);
    start("\"\\xg1\"");
    next();
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "bad escape: \\x needs two hex digits");

    diag_free(&D);
    diag_init(&D);
    start("x = \"abc\ny = 1");
    ck_assert_int_eq(next().kind, TK_IDENT);
    ck_assert_int_eq(next().kind, TK_ASSIGN);
    t = next();
    ck_assert_int_eq(t.kind, TK_STRING);
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "unterminated string");
    ck_assert_uint_eq(D.items[0].span.off, 4);
    ck_assert_uint_eq(D.items[0].span.len, 4);
    ck_assert_int_eq(next().kind, TK_NL); /* the string ends the line: y = 1 is a new statement */
    ck_assert_int_eq(next().kind, TK_IDENT);

    diag_free(&D);
    diag_init(&D);
    start("\"abc"); /* to the end of file */
    ck_assert_int_eq(next().kind, TK_STRING);
    ck_assert_int_eq(next().kind, TK_NL);
    ck_assert_int_eq(next().kind, 0);
    ck_assert_str_eq(D.items[0].msg, "unterminated string");
}
END_TEST

START_TEST(comments_and_space) {
    ASSERT_KINDS("a # comment ( [\n# whole line\n\tb\r\n", TK_IDENT, TK_NL, TK_IDENT, TK_NL);
    ASSERT_KINDS("# only a comment", 0);
    ASSERT_KINDS("", 0);
    ASSERT_KINDS("\n\n  \n", 0);
}
END_TEST

START_TEST(newlines) {
    /* after a name, literal, ) ] } or return */
    ASSERT_KINDS("a\n1\n2.5\n\"s\"\n)\n]\n}\nreturn\nbf16\n", TK_IDENT, TK_NL, TK_INT, TK_NL, TK_FLOAT, TK_NL,
                 TK_STRING, TK_NL, TK_RPAREN, TK_NL, TK_RBRACK, TK_NL, TK_RBRACE, TK_NL, TK_RETURN, TK_NL, TK_DTYPE,
                 TK_NL);
    /* not after an operator, '=', ',', '{' or another keyword */
    ASSERT_KINDS("a +\nb", TK_IDENT, TK_PLUS, TK_IDENT, TK_NL);
    ASSERT_KINDS("a =\n1", TK_IDENT, TK_ASSIGN, TK_INT, TK_NL);
    ASSERT_KINDS("{\n}", TK_LBRACE, TK_RBRACE, TK_NL);
    ASSERT_KINDS("loss\nx", TK_LOSS, TK_IDENT, TK_NL);
    /* never inside ( ) or [ ], but again inside { } within them */
    ASSERT_KINDS("f(a\n, b\n)\n", TK_IDENT, TK_LPAREN, TK_IDENT, TK_COMMA, TK_IDENT, TK_RPAREN, TK_NL);
    ASSERT_KINDS("[1,\n2\n]", TK_LBRACK, TK_INT, TK_COMMA, TK_INT, TK_RBRACK, TK_NL);
    /* a final separator before the end, only where a statement can end */
    ASSERT_KINDS("x", TK_IDENT, TK_NL);
    ASSERT_KINDS("x +", TK_IDENT, TK_PLUS);
    /* CR LF */
    ASSERT_KINDS("a\r\nb\r\n", TK_IDENT, TK_NL, TK_IDENT, TK_NL);
}
END_TEST

START_TEST(skipped_newline_span) {
    start("f(a\n  b)");
    next();
    next();
    Token a = next();
    ck_assert_int_eq(a.nl.file, -1);
    Token b = next();
    ck_assert_int_eq(b.kind, TK_IDENT);
    ck_assert_int_eq(b.nl.file, 0);
    ck_assert_uint_eq(b.nl.off, 3);
}
END_TEST

START_TEST(brackets) {
    start("layer f(x: [B], y) {\n z = g(h[1]) }");
    int seen_params = 0, seen_dims = 0, seen_body = 0, seen_call = 0, seen_list = 0;
    Token t;
    do {
        t = next();
        const LexBracket *b = lex_open(&L);
        if (!b) continue;
        seen_params |= b->what == LO_PARAMS;
        seen_dims |= b->what == LO_DIMS;
        seen_call |= b->what == LO_CALL;
        seen_list |= b->what == LO_LIST;
        if (b->what == LO_DECL) {
            seen_body = 1;
            ck_assert_int_eq(b->decl_kw, TK_LAYER);
            ck_assert_str_eq(lex_open_what(&L, b), "the layer body");
            ck_assert_uint_eq(b->at.off, 19);
        }
        if (b->what == LO_CALL) ck_assert_str_eq(lex_open_what(&L, b), "the call to 'g'");
    } while (t.kind != 0);
    ck_assert(seen_params && seen_dims && seen_body && seen_call && seen_list);
    ck_assert_int_eq(L.depth, 0);

    start("target t { gpu { x = 1");
    for (int i = 0; i < 6; i++) next();
    ck_assert_str_eq(lex_open_what(&L, lex_open(&L)), "the 'gpu' block");
    start("repeat 3 {");
    for (int i = 0; i < 4; i++) next();
    ck_assert_str_eq(lex_open_what(&L, lex_open(&L)), "the repeat body");
    /* a '}' closes the parens left open inside its block */
    start("{ f( }\n");
    for (int i = 0; i < 5; i++) next();
    ck_assert_int_eq(L.depth, 0);
}
END_TEST

START_TEST(error_tokens) {
    start("a @ b");
    ck_assert_int_eq(next().kind, TK_IDENT);
    Token t = next();
    ck_assert_int_eq(t.kind, TK_IDENT); /* the bad character is skipped */
    ck_assert_uint_eq(t.span.off, 4);
    ck_assert_int_eq(D.errors, 1);
    ck_assert_str_eq(D.items[0].msg, "unexpected character '@'");
    ck_assert_uint_eq(D.items[0].span.off, 2);
    ck_assert_uint_eq(D.items[0].span.len, 1);

    /* a newline after a bad character ends the statement */
    ASSERT_KINDS("x = $\ny", TK_IDENT, TK_ASSIGN, TK_NL, TK_IDENT, TK_NL);

    diag_free(&D);
    diag_init(&D);
    start("\x01 \xc3\xa9 \xff\xfe x");
    ck_assert_int_eq(next().kind, TK_IDENT);
    ck_assert_int_eq(D.errors, 3);
    ck_assert_str_eq(D.items[0].msg, "unexpected byte 0x01");
    ck_assert_str_eq(D.items[1].msg, "unexpected non-ASCII text '\xc3\xa9'");
    ck_assert_uint_eq(D.items[1].span.len, 2);
    ck_assert_str_eq(D.items[3].msg, "invalid UTF-8 byte 0xff in the source");
    ck_assert_uint_eq(D.items[3].span.off, 5);
    ck_assert_uint_eq(D.items[3].span.len, 1);

    /* look-alikes pasted from documents get the ASCII to use */
    static const struct { const char *src, *hint; } alike[] = {
        {"2 \xc3\x97 3", "did you mean '*'?"},
        {"2 \xe2\x88\x92 3", "did you mean '-'?"},
        {"\xe2\x80\x9cs", "did you mean '\"'?"},
        {"a\xc2\xa0" "b", "did you mean ' ' (a plain space)?"},
        {"\xce\xbb", "names and operators are ASCII; other text belongs in strings or comments"},
    };
    for (size_t i = 0; i < sizeof alike / sizeof *alike; i++) {
        diag_free(&D);
        diag_init(&D);
        start(alike[i].src);
        while (next().kind) {}
        ck_assert_int_eq(D.errors, 1);
        ck_assert_str_eq(D.items[1].msg, alike[i].hint);
    }
    /* overlong and truncated sequences are invalid, not text */
    diag_free(&D);
    diag_init(&D);
    start("\xc0\xaf \xe2\x88");
    while (next().kind) {}
    ck_assert_int_eq(D.errors, 2);
    ck_assert_str_eq(D.items[0].msg, "invalid UTF-8 byte 0xc0 in the source");
    ck_assert_str_eq(D.items[2].msg, "invalid UTF-8 byte 0xe2 in the source");
}
END_TEST

START_TEST(nul_bytes) {
    const char src[] = "a\0b\0";
    start_n(src, 4); /* a NUL in the middle, and one more at the end of the text */
    ck_assert_int_eq(next().kind, TK_IDENT);
    Token t = next();
    ck_assert_int_eq(t.kind, TK_IDENT);
    ck_assert_uint_eq(t.span.off, 2);
    ck_assert_int_eq(next().kind, TK_NL);
    ck_assert_int_eq(next().kind, 0);
    ck_assert_int_eq(next().kind, 0); /* and stays at the end */
    ck_assert_int_eq(D.errors, 2);
    ck_assert_str_eq(D.items[0].msg, "unexpected NUL byte in the source");
}
END_TEST

START_TEST(nul_run) {
    /* a run of NULs is one error spanning the run, and lexing goes on */
    const char src[] = "a\0\0\0\0b";
    start_n(src, 6);
    ck_assert_int_eq(next().kind, TK_IDENT);
    Token t = next();
    ck_assert_int_eq(t.kind, TK_IDENT);
    ck_assert_uint_eq(t.span.off, 5);
    ck_assert_int_eq(D.errors, 1);
    ck_assert_uint_eq(D.items[0].span.off, 1);
    ck_assert_uint_eq(D.items[0].span.len, 4);
}
END_TEST

START_TEST(spans) {
    start("const  V = 0x10\n  layer");
    Token t = next();
    ck_assert_uint_eq(t.span.off, 0);
    ck_assert_uint_eq(t.span.len, 5);
    t = next();
    ck_assert_str_eq(t.str, "V");
    ck_assert_uint_eq(t.span.off, 7);
    ck_assert_uint_eq(t.span.len, 1);
    next();
    t = next();
    ck_assert_uint_eq(t.span.off, 11);
    ck_assert_uint_eq(t.span.len, 4);
    t = next();
    ck_assert_int_eq(t.kind, TK_NL);
    ck_assert_uint_eq(t.span.off, 15);
    t = next();
    ck_assert_int_eq(t.kind, TK_LAYER);
    ck_assert_uint_eq(t.span.off, 18);
    t = next();
    ck_assert_int_eq(t.kind, 0);
    ck_assert_uint_eq(t.span.off, 23);
}
END_TEST

START_TEST(token_names) {
    ck_assert_str_eq(lex_token_name(0), "end of file");
    ck_assert_str_eq(lex_token_name(TK_NL), "newline");
    ck_assert_str_eq(lex_token_name(TK_RPAREN), "')'");
    ck_assert_str_eq(lex_token_name(TK_IDENT), "a name");
    ck_assert_str_eq(lex_token_name(TK_LAYER), "'layer'");
}
END_TEST

int main(void) {
    Suite *s = suite_create("lexer");
    TCase *tc = tcase_create("lexer");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, punctuation_and_keywords);
    tcase_add_test(tc, dtypes);
    tcase_add_test(tc, integers);
    tcase_add_test(tc, floats);
    tcase_add_test(tc, units);
    tcase_add_test(tc, bad_numbers);
    tcase_add_test(tc, strings);
    tcase_add_test(tc, string_errors);
    tcase_add_test(tc, comments_and_space);
    tcase_add_test(tc, newlines);
    tcase_add_test(tc, skipped_newline_span);
    tcase_add_test(tc, brackets);
    tcase_add_test(tc, error_tokens);
    tcase_add_test(tc, nul_bytes);
    tcase_add_test(tc, nul_run);
    tcase_add_test(tc, spans);
    tcase_add_test(tc, token_names);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
