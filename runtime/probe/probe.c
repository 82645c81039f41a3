#include "probe.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "hostk.h"
#include "hostk_threads.h"
#include "qrun.h"
#include "clock.h"
#include "cost.h"
#include "flops.h"

/* ---- host memory: the triad ---- */

typedef struct Triad {
    double *a, *b, *c;
    int64_t n, chunk;
} Triad;

static void triad_unit(void *ctx, int64_t u) {
    Triad *t = ctx;
    int64_t lo = u * t->chunk, hi = lo + t->chunk < t->n ? lo + t->chunk : t->n;
    double *restrict a = t->a;
    const double *restrict b = t->b, *restrict c = t->c;
    for (int64_t i = lo; i < hi; i++) a[i] = b[i] + 3.0 * c[i];
}

bool probe_cpu_ticks(const char *proc_stat, double *steal, double *total) {
    FILE *f = fopen(proc_stat, "r");
    if (!f) return false;
    char line[512];
    bool ok = false;
    while (!ok && fgets(line, sizeof line, f)) {
        if (strncmp(line, "cpu ", 4)) continue;
        /* user nice system idle iowait irq softirq steal ... */
        double v[8];
        int k = sscanf(line + 4, "%lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
        if (k == 8) {
            *total = 0;
            for (int i = 0; i < 8; i++) *total += v[i];
            *steal = v[7];
            ok = true;
        }
        break;
    }
    fclose(f);
    return ok;
}

uint64_t probe_cache_bytes(const char *sysfs_cpu) {
    uint64_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[600], line[64];
        int level = 0;
        snprintf(path, sizeof path, "%s/cache/index%d/level", sysfs_cpu, i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(line, sizeof line, f)) level = atoi(line);
        fclose(f);
        snprintf(path, sizeof path, "%s/cache/index%d/type", sysfs_cpu, i);
        f = fopen(path, "r");
        bool code = false;
        if (f) {
            code = fgets(line, sizeof line, f) && !strncmp(line, "Instruction", 11);
            fclose(f);
        }
        snprintf(path, sizeof path, "%s/cache/index%d/size", sysfs_cpu, i);
        f = fopen(path, "r");
        if (!f) continue;
        char *end = NULL;
        unsigned long long v = fgets(line, sizeof line, f) ? strtoull(line, &end, 10) : 0;
        fclose(f);
        if (end && (*end == 'K' || *end == 'k')) v <<= 10;
        else if (end && (*end == 'M' || *end == 'm')) v <<= 20;
        if (!code && v && level > best_level) best_level = level, best = v;
    }
    return best;
}

/* The best triad rate over reps, arrays of n doubles, every rank at once. */
static int triad_best(Comm *c, int64_t n, int reps, double *best, char *err, size_t en) {
    Triad t = {.n = n, .chunk = 1 << 15};
    t.a = malloc((size_t)t.n * sizeof(double));
    t.b = malloc((size_t)t.n * sizeof(double));
    t.c = malloc((size_t)t.n * sizeof(double));
    int rc = 0;
    if (!t.a || !t.b || !t.c) rc = (snprintf(err, en, "out of memory"), -1);
    for (int64_t i = 0; !rc && i < t.n; i++) t.a[i] = 0, t.b[i] = 1, t.c[i] = 2;
    int64_t units = (t.n + t.chunk - 1) / t.chunk;
    for (int rep = -1; !rc && rep < reps; rep++) { /* rep -1 warms the cache up */
        if (comm_barrier(c) != COMM_OK) rc = (snprintf(err, en, "%s", comm_last_error(c)), -1);
        double t0 = clock_mono_s();
        hk_parallel(hk_threads(), units, triad_unit, &t);
        double bw = 3.0 * (double)t.n * sizeof(double) / (clock_mono_s() - t0);
        if (rep >= 0 && bw > *best) *best = bw;
    }
    free(t.a);
    free(t.b);
    free(t.c);
    return rc;
}

int probe_memory(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n) {
    if (!r->cache_bytes) r->cache_bytes = probe_cache_bytes("/sys/devices/system/cpu/cpu0");
    /* the shared cache: the ranks' arrays fill half of it together */
    int64_t cached = r->cache_bytes ? (int64_t)(r->cache_bytes / 2 / (uint64_t)c->size / (3 * sizeof(double))) : 0;
    double dram = 0, cache = 0;
    int rc = triad_best(c, o->quick ? 1 << 19 : 1 << 22, o->quick ? 3 : 10, &dram, err, n);
    if (!rc && cached >= 4096) rc = triad_best(c, cached, o->quick ? 5 : 40, &cache, err, n);
    if (rc) return -1;
    double v[2] = {dram, cache};
    if (comm_allreduce_sum_f64(c, v, 2) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
    /* called again later in the probe: the best of the calls, as for the kernels */
    if (v[0] > r->mem_bandwidth) r->mem_bandwidth = v[0];
    if (v[1] > r->cache_bandwidth) r->cache_bandwidth = v[1];
    return 0;
}

/* ---- the host kernels ---- */

typedef struct KCase {
    PrimId prim;
    int nin;
    int rank[4];          /* in[0..nin), then out */
    int64_t dims[4][3];
    int64_t heads;
    char name[40];
} KCase;

/* The case's forward FLOPs, in the plan's counting (flops.h). */
static double case_flops(const KCase *k) {
    FlopsOperand in[3] = {{0}};
    double out = 1;
    for (int i = 0; i <= k->nin; i++) {
        int64_t numel = 1;
        for (int j = 0; j < k->rank[i]; j++) numel *= k->dims[i][j];
        if (i < k->nin) in[i] = (FlopsOperand){k->rank[i], k->dims[i], numel};
        else out = (double)numel;
    }
    int64_t iattr[PLAN_MAX_IATTR] = {[IA_ATTENTION_HEADS] = k->heads};
    return flops_forward(k->prim, iattr, in, k->nin, out);
}

static float *filled(int64_t numel) {
    float *d = malloc((size_t)(numel > 0 ? numel : 1) * sizeof *d);
    for (int64_t i = 0; d && i < numel; i++) d[i] = 0.01f * (float)(i % 7) - 0.03f;
    return d;
}

/* One copy of a case's operands and their gradients. */
typedef struct KSet {
    HkTensor in[3], din[3], out, dout;
} KSet;

/* Median seconds of one call of fwd (bwd false) or bwd, over calls made for
 * min_s (at least 3, at most 256): the median, so that another process's
 * burst on a shared core does not count as the kernel's rate. Each call
 * takes the next of nsets copies of the operands, so that they come from
 * the shared cache, as a plan's kernels find what another kernel wrote,
 * not from the core's own cache, where one set timed again would stay. */
static double time_kernel(const KCase *k, KSet *sets, int nsets, void *ws, size_t wsb, bool bwd, double min_s) {
    int64_t iattr[PLAN_MAX_IATTR] = {[IA_ATTENTION_HEADS] = k->heads};
    double fattr[PLAN_MAX_FATTR] = {0}, t[256], start = clock_mono_s();
    int reps = 0;
    for (int i = -1; reps < 256 && (reps < 3 || clock_mono_s() - start < min_s); i++) { /* call -1 warms up */
        KSet *x = &sets[(i + 1) % nsets];
        double t0 = clock_mono_s();
        int rc = bwd ? hk_run_bwd(k->prim, x->in, k->nin, &x->out, &x->dout, 1, x->din, iattr, fattr, ws, wsb)
                     : hk_run_fwd(k->prim, x->in, k->nin, &x->out, 1, iattr, fattr, ws, wsb);
        if (rc != HK_OK) return -1;
        if (i >= 0) t[reps++] = clock_mono_s() - t0;
    }
    return probe_median(t, reps);
}

/* The copies of the operands cycle through at least this many bytes: twice
 * a core's own cache on today's CPUs, well within the shared one. */
enum { KSET_BYTES = 8 << 20, KSET_MAX = 32 };

/* The forward's and the backward's seconds of case k (median over calls
 * made for min_s each); -1 when memory or the kernel fails. */
static int kernel_case(const KCase *k, double min_s, double *fwd, double *bwd) {
    size_t one = 0;
    for (int i = 0; i <= k->nin; i++) {
        HkTensor t = hk_tensor(NULL, DT_F32, k->rank[i], k->dims[i]);
        one += 2 * (size_t)hk_numel(&t) * sizeof(float);
    }
    int nsets = one ? (int)((KSET_BYTES + one - 1) / one) : 1;
    if (nsets > KSET_MAX) nsets = KSET_MAX;
    if (nsets < 1) nsets = 1;
    KSet sets[KSET_MAX];
    float *mem[KSET_MAX * 8] = {0};
    int nm = 0;
    bool ok = true;
    for (int s = 0; s < nsets; s++)
        for (int i = 0; i <= k->nin; i++) {
            HkTensor t = hk_tensor(NULL, DT_F32, k->rank[i], k->dims[i]);
            t.data = mem[nm++] = filled(hk_numel(&t));
            HkTensor g = t;
            g.data = mem[nm++] = filled(hk_numel(&t));
            ok &= t.data != NULL && g.data != NULL;
            if (i < k->nin) sets[s].in[i] = t, sets[s].din[i] = g;
            else sets[s].out = t, sets[s].dout = g;
        }
    int64_t iattr[PLAN_MAX_IATTR] = {[IA_ATTENTION_HEADS] = k->heads};
    size_t wsb = hk_workspace_bytes(k->prim, sets[0].in, k->nin, &sets[0].out, 1, iattr);
    void *ws = malloc(wsb ? wsb : 1);
    ok &= ws != NULL;
    double f = ok ? time_kernel(k, sets, nsets, ws, wsb, false, min_s) : -1;
    double b = f > 0 ? time_kernel(k, sets, nsets, ws, wsb, true, min_s) : -1;
    for (int i = 0; i < nm; i++) free(mem[i]);
    free(ws);
    *fwd = f;
    *bwd = b;
    return f > 0 && b > 0 ? 0 : -1;
}

static KCase gemm_case(int64_t m, int64_t kk, int64_t nn) {
    KCase k = {PRIM_LINEAR, 2, {2, 2, 2}, {{m, kk}, {kk, nn}, {m, nn}}, 0, ""};
    snprintf(k.name, sizeof k.name, "linear %lldx%lldx%lld", (long long)m, (long long)kk, (long long)nn);
    return k;
}

static KCase attn_case(int64_t b, int64_t t, int64_t d, int64_t h) {
    KCase k = {PRIM_ATTENTION, 3, {3, 3, 3, 3}, {{b, t, d}, {b, t, d}, {b, t, d}, {b, t, d}}, h, ""};
    snprintf(k.name, sizeof k.name, "attention %lldx%lldx%lld/%lld", (long long)b, (long long)t, (long long)d, (long long)h);
    return k;
}

static KCase rows_case(PrimId p, int nin, int64_t rows, int64_t d, const char *name) {
    KCase k = {p, nin, {2, 1, 1, 2}, {{rows, d}, {d}, {d}, {rows, d}}, 0, ""};
    snprintf(k.name, sizeof k.name, "%s %lldx%lld", name, (long long)rows, (long long)d);
    if (p == PRIM_ADD) k.rank[1] = 2, k.dims[1][0] = rows, k.dims[1][1] = d;
    k.rank[nin] = 2; /* the output */
    k.dims[nin][0] = rows;
    k.dims[nin][1] = d;
    return k;
}

enum { PROBE_MAX_CASES = PROBE_MAX_RATES / 2, PROBE_ROUNDS = 5 };

/* The sizes timed: each family from a small model's shapes (gpt2-tiny's
 * 256 rows of 128) to a large one's, so that a plan's kernel lies between
 * two timed calls of its family; --quick times those marked so. */
static int kernel_cases(bool quick, KCase *cases) {
    const struct {
        KCase k;
        bool quick;
    } all[] = {
        {gemm_case(64, 128, 128), true},
        {gemm_case(256, 128, 384), true},
        {gemm_case(256, 512, 128), true},
        {gemm_case(256, 768, 3072), false}, /* gpt2-small's MLP at 256 tokens */
        {gemm_case(1024, 1024, 1024), false},
        {attn_case(4, 64, 128, 4), true},
        {attn_case(1, 32, 64, 2), false},
        {attn_case(4, 256, 256, 4), false},
        {rows_case(PRIM_LAYERNORM, 3, 256, 128, "layernorm"), true},
        {rows_case(PRIM_LAYERNORM, 3, 32, 128, "layernorm"), false},
        {rows_case(PRIM_LAYERNORM, 3, 1024, 1024, "layernorm"), false},
        {rows_case(PRIM_GELU, 1, 256, 512, "gelu"), true},
        {rows_case(PRIM_ADD, 2, 256, 128, "add"), true},
        {rows_case(PRIM_ADD, 2, 32, 128, "add"), false},
        {rows_case(PRIM_GELU, 1, 1024, 1024, "gelu"), false},
        {rows_case(PRIM_GELU, 1, 32, 128, "gelu"), false},
    };
    _Static_assert(sizeof all / sizeof *all <= PROBE_MAX_CASES, "PROBE_MAX_RATES holds a forward and a backward per case");
    int nc = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i].quick || !quick) cases[nc++] = all[i].k;
    return nc;
}

int probe_kernels(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n) {
    KCase cases[PROBE_MAX_CASES];
    int nc = kernel_cases(o->quick, cases), rounds = o->quick ? 1 : PROBE_ROUNDS;
    double got[PROBE_ROUNDS][PROBE_MAX_RATES], best[PROBE_MAX_RATES];
    r->nrates = 0;
    int rc = 0, failed = -1;
    if (comm_barrier(c) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
    /* round after round over every size, so that a burst of load meets one
     * round of a size, not all of them; each size's median round is kept:
     * a burst in one round does not move it, and it is a typical call, as
     * the step's are, not the luckiest */
    for (int round = 0; round < rounds && !rc; round++)
        for (int i = 0; i < nc && !rc; i++) {
            if (kernel_case(&cases[i], o->quick ? 0.002 : 0.03, &got[round][2 * i], &got[round][2 * i + 1])) {
                rc = -1;
                failed = i;
            }
        }
    if (rc) snprintf(err, n, "host kernel %s failed", cases[failed].name);
    for (int k = 0; !rc && k < 2 * nc; k++) {
        double v[PROBE_ROUNDS];
        for (int round = 0; round < rounds; round++) v[round] = got[round][k];
        best[k] = probe_median(v, rounds);
    }
    double bad = rc ? 1 : 0;
    if (comm_allreduce_sum_f64(c, &bad, 1) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
    if (bad > 0 && !rc) snprintf(err, n, "a host kernel failed on another rank");
    if (bad > 0) return -1;
    /* every rank's times, averaged: the ranks ran at once, as in training */
    if (comm_allreduce_sum_f64(c, best, (size_t)(2 * nc)) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
    for (int i = 0; i < nc; i++)
        for (int pass = 0; pass < 2; pass++) {
            ProbeRate *q = &r->rates[r->nrates++];
            q->family = cost_family(cases[i].prim);
            snprintf(q->what, sizeof q->what, "%s %s", cases[i].name, pass ? "bwd" : "fwd");
            q->flops = pass ? 2 * case_flops(&cases[i]) : case_flops(&cases[i]); /* a backward counts twice its forward */
            q->secs = best[2 * i + pass] / c->size;
        }
    probe_summarise_rates(r);
    return 0;
}

void probe_summarise_rates(ProbeResult *r) {
    double peak = 0, any = 0;
    for (int i = 0; i < r->nrates; i++) {
        double rate = r->rates[i].secs > 0 ? r->rates[i].flops / r->rates[i].secs : 0;
        if (r->rates[i].family == FAM_GEMM && rate > peak) peak = rate;
        if (rate > any) any = rate;
    }
    if (peak <= 0) peak = any;
    r->peak_flops = peak;
    for (int f = 0; f < PLAN_NFAMILIES; f++) {
        double v[PROBE_MAX_RATES];
        int k = 0;
        for (int i = 0; i < r->nrates; i++)
            if (r->rates[i].family == (PlanFamily)f && r->rates[i].secs > 0) v[k++] = r->rates[i].flops / r->rates[i].secs;
        double e = k && peak > 0 ? probe_median(v, k) / peak : 1;
        r->eff[f] = e > 1 ? 1 : e < 1e-4 ? 1e-4 : e;
    }
}

/* ---- dispatch: a wake-up of another thread, as between the executor's queues ---- */

typedef struct PingPong {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn, rounds;
} PingPong;

static void *pong(void *arg) {
    PingPong *p = arg;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->rounds; i++) {
        while (p->turn != 1) pthread_cond_wait(&p->cv, &p->mu);
        p->turn = 0;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static double handoff_seconds(int rounds) {
    PingPong p = {.turn = 0, .rounds = rounds};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    pthread_t th;
    double t = -1;
    if (pthread_create(&th, NULL, pong, &p) == 0) {
        double t0 = clock_mono_s();
        pthread_mutex_lock(&p.mu);
        for (int i = 0; i < rounds; i++) {
            p.turn = 1;
            pthread_cond_broadcast(&p.cv);
            while (p.turn != 0) pthread_cond_wait(&p.cv, &p.mu);
        }
        pthread_mutex_unlock(&p.mu);
        t = (clock_mono_s() - t0) / (2.0 * rounds);
        pthread_join(th, NULL);
    }
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    return t;
}

/* What a running queue does around each instruction when no thread waits
 * for it: take its lock, run the instruction, signal its condition. */
typedef struct QueueTurn {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} QueueTurn;

int probe_dispatch(const ProbeOptions *o, ProbeResult *r, char *err, size_t n) {
    int rounds = o->quick ? 200 : 5000;
    double h = handoff_seconds(rounds);
    if (h < 0) return snprintf(err, n, "cannot start a thread"), -1;
    float x[64], y[64], src[1024], dst[1024];
    for (int i = 0; i < 64; i++) x[i] = (float)i * 0.01f;
    for (int i = 0; i < 1024; i++) src[i] = (float)i;
    int64_t d = 64;
    HkTensor tx = hk_tensor(x, DT_F32, 1, &d), ty = hk_tensor(y, DT_F32, 1, &d);
    QueueTurn q = {.done = 0};
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.cv, NULL);
    double t0 = clock_mono_s();
    for (int i = 0; i < rounds; i++) {
        pthread_mutex_lock(&q.mu);
        hk_gelu_fwd(&tx, &ty);
        q.done++;
        pthread_cond_broadcast(&q.cv);
        pthread_mutex_unlock(&q.mu);
    }
    double k = (clock_mono_s() - t0) / rounds;
    t0 = clock_mono_s();
    for (int i = 0; i < rounds; i++) {
        pthread_mutex_lock(&q.mu);
        memcpy(dst, src, sizeof src);
        src[i % 1024] = dst[(i + 1) % 1024];
        q.done++;
        pthread_cond_broadcast(&q.cv);
        pthread_mutex_unlock(&q.mu);
    }
    double cp = (clock_mono_s() - t0) / rounds;
    pthread_cond_destroy(&q.cv);
    pthread_mutex_destroy(&q.mu);
    r->launch = k;
    r->copy = cp;
    r->wake = h;
    return 0;
}

/* ---- collectives ---- */

static int coll_once(Comm *c, int op, float *buf, float *out, size_t bytes) {
    size_t count = bytes / sizeof(float);
    CommStatus s = op == 0 ? comm_allreduce_sum_f32(c, buf, count)
                 : op == 1 ? comm_allgather(c, buf, out, bytes / (size_t)c->size)
                           : comm_reduce_scatter_f32(c, buf, out, count / (size_t)c->size);
    return s == COMM_OK ? 0 : -1;
}

int probe_collectives(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n) {
    if (c->size <= 1) return 0;
    static const size_t sizes[] = {4096, 65536, 1 << 20, 4 << 20};
    int nsizes = o->quick ? 3 : 4, reps = o->quick ? 5 : 20, R = c->size;
    float *buf = calloc((4 << 20) / sizeof(float), sizeof(float)), *out = calloc((4 << 20) / sizeof(float), sizeof(float));
    ProbeSample smp[12];
    int ns = 0, rc = buf && out ? 0 : -1;
    for (int op = 0; op < 3 && !rc; op++)
        for (int k = 0; k < nsizes && !rc; k++) {
            double t[20];
            rc = coll_once(c, op, buf, out, sizes[k]); /* warm-up */
            for (int i = 0; i < reps && !rc; i++) {
                rc = comm_barrier(c) != COMM_OK;
                double t0 = clock_mono_s();
                if (!rc) rc = coll_once(c, op, buf, out, sizes[k]);
                t[i] = clock_mono_s() - t0;
            }
            if (rc) break;
            double m = probe_median(t, reps);
            if (comm_allreduce_sum_f64(c, &m, 1) != COMM_OK) rc = -1;
            double f = op == 0 ? 2 : 1;
            r->coll_secs[op][k] = m / R;
            r->coll_bytes[k] = (double)sizes[k];
            smp[ns++] = (ProbeSample){f * (R - 1), f * (R - 1) / R * (double)sizes[k], m / R};
        }
    free(buf);
    free(out);
    if (rc) return snprintf(err, n, "collectives: %s", buf && out ? comm_last_error(c) : "out of memory"), -1;
    r->ncoll = nsizes;
    if (probe_fit(smp, ns, &r->coll)) return snprintf(err, n, "collectives: the timings fit no bandwidth"), -1;
    r->net = true;
    return 0;
}

/* ---- all of it ---- */

int probe_run(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n) {
    double t0 = clock_mono_s(), steal0 = 0, tot0 = 0;
    memset(r, 0, sizeof *r);
    bool have_ticks = probe_cpu_ticks("/proc/stat", &steal0, &tot0);
    char host[64] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *h = host; *h; h++)
        if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9'))) *h = '_';
    snprintf(r->host, sizeof r->host, "%s", host);
    r->ranks = c->size;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE), cores = sysconf(_SC_NPROCESSORS_ONLN);
    r->cpu_memory = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 8ull << 30;
    r->cores = cores > 0 ? (int)cores : 1;
    if (probe_nvme(c, o, r, err, n) || probe_memory(c, o, r, err, n) || probe_streams(c, o, r, err, n) ||
        probe_kernels(c, o, r, err, n) || probe_memory(c, o, r, err, n) || probe_streams(c, o, r, err, n) ||
        probe_dispatch(o, r, err, n) || probe_collectives(c, o, r, err, n))
        return -1;
    double d[3] = {r->launch, r->copy, r->wake};
    if (comm_allreduce_sum_f64(c, d, 3) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
    r->launch = d[0] / c->size;
    r->copy = d[1] / c->size;
    r->wake = d[2] / c->size;
    r->seconds = clock_mono_s() - t0;
    double s1, t1;
    r->steal = have_ticks && probe_cpu_ticks("/proc/stat", &s1, &t1) && t1 > tot0 ? (s1 - steal0) / (t1 - tot0) : -1;
    return 0;
}

/* ---- the target file ---- */

static double atleast(double v, double lo) { return isfinite(v) && v > lo ? v : lo; }

double probe_nvme_request(const ProbeResult *r) {
    /* node_fit averaged each rank's time per request over the ranks, all at once on the drive */
    int ranks = r->ranks > 0 ? r->ranks : 1;
    return (r->nvme_pipe_read.latency + r->nvme_pipe_write.latency) / 2 / ranks;
}

int probe_text_nvme(const ProbeResult *r, char *buf, size_t n) {
    if (!r->nvme) {
        if (n) buf[0] = 0;
        return 0;
    }
    uint64_t mib = 1u << 20;
    int k = 0;
#define OUT(...) k += snprintf(buf + ((size_t)k < n ? (size_t)k : n), (size_t)k < n ? n - (size_t)k : 0, __VA_ARGS__)
    OUT("  nvme { paths = [\"%s\"]; read = %.3f GB/s; write = %.3f GB/s; capacity = %llu MiB; latency_us = %.3f;\n"
        "         request_us = %.3f; cpu_us = %.3f",
        r->nvme_dir, atleast(r->nvme_read.bandwidth * 1e-9, 0.001), atleast(r->nvme_write.bandwidth * 1e-9, 0.001),
        (unsigned long long)(r->nvme_capacity / mib ? r->nvme_capacity / mib : 1),
        atleast((r->nvme_read.latency + r->nvme_write.latency) / 2 * 1e6, 0.001), atleast(probe_nvme_request(r) * 1e6, 0.001),
        atleast(r->nvme_cpu * 1e6, 0.001));
    if (r->nnvme_sizes > 0) {
        OUT("\n         # the timed transfers: bytes, then microseconds per transfer with every rank's queue full (the\n"
            "         # node's), then microseconds of one alone\n");
        for (int dir = 0; dir < 2; dir++) {
            OUT("         %s = [", dir ? "writes" : "reads");
            for (int i = 0; i < r->nnvme_sizes; i++) {
                const ProbeNvmeSize *z = &r->nvme_sizes[i];
                OUT("%s%.0f, %.4g, %.4g", i ? ", " : "", z->bytes, atleast(z->drive[dir] * 1e6, 1e-3),
                    atleast(z->alone[dir] * 1e6, 1e-3));
            }
            OUT("]%s", dir ? "\n       }\n" : "\n");
        }
    } else {
        OUT(" }\n");
    }
#undef OUT
    return k;
}

int probe_text_streams(const ProbeResult *r, char *buf, size_t n) {
    if (!(r->adam_bandwidth > 0 && r->read_bandwidth > 0)) {
        if (n) buf[0] = 0;
        return 0;
    }
    return snprintf(buf, n, ";\n         adam_bandwidth = %.3f GB/s; read_bandwidth = %.3f GB/s",
                    atleast(r->adam_bandwidth * 1e-9, 0.001), atleast(r->read_bandwidth * 1e-9, 0.001));
}

int probe_target_text(const ProbeResult *r, char *buf, size_t n) {
    int k = 0;
#define OUT(...) k += snprintf(buf + ((size_t)k < n ? (size_t)k : n), (size_t)k < n ? n - (size_t)k : 0, __VA_ARGS__)
    int ranks = r->ranks > 0 ? r->ranks : 1;
    uint64_t mib = 1u << 20, budget = r->cpu_memory / 4 / (uint64_t)ranks / mib;
    OUT("# This machine (%s) as zinfprobe measured it for %d rank%s: host memory by a triad, the host\n"
        "# kernels by family, %s%s (docs/schedule.md, \"Probing the machine\").\n",
        r->host, ranks, ranks > 1 ? "s" : "", r->nvme ? "NVMe through io_uring, " : "",
        r->net ? "MPI collectives" : "no collectives (one rank)");
    if (r->steal > PROBE_STEAL_WARN)
        OUT("# Other machines took %.0f%% of this one's CPU time while it measured (steal): the figures are low.\n",
            r->steal * 100);
    OUT("target probe_%s {\n  backend = \"host\"\n  ranks = %d\n  budget = %llu MiB\n", r->host, ranks,
        (unsigned long long)(budget ? budget : 1));
    OUT("  cpu  { memory = %llu MiB; bandwidth = %.3f GB/s; cores = %d; flops = %.3f G; launch_us = %.3f; copy_us = %.3f;\n"
        "         wake_us = %.3f",
        (unsigned long long)(r->cpu_memory / mib ? r->cpu_memory / mib : 1), atleast(r->mem_bandwidth * 1e-9, 0.001),
        r->cores > 0 ? r->cores : 1, atleast(r->peak_flops * 1e-9, 0.001), atleast(r->launch * 1e6, 0.001),
        atleast(r->copy * 1e6, 0.001), atleast(r->wake * 1e6, 0.001));
    if (r->cache_bytes && r->cache_bandwidth > 0)
        OUT("; cache = %llu KiB; cache_bandwidth = %.3f GB/s", (unsigned long long)(r->cache_bytes >> 10),
            atleast(r->cache_bandwidth * 1e-9, 0.001));
    k += probe_text_streams(r, buf + ((size_t)k < n ? (size_t)k : n), (size_t)k < n ? n - (size_t)k : 0);
    OUT(" }\n");
    OUT("  efficiency { gemm = %.4f; attention = %.4f; norm = %.4f; elementwise = %.4f; activation = %.4f }\n",
        r->eff[FAM_GEMM], r->eff[FAM_ATTENTION], r->eff[FAM_NORM], r->eff[FAM_ELEMENTWISE], r->eff[FAM_ACTIVATION]);
    /* every timed call, for the cost model's interpolation */
    bool open = false;
    for (int f = 0; f < PLAN_NFAMILIES; f++) {
        int w = 0;
        for (int i = 0; i < r->nrates; i++) {
            const ProbeRate *q = &r->rates[i];
            if (q->family != (PlanFamily)f || !(q->secs > 0 && q->flops > 0)) continue;
            if (!open) OUT("  kernels { # the timed calls: FLOPs, microseconds\n");
            if (!w) OUT("    %s = [", plan_family_names[f]);
            OUT("%s%.6g, %.4g", w++ ? ", " : "", q->flops, atleast(q->secs * 1e6, 1e-4));
            open = true;
        }
        if (w) OUT("]\n");
    }
    if (open) OUT("  }\n");
    k += probe_text_nvme(r, buf + ((size_t)k < n ? (size_t)k : n), (size_t)k < n ? n - (size_t)k : 0);
    if (r->net)
        OUT("  net  { bandwidth = %.3f GB/s; latency_us = %.3f }\n", atleast(r->coll.bandwidth * 1e-9, 0.001),
            atleast(r->coll.latency * 1e6, 0.001));
    OUT("}\n");
#undef OUT
    return k;
}

void probe_report(const ProbeResult *r, FILE *out) {
    fprintf(out, "probe: %s, %d rank%s, %d cores, %.1f s\n", r->host, r->ranks, r->ranks > 1 ? "s" : "", r->cores, r->seconds);
    if (r->steal > PROBE_STEAL_WARN)
        fprintf(out, "warning: other machines took %.0f%% of this one's CPU time during the probe (steal in /proc/stat): its\n"
                     "  figures are lower than this machine's own; probe again when the host is quieter\n",
                r->steal * 100);
    else if (r->steal >= 0)
        fprintf(out, "cpu time taken by other machines during the probe (steal): %.1f%%\n", r->steal * 100);
    if (r->nvme) {
        fprintf(out, "nvme (%s, io_uring O_DIRECT, node):  read %.3f GB/s + %.1f us per request, write %.3f GB/s + %.1f us\n",
                r->nvme_dir, r->nvme_read.bandwidth * 1e-9, r->nvme_read.latency * 1e6, r->nvme_write.bandwidth * 1e-9,
                r->nvme_write.latency * 1e6);
        fprintf(out, "  %d in flight per rank (the nvme queue's pipeline): read %.3f GB/s + %.1f us per request, write %.3f GB/s"
                     " + %.1f us;\n  the drive's time per request, all ranks: %.1f us\n",
                QRUN_PIPE_MAX, r->nvme_pipe_read.bandwidth * 1e-9, r->nvme_pipe_read.latency * 1e6,
                r->nvme_pipe_write.bandwidth * 1e-9, r->nvme_pipe_write.latency * 1e6, probe_nvme_request(r) * 1e6);
        fprintf(out, "  CPU time per transfer run alone (submission, wait, wake-up): %.1f us\n", r->nvme_cpu * 1e6);
        fprintf(out, "  per size, us: one alone (a rank's) / per transfer with every rank's queue full (the node's); MB/s full\n");
        for (int i = 0; i < r->nnvme_sizes; i++) {
            const ProbeNvmeSize *z = &r->nvme_sizes[i];
            fprintf(out, "  %6.0f KiB  read %8.1f / %7.1f  %6.0f MB/s   write %8.1f / %7.1f  %6.0f MB/s\n", z->bytes / 1024,
                    z->alone[0] * 1e6, z->drive[0] * 1e6, z->drive[0] > 0 ? z->bytes / z->drive[0] * 1e-6 : 0,
                    z->alone[1] * 1e6, z->drive[1] * 1e6, z->drive[1] > 0 ? z->bytes / z->drive[1] * 1e-6 : 0);
        }
    } else {
        fprintf(out, "nvme: not measured (no --nvme DIR)\n");
    }
    fprintf(out, "memory (triad, all ranks at once, node): %.2f GB/s", r->mem_bandwidth * 1e-9);
    if (r->cache_bytes && r->cache_bandwidth > 0)
        fprintf(out, "; within the %llu KiB shared cache %.2f GB/s", (unsigned long long)(r->cache_bytes >> 10),
                r->cache_bandwidth * 1e-9);
    fprintf(out, "\n");
    if (r->adam_bandwidth > 0)
        fprintf(out, "memory by instruction (node, the plan's bytes): CPU Adam %.2f GB/s, norm's sum of squares %.2f GB/s\n",
                r->adam_bandwidth * 1e-9, r->read_bandwidth * 1e-9);
    fprintf(out, "dispatch: launch %.2f us, copy %.2f us (a tiny kernel / copy on a running queue); wake %.1f us (a queue's thread\n"
                 "  woken by another)\n", r->launch * 1e6, r->copy * 1e6, r->wake * 1e6);
    fprintf(out, "host kernels per rank (the plan's FLOPs):\n");
    for (int i = 0; i < r->nrates; i++)
        fprintf(out, "  %-11s %-26s %9.3f GFLOP/s  %10.1f us\n", plan_family_names[r->rates[i].family], r->rates[i].what,
                r->rates[i].flops / r->rates[i].secs * 1e-9, r->rates[i].secs * 1e6);
    fprintf(out, "  peak %.3f GFLOP/s; efficiency (the family's median rate over the peak):", r->peak_flops * 1e-9);
    for (int f = 0; f < PLAN_NFAMILIES; f++) fprintf(out, "%s %s %.3f", f ? "," : "", plan_family_names[f], r->eff[f]);
    fprintf(out, "\n  (the cost model interpolates between these calls; the efficiencies are for a reader without them)\n");
    if (!r->net) {
        fprintf(out, "collectives: not measured (one rank)\n");
        return;
    }
    static const char *const names[3] = {"allreduce", "allgather", "reduce_scatter"};
    fprintf(out, "collectives (MPI, %d ranks), us per call at", r->ranks);
    for (int k = 0; k < r->ncoll; k++) fprintf(out, " %.0f KiB", r->coll_bytes[k] / 1024);
    fprintf(out, ":\n");
    for (int op = 0; op < 3; op++) {
        fprintf(out, "  %-15s", names[op]);
        for (int k = 0; k < r->ncoll; k++) fprintf(out, " %9.1f", r->coll_secs[op][k] * 1e6);
        fprintf(out, "\n");
    }
    fprintf(out, "  ring fit: %.1f us per step + bytes / %.3f GB/s per rank\n", r->coll.latency * 1e6, r->coll.bandwidth * 1e-9);
}
