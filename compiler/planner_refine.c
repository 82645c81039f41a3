/* planner_refine: the refinement after the class search (step 3b of
 * docs/tuning.md). The search puts each class of state on one tier; the
 * refinement then moves the state of single parameters to a faster tier:
 *   - the optimizer state (master, momentum, variance) of a parameter, with
 *     its gradient, to the GPU, where GPU Adam steps it;
 *   - the optimizer state from NVMe to CPU memory (CPU Adam without swap);
 *   - a parameter's home to the GPU, or from NVMe to CPU memory.
 * A parameter's gradient and optimizer state always move together where
 * the executors need them together (GPU Adam reads all of them from GPU
 * memory). Each move kind takes the parameters in tensor order, as many at
 * once as the tier's arena has room for; a batch is kept when its build fits
 * and the cost model predicts a faster step, else halved. A class the plan
 * block pins is never moved, nor a parameter a `pin` names. */
#include "planner_impl.h"
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include "cost.h"

enum { MAX_BUILDS_PER_MOVE = 6 };

typedef enum MoveKind { MV_OPT_GPU, MV_OPT_CPU, MV_PARAM_GPU, MV_PARAM_CPU, MV_COUNT } MoveKind;

typedef struct Refine {
    PlanBuilder *b;
    Arena *a;
    PlText *ex;
    Plan **plan;
    double *time;
    int *builds;
    uint64_t *obytes, *gbytes;     /* per parameter: its optimizer state's and its gradient's bytes per rank */
    int *cand;                     /* the parameters a move kind may move, in tensor order */
    int8_t *saved;                 /* a batch's tiers before the move, to undo it */
} Refine;

static const char *const move_what[MV_COUNT] = {"optimizer state and gradients", "optimizer state", "parameters",
                                                "parameters"};
static const int move_to[MV_COUNT] = {TIER_GPU, TIER_CPU, TIER_GPU, TIER_CPU};
static const int arena_of_tier[PLAN_NTIERS] = {ARENA_GPU, ARENA_CPU, ARENA_NVME};

/* Whether move kind k can shorten the step much: the queue it relieves (CPU
 * Adam, NVMe swap, host-to-device fetches) must be busy for at least a
 * tenth of the pass; else its builds are not worth their planning time. */
static bool move_worth(MoveKind k, const CostResult *cur) {
    double q;
    switch (k) {
    case MV_OPT_GPU: q = fmax(cur->busy[Q_CPU], cur->busy[Q_NVME]); break;
    case MV_PARAM_GPU: q = fmax(cur->busy[Q_H2D], cur->busy[Q_NVME]); break;
    default: q = cur->busy[Q_NVME]; break;
    }
    return q >= 0.1 * cur->pass_time;
}

/* Whether the plan block lets move kind k move anything. */
static bool move_allowed(const PlanBuilder *b, MoveKind k) {
    const PlannerOptions *o = b->o;
    switch (k) {
    case MV_OPT_GPU: return o->tier[PC_OPTIMIZER] < 0 && o->tier[PC_GRADS] < 0;
    case MV_OPT_CPU: return o->tier[PC_OPTIMIZER] < 0;
    default: return o->tier[PC_PARAMS] < 0;
    }
}

/* The tier move kind k moves parameter p from (-1 when it does not apply). */
static int move_from(const Refine *R, MoveKind k, int p) {
    const PlanBuilder *b = R->b;
    if (b->name_pinned && b->name_pinned[p]) return -1;
    bool trained = R->obytes[p] > 0;
    int ot = pl_opt_tier(b, p), pt = pl_param_tier(b, p);
    switch (k) {
    case MV_OPT_GPU: return trained && ot != TIER_GPU ? ot : -1;
    case MV_OPT_CPU: return trained && ot == TIER_NVME ? ot : -1;
    case MV_PARAM_GPU: return pt != TIER_GPU ? pt : -1;
    default: return pt == TIER_NVME ? pt : -1;
    }
}

/* Bytes per rank the move of p adds to the destination tier. */
static uint64_t move_bytes(const Refine *R, MoveKind k, int p) {
    const PlanBuilder *b = R->b;
    if (k == MV_OPT_GPU) return R->obytes[p] + (pl_grad_tier(b, p) != TIER_GPU ? R->gbytes[p] : 0);
    if (k == MV_OPT_CPU) return R->obytes[p];
    return pl_shard_bytes(b, p);
}

static void set_tier(Refine *R, MoveKind k, int p, int tier) {
    if (k == MV_OPT_GPU || k == MV_OPT_CPU) R->b->otier[p] = (int8_t)tier;
    else R->b->ptier[p] = (int8_t)tier;
}

static int8_t get_tier(const Refine *R, MoveKind k, int p) {
    return k == MV_OPT_GPU || k == MV_OPT_CPU ? R->b->otier[p] : R->b->ptier[p];
}

/* Per-parameter byte counts and the override tables; false when out of memory. */
static bool refine_setup(Refine *R) {
    PlanBuilder *b = R->b;
    const Graph *g = b->g;
    int nt = g->ntensors;
    R->obytes = ARENA_NEWN(R->a, uint64_t, nt + 1);
    R->gbytes = ARENA_NEWN(R->a, uint64_t, nt + 1);
    R->cand = ARENA_NEWN(R->a, int, nt + 1);
    R->saved = ARENA_NEWN(R->a, int8_t, nt + 1);
    if (!b->ptier) {
        b->ptier = ARENA_NEWN(R->a, int8_t, nt + 1);
        b->otier = ARENA_NEWN(R->a, int8_t, nt + 1);
        if (b->ptier) memset(b->ptier, -1, (size_t)nt);
        if (b->otier) memset(b->otier, -1, (size_t)nt);
    }
    if (!R->obytes || !R->gbytes || !R->cand || !R->saved || !b->ptier || !b->otier) return false;
    for (int i = 0; i < nt; i++) {
        const GTensor *t = &g->tensors[i];
        if (t->param < 0 || t->param >= nt) continue;
        if (t->cls == TC_GRAD) R->gbytes[t->param] += pl_shard_bytes(b, i);
        else if (t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE) R->obytes[t->param] += pl_shard_bytes(b, i);
    }
    return true;
}

/* Builds and costs the current tiers: 1 kept (the fastest so far), 0 not
 * (why says so), -1 failed. */
static int try_build(Refine *R, CostResult *cr, char *why, size_t n) {
    PlanBuilder *b = R->b;
    if (!pl_build(b, R->a)) return -1;
    ++*R->builds;
    if (!pl_fits(b, why, n)) return 0;
    Plan *p = pl_emit_plan(b);
    if (!p || !cost_simulate(p, cr)) {
        plan_free(p);
        b->oom = true;
        return -1;
    }
    if (!(cr->step_time < *R->time * 0.999)) {
        snprintf(why, n, "%.4g s/step, no faster", cr->step_time);
        plan_free(p);
        cost_free(cr);
        return 0;
    }
    plan_free(*R->plan);
    *R->plan = p;
    return 1;
}

/* The queues whose busy time changed most, for the reason a move was kept. */
static void busy_change(const CostResult *before, const CostResult *after, char *buf, size_t n) {
    int q1 = -1, q2 = -1;
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        double d = fabs(after->busy[q] - before->busy[q]);
        if (q1 < 0 || d > fabs(after->busy[q1] - before->busy[q1])) {
            q2 = q1;
            q1 = q;
        } else if (q2 < 0 || d > fabs(after->busy[q2] - before->busy[q2])) {
            q2 = q;
        }
    }
    snprintf(buf, n, "%s busy %.4g -> %.4g s, %s %.4g -> %.4g s", plan_queue_names[q1], before->busy[q1], after->busy[q1],
             plan_queue_names[q2], before->busy[q2], after->busy[q2]);
}

/* The batch of the next parameters whose state fits in free bytes. */
static int batch_for(const Refine *R, MoveKind k, int pos, int nc, uint64_t free, uint64_t *bytes) {
    int m = 0;
    *bytes = 0;
    while (pos + m < nc) {
        uint64_t x = move_bytes(R, k, R->cand[pos + m]);
        if (*bytes + x > free) break;
        *bytes += x;
        m++;
    }
    return m;
}

/* One move kind over its candidates; false when a build failed. */
static bool refine_kind(Refine *R, MoveKind k, CostResult *cur) {
    PlanBuilder *b = R->b;
    int nc = 0;
    for (int p = 0; p < b->g->ntensors; p++)
        if (b->g->tensors[p].cls == TC_PARAM && move_from(R, k, p) >= 0) R->cand[nc++] = p;
    int arena = arena_of_tier[move_to[k]];
    int pos = 0, m = -1, tries = 0;
    char why[256], s1[32], s2[32], reason[160];
    while (pos < nc && tries < MAX_BUILDS_PER_MOVE) {
        const PlanArena *pa = (*R->plan)->arenas;
        uint64_t used = pa[arena].size + (arena == ARENA_CPU ? pa[ARENA_PINNED].size : 0), cap = b->cap[arena], bytes;
        if (used >= cap) break;
        int fit = batch_for(R, k, pos, nc, cap - used, &bytes);
        if (!fit) break;
        if (m < 0 || m > fit) m = fit;
        bytes = 0;
        for (int j = 0; j < m; j++) bytes += move_bytes(R, k, R->cand[pos + j]);
        int from = move_from(R, k, R->cand[pos]);
        for (int j = 0; j < m; j++) {
            R->saved[j] = get_tier(R, k, R->cand[pos + j]);
            set_tier(R, k, R->cand[pos + j], move_to[k]);
        }
        tries++;
        double before = *R->time;
        CostResult cr;
        int r = try_build(R, &cr, why, sizeof why);
        if (r < 0) return false;
        if (r == 0) {
            for (int j = 0; j < m; j++) set_tier(R, k, R->cand[pos + j], R->saved[j]);
            pl_say(R->ex, "  %s of %d parameters (%s) %s -> %s (%s): not kept: %s", move_what[k], m, pl_tname(b, R->cand[pos]),
                   plan_tier_names[from], plan_tier_names[move_to[k]], plan_bytes_str(bytes, s1, sizeof s1), why);
            if (m == 1) break;
            m /= 2;
            continue;
        }
        *R->time = cr.step_time;
        busy_change(cur, &cr, reason, sizeof reason);
        pl_say(R->ex, "  %s of %d parameters (%s ...) %s -> %s (%s): %.4g -> %.4g s/step, kept: %s; %s peak %s", move_what[k], m,
               pl_tname(b, R->cand[pos]), plan_tier_names[from], plan_tier_names[move_to[k]], plan_bytes_str(bytes, s1, sizeof s1),
               before, cr.step_time, reason, plan_arena_names[arena], plan_bytes_str((*R->plan)->arenas[arena].size, s2, sizeof s2));
        cost_free(cur);
        *cur = cr;
        pos += m;
    }
    return true;
}

bool pl_refine(PlanBuilder *b, Arena *a, PlText *ex, Plan **plan, double *time, int *builds, const CostResult *known) {
    Refine R = {.b = b, .a = a, .ex = ex, .plan = plan, .time = time, .builds = builds};
    if (!refine_setup(&R)) {
        b->oom = true;
        return false;
    }
    CostResult cur;
    if (known) {
        cur = *known; /* the times per instruction are not read here */
        cur.start = cur.end = cur.wait = NULL;
    } else if (!cost_simulate(*plan, &cur)) {
        b->oom = true;
        return false;
    }
    double t0 = *time;
    pl_say(ex, "refine: %.4g s/step before; moves of single parameters' state to a faster tier, kept when the step is faster:", t0);
    bool ok = true;
    for (int k = 0; k < MV_COUNT && ok; k++) {
        if (move_to[k] == TIER_GPU || b->cap[ARENA_NVME]) { /* NVMe -> CPU moves need NVMe */
            if (move_allowed(b, (MoveKind)k) && move_worth((MoveKind)k, &cur)) ok = refine_kind(&R, (MoveKind)k, &cur);
        }
    }
    cost_free(&cur);
    if (ok) pl_say(ex, "refine: %.4g s/step after (%.4g before)", *time, t0);
    return ok;
}
