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

/* Each arena's packing state: the buffers live at the buffer being placed,
 * sorted by offset; the last occupant of every range; the floor above the
 * persistent homes and the high-water mark. */
typedef struct Packer {
    Live *live[PLAN_NARENAS];
    int nlive[PLAN_NARENAS], clive[PLAN_NARENAS];
    Occ occ[PLAN_NARENAS];
    uint64_t base[PLAN_NARENAS], top[PLAN_NARENAS];
} Packer;

/* persistent homes first, at the bottom, for the whole step */
static void place_persistent(B *b, Packer *pk) {
    for (int i = 0; i < b->nbufs; i++) {
        Buf *x = &b->bufs[i];
        if (!(x->b.flags & PLAN_BUF_PERSISTENT)) continue;
        int a = x->b.arena;
        uint64_t al = pl_arena_align[a];
        x->b.offset = (pk->top[a] + al - 1) / al * al;
        pk->top[a] = x->b.offset + x->b.bytes;
    }
    for (int a = 0; a < PLAN_NARENAS; a++) pk->base[a] = (pk->top[a] + pl_arena_align[a] - 1) / pl_arena_align[a] * pl_arena_align[a];
}

/* the rest in order of first use: counting sort by first instruction; how
 * many, or -1 when out of memory */
static int first_use_order(const B *b, int *order) {
    int n = b->nbufs, m = 0;
    int *cnt = calloc((size_t)b->nins + 2, sizeof *cnt);
    if (!cnt) return -1;
    for (int i = 0; i < n; i++)
        if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) cnt[b->bufs[i].first + 1]++;
    for (int i = 0; i < b->nins; i++) cnt[i + 1] += cnt[i];
    for (int i = 0; i < n; i++)
        if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) order[cnt[b->bufs[i].first]++] = i;
    for (int i = 0; i < n; i++)
        if (!(b->bufs[i].b.flags & PLAN_BUF_PERSISTENT) && b->bufs[i].first >= 0) m++;
    free(cnt);
    return m;
}

/* Buffer i at the lowest gap of its arena that nothing live from its first
 * use on occupies; false when out of memory. */
static bool place_one(B *b, Packer *pk, int i) {
    Buf *x = &b->bufs[i];
    int a = x->b.arena;
    uint64_t al = pl_arena_align[a];
    Live *live = pk->live[a];
    /* retire what died before this buffer's first use */
    int w = 0;
    for (int j = 0; j < pk->nlive[a]; j++)
        if (live[j].last >= x->first) live[w++] = live[j];
    pk->nlive[a] = w;
    /* lowest gap that fits (live is kept sorted by offset) */
    uint64_t at = pk->base[a];
    int pos = 0;
    for (; pos < pk->nlive[a]; pos++) {
        if (live[pos].lo >= at + x->b.bytes) break;
        uint64_t nx = (live[pos].hi + al - 1) / al * al;
        if (nx > at) at = nx;
    }
    x->b.offset = at;
    if (!pl_grow((void **)&pk->live[a], &pk->clive[a], pk->nlive[a] + 1, sizeof(Live))) return false;
    live = pk->live[a];
    memmove(&live[pos + 1], &live[pos], sizeof(Live) * (size_t)(pk->nlive[a] - pos));
    live[pos] = (Live){at, at + x->b.bytes, x->last};
    pk->nlive[a]++;
    if (at + x->b.bytes > pk->top[a]) pk->top[a] = at + x->b.bytes;
    return !x->b.bytes || occ_place(b, &pk->occ[a], at, at + x->b.bytes, i);
}

bool pl_allocate(B *b) {
    Packer pk;
    memset(&pk, 0, sizeof pk);
    int *order = malloc(sizeof(int) * (size_t)(b->nbufs + 1));
    int m = -1;
    if (order) {
        place_persistent(b, &pk);
        m = first_use_order(b, order);
    }
    bool ok = m >= 0;
    for (int k = 0; ok && k < m; k++) ok = place_one(b, &pk, order[k]);
    if (ok)
        for (int a = 0; a < PLAN_NARENAS; a++) b->size[a] = pk.top[a];
    else
        b->oom = true;
    free(order);
    for (int a = 0; a < PLAN_NARENAS; a++) {
        free(pk.live[a]);
        free(pk.occ[a].s);
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

