/* emu.h: lets a kernel unit (stdlib/kernels, as cuda_gen specialises it)
 * compile as C++ for the host emulator of tests/gpu/emu.c:
 *   g++ -DZK_EMU -include tests/gpu/emu.h -x c++ unit.cu
 * Blocks run one after another; the threads of a block are coroutines that
 * switch at __syncthreads and at every warp-collective (shuffles, mma.sync),
 * so shared memory is a plain static array. mma.sync m16n8k16 is computed
 * from the fragment layout of the PTX ISA, independently of how the kernel
 * loads its fragments. Checks logic, not speed or timing. */
#include <math.h>
#include <string.h>
#include <stdint.h>
#include <cmath>
using std::isfinite;

extern "C" {
typedef struct emu_dim3 { unsigned x, y, z; } emu_dim3;
extern emu_dim3 emu_blockIdx, emu_blockDim, emu_gridDim;
const emu_dim3 *emu_threadIdx(void);
void emu_syncthreads(void);
float emu_shfl(float v, int arg, int xor_mode);
void emu_mma_m16n8k16(float *c, const unsigned *a, const unsigned *b, int f16);
float emu_f16_to_f32(unsigned short h);
unsigned short emu_f32_to_f16(float f);
unsigned short emu_f32_to_bf16(float f);
}

#define threadIdx (*emu_threadIdx())
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

static inline void __syncthreads(void) { emu_syncthreads(); }
static inline float __shfl_xor_sync(unsigned, float v, int o) { return emu_shfl(v, o, 1); }
static inline float __shfl_sync(unsigned, float v, int src) { return emu_shfl(v, src, 0); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
static inline int atomicCAS(int *p, int c, int v) { int o = *p; if (o == c) *p = v; return o; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
