/* check_lt: the harness's door to runtime/gpu/cublaslt.c (check_kernels.c
 * declares its own CUDA types and cannot include the toolkit's headers):
 * a row-major plan GEMM run through cuBLASLt exactly as zinfrun runs it,
 * for the timing table and the comparison with the NVRTC gemm. */
#include <stdio.h>
#include <string.h>
#include "check_lt.h"
#include "cublaslt.h"

static CublasLt lt;
static int lt_state; /* 0 not tried, 1 open, -1 unavailable */
static char lt_why[256];

const char *check_lt_open(void) {
    if (!lt_state) lt_state = cublaslt_open(&lt, lt_why, sizeof lt_why) == 0 ? 1 : -1;
    if (lt_state < 0) return lt_why;
    return NULL;
}

const char *check_lt_name(char *buf, size_t n) { return lt_state > 0 ? cublaslt_describe(&lt, buf, n) : "cuBLASLt"; }

int check_lt_gemm(int64_t M, int64_t N, int64_t K, int dtype, unsigned long long A, unsigned long long B,
                  unsigned long long C, unsigned long long ws, int64_t ws_bytes, char *err, size_t n) {
    if (lt_state <= 0) return -1;
    PlanGemm g;
    memset(&g, 0, sizeof g);
    g = (PlanGemm){.path = PLAN_GEMM_LT, .dtype = (uint8_t)dtype, .c = 2, .a = 0, .b = 1, .bias = -1, .m = M, .n = N, .k = K,
                   .lda = K, .ldb = N, .ldc = N, .batch = 1, .rbatch = 1, .ws_bytes = ws_bytes};
    LtOperands o = {.c = C, .a = A, .b = B, .ws = ws};
    return cublaslt_gemm(&lt, &g, &o, NULL, err, n);
}
