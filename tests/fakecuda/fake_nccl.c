/* fake_nccl: NCCL (libnccl.so.2) over MPI, for the fake CUDA driver of
 * fake_cuda.c. A collective is enqueued on the given (fake) stream with
 * cuLaunchHostFunc and runs there, over a communicator duplicated from
 * MPI_COMM_WORLD at init, when the stream reaches it: its ordering with
 * kernels and copies is the stream's, as with the real library. Without
 * MPI initialised only one rank is allowed and collectives are local copies.
 *
 * Reductions are computed in rank order 0..R-1 from every rank's data (all
 * gathered first), in float for f32, bf16 and f16 (f64 in double, integers
 * in their type), so every rank gets bit-identical results, reproducibly.
 * MPI requests are polled, never waited on, so ncclCommAbort can release a
 * collective that waits for a peer.
 *
 * Fault injection (per process; n counts this process's collectives from 1):
 *   FAKENCCL_HANG="rank:n"         the n-th collective on that rank never
 *                                  completes, until ncclCommAbort
 *   FAKENCCL_ASYNC_ERROR="rank:n"  after the n-th collective on that rank,
 *                                  ncclCommGetAsyncError says ncclRemoteError
 *                                  (and its output is garbage: 0xff bytes)
 *   FAKENCCL_ABORT_GRACE_MS (2000) how long an aborted collective still
 *                                  waits for its peers (which are aborting
 *                                  too) to complete the MPI exchange, so no
 *                                  request is left behind */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "half.h"

#define EXPORT __attribute__((visibility("default")))
enum { MAGIC_COMM = 0x4e43434cu };

struct ncclComm {
    uint32_t magic;
    int nranks, rank, dev, mpi;
    MPI_Comm mc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                  /* the user's, plus one per collective not yet run */
    int queued, running;       /* collectives enqueued and not finished; executing now */
    atomic_int aborted;
    int freed_mpi;
    atomic_int async_err;      /* ncclResult_t */
    int leaked;                /* MPI requests an abort left behind */
};

enum { K_ALLGATHER, K_REDUCESCATTER, K_ALLREDUCE, K_BROADCAST };
static const char *const kind_name[] = {"ncclAllGather", "ncclReduceScatter", "ncclAllReduce", "ncclBroadcast"};

typedef struct Coll {
    ncclComm_t comm;
    int kind, root, hang, async_err;
    const void *send;
    void *recv;
    size_t count; /* AllGather: per rank sent; ReduceScatter: per rank received; else the buffer */
    ncclDataType_t dt;
    ncclRedOp_t op;
    long index;
} Coll;

static CUresult (*launch_host)(CUstream, CUhostFn, void *);
static CUresult (*ctx_get_device)(CUdevice *);
static void *cuda_lib;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_long g_ncoll;
static char g_last[512] = "";
static __thread int t_group;

static struct {
    int hang_rank, async_rank;
    long hang_n, async_n;
    long grace_ms;
} cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

static void parse_rank_n(const char *env, int *rank, long *n) {
    *rank = -1;
    *n = 0;
    const char *s = getenv(env);
    if (!s || !*s) return;
    if (sscanf(s, "%d:%ld", rank, n) != 2 || *n <= 0) {
        fprintf(stderr, "fakenccl: %s='%s' is not rank:n; ignored\n", env, s);
        *rank = -1;
        *n = 0;
    }
}

static void cfg_load(void) {
    parse_rank_n("FAKENCCL_HANG", &cfg.hang_rank, &cfg.hang_n);
    parse_rank_n("FAKENCCL_ASYNC_ERROR", &cfg.async_rank, &cfg.async_n);
    const char *g = getenv("FAKENCCL_ABORT_GRACE_MS");
    cfg.grace_ms = g && *g ? atol(g) : 2000;
}

__attribute__((format(printf, 2, 3))) static ncclResult_t fail(ncclResult_t rc, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_mu);
    snprintf(g_last, sizeof g_last, "fake NCCL: %s", msg);
    pthread_mutex_unlock(&g_mu);
    fprintf(stderr, "fakenccl: %s\n", msg);
    return rc;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The fake driver, already loaded by the executor: its cuLaunchHostFunc. */
static int cuda_get(void) {
    pthread_mutex_lock(&g_mu);
    if (!launch_host) {
        cuda_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (cuda_lib) {
            *(void **)&launch_host = dlsym(cuda_lib, "cuLaunchHostFunc");
            *(void **)&ctx_get_device = dlsym(cuda_lib, "cuCtxGetDevice");
        }
    }
    int ok = launch_host != NULL;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

__attribute__((destructor)) static void nccl_fini(void) {
    if (cuda_lib) dlclose(cuda_lib);
    cuda_lib = NULL;
}

/* ---- results, version, ids ------------------------------------------------- */

EXPORT const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

EXPORT const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm; /* one message per process */
    return g_last;
}

EXPORT ncclResult_t ncclGetVersion(int *version) {
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    if (!uniqueId) return ncclInvalidArgument;
    memset(uniqueId, 0, sizeof *uniqueId);
    /* not needed (the communicator is MPI_COMM_WORLD's), but recognisable */
    snprintf(uniqueId->internal, sizeof uniqueId->internal, "fakenccl %ld", (long)time(NULL));
    return ncclSuccess;
}

/* ---- communicators ------------------------------------------------------------ */

static ncclComm_t comm_ok(ncclComm_t c) { return c && c->magic == MAGIC_COMM ? c : NULL; }

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    (void)commId;
    pthread_once(&cfg_once, cfg_load);
    if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *comm = NULL;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    int mpi = init && !fin;
    int size = 1, me = 0;
    if (mpi) {
        int prov = 0;
        MPI_Query_thread(&prov);
        if (prov < MPI_THREAD_MULTIPLE)
            return fail(ncclInvalidUsage,
                        "ncclCommInitRank: MPI was initialised at thread level %d, not MPI_THREAD_MULTIPLE "
                        "(the fake's collectives run on stream threads)",
                        prov);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
    }
    if (nranks != size)
        return fail(ncclInvalidArgument, "ncclCommInitRank: nranks %d is not the MPI world's size %d", nranks, size);
    if (rank != me)
        return fail(ncclInvalidArgument, "ncclCommInitRank: rank %d is not this process's MPI rank %d", rank, me);
    if (!cuda_get())
        return fail(ncclUnhandledCudaError, "ncclCommInitRank: libcuda.so.1 is not loaded or lacks cuLaunchHostFunc");
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c) return fail(ncclSystemError, "ncclCommInitRank: out of memory");
    c->magic = MAGIC_COMM;
    c->nranks = nranks;
    c->rank = rank;
    c->mpi = mpi;
    c->refs = 1;
    CUdevice dev = 0;
    if (ctx_get_device && ctx_get_device(&dev) == CUDA_SUCCESS) c->dev = dev;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (mpi && MPI_Comm_dup(MPI_COMM_WORLD, &c->mc) != MPI_SUCCESS) {
        free(c);
        return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_dup failed");
    }
    *comm = c;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                           ncclConfig_t *config) {
    (void)config; /* blocking, always */
    return ncclCommInitRank(comm, nranks, commId, rank);
}

static void comm_unref_locked(ncclComm_t c) { /* c->mu held; unlocks it */
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (!last) return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    c->magic = 0;
    free(c);
}

static void comm_free_mpi(ncclComm_t c) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (c->mpi && !c->freed_mpi && !fin) MPI_Comm_free(&c->mc);
    c->freed_mpi = 1;
}

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    ncclComm_t c = comm_ok(comm);
    if (!c) return ncclInvalidArgument;
    pthread_mutex_lock(&c->mu);
    while (c->queued > 0 && !atomic_load(&c->aborted)) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return (ncclResult_t)atomic_load(&c->async_err);
}

/* Waits for the collectives enqueued (as NCCL's destroy after finalize does), then frees. */
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    ncclComm_t c = comm_ok(comm);
    if (!c) return ncclInvalidArgument;
    pthread_mutex_lock(&c->mu);
    while (c->queued > 0 && !atomic_load(&c->aborted)) pthread_cond_wait(&c->cv, &c->mu);
    while (c->running > 0) pthread_cond_wait(&c->cv, &c->mu);
    c->magic = MAGIC_COMM ^ 1;
    comm_free_mpi(c);
    comm_unref_locked(c);
    return ncclSuccess;
}

/* Releases every collective of the communicator, hung or waiting for a peer,
 * and returns when none runs any more: no stream op touches its buffers
 * after this. Collectives still queued do nothing when their stream reaches
 * them. */
EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
    ncclComm_t c = comm_ok(comm);
    if (!c) return ncclInvalidArgument;
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->aborted, 1);
    pthread_cond_broadcast(&c->cv);
    while (c->running > 0) pthread_cond_wait(&c->cv, &c->mu);
    c->magic = MAGIC_COMM ^ 1;
    if (c->leaked)
        fprintf(stderr, "fakenccl: rank %d: abort left %d MPI request(s) that the peers never completed\n", c->rank, c->leaked);
    comm_free_mpi(c);
    comm_unref_locked(c);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    ncclComm_t c = comm_ok(comm);
    if (!c || !asyncError) return ncclInvalidArgument;
    *asyncError = (ncclResult_t)atomic_load(&c->async_err);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    ncclComm_t c = comm_ok(comm);
    if (!c || !count) return ncclInvalidArgument;
    *count = c->nranks;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    ncclComm_t c = comm_ok(comm);
    if (!c || !rank) return ncclInvalidArgument;
    *rank = c->rank;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
    ncclComm_t c = comm_ok(comm);
    if (!c || !device) return ncclInvalidArgument;
    *device = c->dev;
    return ncclSuccess;
}

/* Collectives go onto their streams as they are called, so a group only has
 * to be well formed. */
EXPORT ncclResult_t ncclGroupStart(void) {
    t_group++;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupEnd(void) {
    if (t_group <= 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    t_group--;
    return ncclSuccess;
}

/* ---- element types and reductions -------------------------------------------------- */

static size_t dt_size(ncclDataType_t dt) {
    switch (dt) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

static int dt_reducible(ncclDataType_t dt) { return dt != ncclFloat8e4m3 && dt != ncclFloat8e5m2 && dt_size(dt); }

#define RED(acc, v, op)                                                   \
    do {                                                                  \
        switch (op) {                                                     \
        case ncclProd: acc = acc * (v); break;                            \
        case ncclMax: acc = (v) > acc ? (v) : acc; break;                 \
        case ncclMin: acc = (v) < acc ? (v) : acc; break;                 \
        default: acc = acc + (v); break; /* sum, avg */                   \
        }                                                                 \
    } while (0)

static float ld_f(const void *b, size_t i, ncclDataType_t dt) {
    if (dt == ncclFloat32) {
        float f;
        memcpy(&f, (const char *)b + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)b + 2 * i, 2);
    return dt == ncclBfloat16 ? half_bf16_to_f32(h) : half_f16_to_f32(h);
}

static void st_f(void *b, size_t i, ncclDataType_t dt, float f) {
    if (dt == ncclFloat32) {
        memcpy((char *)b + 4 * i, &f, 4);
        return;
    }
    uint16_t h = dt == ncclBfloat16 ? half_f32_to_bf16(f) : half_f32_to_f16(f);
    memcpy((char *)b + 2 * i, &h, 2);
}

#define RED_INT(T)                                                            \
    do {                                                                      \
        const T *in = blocks;                                                 \
        T *o = out;                                                           \
        for (size_t i = 0; i < count; i++) {                                  \
            T acc = in[i];                                                    \
            for (int r = 1; r < R; r++) RED(acc, in[(size_t)r * count + i], op); \
            if (op == ncclAvg) acc = (T)(acc / (T)R);                         \
            o[i] = acc;                                                       \
        }                                                                     \
    } while (0)

/* out[i] = blocks[0][i] op blocks[1][i] op ... in rank order. out may alias
 * no block (the blocks are a private gather buffer). */
static void reduce(void *out, const void *blocks, int R, size_t count, ncclDataType_t dt, ncclRedOp_t op) {
    switch (dt) {
    case ncclFloat32: case ncclFloat16: case ncclBfloat16:
        for (size_t i = 0; i < count; i++) {
            float acc = ld_f(blocks, i, dt);
            for (int r = 1; r < R; r++) {
                float v = ld_f(blocks, (size_t)r * count + i, dt);
                RED(acc, v, op);
            }
            if (op == ncclAvg) acc /= (float)R;
            st_f(out, i, dt, acc);
        }
        break;
    case ncclFloat64: RED_INT(double); break;
    case ncclInt8: RED_INT(int8_t); break;
    case ncclUint8: RED_INT(uint8_t); break;
    case ncclInt32: RED_INT(int32_t); break;
    case ncclUint32: RED_INT(uint32_t); break;
    case ncclInt64: RED_INT(int64_t); break;
    case ncclUint64: RED_INT(uint64_t); break;
    default: break;
    }
}

/* ---- execution on the stream ---------------------------------------------------------- */

/* Polls r to completion. After an abort it keeps polling for the grace
 * period only (the peers abort too and complete the exchange); returns -1
 * when it gave up, the request left behind. */
static int wait_req(ncclComm_t c, MPI_Request *r) {
    double deadline = -1;
    for (unsigned spin = 0;; spin++) {
        int flag = 0;
        MPI_Test(r, &flag, MPI_STATUS_IGNORE);
        if (flag) return 0;
        if (atomic_load(&c->aborted)) {
            double t = now_ms();
            if (deadline < 0) deadline = t + (double)cfg.grace_ms;
            else if (t > deadline) return -1;
        }
        if (spin > 1000) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

static int exchange(Coll *k, void *gather) {
    ncclComm_t c = k->comm;
    size_t es = dt_size(k->dt), bytes = k->count * es;
    if (!c->mpi) { /* one rank */
        if (k->kind == K_ALLGATHER || k->kind == K_BROADCAST) memmove(k->recv, k->send, bytes);
        else memcpy(gather, k->send, bytes);
        return 0;
    }
    MPI_Request req;
    int n = (int)bytes, rc;
    switch (k->kind) {
    case K_ALLGATHER: /* gather is a copy of send when it overlaps recv (NCCL's in-place form, on some ranks only) */
        rc = MPI_Iallgather(gather ? gather : k->send, n, MPI_BYTE, k->recv, n, MPI_BYTE, c->mc, &req);
        break;
    case K_REDUCESCATTER: /* rank r's slice of every rank's send, in rank order */
        rc = MPI_Ialltoall(k->send, n, MPI_BYTE, gather, n, MPI_BYTE, c->mc, &req);
        break;
    case K_ALLREDUCE:
        rc = MPI_Iallgather(k->send, n, MPI_BYTE, gather, n, MPI_BYTE, c->mc, &req);
        break;
    default:
        if (c->rank == k->root && k->send != k->recv) memmove(k->recv, k->send, bytes);
        rc = MPI_Ibcast(k->recv, n, MPI_BYTE, k->root, c->mc, &req);
        break;
    }
    if (rc != MPI_SUCCESS) return -1;
    if (wait_req(c, &req) != 0) {
        pthread_mutex_lock(&c->mu);
        c->leaked++;
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    return 0;
}

static void coll_run(void *arg) {
    Coll *k = arg;
    ncclComm_t c = k->comm;
    pthread_mutex_lock(&c->mu);
    int skip = atomic_load(&c->aborted);
    if (!skip) c->running++;
    pthread_mutex_unlock(&c->mu);
    if (!skip) {
        if (k->hang) {
            fprintf(stderr, "fakenccl: rank %d: FAKENCCL_HANG: collective %ld (%s) hangs until ncclCommAbort\n", c->rank,
                    k->index, kind_name[k->kind]);
            pthread_mutex_lock(&c->mu);
            while (!atomic_load(&c->aborted)) pthread_cond_wait(&c->cv, &c->mu);
            pthread_mutex_unlock(&c->mu);
        }
        size_t es = dt_size(k->dt), bytes = k->count * es;
        void *gather = NULL;
        int bad = 0;
        int red = k->kind == K_REDUCESCATTER || k->kind == K_ALLREDUCE;
        const char *sb = k->send, *rb = k->recv;
        if (red) {
            gather = malloc(bytes * (size_t)c->nranks + 1);
            bad = !gather;
        } else if (k->kind == K_ALLGATHER && c->mpi && sb < rb + bytes * (size_t)c->nranks && rb < sb + bytes) {
            gather = malloc(bytes + 1); /* MPI wants disjoint buffers or MPI_IN_PLACE on every rank */
            bad = !gather;
            if (gather) memcpy(gather, sb, bytes);
        }
        if (!bad) bad = exchange(k, gather) != 0;
        if (!bad && red) reduce(k->recv, gather, c->nranks, k->count, k->dt, k->op);
        free(gather);
        if (bad && !atomic_load(&c->aborted)) {
            fprintf(stderr, "fakenccl: rank %d: %s failed (MPI error or out of memory)\n", c->rank, kind_name[k->kind]);
            atomic_store(&c->async_err, ncclSystemError);
        }
        if (k->async_err) {
            size_t out = k->kind == K_ALLGATHER ? bytes * (size_t)c->nranks : bytes;
            memset(k->recv, 0xff, out);
            fprintf(stderr, "fakenccl: rank %d: FAKENCCL_ASYNC_ERROR: collective %ld (%s) reports ncclRemoteError\n",
                    c->rank, k->index, kind_name[k->kind]);
            atomic_store(&c->async_err, ncclRemoteError);
        }
    }
    pthread_mutex_lock(&c->mu);
    if (!skip) c->running--;
    c->queued--;
    pthread_cond_broadcast(&c->cv);
    free(k);
    comm_unref_locked(c);
}

static ncclResult_t enqueue(int kind, const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                            int root, ncclComm_t comm, cudaStream_t stream) {
    pthread_once(&cfg_once, cfg_load);
    const char *name = kind_name[kind];
    ncclComm_t c = comm_ok(comm);
    if (!c) return fail(ncclInvalidArgument, "%s: invalid communicator (destroyed or aborted?)", name);
    if (atomic_load(&c->aborted)) return fail(ncclInvalidUsage, "%s: the communicator was aborted", name);
    if (!dt_size(dt)) return fail(ncclInvalidArgument, "%s: invalid datatype %d", name, (int)dt);
    if ((kind == K_REDUCESCATTER || kind == K_ALLREDUCE) && (!dt_reducible(dt) || (int)op < 0 || op >= ncclNumOps))
        return fail(ncclInvalidArgument, "%s: reduction %d on datatype %d not supported by the fake", name, (int)op, (int)dt);
    if (kind == K_BROADCAST && (root < 0 || root >= c->nranks)) return fail(ncclInvalidArgument, "%s: root %d out of range", name, root);
    if (count && (!recv || (!send && (kind != K_BROADCAST || root == c->rank))))
        return fail(ncclInvalidArgument, "%s: NULL buffer for %zu elements", name, count);
    if (count * dt_size(dt) > 0x7fffffffu)
        return fail(ncclInvalidArgument, "%s: %zu elements exceed the fake's 2 GiB per-rank limit (MPI int counts)", name,
                    count);
    if (count == 0) return ncclSuccess;
    Coll *k = calloc(1, sizeof *k);
    if (!k) return fail(ncclSystemError, "%s: out of memory", name);
    k->comm = c;
    k->kind = kind;
    k->send = send;
    k->recv = recv;
    k->count = count;
    k->dt = dt;
    k->op = op;
    k->root = root;
    k->index = atomic_fetch_add(&g_ncoll, 1) + 1;
    k->hang = cfg.hang_n == k->index && cfg.hang_rank == c->rank;
    k->async_err = cfg.async_n == k->index && cfg.async_rank == c->rank;
    pthread_mutex_lock(&c->mu);
    c->refs++;
    c->queued++;
    pthread_mutex_unlock(&c->mu);
    CUresult rc = launch_host((CUstream)stream, coll_run, k);
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_lock(&c->mu);
        c->queued--;
        free(k);
        comm_unref_locked(c);
        return fail(ncclUnhandledCudaError, "%s: cuLaunchHostFunc failed with CUresult %d", name, (int)rc);
    }
    return ncclSuccess;
}

EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
    return enqueue(K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}

EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return enqueue(K_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return enqueue(K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
    return enqueue(K_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}
