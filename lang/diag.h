/* diag: source files and the diagnostic sink.
 *
 * Every source text (the main file, each import, a target file) is loaded
 * into a SourceSet once, NUL-terminated, and named by a small integer. A Span
 * is (file, byte offset, byte length); line and column are computed only when
 * a diagnostic is rendered. Diagnostics are collected in a DiagSink that counts
 * them; nothing in the compiler prints or exits: the driver renders the sink
 * and decides the exit code.
 *
 * Rendered form (tested to the letter by tests/golden/errors):
 *   file:line:col: error: message
 *    12 |   x = matmul(a, b)
 *       |       ^~~~~~~~~~~~
 *   file:line:col: note: message
 *    ...
 *   hint: text
 */
#ifndef ZINF_DIAG_H
#define ZINF_DIAG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "arena.h"

typedef struct Span {
    int32_t file; /* index into SourceSet, -1 = no location */
    uint32_t off, len;
} Span;

#define SPAN_NONE ((Span){-1, 0, 0})

typedef struct SourceFile {
    char *path;       /* as given or as resolved, shown in diagnostics */
    char *text;       /* NUL-terminated copy */
    size_t len;
} SourceFile;

typedef struct SourceSet {
    SourceFile *files;
    int nfiles, cap;
} SourceSet;

void source_set_init(SourceSet *s);
void source_set_free(SourceSet *s);
/* Adds a copy of text; returns the file index or -1 on out of memory. */
int source_add(SourceSet *s, const char *path, const char *text, size_t len);
/* Reads a file; returns index, or -1 and sets *err (an errno) on failure. */
int source_load(SourceSet *s, const char *path, int *err);
/* 1-based line and column (columns count bytes) of an offset. */
void source_line_col(const SourceSet *s, int file, uint32_t off, int *line, int *col);
/* Span joining two spans of the same file. */
Span span_join(Span a, Span b);

typedef enum { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE, DIAG_HINT } DiagLevel;

typedef struct Diag {
    DiagLevel level;
    Span span;
    char *msg; /* owned by the sink (malloc) */
} Diag;

typedef struct DiagSink {
    Diag *items;
    int len, cap;
    int errors, warnings;
    int max_errors; /* after this many errors, further ones are dropped (0 = no limit) */
    bool truncated;
} DiagSink;

void diag_init(DiagSink *d);
void diag_free(DiagSink *d);
/* Records a diagnostic. Notes and hints attach to the preceding error. */
void diag_error(DiagSink *d, Span sp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_warning(DiagSink *d, Span sp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(DiagSink *d, Span sp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_hint(DiagSink *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Renders every diagnostic in order. color: ANSI colours for a terminal. */
void diag_render(const DiagSink *d, const SourceSet *s, FILE *out, bool color);

/* "did you mean" hints: nearest_word (runtime/base/nearest.h). */
const char *diag_nearest(const char *name, const char *const *cands, int n);

#endif
