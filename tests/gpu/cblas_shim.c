/* Naive cblas_sgemm (see shim/cblas.h): C = alpha op(A) op(B) + beta C,
 * accumulated in double, parallel over rows with OpenMP when available. */
#include "cblas.h"

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, blasint M, blasint N,
                 blasint K, float alpha, const float *A, blasint lda, const float *B, blasint ldb, float beta,
                 float *C, blasint ldc) {
    if (order != CblasRowMajor) { /* column-major C = op(A) op(B) is row-major C^T = op(B)^T op(A)^T */
        cblas_sgemm(CblasRowMajor, tb, ta, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc);
        return;
    }
#pragma omp parallel for schedule(static)
    for (blasint m = 0; m < M; m++)
        for (blasint n = 0; n < N; n++) {
            double s = 0;
            for (blasint k = 0; k < K; k++) {
                float a = ta == CblasTrans ? A[(long)k * lda + m] : A[(long)m * lda + k];
                float b = tb == CblasTrans ? B[(long)n * ldb + k] : B[(long)k * ldb + n];
                s += (double)a * b;
            }
            float *c = C + (long)m * ldc + n;
            *c = (float)(alpha * s + (beta != 0.0f ? (double)beta * *c : 0.0));
        }
}

void openblas_set_num_threads(int n) { (void)n; }
