#include "qrun.h"
#include "clock.h"
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

double qrun_now(const Qrun *q) { return clock_mono_s() - q->epoch; }

void qrun_add_wait(Qrun *q, int worker, double seconds) {
    if (worker >= 0 && worker < PLAN_NQUEUES && seconds > 0) q->wait_now[worker] += seconds; /* only this worker writes it */
}

int qrun_init(Qrun *q, const Plan *p, QrunExecFn fn, void *ctx) {
    memset(q, 0, sizeof *q);
    q->plan = p;
    q->fn = fn;
    q->ctx = ctx;
    q->slice_us = 100;
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
    q->epoch = clock_mono_s();
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

void qrun_set_pipe(Qrun *q, int queue, const QrunPipe *pipe) {
    if (queue >= 0 && queue < PLAN_NQUEUES) {
        if (pipe) q->pipe[queue] = *pipe;
        else memset(&q->pipe[queue], 0, sizeof q->pipe[queue]);
    }
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

/* The queues other than compute move data for it and mostly wait; when
 * one is woken its work is short and something waits for it. On a machine
 * whose cores are all busy (the compute threads of every rank, other
 * jobs), a woken thread waits for the running one's time slice (about
 * 3 ms) unless it may preempt: a thread that asks for a short slice may
 * (EEVDF, Linux 6.12 and later: sched_attr.sched_runtime of a normal
 * thread; older kernels ignore it, nothing fails). No privilege needed;
 * the thread's share of the CPU is unchanged. Qrun.slice_us sets the
 * slice (0: leave the default). */
typedef struct SchedAttr { /* the kernel's struct sched_attr (its header clashes with <sched.h>) */
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
} SchedAttr;

static void ask_short_slice(int queue, long us) {
    if (queue == Q_COMPUTE) return;
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

/* The next instruction of w's queue at or after i, or w->end. */
static uint32_t next_mine(const Worker *w, uint32_t i) {
    while (i < w->end && !mine(w, i)) i++;
    return i;
}

/* One unretired instruction of a pipelined queue. */
typedef struct Flight {
    uint32_t i;
    int slot;
    bool ended;
    double t0, t1;
    double share; /* its part of the queue's busy time so far */
} Flight;

typedef struct Pipe {
    Worker *w;
    Flight f[QRUN_PIPE_MAX]; /* a ring in program order: f[head], ... */
    int head, n, open;       /* unretired; of them not ended */
    bool slot_used[QRUN_PIPE_MAX];
    double last, busy;       /* time of the last event; busy time so far */
} Pipe;

#define FLIGHT(P, k) (&(P)->f[((P)->head + (k)) % QRUN_PIPE_MAX])

/* Shares out the time since the last event among the ones in flight. */
static void pipe_tick(Pipe *pp, double now) {
    double dt = now - pp->last;
    pp->last = now;
    if (pp->open == 0 || dt <= 0) return;
    pp->busy += dt;
    for (int k = 0; k < pp->n; k++)
        if (!FLIGHT(pp, k)->ended) FLIGHT(pp, k)->share += dt / pp->open;
}

/* Whether instruction i touches bytes of one still in flight where either writes. */
static bool pipe_clash(const Pipe *pp, uint32_t i) {
    const Plan *p = pp->w->q->plan;
    for (int k = 0; k < pp->n; k++) {
        const Flight *f = &pp->f[(pp->head + k) % QRUN_PIPE_MAX];
        if (!f->ended && instrs_clash(p, &p->instrs[f->i], &p->instrs[i])) return true;
    }
    return false;
}

/* Asks the pipe which of the ones in flight ended (a failure: its message
 * into err, once). Returns -1 when one failed. */
static int pipe_poll(Pipe *pp, char *err, size_t errlen) {
    Qrun *q = pp->w->q;
    const QrunPipe *pf = &q->pipe[pp->w->queue];
    int rc = 0;
    pipe_tick(pp, qrun_now(q));
    for (int k = 0; k < pp->n; k++) {
        Flight *f = FLIGHT(pp, k);
        if (f->ended) continue;
        char e[512] = "";
        int r = pf->finished(q->ctx, f->slot, pp->w->queue, e, sizeof e);
        if (r == 0) continue;
        f->ended = true;
        f->t1 = pp->last;
        pp->open--;
        pp->slot_used[f->slot] = false;
        if (r < 0 && rc == 0) {
            rc = -1;
            snprintf(err, errlen, "%s", e[0] ? e : "instruction failed");
        }
    }
    return rc;
}

/* Retires the ended ones at the head, in program order: done for their
 * dependants, timings noted (caller holds the lock). Returns how many. */
static int pipe_retire(Pipe *pp) {
    Qrun *q = pp->w->q;
    int queue = pp->w->queue, retired = 0;
    for (; pp->n > 0 && pp->f[pp->head].ended; retired++) {
        const Flight *f = &pp->f[pp->head];
        QrunTiming *t = &q->timing[f->i];
        t->start = f->t0;
        t->end = f->t1;
        t->wait = f->t1 - f->t0 - f->share;
        if (t->wait < 0) t->wait = 0;
        q->waited[queue] += t->wait;
        q->done[f->i] = q->gen;
        pp->head = (pp->head + 1) % QRUN_PIPE_MAX;
        pp->n--;
    }
    return retired;
}

/* Notes a failure (lock held) and wakes every sleeper. */
static void fail_locked(Qrun *q, QSync *s, const char *err) {
    if (!q->failed) {
        q->failed = 1;
        snprintf(q->err, sizeof q->err, "%s", err[0] ? err : "instruction failed");
    }
    wake(s, true);
}

/* A pipelined queue's worker (qrun_set_pipe). */
static void pipe_run(Worker *w) {
    Qrun *q = w->q;
    QSync *s = q->sync;
    const QrunPipe *pf = &q->pipe[w->queue];
    Pipe pp;
    memset(&pp, 0, sizeof pp);
    pp.w = w;
    pp.last = qrun_now(q);
    uint32_t next = next_mine(w, w->begin);
    bool alone = false; /* next must run with nothing in flight */
    char err[512] = "";
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (q->failed) { /* nothing more is done: one that failed ended too */
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (pipe_retire(&pp)) wake(s, false);
        if (next >= w->end && pp.n == 0) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        bool ready = next < w->end && pp.n < QRUN_PIPE_MAX && !(alone && pp.open) && deps_done(w, next) &&
                     !pipe_clash(&pp, next);
        if (!ready && pp.open == 0) { /* nothing in flight to wait for: sleep until a dependency ends */
            s->waiting[w->queue] = next;
            pthread_cond_wait(&s->cv[w->queue], &s->mu);
            s->waiting[w->queue] = -1;
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        if (!ready) { /* wait for one in flight to end */
            int rc = pf->progress(q->ctx, 1, w->queue, err, sizeof err);
            if (rc == 0) rc = pipe_poll(&pp, err, sizeof err);
            if (rc != 0) {
                pthread_mutex_lock(&s->mu);
                fail_locked(q, s, err);
                pthread_mutex_unlock(&s->mu);
            }
            continue;
        }
        int slot = 0;
        while (pp.slot_used[slot]) slot++; /* n < QRUN_PIPE_MAX: one is free */
        double t_call = qrun_now(q);
        pipe_tick(&pp, t_call);
        int others = pp.open;
        q->wait_now[w->queue] = 0;
        int r = pf->start(q->ctx, next, slot, others, w->queue, err, sizeof err);
        double t_ret = qrun_now(q), waited = q->wait_now[w->queue];
        if (waited > t_ret - t_call) waited = t_ret - t_call;
        pipe_tick(&pp, t_call + waited); /* before it began: the others' time */
        if (r == QRUN_PIPE_ALONE && others > 0) { /* not started: its moment was the others' */
            pipe_tick(&pp, t_ret);
            alone = true;
            continue;
        }
        alone = false;
        if (r < 0) {
            pipe_tick(&pp, t_ret);
            pthread_mutex_lock(&s->mu);
            fail_locked(q, s, err);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        Flight *f = FLIGHT(&pp, pp.n);
        *f = (Flight){next, slot, false, pp.last, 0, 0};
        pp.n++, pp.open++;
        pipe_tick(&pp, t_ret); /* from its beginning to start's return: its own time */
        if (others > 0) q->overlapped[w->queue]++;
        if (pp.open > q->peak[w->queue]) q->peak[w->queue] = pp.open;
        if (r == 1) {
            pp.slot_used[slot] = true;
        } else {
            f->ended = true;
            f->t1 = pp.last;
            pp.open--;
        }
        next = next_mine(w, next + 1);
    }
    /* after a failure: wait for what is in flight, so no buffer stays in the kernel's hands */
    for (int tries = 0; pp.open > 0 && tries < 1000;) {
        char e[512];
        if (pf->progress(q->ctx, 1, w->queue, e, sizeof e) != 0) tries++; /* the ring itself fails: give up in time */
        pipe_poll(&pp, e, sizeof e);
    }
    pthread_mutex_lock(&s->mu);
    q->busy[w->queue] += pp.busy;
    pthread_mutex_unlock(&s->mu);
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    Qrun *q = w->q;
    QSync *s = q->sync;
    ask_short_slice(w->queue, q->slice_us);
    if (q->pipe[w->queue].start) {
        pipe_run(w);
        return NULL;
    }
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
        pthread_mutex_unlock(&s->mu);
        char err[512] = "";
        q->wait_now[w->queue] = 0;
        double t0 = qrun_now(q);
        int rc = q->fn(q->ctx, i, w->queue, err, sizeof err);
        double t1 = qrun_now(q);
        pthread_mutex_lock(&s->mu);
        double waited = q->wait_now[w->queue];
        if (waited > t1 - t0) waited = t1 - t0;
        QrunTiming *t = &q->timing[i];
        t->start = t0;
        t->end = t1;
        t->wait = waited;
        if (rc == 0) q->done[i] = q->gen;
        q->busy[w->queue] += t1 - t0 - waited;
        q->waited[w->queue] += waited;
        if (rc != 0 && !q->failed) {
            q->failed = 1;
            snprintf(q->err, sizeof q->err, "%s", err[0] ? err : "instruction failed");
        }
        wake(s, q->failed);
        pthread_mutex_unlock(&s->mu);
        if (rc != 0) return NULL;
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
