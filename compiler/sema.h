/* sema: the checker. Program (AST) -> forward Graph.
 *
 * Resolves names (per-file scopes of consts and layers, imports), evaluates
 * constants (64-bit integers with overflow checks, doubles, units folded),
 * reads the train block into TrainConfig, instantiates layers at each call
 * site with their shapes checked, names parameters by their call path, and
 * emits the forward ops in order. Rules: docs/checking.md. Shape rules of the
 * primitives: compiler/prim.h.
 *
 * Every problem goes to the DiagSink (all of them, not only the first; an
 * erroneous value becomes a poison that silences errors that follow from it).
 * Nothing is printed; everything is allocated in the given Arena.
 */
#ifndef ZINF_SEMA_H
#define ZINF_SEMA_H
#include <stdbool.h>
#include <stdint.h>
#include "arena.h"
#include "ast.h"
#include "diag.h"
#include "graph.h"

typedef struct Sema Sema;

/* A constant value, as the public helpers return it. */
typedef enum SemaValueKind { SV_NONE, SV_INT, SV_FLOAT, SV_STR, SV_BOOL } SemaValueKind;

typedef struct SemaValue {
    SemaValueKind kind;
    int64_t i;          /* SV_INT, SV_BOOL (0/1) */
    double f;           /* SV_FLOAT (also set for SV_INT) */
    const char *s;      /* SV_STR */
    size_t slen;
    UnitKind unit;      /* the unit kind the value carries (its scale is folded in) */
} SemaValue;

/* Sets up the checker over a loaded program: builds every file's scope and
 * evaluates every const (errors to d). Returns NULL only when out of memory. */
Sema *sema_new(Arena *a, const Program *prog, const SourceSet *src, DiagSink *d);

/* Checks the model and builds its forward graph into out (graph_init'ed by
 * sema_check). Returns true when no error was found (d->errors unchanged). */
bool sema_check(Sema *s, Graph *out);

/* One-call form: sema_new + sema_check. */
bool sema_build(Arena *a, const Program *prog, const SourceSet *src, DiagSink *d, Graph *out);

/* Evaluates a constant expression in the main file's scope (its consts, its
 * imports' consts, and B = the micro-batch). Errors go to d; returns false on
 * error. For target and plan blocks. */
bool sema_eval(Sema *s, const Expr *e, SemaValue *out);
bool sema_eval_int(Sema *s, const Expr *e, int64_t *out);
bool sema_eval_float(Sema *s, const Expr *e, double *out);   /* ints are converted */
bool sema_eval_string(Sema *s, const Expr *e, const char **out);

/* The training configuration (valid after sema_new). */
const TrainConfig *sema_train(const Sema *s);

#endif
