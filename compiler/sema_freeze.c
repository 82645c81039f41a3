/* sema_freeze.c: train { freeze = ["embed.*", "block.*.attn.*"] }: the
 * parameters that are not trained, marked on the forward graph once every
 * parameter exists (GTensor.frozen). A pattern is a parameter's name as
 * --emit=graph prints it, a glob with '*' (any run of characters, dots
 * included), or a name without '*' that is a prefix ending at a dot
 * ("block.3" freezes block 3), as in the plan block's tiles. A pattern that
 * matches nothing is an error with the nearest pattern that would match.
 * The patterns apply in order, and "!pattern" trains again what it matches:
 * ["*", "!*.lora_*"] trains only LoRA adapters.
 * `param [..] init zeros frozen` marks one where it is made (sema_layer.c);
 * freezing every parameter, either way, is an error: nothing would be
 * trained.
 *
 * train { quantize = "nf4" | "int8" } then stores frozen weights quantized
 * (GTensor.dtype DT_NF4 or DT_INT8, runtime/hostk/quant.h): by default the
 * frozen weights of the repeated blocks (attention and MLP linears) that
 * are only ever the weight of a linear or matmul, or the parameters that
 * quantize_params = [patterns] names (the patterns of freeze, in order,
 * "!" taking one out). A named one that is trained, is not such a weight
 * or whose size is not a whole number of blocks of 64 is an error naming
 * it. */
#include <string.h>
#include "sema_impl.h"

static bool glob(const char *p, const char *s) {
    if (!*p) return !*s;
    if (*p == '*') return glob(p + 1, s) || (*s && glob(p, s + 1));
    return *s == *p && glob(p + 1, s + 1);
}

static bool freeze_matches(const char *pat, const char *name) {
    size_t n = strlen(pat);
    return glob(pat, name) || (!strchr(pat, '*') && !strncmp(pat, name, n) && name[n] == '.');
}

/* name with each all-digit component ("3" in "block.3.attn") made '*' */
static const char *generalise(Arena *a, const char *name) {
    size_t n = strlen(name);
    char *o = arena_alloc(a, n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && name[j] != '.') j++;
        bool digits = j > i;
        for (size_t q = i; q < j; q++) digits &= name[q] >= '0' && name[q] <= '9';
        if (digits) o[k++] = '*';
        else {
            memcpy(o + k, name + i, j - i);
            k += j - i;
        }
        if (j < n) o[k++] = '.';
        i = j + 1;
    }
    o[k] = 0;
    return o;
}

/* Patterns that match something, for "did you mean": each parameter's name
 * and its generalised form, and their prefixes at a dot, alone and with ".*". */
static const char **freeze_candidates(Sema *s, const Graph *g, int *n) {
    int cap = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].cls == TC_PARAM && g->tensors[i].name) cap += 2 * (2 + 2 * (int)strlen(g->tensors[i].name));
    const char **c = ARENA_NEWN(s->a, const char *, cap + 1);
    *n = 0;
    if (!c) return NULL;
    for (int i = 0; i < g->ntensors; i++) {
        if (g->tensors[i].cls != TC_PARAM || !g->tensors[i].name) continue;
        const char *forms[2] = {g->tensors[i].name, generalise(s->a, g->tensors[i].name)};
        for (int f = 0; f < 2 && forms[f]; f++) {
            c[(*n)++] = forms[f];
            for (const char *d = strchr(forms[f], '.'); d; d = strchr(d + 1, '.')) {
                int len = (int)(d - forms[f]);
                c[(*n)++] = arena_printf(s->a, "%.*s", len, forms[f]);
                c[(*n)++] = arena_printf(s->a, "%.*s.*", len, forms[f]);
            }
        }
    }
    return c;
}

static void no_match(Sema *s, const Graph *g, const char *pat, Span sp) {
    int n = 0;
    const char **c = freeze_candidates(s, g, &n);
    const char *near = c ? diag_nearest(pat, c, n) : NULL;
    if (near) sema_error(s, sp, "freeze: the pattern \"%s\" matches no parameter; did you mean \"%s\"?", pat, near);
    else if (sema_error(s, sp, "freeze: the pattern \"%s\" matches no parameter", pat))
        diag_hint(s->d, "patterns are parameter names as zinfc --emit=graph prints them, with '*' for any run of characters");
}

/* One pattern: marks what it matches (unmarks it for "!pattern"); false
 * when it is not a string. */
static bool freeze_one(Sema *s, Graph *g, const Expr *e) {
    EvalCtx c = sema_const_ctx(s->train_scope);
    Val v = sema_eval_expr(s, &c, e);
    if (v.k == V_POISON) return true;
    if (v.k != V_STR) return false;
    const char *pat = arena_printf(s->a, "%.*s", (int)v.slen, v.s);
    if (!pat) return true;
    bool thaw = pat[0] == '!';
    pat += thaw;
    int hits = 0;
    for (int i = 0; i < g->ntensors; i++) {
        GTensor *t = &g->tensors[i];
        if (t->cls != TC_PARAM || !t->name || !freeze_matches(pat, t->name)) continue;
        t->frozen = !thaw;
        hits++;
    }
    if (!hits) no_match(s, g, pat, e->span);
    return true;
}

/* The setting's patterns; false (reported) when it is not a list of strings. */
static bool freeze_setting(Sema *s, Graph *g, const Setting *st) {
    const Expr *e = st->value;
    bool ok = true;
    if (e->kind == EX_LIST)
        for (int i = 0; i < e->args.len; i++) ok &= freeze_one(s, g, e->args.items[i].value);
    else ok = freeze_one(s, g, e);
    if (!ok) sema_error(s, e->span, "freeze must be a list of parameter patterns: freeze = [\"embed.*\", \"block.*.attn.*\"]");
    return ok;
}

static const Setting *train_setting_named(const Sema *s, const char *key) {
    for (int i = 0; s->train_decl && i < s->train_decl->settings.len; i++)
        if (strcmp(s->train_decl->settings.items[i]->key, key) == 0) return s->train_decl->settings.items[i];
    return NULL;
}

/* A parameter every use of which is the weight (input 1) of a forward
 * linear or matmul: a kernel that can read it dequantized. */
static bool weight_only(const Graph *g, int t) {
    bool used = false;
    for (int i = 0; i < g->nops; i++) {
        const GOp *op = &g->ops[i];
        for (int k = 0; k < op->nin; k++) {
            if (op->in[k] != t) continue;
            if (k != 1 || (op->prim != PRIM_LINEAR && op->prim != PRIM_MATMUL)) return false;
            used = true;
        }
    }
    return used;
}

/* Why parameter t cannot be stored quantized, or NULL when it can. */
static const char *unquantizable(const Graph *g, int t) {
    const GTensor *x = &g->tensors[t];
    if (!x->frozen) return "it is trained (only frozen parameters are stored quantized: add it to freeze)";
    if (x->rank != 2 || !weight_only(g, t)) return "only the weights of linear and matmul are stored quantized";
    if (x->numel % DTYPE_QBLOCK) return "its size is not a whole number of blocks of 64";
    return NULL;
}

/* quantize_params: each pattern marks (or, with "!", unmarks) the
 * parameters it matches; false (reported) when it is not a list of strings. */
static bool quant_patterns(Sema *s, Graph *g, const Setting *st, bool *mark) {
    const Expr *e = st->value;
    int n = e->kind == EX_LIST ? e->args.len : 1;
    for (int i = 0; i < n; i++) {
        const Expr *x = e->kind == EX_LIST ? e->args.items[i].value : e;
        EvalCtx c = sema_const_ctx(s->train_scope);
        Val v = sema_eval_expr(s, &c, x);
        if (v.k == V_POISON) continue;
        if (v.k != V_STR) {
            sema_error(s, x->span, "quantize_params must be a list of parameter patterns: quantize_params = [\"*.attn.*\"]");
            return false;
        }
        const char *pat = arena_printf(s->a, "%.*s", (int)v.slen, v.s);
        if (!pat) return false;
        bool out = pat[0] == '!';
        pat += out;
        int hits = 0;
        for (int t = 0; t < g->ntensors; t++)
            if (g->tensors[t].cls == TC_PARAM && g->tensors[t].name && freeze_matches(pat, g->tensors[t].name)) {
                mark[t] = !out;
                hits++;
            }
        if (!hits) no_match(s, g, pat, x->span);
    }
    return true;
}

static void apply_quantize(Sema *s, Graph *g) {
    const Setting *q = train_setting_named(s, "quantize"), *qp = train_setting_named(s, "quantize_params");
    if (!q || !q->value) {
        if (qp && sema_error(s, qp->span, "quantize_params without quantize: say which form, quantize = \"nf4\" or \"int8\""))
            diag_hint(s->d, "quantize = \"nf4\" stores the frozen weights it names in 4 bits");
        return;
    }
    EvalCtx c = sema_const_ctx(s->train_scope);
    Val v = sema_eval_expr(s, &c, q->value);
    if (v.k == V_POISON) return;
    DType form = DT_NONE;
    if (v.k == V_STR && v.slen == 3 && !memcmp(v.s, "nf4", 3)) form = DT_NF4;
    else if (v.k == V_STR && v.slen == 4 && !memcmp(v.s, "int8", 4)) form = DT_INT8;
    else if (!(v.k == V_STR && v.slen == 4 && !memcmp(v.s, "none", 4))) {
        sema_error(s, q->value->span, "quantize must be \"nf4\", \"int8\" or \"none\"");
        return;
    }
    if (form == DT_NONE) {
        if (qp) sema_error(s, qp->span, "quantize_params with quantize = \"none\": nothing is quantized");
        return;
    }
    bool *mark = ARENA_NEWN(s->a, bool, g->ntensors + 1);
    int errors0 = s->d->errors;
    if (!mark) return;
    if (qp && qp->value) {
        if (!quant_patterns(s, g, qp, mark)) return;
        for (int t = 0; t < g->ntensors; t++) {
            const char *why = mark[t] ? unquantizable(g, t) : NULL;
            if (why && sema_error(s, qp->span, "quantize: cannot store '%s' quantized: %s", g->tensors[t].name, why))
                diag_note(s->d, g->tensors[t].span, "'%s' is made here", g->tensors[t].name);
        }
    } else {
        /* the frozen weights of the repeated blocks; embeddings, norms and
         * the output head (outside every repeat) stay in the training dtype */
        for (int t = 0; t < g->ntensors; t++)
            mark[t] = g->tensors[t].cls == TC_PARAM && g->tensors[t].segment >= 0 && !unquantizable(g, t);
    }
    int n = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (mark[t]) n++;
    if (!n) {
        if (sema_error(s, (qp ? qp : q)->span, "quantize: no frozen linear weight to store quantized"))
            diag_hint(s->d, "quantize stores frozen weights of linear layers: freeze them first (freeze = [\"*\", \"!*.lora_*\"])");
        return;
    }
    if (s->d->errors != errors0) return;
    for (int t = 0; t < g->ntensors; t++)
        if (mark[t]) g->tensors[t].dtype = form;
}

void sema_apply_freeze(Sema *s, Graph *g) {
    const Setting *st = NULL;
    for (int i = 0; s->train_decl && i < s->train_decl->settings.len; i++)
        if (strcmp(s->train_decl->settings.items[i]->key, "freeze") == 0) st = s->train_decl->settings.items[i];
    if (st && st->value && !freeze_setting(s, g, st)) return;
    int nparams = 0, nfrozen = 0;
    Span last = SPAN_NONE;
    for (int i = 0; i < g->ntensors; i++) {
        if (g->tensors[i].cls != TC_PARAM) continue;
        nparams++;
        if (g->tensors[i].frozen) {
            nfrozen++;
            last = g->tensors[i].span;
        }
    }
    if (nparams > 0 && nfrozen == nparams &&
        sema_error(s, st ? st->span : last, "freeze: every parameter is frozen; nothing would be trained")) {
        diag_hint(s->d, "freeze only the parameters that stay as they are");
        return;
    }
    apply_quantize(s, g);
}
