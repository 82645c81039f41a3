/* json: values of every type, escapes and UTF-8, integers against doubles,
 * lookups (a repeated key gives its last member; typed, string and boolean
 * lookups), large and nested documents, and every kind of malformed text
 * refused with its line and column. */
#include <check.h>
#include <math.h>
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
    /* a repeated key: both members kept in order, the lookup gives the last */
    ck_assert_str_eq(r->items[3].key, "a");
    ck_assert_ptr_eq(json_get(r, "a"), &r->items[3]);
    ck_assert(json_get(r, "a")->is_integer && json_get(r, "a")->integer == 7);
    ck_assert_ptr_null(json_get_type(r, "a", JSON_ARRAY));
    const JsonValue *a = &r->items[0];
    ck_assert_str_eq(a->key, "a");
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
    r = ok("{\"k\": 1, \"k\": 2, \"j\": {\"k\": 3}, \"k\": 4}");
    ck_assert_int_eq(json_get(r, "k")->integer, 4);
    ck_assert_int_eq(json_get(json_get(r, "j"), "k")->integer, 3);
    json_free(&doc);
    /* integers keep their exact value past 2^53; too large ones are doubles */
    r = ok("[9007199254740993, -9223372036854775808, 9223372036854775808, 1e2, 0]");
    ck_assert(r->items[0].is_integer && r->items[0].integer == 9007199254740993ll);
    ck_assert(r->items[1].is_integer && r->items[1].integer == INT64_MIN);
    ck_assert(!r->items[2].is_integer && r->items[2].number == 9223372036854775808.0);
    ck_assert(!r->items[3].is_integer && r->items[3].number == 100.0);
    ck_assert(r->items[4].is_integer && r->items[4].integer == 0);
    json_free(&doc);
    /* around 10^18, where integers stop being read digit by digit, and -0 */
    r = ok("[999999999999999999, -999999999999999999, 1000000000000000000, 123456789012345678901234567890, -0, -0.25E-1, 3.5]");
    ck_assert(r->items[0].is_integer && r->items[0].integer == 999999999999999999ll);
    ck_assert(r->items[0].number == 999999999999999999.0);
    ck_assert(r->items[1].is_integer && r->items[1].integer == -999999999999999999ll);
    ck_assert(r->items[2].is_integer && r->items[2].integer == 1000000000000000000ll);
    ck_assert(!r->items[3].is_integer && r->items[3].number == 123456789012345678901234567890.0);
    ck_assert(r->items[4].is_integer && r->items[4].integer == 0 && r->items[4].number == 0 && signbit(r->items[4].number));
    ck_assert(!r->items[5].is_integer && r->items[5].number == -0.025);
    ck_assert(!r->items[6].is_integer && r->items[6].number == 3.5);
    json_free(&doc);
    /* a number of any length */
    char longnum[700] = "[0.";
    memset(longnum + 3, '1', 600);
    strcpy(longnum + 603, "]");
    r = ok(longnum);
    ck_assert(!r->items[0].is_integer && fabs(r->items[0].number - 1.0 / 9) < 1e-15);
    json_free(&doc);
}
END_TEST

/* json_get_str and json_get_bool: the value, or what absence, null and
 * another type give. */
START_TEST(typed_lookups) {
    const JsonValue *r = ok("{\"t\": true, \"f\": false, \"n\": null, \"s\": \"x\", \"e\": \"\", \"i\": 1, \"a\": [true],"
                            " \"s\": \"y\"}");
    ck_assert_int_eq(json_get_bool(r, "t", 0), 1);
    ck_assert_int_eq(json_get_bool(r, "f", 1), 0);
    ck_assert_int_eq(json_get_bool(r, "n", 1), 1);   /* null: the default */
    ck_assert_int_eq(json_get_bool(r, "n", 0), 0);
    ck_assert_int_eq(json_get_bool(r, "zz", 1), 1);  /* absent: the default */
    ck_assert_int_eq(json_get_bool(r, "zz", 0), 0);
    ck_assert_int_eq(json_get_bool(r, "s", 0), -1);  /* another type */
    ck_assert_int_eq(json_get_bool(r, "i", 1), -1);
    ck_assert_int_eq(json_get_bool(r, "a", 1), -1);
    ck_assert_int_eq(json_get_bool(&r->items[0], "t", 7), 7); /* not an object: absent */
    ck_assert_str_eq(json_get_str(r, "s"), "y");    /* the last */
    ck_assert_str_eq(json_get_str(r, "e"), "");
    ck_assert_ptr_null(json_get_str(r, "t"));
    ck_assert_ptr_null(json_get_str(r, "n"));
    ck_assert_ptr_null(json_get_str(r, "zz"));
    ck_assert_ptr_null(json_get_str(NULL, "s"));
    ck_assert_ptr_null(json_get(NULL, "s"));
    ck_assert_str_eq(json_type_phrase(JSON_NULL), "null");
    ck_assert_str_eq(json_type_phrase(JSON_BOOL), "a boolean");
    ck_assert_str_eq(json_type_phrase(JSON_NUMBER), "a number");
    ck_assert_str_eq(json_type_phrase(JSON_STRING), "a string");
    ck_assert_str_eq(json_type_phrase(JSON_ARRAY), "an array");
    ck_assert_str_eq(json_type_phrase(JSON_OBJECT), "an object");
    json_free(&doc);
}
END_TEST

/* Containers inside containers keep their own elements; a large object
 * keeps every member in order. */
START_TEST(large_and_nested) {
    const JsonValue *r = ok("[[1, [2, 3], {\"k\": [4, {}]}], [], {\"a\": [5, 6], \"b\": 7}, 8]");
    ck_assert_uint_eq(r->count, 4);
    const JsonValue *x = &r->items[0];
    ck_assert_uint_eq(x->count, 3);
    ck_assert_int_eq(x->items[0].integer, 1);
    ck_assert_uint_eq(x->items[1].count, 2);
    ck_assert_int_eq(x->items[1].items[1].integer, 3);
    const JsonValue *k = json_get(&x->items[2], "k");
    ck_assert_uint_eq(k->count, 2);
    ck_assert_int_eq(k->items[0].integer, 4);
    ck_assert_int_eq(k->items[1].type, JSON_OBJECT);
    ck_assert_uint_eq(r->items[1].count, 0);
    ck_assert_int_eq(json_get(&r->items[2], "a")->items[1].integer, 6);
    ck_assert_int_eq(json_get(&r->items[2], "b")->integer, 7);
    ck_assert_int_eq(r->items[3].integer, 8);
    json_free(&doc);

    size_t cap = 4 << 20, n = 0;
    char *t = malloc(cap);
    ck_assert_ptr_nonnull(t);
    n += (size_t)sprintf(t + n, "{\"vocab\": {");
    for (int i = 0; i < 100000; i++) n += (size_t)sprintf(t + n, "%s\"tok%d\": %d", i ? ", " : "", i, i);
    n += (size_t)sprintf(t + n, "}, \"merges\": [[\"a\", \"b\"]]}");
    ck_assert_msg(json_parse(t, n, &doc, err, sizeof err) == 0, "%s", err);
    const JsonValue *v = json_get_type(doc.root, "vocab", JSON_OBJECT);
    ck_assert_uint_eq(v->count, 100000);
    for (size_t i = 0; i < v->count; i += 997) {
        char key[32];
        snprintf(key, sizeof key, "tok%zu", i);
        ck_assert_str_eq(v->items[i].key, key);
        ck_assert_uint_eq(v->items[i].key_len, strlen(key));
        ck_assert_int_eq(v->items[i].integer, (int64_t)i);
    }
    ck_assert_int_eq(json_get(v, "tok99999")->integer, 99999);
    ck_assert_str_eq(json_get(doc.root, "merges")->items[0].items[1].string, "b");
    json_free(&doc);
    free(t);
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
    ck_assert_uint_eq(r->items[0].key_len, 5);
    ck_assert_ptr_nonnull(json_get(r, "\xc4\xa0the"));
    json_free(&doc);
    r = ok("[\"\", \"a\\\"b\\\\c\", \"\\u0041\\u20ac\\ud83d\\ude42z\", \"\xe2\x96\x81h\xc3\xa9\\n\xe2\x96\x81\"]");
    ck_assert_uint_eq(r->items[0].len, 0);
    ck_assert_str_eq(r->items[0].string, "");
    ck_assert_str_eq(r->items[1].string, "a\"b\\c");
    ck_assert_uint_eq(r->items[1].len, 5);
    ck_assert_str_eq(r->items[2].string, "A\xe2\x82\xac\xf0\x9f\x99\x82z");
    ck_assert_str_eq(r->items[3].string, "\xe2\x96\x81h\xc3\xa9\n\xe2\x96\x81");
    ck_assert_uint_eq(r->items[3].len, 10);
    json_free(&doc);
}
END_TEST

START_TEST(errors) {
    bad("", "line 1, column 1: unexpected end of the text");
    bad("{\"a\" 1}", "line 1, column 6: expected ':' after an object key");
    bad("{\"a\": 1,}", "line 1, column 9: expected a string key in an object");
    bad("[1 2]", "line 1, column 4: expected ',' or ']'");
    bad("[1,\n  2,\n  tru]", "line 3, column 3: invalid literal (expected 'true')");
    bad("{\n  \"model\": fals\n}", "line 2, column 12: invalid literal (expected 'false')");
    bad("[1, 2", "line 1, column 6: unexpected end of the text in an array");
    bad("[1, 2,", "line 1, column 7: unexpected end of the text");
    bad("{\"a\": 1", "line 1, column 8: unexpected end of the text in an object");
    bad("{\"a\": 1,\n", "line 2, column 1: expected a string key in an object");
    bad("{\"a\"", "line 1, column 5: expected ':' after an object key");
    bad("{} {}", "line 1, column 4: text after the JSON value");
    bad("'a'", "line 1, column 1: unexpected '''");
    bad("\xef\xbb\xbf{}", "line 1, column 1: unexpected byte 0xef");
    bad("[1,\x01]", "line 1, column 4: unexpected byte 0x01");
    bad("{\"a\": 1} x", "line 1, column 10: text after the JSON value");
    bad("\"abc", "line 1, column 5: a string is not closed");
    bad("\"a\tb\"", "line 1, column 3: a control character (0x09) inside a string must be escaped");
    bad("\"\\x\"", "line 1, column 2: unknown escape '\\x'");
    bad("\"\\u12\"", "line 1, column 4: a \\u escape needs four hex digits");
    bad("\"\\u12G4\"", "line 1, column 4: a \\u escape needs four hex digits");
    bad("\"\\\xc3\xa9\"", "line 1, column 2: unknown escape: '\\' followed by the byte 0xc3");
    bad("\"ab\\", "line 1, column 5: a string is not closed");
    bad("\"\\ud83d\\u0041\"", "line 1, column 14: \\u0041 is not a low surrogate");
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
    bad("[nul]", "line 1, column 2: invalid literal (expected 'null')");
    bad("{\"a\": \"\xe2\x96\x81\xff\"}", "line 1, column 9: invalid UTF-8 in a string");
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
    tcase_add_test(t, typed_lookups);
    tcase_add_test(t, large_and_nested);
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
