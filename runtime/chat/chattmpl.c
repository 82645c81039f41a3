/* chattmpl: loading templates and special tokens, and one render: the
 * variables a template sees, the run of chattmpl_eval.c over the tree
 * chattmpl_parse.c built, the assistant ranges from the output's tags (see
 * chattmpl.h). A render owns one arena for every value it makes; the text
 * and ranges it returns are copied out of it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chattmpl_eval.h"
#include "json.h"

/* ---- values from JSON (extra variables) ---- */

/* A JSON value as a template value; its strings' bytes tagged `tag` (a
 * message's fields: 1 + its index; variables: 0). */
static int from_json(Render *r, const JsonValue *j, uint32_t tag, Val *out, int depth) {
    if (depth > CHATTMPL_MAX_DEPTH) return ct_fail(r, 0, "a variable nests deeper than %d", CHATTMPL_MAX_DEPTH);
    switch (j->type) {
    case JSON_NULL: *out = v_none(); return 0;
    case JSON_BOOL: *out = v_bool(j->boolean); return 0;
    case JSON_NUMBER: *out = j->is_integer ? v_int(j->integer) : (Val){.kind = V_FLOAT, .f = j->number}; return 0;
    case JSON_STRING: {
        char *p = arena_strndup(&r->a, j->string, j->len);
        uint32_t *tags = tag ? ARENA_NEWN(&r->a, uint32_t, j->len + 1) : NULL;
        if (!p || (tag && !tags)) return ct_oom(r, 0);
        for (size_t k = 0; tags && k < j->len; k++) tags[k] = tag;
        *out = v_str((Str){p, tags, j->len});
        return 0;
    }
    case JSON_ARRAY: {
        List *l = list_new(&r->a, j->count);
        if (!l) return ct_oom(r, 0);
        for (size_t i = 0; i < j->count; i++) {
            Val v;
            if (from_json(r, &j->items[i], tag, &v, depth + 1)) return -1;
            list_push(&r->a, l, v);
        }
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    default: {
        Dict *d = dict_new(&r->a);
        if (!d) return ct_oom(r, 0);
        for (size_t i = 0; i < j->count; i++) {
            Val v;
            char *k = arena_strndup(&r->a, j->items[i].key, j->items[i].key_len);
            if (!k || from_json(r, &j->items[i], tag, &v, depth + 1)) return r->rc ? -1 : ct_oom(r, 0);
            if (!dict_set(&r->a, d, str_of(k, j->items[i].key_len), v)) return ct_oom(r, 0);
        }
        *out = (Val){.kind = V_DICT, .d = d};
        return 0;
    }
    }
}

/* ---- the API ---- */

/* Message i as the dict a template sees: role, content (its bytes tagged
 * 1 + i), then the members of fields_json (tagged the same), with the
 * reasoning aliases transformers adds: `thinking` first and
 * `reasoning_content` last, from the first of reasoning_content, thinking,
 * reasoning that is set. */
static int message_value(Render *r, const ChatMessage *msg, size_t i, List *msgs) {
    static const char *const REASONING[] = {"reasoning_content", "thinking", "reasoning"};
    Dict *m = dict_new(&r->a);
    if (!m) return ct_oom(r, 0);
    JsonDoc doc = {0};
    const JsonValue *fields = NULL;
    if (msg->fields_json) {
        char jerr[256];
        if (json_parse(msg->fields_json, strlen(msg->fields_json), &doc, jerr, sizeof jerr)) {
            snprintf(r->err, r->errlen, "%s: message %zu: its fields are not JSON: %s", r->t->name, i, jerr);
            return r->rc = -1;
        }
        fields = doc.root;
        if (fields->type != JSON_OBJECT) {
            json_free(&doc);
            snprintf(r->err, r->errlen, "%s: message %zu: its fields are not a JSON object", r->t->name, i);
            return r->rc = -1;
        }
    }
    int rc = 0;
    Val reasoning = {.kind = V_UNDEF};
    for (int k = 0; k < 3 && fields && reasoning.kind == V_UNDEF && !rc; k++) {
        const JsonValue *v = json_get(fields, REASONING[k]);
        if (v && v->type != JSON_NULL) rc = from_json(r, v, (uint32_t)i + 1, &reasoning, 0);
    }
    if (!rc && reasoning.kind != V_UNDEF && !dict_set(&r->a, m, str_lit("thinking"), reasoning)) rc = ct_oom(r, 0);
    if (!rc && msg->role) {
        char *role = arena_strdup(&r->a, msg->role);
        if (!role || !dict_set(&r->a, m, str_lit("role"), v_str(str_lit(role)))) rc = ct_oom(r, 0);
    }
    if (!rc && msg->content) {
        char *content = arena_strndup(&r->a, msg->content, msg->content_len);
        uint32_t *tag = ARENA_NEWN(&r->a, uint32_t, msg->content_len + 1);
        if (!content || !tag) rc = ct_oom(r, 0);
        for (size_t k = 0; !rc && k < msg->content_len; k++) tag[k] = (uint32_t)i + 1;
        if (!rc && !dict_set(&r->a, m, str_lit("content"), v_str((Str){content, tag, msg->content_len}))) rc = ct_oom(r, 0);
    }
    for (size_t k = 0; fields && k < fields->count && !rc; k++) {
        const JsonValue *f = &fields->items[k];
        if ((!strcmp(f->key, "role") && msg->role) || (!strcmp(f->key, "content") && msg->content)) continue;
        Val v;
        char *key = arena_strndup(&r->a, f->key, f->key_len);
        if (!key) rc = ct_oom(r, 0);
        else if (!(rc = from_json(r, f, (uint32_t)i + 1, &v, 0)) && !dict_set(&r->a, m, str_of(key, f->key_len), v))
            rc = ct_oom(r, 0);
    }
    if (!rc && reasoning.kind != V_UNDEF && !dict_set(&r->a, m, str_lit("reasoning_content"), reasoning)) rc = ct_oom(r, 0);
    json_free(&doc);
    if (!rc && !list_push(&r->a, msgs, (Val){.kind = V_DICT, .d = m})) rc = ct_oom(r, 0);
    return rc ? -1 : 0;
}

static const char *const END_MARKERS[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>",
                                          "</s>", "<|endoftext|>", NULL};

int chattmpl_render(const ChatTemplate *t, const ChatMessage *messages, size_t n, const ChatRenderOptions *opts,
                    ChatRender *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    Render r = {.t = t, .err = err, .errlen = errlen};
    arena_init(&r.a);
    r.out = (Buf){.a = &r.a};
    Frame globals = {dict_new(&r.a), NULL};
    r.frame = &globals;
    List *msgs = list_new(&r.a, n);
    int rc = 0;
    if (!globals.vars || !msgs) rc = ct_oom(&r, 0);
    for (size_t i = 0; i < n && !rc; i++)
        if (message_value(&r, &messages[i], i, msgs)) rc = -1;
    if (!rc) {
        Dict *g = globals.vars;
        dict_set(&r.a, g, str_lit("messages"), (Val){.kind = V_LIST, .l = msgs});
        dict_set(&r.a, g, str_lit("add_generation_prompt"), v_bool(opts && opts->add_generation_prompt));
        dict_set(&r.a, g, str_lit("tools"), v_none());
        dict_set(&r.a, g, str_lit("documents"), v_none());
        for (size_t i = 0; i < t->ntokens; i++)
            dict_set(&r.a, g, str_lit(t->tokens[i].name), v_str(str_lit(t->tokens[i].value)));
        for (size_t i = 0; opts && i < opts->nvars && !rc; i++) {
            JsonDoc doc;
            char jerr[256];
            const char *js = opts->vars[i].json ? opts->vars[i].json : "null";
            if (json_parse(js, strlen(js), &doc, jerr, sizeof jerr)) {
                snprintf(err, errlen, "%s: the variable '%s' is not JSON: %s", t->name, opts->vars[i].name, jerr);
                rc = r.rc = -1;
            } else {
                Val v;
                rc = from_json(&r, doc.root, 0, &v, 0);
                if (!rc && !dict_set(&r.a, g, str_lit(arena_strdup(&r.a, opts->vars[i].name)), v)) rc = ct_oom(&r, 0);
            }
            json_free(&doc);
        }
        if (r.a.failed) rc = ct_oom(&r, 0);
    }
    if (!rc) rc = ct_exec_block(&r, t->body);
    if (!rc && r.control) /* the parser allows them only in loops: a guard */
        rc = ct_fail(&r, 0, "'break' or 'continue' outside a loop");
    if (rc) {
        int code = r.rc ? r.rc : -1;
        arena_free(&r.a);
        return code;
    }
    /* the ranges, then copy out */
    Str text = buf_str(&r.out);
    out->text = malloc(text.n + 1);
    size_t nspans = r.ngen / 2, cap = (n > nspans ? n : nspans) + 1;
    out->ranges = malloc(cap * sizeof *out->ranges);
    size_t *first = malloc((n + 1) * sizeof *first), *last = malloc((n + 1) * sizeof *last);
    if (!out->text || !out->ranges || !first || !last) {
        free(out->text), free(out->ranges), free(first), free(last);
        memset(out, 0, sizeof *out);
        snprintf(err, errlen, "%s: out of memory", t->name);
        arena_free(&r.a);
        return -1;
    }
    memcpy(out->text, text.p, text.n);
    out->text[text.n] = 0;
    out->len = text.n;
    const char *eos = chattmpl_token(t, "eos_token");
    /* where each message's content went: its first and last output byte */
    for (size_t i = 0; i < n; i++) first[i] = SIZE_MAX, last[i] = 0;
    for (size_t k = 0; text.tag && k < text.n; k++) {
        uint32_t m = text.tag[k];
        if (m == 0 || m > n) continue;
        if (first[m - 1] == SIZE_MAX) first[m - 1] = k;
        last[m - 1] = k;
    }
    if (t->has_generation) {
        /* the template's own {% generation %} blocks, as transformers'
         * return_assistant_tokens_mask takes them */
        for (size_t g = 0; g < nspans; g++) {
            size_t s = r.gen[2 * g], e = r.gen[2 * g + 1], who = CHATTMPL_NO_MESSAGE;
            for (size_t k = s; text.tag && k < e && who == CHATTMPL_NO_MESSAGE; k++)
                if (text.tag[k] && text.tag[k] <= n && messages[text.tag[k] - 1].role &&
                    !strcmp(messages[text.tag[k] - 1].role, "assistant"))
                    who = text.tag[k] - 1;
            out->ranges[out->nranges++] = (ChatRange){who, s, e};
        }
    } else
        for (size_t i = 0; i < n; i++) {
            if (!messages[i].role || strcmp(messages[i].role, "assistant") || first[i] == SIZE_MAX) continue;
            /* on to the end of the first end-of-turn marker in the template
             * text that follows, before any other message's bytes */
            size_t end = last[i] + 1, stop = end;
            while (stop < text.n && !text.tag[stop]) stop++;
            for (size_t k = end; k < stop; k++) {
                size_t best = 0;
                for (int m = -1; m < 0 || END_MARKERS[m]; m++) {
                    const char *mk = m < 0 ? eos : END_MARKERS[m];
                    size_t ml = mk ? strlen(mk) : 0;
                    if (ml > best && k + ml <= stop && !memcmp(text.p + k, mk, ml)) best = ml;
                }
                if (best) {
                    end = k + best;
                    break;
                }
            }
            out->ranges[out->nranges++] = (ChatRange){i, first[i], end};
        }
    free(first), free(last);
    arena_free(&r.a);
    return 0;
}

void chattmpl_render_free(ChatRender *r) {
    if (!r) return;
    free(r->text);
    free(r->ranges);
    memset(r, 0, sizeof *r);
}

static ChatTemplate *template_new(const char *name) {
    ChatTemplate *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    arena_init(&t->arena);
    t->name = arena_strdup(&t->arena, name ? name : "chat template");
    if (!t->name) {
        chattmpl_free(t);
        return NULL;
    }
    return t;
}

int chattmpl_parse(ChatTemplate **out, const char *name, const char *src, size_t n, char *err, size_t errlen) {
    *out = NULL;
    ChatTemplate *t = template_new(name);
    if (!t) {
        snprintf(err, errlen, "%s: out of memory", name ? name : "chat template");
        return -1;
    }
    if (chattmpl_parse_into(t, src, n, err, errlen)) {
        chattmpl_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

static char *read_file(const char *path, size_t *n, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        if (cap >= (size_t)1 << 30) {
            free(buf);
            buf = NULL;
            fclose(f);
            snprintf(err, errlen, "%s: larger than 1 GiB", path);
            return NULL;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb, cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "%s: %s", path, bad ? "read error" : "out of memory");
        return NULL;
    }
    *n = len;
    return buf;
}

int chattmpl_load_file(ChatTemplate **out, const char *path, char *err, size_t errlen) {
    size_t n;
    *out = NULL;
    char *src = read_file(path, &n, err, errlen);
    if (!src) return -1;
    int rc = chattmpl_parse(out, path, src, n, err, errlen);
    free(src);
    return rc;
}

/* The special tokens of a tokenizer_config.json: strings or {"content": ...}. */
static int config_tokens(ChatTemplate *t, const JsonValue *root, const char *name, char *err, size_t errlen) {
    static const char *const TOKENS[] = {"bos_token", "eos_token", "unk_token", "pad_token", NULL};
    for (int i = 0; TOKENS[i]; i++) {
        const JsonValue *v = json_get(root, TOKENS[i]);
        const char *s = v && v->type == JSON_STRING ? v->string : v && v->type == JSON_OBJECT ? json_get_str(v, "content") : NULL;
        if (s && chattmpl_set_token(t, TOKENS[i], s)) {
            snprintf(err, errlen, "%s: out of memory", name);
            return -1;
        }
    }
    return 0;
}

/* A config's chat_template, parsed with the config's special tokens;
 * `template_file`, when not NULL, is the text of a chat_template.jinja
 * beside it, which comes first as in transformers. */
static int from_config(ChatTemplate **out, const char *name, const char *json, size_t n, const char *template_file,
                       const char *template_src, size_t template_len, char *err, size_t errlen) {
    *out = NULL;
    JsonDoc doc;
    char jerr[256];
    if (json_parse(json, n, &doc, jerr, sizeof jerr)) {
        snprintf(err, errlen, "%s: malformed JSON: %s", name, jerr);
        return -1;
    }
    if (template_file) {
        int rc = chattmpl_parse(out, template_file, template_src, template_len, err, errlen);
        if (!rc && config_tokens(*out, doc.root, name, err, errlen)) {
            chattmpl_free(*out);
            *out = NULL;
            rc = -1;
        }
        json_free(&doc);
        return rc;
    }
    const JsonValue *ct = json_get(doc.root, "chat_template"), *src = NULL;
    if (ct && ct->type == JSON_STRING) src = ct;
    else if (ct && ct->type == JSON_ARRAY) {
        for (size_t i = 0; i < ct->count; i++) {
            const char *nm = json_get_str(&ct->items[i], "name");
            const JsonValue *tx = json_get_type(&ct->items[i], "template", JSON_STRING);
            if (nm && tx && !strcmp(nm, "default")) src = tx;
        }
        if (!src) {
            snprintf(err, errlen, "%s: chat_template lists no template named \"default\"", name);
            json_free(&doc);
            return -1;
        }
    } else {
        snprintf(err, errlen, "%s: %s", name, ct ? "chat_template is neither a string nor a list of {name, template}"
                                                 : "no chat_template (give the template as a file)");
        json_free(&doc);
        return -1;
    }
    char tname[512];
    snprintf(tname, sizeof tname, "%s: chat_template", name);
    int rc = chattmpl_parse(out, tname, src->string, src->len, err, errlen);
    if (!rc && config_tokens(*out, doc.root, name, err, errlen)) {
        chattmpl_free(*out);
        *out = NULL;
        rc = -1;
    }
    json_free(&doc);
    return rc;
}

int chattmpl_from_config_json(ChatTemplate **out, const char *name, const char *json, size_t n, char *err,
                              size_t errlen) {
    return from_config(out, name, json, n, NULL, NULL, 0, err, errlen);
}

int chattmpl_load_dir(ChatTemplate **out, const char *dir, char *err, size_t errlen) {
    char cfg_path[4096], tpl_path[4096];
    *out = NULL;
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    snprintf(tpl_path, sizeof tpl_path, "%s/chat_template.jinja", dir);
    size_t cn = 0, tn = 0;
    char *cfg = NULL, *tpl = NULL;
    FILE *probe = fopen(tpl_path, "rb");
    if (probe) {
        fclose(probe);
        if (!(tpl = read_file(tpl_path, &tn, err, errlen))) return -1;
    }
    probe = fopen(cfg_path, "rb");
    if (probe) {
        fclose(probe);
        if (!(cfg = read_file(cfg_path, &cn, err, errlen))) {
            free(tpl);
            return -1;
        }
    }
    int rc;
    if (cfg) rc = from_config(out, cfg_path, cfg, cn, tpl ? tpl_path : NULL, tpl, tn, err, errlen);
    else if (tpl) rc = chattmpl_parse(out, tpl_path, tpl, tn, err, errlen);
    else {
        snprintf(err, errlen, "%s: no chat template (neither chat_template.jinja nor tokenizer_config.json)", dir);
        rc = -1;
    }
    free(cfg);
    free(tpl);
    return rc;
}

int chattmpl_load_config(ChatTemplate **out, const char *path, char *err, size_t errlen) {
    size_t n;
    *out = NULL;
    char *js = read_file(path, &n, err, errlen);
    if (!js) return -1;
    int rc = chattmpl_from_config_json(out, path, js, n, err, errlen);
    free(js);
    return rc;
}

void chattmpl_free(ChatTemplate *t) {
    if (!t) return;
    arena_free(&t->arena);
    free(t->tokens);
    free(t);
}

int chattmpl_set_token(ChatTemplate *t, const char *name, const char *value) {
    char *v = arena_strdup(&t->arena, value);
    if (!v) return -1;
    for (size_t i = 0; i < t->ntokens; i++)
        if (!strcmp(t->tokens[i].name, name)) {
            t->tokens[i].value = v;
            return 0;
        }
    if (t->ntokens == t->captokens) {
        size_t cap = t->captokens ? t->captokens * 2 : 4;
        CtToken *nt = realloc(t->tokens, cap * sizeof *nt);
        if (!nt) return -1;
        t->tokens = nt, t->captokens = cap;
    }
    const char *nm = arena_strdup(&t->arena, name);
    if (!nm) return -1;
    t->tokens[t->ntokens++] = (CtToken){nm, v};
    return 0;
}

const char *chattmpl_token(const ChatTemplate *t, const char *name) {
    for (size_t i = 0; i < t->ntokens; i++)
        if (!strcmp(t->tokens[i].name, name)) return t->tokens[i].value;
    return NULL;
}
