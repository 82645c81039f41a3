/* chattmpl_value: values, their Python conversions and the tag-keeping
 * string operations of chattmpl (see chattmpl_value.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chattmpl.h"
#include "chattmpl_value.h"

Str str_of(const char *p, size_t n) { return (Str){p, NULL, n}; }
Str str_lit(const char *s) { return str_of(s, strlen(s)); }
int str_eq(Str a, const char *s) { return a.n == strlen(s) && !memcmp(a.p, s, a.n); }

static int buf_grow(Buf *b, size_t need) {
    if (b->n + need <= b->cap) return 1;
    if (b->n + need > (size_t)CHATTMPL_MAX_MEMORY) return 0;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + need) cap *= 2;
    char *np = arena_alloc(b->a, cap + 1);
    uint32_t *nt = b->tagged ? ARENA_NEWN(b->a, uint32_t, cap) : NULL;
    if (!np || (b->tagged && !nt)) return 0;
    if (b->n) memcpy(np, b->p, b->n);
    if (b->tagged && b->n) memcpy(nt, b->tag, b->n * sizeof *nt);
    b->p = np, b->tag = nt, b->cap = cap;
    return 1;
}

int buf_put(Buf *b, const char *p, const uint32_t *tag, size_t n) {
    if (tag && !b->tagged) {
        /* the first tagged bytes: from now on every byte has a tag */
        uint32_t *nt = ARENA_NEWN(b->a, uint32_t, b->cap ? b->cap : 1);
        if (!nt) return 0;
        b->tag = nt, b->tagged = 1;
    }
    if (!buf_grow(b, n)) return 0;
    if (n) memcpy(b->p + b->n, p, n);
    if (b->tagged) {
        if (tag) memcpy(b->tag + b->n, tag, n * sizeof *tag);
        else memset(b->tag + b->n, 0, n * sizeof *b->tag);
    }
    b->n += n;
    return 1;
}

int buf_puts(Buf *b, const char *s) { return buf_put(b, s, NULL, strlen(s)); }

Str buf_str(Buf *b) {
    if (b->p) b->p[b->n] = 0;
    return (Str){b->p ? b->p : "", b->tagged ? b->tag : NULL, b->n};
}

Val v_str(Str s) { return (Val){.kind = V_STR, .s = s}; }
Val v_int(int64_t i) { return (Val){.kind = V_INT, .i = i}; }
Val v_bool(int b) { return (Val){.kind = V_BOOL, .b = !!b}; }
Val v_none(void) { return (Val){.kind = V_NONE}; }

List *list_new(Arena *a, size_t cap) {
    List *l = ARENA_NEW(a, List);
    if (!l) return NULL;
    if (cap) {
        l->v = ARENA_NEWN(a, Val, cap);
        if (!l->v) return NULL;
        l->cap = cap;
    }
    return l;
}

int list_push(Arena *a, List *l, Val v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        Val *nv = ARENA_NEWN(a, Val, cap);
        if (!nv) return 0;
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv, l->cap = cap;
    }
    l->v[l->n++] = v;
    return 1;
}

Dict *dict_new(Arena *a) { return ARENA_NEW(a, Dict); }

Val *dict_get(const Dict *d, Str key) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].n == key.n && !memcmp(d->k[i].p, key.p, key.n)) return &d->v[i];
    return NULL;
}

int dict_set(Arena *a, Dict *d, Str key, Val v) {
    Val *old = dict_get(d, key);
    if (old) {
        *old = v;
        return 1;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        Str *nk = ARENA_NEWN(a, Str, cap);
        Val *nv = ARENA_NEWN(a, Val, cap);
        if (!nk || !nv) return 0;
        if (d->n) memcpy(nk, d->k, d->n * sizeof *nk), memcpy(nv, d->v, d->n * sizeof *nv);
        d->k = nk, d->v = nv, d->cap = cap;
    }
    d->k[d->n] = (Str){key.p, NULL, key.n};
    d->v[d->n++] = v;
    return 1;
}

const char *v_typename(const Val *v) {
    static const char *const names[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list", "dict",
                                        "method", "function", "macro"};
    if (v->kind == V_DICT && v->d->is_namespace) return "namespace";
    if (v->kind == V_LIST) {
        static const char *const flavors[] = {"list", "tuple", "generator", "dict_items", "dict_keys", "dict_values",
                                              "range"};
        return flavors[v->l->flavor];
    }
    return names[v->kind];
}

int v_truthy(const Val *v) {
    switch (v->kind) {
    case V_UNDEF: case V_NONE: return 0;
    case V_BOOL: return v->b;
    case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0;
    case V_STR: return v->s.n != 0;
    case V_LIST: return v->l->flavor == L_GENERATOR || v->l->n != 0;
    case V_DICT: return v->d->is_namespace || v->d->n != 0;
    default: return 1;
    }
}

static int is_num(const Val *v) { return v->kind == V_INT || v->kind == V_BOOL || v->kind == V_FLOAT; }
static double num(const Val *v) { return v->kind == V_FLOAT ? v->f : v->kind == V_INT ? (double)v->i : v->b; }

int v_equal(const Val *a, const Val *b, int depth) {
    if (depth > CHATTMPL_MAX_DEPTH) return -1;
    if (is_num(a) && is_num(b)) {
        if (a->kind != V_FLOAT && b->kind != V_FLOAT)
            return (a->kind == V_INT ? a->i : a->b) == (b->kind == V_INT ? b->i : b->b);
        return num(a) == num(b);
    }
    if (a->kind != b->kind) return 0;
    switch (a->kind) {
    case V_UNDEF: case V_NONE: return 1;
    case V_STR: return a->s.n == b->s.n && !memcmp(a->s.p, b->s.p, a->s.n);
    case V_LIST:
        if (a->l->flavor > L_TUPLE || b->l->flavor > L_TUPLE) return -2;
        if (a->l->n != b->l->n || a->l->flavor != b->l->flavor) return 0;
        for (size_t i = 0; i < a->l->n; i++) {
            int e = v_equal(&a->l->v[i], &b->l->v[i], depth + 1);
            if (e <= 0) return e;
        }
        return 1;
    case V_DICT:
        if (a->d->is_namespace || b->d->is_namespace) return a->d == b->d;
        if (a->d->n != b->d->n) return 0;
        for (size_t i = 0; i < a->d->n; i++) {
            Val *o = dict_get(b->d, a->d->k[i]);
            int e = o ? v_equal(&a->d->v[i], o, depth + 1) : 0;
            if (e <= 0) return e;
        }
        return 1;
    default: return a == b;
    }
}

/* Python's repr(float): the shortest digits that read back the same. */
static void float_repr(char *out, size_t n, double f) {
    if (isnan(f)) { snprintf(out, n, "nan"); return; }
    if (isinf(f)) { snprintf(out, n, f < 0 ? "-inf" : "inf"); return; }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, f);
        if (strtod(out, NULL) == f) break;
    }
    /* Python writes 1e+16 and up, and below 1e-4, with an exponent of at
     * least two digits; %g agrees; an integral value without one gets ".0" */
    if (!strpbrk(out, ".e")) strncat(out, ".0", n - strlen(out) - 1);
}

static int repr_str(Buf *b, Str s) {
    int has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (!buf_put(b, &q, NULL, 1)) return -1;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        char esc[8];
        const char *e = NULL;
        if (c == '\\') e = "\\\\";
        else if (c == (unsigned char)q) e = q == '\'' ? "\\'" : "\\\"";
        else if (c == '\n') e = "\\n";
        else if (c == '\r') e = "\\r";
        else if (c == '\t') e = "\\t";
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", c), e = esc;
        if (!(e ? buf_puts(b, e) : buf_put(b, s.p + i, NULL, 1))) return -1;
    }
    return buf_put(b, &q, NULL, 1) ? 0 : -1;
}

static int v_repr(Buf *b, const Val *v, int depth);

static int v_repr_items(Buf *b, const Val *v, int depth) {
    if (depth > CHATTMPL_MAX_DEPTH) return -1;
    if (v->kind == V_LIST) {
        const List *l = v->l;
        if (l->flavor == L_GENERATOR) return -2;
        if (l->flavor == L_RANGE) {
            char tmp[96];
            if (l->range[2] == 1) snprintf(tmp, sizeof tmp, "range(%lld, %lld)", (long long)l->range[0], (long long)l->range[1]);
            else
                snprintf(tmp, sizeof tmp, "range(%lld, %lld, %lld)", (long long)l->range[0], (long long)l->range[1],
                         (long long)l->range[2]);
            return buf_puts(b, tmp) ? 0 : -1;
        }
        static const char *const open[] = {"[", "(", "", "dict_items([", "dict_keys([", "dict_values(["};
        static const char *const close[] = {"]", ")", "", "])", "])", "])"};
        if (!buf_puts(b, open[l->flavor])) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (i && !buf_puts(b, ", ")) return -1;
            int e = v_repr(b, &l->v[i], depth + 1);
            if (e) return e;
        }
        if (l->flavor == L_TUPLE && l->n == 1 && !buf_puts(b, ",")) return -1;
        return buf_puts(b, close[l->flavor]) ? 0 : -1;
    }
    if (!buf_puts(b, "{")) return -1;
    for (size_t i = 0; i < v->d->n; i++) {
        if ((i && !buf_puts(b, ", ")) || repr_str(b, v->d->k[i]) || !buf_puts(b, ": ")) return -1;
        int e = v_repr(b, &v->d->v[i], depth + 1);
        if (e) return e;
    }
    return buf_puts(b, "}") ? 0 : -1;
}

static int v_repr(Buf *b, const Val *v, int depth) {
    if (v->kind == V_STR) return repr_str(b, v->s);
    if (v->kind == V_UNDEF) return buf_puts(b, "Undefined") ? 0 : -1; /* Jinja's Undefined in a container */
    if (v->kind == V_LIST || (v->kind == V_DICT && !v->d->is_namespace)) return v_repr_items(b, v, depth);
    return v_to_str(b, v);
}

int v_to_str(Buf *b, const Val *v) {
    char tmp[64];
    switch (v->kind) {
    case V_UNDEF: return 0;
    case V_NONE: return buf_puts(b, "None") ? 0 : -1;
    case V_BOOL: return buf_puts(b, v->b ? "True" : "False") ? 0 : -1;
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); return buf_puts(b, tmp) ? 0 : -1;
    case V_FLOAT: float_repr(tmp, sizeof tmp, v->f); return buf_puts(b, tmp) ? 0 : -1;
    case V_STR: return buf_put(b, v->s.p, v->s.tag, v->s.n) ? 0 : -1;
    case V_LIST: return v_repr_items(b, v, 0);
    case V_DICT:
        if (v->d->is_namespace) return buf_puts(b, "<Namespace>") ? 0 : -1;
        return v_repr_items(b, v, 0);
    default: return -1;
    }
}

static int json_str(Buf *b, Str s) {
    if (!buf_puts(b, "\"")) return -1;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        char esc[8];
        const char *e = NULL;
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), e = esc;
        }
        if (!(e ? buf_puts(b, e) : buf_put(b, s.p + i, NULL, 1))) return -1;
    }
    return buf_puts(b, "\"") ? 0 : -1;
}

static int json_newline(Buf *b, int indent, int level) {
    if (!buf_puts(b, "\n")) return -1;
    for (int i = 0; i < indent * level; i++)
        if (!buf_puts(b, " ")) return -1;
    return 0;
}

int v_to_json(Buf *b, const Val *v, int indent, int level, int depth) {
    char tmp[64];
    if (depth > CHATTMPL_MAX_DEPTH) return -1;
    switch (v->kind) {
    case V_NONE: return buf_puts(b, "null") ? 0 : -1;
    case V_BOOL: return buf_puts(b, v->b ? "true" : "false") ? 0 : -1;
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); return buf_puts(b, tmp) ? 0 : -1;
    case V_FLOAT:
        if (isnan(v->f)) return buf_puts(b, "NaN") ? 0 : -1;
        if (isinf(v->f)) return buf_puts(b, v->f < 0 ? "-Infinity" : "Infinity") ? 0 : -1;
        float_repr(tmp, sizeof tmp, v->f);
        return buf_puts(b, tmp) ? 0 : -1;
    case V_STR: return json_str(b, v->s);
    case V_LIST: case V_DICT: {
        int is_list = v->kind == V_LIST;
        if (is_list && v->l->flavor > L_TUPLE) return -1; /* json.dumps refuses generators, views, ranges */
        size_t n = is_list ? v->l->n : v->d->n;
        if (!buf_puts(b, is_list ? "[" : "{")) return -1;
        if (n == 0) return buf_puts(b, is_list ? "]" : "}") ? 0 : -1;
        for (size_t i = 0; i < n; i++) {
            if (i && !buf_puts(b, indent >= 0 ? "," : ", ")) return -1;
            if (indent >= 0 && json_newline(b, indent, level + 1)) return -1;
            if (!is_list && (json_str(b, v->d->k[i]) || !buf_puts(b, ": "))) return -1;
            if (v_to_json(b, is_list ? &v->l->v[i] : &v->d->v[i], indent, level + 1, depth + 1)) return -1;
        }
        if (indent >= 0 && json_newline(b, indent, level)) return -1;
        return buf_puts(b, is_list ? "]" : "}") ? 0 : -1;
    }
    default: return -1;
    }
}

/* 0: no string seen yet; UINT32_MAX: mixed origins */
static uint32_t merge_origin(uint32_t a, uint32_t b) {
    if (a == 0) return b;
    if (b == 0) return a;
    return a == b ? a : UINT32_MAX;
}

static uint32_t origin_of(const Val *v, int depth) {
    if (depth > CHATTMPL_MAX_DEPTH) return UINT32_MAX;
    uint32_t o = 0;
    if (v->kind == V_STR) {
        if (!v->s.tag) return v->s.n ? UINT32_MAX : 0;
        for (size_t i = 0; i < v->s.n && o != UINT32_MAX; i++) o = merge_origin(o, v->s.tag[i] ? v->s.tag[i] : UINT32_MAX);
        return o;
    }
    if (v->kind == V_LIST)
        for (size_t i = 0; i < v->l->n && o != UINT32_MAX; i++) o = merge_origin(o, origin_of(&v->l->v[i], depth + 1));
    if (v->kind == V_DICT)
        for (size_t i = 0; i < v->d->n && o != UINT32_MAX; i++) o = merge_origin(o, origin_of(&v->d->v[i], depth + 1));
    return o;
}

uint32_t v_origin(const Val *v, int depth) {
    uint32_t o = origin_of(v, depth);
    return o == UINT32_MAX ? 0 : o;
}

size_t utf8_count(Str s) {
    size_t c = 0;
    for (size_t i = 0; i < s.n; i++) c += ((unsigned char)s.p[i] & 0xC0) != 0x80;
    return c;
}

size_t utf8_offset(Str s, size_t k) {
    size_t i = 0;
    for (; i < s.n; i++)
        if (((unsigned char)s.p[i] & 0xC0) != 0x80 && k-- == 0) return i;
    return s.n;
}

static uint32_t decode_at(Str s, size_t i, size_t *len) {
    unsigned char c = (unsigned char)s.p[i];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + (size_t)n > s.n) n = 1;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int j = 1; j < n; j++) cp = cp << 6 | ((unsigned char)s.p[i + j] & 0x3F);
    *len = (size_t)n;
    return cp;
}

static int is_space_cp(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t ws_at(Str s, size_t i) {
    size_t len;
    uint32_t c = decode_at(s, i, &len);
    return is_space_cp(c) ? len : 0;
}

size_t ws_before(Str s, size_t i) {
    size_t j = i;
    while (j > 0 && ((unsigned char)s.p[j - 1] & 0xC0) == 0x80 && i - j < 3) j--;
    if (j > 0) j--;
    size_t len;
    uint32_t c = decode_at(s, j, &len);
    return j + len == i && is_space_cp(c) ? len : 0;
}

Str str_slice(Str s, size_t from, size_t to) {
    return (Str){s.p + from, s.tag ? s.tag + from : NULL, to - from};
}

/* Whether the character at s[i] (length *len) is one of chars. */
static int in_chars(Str s, size_t i, const Str *chars, size_t *len) {
    decode_at(s, i, len);
    for (size_t j = 0; j < chars->n;) {
        size_t cl;
        decode_at(*chars, j, &cl);
        if (cl == *len && !memcmp(chars->p + j, s.p + i, cl)) return 1;
        j += cl;
    }
    return 0;
}

Str str_strip(Str s, const Str *chars, int left, int right) {
    size_t a = 0, e = s.n;
    while (left && a < e) {
        size_t l;
        if (chars ? !in_chars(s, a, chars, &l) : !(l = ws_at(s, a))) break;
        a += l;
    }
    while (right && e > a) {
        size_t l = 0;
        if (chars) {
            size_t j = e - 1;
            while (j > a && ((unsigned char)s.p[j] & 0xC0) == 0x80) j--;
            if (!in_chars(s, j, chars, &l) || j + l != e) break;
        } else if (!(l = ws_before(s, e)))
            break;
        e -= l;
    }
    return str_slice(s, a, e);
}
