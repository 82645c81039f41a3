/* qstate: Adam's moments in 8 bits (train { optimizer = adam(state =
 * "8bit") }, docs/training.md), bitsandbytes' blockwise 8-bit optimizer
 * state (Dettmers et al., "8-bit Optimizers via Block-wise Quantization",
 * arXiv 2110.02861).
 *
 * A moment's elements, in the tensor's order, are cut into blocks of
 * QSTATE_BLOCK (2048) elements (a shard, a tile and an Adam sub-group
 * start at a multiple of it; the last block of a tensor may be short).
 * A block is QSTATE_BLOCK code bytes, then its absmax as an f32 (2052
 * bytes, a short block too; codes past its end are those of 0). An
 * element's value is map[code] * absmax, map one of bitsandbytes'
 * dynamic maps (functional.create_dynamic_map): the signed one
 * (DT_DYN8) for the momentum, the unsigned one (DT_UDYN8) for the
 * variance, 256 f32 values ascending.
 *
 * Encoding a block: absmax = the largest |x| (0 for a block of zeros,
 * whose every code is that of 0); each x / absmax (f32 division) takes
 * the code of the nearest map value, the intervals split at the midpoints
 * of adjacent values (worked out in double, rounded to f32), a value on a
 * midpoint taking the lower code, as quant.h's NF4 does. Nothing here
 * allocates. */
#ifndef ZINF_QSTATE_H
#define ZINF_QSTATE_H
#include <stdbool.h>
#include <stdint.h>

enum { QSTATE_BLOCK = 2048, QSTATE_BLOCK_BYTES = QSTATE_BLOCK + 4 };

/* bitsandbytes' dynamic maps: create_dynamic_map(signed=True) and
 * (signed=False), ascending. The signed map's 0 is code 127, the
 * unsigned map's code 0. */
extern const float qstate_map_signed[256], qstate_map_unsigned[256];

/* The code of 0 in a map (the padding of a short block). */
uint8_t qstate_zero_code(bool is_unsigned);
/* Decodes the first n (<= QSTATE_BLOCK) elements of block blk into y. */
void qstate_decode_block(bool is_unsigned, const uint8_t *blk, int n, float *y);
/* Encodes x[0, n) (n <= QSTATE_BLOCK) into block blk (QSTATE_BLOCK_BYTES). */
void qstate_encode_block(bool is_unsigned, const float *x, int n, uint8_t *blk);

#endif
