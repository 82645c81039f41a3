/* sema_decl.c: the top-level declarations of every file: its scope (consts,
 * layers, imports resolved to files, names checked for clashes), and its
 * constants, each evaluated once, on first use, with cycles reported. */
#include <stdio.h>
#include <string.h>
#include "sema_impl.h"

/* ---- scopes ---- */

static const char *file_base(const Sema *s, int file) {
    if (file < 0 || file >= s->src->nfiles) return "?";
    const char *p = s->src->files[file].path, *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* The file scope of the file an import names: the loader resolved it
 * (lang/loader.c); -1 when it names none. */
static int import_scope(const Sema *s, const Decl *d) {
    for (int i = 0; i < s->nfiles; i++)
        if (d->import_file >= 0 && s->files[i].file == d->import_file) return i;
    return -1;
}

static void add_import(Sema *s, FileScope *f, int fi, const Decl *d) {
    if (!d->name) return;
    int imp = import_scope(s, d);
    if (imp >= 0 && imp != fi) {
        bool dup = false;
        for (int j = 0; j < f->nimports; j++) dup |= f->imports[j] == imp;
        if (!dup) f->imports[f->nimports++] = imp;
    }
}

/* Enters const or layer d into f unless its name is taken or reserved. */
static void declare(Sema *s, FileScope *f, const Decl *d) {
    if (!d->name) return;
    if (sema_reserved_name(d->name)) {
        sema_error(s, d->name_span, "'%s' is reserved%s and cannot be defined", d->name,
                   strcmp(d->name, "B") == 0 ? " (the micro-batch, from train { micro_batch })" : "");
        return;
    }
    if (d->kind == DL_LAYER && prim_lookup(d->name)) {
        sema_error(s, d->name_span, "'%s' is a primitive; a layer cannot have its name", d->name);
        return;
    }
    const Decl *prev = NULL;
    ConstEntry *ce = sema_find_const_in(f, d->name, NULL);
    if (ce) prev = ce->decl;
    if (!prev) prev = sema_find_layer_in(f, d->name);
    if (prev) {
        if (sema_error(s, d->name_span, "'%s' is defined twice", d->name))
            diag_note(s->d, prev->name_span, "first defined here");
        return;
    }
    if (d->kind == DL_CONST) {
        f->consts[f->nconsts++] = (ConstEntry){d, POISON, 0};
        return;
    }
    f->layers[f->nlayers++] = d;
    for (int i = 0; i < d->params.len; i++) {
        const ParamDecl *pi = &d->params.items[i];
        if (sema_reserved_name(pi->name))
            sema_error(s, pi->span, "'%s' is reserved and cannot be a parameter name", pi->name);
        for (int j = 0; j < i; j++)
            if (strcmp(d->params.items[j].name, pi->name) == 0 &&
                sema_error(s, pi->span, "layer '%s' has two parameters named '%s'", d->name, pi->name))
                diag_note(s->d, d->params.items[j].span, "first declared here");
    }
}

/* File fi's own names and imports; false when out of memory. */
static bool declare_file(Sema *s, int fi) {
    FileScope *f = &s->files[fi];
    const DeclList *dl = &f->ast->decls;
    f->consts = ARENA_NEWN(s->a, ConstEntry, dl->len ? dl->len : 1);
    f->layers = ARENA_NEWN(s->a, const Decl *, dl->len ? dl->len : 1);
    f->imports = ARENA_NEWN(s->a, int, dl->len ? dl->len : 1);
    if (!f->consts || !f->layers || !f->imports) return false;
    for (int k = 0; k < dl->len; k++) {
        const Decl *d = dl->items[k];
        if (d->kind == DL_IMPORT) add_import(s, f, fi, d);
        else if (d->kind == DL_CONST || d->kind == DL_LAYER) declare(s, f, d);
    }
    return true;
}

/* Names brought in by imports must not clash: with f's own, or with those of
 * f's earlier imports. */
static void check_import_clashes(Sema *s) {
    for (int fi = 0; fi < s->nfiles; fi++) {
        FileScope *f = &s->files[fi];
        for (int k = 0; k < f->nimports; k++) {
            FileScope *g = &s->files[f->imports[k]];
            for (int pass = 0; pass < 2; pass++) {
                int n = pass ? g->nlayers : g->nconsts;
                for (int i = 0; i < n; i++) {
                    const Decl *d = pass ? g->layers[i] : g->consts[i].decl;
                    const Decl *own = sema_find_layer_in(f, d->name);
                    ConstEntry *ce = sema_find_const_in(f, d->name, NULL);
                    if (ce) own = ce->decl;
                    if (own) {
                        if (sema_error(s, own->name_span, "'%s' is already defined in imported file %s", d->name,
                                       file_base(s, g->file)))
                            diag_note(s->d, d->name_span, "'%s' defined here", d->name);
                        continue;
                    }
                    for (int j = 0; j < k; j++) {
                        FileScope *h = &s->files[f->imports[j]];
                        const Decl *o = sema_find_layer_in(h, d->name);
                        ConstEntry *he = sema_find_const_in(h, d->name, NULL);
                        if (he) o = he->decl;
                        if (o && o != d) {
                            if (sema_error(s, d->name_span, "'%s' is defined in both %s and %s, which %s imports",
                                           d->name, file_base(s, h->file), file_base(s, g->file), file_base(s, f->file)))
                                diag_note(s->d, o->name_span, "'%s' defined here", d->name);
                        }
                    }
                }
            }
        }
    }
}

void sema_build_scopes(Sema *s) {
    for (int fi = 0; fi < s->nfiles; fi++)
        if (!declare_file(s, fi)) return;
    check_import_clashes(s);
}

/* ---- constants ---- */

Val sema_const_value(Sema *s, int sc, int idx) {
    ConstEntry *ce = &s->files[sc].consts[idx];
    if (ce->state == 2) return ce->v;
    if (ce->state == 1) {
        if (sema_error(s, ce->decl->name_span, "constant '%s' depends on itself", ce->decl->name))
            diag_note(s->d, ce->decl->name_span, "'%s' defined here", ce->decl->name);
        return POISON;
    }
    ce->state = 1;
    EvalCtx c;
    memset(&c, 0, sizeof c);
    c.scope = sc;
    c.path = "";
    c.rsuffix = "";
    c.const_only = true;
    c.const_index = idx;
    Val v = sema_eval_expr(s, &c, ce->decl->value);
    if (v.k == V_TENSOR || v.k == V_TUPLE) {
        sema_error(s, ce->decl->value->span, "a constant must be a number, string or list");
        v = POISON;
    }
    ce->v = v;
    ce->state = 2;
    return v;
}

/* Looks up a constant visible from c; *found says whether the name is one. */
Val sema_lookup_const(Sema *s, EvalCtx *c, const char *name, Span use, bool *found) {
    FileScope *f = &s->files[c->scope];
    int idx;
    ConstEntry *ce = sema_find_const_in(f, name, &idx);
    *found = true;
    if (ce) {
        if (c->const_only && c->const_index >= 0 && idx >= c->const_index) {
            if (idx == c->const_index) {
                if (sema_error(s, use, "constant '%s' is defined in terms of itself", name))
                    diag_note(s->d, ce->decl->name_span, "'%s' defined here", name);
            } else if (sema_error(s, use, "constant '%s' is used before its definition", name)) {
                diag_note(s->d, ce->decl->name_span, "'%s' defined here", name);
            }
            return POISON;
        }
        return sema_const_value(s, c->scope, idx);
    }
    for (int k = 0; k < f->nimports; k++) {
        int sc = f->imports[k];
        ce = sema_find_const_in(&s->files[sc], name, &idx);
        if (ce) {
            if (ce->state == 1) {
                if (sema_error(s, use, "constant '%s' depends on itself through imports", name))
                    diag_note(s->d, ce->decl->name_span, "'%s' defined here", name);
                return POISON;
            }
            return sema_const_value(s, sc, idx);
        }
    }
    *found = false;
    return POISON;
}

EvalCtx sema_const_ctx(int scope) {
    EvalCtx c;
    memset(&c, 0, sizeof c);
    c.scope = scope;
    c.path = "";
    c.rsuffix = "";
    c.const_only = true;
    c.const_index = -1;
    return c;
}
