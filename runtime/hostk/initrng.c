#include "initrng.h"
#include <math.h>

#define INIT_GAMMA 0x9E3779B97F4A7C15ull
#define INIT_TWO_PI 6.283185307179586 /* the double nearest 2 pi */

uint64_t init_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t init_fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t init_key(uint64_t seed, const char *name) { return init_mix64(seed ^ init_fnv1a64(name)); }

uint64_t init_bits(uint64_t key, uint64_t c) { return init_mix64(key + (c + 1) * INIT_GAMMA); }

double init_uniform01(uint64_t key, uint64_t c) { return (double)(init_bits(key, c) >> 11) * 0x1.0p-53; }

double init_normal(uint64_t key, int64_t i) {
    uint64_t c = (uint64_t)i * 2;
    double u1 = 1.0 - init_uniform01(key, c); /* (0, 1]: the log is finite */
    double u2 = init_uniform01(key, c + 1);
    return sqrt(-2.0 * log(u1)) * cos(INIT_TWO_PI * u2);
}

void init_fill_f32(float *dst, int64_t first, int64_t n, uint64_t seed, const char *name, InitKind kind,
                   double std) {
    if (n <= 0) return;
    uint64_t key = init_key(seed, name);
    switch (kind) {
    case INIT_NORMAL:
#pragma omp parallel for if (n > 65536) schedule(static)
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(std * init_normal(key, first + i));
        break;
    case INIT_UNIFORM:
#pragma omp parallel for if (n > 65536) schedule(static)
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)(std * (2.0 * init_uniform01(key, (uint64_t)(first + i)) - 1.0));
        break;
    case INIT_ONES:
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
        break;
    case INIT_ZEROS:
    case INIT_NONE:
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = 0.0f;
        break;
    }
}
