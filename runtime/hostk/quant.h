/* quant: the quantized storage forms of frozen weights (docs/training.md,
 * "Quantized frozen weights"), their encoder and decoder.
 *
 * Both cut a tensor's elements, in row-major order, into blocks of
 * QUANT_BLOCK (64) and keep one scale per block, the block's absmax (the
 * largest |x|) as an f32:
 *
 *   nf4   each element is a 4-bit index into the 16 NormalFloat levels of
 *         QLoRA (Dettmers et al., arXiv 2305.14314), bitsandbytes' NF4
 *         codebook: the level nearest x / absmax, the value is
 *         level * absmax. Two elements a byte, the even one (2i) in the high
 *         nibble, as bitsandbytes packs them. 36 bytes a block: 32 bytes of
 *         codes, then the absmax.
 *   int8  each element is rint(x * (127 / absmax)), a signed byte; the value
 *         is q * (absmax / 127). 68 bytes a block: 64 codes, then the absmax.
 *
 * The quantizer follows bitsandbytes' (its blockwise CUDA and CPU
 * quantizers): x is multiplied by the f32 reciprocal of absmax, and the
 * code is the level whose interval holds the product, the intervals split
 * at the midpoints of adjacent levels (a product on a midpoint takes the
 * lower level). A block of zeros has absmax 0 and every code the level 0.
 * A tensor whose element count is not a multiple of 64 ends in a short
 * block padded with zero codes.
 *
 * The layout keeps a block's scale beside its codes, so that a range of
 * whole blocks (a tile, a rank's shard, an NVMe read) is one contiguous
 * range of bytes: blocks [b0, b1) lie at bytes [b0, b1) * quant_block_bytes.
 * Nothing here allocates; every function takes its output. */
#ifndef ZINF_QUANT_H
#define ZINF_QUANT_H
#include <stddef.h>
#include <stdint.h>

enum { QUANT_BLOCK = 64 };

typedef enum QuantKind { QUANT_NONE = 0, QUANT_NF4, QUANT_INT8, QUANT_NKINDS } QuantKind;

/* "none", "nf4", "int8" */
const char *quant_name(QuantKind k);
/* The kind named s (n bytes), or -1 when it names none. */
int quant_parse(const char *s, size_t n);

/* bitsandbytes' NF4 levels, ascending: index 7 is 0, index 15 is 1. */
extern const float quant_nf4_levels[16];

/* Bytes of one block (36, 68; 0 for QUANT_NONE) and of n elements. */
size_t quant_block_bytes(QuantKind k);
size_t quant_bytes(QuantKind k, int64_t n);

/* Encodes x[0, n) into out (quant_bytes(k, n) bytes). */
void quant_encode(QuantKind k, const float *x, int64_t n, uint8_t *out);
/* Decodes the n elements that start a run of whole blocks at in (the bytes
 * of blocks b, b+1, ... of a tensor) into y[0, n). */
void quant_decode(QuantKind k, const uint8_t *in, int64_t n, float *y);

#endif
