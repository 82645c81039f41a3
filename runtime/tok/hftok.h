/* hftok: a Hugging Face tokenizer.json, loaded and run.
 * Owns: reading the file's configuration (through json.h) into a
 * pipeline, refusing what it does not support with a message naming it,
 * and running that pipeline the way the tokenizers library does:
 *   1. added tokens that are not `normalized` are found in the raw text
 *      (leftmost-longest, honouring single_word, lstrip, rstrip);
 *   2. each other piece is normalized (Prepend, Replace with a string,
 *      or a Sequence of those), and `normalized` added tokens are found in
 *      the result;
 *   3. each remaining piece is pre-tokenized: ByteLevel (with GPT-2's
 *      regex when use_regex, add_prefix_space), Split with a known regex
 *      (pretok.h) in a Sequence before ByteLevel, or Metaspace;
 *   4. each word goes through the BPE model (bpe.h).
 * The post-processor (TemplateProcessing, Bert/RobertaProcessing, or a
 * Sequence holding one) gives the tokens put before and after one
 * sequence; decoding runs the decoder chain (ByteLevel, Replace,
 * ByteFallback, Fuse, Strip, Metaspace, Sequence). Added-token ids are
 * assigned as the library assigns them (a token in the model vocabulary
 * has its id there, another the next free id after the model's), with a
 * note when the file says otherwise. Truncation and padding settings are
 * ignored. Not thread-safe. */
#ifndef ZINF_HFTOK_H
#define ZINF_HFTOK_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"

typedef struct HfTok HfTok;

/* Reads and checks path. Returns 0 with *out (free with hftok_free), or
 * -1 with "PATH: what is wrong" in err. */
int hftok_load(HfTok **out, const char *path, char *err, size_t errlen);
/* The same from JSON text; `name` prefixes messages. */
int hftok_from_json(HfTok **out, const char *name, const char *json, size_t n, char *err, size_t errlen);
void hftok_free(HfTok *t);

/* Notes from loading (one per line, "" when none): e.g. an added token
 * whose id in the file differs from the one it gets. */
const char *hftok_notes(const HfTok *t);
/* One line: "byte-level BPE, Llama-3 pre-tokenizer, 70002 ids". */
const char *hftok_describe(const HfTok *t);

/* Appends the ids of text[0..n) (valid UTF-8), without the
 * post-processor's tokens. Returns 0, or -1 with err. */
int hftok_encode(HfTok *t, const char *text, size_t n, BpeIds *out, char *err, size_t errlen);

/* The post-processor's tokens before and after one sequence. */
const uint32_t *hftok_prefix(const HfTok *t, size_t *n);
const uint32_t *hftok_suffix(const HfTok *t, size_t *n);

/* One more than the largest id (the size a model's embedding needs). */
uint32_t hftok_vocab_size(const HfTok *t);
/* A fingerprint of the vocabulary (every id's text), never 0: two
 * tokenizers that give an id different texts differ, however their
 * tokenizer.json files are formatted. Recorded in token files. */
uint64_t hftok_fingerprint(const HfTok *t);
/* The id of a token's text (added tokens first, then the model), or -1. */
int64_t hftok_token_id(const HfTok *t, const char *s, size_t n);
/* The text of id, or NULL (n: its length): an added token's content
 * (normalized when the token is `normalized`, as the library shows it),
 * else the model's token. */
const char *hftok_token_text(const HfTok *t, uint32_t id, size_t *n);
/* Whether id is an added token (special: a special one). */
int hftok_is_added(const HfTok *t, uint32_t id);
int hftok_is_special(const HfTok *t, uint32_t id);

/* Decodes ids[0..n) as the library's decode(ids, skip_special_tokens)
 * does, into a malloc'd string (*out, *outn; NUL-terminated; the caller
 * frees it). An id with no token is an error. Returns 0 or -1 with err. */
int hftok_decode(HfTok *t, const uint32_t *ids, size_t n, int skip_special, char **out, size_t *outn, char *err,
                 size_t errlen);

#endif
