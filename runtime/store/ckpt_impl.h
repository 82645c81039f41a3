/* ckpt_impl: what ckpt.c (writing, scanning, reading one's own shards) and
 * ckpt_reshard.c (reading another world's) share: the shard files'
 * checksum and little-endian fields. Private to runtime/store/ckpt*.c. */
#ifndef ZINF_CKPT_IMPL_H
#define ZINF_CKPT_IMPL_H
#include <stddef.h>
#include <stdint.h>

/* FNV-1a 64, extended by n more bytes (start from CKPT_FNV_INIT). */
static inline uint64_t ckpt_fnv_update(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}
#define CKPT_FNV_INIT 14695981039346656037ull

/* An n-byte little-endian unsigned field. */
static inline uint64_t ckpt_get_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
#endif
