/* hfmap: the hf blocks -> Graph.hf (see hfmap.h; rules in docs/language.md). */
#include "hfmap.h"
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "json.h"

/* ---- patterns and names ---- */

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool name_char(char c) { return name_start(c) || is_digit(c); }

/* A hole "{name}" at p: its length with the braces (0 if p holds none) and
 * where its name is. */
static size_t read_hole(const char *p, const char **nm, size_t *nl) {
    if (p[0] != '{' || !name_start(p[1])) return 0;
    size_t n = 1;
    while (name_char(p[n])) n++;
    if (p[n] != '}') return 0;
    *nm = p + 1;
    *nl = n - 1;
    return n + 1;
}

const char *hfmap_pattern_error(Arena *a, const char *pat) {
    if (!pat[0]) return "the pattern is empty";
    int holes = 0;
    for (const char *p = pat; *p;) {
        if (*p == '}') return "a '}' without its '{'";
        if (*p != '{') {
            p++;
            continue;
        }
        const char *nm;
        size_t nl, k = read_hole(p, &nm, &nl);
        if (!k) return "a placeholder is {NAME}: a letter or '_', then letters, digits or '_', then '}'";
        if (++holes > HFMAP_MAX_HOLES) return arena_printf(a, "more than %d placeholders", HFMAP_MAX_HOLES);
        if (p[k] == '{' || is_digit(p[k]))
            return arena_printf(a, "the placeholder '{%.*s}' is followed by %s: what follows a placeholder must not be "
                                   "a digit, so that the number it matches ends there", (int)nl, nm,
                                p[k] == '{' ? "another placeholder" : "a digit");
        p += k;
    }
    return NULL;
}

bool hfmap_match(Arena *a, const char *pat, const char *name, const char **names, const char **vals, int *nholes) {
    const char *hn[HFMAP_MAX_HOLES], *hv[HFMAP_MAX_HOLES];
    size_t hnl[HFMAP_MAX_HOLES], hvl[HFMAP_MAX_HOLES];
    int n = 0;
    const char *p = pat, *q = name;
    while (*p) {
        const char *nm;
        size_t nl, k = read_hole(p, &nm, &nl);
        if (!k) {
            if (*p++ != *q++) return false;
            continue;
        }
        size_t d = 0;
        while (is_digit(q[d])) d++;
        if (!d) return false;
        int j = 0;
        while (j < n && !(hnl[j] == nl && !memcmp(hn[j], nm, nl))) j++;
        if (j < n && (hvl[j] != d || memcmp(hv[j], q, d))) return false; /* a name repeated: the same number */
        if (j == n) {
            if (n == HFMAP_MAX_HOLES) return false;
            hn[n] = nm, hnl[n] = nl, hv[n] = q, hvl[n] = d;
            n++;
        }
        p += k;
        q += d;
    }
    if (*q) return false;
    for (int i = 0; i < n; i++) {
        names[i] = arena_strndup(a, hn[i], hnl[i]);
        vals[i] = arena_strndup(a, hv[i], hvl[i]);
    }
    *nholes = n;
    return true;
}

const char *hfmap_subst(Arena *a, const char *tmpl, const char *const *names, const char *const *vals, int n,
                        const char **bad) {
    size_t len = strlen(tmpl), cap = len + 1;
    for (int i = 0; i < n; i++) cap += strlen(vals[i]) * len; /* generous: every byte a placeholder */
    char *out = arena_alloc(a, cap);
    if (!out) return NULL;
    size_t o = 0;
    for (const char *p = tmpl; *p;) {
        const char *nm;
        size_t nl, k = read_hole(p, &nm, &nl);
        if (!k) {
            out[o++] = *p++;
            continue;
        }
        int j = 0;
        while (j < n && !(strlen(names[j]) == nl && !memcmp(names[j], nm, nl))) j++;
        if (j == n) {
            *bad = arena_strndup(a, nm, nl);
            return NULL;
        }
        size_t vl = strlen(vals[j]);
        memcpy(out + o, vals[j], vl);
        o += vl;
        p += k;
    }
    out[o] = 0;
    return out;
}

/* ---- entries ---- */

typedef struct Piece {
    const char *tmpl;     /* the HF tensor name, placeholders unsubstituted */
    Span span;
    bool transpose, sized;
    int64_t first, count; /* sized (cols): the column range */
    bool stacked;         /* stack(): one HF tensor per index of the parameter's first axis */
    const char *hole;     /* stacked: the placeholder that index fills (not one of the pattern's) */
    uint8_t layout;       /* expert_rows() / expert_cols(): PEFT's expert layouts (plan.h) */
} Piece;

typedef struct Entry {
    const Setting *st;
    Piece pieces[HFMAP_MAX_PIECES];
    int npieces;
    bool ok;              /* well-formed: takes part in matching */
    int matched;          /* parameters it maps */
} Entry;

typedef struct Block {
    const Decl *d;
    bool main;
    Entry *entries;
    int n;
} Block;

typedef struct HfCtx {
    Sema *s;
    Graph *g;
    DiagSink *d;
    Arena *a;
    Block *blocks;
    int nblocks;
    bool failed;
} HfCtx;

static bool err(HfCtx *c, Span sp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool err(HfCtx *c, Span sp, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    diag_error(c->d, sp, "%s", buf);
    c->failed = true;
    return false;
}

static const char *const hf_funcs[] = {"transpose", "cat", "cols", "stack", "expert_rows", "expert_cols"};

/* One piece: "name", transpose("name"), cols(X, first, count) with X one of
 * the two. */
static bool read_piece(HfCtx *c, const Expr *e, Piece *pc) {
    if (e->kind == EX_STR) {
        if (strlen(e->str) != e->slen || !e->slen) return err(c, e->span, "an HF tensor name must be a non-empty string without NUL bytes");
        pc->tmpl = e->str;
        pc->span = e->span;
        return true;
    }
    if (e->kind != EX_CALL)
        return err(c, e->span, "expected an HF tensor name (a string), or transpose, cat or cols of names");
    if (!strcmp(e->str, "transpose")) {
        if (e->args.len != 1 || e->args.items[0].name || e->args.items[0].value->kind != EX_STR)
            return err(c, e->span, "transpose takes one HF tensor name: transpose(\"...weight\")");
        if (!read_piece(c, e->args.items[0].value, pc)) return false;
        pc->transpose = true;
        return true;
    }
    if (!strcmp(e->str, "cols")) {
        if (e->args.len != 3 || e->args.items[0].name || e->args.items[1].name || e->args.items[2].name)
            return err(c, e->span, "cols takes a tensor and a column range: cols(transpose(\"...\"), first, count)");
        const Expr *x = e->args.items[0].value;
        if (x->kind == EX_CALL && !strcmp(x->str, "cols")) return err(c, x->span, "cols of cols: give one column range");
        if (x->kind == EX_CALL && !strcmp(x->str, "cat")) return err(c, x->span, "cols of cat: write the pieces of the cat instead");
        if (x->kind == EX_CALL && !strcmp(x->str, "stack")) return err(c, x->span, "cols of stack: write stack(cols(...)) instead");
        if (x->kind == EX_CALL && !strncmp(x->str, "expert_", 7))
            return err(c, x->span, "cols of %s: an expert layout maps its parameter whole", x->str);
        if (!read_piece(c, x, pc)) return false;
        int64_t first, count;
        if (!sema_eval_int(c->s, e->args.items[1].value, &first) || !sema_eval_int(c->s, e->args.items[2].value, &count)) {
            c->failed = true;
            return false;
        }
        if (first < 0) return err(c, e->args.items[1].value->span, "the first column must be 0 or more, got %" PRId64, first);
        if (count < 1) return err(c, e->args.items[2].value->span, "the column count must be positive, got %" PRId64, count);
        if (first > INT64_MAX - count) return err(c, e->span, "the column range overflows");
        pc->sized = true;
        pc->first = first;
        pc->count = count;
        return true;
    }
    if (!strcmp(e->str, "stack")) {
        if (e->args.len != 1 || e->args.items[0].name)
            return err(c, e->span, "stack takes one HF tensor name with a placeholder for the index: "
                                   "stack(\"...experts.{e}.w1.weight\")");
        const Expr *x = e->args.items[0].value;
        if (x->kind == EX_CALL && (!strcmp(x->str, "stack") || !strcmp(x->str, "transpose") || !strcmp(x->str, "cat") ||
                                   !strncmp(x->str, "expert_", 7)))
            return err(c, x->span, "stack of %s: a stacked tensor is a name, or cols of a name, in the parameter's own layout", x->str);
        if (!read_piece(c, x, pc)) return false;
        if (pc->transpose) return err(c, x->span, "stack of a transposed tensor: a stacked tensor is in the parameter's own layout");
        pc->stacked = true;
        return true;
    }
    if (!strcmp(e->str, "expert_rows") || !strcmp(e->str, "expert_cols")) { /* PEFT's LoRA on fused expert weights */
        if (e->args.len != 1 || e->args.items[0].name || e->args.items[0].value->kind != EX_STR)
            return err(c, e->span, "%s takes one HF tensor name: %s(\"...lora_%c.weight\")", e->str, e->str,
                       e->str[7] == 'r' ? 'A' : 'B');
        if (!read_piece(c, e->args.items[0].value, pc)) return false;
        pc->layout = e->str[7] == 'r' ? PLAN_HF_EXPERT_ROWS : PLAN_HF_EXPERT_COLS;
        return true;
    }
    if (!strcmp(e->str, "cat")) return err(c, e->span, "cat goes outermost: cat(a, b, ...) of names, transposes and cols");
    const char *near = diag_nearest(e->str, hf_funcs, 6);
    if (near) return err(c, e->name_span, "unknown hf function '%s'; did you mean '%s'?", e->str, near);
    return err(c, e->name_span, "unknown hf function '%s' (the functions are transpose, cat, cols, stack, expert_rows and "
               "expert_cols)", e->str);
}

/* The placeholder of stacked piece pc that the index fills: the one of its
 * name that is not the pattern's (names: those, n of them); exactly one. */
static bool stack_hole(HfCtx *c, Piece *pc, const char *pattern, const char *const *names, int n) {
    pc->hole = NULL;
    for (const char *p = pc->tmpl; *p;) {
        const char *nm;
        size_t nl, k = read_hole(p, &nm, &nl);
        if (!k) {
            p++;
            continue;
        }
        bool known = false;
        for (int j = 0; j < n && !known; j++) known = strlen(names[j]) == nl && !memcmp(names[j], nm, nl);
        if (!known && pc->hole && (strlen(pc->hole) != nl || memcmp(pc->hole, nm, nl)))
            return err(c, pc->span, "stack: \"%s\" has two placeholders that are not the pattern's ('{%s}' and '{%.*s}'); "
                       "one is the index along the parameter's first axis", pc->tmpl, pc->hole, (int)nl, nm);
        if (!known && !pc->hole) pc->hole = arena_strndup(c->a, nm, nl);
        p += k;
    }
    if (!pc->hole)
        return err(c, pc->span, "stack: \"%s\" has no placeholder for the index along the first axis (all of its are the "
                   "pattern \"%s\"'s)", pc->tmpl, pattern);
    return true;
}

/* An entry's pieces: one piece, or cat(piece, ...). Each name's
 * placeholders must be the pattern's. */
static bool read_entry(HfCtx *c, Entry *en) {
    const Setting *st = en->st;
    const char *why = hfmap_pattern_error(c->a, st->key);
    if (why) return err(c, st->span, "bad parameter pattern \"%s\": %s", st->key, why);
    const Expr *e = st->value;
    if (e->kind == EX_CALL && !strcmp(e->str, "cat")) {
        if (e->args.len < 1 || e->args.len > HFMAP_MAX_PIECES)
            return err(c, e->span, "cat takes 1 to %d pieces, got %d", HFMAP_MAX_PIECES, e->args.len);
        for (int i = 0; i < e->args.len; i++) {
            if (e->args.items[i].name) return err(c, e->args.items[i].name_span, "cat takes no named arguments");
            memset(&en->pieces[i], 0, sizeof en->pieces[i]);
            if (!read_piece(c, e->args.items[i].value, &en->pieces[i])) return false;
        }
        en->npieces = e->args.len;
    } else {
        memset(&en->pieces[0], 0, sizeof en->pieces[0]);
        if (!read_piece(c, e, &en->pieces[0])) return false;
        en->npieces = 1;
    }
    /* placeholders of the names: each must be one of the pattern's */
    const char *names[HFMAP_MAX_HOLES], *vals[HFMAP_MAX_HOLES];
    int n = 0;
    for (const char *p = st->key; *p && n < HFMAP_MAX_HOLES;) {
        const char *nm;
        size_t nl, k = read_hole(p, &nm, &nl);
        if (!k) {
            p++;
            continue;
        }
        names[n] = arena_strndup(c->a, nm, nl);
        vals[n++] = "0";
        p += k;
    }
    for (int i = 0; i < en->npieces; i++) {
        Piece *pc = &en->pieces[i];
        if (pc->stacked != en->pieces[0].stacked)
            return err(c, pc->span, "the pieces of one parameter are all stacked or none");
        if (pc->layout && en->npieces > 1)
            return err(c, pc->span, "%s in a cat: an expert layout maps its parameter whole, alone",
                       pc->layout == PLAN_HF_EXPERT_ROWS ? "expert_rows" : "expert_cols");
        const char *bad = NULL;
        if (pc->stacked && !stack_hole(c, pc, st->key, names, n)) return false;
        const char *nm2[HFMAP_MAX_HOLES + 1], *v2[HFMAP_MAX_HOLES + 1];
        for (int k = 0; k < n; k++) nm2[k] = names[k], v2[k] = vals[k];
        int n2 = n;
        if (pc->stacked) nm2[n2] = pc->hole, v2[n2++] = "0";
        if (!hfmap_subst(c->a, pc->tmpl, nm2, v2, n2, &bad) && bad)
            return err(c, pc->span, "'{%s}' is not a placeholder of the pattern \"%s\"", bad, st->key);
    }
    return true;
}

/* config = "JSON" or a list of lines: checked to be a JSON object. */
static bool read_config(HfCtx *c, const Setting *st, const char **out) {
    const Expr *e = st->value;
    const char *text = NULL;
    if (e->kind == EX_LIST) {
        text = "";
        for (int i = 0; i < e->args.len; i++) {
            const char *line;
            if (e->args.items[i].name || !sema_eval_string(c->s, e->args.items[i].value, &line)) {
                c->failed = true;
                return false;
            }
            text = arena_printf(c->a, "%s%s\n", text, line);
        }
    } else if (!sema_eval_string(c->s, e, &text)) {
        c->failed = true;
        return false;
    }
    JsonDoc doc;
    char jerr[256];
    if (json_parse(text, strlen(text), &doc, jerr, sizeof jerr) != 0) {
        json_free(&doc);
        return err(c, e->span, "config is not valid JSON: %s", jerr);
    }
    bool obj = doc.root && doc.root->type == JSON_OBJECT;
    json_free(&doc);
    if (!obj) return err(c, e->span, "config must be a JSON object ({...}), the config.json Hugging Face reads");
    *out = text;
    return true;
}

/* The entries of one block; config only in the model file's. */
static void read_block(HfCtx *c, Block *b) {
    const SettingList *sl = &b->d->settings;
    b->entries = ARENA_NEWN(c->a, Entry, sl->len ? sl->len : 1);
    if (!b->entries) return;
    for (int i = 0; i < sl->len; i++) {
        const Setting *st = sl->items[i];
        if (!st || !st->value) continue;
        if (!st->quoted) {
            if (strcmp(st->key, "config") != 0) {
                err(c, st->span, "unknown hf setting '%s'", st->key);
                diag_hint(c->d, "an hf block holds config = \"JSON\" and \"PARAMETER PATTERN\" = \"HF TENSOR\" entries");
            } else if (!b->main) {
                err(c, st->span, "config belongs in the hf block of the model's file");
            } else if (c->g->hf.config && c->g->hf.config[0]) {
                err(c, st->span, "config is given twice");
            } else {
                read_config(c, st, &c->g->hf.config);
            }
            continue;
        }
        Entry *en = &b->entries[b->n++];
        memset(en, 0, sizeof *en);
        en->st = st;
        en->ok = read_entry(c, en);
    }
}

/* ---- the blocks of the program ---- */

/* The file declaring the model (the first, if several: sema reports those). */
static int model_file(const Program *prog) {
    for (int f = 0; f < prog->nfiles; f++)
        for (int k = 0; k < prog->files[f]->decls.len; k++)
            if (prog->files[f]->decls.items[k]->kind == DL_MODEL) return f;
    return 0;
}

/* The hf block of file f (one per file), or NULL. */
static const Decl *file_block(HfCtx *c, const AstFile *af) {
    const Decl *first = NULL;
    for (int k = 0; k < af->decls.len; k++) {
        const Decl *d = af->decls.items[k];
        if (d->kind != DL_HF) continue;
        if (first) {
            err(c, d->span, "a file has one hf block; this is a second one");
            diag_note(c->d, first->span, "the first is here");
            continue;
        }
        first = d;
    }
    return first;
}

/* The model file's block, then the other files' of no or the same
 * architecture. */
static const Decl *collect_blocks(HfCtx *c, const Program *prog) {
    int mf = model_file(prog);
    c->blocks = ARENA_NEWN(c->a, Block, prog->nfiles ? prog->nfiles : 1);
    const Decl **per = ARENA_NEWN(c->a, const Decl *, prog->nfiles ? prog->nfiles : 1);
    if (!c->blocks || !per) return NULL;
    for (int f = 0; f < prog->nfiles; f++) per[f] = file_block(c, prog->files[f]);
    const Decl *main_decl = per[mf];
    if (!main_decl) return NULL;
    if (!main_decl->name) {
        err(c, main_decl->span, "the hf block of the model's file names the Hugging Face architecture");
        diag_hint(c->d, "hf \"LlamaForCausalLM\" { ... }; a block without one is for files of layers");
        return NULL;
    }
    c->blocks[c->nblocks++] = (Block){main_decl, true, NULL, 0};
    for (int f = 0; f < prog->nfiles; f++)
        if (f != mf && per[f] && (!per[f]->name || !strcmp(per[f]->name, main_decl->name)))
            c->blocks[c->nblocks++] = (Block){per[f], false, NULL, 0};
    return main_decl;
}

/* ---- matching ---- */

typedef struct Pieces {
    GraphHfPiece *items;
    int len, cap;
} Pieces;

static bool push_piece(HfCtx *c, Pieces *ps, GraphHfPiece p) {
    if (ps->len == ps->cap) {
        int nc = ps->cap ? ps->cap * 2 : 64;
        GraphHfPiece *ni = ARENA_NEWN(c->a, GraphHfPiece, nc);
        if (!ni) return false;
        if (ps->len) memcpy(ni, ps->items, sizeof *ni * (size_t)ps->len);
        ps->items = ni;
        ps->cap = nc;
    }
    ps->items[ps->len++] = p;
    return true;
}

/* The pieces of parameter t from entry en, its placeholders bound. Column
 * counts not given share what cols() leaves of the last axis equally. */
static void emit_pieces(HfCtx *c, Pieces *ps, int t, Entry *en, const char **names, const char **vals, int nh,
                        bool *reported) {
    const GTensor *pt = &c->g->tensors[t];
    int64_t N = pt->dims[pt->rank - 1], given = 0;
    int unsized = 0;
    bool stacked = en->npieces > 0 && en->pieces[0].stacked;
    if (stacked && pt->rank >= 2 && pt->dims[0] > HFMAP_MAX_STACK) {
        if (!*reported) err(c, en->st->span, "stack of %" PRId64 " tensors (the first axis of '%s'): at most %d", pt->dims[0],
                            pt->name, HFMAP_MAX_STACK);
        *reported = true;
        return;
    }
    if (stacked && pt->rank < 2) {
        if (!*reported) err(c, en->st->span, "stack needs a parameter of rank 2 or more (the first axis indexes the stacked "
                            "tensors), but '%s' has rank %d", pt->name, pt->rank);
        *reported = true;
        return;
    }
    for (int i = 0; i < en->npieces; i++) {
        const Piece *p = &en->pieces[i];
        if (p->transpose && pt->rank != 2) {
            if (!*reported) err(c, p->span, "transpose needs a 2-D parameter, but '%s' has rank %d", pt->name, pt->rank);
            *reported = true;
            return;
        }
        if (p->layout && pt->rank != 3) {
            if (!*reported)
                err(c, p->span, "%s needs a parameter [experts, rows, columns] of rank 3, but '%s' has rank %d",
                    p->layout == PLAN_HF_EXPERT_ROWS ? "expert_rows" : "expert_cols", pt->name, pt->rank);
            *reported = true;
            return;
        }
        if (p->sized) given += p->count;
        else unsized++;
    }
    int64_t rest = N - given, each = unsized ? rest / unsized : 0;
    if ((!unsized && given != N) || (unsized && (rest < unsized || rest % unsized))) {
        if (!*reported) {
            if (!unsized)
                err(c, en->st->span, "the columns of the pieces add up to %" PRId64 ", but '%s' has %" PRId64
                    " in its last axis", given, pt->name, N);
            else
                err(c, en->st->span, "the %" PRId64 " columns of '%s' that cols() leaves do not divide into %d equal pieces",
                    rest, pt->name, unsized);
            diag_hint(c->d, "give each piece its columns: cols(\"name\", first, count)");
        }
        *reported = true;
        return;
    }
    int64_t nidx = stacked ? pt->dims[0] : 1;
    const char *nm2[HFMAP_MAX_HOLES + 1], *v2[HFMAP_MAX_HOLES + 1];
    for (int k = 0; k < nh; k++) nm2[k] = names[k], v2[k] = vals[k];
    for (int64_t x = 0; x < nidx; x++)
        for (int i = 0; i < en->npieces; i++) {
            const Piece *p = &en->pieces[i];
            int n2 = nh;
            if (stacked) nm2[n2] = p->hole, v2[n2++] = arena_printf(c->a, "%" PRId64, x);
            const char *bad = NULL, *name = hfmap_subst(c->a, p->tmpl, nm2, v2, n2, &bad);
            if (!name) return;
            GraphHfPiece gp = {t, name, p->transpose, p->sized ? p->first : 0, p->sized ? p->count : each, stacked, (int32_t)x,
                               p->layout};
            if (!push_piece(c, ps, gp)) return;
        }
}

/* The entry of block b matching parameter t (NULL: none); two matching
 * entries of one block are an error, reported once per pair. */
static Entry *match_block(HfCtx *c, Block *b, const char *name, const char **names, const char **vals, int *nh) {
    Entry *hit = NULL;
    const char *n2[HFMAP_MAX_HOLES], *v2[HFMAP_MAX_HOLES];
    int k2;
    for (int i = 0; i < b->n; i++) {
        Entry *en = &b->entries[i];
        if (!en->ok) continue;
        if (!hfmap_match(c->a, en->st->key, name, hit ? n2 : names, hit ? v2 : vals, hit ? &k2 : nh)) continue;
        if (!hit) {
            hit = en;
            continue;
        }
        err(c, en->st->span, "parameter '%s' is matched by two entries of this hf block", name);
        diag_note(c->d, hit->st->span, "the first entry matching it is here");
        en->ok = false; /* once */
    }
    return hit;
}

static void report_unmatched(HfCtx *c, const Block *b) {
    const char **cands = ARENA_NEWN(c->a, const char *, c->g->ntensors + 1);
    int nc = 0;
    for (int t = 0; cands && t < c->g->ntensors; t++)
        if (c->g->tensors[t].cls == TC_PARAM) cands[nc++] = c->g->tensors[t].name;
    for (int i = 0; i < b->n; i++) {
        const Entry *en = &b->entries[i];
        if (!en->ok || en->matched) continue;
        err(c, en->st->span, "the pattern \"%s\" matches no parameter", en->st->key);
        const char *bad = NULL, *zero[HFMAP_MAX_HOLES], *names[HFMAP_MAX_HOLES];
        int n = 0;
        for (const char *p = en->st->key; *p && n < HFMAP_MAX_HOLES;) {
            const char *nm;
            size_t nl, k = read_hole(p, &nm, &nl);
            if (k) names[n] = arena_strndup(c->a, nm, nl), zero[n++] = "0";
            p += k ? k : 1;
        }
        const char *probe = hfmap_subst(c->a, en->st->key, names, zero, n, &bad);
        const char *near = probe && cands ? diag_nearest(probe, cands, nc) : NULL;
        if (near) diag_hint(c->d, "did you mean \"%s\"? (parameters are named by their call path: docs/checking.md)", near);
        else diag_hint(c->d, "zinfc --emit=graph lists the parameters");
    }
}

static void warn_unmapped(HfCtx *c, const Decl *main_decl, const bool *mapped) {
    int n = 0;
    const char *list = "";
    for (int t = 0; t < c->g->ntensors; t++) {
        const GTensor *pt = &c->g->tensors[t];
        if (pt->cls != TC_PARAM || mapped[t]) continue;
        if (n < 4) list = arena_printf(c->a, "%s%s%s", list, n ? ", " : "", pt->name);
        n++;
    }
    if (!n) return;
    diag_warning(c->d, main_decl->span, "%d parameter%s no Hugging Face tensor: %s%s", n, n > 1 ? "s have" : " has", list,
                 n > 4 ? arena_printf(c->a, " and %d more", n - 4) : "");
    diag_note(c->d, SPAN_NONE, "an export leaves them out and an import leaves them as initialised");
}

bool hfmap_build(Sema *s, const Program *prog, Graph *g, DiagSink *d) {
    HfCtx c = {s, g, d, g->arena, NULL, 0, false};
    const Decl *main_decl = collect_blocks(&c, prog);
    if (!main_decl) return !c.failed;
    for (int i = 0; i < c.nblocks; i++) read_block(&c, &c.blocks[i]);
    bool *mapped = ARENA_NEWN(c.a, bool, g->ntensors + 1);
    Pieces ps = {0};
    for (int t = 0; mapped && t < g->ntensors; t++) {
        const GTensor *pt = &g->tensors[t];
        if (pt->cls != TC_PARAM || pt->rank < 1) continue;
        const char *names[HFMAP_MAX_HOLES], *vals[HFMAP_MAX_HOLES];
        int nh = 0;
        for (int b = 0; b < c.nblocks; b++) {
            Entry *en = match_block(&c, &c.blocks[b], pt->name, names, vals, &nh);
            if (!en) continue;
            en->matched++;
            mapped[t] = true;
            bool reported = false;
            emit_pieces(&c, &ps, t, en, names, vals, nh, &reported);
            if (reported) en->ok = false; /* its other parameters would say the same */
            break;
        }
    }
    if (c.nblocks > 0 && c.blocks[0].main) report_unmatched(&c, &c.blocks[0]);
    if (c.failed || c.a->failed) return false;
    if (mapped) warn_unmapped(&c, main_decl, mapped);
    g->hf.arch = main_decl->name;
    if (!g->hf.config) g->hf.config = "";
    g->hf.pieces = ps.items;
    g->hf.npieces = ps.len;
    return true;
}
