/* chattmpl_parse: template text -> statement tree, with Jinja's lexing
 * rules under transformers' settings: line breaks made \n, trim_blocks
 * (the newline after a block or comment tag goes), lstrip_blocks (spaces
 * and tabs before a block or comment tag on its own line go), `-` strips
 * all white space on its side, `+` keeps it, one trailing newline of the
 * template goes. Each tag's contents are cut into tokens first, then
 * parsed by recursive descent in Jinja's precedence order. Names of
 * filters, tests, globals and methods are checked here, and calls of
 * plain names against the globals and the template's macros, so an
 * unsupported one is refused before anything renders. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chattmpl_impl.h"
#include "chattmpl_value.h"

typedef enum { TK_END, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP } TkKind;

typedef struct Tok {
    TkKind kind;
    const char *p; /* TK_NAME, TK_OP: in the source; TK_STR: decoded, in the arena */
    size_t n;
    int64_t i;
    double f;
    int line;
} Tok;

typedef struct Parser {
    ChatTemplate *t;
    const char *src;
    size_t len, pos;
    size_t line_pos; /* line counting: the line of line_pos is line */
    int line;
    PtrVec calls;  /* CT_CALL nodes of plain names: a global or a macro, checked at the end */
    PtrVec macros; /* CT_MACRO nodes */
    int in_macro;  /* parsing a macro's body */
    int loops;     /* for bodies around the statement being parsed (0 in a macro's own body) */
    Tok *toks; /* the current tag's tokens */
    size_t ntoks, captoks, k;
    int depth;  /* of expressions */
    int blocks; /* of statements */
    char *err;
    size_t errlen;
    int failed;
} Parser;

/* Python's white space (what Jinja's \s and str.rstrip() take) at and
 * before a position of the source: its length in bytes, or 0. */
static size_t space_at(const Parser *p, size_t pos) { return ws_at(str_of(p->src, p->len), pos); }
static size_t space_before(const Parser *p, size_t pos) { return ws_before(str_of(p->src, p->len), pos); }

static int line_at(Parser *p, size_t pos) {
    if (pos < p->line_pos) p->line_pos = 0, p->line = 1;
    for (; p->line_pos < pos && p->line_pos < p->len; p->line_pos++)
        if (p->src[p->line_pos] == '\n') p->line++;
    return p->line;
}

__attribute__((format(printf, 3, 4))) static void *fail(Parser *p, int line, const char *fmt, ...) {
    if (p->failed) return NULL;
    p->failed = 1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s: line %d: %s", p->t->name, line, msg);
    return NULL;
}

static CtNode *node(Parser *p, CtKind kind, int line) {
    CtNode *nd = ARENA_NEW(&p->t->arena, CtNode);
    if (!nd) return fail(p, line, "out of memory");
    nd->kind = kind;
    nd->line = line;
    return nd;
}

/* ---- tokens of one tag ---- */

static int push_tok(Parser *p, Tok tk) {
    if (p->ntoks == p->captoks) {
        size_t cap = p->captoks ? p->captoks * 2 : 32;
        Tok *nt = realloc(p->toks, cap * sizeof *nt);
        if (!nt) return fail(p, tk.line, "out of memory"), -1;
        p->toks = nt, p->captoks = cap;
    }
    p->toks[p->ntoks++] = tk;
    return 0;
}

static void put_utf8(char *o, size_t *on, uint32_t c) {
    if (c < 0x80) o[(*on)++] = (char)c;
    else if (c < 0x800) o[(*on)++] = (char)(0xC0 | (c >> 6)), o[(*on)++] = (char)(0x80 | (c & 0x3F));
    else if (c < 0x10000) {
        o[(*on)++] = (char)(0xE0 | (c >> 12));
        o[(*on)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[(*on)++] = (char)(0x80 | (c & 0x3F));
    } else {
        o[(*on)++] = (char)(0xF0 | (c >> 18));
        o[(*on)++] = (char)(0x80 | ((c >> 12) & 0x3F));
        o[(*on)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[(*on)++] = (char)(0x80 | (c & 0x3F));
    }
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal at p->pos (its quote); Python's escapes, an unknown one
 * kept with its backslash, as Python keeps it. */
static int lex_string(Parser *p, int line) {
    char q = p->src[p->pos++];
    size_t start = p->pos;
    while (p->pos < p->len && p->src[p->pos] != q) p->pos += p->src[p->pos] == '\\' ? 2 : 1;
    if (p->pos >= p->len) return fail(p, line, "a string literal is not closed"), -1;
    size_t end = p->pos++;
    char *o = arena_alloc(&p->t->arena, end - start + 1);
    if (!o) return fail(p, line, "out of memory"), -1;
    size_t on = 0;
    for (size_t i = start; i < end; i++) {
        char c = p->src[i];
        if (c != '\\') { o[on++] = c; continue; }
        char e = p->src[++i];
        switch (e) {
        case 'n': o[on++] = '\n'; break;
        case 't': o[on++] = '\t'; break;
        case 'r': o[on++] = '\r'; break;
        case '0': o[on++] = '\0'; break;
        case 'a': o[on++] = '\a'; break;
        case 'b': o[on++] = '\b'; break;
        case 'f': o[on++] = '\f'; break;
        case 'v': o[on++] = '\v'; break;
        case '\\': case '\'': case '"': o[on++] = e; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < digits; d++) {
                int h = i + 1 + (size_t)d < end ? hexval(p->src[i + 1 + d]) : -1;
                if (h < 0) return fail(p, line, "a \\%c escape needs %d hex digits", e, digits), -1;
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
                return fail(p, line, "the escape \\%c%0*X is not a character", e, digits, cp), -1;
            put_utf8(o, &on, cp);
            i += (size_t)digits;
            break;
        }
        default: o[on++] = '\\', o[on++] = e;
        }
    }
    o[on] = 0;
    return push_tok(p, (Tok){.kind = TK_STR, .p = o, .n = on, .line = line});
}

static const char *const OPS[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                                  "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};

/* Cuts the tag that opened before p->pos into p->toks, up to its closer
 * (`}}` for an output, `%}` for a statement, either with a `-` before it).
 * Sets *strip_after when the closer had `-`. */
static int lex_tag(Parser *p, int output, int *strip_after) {
    p->ntoks = p->k = 0;
    const char *closer = output ? "}}" : "%}";
    int brackets = 0; /* `}}` inside a dict literal closes the dict, not the tag */
    for (;;) {
        for (size_t w; p->pos < p->len && (w = space_at(p, p->pos));) p->pos += w;
        int line = line_at(p, p->pos);
        if (p->pos >= p->len) return fail(p, line, "the tag is not closed with '%s'", closer), -1;
        const char *s = p->src + p->pos;
        size_t left = p->len - p->pos;
        if (brackets == 0 && left >= 3 && s[0] == '-' && s[1] == closer[0] && s[2] == closer[1]) {
            p->pos += 3, *strip_after = 1;
            break;
        }
        if (brackets == 0 && left >= 2 && s[0] == closer[0] && s[1] == closer[1]) {
            p->pos += 2, *strip_after = 0;
            break;
        }
        char c = s[0];
        if (c == '\'' || c == '"') {
            if (lex_string(p, line)) return -1;
            continue;
        }
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t n = 1;
            while (n < left && (s[n] == '_' || (s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
                                (s[n] >= '0' && s[n] <= '9')))
                n++;
            p->pos += n;
            if (push_tok(p, (Tok){.kind = TK_NAME, .p = s, .n = n, .line = line})) return -1;
            continue;
        }
        if (c >= '0' && c <= '9') {
            size_t n = 0;
            int isfloat = 0;
            while (n < left && ((s[n] >= '0' && s[n] <= '9') || s[n] == '_')) n++;
            if (n + 1 < left && s[n] == '.' && s[n + 1] >= '0' && s[n + 1] <= '9') {
                isfloat = 1, n++;
                while (n < left && ((s[n] >= '0' && s[n] <= '9') || s[n] == '_')) n++;
            }
            if (n + 1 < left && (s[n] == 'e' || s[n] == 'E')) {
                size_t e = n + 1;
                if (e < left && (s[e] == '+' || s[e] == '-')) e++;
                if (e < left && s[e] >= '0' && s[e] <= '9') {
                    isfloat = 1, n = e;
                    while (n < left && s[n] >= '0' && s[n] <= '9') n++;
                }
            }
            char buf[64];
            size_t bn = 0;
            for (size_t j = 0; j < n && bn < sizeof buf - 1; j++)
                if (s[j] != '_') buf[bn++] = s[j];
            buf[bn] = 0;
            Tok tk = {.kind = isfloat ? TK_FLOAT : TK_INT, .line = line};
            if (isfloat) tk.f = strtod(buf, NULL);
            else {
                if (bn > 18) return fail(p, line, "the number %s is too large", buf), -1;
                tk.i = strtoll(buf, NULL, 10);
            }
            p->pos += n;
            if (push_tok(p, tk)) return -1;
            continue;
        }
        size_t k = 0;
        for (; k < sizeof OPS / sizeof *OPS; k++) {
            size_t on = strlen(OPS[k]);
            if (on <= left && memcmp(s, OPS[k], on) == 0) break;
        }
        if (k == sizeof OPS / sizeof *OPS) return fail(p, line, "unexpected character '%c'", c), -1;
        size_t on = strlen(OPS[k]);
        if (on == 1 && strchr("([{", c)) brackets++;
        if (on == 1 && strchr(")]}", c) && brackets > 0) brackets--;
        p->pos += on;
        if (push_tok(p, (Tok){.kind = TK_OP, .p = s, .n = on, .line = line})) return -1;
    }
    return push_tok(p, (Tok){.kind = TK_END, .line = line_at(p, p->pos)});
}

/* ---- expressions ---- */

static Tok *peek(Parser *p) { return &p->toks[p->k]; }
static Tok *peek2(Parser *p) { return &p->toks[p->k + (p->toks[p->k].kind != TK_END)]; }
static int is_op(const Tok *tk, const char *op) { return tk->kind == TK_OP && tk->n == strlen(op) && !memcmp(tk->p, op, tk->n); }
static int is_name(const Tok *tk, const char *nm) {
    return tk->kind == TK_NAME && tk->n == strlen(nm) && !memcmp(tk->p, nm, tk->n);
}
static int accept_op(Parser *p, const char *op) {
    if (!is_op(peek(p), op)) return 0;
    p->k++;
    return 1;
}
static int accept_name(Parser *p, const char *nm) {
    if (!is_name(peek(p), nm)) return 0;
    p->k++;
    return 1;
}
static const char *describe(const Tok *tk, char *buf, size_t n) {
    if (tk->kind == TK_END) return "the end of the tag";
    if (tk->kind == TK_STR) return "a string";
    if (tk->kind == TK_INT || tk->kind == TK_FLOAT) return "a number";
    snprintf(buf, n, "'%.*s'", (int)(tk->n > 40 ? 40 : tk->n), tk->p);
    return buf;
}
static int expect_op(Parser *p, const char *op) {
    if (accept_op(p, op)) return 0;
    char b[64];
    return fail(p, peek(p)->line, "expected '%s', found %s", op, describe(peek(p), b, sizeof b)), -1;
}
static const char *name_dup(Parser *p, const Tok *tk) { return arena_strndup(&p->t->arena, tk->p, tk->n); }

static int in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return 1;
    return 0;
}
static const char *const FILTERS[] = {"trim", "length", "count", "tojson", "upper", "lower", "capitalize", "title",
                                      "default", "d", "join", "items", "selectattr", "rejectattr", "select", "reject",
                                      "map", "list", "first", "last", "string", "int", "float", "reverse", "replace",
                                      "abs", "unique", "dictsort", "indent", NULL};
static const char *const TESTS[] = {"defined", "undefined", "none", "string", "mapping", "sequence", "iterable",
                                    "number", "integer", "float", "boolean", "true", "false", "equalto", "eq", "ne",
                                    "==", "!=", "odd", "even", "lower", "upper", "in", NULL};
static const char *const GLOBALS[] = {"raise_exception", "namespace", "range", "strftime_now", NULL};
static const char *const METHODS[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "replace",
                                      "upper", "lower", "title", "capitalize", "items", "keys", "values", "get", NULL};
static const char *const KEYWORDS[] = {"and", "or", "not", "in", "is", "if", "else", "elif", "endif", "for",
                                       "endfor", "set", "endset", "true", "false", "none", "True", "False", "None",
                                       NULL};

static CtNode *parse_expr(Parser *p);
static CtNode *parse_or(Parser *p);

static int enter(Parser *p) {
    if (++p->depth > CHATTMPL_MAX_DEPTH)
        return fail(p, peek(p)->line, "expressions nest deeper than %d", CHATTMPL_MAX_DEPTH), -1;
    return 0;
}

/* Arguments of a call, filter or test: positional then name=value. */
static int parse_args(Parser *p, CtNode *nd) {
    PtrVec args = {0}, kwn = {0}, kwv = {0};
    if (!accept_op(p, ")")) {
        do {
            if (peek(p)->kind == TK_NAME && is_op(peek2(p), "=")) {
                const char *kn = name_dup(p, peek(p));
                p->k += 2;
                CtNode *v = parse_expr(p);
                if (!v) return -1;
                ptrvec_push(&p->t->arena, &kwn, (void *)kn);
                ptrvec_push(&p->t->arena, &kwv, v);
            } else {
                if (kwn.len) return fail(p, peek(p)->line, "a positional argument follows a keyword argument"), -1;
                CtNode *v = parse_expr(p);
                if (!v) return -1;
                ptrvec_push(&p->t->arena, &args, v);
            }
        } while (accept_op(p, ","));
        if (expect_op(p, ")")) return -1;
    }
    nd->args = (CtNode **)args.items, nd->nargs = (size_t)args.len;
    nd->kwnames = (const char **)kwn.items, nd->kwargs = (CtNode **)kwv.items, nd->nkw = (size_t)kwn.len;
    return 0;
}

static CtNode *parse_primary(Parser *p) {
    Tok *tk = peek(p);
    int line = tk->line;
    CtNode *nd;
    if (tk->kind == TK_STR) {
        /* adjacent literals join, as in Python */
        nd = node(p, CT_STR, line);
        if (!nd) return NULL;
        nd->s = tk->p, nd->n = tk->n;
        p->k++;
        while (peek(p)->kind == TK_STR) {
            Tok *t2 = peek(p);
            char *j = arena_alloc(&p->t->arena, nd->n + t2->n + 1);
            if (!j) return fail(p, line, "out of memory");
            memcpy(j, nd->s, nd->n), memcpy(j + nd->n, t2->p, t2->n);
            nd->s = j, nd->n += t2->n;
            p->k++;
        }
        return nd;
    }
    if (tk->kind == TK_INT || tk->kind == TK_FLOAT) {
        nd = node(p, tk->kind == TK_INT ? CT_INT : CT_FLOAT, line);
        if (!nd) return NULL;
        nd->i = tk->i, nd->f = tk->f;
        p->k++;
        return nd;
    }
    if (tk->kind == TK_NAME) {
        p->k++;
        if (is_name(tk, "true") || is_name(tk, "True") || is_name(tk, "false") || is_name(tk, "False")) {
            if (!(nd = node(p, CT_BOOL, line))) return NULL;
            nd->i = tk->p[0] == 't' || tk->p[0] == 'T';
            return nd;
        }
        if (is_name(tk, "none") || is_name(tk, "None")) return node(p, CT_NONE, line);
        char *nm = arena_strndup(&p->t->arena, tk->p, tk->n);
        if (!nm) return fail(p, line, "out of memory");
        if (in_list(nm, KEYWORDS)) return fail(p, line, "unexpected '%s'", nm);
        if (p->in_macro && (!strcmp(nm, "varargs") || !strcmp(nm, "kwargs") || !strcmp(nm, "caller")))
            return fail(p, line, "'%s' in a macro is not supported", nm);
        if (!(nd = node(p, CT_NAME, line))) return NULL;
        nd->s = nm;
        return nd;
    }
    if (accept_op(p, "(")) {
        if (enter(p)) return NULL;
        CtNode *e = parse_expr(p);
        p->depth--;
        if (!e) return NULL;
        if (accept_op(p, ",")) { /* a tuple: a list that prints as one */
            CtNode *tu = node(p, CT_LIST, line);
            PtrVec items = {0};
            if (!tu) return NULL;
            tu->i = 1;
            ptrvec_push(&p->t->arena, &items, e);
            while (!is_op(peek(p), ")")) {
                if (enter(p)) return NULL;
                CtNode *x = parse_expr(p);
                p->depth--;
                if (!x) return NULL;
                ptrvec_push(&p->t->arena, &items, x);
                if (!accept_op(p, ",")) break;
            }
            tu->args = (CtNode **)items.items, tu->nargs = (size_t)items.len;
            e = tu;
        }
        if (expect_op(p, ")")) return NULL;
        return e;
    }
    if (accept_op(p, "[") || accept_op(p, "{")) {
        int dict = p->toks[p->k - 1].p[0] == '{';
        if (enter(p)) return NULL;
        if (!(nd = node(p, dict ? CT_DICT : CT_LIST, line))) return NULL;
        PtrVec items = {0};
        const char *close = dict ? "}" : "]";
        while (!accept_op(p, close)) {
            CtNode *e = parse_expr(p);
            if (!e) return NULL;
            ptrvec_push(&p->t->arena, &items, e);
            if (dict) {
                if (expect_op(p, ":")) return NULL;
                if (!(e = parse_expr(p))) return NULL;
                ptrvec_push(&p->t->arena, &items, e);
            }
            if (!accept_op(p, ",")) {
                if (expect_op(p, close)) return NULL;
                break;
            }
        }
        p->depth--;
        nd->args = (CtNode **)items.items, nd->nargs = (size_t)items.len;
        return nd;
    }
    char b[64];
    return fail(p, line, "expected a value, found %s", describe(tk, b, sizeof b));
}

static CtNode *parse_postfix(Parser *p, CtNode *nd) {
    for (;;) {
        int line = peek(p)->line;
        if (accept_op(p, ".")) {
            Tok *tk = peek(p);
            if (tk->kind != TK_NAME) return fail(p, line, "expected an attribute name after '.'");
            CtNode *a = node(p, CT_ATTR, line);
            if (!a) return NULL;
            a->a = nd, a->s = name_dup(p, tk);
            p->k++;
            nd = a;
        } else if (accept_op(p, "[")) {
            CtNode *parts[3] = {0};
            int colons = 0;
            for (;;) {
                if (is_op(peek(p), ":")) {
                    if (++colons > 2) return fail(p, line, "a slice has at most two ':'");
                    p->k++;
                    continue;
                }
                if (is_op(peek(p), "]")) break;
                if (parts[colons]) return fail(p, line, "expected ':' or ']' in a subscript");
                if (!(parts[colons] = parse_expr(p))) return NULL;
            }
            p->k++;
            CtNode *ix = node(p, colons ? CT_SLICE : CT_INDEX, line);
            if (!ix) return NULL;
            ix->a = nd;
            if (colons) {
                ix->args = ARENA_NEWN(&p->t->arena, CtNode *, 3);
                if (!ix->args) return fail(p, line, "out of memory");
                memcpy(ix->args, parts, sizeof parts);
                ix->nargs = 3;
            } else {
                if (!parts[0]) return fail(p, line, "an empty subscript");
                ix->b = parts[0];
            }
            nd = ix;
        } else if (accept_op(p, "(")) {
            CtNode *c = node(p, CT_CALL, line);
            if (!c) return NULL;
            c->a = nd;
            if (nd->kind == CT_NAME && !in_list(nd->s, GLOBALS)) ptrvec_push(&p->t->arena, &p->calls, c);
            if (nd->kind == CT_ATTR && !in_list(nd->s, METHODS))
                return fail(p, line, "the method '%s' is not supported", nd->s);
            if (nd->kind != CT_NAME && nd->kind != CT_ATTR) return fail(p, line, "only named functions can be called");
            if (parse_args(p, c)) return NULL;
            nd = c;
        } else
            return nd;
    }
}

/* Filters and tests bind tighter than arithmetic, as in Jinja. */
static CtNode *parse_filters(Parser *p, CtNode *nd) {
    for (;;) {
        int line = peek(p)->line;
        if (accept_op(p, "|")) {
            Tok *tk = peek(p);
            if (tk->kind != TK_NAME) return fail(p, line, "expected a filter name after '|'");
            const char *nm = name_dup(p, tk);
            p->k++;
            if (!in_list(nm, FILTERS)) return fail(p, line, "the filter '%s' is not supported", nm);
            CtNode *f = node(p, CT_FILTER, line);
            if (!f) return NULL;
            f->a = nd, f->s = nm;
            if (accept_op(p, "(") && parse_args(p, f)) return NULL;
            nd = f;
        } else if (accept_name(p, "is")) {
            int negate = accept_name(p, "not");
            Tok *tk = peek(p);
            const char *nm;
            if (tk->kind == TK_NAME) nm = name_dup(p, tk);
            else if (is_op(tk, "==") || is_op(tk, "!=")) nm = tk->p[0] == '=' ? "==" : "!=";
            else return fail(p, line, "expected a test name after 'is'");
            p->k++;
            if (!in_list(nm, TESTS)) return fail(p, line, "the test '%s' is not supported", nm);
            CtNode *t = node(p, CT_TEST, line);
            if (!t) return NULL;
            t->a = nd, t->s = nm, t->i = negate;
            if (accept_op(p, "(")) {
                if (parse_args(p, t)) return NULL;
            } else {
                /* `is equalto 3`: one argument without parentheses */
                Tok *n2 = peek(p);
                if (n2->kind == TK_STR || n2->kind == TK_INT || n2->kind == TK_FLOAT ||
                    (n2->kind == TK_NAME && !is_name(n2, "and") && !is_name(n2, "or") && !is_name(n2, "else") &&
                     !is_name(n2, "if") && !is_name(n2, "is") && !is_name(n2, "in") && !is_name(n2, "not"))) {
                    CtNode *arg = parse_postfix(p, parse_primary(p));
                    if (!arg) return NULL;
                    t->args = ARENA_NEWN(&p->t->arena, CtNode *, 1);
                    if (!t->args) return fail(p, line, "out of memory");
                    t->args[0] = arg, t->nargs = 1;
                }
            }
            nd = t;
        } else
            return nd;
    }
}

/* `-x | f` is `(-x) | f`, as in Jinja: the operand of a sign takes no
 * filters of its own. */
static CtNode *parse_unary(Parser *p, int with_filters) {
    int line = peek(p)->line;
    CtNode *e;
    if (is_op(peek(p), "-") || is_op(peek(p), "+")) {
        int neg = peek(p)->p[0] == '-';
        p->k++;
        if (enter(p)) return NULL;
        e = parse_unary(p, 0);
        p->depth--;
        if (!e) return NULL;
        if (neg) {
            CtNode *nd = node(p, CT_NEG, line);
            if (!nd) return NULL;
            nd->a = e;
            e = nd;
        }
    } else if (!(e = parse_primary(p)) || !(e = parse_postfix(p, e)))
        return NULL;
    return with_filters ? parse_filters(p, e) : e;
}

static CtNode *binop(Parser *p, int op, CtNode *a, CtNode *b, int line) {
    if (!a || !b) return NULL;
    CtNode *nd = node(p, CT_BINOP, line);
    if (!nd) return NULL;
    nd->op = op, nd->a = a, nd->b = b;
    return nd;
}

static CtNode *parse_pow(Parser *p) {
    CtNode *a = parse_unary(p, 1);
    while (a && is_op(peek(p), "**")) {
        int line = peek(p)->line;
        p->k++;
        a = binop(p, CT_OP_POW, a, parse_unary(p, 1), line);
    }
    return a;
}
static CtNode *parse_mul(Parser *p) {
    CtNode *a = parse_pow(p);
    for (;;) {
        int op = is_op(peek(p), "*") ? CT_OP_MUL : is_op(peek(p), "/") ? CT_OP_DIV : is_op(peek(p), "//") ? CT_OP_FLOORDIV
                 : is_op(peek(p), "%") ? CT_OP_MOD : 0;
        if (!a || !op) return a;
        int line = peek(p)->line;
        p->k++;
        a = binop(p, op, a, parse_pow(p), line);
    }
}
static CtNode *parse_concat(Parser *p) {
    CtNode *a = parse_mul(p);
    while (a && is_op(peek(p), "~")) {
        int line = peek(p)->line;
        p->k++;
        a = binop(p, CT_OP_CONCAT, a, parse_mul(p), line);
    }
    return a;
}
static CtNode *parse_add(Parser *p) {
    CtNode *a = parse_concat(p);
    for (;;) {
        int op = is_op(peek(p), "+") ? CT_OP_ADD : is_op(peek(p), "-") ? CT_OP_SUB : 0;
        if (!a || !op) return a;
        int line = peek(p)->line;
        p->k++;
        a = binop(p, op, a, parse_concat(p), line);
    }
}
static CtNode *parse_cmp(Parser *p) {
    CtNode *a = parse_add(p);
    for (;;) {
        Tok *tk = peek(p);
        int op = is_op(tk, "==") ? CT_OP_EQ : is_op(tk, "!=") ? CT_OP_NE : is_op(tk, "<") ? CT_OP_LT : is_op(tk, ">") ? CT_OP_GT
                 : is_op(tk, "<=") ? CT_OP_LE : is_op(tk, ">=") ? CT_OP_GE : is_name(tk, "in") ? CT_OP_IN
                 : is_name(tk, "not") && is_name(peek2(p), "in") ? CT_OP_NOTIN : 0;
        if (!a || !op) return a;
        int line = tk->line;
        p->k += op == CT_OP_NOTIN ? 2 : 1;
        CtNode *b = parse_add(p);
        if (!b) return NULL;
        CtNode *nd = node(p, CT_CMP, line);
        if (!nd) return NULL;
        nd->op = op, nd->a = a, nd->b = b;
        a = nd;
    }
}
static CtNode *parse_not(Parser *p) {
    int line = peek(p)->line;
    if (accept_name(p, "not")) {
        if (enter(p)) return NULL;
        CtNode *e = parse_not(p);
        p->depth--;
        if (!e) return NULL;
        CtNode *nd = node(p, CT_NOT, line);
        if (!nd) return NULL;
        nd->a = e;
        return nd;
    }
    return parse_cmp(p);
}
static CtNode *parse_and(Parser *p) {
    CtNode *a = parse_not(p);
    while (a && is_name(peek(p), "and")) {
        int line = peek(p)->line;
        p->k++;
        CtNode *b = parse_not(p), *nd = b ? node(p, CT_AND, line) : NULL;
        if (!nd) return NULL;
        nd->a = a, nd->b = b, a = nd;
    }
    return a;
}
static CtNode *parse_or(Parser *p) {
    CtNode *a = parse_and(p);
    while (a && is_name(peek(p), "or")) {
        int line = peek(p)->line;
        p->k++;
        CtNode *b = parse_and(p), *nd = b ? node(p, CT_OR, line) : NULL;
        if (!nd) return NULL;
        nd->a = a, nd->b = b, a = nd;
    }
    return a;
}
static CtNode *parse_expr(Parser *p) {
    if (enter(p)) return NULL;
    CtNode *a = parse_or(p);
    while (a && is_name(peek(p), "if")) {
        int line = peek(p)->line;
        p->k++;
        CtNode *nd = node(p, CT_COND, line);
        if (!nd || !(nd->b = parse_or(p))) return NULL;
        nd->a = a;
        if (accept_name(p, "else") && !(nd->c = parse_expr(p))) return NULL;
        a = nd;
    }
    p->depth--;
    return a;
}

static int expect_end(Parser *p) {
    if (peek(p)->kind == TK_END) return 0;
    char b[64];
    return fail(p, peek(p)->line, "expected the end of the tag, found %s", describe(peek(p), b, sizeof b)), -1;
}

/* ---- statements ---- */

typedef struct Block {
    CtNode *head, **tail;
} Block;

static void append(Block *b, CtNode *nd) {
    *b->tail = nd;
    b->tail = &nd->next;
}

/* Parses statements into b until a tag whose first word is one of `ends`
 * (NULL-terminated); returns that word's index, -1 at the end of the
 * template when ends is NULL, or -2 on error. */
static int parse_body(Parser *p, Block *b, const char *const *ends, int opener_line, const char *opener);

/* The text from p->pos up to the next tag, or the end; applies the
 * stripping the next tag asks for. */
static int parse_text(Parser *p, Block *b, int *line_starting) {
    size_t start = p->pos, next = p->pos;
    const char *tag = NULL;
    while (next + 1 < p->len) {
        if (p->src[next] == '{' && (p->src[next + 1] == '{' || p->src[next + 1] == '%' || p->src[next + 1] == '#')) {
            tag = p->src + next;
            break;
        }
        next++;
    }
    if (!tag) next = p->len;
    size_t end = next;
    if (tag && next + 2 < p->len + 1) {
        char mod = next + 2 < p->len ? p->src[next + 2] : 0;
        if (mod == '-') {
            for (size_t w; end > start && (w = space_before(p, end)) && end - w >= start;) end -= w;
        } else if (mod != '+' && tag[1] != '{') {
            /* lstrip_blocks: spaces and tabs between a line's start and a block tag */
            size_t ls = end;
            while (ls > start && (p->src[ls - 1] == ' ' || p->src[ls - 1] == '\t')) ls--;
            if ((ls > start && p->src[ls - 1] == '\n') || (ls == start && *line_starting)) end = ls;
        }
    }
    if (end > start) {
        CtNode *t = node(p, CT_TEXT, line_at(p, start));
        if (!t) return -1;
        t->s = p->src + start, t->n = end - start;
        append(b, t);
    }
    p->pos = next;
    return 0;
}

/* After a tag: `-` strips all white space, trim_blocks one newline after a
 * block or comment. */
static void after_tag(Parser *p, int strip, int block, int *line_starting) {
    if (strip)
        for (size_t w; p->pos < p->len && (w = space_at(p, p->pos));) p->pos += w;
    else if (block && p->pos < p->len && p->src[p->pos] == '\n')
        p->pos++;
    *line_starting = p->pos == 0 || p->src[p->pos - 1] == '\n';
}

static int parse_body(Parser *p, Block *b, const char *const *ends, int opener_line, const char *opener) {
    int line_starting = p->pos == 0 || p->src[p->pos - 1] == '\n';
    if (++p->blocks > CHATTMPL_MAX_DEPTH) return fail(p, opener_line, "blocks nest deeper than %d", CHATTMPL_MAX_DEPTH), -2;
    for (;;) {
        if (parse_text(p, b, &line_starting)) return -2;
        if (p->pos >= p->len) {
            if (!ends) return p->blocks--, -1;
            return fail(p, opener_line, "the '%s' opened here is not closed", opener), -2;
        }
        int line = line_at(p, p->pos);
        char kind = p->src[p->pos + 1];
        p->pos += 2;
        if (p->pos < p->len && (p->src[p->pos] == '-' || p->src[p->pos] == '+')) p->pos++;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t j = p->pos; j + 1 < p->len; j++)
                if (p->src[j] == '#' && p->src[j + 1] == '}') { e = p->src + j; break; }
            if (!e) return fail(p, line, "the comment is not closed with '#}'"), -2;
            int strip = e > p->src + p->pos && e[-1] == '-';
            p->pos = (size_t)(e - p->src) + 2;
            after_tag(p, strip, 1, &line_starting);
            continue;
        }
        int strip = 0;
        if (lex_tag(p, kind == '{', &strip)) return -2;
        if (kind == '{') {
            CtNode *o = node(p, CT_OUTPUT, line);
            if (!o || !(o->a = parse_expr(p)) || expect_end(p)) return -2;
            append(b, o);
            after_tag(p, strip, 0, &line_starting);
            continue;
        }
        Tok *kw = peek(p);
        if (kw->kind != TK_NAME) return fail(p, line, "expected a statement name after '{%%'"), -2;
        char word[32];
        snprintf(word, sizeof word, "%.*s", (int)(kw->n < 31 ? kw->n : 31), kw->p);
        p->k++;
        if (ends)
            for (int e = 0; ends[e]; e++)
                if (!strcmp(word, ends[e])) {
                    /* the caller parses the rest of this tag */
                    p->blocks--;
                    after_tag(p, strip, 1, &line_starting);
                    return e;
                }
        if (!strcmp(word, "if")) {
            CtNode *nd = node(p, CT_IF, line), *cur = nd;
            if (!nd || !(nd->a = parse_expr(p)) || expect_end(p)) return -2;
            after_tag(p, strip, 1, &line_starting);
            static const char *const if_ends[] = {"elif", "else", "endif", NULL};
            static const char *const else_ends[] = {"endif", NULL};
            for (;;) {
                Block body = {NULL, &body.head};
                int e = parse_body(p, &body, if_ends, line, "if");
                if (e < 0) return -2;
                cur->body = body.head;
                if (e == 0) { /* elif: an if in the else branch */
                    CtNode *el = node(p, CT_IF, peek(p)->line);
                    if (!el || !(el->a = parse_expr(p)) || expect_end(p)) return -2;
                    cur->orelse = el;
                    cur = el;
                    continue;
                }
                if (expect_end(p)) return -2;
                if (e == 1) {
                    Block eb = {NULL, &eb.head};
                    if (parse_body(p, &eb, else_ends, line, "if") < 0 || expect_end(p)) return -2;
                    cur->orelse = eb.head;
                }
                break;
            }
            append(b, nd);
            line_starting = p->pos == 0 || p->src[p->pos - 1] == '\n';
            continue;
        }
        if (!strcmp(word, "for")) {
            CtNode *nd = node(p, CT_FOR, line);
            if (!nd) return -2;
            if (peek(p)->kind != TK_NAME) return fail(p, line, "expected a loop variable after 'for'"), -2;
            nd->s = name_dup(p, peek(p));
            p->k++;
            if (accept_op(p, ",")) {
                if (peek(p)->kind != TK_NAME) return fail(p, line, "expected a second loop variable after ','"), -2;
                nd->s2 = name_dup(p, peek(p));
                p->k++;
                if (is_op(peek(p), ",")) return fail(p, line, "a for loop unpacks at most two variables"), -2;
            }
            if (!accept_name(p, "in")) return fail(p, line, "expected 'in' in the for loop"), -2;
            if (!(nd->a = parse_or(p))) return -2;
            if (accept_name(p, "if") && !(nd->b = parse_or(p))) return -2;
            if (accept_name(p, "recursive")) return fail(p, line, "recursive loops are not supported"), -2;
            if (expect_end(p)) return -2;
            after_tag(p, strip, 1, &line_starting);
            static const char *const for_ends[] = {"else", "endfor", NULL};
            Block body = {NULL, &body.head};
            p->loops++;
            int e = parse_body(p, &body, for_ends, line, "for");
            p->loops--;
            if (e < 0 || expect_end(p)) return -2;
            nd->body = body.head;
            if (e == 0) {
                static const char *const else_ends[] = {"endfor", NULL};
                Block eb = {NULL, &eb.head};
                if (parse_body(p, &eb, else_ends, line, "for") < 0 || expect_end(p)) return -2;
                nd->orelse = eb.head;
            }
            append(b, nd);
            line_starting = p->pos == 0 || p->src[p->pos - 1] == '\n';
            continue;
        }
        if (!strcmp(word, "set")) {
            CtNode *nd = node(p, CT_SET, line);
            if (!nd) return -2;
            if (peek(p)->kind != TK_NAME) return fail(p, line, "expected a name after 'set'"), -2;
            nd->s = name_dup(p, peek(p));
            p->k++;
            if (accept_op(p, ".")) {
                if (peek(p)->kind != TK_NAME) return fail(p, line, "expected an attribute name after '.'"), -2;
                nd->s2 = name_dup(p, peek(p));
                p->k++;
            }
            if (is_op(peek(p), ",")) return fail(p, line, "'set' with several targets is not supported"), -2;
            if (peek(p)->kind == TK_END && !nd->s2) { /* {% set x %}...{% endset %} */
                static const char *const set_ends[] = {"endset", NULL};
                Block body = {NULL, &body.head};
                nd->kind = CT_SETBLOCK;
                after_tag(p, strip, 1, &line_starting);
                if (parse_body(p, &body, set_ends, line, "set") < 0 || expect_end(p)) return -2;
                nd->body = body.head;
                append(b, nd);
                line_starting = p->pos == 0 || p->src[p->pos - 1] == '\n';
                continue;
            }
            if (is_op(peek(p), "|")) return fail(p, line, "a filtered block 'set' is not supported"), -2;
            if (expect_op(p, "=") || !(nd->a = parse_expr(p)) || expect_end(p)) return -2;
            append(b, nd);
            after_tag(p, strip, 1, &line_starting);
            continue;
        }
        if (!strcmp(word, "generation")) { /* transformers' marker of the assistant's tokens */
            static const char *const gen_ends[] = {"endgeneration", NULL};
            CtNode *nd = node(p, CT_GENERATION, line);
            Block body = {NULL, &body.head};
            if (!nd || expect_end(p)) return -2;
            after_tag(p, strip, 1, &line_starting);
            if (parse_body(p, &body, gen_ends, line, "generation") < 0 || expect_end(p)) return -2;
            nd->body = body.head;
            p->t->has_generation = 1;
            append(b, nd);
            line_starting = p->pos == 0 || p->src[p->pos - 1] == '\n';
            continue;
        }
        if (!strcmp(word, "macro")) {
            static const char *const macro_ends[] = {"endmacro", NULL};
            CtNode *nd = node(p, CT_MACRO, line);
            PtrVec params = {0}, dflts = {0};
            Block body = {NULL, &body.head};
            if (!nd) return -2;
            if (peek(p)->kind != TK_NAME) return fail(p, line, "expected a macro name after 'macro'"), -2;
            nd->s = name_dup(p, peek(p));
            p->k++;
            if (expect_op(p, "(")) return -2;
            while (!accept_op(p, ")")) {
                if (peek(p)->kind != TK_NAME) return fail(p, line, "expected a parameter name in macro '%s'", nd->s), -2;
                CtNode *param = node(p, CT_NAME, line), *dflt = NULL;
                if (!param) return -2;
                param->s = name_dup(p, peek(p));
                p->k++;
                if (accept_op(p, "=") && !(dflt = parse_expr(p))) return -2;
                if (!dflt && dflts.len && dflts.items[dflts.len - 1])
                    return fail(p, line, "a parameter without a default follows one with a default in macro '%s'", nd->s), -2;
                ptrvec_push(&p->t->arena, &params, param);
                ptrvec_push(&p->t->arena, &dflts, dflt);
                if (!accept_op(p, ",")) {
                    if (expect_op(p, ")")) return -2;
                    break;
                }
            }
            if (expect_end(p)) return -2;
            nd->args = (CtNode **)params.items, nd->nargs = (size_t)params.len;
            nd->kwargs = (CtNode **)dflts.items, nd->nkw = (size_t)dflts.len;
            after_tag(p, strip, 1, &line_starting);
            int outer_loops = p->loops;
            p->in_macro++, p->loops = 0;
            if (parse_body(p, &body, macro_ends, line, "macro") < 0) return -2;
            p->in_macro--, p->loops = outer_loops;
            if (peek(p)->kind == TK_NAME && is_name(peek(p), nd->s)) p->k++; /* {% endmacro name %} */
            if (expect_end(p)) return -2;
            nd->body = body.head;
            ptrvec_push(&p->t->arena, &p->macros, nd);
            append(b, nd);
            line_starting = p->pos == 0 || p->src[p->pos - 1] == '\n';
            continue;
        }
        if (!strcmp(word, "break") || !strcmp(word, "continue")) {
            if (!p->loops) return fail(p, line, "'%s' outside a loop", word), -2;
            CtNode *nd = node(p, word[0] == 'b' ? CT_BREAK : CT_CONTINUE, line);
            if (!nd || expect_end(p)) return -2;
            append(b, nd);
            after_tag(p, strip, 1, &line_starting);
            continue;
        }
        if (!strcmp(word, "elif") || !strcmp(word, "else") || !strncmp(word, "end", 3))
            return fail(p, line, "'%s' without a matching opening tag", word), -2;
        return fail(p, line, "the statement '%s' is not supported", word), -2;
    }
}

int chattmpl_parse_into(ChatTemplate *t, const char *text, size_t n, char *err, size_t errlen) {
    /* the tree's text nodes point into the template's own copy, with its
     * line breaks made \n as Jinja makes them (\r\n and \r, in text and
     * in string literals alike) */
    char *src = arena_alloc(&t->arena, n + 1);
    if (!src) {
        snprintf(err, errlen, "%s: out of memory", t->name);
        return -1;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n') continue;
        src[m++] = text[i] == '\r' ? '\n' : text[i];
    }
    n = m;
    Parser p = {.t = t, .src = src, .len = n, .line = 1, .err = err, .errlen = errlen};
    /* keep_trailing_newline is off in transformers' environment */
    if (p.len && src[p.len - 1] == '\n') p.len--;
    Block b = {NULL, &b.head};
    int r = parse_body(&p, &b, NULL, 1, "");
    free(p.toks);
    if (r == -2 || p.failed) return -1;
    /* a call of a plain name: a global, or a macro the template defines */
    for (int i = 0; i < p.calls.len; i++) {
        const CtNode *c = p.calls.items[i];
        int found = 0;
        for (int m = 0; m < p.macros.len && !found; m++) found = !strcmp(((CtNode *)p.macros.items[m])->s, c->a->s);
        if (!found) return fail(&p, c->line, "the function '%s' is not supported", c->a->s), -1;
    }
    t->body = b.head;
    return 0;
}
