/* sema_train.c: the train block: each setting checked and read into the
 * TrainConfig (defaults for the rest), the micro-batch B on first use, and the
 * optimizer's arguments. */
#include <inttypes.h>
#include <string.h>
#include "sema_impl.h"

static const char *const train_keys[] = {
    "micro_batch", "steps", "dtype", "seed", "optimizer", "lr", "warmup", "warmup_steps", "min_lr", "schedule",
    "grad_clip", "loss_scale", "checkpoint", "checkpoint_every", "grad_accum", "beta1", "beta2", "eps",
    "weight_decay", "freeze", "no_decay", "quantize", "quantize_params",
};
enum { NTRAIN_KEYS = sizeof train_keys / sizeof train_keys[0] };

static const Setting *train_setting(const Sema *s, const char *key) {
    if (!s->train_decl) return NULL;
    for (int i = 0; i < s->train_decl->settings.len; i++)
        if (strcmp(s->train_decl->settings.items[i]->key, key) == 0) return s->train_decl->settings.items[i];
    return NULL;
}

int64_t sema_micro_batch(Sema *s) {
    if (s->mb_state == 2) return s->train.micro_batch;
    if (s->mb_state == 1) return -1; /* reported where it is read */
    s->mb_state = 1;
    const Setting *st = train_setting(s, "micro_batch");
    s->train.micro_batch = 1;
    if (st && st->value) {
        EvalCtx c = sema_const_ctx(s->train_scope);
        /* B inside micro_batch itself is a cycle */
        Val v = sema_eval_expr(s, &c, st->value);
        if (v.k == V_INT && v.i >= 1) s->train.micro_batch = v.i;
        else if (v.k != V_POISON) sema_error(s, st->value->span, "micro_batch must be a positive integer");
        else s->train.micro_batch = -1;
    }
    s->mb_state = 2;
    return s->train.micro_batch;
}

static bool setting_int(Sema *s, const Setting *st, int64_t lo, int64_t *out) {
    EvalCtx c = sema_const_ctx(s->train_scope);
    Val v = sema_eval_expr(s, &c, st->value);
    if (v.k == V_POISON) return false;
    if (v.k != V_INT || v.i < lo) {
        sema_error(s, st->value->span, "%s must be an integer >= %" PRId64 ", got %s", st->key, lo,
                   v.k == V_INT ? arena_printf(s->a, "%" PRId64, v.i) : sema_vkind_name(v.k));
        return false;
    }
    *out = v.i;
    return true;
}

static bool num_ok(Sema *s, const char *key, Val v, Span sp, double lo, bool lo_open, double *out) {
    if (v.k == V_POISON) return false;
    if (!is_num(&v) || (lo_open ? !(v.f > lo) : !(v.f >= lo))) {
        sema_error(s, sp, "%s must be a number %s %g, got %s", key, lo_open ? ">" : ">=", lo,
                   is_num(&v) ? arena_printf(s->a, "%g", v.f) : sema_vkind_name(v.k));
        return false;
    }
    *out = v.f;
    return true;
}

static bool setting_num(Sema *s, const Setting *st, double lo, bool lo_open, double *out) {
    EvalCtx c = sema_const_ctx(s->train_scope);
    return num_ok(s, st->key, sema_eval_expr(s, &c, st->value), st->value->span, lo, lo_open, out);
}

/* A bare name or a string. */
static const char *setting_word(const Setting *st) {
    if (st->value->kind == EX_NAME || st->value->kind == EX_STR) return st->value->str;
    return NULL;
}

/* adam(state = "fp32" | "bf16" | "8bit"): how the moments are stored. */
static void read_opt_state(Sema *s, const Expr *v, TrainConfig *t) {
    const char *w = v->kind == EX_STR || v->kind == EX_NAME ? v->str : NULL;
    for (int i = 0; w && i < OPT_NSTATES; i++)
        if (strcmp(w, opt_state_names[i]) == 0) {
            t->opt_state = (uint8_t)i;
            return;
        }
    sema_error(s, v->span, "adam: state must be \"fp32\", \"bf16\" or \"8bit\" (how the moments are stored)");
}

static void read_adam(Sema *s, const Expr *e, TrainConfig *t) {
    static const char *const keys[] = {"lr", "beta1", "beta2", "eps", "weight_decay", "state"};
    double *slots[] = {&t->lr, &t->beta1, &t->beta2, &t->eps, &t->weight_decay};
    bool set[6] = {0};
    int pos = 0;
    for (int k = 0; k < e->args.len; k++) {
        const Arg *a = &e->args.items[k];
        int idx = -1;
        if (a->name) {
            for (int i = 0; i < 6; i++)
                if (strcmp(keys[i], a->name) == 0) idx = i;
            if (idx < 0) {
                const char *near = diag_nearest(a->name, keys, 6);
                if (near) sema_error(s, a->name_span, "adam has no argument '%s'; did you mean '%s'?", a->name, near);
                else sema_error(s, a->name_span, "adam has no argument '%s' (it has lr, beta1, beta2, eps, weight_decay, state)",
                                a->name);
                continue;
            }
        } else {
            idx = pos++;
            if (idx >= 5) {
                sema_error(s, a->value->span, "adam takes at most 5 arguments (lr, beta1, beta2, eps, weight_decay)");
                continue;
            }
        }
        if (set[idx]) {
            sema_error(s, a->value->span, "adam: '%s' given twice", keys[idx]);
            continue;
        }
        set[idx] = true;
        if (idx == 5) {
            read_opt_state(s, a->value, t);
            continue;
        }
        EvalCtx c = sema_const_ctx(s->train_scope);
        Val v = sema_eval_expr(s, &c, a->value);
        double x;
        if (num_ok(s, keys[idx], v, a->value->span, 0, idx == 0 || idx == 3, &x)) {
            if ((idx == 1 || idx == 2) && x >= 1) {
                sema_error(s, a->value->span, "%s must be below 1, got %g", keys[idx], x);
                continue;
            }
            *slots[idx] = x;
        }
    }
}

static void train_defaults(TrainConfig *t) {
    t->steps = 1000;
    t->dtype = DT_F32;
    t->seed = 1234;
    t->lr = 3e-4;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->eps = 1e-8;
    t->weight_decay = 0.0;
    t->warmup_steps = 0;
    t->min_lr = -1;
    t->schedule = LR_CONSTANT;
    t->grad_clip = 1.0;
    t->loss_scale = -1;
    t->checkpoint_every = 1;
    t->grad_accum = 1;
}

/* The integer settings; false if st is not one of them. */
static bool read_int_setting(Sema *s, const Setting *st, TrainConfig *t) {
    const char *k = st->key;
    int64_t iv;
    if (strcmp(k, "steps") == 0) {
        if (setting_int(s, st, 1, &iv)) t->steps = iv;
    } else if (strcmp(k, "seed") == 0) {
        if (setting_int(s, st, 0, &iv)) t->seed = (uint64_t)iv;
    } else if (strcmp(k, "warmup") == 0 || strcmp(k, "warmup_steps") == 0) {
        if (setting_int(s, st, 0, &iv)) t->warmup_steps = iv;
    } else if (strcmp(k, "grad_accum") == 0) {
        if (setting_int(s, st, 1, &iv)) {
            if (iv > PLAN_MAX_ACCUM)
                sema_error(s, st->value->span, "grad_accum must be at most %d (micro-batches per step the runtime holds), got %" PRId64,
                           PLAN_MAX_ACCUM, iv);
            else t->grad_accum = iv;
        }
    } else if (strcmp(k, "checkpoint_every") == 0) {
        if (setting_int(s, st, 0, &iv)) t->checkpoint_every = iv;
    } else {
        return false;
    }
    return true;
}

/* The number settings; false if st is not one of them. min_lr alone turns
 * the cosine schedule on, unless a schedule setting came before it. */
static bool read_num_setting(Sema *s, const Setting *st, TrainConfig *t, bool schedule_set) {
    const char *k = st->key;
    double fv;
    if (strcmp(k, "lr") == 0) {
        if (setting_num(s, st, 0, true, &fv)) t->lr = fv;
    } else if (strcmp(k, "beta1") == 0 || strcmp(k, "beta2") == 0) {
        if (setting_num(s, st, 0, false, &fv)) {
            if (fv >= 1) sema_error(s, st->value->span, "%s must be below 1, got %g", k, fv);
            else *(k[4] == '1' ? &t->beta1 : &t->beta2) = fv;
        }
    } else if (strcmp(k, "eps") == 0) {
        if (setting_num(s, st, 0, true, &fv)) t->eps = fv;
    } else if (strcmp(k, "weight_decay") == 0) {
        if (setting_num(s, st, 0, false, &fv)) t->weight_decay = fv;
    } else if (strcmp(k, "min_lr") == 0) {
        if (setting_num(s, st, 0, false, &fv)) {
            t->min_lr = fv;
            if (!schedule_set) t->schedule = LR_COSINE;
        }
    } else if (strcmp(k, "grad_clip") == 0) {
        if (setting_num(s, st, 0, false, &fv)) t->grad_clip = fv;
    } else if (strcmp(k, "loss_scale") == 0) {
        if (setting_num(s, st, 0, true, &fv)) t->loss_scale = fv;
    } else {
        return false;
    }
    return true;
}

/* checkpoint = "layer" | "none" | every(N) | N */
static void read_checkpoint(Sema *s, const Setting *st, TrainConfig *t) {
    const Expr *e = st->value;
    const char *w = setting_word(st);
    int64_t iv;
    if (w && (strcmp(w, "layer") == 0 || strcmp(w, "layers") == 0)) t->checkpoint_every = 1;
    else if (w && strcmp(w, "none") == 0) t->checkpoint_every = 0;
    else if (e->kind == EX_CALL && strcmp(e->str, "every") == 0 && e->args.len == 1) {
        EvalCtx c = sema_const_ctx(s->train_scope);
        Val v = sema_eval_expr(s, &c, e->args.items[0].value);
        if (v.k == V_INT && v.i >= 1) t->checkpoint_every = v.i;
        else if (v.k != V_POISON) sema_error(s, e->span, "checkpoint every(N) needs a positive integer N");
    } else if (e->kind == EX_INT || e->kind == EX_NAME || e->kind == EX_BINARY) {
        if (setting_int(s, st, 0, &iv)) t->checkpoint_every = iv;
    } else {
        sema_error(s, e->span, "checkpoint must be \"layer\", \"none\", every(N) or a number N of layers");
    }
}

/* The word settings (a name, a string or a call); false if st is not one of
 * them. */
static bool read_word_setting(Sema *s, const Setting *st, TrainConfig *t, bool *schedule_set) {
    const char *k = st->key;
    if (strcmp(k, "dtype") == 0) {
        const char *w = setting_word(st);
        if (w && strcmp(w, "f32") == 0) t->dtype = DT_F32;
        else if (w && strcmp(w, "bf16") == 0) t->dtype = DT_BF16;
        else if (w && strcmp(w, "f16") == 0) t->dtype = DT_F16;
        else sema_error(s, st->value->span, "dtype must be f32, bf16 or f16");
    } else if (strcmp(k, "optimizer") == 0) {
        const Expr *e = st->value;
        if (e->kind == EX_CALL && (strcmp(e->str, "adam") == 0 || strcmp(e->str, "adamw") == 0)) read_adam(s, e, t);
        else if (e->kind == EX_NAME && (strcmp(e->str, "adam") == 0 || strcmp(e->str, "adamw") == 0)) {
            /* adam with its defaults (or the lr, beta1, ... settings) */
        } else {
            sema_error(s, e->span,
                       "optimizer must be adam(lr = ..., beta1 = ..., beta2 = ..., eps = ..., weight_decay = ..., state = ...)");
        }
    } else if (strcmp(k, "schedule") == 0) {
        const char *w = setting_word(st);
        int k = -1;
        for (int i = 0; w && i < LR_NSCHEDULES && k < 0; i++)
            if (strcmp(w, lr_schedule_names[i]) == 0) k = i;
        if (k >= 0) t->schedule = (uint8_t)k;
        else sema_error(s, st->value->span, "schedule must be cosine, linear or constant");
        *schedule_set = true;
    } else if (strcmp(k, "checkpoint") == 0) {
        read_checkpoint(s, st, t);
    } else {
        return false;
    }
    return true;
}

static void unknown_setting(Sema *s, const Setting *st) {
    const char *k = st->key;
    const char *near = diag_nearest(k, train_keys, NTRAIN_KEYS);
    if (near) sema_error(s, st->span, "unknown train setting '%s'; did you mean '%s'?", k, near);
    else if (sema_error(s, st->span, "unknown train setting '%s'", k)) {
        const char *all = "";
        for (int j = 0; j < NTRAIN_KEYS; j++) all = arena_printf(s->a, "%s%s%s", all, j ? ", " : "", train_keys[j]);
        diag_hint(s->d, "valid settings: %s", all);
    }
}

void sema_read_train(Sema *s) {
    TrainConfig *t = &s->train;
    train_defaults(t);
    bool schedule_set = false;
    if (!s->train_decl) {
        sema_micro_batch(s);
        t->min_lr = t->lr;
        t->loss_scale = 1;
        return;
    }
    const SettingList *l = &s->train_decl->settings;
    /* dtype first: it decides the loss-scale default */
    for (int i = 0; i < l->len; i++) {
        const Setting *st = l->items[i];
        for (int j = 0; j < i; j++)
            if (strcmp(l->items[j]->key, st->key) == 0) {
                if (sema_error(s, st->span, "train setting '%s' given twice", st->key))
                    diag_note(s->d, l->items[j]->span, "first given here");
            }
        if (st->is_block || !st->value) {
            sema_error(s, st->span, "train settings are key = value; '%s' is a block", st->key);
            continue;
        }
        if (strcmp(st->key, "micro_batch") == 0) sema_micro_batch(s);
        else if (strcmp(st->key, "freeze") == 0 || strcmp(st->key, "quantize") == 0 || strcmp(st->key, "quantize_params") == 0)
            continue; /* once the parameters exist: sema_freeze.c */
        else if (strcmp(st->key, "no_decay") == 0) continue; /* likewise: sema_decay.c */
        else if (!read_int_setting(s, st, t) && !read_num_setting(s, st, t, schedule_set) &&
                 !read_word_setting(s, st, t, &schedule_set))
            unknown_setting(s, st);
    }
    sema_micro_batch(s);
    /* defaults: cosine ends at a tenth of lr (as before); linear at 0, as
     * transformers' get_linear_schedule_with_warmup does */
    if (t->min_lr < 0) t->min_lr = t->schedule == LR_COSINE ? t->lr * 0.1 : t->schedule == LR_LINEAR ? 0.0 : t->lr;
    if (t->loss_scale < 0) t->loss_scale = t->dtype == DT_F16 ? 65536.0 : 1.0;
}
