/* gemm: C[M, N] = alpha * sum_{r < rbatch} opA(A_r) opB(B_r) + beta * C + bias
 * for each of gridDim.z output batches (A, B, C advance by sA, sB, sC per
 * output batch and A, B by rsA, rsB per summed batch r).
 *   opA(A)[m, k] = ZK_TA ? A[k*lda + m] : A[m*lda + k]
 *   opB(B)[k, n] = ZK_TB ? B[n*ldb + k] : B[k*ldb + n]
 * bias [N] may be NULL; beta = 1 accumulates (gradients), 0 overwrites.
 * Every product of linear and matmul, forward and backward, is one launch
 * of this kernel (compiler/cuda_gen*.c maps them).
 *
 * Specialisation (#defines from cuda_gen): ZK_TA, ZK_TB, tile ZK_BM x ZK_BN
 * x ZK_BK and warp tile ZK_WM x ZK_WN.
 * ZK_TC = 1 (ZK_T bf16 or f16): tensor cores, mma.sync m16n8k16 (sm_80+),
 * fp32 accumulation. Global tiles are staged through registers into shared
 * memory in one canonical k-contiguous layout (As[m][k], Bs[n][k], rows
 * padded by 8 halves, conflict-free fragment loads) whatever the operands'
 * transposition, double buffered: the next tile's global loads are in flight
 * while the current tile is multiplied. Global loads are 16 bytes (8
 * elements along the operand's contiguous dimension) when its leading dim
 * and base are 8-element aligned, element by element otherwise and at the
 * edges.
 * ZK_TC = 0 (f32): SIMT, 256 threads, each a 4 x 4 block of C. */
#include "common.cuh"

#if ZK_TC
#define ZK_NTHREADS ((ZK_BM / ZK_WM) * (ZK_BN / ZK_WN) * 32)
#define ZK_MT (ZK_WM / 16)
#define ZK_NT (ZK_WN / 8)
#define ZK_LA (ZK_BM * ZK_BK / ZK_NTHREADS)
#define ZK_LB (ZK_BN * ZK_BK / ZK_NTHREADS)
#define ZK_VA (ZK_LA / 8)
#define ZK_VB (ZK_LB / 8)

/* Eight 16-bit elements, as one 16-byte load or store. */
struct __align__(16) zk_v8 { unsigned w[4]; };

__device__ __forceinline__ unsigned short zk_half(const zk_v8 &v, int j) {
    return (unsigned short)(v.w[j >> 1] >> ((j & 1) * 16));
}

/* Elements (r, c .. c+7) of a row-major [R, Cn] matrix with leading dim ld,
 * zero outside it: one 16-byte load when vec (ld and base 8-aligned) and the
 * eight are inside, else one by one. */
__device__ __forceinline__ zk_v8 zk_load8(const T *base, long long r, long long c, long long ld, long long R,
                                          long long Cn, bool vec) {
    zk_v8 v;
    if (vec && r < R && c + 7 < Cn) return *(const zk_v8 *)(base + r * ld + c);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        unsigned lo = (r < R && c + 2 * j < Cn) ? base[r * ld + c + 2 * j].x : 0u;
        unsigned hi = (r < R && c + 2 * j + 1 < Cn) ? base[r * ld + c + 2 * j + 1].x : 0u;
        v.w[j] = lo | (hi << 16);
    }
    return v;
}

__device__ __forceinline__ void zk_mma(float *c, const unsigned *a, const unsigned *b) {
#if defined(ZK_EMU)
    emu_mma_m16n8k16(c, a, b, ZK_DT == 2);
#elif ZK_DT == 2
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

extern "C" __global__ void __launch_bounds__(ZK_NTHREADS)
zk_gemm(T *C, const T *A, const T *B, const T *bias, long long M, long long N, long long K, long long lda,
        long long ldb, long long ldc, long long sA, long long sB, long long sC, long long rbatch,
        long long rsA, long long rsB, float alpha, float beta) {
    __shared__ __align__(16) unsigned short As[2][ZK_BM][ZK_BK + 8];
    __shared__ __align__(16) unsigned short Bs[2][ZK_BN][ZK_BK + 8];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / (ZK_BN / ZK_WN), wn = warp % (ZK_BN / ZK_WN);
    const int g = lane >> 2, tg = lane & 3;
    const long long m0 = (long long)blockIdx.y * ZK_BM, n0 = (long long)blockIdx.x * ZK_BN;
    A += blockIdx.z * sA;
    B += blockIdx.z * sB;
    C += blockIdx.z * sC;
    const long long nkt = (K + ZK_BK - 1) / ZK_BK, ntiles = nkt * rbatch;
    /* 16-byte global loads when the operand's contiguous dimension allows */
    const bool vecA = (lda & 7) == 0 && (rsA & 7) == 0 && ((unsigned long long)(const void *)A & 15) == 0;
    const bool vecB = (ldb & 7) == 0 && (rsB & 7) == 0 && ((unsigned long long)(const void *)B & 15) == 0;
    zk_v8 ra[ZK_VA], rb[ZK_VB];
    float acc[ZK_MT][ZK_NT][4];
#pragma unroll
    for (int i = 0; i < ZK_MT; i++)
#pragma unroll
        for (int j = 0; j < ZK_NT; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.f;

/* vector v of the A (B) tile: 8 consecutive elements along the operand's
 * contiguous global dimension, starting at tile position (m or n, k);
 * consecutive threads take consecutive vectors. */
#define ZK_A_VPOS(v, mm, kk) do { if (ZK_TA) { mm = ((v) % (ZK_BM / 8)) * 8; kk = (v) / (ZK_BM / 8); } \
                                  else { mm = (v) / (ZK_BK / 8); kk = ((v) % (ZK_BK / 8)) * 8; } } while (0)
#define ZK_B_VPOS(v, nn, kk) do { if (ZK_TB) { nn = (v) / (ZK_BK / 8); kk = ((v) % (ZK_BK / 8)) * 8; } \
                                  else { nn = ((v) % (ZK_BN / 8)) * 8; kk = (v) / (ZK_BN / 8); } } while (0)
#define ZK_LOAD(t) do { \
        long long r_ = (t) / nkt, k0_ = ((t) % nkt) * ZK_BK; \
        const T *Ab_ = A + r_ * rsA, *Bb_ = B + r_ * rsB; \
        _Pragma("unroll") for (int i = 0; i < ZK_VA; i++) { \
            int v = tid + i * ZK_NTHREADS, mm, kk; ZK_A_VPOS(v, mm, kk); \
            long long gm = m0 + mm, gk = k0_ + kk; \
            ra[i] = ZK_TA ? zk_load8(Ab_, gk, gm, lda, K, M, vecA) : zk_load8(Ab_, gm, gk, lda, M, K, vecA); } \
        _Pragma("unroll") for (int i = 0; i < ZK_VB; i++) { \
            int v = tid + i * ZK_NTHREADS, nn, kk; ZK_B_VPOS(v, nn, kk); \
            long long gn = n0 + nn, gk = k0_ + kk; \
            rb[i] = ZK_TB ? zk_load8(Bb_, gn, gk, ldb, N, K, vecB) : zk_load8(Bb_, gk, gn, ldb, K, N, vecB); } \
    } while (0)
#define ZK_STORE(buf) do { \
        _Pragma("unroll") for (int i = 0; i < ZK_VA; i++) { \
            int v = tid + i * ZK_NTHREADS, mm, kk; ZK_A_VPOS(v, mm, kk); \
            if (ZK_TA) { _Pragma("unroll") for (int j = 0; j < 8; j++) As[buf][mm + j][kk] = zk_half(ra[i], j); } \
            else *(zk_v8 *)&As[buf][mm][kk] = ra[i]; } \
        _Pragma("unroll") for (int i = 0; i < ZK_VB; i++) { \
            int v = tid + i * ZK_NTHREADS, nn, kk; ZK_B_VPOS(v, nn, kk); \
            if (ZK_TB) *(zk_v8 *)&Bs[buf][nn][kk] = rb[i]; \
            else { _Pragma("unroll") for (int j = 0; j < 8; j++) Bs[buf][nn + j][kk] = zk_half(rb[i], j); } } \
    } while (0)

    if (ntiles > 0) {
        ZK_LOAD(0);
        ZK_STORE(0);
    }
    __syncthreads();
    for (long long t = 0; t < ntiles; t++) {
        const int cur = (int)(t & 1);
        if (t + 1 < ntiles) ZK_LOAD(t + 1);
#pragma unroll
        for (int ks = 0; ks < ZK_BK; ks += 16) {
            unsigned af[ZK_MT][4], bf[ZK_NT][2];
#pragma unroll
            for (int i = 0; i < ZK_MT; i++) {
                int r = wm * ZK_WM + i * 16 + g;
                af[i][0] = *(const unsigned *)&As[cur][r][ks + 2 * tg];
                af[i][1] = *(const unsigned *)&As[cur][r + 8][ks + 2 * tg];
                af[i][2] = *(const unsigned *)&As[cur][r][ks + 8 + 2 * tg];
                af[i][3] = *(const unsigned *)&As[cur][r + 8][ks + 8 + 2 * tg];
            }
#pragma unroll
            for (int j = 0; j < ZK_NT; j++) {
                int c = wn * ZK_WN + j * 8 + g;
                bf[j][0] = *(const unsigned *)&Bs[cur][c][ks + 2 * tg];
                bf[j][1] = *(const unsigned *)&Bs[cur][c][ks + 8 + 2 * tg];
            }
#pragma unroll
            for (int i = 0; i < ZK_MT; i++)
#pragma unroll
                for (int j = 0; j < ZK_NT; j++) zk_mma(acc[i][j], af[i], bf[j]);
        }
        if (t + 1 < ntiles) ZK_STORE(cur ^ 1);
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < ZK_MT; i++)
#pragma unroll
        for (int j = 0; j < ZK_NT; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                long long row = m0 + wm * ZK_WM + i * 16 + g + (c >> 1) * 8;
                long long col = n0 + wn * ZK_WN + j * 8 + 2 * tg + (c & 1);
                if (row < M && col < N) {
                    float v = alpha * acc[i][j][c];
                    if (beta != 0.f) v += beta * zk_ld(C + row * ldc + col);
                    if (bias) v += zk_ld(bias + col);
                    zk_st(C + row * ldc + col, v);
                }
            }
}

#else /* SIMT fp32 */
#define ZK_NTHREADS 256
#define ZK_LA (ZK_BM * ZK_BK / ZK_NTHREADS)
#define ZK_LB (ZK_BN * ZK_BK / ZK_NTHREADS)
#define ZK_TM (ZK_BM / 16)
#define ZK_TN (ZK_BN / 16)

extern "C" __global__ void __launch_bounds__(ZK_NTHREADS)
zk_gemm(T *C, const T *A, const T *B, const T *bias, long long M, long long N, long long K, long long lda,
        long long ldb, long long ldc, long long sA, long long sB, long long sC, long long rbatch,
        long long rsA, long long rsB, float alpha, float beta) {
    __shared__ float As[2][ZK_BK][ZK_BM + 4];
    __shared__ float Bs[2][ZK_BK][ZK_BN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const long long m0 = (long long)blockIdx.y * ZK_BM, n0 = (long long)blockIdx.x * ZK_BN;
    A += blockIdx.z * sA;
    B += blockIdx.z * sB;
    C += blockIdx.z * sC;
    const long long nkt = (K + ZK_BK - 1) / ZK_BK, ntiles = nkt * rbatch;
    float ra[ZK_LA], rb[ZK_LB], acc[ZK_TM][ZK_TN];
#pragma unroll
    for (int i = 0; i < ZK_TM; i++)
#pragma unroll
        for (int j = 0; j < ZK_TN; j++) acc[i][j] = 0.f;
#define ZK_A_POS(e, mm, kk) do { if (ZK_TA) { mm = (e) % ZK_BM; kk = (e) / ZK_BM; } \
                                 else { mm = (e) / ZK_BK; kk = (e) % ZK_BK; } } while (0)
#define ZK_B_POS(e, nn, kk) do { if (ZK_TB) { nn = (e) / ZK_BK; kk = (e) % ZK_BK; } \
                                 else { nn = (e) % ZK_BN; kk = (e) / ZK_BN; } } while (0)
#define ZK_LOAD(t) do { \
        long long r_ = (t) / nkt, k0_ = ((t) % nkt) * ZK_BK; \
        const T *Ab_ = A + r_ * rsA, *Bb_ = B + r_ * rsB; \
        _Pragma("unroll") for (int i = 0; i < ZK_LA; i++) { \
            int e = tid + i * ZK_NTHREADS, mm, kk; ZK_A_POS(e, mm, kk); \
            long long gm = m0 + mm, gk = k0_ + kk; \
            ra[i] = (gm < M && gk < K) ? zk_ld(Ab_ + (ZK_TA ? gk * lda + gm : gm * lda + gk)) : 0.f; } \
        _Pragma("unroll") for (int i = 0; i < ZK_LB; i++) { \
            int e = tid + i * ZK_NTHREADS, nn, kk; ZK_B_POS(e, nn, kk); \
            long long gn = n0 + nn, gk = k0_ + kk; \
            rb[i] = (gn < N && gk < K) ? zk_ld(Bb_ + (ZK_TB ? gn * ldb + gk : gk * ldb + gn)) : 0.f; } \
    } while (0)
#define ZK_STORE(buf) do { \
        _Pragma("unroll") for (int i = 0; i < ZK_LA; i++) { \
            int e = tid + i * ZK_NTHREADS, mm, kk; ZK_A_POS(e, mm, kk); As[buf][kk][mm] = ra[i]; } \
        _Pragma("unroll") for (int i = 0; i < ZK_LB; i++) { \
            int e = tid + i * ZK_NTHREADS, nn, kk; ZK_B_POS(e, nn, kk); Bs[buf][kk][nn] = rb[i]; } \
    } while (0)

    if (ntiles > 0) {
        ZK_LOAD(0);
        ZK_STORE(0);
    }
    __syncthreads();
    for (long long t = 0; t < ntiles; t++) {
        const int cur = (int)(t & 1);
        if (t + 1 < ntiles) ZK_LOAD(t + 1);
#pragma unroll
        for (int kk = 0; kk < ZK_BK; kk++) {
            float a[ZK_TM], b[ZK_TN];
#pragma unroll
            for (int i = 0; i < ZK_TM; i++) a[i] = As[cur][kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < ZK_TN; j++) b[j] = Bs[cur][kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < ZK_TM; i++)
#pragma unroll
                for (int j = 0; j < ZK_TN; j++) acc[i][j] += a[i] * b[j];
        }
        if (t + 1 < ntiles) ZK_STORE(cur ^ 1);
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < ZK_TM; i++)
#pragma unroll
        for (int j = 0; j < ZK_TN; j++) {
            long long row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
            if (row < M && col < N) {
                float v = alpha * acc[i][j];
                if (beta != 0.f) v += beta * zk_ld(C + row * ldc + col);
                if (bias) v += zk_ld(bias + col);
                zk_st(C + row * ldc + col, v);
            }
        }
}
#endif
