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

extern "C" __global__ void zk_adam(T *param, float *master, const T *grad, float *m, float *v,
                                   const float *norm, long long n, float lr, float beta1, float beta2,
                                   float eps, float wd, float bc1, float bc2, float inv_loss_scale,
                                   float clip) {
    float f = inv_loss_scale;
    if (norm) {
        float nr = norm[0] * inv_loss_scale;
        if (!isfinite(nr)) return;
        if (clip > 0.f && nr > 0.f) f *= fminf(1.f, clip / (nr + 1e-6f));
    }
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float g = zk_ld(grad + i) * f;
        float mi = beta1 * m[i] + (1.f - beta1) * g;
        float vi = beta2 * v[i] + (1.f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float w = master ? master[i] : zk_ld(param + i);
        w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w);
        if (master) master[i] = w;
        zk_st(param + i, w);
    }
}

/* bf16 moments: as zk_adam, the new moments stored rounded to bf16 (the
 * update uses them before rounding, as the CPU Adam does). */
extern "C" __global__ void zk_adam_bf16s(T *param, float *master, const T *grad, zk_bf16 *m, zk_bf16 *v,
                                         const float *norm, long long n, float lr, float beta1, float beta2,
                                         float eps, float wd, float bc1, float bc2, float inv_loss_scale,
                                         float clip) {
    float f = inv_loss_scale;
    if (norm) {
        float nr = norm[0] * inv_loss_scale;
        if (!isfinite(nr)) return;
        if (clip > 0.f && nr > 0.f) f *= fminf(1.f, clip / (nr + 1e-6f));
    }
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float g = zk_ld(grad + i) * f;
        float mi = beta1 * zk_ld(m + i) + (1.f - beta1) * g;
        float vi = beta2 * zk_ld(v + i) + (1.f - beta2) * g * g;
        zk_st(m + i, mi);
        zk_st(v + i, vi);
        float w = master ? master[i] : zk_ld(param + i);
        w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w);
        if (master) master[i] = w;
        zk_st(param + i, w);
    }
}

/* bitsandbytes' create_dynamic_map(signed=True) and (signed=False), the
 * tables of runtime/hostk/qstate.c (gpu_kernels_emu.sh checks the two
 * kernels' results equal). */
__device__ const float zk_qmap_signed[256] = {
    -0x1.fc66660000000p-1f, -0x1.f533340000000p-1f, -0x1.ee00000000000p-1f, -0x1.e6cccc0000000p-1f,
    -0x1.df999a0000000p-1f, -0x1.d866660000000p-1f, -0x1.d133340000000p-1f, -0x1.ca00000000000p-1f,
    -0x1.c2cccc0000000p-1f, -0x1.bb999a0000000p-1f, -0x1.b466660000000p-1f, -0x1.ad33340000000p-1f,
    -0x1.a600000000000p-1f, -0x1.9ecccc0000000p-1f, -0x1.97999a0000000p-1f, -0x1.9066660000000p-1f,
    -0x1.8933340000000p-1f, -0x1.8200000000000p-1f, -0x1.7acccc0000000p-1f, -0x1.73999a0000000p-1f,
    -0x1.6c66680000000p-1f, -0x1.6533340000000p-1f, -0x1.5e00000000000p-1f, -0x1.56cccc0000000p-1f,
    -0x1.4f999a0000000p-1f, -0x1.4866680000000p-1f, -0x1.4133340000000p-1f, -0x1.3a00000000000p-1f,
    -0x1.32cccc0000000p-1f, -0x1.2b999a0000000p-1f, -0x1.2466680000000p-1f, -0x1.1d33340000000p-1f,
    -0x1.1600000000000p-1f, -0x1.0ecccc0000000p-1f, -0x1.0799980000000p-1f, -0x1.0066660000000p-1f,
    -0x1.f266640000000p-2f, -0x1.e400000000000p-2f, -0x1.d599980000000p-2f, -0x1.c733340000000p-2f,
    -0x1.b8cccc0000000p-2f, -0x1.aa66660000000p-2f, -0x1.9c00000000000p-2f, -0x1.8d99980000000p-2f,
    -0x1.7f33340000000p-2f, -0x1.70cccc0000000p-2f, -0x1.6266660000000p-2f, -0x1.5400000000000p-2f,
    -0x1.4599980000000p-2f, -0x1.3733340000000p-2f, -0x1.28cccc0000000p-2f, -0x1.1a66680000000p-2f,
    -0x1.0c00000000000p-2f, -0x1.fb33320000000p-3f, -0x1.de66660000000p-3f, -0x1.c1999a0000000p-3f,
    -0x1.a4cccc0000000p-3f, -0x1.8800000000000p-3f, -0x1.6b33340000000p-3f, -0x1.4e66660000000p-3f,
    -0x1.31999a0000000p-3f, -0x1.14cccc0000000p-3f, -0x1.f000000000000p-4f, -0x1.b666680000000p-4f,
    -0x1.93d70a0000000p-4f, -0x1.8851ee0000000p-4f, -0x1.7cccce0000000p-4f, -0x1.7147ae0000000p-4f,
    -0x1.65c2900000000p-4f, -0x1.5a3d700000000p-4f, -0x1.4eb8540000000p-4f, -0x1.4333340000000p-4f,
    -0x1.37ae140000000p-4f, -0x1.2c28f60000000p-4f, -0x1.20a3d60000000p-4f, -0x1.151eba0000000p-4f,
    -0x1.09999a0000000p-4f, -0x1.fc28f60000000p-5f, -0x1.e51eba0000000p-5f, -0x1.ce147a0000000p-5f,
    -0x1.b70a3e0000000p-5f, -0x1.a000000000000p-5f, -0x1.88f5c20000000p-5f, -0x1.71eb860000000p-5f,
    -0x1.5ae1460000000p-5f, -0x1.43d70a0000000p-5f, -0x1.2cccce0000000p-5f, -0x1.15c2900000000p-5f,
    -0x1.fd70a40000000p-6f, -0x1.cf5c2a0000000p-6f, -0x1.a147ae0000000p-6f, -0x1.7333340000000p-6f,
    -0x1.451eba0000000p-6f, -0x1.170a3e0000000p-6f, -0x1.d1eb860000000p-7f, -0x1.75c2900000000p-7f,
    -0x1.3e76c80000000p-7f, -0x1.2c08300000000p-7f, -0x1.19999a0000000p-7f, -0x1.072b020000000p-7f,
    -0x1.e978d40000000p-8f, -0x1.c49ba60000000p-8f, -0x1.9fbe760000000p-8f, -0x1.7ae1480000000p-8f,
    -0x1.56041a0000000p-8f, -0x1.3126e80000000p-8f, -0x1.0c49ba0000000p-8f, -0x1.ced9140000000p-9f,
    -0x1.851eb80000000p-9f, -0x1.3b645a0000000p-9f, -0x1.e353f80000000p-10f, -0x1.4fdf3a0000000p-10f,
    -0x1.eecbfe0000000p-11f, -0x1.b3d07c0000000p-11f, -0x1.78d5000000000p-11f, -0x1.3dd9820000000p-11f,
    -0x1.02de020000000p-11f, -0x1.8fc5060000000p-12f, -0x1.19ce0a0000000p-12f, -0x1.47ae160000000p-13f,
    -0x1.743e960000000p-14f, -0x1.15df660000000p-14f, -0x1.6f00680000000p-15f, -0x1.64840c0000000p-16f,
    -0x1.040bfe0000000p-17f, -0x1.b435280000000p-19f, -0x1.27476e0000000p-21f, 0x0.0p+0f,
    0x1.27476e0000000p-21f, 0x1.b435280000000p-19f, 0x1.040bfe0000000p-17f, 0x1.64840c0000000p-16f,
    0x1.6f00680000000p-15f, 0x1.15df660000000p-14f, 0x1.743e960000000p-14f, 0x1.47ae160000000p-13f,
    0x1.19ce0a0000000p-12f, 0x1.8fc5060000000p-12f, 0x1.02de020000000p-11f, 0x1.3dd9820000000p-11f,
    0x1.78d5000000000p-11f, 0x1.b3d07c0000000p-11f, 0x1.eecbfe0000000p-11f, 0x1.4fdf3a0000000p-10f,
    0x1.e353f80000000p-10f, 0x1.3b645a0000000p-9f, 0x1.851eb80000000p-9f, 0x1.ced9140000000p-9f,
    0x1.0c49ba0000000p-8f, 0x1.3126e80000000p-8f, 0x1.56041a0000000p-8f, 0x1.7ae1480000000p-8f,
    0x1.9fbe760000000p-8f, 0x1.c49ba60000000p-8f, 0x1.e978d40000000p-8f, 0x1.072b020000000p-7f,
    0x1.19999a0000000p-7f, 0x1.2c08300000000p-7f, 0x1.3e76c80000000p-7f, 0x1.75c2900000000p-7f,
    0x1.d1eb860000000p-7f, 0x1.170a3e0000000p-6f, 0x1.451eba0000000p-6f, 0x1.7333340000000p-6f,
    0x1.a147ae0000000p-6f, 0x1.cf5c2a0000000p-6f, 0x1.fd70a40000000p-6f, 0x1.15c2900000000p-5f,
    0x1.2cccce0000000p-5f, 0x1.43d70a0000000p-5f, 0x1.5ae1460000000p-5f, 0x1.71eb860000000p-5f,
    0x1.88f5c20000000p-5f, 0x1.a000000000000p-5f, 0x1.b70a3e0000000p-5f, 0x1.ce147a0000000p-5f,
    0x1.e51eba0000000p-5f, 0x1.fc28f60000000p-5f, 0x1.09999a0000000p-4f, 0x1.151eba0000000p-4f,
    0x1.20a3d60000000p-4f, 0x1.2c28f60000000p-4f, 0x1.37ae140000000p-4f, 0x1.4333340000000p-4f,
    0x1.4eb8540000000p-4f, 0x1.5a3d700000000p-4f, 0x1.65c2900000000p-4f, 0x1.7147ae0000000p-4f,
    0x1.7cccce0000000p-4f, 0x1.8851ee0000000p-4f, 0x1.93d70a0000000p-4f, 0x1.b666680000000p-4f,
    0x1.f000000000000p-4f, 0x1.14cccc0000000p-3f, 0x1.31999a0000000p-3f, 0x1.4e66660000000p-3f,
    0x1.6b33340000000p-3f, 0x1.8800000000000p-3f, 0x1.a4cccc0000000p-3f, 0x1.c1999a0000000p-3f,
    0x1.de66660000000p-3f, 0x1.fb33320000000p-3f, 0x1.0c00000000000p-2f, 0x1.1a66680000000p-2f,
    0x1.28cccc0000000p-2f, 0x1.3733340000000p-2f, 0x1.4599980000000p-2f, 0x1.5400000000000p-2f,
    0x1.6266660000000p-2f, 0x1.70cccc0000000p-2f, 0x1.7f33340000000p-2f, 0x1.8d99980000000p-2f,
    0x1.9c00000000000p-2f, 0x1.aa66660000000p-2f, 0x1.b8cccc0000000p-2f, 0x1.c733340000000p-2f,
    0x1.d599980000000p-2f, 0x1.e400000000000p-2f, 0x1.f266640000000p-2f, 0x1.0066660000000p-1f,
    0x1.0799980000000p-1f, 0x1.0ecccc0000000p-1f, 0x1.1600000000000p-1f, 0x1.1d33340000000p-1f,
    0x1.2466680000000p-1f, 0x1.2b999a0000000p-1f, 0x1.32cccc0000000p-1f, 0x1.3a00000000000p-1f,
    0x1.4133340000000p-1f, 0x1.4866680000000p-1f, 0x1.4f999a0000000p-1f, 0x1.56cccc0000000p-1f,
    0x1.5e00000000000p-1f, 0x1.6533340000000p-1f, 0x1.6c66680000000p-1f, 0x1.73999a0000000p-1f,
    0x1.7acccc0000000p-1f, 0x1.8200000000000p-1f, 0x1.8933340000000p-1f, 0x1.9066660000000p-1f,
    0x1.97999a0000000p-1f, 0x1.9ecccc0000000p-1f, 0x1.a600000000000p-1f, 0x1.ad33340000000p-1f,
    0x1.b466660000000p-1f, 0x1.bb999a0000000p-1f, 0x1.c2cccc0000000p-1f, 0x1.ca00000000000p-1f,
    0x1.d133340000000p-1f, 0x1.d866660000000p-1f, 0x1.df999a0000000p-1f, 0x1.e6cccc0000000p-1f,
    0x1.ee00000000000p-1f, 0x1.f533340000000p-1f, 0x1.fc66660000000p-1f, 0x1.0000000000000p+0f,
};
__device__ const float zk_qmap_unsigned[256] = {
    0x0.0p+0f, 0x1.5cf7540000000p-22f, 0x1.a013300000000p-21f, 0x1.1d36700000000p-19f,
    0x1.2599ec0000000p-18f, 0x1.bc98a20000000p-18f, 0x1.29cbaa0000000p-17f, 0x1.0624dc0000000p-16f,
    0x1.c2e3400000000p-16f, 0x1.3fd0d00000000p-15f, 0x1.9e30000000000p-15f, 0x1.fc8f340000000p-15f,
    0x1.2d77320000000p-14f, 0x1.5ca6c80000000p-14f, 0x1.8bd6620000000p-14f, 0x1.0cb2960000000p-13f,
    0x1.82a9940000000p-13f, 0x1.f8a0920000000p-13f, 0x1.374bc80000000p-12f, 0x1.7247440000000p-12f,
    0x1.ad42c60000000p-12f, 0x1.e83e440000000p-12f, 0x1.119ce20000000p-11f, 0x1.2f1aa00000000p-11f,
    0x1.4c98600000000p-11f, 0x1.6a16200000000p-11f, 0x1.8793de0000000p-11f, 0x1.a511a00000000p-11f,
    0x1.c28f5e0000000p-11f, 0x1.e00d1c0000000p-11f, 0x1.fd8adc0000000p-11f, 0x1.2b020c0000000p-10f,
    0x1.74bc6a0000000p-10f, 0x1.be76c80000000p-10f, 0x1.0418940000000p-9f, 0x1.28f5c20000000p-9f,
    0x1.4dd2f00000000p-9f, 0x1.72b0200000000p-9f, 0x1.978d4e0000000p-9f, 0x1.bc6a800000000p-9f,
    0x1.e147ae0000000p-9f, 0x1.03126e0000000p-8f, 0x1.1581040000000p-8f, 0x1.27ef9e0000000p-8f,
    0x1.3a5e340000000p-8f, 0x1.4ccccc0000000p-8f, 0x1.5f3b640000000p-8f, 0x1.71a9fa0000000p-8f,
    0x1.8418940000000p-8f, 0x1.96872a0000000p-8f, 0x1.a8f5c20000000p-8f, 0x1.bb645c0000000p-8f,
    0x1.cdd2f00000000p-8f, 0x1.e0418a0000000p-8f, 0x1.f2b01e0000000p-8f, 0x1.028f5c0000000p-7f,
    0x1.0bc6a80000000p-7f, 0x1.14fdf20000000p-7f, 0x1.1e35400000000p-7f, 0x1.276c8a0000000p-7f,
    0x1.30a3d60000000p-7f, 0x1.39db240000000p-7f, 0x1.43126e0000000p-7f, 0x1.5eb8540000000p-7f,
    0x1.8cccce0000000p-7f, 0x1.bae1460000000p-7f, 0x1.e8f5c40000000p-7f, 0x1.0b851e0000000p-6f,
    0x1.228f5e0000000p-6f, 0x1.39999a0000000p-6f, 0x1.50a3d60000000p-6f, 0x1.67ae160000000p-6f,
    0x1.7eb8520000000p-6f, 0x1.95c28e0000000p-6f, 0x1.acccce0000000p-6f, 0x1.c3d70e0000000p-6f,
    0x1.dae1460000000p-6f, 0x1.f1eb860000000p-6f, 0x1.047ae00000000p-5f, 0x1.1000000000000p-5f,
    0x1.1b851e0000000p-5f, 0x1.270a3e0000000p-5f, 0x1.328f5e0000000p-5f, 0x1.3e147a0000000p-5f,
    0x1.49999a0000000p-5f, 0x1.551eb80000000p-5f, 0x1.60a3d60000000p-5f, 0x1.6c28f60000000p-5f,
    0x1.77ae140000000p-5f, 0x1.8333340000000p-5f, 0x1.8eb8500000000p-5f, 0x1.9a3d700000000p-5f,
    0x1.a5c28e0000000p-5f, 0x1.b147ae0000000p-5f, 0x1.bcccce0000000p-5f, 0x1.c851ee0000000p-5f,
    0x1.d3d70e0000000p-5f, 0x1.df5c2a0000000p-5f, 0x1.eae1460000000p-5f, 0x1.f666660000000p-5f,
    0x1.00f5c40000000p-4f, 0x1.06b8540000000p-4f, 0x1.0c7ae20000000p-4f, 0x1.123d700000000p-4f,
    0x1.1800000000000p-4f, 0x1.1dc2900000000p-4f, 0x1.2385200000000p-4f, 0x1.2947ae0000000p-4f,
    0x1.2f0a3e0000000p-4f, 0x1.34ccce0000000p-4f, 0x1.3a8f5e0000000p-4f, 0x1.4051ec0000000p-4f,
    0x1.46147c0000000p-4f, 0x1.4bd70a0000000p-4f, 0x1.51999a0000000p-4f, 0x1.575c2a0000000p-4f,
    0x1.5d1eb80000000p-4f, 0x1.62e1480000000p-4f, 0x1.68a3d60000000p-4f, 0x1.6e66660000000p-4f,
    0x1.7428f60000000p-4f, 0x1.79eb860000000p-4f, 0x1.7fae160000000p-4f, 0x1.8570a40000000p-4f,
    0x1.8b33340000000p-4f, 0x1.90f5c40000000p-4f, 0x1.96b8520000000p-4f, 0x1.a800000000000p-4f,
    0x1.c4cccc0000000p-4f, 0x1.e1999a0000000p-4f, 0x1.fe66660000000p-4f, 0x1.0d99980000000p-3f,
    0x1.1c00000000000p-3f, 0x1.2a66680000000p-3f, 0x1.38cccc0000000p-3f, 0x1.4733340000000p-3f,
    0x1.5599980000000p-3f, 0x1.6400000000000p-3f, 0x1.7266680000000p-3f, 0x1.80cccc0000000p-3f,
    0x1.8f33340000000p-3f, 0x1.9d99980000000p-3f, 0x1.ac00000000000p-3f, 0x1.ba66680000000p-3f,
    0x1.c8cccc0000000p-3f, 0x1.d733340000000p-3f, 0x1.e599980000000p-3f, 0x1.f400000000000p-3f,
    0x1.0133320000000p-2f, 0x1.0866660000000p-2f, 0x1.0f999a0000000p-2f, 0x1.16cccc0000000p-2f,
    0x1.1e00000000000p-2f, 0x1.2533340000000p-2f, 0x1.2c66660000000p-2f, 0x1.3399980000000p-2f,
    0x1.3acccc0000000p-2f, 0x1.4200000000000p-2f, 0x1.4933340000000p-2f, 0x1.5066660000000p-2f,
    0x1.5799980000000p-2f, 0x1.5ecccc0000000p-2f, 0x1.6600000000000p-2f, 0x1.6d33340000000p-2f,
    0x1.7466660000000p-2f, 0x1.7b99980000000p-2f, 0x1.82cccc0000000p-2f, 0x1.8a00000000000p-2f,
    0x1.9133340000000p-2f, 0x1.9866660000000p-2f, 0x1.9f99980000000p-2f, 0x1.a6cccc0000000p-2f,
    0x1.ae00000000000p-2f, 0x1.b533340000000p-2f, 0x1.bc66660000000p-2f, 0x1.c399980000000p-2f,
    0x1.cacccc0000000p-2f, 0x1.d200000000000p-2f, 0x1.d933340000000p-2f, 0x1.e066660000000p-2f,
    0x1.e799980000000p-2f, 0x1.eecccc0000000p-2f, 0x1.f600000000000p-2f, 0x1.fd33320000000p-2f,
    0x1.0233340000000p-1f, 0x1.05cccc0000000p-1f, 0x1.0966660000000p-1f, 0x1.0d00000000000p-1f,
    0x1.1099980000000p-1f, 0x1.1433340000000p-1f, 0x1.17cccc0000000p-1f, 0x1.1b66680000000p-1f,
    0x1.1f00000000000p-1f, 0x1.22999a0000000p-1f, 0x1.2633340000000p-1f, 0x1.29cccc0000000p-1f,
    0x1.2d66680000000p-1f, 0x1.3100000000000p-1f, 0x1.34999a0000000p-1f, 0x1.3833340000000p-1f,
    0x1.3bcccc0000000p-1f, 0x1.3f66680000000p-1f, 0x1.4300000000000p-1f, 0x1.46999a0000000p-1f,
    0x1.4a33340000000p-1f, 0x1.4dcccc0000000p-1f, 0x1.5166680000000p-1f, 0x1.5500000000000p-1f,
    0x1.58999a0000000p-1f, 0x1.5c33340000000p-1f, 0x1.5fcccc0000000p-1f, 0x1.6366680000000p-1f,
    0x1.6700000000000p-1f, 0x1.6a999a0000000p-1f, 0x1.6e33340000000p-1f, 0x1.71cccc0000000p-1f,
    0x1.7566680000000p-1f, 0x1.7900000000000p-1f, 0x1.7c999a0000000p-1f, 0x1.8033340000000p-1f,
    0x1.83cccc0000000p-1f, 0x1.8766680000000p-1f, 0x1.8b00000000000p-1f, 0x1.8e99980000000p-1f,
    0x1.9233340000000p-1f, 0x1.95cccc0000000p-1f, 0x1.9966680000000p-1f, 0x1.9d00000000000p-1f,
    0x1.a099980000000p-1f, 0x1.a433340000000p-1f, 0x1.a7cccc0000000p-1f, 0x1.ab66680000000p-1f,
    0x1.af00000000000p-1f, 0x1.b299980000000p-1f, 0x1.b633340000000p-1f, 0x1.b9cccc0000000p-1f,
    0x1.bd66680000000p-1f, 0x1.c100000000000p-1f, 0x1.c499980000000p-1f, 0x1.c833340000000p-1f,
    0x1.cbcccc0000000p-1f, 0x1.cf66680000000p-1f, 0x1.d300000000000p-1f, 0x1.d699980000000p-1f,
    0x1.da33340000000p-1f, 0x1.ddcccc0000000p-1f, 0x1.e166680000000p-1f, 0x1.e500000000000p-1f,
    0x1.e899980000000p-1f, 0x1.ec33340000000p-1f, 0x1.efcccc0000000p-1f, 0x1.f366680000000p-1f,
    0x1.f700000000000p-1f, 0x1.fa99980000000p-1f, 0x1.fe33340000000p-1f, 0x1.0000000000000p+0f,
};

#define ZK_QBLOCK 2048
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
    float f = inv_loss_scale;
    if (norm) {
        float nr = norm[0] * inv_loss_scale;
        if (!isfinite(nr)) return;
        if (clip > 0.f && nr > 0.f) f *= fminf(1.f, clip / (nr + 1e-6f));
    }
    for (int i = threadIdx.x; i < 255; i += blockDim.x) {
        bound[0][i] = (float)(((double)zk_qmap_signed[i] + (double)zk_qmap_signed[i + 1]) / 2.0);
        bound[1][i] = (float)(((double)zk_qmap_unsigned[i] + (double)zk_qmap_unsigned[i + 1]) / 2.0);
    }
    __syncthreads();
    long long nb = (n + ZK_QBLOCK - 1) / ZK_QBLOCK;
    for (long long b = blockIdx.x; b < nb; b += gridDim.x) {
        unsigned char *mb = m + b * (ZK_QBLOCK + 4), *vb = v + b * (ZK_QBLOCK + 4);
        float am = *(const float *)(mb + ZK_QBLOCK), av = *(const float *)(vb + ZK_QBLOCK);
        float ms[ZK_QBLOCK / ZK_QTHREADS], vs[ZK_QBLOCK / ZK_QTHREADS];
        float mmax = 0.f, vmax = 0.f;
        for (int j = 0; j < ZK_QBLOCK / ZK_QTHREADS; j++) {
            int e = (int)threadIdx.x + j * ZK_QTHREADS;
            long long i = b * ZK_QBLOCK + e;
            ms[j] = vs[j] = 0.f;
            if (i >= n) continue;
            float g = zk_ld(grad + i) * f;
            float mi = beta1 * (zk_qmap_signed[mb[e]] * am) + (1.f - beta1) * g;
            float vi = beta2 * (zk_qmap_unsigned[vb[e]] * av) + (1.f - beta2) * g * g;
            ms[j] = mi;
            vs[j] = vi;
            mmax = fmaxf(mmax, fabsf(mi));
            vmax = fmaxf(vmax, fabsf(vi));
            float w = master ? master[i] : zk_ld(param + i);
            w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w);
            if (master) master[i] = w;
            zk_st(param + i, w);
        }
        mmax = zk_q8_max(mmax, red); /* every thread has read the old absmax before it is written */
        vmax = zk_q8_max(vmax, red);
        for (int j = 0; j < ZK_QBLOCK / ZK_QTHREADS; j++) {
            int e = (int)threadIdx.x + j * ZK_QTHREADS;
            bool in = b * ZK_QBLOCK + e < n;
            mb[e] = in && mmax > 0.f ? zk_q8_code(bound[0], ms[j] / mmax) : (unsigned char)127;
            vb[e] = in && vmax > 0.f ? zk_q8_code(bound[1], vs[j] / vmax) : (unsigned char)0;
        }
        if (threadIdx.x == 0) {
            *(float *)(mb + ZK_QBLOCK) = mmax;
            *(float *)(vb + ZK_QBLOCK) = vmax;
        }
        __syncthreads();
    }
}
