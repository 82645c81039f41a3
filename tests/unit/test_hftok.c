/* hftok: tiny tokenizer.json files of the four supported styles (GPT-2
 * byte-level with added tokens and their flags, LLaMA-2 Prepend/Replace
 * byte fallback with a normalized added token, Llama-3 Split+ByteLevel
 * with ignore_merges and a Sequence post-processor, Metaspace "first",
 * a LLaMA-2 vocabulary whose merges cross word marks)
 * against the ids and decodings the tokenizers library (0.23) gives for
 * them; the post-processor's tokens; every unsupported or malformed
 * configuration refused with a message naming it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hftok.h"

#define IDS(...) ((const int[]){__VA_ARGS__, -1})

/* Generated with the tokenizers library; each is a complete tokenizer.json. */
static const char T1[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":33,\"content\":\"<|endoftext|>\""
    ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":34,\"cont"
    "ent\":\"[MASK]\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false,\"special\":true},{\"i"
    "d\":35,\"content\":\"<sw>\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\""
    ":false}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offset"
    "s\":true,\"use_regex\":true},\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":"
    "\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<|endoftext|>\",\"type_id\":0}}],\"pair\":[{\"Sequence\":{\"id\":\"A\""
    ",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<|endoftext|>\",\"type_id\":0}}],\"special_tokens\":{\"<|endoftext|>"
    "\":{\"id\":\"<|endoftext|>\",\"ids\":[33],\"tokens\":[\"<|endoftext|>\"]}}},\"decoder\":{\"type\":\"ByteLevel\",\"add_"
    "prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_t"
    "oken\":null,\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallbac"
    "k\":false,\"ignore_merges\":false,\"vocab\":{\"\304\240\":0,\"h\":1,\"e\":2,\"l\":3,\"o\":4,\"w\":5,\"r\":6,\"d\":7,\"'\":8,\"s\":9,"
    "\"\304\212\":10,\"1\":11,\"2\":12,\"x\":13,\"y\":14,\"<\":15,\">\":16,\"[\":17,\"]\":18,\"he\":19,\"ll\":20,\"hell\":21,\"hello\":22,"
    "\"\304\240w\":23,\"\304\240wo\":24,\"\304\240wor\":25,\"\304\240worl\":26,\"\304\240world\":27,\"'s\":28,\"\304\212\304\212\":29,\"12\":30,\"\304\240h\":31,\"\304\240he\":32},\"merges\""
    ":[\"h e\",\"l l\",\"he ll\",\"hell o\",\"\304\240 w\",\"\304\240w o\",\"\304\240wo r\",\"\304\240wor l\",\"\304\240worl d\",\"' s\",\"\304\212 \304\212\",\"1 2\",\"\304\240 h\",\"\304\240h e"
    "\"]}}"
    ;
static const char T2[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"single_"
    "word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":1,\"content\":\"<s>\""
    ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":2,\"conte"
    "nt\":\"</s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id"
    "\":26,\"content\":\"world\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,\"special\""
    ":false}],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\342\226\201\"},{\"type\":\"Re"
    "place\",\"pattern\":{\"String\":\" \"},\"content\":\"\342\226\201\"}]},\"pre_tokenizer\":null,\"post_processor\":{\"type\":\"Temp"
    "lateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":"
    "0}}],\"pair\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special"
    "_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{"
    "\"type\":\"Replace\",\"pattern\":{\"String\":\"\342\226\201\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"t"
    "ype\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<"
    "unk>\",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,\"byte_fallback\":tru"
    "e,\"ignore_merges\":false,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x0A>\":3,\"<0xE2>\":4,\"<0x82>\":5,\"<0xAC>"
    "\":6,\"\342\226\201\":7,\"h\":8,\"e\":9,\"l\":10,\"o\":11,\"w\":12,\"r\":13,\"d\":14,\"\342\226\201h\":15,\"\342\226\201he\":16,\"ll\":17,\"\342\226\201hell\":18,\"\342\226\201hello"
    "\":19,\"\342\226\201w\":20,\"or\":21,\"\342\226\201wor\":22,\"\342\226\201worl\":23,\"\342\226\201world\":24,\"\342\226\201\342\226\201\":25},\"merges\":[[\"\342\226\201\",\"h\"],[\"\342\226\201h\",\"e\"],[\"l\",\""
    "l\"],[\"\342\226\201he\",\"ll\"],[\"\342\226\201hell\",\"o\"],[\"\342\226\201\",\"w\"],[\"o\",\"r\"],[\"\342\226\201w\",\"or\"],[\"\342\226\201wor\",\"l\"],[\"\342\226\201worl\",\"d\"],[\"\342\226\201\",\"\342\226\201\"]]"
    "}}"
    ;
static const char T3[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":18,\"content\":\"<|begin_of_tex"
    "t|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normaliz"
    "er\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i"
    ":'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\"
    "\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefi"
    "x_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},\"post_processor\":{\"type\":\"Sequence\",\"process"
    "ors\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true},{\"type\":\"Te"
    "mplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},{\"Sequence\":{\"id"
    "\":\"A\",\"type_id\":0}}],\"pair\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},{\"Sequence\":{\"i"
    "d\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<|begin_of_text|>\":{\"id\":\"<|begin_of_text|>\",\"ids\":[18],\"to"
    "kens\":[\"<|begin_of_text|>\"]}}}]},\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets"
    "\":true,\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_p"
    "refix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":true,\"v"
    "ocab\":{\"\304\240\":0,\"a\":1,\"b\":2,\"'\":3,\"S\":4,\"s\":5,\"1\":6,\"2\":7,\"3\":8,\"4\":9,\"\304\212\":10,\"\304\240\304\240\":11,\"ab\":12,\"\304\240ab\":13,\""
    "'S\":14,\"123\":15,\"abab\":16,\"12\":17},\"merges\":[\"a b\",\"\304\240 ab\",\"' S\",\"1 2\",\"12 3\",\"\304\240 \304\240\"]}}"
    ;
static const char T4[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"single_"
    "word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":1,\"content\":\"<s>\""
    ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":2,\"conte"
    "nt\":\"</s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"no"
    "rmalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\342\226\201\",\"prepend_scheme\":\"first\",\"split"
    "\":true},\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id"
    "\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Seque"
    "nce\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},\"dec"
    "oder\":{\"type\":\"Metaspace\",\"replacement\":\"\342\226\201\",\"prepend_scheme\":\"first\",\"split\":true},\"model\":{\"type\":\""
    "BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\""
    "fuse_unk\":true,\"byte_fallback\":true,\"ignore_merges\":false,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x0A"
    ">\":3,\"<0xE2>\":4,\"<0x82>\":5,\"<0xAC>\":6,\"\342\226\201\":7,\"h\":8,\"e\":9,\"l\":10,\"o\":11,\"w\":12,\"r\":13,\"d\":14,\"\342\226\201h\":15,\""
    "\342\226\201he\":16,\"ll\":17,\"\342\226\201hell\":18,\"\342\226\201hello\":19,\"\342\226\201w\":20,\"or\":21,\"\342\226\201wor\":22,\"\342\226\201worl\":23,\"\342\226\201world\":24,\"\342\226\201\342\226\201\":25},\"me"
    "rges\":[[\"\342\226\201\",\"h\"],[\"\342\226\201h\",\"e\"],[\"l\",\"l\"],[\"\342\226\201he\",\"ll\"],[\"\342\226\201hell\",\"o\"],[\"\342\226\201\",\"w\"],[\"o\",\"r\"],[\"\342\226\201w\",\"or\"],[\"\342\226\201"
    "wor\",\"l\"],[\"\342\226\201worl\",\"d\"],[\"\342\226\201\",\"\342\226\201\"]]}}"
    ;
/* T2 with a merge that joins a character to a following '\342\226\201' ("o\342\226\201"): words must
 * not be cut before marks. */
static const char T5[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"single_"
    "word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":1,\"content\":\"<s>\""
    ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":2,\"conte"
    "nt\":\"</s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"no"
    "rmalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\342\226\201\"},{\"type\":\"Replace\",\"patt"
    "ern\":{\"String\":\" \"},\"content\":\"\342\226\201\"}]},\"pre_tokenizer\":null,\"post_processor\":{\"type\":\"TemplateProcessi"
    "ng\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":"
    "[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<"
    "s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Repl"
    "ace\",\"pattern\":{\"String\":\"\342\226\201\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\""
    ",\"content\":\" \",\"start\":1,\"stop\":0}]},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"conti"
    "nuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,\"byte_fallback\":true,\"ignore_me"
    "rges\":false,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x0A>\":3,\"<0xE2>\":4,\"<0x82>\":5,\"<0xAC>\":6,\"\342\226\201\":7,\"h"
    "\":8,\"e\":9,\"l\":10,\"o\":11,\"w\":12,\"r\":13,\"d\":14,\"\342\226\201h\":15,\"\342\226\201he\":16,\"ll\":17,\"\342\226\201hell\":18,\"\342\226\201hello\":19,\"\342\226\201w\":20"
    ",\"or\":21,\"\342\226\201wor\":22,\"\342\226\201worl\":23,\"\342\226\201world\":24,\"\342\226\201\342\226\201\":25,\"o\342\226\201\":26},\"merges\":[[\"o\",\"\342\226\201\"],[\"\342\226\201\",\"h\"],[\"\342\226\201h\",\"e\"],"
    "[\"l\",\"l\"],[\"\342\226\201he\",\"ll\"],[\"\342\226\201hell\",\"o\"],[\"\342\226\201\",\"w\"],[\"o\",\"r\"],[\"\342\226\201w\",\"or\"],[\"\342\226\201wor\",\"l\"],[\"\342\226\201worl\",\"d\"],[\"\342\226\201\""
    ",\"\342\226\201\"]]}}"
    ;

typedef struct {
    const char *json, *text;
    const int *ids;              /* encode(text, add_special_tokens=False), -1 ended */
    const char *decoded, *plain; /* decode(encode(text).ids) keeping / skipping special tokens */
} Case;

static const Case CASES[] = {
    /* T1 */ {T1, "hello world's", IDS(22, 27, 28), "hello world's<|endoftext|>", "hello world's"},
    /* T1 */ {T1, "hello<|endoftext|>world", IDS(22, 33, 5, 4, 6, 3, 7), "hello<|endoftext|>world<|endoftext|>", "helloworld"},
    /* T1 */ {T1, "hello [MASK] world", IDS(22, 34, 5, 4, 6, 3, 7), "hello[MASK]world<|endoftext|>", "helloworld"},
    /* T1 */ {T1, "x<sw>y <sw> hello", IDS(13, 15, 9, 5, 16, 14, 0, 35, 0, 22), "x<sw>y <sw> hello<|endoftext|>", "x<sw>y <sw> hello"},
    /* T1 */ {T1, "hello\012\012\012world", IDS(22, 29, 10, 5, 4, 6, 3, 7), "hello\012\012\012world<|endoftext|>", "hello\012\012\012world"},
    /* T1 */ {T1, "1212", IDS(30, 30), "1212<|endoftext|>", "1212"},
    /* T1 */ {T1, "", IDS(-1), "<|endoftext|>", ""},
    /* T1 */ {T1, " hello", IDS(0, 22), " hello<|endoftext|>", " hello"},
    /* T1: template [33], vocabulary 36 */
    /* T2 */ {T2, "hello world", IDS(19, 26), "<s> hello world", "hello world"},
    /* T2 */ {T2, " hello", IDS(7, 19), "<s>  hello", " hello"},
    /* T2 */ {T2, "\342\202\254", IDS(7, 4, 5, 6), "<s> \342\202\254", "\342\202\254"},
    /* T2 */ {T2, "hello<s>world", IDS(19, 1, 26), "<s> hello<s> world", "hello world"},
    /* T2 */ {T2, "", IDS(-1), "<s>", ""},
    /* T2 */ {T2, "hi", IDS(15, 0), "<s> h<unk>", "h"},
    /* T2 */ {T2, "hello  world", IDS(19, 7, 26), "<s> hello  world", "hello  world"},
    /* T2 */ {T2, "say world", IDS(7, 0, 26), "<s> <unk> world", " world"},
    /* T2: template [1], vocabulary 27 */
    /* T3 */ {T3, "ab 'S'ab 12345 abab", IDS(12, 0, 3, 4, 3, 12, 0, 15, 9, 13, 12), "<|begin_of_text|>ab 'S'ab 1234 abab", "ab 'S'ab 1234 abab"},
    /* T3 */ {T3, "  ab\012", IDS(0, 13, 10), "<|begin_of_text|>  ab\012", "  ab\012"},
    /* T3 */ {T3, "<|begin_of_text|>ab", IDS(18, 12), "<|begin_of_text|><|begin_of_text|>ab", "ab"},
    /* T3: template [18], vocabulary 19 */
    /* T4 */ {T4, "hello world", IDS(19, 24), "<s> hello world", "hello world"},
    /* T4 */ {T4, " hello", IDS(19), "<s> hello", "hello"},
    /* T4 */ {T4, "\342\202\254x", IDS(7, 4, 5, 6, 0), "<s> <0xE2><0x82><0xAC><unk>", "<0xE2><0x82><0xAC>"},
    /* T4 */ {T4, "hello<s> world", IDS(19, 1, 24), "<s> hello<s> world", "hello world"},
    /* T4: template [1], vocabulary 26 */
    /* T5 */ {T5, "hello world", IDS(18, 26, 12, 21, 10, 14), "<s> hello world", "hello world"},
    /* T5 */ {T5, "hello  hello", IDS(18, 26, 19), "<s> hello  hello", "hello  hello"},
};

static HfTok *load(const char *json) {
    HfTok *t = NULL;
    char err[512];
    ck_assert_msg(hftok_from_json(&t, "tiny.json", json, strlen(json), err, sizeof err) == 0, "%s", err);
    return t;
}

START_TEST(test_cases) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *c = &CASES[i];
        HfTok *t = load(c->json);
        ck_assert_str_eq(hftok_notes(t), "");
        BpeIds ids = {0};
        char err[512];
        ck_assert_msg(hftok_encode(t, c->text, strlen(c->text), &ids, err, sizeof err) == 0, "%s", err);
        size_t n = 0;
        while (c->ids[n] >= 0) n++;
        char got[512] = "";
        for (size_t k = 0; k < ids.n; k++) snprintf(got + strlen(got), sizeof got - strlen(got), " %u", ids.v[k]);
        ck_assert_msg(ids.n == n, "case %zu '%s': got%s", i, c->text, got);
        for (size_t k = 0; k < n; k++) ck_assert_msg(ids.v[k] == (uint32_t)c->ids[k], "case %zu '%s': got%s", i, c->text, got);
        /* Framed by the post-processor, then decoded. */
        size_t np, ns;
        const uint32_t *pre = hftok_prefix(t, &np), *suf = hftok_suffix(t, &ns);
        BpeIds full = {0};
        for (size_t k = 0; k < np; k++) bpe_ids_push(&full, pre[k]);
        for (size_t k = 0; k < ids.n; k++) bpe_ids_push(&full, ids.v[k]);
        for (size_t k = 0; k < ns; k++) bpe_ids_push(&full, suf[k]);
        for (int skip = 0; skip < 2; skip++) {
            char *s;
            size_t sn;
            ck_assert_msg(hftok_decode(t, full.v, full.n, skip, &s, &sn, err, sizeof err) == 0, "%s", err);
            const char *want = skip ? c->plain : c->decoded;
            ck_assert_msg(sn == strlen(want) && !memcmp(s, want, sn), "case %zu decode(skip=%d): '%s', want '%s'", i, skip, s, want);
            free(s);
        }
        bpe_ids_free(&full);
        bpe_ids_free(&ids);
        hftok_free(t);
    }
}
END_TEST

START_TEST(test_vocabulary) {
    HfTok *t = load(T1);
    ck_assert_uint_eq(hftok_vocab_size(t), 36);
    size_t n;
    const uint32_t *p = hftok_suffix(t, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(p[0], 33);
    hftok_prefix(t, &n);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(hftok_token_id(t, "<|endoftext|>", 13), 33);
    ck_assert_int_eq(hftok_token_id(t, "hello", 5), 22);
    ck_assert_int_eq(hftok_token_id(t, "nope", 4), -1);
    ck_assert(hftok_is_special(t, 33) && hftok_is_special(t, 34) && !hftok_is_special(t, 35));
    ck_assert(hftok_is_added(t, 35) && !hftok_is_added(t, 22) && !hftok_is_added(t, 1000));
    const char *s = hftok_token_text(t, 34, &n);
    ck_assert(n == 6 && !memcmp(s, "[MASK]", 6));
    ck_assert_ptr_null(hftok_token_text(t, 36, &n));
    ck_assert_ptr_nonnull(strstr(hftok_describe(t), "byte-level BPE, GPT-2 pre-tokenizer"));
    /* An id out of range, and one with no token, are errors when decoding. */
    uint32_t bad[2] = {22, 36};
    char *out, err[512];
    size_t on;
    ck_assert_int_eq(hftok_decode(t, bad, 2, 0, &out, &on, err, sizeof err), -1);
    ck_assert_str_eq(err, "token 36 at position 1 is not below the vocabulary size 36");
    hftok_free(t);
    t = load(T3);
    ck_assert_ptr_nonnull(strstr(hftok_describe(t), "Llama-3 pre-tokenizer"));
    p = hftok_prefix(t, &n);
    ck_assert(n == 1 && p[0] == 18);
    hftok_free(t);
    t = load(T2);
    ck_assert_ptr_nonnull(strstr(hftok_describe(t), "byte-fallback BPE, no pre-tokenizer"));
    ck_assert(hftok_is_special(t, 1) && !hftok_is_special(t, 26) && hftok_is_added(t, 26));
    hftok_free(t);
}
END_TEST

/* The fingerprint follows the vocabulary, not the file: the same
 * tokenizer with other white space has the same one; tokenizers of
 * other vocabularies differ; never 0 (the token file's "not recorded"). */
START_TEST(test_fingerprint) {
    HfTok *a = load(T1), *b = load(T4);
    uint64_t fa = hftok_fingerprint(a);
    ck_assert(fa != 0);
    ck_assert(fa != hftok_fingerprint(b));
    size_t n = strlen(T1);
    char *spaced = malloc(n + 2);
    spaced[0] = ' ';
    memcpy(spaced + 1, T1, n + 1);
    HfTok *c = load(spaced);
    ck_assert(hftok_fingerprint(c) == fa);
    hftok_free(a);
    hftok_free(b);
    hftok_free(c);
    free(spaced);
}
END_TEST

/* Replaces the first `from` in json by `to` (the result is static). */
static const char *edit(const char *json, const char *from, const char *to) {
    static char buf[16384];
    const char *at = strstr(json, from);
    ck_assert_msg(at != NULL, "fixture lacks %s", from);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
    return buf;
}

static void refused(const char *json, const char *want) {
    HfTok *t = (HfTok *)1;
    char err[1024];
    ck_assert_int_eq(hftok_from_json(&t, "tok.json", json, strlen(json), err, sizeof err), -1);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err, want) != NULL, "got '%s', want '%s'", err, want);
    ck_assert_msg(!strncmp(err, "tok.json: ", 10), "no file name in '%s'", err);
}

START_TEST(test_refused) {
    refused("{\"model\": ", "tok.json: malformed JSON: line 1, column 11: unexpected end of the text");
    refused("{\"model\": {\"vocab\": {\"a\": 1", "tok.json: malformed JSON: line 1, column 28: unexpected end of the text in an object");
    refused("{\"model\": tru}", "tok.json: malformed JSON: line 1, column 11: invalid literal (expected 'true')");
    refused("[1]", "not a tokenizer: the JSON is an array, not an object");
    refused("{}", "not a tokenizer: no 'model'");
    refused(edit(T1, "\"version\":\"1.0\"", "\"version\":\"2.0\""), "unknown tokenizer.json version \"2.0\"");
    /* a repeated key: the last member counts, as in the library (serde_json) */
    refused(edit(T1, "\"version\":\"1.0\"", "\"version\":\"1.0\",\"version\":\"2.0\""), "unknown tokenizer.json version \"2.0\"");
    refused(edit(T1, "\"type\":\"BPE\"", "\"type\":\"Unigram\""), "model type 'Unigram' is not supported (only BPE)");
    refused(edit(T1, "\"type\":\"BPE\"", "\"type\":\"WordPiece\""), "model type 'WordPiece' is not supported (only BPE)");
    refused(edit(T1, "\"dropout\":null", "\"dropout\":0.1"), "dropout is not supported");
    refused(edit(T1, "\"continuing_subword_prefix\":null", "\"continuing_subword_prefix\":\"##\""),
            "continuing_subword_prefix is not supported");
    refused(edit(T1, "\"l l\"", "\"l q\""), "model BPE: merge 1 ('l' 'q'): 'q' is not in the vocabulary");
    refused(edit(T1, "\"l l\"", "\"l  l\""), "model BPE: merge 1 \"l  l\" is not two tokens separated by one space");
    refused(edit(T1, "\"h\":1", "\"h\":-1"), "vocab entry \"h\" has a negative or too large id");
    refused(edit(T1, "\"h\":1", "\"h\":\"1\""), "vocab entry \"h\" has a string, not an id");
    refused(edit(T1, "\"pre_tokenizer\":{\"type\":\"ByteLevel\"", "\"pre_tokenizer\":{\"type\":\"Whitespace\""),
            "pre_tokenizer 'Whitespace' is not supported");
    refused(edit(T3, "\\\\p{N}{1,3}", "\\\\p{N}{1,4}"),
            "pre_tokenizer Split: the regex \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,4}|");
    refused(edit(T3, "\"behavior\":\"Isolated\"", "\"behavior\":\"Removed\""), "behavior \"Removed\" is not supported");
    refused(edit(T2, "{\"type\":\"Prepend\",\"prepend\":\"\342\226\201\"}", "{\"type\":\"NFKC\"}"),
            "normalizer 'NFKC' is not supported");
    refused(edit(T2, "{\"String\":\" \"}", "{\"Regex\":\" +\"}"),
            "normalizer Replace with the regex pattern \" +\" is not supported (only a string pattern)");
    refused(edit(T1, "\"post_processor\":{\"type\":\"TemplateProcessing\"", "\"post_processor\":{\"type\":\"Fancy\""),
            "post_processor 'Fancy' is not supported");
    refused(edit(T4, "\"prepend_scheme\":\"first\"", "\"prepend_scheme\":\"sometimes\""), "unknown prepend_scheme \"sometimes\"");
    refused(edit(T4, "\"replacement\":\"\342\226\201\"", "\"replacement\":\"ab\""), "'replacement' must be one character, not \"ab\"");
    refused(edit(T1, "\"added_tokens\":[", "\"added_tokens\":[{\"id\":1},"), "added_tokens[0]: 'content' must be a string");
    /* A decoder that is not supported only stops decoding. */
    const char *odd = edit(T1, "\"decoder\":{\"type\":\"ByteLevel\"", "\"decoder\":{\"type\":\"WordPiece\"");
    HfTok *t;
    char err[512];
    ck_assert_int_eq(hftok_from_json(&t, "tok.json", odd, strlen(odd), err, sizeof err), 0);
    BpeIds ids = {0};
    ck_assert_int_eq(hftok_encode(t, "hello", 5, &ids, err, sizeof err), 0);
    char *out;
    size_t on;
    ck_assert_int_eq(hftok_decode(t, ids.v, ids.n, 0, &out, &on, err, sizeof err), -1);
    ck_assert_str_eq(err, "tok.json: decoder 'WordPiece' is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, "
                          "Strip, Metaspace, Sequence)");
    bpe_ids_free(&ids);
    hftok_free(t);
}
END_TEST

/* Added-token ids are the library's, with a note when the file differs;
 * a file that cannot be read says so. */
START_TEST(test_notes_and_files) {
    const char *json = edit(T1, "{\"id\":35,\"content\":\"<sw>\"", "{\"id\":70000,\"content\":\"<sw>\"");
    HfTok *t = load(json);
    ck_assert_str_eq(hftok_notes(t), "added token \"<sw>\" has id 70000 in the file but gets 35, as in the tokenizers library\n");
    ck_assert_int_eq(hftok_token_id(t, "<sw>", 4), 35);
    hftok_free(t);
    t = load(edit(T1, "\"truncation\":null", "\"truncation\":{\"max_length\":512}"));
    ck_assert_ptr_nonnull(strstr(hftok_notes(t), "truncation and padding settings are ignored"));
    hftok_free(t);
    char err[512];
    ck_assert_int_eq(hftok_load(&t, "/nonexistent-zinf/tokenizer.json", err, sizeof err), -1);
    ck_assert_str_eq(err, "/nonexistent-zinf/tokenizer.json: No such file or directory");
}
END_TEST

int main(void) {
    Suite *s = suite_create("hftok");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_cases);
    tcase_add_test(tc, test_vocabulary);
    tcase_add_test(tc, test_fingerprint);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_notes_and_files);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
