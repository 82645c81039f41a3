/* parse_ctx: the parser's context and the AST builder calls of the grammar
 * actions (lang/grammar.y). Internal to lang/: parse.c implements it. */
#ifndef ZINF_PARSE_CTX_H
#define ZINF_PARSE_CTX_H
#include "ast.h"
#include "diag.h"
#include "lex.h"

typedef struct PCtx {
    Arena *arena;
    DiagSink *d;
    Lexer *lex;
    AstFile *out;
    int file;
    int failed;
    int too_deep;
    bool silent;          /* do not report syntax errors (the driver forces a recovery) */
    int syntax_errors;    /* syntax errors seen (reported or not) */
    int lex_errors_at_sep; /* L->errors when the current statement began */
    Span reported_open;   /* the bracket whose missing closer was last reported */
    uint64_t expected;    /* what the parser accepted before the token it failed on */
} PCtx;

typedef struct ArgTail {
    int present;
    ArgList args;
    Span end;
} ArgTail;

/* Called by the grammar on a syntax error. */
void parse_syntax_error(PCtx *c, int major, const Token *t);

/* The Lemon parser (generated into grammar.c, %name parse_zl). */
void *parse_zlAlloc(void *(*alloc)(size_t), PCtx *ctx);
void parse_zl(void *p, int major, Token minor);
void parse_zlFree(void *p, void (*dealloc)(void *));
/* Whether the parser in its current state would shift token kind tok
 * (following the reductions it causes), and the set of such kinds (bit k). */
int parse_zl_accepts(void *p, int tok);
uint64_t parse_zl_expected(void *p);
void parse_too_deep(PCtx *c);

void parse_import(PCtx *c, const Token *kw, const Token *s);
void parse_const(PCtx *c, const Token *name, Expr *e);
void parse_fn(PCtx *c, DeclKind k, const Token *kw, const Token *name, const ParamList *p, const StmtList *body);
void parse_block_decl(PCtx *c, DeclKind k, const Token *kw, const Token *name, const SettingList *s);
ParamDecl parse_param(PCtx *c, const Token *name, const TypeExpr *t, Expr *def);
TypeExpr parse_type(PCtx *c, const Token *dt, const Token *lb, const ExprList *dims, const Token *end);
Stmt *parse_assign(PCtx *c, const NameList *n, Expr *e);
Stmt *parse_repeat(PCtx *c, const Token *kw, Expr *count, const Token *index, const Token *open, const StmtList *body);
Stmt *parse_if(PCtx *c, const Token *kw, Expr *cond, const Token *open, const StmtList *body, const StmtList *else_body);
void parse_hf(PCtx *c, const Token *kw, const Token *arch, const SettingList *s);
Setting *parse_hf_entry(PCtx *c, const Token *pattern, Expr *e);
Stmt *parse_return(PCtx *c, const Token *kw, const ExprList *v);
Stmt *parse_loss(PCtx *c, const Token *kw, Expr *e);
Setting *parse_set_value(PCtx *c, const Token *key, const Token *sel, Expr *e);
Setting *parse_set_block(PCtx *c, const Token *key, const SettingList *b);
Expr *parse_binary(PCtx *c, int op, Expr *l, Expr *r);
Expr *parse_unary(PCtx *c, const Token *minus, Expr *e);
Expr *parse_number(PCtx *c, const Token *t, ExprKind k);
Expr *parse_string(PCtx *c, const Token *t);
Expr *parse_name(PCtx *c, const Token *t);
Expr *parse_list(PCtx *c, const Token *lb, const ArgList *items, const Token *rb);
Expr *parse_call(PCtx *c, const Token *name, const ArgList *args, const Token *rp);
/* flag: the word after the initialiser (str NULL: none); only "frozen" is one. */
Expr *parse_param_expr(PCtx *c, const Token *kw, const Token *dt, const ExprList *dims, const Token *init, const ArgTail *t,
                     const Token *flag);

#endif
