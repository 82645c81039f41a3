/* sftdata: JSONL instruction samples into ids and a trained-token mask; see sftdata.h. */
#include "sftdata.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errorf.h"
#include "json.h"

/* transformers' ignore_index: a label that trains nothing */
#define SFT_IGNORE_LABEL (-100)

void sft_out_free(SftOut *o) {
    bpe_ids_free(&o->ids);
    free(o->trained);
    memset(o, 0, sizeof *o);
}

int sft_parse_train_on(const char *s, SftTrainOn *t) {
    if (!strcmp(s, "all")) *t = SFT_TRAIN_ALL;
    else if (!strcmp(s, "completion")) *t = SFT_TRAIN_COMPLETION;
    else return -1;
    return 0;
}

static int grow_mask(SftOut *out) {
    if (out->trained_cap >= out->ids.cap) return 0;
    uint8_t *p = realloc(out->trained, out->ids.cap);
    if (!p) return -1;
    out->trained = p;
    out->trained_cap = out->ids.cap;
    return 0;
}

int sft_out_mark_trained(SftOut *o, size_t from) {
    if (grow_mask(o)) return -1;
    if (from < o->ids.n) memset(o->trained + from, 1, o->ids.n - from);
    return 0;
}

/* Appends one id and its mask bit. */
static int push(SftOut *out, uint32_t id, bool trained) {
    if (bpe_ids_push(&out->ids, id) || grow_mask(out)) return -1;
    out->trained[out->ids.n - 1] = trained;
    return 0;
}

/* Ends a sample that began at ids.n == start: its length checked against
 * max_tokens (truncated or refused), counted. */
static int finish_sample(const SftOptions *o, size_t start, const char *where, SftOut *out, SftStats *st, char *err,
                         size_t errlen) {
    size_t len = out->ids.n - start;
    if (o->max_tokens > 0 && (int64_t)len > o->max_tokens) {
        if (o->refuse_long)
            return errorf(err, errlen, "%s: the sample has %zu tokens, more than --max-tokens %" PRId64
                          " (--too-long truncate cuts it instead)", where, len, o->max_tokens);
        out->ids.n = start + (size_t)o->max_tokens;
        st->truncated++;
    }
    st->samples++;
    return 0;
}

static int encode(const SftOptions *o, const char *text, size_t n, BpeIds *ids, const char *where, char *err,
                  size_t errlen) {
    if (!o->tok) {
        for (size_t i = 0; i < n; i++)
            if (bpe_ids_push(ids, (uint8_t)text[i])) return errorf(err, errlen, "%s: out of memory", where);
        return 0;
    }
    char e[512];
    if (hftok_encode(o->tok, text, n, ids, e, sizeof e)) return errorf(err, errlen, "%s: %s", where, e);
    return 0;
}

int sft_add_pieces(const SftOptions *o, const SftPiece *p, size_t np, const char *where, SftOut *out, SftStats *st,
                   char *err, size_t errlen) {
    size_t start = out->ids.n;
    bool first = np ? p[0].trained : true, last = np ? p[np - 1].trained : true;
    for (size_t j = 0; j < o->nprefix; j++)
        if (push(out, o->prefix[j], first)) return errorf(err, errlen, "%s: out of memory", where);
    BpeIds piece = {0};
    for (size_t k = 0; k < np; k++) {
        piece.n = 0;
        if (encode(o, p[k].text, p[k].len, &piece, where, err, errlen)) {
            bpe_ids_free(&piece);
            return -1;
        }
        for (size_t i = 0; i < piece.n; i++)
            if (push(out, piece.v[i], p[k].trained)) {
                bpe_ids_free(&piece);
                return errorf(err, errlen, "%s: out of memory", where);
            }
    }
    bpe_ids_free(&piece);
    for (size_t j = 0; j < o->nsuffix; j++)
        if (push(out, o->suffix[j], last)) return errorf(err, errlen, "%s: out of memory", where);
    return finish_sample(o, start, where, out, st, err, errlen);
}

/* A member that must be a string: its value, or NULL with err set. */
static const JsonValue *string_member(const JsonValue *obj, const char *key, const char *where, char *err, size_t errlen) {
    const JsonValue *v = json_get(obj, key);
    if (!v) {
        errorf(err, errlen, "%s: \"%s\" is missing", where, key);
        return NULL;
    }
    if (v->type != JSON_STRING) {
        errorf(err, errlen, "%s: \"%s\" is %s, expected a string", where, key, json_type_phrase(v->type));
        return NULL;
    }
    return v;
}

static int pretokenized(const SftOptions *o, const JsonValue *obj, const char *where, SftOut *out, SftStats *st,
                        char *err, size_t errlen) {
    const JsonValue *ids = json_get(obj, "input_ids"), *labels = json_get(obj, "labels");
    if (ids->type != JSON_ARRAY)
        return errorf(err, errlen, "%s: \"input_ids\" is %s, expected an array of token ids", where,
                      json_type_phrase(ids->type));
    if (labels && labels->type == JSON_NULL) labels = NULL;
    if (labels && labels->type != JSON_ARRAY)
        return errorf(err, errlen, "%s: \"labels\" is %s, expected an array", where, json_type_phrase(labels->type));
    if (labels && labels->count != ids->count)
        return errorf(err, errlen, "%s: %zu labels for %zu input_ids: they must be as many", where, labels->count,
                      ids->count);
    int64_t vocab = o->tok ? (int64_t)hftok_vocab_size(o->tok) : 256;
    size_t start = out->ids.n;
    for (size_t i = 0; i < ids->count; i++) {
        const JsonValue *v = &ids->items[i];
        if (v->type != JSON_NUMBER || !v->is_integer)
            return errorf(err, errlen, "%s: input_ids[%zu] is %s, not a token id", where, i,
                          v->type == JSON_NUMBER ? "a fraction" : json_type_phrase(v->type));
        if (v->integer < 0 || v->integer >= vocab)
            return errorf(err, errlen, "%s: input_ids[%zu] = %" PRId64 " is outside the vocabulary of %" PRId64 " ids",
                          where, i, v->integer, vocab);
        bool trained = i > 0;
        if (labels) {
            const JsonValue *l = &labels->items[i];
            if (l->type != JSON_NUMBER || !l->is_integer)
                return errorf(err, errlen, "%s: labels[%zu] is %s, not a label", where, i,
                              l->type == JSON_NUMBER ? "a fraction" : json_type_phrase(l->type));
            if (l->integer == SFT_IGNORE_LABEL) trained = false;
            else if (l->integer != v->integer)
                return errorf(err, errlen,
                              "%s: labels[%zu] = %" PRId64 " is neither -100 nor input_ids[%zu] = %" PRId64
                              ": a token file trains each token to predict itself",
                              where, i, l->integer, i, v->integer);
        }
        if (push(out, (uint32_t)v->integer, trained)) return errorf(err, errlen, "%s: out of memory", where);
    }
    st->pretokenized++;
    return finish_sample(o, start, where, out, st, err, errlen);
}

/* One line's sample. */
static int sample(const SftOptions *o, const JsonValue *obj, const char *where, SftOut *out, SftStats *st, char *err,
                  size_t errlen) {
    if (obj->type != JSON_OBJECT)
        return errorf(err, errlen, "%s: a sample is a JSON object, not %s", where, json_type_phrase(obj->type));
    if (json_get(obj, "input_ids")) return pretokenized(o, obj, where, out, st, err, errlen);
    if (json_get(obj, "text")) {
        const JsonValue *t = string_member(obj, "text", where, err, errlen);
        if (!t) return -1;
        SftPiece p = {t->string, t->len, true};
        st->text++;
        return sft_add_pieces(o, &p, 1, where, out, st, err, errlen);
    }
    if (json_get(obj, "prompt") || json_get(obj, "completion")) {
        const JsonValue *pr = string_member(obj, "prompt", where, err, errlen);
        const JsonValue *co = pr ? string_member(obj, "completion", where, err, errlen) : NULL;
        if (!co) return -1;
        bool all = o->train_on == SFT_TRAIN_ALL;
        SftPiece p[2] = {{pr->string, pr->len, all}, {co->string, co->len, true}};
        st->prompt_completion++;
        return sft_add_pieces(o, p, 2, where, out, st, err, errlen);
    }
    if (json_get(obj, "messages"))
        return errorf(err, errlen, "%s: a conversation (\"messages\") needs the model's chat template, which zinftok does "
                      "not render: give \"prompt\" and \"completion\", or \"input_ids\" and \"labels\"", where);
    char keys[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < obj->count && used < sizeof keys; i++) {
        int w = snprintf(keys + used, sizeof keys - used, "%s\"%s\"", i ? ", " : "", obj->items[i].key);
        if (w < 0) break;
        used += (size_t)w;
    }
    return errorf(err, errlen, "%s: a sample needs \"text\", \"prompt\" and \"completion\", or \"input_ids\" (it has %s)",
                  where, obj->count ? keys : "no member");
}

int sft_read_jsonl(const SftOptions *o, const char *path, const char *text, size_t n, SftOut *out, SftStats *st,
                   char *err, size_t errlen) {
    size_t at = 0;
    for (int64_t line = 1; at < n; line++) {
        const char *nl = memchr(text + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - text) : n, len = end - at;
        char where[600];
        snprintf(where, sizeof where, "%s:%" PRId64, path, line);
        bool blank = true;
        for (size_t i = at; i < end && blank; i++) blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\r';
        if (!blank) {
            JsonDoc doc;
            char e[512];
            if (json_parse(text + at, len, &doc, e, sizeof e)) {
                json_free(&doc);
                /* one line: the parser's "line 1, " says nothing */
                const char *m = strncmp(e, "line 1, ", 8) ? e : e + 8;
                return errorf(err, errlen, "%s: malformed JSON: %s", where, m);
            }
            int rc = sample(o, doc.root, where, out, st, err, errlen);
            json_free(&doc);
            if (rc) return -1;
        }
        at = end + 1;
    }
    st->tokens = (int64_t)out->ids.n;
    st->trained = 0;
    for (size_t i = 0; i < out->ids.n; i++) st->trained += out->trained[i];
    return 0;
}
