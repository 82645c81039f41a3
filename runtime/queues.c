#include "queues.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct QSync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} QSync;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double qrun_now(const Qrun *q) { return mono() - q->epoch; }

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
    pthread_cond_init(&s->cv, NULL);
    q->sync = s;
    q->epoch = mono();
    return 0;
}

void qrun_free(Qrun *q) {
    QSync *s = q->sync;
    if (s) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
    }
    free(q->done);
    free(q->timing);
    memset(q, 0, sizeof *q);
}

typedef struct Worker {
    Qrun *q;
    int queue;
    uint32_t begin, end;
    const uint8_t *run; /* NULL: every instruction of the range */
} Worker;

static void *worker_main(void *arg) {
    Worker *w = arg;
    Qrun *q = w->q;
    QSync *s = q->sync;
    const Plan *p = q->plan;
    for (uint32_t i = w->begin; i < w->end; i++) {
        const PlanInstr *in = &p->instrs[i];
        if (in->queue != w->queue || (w->run && !w->run[i])) continue;
        pthread_mutex_lock(&s->mu);
        for (;;) {
            if (q->failed) { pthread_mutex_unlock(&s->mu); return NULL; }
            bool ready = true;
            for (uint32_t k = 0; k < in->ndeps && ready; k++) {
                uint32_t d = p->deps[in->dep + k];
                if (d >= w->begin && d < w->end && (!w->run || w->run[d]) && q->done[d] != q->gen) ready = false;
            }
            if (ready) break;
            pthread_cond_wait(&s->cv, &s->mu);
        }
        pthread_mutex_unlock(&s->mu);
        char err[512] = "";
        double t0 = qrun_now(q);
        int rc = q->fn(q->ctx, i, w->queue, err, sizeof err);
        double t1 = qrun_now(q);
        pthread_mutex_lock(&s->mu);
        q->timing[i].start = t0;
        q->timing[i].end = t1;
        q->busy[w->queue] += t1 - t0;
        if (rc != 0) {
            if (!q->failed) {
                q->failed = 1;
                snprintf(q->err, sizeof q->err, "%s", err[0] ? err : "instruction failed");
            }
        } else {
            q->done[i] = q->gen;
        }
        pthread_cond_broadcast(&s->cv);
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
        if (pthread_create(&th[k], NULL, worker_main, &w[k]) != 0) {
            QSync *s = q->sync;
            pthread_mutex_lock(&s->mu);
            q->failed = 1;
            snprintf(q->err, sizeof q->err, "cannot start the %s queue's thread", plan_queue_names[k]);
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            break;
        }
        started[k] = true;
    }
    for (int k = 0; k < PLAN_NQUEUES; k++)
        if (started[k]) pthread_join(th[k], NULL);
    return q->failed ? -1 : 0;
}
