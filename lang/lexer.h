/* lexer: .zl source text -> tokens (re2c, lang/lexer.re).
 *
 * Tokens are slices of the NUL-terminated source (offset and length).
 * Numbers carry their value and unit; strings their decoded text (in the
 * arena). Newlines become TK_NL separators by Go's rule: after an
 * identifier, a literal, `)`, `]`, `}` or `return`, and never inside ( )
 * or [ ]. A final TK_NL is produced before end of input. Bytes that start
 * no token are reported (diagnostic) and skipped. The lexer keeps a stack
 * of open brackets so the parser can say where one opened. */
#ifndef ZINF_LEXER_H
#define ZINF_LEXER_H
#include <stdbool.h>
#include <stdint.h>
#include "arena.h"
#include "ast.h"
#include "diag.h"

typedef struct Token {
    int kind;          /* TK_* of the generated grammar.h; 0 = end of input */
    Span span;
    int64_t ival;
    bool overflow;
    double fval;
    Unit unit;
    const char *str;   /* identifiers (arena copy), decoded strings */
    size_t slen;
    DType dtype;       /* TK_DTYPE */
} Token;

enum { LEX_MAX_DEPTH = 256 };

typedef struct Lexer {
    const char *src;
    uint32_t len, pos;
    int file;
    Arena *arena;
    DiagSink *d;
    int last;                 /* kind of the previous token */
    bool done;
    int depth;                /* open brackets */
    char open_kind[LEX_MAX_DEPTH];
    Span open_span[LEX_MAX_DEPTH];
    int errors;
} Lexer;

void lex_init(Lexer *L, const char *src, uint32_t len, int file, Arena *a, DiagSink *d);
/* The next token; kind 0 at end of input. */
void lex_next(Lexer *L, Token *t);
/* A short description of a token kind for messages: "')'", "a name", "newline". */
const char *lex_token_name(int kind);

#endif
