/* hftok: tokenizer.json -> pipeline, and the pipeline run; see hftok.h. */
#include "hftok.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pretok.h"
#include "json.h"
#include "unicode.h"
#include "errorf.h"

enum { MAX_STEPS = 8 };
/* Token lengths are 32-bit in the BPE model (bpe.h). */
#define MAX_TOKEN_BYTES 0xFFFFFFFEu

typedef struct {
    char *s;
    size_t n, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap * 2 : 256;
    while (nc < b->n + extra + 1) nc *= 2;
    char *ns = realloc(b->s, nc);
    if (!ns) return -1;
    b->s = ns;
    b->cap = nc;
    return 0;
}

static int buf_put(Buf *b, const void *p, size_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

static int buf_printf(Buf *b, const char *fmt, ...) {
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
    int cut_at_marks;   /* words may be cut before word marks: see marks_cut_safe() */
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


/* ---- tries ---- */

static int trie_node(Trie *tr) {
    if (tr->n == tr->cap) {
        size_t nc = tr->cap ? tr->cap * 2 : 64;
        TrieNode *nn = realloc(tr->nodes, nc * sizeof *nn);
        if (!nn) return -1;
        tr->nodes = nn;
        tr->cap = nc;
    }
    tr->nodes[tr->n] = (TrieNode){-1, -1, -1, 0};
    return (int)tr->n++;
}

static int trie_init(Trie *tr) {
    memset(tr, 0, sizeof *tr);
    tr->empty = 1;
    return trie_node(tr) < 0 ? -1 : 0;
}

/* Adds pattern p -> id; an identical earlier pattern keeps its place. */
static int trie_add(Trie *tr, const char *p, size_t n, uint32_t id) {
    if (n == 0) return 0;
    int32_t cur = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t b = (uint8_t)p[k];
        int32_t c = tr->nodes[cur].child, prev = -1;
        while (c >= 0 && tr->nodes[c].byte != b) {
            prev = c;
            c = tr->nodes[c].sibling;
        }
        if (c < 0) {
            int nn = trie_node(tr);
            if (nn < 0) return -1;
            c = nn;
            tr->nodes[c].byte = b;
            if (prev < 0) tr->nodes[cur].child = c;
            else tr->nodes[prev].sibling = c;
        }
        cur = c;
    }
    if (tr->nodes[cur].id < 0) tr->nodes[cur].id = (int32_t)id;
    tr->first[(uint8_t)p[0]] = 1;
    tr->empty = 0;
    return 0;
}

/* The longest pattern at s[0..n): its length (0: none) and id. */
static size_t trie_longest(const Trie *tr, const char *s, size_t n, uint32_t *id) {
    int32_t cur = 0;
    size_t best = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t b = (uint8_t)s[k];
        int32_t c = tr->nodes[cur].child;
        while (c >= 0 && tr->nodes[c].byte != b) c = tr->nodes[c].sibling;
        if (c < 0) break;
        cur = c;
        if (tr->nodes[cur].id >= 0) {
            best = k + 1;
            *id = (uint32_t)tr->nodes[cur].id;
        }
    }
    return best;
}

static int segs_push(Segs *sg, size_t start, size_t len, int64_t id) {
    if (sg->n == sg->cap) {
        size_t nc = sg->cap ? sg->cap * 2 : 64;
        Seg *nv = realloc(sg->v, nc * sizeof *nv);
        if (!nv) return -1;
        sg->v = nv;
        sg->cap = nc;
    }
    sg->v[sg->n++] = (Seg){start, len, id};
    return 0;
}

/* The flags of the character before s[at] (at > 0) / at s[at]. */
static unsigned class_before(const char *s, size_t at) {
    size_t k = at - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    uni_decode((const uint8_t *)s + k, at - k, &cp);
    return uni_class(cp);
}

static unsigned class_at(const char *s, size_t n, size_t at, size_t *len) {
    uint32_t cp;
    *len = uni_decode((const uint8_t *)s + at, n - at, &cp);
    return uni_class(cp);
}

/* The library's AddedVocabulary::find_matches: the text split into added
 * tokens and the pieces between them. */
static int find_added(const HfTok *t, const Trie *tr, const char *s, size_t n, Segs *out) {
    out->n = 0;
    size_t start_offset = 0, i = 0;
    if (!tr->empty)
        while (i < n) {
            if (!tr->first[(uint8_t)s[i]]) {
                i++;
                continue;
            }
            uint32_t id;
            size_t len = trie_longest(tr, s + i, n - i, &id);
            if (!len) {
                i++;
                continue;
            }
            size_t start = i, stop = i + len;
            i = stop;
            const Added *a = &t->added[t->added_at[id]];
            if (a->single_word) {
                size_t l;
                int start_space = start == 0 || !(class_before(s, start) & UNI_W);
                int stop_space = stop == n || !(class_at(s, n, stop, &l) & UNI_W);
                if (!start_space || !stop_space) continue;
            }
            if (a->lstrip) {
                size_t ns = start;
                while (ns > 0 && (class_before(s, ns) & UNI_WS)) {
                    ns--;
                    while (ns > 0 && ((uint8_t)s[ns] & 0xC0) == 0x80) ns--;
                }
                start = ns > start_offset ? ns : start_offset;
            }
            if (a->rstrip) {
                size_t l;
                while (stop < n && (class_at(s, n, stop, &l) & UNI_WS)) stop += l;
            }
            if (start_offset < start && segs_push(out, start_offset, start - start_offset, -1)) return -1;
            if (segs_push(out, start, stop - start, id)) return -1;
            start_offset = stop;
        }
    if (start_offset < n && segs_push(out, start_offset, n - start_offset, -1)) return -1;
    return 0;
}

/* ---- normalization ---- */

/* The normalized text of s[0..n) into b (which is cleared). */
static int normalize(const HfTok *t, const char *s, size_t n, Buf *b) {
    b->n = 0;
    if (buf_put(b, s, n)) return -1;
    Buf tmp = {0};
    for (size_t k = 0; k < t->nnorm; k++) {
        const NormStep *st = &t->nsteps[k];
        if (st->kind == NORM_PREPEND) {
            if (b->n == 0) continue;
            tmp.n = 0;
            if (buf_put(&tmp, st->a, st->an) || buf_put(&tmp, b->s, b->n)) goto oom;
        } else {
            tmp.n = 0;
            if (buf_reserve(&tmp, b->n)) goto oom;
            for (size_t i = 0; i < b->n;) {
                const char *hit = memmem(b->s + i, b->n - i, st->a, st->an);
                size_t e = hit ? (size_t)(hit - b->s) : b->n;
                if (buf_put(&tmp, b->s + i, e - i) || (hit && buf_put(&tmp, st->b, st->bn))) goto oom;
                i = hit ? e + st->an : b->n;
            }
        }
        Buf sw = *b;
        *b = tmp;
        tmp = sw;
    }
    free(tmp.s);
    return 0;
oom:
    free(tmp.s);
    return -1;
}

/* ---- pre-tokenization and the model ---- */

typedef struct {
    HfTok *t;
    size_t k;
    const char *base;
    int orig0;
    BpeIds *out;
    char *err;
    size_t errlen;
} PreCtx;

static int pre_run(HfTok *t, size_t k, const char *s, size_t n, int orig0, BpeIds *out, char *err, size_t errlen);

static int pre_piece(void *vctx, size_t start, size_t len) {
    PreCtx *c = vctx;
    return pre_run(c->t, c->k + 1, c->base + start, len, c->orig0 && start == 0, c->out, c->err, c->errlen);
}

/* SentencePiece's word mark U+2581 '▁'. */
static const char MARK[] = "\xe2\x96\x81";

/* The model on one word; cut before the word marks that follow another
 * character when that is safe (marks_cut_safe). */
static int model_run(HfTok *t, const char *s, size_t n, BpeIds *out, char *err, size_t errlen) {
    if (!t->cut_at_marks) return bpe_encode(t->bpe, s, n, out, err, errlen);
    size_t from = 0;
    for (const char *p = s + 1; p < s + n && (p = memmem(p, (size_t)(s + n - p), MARK, 3)); p += 3) {
        size_t i = (size_t)(p - s);
        if (i >= 3 && !memcmp(s + i - 3, MARK, 3)) continue; /* inside a run of marks */
        if (bpe_encode(t->bpe, s + from, i - from, out, err, errlen)) return -1;
        from = i;
    }
    return bpe_encode(t->bpe, s + from, n - from, out, err, errlen);
}

/* Without a pre-tokenizer that splits (LLaMA-2's tokenizer.json has
 * none), the library runs BPE on a whole document as one word. When '▁'
 * is a token and no token has a '▁' right after another character, no
 * merge can join anything to a '▁' that follows another character: the
 * word can be cut before each such '▁' with the same ids, since the
 * merges on either side happen in the same order either way, and the
 * short pieces repeat, so the word cache answers most of them. Not with
 * ignore_merges (which looks at the whole word) nor byte-level models. */
static int marks_cut_safe(const HfTok *t, int byte_level) {
    if (byte_level || t->ignore_merges || bpe_token_id(t->bpe, MARK, 3) < 0) return 0;
    for (uint32_t id = 0; id < bpe_id_limit(t->bpe); id++) {
        size_t n;
        const char *s = bpe_token_text(t->bpe, id, &n);
        if (!s) continue;
        for (const char *p = s + 1; p < s + n && (p = memmem(p, (size_t)(s + n - p), MARK, 3)); p += 3) {
            size_t i = (size_t)(p - s);
            if (i < 3 || memcmp(s + i - 3, MARK, 3)) return 0;
        }
    }
    return 1;
}

static int pre_run(HfTok *t, size_t k, const char *s, size_t n, int orig0, BpeIds *out, char *err, size_t errlen) {
    if (n == 0) return 0;
    if (k == t->npre) return model_run(t, s, n, out, err, errlen);
    const PreStep *st = &t->pre[k];
    Buf *b = &t->scratch[k];
    PreCtx c = {t, k, s, orig0, out, err, errlen};
    switch (st->kind) {
    case PRE_SPLIT: return pretok_split(st->pat, (const uint8_t *)s, n, pre_piece, &c);
    case PRE_BYTELEVEL:
        if (st->prefix_space && s[0] != ' ') {
            b->n = 0;
            if (buf_put(b, " ", 1) || buf_put(b, s, n)) return errorf(err, errlen, "out of memory");
            s = c.base = b->s;
            n = b->n;
        }
        if (st->use_regex) return pretok_split(PRETOK_GPT2, (const uint8_t *)s, n, pre_piece, &c);
        return pre_run(t, k + 1, s, n, orig0, out, err, errlen);
    default: { /* PRE_METASPACE */
        b->n = 0;
        /* (spaces are replaced first, so a leading space counts as a replacement) */
        int starts = s[0] == ' ' || (n >= st->repl_n && !memcmp(s, st->repl, st->repl_n));
        int prepend = !starts && (st->scheme == SCHEME_ALWAYS || (st->scheme == SCHEME_FIRST && orig0));
        if (prepend && buf_put(b, st->repl, st->repl_n)) return errorf(err, errlen, "out of memory");
        for (size_t i = 0; i < n;) {
            const char *sp = memchr(s + i, ' ', n - i);
            size_t e = sp ? (size_t)(sp - s) : n;
            if (buf_put(b, s + i, e - i) || (sp && buf_put(b, st->repl, st->repl_n))) return errorf(err, errlen, "out of memory");
            i = sp ? e + 1 : n;
        }
        c.base = b->s;
        if (!st->split) return pre_run(t, k + 1, b->s, b->n, orig0, out, err, errlen);
        /* MergedWithNext: each replacement character starts a piece. */
        size_t from = 0;
        for (size_t i = 0; i + st->repl_n <= b->n; i++) {
            if (i > from && !memcmp(b->s + i, st->repl, st->repl_n)) {
                int rc = pre_piece(&c, from, i - from);
                if (rc) return rc;
                from = i;
            }
        }
        return pre_piece(&c, from, b->n - from);
    }
    }
}

/* Text piece (not an added token) of the raw text at offset `at`. */
static int encode_piece(HfTok *t, const char *s, size_t n, size_t at, BpeIds *out, char *err, size_t errlen) {
    const char *ns = s;
    size_t nn = n;
    if (t->nnorm) {
        if (normalize(t, s, n, &t->normbuf)) return errorf(err, errlen, "out of memory");
        ns = t->normbuf.s;
        nn = t->normbuf.n;
    }
    if (t->norm.empty) return pre_run(t, 0, ns, nn, at == 0, out, err, errlen);
    if (find_added(t, &t->norm, ns, nn, &t->segs_norm)) return errorf(err, errlen, "out of memory");
    for (size_t k = 0; k < t->segs_norm.n; k++) {
        const Seg *g = &t->segs_norm.v[k];
        if (g->id >= 0) {
            if (bpe_ids_push(out, (uint32_t)g->id)) return errorf(err, errlen, "out of memory");
        } else if (pre_run(t, 0, ns + g->start, g->len, at == 0 && g->start == 0, out, err, errlen))
            return -1;
    }
    return 0;
}

int hftok_encode(HfTok *t, const char *text, size_t n, BpeIds *out, char *err, size_t errlen) {
    if (t->raw.empty) return n ? encode_piece(t, text, n, 0, out, err, errlen) : 0;
    if (find_added(t, &t->raw, text, n, &t->segs_raw)) return errorf(err, errlen, "out of memory");
    for (size_t k = 0; k < t->segs_raw.n; k++) {
        /* (segs_raw is not touched by encode_piece) */
        const Seg g = t->segs_raw.v[k];
        if (g.id >= 0) {
            if (bpe_ids_push(out, (uint32_t)g.id)) return errorf(err, errlen, "out of memory");
        } else if (encode_piece(t, text + g.start, g.len, g.start, out, err, errlen))
            return -1;
    }
    return 0;
}

/* ---- loading ---- */

typedef struct {
    const char *name;
    char *err;
    size_t errlen;
} Ld;

static int lfail(Ld *l, const char *fmt, ...) {
    if (l->err && l->errlen) {
        int w = snprintf(l->err, l->errlen, "%s: ", l->name);
        if (w >= 0 && (size_t)w < l->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(l->err + w, l->errlen - (size_t)w, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static const char *type_of(const JsonValue *o) {
    const char *ty = json_get_str(o, "type");
    return ty ? ty : "";
}

/* A single character given as a JSON string, into out[4]. */
static int one_char(Ld *l, const JsonValue *o, const char *key, const char *what, char *out, size_t *outn) {
    const JsonValue *v = json_get(o, key);
    if (!v || v->type != JSON_STRING) return lfail(l, "%s: '%s' must be a string", what, key);
    uint32_t cp;
    size_t len = v->len ? uni_decode((const uint8_t *)v->string, v->len, &cp) : 0;
    if (v->len == 0 || len != v->len) return lfail(l, "%s: '%s' must be one character, not \"%s\"", what, key, v->string);
    memcpy(out, v->string, len);
    *outn = len;
    return 0;
}

/* The string of a {"String": s} pattern; a {"Regex": r} one is refused. */
static int string_pattern(Ld *l, const JsonValue *o, const char *what, const JsonValue **s) {
    const JsonValue *p = json_get(o, "pattern");
    const JsonValue *str = json_get(p, "String");
    if (str && str->type == JSON_STRING && str->len > 0) {
        *s = str;
        return 0;
    }
    const JsonValue *re = json_get(p, "Regex");
    if (re && re->type == JSON_STRING)
        return lfail(l, "%s with the regex pattern \"%s\" is not supported (only a string pattern)", what, re->string);
    return lfail(l, "%s: 'pattern' must be {\"String\": \"...\"} with a non-empty string", what);
}

static int load_normalizer(HfTok *t, Ld *l, const JsonValue *o, int depth) {
    if (!o || o->type == JSON_NULL) return 0;
    if (o->type != JSON_OBJECT) return lfail(l, "normalizer must be an object or null");
    const char *ty = type_of(o);
    if (!strcmp(ty, "Sequence") && depth == 0) {
        const JsonValue *list = json_get(o, "normalizers");
        if (!list || list->type != JSON_ARRAY) return lfail(l, "normalizer Sequence: 'normalizers' must be an array");
        for (size_t k = 0; k < list->count; k++)
            if (load_normalizer(t, l, &list->items[k], depth + 1)) return -1;
        return 0;
    }
    if (t->nnorm == MAX_STEPS) return lfail(l, "more than %d normalizers", MAX_STEPS);
    NormStep *st = &t->nsteps[t->nnorm];
    if (!strcmp(ty, "Prepend")) {
        const JsonValue *p = json_get(o, "prepend");
        if (!p || p->type != JSON_STRING) return lfail(l, "normalizer Prepend: 'prepend' must be a string");
        st->kind = NORM_PREPEND;
        if (!(st->a = dupn(p->string, p->len))) return lfail(l, "out of memory");
        st->an = p->len;
    } else if (!strcmp(ty, "Replace")) {
        const JsonValue *pat, *c = json_get(o, "content");
        if (string_pattern(l, o, "normalizer Replace", &pat)) return -1;
        if (!c || c->type != JSON_STRING) return lfail(l, "normalizer Replace: 'content' must be a string");
        st->kind = NORM_REPLACE;
        if (!(st->a = dupn(pat->string, pat->len)) || !(st->b = dupn(c->string, c->len))) {
            free(st->a);
            return lfail(l, "out of memory");
        }
        st->an = pat->len;
        st->bn = c->len;
    } else
        return lfail(l, "normalizer '%s' is not supported (supported: Prepend, Replace with a string pattern, and a "
                     "Sequence of those, as LLaMA-2 and Mistral tokenizers use)", ty);
    t->nnorm++;
    return 0;
}

static int metaspace_fields(Ld *l, const JsonValue *o, const char *what, char *repl, size_t *repl_n, int *scheme,
                            int *split) {
    if (one_char(l, o, "replacement", what, repl, repl_n)) return -1;
    const char *ps = json_get_str(o, "prepend_scheme");
    if (ps) {
        if (!strcmp(ps, "always")) *scheme = SCHEME_ALWAYS;
        else if (!strcmp(ps, "first")) *scheme = SCHEME_FIRST;
        else if (!strcmp(ps, "never")) *scheme = SCHEME_NEVER;
        else return lfail(l, "%s: unknown prepend_scheme \"%s\"", what, ps);
    } else {
        int aps = json_get_bool(o, "add_prefix_space", 1);
        if (aps < 0) return lfail(l, "%s: 'add_prefix_space' must be a boolean", what);
        *scheme = aps ? SCHEME_ALWAYS : SCHEME_NEVER;
    }
    if (split) {
        *split = json_get_bool(o, "split", 1);
        if (*split < 0) return lfail(l, "%s: 'split' must be a boolean", what);
    }
    return 0;
}

static int load_pretok(HfTok *t, Ld *l, const JsonValue *o, int depth) {
    if (!o || o->type == JSON_NULL) return 0;
    if (o->type != JSON_OBJECT) return lfail(l, "pre_tokenizer must be an object or null");
    const char *ty = type_of(o);
    if (!strcmp(ty, "Sequence") && depth == 0) {
        const JsonValue *list = json_get(o, "pretokenizers");
        if (!list || list->type != JSON_ARRAY) return lfail(l, "pre_tokenizer Sequence: 'pretokenizers' must be an array");
        for (size_t k = 0; k < list->count; k++)
            if (load_pretok(t, l, &list->items[k], depth + 1)) return -1;
        return 0;
    }
    if (t->npre == MAX_STEPS) return lfail(l, "more than %d pre-tokenizers", MAX_STEPS);
    if (t->npre && t->pre[t->npre - 1].kind == PRE_BYTELEVEL)
        return lfail(l, "pre-tokenizer '%s' after ByteLevel is not supported (ByteLevel must come last)", ty);
    PreStep *st = &t->pre[t->npre];
    memset(st, 0, sizeof *st);
    if (!strcmp(ty, "ByteLevel")) {
        st->kind = PRE_BYTELEVEL;
        st->prefix_space = json_get_bool(o, "add_prefix_space", 1);
        st->use_regex = json_get_bool(o, "use_regex", 1);
        if (st->prefix_space < 0 || st->use_regex < 0)
            return lfail(l, "pre_tokenizer ByteLevel: add_prefix_space and use_regex must be booleans");
    } else if (!strcmp(ty, "Split")) {
        const JsonValue *p = json_get(o, "pattern");
        const JsonValue *re = json_get(p, "Regex");
        if (!re || re->type != JSON_STRING) {
            const JsonValue *str = json_get(p, "String");
            if (str && str->type == JSON_STRING)
                return lfail(l, "pre_tokenizer Split on the string \"%s\" is not supported (only the GPT-2, Llama-3 and "
                             "Qwen2 regexes)", str->string);
            return lfail(l, "pre_tokenizer Split: 'pattern' must be {\"Regex\": \"...\"}");
        }
        st->kind = PRE_SPLIT;
        st->pat = pretok_pattern(re->string, re->len);
        if (st->pat == PRETOK_UNKNOWN)
            return lfail(l, "pre_tokenizer Split: the regex \"%s\" is not one zinftok implements (it knows GPT-2's \"%s\", "
                         "Llama-3's \"%s\" and Qwen2's)", re->string, pretok_regex(PRETOK_GPT2), pretok_regex(PRETOK_LLAMA3));
        const char *beh = json_get_str(o, "behavior");
        if (!beh || strcmp(beh, "Isolated"))
            return lfail(l, "pre_tokenizer Split: behavior \"%s\" is not supported (only \"Isolated\")", beh ? beh : "?");
        if (json_get_bool(o, "invert", 0) != 0) return lfail(l, "pre_tokenizer Split: invert is not supported");
    } else if (!strcmp(ty, "Metaspace")) {
        st->kind = PRE_METASPACE;
        if (metaspace_fields(l, o, "pre_tokenizer Metaspace", st->repl, &st->repl_n, &st->scheme, &st->split)) return -1;
    } else
        return lfail(l, "pre_tokenizer '%s' is not supported (supported: ByteLevel, Split with the GPT-2/Llama-3/Qwen2 "
                     "regex, Metaspace, and a Sequence of those)", ty);
    t->npre++;
    return 0;
}

static int load_decoder(HfTok *t, Ld *l, const JsonValue *o, int depth) {
    if (!o || o->type == JSON_NULL) {
        if (depth == 0) t->dec_join_space = 1;
        return 0;
    }
    if (o->type != JSON_OBJECT) return lfail(l, "decoder must be an object or null");
    const char *ty = type_of(o);
    if (!strcmp(ty, "Sequence") && depth == 0) {
        const JsonValue *list = json_get(o, "decoders");
        if (!list || list->type != JSON_ARRAY) return lfail(l, "decoder Sequence: 'decoders' must be an array");
        for (size_t k = 0; k < list->count; k++)
            if (load_decoder(t, l, &list->items[k], depth + 1)) return -1;
        return 0;
    }
    if (t->ndec == MAX_STEPS) return lfail(l, "more than %d decoders", MAX_STEPS);
    DecStep *st = &t->dec[t->ndec];
    memset(st, 0, sizeof *st);
    if (!strcmp(ty, "ByteLevel")) st->kind = DEC_BYTELEVEL;
    else if (!strcmp(ty, "ByteFallback")) st->kind = DEC_BYTEFALLBACK;
    else if (!strcmp(ty, "Fuse")) st->kind = DEC_FUSE;
    else if (!strcmp(ty, "Replace")) {
        const JsonValue *pat, *c = json_get(o, "content");
        if (string_pattern(l, o, "decoder Replace", &pat)) return -1;
        if (!c || c->type != JSON_STRING) return lfail(l, "decoder Replace: 'content' must be a string");
        st->kind = DEC_REPLACE;
        if (!(st->a = dupn(pat->string, pat->len)) || !(st->b = dupn(c->string, c->len))) {
            free(st->a);
            return lfail(l, "out of memory");
        }
        st->an = pat->len;
        st->bn = c->len;
    } else if (!strcmp(ty, "Strip")) {
        st->kind = DEC_STRIP;
        if (one_char(l, o, "content", "decoder Strip", st->ch, &st->ch_n)) return -1;
        const JsonValue *a = json_get(o, "start"), *b = json_get(o, "stop");
        if (!a || !b || !a->is_integer || !b->is_integer || a->integer < 0 || b->integer < 0)
            return lfail(l, "decoder Strip: 'start' and 'stop' must be non-negative integers");
        st->start = (size_t)a->integer;
        st->stop = (size_t)b->integer;
    } else if (!strcmp(ty, "Metaspace")) {
        st->kind = DEC_METASPACE;
        if (metaspace_fields(l, o, "decoder Metaspace", st->ch, &st->ch_n, &st->scheme, NULL)) return -1;
    } else {
        /* Encoding does not need the decoder: refuse only when decoding. */
        snprintf(t->dec_err, sizeof t->dec_err, "%s: decoder '%s' is not supported (supported: ByteLevel, Replace, "
                 "ByteFallback, Fuse, Strip, Metaspace, Sequence)", l->name, ty);
        return 0;
    }
    t->ndec++;
    return 0;
}

/* The ids of a template's special token `name`. */
static int template_ids(Ld *l, const JsonValue *specials, const char *name, uint32_t *dst, size_t *nd) {
    const JsonValue *sp = json_get(specials, name);
    const JsonValue *ids = json_get(sp, "ids");
    if (!ids || ids->type != JSON_ARRAY)
        return lfail(l, "post_processor TemplateProcessing: special token \"%s\" has no 'ids' in 'special_tokens'", name);
    for (size_t k = 0; k < ids->count; k++) {
        const JsonValue *v = &ids->items[k];
        if (!v->is_integer || v->integer < 0 || v->integer >= BPE_MAX_ID)
            return lfail(l, "post_processor TemplateProcessing: special token \"%s\" has a bad id", name);
        if (*nd == 16) return lfail(l, "post_processor: more than 16 tokens around a sequence");
        dst[(*nd)++] = (uint32_t)v->integer;
    }
    return 0;
}

static int special_pair(Ld *l, const JsonValue *o, const char *key, uint32_t *dst, size_t *nd) {
    const JsonValue *p = json_get(o, key);
    if (!p || p->type != JSON_ARRAY || p->count != 2 || !p->items[1].is_integer || p->items[1].integer < 0 ||
        p->items[1].integer >= BPE_MAX_ID)
        return lfail(l, "post_processor %s: '%s' must be [token, id]", type_of(o), key);
    dst[(*nd)++] = (uint32_t)p->items[1].integer;
    return 0;
}

static int load_post(HfTok *t, Ld *l, const JsonValue *o, int depth) {
    if (!o || o->type == JSON_NULL) return 0;
    if (o->type != JSON_OBJECT) return lfail(l, "post_processor must be an object or null");
    const char *ty = type_of(o);
    if (!strcmp(ty, "Sequence") && depth == 0) {
        const JsonValue *list = json_get(o, "processors");
        if (!list || list->type != JSON_ARRAY) return lfail(l, "post_processor Sequence: 'processors' must be an array");
        for (size_t k = 0; k < list->count; k++)
            if (load_post(t, l, &list->items[k], depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) return 0; /* offsets only */
    if (t->nprefix || t->nsuffix) return lfail(l, "post_processor: more than one processor adds tokens");
    if (!strcmp(ty, "TemplateProcessing")) {
        const JsonValue *single = json_get(o, "single"), *specials = json_get(o, "special_tokens");
        if (!single || single->type != JSON_ARRAY) return lfail(l, "post_processor TemplateProcessing: 'single' must be an array");
        int seen_a = 0;
        for (size_t k = 0; k < single->count; k++) {
            const JsonValue *piece = &single->items[k];
            const JsonValue *sp = json_get(piece, "SpecialToken"), *sq = json_get(piece, "Sequence");
            if (sp) {
                const char *name = json_get_str(sp, "id");
                if (!name) return lfail(l, "post_processor TemplateProcessing: a SpecialToken without an 'id'");
                if (template_ids(l, specials, name, seen_a ? t->suffix : t->prefix, seen_a ? &t->nsuffix : &t->nprefix))
                    return -1;
            } else if (sq) {
                const char *id = json_get_str(sq, "id");
                if (!id || strcmp(id, "A") || seen_a)
                    return lfail(l, "post_processor TemplateProcessing: 'single' must hold the sequence $A once");
                seen_a = 1;
            } else
                return lfail(l, "post_processor TemplateProcessing: a 'single' piece is neither SpecialToken nor Sequence");
        }
        if (!seen_a) return lfail(l, "post_processor TemplateProcessing: 'single' has no $A");
        return 0;
    }
    if (!strcmp(ty, "BertProcessing") || !strcmp(ty, "RobertaProcessing"))
        return special_pair(l, o, "cls", t->prefix, &t->nprefix) || special_pair(l, o, "sep", t->suffix, &t->nsuffix) ? -1 : 0;
    return lfail(l, "post_processor '%s' is not supported (supported: TemplateProcessing, BertProcessing, "
                 "RobertaProcessing, ByteLevel, Sequence)", ty);
}

static int load_model(HfTok *t, Ld *l, const JsonValue *o, int byte_level) {
    if (!o || o->type != JSON_OBJECT) return lfail(l, "'model' must be an object");
    const char *ty = json_get_str(o, "type");
    if (!ty && json_get(o, "merges")) ty = "BPE";
    if (!ty || strcmp(ty, "BPE"))
        return lfail(l, "model type '%s' is not supported (only BPE)", ty ? ty : "?");
    const JsonValue *dropout = json_get(o, "dropout");
    if (dropout && dropout->type != JSON_NULL && !(dropout->type == JSON_NUMBER && dropout->number == 0))
        return lfail(l, "model BPE: dropout is not supported (tokenizing must be deterministic)");
    const char *fix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const JsonValue *v = json_get(o, fix[k]);
        if (v && v->type != JSON_NULL && !(v->type == JSON_STRING && v->len == 0))
            return lfail(l, "model BPE: %s is not supported", fix[k]);
    }
    BpeOptions bo = {0};
    const JsonValue *unk = json_get(o, "unk_token");
    if (unk && unk->type == JSON_STRING) bo.unk_token = unk->string;
    else if (unk && unk->type != JSON_NULL) return lfail(l, "model BPE: 'unk_token' must be a string or null");
    bo.fuse_unk = json_get_bool(o, "fuse_unk", 0);
    bo.byte_fallback = json_get_bool(o, "byte_fallback", 0);
    bo.ignore_merges = json_get_bool(o, "ignore_merges", 0);
    if (bo.fuse_unk < 0 || bo.byte_fallback < 0 || bo.ignore_merges < 0)
        return lfail(l, "model BPE: fuse_unk, byte_fallback and ignore_merges must be booleans");
    bo.byte_level = byte_level;
    t->ignore_merges = bo.ignore_merges;
    const JsonValue *vocab = json_get(o, "vocab"), *merges = json_get(o, "merges");
    if (!vocab || vocab->type != JSON_OBJECT) return lfail(l, "model BPE: 'vocab' must be an object of token: id");
    if (merges && merges->type != JSON_ARRAY && merges->type != JSON_NULL)
        return lfail(l, "model BPE: 'merges' must be an array");
    size_t nm = merges && merges->type == JSON_ARRAY ? merges->count : 0;
    BpeToken *toks = malloc((vocab->count + 1) * sizeof *toks);
    BpeMerge *mg = malloc((nm + 1) * sizeof *mg);
    if (!toks || !mg) {
        free(toks);
        free(mg);
        return lfail(l, "out of memory");
    }
    int rc = 0;
    for (size_t k = 0; k < vocab->count && !rc; k++) {
        const JsonValue *v = &vocab->items[k];
        if (!v->is_integer || v->integer < 0 || v->integer >= BPE_MAX_ID)
            rc = lfail(l, "model BPE: vocab entry \"%.60s\" has %s, not an id in 0..%d", v->key,
                       v->is_integer ? "a negative or too large id" : json_type_phrase(v->type), BPE_MAX_ID - 1);
        else if (v->key_len > MAX_TOKEN_BYTES)
            rc = lfail(l, "model BPE: vocab entry \"%.60s\" is longer than %u bytes", v->key, MAX_TOKEN_BYTES);
        toks[k] = (BpeToken){v->key, (uint32_t)v->key_len, (uint32_t)v->integer};
    }
    for (size_t k = 0; k < nm && !rc; k++) {
        const JsonValue *m = &merges->items[k];
        if ((m->type == JSON_STRING && m->len > MAX_TOKEN_BYTES) ||
            (m->type == JSON_ARRAY && m->count == 2 && (m->items[0].len > MAX_TOKEN_BYTES || m->items[1].len > MAX_TOKEN_BYTES)))
            rc = lfail(l, "model BPE: merge %zu is longer than %u bytes", k, MAX_TOKEN_BYTES);
        else if (m->type == JSON_STRING) {
            const char *sp = memchr(m->string, ' ', m->len);
            if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->string)))
                rc = lfail(l, "model BPE: merge %zu \"%.60s\" is not two tokens separated by one space", k, m->string);
            else
                mg[k] = (BpeMerge){m->string, sp + 1, (uint32_t)(sp - m->string), (uint32_t)(m->len - (uint32_t)(sp + 1 - m->string))};
        } else if (m->type == JSON_ARRAY && m->count == 2 && m->items[0].type == JSON_STRING &&
                   m->items[1].type == JSON_STRING)
            mg[k] = (BpeMerge){m->items[0].string, m->items[1].string, (uint32_t)m->items[0].len, (uint32_t)m->items[1].len};
        else
            rc = lfail(l, "model BPE: merge %zu must be \"a b\" or [\"a\", \"b\"], not %s", k, json_type_phrase(m->type));
    }
    if (!rc) {
        char e[400];
        if (bpe_create(&t->bpe, &bo, toks, vocab->count, mg, nm, e, sizeof e)) rc = lfail(l, "model BPE: %s", e);
    }
    free(toks);
    free(mg);
    return rc;
}

static int added_flag(Ld *l, const JsonValue *o, const char *key, int dflt, int *out) {
    int v = json_get_bool(o, key, dflt);
    if (v < 0) return lfail(l, "added_tokens: '%s' must be a boolean", key);
    *out = v;
    return 0;
}

static int load_added(HfTok *t, Ld *l, const JsonValue *list) {
    if (!list || list->type == JSON_NULL) return 0;
    if (list->type != JSON_ARRAY) return lfail(l, "'added_tokens' must be an array");
    t->added = calloc(list->count + 1, sizeof *t->added);
    if (!t->added) return lfail(l, "out of memory");
    size_t entries = bpe_vocab_entries(t->bpe);
    int64_t max_added = -1;
    for (size_t k = 0; k < list->count; k++) {
        const JsonValue *o = &list->items[k];
        const JsonValue *c = json_get(o, "content"), *idv = json_get(o, "id");
        if (!c || c->type != JSON_STRING) return lfail(l, "added_tokens[%zu]: 'content' must be a string", k);
        Added a = {0};
        if (added_flag(l, o, "special", 0, &a.special) || added_flag(l, o, "single_word", 0, &a.single_word) ||
            added_flag(l, o, "lstrip", 0, &a.lstrip) || added_flag(l, o, "rstrip", 0, &a.rstrip) ||
            added_flag(l, o, "normalized", !a.special, &a.normalized))
            return -1;
        if (c->len == 0) continue;
        /* The id, as the library gives it. */
        size_t at = t->nadded;
        for (size_t j = 0; j < t->nadded; j++)
            if (t->added[j].n == c->len && !memcmp(t->added[j].content, c->string, c->len)) at = j;
        int64_t id;
        if (at < t->nadded) id = t->added[at].id;
        else if ((id = bpe_token_id(t->bpe, c->string, c->len)) < 0)
            id = max_added < 0 ? (int64_t)entries
                               : (max_added >= (int64_t)entries || entries == 0 ? max_added + 1 : (int64_t)entries);
        if (id >= BPE_MAX_ID) return lfail(l, "added_tokens: too many tokens");
        if (id > max_added) max_added = id;
        if (idv && idv->is_integer && idv->integer != id)
            buf_printf(&t->notes, "added token \"%.60s\" has id %lld in the file but gets %lld, as in the tokenizers library\n",
                       c->string, (long long)idv->integer, (long long)id);
        a.id = (uint32_t)id;
        if (at == t->nadded) {
            if (!(a.content = dupn(c->string, c->len))) return lfail(l, "out of memory");
            a.n = c->len;
            t->added[t->nadded++] = a;
        } else { /* the later entry's flags */
            a.content = t->added[at].content;
            a.n = t->added[at].n;
            t->added[at] = a;
        }
    }
    return 0;
}

static int build_added(HfTok *t, Ld *l) {
    uint32_t vs = bpe_id_limit(t->bpe);
    for (size_t k = 0; k < t->nadded; k++)
        if (t->added[k].id + 1 > vs) vs = t->added[k].id + 1;
    for (size_t k = 0; k < t->nprefix; k++)
        if (t->prefix[k] >= vs) return lfail(l, "post_processor: token id %u is not in the vocabulary", t->prefix[k]);
    for (size_t k = 0; k < t->nsuffix; k++)
        if (t->suffix[k] >= vs) return lfail(l, "post_processor: token id %u is not in the vocabulary", t->suffix[k]);
    t->vocab_size = vs;
    t->added_at = malloc((size_t)vs * sizeof *t->added_at);
    t->special = calloc(vs, 1);
    if (!t->added_at || !t->special || trie_init(&t->raw) || trie_init(&t->norm)) return lfail(l, "out of memory");
    for (uint32_t i = 0; i < vs; i++) t->added_at[i] = -1;
    Buf pat = {0};
    /* Special tokens first, then the others, each in file order (the
     * library's order of patterns). */
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < t->nadded; k++) {
            Added *a = &t->added[k];
            if (a->special != (pass == 0)) continue;
            t->added_at[a->id] = (int32_t)k;
            if (a->special) {
                t->special[a->id] = 1;
                int64_t mid = bpe_token_id(t->bpe, a->content, a->n);
                if (mid >= 0) t->special[mid] = 1;
            }
            int rc;
            if (!a->normalized) rc = trie_add(&t->raw, a->content, a->n, a->id);
            else if (normalize(t, a->content, a->n, &pat) || !(a->text = dupn(pat.s, pat.n))) rc = -1;
            else {
                a->text_n = pat.n;
                rc = trie_add(&t->norm, pat.s, pat.n, a->id);
            }
            if (rc) {
                free(pat.s);
                return lfail(l, "out of memory");
            }
        }
    free(pat.s);
    return 0;
}

int hftok_from_json(HfTok **out, const char *name, const char *json, size_t n, char *err, size_t errlen) {
    *out = NULL;
    Ld l = {name, err, errlen};
    JsonDoc doc;
    char e[400];
    if (json_parse(json, n, &doc, e, sizeof e)) return lfail(&l, "malformed JSON: %s", e);
    const JsonValue *root = doc.root;
    HfTok *t = calloc(1, sizeof *t);
    if (!t) {
        json_free(&doc);
        return lfail(&l, "out of memory");
    }
    int rc = 0;
    if (root->type != JSON_OBJECT) rc = lfail(&l, "not a tokenizer: the JSON is %s, not an object", json_type_phrase(root->type));
    const JsonValue *ver = rc ? NULL : json_get(root, "version");
    if (!rc && ver && (ver->type != JSON_STRING || strcmp(ver->string, "1.0")))
        rc = lfail(&l, "unknown tokenizer.json version %s%s%s (expected \"1.0\")", ver->type == JSON_STRING ? "\"" : "",
                   ver->type == JSON_STRING ? ver->string : json_type_phrase(ver->type), ver->type == JSON_STRING ? "\"" : "");
    if (!rc && !json_get(root, "model")) rc = lfail(&l, "not a tokenizer: no 'model'");
    if (!rc) rc = load_normalizer(t, &l, json_get(root, "normalizer"), 0);
    if (!rc) rc = load_pretok(t, &l, json_get(root, "pre_tokenizer"), 0);
    int byte_level = 0;
    for (size_t k = 0; k < t->npre; k++) byte_level |= t->pre[k].kind == PRE_BYTELEVEL;
    if (!rc) rc = load_model(t, &l, json_get(root, "model"), byte_level);
    if (!rc) rc = load_added(t, &l, json_get(root, "added_tokens"));
    if (!rc) rc = load_post(t, &l, json_get(root, "post_processor"), 0);
    if (!rc) rc = load_decoder(t, &l, json_get(root, "decoder"), 0);
    if (!rc) rc = build_added(t, &l);
    if (!rc) t->cut_at_marks = marks_cut_safe(t, byte_level);
    if (!rc) {
        const JsonValue *tr = json_get(root, "truncation"), *pd = json_get(root, "padding");
        if ((tr && tr->type != JSON_NULL) || (pd && pd->type != JSON_NULL))
            buf_printf(&t->notes, "the file's truncation and padding settings are ignored: documents are encoded whole\n");
        const char *pre = "no pre-tokenizer";
        for (size_t k = 0; k < t->npre; k++) {
            if (t->pre[k].kind == PRE_SPLIT) pre = pretok_name(t->pre[k].pat);
            else if (t->pre[k].kind == PRE_METASPACE) pre = "Metaspace";
            else if (t->pre[k].use_regex) pre = "GPT-2";
        }
        int bf = 0;
        for (uint32_t b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            bf |= bpe_token_id(t->bpe, s, 6) >= 0;
        }
        snprintf(t->describe, sizeof t->describe, "%s BPE, %s%s, %zu added tokens, vocabulary %u",
                 byte_level ? "byte-level" : (bf ? "byte-fallback" : "character-level"), pre,
                 strcmp(pre, "no pre-tokenizer") ? " pre-tokenizer" : "", t->nadded, t->vocab_size);
    }
    json_free(&doc);
    if (rc) {
        hftok_free(t);
        return -1;
    }
    if (!t->notes.s && buf_put(&t->notes, "", 0)) {
        hftok_free(t);
        return lfail(&l, "out of memory");
    }
    if (!(t->name = strdup(name))) {
        hftok_free(t);
        return lfail(&l, "out of memory");
    }
    *out = t;
    return 0;
}

int hftok_load(HfTok **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return errorf(err, errlen, "%s: %s", path, strerror(errno));
    Buf b = {0};
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (buf_put(&b, chunk, got)) {
            fclose(f);
            free(b.s);
            return errorf(err, errlen, "%s: out of memory", path);
        }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.s);
        return errorf(err, errlen, "%s: read error", path);
    }
    int rc = hftok_from_json(out, path, b.s ? b.s : "", b.n, err, errlen);
    free(b.s);
    return rc;
}

void hftok_free(HfTok *t) {
    if (!t) return;
    bpe_free(t->bpe);
    for (size_t k = 0; k < t->nadded; k++) {
        free(t->added[k].content);
        free(t->added[k].text);
    }
    free(t->added);
    free(t->added_at);
    free(t->special);
    free(t->raw.nodes);
    free(t->norm.nodes);
    for (size_t k = 0; k < t->nnorm; k++) {
        free(t->nsteps[k].a);
        free(t->nsteps[k].b);
    }
    for (size_t k = 0; k < t->ndec; k++) {
        free(t->dec[k].a);
        free(t->dec[k].b);
    }
    for (size_t k = 0; k < MAX_STEPS + 1; k++) free(t->scratch[k].s);
    free(t->normbuf.s);
    free(t->segs_raw.v);
    free(t->segs_norm.v);
    free(t->notes.s);
    free(t->name);
    free(t);
}

const char *hftok_notes(const HfTok *t) { return t->notes.s ? t->notes.s : ""; }
const char *hftok_describe(const HfTok *t) { return t->describe; }

const uint32_t *hftok_prefix(const HfTok *t, size_t *n) {
    *n = t->nprefix;
    return t->prefix;
}

const uint32_t *hftok_suffix(const HfTok *t, size_t *n) {
    *n = t->nsuffix;
    return t->suffix;
}

uint32_t hftok_vocab_size(const HfTok *t) { return t->vocab_size; }

uint64_t hftok_fingerprint(const HfTok *t) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over (id, length, text) of every id */
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        size_t n = 0;
        const char *s = hftok_token_text(t, id, &n);
        uint64_t head[2] = {id, s ? (uint64_t)n : UINT64_MAX};
        const unsigned char *b = (const unsigned char *)head;
        for (size_t i = 0; i < sizeof head; i++) h = (h ^ b[i]) * 0x100000001b3ull;
        for (size_t i = 0; s && i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    }
    return h ? h : 1; /* 0 means "not recorded" */
}

int64_t hftok_token_id(const HfTok *t, const char *s, size_t n) {
    for (size_t k = 0; k < t->nadded; k++)
        if (t->added[k].n == n && !memcmp(t->added[k].content, s, n)) return t->added[k].id;
    return bpe_token_id(t->bpe, s, n);
}

const char *hftok_token_text(const HfTok *t, uint32_t id, size_t *n) {
    if (id >= t->vocab_size) return NULL;
    if (t->added_at[id] >= 0) {
        const Added *a = &t->added[t->added_at[id]];
        *n = a->text ? a->text_n : a->n;
        return a->text ? a->text : a->content;
    }
    return bpe_token_text(t->bpe, id, n);
}

int hftok_is_added(const HfTok *t, uint32_t id) { return id < t->vocab_size && t->added_at[id] >= 0; }
int hftok_is_special(const HfTok *t, uint32_t id) { return id < t->vocab_size && t->special[id]; }

/* ---- decoding ---- */

/* A list of token strings: texts in one buffer. */
typedef struct {
    Buf text;
    size_t *off, *len;
    size_t n, cap;
} TokList;

static int tl_add(TokList *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        size_t *no = realloc(l->off, nc * sizeof *no);
        if (!no) return -1;
        l->off = no;
        size_t *nl = realloc(l->len, nc * sizeof *nl);
        if (!nl) return -1;
        l->len = nl;
        l->cap = nc;
    }
    l->off[l->n] = l->text.n;
    l->len[l->n] = n;
    if (buf_put(&l->text, s, n)) return -1;
    l->n++;
    return 0;
}

/* Appends to the last token of l (which exists). */
static int tl_append(TokList *l, const char *s, size_t n) {
    if (buf_put(&l->text, s, n)) return -1;
    l->len[l->n - 1] += n;
    return 0;
}

static void tl_free(TokList *l) {
    free(l->text.s);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static void tl_reset(TokList *l) {
    l->n = 0;
    l->text.n = 0;
}

/* Rust's u8::from_str_radix(s, 16) for the two characters of <0xXX>. */
static int hex_byte(const char *s, size_t n, int *v) {
    int r = 0;
    size_t k = 0;
    if (n && s[0] == '+') k = 1;
    if (k == n) return 0;
    for (; k < n; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        r = r * 16 + d;
    }
    *v = r;
    return r < 256;
}

static int flush_bytes(TokList *o, Buf *bytes) {
    if (!bytes->n) return 0;
    int rc = 0;
    if (uni_valid_prefix((const uint8_t *)bytes->s, bytes->n) == bytes->n) rc = tl_add(o, bytes->s, bytes->n);
    else
        for (size_t k = 0; k < bytes->n && !rc; k++) rc = tl_add(o, "\xEF\xBF\xBD", 3);
    bytes->n = 0;
    return rc;
}

static int dec_step(const DecStep *st, const TokList *in, TokList *o) {
    tl_reset(o);
    switch (st->kind) {
    case DEC_BYTELEVEL: {
        Buf raw = {0};
        int rc = 0;
        for (size_t k = 0; k < in->n && !rc; k++) {
            const uint8_t *s = (const uint8_t *)in->text.s + in->off[k];
            size_t n = in->len[k], i = 0, start = raw.n;
            while (i < n && !rc) {
                uint32_t cp;
                i += uni_decode(s + i, n - i, &cp);
                int b = uni_char_byte(cp);
                if (b < 0) { /* not all characters map: the token's own bytes */
                    raw.n = start;
                    rc = buf_put(&raw, s, n);
                    break;
                }
                char c = (char)b;
                rc = buf_put(&raw, &c, 1);
            }
        }
        size_t rn = 0, nbad;
        char *fixed = rc ? NULL : uni_utf8_repair((const uint8_t *)(raw.s ? raw.s : ""), raw.n, &rn, &nbad);
        free(raw.s);
        if (!fixed) return -1;
        rc = tl_add(o, fixed, rn);
        free(fixed);
        return rc;
    }
    case DEC_REPLACE:
        for (size_t k = 0; k < in->n; k++) {
            const char *s = in->text.s + in->off[k];
            size_t n = in->len[k], i = 0;
            if (tl_add(o, "", 0)) return -1;
            while (i < n) {
                const char *hit = memmem(s + i, n - i, st->a, st->an);
                size_t e = hit ? (size_t)(hit - s) : n;
                if (tl_append(o, s + i, e - i) || (hit && tl_append(o, st->b, st->bn))) return -1;
                i = hit ? e + st->an : n;
            }
        }
        return 0;
    case DEC_BYTEFALLBACK: {
        Buf bytes = {0};
        int rc = 0;
        for (size_t k = 0; k < in->n && !rc; k++) {
            const char *s = in->text.s + in->off[k];
            size_t n = in->len[k];
            int v;
            if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hex_byte(s + 3, 2, &v)) {
                char c = (char)v;
                rc = buf_put(&bytes, &c, 1);
            } else {
                rc = flush_bytes(o, &bytes);
                if (!rc) rc = tl_add(o, s, n);
            }
        }
        if (!rc) rc = flush_bytes(o, &bytes);
        free(bytes.s);
        return rc;
    }
    case DEC_FUSE:
        if (tl_add(o, "", 0)) return -1;
        for (size_t k = 0; k < in->n; k++)
            if (tl_append(o, in->text.s + in->off[k], in->len[k])) return -1;
        return 0;
    case DEC_STRIP:
        for (size_t k = 0; k < in->n; k++) {
            const char *s = in->text.s + in->off[k];
            size_t n = in->len[k], a = 0, z = n;
            for (size_t c = 0; c < st->start && a + st->ch_n <= n && !memcmp(s + a, st->ch, st->ch_n); c++) a += st->ch_n;
            for (size_t c = 0; c < st->stop && z >= a + st->ch_n && !memcmp(s + z - st->ch_n, st->ch, st->ch_n); c++)
                z -= st->ch_n;
            if (tl_add(o, s + a, z - a)) return -1;
        }
        return 0;
    default: /* DEC_METASPACE */
        for (size_t k = 0; k < in->n; k++) {
            const char *s = in->text.s + in->off[k];
            size_t n = in->len[k], i = 0;
            if (tl_add(o, "", 0)) return -1;
            while (i < n) {
                if (n - i >= st->ch_n && !memcmp(s + i, st->ch, st->ch_n)) {
                    if (!(k == 0 && st->scheme != SCHEME_NEVER) && tl_append(o, " ", 1)) return -1;
                    i += st->ch_n;
                } else {
                    if (tl_append(o, s + i, 1)) return -1;
                    i++;
                }
            }
        }
        return 0;
    }
}

int hftok_decode(HfTok *t, const uint32_t *ids, size_t n, int skip_special, char **out, size_t *outn, char *err,
                 size_t errlen) {
    *out = NULL;
    *outn = 0;
    if (t->dec_err[0]) return errorf(err, errlen, "%s", t->dec_err);
    TokList a = {0}, b = {0};
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        size_t tn;
        const char *s = hftok_token_text(t, ids[k], &tn);
        if (!s) {
            if (ids[k] >= t->vocab_size)
                rc = errorf(err, errlen, "token %u at position %zu is not below the vocabulary size %u", ids[k], k, t->vocab_size);
            else
                rc = errorf(err, errlen, "token %u at position %zu has no text in the vocabulary", ids[k], k);
            break;
        }
        if (skip_special && t->special[ids[k]]) continue;
        if (tl_add(&a, s, tn)) rc = errorf(err, errlen, "out of memory");
    }
    for (size_t k = 0; k < t->ndec && !rc; k++) {
        if (dec_step(&t->dec[k], &a, &b)) rc = errorf(err, errlen, "out of memory");
        TokList sw = a;
        a = b;
        b = sw;
    }
    Buf res = {0};
    for (size_t k = 0; k < a.n && !rc; k++)
        if ((t->dec_join_space && k && buf_put(&res, " ", 1)) || buf_put(&res, a.text.s + a.off[k], a.len[k]))
            rc = errorf(err, errlen, "out of memory");
    if (!rc && !res.s && buf_put(&res, "", 0)) rc = errorf(err, errlen, "out of memory");
    tl_free(&a);
    tl_free(&b);
    if (rc) {
        free(res.s);
        return -1;
    }
    *out = res.s;
    *outn = res.n;
    return 0;
}
