/* chattmpl_eval: what the evaluator (chattmpl_eval.c: expressions and
 * statements), its library (chattmpl_filters.c: filters, tests, methods,
 * globals) and the API (chattmpl.c) share: one render's state and the
 * calls between them. Every call that can fail returns -1 after recording
 * the error in the render (the first error wins); not a public interface. */
#ifndef ZINF_CHATTMPL_EVAL_H
#define ZINF_CHATTMPL_EVAL_H

#include "chattmpl_impl.h"
#include "chattmpl_value.h"

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
    int capturing; /* inside a block set: output goes to a string */
    size_t *gen;   /* {% generation %} blocks: start, end, start, end, ... */
    size_t ngen, capgen;
    char *err;
    size_t errlen;
} Render;

/* Records "NAME: line N: ..." (the first error of a render); returns -1. */
__attribute__((format(printf, 3, 4))) int ct_fail(Render *r, int line, const char *fmt, ...);
int ct_oom(Render *r, int line);
/* Counts one evaluation step against CHATTMPL_MAX_STEPS and checks memory. */
int ct_step(Render *r, int line);
Buf ct_buf(Render *r);
/* Python's str(v); strings keep their tags. */
int ct_to_str(Render *r, const Val *v, Str *out, int line);
int ct_need_str(Render *r, const Val *v, const char *what, int line);
Val ct_undefined(Str name);
int ct_undefined_error(Render *r, const Val *v, int line);
/* v_equal, failing on values nested too deep. */
int ct_equal(Render *r, const Val *a, const Val *b, int *res, int line);

int ct_eval(Render *r, const CtNode *nd, Val *out);
/* The positional arguments of a call, filter or test (at most max). */
int ct_eval_args(Render *r, const CtNode *nd, Val *args, size_t max);
/* The keyword argument kw, else the positional one at pos; *present says
 * whether there was one. */
int ct_arg_or_kw(Render *r, const CtNode *nd, size_t pos, const char *kw, Val *out, int *present);
int ct_no_kwargs(Render *r, const CtNode *nd, const char *what);
/* obj.name as Jinja reads it: a method of a string or dict, else a dict's
 * member, else undefined. */
int ct_getattr(Render *r, const Val *obj, Str name, Val *out, int line);
/* obj[ix]; out of range or absent is undefined, as in Jinja. */
int ct_index(Render *r, const Val *obj, const Val *ix, Val *out, int line);
int ct_compare(Render *r, int op, const Val *a, const Val *b, int *res, int line);
int ct_exec_block(Render *r, const CtNode *nd);
int ct_call_macro(Render *r, const CtNode *call, const Val *m, Val *out);

int ct_run_test(Render *r, const char *name, const Val *v, const Val *args, size_t nargs, int *res, int line);
int ct_call_method(Render *r, const CtNode *nd, const Val *m, Val *out);
int ct_call_global(Render *r, const CtNode *nd, const char *fn, Val *out);
/* The items a filter or loop goes over: a list's, a dict's keys, a
 * string's characters; undefined is empty, as in Jinja. */
int ct_iterate(Render *r, const Val *v, List **out, int line);
int ct_eval_filter(Render *r, const CtNode *nd, Val *out);

#endif
