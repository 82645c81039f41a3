#include "gpucomm.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "vocab.h"

int gpucomm_fail(const GpuComm *g, ncclResult_t rc, const char *call, const char *file, int line, char *err,
                 size_t n) {
    const char *text = g && g->GetErrorString ? g->GetErrorString(rc) : NULL;
    const char *last = g && g->GetLastError && g->comm ? g->GetLastError(g->comm) : NULL;
    snprintf(err, n, "rank %d: %s failed at %s:%d: %s (ncclResult %d)%s%s", g ? g->rank : -1, call, file, line,
             text ? text : "no description", (int)rc, last && *last ? ": " : "", last && *last ? last : "");
    return -1;
}

#define NCCL_CHECK(g, call, err, n)                                                         \
    do {                                                                                    \
        ncclResult_t rc_ = (call);                                                          \
        if (rc_ != ncclSuccess) return gpucomm_fail((g), rc_, #call, __FILE__, __LINE__, err, n); \
    } while (0)

#define SYM(field, name)                                         \
    do {                                                         \
        *(void **)&g->field = dlsym(g->lib, name);               \
        if (!g->field) { missing = name; goto bad; }             \
    } while (0)

int gpucomm_open(GpuComm *g, Comm *c, char *err, size_t n) {
    memset(g, 0, sizeof *g);
    g->rank = c->rank;
    g->size = c->size;
    static const char *const names[] = {"libnccl.so.2", "libnccl.so"};
    char why[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof *names && !g->lib; i++) {
        g->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        const char *e = g->lib ? NULL : dlerror();
        if (!g->lib && !why[0]) snprintf(why, sizeof why, "%s", e ? e : "libnccl.so.2 not found");
    }
    /* Every rank learns whether every rank has NCCL before any joins, so a
     * rank without it cannot leave the others waiting in ncclCommInitRank. */
    int64_t missing_any = g->lib == NULL;
    if (comm_allreduce_max_i64(c, &missing_any) != COMM_OK) {
        snprintf(err, n, "rank %d: %s", c->rank, comm_last_error(c));
        goto out;
    }
    if (!g->lib) {
        snprintf(err, n, "rank %d: NCCL is not installed: %s", c->rank, why);
        goto out;
    }
    if (missing_any) {
        snprintf(err, n, "rank %d: another rank has no NCCL (libnccl.so.2)", c->rank);
        goto out;
    }
    const char *missing = NULL;
    SYM(GetVersion, "ncclGetVersion");
    SYM(GetUniqueId, "ncclGetUniqueId");
    SYM(CommInitRank, "ncclCommInitRank");
    SYM(CommDestroy, "ncclCommDestroy");
    SYM(CommAbort, "ncclCommAbort");
    SYM(CommGetAsyncError, "ncclCommGetAsyncError");
    SYM(GetErrorString, "ncclGetErrorString");
    SYM(AllGather, "ncclAllGather");
    SYM(ReduceScatter, "ncclReduceScatter");
    SYM(AllReduce, "ncclAllReduce");
    *(void **)&g->GetLastError = dlsym(g->lib, "ncclGetLastError"); /* 2.13 and later */
    g->GetVersion(&g->version);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int64_t bad_id = 0;
    if (c->rank == 0) {
        ncclResult_t rc = g->GetUniqueId(&id);
        if (rc != ncclSuccess) {
            gpucomm_fail(g, rc, "ncclGetUniqueId", __FILE__, __LINE__, err, n);
            bad_id = 1;
        }
    }
    if (comm_allreduce_max_i64(c, &bad_id) != COMM_OK || comm_bcast(c, &id, sizeof id, 0) != COMM_OK) {
        snprintf(err, n, "rank %d: %s", c->rank, comm_last_error(c));
        goto out;
    }
    if (bad_id) {
        if (c->rank != 0) snprintf(err, n, "rank %d: rank 0 could not make the NCCL unique id", c->rank);
        goto out;
    }
    ncclResult_t rc = g->CommInitRank(&g->comm, c->size, id, c->rank);
    if (rc != ncclSuccess) {
        g->comm = NULL;
        gpucomm_fail(g, rc, "ncclCommInitRank", __FILE__, __LINE__, err, n);
        goto out;
    }
    return 0;
bad:
    snprintf(err, n, "rank %d: the NCCL library lacks %s (NCCL too old?)", c->rank, missing);
out:
    gpucomm_close(g, true);
    return -1;
}

void gpucomm_close(GpuComm *g, bool abort) {
    if (g->comm) {
        if (abort) g->CommAbort(g->comm);
        else g->CommDestroy(g->comm);
    }
    /* After an abort NCCL's own threads (and collectives the abort released)
     * may still be running its code: the library stays mapped until exit. */
    if (g->lib && !abort) dlclose(g->lib);
    int rank = g->rank, size = g->size;
    memset(g, 0, sizeof *g);
    g->rank = rank;
    g->size = size;
}

int gpucomm_check(GpuComm *g, char *err, size_t n) {
    if (!g->comm) return 0;
    ncclResult_t a = ncclSuccess;
    NCCL_CHECK(g, g->CommGetAsyncError(g->comm, &a), err, n);
    if (a != ncclSuccess && a != ncclInProgress)
        return gpucomm_fail(g, a, "a collective (ncclCommGetAsyncError)", __FILE__, __LINE__, err, n);
    return 0;
}

static ncclDataType_t nccl_type(int dtype) {
    switch (dtype) {
    case DT_BF16: return ncclBfloat16;
    case DT_F16: return ncclFloat16;
    case DT_I32: return ncclInt32;
    default: return ncclFloat32;
    }
}

int gpucomm_allgather(GpuComm *g, CUdeviceptr send, CUdeviceptr recv, size_t bytes, CUstream s, char *err, size_t n) {
    NCCL_CHECK(g, g->AllGather((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, bytes, ncclUint8, g->comm,
                               (cudaStream_t)s),
               err, n);
    return 0;
}

int gpucomm_reduce_scatter(GpuComm *g, CUdeviceptr send, CUdeviceptr recv, size_t count, int dtype, CUstream s,
                           char *err, size_t n) {
    NCCL_CHECK(g, g->ReduceScatter((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count, nccl_type(dtype),
                                   ncclSum, g->comm, (cudaStream_t)s),
               err, n);
    return 0;
}

int gpucomm_allreduce(GpuComm *g, CUdeviceptr buf, size_t count, int dtype, CUstream s, char *err, size_t n) {
    NCCL_CHECK(g, g->AllReduce((const void *)(uintptr_t)buf, (void *)(uintptr_t)buf, count, nccl_type(dtype), ncclSum,
                               g->comm, (cudaStream_t)s),
               err, n);
    return 0;
}
