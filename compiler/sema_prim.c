/* sema_prim.c: calls of primitives: arguments sorted into tensor inputs and
 * attributes (named, bare flags, positional constants), shapes inferred and
 * checked by compiler/prim.h, and the op and its output tensors added to the
 * graph, within the graph's limits (sema_room). */
#include <string.h>
#include "sema_impl.h"

/* ---- tensors ---- */

static int add_act(Sema *s, const PrimShape *sh, TensorClass cls, Span sp) {
    if (!sema_room(s, sp)) return -1;
    int id = graph_add_tensor(s->g, NULL, sh->dtype, sh->rank, sh->dims, cls);
    if (id < 0) return -1;
    s->g->tensors[id].name = arena_printf(s->a, "%%%d", id);
    s->g->tensors[id].span = sp;
    s->g->tensors[id].segment = s->segment;
    return id;
}

/* ---- ops ---- */

/* Notes under a shape error: where each blamed input got its shape. */
static void blame_notes(Sema *s, EvalCtx *c, const PrimInfo *p, unsigned blame, const Val *tin, const Expr *const *tin_e,
                        int nin) {
    for (int i = 0; i < nin; i++) {
        if (!(blame >> i & 1) || !tin_e[i] || tin[i].k != V_TENSOR) continue;
        if (tin_e[i]->kind == EX_NAME) {
            Binding *b = sema_find_binding(c->env, tin_e[i]->str);
            if (b && b->def.file >= 0)
                diag_note(s->d, b->def, "%s declared here as %s", tin_e[i]->str, sema_shape_of(s, tin[i].t));
        } else {
            const GTensor *t = &s->g->tensors[tin[i].t];
            if (t->span.file >= 0)
                diag_note(s->d, t->span, "%s (%s) computed here as %s", p->in_names[i] ? p->in_names[i] : "operand",
                          p->name, sema_shape_of(s, tin[i].t));
        }
    }
}

/* Shape-checks and emits one primitive op whose inputs and attributes are
 * gathered in pc (tensor inputs given as values). */
Val sema_emit_prim(Sema *s, EvalCtx *c, const PrimInfo *p, const Expr *call, const Val *tin, const Expr *const *tin_e,
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
        if (sema_error(s, call->span, "%s", pe.msg)) blame_notes(s, c, p, pe.blame, tin, tin_e, nin);
        return POISON;
    }
    for (int i = 0; i < nout; i++) {
        int64_t n = 1;
        for (int j = 0; j < out[i].rank; j++)
            if (__builtin_mul_overflow(n, out[i].dims[j], &n)) {
                char b[160];
                sema_error(s, call->span, "%s: the result %s has more than 2^63 elements", p->name,
                           prim_shape_str(&out[i], b, sizeof b));
                return POISON;
            }
    }
    GOp op = graph_op_blank(OP_FWD);
    op.prim = p->id;
    op.nin = nin;
    for (int i = 0; i < nin; i++) op.in[i] = tin[i].t;
    memcpy(op.iattr, pc->iattr, sizeof op.iattr);
    memcpy(op.fattr, pc->fattr, sizeof op.fattr);
    /* the list attributes, one table in slot order */
    for (int l = 0; l < PRIM_MAX_LISTS; l++) op.ntable += pc->nlists[l];
    if (op.ntable) {
        double *tab = ARENA_NEWN(s->a, double, (size_t)op.ntable);
        if (!tab) return POISON;
        for (int l = 0, at = 0; l < PRIM_MAX_LISTS; at += pc->nlists[l], l++)
            if (pc->nlists[l]) memcpy(tab + at, pc->lists[l], (size_t)pc->nlists[l] * sizeof *tab);
        op.table = tab;
    }
    op.nout = nout;
    op.segment = s->segment;
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

/* ---- arguments and attributes ---- */

/* Sets attribute ai of pc from v; false (with an error) if v does not fit. */
static bool set_attr(Sema *s, const PrimInfo *p, PrimCall *pc, int ai, Val v, Span sp) {
    const PrimAttr *a = &p->attrs[ai];
    if (v.k == V_POISON) return false;
    if (pc->attr_set[ai]) {
        sema_error(s, sp, "%s: attribute '%s' given twice", p->name, a->name);
        return false;
    }
    switch (a->kind) {
    case PA_INT:
        if (v.k != V_INT) {
            sema_error(s, sp, "%s: '%s' must be an integer, got %s", p->name, a->name, sema_vkind_name(v.k));
            return false;
        }
        pc->iattr[a->slot] = v.i;
        break;
    case PA_FLOAT:
        if (!is_num(&v)) {
            sema_error(s, sp, "%s: '%s' must be a number, got %s", p->name, a->name, sema_vkind_name(v.k));
            return false;
        }
        pc->fattr[a->slot] = v.f;
        break;
    case PA_FLAG:
        if (!(v.k == V_BOOL || (v.k == V_INT && (v.i == 0 || v.i == 1)))) {
            sema_error(s, sp, "%s: '%s' is a flag: true or false, got %s", p->name, a->name, sema_vkind_name(v.k));
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
            if (v.k == V_STR) sema_error(s, sp, "%s: '%s' must be one of %s, got \"%s\"", p->name, a->name, l, v.s);
            else sema_error(s, sp, "%s: '%s' must be one of %s, got %s", p->name, a->name, l, sema_vkind_name(v.k));
            return false;
        }
        pc->iattr[a->slot] = w;
        break;
    }
    case PA_FLOATS: {
        if (v.k != V_LIST) {
            sema_error(s, sp, "%s: '%s' must be a list of numbers, got %s", p->name, a->name, sema_vkind_name(v.k));
            return false;
        }
        double *l = v.n ? ARENA_NEWN(s->a, double, (size_t)v.n) : NULL;
        if (v.n && !l) return false;
        for (int i = 0; i < v.n; i++) {
            if (!is_num(&v.items[i])) {
                sema_error(s, sp, "%s: '%s' must be a list of numbers, item %d is %s", p->name, a->name, i,
                           sema_vkind_name(v.items[i].k));
                return false;
            }
            l[i] = v.items[i].k == V_INT ? (double)v.items[i].i : v.items[i].f;
        }
        pc->lists[a->slot] = l;
        pc->nlists[a->slot] = v.n;
        break;
    }
    case PA_SIZES:
        if (v.k == V_INT) {
            pc->iattr[a->slot] = v.i;
        } else if (v.k == V_LIST) {
            if (v.n > GRAPH_MAX_OUT) {
                sema_error(s, sp, "%s: at most %d pieces, got %d", p->name, GRAPH_MAX_OUT, v.n);
                return false;
            }
            for (int i = 0; i < v.n; i++) {
                if (v.items[i].k != V_INT) {
                    sema_error(s, sp, "%s: sizes must be integers, item %d is %s", p->name, i,
                               sema_vkind_name(v.items[i].k));
                    return false;
                }
                pc->sizes[i] = v.items[i].i;
            }
            pc->nsizes = v.n;
            pc->iattr[a->slot] = v.n;
            if (v.n == 0) {
                sema_error(s, sp, "%s: the list of sizes is empty", p->name);
                return false;
            }
        } else {
            sema_error(s, sp, "%s: '%s' must be a piece count or a list of sizes, got %s", p->name, a->name,
                       sema_vkind_name(v.k));
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

/* name = value: attribute name of p set from value; false (with an error)
 * if p has no such attribute or the value does not fit. */
static bool named_attr(Sema *s, EvalCtx *c, const PrimInfo *p, PrimCall *pc, const Arg *arg) {
    const PrimAttr *a = prim_attr(p, arg->name);
    Val v = sema_eval_expr(s, c, arg->value);
    if (!a) {
        const char *cands[PRIM_MAX_ATTR];
        for (int i = 0; i < p->nattr; i++) cands[i] = p->attrs[i].name;
        const char *near = diag_nearest(arg->name, cands, p->nattr);
        if (near)
            sema_error(s, arg->name_span, "%s has no attribute '%s'; did you mean '%s'?", p->name, arg->name, near);
        else if (sema_error(s, arg->name_span, "%s has no attribute '%s'", p->name, arg->name))
            diag_hint(s->d, "attributes of %s: %s", p->name, attr_list(s, p));
        return false;
    }
    return set_attr(s, p, pc, (int)(a - p->attrs), v, arg->value->span);
}

/* Does p take ntensor_args tensor inputs? If not, says how many it takes. */
static bool arity_ok(Sema *s, const PrimInfo *p, const Expr *e, int ntensor_args) {
    if (ntensor_args >= p->nin_min && ntensor_args <= p->nin_max) return true;
    const char *names = "";
    for (int i = 0; i < p->nin_max; i++) names = arena_printf(s->a, "%s%s%s", names, i ? ", " : "", p->in_names[i]);
    if (p->nin_max == 0)
        sema_error(s, e->span, "%s takes no tensor inputs, got %d", p->name, ntensor_args);
    else if (p->nin_min == p->nin_max)
        sema_error(s, e->span, "%s takes %d tensor input%s (%s), got %d", p->name, p->nin_min, p->nin_min == 1 ? "" : "s",
                   names, ntensor_args);
    else
        sema_error(s, e->span, "%s takes %d to %d tensor inputs (%s), got %d", p->name, p->nin_min, p->nin_max, names,
                   ntensor_args);
    return false;
}

Val sema_call_prim(Sema *s, EvalCtx *c, const PrimInfo *p, const Expr *e) {
    PrimCall pc;
    memset(&pc, 0, sizeof pc);
    Val tin[PRIM_MAX_IN];
    const Expr *tin_e[PRIM_MAX_IN];
    int nin = 0, ntensor_args = 0;
    bool bad = false, poisoned = false;
    for (int k = 0; k < e->args.len; k++) {
        const Arg *arg = &e->args.items[k];
        if (arg->name) {
            if (!named_attr(s, c, p, &pc, arg)) bad = true;
            continue;
        }
        const Expr *ve = arg->value;
        if (ve->kind == EX_NAME && !sema_find_binding(c->env, ve->str)) {
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
            const char *near = nf && !sema_name_known(s, c, ve->str) ? diag_nearest(ve->str, flags, nf) : NULL;
            if (near) {
                sema_error(s, ve->span, "%s has no flag '%s'; did you mean '%s'?", p->name, ve->str, near);
                bad = true;
                continue;
            }
        }
        Val v = sema_eval_expr(s, c, ve);
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
            if (sema_error(s, ve->span, "%s: argument %d is a tuple of %d tensors, not a tensor", p->name, k + 1, v.n))
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
            if (sema_error(s, ve->span, "%s: unexpected %s argument (it takes tensors%s)", p->name, sema_vkind_name(v.k),
                           p->nattr ? " and named attributes" : ""))
                diag_hint(s->d, "%s", p->doc);
            bad = true;
            continue;
        }
        if (!set_attr(s, p, &pc, ai, v, ve->span)) bad = true;
    }
    if (!poisoned && !arity_ok(s, p, e, ntensor_args)) return POISON;
    if (bad) return POISON;
    for (int i = 0; i < p->nattr; i++)
        if (p->attrs[i].required && !pc.attr_set[i]) {
            if (sema_error(s, e->span, "%s: missing attribute '%s'", p->name, p->attrs[i].name))
                diag_hint(s->d, "%s", p->doc);
            return POISON;
        }
    PrimError ue;
    pc.prim = p->id;
    if (!prim_unused_attrs(&pc, &ue)) {
        sema_error(s, e->span, "%s", ue.msg);
        return POISON;
    }
    return sema_emit_prim(s, c, p, e, tin, tin_e, nin, &pc);
}
