/* lex: the lexer's interface (hand-written; the scanner itself is lang/lexer.re,
 * generated into the build tree by re2c). .zl source text -> tokens (re2c, lang/lexer.re).
 *
 * Tokens are slices of the NUL-terminated source (offset and length).
 * Numbers carry their value and unit; strings their decoded text (in the
 * arena). Newlines become TK_NL separators by Go's rule: after an
 * identifier, a literal, `)`, `]`, `}` or `return`, and never inside ( )
 * or [ ]. A final TK_NL is produced before end of input. Bytes that start
 * no token are reported (diagnostic) and skipped; a newline after one ends
 * the statement, so that a bad character costs one error.
 *
 * The lexer keeps the stack of open brackets, with what each one opened
 * (a call, a layer body, ...), so the parser can say which bracket is
 * missing and where it opened. A bracket token changes the stack when the
 * next token is read: while the parser looks at a token, the stack is the
 * one that token is in. */
#ifndef ZINF_LEX_H
#define ZINF_LEX_H
#include <stdbool.h>
#include <stdint.h>
#include "arena.h"
#include "ast.h"
#include "diag.h"

typedef struct Token {
    int kind;          /* TK_* of the generated grammar.h; 0 = end of input */
    Span span;
    int64_t ival;
    bool overflow;     /* TK_INT: the literal does not fit in int64 */
    double fval;
    Unit unit;         /* numbers: {UNIT_NONE, 1} when no unit follows */
    const char *str;   /* identifiers and keywords (arena copy), decoded strings */
    size_t slen;
    DType dtype;       /* TK_DTYPE */
    Span nl;           /* a newline skipped inside ( ) or [ ] just before this token; file -1 if none */
} Token;

enum { LEX_MAX_DEPTH = 256 };

/* What an open bracket opened. */
typedef enum LexOpen {
    LO_GROUP,   /* ( expr ) */
    LO_CALL,    /* name( */
    LO_PARAMS,  /* layer NAME( */
    LO_LIST,    /* [a, b] */
    LO_DIMS,    /* param [..], i32[..], x: [..] */
    LO_DECL,    /* the body of the declaration `decl_kw` */
    LO_REPEAT,  /* repeat N { */
    LO_IF,      /* if c { or else { (decl_kw: TK_IF or TK_ELSE) */
    LO_BLOCK,   /* key { settings } */
} LexOpen;

typedef struct LexBracket {
    char ch;        /* '(' '[' '{' */
    LexOpen what;
    int decl_kw;    /* LO_DECL: TK_LAYER, TK_MODEL, TK_TRAIN, TK_TARGET, TK_PLAN, TK_HF; LO_IF: TK_IF, TK_ELSE */
    Span at;        /* the bracket */
    Span key;       /* LO_BLOCK, LO_CALL: the name before it */
} LexBracket;

typedef struct Lexer {
    const char *src;
    uint32_t len, pos;
    int file;
    Arena *arena;
    DiagSink *d;
    int last, last2;          /* kinds of the two previous tokens */
    Span last_span, last2_span; /* their spans */
    bool last_bad;            /* the previous thing was a bad character */
    bool done;
    int decl_kw;              /* the last declaration keyword seen outside brackets */
    bool repeat_pending;      /* a 'repeat' waits for its '{' */
    int cond_pending;         /* an 'if' or 'else' (its token kind) waits for its '{', else 0 */
    int pending;              /* bracket of the last token, applied on the next call: 0 or ( [ { ) ] } */
    LexBracket pending_open;  /* what it opens, worked out when it was read */
    int depth;                /* open brackets (may exceed LEX_MAX_DEPTH; only that many are kept) */
    LexBracket open[LEX_MAX_DEPTH];
    int errors;               /* lexical errors reported */
} Lexer;

void lex_init(Lexer *L, const char *src, uint32_t len, int file, Arena *a, DiagSink *d);
/* The next token; kind 0 at end of input (and every call after it). */
void lex_next(Lexer *L, Token *t);
/* A short description of a token kind for messages: "')'", "a name", "newline". */
const char *lex_token_name(int kind);
/* The innermost open bracket, or NULL. */
const LexBracket *lex_open(const Lexer *L);
/* "the call", "the layer body", "the 'gpu' block", ... (arena). */
const char *lex_open_what(const Lexer *L, const LexBracket *b);
/* Forgets open '(' and '[' above the innermost '{' (after a syntax error, so
 * that newlines end statements again). */
void lex_drop_parens(Lexer *L);
/* Drops the innermost open bracket (the parser closed it itself). */
void lex_pop(Lexer *L);

#endif
