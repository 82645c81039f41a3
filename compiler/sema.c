/* sema: names, constants, shapes, layer instantiation -> forward Graph.
 * The rules are documented in docs/checking.md; keep the two in step.
 *
 * This file is the driver: the public entry points of sema.h (setup, the
 * model and its inputs, the hf mapping once the model is built). The work
 * is done by the other sema_*.c files; sema_impl.h says which owns what. */
#include <string.h>
#include "hfmap.h"
#include "sema_impl.h"

Sema *sema_new(Arena *a, const Program *prog, const SourceSet *src, DiagSink *d) {
    Sema *s = ARENA_NEW(a, Sema);
    if (!s) return NULL;
    s->a = a;
    s->prog = prog;
    s->src = src;
    s->d = d;
    s->segment = -1;
    s->train_scope = 0;
    s->after_syntax_errors = d->errors > 0;
    s->nfiles = prog->nfiles;
    s->files = ARENA_NEWN(a, FileScope, prog->nfiles ? prog->nfiles : 1);
    if (!s->files) return NULL;
    for (int i = 0; i < prog->nfiles; i++) {
        s->files[i].ast = prog->files[i];
        s->files[i].file = prog->files[i]->file;
    }
    sema_build_scopes(s);
    /* the train block: one per program */
    for (int fi = 0; fi < s->nfiles; fi++) {
        const DeclList *dl = &s->files[fi].ast->decls;
        for (int k = 0; k < dl->len; k++) {
            const Decl *dd = dl->items[k];
            if (dd->kind != DL_TRAIN) continue;
            if (s->train_decl) {
                if (sema_error(s, dd->span, "a program has one train block; this is a second one"))
                    diag_note(s->d, s->train_decl->span, "the first is here");
                continue;
            }
            s->train_decl = dd;
            s->train_scope = fi;
        }
    }
    /* imported files' constants first, then the main file's, then train:
     * diagnostics come out roughly in source order */
    for (int fi = s->nfiles - 1; fi >= 0; fi--)
        for (int i = 0; i < s->files[fi].nconsts; i++) sema_const_value(s, fi, i);
    sema_read_train(s);
    return a->failed ? NULL : s;
}

const TrainConfig *sema_train(const Sema *s) { return &s->train; }

/* The program's one model (a second one is an error); NULL if none. */
static const Decl *find_model(Sema *s, int *model_scope) {
    const Decl *model = NULL;
    for (int fi = 0; fi < s->nfiles; fi++) {
        const DeclList *dl = &s->files[fi].ast->decls;
        for (int k = 0; k < dl->len; k++) {
            const Decl *d = dl->items[k];
            if (d->kind != DL_MODEL) continue;
            if (model) {
                if (sema_error(s, d->name_span, "a program has exactly one model; '%s' is a second one", d->name))
                    diag_note(s->d, model->name_span, "model '%s' is defined here", model->name);
                continue;
            }
            model = d;
            *model_scope = fi;
        }
    }
    return model;
}

/* The model's typed inputs: graph inputs bound in c (POISON where wrong). */
static void bind_inputs(Sema *s, EvalCtx *c, const Decl *model, Graph *g) {
    for (int i = 0; i < model->params.len; i++) {
        const ParamDecl *pd = &model->params.items[i];
        for (int j = 0; j < i; j++)
            if (strcmp(model->params.items[j].name, pd->name) == 0 &&
                sema_error(s, pd->span, "model '%s' has two inputs named '%s'", model->name, pd->name))
                diag_note(s->d, model->params.items[j].span, "first declared here");
        if (sema_reserved_name(pd->name)) {
            sema_error(s, pd->span, "'%s' is reserved and cannot be an input name", pd->name);
            continue;
        }
        if (pd->default_value) sema_error(s, pd->default_value->span, "model inputs have no default values");
        if (!pd->type.present) {
            if (sema_error(s, pd->span, "model input '%s' needs a type", pd->name))
                diag_hint(s->d, "%s: i32[B, T]", pd->name);
            sema_bind(s, c, pd->name, POISON, pd->span);
            continue;
        }
        if (pd->type.dims.len > GRAPH_MAX_RANK) {
            sema_error(s, pd->type.span, "an input has at most %d dimensions", GRAPH_MAX_RANK);
            sema_bind(s, c, pd->name, POISON, pd->span);
            continue;
        }
        int64_t dims[GRAPH_MAX_RANK];
        bool bad = false;
        for (int j = 0; j < pd->type.dims.len; j++) {
            const Expr *de = pd->type.dims.items[j];
            Val v = sema_eval_expr(s, c, de);
            if (v.k == V_POISON) bad = true;
            else if (v.k != V_INT || v.i <= 0) {
                sema_error(s, de->span, "an input dimension must be a positive integer constant");
                bad = true;
            } else {
                dims[j] = v.i;
            }
        }
        if (g->ninputs >= 4) {
            sema_error(s, pd->span, "a model has at most 4 inputs");
            bad = true;
        }
        int64_t numel = 1;
        for (int j = 0; !bad && j < pd->type.dims.len; j++)
            if (__builtin_mul_overflow(numel, dims[j], &numel)) {
                sema_error(s, pd->type.span, "input '%s' has more than 2^63 elements", pd->name);
                bad = true;
            }
        if (bad) {
            sema_bind(s, c, pd->name, POISON, pd->span);
            continue;
        }
        DType dt = pd->type.dtype != DT_NONE ? pd->type.dtype : s->train.dtype;
        int id = graph_add_tensor(g, pd->name, dt, pd->type.dims.len, dims, TC_INPUT);
        if (id < 0) return;
        g->tensors[id].span = pd->span;
        g->inputs[g->ninputs++] = id;
        sema_bind(s, c, pd->name, vtensor(id), pd->span);
    }
}

bool sema_check(Sema *s, Graph *g) {
    int errors0 = s->d->errors;
    graph_init(g, s->a);
    s->g = g;
    g->train = s->train;
    int model_scope = 0;
    const Decl *model = find_model(s, &model_scope);
    if (!model) {
        if (s->after_syntax_errors) return false; /* most likely lost to a syntax error */
        Span sp = {s->nfiles ? s->files[0].file : -1, 0, 0};
        if (sema_error(s, sp, "no model in this program"))
            diag_hint(s->d, "declare one: model NAME(tokens: i32[B, T], targets: i32[B, T]) { ... loss ... }");
        return false;
    }
    g->model_name = model->name;
    EvalCtx c;
    memset(&c, 0, sizeof c);
    c.scope = model_scope;
    c.path = "";
    c.rsuffix = "";
    c.decl = model;
    c.is_model = true;
    c.const_index = -1;
    bind_inputs(s, &c, model, g);
    bool returned = false;
    sema_exec_body(s, &c, &model->body, &returned);
    if (g->loss == -1 && !s->after_syntax_errors) {
        if (sema_error(s, model->name_span, "model '%s' has no loss statement", model->name))
            diag_hint(s->d, "end the model with: loss cross_entropy(logits, targets)");
    }
    if (g->loss < 0) g->loss = -1;
    g->nforward = g->nops;
    g->nbackward_end = g->nops;
    /* frozen parameters and the Hugging Face mapping name parameters: only once they are all there */
    if (s->d->errors == errors0 && !s->a->failed) sema_apply_freeze(s, g);
    if (s->d->errors == errors0 && !s->a->failed) sema_apply_no_decay(s, g);
    if (s->d->errors == errors0 && !s->a->failed) hfmap_build(s, s->prog, g, s->d);
    if (s->a->failed) {
        diag_error(s->d, SPAN_NONE, "out of memory");
        return false;
    }
    return s->d->errors == errors0;
}

bool sema_build(Arena *a, const Program *prog, const SourceSet *src, DiagSink *d, Graph *out) {
    int e0 = d->errors;
    Sema *s = sema_new(a, prog, src, d);
    if (!s) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    bool ok = sema_check(s, out);
    return ok && d->errors == e0;
}
