#include "ast.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Expr *ast_expr(Arena *a, ExprKind k, Span sp) {
    Expr *e = ARENA_NEW(a, Expr);
    if (!e) return NULL;
    e->kind = k;
    e->span = sp;
    e->name_span = SPAN_NONE;
    e->init_span = SPAN_NONE;
    e->unit = (Unit){UNIT_NONE, 1};
    return e;
}

Stmt *ast_stmt(Arena *a, StmtKind k, Span sp) {
    Stmt *s = ARENA_NEW(a, Stmt);
    if (!s) return NULL;
    s->kind = k;
    s->span = sp;
    s->index_span = SPAN_NONE;
    s->open_brace = SPAN_NONE;
    return s;
}

Decl *ast_decl(Arena *a, DeclKind k, Span sp) {
    Decl *d = ARENA_NEW(a, Decl);
    if (!d) return NULL;
    d->kind = k;
    d->span = sp;
    d->name_span = SPAN_NONE;
    d->import_file = -1;
    return d;
}

Setting *ast_setting(Arena *a, const char *key, Span sp) {
    Setting *s = ARENA_NEW(a, Setting);
    if (!s) return NULL;
    s->key = key;
    s->span = sp;
    s->selector_span = SPAN_NONE;
    return s;
}

/* Growable arrays in the arena: old storage is abandoned on growth. */
#define GROW(a, l, T)                                                         \
    do {                                                                      \
        if ((l)->len == (l)->cap) {                                           \
            int nc_ = (l)->cap ? (l)->cap * 2 : 4;                            \
            T *ni_ = ARENA_NEWN(a, T, nc_);                                   \
            if (!ni_) return;                                                 \
            if ((l)->len) memcpy(ni_, (l)->items, sizeof(T) * (size_t)(l)->len); \
            (l)->items = ni_;                                                 \
            (l)->cap = nc_;                                                   \
        }                                                                     \
    } while (0)

void ast_args_push(Arena *a, ArgList *l, Arg arg) { GROW(a, l, Arg); l->items[l->len++] = arg; }
void ast_exprs_push(Arena *a, ExprList *l, Expr *e) { GROW(a, l, Expr *); l->items[l->len++] = e; }
void ast_stmts_push(Arena *a, StmtList *l, Stmt *s) { if (!s) return; GROW(a, l, Stmt *); l->items[l->len++] = s; }
void ast_params_push(Arena *a, ParamList *l, ParamDecl p) { GROW(a, l, ParamDecl); l->items[l->len++] = p; }
void ast_settings_push(Arena *a, SettingList *l, Setting *s) { if (!s) return; GROW(a, l, Setting *); l->items[l->len++] = s; }
void ast_decls_push(Arena *a, DeclList *l, Decl *d) { GROW(a, l, Decl *); l->items[l->len++] = d; }

void ast_names_push(Arena *a, NameList *l, const char *name, Span sp) {
    if (l->len == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        const char **ni = ARENA_NEWN(a, const char *, nc);
        Span *ns = ARENA_NEWN(a, Span, nc);
        if (!ni || !ns) return;
        if (l->len) {
            memcpy(ni, l->items, sizeof *ni * (size_t)l->len);
            memcpy(ns, l->spans, sizeof *ns * (size_t)l->len);
        }
        l->items = ni;
        l->spans = ns;
        l->cap = nc;
    }
    l->items[l->len] = name;
    l->spans[l->len] = sp;
    l->len++;
}

/* ---- the stable tree dump ---- */

static void dump_expr(const Expr *e, FILE *out);

static void dump_string(const char *str, size_t n, FILE *out) {
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)str[i];
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f) fprintf(out, "\\x%02x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

static const char *unit_name(Unit u) {
    static const struct { UnitKind k; uint64_t s; const char *n; } names[] = {
        {UNIT_COUNT, 1000ull, "K"}, {UNIT_COUNT, 1000000ull, "M"}, {UNIT_COUNT, 1000000000ull, "G"},
        {UNIT_COUNT, 1000000000000ull, "T"}, {UNIT_BYTES, 1000ull, "KB"}, {UNIT_BYTES, 1000000ull, "MB"},
        {UNIT_BYTES, 1000000000ull, "GB"}, {UNIT_BYTES, 1000000000000ull, "TB"}, {UNIT_BYTES, 1ull << 10, "KiB"},
        {UNIT_BYTES, 1ull << 20, "MiB"}, {UNIT_BYTES, 1ull << 30, "GiB"}, {UNIT_BYTES, 1ull << 40, "TiB"},
        {UNIT_RATE, 1000ull, "KB/s"}, {UNIT_RATE, 1000000ull, "MB/s"}, {UNIT_RATE, 1000000000ull, "GB/s"},
        {UNIT_RATE, 1000000000000ull, "TB/s"}, {UNIT_RATE, 1ull << 10, "KiB/s"}, {UNIT_RATE, 1ull << 20, "MiB/s"},
        {UNIT_RATE, 1ull << 30, "GiB/s"}, {UNIT_RATE, 1ull << 40, "TiB/s"},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].k == u.kind && names[i].s == u.scale) return names[i].n;
    return "";
}

static void dump_args(const ArgList *l, FILE *out) {
    for (int i = 0; i < l->len; i++) {
        if (i) fputs(", ", out);
        if (l->items[i].name) fprintf(out, "%s=", l->items[i].name);
        dump_expr(l->items[i].value, out);
    }
}

static void dump_exprs(const ExprList *l, FILE *out) {
    for (int i = 0; i < l->len; i++) {
        if (i) fputs(", ", out);
        dump_expr(l->items[i], out);
    }
}

static void dump_expr(const Expr *e, FILE *out) {
    if (!e) { fputs("<error>", out); return; }
    switch (e->kind) {
    case EX_INT:
        if (e->overflow) fputs("<overflow>", out);
        else fprintf(out, "%" PRId64, e->ival);
        if (e->unit.kind != UNIT_NONE) fprintf(out, " %s", unit_name(e->unit));
        break;
    case EX_FLOAT: {
        /* the shortest form that reads back as the same double */
        char buf[40];
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, e->fval);
            if (strtod(buf, NULL) == e->fval) break;
        }
        fputs(buf, out);
        if (e->unit.kind != UNIT_NONE) fprintf(out, " %s", unit_name(e->unit));
        break;
    }
    case EX_STR: dump_string(e->str, e->slen, out); break;
    case EX_NAME: fputs(e->str, out); break;
    case EX_UNARY: fputs("(-", out); dump_expr(e->lhs, out); fputc(')', out); break;
    case EX_BINARY:
        fputc('(', out);
        dump_expr(e->lhs, out);
        fprintf(out, " %c ", e->op);
        dump_expr(e->rhs, out);
        fputc(')', out);
        break;
    case EX_CALL: fprintf(out, "%s(", e->str); dump_args(&e->args, out); fputc(')', out); break;
    case EX_LIST: fputc('[', out); dump_args(&e->args, out); fputc(']', out); break;
    case EX_PARAM: {
        static const char *const inits[] = {"?", "normal", "zeros", "ones", "uniform"};
        fprintf(out, "param %s[", e->dtype ? dtype_name(e->dtype) : "");
        dump_exprs(&e->dims, out);
        fprintf(out, "] init %s", inits[e->init <= INIT_UNIFORM ? e->init : 0]);
        if (e->args.len) { fputc('(', out); dump_args(&e->args, out); fputc(')', out); }
        if (e->frozen) fputs(" frozen", out);
        break;
    }
    }
}

static void indent(int n, FILE *out) {
    for (int i = 0; i < n; i++) fputs("  ", out);
}

static void dump_stmts(const StmtList *l, int depth, FILE *out) {
    for (int i = 0; i < l->len; i++) {
        const Stmt *s = l->items[i];
        indent(depth, out);
        switch (s->kind) {
        case ST_ASSIGN:
            for (int k = 0; k < s->targets.len; k++) fprintf(out, "%s%s", k ? ", " : "", s->targets.items[k]);
            fputs(" = ", out);
            dump_expr(s->value, out);
            fputc('\n', out);
            break;
        case ST_REPEAT:
            fputs("repeat ", out);
            dump_expr(s->count, out);
            if (s->index) fprintf(out, " as %s", s->index);
            fputs(" {\n", out);
            dump_stmts(&s->body, depth + 1, out);
            indent(depth, out);
            fputs("}\n", out);
            break;
        case ST_IF:
            fputs("if ", out);
            dump_expr(s->count, out);
            fputs(" {\n", out);
            dump_stmts(&s->body, depth + 1, out);
            indent(depth, out);
            if (s->has_else) {
                fputs("} else {\n", out);
                dump_stmts(&s->else_body, depth + 1, out);
                indent(depth, out);
            }
            fputs("}\n", out);
            break;
        case ST_RETURN: fputs("return ", out); dump_exprs(&s->values, out); fputc('\n', out); break;
        case ST_LOSS: fputs("loss ", out); dump_expr(s->value, out); fputc('\n', out); break;
        }
    }
}

static void dump_settings(const SettingList *l, int depth, FILE *out) {
    for (int i = 0; i < l->len; i++) {
        const Setting *s = l->items[i];
        indent(depth, out);
        if (s->quoted) dump_string(s->key, strlen(s->key), out);
        else fputs(s->key, out);
        if (s->selector) fprintf(out, " \"%s\"", s->selector);
        if (s->is_block) {
            fputs(" {\n", out);
            dump_settings(&s->block, depth + 1, out);
            indent(depth, out);
            fputs("}\n", out);
        } else {
            fputs(" = ", out);
            dump_expr(s->value, out);
            fputc('\n', out);
        }
    }
}

void ast_dump(const AstFile *f, FILE *out) {
    for (int i = 0; i < f->decls.len; i++) {
        const Decl *d = f->decls.items[i];
        switch (d->kind) {
        case DL_IMPORT: fprintf(out, "import \"%s\"\n", d->name); break;
        case DL_CONST: fprintf(out, "const %s = ", d->name); dump_expr(d->value, out); fputc('\n', out); break;
        case DL_LAYER:
        case DL_MODEL:
            fprintf(out, "%s %s(", d->kind == DL_LAYER ? "layer" : "model", d->name);
            for (int k = 0; k < d->params.len; k++) {
                const ParamDecl *p = &d->params.items[k];
                fprintf(out, "%s%s", k ? ", " : "", p->name);
                if (p->type.present) {
                    fprintf(out, ": %s[", p->type.dtype ? dtype_name(p->type.dtype) : "");
                    dump_exprs(&p->type.dims, out);
                    fputc(']', out);
                }
                if (p->default_value) { fputs(" = ", out); dump_expr(p->default_value, out); }
            }
            fputs(") {\n", out);
            dump_stmts(&d->body, 1, out);
            fputs("}\n", out);
            break;
        case DL_TRAIN:
        case DL_TARGET:
        case DL_PLAN:
            fprintf(out, "%s%s%s {\n", d->kind == DL_TRAIN ? "train" : d->kind == DL_TARGET ? "target" : "plan",
                    d->name ? " " : "", d->name ? d->name : "");
            dump_settings(&d->settings, 1, out);
            fputs("}\n", out);
            break;
        case DL_HF:
            fputs("hf ", out);
            if (d->name) {
                dump_string(d->name, strlen(d->name), out);
                fputc(' ', out);
            }
            fputs("{\n", out);
            dump_settings(&d->settings, 1, out);
            fputs("}\n", out);
            break;
        }
    }
}
