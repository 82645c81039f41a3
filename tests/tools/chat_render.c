/* chat_render: renders a chat template over a set of conversations for
 * tests/e2e/chat_template.sh, which compares the results with
 * transformers' apply_chat_template.
 *   chat_render TEMPLATE CASES.json
 * TEMPLATE is a .jinja file, a tokenizer_config.json or a model directory. CASES.json is a
 * list of {"messages": [{role, content, "fields": JSON text}...],
 * "add_generation_prompt": b, "bos_token": s, "eos_token": s,
 * "vars": {name: JSON text}} (a message's content may be absent). Prints one JSON
 * object a line per case: {"text": ..., "ranges": [[message, start, end]]}
 * (byte offsets), or {"error": ..., "raised": true|false}. Exits 1 when the
 * template or the cases cannot be read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chattmpl.h"
#include "json.h"

static void put_json_str(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[len] = 0, *n = (size_t)len;
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: chat_render TEMPLATE CASES.json\n");
        return 2;
    }
    char err[1024];
    ChatTemplate *t;
    size_t tl = strlen(argv[1]);
    struct stat st;
    int rc = stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode) ? chattmpl_load_dir(&t, argv[1], err, sizeof err)
             : tl > 5 && !strcmp(argv[1] + tl - 5, ".json") ? chattmpl_load_config(&t, argv[1], err, sizeof err)
                                                             : chattmpl_load_file(&t, argv[1], err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    size_t n;
    char *js = slurp(argv[2], &n);
    JsonDoc doc;
    if (!js || json_parse(js, n, &doc, err, sizeof err) || doc.root->type != JSON_ARRAY) {
        fprintf(stderr, "%s: not a JSON list of cases\n", argv[2]);
        return 1;
    }
    for (size_t c = 0; c < doc.root->count; c++) {
        const JsonValue *cs = &doc.root->items[c];
        const JsonValue *ms = json_get_type(cs, "messages", JSON_ARRAY);
        const JsonValue *vars = json_get_type(cs, "vars", JSON_OBJECT);
        size_t nm = ms ? ms->count : 0, nv = vars ? vars->count : 0;
        ChatMessage *msgs = calloc(nm + 1, sizeof *msgs);
        ChatVar *cv = calloc(nv + 1, sizeof *cv);
        for (size_t i = 0; i < nm; i++) {
            const JsonValue *content = json_get_type(&ms->items[i], "content", JSON_STRING);
            msgs[i].role = json_get_str(&ms->items[i], "role");
            msgs[i].content = content ? content->string : NULL;
            msgs[i].content_len = content ? content->len : 0;
            msgs[i].fields_json = json_get_str(&ms->items[i], "fields");
        }
        for (size_t i = 0; i < nv; i++) {
            const JsonValue *v = &vars->items[i];
            cv[i] = (ChatVar){v->key, v->type == JSON_STRING ? v->string : "null"};
        }
        const char *bos = json_get_str(cs, "bos_token"), *eos = json_get_str(cs, "eos_token");
        if (bos) chattmpl_set_token(t, "bos_token", bos);
        if (eos) chattmpl_set_token(t, "eos_token", eos);
        ChatRenderOptions opts = {json_get_bool(cs, "add_generation_prompt", 0) == 1, cv, nv};
        ChatRender out;
        rc = chattmpl_render(t, msgs, nm, &opts, &out, err, sizeof err);
        if (rc) {
            printf("{\"error\": ");
            put_json_str(err, strlen(err));
            printf(", \"raised\": %s}\n", rc == CHATTMPL_RAISED ? "true" : "false");
        } else {
            printf("{\"text\": ");
            put_json_str(out.text, out.len);
            printf(", \"ranges\": [");
            for (size_t i = 0; i < out.nranges; i++)
                printf("%s[%zu, %zu, %zu]", i ? ", " : "", out.ranges[i].message, out.ranges[i].start, out.ranges[i].end);
            printf("]}\n");
            chattmpl_render_free(&out);
        }
        free(cv), free(msgs);
    }
    json_free(&doc);
    free(js);
    chattmpl_free(t);
    return 0;
}
