/* adam: AdamW on the GPU, fp32 master/m/v, parameter in ZK_T.
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
