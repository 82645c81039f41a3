/* decode: the one-position kernels of zinfgen --decode kv on the CUDA
 * backend (runtime/decode/decode_cuda.c runs them; docs/generation.md).
 *
 * A decode step computes one row (position p of row 0) of every forward op
 * the token ids reach; ops only parameters reach run once with all their
 * rows. So every kernel takes a row count, and the matrix products are
 * matrix-vector products over the parameter: nothing here is tiled for
 * the tensor cores, since one row reads each weight once and the step is
 * bound by those reads.
 *
 * Where a training kernel computes the same rows (embedding, add and mul,
 * layernorm, rmsnorm, gelu, silu, scale, split), the decode entry calls
 * it: compiler/cuda_gen_decode.c pastes, once per storage type of the
 * model (T: float, zk_bf16, zk_f16) in a namespace of its own, the
 * families' files (embedding.cu, elementwise.cu, norm.cu, rope.cu, with
 * their kernels as __device__ functions) and then this file, whose
 * functions are written in T like theirs; its extern "C" entry points
 * (zkd_<kernel>_<f32|bf16|f16>) come after. What is here is only what
 * training has no kernel for: the matrix-vector product, rope at a
 * position, attention over the cache, and a mixture of experts' products
 * for one row (moe.cu, also pasted, gives routing, gates, combination and
 * the shared expert's gate). The attention keys and values
 * live in fp32 caches [T, KV*hd] that zkd_kv_append fills one row a step;
 * zkd_attend reads positions 0..p, with one block per query head and the
 * scores in a [H, T] fp32 scratch. */
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

/* y[r, n] = sum_k x[r, k] W(k, n) (+ b[n]), W(k, n) = w[k N + n] (w [K, N])
 * or, tb, w[n K + k] (w [N, K]). Without tb a thread owns an output and
 * the threads of a warp read adjacent weights; with tb a warp owns an
 * output and its lanes read adjacent weights of the row, summed across the
 * warp. grid: (ceil(N / 256), rows) without tb, (ceil(N / 8), rows) with. */
__device__ void zkd_linear(T *y, const T *x, const T *w, const T *b, long long K, long long N, long long tb) {
    long long r = blockIdx.y;
    const T *xr = x + r * K;
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

/* scale as training runs it: y = 0, then y += by * x (the same elements
 * a thread, so no barrier between). */
__device__ void zkd_scale(T *y, const T *x, long long n, float by) {
    zk_fill(y, n, 0.f);
    zk_axpy(y, x, n, by);
}

/* rope of one row at position pos, "rotate half", H heads of hd, the
 * first rd columns of each head turned (the frequencies of a head of rd)
 * and the rest passed through, cos and sin times af: the rope family's
 * frequency rule (zk_rope_freq) and fp64 angle. div (longrope): the list
 * the text's length chose, pair j's frequency divided by div[j]; NULL:
 * scaling's rule. One thread a pair of the head's hd / 2. */
__device__ void zkd_rope(T *y, const T *x, long long H, long long hd, long long pos, double theta, long long scaling,
                         double factor, double low, double high, double orig, long long rd, double af, const double *div) {
    long long half = hd / 2, rhalf = rd / 2, n = H * half;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long j = i % half, h = i / half, base = h * hd;
        if (j >= rhalf) { /* partial rotary: columns rd + 2(j - rd/2) and the next pass through */
            long long col = rd + 2 * (j - rhalf);
            zk_st(y + base + col, zk_ld(x + base + col));
            zk_st(y + base + col + 1, zk_ld(x + base + col + 1));
            continue;
        }
        double f = div ? pow(theta, -2.0 * (double)j / (double)rd) / div[j]
                       : zk_rope_freq(theta, j, rd, scaling, factor, low, high, orig),
               sa, ca;
        sincos((double)pos * f, &sa, &ca);
        float c = (float)(ca * af), s = (float)(sa * af);
        float x0 = zk_ld(x + base + j), x1 = zk_ld(x + base + j + rhalf);
        zk_st(y + base + j, x0 * c - x1 * s);
        zk_st(y + base + j + rhalf, x0 * s + x1 * c);
    }
}

/* The step's keys and values (one row of kd) into row pos of the caches. */
__device__ void zkd_kv_append(float *kc, float *vc, const T *k, const T *v, long long kd, long long pos) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < kd; i += (long long)gridDim.x * blockDim.x) {
        kc[pos * kd + i] = zk_ld(k + i);
        vc[pos * kd + i] = zk_ld(v + i);
    }
}

/* Causal attention of the row at position pos over the caches' rows
 * 0..pos: block h is query head h, reading kv head h / (H / KV);
 * softmax(q K^T scale) V (scale 0: 1 / sqrt(hd)), the scores soft-capped
 * to cap tanh(s / cap) when cap > 0 (Gemma 2), in sc[h * Tn ...] (Tn: the
 * window's positions). */
__device__ void zkd_attend(T *y, const T *q, const float *kc, const float *vc, float *sc, long long H, long long KV,
                           long long hd, long long Tn, long long pos, float scale_attr, float cap) {
    __shared__ float scratch[32];
    long long h = blockIdx.x;
    if (h >= H) return;
    long long kd = KV * hd, g = h / (H / KV);
    const T *qh = q + h * hd;
    float *s = sc + h * Tn;
    float scale = scale_attr > 0 ? scale_attr : 1.f / sqrtf((float)hd), m = -ZK_INF;
    for (long long j = threadIdx.x; j <= pos; j += blockDim.x) {
        const float *kj = kc + j * kd + g * hd;
        float acc = 0.f;
        for (long long e = 0; e < hd; e++) acc += zk_ld(qh + e) * kj[e];
        s[j] = cap > 0 ? cap * tanhf(acc * scale / cap) : acc * scale;
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

#ifdef ZK_DECODE_MOE /* a unit for a mixture of experts: moe.cu comes before this file */
/* moe_expert for a step's rows: y[p, :] = w[idx[p]] x[p / k or p, :] for
 * the R*k (row, slot) pairs p (shared: x has a row per token, else one per
 * pair), w [E, O, I] in the [out, in] layout. The expert ids stay on the
 * device: each pair's block reads its own, so a step needs no copy back
 * and reads only its k experts' weights. As zkd_linear with tb: a warp
 * owns an output and its lanes read adjacent weights of the row. An id
 * outside [0, E) is moe.cu's error (err = {1, id, pair}) and its row is
 * zeros. grid: (ceil(O / 8), R*k). */
__device__ void zkd_moe_expert(T *y, const T *x, const int *idx, const T *w, long long R, long long k, long long E,
                               long long O, long long I, long long shared, int *err) {
    long long p = blockIdx.y;
    if (p >= R * k) return;
    long long n = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31, e = idx[p];
    bool bad = !(e >= 0 && e < E);
    if (bad) {
        if (blockIdx.x == 0 && threadIdx.x == 0) zk_moe_bad(e, E, p, err);
        if (n < O && lane == 0) zk_st(y + p * O + n, 0.f);
        return;
    }
    const T *xr = x + (shared ? p / k : p) * I, *we = w + (long long)e * O * I;
    float acc = 0.f;
    if (n < O)
        for (long long i = lane; i < I; i += 32) acc += zk_ld(xr + i) * zk_ld(we + n * I + i);
    acc = zk_warp_sum(acc); /* every lane takes part: the shuffle is warp-wide */
    if (n < O && lane == 0) zk_st(y + p * O + n, acc);
}
#endif

/* *p = v: the token id of the step, or arange's one value (the position). */
__device__ void zkd_set(int *p, long long v) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *p = (int)v;
}
