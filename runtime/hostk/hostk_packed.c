/* hostk_packed: add and mul on packed rows (several samples a row, hostk.h).
 *
 * A tensor broadcast over the batch, [T, ...] against [B, T, ...], is one
 * value per position of a row: a learned position embedding (embedding of
 * arange(T)) added to the tokens'. In a packed row position t of row b is
 * position t - seg[b*T + t] of its sample, so there such an operand is read
 * at that row, and its gradient gathered there:
 *     y[b,t,k] = big[b,t,k] op small[t - seg, k],
 *     dsmall[t - seg, k] += dy[b,t,k] (* big[b,t,k] for mul).
 * Rows of small past the longest sample are read by no one and get no
 * gradient, as when the samples run one by one. Other shapes are the
 * kernels of hostk_nn.c unchanged. */
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"

#define LD(t, i) hk_ld((t)->data, (t)->dtype, (i))
#define ST(t, i, v) hk_st((t)->data, (t)->dtype, (i), (v))
#define ACC(t, i, v) hk_st((t)->data, (t)->dtype, (i), hk_ld((t)->data, (t)->dtype, (i)) + (v))

/* Which operand is the positional one: a [B, T, ...] and b [T, ...] (or
 * the other way round) where B*T is the batch's tokens. */
static bool positional(const HkCall *c, const HkTensor **big, const HkTensor **small, bool *a_big) {
    if (!c->seg || !hk_present(c->a) || !hk_present(c->b)) return false;
    *a_big = c->a->rank >= c->b->rank;
    *big = *a_big ? c->a : c->b;
    *small = *a_big ? c->b : c->a;
    const HkTensor *g = *big, *s = *small;
    if (s->rank < 2 || g->rank != s->rank + 1 || g->dims[1] != c->seg_T || g->dims[0] * g->dims[1] != c->seg_tokens)
        return false;
    for (int i = 0; i < s->rank; i++)
        if (s->dims[i] != g->dims[i + 1]) return false;
    return hk_is_float(g) && hk_is_float(s);
}

bool hk_packed_binary(const HkCall *c) {
    const HkTensor *big, *small;
    bool a_big;
    return positional(c, &big, &small, &a_big);
}

int hk_packed_binary_fwd(const HkCall *c) {
    const HkTensor *big, *small;
    bool a_big, mul = c->prim == PRIM_MUL;
    if (!positional(c, &big, &small, &a_big)) return HK_ERR_SHAPE;
    HkTensor *y = &c->out[0];
    if (!hk_is_float(y) || hk_numel(y) != hk_numel(big)) return HK_ERR_SHAPE;
    int64_t T = c->seg_T, rows = c->seg_tokens, inner = hk_numel(small) / T;
    for (int64_t r = 0; r < rows; r++)
        if (c->seg[r] < 0 || c->seg[r] > r % T) return HK_ERR_ARG;
#pragma omp parallel for if (rows * inner > HK_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t p = r % T - c->seg[r];
        for (int64_t k = 0; k < inner; k++) {
            float x = LD(big, r * inner + k), s = LD(small, p * inner + k);
            ST(y, r * inner + k, mul ? x * s : x + s);
        }
    }
    return HK_OK;
}

int hk_packed_binary_bwd(const HkCall *c) {
    const HkTensor *big, *small;
    bool a_big, mul = c->prim == PRIM_MUL;
    if (!positional(c, &big, &small, &a_big)) return HK_ERR_SHAPE;
    HkTensor *dbig = a_big ? c->da : c->db, *dsmall = a_big ? c->db : c->da;
    const HkTensor *dy = c->dy;
    if (!hk_present(dy) || hk_numel(dy) != hk_numel(big)) return HK_ERR_SHAPE;
    int64_t T = c->seg_T, rows = c->seg_tokens, inner = hk_numel(small) / T;
    for (int64_t r = 0; r < rows; r++)
        if (c->seg[r] < 0 || c->seg[r] > r % T) return HK_ERR_ARG;
    if (hk_present(dbig))
#pragma omp parallel for if (rows * inner > HK_PAR_MIN) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            int64_t p = r % T - c->seg[r];
            for (int64_t k = 0; k < inner; k++)
                ACC(dbig, r * inner + k, LD(dy, r * inner + k) * (mul ? LD(small, p * inner + k) : 1.0f));
        }
    if (hk_present(dsmall))
        /* rows in order into each position: the same sums whatever the threads */
#pragma omp parallel for if (rows * inner > HK_PAR_MIN) schedule(static)
        for (int64_t k = 0; k < inner; k++)
            for (int64_t r = 0; r < rows; r++) {
                int64_t p = r % T - c->seg[r];
                ACC(dsmall, p * inner + k, LD(dy, r * inner + k) * (mul ? LD(big, r * inner + k) : 1.0f));
            }
    return HK_OK;
}
