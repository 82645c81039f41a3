/* decode: the one-position kernels of zinfgen --decode kv on the CUDA
 * backend (runtime/decode_cuda.c runs them; docs/generation.md).
 *
 * A decode step computes one row (position p of row 0) of every forward op
 * the token ids reach; ops only parameters reach run once with all their
 * rows. So every kernel here takes a row count, and the matrix products
 * are matrix-vector products over the parameter: nothing here is tiled for
 * the tensor cores, since one row reads each weight once and the step is
 * bound by those reads.
 *
 * Each kernel is a template over S, the storage type of its float tensors
 * (float, zk_bf16, zk_f16; arithmetic in fp32, as every family). The
 * extern "C" entry points, one per kernel and storage type
 * (zkd_<kernel>_<f32|bf16|f16>), are written by compiler/cuda_gen_decode.c
 * after this text: the plan carries one decode unit whatever the model's
 * dtype. The attention keys and values live in fp32 caches [T, KV*hd]
 * that zkd_kv_append fills one row a step; zkd_attend reads positions
 * 0..p, with one block per query head and the scores in a [H, T] fp32
 * scratch. */
#include "common.cuh"

/* Block-wide max (blockDim.x a multiple of 32); every thread gets it. */
__device__ __forceinline__ float zkd_block_max(float v, float *scratch) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = zk_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    float t = lane < nw ? scratch[lane] : -ZK_INF;
    return zk_warp_max(t);
}

/* y[r, :] = table[ids[r], :]; an id outside [0, V) writes zeros and sets
 * err = {1, id, r} (first writer wins). One block per row. */
template <typename S>
__device__ void zkd_embed(S *y, const S *table, const int *ids, long long rows, long long V, long long D, int *err) {
    long long r = blockIdx.x;
    if (r >= rows) return;
    long long id = ids[r];
    bool ok = id >= 0 && id < V;
    if (!ok && threadIdx.x == 0 && atomicCAS(err, 0, 1) == 0) {
        err[1] = (int)id;
        err[2] = (int)r;
    }
    for (long long c = threadIdx.x; c < D; c += blockDim.x) zk_st(y + r * D + c, ok ? zk_ld(table + id * D + c) : 0.f);
}

/* y[r, n] = sum_k x[r, k] W(k, n) (+ b[n]), W(k, n) = w[k N + n] (w [K, N])
 * or, tb, w[n K + k] (w [N, K]). Without tb a thread owns an output and
 * the threads of a warp read adjacent weights; with tb a warp owns an
 * output and its lanes read adjacent weights of the row, summed across the
 * warp. grid: (ceil(N / 256), rows) without tb, (ceil(N / 8), rows) with. */
template <typename S>
__device__ void zkd_linear(S *y, const S *x, const S *w, const S *b, long long K, long long N, long long tb) {
    long long r = blockIdx.y;
    const S *xr = x + r * K;
    if (!tb) {
        long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (n >= N) return;
        float acc = 0.f;
        for (long long k = 0; k < K; k++) acc += zk_ld(xr + k) * zk_ld(w + k * N + n);
        if (b) acc += zk_ld(b + n);
        zk_st(y + r * N + n, acc);
        return;
    }
    long long n = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    float acc = 0.f;
    if (n < N)
        for (long long k = lane; k < K; k += 32) acc += zk_ld(xr + k) * zk_ld(w + n * K + k);
    acc = zk_warp_sum(acc); /* every lane takes part: the shuffle is warp-wide */
    if (n < N && lane == 0) {
        if (b) acc += zk_ld(b + n);
        zk_st(y + r * N + n, acc);
    }
}

/* y[i] = big[i] + small[i % ns] (mul: *): the smaller operand's shape is a
 * suffix of the larger's, as the add and mul primitives broadcast. */
template <typename S>
__device__ void zkd_binary(S *y, const S *big, const S *small, long long n, long long ns, long long mul) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float a = zk_ld(big + i), s = zk_ld(small + i % ns);
        zk_st(y + i, mul ? a * s : a + s);
    }
}

/* layernorm over rows of D: one block per row; g, b may be NULL. */
template <typename S>
__device__ void zkd_layernorm(S *y, const S *x, const S *g, const S *b, long long rows, long long D, float eps) {
    __shared__ float scratch[32];
    long long r = blockIdx.x;
    if (r >= rows) return;
    const S *xr = x + r * D;
    float s = 0.f;
    for (long long c = threadIdx.x; c < D; c += blockDim.x) s += zk_ld(xr + c);
    float mean = zk_block_sum(s, scratch) / (float)D;
    float q = 0.f;
    for (long long c = threadIdx.x; c < D; c += blockDim.x) {
        float d = zk_ld(xr + c) - mean;
        q += d * d;
    }
    float rstd = 1.f / sqrtf(zk_block_sum(q, scratch) / (float)D + eps);
    for (long long c = threadIdx.x; c < D; c += blockDim.x) {
        float v = (zk_ld(xr + c) - mean) * rstd;
        if (g) v *= zk_ld(g + c);
        if (b) v += zk_ld(b + c);
        zk_st(y + r * D + c, v);
    }
}

/* rmsnorm over rows of D (a per-head rmsnorm: rows * heads rows of D /
 * heads, g of D / heads); one block per row; g may be NULL. */
template <typename S>
__device__ void zkd_rmsnorm(S *y, const S *x, const S *g, long long rows, long long D, float eps) {
    __shared__ float scratch[32];
    long long r = blockIdx.x;
    if (r >= rows) return;
    const S *xr = x + r * D;
    float q = 0.f;
    for (long long c = threadIdx.x; c < D; c += blockDim.x) {
        float v = zk_ld(xr + c);
        q += v * v;
    }
    float rstd = 1.f / sqrtf(zk_block_sum(q, scratch) / (float)D + eps);
    for (long long c = threadIdx.x; c < D; c += blockDim.x) {
        float v = zk_ld(xr + c) * rstd;
        if (g) v *= zk_ld(g + c);
        zk_st(y + r * D + c, v);
    }
}

/* what: 0 gelu (tanh approximation), 1 silu, 2 scale by `by`. */
template <typename S>
__device__ void zkd_unary(S *y, const S *x, long long n, long long what, float by) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = zk_ld(x + i), o;
        if (what == 0) {
            float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
            o = 0.5f * v * (1.f + tanhf(u));
        } else if (what == 1) {
            o = v / (1.f + expf(-v));
        } else {
            o = by * v;
        }
        zk_st(y + i, o);
    }
}

/* y[r, c] = x[r, off + c], c < W, x's rows of X: one piece of a split. */
template <typename S>
__device__ void zkd_columns(S *y, const S *x, long long rows, long long X, long long off, long long W) {
    long long n = rows * W;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        zk_st(y + i, zk_ld(x + (i / W) * X + off + i % W));
}

/* rope of one row at position pos, "rotate half", H heads of hd; the
 * frequency rule and the fp64 angle of the rope family. One thread a pair. */
template <typename S>
__device__ void zkd_rope(S *y, const S *x, long long H, long long hd, long long pos, double theta, long long scaling,
                         double factor, double low, double high, double orig) {
    long long half = hd / 2, n = H * half;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long j = i % half, h = i / half;
        double f = pow(theta, -2.0 * (double)j / (double)hd);
        if (scaling == 1) {
            f /= factor;
        } else if (scaling == 2) {
            double wavelen = 6.283185307179586 / f;
            if (wavelen > orig / low) {
                f /= factor;
            } else if (wavelen >= orig / high) {
                double s = (orig / wavelen - low) / (high - low);
                f = (1.0 - s) * f / factor + s * f;
            }
        }
        double a = (double)pos * f;
        float c = (float)cos(a), s = (float)sin(a);
        long long base = h * hd;
        float x0 = zk_ld(x + base + j), x1 = zk_ld(x + base + j + half);
        zk_st(y + base + j, x0 * c - x1 * s);
        zk_st(y + base + j + half, x0 * s + x1 * c);
    }
}

/* The step's keys and values (one row of kd) into row pos of the caches. */
template <typename S>
__device__ void zkd_kv_append(float *kc, float *vc, const S *k, const S *v, long long kd, long long pos) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < kd; i += (long long)gridDim.x * blockDim.x) {
        kc[pos * kd + i] = zk_ld(k + i);
        vc[pos * kd + i] = zk_ld(v + i);
    }
}

/* Causal attention of the row at position pos over the caches' rows
 * 0..pos: block h is query head h, reading kv head h / (H / KV);
 * softmax(q K^T / sqrt(hd)) V with the scores in sc[h * T ...]. */
template <typename S>
__device__ void zkd_attend(S *y, const S *q, const float *kc, const float *vc, float *sc, long long H, long long KV,
                           long long hd, long long T, long long pos) {
    __shared__ float scratch[32];
    long long h = blockIdx.x;
    if (h >= H) return;
    long long kd = KV * hd, g = h / (H / KV);
    const S *qh = q + h * hd;
    float *s = sc + h * T;
    float scale = 1.f / sqrtf((float)hd), m = -ZK_INF;
    for (long long j = threadIdx.x; j <= pos; j += blockDim.x) {
        const float *kj = kc + j * kd + g * hd;
        float acc = 0.f;
        for (long long e = 0; e < hd; e++) acc += zk_ld(qh + e) * kj[e];
        s[j] = acc * scale;
        m = fmaxf(m, s[j]);
    }
    m = zkd_block_max(m, scratch);
    float sum = 0.f;
    for (long long j = threadIdx.x; j <= pos; j += blockDim.x) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    sum = zk_block_sum(sum, scratch); /* its barriers also publish s[] to the block */
    for (long long e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0.f;
        for (long long j = 0; j <= pos; j++) acc += s[j] * vc[j * kd + g * hd + e];
        zk_st(y + h * hd + e, acc / sum);
    }
}

/* *p = v: the token id of the step, or arange's one value (the position). */
extern "C" __global__ void zkd_set(int *p, long long v) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *p = (int)v;
}
