/* bench_parser: front-end throughput. Generates a 4 MB .zl source of layers
 * (the stdlib's style: params, calls, arithmetic), lexes it alone and parses
 * it to an AST, and prints MB/s beside the peer figure of a plain byte scan
 * of the same text (counting newlines with memchr): how far the front end is
 * from the speed of reading the text at all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "grammar.h"
#include "lex.h"
#include "parse.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void) {
    size_t cap = 5u << 20, len = 0;
    char *src = malloc(cap);
    if (!src) return 1;
    len += (size_t)snprintf(src + len, cap - len, "const V = 64, T = 8, D = 16\n");
    for (int i = 0; len + 400 < cap - 1024 * 1024; i++)
        len += (size_t)snprintf(src + len, cap - len,
                                "layer l%d(x: [B, T, D], hidden = 4 * D) {  # a comment\n"
                                "  w1 = param [D, hidden] init normal(0.02); b1 = param [hidden] init zeros\n"
                                "  y = linear(gelu(linear(x, w1, b1)), w1, b1) + x * 2 - (x / 3)\n"
                                "  return y\n}\n",
                                i);
    const int reps = 5;
    double mb = (double)len / 1e6;

    double t0 = now();
    size_t lines = 0;
    for (int r = 0; r < reps; r++)
        for (const char *p = src; (p = memchr(p, '\n', len - (size_t)(p - src))); p++) lines++;
    double scan = now() - t0;

    Arena a;
    DiagSink d;
    arena_init(&a);
    diag_init(&d);
    t0 = now();
    size_t ntok = 0;
    for (int r = 0; r < reps; r++) {
        Lexer L;
        lex_init(&L, src, (uint32_t)len, 0, &a, &d);
        Token t;
        do {
            lex_next(&L, &t);
            ntok++;
        } while (t.kind != 0);
    }
    double lex = now() - t0;
    arena_free(&a);

    SourceSet s;
    source_set_init(&s);
    int id = source_add(&s, "bench.zl", src, len);
    double parse = 0;
    int decls = 0;
    for (int r = 0; r < reps; r++) {
        arena_init(&a);
        t0 = now();
        AstFile *f = parse_source(&a, &s, id, &d);
        parse += now() - t0;
        decls = f ? f->decls.len : -1;
        arena_free(&a);
    }
    printf("source: %.1f MB, %zu lines, %zu tokens, %d declarations, %d errors\n", mb, lines / reps, ntok / reps, decls,
           d.errors);
    printf("%-28s %10s %14s\n", "stage", "MB/s", "peer: scan MB/s");
    printf("%-28s %10.1f %14.1f\n", "lex (re2c)", mb * reps / lex, mb * reps / scan);
    printf("%-28s %10.1f %14.1f\n", "lex + parse + AST (Lemon)", mb * reps / parse, mb * reps / scan);
    diag_free(&d);
    source_set_free(&s);
    free(src);
    return decls > 0 && d.errors == 0 ? 0 : 1;
}
