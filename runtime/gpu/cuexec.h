/* cuexec: the device half of zinfrun's CUDA backend.
 *
 * Owns one GPU for this rank: the driver (runtime/cudrv), the device chosen
 * by the node-local rank, its primary context, one stream per plan queue,
 * two events per instruction (its begin and end on its queue's stream), the
 * plan's cubins for this device's architecture loaded once, and a function
 * handle per launch. Marshals a plan launch (runtime/plan/plan.h, PlanLaunch) into
 * cuLaunchKernel parameters from a binding of tensor ids to device
 * addresses. Device and pinned allocations made here are freed by
 * cuexec_close. The instruction semantics (what each opcode does on the GPU)
 * are runtime/exec/exec_cuda.c's. */
#ifndef ZINF_CUEXEC_H
#define ZINF_CUEXEC_H
#include <stdbool.h>
#include <stdint.h>
#include "comm.h"
#include "cublaslt.h"
#include "cudrv.h"
#include "cumoe.h"
#include "plan.h"

typedef struct CuExec {
    CudaDrv drv;
    CUdevice dev;
    CUcontext ctx;
    int ordinal, rank;
    char name[128], arch[16];
    size_t mem_total, mem_free_at_open;
    CUstream stream[PLAN_NQUEUES];
    CUevent *ev_begin, *ev_end;  /* per instruction */
    CUevent epoch;               /* recorded at the start of each step */
    uint32_t ninstrs;
    CUmodule *modules;           /* per plan kernel of this architecture (NULL for others) */
    uint32_t nmodules;
    CUfunction *funcs;           /* per launch */
    uint32_t nlaunches;
    /* every allocation, freed at close */
    CUdeviceptr dev_alloc[32];   /* the gpu arena; per queue: op workspace, collective scratch, cuBLASLt workspace */
    int ndev;
    void *host_alloc[16];
    int nhost;
    size_t dev_total;            /* bytes allocated on the device */
    /* GEMMs (docs/kernels.md, "GEMM paths"): through cuBLASLt when it
     * loaded and the plan describes them, else their NVRTC launches */
    CublasLt lt;
    bool lt_on;                  /* cuBLASLt runs the plan's PLAN_GEMM_LT gemms */
    char lt_why[256];            /* why not, when !lt_on and the plan has such gemms */
    int32_t *gemm_of;            /* per launch: its cuBLASLt gemm (index into p->gemms), -1: the launch runs */
    uint64_t lt_ws_bytes;        /* the GEMM workspace each queue that runs gemms needs (PlanGemm.ws_off + ws_bytes) */
    uint8_t *moe_of;             /* per launch: its CuMoeKind, an expert product cuBLASLt runs per expert (cumoe.h) */
    uint32_t nmoe;               /* such launches */
} CuExec;

/* Opens the driver, picks device (local rank) of c's node, makes its context
 * current, loads every cubin of p for the device's architecture, resolves
 * every launch, creates streams and events. Errors name the device and the
 * architectures when the plan has no code for this GPU. cublaslt_off: NULL,
 * or every GEMM runs its NVRTC launch and this says why (zinfrun passes
 * "ZINF_CUBLASLT=0"). */
int cuexec_open(CuExec *x, const Plan *p, const Comm *c, const char *cublaslt_off, char *err, size_t errlen);
void cuexec_close(CuExec *x);
/* Makes the context current on the calling thread (each queue's worker). */
int cuexec_bind_thread(CuExec *x, char *err, size_t errlen);

/* Device memory; *out = 0 for 0 bytes. Freed by cuexec_close. */
int cuexec_alloc_device(CuExec *x, size_t bytes, const char *what, CUdeviceptr *out, char *err, size_t errlen);
/* Page-locked host memory, device-mapped (its address is valid on the GPU). */
int cuexec_alloc_host(CuExec *x, size_t bytes, const char *what, void **out, char *err, size_t errlen);

/* The runtime values of PARG_RT arguments, this step. */
typedef struct CuExecRt {
    float v[PLAN_NRT];
} CuExecRt;

/* Enqueues launch li of p on stream s. bind[t]: device address bound to
 * tensor t (0: not bound); elems[t]: elements bound to t (PARG_NUMEL);
 * bind_pos[k] (k < nbind_pos) overrides the k-th argument whose tensor is -1
 * (utility launches) and i64_pos likewise the PARG_I64 arguments when >= 0. */
typedef struct CuExecBind {
    const CUdeviceptr *tensor;   /* per tensor id */
    const int64_t *elems;        /* per tensor id */
    CUdeviceptr ws;              /* the op's workspace */
    CUdeviceptr gemm_ws;         /* the queue's GEMM workspace (cuBLASLt), CuExec.lt_ws_bytes */
    const CuExecRt *rt;
    CUdeviceptr seg;             /* the micro-batch's sample starts (PARG_SEG), 0: not packed */
    CUdeviceptr pos[4];          /* utility launches: pointer arguments in order */
    int npos;
    int64_t i64[4];              /* utility launches: PARG_I64 values in order (when set) */
    int ni64;
    float f32[4];                /* utility launches: PARG_F32 values in order */
    int nf32;
} CuExecBind;
/* Runs launch li, or its GEMM through cuBLASLt when x->lt_on and the plan
 * gives it that path (falling back to the launch when the library has no
 * algorithm for the shape). */
int cuexec_launch(CuExec *x, const Plan *p, uint32_t li, const CuExecBind *b, CUstream s, char *err, size_t errlen);

/* zinfrun's startup line for the GEMMs: "cuBLASLt (libcublasLt.so.13
 * 13.1.0) for 48 GEMMs, NVRTC for 2 (2 sum products over batches)", or
 * "NVRTC for all 50 GEMMs (cuBLASLt off: ZINF_CUBLASLT=0)". */
const char *cuexec_gemm_summary(const CuExec *x, const Plan *p, char *buf, size_t n);

#define CUEXEC_CHECK(x, call, err, n) CUDRV_CHECK(&(x)->drv, (x)->rank, call, err, n)

#endif
