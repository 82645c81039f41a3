/* planner_alloc: step 5 of the planner: every arena allocated from the
 * buffers' lifetimes in the schedule, the dependencies address reuse needs,
 * and whether the arenas fit the target.
 *
 * Reuse is delayed where it would serialise queues that the schedule means
 * to overlap. A buffer's lifetime is in program order, but its last user
 * may run long after the next buffer's first one: a pinned staging slice
 * is last read by its H2D while the next slice's NVMe read could already
 * run, and a gradient is last read by its all-reduce or accumulation while
 * compute goes on. Packed tightly, the next buffer takes the same address
 * and waits for that last use (the address-reuse dependency), so the NVMe
 * reads wait for the copies one by one and compute waits for the peers'
 * collectives. So a range freed by a buffer whose last use is not on the
 * compute queue stays reserved while the next REUSE_DELAY buffers of its
 * arena are placed (for pinned staging, 1: double-buffering, two slices
 * in flight). When the delayed packing does not fit the target, the
 * arenas are packed tightly as before; either way the sizes are exact. */
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
    int after;  /* buffers of the arena placed since it died (while reserved) */
    bool hold;  /* its last use is off the compute queue: reserved for a while after it dies */
} Live;

/* how many buffers of an arena are placed before a range freed off the
 * compute queue may be reused (see the top of the file) */
static const int reuse_delay[PLAN_NARENAS] = {[ARENA_GPU] = 4, [ARENA_PINNED] = 1};

/* Each arena's packing state: the buffers live at the buffer being placed,
 * sorted by offset; the last occupant of every range; the floor above the
 * persistent homes and the high-water mark. */
typedef struct Packer {
    Live *live[PLAN_NARENAS];
    int nlive[PLAN_NARENAS], clive[PLAN_NARENAS];
    Occ occ[PLAN_NARENAS];
    uint64_t base[PLAN_NARENAS], top[PLAN_NARENAS];
    bool delay;  /* reserve freed ranges (reuse_delay); false: pack tightly */
} Packer;

static void place_home(Packer *pk, Buf *x) {
    int a = x->b.arena;
    uint64_t al = pl_arena_align[a];
    x->b.offset = (pk->top[a] + al - 1) / al * al;
    pk->top[a] = x->b.offset + x->b.bytes;
}

/* persistent homes first, at the bottom, for the whole step. On NVMe a
 * parameter's optimizer state (master, momentum, variance), its gradient
 * and then the parameter itself lie together, in the order the optimizer
 * reads and writes them, so the executor's batches take them as one
 * request (rtio_xfer_batch merges requests that continue each other).
 * false: out of memory. */
static bool place_persistent(B *b, Packer *pk) {
    static const int order[] = {TC_MASTER, TC_MOMENTUM, TC_VARIANCE, TC_GRAD};
    enum { NORDER = sizeof order / sizeof *order };
    int nt = b->g->ntensors;
    int *with = malloc(sizeof(int) * (size_t)(nt + 1) * NORDER); /* [param][k]: the home of its state k on NVMe, -1 */
    if (!with) return false;
    for (int k = 0; k < (nt + 1) * NORDER; k++) with[k] = -1;
    for (int i = 0; i < b->nbufs; i++) {
        const Buf *x = &b->bufs[i];
        int t = x->b.tensor;
        if (!(x->b.flags & PLAN_BUF_PERSISTENT) || x->b.arena != ARENA_NVME || t < 0) continue;
        int p = b->g->tensors[t].param;
        if (b->g->tensors[t].cls == TC_PARAM || p < 0 || b->home[p] < 0 || b->bufs[b->home[p]].b.arena != ARENA_NVME) continue;
        for (int k = 0; k < NORDER; k++)
            if ((int)b->g->tensors[t].cls == order[k]) with[p * NORDER + k] = i;
    }
    for (int i = 0; i < b->nbufs; i++) {
        Buf *x = &b->bufs[i];
        if (!(x->b.flags & PLAN_BUF_PERSISTENT)) continue;
        int t = x->b.tensor;
        bool nvme = x->b.arena == ARENA_NVME && t >= 0;
        if (nvme && b->g->tensors[t].cls != TC_PARAM) {
            int p = b->g->tensors[t].param;
            bool placed_with = false;
            for (int k = 0; p >= 0 && k < NORDER; k++) placed_with |= with[p * NORDER + k] == i;
            if (placed_with) continue; /* with its parameter */
        }
        if (nvme && b->g->tensors[t].cls == TC_PARAM)
            for (int k = 0; k < NORDER; k++)
                if (with[t * NORDER + k] >= 0) place_home(pk, &b->bufs[with[t * NORDER + k]]);
        place_home(pk, x);
    }
    free(with);
    for (int a = 0; a < PLAN_NARENAS; a++) pk->base[a] = (pk->top[a] + pl_arena_align[a] - 1) / pl_arena_align[a] * pl_arena_align[a];
    return true;
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
    /* retire what died before this buffer's first use, unless reserved */
    int w = 0;
    for (int j = 0; j < pk->nlive[a]; j++) {
        bool alive = live[j].last >= x->first;
        bool reserved = !alive && pk->delay && live[j].hold && live[j].after < reuse_delay[a];
        if (reserved) live[j].after++;
        if (alive || reserved) live[w++] = live[j];
    }
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
    bool hold = false;
    for (int q = 0; q < PLAN_NQUEUES; q++) hold |= q != Q_COMPUTE && x->lastq[q] == x->last && x->last >= 0;
    live[pos] = (Live){at, at + x->b.bytes, x->last, 0, hold};
    pk->nlive[a]++;
    if (at + x->b.bytes > pk->top[a]) pk->top[a] = at + x->b.bytes;
    return !x->b.bytes || occ_place(b, &pk->occ[a], at, at + x->b.bytes, i);
}

static bool pack(B *b, bool delay) {
    Packer pk;
    memset(&pk, 0, sizeof pk);
    pk.delay = delay;
    int *order = malloc(sizeof(int) * (size_t)(b->nbufs + 1));
    int m = -1;
    if (order && place_persistent(b, &pk)) m = first_use_order(b, order);
    bool ok = m >= 0;
    for (int k = 0; ok && k < m; k++) ok = place_one(b, &pk, order[k]);
    if (ok)
        for (int a = 0; a < PLAN_NARENAS; a++) b->size[a] = pk.top[a];
    free(order);
    for (int a = 0; a < PLAN_NARENAS; a++) {
        free(pk.live[a]);
        free(pk.occ[a].s);
    }
    return ok;
}

/* Delayed reuse when it fits, else tight packing; the address-reuse
 * dependencies of a packing that is dropped are dropped with it. */
bool pl_allocate(B *b) {
    size_t n = (size_t)b->nins + 1;
    int32_t(*depq)[PLAN_NQUEUES] = malloc(sizeof *depq * n);
    if (!depq) {
        b->oom = true;
        return false;
    }
    for (int i = 0; i < b->nins; i++) memcpy(depq[i], b->ins[i].depq, sizeof depq[i]);
    char why[256];
    bool ok = pack(b, true);
    if (ok && !pl_fits(b, why, sizeof why)) {
        for (int i = 0; i < b->nins; i++) memcpy(b->ins[i].depq, depq[i], sizeof depq[i]);
        ok = pack(b, false);
    }
    free(depq);
    if (!ok) b->oom = true;
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

