/* unicode: the generated class table on characters whose classes the
 * pre-tokenizer regexes depend on, UTF-8 repair as Python's
 * errors="replace" does it, and GPT-2's byte-level alphabet. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

START_TEST(test_classes) {
    struct { uint32_t cp; unsigned want; } c[] = {
        {'a', UNI_L | UNI_W}, {'Z', UNI_L | UNI_W}, {'5', UNI_N | UNI_W}, {' ', UNI_WS}, {'\t', UNI_WS},
        {'\n', UNI_WS}, {0x0B, UNI_WS}, {0x0C, UNI_WS}, {'\r', UNI_WS}, {'_', UNI_W}, {'\'', 0}, {'!', 0},
        {0x1C, 0}, {0x1F, 0},                        /* Python's isspace() says yes; White_Space says no */
        {0x85, UNI_WS}, {0xA0, UNI_WS}, {0x1680, UNI_WS}, {0x2000, UNI_WS}, {0x200A, UNI_WS},
        {0x2028, UNI_WS}, {0x2029, UNI_WS}, {0x202F, UNI_WS}, {0x205F, UNI_WS}, {0x3000, UNI_WS},
        {0x180E, 0}, {0x200B, 0}, {0xFEFF, 0},       /* not White_Space */
        {0x200D, UNI_W},                             /* Join_Control */
        {0xE9, UNI_L | UNI_W}, {0x17F, UNI_L | UNI_W}, {0x3B1, UNI_L | UNI_W}, {0x65E5, UNI_L | UNI_W},
        {0x2160, UNI_N | UNI_W},                     /* Nl: roman numeral one */
        {0x2460, UNI_N},                             /* No: circled one, not \w */
        {0xBD, UNI_N},                               /* No: one half */
        {0x663, UNI_N | UNI_W},                      /* Arabic-Indic three */
        {0x301, UNI_W}, {0x24B6, UNI_W},             /* a mark; circled A (Other_Alphabetic) */
        {0x1F642, 0}, {0x10FFFF, 0}, {0x110000, 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        ck_assert_msg(uni_class(c[i].cp) == c[i].want, "U+%04X: flags %u, want %u", c[i].cp, uni_class(c[i].cp), c[i].want);
    ck_assert(strlen(uni_table_version) >= 4);
}
END_TEST

START_TEST(test_encode_decode) {
    uint32_t cps[] = {0, 0x41, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFD, 0xFFFF, 0x10000, 0x1F642, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        char b[4];
        size_t n = uni_encode(cps[i], b), want = cps[i] < 0x80 ? 1 : cps[i] < 0x800 ? 2 : cps[i] < 0x10000 ? 3 : 4;
        ck_assert_uint_eq(n, want);
        uint32_t back;
        ck_assert_uint_eq(uni_decode((const uint8_t *)b, n, &back), n);
        ck_assert_uint_eq(back, cps[i]);
        ck_assert_uint_eq(uni_valid_prefix((const uint8_t *)b, n), n);
    }
}
END_TEST

START_TEST(test_repair) {
    /* Expected from Python: bytes.decode("utf-8", errors="replace"). */
    struct { const char *in; size_t n; size_t bad; const char *out; } c[] = {
        {"a\x80" "b", 3, 1, "a\xef\xbf\xbd" "b"},
        {"\xc0\x80", 2, 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc3", 1, 1, "\xef\xbf\xbd"},
        {"\xe2\x82", 2, 1, "\xef\xbf\xbd"},
        {"\xe2\x82x", 3, 1, "\xef\xbf\xbdx"},
        {"\xed\xa0\x80", 3, 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x99", 3, 1, "\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", 4, 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe0\x80\xaf", 3, 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x99\x82", 4, 0, "\xf0\x9f\x99\x82"},
        {"\xff\xfe", 2, 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"", 0, 0, ""},
        {"plain \xc3\xa9", 8, 0, "plain \xc3\xa9"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        size_t n, bad;
        char *o = uni_utf8_repair((const uint8_t *)c[i].in, c[i].n, &n, &bad);
        ck_assert_ptr_nonnull(o);
        ck_assert_msg(bad == c[i].bad && n == strlen(c[i].out) && !memcmp(o, c[i].out, n), "case %zu: %zu bad", i, bad);
        ck_assert_uint_eq(uni_valid_prefix((const uint8_t *)o, n), n);
        free(o);
    }
    ck_assert_uint_eq(uni_valid_prefix((const uint8_t *)"ab\xc3\xa9\xc3", 5), 4);
}
END_TEST

START_TEST(test_byte_level) {
    /* GPT-2's bytes_to_unicode: ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ',
     * printable bytes stand for themselves, 0xAD -> U+0143. */
    ck_assert_uint_eq(uni_byte_char(' '), 0x120);
    ck_assert_uint_eq(uni_byte_char('\n'), 0x10A);
    ck_assert_uint_eq(uni_byte_char(0), 0x100);
    ck_assert_uint_eq(uni_byte_char('A'), 'A');
    ck_assert_uint_eq(uni_byte_char(0xE9), 0xE9);
    ck_assert_uint_eq(uni_byte_char(0xAD), 0x143);
    ck_assert_uint_eq(uni_byte_char(0x7F), 0x121);
    for (int b = 0; b < 256; b++) ck_assert_int_eq(uni_char_byte(uni_byte_char((uint8_t)b)), b);
    ck_assert_int_eq(uni_char_byte(' '), -1);
    ck_assert_int_eq(uni_char_byte(0x144), -1);
    ck_assert_int_eq(uni_char_byte(0x2581), -1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("unicode");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_classes);
    tcase_add_test(tc, test_encode_decode);
    tcase_add_test(tc, test_repair);
    tcase_add_test(tc, test_byte_level);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
