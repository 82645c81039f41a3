/* chattmpl_filters: the library a template calls: Jinja's filters and
 * tests, the string and dict methods, and the globals transformers gives
 * (raise_exception, namespace, range, strftime_now), each with Python's
 * semantics, keeping the tags of the bytes they move (chattmpl_value.h).
 * Case changes are ASCII only: non-ASCII text is refused rather than cased
 * differently from Python. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "chattmpl_eval.h"

int ct_run_test(Render *r, const char *name, const Val *v, const Val *args, size_t nargs, int *res, int line) {
    if ((!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") || !strcmp(name, "ne") ||
         !strcmp(name, "!=") || !strcmp(name, "in")) && nargs != 1)
        return ct_fail(r, line, "the test '%s' takes one argument", name);
    if (!strcmp(name, "defined")) *res = v->kind != V_UNDEF;
    else if (!strcmp(name, "undefined")) *res = v->kind == V_UNDEF;
    else if (!strcmp(name, "none")) *res = v->kind == V_NONE;
    else if (!strcmp(name, "string")) *res = v->kind == V_STR;
    else if (!strcmp(name, "mapping")) *res = v->kind == V_DICT && !v->d->is_namespace;
    else if (!strcmp(name, "iterable")) /* Jinja's undefined iterates (as empty) */
        *res = v->kind == V_STR || v->kind == V_LIST || (v->kind == V_DICT && !v->d->is_namespace) || v->kind == V_UNDEF;
    else if (!strcmp(name, "sequence")) /* a length and items by index */
        *res = v->kind == V_STR || (v->kind == V_LIST && (v->l->flavor <= L_TUPLE || v->l->flavor == L_RANGE)) ||
               (v->kind == V_DICT && !v->d->is_namespace) || v->kind == V_UNDEF;
    else if (!strcmp(name, "number")) *res = v->kind == V_INT || v->kind == V_FLOAT || v->kind == V_BOOL;
    else if (!strcmp(name, "integer")) *res = v->kind == V_INT;
    else if (!strcmp(name, "float")) *res = v->kind == V_FLOAT;
    else if (!strcmp(name, "boolean")) *res = v->kind == V_BOOL;
    else if (!strcmp(name, "true")) *res = v->kind == V_BOOL && v->b;
    else if (!strcmp(name, "false")) *res = v->kind == V_BOOL && !v->b;
    else if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==")) return ct_equal(r, v, &args[0], res, line);
    else if (!strcmp(name, "ne") || !strcmp(name, "!=")) {
        if (ct_equal(r, v, &args[0], res, line)) return -1;
        *res = !*res;
    }
    else if (!strcmp(name, "in")) return ct_compare(r, CT_OP_IN, v, &args[0], res, line);
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) { /* value % 2 == 1, value % 2 == 0 */
        double m;
        if (v->kind == V_INT || v->kind == V_BOOL) m = (double)((v->kind == V_INT ? v->i : v->b) % 2 != 0);
        else if (v->kind == V_FLOAT) {
            m = fmod(v->f, 2);
            if (m < 0) m += 2;
        } else
            return ct_fail(r, line, "the test '%s' needs a number, not %s", name, v_typename(v));
        *res = name[0] == 'o' ? m == 1 : m == 0;
    } else { /* lower, upper: of str(value) */
        Str s;
        if (ct_to_str(r, v, &s, line)) return -1;
        int has_cased = 0, ok = 1;
        for (size_t i = 0; i < s.n; i++) {
            unsigned char c = (unsigned char)s.p[i];
            if (c >= 0x80) return ct_fail(r, line, "the test '%s' of non-ASCII text is not supported", name);
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) has_cased = 1;
            if (name[0] == 'l' ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) ok = 0;
        }
        *res = has_cased && ok;
    }
    return 0;
}

/* upper, lower, capitalize, title (str.title()), jtitle (Jinja's title
 * filter): ASCII only, so never a different casing from Python's. */
static int ct_change_case(Render *r, const Val *v, const char *how, Val *out, int line) {
    if (ct_need_str(r, v, how, line)) return -1;
    char *p = arena_alloc(&r->a, v->s.n + 1);
    if (!p) return ct_oom(r, line);
    int word_start = 1;
    for (size_t i = 0; i < v->s.n; i++) {
        unsigned char c = (unsigned char)v->s.p[i];
        if (c >= 0x80) return ct_fail(r, line, "'%s' of non-ASCII text is not supported", how);
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int up = how[0] == 'u' || (how[0] == 'c' && i == 0) || ((how[0] == 't' || how[0] == 'j') && word_start);
        p[i] = (char)(alpha ? (up ? (c & ~0x20) : (c | 0x20)) : c);
        /* str.title() starts a word after any non-letter; Jinja's title
         * filter only after - ( { [ < and white space */
        word_start = how[0] == 'j' ? strchr("-({[< \t\n\v\f\r\x1c\x1d\x1e\x1f", c) != NULL && c : !alpha;
    }
    *out = v_str((Str){p, v->s.tag, v->s.n});
    return 0;
}

static int ct_str_replace(Render *r, const Val *v, const Val *old, const Val *new, const Val *count, Val *out, int line) {
    if (ct_need_str(r, v, "replace", line) || ct_need_str(r, old, "replace", line) || ct_need_str(r, new, "replace", line)) return -1;
    int64_t max = count && count->kind == V_INT ? count->i : -1;
    Buf b = ct_buf(r);
    size_t i = 0;
    if (old->s.n == 0) { /* Python puts new between every character */
        for (size_t k = 0; k <= v->s.n; k++) {
            if (k == v->s.n || ((unsigned char)v->s.p[k] & 0xC0) != 0x80) { /* before each character, and at the end */
                if (max-- != 0 && !buf_put(&b, new->s.p, new->s.tag, new->s.n)) return ct_oom(r, line);
            }
            if (k < v->s.n && !buf_put(&b, v->s.p + k, v->s.tag ? v->s.tag + k : NULL, 1)) return ct_oom(r, line);
        }
        *out = v_str(buf_str(&b));
        return 0;
    }
    while (i <= v->s.n) {
        const char *hit = max != 0 ? memmem(v->s.p + i, v->s.n - i, old->s.p, old->s.n) : NULL;
        size_t j = hit ? (size_t)(hit - v->s.p) : v->s.n;
        if (!buf_put(&b, v->s.p + i, v->s.tag ? v->s.tag + i : NULL, j - i)) return ct_oom(r, line);
        if (!hit) break;
        if (!buf_put(&b, new->s.p, new->s.tag, new->s.n)) return ct_oom(r, line);
        i = j + old->s.n;
        if (max > 0) max--;
        if (ct_step(r, line)) return -1;
    }
    *out = v_str(buf_str(&b));
    return 0;
}

static int ct_str_split(Render *r, const Val *v, const Val *sep, const Val *maxv, Val *out, int line) {
    if (ct_need_str(r, v, "split", line)) return -1;
    if (sep && sep->kind != V_NONE && ct_need_str(r, sep, "split", line)) return -1;
    if (sep && sep->kind == V_STR && sep->s.n == 0) return ct_fail(r, line, "split: empty separator");
    int64_t max = maxv && maxv->kind == V_INT ? maxv->i : -1;
    List *l = list_new(&r->a, 0);
    if (!l) return ct_oom(r, line);
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
                if (!list_push(&r->a, l, v_str(rest))) return ct_oom(r, line);
                break;
            }
            while (j < s.n && !ws_at(s, j)) j++;
            if (!list_push(&r->a, l, v_str(str_slice(s, i, j)))) return ct_oom(r, line);
            if (max > 0) max--;
            i = j;
            if (ct_step(r, line)) return -1;
        }
    } else {
        size_t i = 0;
        for (;;) {
            const char *hit = max != 0 ? memmem(s.p + i, s.n - i, sep->s.p, sep->s.n) : NULL;
            size_t j = hit ? (size_t)(hit - s.p) : s.n;
            if (!list_push(&r->a, l, v_str(str_slice(s, i, j)))) return ct_oom(r, line);
            if (!hit) break;
            i = j + sep->s.n;
            if (max > 0) max--;
            if (ct_step(r, line)) return -1;
        }
    }
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

static int ct_strip_call(Render *r, const Val *v, const Val *chars, int left, int right, Val *out, int line) {
    if (ct_need_str(r, v, left && right ? "strip" : left ? "lstrip" : "rstrip", line)) return -1;
    if (chars && chars->kind != V_NONE && ct_need_str(r, chars, "strip", line)) return -1;
    *out = v_str(str_strip(v->s, chars && chars->kind == V_STR ? &chars->s : NULL, left, right));
    return 0;
}

int ct_call_method(Render *r, const CtNode *nd, const Val *m, Val *out) {
    Val args[3] = {0};
    const Val *self = m->self;
    Str name = m->s;
    int line = nd->line;
    if (ct_no_kwargs(r, nd, "a method") || ct_eval_args(r, nd, args, 3)) return -1;
    size_t n = nd->nargs;
    if (str_eq(name, "startswith") || str_eq(name, "endswith")) {
        if (n != 1) return ct_fail(r, line, "'%.*s' takes one argument", (int)name.n, name.p);
        int ends = name.p[0] == 'e', hit = 0;
        const Val *cands = &args[0];
        size_t nc = 1;
        if (args[0].kind == V_LIST) cands = args[0].l->v, nc = args[0].l->n;
        for (size_t k = 0; k < nc && !hit; k++) {
            if (ct_need_str(r, &cands[k], "startswith/endswith", line)) return -1;
            Str p = cands[k].s;
            hit = p.n <= self->s.n && !memcmp(self->s.p + (ends ? self->s.n - p.n : 0), p.p, p.n);
        }
        *out = v_bool(hit);
        return 0;
    }
    if (str_eq(name, "strip") || str_eq(name, "lstrip") || str_eq(name, "rstrip"))
        return ct_strip_call(r, self, n ? &args[0] : NULL, name.p[0] != 'r', name.p[0] != 'l', out, line);
    if (str_eq(name, "split")) return ct_str_split(r, self, n ? &args[0] : NULL, n > 1 ? &args[1] : NULL, out, line);
    if (str_eq(name, "replace")) {
        if (n < 2) return ct_fail(r, line, "'replace' takes two or three arguments");
        return ct_str_replace(r, self, &args[0], &args[1], n > 2 ? &args[2] : NULL, out, line);
    }
    if (str_eq(name, "upper") || str_eq(name, "lower") || str_eq(name, "title") || str_eq(name, "capitalize")) {
        char how[16];
        snprintf(how, sizeof how, "%.*s", (int)name.n, name.p);
        return ct_change_case(r, self, how, out, line);
    }
    Dict *d = self->d;
    if (str_eq(name, "get")) {
        if (n < 1) return ct_fail(r, line, "'get' takes one or two arguments");
        Val *v = args[0].kind == V_STR ? dict_get(d, args[0].s) : NULL;
        *out = v ? *v : n > 1 ? args[1] : v_none();
        return 0;
    }
    List *l = list_new(&r->a, d->n);
    if (!l) return ct_oom(r, line);
    for (size_t i = 0; i < d->n; i++) {
        Val item = v_str(d->k[i]);
        if (str_eq(name, "values")) item = d->v[i];
        else if (str_eq(name, "items")) {
            List *pair = list_new(&r->a, 2);
            if (!pair) return ct_oom(r, line);
            pair->flavor = L_TUPLE; /* Python's (key, value) */
            list_push(&r->a, pair, v_str(d->k[i]));
            list_push(&r->a, pair, d->v[i]);
            item = (Val){.kind = V_LIST, .l = pair};
        }
        list_push(&r->a, l, item);
    }
    l->flavor = str_eq(name, "items") ? L_ITEMS : str_eq(name, "keys") ? L_KEYS : L_VALUES;
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

int ct_call_global(Render *r, const CtNode *nd, const char *fn, Val *out) {
    int line = nd->line;
    if (!strcmp(fn, "namespace")) {
        Dict *d = dict_new(&r->a);
        if (!d) return ct_oom(r, line);
        d->is_namespace = 1;
        for (size_t i = 0; i < nd->nargs; i++) {
            Val v;
            if (ct_eval(r, nd->args[i], &v)) return -1;
            if (v.kind != V_DICT) return ct_fail(r, line, "namespace() takes a dict or name=value arguments");
            for (size_t k = 0; k < v.d->n; k++)
                if (!dict_set(&r->a, d, v.d->k[k], v.d->v[k])) return ct_oom(r, line);
        }
        for (size_t i = 0; i < nd->nkw; i++) {
            Val v;
            if (ct_eval(r, nd->kwargs[i], &v)) return -1;
            if (!dict_set(&r->a, d, str_lit(nd->kwnames[i]), v)) return ct_oom(r, line);
        }
        *out = (Val){.kind = V_DICT, .d = d};
        return 0;
    }
    Val args[3] = {0};
    if (ct_no_kwargs(r, nd, fn) || ct_eval_args(r, nd, args, 3)) return -1;
    if (!strcmp(fn, "raise_exception")) {
        Str msg = str_lit("");
        if (nd->nargs && ct_to_str(r, &args[0], &msg, line)) return -1;
        r->rc = CHATTMPL_RAISED;
        snprintf(r->err, r->errlen, "%.*s", (int)msg.n, msg.p);
        return -1;
    }
    if (!strcmp(fn, "strftime_now")) {
        if (nd->nargs != 1 || ct_need_str(r, &args[0], "strftime_now", line)) return -1;
        char fmt[256], buf[512];
        snprintf(fmt, sizeof fmt, "%.*s", (int)args[0].s.n, args[0].s.p);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t len = strftime(buf, sizeof buf, fmt, &tm);
        char *p = arena_strndup(&r->a, buf, len);
        if (!p) return ct_oom(r, line);
        *out = v_str(str_of(p, len));
        return 0;
    }
    /* range */
    for (size_t i = 0; i < nd->nargs; i++)
        if (args[i].kind != V_INT) return ct_fail(r, line, "range() needs integers, not %s", v_typename(&args[i]));
    int64_t a = 0, b = 0, st = 1;
    if (nd->nargs == 1) b = args[0].i;
    else if (nd->nargs >= 2) a = args[0].i, b = args[1].i;
    if (nd->nargs == 3) st = args[2].i;
    if (nd->nargs == 0 || st == 0) return ct_fail(r, line, "range() needs one to three arguments and a non-zero step");
    List *l = list_new(&r->a, 0);
    if (!l) return ct_oom(r, line);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
        if (ct_step(r, line) || !list_push(&r->a, l, v_int(i))) return r->rc ? -1 : ct_oom(r, line);
    l->flavor = L_RANGE, l->range[0] = a, l->range[1] = b, l->range[2] = st;
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

/* The items a filter or a for loop goes over: a list's, a dict's keys, a
 * string's characters; undefined is empty, as in Jinja. */
int ct_iterate(Render *r, const Val *v, List **out, int line) {
    if (v->kind == V_LIST) {
        List *l = v->l;
        if (l->flavor == L_GENERATOR) { /* used up by its first iteration, as in Python */
            if (l->consumed == 2) return ct_fail(r, line, "a generator iterated again after 'first' or 'in' is not supported");
            if (l->consumed) {
                if (!(*out = list_new(&r->a, 0))) return ct_oom(r, line);
                return 0;
            }
            l->consumed = 1;
        }
        *out = l;
        return 0;
    }
    List *l = list_new(&r->a, 0);
    if (!l) return ct_oom(r, line);
    if (v->kind == V_DICT && !v->d->is_namespace) {
        for (size_t i = 0; i < v->d->n; i++)
            if (!list_push(&r->a, l, v_str(v->d->k[i]))) return ct_oom(r, line);
    } else if (v->kind == V_STR) {
        for (size_t i = 0; i < v->s.n;) {
            size_t e = utf8_offset(str_slice(v->s, i, v->s.n), 1) + i;
            if (!list_push(&r->a, l, v_str(str_slice(v->s, i, e)))) return ct_oom(r, line);
            i = e;
        }
    } else if (v->kind != V_UNDEF)
        return ct_fail(r, line, "%s is not iterable", v_typename(v));
    *out = l;
    return 0;
}

static int ct_filter_select(Render *r, const CtNode *nd, const Val *v, int attr, int reject, Val *out) {
    int line = nd->line;
    List *items, *l = list_new(&r->a, 0);
    if (!l) return ct_oom(r, line);
    if (!v_truthy(v)) items = l; /* Jinja selects from a false value (none) nothing */
    else if (ct_iterate(r, v, &items, line)) return -1;
    Val args[4] = {0};
    if (ct_no_kwargs(r, nd, nd->s) || ct_eval_args(r, nd, args, 4)) return -1;
    size_t first = attr ? 1 : 0;
    if (attr && (nd->nargs < 1 || args[0].kind != V_STR)) return ct_fail(r, line, "'%s' needs an attribute name", nd->s);
    for (size_t i = 0; i < items->n; i++) {
        Val x = items->v[i];
        if (attr && ct_index(r, &x, &args[0], &x, line)) return -1;
        int keep;
        if (nd->nargs > first) {
            if (args[first].kind != V_STR) return ct_fail(r, line, "'%s' needs a test name", nd->s);
            char tn[32];
            snprintf(tn, sizeof tn, "%.*s", (int)args[first].s.n, args[first].s.p);
            static const char *const tests[] = {"defined", "undefined", "none", "string", "mapping", "sequence",
                                                "iterable", "number", "integer", "float", "boolean", "true",
                                                "false", "equalto", "eq", "ne", "==", "!=", "odd", "even", "lower",
                                                "upper", "in", NULL};
            int known = 0;
            for (const char *const *t = tests; *t; t++) known |= !strcmp(*t, tn);
            if (!known) return ct_fail(r, line, "the test '%s' is not supported", tn);
            if (ct_run_test(r, tn, &x, &args[first + 1], nd->nargs - first - 1, &keep, line)) return -1;
        } else
            keep = v_truthy(&x);
        if (keep != reject && !list_push(&r->a, l, items->v[i])) return ct_oom(r, line);
    }
    l->flavor = L_GENERATOR; /* Jinja's select and reject yield */
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

/* Python's str.splitlines() boundary at s[i]: its length, or 0. */
static size_t line_break_at(Str s, size_t i) {
    unsigned char c = (unsigned char)s.p[i];
    if (c == '\r') return i + 1 < s.n && s.p[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
    if (c == 0xC2 && i + 1 < s.n && (unsigned char)s.p[i + 1] == 0x85) return 2;
    if (c == 0xE2 && i + 2 < s.n && (unsigned char)s.p[i + 1] == 0x80 &&
        ((unsigned char)s.p[i + 2] == 0xA8 || (unsigned char)s.p[i + 2] == 0xA9))
        return 3;
    return 0;
}

/* Jinja's indent(width=4, first=False, blank=False): every line after the
 * first (and the first with first=True) gets the indentation, empty lines
 * only with blank=True; lines split as Python's splitlines() splits them. */
static int filter_indent(Render *r, const CtNode *nd, const Val *v, Val *out) {
    int line = nd->line, present;
    Val width = v_int(4), first = v_bool(0), blank = v_bool(0);
    for (size_t i = 0; i < nd->nkw; i++)
        if (strcmp(nd->kwnames[i], "width") && strcmp(nd->kwnames[i], "first") && strcmp(nd->kwnames[i], "blank"))
            return ct_fail(r, line, "indent's argument '%s' is not supported", nd->kwnames[i]);
    if (ct_arg_or_kw(r, nd, 0, "width", &width, &present) || ct_arg_or_kw(r, nd, 1, "first", &first, &present) ||
        ct_arg_or_kw(r, nd, 2, "blank", &blank, &present))
        return -1;
    if (ct_need_str(r, v, "indent", line)) return -1;
    Str s = v->s, ind;
    Buf ib = ct_buf(r);
    if (width.kind == V_STR) ind = width.s;
    else if (width.kind == V_INT && width.i >= 0 && width.i <= 1000) {
        for (int64_t i = 0; i < width.i; i++)
            if (!buf_puts(&ib, " ")) return ct_oom(r, line);
        ind = buf_str(&ib);
    } else
        return ct_fail(r, line, "indent's width must be a string or an integer from 0 to 1000");
    Buf b = ct_buf(r);
    if (v_truthy(&first) && !buf_put(&b, ind.p, ind.tag, ind.n)) return ct_oom(r, line);
    /* Jinja splits s + "\n" with splitlines(): the lines of s, the empty one
     * after a last line break included, except after a lone last \r (which
     * the appended \n joins into one \r\n break) */
    int cr_last = s.n && s.p[s.n - 1] == '\r';
    for (size_t i = 0, lineno = 0; i <= s.n; lineno++) {
        size_t e = i, br = 0;
        while (e < s.n && !(br = line_break_at(s, e))) e++;
        if (e == s.n && i == s.n && lineno > 0 && cr_last) break;
        if (lineno > 0) {
            if (!buf_puts(&b, "\n")) return ct_oom(r, line);
            if ((e > i || v_truthy(&blank)) && !buf_put(&b, ind.p, ind.tag, ind.n)) return ct_oom(r, line);
        }
        if (!buf_put(&b, s.p + i, s.tag ? s.tag + i : NULL, e - i)) return ct_oom(r, line);
        if (ct_step(r, line)) return -1;
        if (e == s.n) break;
        i = e + br;
    }
    *out = v_str(buf_str(&b));
    return 0;
}

/* The key dictsort compares: a string lower-cased (ASCII) unless
 * case_sensitive, or a number. */
static int dictsort_cmp(Render *r, const Val *a, const Val *b, int fold, int *res, int line) {
    if (a->kind == V_STR && b->kind == V_STR) {
        size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
        for (size_t i = 0; i < n; i++) {
            unsigned char x = (unsigned char)a->s.p[i], y = (unsigned char)b->s.p[i];
            if (fold && (x >= 0x80 || y >= 0x80))
                return ct_fail(r, line, "dictsort of non-ASCII text without case_sensitive=true is not supported");
            if (fold) x = (unsigned char)(x >= 'A' && x <= 'Z' ? x + 32 : x), y = (unsigned char)(y >= 'A' && y <= 'Z' ? y + 32 : y);
            if (x != y) {
                *res = x < y ? -1 : 1;
                return 0;
            }
        }
        *res = a->s.n < b->s.n ? -1 : a->s.n > b->s.n;
        return 0;
    }
    if (ct_compare(r, CT_OP_LT, a, b, res, line)) return -1;
    if (*res) {
        *res = -1;
        return 0;
    }
    return ct_compare(r, CT_OP_GT, a, b, res, line);
}

/* Jinja's dictsort(case_sensitive=False, by='key', reverse=False): the
 * items as [key, value] pairs, sorted stably. */
static int filter_dictsort(Render *r, const CtNode *nd, const Val *v, Val *out) {
    int line = nd->line, present;
    Val cs = v_bool(0), by = v_str(str_lit("key")), rev = v_bool(0);
    for (size_t i = 0; i < nd->nkw; i++)
        if (strcmp(nd->kwnames[i], "case_sensitive") && strcmp(nd->kwnames[i], "by") && strcmp(nd->kwnames[i], "reverse"))
            return ct_fail(r, line, "dictsort's argument '%s' is not supported", nd->kwnames[i]);
    if (ct_arg_or_kw(r, nd, 0, "case_sensitive", &cs, &present) || ct_arg_or_kw(r, nd, 1, "by", &by, &present) ||
        ct_arg_or_kw(r, nd, 2, "reverse", &rev, &present))
        return -1;
    if (v->kind != V_DICT || v->d->is_namespace) return ct_fail(r, line, "dictsort needs a dict, not %s", v_typename(v));
    int by_value = by.kind == V_STR && str_eq(by.s, "value");
    if (by.kind != V_STR || (!by_value && !str_eq(by.s, "key")))
        return ct_fail(r, line, "dictsort's by must be 'key' or 'value'");
    Val items;
    Val m = {.kind = V_METHOD, .s = str_lit("items"), .self = (Val *)v};
    CtNode none = {.line = line};
    if (ct_call_method(r, &none, &m, &items)) return -1;
    List *l = items.l;
    for (size_t i = 1; i < l->n; i++) { /* insertion sort: stable, as Python's */
        Val x = l->v[i];
        size_t j = i;
        while (j > 0) {
            int c;
            if (ct_step(r, line) ||
                dictsort_cmp(r, &l->v[j - 1].l->v[by_value], &x.l->v[by_value], !v_truthy(&cs), &c, line))
                return -1;
            if (v_truthy(&rev) ? c >= 0 : c <= 0) break;
            l->v[j] = l->v[j - 1];
            j--;
        }
        l->v[j] = x;
    }
    items.l->flavor = L_LIST; /* sorted(): a list */
    *out = items;
    return 0;
}

/* Python's int(s) (integral: digits with an optional sign) and float(s)
 * (a decimal number, inf, nan) of a string with white space around it:
 * 0, or -1 when Python refuses it. */
static int parse_python_number(Str s, int *integral, int64_t *i, double *f) {
    s = str_strip(s, NULL, 1, 1);
    char buf[80];
    if (s.n == 0 || s.n >= sizeof buf) return -1;
    memcpy(buf, s.p, s.n);
    buf[s.n] = 0;
    size_t k = buf[0] == '+' || buf[0] == '-';
    size_t digits = 0, dot = 0, exp = 0;
    for (size_t j = k; j < s.n; j++) {
        char c = buf[j];
        if (c >= '0' && c <= '9') digits++;
        else if (c == '.' && !dot && !exp) dot = 1;
        else if ((c == 'e' || c == 'E') && digits && !exp && j + 1 < s.n) {
            exp = 1;
            if (buf[j + 1] == '+' || buf[j + 1] == '-') j++;
            if (j + 1 >= s.n) return -1;
        } else {
            /* inf, infinity, nan: float() takes them; anything else is refused */
            const char *rest = buf + k;
            if (j == k && (!strcasecmp(rest, "inf") || !strcasecmp(rest, "infinity") || !strcasecmp(rest, "nan"))) {
                *integral = 0;
                *f = strtod(buf, NULL);
                return 0;
            }
            return -1;
        }
    }
    if (!digits) return -1;
    *integral = !dot && !exp;
    if (*integral) {
        if (s.n - k > 18) return -1; /* beyond int64: refused rather than rounded */
        *i = strtoll(buf, NULL, 10);
    }
    *f = strtod(buf, NULL);
    return 0;
}

/* Jinja's int(default=0) and float(default=0.0): a number as it is
 * converted, a string as Python reads it, else the default. */
static int filter_number(Render *r, const CtNode *nd, const Val *v, const Val *dflt, int to_int, Val *out) {
    int integral = 0;
    int64_t i = 0;
    double f = 0;
    int ok = 1;
    if (v->kind == V_UNDEF) return ct_undefined_error(r, v, nd->line); /* Python's int() of Jinja's undefined raises */
    if (v->kind == V_INT) integral = 1, i = v->i;
    else if (v->kind == V_BOOL) integral = 1, i = v->b;
    else if (v->kind == V_FLOAT) f = v->f;
    else if (v->kind == V_STR) ok = parse_python_number(v->s, &integral, &i, &f) == 0;
    else ok = 0;
    if (ok && to_int && !integral) { /* int(float(s)): truncation; inf and nan refused */
        if (isnan(f) || isinf(f) || fabs(f) >= 9.2e18) ok = 0;
        else integral = 1, i = (int64_t)f;
    }
    if (!ok) {
        if (dflt) *out = *dflt;
        else *out = to_int ? v_int(0) : (Val){.kind = V_FLOAT, .f = 0};
        return 0;
    }
    *out = to_int ? v_int(i) : (Val){.kind = V_FLOAT, .f = integral ? (double)i : f};
    return 0;
}

/* Jinja's unique(case_sensitive=False, attribute=None): the first of each
 * value, strings compared case-folded (ASCII; other text refused);
 * lists and dicts, which Python cannot hash, refused. */
static int filter_unique(Render *r, const CtNode *nd, const Val *v, Val *out) {
    int line = nd->line, present, has_attr;
    Val cs = v_bool(0), attr = {0};
    for (size_t i = 0; i < nd->nkw; i++)
        if (strcmp(nd->kwnames[i], "case_sensitive") && strcmp(nd->kwnames[i], "attribute"))
            return ct_fail(r, line, "unique's argument '%s' is not supported", nd->kwnames[i]);
    if (ct_arg_or_kw(r, nd, 0, "case_sensitive", &cs, &present) || ct_arg_or_kw(r, nd, 1, "attribute", &attr, &has_attr))
        return -1;
    int fold = !v_truthy(&cs);
    List *items, *l = list_new(&r->a, 0), *keys = list_new(&r->a, 0);
    if (!l || !keys) return ct_oom(r, line);
    if (ct_iterate(r, v, &items, line)) return -1;
    for (size_t i = 0; i < items->n; i++) {
        Val key = items->v[i];
        if (has_attr && ct_index(r, &key, &attr, &key, line)) return -1;
        if ((key.kind == V_LIST && key.l->flavor != L_TUPLE && key.l->flavor != L_RANGE) || key.kind == V_DICT)
            return ct_fail(r, line, "unique of %s values (unhashable)", v_typename(&key));
        if (fold && key.kind == V_STR) {
            Val lowered;
            for (size_t k = 0; k < key.s.n; k++)
                if ((unsigned char)key.s.p[k] >= 0x80)
                    return ct_fail(r, line, "unique of non-ASCII text without case_sensitive=true is not supported");
            if (ct_change_case(r, &key, "lower", &lowered, line)) return -1;
            key = lowered;
        }
        int seen = 0;
        for (size_t j = 0; j < keys->n && !seen; j++)
            if (ct_equal(r, &keys->v[j], &key, &seen, line)) return -1;
        if (!seen && (!list_push(&r->a, keys, key) || !list_push(&r->a, l, items->v[i]))) return ct_oom(r, line);
        if (ct_step(r, line)) return -1;
    }
    l->flavor = L_GENERATOR;
    *out = (Val){.kind = V_LIST, .l = l};
    return 0;
}

int ct_eval_filter(Render *r, const CtNode *nd, Val *out) {
    Val v;
    int line = nd->line, present;
    const char *f = nd->s;
    if (ct_eval(r, nd->a, &v)) return -1;
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr") || !strcmp(f, "select") || !strcmp(f, "reject"))
        return ct_filter_select(r, nd, &v, strstr(f, "attr") != NULL, f[0] == 'r', out);
    if (!strcmp(f, "tojson")) {
        Val indent = {0};
        if (ct_arg_or_kw(r, nd, 0, "indent", &indent, &present)) return -1;
        for (size_t i = 0; i < nd->nkw; i++)
            if (strcmp(nd->kwnames[i], "indent")) return ct_fail(r, line, "tojson's argument '%s' is not supported", nd->kwnames[i]);
        if (present && indent.kind != V_INT && indent.kind != V_NONE) return ct_fail(r, line, "tojson's indent must be an integer");
        Buf b = ct_buf(r);
        int ind = present && indent.kind == V_INT ? (int)(indent.i < 0 ? 0 : indent.i > 64 ? 64 : indent.i) : -1;
        if (v_to_json(&b, &v, ind, 0, 0)) {
            if (r->a.failed) return ct_oom(r, line);
            return ct_fail(r, line, "tojson of %s", v.kind == V_UNDEF ? "an undefined value" : v_typename(&v));
        }
        Str js = buf_str(&b);
        uint32_t origin = v_origin(&v, 0);
        if (origin) { /* all of one message's fields (a tool call): the JSON is that message's too */
            uint32_t *tag = ARENA_NEWN(&r->a, uint32_t, js.n + 1);
            if (!tag) return ct_oom(r, line);
            for (size_t k = 0; k < js.n; k++) tag[k] = origin;
            js.tag = tag;
        }
        *out = v_str(js);
        return 0;
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        Val dflt = {.kind = V_STR, .s = str_lit("")}, boolean = v_bool(0);
        if (ct_arg_or_kw(r, nd, 0, "default_value", &dflt, &present) ||
            ct_arg_or_kw(r, nd, 1, "boolean", &boolean, &present))
            return -1;
        *out = v.kind == V_UNDEF || (v_truthy(&boolean) && !v_truthy(&v)) ? dflt : v;
        return 0;
    }
    if (!strcmp(f, "join")) {
        Val sep = v_str(str_lit("")), attr = {0};
        int has_attr;
        if (ct_arg_or_kw(r, nd, 0, "d", &sep, &present) || ct_arg_or_kw(r, nd, 1, "attribute", &attr, &has_attr)) return -1;
        Str ss;
        List *items;
        if (ct_to_str(r, &sep, &ss, line) || ct_iterate(r, &v, &items, line)) return -1;
        Buf b = ct_buf(r);
        for (size_t i = 0; i < items->n; i++) {
            Val x = items->v[i];
            Str xs;
            if (has_attr && ct_index(r, &x, &attr, &x, line)) return -1;
            if (ct_to_str(r, &x, &xs, line)) return -1;
            if ((i && !buf_put(&b, ss.p, ss.tag, ss.n)) || !buf_put(&b, xs.p, xs.tag, xs.n)) return ct_oom(r, line);
        }
        *out = v_str(buf_str(&b));
        return 0;
    }
    if (!strcmp(f, "map")) {
        Val attr = {0}, dflt = {0};
        int has_attr, has_dflt;
        if (nd->nargs) return ct_fail(r, line, "map supports only attribute= (and default=)");
        if (ct_arg_or_kw(r, nd, 99, "attribute", &attr, &has_attr) || ct_arg_or_kw(r, nd, 99, "default", &dflt, &has_dflt)) return -1;
        if (!has_attr) return ct_fail(r, line, "map supports only attribute= (and default=)");
        List *items, *l = list_new(&r->a, 0);
        if (!l) return ct_oom(r, line);
        if (!v_truthy(&v)) items = l; /* as Jinja: map over none is empty */
        else if (ct_iterate(r, &v, &items, line)) return -1;
        for (size_t i = 0; i < items->n; i++) {
            Val x;
            if (ct_index(r, &items->v[i], &attr, &x, line)) return -1;
            if (x.kind == V_UNDEF && has_dflt) x = dflt;
            if (!list_push(&r->a, l, x)) return ct_oom(r, line);
        }
        l->flavor = L_GENERATOR; /* Jinja's map yields */
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    if (!strcmp(f, "indent")) return filter_indent(r, nd, &v, out);
    if (!strcmp(f, "dictsort")) return filter_dictsort(r, nd, &v, out);
    if (!strcmp(f, "unique")) return filter_unique(r, nd, &v, out);
    /* the positional arguments each of the rest takes */
    static const struct {
        const char *name;
        size_t max;
    } ARGS[] = {{"trim", 1}, {"length", 0}, {"count", 0}, {"upper", 0}, {"lower", 0}, {"capitalize", 0},
                {"title", 0}, {"items", 0}, {"list", 0}, {"first", 0}, {"last", 0}, {"reverse", 0}, {"string", 0},
                {"int", 1}, {"float", 1}, {"replace", 3}, {"abs", 0}};
    for (size_t k = 0; k < sizeof ARGS / sizeof *ARGS; k++)
        if (!strcmp(ARGS[k].name, f) && nd->nargs > ARGS[k].max)
            return ct_fail(r, line, "the filter '%s' takes at most %zu arguments here", f, ARGS[k].max);
    Val args[3] = {0};
    if (ct_no_kwargs(r, nd, f) || ct_eval_args(r, nd, args, 3)) return -1;
    if (!strcmp(f, "trim") || !strcmp(f, "replace")) { /* Jinja's soft_str: any value as its str() */
        Str s;
        if (ct_to_str(r, &v, &s, line)) return -1;
        v = v_str(s);
    }
    if (!strcmp(f, "trim")) return ct_strip_call(r, &v, nd->nargs ? &args[0] : NULL, 1, 1, out, line);
    if ((!strcmp(f, "length") || !strcmp(f, "count")) && v.kind == V_LIST && v.l->flavor == L_GENERATOR)
        return ct_fail(r, line, "a generator has no length (a select, map, unique, items or reverse result); add | list");
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        *out = v_int(v.kind == V_STR ? (int64_t)utf8_count(v.s) : v.kind == V_LIST ? (int64_t)v.l->n
                     : v.kind == V_DICT ? (int64_t)v.d->n : 0);
        if (v.kind != V_STR && v.kind != V_LIST && v.kind != V_DICT && v.kind != V_UNDEF)
            return ct_fail(r, line, "%s has no length", v_typename(&v));
        return 0;
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        Str s;
        if (ct_to_str(r, &v, &s, line)) return -1;
        Val sv = v_str(s);
        return ct_change_case(r, &sv, !strcmp(f, "title") ? "jtitle" : f, out, line);
    }
    if (!strcmp(f, "items")) {
        if (v.kind == V_UNDEF) {
            *out = (Val){.kind = V_LIST, .l = list_new(&r->a, 0)};
            return out->l ? 0 : ct_oom(r, line);
        }
        if (v.kind != V_DICT || v.d->is_namespace) return ct_fail(r, line, "items needs a dict, not %s", v_typename(&v));
        Val m = {.kind = V_METHOD, .s = str_lit("items"), .self = &v};
        CtNode none = {.line = line};
        if (ct_call_method(r, &none, &m, out)) return -1;
        out->l->flavor = L_GENERATOR; /* Jinja's items filter yields */
        return 0;
    }
    if (!strcmp(f, "list")) {
        List *items, *l;
        if (ct_iterate(r, &v, &items, line)) return -1;
        if (!(l = list_new(&r->a, items->n))) return ct_oom(r, line);
        for (size_t i = 0; i < items->n; i++) list_push(&r->a, l, items->v[i]);
        *out = (Val){.kind = V_LIST, .l = l};
        return 0;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        List *items;
        int gen = v.kind == V_LIST && v.l->flavor == L_GENERATOR;
        if (gen && f[0] == 'l') return ct_fail(r, line, "last of a generator (Python cannot reverse one)");
        if (ct_iterate(r, &v, &items, line)) return -1;
        if (gen && items->n) v.l->consumed = 2; /* first took one item of it */
        *out = items->n ? items->v[f[0] == 'f' ? 0 : items->n - 1] : ct_undefined(str_lit(f));
        return 0;
    }
    if (!strcmp(f, "reverse")) {
        List *items, *l;
        if (v.kind == V_LIST && v.l->flavor == L_GENERATOR)
            return ct_fail(r, line, "reverse of a generator (Python cannot reverse one)");
        if (v.kind == V_UNDEF) return ct_fail(r, line, "reverse of an undefined value");
        if (ct_iterate(r, &v, &items, line)) return -1;
        if (!(l = list_new(&r->a, items->n))) return ct_oom(r, line);
        for (size_t i = items->n; i-- > 0;) list_push(&r->a, l, items->v[i]);
        if (v.kind == V_STR) {
            Val j = {.kind = V_LIST, .l = l};
            Buf b = ct_buf(r);
            for (size_t i = 0; i < l->n; i++)
                if (!buf_put(&b, l->v[i].s.p, l->v[i].s.tag, l->v[i].s.n)) return ct_oom(r, line);
            (void)j;
            *out = v_str(buf_str(&b));
        } else {
            l->flavor = L_GENERATOR; /* Python's reversed(): an iterator */
            *out = (Val){.kind = V_LIST, .l = l};
        }
        return 0;
    }

    if (!strcmp(f, "string")) {
        Str s;
        if (ct_to_str(r, &v, &s, line)) return -1;
        *out = v_str(s);
        return 0;
    }
    if (!strcmp(f, "int") || !strcmp(f, "float")) return filter_number(r, nd, &v, nd->nargs ? &args[0] : NULL, f[0] == 'i', out);
    if (!strcmp(f, "replace")) {
        if (nd->nargs < 2) return ct_fail(r, line, "replace takes two or three arguments");
        return ct_str_replace(r, &v, &args[0], &args[1], nd->nargs > 2 ? &args[2] : NULL, out, line);
    }
    /* abs: the last of the filters the parser lets through */
    if (v.kind == V_BOOL) *out = v_int(v.b);
    else if (v.kind == V_INT) *out = v_int(v.i < 0 ? -v.i : v.i);
    else if (v.kind == V_FLOAT) *out = (Val){.kind = V_FLOAT, .f = fabs(v.f)};
    else return ct_fail(r, line, "abs needs a number, not %s", v_typename(&v));
    return 0;
}

