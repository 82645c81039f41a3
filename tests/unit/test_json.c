/* json: values of every type, escapes and UTF-8, integers against doubles,
 * and every kind of malformed text refused with its line and column. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"

static JsonDoc doc;
static char err[256];

static const JsonValue *ok(const char *text) {
    int rc = json_parse(text, strlen(text), &doc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", text, err);
    return doc.root;
}

static void bad(const char *text, const char *message) {
    JsonDoc d;
    ck_assert_msg(json_parse(text, strlen(text), &d, err, sizeof err) == -1, "accepted: %s", text);
    ck_assert_msg(strcmp(err, message) == 0, "%s:\n  got      %s\n  expected %s", text, err, message);
    ck_assert_ptr_null(d.root);
    json_free(&d);
}

START_TEST(values) {
    const JsonValue *r = ok(" {\"a\": [1, -2.5e3, true, false, null, \"x\"], \"b\": {}, \"c\": [], \"a\": 7}\n");
    ck_assert_int_eq(r->type, JSON_OBJECT);
    ck_assert_uint_eq(r->count, 4);
    const JsonValue *a = json_get(r, "a");
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->type, JSON_ARRAY);
    ck_assert_uint_eq(a->count, 6);
    ck_assert(a->items[0].is_integer && a->items[0].integer == 1);
    ck_assert(!a->items[1].is_integer && a->items[1].number == -2500.0);
    ck_assert(a->items[2].type == JSON_BOOL && a->items[2].boolean);
    ck_assert(a->items[3].type == JSON_BOOL && !a->items[3].boolean);
    ck_assert_int_eq(a->items[4].type, JSON_NULL);
    ck_assert_str_eq(a->items[5].string, "x");
    ck_assert_ptr_nonnull(json_get_type(r, "b", JSON_OBJECT));
    ck_assert_ptr_null(json_get_type(r, "b", JSON_ARRAY));
    ck_assert_ptr_null(json_get(r, "zz"));
    ck_assert_ptr_null(json_get(a, "a"));
    ck_assert_uint_eq(json_get(r, "c")->count, 0);
    ck_assert_str_eq(json_type_name(JSON_OBJECT), "object");
    json_free(&doc);
    /* integers keep their exact value past 2^53; too large ones are doubles */
    r = ok("[9007199254740993, -9223372036854775808, 9223372036854775808, 1e2, 0]");
    ck_assert(r->items[0].is_integer && r->items[0].integer == 9007199254740993ll);
    ck_assert(r->items[1].is_integer && r->items[1].integer == INT64_MIN);
    ck_assert(!r->items[2].is_integer && r->items[2].number == 9223372036854775808.0);
    ck_assert(!r->items[3].is_integer && r->items[3].number == 100.0);
    ck_assert(r->items[4].is_integer && r->items[4].integer == 0);
    json_free(&doc);
}
END_TEST

START_TEST(strings) {
    const JsonValue *r = ok("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u4e2d\\ud83d\\ude00\", \"é中😀\", \"a\\u0000b\"]");
    ck_assert_str_eq(r->items[0].string, "\"\\/\b\f\n\r\t");
    ck_assert_str_eq(r->items[1].string, "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
    ck_assert_str_eq(r->items[2].string, r->items[1].string);
    ck_assert_uint_eq(r->items[3].len, 3);
    ck_assert(memcmp(r->items[3].string, "a\0b", 3) == 0);
    json_free(&doc);
    r = ok("{\"\\u0120the\": 1}");
    ck_assert_str_eq(r->items[0].key, "\xc4\xa0the");
    ck_assert_ptr_nonnull(json_get(r, "\xc4\xa0the"));
    json_free(&doc);
}
END_TEST

START_TEST(errors) {
    bad("", "line 1, column 1: unexpected end of the text");
    bad("{\"a\" 1}", "line 1, column 6: expected ':' after an object key");
    bad("{\"a\": 1,}", "line 1, column 9: expected a string key in an object");
    bad("[1 2]", "line 1, column 4: expected ',' or ']'");
    bad("[1,\n  2,\n  tru]", "line 3, column 3: unexpected 't'");
    bad("{\"a\": 1} x", "line 1, column 10: text after the JSON value");
    bad("\"abc", "line 1, column 5: a string is not closed");
    bad("\"a\tb\"", "line 1, column 3: a control character (0x09) inside a string must be escaped");
    bad("\"\\x\"", "line 1, column 4: unknown escape '\\x'");
    bad("\"\\u12\"", "line 1, column 4: a \\u escape needs four hex digits");
    bad("\"\\ud83d\"", "line 1, column 8: a lone high surrogate \\uD83D");
    bad("\"\\ude00\"", "line 1, column 8: a lone low surrogate \\uDE00");
    bad("\"\xc3\x28\"", "line 1, column 2: invalid UTF-8 in a string");
    bad("\"\xed\xa0\x80\"", "line 1, column 2: invalid UTF-8 in a string");
    bad("\"\xc0\xaf\"", "line 1, column 2: invalid UTF-8 in a string");
    bad("01", "line 1, column 2: text after the JSON value");
    bad("-", "line 1, column 2: a number needs a digit");
    bad("1.", "line 1, column 3: a digit must follow the decimal point");
    bad("1e+", "line 1, column 4: an exponent needs a digit");
    bad("NaN", "line 1, column 1: unexpected 'N'");
    bad("[nul]", "line 1, column 2: unexpected 'n'");
    char deep[600];
    memset(deep, '[', 300);
    memset(deep + 300, ']', 300);
    deep[599] = 0;
    deep[598] = ']';
    JsonDoc d;
    ck_assert_int_eq(json_parse(deep, 600 - 1, &d, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "nesting deeper than 256") != NULL, "%s", err);
    json_free(&d);
    /* a text that is not NUL-terminated is read only to its length */
    ck_assert_int_eq(json_parse("[1]]]", 3, &d, err, sizeof err), 0);
    json_free(&d);
}
END_TEST

START_TEST(positions) {
    int line, col;
    const char *t = "ab\ncd\xc3\xa9x";
    json_position(t, strlen(t), 7, &line, &col);
    ck_assert_int_eq(line, 2);
    ck_assert_int_eq(col, 4);
}
END_TEST

int main(void) {
    Suite *s = suite_create("json");
    TCase *t = tcase_create("json");
    tcase_add_test(t, values);
    tcase_add_test(t, strings);
    tcase_add_test(t, errors);
    tcase_add_test(t, positions);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
