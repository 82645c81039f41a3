/* chattmpl_impl: what chattmpl_parse.c (template text -> tree) and
 * chattmpl.c (tree -> rendered text) share: the tree's nodes and the
 * ChatTemplate that owns them. Not a public interface.
 *
 * The one call loop among the files of runtime/chat is the interpreter's
 * own and stays: the evaluator (chattmpl_eval.c) calls the library
 * (chattmpl_filters.c) for a filter, test, method or global, and the
 * library calls the evaluator back, because a call's arguments are
 * expressions it evaluates (ct_eval, ct_eval_args, ct_arg_or_kw), and
 * filters and tests such as sort, unique, equalto and `in` compare values
 * with the evaluator's semantics (ct_compare, ct_equal). The two are one
 * interpreter split by job; the loop is the recursion of the expression
 * grammar, as in any tree-walking interpreter. */
#ifndef ZINF_CHATTMPL_IMPL_H
#define ZINF_CHATTMPL_IMPL_H

#include <stdint.h>

#include "arena.h"
#include "chattmpl.h"

typedef enum CtKind {
    /* expressions */
    CT_STR,    /* s, n */
    CT_INT,    /* i */
    CT_FLOAT,  /* f */
    CT_BOOL,   /* i */
    CT_NONE,
    CT_NAME,   /* s */
    CT_LIST,   /* args; i: a tuple */
    CT_DICT,   /* args: key, value, key, value, ... */
    CT_ATTR,   /* a.s */
    CT_INDEX,  /* a[b] */
    CT_SLICE,  /* a[args[0]:args[1]:args[2]], each may be NULL */
    CT_CALL,   /* a(args, kw) */
    CT_FILTER, /* a | s(args, kw) */
    CT_TEST,   /* a is [not (i)] s(args) */
    CT_NOT,    /* not a */
    CT_NEG,    /* -a */
    CT_BINOP,  /* a op b: op is one of + - * / // % ** ~ */
    CT_CMP,    /* a op b: == != < > <= >= in notin */
    CT_AND,
    CT_OR,
    CT_COND,   /* a if b else c (c may be NULL) */
    /* statements, chained by next */
    CT_TEXT,     /* s, n */
    CT_OUTPUT,   /* {{ a }} */
    CT_IF,       /* if a: body else: orelse */
    CT_FOR,      /* for s[, s2] in a [if b]: body else: orelse */
    CT_SET,      /* set s = a, or set s.s2 = a */
    CT_SETBLOCK, /* set s: body's output as a string */
    CT_GENERATION, /* generation: body, its output an assistant range */
    CT_MACRO,    /* macro s(args: CT_NAME parameters; kwargs[i]: the default of
                    parameter i, or NULL): body */
    CT_BREAK,
    CT_CONTINUE,
} CtKind;

enum { CT_OP_ADD = 1, CT_OP_SUB, CT_OP_MUL, CT_OP_DIV, CT_OP_FLOORDIV, CT_OP_MOD, CT_OP_POW, CT_OP_CONCAT,
       CT_OP_EQ, CT_OP_NE, CT_OP_LT, CT_OP_GT, CT_OP_LE, CT_OP_GE, CT_OP_IN, CT_OP_NOTIN };

typedef struct CtNode CtNode;
struct CtNode {
    CtKind kind;
    int op;
    int line;
    const char *s, *s2;
    size_t n;
    int64_t i;
    double f;
    CtNode *a, *b, *c;
    CtNode **args;
    size_t nargs;
    const char **kwnames;
    CtNode **kwargs;
    size_t nkw;
    CtNode *body, *orelse;
    CtNode *next;
};

typedef struct CtToken {
    const char *name;
    char *value;
} CtToken;

struct ChatTemplate {
    Arena arena;
    const char *name;
    CtNode *body;
    CtToken *tokens;
    size_t ntokens, captokens;
    int has_generation; /* a {% generation %} block: the ranges are those */
};

/* Parses src into t->body (nodes, and a copy of src they point into, in
 * t->arena). 0, or -1 with "NAME: line N: ..." in err. */
int chattmpl_parse_into(ChatTemplate *t, const char *src, size_t n, char *err, size_t errlen);

#endif
