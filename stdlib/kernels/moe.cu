/* moe: the mixture-of-experts primitives (docs/primitives.md, "Mixture of
 * experts") on the GPU, the same arithmetic as runtime/hostk/hostk_moe.c:
 * routing (top-k, the softmax gates and their renormalisation), the
 * grouped expert GEMMs, the weighted combination, the load-balancing
 * statistics and loss, the shared expert's sigmoid gate. Forward kernels
 * overwrite; backward kernels accumulate (+=). Every sum runs in a fixed
 * order for a given launch (no atomics), so results repeat bit for bit.
 *
 * The expert GEMMs are dropless and their buffers static: the n = R*k
 * (row, slot) pairs are listed expert by expert (zk_moe_route: start[E+1],
 * order[n] and its inverse pos[n], each expert's pairs in row order, as
 * the host kernel lists them) on the device; zk_moe_gather copies the rows
 * into a block [n, C] contiguous by expert, the products run on it
 * (through cuBLASLt, one call per expert with rows, or zk_moe_gemm_*), and
 * zk_moe_scatter moves or adds the result rows back to their (row, slot)
 * places. The output is [R, k, O] whatever the routing. A block of the
 * NVRTC product owns a 64-row tile of one expert's segment; the segments
 * cut into tiles number at most ceil(n/64) + min(E, n) whatever the
 * routing (every token on one expert included), which is the launch's
 * grid: blocks past the last tile return at once. The weight gradient's
 * blocks (one per expert and 64x64 tile of w[e]) loop over their expert's
 * segment, empty or all n rows. */
#include "common.cuh"

#define ZK_MOE_BM 64
#define ZK_MOE_BN 64
#define ZK_MOE_BK 16

/* ---- moe_topk: idx[r, 0..k) = the k largest logits of row r, largest first,
 * the lower expert first on ties, a NaN never before a number. One thread a row. */
extern "C" __global__ void zk_moe_topk(int *idx, const T *logits, long long R, long long E, long long k) {
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < R; r += (long long)gridDim.x * blockDim.x) {
        int *o = idx + r * k;
        for (long long j = 0; j < k; j++) {
            long long best = -1;
            float bv = 0.f;
            for (long long e = 0; e < E; e++) {
                bool taken = false;
                for (long long i = 0; i < j && !taken; i++) taken = o[i] == e;
                if (taken) continue;
                float v = zk_ld(logits + r * E + e);
                if (best < 0 || v > bv || (bv != bv && v == v)) {
                    best = e;
                    bv = v;
                }
            }
            o[j] = (int)best;
        }
    }
}

/* The softmax of row r: its max and 1 / sum of exp(l - max). */
__device__ __forceinline__ void zk_moe_softmax_stats(const T *l, long long E, float *mx, float *inv) {
    float m = -ZK_INF;
    for (long long e = 0; e < E; e++) m = fmaxf(m, zk_ld(l + e));
    float s = 0.f;
    for (long long e = 0; e < E; e++) s += expf(zk_ld(l + e) - m);
    *mx = m;
    *inv = 1.f / s;
}

/* An expert outside [0, E): err = {1, value, position} (first writer wins). */
__device__ __forceinline__ bool zk_moe_bad(int e, long long E, long long at, int *err) {
    if (e >= 0 && e < E) return false;
    if (atomicCAS(err, 0, 1) == 0) {
        err[1] = e;
        err[2] = (int)at;
    }
    return true;
}

/* ---- moe_gate: y[r, j] = p[idx[r, j]] (over their sum with normalize), p the
 * softmax of logits row r. One thread a row. */
extern "C" __global__ void zk_moe_gate_fwd(T *y, const T *logits, const int *idx, long long R, long long E,
                                           long long k, long long normalize, int *err) {
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < R; r += (long long)gridDim.x * blockDim.x) {
        const T *l = logits + r * E;
        const int *ix = idx + r * k;
        float mx, inv, s = 0.f;
        zk_moe_softmax_stats(l, E, &mx, &inv);
        bool bad = false;
        for (long long j = 0; j < k; j++) bad |= zk_moe_bad(ix[j], E, r * k + j, err);
        if (bad) {
            for (long long j = 0; j < k; j++) zk_st(y + r * k + j, 0.f);
            continue;
        }
        for (long long j = 0; j < k; j++) s += expf(zk_ld(l + ix[j]) - mx) * inv;
        for (long long j = 0; j < k; j++) {
            float g = expf(zk_ld(l + ix[j]) - mx) * inv;
            zk_st(y + r * k + j, normalize ? g / s : g);
        }
    }
}

/* Backward: dp_j = dy_j (normalize: (dy_j - sum_i dy_i g_i) / s), then
 * dlogits[r, e] += p_e (sum_{j: idx_j = e} dp_j - sum_j dp_j p_{idx_j}). */
extern "C" __global__ void zk_moe_gate_bwd(T *dlogits, const T *logits, const int *idx, const T *dy, long long R,
                                           long long E, long long k, long long normalize, int *err) {
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < R; r += (long long)gridDim.x * blockDim.x) {
        const T *l = logits + r * E;
        const int *ix = idx + r * k;
        const T *d = dy + r * k;
        float mx, inv, s = 0.f, dot = 0.f, pd = 0.f;
        zk_moe_softmax_stats(l, E, &mx, &inv);
        bool bad = false;
        for (long long j = 0; j < k; j++) bad |= zk_moe_bad(ix[j], E, r * k + j, err);
        if (bad) continue;
        for (long long j = 0; j < k; j++) s += expf(zk_ld(l + ix[j]) - mx) * inv;
        for (long long j = 0; j < k; j++) {
            float g = expf(zk_ld(l + ix[j]) - mx) * inv;
            dot += zk_ld(d + j) * (normalize ? g / s : g);
        }
        for (long long j = 0; j < k; j++) {
            float dp = normalize ? (zk_ld(d + j) - dot) / s : zk_ld(d + j);
            pd += dp * expf(zk_ld(l + ix[j]) - mx) * inv;
        }
        for (long long e = 0; e < E; e++) {
            float de = 0.f;
            for (long long j = 0; j < k; j++)
                if (ix[j] == e) de += normalize ? (zk_ld(d + j) - dot) / s : zk_ld(d + j);
            float p = expf(zk_ld(l + e) - mx) * inv;
            zk_st(dlogits + r * E + e, zk_ld(dlogits + r * E + e) + p * (de - pd));
        }
    }
}

/* ---- moe_expert ---- */

/* The (row, slot) pairs p = r k + j by expert: start[e] .. start[e+1] in
 * order[], each expert's in row order, and pos[p] the place of pair p in
 * order[] (its row in the gathered blocks; -1 for a pair naming no expert,
 * which is the op's error and is left out). One block: a thread per expert
 * counts and lists its pairs; thread 0 checks the ids and sums the counts. */
extern "C" __global__ void zk_moe_route(int *start, int *order, int *pos, const int *idx, long long n, long long E,
                                        int *err) {
    for (long long e = threadIdx.x; e < E; e += blockDim.x) {
        int c = 0;
        for (long long p = 0; p < n; p++) c += idx[p] == e;
        start[e + 1] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (long long p = 0; p < n; p++)
            if (zk_moe_bad(idx[p], E, p, err)) pos[p] = -1;
        start[0] = 0;
        for (long long e = 0; e < E; e++) start[e + 1] += start[e];
    }
    __syncthreads();
    for (long long e = threadIdx.x; e < E; e += blockDim.x) {
        int at = start[e];
        for (long long p = 0; p < n; p++)
            if (idx[p] == e) {
                pos[p] = at;
                order[at++] = (int)p;
            }
    }
}

/* The gather: dst[q, :] = src[order[q] / div, :] for the listed pairs
 * start[0] <= q < start[E] (C columns), zero past them (pairs left out by a
 * bad id), so the expert products read rows contiguous by expert. A tile's
 * start is advanced to its first expert: the rows before start[0] are the
 * earlier tiles', which its products never read, so they are not copied
 * again (the last of N tiles would otherwise copy every row). */
extern "C" __global__ void zk_moe_gather(T *dst, const T *src, const int *start, const int *order, long long n,
                                         long long E, long long C, long long div) {
    long long listed = start[E], first = (long long)start[0] * C;
    for (long long t = first + (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n * C; t += (long long)gridDim.x * blockDim.x) {
        long long q = t / C, c = t % C;
        zk_st(dst + t, q < listed ? zk_ld(src + (long long)(order[q] / div) * C + c) : 0.f);
    }
}

/* The scatter: dst[r, :] (+)= sum_j src[pos[r group + j], :] over the group
 * pairs of row r in slot order (group = k when dst has a row per token, 1
 * when it has one per pair), for rows [0, rows); a pair with pos < 0 adds
 * nothing. ACC adds into dst, else overwrites it. A thread per element: no
 * two threads write one element, no atomics. */
extern "C" __global__ void zk_moe_scatter(T *dst, const T *src, const int *pos, long long rows, long long group,
                                          long long C, long long acc) {
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < rows * C; t += (long long)gridDim.x * blockDim.x) {
        long long r = t / C, c = t % C;
        float v = acc ? zk_ld(dst + t) : 0.f;
        for (long long j = 0; j < group; j++) {
            int q = pos[r * group + j];
            if (q >= 0) v += zk_ld(src + (long long)q * C + c);
        }
        zk_st(dst + t, v);
    }
}

/* The scatter of a tile of experts (memory-centric tiling, docs/tuning.md):
 * as zk_moe_scatter over only the pairs gathered at [start[0], start[E]),
 * the rows of the tile's E experts (start is the route's, advanced to the
 * tile's first expert); the other pairs add nothing. With ACC 0 (the
 * forward's first tile) dst's rows are overwritten, the other tiles' pairs
 * with zeros; later tiles add (ACC 1) onto those zeros, so each place ends
 * holding its product exactly as untiled. */
extern "C" __global__ void zk_moe_scatter_tile(T *dst, const T *src, const int *pos, const int *start, long long rows,
                                               long long group, long long C, long long E, long long acc) {
    long long lo = start[0], hi = start[E];
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < rows * C; t += (long long)gridDim.x * blockDim.x) {
        long long r = t / C, c = t % C;
        float v = acc ? zk_ld(dst + t) : 0.f;
        for (long long j = 0; j < group; j++) {
            int q = pos[r * group + j];
            if (q >= lo && q < hi) v += zk_ld(src + (long long)q * C + c);
        }
        zk_st(dst + t, v);
    }
}

/* Tile t of the segments cut into 64-row tiles, expert by expert: its expert
 * and its rows [m0, m1) of the gathered block; false past the last tile. */
__device__ __forceinline__ bool zk_moe_tile(const int *start, long long E, long long t, long long *e_out, long long *m0,
                                            long long *m1) {
    long long before = 0;
    for (long long e = 0; e < E; e++) {
        long long c = start[e + 1] - start[e], nt = (c + ZK_MOE_BM - 1) / ZK_MOE_BM;
        if (t < before + nt) {
            *e_out = e;
            *m0 = start[e] + (t - before) * ZK_MOE_BM;
            *m1 = start[e] + c < *m0 + ZK_MOE_BM ? start[e] + c : *m0 + ZK_MOE_BM;
            return true;
        }
        before += nt;
    }
    return false;
}

/* One 64x64 tile of a grouped product on the gathered rows, 256 threads of
 * 4x4 outputs, fp32: C[m, n] = sum_q A[m, q] B_e(q, n) for the rows m of
 * the block's tile; B_e = w[e] [N, K] read transposed (TB) or [K, N]. */
template <bool TB>
__device__ __forceinline__ void zk_moe_gemm_tile(T *c, const T *a, const T *w, const int *start, long long E,
                                                 long long N, long long K) {
    __shared__ float As[ZK_MOE_BK][ZK_MOE_BM + 4];
    __shared__ float Bs[ZK_MOE_BK][ZK_MOE_BN + 4];
    long long e, m0, m1;
    if (!zk_moe_tile(start, E, blockIdx.y, &e, &m0, &m1)) return;
    const T *we = w + e * N * K;
    long long n0 = (long long)blockIdx.x * ZK_MOE_BN;
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.f;
    for (long long k0 = 0; k0 < K; k0 += ZK_MOE_BK) {
        for (int i = tid; i < ZK_MOE_BM * ZK_MOE_BK; i += 256) {
            int r = i / ZK_MOE_BK, q = i % ZK_MOE_BK;
            As[q][r] = m0 + r < m1 && k0 + q < K ? zk_ld(a + (m0 + r) * K + k0 + q) : 0.f;
        }
        for (int i = tid; i < ZK_MOE_BN * ZK_MOE_BK; i += 256) {
            int cn, q;
            if (TB) cn = i / ZK_MOE_BK, q = i % ZK_MOE_BK;
            else q = i / ZK_MOE_BN, cn = i % ZK_MOE_BN;
            bool in = n0 + cn < N && k0 + q < K;
            Bs[q][cn] = !in ? 0.f : TB ? zk_ld(we + (n0 + cn) * K + k0 + q) : zk_ld(we + (k0 + q) * N + n0 + cn);
        }
        __syncthreads();
        for (int q = 0; q < ZK_MOE_BK; q++) {
            float av[4], bv[4];
            for (int i = 0; i < 4; i++) av[i] = As[q][ty * 4 + i];
            for (int j = 0; j < 4; j++) bv[j] = Bs[q][tx * 4 + j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        long long m = m0 + ty * 4 + i;
        if (m >= m1) continue;
        for (int j = 0; j < 4; j++) {
            long long cn = n0 + tx * 4 + j;
            if (cn < N) zk_st(c + m * N + cn, acc[i][j]);
        }
    }
}

/* The expert products on the gathered rows, the same three cuBLASLt runs
 * one call per expert with rows for (runtime/gpu/cumoe.c; these kernels are
 * its fallback: no cuBLASLt, ZINF_CUBLASLT=0, no algorithm). Forward:
 * yg[q, :] = w[e] xg[q, :] for the rows q of expert e's segment, w [E, O,
 * I]. Grid (ceil(O / 64), the tile bound), 256 threads. */
extern "C" __global__ void zk_moe_gemm_fwd(T *yg, const T *xg, const T *w, const int *start, long long E, long long O,
                                           long long I) {
    zk_moe_gemm_tile<true>(yg, xg, w, start, E, O, I);
}

/* Backward, the input: dxg[q, :] = dyg[q, :] w[e] (overwrite; zk_moe_scatter
 * adds the rows into dx). Grid (ceil(I / 64), the tile bound). */
extern "C" __global__ void zk_moe_gemm_dx(T *dxg, const T *dyg, const T *w, const int *start, long long E, long long O,
                                          long long I) {
    zk_moe_gemm_tile<false>(dxg, dyg, w, start, E, I, O);
}

/* Backward, the weights: dw[e] [O, I] += dyg_e^T xg_e over expert e's rows
 * of the gathered blocks, in order. Grid (ceil(I / 64), ceil(O / 64), E). */
extern "C" __global__ void zk_moe_gemm_dw(T *dw, const T *dyg, const T *xg, const int *start, long long E, long long O,
                                          long long I) {
    __shared__ float As[ZK_MOE_BK][ZK_MOE_BM + 4];
    __shared__ float Bs[ZK_MOE_BK][ZK_MOE_BN + 4];
    long long e = blockIdx.z;
    if (e >= E) return;
    long long p0 = start[e], p1 = start[e + 1];
    if (p0 == p1) return;
    long long i0 = (long long)blockIdx.x * ZK_MOE_BN, o0 = (long long)blockIdx.y * ZK_MOE_BM;
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.f;
    for (long long q0 = p0; q0 < p1; q0 += ZK_MOE_BK) {
        for (int i = tid; i < ZK_MOE_BM * ZK_MOE_BK; i += 256) {
            int q = i / ZK_MOE_BM, o = i % ZK_MOE_BM;
            As[q][o] = q0 + q < p1 && o0 + o < O ? zk_ld(dyg + (q0 + q) * O + o0 + o) : 0.f;
        }
        for (int i = tid; i < ZK_MOE_BN * ZK_MOE_BK; i += 256) {
            int q = i / ZK_MOE_BN, c = i % ZK_MOE_BN;
            Bs[q][c] = q0 + q < p1 && i0 + c < I ? zk_ld(xg + (q0 + q) * I + i0 + c) : 0.f;
        }
        __syncthreads();
        for (int q = 0; q < ZK_MOE_BK; q++) {
            float av[4], bv[4];
            for (int i = 0; i < 4; i++) av[i] = As[q][ty * 4 + i];
            for (int j = 0; j < 4; j++) bv[j] = Bs[q][tx * 4 + j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    T *we = dw + e * O * I;
    for (int i = 0; i < 4; i++) {
        long long o = o0 + ty * 4 + i;
        if (o >= O) continue;
        for (int j = 0; j < 4; j++) {
            long long c = i0 + tx * 4 + j;
            if (c < I) zk_st(we + o * I + c, zk_ld(we + o * I + c) + acc[i][j]);
        }
    }
}

/* ---- moe_combine: y[r, d] = sum_j wt[r, j] o[r, j, d]. ---- */
extern "C" __global__ void zk_moe_combine_fwd(T *y, const T *o, const T *wt, long long R, long long k, long long D) {
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < R * D;
         t += (long long)gridDim.x * blockDim.x) {
        long long r = t / D, d = t % D;
        float acc = 0.f;
        for (long long j = 0; j < k; j++) acc += zk_ld(wt + r * k + j) * zk_ld(o + (r * k + j) * D + d);
        zk_st(y + t, acc);
    }
}
/* dout[r, j, d] += wt[r, j] dy[r, d]. */
extern "C" __global__ void zk_moe_combine_bwd_o(T *dout, const T *dy, const T *wt, long long R, long long k,
                                                long long D) {
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < R * k * D;
         t += (long long)gridDim.x * blockDim.x) {
        long long p = t / D, d = t % D;
        zk_st(dout + t, zk_ld(dout + t) + zk_ld(wt + p) * zk_ld(dy + (p / k) * D + d));
    }
}
/* dwt[r, j] += sum_d dy[r, d] o[r, j, d]: a warp per (r, j). */
extern "C" __global__ void zk_moe_combine_bwd_w(T *dwt, const T *dy, const T *o, long long R, long long k, long long D) {
    long long warps = (long long)gridDim.x * (blockDim.x / 32);
    for (long long p = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; p < R * k; p += warps) {
        float acc = 0.f;
        for (long long d = threadIdx.x % 32; d < D; d += 32) acc += zk_ld(dy + (p / k) * D + d) * zk_ld(o + p * D + d);
        acc = zk_warp_sum(acc);
        if (threadIdx.x % 32 == 0) zk_st(dwt + p, zk_ld(dwt + p) + acc);
    }
}

/* ---- moe_load: y[0, e] = acc[0, e] + the pairs routed to e, y[1, e] = acc[1, e]
 * + sum_r softmax(logits[r])[e]. Pass 1: each row's softmax max and 1/sum
 * into st[2R]; pass 2: a block per expert. logits NULL: y = acc (or zeros). ---- */
extern "C" __global__ void zk_moe_row_stats(float *st, const T *logits, long long R, long long E) {
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < R; r += (long long)gridDim.x * blockDim.x)
        zk_moe_softmax_stats(logits + r * E, E, st + 2 * r, st + 2 * r + 1);
}
extern "C" __global__ void zk_moe_load_fwd(float *y, const float *acc, const T *logits, const int *idx,
                                           const float *st, long long R, long long E, long long k) {
    __shared__ float scratch[32];
    long long e = blockIdx.x;
    float c = 0.f, ps = 0.f;
    if (logits) {
        for (long long p = threadIdx.x; p < R * k; p += blockDim.x) c += idx[p] == e ? 1.f : 0.f;
        for (long long r = threadIdx.x; r < R; r += blockDim.x) ps += expf(zk_ld(logits + r * E + e) - st[2 * r]) * st[2 * r + 1];
        c = zk_block_sum(c, scratch);
        ps = zk_block_sum(ps, scratch);
    }
    if (threadIdx.x == 0) {
        y[e] = (acc ? acc[e] : 0.f) + c;
        y[E + e] = (acc ? acc[E + e] : 0.f) + ps;
    }
}
/* Backward: dacc += dy (no gradient through the counts); dlogits[r, e] +=
 * p_e (dy[1, e] - sum_e' p_e' dy[1, e']). One thread a row; the first E*2
 * threads also add dacc. */
extern "C" __global__ void zk_moe_load_bwd(T *dlogits, float *dacc, const T *logits, const float *dy, long long R,
                                           long long E) {
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
    if (dacc)
        for (long long i = first; i < 2 * E; i += stride) dacc[i] += dy[i];
    if (!dlogits) return;
    for (long long r = first; r < R; r += stride) {
        const T *l = logits + r * E;
        float mx, inv, pd = 0.f;
        zk_moe_softmax_stats(l, E, &mx, &inv);
        for (long long e = 0; e < E; e++) pd += expf(zk_ld(l + e) - mx) * inv * dy[E + e];
        for (long long e = 0; e < E; e++) {
            float p = expf(zk_ld(l + e) - mx) * inv;
            zk_st(dlogits + r * E + e, zk_ld(dlogits + r * E + e) + p * (dy[E + e] - pd));
        }
    }
}

/* ---- moe_balance: y = scale sum_e load[0, e] load[1, e] (one block);
 * backward dload[1, e] += scale load[0, e] dy. ---- */
extern "C" __global__ void zk_moe_balance_fwd(float *y, const float *load, long long E, float scale) {
    __shared__ float scratch[32];
    float acc = 0.f;
    for (long long e = threadIdx.x; e < E; e += blockDim.x) acc += load[e] * load[E + e];
    acc = zk_block_sum(acc, scratch);
    if (threadIdx.x == 0) y[0] = scale * acc;
}
extern "C" __global__ void zk_moe_balance_bwd(float *dload, const float *load, const float *dy, long long E,
                                              float scale) {
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < E; e += (long long)gridDim.x * blockDim.x)
        dload[E + e] += scale * load[e] * dy[0];
}

/* ---- moe_shared_gate: out[r, d] = sigmoid(g[r]) y[r, d]. ---- */
__device__ __forceinline__ float zk_moe_sigmoid(float g) { return 1.f / (1.f + expf(-g)); }
extern "C" __global__ void zk_moe_sgate_fwd(T *out, const T *y, const T *g, long long R, long long D) {
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < R * D;
         t += (long long)gridDim.x * blockDim.x)
        zk_st(out + t, zk_moe_sigmoid(zk_ld(g + t / D)) * zk_ld(y + t));
}
/* dy[r, d] += sigmoid(g[r]) dout[r, d]. */
extern "C" __global__ void zk_moe_sgate_bwd_y(T *dy, const T *dout, const T *g, long long R, long long D) {
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < R * D;
         t += (long long)gridDim.x * blockDim.x)
        zk_st(dy + t, zk_ld(dy + t) + zk_moe_sigmoid(zk_ld(g + t / D)) * zk_ld(dout + t));
}
/* dg[r] += s (1 - s) sum_d dout[r, d] y[r, d]: a warp a row. */
extern "C" __global__ void zk_moe_sgate_bwd_g(T *dg, const T *dout, const T *y, const T *g, long long R, long long D) {
    long long warps = (long long)gridDim.x * (blockDim.x / 32);
    for (long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < R; r += warps) {
        float acc = 0.f;
        for (long long d = threadIdx.x % 32; d < D; d += 32) acc += zk_ld(dout + r * D + d) * zk_ld(y + r * D + d);
        acc = zk_warp_sum(acc);
        float s = zk_moe_sigmoid(zk_ld(g + r));
        if (threadIdx.x % 32 == 0) zk_st(dg + r, zk_ld(dg + r) + acc * s * (1.f - s));
    }
}
