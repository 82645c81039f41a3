/* hostk_vec: the three instruction-set tables of hostk_vec.h (one source,
 * runtime/hostk/hostk_simd.h, compiled per target) and the choice among them. */
#include "hostk_vec.h"
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "half.h"

#define HK_SIMD 512
#include "hostk_simd.h"
#undef HK_SIMD
#define HK_SIMD 256
#include "hostk_simd.h"
#undef HK_SIMD
#define HK_SIMD 1
#include "hostk_simd.h"
#undef HK_SIMD

/* CPUID.1:ECX bit 29 (clang has no "f16c" for __builtin_cpu_supports). */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c >> 29) & 1u;
}

bool hk_isa_supported(HkIsa isa) {
    switch (isa) {
    case HK_ISA_AUTO:
    case HK_ISA_SCALAR: return true;
    case HK_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case HK_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               has_f16c();
    }
    return false;
}

const char *hk_isa_name(HkIsa isa) {
    switch (isa) {
    case HK_ISA_AUTO: return "auto";
    case HK_ISA_SCALAR: return "scalar";
    case HK_ISA_AVX2: return "avx2";
    case HK_ISA_AVX512: return "avx512";
    }
    return "?";
}

static HkIsa best(void) {
    if (hk_isa_supported(HK_ISA_AVX512)) return HK_ISA_AVX512;
    if (hk_isa_supported(HK_ISA_AVX2)) return HK_ISA_AVX2;
    return HK_ISA_SCALAR;
}

int hk_isa_parse(const char *name, HkIsa *out) {
    static const HkIsa all[] = {HK_ISA_AUTO, HK_ISA_SCALAR, HK_ISA_AVX2, HK_ISA_AVX512};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (name && !strcmp(name, hk_isa_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

static atomic_int chosen; /* 0: not decided yet */

HkIsa hk_isa(void) {
    int c = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (c) return (HkIsa)c;
    HkIsa d = best();
    int expect = 0;
    atomic_compare_exchange_strong(&chosen, &expect, (int)d);
    return (HkIsa)atomic_load(&chosen);
}

int hk_isa_set(HkIsa isa) {
    if (!hk_isa_supported(isa)) return -1;
    atomic_store(&chosen, (int)(isa == HK_ISA_AUTO ? best() : isa));
    return 0;
}

const HkVec *hk_vec_for(HkIsa isa) {
    if (isa == HK_ISA_AUTO) isa = hk_isa();
    if (!hk_isa_supported(isa)) return NULL;
    switch (isa) {
    case HK_ISA_AVX512: return &table_avx512;
    case HK_ISA_AVX2: return &table_avx2;
    default: return &table_scalar;
    }
}

/* hk_isa() only ever holds a supported path: no check here (every kernel calls this) */
const HkVec *hk_vec(void) {
    switch (hk_isa()) {
    case HK_ISA_AVX512: return &table_avx512;
    case HK_ISA_AVX2: return &table_avx2;
    default: return &table_scalar;
    }
}
