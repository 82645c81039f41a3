/* pretok: the GPT-2, Llama-3 and Qwen2 pre-tokenizer matchers split
 * strings exactly as the tokenizers library's Split(Regex(...),
 * "isolated") does (the expected pieces were produced by tokenizers
 * 0.23), the patterns are recognised from their text, and others are not. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "pretok.h"

typedef struct {
    PretokPattern p;
    const char *text;
    const char *pieces[24];
} Case;

static const Case CASES[] = {
    {PRETOK_GPT2, "Hello world", {"Hello", " world"}},
    {PRETOK_GPT2, "it's  DON'T we'Ve '\305\277 x'LL", {"it", "'s", " ", " DON", "'", "T", " we", "'", "Ve", " '", "\305\277", " x", "'", "LL"}},
    {PRETOK_GPT2, "  leading and trailing  ", {" ", " leading", " and", " trailing", "  "}},
    {PRETOK_GPT2, "a\012\012b \012 c\015\012\015\012d", {"a", "\012", "\012", "b", " \012", " c", "\015\012\015", "\012", "d"}},
    {PRETOK_GPT2, "tabs\011\011x \011 y", {"tabs", "\011", "\011", "x", " \011", " y"}},
    {PRETOK_GPT2, "1234567 12 x1y2", {"1234567", " 12", " x", "1", "y", "2"}},
    {PRETOK_GPT2, "$100 + 50% == ?!", {"$", "100", " +", " 50", "%", " ==", " ?!"}},
    {PRETOK_GPT2, "na\303\257ve caf\303\251 \303\261", {"na\303\257ve", " caf\303\251", " \303\261"}},
    {PRETOK_GPT2, "\346\227\245\346\234\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210", {"\346\227\245\346\234\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210"}},
    {PRETOK_GPT2, "a\302\240b\343\200\200c\342\200\250d", {"a", "\302\240", "b", "\343\200\200", "c", "\342\200\250", "d"}},
    {PRETOK_GPT2, "\302\205x\341\240\216y", {"\302\205", "x", "\341\240\216", "y"}},
    {PRETOK_GPT2, "'s'S'\305\277", {"'s", "'", "S", "'", "\305\277"}},
    {PRETOK_GPT2, "end.  ", {"end", ".", "  "}},
    {PRETOK_GPT2, "x  \012", {"x", "  \012"}},
    {PRETOK_GPT2, "::\012\012  ::", {"::", "\012\012 ", " ::"}},
    {PRETOK_GPT2, " \302\240\302\240y", {" \302\240", "\302\240", "y"}},
    {PRETOK_GPT2, "\331\243\331\244\331\2456\342\221\240\342\205\253", {"\331\243\331\244\331\2456\342\221\240\342\205\253"}},
    {PRETOK_GPT2, "\303\251", {"\303\251"}},
    {PRETOK_LLAMA3, "Hello world", {"Hello", " world"}},
    {PRETOK_LLAMA3, "it's  DON'T we'Ve '\305\277 x'LL", {"it", "'s", " ", " DON", "'T", " we", "'Ve", " '", "\305\277", " x", "'LL"}},
    {PRETOK_LLAMA3, "  leading and trailing  ", {" ", " leading", " and", " trailing", "  "}},
    {PRETOK_LLAMA3, "a\012\012b \012 c\015\012\015\012d", {"a", "\012\012", "b", " \012", " c", "\015\012\015\012", "d"}},
    {PRETOK_LLAMA3, "tabs\011\011x \011 y", {"tabs", "\011", "\011x", " \011", " y"}},
    {PRETOK_LLAMA3, "1234567 12 x1y2", {"123", "456", "7", " ", "12", " x", "1", "y", "2"}},
    {PRETOK_LLAMA3, "$100 + 50% == ?!", {"$", "100", " +", " ", "50", "%", " ==", " ?!"}},
    {PRETOK_LLAMA3, "na\303\257ve caf\303\251 \303\261", {"na\303\257ve", " caf\303\251", " \303\261"}},
    {PRETOK_LLAMA3, "\346\227\245\346\234\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210", {"\346\227\245\346\234\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210"}},
    {PRETOK_LLAMA3, "a\302\240b\343\200\200c\342\200\250d", {"a", "\302\240b", "\343\200\200c", "\342\200\250d"}},
    {PRETOK_LLAMA3, "\302\205x\341\240\216y", {"\302\205x", "\341\240\216y"}},
    {PRETOK_LLAMA3, "'s'S'\305\277", {"'s", "'S", "'\305\277"}},
    {PRETOK_LLAMA3, "end.  ", {"end", ".", "  "}},
    {PRETOK_LLAMA3, "x  \012", {"x", "  \012"}},
    {PRETOK_LLAMA3, "::\012\012  ::", {"::\012\012", " ", " ::"}},
    {PRETOK_LLAMA3, " \302\240\302\240y", {" \302\240", "\302\240y"}},
    {PRETOK_LLAMA3, "\331\243\331\244\331\2456\342\221\240\342\205\253", {"\331\243\331\244\331\245", "6\342\221\240\342\205\253"}},
    {PRETOK_LLAMA3, "\303\251", {"\303\251"}},
    {PRETOK_QWEN2, "Hello world", {"Hello", " world"}},
    {PRETOK_QWEN2, "it's  DON'T we'Ve '\305\277 x'LL", {"it", "'s", " ", " DON", "'T", " we", "'Ve", " '", "\305\277", " x", "'LL"}},
    {PRETOK_QWEN2, "  leading and trailing  ", {" ", " leading", " and", " trailing", "  "}},
    {PRETOK_QWEN2, "a\012\012b \012 c\015\012\015\012d", {"a", "\012\012", "b", " \012", " c", "\015\012\015\012", "d"}},
    {PRETOK_QWEN2, "tabs\011\011x \011 y", {"tabs", "\011", "\011x", " \011", " y"}},
    {PRETOK_QWEN2, "1234567 12 x1y2", {"1", "2", "3", "4", "5", "6", "7", " ", "1", "2", " x", "1", "y", "2"}},
    {PRETOK_QWEN2, "$100 + 50% == ?!", {"$", "1", "0", "0", " +", " ", "5", "0", "%", " ==", " ?!"}},
    {PRETOK_QWEN2, "na\303\257ve caf\303\251 \303\261", {"na\303\257ve", " caf\303\251", " \303\261"}},
    {PRETOK_QWEN2, "\346\227\245\346\234\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210", {"\346\227\245\346\234\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210"}},
    {PRETOK_QWEN2, "a\302\240b\343\200\200c\342\200\250d", {"a", "\302\240b", "\343\200\200c", "\342\200\250d"}},
    {PRETOK_QWEN2, "\302\205x\341\240\216y", {"\302\205x", "\341\240\216y"}},
    {PRETOK_QWEN2, "'s'S'\305\277", {"'s", "'S", "'\305\277"}},
    {PRETOK_QWEN2, "end.  ", {"end", ".", "  "}},
    {PRETOK_QWEN2, "x  \012", {"x", "  \012"}},
    {PRETOK_QWEN2, "::\012\012  ::", {"::\012\012", " ", " ::"}},
    {PRETOK_QWEN2, " \302\240\302\240y", {" \302\240", "\302\240y"}},
    {PRETOK_QWEN2, "\331\243\331\244\331\2456\342\221\240\342\205\253", {"\331\243", "\331\244", "\331\245", "6", "\342\221\240", "\342\205\253"}},
    {PRETOK_QWEN2, "\303\251", {"\303\251"}},
};

typedef struct {
    const char *text;
    char got[24][64];
    int n;
} Collect;

static int collect(void *ctx, size_t start, size_t len) {
    Collect *c = ctx;
    if (c->n == 24 || len >= 64) return 1;
    memcpy(c->got[c->n], c->text + start, len);
    c->got[c->n][len] = 0;
    c->n++;
    return 0;
}

START_TEST(test_splits) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *k = &CASES[i];
        Collect c = {.text = k->text};
        ck_assert_int_eq(pretok_split(k->p, (const uint8_t *)k->text, strlen(k->text), collect, &c), 0);
        int want = 0;
        while (want < 24 && k->pieces[want]) want++;
        ck_assert_msg(c.n == want, "%s case %zu: %d pieces, want %d", pretok_name(k->p), i, c.n, want);
        for (int j = 0; j < want; j++)
            ck_assert_msg(strcmp(c.got[j], k->pieces[j]) == 0, "%s case %zu piece %d: '%s', want '%s'", pretok_name(k->p), i,
                          j, c.got[j], k->pieces[j]);
    }
}
END_TEST

START_TEST(test_match_lengths) {
    const uint8_t *s = (const uint8_t *)"  x";
    ck_assert_uint_eq(pretok_match(PRETOK_GPT2, s, 3, 0), 1);  /* \s+(?!\S) leaves the space before x */
    ck_assert_uint_eq(pretok_match(PRETOK_GPT2, s, 3, 1), 2);  /* " x" */
    ck_assert_uint_eq(pretok_match(PRETOK_GPT2, s, 2, 0), 2);  /* at the end the whole run */
    ck_assert_uint_eq(pretok_match(PRETOK_GPT2, s, 3, 3), 0);  /* past the end */
    ck_assert_uint_eq(pretok_match(PRETOK_LLAMA3, (const uint8_t *)"12345", 5, 0), 3);
    ck_assert_uint_eq(pretok_match(PRETOK_QWEN2, (const uint8_t *)"12345", 5, 0), 1);
    ck_assert_uint_eq(pretok_match(PRETOK_UNKNOWN, (const uint8_t *)"x", 1, 0), 0);
    /* A callback's non-zero value stops the split and is returned. */
    Collect c = {.text = "a b c d"};
    c.n = 24;
    ck_assert_int_eq(pretok_split(PRETOK_GPT2, (const uint8_t *)c.text, 7, collect, &c), 1);
}
END_TEST

START_TEST(test_recognise) {
    const char *g = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    const char *l = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    const char *q = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    ck_assert_int_eq(pretok_pattern(g, strlen(g)), PRETOK_GPT2);
    ck_assert_int_eq(pretok_pattern(l, strlen(l)), PRETOK_LLAMA3);
    ck_assert_int_eq(pretok_pattern(q, strlen(q)), PRETOK_QWEN2);
    ck_assert_str_eq(pretok_regex(PRETOK_LLAMA3), l);
    ck_assert_int_eq(pretok_pattern(g, strlen(g) - 1), PRETOK_UNKNOWN);
    ck_assert_int_eq(pretok_pattern("\\p{N}{1,4}", 10), PRETOK_UNKNOWN);
    ck_assert_str_eq(pretok_name(PRETOK_QWEN2), "Qwen2");
}
END_TEST

int main(void) {
    Suite *s = suite_create("pretok");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_splits);
    tcase_add_test(tc, test_match_lengths);
    tcase_add_test(tc, test_recognise);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
