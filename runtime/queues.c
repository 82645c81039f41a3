#include "queues.h"
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* One lock; a condition variable per queue, so that a completion wakes
 * only the workers whose next instruction it made ready (not all six,
 * each to find it still waits: on a machine with few cores those wake-ups
 * cost the compute thread its core). */
typedef struct QSync {
    pthread_mutex_t mu;
    pthread_cond_t cv[PLAN_NQUEUES];
    int64_t waiting[PLAN_NQUEUES]; /* the instruction each queue's worker sleeps on, -1: none */
    const struct Worker *worker[PLAN_NQUEUES];
} QSync;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double qrun_now(const Qrun *q) { return mono() - q->epoch; }

void qrun_add_wait(Qrun *q, int worker, double seconds) {
    if (worker >= 0 && worker < PLAN_NQUEUES && seconds > 0) q->wait_now[worker] += seconds; /* only this worker writes it */
}

int qrun_init(Qrun *q, const Plan *p, QrunExecFn fn, void *ctx) {
    memset(q, 0, sizeof *q);
    q->plan = p;
    q->fn = fn;
    q->ctx = ctx;
    q->done = calloc(p->ninstrs ? p->ninstrs : 1, sizeof *q->done);
    q->timing = calloc(p->ninstrs ? p->ninstrs : 1, sizeof *q->timing);
    QSync *s = calloc(1, sizeof *s);
    if (!q->done || !q->timing || !s) {
        free(q->done);
        free(q->timing);
        free(s);
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    for (int k = 0; k < PLAN_NQUEUES; k++) {
        pthread_cond_init(&s->cv[k], NULL);
        s->waiting[k] = -1;
    }
    q->sync = s;
    q->epoch = mono();
    return 0;
}

void qrun_free(Qrun *q) {
    QSync *s = q->sync;
    if (s) {
        pthread_mutex_destroy(&s->mu);
        for (int k = 0; k < PLAN_NQUEUES; k++) pthread_cond_destroy(&s->cv[k]);
        free(s);
    }
    free(q->done);
    free(q->timing);
    memset(q, 0, sizeof *q);
}

void qrun_set_batch(Qrun *q, int queue, QrunBatchFn fn) {
    if (queue >= 0 && queue < PLAN_NQUEUES) q->batch[queue] = fn;
}

/* Whether operands a and b touch a common byte of one arena and either
 * writes. Ranges in arenas other than the GPU's are taken to whole blocks,
 * as a transfer may be widened to them. */
static bool operands_clash(const Plan *p, const PlanOperand *a, const PlanOperand *b) {
    if (a->buffer < 0 || b->buffer < 0 || !((a->mode | b->mode) & PLAN_W)) return false;
    const PlanBuffer *ba = &p->buffers[a->buffer], *bb = &p->buffers[b->buffer];
    if (ba->arena != bb->arena) return false;
    uint64_t lo_a = ba->offset + a->offset, hi_a = lo_a + a->bytes, lo_b = bb->offset + b->offset, hi_b = lo_b + b->bytes;
    if (ba->arena != ARENA_GPU) {
        lo_a &= ~(uint64_t)4095, lo_b &= ~(uint64_t)4095;
        hi_a = (hi_a + 4095) & ~(uint64_t)4095, hi_b = (hi_b + 4095) & ~(uint64_t)4095;
    }
    return lo_a < hi_b && lo_b < hi_a;
}

static bool instrs_clash(const Plan *p, const PlanInstr *x, const PlanInstr *y) {
    for (uint32_t a = 0; a < x->nopnd; a++)
        for (uint32_t b = 0; b < y->nopnd; b++)
            if (operands_clash(p, &p->operands[x->opnd + a], &p->operands[y->opnd + b])) return true;
    return false;
}

typedef struct Worker {
    Qrun *q;
    int queue;
    uint32_t begin, end;
    const uint8_t *run; /* NULL: every instruction of the range */
} Worker;

/* Whether every dependency of instruction i inside the run has completed
 * (caller holds the lock). */
static bool deps_done(const Worker *w, uint32_t i) {
    const Qrun *q = w->q;
    const Plan *p = q->plan;
    const PlanInstr *in = &p->instrs[i];
    for (uint32_t k = 0; k < in->ndeps; k++) {
        uint32_t d = p->deps[in->dep + k];
        if (d >= w->begin && d < w->end && (!w->run || w->run[d]) && q->done[d] != q->gen) return false;
    }
    return true;
}

static bool mine(const Worker *w, uint32_t i) {
    return w->q->plan->instrs[i].queue == w->queue && (!w->run || w->run[i]);
}

/* After instruction idx[0] (ready): the queue's next instructions that are
 * ready and clash with none before them, into idx (caller holds the lock).
 * Returns the batch's size. */
static int gather(const Worker *w, uint32_t *idx) {
    const Plan *p = w->q->plan;
    int n = 1;
    for (uint32_t j = idx[0] + 1; j < w->end && n < QRUN_BATCH_MAX; j++) {
        if (!mine(w, j)) continue;
        if (!deps_done(w, j)) break;
        bool clash = false;
        for (int k = 0; k < n && !clash; k++) clash = instrs_clash(p, &p->instrs[idx[k]], &p->instrs[j]);
        if (clash) break;
        idx[n++] = j;
    }
    return n;
}

/* The queues other than compute move data for it and mostly wait; when
 * one is woken its work is short and something waits for it. On a machine
 * whose cores are all busy (the compute threads of every rank, other
 * jobs), a woken thread waits for the running one's time slice (about
 * 3 ms) unless it may preempt: a thread that asks for a short slice may
 * (EEVDF, Linux 6.12 and later: sched_attr.sched_runtime of a normal
 * thread; older kernels ignore it, nothing fails). No privilege needed;
 * the thread's share of the CPU is unchanged. ZINF_QUEUE_SLICE_US sets
 * the slice (0: leave the default). */
typedef struct SchedAttr { /* the kernel's struct sched_attr (its header clashes with <sched.h>) */
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
} SchedAttr;

static void ask_short_slice(int queue) {
    if (queue == Q_COMPUTE) return;
    const char *e = getenv("ZINF_QUEUE_SLICE_US");
    long us = e ? atol(e) : 100;
    if (us <= 0) return;
    SchedAttr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.sched_policy = SCHED_OTHER;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)); /* kept: a run under `nice` stays niced */
    a.sched_nice = errno ? 0 : nice;
    a.sched_runtime = (uint64_t)us * 1000;
    (void)syscall(SYS_sched_setattr, 0, &a, 0); /* a refusal leaves the default slice */
}

/* After a completion (lock held): signals the workers whose instruction is
 * now ready; every sleeping one after a failure. */
static void wake(QSync *s, bool all) {
    for (int k = 0; k < PLAN_NQUEUES; k++)
        if (s->waiting[k] >= 0 && s->worker[k] && (all || deps_done(s->worker[k], (uint32_t)s->waiting[k])))
            pthread_cond_signal(&s->cv[k]);
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    Qrun *q = w->q;
    QSync *s = q->sync;
    QrunBatchFn batch = q->batch[w->queue];
    uint32_t idx[QRUN_BATCH_MAX];
    ask_short_slice(w->queue);
    for (uint32_t i = w->begin; i < w->end; i++) {
        if (!mine(w, i)) continue;
        pthread_mutex_lock(&s->mu);
        for (;;) {
            if (q->failed) { pthread_mutex_unlock(&s->mu); return NULL; }
            if (deps_done(w, i)) break;
            s->waiting[w->queue] = i;
            pthread_cond_wait(&s->cv[w->queue], &s->mu);
            s->waiting[w->queue] = -1;
        }
        idx[0] = i;
        int n = batch ? gather(w, idx) : 1;
        pthread_mutex_unlock(&s->mu);
        char err[512] = "";
        q->wait_now[w->queue] = 0;
        double t0 = qrun_now(q);
        int rc = n > 1 ? batch(q->ctx, idx, n, w->queue, err, sizeof err) : q->fn(q->ctx, i, w->queue, err, sizeof err);
        double t1 = qrun_now(q);
        pthread_mutex_lock(&s->mu);
        double waited = q->wait_now[w->queue];
        if (waited > t1 - t0) waited = t1 - t0;
        for (int k = 0; k < n; k++) {
            /* a batch's members share its time: each is busy for its share, in flight beside the others for the rest */
            QrunTiming *t = &q->timing[idx[k]];
            t->start = t0;
            t->end = t1;
            t->wait = n > 1 ? (t1 - t0) * (1 - 1.0 / n) : waited;
            if (rc == 0) q->done[idx[k]] = q->gen;
        }
        q->busy[w->queue] += t1 - t0 - waited;
        q->waited[w->queue] += waited;
        if (n > 1) {
            q->batches[w->queue]++;
            q->batched[w->queue] += (uint64_t)n;
        }
        if (rc != 0 && !q->failed) {
            q->failed = 1;
            snprintf(q->err, sizeof q->err, "%s", err[0] ? err : "instruction failed");
        }
        wake(s, q->failed);
        pthread_mutex_unlock(&s->mu);
        if (rc != 0) return NULL;
        i = idx[n - 1];
    }
    return NULL;
}

int qrun_range(Qrun *q, uint32_t begin, uint32_t end) { return qrun_subset(q, begin, end, NULL); }

int qrun_subset(Qrun *q, uint32_t begin, uint32_t end, const uint8_t *run) {
    if (end > q->plan->ninstrs || begin > end) {
        snprintf(q->err, sizeof q->err, "instruction range %u..%u outside the plan", begin, end);
        return -1;
    }
    q->gen++;
    q->failed = 0;
    q->err[0] = 0;
    bool used[PLAN_NQUEUES] = {0};
    for (uint32_t i = begin; i < end; i++)
        if (q->plan->instrs[i].queue < PLAN_NQUEUES && (!run || run[i])) used[q->plan->instrs[i].queue] = true;
    pthread_t th[PLAN_NQUEUES];
    Worker w[PLAN_NQUEUES];
    bool started[PLAN_NQUEUES] = {0};
    for (int k = 0; k < PLAN_NQUEUES; k++) {
        if (!used[k]) continue;
        w[k] = (Worker){q, k, begin, end, run};
        ((QSync *)q->sync)->worker[k] = &w[k];
        if (pthread_create(&th[k], NULL, worker_main, &w[k]) != 0) {
            QSync *s = q->sync;
            pthread_mutex_lock(&s->mu);
            q->failed = 1;
            snprintf(q->err, sizeof q->err, "cannot start the %s queue's thread", plan_queue_names[k]);
            wake(s, true);
            pthread_mutex_unlock(&s->mu);
            break;
        }
        started[k] = true;
    }
    for (int k = 0; k < PLAN_NQUEUES; k++)
        if (started[k]) pthread_join(th[k], NULL);
    return q->failed ? -1 : 0;
}
