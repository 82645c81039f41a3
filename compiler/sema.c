/* sema: names, constants, shapes, layer instantiation -> forward Graph.
 * The rules are documented in docs/checking.md; keep the two in step. */
#include "sema.h"
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "hfmap.h"
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
typedef struct Ctx {
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
} Ctx;

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

/* ---- diagnostics with de-duplication (a repeat body reports once) ---- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool error(Sema *s, Span sp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool error(Sema *s, Span sp, const char *fmt, ...) {
    char buf[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    uint64_t h = hash_str(buf);
    for (int i = 0; i < s->nseen; i++)
        if (s->seen[i].file == sp.file && s->seen[i].off == sp.off && s->seen[i].h == h) return false;
    if (s->nseen == s->capseen) {
        int nc = s->capseen ? s->capseen * 2 : 32;
        Seen *ns = ARENA_NEWN(s->a, Seen, nc);
        if (!ns) return false;
        if (s->nseen) memcpy(ns, s->seen, sizeof *ns * (size_t)s->nseen);
        s->seen = ns;
        s->capseen = nc;
    }
    s->seen[s->nseen++] = (Seen){sp.file, sp.off, h};
    diag_error(s->d, sp, "%s", buf);
    return true;
}

/* ---- small helpers ---- */

static const char *shape_of(Sema *s, int t) {
    char buf[160];
    graph_shape_str(s->g, t, buf, sizeof buf);
    return arena_strdup(s->a, buf);
}

static const char *vkind_name(VKind k) {
    switch (k) {
    case V_INT: return "an integer";
    case V_FLOAT: return "a number";
    case V_STR: return "a string";
    case V_BOOL: return "a boolean";
    case V_TENSOR: return "a tensor";
    case V_TUPLE: return "a tuple";
    case V_LIST: return "a list";
    default: return "an erroneous value";
    }
}

static Val vint(int64_t i) {
    Val v = POISON;
    v.k = V_INT;
    v.i = i;
    v.f = (double)i;
    return v;
}

static Val vfloat(double f) {
    Val v = POISON;
    v.k = V_FLOAT;
    v.f = f;
    return v;
}

static Val vtensor(int t) {
    Val v = POISON;
    v.k = V_TENSOR;
    v.t = t;
    return v;
}

static bool is_num(const Val *v) { return v->k == V_INT || v->k == V_FLOAT; }

static int scope_of_file(const Sema *s, int file) {
    for (int i = 0; i < s->nfiles; i++)
        if (s->files[i].file == file) return i;
    return -1;
}

static const char *file_base(const Sema *s, int file) {
    if (file < 0 || file >= s->src->nfiles) return "?";
    const char *p = s->src->files[file].path, *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* ---- scopes ---- */

static ConstEntry *find_const_in(FileScope *f, const char *name, int *index) {
    for (int i = 0; i < f->nconsts; i++)
        if (strcmp(f->consts[i].decl->name, name) == 0) {
            if (index) *index = i;
            return &f->consts[i];
        }
    return NULL;
}

static const Decl *find_layer_in(const FileScope *f, const char *name) {
    for (int i = 0; i < f->nlayers; i++)
        if (strcmp(f->layers[i]->name, name) == 0) return f->layers[i];
    return NULL;
}

/* A layer visible from scope sc: its own, then its imports'. */
static const Decl *find_layer(Sema *s, int sc, const char *name) {
    const Decl *l = find_layer_in(&s->files[sc], name);
    for (int i = 0; !l && i < s->files[sc].nimports; i++) l = find_layer_in(&s->files[s->files[sc].imports[i]], name);
    return l;
}

static Binding *find_binding(Binding *env, const char *name) {
    for (Binding *b = env; b; b = b->next)
        if (strcmp(b->name, name) == 0) return b;
    return NULL;
}

static void bind(Sema *s, Ctx *c, const char *name, Val v, Span def) {
    Binding *b = find_binding(c->env, name);
    if (!b) {
        b = ARENA_NEW(s->a, Binding);
        if (!b) return;
        b->name = name;
        b->next = c->env;
        c->env = b;
    }
    b->v = v;
    b->def = def;
}

static void unbind(Ctx *c, Binding *which) {
    for (Binding **p = &c->env; *p; p = &(*p)->next)
        if (*p == which) {
            *p = which->next;
            return;
        }
}

/* ---- evaluation ---- */

static Val eval(Sema *s, Ctx *c, const Expr *e);
static Val eval_const_entry(Sema *s, int sc, int idx);
static int64_t micro_batch(Sema *s);

static bool reserved_name(const char *n) {
    return strcmp(n, "B") == 0 || strcmp(n, "true") == 0 || strcmp(n, "false") == 0;
}

/* Names a lookup could have meant, for did-you-mean. */
static const char *nearest_name(Sema *s, Ctx *c, const char *name) {
    const char *cands[512];
    int n = 0;
    for (Binding *b = c->env; b && n < 512; b = b->next) cands[n++] = b->name;
    FileScope *f = &s->files[c->scope];
    for (int i = 0; i < f->nconsts && n < 512; i++) cands[n++] = f->consts[i].decl->name;
    for (int k = 0; k < f->nimports; k++) {
        FileScope *g = &s->files[f->imports[k]];
        for (int i = 0; i < g->nconsts && n < 512; i++) cands[n++] = g->consts[i].decl->name;
    }
    return diag_nearest(name, cands, n);
}

/* Looks up a constant visible from c; *found says whether the name is one. */
static Val lookup_const(Sema *s, Ctx *c, const char *name, Span use, bool *found) {
    FileScope *f = &s->files[c->scope];
    int idx;
    ConstEntry *ce = find_const_in(f, name, &idx);
    *found = true;
    if (ce) {
        if (c->const_only && c->const_index >= 0 && idx >= c->const_index) {
            if (idx == c->const_index) {
                if (error(s, use, "constant '%s' is defined in terms of itself", name))
                    diag_note(s->d, ce->decl->name_span, "'%s' defined here", name);
            } else if (error(s, use, "constant '%s' is used before its definition", name)) {
                diag_note(s->d, ce->decl->name_span, "'%s' defined here", name);
            }
            return POISON;
        }
        return eval_const_entry(s, c->scope, idx);
    }
    for (int k = 0; k < f->nimports; k++) {
        int sc = f->imports[k];
        ce = find_const_in(&s->files[sc], name, &idx);
        if (ce) {
            if (ce->state == 1) {
                if (error(s, use, "constant '%s' depends on itself through imports", name))
                    diag_note(s->d, ce->decl->name_span, "'%s' defined here", name);
                return POISON;
            }
            return eval_const_entry(s, sc, idx);
        }
    }
    *found = false;
    return POISON;
}

static Val eval_name(Sema *s, Ctx *c, const Expr *e) {
    const char *n = e->str;
    Binding *b = find_binding(c->env, n);
    if (b) return b->v;
    if (strcmp(n, "true") == 0 || strcmp(n, "false") == 0) {
        Val v = vint(n[0] == 't');
        v.k = V_BOOL;
        return v;
    }
    if (strcmp(n, "B") == 0) {
        if (s->mb_state == 1) {
            error(s, e->span, "B is the micro-batch: micro_batch cannot depend on it");
            return POISON;
        }
        int64_t mb = micro_batch(s);
        return mb > 0 ? vint(mb) : POISON;
    }
    bool found;
    Val v = lookup_const(s, c, n, e->span, &found);
    if (found) return v;
    if (find_layer(s, c->scope, n) || prim_lookup(n)) {
        error(s, e->span, "'%s' is a %s, not a value; call it: %s(...)", n,
              prim_lookup(n) ? "primitive" : "layer", n);
        return POISON;
    }
    const char *near = nearest_name(s, c, n);
    if (near) error(s, e->span, "unknown name '%s'; did you mean '%s'?", n, near);
    else error(s, e->span, "unknown name '%s'", n);
    return POISON;
}

/* Folds a literal's unit into its value. */
static Val eval_literal(Sema *s, const Expr *e) {
    if (e->kind == EX_INT) {
        if (e->overflow) {
            error(s, e->span, "integer literal does not fit in 64 bits");
            return POISON;
        }
        int64_t v = e->ival, r;
        uint64_t sc = e->unit.scale ? e->unit.scale : 1;
        if (sc > (uint64_t)INT64_MAX || __builtin_mul_overflow(v, (int64_t)sc, &r)) {
            error(s, e->span, "%" PRId64 " with its unit (x %" PRIu64 ") overflows a 64-bit integer", v, sc);
            return POISON;
        }
        Val out = vint(r);
        out.unit = e->unit.kind;
        return out;
    }
    double sc = e->unit.scale ? (double)e->unit.scale : 1.0;
    Val out = vfloat(e->fval * sc);
    if (!isfinite(out.f)) {
        error(s, e->span, "number is too large");
        return POISON;
    }
    out.unit = e->unit.kind;
    return out;
}

static const char *opname(int op) {
    switch (op) {
    case '+': return "add";
    case '-': return "subtract";
    case '*': return "multiply";
    case '/': return "divide";
    case '%': return "take the remainder of";
    default: return "combine";
    }
}

static Val prim_call(Sema *s, Ctx *c, const PrimInfo *p, const Expr *call, const Val *tin, const Expr *const *tin_e,
                     int nin, PrimCall *pc);
static bool name_known(Sema *s, Ctx *c, const char *n);

static Val eval_binary(Sema *s, Ctx *c, const Expr *e) {
    Val a = eval(s, c, e->lhs), b = eval(s, c, e->rhs);
    if (a.k == V_POISON || b.k == V_POISON) return POISON;
    int op = e->op;
    if (a.k == V_TENSOR && b.k == V_TENSOR) {
        if (op == '+' || op == '*') {
            PrimCall pc;
            memset(&pc, 0, sizeof pc);
            pc.prim = op == '+' ? PRIM_ADD : PRIM_MUL;
            Val tv[2] = {a, b};
            const Expr *te[2] = {e->lhs, e->rhs};
            return prim_call(s, c, prim_info(pc.prim), e, tv, te, 2, &pc);
        }
        error(s, e->span, "tensors cannot be %s: the primitives are add (+) and mul (*)",
              op == '-' ? "subtracted" : op == '/' ? "divided" : "combined with this operator");
        return POISON;
    }
    if (a.k == V_TENSOR || b.k == V_TENSOR) {
        error(s, e->span, "cannot %s a tensor and %s: tensor arithmetic is between tensors (add, mul)", opname(op),
              vkind_name(a.k == V_TENSOR ? b.k : a.k));
        return POISON;
    }
    if (!is_num(&a) || !is_num(&b)) {
        error(s, e->span, "cannot %s %s and %s", opname(op), vkind_name(a.k), vkind_name(b.k));
        return POISON;
    }
    UnitKind u = a.unit != UNIT_NONE ? a.unit : b.unit;
    if (a.k == V_INT && b.k == V_INT) {
        int64_t r = 0;
        bool ovf = false;
        switch (op) {
        case '+': ovf = __builtin_add_overflow(a.i, b.i, &r); break;
        case '-': ovf = __builtin_sub_overflow(a.i, b.i, &r); break;
        case '*': ovf = __builtin_mul_overflow(a.i, b.i, &r); break;
        case '/':
        case '%':
            if (b.i == 0) {
                error(s, e->span, "%s by zero", op == '/' ? "division" : "remainder");
                return POISON;
            }
            if (a.i == INT64_MIN && b.i == -1) ovf = true;
            else r = op == '/' ? a.i / b.i : a.i % b.i;
            break;
        default: error(s, e->span, "unknown operator '%c'", op); return POISON;
        }
        if (ovf) {
            error(s, e->span, "integer overflow: %" PRId64 " %c %" PRId64 " does not fit in 64 bits", a.i, op, b.i);
            return POISON;
        }
        Val v = vint(r);
        v.unit = u;
        return v;
    }
    double x = a.f, y = b.f, r;
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/':
        if (y == 0) {
            error(s, e->span, "division by zero");
            return POISON;
        }
        r = x / y;
        break;
    default: error(s, e->span, "'%c' needs integer operands", op); return POISON;
    }
    if (!isfinite(r)) {
        error(s, e->span, "arithmetic overflow: the result is not a finite number");
        return POISON;
    }
    Val v = vfloat(r);
    v.unit = u;
    return v;
}

/* ---- primitives ---- */

static void blame_notes(Sema *s, Ctx *c, const PrimInfo *p, unsigned blame, const Val *tin, const Expr *const *tin_e,
                        int nin) {
    for (int i = 0; i < nin; i++) {
        if (!(blame >> i & 1) || !tin_e[i] || tin[i].k != V_TENSOR) continue;
        if (tin_e[i]->kind == EX_NAME) {
            Binding *b = find_binding(c->env, tin_e[i]->str);
            if (b && b->def.file >= 0)
                diag_note(s->d, b->def, "%s declared here as %s", tin_e[i]->str, shape_of(s, tin[i].t));
        } else {
            const GTensor *t = &s->g->tensors[tin[i].t];
            if (t->span.file >= 0)
                diag_note(s->d, t->span, "%s (%s) computed here as %s", p->in_names[i] ? p->in_names[i] : "operand",
                          p->name, shape_of(s, tin[i].t));
        }
    }
}

/* The graph is bounded: a typo in a repeat count must not take the machine. */
static bool room(Sema *s, Span sp) {
    if (s->g->ntensors < SEMA_MAX_TENSORS) return true;
    if (!s->too_big)
        error(s, sp, "the model is too large: more than %d tensors (is a repeat count too large?)", SEMA_MAX_TENSORS);
    s->too_big = true;
    return false;
}

/* Counts one expansion step; false once the model has grown too large. */
static bool step(Sema *s, Span sp) {
    if (s->too_big) return false;
    if (++s->steps <= SEMA_MAX_STEPS) return true;
    error(s, sp, "the model is too large: expanding it takes more than %d statements and layer calls (are repeat counts "
          "or layers that call layers several times too many?)", SEMA_MAX_STEPS);
    s->too_big = true;
    return false;
}

static int add_act(Sema *s, const PrimShape *sh, TensorClass cls, Span sp) {
    if (!room(s, sp)) return -1;
    int id = graph_add_tensor(s->g, NULL, sh->dtype, sh->rank, sh->dims, cls);
    if (id < 0) return -1;
    s->g->tensors[id].name = arena_printf(s->a, "%%%d", id);
    s->g->tensors[id].span = sp;
    s->g->tensors[id].segment = s->segment;
    return id;
}

/* Shape-checks and emits one primitive op whose inputs and attributes are
 * gathered in pc (tensor inputs given as values). */
static Val prim_call(Sema *s, Ctx *c, const PrimInfo *p, const Expr *call, const Val *tin, const Expr *const *tin_e,
                     int nin, PrimCall *pc) {
    pc->prim = p->id;
    pc->nin = nin;
    pc->act_dtype = s->train.dtype;
    for (int i = 0; i < nin; i++) {
        const GTensor *t = &s->g->tensors[tin[i].t];
        pc->in[i].dtype = t->dtype;
        pc->in[i].rank = t->rank;
        memcpy(pc->in[i].dims, t->dims, sizeof t->dims);
    }
    prim_defaults(pc);
    PrimShape out[GRAPH_MAX_OUT];
    int nout = 0;
    PrimError pe;
    if (!prim_infer(pc, out, &nout, &pe)) {
        if (error(s, call->span, "%s", pe.msg)) blame_notes(s, c, p, pe.blame, tin, tin_e, nin);
        return POISON;
    }
    for (int i = 0; i < nout; i++) {
        int64_t n = 1;
        for (int j = 0; j < out[i].rank; j++)
            if (__builtin_mul_overflow(n, out[i].dims[j], &n)) {
                char b[160];
                error(s, call->span, "%s: the result %s has more than 2^63 elements", p->name,
                      prim_shape_str(&out[i], b, sizeof b));
                return POISON;
            }
    }
    GOp op;
    memset(&op, 0, sizeof op);
    op.kind = OP_FWD;
    op.prim = p->id;
    op.nin = nin;
    for (int i = 0; i < nin; i++) op.in[i] = tin[i].t;
    memcpy(op.iattr, pc->iattr, sizeof op.iattr);
    memcpy(op.fattr, pc->fattr, sizeof op.fattr);
    op.nout = nout;
    op.segment = s->segment;
    op.fwd = -1;
    op.scope = c->path;
    op.span = call->span;
    for (int i = 0; i < nout; i++) {
        op.out[i] = add_act(s, &out[i], p->id == PRIM_ARANGE ? TC_CONST : TC_ACT, call->span);
        if (op.out[i] < 0) return POISON;
    }
    if (graph_add_op(s->g, &op) < 0) return POISON;
    if (nout == 1 && p->nout != -1) return vtensor(op.out[0]);
    Val tup = POISON;
    tup.k = V_TUPLE;
    tup.n = nout;
    tup.items = ARENA_NEWN(s->a, Val, nout);
    if (!tup.items) return POISON;
    for (int i = 0; i < nout; i++) tup.items[i] = vtensor(op.out[i]);
    return tup;
}

/* Sets attribute ai of pc from v; false (with an error) if v does not fit. */
static bool set_attr(Sema *s, const PrimInfo *p, PrimCall *pc, int ai, Val v, Span sp) {
    const PrimAttr *a = &p->attrs[ai];
    if (v.k == V_POISON) return false;
    if (pc->attr_set[ai]) {
        error(s, sp, "%s: attribute '%s' given twice", p->name, a->name);
        return false;
    }
    switch (a->kind) {
    case PA_INT:
        if (v.k != V_INT) {
            error(s, sp, "%s: '%s' must be an integer, got %s", p->name, a->name, vkind_name(v.k));
            return false;
        }
        pc->iattr[a->slot] = v.i;
        break;
    case PA_FLOAT:
        if (!is_num(&v)) {
            error(s, sp, "%s: '%s' must be a number, got %s", p->name, a->name, vkind_name(v.k));
            return false;
        }
        pc->fattr[a->slot] = v.f;
        break;
    case PA_FLAG:
        if (!(v.k == V_BOOL || (v.k == V_INT && (v.i == 0 || v.i == 1)))) {
            error(s, sp, "%s: '%s' is a flag: true or false, got %s", p->name, a->name, vkind_name(v.k));
            return false;
        }
        pc->iattr[a->slot] = v.i;
        break;
    case PA_WORD: {
        int w = -1;
        for (int i = 0; a->words && a->words[i] && v.k == V_STR; i++)
            if (!strcmp(a->words[i], v.s)) w = i;
        if (w < 0) {
            const char *l = "";
            for (int i = 0; a->words && a->words[i]; i++)
                l = arena_printf(s->a, "%s%s\"%s\"", l, i ? ", " : "", a->words[i]);
            if (v.k == V_STR) error(s, sp, "%s: '%s' must be one of %s, got \"%s\"", p->name, a->name, l, v.s);
            else error(s, sp, "%s: '%s' must be one of %s, got %s", p->name, a->name, l, vkind_name(v.k));
            return false;
        }
        pc->iattr[a->slot] = w;
        break;
    }
    case PA_SIZES:
        if (v.k == V_INT) {
            pc->iattr[a->slot] = v.i;
        } else if (v.k == V_LIST) {
            if (v.n > GRAPH_MAX_OUT) {
                error(s, sp, "%s: at most %d pieces, got %d", p->name, GRAPH_MAX_OUT, v.n);
                return false;
            }
            for (int i = 0; i < v.n; i++) {
                if (v.items[i].k != V_INT) {
                    error(s, sp, "%s: sizes must be integers, item %d is %s", p->name, i, vkind_name(v.items[i].k));
                    return false;
                }
                pc->sizes[i] = v.items[i].i;
            }
            pc->nsizes = v.n;
            pc->iattr[a->slot] = v.n;
            if (v.n == 0) {
                error(s, sp, "%s: the list of sizes is empty", p->name);
                return false;
            }
        } else {
            error(s, sp, "%s: '%s' must be a piece count or a list of sizes, got %s", p->name, a->name,
                  vkind_name(v.k));
            return false;
        }
        break;
    }
    pc->attr_set[ai] = true;
    return true;
}

static const char *attr_list(Sema *s, const PrimInfo *p) {
    if (p->nattr == 0) return "none";
    const char *l = "";
    for (int i = 0; i < p->nattr; i++) l = arena_printf(s->a, "%s%s%s", l, i ? ", " : "", p->attrs[i].name);
    return l;
}

static Val eval_prim(Sema *s, Ctx *c, const PrimInfo *p, const Expr *e) {
    PrimCall pc;
    memset(&pc, 0, sizeof pc);
    Val tin[PRIM_MAX_IN];
    const Expr *tin_e[PRIM_MAX_IN];
    int nin = 0, ntensor_args = 0;
    bool bad = false, poisoned = false;
    for (int k = 0; k < e->args.len; k++) {
        const Arg *arg = &e->args.items[k];
        if (arg->name) {
            const PrimAttr *a = prim_attr(p, arg->name);
            Val v = eval(s, c, arg->value);
            if (!a) {
                const char *cands[PRIM_MAX_ATTR];
                for (int i = 0; i < p->nattr; i++) cands[i] = p->attrs[i].name;
                const char *near = diag_nearest(arg->name, cands, p->nattr);
                if (near)
                    error(s, arg->name_span, "%s has no attribute '%s'; did you mean '%s'?", p->name, arg->name, near);
                else if (error(s, arg->name_span, "%s has no attribute '%s'", p->name, arg->name))
                    diag_hint(s->d, "attributes of %s: %s", p->name, attr_list(s, p));
                bad = true;
                continue;
            }
            if (!set_attr(s, p, &pc, (int)(a - p->attrs), v, arg->value->span)) bad = true;
            continue;
        }
        const Expr *ve = arg->value;
        if (ve->kind == EX_NAME && !find_binding(c->env, ve->str)) {
            const PrimAttr *a = prim_attr(p, ve->str);
            if (a && a->kind == PA_FLAG) {
                if (!set_attr(s, p, &pc, (int)(a - p->attrs), vint(1), ve->span)) bad = true;
                continue;
            }
            /* an unknown bare name where flags go: most likely a misspelt flag */
            const char *flags[PRIM_MAX_ATTR];
            int nf = 0;
            for (int i = 0; i < p->nattr; i++)
                if (p->attrs[i].kind == PA_FLAG) flags[nf++] = p->attrs[i].name;
            const char *near = nf && !name_known(s, c, ve->str) ? diag_nearest(ve->str, flags, nf) : NULL;
            if (near) {
                error(s, ve->span, "%s has no flag '%s'; did you mean '%s'?", p->name, ve->str, near);
                bad = true;
                continue;
            }
        }
        Val v = eval(s, c, ve);
        if (v.k == V_POISON) {
            bad = poisoned = true;
            continue;
        }
        if (v.k == V_TENSOR) {
            ntensor_args++;
            if (nin < PRIM_MAX_IN) {
                tin[nin] = v;
                tin_e[nin] = ve;
            }
            nin++;
            continue;
        }
        if (v.k == V_TUPLE) {
            if (error(s, ve->span, "%s: argument %d is a tuple of %d tensors, not a tensor", p->name, k + 1, v.n))
                diag_hint(s->d, "destructure it first: a, b = ...");
            bad = true;
            continue;
        }
        /* a constant: the next positional attribute */
        int ai = -1;
        for (int i = 0; i < p->nattr; i++)
            if (p->attrs[i].positional && !pc.attr_set[i]) {
                ai = i;
                break;
            }
        if (ai < 0) {
            if (error(s, ve->span, "%s: unexpected %s argument (it takes tensors%s)", p->name, vkind_name(v.k),
                      p->nattr ? " and named attributes" : ""))
                diag_hint(s->d, "%s", p->doc);
            bad = true;
            continue;
        }
        if (!set_attr(s, p, &pc, ai, v, ve->span)) bad = true;
    }
    if (!poisoned && (ntensor_args < p->nin_min || ntensor_args > p->nin_max)) {
        const char *names = "";
        for (int i = 0; i < p->nin_max; i++) names = arena_printf(s->a, "%s%s%s", names, i ? ", " : "", p->in_names[i]);
        if (p->nin_max == 0)
            error(s, e->span, "%s takes no tensor inputs, got %d", p->name, ntensor_args);
        else if (p->nin_min == p->nin_max)
            error(s, e->span, "%s takes %d tensor input%s (%s), got %d", p->name, p->nin_min, p->nin_min == 1 ? "" : "s",
                  names, ntensor_args);
        else
            error(s, e->span, "%s takes %d to %d tensor inputs (%s), got %d", p->name, p->nin_min, p->nin_max, names,
                  ntensor_args);
        return POISON;
    }
    if (bad) return POISON;
    for (int i = 0; i < p->nattr; i++)
        if (p->attrs[i].required && !pc.attr_set[i]) {
            if (error(s, e->span, "%s: missing attribute '%s'", p->name, p->attrs[i].name))
                diag_hint(s->d, "%s", p->doc);
            return POISON;
        }
    PrimError ue;
    pc.prim = p->id;
    if (!prim_unused_attrs(&pc, &ue)) {
        error(s, e->span, "%s", ue.msg);
        return POISON;
    }
    return prim_call(s, c, p, e, tin, tin_e, nin, &pc);
}

/* ---- layers ---- */

static Val exec_body(Sema *s, Ctx *c, const StmtList *body, bool *returned);

static const char *layer_chain(Sema *s, const Decl *to) {
    const char *l = "";
    int from = 0;
    for (int i = 0; i < s->depth; i++)
        if (s->stack[i] == to) from = i;
    for (int i = from; i < s->depth; i++) l = arena_printf(s->a, "%s%s -> ", l, s->stack[i]->name);
    return arena_printf(s->a, "%s%s", l, to->name);
}

/* Is name known in c (so a dimension naming it is a value, not a new shape variable)? */
static bool name_known(Sema *s, Ctx *c, const char *n) {
    if (find_binding(c->env, n) || reserved_name(n)) return true;
    FileScope *f = &s->files[c->scope];
    if (find_const_in(f, n, NULL)) return true;
    for (int k = 0; k < f->nimports; k++)
        if (find_const_in(&s->files[f->imports[k]], n, NULL)) return true;
    return false;
}

static const char *type_str(Sema *s, const TypeExpr *t) {
    const char *o = t->dtype != DT_NONE ? prim_dtype_str(t->dtype) : "";
    o = arena_printf(s->a, "%s[", o);
    for (int i = 0; i < t->dims.len; i++) {
        const Expr *d = t->dims.items[i];
        const char *x = d->kind == EX_NAME ? d->str : d->kind == EX_INT ? arena_printf(s->a, "%" PRId64, d->ival) : "...";
        o = arena_printf(s->a, "%s%s%s", o, i ? ", " : "", x);
    }
    return arena_printf(s->a, "%s]", o);
}

/* Binds layer parameter pd to v in callee, checking its type. */
static void bind_param(Sema *s, Ctx *callee, const Decl *L, const ParamDecl *pd, Val v, Span argsp) {
    const TypeExpr *ty = &pd->type;
    if (!ty->present) {
        bind(s, callee, pd->name, v, pd->span);
        return;
    }
    bool ok = v.k == V_TENSOR;
    if (v.k != V_TENSOR && v.k != V_POISON) {
        if (error(s, argsp, "%s: argument '%s' must be a tensor %s, got %s", L->name, pd->name, type_str(s, ty),
                  vkind_name(v.k)))
            diag_note(s->d, pd->span, "'%s' declared here", pd->name);
    }
    const GTensor *t = ok ? &s->g->tensors[v.t] : NULL;
    if (ok && ty->dtype != DT_NONE && t->dtype != ty->dtype) {
        if (error(s, argsp, "%s: argument '%s' must be %s, but it is %s", L->name, pd->name,
                  prim_dtype_str(ty->dtype), prim_dtype_str(t->dtype)))
            diag_note(s->d, pd->span, "'%s' declared here as %s", pd->name, type_str(s, ty));
        ok = false;
    }
    if (ok && t->rank != ty->dims.len) {
        if (error(s, argsp, "%s: argument '%s' must have rank %d (%s), but it is %s", L->name, pd->name, ty->dims.len,
                  type_str(s, ty), shape_of(s, v.t)))
            diag_note(s->d, pd->span, "'%s' declared here", pd->name);
        ok = false;
    }
    for (int j = 0; j < ty->dims.len; j++) {
        const Expr *de = ty->dims.items[j];
        if (de->kind == EX_NAME && !name_known(s, callee, de->str)) {
            bind(s, callee, de->str, ok ? vint(t->dims[j]) : POISON, de->span);
            Binding *b = find_binding(callee->env, de->str);
            if (b) b->is_shape = true;
            continue;
        }
        Val dv = eval(s, callee, de);
        if (!ok || dv.k == V_POISON) continue;
        if (dv.k != V_INT) {
            error(s, de->span, "a dimension must be an integer, got %s", vkind_name(dv.k));
            continue;
        }
        if (dv.i != t->dims[j]) {
            const char *what = de->kind == EX_NAME ? arena_printf(s->a, "%s = %" PRId64, de->str, dv.i)
                                                   : arena_printf(s->a, "%" PRId64, dv.i);
            if (error(s, argsp, "%s: argument '%s' has dimension %d of size %" PRId64 ", but %s expects %s (%s is %s)",
                      L->name, pd->name, j, t->dims[j], type_str(s, ty), what, pd->name, shape_of(s, v.t))) {
                Binding *b = de->kind == EX_NAME ? find_binding(callee->env, de->str) : NULL;
                if (b && b->def.file >= 0)
                    diag_note(s->d, b->def, "%s was bound here to %" PRId64, de->str, dv.i);
                else
                    diag_note(s->d, pd->span, "'%s' declared here", pd->name);
            }
        }
    }
    bind(s, callee, pd->name, ok ? v : POISON, pd->span);
}

static Val call_layer(Sema *s, Ctx *c, const Decl *L, const Expr *e) {
    /* past a limit, expanding more only repeats the error (and can take exponential time) */
    if (!step(s, e->span)) return POISON;
    for (int i = 0; i < s->depth; i++)
        if (s->stack[i] == L) {
            if (error(s, e->span, "layer '%s' calls itself (%s): layers are expanded at each call, so the recursion "
                      "never ends", L->name, layer_chain(s, L)))
                diag_note(s->d, L->name_span, "'%s' defined here", L->name);
            return POISON;
        }
    if (s->depth >= SEMA_MAX_DEPTH) {
        error(s, e->span, "layers nested more than %d deep", SEMA_MAX_DEPTH);
        return POISON;
    }
    int np = L->params.len;
    Val *argv = ARENA_NEWN(s->a, Val, np ? np : 1);
    Span *argsp = ARENA_NEWN(s->a, Span, np ? np : 1);
    bool *given = ARENA_NEWN(s->a, bool, np ? np : 1);
    if (!argv || !argsp || !given) return POISON;
    int pos = 0;
    bool bad = false;
    for (int k = 0; k < e->args.len; k++) {
        const Arg *arg = &e->args.items[k];
        int idx = -1;
        if (arg->name) {
            for (int i = 0; i < np; i++)
                if (strcmp(L->params.items[i].name, arg->name) == 0) idx = i;
            if (idx < 0) {
                const char *cands[64];
                int n = 0;
                for (int i = 0; i < np && n < 64; i++) cands[n++] = L->params.items[i].name;
                const char *near = diag_nearest(arg->name, cands, n);
                if (error(s, arg->name_span, "layer '%s' has no parameter '%s'%s%s%s", L->name, arg->name,
                          near ? "; did you mean '" : "", near ? near : "", near ? "'?" : ""))
                    diag_note(s->d, L->name_span, "'%s' defined here", L->name);
                bad = true;
                eval(s, c, arg->value);
                continue;
            }
        } else {
            while (pos < np && given[pos]) pos++;
            idx = pos;
            if (idx >= np) {
                const char *names = "";
                for (int i = 0; i < np; i++)
                    names = arena_printf(s->a, "%s%s%s", names, i ? ", " : "", L->params.items[i].name);
                if (error(s, arg->value->span, "layer '%s' takes %d argument%s (%s), got %d", L->name, np,
                          np == 1 ? "" : "s", names, e->args.len))
                    diag_note(s->d, L->name_span, "'%s' defined here", L->name);
                bad = true;
                eval(s, c, arg->value);
                continue;
            }
        }
        if (given[idx]) {
            error(s, arg->value->span, "layer '%s': argument '%s' given twice", L->name, L->params.items[idx].name);
            bad = true;
            continue;
        }
        given[idx] = true;
        argv[idx] = eval(s, c, arg->value);
        argsp[idx] = arg->value->span;
    }
    /* naming: the callee's component in the caller's naming scope */
    Count *cnt = NULL;
    for (Count *q = c->counts; q; q = q->next)
        if (strcmp(q->name, L->name) == 0) cnt = q;
    if (!cnt) {
        cnt = ARENA_NEW(s->a, Count);
        if (!cnt) return POISON;
        cnt->name = L->name;
        cnt->next = c->counts;
        c->counts = cnt;
    }
    const char *comp = cnt->n ? arena_printf(s->a, "%s_%d%s", L->name, cnt->n, c->rsuffix)
                              : arena_printf(s->a, "%s%s", L->name, c->rsuffix);
    cnt->n++;
    Ctx callee;
    memset(&callee, 0, sizeof callee);
    callee.scope = scope_of_file(s, L->file);
    if (callee.scope < 0) callee.scope = c->scope;
    callee.path = c->path[0] ? arena_printf(s->a, "%s.%s", c->path, comp) : comp;
    callee.rsuffix = "";
    callee.decl = L;
    callee.const_index = -1;
    for (int i = 0; i < np; i++) {
        const ParamDecl *pd = &L->params.items[i];
        Val v;
        Span sp = e->span;
        if (given[i]) {
            v = argv[i];
            sp = argsp[i];
        } else if (pd->default_value) {
            v = eval(s, &callee, pd->default_value);
            sp = pd->default_value->span;
        } else {
            if (!bad && error(s, e->span, "layer '%s': missing argument '%s'", L->name, pd->name))
                diag_note(s->d, pd->span, "'%s' declared here", pd->name);
            v = POISON;
        }
        bind_param(s, &callee, L, pd, v, sp);
    }
    s->stack[s->depth++] = L;
    bool returned = false;
    Val r = exec_body(s, &callee, &L->body, &returned);
    s->depth--;
    if (!returned) {
        if (!s->after_syntax_errors && !s->too_big) error(s, L->name_span, "layer '%s' has no return statement", L->name);
        return POISON;
    }
    return r;
}

static Val eval_call(Sema *s, Ctx *c, const Expr *e) {
    if (c->const_only) {
        error(s, e->span, "a constant cannot call '%s': only arithmetic on numbers is allowed here", e->str);
        return POISON;
    }
    const PrimInfo *p = prim_lookup(e->str);
    if (p) return eval_prim(s, c, p, e);
    const Decl *L = find_layer(s, c->scope, e->str);
    if (L) return call_layer(s, c, L, e);
    const char *cands[PRIM_COUNT + 256];
    int n = 0;
    for (int i = 0; i < PRIM_COUNT; i++) cands[n++] = prim_info((PrimId)i)->name;
    FileScope *f = &s->files[c->scope];
    for (int i = 0; i < f->nlayers && n < PRIM_COUNT + 256; i++) cands[n++] = f->layers[i]->name;
    for (int k = 0; k < f->nimports; k++) {
        FileScope *g = &s->files[f->imports[k]];
        for (int i = 0; i < g->nlayers && n < PRIM_COUNT + 256; i++) cands[n++] = g->layers[i]->name;
    }
    const char *near = diag_nearest(e->str, cands, n);
    if (near) error(s, e->name_span, "unknown layer or primitive '%s'; did you mean '%s'?", e->str, near);
    else error(s, e->name_span, "unknown layer or primitive '%s'", e->str);
    for (int k = 0; k < e->args.len; k++) eval(s, c, e->args.items[k].value);
    return POISON;
}

static Val eval_expr(Sema *s, Ctx *c, const Expr *e);

/* Evaluation recurses over the tree: bound its depth so that no source,
 * however deep its expressions, can exhaust the stack. */
static Val eval(Sema *s, Ctx *c, const Expr *e) {
    if (!e) return POISON;
    if (s->eval_depth >= SEMA_MAX_EXPR_DEPTH) {
        if (!s->too_deep) error(s, e->span, "expression nested too deeply (more than %d levels)", SEMA_MAX_EXPR_DEPTH);
        s->too_deep = true; /* once per outermost expression */
        return POISON;
    }
    s->eval_depth++;
    Val v = eval_expr(s, c, e);
    if (--s->eval_depth == 0) s->too_deep = false;
    return v;
}

static Val eval_expr(Sema *s, Ctx *c, const Expr *e) {
    switch (e->kind) {
    case EX_INT:
    case EX_FLOAT: return eval_literal(s, e);
    case EX_STR: {
        Val v = POISON;
        v.k = V_STR;
        v.s = e->str;
        v.slen = e->slen;
        return v;
    }
    case EX_NAME: return eval_name(s, c, e);
    case EX_UNARY: {
        Val v = eval(s, c, e->lhs);
        if (v.k == V_POISON) return POISON;
        if (e->op != '-') {
            error(s, e->span, "unknown unary operator '%c'", e->op);
            return POISON;
        }
        if (v.k == V_INT) {
            if (v.i == INT64_MIN) {
                error(s, e->span, "integer overflow in negation");
                return POISON;
            }
            Val r = vint(-v.i);
            r.unit = v.unit;
            return r;
        }
        if (v.k == V_FLOAT) {
            Val r = vfloat(-v.f);
            r.unit = v.unit;
            return r;
        }
        error(s, e->span, "cannot negate %s%s", vkind_name(v.k),
              v.k == V_TENSOR ? " (there is no negation primitive)" : "");
        return POISON;
    }
    case EX_BINARY: return eval_binary(s, c, e);
    case EX_CALL: return eval_call(s, c, e);
    case EX_LIST: {
        Val v = POISON;
        v.k = V_LIST;
        v.n = e->args.len;
        v.items = ARENA_NEWN(s->a, Val, v.n ? v.n : 1);
        if (!v.items) return POISON;
        bool bad = false;
        for (int i = 0; i < v.n; i++) {
            v.items[i] = eval(s, c, e->args.items[i].value);
            if (v.items[i].k == V_POISON) bad = true;
            else if (v.items[i].k == V_TENSOR || v.items[i].k == V_TUPLE || v.items[i].k == V_LIST) {
                error(s, e->args.items[i].value->span, "a list holds constants, not %s", vkind_name(v.items[i].k));
                bad = true;
            }
        }
        return bad ? POISON : v;
    }
    case EX_PARAM:
        if (c->const_only) error(s, e->span, "a constant cannot be a param");
        else if (error(s, e->span, "a param must be assigned to a name, which names it"))
            diag_hint(s->d, "w = param [D, D] init normal(0.02)");
        return POISON;
    }
    return POISON;
}

/* ---- params ---- */

/* Parameter names used so far: an open-addressing hash set (slots hold
 * names; cappnames is a power of two, kept at most half full). */
static bool pname_add(Sema *s, const char *name, Span sp) {
    if (2 * (s->npnames + 1) > s->cappnames) {
        int nc = s->cappnames ? s->cappnames * 2 : 512;
        const char **nn = ARENA_NEWN(s->a, const char *, nc);
        Span *ns = ARENA_NEWN(s->a, Span, nc);
        if (!nn || !ns) return false;
        for (int i = 0; i < s->cappnames; i++) {
            if (!s->pnames[i]) continue;
            uint64_t h = hash_str(s->pnames[i]) & (uint64_t)(nc - 1);
            while (nn[h]) h = (h + 1) & (uint64_t)(nc - 1);
            nn[h] = s->pnames[i];
            ns[h] = s->pspans[i];
        }
        s->pnames = nn;
        s->pspans = ns;
        s->cappnames = nc;
    }
    uint64_t mask = (uint64_t)(s->cappnames - 1), h = hash_str(name) & mask;
    for (; s->pnames[h]; h = (h + 1) & mask)
        if (strcmp(s->pnames[h], name) == 0) {
            if (error(s, sp, "parameter '%s' is defined twice", name))
                diag_note(s->d, s->pspans[h], "first defined here");
            return false;
        }
    s->pnames[h] = name;
    s->pspans[h] = sp;
    s->npnames++;
    return true;
}

static Val make_param(Sema *s, Ctx *c, const char *var, const Expr *e) {
    int64_t dims[GRAPH_MAX_RANK];
    bool bad = false;
    if (e->dims.len > GRAPH_MAX_RANK) {
        error(s, e->span, "a param has at most %d dimensions, this one has %d", GRAPH_MAX_RANK, e->dims.len);
        return POISON;
    }
    int64_t numel = 1;
    for (int i = 0; i < e->dims.len; i++) {
        Val v = eval(s, c, e->dims.items[i]);
        if (v.k == V_POISON) {
            bad = true;
            continue;
        }
        if (v.k != V_INT || v.i <= 0) {
            if (v.k == V_INT) error(s, e->dims.items[i]->span, "a dimension must be positive, got %" PRId64, v.i);
            else error(s, e->dims.items[i]->span, "a dimension must be an integer, got %s", vkind_name(v.k));
            bad = true;
            continue;
        }
        dims[i] = v.i;
        if (!bad && __builtin_mul_overflow(numel, v.i, &numel)) {
            error(s, e->span, "the param's element count overflows 64 bits");
            bad = true;
        }
    }
    double std = 0;
    switch (e->init) {
    case INIT_NORMAL:
    case INIT_UNIFORM: {
        const char *what = e->init == INIT_NORMAL ? "normal" : "uniform";
        if (e->args.len != 1) {
            error(s, e->init_span, "%s takes one argument (the %s), got %d", what,
                  e->init == INIT_NORMAL ? "standard deviation" : "half-width", e->args.len);
            bad = true;
            break;
        }
        const Arg *a = &e->args.items[0];
        if (a->name && strcmp(a->name, e->init == INIT_NORMAL ? "std" : "a") != 0) {
            error(s, a->name_span, "%s has no argument '%s'", what, a->name);
            bad = true;
            break;
        }
        Val v = eval(s, c, a->value);
        if (v.k == V_POISON) {
            bad = true;
            break;
        }
        if (!is_num(&v) || v.f < 0) {
            error(s, a->value->span, "%s needs a non-negative number, got %s", what, vkind_name(v.k));
            bad = true;
            break;
        }
        std = v.f;
        break;
    }
    case INIT_ZEROS:
    case INIT_ONES:
        if (e->args.len) {
            error(s, e->init_span, "%s takes no arguments", e->init == INIT_ZEROS ? "zeros" : "ones");
            bad = true;
        }
        break;
    default:
        error(s, e->span, "a param needs an init: normal(std), uniform(a), zeros or ones");
        bad = true;
    }
    if (bad) return POISON;
    const char *comp = arena_printf(s->a, "%s%s", var, c->rsuffix);
    const char *name = c->path[0] ? arena_printf(s->a, "%s.%s", c->path, comp) : comp;
    if (!pname_add(s, name, e->span)) return POISON;
    DType dt = e->dtype != DT_NONE ? e->dtype : s->train.dtype;
    if (!room(s, e->span)) return POISON;
    int id = graph_add_tensor(s->g, name, dt, e->dims.len, dims, TC_PARAM);
    if (id < 0) return POISON;
    GTensor *t = &s->g->tensors[id];
    t->init = e->init;
    t->init_std = std;
    t->span = e->span;
    t->segment = s->segment;
    return vtensor(id);
}

/* ---- statements ---- */

static bool assignable(Sema *s, Ctx *c, const char *name, Span sp) {
    if (reserved_name(name)) {
        error(s, sp, "'%s' is reserved%s and cannot be assigned", name,
              strcmp(name, "B") == 0 ? " (the micro-batch)" : "");
        return false;
    }
    Binding *b = find_binding(c->env, name);
    if (b && b->is_index) {
        error(s, sp, "'%s' is the repeat index and cannot be assigned", name);
        return false;
    }
    if (!b) {
        bool found = false;
        FileScope *f = &s->files[c->scope];
        int idx;
        ConstEntry *ce = find_const_in(f, name, &idx);
        for (int k = 0; !ce && k < f->nimports; k++) ce = find_const_in(&s->files[f->imports[k]], name, &idx);
        found = ce != NULL;
        if (found) {
            if (error(s, sp, "'%s' is a constant and cannot be assigned", name))
                diag_note(s->d, ce->decl->name_span, "'%s' defined here", name);
            return false;
        }
    }
    return true;
}

static void exec_assign(Sema *s, Ctx *c, const Stmt *st) {
    const NameList *tg = &st->targets;
    if (st->value && st->value->kind == EX_PARAM) {
        if (tg->len != 1) {
            error(s, st->span, "a param is one tensor; assign it to one name");
            return;
        }
        if (!assignable(s, c, tg->items[0], tg->spans[0])) return;
        Val v = make_param(s, c, tg->items[0], st->value);
        bind(s, c, tg->items[0], v, st->value->span);
        return;
    }
    Val v = eval(s, c, st->value);
    if (tg->len == 1) {
        if (assignable(s, c, tg->items[0], tg->spans[0])) bind(s, c, tg->items[0], v, st->value->span);
        return;
    }
    bool ok = true;
    if (v.k != V_POISON && (v.k != V_TUPLE || v.n != tg->len)) {
        if (v.k == V_TUPLE)
            error(s, st->span, "cannot destructure a tuple of %d into %d names", v.n, tg->len);
        else
            error(s, st->span, "cannot destructure %s into %d names: it is not a tuple", vkind_name(v.k), tg->len);
        ok = false;
    }
    for (int i = 0; i < tg->len; i++) {
        if (!assignable(s, c, tg->items[i], tg->spans[i])) continue;
        bind(s, c, tg->items[i], ok && v.k == V_TUPLE ? v.items[i] : POISON, st->value->span);
    }
}

static void copy_counts(Sema *s, Count **dst, const Count *src) {
    *dst = NULL;
    for (const Count *q = src; q; q = q->next) {
        Count *n = ARENA_NEW(s->a, Count);
        if (!n) return;
        *n = *q;
        n->next = *dst;
        *dst = n;
    }
}

static void exec_stmts(Sema *s, Ctx *c, const StmtList *body, bool *returned, Val *ret);

static void exec_repeat(Sema *s, Ctx *c, const Stmt *st, bool *returned, Val *ret) {
    Val cv = eval(s, c, st->count);
    int64_t n = 1;
    bool poison = false;
    if (cv.k == V_POISON) {
        poison = true;
    } else if (cv.k != V_INT || cv.i < 1 || cv.i > SEMA_MAX_REPEAT) {
        if (cv.k == V_FLOAT)
            error(s, st->count->span, "a repeat count must be a positive integer constant, got %g", cv.f);
        else if (cv.k != V_INT)
            error(s, st->count->span, "a repeat count must be a positive integer constant, got %s", vkind_name(cv.k));
        else if (cv.i < 1)
            error(s, st->count->span, "a repeat count must be a positive integer, got %" PRId64, cv.i);
        else
            error(s, st->count->span, "repeat count %" PRId64 " is too large (at most %d)", cv.i, SEMA_MAX_REPEAT);
        poison = true;
    } else {
        n = cv.i;
    }
    if (st->index && (reserved_name(st->index) || !assignable(s, c, st->index, st->index_span))) {
        if (reserved_name(st->index)) error(s, st->index_span, "'%s' is reserved and cannot be a repeat index", st->index);
        poison = true;
    }
    bool owns = s->segment < 0 && !poison;
    Count *before = c->counts, *after = before; /* unchanged if no iteration runs (past the step limit) */
    const char *rs = c->rsuffix;
    c->in_repeat++;
    for (int64_t i = 0; i < n && step(s, st->span); i++) {
        copy_counts(s, &c->counts, before);
        c->rsuffix = arena_printf(s->a, "%s.%" PRId64, rs, i);
        if (owns) s->segment = s->g->nsegments++;
        Binding *ib = NULL;
        if (st->index) {
            Binding *old = find_binding(c->env, st->index);
            if (old && !old->is_index) {
                /* shadowing a local: keep it simple, refuse */
                if (error(s, st->index_span, "repeat index '%s' hides a variable of the same name", st->index))
                    diag_note(s->d, old->def, "'%s' bound here", st->index);
            }
            ib = ARENA_NEW(s->a, Binding);
            if (ib) {
                ib->name = st->index;
                ib->v = poison ? POISON : vint(i);
                ib->def = st->index_span;
                ib->is_index = true;
                ib->next = c->env;
                c->env = ib;
            }
        }
        exec_stmts(s, c, &st->body, returned, ret);
        if (ib) unbind(c, ib);
        if (owns) s->segment = -1;
        after = c->counts;
        if (s->d->truncated || s->too_big) break;
    }
    c->in_repeat--;
    c->counts = after;
    c->rsuffix = rs;
}

/* if C { ... } else { ... }: C is a constant true or false; only the branch
 * taken runs (and so is checked); what it assigns stays visible after. */
static void exec_if(Sema *s, Ctx *c, const Stmt *st, bool *returned, Val *ret) {
    Val cv = eval(s, c, st->count);
    if (cv.k == V_POISON) return;
    if (cv.k != V_BOOL) {
        if (error(s, st->count->span, "an if condition must be true or false, got %s", vkind_name(cv.k)))
            diag_hint(s->d, "conditions are constants: a layer parameter such as qkv_bias = false, or true/false");
        return;
    }
    c->in_if++;
    exec_stmts(s, c, cv.i ? &st->body : &st->else_body, returned, ret);
    c->in_if--;
}

static void exec_stmts(Sema *s, Ctx *c, const StmtList *body, bool *returned, Val *ret) {
    for (int k = 0; k < body->len; k++) {
        const Stmt *st = body->items[k];
        if (!st || ((st->kind == ST_ASSIGN || st->kind == ST_LOSS) && !st->value) ||
            ((st->kind == ST_REPEAT || st->kind == ST_IF) && !st->count))
            continue; /* only after a syntax error or out of memory, already reported */
        if (*returned) {
            error(s, st->span, "statement after return");
            return;
        }
        step(s, st->span); /* counted; what runs after the limit makes no tensors and expands nothing */
        switch (st->kind) {
        case ST_ASSIGN: exec_assign(s, c, st); break;
        case ST_REPEAT: exec_repeat(s, c, st, returned, ret); break;
        case ST_IF: exec_if(s, c, st, returned, ret); break;
        case ST_RETURN: {
            if (c->is_model) {
                if (error(s, st->span, "a model does not return; it ends with a loss statement"))
                    diag_hint(s->d, "loss cross_entropy(logits, targets)");
                break;
            }
            if (c->in_repeat) {
                error(s, st->span, "return inside repeat: a layer returns once, after its repeats");
                break;
            }
            if (c->in_if) {
                if (error(s, st->span, "return inside if: a layer returns once, at its end"))
                    diag_hint(s->d, "assign the value in each branch, then return it after the if");
                break;
            }
            Val v;
            if (st->values.len == 1) {
                v = eval(s, c, st->values.items[0]);
            } else {
                v = POISON;
                v.k = V_TUPLE;
                v.n = st->values.len;
                v.items = ARENA_NEWN(s->a, Val, v.n ? v.n : 1);
                if (!v.items) return;
                for (int i = 0; i < v.n; i++) {
                    v.items[i] = eval(s, c, st->values.items[i]);
                    if (v.items[i].k == V_POISON) v.k = V_POISON;
                }
                if (v.k == V_POISON) v = POISON;
            }
            *ret = v;
            *returned = true;
            break;
        }
        case ST_LOSS: {
            if (!c->is_model) {
                error(s, st->span, "loss belongs in the model body, not in a layer");
                eval(s, c, st->value);
                break;
            }
            if (c->in_repeat) {
                error(s, st->span, "loss inside repeat: a model has one loss");
                break;
            }
            Val v = eval(s, c, st->value);
            if (s->g->loss >= 0 || s->g->loss == -2) {
                error(s, st->span, "a model has one loss statement; this is a second one");
                break;
            }
            if (v.k == V_POISON) {
                s->g->loss = -2; /* there was one, erroneous */
                break;
            }
            if (v.k != V_TENSOR || s->g->tensors[v.t].rank != 0) {
                if (v.k == V_TENSOR)
                    error(s, st->value->span, "the loss must be a scalar (cross_entropy gives one), but it is %s",
                          shape_of(s, v.t));
                else
                    error(s, st->value->span, "the loss must be a scalar tensor, got %s", vkind_name(v.k));
                s->g->loss = -2;
                break;
            }
            s->g->loss = v.t;
            break;
        }
        }
    }
}

static Val exec_body(Sema *s, Ctx *c, const StmtList *body, bool *returned) {
    Val ret = POISON;
    *returned = false;
    exec_stmts(s, c, body, returned, &ret);
    return ret;
}

/* ---- constants and the train block ---- */

static Val eval_const_entry(Sema *s, int sc, int idx) {
    ConstEntry *ce = &s->files[sc].consts[idx];
    if (ce->state == 2) return ce->v;
    if (ce->state == 1) {
        if (error(s, ce->decl->name_span, "constant '%s' depends on itself", ce->decl->name))
            diag_note(s->d, ce->decl->name_span, "'%s' defined here", ce->decl->name);
        return POISON;
    }
    ce->state = 1;
    Ctx c;
    memset(&c, 0, sizeof c);
    c.scope = sc;
    c.path = "";
    c.rsuffix = "";
    c.const_only = true;
    c.const_index = idx;
    Val v = eval(s, &c, ce->decl->value);
    if (v.k == V_TENSOR || v.k == V_TUPLE) {
        error(s, ce->decl->value->span, "a constant must be a number, string or list");
        v = POISON;
    }
    ce->v = v;
    ce->state = 2;
    return v;
}

static Ctx const_ctx(int scope) {
    Ctx c;
    memset(&c, 0, sizeof c);
    c.scope = scope;
    c.path = "";
    c.rsuffix = "";
    c.const_only = true;
    c.const_index = -1;
    return c;
}

static const char *const train_keys[] = {
    "micro_batch", "steps", "dtype", "seed", "optimizer", "lr", "warmup", "warmup_steps", "min_lr", "schedule",
    "grad_clip", "loss_scale", "checkpoint", "checkpoint_every", "grad_accum", "beta1", "beta2", "eps",
    "weight_decay",
};
enum { NTRAIN_KEYS = sizeof train_keys / sizeof train_keys[0] };

static const Setting *train_setting(const Sema *s, const char *key) {
    if (!s->train_decl) return NULL;
    for (int i = 0; i < s->train_decl->settings.len; i++)
        if (strcmp(s->train_decl->settings.items[i]->key, key) == 0) return s->train_decl->settings.items[i];
    return NULL;
}

static int64_t micro_batch(Sema *s) {
    if (s->mb_state == 2) return s->train.micro_batch;
    if (s->mb_state == 1) return -1; /* reported where it is read */
    s->mb_state = 1;
    const Setting *st = train_setting(s, "micro_batch");
    s->train.micro_batch = 1;
    if (st && st->value) {
        Ctx c = const_ctx(s->train_scope);
        /* B inside micro_batch itself is a cycle */
        Val v = eval(s, &c, st->value);
        if (v.k == V_INT && v.i >= 1) s->train.micro_batch = v.i;
        else if (v.k != V_POISON) error(s, st->value->span, "micro_batch must be a positive integer");
        else s->train.micro_batch = -1;
    }
    s->mb_state = 2;
    return s->train.micro_batch;
}

static bool setting_int(Sema *s, const Setting *st, int64_t lo, int64_t *out) {
    Ctx c = const_ctx(s->train_scope);
    Val v = eval(s, &c, st->value);
    if (v.k == V_POISON) return false;
    if (v.k != V_INT || v.i < lo) {
        error(s, st->value->span, "%s must be an integer >= %" PRId64 ", got %s", st->key, lo,
              v.k == V_INT ? arena_printf(s->a, "%" PRId64, v.i) : vkind_name(v.k));
        return false;
    }
    *out = v.i;
    return true;
}

static bool num_ok(Sema *s, const char *key, Val v, Span sp, double lo, bool lo_open, double *out) {
    if (v.k == V_POISON) return false;
    if (!is_num(&v) || (lo_open ? !(v.f > lo) : !(v.f >= lo))) {
        error(s, sp, "%s must be a number %s %g, got %s", key, lo_open ? ">" : ">=", lo,
              is_num(&v) ? arena_printf(s->a, "%g", v.f) : vkind_name(v.k));
        return false;
    }
    *out = v.f;
    return true;
}

static bool setting_num(Sema *s, const Setting *st, double lo, bool lo_open, double *out) {
    Ctx c = const_ctx(s->train_scope);
    return num_ok(s, st->key, eval(s, &c, st->value), st->value->span, lo, lo_open, out);
}

/* A bare name or a string. */
static const char *setting_word(const Setting *st) {
    if (st->value->kind == EX_NAME || st->value->kind == EX_STR) return st->value->str;
    return NULL;
}

static void read_adam(Sema *s, const Expr *e, TrainConfig *t) {
    static const char *const keys[] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    double *slots[] = {&t->lr, &t->beta1, &t->beta2, &t->eps, &t->weight_decay};
    bool set[5] = {0};
    int pos = 0;
    for (int k = 0; k < e->args.len; k++) {
        const Arg *a = &e->args.items[k];
        int idx = -1;
        if (a->name) {
            for (int i = 0; i < 5; i++)
                if (strcmp(keys[i], a->name) == 0) idx = i;
            if (idx < 0) {
                const char *near = diag_nearest(a->name, keys, 5);
                if (near) error(s, a->name_span, "adam has no argument '%s'; did you mean '%s'?", a->name, near);
                else error(s, a->name_span, "adam has no argument '%s' (it has lr, beta1, beta2, eps, weight_decay)",
                           a->name);
                continue;
            }
        } else {
            idx = pos++;
            if (idx >= 5) {
                error(s, a->value->span, "adam takes at most 5 arguments (lr, beta1, beta2, eps, weight_decay)");
                continue;
            }
        }
        if (set[idx]) {
            error(s, a->value->span, "adam: '%s' given twice", keys[idx]);
            continue;
        }
        set[idx] = true;
        Ctx c = const_ctx(s->train_scope);
        Val v = eval(s, &c, a->value);
        double x;
        if (num_ok(s, keys[idx], v, a->value->span, 0, idx == 0 || idx == 3, &x)) {
            if ((idx == 1 || idx == 2) && x >= 1) {
                error(s, a->value->span, "%s must be below 1, got %g", keys[idx], x);
                continue;
            }
            *slots[idx] = x;
        }
    }
}

static void read_train(Sema *s) {
    TrainConfig *t = &s->train;
    t->steps = 1000;
    t->dtype = DT_F32;
    t->seed = 1234;
    t->lr = 3e-4;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->eps = 1e-8;
    t->weight_decay = 0.0;
    t->warmup_steps = 0;
    t->min_lr = -1;
    t->cosine = false;
    t->grad_clip = 1.0;
    t->loss_scale = -1;
    t->checkpoint_every = 1;
    t->grad_accum = 1;
    bool schedule_set = false;
    if (!s->train_decl) {
        micro_batch(s);
        t->min_lr = t->lr;
        t->loss_scale = 1;
        return;
    }
    const SettingList *l = &s->train_decl->settings;
    /* dtype first: it decides the loss-scale default */
    for (int i = 0; i < l->len; i++) {
        const Setting *st = l->items[i];
        for (int j = 0; j < i; j++)
            if (strcmp(l->items[j]->key, st->key) == 0) {
                if (error(s, st->span, "train setting '%s' given twice", st->key))
                    diag_note(s->d, l->items[j]->span, "first given here");
            }
        if (st->is_block || !st->value) {
            error(s, st->span, "train settings are key = value; '%s' is a block", st->key);
            continue;
        }
        const char *k = st->key;
        int64_t iv;
        double fv;
        if (strcmp(k, "micro_batch") == 0) {
            micro_batch(s);
        } else if (strcmp(k, "steps") == 0) {
            if (setting_int(s, st, 1, &iv)) t->steps = iv;
        } else if (strcmp(k, "seed") == 0) {
            if (setting_int(s, st, 0, &iv)) t->seed = (uint64_t)iv;
        } else if (strcmp(k, "warmup") == 0 || strcmp(k, "warmup_steps") == 0) {
            if (setting_int(s, st, 0, &iv)) t->warmup_steps = iv;
        } else if (strcmp(k, "grad_accum") == 0) {
            if (setting_int(s, st, 1, &iv)) {
                if (iv > PLAN_MAX_ACCUM)
                    error(s, st->value->span, "grad_accum must be at most %d (micro-batches per step the runtime holds), got %" PRId64,
                          PLAN_MAX_ACCUM, iv);
                else t->grad_accum = iv;
            }
        } else if (strcmp(k, "checkpoint_every") == 0) {
            if (setting_int(s, st, 0, &iv)) t->checkpoint_every = iv;
        } else if (strcmp(k, "dtype") == 0) {
            const char *w = setting_word(st);
            if (w && strcmp(w, "f32") == 0) t->dtype = DT_F32;
            else if (w && strcmp(w, "bf16") == 0) t->dtype = DT_BF16;
            else if (w && strcmp(w, "f16") == 0) t->dtype = DT_F16;
            else error(s, st->value->span, "dtype must be f32, bf16 or f16");
        } else if (strcmp(k, "optimizer") == 0) {
            const Expr *e = st->value;
            if (e->kind == EX_CALL && (strcmp(e->str, "adam") == 0 || strcmp(e->str, "adamw") == 0)) read_adam(s, e, t);
            else if (e->kind == EX_NAME && (strcmp(e->str, "adam") == 0 || strcmp(e->str, "adamw") == 0)) {
            } else error(s, e->span, "optimizer must be adam(lr = ..., beta1 = ..., beta2 = ..., eps = ..., weight_decay = ...)");
        } else if (strcmp(k, "lr") == 0) {
            if (setting_num(s, st, 0, true, &fv)) t->lr = fv;
        } else if (strcmp(k, "beta1") == 0 || strcmp(k, "beta2") == 0) {
            if (setting_num(s, st, 0, false, &fv)) {
                if (fv >= 1) error(s, st->value->span, "%s must be below 1, got %g", k, fv);
                else *(k[4] == '1' ? &t->beta1 : &t->beta2) = fv;
            }
        } else if (strcmp(k, "eps") == 0) {
            if (setting_num(s, st, 0, true, &fv)) t->eps = fv;
        } else if (strcmp(k, "weight_decay") == 0) {
            if (setting_num(s, st, 0, false, &fv)) t->weight_decay = fv;
        } else if (strcmp(k, "min_lr") == 0) {
            if (setting_num(s, st, 0, false, &fv)) {
                t->min_lr = fv;
                if (!schedule_set) t->cosine = true;
            }
        } else if (strcmp(k, "schedule") == 0) {
            const char *w = setting_word(st);
            if (w && strcmp(w, "cosine") == 0) t->cosine = true;
            else if (w && strcmp(w, "constant") == 0) t->cosine = false;
            else error(s, st->value->span, "schedule must be cosine or constant");
            schedule_set = true;
        } else if (strcmp(k, "grad_clip") == 0) {
            if (setting_num(s, st, 0, false, &fv)) t->grad_clip = fv;
        } else if (strcmp(k, "loss_scale") == 0) {
            if (setting_num(s, st, 0, true, &fv)) t->loss_scale = fv;
        } else if (strcmp(k, "checkpoint") == 0) {
            const Expr *e = st->value;
            const char *w = setting_word(st);
            if (w && (strcmp(w, "layer") == 0 || strcmp(w, "layers") == 0)) t->checkpoint_every = 1;
            else if (w && strcmp(w, "none") == 0) t->checkpoint_every = 0;
            else if (e->kind == EX_CALL && strcmp(e->str, "every") == 0 && e->args.len == 1) {
                Ctx c = const_ctx(s->train_scope);
                Val v = eval(s, &c, e->args.items[0].value);
                if (v.k == V_INT && v.i >= 1) t->checkpoint_every = v.i;
                else if (v.k != V_POISON) error(s, e->span, "checkpoint every(N) needs a positive integer N");
            } else if (e->kind == EX_INT || e->kind == EX_NAME || e->kind == EX_BINARY) {
                if (setting_int(s, st, 0, &iv)) t->checkpoint_every = iv;
            } else {
                error(s, e->span, "checkpoint must be \"layer\", \"none\", every(N) or a number N of layers");
            }
        } else {
            const char *near = diag_nearest(k, train_keys, NTRAIN_KEYS);
            if (near) error(s, st->span, "unknown train setting '%s'; did you mean '%s'?", k, near);
            else if (error(s, st->span, "unknown train setting '%s'", k)) {
                const char *all = "";
                for (int j = 0; j < NTRAIN_KEYS; j++) all = arena_printf(s->a, "%s%s%s", all, j ? ", " : "", train_keys[j]);
                diag_hint(s->d, "valid settings: %s", all);
            }
        }
    }
    micro_batch(s);
    if (t->min_lr < 0) t->min_lr = t->cosine ? t->lr * 0.1 : t->lr;
    if (t->loss_scale < 0) t->loss_scale = t->dtype == DT_F16 ? 65536.0 : 1.0;
}

/* ---- setup ---- */

/* Which Program file an import string names: nn -> .../nn.zl */
static int resolve_import(const Sema *s, const char *name) {
    size_t n = strlen(name);
    const char *want = n > 3 && strcmp(name + n - 3, ".zl") == 0 ? name : NULL;
    char buf[512];
    if (!want) {
        snprintf(buf, sizeof buf, "%s.zl", name);
        want = buf;
    }
    size_t wl = strlen(want);
    for (int i = 1; i < s->nfiles; i++) {
        const char *p = s->src->files[s->files[i].file].path;
        size_t pl = strlen(p);
        if (pl >= wl && strcmp(p + pl - wl, want) == 0 && (pl == wl || p[pl - wl - 1] == '/')) return i;
    }
    /* the path as written relative to somewhere: match the base name */
    const char *b = strrchr(want, '/');
    if (b) {
        for (int i = 1; i < s->nfiles; i++)
            if (strcmp(file_base(s, s->files[i].file), b + 1) == 0) return i;
    }
    return -1;
}

static void build_scopes(Sema *s) {
    for (int fi = 0; fi < s->nfiles; fi++) {
        FileScope *f = &s->files[fi];
        const DeclList *dl = &f->ast->decls;
        f->consts = ARENA_NEWN(s->a, ConstEntry, dl->len ? dl->len : 1);
        f->layers = ARENA_NEWN(s->a, const Decl *, dl->len ? dl->len : 1);
        f->imports = ARENA_NEWN(s->a, int, dl->len ? dl->len : 1);
        if (!f->consts || !f->layers || !f->imports) return;
        for (int k = 0; k < dl->len; k++) {
            const Decl *d = dl->items[k];
            if (d->kind == DL_IMPORT) {
                if (!d->name) continue;
                int imp = resolve_import(s, d->name);
                if (imp >= 0 && imp != fi) {
                    bool dup = false;
                    for (int j = 0; j < f->nimports; j++) dup |= f->imports[j] == imp;
                    if (!dup) f->imports[f->nimports++] = imp;
                }
                continue;
            }
            if (d->kind != DL_CONST && d->kind != DL_LAYER) continue;
            if (!d->name) continue;
            if (reserved_name(d->name)) {
                error(s, d->name_span, "'%s' is reserved%s and cannot be defined", d->name,
                      strcmp(d->name, "B") == 0 ? " (the micro-batch, from train { micro_batch })" : "");
                continue;
            }
            if (d->kind == DL_LAYER && prim_lookup(d->name)) {
                error(s, d->name_span, "'%s' is a primitive; a layer cannot have its name", d->name);
                continue;
            }
            const Decl *prev = NULL;
            ConstEntry *ce = find_const_in(f, d->name, NULL);
            if (ce) prev = ce->decl;
            if (!prev) prev = find_layer_in(f, d->name);
            if (prev) {
                if (error(s, d->name_span, "'%s' is defined twice", d->name))
                    diag_note(s->d, prev->name_span, "first defined here");
                continue;
            }
            if (d->kind == DL_CONST) f->consts[f->nconsts++] = (ConstEntry){d, POISON, 0};
            else {
                f->layers[f->nlayers++] = d;
                for (int i = 0; i < d->params.len; i++) {
                    const ParamDecl *pi = &d->params.items[i];
                    if (reserved_name(pi->name)) error(s, pi->span, "'%s' is reserved and cannot be a parameter name", pi->name);
                    for (int j = 0; j < i; j++)
                        if (strcmp(d->params.items[j].name, pi->name) == 0 &&
                            error(s, pi->span, "layer '%s' has two parameters named '%s'", d->name, pi->name))
                            diag_note(s->d, d->params.items[j].span, "first declared here");
                }
            }
        }
    }
    /* names brought in by imports must not clash */
    for (int fi = 0; fi < s->nfiles; fi++) {
        FileScope *f = &s->files[fi];
        for (int k = 0; k < f->nimports; k++) {
            FileScope *g = &s->files[f->imports[k]];
            for (int pass = 0; pass < 2; pass++) {
                int n = pass ? g->nlayers : g->nconsts;
                for (int i = 0; i < n; i++) {
                    const Decl *d = pass ? g->layers[i] : g->consts[i].decl;
                    const Decl *own = find_layer_in(f, d->name);
                    ConstEntry *ce = find_const_in(f, d->name, NULL);
                    if (ce) own = ce->decl;
                    if (own) {
                        if (error(s, own->name_span, "'%s' is already defined in imported file %s", d->name,
                                  file_base(s, g->file)))
                            diag_note(s->d, d->name_span, "'%s' defined here", d->name);
                        continue;
                    }
                    for (int j = 0; j < k; j++) {
                        FileScope *h = &s->files[f->imports[j]];
                        const Decl *o = find_layer_in(h, d->name);
                        ConstEntry *he = find_const_in(h, d->name, NULL);
                        if (he) o = he->decl;
                        if (o && o != d) {
                            if (error(s, d->name_span, "'%s' is defined in both %s and %s, which %s imports", d->name,
                                      file_base(s, h->file), file_base(s, g->file), file_base(s, f->file)))
                                diag_note(s->d, o->name_span, "'%s' defined here", d->name);
                        }
                    }
                }
            }
        }
    }
}

Sema *sema_new(Arena *a, const Program *prog, const SourceSet *src, DiagSink *d) {
    Sema *s = ARENA_NEW(a, Sema);
    if (!s) return NULL;
    s->a = a;
    s->prog = prog;
    s->src = src;
    s->d = d;
    s->segment = -1;
    s->train_scope = 0;
    s->after_syntax_errors = d->errors > 0;
    s->nfiles = prog->nfiles;
    s->files = ARENA_NEWN(a, FileScope, prog->nfiles ? prog->nfiles : 1);
    if (!s->files) return NULL;
    for (int i = 0; i < prog->nfiles; i++) {
        s->files[i].ast = prog->files[i];
        s->files[i].file = prog->files[i]->file;
    }
    build_scopes(s);
    /* the train block: one per program */
    for (int fi = 0; fi < s->nfiles; fi++) {
        const DeclList *dl = &s->files[fi].ast->decls;
        for (int k = 0; k < dl->len; k++) {
            const Decl *dd = dl->items[k];
            if (dd->kind != DL_TRAIN) continue;
            if (s->train_decl) {
                if (error(s, dd->span, "a program has one train block; this is a second one"))
                    diag_note(s->d, s->train_decl->span, "the first is here");
                continue;
            }
            s->train_decl = dd;
            s->train_scope = fi;
        }
    }
    /* imported files' constants first, then the main file's, then train:
     * diagnostics come out roughly in source order */
    for (int fi = s->nfiles - 1; fi >= 0; fi--)
        for (int i = 0; i < s->files[fi].nconsts; i++) eval_const_entry(s, fi, i);
    read_train(s);
    return a->failed ? NULL : s;
}

const TrainConfig *sema_train(const Sema *s) { return &s->train; }

bool sema_check(Sema *s, Graph *g) {
    int errors0 = s->d->errors;
    graph_init(g, s->a);
    s->g = g;
    g->train = s->train;
    const Decl *model = NULL;
    int model_scope = 0;
    for (int fi = 0; fi < s->nfiles; fi++) {
        const DeclList *dl = &s->files[fi].ast->decls;
        for (int k = 0; k < dl->len; k++) {
            const Decl *d = dl->items[k];
            if (d->kind != DL_MODEL) continue;
            if (model) {
                if (error(s, d->name_span, "a program has exactly one model; '%s' is a second one", d->name))
                    diag_note(s->d, model->name_span, "model '%s' is defined here", model->name);
                continue;
            }
            model = d;
            model_scope = fi;
        }
    }
    if (!model) {
        if (s->after_syntax_errors) return false; /* most likely lost to a syntax error */
        Span sp = {s->nfiles ? s->files[0].file : -1, 0, 0};
        if (error(s, sp, "no model in this program"))
            diag_hint(s->d, "declare one: model NAME(tokens: i32[B, T], targets: i32[B, T]) { ... loss ... }");
        return false;
    }
    g->model_name = model->name;
    Ctx c;
    memset(&c, 0, sizeof c);
    c.scope = model_scope;
    c.path = "";
    c.rsuffix = "";
    c.decl = model;
    c.is_model = true;
    c.const_index = -1;
    for (int i = 0; i < model->params.len; i++) {
        const ParamDecl *pd = &model->params.items[i];
        for (int j = 0; j < i; j++)
            if (strcmp(model->params.items[j].name, pd->name) == 0 &&
                error(s, pd->span, "model '%s' has two inputs named '%s'", model->name, pd->name))
                diag_note(s->d, model->params.items[j].span, "first declared here");
        if (reserved_name(pd->name)) {
            error(s, pd->span, "'%s' is reserved and cannot be an input name", pd->name);
            continue;
        }
        if (pd->default_value) error(s, pd->default_value->span, "model inputs have no default values");
        if (!pd->type.present) {
            if (error(s, pd->span, "model input '%s' needs a type", pd->name))
                diag_hint(s->d, "%s: i32[B, T]", pd->name);
            bind(s, &c, pd->name, POISON, pd->span);
            continue;
        }
        if (pd->type.dims.len > GRAPH_MAX_RANK) {
            error(s, pd->type.span, "an input has at most %d dimensions", GRAPH_MAX_RANK);
            bind(s, &c, pd->name, POISON, pd->span);
            continue;
        }
        int64_t dims[GRAPH_MAX_RANK];
        bool bad = false;
        for (int j = 0; j < pd->type.dims.len; j++) {
            const Expr *de = pd->type.dims.items[j];
            Val v = eval(s, &c, de);
            if (v.k == V_POISON) bad = true;
            else if (v.k != V_INT || v.i <= 0) {
                error(s, de->span, "an input dimension must be a positive integer constant");
                bad = true;
            } else {
                dims[j] = v.i;
            }
        }
        if (g->ninputs >= 4) {
            error(s, pd->span, "a model has at most 4 inputs");
            bad = true;
        }
        int64_t numel = 1;
        for (int j = 0; !bad && j < pd->type.dims.len; j++)
            if (__builtin_mul_overflow(numel, dims[j], &numel)) {
                error(s, pd->type.span, "input '%s' has more than 2^63 elements", pd->name);
                bad = true;
            }
        if (bad) {
            bind(s, &c, pd->name, POISON, pd->span);
            continue;
        }
        DType dt = pd->type.dtype != DT_NONE ? pd->type.dtype : s->train.dtype;
        int id = graph_add_tensor(g, pd->name, dt, pd->type.dims.len, dims, TC_INPUT);
        if (id < 0) break;
        g->tensors[id].span = pd->span;
        g->inputs[g->ninputs++] = id;
        bind(s, &c, pd->name, vtensor(id), pd->span);
    }
    bool returned = false;
    exec_body(s, &c, &model->body, &returned);
    if (g->loss == -1 && !s->after_syntax_errors) {
        if (error(s, model->name_span, "model '%s' has no loss statement", model->name))
            diag_hint(s->d, "end the model with: loss cross_entropy(logits, targets)");
    }
    if (g->loss < 0) g->loss = -1;
    g->nforward = g->nops;
    g->nbackward_end = g->nops;
    /* the Hugging Face mapping names the parameters: only once they are all there */
    if (s->d->errors == errors0 && !s->a->failed) hfmap_build(s, s->prog, g, s->d);
    if (s->a->failed) {
        diag_error(s->d, SPAN_NONE, "out of memory");
        return false;
    }
    return s->d->errors == errors0;
}

bool sema_build(Arena *a, const Program *prog, const SourceSet *src, DiagSink *d, Graph *out) {
    int e0 = d->errors;
    Sema *s = sema_new(a, prog, src, d);
    if (!s) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    bool ok = sema_check(s, out);
    return ok && d->errors == e0;
}

/* ---- public constant evaluation ---- */

bool sema_eval(Sema *s, const Expr *e, SemaValue *out) {
    memset(out, 0, sizeof *out);
    Ctx c = const_ctx(0);
    Val v = eval(s, &c, e);
    switch (v.k) {
    case V_INT: out->kind = SV_INT; out->i = v.i; out->f = (double)v.i; break;
    case V_FLOAT: out->kind = SV_FLOAT; out->f = v.f; break;
    case V_STR: out->kind = SV_STR; out->s = v.s; out->slen = v.slen; break;
    case V_BOOL: out->kind = SV_BOOL; out->i = v.i; out->f = (double)v.i; break;
    case V_POISON: return false;
    default: error(s, e->span, "expected a single constant, got %s", vkind_name(v.k)); return false;
    }
    out->unit = v.unit;
    return true;
}

bool sema_eval_int(Sema *s, const Expr *e, int64_t *out) {
    SemaValue v;
    if (!sema_eval(s, e, &v)) return false;
    if (v.kind != SV_INT) {
        error(s, e->span, "expected an integer");
        return false;
    }
    *out = v.i;
    return true;
}

bool sema_eval_float(Sema *s, const Expr *e, double *out) {
    SemaValue v;
    if (!sema_eval(s, e, &v)) return false;
    if (v.kind != SV_INT && v.kind != SV_FLOAT) {
        error(s, e->span, "expected a number");
        return false;
    }
    *out = v.f;
    return true;
}

bool sema_eval_string(Sema *s, const Expr *e, const char **out) {
    SemaValue v;
    if (!sema_eval(s, e, &v)) return false;
    if (v.kind != SV_STR) {
        error(s, e->span, "expected a string");
        return false;
    }
    *out = v.s;
    return true;
}
