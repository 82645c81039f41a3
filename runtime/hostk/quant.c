/* quant: NF4 and int8 blocks of 64 with an absmax scale (quant.h). */
#include "quant.h"
#include <math.h>
#include <string.h>

/* bitsandbytes' NF4 codebook (QLoRA, appendix E: the quantiles of N(0, 1)
 * normalised to [-1, 1], with an exact 0). */
const float quant_nf4_levels[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

static const char *const kind_names[QUANT_NKINDS] = {"none", "nf4", "int8"};

const char *quant_name(QuantKind k) { return (unsigned)k < QUANT_NKINDS ? kind_names[k] : "?"; }

int quant_parse(const char *s, size_t n) {
    for (int k = 0; k < QUANT_NKINDS; k++)
        if (strlen(kind_names[k]) == n && !memcmp(kind_names[k], s, n)) return k;
    return -1;
}

size_t quant_block_bytes(QuantKind k) {
    switch (k) {
    case QUANT_NF4: return QUANT_BLOCK / 2 + sizeof(float);
    case QUANT_INT8: return QUANT_BLOCK + sizeof(float);
    default: return 0;
    }
}

size_t quant_bytes(QuantKind k, int64_t n) {
    return n <= 0 ? 0 : (size_t)((n + QUANT_BLOCK - 1) / QUANT_BLOCK) * quant_block_bytes(k);
}

/* The boundaries between adjacent levels: the midpoints, worked out in
 * double from the f32 levels and rounded to f32, as bitsandbytes writes
 * its decision tree's constants. */
static void nf4_bounds(float b[15]) {
    for (int i = 0; i < 15; i++) b[i] = (float)(((double)quant_nf4_levels[i] + (double)quant_nf4_levels[i + 1]) / 2.0);
}

/* The code of v = x / absmax: how many boundaries lie strictly below v. */
static uint8_t nf4_code(const float b[15], float v) {
    int lo = 0, hi = 15; /* the answer is in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v > b[mid]) lo = mid + 1;
        else hi = mid;
    }
    return (uint8_t)lo;
}

static float block_absmax(const float *x, int64_t len) {
    float m = 0.0f;
    for (int64_t i = 0; i < len; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static void encode_nf4(const float b[15], const float *x, int64_t len, uint8_t *out) {
    float absmax = block_absmax(x, len);
    float r = absmax > 0.0f ? 1.0f / absmax : 0.0f;
    for (int i = 0; i < QUANT_BLOCK / 2; i++) {
        int64_t e = 2 * (int64_t)i;
        uint8_t hi = nf4_code(b, e < len ? x[e] * r : 0.0f), lo = nf4_code(b, e + 1 < len ? x[e + 1] * r : 0.0f);
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(out + QUANT_BLOCK / 2, &absmax, sizeof absmax);
}

static void encode_int8(const float *x, int64_t len, uint8_t *out) {
    float absmax = block_absmax(x, len);
    float s = absmax > 0.0f ? 127.0f / absmax : 0.0f;
    for (int i = 0; i < QUANT_BLOCK; i++) {
        float q = i < len ? rintf(x[i] * s) : 0.0f;
        q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
        out[i] = (uint8_t)(int8_t)q;
    }
    memcpy(out + QUANT_BLOCK, &absmax, sizeof absmax);
}

void quant_encode(QuantKind k, const float *x, int64_t n, uint8_t *out) {
    size_t bb = quant_block_bytes(k);
    float b[15];
    nf4_bounds(b);
    for (int64_t at = 0, blk = 0; at < n; at += QUANT_BLOCK, blk++) {
        int64_t len = n - at < QUANT_BLOCK ? n - at : QUANT_BLOCK;
        if (k == QUANT_NF4) encode_nf4(b, x + at, len, out + (size_t)blk * bb);
        else if (k == QUANT_INT8) encode_int8(x + at, len, out + (size_t)blk * bb);
    }
}

void quant_decode(QuantKind k, const uint8_t *in, int64_t n, float *y) {
    size_t bb = quant_block_bytes(k);
    for (int64_t at = 0, blk = 0; at < n; at += QUANT_BLOCK, blk++) {
        const uint8_t *q = in + (size_t)blk * bb;
        int64_t len = n - at < QUANT_BLOCK ? n - at : QUANT_BLOCK;
        float absmax;
        if (k == QUANT_NF4) {
            memcpy(&absmax, q + QUANT_BLOCK / 2, sizeof absmax);
            for (int64_t i = 0; i < len; i++) {
                uint8_t c = q[i / 2];
                y[at + i] = quant_nf4_levels[i % 2 ? c & 15 : c >> 4] * absmax;
            }
        } else if (k == QUANT_INT8) {
            memcpy(&absmax, q + QUANT_BLOCK, sizeof absmax);
            float s = absmax / 127.0f;
            for (int64_t i = 0; i < len; i++) y[at + i] = (float)(int8_t)q[i] * s;
        }
    }
}
