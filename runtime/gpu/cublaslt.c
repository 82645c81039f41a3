#include "cublaslt.h"
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "errorf.h"

/* One distinct shape: what the heuristic is asked about, and its answer. */
typedef struct LtKey {
    uint8_t dtype, flags, bias;
    int64_t m, n, k, lda, ldb, ldc, batch, sa, sb, sc, ws_bytes;
    uint32_t align[4];         /* A, B, C, D bytes, as the library sees them */
} LtKey;

struct LtShape {
    LtKey key;
    bool ok;                   /* an algorithm was found */
    cublasLtMatmulAlgo_t algo;
    cublasLtMatrixLayout_t la, lb, lc; /* the library's A (plan B), B (plan A), C = D */
};

static const char *status_str(const CublasLt *lt, cublasStatus_t st) {
    const char *s = lt->GetStatusString ? lt->GetStatusString(st) : NULL;
    return s ? s : "unknown status";
}

#define LT_CHECK(lt, call, err, n)                                                                            \
    do {                                                                                                      \
        cublasStatus_t st_ = (call);                                                                          \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                     \
            return errorf(err, n, "%s failed at %s:%d: cublasStatus %d (%s)", #call, __FILE__, __LINE__, (int)st_, \
                          status_str(lt, st_));                                                               \
    } while (0)

#define SYM(field, name)                                             \
    do {                                                             \
        *(void **)&lt->field = dlsym(lt->lib, name);                 \
        if (!lt->field) { missing = name; goto bad; }                \
    } while (0)

int cublaslt_open(CublasLt *lt, char *err, size_t n) {
    memset(lt, 0, sizeof *lt);
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so",
                                        "/usr/local/cuda/lib64/libcublasLt.so"};
    char why[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof *names && !lt->lib; i++) {
        lt->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        const char *e = lt->lib ? NULL : dlerror(); /* valid only until the next dl call */
        if (lt->lib) snprintf(lt->path, sizeof lt->path, "%s", names[i]);
        else if (!why[0]) snprintf(why, sizeof why, "%s", e ? e : "libcublasLt.so.13 not found");
    }
    if (!lt->lib) return errorf(err, n, "cuBLASLt not found: %s", why);
    const char *missing = NULL;
    SYM(Create, "cublasLtCreate");
    SYM(Destroy, "cublasLtDestroy");
    SYM(GetVersion, "cublasLtGetVersion");
    SYM(GetStatusString, "cublasLtGetStatusString");
    SYM(MatmulDescCreate, "cublasLtMatmulDescCreate");
    SYM(MatmulDescDestroy, "cublasLtMatmulDescDestroy");
    SYM(MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
    SYM(MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
    SYM(MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
    SYM(MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
    SYM(MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
    SYM(MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
    SYM(MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
    SYM(MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
    SYM(Matmul, "cublasLtMatmul");
    lt->version = lt->GetVersion();
    cublasStatus_t st = lt->Create(&lt->handle);
    if (st != CUBLAS_STATUS_SUCCESS) {
        errorf(err, n, "%s: cublasLtCreate failed: cublasStatus %d (%s)", lt->path, (int)st, status_str(lt, st));
        lt->handle = NULL;
        cublaslt_close(lt);
        return -1;
    }
    if (pthread_mutex_init(&lt->lock, NULL) != 0) {
        cublaslt_close(lt);
        return errorf(err, n, "cuBLASLt: cannot create a mutex");
    }
    lt->lock_ok = true;
    return 0;
bad:
    errorf(err, n, "%s lacks %s (too old a cuBLASLt?)", lt->path, missing);
    cublaslt_close(lt);
    return -1;
}

void cublaslt_close(CublasLt *lt) {
    for (uint32_t i = 0; i < lt->nshapes; i++) {
        LtShape *s = &lt->shapes[i];
        if (s->la) lt->MatrixLayoutDestroy(s->la);
        if (s->lb) lt->MatrixLayoutDestroy(s->lb);
        if (s->lc) lt->MatrixLayoutDestroy(s->lc);
    }
    free(lt->shapes);
    free(lt->slots);
    if (lt->handle) lt->Destroy(lt->handle);
    if (lt->lock_ok) pthread_mutex_destroy(&lt->lock);
    if (lt->lib) dlclose(lt->lib);
    memset(lt, 0, sizeof *lt);
}

const char *cublaslt_describe(const CublasLt *lt, char *buf, size_t n) {
    snprintf(buf, n, "%s %zu.%zu.%zu", lt->path, lt->version / 10000, lt->version / 100 % 100, lt->version % 100);
    return buf;
}

static cudaDataType_t lt_type(uint8_t dtype) {
    return dtype == 2 ? CUDA_R_16BF : dtype == 3 ? CUDA_R_16F : CUDA_R_32F; /* DType: F32 1, BF16 2, F16 3 */
}

/* The largest power of two dividing the address, at most 256 (what the
 * heuristic's alignment preferences take). */
static uint32_t align_of(CUdeviceptr p) {
    uint32_t a = 256;
    while (a > 1 && (p % a)) a >>= 1;
    return a;
}

static int layout(CublasLt *lt, cublasLtMatrixLayout_t *out, uint8_t dtype, int64_t rows, int64_t cols, int64_t ld,
                  int64_t batch, int64_t stride, char *err, size_t n) {
    LT_CHECK(lt, lt->MatrixLayoutCreate(out, lt_type(dtype), (uint64_t)rows, (uint64_t)cols, ld), err, n);
    if (batch > 1) {
        int32_t count = (int32_t)batch;
        LT_CHECK(lt, lt->MatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), err, n);
        LT_CHECK(lt, lt->MatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                 err, n);
    }
    return 0;
}

/* The operation: fp32 compute and scale whatever the storage (the NVRTC
 * kernels and the host reference accumulate in fp32 too; no TF32). The
 * library's A is the plan's B: its transpose is the plan's tb. */
static int op_desc(CublasLt *lt, const PlanGemm *g, CUdeviceptr bias, cublasLtMatmulDesc_t *out, char *err, size_t n) {
    LT_CHECK(lt, lt->MatmulDescCreate(out, CUBLAS_COMPUTE_32F, CUDA_R_32F), err, n);
    cublasOperation_t ta = (g->flags & PLAN_GEMM_TB) ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = (g->flags & PLAN_GEMM_TA) ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(lt, lt->MatmulDescSetAttribute(*out, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), err, n);
    LT_CHECK(lt, lt->MatmulDescSetAttribute(*out, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), err, n);
    if (g->bias >= 0) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        int32_t bt = (int32_t)lt_type(g->dtype);
        const void *bp = (const void *)(uintptr_t)bias;
        LT_CHECK(lt, lt->MatmulDescSetAttribute(*out, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep), err, n);
        LT_CHECK(lt, lt->MatmulDescSetAttribute(*out, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), err, n);
        LT_CHECK(lt, lt->MatmulDescSetAttribute(*out, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp), err, n);
    }
    return 0;
}

/* FNV-1a of a key (memset before it is filled: padding included). */
static uint64_t key_hash(const LtKey *key) {
    const unsigned char *b = (const unsigned char *)key;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof *key; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The slot of key in the hash index: its entry + 1, or 0 where it would go. */
static uint32_t *slot_of(CublasLt *lt, const LtKey *key) {
    uint32_t mask = lt->nslots - 1, i = (uint32_t)key_hash(key) & mask;
    while (lt->slots[i] && memcmp(&lt->shapes[lt->slots[i] - 1].key, key, sizeof *key)) i = (i + 1) & mask;
    return &lt->slots[i];
}

/* The index over the shapes, at most half full. The expert products of a
 * mixture of experts make a shape per distinct row count a step brings,
 * so the cache can hold thousands: a lookup must not walk them. */
static bool grow_index(CublasLt *lt) {
    if (lt->nslots && (lt->nshapes + 1) * 2 <= lt->nslots) return true;
    uint32_t ns = lt->nslots ? lt->nslots * 2 : 64;
    uint32_t *sl = calloc(ns, sizeof *sl);
    if (!sl) return false;
    free(lt->slots);
    lt->slots = sl;
    lt->nslots = ns;
    for (uint32_t i = 0; i < lt->nshapes; i++) *slot_of(lt, &lt->shapes[i].key) = i + 1;
    return true;
}

/* The cache entry of key, asking the heuristic the first time; the caller
 * holds the lock. NULL with err on failure. */
static LtShape *shape_of(CublasLt *lt, const PlanGemm *g, const LtKey *key, char *err, size_t n) {
    if (lt->nslots) {
        uint32_t at = *slot_of(lt, key);
        if (at) return &lt->shapes[at - 1];
    }
    if (!grow_index(lt)) {
        errorf(err, n, "cuBLASLt: out of memory");
        return NULL;
    }
    if (lt->nshapes == lt->cap) {
        uint32_t nc = lt->cap ? lt->cap * 2 : 32;
        LtShape *ns = realloc(lt->shapes, sizeof *ns * nc);
        if (!ns) {
            errorf(err, n, "cuBLASLt: out of memory");
            return NULL;
        }
        lt->shapes = ns;
        lt->cap = nc;
    }
    *slot_of(lt, key) = lt->nshapes + 1; /* filled below; a failed entry stays (its layouts are freed at close) */
    LtShape *s = &lt->shapes[lt->nshapes];
    memset(s, 0, sizeof *s);
    s->key = *key;
    bool ta = g->flags & PLAN_GEMM_TA, tb = g->flags & PLAN_GEMM_TB;
    /* column-major views of the row-major operands: a row-major R x C matrix is a column-major C x R one */
    if (layout(lt, &s->la, g->dtype, tb ? g->k : g->n, tb ? g->n : g->k, g->ldb, g->batch, g->stride_b, err, n) ||
        layout(lt, &s->lb, g->dtype, ta ? g->m : g->k, ta ? g->k : g->m, g->lda, g->batch, g->stride_a, err, n) ||
        layout(lt, &s->lc, g->dtype, g->n, g->m, g->ldc, g->batch, g->stride_c, err, n)) {
        lt->nshapes++; /* its layouts are freed at close */
        s->ok = false;
        return NULL;
    }
    lt->nshapes++;
    cublasLtMatmulDesc_t d = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    int rc = op_desc(lt, g, key->bias ? 256 : 0, &d, err, n);
    cublasStatus_t st = rc ? CUBLAS_STATUS_SUCCESS : lt->MatmulPreferenceCreate(&pref);
    if (!rc && st != CUBLAS_STATUS_SUCCESS) rc = errorf(err, n, "cublasLtMatmulPreferenceCreate: %s", status_str(lt, st));
    uint64_t ws = (uint64_t)key->ws_bytes;
    static const cublasLtMatmulPreferenceAttributes_t al[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    if (!rc) st = lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    for (int i = 0; i < 4 && !rc && st == CUBLAS_STATUS_SUCCESS; i++)
        st = lt->MatmulPreferenceSetAttribute(pref, al[i], &key->align[i], sizeof key->align[i]);
    if (!rc && st != CUBLAS_STATUS_SUCCESS) rc = errorf(err, n, "cublasLtMatmulPreferenceSetAttribute: %s", status_str(lt, st));
    if (!rc) {
        cublasLtMatmulHeuristicResult_t res[1];
        int got = 0;
        memset(res, 0, sizeof res);
        st = lt->MatmulAlgoGetHeuristic(lt->handle, d, s->la, s->lb, s->lc, s->lc, pref, 1, res, &got);
        /* NOT_SUPPORTED: no algorithm for this shape; the launch serves it */
        if (st == CUBLAS_STATUS_SUCCESS && got > 0 && res[0].state == CUBLAS_STATUS_SUCCESS) {
            s->ok = true;
            s->algo = res[0].algo;
        } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
            rc = errorf(err, n, "cublasLtMatmulAlgoGetHeuristic failed: cublasStatus %d (%s)", (int)st, status_str(lt, st));
        }
    }
    if (pref) lt->MatmulPreferenceDestroy(pref);
    if (d) lt->MatmulDescDestroy(d);
    return rc ? NULL : s;
}

/* The cache key of g on these operands. */
static void key_of(const PlanGemm *g, const LtOperands *o, LtKey *key) {
    memset(key, 0, sizeof *key); /* compared with memcmp and hashed: padding too */
    key->dtype = g->dtype;
    key->flags = g->flags & (PLAN_GEMM_TA | PLAN_GEMM_TB);
    key->bias = g->bias >= 0;
    key->m = g->m;
    key->n = g->n;
    key->k = g->k;
    key->lda = g->lda;
    key->ldb = g->ldb;
    key->ldc = g->ldc;
    key->batch = g->batch;
    key->sa = g->stride_a;
    key->sb = g->stride_b;
    key->sc = g->stride_c;
    key->ws_bytes = g->ws_bytes;
    key->align[0] = align_of(o->b + (CUdeviceptr)g->off_b);
    key->align[1] = align_of(o->a + (CUdeviceptr)g->off_a);
    key->align[2] = key->align[3] = align_of(o->c + (CUdeviceptr)g->off_c);
}

int cublaslt_check(CublasLt *lt, const PlanGemm *g, const LtOperands *o, char *err, size_t n) {
    LtKey key;
    key_of(g, o, &key);
    pthread_mutex_lock(&lt->lock);
    LtShape *s = shape_of(lt, g, &key, err, n);
    bool ok = s && s->ok;
    pthread_mutex_unlock(&lt->lock);
    return !s ? -1 : ok ? 0 : 1;
}

int cublaslt_gemm(CublasLt *lt, const PlanGemm *g, const LtOperands *o, CUstream stream, char *err, size_t n) {
    CUdeviceptr c = o->c + (CUdeviceptr)g->off_c, a = o->a + (CUdeviceptr)g->off_a, b = o->b + (CUdeviceptr)g->off_b;
    CUdeviceptr ws = g->ws_bytes ? o->ws + (CUdeviceptr)g->ws_off : 0;
    if (g->ws_bytes && !o->ws) return errorf(err, n, "cuBLASLt gemm of launch %u: no workspace bound", g->launch);
    LtKey key;
    key_of(g, o, &key);
    pthread_mutex_lock(&lt->lock);
    LtShape *s = shape_of(lt, g, &key, err, n);
    bool ok = s && s->ok;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    if (ok) {
        algo = s->algo;
        la = s->la;
        lb = s->lb;
        lc = s->lc;
        lt->calls++;
    } else if (s) {
        lt->fallbacks++;
    }
    pthread_mutex_unlock(&lt->lock);
    if (!s) return -1;
    if (!ok) return 1;
    cublasLtMatmulDesc_t d;
    if (op_desc(lt, g, o->bias, &d, err, n)) return -1;
    float alpha = 1.0f, beta = (g->flags & PLAN_GEMM_ACCUM) ? 1.0f : 0.0f;
    /* D = C in place: beta 1 accumulates into the gradient */
    cublasStatus_t st = lt->Matmul(lt->handle, d, &alpha, (const void *)(uintptr_t)b, la, (const void *)(uintptr_t)a, lb,
                                   &beta, (const void *)(uintptr_t)c, lc, (void *)(uintptr_t)c, lc, &algo,
                                   (void *)(uintptr_t)ws, (size_t)g->ws_bytes, (cudaStream_t)stream);
    lt->MatmulDescDestroy(d);
    if (st != CUBLAS_STATUS_SUCCESS)
        return errorf(err, n, "cublasLtMatmul failed (gemm of launch %u, %" PRId64 "x%" PRId64 "x%" PRId64 "): cublasStatus %d (%s)",
                      g->launch, g->m, g->n, g->k, (int)st, status_str(lt, st));
    return 0;
}
