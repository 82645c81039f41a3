/* cuexec: how a plan launch becomes cuLaunchKernel's parameters, checked
 * without a device by standing in for the driver's launch entry: every
 * argument kind (bound tensors plus a tile's byte offset, workspace offsets,
 * NULL, integers, floats, per-step values, shard element counts), the
 * utility launches' positional binding, and the messages when a tensor is
 * not bound or the launch fails; a GEMM through a stand-in cuBLASLt (the
 * row-major plan GEMM handed over as its column-major transpose, operands
 * and workspace at their offsets, the heuristic asked once per shape and
 * alignment, the launch when it finds no algorithm) and the startup line.
 * (tests/e2e/cuda_fake.sh and cublaslt_fake.sh run whole plans.) */
#include <check.h>
#include <string.h>
#include "cuexec.h"

static struct {
    CUfunction f;
    unsigned grid[3], block[3], smem;
    CUstream s;
    unsigned char val[8][8];
    CUresult rc;
    int nparams; /* how many the launch at hand has */
} seen;

static CUresult fake_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned smem, CUstream s, void **params, void **extra) {
    (void)extra;
    seen.f = f;
    seen.grid[0] = gx, seen.grid[1] = gy, seen.grid[2] = gz;
    seen.block[0] = bx, seen.block[1] = by, seen.block[2] = bz;
    seen.smem = smem;
    seen.s = s;
    for (int k = 0; k < seen.nparams && k < 8; k++) memcpy(seen.val[k], params[k], 8); /* every value slot is 8 bytes */
    return seen.rc;
}

static PlanLaunchArg A(uint8_t kind, int32_t tensor, int64_t i, float f, uint8_t rt) {
    PlanLaunchArg a = {.kind = kind, .rt = rt, .tensor = tensor, .i = i, .f = f};
    return a;
}

static Plan *two_launches(void) {
    Plan *p = plan_new();
    p->ntensors = 2;
    p->tensors = ARENA_NEWN(&p->arena, PlanTensor, 2);
    p->tensors[0].name = "block.0.mlp.w1";
    p->tensors[1].name = "block.0.mlp.b1";
    p->nlaunch_args = 12;
    p->launch_args = ARENA_NEWN(&p->arena, PlanLaunchArg, 12);
    PlanLaunchArg *a = p->launch_args;
    a[0] = A(PARG_TENSOR, 0, 256, 0, 0); /* tile offset */
    a[1] = A(PARG_WS, -1, 512, 0, 0);
    a[2] = A(PARG_NULL, -1, 0, 0, 0);
    a[3] = A(PARG_I64, -1, 123456789012LL, 0, 0);
    a[4] = A(PARG_F32, -1, 0, 0.5f, 0);
    a[5] = A(PARG_RT, -1, 0, 0, PLAN_RT_BC2);
    a[6] = A(PARG_NUMEL, 0, 0, 0, 0);
    a[7] = A(PARG_TENSOR, 1, 0, 0, 0);
    /* utility axpy: y, x, n, alpha */
    a[8] = A(PARG_TENSOR, -1, 0, 0, 0);
    a[9] = A(PARG_TENSOR, -1, 0, 0, 0);
    a[10] = A(PARG_I64, -1, 7, 0, 0);
    a[11] = A(PARG_F32, -1, 0, 1.0f, 0);
    p->nlaunches = 2;
    p->launches = ARENA_NEWN(&p->arena, PlanLaunch, 2);
    p->launches[0] = (PlanLaunch){"gemm-0123456789ab.cu", "zk_gemm", {3, 2, 1}, {256, 1, 1}, 0, 5, 0, 8};
    p->launches[1] = (PlanLaunch){"elementwise-0123456789ab.cu", "zk_axpy", {8, 1, 1}, {256, 1, 1}, 0, -1, 8, 4};
    return p;
}

static void cuexec_stand_in(CuExec *x, CUfunction *funcs) {
    memset(x, 0, sizeof *x);
    x->rank = 2;
    x->drv.LaunchKernel = fake_launch;
    x->funcs = funcs;
    x->nlaunches = 2;
}

static uint64_t u64(int k) {
    uint64_t v;
    memcpy(&v, seen.val[k], 8);
    return v;
}

START_TEST(test_every_argument_kind) {
    Plan *p = two_launches();
    CuExec x;
    CUfunction funcs[2] = {(CUfunction)0x1111, (CUfunction)0x2222};
    cuexec_stand_in(&x, funcs);
    CUdeviceptr bind[2] = {0x10000, 0x20000};
    int64_t elems[2] = {4096, 64};
    CuExecRt rt = {{0}};
    rt.v[PLAN_RT_BC2] = 0.25f;
    CuExecBind b = {.tensor = bind, .elems = elems, .ws = 0x90000, .rt = &rt};
    char err[512] = "";
    memset(&seen, 0, sizeof seen);
    seen.nparams = 8;
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, (CUstream)0x77, err, sizeof err), 0);
    ck_assert_ptr_eq(seen.f, funcs[0]);
    ck_assert_uint_eq(seen.grid[0], 3);
    ck_assert_uint_eq(seen.grid[1], 2);
    ck_assert_uint_eq(seen.block[0], 256);
    ck_assert_ptr_eq(seen.s, (CUstream)0x77);
    ck_assert_uint_eq(u64(0), 0x10000 + 256);
    ck_assert_uint_eq(u64(1), 0x90000 + 512);
    ck_assert_uint_eq(u64(2), 0);
    ck_assert_int_eq((int64_t)u64(3), 123456789012LL);
    float f;
    memcpy(&f, seen.val[4], 4);
    ck_assert_float_eq(f, 0.5f);
    memcpy(&f, seen.val[5], 4);
    ck_assert_float_eq(f, 0.25f);
    ck_assert_int_eq((int64_t)u64(6), 4096);
    ck_assert_uint_eq(u64(7), 0x20000);
    plan_free(p);
}
END_TEST

START_TEST(test_utility_binding_by_position) {
    Plan *p = two_launches();
    CuExec x;
    CUfunction funcs[2] = {(CUfunction)0x1111, (CUfunction)0x2222};
    cuexec_stand_in(&x, funcs);
    CuExecBind b = {.pos = {0xa000, 0xb000}, .npos = 2, .i64 = {99}, .ni64 = 1, .f32 = {-2.0f}, .nf32 = 1};
    char err[512] = "";
    seen.nparams = 4;
    ck_assert_int_eq(cuexec_launch(&x, p, 1, &b, NULL, err, sizeof err), 0);
    ck_assert_ptr_eq(seen.f, funcs[1]);
    ck_assert_uint_eq(u64(0), 0xa000);
    ck_assert_uint_eq(u64(1), 0xb000);
    ck_assert_int_eq((int64_t)u64(2), 99); /* the plan's 7 overridden */
    float f;
    memcpy(&f, seen.val[3], 4);
    ck_assert_float_eq(f, -2.0f);
    /* without overrides the plan's values stand */
    CuExecBind b2 = {.pos = {0xa000, 0xb000}, .npos = 2};
    ck_assert_int_eq(cuexec_launch(&x, p, 1, &b2, NULL, err, sizeof err), 0);
    ck_assert_int_eq((int64_t)u64(2), 7);
    plan_free(p);
}
END_TEST

START_TEST(test_messages) {
    Plan *p = two_launches();
    CuExec x;
    CUfunction funcs[2] = {(CUfunction)0x1111, (CUfunction)0x2222};
    cuexec_stand_in(&x, funcs);
    CUdeviceptr bind[2] = {0x10000, 0}; /* b1 not bound */
    int64_t elems[2] = {1, 1};
    CuExecBind b = {.tensor = bind, .elems = elems, .ws = 0x90000};
    char err[512] = "";
    seen.nparams = 8;
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 2: zk_gemm argument 7: tensor block.0.mlp.b1 is not bound to device memory");
    CuExecBind nows = {.tensor = (CUdeviceptr[]){0x10000, 0x20000}, .elems = elems};
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &nows, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 2: zk_gemm needs a workspace");
    ck_assert_int_eq(cuexec_launch(&x, p, 5, &b, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 2: launch 5 outside the plan");
    seen.rc = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    bind[1] = 0x20000;
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "rank 2: cuLaunchKernel failed at runtime/gpu/cuexec.c:") == err, "%s", err);
    ck_assert_msg(strstr(err, "CUresult 701") != NULL, "%s", err);
    ck_assert_msg(strstr(err, ": zk_gemm of gemm-0123456789ab.cu <<<3,2,1 / 256,1,1>>>") != NULL, "%s", err);
    seen.rc = CUDA_SUCCESS;
    plan_free(p);
}
END_TEST

START_TEST(test_open_without_driver) {
    Plan *p = plan_new();
    Comm c;
    ck_assert_int_eq(comm_init(&c, NULL, NULL, NULL), COMM_OK);
    CuExec x;
    char err[512] = "";
    int rc = cuexec_open(&x, p, &c, NULL, err, sizeof err);
    if (rc == 0) {
        cuexec_close(&x); /* a machine with a GPU: a plan without code is refused below */
    } else {
        ck_assert_msg(strncmp(err, "rank 0: ", 8) == 0, "%s", err);
        ck_assert_msg(strstr(err, "CUDA driver") || strstr(err, "no GPU code"), "%s", err);
        ck_assert_ptr_null(x.drv.lib);
    }
    comm_finalize(&c);
    plan_free(p);
}
END_TEST

/* ---- a stand-in cuBLASLt: records what runtime/gpu/cublaslt.c asks of it ---- */
typedef struct StandLayout {
    int type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
} StandLayout;
static struct {
    StandLayout layouts[16];
    int nlayouts;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int heuristics, matmuls, algos; /* algos: what the heuristic finds (0 or 1) */
    uint32_t align[4];
    uint64_t max_ws;
    const void *A, *B, *C, *D, *ws;
    size_t ws_bytes;
    float alpha, beta;
    const void *la, *lb, *lc;
} lt;

static cublasStatus_t s_layout_create(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    StandLayout *l = &lt.layouts[lt.nlayouts++ % 16];
    *l = (StandLayout){(int)type, rows, cols, ld, 1, 0};
    *out = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t s_layout_set(cublasLtMatrixLayout_t h, cublasLtMatrixLayoutAttribute_t attr, const void *buf, size_t n) {
    StandLayout *l = (StandLayout *)h;
    if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == 4) memcpy(&l->batch, buf, 4);
    else if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == 8) memcpy(&l->stride, buf, 8);
    else return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t s_layout_destroy(cublasLtMatrixLayout_t h) { (void)h; return CUBLAS_STATUS_SUCCESS; }
static int desc_storage;
static cublasStatus_t s_desc_create(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s) {
    ck_assert_int_eq(c, CUBLAS_COMPUTE_32F);
    ck_assert_int_eq(s, CUDA_R_32F);
    *d = (cublasLtMatmulDesc_t)&desc_storage;
    lt.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    lt.bias = NULL;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t s_desc_destroy(cublasLtMatmulDesc_t d) { (void)d; return CUBLAS_STATUS_SUCCESS; }
static cublasStatus_t s_desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t n) {
    (void)d;
    if (attr == CUBLASLT_MATMUL_DESC_TRANSA) memcpy(&lt.transa, buf, 4);
    else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) memcpy(&lt.transb, buf, 4);
    else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE) memcpy(&lt.epilogue, buf, 4);
    else if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER) memcpy(&lt.bias, buf, sizeof lt.bias);
    else if (attr != CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) return CUBLAS_STATUS_INVALID_VALUE;
    (void)n;
    return CUBLAS_STATUS_SUCCESS;
}
static int pref_storage;
static cublasStatus_t s_pref_create(cublasLtMatmulPreference_t *p) { *p = (cublasLtMatmulPreference_t)&pref_storage; return CUBLAS_STATUS_SUCCESS; }
static cublasStatus_t s_pref_destroy(cublasLtMatmulPreference_t p) { (void)p; return CUBLAS_STATUS_SUCCESS; }
static cublasStatus_t s_pref_set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t n) {
    (void)p;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n == 8) memcpy(&lt.max_ws, buf, 8);
    else if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES && n == 4)
        memcpy(&lt.align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
    else return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t s_heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                  cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int want,
                                  cublasLtMatmulHeuristicResult_t res[], int *got) {
    (void)h, (void)d, (void)p, (void)want;
    ck_assert_ptr_eq(c, dd);
    lt.heuristics++;
    lt.la = a, lt.lb = b, lt.lc = c;
    *got = lt.algos;
    memset(res, 0, sizeof *res);
    res[0].algo.data[0] = 42;
    res[0].state = CUBLAS_STATUS_SUCCESS;
    return lt.algos ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}
static cublasStatus_t s_matmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t la,
                               const void *B, cublasLtMatrixLayout_t lb, const void *beta, const void *C, cublasLtMatrixLayout_t lc,
                               void *D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsb,
                               cudaStream_t s) {
    (void)h, (void)d, (void)s;
    ck_assert_uint_eq(algo->data[0], 42);
    ck_assert_ptr_eq(la, lt.la);
    ck_assert_ptr_eq(lb, lt.lb);
    ck_assert_ptr_eq(lc, lt.lc);
    ck_assert_ptr_eq(ld, lt.lc);
    lt.matmuls++;
    memcpy(&lt.alpha, alpha, 4);
    memcpy(&lt.beta, beta, 4);
    lt.A = A, lt.B = B, lt.C = C, lt.D = D, lt.ws = ws, lt.ws_bytes = wsb;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t s_destroy(cublasLtHandle_t h) { (void)h; return CUBLAS_STATUS_SUCCESS; }
static const char *s_status(cublasStatus_t st) { (void)st; return "stand-in"; }

/* The plan's launch 0 (zk_gemm) as a bf16 gemm with a descriptor:
 * C[64, 48] = A^T B^T + bias at tile offsets, two output batches. */
static Plan *gemm_plan(void) {
    Plan *p = two_launches();
    p->ntensors = 4;
    PlanTensor *t = ARENA_NEWN(&p->arena, PlanTensor, 4);
    memcpy(t, p->tensors, 2 * sizeof *t);
    t[2].name = "x";
    t[3].name = "y";
    p->tensors = t;
    p->ngemms = 1;
    p->gemms = ARENA_NEWN(&p->arena, PlanGemm, 1);
    p->gemms[0] = (PlanGemm){.launch = 0, .path = PLAN_GEMM_LT, .dtype = 2, .flags = PLAN_GEMM_TA | PLAN_GEMM_TB,
                             .c = 3, .a = 2, .b = 0, .bias = 1, .off_c = 128, .off_a = 0, .off_b = 64, .m = 64, .n = 48,
                             .k = 32, .lda = 80, .ldb = 40, .ldc = 100, .batch = 2, .stride_a = 5000, .stride_b = 0,
                             .stride_c = 7000, .rbatch = 1, .ws_off = 4096, .ws_bytes = 1 << 20};
    p->version = 4;
    return p;
}

static void lt_stand_in(CuExec *x) {
    CublasLt *l = &x->lt;
    l->Create = NULL;
    l->Destroy = s_destroy;
    l->GetStatusString = s_status;
    l->MatmulDescCreate = s_desc_create;
    l->MatmulDescDestroy = s_desc_destroy;
    l->MatmulDescSetAttribute = s_desc_set;
    l->MatrixLayoutCreate = s_layout_create;
    l->MatrixLayoutDestroy = s_layout_destroy;
    l->MatrixLayoutSetAttribute = s_layout_set;
    l->MatmulPreferenceCreate = s_pref_create;
    l->MatmulPreferenceDestroy = s_pref_destroy;
    l->MatmulPreferenceSetAttribute = s_pref_set;
    l->MatmulAlgoGetHeuristic = s_heuristic;
    l->Matmul = s_matmul;
    l->handle = (cublasLtHandle_t)&desc_storage;
    l->version = 130100;
    snprintf(l->path, sizeof l->path, "libcublasLt.so.13");
    ck_assert_int_eq(pthread_mutex_init(&l->lock, NULL), 0);
    l->lock_ok = true;
    x->lt_on = true;
}

START_TEST(test_gemm_through_cublaslt) {
    Plan *p = gemm_plan();
    CuExec x;
    CUfunction funcs[2] = {(CUfunction)0x1111, (CUfunction)0x2222};
    cuexec_stand_in(&x, funcs);
    lt_stand_in(&x);
    int32_t gemm_of[2] = {0, -1};
    x.gemm_of = gemm_of;
    memset(&lt, 0, sizeof lt);
    lt.algos = 1;
    CUdeviceptr bind[4] = {0x10000, 0x20000, 0x30000, 0x40000};
    int64_t elems[4] = {1, 1, 1, 1};
    CuExecBind b = {.tensor = bind, .elems = elems, .ws = 0x90000, .gemm_ws = 0xa0000};
    char err[512] = "";
    memset(&seen, 0, sizeof seen);
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, (CUstream)0x77, err, sizeof err), 0);
    ck_assert_ptr_null(seen.f); /* no kernel launched */
    ck_assert_int_eq(lt.matmuls, 1);
    ck_assert_int_eq(lt.heuristics, 1);
    /* the library's A is the plan's B (stored [N, K] row-major: tb, so its op is T), its B the plan's A ([K, M]: ta) */
    const StandLayout *la = lt.la, *lb = lt.lb, *lc = lt.lc;
    ck_assert_int_eq(lt.transa, CUBLAS_OP_T);
    ck_assert_int_eq(lt.transb, CUBLAS_OP_T);
    ck_assert(la->rows == 32 && la->cols == 48 && la->ld == 40 && la->batch == 2 && la->stride == 0 && la->type == CUDA_R_16BF);
    ck_assert(lb->rows == 64 && lb->cols == 32 && lb->ld == 80 && lb->batch == 2 && lb->stride == 5000);
    ck_assert(lc->rows == 48 && lc->cols == 64 && lc->ld == 100 && lc->batch == 2 && lc->stride == 7000);
    ck_assert_ptr_eq(lt.A, (const void *)(uintptr_t)(0x10000 + 64));
    ck_assert_ptr_eq(lt.B, (const void *)(uintptr_t)0x30000);
    ck_assert_ptr_eq(lt.C, (const void *)(uintptr_t)(0x40000 + 128));
    ck_assert_ptr_eq(lt.D, lt.C);
    ck_assert_uint_eq(lt.epilogue, CUBLASLT_EPILOGUE_BIAS);
    ck_assert_ptr_eq(lt.bias, (const void *)(uintptr_t)0x20000);
    ck_assert_ptr_eq(lt.ws, (const void *)(uintptr_t)(0xa0000 + 4096)); /* the queue's GEMM workspace, not the op's */
    ck_assert_uint_eq(lt.ws_bytes, 1 << 20);
    ck_assert_uint_eq(lt.max_ws, 1 << 20);
    ck_assert_float_eq(lt.alpha, 1.0f);
    ck_assert_float_eq(lt.beta, 0.0f);
    ck_assert_uint_eq(lt.align[0], 64);  /* 0x10040 */
    ck_assert_uint_eq(lt.align[1], 256); /* 0x30000 */
    ck_assert_uint_eq(lt.align[2], 128); /* 0x40080 */
    /* the same shape and alignment again: the cached algorithm; accumulate now */
    p->gemms[0].flags |= PLAN_GEMM_ACCUM;
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, (CUstream)0x77, err, sizeof err), 0);
    ck_assert_int_eq(lt.heuristics, 1);
    ck_assert_int_eq(lt.matmuls, 2);
    ck_assert_float_eq(lt.beta, 1.0f);
    /* another alignment of A: asked again */
    bind[2] = 0x30010;
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, (CUstream)0x77, err, sizeof err), 0);
    ck_assert_int_eq(lt.heuristics, 2);
    ck_assert_uint_eq(lt.align[1], 16);
    /* no algorithm for a shape: its launch runs */
    lt.algos = 0;
    p->gemms[0].m = 65;
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, (CUstream)0x77, err, sizeof err), 0);
    ck_assert_int_eq(lt.matmuls, 3);
    ck_assert_ptr_eq(seen.f, funcs[0]);
    ck_assert_uint_eq(x.lt.calls, 3);
    ck_assert_uint_eq(x.lt.fallbacks, 1);
    /* an operand not bound */
    bind[3] = 0;
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, (CUstream)0x77, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 2: cuBLASLt gemm of launch 0: an operand is not bound to device memory");
    char line[256];
    ck_assert_str_eq(cuexec_gemm_summary(&x, p, line, sizeof line), "cuBLASLt (libcublasLt.so.13 13.1.0) for 1 GEMM, NVRTC for 0");
    x.lt_on = false;
    snprintf(x.lt_why, sizeof x.lt_why, "cuBLASLt off: ZINF_CUBLASLT=0");
    ck_assert_str_eq(cuexec_gemm_summary(&x, p, line, sizeof line), "NVRTC for all 1 GEMM (cuBLASLt off: ZINF_CUBLASLT=0)");
    /* ZINF_CUBLASLT=0: the launch, never the library */
    bind[3] = 0x40000;
    seen.f = NULL;
    ck_assert_int_eq(cuexec_launch(&x, p, 0, &b, (CUstream)0x77, err, sizeof err), 0);
    ck_assert_ptr_eq(seen.f, funcs[0]);
    ck_assert_int_eq(lt.matmuls, 3);
    x.gemm_of = NULL;
    cublaslt_close(&x.lt);
    plan_free(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cuexec");
    TCase *tc = tcase_create("cuexec");
    tcase_add_test(tc, test_every_argument_kind);
    tcase_add_test(tc, test_utility_binding_by_position);
    tcase_add_test(tc, test_messages);
    tcase_add_test(tc, test_open_without_driver);
    tcase_add_test(tc, test_gemm_through_cublaslt);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
