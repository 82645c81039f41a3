/* hftok_load: tokenizer.json -> the pipeline; see hftok.h. */
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
    if (!t->added_at || !t->special || hft_trie_init(&t->raw) || hft_trie_init(&t->norm)) return lfail(l, "out of memory");
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
            if (!a->normalized) rc = hft_trie_add(&t->raw, a->content, a->n, a->id);
            else if (hft_normalize(t, a->content, a->n, &pat) || !(a->text = dupn(pat.s, pat.n))) rc = -1;
            else {
                a->text_n = pat.n;
                rc = hft_trie_add(&t->norm, pat.s, pat.n, a->id);
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
    if (!rc) t->cut_at_marks = hft_marks_cut_safe(t, byte_level);
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

