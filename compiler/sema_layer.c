/* sema_layer.c: layer instantiation: a call's arguments bound to the layer's
 * parameters (their types and shape variables checked), the instance named by
 * its call path, its body run; and params, the named parameter tensors the
 * instances create. */
#include <inttypes.h>
#include <string.h>
#include "sema_impl.h"

static const char *layer_chain(Sema *s, const Decl *to) {
    const char *l = "";
    int from = 0;
    for (int i = 0; i < s->depth; i++)
        if (s->stack[i] == to) from = i;
    for (int i = from; i < s->depth; i++) l = arena_printf(s->a, "%s%s -> ", l, s->stack[i]->name);
    return arena_printf(s->a, "%s%s", l, to->name);
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
static void bind_param(Sema *s, EvalCtx *callee, const Decl *L, const ParamDecl *pd, Val v, Span argsp) {
    const TypeExpr *ty = &pd->type;
    if (!ty->present) {
        sema_bind(s, callee, pd->name, v, pd->span);
        return;
    }
    bool ok = v.k == V_TENSOR;
    if (v.k != V_TENSOR && v.k != V_POISON) {
        if (sema_error(s, argsp, "%s: argument '%s' must be a tensor %s, got %s", L->name, pd->name, type_str(s, ty),
                       sema_vkind_name(v.k)))
            diag_note(s->d, pd->span, "'%s' declared here", pd->name);
    }
    const GTensor *t = ok ? &s->g->tensors[v.t] : NULL;
    if (ok && ty->dtype != DT_NONE && t->dtype != ty->dtype) {
        if (sema_error(s, argsp, "%s: argument '%s' must be %s, but it is %s", L->name, pd->name,
                       prim_dtype_str(ty->dtype), prim_dtype_str(t->dtype)))
            diag_note(s->d, pd->span, "'%s' declared here as %s", pd->name, type_str(s, ty));
        ok = false;
    }
    if (ok && t->rank != ty->dims.len) {
        if (sema_error(s, argsp, "%s: argument '%s' must have rank %d (%s), but it is %s", L->name, pd->name, ty->dims.len,
                       type_str(s, ty), sema_shape_of(s, v.t)))
            diag_note(s->d, pd->span, "'%s' declared here", pd->name);
        ok = false;
    }
    for (int j = 0; j < ty->dims.len; j++) {
        const Expr *de = ty->dims.items[j];
        if (de->kind == EX_NAME && !sema_name_known(s, callee, de->str)) {
            sema_bind(s, callee, de->str, ok ? vint(t->dims[j]) : POISON, de->span);
            Binding *b = sema_find_binding(callee->env, de->str);
            if (b) b->is_shape = true;
            continue;
        }
        Val dv = sema_eval_expr(s, callee, de);
        if (!ok || dv.k == V_POISON) continue;
        if (dv.k != V_INT) {
            sema_error(s, de->span, "a dimension must be an integer, got %s", sema_vkind_name(dv.k));
            continue;
        }
        if (dv.i != t->dims[j]) {
            const char *what = de->kind == EX_NAME ? arena_printf(s->a, "%s = %" PRId64, de->str, dv.i)
                                                   : arena_printf(s->a, "%" PRId64, dv.i);
            if (sema_error(s, argsp, "%s: argument '%s' has dimension %d of size %" PRId64 ", but %s expects %s (%s is %s)",
                           L->name, pd->name, j, t->dims[j], type_str(s, ty), what, pd->name, sema_shape_of(s, v.t))) {
                Binding *b = de->kind == EX_NAME ? sema_find_binding(callee->env, de->str) : NULL;
                if (b && b->def.file >= 0)
                    diag_note(s->d, b->def, "%s was bound here to %" PRId64, de->str, dv.i);
                else
                    diag_note(s->d, pd->span, "'%s' declared here", pd->name);
            }
        }
    }
    sema_bind(s, callee, pd->name, ok ? v : POISON, pd->span);
}

/* Sorts e's arguments into L's parameters (argv, argsp, given; evaluated in
 * the caller's c); false when one is wrong (unknown, extra, given twice). */
static bool layer_args(Sema *s, EvalCtx *c, const Decl *L, const Expr *e, Val *argv, Span *argsp, bool *given) {
    int np = L->params.len;
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
                if (sema_error(s, arg->name_span, "layer '%s' has no parameter '%s'%s%s%s", L->name, arg->name,
                               near ? "; did you mean '" : "", near ? near : "", near ? "'?" : ""))
                    diag_note(s->d, L->name_span, "'%s' defined here", L->name);
                bad = true;
                sema_eval_expr(s, c, arg->value);
                continue;
            }
        } else {
            while (pos < np && given[pos]) pos++;
            idx = pos;
            if (idx >= np) {
                const char *names = "";
                for (int i = 0; i < np; i++)
                    names = arena_printf(s->a, "%s%s%s", names, i ? ", " : "", L->params.items[i].name);
                if (sema_error(s, arg->value->span, "layer '%s' takes %d argument%s (%s), got %d", L->name, np,
                               np == 1 ? "" : "s", names, e->args.len))
                    diag_note(s->d, L->name_span, "'%s' defined here", L->name);
                bad = true;
                sema_eval_expr(s, c, arg->value);
                continue;
            }
        }
        if (given[idx]) {
            sema_error(s, arg->value->span, "layer '%s': argument '%s' given twice", L->name,
                       L->params.items[idx].name);
            bad = true;
            continue;
        }
        given[idx] = true;
        argv[idx] = sema_eval_expr(s, c, arg->value);
        argsp[idx] = arg->value->span;
    }
    return !bad;
}

/* Naming: the callee's component in the caller's naming scope (layer, then
 * layer_1, layer_2, ... for later calls, with the repeat suffix); false when
 * out of memory. */
static bool instance_name(Sema *s, EvalCtx *c, const Decl *L, const char **comp) {
    Count *cnt = NULL;
    for (Count *q = c->counts; q; q = q->next)
        if (strcmp(q->name, L->name) == 0) cnt = q;
    if (!cnt) {
        cnt = ARENA_NEW(s->a, Count);
        if (!cnt) return false;
        cnt->name = L->name;
        cnt->next = c->counts;
        c->counts = cnt;
    }
    *comp = cnt->n ? arena_printf(s->a, "%s_%d%s", L->name, cnt->n, c->rsuffix)
                   : arena_printf(s->a, "%s%s", L->name, c->rsuffix);
    cnt->n++;
    return true;
}

Val sema_call_layer(Sema *s, EvalCtx *c, const Decl *L, const Expr *e) {
    /* past a limit, expanding more only repeats the error (and can take exponential time) */
    if (!sema_step(s, e->span)) return POISON;
    for (int i = 0; i < s->depth; i++)
        if (s->stack[i] == L) {
            if (sema_error(s, e->span, "layer '%s' calls itself (%s): layers are expanded at each call, so the recursion "
                           "never ends", L->name, layer_chain(s, L)))
                diag_note(s->d, L->name_span, "'%s' defined here", L->name);
            return POISON;
        }
    if (s->depth >= SEMA_MAX_DEPTH) {
        sema_error(s, e->span, "layers nested more than %d deep", SEMA_MAX_DEPTH);
        return POISON;
    }
    int np = L->params.len;
    Val *argv = ARENA_NEWN(s->a, Val, np ? np : 1);
    Span *argsp = ARENA_NEWN(s->a, Span, np ? np : 1);
    bool *given = ARENA_NEWN(s->a, bool, np ? np : 1);
    if (!argv || !argsp || !given) return POISON;
    bool bad = !layer_args(s, c, L, e, argv, argsp, given);
    const char *comp;
    if (!instance_name(s, c, L, &comp)) return POISON;
    EvalCtx callee;
    memset(&callee, 0, sizeof callee);
    callee.scope = sema_scope_of_file(s, L->file);
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
            v = sema_eval_expr(s, &callee, pd->default_value);
            sp = pd->default_value->span;
        } else {
            if (!bad && sema_error(s, e->span, "layer '%s': missing argument '%s'", L->name, pd->name))
                diag_note(s->d, pd->span, "'%s' declared here", pd->name);
            v = POISON;
        }
        bind_param(s, &callee, L, pd, v, sp);
    }
    s->stack[s->depth++] = L;
    bool returned = false;
    Val r = sema_exec_body(s, &callee, &L->body, &returned);
    s->depth--;
    if (!returned) {
        if (!s->after_syntax_errors && !s->too_big)
            sema_error(s, L->name_span, "layer '%s' has no return statement", L->name);
        return POISON;
    }
    return r;
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
            uint64_t h = sema_hash_str(s->pnames[i]) & (uint64_t)(nc - 1);
            while (nn[h]) h = (h + 1) & (uint64_t)(nc - 1);
            nn[h] = s->pnames[i];
            ns[h] = s->pspans[i];
        }
        s->pnames = nn;
        s->pspans = ns;
        s->cappnames = nc;
    }
    uint64_t mask = (uint64_t)(s->cappnames - 1), h = sema_hash_str(name) & mask;
    for (; s->pnames[h]; h = (h + 1) & mask)
        if (strcmp(s->pnames[h], name) == 0) {
            if (sema_error(s, sp, "parameter '%s' is defined twice", name))
                diag_note(s->d, s->pspans[h], "first defined here");
            return false;
        }
    s->pnames[h] = name;
    s->pspans[h] = sp;
    s->npnames++;
    return true;
}

Val sema_make_param(Sema *s, EvalCtx *c, const char *var, const Expr *e) {
    int64_t dims[GRAPH_MAX_RANK];
    bool bad = false;
    if (e->dims.len > GRAPH_MAX_RANK) {
        sema_error(s, e->span, "a param has at most %d dimensions, this one has %d", GRAPH_MAX_RANK, e->dims.len);
        return POISON;
    }
    int64_t numel = 1;
    for (int i = 0; i < e->dims.len; i++) {
        Val v = sema_eval_expr(s, c, e->dims.items[i]);
        if (v.k == V_POISON) {
            bad = true;
            continue;
        }
        if (v.k != V_INT || v.i <= 0) {
            if (v.k == V_INT) sema_error(s, e->dims.items[i]->span, "a dimension must be positive, got %" PRId64, v.i);
            else sema_error(s, e->dims.items[i]->span, "a dimension must be an integer, got %s", sema_vkind_name(v.k));
            bad = true;
            continue;
        }
        dims[i] = v.i;
        if (!bad && __builtin_mul_overflow(numel, v.i, &numel)) {
            sema_error(s, e->span, "the param's element count overflows 64 bits");
            bad = true;
        }
    }
    double std = 0;
    switch (e->init) {
    case INIT_NORMAL:
    case INIT_UNIFORM: {
        const char *what = e->init == INIT_NORMAL ? "normal" : "uniform";
        if (e->args.len != 1) {
            sema_error(s, e->init_span, "%s takes one argument (the %s), got %d", what,
                       e->init == INIT_NORMAL ? "standard deviation" : "half-width", e->args.len);
            bad = true;
            break;
        }
        const Arg *a = &e->args.items[0];
        if (a->name && strcmp(a->name, e->init == INIT_NORMAL ? "std" : "a") != 0) {
            sema_error(s, a->name_span, "%s has no argument '%s'", what, a->name);
            bad = true;
            break;
        }
        Val v = sema_eval_expr(s, c, a->value);
        if (v.k == V_POISON) {
            bad = true;
            break;
        }
        if (!is_num(&v) || v.f < 0) {
            sema_error(s, a->value->span, "%s needs a non-negative number, got %s", what, sema_vkind_name(v.k));
            bad = true;
            break;
        }
        std = v.f;
        break;
    }
    case INIT_ZEROS:
    case INIT_ONES:
        if (e->args.len) {
            sema_error(s, e->init_span, "%s takes no arguments", e->init == INIT_ZEROS ? "zeros" : "ones");
            bad = true;
        }
        break;
    default:
        sema_error(s, e->span, "a param needs an init: normal(std), uniform(a), zeros or ones");
        bad = true;
    }
    if (bad) return POISON;
    const char *comp = arena_printf(s->a, "%s%s", var, c->rsuffix);
    const char *name = c->path[0] ? arena_printf(s->a, "%s.%s", c->path, comp) : comp;
    if (!pname_add(s, name, e->span)) return POISON;
    DType dt = e->dtype != DT_NONE ? e->dtype : s->train.dtype;
    if (!sema_room(s, e->span)) return POISON;
    int id = graph_add_tensor(s->g, name, dt, e->dims.len, dims, TC_PARAM);
    if (id < 0) return POISON;
    GTensor *t = &s->g->tensors[id];
    t->init = e->init;
    t->init_std = std;
    t->frozen = e->frozen;
    t->span = e->span;
    t->segment = s->segment;
    return vtensor(id);
}
