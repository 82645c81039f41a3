/* hfio: the import (zinfrun --init). The mapping's layout is in
 * runtime/hf/hfio_layout.c, what every hfio file shares in hfio_common.c,
 * the export in hfio_export.c. */
#include "hfio_impl.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "quant.h"
#include "vocab.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- import: the checks ---- */

typedef struct Imp {
    Rt *r;
    const HfLayout *l;
    const StSet *s;
    const StEntry **ent;    /* per group: its tensor in the checkpoint */
    HfStage st;
    HfioReport *rep;
    Progress *progress;     /* NULL: nobody listens */
    bool counting;          /* a pass that only adds up the bytes the copy will read, into total */
    uint64_t total;
    /* a parameter stored quantized (DT_NF4, DT_INT8) is gathered here in
     * f32, its shard's elements at their shard offsets, and encoded into
     * its home once all its pieces are in: one such shard at a time */
    float *qf;
} Imp;

/* Appends name to a ", "-separated list of cap bytes, or counts it as more. */
static void list_add(char *list, size_t cap, int *count, const char *name) {
    size_t u = strlen(list);
    if (u + strlen(name) + 32 < cap) snprintf(list + u, cap - u, "%s%s", u ? ", " : "", name);
    else if (!strstr(list, " and more")) snprintf(list + u, cap - u, " and more");
    (*count)++;
}

/* What the checkpoint calls a tensor the plan names otherwise ("h.0.x" for
 * "transformer.h.0.x", or the other way round), for the first missing name. */
static const char *near_name(const StSet *s, const char *want) {
    size_t wl = strlen(want);
    for (size_t i = 0; i < s->n; i++) {
        const char *h = s->all[i].name;
        size_t hl = strlen(h);
        if (hl < wl && want[wl - hl - 1] == '.' && !strcmp(want + wl - hl, h)) return h;
        if (hl > wl && h[hl - wl - 1] == '.' && !strcmp(h + hl - wl, want)) return h;
    }
    return NULL;
}

static int check_missing(Imp *im, char *err, size_t n) {
    const HfLayout *l = im->l;
    char list[8192] = "";
    int missing = 0;
    const char *first = NULL;
    for (int g = 0; g < l->ngroups; g++) {
        im->ent[g] = st_set_find(im->s, l->groups[g].name);
        if (im->ent[g] || l->groups[g].adapter) continue; /* a LoRA adapter a base checkpoint lacks: kept as initialised */
        if (!first) first = l->groups[g].name;
        list_add(list, sizeof list, &missing, l->groups[g].name);
    }
    if (!missing) return 0;
    const char *near = near_name(im->s, first);
    char hint[600] = "";
    if (near) snprintf(hint, sizeof hint, " (the checkpoint has '%s' where the plan wants '%s': another naming?)", near, first);
    else if (missing == l->ngroups) snprintf(hint, sizeof hint, " (none of the plan's tensors is there: a checkpoint of another model?)");
    return errorf(err, n, "%s: %d tensor%s the plan maps %s not in the checkpoint: %s%s", im->s->path, missing, missing == 1 ? "" : "s",
                  missing == 1 ? "is" : "are", list, hint);
}

/* Each group's tensor: a float dtype, exactly the shape the plan needs. */
static int check_shapes(Imp *im, char *err, size_t n) {
    const HfLayout *l = im->l;
    const Plan *p = im->r->p;
    for (int g = 0; g < l->ngroups; g++) {
        const HfGroup *G = &l->groups[g];
        const StEntry *e = im->ent[g];
        if (!e) continue;
        const char *fn = st_set_file(im->s, e)->path;
        if (!st_dtype_is_float(e->dtype))
            return errorf(err, n, "%s: tensor '%s' is %s; zinf imports F32, F16 and BF16", fn, e->name, st_dtype_name(e->dtype));
        bool same = e->rank == G->rank;
        for (int d = 0; same && d < G->rank; d++) same = e->shape[d] == G->shape[d];
        if (same) continue;
        char a[160], b[160];
        const PlanTensor *t = &p->tensors[l->pieces[G->first].tensor];
        return errorf(err, n, "%s: tensor '%s' has shape %s, the plan needs %s (for '%s'%s)", fn, e->name,
                      hf_shape_str(e->shape, e->rank, a, sizeof a), hf_shape_str(G->shape, G->rank, b, sizeof b), t->name,
                      G->transpose ? ", transposed" : "");
    }
    return 0;
}

/* Checkpoint tensors that have no zinf counterpart by design: a tied
 * lm_head (the plan maps none), GPT-2's attention-mask buffers, rotary
 * inverse frequencies. */
static bool known_extra(const StEntry *e) {
    const char *nm = e->name;
    size_t len = strlen(nm);
#define ENDS(s) (len >= sizeof(s) - 1 && !strcmp(nm + len - (sizeof(s) - 1), s))
    if (!strcmp(nm, "lm_head.weight")) return true;
    if ((ENDS(".attn.bias") || ENDS(".attn.masked_bias")) && e->rank != 1) return true;
    return ENDS("rotary_emb.inv_freq");
#undef ENDS
}

static void list_unused(Imp *im) {
    const HfLayout *l = im->l;
    for (size_t i = 0; i < im->s->n; i++) {
        const StEntry *e = &im->s->all[i];
        bool used = false;
        for (int g = 0; g < l->ngroups && !used; g++) used = im->ent[g] == e || !strcmp(l->groups[g].name, e->name);
        if (used) continue;
        if (known_extra(e)) list_add(im->rep->ignored, sizeof im->rep->ignored, &im->rep->nignored, e->name);
        else list_add(im->rep->unused, sizeof im->rep->unused, &im->rep->nunused, e->name);
    }
}

/* A master is written with its parameter's offsets: same shard geometry. */
static int check_masters(const Imp *im, char *err, size_t n) {
    const Plan *p = im->r->p;
    for (int i = 0; i < im->l->npieces; i++) {
        const PlanTensor *t = &p->tensors[im->l->pieces[i].tensor];
        if (t->master < 0) continue;
        const PlanTensor *m = &p->tensors[t->master];
        if (m->shard < 0) return errorf(err, n, "hf: the master of '%s' has no shard", t->name);
        const PlanShard *a = &p->shards[t->shard], *b = &p->shards[m->shard];
        if (m->dtype != DT_F32 || a->ntiles != b->ntiles || a->tile_elems != b->tile_elems || a->tile_shard != b->tile_shard ||
            a->partitioned != b->partitioned)
            return errorf(err, n, "hf: the master of '%s' is sharded unlike it; this import cannot write it", t->name);
    }
    return 0;
}

/* ---- import: the copy ---- */

typedef struct FileCtx {
    const StFile *f;
} FileCtx;
static int file_read(void *ctx, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n) {
    return st_read(((FileCtx *)ctx)->f, off, buf, len, err, n);
}

/* Rows [r0, r1) x P's columns [c0, c1) of piece x from the file into im->st.f (f32, row-major). */
static int read_block(Imp *im, const HfPiece *x, const StEntry *e, int64_t r0, int64_t r1, int64_t c0, int64_t c1, char *err, size_t n) {
    FileCtx fc = {st_set_file(im->s, e)};
    HfRuns runs = {.fn = file_read, .ctx = &fc};
    size_t es = st_dtype_size(e->dtype);
    int64_t h = r1 - r0, w = c1 - c0;
    uint8_t *a = im->st.a;
    if (x->layout == PLAN_HF_EXPERT_COLS) { /* a row's columns are E apart: its span, read and strided */
        int64_t span = (w - 1) * x->experts + 1;
        if (span > im->st.ch)
            return errorf(err, n, "hf tensor '%s': a row of %" PRId64 " elements does not fit the staging buffer of %" PRId64, e->name,
                          span, im->st.ch);
        for (int64_t i = r0; i < r1; i++) {
            int64_t el = hf_expert_col(x, i, c0);
            if (hf_runs_add(&runs, e->offset + (uint64_t)el * es, a, (uint64_t)span * es, err, n) || hf_runs_flush(&runs, err, n))
                return -1;
            st_to_f32(e->dtype, a, x->experts, im->st.f + (i - r0) * w, w);
        }
        im->rep->bytes += runs.total;
        return 0;
    }
    if (!x->transpose) {
        for (int64_t i = r0; i < r1; i++) {
            int64_t el = (i - x->row0) * x->hstride + x->src_col + (c0 - x->pc);
            if (hf_runs_add(&runs, e->offset + (uint64_t)el * es, a + (size_t)((i - r0) * w) * es, (uint64_t)w * es, err, n)) return -1;
        }
    } else {
        for (int64_t j = c0; j < c1; j++) {
            int64_t el = (x->src_col + j - x->pc) * x->hstride + r0 - x->row0;
            if (hf_runs_add(&runs, e->offset + (uint64_t)el * es, a + (size_t)((j - c0) * h) * es, (uint64_t)h * es, err, n)) return -1;
        }
    }
    if (hf_runs_flush(&runs, err, n)) return -1;
    im->rep->bytes += runs.total;
    if (!x->transpose) st_to_f32(e->dtype, a, 1, im->st.f, h * w);
    else
        for (int64_t i = 0; i < h; i++) st_to_f32(e->dtype, a + (size_t)i * es, h, im->st.f + i * w, w);
    return 0;
}

/* The block's elements inside this rank's interval [s, e) of P (stored
 * from element `base` of the shard) into home buffer `buffer`, in dtype pd. */
static int write_block(Imp *im, int buffer, int pd, const HfPiece *x, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t s,
                       int64_t e, int64_t base, char *err, size_t n) {
    int64_t w = c1 - c0;
    if (dtype_is_quant(pd)) {
        for (int64_t i = r0; i < r1; i++) {
            int64_t x0 = i * x->cols + c0, y0 = i * x->cols + c1;
            int64_t a = x0 > s ? x0 : s, b = y0 < e ? y0 : e;
            if (a < b) memcpy(im->qf + base + a - s, im->st.f + (i - r0) * w + (a - x0), (size_t)(b - a) * sizeof(float));
        }
        return 0;
    }
    StDtype sd = (StDtype)st_dtype_from_plan(pd);
    size_t es = st_dtype_size(sd);
    uint8_t *src = (uint8_t *)im->st.f;
    if (sd != ST_F32) {
        st_from_f32(sd, im->st.f, im->st.b, (r1 - r0) * w);
        src = im->st.b;
    }
    HfHome hh = {im->r, buffer};
    HfRuns runs = {.fn = hf_home_write, .ctx = &hh};
    for (int64_t i = r0; i < r1; i++) {
        int64_t x0 = i * x->cols + c0, y0 = i * x->cols + c1;
        int64_t a = x0 > s ? x0 : s, b = y0 < e ? y0 : e;
        if (a >= b) continue;
        if (hf_runs_add(&runs, (uint64_t)(base + a - s) * es, src + (size_t)((i - r0) * w + (a - x0)) * es, (uint64_t)(b - a) * es, err, n))
            return -1;
    }
    return hf_runs_flush(&runs, err, n);
}

/* Piece x's part of this rank's interval [s, e) of P, block by block. */
static int copy_interval(Imp *im, const HfPiece *x, int64_t s, int64_t e, int64_t base, char *err, size_t n) {
    const Plan *p = im->r->p;
    const PlanTensor *t = &p->tensors[x->tensor];
    const StEntry *ent = im->ent[x->group];
    if (!ent) return 0;
    int64_t ra = s / x->cols, rb = (e - 1) / x->cols + 1;
    if (ra < x->row0) ra = x->row0; /* a stacked piece: the rows of its slice */
    if (rb > x->row0 + x->nrows) rb = x->row0 + x->nrows;
    if (ra >= rb) return 0;
    int64_t c0 = x->pc, c1 = x->pc + x->w;
    if (rb - ra == 1) { /* within one row: only the columns it holds */
        if (s - ra * x->cols > c0) c0 = s - ra * x->cols;
        if (e - ra * x->cols < c1) c1 = e - ra * x->cols;
        if (c0 >= c1) return 0;
    }
    int64_t bh, bw;
    hf_block_dims(x->transpose, rb - ra, c1 - c0, im->st.ch, &bh, &bw);
    int mbuf = t->master >= 0 ? p->shards[p->tensors[t->master].shard].buffer : -1;
    for (int64_t r0 = ra; r0 < rb; r0 += bh)
        for (int64_t b0 = c0; b0 < c1; b0 += bw) {
            int64_t r1 = min64(rb, r0 + bh), b1 = min64(c1, b0 + bw);
            if (im->counting) {
                im->total += (uint64_t)((r1 - r0) * (b1 - b0)) * st_dtype_size(ent->dtype);
                continue;
            }
            if (read_block(im, x, ent, r0, r1, b0, b1, err, n)) return -1;
            if (mbuf >= 0 && write_block(im, mbuf, DT_F32, x, r0, r1, b0, b1, s, e, base, err, n)) return -1;
            if (write_block(im, p->shards[t->shard].buffer, t->dtype, x, r0, r1, b0, b1, s, e, base, err, n)) return -1;
            progress_report(im->progress, "importing weights", "B", im->rep->bytes, im->total);
        }
    return 0;
}

/* The f32 values gathered in im->qf, encoded into the home of the
 * quantized parameter t (tile by tile: a tile's shard is whole blocks). */
static int store_quantized(Imp *im, const PlanTensor *t, char *err, size_t n) {
    const PlanShard *sh = &im->r->p->shards[t->shard];
    size_t tb = (size_t)plan_dtype_bytes(t->dtype, sh->tile_shard);
    uint8_t *q = malloc(tb ? tb : 1);
    if (!q) return errorf(err, n, "out of memory quantizing '%s'", t->name);
    QuantKind k = t->dtype == DT_NF4 ? QUANT_NF4 : QUANT_INT8;
    HfHome hh = {im->r, sh->buffer};
    int rc = 0;
    for (int32_t u = 0; u < sh->ntiles && !rc; u++) {
        quant_encode(k, im->qf + (size_t)u * (size_t)sh->tile_shard, sh->tile_shard, q);
        rc = hf_home_write(&hh, (uint64_t)u * tb, q, tb, err, n);
    }
    free(q);
    return rc;
}

/* Every piece's part of this rank's shards, read and stored; with
 * im->counting set, only the bytes that would be read, added up. */
static int import_pieces(Imp *im, char *err, size_t n) {
    const Plan *p = im->r->p;
    const HfLayout *l = im->l;
    int rank = im->r->c->rank;
    for (int i = 0; i < l->npieces; i++) {
        const HfPiece *x = &l->pieces[i];
        const PlanTensor *t = &p->tensors[x->tensor];
        const PlanShard *sh = &p->shards[t->shard];
        bool first = !i || l->pieces[i - 1].tensor != x->tensor, last = i + 1 == l->npieces || l->pieces[i + 1].tensor != x->tensor;
        bool quant = dtype_is_quant(t->dtype) && !im->counting;
        if (first) im->rep->params++;
        if (quant && first && !(im->qf = calloc((size_t)sh->ntiles * (size_t)sh->tile_shard + 1, sizeof(float))))
            return errorf(err, n, "out of memory quantizing '%s'", t->name);
        int rc = 0;
        for (int32_t u = 0; u < sh->ntiles && !rc; u++) {
            int64_t w0 = sh->partitioned ? (int64_t)rank * sh->tile_shard : 0;
            int64_t cnt = min64(sh->tile_shard, sh->tile_elems - w0);
            if (cnt <= 0) continue;
            int64_t s = (int64_t)u * sh->tile_elems + w0;
            rc = copy_interval(im, x, s, s + cnt, (int64_t)u * sh->tile_shard, err, n);
        }
        if (quant && last && !rc) rc = store_quantized(im, t, err, n);
        if (quant && (last || rc)) {
            free(im->qf);
            im->qf = NULL;
        }
        if (rc) return -1;
    }
    return 0;
}

static int import_copy(Imp *im, char *err, size_t n) {
    if (im->progress) {
        int params = im->rep->params;
        im->counting = true;
        int rc = import_pieces(im, err, n);
        im->counting = false;
        im->rep->params = params;
        if (rc) return rc;
    }
    if (import_pieces(im, err, n)) return -1;
    progress_report(im->progress, "importing weights", "B", im->total, im->total);
    im->rep->tensors = im->l->ngroups;
    return 0;
}

static int import_checks(Imp *im, char *err, size_t n) {
    if (im->r->step != 0) return errorf(err, n, "--init sets the weights of a run at step 0, this one is at step %" PRId64, im->r->step);
    if (check_missing(im, err, n) || check_shapes(im, err, n) || check_masters(im, err, n)) return -1;
    list_unused(im);
    const Plan *p = im->r->p;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        if (p->tensors[t].cls != TC_PARAM) continue;
        bool mapped = false;
        for (int i = 0; i < im->l->npieces && !mapped; i++) mapped = im->l->pieces[i].tensor == (int)t && im->ent[im->l->pieces[i].group];
        im->rep->params_kept += !mapped;
    }
    return 0;
}

int hfio_import(Rt *r, const char *path, const HfioOptions *o, HfioReport *rep, char *err, size_t n) {
    HfioReport dummy;
    if (!rep) rep = &dummy;
    memset(rep, 0, sizeof *rep);
    HfLayout l = {0};
    StSet s;
    bool open = false;
    Imp im = {.r = r, .l = &l, .s = &s, .rep = rep, .progress = o ? o->progress : NULL};
    int rc = st_set_open(&s, path, err, n);
    open = !rc;
    rep->files = open ? s.nfiles : 0;
    if (!rc) {
        uint32_t own;
        rep->own_names = hf_uses_own_names(r->p, &s, &own);
        if (rep->own_names && !own && !hf_has_mapping(r->p))
            rc = errorf(err, n, "%s: the plan has no Hugging Face mapping (its model has no hf block), and this is not a zinfrun --export "
                                "file of its model (none of its parameter names is there): compile the model with an hf block, "
                                "or from a Hugging Face directory with zinfc --from-hf DIR", path);
        else
            rc = rep->own_names ? hf_layout_by_names(r->p, &l, err, n) : hf_layout_build(r->p, &l, err, n);
    }
    if (!rc && !(im.ent = calloc((size_t)l.ngroups, sizeof *im.ent))) rc = errorf(err, n, "out of memory");
    if (!rc) rc = import_checks(&im, err, n);
    if (!rc) rc = hf_stage_init(&im.st, o, err, n);
    int bad = hf_agree(r, rc, err, n);
    if (bad > 0 && !rc) rc = errorf(err, n, "rank %d could not use the checkpoint %s (its message says why); nothing was imported", bad - 1, path);
    if (bad < 0) rc = -1;
    if (!rc) rc = import_copy(&im, err, n);
    bad = hf_agree(r, rc, err, n);
    if (bad > 0 && !rc) rc = errorf(err, n, "rank %d failed importing %s (its message says why)", bad - 1, path);
    if (bad < 0) rc = -1;
    hf_stage_free(&im.st);
    free(im.ent);
    if (open) st_set_close(&s);
    hf_layout_free(&l);
    return rc;
}
