/* The .zl lexer (re2c). See lex.h. One rule per line; an error token for
 * anything else; line and column are worked out only for diagnostics. */
#include "lex.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grammar.h"

void lex_init(Lexer *L, const char *src, uint32_t len, int file, Arena *a, DiagSink *d) {
    memset(L, 0, sizeof *L);
    L->src = src;
    L->len = len;
    L->file = file;
    L->arena = a;
    L->d = d;
    L->last = L->last2 = TK_NL;
    L->last_span = L->last2_span = SPAN_NONE;
    L->decl_kw = 0;
}

static Span sp(const Lexer *L, uint32_t a, uint32_t b) { return (Span){L->file, a, b - a}; }

const char *lex_token_name(int k) {
    switch (k) {
    case 0: return "end of file";
    case TK_NL: return "newline";
    case TK_SEMI: return "';'";
    case TK_COMMA: return "','";
    case TK_LPAREN: return "'('";
    case TK_RPAREN: return "')'";
    case TK_LBRACK: return "'['";
    case TK_RBRACK: return "']'";
    case TK_LBRACE: return "'{'";
    case TK_RBRACE: return "'}'";
    case TK_ASSIGN: return "'='";
    case TK_COLON: return "':'";
    case TK_PLUS: return "'+'";
    case TK_MINUS: return "'-'";
    case TK_STAR: return "'*'";
    case TK_SLASH: return "'/'";
    case TK_PERCENT: return "'%'";
    case TK_IDENT: return "a name";
    case TK_INT: return "an integer";
    case TK_FLOAT: return "a number";
    case TK_STRING: return "a string";
    case TK_DTYPE: return "a type";
    case TK_IMPORT: return "'import'";
    case TK_CONST: return "'const'";
    case TK_LAYER: return "'layer'";
    case TK_MODEL: return "'model'";
    case TK_TRAIN: return "'train'";
    case TK_TARGET: return "'target'";
    case TK_PLAN: return "'plan'";
    case TK_HF: return "'hf'";
    case TK_IF: return "'if'";
    case TK_ELSE: return "'else'";
    case TK_REPEAT: return "'repeat'";
    case TK_AS: return "'as'";
    case TK_RETURN: return "'return'";
    case TK_LOSS: return "'loss'";
    case TK_PARAM: return "'param'";
    case TK_INIT: return "'init'";
    default: return "a token";
    }
}


static const struct { const char *w; UnitKind k; uint64_t scale; } units[] = {
    {"KiB/s", UNIT_RATE, 1ull << 10}, {"MiB/s", UNIT_RATE, 1ull << 20}, {"GiB/s", UNIT_RATE, 1ull << 30},
    {"TiB/s", UNIT_RATE, 1ull << 40}, {"KB/s", UNIT_RATE, 1000ull},     {"MB/s", UNIT_RATE, 1000000ull},
    {"GB/s", UNIT_RATE, 1000000000ull}, {"TB/s", UNIT_RATE, 1000000000000ull},
    {"KiB", UNIT_BYTES, 1ull << 10},  {"MiB", UNIT_BYTES, 1ull << 20},  {"GiB", UNIT_BYTES, 1ull << 30},
    {"TiB", UNIT_BYTES, 1ull << 40},  {"KB", UNIT_BYTES, 1000ull},      {"MB", UNIT_BYTES, 1000000ull},
    {"GB", UNIT_BYTES, 1000000000ull}, {"TB", UNIT_BYTES, 1000000000000ull},
    {"K", UNIT_COUNT, 1000ull},       {"M", UNIT_COUNT, 1000000ull},    {"G", UNIT_COUNT, 1000000000ull},
    {"T", UNIT_COUNT, 1000000000000ull},
};

static bool ident_char(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

/* A unit word after a number, optionally after spaces or tabs, when the word
 * is not the start of a longer name. */
static void lex_unit(Lexer *L, Token *t) {
    t->unit = (Unit){UNIT_NONE, 1};
    uint32_t p = L->pos;
    while (p < L->len && (L->src[p] == ' ' || L->src[p] == '\t')) p++;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        size_t n = strlen(units[i].w);
        if (p + n > L->len || memcmp(L->src + p, units[i].w, n) != 0) continue;
        if (p + n < L->len && ident_char((unsigned char)L->src[p + n])) continue;
        t->unit = (Unit){units[i].k, units[i].scale};
        L->pos = (uint32_t)(p + n);
        t->span = sp(L, t->span.off, L->pos);
        return;
    }
}

static void lex_int(Lexer *L, Token *t, uint32_t a, uint32_t b, int base) {
    uint64_t v = 0;
    bool over = false;
    for (uint32_t i = a; i < b; i++) {
        int c = (unsigned char)L->src[i], dg;
        if (c == '_') continue;
        if (c >= '0' && c <= '9') dg = c - '0';
        else if (c >= 'a' && c <= 'f') dg = c - 'a' + 10;
        else dg = c - 'A' + 10;
        if (v > (UINT64_MAX - (uint64_t)dg) / (uint64_t)base) over = true;
        v = v * (uint64_t)base + (uint64_t)dg;
    }
    if (v > (uint64_t)INT64_MAX) over = true;
    t->ival = over ? INT64_MAX : (int64_t)v;
    t->overflow = over;
}

static void lex_float(Lexer *L, Token *t, uint32_t a, uint32_t b) {
    char buf[128];
    size_t n = 0;
    for (uint32_t i = a; i < b && n + 1 < sizeof buf; i++)
        if (L->src[i] != '_') buf[n++] = L->src[i];
    buf[n] = 0;
    t->fval = strtod(buf, NULL);
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0. */
static uint32_t utf8_len(const unsigned char *s, uint32_t n) {
    uint32_t k = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
    if (s[0] > 0xF4 || k == 0 || k > n) return 0;
    for (uint32_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (k == 3 && s[0] == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
    if (k == 3 && s[0] == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    if (k == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0;
    return k;
}

/* Bytes 0x80-0xFF in [a, b) outside strings and comments: quoted when they
 * are UTF-8 (with the ASCII to use for look-alikes pasted from documents),
 * the first bad byte when they are not. */
static void lex_non_ascii(Lexer *L, uint32_t a, uint32_t b) {
    static const struct { const char *u, *ascii; } alike[] = {
        {"\xc3\x97", "*"}, {"\xc3\xb7", "/"}, {"\xe2\x88\x92", "-"}, {"\xe2\x80\x93", "-"}, {"\xe2\x80\x94", "-"},
        {"\xe2\x80\x9c", "\""}, {"\xe2\x80\x9d", "\""}, {"\xc2\xa0", "  (a plain space)"}, {"\xe2\x80\x89", "  (a plain space)"},
    };
    const unsigned char *s = (const unsigned char *)L->src;
    uint32_t p = a;
    while (p < b) {
        uint32_t k = utf8_len(s + p, b - p);
        if (!k) break;
        p += k;
    }
    L->errors++;
    L->last_bad = true;
    if (p < b) {
        diag_error(L->d, sp(L, p, p + 1), "invalid UTF-8 byte 0x%02x in the source", s[p]);
        diag_hint(L->d, "the source is ASCII, with UTF-8 allowed in strings and comments");
        return;
    }
    uint32_t n = b - a > 40 ? 40 : b - a;
    while (n < b - a && (s[a + n] & 0xC0) == 0x80) n--; /* cut on a character boundary */
    diag_error(L->d, sp(L, a, b), "unexpected non-ASCII text '%.*s'%s", (int)n, L->src + a, n < b - a ? "..." : "");
    for (size_t i = 0; i < sizeof alike / sizeof *alike; i++) {
        size_t k = strlen(alike[i].u);
        if (b - a >= k && !memcmp(L->src + a, alike[i].u, k)) {
            diag_hint(L->d, "did you mean '%c'%s?", alike[i].ascii[0], alike[i].ascii + 1);
            return;
        }
    }
    diag_hint(L->d, "names and operators are ASCII; other text belongs in strings or comments");
}

/* A string literal from the opening quote at a; escapes decoded. */
static void lex_string(Lexer *L, Token *t, uint32_t a) {
    uint32_t p = a + 1;
    /* The decoded text is no longer than the raw text up to the closing
     * quote or the end of the line (never the rest of the file: a file of
     * many strings would cost quadratic memory). */
    uint32_t q = p;
    while (q < L->len && L->src[q] != '"' && L->src[q] != '\n') q += L->src[q] == '\\' && q + 1 < L->len ? 2 : 1;
    char *out = arena_alloc(L->arena, q - a + 1);
    size_t n = 0;
    for (;;) {
        if (p >= L->len || L->src[p] == '\n') {
            diag_error(L->d, sp(L, a, p), "unterminated string");
            diag_hint(L->d, "a string ends with '\"' on the line where it starts");
            L->errors++;
            break;
        }
        char c = L->src[p];
        if (c == '"') { p++; break; }
        if (c == '\\') {
            char e = p + 1 < L->len ? L->src[p + 1] : 0;
            int hv = -1;
            switch (e) {
            case 'n': if (out) out[n++] = '\n'; p += 2; continue;
            case 't': if (out) out[n++] = '\t'; p += 2; continue;
            case '\\': if (out) out[n++] = '\\'; p += 2; continue;
            case '"': if (out) out[n++] = '"'; p += 2; continue;
            case 'x': {
                int h1 = p + 2 < L->len ? L->src[p + 2] : 0, h2 = p + 3 < L->len ? L->src[p + 3] : 0;
                int d1 = h1 >= '0' && h1 <= '9' ? h1 - '0' : (h1 | 32) >= 'a' && (h1 | 32) <= 'f' ? (h1 | 32) - 'a' + 10 : -1;
                int d2 = h2 >= '0' && h2 <= '9' ? h2 - '0' : (h2 | 32) >= 'a' && (h2 | 32) <= 'f' ? (h2 | 32) - 'a' + 10 : -1;
                if (d1 >= 0 && d2 >= 0) hv = d1 * 16 + d2;
                if (hv >= 0) { if (out) out[n++] = (char)hv; p += 4; continue; }
                diag_error(L->d, sp(L, p, p + 2), "bad escape: \\x needs two hex digits");
                L->errors++;
                p += 2;
                continue;
            }
            default:
                diag_error(L->d, sp(L, p, p + 2), "unknown escape '\\%c' in string", e >= 0x20 && e < 0x7f ? e : '?');
                diag_hint(L->d, "the escapes are \\n \\t \\\\ \\\" and \\xHH");
                L->errors++;
                p += e ? 2 : 1;
                continue;
            }
        }
        if (out) out[n++] = c;
        p++;
    }
    if (out) out[n] = 0;
    t->str = out ? out : "";
    t->slen = n;
    L->pos = p;
}

/* What the bracket at `at` opens, from the tokens before it. */
static LexBracket describe_open(const Lexer *L, char k, Span at) {
    LexBracket b;
    memset(&b, 0, sizeof b);
    b.ch = k;
    b.at = at;
    b.key = SPAN_NONE;
    if (k == '(') {
        if (L->last == TK_IDENT && (L->last2 == TK_LAYER || L->last2 == TK_MODEL)) b.what = LO_PARAMS;
        else if (L->last == TK_IDENT) { b.what = LO_CALL; b.key = L->last_span; }
        else b.what = LO_GROUP;
    } else if (k == '[') {
        b.what = L->last == TK_PARAM || L->last == TK_DTYPE || L->last == TK_COLON ? LO_DIMS : LO_LIST;
    } else if (L->repeat_pending) {
        b.what = LO_REPEAT;
    } else if (L->cond_pending) {
        b.what = LO_IF;
        b.decl_kw = L->cond_pending;
    } else if (L->depth == 0) {
        b.what = LO_DECL;
        b.decl_kw = L->decl_kw;
    } else {
        b.what = LO_BLOCK;
        if (L->last == TK_IDENT) b.key = L->last_span;
    }
    return b;
}

static void push_open(Lexer *L, const LexBracket *b) {
    if (L->depth < LEX_MAX_DEPTH) L->open[L->depth] = *b;
    L->depth++;
}

/* A closing bracket closes the innermost open one of its kind; a '}' also
 * closes any '(' or '[' left open inside its block, so that one missing ')'
 * does not swallow every newline after it. */
static void pop_close(Lexer *L, char k) {
    if (L->depth <= 0) return;
    if (k != '{') {
        int top = L->depth <= LEX_MAX_DEPTH ? L->depth - 1 : -1;
        if (top < 0 || L->open[top].ch == k) L->depth--;
        return;
    }
    while (L->depth > 0) {
        int top = L->depth <= LEX_MAX_DEPTH ? L->depth - 1 : -1;
        L->depth--;
        if (top < 0 || L->open[top].ch == '{') break;
    }
}

static void apply_pending(Lexer *L) {
    int k = L->pending;
    L->pending = 0;
    if (k == '(' || k == '[' || k == '{') push_open(L, &L->pending_open);
    else if (k == ')') pop_close(L, '(');
    else if (k == ']') pop_close(L, '[');
    else if (k == '}') pop_close(L, '{');
}

const LexBracket *lex_open(const Lexer *L) {
    if (L->depth <= 0 || L->depth > LEX_MAX_DEPTH) return NULL;
    return &L->open[L->depth - 1];
}

void lex_pop(Lexer *L) {
    if (L->depth > 0) L->depth--;
}

void lex_drop_parens(Lexer *L) {
    while (L->depth > 0 && L->depth <= LEX_MAX_DEPTH && L->open[L->depth - 1].ch != '{') L->depth--;
}

const char *lex_open_what(const Lexer *L, const LexBracket *b) {
    if (!b) return "the block";
    switch (b->what) {
    case LO_GROUP: return "the parenthesis";
    case LO_CALL:
        return arena_printf(L->arena, "the call to '%.*s'", (int)(b->key.len > 40 ? 40 : b->key.len), L->src + b->key.off);
    case LO_PARAMS: return "the parameter list";
    case LO_LIST: return "the list";
    case LO_DIMS: return "the dimensions";
    case LO_REPEAT: return "the repeat body";
    case LO_IF: return b->decl_kw == TK_ELSE ? "the else body" : "the if body";
    case LO_BLOCK:
        if (b->key.file < 0) return "the block";
        return arena_printf(L->arena, "the '%.*s' block", (int)(b->key.len > 40 ? 40 : b->key.len), L->src + b->key.off);
    case LO_DECL:
        switch (b->decl_kw) {
        case TK_LAYER: return "the layer body";
        case TK_MODEL: return "the model body";
        case TK_TRAIN: return "the train block";
        case TK_TARGET: return "the target block";
        case TK_PLAN: return "the plan block";
        case TK_HF: return "the hf block";
        default: return "the block";
        }
    }
    return "the block";
}

static bool inside_parens(const Lexer *L) {
    if (L->depth == 0) return false;
    int top = L->depth <= LEX_MAX_DEPTH ? L->depth - 1 : LEX_MAX_DEPTH - 1;
    return L->open[top].ch == '(' || L->open[top].ch == '[';
}

static bool is_ident_char(int c) { return ident_char(c) || c == '.'; }

/* A number directly followed by letters, digits, '_' or '.' that are not a
 * unit (12abc, 1.5.3, 0x, 1e): one error for the whole run. */
static void lex_number_tail(Lexer *L, Token *t, uint32_t start, uint32_t nend) {
    const char *s = L->src;
    uint32_t p = L->pos;
    bool bad_us = false;
    for (uint32_t i = start; i < nend; i++)
        if (s[i] == '_' && (i + 1 >= L->len || !ident_char((unsigned char)s[i + 1]) || s[i + 1] == '_' || s[i - 1] == '.'))
            bad_us = true;
    if (t->unit.kind == UNIT_NONE && p < L->len && is_ident_char((unsigned char)s[p])) {
        while (p < L->len && is_ident_char((unsigned char)s[p])) p++;
        L->pos = p;
        t->span = sp(L, start, p);
        diag_error(L->d, t->span, "invalid number '%.*s'", (int)(p - start > 40 ? 40 : p - start), s + start);
        diag_hint(L->d, "numbers are like 42, 1_000_000, 0x1F, 0.02 or 6e-4, optionally followed by a unit (32 GiB)");
        L->errors++;
    } else if (bad_us) {
        diag_error(L->d, sp(L, start, nend), "misplaced '_' in number '%.*s'", (int)(nend - start > 40 ? 40 : nend - start), s + start);
        diag_hint(L->d, "'_' goes between digits: 1_000_000");
        L->errors++;
    }
}

static bool ends_statement(int k) {
    return k == TK_IDENT || k == TK_INT || k == TK_FLOAT || k == TK_STRING || k == TK_RPAREN || k == TK_RBRACK ||
           k == TK_RBRACE || k == TK_RETURN || k == TK_DTYPE;
}

/* A bad character counts as an operand, so the newline after it ends the statement. */
static bool ends_statement_here(const Lexer *L) { return L->last_bad || ends_statement(L->last); }

#define YYCTYPE unsigned char

void lex_next(Lexer *L, Token *t) {
    memset(t, 0, sizeof *t);
    t->nl = SPAN_NONE;
    apply_pending(L);
    for (;;) {
        if (L->done) { t->kind = 0; t->span = sp(L, L->len, L->len); return; }
        uint32_t start = L->pos;
        const YYCTYPE *YYCURSOR = (const YYCTYPE *)L->src + L->pos, *YYMARKER = YYCURSOR;
        const YYCTYPE *base = (const YYCTYPE *)L->src;
        int k = -1;
#define TOK(x) do { k = (x); goto done; } while (0)
        /*!re2c
            re2c:yyfill:enable = 0;

            dec   = [0-9][0-9_]*;
            hex   = "0" [xX] [0-9a-fA-F_]+;
            exp   = [eE] [+-]? [0-9]+;
            flt   = dec "." [0-9_]* exp? | dec exp;
            ident = [A-Za-z_][A-Za-z0-9_]*;

            "\x00"         { if ((uint32_t)(YYCURSOR - base) > L->len) goto eof;
                             /* a run of NULs is one error */
                             L->pos = (uint32_t)(YYCURSOR - base);
                             while (L->pos < L->len && L->src[L->pos] == 0) L->pos++;
                             diag_error(L->d, sp(L, start, L->pos), "unexpected NUL byte in the source");
                             L->errors++; L->last_bad = true; continue; }
            [ \t\r\v\f]+   { L->pos = (uint32_t)(YYCURSOR - base); continue; }
            "#" [^\n\x00]* { L->pos = (uint32_t)(YYCURSOR - base); continue; }
            "\n"           { L->pos = (uint32_t)(YYCURSOR - base);
                             if (!inside_parens(L) && ends_statement_here(L)) {
                                 t->kind = TK_NL; t->span = sp(L, start, start + 1);
                                 L->last2 = L->last; L->last = TK_NL; L->last_bad = false; L->repeat_pending = false; L->cond_pending = 0;
                                 return; }
                             if (inside_parens(L) && t->nl.file < 0) t->nl = sp(L, start, start + 1);
                             continue; }
            hex            { L->pos = (uint32_t)(YYCURSOR - base); lex_int(L, t, start + 2, L->pos, 16); TOK(TK_INT); }
            flt            { L->pos = (uint32_t)(YYCURSOR - base); lex_float(L, t, start, L->pos); TOK(TK_FLOAT); }
            dec            { L->pos = (uint32_t)(YYCURSOR - base); lex_int(L, t, start, L->pos, 10); TOK(TK_INT); }
            "import"       { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_IMPORT); }
            "const"        { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_CONST); }
            "layer"        { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_LAYER); }
            "model"        { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_MODEL); }
            "train"        { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_TRAIN); }
            "target"       { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_TARGET); }
            "plan"         { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_PLAN); }
            "hf"           { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_HF); }
            "if"           { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_IF); }
            "else"         { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_ELSE); }
            "repeat"       { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_REPEAT); }
            "as"           { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_AS); }
            "return"       { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_RETURN); }
            "loss"         { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_LOSS); }
            "param"        { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_PARAM); }
            "init"         { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_INIT); }
            "i32"          { L->pos = (uint32_t)(YYCURSOR - base); t->dtype = DT_I32; TOK(TK_DTYPE); }
            "f32"          { L->pos = (uint32_t)(YYCURSOR - base); t->dtype = DT_F32; TOK(TK_DTYPE); }
            "f16"          { L->pos = (uint32_t)(YYCURSOR - base); t->dtype = DT_F16; TOK(TK_DTYPE); }
            "bf16"         { L->pos = (uint32_t)(YYCURSOR - base); t->dtype = DT_BF16; TOK(TK_DTYPE); }
            ident          { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_IDENT); }
            "\""           { lex_string(L, t, start); TOK(TK_STRING); }
            ";"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_SEMI); }
            ","            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_COMMA); }
            "("            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_LPAREN); }
            ")"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_RPAREN); }
            "["            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_LBRACK); }
            "]"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_RBRACK); }
            "{"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_LBRACE); }
            "}"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_RBRACE); }
            "="            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_ASSIGN); }
            ":"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_COLON); }
            "+"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_PLUS); }
            "-"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_MINUS); }
            "*"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_STAR); }
            "/"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_SLASH); }
            "%"            { L->pos = (uint32_t)(YYCURSOR - base); TOK(TK_PERCENT); }
            [\x80-\xff]+   { L->pos = (uint32_t)(YYCURSOR - base); lex_non_ascii(L, start, L->pos); continue; }
            *              { L->pos = (uint32_t)(YYCURSOR - base);
                             unsigned char c = (unsigned char)L->src[start];
                             if (c >= 0x20 && c < 0x7f) diag_error(L->d, sp(L, start, L->pos), "unexpected character '%c'", c);
                             else diag_error(L->d, sp(L, start, L->pos), "unexpected byte 0x%02x", c);
                             L->errors++; L->last_bad = true; continue; }
        */
    eof:
        L->pos = L->len;
        if (ends_statement_here(L)) {
            t->kind = TK_NL;
            t->span = sp(L, L->len, L->len);
            L->last2 = L->last;
            L->last = TK_NL;
            L->last_bad = false;
            return;
        }
        L->done = true;
        continue;
    done:
        t->kind = k;
        if (t->span.len == 0) t->span = sp(L, start, L->pos);
        if (k == TK_INT || k == TK_FLOAT) {
            uint32_t nend = L->pos;
            lex_unit(L, t);
            lex_number_tail(L, t, start, nend);
            if (k == TK_FLOAT && !isfinite(t->fval)) {
                diag_error(L->d, t->span, "number '%.*s' is too large", (int)(t->span.len > 40 ? 40 : t->span.len), L->src + start);
                L->errors++;
                t->fval = 0;
            }
        }
        if (k == TK_IDENT || k == TK_DTYPE || (k >= TK_IMPORT && k <= TK_INIT)) {
            size_t n = L->pos - start;
            t->str = arena_strndup(L->arena, L->src + start, n);
            t->slen = n;
        }
        if (t->kind == TK_LPAREN || t->kind == TK_LBRACK || t->kind == TK_LBRACE || t->kind == TK_RPAREN ||
            t->kind == TK_RBRACK || t->kind == TK_RBRACE) {
            L->pending = L->src[start];
            if (t->kind == TK_LPAREN || t->kind == TK_LBRACK || t->kind == TK_LBRACE)
                L->pending_open = describe_open(L, L->src[start], t->span);
            if (t->kind == TK_LBRACE) {
                L->repeat_pending = false;
                L->cond_pending = 0;
            }
        }
        if (L->depth == 0 && (t->kind == TK_LAYER || t->kind == TK_MODEL || t->kind == TK_TRAIN ||
                              t->kind == TK_TARGET || t->kind == TK_PLAN || t->kind == TK_HF || t->kind == TK_IMPORT ||
                              t->kind == TK_CONST))
            L->decl_kw = t->kind;
        if (t->kind == TK_REPEAT) L->repeat_pending = true;
        if (t->kind == TK_IF || t->kind == TK_ELSE) L->cond_pending = t->kind;
        if (t->kind == TK_SEMI) {
            L->repeat_pending = false;
            L->cond_pending = 0;
        }
        L->last2 = L->last;
        L->last2_span = L->last_span;
        L->last = t->kind;
        L->last_span = t->span;
        L->last_bad = false;
        return;
#undef TOK
    }
}
