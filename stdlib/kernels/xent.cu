/* xent: fused softmax + cross-entropy over the last dim V.
 * Forward: one block (256 threads) per row, online max/sum in one pass:
 * row_loss[r] = log(sum exp(x - m)) + m - x[target]; then zk_xent_mean
 * (one block) sums the rows in a fixed order: loss = sum / N.
 * Backward: dlogits += (softmax - onehot(target)) * dloss[0] / N, the row's
 * max and sum recomputed. A negative target is an untrained position: its
 * row loss is 0 and it gets no gradient (N still counts it; the runtime
 * scales the loss to the mean over trained targets). A target >= V sets
 * err = {1, target, row0 + row}.
 * The chunked loss (linear_cross_entropy) runs zk_xent_fwd on each chunk's
 * logits (row0 its first row), zk_xent_mean over all rows, and backward
 * zk_xent_grad, which turns a chunk's recomputed logits into their
 * gradient in place. */
#include "common.cuh"

/* Block-wide online softmax statistics of one row: returns max in *m, sum of exp(x - m). */
__device__ float zk_row_stats(const T *xr, long long V, float *m_out, float *scratch) {
    float m = -ZK_INF, s = 0.f;
    for (long long c = threadIdx.x; c < V; c += blockDim.x) {
        float v = zk_ld(xr + c);
        if (v > m) {
            s = s * expf(m - v) + 1.f;
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    /* combine (m, s) across the block */
    for (int o = 16; o > 0; o >>= 1) {
        float mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
        float mn = fmaxf(m, mo);
        s = (m == -ZK_INF ? 0.f : s * expf(m - mn)) + (mo == -ZK_INF ? 0.f : so * expf(mo - mn));
        m = mn;
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
        scratch[w] = m;
        scratch[32 + w] = s;
    }
    __syncthreads();
    float M = -ZK_INF;
    for (int k = 0; k < nw; k++) M = fmaxf(M, scratch[k]);
    float S = 0.f;
    for (int k = 0; k < nw; k++)
        if (scratch[k] != -ZK_INF) S += scratch[32 + k] * expf(scratch[k] - M);
    *m_out = M;
    return S;
}

extern "C" __global__ void zk_xent_fwd(float *row_loss, const T *logits, const int *targets, long long N,
                                       long long V, int *err, long long row0) {
    __shared__ float scratch[64];
    long long r = blockIdx.x;
    if (r >= N) return;
    const T *xr = logits + r * V;
    float m;
    float s = zk_row_stats(xr, V, &m, scratch);
    if (threadIdx.x == 0) {
        long long t = targets[r];
        if (t < 0) {
            row_loss[r] = 0.f;
        } else if (t >= V) {
            if (atomicCAS(err, 0, 1) == 0) {
                err[1] = (int)t;
                err[2] = (int)(row0 + r);
            }
            row_loss[r] = 0.f;
        } else {
            row_loss[r] = logf(s) + m - zk_ld(xr + t);
        }
    }
}

/* loss[0] = sum(row_loss) / N, one block of 256, fixed order. */
extern "C" __global__ void zk_xent_mean(float *loss, const float *row_loss, long long N) {
    __shared__ float scratch[32];
    float acc = 0.f;
    for (long long i = threadIdx.x; i < N; i += blockDim.x) acc += row_loss[i];
    acc = zk_block_sum(acc, scratch);
    if (threadIdx.x == 0) loss[0] = acc / (float)N;
}

extern "C" __global__ void zk_xent_bwd(T *dlogits, const T *logits, const int *targets, const float *dloss,
                                       long long N, long long V) {
    __shared__ float scratch[64];
    long long r = blockIdx.x;
    if (r >= N) return;
    long long t = targets[r];
    if (t < 0) return; /* untrained: the whole block leaves before any barrier */
    const T *xr = logits + r * V;
    float m;
    float s = zk_row_stats(xr, V, &m, scratch);
    float k = dloss[0] / (float)N, inv = 1.f / s;
    T *dr = dlogits + r * V;
    for (long long c = threadIdx.x; c < V; c += blockDim.x) {
        float p = expf(zk_ld(xr + c) - m) * inv - (c == t ? 1.f : 0.f);
        zk_st(dr + c, zk_ld(dr + c) + p * k);
    }
}

/* In place: logits[r] (n rows of a chunk) becomes (softmax - onehot(target))
 * * dloss[0] / N, N the rows of the whole loss; a row whose target is
 * untrained (< 0) or outside [0, V) (the forward reported it) becomes 0.
 * Each thread writes only the columns it read, after the block's last
 * barrier in zk_row_stats, so no read sees a written value. */
extern "C" __global__ void zk_xent_grad(T *logits, const int *targets, const float *dloss, long long n, long long V,
                                        long long N) {
    __shared__ float scratch[64];
    long long r = blockIdx.x;
    if (r >= n) return;
    long long t = targets[r];
    T *xr = logits + r * V;
    if (t < 0 || t >= V) { /* the whole block leaves before any barrier */
        for (long long c = threadIdx.x; c < V; c += blockDim.x) zk_st(xr + c, 0.f);
        return;
    }
    float m;
    float s = zk_row_stats(xr, V, &m, scratch);
    float k = dloss[0] / (float)N, inv = 1.f / s;
    for (long long c = threadIdx.x; c < V; c += blockDim.x)
        zk_st(xr + c, (expf(zk_ld(xr + c) - m) * inv - (c == t ? 1.f : 0.f)) * k);
}
