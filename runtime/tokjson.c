/* tokjson: strict JSON text -> read-only tree; see tokjson.h.
 * A recursive descent parser over a bounds-checked cursor. Children of an
 * array or object are first gathered on a scratch stack shared by all
 * levels, then copied into one contiguous block of the arena, so every
 * node keeps its address for the life of the document. */
#include "tokjson.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

/* The arena: a list of blocks, freed together. */
typedef struct Block {
    struct Block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} Block;

struct TokJsonDoc {
    Block *blocks;
    TokJson root;
};

typedef struct {
    const unsigned char *s;
    size_t n, pos;
    TokJsonDoc *doc;
    TokJson *stack; /* scratch for children not yet placed */
    size_t sp, scap;
    char *err;
    size_t errlen;
    int failed;
} Parser;

static void *arena_alloc(Parser *p, size_t size) {
    size = (size + 15) & ~(size_t)15;
    Block *b = p->doc->blocks;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > (1u << 20) ? size : (1u << 20);
        Block *nb = malloc(sizeof *nb + cap);
        if (!nb) return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        p->doc->blocks = nb;
        b = nb;
    }
    void *r = b->data + b->used;
    b->used += size;
    return r;
}

static int fail(Parser *p, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < p->pos && k < p->n; k++) {
        if (p->s[k] == '\n') { line++; col = 1; }
        else if ((p->s[k] & 0xC0) != 0x80) col++;
    }
    if (p->err && p->errlen) {
        int w = snprintf(p->err, p->errlen, "line %zu, column %zu: ", line, col);
        if (w >= 0 && (size_t)w < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + w, p->errlen - (size_t)w, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

static void skip_ws(Parser *p) {
    while (p->pos < p->n) {
        unsigned char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->pos++;
        else break;
    }
}

static int expect_word(Parser *p, const char *w) {
    size_t l = strlen(w);
    if (p->n - p->pos < l || memcmp(p->s + p->pos, w, l) != 0) return fail(p, "invalid literal (expected '%s')", w);
    p->pos += l;
    return 0;
}

static int hex4(Parser *p, uint32_t *v) {
    if (p->n - p->pos < 4) return fail(p, "truncated \\u escape");
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char c = p->s[p->pos + (size_t)k];
        r <<= 4;
        if (c >= '0' && c <= '9') r |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') r |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') r |= (uint32_t)(c - 'A' + 10);
        else return fail(p, "bad hex digit in \\u escape");
    }
    p->pos += 4;
    *v = r;
    return 0;
}

/* A string at p->pos (the opening quote); its decoded bytes go to the
 * arena. */
static int parse_string(Parser *p, const char **out, uint32_t *outn) {
    p->pos++; /* the quote */
    size_t start = p->pos, k = start;
    int plain = 1;
    /* First pass: find the end and whether any escape needs decoding. */
    for (;;) {
        if (k >= p->n) { p->pos = k; return fail(p, "unterminated string"); }
        unsigned char c = p->s[k];
        if (c == '"') break;
        if (c < 0x20) { p->pos = k; return fail(p, "control character 0x%02x in a string (must be escaped)", c); }
        if (c == '\\') { plain = 0; k += 2; continue; }
        k++;
    }
    size_t raw = k - start;
    if (raw > UINT32_MAX - 1) return fail(p, "string too long");
    /* Validate UTF-8 of the raw bytes (serde_json reads a Rust str). */
    size_t v = uni_valid_prefix(p->s + start, raw);
    if (v != raw) { p->pos = start + v; return fail(p, "invalid UTF-8 in a string"); }
    char *dst = arena_alloc(p, raw + 1);
    if (!dst) return fail(p, "out of memory");
    if (plain) {
        memcpy(dst, p->s + start, raw);
        dst[raw] = 0;
        *out = dst;
        *outn = (uint32_t)raw;
        p->pos = k + 1;
        return 0;
    }
    size_t o = 0;
    p->pos = start;
    while (p->pos < k) {
        unsigned char c = p->s[p->pos];
        if (c != '\\') { dst[o++] = (char)c; p->pos++; continue; }
        if (p->pos + 1 >= k) return fail(p, "bad escape");
        unsigned char e = p->s[p->pos + 1];
        p->pos += 2;
        switch (e) {
        case '"': dst[o++] = '"'; break;
        case '\\': dst[o++] = '\\'; break;
        case '/': dst[o++] = '/'; break;
        case 'b': dst[o++] = '\b'; break;
        case 'f': dst[o++] = '\f'; break;
        case 'n': dst[o++] = '\n'; break;
        case 'r': dst[o++] = '\r'; break;
        case 't': dst[o++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (hex4(p, &cp)) return -1;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone trailing surrogate \\u%04X", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return fail(p, "lone leading surrogate \\u%04X", cp);
                p->pos += 2;
                if (hex4(p, &lo)) return -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "leading surrogate \\u%04X not followed by a trailing one", cp);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* \uXXXX takes 6 bytes and writes at most 3; a pair takes 12 and writes 4. */
            o += uni_encode(cp, dst + o);
            break;
        }
        default: p->pos -= 2; return fail(p, "bad escape '\\%c'", e >= 0x20 && e < 0x7F ? e : '?');
        }
    }
    dst[o] = 0;
    *out = dst;
    *outn = (uint32_t)o;
    p->pos = k + 1;
    return 0;
}

static int parse_number(Parser *p, TokJson *v) {
    size_t start = p->pos, k = start;
    if (k < p->n && p->s[k] == '-') k++;
    if (k >= p->n || p->s[k] < '0' || p->s[k] > '9') { p->pos = k; return fail(p, "invalid number"); }
    if (p->s[k] == '0') k++;
    else while (k < p->n && p->s[k] >= '0' && p->s[k] <= '9') k++;
    int integer = 1;
    if (k < p->n && p->s[k] == '.') {
        integer = 0;
        k++;
        if (k >= p->n || p->s[k] < '0' || p->s[k] > '9') { p->pos = k; return fail(p, "invalid number: digits must follow '.'"); }
        while (k < p->n && p->s[k] >= '0' && p->s[k] <= '9') k++;
    }
    if (k < p->n && (p->s[k] == 'e' || p->s[k] == 'E')) {
        integer = 0;
        k++;
        if (k < p->n && (p->s[k] == '+' || p->s[k] == '-')) k++;
        if (k >= p->n || p->s[k] < '0' || p->s[k] > '9') { p->pos = k; return fail(p, "invalid number: digits must follow the exponent"); }
        while (k < p->n && p->s[k] >= '0' && p->s[k] <= '9') k++;
    }
    char buf[64], *tmp = buf;
    size_t len = k - start;
    if (len >= sizeof buf && !(tmp = malloc(len + 1))) return fail(p, "out of memory");
    memcpy(tmp, p->s + start, len);
    tmp[len] = 0;
    v->type = TOKJSON_NUMBER;
    v->num = strtod(tmp, NULL);
    if (tmp != buf) free(tmp);
    v->is_int = 0;
    if (integer) {
        int neg = p->s[start] == '-';
        uint64_t acc = 0;
        int ok = 1;
        for (size_t j = start + (size_t)neg; j < k; j++) {
            unsigned d = (unsigned)(p->s[j] - '0');
            if (acc > (UINT64_MAX - d) / 10) { ok = 0; break; }
            acc = acc * 10 + d;
        }
        if (ok && acc <= (uint64_t)INT64_MAX + (uint64_t)neg) {
            v->is_int = 1;
            v->i = neg ? (acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc) : (int64_t)acc;
        }
    }
    p->pos = k;
    return 0;
}

static int push(Parser *p, const TokJson *v) {
    if (p->sp == p->scap) {
        size_t nc = p->scap ? p->scap * 2 : 256;
        TokJson *ns = realloc(p->stack, nc * sizeof *ns);
        if (!ns) return fail(p, "out of memory");
        p->stack = ns;
        p->scap = nc;
    }
    p->stack[p->sp++] = *v;
    return 0;
}

static int parse_value(Parser *p, TokJson *v, int depth);

/* Moves the children from stack[base..sp) into the arena. */
static int place(Parser *p, TokJson *v, size_t base) {
    size_t cnt = p->sp - base;
    if (cnt > UINT32_MAX) return fail(p, "too many elements");
    v->n = (uint32_t)cnt;
    v->kids = NULL;
    if (cnt) {
        TokJson *kids = arena_alloc(p, cnt * sizeof *kids);
        if (!kids) return fail(p, "out of memory");
        memcpy(kids, p->stack + base, cnt * sizeof *kids);
        v->kids = kids;
    }
    p->sp = base;
    return 0;
}

static int parse_container(Parser *p, TokJson *v, int depth, int object) {
    if (depth >= TOKJSON_MAX_DEPTH) return fail(p, "nesting deeper than %d", TOKJSON_MAX_DEPTH);
    v->type = object ? TOKJSON_OBJECT : TOKJSON_ARRAY;
    char close = object ? '}' : ']';
    p->pos++;
    size_t base = p->sp;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; return place(p, v, base); }
    for (;;) {
        TokJson kid;
        memset(&kid, 0, sizeof kid);
        skip_ws(p);
        if (object) {
            if (p->pos >= p->n || p->s[p->pos] != '"') return fail(p, p->pos >= p->n ? "unexpected end of text in an object" : "expected a string key");
            if (parse_string(p, &kid.key, &kid.keylen)) return -1;
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') return fail(p, "expected ':' after an object key");
            p->pos++;
        }
        if (parse_value(p, &kid, depth + 1)) return -1;
        if (push(p, &kid)) return -1;
        skip_ws(p);
        if (p->pos >= p->n) return fail(p, "unexpected end of text in an %s", object ? "object" : "array");
        char c = (char)p->s[p->pos];
        if (c == ',') { p->pos++; continue; }
        if (c == close) { p->pos++; break; }
        return fail(p, "expected ',' or '%c'", close);
    }
    return place(p, v, base);
}

static int parse_value(Parser *p, TokJson *v, int depth) {
    skip_ws(p);
    if (p->pos >= p->n) return fail(p, "unexpected end of text (expected a value)");
    unsigned char c = p->s[p->pos];
    switch (c) {
    case '{': return parse_container(p, v, depth, 1);
    case '[': return parse_container(p, v, depth, 0);
    case '"': v->type = TOKJSON_STRING; return parse_string(p, &v->str, &v->n);
    case 't': v->type = TOKJSON_TRUE; return expect_word(p, "true");
    case 'f': v->type = TOKJSON_FALSE; return expect_word(p, "false");
    case 'n': v->type = TOKJSON_NULL; return expect_word(p, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
        if (c >= 0x20 && c < 0x7F) return fail(p, "unexpected character '%c'", c);
        return fail(p, "unexpected byte 0x%02x", c);
    }
}

int tokjson_parse(const char *text, size_t n, TokJsonDoc **out, char *err, size_t errlen) {
    *out = NULL;
    TokJsonDoc *doc = calloc(1, sizeof *doc);
    if (!doc) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return -1;
    }
    Parser p = {.s = (const unsigned char *)text, .n = n, .doc = doc, .err = err, .errlen = errlen};
    int rc = parse_value(&p, &doc->root, 0);
    if (!rc) {
        skip_ws(&p);
        if (p.pos != p.n) rc = fail(&p, "text after the JSON value");
    }
    free(p.stack);
    if (rc) {
        tokjson_free(doc);
        return -1;
    }
    *out = doc;
    return 0;
}

const TokJson *tokjson_root(const TokJsonDoc *doc) { return &doc->root; }

void tokjson_free(TokJsonDoc *doc) {
    if (!doc) return;
    Block *b = doc->blocks;
    while (b) {
        Block *nx = b->next;
        free(b);
        b = nx;
    }
    free(doc);
}

const TokJson *tokjson_get(const TokJson *obj, const char *key) {
    if (!obj || obj->type != TOKJSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (uint32_t k = obj->n; k-- > 0;)
        if (obj->kids[k].keylen == kl && memcmp(obj->kids[k].key, key, kl) == 0) return &obj->kids[k];
    return NULL;
}

const char *tokjson_get_str(const TokJson *obj, const char *key) {
    const TokJson *v = tokjson_get(obj, key);
    return v && v->type == TOKJSON_STRING ? v->str : NULL;
}

int tokjson_get_bool(const TokJson *obj, const char *key, int dflt) {
    const TokJson *v = tokjson_get(obj, key);
    if (!v || v->type == TOKJSON_NULL) return dflt;
    if (v->type == TOKJSON_TRUE) return 1;
    if (v->type == TOKJSON_FALSE) return 0;
    return -1;
}

const char *tokjson_type_name(TokJsonType t) {
    switch (t) {
    case TOKJSON_NULL: return "null";
    case TOKJSON_FALSE:
    case TOKJSON_TRUE: return "a boolean";
    case TOKJSON_NUMBER: return "a number";
    case TOKJSON_STRING: return "a string";
    case TOKJSON_ARRAY: return "an array";
    case TOKJSON_OBJECT: return "an object";
    }
    return "?";
}
