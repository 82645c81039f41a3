/* hfio: the mapping's layout, what import and export share, and the import
 * (zinfrun --init). The export is in runtime/hf/hfio_export.c. */
#include "hfio_impl.h"
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vocab.h"

int hf_fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && n) vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

const char *hf_shape_str(const int64_t *shape, int rank, char *buf, size_t n) {
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && u < n; d++) u += (size_t)snprintf(buf + u, n - u, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (u < n) snprintf(buf + u, n - u, "]");
    return buf;
}

/* ---- the layout ---- */

void hf_layout_free(HfLayout *l) {
    free(l->pieces);
    free(l->groups);
    memset(l, 0, sizeof *l);
}

/* A piece's parameter as a matrix, and the checks every piece needs. */
static int piece_init(const Plan *p, const PlanHfPiece *x, HfPiece *pc, const HfPiece *prev, char *err, size_t n) {
    const PlanTensor *t = &p->tensors[x->tensor];
    if (t->shard < 0 || (uint32_t)t->shard >= p->nshards) return hf_fail(err, n, "hf: parameter '%s' has no shard", t->name);
    if (st_dtype_from_plan(t->dtype) < 0)
        return hf_fail(err, n, "hf: parameter '%s' is %s; Hugging Face weights are floats", t->name, dtype_name((DType)t->dtype));
    const PlanShard *s = &p->shards[t->shard];
    if (s->ntiles < 1 || s->tile_elems < 1 || (int64_t)s->ntiles * s->tile_elems != t->numel || s->tile_shard < 1)
        return hf_fail(err, n, "hf: the shard of '%s' does not cover it (%d tiles of %" PRId64 ")", t->name, s->ntiles, s->tile_elems);
    pc->tensor = x->tensor;
    pc->cols = t->rank ? t->dims[t->rank - 1] : 1;
    pc->rows = pc->cols ? t->numel / pc->cols : 0;
    pc->pc = prev && prev->tensor == x->tensor ? prev->pc + prev->w : 0;
    pc->w = x->cols;
    pc->src_col = x->src_col;
    pc->transpose = x->transpose;
    pc->group = -1;
    return 0;
}

/* Whether two parameters read one HF tensor with the same rows: all axes
 * but the last equal (transposed: the first). */
static bool same_rows(const PlanTensor *a, const PlanTensor *b, bool transpose) {
    if (transpose) return a->dims[0] == b->dims[0];
    if (a->rank != b->rank) return false;
    for (int d = 0; d + 1 < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* The group's members (pieces of its orientation) sorted by first column
 * tile [0, H) once: equal ranges repeat (a tied weight), others may not
 * overlap or leave a gap. */
static int group_columns(const Plan *p, HfLayout *l, int g, int *idx, int64_t *H, char *err, size_t n) {
    HfGroup *G = &l->groups[g];
    int m = 0;
    for (int i = G->first; i < l->npieces; i++)
        if (l->pieces[i].group == g && l->pieces[i].transpose == G->transpose) {
            int k = m++;
            while (k > 0 && l->pieces[idx[k - 1]].src_col > l->pieces[i].src_col) {
                idx[k] = idx[k - 1];
                k--;
            }
            idx[k] = i;
        }
    int64_t end = 0;
    for (int k = 0; k < m; k++) {
        HfPiece *x = &l->pieces[idx[k]];
        const HfPiece *y = k ? &l->pieces[idx[k - 1]] : NULL;
        if (y && x->src_col == y->src_col && x->w == y->w) continue; /* the same columns again: read, not written */
        if (x->src_col > end)
            return hf_fail(err, n, "hf tensor '%s': columns [%" PRId64 ", %" PRId64 ") come from no parameter", G->name, end, x->src_col);
        if (x->src_col < end)
            return hf_fail(err, n, "hf tensor '%s': columns [%" PRId64 ", %" PRId64 ") of '%s' and [%" PRId64 ", %" PRId64 ") of '%s' overlap",
                           G->name, y->src_col, y->src_col + y->w, p->tensors[y->tensor].name, x->src_col, x->src_col + x->w,
                           p->tensors[x->tensor].name);
        x->exported = true;
        end = x->src_col + x->w;
    }
    *H = end;
    return 0;
}

/* An alias (a piece reading the group's tensor in the other orientation)
 * must fit the group's shape. */
static int alias_fits(const Plan *p, const HfGroup *G, HfPiece *x, char *err, size_t n) {
    const PlanTensor *t = &p->tensors[x->tensor];
    bool ok;
    if (x->transpose) {
        ok = G->rank == 2 && G->shape[1] == x->rows && x->src_col + x->w <= G->shape[0];
        x->hstride = G->rank == 2 ? G->shape[1] : 0;
    } else {
        ok = G->rank == t->rank && x->src_col + x->w <= G->shape[G->rank - 1];
        for (int d = 0; ok && d + 1 < t->rank; d++) ok = G->shape[d] == t->dims[d];
        x->hstride = G->shape[G->rank - 1];
    }
    char a[160], b[160];
    if (!ok)
        return hf_fail(err, n, "hf tensor '%s' is %s, but '%s' (%s) reads columns [%" PRId64 ", %" PRId64 ") of it %s", G->name,
                       hf_shape_str(G->shape, G->rank, a, sizeof a), t->name, hf_shape_str(t->dims, t->rank, b, sizeof b), x->src_col,
                       x->src_col + x->w, x->transpose ? "transposed" : "as it is");
    return 0;
}

/* Shape, dtype and column checks of group g. */
static int group_finish(const Plan *p, HfLayout *l, int g, int *idx, char *err, size_t n) {
    HfGroup *G = &l->groups[g];
    const PlanTensor *t0 = &p->tensors[l->pieces[G->first].tensor];
    for (int i = G->first; i < l->npieces; i++) {
        const HfPiece *x = &l->pieces[i];
        const PlanTensor *t = &p->tensors[x->tensor];
        char a[160], b[160];
        if (x->group == g && x->transpose == G->transpose && !same_rows(t0, t, G->transpose))
            return hf_fail(err, n, "hf tensor '%s': '%s' is %s but '%s' is %s; the pieces of one tensor need the same %s", G->name,
                           t0->name, hf_shape_str(t0->dims, t0->rank, a, sizeof a), t->name, hf_shape_str(t->dims, t->rank, b, sizeof b),
                           G->transpose ? "first axis" : "axes but the last");
    }
    int64_t H = 0;
    if (group_columns(p, l, g, idx, &H, err, n)) return -1;
    if (G->transpose) {
        G->rank = 2;
        G->shape[0] = H;
        G->shape[1] = t0->dims[0];
    } else {
        G->rank = t0->rank;
        for (int d = 0; d + 1 < t0->rank; d++) G->shape[d] = t0->dims[d];
        G->shape[G->rank - 1] = H;
    }
    G->numel = 1;
    for (int d = 0; d < G->rank; d++) G->numel *= (uint64_t)G->shape[d];
    G->dtype = t0->dtype;
    for (int i = G->first; i < l->npieces; i++) {
        HfPiece *x = &l->pieces[i];
        if (x->group != g) continue;
        if (x->transpose != G->transpose) {
            if (alias_fits(p, G, x, err, n)) return -1;
        } else {
            x->hstride = G->transpose ? x->rows : H;
        }
    }
    return 0;
}

/* The layout of npieces mapping pieces (the plan's hf mapping, or the
 * one-piece-per-parameter mapping of the plan's own names). */
static int layout_from(const Plan *p, const PlanHfPiece *pieces, uint32_t npieces, HfLayout *l, char *err, size_t n) {
    memset(l, 0, sizeof *l);
    l->pieces = calloc(npieces ? npieces : 1, sizeof *l->pieces);
    l->groups = calloc(npieces ? npieces : 1, sizeof *l->groups);
    int *idx = calloc(npieces ? npieces : 1, sizeof *idx);
    int rc = l->pieces && l->groups && idx ? 0 : hf_fail(err, n, "out of memory for the hf mapping");
    for (uint32_t i = 0; !rc && i < npieces; i++) {
        HfPiece *x = &l->pieces[i];
        rc = piece_init(p, &pieces[i], x, i ? x - 1 : NULL, err, n);
        if (rc) break;
        int g = 0;
        while (g < l->ngroups && strcmp(l->groups[g].name, pieces[i].hf_name)) g++;
        if (g == l->ngroups)
            l->groups[l->ngroups++] = (HfGroup){.name = pieces[i].hf_name, .transpose = x->transpose, .first = (int)i,
                                                .adapter = hf_is_adapter(pieces[i].hf_name)};
        x->group = g;
        l->npieces++;
    }
    for (int g = 0; !rc && g < l->ngroups; g++) rc = group_finish(p, l, g, idx, err, n);
    free(idx);
    if (rc) hf_layout_free(l);
    return rc;
}

static bool has_mapping(const Plan *p) { return p->hf.arch && p->hf.arch[0] && p->hf.npieces; }

int hf_layout_build(const Plan *p, HfLayout *l, char *err, size_t n) {
    memset(l, 0, sizeof *l);
    if (!has_mapping(p))
        return hf_fail(err, n, "the plan has no Hugging Face mapping (its model has no hf block): compile the model with one, "
                               "or from a Hugging Face directory with zinfc --from-hf DIR");
    return layout_from(p, p->hf.pieces, p->hf.npieces, l, err, n);
}

/* Whether a parameter is one zinfrun --export writes (rt_export_safetensors):
 * every parameter with a shard, under its own name. */
static bool exported_param(const Plan *p, uint32_t t) { return p->tensors[t].cls == TC_PARAM && p->tensors[t].shard >= 0; }

/* The mapping of zinfrun --export's file: each parameter is the tensor of
 * its own name, whole, as it is. The pieces name the plan's strings, so
 * the layout outlives the array built here. */
static int layout_by_names(const Plan *p, HfLayout *l, char *err, size_t n) {
    uint32_t np = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) np += exported_param(p, t);
    PlanHfPiece *pc = calloc(np ? np : 1, sizeof *pc);
    if (!pc) return hf_fail(err, n, "out of memory for the parameter names");
    uint32_t k = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const PlanTensor *pt = &p->tensors[t];
        if (exported_param(p, t))
            pc[k++] = (PlanHfPiece){(int32_t)t, pt->name, 0, 0, pt->rank ? pt->dims[pt->rank - 1] : 1};
    }
    int rc = layout_from(p, pc, k, l, err, n);
    for (int g = 0; !rc && g < l->ngroups; g++) l->groups[g].adapter = false; /* an export holds every parameter */
    free(pc);
    return rc;
}

/* Which names the checkpoint uses: the plan's own parameter names (a file
 * of zinfrun --export) when it holds more of them than of the hf
 * mapping's names, or when the plan has no mapping; else the mapping's. */
static bool uses_own_names(const Plan *p, const StSet *s, uint32_t *own) {
    uint32_t hf = 0;
    *own = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) *own += exported_param(p, t) && st_set_find(s, p->tensors[t].name);
    for (uint32_t i = 0; i < p->hf.npieces; i++) hf += st_set_find(s, p->hf.pieces[i].hf_name) != NULL;
    return !has_mapping(p) || *own > hf;
}

int hfio_check_plan(const Plan *p, char *err, size_t n) {
    HfLayout l;
    if (hf_layout_build(p, &l, err, n)) return -1;
    hf_layout_free(&l);
    return 0;
}

/* ---- shared machinery ---- */

int hf_stage_init(HfStage *s, const HfioOptions *o, char *err, size_t n) {
    size_t bytes = o && o->staging_bytes ? o->staging_bytes : HFIO_STAGING_DEFAULT;
    s->ch = (int64_t)(bytes / 12);
    if (s->ch < 1) s->ch = 1;
    s->a = malloc((size_t)s->ch * 4);
    s->b = malloc((size_t)s->ch * 4);
    s->f = malloc((size_t)s->ch * sizeof(float));
    if (s->a && s->b && s->f) return 0;
    hf_stage_free(s);
    return hf_fail(err, n, "out of memory for %zu bytes of staging", bytes);
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
    int64_t v = rc ? r->c->rank + 1 : 0;
    if (comm_allreduce_max_i64(r->c, &v) != COMM_OK) {
        if (!rc) hf_fail(err, n, "%s", comm_last_error(r->c));
        return -1;
    }
    return (int)v;
}

/* ---- import: the checks ---- */

typedef struct Imp {
    Rt *r;
    const HfLayout *l;
    const StSet *s;
    const StEntry **ent;    /* per group: its tensor in the checkpoint */
    HfStage st;
    HfioReport *rep;
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
    return hf_fail(err, n, "%s: %d tensor%s the plan maps %s not in the checkpoint: %s%s", im->s->path, missing, missing == 1 ? "" : "s",
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
            return hf_fail(err, n, "%s: tensor '%s' is %s; zinf imports F32, F16 and BF16", fn, e->name, st_dtype_name(e->dtype));
        bool same = e->rank == G->rank;
        for (int d = 0; same && d < G->rank; d++) same = e->shape[d] == G->shape[d];
        if (same) continue;
        char a[160], b[160];
        const PlanTensor *t = &p->tensors[l->pieces[G->first].tensor];
        return hf_fail(err, n, "%s: tensor '%s' has shape %s, the plan needs %s (for '%s'%s)", fn, e->name,
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
        if (m->shard < 0) return hf_fail(err, n, "hf: the master of '%s' has no shard", t->name);
        const PlanShard *a = &p->shards[t->shard], *b = &p->shards[m->shard];
        if (m->dtype != DT_F32 || a->ntiles != b->ntiles || a->tile_elems != b->tile_elems || a->tile_shard != b->tile_shard ||
            a->partitioned != b->partitioned)
            return hf_fail(err, n, "hf: the master of '%s' is sharded unlike it; this import cannot write it", t->name);
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
    if (!x->transpose) {
        for (int64_t i = r0; i < r1; i++) {
            int64_t el = i * x->hstride + x->src_col + (c0 - x->pc);
            if (hf_runs_add(&runs, e->offset + (uint64_t)el * es, a + (size_t)((i - r0) * w) * es, (uint64_t)w * es, err, n)) return -1;
        }
    } else {
        for (int64_t j = c0; j < c1; j++) {
            int64_t el = (x->src_col + j - x->pc) * x->hstride + r0;
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
            if (read_block(im, x, ent, r0, r1, b0, b1, err, n)) return -1;
            if (mbuf >= 0 && write_block(im, mbuf, DT_F32, x, r0, r1, b0, b1, s, e, base, err, n)) return -1;
            if (write_block(im, p->shards[t->shard].buffer, t->dtype, x, r0, r1, b0, b1, s, e, base, err, n)) return -1;
        }
    return 0;
}

static int import_copy(Imp *im, char *err, size_t n) {
    const Plan *p = im->r->p;
    const HfLayout *l = im->l;
    int rank = im->r->c->rank;
    for (int i = 0; i < l->npieces; i++) {
        const HfPiece *x = &l->pieces[i];
        const PlanShard *sh = &p->shards[p->tensors[x->tensor].shard];
        if (!i || l->pieces[i - 1].tensor != x->tensor) im->rep->params++;
        for (int32_t u = 0; u < sh->ntiles; u++) {
            int64_t w0 = sh->partitioned ? (int64_t)rank * sh->tile_shard : 0;
            int64_t cnt = min64(sh->tile_shard, sh->tile_elems - w0);
            if (cnt <= 0) continue;
            int64_t s = (int64_t)u * sh->tile_elems + w0;
            if (copy_interval(im, x, s, s + cnt, (int64_t)u * sh->tile_shard, err, n)) return -1;
        }
    }
    im->rep->tensors = l->ngroups;
    return 0;
}

static int import_checks(Imp *im, char *err, size_t n) {
    if (im->r->step != 0) return hf_fail(err, n, "--init sets the weights of a run at step 0, this one is at step %" PRId64, im->r->step);
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
    Imp im = {.r = r, .l = &l, .s = &s, .rep = rep};
    int rc = st_set_open(&s, path, err, n);
    open = !rc;
    rep->files = open ? s.nfiles : 0;
    if (!rc) {
        uint32_t own;
        rep->own_names = uses_own_names(r->p, &s, &own);
        if (rep->own_names && !own && !has_mapping(r->p))
            rc = hf_fail(err, n, "%s: the plan has no Hugging Face mapping (its model has no hf block), and this is not a zinfrun --export "
                                 "file of its model (none of its parameter names is there): compile the model with an hf block, "
                                 "or from a Hugging Face directory with zinfc --from-hf DIR", path);
        else
            rc = rep->own_names ? layout_by_names(r->p, &l, err, n) : hf_layout_build(r->p, &l, err, n);
    }
    if (!rc && !(im.ent = calloc((size_t)l.ngroups, sizeof *im.ent))) rc = hf_fail(err, n, "out of memory");
    if (!rc) rc = import_checks(&im, err, n);
    if (!rc) rc = hf_stage_init(&im.st, o, err, n);
    int bad = hf_agree(r, rc, err, n);
    if (bad > 0 && !rc) rc = hf_fail(err, n, "rank %d could not use the checkpoint %s (its message says why); nothing was imported", bad - 1, path);
    if (bad < 0) rc = -1;
    if (!rc) rc = import_copy(&im, err, n);
    bad = hf_agree(r, rc, err, n);
    if (bad > 0 && !rc) rc = hf_fail(err, n, "rank %d failed importing %s (its message says why)", bad - 1, path);
    if (bad < 0) rc = -1;
    hf_stage_free(&im.st);
    free(im.ent);
    if (open) st_set_close(&s);
    hf_layout_free(&l);
    return rc;
}
