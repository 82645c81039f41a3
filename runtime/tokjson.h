/* tokjson: a small, strict JSON reader for tokenizer.json files.
 * Owns: parsing RFC 8259 JSON text into a read-only tree (every node,
 * string and child array in one arena of the document), lookups in it,
 * and the error message of a malformed text ("line L, column C: what").
 * Strings are decoded to UTF-8 (\u escapes, surrogate pairs; a lone
 * surrogate is an error, as in serde_json) and may contain NUL bytes:
 * use their length. Nesting is limited to TOKJSON_MAX_DEPTH. */
#ifndef ZINF_TOKJSON_H
#define ZINF_TOKJSON_H

#include <stddef.h>
#include <stdint.h>

enum { TOKJSON_MAX_DEPTH = 256 };

typedef enum {
    TOKJSON_NULL,
    TOKJSON_FALSE,
    TOKJSON_TRUE,
    TOKJSON_NUMBER,
    TOKJSON_STRING,
    TOKJSON_ARRAY,
    TOKJSON_OBJECT,
} TokJsonType;

typedef struct TokJson {
    TokJsonType type;
    uint32_t n;             /* string: bytes; array/object: elements */
    const char *key;        /* member of an object: its key (NUL-terminated), else NULL */
    uint32_t keylen;
    int is_int;             /* number written as an integer that fits int64 */
    int64_t i;              /* its value when is_int */
    double num;             /* number */
    const char *str;        /* string (NUL-terminated, n bytes) */
    const struct TokJson *kids; /* array elements / object members, n of them */
} TokJson;

typedef struct TokJsonDoc TokJsonDoc;

/* Parses text[0..n). Returns 0 with *doc (free with tokjson_free), or -1
 * with "line L, column C: message" in err. */
int tokjson_parse(const char *text, size_t n, TokJsonDoc **doc, char *err, size_t errlen);
const TokJson *tokjson_root(const TokJsonDoc *doc);
void tokjson_free(TokJsonDoc *doc);

/* The member `key` of an object (the last one when repeated), or NULL
 * when obj is not an object or has no such member. */
const TokJson *tokjson_get(const TokJson *obj, const char *key);
/* The string value of member `key`, or NULL when absent or not a string. */
const char *tokjson_get_str(const TokJson *obj, const char *key);
/* Member `key` as a boolean: dflt when absent or null; -1 when it is
 * something else. */
int tokjson_get_bool(const TokJson *obj, const char *key, int dflt);
/* "null", "a string", "an object", ... for messages. */
const char *tokjson_type_name(TokJsonType t);

#endif
