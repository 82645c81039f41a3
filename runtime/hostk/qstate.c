/* qstate: 8-bit blocks of bitsandbytes' dynamic maps (qstate.h). */
#include "qstate.h"
#include <math.h>
#include <pthread.h>
#include <string.h>
#include "../../stdlib/kernels/qmap.h"

/* The maps, a block's size and the midpoints are those of the GPU's Adam,
 * from the one header both read. */
const float qstate_map_signed[256] = ZQ_MAP_SIGNED;
const float qstate_map_unsigned[256] = ZQ_MAP_UNSIGNED;
_Static_assert(QSTATE_BLOCK == ZQ_BLOCK && QSTATE_BLOCK_BYTES == ZQ_BLOCK_BYTES, "qmap.h's blocks");

uint8_t qstate_zero_code(bool is_unsigned) { return is_unsigned ? ZQ_ZERO_UNSIGNED : ZQ_ZERO_SIGNED; }

void qstate_decode_block(bool is_unsigned, const uint8_t *blk, int n, float *y) {
    const float *map = is_unsigned ? qstate_map_unsigned : qstate_map_signed;
    float absmax;
    memcpy(&absmax, blk + QSTATE_BLOCK, sizeof absmax);
    for (int i = 0; i < n; i++) y[i] = zq_value(map, blk[i], absmax);
}

/* The midpoints between adjacent values of each map, worked out once, and
 * where the search for a value starts: floats ordered as unsigned keys
 * (the sign bit flipped, negative ones all bits flipped), the top 16 bits
 * of a value's key name its bucket, and start[k] counts the bounds of the
 * buckets below k, all of them below any value in bucket k. A bucket is
 * 2^-7 of its value wide, and holds at most steps[u] bounds (2 for the
 * unsigned map, whose values near 1 are 0.7% apart): the search then takes
 * that many steps over them, each without a branch. */
static float bounds[2][256]; /* [255]: +inf, where the search ends */
static uint8_t start[2][65536];
static int steps[2];
static pthread_once_t bounds_once = PTHREAD_ONCE_INIT;

static uint32_t order_key(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static void make_bounds(void) {
    for (int u = 0; u < 2; u++) {
        const float *map = u ? qstate_map_unsigned : qstate_map_signed;
        for (int i = 0; i < 255; i++) bounds[u][i] = zq_bound(map, i);
        bounds[u][255] = INFINITY;
        int j = 0;
        for (uint32_t k = 0; k < 65536; k++) {
            while (j < 255 && order_key(bounds[u][j]) >> 16 < k) j++;
            start[u][k] = (uint8_t)j;
        }
        steps[u] = 0;
        for (int i = 0; i < 255;) { /* the most bounds one bucket holds */
            int n = 1;
            while (i + n < 255 && order_key(bounds[u][i + n]) >> 16 == order_key(bounds[u][i]) >> 16) n++;
            if (n > steps[u]) steps[u] = n;
            i += n;
        }
    }
}

void qstate_encode_block(bool is_unsigned, const float *x, int n, uint8_t *blk) {
    pthread_once(&bounds_once, make_bounds);
    const float *bound = bounds[is_unsigned];
    const uint8_t *first = start[is_unsigned];
    const int nsteps = steps[is_unsigned];
    float absmax = 0.0f;
    for (int i = 0; i < n; i++) absmax = fmaxf(absmax, fabsf(x[i]));
    uint8_t zero = qstate_zero_code(is_unsigned);
    if (absmax == 0.0f) n = 0; /* a block of zeros: every code that of 0 */
    for (int i = 0; i < n; i++) {
        float v = x[i] / absmax;
        /* the code: how many bounds lie strictly below v */
        int lo = first[order_key(v) >> 16];
        for (int s = 0; s < nsteps; s++) lo += v > bound[lo];
        blk[i] = (uint8_t)lo;
    }
    memset(blk + n, zero, (size_t)(QSTATE_BLOCK - n));
    memcpy(blk + QSTATE_BLOCK, &absmax, sizeof absmax);
}
