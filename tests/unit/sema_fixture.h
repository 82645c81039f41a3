/* sema_fixture: a .zl program written into the suite's temporary directory,
 * loaded and checked inside a test as zinfc --check does (program_load with
 * that directory as the -I directory and the source stdlib, sema_new,
 * sema_check), its diagnostics rendered to text for comparison to the
 * letter. For the suites that check source text (test_sema, test_hf,
 * test_freeze). Header-only: a suite includes it once, calls
 * fixture_tmp_make and fixture_tmp_remove from its checked fixture, and
 * run_free after each run. */
#ifndef ZINF_SEMA_FIXTURE_H
#define ZINF_SEMA_FIXTURE_H
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "arena.h"
#include "diag.h"
#include "graph.h"
#include "loader.h"
#include "sema.h"

#ifndef ZINF_STDLIB_DIR
#define ZINF_STDLIB_DIR "stdlib"
#endif

/* One program and what checking it gave; run_free releases it all. */
typedef struct Run {
    Arena a;
    SourceSet src;
    DiagSink d;
    Program prog;
    Sema *sema; /* for evaluating names afterwards */
    Graph g;
    bool ok;    /* checked without an error */
    char *text; /* rendered diagnostics */
} Run;

/* The suite's temporary directory: made and removed around each test. */
static char tmpdir[64];

static inline void fixture_tmp_make(const char *suite) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/%s.XXXXXX", suite);
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static inline void fixture_tmp_remove(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) { /* best effort: a leftover directory fails no test */
    }
}

/* Writes text as the file name inside the temporary directory. */
static inline void write_file(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static inline void run_init(Run *r) {
    memset(r, 0, sizeof *r);
    arena_init(&r->a);
    source_set_init(&r->src);
    diag_init(&r->d);
}

/* The diagnostics so far as text, without colour. */
static inline void run_render(Run *r) {
    free(r->text);
    size_t n = 0;
    FILE *m = open_memstream(&r->text, &n);
    ck_assert_ptr_nonnull(m);
    diag_render(&r->d, &r->src, m, false);
    fclose(m);
}

/* Checks the loaded program r->prog and renders the diagnostics. */
static inline void run_check(Run *r) {
    r->sema = sema_new(&r->a, &r->prog, &r->src, &r->d);
    ck_assert_ptr_nonnull(r->sema);
    r->ok = sema_check(r->sema, &r->g) && r->d.errors == 0;
    run_render(r);
}

/* Loads and checks the file at path. */
static inline void run_path(Run *r, const char *path) {
    run_init(r);
    const char *inc[1] = {tmpdir};
    LoadOptions lo = {inc, 1, ZINF_STDLIB_DIR};
    ck_assert(program_load(&r->a, &r->src, &r->d, path, &lo, &r->prog));
    run_check(r);
}

/* Checks text as the main file main.zl (files it imports may be written
 * with write_file first). */
static inline void run_src(Run *r, const char *text) {
    write_file("main.zl", text);
    char path[256];
    snprintf(path, sizeof path, "%s/main.zl", tmpdir);
    run_path(r, path);
}

static inline void run_free(Run *r) {
    free(r->text);
    diag_free(&r->d);
    source_set_free(&r->src);
    arena_free(&r->a);
}

#endif
