/* json: a strict JSON (RFC 8259) reader for the files zinf takes from the
 * outside: Hugging Face config.json, tokenizer.json, safetensors headers
 * and their shard index. It owns the parsed document: every value, key and
 * string lives in the document's arena and goes with json_free.
 *
 * Untrusted input: the text is bounds-checked throughout, nesting is
 * limited (JSON_MAX_DEPTH), strings are validated UTF-8 with \u escapes
 * (surrogate pairs joined) decoded, numbers must match the grammar, and
 * nothing may follow the value but white space. An error names the line and
 * column ("line 3, column 14: expected ':' after an object key").
 * Duplicate keys are kept in order; json_get returns the last, as Python's
 * json and serde_json do. */
#ifndef ZINF_JSON_H
#define ZINF_JSON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "arena.h"

enum { JSON_MAX_DEPTH = 256 };

typedef enum JsonType { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue JsonValue;
struct JsonValue {
    JsonType type;
    bool boolean;          /* JSON_BOOL */
    bool is_integer;       /* JSON_NUMBER written without fraction or exponent, and fits int64 */
    double number;         /* JSON_NUMBER */
    int64_t integer;       /* then its exact value */
    const char *string;    /* JSON_STRING: UTF-8, NUL-terminated (may hold NULs: use len) */
    size_t len;
    JsonValue *items;      /* JSON_ARRAY: elements; JSON_OBJECT: members, each with its key */
    size_t count;
    const char *key;       /* a member of an object: its key (NUL-terminated) */
    size_t key_len;
    size_t offset;         /* where the value starts in the text (for messages) */
};

typedef struct JsonDoc {
    Arena arena;
    JsonValue *root;
} JsonDoc;

/* Parses text[0..len). 0 on success (doc owns the result), -1 with err set
 * (doc then holds nothing; json_free is still safe). */
int json_parse(const char *text, size_t len, JsonDoc *doc, char *err, size_t errlen);
void json_free(JsonDoc *doc);

/* The member named key of an object (the last one when the key is repeated),
 * NULL if absent or obj is not an object. */
const JsonValue *json_get(const JsonValue *obj, const char *key);
/* Typed lookups: NULL when absent or of another type. */
const JsonValue *json_get_type(const JsonValue *obj, const char *key, JsonType type);
/* The string of member key (NUL-terminated; its length is the member's len),
 * NULL when absent or not a string. */
const char *json_get_str(const JsonValue *obj, const char *key);
/* Member key as a boolean: 1 or 0; dflt when absent or null; -1 when it is
 * of another type. */
int json_get_bool(const JsonValue *obj, const char *key, int dflt);
/* The name of a type, for messages ("object", "string"...). */
const char *json_type_name(JsonType type);
/* The same with its article ("an object", "a string", "null"...). */
const char *json_type_phrase(JsonType type);
/* 1-based line and column of a byte offset in text. */
void json_position(const char *text, size_t len, size_t offset, int *line, int *col);

#endif
