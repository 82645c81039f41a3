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

enum { NVME_GROUPS = PLAN_MAX_NVME_POINTS / 2 }; /* timed transfers per direction */

/* The busy time of the run's measured transfers of each direction, as
 * measured (meas) and as the cost model gives them with target t (its
 * share of the queue's time: end - start less the time beside others).
 * false: out of memory. */
static bool nvme_busy(const Plan *p, const Timeline *meas, const PlanTarget *t, double got[2], double model[2]) {
    Plan q = *p;
    q.target = *t;
    CostResult cr;
    if (!cost_simulate(&q, &cr)) return false;
    got[0] = got[1] = model[0] = model[1] = 0;
    for (uint32_t i = 0; i < p->ninstrs && i < meas->n; i++) {
        const PlanInstr *s = &p->instrs[i];
        if ((s->op != PI_NVME_READ && s->op != PI_NVME_WRITE) || !meas->have[i] || !s->bytes) continue;
        int w = s->op == PI_NVME_WRITE;
        got[w] += timeline_busy(meas, i);
        model[w] += cr.end[i] - cr.start[i] - cr.wait[i];
    }
    cost_free(&cr);
    return true;
}

/* The pipeline shares the queue's time among transfers otherwise than the
 * runtime does, so the factors of calibrate_nvme leave the model's busy
 * time of the run's transfers off the run's: each direction's timed
 * transfers are scaled by run over model, again, until they agree within
 * 1% (at most 6 rounds, each a simulation of the plan). false: out of
 * memory. */
static bool level_nvme(const Plan *p, const Timeline *meas, PlanTarget *out, CalibrateInfo *info) {
    for (int round = 0; round < 6; round++) {
        double got[2], model[2], k[2] = {1, 1};
        if (!nvme_busy(p, meas, out, got, model)) return false;
        bool done = true;
        for (int w = 0; w < 2; w++)
            if (info->nvme_points[w] && got[w] > 0 && model[w] > 0) {
                k[w] = got[w] / model[w];
                done &= fabs(k[w] - 1) < 0.01;
            }
        if (done) break;
        for (int i = 0; i < out->nnvme_points; i++) {
            PlanNvmePoint *q = &out->nvme_points[i];
            if (q->write < 0 || q->write > 1 || !info->nvme_points[q->write]) continue;
            q->drive *= k[q->write];
            q->alone *= k[q->write];
        }
        for (int w = 0; w < 2; w++) info->nvme_scale[w][0] *= k[w], info->nvme_scale[w][1] *= k[w];
    }
    return true;
}

/* The run's NVMe transfers set the level of the target's timed transfers,
 * the target keeping their shape by size. Per direction, two factors: the
 * time of those that ran alone (nothing else in flight) over what the cost
 * model gives one alone at its size, and the busy share of those that ran
 * beside others (the runtime splits the queue's busy time evenly among the
 * transfers in flight) over the drive's time the model gives each
 * (cost_nvme_transfer); a direction with only one kind scales both by it.
 * The target's timed transfers of that direction are scaled by them; a
 * target without any gets them at the run's sizes (grouped: sizes up to
 * twice a group's smallest, at most NVME_GROUPS, thinned evenly) from its
 * rate figures, scaled. A direction the run has no transfer of keeps the
 * target's. */
static bool calibrate_nvme(const Plan *p, const Timeline *meas, PlanTarget *out, CalibrateInfo *info) {
    double got[2][2] = {{0, 0}, {0, 0}}, model[2][2] = {{0, 0}, {0, 0}}; /* [write][alone] */
    double sizes[2][PLAN_MAX_NVME_POINTS];
    int nsizes[2] = {0, 0}, nx[2] = {0, 0};
    for (uint32_t i = 0; i < p->ninstrs && i < meas->n; i++) {
        const PlanInstr *s = &p->instrs[i];
        if ((s->op != PI_NVME_READ && s->op != PI_NVME_WRITE) || !meas->have[i] || !s->bytes) continue;
        double dur = meas->end[i] - meas->start[i], busy = timeline_busy(meas, i), xfer, alone;
        if (!(dur > 0) || !(busy > 0)) continue;
        int w = s->op == PI_NVME_WRITE, one = meas->wait[i] <= 0.02 * dur;
        cost_nvme_transfer(p, w, (double)s->bytes, &xfer, &alone);
        got[w][one] += one ? dur : busy;
        model[w][one] += one ? alone : xfer;
        nx[w]++;
        /* the sizes, for a target without timed transfers: each group's smallest */
        bool seen = false;
        for (int k = 0; k < nsizes[w] && !seen; k++) seen = (double)s->bytes >= sizes[w][k] && (double)s->bytes <= 2 * sizes[w][k];
        if (!seen && nsizes[w] < PLAN_MAX_NVME_POINTS) sizes[w][nsizes[w]++] = (double)s->bytes;
    }
    info->transfers = nx[0] + nx[1];
    if (!info->transfers) return true;
    int rpn = p->target.gpus_per_node > 0 ? p->target.gpus_per_node : 1;
    PlanNvmePoint pts[PLAN_MAX_NVME_POINTS];
    int n = 0;
    for (int w = 0; w < 2; w++) {
        bool had = false;
        for (int i = 0; i < p->target.nnvme_points && i < PLAN_MAX_NVME_POINTS; i++) had |= p->target.nvme_points[i].write == w;
        if (!nx[w]) { /* none in the run: the target's stay */
            for (int i = 0; i < p->target.nnvme_points && i < PLAN_MAX_NVME_POINTS && n < PLAN_MAX_NVME_POINTS; i++)
                if (p->target.nvme_points[i].write == w) pts[n++] = p->target.nvme_points[i];
            continue;
        }
        double fa = model[w][1] > 0 ? got[w][1] / model[w][1] : 0, fd = model[w][0] > 0 ? got[w][0] / model[w][0] : 0;
        if (!(fa > 0)) fa = fd;
        if (!(fd > 0)) fd = fa;
        info->nvme_scale[w][0] = fd;
        info->nvme_scale[w][1] = fa;
        int before = n;
        if (had) {
            for (int i = 0; i < p->target.nnvme_points && i < PLAN_MAX_NVME_POINTS && n < PLAN_MAX_NVME_POINTS; i++) {
                PlanNvmePoint q = p->target.nvme_points[i];
                if (q.write != w) continue;
                q.drive *= fd;
                q.alone *= fa;
                pts[n++] = q;
            }
        } else {
            /* sorted, then thinned to NVME_GROUPS (the smallest and largest kept) */
            double *z = sizes[w];
            for (int i = 1; i < nsizes[w]; i++)
                for (int k = i; k > 0 && z[k] < z[k - 1]; k--) {
                    double t = z[k];
                    z[k] = z[k - 1];
                    z[k - 1] = t;
                }
            int keep = nsizes[w] < NVME_GROUPS ? nsizes[w] : NVME_GROUPS;
            for (int k = 0; k < keep && n < PLAN_MAX_NVME_POINTS; k++) {
                double bytes = z[keep == 1 ? nsizes[w] - 1 : (int)((double)k * (nsizes[w] - 1) / (keep - 1) + 0.5)], xfer, alone;
                cost_nvme_transfer(p, w, bytes, &xfer, &alone);
                pts[n++] = (PlanNvmePoint){w, bytes, xfer / rpn * fd, alone * fa};
            }
        }
        info->nvme_points[w] = n - before;
    }
    memcpy(out->nvme_points, pts, sizeof *pts * (size_t)n);
    out->nnvme_points = n;
    return level_nvme(p, meas, out, info);
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
        return calibrate_net(p, meas, out, info) && calibrate_nvme(p, meas, out, info);
}
