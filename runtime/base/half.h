/* half: conversions between fp32 and the 16-bit storage formats.
 *
 * bf16 (1 sign, 8 exponent, 7 mantissa bits: the top half of an fp32) and
 * IEEE binary16 "f16" (1, 5, 10). fp32 -> 16-bit rounds to nearest, ties to
 * even; values beyond the largest finite 16-bit value round to infinity
 * (f16: anything >= 65520); f16 subnormals are produced and read exactly;
 * infinities keep their sign; a NaN stays a NaN (quiet bit set, sign and top
 * payload bits kept). 16-bit -> fp32 is exact. Header-only: every executor and
 * kernel inlines them.
 */
#ifndef ZINF_HALF_H
#define ZINF_HALF_H
#include <stdint.h>
#include <string.h>

static inline uint32_t half_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float half_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float half_bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline uint16_t half_f32_to_bf16(float f) {
    uint32_t u = half_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; carries into the exponent (-> inf) */
    return (uint16_t)(u >> 16);
}

static inline float half_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return half_bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf, NaN */
    if (exp == 0) {
        if (mant == 0) return half_bits_f32(sign); /* signed zero */
        /* subnormal: mant * 2^-24, normalise */
        int e = -1;
        do {
            mant <<= 1;
            e++;
        } while (!(mant & 0x400u));
        return half_bits_f32(sign | (uint32_t)(112 - e) << 23 | (mant & 0x3ffu) << 13);
    }
    return half_bits_f32(sign | (exp + 112u) << 23 | mant << 13);
}

static inline uint16_t half_f32_to_f16(float f) {
    uint32_t u = half_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    int32_t exp = (int32_t)((u >> 23) & 0xffu);
    uint32_t mant = u & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0)); /* inf, NaN */
    int32_t e = exp - 127 + 15; /* f16 biased exponent */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow */
    if (e <= 0) {
        /* subnormal (or zero) result: value = m * 2^-24 */
        if (e < -10) return sign; /* below half the smallest subnormal: rounds to zero */
        uint32_t full = mant | 0x800000u;
        int shift = 14 - e;
        uint32_t m = full >> shift, rem = full & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (m & 1u))) m++; /* may carry into the smallest normal: right */
        return (uint16_t)(sign | m);
    }
    uint32_t h = (uint32_t)e << 10 | mant >> 13, rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carries into the exponent, up to inf */
    return (uint16_t)(sign | h);
}

#endif
