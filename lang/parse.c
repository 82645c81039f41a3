#include "parse.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "grammar.h"
#include "lex.h"
#include "nearest.h"
#include "parse_ctx.h"


static Span tok_span(const Token *t) { return t ? t->span : SPAN_NONE; }

/* ---- diagnostics ---- */

enum {
    PARSE_MAX_DEPTH = 100, /* open brackets */
    PARSE_MAX_OPS = 500,   /* operators and brackets in one statement: bounds the tree's depth */
};

#define BIT(k) ((uint64_t)1 << (k))

static bool is_decl_kw(int k) { return k >= TK_IMPORT && k <= TK_HF; }
static bool is_closer(int k) { return k == TK_RPAREN || k == TK_RBRACK || k == TK_RBRACE; }

static const char *excerpt(PCtx *c, const Token *t) {
    int n = (int)(t->span.len > 40 ? 40 : t->span.len);
    return arena_printf(c->arena, "%.*s%s", n, c->lex->src + t->span.off, t->span.len > 40 ? "..." : "");
}

static const char *describe(PCtx *c, int major, const Token *t) {
    switch (major) {
    case 0: return "end of file";
    case TK_NL: return "newline";
    case TK_IDENT: return arena_printf(c->arena, "name '%s'", excerpt(c, t));
    case TK_INT:
    case TK_FLOAT: return arena_printf(c->arena, "number '%s'", excerpt(c, t));
    case TK_STRING: return arena_printf(c->arena, "string %s", excerpt(c, t));
    case TK_DTYPE: return arena_printf(c->arena, "type '%s'", dtype_name(t->dtype));
    default:
        if (major >= TK_IMPORT && major <= TK_INIT) return arena_printf(c->arena, "keyword %s", lex_token_name(major));
        return lex_token_name(major);
    }
}

static const char *const unit_words[] = {"K", "M", "G", "T", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB",
                                         "KB/s", "MB/s", "GB/s", "TB/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"};

/* A name right after a number that looks like a unit: a unit in the wrong
 * case ("gib"), a rate without its slash ("GBs", "MBps"), or a unit one
 * edit away ("GiBB"). Nothing for names that are no unit ("2 b"). */
static void unit_hint(PCtx *c, const char *w) {
    size_t n = strlen(w), nu = sizeof unit_words / sizeof *unit_words;
    for (size_t i = 0; i < nu; i++)
        if (!strcasecmp(w, unit_words[i])) {
            diag_hint(c->d, "did you mean the unit '%s'? (units are case-sensitive)", unit_words[i]);
            return;
        }
    for (size_t i = 4; i < 12; i++) { /* the byte units: "GiBs", "GBps" */
        size_t k = strlen(unit_words[i]);
        if (n > k && !strncasecmp(w, unit_words[i], k) && (!strcmp(w + k, "s") || !strcmp(w + k, "ps"))) {
            diag_hint(c->d, "did you mean the unit '%s' or the rate '%s/s'?", unit_words[i], unit_words[i]);
            return;
        }
    }
    if (n < 3) return;
    const char *u = diag_nearest(w, unit_words, (int)nu);
    if (u && edit_distance(w, u) <= 1) diag_hint(c->d, "did you mean the unit '%s'?", u);
}

/* "expected A, B or C" from the expected set, separators last. */
static const char *list_expected(PCtx *c, uint64_t e) {
    const char *names[8];
    int n = 0;
    for (int k = 1; k < 64 && n < 8; k++)
        if ((e & BIT(k)) && k != TK_NL && k != TK_SEMI && k != TK_UMINUS && k != TK_BAD) names[n++] = lex_token_name(k);
    if (e & (BIT(TK_NL) | BIT(TK_SEMI))) {
        if (n < 8) names[n++] = "newline";
    }
    if (n == 0 || n > 4) return NULL;
    const char *s = names[0];
    for (int i = 1; i < n; i++) s = arena_printf(c->arena, "%s%s%s", s, i == n - 1 ? " or " : ", ", names[i]);
    return s;
}

void parse_syntax_error(PCtx *c, int major, const Token *t) {
    c->syntax_errors++;
    uint64_t e = c->expected;
    Lexer *L = c->lex;
    if (c->silent) return;
    if (L->errors > c->lex_errors_at_sep) return; /* a bad character in this statement was reported */
    bool eof = major == 0 || (major == TK_NL && t->span.len == 0);
    if (eof) major = 0;
    const char *found = describe(c, major, t);
    Span at = eof ? (Span){c->file, L->len, 0} : t->span;
    const LexBracket *b = lex_open(L);
    bool expr_ok = e & BIT(TK_INT), name_ok = e & BIT(TK_IDENT), end_ok = e & BIT(TK_NL);
    if (b) {
        char close = b->ch == '(' ? ')' : b->ch == '[' ? ']' : '}';
        int ck = b->ch == '(' ? TK_RPAREN : b->ch == '[' ? TK_RBRACK : TK_RBRACE;
        if (e & BIT(ck)) {
            bool nl = !eof && t->nl.file >= 0 && b->ch != '{' && !expr_ok;
            if (nl) {
                at = t->nl;
                found = "newline";
            }
            if (eof || is_decl_kw(major) || (!expr_ok && !name_ok && !(b->ch == '{' && end_ok))) {
                diag_error(c->d, at, "expected '%c' to close %s, found %s", close, lex_open_what(L, b), found);
                diag_note(c->d, b->at, "the '%c' opened here", b->ch);
                c->reported_open = b->at;
                return;
            }
            if (expr_ok) {
                diag_error(c->d, at, "expected %s or '%c', found %s",
                           b->what == LO_CALL ? "an argument" : "an expression", close, found);
                return;
            }
            if (name_ok && b->ch == '{' && b->what == LO_DECL && b->decl_kw == TK_HF) {
                diag_error(c->d, at, "expected an entry or '}', found %s", found);
                diag_hint(c->d, "an hf entry is \"PARAMETER PATTERN\" = \"HF TENSOR\" (or transpose, cat, cols of them), "
                                "or config = \"JSON\"");
                return;
            }
            if (name_ok && b->ch == '{') {
                diag_error(c->d, at, "expected %s or '}', found %s",
                           e & BIT(TK_REPEAT) ? "a statement" : "a setting", found);
                if (major == TK_ELSE)
                    diag_hint(c->d, "else goes on the line of the '}' that closes the if body: } else {");
                else if (e & BIT(TK_REPEAT))
                    diag_hint(c->d, "a statement is NAME = EXPR, A, B = EXPR, repeat N { ... }, if C { ... } else { ... }, "
                                    "return EXPR or loss EXPR");
                else
                    diag_hint(c->d, "a setting is KEY = EXPR, KEY \"selector\" = EXPR or KEY { settings }");
                return;
            }
        }
    }
    if (!b && is_closer(major)) {
        diag_error(c->d, at, "unmatched %s", found);
        return;
    }
    if (expr_ok) {
        diag_error(c->d, at, "expected an expression, found %s", found);
    } else if (e & BIT(TK_LAYER)) {
        diag_error(c->d, at, "expected a declaration, found %s", found);
        diag_hint(c->d, "a declaration starts with import, const, layer, model, train, target, plan or hf");
    } else if ((e & BIT(TK_AS)) && (e & BIT(TK_LBRACE))) {
        diag_error(c->d, at, "expected '{' to start the repeat body, found %s", found);
        diag_hint(c->d, "repeat N { ... } or repeat N as i { ... }, the '{' on the line of the repeat");
    } else if (end_ok && (e & BIT(TK_PLUS))) {
        diag_error(c->d, at, "expected an operator or the end of the statement, found %s", found);
    } else {
        const char *x = list_expected(c, e);
        if (x) diag_error(c->d, at, "expected %s, found %s", x, found);
        else diag_error(c->d, at, "unexpected %s", found);
    }
    if (major == TK_LPAREN && (e & BIT(TK_ASSIGN)) && (e & BIT(TK_COMMA)))
        diag_hint(c->d, "a call is not a statement: assign its result (y = f(x))");
    if (major == TK_ASSIGN && L->last2 >= TK_IMPORT && L->last2 <= TK_INIT)
        diag_hint(c->d, "%s is a keyword; it cannot be used as a name", lex_token_name(L->last2));
    if (major == TK_IDENT && t->str && (L->last2 == TK_INT || L->last2 == TK_FLOAT)) unit_hint(c, t->str);
    if (L->last2 == TK_COMMA && (is_decl_kw(major) || major == 0))
        diag_hint(c->d, "a ',' at the end of a line continues the list on the next line: remove it");
    if (major == TK_COLON && (e & BIT(TK_ASSIGN)) && t->span.off + 1 < L->len && L->src[t->span.off + 1] == '=')
        diag_hint(c->d, "assignment is NAME = EXPR, without ':'");
    if ((major == TK_INT || major == TK_FLOAT) && L->last2 == TK_IDENT && L->last2_span.file >= 0) {
        const char *w = arena_strndup(c->arena, L->src + L->last2_span.off, L->last2_span.len);
        for (size_t i = 0; w && i < sizeof unit_words / sizeof *unit_words; i++)
            if (!strcmp(w, unit_words[i])) {
                diag_hint(c->d, "a unit goes after its number: %s %s", excerpt(c, t), w);
                break;
            }
    }
}

void parse_too_deep(PCtx *c) {
    diag_error(c->d, (Span){c->file, c->lex->pos, 0}, "nested too deeply for the parser");
    diag_hint(c->d, "split the expression into several assignments");
    c->too_deep = 1;
    c->failed = 1;
}

/* ---- declarations ---- */

static Decl *decl(PCtx *c, DeclKind k, const Token *kw) {
    Decl *d = ast_decl(c->arena, k, tok_span(kw));
    if (d) {
        d->file = c->file;
        ast_decls_push(c->arena, &c->out->decls, d);
    }
    return d;
}

void parse_import(PCtx *c, const Token *kw, const Token *s) {
    if (s->str && strlen(s->str) != s->slen) {
        diag_error(c->d, s->span, "an import name cannot contain a NUL byte");
        return;
    }
    for (size_t i = 0; s->str && i < s->slen; i++)
        if ((unsigned char)s->str[i] < 0x20 || s->str[i] == 0x7f) {
            /* it would be printed raw in "cannot find" and its note */
            diag_error(c->d, s->span, "an import name cannot contain a control character (byte 0x%02x)",
                       (unsigned char)s->str[i]);
            return;
        }
    Decl *d = decl(c, DL_IMPORT, kw);
    if (!d) return;
    d->name = s->str;
    d->name_span = s->span;
    d->span = span_join(kw->span, s->span);
}

void parse_const(PCtx *c, const Token *name, Expr *e) {
    Decl *d = decl(c, DL_CONST, name);
    if (!d) return;
    d->name = name->str;
    d->name_span = name->span;
    d->value = e;
}

void parse_fn(PCtx *c, DeclKind k, const Token *kw, const Token *name, const ParamList *p, const StmtList *body) {
    Decl *d = decl(c, k, kw);
    if (!d) return;
    d->name = name->str;
    d->name_span = name->span;
    d->span = span_join(kw->span, name->span);
    d->params = *p;
    d->body = *body;
}

void parse_block_decl(PCtx *c, DeclKind k, const Token *kw, const Token *name, const SettingList *s) {
    Decl *d = decl(c, k, kw);
    if (!d) return;
    if (name) {
        d->name = name->str;
        d->name_span = name->span;
        d->span = span_join(kw->span, name->span);
    }
    d->settings = *s;
}

ParamDecl parse_param(PCtx *c, const Token *name, const TypeExpr *t, Expr *def) {
    (void)c;
    ParamDecl p;
    memset(&p, 0, sizeof p);
    p.name = name->str;
    p.span = name->span;
    if (t) p.type = *t;
    p.default_value = def;
    return p;
}

TypeExpr parse_type(PCtx *c, const Token *dt, const Token *lb, const ExprList *dims, const Token *end) {
    (void)c;
    TypeExpr t;
    memset(&t, 0, sizeof t);
    t.present = true;
    t.dtype = dt ? dt->dtype : DT_NONE;
    if (dims) t.dims = *dims;
    t.span = span_join(dt ? dt->span : lb->span, end->span);
    return t;
}

/* ---- statements ---- */

Stmt *parse_assign(PCtx *c, const NameList *n, Expr *e) {
    Stmt *s = ast_stmt(c->arena, ST_ASSIGN, n->len ? n->spans[0] : SPAN_NONE);
    if (!s) return NULL;
    s->targets = *n;
    s->value = e;
    if (e) s->span = span_join(s->span, e->span);
    return s;
}

Stmt *parse_repeat(PCtx *c, const Token *kw, Expr *count, const Token *index, const Token *open, const StmtList *body) {
    Stmt *s = ast_stmt(c->arena, ST_REPEAT, kw->span);
    if (!s) return NULL;
    s->count = count;
    if (count) s->span = span_join(kw->span, count->span);
    if (index) {
        s->index = index->str;
        s->index_span = index->span;
    }
    s->open_brace = open->span;
    s->body = *body;
    return s;
}

Stmt *parse_if(PCtx *c, const Token *kw, Expr *cond, const Token *open, const StmtList *body, const StmtList *else_body) {
    Stmt *s = ast_stmt(c->arena, ST_IF, kw->span);
    if (!s) return NULL;
    s->count = cond;
    if (cond) s->span = span_join(kw->span, cond->span);
    s->open_brace = open->span;
    s->body = *body;
    if (else_body) {
        s->has_else = true;
        s->else_body = *else_body;
    }
    return s;
}

/* A string the AST keeps as a C string: no NUL inside. */
static bool plain_string(PCtx *c, const Token *s, const char *what) {
    if (s->str && strlen(s->str) == s->slen) return true;
    diag_error(c->d, s->span, "%s cannot contain a NUL byte", what);
    return false;
}

void parse_hf(PCtx *c, const Token *kw, const Token *arch, const SettingList *s) {
    if (arch && !plain_string(c, arch, "an architecture name")) return;
    Decl *d = decl(c, DL_HF, kw);
    if (!d) return;
    if (arch) {
        d->name = arch->str;
        d->name_span = arch->span;
        d->span = span_join(kw->span, arch->span);
    }
    d->settings = *s;
}

Setting *parse_hf_entry(PCtx *c, const Token *pattern, Expr *e) {
    if (!plain_string(c, pattern, "a parameter pattern")) return NULL;
    Setting *s = ast_setting(c->arena, pattern->str, pattern->span);
    if (!s) return NULL;
    s->quoted = true;
    s->value = e;
    return s;
}

Stmt *parse_return(PCtx *c, const Token *kw, const ExprList *v) {
    Stmt *s = ast_stmt(c->arena, ST_RETURN, kw->span);
    if (!s) return NULL;
    s->values = *v;
    if (v->len && v->items[v->len - 1]) s->span = span_join(kw->span, v->items[v->len - 1]->span);
    return s;
}

Stmt *parse_loss(PCtx *c, const Token *kw, Expr *e) {
    Stmt *s = ast_stmt(c->arena, ST_LOSS, kw->span);
    if (!s) return NULL;
    s->value = e;
    if (e) s->span = span_join(kw->span, e->span);
    return s;
}

Setting *parse_set_value(PCtx *c, const Token *key, const Token *sel, Expr *e) {
    Setting *s = ast_setting(c->arena, key->str, key->span);
    if (!s) return NULL;
    if (sel) {
        s->selector = sel->str;
        s->selector_span = sel->span;
    }
    s->value = e;
    return s;
}

Setting *parse_set_block(PCtx *c, const Token *key, const SettingList *b) {
    Setting *s = ast_setting(c->arena, key->str, key->span);
    if (!s) return NULL;
    s->is_block = true;
    s->block = *b;
    return s;
}

/* ---- expressions ---- */

Expr *parse_binary(PCtx *c, int op, Expr *l, Expr *r) {
    Expr *e = ast_expr(c->arena, EX_BINARY, span_join(l ? l->span : SPAN_NONE, r ? r->span : SPAN_NONE));
    if (!e) return NULL;
    e->op = op;
    e->lhs = l;
    e->rhs = r;
    return e;
}

Expr *parse_unary(PCtx *c, const Token *minus, Expr *x) {
    Expr *e = ast_expr(c->arena, EX_UNARY, span_join(minus->span, x ? x->span : SPAN_NONE));
    if (!e) return NULL;
    e->op = '-';
    e->lhs = x;
    return e;
}

Expr *parse_number(PCtx *c, const Token *t, ExprKind k) {
    Expr *e = ast_expr(c->arena, k, t->span);
    if (!e) return NULL;
    e->ival = t->ival;
    e->overflow = t->overflow;
    e->fval = t->fval;
    e->unit = t->unit.kind == UNIT_NONE ? (Unit){UNIT_NONE, 1} : t->unit;
    return e;
}

Expr *parse_string(PCtx *c, const Token *t) {
    Expr *e = ast_expr(c->arena, EX_STR, t->span);
    if (!e) return NULL;
    e->str = t->str;
    e->slen = t->slen;
    return e;
}

Expr *parse_name(PCtx *c, const Token *t) {
    Expr *e = ast_expr(c->arena, EX_NAME, t->span);
    if (!e) return NULL;
    e->str = t->str;
    e->slen = t->slen;
    return e;
}

Expr *parse_list(PCtx *c, const Token *lb, const ArgList *items, const Token *rb) {
    Expr *e = ast_expr(c->arena, EX_LIST, span_join(lb->span, rb->span));
    if (!e) return NULL;
    e->args = *items;
    return e;
}

Expr *parse_call(PCtx *c, const Token *name, const ArgList *args, const Token *rp) {
    Expr *e = ast_expr(c->arena, EX_CALL, span_join(name->span, rp->span));
    if (!e) return NULL;
    e->str = name->str;
    e->slen = name->slen;
    e->name_span = name->span;
    e->args = *args;
    return e;
}

Expr *parse_param_expr(PCtx *c, const Token *kw, const Token *dt, const ExprList *dims, const Token *init, const ArgTail *t,
                     const Token *flag) {
    Span end = flag->str ? flag->span : t->present ? t->end : init->span;
    Expr *e = ast_expr(c->arena, EX_PARAM, span_join(kw->span, end));
    if (!e) return NULL;
    e->dims = *dims;
    e->dtype = dt ? dt->dtype : DT_NONE;
    e->init_span = span_join(init->span, end);
    const char *n = init->str ? init->str : "";
    if (!strcmp(n, "normal")) e->init = INIT_NORMAL;
    else if (!strcmp(n, "zeros")) e->init = INIT_ZEROS;
    else if (!strcmp(n, "ones")) e->init = INIT_ONES;
    else if (!strcmp(n, "uniform")) e->init = INIT_UNIFORM;
    else {
        static const char *const inits[] = {"normal", "zeros", "ones", "uniform"};
        diag_error(c->d, init->span, "unknown initialiser '%s'", n);
        const char *near = diag_nearest(n, inits, 4);
        if (near) diag_hint(c->d, "did you mean '%s'?", near);
        else diag_hint(c->d, "the initialisers are normal(std), uniform(a), zeros and ones");
    }
    if (t->present) e->args = t->args;
    if (flag->str && !strcmp(flag->str, "frozen")) e->frozen = true;
    else if (flag->str) {
        static const char *const flags[] = {"frozen"};
        diag_error(c->d, flag->span, "unexpected '%s' after the param's initialiser", flag->str);
        if (diag_nearest(flag->str, flags, 1)) diag_hint(c->d, "did you mean 'frozen'?");
        else diag_hint(c->d, "the only word allowed there is 'frozen' (a parameter that is not trained)");
    }
    return e;
}

/* ---- the driver ---- */

/* Closes every open bracket with tokens the parser does not report on, so
 * that the declaration being parsed is kept (with its errors reported). */
static void close_all(PCtx *c, void *p, const Token *at) {
    Lexer *L = c->lex;
    Token t = *at;
    t.nl = SPAN_NONE;
    t.span.len = 0;
    c->silent = true;
    while (L->depth > 0) {
        const LexBracket *b = lex_open(L);
        char ch = b ? b->ch : '{';
        if (ch == '{') parse_zl(p, TK_NL, t);
        parse_zl(p, ch == '(' ? TK_RPAREN : ch == '[' ? TK_RBRACK : TK_RBRACE, t);
        lex_pop(L);
    }
    parse_zl(p, TK_NL, t);
    c->silent = false;
}

static bool same_span(Span a, Span b) { return a.file == b.file && a.off == b.off && a.len == b.len; }

/* Index of the innermost open '{', or -1. */
static int innermost_brace(const Lexer *L) {
    for (int i = (L->depth < LEX_MAX_DEPTH ? L->depth : LEX_MAX_DEPTH) - 1; i >= 0; i--)
        if (L->open[i].ch == '{') return i;
    return -1;
}

AstFile *parse_source(Arena *a, const SourceSet *src, int file, DiagSink *d) {
    AstFile *f = ARENA_NEW(a, AstFile);
    if (!f || file < 0 || file >= src->nfiles) return NULL;
    f->file = file;
    const SourceFile *sf = &src->files[file];
    if (sf->len > UINT32_MAX - 1) {
        diag_error(d, SPAN_NONE, "%s: file too large", sf->path);
        return f;
    }
    Lexer L;
    lex_init(&L, sf->text, (uint32_t)sf->len, file, a, d);
    PCtx c = {.arena = a, .d = d, .lex = &L, .out = f, .file = file, .reported_open = SPAN_NONE};
    void *p = parse_zlAlloc(malloc, &c);
    if (!p) return NULL;
    Token t;
    bool skipping = false; /* after a syntax error: tokens up to the next separator are dropped */
    int rlevel = -1;       /* ... the separator of the block whose innermost '{' is this one */
    int ops = 0;
    /* A newline where '{' would do (`layer f(x)` then `{` on the next line)
     * is held back until the next token: if that is the '{', one error and
     * the block parses as if it were on the line; if not, the newline is fed
     * and reported as usual. */
    bool held_nl = false;
    Token nl_tok;
    for (;;) {
        lex_next(&L, &t);
        if (held_nl) {
            held_nl = false;
            if (t.kind == TK_LBRACE) {
                diag_error(d, nl_tok.span, "expected '{' on this line, found newline");
                diag_hint(d, "a '{' goes on the line of what it opens, as in Go: layer f(x) {");
                c.syntax_errors++;
            } else {
                c.expected = parse_zl_expected(p);
                parse_zl(p, TK_NL, nl_tok);
                lex_drop_parens(&L);
                c.lex_errors_at_sep = L.errors;
            }
        }
        int depth = L.depth; /* the brackets t is inside */
        if ((t.kind == 0 || is_decl_kw(t.kind)) && depth > 0) {
            /* A declaration keyword or the end inside brackets: a closer is missing. */
            const LexBracket *b = lex_open(&L);
            if (b && !same_span(b->at, c.reported_open)) {
                char close = b->ch == '(' ? ')' : b->ch == '[' ? ']' : '}';
                Span at = t.kind == 0 ? (Span){file, L.len, 0} : t.span;
                diag_error(d, at, "expected '%c' to close %s, found %s", close, lex_open_what(&L, b), describe(&c, t.kind, &t));
                diag_note(d, b->at, "the '%c' opened here", b->ch);
            }
            close_all(&c, p, &t);
            skipping = false;
            depth = 0;
        } else if (skipping) {
            bool stop = t.kind == 0 || is_decl_kw(t.kind);
            if ((t.kind == TK_NL || t.kind == TK_SEMI || t.kind == TK_RBRACE) && innermost_brace(&L) == rlevel &&
                (t.kind == TK_RBRACE || depth == rlevel + 1))
                stop = true;
            if (!stop) continue;
            skipping = false;
            if (is_decl_kw(t.kind)) {
                c.silent = true;
                parse_zl(p, TK_NL, t);
                c.silent = false;
            }
        }
        if (t.kind == TK_NL || t.kind == TK_SEMI || t.kind == TK_LBRACE || t.kind == TK_RBRACE) ops = 0;
        else if (t.kind == TK_PLUS || t.kind == TK_MINUS || t.kind == TK_STAR || t.kind == TK_SLASH ||
                 t.kind == TK_PERCENT || t.kind == TK_LPAREN || t.kind == TK_LBRACK)
            ops++;
        if ((t.kind == TK_LPAREN || t.kind == TK_LBRACK || t.kind == TK_LBRACE) && depth >= PARSE_MAX_DEPTH) {
            diag_error(d, t.span, "brackets nested too deeply (more than %d)", PARSE_MAX_DEPTH);
            break;
        }
        int before = c.syntax_errors;
        if (ops > PARSE_MAX_OPS) {
            diag_error(d, t.span, "statement too long: more than %d operators", PARSE_MAX_OPS);
            diag_hint(d, "split it into several assignments");
            c.silent = true;
            parse_zl(p, TK_BAD, t);
            c.silent = false;
            ops = 0;
        } else if (t.kind == TK_NL && !parse_zl_accepts(p, TK_NL) && parse_zl_accepts(p, TK_LBRACE)) {
            held_nl = true;
            nl_tok = t;
            continue;
        } else {
            /* The expected set is taken before the token is fed: once the
             * parser has made its default reductions it knows less. */
            if (!parse_zl_accepts(p, t.kind)) c.expected = parse_zl_expected(p);
            parse_zl(p, t.kind, t);
        }
        if (c.too_deep || t.kind == 0) break;
        if (c.syntax_errors > before) {
            lex_drop_parens(&L);
            if (is_decl_kw(t.kind) && depth == 0) {
                /* `const V =` then `layer ...`: start the declaration afresh */
                c.silent = true;
                parse_zl(p, TK_NL, t);
                c.silent = false;
                parse_zl(p, t.kind, t);
            } else if (!(t.kind == TK_NL || t.kind == TK_SEMI || t.kind == TK_RBRACE) || (t.kind == TK_RBRACE && depth == 0)) {
                skipping = true;
                rlevel = innermost_brace(&L);
            }
        }
        if (t.kind == TK_NL || t.kind == TK_SEMI) c.lex_errors_at_sep = L.errors;
    }
    parse_zlFree(p, free);
    return a->failed ? NULL : f;
}
