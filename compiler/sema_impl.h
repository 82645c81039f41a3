/* sema_impl.h: private to compiler/sema*.c. The checker's state (Sema), its
 * values (Val), scopes and evaluation contexts, and the helpers the sema files
 * share. Who owns what:
 *   sema.c        the public entry points: setup, the model, the hf mapping
 *   sema_eval.c   the public constant evaluation (target, plan and hf blocks)
 *   sema_scope.c  diagnostics de-duplication, names, bindings, lookups, the
 *                 graph's limits
 *   sema_decl.c   file scopes and imports, constants
 *   sema_train.c  the train block -> TrainConfig
 *   sema_expr.c   expressions: names, literals, operators, calls
 *   sema_prim.c   primitive calls: arguments, attributes, shapes, ops emitted
 *   sema_layer.c  layer instantiation and params
 *   sema_stmt.c   statements: assign, repeat, if, return, loss
 * The rules are documented in docs/checking.md; keep the two in step.
 *
 * Calls go down from sema.c (-> hfmap.c -> sema_eval.c) and to sema_scope.c
 * from every file. Six files recurse through one another, because the
 * checker is an interpreter: evaluating an expression runs the things it
 * names, and running them evaluates expressions again:
 *   sema_expr -> sema_decl  (sema_lookup_const)  a name may be a constant,
 *       sema_decl -> sema_expr (sema_eval_expr)  evaluated on first use;
 *   sema_expr -> sema_train (sema_micro_batch)   the name B is the train
 *       sema_train -> sema_expr (sema_eval_expr) block's micro_batch, an
 *       sema_train -> sema_decl (sema_const_ctx) expression in its scope;
 *   sema_expr -> sema_prim  (sema_call_prim,     a call of a primitive (and
 *                            sema_emit_prim)     `+` or `*` of tensors)
 *       sema_prim -> sema_expr (sema_eval_expr)  evaluates its arguments;
 *   sema_expr -> sema_layer (sema_call_layer)    a call of a layer evaluates
 *       sema_layer -> sema_expr (sema_eval_expr) its arguments and runs its
 *       sema_layer -> sema_stmt (sema_exec_body) body, whose statements
 *       sema_stmt -> sema_expr (sema_eval_expr)  evaluate expressions and
 *       sema_stmt -> sema_layer (sema_make_param) make its parameters.
 * Those are all the calls among the six files (what `nm` shows); keep the
 * list in step when adding one. */
#ifndef ZINF_SEMA_IMPL_H
#define ZINF_SEMA_IMPL_H
#include "sema.h"
#include "prim.h"

enum { SEMA_MAX_DEPTH = 64, SEMA_MAX_REPEAT = 1 << 16, SEMA_MAX_EXPR_DEPTH = 1000, SEMA_MAX_TENSORS = 1 << 18 };
/* Expansion steps (statements run, repeat iterations, layer calls): nested
 * repeats, or layers that call a layer twice, grow exponentially even when
 * they make no tensor, so the tensor limit alone does not bound the work.
 * Four steps per tensor of the largest graph allowed is ample for a model. */
enum { SEMA_MAX_STEPS = 4 * SEMA_MAX_TENSORS };

/* ---- values ---- */

typedef enum VKind { V_POISON, V_INT, V_FLOAT, V_STR, V_BOOL, V_TENSOR, V_TUPLE, V_LIST } VKind;

typedef struct Val {
    VKind k;
    UnitKind unit;
    int64_t i;
    double f;
    const char *s;
    size_t slen;
    int t;              /* V_TENSOR: tensor id */
    int n;              /* V_TUPLE, V_LIST */
    struct Val *items;
} Val;

static const Val POISON = {V_POISON, UNIT_NONE, 0, 0, NULL, 0, -1, 0, NULL};

typedef struct Binding {
    const char *name;
    Val v;
    Span def;           /* where it was bound (for notes) */
    bool is_index;      /* a repeat index: not assignable */
    bool is_shape;      /* a shape variable bound by a typed layer parameter */
    struct Binding *next;
} Binding;

typedef struct Count {
    const char *name;
    int n;
    struct Count *next;
} Count;

typedef struct ConstEntry {
    const Decl *decl;
    Val v;
    int state;          /* 0 not evaluated, 1 evaluating, 2 done */
} ConstEntry;

typedef struct FileScope {
    int file;           /* SourceSet index */
    const AstFile *ast;
    ConstEntry *consts;
    int nconsts;
    const Decl **layers;
    int nlayers;
    int *imports;       /* FileScope indices */
    int nimports;
} FileScope;

/* One evaluation context: a layer instance, the model body, or a constant. */
typedef struct EvalCtx {
    int scope;          /* FileScope index */
    Binding *env;
    const char *path;   /* naming path of this instance ("" for the model) */
    Count *counts;      /* calls per layer name in this naming scope */
    const char *rsuffix;/* ".3" inside repeat iteration 3 ("" outside) */
    const Decl *decl;   /* the layer or model; NULL for a constant */
    bool const_only;    /* evaluating a const or a setting: no tensors */
    int const_index;    /* const being evaluated in its file (earlier ones visible); -1: all */
    int in_repeat;
    int in_if;          /* inside the taken branch of an if */
    bool is_model;
} EvalCtx;

typedef struct Seen {
    int32_t file;
    uint32_t off;
    uint64_t h;
} Seen;

struct Sema {
    Arena *a;
    const Program *prog;
    const SourceSet *src;
    DiagSink *d;
    FileScope *files;
    int nfiles;
    const Decl *train_decl;
    int train_scope;
    TrainConfig train;
    int mb_state;       /* micro_batch: 0 not read, 1 reading, 2 done */
    Graph *g;
    int segment;        /* current checkpoint segment, -1 outside */
    const Decl *stack[SEMA_MAX_DEPTH];
    int depth;
    int eval_depth;
    bool too_deep;
    bool too_big;             /* the tensor or step limit was hit: stop expanding */
    int64_t steps;            /* expansion steps so far (SEMA_MAX_STEPS) */
    bool after_syntax_errors; /* the sink had errors before checking: absences may be their cascade */
    Seen *seen;
    int nseen, capseen;
    /* parameter names already used */
    const char **pnames;
    Span *pspans;
    int npnames, cappnames;
};

static inline Val vint(int64_t i) {
    Val v = POISON;
    v.k = V_INT;
    v.i = i;
    v.f = (double)i;
    return v;
}

static inline Val vfloat(double f) {
    Val v = POISON;
    v.k = V_FLOAT;
    v.f = f;
    return v;
}

static inline Val vtensor(int t) {
    Val v = POISON;
    v.k = V_TENSOR;
    v.t = t;
    return v;
}

static inline bool is_num(const Val *v) { return v->k == V_INT || v->k == V_FLOAT; }

/* ---- sema_scope.c ---- */

uint64_t sema_hash_str(const char *s);
/* Reports an error unless the same message was already reported at the same
 * place (a repeat body reports once); true when it was reported, so that
 * notes and hints follow only a reported error. */
bool sema_error(Sema *s, Span sp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *sema_shape_of(Sema *s, int t);
const char *sema_vkind_name(VKind k);
int sema_scope_of_file(const Sema *s, int file);
ConstEntry *sema_find_const_in(FileScope *f, const char *name, int *index);
const Decl *sema_find_layer_in(const FileScope *f, const char *name);
/* A layer visible from scope sc: its own, then its imports'. */
const Decl *sema_find_layer(Sema *s, int sc, const char *name);
Binding *sema_find_binding(Binding *env, const char *name);
void sema_bind(Sema *s, EvalCtx *c, const char *name, Val v, Span def);
bool sema_reserved_name(const char *n);
/* Is name known in c (so a dimension naming it is a value, not a new shape variable)? */
bool sema_name_known(Sema *s, EvalCtx *c, const char *n);
/* The graph is bounded: false (reported once) when it holds too many tensors. */
bool sema_room(Sema *s, Span sp);
/* Counts one expansion step; false once the model has grown too large. */
bool sema_step(Sema *s, Span sp);

/* ---- sema_decl.c ---- */

void sema_build_scopes(Sema *s);
/* The value of const idx of scope sc, evaluated on first use. */
Val sema_const_value(Sema *s, int sc, int idx);
/* Looks up a constant visible from c; *found says whether the name is one. */
Val sema_lookup_const(Sema *s, EvalCtx *c, const char *name, Span use, bool *found);
/* A context for a constant expression in scope (no tensors, every const visible). */
EvalCtx sema_const_ctx(int scope);

/* ---- sema_train.c ---- */

/* The micro-batch (B), read from the train block on first use; -1 on error. */
int64_t sema_micro_batch(Sema *s);
void sema_read_train(Sema *s);

/* ---- sema_freeze.c ---- */

/* train { freeze = [...] }: marks the parameters it names frozen (reported:
 * a pattern matching nothing, every parameter frozen). */
void sema_apply_freeze(Sema *s, Graph *g);

/* ---- sema_decay.c ---- */

/* train { no_decay = ["bias", "norm"] }: marks the parameters AdamW steps
 * without weight decay (reported: a class that is no class, a value that is
 * no list of them). */
void sema_apply_no_decay(Sema *s, Graph *g);

/* ---- sema_expr.c ---- */

/* Evaluates e in c (bounded recursion depth); errors give POISON. */
Val sema_eval_expr(Sema *s, EvalCtx *c, const Expr *e);

/* ---- sema_prim.c ---- */

/* Shape-checks and emits one primitive op whose inputs and attributes are
 * gathered in pc (tensor inputs given as values). */
Val sema_emit_prim(Sema *s, EvalCtx *c, const PrimInfo *p, const Expr *call, const Val *tin, const Expr *const *tin_e,
                   int nin, PrimCall *pc);
/* A call of primitive p: its arguments sorted into tensors and attributes. */
Val sema_call_prim(Sema *s, EvalCtx *c, const PrimInfo *p, const Expr *e);

/* ---- sema_layer.c ---- */

/* A call of layer L: a new instance, named by its call path, its body run. */
Val sema_call_layer(Sema *s, EvalCtx *c, const Decl *L, const Expr *e);
/* var = param [...] init ...: a new parameter tensor named by the path. */
Val sema_make_param(Sema *s, EvalCtx *c, const char *var, const Expr *e);

/* ---- sema_stmt.c ---- */

/* Runs a layer's or the model's body; *returned says whether it returned. */
Val sema_exec_body(Sema *s, EvalCtx *c, const StmtList *body, bool *returned);

#endif
