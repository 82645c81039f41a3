/* hostk_quant: a weight stored quantized (DT_NF4, DT_INT8: runtime/hostk/
 * quant.h) read into f32 for a GEMM, block by block on the rank's team;
 * the GEMM kernels call it where they convert any operand that is not f32
 * (hk_load_f32), into the workspace the plan sizes for that copy. */
#include "hostk.h"
#include "hostk_impl.h"
#include "hostk_threads.h"
#include "quant.h"

/* blocks of 64 per parallel unit */
enum { DEQUANT_UNIT_BLOCKS = 256 };

typedef struct DequantJob {
    QuantKind k;
    const uint8_t *q;
    float *y;
    int64_t n;
} DequantJob;

static void dequant_unit(void *ctx, int64_t u) {
    const DequantJob *j = ctx;
    int64_t e0 = u * DEQUANT_UNIT_BLOCKS * QUANT_BLOCK, len = j->n - e0;
    if (len > DEQUANT_UNIT_BLOCKS * QUANT_BLOCK) len = DEQUANT_UNIT_BLOCKS * QUANT_BLOCK;
    quant_decode(j->k, j->q + (size_t)(u * DEQUANT_UNIT_BLOCKS) * quant_block_bytes(j->k), len, j->y + e0);
}

void hk_dequant_f32(const HkTensor *t, float *dst) {
    int64_t n = hk_numel(t);
    DequantJob j = {t->dtype == DT_NF4 ? QUANT_NF4 : QUANT_INT8, t->data, dst, n};
    int64_t units = (n + DEQUANT_UNIT_BLOCKS * QUANT_BLOCK - 1) / (DEQUANT_UNIT_BLOCKS * QUANT_BLOCK);
    hk_parallel(hk_team((double)n * 1.0), units, dequant_unit, &j);
}
