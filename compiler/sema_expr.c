/* sema_expr.c: expressions evaluated in a context: names (bindings, consts,
 * B), literals with their units folded, integer and float arithmetic checked
 * for overflow, tensor + and *, lists, and calls dispatched to a primitive or
 * a layer. */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include "sema_impl.h"

static Val eval_node(Sema *s, EvalCtx *c, const Expr *e);

/* Names a lookup could have meant, for did-you-mean. */
static const char *nearest_name(Sema *s, EvalCtx *c, const char *name) {
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

static Val eval_name(Sema *s, EvalCtx *c, const Expr *e) {
    const char *n = e->str;
    Binding *b = sema_find_binding(c->env, n);
    if (b) return b->v;
    if (strcmp(n, "true") == 0 || strcmp(n, "false") == 0) {
        Val v = vint(n[0] == 't');
        v.k = V_BOOL;
        return v;
    }
    if (strcmp(n, "B") == 0) {
        if (s->mb_state == 1) {
            sema_error(s, e->span, "B is the micro-batch: micro_batch cannot depend on it");
            return POISON;
        }
        int64_t mb = sema_micro_batch(s);
        return mb > 0 ? vint(mb) : POISON;
    }
    bool found;
    Val v = sema_lookup_const(s, c, n, e->span, &found);
    if (found) return v;
    if (sema_find_layer(s, c->scope, n) || prim_lookup(n)) {
        sema_error(s, e->span, "'%s' is a %s, not a value; call it: %s(...)", n,
                   prim_lookup(n) ? "primitive" : "layer", n);
        return POISON;
    }
    const char *near = nearest_name(s, c, n);
    if (near) sema_error(s, e->span, "unknown name '%s'; did you mean '%s'?", n, near);
    else sema_error(s, e->span, "unknown name '%s'", n);
    return POISON;
}

/* Folds a literal's unit into its value. */
static Val eval_literal(Sema *s, const Expr *e) {
    if (e->kind == EX_INT) {
        if (e->overflow) {
            sema_error(s, e->span, "integer literal does not fit in 64 bits");
            return POISON;
        }
        int64_t v = e->ival, r;
        uint64_t sc = e->unit.scale ? e->unit.scale : 1;
        if (sc > (uint64_t)INT64_MAX || __builtin_mul_overflow(v, (int64_t)sc, &r)) {
            sema_error(s, e->span, "%" PRId64 " with its unit (x %" PRIu64 ") overflows a 64-bit integer", v, sc);
            return POISON;
        }
        Val out = vint(r);
        out.unit = e->unit.kind;
        return out;
    }
    double sc = e->unit.scale ? (double)e->unit.scale : 1.0;
    Val out = vfloat(e->fval * sc);
    if (!isfinite(out.f)) {
        sema_error(s, e->span, "number is too large");
        return POISON;
    }
    out.unit = e->unit.kind;
    return out;
}

/* ---- operators ---- */

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

static Val eval_binary(Sema *s, EvalCtx *c, const Expr *e) {
    Val a = sema_eval_expr(s, c, e->lhs), b = sema_eval_expr(s, c, e->rhs);
    if (a.k == V_POISON || b.k == V_POISON) return POISON;
    int op = e->op;
    if (a.k == V_TENSOR && b.k == V_TENSOR) {
        if (op == '+' || op == '*') {
            PrimCall pc;
            memset(&pc, 0, sizeof pc);
            pc.prim = op == '+' ? PRIM_ADD : PRIM_MUL;
            Val tv[2] = {a, b};
            const Expr *te[2] = {e->lhs, e->rhs};
            return sema_emit_prim(s, c, prim_info(pc.prim), e, tv, te, 2, &pc);
        }
        sema_error(s, e->span, "tensors cannot be %s: the primitives are add (+) and mul (*)",
                   op == '-' ? "subtracted" : op == '/' ? "divided" : "combined with this operator");
        return POISON;
    }
    if (a.k == V_TENSOR || b.k == V_TENSOR) {
        sema_error(s, e->span, "cannot %s a tensor and %s: tensor arithmetic is between tensors (add, mul)", opname(op),
                   sema_vkind_name(a.k == V_TENSOR ? b.k : a.k));
        return POISON;
    }
    if (!is_num(&a) || !is_num(&b)) {
        sema_error(s, e->span, "cannot %s %s and %s", opname(op), sema_vkind_name(a.k), sema_vkind_name(b.k));
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
                sema_error(s, e->span, "%s by zero", op == '/' ? "division" : "remainder");
                return POISON;
            }
            if (a.i == INT64_MIN && b.i == -1) ovf = true;
            else r = op == '/' ? a.i / b.i : a.i % b.i;
            break;
        default: sema_error(s, e->span, "unknown operator '%c'", op); return POISON;
        }
        if (ovf) {
            sema_error(s, e->span, "integer overflow: %" PRId64 " %c %" PRId64 " does not fit in 64 bits", a.i, op,
                       b.i);
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
            sema_error(s, e->span, "division by zero");
            return POISON;
        }
        r = x / y;
        break;
    default: sema_error(s, e->span, "'%c' needs integer operands", op); return POISON;
    }
    if (!isfinite(r)) {
        sema_error(s, e->span, "arithmetic overflow: the result is not a finite number");
        return POISON;
    }
    Val v = vfloat(r);
    v.unit = u;
    return v;
}

/* ---- calls ---- */

static Val eval_call(Sema *s, EvalCtx *c, const Expr *e) {
    if (c->const_only) {
        sema_error(s, e->span, "a constant cannot call '%s': only arithmetic on numbers is allowed here", e->str);
        return POISON;
    }
    const PrimInfo *p = prim_lookup(e->str);
    if (p) return sema_call_prim(s, c, p, e);
    const Decl *L = sema_find_layer(s, c->scope, e->str);
    if (L) return sema_call_layer(s, c, L, e);
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
    if (near) sema_error(s, e->name_span, "unknown layer or primitive '%s'; did you mean '%s'?", e->str, near);
    else sema_error(s, e->name_span, "unknown layer or primitive '%s'", e->str);
    for (int k = 0; k < e->args.len; k++) sema_eval_expr(s, c, e->args.items[k].value);
    return POISON;
}

/* ---- the evaluator ---- */

/* Evaluation recurses over the tree: bound its depth so that no source,
 * however deep its expressions, can exhaust the stack. */
Val sema_eval_expr(Sema *s, EvalCtx *c, const Expr *e) {
    if (!e) return POISON;
    if (s->eval_depth >= SEMA_MAX_EXPR_DEPTH) {
        if (!s->too_deep) sema_error(s, e->span, "expression nested too deeply (more than %d levels)",
                                     SEMA_MAX_EXPR_DEPTH);
        s->too_deep = true; /* once per outermost expression */
        return POISON;
    }
    s->eval_depth++;
    Val v = eval_node(s, c, e);
    if (--s->eval_depth == 0) s->too_deep = false;
    return v;
}

static Val eval_node(Sema *s, EvalCtx *c, const Expr *e) {
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
        Val v = sema_eval_expr(s, c, e->lhs);
        if (v.k == V_POISON) return POISON;
        if (e->op != '-') {
            sema_error(s, e->span, "unknown unary operator '%c'", e->op);
            return POISON;
        }
        if (v.k == V_INT) {
            if (v.i == INT64_MIN) {
                sema_error(s, e->span, "integer overflow in negation");
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
        sema_error(s, e->span, "cannot negate %s%s", sema_vkind_name(v.k),
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
            v.items[i] = sema_eval_expr(s, c, e->args.items[i].value);
            if (v.items[i].k == V_POISON) bad = true;
            else if (v.items[i].k == V_TENSOR || v.items[i].k == V_TUPLE || v.items[i].k == V_LIST) {
                sema_error(s, e->args.items[i].value->span, "a list holds constants, not %s",
                           sema_vkind_name(v.items[i].k));
                bad = true;
            }
        }
        return bad ? POISON : v;
    }
    case EX_PARAM:
        if (c->const_only) sema_error(s, e->span, "a constant cannot be a param");
        else if (sema_error(s, e->span, "a param must be assigned to a name, which names it"))
            diag_hint(s->d, "w = param [D, D] init normal(0.02)");
        return POISON;
    }
    return POISON;
}
