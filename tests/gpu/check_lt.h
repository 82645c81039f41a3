/* check_lt: runtime/gpu/cublaslt.c for the kernel check harness, in plain C
 * types (check_kernels.c has no toolkit headers). */
#ifndef ZINF_CHECK_LT_H
#define ZINF_CHECK_LT_H
#include <stddef.h>
#include <stdint.h>
/* Opens cuBLASLt (the CUDA context current); NULL, or why not. */
const char *check_lt_open(void);
/* "libcublasLt.so.13 13.1.0" */
const char *check_lt_name(char *buf, size_t n);
/* Enqueues row-major C[M, N] = A[M, K] B[K, N] (dtype: 1 f32, 2 bf16, 3
 * f16) on the legacy stream with ws_bytes of workspace at ws: 0, 1 when
 * cuBLASLt has no algorithm, -1 with err. */
int check_lt_gemm(int64_t M, int64_t N, int64_t K, int dtype, unsigned long long A, unsigned long long B,
                  unsigned long long C, unsigned long long ws, int64_t ws_bytes, char *err, size_t n);
#endif
