/* planner_alloc: step 5 of the planner: every arena allocated from the
 * buffers' lifetimes in the schedule, the dependencies address reuse needs,
 * and whether the arenas fit the target. */
#include "planner_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Seg {
    uint64_t lo, hi;
    int buf;
} Seg;

typedef struct Occ {          /* the last occupant of each address range */
    Seg *s;
    int n, cap;
} Occ;

static bool occ_place(B *b, Occ *o, uint64_t lo, uint64_t hi, int buf) {
    /* every previous occupant of [lo, hi) must be done before buf's first use */
    int first = b->bufs[buf].first;
    Seg out[2];
    int nout = 0, at = -1, w = 0;
    for (int k = 0; k < o->n; k++) {
        Seg sg = o->s[k];
        if (sg.hi <= lo || sg.lo >= hi) {
            o->s[w++] = sg;
            continue;
        }
        if (at < 0) at = w;
        const Buf *prev = &b->bufs[sg.buf];
        for (int q = 0; q < PLAN_NQUEUES && first >= 0; q++) pl_dep_on(b, first, prev->lastq[q]);
        if (sg.lo < lo && nout < 2) out[nout++] = (Seg){sg.lo, lo, sg.buf};
        if (sg.hi > hi && nout < 2) out[nout++] = (Seg){hi, sg.hi, sg.buf};
    }
    o->n = w;
    if (!pl_grow((void **)&o->s, &o->cap, o->n + 3, sizeof(Seg))) return false;
    o->s[o->n++] = (Seg){lo, hi, buf};
    for (int k = 0; k < nout; k++) o->s[o->n++] = out[k];
    (void)at;
    return true;
}

typedef struct Live {
    uint64_t lo, hi;
    int last;
} Live;

bool pl_allocate(B *b) {
    int n = b->nbufs;
    int *order = malloc(sizeof(int) * (size_t)(n + 1));
    Live *live[PLAN_NARENAS] = {0};
    int nlive[PLAN_NARENAS] = {0}, clive[PLAN_NARENAS] = {0};
    Occ occ[PLAN_NARENAS] = {{0}};
    uint64_t top[PLAN_NARENAS] = {0};
    bool ok = order != NULL;
    if (!ok) goto done;
    /* persistent homes first, at the bottom, for the whole step */
    for (int i = 0; i < n; i++) {
        Buf *x = &b->bufs[i];
        if (!(x->b.flags & PLAN_BUF_PERSISTENT)) continue;
        int a = x->b.arena;
        uint64_t al = pl_arena_align[a];
        x->b.offset = (top[a] + al - 1) / al * al;
        top[a] = x->b.offset + x->b.bytes;
    }
    uint64_t base[PLAN_NARENAS];
    for (int a = 0; a < PLAN_NARENAS; a++) base[a] = (top[a] + pl_arena_align[a] - 1) / pl_arena_align[a] * pl_arena_align[a];
    /* the rest in order of first use: counting sort by first instruction */
    int m = 0;
    {
        int *cnt = calloc((size_t)b->nins + 2, sizeof *cnt);
        if (!cnt) {
            ok = false;
            goto done;
        }
        for (int i = 0; i < n; i++)
            if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) cnt[b->bufs[i].first + 1]++;
        for (int i = 0; i < b->nins; i++) cnt[i + 1] += cnt[i];
        for (int i = 0; i < n; i++)
            if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) order[cnt[b->bufs[i].first]++] = i;
        for (int i = 0; i < n; i++)
            if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) m++;
        free(cnt);
    }
    for (int k = 0; k < m; k++) {
        Buf *x = &b->bufs[order[k]];
        int a = x->b.arena;
        uint64_t al = pl_arena_align[a];
        /* retire what died before this buffer's first use */
        int w = 0;
        for (int j = 0; j < nlive[a]; j++)
            if (live[a][j].last >= x->first) live[a][w++] = live[a][j];
        nlive[a] = w;
        /* lowest gap that fits (live is kept sorted by offset) */
        uint64_t at = base[a];
        int pos = 0;
        for (; pos < nlive[a]; pos++) {
            if (live[a][pos].lo >= at + x->b.bytes) break;
            uint64_t nx = (live[a][pos].hi + al - 1) / al * al;
            if (nx > at) at = nx;
        }
        x->b.offset = at;
        if (!pl_grow((void **)&live[a], &clive[a], nlive[a] + 1, sizeof(Live))) {
            ok = false;
            goto done;
        }
        memmove(&live[a][pos + 1], &live[a][pos], sizeof(Live) * (size_t)(nlive[a] - pos));
        live[a][pos] = (Live){at, at + x->b.bytes, x->last};
        nlive[a]++;
        if (at + x->b.bytes > top[a]) top[a] = at + x->b.bytes;
        if (x->b.bytes && !occ_place(b, &occ[a], at, at + x->b.bytes, order[k])) {
            ok = false;
            goto done;
        }
    }
    for (int a = 0; a < PLAN_NARENAS; a++) b->size[a] = top[a];
done:
    if (!ok) b->oom = true;
    free(order);
    for (int a = 0; a < PLAN_NARENAS; a++) {
        free(live[a]);
        free(occ[a].s);
    }
    return ok;
}


bool pl_fits(const B *b, char *why, size_t n) {
    char u[32], c[32];
    for (int a = 0; a < PLAN_NARENAS; a++) {
        uint64_t cap = a == ARENA_PINNED || a == ARENA_CPU ? b->cap[ARENA_CPU] : b->cap[a];
        uint64_t use = a == ARENA_PINNED || a == ARENA_CPU ? b->size[ARENA_PINNED] + b->size[ARENA_CPU] : b->size[a];
        if (use > cap) {
            snprintf(why, n, "%s needs %s per rank, has %s", a == ARENA_PINNED || a == ARENA_CPU ? "CPU memory" : plan_arena_names[a],
                     plan_bytes_str(use, u, sizeof u), plan_bytes_str(cap, c, sizeof c));
            return false;
        }
    }
    return true;
}

