#include "comm_wait.h"
#include "clock.h"
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

static CommStatus mpi_fail(Comm *c, const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    snprintf(c->err, sizeof c->err, "rank %d: %.40s failed: %.180s", c->rank, what, msg);
    return COMM_EMPI;
}

enum { NAP_ARRIVE_NS = 50000, NAP_XFER_NS = 2000, CHUNK = 1 << 30 };

/* Polls req until done or the deadline; naps of nap_ns between tests,
 * doubling every 8 tests up to NAP_ARRIVE_NS. */
static CommStatus poll_req(Comm *c, MPI_Request *req, const char *what, double deadline, long nap_ns) {
    /* once per thread: short sleeps must stay short (the default slack is 50 us) */
    static _Thread_local bool slack_set;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        slack_set = true;
    }
    struct timespec nap = {0, nap_ns};
    for (int polls = 1;; polls++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(c, what, rc);
        if (done) return COMM_OK;
        if (clock_mono_s() > deadline) {
            snprintf(c->err, sizeof c->err, "rank %d: %s did not complete within %.0f s: another rank died or hangs",
                     c->rank, what, c->timeout_s);
            return COMM_ETIMEDOUT;
        }
        nanosleep(&nap, NULL);
        /* a transfer that lasts gets tested less often: short ones finish
         * quickly, long ones do not keep waking the thread */
        if (polls % 8 == 0 && nap.tv_nsec < NAP_ARRIVE_NS) nap.tv_nsec *= 2;
    }
}

/* Every rank has arrived when the barrier completes; the time until then is waiting. */
static CommStatus arrive(Comm *c, const char *what, double t0, double *deadline, CommWait *w) {
    *deadline = t0 + c->timeout_s;
    MPI_Request req;
    int rc = MPI_Ibarrier((MPI_Comm)c->world, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Ibarrier", rc);
    CommStatus s = poll_req(c, &req, what, *deadline, NAP_ARRIVE_NS);
    if (w) w->wait_s = clock_mono_s() - t0;
    return s;
}

static CommStatus transfer(Comm *c, MPI_Request *req, const char *what, double deadline, double t1, CommWait *w) {
    CommStatus s = poll_req(c, req, what, deadline, NAP_XFER_NS);
    if (w) w->xfer_s = clock_mono_s() - t1;
    return s;
}

static bool alone(const Comm *c) { return !c->mpi || c->size == 1; }

CommStatus commw_allgather(Comm *c, const void *send, void *recv, size_t bytes, CommWait *w) {
    if (w) *w = (CommWait){0, 0};
    if (alone(c) || bytes > (size_t)CHUNK) return comm_allgather(c, send, recv, bytes); /* no wait to split */
    double t0 = clock_mono_s(), deadline;
    CommStatus s = arrive(c, "all-gather", t0, &deadline, w);
    if (s) return s;
    double t1 = clock_mono_s();
    MPI_Request req;
    int rc = MPI_Iallgather(send == recv ? MPI_IN_PLACE : send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                            (MPI_Comm)c->world, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Iallgather", rc);
    return transfer(c, &req, "all-gather", deadline, t1, w);
}

CommStatus commw_reduce_scatter_f32(Comm *c, const float *send, float *recv, size_t count, CommWait *w) {
    if (w) *w = (CommWait){0, 0};
    if (alone(c) || count > (size_t)CHUNK / sizeof(float)) return comm_reduce_scatter_f32(c, send, recv, count);
    /* comm.c's algorithm: every rank's block r to rank r, summed in rank order */
    size_t bytes = count * sizeof(float);
    float *tmp = malloc(bytes * (size_t)c->size);
    if (!tmp) {
        snprintf(c->err, sizeof c->err, "rank %d: out of memory in reduce-scatter", c->rank);
        return COMM_EARG;
    }
    double t0 = clock_mono_s(), deadline;
    CommStatus s = arrive(c, "reduce-scatter", t0, &deadline, w);
    if (s == COMM_OK) {
        double t1 = clock_mono_s();
        MPI_Request req;
        int rc = MPI_Ialltoall(send, (int)count, MPI_FLOAT, tmp, (int)count, MPI_FLOAT, (MPI_Comm)c->world, &req);
        s = rc != MPI_SUCCESS ? mpi_fail(c, "MPI_Ialltoall", rc) : transfer(c, &req, "reduce-scatter", deadline, t1, w);
    }
    if (s == COMM_OK) {
        comm_sum_blocks_f32(tmp, c->size, count, recv);
    }
    free(tmp);
    return s;
}

static CommStatus allreduce(Comm *c, void *buf, size_t count, MPI_Datatype dt, size_t esz, CommWait *w) {
    double t0 = clock_mono_s(), deadline;
    if (count * esz > (size_t)CHUNK) {
        snprintf(c->err, sizeof c->err, "rank %d: all-reduce of %zu elements is too large", c->rank, count);
        return COMM_EARG;
    }
    CommStatus s = arrive(c, "all-reduce", t0, &deadline, w);
    if (s) return s;
    double t1 = clock_mono_s();
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, dt, MPI_SUM, (MPI_Comm)c->world, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Iallreduce", rc);
    return transfer(c, &req, "all-reduce", deadline, t1, w);
}

CommStatus commw_allreduce_sum_f32(Comm *c, float *buf, size_t count, CommWait *w) {
    if (w) *w = (CommWait){0, 0};
    if (alone(c)) return COMM_OK;
    return allreduce(c, buf, count, MPI_FLOAT, sizeof(float), w);
}

CommStatus commw_allreduce_sum_f64(Comm *c, double *buf, size_t count, CommWait *w) {
    if (w) *w = (CommWait){0, 0};
    if (alone(c)) return COMM_OK;
    return allreduce(c, buf, count, MPI_DOUBLE, sizeof(double), w);
}
