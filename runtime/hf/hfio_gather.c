/* hfio_gather: a block of a parameter, and a persistent tensor whole, on
 * rank 0 (hfio_gather). Every rank reads the part of the block it holds
 * into an f32 buffer that is -0.0 elsewhere, and an all-reduce adds them up
 * (x + -0.0 is x exactly), so rank 0 has the block without any rank holding
 * more than the staging buffer. */
#include "hfio_impl.h"
#include <stdlib.h>
#include <string.h>
#include "quant.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* -0.0 in the dtype of es bytes, so that what a rank does not hold adds nothing. */
static void fill_negzero(uint8_t *p, size_t es, int64_t count) {
    if (es == 4) {
        const uint32_t v = 0x80000000u;
        for (int64_t i = 0; i < count; i++) memcpy(p + i * 4, &v, 4);
    } else {
        const uint16_t v = 0x8000u;
        for (int64_t i = 0; i < count; i++) memcpy(p + i * 2, &v, 2);
    }
}

/* hf_gather_block of a tensor stored quantized: each rank decodes the whole
 * blocks around what it holds of each row (a shard is whole blocks) and
 * keeps the elements asked for, -0.0 elsewhere; rc as hf_gather_block. */
static int gather_quant(Rt *r, HfStage *st, const PlanTensor *pt, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                        bool coll, char *err, size_t n) {
    const PlanShard *sh = &r->p->shards[pt->shard];
    int R = r->c->size, me = r->c->rank;
    QuantKind k = pt->dtype == DT_NF4 ? QUANT_NF4 : QUANT_INT8;
    size_t bb = quant_block_bytes(k);
    int64_t w = c1 - c0, cnt = (r1 - r0) * w, nb = w / QUANT_BLOCK + 2;
    for (int64_t i = 0; i < cnt; i++) st->f[i] = -0.0f;
    uint8_t *q = malloc((size_t)nb * bb);
    float *y = malloc((size_t)nb * QUANT_BLOCK * sizeof *y);
    int rc = q && y ? 0 : errorf(err, n, "out of memory reading '%s'", pt->name);
    HfHome hh = {r, sh->buffer};
    for (int64_t i = r0; i < r1 && !rc; i++) {
        int64_t x0 = i * cols + c0, ye = i * cols + c1;
        for (int64_t x = x0; x < ye && !rc;) {
            int owner;
            int64_t off, end = hf_segment(sh, R, x, ye, &owner, &off);
            if (owner == me || owner < 0) {
                int64_t b0 = off / QUANT_BLOCK, b1 = (off + (end - x) + QUANT_BLOCK - 1) / QUANT_BLOCK;
                rc = hf_home_read(&hh, (uint64_t)b0 * bb, q, (uint64_t)(b1 - b0) * bb, err, n);
                if (!rc) {
                    quant_decode(k, q, (b1 - b0) * QUANT_BLOCK, y);
                    memcpy(st->f + (i - r0) * w + (x - x0), y + (off - b0 * QUANT_BLOCK), (size_t)(end - x) * sizeof *y);
                }
            }
            x = end;
        }
    }
    free(q);
    free(y);
    /* a rank whose read failed still takes part, so that no rank waits */
    if (coll && comm_allreduce_sum_f32(r->c, st->f, (size_t)cnt) != COMM_OK)
        return rc ? rc : errorf(err, n, "%s", comm_last_error(r->c));
    return rc;
}

/* Rows [r0, r1) x columns [c0, c1) of tensor t (a [rows, cols] matrix)
 * into st->f (f32) on rank 0. Collective when t is partitioned; when every
 * rank holds t whole, rank 0 reads it alone and the others return at once. */
int hf_gather_block(Rt *r, HfStage *st, int t, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1, char *err, size_t n) {
    const Plan *p = r->p;
    const PlanTensor *pt = &p->tensors[t];
    const PlanShard *sh = &p->shards[pt->shard];
    int R = r->c->size, me = r->c->rank;
    bool coll = sh->partitioned && R > 1;
    if (!coll && me != 0) return 0;
    if (dtype_is_quant(pt->dtype)) return gather_quant(r, st, pt, cols, r0, r1, c0, c1, coll, err, n);
    StDtype sd = (StDtype)st_dtype_from_plan(pt->dtype);
    size_t es = st_dtype_size(sd);
    int64_t w = c1 - c0, cnt = (r1 - r0) * w;
    if (coll) fill_negzero(st->b, es, cnt);
    HfHome hh = {r, sh->buffer};
    HfRuns runs = {.fn = hf_home_read, .ctx = &hh};
    int rc = 0;
    for (int64_t i = r0; i < r1 && !rc; i++) {
        int64_t x0 = i * cols + c0, y = i * cols + c1;
        for (int64_t x = x0; x < y && !rc;) {
            int owner;
            int64_t off, end = hf_segment(sh, R, x, y, &owner, &off);
            if (owner == me || owner < 0)
                rc = hf_runs_add(&runs, (uint64_t)off * es, st->b + (size_t)((i - r0) * w + (x - x0)) * es, (uint64_t)(end - x) * es, err, n);
            x = end;
        }
    }
    if (!rc) rc = hf_runs_flush(&runs, err, n);
    /* a rank whose read failed still takes part, so that no rank waits */
    st_to_f32(sd, st->b, 1, st->f, cnt);
    if (coll && comm_allreduce_sum_f32(r->c, st->f, (size_t)cnt) != COMM_OK)
        return rc ? rc : errorf(err, n, "%s", comm_last_error(r->c));
    return rc;
}

int hfio_gather(Rt *r, int tensor, void *dst, const HfioOptions *o, char *err, size_t n) {
    const Plan *p = r->p;
    if (tensor >= 0 && (uint32_t)tensor < p->ntensors && dtype_is_quant(p->tensors[tensor].dtype))
        return errorf(err, n, "'%s' is stored quantized (%s), which this reads only through zinfrun --export and --export-hf "
                              "(dequantized): export the merged model with zinfrun --merge-lora --export-hf and use that",
                      p->tensors[tensor].name, dtype_name((DType)p->tensors[tensor].dtype));
    if (tensor < 0 || (uint32_t)tensor >= p->ntensors || p->tensors[tensor].shard < 0 || st_dtype_from_plan(p->tensors[tensor].dtype) < 0)
        return errorf(err, n, "tensor %d is not a persistent float tensor", tensor);
    const PlanTensor *t = &p->tensors[tensor];
    StDtype sd = (StDtype)st_dtype_from_plan(t->dtype);
    size_t es = st_dtype_size(sd);
    int64_t cols = t->rank ? t->dims[t->rank - 1] : 1, rows = cols ? t->numel / cols : 0;
    HfStage st = {0};
    int rc = hf_stage_init(&st, o, err, n), bad = 0;
    int64_t bh = 1, bw = 1;
    if (!rc) hf_block_dims(false, rows, cols, st.ch, &bh, &bw);
    bad = hf_agree(r, rc, err, n);
    for (int64_t r0 = 0; !bad && r0 < rows; r0 += bh)
        for (int64_t c0 = 0; c0 < cols; c0 += bw) {
            int64_t r1 = min64(rows, r0 + bh), c1 = min64(cols, c0 + bw);
            int g = hf_gather_block(r, &st, tensor, cols, r0, r1, c0, c1, err, n);
            if (g && !rc) rc = g;
            if (rc || r->c->rank != 0 || !dst) continue;
            for (int64_t i = r0; i < r1; i++) st_from_f32(sd, st.f + (i - r0) * (c1 - c0), (uint8_t *)dst + (size_t)(i * cols + c0) * es, c1 - c0);
        }
    if (!bad) bad = hf_agree(r, rc, err, n);
    if (bad > 0 && !rc) rc = errorf(err, n, "rank %d failed gathering '%s'", bad - 1, t->name);
    if (bad < 0) rc = -1;
    hf_stage_free(&st);
    return rc;
}
