/* fuzz_json: the strict JSON reader (runtime/base/json.c) on any bytes, as
 * every Hugging Face file zinf reads reaches it first: json_parse, then a
 * walk over the whole document that touches every value through the
 * accessors (json_get, json_get_type for each type, json_get_str,
 * json_get_bool on each member's key, and a key that is absent), checks the
 * invariants the header promises (NUL-terminated strings and keys of their
 * stated length, integers that are exact, offsets inside the text) and
 * json_position of each value. A parse error must come with a message and
 * leave the document empty. A crash, a sanitizer report or a broken
 * invariant (abort) is a finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"
#include "json.h"

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_json: broken invariant: %s\n", what);
        abort();
    }
}

static void walk(const JsonValue *v, const char *text, size_t len, unsigned *sum) {
    check(v->offset < len, "offset inside the text");
    int line, col;
    json_position(text, len, v->offset, &line, &col);
    check(line >= 1 && col >= 1, "a 1-based position");
    *sum += (unsigned)strlen(json_type_name(v->type)) + (unsigned)strlen(json_type_phrase(v->type));
    switch (v->type) {
    case JSON_STRING:
        check(v->string != NULL && v->string[v->len] == '\0', "a NUL-terminated string");
        break;
    case JSON_NUMBER:
        if (v->is_integer) check((double)v->integer == v->number, "an integer's number is its value");
        break;
    case JSON_ARRAY:
        for (size_t i = 0; i < v->count; i++) walk(&v->items[i], text, len, sum);
        break;
    case JSON_OBJECT:
        for (size_t i = 0; i < v->count; i++) {
            const JsonValue *m = &v->items[i];
            check(m->key != NULL && m->key[m->key_len] == '\0', "a NUL-terminated key");
            /* the last member of that name: at or after this one when the key has no NUL */
            const JsonValue *last = json_get(v, m->key);
            if (strlen(m->key) == m->key_len) check(last != NULL && last >= m, "json_get finds the last member");
            for (int t = JSON_NULL; t <= JSON_OBJECT; t++) {
                const JsonValue *typed = json_get_type(v, m->key, (JsonType)t);
                check(!typed || typed->type == (JsonType)t, "json_get_type's type");
            }
            const char *s = json_get_str(v, m->key);
            if (s) *sum += (unsigned)s[0];
            int b = json_get_bool(v, m->key, 7);
            check(b == 0 || b == 1 || b == 7 || b == -1, "json_get_bool's values");
            walk(m, text, len, sum);
        }
        if (!json_get(v, "\001absent")) check(json_get_bool(v, "\001absent", 5) == 5, "an absent member's default");
        break;
    default:
        break;
    }
    check(json_get(v, "x") == NULL || v->type == JSON_OBJECT, "json_get on a non-object");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    JsonDoc doc;
    char err[256] = "";
    const char *text = (const char *)data;
    if (json_parse(text, size, &doc, err, sizeof err) == 0) {
        unsigned sum = 0;
        check(doc.root != NULL, "a root");
        walk(doc.root, text, size, &sum);
        fprintf(fuzz_sink(), "json: ok (%u)\n", sum);
    } else {
        check(err[0] != '\0', "a message");
        check(doc.root == NULL, "no root after an error");
        fprintf(fuzz_sink(), "json: %s\n", err);
    }
    json_free(&doc);
    return 0;
}
