/* chattmpl_value: the values a template computes with (Python's str, int,
 * float, bool, None, list, dict, plus Jinja's undefined), their Python
 * conversions (str(), repr(), json.dumps(ensure_ascii=False)) and the
 * string operations that keep each byte's origin. Shared by chattmpl.c
 * (the evaluator) and chattmpl_value.c; not a public interface.
 *
 * Origins: a string's `tag` holds, for each byte, 0 for template text or
 * 1 + the index of the message whose content the byte came from (NULL:
 * all 0). Every operation that moves bytes moves their tags with them;
 * operations that make new text (tojson, repr, numbers) tag it 0. */
#ifndef ZINF_CHATTMPL_VALUE_H
#define ZINF_CHATTMPL_VALUE_H

#include <stdint.h>

#include "arena.h"

typedef enum VKind { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_METHOD, V_FUNC, V_MACRO } VKind;

typedef struct Str {
    const char *p;
    const uint32_t *tag;
    size_t n;
} Str;

typedef struct Val Val;
typedef struct List List;
typedef struct Dict Dict;

struct Val {
    VKind kind;
    union {
        int b;
        int64_t i;
        double f;
        Str s;       /* V_STR; V_UNDEF: the name that was undefined; V_FUNC, V_METHOD: the name */
        List *l;
        Dict *d;
        struct {
            const void *node;  /* V_MACRO: its CtNode */
            const void *frame; /* and the scope it was defined in */
        } macro;
    };
    Val *self; /* V_METHOD: the object */
};

/* What Python object a V_LIST stands for: they iterate alike but print,
 * compare, index and test differently. A generator (what Jinja's select,
 * map, unique, items and reverse filters return) is truthy even when
 * empty, has no length, and is used up by its first iteration. */
enum { L_LIST, L_TUPLE, L_GENERATOR, L_ITEMS, L_KEYS, L_VALUES, L_RANGE };

struct List {
    Val *v;
    size_t n, cap;
    int flavor;        /* L_* */
    int consumed;      /* L_GENERATOR: 1 iterated to the end, 2 partly */
    int64_t range[3];  /* L_RANGE: start, stop, step */
};

struct Dict {
    Str *k;
    Val *v;
    size_t n, cap;
    int is_namespace;
};

/* A growable byte buffer with tags, in an arena. */
typedef struct Buf {
    Arena *a;
    char *p;
    uint32_t *tag;
    size_t n, cap;
    int tagged;
} Buf;

Str str_lit(const char *s);
Str str_of(const char *p, size_t n);
int str_eq(Str a, const char *s);
/* 0 when out of memory (the arena says so). */
int buf_put(Buf *b, const char *p, const uint32_t *tag, size_t n);
int buf_puts(Buf *b, const char *s);
Str buf_str(Buf *b);

Val v_str(Str s);
Val v_int(int64_t i);
Val v_bool(int b);
Val v_none(void);
List *list_new(Arena *a, size_t cap);
int list_push(Arena *a, List *l, Val v);
Dict *dict_new(Arena *a);
/* Sets key to v (replacing). 0 when out of memory. */
int dict_set(Arena *a, Dict *d, Str key, Val v);
/* The value of key, or NULL. */
Val *dict_get(const Dict *d, Str key);

const char *v_typename(const Val *v);
int v_truthy(const Val *v);
/* Python's ==: 1 or 0; -1 when the values nest deeper than
 * CHATTMPL_MAX_DEPTH (Python would raise RecursionError); -2 when one is a
 * generator, dict view or range (not compared here). */
int v_equal(const Val *a, const Val *b, int depth);

/* Python's str(v) into b (strings keep their tags); -1 for a value with
 * no text (a function) or nested too deep, -2 for a generator (whose text
 * is its address). */
int v_to_str(Buf *b, const Val *v);
/* json.dumps(v, ensure_ascii=False, indent=indent (-1: None)); -1 for a
 * value JSON cannot hold (undefined, a function). */
int v_to_json(Buf *b, const Val *v, int indent, int level, int depth);

/* The one message all of v's strings came from (1 + its index), or 0 when
 * they came from several, from the template, or v holds no string. */
uint32_t v_origin(const Val *v, int depth);

/* UTF-8: the number of code points of s, and the byte offset of code
 * point k (k <= the count). */
size_t utf8_count(Str s);
size_t utf8_offset(Str s, size_t k);
/* Python's str.isspace() for the character at s.p[i]: its length in
 * bytes, or 0 when it is not white space. And for the character ending at i. */
size_t ws_at(Str s, size_t i);
size_t ws_before(Str s, size_t i);
Str str_slice(Str s, size_t from, size_t to);
/* Python's strip/lstrip/rstrip: chars NULL for white space. */
Str str_strip(Str s, const Str *chars, int left, int right);

#endif
