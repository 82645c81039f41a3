/* blas_core: whether OpenBLAS runs this processor's GEMM kernels (see blas_core.h). */
#include "blas_core.h"
#include <cblas.h>
#include <stddef.h>
#include <stdint.h>
#include <strings.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}
#endif

BlasCpu blas_cpu_detect(void) {
    BlasCpu c = {0};
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
    bool osxsave = cx & (1u << 27);
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6; /* the OS saves YMM; and opmask, ZMM */
    c.avx = ymm && (cx & (1u << 28));
    c.fma = ymm && (cx & (1u << 12));
    if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) {
        c.avx2 = ymm && (b & (1u << 5));
        c.avx512f = zmm && (b & (1u << 16));
        c.avx512dq = zmm && (b & (1u << 17));
        c.avx512bw = zmm && (b & (1u << 30));
        c.avx512vl = zmm && (b & (1u << 31));
    }
#endif
    return c;
}

const char *blas_core_better(const char *core, BlasCpu cpu) {
    /* the cores OpenBLAS's x86-64 DYNAMIC_ARCH falls back to for a model it does not know */
    static const char *const fallback[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "unknown"};
    bool fell_back = core == NULL;
    for (size_t i = 0; core && i < sizeof fallback / sizeof fallback[0]; i++)
        if (!strcasecmp(core, fallback[i])) fell_back = true;
    if (!fell_back) return NULL;
    /* SkylakeX's kernels also on processors with more (Cooperlake's add bf16 GEMMs zinf does not call) */
    if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq) return "SkylakeX";
    if (cpu.avx2 && cpu.fma) return "Haswell";
    if (cpu.avx) return "Sandybridge";
    return NULL;
}

const char *blas_core_name(void) { return openblas_get_corename(); }
