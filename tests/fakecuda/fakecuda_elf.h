/* fakecuda_elf: what the fake CUDA driver and its unit builder agree on.
 * cuModuleLoadData gets a bare pointer, so the size of a cubin comes from
 * its ELF headers: the furthest byte any section, program header or header
 * table reaches. The unit built for a cubin is found by the FNV-1a 64 hash
 * of exactly those bytes (the plan's own checksum function), written as
 * %016llx. Header-only so both sides compile the same code. */
#ifndef ZINF_FAKECUDA_ELF_H
#define ZINF_FAKECUDA_ELF_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t fk_rd(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i]; /* ELF64 little-endian, as every cubin */
    return v;
}

/* The image's size in bytes, or 0 when it is not a little-endian ELF64 file
 * (PTX text, garbage). Offsets above 4 GiB count as garbage too. */
static inline size_t fk_elf_size(const void *image) {
    const unsigned char *p = image;
    if (!p || memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2 || p[5] != 1) return 0;
    uint64_t phoff = fk_rd(p + 0x20, 8), shoff = fk_rd(p + 0x28, 8);
    uint64_t phes = fk_rd(p + 0x36, 2), phn = fk_rd(p + 0x38, 2), shes = fk_rd(p + 0x3a, 2), shn = fk_rd(p + 0x3c, 2);
    const uint64_t lim = (uint64_t)1 << 32;
    if (phoff > lim || shoff > lim || (phn && phes < 0x38) || (shn && shes < 0x40)) return 0;
    uint64_t end = 0x40;
    if (phn && phoff + phn * phes > end) end = phoff + phn * phes;
    if (shn && shoff + shn * shes > end) end = shoff + shn * shes;
    for (uint64_t i = 0; i < shn; i++) {
        const unsigned char *s = p + shoff + i * shes;
        uint64_t type = fk_rd(s + 4, 4), off = fk_rd(s + 0x18, 8), size = fk_rd(s + 0x20, 8);
        if (type == 8 /* SHT_NOBITS: no bytes in the file */ || type == 0) continue;
        if (off > lim || size > lim) return 0;
        if (off + size > end) end = off + size;
    }
    for (uint64_t i = 0; i < phn; i++) {
        const unsigned char *h = p + phoff + i * phes;
        uint64_t off = fk_rd(h + 8, 8), size = fk_rd(h + 0x20, 8);
        if (off > lim || size > lim) return 0;
        if (off + size > end) end = off + size;
    }
    return (size_t)end;
}

static inline uint64_t fk_fnv1a64(const void *data, size_t n) {
    const unsigned char *b = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
