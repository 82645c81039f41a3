/* hostk_rows: the drivers of the vectorised host kernels (private to
 * hostk): they cut a tensor into fixed units (element blocks, rows, chunks
 * of rows, GEMM panels) whose count depends only on the shape, run the
 * units on the rank's team (hostk_threads.h) and each unit through the
 * instruction-set table (hostk_vec.h). Results therefore do not depend on
 * the thread count. Arguments are checked by the callers (hostk_nn.c,
 * hostk.c); nothing here allocates. */
#ifndef ZINF_HOSTK_ROWS_H
#define ZINF_HOSTK_ROWS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "hostk.h"

typedef enum HkUnary { HK_UNARY_GELU, HK_UNARY_SILU } HkUnary;

/* y = f(x); dx += dy * f'(x) (same numel, any float dtypes). */
void hk_rows_unary_fwd(HkUnary f, const HkTensor *x, HkTensor *y);
void hk_rows_unary_bwd(HkUnary f, const HkTensor *x, const HkTensor *dy, HkTensor *dx);

/* Rows of a norm are cut into hk_norm_chunks(R) chunks; the backward keeps
 * nvec double partial vectors of D per chunk (dg, db) in the workspace. */
int64_t hk_norm_chunks(int64_t R);
size_t hk_norm_partial_bytes(int64_t R, int64_t D, int nvec);
void hk_rows_ln_fwd(const HkTensor *x, const HkTensor *g, const HkTensor *b, HkTensor *y, double eps, float *mean,
                    float *rstd);
void hk_rows_ln_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *dy, HkTensor *dx, HkTensor *dg,
                    HkTensor *db, const float *mean, const float *rstd, double *partial);
void hk_rows_rms_fwd(const HkTensor *x, const HkTensor *g, HkTensor *y, double eps, float *rstd);
void hk_rows_rms_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *dy, HkTensor *dx, HkTensor *dg,
                     const float *rstd, double *partial);

/* cross-entropy rows of logits [R, V]: lse[r]; dlogits[r] += (softmax - onehot) * dl. */
void hk_rows_ce_lse(const HkTensor *logits, float *lse);
void hk_rows_ce_bwd(const HkTensor *logits, const int32_t *targets, const float *lse, float dl, HkTensor *dlogits);

/* add, mul with the smaller operand S (numel ns) repeating along the larger B:
 * y = B (+|*) S;  dB += dy (* S);  dS += column sums of dy (* B). */
void hk_rows_binary_fwd(const HkTensor *B, const HkTensor *S, HkTensor *y, bool mul);
void hk_rows_binary_bwd(const HkTensor *B, const HkTensor *S, const HkTensor *dy, HkTensor *dB, HkTensor *dS, bool mul);
/* split of x [R, N] into n pieces [R, w_i]; backward accumulates (a piece without data adds nothing) */
void hk_rows_split_fwd(const HkTensor *x, HkTensor *pieces, int n);
void hk_rows_split_bwd(const HkTensor *dpieces, int n, HkTensor *dx);

/* embedding rows: y[i] = table[ids[i]];  dtable[ids[i]] += dy[i] (units own column blocks) */
void hk_rows_embed_fwd(const HkTensor *table, const int32_t *ids, int64_t n, HkTensor *y);
void hk_rows_embed_bwd(const int32_t *ids, int64_t n, const HkTensor *dy, HkTensor *dtable);

/* dst = src converted, n elements, on the team. */
void hk_rows_cast(const void *src, DType st, void *dst, DType dt, int64_t n);
/* g [N] += column sums of dy [R, N] (in double, rounded once into g). */
void hk_rows_colsum(const float *dy, int64_t R, int64_t N, HkTensor *g);
/* Y [R, N] += b [N] (b any float dtype). */
void hk_rows_bias(float *Y, int64_t R, int64_t N, const HkTensor *b);

/* C [M, N] = op(A) op(B) + beta C (row-major, cblas_sgemm's arguments), cut
 * into panels of C that run on the team with OpenBLAS single-threaded. */
void hk_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B, float beta, float *C);

#endif
