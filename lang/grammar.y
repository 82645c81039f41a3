/* The .zl grammar (Lemon). Every action is one call into the AST builder
 * (lang/ast.c); syntax errors are recorded in the parse context, never
 * printed. docs/language.md has the same grammar in EBNF. */
%name zlParse
%token_prefix TK_
%token_type {Token}
%default_type {Expr *}
%extra_context {PCtx *ctx}

%include {
#include <assert.h>
#include <string.h>
#include "ast.h"
#include "lexer.h"
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
%stack_size 1000

%left PLUS MINUS.
%left STAR SLASH PERCENT.
%right UMINUS.

/* Tokens the lexer produces that the rules name only through precedence. */
%token NL SEMI COMMA LPAREN RPAREN LBRACK RBRACK LBRACE RBRACE ASSIGN COLON.
%token IDENT INT FLOAT STRING DTYPE.
%token IMPORT CONST LAYER MODEL TRAIN TARGET PLAN REPEAT AS RETURN LOSS PARAM INIT.

program ::= decls.

decls ::= .
decls ::= decls sep.
decls ::= decls decl sep.
decls ::= decls error sep.

sep ::= NL.
sep ::= SEMI.

decl ::= IMPORT(K) STRING(S).                       { ast_import(ctx, &K, &S); }
decl ::= CONST const_list.
const_list ::= const_item.
const_list ::= const_list COMMA const_item.
const_item ::= IDENT(N) ASSIGN expr(E).             { ast_const(ctx, &N, E); }
decl ::= LAYER(K) IDENT(N) LPAREN params(P) RPAREN block(B).   { ast_fn(ctx, DL_LAYER, &K, &N, &P, &B); }
decl ::= MODEL(K) IDENT(N) LPAREN params(P) RPAREN block(B).   { ast_fn(ctx, DL_MODEL, &K, &N, &P, &B); }
decl ::= TRAIN(K) sblock(S).                        { ast_block_decl(ctx, DL_TRAIN, &K, NULL, &S); }
decl ::= TARGET(K) IDENT(N) sblock(S).              { ast_block_decl(ctx, DL_TARGET, &K, &N, &S); }
decl ::= PLAN(K) sblock(S).                         { ast_block_decl(ctx, DL_PLAN, &K, NULL, &S); }

%type params {ParamList}
%type param_list {ParamList}
%type param {ParamDecl}
%type type {TypeExpr}
params(A) ::= .                                     { memset(&A, 0, sizeof A); }
params(A) ::= param_list(L).                        { A = L; }
params(A) ::= param_list(L) COMMA.                  { A = L; }
param_list(A) ::= param(P).                         { memset(&A, 0, sizeof A); ast_params_push(ctx->arena, &A, P); }
param_list(A) ::= param_list(L) COMMA param(P).     { A = L; ast_params_push(ctx->arena, &A, P); }
param(A) ::= IDENT(N).                              { A = ast_param(ctx, &N, NULL, NULL); }
param(A) ::= IDENT(N) COLON type(T).                { A = ast_param(ctx, &N, &T, NULL); }
param(A) ::= IDENT(N) ASSIGN expr(E).               { A = ast_param(ctx, &N, NULL, E); }
param(A) ::= IDENT(N) COLON type(T) ASSIGN expr(E). { A = ast_param(ctx, &N, &T, E); }
type(A) ::= DTYPE(D) LBRACK(L) exprs(X) RBRACK(R).  { A = ast_type(ctx, &D, &L, &X, &R); }
type(A) ::= LBRACK(L) exprs(X) RBRACK(R).           { A = ast_type(ctx, NULL, &L, &X, &R); }
type(A) ::= DTYPE(D).                               { A = ast_type(ctx, &D, NULL, NULL, &D); }

%type block {StmtList}
%type stmts {StmtList}
block(A) ::= LBRACE stmts(S) RBRACE.                { A = S; }
block(A) ::= LBRACE stmts(S) error RBRACE.          { A = S; }
stmts(A) ::= .                                      { memset(&A, 0, sizeof A); }
stmts(A) ::= stmts(S) sep.                          { A = S; }
stmts(A) ::= stmts(S) stmt(T).                      { A = S; ast_stmts_push(ctx->arena, &A, T); }
stmts(A) ::= stmts(S) error sep.                    { A = S; }

%type stmt {Stmt *}
%type names {NameList}
stmt(A) ::= names(N) ASSIGN expr(E).                { A = ast_assign(ctx, &N, E); }
stmt(A) ::= REPEAT(K) expr(C) LBRACE(O) stmts(S) RBRACE.             { A = ast_repeat(ctx, &K, C, NULL, &O, &S); }
stmt(A) ::= REPEAT(K) expr(C) LBRACE(O) stmts(S) error RBRACE.       { A = ast_repeat(ctx, &K, C, NULL, &O, &S); }
stmt(A) ::= REPEAT(K) expr(C) AS IDENT(I) LBRACE(O) stmts(S) RBRACE. { A = ast_repeat(ctx, &K, C, &I, &O, &S); }
stmt(A) ::= RETURN(K) exprs(X).                     { A = ast_return(ctx, &K, &X); }
stmt(A) ::= LOSS(K) expr(E).                        { A = ast_loss(ctx, &K, E); }
names(A) ::= IDENT(N).                              { memset(&A, 0, sizeof A); ast_names_push(ctx->arena, &A, N.str, N.span); }
names(A) ::= names(L) COMMA IDENT(N).               { A = L; ast_names_push(ctx->arena, &A, N.str, N.span); }

%type sblock {SettingList}
%type settings {SettingList}
%type setting {Setting *}
sblock(A) ::= LBRACE settings(S) RBRACE.            { A = S; }
sblock(A) ::= LBRACE settings(S) error RBRACE.      { A = S; }
settings(A) ::= .                                   { memset(&A, 0, sizeof A); }
settings(A) ::= settings(S) sep.                    { A = S; }
settings(A) ::= settings(S) setting(T).             { A = S; ast_settings_push(ctx->arena, &A, T); }
settings(A) ::= settings(S) error sep.              { A = S; }
setting(A) ::= IDENT(K) ASSIGN expr(E).             { A = ast_set_value(ctx, &K, NULL, E); }
setting(A) ::= IDENT(K) STRING(S) ASSIGN expr(E).   { A = ast_set_value(ctx, &K, &S, E); }
setting(A) ::= IDENT(K) sblock(B).                  { A = ast_set_block(ctx, &K, &B); }

%type exprs {ExprList}
exprs(A) ::= expr(E).                               { memset(&A, 0, sizeof A); ast_exprs_push(ctx->arena, &A, E); }
exprs(A) ::= exprs(L) COMMA expr(E).                { A = L; ast_exprs_push(ctx->arena, &A, E); }

expr(A) ::= expr(L) PLUS expr(R).                   { A = ast_binary(ctx, '+', L, R); }
expr(A) ::= expr(L) MINUS expr(R).                  { A = ast_binary(ctx, '-', L, R); }
expr(A) ::= expr(L) STAR expr(R).                   { A = ast_binary(ctx, '*', L, R); }
expr(A) ::= expr(L) SLASH expr(R).                  { A = ast_binary(ctx, '/', L, R); }
expr(A) ::= expr(L) PERCENT expr(R).                { A = ast_binary(ctx, '%', L, R); }
expr(A) ::= MINUS(K) expr(E). [UMINUS]              { A = ast_unary(ctx, &K, E); }
expr(A) ::= INT(T).                                 { A = ast_number(ctx, &T, EX_INT); }
expr(A) ::= FLOAT(T).                               { A = ast_number(ctx, &T, EX_FLOAT); }
expr(A) ::= STRING(T).                              { A = ast_string(ctx, &T); }
expr(A) ::= IDENT(T).                               { A = ast_name(ctx, &T); }
expr(A) ::= DTYPE(T).                               { A = ast_name(ctx, &T); }
expr(A) ::= LPAREN expr(E) RPAREN.                  { A = E; }
expr(A) ::= LBRACK(L) args(X) RBRACK(R).            { A = ast_list(ctx, &L, &X, &R); }
expr(A) ::= IDENT(N) LPAREN args(X) RPAREN(R).      { A = ast_call(ctx, &N, &X, &R); }
expr(A) ::= PARAM(K) LBRACK exprs(D) RBRACK INIT IDENT(I) ptail(X).             { A = ast_param_expr(ctx, &K, NULL, &D, &I, &X); }
expr(A) ::= PARAM(K) DTYPE(T) LBRACK exprs(D) RBRACK INIT IDENT(I) ptail(X).    { A = ast_param_expr(ctx, &K, &T, &D, &I, &X); }

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
