/* fake_cublaslt: cuBLASLt (libcublasLt.so.13) for the fake CUDA driver of
 * fake_cuda.c: the entry points runtime/gpu/cublaslt.c uses, computing each
 * matmul with plain loops on the host (fp32 accumulation, bf16/f16 rounded
 * to nearest even once at the end), independently of the NVRTC kernels and
 * of the host backend's BLAS. A matmul is enqueued on its (fake) stream
 * with cuLaunchHostFunc and runs when the stream reaches it, so it is
 * ordered with kernels, copies and events as the real one is.
 *
 * Arguments are checked as the real library checks them, and misuse fails
 * loudly (a line on stderr naming the call, and the status the real one
 * returns): handles and descriptors that are not ours, data types other
 * than f32/bf16/f16 or mixed, a compute type other than CUBLAS_COMPUTE_32F
 * with CUDA_R_32F scale, a leading dimension below the rows (column-major;
 * refused by the heuristic and the matmul, as the real library accepts the
 * layout itself),
 * operand shapes that do not chain (op(A) m x k, op(B) k x n, C and D m x n),
 * batch counts that differ, D != C with different layouts, an algorithm
 * from a heuristic query of another shape, a pointer less aligned than the
 * query's preference said (default 256 bytes), a workspace smaller than the
 * algorithm's, and any operand range not inside one allocation of the fake
 * driver. beta = 0 never reads C (the driver poisons new memory with NaN).
 *
 * Environment:
 *   FAKECUBLASLT_LOG=FILE   at unload, append "pid P matmuls M heuristics H"
 *   FAKECUBLASLT_FAIL=create    cublasLtCreate fails (CUBLAS_STATUS_NOT_INITIALIZED)
 *   FAKECUBLASLT_FAIL=heuristic every heuristic query finds no algorithm
 *   FAKECUBLASLT_WS=BYTES   the workspace each algorithm needs (default 0)
 *   FAKECUBLASLT_SHAPES=FILE  append "m n k batch" (the library's column-major
 *                           problem) for every matmul enqueued, in call order
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "half.h"

#define EXPORT __attribute__((visibility("default")))
enum { MAGIC_HANDLE = 0x4c54484eu, MAGIC_DESC = 0x4c544445u, MAGIC_LAYOUT = 0x4c544c41u, MAGIC_PREF = 0x4c545052u,
       MAGIC_ALGO = 0x4c54414cu };

struct Handle {
    uint32_t magic;
};
typedef struct Desc {
    uint32_t magic;
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type;         /* -1: D's */
} Desc;
typedef struct Layout {
    uint32_t magic;
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t order, batch;
    int64_t stride;
} Layout;
typedef struct Pref {
    uint32_t magic;
    uint64_t max_ws;
    uint32_t align[4];         /* A, B, C, D */
} Pref;
/* what cublasLtMatmulAlgo_t.data holds: the shape it was chosen for */
typedef struct Algo {
    uint32_t magic;
    uint8_t transa, transb, epilogue, type;
    uint64_t m, n, k;
    uint32_t batch;
    uint8_t align_log2[4];     /* A, B, C, D */
    uint64_t ws;
} Algo;
_Static_assert(sizeof(Algo) <= sizeof(((cublasLtMatmulAlgo_t *)0)->data), "Algo fits cublasLtMatmulAlgo_t");

static atomic_long g_matmuls, g_heuristics;
static CUresult (*launch_host)(CUstream, CUhostFn, void *);
static CUresult (*ctx_current)(CUcontext *);
static int (*mem_inside)(const void *, size_t);
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load_driver(void) {
    void *d = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!d) return;
    *(void **)&launch_host = dlsym(d, "cuLaunchHostFunc");
    *(void **)&ctx_current = dlsym(d, "cuCtxGetCurrent");
    *(void **)&mem_inside = dlsym(d, "fakecuda_mem_inside");
}

static cublasStatus_t misuse(cublasStatus_t st, const char *call, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cublasStatus_t misuse(cublasStatus_t st, const char *call, const char *fmt, ...) {
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakecublaslt: %s: %s\n", call, m);
    return st;
}

static const char *fail_what(void) {
    const char *f = getenv("FAKECUBLASLT_FAIL");
    return f ? f : "";
}

__attribute__((destructor)) static void lt_fini(void) {
    const char *log = getenv("FAKECUBLASLT_LOG");
    if (!log || !*log) return;
    FILE *f = fopen(log, "a");
    if (!f) return;
    fprintf(f, "pid %ld matmuls %ld heuristics %ld\n", (long)getpid(), atomic_load(&g_matmuls), atomic_load(&g_heuristics));
    fclose(f);
}

/* ---- status, version, handle ---- */

EXPORT const char *cublasLtGetStatusName(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}
EXPORT const char *cublasLtGetStatusString(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
    }
}
EXPORT size_t cublasLtGetVersion(void) { return 130100; }

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    pthread_once(&g_once, load_driver);
    if (!h) return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "NULL handle pointer");
    CUcontext cur = NULL;
    if (!launch_host || !ctx_current || !mem_inside)
        return misuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate", "the fake CUDA driver (libcuda.so.1) is not loaded");
    if (ctx_current(&cur) != CUDA_SUCCESS || !cur)
        return misuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate", "no CUDA context is current on this thread");
    if (!strcmp(fail_what(), "create")) return CUBLAS_STATUS_NOT_INITIALIZED; /* FAKECUBLASLT_FAIL, silent as the real one */
    struct Handle *x = calloc(1, sizeof *x);
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    x->magic = MAGIC_HANDLE;
    *h = (cublasLtHandle_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

static struct Handle *handle_of(cublasLtHandle_t h) {
    struct Handle *x = (struct Handle *)h;
    return x && x->magic == MAGIC_HANDLE ? x : NULL;
}

EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    struct Handle *x = handle_of(h);
    if (!x) return misuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy", "not a handle");
    x->magic = 0;
    free(x);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- descriptors ---- */

static bool type_ok(int t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }
static size_t type_size(int t) { return t == CUDA_R_32F ? 4 : 2; }

EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!out) return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate", "NULL descriptor pointer");
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        return misuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescCreate",
                      "compute type %d with scale type %d (the fake serves CUBLAS_COMPUTE_32F with CUDA_R_32F)", (int)compute,
                      (int)scale);
    Desc *d = calloc(1, sizeof *d);
    if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
    *d = (Desc){.magic = MAGIC_DESC, .compute = compute, .scale = scale, .transa = CUBLAS_OP_N, .transb = CUBLAS_OP_N,
                .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .bias_type = -1};
    *out = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}

static Desc *desc_of(cublasLtMatmulDesc_t h) {
    Desc *d = (Desc *)h;
    return d && d->magic == MAGIC_DESC ? d : NULL;
}

EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t h) {
    Desc *d = desc_of(h);
    if (!d) return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy", "not a matmul descriptor");
    d->magic = 0;
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

#define SIZED(call, want)                                                                                     \
    do {                                                                                                      \
        if (!buf || size != (want))                                                                           \
            return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "attribute %d: %zu bytes, it takes %zu", (int)attr, \
                          size, (size_t)(want));                                                              \
    } while (0)

EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t h, cublasLtMatmulDescAttributes_t attr,
                                                     const void *buf, size_t size) {
    static const char *call = "cublasLtMatmulDescSetAttribute";
    Desc *d = desc_of(h);
    if (!d) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a matmul descriptor");
    int32_t v = 0;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        SIZED(call, sizeof(int32_t));
        memcpy(&v, buf, sizeof v);
        if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "transpose %d", v);
        if (attr == CUBLASLT_MATMUL_DESC_TRANSA) d->transa = v;
        else d->transb = v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        SIZED(call, sizeof(uint32_t));
        memcpy(&d->epilogue, buf, sizeof d->epilogue);
        if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS)
            return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "epilogue %u (the fake has DEFAULT and BIAS)", d->epilogue);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: SIZED(call, sizeof(void *)); memcpy(&d->bias, buf, sizeof d->bias); return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        SIZED(call, sizeof(int32_t));
        memcpy(&d->bias_type, buf, sizeof d->bias_type);
        if (!type_ok(d->bias_type)) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "bias data type %d", d->bias_type);
        return CUBLAS_STATUS_SUCCESS;
    default: return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "attribute %d (the fake does not model it)", (int)attr);
    }
}

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows, uint64_t cols,
                                                 int64_t ld) {
    static const char *call = "cublasLtMatrixLayoutCreate";
    if (!out) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "NULL layout pointer");
    if (!type_ok(type)) return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "data type %d", (int)type);
    /* a leading dimension below the rows is accepted here, as by the real
     * library, and refused by the heuristic and the matmul (problem_of) */
    Layout *l = calloc(1, sizeof *l);
    if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
    *l = (Layout){.magic = MAGIC_LAYOUT, .type = type, .rows = rows, .cols = cols, .ld = ld, .order = CUBLASLT_ORDER_COL,
                  .batch = 1, .stride = 0};
    *out = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}

static Layout *layout_of(cublasLtMatrixLayout_t h) {
    Layout *l = (Layout *)h;
    return l && l->magic == MAGIC_LAYOUT ? l : NULL;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t h) {
    Layout *l = layout_of(h);
    if (!l) return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy", "not a matrix layout");
    l->magic = 0;
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t h, cublasLtMatrixLayoutAttribute_t attr,
                                                       const void *buf, size_t size) {
    static const char *call = "cublasLtMatrixLayoutSetAttribute";
    Layout *l = layout_of(h);
    if (!l) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a matrix layout");
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
        SIZED(call, sizeof(int32_t));
        memcpy(&l->batch, buf, sizeof l->batch);
        if (l->batch < 1) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "batch count %d", l->batch);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        SIZED(call, sizeof(int64_t));
        memcpy(&l->stride, buf, sizeof l->stride);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
        SIZED(call, sizeof(int32_t));
        memcpy(&l->order, buf, sizeof l->order);
        if (l->order != CUBLASLT_ORDER_COL)
            return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "order %d (the fake has column-major only)", l->order);
        return CUBLAS_STATUS_SUCCESS;
    default: return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "attribute %d (the fake does not model it)", (int)attr);
    }
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
    if (!out) return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "NULL pointer");
    Pref *p = calloc(1, sizeof *p);
    if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
    *p = (Pref){.magic = MAGIC_PREF, .max_ws = 0, .align = {256, 256, 256, 256}};
    *out = (cublasLtMatmulPreference_t)p;
    return CUBLAS_STATUS_SUCCESS;
}

static Pref *pref_of(cublasLtMatmulPreference_t h) {
    Pref *p = (Pref *)h;
    return p && p->magic == MAGIC_PREF ? p : NULL;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t h) {
    Pref *p = pref_of(h);
    if (!p) return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy", "not a preference");
    p->magic = 0;
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t h,
                                                           cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                           size_t size) {
    static const char *call = "cublasLtMatmulPreferenceSetAttribute";
    Pref *p = pref_of(h);
    if (!p) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a preference");
    int k = -1;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: SIZED(call, sizeof(uint64_t)); memcpy(&p->max_ws, buf, sizeof p->max_ws); return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: k = 0; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: k = 1; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: k = 2; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: k = 3; break;
    default: return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "attribute %d (the fake does not model it)", (int)attr);
    }
    SIZED(call, sizeof(uint32_t));
    memcpy(&p->align[k], buf, sizeof p->align[k]);
    if (!p->align[k] || (p->align[k] & (p->align[k] - 1)))
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "alignment %u is not a power of two", p->align[k]);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the problem: shapes that chain ---- */

typedef struct Problem {
    uint64_t m, n, k, batch;
    int type;
} Problem;

static cublasStatus_t problem_of(const char *call, const Desc *d, const Layout *a, const Layout *b, const Layout *c,
                                 const Layout *dd, Problem *pr) {
    /* column-major: a column is `rows` long and the next starts ld elements on */
    const Layout *ls[4] = {a, b, c, dd};
    for (int i = 0; i < 4; i++)
        if (ls[i]->ld < 1 || (uint64_t)ls[i]->ld < ls[i]->rows)
            return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "%c: leading dimension %lld below the %llu rows", "ABCD"[i],
                          (long long)ls[i]->ld, (unsigned long long)ls[i]->rows);
    if (a->type != b->type || a->type != c->type || a->type != dd->type)
        return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "mixed data types A %d B %d C %d D %d", (int)a->type, (int)b->type,
                      (int)c->type, (int)dd->type);
    uint64_t m = d->transa == CUBLAS_OP_N ? a->rows : a->cols, ka = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t kb = d->transb == CUBLAS_OP_N ? b->rows : b->cols, n = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
    if (ka != kb || c->rows != m || c->cols != n || dd->rows != m || dd->cols != n)
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call,
                      "shapes do not chain: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu",
                      (unsigned long long)m, (unsigned long long)ka, (unsigned long long)kb, (unsigned long long)n,
                      (unsigned long long)c->rows, (unsigned long long)c->cols, (unsigned long long)dd->rows,
                      (unsigned long long)dd->cols);
    if (a->batch != b->batch || a->batch != c->batch || a->batch != dd->batch)
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "batch counts differ: A %d B %d C %d D %d", a->batch, b->batch,
                      c->batch, dd->batch);
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && d->bias_type >= 0 && d->bias_type != (int)dd->type)
        return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "bias type %d for D of type %d", d->bias_type, (int)dd->type);
    *pr = (Problem){m, n, ka, (uint64_t)a->batch, (int)a->type};
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t A,
                                                     cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                                     cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pref, int want,
                                                     cublasLtMatmulHeuristicResult_t res[], int *got) {
    static const char *call = "cublasLtMatmulAlgoGetHeuristic";
    Desc *d = desc_of(op);
    Layout *a = layout_of(A), *b = layout_of(B), *c = layout_of(C), *dd = layout_of(D);
    Pref *p = pref_of(pref);
    if (!handle_of(h)) return misuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a handle");
    if (!d || !a || !b || !c || !dd || !p || want < 1 || !res || !got)
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "a descriptor, layout or preference is not valid, or no room for results");
    Problem pr;
    cublasStatus_t st = problem_of(call, d, a, b, c, dd, &pr);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    atomic_fetch_add(&g_heuristics, 1);
    *got = 0;
    const char *wsenv = getenv("FAKECUBLASLT_WS");
    uint64_t need = wsenv ? strtoull(wsenv, NULL, 10) : 0;
    if (!strcmp(fail_what(), "heuristic") || need > p->max_ws) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&res[0], 0, sizeof res[0]);
    Algo al = {.magic = MAGIC_ALGO, .transa = (uint8_t)d->transa, .transb = (uint8_t)d->transb,
               .epilogue = (uint8_t)d->epilogue, .type = (uint8_t)pr.type, .m = pr.m, .n = pr.n, .k = pr.k,
               .batch = (uint32_t)pr.batch, .ws = need};
    for (int i = 0; i < 4; i++)
        while ((1u << al.align_log2[i]) < p->align[i]) al.align_log2[i]++;
    memcpy(res[0].algo.data, &al, sizeof al);
    res[0].workspaceSize = need;
    res[0].state = CUBLAS_STATUS_SUCCESS;
    res[0].wavesCount = 1.0f;
    *got = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the matmul ---- */

typedef struct Job {
    Problem pr;
    int32_t transa, transb;
    Layout a, b, c, d;
    const uint8_t *A, *B, *C, *bias;
    uint8_t *D;
    float alpha, beta;
} Job;

static float load(int type, const uint8_t *p, uint64_t i) {
    if (type == CUDA_R_32F) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return type == CUDA_R_16BF ? half_bf16_to_f32(h) : half_f16_to_f32(h);
}

static void store(int type, uint8_t *p, uint64_t i, float v) {
    if (type == CUDA_R_32F) {
        memcpy(p + 4 * i, &v, 4);
        return;
    }
    uint16_t h = type == CUDA_R_16BF ? half_f32_to_bf16(v) : half_f32_to_f16(v);
    memcpy(p + 2 * i, &h, 2);
}

/* Column-major D = alpha op(A) op(B) + beta C (+ bias[row]), fp32 sums in k order. */
static void run_job(void *arg) {
    Job *j = arg;
    int t = j->pr.type;
    size_t es = type_size(t);
    for (uint64_t bt = 0; bt < j->pr.batch; bt++) {
        const uint8_t *A = j->A + (int64_t)bt * j->a.stride * (int64_t)es, *B = j->B + (int64_t)bt * j->b.stride * (int64_t)es;
        const uint8_t *C = j->C + (int64_t)bt * j->c.stride * (int64_t)es;
        uint8_t *D = j->D + (int64_t)bt * j->d.stride * (int64_t)es;
        for (uint64_t col = 0; col < j->pr.n; col++)
            for (uint64_t row = 0; row < j->pr.m; row++) {
                float acc = 0.f;
                for (uint64_t l = 0; l < j->pr.k; l++) {
                    uint64_t ia = j->transa == CUBLAS_OP_N ? row + l * (uint64_t)j->a.ld : l + row * (uint64_t)j->a.ld;
                    uint64_t ib = j->transb == CUBLAS_OP_N ? l + col * (uint64_t)j->b.ld : col + l * (uint64_t)j->b.ld;
                    acc += load(t, A, ia) * load(t, B, ib);
                }
                float v = j->alpha * acc;
                if (j->beta != 0.f) v += j->beta * load(t, C, row + col * (uint64_t)j->c.ld); /* beta 0: C is not read */
                if (j->bias) v += load(t, j->bias, row);
                store(t, D, row + col * (uint64_t)j->d.ld, v);
            }
    }
    free(j);
}

/* The bytes a layout's matrices span, from their first element. */
static uint64_t span_bytes(const Layout *l) {
    if (!l->rows || !l->cols) return 0;
    uint64_t e = (l->cols - 1) * (uint64_t)l->ld + l->rows + (uint64_t)(l->batch - 1) * (uint64_t)(l->stride > 0 ? l->stride : 0);
    return e * type_size(l->type);
}

static cublasStatus_t check_ptr(const char *call, const char *which, const void *p, const Layout *l, uint32_t align) {
    if (!p) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "%s is NULL", which);
    if ((uintptr_t)p % align)
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "%s %p is not %u-byte aligned, as the algorithm's query said", which,
                      p, align);
    uint64_t n = span_bytes(l);
    if (n && mem_inside(p, n) != 1)
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "%s %p + %llu bytes is not inside one allocation of the fake driver",
                      which, p, (unsigned long long)n);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *Ap,
                                     cublasLtMatrixLayout_t A, const void *Bp, cublasLtMatrixLayout_t B, const void *beta,
                                     const void *Cp, cublasLtMatrixLayout_t C, void *Dp, cublasLtMatrixLayout_t D,
                                     const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream) {
    static const char *call = "cublasLtMatmul";
    Desc *d = desc_of(op);
    Layout *a = layout_of(A), *b = layout_of(B), *c = layout_of(C), *dd = layout_of(D);
    if (!handle_of(h)) return misuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a handle");
    if (!d || !a || !b || !c || !dd || !alpha || !beta)
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "a descriptor or layout is not valid, or alpha/beta is NULL");
    Problem pr;
    cublasStatus_t st = problem_of(call, d, a, b, c, dd, &pr);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!algo) return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "no algorithm (the fake always wants one from the heuristic)");
    Algo al;
    memcpy(&al, algo->data, sizeof al);
    if (al.magic != MAGIC_ALGO || al.m != pr.m || al.n != pr.n || al.k != pr.k || al.batch != pr.batch ||
        al.type != (uint8_t)pr.type || al.transa != (uint8_t)d->transa || al.transb != (uint8_t)d->transb ||
        al.epilogue != (uint8_t)d->epilogue)
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "the algorithm was chosen for another problem");
    if (ws_bytes < al.ws || (al.ws && !ws))
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "workspace of %zu bytes, the algorithm needs %llu", ws_bytes,
                      (unsigned long long)al.ws);
    if (Dp != Cp && (c->ld != dd->ld || c->stride != dd->stride) && *(const float *)beta != 0.f)
        return misuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "D is not C and their layouts differ");
    if (Dp == Cp && (c->ld != dd->ld || c->stride != dd->stride))
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "in place (D = C) with different layouts");
    if ((st = check_ptr(call, "A", Ap, a, 1u << al.align_log2[0])) || (st = check_ptr(call, "B", Bp, b, 1u << al.align_log2[1])) ||
        (st = check_ptr(call, "C", Cp, c, 1u << al.align_log2[2])) || (st = check_ptr(call, "D", Dp, dd, 1u << al.align_log2[3])))
        return st;
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS) {
        if (!d->bias) return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "bias epilogue without a bias pointer");
        if (mem_inside(d->bias, pr.m * type_size(pr.type)) != 1)
            return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "bias %p + %llu elements is not inside one allocation", d->bias,
                          (unsigned long long)pr.m);
    }
    if (ws_bytes && mem_inside(ws, ws_bytes) != 1)
        return misuse(CUBLAS_STATUS_INVALID_VALUE, call, "workspace %p + %zu bytes is not inside one allocation", ws, ws_bytes);
    Job *j = calloc(1, sizeof *j);
    if (!j) return CUBLAS_STATUS_ALLOC_FAILED;
    *j = (Job){.pr = pr, .transa = d->transa, .transb = d->transb, .a = *a, .b = *b, .c = *c, .d = *dd, .A = Ap, .B = Bp,
               .C = Cp, .D = Dp, .bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS ? d->bias : NULL};
    memcpy(&j->alpha, alpha, sizeof j->alpha); /* host pointer mode: read at the call */
    memcpy(&j->beta, beta, sizeof j->beta);
    if (launch_host((CUstream)stream, run_job, j) != CUDA_SUCCESS) {
        free(j);
        return misuse(CUBLAS_STATUS_EXECUTION_FAILED, call, "cuLaunchHostFunc failed (a sticky error on the stream?)");
    }
    atomic_fetch_add(&g_matmuls, 1);
    const char *shapes = getenv("FAKECUBLASLT_SHAPES");
    FILE *f = shapes && *shapes ? fopen(shapes, "a") : NULL;
    if (f) {
        fprintf(f, "%llu %llu %llu %llu\n", (unsigned long long)pr.m, (unsigned long long)pr.n, (unsigned long long)pr.k,
                (unsigned long long)pr.batch);
        fclose(f);
    }
    return CUBLAS_STATUS_SUCCESS;
}
