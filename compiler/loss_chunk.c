#include "loss_chunk.h"
#include <string.h>

bool loss_chunk_find(const Graph *g, int *proj, int *xent) {
    if (g->loss < 0 || g->loss >= g->ntensors) return false;
    int xo = g->tensors[g->loss].producer;
    if (xo < 0 || xo >= g->nforward || g->ops[xo].prim != PRIM_CROSS_ENTROPY || g->ops[xo].nin != 2) return false;
    int logits = g->ops[xo].in[0];
    if (logits < 0) return false;
    int po = g->tensors[logits].producer;
    if (po < 0 || po >= g->nforward) return false;
    const GOp *p = &g->ops[po];
    bool mm = p->prim == PRIM_MATMUL && p->nin == 2 && !p->iattr[IA_MATMUL_TRANSPOSE_A];
    bool lin = p->prim == PRIM_LINEAR && (p->nin == 2 || p->in[2] < 0);
    if (!mm && !lin) return false;
    if (g->tensors[p->in[1]].rank != 2) return false;
    /* the logits feed the loss alone */
    for (int i = 0; i < g->nforward; i++)
        for (int k = 0; k < g->ops[i].nin; k++)
            if (g->ops[i].in[k] == logits && i != xo) return false;
    *proj = po;
    *xent = xo;
    return true;
}

void loss_chunk_shape(const Graph *g, int xent, int64_t *rows, int64_t *vocab) {
    const GTensor *l = &g->tensors[g->ops[xent].in[0]];
    *vocab = l->rank ? l->dims[l->rank - 1] : 1;
    *rows = *vocab ? l->numel / *vocab : 0;
}

int64_t loss_chunk_rows(const Graph *g, const Target *t) {
    int proj, xent;
    if (!loss_chunk_find(g, &proj, &xent)) return 0;
    int64_t R, V;
    loss_chunk_shape(g, xent, &R, &V);
    DType dt = g->tensors[g->ops[xent].in[0]].dtype;
    /* a row's scratch: logits and their gradient in fp32 and, unless f32, in the activation dtype */
    int64_t per_row = V * (dt == DT_F32 ? 8 : 12);
    int64_t budget = (int64_t)(t->gpu_memory / 64);
    int64_t c = per_row > 0 ? budget / per_row : R;
    if (c >= 64) c -= c % 64;
    if (c < 1) c = 1;
    return c > R ? R : c;
}

static uint64_t align64(uint64_t n) { return (n + 63) / 64 * 64; }

uint64_t loss_chunk_workspace_bytes(const Graph *g) {
    for (int i = 0; i < g->nforward; i++) {
        const GOp *o = &g->ops[i];
        if (o->prim != PRIM_LINEAR_CROSS_ENTROPY || o->nin < 3 || o->in[0] < 0 || o->in[1] < 0 || o->in[2] < 0) continue;
        const GTensor *x = &g->tensors[o->in[0]], *w = &g->tensors[o->in[1]], *t = &g->tensors[o->in[2]];
        if (x->rank < 1 || w->rank != 2) return 0;
        bool tb = o->iattr[IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B] != 0;
        uint64_t R = (uint64_t)t->numel, D = (uint64_t)x->dims[x->rank - 1], V = (uint64_t)(tb ? w->dims[0] : w->dims[1]);
        int64_t ch = o->iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK];
        uint64_t C = ch <= 0 || (uint64_t)ch > R ? R : (uint64_t)ch;
        bool f = x->dtype == DT_F32;
        uint64_t dsz = f ? 4 : 2, cv = align64(4 * C * V), cd = align64(4 * C * D);
        return align64(4 * R) + align64(4 * R * D) + align64(4 * V * D) + (w->dtype == DT_F32 ? 0 : align64(4 * V * D)) +
               (f ? 0 : cd) + cv + (f ? 0 : align64(dsz * C * V)) + align64(dsz * C * V) + (f ? 0 : cv);
    }
    return 0;
}

bool loss_chunk_apply(Graph *g, int64_t chunk) {
    int proj, xent;
    if (!loss_chunk_find(g, &proj, &xent)) return false;
    const GOp *p = &g->ops[proj];
    GOp f = g->ops[xent];
    f.prim = PRIM_LINEAR_CROSS_ENTROPY;
    f.nin = 3;
    f.in[0] = p->in[0];
    f.in[1] = p->in[1];
    f.in[2] = g->ops[xent].in[1];
    memset(f.iattr, 0, sizeof f.iattr);
    memset(f.fattr, 0, sizeof f.fattr);
    f.iattr[IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B] = p->prim == PRIM_MATMUL && p->iattr[IA_MATMUL_TRANSPOSE_B];
    f.iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK] = chunk;
    g->ops[xent] = f;
    /* the projection's op goes; the logits tensor stays, made by nothing and used by nothing */
    g->tensors[p->out[0]].producer = -1;
    memmove(&g->ops[proj], &g->ops[proj + 1], sizeof *g->ops * (size_t)(g->nops - proj - 1));
    g->nops--;
    g->nforward--;
    if (g->nbackward_end > proj) g->nbackward_end--;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].producer > proj) g->tensors[i].producer--;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].fwd > proj) g->ops[i].fwd--;
    return true;
}

bool loss_chunk_copy_graph(const Graph *g, Graph *out) {
    *out = *g;
    out->tensors = ARENA_NEWN(g->arena, GTensor, g->tcap > 0 ? g->tcap : 1);
    out->ops = ARENA_NEWN(g->arena, GOp, g->ocap > 0 ? g->ocap : 1);
    if (!out->tensors || !out->ops) return false;
    if (g->ntensors) memcpy(out->tensors, g->tensors, sizeof *g->tensors * (size_t)g->ntensors);
    if (g->nops) memcpy(out->ops, g->ops, sizeof *g->ops * (size_t)g->nops);
    return true;
}
