#include "timeline.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "vocab.h"
#include "errorf.h"


static bool timeline_alloc(Timeline *t, uint32_t n) {
    memset(t, 0, sizeof *t);
    size_t k = n ? n : 1;
    t->n = n;
    t->rank = -1;
    t->start = calloc(k, sizeof *t->start);
    t->end = calloc(k, sizeof *t->end);
    t->wait = calloc(k, sizeof *t->wait);
    t->have = calloc(k, 1);
    if (t->start && t->end && t->wait && t->have) return true;
    timeline_free(t);
    return false;
}

void timeline_free(Timeline *t) {
    free(t->start);
    free(t->end);
    free(t->wait);
    free(t->have);
    memset(t, 0, sizeof *t);
    t->rank = -1;
}

bool timeline_predicted(const Plan *p, const CostResult *c, Timeline *t) {
    if (!timeline_alloc(t, p->ninstrs)) return false;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        t->start[i] = c->start[i];
        t->end[i] = c->end[i];
        t->wait[i] = c->wait ? c->wait[i] : 0; /* in flight beside other transfers, as the runtime counts it */
        t->have[i] = 1;
    }
    t->count = p->ninstrs;
    t->span = c->pass_time;
    return true;
}

/* ---- reading a measured trace ---- */

/* A finite number of a JSON value (a literal like 1e400 reads as infinity). */
static bool finite_number(const JsonValue *v, double *x) {
    if (!v || v->type != JSON_NUMBER || !(v->number > -1e300 && v->number < 1e300)) return false;
    *x = v->number;
    return true;
}

/* The plan's instruction i matches the event's name (its first word is the
 * opcode), cat (the queue's name) and tid (the queue's number). */
static int check_identity(const Plan *p, const JsonValue *e, size_t k, uint32_t i, char *err, size_t n) {
    const PlanInstr *s = &p->instrs[i];
    const char *op = s->op < PI_COUNT ? plan_opcode_names[s->op] : "?";
    const char *q = s->queue < PLAN_NQUEUES ? plan_queue_names[s->queue] : "?";
    const char *name = json_get_str(e, "name"), *cat = json_get_str(e, "cat");
    const JsonValue *tid = json_get_type(e, "tid", JSON_NUMBER);
    if (!name || !cat || !tid) return errorf(err, n, "event %zu (instruction %u) has no name, cat or tid", k, i);
    size_t w = strcspn(name, " ");
    bool same = w == strlen(op) && !strncmp(name, op, w) && !strcmp(cat, q) && tid->is_integer && tid->integer == s->queue;
    if (!same)
        return errorf(err, n, "event %zu: instruction %u is %.*s on %.32s in the trace but %s on %s in the plan: a trace of another plan?",
                    k, i, (int)(w < 32 ? w : 32), name, cat, op, q);
    return 0;
}

/* One complete event into t. */
static int read_event(const Plan *p, const JsonValue *e, size_t k, Timeline *t, char *err, size_t n) {
    const JsonValue *iv = json_get_type(json_get_type(e, "args", JSON_OBJECT), "i", JSON_NUMBER);
    if (!iv || !iv->is_integer) return errorf(err, n, "event %zu has no args.i (the instruction's index)", k);
    if (iv->integer < 0 || iv->integer >= p->ninstrs)
        return errorf(err, n, "event %zu: instruction %lld, but the plan has %u instructions: a trace of another plan?", k,
                    (long long)iv->integer, p->ninstrs);
    uint32_t i = (uint32_t)iv->integer;
    if (check_identity(p, e, k, i, err, n)) return -1;
    double ts, dur, wait = 0;
    if (!finite_number(json_get(e, "ts"), &ts) || !finite_number(json_get(e, "dur"), &dur) || dur < 0)
        return errorf(err, n, "event %zu (instruction %u): ts and dur must be numbers, dur not negative", k, i);
    const JsonValue *wv = json_get(json_get_type(e, "args", JSON_OBJECT), "wait"); /* optional: older traces lack it */
    if (wv && (!finite_number(wv, &wait) || wait < 0 || wait > dur))
        return errorf(err, n, "event %zu (instruction %u): args.wait must be a number from 0 to dur", k, i);
    const JsonValue *pid = json_get_type(e, "pid", JSON_NUMBER);
    if (!pid || !pid->is_integer || pid->integer < 0 || pid->integer > 1 << 24)
        return errorf(err, n, "event %zu (instruction %u) has no pid (the rank)", k, i);
    if (t->count && pid->integer != t->rank)
        return errorf(err, n, "events of rank %d and rank %lld in one trace: give one rank's file", t->rank, (long long)pid->integer);
    if (t->have[i]) return errorf(err, n, "event %zu: instruction %u appears twice", k, i);
    t->rank = (int)pid->integer;
    t->have[i] = 1;
    t->count++;
    t->start[i] = ts * 1e-6;
    t->end[i] = (ts + dur) * 1e-6;
    t->wait[i] = wait * 1e-6;
    return 0;
}

static int read_events(const Plan *p, const JsonValue *root, Timeline *t, char *err, size_t n) {
    const JsonValue *ev = json_get_type(root, "traceEvents", JSON_ARRAY);
    if (!ev) return errorf(err, n, "not a Chrome trace (no traceEvents array)");
    for (size_t k = 0; k < ev->count; k++) {
        const JsonValue *e = &ev->items[k];
        if (e->type != JSON_OBJECT) return errorf(err, n, "event %zu is %s, not an object", k, json_type_phrase(e->type));
        const char *ph = json_get_str(e, "ph");
        if (!ph || strcmp(ph, "X")) continue; /* metadata: thread names */
        if (read_event(p, e, k, t, err, n)) return -1;
    }
    if (!t->count) return errorf(err, n, "no measured instructions (an empty trace)");
    double t0 = 0;
    bool first = true;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->have[i] && (first || t->start[i] < t0)) {
            t0 = t->start[i];
            first = false;
        }
    for (uint32_t i = 0; i < t->n; i++) {
        if (!t->have[i]) continue;
        t->start[i] -= t0;
        t->end[i] -= t0;
        if (t->end[i] > t->span) t->span = t->end[i];
    }
    return 0;
}

int timeline_read_trace(const Plan *p, const char *text, size_t len, Timeline *t, char *err, size_t errlen) {
    if (!timeline_alloc(t, p->ninstrs)) return errorf(err, errlen, "out of memory");
    JsonDoc doc;
    char jerr[256];
    int rc;
    if (json_parse(text, len, &doc, jerr, sizeof jerr)) rc = errorf(err, errlen, "not valid JSON: %s", jerr);
    else rc = read_events(p, doc.root, t, err, errlen);
    json_free(&doc);
    if (rc) timeline_free(t);
    return rc;
}

/* ---- classes and rows ---- */

int timeline_nclasses(void) { return PI_COUNT + 1 + OP_KIND_COUNT * PRIM_COUNT; }

static bool runs_prim(int kind) { return kind == OP_FWD || kind == OP_BWD || kind == OP_RECOMPUTE; }

int timeline_class(const Plan *p, uint32_t i) {
    const PlanInstr *s = &p->instrs[i];
    if (s->op >= PI_COUNT) return PI_COUNT;
    if (s->op != PI_KERNEL || s->arg < 0 || (uint32_t)s->arg >= p->nops) return s->op;
    const PlanOp *o = &p->ops[s->arg];
    if (o->kind >= OP_KIND_COUNT || (runs_prim(o->kind) && o->prim >= PRIM_COUNT)) return s->op;
    return PI_COUNT + 1 + o->kind * PRIM_COUNT + (runs_prim(o->kind) ? o->prim : 0);
}

void timeline_class_name(int cls, char *buf, size_t n) {
    if (cls >= 0 && cls < PI_COUNT) {
        snprintf(buf, n, "%s", plan_opcode_names[cls]);
    } else if (cls > PI_COUNT && cls < timeline_nclasses()) {
        int k = cls - PI_COUNT - 1, kind = k / PRIM_COUNT;
        snprintf(buf, n, "%s %s%s%s", plan_opcode_names[PI_KERNEL], op_kind_names[kind], runs_prim(kind) ? " " : "", runs_prim(kind) ? prim_names[k % PRIM_COUNT] : "");
    } else {
        snprintf(buf, n, "?");
    }
}

double timeline_busy(const Timeline *t, uint32_t i) {
    double d = t->end[i] - t->start[i] - t->wait[i];
    return d > 0 ? d : 0;
}

/* How far a row's measurement is from its prediction (NaN: 0, so sorting stays a total order). */
static double gap(const TimelineRow *r) {
    double d = r->meas - r->pred;
    if (d < 0) d = -d;
    return d > 0 ? d : 0;
}

static int by_gap(const void *x, const void *y) {
    const TimelineRow *a = x, *b = y;
    double ga = gap(a), gb = gap(b);
    if (ga != gb) return ga > gb ? -1 : 1;
    return strcmp(a->name, b->name);
}

static void add(TimelineRow *r, const Timeline *pred, const Timeline *meas, uint32_t i) {
    r->count++;
    r->pred += timeline_busy(pred, i);
    r->meas += timeline_busy(meas, i);
    r->wait += meas->wait[i];
}

bool timeline_queue_rows(const Plan *p, const Timeline *pred, const Timeline *meas, TimelineRow rows[PLAN_NQUEUES]) {
    memset(rows, 0, sizeof(TimelineRow) * PLAN_NQUEUES);
    for (int q = 0; q < PLAN_NQUEUES; q++) snprintf(rows[q].name, sizeof rows[q].name, "%s", plan_queue_names[q]);
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (meas->have[i] && pred->have[i] && p->instrs[i].queue < PLAN_NQUEUES) add(&rows[p->instrs[i].queue], pred, meas, i);
    qsort(rows, PLAN_NQUEUES, sizeof *rows, by_gap);
    return true;
}

bool timeline_class_rows(const Plan *p, const Timeline *pred, const Timeline *meas, TimelineRow **rows, uint32_t *nrows) {
    int nc = timeline_nclasses();
    TimelineRow *r = calloc((size_t)nc, sizeof *r);
    *rows = NULL;
    *nrows = 0;
    if (!r) return false;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (meas->have[i] && pred->have[i]) add(&r[timeline_class(p, i)], pred, meas, i);
    uint32_t k = 0;
    for (int c = 0; c < nc; c++) {
        if (!r[c].count) continue;
        r[k] = r[c];
        timeline_class_name(c, r[k].name, sizeof r[k].name);
        k++;
    }
    qsort(r, k, sizeof *r, by_gap);
    *rows = r;
    *nrows = k;
    return true;
}

/* ---- the critical path ---- */

/* What instruction i waited for: of its dependencies and its queue's
 * previous instruction (qprev, or -1), the one with a time that ended last.
 * Always an earlier index, so the walk back ends. */
static int64_t waited_for(const Plan *p, const Timeline *t, uint32_t i, int64_t qprev) {
    int64_t best = qprev;
    const PlanInstr *s = &p->instrs[i];
    for (uint32_t d = 0; d < s->ndeps && (uint64_t)s->dep + d < p->ndeps; d++) {
        uint32_t j = p->deps[s->dep + d];
        if (j >= i || !t->have[j]) continue;
        if (best < 0 || t->end[j] > t->end[best]) best = j;
    }
    return best;
}

bool timeline_critical_path(const Plan *p, const Timeline *t, TimelinePath *path) {
    memset(path, 0, sizeof *path);
    int64_t last = -1;
    for (uint32_t i = 0; i < p->ninstrs && i < t->n; i++)
        if (t->have[i] && (last < 0 || t->end[i] >= t->end[last])) last = i; /* ties: the later, STEP_END over what it waits for */
    if (last < 0) return true;
    int64_t *qprev = malloc(sizeof *qprev * (size_t)(last + 1));
    uint32_t *chain = malloc(sizeof *chain * (size_t)(last + 1));
    if (!qprev || !chain) {
        free(qprev);
        free(chain);
        return false;
    }
    int64_t qlast[PLAN_NQUEUES];
    for (int q = 0; q < PLAN_NQUEUES; q++) qlast[q] = -1;
    for (int64_t i = 0; i <= last; i++) {
        uint8_t q = p->instrs[i].queue;
        qprev[i] = q < PLAN_NQUEUES ? qlast[q] : -1;
        if (q < PLAN_NQUEUES && t->have[i]) qlast[q] = i;
    }
    uint32_t n = 0;
    for (int64_t i = last; i >= 0; i = waited_for(p, t, (uint32_t)i, qprev[i])) chain[n++] = (uint32_t)i;
    free(qprev);
    for (uint32_t a = 0, b = n - 1; a < b; a++, b--) {
        uint32_t x = chain[a];
        chain[a] = chain[b];
        chain[b] = x;
    }
    path->instr = chain;
    path->n = n;
    path->span = t->end[last] - t->start[chain[0]];
    for (uint32_t k = 0; k < n; k++) path->busy += timeline_busy(t, chain[k]);
    return true;
}

void timeline_path_free(TimelinePath *path) {
    free(path->instr);
    memset(path, 0, sizeof *path);
}

uint8_t *timeline_path_marks(const Plan *p, const TimelinePath *path) {
    uint8_t *m = calloc(p->ninstrs ? p->ninstrs : 1, 1);
    if (!m) return NULL;
    for (uint32_t k = 0; k < path->n; k++)
        if (path->instr[k] < p->ninstrs) m[path->instr[k]] = 1;
    return m;
}
