/* norm: layernorm and rmsnorm over the last dim D, forward and backward.
 * Forward: one block (256 threads) per row. Backward: gridDim.x = P blocks,
 * block p walks rows p, p+P, ...; it accumulates dx (+=) per row and its own
 * partial parameter gradients into ws[p*D + c] (dg) and ws[(P + p)*D + c]
 * (db), which zk_colsum_final (reduce family) sums in a fixed order.
 * Statistics are recomputed from x in backward (nothing is saved). */
#include "common.cuh"

/* y = (x - mean) / sqrt(var + eps) * g + b; g, b may be NULL. */
extern "C" __global__ void zk_layernorm_fwd(T *y, const T *x, const T *g, const T *b, long long rows,
                                            long long D, float eps) {
    __shared__ float scratch[32];
    long long r = blockIdx.x;
    if (r >= rows) return;
    const T *xr = x + r * D;
    float s = 0.f;
    for (long long c = threadIdx.x; c < D; c += blockDim.x) s += zk_ld(xr + c);
    float mean = zk_block_sum(s, scratch) / (float)D;
    float q = 0.f;
    for (long long c = threadIdx.x; c < D; c += blockDim.x) {
        float d = zk_ld(xr + c) - mean;
        q += d * d;
    }
    float rstd = rsqrtf(zk_block_sum(q, scratch) / (float)D + eps);
    for (long long c = threadIdx.x; c < D; c += blockDim.x) {
        float v = (zk_ld(xr + c) - mean) * rstd;
        if (g) v *= zk_ld(g + c);
        if (b) v += zk_ld(b + c);
        zk_st(y + r * D + c, v);
    }
}

/* dx += rstd (dyh - mean(dyh) - xh mean(dyh xh)), dyh = dy g;
 * ws partials of dg = sum dy xh and db = sum dy (ws zeroed by the caller). */
extern "C" __global__ void zk_layernorm_bwd(T *dx, float *ws, const T *x, const T *g, const T *dy,
                                            long long rows, long long D, float eps, long long want_dx,
                                            long long want_dg, long long want_db) {
    __shared__ float scratch[32];
    long long P = gridDim.x;
    float *wg = ws + blockIdx.x * D, *wb = ws + (P + blockIdx.x) * D;
    for (long long r = blockIdx.x; r < rows; r += P) {
        const T *xr = x + r * D, *dyr = dy + r * D;
        float s = 0.f;
        for (long long c = threadIdx.x; c < D; c += blockDim.x) s += zk_ld(xr + c);
        float mean = zk_block_sum(s, scratch) / (float)D;
        float q = 0.f;
        for (long long c = threadIdx.x; c < D; c += blockDim.x) {
            float d = zk_ld(xr + c) - mean;
            q += d * d;
        }
        float rstd = rsqrtf(zk_block_sum(q, scratch) / (float)D + eps);
        float s1 = 0.f, s2 = 0.f;
        for (long long c = threadIdx.x; c < D; c += blockDim.x) {
            float xh = (zk_ld(xr + c) - mean) * rstd, gy = zk_ld(dyr + c);
            float dyh = g ? gy * zk_ld(g + c) : gy;
            s1 += dyh;
            s2 += dyh * xh;
            if (want_dg) wg[c] += gy * xh;
            if (want_db) wb[c] += gy;
        }
        float m1 = zk_block_sum(s1, scratch) / (float)D;
        float m2 = zk_block_sum(s2, scratch) / (float)D;
        if (want_dx)
            for (long long c = threadIdx.x; c < D; c += blockDim.x) {
                float xh = (zk_ld(xr + c) - mean) * rstd, gy = zk_ld(dyr + c);
                float dyh = g ? gy * zk_ld(g + c) : gy;
                T *p = dx + r * D + c;
                zk_st(p, zk_ld(p) + rstd * (dyh - m1 - xh * m2));
            }
    }
}

/* y = x / sqrt(mean(x^2) + eps) * (offset + g); g may be NULL (gain 1).
 * offset: Gemma's RMSNorm scales by 1 + w (0 elsewhere), added in fp32. */
extern "C" __global__ void zk_rmsnorm_fwd(T *y, const T *x, const T *g, long long rows, long long D,
                                          float eps, float offset) {
    __shared__ float scratch[32];
    long long r = blockIdx.x;
    if (r >= rows) return;
    const T *xr = x + r * D;
    float q = 0.f;
    for (long long c = threadIdx.x; c < D; c += blockDim.x) {
        float v = zk_ld(xr + c);
        q += v * v;
    }
    float rs = rsqrtf(zk_block_sum(q, scratch) / (float)D + eps);
    for (long long c = threadIdx.x; c < D; c += blockDim.x) {
        float v = zk_ld(xr + c) * rs;
        if (g) v *= offset + zk_ld(g + c);
        zk_st(y + r * D + c, v);
    }
}

/* dx += r (dyh - x r^2 mean(dyh x)), dyh = dy (offset + g); ws partial of
 * dg = sum dy x r (the offset is a constant: g's gradient is unchanged). */
extern "C" __global__ void zk_rmsnorm_bwd(T *dx, float *ws, const T *x, const T *g, const T *dy,
                                          long long rows, long long D, float eps, long long want_dx,
                                          long long want_dg, float offset) {
    __shared__ float scratch[32];
    long long P = gridDim.x;
    float *wg = ws + blockIdx.x * D;
    for (long long r = blockIdx.x; r < rows; r += P) {
        const T *xr = x + r * D, *dyr = dy + r * D;
        float q = 0.f;
        for (long long c = threadIdx.x; c < D; c += blockDim.x) {
            float v = zk_ld(xr + c);
            q += v * v;
        }
        float rs = rsqrtf(zk_block_sum(q, scratch) / (float)D + eps);
        float s = 0.f;
        for (long long c = threadIdx.x; c < D; c += blockDim.x) {
            float xv = zk_ld(xr + c), gy = zk_ld(dyr + c);
            float dyh = g ? gy * (offset + zk_ld(g + c)) : gy;
            s += dyh * xv;
            if (want_dg) wg[c] += gy * xv * rs;
        }
        float m = zk_block_sum(s, scratch) / (float)D;
        if (want_dx)
            for (long long c = threadIdx.x; c < D; c += blockDim.x) {
                float xv = zk_ld(xr + c), gy = zk_ld(dyr + c);
                float dyh = g ? gy * (offset + zk_ld(g + c)) : gy;
                T *p = dx + r * D + c;
                zk_st(p, zk_ld(p) + rs * (dyh - xv * rs * rs * m));
            }
    }
}
