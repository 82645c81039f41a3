#include "comm.h"
#include "clock.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static MPI_Comm world_of(const Comm *c) { return (MPI_Comm)c->world; }

static CommStatus mpi_fail(Comm *c, const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    snprintf(c->err, sizeof c->err, "rank %d: %.40s failed: %.180s", c->rank, what, msg);
    return COMM_EMPI;
}

/* Polls a request until it completes or the deadline passes. */
static CommStatus wait_req(Comm *c, MPI_Request *req, const char *what) {
    double deadline = clock_mono_s() + c->timeout_s;
    int done = 0;
    struct timespec nap = {0, 50000}; /* 50 us: cheap on idle cores, fast enough to notice completion */
    for (;;) {
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(c, what, rc);
        if (done) return COMM_OK;
        if (clock_mono_s() > deadline) {
            snprintf(c->err, sizeof c->err,
                     "rank %d: %s did not complete within %.0f s: another rank died or hangs",
                     c->rank, what, c->timeout_s);
            return COMM_ETIMEDOUT;
        }
        nanosleep(&nap, NULL);
    }
}

static bool launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return true;
    return false;
}

/* An environment variable as a count; 0 when absent or not a number. */
static int env_count(const char *name) {
    const char *s = getenv(name);
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    return s && end != s && *end == '\0' && v > 0 && v < (1L << 30) ? (int)v : 0;
}

void comm_launcher_str(char *buf, size_t n) {
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    if (getenv("OMPI_COMM_WORLD_SIZE") && job)
        snprintf(buf, n, "mpirun in Slurm job %.20s", job);
    else if (getenv("OMPI_COMM_WORLD_SIZE"))
        snprintf(buf, n, "mpirun");
    else if (job && step && env_count("SLURM_STEP_NUM_TASKS"))
        snprintf(buf, n, "srun (Slurm job %.20s, step %.20s)", job, step);
    else if (launched_by_mpi())
        snprintf(buf, n, "a PMI launcher");
    else
        snprintf(buf, n, "none");
}

/* Every rank's (local rank, local size) gathered: each rank then derives
 * the same layout. */
static CommStatus learn_layout(Comm *c) {
    int mine[2] = {c->local_rank, c->local_size};
    int *all = malloc(sizeof mine * (size_t)c->size);
    if (!all) return snprintf(c->err, sizeof c->err, "rank %d: out of memory", c->rank), COMM_EARG;
    CommStatus st = comm_allgather(c, mine, all, sizeof mine);
    if (st == COMM_OK && !comm_layout_of(all, c->size, &c->layout)) {
        snprintf(c->err, sizeof c->err, "rank %d: MPI's node groups do not describe nodes", c->rank);
        st = COMM_EMPI;
    }
    free(all);
    return st;
}

CommStatus comm_init(Comm *c, int *argc, char ***argv, const CommOptions *o) {
    memset(c, 0, sizeof *c);
    c->size = 1;
    c->local_size = 1;
    c->layout = (CommLayout){1, 1, 1};
    const CommOptions none = {0};
    if (!o) o = &none;
    c->timeout_s = o->timeout_s > 0 ? o->timeout_s : 300;
    if (!o->force_mpi && !launched_by_mpi()) {
        /* srun's tasks learn their rank from an MPI plugin; without one
         * (--mpi=none) MPI would make each a world of one */
        int tasks = env_count("SLURM_STEP_NUM_TASKS");
        if (tasks <= 1) return COMM_OK;
        snprintf(c->err, sizeof c->err,
                 "srun started %d tasks but gave them no MPI bootstrap (no PMIX_RANK or PMI_SIZE in the environment), "
                 "so each would run alone: launch with srun --mpi=pmix (srun --mpi=list shows what this cluster offers)",
                 tasks);
        return COMM_ELAUNCH;
    }
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Init_thread", rc);
    c->mpi = true;
    /* Errors come back as codes so they can be reported with the rank. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    c->world = (void *)MPI_COMM_WORLD;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    MPI_Comm node;
    int k = o->node_split; /* tests only: see comm.h */
    if (k > 0 && k <= c->size)
        rc = MPI_Comm_split(MPI_COMM_WORLD, (int)((int64_t)c->rank * k / c->size), c->rank, &node);
    else
        rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Comm_split_type", rc);
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_size(node, &c->local_size);
    c->node = (void *)node;
    return learn_layout(c);
}

void comm_finalize(Comm *c) {
    if (!c->mpi) return;
    MPI_Comm node = (MPI_Comm)c->node;
    if (node != MPI_COMM_NULL && c->node) MPI_Comm_free(&node);
    MPI_Finalize();
    c->mpi = false;
}

void comm_abort(Comm *c, int code) {
    if (c->mpi) MPI_Abort(MPI_COMM_WORLD, code);
}

const char *comm_last_error(const Comm *c) { return c->err[0] ? c->err : "no error"; }

bool comm_layout_of(const int *pairs, int size, CommLayout *out) {
    CommLayout l = {0, 0, 0};
    int sum = 0;
    for (int r = 0; r < size; r++) {
        int local = pairs[2 * r], n = pairs[2 * r + 1];
        if (n < 1 || local < 0 || local >= n) return false;
        if (local != 0) continue;
        l.nodes++;
        sum += n;
        if (l.min_per_node == 0 || n < l.min_per_node) l.min_per_node = n;
        if (n > l.max_per_node) l.max_per_node = n;
    }
    if (l.nodes == 0 || sum != size) return false;
    *out = l;
    return true;
}

void comm_layout_str(const CommLayout *l, char *buf, size_t n) {
    const char *ns = l->nodes == 1 ? "" : "s";
    if (l->min_per_node == l->max_per_node)
        snprintf(buf, n, "%d node%s x %d rank%s", l->nodes, ns, l->max_per_node, l->max_per_node == 1 ? "" : "s");
    else
        snprintf(buf, n, "%d node%s x %d to %d ranks", l->nodes, ns, l->min_per_node, l->max_per_node);
}

int comm_layout_check(const CommLayout *l, int nodes, int per_node, int ranks, char *err, size_t n) {
    if (l->nodes == nodes && l->max_per_node <= per_node) return 0;
    char job[96];
    comm_layout_str(l, job, sizeof job);
    bool full = ranks == nodes * per_node;
    snprintf(err, n,
             "the plan is for %d node%s x %d GPU%s (%d rank%s); this job is %s: start %s%d rank%s on each of %d node%s "
             "(Open MPI: mpirun -np %d --map-by ppr:%d:node; Slurm: srun --mpi=pmix -N %d -n %d --ntasks-per-node=%d) "
             "or recompile for this layout",
             nodes, nodes == 1 ? "" : "s", per_node, per_node == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s", job,
             full ? "" : "at most ", per_node, per_node == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", ranks, per_node,
             nodes, ranks, per_node);
    return -1;
}

CommStatus comm_barrier(Comm *c) {
    if (!c->mpi || c->size == 1) return COMM_OK;
    MPI_Request r;
    int rc = MPI_Ibarrier(world_of(c), &r);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Ibarrier", rc);
    return wait_req(c, &r, "barrier");
}

/* MPI counts are int: move big buffers in chunks of at most 1 GiB. */
enum { CHUNK = 1 << 30 };

CommStatus comm_allgather(Comm *c, const void *send, void *recv, size_t bytes) {
    if (!c->mpi || c->size == 1) {
        if (recv != send) memmove(recv, send, bytes);
        return COMM_OK;
    }
    if (bytes > (size_t)CHUNK) {
        /* Gather piecewise into a strided layout: one chunk of every rank at a time. */
        for (size_t off = 0; off < bytes; off += CHUNK) {
            size_t n = bytes - off < (size_t)CHUNK ? bytes - off : (size_t)CHUNK;
            /* Each rank broadcasts its piece (rare: shards over 1 GiB). */
            for (int r = 0; r < c->size; r++) {
                char *dst = (char *)recv + (size_t)r * bytes + off;
                if (r == c->rank) memmove(dst, (const char *)send + off, n);
                CommStatus s = comm_bcast(c, dst, n, r);
                if (s) return s;
            }
        }
        return COMM_OK;
    }
    MPI_Request req;
    int rc = MPI_Iallgather(send == recv ? MPI_IN_PLACE : send, (int)bytes, MPI_BYTE, recv, (int)bytes,
                            MPI_BYTE, world_of(c), &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Iallgather", rc);
    return wait_req(c, &req, "all-gather");
}

void comm_sum_blocks_f32(const float *blocks, int nranks, size_t count, float *recv) {
    for (size_t i = 0; i < count; i++) {
        float acc = blocks[i];
        for (int r = 1; r < nranks; r++) acc += blocks[(size_t)r * count + i];
        recv[i] = acc;
    }
}

CommStatus comm_reduce_scatter_f32(Comm *c, const float *send, float *recv, size_t count) {
    if (!c->mpi || c->size == 1) {
        memmove(recv, send, count * sizeof(float));
        return COMM_OK;
    }
    if (count > (size_t)CHUNK / sizeof(float)) {
        snprintf(c->err, sizeof c->err, "rank %d: reduce-scatter of %zu floats per rank is too large", c->rank, count);
        return COMM_EARG;
    }
    /* Deterministic order: gather every rank's block r to rank r with an
     * all-to-all, then sum in rank order. MPI's own reduction order is
     * unspecified, which would make losses depend on the world's timing. */
    size_t bytes = count * sizeof(float);
    float *tmp = malloc(bytes * (size_t)c->size);
    if (!tmp) {
        snprintf(c->err, sizeof c->err, "rank %d: out of memory in reduce-scatter", c->rank);
        return COMM_EARG;
    }
    MPI_Request req;
    int rc = MPI_Ialltoall(send, (int)count, MPI_FLOAT, tmp, (int)count, MPI_FLOAT, world_of(c), &req);
    if (rc != MPI_SUCCESS) { free(tmp); return mpi_fail(c, "MPI_Ialltoall", rc); }
    CommStatus s = wait_req(c, &req, "reduce-scatter");
    if (s == COMM_OK) {
        comm_sum_blocks_f32(tmp, c->size, count, recv);
    }
    free(tmp);
    return s;
}

static CommStatus allreduce(Comm *c, void *buf, size_t count, MPI_Datatype dt, size_t esz, MPI_Op op, const char *what) {
    if (!c->mpi || c->size == 1) return COMM_OK;
    if (count * esz > (size_t)CHUNK) {
        snprintf(c->err, sizeof c->err, "rank %d: %s of %zu elements is too large", c->rank, what, count);
        return COMM_EARG;
    }
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, dt, op, world_of(c), &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Iallreduce", rc);
    return wait_req(c, &req, what);
}

CommStatus comm_allreduce_sum_f32(Comm *c, float *buf, size_t count) {
    return allreduce(c, buf, count, MPI_FLOAT, sizeof(float), MPI_SUM, "all-reduce");
}
CommStatus comm_allreduce_sum_f64(Comm *c, double *buf, size_t count) {
    return allreduce(c, buf, count, MPI_DOUBLE, sizeof(double), MPI_SUM, "all-reduce");
}
CommStatus comm_allreduce_max_i64(Comm *c, int64_t *v) {
    return allreduce(c, v, 1, MPI_INT64_T, sizeof(int64_t), MPI_MAX, "all-reduce");
}

int comm_agree(Comm *c, int rc) {
    int64_t v = rc ? c->rank + 1 : 0;
    if (comm_allreduce_max_i64(c, &v) != COMM_OK) return -1;
    return (int)v;
}

CommStatus comm_bcast(Comm *c, void *buf, size_t bytes, int root) {
    if (!c->mpi || c->size == 1) return COMM_OK;
    for (size_t off = 0; off < bytes; off += CHUNK) {
        size_t n = bytes - off < (size_t)CHUNK ? bytes - off : (size_t)CHUNK;
        MPI_Request req;
        int rc = MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, world_of(c), &req);
        if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Ibcast", rc);
        CommStatus s = wait_req(c, &req, "broadcast");
        if (s) return s;
    }
    return COMM_OK;
}
