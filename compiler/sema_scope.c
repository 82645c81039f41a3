/* sema_scope.c: what every sema file leans on: errors reported once per place
 * and message, value and shape names for messages, name lookup (bindings
 * of a context, consts and layers of a file scope and its imports), and the
 * graph's limits (tensors, expansion steps). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "sema_impl.h"

/* ---- diagnostics with de-duplication (a repeat body reports once) ---- */

uint64_t sema_hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

bool sema_error(Sema *s, Span sp, const char *fmt, ...) {
    char buf[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    uint64_t h = sema_hash_str(buf);
    for (int i = 0; i < s->nseen; i++)
        if (s->seen[i].file == sp.file && s->seen[i].off == sp.off && s->seen[i].h == h) return false;
    if (s->nseen == s->capseen) {
        int nc = s->capseen ? s->capseen * 2 : 32;
        Seen *ns = ARENA_NEWN(s->a, Seen, nc);
        if (!ns) return false;
        if (s->nseen) memcpy(ns, s->seen, sizeof *ns * (size_t)s->nseen);
        s->seen = ns;
        s->capseen = nc;
    }
    s->seen[s->nseen++] = (Seen){sp.file, sp.off, h};
    diag_error(s->d, sp, "%s", buf);
    return true;
}

/* ---- small helpers ---- */

const char *sema_shape_of(Sema *s, int t) {
    char buf[160];
    graph_shape_str(s->g, t, buf, sizeof buf);
    return arena_strdup(s->a, buf);
}

const char *sema_vkind_name(VKind k) {
    switch (k) {
    case V_INT: return "an integer";
    case V_FLOAT: return "a number";
    case V_STR: return "a string";
    case V_BOOL: return "a boolean";
    case V_TENSOR: return "a tensor";
    case V_TUPLE: return "a tuple";
    case V_LIST: return "a list";
    default: return "an erroneous value";
    }
}

int sema_scope_of_file(const Sema *s, int file) {
    for (int i = 0; i < s->nfiles; i++)
        if (s->files[i].file == file) return i;
    return -1;
}

/* ---- scopes ---- */

ConstEntry *sema_find_const_in(FileScope *f, const char *name, int *index) {
    for (int i = 0; i < f->nconsts; i++)
        if (strcmp(f->consts[i].decl->name, name) == 0) {
            if (index) *index = i;
            return &f->consts[i];
        }
    return NULL;
}

const Decl *sema_find_layer_in(const FileScope *f, const char *name) {
    for (int i = 0; i < f->nlayers; i++)
        if (strcmp(f->layers[i]->name, name) == 0) return f->layers[i];
    return NULL;
}

const Decl *sema_find_layer(Sema *s, int sc, const char *name) {
    const Decl *l = sema_find_layer_in(&s->files[sc], name);
    for (int i = 0; !l && i < s->files[sc].nimports; i++)
        l = sema_find_layer_in(&s->files[s->files[sc].imports[i]], name);
    return l;
}

Binding *sema_find_binding(Binding *env, const char *name) {
    for (Binding *b = env; b; b = b->next)
        if (strcmp(b->name, name) == 0) return b;
    return NULL;
}

void sema_bind(Sema *s, EvalCtx *c, const char *name, Val v, Span def) {
    Binding *b = sema_find_binding(c->env, name);
    if (!b) {
        b = ARENA_NEW(s->a, Binding);
        if (!b) return;
        b->name = name;
        b->next = c->env;
        c->env = b;
    }
    b->v = v;
    b->def = def;
}

bool sema_reserved_name(const char *n) {
    return strcmp(n, "B") == 0 || strcmp(n, "true") == 0 || strcmp(n, "false") == 0;
}

bool sema_name_known(Sema *s, EvalCtx *c, const char *n) {
    if (sema_find_binding(c->env, n) || sema_reserved_name(n)) return true;
    FileScope *f = &s->files[c->scope];
    if (sema_find_const_in(f, n, NULL)) return true;
    for (int k = 0; k < f->nimports; k++)
        if (sema_find_const_in(&s->files[f->imports[k]], n, NULL)) return true;
    return false;
}

/* ---- graph limits ---- */

/* The graph is bounded: a typo in a repeat count must not take the machine. */
bool sema_room(Sema *s, Span sp) {
    if (s->g->ntensors < SEMA_MAX_TENSORS) return true;
    if (!s->too_big)
        sema_error(s, sp, "the model is too large: more than %d tensors (is a repeat count too large?)",
                   SEMA_MAX_TENSORS);
    s->too_big = true;
    return false;
}

/* Counts one expansion step; false once the model has grown too large. */
bool sema_step(Sema *s, Span sp) {
    if (s->too_big) return false;
    if (++s->steps <= SEMA_MAX_STEPS) return true;
    sema_error(s, sp, "the model is too large: expanding it takes more than %d statements and layer calls (are repeat counts "
               "or layers that call layers several times too many?)", SEMA_MAX_STEPS);
    s->too_big = true;
    return false;
}
