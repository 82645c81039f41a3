/* prim: the table of primitives every stage shares.
 *
 * One entry per primitive of runtime/plan/prim.def: its tensor inputs (count and
 * role names), its attributes (name, kind, where it is stored in GOp.iattr /
 * GOp.fattr, default) and its shape rule. The checker (sema) turns a .zl call
 * into a PrimCall and asks prim_infer for the outputs; later stages can call
 * prim_infer on a GOp's operands to re-derive (and so verify) output shapes.
 * Semantics: docs/primitives.md.
 *
 * Shape rules never print: a rejected call fills a PrimError with a message
 * that names the operands by role and gives their shapes in words
 * ("x has last dimension 768 but w has 1024 rows") and the set of operands
 * the problem is about, so the caller can point a note at each.
 */
#ifndef ZINF_PRIM_H
#define ZINF_PRIM_H
#include <stdbool.h>
#include <stdint.h>
#include "ast.h"
#include "graph.h"

enum { PRIM_MAX_IN = 11, PRIM_MAX_ATTR = 13, PRIM_MAX_LISTS = 2 };

typedef enum PrimAttrKind {
    PA_INT,   /* integer, stored in iattr[slot] */
    PA_FLOAT, /* number, stored in fattr[slot] */
    PA_FLAG,  /* boolean (bare flag name, or = true/false), iattr[slot] = 0/1 */
    PA_SIZES, /* split: a piece count or a list of sizes (iattr[slot] = pieces) */
    PA_WORD,  /* one of the strings in words (e.g. scaling = "llama3"): iattr[slot] = its index */
    PA_FLOATS, /* a list of numbers (rope's short_factor): PrimCall.lists[slot]; the op's table holds
                * the lists in slot order (GOp.table) */
} PrimAttrKind;

typedef struct PrimAttr {
    const char *name;
    PrimAttrKind kind;
    int slot;          /* index into GOp.iattr (PA_INT, PA_FLAG, PA_SIZES) or GOp.fattr */
    bool required;
    bool positional;   /* may be given as a positional constant after the tensors */
    double def;        /* default when not required */
    const char *const *words; /* PA_WORD: the accepted strings, NULL-terminated */
} PrimAttr;



/* A tensor operand or result: dtype and shape. */
typedef struct PrimShape {
    DType dtype;
    int rank;
    int64_t dims[GRAPH_MAX_RANK];
} PrimShape;

/* A call of a primitive, ready for its shape rule. */
typedef struct PrimCall {
    PrimId prim;
    int nin;
    PrimShape in[PRIM_MAX_IN];
    int64_t iattr[PLAN_MAX_IATTR];
    double fattr[PLAN_MAX_FATTR];
    bool attr_set[PRIM_MAX_ATTR];      /* which attributes were given */
    int64_t sizes[GRAPH_MAX_OUT];      /* split with a size list */
    int nsizes;                        /* 0: split into iattr[IA_SPLIT_N] equal pieces */
    const double *lists[PRIM_MAX_LISTS]; /* PA_FLOATS attributes, by slot */
    int nlists[PRIM_MAX_LISTS];
    DType act_dtype;                   /* dtype of floating-point results (the training dtype) */
} PrimCall;

typedef struct PrimError {
    char msg[320];
    unsigned blame; /* bit i: operand i's shape or dtype is part of the problem */
} PrimError;

/* A primitive's row: prim.def's identity (id, name, arity), then the
 * compiler's half (compiler/prim.c). */
typedef struct PrimInfo {
    PrimId id;
    const char *name;
    int nin_min, nin_max, nout; /* nout -1: variable (split) */
    const char *in_names[PRIM_MAX_IN];
    int nattr;
    PrimAttr attrs[PRIM_MAX_ATTR];
    const char *doc;   /* one line, for messages and --help */
    unsigned grad_inputs; /* bit i: input i has a gradient (the backward op computes it) */
    /* the family's shape and dtype rule (prim_infer has checked arity,
     * required attributes and ranks): outputs into out[0..*nout) */
    bool (*rule)(const PrimCall *c, const struct PrimInfo *p, PrimShape *out, int *nout, PrimError *err);
} PrimInfo;

/* The entry of a primitive; NULL for an id out of range. */
const PrimInfo *prim_info(PrimId id);
/* The primitive named name, or NULL. */
const PrimInfo *prim_lookup(const char *name);
/* The attribute of p named name, or NULL. */
const PrimAttr *prim_attr(const PrimInfo *p, const char *name);
/* Fills c's attributes that were not given with their defaults. */
void prim_defaults(PrimCall *c);
/* Applies the shape and dtype rule of c->prim. On success writes the outputs
 * to out[0..*nout) and returns true; otherwise fills err and returns false.
 * Attributes must be set (prim_defaults) before. */
bool prim_infer(const PrimCall *c, PrimShape *out, int *nout, PrimError *err);
/* Attributes the source gave, with a value other than their default, that
 * the call's other attributes leave unused (rope's factor without a
 * scaling): false with err filled. The checker
 * calls it on what was written; prim_infer does not (an op re-derived from a
 * GOp has every attribute set). */
bool prim_unused_attrs(const PrimCall *c, PrimError *err);
/* "[8, 64, 768]" into buf. */
const char *prim_shape_str(const PrimShape *s, char *buf, size_t n);
/* "f32", "bf16", "f16", "i32", "none". */
const char *prim_dtype_str(DType t);

#endif
