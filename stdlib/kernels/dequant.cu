/* dequant: a frozen weight stored quantized (train { quantize }, runtime/
 * hostk/quant.h) decoded into ZK_T before the GEMM that reads it, as the
 * host kernels decode it: blocks of 64 elements with their f32 absmax;
 * nf4: 32 bytes of two 4-bit codes each (the even element in the high
 * nibble), a value level[code] * absmax; int8: 64 signed bytes, a value
 * q * (absmax / 127). The f32 value is exactly the host's (the same f32
 * operations), then rounded to ZK_T (nearest even). */
#include "common.cuh"

/* bitsandbytes' NF4 levels: runtime/hostk/quant.c's quant_nf4_levels */
__device__ const float zk_nf4_levels[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

extern "C" __global__ void zk_dequant_nf4(T *out, const unsigned char *q, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const unsigned char *b = q + (i / 64) * 36;
        int e = (int)(i % 64);
        unsigned c = b[e / 2];
        float absmax = *(const float *)(b + 32);
        zk_st(out + i, zk_nf4_levels[e % 2 ? c & 15u : c >> 4] * absmax);
    }
}

extern "C" __global__ void zk_dequant_int8(T *out, const unsigned char *q, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const unsigned char *b = q + (i / 64) * 68;
        float s = *(const float *)(b + 64) / 127.0f;
        zk_st(out + i, (float)(signed char)b[i % 64] * s);
    }
}
