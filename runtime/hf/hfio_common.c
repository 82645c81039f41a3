/* hfio_common: what every hfio file uses, below all of them: shapes as
 * text, PEFT's adapter names, the staging
 * memory, block sizes, which rank holds a segment of a parameter, runs of
 * bytes to and from a shard's home, and the ranks' agreement on a failure. */
#include "hfio_impl.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hf_shape_str(const int64_t *shape, int rank, char *buf, size_t n) {
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && u < n; d++) u += (size_t)snprintf(buf + u, n - u, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (u < n) snprintf(buf + u, n - u, "]");
    return buf;
}

bool hf_is_adapter(const char *name) { return name && !strncmp(name, HF_PEFT_PREFIX, strlen(HF_PEFT_PREFIX)); }

int hf_stage_init(HfStage *s, const HfioOptions *o, char *err, size_t n) {
    size_t bytes = o && o->staging_bytes ? o->staging_bytes : HFIO_STAGING_DEFAULT;
    s->ch = (int64_t)(bytes / 12);
    if (s->ch < 1) s->ch = 1;
    s->a = malloc((size_t)s->ch * 4);
    s->b = malloc((size_t)s->ch * 4);
    s->f = malloc((size_t)s->ch * sizeof(float));
    if (s->a && s->b && s->f) return 0;
    hf_stage_free(s);
    return errorf(err, n, "out of memory for %zu bytes of staging", bytes);
}

void hf_stage_free(HfStage *s) {
    free(s->a);
    free(s->b);
    free(s->f);
    s->a = s->b = NULL;
    s->f = NULL;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void hf_block_dims(bool transposed, int64_t nrows, int64_t ncols, int64_t ch, int64_t *h, int64_t *w) {
    if (!transposed) {
        *w = min64(ncols, ch);
        *h = min64(nrows, ch / *w > 1 ? ch / *w : 1);
        return;
    }
    int64_t s = (int64_t)sqrt((double)ch);
    if (s < 1) s = 1;
    if (ncols <= s) {
        *w = ncols;
        *h = min64(nrows, ch / ncols > 1 ? ch / ncols : 1);
    } else {
        *h = min64(nrows, s);
        *w = min64(ncols, ch / *h > 1 ? ch / *h : 1);
    }
}

int64_t hf_segment(const PlanShard *s, int nranks, int64_t x, int64_t y, int *owner, int64_t *off) {
    int64_t u = x / s->tile_elems, o = x % s->tile_elems;
    if (!s->partitioned || nranks <= 1) {
        *owner = s->partitioned ? 0 : -1;
        *off = u * s->tile_shard + o;
        return min64(y, (u + 1) * s->tile_elems);
    }
    int64_t q = o / s->tile_shard;
    *owner = (int)q;
    *off = u * s->tile_shard + (o - q * s->tile_shard);
    return min64(y, u * s->tile_elems + min64((q + 1) * s->tile_shard, s->tile_elems));
}

int hf_runs_flush(HfRuns *r, char *err, size_t n) {
    if (!r->len) return 0;
    int rc = r->fn(r->ctx, r->off, r->buf, r->len, err, n);
    r->total += r->len;
    r->len = 0;
    return rc;
}

int hf_runs_add(HfRuns *r, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n) {
    if (!len) return 0;
    if (r->len && r->off + r->len == off && r->buf + r->len == buf) {
        r->len += len;
        return 0;
    }
    if (hf_runs_flush(r, err, n)) return -1;
    r->off = off;
    r->buf = buf;
    r->len = len;
    return 0;
}

int hf_home_read(void *ctx, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n) {
    HfHome *h = ctx;
    return rt_home_read(h->r, h->buffer, off, buf, len, err, n);
}

int hf_home_write(void *ctx, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n) {
    HfHome *h = ctx;
    return rt_home_write(h->r, h->buffer, off, buf, len, err, n);
}

int hf_agree(Rt *r, int rc, char *err, size_t n) {
    int v = comm_agree(r->c, rc);
    if (v < 0 && !rc) errorf(err, n, "%s", comm_last_error(r->c));
    return v;
}
