/* chattmpl: loading templates and special tokens, and rendering the tree
 * chattmpl_parse.c builds (see chattmpl.h). A render owns one arena for
 * every value it makes; the text and ranges it returns are copied out. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chattmpl_impl.h"
#include "chattmpl_value.h"
#include "json.h"

/* ---- the render's state ---- */

typedef struct Frame Frame;
struct Frame {
    Dict *vars;
    Frame *parent;
};

typedef struct Render {
    const ChatTemplate *t;
    Arena a;
    Frame *frame;
    Buf out;
    long steps;
    int depth;
    int control; /* 1: break, 2: continue */
    int rc;      /* 0, -1, CHATTMPL_RAISED */
    char *err;
    size_t errlen;
} Render;

__attribute__((format(printf, 3, 4))) static int fail(Render *r, int line, const char *fmt, ...) {
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

static int oom(Render *r, int line) { return fail(r, line, "out of memory (more than %d bytes)", CHATTMPL_MAX_MEMORY); }

static int step(Render *r, int line) {
    if (++r->steps > CHATTMPL_MAX_STEPS) return fail(r, line, "the template ran more than %d steps", CHATTMPL_MAX_STEPS);
    if (r->a.failed || r->a.used_total > (size_t)CHATTMPL_MAX_MEMORY) return oom(r, line);
    return 0;
}

static Val *lookup(Render *r, Str name) {
    for (Frame *f = r->frame; f; f = f->parent) {
        Val *v = dict_get(f->vars, name);
        if (v) return v;
    }
    return NULL;
}

static Buf new_buf(Render *r) { return (Buf){.a = &r->a}; }

/* A value as a string (Python's str()). */
static int to_str(Render *r, const Val *v, Str *out, int line) {
    if (v->kind == V_STR) {
        *out = v->s;
        return 0;
    }
    if (v->kind == V_METHOD || v->kind == V_FUNC) return fail(r, line, "'%.*s' is a function, not a value", (int)v->s.n, v->s.p);
    Buf b = new_buf(r);
    if (v_to_str(&b, v)) return oom(r, line);
    *out = buf_str(&b);
    return 0;
}

static int need_str(Render *r, const Val *v, const char *what, int line) {
    if (v->kind == V_STR) return 0;
    return fail(r, line, "%s needs a string, not %s", what, v_typename(v));
}

static Val undefined(Str name) { return (Val){.kind = V_UNDEF, .s = name}; }

static int undefined_error(Render *r, const Val *v, int line) {
    return fail(r, line, "'%.*s' is undefined", (int)v->s.n, v->s.p);
}

/* ---- expressions ---- */

static int eval(Render *r, const CtNode *nd, Val *out);

static int eval_args(Render *r, const CtNode *nd, Val *args, size_t max) {
    if (nd->nargs > max) return fail(r, nd->line, "'%s' takes at most %zu arguments, not %zu", nd->s ? nd->s : "call", max, nd->nargs);
    for (size_t i = 0; i < nd->nargs; i++)
        if (eval(r, nd->args[i], &args[i])) return -1;
    return 0;
}

/* A keyword argument by name, or the positional one at pos, or NULL. */
static int arg_or_kw(Render *r, const CtNode *nd, size_t pos, const char *kw, Val *out, int *present) {
    *present = 0;
    for (size_t i = 0; i < nd->nkw; i++)
        if (!strcmp(nd->kwnames[i], kw)) {
            *present = 1;
            return eval(r, nd->kwargs[i], out);
        }
    if (pos < nd->nargs) {
        *present = 1;
        return eval(r, nd->args[pos], out);
    }
    return 0;
}

static int no_kwargs(Render *r, const CtNode *nd, const char *what) {
    if (nd->nkw) return fail(r, nd->line, "%s takes no argument '%s'", what, nd->kwnames[0]);
    return 0;
}

static int getattr_val(Render *r, const Val *obj, Str name, Val *out, int line) {
    static const char *const STR_METHODS[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split",
                                              "replace", "upper", "lower", "title", "capitalize", NULL};
    static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
    const char *const *methods = obj->kind == V_STR ? STR_METHODS
                                 : obj->kind == V_DICT && !obj->d->is_namespace ? DICT_METHODS : NULL;
    for (; methods && *methods; methods++)
        if (str_eq(name, *methods)) {
            Val *self = ARENA_NEW(&r->a, Val);
            if (!self) return oom(r, line);
            *self = *obj;
            *out = (Val){.kind = V_METHOD, .s = name, .self = self};
            return 0;
        }
    if (obj->kind == V_UNDEF) return fail(r, line, "'%.*s' is undefined (reading its attribute '%.*s')", (int)obj->s.n, obj->s.p, (int)name.n, name.p);
    if (obj->kind == V_DICT) {
        Val *v = dict_get(obj->d, name);
        *out = v ? *v : undefined(name);
        return 0;
    }
    *out = undefined(name);
    return 0;
}

/* Python's slice.indices for a length n. */
static void slice_indices(int64_t n, const Val *sv[3], int64_t *start, int64_t *stop, int64_t *stepv) {
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

static int eval_slice(Render *r, const CtNode *nd, const Val *obj, Val *out) {
    Val parts[3];
    const Val *sv[3] = {0};
    for (int k = 0; k < 3; k++) {
        if (!nd->args[k]) continue;
        if (eval(r, nd->args[k], &parts[k])) return -1;
        if (parts[k].kind == V_NONE) continue;
        if (parts[k].kind != V_INT) return fail(r, nd->line, "slice indices must be integers, not %s", v_typename(&parts[k]));
        sv[k] = &parts[k];
    }
    if (sv[2] && sv[2]->i == 0) return fail(r, nd->line, "slice step cannot be zero");
    if (obj->kind != V_LIST && obj->kind != V_STR) return fail(r, nd->line, "cannot slice %s", v_typename(obj));
    int64_t n = obj->kind == V_LIST ? (int64_t)obj->l->n : (int64_t)utf8_count(obj->s), a, b, st;
    slice_indices(n, sv, &a, &b, &st);
    if (obj->kind == V_STR && st == 1) {
        *out = v_str(a < b ? str_slice(obj->s, utf8_offset(obj->s, (size_t)a), utf8_offset(obj->s, (size_t)b))
                           : str_of("", 0));
        return 0;
    }
    List *l = obj->kind == V_LIST ? list_new(&r->a, 0) : NULL;
    Buf b2 = new_buf(r);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
        if (step(r, nd->line)) return -1;
        if (l) {
            if (!list_push(&r->a, l, obj->l->v[i])) return oom(r, nd->line);
        } else {
            size_t o = utf8_offset(obj->s, (size_t)i), e = utf8_offset(obj->s, (size_t)i + 1);
            if (!buf_put(&b2, obj->s.p + o, obj->s.tag ? obj->s.tag + o : NULL, e - o)) return oom(r, nd->line);
        }
    }
    if (l) *out = (Val){.kind = V_LIST, .l = l};
    else *out = v_str(buf_str(&b2));
    return 0;
}

static int eval_index(Render *r, const Val *obj, const Val *ix, Val *out, int line) {
    if (obj->kind == V_UNDEF) return fail(r, line, "'%.*s' is undefined (reading an item of it)", (int)obj->s.n, obj->s.p);
    if (obj->kind == V_DICT) {
        if (ix->kind != V_STR) {
            *out = undefined(str_lit("item"));
            return 0;
        }
        return getattr_val(r, obj, ix->s, out, line) || (out->kind == V_METHOD && (*out = undefined(ix->s), 0));
    }
    if ((obj->kind == V_LIST || obj->kind == V_STR) && ix->kind == V_INT) {
        int64_t n = obj->kind == V_LIST ? (int64_t)obj->l->n : (int64_t)utf8_count(obj->s), i = ix->i;
        if (i < 0) i += n;
        if (i < 0 || i >= n) {
            *out = undefined(str_lit("item"));
            return 0;
        }
        if (obj->kind == V_LIST) *out = obj->l->v[i];
        else *out = v_str(str_slice(obj->s, utf8_offset(obj->s, (size_t)i), utf8_offset(obj->s, (size_t)i + 1)));
        return 0;
    }
    if (ix->kind == V_STR) return getattr_val(r, obj, ix->s, out, line);
    *out = undefined(str_lit("item"));
    return 0;
}

static int arith(Render *r, int op, const Val *a, const Val *b, Val *out, int line) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    if (op == CT_OP_CONCAT) {
        Str sa, sb;
        if (to_str(r, a, &sa, line) || to_str(r, b, &sb, line)) return -1;
        Buf bb = new_buf(r);
        if (!buf_put(&bb, sa.p, sa.tag, sa.n) || !buf_put(&bb, sb.p, sb.tag, sb.n)) return oom(r, line);
        *out = v_str(buf_str(&bb));
        return 0;
    }
    if (op == CT_OP_ADD && a->kind == V_STR && b->kind == V_STR) {
        Buf bb = new_buf(r);
        if (!buf_put(&bb, a->s.p, a->s.tag, a->s.n) || !buf_put(&bb, b->s.p, b->s.tag, b->s.n)) return oom(r, line);
        *out = v_str(buf_str(&bb));
        return 0;
    }
    if (op == CT_OP_ADD && a->kind == V_LIST && b->kind == V_LIST) {
        List *l = list_new(&r->a, a->l->n + b->l->n);
        if (!l) return oom(r, line);
        for (size_t i = 0; i < a->l->n; i++) list_push(&r->a, l, a->l->v[i]);
        for (size_t i = 0; i < b->l->n; i++) list_push(&r->a, l, b->l->v[i]);
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    if (op == CT_OP_MUL && ((a->kind == V_STR && b->kind == V_INT) || (a->kind == V_INT && b->kind == V_STR))) {
        const Val *s = a->kind == V_STR ? a : b;
        int64_t k = a->kind == V_INT ? a->i : b->i;
        Buf bb = new_buf(r);
        for (int64_t i = 0; i < k; i++)
            if (step(r, line) || !buf_put(&bb, s->s.p, s->s.tag, s->s.n)) return r->rc ? -1 : oom(r, line);
        *out = v_str(buf_str(&bb));
        return 0;
    }
    int ints = (a->kind == V_INT || a->kind == V_BOOL) && (b->kind == V_INT || b->kind == V_BOOL);
    if (!(a->kind == V_INT || a->kind == V_BOOL || a->kind == V_FLOAT) ||
        !(b->kind == V_INT || b->kind == V_BOOL || b->kind == V_FLOAT))
        return fail(r, line, "unsupported operand types for %s: '%s' and '%s'", names[op], v_typename(a), v_typename(b));
    double x = a->kind == V_FLOAT ? a->f : a->kind == V_INT ? (double)a->i : a->b;
    double y = b->kind == V_FLOAT ? b->f : b->kind == V_INT ? (double)b->i : b->b;
    int64_t xi = a->kind == V_INT ? a->i : a->b, yi = b->kind == V_INT ? b->i : b->b;
    if ((op == CT_OP_DIV || op == CT_OP_FLOORDIV || op == CT_OP_MOD) && y == 0) return fail(r, line, "division by zero");
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

static int compare(Render *r, int op, const Val *a, const Val *b, int *res, int line) {
    if (op == CT_OP_EQ || op == CT_OP_NE) {
        *res = v_equal(a, b) == (op == CT_OP_EQ);
        return 0;
    }
    if (op == CT_OP_IN || op == CT_OP_NOTIN) {
        int found = 0;
        if (b->kind == V_STR) {
            if (a->kind != V_STR) return fail(r, line, "'in <string>' needs a string on the left, not %s", v_typename(a));
            found = a->s.n == 0 || memmem(b->s.p, b->s.n, a->s.p, a->s.n) != NULL;
        } else if (b->kind == V_LIST) {
            for (size_t i = 0; i < b->l->n && !found; i++) found = v_equal(a, &b->l->v[i]);
        } else if (b->kind == V_DICT) {
            found = a->kind == V_STR && dict_get(b->d, a->s) != NULL;
        } else if (b->kind == V_UNDEF)
            return undefined_error(r, b, line);
        else
            return fail(r, line, "'in' needs a string, list or dict on the right, not %s", v_typename(b));
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
        return fail(r, line, "cannot compare %s with %s", v_typename(a), v_typename(b));
    *res = op == CT_OP_LT ? c < 0 : op == CT_OP_GT ? c > 0 : op == CT_OP_LE ? c <= 0 : c >= 0;
    return 0;
}

static int run_test(Render *r, const char *name, const Val *v, const Val *args, size_t nargs, int *res, int line) {
    if ((!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") || !strcmp(name, "ne") ||
         !strcmp(name, "!=") || !strcmp(name, "in")) && nargs != 1)
        return fail(r, line, "the test '%s' takes one argument", name);
    if (!strcmp(name, "defined")) *res = v->kind != V_UNDEF;
    else if (!strcmp(name, "undefined")) *res = v->kind == V_UNDEF;
    else if (!strcmp(name, "none")) *res = v->kind == V_NONE;
    else if (!strcmp(name, "string")) *res = v->kind == V_STR;
    else if (!strcmp(name, "mapping")) *res = v->kind == V_DICT && !v->d->is_namespace;
    else if (!strcmp(name, "sequence") || !strcmp(name, "iterable"))
        *res = v->kind == V_STR || v->kind == V_LIST || (v->kind == V_DICT && !v->d->is_namespace);
    else if (!strcmp(name, "number")) *res = v->kind == V_INT || v->kind == V_FLOAT || v->kind == V_BOOL;
    else if (!strcmp(name, "integer")) *res = v->kind == V_INT;
    else if (!strcmp(name, "float")) *res = v->kind == V_FLOAT;
    else if (!strcmp(name, "boolean")) *res = v->kind == V_BOOL;
    else if (!strcmp(name, "true")) *res = v->kind == V_BOOL && v->b;
    else if (!strcmp(name, "false")) *res = v->kind == V_BOOL && !v->b;
    else if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==")) *res = v_equal(v, &args[0]);
    else if (!strcmp(name, "ne") || !strcmp(name, "!=")) *res = !v_equal(v, &args[0]);
    else if (!strcmp(name, "in")) return compare(r, CT_OP_IN, v, &args[0], res, line);
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (v->kind != V_INT) return fail(r, line, "the test '%s' needs an integer, not %s", name, v_typename(v));
        *res = (v->i % 2 != 0) == (name[0] == 'o');
    } else { /* lower, upper */
        if (v->kind != V_STR) return fail(r, line, "the test '%s' needs a string, not %s", name, v_typename(v));
        int has_cased = 0, ok = 1;
        for (size_t i = 0; i < v->s.n; i++) {
            unsigned char c = (unsigned char)v->s.p[i];
            if (c >= 0x80) return fail(r, line, "the test '%s' of non-ASCII text is not supported", name);
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) has_cased = 1;
            if (name[0] == 'l' ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) ok = 0;
        }
        *res = has_cased && ok;
    }
    return 0;
}

/* upper, lower, capitalize, title: ASCII only, so never a different
 * casing from Python's. */
static int change_case(Render *r, const Val *v, const char *how, Val *out, int line) {
    if (need_str(r, v, how, line)) return -1;
    char *p = arena_alloc(&r->a, v->s.n + 1);
    if (!p) return oom(r, line);
    int word_start = 1;
    for (size_t i = 0; i < v->s.n; i++) {
        unsigned char c = (unsigned char)v->s.p[i];
        if (c >= 0x80) return fail(r, line, "'%s' of non-ASCII text is not supported", how);
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int up = how[0] == 'u' || ((how[0] == 'c' && i == 0) || (how[0] == 't' && word_start));
        if (how[0] == 't' && !alpha) up = 0;
        p[i] = (char)(alpha ? (up ? (c & ~0x20) : (c | 0x20)) : c);
        word_start = !alpha;
    }
    *out = v_str((Str){p, v->s.tag, v->s.n});
    return 0;
}

static int str_replace(Render *r, const Val *v, const Val *old, const Val *new, const Val *count, Val *out, int line) {
    if (need_str(r, v, "replace", line) || need_str(r, old, "replace", line) || need_str(r, new, "replace", line)) return -1;
    int64_t max = count && count->kind == V_INT ? count->i : -1;
    Buf b = new_buf(r);
    size_t i = 0;
    if (old->s.n == 0) { /* Python puts new between every character */
        for (size_t k = 0; k <= v->s.n; k++) {
            if (k == v->s.n || ((unsigned char)v->s.p[k] & 0xC0) != 0x80) { /* before each character, and at the end */
                if (max-- != 0 && !buf_put(&b, new->s.p, new->s.tag, new->s.n)) return oom(r, line);
            }
            if (k < v->s.n && !buf_put(&b, v->s.p + k, v->s.tag ? v->s.tag + k : NULL, 1)) return oom(r, line);
        }
        *out = v_str(buf_str(&b));
        return 0;
    }
    while (i <= v->s.n) {
        const char *hit = max != 0 ? memmem(v->s.p + i, v->s.n - i, old->s.p, old->s.n) : NULL;
        size_t j = hit ? (size_t)(hit - v->s.p) : v->s.n;
        if (!buf_put(&b, v->s.p + i, v->s.tag ? v->s.tag + i : NULL, j - i)) return oom(r, line);
        if (!hit) break;
        if (!buf_put(&b, new->s.p, new->s.tag, new->s.n)) return oom(r, line);
        i = j + old->s.n;
        if (max > 0) max--;
        if (step(r, line)) return -1;
    }
    *out = v_str(buf_str(&b));
    return 0;
}

static int str_split(Render *r, const Val *v, const Val *sep, const Val *maxv, Val *out, int line) {
    if (need_str(r, v, "split", line)) return -1;
    if (sep && sep->kind != V_NONE && need_str(r, sep, "split", line)) return -1;
    if (sep && sep->kind == V_STR && sep->s.n == 0) return fail(r, line, "split: empty separator");
    int64_t max = maxv && maxv->kind == V_INT ? maxv->i : -1;
    List *l = list_new(&r->a, 0);
    if (!l) return oom(r, line);
    Str s = v->s;
    if (!sep || sep->kind == V_NONE) {
        size_t i = 0;
        for (;;) {
            size_t w;
            while (i < s.n && (w = ws_at(s, i))) i += w;
            if (i >= s.n) break;
            size_t j = i;
            if (max == 0) {
                Str rest = str_strip(str_slice(s, i, s.n), NULL, 0, 1);
                if (!list_push(&r->a, l, v_str(rest))) return oom(r, line);
                break;
            }
            while (j < s.n && !ws_at(s, j)) j++;
            if (!list_push(&r->a, l, v_str(str_slice(s, i, j)))) return oom(r, line);
            if (max > 0) max--;
            i = j;
            if (step(r, line)) return -1;
        }
    } else {
        size_t i = 0;
        for (;;) {
            const char *hit = max != 0 ? memmem(s.p + i, s.n - i, sep->s.p, sep->s.n) : NULL;
            size_t j = hit ? (size_t)(hit - s.p) : s.n;
            if (!list_push(&r->a, l, v_str(str_slice(s, i, j)))) return oom(r, line);
            if (!hit) break;
            i = j + sep->s.n;
            if (max > 0) max--;
            if (step(r, line)) return -1;
        }
    }
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

static int strip_call(Render *r, const Val *v, const Val *chars, int left, int right, Val *out, int line) {
    if (need_str(r, v, left && right ? "strip" : left ? "lstrip" : "rstrip", line)) return -1;
    if (chars && chars->kind != V_NONE && need_str(r, chars, "strip", line)) return -1;
    *out = v_str(str_strip(v->s, chars && chars->kind == V_STR ? &chars->s : NULL, left, right));
    return 0;
}

static int call_method(Render *r, const CtNode *nd, const Val *m, Val *out) {
    Val args[3] = {0};
    const Val *self = m->self;
    Str name = m->s;
    int line = nd->line;
    if (no_kwargs(r, nd, "a method") || eval_args(r, nd, args, 3)) return -1;
    size_t n = nd->nargs;
    if (str_eq(name, "startswith") || str_eq(name, "endswith")) {
        if (n != 1) return fail(r, line, "'%.*s' takes one argument", (int)name.n, name.p);
        int ends = name.p[0] == 'e', hit = 0;
        const Val *cands = &args[0];
        size_t nc = 1;
        if (args[0].kind == V_LIST) cands = args[0].l->v, nc = args[0].l->n;
        for (size_t k = 0; k < nc && !hit; k++) {
            if (need_str(r, &cands[k], "startswith/endswith", line)) return -1;
            Str p = cands[k].s;
            hit = p.n <= self->s.n && !memcmp(self->s.p + (ends ? self->s.n - p.n : 0), p.p, p.n);
        }
        *out = v_bool(hit);
        return 0;
    }
    if (str_eq(name, "strip") || str_eq(name, "lstrip") || str_eq(name, "rstrip"))
        return strip_call(r, self, n ? &args[0] : NULL, name.p[0] != 'r', name.p[0] != 'l', out, line);
    if (str_eq(name, "split")) return str_split(r, self, n ? &args[0] : NULL, n > 1 ? &args[1] : NULL, out, line);
    if (str_eq(name, "replace")) {
        if (n < 2) return fail(r, line, "'replace' takes two or three arguments");
        return str_replace(r, self, &args[0], &args[1], n > 2 ? &args[2] : NULL, out, line);
    }
    if (str_eq(name, "upper") || str_eq(name, "lower") || str_eq(name, "title") || str_eq(name, "capitalize")) {
        char how[16];
        snprintf(how, sizeof how, "%.*s", (int)name.n, name.p);
        return change_case(r, self, how, out, line);
    }
    Dict *d = self->d;
    if (str_eq(name, "get")) {
        if (n < 1) return fail(r, line, "'get' takes one or two arguments");
        Val *v = args[0].kind == V_STR ? dict_get(d, args[0].s) : NULL;
        *out = v ? *v : n > 1 ? args[1] : v_none();
        return 0;
    }
    List *l = list_new(&r->a, d->n);
    if (!l) return oom(r, line);
    for (size_t i = 0; i < d->n; i++) {
        Val item = v_str(d->k[i]);
        if (str_eq(name, "values")) item = d->v[i];
        else if (str_eq(name, "items")) {
            List *pair = list_new(&r->a, 2);
            if (!pair) return oom(r, line);
            list_push(&r->a, pair, v_str(d->k[i]));
            list_push(&r->a, pair, d->v[i]);
            item = (Val){.kind = V_LIST, .l = pair};
        }
        list_push(&r->a, l, item);
    }
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

static int call_global(Render *r, const CtNode *nd, const char *fn, Val *out) {
    int line = nd->line;
    if (!strcmp(fn, "namespace")) {
        Dict *d = dict_new(&r->a);
        if (!d) return oom(r, line);
        d->is_namespace = 1;
        for (size_t i = 0; i < nd->nargs; i++) {
            Val v;
            if (eval(r, nd->args[i], &v)) return -1;
            if (v.kind != V_DICT) return fail(r, line, "namespace() takes a dict or name=value arguments");
            for (size_t k = 0; k < v.d->n; k++)
                if (!dict_set(&r->a, d, v.d->k[k], v.d->v[k])) return oom(r, line);
        }
        for (size_t i = 0; i < nd->nkw; i++) {
            Val v;
            if (eval(r, nd->kwargs[i], &v)) return -1;
            if (!dict_set(&r->a, d, str_lit(nd->kwnames[i]), v)) return oom(r, line);
        }
        *out = (Val){.kind = V_DICT, .d = d};
        return 0;
    }
    Val args[3] = {0};
    if (no_kwargs(r, nd, fn) || eval_args(r, nd, args, 3)) return -1;
    if (!strcmp(fn, "raise_exception")) {
        Str msg = str_lit("");
        if (nd->nargs && to_str(r, &args[0], &msg, line)) return -1;
        r->rc = CHATTMPL_RAISED;
        snprintf(r->err, r->errlen, "%.*s", (int)msg.n, msg.p);
        return -1;
    }
    if (!strcmp(fn, "strftime_now")) {
        if (nd->nargs != 1 || need_str(r, &args[0], "strftime_now", line)) return -1;
        char fmt[256], buf[512];
        snprintf(fmt, sizeof fmt, "%.*s", (int)args[0].s.n, args[0].s.p);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t len = strftime(buf, sizeof buf, fmt, &tm);
        char *p = arena_strndup(&r->a, buf, len);
        if (!p) return oom(r, line);
        *out = v_str(str_of(p, len));
        return 0;
    }
    /* range */
    for (size_t i = 0; i < nd->nargs; i++)
        if (args[i].kind != V_INT) return fail(r, line, "range() needs integers, not %s", v_typename(&args[i]));
    int64_t a = 0, b = 0, st = 1;
    if (nd->nargs == 1) b = args[0].i;
    else if (nd->nargs >= 2) a = args[0].i, b = args[1].i;
    if (nd->nargs == 3) st = args[2].i;
    if (nd->nargs == 0 || st == 0) return fail(r, line, "range() needs one to three arguments and a non-zero step");
    List *l = list_new(&r->a, 0);
    if (!l) return oom(r, line);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
        if (step(r, line) || !list_push(&r->a, l, v_int(i))) return r->rc ? -1 : oom(r, line);
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

/* The items a filter or a for loop goes over: a list's, a dict's keys, a
 * string's characters; undefined is empty, as in Jinja. */
static int iterate(Render *r, const Val *v, List **out, int line) {
    if (v->kind == V_LIST) {
        *out = v->l;
        return 0;
    }
    List *l = list_new(&r->a, 0);
    if (!l) return oom(r, line);
    if (v->kind == V_DICT && !v->d->is_namespace) {
        for (size_t i = 0; i < v->d->n; i++)
            if (!list_push(&r->a, l, v_str(v->d->k[i]))) return oom(r, line);
    } else if (v->kind == V_STR) {
        for (size_t i = 0; i < v->s.n;) {
            size_t e = utf8_offset(str_slice(v->s, i, v->s.n), 1) + i;
            if (!list_push(&r->a, l, v_str(str_slice(v->s, i, e)))) return oom(r, line);
            i = e;
        }
    } else if (v->kind != V_UNDEF)
        return fail(r, line, "%s is not iterable", v_typename(v));
    *out = l;
    return 0;
}

static int filter_select(Render *r, const CtNode *nd, const Val *v, int attr, int reject, Val *out) {
    int line = nd->line;
    List *items, *l = list_new(&r->a, 0);
    if (!l || iterate(r, v, &items, line)) return r->rc ? -1 : oom(r, line);
    Val args[4] = {0};
    if (no_kwargs(r, nd, nd->s) || eval_args(r, nd, args, 4)) return -1;
    size_t first = attr ? 1 : 0;
    if (attr && (nd->nargs < 1 || args[0].kind != V_STR)) return fail(r, line, "'%s' needs an attribute name", nd->s);
    for (size_t i = 0; i < items->n; i++) {
        Val x = items->v[i];
        if (attr && eval_index(r, &x, &args[0], &x, line)) return -1;
        int keep;
        if (nd->nargs > first) {
            if (args[first].kind != V_STR) return fail(r, line, "'%s' needs a test name", nd->s);
            char tn[32];
            snprintf(tn, sizeof tn, "%.*s", (int)args[first].s.n, args[first].s.p);
            static const char *const tests[] = {"defined", "undefined", "none", "string", "mapping", "sequence",
                                                "iterable", "number", "integer", "float", "boolean", "true",
                                                "false", "equalto", "eq", "ne", "==", "!=", "odd", "even", "lower",
                                                "upper", "in", NULL};
            int known = 0;
            for (const char *const *t = tests; *t; t++) known |= !strcmp(*t, tn);
            if (!known) return fail(r, line, "the test '%s' is not supported", tn);
            if (run_test(r, tn, &x, &args[first + 1], nd->nargs - first - 1, &keep, line)) return -1;
        } else
            keep = v_truthy(&x);
        if (keep != reject && !list_push(&r->a, l, items->v[i])) return oom(r, line);
    }
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

static int eval_filter(Render *r, const CtNode *nd, Val *out) {
    Val v;
    int line = nd->line, present;
    const char *f = nd->s;
    if (eval(r, nd->a, &v)) return -1;
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr") || !strcmp(f, "select") || !strcmp(f, "reject"))
        return filter_select(r, nd, &v, strstr(f, "attr") != NULL, f[0] == 'r', out);
    if (!strcmp(f, "tojson")) {
        Val indent = {0};
        if (arg_or_kw(r, nd, 0, "indent", &indent, &present)) return -1;
        for (size_t i = 0; i < nd->nkw; i++)
            if (strcmp(nd->kwnames[i], "indent")) return fail(r, line, "tojson's argument '%s' is not supported", nd->kwnames[i]);
        if (present && indent.kind != V_INT && indent.kind != V_NONE) return fail(r, line, "tojson's indent must be an integer");
        Buf b = new_buf(r);
        int ind = present && indent.kind == V_INT ? (int)(indent.i < 0 ? 0 : indent.i > 64 ? 64 : indent.i) : -1;
        if (v_to_json(&b, &v, ind, 0, 0)) {
            if (r->a.failed) return oom(r, line);
            return fail(r, line, "tojson of %s", v.kind == V_UNDEF ? "an undefined value" : v_typename(&v));
        }
        *out = v_str(buf_str(&b));
        return 0;
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        Val dflt = {.kind = V_STR, .s = str_lit("")}, boolean = v_bool(0);
        if (arg_or_kw(r, nd, 0, "default_value", &dflt, &present) || arg_or_kw(r, nd, 1, "boolean", &boolean, &present)) return -1;
        *out = v.kind == V_UNDEF || (v_truthy(&boolean) && !v_truthy(&v)) ? dflt : v;
        return 0;
    }
    if (!strcmp(f, "join")) {
        Val sep = v_str(str_lit("")), attr = {0};
        int has_attr;
        if (arg_or_kw(r, nd, 0, "d", &sep, &present) || arg_or_kw(r, nd, 1, "attribute", &attr, &has_attr)) return -1;
        Str ss;
        List *items;
        if (to_str(r, &sep, &ss, line) || iterate(r, &v, &items, line)) return -1;
        Buf b = new_buf(r);
        for (size_t i = 0; i < items->n; i++) {
            Val x = items->v[i];
            Str xs;
            if (has_attr && eval_index(r, &x, &attr, &x, line)) return -1;
            if (to_str(r, &x, &xs, line)) return -1;
            if ((i && !buf_put(&b, ss.p, ss.tag, ss.n)) || !buf_put(&b, xs.p, xs.tag, xs.n)) return oom(r, line);
        }
        *out = v_str(buf_str(&b));
        return 0;
    }
    if (!strcmp(f, "map")) {
        Val attr = {0}, dflt = {0};
        int has_attr, has_dflt;
        if (nd->nargs) return fail(r, line, "map supports only attribute= (and default=)");
        if (arg_or_kw(r, nd, 99, "attribute", &attr, &has_attr) || arg_or_kw(r, nd, 99, "default", &dflt, &has_dflt)) return -1;
        if (!has_attr) return fail(r, line, "map supports only attribute= (and default=)");
        List *items, *l = list_new(&r->a, 0);
        if (!l) return oom(r, line);
        if (iterate(r, &v, &items, line)) return -1;
        for (size_t i = 0; i < items->n; i++) {
            Val x;
            if (eval_index(r, &items->v[i], &attr, &x, line)) return -1;
            if (x.kind == V_UNDEF && has_dflt) x = dflt;
            if (!list_push(&r->a, l, x)) return oom(r, line);
        }
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    Val args[3] = {0};
    if (no_kwargs(r, nd, f) || eval_args(r, nd, args, 3)) return -1;
    if (!strcmp(f, "trim")) return strip_call(r, &v, nd->nargs ? &args[0] : NULL, 1, 1, out, line);
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        *out = v_int(v.kind == V_STR ? (int64_t)utf8_count(v.s) : v.kind == V_LIST ? (int64_t)v.l->n
                     : v.kind == V_DICT ? (int64_t)v.d->n : 0);
        if (v.kind != V_STR && v.kind != V_LIST && v.kind != V_DICT && v.kind != V_UNDEF)
            return fail(r, line, "%s has no length", v_typename(&v));
        return 0;
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        Str s;
        if (to_str(r, &v, &s, line)) return -1;
        Val sv = v_str(s);
        return change_case(r, &sv, f, out, line);
    }
    if (!strcmp(f, "items")) {
        if (v.kind == V_UNDEF) {
            *out = (Val){.kind = V_LIST, .l = list_new(&r->a, 0)};
            return out->l ? 0 : oom(r, line);
        }
        if (v.kind != V_DICT || v.d->is_namespace) return fail(r, line, "items needs a dict, not %s", v_typename(&v));
        Val m = {.kind = V_METHOD, .s = str_lit("items"), .self = &v};
        CtNode none = {.line = line};
        return call_method(r, &none, &m, out);
    }
    if (!strcmp(f, "list")) {
        List *items, *l;
        if (iterate(r, &v, &items, line)) return -1;
        if (!(l = list_new(&r->a, items->n))) return oom(r, line);
        for (size_t i = 0; i < items->n; i++) list_push(&r->a, l, items->v[i]);
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        List *items;
        if (iterate(r, &v, &items, line)) return -1;
        *out = items->n ? items->v[f[0] == 'f' ? 0 : items->n - 1] : undefined(str_lit(f));
        return 0;
    }
    if (!strcmp(f, "reverse")) {
        List *items, *l;
        if (iterate(r, &v, &items, line)) return -1;
        if (!(l = list_new(&r->a, items->n))) return oom(r, line);
        for (size_t i = items->n; i-- > 0;) list_push(&r->a, l, items->v[i]);
        if (v.kind == V_STR) {
            Val j = {.kind = V_LIST, .l = l};
            Buf b = new_buf(r);
            for (size_t i = 0; i < l->n; i++)
                if (!buf_put(&b, l->v[i].s.p, l->v[i].s.tag, l->v[i].s.n)) return oom(r, line);
            (void)j;
            *out = v_str(buf_str(&b));
        } else
            *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    if (!strcmp(f, "unique")) {
        List *items, *l = list_new(&r->a, 0);
        if (!l || iterate(r, &v, &items, line)) return r->rc ? -1 : oom(r, line);
        for (size_t i = 0; i < items->n; i++) {
            int seen = 0;
            for (size_t j = 0; j < l->n && !seen; j++) seen = v_equal(&l->v[j], &items->v[i]);
            if (!seen && !list_push(&r->a, l, items->v[i])) return oom(r, line);
            if (step(r, line)) return -1;
        }
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    if (!strcmp(f, "string")) {
        Str s;
        if (to_str(r, &v, &s, line)) return -1;
        *out = v_str(s);
        return 0;
    }
    if (!strcmp(f, "int") || !strcmp(f, "float")) {
        double x = 0;
        if (v.kind == V_INT) x = (double)v.i;
        else if (v.kind == V_BOOL) x = v.b;
        else if (v.kind == V_FLOAT) x = v.f;
        else if (v.kind == V_STR) {
            char tmp[64];
            snprintf(tmp, sizeof tmp, "%.*s", (int)(v.s.n < 63 ? v.s.n : 63), v.s.p);
            char *end;
            x = strtod(tmp, &end);
            if (end == tmp) x = nd->nargs && args[0].kind == V_INT ? (double)args[0].i : 0;
        }
        if (f[0] == 'i') *out = v.kind == V_INT ? v : v_int((int64_t)x);
        else *out = (Val){.kind = V_FLOAT, .f = x};
        return 0;
    }
    if (!strcmp(f, "replace")) {
        if (nd->nargs < 2) return fail(r, line, "replace takes two or three arguments");
        return str_replace(r, &v, &args[0], &args[1], nd->nargs > 2 ? &args[2] : NULL, out, line);
    }
    if (!strcmp(f, "abs")) {
        if (v.kind == V_INT) *out = v_int(v.i < 0 ? -v.i : v.i);
        else if (v.kind == V_FLOAT) *out = (Val){.kind = V_FLOAT, .f = fabs(v.f)};
        else return fail(r, line, "abs needs a number, not %s", v_typename(&v));
        return 0;
    }
    /* safe: Jinja's markup marker, the same text here (no autoescape) */
    *out = v;
    return 0;
}

static int eval(Render *r, const CtNode *nd, Val *out) {
    if (step(r, nd->line)) return -1;
    if (++r->depth > CHATTMPL_MAX_DEPTH) {
        r->depth--;
        return fail(r, nd->line, "evaluation nests deeper than %d", CHATTMPL_MAX_DEPTH);
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
        Val *v = lookup(r, str_lit(nd->s));
        if (v) *out = *v;
        else if (!strcmp(nd->s, "raise_exception") || !strcmp(nd->s, "namespace") || !strcmp(nd->s, "range") ||
                 !strcmp(nd->s, "strftime_now"))
            *out = (Val){.kind = V_FUNC, .s = str_lit(nd->s)};
        else
            *out = undefined(str_lit(nd->s));
        break;
    }
    case CT_LIST: case CT_DICT: {
        int dict = nd->kind == CT_DICT;
        List *l = dict ? NULL : list_new(&r->a, nd->nargs);
        Dict *d = dict ? dict_new(&r->a) : NULL;
        if (!l && !d) { rc = oom(r, nd->line); break; }
        for (size_t i = 0; i < nd->nargs && !rc; i += dict ? 2 : 1) {
            if ((rc = eval(r, nd->args[i], &a))) break;
            if (dict) {
                if (a.kind != V_STR) { rc = fail(r, nd->line, "dict keys must be strings, not %s", v_typename(&a)); break; }
                if ((rc = eval(r, nd->args[i + 1], &b))) break;
                if (!dict_set(&r->a, d, a.s, b)) rc = oom(r, nd->line);
            } else
                list_push(&r->a, l, a);
        }
        if (!rc && l) l->is_tuple = (int)nd->i;
        if (!rc) *out = dict ? (Val){.kind = V_DICT, .d = d} : (Val){.kind = V_LIST, .l = l};
        break;
    }
    case CT_ATTR: rc = eval(r, nd->a, &a) || getattr_val(r, &a, str_lit(nd->s), out, nd->line); break;
    case CT_INDEX: rc = eval(r, nd->a, &a) || eval(r, nd->b, &b) || eval_index(r, &a, &b, out, nd->line); break;
    case CT_SLICE: rc = eval(r, nd->a, &a) || eval_slice(r, nd, &a, out); break;
    case CT_CALL:
        if (nd->a->kind == CT_NAME) {
            Val *v = lookup(r, str_lit(nd->a->s));
            if (v) rc = fail(r, nd->line, "'%s' is a %s, not a function", nd->a->s, v_typename(v));
            else rc = call_global(r, nd, nd->a->s, out);
        } else { /* obj.method(...): the parser allows only these two forms */
            Val obj;
            rc = eval(r, nd->a->a, &obj) || getattr_val(r, &obj, str_lit(nd->a->s), &a, nd->line);
            if (!rc && a.kind != V_METHOD) rc = fail(r, nd->line, "%s has no method '%s'", v_typename(&obj), nd->a->s);
            if (!rc) rc = call_method(r, nd, &a, out);
        }
        break;
    case CT_FILTER: rc = eval_filter(r, nd, out); break;
    case CT_TEST: {
        Val args[2] = {0};
        int res = 0;
        rc = eval(r, nd->a, &a) || eval_args(r, nd, args, 2) ||
             run_test(r, nd->s, &a, args, nd->nargs, &res, nd->line);
        if (!rc) *out = v_bool(res != (int)nd->i);
        break;
    }
    case CT_NOT: rc = eval(r, nd->a, &a); if (!rc) *out = v_bool(!v_truthy(&a)); break;
    case CT_NEG:
        rc = eval(r, nd->a, &a);
        if (!rc) rc = arith(r, CT_OP_SUB, &(Val){.kind = V_INT, .i = 0}, &a, out, nd->line);
        break;
    case CT_BINOP: rc = eval(r, nd->a, &a) || eval(r, nd->b, &b) || arith(r, nd->op, &a, &b, out, nd->line); break;
    case CT_CMP: {
        int res = 0;
        rc = eval(r, nd->a, &a) || eval(r, nd->b, &b) || compare(r, nd->op, &a, &b, &res, nd->line);
        if (!rc) *out = v_bool(res);
        break;
    }
    case CT_AND: case CT_OR:
        rc = eval(r, nd->a, &a);
        if (!rc) {
            if (v_truthy(&a) == (nd->kind == CT_OR)) *out = a;
            else rc = eval(r, nd->b, out);
        }
        break;
    case CT_COND:
        rc = eval(r, nd->b, &b);
        if (!rc) {
            if (v_truthy(&b)) rc = eval(r, nd->a, out);
            else if (nd->c) rc = eval(r, nd->c, out);
            else *out = undefined(str_lit("else"));
        }
        break;
    default: rc = fail(r, nd->line, "a statement where a value belongs");
    }
    r->depth--;
    return rc ? -1 : 0;
}

/* ---- statements ---- */

static int exec_block(Render *r, const CtNode *nd);

static int emit(Render *r, const Val *v, int line) {
    Str s;
    if (v->kind == V_UNDEF) return 0;
    if (to_str(r, v, &s, line)) return -1;
    if (r->out.n + s.n > (size_t)CHATTMPL_MAX_OUTPUT)
        return fail(r, line, "the rendered text is longer than %d bytes", CHATTMPL_MAX_OUTPUT);
    return buf_put(&r->out, s.p, s.tag, s.n) ? 0 : oom(r, line);
}

static int exec_for(Render *r, const CtNode *nd) {
    Val seq;
    List *items, *kept;
    if (eval(r, nd->a, &seq) || iterate(r, &seq, &items, nd->line)) return -1;
    Frame *outer = r->frame;
    kept = items;
    if (nd->b) { /* the loop's own filter runs before loop.length is known */
        if (!(kept = list_new(&r->a, 0))) return oom(r, nd->line);
        for (size_t i = 0; i < items->n; i++) {
            Frame f = {dict_new(&r->a), outer};
            Val keep;
            if (!f.vars || !dict_set(&r->a, f.vars, str_lit(nd->s), items->v[i])) return oom(r, nd->line);
            if (nd->s2 && items->v[i].kind == V_LIST && items->v[i].l->n == 2) {
                dict_set(&r->a, f.vars, str_lit(nd->s), items->v[i].l->v[0]);
                dict_set(&r->a, f.vars, str_lit(nd->s2), items->v[i].l->v[1]);
            }
            r->frame = &f;
            int rc = eval(r, nd->b, &keep);
            r->frame = outer;
            if (rc) return -1;
            if (v_truthy(&keep) && !list_push(&r->a, kept, items->v[i])) return oom(r, nd->line);
        }
    }
    size_t n = kept->n;
    for (size_t i = 0; i < n; i++) {
        Frame f = {dict_new(&r->a), outer};
        Dict *loop = dict_new(&r->a);
        if (!f.vars || !loop) return oom(r, nd->line);
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
                return fail(r, nd->line, "cannot unpack %s into '%s, %s'", v_typename(&item), nd->s, nd->s2);
            ok = ok && dict_set(&r->a, f.vars, str_lit(nd->s), item.l->v[0]) &&
                 dict_set(&r->a, f.vars, str_lit(nd->s2), item.l->v[1]);
        } else
            ok = ok && dict_set(&r->a, f.vars, str_lit(nd->s), item);
        if (!ok) return oom(r, nd->line);
        r->frame = &f;
        int rc = exec_block(r, nd->body);
        r->frame = outer;
        if (rc) return -1;
        int ctl = r->control;
        r->control = 0;
        if (ctl == 1) break;
    }
    if (n == 0 && nd->orelse) return exec_block(r, nd->orelse);
    return 0;
}

static int exec_block(Render *r, const CtNode *nd) {
    if (++r->depth > CHATTMPL_MAX_DEPTH) {
        r->depth--;
        return fail(r, nd ? nd->line : 0, "blocks nest deeper than %d", CHATTMPL_MAX_DEPTH);
    }
    int rc = 0;
    for (; nd && !rc && !r->control; nd = nd->next) {
        if ((rc = step(r, nd->line))) break;
        Val v;
        switch (nd->kind) {
        case CT_TEXT:
            if (r->out.n + nd->n > (size_t)CHATTMPL_MAX_OUTPUT)
                rc = fail(r, nd->line, "the rendered text is longer than %d bytes", CHATTMPL_MAX_OUTPUT);
            else if (!buf_put(&r->out, nd->s, NULL, nd->n))
                rc = oom(r, nd->line);
            break;
        case CT_OUTPUT: rc = eval(r, nd->a, &v) || emit(r, &v, nd->line); break;
        case CT_IF:
            rc = eval(r, nd->a, &v);
            if (!rc) rc = exec_block(r, v_truthy(&v) ? nd->body : nd->orelse);
            break;
        case CT_FOR: rc = exec_for(r, nd); break;
        case CT_SET:
            rc = eval(r, nd->a, &v);
            if (rc) break;
            if (nd->s2) {
                Val *ns = lookup(r, str_lit(nd->s));
                if (!ns || ns->kind != V_DICT || !ns->d->is_namespace)
                    rc = fail(r, nd->line, "cannot set '%s.%s': '%s' is not a namespace", nd->s, nd->s2, nd->s);
                else if (!dict_set(&r->a, ns->d, str_lit(nd->s2), v))
                    rc = oom(r, nd->line);
            } else if (!dict_set(&r->a, r->frame->vars, str_lit(nd->s), v))
                rc = oom(r, nd->line);
            break;
        case CT_BREAK: r->control = 1; break;
        case CT_CONTINUE: r->control = 2; break;
        default: rc = fail(r, nd->line, "a value where a statement belongs");
        }
    }
    r->depth--;
    return rc ? -1 : 0;
}

/* ---- values from JSON (extra variables) ---- */

static int from_json(Render *r, const JsonValue *j, Val *out, int depth) {
    if (depth > CHATTMPL_MAX_DEPTH) return fail(r, 0, "a variable nests deeper than %d", CHATTMPL_MAX_DEPTH);
    switch (j->type) {
    case JSON_NULL: *out = v_none(); return 0;
    case JSON_BOOL: *out = v_bool(j->boolean); return 0;
    case JSON_NUMBER: *out = j->is_integer ? v_int(j->integer) : (Val){.kind = V_FLOAT, .f = j->number}; return 0;
    case JSON_STRING: {
        char *p = arena_strndup(&r->a, j->string, j->len);
        if (!p) return oom(r, 0);
        *out = v_str(str_of(p, j->len));
        return 0;
    }
    case JSON_ARRAY: {
        List *l = list_new(&r->a, j->count);
        if (!l) return oom(r, 0);
        for (size_t i = 0; i < j->count; i++) {
            Val v;
            if (from_json(r, &j->items[i], &v, depth + 1)) return -1;
            list_push(&r->a, l, v);
        }
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    default: {
        Dict *d = dict_new(&r->a);
        if (!d) return oom(r, 0);
        for (size_t i = 0; i < j->count; i++) {
            Val v;
            char *k = arena_strndup(&r->a, j->items[i].key, j->items[i].key_len);
            if (!k || from_json(r, &j->items[i], &v, depth + 1)) return r->rc ? -1 : oom(r, 0);
            if (!dict_set(&r->a, d, str_of(k, j->items[i].key_len), v)) return oom(r, 0);
        }
        *out = (Val){.kind = V_DICT, .d = d};
        return 0;
    }
    }
}

/* ---- the API ---- */

static const char *const END_MARKERS[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>",
                                          "</s>", "<|endoftext|>", NULL};

int chattmpl_render(const ChatTemplate *t, const ChatMessage *messages, size_t n, const ChatRenderOptions *opts,
                    ChatRender *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    Render r = {.t = t, .err = err, .errlen = errlen};
    arena_init(&r.a);
    r.out = (Buf){.a = &r.a};
    Frame globals = {dict_new(&r.a), NULL};
    r.frame = &globals;
    List *msgs = list_new(&r.a, n);
    int rc = 0;
    if (!globals.vars || !msgs) rc = oom(&r, 0);
    for (size_t i = 0; i < n && !rc; i++) {
        Dict *m = dict_new(&r.a);
        uint32_t *tag = ARENA_NEWN(&r.a, uint32_t, messages[i].content_len ? messages[i].content_len : 1);
        char *role = arena_strdup(&r.a, messages[i].role ? messages[i].role : "");
        char *content = arena_strndup(&r.a, messages[i].content ? messages[i].content : "", messages[i].content_len);
        if (!m || !tag || !role || !content) {
            rc = oom(&r, 0);
            break;
        }
        for (size_t k = 0; k < messages[i].content_len; k++) tag[k] = (uint32_t)i + 1;
        dict_set(&r.a, m, str_lit("role"), v_str(str_lit(role)));
        dict_set(&r.a, m, str_lit("content"), v_str((Str){content, tag, messages[i].content_len}));
        list_push(&r.a, msgs, (Val){.kind = V_DICT, .d = m});
    }
    if (!rc) {
        Dict *g = globals.vars;
        dict_set(&r.a, g, str_lit("messages"), (Val){.kind = V_LIST, .l = msgs});
        dict_set(&r.a, g, str_lit("add_generation_prompt"), v_bool(opts && opts->add_generation_prompt));
        dict_set(&r.a, g, str_lit("tools"), v_none());
        dict_set(&r.a, g, str_lit("documents"), v_none());
        for (size_t i = 0; i < t->ntokens; i++)
            dict_set(&r.a, g, str_lit(t->tokens[i].name), v_str(str_lit(t->tokens[i].value)));
        for (size_t i = 0; opts && i < opts->nvars && !rc; i++) {
            JsonDoc doc;
            char jerr[256];
            const char *js = opts->vars[i].json ? opts->vars[i].json : "null";
            if (json_parse(js, strlen(js), &doc, jerr, sizeof jerr)) {
                snprintf(err, errlen, "%s: the variable '%s' is not JSON: %s", t->name, opts->vars[i].name, jerr);
                rc = r.rc = -1;
            } else {
                Val v;
                rc = from_json(&r, doc.root, &v, 0);
                if (!rc && !dict_set(&r.a, g, str_lit(arena_strdup(&r.a, opts->vars[i].name)), v)) rc = oom(&r, 0);
            }
            json_free(&doc);
        }
        if (r.a.failed) rc = oom(&r, 0);
    }
    if (!rc) rc = exec_block(&r, t->body);
    if (!rc && r.control) rc = fail(&r, 0, "'break' or 'continue' outside a loop");
    if (rc) {
        int code = r.rc ? r.rc : -1;
        arena_free(&r.a);
        return code;
    }
    /* the ranges, then copy out */
    Str text = buf_str(&r.out);
    out->text = malloc(text.n + 1);
    out->ranges = malloc((n ? n : 1) * sizeof *out->ranges);
    if (!out->text || !out->ranges) {
        free(out->text), free(out->ranges);
        memset(out, 0, sizeof *out);
        snprintf(err, errlen, "%s: out of memory", t->name);
        arena_free(&r.a);
        return -1;
    }
    memcpy(out->text, text.p, text.n);
    out->text[text.n] = 0;
    out->len = text.n;
    const char *eos = chattmpl_token(t, "eos_token");
    for (size_t i = 0; i < n; i++) {
        if (!messages[i].role || strcmp(messages[i].role, "assistant") || !text.tag) continue;
        size_t first = SIZE_MAX, last = 0;
        for (size_t k = 0; k < text.n; k++)
            if (text.tag[k] == i + 1) {
                if (first == SIZE_MAX) first = k;
                last = k;
            }
        if (first == SIZE_MAX) continue;
        size_t end = last + 1, best = 0;
        for (int m = -1; m < 0 || END_MARKERS[m]; m++) {
            const char *mk = m < 0 ? eos : END_MARKERS[m];
            size_t ml = mk ? strlen(mk) : 0;
            if (ml > best && end + ml <= text.n && !memcmp(text.p + end, mk, ml)) best = ml;
        }
        out->ranges[out->nranges++] = (ChatRange){i, first, end + best};
    }
    arena_free(&r.a);
    return 0;
}

void chattmpl_render_free(ChatRender *r) {
    if (!r) return;
    free(r->text);
    free(r->ranges);
    memset(r, 0, sizeof *r);
}

static ChatTemplate *template_new(const char *name) {
    ChatTemplate *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    arena_init(&t->arena);
    t->name = arena_strdup(&t->arena, name ? name : "chat template");
    if (!t->name) {
        chattmpl_free(t);
        return NULL;
    }
    return t;
}

int chattmpl_parse(ChatTemplate **out, const char *name, const char *src, size_t n, char *err, size_t errlen) {
    *out = NULL;
    ChatTemplate *t = template_new(name);
    if (!t) {
        snprintf(err, errlen, "%s: out of memory", name ? name : "chat template");
        return -1;
    }
    if (chattmpl_parse_into(t, src, n, err, errlen)) {
        chattmpl_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

static char *read_file(const char *path, size_t *n, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        if (cap >= (size_t)1 << 30) {
            free(buf);
            buf = NULL;
            fclose(f);
            snprintf(err, errlen, "%s: larger than 1 GiB", path);
            return NULL;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb, cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "%s: %s", path, bad ? "read error" : "out of memory");
        return NULL;
    }
    *n = len;
    return buf;
}

int chattmpl_load_file(ChatTemplate **out, const char *path, char *err, size_t errlen) {
    size_t n;
    *out = NULL;
    char *src = read_file(path, &n, err, errlen);
    if (!src) return -1;
    int rc = chattmpl_parse(out, path, src, n, err, errlen);
    free(src);
    return rc;
}

int chattmpl_from_config_json(ChatTemplate **out, const char *name, const char *json, size_t n, char *err,
                              size_t errlen) {
    *out = NULL;
    JsonDoc doc;
    char jerr[256];
    if (json_parse(json, n, &doc, jerr, sizeof jerr)) {
        snprintf(err, errlen, "%s: malformed JSON: %s", name, jerr);
        return -1;
    }
    const JsonValue *ct = json_get(doc.root, "chat_template"), *src = NULL;
    if (ct && ct->type == JSON_STRING) src = ct;
    else if (ct && ct->type == JSON_ARRAY) {
        for (size_t i = 0; i < ct->count; i++) {
            const char *nm = json_get_str(&ct->items[i], "name");
            const JsonValue *tx = json_get_type(&ct->items[i], "template", JSON_STRING);
            if (nm && tx && !strcmp(nm, "default")) src = tx;
        }
        if (!src) {
            snprintf(err, errlen, "%s: chat_template lists no template named \"default\"", name);
            json_free(&doc);
            return -1;
        }
    } else {
        snprintf(err, errlen, "%s: %s", name, ct ? "chat_template is neither a string nor a list of {name, template}"
                                                 : "no chat_template (give the template as a file)");
        json_free(&doc);
        return -1;
    }
    char tname[512];
    snprintf(tname, sizeof tname, "%s: chat_template", name);
    int rc = chattmpl_parse(out, tname, src->string, src->len, err, errlen);
    static const char *const TOKENS[] = {"bos_token", "eos_token", "unk_token", "pad_token", NULL};
    for (int i = 0; !rc && TOKENS[i]; i++) {
        const JsonValue *v = json_get(doc.root, TOKENS[i]);
        const char *s = v && v->type == JSON_STRING ? v->string : v && v->type == JSON_OBJECT ? json_get_str(v, "content") : NULL;
        if (s && chattmpl_set_token(*out, TOKENS[i], s)) {
            snprintf(err, errlen, "%s: out of memory", name);
            chattmpl_free(*out);
            *out = NULL;
            rc = -1;
        }
    }
    json_free(&doc);
    return rc;
}

int chattmpl_load_config(ChatTemplate **out, const char *path, char *err, size_t errlen) {
    size_t n;
    *out = NULL;
    char *js = read_file(path, &n, err, errlen);
    if (!js) return -1;
    int rc = chattmpl_from_config_json(out, path, js, n, err, errlen);
    free(js);
    return rc;
}

void chattmpl_free(ChatTemplate *t) {
    if (!t) return;
    arena_free(&t->arena);
    free(t->tokens);
    free(t);
}

int chattmpl_set_token(ChatTemplate *t, const char *name, const char *value) {
    char *v = arena_strdup(&t->arena, value);
    if (!v) return -1;
    for (size_t i = 0; i < t->ntokens; i++)
        if (!strcmp(t->tokens[i].name, name)) {
            t->tokens[i].value = v;
            return 0;
        }
    if (t->ntokens == t->captokens) {
        size_t cap = t->captokens ? t->captokens * 2 : 4;
        CtToken *nt = realloc(t->tokens, cap * sizeof *nt);
        if (!nt) return -1;
        t->tokens = nt, t->captokens = cap;
    }
    const char *nm = arena_strdup(&t->arena, name);
    if (!nm) return -1;
    t->tokens[t->ntokens++] = (CtToken){nm, v};
    return 0;
}

const char *chattmpl_token(const ChatTemplate *t, const char *name) {
    for (size_t i = 0; i < t->ntokens; i++)
        if (!strcmp(t->tokens[i].name, name)) return t->tokens[i].value;
    return NULL;
}
