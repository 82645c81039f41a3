/* The .zl grammar (Lemon). Every action is one call into the AST builder
 * (lang/ast.c); syntax errors are recorded in the parse context, never
 * printed. docs/language.md has the same grammar in EBNF. */
%name parse_zl
%token_prefix TK_
%token_type {Token}
%default_type {Expr *}
%extra_context {PCtx *ctx}

%include {
#include <assert.h>
#include <string.h>
#include "ast.h"
#include "lex.h"
#include "parse_ctx.h"
}

%syntax_error {
    parse_syntax_error(ctx, yymajor, &TOKEN);
}
%parse_failure {
    ctx->failed = 1;
}
%stack_overflow {
    parse_too_deep(ctx);
}
%stack_size 2000

%left PLUS MINUS.
%left STAR SLASH PERCENT.
%right UMINUS.

/* Tokens the lexer produces that the rules name only through precedence. */
%token NL SEMI COMMA LPAREN RPAREN LBRACK RBRACK LBRACE RBRACE ASSIGN COLON.
%token IDENT INT FLOAT STRING DTYPE.
%token IMPORT CONST LAYER MODEL TRAIN TARGET PLAN HF REPEAT IF ELSE AS RETURN LOSS PARAM INIT.
/* BAD is in no rule: the driver feeds it to force error recovery. */
%token BAD.

program ::= decls.

decls ::= .
decls ::= decls sep.
decls ::= decls decl sep.
decls ::= decls error sep.                          { yypParser->yyerrcnt = -1; }

sep ::= NL.
sep ::= SEMI.

decl ::= IMPORT(K) STRING(S).                       { parse_import(ctx, &K, &S); }
decl ::= CONST const_list.
const_list ::= const_item.
const_list ::= const_list COMMA const_item.
const_item ::= IDENT(N) ASSIGN expr(E).             { parse_const(ctx, &N, E); }
decl ::= LAYER(K) IDENT(N) LPAREN params(P) RPAREN block(B).   { parse_fn(ctx, DL_LAYER, &K, &N, &P, &B); }
decl ::= MODEL(K) IDENT(N) LPAREN params(P) RPAREN block(B).   { parse_fn(ctx, DL_MODEL, &K, &N, &P, &B); }
decl ::= TRAIN(K) sblock(S).                        { parse_block_decl(ctx, DL_TRAIN, &K, NULL, &S); }
decl ::= TARGET(K) IDENT(N) sblock(S).              { parse_block_decl(ctx, DL_TARGET, &K, &N, &S); }
decl ::= PLAN(K) sblock(S).                         { parse_block_decl(ctx, DL_PLAN, &K, NULL, &S); }
decl ::= HF(K) STRING(A) hblock(S).                 { parse_hf(ctx, &K, &A, &S); }
decl ::= HF(K) hblock(S).                           { parse_hf(ctx, &K, NULL, &S); }

%type params {ParamList}
%type param_list {ParamList}
%type param {ParamDecl}
%type type {TypeExpr}
params(A) ::= .                                     { memset(&A, 0, sizeof A); }
params(A) ::= param_list(L).                        { A = L; }
params(A) ::= param_list(L) COMMA.                  { A = L; }
param_list(A) ::= param(P).                         { memset(&A, 0, sizeof A); ast_params_push(ctx->arena, &A, P); }
param_list(A) ::= param_list(L) COMMA param(P).     { A = L; ast_params_push(ctx->arena, &A, P); }
param(A) ::= IDENT(N).                              { A = parse_param(ctx, &N, NULL, NULL); }
param(A) ::= IDENT(N) COLON type(T).                { A = parse_param(ctx, &N, &T, NULL); }
param(A) ::= IDENT(N) ASSIGN expr(E).               { A = parse_param(ctx, &N, NULL, E); }
param(A) ::= IDENT(N) COLON type(T) ASSIGN expr(E). { A = parse_param(ctx, &N, &T, E); }
type(A) ::= DTYPE(D) LBRACK(L) exprs(X) RBRACK(R).  { A = parse_type(ctx, &D, &L, &X, &R); }
type(A) ::= LBRACK(L) exprs(X) RBRACK(R).           { A = parse_type(ctx, NULL, &L, &X, &R); }
type(A) ::= DTYPE(D).                               { A = parse_type(ctx, &D, NULL, NULL, &D); }

%type block {StmtList}
%type body {StmtList}
%type stmts {StmtList}
/* A statement ends at a separator, or at the '}' of its block. */
block(A) ::= LBRACE body(S).                        { A = S; }
body(A) ::= stmts(S) RBRACE.                        { A = S; }
body(A) ::= stmts(S) stmt(T) RBRACE.                { A = S; ast_stmts_push(ctx->arena, &A, T); }
body(A) ::= stmts(S) error RBRACE.                  { A = S; yypParser->yyerrcnt = -1; }
stmts(A) ::= .                                      { memset(&A, 0, sizeof A); }
stmts(A) ::= stmts(S) sep.                          { A = S; }
stmts(A) ::= stmts(S) stmt(T) sep.                  { A = S; ast_stmts_push(ctx->arena, &A, T); }
stmts(A) ::= stmts(S) error sep.                    { A = S; yypParser->yyerrcnt = -1; }

%type stmt {Stmt *}
%type names {NameList}
stmt(A) ::= names(N) ASSIGN expr(E).                { A = parse_assign(ctx, &N, E); }
stmt(A) ::= REPEAT(K) expr(C) LBRACE(O) body(S).    { A = parse_repeat(ctx, &K, C, NULL, &O, &S); }
stmt(A) ::= REPEAT(K) expr(C) AS IDENT(I) LBRACE(O) body(S). { A = parse_repeat(ctx, &K, C, &I, &O, &S); }
stmt(A) ::= IF(K) expr(C) LBRACE(O) body(S).        { A = parse_if(ctx, &K, C, &O, &S, NULL); }
stmt(A) ::= IF(K) expr(C) LBRACE(O) body(S) ELSE LBRACE body(E). { A = parse_if(ctx, &K, C, &O, &S, &E); }
stmt(A) ::= RETURN(K) exprs(X).                     { A = parse_return(ctx, &K, &X); }
stmt(A) ::= LOSS(K) expr(E).                        { A = parse_loss(ctx, &K, E); }
names(A) ::= IDENT(N).                              { memset(&A, 0, sizeof A); ast_names_push(ctx->arena, &A, N.str, N.span); }
names(A) ::= names(L) COMMA IDENT(N).               { A = L; ast_names_push(ctx->arena, &A, N.str, N.span); }

%type sblock {SettingList}
%type sbody {SettingList}
%type settings {SettingList}
%type setting {Setting *}
sblock(A) ::= LBRACE sbody(S).                      { A = S; }
sbody(A) ::= settings(S) RBRACE.                    { A = S; }
sbody(A) ::= settings(S) setting(T) RBRACE.         { A = S; ast_settings_push(ctx->arena, &A, T); }
sbody(A) ::= settings(S) error RBRACE.              { A = S; yypParser->yyerrcnt = -1; }
settings(A) ::= .                                   { memset(&A, 0, sizeof A); }
settings(A) ::= settings(S) sep.                    { A = S; }
settings(A) ::= settings(S) setting(T) sep.         { A = S; ast_settings_push(ctx->arena, &A, T); }
settings(A) ::= settings(S) error sep.              { A = S; yypParser->yyerrcnt = -1; }
setting(A) ::= IDENT(K) ASSIGN expr(E).             { A = parse_set_value(ctx, &K, NULL, E); }
setting(A) ::= IDENT(K) STRING(S) ASSIGN expr(E).   { A = parse_set_value(ctx, &K, &S, E); }
setting(A) ::= IDENT(K) sblock(B).                  { A = parse_set_block(ctx, &K, &B); }

/* An hf block: "pattern" = expr entries, and name = expr settings (config). */
%type hblock {SettingList}
%type hbody {SettingList}
%type hitems {SettingList}
%type hitem {Setting *}
hblock(A) ::= LBRACE hbody(S).                      { A = S; }
hbody(A) ::= hitems(S) RBRACE.                      { A = S; }
hbody(A) ::= hitems(S) hitem(T) RBRACE.             { A = S; ast_settings_push(ctx->arena, &A, T); }
hbody(A) ::= hitems(S) error RBRACE.                { A = S; yypParser->yyerrcnt = -1; }
hitems(A) ::= .                                     { memset(&A, 0, sizeof A); }
hitems(A) ::= hitems(S) sep.                        { A = S; }
hitems(A) ::= hitems(S) hitem(T) sep.               { A = S; ast_settings_push(ctx->arena, &A, T); }
hitems(A) ::= hitems(S) error sep.                  { A = S; yypParser->yyerrcnt = -1; }
hitem(A) ::= STRING(K) ASSIGN expr(E).              { A = parse_hf_entry(ctx, &K, E); }
hitem(A) ::= IDENT(K) ASSIGN expr(E).               { A = parse_set_value(ctx, &K, NULL, E); }

%type exprs {ExprList}
exprs(A) ::= expr(E).                               { memset(&A, 0, sizeof A); ast_exprs_push(ctx->arena, &A, E); }
exprs(A) ::= exprs(L) COMMA expr(E).                { A = L; ast_exprs_push(ctx->arena, &A, E); }

expr(A) ::= expr(L) PLUS expr(R).                   { A = parse_binary(ctx, '+', L, R); }
expr(A) ::= expr(L) MINUS expr(R).                  { A = parse_binary(ctx, '-', L, R); }
expr(A) ::= expr(L) STAR expr(R).                   { A = parse_binary(ctx, '*', L, R); }
expr(A) ::= expr(L) SLASH expr(R).                  { A = parse_binary(ctx, '/', L, R); }
expr(A) ::= expr(L) PERCENT expr(R).                { A = parse_binary(ctx, '%', L, R); }
expr(A) ::= MINUS(K) expr(E). [UMINUS]              { A = parse_unary(ctx, &K, E); }
expr(A) ::= INT(T).                                 { A = parse_number(ctx, &T, EX_INT); }
expr(A) ::= FLOAT(T).                               { A = parse_number(ctx, &T, EX_FLOAT); }
expr(A) ::= STRING(T).                              { A = parse_string(ctx, &T); }
expr(A) ::= IDENT(T).                               { A = parse_name(ctx, &T); }
expr(A) ::= DTYPE(T).                               { A = parse_name(ctx, &T); }
expr(A) ::= LPAREN expr(E) RPAREN.                  { A = E; }
expr(A) ::= LBRACK(L) args(X) RBRACK(R).            { A = parse_list(ctx, &L, &X, &R); }
expr(A) ::= IDENT(N) LPAREN args(X) RPAREN(R).      { A = parse_call(ctx, &N, &X, &R); }
expr(A) ::= PARAM(K) LBRACK exprs(D) RBRACK INIT IDENT(I) ptail(X) pflag(F).             { A = parse_param_expr(ctx, &K, NULL, &D, &I, &X, &F); }
expr(A) ::= PARAM(K) DTYPE(T) LBRACK exprs(D) RBRACK INIT IDENT(I) ptail(X) pflag(F).    { A = parse_param_expr(ctx, &K, &T, &D, &I, &X, &F); }

/* param [..] init normal(0.02) frozen: the word after the initialiser */
%type pflag {Token}
pflag(A) ::= .                                      { memset(&A, 0, sizeof A); A.str = NULL; }
pflag(A) ::= IDENT(F).                              { A = F; }

%type ptail {ArgTail}
ptail(A) ::= .                                      { memset(&A, 0, sizeof A); A.present = 0; }
ptail(A) ::= LPAREN args(X) RPAREN(R).              { A.present = 1; A.args = X; A.end = R.span; }

%type args {ArgList}
%type arglist {ArgList}
%type arg {Arg}
args(A) ::= .                                       { memset(&A, 0, sizeof A); }
args(A) ::= arglist(L).                             { A = L; }
args(A) ::= arglist(L) COMMA.                       { A = L; }
arglist(A) ::= arg(X).                              { memset(&A, 0, sizeof A); ast_args_push(ctx->arena, &A, X); }
arglist(A) ::= arglist(L) COMMA arg(X).             { A = L; ast_args_push(ctx->arena, &A, X); }
arg(A) ::= expr(E).                                 { A = (Arg){NULL, SPAN_NONE, E}; }
arg(A) ::= IDENT(N) ASSIGN expr(E).                 { A = (Arg){N.str, N.span, E}; }

%code {
/* The terminals the parser would accept in its current state: each one is
 * tried on a copy of the state stack, following the reductions it causes
 * (Lemon's tables are LALR with default reductions, so a token is accepted
 * only if it reaches a shift). Bit k set: token kind k. */
int parse_zl_accepts(void *parser, int tok) {
    yyParser *p = parser;
    enum { CAP = 2100 };
    YYACTIONTYPE st[CAP];
    int n = (int)(p->yytos - p->yystack) + 1;
    if (n > CAP - 64) return 1;
    for (int i = 0; i < n; i++) st[i] = p->yystack[i].stateno;
    int top = n - 1;
    for (int guard = 0; guard < 10000; guard++) {
        YYACTIONTYPE act = yy_find_shift_action((YYCODETYPE)tok, st[top]);
        if (act >= YY_MIN_REDUCE) {
            unsigned rule = act - YY_MIN_REDUCE;
            if (rule >= sizeof yyRuleInfoLhs / sizeof yyRuleInfoLhs[0]) return 0;
            top += yyRuleInfoNRhs[rule];
            if (top < 0) return 0;
            YYACTIONTYPE g = yy_find_reduce_action(st[top], yyRuleInfoLhs[rule]);
            /* A goto may be a plain state, a shift-reduce or (simplified by
             * Lemon) a pure reduce; only the shift-reduce needs renumbering. */
            if (g >= YY_MIN_SHIFTREDUCE && g <= YY_MAX_SHIFTREDUCE) g += YY_MIN_REDUCE - YY_MIN_SHIFTREDUCE;
            if (top + 1 >= CAP) return 1;
            st[++top] = g;
        } else if (act <= YY_MAX_SHIFTREDUCE || act == YY_ACCEPT_ACTION) {
            return 1;
        } else {
            return 0;
        }
    }
    return 0;
}

uint64_t parse_zl_expected(void *parser) {
    uint64_t set = 0;
    for (int t = 0; t < YYNTOKEN && t < 64; t++)
        if (parse_zl_accepts(parser, t)) set |= (uint64_t)1 << t;
    return set;
}
}
