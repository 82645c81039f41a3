#include "calibrate.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"
#include "probe.h"

typedef struct Call {
    int family;
    double flops, secs;
} Call;

static int by_call(const void *a, const void *b) {
    const Call *x = a, *y = b;
    if (x->family != y->family) return x->family < y->family ? -1 : 1;
    return (x->flops > y->flops) - (x->flops < y->flops);
}

/* The collectives of a run of more than one rank, each from start to end,
 * fitted to the cost model's ring (cost.c: f steps of latency and
 * f (R-1)/R of the bytes over the link, f = 2 for an all-reduce). Keeps
 * the target's figures where the run has no two sizes to fit. false: out
 * of memory. */
static bool calibrate_net(const Plan *p, const Timeline *meas, PlanTarget *out, CalibrateInfo *info) {
    int R = p->ranks;
    if (R <= 1) return true;
    ProbeSample *smp = malloc(sizeof *smp * (p->ninstrs ? p->ninstrs : 1));
    if (!smp) return false;
    int n = 0;
    bool two_sizes = false;
    for (uint32_t i = 0; i < p->ninstrs && i < meas->n; i++) {
        const PlanInstr *s = &p->instrs[i];
        if ((s->op != PI_ALLGATHER && s->op != PI_REDUCE_SCATTER && s->op != PI_ALLREDUCE) || !meas->have[i]) continue;
        double secs = meas->end[i] - meas->start[i], f = s->op == PI_ALLREDUCE ? 2 : 1;
        if (!(secs > 0) || !s->bytes) continue;
        smp[n] = (ProbeSample){f * (R - 1), f * (R - 1) / R * (double)s->bytes, secs};
        two_sizes |= n > 0 && smp[n].bytes != smp[0].bytes;
        n++;
    }
    info->collectives = n;
    ProbeFit fit;
    if (two_sizes && probe_fit(smp, n, &fit) == 0 && isfinite(fit.bandwidth) && fit.bandwidth > 0) {
        out->net_latency = fit.latency > 1e-9 ? fit.latency : 1e-9; /* 0 is "not given" in a target: 10 us */
        if (p->target.nodes > 1) out->net_inter = fit.bandwidth;
        else {
            if (out->net_inter == out->net_bandwidth) out->net_inter = fit.bandwidth;
            out->net_bandwidth = fit.bandwidth;
        }
        info->net = true;
    }
    free(smp);
    return true;
}

bool plan_calibrate(const Plan *p, const Timeline *meas, PlanTarget *out, CalibrateInfo *info) {
    memset(info, 0, sizeof *info);
    *out = p->target;
    double launch = isfinite(p->target.kernel_latency) && p->target.kernel_latency > 0 ? p->target.kernel_latency : 0;
    Call *c = malloc(sizeof *c * (p->ninstrs ? p->ninstrs : 1));
    if (!c) return false;
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->ninstrs && i < meas->n; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op != PI_KERNEL || !meas->have[i] || s->arg < 0 || (uint32_t)s->arg >= p->nops || !(s->flops > 0)) continue;
        double busy = timeline_busy(meas, i);
        if (!(busy > 0)) continue;
        /* the cost model adds the launch to a timed call; a call shorter than it is mostly launch */
        double secs = busy - launch > busy * 0.01 ? busy - launch : busy * 0.01;
        c[n++] = (Call){(int)cost_family(p->ops[s->arg].prim), s->flops, secs};
    }
    info->kernels = (int)n;
    if (!n) {
        free(c);
        return false;
    }
    qsort(c, n, sizeof *c, by_call);
    /* one call per (family, flops): the mean of its kernels (what the step's
     * sum of them expects, interruptions included), in place at the front */
    uint32_t g = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t j = i;
        double sum = 0;
        while (j < n && c[j].family == c[i].family && c[j].flops == c[i].flops) sum += c[j++].secs;
        c[g++] = (Call){c[i].family, c[i].flops, sum / (j - i)};
        i = j;
    }
    int groups[PLAN_NFAMILIES] = {0};
    for (uint32_t i = 0; i < g; i++) groups[c[i].family]++;
    /* the target's calls of the families the run did not time stay */
    out->nkernel_points = 0;
    for (int i = 0; i < p->target.nkernel_points && i < PLAN_MAX_KERNEL_POINTS; i++) {
        const PlanKernelPoint *q = &p->target.kernel_points[i];
        if (q->family >= 0 && q->family < PLAN_NFAMILIES && !groups[q->family]) out->kernel_points[out->nkernel_points++] = *q;
    }
    /* the run's, each family thinned evenly (its smallest and largest kept) if they would not fit */
    int room = PLAN_MAX_KERNEL_POINTS - out->nkernel_points, timed = 0;
    for (int f = 0; f < PLAN_NFAMILIES; f++) timed += groups[f] > 0;
    if (room < timed) { /* not even one call each: the run's alone */
        out->nkernel_points = 0;
        room = PLAN_MAX_KERNEL_POINTS;
    }
    int keep[PLAN_NFAMILIES], kept = 0;
    for (int f = 0; f < PLAN_NFAMILIES; f++) keep[f] = groups[f];
    if ((int)g > room)
        for (int f = 0; f < PLAN_NFAMILIES; f++)
            if (groups[f]) keep[f] = groups[f] * room / (int)g > 1 ? groups[f] * room / (int)g : 1;
    for (int f = 0; f < PLAN_NFAMILIES; f++) kept += keep[f];
    while (kept > room) { /* the rounding up to one call: taken back from the largest */
        int big = 0;
        for (int f = 1; f < PLAN_NFAMILIES; f++)
            if (keep[f] > keep[big]) big = f;
        keep[big]--;
        kept--;
    }
    for (uint32_t i = 0; i < g;) {
        int f = c[i].family, m = groups[f];
        for (int k = 0; k < keep[f]; k++) {
            int at = keep[f] == 1 ? m - 1 : (int)((double)k * (m - 1) / (keep[f] - 1) + 0.5);
            const Call *x = &c[i + (uint32_t)at];
            out->kernel_points[out->nkernel_points++] = (PlanKernelPoint){f, x->flops, x->secs};
        }
        info->calls[f] = keep[f];
        info->thinned += m - keep[f];
        i += (uint32_t)m;
    }
    free(c);
    return calibrate_net(p, meas, out, info);
}
