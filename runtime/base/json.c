#include "json.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable byte or value buffer for what is being read; copied into the
 * arena once complete. */
typedef struct Grow {
    void *p;
    size_t len, cap, elem;
} Grow;

typedef struct Parser {
    const char *s;
    size_t n, i;
    Arena *a;
    char *err;
    size_t errlen;
    bool failed;
    int depth;
    Grow items; /* elements of the open arrays and objects, innermost last */
} Parser;

static bool grow_push(Grow *g, const void *x, size_t k) {
    if (g->len + k > g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        while (cap < g->len + k) cap *= 2;
        void *np = realloc(g->p, cap * g->elem);
        if (!np) return false;
        g->p = np;
        g->cap = cap;
    }
    memcpy((char *)g->p + g->len * g->elem, x, k * g->elem);
    g->len += k;
    return true;
}

void json_position(const char *text, size_t len, size_t offset, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static bool fail(Parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(Parser *p, const char *fmt, ...) {
    if (p->failed) return false;
    p->failed = true;
    if (!p->err || !p->errlen) return false;
    int line, col;
    json_position(p->s, p->n, p->i, &line, &col);
    int w = snprintf(p->err, p->errlen, "line %d, column %d: ", line, col);
    if (w < 0 || (size_t)w >= p->errlen) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + w, p->errlen - (size_t)w, fmt, ap);
    va_end(ap);
    return false;
}

static void skip_ws(Parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_u4(Parser *p, unsigned *v) {
    if (p->n - p->i < 4) return fail(p, "a \\u escape needs four hex digits");
    unsigned x = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p->s[p->i + (size_t)k]);
        if (h < 0) return fail(p, "a \\u escape needs four hex digits");
        x = x * 16 + (unsigned)h;
    }
    p->i += 4;
    *v = x;
    return true;
}

static size_t put_utf8(unsigned cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The length of a valid UTF-8 sequence at s[0..left), 0 if invalid
 * (overlong forms, surrogates and code points past U+10FFFF refused). */
static size_t utf8_len(const unsigned char *s, size_t left) {
    unsigned c = s[0];
    size_t k;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { k = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; cp = c & 0x07; }
    else return 0;
    if (left < k) return 0;
    for (size_t j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[j] & 0x3F);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

/* Moves p->i past bytes that stand for themselves in a string: not '"',
 * '\\' or a control character, and valid UTF-8. */
static void skip_plain(Parser *p) {
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"' || c == '\\' || c < 0x20) return;
        if (c < 0x80) {
            p->i++;
            continue;
        }
        size_t k = utf8_len((const unsigned char *)p->s + p->i, p->n - p->i);
        if (!k) return;
        p->i += k;
    }
}

/* A string at p->i (which is '"'): decoded into the arena. */
static bool parse_string(Parser *p, const char **out, size_t *outlen) {
    size_t start = ++p->i;
    skip_plain(p);
    if (p->i < p->n && p->s[p->i] == '"') { /* no escape: copied as it is */
        size_t len = p->i - start;
        char *s = arena_alloc(p->a, len + 1);
        if (!s) return fail(p, "out of memory");
        memcpy(s, p->s + start, len);
        *out = s;
        *outlen = len;
        p->i++;
        return true;
    }
    Grow g = {.elem = 1};
    bool ok = true;
    size_t run = start;
    for (;;) {
        if (p->i > run && !grow_push(&g, p->s + run, p->i - run)) { ok = fail(p, "out of memory"); break; }
        if (p->i >= p->n) { ok = fail(p, "a string is not closed"); break; }
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') { p->i++; break; }
        if (c < 0x20) { ok = fail(p, "a control character (0x%02x) inside a string must be escaped", c); break; }
        if (c != '\\') { ok = fail(p, "invalid UTF-8 in a string"); break; }
        size_t esc = p->i;
        if (++p->i >= p->n) { ok = fail(p, "a string is not closed"); break; }
        char e = p->s[p->i++], b[4];
        size_t k = 1;
        switch (e) {
        case '"': b[0] = '"'; break;
        case '\\': b[0] = '\\'; break;
        case '/': b[0] = '/'; break;
        case 'b': b[0] = '\b'; break;
        case 'f': b[0] = '\f'; break;
        case 'n': b[0] = '\n'; break;
        case 'r': b[0] = '\r'; break;
        case 't': b[0] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!(ok = read_u4(p, &cp))) break;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') { ok = fail(p, "a lone high surrogate \\u%04X", cp); break; }
                p->i += 2;
                if (!(ok = read_u4(p, &lo))) break;
                if (lo < 0xDC00 || lo > 0xDFFF) { ok = fail(p, "\\u%04X is not a low surrogate", lo); break; }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                ok = fail(p, "a lone low surrogate \\u%04X", cp);
                break;
            }
            k = put_utf8(cp, b);
            break;
        }
        default: /* at the backslash */
            p->i = esc;
            if (e > 0x20 && e < 0x7F) ok = fail(p, "unknown escape '\\%c'", e);
            else ok = fail(p, "unknown escape: '\\' followed by the byte 0x%02x", (unsigned char)e);
            break;
        }
        if (!ok) break;
        if (!grow_push(&g, b, k)) { ok = fail(p, "out of memory"); break; }
        run = p->i;
        skip_plain(p);
    }
    if (ok) {
        char *s = arena_alloc(p->a, g.len + 1);
        if (!s) ok = fail(p, "out of memory");
        else {
            if (g.len) memcpy(s, g.p, g.len);
            *out = s;
            *outlen = g.len;
        }
    }
    free(g.p);
    return ok;
}

static bool parse_number(Parser *p, JsonValue *v) {
    size_t start = p->i;
    bool frac = false;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return fail(p, "a number needs a digit");
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        frac = true;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return fail(p, "a digit must follow the decimal point");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        frac = true;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return fail(p, "an exponent needs a digit");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    size_t len = p->i - start;
    bool neg = p->s[start] == '-';
    if (!frac && len - neg <= 18) { /* an integer below 10^18: exact in int64, and its double correctly rounded */
        int64_t x = 0;
        for (size_t k = start + neg; k < p->i; k++) x = x * 10 + (p->s[k] - '0');
        v->type = JSON_NUMBER;
        v->is_integer = true;
        v->integer = neg ? -x : x;
        v->number = neg && x == 0 ? -0.0 : (double)v->integer;
        return true;
    }
    char small[64], *buf = small;
    if (len >= sizeof small && !(buf = malloc(len + 1))) return fail(p, "out of memory");
    memcpy(buf, p->s + start, len);
    buf[len] = 0;
    v->type = JSON_NUMBER;
    v->number = strtod(buf, NULL);
    if (!frac) {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        if (errno == 0) {
            v->is_integer = true;
            v->integer = x;
        }
    }
    if (buf != small) free(buf);
    return true;
}

static bool literal(Parser *p, const char *word) {
    size_t k = strlen(word);
    if (p->n - p->i < k || memcmp(p->s + p->i, word, k) != 0) return fail(p, "invalid literal (expected '%s')", word);
    p->i += k;
    return true;
}

static bool parse_value(Parser *p, JsonValue *v);

/* An array or object at p->i: elements (members with keys) gathered on
 * p->items, then copied into one block of the arena. */
static bool parse_container(Parser *p, JsonValue *v, bool object) {
    if (++p->depth > JSON_MAX_DEPTH) return fail(p, "nesting deeper than %d", JSON_MAX_DEPTH);
    char close = object ? '}' : ']';
    const char *what = object ? "an object" : "an array";
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    p->i++;
    size_t base = p->items.len;
    bool ok = true;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
    } else {
        for (;;) {
            JsonValue item;
            memset(&item, 0, sizeof item);
            skip_ws(p);
            if (object) {
                if (p->i >= p->n || p->s[p->i] != '"') { ok = fail(p, "expected a string key in an object"); break; }
                if (!(ok = parse_string(p, &item.key, &item.key_len))) break;
                skip_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') { ok = fail(p, "expected ':' after an object key"); break; }
                p->i++;
            }
            if (!(ok = parse_value(p, &item))) break;
            if (!grow_push(&p->items, &item, 1)) { ok = fail(p, "out of memory"); break; }
            skip_ws(p);
            if (p->i >= p->n) { ok = fail(p, "unexpected end of the text in %s", what); break; }
            if (p->s[p->i] == ',') { p->i++; continue; }
            if (p->s[p->i] == close) { p->i++; break; }
            ok = fail(p, "expected ',' or '%c'", close);
            break;
        }
    }
    size_t count = p->items.len - base;
    if (ok && count) {
        v->items = arena_alloc(p->a, count * sizeof(JsonValue));
        if (!v->items) ok = fail(p, "out of memory");
        else memcpy(v->items, (JsonValue *)p->items.p + base, count * sizeof(JsonValue));
        v->count = count;
    }
    p->items.len = base;
    p->depth--;
    return ok;
}

static bool parse_value(Parser *p, JsonValue *v) {
    skip_ws(p);
    if (p->i >= p->n) return fail(p, "unexpected end of the text");
    v->offset = p->i;
    char c = p->s[p->i];
    switch (c) {
    case '{': return parse_container(p, v, true);
    case '[': return parse_container(p, v, false);
    case '"': v->type = JSON_STRING; return parse_string(p, &v->string, &v->len);
    case 't': v->type = JSON_BOOL; v->boolean = true; return literal(p, "true");
    case 'f': v->type = JSON_BOOL; v->boolean = false; return literal(p, "false");
    case 'n': v->type = JSON_NULL; return literal(p, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
        if (c > 0x20 && c < 0x7F) return fail(p, "unexpected '%c'", c);
        return fail(p, "unexpected byte 0x%02x", (unsigned char)c);
    }
}

int json_parse(const char *text, size_t len, JsonDoc *doc, char *err, size_t errlen) {
    arena_init(&doc->arena);
    doc->root = NULL;
    if (err && errlen) err[0] = 0;
    Parser p = {.s = text, .n = len, .a = &doc->arena, .err = err, .errlen = errlen, .items = {.elem = sizeof(JsonValue)}};
    JsonValue *root = arena_alloc(&doc->arena, sizeof *root);
    if (!root) {
        fail(&p, "out of memory");
    } else if (parse_value(&p, root)) {
        skip_ws(&p);
        if (p.i < p.n) fail(&p, "text after the JSON value");
    }
    free(p.items.p);
    if (p.failed || doc->arena.failed) {
        if (!p.failed) fail(&p, "out of memory");
        arena_free(&doc->arena);
        arena_init(&doc->arena);
        return -1;
    }
    doc->root = root;
    return 0;
}

void json_free(JsonDoc *doc) {
    arena_free(&doc->arena);
    doc->root = NULL;
}

const JsonValue *json_get(const JsonValue *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    size_t k = strlen(key);
    for (size_t i = obj->count; i-- > 0;)
        if (obj->items[i].key_len == k && memcmp(obj->items[i].key, key, k) == 0) return &obj->items[i];
    return NULL;
}

const JsonValue *json_get_type(const JsonValue *obj, const char *key, JsonType type) {
    const JsonValue *v = json_get(obj, key);
    return v && v->type == type ? v : NULL;
}

const char *json_get_str(const JsonValue *obj, const char *key) {
    const JsonValue *v = json_get_type(obj, key, JSON_STRING);
    return v ? v->string : NULL;
}

int json_get_bool(const JsonValue *obj, const char *key, int dflt) {
    const JsonValue *v = json_get(obj, key);
    if (!v || v->type == JSON_NULL) return dflt;
    return v->type == JSON_BOOL ? v->boolean : -1;
}

const char *json_type_name(JsonType type) {
    static const char *const names[] = {"null", "boolean", "number", "string", "array", "object"};
    return (unsigned)type < sizeof names / sizeof *names ? names[type] : "?";
}

const char *json_type_phrase(JsonType type) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return (unsigned)type < sizeof names / sizeof *names ? names[type] : "?";
}
