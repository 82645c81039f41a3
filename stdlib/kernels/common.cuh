/* common.cuh: what every kernel family shares. cuda_gen pastes this file in
 * place of the `#include "common.cuh"` line of a family, after the
 * specialisation #defines, so each compiled unit is one self-contained text
 * (no toolkit headers: NVRTC compiles it with no include path).
 *
 * Storage dtypes are distinct structs so overloads pick the conversion:
 *   float      f32
 *   zk_bf16    bf16, the high 16 bits of an fp32 (round to nearest even)
 *   zk_f16     IEEE half (cvt.rn.f16.f32)
 * Arithmetic is fp32 whatever the storage (docs/primitives.md).
 * ZK_T, defined by cuda_gen, is the storage type of the unit. */
struct zk_bf16 { unsigned short x; };
struct zk_f16 { unsigned short x; };

#define ZK_INF __int_as_float(0x7f800000)
#define ZK_LOG2E 1.4426950408889634f
#define ZK_LN2 0.6931471805599453f

__device__ __forceinline__ float zk_ld(const float *p) { return *p; }
__device__ __forceinline__ float zk_ld(const zk_bf16 *p) { return __uint_as_float(((unsigned)p->x) << 16); }
#ifndef ZK_EMU
__device__ __forceinline__ float zk_ld(const zk_f16 *p) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p->x));
    return f;
}
#else /* the host emulator of tests/gpu (emu.h supplies the conversions) */
__device__ __forceinline__ float zk_ld(const zk_f16 *p) { return emu_f16_to_f32(p->x); }
#endif
__device__ __forceinline__ void zk_st(float *p, float v) { *p = v; }
#ifndef ZK_EMU
__device__ __forceinline__ void zk_st(zk_bf16 *p, float v) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    p->x = h;
}
__device__ __forceinline__ void zk_st(zk_f16 *p, float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    p->x = h;
}
#else
__device__ __forceinline__ void zk_st(zk_bf16 *p, float v) { p->x = emu_f32_to_bf16(v); }
__device__ __forceinline__ void zk_st(zk_f16 *p, float v) { p->x = emu_f32_to_f16(v); }
#endif
/* y = v, or y += v when acc (gradients accumulate into zeroed buffers). */
template <typename T> __device__ __forceinline__ void zk_put(T *p, float v, long long acc) {
    zk_st(p, acc ? zk_ld(p) + v : v);
}

__device__ __forceinline__ float zk_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float zk_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. scratch: 32 floats of shared memory. */
__device__ __forceinline__ float zk_block_sum(float v, float *scratch) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = zk_warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    float t = lane < nw ? scratch[lane] : 0.f;
    return zk_warp_sum(t);
}

typedef ZK_T T;
