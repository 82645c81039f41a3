/* bpe: the BPE model of Hugging Face tokenizers, on one pre-tokenized
 * word at a time.
 * Owns: the vocabulary (token string <-> id), the merge table (pair of
 * ids -> rank and merged id), the merge algorithm — the tokenizers
 * library's own: a priority queue of candidate merges ordered by rank then
 * position, an entry dropped when the pair at its position no longer
 * makes its token — the unknown-character rules (byte_fallback to <0xXX>
 * tokens, unk_token, fuse_unk), ignore_merges, and a cache of encoded
 * words. In byte-level mode a word is raw bytes and each byte stands for
 * its GPT-2 byte-level character (unicode.h). A model is not thread-safe
 * (the cache and scratch buffers are its own). */
#ifndef ZINF_BPE_H
#define ZINF_BPE_H

#include <stddef.h>
#include <stdint.h>

/* A growable array of token ids, owned by whoever holds it. */
typedef struct {
    uint32_t *v;
    size_t n, cap;
} BpeIds;
int bpe_ids_push(BpeIds *ids, uint32_t id); /* 0, or -1 when out of memory */
void bpe_ids_free(BpeIds *ids);

typedef struct {
    const char *s; /* token text, n bytes (not necessarily NUL-terminated) */
    uint32_t n;
    uint32_t id;
} BpeToken;

typedef struct {
    const char *a, *b;
    uint32_t an, bn;
} BpeMerge;

typedef struct {
    const char *unk_token; /* NULL: unknown characters are dropped */
    int fuse_unk;          /* consecutive unknown characters give one unk */
    int byte_fallback;     /* unknown characters as <0xXX> tokens of their UTF-8 bytes */
    int ignore_merges;     /* a word that is a token is that token */
    int byte_level;        /* words are bytes, each standing for its byte-level character */
} BpeOptions;

typedef struct BpeModel BpeModel;

/* Builds a model. Ids must be below BPE_MAX_ID. A merge whose parts or
 * result are not tokens is an error (as in the tokenizers library); a
 * pair listed twice takes the later rank. Returns 0 with *out (free with
 * bpe_free), or -1 with the message in err. */
enum { BPE_MAX_ID = 1 << 24 };
int bpe_create(BpeModel **out, const BpeOptions *o, const BpeToken *vocab, size_t nvocab, const BpeMerge *merges,
               size_t nmerges, char *err, size_t errlen);
void bpe_free(BpeModel *m);

/* Appends the ids of word[0..n) (valid UTF-8 unless byte-level) to out.
 * Returns 0, or -1 with err (out of memory; unk_token needed but not in
 * the vocabulary). */
int bpe_encode(BpeModel *m, const char *word, size_t n, BpeIds *out, char *err, size_t errlen);

/* The id of token text s[0..n), or -1. */
int64_t bpe_token_id(const BpeModel *m, const char *s, size_t n);
/* The text of id (its length in *n), or NULL when no token has it. */
const char *bpe_token_text(const BpeModel *m, uint32_t id, size_t *n);
/* Number of vocabulary entries (the tokenizers library's vocab size). */
size_t bpe_vocab_entries(const BpeModel *m);
/* One more than the largest id. */
uint32_t bpe_id_limit(const BpeModel *m);
/* Words encoded, and of those answered by the cache. */
void bpe_cache_stats(const BpeModel *m, uint64_t *words, uint64_t *hits);

#endif
