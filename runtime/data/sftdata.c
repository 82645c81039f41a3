/* sftdata: JSONL instruction samples into ids and a trained-token mask; see sftdata.h. */
#include "sftdata.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errorf.h"
#include "json.h"

/* transformers' ignore_index: a label that trains nothing */
#define SFT_IGNORE_LABEL (-100)

void sft_out_free(SftOut *o) {
    bpe_ids_free(&o->ids);
    free(o->trained);
    free(o->ends);
    memset(o, 0, sizeof *o);
}

int sft_out_end_sample(SftOut *o) {
    if (o->nends == o->ends_cap) {
        size_t c = o->ends_cap ? o->ends_cap * 2 : 256;
        size_t *e = realloc(o->ends, c * sizeof *e);
        if (!e) return -1;
        o->ends = e, o->ends_cap = c;
    }
    o->ends[o->nends++] = o->ids.n;
    return 0;
}

int sft_parse_train_on(const char *s, SftTrainOn *t) {
    if (!strcmp(s, "all")) *t = SFT_TRAIN_ALL;
    else if (!strcmp(s, "completion") || !strcmp(s, "assistant")) *t = SFT_TRAIN_COMPLETION;
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
    if (sft_out_end_sample(out)) return errorf(err, errlen, "%s: out of memory", where);
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

/* ---- conversations ---- */

/* A growing string, for a message's other fields as JSON text. */
typedef struct Str {
    char *p;
    size_t n, cap;
    bool oom;
} Str;

static void str_add(Str *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q, b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void str_json_string(Str *b, const char *s, size_t n) {
    str_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') e[0] = '\\', e[1] = (char)c, str_add(b, e, 2);
        else if (c < 0x20) str_add(b, e, (size_t)snprintf(e, sizeof e, "\\u%04x", c));
        else str_add(b, (const char *)&s[i], 1);
    }
    str_add(b, "\"", 1);
}

/* v as JSON text (a parsed value written again: the template reads it back). */
static void str_json(Str *b, const JsonValue *v) {
    char num[40];
    switch (v->type) {
    case JSON_NULL: str_add(b, "null", 4); break;
    case JSON_BOOL: v->boolean ? str_add(b, "true", 4) : str_add(b, "false", 5); break;
    case JSON_NUMBER:
        if (v->is_integer) str_add(b, num, (size_t)snprintf(num, sizeof num, "%" PRId64, v->integer));
        else str_add(b, num, (size_t)snprintf(num, sizeof num, "%.17g", v->number));
        break;
    case JSON_STRING: str_json_string(b, v->string, v->len); break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        str_add(b, v->type == JSON_ARRAY ? "[" : "{", 1);
        for (size_t i = 0; i < v->count; i++) {
            if (i) str_add(b, ",", 1);
            if (v->type == JSON_OBJECT) {
                str_json_string(b, v->items[i].key, v->items[i].key_len);
                str_add(b, ":", 1);
            }
            str_json(b, &v->items[i]);
        }
        str_add(b, v->type == JSON_ARRAY ? "]" : "}", 1);
        break;
    }
}

static bool known_role(const char *r) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", "ipython"};
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (!strcmp(r, roles[i])) return true;
    return false;
}

/* The index in whole[] of the token holding byte `at` of text: the text
 * before `at` tokenized on its own is a prefix of whole (a token edge:
 * that length) or it parts from whole at the token that straddles `at`
 * (*straddle set). */
static int token_edge(const SftOptions *o, const char *text, size_t at, const BpeIds *whole, size_t *edge, bool *straddle,
                      const char *where, char *err, size_t errlen) {
    BpeIds pre = {0};
    if (encode(o, text, at, &pre, where, err, errlen)) {
        bpe_ids_free(&pre);
        return -1;
    }
    size_t j = 0;
    while (j < pre.n && j < whole->n && pre.v[j] == whole->v[j]) j++;
    *straddle = j < pre.n;
    *edge = j;
    bpe_ids_free(&pre);
    return 0;
}

int sft_chat_render(const ChatTemplate *t, const JsonValue *msgs, const ChatRenderOptions *ro, const char *where,
                    ChatRender *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (msgs->type != JSON_ARRAY)
        return errorf(err, errlen, "%s: \"messages\" is %s, expected a list of messages", where, json_type_phrase(msgs->type));
    if (msgs->count == 0) return errorf(err, errlen, "%s: an empty conversation (\"messages\" is [])", where);
    ChatMessage *m = calloc(msgs->count, sizeof *m);
    Str *fields = calloc(msgs->count, sizeof *fields);
    int rc = 0;
    if (!m || !fields) rc = errorf(err, errlen, "%s: out of memory", where);
    for (size_t i = 0; !rc && i < msgs->count; i++) {
        const JsonValue *x = &msgs->items[i];
        if (x->type != JSON_OBJECT) {
            rc = errorf(err, errlen, "%s: message %zu is %s, expected an object with \"role\" and \"content\"", where, i + 1,
                        json_type_phrase(x->type));
            break;
        }
        const JsonValue *role = json_get(x, "role"), *content = json_get(x, "content");
        if (!role || role->type != JSON_STRING) {
            rc = errorf(err, errlen, "%s: message %zu has %s", where, i + 1, role ? "a \"role\" that is not a string" : "no \"role\"");
            break;
        }
        if (!known_role(role->string)) {
            rc = errorf(err, errlen, "%s: message %zu has the role \"%s\" (known: system, developer, user, assistant, tool, ipython)",
                        where, i + 1, role->string);
            break;
        }
        m[i].role = role->string;
        if (content && content->type == JSON_STRING) m[i].content = content->string, m[i].content_len = content->len;
        /* every other member, a non-string content too, as the message's fields */
        bool any = false;
        for (size_t k = 0; k < x->count; k++) {
            const JsonValue *f = &x->items[k];
            if (!strcmp(f->key, "role") || (!strcmp(f->key, "content") && f->type == JSON_STRING)) continue;
            str_add(&fields[i], any ? "," : "{", 1);
            str_json_string(&fields[i], f->key, f->key_len);
            str_add(&fields[i], ":", 1);
            str_json(&fields[i], f);
            any = true;
        }
        if (any) str_add(&fields[i], "}", 1);
        if (fields[i].oom) rc = errorf(err, errlen, "%s: out of memory", where);
        m[i].fields_json = any ? fields[i].p : NULL;
        if (!content && !any)
            rc = errorf(err, errlen, "%s: message %zu (%s) has no \"content\"", where, i + 1, role->string);
    }
    if (!rc) {
        char e[512];
        int x = chattmpl_render(t, m, msgs->count, ro, out, e, sizeof e);
        if (x == CHATTMPL_RAISED) rc = errorf(err, errlen, "%s: the chat template refuses the conversation: %s", where, e);
        else if (x) rc = errorf(err, errlen, "%s: the chat template: %s", where, e);
    }
    for (size_t i = 0; fields && i < msgs->count; i++) free(fields[i].p);
    free(fields);
    free(m);
    return rc;
}

static int conversation(const SftOptions *o, const JsonValue *msgs, const char *where, SftOut *out, SftStats *st,
                        char *err, size_t errlen) {
    if (!o->chat)
        return errorf(err, errlen, "%s: a conversation (\"messages\") needs the model's chat template: give --chat-template "
                      "(a tokenizer_config.json or a .jinja file), or a tokenizer whose directory has tokenizer_config.json", where);
    ChatRender r;
    int rc = sft_chat_render(o->chat, msgs, o->chat_opts, where, &r, err, errlen);
    BpeIds whole = {0};
    size_t start = out->ids.n;
    if (!rc) rc = encode(o, r.text, r.len, &whole, where, err, errlen);
    bool all = o->train_on == SFT_TRAIN_ALL;
    for (size_t i = 0; !rc && i < whole.n; i++)
        if (push(out, whole.v[i], all)) rc = errorf(err, errlen, "%s: out of memory", where);
    for (size_t k = 0; !rc && !all && k < r.nranges; k++) {
        if (r.ranges[k].end <= r.ranges[k].start) continue;
        size_t a, b;
        bool sa, sb;
        if (token_edge(o, r.text, r.ranges[k].start, &whole, &a, &sa, where, err, errlen) ||
            token_edge(o, r.text, r.ranges[k].end, &whole, &b, &sb, where, err, errlen)) {
            rc = -1;
            break;
        }
        /* a token straddling the end holds the range's last byte: in */
        if (sb && b < whole.n) b++;
        for (size_t t = a; t < b && t < whole.n; t++) out->trained[start + t] = 1;
    }
    if (!rc) {
        st->conversations++;
        rc = finish_sample(o, start, where, out, st, err, errlen);
    }
    bpe_ids_free(&whole);
    chattmpl_render_free(&r);
    return rc;
}

int sft_chat_template_load(const char *path, const char *tokenizer, ChatTemplate **out, char *err, size_t errlen) {
    *out = NULL;
    char e[1024];
    struct stat st;
    if (path) {
        size_t l = strlen(path);
        bool dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode), config = l >= 5 && !strcmp(path + l - 5, ".json");
        int rc = dir      ? chattmpl_load_dir(out, path, e, sizeof e)
                 : config ? chattmpl_load_config(out, path, e, sizeof e)
                          : chattmpl_load_file(out, path, e, sizeof e);
        if (rc) return errorf(err, errlen, "--chat-template: %.900s", e);
        return 0;
    }
    if (!tokenizer) return 0;
    char dir[4096], cfg[4200], tpl[4200];
    snprintf(dir, sizeof dir, "%s", tokenizer);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    /* the model directory's template: chat_template.jinja (what transformers
     * 5 saves), else the chat_template of tokenizer_config.json */
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(tpl, sizeof tpl, "%s/chat_template.jinja", dir);
    if (access(cfg, R_OK) != 0 && access(tpl, R_OK) != 0) return 0;
    if (chattmpl_load_dir(out, dir, e, sizeof e) == 0) return 0;
    /* a config without a template leaves conversations without one; a
     * broken template is an error */
    if (access(tpl, R_OK) != 0 && strstr(e, ": no chat_template (")) return 0;
    return errorf(err, errlen, "%.1000s", e);
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
    if (json_get(obj, "messages")) return conversation(o, json_get(obj, "messages"), where, out, st, err, errlen);
    char keys[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < obj->count && used < sizeof keys; i++) {
        int w = snprintf(keys + used, sizeof keys - used, "%s\"%s\"", i ? ", " : "", obj->items[i].key);
        if (w < 0) break;
        used += (size_t)w;
    }
    return errorf(err, errlen, "%s: a sample needs \"text\", \"prompt\" and \"completion\", \"messages\", or \"input_ids\" (it has %s)",
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
        progress_report(o->progress, "tokenizing", "B", at < n ? at : n, n);
    }
    st->tokens = (int64_t)out->ids.n;
    st->trained = 0;
    for (size_t i = 0; i < out->ids.n; i++) st->trained += out->trained[i];
    return 0;
}
