/* fuzz_frontend: the whole front end on one .zl source text, as
 *   zinfc model.zl --target host --kernels=none -o x.plan
 * runs it (compiler/main_zinfc.c), but in one process and without writing:
 * load (imports resolved against the compiled-in stdlib), parse, check,
 * the AST and graph listings, autodiff, the memory model of --explain,
 * planning for the built-in host target, then the plan encoded in memory,
 * decoded again and verified. Diagnostics are rendered to /dev/null.
 *
 * The input reaches the real loader (lang/loader.c reads a path) through an
 * anonymous in-memory file (memfd), so nothing touches the disk and the
 * import rules are exactly zinfc's: the main file's directory is
 * /proc/self/fd, where no .zl file is, then the stdlib.
 *
 * Bounds (each one a size the compiler accepts, so the harness, not the
 * compiler, refuses to go on): a forward graph of more than
 * FUZZ_MAX_FWD_OPS ops or FUZZ_MAX_TENSORS tensors is not planned, nor are
 * plan blocks asking for more than FUZZ_MAX_TILES tiles in all: planning
 * time grows with both (4000 GPT-2 blocks take the planner 24 s and GBs),
 * and they are legitimate models, not bugs.
 *
 * A crash, a sanitizer report, an "internal" compiler error (the planner's
 * own verification failing), or a plan that does not survive encode and
 * decode are findings: the last two abort. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "arena.h"
#include "ast.h"
#include "autodiff.h"
#include "diag.h"
#include "fuzz_common.h"
#include "graph.h"
#include "loader.h"
#include "memmodel.h"
#include "plan.h"
#include "planner.h"
#include "sema.h"
#include "target.h"
#include "verify.h"

#ifndef ZINF_STDLIB_DIR
#define ZINF_STDLIB_DIR "stdlib"
#endif

enum { FUZZ_MAX_FWD_OPS = 1500, FUZZ_MAX_TENSORS = 6000, FUZZ_MAX_TILES = 1024 };

/* The memfd the source is written to (one per process, rewritten each run). */
static int source_fd = -1;
static char source_path[64];

static bool write_source(const uint8_t *data, size_t size) {
    if (source_fd < 0) {
        source_fd = memfd_create("zl-input", 0);
        if (source_fd < 0) return false;
        snprintf(source_path, sizeof source_path, "/proc/self/fd/%d", source_fd);
    }
    if (ftruncate(source_fd, 0) != 0) return false;
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(source_fd, data + done, size - done, (off_t)done);
        if (w <= 0) return false;
        done += (size_t)w;
    }
    return true;
}

/* Aborts on a diagnostic the compiler only gives for its own bugs: "internal
 * planner error: ..." and the like, which have no source location (a name in
 * the source may well say "internal"). */
static void no_internal_errors(const DiagSink *d) {
    for (int i = 0; i < d->len; i++)
        if (d->items[i].level == DIAG_ERROR && d->items[i].span.file < 0 && d->items[i].msg &&
            !strncmp(d->items[i].msg, "internal ", 9)) {
            fprintf(stderr, "fuzz_frontend: internal compiler error: %s\n", d->items[i].msg);
            abort();
        }
}

/* What zinfc -o does with a plan, in memory: encode, then (as zinfrun and
 * zinfdump would) decode and verify; both must accept what the planner made. */
static void round_trip(const Plan *p) {
    uint8_t *bytes = NULL;
    size_t len = 0;
    char err[512];
    if (!plan_encode(p, &bytes, &len, err, sizeof err)) return; /* out of memory only */
    Plan *q = plan_decode(bytes, len, "fuzz.plan", err, sizeof err);
    free(bytes);
    if (!q) {
        fprintf(stderr, "fuzz_frontend: the planner's plan does not decode: %s\n", err);
        abort();
    }
    char msgs[2048];
    int problems = verify_plan(q, msgs, sizeof msgs);
    plan_free(q);
    if (problems) {
        fprintf(stderr, "fuzz_frontend: the decoded plan fails verification:\n%s", msgs);
        abort();
    }
}

static void explain_memory(const Graph *g, int ranks, int64_t whole_below, FILE *out) {
    MemOptions mo;
    memmodel_options_default(&mo);
    mo.ranks = ranks;
    mo.whole_below = whole_below;
    MemModel m;
    if (memmodel_compute(g, &mo, &m) == 0) memmodel_print(&m, out);
}

static bool within_bounds(const Graph *g, const PlannerOptions *po) {
    if (g->nops > FUZZ_MAX_FWD_OPS || g->ntensors > FUZZ_MAX_TENSORS) return false;
    int64_t tiles = 0;
    for (int i = 0; i < po->ntiles; i++) tiles += po->tiles[i].tiles;
    return tiles <= FUZZ_MAX_TILES;
}

/* zinfc_plan for --target host --kernels=none, without the file. */
static void plan_for_host(Arena *a, DiagSink *d, const Program *prog, Graph *g, FILE *sink) {
    Target t;
    if (!target_builtin("host", &t)) abort(); /* the built-in exists */
    /* A model's own target block is still evaluated (zinfc does without --target). */
    if (target_find(prog, NULL)) {
        Target own;
        target_from_program(prog, NULL, a, d, &own);
    }
    PlannerOptions po;
    planner_options_default(&po);
    if (!planner_options_from_program(prog, a, d, &po)) return;
    if (!within_bounds(g, &po)) return;
    if (!ad_build(g, d)) return;
    explain_memory(g, target_ranks(&t), po.whole_below, sink);
    PlannerResult r;
    if (!planner_run(g, &t, &po, a, d, &r)) return;
    r.plan->source = source_path;
    fputs(r.explain, sink);
    round_trip(r.plan);
    plan_free(r.plan);
}

static void compile(FILE *sink) {
    Arena a;
    arena_init(&a);
    SourceSet src;
    source_set_init(&src);
    DiagSink d;
    diag_init(&d);
    LoadOptions lo = {NULL, 0, ZINF_STDLIB_DIR};
    Program prog;
    memset(&prog, 0, sizeof prog);
    Graph g;
    if (program_load(&a, &src, &d, source_path, &lo, &prog)) {
        if (prog.nfiles > 0) ast_dump(prog.files[0], sink);
        if (d.errors) {
            sema_build(&a, &prog, &src, &d, &g); /* more errors, as zinfc reports them */
        } else if (sema_build(&a, &prog, &src, &d, &g) && !d.errors && !a.failed) {
            graph_dump(&g, sink);
            plan_for_host(&a, &d, &prog, &g, sink);
        }
    }
    diag_render(&d, &src, sink, false);
    no_internal_errors(&d);
    diag_free(&d);
    source_set_free(&src);
    arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *sink = fuzz_sink();
    if (!sink || !write_source(data, size)) {
        fprintf(stderr, "fuzz_frontend: cannot set up (memfd or /dev/null)\n");
        abort();
    }
    compile(sink);
    return 0;
}
