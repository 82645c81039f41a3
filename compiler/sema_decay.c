/* sema_decay.c: train { no_decay = ["bias", "norm"] }: the parameters AdamW
 * steps without weight decay, as the Hugging Face Trainer leaves out every
 * bias and the weights of LayerNorm and RMSNorm modules. The classes are
 * read off the graph, not the names:
 *   "bias": the bias operand of a linear or a layernorm;
 *   "norm": every parameter of a layernorm or an rmsnorm (gain and bias).
 * [] (or no setting) decays every parameter; zinfc --from-hf writes
 * ["bias", "norm"]. */
#include <string.h>
#include "plan.h"
#include "sema_impl.h"

_Static_assert((int)GRAPH_ADAM_NO_DECAY == (int)PLAN_ADAM_NO_DECAY, "OP_ADAM's no-decay slot differs in graph and plan");

enum { CLASS_BIAS = 1, CLASS_NORM = 2 };

static void mark(Graph *g, const GOp *o, int i) {
    if (i < o->nin && o->in[i] >= 0 && g->tensors[o->in[i]].cls == TC_PARAM) g->tensors[o->in[i]].no_decay = true;
}

/* The classes the setting names; -1 (reported) when it is not a list of them. */
static int classes(Sema *s, const Setting *st) {
    const Expr *e = st->value;
    const char *usage = "no_decay must be a list of parameter classes: no_decay = [\"bias\", \"norm\"] (or [] to decay every parameter)";
    if (e->kind != EX_LIST) {
        sema_error(s, e->span, "%s", usage);
        return -1;
    }
    int cls = 0;
    for (int i = 0; i < e->args.len; i++) {
        const Expr *x = e->args.items[i].value;
        EvalCtx c = sema_const_ctx(s->train_scope);
        Val v = sema_eval_expr(s, &c, x);
        if (v.k == V_POISON) return -1;
        if (v.k != V_STR) {
            sema_error(s, x->span, "%s", usage);
            return -1;
        }
        if (v.slen == 4 && !memcmp(v.s, "bias", 4)) cls |= CLASS_BIAS;
        else if (v.slen == 4 && !memcmp(v.s, "norm", 4)) cls |= CLASS_NORM;
        else {
            sema_error(s, x->span, "no_decay: unknown parameter class \"%.*s\"; the classes are \"bias\" (the bias of "
                       "a linear or layernorm) and \"norm\" (the weights of a layernorm or rmsnorm)", (int)v.slen, v.s);
            return -1;
        }
    }
    return cls;
}

void sema_apply_no_decay(Sema *s, Graph *g) {
    const Setting *st = NULL;
    for (int i = 0; s->train_decl && i < s->train_decl->settings.len; i++)
        if (strcmp(s->train_decl->settings.items[i]->key, "no_decay") == 0) st = s->train_decl->settings.items[i];
    if (!st || !st->value) return;
    int cls = classes(s, st);
    if (cls <= 0) return;
    for (int k = 0; k < g->nops; k++) {
        const GOp *o = &g->ops[k];
        if (o->kind != OP_FWD) continue;
        bool norm = o->prim == PRIM_LAYERNORM || o->prim == PRIM_RMSNORM;
        if ((cls & CLASS_BIAS) && (o->prim == PRIM_LINEAR || o->prim == PRIM_LAYERNORM)) mark(g, o, 2);
        if ((cls & CLASS_NORM) && norm) {
            mark(g, o, 1);
            mark(g, o, 2);
        }
    }
}
