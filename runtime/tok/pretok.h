/* pretok: the pre-tokenizer regexes of byte-level BPE tokenizers, as
 * hand-written matchers (no regex engine).
 * Owns: recognising the few patterns tokenizer.json files use (GPT-2's,
 * Llama-3's, Qwen2's) from their text, and matching them with the
 * semantics of the tokenizers library (Oniguruma: leftmost-first
 * alternation with backtracking; \s is White_Space, \p{L} and \p{N} the
 * general categories, (?i) folds only what these contractions need:
 * s S and U+017F, t T, r R, ...). Text is valid UTF-8. */
#ifndef ZINF_PRETOK_H
#define ZINF_PRETOK_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PRETOK_UNKNOWN = 0,
    PRETOK_GPT2,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRETOK_LLAMA3, /* (?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRETOK_QWEN2,  /* the same with \p{N} instead of \p{N}{1,3} */
} PretokPattern;

/* Which pattern the regex text (as tokenizer.json spells it, after JSON
 * unescaping) is; PRETOK_UNKNOWN for any other. */
PretokPattern pretok_pattern(const char *re, size_t n);
const char *pretok_name(PretokPattern p);
/* The regex text of a known pattern. */
const char *pretok_regex(PretokPattern p);

/* Length in bytes of the match of p starting at byte i of s[0..n), 0
 * when none starts there. The text ends at n (for \s+(?!\S)). */
size_t pretok_match(PretokPattern p, const uint8_t *s, size_t n, size_t i);

/* Splits s[0..n) like the tokenizers library's Split(pattern, "isolated"):
 * the matches, and any text between them, in order. Calls
 * piece(ctx, start, len) for each; stops early and returns its non-zero
 * value, else returns 0. */
int pretok_split(PretokPattern p, const uint8_t *s, size_t n, int (*piece)(void *ctx, size_t start, size_t len),
                 void *ctx);

#endif
