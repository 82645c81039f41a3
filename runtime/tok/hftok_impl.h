/* hftok_impl: what hftok's files share; private to runtime/tok/hftok*.c.
 * hftok.c runs the pipeline (normalize, pre-tokenize, the BPE model) and
 * owns HfTok; hftok_load.c builds one from tokenizer.json; hftok_decode.c
 * turns ids back into text; hftok_trie.c finds added tokens, below them all. */
#ifndef ZINF_HFTOK_IMPL_H
#define ZINF_HFTOK_IMPL_H
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hftok.h"
#include "pretok.h"

enum { MAX_STEPS = 8 };
/* Token lengths are 32-bit in the BPE model (bpe.h). */
#define MAX_TOKEN_BYTES 0xFFFFFFFEu

typedef struct {
    char *s;
    size_t n, cap;
} Buf;

static inline int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap * 2 : 256;
    while (nc < b->n + extra + 1) nc *= 2;
    char *ns = realloc(b->s, nc);
    if (!ns) return -1;
    b->s = ns;
    b->cap = nc;
    return 0;
}

static inline int buf_put(Buf *b, const void *p, size_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

static inline int buf_printf(Buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (w < 0) return -1;
    return buf_put(b, tmp, (size_t)w < sizeof tmp ? (size_t)w : sizeof tmp - 1);
}

typedef struct {
    char *content;
    size_t n;
    char *text; /* what the id decodes to: the content, normalized when `normalized` (as the library does) */
    size_t text_n;
    uint32_t id;
    int special, single_word, lstrip, rstrip, normalized;
} Added;

/* A byte trie of added-token patterns; children are a sibling list. */
typedef struct {
    int32_t child, sibling, id; /* id: of the token ending here, -1 */
    uint8_t byte;
} TrieNode;

typedef struct {
    TrieNode *nodes;
    size_t n, cap;
    uint8_t first[256];
    int empty;
} Trie;

enum { NORM_PREPEND = 1, NORM_REPLACE };
typedef struct {
    int kind;
    char *a, *b;
    size_t an, bn;
} NormStep;

enum { PRE_SPLIT = 1, PRE_BYTELEVEL, PRE_METASPACE };
enum { SCHEME_ALWAYS, SCHEME_FIRST, SCHEME_NEVER };
typedef struct {
    int kind;
    PretokPattern pat;
    int prefix_space, use_regex;
    char repl[4];
    size_t repl_n;
    int scheme, split;
} PreStep;

enum { DEC_BYTELEVEL = 1, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE };
typedef struct {
    int kind;
    char *a, *b; /* Replace: pattern, content */
    size_t an, bn;
    char ch[4];  /* Strip: content; Metaspace: replacement */
    size_t ch_n;
    size_t start, stop;
    int scheme;
} DecStep;

typedef struct {
    size_t start, len;
    int64_t id; /* an added token, or -1: text */
} Seg;

typedef struct {
    Seg *v;
    size_t n, cap;
} Segs;

struct HfTok {
    BpeModel *bpe;
    Added *added;
    size_t nadded;
    int32_t *added_at; /* id -> index in added, -1; vocab_size entries */
    uint8_t *special;  /* id -> its text is a special token's */
    Trie raw, norm;
    NormStep nsteps[MAX_STEPS];
    size_t nnorm;
    PreStep pre[MAX_STEPS];
    size_t npre;
    DecStep dec[MAX_STEPS];
    size_t ndec;
    int dec_join_space; /* no decoder: tokens joined by spaces */
    int cut_at_marks;   /* words may be cut before word marks: see hft_marks_cut_safe() */
    int ignore_merges;
    char dec_err[300];
    uint32_t prefix[16], suffix[16];
    size_t nprefix, nsuffix;
    uint32_t vocab_size;
    Buf notes;
    char describe[300];
    Buf scratch[MAX_STEPS + 1];
    Buf normbuf;
    Segs segs_raw, segs_norm;
    char *name;
};



/* hftok_trie.c */
int hft_trie_init(Trie *tr);
int hft_trie_add(Trie *tr, const char *p, size_t n, uint32_t id);
int hft_find_added(const HfTok *t, const Trie *tr, const char *s, size_t n, Segs *out);
/* hftok.c */
int hft_normalize(const HfTok *t, const char *s, size_t n, Buf *b);
int hft_marks_cut_safe(const HfTok *t, int byte_level);

#endif

