/* parse: one source file -> AstFile, through the re2c lexer (lang/lexer.re)
 * and the Lemon grammar (lang/grammar.y). Syntax errors go to the sink;
 * parsing recovers at the next statement or declaration so that one run
 * reports every error. Returns NULL only when out of memory. */
#ifndef ZINF_PARSE_H
#define ZINF_PARSE_H
#include "arena.h"
#include "ast.h"
#include "diag.h"

AstFile *parse_source(Arena *a, const SourceSet *src, int file, DiagSink *d);

#endif
