/* initrng: counter-based parameter initialisation.
 *
 * Element i of parameter `name` under seed `seed` is a pure function of
 * (seed, name, i): a tensor's values never depend on how it is partitioned,
 * tiled, or which rank fills which range. The exact function (constants and
 * formulas, so that the CUDA initialiser reproduces it) is specified in
 * docs/host-kernels.md, "Parameter initialisation":
 *
 *   key      = splitmix64_mix(seed ^ fnv1a64(name))
 *   bits(c)  = splitmix64_mix(key + (c + 1) * 0x9E3779B97F4A7C15)   (mod 2^64)
 *   u(c)     = (bits(c) >> 11) * 2^-53                             in [0, 1)
 *   uniform  : x_i = std * (2 u(i) - 1)                            (std = half-width)
 *   normal   : x_i = std * (sqrt(-2 ln(1 - u(2i))) * cos(2 pi u(2i+1)))
 *   zeros, ones, none (= zeros) : constants
 *
 * computed in double and rounded to fp32 once.
 */
#ifndef ZINF_INITRNG_H
#define ZINF_INITRNG_H
#include <stdint.h>
#include "vocab.h"

/* The SplitMix64 output function (Steele, Lea, Flood 2014; Vigna's constants). */
uint64_t init_mix64(uint64_t x);
/* 64-bit FNV-1a of a NUL-terminated string (NULL hashes as ""). */
uint64_t init_fnv1a64(const char *s);
/* The stream key of one tensor. */
uint64_t init_key(uint64_t seed, const char *name);
/* The c-th 64-bit draw of a stream, and as a double in [0, 1). */
uint64_t init_bits(uint64_t key, uint64_t c);
double init_uniform01(uint64_t key, uint64_t c);
/* Element i of a standard normal stream (Box-Muller, cosine branch). */
double init_normal(uint64_t key, int64_t i);

/* Fills dst[0, n) with elements [first, first + n) of the named tensor. */
void init_fill_f32(float *dst, int64_t first, int64_t n, uint64_t seed, const char *name, InitKind kind,
                   double std);

#endif
