/* fuzz_hftok: a tokenizer.json's text through the loader zinfrun and the
 * data tools use (runtime/tok/hftok.c): hftok_from_json, and for a tokenizer it
 * accepts its notes and description, the post-processor's tokens, every id
 * below the vocabulary size (at most FUZZ_MAX_IDS) looked up as text and
 * that text's id, then a few fixed strings (ASCII, white space runs, digits,
 * multi-byte UTF-8, the added-token forms) encoded and the ids decoded
 * with and without the special tokens. An encoder error is a value, and so
 * is a decoder error when the tokenizer's decoder is one hftok refuses
 * only when decoding (encoding does not need it: zinftok must still encode
 * with such a tokenizer); a crash, a sanitizer report, or a decode error
 * from a tokenizer whose decoder is supported (abort) is a finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"
#include "hftok.h"

enum { FUZZ_MAX_IDS = 4096 };

static const char *const texts[] = {
    "",
    "hello world",
    "Hello, World! It's 12345 o'clock.\n\n  tabs\tand   spaces  ",
    "\xe2\x96\x81x \xe2\x82\xac \xf0\x9f\x98\x80 \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87",
    "<|endoftext|><s></s>[MASK] <unk> <sw>x<|begin_of_text|>",
    "a",
    " ",
    "\n",
};

static void finding(const char *what) {
    fprintf(stderr, "fuzz_hftok: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    HfTok *t = NULL;
    char err[512] = "";
    if (hftok_from_json(&t, "tokenizer.json", (const char *)data, size, err, sizeof err) != 0) {
        fprintf(fuzz_sink(), "hftok: %s\n", err);
        return 0;
    }
    FILE *out = fuzz_sink();
    fprintf(out, "hftok: %s\n%s", hftok_describe(t), hftok_notes(t));
    size_t np, ns;
    const uint32_t *pre = hftok_prefix(t, &np), *suf = hftok_suffix(t, &ns);
    uint32_t v = hftok_vocab_size(t);
    for (size_t i = 0; i < np; i++)
        if (pre[i] >= v) finding("a prefix token past the vocabulary");
    for (size_t i = 0; i < ns; i++)
        if (suf[i] >= v) finding("a suffix token past the vocabulary");
    for (uint32_t id = 0; id < v && id < FUZZ_MAX_IDS; id++) {
        size_t n;
        const char *s = hftok_token_text(t, id, &n);
        if (s) {
            int64_t back = hftok_token_id(t, s, n);
            fprintf(out, "%u %d %d %lld\n", id, hftok_is_added(t, id), hftok_is_special(t, id), (long long)back);
        }
    }
    size_t past;
    if (hftok_token_text(t, v, &past)) finding("a token past the vocabulary");
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        BpeIds ids = {0};
        if (hftok_encode(t, texts[k], strlen(texts[k]), &ids, err, sizeof err) == 0) {
            for (size_t i = 0; i < ids.n; i++)
                if (ids.v[i] >= v) finding("an encoded id past the vocabulary");
            for (int skip = 0; skip <= 1; skip++) {
                char *dec = NULL;
                size_t decn = 0;
                if (hftok_decode(t, ids.v, ids.n, skip, &dec, &decn, err, sizeof err) != 0) {
                    if (!strstr(err, "is not supported")) finding(err);
                    fprintf(out, "decode: %s\n", err);
                }
                fprintf(out, "%zu ids -> %zu bytes\n", ids.n, decn);
                free(dec);
            }
        } else {
            fprintf(out, "encode: %s\n", err);
        }
        bpe_ids_free(&ids);
    }
    hftok_free(t);
    return 0;
}
