/* hfio_layout: the Hugging Face mapping's layout (HfLayout): of the plan's
 * hf block, or of its own parameter names (a file of zinfrun --export),
 * and which of the two a checkpoint uses; hfio_check_plan. */
#include "hfio_impl.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hf_layout_free(HfLayout *l) {
    free(l->pieces);
    free(l->groups);
    memset(l, 0, sizeof *l);
}

/* A piece's parameter as a matrix, and the checks every piece needs. */
static int piece_init(const Plan *p, const PlanHfPiece *x, HfPiece *pc, const HfPiece *prev, char *err, size_t n) {
    const PlanTensor *t = &p->tensors[x->tensor];
    if (t->shard < 0 || (uint32_t)t->shard >= p->nshards) return errorf(err, n, "hf: parameter '%s' has no shard", t->name);
    if (st_dtype_from_plan(t->dtype) < 0 && !dtype_is_quant(t->dtype)) /* quantized: encoded on import, decoded on export */
        return errorf(err, n, "hf: parameter '%s' is %s; Hugging Face weights are floats", t->name, dtype_name((DType)t->dtype));
    const PlanShard *s = &p->shards[t->shard];
    if (s->ntiles < 1 || s->tile_elems < 1 || (int64_t)s->ntiles * s->tile_elems != t->numel || s->tile_shard < 1)
        return errorf(err, n, "hf: the shard of '%s' does not cover it (%d tiles of %" PRId64 ")", t->name, s->ntiles, s->tile_elems);
    pc->tensor = x->tensor;
    pc->cols = t->rank ? t->dims[t->rank - 1] : 1;
    pc->rows = pc->cols ? t->numel / pc->cols : 0;
    pc->stacked = x->stacked;
    pc->row0 = 0;
    pc->nrows = pc->rows;
    if (x->stacked) { /* the slice P[index]: rows / dims[0] rows of P as a matrix */
        if (t->rank < 2 || x->index < 0 || x->index >= t->dims[0])
            return errorf(err, n, "hf: a stacked piece of '%s' has index %d", t->name, x->index);
        pc->nrows = pc->rows / t->dims[0];
        pc->row0 = x->index * pc->nrows;
    }
    pc->pc = prev && prev->tensor == x->tensor && prev->row0 == pc->row0 ? prev->pc + prev->w : 0;
    pc->w = x->cols;
    pc->src_col = x->src_col;
    pc->transpose = x->transpose;
    pc->group = -1;
    pc->layout = x->layout;
    if (x->layout != PLAN_HF_PLAIN) { /* PEFT's expert layouts: a rank-3 parameter whole (verified) */
        if (t->rank != 3 || x->transpose || x->stacked || x->src_col || x->cols != pc->cols)
            return errorf(err, n, "hf: the expert layout of '%s' needs the whole rank-3 parameter", t->name);
        pc->experts = t->dims[0];
        pc->per = t->dims[1];
    }
    return 0;
}

/* Whether two parameters read one HF tensor with the same rows: all axes
 * but the last equal (transposed: the first; stacked: of the slices, so
 * without the first). */
static bool same_rows(const PlanTensor *a, const PlanTensor *b, bool transpose, bool stacked) {
    if (transpose) return a->dims[0] == b->dims[0];
    if (a->rank != b->rank) return false;
    for (int d = stacked ? 1 : 0; d + 1 < a->rank; d++)
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
            return errorf(err, n, "hf tensor '%s': columns [%" PRId64 ", %" PRId64 ") come from no parameter", G->name, end, x->src_col);
        if (x->src_col < end)
            return errorf(err, n, "hf tensor '%s': columns [%" PRId64 ", %" PRId64 ") of '%s' and [%" PRId64 ", %" PRId64 ") of '%s' overlap",
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
        return errorf(err, n, "hf tensor '%s' is %s, but '%s' (%s) reads columns [%" PRId64 ", %" PRId64 ") of it %s", G->name,
                       hf_shape_str(G->shape, G->rank, a, sizeof a), t->name, hf_shape_str(t->dims, t->rank, b, sizeof b), x->src_col,
                       x->src_col + x->w, x->transpose ? "transposed" : "as it is");
    return 0;
}

/* Shape, dtype and column checks of group g. */
static int group_finish(const Plan *p, HfLayout *l, int g, int *idx, char *err, size_t n) {
    HfGroup *G = &l->groups[g];
    const PlanTensor *t0 = &p->tensors[l->pieces[G->first].tensor];
    bool stacked = l->pieces[G->first].stacked;
    for (int i = G->first; i < l->npieces; i++) {
        const HfPiece *x = &l->pieces[i];
        const PlanTensor *t = &p->tensors[x->tensor];
        char a[160], b[160];
        if (x->group == g && x->stacked != stacked)
            return errorf(err, n, "hf tensor '%s' is one slice of '%s' and all of '%s'; a tensor is stacked in every piece or "
                          "in none", G->name, stacked ? t0->name : t->name, stacked ? t->name : t0->name);
        if (x->group == g && x->transpose == G->transpose && !same_rows(t0, t, G->transpose, stacked))
            return errorf(err, n, "hf tensor '%s': '%s' is %s but '%s' is %s; the pieces of one tensor need the same %s", G->name,
                          t0->name, hf_shape_str(t0->dims, t0->rank, a, sizeof a), t->name, hf_shape_str(t->dims, t->rank, b, sizeof b),
                          G->transpose ? "first axis" : "axes but the last");
    }
    int64_t H = 0;
    if (group_columns(p, l, g, idx, &H, err, n)) return -1;
    if (G->transpose) {
        G->rank = 2;
        G->shape[0] = H;
        G->shape[1] = t0->dims[0];
    } else { /* stacked: the shape of one slice */
        int s = stacked ? 1 : 0;
        G->rank = t0->rank - s;
        for (int d = s; d + 1 < t0->rank; d++) G->shape[d - s] = t0->dims[d];
        G->shape[G->rank - 1] = H;
    }
    const HfPiece *x0 = &l->pieces[G->first];
    if (x0->layout != PLAN_HF_PLAIN) { /* PEFT's [E r, I] or [O, r E] */
        for (int i = G->first + 1; i < l->npieces; i++)
            if (l->pieces[i].group == g)
                return errorf(err, n, "hf tensor '%s' is an expert layout of '%s' and is read by '%s' too", G->name, t0->name,
                              p->tensors[l->pieces[i].tensor].name);
        G->rank = 2;
        G->shape[0] = x0->layout == PLAN_HF_EXPERT_ROWS ? x0->rows : x0->per;
        G->shape[1] = x0->layout == PLAN_HF_EXPERT_ROWS ? x0->cols : x0->cols * x0->experts;
    }
    G->numel = 1;
    for (int d = 0; d < G->rank; d++) G->numel *= (uint64_t)G->shape[d];
    G->dtype = dtype_is_quant(t0->dtype) ? p->train.dtype : t0->dtype; /* exported dequantized, in the training dtype */
    for (int i = G->first; i < l->npieces; i++) {
        HfPiece *x = &l->pieces[i];
        if (x->group != g) continue;
        if (x->transpose != G->transpose) {
            if (alias_fits(p, G, x, err, n)) return -1;
        } else {
            x->hstride = G->transpose ? x->nrows : H;
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
    int rc = l->pieces && l->groups && idx ? 0 : errorf(err, n, "out of memory for the hf mapping");
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

bool hf_has_mapping(const Plan *p) { return p->hf.arch && p->hf.arch[0] && p->hf.npieces; }

int hf_layout_build(const Plan *p, HfLayout *l, char *err, size_t n) {
    memset(l, 0, sizeof *l);
    if (!hf_has_mapping(p))
        return errorf(err, n, "the plan has no Hugging Face mapping (its model has no hf block): compile the model with one, "
                              "or from a Hugging Face directory with zinfc --from-hf DIR");
    return layout_from(p, p->hf.pieces, p->hf.npieces, l, err, n);
}

/* Whether a parameter is one zinfrun --export writes (rt_export_safetensors):
 * every parameter with a shard, under its own name. */
static bool exported_param(const Plan *p, uint32_t t) { return p->tensors[t].cls == TC_PARAM && p->tensors[t].shard >= 0; }

/* The mapping of zinfrun --export's file: each parameter is the tensor of
 * its own name, whole, as it is. The pieces name the plan's strings, so
 * the layout outlives the array built here. */
int hf_layout_by_names(const Plan *p, HfLayout *l, char *err, size_t n) {
    uint32_t np = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) np += exported_param(p, t);
    PlanHfPiece *pc = calloc(np ? np : 1, sizeof *pc);
    if (!pc) return errorf(err, n, "out of memory for the parameter names");
    uint32_t k = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const PlanTensor *pt = &p->tensors[t];
        if (exported_param(p, t))
            pc[k++] = (PlanHfPiece){(int32_t)t, pt->name, 0, 0, pt->rank ? pt->dims[pt->rank - 1] : 1, 0, 0, 0};
    }
    int rc = layout_from(p, pc, k, l, err, n);
    for (int g = 0; !rc && g < l->ngroups; g++) l->groups[g].adapter = false; /* an export holds every parameter */
    free(pc);
    return rc;
}

/* Which names the checkpoint uses: the plan's own parameter names (a file
 * of zinfrun --export) when it holds more of them than of the hf
 * mapping's names, or when the plan has no mapping; else the mapping's. */
bool hf_uses_own_names(const Plan *p, const StSet *s, uint32_t *own) {
    uint32_t hf = 0;
    *own = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) *own += exported_param(p, t) && st_set_find(s, p->tensors[t].name);
    for (uint32_t i = 0; i < p->hf.npieces; i++) hf += st_set_find(s, p->hf.pieces[i].hf_name) != NULL;
    return !hf_has_mapping(p) || *own > hf;
}

int hfio_check_plan(const Plan *p, char *err, size_t n) {
    HfLayout l;
    if (hf_layout_build(p, &l, err, n)) return -1;
    hf_layout_free(&l);
    return 0;
}
