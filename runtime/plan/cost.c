#include "cost.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vocab.h"

static double per_node_share(const Plan *p, double rate) {
    int rpn = p->target.gpus_per_node > 0 ? p->target.gpus_per_node : 1;
    return rate / rpn;
}

/* A measured latency: 0 where the target gives none (or a forged plan a bad one). */
static double latency(double s) { return isfinite(s) && s > 0 ? s : 0; }

/* The cost model's family of each primitive family (runtime/plan/prim.def's
 * family column), as cost_<family>: a family without an entry does not
 * compile. */
enum {
    cost_embedding = FAM_ELEMENTWISE,
    cost_linear = FAM_GEMM,
    cost_matmul = FAM_GEMM,
    cost_binary = FAM_ELEMENTWISE,
    cost_norm = FAM_NORM,
    cost_act = FAM_ACTIVATION,
    cost_rope = FAM_ELEMENTWISE,
    cost_attention = FAM_ATTENTION,
    cost_split = FAM_ELEMENTWISE,
    cost_xent = FAM_ACTIVATION,
    cost_arange = FAM_ELEMENTWISE,
    cost_scale = FAM_ELEMENTWISE,
    cost_linxent = FAM_GEMM,
    cost_moe = FAM_GEMM, /* priced by its expert GEMMs, the family's work */
    cost_gmlp = FAM_GEMM, /* three GEMMs of the rows */
};
static const PlanFamily cost_families[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = (PlanFamily)cost_##family,
#include "prim.def"
#undef PRIM
};

PlanFamily cost_family(int prim) { return prim >= 0 && prim < PRIM_COUNT ? cost_families[prim] : FAM_ELEMENTWISE; }

static bool valid_eff(double e) { return isfinite(e) && e > 0 && e <= 1; }

double cost_efficiency(const PlanTarget *t, PlanFamily f) {
    double e = f < PLAN_NFAMILIES ? t->eff[f] : 0;
    /* a target measured before activations were timed apart prices them as elementwise, as it was planned */
    if (f == FAM_ACTIVATION && !valid_eff(e)) e = t->eff[FAM_ELEMENTWISE];
    return valid_eff(e) ? e : 1;
}

/* y at x between (x0, y0) and (x1, y1), x0 < x1: straight in log y over log x. */
static double log_log(double x, double x0, double y0, double x1, double y1) {
    return y0 * pow(y1 / y0, log(x / x0) / log(x1 / x0));
}

static bool valid_nvme_point(const PlanNvmePoint *q) {
    return isfinite(q->bytes) && q->bytes > 0 && isfinite(q->drive) && q->drive > 0 && isfinite(q->alone) && q->alone > 0;
}

bool cost_measured_nvme(const PlanTarget *t, bool write, double bytes, double *drive, double *alone) {
    const PlanNvmePoint *lo = NULL, *hi = NULL;
    int n = t->nnvme_points < PLAN_MAX_NVME_POINTS ? t->nnvme_points : PLAN_MAX_NVME_POINTS;
    for (int i = 0; i < n; i++) {
        const PlanNvmePoint *q = &t->nvme_points[i];
        if (q->write != (int32_t)write || !valid_nvme_point(q)) continue;
        if (q->bytes <= bytes && (!lo || q->bytes > lo->bytes)) lo = q;
        if (q->bytes >= bytes && (!hi || q->bytes < hi->bytes)) hi = q;
    }
    if (!lo && !hi) return false;
    if (!lo) { /* below the smallest size */
        *drive = hi->drive;
        *alone = hi->alone;
    } else if (!hi) { /* above the largest: its rate */
        *drive = lo->drive * bytes / lo->bytes;
        *alone = lo->alone * bytes / lo->bytes;
    } else if (hi->bytes <= lo->bytes) {
        *drive = lo->drive;
        *alone = lo->alone;
    } else {
        *drive = log_log(bytes, lo->bytes, lo->drive, hi->bytes, hi->drive);
        *alone = log_log(bytes, lo->bytes, lo->alone, hi->bytes, hi->alone);
    }
    return true;
}

void cost_nvme_transfer(const Plan *p, bool write, double bytes, double *xfer, double *alone) {
    int node_ranks = p->target.gpus_per_node > 0 ? p->target.gpus_per_node : 1;
    double drive, one;
    if (cost_measured_nvme(&p->target, write, bytes, &drive, &one)) {
        /* as timed at this size: the drive's time per transfer, which the
         * node's ranks share, and one alone's time */
        *xfer = drive * node_ranks;
        *alone = one > *xfer ? one : *xfer;
        return;
    }
    /* the bytes at the rank's share of the drive and the drive's time per
     * request, which every rank's requests share; alone, the latency too */
    double rate = write ? p->target.nvme_write : p->target.nvme_read;
    *xfer = bytes / per_node_share(p, rate > 0 ? rate : 1e9) + latency(p->target.nvme_request) * node_ranks;
    *alone = *xfer + latency(p->target.nvme_latency);
}

double cost_measured_kernel(const PlanTarget *t, PlanFamily f, double flops) {
    const PlanKernelPoint *lo = NULL, *hi = NULL;
    int n = t->nkernel_points < PLAN_MAX_KERNEL_POINTS ? t->nkernel_points : PLAN_MAX_KERNEL_POINTS;
    for (int i = 0; i < n; i++) {
        const PlanKernelPoint *q = &t->kernel_points[i];
        if (q->family != (int32_t)f || !(isfinite(q->flops) && q->flops > 0 && isfinite(q->secs) && q->secs > 0)) continue;
        if (q->flops <= flops && (!lo || q->flops > lo->flops)) lo = q;
        if (q->flops >= flops && (!hi || q->flops < hi->flops)) hi = q;
    }
    if (!lo && !hi) return -1;
    if (!(flops > 0)) return 0;
    /* outside the timed sizes: the nearest call's rate */
    if (!lo) return hi->secs * flops / hi->flops;
    if (!hi) return lo->secs * flops / lo->flops;
    if (hi->flops <= lo->flops) return lo->secs;
    /* between two: straight in log time over log flops */
    return log_log(flops, lo->flops, lo->secs, hi->flops, hi->secs);
}

/* A ring collective: (R-1)/R of the bytes over the link per pass, and one
 * latency per ring step; an all-reduce is two passes (reduce-scatter, then
 * all-gather), or a tree where that is faster. Targets without measured
 * figures keep the one-pass ring they were planned with. */
static double collective(const Plan *p, double bytes, double factor) {
    const PlanTarget *t = &p->target;
    int r = p->ranks;
    if (r <= 1) return 0;
    double bw = t->nodes > 1 ? t->net_inter : t->net_bandwidth;
    if (bw <= 0) bw = 1e9;
    bool measured = t->nvme_latency > 0 || t->pcie_latency > 0 || t->kernel_latency > 0;
    double steps = (measured ? factor : 1.0) * (r - 1);
    double ring = factor * (double)(r - 1) / r * bytes / bw + steps * latency(t->net_latency);
    if (!measured || factor < 2) return ring;
    /* an all-reduce may go up a tree and back down: 2 log2(R) steps of
     * latency and the bytes twice over a link; MPI and NCCL take the
     * faster, which for a small one (the norm's 8 bytes) is the tree */
    double tree = 2.0 * ceil(log2((double)r)) * latency(t->net_latency) + 2.0 * bytes / bw;
    return tree < ring ? tree : ring;
}

double cost_dequant_bytes(const Plan *p, const PlanInstr *s) {
    if (s->op != PI_KERNEL || s->arg < 0 || (uint32_t)s->arg >= p->nops) return 0;
    const PlanOp *o = &p->ops[s->arg];
    /* backward, only dx (out[0]) reads the weight: a frozen one has no dw */
    if (o->kind != OP_FWD && o->kind != OP_RECOMPUTE && !(o->kind == OP_BWD && o->out[0] >= 0)) return 0;
    bool host = p->target.backend && !strcmp(p->target.backend, "host");
    int nin = o->nin < PLAN_MAX_IN ? o->nin : PLAN_MAX_IN;
    double bytes = 0;
    for (int k = 0; k < nin; k++) {
        int w = o->in[k];
        if (w < 0 || (uint32_t)w >= p->ntensors || !dtype_is_quant(p->tensors[w].dtype)) continue;
        /* the compute dtype: the host kernels' f32; CUDA's, that of the activation (input 0) */
        int x = o->in[0];
        int es = host || x < 0 || (uint32_t)x >= p->ntensors || p->tensors[x].dtype == DT_F32 ? 4 : 2;
        int64_t n = p->tensors[w].numel / (s->ntiles > 1 ? s->ntiles : 1);
        bytes += (double)dtype_bytes((DType)p->tensors[w].dtype, n) + (double)n * es;
    }
    return bytes;
}

/* A kernel: as its family's timed calls of that many flops give it where
 * the target has them (zinfprobe; they moved their bytes as the kernel
 * does), else the longer of its flops at the family's share of peak and
 * its bytes at memory bandwidth; plus the dispatch of an instruction.
 * Before a GEMM that reads a weight stored quantized, the pass that
 * decodes it (cost_dequant_bytes) at memory bandwidth, the same for timed
 * calls (they read plain weights); on CUDA its own launch. */
static double kernel_time(const Plan *p, const PlanInstr *s, double hbm) {
    const PlanTarget *t = &p->target;
    double c = -1, dq = cost_dequant_bytes(p, s);
    if (dq > 0) dq = dq / hbm + (strcmp(t->backend ? t->backend : "", "host") ? latency(t->kernel_latency) : 0);
    PlanFamily f = FAM_ELEMENTWISE;
    bool known = s->arg >= 0 && (uint32_t)s->arg < p->nops;
    if (known) f = cost_family(p->ops[s->arg].prim), c = cost_measured_kernel(t, f, s->flops);
    if (c >= 0) return c + dq + latency(t->kernel_latency); /* the timed calls moved their bytes too */
    c = s->flops / ((t->gpu_flops > 0 ? t->gpu_flops : 1e12) * (known ? cost_efficiency(t, f) : 1));
    double m = (double)s->bytes / hbm;
    return (c > m ? c : m) + dq + latency(t->kernel_latency);
}

bool cost_in_cache(const Plan *p) {
    const PlanTarget *t = &p->target;
    if (strcmp(t->backend, "host") || !(isfinite(t->cpu_cache) && t->cpu_cache > 0) ||
        !(isfinite(t->cache_bandwidth) && t->cache_bandwidth > 0))
        return false;
    double held = 0; /* every rank of the node: their arenas in host memory */
    for (int a = 0; a < PLAN_NARENAS; a++)
        if (a != ARENA_NVME) held += (double)p->arenas[a].size;
    return held * (t->gpus_per_node > 0 ? t->gpus_per_node : 1) <= t->cpu_cache;
}

/* The rate of an instruction that only streams memory: on the host's
 * cores (the cpu queue, or any queue of a host plan) and beyond the cache,
 * what the probe timed for its pattern where it did (the node's, shared by
 * its ranks); else the rate of its queue's memory, cpu_bw or hbm. */
static double stream_rate(const Plan *p, const PlanInstr *s, bool cached, double pattern, double cpu_bw, double hbm) {
    bool host_cores = s->queue == Q_CPU || (p->target.backend && !strcmp(p->target.backend, "host"));
    if (host_cores && !cached && isfinite(pattern) && pattern > 0) return per_node_share(p, pattern);
    return s->queue == Q_CPU ? cpu_bw : hbm;
}

static double instr_time(const Plan *p, const PlanInstr *s, bool cached) {
    const PlanTarget *t = &p->target;
    double b = (double)s->bytes;
    double cpu_bw = per_node_share(p, cached ? t->cache_bandwidth : t->cpu_bandwidth > 0 ? t->cpu_bandwidth : 1e10);
    double hbm = cached ? cpu_bw : t->gpu_hbm > 0 ? t->gpu_hbm : 1e11;
    double pcie = t->gpu_pcie > 0 ? t->gpu_pcie : 1e10;
    double klat = latency(t->kernel_latency);
    switch ((PlanOpcode)s->op) {
    case PI_NVME_READ:
    case PI_NVME_WRITE: {
        double drive, alone; /* one alone; the pipeline (cost_run) prices several in flight */
        bool w = s->op == PI_NVME_WRITE;
        if (cost_measured_nvme(t, w, b, &drive, &alone)) return alone;
        double rate = w ? t->nvme_write : t->nvme_read;
        return b / per_node_share(p, rate > 0 ? rate : 1e9) + latency(t->nvme_latency);
    }
    case PI_INPUT:
    case PI_H2D:
    case PI_D2H: return b / pcie + latency(t->pcie_latency);
    case PI_ALLGATHER:
    case PI_REDUCE_SCATTER: return collective(p, b, 1.0);
    case PI_ALLREDUCE: return collective(p, b, 2.0);
    case PI_KERNEL: return kernel_time(p, s, hbm);
    case PI_GPU_ADAM:
    case PI_CPU_ADAM: return b / stream_rate(p, s, cached, t->adam_bandwidth, cpu_bw, hbm) + klat;
    case PI_ZERO:
    case PI_ACCUM: return b / (s->queue == Q_CPU ? cpu_bw : hbm) + klat;
    case PI_GRAD_NORM: return b / stream_rate(p, s, cached, t->read_bandwidth, cpu_bw, hbm) + collective(p, 8, 2.0) + klat;
    case PI_STEP_END:
    case PI_COUNT: break;
    }
    return 0;
}

double cost_instr_time(const Plan *p, const PlanInstr *s) { return instr_time(p, s, cost_in_cache(p)); }

/* The host backend's cores: every queue of a rank but NVMe (whose
 * transfers the kernel's io_uring does) runs on the rank's share of them,
 * and a host kernel or CPU Adam takes the rank's whole thread team
 * (runtime/hostk/hostk_threads.h), so their instructions run one at a time
 * however the queues overlap. The busy intervals, sorted and disjoint; an
 * instruction takes the earliest gap, from when it is ready, that holds it. */
typedef struct Busy {
    double *s, *e;
    size_t n, cap;
} Busy;

static bool busy_take(Busy *b, double ready, double dur, double *start) {
    size_t lo = 0, hi = b->n;
    while (lo < hi) { /* the first interval ending after ready */
        size_t mid = lo + (hi - lo) / 2;
        if (b->e[mid] <= ready) lo = mid + 1;
        else hi = mid;
    }
    double t = ready;
    size_t k = lo;
    while (k < b->n && t + dur > b->s[k]) {
        if (b->e[k] > t) t = b->e[k];
        k++;
    }
    *start = t;
    if (dur <= 0) return true;
    if (b->n == b->cap) {
        size_t c = b->cap ? 2 * b->cap : 256;
        double *ns = realloc(b->s, c * sizeof *ns);
        if (!ns) return false;
        b->s = ns;
        double *ne = realloc(b->e, c * sizeof *ne);
        if (!ne) return false;
        b->e = ne;
        b->cap = c;
    }
    memmove(b->s + k + 1, b->s + k, (b->n - k) * sizeof *b->s);
    memmove(b->e + k + 1, b->e + k, (b->n - k) * sizeof *b->e);
    b->s[k] = t;
    b->e[k] = t + dur;
    b->n++;
    return true;
}

static bool uses_cores(bool host, const PlanInstr *s) { return host && s->queue != Q_NVME && s->queue < PLAN_NQUEUES; }

bool cost_simulate(const Plan *p, CostResult *r) {
    memset(r, 0, sizeof *r);
    size_t n = p->ninstrs ? p->ninstrs : 1;
    r->start = calloc(n, sizeof *r->start);
    r->end = calloc(n, sizeof *r->end);
    r->wait = calloc(n, sizeof *r->wait);
    if (!r->start || !r->end || !r->wait) {
        cost_free(r);
        return false;
    }
    double qfree[PLAN_NQUEUES] = {0}, boundary = 0;
    bool spec = plan_speculative(p);
    /* the redo range of a speculative plan runs only on a step that clips
     * or is skipped: simulated on its own clock (redo_time), after the norm */
    double rfree[PLAN_NQUEUES] = {0}, redo_from = 0;
    Busy cores = {0};
    bool host = !strcmp(p->target.backend, "host");
    double wake = latency(p->target.wake_latency);
    bool cached = cost_in_cache(p);
    double nv_ring[COST_NVME_DEPTH] = {0}, nv_last = 0; /* the nvme pipeline: ends of the last transfers */
    uint32_t nv_count = 0;
    int ranks_here = p->target.gpus_per_node > 0 ? p->target.gpus_per_node : 1;
    bool one_core = p->target.cpu_cores > 0 && p->target.cpu_cores <= ranks_here;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (i == p->opt_begin) {
            boundary = 0;
            for (uint32_t k = 0; k < i; k++) if (r->end[k] > boundary) boundary = r->end[k];
        }
        if (spec && i == p->redo_begin) { /* the redo clock starts when the norm has ended */
            double all = 0;
            for (int q = 0; q < PLAN_NQUEUES; q++) if (qfree[q] > all) all = qfree[q];
            for (int q = 0; q < PLAN_NQUEUES; q++) rfree[q] = all;
            redo_from = all;
        }
        if (spec && i >= p->redo_begin && i < p->redo_end) {
            double st = s->queue < PLAN_NQUEUES ? rfree[s->queue] : 0;
            for (uint32_t d = 0; d < s->ndeps; d++) {
                uint32_t j = p->deps[s->dep + d];
                if (j >= p->redo_begin && j < i && r->end[j] > st) st = r->end[j];
            }
            double dur = instr_time(p, s, cached);
            r->start[i] = st;
            r->end[i] = st + dur;
            if (s->queue < PLAN_NQUEUES) rfree[s->queue] = st + dur;
            if (r->end[i] - redo_from > r->redo_time) r->redo_time = r->end[i] - redo_from;
            continue;
        }
        if (spec && i == p->redo_end) {
            /* the runtime runs the rest of a speculative plan's optimizer
             * after the redo's decision: every queue waits for what came
             * before (the last micro-batch, the norm) to end */
            double all = 0;
            for (int q = 0; q < PLAN_NQUEUES; q++) if (qfree[q] > all) all = qfree[q];
            for (int q = 0; q < PLAN_NQUEUES; q++) qfree[q] = all;
        }
        double st = s->queue < PLAN_NQUEUES ? qfree[s->queue] : 0, woken = -1;
        for (uint32_t d = 0; d < s->ndeps; d++) {
            uint32_t j = p->deps[s->dep + d];
            /* deps point backwards in a planner's stream; a forged forward one counts from 0 */
            if (j < i && !(spec && j >= p->redo_begin && j < p->redo_end) && r->end[j] > st) {
                st = r->end[j];
                woken = p->instrs[j].queue != s->queue ? st : -1;
            }
        }
        /* the queue idled until another queue's instruction made this one
         * ready: its thread must be woken first */
        if (woken >= 0) st += wake;
        if ((s->op == PI_NVME_READ || s->op == PI_NVME_WRITE) && s->queue == Q_NVME) {
            /* the nvme queue is a pipeline on both backends (runtime/exec/qrun.h): up
             * to COST_NVME_DEPTH transfers in flight, their bytes one after
             * another at the drive's rate, each one's latency beside the
             * others', retired in order; the queue is busy while any is in flight */
            double xfer, alone;
            cost_nvme_transfer(p, s->op == PI_NVME_WRITE, (double)s->bytes, &xfer, &alone);
            double lat = alone - xfer; /* the rest of one alone's time, beside the others' */
            double *slot = &nv_ring[nv_count++ % COST_NVME_DEPTH];
            if (*slot > st) st = *slot; /* the one COST_NVME_DEPTH before has retired */
            /* a rank with a core or less: its transfer's CPU work (submission,
             * completion, the worker's wake-up) takes that core from the rest */
            double cpu = latency(p->target.nvme_cpu), at;
            if (host && cpu > 0 && one_core && !busy_take(&cores, st, cpu, &at)) {
                free(cores.s);
                free(cores.e);
                cost_free(r);
                return false;
            }
            double end = st + xfer + lat > nv_last ? st + xfer + lat : nv_last, share = end - (st > nv_last ? st : nv_last);
            r->busy[Q_NVME] += share;
            r->wait[i] = end - st - share;
            r->start[i] = st;
            r->end[i] = end;
            *slot = end;
            nv_last = end;
            qfree[Q_NVME] = st + xfer;
            if (end > r->pass_time) r->pass_time = end;
            continue;
        }
        double dur = instr_time(p, s, cached);
        if (uses_cores(host, s) && !busy_take(&cores, st, dur, &st)) {
            free(cores.s);
            free(cores.e);
            cost_free(r);
            return false;
        }
        r->start[i] = st;
        r->end[i] = st + dur;
        if (s->queue < PLAN_NQUEUES) {
            qfree[s->queue] = st + dur;
            r->busy[s->queue] += dur;
        }
        if (r->end[i] > r->pass_time) r->pass_time = r->end[i];
    }
    free(cores.s);
    free(cores.e);
    if (p->opt_begin >= p->ninstrs) boundary = r->pass_time;
    int64_t acc = p->train.grad_accum > 1 ? p->train.grad_accum : 1;
    r->step_time = r->pass_time + (double)(acc - 1) * boundary;
    r->bottleneck = Q_COMPUTE;
    for (int q = 0; q < PLAN_NQUEUES; q++)
        if (r->busy[q] > r->busy[r->bottleneck]) r->bottleneck = q;
    return true;
}

void cost_free(CostResult *r) {
    free(r->start);
    free(r->end);
    free(r->wait);
    r->start = r->end = r->wait = NULL;
}

void cost_bottleneck_sentence(const Plan *p, const CostResult *r, char *buf, size_t n) {
    static const char *const what_gpu[PLAN_NQUEUES] = {
        "NVMe reads and writes", "host-to-device copies over PCIe", "device-to-host copies over PCIe",
        "collectives on the network", "GPU compute", "the CPU optimizer and gradient accumulation"};
    /* the host backend's "device" is host memory and its compute the host kernels: said as such */
    static const char *const what_host[PLAN_NQUEUES] = {
        "NVMe reads and writes", "copies into the device arena (host memory)", "copies out of the device arena (host memory)",
        "collectives between the ranks", "the host kernels' compute", "the CPU optimizer and gradient accumulation"};
    bool host = p && p->target.backend && !strcmp(p->target.backend, "host");
    const char *const *what = host ? what_host : what_gpu;
    double t = r->pass_time > 0 ? r->pass_time : 1;
    int b = r->bottleneck;
    double compute = r->busy[Q_COMPUTE] / t * 100;
    if (b == Q_COMPUTE)
        snprintf(buf, n, "The step is bound by %s (busy %.0f%% of the step); transfers are hidden behind it.", what[b], compute);
    else
        snprintf(buf, n, "The step is bound by %s (busy %.0f%% of the step, compute %.0f%%): %s.", what[b],
                 r->busy[b] / t * 100, compute,
                 b == Q_NVME ? "move state to CPU memory or add drives" :
                 b == Q_COMM ? "a larger micro-batch amortises the all-gathers" :
                 b == Q_CPU ? (host ? "keep optimizer state in the device arena or add CPU bandwidth" : "keep optimizer state on the GPU or add CPU bandwidth") :
                 "raise the micro-batch or keep more state on the GPU");
    (void)p;
}
