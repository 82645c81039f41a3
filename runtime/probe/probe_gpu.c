#include "probe_gpu.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cublaslt.h"
#include "cudrv.h"
#include "clock.h"
#include "errorf.h"
#include "gpucomm.h"
#include "vocab.h"

/* One rank's GPU while it is measured; probe_gpu_run owns it. */
typedef struct Gx {
    CudaDrv drv;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CUevent e0, e1;
    CublasLt lt;
    bool lt_on;
    GpuComm nccl;
    bool nccl_on;
    CUdeviceptr d[4]; /* two buffers for copies; GEMM: A, B, C, workspace */
    int nd;
    void *host;
    int rank;
} Gx;


/* 0, or -1 with "rank R: CALL failed at FILE:LINE: NAME N (text)" in err */
static int gx_ck(const Gx *x, CUresult r, const char *call, int line, char *err, size_t n) {
    return r == CUDA_SUCCESS ? 0 : cudrv_fail(&x->drv, r, call, __FILE__, line, x->rank, err, n);
}
#define GX(x, r, call, err, n) gx_ck((x), (r), (call), __LINE__, (err), (n))
#define GX_CHECK(x, r, call, err, n)              \
    do {                                          \
        if (GX(x, r, call, err, n)) return -1;    \
    } while (0)

static void gx_free(Gx *x) {
    if (!x->ctx) return;
    x->drv.CtxSetCurrent(x->ctx);
    if (x->s) x->drv.StreamSynchronize(x->s);
    for (int i = 0; i < x->nd; i++)
        if (x->d[i]) x->drv.MemFree(x->d[i]);
    x->nd = 0;
    if (x->host) x->drv.MemFreeHost(x->host);
    x->host = NULL;
}

static void gx_close(Gx *x, bool abort_nccl) {
    if (!x->drv.lib) return;
    if (x->nccl_on) gpucomm_close(&x->nccl, abort_nccl);
    x->nccl_on = false;
    gx_free(x);
    if (x->ctx) {
        if (x->lt_on) cublaslt_close(&x->lt); /* its handle before the context goes */
        if (x->e0) x->drv.EventDestroy(x->e0);
        if (x->e1) x->drv.EventDestroy(x->e1);
        if (x->s) x->drv.StreamDestroy(x->s);
        x->drv.DevicePrimaryCtxRelease(x->dev);
    }
    cudrv_close(&x->drv);
    memset(x, 0, sizeof *x);
}

/* n device buffers of bytes[i] each (freed by gx_free). */
static int gx_alloc(Gx *x, int nb, const size_t *bytes, char *err, size_t n) {
    for (int i = 0; i < nb; i++) {
        GX_CHECK(x, x->drv.MemAlloc(&x->d[x->nd], bytes[i]), "cuMemAlloc_v2", err, n);
        x->nd++;
    }
    return 0;
}

/* The time between x->e0 and x->e1, once both ran. */
static int gx_elapsed(Gx *x, double *secs, char *err, size_t n) {
    float ms = 0;
    GX_CHECK(x, x->drv.EventSynchronize(x->e1), "cuEventSynchronize", err, n);
    GX_CHECK(x, x->drv.EventElapsedTime(&ms, x->e0, x->e1), "cuEventElapsedTime", err, n);
    *secs = ms > 0 ? ms * 1e-3 : 1e-9;
    return 0;
}

/* 0 when every rank's rc is 0; else -1, err naming another rank's failure
 * where this one did not fail. The ranks then leave together. */
static int agree(Comm *c, int rc, const char *what, char *err, size_t n) {
    int bad = comm_agree(c, rc);
    if (bad < 0) return errorf(err, n, "%s", comm_last_error(c));
    if (bad > 0 && !rc) errorf(err, n, "%s failed on another rank", what);
    return bad > 0 ? -1 : 0;
}

/* The mean over ranks of v[0..k). */
static int mean_over(Comm *c, double *v, size_t k, char *err, size_t n) {
    if (comm_allreduce_sum_f64(c, v, k) != COMM_OK) return errorf(err, n, "%s", comm_last_error(c));
    for (size_t i = 0; i < k; i++) v[i] /= c->size;
    return 0;
}

/* ---- the device: the node-local rank's, as runtime/gpu/cuexec.c picks it ---- */

static int gx_open(Gx *x, Comm *c, ProbeGpu *g, char *err, size_t n) {
    int local = c->local_rank, nlocal = c->local_size > 0 ? c->local_size : 1;
    g->ndevices = x->drv.ndevices;
    if (nlocal > x->drv.ndevices)
        return errorf(err, n, "rank %d: %d ranks run on this node but it has %d GPU%s: each rank needs its own", c->rank,
                      nlocal, x->drv.ndevices, x->drv.ndevices == 1 ? "" : "s");
    g->ordinal = local;
    size_t total = 0, free_b = 0;
    char why[384];
    if (cudrv_describe(&x->drv, local, g->name, sizeof g->name, &total, g->arch, sizeof g->arch, why, sizeof why))
        return errorf(err, n, "rank %d: GPU %d: %s", c->rank, local, why);
    GX_CHECK(x, x->drv.DeviceGet(&x->dev, local), "cuDeviceGet", err, n);
    GX_CHECK(x, x->drv.DevicePrimaryCtxRetain(&x->ctx, x->dev), "cuDevicePrimaryCtxRetain", err, n);
    GX_CHECK(x, x->drv.CtxSetCurrent(x->ctx), "cuCtxSetCurrent", err, n);
    GX_CHECK(x, x->drv.DeviceGetAttribute(&g->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, x->dev), "cuDeviceGetAttribute", err, n);
    GX_CHECK(x, x->drv.MemGetInfo(&free_b, &total), "cuMemGetInfo_v2", err, n);
    g->memory = free_b;
    GX_CHECK(x, x->drv.StreamCreate(&x->s, CU_STREAM_NON_BLOCKING), "cuStreamCreate", err, n);
    GX_CHECK(x, x->drv.EventCreate(&x->e0, CU_EVENT_DEFAULT), "cuEventCreate", err, n);
    GX_CHECK(x, x->drv.EventCreate(&x->e1, CU_EVENT_DEFAULT), "cuEventCreate", err, n);
    return 0;
}

/* ---- PCIe: pinned copies on a stream ---- */

static int gx_pcie(Gx *x, Comm *c, const ProbeOptions *o, ProbeGpu *g, char *err, size_t n) {
    int nsizes = o->quick ? 4 : PROBE_GPU_SIZES, reps = o->quick ? 3 : 10;
    size_t big = (size_t)65536 << (2 * (nsizes - 1)); /* 64 KiB x 4^k: 4 MiB quick, 64 MiB */
    int rc = gx_alloc(x, 1, &big, err, n);
    if (!rc) rc = GX(x, x->drv.MemHostAlloc(&x->host, big, 0), "cuMemHostAlloc", err, n);
    if (!rc) memset(x->host, 1, big);
    if (agree(c, rc, "a pinned copy", err, n)) return -1;
    double t[PROBE_GPU_SIZES * 2] = {0};
    for (int k = 0; k < nsizes && !rc; k++) {
        size_t bytes = (size_t)65536 << (2 * k);
        for (int dir = 0; dir < 2 && !rc; dir++) {
            double v[10];
            for (int i = -1; i < reps && !rc; i++) { /* i = -1: a warm-up */
                rc = GX(x, x->drv.EventRecord(x->e0, x->s), "cuEventRecord", err, n);
                if (!rc && dir) rc = GX(x, x->drv.MemcpyDtoHAsync(x->host, x->d[0], bytes, x->s), "cuMemcpyDtoHAsync_v2", err, n);
                if (!rc && !dir) rc = GX(x, x->drv.MemcpyHtoDAsync(x->d[0], x->host, bytes, x->s), "cuMemcpyHtoDAsync_v2", err, n);
                if (!rc) rc = GX(x, x->drv.EventRecord(x->e1, x->s), "cuEventRecord", err, n);
                double s = 0;
                if (!rc) rc = gx_elapsed(x, &s, err, n);
                if (i >= 0) v[i] = s;
            }
            if (!rc) t[2 * k + dir] = probe_median(v, reps);
        }
        g->copy_bytes[k] = (double)bytes;
    }
    if (agree(c, rc, "a pinned copy", err, n) || mean_over(c, t, (size_t)(2 * nsizes), err, n)) return -1;
    ProbeSample all[PROBE_GPU_SIZES * 2], dir[2][PROBE_GPU_SIZES];
    for (int k = 0; k < nsizes; k++) {
        g->h2d_secs[k] = t[2 * k];
        g->d2h_secs[k] = t[2 * k + 1];
        for (int d = 0; d < 2; d++) all[2 * k + d] = dir[d][k] = (ProbeSample){1, g->copy_bytes[k], t[2 * k + d]};
    }
    g->ncopy = nsizes;
    if (probe_fit(dir[0], nsizes, &g->h2d) || probe_fit(dir[1], nsizes, &g->d2h) || probe_fit(all, 2 * nsizes, &g->pcie))
        return errorf(err, n, "pinned copies: the timings fit no bandwidth");
    return 0;
}

/* ---- HBM: a device-to-device copy ---- */

static int gx_hbm(Gx *x, Comm *c, const ProbeOptions *o, ProbeGpu *g, char *err, size_t n) {
    size_t bytes = o->quick ? (size_t)16 << 20 : (size_t)256 << 20;
    size_t b2[2] = {bytes, bytes};
    int reps = o->quick ? 3 : 20;
    gx_free(x);
    int rc = gx_alloc(x, 2, b2, err, n);
    double v[20], t = 0;
    for (int i = -1; i < reps && !rc; i++) {
        rc = GX(x, x->drv.EventRecord(x->e0, x->s), "cuEventRecord", err, n);
        if (!rc) rc = GX(x, x->drv.MemcpyDtoDAsync(x->d[1], x->d[0], bytes, x->s), "cuMemcpyDtoDAsync_v2", err, n);
        if (!rc) rc = GX(x, x->drv.EventRecord(x->e1, x->s), "cuEventRecord", err, n);
        double s = 0;
        if (!rc) rc = gx_elapsed(x, &s, err, n);
        if (i >= 0) v[i] = s;
    }
    if (!rc) t = probe_median(v, reps);
    if (agree(c, rc, "the HBM copy", err, n) || mean_over(c, &t, 1, err, n)) return -1;
    g->hbm_bytes = (double)bytes;
    g->hbm = 2.0 * (double)bytes / t; /* read and write */
    return 0;
}

/* ---- launch: a tiny memset between two event records, as an instruction ---- */

static int gx_launch(Gx *x, Comm *c, const ProbeOptions *o, ProbeGpu *g, char *err, size_t n) {
    int ops = o->quick ? 100 : 2000, rc = 0;
    CUevent mark[2] = {0, 0};
    for (int i = 0; i < 2 && !rc; i++)
        rc = GX(x, x->drv.EventCreate(&mark[i], CU_EVENT_DEFAULT), "cuEventCreate", err, n);
    double t = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) { /* the first warms up */
        double t0 = clock_mono_s();
        for (int i = 0; i < ops && !rc; i++) {
            CUresult r = x->drv.EventRecord(mark[0], x->s);
            if (r == CUDA_SUCCESS) r = x->drv.MemsetD8Async(x->d[0], (unsigned char)i, 4, x->s);
            if (r == CUDA_SUCCESS) r = x->drv.EventRecord(mark[1], x->s);
            if (r != CUDA_SUCCESS) rc = GX(x, r, "cuMemsetD8Async", err, n);
        }
        if (!rc) rc = GX(x, x->drv.StreamSynchronize(x->s), "cuStreamSynchronize", err, n);
        t = (clock_mono_s() - t0) / ops;
    }
    for (int i = 0; i < 2; i++)
        if (mark[i]) x->drv.EventDestroy(mark[i]);
    if (agree(c, rc, "the launch probe", err, n) || mean_over(c, &t, 1, err, n)) return -1;
    g->launch = t;
    return 0;
}

/* ---- GEMMs through cuBLASLt ---- */

typedef struct GemmShape {
    int64_t m, n, k;
    uint8_t dtype;
} GemmShape;

/* 0 with the median seconds per call in *secs; 1 when cuBLASLt has no
 * algorithm for the shape (secs untouched); -1 with why in err. */
static int gx_gemm_time(Gx *x, const GemmShape *sh, size_t ws, bool quick, double *secs, char *err, size_t n) {
    PlanGemm pg = {.path = PLAN_GEMM_LT, .dtype = sh->dtype, .c = 2, .a = 0, .b = 1, .bias = -1, .m = sh->m, .n = sh->n,
                   .k = sh->k, .lda = sh->k, .ldb = sh->n, .ldc = sh->n, .batch = 1, .rbatch = 1, .ws_bytes = (int64_t)ws};
    LtOperands op = {.a = x->d[0], .b = x->d[1], .c = x->d[2], .ws = x->d[3]};
    int rc = cublaslt_gemm(&x->lt, &pg, &op, x->s, err, n); /* a warm-up: asks the heuristic */
    if (rc) return rc > 0 ? 1 : -1;
    GX_CHECK(x, x->drv.StreamSynchronize(x->s), "cuStreamSynchronize", err, n);
    double once = clock_mono_s();
    if ((rc = cublaslt_gemm(&x->lt, &pg, &op, x->s, err, n)) != 0) return -1;
    GX_CHECK(x, x->drv.StreamSynchronize(x->s), "cuStreamSynchronize", err, n);
    once = clock_mono_s() - once;
    /* batches of calls of about 20 ms (one call under --quick) */
    int calls = quick ? 1 : once > 0.02 ? 1 : once < 0.02 / 50 ? 50 : (int)(0.02 / once), reps = quick ? 3 : 5;
    double v[5];
    for (int i = 0; i < reps; i++) {
        GX_CHECK(x, x->drv.EventRecord(x->e0, x->s), "cuEventRecord", err, n);
        for (int j = 0; j < calls; j++)
            if (cublaslt_gemm(&x->lt, &pg, &op, x->s, err, n)) return -1;
        GX_CHECK(x, x->drv.EventRecord(x->e1, x->s), "cuEventRecord", err, n);
        if (gx_elapsed(x, &v[i], err, n)) return -1;
        v[i] /= calls;
    }
    *secs = probe_median(v, reps);
    return 0;
}

static int gx_gemms(Gx *x, Comm *c, const ProbeOptions *o, ProbeGpu *g, char *err, size_t n) {
    /* the peak's squares and gpt2-small's GEMMs at 8192 tokens (qkv, MLP in
     * and out, the vocabulary head); small ones under --quick (the fake
     * cuBLASLt runs host loops) */
    static const GemmShape full[] = {{4096, 4096, 4096, DT_BF16}, {8192, 8192, 8192, DT_BF16},
                                     {8192, 2304, 768, DT_BF16},  {8192, 3072, 768, DT_BF16},
                                     {8192, 768, 3072, DT_BF16},  {8192, 50304, 768, DT_BF16},
                                     {4096, 4096, 4096, DT_F32},  {8192, 3072, 768, DT_F32}};
    static const GemmShape quick[] = {{128, 192, 64, DT_BF16}, {64, 256, 128, DT_BF16}, {128, 128, 64, DT_F32}};
    const GemmShape *sh = o->quick ? quick : full;
    int ns = o->quick ? (int)(sizeof quick / sizeof *quick) : (int)(sizeof full / sizeof *full);
    size_t ws = (size_t)32 << 20, sz[4] = {0, 0, 0, ws};
    for (int i = 0; i < ns; i++) {
        size_t e = sh[i].dtype == DT_F32 ? 4 : 2;
        size_t a = (size_t)(sh[i].m * sh[i].k) * e, b = (size_t)(sh[i].k * sh[i].n) * e, cc = (size_t)(sh[i].m * sh[i].n) * e;
        sz[0] = a > sz[0] ? a : sz[0];
        sz[1] = b > sz[1] ? b : sz[1];
        sz[2] = cc > sz[2] ? cc : sz[2];
    }
    char why[384];
    int rc = 0;
    if (cublaslt_open(&x->lt, why, sizeof why))
        rc = errorf(err, n, "rank %d: %s: the GPU's GEMM rates cannot be measured (zinfprobe --host writes a host target)",
                    x->rank, why);
    else
        x->lt_on = true;
    if (!rc) snprintf(g->lt, sizeof g->lt, "%s", cublaslt_describe(&x->lt, why, sizeof why));
    gx_free(x);
    if (!rc) rc = gx_alloc(x, 4, sz, err, n);
    for (int i = 0; i < 3 && !rc; i++) /* operands of about 0.0115, never NaN: the 0x3c byte */
        rc = GX(x, x->drv.MemsetD8Async(x->d[i], 0x3c, sz[i], x->s), "cuMemsetD8Async", err, n);
    if (agree(c, rc, "cuBLASLt", err, n)) return -1;
    double secs[PROBE_GPU_GEMMS];
    g->ngemm = 0;
    for (int i = 0; i < ns && !rc; i++) {
        double s = 0;
        int r = gx_gemm_time(x, &sh[i], ws, o->quick, &s, err, n);
        if (r < 0) rc = -1;
        ProbeRate *q = &g->gemm[g->ngemm];
        q->family = FAM_GEMM;
        snprintf(q->what, sizeof q->what, "%s %lldx%lldx%lld", sh[i].dtype == DT_F32 ? "f32" : "bf16", (long long)sh[i].m,
                 (long long)sh[i].n, (long long)sh[i].k);
        q->flops = 2.0 * (double)sh[i].m * (double)sh[i].n * (double)sh[i].k;
        q->secs = r == 0 ? s : 0; /* 0: no algorithm */
        g->gemm_f32[g->ngemm] = sh[i].dtype == DT_F32;
        secs[g->ngemm++] = q->secs;
    }
    if (agree(c, rc, "a cuBLASLt GEMM", err, n) || mean_over(c, secs, (size_t)g->ngemm, err, n)) return -1;
    for (int i = 0; i < g->ngemm; i++) g->gemm[i].secs = secs[i];
    probe_gpu_summarise(g);
    if (g->flops <= 0) return errorf(err, n, "cuBLASLt (%s) has no algorithm for any bf16 GEMM probed", g->lt);
    return 0;
}

void probe_gpu_summarise(ProbeGpu *g) {
    double v[PROBE_GPU_GEMMS];
    int k = 0;
    g->flops = g->flops_f32 = 0;
    for (int i = 0; i < g->ngemm; i++) {
        if (!(g->gemm[i].secs > 0)) continue;
        double r = g->gemm[i].flops / g->gemm[i].secs;
        if (g->gemm_f32[i]) {
            if (r > g->flops_f32) g->flops_f32 = r;
            continue;
        }
        if (r > g->flops) g->flops = r;
        v[k++] = r;
    }
    double e = k && g->flops > 0 ? probe_median(v, k) / g->flops : 1;
    g->eff_gemm = e > 1 ? 1 : e < 1e-4 ? 1e-4 : e;
}

/* ---- NCCL all-gather and reduce-scatter ---- */

static int gx_collectives(Gx *x, Comm *c, const ProbeOptions *o, ProbeGpu *g, char *err, size_t n) {
    if (c->size <= 1) return 0;
    int R = c->size, nsizes = o->quick ? 3 : PROBE_GPU_SIZES, reps = o->quick ? 3 : 10;
    size_t big = (size_t)65536 << (2 * (nsizes - 1)), sz[2] = {big, big};
    int rc = gpucomm_open(&x->nccl, c, err, n);
    x->nccl_on = rc == 0;
    gx_free(x);
    if (!rc) rc = gx_alloc(x, 2, sz, err, n);
    if (agree(c, rc, "NCCL", err, n)) return -1;
    double t[2][PROBE_GPU_SIZES] = {{0}};
    ProbeSample smp[2 * PROBE_GPU_SIZES];
    for (int k = 0; k < nsizes; k++) {
        size_t per = ((size_t)65536 << (2 * k)) / (size_t)R / 256 * 256; /* each rank's part, whole f32s */
        g->coll_bytes[k] = (double)(per * (size_t)R);
        for (int op = 0; op < 2; op++) {
            double v[10];
            for (int i = -1; i < reps; i++) {
                /* every rank starts together (an MPI all-reduce, which also
                 * says whether all are still well) */
                if (agree(c, rc, "an NCCL collective", err, n)) return -1;
                rc = GX(x, x->drv.EventRecord(x->e0, x->s), "cuEventRecord", err, n);
                if (!rc)
                    rc = op ? gpucomm_reduce_scatter(&x->nccl, x->d[0], x->d[1], per / 4, DT_F32, x->s, err, n)
                            : gpucomm_allgather(&x->nccl, x->d[0], x->d[1], per, x->s, err, n);
                if (!rc) rc = GX(x, x->drv.EventRecord(x->e1, x->s), "cuEventRecord", err, n);
                double s = 0;
                if (!rc) rc = gx_elapsed(x, &s, err, n);
                if (!rc) rc = gpucomm_check(&x->nccl, err, n);
                if (i >= 0) v[i] = s;
            }
            if (agree(c, rc, "an NCCL collective", err, n)) return -1;
            t[op][k] = probe_median(v, reps);
        }
    }
    if (mean_over(c, &t[0][0], 2 * PROBE_GPU_SIZES, err, n)) return -1;
    int ns = 0;
    for (int op = 0; op < 2; op++)
        for (int k = 0; k < nsizes; k++) {
            g->coll_secs[op][k] = t[op][k];
            smp[ns++] = (ProbeSample){R - 1.0, (R - 1.0) / R * g->coll_bytes[k], t[op][k]};
        }
    g->ncoll = nsizes;
    if (probe_fit(smp, ns, &g->coll)) return errorf(err, n, "NCCL collectives: the timings fit no bandwidth");
    g->net = true;
    return 0;
}

/* ---- all of it ---- */

int probe_gpu_run(Comm *c, const ProbeOptions *o, ProbeGpu *g, char *err, size_t n) {
    double t0 = clock_mono_s();
    memset(g, 0, sizeof *g);
    g->ranks = c->size;
    Gx x;
    memset(&x, 0, sizeof x);
    x.rank = c->rank;
    char why[384];
    int have = cudrv_open(&x.drv, why, sizeof why) == 0;
    double count = have;
    if (comm_allreduce_sum_f64(c, &count, 1) != COMM_OK) {
        if (have) cudrv_close(&x.drv);
        return errorf(err, n, "%s", comm_last_error(c));
    }
    if (count == 0) { /* no GPU anywhere: a host probe */
        snprintf(g->why, sizeof g->why, "%s", why);
        return 0;
    }
    if (count < c->size) {
        if (have) cudrv_close(&x.drv);
        return have ? errorf(err, n, "%d of %d ranks found no GPU", c->size - (int)count, c->size)
                    : errorf(err, n, "rank %d: %s (other ranks have GPUs)", c->rank, why);
    }
    if (c->local_size > 0 && c->local_size != c->size) { /* the target is one node's */
        cudrv_close(&x.drv);
        return errorf(err, n, "the GPU probe measures one node, but the %d ranks are on several (%d on rank %d's): "
                      "start them on one node", c->size, c->local_size, c->rank);
    }
    typedef int (*Part)(Gx *, Comm *, const ProbeOptions *, ProbeGpu *, char *, size_t);
    static const Part parts[] = {gx_pcie, gx_hbm, gx_launch, gx_gemms, gx_collectives};
    static const char *const names[] = {"pinned copies", "the HBM copy", "launch latency", "cuBLASLt GEMMs", "NCCL collectives"};
    int rc = agree(c, gx_open(&x, c, g, err, n), "opening the GPU", err, n);
    for (size_t i = 0; i < sizeof parts / sizeof *parts && !rc; i++)
        if ((rc = parts[i](&x, c, o, g, err, n)) != 0) {
            size_t len = strlen(err);
            if (len < n) snprintf(err + len, n - len, " (the GPU probe: %s)", names[i]);
        }
    int64_t neg = -(int64_t)g->memory; /* the least over ranks */
    if (!rc && comm_allreduce_max_i64(c, &neg) != COMM_OK) rc = errorf(err, n, "%s", comm_last_error(c));
    g->memory = (uint64_t)(-neg);
    g->on = rc == 0;
    gx_close(&x, rc != 0);
    g->seconds = clock_mono_s() - t0;
    return rc;
}

/* ---- the target file ---- */

static double atleast(double v, double lo) { return isfinite(v) && v > lo ? v : lo; }

int probe_gpu_target_text(const ProbeResult *h, const ProbeGpu *g, char *buf, size_t n) {
    int k = 0;
#define AT(k) (buf + ((size_t)(k) < n ? (size_t)(k) : n)), ((size_t)(k) < n ? n - (size_t)(k) : 0)
#define OUT(...) k += snprintf(AT(k), __VA_ARGS__)
    int ranks = g->ranks > 0 ? g->ranks : 1;
    uint64_t mib = 1u << 20;
    OUT("# This machine (%s) as zinfprobe measured it for %d GPU%s (%s, %s): pinned PCIe copies, HBM (a device\n"
        "# copy), cuBLASLt GEMMs in bf16 (each call in kernels), %s, host memory by a triad%s.\n"
        "# Attention, norm and elementwise kernels are not measured (efficiency 1) (docs/schedule.md,\n"
        "# \"Probing the machine\").\n",
        h->host, ranks, ranks > 1 ? "s" : "", g->name, g->arch, g->net ? "NCCL all-gather and reduce-scatter" : "no collectives (one rank)",
        h->nvme ? ", NVMe through io_uring" : "");
    OUT("target probe_%s {\n  backend = \"cuda\"\n  nodes = 1\n  gpus_per_node = %d\n", h->host, ranks);
    OUT("  gpu  { memory = %llu MiB; flops = %.3f G; hbm = %.3f GB/s; pcie = %.3f GB/s; arch = \"%s\"; sms = %d;\n"
        "         pcie_latency_us = %.3f; launch_us = %.3f }\n",
        (unsigned long long)(g->memory / mib ? g->memory / mib : 1), atleast(g->flops * 1e-9, 0.001),
        atleast(g->hbm * 1e-9, 0.001), atleast(g->pcie.bandwidth * 1e-9, 0.001), g->arch, g->sms > 0 ? g->sms : 1,
        atleast(g->pcie.latency * 1e6, 0.001), atleast(g->launch * 1e6, 0.001));
    OUT("  cpu  { memory = %llu MiB; bandwidth = %.3f GB/s; cores = %d",
        (unsigned long long)(h->cpu_memory / mib ? h->cpu_memory / mib : 1), atleast(h->mem_bandwidth * 1e-9, 0.001),
        h->cores > 0 ? h->cores : 1);
    k += probe_text_streams(h, AT(k)); /* the CPU Adam's rate: the optimizer state homed in CPU memory */
    OUT(" }\n");
    OUT("  efficiency { gemm = %.4f }\n", g->eff_gemm > 0 && g->eff_gemm <= 1 ? g->eff_gemm : 1.0);
    /* the bf16 calls, the dtype of the peak: the cost model interpolates a GEMM between them */
    int w = 0;
    for (int i = 0; i < g->ngemm; i++) {
        if (g->gemm_f32[i] || !(g->gemm[i].secs > 0 && g->gemm[i].flops > 0)) continue;
        OUT("%s%.6g, %.4g", w++ ? ", " : "  kernels { gemm = [", g->gemm[i].flops, atleast(g->gemm[i].secs * 1e6, 1e-4));
    }
    if (w) OUT("] }\n");
    k += probe_text_nvme(h, AT(k));
    if (g->net)
        OUT("  net  { bandwidth = %.3f GB/s; latency_us = %.3f }\n", atleast(g->coll.bandwidth * 1e-9, 0.001),
            atleast(g->coll.latency * 1e6, 0.001));
    OUT("}\n");
#undef OUT
#undef AT
    return k;
}

void probe_gpu_report(const ProbeGpu *g, FILE *out) {
    if (!g->on) {
        fprintf(out, "gpu: not measured (%s): a host target\n", g->why);
        return;
    }
    fprintf(out, "gpu %d of %d: %s, %s, %d SMs, %.1f GiB free; %d rank%s, %.1f s\n", g->ordinal, g->ndevices, g->name,
            g->arch, g->sms, (double)g->memory / (1u << 30), g->ranks, g->ranks > 1 ? "s" : "", g->seconds);
    fprintf(out, "pcie (pinned, events around each copy), us per copy at");
    for (int k = 0; k < g->ncopy; k++) fprintf(out, " %.0f KiB", g->copy_bytes[k] / 1024);
    fprintf(out, ":\n  h2d ");
    for (int k = 0; k < g->ncopy; k++) fprintf(out, " %9.1f", g->h2d_secs[k] * 1e6);
    fprintf(out, "\n  d2h ");
    for (int k = 0; k < g->ncopy; k++) fprintf(out, " %9.1f", g->d2h_secs[k] * 1e6);
    fprintf(out, "\n  fit: h2d %.3f GB/s + %.1f us, d2h %.3f GB/s + %.1f us; both %.3f GB/s + %.1f us\n",
            g->h2d.bandwidth * 1e-9, g->h2d.latency * 1e6, g->d2h.bandwidth * 1e-9, g->d2h.latency * 1e6,
            g->pcie.bandwidth * 1e-9, g->pcie.latency * 1e6);
    fprintf(out, "hbm (a %.0f MiB device copy, read + write): %.1f GB/s\n", g->hbm_bytes / (1 << 20), g->hbm * 1e-9);
    fprintf(out, "launch: %.2f us per instruction (a 4-byte memset between two event records, back to back)\n",
            g->launch * 1e6);
    fprintf(out, "gemms through cuBLASLt (%s), per GPU:\n", g->lt);
    for (int i = 0; i < g->ngemm; i++) {
        if (g->gemm[i].secs > 0)
            fprintf(out, "  %-24s %11.1f GFLOP/s %10.1f us\n", g->gemm[i].what, g->gemm[i].flops / g->gemm[i].secs * 1e-9,
                    g->gemm[i].secs * 1e6);
        else
            fprintf(out, "  %-24s no cuBLASLt algorithm\n", g->gemm[i].what);
    }
    fprintf(out, "  peak bf16 %.1f GFLOP/s (f32 %.1f, reported only); efficiency gemm %.3f\n", g->flops * 1e-9,
            g->flops_f32 * 1e-9, g->eff_gemm);
    fprintf(out, "attention, norm, elementwise: not measured (the plan's NVRTC kernels; the target leaves their "
                 "efficiency at 1)\n");
    if (!g->net) {
        fprintf(out, "nccl: not measured (one rank)\n");
        return;
    }
    fprintf(out, "nccl (%d ranks), us per call at", g->ranks);
    for (int k = 0; k < g->ncoll; k++) fprintf(out, " %.0f KiB", g->coll_bytes[k] / 1024);
    fprintf(out, ":\n");
    static const char *const names[2] = {"allgather", "reduce_scatter"};
    for (int op = 0; op < 2; op++) {
        fprintf(out, "  %-15s", names[op]);
        for (int k = 0; k < g->ncoll; k++) fprintf(out, " %9.1f", g->coll_secs[op][k] * 1e6);
        fprintf(out, "\n");
    }
    int last = g->ncoll - 1, R = g->ranks;
    double busbw = last >= 0 && g->coll_secs[0][last] > 0 ? g->coll_bytes[last] * (R - 1) / R / g->coll_secs[0][last] : 0;
    fprintf(out, "  ring fit: %.1f us per step + bytes / %.3f GB/s per rank (all-gather bus bandwidth at %.0f KiB: %.3f GB/s)\n",
            g->coll.latency * 1e6, g->coll.bandwidth * 1e-9, last >= 0 ? g->coll_bytes[last] / 1024 : 0, busbw * 1e-9);
}
