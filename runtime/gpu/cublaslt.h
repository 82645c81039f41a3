/* cublaslt: the plan's GEMMs through NVIDIA's cuBLASLt, loaded at run time.
 *
 * Like the driver (runtime/cudrv) and NCCL (runtime/gpucomm), libcublasLt
 * is opened with dlopen (libcublasLt.so.13, .so.12, .so, then
 * /usr/local/cuda/lib64/libcublasLt.so), so zinfrun starts without it and
 * then runs every GEMM as its NVRTC launch. A plan GEMM (PlanGemm,
 * runtime/plan/plan.h) is row-major; cuBLASLt is column-major, so the
 * product is handed over transposed: C^T = opB(B)^T opA(A)^T, i.e. the
 * library's A is the plan's B and its B the plan's A, with the same leading
 * dimensions, and the bias epilogue adds bias[N] along the library's rows.
 * The heuristic's algorithm is asked once per distinct shape (and operand
 * alignment) and cached; the workspace is the one the plan gives the GEMM
 * (a slice of its op's workspace), never memory of its own.
 * Thread-safe: the executor's queue workers call cublaslt_gemm at once. */
#ifndef ZINF_CUBLASLT_H
#define ZINF_CUBLASLT_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <cublasLt.h>
#include <cuda.h>
#include "plan.h"

typedef struct LtShape LtShape;

typedef struct CublasLt {
    void *lib;
    char path[96];             /* the library name that was opened */
    size_t version;            /* cublasLtGetVersion: 130100 = 13.1.0 */
    cublasLtHandle_t handle;
    cublasStatus_t (*Create)(cublasLtHandle_t *);
    cublasStatus_t (*Destroy)(cublasLtHandle_t);
    size_t (*GetVersion)(void);
    const char *(*GetStatusString)(cublasStatus_t);
    cublasStatus_t (*MatmulDescCreate)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*MatmulDescDestroy)(cublasLtMatmulDesc_t);
    cublasStatus_t (*MatmulDescSetAttribute)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
    cublasStatus_t (*MatrixLayoutCreate)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*MatrixLayoutDestroy)(cublasLtMatrixLayout_t);
    cublasStatus_t (*MatrixLayoutSetAttribute)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void *, size_t);
    cublasStatus_t (*MatmulPreferenceCreate)(cublasLtMatmulPreference_t *);
    cublasStatus_t (*MatmulPreferenceDestroy)(cublasLtMatmulPreference_t);
    cublasStatus_t (*MatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                   const void *, size_t);
    cublasStatus_t (*MatmulAlgoGetHeuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                             cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                             cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t[], int *);
    cublasStatus_t (*Matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t,
                             const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t,
                             void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
    /* the shape cache: algorithm and layouts per distinct shape */
    pthread_mutex_t lock;
    bool lock_ok;
    LtShape *shapes;
    uint32_t nshapes, cap;
    uint32_t *slots, nslots;   /* hash index over shapes: entry + 1, 0 empty; nslots a power of two */
    uint64_t calls, fallbacks; /* matmuls run; gemms no algorithm served (their launch ran) */
} CublasLt;

/* Opens the library and creates a handle (the CUDA context current on the
 * calling thread). Returns 0, or -1 with why in err ("cuBLASLt not found:
 * libcublasLt.so.13: cannot open shared object file", "cublasLtCreate
 * failed: CUBLAS_STATUS_NOT_INITIALIZED (...)"). On failure nothing stays
 * open. */
int cublaslt_open(CublasLt *lt, char *err, size_t errlen);
void cublaslt_close(CublasLt *lt);

/* The operands of one GEMM as the executor bound them (device addresses,
 * the descriptor's byte offsets not yet added; bias 0 when it has none)
 * and the op's workspace. */
typedef struct LtOperands {
    CUdeviceptr c, a, b, bias, ws;
} LtOperands;

/* Enqueues g on stream s. Returns 0 when enqueued, 1 when cuBLASLt has no
 * algorithm for it (the caller runs the GEMM's launch instead), -1 with the
 * failing call and cuBLASLt's message in err. */
int cublaslt_gemm(CublasLt *lt, const PlanGemm *g, const LtOperands *o, CUstream s, char *err, size_t errlen);

/* Whether cuBLASLt has an algorithm for g on these operands (asking the
 * heuristic once per shape, as cublaslt_gemm does), without running it:
 * 0 it has, 1 it has none, -1 with err on failure. For a caller that
 * must know before it runs a group of gemms that all of them will. */
int cublaslt_check(CublasLt *lt, const PlanGemm *g, const LtOperands *o, char *errbuf, size_t errlen);

/* "libcublasLt.so.13 13.1.0" */
const char *cublaslt_describe(const CublasLt *lt, char *buf, size_t n);

#endif
