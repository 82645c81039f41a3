/* A stand-in for <cblas.h> with only what runtime/hostk/hostk.c calls, for
 * machines without OpenBLAS (the GPU image): check_kernels.sh builds the
 * host reference against tests/gpu/cblas_shim.c when the real header is
 * missing. Row-major sgemm, naive and exact enough for test-sized shapes. */
#ifndef ZINF_CBLAS_SHIM_H
#define ZINF_CBLAS_SHIM_H
typedef int blasint;
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, blasint M, blasint N,
                 blasint K, float alpha, const float *A, blasint lda, const float *B, blasint ldb, float beta,
                 float *C, blasint ldc);
/* runtime/hostk/hostk_threads.c sizes OpenBLAS's own pool; the shim has none */
void openblas_set_num_threads(int n);
#endif
