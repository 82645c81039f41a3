/* hftok_decode: ids -> text through the decoder chain; see hftok.h. */
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

