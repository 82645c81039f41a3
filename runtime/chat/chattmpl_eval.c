/* chattmpl_eval: a template's tree evaluated over one render's values:
 * expressions with Python's semantics (arithmetic, comparisons, and/or
 * returning an operand, indexing and slicing by code point), statements
 * with Jinja's scoping (a for loop's body gets a fresh scope each
 * iteration; `set` inside it does not leak out; if blocks have no scope of
 * their own). Steps, nesting and memory are counted against the limits of
 * chattmpl.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chattmpl_eval.h"

/* ---- the render's state ---- */

int ct_fail(Render *r, int line, const char *fmt, ...) {
    if (r->rc) return -1;
    r->rc = -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s: line %d: %s", r->t->name, line, msg);
    return -1;
}

int ct_oom(Render *r, int line) { return ct_fail(r, line, "out of memory (more than %d bytes)", CHATTMPL_MAX_MEMORY); }

int ct_step(Render *r, int line) {
    if (++r->steps > CHATTMPL_MAX_STEPS) return ct_fail(r, line, "the template ran more than %d steps", CHATTMPL_MAX_STEPS);
    if (r->a.failed || r->a.used_total > (size_t)CHATTMPL_MAX_MEMORY) return ct_oom(r, line);
    return 0;
}

static Val *ct_lookup(Render *r, Str name) {
    for (Frame *f = r->frame; f; f = f->parent) {
        Val *v = dict_get(f->vars, name);
        if (v) return v;
    }
    return NULL;
}

Buf ct_buf(Render *r) { return (Buf){.a = &r->a}; }

/* A value as a string (Python's str()). */
int ct_to_str(Render *r, const Val *v, Str *out, int line) {
    if (v->kind == V_STR) {
        *out = v->s;
        return 0;
    }
    if (v->kind == V_METHOD || v->kind == V_FUNC) return ct_fail(r, line, "'%.*s' is a function, not a value", (int)v->s.n, v->s.p);
    if (v->kind == V_MACRO) return ct_fail(r, line, "a macro is not a value; call it");
    Buf b = ct_buf(r);
    int e = v_to_str(&b, v);
    if (e == -2)
        return ct_fail(r, line,
                       "printing a generator (a select, map, unique, items or reverse result) is not supported; add | list");
    if (e) return r->a.failed ? ct_oom(r, line) : ct_fail(r, line, "values nest deeper than %d", CHATTMPL_MAX_DEPTH);
    *out = buf_str(&b);
    return 0;
}

int ct_need_str(Render *r, const Val *v, const char *what, int line) {
    if (v->kind == V_STR) return 0;
    return ct_fail(r, line, "%s needs a string, not %s", what, v_typename(v));
}

Val ct_undefined(Str name) { return (Val){.kind = V_UNDEF, .s = name}; }

/* A macro call: its parameters in a scope of their own over the scope it
 * was defined in; its output, tags kept, is the value. */
int ct_call_macro(Render *r, const CtNode *call, const Val *m, Val *out) {
    const CtNode *def = m->macro.node;
    Frame f = {dict_new(&r->a), (Frame *)m->macro.frame};
    if (!f.vars) return ct_oom(r, call->line);
    if (call->nargs > def->nargs)
        return ct_fail(r, call->line, "macro '%s' takes at most %zu arguments, not %zu", def->s, def->nargs, call->nargs);
    Val *vals = ARENA_NEWN(&r->a, Val, def->nargs + 1);
    char *given = ARENA_NEWN(&r->a, char, def->nargs + 1);
    if (!vals || !given) return ct_oom(r, call->line);
    for (size_t i = 0; i < call->nargs; i++) {
        if (ct_eval(r, call->args[i], &vals[i])) return -1;
        given[i] = 1;
    }
    for (size_t k = 0; k < call->nkw; k++) {
        size_t i = 0;
        while (i < def->nargs && strcmp(def->args[i]->s, call->kwnames[k])) i++;
        if (i == def->nargs) return ct_fail(r, call->line, "macro '%s' has no parameter '%s'", def->s, call->kwnames[k]);
        if (given[i]) return ct_fail(r, call->line, "macro '%s' got parameter '%s' twice", def->s, call->kwnames[k]);
        if (ct_eval(r, call->kwargs[k], &vals[i])) return -1;
        given[i] = 1;
    }
    Frame *saved_frame = r->frame;
    for (size_t i = 0; i < def->nargs; i++) {
        if (!given[i]) {
            if (def->kwargs[i]) { /* defaults are evaluated in the macro's scope, at the call */
                r->frame = &f;
                int rc = ct_eval(r, def->kwargs[i], &vals[i]);
                r->frame = saved_frame;
                if (rc) return -1;
            } else
                vals[i] = ct_undefined(str_lit(def->args[i]->s));
        }
        if (!dict_set(&r->a, f.vars, str_lit(def->args[i]->s), vals[i])) return ct_oom(r, call->line);
    }
    Buf saved = r->out;
    r->out = ct_buf(r);
    r->frame = &f;
    r->capturing++;
    int rc = ct_exec_block(r, def->body);
    r->capturing--;
    r->frame = saved_frame;
    int ctl = r->control;
    r->control = 0;
    *out = v_str(buf_str(&r->out));
    r->out = saved;
    if (!rc && ctl) rc = ct_fail(r, call->line, "'break' or 'continue' outside a loop in macro '%s'", def->s);
    return rc;
}

int ct_equal(Render *r, const Val *a, const Val *b, int *res, int line) {
    *res = v_equal(a, b, 0);
    if (*res == -2) return ct_fail(r, line, "comparing a generator, dict view or range is not supported");
    if (*res < 0) return ct_fail(r, line, "values nest deeper than %d", CHATTMPL_MAX_DEPTH);
    return 0;
}

int ct_undefined_error(Render *r, const Val *v, int line) {
    return ct_fail(r, line, "'%.*s' is undefined", (int)v->s.n, v->s.p);
}

/* ---- expressions ---- */

int ct_eval_args(Render *r, const CtNode *nd, Val *args, size_t max) {
    if (nd->nargs > max)
        return ct_fail(r, nd->line, "'%s' takes at most %zu arguments, not %zu", nd->s ? nd->s : "call", max, nd->nargs);
    for (size_t i = 0; i < nd->nargs; i++)
        if (ct_eval(r, nd->args[i], &args[i])) return -1;
    return 0;
}

/* A keyword argument by name, or the positional one at pos, or NULL. */
int ct_arg_or_kw(Render *r, const CtNode *nd, size_t pos, const char *kw, Val *out, int *present) {
    *present = 0;
    for (size_t i = 0; i < nd->nkw; i++)
        if (!strcmp(nd->kwnames[i], kw)) {
            *present = 1;
            return ct_eval(r, nd->kwargs[i], out);
        }
    if (pos < nd->nargs) {
        *present = 1;
        return ct_eval(r, nd->args[pos], out);
    }
    return 0;
}

int ct_no_kwargs(Render *r, const CtNode *nd, const char *what) {
    if (nd->nkw) return ct_fail(r, nd->line, "%s takes no argument '%s'", what, nd->kwnames[0]);
    return 0;
}

int ct_getattr(Render *r, const Val *obj, Str name, Val *out, int line) {
    static const char *const STR_METHODS[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split",
                                              "replace", "upper", "lower", "title", "capitalize", NULL};
    static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
    const char *const *methods = obj->kind == V_STR ? STR_METHODS
                                 : obj->kind == V_DICT && !obj->d->is_namespace ? DICT_METHODS : NULL;
    for (; methods && *methods; methods++)
        if (str_eq(name, *methods)) {
            Val *self = ARENA_NEW(&r->a, Val);
            if (!self) return ct_oom(r, line);
            *self = *obj;
            *out = (Val){.kind = V_METHOD, .s = name, .self = self};
            return 0;
        }
    if (obj->kind == V_UNDEF)
        return ct_fail(r, line, "'%.*s' is undefined (reading its attribute '%.*s')", (int)obj->s.n, obj->s.p, (int)name.n,
                       name.p);
    if (obj->kind == V_DICT) {
        Val *v = dict_get(obj->d, name);
        *out = v ? *v : ct_undefined(name);
        return 0;
    }
    *out = ct_undefined(name);
    return 0;
}

/* Python's slice.indices for a length n. */
static void ct_slice_indices(int64_t n, const Val *sv[3], int64_t *start, int64_t *stop, int64_t *stepv) {
    int64_t st = sv[2] && sv[2]->kind == V_INT ? sv[2]->i : 1;
    *stepv = st;
    int64_t lo = st < 0 ? -1 : 0, hi = st < 0 ? n - 1 : n;
    for (int k = 0; k < 2; k++) {
        int64_t *dst = k == 0 ? start : stop;
        if (!sv[k] || sv[k]->kind == V_NONE) {
            *dst = k == 0 ? (st < 0 ? hi : lo) : (st < 0 ? lo : hi);
            continue;
        }
        int64_t x = sv[k]->i;
        if (x < 0) x += n, *dst = x < lo ? lo : x;
        else *dst = x > hi ? hi : x;
    }
}

static int ct_eval_slice(Render *r, const CtNode *nd, const Val *obj, Val *out) {
    Val parts[3];
    const Val *sv[3] = {0};
    for (int k = 0; k < 3; k++) {
        if (!nd->args[k]) continue;
        if (ct_eval(r, nd->args[k], &parts[k])) return -1;
        if (parts[k].kind == V_NONE) continue;
        if (parts[k].kind != V_INT) return ct_fail(r, nd->line, "slice indices must be integers, not %s", v_typename(&parts[k]));
        sv[k] = &parts[k];
    }
    if (sv[2] && sv[2]->i == 0) return ct_fail(r, nd->line, "slice step cannot be zero");
    if (obj->kind == V_UNDEF)
        return ct_fail(r, nd->line, "'%.*s' is undefined (slicing it)", (int)obj->s.n, obj->s.p);
    if ((obj->kind != V_LIST && obj->kind != V_STR) || (obj->kind == V_LIST && obj->l->flavor > L_TUPLE))
        return ct_fail(r, nd->line, "cannot slice %s", v_typename(obj));
    int64_t n = obj->kind == V_LIST ? (int64_t)obj->l->n : (int64_t)utf8_count(obj->s), a, b, st;
    ct_slice_indices(n, sv, &a, &b, &st);
    if (obj->kind == V_STR && st == 1) {
        *out = v_str(a < b ? str_slice(obj->s, utf8_offset(obj->s, (size_t)a), utf8_offset(obj->s, (size_t)b))
                           : str_of("", 0));
        return 0;
    }
    List *l = obj->kind == V_LIST ? list_new(&r->a, 0) : NULL;
    if (l) l->flavor = obj->l->flavor;
    size_t *offs = NULL; /* a string's code points: where each starts, once */
    if (obj->kind == V_STR) {
        if (!(offs = ARENA_NEWN(&r->a, size_t, (size_t)n + 1))) return ct_oom(r, nd->line);
        for (size_t i = 0, k = 0; i <= obj->s.n; i++)
            if (i == obj->s.n || ((unsigned char)obj->s.p[i] & 0xC0) != 0x80) offs[k++] = i;
    }
    Buf b2 = ct_buf(r);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
        if (ct_step(r, nd->line)) return -1;
        if (l) {
            if (!list_push(&r->a, l, obj->l->v[i])) return ct_oom(r, nd->line);
        } else {
            size_t o = offs[i], e = offs[i + 1];
            if (!buf_put(&b2, obj->s.p + o, obj->s.tag ? obj->s.tag + o : NULL, e - o)) return ct_oom(r, nd->line);
        }
    }
    if (l) *out = (Val){.kind = V_LIST, .l = l};
    else *out = v_str(buf_str(&b2));
    return 0;
}

int ct_index(Render *r, const Val *obj, const Val *ix, Val *out, int line) {
    if (obj->kind == V_UNDEF) return ct_fail(r, line, "'%.*s' is undefined (reading an item of it)", (int)obj->s.n, obj->s.p);
    if (obj->kind == V_DICT) { /* d['items'] is the member, never the method */
        Val *v = ix->kind == V_STR ? dict_get(obj->d, ix->s) : NULL;
        *out = v ? *v : ct_undefined(ix->kind == V_STR ? ix->s : str_lit("item"));
        return 0;
    }
    if (obj->kind == V_LIST && (obj->l->flavor == L_GENERATOR || (obj->l->flavor >= L_ITEMS && obj->l->flavor <= L_VALUES))) {
        *out = ct_undefined(str_lit("item")); /* not subscriptable: Jinja gives undefined */
        return 0;
    }
    if ((obj->kind == V_LIST || obj->kind == V_STR) && ix->kind == V_INT) {
        int64_t n = obj->kind == V_LIST ? (int64_t)obj->l->n : (int64_t)utf8_count(obj->s), i = ix->i;
        if (i < 0) i += n;
        if (i < 0 || i >= n) {
            *out = ct_undefined(str_lit("item"));
            return 0;
        }
        if (obj->kind == V_LIST) *out = obj->l->v[i];
        else *out = v_str(str_slice(obj->s, utf8_offset(obj->s, (size_t)i), utf8_offset(obj->s, (size_t)i + 1)));
        return 0;
    }
    if (ix->kind == V_STR) return ct_getattr(r, obj, ix->s, out, line);
    *out = ct_undefined(str_lit("item"));
    return 0;
}

static int ct_arith(Render *r, int op, const Val *a, const Val *b, Val *out, int line) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    if (op == CT_OP_CONCAT) {
        Str sa, sb;
        if (ct_to_str(r, a, &sa, line) || ct_to_str(r, b, &sb, line)) return -1;
        Buf bb = ct_buf(r);
        if (!buf_put(&bb, sa.p, sa.tag, sa.n) || !buf_put(&bb, sb.p, sb.tag, sb.n)) return ct_oom(r, line);
        *out = v_str(buf_str(&bb));
        return 0;
    }
    if (op == CT_OP_ADD && a->kind == V_STR && b->kind == V_STR) {
        Buf bb = ct_buf(r);
        if (!buf_put(&bb, a->s.p, a->s.tag, a->s.n) || !buf_put(&bb, b->s.p, b->s.tag, b->s.n)) return ct_oom(r, line);
        *out = v_str(buf_str(&bb));
        return 0;
    }
    if (op == CT_OP_ADD && a->kind == V_LIST && b->kind == V_LIST && a->l->flavor == b->l->flavor &&
        a->l->flavor <= L_TUPLE) {
        List *l = list_new(&r->a, a->l->n + b->l->n);
        if (!l) return ct_oom(r, line);
        for (size_t i = 0; i < a->l->n; i++) list_push(&r->a, l, a->l->v[i]);
        for (size_t i = 0; i < b->l->n; i++) list_push(&r->a, l, b->l->v[i]);
        l->flavor = a->l->flavor;
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    int a_count = a->kind == V_INT || a->kind == V_BOOL, b_count = b->kind == V_INT || b->kind == V_BOOL;
    int a_seq = a->kind == V_STR || (a->kind == V_LIST && a->l->flavor <= L_TUPLE);
    int b_seq = b->kind == V_STR || (b->kind == V_LIST && b->l->flavor <= L_TUPLE);
    if (op == CT_OP_MUL && ((a_seq && b_count) || (a_count && b_seq))) { /* repetition */
        const Val *s = a_count ? b : a, *c = a_count ? a : b;
        int64_t k = c->kind == V_INT ? c->i : c->b;
        Buf bb = ct_buf(r);
        List *l = s->kind == V_LIST ? list_new(&r->a, 0) : NULL;
        if (s->kind == V_LIST && !l) return ct_oom(r, line);
        for (int64_t i = 0; i < k; i++) {
            if (ct_step(r, line)) return -1;
            if (l) {
                for (size_t j = 0; j < s->l->n; j++)
                    if (!list_push(&r->a, l, s->l->v[j])) return ct_oom(r, line);
            } else if (!buf_put(&bb, s->s.p, s->s.tag, s->s.n))
                return ct_oom(r, line);
        }
        if (l) l->flavor = s->l->flavor;
        *out = l ? (Val){.kind = V_LIST, .l = l} : v_str(buf_str(&bb));
        return 0;
    }
    int ints = (a->kind == V_INT || a->kind == V_BOOL) && (b->kind == V_INT || b->kind == V_BOOL);
    if (!(a->kind == V_INT || a->kind == V_BOOL || a->kind == V_FLOAT) ||
        !(b->kind == V_INT || b->kind == V_BOOL || b->kind == V_FLOAT))
        return ct_fail(r, line, "unsupported operand types for %s: '%s' and '%s'", names[op], v_typename(a), v_typename(b));
    double x = a->kind == V_FLOAT ? a->f : a->kind == V_INT ? (double)a->i : a->b;
    double y = b->kind == V_FLOAT ? b->f : b->kind == V_INT ? (double)b->i : b->b;
    int64_t xi = a->kind == V_INT ? a->i : a->b, yi = b->kind == V_INT ? b->i : b->b;
    if ((op == CT_OP_DIV || op == CT_OP_FLOORDIV || op == CT_OP_MOD) && y == 0) return ct_fail(r, line, "division by zero");
    switch (op) {
    case CT_OP_ADD: *out = ints ? v_int(xi + yi) : (Val){.kind = V_FLOAT, .f = x + y}; break;
    case CT_OP_SUB: *out = ints ? v_int(xi - yi) : (Val){.kind = V_FLOAT, .f = x - y}; break;
    case CT_OP_MUL: *out = ints ? v_int(xi * yi) : (Val){.kind = V_FLOAT, .f = x * y}; break;
    case CT_OP_DIV: *out = (Val){.kind = V_FLOAT, .f = x / y}; break;
    case CT_OP_FLOORDIV:
        if (ints) {
            int64_t q = xi / yi;
            if ((xi % yi != 0) && ((xi < 0) != (yi < 0))) q--;
            *out = v_int(q);
        } else
            *out = (Val){.kind = V_FLOAT, .f = floor(x / y)};
        break;
    case CT_OP_MOD:
        if (ints) {
            int64_t m = xi % yi;
            if (m != 0 && ((m < 0) != (yi < 0))) m += yi;
            *out = v_int(m);
        } else {
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            *out = (Val){.kind = V_FLOAT, .f = m};
        }
        break;
    default: /* CT_OP_POW */
        if (ints && yi >= 0 && yi < 64) {
            int64_t p = 1;
            for (int64_t i = 0; i < yi; i++) p *= xi;
            *out = v_int(p);
        } else
            *out = (Val){.kind = V_FLOAT, .f = pow(x, y)};
    }
    return 0;
}

int ct_compare(Render *r, int op, const Val *a, const Val *b, int *res, int line) {
    if (op == CT_OP_EQ || op == CT_OP_NE) {
        if (ct_equal(r, a, b, res, line)) return -1;
        *res = *res == (op == CT_OP_EQ);
        return 0;
    }
    if (op == CT_OP_IN || op == CT_OP_NOTIN) {
        int found = 0;
        if (b->kind == V_STR) {
            if (a->kind != V_STR) return ct_fail(r, line, "'in <string>' needs a string on the left, not %s", v_typename(a));
            found = a->s.n == 0 || memmem(b->s.p, b->s.n, a->s.p, a->s.n) != NULL;
        } else if (b->kind == V_LIST) {
            List *items;
            if (ct_iterate(r, b, &items, line)) return -1;
            for (size_t i = 0; i < items->n && !found; i++)
                if (ct_equal(r, a, &items->v[i], &found, line)) return -1;
            if (found && b->l->flavor == L_GENERATOR) b->l->consumed = 2; /* stopped inside it */
        } else if (b->kind == V_DICT) {
            found = a->kind == V_STR && dict_get(b->d, a->s) != NULL;
        } else if (b->kind == V_UNDEF) {
            found = 0; /* Jinja's undefined iterates as empty */
        } else
            return ct_fail(r, line, "'in' needs a string, list or dict on the right, not %s", v_typename(b));
        *res = found == (op == CT_OP_IN);
        return 0;
    }
    double c;
    if (a->kind == V_STR && b->kind == V_STR) {
        size_t m = a->s.n < b->s.n ? a->s.n : b->s.n;
        int k = memcmp(a->s.p, b->s.p, m);
        c = k ? k : (double)a->s.n - (double)b->s.n;
    } else if ((a->kind == V_INT || a->kind == V_FLOAT || a->kind == V_BOOL) &&
               (b->kind == V_INT || b->kind == V_FLOAT || b->kind == V_BOOL)) {
        if (a->kind != V_FLOAT && b->kind != V_FLOAT) {
            int64_t x = a->kind == V_INT ? a->i : a->b, y = b->kind == V_INT ? b->i : b->b;
            c = x < y ? -1 : x > y;
        } else {
            double x = a->kind == V_FLOAT ? a->f : a->kind == V_INT ? (double)a->i : a->b;
            double y = b->kind == V_FLOAT ? b->f : b->kind == V_INT ? (double)b->i : b->b;
            c = x < y ? -1 : x > y;
        }
    } else
        return ct_fail(r, line, "cannot compare %s with %s", v_typename(a), v_typename(b));
    *res = op == CT_OP_LT ? c < 0 : op == CT_OP_GT ? c > 0 : op == CT_OP_LE ? c <= 0 : c >= 0;
    return 0;
}

int ct_eval(Render *r, const CtNode *nd, Val *out) {
    if (ct_step(r, nd->line)) return -1;
    if (++r->depth > CHATTMPL_MAX_DEPTH) {
        r->depth--;
        return ct_fail(r, nd->line, "evaluation nests deeper than %d", CHATTMPL_MAX_DEPTH);
    }
    int rc = 0;
    Val a, b;
    switch (nd->kind) {
    case CT_STR: *out = v_str(str_of(nd->s, nd->n)); break;
    case CT_INT: *out = v_int(nd->i); break;
    case CT_FLOAT: *out = (Val){.kind = V_FLOAT, .f = nd->f}; break;
    case CT_BOOL: *out = v_bool((int)nd->i); break;
    case CT_NONE: *out = v_none(); break;
    case CT_NAME: {
        Val *v = ct_lookup(r, str_lit(nd->s));
        if (v) *out = *v;
        else if (!strcmp(nd->s, "raise_exception") || !strcmp(nd->s, "namespace") || !strcmp(nd->s, "range") ||
                 !strcmp(nd->s, "strftime_now"))
            *out = (Val){.kind = V_FUNC, .s = str_lit(nd->s)};
        else
            *out = ct_undefined(str_lit(nd->s));
        break;
    }
    case CT_LIST: case CT_DICT: {
        int dict = nd->kind == CT_DICT;
        List *l = dict ? NULL : list_new(&r->a, nd->nargs);
        Dict *d = dict ? dict_new(&r->a) : NULL;
        if (!l && !d) { rc = ct_oom(r, nd->line); break; }
        for (size_t i = 0; i < nd->nargs && !rc; i += dict ? 2 : 1) {
            if ((rc = ct_eval(r, nd->args[i], &a))) break;
            if (dict) {
                if (a.kind != V_STR) { rc = ct_fail(r, nd->line, "dict keys must be strings, not %s", v_typename(&a)); break; }
                if ((rc = ct_eval(r, nd->args[i + 1], &b))) break;
                if (!dict_set(&r->a, d, a.s, b)) rc = ct_oom(r, nd->line);
            } else
                list_push(&r->a, l, a);
        }
        if (!rc && l) l->flavor = nd->i ? L_TUPLE : L_LIST;
        if (!rc) *out = dict ? (Val){.kind = V_DICT, .d = d} : (Val){.kind = V_LIST, .l = l};
        break;
    }
    case CT_ATTR: rc = ct_eval(r, nd->a, &a) || ct_getattr(r, &a, str_lit(nd->s), out, nd->line); break;
    case CT_INDEX: rc = ct_eval(r, nd->a, &a) || ct_eval(r, nd->b, &b) || ct_index(r, &a, &b, out, nd->line); break;
    case CT_SLICE: rc = ct_eval(r, nd->a, &a) || ct_eval_slice(r, nd, &a, out); break;
    case CT_CALL:
        if (nd->a->kind == CT_NAME) {
            Val *v = ct_lookup(r, str_lit(nd->a->s));
            if (v && v->kind == V_MACRO) rc = ct_call_macro(r, nd, v, out);
            else if (v) rc = ct_fail(r, nd->line, "'%s' is a %s, not a function", nd->a->s, v_typename(v));
            else if (strcmp(nd->a->s, "raise_exception") && strcmp(nd->a->s, "namespace") && strcmp(nd->a->s, "range") &&
                     strcmp(nd->a->s, "strftime_now"))
                rc = ct_fail(r, nd->line, "the macro '%s' is not defined here", nd->a->s);
            else rc = ct_call_global(r, nd, nd->a->s, out);
        } else { /* obj.method(...): the parser allows only these two forms */
            Val obj;
            rc = ct_eval(r, nd->a->a, &obj) || ct_getattr(r, &obj, str_lit(nd->a->s), &a, nd->line);
            if (!rc && a.kind != V_METHOD) rc = ct_fail(r, nd->line, "%s has no method '%s'", v_typename(&obj), nd->a->s);
            if (!rc) rc = ct_call_method(r, nd, &a, out);
        }
        break;
    case CT_FILTER: rc = ct_eval_filter(r, nd, out); break;
    case CT_TEST: {
        Val args[2] = {0};
        int res = 0;
        rc = ct_eval(r, nd->a, &a) || ct_eval_args(r, nd, args, 2) ||
             ct_run_test(r, nd->s, &a, args, nd->nargs, &res, nd->line);
        if (!rc) *out = v_bool(res != (int)nd->i);
        break;
    }
    case CT_NOT: rc = ct_eval(r, nd->a, &a); if (!rc) *out = v_bool(!v_truthy(&a)); break;
    case CT_NEG:
        rc = ct_eval(r, nd->a, &a);
        if (!rc) rc = ct_arith(r, CT_OP_SUB, &(Val){.kind = V_INT, .i = 0}, &a, out, nd->line);
        break;
    case CT_BINOP: rc = ct_eval(r, nd->a, &a) || ct_eval(r, nd->b, &b) || ct_arith(r, nd->op, &a, &b, out, nd->line); break;
    case CT_CMP: {
        int res = 0;
        rc = ct_eval(r, nd->a, &a) || ct_eval(r, nd->b, &b) || ct_compare(r, nd->op, &a, &b, &res, nd->line);
        if (!rc) *out = v_bool(res);
        break;
    }
    case CT_AND: case CT_OR:
        rc = ct_eval(r, nd->a, &a);
        if (!rc) {
            if (v_truthy(&a) == (nd->kind == CT_OR)) *out = a;
            else rc = ct_eval(r, nd->b, out);
        }
        break;
    case CT_COND:
        rc = ct_eval(r, nd->b, &b);
        if (!rc) {
            if (v_truthy(&b)) rc = ct_eval(r, nd->a, out);
            else if (nd->c) rc = ct_eval(r, nd->c, out);
            else *out = ct_undefined(str_lit("else"));
        }
        break;
    default: rc = ct_fail(r, nd->line, "a statement where a value belongs");
    }
    r->depth--;
    return rc ? -1 : 0;
}

/* ---- statements ---- */

static int ct_emit(Render *r, const Val *v, int line) {
    Str s;
    if (v->kind == V_UNDEF) return 0;
    if (ct_to_str(r, v, &s, line)) return -1;
    if (r->out.n + s.n > (size_t)CHATTMPL_MAX_OUTPUT)
        return ct_fail(r, line, "the rendered text is longer than %d bytes", CHATTMPL_MAX_OUTPUT);
    return buf_put(&r->out, s.p, s.tag, s.n) ? 0 : ct_oom(r, line);
}

static int ct_exec_for(Render *r, const CtNode *nd) {
    Val seq;
    List *items, *kept;
    if (ct_eval(r, nd->a, &seq) || ct_iterate(r, &seq, &items, nd->line)) return -1;
    Frame *outer = r->frame;
    kept = items;
    if (nd->b) { /* the loop's own filter runs before loop.length is known */
        if (!(kept = list_new(&r->a, 0))) return ct_oom(r, nd->line);
        for (size_t i = 0; i < items->n; i++) {
            Frame f = {dict_new(&r->a), outer};
            Val keep;
            if (!f.vars || !dict_set(&r->a, f.vars, str_lit(nd->s), items->v[i])) return ct_oom(r, nd->line);
            if (nd->s2 && items->v[i].kind == V_LIST && items->v[i].l->n == 2) {
                dict_set(&r->a, f.vars, str_lit(nd->s), items->v[i].l->v[0]);
                dict_set(&r->a, f.vars, str_lit(nd->s2), items->v[i].l->v[1]);
            }
            r->frame = &f;
            int rc = ct_eval(r, nd->b, &keep);
            r->frame = outer;
            if (rc) return -1;
            if (v_truthy(&keep) && !list_push(&r->a, kept, items->v[i])) return ct_oom(r, nd->line);
        }
    }
    size_t n = kept->n;
    for (size_t i = 0; i < n; i++) {
        Frame f = {dict_new(&r->a), outer};
        Dict *loop = dict_new(&r->a);
        if (!f.vars || !loop) return ct_oom(r, nd->line);
        loop->is_namespace = 0;
        Val item = kept->v[i];
        int ok = dict_set(&r->a, loop, str_lit("index0"), v_int((int64_t)i)) &&
                 dict_set(&r->a, loop, str_lit("index"), v_int((int64_t)i + 1)) &&
                 dict_set(&r->a, loop, str_lit("revindex0"), v_int((int64_t)(n - 1 - i))) &&
                 dict_set(&r->a, loop, str_lit("revindex"), v_int((int64_t)(n - i))) &&
                 dict_set(&r->a, loop, str_lit("first"), v_bool(i == 0)) &&
                 dict_set(&r->a, loop, str_lit("last"), v_bool(i + 1 == n)) &&
                 dict_set(&r->a, loop, str_lit("length"), v_int((int64_t)n)) &&
                 (i == 0 || dict_set(&r->a, loop, str_lit("previtem"), kept->v[i - 1])) &&
                 (i + 1 == n || dict_set(&r->a, loop, str_lit("nextitem"), kept->v[i + 1])) &&
                 dict_set(&r->a, f.vars, str_lit("loop"), (Val){.kind = V_DICT, .d = loop});
        if (nd->s2) {
            if (item.kind != V_LIST || item.l->n != 2)
                return ct_fail(r, nd->line, "cannot unpack %s into '%s, %s'", v_typename(&item), nd->s, nd->s2);
            ok = ok && dict_set(&r->a, f.vars, str_lit(nd->s), item.l->v[0]) &&
                 dict_set(&r->a, f.vars, str_lit(nd->s2), item.l->v[1]);
        } else
            ok = ok && dict_set(&r->a, f.vars, str_lit(nd->s), item);
        if (!ok) return ct_oom(r, nd->line);
        r->frame = &f;
        int rc = ct_exec_block(r, nd->body);
        r->frame = outer;
        if (rc) return -1;
        int ctl = r->control;
        r->control = 0;
        if (ctl == 1) break;
    }
    if (n == 0 && nd->orelse) return ct_exec_block(r, nd->orelse);
    return 0;
}

int ct_exec_block(Render *r, const CtNode *nd) {
    if (++r->depth > CHATTMPL_MAX_DEPTH) {
        r->depth--;
        return ct_fail(r, nd ? nd->line : 0, "blocks nest deeper than %d", CHATTMPL_MAX_DEPTH);
    }
    int rc = 0;
    for (; nd && !rc && !r->control; nd = nd->next) {
        if ((rc = ct_step(r, nd->line))) break;
        Val v;
        switch (nd->kind) {
        case CT_TEXT:
            if (r->out.n + nd->n > (size_t)CHATTMPL_MAX_OUTPUT)
                rc = ct_fail(r, nd->line, "the rendered text is longer than %d bytes", CHATTMPL_MAX_OUTPUT);
            else if (!buf_put(&r->out, nd->s, NULL, nd->n))
                rc = ct_oom(r, nd->line);
            break;
        case CT_OUTPUT: rc = ct_eval(r, nd->a, &v) || ct_emit(r, &v, nd->line); break;
        case CT_IF:
            rc = ct_eval(r, nd->a, &v);
            if (!rc) rc = ct_exec_block(r, v_truthy(&v) ? nd->body : nd->orelse);
            break;
        case CT_FOR: rc = ct_exec_for(r, nd); break;
        case CT_SET:
            rc = ct_eval(r, nd->a, &v);
            if (rc) break;
            if (nd->s2) {
                Val *ns = ct_lookup(r, str_lit(nd->s));
                if (!ns || ns->kind != V_DICT || !ns->d->is_namespace)
                    rc = ct_fail(r, nd->line, "cannot set '%s.%s': '%s' is not a namespace", nd->s, nd->s2, nd->s);
                else if (!dict_set(&r->a, ns->d, str_lit(nd->s2), v))
                    rc = ct_oom(r, nd->line);
            } else if (!dict_set(&r->a, r->frame->vars, str_lit(nd->s), v))
                rc = ct_oom(r, nd->line);
            break;
        case CT_SETBLOCK: {
            Buf saved = r->out;
            r->out = ct_buf(r);
            r->capturing++;
            rc = ct_exec_block(r, nd->body);
            r->capturing--;
            v = v_str(buf_str(&r->out));
            r->out = saved;
            if (!rc && !dict_set(&r->a, r->frame->vars, str_lit(nd->s), v)) rc = ct_oom(r, nd->line);
            break;
        }
        case CT_GENERATION: {
            size_t start = r->out.n;
            rc = ct_exec_block(r, nd->body);
            if (rc || r->capturing) break;
            if (r->ngen + 2 > r->capgen) {
                size_t cap = r->capgen ? r->capgen * 2 : 16;
                size_t *ng = ARENA_NEWN(&r->a, size_t, cap);
                if (!ng) { rc = ct_oom(r, nd->line); break; }
                if (r->ngen) memcpy(ng, r->gen, r->ngen * sizeof *ng);
                r->gen = ng, r->capgen = cap;
            }
            r->gen[r->ngen++] = start;
            r->gen[r->ngen++] = r->out.n;
            break;
        }
        case CT_MACRO:
            v = (Val){.kind = V_MACRO, .macro = {nd, r->frame}};
            if (!dict_set(&r->a, r->frame->vars, str_lit(nd->s), v)) rc = ct_oom(r, nd->line);
            break;
        case CT_BREAK: r->control = 1; break;
        case CT_CONTINUE: r->control = 2; break;
        default: rc = ct_fail(r, nd->line, "a value where a statement belongs");
        }
    }
    r->depth--;
    return rc ? -1 : 0;
}

