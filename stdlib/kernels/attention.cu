/* attention: fused causal attention, FlashAttention-style, fp32 arithmetic
 * on the SIMT cores (no tensor cores yet), never storing T x T.
 *
 * q [B, T, H*HD], k and v [B, T, KV*HD]; query head h reads kv head
 * h / (H/KV). Specialised on ZK_HD (head dim, a multiple of 32, <= 128) and
 * rows per warp ZK_RPW_FWD / ZK_RPW_BWD; sizes are arguments.
 *
 * Mapping (forward and dq): a block of ZK_NW warps owns ZK_NW*RPW query rows
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

#define ZK_NW 4
#define ZK_KB 32
#define ZK_DPL (ZK_HD / 32)

extern "C" __global__ void __launch_bounds__(ZK_NW * 32)
zk_attn_fwd(T *o, float *lse, const T *q, const T *k, const T *v, long long write_o, long long B,
            long long Tn, long long H, long long KV, float scale) {
    const int R = ZK_RPW_FWD, QB = ZK_NW * ZK_RPW_FWD;
    __shared__ float Qs[ZK_NW * ZK_RPW_FWD][ZK_HD];
    __shared__ float Ks[ZK_KB][ZK_HD + 1];
    __shared__ float Vs[ZK_KB][ZK_HD];
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long b = blockIdx.z, h = blockIdx.y, q0 = (long long)blockIdx.x * QB;
    const long long kvh = h / (H / KV);
    const float sc = scale * ZK_LOG2E;
    for (int e = threadIdx.x; e < QB * ZK_HD; e += blockDim.x) {
        int r = e / ZK_HD, d = e % ZK_HD;
        long long t = q0 + r;
        Qs[r][d] = t < Tn ? zk_ld(q + ((b * Tn + t) * H + h) * ZK_HD + d) * sc : 0.f;
    }
    float m[R], l[R], acc[R][ZK_DPL];
    long long tq[R], tm[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = -ZK_INF;
        l[r] = 0.f;
        tq[r] = q0 + w * R + r;
        tm[r] = tq[r] < Tn ? tq[r] : Tn - 1;
#pragma unroll
        for (int c = 0; c < ZK_DPL; c++) acc[r][c] = 0.f;
    }
    const long long kend = q0 + QB < Tn ? q0 + QB : Tn;
    for (long long k0 = 0; k0 < kend; k0 += ZK_KB) {
        __syncthreads();
        for (int e = threadIdx.x; e < ZK_KB * ZK_HD; e += blockDim.x) {
            int j = e / ZK_HD, d = e % ZK_HD;
            long long t = k0 + j, off = ((b * Tn + t) * KV + kvh) * ZK_HD + d;
            Ks[j][d] = t < Tn ? zk_ld(k + off) : 0.f;
            Vs[j][d] = t < Tn ? zk_ld(v + off) : 0.f;
        }
        __syncthreads();
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
            if (kj > tm[r]) s[r] = -ZK_INF;
            float mn = fmaxf(m[r], zk_warp_max(s[r]));
            float alpha = exp2f(m[r] - mn);
            float p = exp2f(s[r] - mn);
            l[r] = l[r] * alpha + zk_warp_sum(p);
            m[r] = mn;
#pragma unroll
            for (int c = 0; c < ZK_DPL; c++) acc[r][c] *= alpha;
            s[r] = p;
        }
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
                zk_st(o + ((b * Tn + tq[r]) * H + h) * ZK_HD + lane + 32 * c, acc[r][c] * inv);
        if (lse && lane == 0) lse[(b * H + h) * Tn + tq[r]] = m[r] + log2f(l[r]);
    }
}

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

/* dq[b, t, h] += scale * sum_j ds_j k_j, ds = p (dp - delta), dp = dO . v_j. */
extern "C" __global__ void __launch_bounds__(ZK_NW * 32)
zk_attn_bwd_dq(T *dq, const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
               long long B, long long Tn, long long H, long long KV, float scale) {
    const int R = ZK_RPW_BWD, QB = ZK_NW * ZK_RPW_BWD;
    __shared__ float Qs[ZK_NW * ZK_RPW_BWD][ZK_HD];
    __shared__ float dOs[ZK_NW * ZK_RPW_BWD][ZK_HD];
    __shared__ float Ks[ZK_KB][ZK_HD + 1];
    __shared__ float Vs[ZK_KB][ZK_HD + 1];
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long b = blockIdx.z, h = blockIdx.y, q0 = (long long)blockIdx.x * QB;
    const long long kvh = h / (H / KV);
    const float sc = scale * ZK_LOG2E;
    for (int e = threadIdx.x; e < QB * ZK_HD; e += blockDim.x) {
        int r = e / ZK_HD, d = e % ZK_HD;
        long long t = q0 + r, off = ((b * Tn + t) * H + h) * ZK_HD + d;
        Qs[r][d] = t < Tn ? zk_ld(q + off) * sc : 0.f;
        dOs[r][d] = t < Tn ? zk_ld(dout + off) : 0.f;
    }
    float L[R], Dl[R], acc[R][ZK_DPL];
    long long tq[R], tm[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        tq[r] = q0 + w * R + r;
        tm[r] = tq[r] < Tn ? tq[r] : Tn - 1;
        L[r] = lse[(b * H + h) * Tn + tm[r]];
        Dl[r] = delta[(b * H + h) * Tn + tm[r]];
#pragma unroll
        for (int c = 0; c < ZK_DPL; c++) acc[r][c] = 0.f;
    }
    const long long kend = q0 + QB < Tn ? q0 + QB : Tn;
    for (long long k0 = 0; k0 < kend; k0 += ZK_KB) {
        __syncthreads();
        for (int e = threadIdx.x; e < ZK_KB * ZK_HD; e += blockDim.x) {
            int j = e / ZK_HD, d = e % ZK_HD;
            long long t = k0 + j, off = ((b * Tn + t) * KV + kvh) * ZK_HD + d;
            Ks[j][d] = t < Tn ? zk_ld(k + off) : 0.f;
            Vs[j][d] = t < Tn ? zk_ld(v + off) : 0.f;
        }
        __syncthreads();
        const long long kj = k0 + lane;
        float s[R], dp[R];
#pragma unroll
        for (int r = 0; r < R; r++) s[r] = dp[r] = 0.f;
#pragma unroll 8
        for (int d = 0; d < ZK_HD; d++) {
            float kd = Ks[lane][d], vd = Vs[lane][d];
#pragma unroll
            for (int r = 0; r < R; r++) {
                s[r] += Qs[w * R + r][d] * kd;
                dp[r] += dOs[w * R + r][d] * vd;
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            float p = (kj <= tm[r] && tq[r] < Tn) ? exp2f(s[r] - L[r]) : 0.f;
            s[r] = p * (dp[r] - Dl[r]); /* ds */
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
            T *p = dq + ((b * Tn + tq[r]) * H + h) * ZK_HD + lane + 32 * c;
            zk_st(p, zk_ld(p) + acc[r][c] * scale);
        }
    }
}

/* dv[j] += sum_i p_ij dO_i, dk[j] += scale * sum_i ds_ij q_i over i >= j and
 * every query head of the kv head. */
extern "C" __global__ void __launch_bounds__(ZK_NW * 32)
zk_attn_bwd_dkdv(T *dk, T *dv, const T *q, const T *k, const T *v, const T *dout, const float *lse,
                 const float *delta, long long B, long long Tn, long long H, long long KV, float scale) {
    const int R = ZK_RPW_BWD, KR = ZK_NW * ZK_RPW_BWD;
    __shared__ float Kr[ZK_NW * ZK_RPW_BWD][ZK_HD];
    __shared__ float Vr[ZK_NW * ZK_RPW_BWD][ZK_HD];
    __shared__ float Qs[ZK_KB][ZK_HD + 1];
    __shared__ float dOs[ZK_KB][ZK_HD + 1];
    __shared__ float Ls[ZK_KB], Ds[ZK_KB];
    (void)B;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long b = blockIdx.z, kvh = blockIdx.y, k0 = (long long)blockIdx.x * KR;
    const long long G = H / KV;
    const float sc = scale * ZK_LOG2E;
    for (int e = threadIdx.x; e < KR * ZK_HD; e += blockDim.x) {
        int r = e / ZK_HD, d = e % ZK_HD;
        long long t = k0 + r, off = ((b * Tn + t) * KV + kvh) * ZK_HD + d;
        Kr[r][d] = t < Tn ? zk_ld(k + off) : 0.f;
        Vr[r][d] = t < Tn ? zk_ld(v + off) : 0.f;
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
            __syncthreads();
            for (int e = threadIdx.x; e < ZK_KB * ZK_HD; e += blockDim.x) {
                int i = e / ZK_HD, d = e % ZK_HD;
                long long t = qt + i, off = ((b * Tn + t) * H + h) * ZK_HD + d;
                Qs[i][d] = t < Tn ? zk_ld(q + off) * sc : 0.f;
                dOs[i][d] = t < Tn ? zk_ld(dout + off) : 0.f;
            }
            if (threadIdx.x < ZK_KB) {
                long long t = qt + threadIdx.x;
                Ls[threadIdx.x] = t < Tn ? lse[(b * H + h) * Tn + t] : 0.f;
                Ds[threadIdx.x] = t < Tn ? delta[(b * H + h) * Tn + t] : 0.f;
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
                bool ok = qi < Tn && qi >= tk[r] && tk[r] < Tn;
                float pr = ok ? exp2f(p[r] - Ls[lane]) : 0.f;
                ds[r] = pr * (ds[r] - Ds[lane]);
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
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (tk[r] >= Tn) continue;
#pragma unroll
        for (int c = 0; c < ZK_DPL; c++) {
            long long off = ((b * Tn + tk[r]) * KV + kvh) * ZK_HD + lane + 32 * c;
            if (dk) zk_st(dk + off, zk_ld(dk + off) + dka[r][c] * ZK_LN2);
            if (dv) zk_st(dv + off, zk_ld(dv + off) + dva[r][c]);
        }
    }
}
