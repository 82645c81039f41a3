/* tokjson: values, escapes and surrogate pairs, lookups, and every
 * malformed text refused with its line, column and fault. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokjson.h"

static TokJsonDoc *parse_ok(const char *text) {
    TokJsonDoc *d = NULL;
    char err[256] = "";
    ck_assert_msg(tokjson_parse(text, strlen(text), &d, err, sizeof err) == 0, "%s: %s", text, err);
    return d;
}

static void parse_bad(const char *text, const char *want) {
    TokJsonDoc *d = (TokJsonDoc *)1;
    char err[256] = "";
    ck_assert_int_eq(tokjson_parse(text, strlen(text), &d, err, sizeof err), -1);
    ck_assert_ptr_null(d);
    ck_assert_msg(strcmp(err, want) == 0, "for %s: got '%s', want '%s'", text, err, want);
}

START_TEST(test_values) {
    TokJsonDoc *d = parse_ok(" {\"a\": [1, -2, 3.5, 1e3, 0, -0.25E-1], \"b\": true, \"c\": false, \"d\": null,"
                             " \"e\": \"x\", \"f\": {}, \"g\": [], \"big\": 123456789012345678901234567890} ");
    const TokJson *r = tokjson_root(d);
    ck_assert_int_eq(r->type, TOKJSON_OBJECT);
    ck_assert_int_eq(r->n, 8);
    const TokJson *a = tokjson_get(r, "a");
    ck_assert_int_eq(a->type, TOKJSON_ARRAY);
    ck_assert_int_eq(a->n, 6);
    ck_assert(a->kids[0].is_int && a->kids[0].i == 1);
    ck_assert(a->kids[1].is_int && a->kids[1].i == -2);
    ck_assert(!a->kids[2].is_int && a->kids[2].num == 3.5);
    ck_assert(!a->kids[3].is_int && a->kids[3].num == 1000);
    ck_assert(a->kids[4].is_int && a->kids[4].i == 0);
    ck_assert(a->kids[5].num == -0.025);
    ck_assert_int_eq(tokjson_get_bool(r, "b", 0), 1);
    ck_assert_int_eq(tokjson_get_bool(r, "c", 1), 0);
    ck_assert_int_eq(tokjson_get_bool(r, "d", 1), 1);  /* null: the default */
    ck_assert_int_eq(tokjson_get_bool(r, "zz", 0), 0); /* absent: the default */
    ck_assert_int_eq(tokjson_get_bool(r, "e", 0), -1); /* not a boolean */
    ck_assert_str_eq(tokjson_get_str(r, "e"), "x");
    ck_assert_ptr_null(tokjson_get_str(r, "a"));
    ck_assert_int_eq(tokjson_get(r, "f")->n, 0);
    ck_assert_int_eq(tokjson_get(r, "g")->type, TOKJSON_ARRAY);
    ck_assert(!tokjson_get(r, "big")->is_int); /* does not fit int64 */
    ck_assert_ptr_null(tokjson_get(a, "x"));   /* not an object */
    tokjson_free(d);
    d = parse_ok("-9223372036854775808");
    ck_assert(tokjson_root(d)->is_int && tokjson_root(d)->i == INT64_MIN);
    tokjson_free(d);
    d = parse_ok("{\"k\": 1, \"k\": 2}"); /* the later member wins */
    ck_assert_int_eq(tokjson_get(tokjson_root(d), "k")->i, 2);
    tokjson_free(d);
}
END_TEST

START_TEST(test_strings) {
    TokJsonDoc *d = parse_ok("[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u0041\\u00e9\\u20ac\", \"\\ud83d\\ude42\","
                             " \"\\u0000z\", \"\xe2\x96\x81h\xc3\xa9\", \"\"]");
    const TokJson *r = tokjson_root(d);
    ck_assert_int_eq(r->kids[0].n, 12);
    ck_assert_int_eq(memcmp(r->kids[0].str, "a\"b\\c/d\b\f\n\r\t", 12), 0);
    ck_assert_str_eq(r->kids[1].str, "A\xc3\xa9\xe2\x82\xac");
    ck_assert_str_eq(r->kids[2].str, "\xf0\x9f\x99\x82");
    ck_assert_int_eq(r->kids[3].n, 2); /* NUL inside: use the length */
    ck_assert_int_eq(r->kids[3].str[1], 'z');
    ck_assert_str_eq(r->kids[4].str, "\xe2\x96\x81h\xc3\xa9");
    ck_assert_int_eq(r->kids[5].n, 0);
    tokjson_free(d);
    /* Keys are decoded too. */
    d = parse_ok("{\"\\u0120a\": 7}");
    ck_assert_str_eq(tokjson_root(d)->kids[0].key, "\xc4\xa0" "a");
    ck_assert_int_eq(tokjson_root(d)->kids[0].keylen, 3);
    tokjson_free(d);
}
END_TEST

START_TEST(test_malformed) {
    parse_bad("", "line 1, column 1: unexpected end of text (expected a value)");
    parse_bad("{\"a\": 1,}", "line 1, column 9: expected a string key");
    parse_bad("[1, 2", "line 1, column 6: unexpected end of text in an array");
    parse_bad("{\"a\" 1}", "line 1, column 6: expected ':' after an object key");
    parse_bad("[1 2]", "line 1, column 4: expected ',' or ']'");
    parse_bad("{\n  \"model\": tru\n}", "line 2, column 12: invalid literal (expected 'true')");
    parse_bad("\"abc", "line 1, column 5: unterminated string");
    parse_bad("\"a\nb\"", "line 1, column 3: control character 0x0a in a string (must be escaped)");
    parse_bad("\"\\x\"", "line 1, column 2: bad escape '\\x'");
    parse_bad("\"\\u12G4\"", "line 1, column 4: bad hex digit in \\u escape");
    parse_bad("\"\\ud83d\"", "line 1, column 8: lone leading surrogate \\uD83D");
    parse_bad("\"\\ude42\"", "line 1, column 8: lone trailing surrogate \\uDE42");
    parse_bad("\"\xc3\x28\"", "line 1, column 2: invalid UTF-8 in a string");
    parse_bad("01", "line 1, column 2: text after the JSON value");
    parse_bad("1.", "line 1, column 3: invalid number: digits must follow '.'");
    parse_bad("-", "line 1, column 2: invalid number");
    parse_bad("1e+", "line 1, column 4: invalid number: digits must follow the exponent");
    parse_bad("{} {}", "line 1, column 4: text after the JSON value");
    parse_bad("'a'", "line 1, column 1: unexpected character '''");
    parse_bad("\xef\xbb\xbf{}", "line 1, column 1: unexpected byte 0xef");
    /* Nesting is bounded. */
    char deep[600];
    memset(deep, '[', 300);
    memset(deep + 300, ']', 300);
    deep[599] = 0;
    TokJsonDoc *d;
    char err[256];
    ck_assert_int_eq(tokjson_parse(deep, 600, &d, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "nesting deeper than 256"));
}
END_TEST

/* A large document: many members, all reachable. */
START_TEST(test_large) {
    size_t cap = 4 << 20, n = 0;
    char *t = malloc(cap);
    n += (size_t)sprintf(t + n, "{\"vocab\": {");
    for (int i = 0; i < 100000; i++) n += (size_t)sprintf(t + n, "%s\"tok%d\": %d", i ? ", " : "", i, i);
    n += (size_t)sprintf(t + n, "}}");
    TokJsonDoc *d;
    char err[256];
    ck_assert_msg(tokjson_parse(t, n, &d, err, sizeof err) == 0, "%s", err);
    const TokJson *v = tokjson_get(tokjson_root(d), "vocab");
    ck_assert_int_eq(v->n, 100000);
    for (uint32_t i = 0; i < v->n; i += 997) {
        char k[32];
        snprintf(k, sizeof k, "tok%u", i);
        ck_assert_str_eq(v->kids[i].key, k);
        ck_assert_int_eq(v->kids[i].i, i);
    }
    tokjson_free(d);
    free(t);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tokjson");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_large);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
