/* planner_options: PlannerOptions, their defaults and the `plan { }` block
 * that sets them (compiler/planner.h), and the parameter patterns of its
 * tiles pins. */
#include "planner_impl.h"
#include <inttypes.h>
#include <string.h>

const char *const planner_class_names[PC_COUNT] = {"params", "grads", "optimizer", "checkpoints"};

void planner_options_default(PlannerOptions *o) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < PC_COUNT; i++) o->tier[i] = -1;
    o->whole_below = 100000;
    o->loss_chunk = -1;
    o->mlp_tile = -1;
}

/* ---- plan { } block ---- */

static int tier_of(const char *s) {
    for (int i = 0; i < PLAN_NTIERS; i++)
        if (!strcmp(s, plan_tier_names[i])) return i;
    return -1;
}

static bool int_value(const Setting *s, DiagSink *d, int64_t lo, int64_t hi, int64_t *out) {
    const Expr *e = s->value;
    if (!e || e->kind != EX_INT || (e->unit.kind != UNIT_NONE && e->unit.kind != UNIT_COUNT)) {
        diag_error(d, e ? e->span : s->span, "'%s' must be a whole number", s->key);
        return false;
    }
    int64_t v = e->ival * (int64_t)(e->unit.kind == UNIT_COUNT && e->unit.scale ? e->unit.scale : 1);
    if (e->overflow || v < lo || v > hi) {
        diag_error(d, e->span, "'%s' must be between %" PRId64 " and %" PRId64, s->key, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* pin "pattern" = "tier" */
static bool tier_pin(const Setting *s, Arena *a, DiagSink *d, PlannerOptions *o) {
    const Expr *e = s->value;
    int t = e && e->kind == EX_STR ? tier_of(e->str) : -1;
    if (!s->selector) {
        diag_error(d, s->span, "pin needs a parameter pattern: pin \"block.0.*\" = \"gpu\"");
        return false;
    }
    if (t < 0) {
        diag_error(d, e ? e->span : s->span, "'pin' must be \"gpu\", \"cpu\" or \"nvme\"");
        return false;
    }
    TierPin *np = ARENA_NEWN(a, TierPin, o->npins + 1);
    if (!np) return false;
    if (o->npins) memcpy(np, o->pins, sizeof *np * (size_t)o->npins);
    np[o->npins++] = (TierPin){arena_strdup(a, s->selector), t, s->selector_span};
    o->pins = np;
    return true;
}

bool planner_options_from_decl(const Decl *decl, Arena *a, DiagSink *d, PlannerOptions *o) {
    static const char *const keys[] = {"params", "grads", "optimizer", "checkpoints", "prefetch", "whole_below", "tiles", "pin",
                                       "optimizer_overlap", "loss_chunk", "mlp_tile"};
    enum { NKEYS = sizeof keys / sizeof *keys };
    bool ok = true;
    for (int i = 0; i < decl->settings.len; i++) {
        const Setting *s = decl->settings.items[i];
        int k = -1;
        for (int j = 0; j < NKEYS; j++)
            if (!strcmp(s->key, keys[j])) k = j;
        if (k < 0 || s->is_block) {
            diag_error(d, s->span, "unknown plan setting '%s'", s->key);
            const char *near = diag_nearest(s->key, keys, NKEYS);
            if (near) diag_hint(d, "did you mean '%s'?", near);
            ok = false;
            continue;
        }
        if (k < PC_COUNT) {
            const Expr *e = s->value;
            int t = e && e->kind == EX_STR ? tier_of(e->str) : -1;
            if (t < 0) {
                diag_error(d, e ? e->span : s->span, "'%s' must be \"gpu\", \"cpu\" or \"nvme\"", s->key);
                ok = false;
                continue;
            }
            o->tier[k] = t;
        } else if (k == 4) {
            int64_t v;
            if (int_value(s, d, 0, 64, &v)) o->prefetch = (int)v;
            else ok = false;
            if (ok && v == 0) o->prefetch = -1; /* pinned to no look-ahead */
        } else if (k == 5) {
            int64_t v;
            if (int_value(s, d, 0, INT64_MAX / 2, &v)) o->whole_below = v;
            else ok = false;
        } else if (k == 7) {
            if (!tier_pin(s, a, d, o)) ok = false;
        } else if (k == 8) {
            const Expr *e = s->value;
            if (e && e->kind == EX_STR && (!strcmp(e->str, "auto") || !strcmp(e->str, "off") || !strcmp(e->str, "on"))) {
                o->overlap = !strcmp(e->str, "off") ? -1 : !strcmp(e->str, "on") ? 1 : 0;
            } else {
                diag_error(d, e ? e->span : s->span, "optimizer_overlap must be \"auto\", \"on\" or \"off\"");
                ok = false;
            }
        } else if (k == 9) {
            const Expr *e = s->value;
            int64_t v;
            if (e && e->kind == EX_STR && !strcmp(e->str, "auto")) o->loss_chunk = -1;
            else if (e && e->kind == EX_STR) {
                diag_error(d, e->span, "loss_chunk must be \"auto\", 0 (the whole logits) or a number of rows");
                ok = false;
            } else if (int_value(s, d, 0, INT64_MAX / 2, &v)) o->loss_chunk = v;
            else ok = false;
        } else if (k == 10) {
            const Expr *e = s->value;
            int64_t v;
            if (e && e->kind == EX_STR && !strcmp(e->str, "auto")) o->mlp_tile = -1;
            else if (e && e->kind == EX_STR) {
                diag_error(d, e->span, "mlp_tile must be \"auto\", 0 (the MLP as written) or a number of rows");
                ok = false;
            } else if (int_value(s, d, 0, INT64_MAX / 2, &v)) o->mlp_tile = v;
            else ok = false;
        } else {
            int64_t v;
            if (!s->selector) {
                diag_error(d, s->span, "tiles needs a parameter pattern: tiles \"block.*.mlp.w1\" = 4");
                ok = false;
                continue;
            }
            if (!int_value(s, d, 1, 1 << 20, &v)) {
                ok = false;
                continue;
            }
            TilePin *nt = ARENA_NEWN(a, TilePin, o->ntiles + 1);
            if (!nt) return false;
            if (o->ntiles) memcpy(nt, o->tiles, sizeof *nt * (size_t)o->ntiles);
            nt[o->ntiles++] = (TilePin){arena_strdup(a, s->selector), (int)v, s->selector_span};
            o->tiles = nt;
        }
    }
    return ok;
}

bool planner_options_from_program(const Program *prog, Arena *a, DiagSink *d, PlannerOptions *o) {
    bool ok = true;
    for (int f = 0; f < prog->nfiles; f++)
        for (int i = 0; i < prog->files[f]->decls.len; i++)
            if (prog->files[f]->decls.items[i]->kind == DL_PLAN) ok &= planner_options_from_decl(prog->files[f]->decls.items[i], a, d, o);
    return ok;
}

/* glob with '*' (any run of characters) */
static bool glob(const char *p, const char *s) {
    if (!*p) return !*s;
    if (*p == '*') return glob(p + 1, s) || (*s && glob(p, s + 1));
    return *s == *p && glob(p + 1, s + 1);
}
bool pl_pin_matches(const char *pat, const char *name) {
    size_t n = strlen(pat);
    return glob(pat, name) || (!strchr(pat, '*') && !strncmp(pat, name, n) && name[n] == '.');
}


/* The pins by name (planner_impl.h); the last pin naming a parameter wins. */
bool pl_apply_pins(PlanBuilder *b, Arena *a) {
    const PlannerOptions *o = b->o;
    const Graph *g = b->g;
    if (!o->npins) return true;
    int nt = g->ntensors;
    b->ptier = ARENA_NEWN(a, int8_t, nt + 1);
    b->otier = ARENA_NEWN(a, int8_t, nt + 1);
    b->name_pinned = ARENA_NEWN(a, bool, nt + 1);
    if (!b->ptier || !b->otier || !b->name_pinned) {
        diag_error(b->d, SPAN_NONE, "out of memory while planning");
        return false;
    }
    memset(b->ptier, -1, (size_t)nt);
    memset(b->otier, -1, (size_t)nt);
    for (int k = 0; k < o->npins; k++) {
        const TierPin *pin = &o->pins[k];
        if (pin->tier == TIER_NVME && !b->cap[ARENA_NVME]) {
            diag_error(b->d, pin->span, "pin \"%s\" = \"nvme\", but target '%s' has no NVMe", pin->pattern, b->t->name);
            return false;
        }
        int hits = 0;
        for (int i = 0; i < nt; i++) {
            if (g->tensors[i].cls != TC_PARAM || !g->tensors[i].name || !pl_pin_matches(pin->pattern, g->tensors[i].name)) continue;
            b->ptier[i] = b->otier[i] = (int8_t)pin->tier;
            b->name_pinned[i] = true;
            hits++;
        }
        if (!hits) {
            diag_error(b->d, pin->span, "pin \"%s\" names no parameter", pin->pattern);
            return false;
        }
    }
    return true;
}
