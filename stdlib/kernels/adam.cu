/* adam: AdamW on the GPU, fp32 master, parameter in ZK_T, the moments in
 * f32 (zk_adam), bf16 (zk_adam_bf16s: widened, stored rounded to nearest
 * even) or 8-bit blocks of bitsandbytes' dynamic maps (zk_adam_q8,
 * runtime/hostk/qstate.h: a CUDA block per block of 2048 elements).
 * g = grad * inv_loss_scale, times min(1, clip / (norm + 1e-6)) when clip > 0
 * (norm = the global gradient norm, unscaled by inv_loss_scale);
 * a non-finite norm skips the step (f16 overflow: the executor lowers the
 * loss scale). m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * w -= lr (m/bc1 / (sqrt(v/bc2) + eps) + wd w) on the master w (the
 * parameter itself when master is NULL, i.e. ZK_T is f32), then rounded into
 * the parameter. bc1 = 1 - b1^t, bc2 = 1 - b2^t and lr come from the
 * executor each step. */
#include "common.cuh"

/* The gradient's factor f, the set-up every Adam kernel shares; false when
 * the norm is not finite (the step is skipped: every thread returns). */
__device__ __forceinline__ bool zk_adam_factor(const float *norm, float inv_loss_scale, float clip, float *f) {
    *f = inv_loss_scale;
    if (norm) {
        float nr = norm[0] * inv_loss_scale;
        if (!isfinite(nr)) return false;
        if (clip > 0.f && nr > 0.f) *f *= fminf(1.f, clip / (nr + 1e-6f));
    }
    return true;
}

/* Element i's step, after its moments mi and vi: the master (or the
 * parameter itself) w updated, then rounded into the parameter. */
__device__ __forceinline__ void zk_adam_update(T *param, float *master, long long i, float mi, float vi, float lr,
                                               float eps, float wd, float bc1, float bc2) {
    float w = master ? master[i] : zk_ld(param + i);
    w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w);
    if (master) master[i] = w;
    zk_st(param + i, w);
}

/* Moments stored as M, f32 or bf16 (zk_st rounds to nearest even; the
 * update uses them before rounding, as the CPU Adam does), a thread per
 * element, grid-stride. */
template <typename M>
__device__ __forceinline__ void zk_adam_moments(T *param, float *master, const T *grad, M *m, M *v, long long n, float f,
                                                float lr, float beta1, float beta2, float eps, float wd, float bc1,
                                                float bc2) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float g = zk_ld(grad + i) * f;
        float mi = beta1 * zk_ld(m + i) + (1.f - beta1) * g;
        float vi = beta2 * zk_ld(v + i) + (1.f - beta2) * g * g;
        zk_st(m + i, mi);
        zk_st(v + i, vi);
        zk_adam_update(param, master, i, mi, vi, lr, eps, wd, bc1, bc2);
    }
}

extern "C" __global__ void zk_adam(T *param, float *master, const T *grad, float *m, float *v,
                                   const float *norm, long long n, float lr, float beta1, float beta2,
                                   float eps, float wd, float bc1, float bc2, float inv_loss_scale,
                                   float clip) {
    float f;
    if (zk_adam_factor(norm, inv_loss_scale, clip, &f))
        zk_adam_moments(param, master, grad, m, v, n, f, lr, beta1, beta2, eps, wd, bc1, bc2);
}

/* bf16 moments: as zk_adam, the new moments stored rounded to bf16. */
extern "C" __global__ void zk_adam_bf16s(T *param, float *master, const T *grad, zk_bf16 *m, zk_bf16 *v,
                                         const float *norm, long long n, float lr, float beta1, float beta2,
                                         float eps, float wd, float bc1, float bc2, float inv_loss_scale,
                                         float clip) {
    float f;
    if (zk_adam_factor(norm, inv_loss_scale, clip, &f))
        zk_adam_moments(param, master, grad, m, v, n, f, lr, beta1, beta2, eps, wd, bc1, bc2);
}

/* bitsandbytes' create_dynamic_map(signed=True) and (signed=False), a
 * block's size and the midpoints between codes: qmap.h, which the host's
 * runtime/hostk/qstate.c reads too (optim_state.sh checks the two Adams'
 * results equal). */
#include "qmap.h"
__device__ const float zk_qmap_signed[256] = ZQ_MAP_SIGNED;
__device__ const float zk_qmap_unsigned[256] = ZQ_MAP_UNSIGNED;

#define ZK_QBLOCK ZQ_BLOCK
#define ZK_QTHREADS 256

/* The code of x / absmax: how many midpoints of the map lie strictly below. */
__device__ __forceinline__ unsigned char zk_q8_code(const float *bound, float v) {
    int lo = 0;
    for (int step = 128; step > 0; step >>= 1) lo += (int)(v > bound[lo + step - 1]) * step; /* lo + step - 1 <= 254 */
    return (unsigned char)lo;
}

/* The largest of every thread's x in the block (ZK_QTHREADS threads). */
__device__ __forceinline__ float zk_q8_max(float x, float *red) {
    red[threadIdx.x] = x;
    __syncthreads();
    for (int s = ZK_QTHREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

/* 8-bit moments: block b of 2048 elements (its codes at b * 2052, then its
 * f32 absmax), one CUDA block of 256 threads, 8 elements each; decoded,
 * stepped as zk_adam steps, encoded with the block's new absmax. */
extern "C" __global__ void zk_adam_q8(T *param, float *master, const T *grad, unsigned char *m, unsigned char *v,
                                      const float *norm, long long n, float lr, float beta1, float beta2,
                                      float eps, float wd, float bc1, float bc2, float inv_loss_scale,
                                      float clip) {
    __shared__ float bound[2][255];
    __shared__ float red[ZK_QTHREADS];
    float f;
    if (!zk_adam_factor(norm, inv_loss_scale, clip, &f)) return;
    for (int i = threadIdx.x; i < 255; i += blockDim.x) {
        bound[0][i] = zq_bound(zk_qmap_signed, i);
        bound[1][i] = zq_bound(zk_qmap_unsigned, i);
    }
    __syncthreads();
    long long nb = (n + ZK_QBLOCK - 1) / ZK_QBLOCK;
    for (long long b = blockIdx.x; b < nb; b += gridDim.x) {
        unsigned char *mb = m + b * ZQ_BLOCK_BYTES, *vb = v + b * ZQ_BLOCK_BYTES;
        float am = *(const float *)(mb + ZK_QBLOCK), av = *(const float *)(vb + ZK_QBLOCK);
        float ms[ZK_QBLOCK / ZK_QTHREADS], vs[ZK_QBLOCK / ZK_QTHREADS];
        float mmax = 0.f, vmax = 0.f;
        for (int j = 0; j < ZK_QBLOCK / ZK_QTHREADS; j++) {
            int e = (int)threadIdx.x + j * ZK_QTHREADS;
            long long i = b * ZK_QBLOCK + e;
            ms[j] = vs[j] = 0.f;
            if (i >= n) continue;
            float g = zk_ld(grad + i) * f;
            float mi = beta1 * zq_value(zk_qmap_signed, mb[e], am) + (1.f - beta1) * g;
            float vi = beta2 * zq_value(zk_qmap_unsigned, vb[e], av) + (1.f - beta2) * g * g;
            ms[j] = mi;
            vs[j] = vi;
            mmax = fmaxf(mmax, fabsf(mi));
            vmax = fmaxf(vmax, fabsf(vi));
            zk_adam_update(param, master, i, mi, vi, lr, eps, wd, bc1, bc2);
        }
        mmax = zk_q8_max(mmax, red); /* every thread has read the old absmax before it is written */
        vmax = zk_q8_max(vmax, red);
        for (int j = 0; j < ZK_QBLOCK / ZK_QTHREADS; j++) {
            int e = (int)threadIdx.x + j * ZK_QTHREADS;
            bool in = b * ZK_QBLOCK + e < n;
            mb[e] = in && mmax > 0.f ? zk_q8_code(bound[0], ms[j] / mmax) : (unsigned char)ZQ_ZERO_SIGNED;
            vb[e] = in && vmax > 0.f ? zk_q8_code(bound[1], vs[j] / vmax) : (unsigned char)ZQ_ZERO_UNSIGNED;
        }
        if (threadIdx.x == 0) {
            *(float *)(mb + ZK_QBLOCK) = mmax;
            *(float *)(vb + ZK_QBLOCK) = vmax;
        }
        __syncthreads();
    }
}
