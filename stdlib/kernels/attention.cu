/* attention: fused causal attention, FlashAttention-style, never storing
 * T x T; softmax statistics and accumulation in fp32. The scores' scale,
 * a sliding window (0: none) and soft-capping (0: none) are arguments of
 * every kernel but zk_attn_bwd_pre (zk_attn_lo, zk_attn_cap below).
 *
 * q [B, T, H*HD], k and v [B, T, KV*HD]; query head h reads kv head
 * h / (H/KV). Specialised on ZK_HD (head dim, any up to 128; padded to ZK_HDP,
 * a multiple of 32, inside shared memory and registers) and
 * rows per warp ZK_RPW_FWD / ZK_RPW_BWD; sizes are arguments.
 *
 * bf16/f16 units (ZK_TC_ATTN = 1) run all four kernels' products on the
 * tensor cores (mma.sync m16n8k16, fp32 accumulation; 64 rows per block of
 * 4 warps); f32 units use the SIMT versions, mapped as follows.
 *
 * Mapping (SIMT forward and dq): a block of ZK_NW warps owns ZK_NW*RPW query rows
 * of one (b, h); key/value tiles of 32 rows are staged in shared memory; lane
 * j scores key j of the tile for each of its warp's rows, the online softmax
 * (running max m, sum l, base-2 exponent with q prescaled by scale*log2 e)
 * reduces across the warp, and lane c owns output dims c, c+32, ...
 * dk/dv: a block owns ZK_NW*RPW key rows of one (b, kv head) and walks the
 * query tiles at or after its keys, for every query head sharing the kv head
 * (so the kv-head gradients sum over those heads without atomics).
 *
 * Backward = 4 launches: zk_attn_fwd with write_o = 0 recomputes the
 * log-sum-exp (base 2, scaled domain) into lse[B, H, T]; zk_attn_bwd_pre
 * writes delta = rowsum(dO * O) [B, H, T]; zk_attn_bwd_dq; zk_attn_bwd_dkdv.
 * Gradients accumulate (+=); dk or dv may be NULL (not wanted). */
#include "common.cuh"

/* ZK_HDP: the head dim padded to a multiple of 32 (the generator defines it
 * when ZK_HD is not one). Shared tiles, fragments and per-lane columns span
 * ZK_HDP; the padded dims are staged as zeros and never stored, so they add
 * nothing to a product. ZK_DIN(d): d is a real dim (always true unpadded). */
#ifndef ZK_HDP
#define ZK_HDP ZK_HD
#endif
#define ZK_DIN(d) (ZK_HD == ZK_HDP || (d) < ZK_HD)
#define ZK_NW 4
#define ZK_KB 32
#define ZK_DPL (ZK_HDP / 32)

/* Packed rows (several samples a row): seg[b*Tn + t] is the position of row
 * b where the sample holding position t begins; NULL, a row is one sample.
 * A sliding window of W > 0 positions (Mistral, Gemma's local layers)
 * moves that start to t - W + 1 when later. Query t sees the keys
 * [zk_attn_lo(t), t]: the block-diagonal, banded causal mask, with no
 * [T, T] tensor. zk_attn_lo never decreases with t, so key tiles before the
 * first query's start are skipped (a window of W costs T W, not T^2 / 2),
 * and dk/dv stop at the first query tile that starts after their keys; a
 * row may still meet tiles it sees nothing of, where its running max stays
 * -inf and the softmax rescales against 0 (zk_attn_ref). */
__device__ __forceinline__ int zk_attn_lo(const int *seg, long long b, long long Tn, long long t, long long window) {
    long long lo = seg ? seg[b * Tn + t] : 0;
    if (window > 0 && t - window + 1 > lo) lo = t - window + 1;
    return (int)lo;
}
/* Soft-capping in the kernels' base-2 score domain: capl = softcap log2 e,
 * x = scale q.k log2 e becomes capl tanh(x / capl) (= softcap tanh(s /
 * softcap) log2 e, Gemma 2's attention-logit capping); capl 0 is none.
 * *th keeps the tanh for the backward's chain factor 1 - tanh^2. */
__device__ __forceinline__ float zk_attn_cap(float x, float capl, float *th) {
    if (capl <= 0.f) {
        *th = 0.f;
        return x;
    }
    *th = tanhf(x / capl);
    return capl * *th;
}
/* The exponent base of a running max: mn itself, 0 while no key was seen. */
__device__ __forceinline__ float zk_attn_ref(float mn) { return mn == -ZK_INF ? 0.f : mn; }

#if ZK_TC_ATTN
/* Forward on the tensor cores (bf16/f16 units): a block of 4 warps owns 64
 * query rows (16 per warp) of one (b, h); key tiles of 32 rows. S = Q K^T
 * and O += P V are mma.sync m16n8k16 with fp32 accumulation; the online
 * softmax runs on the S accumulators (a row's values live in the 4 lanes of
 * a quad), and P's accumulators are repacked in registers as the A operand
 * of P V (the C layout of two n8 tiles is the A layout of one k16 step).
 * V is staged transposed so that its fragments are 32-bit loads. */
#if ZK_HDP > 128 /* 48 KiB of static shared memory: 32 rows (2 warps), 16-key tiles */
#define ZK_QB 32
#define ZK_TKB 16
#else
#define ZK_QB 64
#define ZK_TKB 32
#endif
#define ZK_HP (ZK_HDP + 8)

__device__ __forceinline__ void zk_mma16816(float *c, const unsigned *a, const unsigned *b) {
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

/* two fp32 values as one 32-bit pair of the storage dtype (lo first) */
__device__ __forceinline__ unsigned zk_pack2(float lo, float hi) {
    T a, b;
    zk_st(&a, lo);
    zk_st(&b, hi);
    return (unsigned)a.x | ((unsigned)b.x << 16);
}

extern "C" __global__ void __launch_bounds__(128)
zk_attn_fwd(T *o, float *lse, const T *q, const T *k, const T *v, long long write_o, long long B,
            long long Tn, long long H, long long KV, float scale, long long window, float softcap,
            const int *seg) {
    __shared__ __align__(16) unsigned short Qs[ZK_QB][ZK_HP];
    __shared__ __align__(16) unsigned short Ks[ZK_TKB][ZK_HP];
    __shared__ __align__(16) unsigned short Vt[ZK_HDP][ZK_TKB + 8];
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
    const long long b = blockIdx.z, h = blockIdx.y, q0 = (long long)blockIdx.x * ZK_QB;
    const long long kvh = h / (H / KV);
    const float sc = scale * ZK_LOG2E, capl = softcap * ZK_LOG2E;
    for (int e = threadIdx.x; e < ZK_QB * ZK_HDP; e += blockDim.x) {
        int r = e / ZK_HDP, d = e % ZK_HDP;
        long long t = q0 + r;
        bool in = t < Tn && ZK_DIN(d);
        Qs[r][d] = in ? q[((b * Tn + t) * H + h) * ZK_HD + d].x : (unsigned short)0;
    }
    /* this lane's two rows: r0 = q0 + 16w + g and r0 + 8 */
    const long long r0 = q0 + w * 16 + g, r1 = r0 + 8;
    const long long m0 = r0 < Tn ? r0 : Tn - 1, m1 = r1 < Tn ? r1 : Tn - 1;
    const int lo0 = zk_attn_lo(seg, b, Tn, m0, window), lo1 = zk_attn_lo(seg, b, Tn, m1, window);
    float mx[2] = {-ZK_INF, -ZK_INF}, l[2] = {0.f, 0.f};
    float acc[ZK_HDP / 8][4];
#pragma unroll
    for (int j = 0; j < ZK_HDP / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const long long kend = q0 + ZK_QB < Tn ? q0 + ZK_QB : Tn;
    for (long long k0 = zk_attn_lo(seg, b, Tn, q0, window) / ZK_TKB * ZK_TKB; k0 < kend; k0 += ZK_TKB) {
        __syncthreads();
        for (int e = threadIdx.x; e < ZK_TKB * ZK_HDP; e += blockDim.x) {
            int j = e / ZK_HDP, d = e % ZK_HDP;
            long long t = k0 + j, off = ((b * Tn + t) * KV + kvh) * ZK_HD + d;
            bool in = t < Tn && ZK_DIN(d);
            Ks[j][d] = in ? k[off].x : (unsigned short)0;
            Vt[d][j] = in ? v[off].x : (unsigned short)0;
        }
        __syncthreads();
        /* S = Q K^T for the warp's 16 rows and the tile's 32 keys */
        float s[ZK_TKB / 8][4];
#pragma unroll
        for (int j = 0; j < ZK_TKB / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < ZK_HDP; kk += 16) {
            unsigned a[4];
            a[0] = *(const unsigned *)&Qs[w * 16 + g][kk + 2 * tg];
            a[1] = *(const unsigned *)&Qs[w * 16 + g + 8][kk + 2 * tg];
            a[2] = *(const unsigned *)&Qs[w * 16 + g][kk + 8 + 2 * tg];
            a[3] = *(const unsigned *)&Qs[w * 16 + g + 8][kk + 8 + 2 * tg];
#pragma unroll
            for (int j = 0; j < ZK_TKB / 8; j++) {
                unsigned bb[2];
                bb[0] = *(const unsigned *)&Ks[j * 8 + g][kk + 2 * tg];
                bb[1] = *(const unsigned *)&Ks[j * 8 + g][kk + 8 + 2 * tg];
                zk_mma16816(s[j], a, bb);
            }
        }
        /* scale, mask, online softmax per row (the row's values are spread
         * over the 4 lanes of the quad: reduce with xor 1 and 2) */
        float tmax[2] = {-ZK_INF, -ZK_INF};
#pragma unroll
        for (int j = 0; j < ZK_TKB / 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                long long key = k0 + j * 8 + 2 * tg + (c & 1);
                long long row = c < 2 ? m0 : m1;
                int lo = c < 2 ? lo0 : lo1;
                float th, x = zk_attn_cap(s[j][c] * sc, capl, &th);
                x = key > row || key < lo ? -ZK_INF : x;
                s[j][c] = x;
                tmax[c >> 1] = fmaxf(tmax[c >> 1], x);
            }
        float alpha[2], mref[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
            float mn = fmaxf(mx[r], tmax[r]);
            mref[r] = zk_attn_ref(mn);
            alpha[r] = exp2f(mx[r] - mref[r]);
            mx[r] = mn;
        }
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < ZK_TKB / 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float p = exp2f(s[j][c] - mref[c >> 1]);
                s[j][c] = p;
                rs[c >> 1] += p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 1);
            rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 2);
            l[r] = l[r] * alpha[r] + rs[r];
        }
#pragma unroll
        for (int j = 0; j < ZK_HDP / 8; j++) {
            acc[j][0] *= alpha[0];
            acc[j][1] *= alpha[0];
            acc[j][2] *= alpha[1];
            acc[j][3] *= alpha[1];
        }
        /* O += P V: P's accumulators repacked as A fragments, one k16 step per
         * two n8 tiles of S; V^T rows give the B fragments */
#pragma unroll
        for (int ks = 0; ks < ZK_TKB / 16; ks++) {
            unsigned a[4];
            a[0] = zk_pack2(s[2 * ks][0], s[2 * ks][1]);
            a[1] = zk_pack2(s[2 * ks][2], s[2 * ks][3]);
            a[2] = zk_pack2(s[2 * ks + 1][0], s[2 * ks + 1][1]);
            a[3] = zk_pack2(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
            for (int j = 0; j < ZK_HDP / 8; j++) {
                unsigned bb[2];
                bb[0] = *(const unsigned *)&Vt[j * 8 + g][ks * 16 + 2 * tg];
                bb[1] = *(const unsigned *)&Vt[j * 8 + g][ks * 16 + 8 + 2 * tg];
                zk_mma16816(acc[j], a, bb);
            }
        }
    }
    const float inv0 = 1.f / l[0], inv1 = 1.f / l[1];
    if (write_o)
#pragma unroll
        for (int j = 0; j < ZK_HDP / 8; j++) {
            int d = j * 8 + 2 * tg;
            if (r0 < Tn) {
                T *p = o + ((b * Tn + r0) * H + h) * ZK_HD + d;
                if (ZK_DIN(d)) zk_st(p, acc[j][0] * inv0);
                if (ZK_DIN(d + 1)) zk_st(p + 1, acc[j][1] * inv0);
            }
            if (r1 < Tn) {
                T *p = o + ((b * Tn + r1) * H + h) * ZK_HD + d;
                if (ZK_DIN(d)) zk_st(p, acc[j][2] * inv1);
                if (ZK_DIN(d + 1)) zk_st(p + 1, acc[j][3] * inv1);
            }
        }
    if (lse && tg == 0) {
        if (r0 < Tn) lse[(b * H + h) * Tn + r0] = mx[0] + log2f(l[0]);
        if (r1 < Tn) lse[(b * H + h) * Tn + r1] = mx[1] + log2f(l[1]);
    }
}
#else
#if ZK_HDP > 128
/* Above hd 128 the f32 kernels hold one [32][hd+1] tile in shared memory at
 * a time (K then V; V then K; Q, dO, Q again): rows t0.. of head `head` of a
 * tensor of `nh` heads, times mul, zeros past Tn and in the padded dims. */
__device__ __forceinline__ void zk_tile(float (*S)[ZK_HDP + 1], const T *x, long long b, long long t0, long long Tn,
                                        long long nh, long long head, float mul) {
    __syncthreads();
    for (int e = threadIdx.x; e < ZK_KB * ZK_HDP; e += blockDim.x) {
        int j = e / ZK_HDP, d = e % ZK_HDP;
        long long t = t0 + j;
        S[j][d] = t < Tn && ZK_DIN(d) ? zk_ld(x + ((b * Tn + t) * nh + head) * ZK_HD + d) * mul : 0.f;
    }
    __syncthreads();
}
#endif
extern "C" __global__ void __launch_bounds__(ZK_NW * 32)
zk_attn_fwd(T *o, float *lse, const T *q, const T *k, const T *v, long long write_o, long long B,
            long long Tn, long long H, long long KV, float scale, long long window, float softcap,
            const int *seg) {
    const int R = ZK_RPW_FWD, QB = ZK_NW * ZK_RPW_FWD;
    __shared__ float Qs[ZK_NW * ZK_RPW_FWD][ZK_HDP];
    __shared__ float Ks[ZK_KB][ZK_HDP + 1];
#if ZK_HDP > 128
#define Vs Ks /* K's tile, then V's in its place */
#else
    __shared__ float Vs[ZK_KB][ZK_HDP];
#endif
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long b = blockIdx.z, h = blockIdx.y, q0 = (long long)blockIdx.x * QB;
    const long long kvh = h / (H / KV);
    const float sc = scale * ZK_LOG2E, capl = softcap * ZK_LOG2E;
    for (int e = threadIdx.x; e < QB * ZK_HDP; e += blockDim.x) {
        int r = e / ZK_HDP, d = e % ZK_HDP;
        long long t = q0 + r;
        bool in = t < Tn && ZK_DIN(d);
        Qs[r][d] = in ? zk_ld(q + ((b * Tn + t) * H + h) * ZK_HD + d) * sc : 0.f;
    }
    float m[R], l[R], acc[R][ZK_DPL];
    long long tq[R], tm[R];
    int lo[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = -ZK_INF;
        l[r] = 0.f;
        tq[r] = q0 + w * R + r;
        tm[r] = tq[r] < Tn ? tq[r] : Tn - 1;
        lo[r] = zk_attn_lo(seg, b, Tn, tm[r], window);
#pragma unroll
        for (int c = 0; c < ZK_DPL; c++) acc[r][c] = 0.f;
    }
    const long long kend = q0 + QB < Tn ? q0 + QB : Tn;
    for (long long k0 = zk_attn_lo(seg, b, Tn, q0, window) / ZK_KB * ZK_KB; k0 < kend; k0 += ZK_KB) {
#if ZK_HDP > 128
        zk_tile(Ks, k, b, k0, Tn, KV, kvh, 1.f);
#else
        __syncthreads();
        for (int e = threadIdx.x; e < ZK_KB * ZK_HDP; e += blockDim.x) {
            int j = e / ZK_HDP, d = e % ZK_HDP;
            long long t = k0 + j, off = ((b * Tn + t) * KV + kvh) * ZK_HD + d;
            bool in = t < Tn && ZK_DIN(d);
            Ks[j][d] = in ? zk_ld(k + off) : 0.f;
            Vs[j][d] = in ? zk_ld(v + off) : 0.f;
        }
        __syncthreads();
#endif
        const long long kj = k0 + lane;
        float s[R];
#pragma unroll
        for (int r = 0; r < R; r++) s[r] = 0.f;
#pragma unroll 8
        for (int d = 0; d < ZK_HD; d++) {
            float kd = Ks[lane][d];
#pragma unroll
            for (int r = 0; r < R; r++) s[r] += Qs[w * R + r][d] * kd;
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            float th;
            s[r] = zk_attn_cap(s[r], capl, &th);
            if (kj > tm[r] || kj < lo[r]) s[r] = -ZK_INF;
            float mn = fmaxf(m[r], zk_warp_max(s[r]));
            float alpha = exp2f(m[r] - zk_attn_ref(mn));
            float p = exp2f(s[r] - zk_attn_ref(mn));
            l[r] = l[r] * alpha + zk_warp_sum(p);
            m[r] = mn;
#pragma unroll
            for (int c = 0; c < ZK_DPL; c++) acc[r][c] *= alpha;
            s[r] = p;
        }
#if ZK_HDP > 128
        zk_tile(Vs, v, b, k0, Tn, KV, kvh, 1.f);
#endif
#pragma unroll 4
        for (int j = 0; j < ZK_KB; j++) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                float pj = __shfl_sync(0xffffffffu, s[r], j);
#pragma unroll
                for (int c = 0; c < ZK_DPL; c++) acc[r][c] += pj * Vs[j][lane + 32 * c];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (tq[r] >= Tn) continue;
        float inv = 1.f / l[r];
        if (write_o)
#pragma unroll
            for (int c = 0; c < ZK_DPL; c++)
                if (ZK_DIN(lane + 32 * c))
                    zk_st(o + ((b * Tn + tq[r]) * H + h) * ZK_HD + lane + 32 * c, acc[r][c] * inv);
        if (lse && lane == 0) lse[(b * H + h) * Tn + tq[r]] = m[r] + log2f(l[r]);
    }
}
#undef Vs

#endif /* ZK_TC_ATTN */

/* delta[b, h, t] = sum_d dO[b, t, h, d] * O[b, t, h, d]; one warp per row. */
extern "C" __global__ void zk_attn_bwd_pre(float *delta, const T *o, const T *dout, long long B, long long Tn,
                                           long long H) {
    long long rows = B * Tn * H;
    long long ri = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (ri >= rows) return;
    float s = 0.f;
    for (int d = lane; d < ZK_HD; d += 32) s += zk_ld(o + ri * ZK_HD + d) * zk_ld(dout + ri * ZK_HD + d);
    s = zk_warp_sum(s);
    long long h = ri % H, t = (ri / H) % Tn, b = ri / (H * Tn);
    if (lane == 0) delta[(b * H + h) * Tn + t] = s;
}

#if ZK_TC_ATTN
/* dq on the tensor cores: a block of 4 warps owns 64 query rows (16 per
 * warp) of one (b, h); per key tile of 32: S = Q K^T and dP = dO V^T
 * (Q and dO fragments held in registers), dS = P (dP - delta) with
 * P = 2^(S scale log2e - lse), then dQ += dS K with dS repacked as the A
 * operand and K staged transposed for its B fragments. */
/* dims d, d+1 of a row as an A fragment pair; 0 where !ok or a dim is padding */
__device__ __forceinline__ unsigned zk_pair(const T *row, bool ok, int d) {
#if ZK_HD == ZK_HDP
    return ok ? ((unsigned)row[d].x | ((unsigned)row[d + 1].x << 16)) : 0u;
#else
    unsigned lo = ok && d < ZK_HD ? (unsigned)row[d].x : 0u;
    unsigned hi = ok && d + 1 < ZK_HD ? (unsigned)row[d + 1].x : 0u;
    return lo | (hi << 16);
#endif
}

extern "C" __global__ void __launch_bounds__(128)
zk_attn_bwd_dq(T *dq, const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
               long long B, long long Tn, long long H, long long KV, float scale, long long window, float softcap,
               const int *seg) {
    __shared__ __align__(16) unsigned short Ks[ZK_TKB][ZK_HP];
    __shared__ __align__(16) unsigned short Vs[ZK_TKB][ZK_HP];
    __shared__ __align__(16) unsigned short Kt[ZK_HDP][ZK_TKB + 8];
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
    const long long b = blockIdx.z, h = blockIdx.y, q0 = (long long)blockIdx.x * ZK_QB;
    const long long kvh = h / (H / KV);
    const float sc = scale * ZK_LOG2E, capl = softcap * ZK_LOG2E;
    const long long r0 = q0 + w * 16 + g, r1 = r0 + 8;
    const long long m0 = r0 < Tn ? r0 : Tn - 1, m1 = r1 < Tn ? r1 : Tn - 1;
    const T *q0p = q + ((b * Tn + m0) * H + h) * ZK_HD, *q1p = q + ((b * Tn + m1) * H + h) * ZK_HD;
    const T *o0p = dout + ((b * Tn + m0) * H + h) * ZK_HD, *o1p = dout + ((b * Tn + m1) * H + h) * ZK_HD;
    unsigned qa[ZK_HDP / 16][4], oa[ZK_HDP / 16][4];
#pragma unroll
    for (int kk = 0; kk < ZK_HDP / 16; kk++) {
        int d = kk * 16 + 2 * tg;
        qa[kk][0] = zk_pair(q0p, r0 < Tn, d);
        qa[kk][1] = zk_pair(q1p, r1 < Tn, d);
        qa[kk][2] = zk_pair(q0p, r0 < Tn, d + 8);
        qa[kk][3] = zk_pair(q1p, r1 < Tn, d + 8);
        oa[kk][0] = zk_pair(o0p, r0 < Tn, d);
        oa[kk][1] = zk_pair(o1p, r1 < Tn, d);
        oa[kk][2] = zk_pair(o0p, r0 < Tn, d + 8);
        oa[kk][3] = zk_pair(o1p, r1 < Tn, d + 8);
    }
    const int lo0 = zk_attn_lo(seg, b, Tn, m0, window), lo1 = zk_attn_lo(seg, b, Tn, m1, window);
    const float L[2] = {lse[(b * H + h) * Tn + m0], lse[(b * H + h) * Tn + m1]};
    const float Dl[2] = {delta[(b * H + h) * Tn + m0], delta[(b * H + h) * Tn + m1]};
    float acc[ZK_HDP / 8][4];
#pragma unroll
    for (int j = 0; j < ZK_HDP / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const long long kend = q0 + ZK_QB < Tn ? q0 + ZK_QB : Tn;
    for (long long k0 = zk_attn_lo(seg, b, Tn, q0, window) / ZK_TKB * ZK_TKB; k0 < kend; k0 += ZK_TKB) {
        __syncthreads();
        for (int e = threadIdx.x; e < ZK_TKB * ZK_HDP; e += blockDim.x) {
            int j = e / ZK_HDP, d = e % ZK_HDP;
            long long t = k0 + j, off = ((b * Tn + t) * KV + kvh) * ZK_HD + d;
            bool in = t < Tn && ZK_DIN(d);
            unsigned short kx = in ? k[off].x : (unsigned short)0;
            Ks[j][d] = kx;
            Kt[d][j] = kx;
            Vs[j][d] = in ? v[off].x : (unsigned short)0;
        }
        __syncthreads();
        float s[ZK_TKB / 8][4], dp[ZK_TKB / 8][4];
#pragma unroll
        for (int j = 0; j < ZK_TKB / 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) s[j][c] = dp[j][c] = 0.f;
#pragma unroll
        for (int kk = 0; kk < ZK_HDP / 16; kk++)
#pragma unroll
            for (int j = 0; j < ZK_TKB / 8; j++) {
                unsigned bk[2], bv[2];
                bk[0] = *(const unsigned *)&Ks[j * 8 + g][kk * 16 + 2 * tg];
                bk[1] = *(const unsigned *)&Ks[j * 8 + g][kk * 16 + 8 + 2 * tg];
                bv[0] = *(const unsigned *)&Vs[j * 8 + g][kk * 16 + 2 * tg];
                bv[1] = *(const unsigned *)&Vs[j * 8 + g][kk * 16 + 8 + 2 * tg];
                zk_mma16816(s[j], qa[kk], bk);
                zk_mma16816(dp[j], oa[kk], bv);
            }
#pragma unroll
        for (int j = 0; j < ZK_TKB / 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                long long key = k0 + j * 8 + 2 * tg + (c & 1), row = c < 2 ? m0 : m1;
                int lo = c < 2 ? lo0 : lo1;
                bool live = c < 2 ? r0 < Tn : r1 < Tn;
                /* lo <= key <= row, one compare (lo <= row always) */
                bool seen = (unsigned long long)(key - lo) <= (unsigned long long)(row - lo);
                float th, x = zk_attn_cap(s[j][c] * sc, capl, &th);
                float p = (seen && live) ? exp2f(x - L[c >> 1]) : 0.f;
                s[j][c] = p * (dp[j][c] - Dl[c >> 1]) * (1.f - th * th); /* dS */
            }
#pragma unroll
        for (int ks = 0; ks < ZK_TKB / 16; ks++) {
            unsigned a[4];
            a[0] = zk_pack2(s[2 * ks][0], s[2 * ks][1]);
            a[1] = zk_pack2(s[2 * ks][2], s[2 * ks][3]);
            a[2] = zk_pack2(s[2 * ks + 1][0], s[2 * ks + 1][1]);
            a[3] = zk_pack2(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
            for (int j = 0; j < ZK_HDP / 8; j++) {
                unsigned bb[2];
                bb[0] = *(const unsigned *)&Kt[j * 8 + g][ks * 16 + 2 * tg];
                bb[1] = *(const unsigned *)&Kt[j * 8 + g][ks * 16 + 8 + 2 * tg];
                zk_mma16816(acc[j], a, bb);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < ZK_HDP / 8; j++) {
        int d = j * 8 + 2 * tg;
        if (r0 < Tn) {
            T *p = dq + ((b * Tn + r0) * H + h) * ZK_HD + d;
            if (ZK_DIN(d)) zk_st(p, zk_ld(p) + acc[j][0] * scale);
            if (ZK_DIN(d + 1)) zk_st(p + 1, zk_ld(p + 1) + acc[j][1] * scale);
        }
        if (r1 < Tn) {
            T *p = dq + ((b * Tn + r1) * H + h) * ZK_HD + d;
            if (ZK_DIN(d)) zk_st(p, zk_ld(p) + acc[j][2] * scale);
            if (ZK_DIN(d + 1)) zk_st(p + 1, zk_ld(p + 1) + acc[j][3] * scale);
        }
    }
}
#else
/* dq[b, t, h] += scale * sum_j ds_j k_j, ds = p (dp - delta), dp = dO . v_j. */
extern "C" __global__ void __launch_bounds__(ZK_NW * 32)
zk_attn_bwd_dq(T *dq, const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
               long long B, long long Tn, long long H, long long KV, float scale, long long window, float softcap,
               const int *seg) {
    const int R = ZK_RPW_BWD, QB = ZK_NW * ZK_RPW_BWD;
    __shared__ float Qs[ZK_NW * ZK_RPW_BWD][ZK_HDP];
    __shared__ float dOs[ZK_NW * ZK_RPW_BWD][ZK_HDP];
    __shared__ float Ks[ZK_KB][ZK_HDP + 1];
#if ZK_HDP <= 128 /* above, V's tile and then K's share Ks */
    __shared__ float Vs[ZK_KB][ZK_HDP + 1];
#endif
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long b = blockIdx.z, h = blockIdx.y, q0 = (long long)blockIdx.x * QB;
    const long long kvh = h / (H / KV);
    const float sc = scale * ZK_LOG2E, capl = softcap * ZK_LOG2E;
    for (int e = threadIdx.x; e < QB * ZK_HDP; e += blockDim.x) {
        int r = e / ZK_HDP, d = e % ZK_HDP;
        long long t = q0 + r, off = ((b * Tn + t) * H + h) * ZK_HD + d;
        bool in = t < Tn && ZK_DIN(d);
        Qs[r][d] = in ? zk_ld(q + off) * sc : 0.f;
        dOs[r][d] = in ? zk_ld(dout + off) : 0.f;
    }
    float L[R], Dl[R], acc[R][ZK_DPL];
    long long tq[R], tm[R];
    int lo[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        tq[r] = q0 + w * R + r;
        tm[r] = tq[r] < Tn ? tq[r] : Tn - 1;
        lo[r] = zk_attn_lo(seg, b, Tn, tm[r], window);
        L[r] = lse[(b * H + h) * Tn + tm[r]];
        Dl[r] = delta[(b * H + h) * Tn + tm[r]];
#pragma unroll
        for (int c = 0; c < ZK_DPL; c++) acc[r][c] = 0.f;
    }
    const long long kend = q0 + QB < Tn ? q0 + QB : Tn;
    for (long long k0 = zk_attn_lo(seg, b, Tn, q0, window) / ZK_KB * ZK_KB; k0 < kend; k0 += ZK_KB) {
        const long long kj = k0 + lane;
        float s[R], dp[R];
#pragma unroll
        for (int r = 0; r < R; r++) s[r] = dp[r] = 0.f;
#if ZK_HDP > 128
        zk_tile(Ks, v, b, k0, Tn, KV, kvh, 1.f);
#pragma unroll 8
        for (int d = 0; d < ZK_HD; d++)
#pragma unroll
            for (int r = 0; r < R; r++) dp[r] += dOs[w * R + r][d] * Ks[lane][d];
        zk_tile(Ks, k, b, k0, Tn, KV, kvh, 1.f);
#pragma unroll 8
        for (int d = 0; d < ZK_HD; d++)
#pragma unroll
            for (int r = 0; r < R; r++) s[r] += Qs[w * R + r][d] * Ks[lane][d];
#else
        __syncthreads();
        for (int e = threadIdx.x; e < ZK_KB * ZK_HDP; e += blockDim.x) {
            int j = e / ZK_HDP, d = e % ZK_HDP;
            long long t = k0 + j, off = ((b * Tn + t) * KV + kvh) * ZK_HD + d;
            bool in = t < Tn && ZK_DIN(d);
            Ks[j][d] = in ? zk_ld(k + off) : 0.f;
            Vs[j][d] = in ? zk_ld(v + off) : 0.f;
        }
        __syncthreads();
#pragma unroll 8
        for (int d = 0; d < ZK_HD; d++) {
            float kd = Ks[lane][d], vd = Vs[lane][d];
#pragma unroll
            for (int r = 0; r < R; r++) {
                s[r] += Qs[w * R + r][d] * kd;
                dp[r] += dOs[w * R + r][d] * vd;
            }
        }
#endif
#pragma unroll
        for (int r = 0; r < R; r++) {
            float th, x = zk_attn_cap(s[r], capl, &th);
            float p = (kj <= tm[r] && kj >= lo[r] && tq[r] < Tn) ? exp2f(x - L[r]) : 0.f;
            s[r] = p * (dp[r] - Dl[r]) * (1.f - th * th); /* ds */
        }
#pragma unroll 4
        for (int j = 0; j < ZK_KB; j++) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                float dsj = __shfl_sync(0xffffffffu, s[r], j);
#pragma unroll
                for (int c = 0; c < ZK_DPL; c++) acc[r][c] += dsj * Ks[j][lane + 32 * c];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (tq[r] >= Tn) continue;
#pragma unroll
        for (int c = 0; c < ZK_DPL; c++) {
            if (!ZK_DIN(lane + 32 * c)) continue;
            T *p = dq + ((b * Tn + tq[r]) * H + h) * ZK_HD + lane + 32 * c;
            zk_st(p, zk_ld(p) + acc[r][c] * scale);
        }
    }
}

#endif /* ZK_TC_ATTN */

#if ZK_TC_ATTN
/* dk, dv on the tensor cores: a block of 4 warps owns 64 key rows (16 per
 * warp) of one (b, kv head) and walks, for every query head of the group,
 * the query tiles of 16 at or after its keys: S^T = K Q^T (K fragments in
 * registers), dP^T = V dO^T, P^T = 2^(S^T scale log2e - lse), dS^T =
 * P^T (dP^T - delta); dV += P^T dO and dK += dS^T Q with P^T, dS^T repacked
 * as A operands and Q, dO staged both ways for their B fragments. */
#define ZK_QT 16
/* dims d, d+1 of row r as a 32-bit pair: from the row-major tile A, or
 * (above hd 128, where only the transposed At fits) two 16-bit loads */
#if ZK_HDP > 128
#define ZK_ROWPAIR(A, At, r, d) ((unsigned)At[d][r] | ((unsigned)At[(d) + 1][r] << 16))
#else
#define ZK_ROWPAIR(A, At, r, d) (*(const unsigned *)&A[r][d])
#endif

extern "C" __global__ void __launch_bounds__(128)
zk_attn_bwd_dkdv(T *dk, T *dv, const T *q, const T *k, const T *v, const T *dout, const float *lse,
                 const float *delta, long long B, long long Tn, long long H, long long KV, float scale,
                 long long window, float softcap, const int *seg) {
    __shared__ __align__(16) unsigned short Vr[ZK_QB][ZK_HP];
#if ZK_HDP <= 128 /* above, B fragments of Q and dO come from Qt and Ot */
    __shared__ __align__(16) unsigned short Qs[ZK_QT][ZK_HP];
    __shared__ __align__(16) unsigned short Os[ZK_QT][ZK_HP];
#endif
    __shared__ __align__(16) unsigned short Qt[ZK_HDP][ZK_QT + 8];
    __shared__ __align__(16) unsigned short Ot[ZK_HDP][ZK_QT + 8];
    __shared__ float Ls[ZK_QT], Ds[ZK_QT];
    __shared__ int Ss[ZK_QT]; /* each query's first key (zk_attn_lo) */
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
    const long long b = blockIdx.z, kvh = blockIdx.y, k0 = (long long)blockIdx.x * ZK_QB;
    const long long G = H / KV;
    const float sc = scale * ZK_LOG2E, capl = softcap * ZK_LOG2E;
    const long long r0 = k0 + w * 16 + g, r1 = r0 + 8; /* this lane's two key rows */
    const long long c0 = r0 < Tn ? r0 : Tn - 1, c1 = r1 < Tn ? r1 : Tn - 1;
    const T *k0p = k + ((b * Tn + c0) * KV + kvh) * ZK_HD, *k1p = k + ((b * Tn + c1) * KV + kvh) * ZK_HD;
    unsigned ka[ZK_HDP / 16][4];
#pragma unroll
    for (int kk = 0; kk < ZK_HDP / 16; kk++) {
        int d = kk * 16 + 2 * tg;
        ka[kk][0] = zk_pair(k0p, r0 < Tn, d);
        ka[kk][1] = zk_pair(k1p, r1 < Tn, d);
        ka[kk][2] = zk_pair(k0p, r0 < Tn, d + 8);
        ka[kk][3] = zk_pair(k1p, r1 < Tn, d + 8);
    }
    for (int e = threadIdx.x; e < ZK_QB * ZK_HDP; e += blockDim.x) {
        int j = e / ZK_HDP, d = e % ZK_HDP;
        long long t = k0 + j;
        bool in = t < Tn && ZK_DIN(d);
        Vr[j][d] = in ? v[((b * Tn + t) * KV + kvh) * ZK_HD + d].x : (unsigned short)0;
    }
    float adk[ZK_HDP / 8][4], adv[ZK_HDP / 8][4];
#pragma unroll
    for (int j = 0; j < ZK_HDP / 8; j++)
#pragma unroll
        for (int c = 0; c < 4; c++) adk[j][c] = adv[j][c] = 0.f;
    for (long long hh = 0; hh < G; hh++) {
        const long long h = kvh * G + hh;
        for (long long qt = k0; qt < Tn; qt += ZK_QT) {
            if (zk_attn_lo(seg, b, Tn, qt, window) >= k0 + ZK_QB) break; /* queries of later samples only, from here on */
            __syncthreads();
            for (int e = threadIdx.x; e < ZK_QT * ZK_HDP; e += blockDim.x) {
                int i = e / ZK_HDP, d = e % ZK_HDP;
                long long t = qt + i, off = ((b * Tn + t) * H + h) * ZK_HD + d;
                bool in = t < Tn && ZK_DIN(d);
                unsigned short qx = in ? q[off].x : (unsigned short)0;
                unsigned short ox = in ? dout[off].x : (unsigned short)0;
#if ZK_HDP <= 128
                Qs[i][d] = qx;
                Os[i][d] = ox;
#endif
                Qt[d][i] = qx;
                Ot[d][i] = ox;
            }
            if (threadIdx.x < ZK_QT) {
                long long t = qt + threadIdx.x;
                Ls[threadIdx.x] = t < Tn ? lse[(b * H + h) * Tn + t] : 0.f;
                Ds[threadIdx.x] = t < Tn ? delta[(b * H + h) * Tn + t] : 0.f;
                Ss[threadIdx.x] = t < Tn ? zk_attn_lo(seg, b, Tn, t, window) : 0;
            }
            __syncthreads();
            float s[ZK_QT / 8][4], dp[ZK_QT / 8][4];
#pragma unroll
            for (int j = 0; j < ZK_QT / 8; j++)
#pragma unroll
                for (int c = 0; c < 4; c++) s[j][c] = dp[j][c] = 0.f;
#pragma unroll
            for (int kk = 0; kk < ZK_HDP / 16; kk++) {
                unsigned va[4];
                va[0] = *(const unsigned *)&Vr[w * 16 + g][kk * 16 + 2 * tg];
                va[1] = *(const unsigned *)&Vr[w * 16 + g + 8][kk * 16 + 2 * tg];
                va[2] = *(const unsigned *)&Vr[w * 16 + g][kk * 16 + 8 + 2 * tg];
                va[3] = *(const unsigned *)&Vr[w * 16 + g + 8][kk * 16 + 8 + 2 * tg];
#pragma unroll
                for (int j = 0; j < ZK_QT / 8; j++) {
                    unsigned bq[2], bo[2];
                    bq[0] = ZK_ROWPAIR(Qs, Qt, j * 8 + g, kk * 16 + 2 * tg);
                    bq[1] = ZK_ROWPAIR(Qs, Qt, j * 8 + g, kk * 16 + 8 + 2 * tg);
                    bo[0] = ZK_ROWPAIR(Os, Ot, j * 8 + g, kk * 16 + 2 * tg);
                    bo[1] = ZK_ROWPAIR(Os, Ot, j * 8 + g, kk * 16 + 8 + 2 * tg);
                    zk_mma16816(s[j], ka[kk], bq);
                    zk_mma16816(dp[j], va, bo);
                }
            }
#pragma unroll
            for (int j = 0; j < ZK_QT / 8; j++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    int qi = j * 8 + 2 * tg + (c & 1);
                    long long query = qt + qi, key = c < 2 ? r0 : r1;
                    bool ok = query < Tn && key < Tn && query >= key && key >= Ss[qi];
                    float th, x = zk_attn_cap(s[j][c] * sc, capl, &th);
                    float p = ok ? exp2f(x - Ls[qi]) : 0.f;
                    s[j][c] = p;
                    dp[j][c] = p * (dp[j][c] - Ds[qi]) * (1.f - th * th); /* dS^T */
                }
            unsigned pa[4], da[4];
            pa[0] = zk_pack2(s[0][0], s[0][1]);
            pa[1] = zk_pack2(s[0][2], s[0][3]);
            pa[2] = zk_pack2(s[1][0], s[1][1]);
            pa[3] = zk_pack2(s[1][2], s[1][3]);
            da[0] = zk_pack2(dp[0][0], dp[0][1]);
            da[1] = zk_pack2(dp[0][2], dp[0][3]);
            da[2] = zk_pack2(dp[1][0], dp[1][1]);
            da[3] = zk_pack2(dp[1][2], dp[1][3]);
#pragma unroll
            for (int j = 0; j < ZK_HDP / 8; j++) {
                unsigned bo[2], bq[2];
                bo[0] = *(const unsigned *)&Ot[j * 8 + g][2 * tg];
                bo[1] = *(const unsigned *)&Ot[j * 8 + g][8 + 2 * tg];
                bq[0] = *(const unsigned *)&Qt[j * 8 + g][2 * tg];
                bq[1] = *(const unsigned *)&Qt[j * 8 + g][8 + 2 * tg];
                zk_mma16816(adv[j], pa, bo);
                zk_mma16816(adk[j], da, bq);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < ZK_HDP / 8; j++) {
        int d = j * 8 + 2 * tg;
        for (int r = 0; r < 2; r++) {
            long long key = r ? r1 : r0;
            if (key >= Tn) continue;
            long long off = ((b * Tn + key) * KV + kvh) * ZK_HD + d;
            if (dk) {
                if (ZK_DIN(d)) zk_st(dk + off, zk_ld(dk + off) + adk[j][2 * r] * scale);
                if (ZK_DIN(d + 1)) zk_st(dk + off + 1, zk_ld(dk + off + 1) + adk[j][2 * r + 1] * scale);
            }
            if (dv) {
                if (ZK_DIN(d)) zk_st(dv + off, zk_ld(dv + off) + adv[j][2 * r]);
                if (ZK_DIN(d + 1)) zk_st(dv + off + 1, zk_ld(dv + off + 1) + adv[j][2 * r + 1]);
            }
        }
    }
}
#else
#if ZK_HDP > 128
/* dk/dv's step for one query tile above hd 128: the scores against Q's
 * tile, dP against dO's in its place, dV += P dO, then Q's again for
 * dK += dS Q (one [32][hd+1] tile fits, two do not). */
__device__ __forceinline__ void zk_dkdv_split(float (*S)[ZK_HDP + 1], float *Ls, float *Ds, int *Ss,
                                              const int *seg, const float (*Kr)[ZK_HDP],
                                              const float (*Vr)[ZK_HDP], const T *q, const T *dout, const float *lse,
                                              const float *delta, long long b, long long h, long long H, long long qt,
                                              long long Tn, const long long *tk, float sc, long long window,
                                              float capl, float (*dka)[ZK_DPL], float (*dva)[ZK_DPL]) {
    const int R = ZK_RPW_BWD, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    zk_tile(S, q, b, qt, Tn, H, h, sc);
    if (threadIdx.x < ZK_KB) { /* read after the next zk_tile's barrier */
        long long t = qt + threadIdx.x;
        Ls[threadIdx.x] = t < Tn ? lse[(b * H + h) * Tn + t] : 0.f;
        Ds[threadIdx.x] = t < Tn ? delta[(b * H + h) * Tn + t] : 0.f;
        Ss[threadIdx.x] = t < Tn ? zk_attn_lo(seg, b, Tn, t, window) : 0;
    }
    const long long qi = qt + lane;
    float p[R], ds[R];
#pragma unroll
    for (int r = 0; r < R; r++) p[r] = ds[r] = 0.f;
    for (int d = 0; d < ZK_HD; d++)
#pragma unroll
        for (int r = 0; r < R; r++) p[r] += S[lane][d] * Kr[w * R + r][d];
    zk_tile(S, dout, b, qt, Tn, H, h, 1.f);
    for (int d = 0; d < ZK_HD; d++)
#pragma unroll
        for (int r = 0; r < R; r++) ds[r] += S[lane][d] * Vr[w * R + r][d];
#pragma unroll
    for (int r = 0; r < R; r++) {
        bool ok = qi < Tn && qi >= tk[r] && tk[r] < Tn && tk[r] >= Ss[lane];
        float th, x = zk_attn_cap(p[r], capl, &th);
        float pr = ok ? exp2f(x - Ls[lane]) : 0.f;
        ds[r] = pr * (ds[r] - Ds[lane]) * (1.f - th * th);
        p[r] = pr;
    }
    for (int i = 0; i < ZK_KB; i++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float pi = __shfl_sync(0xffffffffu, p[r], i);
#pragma unroll
            for (int c = 0; c < ZK_DPL; c++) dva[r][c] += pi * S[i][lane + 32 * c];
        }
    zk_tile(S, q, b, qt, Tn, H, h, sc);
    for (int i = 0; i < ZK_KB; i++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float dsi = __shfl_sync(0xffffffffu, ds[r], i);
#pragma unroll
            for (int c = 0; c < ZK_DPL; c++) dka[r][c] += dsi * S[i][lane + 32 * c];
        }
}
#endif

/* dv[j] += sum_i p_ij dO_i, dk[j] += scale * sum_i ds_ij q_i over i >= j and
 * every query head of the kv head. */
extern "C" __global__ void __launch_bounds__(ZK_NW * 32)
zk_attn_bwd_dkdv(T *dk, T *dv, const T *q, const T *k, const T *v, const T *dout, const float *lse,
                 const float *delta, long long B, long long Tn, long long H, long long KV, float scale,
                 long long window, float softcap, const int *seg) {
    const int R = ZK_RPW_BWD, KR = ZK_NW * ZK_RPW_BWD;
    __shared__ float Kr[ZK_NW * ZK_RPW_BWD][ZK_HDP];
    __shared__ float Vr[ZK_NW * ZK_RPW_BWD][ZK_HDP];
    __shared__ float Qs[ZK_KB][ZK_HDP + 1];
#if ZK_HDP <= 128 /* above, zk_dkdv_split stages Q and dO in turn in Qs */
    __shared__ float dOs[ZK_KB][ZK_HDP + 1];
#endif
    __shared__ float Ls[ZK_KB], Ds[ZK_KB];
    __shared__ int Ss[ZK_KB]; /* each query's first key (zk_attn_lo) */
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long b = blockIdx.z, kvh = blockIdx.y, k0 = (long long)blockIdx.x * KR;
    const long long G = H / KV;
    const float sc = scale * ZK_LOG2E, capl = softcap * ZK_LOG2E;
    for (int e = threadIdx.x; e < KR * ZK_HDP; e += blockDim.x) {
        int r = e / ZK_HDP, d = e % ZK_HDP;
        long long t = k0 + r, off = ((b * Tn + t) * KV + kvh) * ZK_HD + d;
        bool in = t < Tn && ZK_DIN(d);
        Kr[r][d] = in ? zk_ld(k + off) : 0.f;
        Vr[r][d] = in ? zk_ld(v + off) : 0.f;
    }
    float dka[R][ZK_DPL], dva[R][ZK_DPL];
    long long tk[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        tk[r] = k0 + w * R + r;
#pragma unroll
        for (int c = 0; c < ZK_DPL; c++) dka[r][c] = dva[r][c] = 0.f;
    }
    for (long long hh = 0; hh < G; hh++) {
        const long long h = kvh * G + hh;
        for (long long qt = k0; qt < Tn; qt += ZK_KB) {
            if (zk_attn_lo(seg, b, Tn, qt, window) >= k0 + KR) break; /* queries of later samples only, from here on */
#if ZK_HDP > 128
            zk_dkdv_split(Qs, Ls, Ds, Ss, seg, Kr, Vr, q, dout, lse, delta, b, h, H, qt, Tn, tk, sc, window, capl, dka,
                          dva);
#else
            __syncthreads();
            for (int e = threadIdx.x; e < ZK_KB * ZK_HDP; e += blockDim.x) {
                int i = e / ZK_HDP, d = e % ZK_HDP;
                long long t = qt + i, off = ((b * Tn + t) * H + h) * ZK_HD + d;
                bool in = t < Tn && ZK_DIN(d);
                Qs[i][d] = in ? zk_ld(q + off) * sc : 0.f;
                dOs[i][d] = in ? zk_ld(dout + off) : 0.f;
            }
            if (threadIdx.x < ZK_KB) {
                long long t = qt + threadIdx.x;
                Ls[threadIdx.x] = t < Tn ? lse[(b * H + h) * Tn + t] : 0.f;
                Ds[threadIdx.x] = t < Tn ? delta[(b * H + h) * Tn + t] : 0.f;
                Ss[threadIdx.x] = t < Tn ? zk_attn_lo(seg, b, Tn, t, window) : 0;
            }
            __syncthreads();
            const long long qi = qt + lane;
            float p[R], ds[R];
#pragma unroll
            for (int r = 0; r < R; r++) p[r] = ds[r] = 0.f;
#pragma unroll 8
            for (int d = 0; d < ZK_HD; d++) {
                float qd = Qs[lane][d], od = dOs[lane][d];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    p[r] += qd * Kr[w * R + r][d];
                    ds[r] += od * Vr[w * R + r][d];
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                bool ok = qi < Tn && qi >= tk[r] && tk[r] < Tn && tk[r] >= Ss[lane];
                float th, x = zk_attn_cap(p[r], capl, &th);
                float pr = ok ? exp2f(x - Ls[lane]) : 0.f;
                ds[r] = pr * (ds[r] - Ds[lane]) * (1.f - th * th);
                p[r] = pr;
            }
#pragma unroll 4
            for (int i = 0; i < ZK_KB; i++) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float pi = __shfl_sync(0xffffffffu, p[r], i);
                    float dsi = __shfl_sync(0xffffffffu, ds[r], i);
#pragma unroll
                    for (int c = 0; c < ZK_DPL; c++) {
                        dva[r][c] += pi * dOs[i][lane + 32 * c];
                        dka[r][c] += dsi * Qs[i][lane + 32 * c];
                    }
                }
            }
#endif
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (tk[r] >= Tn) continue;
#pragma unroll
        for (int c = 0; c < ZK_DPL; c++) {
            if (!ZK_DIN(lane + 32 * c)) continue;
            long long off = ((b * Tn + tk[r]) * KV + kvh) * ZK_HD + lane + 32 * c;
            if (dk) zk_st(dk + off, zk_ld(dk + off) + dka[r][c] * ZK_LN2);
            if (dv) zk_st(dv + off, zk_ld(dv + off) + dva[r][c]);
        }
    }
}
#endif /* ZK_TC_ATTN */
