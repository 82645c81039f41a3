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
 * arenas are packed tightly as before; either way the sizes are exact,
 * except for a build that only has to say whether it fits (fits_only):
 * its tight packing stops once the GPU arena does not. */
#include "planner_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>

/* The packing of one arena keeps what it asks about in order, so that a
 * placement touches only the few entries it changes: the live ranges
 * sorted by offset, each with the free bytes below it; the live buffers by
 * last use in a heap (only the dead are retired); the ranges reserved after
 * their buffer died, in the order their reservation ends; and the last
 * occupant of every range, sorted by offset (the occupants a range
 * overlaps lie together). The lowest gap that fits is below the first live
 * range whose free bytes are enough: live ranges are disjoint and start
 * aligned, so this is the place a scan of the whole list finds, and the
 * placements are those of that scan (the plans are byte-identical). A
 * buffer of no bytes lies at the floor (the scan stops at the first live
 * range, which starts at or above it) and occupies nothing, so it is in
 * none of the structures. */
typedef struct Extent { /* a live buffer's range */
    uint64_t lo, hi;
    uint64_t gap; /* free bytes from the aligned end of the extent below (or the floor) up to lo */
} Extent;

typedef struct Dying { /* a live range by the last instruction that uses its buffer */
    int32_t last;
    bool hold;         /* that use is off the compute queue: reserved for a while after it */
    uint64_t lo;
} Dying;

typedef struct Held { /* a dead range reserved until the arena has placed `until` buffers */
    uint64_t lo;
    int64_t until;
} Held;

typedef struct Seg { /* the last occupant of [lo, hi) */
    uint64_t lo, hi;
    int buf;
} Seg;

/* how many buffers of an arena are placed before a range freed off the
 * compute queue may be reused (see the top of the file) */
static const int reuse_delay[PLAN_NARENAS] = {[ARENA_GPU] = 4, [ARENA_PINNED] = 1};

/* One arena's packing state: the structures above, the floor above the
 * persistent homes, the high-water mark and how many buffers it placed. */
typedef struct ArenaPack {
    Extent *live;
    int nlive, clive;
    Dying *dying;
    int ndying, cdying;
    Held *held;
    int held0, nheld, cheld; /* held[held0 .. nheld) are still reserved */
    Seg *occ;
    int nocc, cocc;
    int64_t placed;
    uint64_t base, top;
    bool sealed;  /* the optimizer's buffers began: nothing below top is theirs (seal) */
} ArenaPack;

typedef struct Reuse { /* an address-reuse dependency: instruction i waits for j, on queue q */
    int32_t i, j, q;
} Reuse;

/* The packing of some arenas: the GPU arena is packed beside the others
 * (pack), each part in a thread of its own. Neither writes an instruction:
 * the dependencies address reuse needs are listed and added once the
 * packing is kept, so a packing that is dropped leaves none behind. */
typedef struct Packer {
    ArenaPack ar[PLAN_NARENAS];
    bool delay; /* reserve freed ranges (reuse_delay); false: pack tightly */
    Reuse *deps;
    int ndeps, cdeps;
} Packer;

static uint64_t align_up(uint64_t v, uint64_t al) { return (v + al - 1) / al * al; }

/* the index of the live extent that starts at lo (there is one) */
static int live_at(const ArenaPack *ap, uint64_t lo) {
    int l = 0, h = ap->nlive - 1;
    while (l < h) {
        int m = l + (h - l) / 2;
        if (ap->live[m].lo < lo) l = m + 1;
        else h = m;
    }
    return l;
}

/* the extent at lo leaves; its free bytes join those of the one above */
static void live_remove(ArenaPack *ap, uint64_t lo) {
    int k = live_at(ap, lo);
    Extent *s = ap->live;
    if (k + 1 < ap->nlive) s[k + 1].gap = s[k + 1].lo - (s[k].lo - s[k].gap);
    memmove(&s[k], &s[k + 1], sizeof(Extent) * (size_t)(ap->nlive - k - 1));
    ap->nlive--;
}

static bool dying_push(ArenaPack *ap, Dying d) {
    if (!pl_grow((void **)&ap->dying, &ap->cdying, ap->ndying + 1, sizeof(Dying))) return false;
    Dying *h = ap->dying;
    int k = ap->ndying++;
    while (k > 0 && h[(k - 1) / 2].last > d.last) {
        h[k] = h[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    h[k] = d;
    return true;
}

static Dying dying_pop(ArenaPack *ap) {
    Dying *h = ap->dying, top = h[0], d = h[--ap->ndying];
    int n = ap->ndying, k = 0;
    for (;;) {
        int c = 2 * k + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1].last < h[c].last) c++;
        if (h[c].last >= d.last) break;
        h[k] = h[c];
        k = c;
    }
    if (n) h[k] = d;
    return top;
}

/* retire what died before first (a use at instruction first), unless
 * reserved, and what was reserved long enough; false: out of memory. In a
 * sealed arena what the step used before the optimizer stays occupied. */
static bool retire(ArenaPack *ap, int a, int first, bool delay, int opt_begin) {
    while (ap->ndying && ap->dying[0].last < first) {
        Dying d = dying_pop(ap);
        if (ap->sealed && d.last < opt_begin) continue;
        if (delay && d.hold && reuse_delay[a] > 0) {
            if (ap->held0 == ap->nheld) ap->held0 = ap->nheld = 0;
            if (ap->held0 > ap->cheld / 2) { /* reuse the front the FIFO has passed */
                memmove(ap->held, &ap->held[ap->held0], sizeof(Held) * (size_t)(ap->nheld - ap->held0));
                ap->nheld -= ap->held0;
                ap->held0 = 0;
            }
            if (!pl_grow((void **)&ap->held, &ap->cheld, ap->nheld + 1, sizeof(Held))) return false;
            ap->held[ap->nheld++] = (Held){d.lo, ap->placed + reuse_delay[a]};
        } else {
            live_remove(ap, d.lo);
        }
    }
    while (ap->held0 < ap->nheld && ap->held[ap->held0].until <= ap->placed) live_remove(ap, ap->held[ap->held0++].lo);
    return true;
}

/* Instruction i is to wait for j, on queue q (pl_dep_on_queue once the
 * packing is kept); listed unless i waits for j or later already. False:
 * out of memory. */
static bool reuse_dep(const PlanBuilder *b, Packer *pk, int i, int j, int q) {
    if (j < 0 || j >= i || q == b->ins[i].s.queue || b->ins[i].depq[q] >= j) return true;
    if (!pl_grow((void **)&pk->deps, &pk->cdeps, pk->ndeps + 1, sizeof(Reuse))) return false;
    pk->deps[pk->ndeps++] = (Reuse){i, j, q};
    return true;
}

/* buf takes [lo, hi): every previous occupant of the range must be done
 * before buf's first use; false: out of memory */
static bool occ_place(PlanBuilder *b, Packer *pk, ArenaPack *ap, uint64_t lo, uint64_t hi, int buf) {
    int first = b->bufs[buf].first;
    Seg *s = ap->occ;
    int l = 0, h = ap->nocc; /* the first that ends above lo */
    while (l < h) {
        int m = l + (h - l) / 2;
        if (s[m].hi <= lo) l = m + 1;
        else h = m;
    }
    int j = l;
    for (; j < ap->nocc && s[j].lo < hi; j++) {
        const PlanBuf *prev = &b->bufs[s[j].buf];
        for (int q = 0; q < PLAN_NQUEUES && first >= 0; q++)
            if (!reuse_dep(b, pk, first, prev->lastq[q], q)) return false;
    }
    Seg put[3];
    int n = 0;
    if (j > l && s[l].lo < lo) put[n++] = (Seg){s[l].lo, lo, s[l].buf};
    put[n++] = (Seg){lo, hi, buf};
    if (j > l && s[j - 1].hi > hi) put[n++] = (Seg){hi, s[j - 1].hi, s[j - 1].buf};
    if (!pl_grow((void **)&ap->occ, &ap->cocc, ap->nocc + 3, sizeof(Seg))) return false;
    s = ap->occ;
    memmove(&s[l + n], &s[j], sizeof(Seg) * (size_t)(ap->nocc - j));
    /* one to three records: stored one by one (a copy of a variable
     * length is a rep movs, slow to start, once per buffer placed) */
    s[l] = put[0];
    if (n > 1) s[l + 1] = put[1];
    if (n > 2) s[l + 2] = put[2];
    ap->nocc += n - (j - l);
    return true;
}

static void place_home(Packer *pk, PlanBuf *x) {
    ArenaPack *ap = &pk->ar[x->b.arena];
    x->b.offset = align_up(ap->top, pl_arena_align[x->b.arena]);
    ap->top = x->b.offset + x->b.bytes;
}

/* persistent homes first, at the bottom, for the whole step. On NVMe a
 * parameter's optimizer state (master, momentum, variance), its gradient
 * and then the parameter itself lie together, in the order the optimizer
 * reads and writes them, so the transfers the nvme queue keeps in flight
 * together read neighbouring blocks of the swap file.
 * false: out of memory. */
static bool place_persistent(PlanBuilder *b, Packer *pk) {
    static const int order[] = {TC_MASTER, TC_MOMENTUM, TC_VARIANCE, TC_GRAD};
    enum { NORDER = sizeof order / sizeof *order };
    int nt = b->g->ntensors;
    int *with = malloc(sizeof(int) * (size_t)(nt + 1) * NORDER); /* [param][k]: the home of its state k on NVMe, -1 */
    if (!with) return false;
    for (int k = 0; k < (nt + 1) * NORDER; k++) with[k] = -1;
    for (int i = 0; i < b->persist_end; i++) {
        const PlanBuf *x = &b->bufs[i];
        int t = x->b.tensor;
        if (!(x->b.flags & PLAN_BUF_PERSISTENT) || x->b.arena != ARENA_NVME || t < 0) continue;
        int p = b->g->tensors[t].param;
        if (b->g->tensors[t].cls == TC_PARAM || p < 0 || b->home[p] < 0 || b->bufs[b->home[p]].b.arena != ARENA_NVME) continue;
        for (int k = 0; k < NORDER; k++)
            if ((int)b->g->tensors[t].cls == order[k]) with[p * NORDER + k] = i;
    }
    for (int i = 0; i < b->persist_end; i++) {
        PlanBuf *x = &b->bufs[i];
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
    for (int a = 0; a < PLAN_NARENAS; a++) pk->ar[a].base = align_up(pk->ar[a].top, pl_arena_align[a]);
    return true;
}

/* the part of the packing arena a is in: the GPU's, or the rest */
static int part_of(int a) { return a == ARENA_GPU ? 0 : 1; }

/* the rest in order of first use, the GPU part's (part_of) before the
 * other's: a counting sort by part and first instruction, reading each
 * buffer once in index order (in order of first use the buffers are read
 * all over the table, a cache miss each); how many, with the GPU part's
 * count in *m0, or -1 when out of memory */
static int first_use_order(const PlanBuilder *b, int *order, int *m0) {
    int n = b->nbufs, m = 0, nins = b->nins;
    int *cnt = calloc(2 * ((size_t)nins + 1) + 1, sizeof *cnt); /* part 0's firsts, then part 1's */
    if (!cnt) return -1;
    for (int i = 0; i < n; i++) {
        const PlanBuf *x = &b->bufs[i];
        if (!(x->b.flags & PLAN_BUF_PERSISTENT) && x->first >= 0) cnt[part_of(x->b.arena) * (nins + 1) + x->first + 1]++, m++;
    }
    for (int k = 0; k < 2 * (nins + 1); k++) cnt[k + 1] += cnt[k];
    *m0 = cnt[nins + 1];
    for (int i = 0; i < n; i++) {
        const PlanBuf *x = &b->bufs[i];
        if (!(x->b.flags & PLAN_BUF_PERSISTENT) && x->first >= 0) order[cnt[part_of(x->b.arena) * (nins + 1) + x->first]++] = i;
    }
    free(cnt);
    return m;
}

/* The optimizer's pinned staging goes above everything the step used
 * before it: its reads of NVMe state need nothing from the backward, but
 * in a range the backward's copies used last they would wait for those
 * copies, and the nvme queue starts in order, so that one read would hold
 * every later one back until the backward ends. So when the first of the
 * optimizer's buffers is placed, every free gap below the top is filled
 * (the gaps' extents never die), the reserved ranges stay reserved, and
 * what is still live then stays occupied when it dies (retire). The arena
 * grows by the optimizer's staging; where that does not fit, pl_allocate
 * packs tightly. false: out of memory. */
static bool seal(ArenaPack *ap, uint64_t al) {
    int n = ap->nlive, gaps = 0;
    for (int k = 0; k < n; k++) gaps += ap->live[k].gap > 0;
    if (!pl_grow((void **)&ap->live, &ap->clive, n + gaps + 1, sizeof(Extent))) return false;
    Extent *s = ap->live;
    for (int k = n - 1, w = n + gaps - 1; k >= 0; k--) { /* from the top down, each extent and the filled gap below it */
        Extent e = s[k];
        s[w--] = (Extent){e.lo, e.hi, 0};
        if (e.gap) s[w--] = (Extent){e.lo - e.gap, e.lo, 0};
    }
    n += gaps;
    uint64_t end = n ? align_up(s[n - 1].hi, al) : ap->base;
    if (ap->top > end) s[n++] = (Extent){end, ap->top, 0}; /* the free space up to the top */
    ap->nlive = n;
    ap->held0 = ap->nheld; /* reserved for good */
    ap->sealed = true;
    return true;
}

/* Buffer i at the lowest gap of its arena that nothing live from its first
 * use on occupies; false when out of memory. */
static bool place_one(PlanBuilder *b, Packer *pk, int i) {
    PlanBuf *x = &b->bufs[i];
    int a = x->b.arena;
    ArenaPack *ap = &pk->ar[a];
    uint64_t al = pl_arena_align[a], bytes = x->b.bytes;
    if (!retire(ap, a, x->first, pk->delay, (int)b->opt_begin)) return false;
    if (pk->delay && a == ARENA_PINNED && !ap->sealed && x->first >= (int)b->opt_begin && !seal(ap, al)) return false;
    ap->placed++;
    uint64_t at = ap->base;
    if (bytes) {
        Extent *s = ap->live;
        int n = ap->nlive, k = 0;
        while (k < n && s[k].gap < bytes) k++;
        if (k < n) at = s[k].lo - s[k].gap;
        else if (n) at = align_up(s[n - 1].hi, al);
        if (!pl_grow((void **)&ap->live, &ap->clive, n + 1, sizeof(Extent))) return false;
        s = ap->live;
        memmove(&s[k + 1], &s[k], sizeof(Extent) * (size_t)(n - k));
        s[k] = (Extent){at, at + bytes, 0};
        if (k + 1 <= n) s[k + 1].gap = s[k + 1].lo - align_up(at + bytes, al);
        ap->nlive++;
        bool hold = false;
        for (int q = 0; q < PLAN_NQUEUES; q++) hold |= q != Q_COMPUTE && x->lastq[q] == x->last && x->last >= 0;
        if (!dying_push(ap, (Dying){x->last, hold, at})) return false;
    }
    x->b.offset = at;
    if (at + bytes > ap->top) ap->top = at + bytes;
    return !bytes || occ_place(b, pk, ap, at, at + bytes, i);
}

/* The first arena (by PlanArena index) whose bytes per rank, size[a]
 * (pinned and pageable CPU memory together), exceed the target's, or -1. */
static int first_over(const PlanBuilder *b, const uint64_t size[PLAN_NARENAS]) {
    for (int a = 0; a < PLAN_NARENAS; a++) {
        bool cpu = a == ARENA_PINNED || a == ARENA_CPU;
        uint64_t cap = cpu ? b->cap[ARENA_CPU] : b->cap[a];
        uint64_t use = cpu ? size[ARENA_PINNED] + size[ARENA_CPU] : size[a];
        if (use > cap) return a;
    }
    return -1;
}

typedef enum PackResult { PACK_OOM, PACK_PLACED, PACK_OVER, PACK_STOPPED } PackResult;

/* One part's m buffers of order placed, after the homes (pk holds their
 * arenas' floors). With pk->delay it stops as soon as one of its arenas
 * outgrows the target (PACK_OVER; the arenas only grow, so the packing
 * could not fit), or the other part has (PACK_STOPPED, *stop). Packing
 * tightly for b->fits_only it stops likewise once the GPU arena outgrows
 * the target: that arena is then the first that does not fit (pl_fits),
 * whatever the others need. */
static PackResult pack_part(PlanBuilder *b, Packer *pk, int part, const int *order, int m, atomic_bool *stop) {
    bool watch = pk->delay || (b->fits_only && part == part_of(ARENA_GPU)), yield = pk->delay || b->fits_only;
    for (int k = 0; k <= m; k++) {
        /* the buffers ahead and their first instructions, fetched early:
         * one buffer is read a few hundred bytes from the last, and each a
         * cache miss otherwise (the instruction's address is read from a
         * buffer fetched four places before) */
        if (k + 8 < m) {
            const char *x = (const char *)&b->bufs[order[k + 8]];
            __builtin_prefetch(x);
            __builtin_prefetch(x + sizeof(PlanBuf) - 1);
        }
        if (k + 4 < m && b->bufs[order[k + 4]].first >= 0) {
            const char *x = (const char *)&b->ins[b->bufs[order[k + 4]].first];
            __builtin_prefetch(x);
            __builtin_prefetch(x + sizeof(Ins) - 1);
        }
        if (k < m && !place_one(b, pk, order[k])) {
            atomic_store(stop, true);
            return PACK_OOM;
        }
        if (yield && atomic_load_explicit(stop, memory_order_relaxed)) return PACK_STOPPED;
        if (!watch) continue;
        uint64_t top[PLAN_NARENAS];
        for (int a = 0; a < PLAN_NARENAS; a++) top[a] = part_of(a) == part ? pk->ar[a].top : 0;
        if (first_over(b, top) >= 0) {
            atomic_store(stop, true);
            return PACK_OVER;
        }
    }
    return PACK_PLACED;
}

/* Every buffer placed: the persistent homes, then the m buffers of order
 * (first_use_order: the GPU part's m0 first), the GPU's beside the
 * others' (pack_part); then the
 * arenas' sizes set and the address-reuse dependencies added. With delay,
 * PACK_OVER as soon as an arena outgrows the target (sizes unset, nothing
 * added): pl_allocate packs tightly instead. */
static PackResult pack(PlanBuilder *b, bool delay, const int *order, int m, int m0) {
    Packer pk[2];
    memset(pk, 0, sizeof pk);
    pk[0].delay = pk[1].delay = delay;
    if (!place_persistent(b, &pk[0])) return PACK_OOM;
    for (int a = 0; a < PLAN_NARENAS; a++) pk[1].ar[a] = pk[0].ar[a]; /* the floors above the homes (no structures yet) */
    atomic_bool stop;
    atomic_init(&stop, false);
    PackResult r[2];
#ifdef _OPENMP
#pragma omp parallel for num_threads(2) schedule(static, 1)
#endif
    for (int part = 0; part < 2; part++)
        r[part] = part == 0 ? pack_part(b, &pk[0], 0, order, m0, &stop) : pack_part(b, &pk[1], 1, order + m0, m - m0, &stop);
    PackResult res = r[0] == PACK_OOM || r[1] == PACK_OOM ? PACK_OOM
                     : r[0] == PACK_OVER || r[1] == PACK_OVER ? PACK_OVER : PACK_PLACED;
    if (res == PACK_OVER && !delay) { /* b->fits_only: the GPU arena does not fit, by at least this much */
        for (int a = 0; a < PLAN_NARENAS; a++) b->size[a] = pk[part_of(a)].ar[a].top;
        b->size_partial = true;
    }
    if (res == PACK_PLACED) {
        for (int a = 0; a < PLAN_NARENAS; a++) b->size[a] = pk[part_of(a)].ar[a].top;
        for (int p = 0; p < 2; p++)
            for (int k = 0; k < pk[p].ndeps; k++) pl_dep_on_queue(b, pk[p].deps[k].i, pk[p].deps[k].j, pk[p].deps[k].q);
    }
    for (int p = 0; p < 2; p++) {
        for (int a = 0; a < PLAN_NARENAS; a++) {
            free(pk[p].ar[a].live);
            free(pk[p].ar[a].dying);
            free(pk[p].ar[a].held);
            free(pk[p].ar[a].occ);
        }
        free(pk[p].deps);
    }
    return res;
}

/* Delayed reuse when it fits, else tight packing; the address-reuse
 * dependencies of a packing that is dropped are dropped with it (pack). */
bool pl_allocate(PlanBuilder *b) {
    int *order = malloc(sizeof(int) * (size_t)(b->nbufs + 1));
    int m0 = 0, m = order ? first_use_order(b, order, &m0) : -1;
    if (m < 0) {
        free(order);
        b->oom = true;
        return false;
    }
    PackResult r = pack(b, true, order, m, m0);
    if (r == PACK_OVER) r = pack(b, false, order, m, m0);
    bool ok = r == PACK_PLACED || (r == PACK_OVER && b->size_partial);
    free(order);
    if (!ok) b->oom = true;
    return ok;
}


bool pl_fits(const PlanBuilder *b, char *why, size_t n) {
    char u[32], c[32];
    int a = first_over(b, b->size);
    if (a < 0) return true;
    bool cpu = a == ARENA_PINNED || a == ARENA_CPU;
    uint64_t cap = cpu ? b->cap[ARENA_CPU] : b->cap[a];
    uint64_t use = cpu ? b->size[ARENA_PINNED] + b->size[ARENA_CPU] : b->size[a];
    snprintf(why, n, "%s needs %s%s per rank, has %s", cpu ? "CPU memory" : plan_arena_names[a], b->size_partial ? "more than " : "",
             plan_bytes_str(use, u, sizeof u), plan_bytes_str(cap, c, sizeof c));
    return false;
}

