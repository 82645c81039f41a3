/* graph_plan: copies a Graph's tensor and op tables and its Hugging Face
 * mapping into a Plan (compiler/graph_plan.h). */
#include "graph_plan.h"
#include <stdio.h>
#include <string.h>

static void copy_tensor(Arena *pa, const GTensor *t, PlanTensor *pt) {
    pt->name = arena_strdup(pa, t->name ? t->name : "");
    pt->dtype = (uint8_t)t->dtype;
    pt->cls = (uint8_t)t->cls;
    pt->init = (uint8_t)t->init;
    pt->rank = (uint8_t)t->rank;
    for (int d = 0; d < t->rank; d++) pt->dims[d] = t->dims[d];
    pt->numel = t->numel;
    pt->init_std = t->init_std;
    pt->param = t->param;
    pt->grad = t->grad;
    pt->master = t->master;
    pt->momentum = t->momentum;
    pt->variance = t->variance;
    pt->segment = t->segment;
    pt->shard = -1;
}

static void copy_op(Arena *pa, const GOp *o, PlanOp *po) {
    po->kind = (uint8_t)o->kind;
    po->prim = (uint8_t)o->prim;
    po->nin = (uint8_t)o->nin;
    po->nout = (uint8_t)o->nout;
    for (int k = 0; k < PLAN_MAX_IN; k++) po->in[k] = k < o->nin ? o->in[k] : -1;
    for (int k = 0; k < PLAN_MAX_OUT; k++) po->out[k] = k < o->nout ? o->out[k] : -1;
    memcpy(po->iattr, o->iattr, sizeof po->iattr);
    memcpy(po->fattr, o->fattr, sizeof po->fattr);
    po->segment = o->segment;
    po->fwd = o->fwd;
    po->nfin = o->nfin;
    po->scope = arena_strdup(pa, o->scope ? o->scope : "");
    po->ntable = (uint32_t)(o->ntable > 0 ? o->ntable : 0);
    double *tab = po->ntable ? ARENA_NEWN(pa, double, po->ntable) : NULL;
    if (tab) memcpy(tab, o->table, po->ntable * sizeof *tab);
    else po->ntable = 0;
    po->table = tab;
}

/* The Hugging Face mapping (tensor ids are the graph's). */
static void copy_hf(const Graph *g, Plan *p) {
    Arena *pa = &p->arena;
    if (!g->hf.arch) return;
    p->hf.arch = arena_strdup(pa, g->hf.arch);
    p->hf.config = arena_strdup(pa, g->hf.config ? g->hf.config : "");
    p->hf.pieces = ARENA_NEWN(pa, PlanHfPiece, g->hf.npieces + 1);
    if (!p->hf.pieces) return;
    for (int i = 0; i < g->hf.npieces; i++) {
        const GraphHfPiece *h = &g->hf.pieces[i];
        p->hf.pieces[i] = (PlanHfPiece){h->tensor, arena_strdup(pa, h->hf_name), h->transpose, h->src_col, h->cols, h->stacked,
                                        h->index, h->layout};
    }
    p->hf.npieces = (uint32_t)g->hf.npieces;
}

bool graph_plan_tables(const Graph *g, Plan *p, char *err, size_t errlen) {
    Arena *pa = &p->arena;
    p->ntensors = (uint32_t)g->ntensors;
    p->tensors = ARENA_NEWN(pa, PlanTensor, g->ntensors + 1);
    if (p->tensors)
        for (int i = 0; i < g->ntensors; i++) copy_tensor(pa, &g->tensors[i], &p->tensors[i]);
    copy_hf(g, p);
    p->nops = (uint32_t)g->nops;
    p->ops = ARENA_NEWN(pa, PlanOp, g->nops + 1);
    if (p->ops)
        for (int i = 0; i < g->nops; i++) copy_op(pa, &g->ops[i], &p->ops[i]);
    if (pa->failed || !p->tensors || !p->ops) {
        if (errlen) snprintf(err, errlen, "out of memory copying the graph's %d tensors and %d ops into the plan", g->ntensors, g->nops);
        return false;
    }
    return true;
}
