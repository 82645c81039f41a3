/* hostk_rows: the row and panel drivers of the vectorised host kernels
 * (see hostk_rows.h). */
#include "hostk_rows.h"
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "hostk_impl.h"
#include "hostk_threads.h"
#include "hostk_vec.h"

/* Elements per unit of the elementwise kernels (a multiple of every vector width). */
#define UNARY_BLOCK 8192

static int64_t rows_of(const HkTensor *t) {
    int64_t r = 1;
    for (int i = 0; i < t->rank - 1; i++) r *= t->dims[i];
    return r;
}
static int64_t last_dim(const HkTensor *t) { return t->rank ? t->dims[t->rank - 1] : 1; }

/* Single-thread cost estimates (ns per element) that size the teams
 * (hk_team): activation functions, norms and softmax rows; copies, adds. */
#define NS_MATH 0.5
#define NS_COPY 0.25
/* per multiply-add of a GEMM (about 80 GFLOP/s) */
#define NS_MAC 0.025
static int team_for(int64_t work) { return hk_team((double)work * NS_MATH); }
static int team_copy(int64_t work) { return hk_team((double)work * NS_COPY); }

/* One job description for every driver: each unit function reads the
 * fields it needs. */
typedef struct Job {
    const HkVec *V;
    const HkTensor *x, *g, *b, *dy;
    HkTensor *y, *dx, *dg, *db;
    HkTensor *pieces;
    const HkTensor *cpieces;
    int npieces;
    const float *cf0, *cf1;
    float *f0, *f1;
    double *pd;
    const int32_t *ids;
    int64_t n, R, D, cr, ns, stride;
    double eps;
    float s;
    bool flag;
    HkUnary op;
} Job;

static int64_t unit_len(int64_t n, int64_t u, int64_t blk) { return n - u * blk < blk ? n - u * blk : blk; }

/* ---- elementwise ---- */

static void unary_fwd_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    const HkVec *V = j->V;
    void (*fn)(const float *, float *, int64_t) = j->op == HK_UNARY_GELU ? V->gelu_fwd : V->silu_fwd;
    int64_t lo = u * UNARY_BLOCK, len = unit_len(j->n, u, UNARY_BLOCK);
    const HkTensor *x = j->x;
    HkTensor *y = j->y;
    if (x->dtype == DT_F32 && y->dtype == DT_F32) {
        fn((const float *)x->data + lo, (float *)y->data + lo, len);
        return;
    }
    float t[UNARY_BLOCK];
    V->cast((const char *)x->data + lo * (int64_t)hk_dtype_size(x->dtype), x->dtype, t, DT_F32, len);
    fn(t, t, len);
    V->cast(t, DT_F32, (char *)y->data + lo * (int64_t)hk_dtype_size(y->dtype), y->dtype, len);
}

void hk_rows_unary_fwd(HkUnary f, const HkTensor *x, HkTensor *y) {
    Job j = {.V = hk_vec(), .x = x, .y = y, .n = hk_numel(x), .op = f};
    hk_parallel(team_for(j.n), (j.n + UNARY_BLOCK - 1) / UNARY_BLOCK, unary_fwd_unit, &j);
}

static void unary_bwd_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    const HkVec *V = j->V;
    void (*fn)(const float *, const float *, float *, int64_t) = j->op == HK_UNARY_GELU ? V->gelu_bwd : V->silu_bwd;
    int64_t lo = u * UNARY_BLOCK, len = unit_len(j->n, u, UNARY_BLOCK);
    const HkTensor *x = j->x, *dy = j->dy;
    HkTensor *dx = j->dx;
    if (x->dtype == DT_F32 && dy->dtype == DT_F32 && dx->dtype == DT_F32) {
        fn((const float *)x->data + lo, (const float *)dy->data + lo, (float *)dx->data + lo, len);
        return;
    }
    size_t xs = hk_dtype_size(x->dtype), ys = hk_dtype_size(dy->dtype), ds = hk_dtype_size(dx->dtype);
    float tx[UNARY_BLOCK], td[UNARY_BLOCK], tg[UNARY_BLOCK];
    V->cast((const char *)x->data + lo * (int64_t)xs, x->dtype, tx, DT_F32, len);
    V->cast((const char *)dy->data + lo * (int64_t)ys, dy->dtype, td, DT_F32, len);
    V->cast((const char *)dx->data + lo * (int64_t)ds, dx->dtype, tg, DT_F32, len);
    fn(tx, td, tg, len);
    V->cast(tg, DT_F32, (char *)dx->data + lo * (int64_t)ds, dx->dtype, len);
}

void hk_rows_unary_bwd(HkUnary f, const HkTensor *x, const HkTensor *dy, HkTensor *dx) {
    Job j = {.V = hk_vec(), .x = x, .dy = dy, .dx = dx, .n = hk_numel(x), .op = f};
    hk_parallel(team_for(j.n), (j.n + UNARY_BLOCK - 1) / UNARY_BLOCK, unary_bwd_unit, &j);
}

/* ---- layernorm, rmsnorm ---- */

/* Rows per chunk: at least 16, and at most 64 chunks, so the double
 * partials of the backward stay small. */
static int64_t chunk_rows(int64_t R) {
    int64_t c = (R + 63) / 64;
    return c < 16 ? 16 : c;
}

int64_t hk_norm_chunks(int64_t R) { return R > 0 ? (R + chunk_rows(R) - 1) / chunk_rows(R) : 0; }

size_t hk_norm_partial_bytes(int64_t R, int64_t D, int nvec) {
    return hk_align((size_t)hk_norm_chunks(R) * (size_t)D * (size_t)nvec * sizeof(double));
}

static const void *ptr_of(const HkTensor *t) { return hk_present(t) ? t->data : NULL; }
static DType dt_of(const HkTensor *t) { return hk_present(t) ? t->dtype : DT_NONE; }
#define AT(t, i) ((const char *)(t)->data + (size_t)(i) * hk_dtype_size((t)->dtype))
#define ATW(t, i) ((char *)(t)->data + (size_t)(i) * hk_dtype_size((t)->dtype))
#define FOR_ROWS(j, c, r) for (int64_t r = (c) * (j)->cr; r < (j)->R && r < ((c) + 1) * (j)->cr; r++)

static Job rows_job(const HkTensor *x) {
    Job j = {.V = hk_vec(), .x = x, .R = rows_of(x), .D = last_dim(x)};
    j.cr = chunk_rows(j.R);
    return j;
}
static int64_t nchunks(const Job *j) { return j->R > 0 ? (j->R + j->cr - 1) / j->cr : 0; }

static void ln_fwd_unit(void *ctx, int64_t c) {
    const Job *j = ctx;
    int64_t D = j->D;
    FOR_ROWS(j, c, r)
    j->V->ln_fwd(AT(j->x, r * D), j->x->dtype, ptr_of(j->g), dt_of(j->g), ptr_of(j->b), dt_of(j->b), ATW(j->y, r * D),
                 j->y->dtype, D, j->eps, &j->f0[r], &j->f1[r]);
}

void hk_rows_ln_fwd(const HkTensor *x, const HkTensor *g, const HkTensor *b, HkTensor *y, double eps, float *mean,
                    float *rstd) {
    Job j = rows_job(x);
    j.g = g, j.b = b, j.y = y, j.eps = eps, j.f0 = mean, j.f1 = rstd;
    hk_parallel(team_for(j.R * j.D), nchunks(&j), ln_fwd_unit, &j);
}

/* g[k] += sum over chunks (in order) of partial[c * stride + k], rounded once into g. */
static void reduce_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    int64_t k0 = u * 256, w = unit_len(j->D, u, 256), nc = j->n;
    double acc[256];
    memset(acc, 0, sizeof acc);
    for (int64_t c = 0; c < nc; c++)
        for (int64_t k = 0; k < w; k++) acc[k] += j->pd[c * j->stride + k0 + k];
    HkTensor *g = j->dg;
    for (int64_t k = 0; k < w; k++) hk_st(g->data, g->dtype, k0 + k, hk_ld(g->data, g->dtype, k0 + k) + (float)acc[k]);
}

static void reduce_partials(double *partial, int64_t nc, int64_t stride, int64_t D, HkTensor *g) {
    Job j = {.pd = partial, .n = nc, .stride = stride, .D = D, .dg = g};
    hk_parallel(team_copy(nc * D), (D + 255) / 256, reduce_unit, &j);
}

static void ln_bwd_unit(void *ctx, int64_t c) {
    const Job *j = ctx;
    int64_t D = j->D;
    double *pg = hk_present(j->dg) ? j->pd + c * 2 * D : NULL, *pb = hk_present(j->db) ? j->pd + c * 2 * D + D : NULL;
    if (pg) memset(pg, 0, sizeof(double) * (size_t)D);
    if (pb) memset(pb, 0, sizeof(double) * (size_t)D);
    FOR_ROWS(j, c, r)
    j->V->ln_bwd(AT(j->x, r * D), j->x->dtype, ptr_of(j->g), dt_of(j->g), AT(j->dy, r * D), j->dy->dtype,
                 hk_present(j->dx) ? ATW(j->dx, r * D) : NULL, dt_of(j->dx), pg, pb, D, j->cf0[r], j->cf1[r]);
}

void hk_rows_ln_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *dy, HkTensor *dx, HkTensor *dg,
                    HkTensor *db, const float *mean, const float *rstd, double *partial) {
    Job j = rows_job(x);
    j.g = g, j.dy = dy, j.dx = dx, j.dg = dg, j.db = db, j.cf0 = mean, j.cf1 = rstd, j.pd = partial;
    hk_parallel(team_for(j.R * j.D), nchunks(&j), ln_bwd_unit, &j);
    if (hk_present(dg)) reduce_partials(partial, nchunks(&j), 2 * j.D, j.D, dg);
    if (hk_present(db)) reduce_partials(partial + j.D, nchunks(&j), 2 * j.D, j.D, db);
}

static void rms_fwd_unit(void *ctx, int64_t c) {
    const Job *j = ctx;
    int64_t D = j->D;
    FOR_ROWS(j, c, r)
    j->V->rms_fwd(AT(j->x, r * D), j->x->dtype, ptr_of(j->g), dt_of(j->g), ATW(j->y, r * D), j->y->dtype, D, j->eps,
                  &j->f0[r]);
}

void hk_rows_rms_fwd(const HkTensor *x, const HkTensor *g, HkTensor *y, double eps, float *rstd) {
    Job j = rows_job(x);
    j.g = g, j.y = y, j.eps = eps, j.f0 = rstd;
    hk_parallel(team_for(j.R * j.D), nchunks(&j), rms_fwd_unit, &j);
}

static void rms_bwd_unit(void *ctx, int64_t c) {
    const Job *j = ctx;
    int64_t D = j->D;
    double *pg = hk_present(j->dg) ? j->pd + c * D : NULL;
    if (pg) memset(pg, 0, sizeof(double) * (size_t)D);
    FOR_ROWS(j, c, r)
    j->V->rms_bwd(AT(j->x, r * D), j->x->dtype, ptr_of(j->g), dt_of(j->g), AT(j->dy, r * D), j->dy->dtype,
                  hk_present(j->dx) ? ATW(j->dx, r * D) : NULL, dt_of(j->dx), pg, D, j->cf0[r]);
}

void hk_rows_rms_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *dy, HkTensor *dx, HkTensor *dg,
                     const float *rstd, double *partial) {
    Job j = rows_job(x);
    j.g = g, j.dy = dy, j.dx = dx, j.dg = dg, j.cf0 = rstd, j.pd = partial;
    hk_parallel(team_for(j.R * j.D), nchunks(&j), rms_bwd_unit, &j);
    if (hk_present(dg)) reduce_partials(partial, nchunks(&j), j.D, j.D, dg);
}

/* ---- cross-entropy: one row per unit ---- */

static void ce_lse_unit(void *ctx, int64_t r) {
    const Job *j = ctx;
    const void *row = AT(j->x, r * j->D);
    float m = j->V->max(row, j->x->dtype, j->D);
    double s = j->V->exp_sum(row, j->x->dtype, m, j->D);
    j->f0[r] = (float)((double)m + log(s));
}

void hk_rows_ce_lse(const HkTensor *logits, float *lse) {
    Job j = rows_job(logits);
    j.f0 = lse;
    hk_parallel(team_for(j.R * j.D), j.R, ce_lse_unit, &j);
}

static void ce_bwd_unit(void *ctx, int64_t r) {
    const Job *j = ctx;
    const HkVec *V = j->V;
    int64_t t = j->ids[r], Vn = j->D;
    if (t < 0) return; /* an untrained target: no gradient */
    HkTensor *d = j->dx;
    char *drow = ATW(d, r * Vn);
    const char *lrow = AT(j->x, r * Vn);
    /* the target's element as the reference: d += (p - 1) dl, one rounding */
    float before = hk_ld(drow, d->dtype, t), lt = hk_ld(lrow, j->x->dtype, t) - j->cf0[r], pt;
    V->exp(&lt, &pt, 1);
    V->exp_axpy(lrow, j->x->dtype, j->cf0[r], j->s, drow, d->dtype, Vn);
    hk_st(drow, d->dtype, t, before + (pt - 1.0f) * j->s);
}

void hk_rows_ce_bwd(const HkTensor *logits, const int32_t *targets, const float *lse, float dl, HkTensor *dlogits) {
    Job j = rows_job(logits);
    j.ids = targets, j.cf0 = lse, j.s = dl, j.dx = dlogits;
    hk_parallel(team_for(j.R * j.D), j.R, ce_bwd_unit, &j);
}

/* ---- add, mul, split ---- */

static void bin_fwd_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    int64_t i = u * UNARY_BLOCK, end = i + unit_len(j->n, u, UNARY_BLOCK), ns = j->ns;
    while (i < end) {
        int64_t so = i % ns, len = ns - so < end - i ? ns - so : end - i;
        j->V->bin(AT(j->x, i), j->x->dtype, AT(j->g, so), j->g->dtype, ATW(j->y, i), j->y->dtype, len, j->flag);
        i += len;
    }
}

void hk_rows_binary_fwd(const HkTensor *B, const HkTensor *S, HkTensor *y, bool mul) {
    Job j = {.V = hk_vec(), .x = B, .g = S, .y = y, .n = hk_numel(B), .ns = hk_numel(S), .flag = mul};
    hk_parallel(team_copy(j.n), (j.n + UNARY_BLOCK - 1) / UNARY_BLOCK, bin_fwd_unit, &j);
}

static void bin_dbig_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    int64_t i = u * UNARY_BLOCK, end = i + unit_len(j->n, u, UNARY_BLOCK), ns = j->ns;
    while (i < end) {
        int64_t so = i % ns, len = ns - so < end - i ? ns - so : end - i;
        if (j->flag) j->V->mul_acc(AT(j->dy, i), j->dy->dtype, AT(j->g, so), j->g->dtype, ATW(j->dx, i), j->dx->dtype, len);
        else j->V->acc(AT(j->dy, i), j->dy->dtype, ATW(j->dx, i), j->dx->dtype, len);
        i += len;
    }
}

static void bin_dsmall_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    int64_t ns = j->ns, j0 = u * 256, w = unit_len(ns, u, 256), R = j->n / ns;
    double acc[256];
    memset(acc, 0, sizeof acc);
    for (int64_t r = 0; r < R; r++)
        j->V->dacc2(acc, AT(j->dy, r * ns + j0), j->dy->dtype, j->flag ? AT(j->x, r * ns + j0) : NULL, j->x->dtype, w);
    HkTensor *d = j->dg;
    for (int64_t k = 0; k < w; k++) hk_st(d->data, d->dtype, j0 + k, hk_ld(d->data, d->dtype, j0 + k) + (float)acc[k]);
}

void hk_rows_binary_bwd(const HkTensor *B, const HkTensor *S, const HkTensor *dy, HkTensor *dB, HkTensor *dS, bool mul) {
    Job j = {.V = hk_vec(), .x = B, .g = S, .dy = dy, .dx = dB, .dg = dS, .n = hk_numel(B), .ns = hk_numel(S), .flag = mul};
    if (hk_present(dB)) hk_parallel(team_copy(j.n), (j.n + UNARY_BLOCK - 1) / UNARY_BLOCK, bin_dbig_unit, &j);
    if (hk_present(dS) && j.ns == j.n) { /* same shapes: the "sum over rows" is one row */
        Job k = {.V = j.V, .x = S, .g = B, .dy = dy, .dx = dS, .n = j.n, .ns = j.n, .flag = mul};
        hk_parallel(team_copy(k.n), (k.n + UNARY_BLOCK - 1) / UNARY_BLOCK, bin_dbig_unit, &k);
    } else if (hk_present(dS))
        hk_parallel(team_copy(j.n), (j.ns + 255) / 256, bin_dsmall_unit, &j);
}

static void split_fwd_unit(void *ctx, int64_t c) {
    const Job *j = ctx;
    FOR_ROWS(j, c, r) {
        int64_t off = 0;
        for (int i = 0; i < j->npieces; i++) {
            HkTensor *p = &j->pieces[i];
            int64_t w = last_dim(p);
            j->V->cast(AT(j->x, r * j->D + off), j->x->dtype, ATW(p, r * w), p->dtype, w);
            off += w;
        }
    }
}

void hk_rows_split_fwd(const HkTensor *x, HkTensor *pieces, int n) {
    Job j = rows_job(x);
    j.pieces = pieces, j.npieces = n;
    hk_parallel(team_copy(j.R * j.D), nchunks(&j), split_fwd_unit, &j);
}

static void split_bwd_unit(void *ctx, int64_t c) {
    const Job *j = ctx;
    FOR_ROWS(j, c, r) {
        int64_t off = 0;
        for (int i = 0; i < j->npieces; i++) {
            const HkTensor *p = &j->cpieces[i];
            int64_t w = last_dim(p);
            if (p->data) j->V->acc(AT(p, r * w), p->dtype, ATW(j->dx, r * j->D + off), j->dx->dtype, w);
            off += w;
        }
    }
}

void hk_rows_split_bwd(const HkTensor *dpieces, int n, HkTensor *dx) {
    Job j = rows_job(dx);
    j.cpieces = dpieces, j.npieces = n, j.dx = dx;
    hk_parallel(team_copy(j.R * j.D), nchunks(&j), split_bwd_unit, &j);
}

/* ---- embedding ---- */

static void embed_fwd_unit(void *ctx, int64_t c) {
    const Job *j = ctx;
    int64_t D = j->D;
    FOR_ROWS(j, c, i) j->V->cast(AT(j->x, (int64_t)j->ids[i] * D), j->x->dtype, ATW(j->y, i * D), j->y->dtype, D);
}

void hk_rows_embed_fwd(const HkTensor *table, const int32_t *ids, int64_t n, HkTensor *y) {
    Job j = {.V = hk_vec(), .x = table, .ids = ids, .y = y, .R = n, .D = table->dims[1], .cr = chunk_rows(n)};
    hk_parallel(team_copy(n * j.D), nchunks(&j), embed_fwd_unit, &j);
}

static void embed_bwd_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    int64_t D = j->D, j0 = u * 256, w = unit_len(D, u, 256);
    for (int64_t i = 0; i < j->R; i++)
        j->V->acc(AT(j->dy, i * D + j0), j->dy->dtype, ATW(j->dg, (int64_t)j->ids[i] * D + j0), j->dg->dtype, w);
}

void hk_rows_embed_bwd(const int32_t *ids, int64_t n, const HkTensor *dy, HkTensor *dtable) {
    Job j = {.V = hk_vec(), .ids = ids, .dy = dy, .dg = dtable, .R = n, .D = dtable->dims[1]};
    hk_parallel(team_copy(n * j.D), (j.D + 255) / 256, embed_bwd_unit, &j);
}

/* ---- casts, bias, column sums ---- */

static void cast_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    int64_t lo = u * UNARY_BLOCK;
    j->V->cast(AT(j->x, lo), j->x->dtype, ATW(j->y, lo), j->y->dtype, unit_len(j->n, u, UNARY_BLOCK));
}

void hk_rows_cast(const void *src, DType st, void *dst, DType dt, int64_t n) {
    int64_t d1[1] = {n};
    HkTensor s = hk_tensor((void *)src, st, 1, d1), d = hk_tensor(dst, dt, 1, d1);
    Job j = {.V = hk_vec(), .x = &s, .y = &d, .n = n};
    hk_parallel(team_copy(n), (n + UNARY_BLOCK - 1) / UNARY_BLOCK, cast_unit, &j);
}

static void colsum_unit(void *ctx, int64_t u) {
    const Job *j = ctx;
    int64_t N = j->D, j0 = u * 256, w = unit_len(N, u, 256);
    double acc[256];
    memset(acc, 0, sizeof acc);
    for (int64_t r = 0; r < j->R; r++) j->V->dacc(acc, j->cf0 + r * N + j0, w);
    HkTensor *g = j->dg;
    for (int64_t k = 0; k < w; k++) hk_st(g->data, g->dtype, j0 + k, hk_ld(g->data, g->dtype, j0 + k) + (float)acc[k]);
}

void hk_rows_colsum(const float *dy, int64_t R, int64_t N, HkTensor *g) {
    Job j = {.V = hk_vec(), .cf0 = dy, .R = R, .D = N, .dg = g};
    hk_parallel(team_copy(R * N), (N + 255) / 256, colsum_unit, &j);
}

static void bias_unit(void *ctx, int64_t c) {
    const Job *j = ctx;
    FOR_ROWS(j, c, r) j->V->acc(j->b->data, j->b->dtype, j->f0 + r * j->D, DT_F32, j->D);
}

void hk_rows_bias(float *Y, int64_t R, int64_t N, const HkTensor *b) {
    Job j = {.V = hk_vec(), .f0 = Y, .R = R, .D = N, .b = b, .cr = chunk_rows(R)};
    hk_parallel(team_copy(R * N), nchunks(&j), bias_unit, &j);
}

/* ---- GEMM panels ---- */

static void sgemm1(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                   int64_t ldb, float beta, float *C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N,
                (blasint)K, 1.0f, A, (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

typedef struct Gemm {
    bool ta, tb, split_n;
    int64_t M, N, K;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    float beta;
    float *C;
    int64_t pw, dim;
} Gemm;

static void gemm_unit(void *ctx, int64_t p) {
    const Gemm *g = ctx;
    int64_t lo = p * g->pw, w = g->dim - lo < g->pw ? g->dim - lo : g->pw;
    if (g->split_n) /* columns [lo, lo+w) of C: columns of op(B) */
        sgemm1(g->ta, g->tb, g->M, w, g->K, g->A, g->lda, g->tb ? g->B + lo * g->ldb : g->B + lo, g->ldb, g->beta,
               g->C + lo, g->N);
    else /* rows [lo, lo+w) of C: rows of op(A) */
        sgemm1(g->ta, g->tb, w, g->N, g->K, g->ta ? g->A + lo : g->A + lo * g->lda, g->lda, g->B, g->ldb, g->beta,
               g->C + lo * g->N, g->N);
}

/* Products below this many multiply-adds run whole on the calling thread;
 * a panel has at least GEMM_PANEL_MIN (about 100 us). */
#define GEMM_SPLIT_MIN (8.0 * 1024 * 1024)
#define GEMM_PANEL_MIN (4.0 * 1024 * 1024)

void hk_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B, float beta, float *C) {
    (void)hk_threads(); /* the policy first: it sets OpenBLAS to one thread before OpenBLAS runs */
    if (M == 0 || N == 0) return;
    if (K == 0) {
        if (beta == 0.0f) memset(C, 0, sizeof(float) * (size_t)(M * N));
        else if (beta != 1.0f)
            for (int64_t i = 0; i < M * N; i++) C[i] *= beta;
        return;
    }
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    bool split_n = N >= M;
    int64_t dim = split_n ? N : M;
    /* panels of at least GEMM_PANEL_MIN multiply-adds and 64 rows or columns,
     * at most 16 of them: a function of the shape only. Each panel packs
     * the other operand again, so there are no more than that. */
    double mnk = (double)M * (double)N * (double)K;
    int64_t want = (int64_t)(mnk / GEMM_PANEL_MIN);
    if (want > 16) want = 16;
    int64_t pw = want > 1 ? (dim + want - 1) / want : dim;
    pw = pw < 64 ? 64 : (pw + 15) / 16 * 16;
    int64_t np = (dim + pw - 1) / pw;
    if (mnk < GEMM_SPLIT_MIN || np < 2) {
        sgemm1(ta, tb, M, N, K, A, lda, B, ldb, beta, C, N);
        return;
    }
    int nt = hk_team((double)M * (double)N * (double)K * NS_MAC);
    Gemm g = {ta, tb, split_n, M, N, K, A, lda, B, ldb, beta, C, pw, dim};
    hk_parallel(nt, np, gemm_unit, &g);
}
