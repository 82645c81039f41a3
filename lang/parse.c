#include "parse.h"
#include <stdlib.h>
#include <string.h>
#include "grammar.h"
#include "lexer.h"
#include "parse_ctx.h"

/* The Lemon parser's entry points (generated into grammar.c). */
void *zlParseAlloc(void *(*alloc)(size_t), PCtx *ctx);
void zlParse(void *p, int major, Token minor);
void zlParseFree(void *p, void (*dealloc)(void *));

static Span tok_span(const Token *t) { return t ? t->span : SPAN_NONE; }

/* ---- diagnostics ---- */

static const char *describe(PCtx *c, int major, const Token *t) {
    switch (major) {
    case 0: return "end of file";
    case TK_NL: return "newline";
    case TK_IDENT: return arena_printf(c->arena, "name '%.40s'", t->str ? t->str : "");
    case TK_INT:
    case TK_FLOAT: {
        const char *s = c->lex->src + t->span.off;
        return arena_printf(c->arena, "number '%.*s'", (int)(t->span.len > 40 ? 40 : t->span.len), s);
    }
    case TK_STRING: return "a string";
    case TK_DTYPE: return arena_printf(c->arena, "type '%s'", dtype_name(t->dtype));
    default: {
        const char *n = lex_token_name(major);
        if (major >= TK_IMPORT && major <= TK_INIT) return arena_printf(c->arena, "keyword %s", n);
        return n;
    }
    }
}

static int line_of(PCtx *c, Span s) {
    int l = 1;
    for (uint32_t i = 0; i < s.off && i < c->lex->len; i++) l += c->lex->src[i] == '\n';
    return l;
}

void parse_syntax_error(PCtx *c, int major, const Token *t) {
    Lexer *L = c->lex;
    if (major == TK_NL && t->span.len == 0) major = 0; /* the separator the lexer adds at the end */
    const char *found = describe(c, major, t);
    Span at = major == 0 ? (Span){c->file, L->len, 0} : t->span;
    if (L->depth > 0 && L->depth <= LEX_MAX_DEPTH) {
        char open = L->open_kind[L->depth - 1];
        Span os = L->open_span[L->depth - 1];
        char close = open == '(' ? ')' : open == '[' ? ']' : '}';
        bool closing_token = major == TK_RPAREN || major == TK_RBRACK || major == TK_RBRACE;
        if (major == 0 || (!closing_token && line_of(c, at) > line_of(c, os) && open != '{')) {
            if (major == 0)
                diag_error(c->d, at, "expected '%c' before end of file", close);
            else
                diag_error(c->d, at, "expected '%c', found %s", close, found);
            diag_note(c->d, os, "the '%c' opened here", open);
            return;
        }
    }
    if (major == TK_RPAREN || major == TK_RBRACK || major == TK_RBRACE) {
        diag_error(c->d, at, "unexpected %s", found);
        return;
    }
    diag_error(c->d, at, "syntax error: unexpected %s", found);
    if (major == TK_INT || major == TK_FLOAT || major == TK_STRING) diag_hint(c->d, "is an operator or a '=' missing before it?");
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

void ast_import(PCtx *c, const Token *kw, const Token *s) {
    Decl *d = decl(c, DL_IMPORT, kw);
    if (!d) return;
    d->name = s->str;
    d->name_span = s->span;
    d->span = span_join(kw->span, s->span);
}

void ast_const(PCtx *c, const Token *name, Expr *e) {
    Decl *d = decl(c, DL_CONST, name);
    if (!d) return;
    d->name = name->str;
    d->name_span = name->span;
    d->value = e;
}

void ast_fn(PCtx *c, DeclKind k, const Token *kw, const Token *name, const ParamList *p, const StmtList *body) {
    Decl *d = decl(c, k, kw);
    if (!d) return;
    d->name = name->str;
    d->name_span = name->span;
    d->span = span_join(kw->span, name->span);
    d->params = *p;
    d->body = *body;
}

void ast_block_decl(PCtx *c, DeclKind k, const Token *kw, const Token *name, const SettingList *s) {
    Decl *d = decl(c, k, kw);
    if (!d) return;
    if (name) {
        d->name = name->str;
        d->name_span = name->span;
        d->span = span_join(kw->span, name->span);
    }
    d->settings = *s;
}

ParamDecl ast_param(PCtx *c, const Token *name, const TypeExpr *t, Expr *def) {
    (void)c;
    ParamDecl p;
    memset(&p, 0, sizeof p);
    p.name = name->str;
    p.span = name->span;
    if (t) p.type = *t;
    p.default_value = def;
    return p;
}

TypeExpr ast_type(PCtx *c, const Token *dt, const Token *lb, const ExprList *dims, const Token *end) {
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

Stmt *ast_assign(PCtx *c, const NameList *n, Expr *e) {
    Stmt *s = ast_stmt(c->arena, ST_ASSIGN, n->len ? n->spans[0] : SPAN_NONE);
    if (!s) return NULL;
    s->targets = *n;
    s->value = e;
    if (e) s->span = span_join(s->span, e->span);
    return s;
}

Stmt *ast_repeat(PCtx *c, const Token *kw, Expr *count, const Token *index, const Token *open, const StmtList *body) {
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

Stmt *ast_return(PCtx *c, const Token *kw, const ExprList *v) {
    Stmt *s = ast_stmt(c->arena, ST_RETURN, kw->span);
    if (!s) return NULL;
    s->values = *v;
    if (v->len && v->items[v->len - 1]) s->span = span_join(kw->span, v->items[v->len - 1]->span);
    return s;
}

Stmt *ast_loss(PCtx *c, const Token *kw, Expr *e) {
    Stmt *s = ast_stmt(c->arena, ST_LOSS, kw->span);
    if (!s) return NULL;
    s->value = e;
    if (e) s->span = span_join(kw->span, e->span);
    return s;
}

Setting *ast_set_value(PCtx *c, const Token *key, const Token *sel, Expr *e) {
    Setting *s = ast_setting(c->arena, key->str, key->span);
    if (!s) return NULL;
    if (sel) {
        s->selector = sel->str;
        s->selector_span = sel->span;
    }
    s->value = e;
    return s;
}

Setting *ast_set_block(PCtx *c, const Token *key, const SettingList *b) {
    Setting *s = ast_setting(c->arena, key->str, key->span);
    if (!s) return NULL;
    s->is_block = true;
    s->block = *b;
    return s;
}

/* ---- expressions ---- */

Expr *ast_binary(PCtx *c, int op, Expr *l, Expr *r) {
    Expr *e = ast_expr(c->arena, EX_BINARY, span_join(l ? l->span : SPAN_NONE, r ? r->span : SPAN_NONE));
    if (!e) return NULL;
    e->op = op;
    e->lhs = l;
    e->rhs = r;
    return e;
}

Expr *ast_unary(PCtx *c, const Token *minus, Expr *x) {
    Expr *e = ast_expr(c->arena, EX_UNARY, span_join(minus->span, x ? x->span : SPAN_NONE));
    if (!e) return NULL;
    e->op = '-';
    e->lhs = x;
    return e;
}

Expr *ast_number(PCtx *c, const Token *t, ExprKind k) {
    Expr *e = ast_expr(c->arena, k, t->span);
    if (!e) return NULL;
    e->ival = t->ival;
    e->overflow = t->overflow;
    e->fval = t->fval;
    e->unit = t->unit.kind == UNIT_NONE ? (Unit){UNIT_NONE, 1} : t->unit;
    return e;
}

Expr *ast_string(PCtx *c, const Token *t) {
    Expr *e = ast_expr(c->arena, EX_STR, t->span);
    if (!e) return NULL;
    e->str = t->str;
    e->slen = t->slen;
    return e;
}

Expr *ast_name(PCtx *c, const Token *t) {
    Expr *e = ast_expr(c->arena, EX_NAME, t->span);
    if (!e) return NULL;
    e->str = t->str;
    e->slen = t->slen;
    return e;
}

Expr *ast_list(PCtx *c, const Token *lb, const ArgList *items, const Token *rb) {
    Expr *e = ast_expr(c->arena, EX_LIST, span_join(lb->span, rb->span));
    if (!e) return NULL;
    e->args = *items;
    return e;
}

Expr *ast_call(PCtx *c, const Token *name, const ArgList *args, const Token *rp) {
    Expr *e = ast_expr(c->arena, EX_CALL, span_join(name->span, rp->span));
    if (!e) return NULL;
    e->str = name->str;
    e->slen = name->slen;
    e->name_span = name->span;
    e->args = *args;
    return e;
}

Expr *ast_param_expr(PCtx *c, const Token *kw, const Token *dt, const ExprList *dims, const Token *init, const ArgTail *t) {
    Span end = t->present ? t->end : init->span;
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
    return e;
}

/* ---- the driver ---- */

AstFile *parse_source(Arena *a, const SourceSet *src, int file, DiagSink *d) {
    AstFile *f = ARENA_NEW(a, AstFile);
    if (!f || file < 0 || file >= src->nfiles) return NULL;
    f->file = file;
    const SourceFile *sf = &src->files[file];
    Lexer L;
    lex_init(&L, sf->text, (uint32_t)sf->len, file, a, d);
    PCtx c = {.arena = a, .d = d, .lex = &L, .out = f, .file = file};
    void *p = zlParseAlloc(malloc, &c);
    if (!p) return NULL;
    Token t;
    do {
        lex_next(&L, &t);
        zlParse(p, t.kind, t);
    } while (t.kind != 0 && !c.failed);
    zlParseFree(p, free);
    return a->failed ? NULL : f;
}
