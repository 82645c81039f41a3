/* sema_eval.c: the public constant evaluation of sema.h (sema_eval and its
 * typed forms) for the target, plan and hf blocks. Below the driver sema.c
 * and hfmap.c, which both call it, so calls between them go one way:
 * sema.c -> hfmap.c -> sema_eval.c. */
#include <string.h>
#include "sema_impl.h"

bool sema_eval(Sema *s, const Expr *e, SemaValue *out) {
    memset(out, 0, sizeof *out);
    EvalCtx c = sema_const_ctx(0);
    Val v = sema_eval_expr(s, &c, e);
    switch (v.k) {
    case V_INT: out->kind = SV_INT; out->i = v.i; out->f = (double)v.i; break;
    case V_FLOAT: out->kind = SV_FLOAT; out->f = v.f; break;
    case V_STR: out->kind = SV_STR; out->s = v.s; out->slen = v.slen; break;
    case V_BOOL: out->kind = SV_BOOL; out->i = v.i; out->f = (double)v.i; break;
    case V_POISON: return false;
    default: sema_error(s, e->span, "expected a single constant, got %s", sema_vkind_name(v.k)); return false;
    }
    out->unit = v.unit;
    return true;
}

bool sema_eval_int(Sema *s, const Expr *e, int64_t *out) {
    SemaValue v;
    if (!sema_eval(s, e, &v)) return false;
    if (v.kind != SV_INT) {
        sema_error(s, e->span, "expected an integer");
        return false;
    }
    *out = v.i;
    return true;
}

bool sema_eval_float(Sema *s, const Expr *e, double *out) {
    SemaValue v;
    if (!sema_eval(s, e, &v)) return false;
    if (v.kind != SV_INT && v.kind != SV_FLOAT) {
        sema_error(s, e->span, "expected a number");
        return false;
    }
    *out = v.f;
    return true;
}

bool sema_eval_string(Sema *s, const Expr *e, const char **out) {
    SemaValue v;
    if (!sema_eval(s, e, &v)) return false;
    if (v.kind != SV_STR) {
        sema_error(s, e->span, "expected a string");
        return false;
    }
    *out = v.s;
    return true;
}
