/* reduce: column sums (bias and broadcast gradients, the second pass of the
 * norm parameter gradients) and the global gradient norm. Deterministic: every
 * sum runs in a fixed order for a given launch, no atomics. */
#include "common.cuh"

/* Pass 1 of a column sum over x[rows, cols] (times mulby, if not NULL):
 * block (bx, p) with blockDim (32, 8) sums columns bx*32 + tx over rows
 * [p*rpp, (p+1)*rpp) into ws[p*cols + c]. */
extern "C" __global__ void zk_colsum_partial(float *ws, const T *x, const T *mulby, long long rows,
                                             long long cols, long long rpp) {
    __shared__ float s[8][33];
    long long c = (long long)blockIdx.x * 32 + threadIdx.x;
    long long r0 = (long long)blockIdx.y * rpp, r1 = r0 + rpp < rows ? r0 + rpp : rows;
    float acc = 0.f;
    if (c < cols)
        for (long long r = r0 + threadIdx.y; r < r1; r += 8) {
            float v = zk_ld(x + r * cols + c);
            if (mulby) v *= zk_ld(mulby + r * cols + c);
            acc += v;
        }
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0.f;
        for (int k = 0; k < 8; k++) t += s[k][threadIdx.x];
        ws[blockIdx.y * cols + c] = t;
    }
}
/* Pass 2: out[c] (+)= alpha * sum_p ws[p*cols + c]. */
extern "C" __global__ void zk_colsum_final(T *out, const float *ws, long long parts, long long cols,
                                           float alpha, long long acc) {
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
         c += (long long)gridDim.x * blockDim.x) {
        float t = 0.f;
        for (long long p = 0; p < parts; p++) t += ws[p * cols + c];
        zk_put(out + c, alpha * t, acc);
    }
}

/* Global gradient norm, pass 1 (one launch per gradient tensor, gridDim.x =
 * the slot count, blockDim 256): slot[b] = sum of x^2 over block b's share. */
extern "C" __global__ void zk_sumsq_partial(float *slot, const T *x, long long n) {
    __shared__ float scratch[32];
    float acc = 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = zk_ld(x + i);
        acc += v * v;
    }
    acc = zk_block_sum(acc, scratch);
    if (threadIdx.x == 0) slot[blockIdx.x] = acc;
}
/* Pass 2 (one block of 256): out[0] = sqrt(sum of ws[0..n)) (or the plain sum
 * when take_sqrt is 0, for a cross-rank all-reduce of squares in between). */
extern "C" __global__ void zk_norm_final(float *out, const float *ws, long long n, long long take_sqrt) {
    __shared__ float scratch[32];
    float acc = 0.f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) acc += ws[i];
    acc = zk_block_sum(acc, scratch);
    if (threadIdx.x == 0) out[0] = take_sqrt ? sqrtf(acc) : acc;
}
