/* hftok: tokenizer.json -> pipeline, and the pipeline run; see hftok.h. */
#include "hftok.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hftok_impl.h"
#include "pretok.h"
#include "json.h"
#include "unicode.h"
#include "errorf.h"

/* ---- normalization ---- */

/* The normalized text of s[0..n) into b (which is cleared). */
int hft_normalize(const HfTok *t, const char *s, size_t n, Buf *b) {
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
int hft_marks_cut_safe(const HfTok *t, int byte_level) {
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
        if (hft_normalize(t, s, n, &t->normbuf)) return errorf(err, errlen, "out of memory");
        ns = t->normbuf.s;
        nn = t->normbuf.n;
    }
    if (t->norm.empty) return pre_run(t, 0, ns, nn, at == 0, out, err, errlen);
    if (hft_find_added(t, &t->norm, ns, nn, &t->segs_norm)) return errorf(err, errlen, "out of memory");
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
    if (hft_find_added(t, &t->raw, text, n, &t->segs_raw)) return errorf(err, errlen, "out of memory");
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

