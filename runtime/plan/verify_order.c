/* verify_order: the schedule's order (topological sort, vector clocks),
 * each buffer's uses, dataflow and the overlap of buffers in time. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verify_impl.h"
#include "vocab.h"

/* ---- 4. order: topological sort and vector clocks ---- */
bool vf_build_order(V *v) {
    const Plan *p = v->p;
    uint32_t n = p->ninstrs;
    uint32_t *indeg = NULL, *succ_start = NULL; /* for the sort, where program order is not one */
    uint32_t *prevq = malloc((n + 1) * sizeof *prevq), *succ = NULL;
    v->qpos = malloc((n + 1) * sizeof *v->qpos);
    v->queue = malloc(n + 1);
    v->order = malloc((n + 1) * sizeof *v->order);
    v->vc = calloc((size_t)(n + 1) * PLAN_NQUEUES, sizeof *v->vc);
    bool ok = false;
    if (!prevq || !v->qpos || !v->queue || !v->order || !v->vc) goto oom;
    uint32_t last[PLAN_NQUEUES], cnt[PLAN_NQUEUES] = {0};
    for (int q = 0; q < PLAN_NQUEUES; q++) last[q] = UINT32_MAX;
    uint64_t nedges = 0;
    bool backward = true; /* every dependency on an earlier instruction */
    for (uint32_t i = 0; i < n; i++) {
        const PlanInstr *s = &p->instrs[i];
        prevq[i] = last[s->queue];
        last[s->queue] = i;
        v->qpos[i] = ++cnt[s->queue];
        v->queue[i] = s->queue;
        nedges += s->ndeps + (prevq[i] != UINT32_MAX);
        for (uint32_t k = 0; k < s->ndeps; k++) backward &= p->deps[s->dep + k] < i;
    }
    /* Where every dependency is on an earlier instruction (as the planner
     * writes them), program order is a topological order: no cycle, and
     * no successor lists to build for one. */
    if (backward) {
        for (uint32_t i = 0; i < n; i++) v->order[i] = i;
        goto clocks;
    }
    indeg = calloc(n + 1, sizeof *indeg);
    succ_start = calloc(n + 2, sizeof *succ_start);
    succ = malloc((nedges + 1) * sizeof *succ);
    if (!indeg || !succ_start || !succ) goto oom;
    for (uint32_t i = 0; i < n; i++) {
        const PlanInstr *s = &p->instrs[i];
        for (uint32_t k = 0; k < s->ndeps; k++) succ_start[p->deps[s->dep + k] + 1]++;
        if (prevq[i] != UINT32_MAX) succ_start[prevq[i] + 1]++;
        indeg[i] = s->ndeps + (prevq[i] != UINT32_MAX);
    }
    for (uint32_t i = 0; i < n; i++) succ_start[i + 1] += succ_start[i];
    uint32_t *fill = malloc((n + 1) * sizeof *fill);
    if (!fill) goto oom;
    memcpy(fill, succ_start, n * sizeof *fill);
    for (uint32_t i = 0; i < n; i++) {
        const PlanInstr *s = &p->instrs[i];
        for (uint32_t k = 0; k < s->ndeps; k++) succ[fill[p->deps[s->dep + k]]++] = i;
        if (prevq[i] != UINT32_MAX) succ[fill[prevq[i]]++] = i;
    }
    free(fill);
    uint32_t head = 0, tail = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!indeg[i]) v->order[tail++] = i;
    while (head < tail) {
        uint32_t i = v->order[head++];
        for (uint32_t e = succ_start[i]; e < succ_start[i + 1]; e++)
            if (--indeg[succ[e]] == 0) v->order[tail++] = succ[e];
    }
    if (tail < n) {
        char list[160];
        size_t used = 0;
        int shown = 0;
        for (uint32_t i = 0; i < n && shown < 6; i++)
            if (indeg[i]) {
                int w = snprintf(list + used, sizeof list - used, "%s%u (%s)", shown ? ", " : "", i, vf_iname(p, i));
                if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
                shown++;
            }
        vf_problem(v, "dependency cycle: %u instructions wait on each other, among them %s", n - tail, list);
        goto done;
    }
clocks:
    /* vector clocks in topological order: vc[i][q] = the highest position on
     * queue q of an instruction ordered before or equal to i */
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = v->order[k];
        const PlanInstr *s = &p->instrs[i];
        uint32_t *c = v->vc + (size_t)i * PLAN_NQUEUES;
        for (uint32_t d = 0; d < s->ndeps; d++) {
            const uint32_t *o = v->vc + (size_t)p->deps[s->dep + d] * PLAN_NQUEUES;
            for (int q = 0; q < PLAN_NQUEUES; q++) if (o[q] > c[q]) c[q] = o[q];
        }
        if (prevq[i] != UINT32_MAX) {
            const uint32_t *o = v->vc + (size_t)prevq[i] * PLAN_NQUEUES;
            for (int q = 0; q < PLAN_NQUEUES; q++) if (o[q] > c[q]) c[q] = o[q];
        }
        c[s->queue] = v->qpos[i];
    }
    ok = true;
    goto done;
oom:
    vf_problem(v, "out of memory verifying the schedule's order");
done:
    free(indeg);
    free(succ_start);
    free(prevq);
    free(succ);
    return ok;
}

/* a happens before b (a != b) */
static bool before(const V *v, uint32_t a, uint32_t b) {
    if (a == b) return false;
    return v->vc[(size_t)b * PLAN_NQUEUES + v->queue[a]] >= v->qpos[a];
}

/* ---- 5. uses of each buffer ---- */
bool vf_build_uses(V *v) {
    const Plan *p = v->p;
    uint32_t nb = p->nbuffers;
    v->use_start = calloc(nb + 2, sizeof *v->use_start);
    v->use_list = malloc((p->noperands + 1) * sizeof *v->use_list);
    v->use_mode = malloc(p->noperands + 1);
    uint32_t *fill = malloc((nb + 1) * sizeof *fill);
    if (!v->use_start || !v->use_list || !v->use_mode || !fill) {
        free(fill);
        vf_problem(v, "out of memory verifying buffer uses");
        return false;
    }
    for (uint32_t i = 0; i < p->ninstrs; i++)
        for (uint32_t k = 0; k < p->instrs[i].nopnd; k++) {
            int32_t b = p->operands[p->instrs[i].opnd + k].buffer;
            if (b >= 0) v->use_start[b + 1]++;
        }
    for (uint32_t b = 0; b < nb; b++) v->use_start[b + 1] += v->use_start[b];
    memcpy(fill, v->use_start, nb * sizeof *fill);
    for (uint32_t i = 0; i < p->ninstrs; i++)
        for (uint32_t k = 0; k < p->instrs[i].nopnd; k++) {
            const PlanOperand *o = &p->operands[p->instrs[i].opnd + k];
            if (o->buffer < 0) continue;
            v->use_list[fill[o->buffer]] = i;
            v->use_mode[fill[o->buffer]++] = o->mode;
        }
    free(fill);
    return true;
}

/* Whether buffer b's uses certainly pass check_dataflow, found without
 * comparing every use with every writer (a buffer can have thousands of
 * uses). Along a queue positions and vector clocks only grow, so the
 * writers on one queue that happen before a use r are a prefix of that
 * queue's writers and those r happens before are a suffix; a writer
 * between the two is unordered with r. False when there is one, or a read
 * with no writer before it: the exhaustive loop then finds and words the
 * problems, so the verdicts are the same. wq: room for b's uses. */
static bool dataflow_clean(const V *v, uint32_t b, uint32_t *wq) {
    const Plan *p = v->p;
    uint32_t s = v->use_start[b], e = v->use_start[b + 1];
    uint32_t start[PLAN_NQUEUES + 1] = {0}, fill[PLAN_NQUEUES];
    for (uint32_t w = s; w < e; w++)
        if (v->use_mode[w] & PLAN_W) start[v->queue[v->use_list[w]] + 1]++;
    for (int q = 0; q < PLAN_NQUEUES; q++) start[q + 1] += start[q];
    memcpy(fill, start, sizeof fill);
    for (uint32_t w = s; w < e; w++) /* in instruction order: in queue order on each queue */
        if (v->use_mode[w] & PLAN_W) wq[fill[v->queue[v->use_list[w]]]++] = v->use_list[w];
    bool persistent = p->buffers[b].flags & PLAN_BUF_PERSISTENT;
    for (uint32_t r = s; r < e; r++) {
        uint32_t ri = v->use_list[r], qr = v->queue[ri];
        const uint32_t *vr = v->vc + (size_t)ri * PLAN_NQUEUES;
        bool filled = persistent;
        for (int q = 0; q < PLAN_NQUEUES; q++) {
            const uint32_t *W = wq + start[q];
            uint32_t m = start[q + 1] - start[q];
            if (!m) continue;
            /* pre: the writers that happen before r (or are r) */
            uint32_t lo = 0, hi = m;
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (v->qpos[W[mid]] <= vr[q]) lo = mid + 1;
                else hi = mid;
            }
            uint32_t pre = lo;
            /* from post on: the writers r happens before */
            lo = 0, hi = m;
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (v->vc[(size_t)W[mid] * PLAN_NQUEUES + qr] < v->qpos[ri]) lo = mid + 1;
                else hi = mid;
            }
            if (lo > pre) return false;
            if ((uint32_t)q != qr) filled |= pre > 0;
            else filled |= pre > 0 && v->qpos[W[0]] < v->qpos[ri]; /* a writer before r on its queue, not r itself */
        }
        if ((v->use_mode[r] & PLAN_R) && !filled) return false;
    }
    return true;
}

void vf_check_dataflow(V *v) {
    const Plan *p = v->p;
    uint32_t most = 0;
    for (uint32_t b = 0; b < p->nbuffers; b++)
        if (v->use_start[b + 1] - v->use_start[b] > most) most = v->use_start[b + 1] - v->use_start[b];
    uint32_t *wq = malloc(((size_t)most + 1) * sizeof *wq); /* NULL: every buffer the exhaustive way */
    for (uint32_t b = 0; b < p->nbuffers && !STOP(v); b++) {
        uint32_t s = v->use_start[b], e = v->use_start[b + 1];
        if (e - s > 16 && wq && dataflow_clean(v, b, wq)) continue;
        bool persistent = p->buffers[b].flags & PLAN_BUF_PERSISTENT;
        for (uint32_t r = s; r < e && !STOP(v); r++) {
            uint32_t ri = v->use_list[r];
            bool reads = v->use_mode[r] & PLAN_R, writes = v->use_mode[r] & PLAN_W;
            bool filled = persistent;
            for (uint32_t w = s; w < e; w++) {
                uint32_t wi = v->use_list[w];
                if (!(v->use_mode[w] & PLAN_W) || wi == ri) continue;
                if (before(v, wi, ri)) filled = true;
                else if (!before(v, ri, wi) && (reads || (writes && w > r))) {
                    vf_problem(v, "instruction %u (%s) writes buffer '%s' unordered with instruction %u (%s), which %s it (race)",
                            wi, vf_iname(p, wi), vf_bname(p, (int32_t)b), ri, vf_iname(p, ri), reads ? "reads" : "writes");
                    break;
                }
            }
            if (reads && !filled)
                vf_problem(v, "instruction %u (%s) reads buffer '%s' before anything writes it (missing fetch?)", ri, vf_iname(p, ri),
                        vf_bname(p, (int32_t)b));
        }
    }
    free(wq);
}

typedef struct Ext {
    uint32_t first[PLAN_NQUEUES], last[PLAN_NQUEUES];
} Ext;

static void extent(const V *v, uint32_t b, Ext *x) {
    for (int q = 0; q < PLAN_NQUEUES; q++) x->first[q] = x->last[q] = UINT32_MAX;
    for (uint32_t u = v->use_start[b]; u < v->use_start[b + 1]; u++) {
        uint32_t i = v->use_list[u];
        int q = v->queue[i];
        if (x->first[q] == UINT32_MAX || i < x->first[q]) x->first[q] = i;
        if (x->last[q] == UINT32_MAX || i > x->last[q]) x->last[q] = i;
    }
}

/* every use of a precedes every use of b; on failure *wa, *wb are a pair that is not ordered */
static bool all_before(const V *v, const Ext *a, const Ext *b, uint32_t *wa, uint32_t *wb) {
    for (int qa = 0; qa < PLAN_NQUEUES; qa++) {
        if (a->last[qa] == UINT32_MAX) continue;
        for (int qb = 0; qb < PLAN_NQUEUES; qb++) {
            if (b->first[qb] == UINT32_MAX) continue;
            if (!before(v, a->last[qa], b->first[qb])) {
                *wa = a->last[qa];
                *wb = b->first[qb];
                return false;
            }
        }
    }
    return true;
}

/* Overlap in time of buffers that share addresses. Buffers are taken in the
 * order of their first use in a topological order of the schedule; an
 * interval map keeps, for every address of each arena, the buffer that
 * occupied it last. Each buffer must come after (every use ordered after
 * every use of) each buffer it displaces. Checking only these neighbours is
 * enough: if A was displaced from an address by C and C by B, then A
 * precedes C precedes B. Two buffers that are properly ordered are always
 * met in their order, because the first use of the earlier one comes first
 * in every topological order. */
typedef struct Seg {
    uint64_t lo, hi;
    uint32_t buf;
} Seg;

typedef struct Map {
    Seg *s;
    uint32_t n, cap;
} Map;

typedef struct Item {
    uint64_t key; /* persistent buffers first, then by first use */
    uint32_t buf;
} Item;

static int by_key(const void *x, const void *y) {
    const Item *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->buf < b->buf ? -1 : a->buf > b->buf;
}

/* items by key, then buffer: a counting sort over the keys 0 ..= ninstrs
 * (items come in buffer order, and it keeps that order within a key), or
 * qsort when there is no memory for the counts */
static void sort_items(Item **items, uint32_t m, uint32_t ninstrs) {
    uint32_t *cnt = calloc((size_t)ninstrs + 2, sizeof *cnt);
    Item *out = malloc(((size_t)m + 1) * sizeof *out);
    if (!cnt || !out) {
        free(cnt);
        free(out);
        qsort(*items, m, sizeof **items, by_key);
        return;
    }
    for (uint32_t k = 0; k < m; k++) cnt[(*items)[k].key + 1]++;
    for (uint32_t k = 0; k <= ninstrs; k++) cnt[k + 1] += cnt[k];
    for (uint32_t k = 0; k < m; k++) out[cnt[(*items)[k].key]++] = (*items)[k];
    free(cnt);
    free(*items);
    *items = out;
}

static void overlap_problem(V *v, uint32_t x, uint32_t y, uint32_t ix, uint32_t iy) {
    const Plan *p = v->p;
    const PlanBuffer *a = &p->buffers[x], *b = &p->buffers[y];
    if ((a->flags | b->flags) & PLAN_BUF_PERSISTENT) {
        vf_problem(v, "buffers '%s' and '%s' overlap in arena %s, and '%s' is persistent", a->name, b->name,
                plan_arena_names[a->arena], a->flags & PLAN_BUF_PERSISTENT ? a->name : b->name);
        return;
    }
    vf_problem(v, "buffers '%s' [%" PRIu64 ", +%" PRIu64 ") and '%s' [%" PRIu64 ", +%" PRIu64 ") overlap in arena %s while both are live: "
            "instruction %u (%s) and instruction %u (%s) are not ordered",
            a->name, a->offset, a->bytes, b->name, b->offset, b->bytes, plan_arena_names[a->arena], ix, vf_iname(p, ix), iy, vf_iname(p, iy));
}

/* Places buffer b over [lo, hi) in m, checking it against what it
 * displaces. The extents are worked out here, for b and each buffer it
 * displaces (a few), not kept for every buffer (a large plan's would be
 * 80 MB, written once and read at random). */
static bool map_place(V *v, Map *m, uint32_t b, uint64_t lo, uint64_t hi) {
    uint32_t need = m->n + 3;
    if (need > m->cap) {
        uint32_t nc = m->cap ? m->cap * 2 : 64;
        while (nc < need) nc *= 2;
        Seg *ns = realloc(m->s, sizeof(Seg) * nc);
        if (!ns) return false;
        m->s = ns;
        m->cap = nc;
    }
    /* segments are sorted and disjoint: find the first that ends after lo */
    uint32_t l = 0, r = m->n;
    while (l < r) {
        uint32_t mid = (l + r) / 2;
        if (m->s[mid].hi <= lo) l = mid + 1;
        else r = mid;
    }
    uint32_t first = l, last = l;
    Seg keep[2];
    int nkeep = 0;
    uint32_t reported = UINT32_MAX;
    bool persistent = v->p->buffers[b].flags & PLAN_BUF_PERSISTENT, have_eb = false;
    Ext ea, eb;
    while (last < m->n && m->s[last].lo < hi) {
        Seg sg = m->s[last];
        uint32_t a = sg.buf, ia = 0, ib = 0;
        bool ok = !persistent && !(v->p->buffers[a].flags & PLAN_BUF_PERSISTENT);
        if (ok) {
            if (!have_eb) extent(v, b, &eb), have_eb = true;
            extent(v, a, &ea);
            ok = all_before(v, &ea, &eb, &ia, &ib);
        }
        if (!ok && a != reported && !STOP(v)) {
            overlap_problem(v, a, b, ia, ib);
            reported = a;
        }
        if (sg.lo < lo) keep[nkeep++] = (Seg){sg.lo, lo, a};
        if (sg.hi > hi) keep[nkeep++] = (Seg){hi, sg.hi, a};
        last++;
    }
    /* replace segments [first, last) by keep[0]?, [lo, hi), keep[1]? in address order */
    Seg repl[3];
    int nr = 0;
    if (nkeep && keep[0].lo < lo) repl[nr++] = keep[0];
    repl[nr++] = (Seg){lo, hi, b};
    for (int k = 0; k < nkeep; k++)
        if (keep[k].lo >= hi) repl[nr++] = keep[k];
    uint32_t removed = last - first;
    memmove(&m->s[first + (uint32_t)nr], &m->s[last], sizeof(Seg) * (m->n - last));
    memcpy(&m->s[first], repl, sizeof(Seg) * (size_t)nr);
    m->n = m->n - removed + (uint32_t)nr;
    return true;
}

void vf_check_overlap(V *v) {
    const Plan *p = v->p;
    uint32_t nb = p->nbuffers, n = p->ninstrs;
    Item *items = malloc((nb + 1) * sizeof *items);
    uint32_t *topo = malloc((n + 1) * sizeof *topo);
    Map maps[PLAN_NARENAS] = {{0}};
    if (!items || !topo) {
        vf_problem(v, "out of memory verifying buffer overlap");
        goto done;
    }
    for (uint32_t k = 0; k < n; k++) topo[v->order[k]] = k;
    uint32_t m = 0;
    for (uint32_t b = 0; b < nb; b++) {
        bool persistent = p->buffers[b].flags & PLAN_BUF_PERSISTENT, used = v->use_start[b + 1] > v->use_start[b];
        if (!p->buffers[b].bytes || (!persistent && !used)) continue;
        uint64_t first = UINT64_MAX;
        for (uint32_t u = v->use_start[b]; u < v->use_start[b + 1]; u++)
            if (topo[v->use_list[u]] < first) first = topo[v->use_list[u]];
        items[m++] = (Item){persistent ? 0 : first + 1, b};
    }
    sort_items(&items, m, n);
    for (uint32_t k = 0; k < m && !STOP(v); k++) {
        const PlanBuffer *bf = &p->buffers[items[k].buf];
        if (!map_place(v, &maps[bf->arena], items[k].buf, bf->offset, bf->offset + bf->bytes)) {
            vf_problem(v, "out of memory verifying buffer overlap");
            break;
        }
    }
done:
    for (int a = 0; a < PLAN_NARENAS; a++) free(maps[a].s);
    free(items);
    free(topo);
}
