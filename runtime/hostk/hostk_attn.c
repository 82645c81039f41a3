/* hostk_attn: causal attention, forward and backward, in tiles.
 *
 * Queries and keys are cut into tiles of t rows (t = 64 for a head of 64,
 * fewer for larger heads, so that a tile of a head or of scores is at most
 * 4096 floats): a thread holds one tile of the T x T scores at a time,
 * never more, in a few tiles of stack (about 150 KiB). The tile products go
 * through the instruction-set table's register-blocked GEMM (hostk_vec.h),
 * the softmax through its vector exp.
 *
 * Forward, per (batch, head, query tile), key tiles up to the diagonal, an
 * online softmax (running max m and sum l in double):
 *     S = Q K^T,  m' = max(m, scale max S),  P = exp(scale S - m'),
 *     l = l e^(m - m') + sum P,  O = O e^(m - m') + P V;   O /= l,
 *     lse = m + log l.
 * The workspace keeps lse and O (f32) for the backward.
 * Backward, per (batch, kv head): for each key tile j, for each query head
 * of the group and each query tile i at or after j:
 *     P = exp(scale S - lse),  dP = dO V^T,  dS = P (dP - D) scale with
 *     D = rowsum(dO o O) (computed first, in double),
 *     dV_j += P^T dO,  dK_j += dS^T Q,  dQ_i += dS K_j;
 * dK_j and dV_j are complete after the group and are added to dk, dv once;
 * dQ accumulates into dq (f32) or an f32 copy in the workspace (q not f32)
 * that is added to dq at the end. Every tile is computed the same way
 * whatever the thread count.
 *
 * A sliding window of W positions (W > 0) lets query t see keys
 * [max(0, t - W + 1), t] (of its sample, for packed rows): key tiles wholly
 * before the window are never visited, so the work is T min(W, T) rather
 * than T^2 / 2; the scores of a tile that straddles the window's first key
 * are set to -inf below it. The forward then visits its key tiles from the
 * diagonal down (the diagonal holds every query's own key, so the running
 * max is finite before a masked column comes); without a window the order
 * stays upwards, as it always was. */
#include <math.h>
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"
#include "hostk_threads.h"
#include "hostk_vec.h"

#define TILE_FLOATS 4096

/* Bytes of the packed rows' sample runs (four int64 a position). */
static size_t hk_attention_packed_bytes(const HkTensor *q) {
    return hk_align((size_t)(q->dims[0] * q->dims[1]) * 4 * sizeof(int64_t));
}

typedef struct AttnShape {
    int64_t B, T, H, KV, hd, qc, kc; /* qc = H*hd, kc = KV*hd: row lengths */
    int64_t tile;                    /* rows of a query or key tile */
    int64_t window;                  /* keys a query sees, itself included (0: all before it) */
    float softcap;                   /* > 0: scores s become softcap tanh(s / softcap) before the softmax */
} AttnShape;

static bool same_shape(const HkTensor *a, const HkTensor *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

static int check_float(const HkTensor *t) {
    if (!hk_present(t)) return HK_ERR_ARG;
    return hk_is_float(t) ? HK_OK : HK_ERR_DTYPE;
}

static int check_grad(const HkTensor *g, const HkTensor *t) {
    if (!hk_present(g)) return HK_OK;
    if (!hk_is_float(g)) return HK_ERR_DTYPE;
    return same_shape(g, t) ? HK_OK : HK_ERR_SHAPE;
}

static int64_t tile_of(int64_t hd) {
    int64_t t = TILE_FLOATS / (hd > 0 ? hd : 1);
    if (t > 64) t = 64;
    if (t >= 16) t -= t % 16;
    return t < 1 ? 1 : t;
}

static int attn_check(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *y, int64_t heads,
                      int64_t kv_heads, AttnShape *s) {
    int rc;
    if ((rc = check_float(q)) || (rc = check_float(k)) || (rc = check_float(v)) || (rc = check_float(y))) return rc;
    if (q->rank != 3 || k->rank != 3 || !same_shape(k, v) || !same_shape(q, y)) return HK_ERR_SHAPE;
    if (heads <= 0 || kv_heads <= 0 || heads % kv_heads || q->dims[2] % heads) return HK_ERR_ATTR;
    s->B = q->dims[0];
    s->T = q->dims[1];
    s->H = heads;
    s->KV = kv_heads;
    s->hd = q->dims[2] / heads;
    s->softcap = 0;
    s->qc = q->dims[2];
    s->kc = kv_heads * s->hd;
    if (s->hd > TILE_FLOATS) return HK_ERR_ATTR; /* a head wider than a tile */
    s->tile = tile_of(s->hd);
    s->window = 0;
    if (k->dims[0] != s->B || k->dims[1] != s->T || k->dims[2] != s->kc) return HK_ERR_SHAPE;
    return HK_OK;
}

/* lse [B,H,T], O [B,H,T,hd], D [B,H,T], and dQ [B,H,T,hd] when q is not f32;
 * then room for the samples of packed rows (hk_attention_fwd_packed). */
size_t hk_attention_workspace_bytes(const HkTensor *q, int64_t heads) {
    if (!q || q->rank != 3 || heads <= 0) return 0;
    size_t rows = (size_t)(q->dims[0] * heads * q->dims[1]), n = (size_t)hk_numel(q);
    size_t b = 2 * hk_align(rows * 4) + hk_align(n * 4);
    if (q->dtype != DT_F32) b += hk_align(n * 4);
    return b + hk_attention_packed_bytes(q); /* the samples of packed rows, last (below) */
}

typedef struct AttnWs {
    float *lse, *O, *D, *dQ;
} AttnWs;

static AttnWs attn_ws(void *ws, const HkTensor *q, const AttnShape *s) {
    HkWs w = {ws, 0};
    AttnWs a;
    a.lse = hk_ws_take(&w, s->B * s->H * s->T);
    a.O = hk_ws_take(&w, s->B * s->H * s->T * s->hd);
    a.D = hk_ws_take(&w, s->B * s->H * s->T);
    a.dQ = q->dtype != DT_F32 ? hk_ws_take(&w, s->B * s->H * s->T * s->hd) : NULL;
    return a;
}

/* element offset of (b, t, head h) in a tensor of row length c */
static int64_t at(const AttnShape *s, int64_t b, int64_t t, int64_t h, int64_t c) { return (b * s->T + t) * c + h * s->hd; }
static const char *ptr(const HkTensor *x, int64_t off) { return (const char *)x->data + off * (int64_t)hk_dtype_size(x->dtype); }
static char *wptr(HkTensor *x, int64_t off) { return (char *)x->data + off * (int64_t)hk_dtype_size(x->dtype); }

/* rows [t0, t0+n) of head h as f32 [n, hd] */
static void pack_rows(const HkVec *V, const HkTensor *x, const AttnShape *s, int64_t c, int64_t b, int64_t h,
                      int64_t t0, int64_t n, float *dst) {
    for (int64_t r = 0; r < n; r++) V->cast(ptr(x, at(s, b, t0 + r, h, c)), x->dtype, dst + r * s->hd, DT_F32, s->hd);
}

/* the transpose: [hd, ld] with column r = row t0+r */
static void pack_cols(const HkVec *V, const HkTensor *x, const AttnShape *s, int64_t c, int64_t b, int64_t h,
                      int64_t t0, int64_t n, int64_t ld, float *dst) {
    int64_t hd = s->hd;
    if (x->dtype == DT_F32) {
        V->transpose((const float *)x->data + at(s, b, t0, h, c), c, n, hd, dst, ld);
        return;
    }
    float row[TILE_FLOATS];
    for (int64_t r = 0; r < n; r++) {
        V->cast(ptr(x, at(s, b, t0 + r, h, c)), x->dtype, row, DT_F32, hd);
        for (int64_t d = 0; d < hd; d++) dst[d * ld + r] = row[d];
    }
}

/* Rows [t0, t0+n) of head h as f32 rows: the tensor itself when it is f32
 * (row stride c), else converted into buf (row stride hd). */
typedef struct Rows {
    const float *p;
    int64_t ld;
} Rows;
static Rows rows_f32(const HkVec *V, const HkTensor *x, const AttnShape *s, int64_t c, int64_t b, int64_t h,
                     int64_t t0, int64_t n, float *buf) {
    if (x->dtype == DT_F32) return (Rows){(const float *)x->data + at(s, b, t0, h, c), c};
    pack_rows(V, x, s, c, b, h, t0, n, buf);
    return (Rows){buf, s->hd};
}

/* soft-capping of n raw scores in place: x becomes (cap / scale) tanh(scale x / cap),
 * so that the softmax's scale x is cap tanh(scale x / cap); th (if not NULL)
 * keeps the tanh for the backward's chain factor 1 - tanh^2 */
static void softcap_scores(float *x, int64_t n, float scale, float cap, float *th) {
    for (int64_t i = 0; i < n; i++) {
        float t = tanhf(scale * x[i] / cap);
        if (th) th[i] = t;
        x[i] = cap / scale * t;
    }
}

/* forward of query tile i of (b, h), in the transposed layout: S^T [keys,
 * queries] = K Q^T, so that the online softmax runs down columns, one
 * vector of queries at a time, and K, V are read where they are */
static void fwd_tile(const HkVec *V, const AttnShape *s, const HkTensor *q, const HkTensor *k, const HkTensor *v,
                     HkTensor *y, AttnWs *a, int64_t b, int64_t h, int64_t i, float scale) {
    int64_t T = s->T, hd = s->hd, ts = s->tile, g = h / (s->H / s->KV);
    int64_t i0 = i * ts, bq = T - i0 < ts ? T - i0 : ts;
    float QT[TILE_FLOATS], Kb[TILE_FLOATS], Vb[TILE_FLOATS], S[TILE_FLOATS];
    /* O accumulates where the backward will find it: the workspace's f32 copy */
    float *O = a->O + ((b * s->H + h) * T + i0) * hd, *lse = a->lse + (b * s->H + h) * T + i0;
    float m[80], corr[80]; /* a tile has at most 64 rows; rounded up to a vector */
    double l[80];
    for (int r = 0; r < 80; r++) m[r] = -INFINITY, corr[r] = 1, l[r] = 0;
    pack_cols(V, q, s, s->qc, b, h, i0, bq, bq, QT);
    memset(O, 0, sizeof(float) * (size_t)(bq * hd));
    /* the key tiles: from the one holding query i0's first key (0 without a window) to the diagonal;
     * upwards without a window, downwards with one (above) */
    int64_t W = s->window, first = W > 0 && i0 - W + 1 > 0 ? (i0 - W + 1) / ts * ts : 0;
    for (int64_t n = 0, nk = (i0 - first) / ts + 1; n < nk; n++) {
        int64_t j0 = W > 0 ? i0 - n * ts : first + n * ts;
        int64_t bk = T - j0 < ts ? T - j0 : ts;
        Rows Kr = rows_f32(V, k, s, s->kc, b, g, j0, bk, Kb), Vr = rows_f32(V, v, s, s->kc, b, g, j0, bk, Vb);
        V->gemm(bk, bq, hd, Kr.p, Kr.ld, 1, QT, bq, S, bq, false); /* S^T = K Q^T */
        if (s->softcap > 0) softcap_scores(S, bk * bq, scale, s->softcap, NULL);
        if (W > 0 && j0 + W <= i0 + bq - 1) /* key j0 + u is before the window of queries i0 + r >= j0 + u + W */
            for (int64_t u = 0; u < bk; u++)
                for (int64_t r = j0 + u + W - i0 > 0 ? j0 + u + W - i0 : 0; r < bq; r++) S[u * bq + r] = -INFINITY;
        V->softmax_cols(S, bq, bk, bq, scale, m, l, corr, j0 == i0); /* the diagonal tile: key u after query r masked */
        for (int64_t r = 0; r < bq; r++)
            if (corr[r] != 1.0f) V->scale(O + r * hd, corr[r], hd);
        V->gemm(bq, hd, bk, S, 1, bq, Vr.p, Vr.ld, O, hd, true); /* O += P V */
    }
    for (int64_t r = 0; r < bq; r++) {
        float inv = (float)(1.0 / l[r]);
        V->scale(O + r * hd, inv, hd);
        lse[r] = m[r] + (float)log(l[r]);
        V->cast(O + r * hd, DT_F32, wptr(y, at(s, b, i0 + r, h, s->qc)), y->dtype, hd);
    }
}

typedef struct AttnJob {
    const HkVec *V;
    const AttnShape *s;
    const HkTensor *q, *k, *v, *dy;
    HkTensor *y, *dq, *dk, *dv;
    AttnWs *a;
    float scale;
    int64_t ntiles;
} AttnJob;

/* the costliest tiles (last query tiles) first */
static void fwd_unit(void *ctx, int64_t task) {
    const AttnJob *j = ctx;
    int64_t bh = task % (j->s->B * j->s->H), i = j->ntiles - 1 - task / (j->s->B * j->s->H);
    fwd_tile(j->V, j->s, j->q, j->k, j->v, j->y, j->a, bh / j->s->H, bh % j->s->H, i, j->scale);
}

/* The keys a query sees on average, doubled (the causal half of T without a
 * window): the work of a (batch, head) is T span hd multiply-adds per product. */
static double attn_span(int64_t T, int64_t window) { return window > 0 && 2 * window < T ? 2.0 * (double)window : (double)T; }

/* scale_attr: the scores' scale (0: 1/sqrt(hd)); softcap: > 0 caps them (Gemma) */
static int attn_fwd(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                    int64_t kv_heads, int64_t window, double scale_attr, double softcap, void *ws) {
    AttnShape s;
    int rc = attn_check(q, k, v, y, heads, kv_heads, &s);
    if (rc) return rc;
    if (window < 0 || !(scale_attr >= 0) || !(softcap >= 0)) return HK_ERR_ATTR;
    s.window = window;
    s.softcap = (float)softcap;
    if (!ws && hk_attention_workspace_bytes(q, heads)) return HK_ERR_WORKSPACE;
    if (s.T == 0 || s.hd == 0 || s.B == 0) return HK_OK;
    AttnWs a = attn_ws(ws, q, &s);
    const HkVec *V = hk_vec();
    float scale = (float)(scale_attr > 0 ? scale_attr : 1.0 / sqrt((double)s.hd));
    int64_t nt = (s.T + s.tile - 1) / s.tile;
    /* T^2 hd multiply-adds per (batch, head) over the causal half, about 20 G/s */
    int th = hk_team((double)(s.B * s.H) * (double)s.T * attn_span(s.T, window) * (double)s.hd * 0.05);
    AttnJob j = {V, &s, q, k, v, NULL, y, NULL, NULL, NULL, &a, scale, nt};
    hk_parallel(th, s.B * s.H * nt, fwd_unit, &j);
    return HK_OK;
}

/* backward of (b, kv head g) */
static void bwd_group(const HkVec *V, const AttnShape *s, const HkTensor *q, const HkTensor *k, const HkTensor *v,
                      const HkTensor *dy, HkTensor *dq, HkTensor *dk, HkTensor *dv, AttnWs *a, int64_t b, int64_t g,
                      float scale) {
    int64_t T = s->T, hd = s->hd, ts = s->tile, grp = s->H / s->KV;
    bool wq = hk_present(dq), wk = hk_present(dk), wv = hk_present(dv);
    float Qb[TILE_FLOATS], dOb[TILE_FLOATS], KT[TILE_FLOATS], Kb[TILE_FLOATS], VT[TILE_FLOATS];
    float P[TILE_FLOATS], dP[TILE_FLOATS], dK[TILE_FLOATS], dV[TILE_FLOATS], th[TILE_FLOATS];
    /* D = rowsum(dO o O) for every query row of the group */
    for (int64_t h = g * grp; h < (g + 1) * grp; h++)
        for (int64_t t0 = 0; t0 < T; t0 += ts) {
            int64_t n = T - t0 < ts ? T - t0 : ts;
            Rows dO = rows_f32(V, dy, s, s->qc, b, h, t0, n, dOb);
            const float *O = a->O + ((b * s->H + h) * T + t0) * hd;
            for (int64_t r = 0; r < n; r++)
                a->D[(b * s->H + h) * T + t0 + r] = (float)V->dot(dO.p + r * dO.ld, O + r * hd, hd);
        }
    for (int64_t j0 = 0; j0 < T; j0 += ts) {
        int64_t bk = T - j0 < ts ? T - j0 : ts;
        pack_cols(V, k, s, s->kc, b, g, j0, bk, bk, KT);
        pack_cols(V, v, s, s->kc, b, g, j0, bk, bk, VT);
        Rows Kr = rows_f32(V, k, s, s->kc, b, g, j0, bk, Kb);
        memset(dK, 0, sizeof(float) * (size_t)(bk * hd));
        memset(dV, 0, sizeof(float) * (size_t)(bk * hd));
        for (int64_t h = g * grp; h < (g + 1) * grp; h++) {
            const float *lse = a->lse + (b * s->H + h) * T, *Dr = a->D + (b * s->H + h) * T;
            /* the query tiles that see key tile j0: from the diagonal to the last query whose window holds
             * key j0 + bk - 1 */
            int64_t last = s->window > 0 && j0 + bk - 2 + s->window < T ? j0 + bk - 2 + s->window : T - 1;
            for (int64_t i0 = j0; i0 <= last; i0 += ts) {
                int64_t bq = T - i0 < ts ? T - i0 : ts;
                Rows Q = rows_f32(V, q, s, s->qc, b, h, i0, bq, Qb), dO = rows_f32(V, dy, s, s->qc, b, h, i0, bq, dOb);
                V->gemm(bq, bk, hd, Q.p, Q.ld, 1, KT, bk, P, bk, false);   /* S = Q K^T */
                V->gemm(bq, bk, hd, dO.p, dO.ld, 1, VT, bk, dP, bk, false); /* dP = dO V^T */
                for (int64_t r = 0; r < bq; r++) {
                    /* the keys of the tile query t sees: [lo, n) */
                    int64_t t = i0 + r, n = t - j0 + 1 < bk ? t - j0 + 1 : bk;
                    int64_t lo = s->window > 0 && t - s->window + 1 - j0 > 0 ? t - s->window + 1 - j0 : 0;
                    float *pr = P + r * bk, *dr = dP + r * bk;
                    if (n < 0) n = 0;
                    if (lo > n) lo = n;
                    if (s->softcap > 0) softcap_scores(pr + lo, n - lo, scale, s->softcap, th + lo);
                    V->exp_shift(pr + lo, scale, lse[t], n - lo);
                    V->dsoftmax(pr + lo, dr + lo, Dr[t], scale, n - lo);
                    if (s->softcap > 0)
                        for (int64_t u = lo; u < n; u++) dr[u] *= 1.0f - th[u] * th[u];
                    if (lo > 0) {
                        memset(pr, 0, sizeof(float) * (size_t)lo);
                        memset(dr, 0, sizeof(float) * (size_t)lo);
                    }
                    if (n < bk) {
                        memset(pr + n, 0, sizeof(float) * (size_t)(bk - n));
                        memset(dr + n, 0, sizeof(float) * (size_t)(bk - n));
                    }
                }
                if (wv) V->gemm(bk, hd, bq, P, 1, bk, dO.p, dO.ld, dV, hd, true); /* dV += P^T dO */
                if (wk) V->gemm(bk, hd, bq, dP, 1, bk, Q.p, Q.ld, dK, hd, true); /* dK += dS^T Q */
                if (wq) {
                    float *dst = a->dQ ? a->dQ + ((b * s->H + h) * T + i0) * hd : NULL;
                    if (dst) V->gemm(bq, hd, bk, dP, bk, 1, Kr.p, Kr.ld, dst, hd, true); /* dQ += dS K */
                    else if (dq->dtype == DT_F32)
                        V->gemm(bq, hd, bk, dP, bk, 1, Kr.p, Kr.ld, (float *)wptr(dq, at(s, b, i0, h, s->qc)), s->qc, true);
                    else {
                        /* q is f32 but dq is not: no f32 copy in the workspace; add per tile */
                        float tmp[TILE_FLOATS];
                        memset(tmp, 0, sizeof(float) * (size_t)(bq * hd));
                        V->gemm(bq, hd, bk, dP, bk, 1, Kr.p, Kr.ld, tmp, hd, true);
                        for (int64_t r = 0; r < bq; r++)
                            V->acc(tmp + r * hd, DT_F32, wptr(dq, at(s, b, i0 + r, h, s->qc)), dq->dtype, hd);
                    }
                }
            }
        }
        for (int64_t r = 0; r < bk; r++) {
            if (wk) V->acc(dK + r * hd, DT_F32, wptr(dk, at(s, b, j0 + r, g, s->kc)), dk->dtype, hd);
            if (wv) V->acc(dV + r * hd, DT_F32, wptr(dv, at(s, b, j0 + r, g, s->kc)), dv->dtype, hd);
        }
    }
    if (wq && a->dQ)
        for (int64_t h = g * grp; h < (g + 1) * grp; h++)
            for (int64_t t = 0; t < T; t++)
                V->acc(a->dQ + ((b * s->H + h) * T + t) * hd, DT_F32, wptr(dq, at(s, b, t, h, s->qc)), dq->dtype, hd);
}

static void bwd_unit(void *ctx, int64_t task) {
    const AttnJob *j = ctx;
    bwd_group(j->V, j->s, j->q, j->k, j->v, j->dy, j->dq, j->dk, j->dv, j->a, task / j->s->KV, task % j->s->KV, j->scale);
}

int hk_attention_fwd(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                     int64_t kv_heads, void *ws) {
    return attn_fwd(q, k, v, y, heads, kv_heads, 0, 0, 0, ws);
}

int hk_attention_fwd_capped(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                            int64_t kv_heads, double scale_attr, double softcap, void *ws) {
    return attn_fwd(q, k, v, y, heads, kv_heads, 0, scale_attr, softcap, ws);
}

static int attn_bwd(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                    HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, int64_t window, double scale_attr,
                    double softcap, void *ws) {
    AttnShape s;
    int rc = attn_check(q, k, v, dy, heads, kv_heads, &s);
    if (rc) return rc;
    if (window < 0 || !(scale_attr >= 0) || !(softcap >= 0)) return HK_ERR_ATTR;
    s.window = window;
    s.softcap = (float)softcap;
    if ((rc = check_grad(dq, q)) || (rc = check_grad(dk, k)) || (rc = check_grad(dv, v))) return rc;
    if (!ws && hk_attention_workspace_bytes(q, heads)) return HK_ERR_WORKSPACE;
    if (s.T == 0 || s.hd == 0 || s.B == 0) return HK_OK;
    if (!hk_present(dq) && !hk_present(dk) && !hk_present(dv)) return HK_OK;
    AttnWs a = attn_ws(ws, q, &s);
    if (a.dQ && hk_present(dq)) memset(a.dQ, 0, sizeof(float) * (size_t)(s.B * s.H * s.T * s.hd));
    const HkVec *V = hk_vec();
    float scale = (float)(scale_attr > 0 ? scale_attr : 1.0 / sqrt((double)s.hd));
    /* 2.5 T^2 hd multiply-adds per (batch, head), about 20 G/s */
    int th = hk_team((double)(s.B * s.H) * (double)s.T * attn_span(s.T, window) * (double)s.hd * 0.125);
    AttnJob j = {V, &s, q, k, v, dy, NULL, dq, dk, dv, &a, scale, 0};
    hk_parallel(th, s.B * s.KV, bwd_unit, &j);
    return HK_OK;
}

int hk_attention_bwd(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                     HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, void *ws) {
    return attn_bwd(q, k, v, dy, dq, dk, dv, heads, kv_heads, 0, 0, 0, ws);
}

int hk_attention_bwd_capped(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                            HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, double scale_attr, double softcap,
                            void *ws) {
    return attn_bwd(q, k, v, dy, dq, dk, dv, heads, kv_heads, 0, scale_attr, softcap, ws);
}

/* ---- family (runtime/plan/prim.def) ---- */

static size_t fam_attention_ws(const HkCall *c) { return hk_attention_workspace_bytes(c->a, hk_attr_i(c->iattr, IA_ATTENTION_HEADS)); }
static double attn_f(const HkCall *c, int slot) { return c->fattr ? c->fattr[slot] : 0; }
static int fam_attention_fwd(const HkCall *c) {
    if (c->seg && (attn_f(c, FA_ATTENTION_SCALE) != 0 || attn_f(c, FA_ATTENTION_SOFTCAP) != 0)) return HK_ERR_ATTR;
    if (c->seg)
        return hk_attention_fwd_window(c->a, c->b, c->c, &c->out[0], hk_attr_i(c->iattr, IA_ATTENTION_HEADS), hk_attr_kv(c->iattr),
                                       hk_attr_i(c->iattr, IA_ATTENTION_WINDOW), c->seg, c->ws);
    return attn_fwd(c->a, c->b, c->c, &c->out[0], hk_attr_i(c->iattr, IA_ATTENTION_HEADS), hk_attr_kv(c->iattr),
                    hk_attr_i(c->iattr, IA_ATTENTION_WINDOW), attn_f(c, FA_ATTENTION_SCALE), attn_f(c, FA_ATTENTION_SOFTCAP), c->ws);
}
static int fam_attention_bwd(const HkCall *c) {
    if (c->seg && (attn_f(c, FA_ATTENTION_SCALE) != 0 || attn_f(c, FA_ATTENTION_SOFTCAP) != 0)) return HK_ERR_ATTR;
    if (c->seg)
        return hk_attention_bwd_window(c->a, c->b, c->c, c->dy, c->da, c->db, c->dc, hk_attr_i(c->iattr, IA_ATTENTION_HEADS),
                                       hk_attr_kv(c->iattr), hk_attr_i(c->iattr, IA_ATTENTION_WINDOW), c->seg, c->ws);
    return attn_bwd(c->a, c->b, c->c, c->dy, c->da, c->db, c->dc, hk_attr_i(c->iattr, IA_ATTENTION_HEADS), hk_attr_kv(c->iattr),
                    hk_attr_i(c->iattr, IA_ATTENTION_WINDOW), attn_f(c, FA_ATTENTION_SCALE), attn_f(c, FA_ATTENTION_SOFTCAP), c->ws);
}
const HkFamily hk_family_attention = {fam_attention_fwd, fam_attention_bwd, fam_attention_ws};

/* ---- packed rows: attention inside each sample ----
 * seg[b*T + t] is where the sample of row b's position t begins (hostk.h).
 * A sample's positions [t0, t0+n) are a tensor [1, n, C] of their own in
 * the row-major layout, so each sample is the causal attention above on
 * that view. Its workspace rows (lse, O, D, dQ) are the ones at the
 * sample's first token, taken as [1, H, n]: the forward and the backward
 * of one micro-batch see the same samples and so the same places. */

typedef struct SegRun {
    int64_t b, t0, n, task0; /* row, first position, length, first task */
} SegRun;
_Static_assert(sizeof(SegRun) == 4 * sizeof(int64_t), "hk_attention_packed_bytes counts four int64 a position");

/* The samples of seg, in order; -1 when seg does not describe samples
 * (a start after its position, or a position whose start is neither its
 * own nor its predecessor's). runs holds B*T. */
static int64_t seg_runs(const int32_t *seg, int64_t B, int64_t T, SegRun *runs) {
    int64_t n = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int32_t s = seg[b * T + t];
            if (s == t) {
                runs[n++] = (SegRun){b, t, 1, 0};
                continue;
            }
            if (t == 0 || s > t || s != seg[b * T + t - 1]) return -1;
            runs[n - 1].n++;
        }
    return n;
}

/* x's rows of the sample (a gradient not wanted: NULL, then none) */
static HkTensor seg_view(const HkTensor *x, const AttnShape *s, const SegRun *g, int64_t c) {
    HkTensor v = {0};
    if (!x) return v;
    v = *x;
    if (v.data) v.data = (char *)x->data + (g->b * s->T + g->t0) * c * (int64_t)hk_dtype_size(x->dtype);
    v.dims[0] = 1;
    v.dims[1] = g->n;
    return v;
}

static AttnWs seg_ws(const AttnWs *a, const AttnShape *s, const SegRun *g) {
    int64_t at0 = (g->b * s->T + g->t0) * s->H;
    AttnWs w = {a->lse + at0, a->O + at0 * s->hd, a->D + at0, a->dQ ? a->dQ + at0 * s->hd : NULL};
    return w;
}

typedef struct SegJob {
    const AttnJob *j;
    const SegRun *runs;
    int64_t nruns;
} SegJob;

/* the run holding task */
static const SegRun *seg_find(const SegJob *sj, int64_t task) {
    int64_t lo = 0, hi = sj->nruns - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (sj->runs[mid].task0 <= task) lo = mid;
        else hi = mid - 1;
    }
    return &sj->runs[lo];
}

static void seg_fwd_unit(void *ctx, int64_t task) {
    const SegJob *sj = ctx;
    const AttnJob *j = sj->j;
    const SegRun *g = seg_find(sj, task);
    AttnShape s = *j->s;
    s.B = 1;
    s.T = g->n;
    int64_t k = task - g->task0, h = k % s.H, i = k / s.H;
    HkTensor q = seg_view(j->q, j->s, g, s.qc), kk = seg_view(j->k, j->s, g, s.kc), v = seg_view(j->v, j->s, g, s.kc);
    HkTensor y = seg_view(j->y, j->s, g, s.qc);
    AttnWs a = seg_ws(j->a, j->s, g);
    fwd_tile(j->V, &s, &q, &kk, &v, &y, &a, 0, h, i, j->scale);
}

static void seg_bwd_unit(void *ctx, int64_t task) {
    const SegJob *sj = ctx;
    const AttnJob *j = sj->j;
    const SegRun *g = seg_find(sj, task);
    AttnShape s = *j->s;
    s.B = 1;
    s.T = g->n;
    HkTensor q = seg_view(j->q, j->s, g, s.qc), kk = seg_view(j->k, j->s, g, s.kc), v = seg_view(j->v, j->s, g, s.kc);
    HkTensor dy = seg_view(j->dy, j->s, g, s.qc), dq = seg_view(j->dq, j->s, g, s.qc);
    HkTensor dk = seg_view(j->dk, j->s, g, s.kc), dv = seg_view(j->dv, j->s, g, s.kc);
    AttnWs a = seg_ws(j->a, j->s, g);
    bwd_group(j->V, &s, &q, &kk, &v, &dy, j->dq ? &dq : NULL, j->dk ? &dk : NULL, j->dv ? &dv : NULL, &a, 0,
              task - g->task0, j->scale);
}

/* The samples' runs and tasks into runs (B*T long): per run, tiles * per
 * (forward) or per (backward). -1: seg is not a sample layout. */
static int64_t seg_tasks(const int32_t *seg, const AttnShape *s, bool fwd, SegRun *runs, int64_t *ntasks, double *work) {
    int64_t n = seg_runs(seg, s->B, s->T, runs), tasks = 0;
    *work = 0;
    for (int64_t i = 0; i < n; i++) {
        runs[i].task0 = tasks;
        tasks += fwd ? s->H * ((runs[i].n + s->tile - 1) / s->tile) : s->KV;
        *work += (double)runs[i].n * (double)runs[i].n;
    }
    *ntasks = tasks;
    return n;
}

/* The runs of the samples: the end of the workspace. */
static SegRun *seg_area(void *ws, const HkTensor *q, int64_t heads) {
    return (SegRun *)(void *)((char *)ws + hk_attention_workspace_bytes(q, heads) - hk_attention_packed_bytes(q));
}

static int attn_fwd_packed(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                           int64_t kv_heads, int64_t window, const int32_t *seg, void *ws) {
    AttnShape s;
    int rc = attn_check(q, k, v, y, heads, kv_heads, &s);
    if (rc) return rc;
    if (window < 0) return HK_ERR_ATTR;
    s.window = window;
    if (!ws && hk_attention_workspace_bytes(q, heads)) return HK_ERR_WORKSPACE;
    if (s.T == 0 || s.hd == 0 || s.B == 0) return HK_OK;
    SegRun *runs = seg_area(ws, q, heads);
    int64_t ntasks;
    double work;
    int64_t nruns = seg_tasks(seg, &s, true, runs, &ntasks, &work);
    if (nruns < 0) return HK_ERR_ARG;
    AttnWs a = attn_ws(ws, q, &s);
    AttnJob j = {hk_vec(), &s, q, k, v, NULL, y, NULL, NULL, NULL, &a, (float)(1.0 / sqrt((double)s.hd)), 0};
    SegJob sj = {&j, runs, nruns};
    hk_parallel(hk_team((double)s.H * work * (double)s.hd * 0.05), ntasks, seg_fwd_unit, &sj);
    return HK_OK;
}

static int attn_bwd_packed(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                           HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, int64_t window, const int32_t *seg,
                           void *ws) {
    AttnShape s;
    int rc = attn_check(q, k, v, dy, heads, kv_heads, &s);
    if (rc) return rc;
    if (window < 0) return HK_ERR_ATTR;
    s.window = window;
    if ((rc = check_grad(dq, q)) || (rc = check_grad(dk, k)) || (rc = check_grad(dv, v))) return rc;
    if (!ws && hk_attention_workspace_bytes(q, heads)) return HK_ERR_WORKSPACE;
    if (s.T == 0 || s.hd == 0 || s.B == 0) return HK_OK;
    if (!hk_present(dq) && !hk_present(dk) && !hk_present(dv)) return HK_OK;
    SegRun *runs = seg_area(ws, q, heads);
    int64_t ntasks;
    double work;
    int64_t nruns = seg_tasks(seg, &s, false, runs, &ntasks, &work);
    if (nruns < 0) return HK_ERR_ARG;
    AttnWs a = attn_ws(ws, q, &s);
    if (a.dQ && hk_present(dq)) memset(a.dQ, 0, sizeof(float) * (size_t)(s.B * s.H * s.T * s.hd));
    AttnJob j = {hk_vec(), &s, q, k, v, dy, NULL, hk_present(dq) ? dq : NULL, hk_present(dk) ? dk : NULL,
                 hk_present(dv) ? dv : NULL, &a, (float)(1.0 / sqrt((double)s.hd)), 0};
    SegJob sj = {&j, runs, nruns};
    hk_parallel(hk_team((double)s.H * work * (double)s.hd * 0.125), ntasks, seg_bwd_unit, &sj);
    return HK_OK;
}


int hk_attention_fwd_packed(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                            int64_t kv_heads, const int32_t *seg, void *ws) {
    return attn_fwd_packed(q, k, v, y, heads, kv_heads, 0, seg, ws);
}

int hk_attention_bwd_packed(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                            HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, const int32_t *seg, void *ws) {
    return attn_bwd_packed(q, k, v, dy, dq, dk, dv, heads, kv_heads, 0, seg, ws);
}

int hk_attention_fwd_window(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                            int64_t kv_heads, int64_t window, const int32_t *seg, void *ws) {
    if (seg) return attn_fwd_packed(q, k, v, y, heads, kv_heads, window, seg, ws);
    return attn_fwd(q, k, v, y, heads, kv_heads, window, 0, 0, ws);
}

int hk_attention_bwd_window(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                            HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, int64_t window, const int32_t *seg,
                            void *ws) {
    if (seg) return attn_bwd_packed(q, k, v, dy, dq, dk, dv, heads, kv_heads, window, seg, ws);
    return attn_bwd(q, k, v, dy, dq, dk, dv, heads, kv_heads, window, 0, 0, ws);
}
