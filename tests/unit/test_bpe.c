/* bpe: tiny hand-made models against the ids the tokenizers library
 * gives for them (tokenizers 0.23: models.BPE(...).tokenize(word)):
 * merge order by rank then position, unknown characters dropped, unk
 * with and without fuse_unk, byte fallback (and its pending-unk order),
 * ignore_merges, a pair listed twice, byte-level words, the cache, and
 * merges that name missing tokens refused. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"

typedef struct {
    const char *a, *b;
} Pair;

static BpeModel *build(const char *const *toks, size_t nt, const Pair *mg, size_t nm, BpeOptions o) {
    BpeToken *v = calloc(nt + 1, sizeof *v);
    BpeMerge *m = calloc(nm + 1, sizeof *m);
    for (size_t i = 0; i < nt; i++) v[i] = (BpeToken){toks[i], (uint32_t)strlen(toks[i]), (uint32_t)i};
    for (size_t i = 0; i < nm; i++) m[i] = (BpeMerge){mg[i].a, mg[i].b, (uint32_t)strlen(mg[i].a), (uint32_t)strlen(mg[i].b)};
    BpeModel *b = NULL;
    char err[256];
    ck_assert_msg(bpe_create(&b, &o, v, nt, m, nm, err, sizeof err) == 0, "%s", err);
    free(v);
    free(m);
    return b;
}

/* want: ids terminated by -1 */
static void expect(BpeModel *m, const char *word, const int *want) {
    for (int round = 0; round < 2; round++) { /* the second answer comes from the cache */
        BpeIds ids = {0};
        char err[256];
        ck_assert_msg(bpe_encode(m, word, strlen(word), &ids, err, sizeof err) == 0, "%s", err);
        size_t n = 0;
        while (want[n] >= 0) n++;
        char got[256] = "";
        for (size_t i = 0; i < ids.n; i++) snprintf(got + strlen(got), sizeof got - strlen(got), " %u", ids.v[i]);
        ck_assert_msg(ids.n == n, "'%s': got%s", word, got);
        for (size_t i = 0; i < n; i++) ck_assert_msg(ids.v[i] == (uint32_t)want[i], "'%s': got%s", word, got);
        bpe_ids_free(&ids);
    }
}

#define IDS(...) ((const int[]){__VA_ARGS__, -1})
#define NONE ((const int[]){-1})

static const char *const A[] = {"u", "n", "r", "e", "l", "a", "t", "d", "re", "at", "ed", "un", "ated", "rel", "related",
                                "unrelated", "<unk>"};
static const Pair AM[] = {{"r", "e"}, {"a", "t"}, {"e", "d"}, {"u", "n"}, {"at", "ed"}, {"re", "l"}, {"rel", "ated"}, {"un", "related"}};

START_TEST(test_merges) {
    BpeModel *m = build(A, 16, AM, 8, (BpeOptions){0});
    expect(m, "unrelated", IDS(15));
    expect(m, "related", IDS(14));
    expect(m, "dun", IDS(7, 11));
    expect(m, "xyz", NONE);             /* unknown characters are dropped without an unk token */
    expect(m, "unxrelated", IDS(15));   /* ... and the rest merges across them */
    expect(m, "", NONE);
    ck_assert_int_eq(bpe_token_id(m, "ated", 4), 12);
    ck_assert_int_eq(bpe_token_id(m, "zz", 2), -1);
    size_t n;
    ck_assert_int_eq(memcmp(bpe_token_text(m, 13, &n), "rel", 3), 0);
    ck_assert_uint_eq(n, 3);
    ck_assert_ptr_null(bpe_token_text(m, 16, &n));
    ck_assert_uint_eq(bpe_vocab_entries(m), 16);
    ck_assert_uint_eq(bpe_id_limit(m), 16);
    uint64_t words, hits;
    bpe_cache_stats(m, &words, &hits);
    ck_assert_uint_eq(words, 10); /* "" is not a word */
    ck_assert_uint_eq(hits, 5);
    bpe_free(m);
}
END_TEST

START_TEST(test_unk) {
    BpeModel *m = build(A, 17, AM, 8, (BpeOptions){.unk_token = "<unk>"});
    expect(m, "unxrelated", IDS(11, 16, 14));
    expect(m, "xxun", IDS(16, 16, 11));
    bpe_free(m);
    m = build(A, 17, AM, 8, (BpeOptions){.unk_token = "<unk>", .fuse_unk = 1});
    expect(m, "unxrelated", IDS(11, 16, 14));
    expect(m, "xxun", IDS(16, 11));
    expect(m, "x\xc3\xa9x", IDS(16));
    bpe_free(m);
    /* An unk token missing from the vocabulary is an error when needed. */
    m = build(A, 16, AM, 8, (BpeOptions){.unk_token = "[UNK]"});
    expect(m, "unrelated", IDS(15));
    BpeIds ids = {0};
    char err[256];
    ck_assert_int_eq(bpe_encode(m, "ux", 2, &ids, err, sizeof err), -1);
    ck_assert_str_eq(err, "unk_token '[UNK]' is not in the vocabulary (needed for a character not in it)");
    bpe_ids_free(&ids);
    bpe_free(m);
}
END_TEST

START_TEST(test_byte_fallback) {
    static const char *const C[] = {"<unk>", "<0x61>", "<0xC3>", "<0xA9>", "b"};
    BpeModel *m = build(C, 5, NULL, 0, (BpeOptions){.unk_token = "<unk>", .byte_fallback = 1});
    expect(m, "c", IDS(0));                  /* <0x63> is missing: unk */
    expect(m, "a", IDS(1));
    expect(m, "ca", IDS(1, 0));              /* the pending unk comes after the fallback bytes, as in the library */
    expect(m, "b\xc3\xa9", IDS(4, 2, 3));
    expect(m, "c\xc3\xa9", IDS(2, 3, 0));
    bpe_free(m);
    m = build(C, 5, NULL, 0, (BpeOptions){.unk_token = "<unk>", .byte_fallback = 1, .fuse_unk = 1});
    expect(m, "ca", IDS(1, 0));
    expect(m, "c\xc3\xa9", IDS(2, 3, 0));
    bpe_free(m);
}
END_TEST

START_TEST(test_ignore_merges) {
    static const char *const D[] = {".:.:", "\304\240belirtilen", ".", ":", "bel", "irtilen", "\xc4\xa0", ".:", "belirtilen",
                                    ".:.", "be", "l", "ir", "ti", "en", "irtil", "irti", "i", "r", "t", "b", "e", "n"};
    static const Pair DM[] = {{".", ":"}, {"b", "e"}, {"be", "l"}, {"i", "r"}, {"t", "i"}, {"ir", "ti"}, {"e", "n"}, {"irti", "l"}};
    BpeModel *m = build(D, 23, DM, 8, (BpeOptions){.ignore_merges = 1});
    expect(m, ".:.:", IDS(0));
    expect(m, "\304\240belirtilen", IDS(1));
    expect(m, "belirtilen", IDS(8));
    bpe_free(m);
    m = build(D, 23, DM, 8, (BpeOptions){0});
    expect(m, ".:.:", IDS(7, 7));
    expect(m, "\304\240belirtilen", IDS(6, 4, 15, 14));
    bpe_free(m);
}
END_TEST

START_TEST(test_order) {
    static const char *const F[] = {"a", "aa"};
    static const Pair FM[] = {{"a", "a"}};
    BpeModel *m = build(F, 2, FM, 1, (BpeOptions){0});
    expect(m, "aaa", IDS(1, 0)); /* equal ranks: leftmost first */
    expect(m, "aaaa", IDS(1, 1));
    expect(m, "aaaaa", IDS(1, 1, 0));
    bpe_free(m);
    static const char *const G[] = {"a", "b", "c", "ab", "bc"};
    static const Pair GM[] = {{"a", "b"}, {"b", "c"}, {"a", "b"}};
    m = build(G, 5, GM, 2, (BpeOptions){0});
    expect(m, "abc", IDS(3, 2));
    bpe_free(m);
    m = build(G, 5, GM, 3, (BpeOptions){0}); /* a pair listed again takes its later rank */
    expect(m, "abc", IDS(0, 4));
    bpe_free(m);
}
END_TEST

/* Byte-level: the word is bytes; the vocabulary spells them with GPT-2's
 * characters (' ' is U+0120, 0xC3 0xA9 are U+00C3 U+00A9). */
START_TEST(test_byte_level) {
    static const char *const E[] = {"\xc4\xa0", "h", "\xc3\x83", "\xc2\xa9", "\xc4\xa0h", "\xc3\x83\xc2\xa9",
                                    "\xc4\xa0h\xc3\x83\xc2\xa9", "<0x00>"};
    static const Pair EM[] = {{"\xc3\x83", "\xc2\xa9"}, {"\xc4\xa0", "h"}, {"\xc4\xa0h", "\xc3\x83\xc2\xa9"}};
    BpeModel *m = build(E, 8, EM, 3, (BpeOptions){.byte_level = 1, .byte_fallback = 1});
    expect(m, " h\xc3\xa9", IDS(6));
    expect(m, "h h", IDS(1, 4));         /* the ' ' before h: U+0120 then the merge */
    expect(m, "\xc3\xa9h", IDS(5, 1));
    /* Byte 0x01 is U+0101, missing: its UTF-8 (C4 81) has no <0xC4>, dropped. */
    expect(m, "h\x01" "h", IDS(1, 1));
    bpe_free(m);
    m = build(E, 8, EM, 3, (BpeOptions){.byte_level = 1, .ignore_merges = 1});
    expect(m, " h\xc3\xa9", IDS(6));
    bpe_free(m);
}
END_TEST

START_TEST(test_bad_models) {
    static const char *const V[] = {"a", "b", "ab"};
    BpeToken v[3];
    for (int i = 0; i < 3; i++) v[i] = (BpeToken){V[i], (uint32_t)strlen(V[i]), (uint32_t)i};
    BpeMerge m1 = {"a", "c", 1, 1}, m2 = {"b", "a", 1, 1};
    BpeModel *b = (BpeModel *)1;
    char err[256];
    BpeOptions o = {0};
    ck_assert_int_eq(bpe_create(&b, &o, v, 3, &m1, 1, err, sizeof err), -1);
    ck_assert_ptr_null(b);
    ck_assert_str_eq(err, "merge 0 ('a' 'c'): 'c' is not in the vocabulary");
    ck_assert_int_eq(bpe_create(&b, &o, v, 3, &m2, 1, err, sizeof err), -1);
    ck_assert_str_eq(err, "merge 0 ('b' 'a'): the merged token 'ba' is not in the vocabulary");
    v[2].id = BPE_MAX_ID;
    ck_assert_int_eq(bpe_create(&b, &o, v, 3, NULL, 0, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "token id 16777216 of 'ab' is too large"));
    /* Sparse ids: the limit is one past the largest. */
    v[2].id = 1000;
    ck_assert_int_eq(bpe_create(&b, &o, v, 3, NULL, 0, err, sizeof err), 0);
    ck_assert_uint_eq(bpe_id_limit(b), 1001);
    size_t n;
    ck_assert_ptr_null(bpe_token_text(b, 500, &n));
    bpe_free(b);
}
END_TEST

/* A long word (no cache) and many distinct words (the cache fills and
 * starts over) give the same ids as short known words. */
START_TEST(test_long_and_many) {
    BpeModel *m = build(A, 16, AM, 8, (BpeOptions){0});
    size_t reps = 2000;
    char *w = malloc(9 * reps + 1);
    for (size_t i = 0; i < reps; i++) memcpy(w + 9 * i, "unrelated", 9);
    BpeIds ids = {0};
    char err[256];
    ck_assert_int_eq(bpe_encode(m, w, 9 * reps, &ids, err, sizeof err), 0);
    ck_assert_uint_eq(ids.n, reps);
    for (size_t i = 0; i < reps; i++) ck_assert_uint_eq(ids.v[i], 15);
    ids.n = 0;
    char word[32];
    for (int i = 0; i < 300000; i++) { /* more distinct words than the cache holds */
        int l = snprintf(word, sizeof word, "un%dre", i);
        ck_assert_int_eq(bpe_encode(m, word, (size_t)l, &ids, err, sizeof err), 0);
    }
    ck_assert_uint_eq(ids.n, 600000); /* "un" + "re", digits dropped */
    ck_assert_uint_eq(ids.v[0], 11);
    ck_assert_uint_eq(ids.v[599999], 8);
    bpe_ids_free(&ids);
    free(w);
    bpe_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("bpe");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_merges);
    tcase_add_test(tc, test_unk);
    tcase_add_test(tc, test_byte_fallback);
    tcase_add_test(tc, test_ignore_merges);
    tcase_add_test(tc, test_order);
    tcase_add_test(tc, test_byte_level);
    tcase_add_test(tc, test_bad_models);
    tcase_add_test(tc, test_long_and_many);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
