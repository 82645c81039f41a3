/* sema_stmt.c: statements of a layer or model body: assignments (with
 * destructuring and params), repeat (unrolled: one checkpoint segment and one
 * naming suffix per iteration), if on a constant, return and loss. */
#include <inttypes.h>
#include <string.h>
#include "sema_impl.h"

static void exec_stmts(Sema *s, EvalCtx *c, const StmtList *body, bool *returned, Val *ret);

static void unbind(EvalCtx *c, Binding *which) {
    for (Binding **p = &c->env; *p; p = &(*p)->next)
        if (*p == which) {
            *p = which->next;
            return;
        }
}

static bool assignable(Sema *s, EvalCtx *c, const char *name, Span sp) {
    if (sema_reserved_name(name)) {
        sema_error(s, sp, "'%s' is reserved%s and cannot be assigned", name,
                   strcmp(name, "B") == 0 ? " (the micro-batch)" : "");
        return false;
    }
    Binding *b = sema_find_binding(c->env, name);
    if (b && b->is_index) {
        sema_error(s, sp, "'%s' is the repeat index and cannot be assigned", name);
        return false;
    }
    if (!b) {
        bool found = false;
        FileScope *f = &s->files[c->scope];
        int idx;
        ConstEntry *ce = sema_find_const_in(f, name, &idx);
        for (int k = 0; !ce && k < f->nimports; k++) ce = sema_find_const_in(&s->files[f->imports[k]], name, &idx);
        found = ce != NULL;
        if (found) {
            if (sema_error(s, sp, "'%s' is a constant and cannot be assigned", name))
                diag_note(s->d, ce->decl->name_span, "'%s' defined here", name);
            return false;
        }
    }
    return true;
}

static void exec_assign(Sema *s, EvalCtx *c, const Stmt *st) {
    const NameList *tg = &st->targets;
    if (st->value && st->value->kind == EX_PARAM) {
        if (tg->len != 1) {
            sema_error(s, st->span, "a param is one tensor; assign it to one name");
            return;
        }
        if (!assignable(s, c, tg->items[0], tg->spans[0])) return;
        Val v = sema_make_param(s, c, tg->items[0], st->value);
        sema_bind(s, c, tg->items[0], v, st->value->span);
        return;
    }
    Val v = sema_eval_expr(s, c, st->value);
    if (tg->len == 1) {
        if (assignable(s, c, tg->items[0], tg->spans[0])) sema_bind(s, c, tg->items[0], v, st->value->span);
        return;
    }
    bool ok = true;
    if (v.k != V_POISON && (v.k != V_TUPLE || v.n != tg->len)) {
        if (v.k == V_TUPLE)
            sema_error(s, st->span, "cannot destructure a tuple of %d into %d names", v.n, tg->len);
        else
            sema_error(s, st->span, "cannot destructure %s into %d names: it is not a tuple", sema_vkind_name(v.k),
                       tg->len);
        ok = false;
    }
    for (int i = 0; i < tg->len; i++) {
        if (!assignable(s, c, tg->items[i], tg->spans[i])) continue;
        sema_bind(s, c, tg->items[i], ok && v.k == V_TUPLE ? v.items[i] : POISON, st->value->span);
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

static void exec_repeat(Sema *s, EvalCtx *c, const Stmt *st, bool *returned, Val *ret) {
    Val cv = sema_eval_expr(s, c, st->count);
    int64_t n = 1;
    bool poison = false;
    if (cv.k == V_POISON) {
        poison = true;
    } else if (cv.k != V_INT || cv.i < 1 || cv.i > SEMA_MAX_REPEAT) {
        if (cv.k == V_FLOAT)
            sema_error(s, st->count->span, "a repeat count must be a positive integer constant, got %g", cv.f);
        else if (cv.k != V_INT)
            sema_error(s, st->count->span, "a repeat count must be a positive integer constant, got %s",
                       sema_vkind_name(cv.k));
        else if (cv.i < 1)
            sema_error(s, st->count->span, "a repeat count must be a positive integer, got %" PRId64, cv.i);
        else
            sema_error(s, st->count->span, "repeat count %" PRId64 " is too large (at most %d)", cv.i, SEMA_MAX_REPEAT);
        poison = true;
    } else {
        n = cv.i;
    }
    if (st->index && (sema_reserved_name(st->index) || !assignable(s, c, st->index, st->index_span))) {
        if (sema_reserved_name(st->index))
            sema_error(s, st->index_span, "'%s' is reserved and cannot be a repeat index", st->index);
        poison = true;
    }
    bool owns = s->segment < 0 && !poison;
    Count *before = c->counts, *after = before; /* unchanged if no iteration runs (past the step limit) */
    const char *rs = c->rsuffix;
    c->in_repeat++;
    for (int64_t i = 0; i < n && sema_step(s, st->span); i++) {
        copy_counts(s, &c->counts, before);
        c->rsuffix = arena_printf(s->a, "%s.%" PRId64, rs, i);
        if (owns) s->segment = s->g->nsegments++;
        Binding *ib = NULL;
        if (st->index) {
            Binding *old = sema_find_binding(c->env, st->index);
            if (old && !old->is_index) {
                /* shadowing a local: keep it simple, refuse */
                if (sema_error(s, st->index_span, "repeat index '%s' hides a variable of the same name", st->index))
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
static void exec_if(Sema *s, EvalCtx *c, const Stmt *st, bool *returned, Val *ret) {
    Val cv = sema_eval_expr(s, c, st->count);
    if (cv.k == V_POISON) return;
    /* an integer 0 or 1 too, as a primitive's boolean attribute takes: a
     * layer's pattern written as arithmetic on a repeat index (i % 2) */
    if (!(cv.k == V_BOOL || (cv.k == V_INT && (cv.i == 0 || cv.i == 1)))) {
        if (cv.k == V_INT)
            sema_error(s, st->count->span, "an if condition must be true or false (or an integer 0 or 1), got %" PRId64, cv.i);
        else if (sema_error(s, st->count->span, "an if condition must be true or false, got %s", sema_vkind_name(cv.k)))
            diag_hint(s->d, "conditions are constants: a layer parameter such as qkv_bias = false, or true/false");
        return;
    }
    c->in_if++;
    exec_stmts(s, c, cv.i ? &st->body : &st->else_body, returned, ret);
    c->in_if--;
}

/* loss EXPR: the model's one scalar loss (g->loss -2: there was one, erroneous). */
static void exec_loss(Sema *s, EvalCtx *c, const Stmt *st) {
    if (!c->is_model) {
        sema_error(s, st->span, "loss belongs in the model body, not in a layer");
        sema_eval_expr(s, c, st->value);
        return;
    }
    if (c->in_repeat) {
        sema_error(s, st->span, "loss inside repeat: a model has one loss");
        return;
    }
    Val v = sema_eval_expr(s, c, st->value);
    if (s->g->loss >= 0 || s->g->loss == -2) {
        sema_error(s, st->span, "a model has one loss statement; this is a second one");
        return;
    }
    if (v.k == V_POISON) {
        s->g->loss = -2; /* there was one, erroneous */
        return;
    }
    if (v.k != V_TENSOR || s->g->tensors[v.t].rank != 0) {
        if (v.k == V_TENSOR)
            sema_error(s, st->value->span, "the loss must be a scalar (cross_entropy gives one), but it is %s",
                       sema_shape_of(s, v.t));
        else
            sema_error(s, st->value->span, "the loss must be a scalar tensor, got %s", sema_vkind_name(v.k));
        s->g->loss = -2;
        return;
    }
    s->g->loss = v.t;
}

static void exec_stmts(Sema *s, EvalCtx *c, const StmtList *body, bool *returned, Val *ret) {
    for (int k = 0; k < body->len; k++) {
        const Stmt *st = body->items[k];
        if (!st || ((st->kind == ST_ASSIGN || st->kind == ST_LOSS) && !st->value) ||
            ((st->kind == ST_REPEAT || st->kind == ST_IF) && !st->count))
            continue; /* only after a syntax error or out of memory, already reported */
        if (*returned) {
            sema_error(s, st->span, "statement after return");
            return;
        }
        sema_step(s, st->span); /* counted; what runs after the limit makes no tensors and expands nothing */
        switch (st->kind) {
        case ST_ASSIGN: exec_assign(s, c, st); break;
        case ST_REPEAT: exec_repeat(s, c, st, returned, ret); break;
        case ST_IF: exec_if(s, c, st, returned, ret); break;
        case ST_RETURN: {
            if (c->is_model) {
                if (sema_error(s, st->span, "a model does not return; it ends with a loss statement"))
                    diag_hint(s->d, "loss cross_entropy(logits, targets)");
                break;
            }
            if (c->in_repeat) {
                sema_error(s, st->span, "return inside repeat: a layer returns once, after its repeats");
                break;
            }
            if (c->in_if) {
                if (sema_error(s, st->span, "return inside if: a layer returns once, at its end"))
                    diag_hint(s->d, "assign the value in each branch, then return it after the if");
                break;
            }
            Val v;
            if (st->values.len == 1) {
                v = sema_eval_expr(s, c, st->values.items[0]);
            } else {
                v = POISON;
                v.k = V_TUPLE;
                v.n = st->values.len;
                v.items = ARENA_NEWN(s->a, Val, v.n ? v.n : 1);
                if (!v.items) return;
                for (int i = 0; i < v.n; i++) {
                    v.items[i] = sema_eval_expr(s, c, st->values.items[i]);
                    if (v.items[i].k == V_POISON) v.k = V_POISON;
                }
                if (v.k == V_POISON) v = POISON;
            }
            *ret = v;
            *returned = true;
            break;
        }
        case ST_LOSS: exec_loss(s, c, st); break;
        }
    }
}

Val sema_exec_body(Sema *s, EvalCtx *c, const StmtList *body, bool *returned) {
    Val ret = POISON;
    *returned = false;
    exec_stmts(s, c, body, returned, &ret);
    return ret;
}
