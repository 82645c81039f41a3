/* rope: rotary position embedding, "rotate half" (Hugging Face LLaMA).
 * x [B, T, H*hd]; for head h, position t, pair j < hd/2, with
 * f = theta^(-2j/hd) and a = t*f, (x[j], x[j+hd/2]) is rotated by a.
 * Backward applies the inverse rotation (-a) to dy and accumulates into dx.
 * The angle and its sine and cosine are computed in fp64: t*f reaches
 * thousands of radians, where an fp32 angle is off by 1e-4. One thread per
 * pair; sizes are arguments. */
#include "common.cuh"

extern "C" __global__ void zk_rope(T *y, const T *x, long long B, long long Tn, long long H, long long hd,
                                   float theta, long long inverse, long long acc) {
    long long half = hd / 2, n = B * Tn * H * half;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long j = i % half, rest = i / half;  /* rest = (b*T + t)*H + h */
        long long t = (rest / H) % Tn;
        double f = pow((double)theta, -2.0 * (double)j / (double)hd);
        double sa, ca;
        sincos((double)t * f, &sa, &ca);
        float s = inverse ? -(float)sa : (float)sa, c = (float)ca;
        long long base = rest * hd;
        float x0 = zk_ld(x + base + j), x1 = zk_ld(x + base + j + half);
        zk_put(y + base + j, x0 * c - x1 * s, acc);
        zk_put(y + base + j + half, x0 * s + x1 * c, acc);
    }
}
