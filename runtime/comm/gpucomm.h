/* gpucomm: NCCL, loaded at run time, for the CUDA backend's collectives.
 *
 * libnccl.so.2 is opened with dlopen like the driver (runtime/cudrv), so
 * zinfrun starts on machines without it. One communicator over the job's
 * ranks: rank 0 makes the unique id, MPI broadcasts it (runtime/comm), every
 * rank joins with ncclCommInitRank on its own GPU. Collectives are enqueued
 * on a CUDA stream and return at once; their completion is the stream's.
 * Failures come back as values: the call, the file and line, NCCL's own
 * text, prefixed by the rank. A rank that waits on a collective polls
 * gpucomm_check (ncclCommGetAsyncError) beside its deadline, and on any error
 * aborts the communicator (gpucomm_close(.., true)) so that no rank hangs in
 * NCCL; the caller then ends the job through comm_abort. */
#ifndef ZINF_GPUCOMM_H
#define ZINF_GPUCOMM_H
#include <stdbool.h>
#include <stddef.h>
#include <cuda.h>
#include <nccl.h>
#include "comm.h"

typedef struct GpuComm {
    void *lib;
    ncclComm_t comm;
    int rank, size, version;
    ncclResult_t (*GetVersion)(int *);
    ncclResult_t (*GetUniqueId)(ncclUniqueId *);
    ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*CommAbort)(ncclComm_t);
    ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
    const char *(*GetErrorString)(ncclResult_t);
    const char *(*GetLastError)(ncclComm_t);
    ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
} GpuComm;

/* Opens NCCL and joins every rank of c (collective over c: every rank calls
 * it, with its CUDA context current). Returns 0, or -1 with why in err
 * ("rank 1: NCCL is not installed: libnccl.so.2: cannot open shared object
 * file"). On failure nothing stays open. */
int gpucomm_open(GpuComm *g, Comm *c, char *err, size_t errlen);
/* abort: ncclCommAbort (a peer failed, or a wait timed out; the library then
 * stays loaded), else ncclCommDestroy and dlclose. */
void gpucomm_close(GpuComm *g, bool abort);
/* ncclCommGetAsyncError: 0, or -1 with NCCL's text. */
int gpucomm_check(GpuComm *g, char *err, size_t errlen);
/* dtype: a DType code (lang/ast.h); bytes for all-gather. */
int gpucomm_allgather(GpuComm *g, CUdeviceptr send, CUdeviceptr recv, size_t bytes, CUstream s, char *err, size_t n);
int gpucomm_reduce_scatter(GpuComm *g, CUdeviceptr send, CUdeviceptr recv, size_t count, int dtype, CUstream s,
                           char *err, size_t n);
int gpucomm_allreduce(GpuComm *g, CUdeviceptr buf, size_t count, int dtype, CUstream s, char *err, size_t n);
/* "rank 0: ncclAllGather failed at runtime/comm/gpucomm.c:80: unhandled system error (...)" */
int gpucomm_fail(const GpuComm *g, ncclResult_t rc, const char *call, const char *file, int line, char *err,
                 size_t errlen);

#endif
