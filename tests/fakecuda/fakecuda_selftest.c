/* fakecuda_selftest: checks the fake CUDA driver and the fake NCCL the way
 * the executor uses them: the driver opened by runtime/gpu/cudrv.c's
 * cudrv_open through LD_LIBRARY_PATH, NCCL by dlopen("libnccl.so.2").
 * Run by tests/e2e/fakecuda_self.sh, one mode per process (the fakes read
 * their environment once):
 *
 *   fakecuda_selftest driver PLAN   streams, events, copies, a real unit's
 *                                   kernels (FAKECUDA_UNITS prepared), one-rank NCCL,
 *                                   the fake cuBLASLt through runtime/gpu/cublaslt.c and misused
 *   fakecuda_selftest fail PLAN     with FAKECUDA_FAIL=cuMemAlloc_v2:3,kernel:1 FAKECUDA_MEM=1m
 *   fakecuda_selftest stub | nodev  with FAKECUDA_STUB=1 | FAKECUDA_DEVICES=0
 *   fakecuda_selftest nccl          under mpirun -np 2: collectives' values
 *   fakecuda_selftest hang          under mpirun -np 2 with FAKENCCL_HANG=1:2
 *                                   FAKENCCL_ASYNC_ERROR=0:1
 * Exit 0: every check passed; 1: a check failed (said on stderr). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "ast.h"
#include "cublaslt.h"
#include "cudrv.h"
#include "half.h"
#include "plan.h"

static CudaDrv d;
static int fails, rank;
static CUresult (*LaunchHostFunc)(CUstream, CUhostFn, void *);
static CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            fails++;                                                      \
        }                                                                 \
    } while (0)
#define OK(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)
#define NOK(call) CHECK((call) == ncclSuccess, "%s", #call)

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* a host function that holds its stream until the flag is set */
static void CUDA_CB hold(void *flag) {
    while (!atomic_load((atomic_int *)flag)) sleep_ms(1);
}

static int open_driver(void) {
    char err[512];
    if (cudrv_open(&d, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: cudrv_open: %s\n", rank, err);
        return -1;
    }
    *(void **)&LaunchHostFunc = dlsym(d.lib, "cuLaunchHostFunc");
    *(void **)&MemcpyHtoD = dlsym(d.lib, "cuMemcpyHtoD_v2");
    if (!LaunchHostFunc || !MemcpyHtoD) {
        fprintf(stderr, "rank %d: the fake lacks cuLaunchHostFunc or cuMemcpyHtoD_v2\n", rank);
        return -1;
    }
    CUdevice dev;
    CUcontext ctx;
    if (d.DeviceGet(&dev, 0) || d.DevicePrimaryCtxRetain(&ctx, dev) || d.CtxSetCurrent(ctx)) {
        fprintf(stderr, "rank %d: no context on device 0\n", rank);
        return -1;
    }
    return 0;
}

static void close_driver(void) {
    OK(d.CtxSynchronize());
    OK(d.DevicePrimaryCtxRelease(0));
    cudrv_close(&d);
}

/* ---- driver --------------------------------------------------------------------- */

static void check_device(void) {
    char name[128], arch[16], err[256];
    size_t mem = 0;
    CHECK(cudrv_describe(&d, 0, name, sizeof name, &mem, arch, sizeof arch, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(name, "zinf fake GPU (host emulation)"), "name '%s'", name);
    CHECK(!strcmp(arch, "sm_90"), "arch %s", arch);
    CHECK(mem == (size_t)8 << 30, "memory %zu", mem);
    CHECK(d.ndevices == 1, "%d devices", d.ndevices);
    size_t fr, tot;
    OK(d.MemGetInfo(&fr, &tot));
    CHECK(tot == mem && fr == tot, "free %zu total %zu", fr, tot);
    const char *s = NULL;
    OK(d.GetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(s && !strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY"), "%s", s ? s : "NULL");
    OK(d.GetErrorString(CUDA_ERROR_NOT_READY, &s));
    CHECK(s && !strcmp(s, "device not ready"), "%s", s ? s : "NULL");
}

/* Two streams: a copy ordered after a memset by an event sees the memset;
 * one without the dependency runs first (the memset's stream is held), so a
 * missing dependency shows as wrong values, deterministically. */
static void check_ordering(void) {
    enum { N = 1 << 16 };
    CUstream s1, s2;
    CUevent ev;
    CUdeviceptr a, b, c;
    unsigned char *h;
    OK(d.StreamCreate(&s1, 0));
    OK(d.StreamCreate(&s2, 0));
    OK(d.EventCreate(&ev, 0));
    OK(d.MemAlloc(&a, N));
    OK(d.MemAlloc(&b, N));
    OK(d.MemAlloc(&c, N));
    OK(d.MemHostAlloc((void **)&h, 2 * N, 0));
    OK(d.MemsetD8Async(a, 1, N, s1));
    OK(d.StreamSynchronize(s1));
    atomic_int go = 0;
    OK(LaunchHostFunc(s1, hold, &go));
    OK(d.MemsetD8Async(a, 7, N, s1));
    OK(d.EventRecord(ev, s1));
    OK(d.MemcpyDtoDAsync(c, a, N, s2)); /* no dependency: runs now, sees the old 1s */
    OK(d.StreamSynchronize(s2));
    OK(d.StreamWaitEvent(s2, ev, 0));
    OK(d.MemcpyDtoDAsync(b, a, N, s2)); /* after the event: sees the 7s */
    OK(d.MemcpyDtoHAsync(h, b, N, s2));
    OK(d.MemcpyDtoHAsync(h + N, c, N, s2));
    CHECK(d.StreamQuery(s2) == CUDA_ERROR_NOT_READY, "s2 finished while s1 is held");
    sleep_ms(20);
    CHECK(d.StreamQuery(s2) == CUDA_ERROR_NOT_READY, "s2 did not wait for the event");
    atomic_store(&go, 1);
    OK(d.StreamSynchronize(s2));
    int bad_b = 0, bad_c = 0;
    for (int i = 0; i < N; i++) {
        bad_b += h[i] != 7;
        bad_c += h[N + i] != 1;
    }
    CHECK(!bad_b, "%d bytes of the ordered copy are not 7", bad_b);
    CHECK(!bad_c, "%d bytes of the unordered copy are not the old 1 (did it wait?)", bad_c);
    /* a wait snapshots the event's last record as of the wait call */
    atomic_store(&go, 0);
    OK(LaunchHostFunc(s1, hold, &go));
    OK(d.MemsetD8Async(a, 9, N, s1));
    OK(d.EventRecord(ev, s1));
    OK(d.StreamWaitEvent(s2, ev, 0));
    OK(d.EventRecord(ev, s2)); /* re-recorded elsewhere: s2's wait still names s1's record */
    OK(d.MemcpyDtoHAsync(h, a, N, s2));
    sleep_ms(10);
    atomic_store(&go, 1);
    OK(d.StreamSynchronize(s2));
    CHECK(h[0] == 9 && h[N - 1] == 9, "the wait did not hold for s1's record (%d)", h[0]);
    /* pageable memory: synchronous, as CUDA */
    unsigned char *pg = malloc(N);
    memset(pg, 5, N);
    OK(d.MemcpyHtoDAsync(a, pg, N, s1));
    memset(pg, 6, N); /* reuse at once: the copy already read it */
    OK(d.MemcpyDtoHAsync(pg, a, N, s1));
    CHECK(pg[0] == 5 && pg[N - 1] == 5, "pageable HtoD did not read the source at the call (%d)", pg[0]);
    free(pg);
    /* out of an allocation: refused */
    CHECK(d.MemcpyDtoDAsync(b, a + 16, N, s1) == CUDA_ERROR_INVALID_VALUE, "copy past an allocation accepted");
    unsigned char local[16];
    CHECK(d.MemsetD8Async((CUdeviceptr)(uintptr_t)local, 0, sizeof local, s1) == CUDA_ERROR_INVALID_VALUE,
          "memset of host memory accepted");
    size_t fr, tot;
    OK(d.MemGetInfo(&fr, &tot));
    CHECK(tot - fr == 3 * (size_t)N, "used %zu", tot - fr);
    OK(d.MemFree(a));
    OK(d.MemFree(b));
    OK(d.MemFree(c));
    CHECK(d.MemFree(c) == CUDA_ERROR_INVALID_VALUE, "double free accepted");
    OK(d.MemFreeHost(h));
    OK(d.EventDestroy(ev));
    OK(d.StreamDestroy(s1));
    OK(d.StreamDestroy(s2));
}

static void check_events(void) {
    CUstream s;
    CUevent e0, e1, never;
    OK(d.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(d.EventCreate(&e0, 0));
    OK(d.EventCreate(&e1, 0));
    OK(d.EventCreate(&never, 0));
    CHECK(d.EventQuery(never) == CUDA_SUCCESS, "a never-recorded event is not complete");
    atomic_int go = 0;
    OK(d.EventRecord(e0, s));
    OK(LaunchHostFunc(s, hold, &go));
    OK(d.EventRecord(e1, s));
    CHECK(d.EventQuery(e1) == CUDA_ERROR_NOT_READY, "held event is complete");
    CHECK(d.StreamQuery(s) == CUDA_ERROR_NOT_READY, "held stream is idle");
    float ms = -1;
    CHECK(d.EventElapsedTime(&ms, e0, e1) == CUDA_ERROR_NOT_READY, "elapsed time of a pending event");
    sleep_ms(30);
    atomic_store(&go, 1);
    OK(d.EventSynchronize(e1));
    CHECK(d.EventQuery(e1) == CUDA_SUCCESS, "synchronized event is not complete");
    OK(d.EventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 25 && ms < 5000, "elapsed %.3f ms for a 30 ms hold", (double)ms);
    OK(d.StreamQuery(s));
    OK(d.EventDestroy(e0));
    OK(d.EventDestroy(e1));
    OK(d.EventDestroy(never));
    CHECK(d.EventQuery(never) == CUDA_ERROR_INVALID_HANDLE, "a destroyed event is still a handle");
    OK(d.StreamDestroy(s));
}

/* The plan's f32 utility unit (zk_axpy, and zk_fill beside it). */
static const PlanKernel *util_unit(const Plan *p, const PlanLaunch **lp) {
    int li = p->util[PLAN_UTIL_AXPY][DT_F32];
    if (li < 0 || (uint32_t)li >= p->nlaunches) return NULL;
    *lp = &p->launches[li];
    for (uint32_t i = 0; i < p->nkernels; i++)
        if (!strcmp(p->kernels[i].name, (*lp)->unit) && !strcmp(p->kernels[i].arch, "sm_90")) return &p->kernels[i];
    return NULL;
}

static void check_kernels(const char *plan_path) {
    char err[512];
    Plan *p = plan_read(plan_path, err, sizeof err);
    CHECK(p, "%s", err);
    if (!p) return;
    const PlanLaunch *l = NULL;
    const PlanKernel *k = util_unit(p, &l);
    CHECK(k, "no f32 zk_axpy unit for sm_90 in %s", plan_path);
    if (!k) {
        plan_free(p);
        return;
    }
    CUmodule m;
    CHECK(d.ModuleLoadData(&m, "// PTX\n.version 8.0\n") == CUDA_ERROR_INVALID_IMAGE, "PTX accepted");
    unsigned char *other = malloc(k->size);
    memcpy(other, k->data, k->size);
    other[k->size - 1] ^= 0x55; /* another cubin: no unit for it */
    CHECK(d.ModuleLoadData(&m, other) == CUDA_ERROR_NOT_FOUND, "a cubin without a unit loaded");
    free(other);
    CUresult rc = d.ModuleLoadData(&m, k->data);
    CHECK(rc == CUDA_SUCCESS, "cuModuleLoadData(%s): %d", k->name, rc);
    if (rc != CUDA_SUCCESS) {
        plan_free(p);
        return;
    }
    CUfunction axpy, fill, none;
    OK(d.ModuleGetFunction(&axpy, m, l->entry));
    OK(d.ModuleGetFunction(&fill, m, "zk_fill"));
    CHECK(d.ModuleGetFunction(&none, m, "zk_no_such_kernel") == CUDA_ERROR_NOT_FOUND, "unknown entry found");
    enum { N = 3000 };
    CUstream s;
    CUdeviceptr x, y;
    float *h;
    OK(d.StreamCreate(&s, 0));
    OK(d.MemAlloc(&x, N * 4));
    OK(d.MemAlloc(&y, N * 4));
    OK(d.MemHostAlloc((void **)&h, N * 4, 0));
    for (int i = 0; i < N; i++) h[i] = (float)i;
    OK(d.MemcpyHtoDAsync(x, h, N * 4, s));
    /* the parameter values are taken at the launch: the stream is held,
     * and the variables change before the kernel runs */
    atomic_int go = 0;
    OK(LaunchHostFunc(s, hold, &go));
    long long n = N;
    float v = 2.0f, alpha = 0.5f;
    void *pf[] = {&y, &n, &v};
    OK(d.LaunchKernel(fill, 12, 1, 1, 256, 1, 1, 0, s, pf, NULL));
    v = 100.0f;
    void *pa[] = {&y, &x, &n, &alpha};
    OK(d.LaunchKernel(axpy, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->smem, s, pa,
                      NULL));
    alpha = 100.0f;
    n = 1;
    atomic_store(&go, 1);
    OK(d.MemcpyDtoHAsync(h, y, N * 4, s));
    OK(d.StreamSynchronize(s));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != 2.0f + 0.5f * (float)i;
    CHECK(!bad, "%d of %d values of fill + axpy wrong (h[1] = %g)", bad, N, (double)h[1]);
    CHECK(d.LaunchKernel(fill, 1, 1, 1, 2048, 1, 1, 0, s, pf, NULL) == CUDA_ERROR_INVALID_VALUE, "2048 threads accepted");
    /* a kernel with barriers and warp shuffles (the gradient norm's two
     * passes), on a second stream while the first runs fill launches: the
     * emulator is shared under one lock */
    const PlanKernel *rk = NULL;
    for (uint32_t i = 0; i < p->nkernels; i++)
        if (!strncmp(p->kernels[i].name, "reduce-", 7) && !strcmp(p->kernels[i].arch, "sm_90")) rk = &p->kernels[i];
    CHECK(rk, "no reduce unit in the plan");
    CUmodule rm;
    CUfunction sumsq, norm;
    if (rk && d.ModuleLoadData(&rm, rk->data) == CUDA_SUCCESS) {
        OK(d.ModuleGetFunction(&sumsq, rm, "zk_sumsq_partial"));
        OK(d.ModuleGetFunction(&norm, rm, "zk_norm_final"));
        CUstream s2;
        CUdeviceptr slot, out;
        OK(d.StreamCreate(&s2, 0));
        OK(d.MemAlloc(&slot, 4 * 4));
        OK(d.MemAlloc(&out, 4));
        long long nn = N, parts = 4, sq = 1;
        void *p1[] = {&slot, &x, &nn};
        void *p2[] = {&out, &slot, &parts, &sq};
        for (int r = 0; r < 8; r++) OK(d.LaunchKernel(fill, 12, 1, 1, 256, 1, 1, 0, s, pf, NULL));
        OK(d.LaunchKernel(sumsq, 4, 1, 1, 256, 1, 1, 0, s2, p1, NULL));
        OK(d.LaunchKernel(norm, 1, 1, 1, 256, 1, 1, 0, s2, p2, NULL));
        float got = 0;
        OK(d.MemcpyDtoHAsync(h, out, 4, s2));
        OK(d.StreamSynchronize(s2));
        got = h[0];
        double want = 0;
        for (int i = 0; i < N; i++) want += (double)i * i;
        want = sqrt(want);
        CHECK(fabs(got - want) <= 1e-5 * want, "norm %g, want %g", (double)got, want);
        OK(d.StreamSynchronize(s));
        OK(d.MemFree(slot));
        OK(d.MemFree(out));
        OK(d.StreamDestroy(s2));
        OK(d.ModuleUnload(rm));
    }
    OK(d.ModuleUnload(m));
    OK(d.MemFree(x));
    OK(d.MemFree(y));
    OK(d.MemFreeHost(h));
    OK(d.StreamDestroy(s));
    plan_free(p);
}

/* ---- NCCL ----------------------------------------------------------------------- */

static struct {
    void *lib;
    ncclResult_t (*GetVersion)(int *);
    ncclResult_t (*GetUniqueId)(ncclUniqueId *);
    ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*CommAbort)(ncclComm_t);
    ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*CommCount)(const ncclComm_t, int *);
    ncclResult_t (*CommUserRank)(const ncclComm_t, int *);
    ncclResult_t (*GroupStart)(void);
    ncclResult_t (*GroupEnd)(void);
    ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
} nc;

static int nccl_open(void) {
    nc.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!nc.lib) {
        fprintf(stderr, "rank %d: %s\n", rank, dlerror());
        return -1;
    }
    int miss = 0;
#define NSYM(f, n) miss |= !(*(void **)&nc.f = dlsym(nc.lib, n))
    NSYM(GetVersion, "ncclGetVersion");
    NSYM(GetUniqueId, "ncclGetUniqueId");
    NSYM(CommInitRank, "ncclCommInitRank");
    NSYM(CommDestroy, "ncclCommDestroy");
    NSYM(CommAbort, "ncclCommAbort");
    NSYM(CommGetAsyncError, "ncclCommGetAsyncError");
    NSYM(CommCount, "ncclCommCount");
    NSYM(CommUserRank, "ncclCommUserRank");
    NSYM(GroupStart, "ncclGroupStart");
    NSYM(GroupEnd, "ncclGroupEnd");
    NSYM(AllGather, "ncclAllGather");
    NSYM(ReduceScatter, "ncclReduceScatter");
    NSYM(AllReduce, "ncclAllReduce");
    NSYM(Broadcast, "ncclBroadcast");
    CHECK(!miss, "libnccl.so.2 lacks an entry point");
    int v = 0;
    NOK(nc.GetVersion(&v));
    CHECK(v >= 22800, "version %d", v);
    return miss ? -1 : 0;
}

static float val(int r, int i) { return (float)((r + 1) * 0.37 + i * 0.011); }

/* The collectives' values on R ranks (R = 1 without MPI). */
static void check_collectives(int R) {
    ncclUniqueId id;
    ncclComm_t comm;
    NOK(nc.GetUniqueId(&id));
    NOK(nc.CommInitRank(&comm, R, id, rank));
    int cnt = 0, me = -1;
    NOK(nc.CommCount(comm, &cnt));
    NOK(nc.CommUserRank(comm, &me));
    CHECK(cnt == R && me == rank, "count %d rank %d", cnt, me);
    enum { N = 1000 };
    CUstream s;
    CUdeviceptr send, recv;
    float *h;
    OK(d.StreamCreate(&s, 0));
    OK(d.MemAlloc(&send, (size_t)R * N * 4));
    OK(d.MemAlloc(&recv, (size_t)R * N * 4));
    OK(d.MemHostAlloc((void **)&h, (size_t)R * N * 4, 0));
    /* allgather f32: the HtoD before it and the DtoH after it are ordered by the stream */
    for (int i = 0; i < N; i++) h[i] = val(rank, i);
    OK(d.MemcpyHtoDAsync(send, h, N * 4, s));
    NOK(nc.AllGather((void *)send, (void *)recv, N, ncclFloat32, comm, s));
    OK(d.MemcpyDtoHAsync(h, recv, (size_t)R * N * 4, s));
    OK(d.StreamSynchronize(s));
    int bad = 0;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < N; i++) bad += h[r * N + i] != val(r, i);
    CHECK(!bad, "allgather: %d values wrong", bad);
    /* reduce-scatter bf16: rank r gets slice r of the sum, summed in float in rank order */
    uint16_t *hb = (uint16_t *)h;
    for (int i = 0; i < R * N; i++) hb[i] = half_f32_to_bf16(val(rank, i) * (rank % 2 ? -1.0f : 1.0f));
    OK(d.MemcpyHtoDAsync(send, hb, (size_t)R * N * 2, s));
    NOK(nc.GroupStart());
    NOK(nc.ReduceScatter((void *)send, (void *)recv, N, ncclBfloat16, ncclSum, comm, s));
    NOK(nc.GroupEnd());
    OK(d.MemcpyDtoHAsync(hb, recv, N * 2, s));
    OK(d.StreamSynchronize(s));
    bad = 0;
    for (int i = 0; i < N; i++) {
        float acc = 0;
        for (int r = 0; r < R; r++) {
            float x = half_bf16_to_f32(half_f32_to_bf16(val(r, rank * N + i) * (r % 2 ? -1.0f : 1.0f)));
            acc = r ? acc + x : x;
        }
        bad += hb[i] != half_f32_to_bf16(acc);
    }
    CHECK(!bad, "reduce-scatter bf16: %d values wrong", bad);
    /* allreduce f32 in place, and broadcast from the last rank */
    for (int i = 0; i < N; i++) h[i] = val(rank, i);
    OK(d.MemcpyHtoDAsync(recv, h, N * 4, s));
    NOK(nc.AllReduce((void *)recv, (void *)recv, N, ncclFloat32, ncclSum, comm, s));
    OK(d.MemcpyDtoHAsync(h, recv, N * 4, s));
    OK(d.StreamSynchronize(s));
    bad = 0;
    for (int i = 0; i < N; i++) {
        float acc = val(0, i);
        for (int r = 1; r < R; r++) acc += val(r, i);
        bad += h[i] != acc;
    }
    CHECK(!bad, "allreduce: %d values wrong", bad);
    for (int i = 0; i < N; i++) h[i] = (float)(rank * 1000 + i);
    OK(d.MemcpyHtoDAsync(send, h, N * 4, s));
    NOK(nc.Broadcast((void *)send, (void *)recv, N, ncclFloat32, R - 1, comm, s));
    OK(d.MemcpyDtoHAsync(h, recv, N * 4, s));
    OK(d.StreamSynchronize(s));
    CHECK(h[0] == (float)((R - 1) * 1000) && h[N - 1] == (float)((R - 1) * 1000 + N - 1), "broadcast: %g", (double)h[0]);
    ncclResult_t ae = ncclInternalError;
    NOK(nc.CommGetAsyncError(comm, &ae));
    CHECK(ae == ncclSuccess, "async error %d", ae);
    NOK(nc.CommDestroy(comm));
    OK(d.MemFree(send));
    OK(d.MemFree(recv));
    OK(d.MemFreeHost(h));
    OK(d.StreamDestroy(s));
}

/* FAKENCCL_ASYNC_ERROR=0:1, FAKENCCL_HANG=1:2: collective 1 reports an
 * asynchronous error on rank 0; collective 2 never completes on rank 1 (so
 * on rank 0 neither) until both abort. */
static void check_hang(int R) {
    ncclUniqueId id;
    ncclComm_t comm;
    NOK(nc.GetUniqueId(&id));
    NOK(nc.CommInitRank(&comm, R, id, rank));
    CUstream s;
    CUevent ev;
    CUdeviceptr buf;
    OK(d.StreamCreate(&s, 0));
    OK(d.EventCreate(&ev, 0));
    OK(d.MemAlloc(&buf, (size_t)R * 4096));
    OK(d.MemsetD8Async(buf, 0, (size_t)R * 4096, s));
    NOK(nc.AllReduce((void *)buf, (void *)buf, 1024, ncclFloat32, ncclSum, comm, s));
    OK(d.StreamSynchronize(s));
    ncclResult_t ae = ncclInternalError;
    NOK(nc.CommGetAsyncError(comm, &ae));
    CHECK(ae == (rank == 0 ? ncclRemoteError : ncclSuccess), "async error %d after collective 1", ae);
    NOK(nc.AllGather((void *)(buf + (size_t)rank * 4096), (void *)buf, 1024, ncclFloat32, comm, s)); /* in place */
    OK(d.EventRecord(ev, s));
    int pending = 1, t = 0;
    CUresult q = CUDA_ERROR_NOT_READY;
    for (; t < 40 && pending; t++) { /* 400 ms: the executor's timeout, in small */
        q = d.EventQuery(ev);
        pending = q == CUDA_ERROR_NOT_READY;
        sleep_ms(10);
    }
    CHECK(pending, "the hung collective completed (cuEventQuery %d after %d polls)", (int)q, t);
    double t0 = MPI_Wtime();
    NOK(nc.CommAbort(comm));
    OK(d.EventSynchronize(ev));
    CHECK(MPI_Wtime() - t0 < 10, "abort took %.1f s", MPI_Wtime() - t0);
    OK(d.MemFree(buf));
    OK(d.EventDestroy(ev));
    OK(d.StreamDestroy(s));
}

/* ---- error paths ---------------------------------------------------------------------- */

/* FAKECUDA_FAIL=cuMemAlloc_v2:3,kernel:1 FAKECUDA_MEM=1m */
static void check_faults(const char *plan_path) {
    CUdeviceptr a[4];
    OK(d.MemAlloc(&a[0], 1000));
    OK(d.MemAlloc(&a[1], 1000));
    CHECK(d.MemAlloc(&a[2], 1000) == CUDA_ERROR_OUT_OF_MEMORY, "the 3rd cuMemAlloc_v2 did not fail");
    OK(d.MemAlloc(&a[2], 1000));
    CHECK(d.MemAlloc(&a[3], (size_t)1 << 20) == CUDA_ERROR_OUT_OF_MEMORY, "1 MiB more fit in FAKECUDA_MEM=1m");
    char msg[512];
    cudrv_fail(&d, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2", "x.c", 1, 0, msg, sizeof msg);
    CHECK(strstr(msg, "CUDA_ERROR_OUT_OF_MEMORY") && strstr(msg, "out of memory"), "%s", msg);
    /* an asynchronous kernel fault: the launch succeeds, the sync says so, and sticks */
    char err[512];
    Plan *p = plan_read(plan_path, err, sizeof err);
    CHECK(p, "%s", err);
    const PlanLaunch *l;
    const PlanKernel *k = p ? util_unit(p, &l) : NULL;
    CUmodule m;
    CUfunction fill;
    CUstream s;
    if (k && d.ModuleLoadData(&m, k->data) == CUDA_SUCCESS && d.ModuleGetFunction(&fill, m, "zk_fill") == CUDA_SUCCESS) {
        OK(d.StreamCreate(&s, 0));
        long long n = 10;
        float v = 1;
        void *pf[] = {&a[0], &n, &v};
        OK(d.LaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, s, pf, NULL));
        CUresult rc = d.StreamSynchronize(s);
        CHECK(rc == CUDA_ERROR_LAUNCH_FAILED, "sync after an injected fault: %d", rc);
        CHECK(d.CtxSynchronize() == CUDA_ERROR_LAUNCH_FAILED, "the fault did not stick");
        CHECK(d.LaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, s, pf, NULL) == CUDA_ERROR_LAUNCH_FAILED, "launch after a fault");
        OK(d.StreamDestroy(s));
        OK(d.ModuleUnload(m));
    } else {
        CHECK(0, "cannot load the utility unit of %s (FAKECUDA_UNITS?)", plan_path);
    }
    plan_free(p);
    for (int i = 0; i < 3; i++) OK(d.MemFree(a[i]));
    OK(d.DevicePrimaryCtxRelease(0)); /* the reset clears the sticky error */
    cudrv_close(&d);
}

/* ---- the fake cuBLASLt ------------------------------------------------------------ */

/* A bf16 GEMM with bias through runtime/gpu/cublaslt.c (what zinfrun runs)
 * against the host; then misuse the real library refuses, refused. */
static void check_cublaslt(void) {
    CublasLt lt;
    char err[512];
    if (cublaslt_open(&lt, err, sizeof err) != 0) {
        CHECK(0, "cublaslt_open: %s", err);
        return;
    }
    CHECK(!strcmp(lt.path, "libcublasLt.so.13") && lt.version == 130100, "%s %zu", lt.path, lt.version);
    enum { M = 5, N = 7, K = 3 };
    /* row-major C[M, N] = A[M, K] B^T + bias, B stored [N, K] (tb) */
    uint16_t a[M * K], b[N * K], bias[N], c[M * N];
    for (int i = 0; i < M * K; i++) a[i] = half_f32_to_bf16((float)(i % 7) - 3.0f);
    for (int i = 0; i < N * K; i++) b[i] = half_f32_to_bf16(0.5f * (float)(i % 5));
    for (int i = 0; i < N; i++) bias[i] = half_f32_to_bf16((float)i);
    CUdeviceptr da, db, dbias, dc, ws;
    OK(d.MemAlloc(&da, sizeof a));
    OK(d.MemAlloc(&db, sizeof b));
    OK(d.MemAlloc(&dbias, sizeof bias));
    OK(d.MemAlloc(&dc, sizeof c));
    OK(d.MemAlloc(&ws, 1 << 16));
    OK(MemcpyHtoD(da, a, sizeof a));
    OK(MemcpyHtoD(db, b, sizeof b));
    OK(MemcpyHtoD(dbias, bias, sizeof bias));
    CUstream s;
    OK(d.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
    PlanGemm g = {.path = PLAN_GEMM_LT, .dtype = DT_BF16, .flags = PLAN_GEMM_TB, .c = 0, .a = 1, .b = 2, .bias = 3, .m = M,
                  .n = N, .k = K, .lda = K, .ldb = K, .ldc = N, .batch = 1, .rbatch = 1, .ws_bytes = 1 << 16};
    LtOperands o = {.c = dc, .a = da, .b = db, .bias = dbias, .ws = ws};
    CHECK(cublaslt_gemm(&lt, &g, &o, s, err, sizeof err) == 0, "cublaslt_gemm: %s", err);
    OK(d.StreamSynchronize(s));
    OK(d.MemcpyDtoHAsync(c, dc, sizeof c, s));
    OK(d.StreamSynchronize(s));
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float r = half_bf16_to_f32(bias[j]);
            for (int l = 0; l < K; l++) r += half_bf16_to_f32(a[i * K + l]) * half_bf16_to_f32(b[j * K + l]);
            bad += half_f32_to_bf16(r) != c[i * N + j];
        }
    CHECK(!bad, "%d of the fake cuBLASLt's bf16 results differ from the host's", bad);
    /* an operand outside every allocation */
    LtOperands out = o;
    out.c = (CUdeviceptr)(uintptr_t)c;
    CHECK(cublaslt_gemm(&lt, &g, &out, s, err, sizeof err) == -1 && strstr(err, "cublasLtMatmul failed"),
          "a host pointer as C: %s", err);
    /* a leading dimension shorter than a column, a non-chaining problem, a misaligned pointer */
    cublasLtMatrixLayout_t l1, l2, l3;
    cublasLtMatrixLayout_t short_ld;
    CHECK(lt.MatrixLayoutCreate(&short_ld, CUDA_R_16BF, 8, 4, 4) == CUBLAS_STATUS_SUCCESS, "a layout refused at creation");
    CHECK(lt.MatrixLayoutCreate(&l1, CUDA_R_8I, 8, 4, 8) == CUBLAS_STATUS_NOT_SUPPORTED, "int8 accepted");
    OK(lt.MatrixLayoutCreate(&l1, CUDA_R_16BF, 8, 4, 8) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    OK(lt.MatrixLayoutCreate(&l2, CUDA_R_16BF, 5, 6, 5) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    OK(lt.MatrixLayoutCreate(&l3, CUDA_R_16BF, 8, 6, 8) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulPreference_t pref;
    OK(lt.MatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    OK(lt.MatmulPreferenceCreate(&pref) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    cublasLtMatmulHeuristicResult_t res[1];
    int got = 0;
    /* A 8x4 times B 5x6: k 4 against 5 */
    CHECK(lt.MatmulAlgoGetHeuristic(lt.handle, op, l1, l2, l3, l3, pref, 1, res, &got) == CUBLAS_STATUS_INVALID_VALUE,
          "shapes that do not chain accepted");
    cublasLtMatrixLayout_t l4;
    OK(lt.MatrixLayoutCreate(&l4, CUDA_R_16BF, 4, 6, 4) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    CHECK(lt.MatmulAlgoGetHeuristic(lt.handle, op, short_ld, l4, l3, l3, pref, 1, res, &got) == CUBLAS_STATUS_INVALID_VALUE,
          "a leading dimension of 4 for 8 rows accepted");
    lt.MatrixLayoutDestroy(short_ld);
    CHECK(lt.MatmulAlgoGetHeuristic(lt.handle, op, l1, l4, l3, l3, pref, 1, res, &got) == CUBLAS_STATUS_SUCCESS && got == 1,
          "a valid problem found no algorithm");
    float one = 1, zero = 0;
    CUdeviceptr big;
    OK(d.MemAlloc(&big, 4096));
    const void *p0 = (const void *)(uintptr_t)big, *p2 = (const void *)(uintptr_t)(big + 2);
    void *pd = (void *)(uintptr_t)(big + 1024);
    CHECK(lt.Matmul(lt.handle, op, &one, p2, l1, p0, l4, &zero, pd, l3, pd, l3, &res[0].algo, NULL, 0, s) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "A 2 bytes past a 256-byte boundary accepted under the default alignment preference");
    CHECK(lt.Matmul(lt.handle, op, &one, p0, l1, p0, l4, &zero, pd, l3, pd, l3, &res[0].algo, NULL, 0, s) == CUBLAS_STATUS_SUCCESS,
          "a valid matmul refused");
    CHECK(lt.Matmul(lt.handle, op, &one, p0, l1, p0, l2, &zero, pd, l3, pd, l3, &res[0].algo, NULL, 0, s) != CUBLAS_STATUS_SUCCESS,
          "a matmul with another problem's algorithm accepted");
    OK(d.StreamSynchronize(s));
    lt.MatmulPreferenceDestroy(pref);
    lt.MatmulDescDestroy(op);
    lt.MatrixLayoutDestroy(l1);
    lt.MatrixLayoutDestroy(l2);
    lt.MatrixLayoutDestroy(l3);
    lt.MatrixLayoutDestroy(l4);
    CHECK(lt.calls == 2, "%llu matmuls counted", (unsigned long long)lt.calls);
    cublaslt_close(&lt);
    OK(d.StreamDestroy(s));
    CUdeviceptr all[] = {da, db, dbias, dc, ws, big};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) OK(d.MemFree(all[i]));
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    const char *plan = argc > 2 ? argv[2] : "";
    if (!strcmp(mode, "stub") || !strcmp(mode, "nodev")) {
        char err[512];
        int rc = cudrv_open(&d, err, sizeof err);
        const char *want = !strcmp(mode, "stub") ? "stub library" : "found no device";
        CHECK(rc != 0 && strstr(err, want), "cudrv_open: %d '%s'", rc, rc ? err : "");
        if (rc == 0) cudrv_close(&d);
    } else if (!strcmp(mode, "driver") && argc == 3) {
        if (open_driver() != 0) return 1;
        check_device();
        check_ordering();
        check_events();
        check_kernels(plan);
        check_cublaslt();
        if (nccl_open() == 0) {
            check_collectives(1); /* no MPI: one rank, local copies */
            ncclComm_t c;
            ncclUniqueId id = {{0}};
            CHECK(nc.CommInitRank(&c, 2, id, 0) == ncclInvalidArgument, "2 ranks without MPI accepted");
        }
        close_driver();
    } else if (!strcmp(mode, "fail") && argc == 3) {
        if (open_driver() != 0) return 1;
        check_faults(plan);
    } else if (!strcmp(mode, "nccl") || !strcmp(mode, "hang")) {
        int prov = 0, R = 1;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &R);
        CHECK(prov == MPI_THREAD_MULTIPLE, "MPI thread level %d", prov);
        if (open_driver() != 0 || nccl_open() != 0) {
            MPI_Abort(MPI_COMM_WORLD, 1);
            return 1;
        }
        if (!strcmp(mode, "nccl")) check_collectives(R);
        else check_hang(R);
        close_driver();
        int all = 0;
        MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        fails = all;
        MPI_Finalize();
    } else {
        fprintf(stderr, "usage: fakecuda_selftest driver PLAN | fail PLAN | stub | nodev | nccl | hang\n");
        return 2;
    }
    if (fails) fprintf(stderr, "rank %d: fakecuda_selftest %s: %d check(s) failed\n", rank, mode, fails);
    else if (rank == 0) printf("fakecuda_selftest %s: ok\n", mode);
    return fails ? 1 : 0;
}
