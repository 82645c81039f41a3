#include "mlp_tile.h"
#include <stdlib.h>
#include <string.h>

/* How many forward ops read tensor t (each input slot counts). */
static int uses(const Graph *g, int t) {
    int n = 0;
    for (int i = 0; i < g->nforward; i++)
        for (int k = 0; k < g->ops[i].nin; k++) n += g->ops[i].in[k] == t;
    return n;
}

/* The forward op reading t (the only one: uses(t) == 1). */
static int user(const Graph *g, int t) {
    for (int i = 0; i < g->nforward; i++)
        for (int k = 0; k < g->ops[i].nin; k++)
            if (g->ops[i].in[k] == t) return i;
    return -1;
}

static bool is_param2(const Graph *g, int t) { return t >= 0 && g->tensors[t].cls == TC_PARAM && g->tensors[t].rank == 2; }

/* A linear without a bias of x by a rank-2 parameter. */
static bool plain_linear(const Graph *g, int op, int x) {
    const GOp *o = &g->ops[op];
    return o->kind == OP_FWD && o->prim == PRIM_LINEAR && (o->nin == 2 || o->in[2] < 0) && o->in[0] == x && is_param2(g, o->in[1]);
}

/* An intermediate of the block: used once, not the loss, not an input. */
static bool inner(const Graph *g, int t) { return t >= 0 && t != g->loss && uses(g, t) == 1 && g->tensors[t].producer >= 0; }

/* The block whose norm is op i, or false. */
static bool match(const Graph *g, int i, MlpBlock *b) {
    const GOp *no = &g->ops[i];
    if (no->kind != OP_FWD || no->prim != PRIM_RMSNORM || no->nin != 2 || no->in[1] < 0 || no->iattr[IA_RMSNORM_HEADS] > 1)
        return false;
    if (g->tensors[no->in[1]].cls != TC_PARAM || g->tensors[no->in[1]].rank != 1) return false;
    int n = no->out[0];
    if (n < 0 || n == g->loss || uses(g, n) != 2) return false;
    int l[2], nl = 0;
    for (int k = 0; k < g->nforward && nl <= 2; k++)
        for (int s = 0; s < g->ops[k].nin; s++)
            if (g->ops[k].in[s] == n) {
                if (nl < 2) l[nl] = k;
                nl++;
            }
    if (nl != 2 || l[0] == l[1] || !plain_linear(g, l[0], n) || !plain_linear(g, l[1], n)) return false;
    for (int gi = 0; gi < 2; gi++) {
        int gate = l[gi], up = l[1 - gi];
        int a = g->ops[gate].out[0], u = g->ops[up].out[0];
        if (!inner(g, a) || !inner(g, u)) continue;
        int act = user(g, a);
        const GOp *ao = &g->ops[act];
        if (ao->prim != PRIM_SILU && ao->prim != PRIM_GELU) continue;
        int s = ao->out[0];
        if (!inner(g, s)) continue;
        int mul = user(g, s);
        const GOp *mo = &g->ops[mul];
        if (mo->prim != PRIM_MUL || mo->nin != 2 || user(g, u) != mul || mo->in[0] == mo->in[1]) continue;
        int h = mo->out[0];
        if (!inner(g, h)) continue;
        int down = user(g, h);
        if (!plain_linear(g, down, h)) continue;
        const GTensor *wg = &g->tensors[g->ops[gate].in[1]], *wu = &g->tensors[g->ops[up].in[1]],
                      *wd = &g->tensors[g->ops[down].in[1]], *x = &g->tensors[no->in[0]];
        int64_t D = x->dims[x->rank - 1], I = wg->dims[1];
        if (wg->dims[0] != D || wu->dims[0] != D || wu->dims[1] != I || wd->dims[0] != I || wd->dims[1] != D) continue;
        /* one checkpoint segment: the op replaces them in the down projection's place */
        int seg = no->segment;
        if (g->ops[gate].segment != seg || g->ops[up].segment != seg || ao->segment != seg || mo->segment != seg ||
            g->ops[down].segment != seg)
            continue;
        *b = (MlpBlock){i, gate, act, up, mul, down};
        return true;
    }
    return false;
}

int mlp_tile_find(const Graph *g, MlpBlock *out, int max) {
    int n = 0;
    for (int i = 0; i < g->nforward; i++) {
        MlpBlock b;
        if (!match(g, i, &b)) continue;
        if (out && n < max) out[n] = b;
        n++;
    }
    return n;
}

bool mlp_tile_shape(const Graph *g, int64_t *rows, int64_t *D, int64_t *I) {
    MlpBlock b;
    if (mlp_tile_find(g, &b, 1) < 1) return false;
    const GTensor *x = &g->tensors[g->ops[b.norm].in[0]];
    *D = x->dims[x->rank - 1];
    *I = g->tensors[g->ops[b.gate].in[1]].dims[1];
    *rows = *D ? x->numel / *D : 0;
    return true;
}

/* ---- the workspace, as runtime/hostk/hostk_gmlp.c lays it out ---- */

static uint64_t align64(uint64_t n) { return (n + 63) / 64 * 64; }
static uint64_t dsize(DType dt) { return dt == DT_F32 ? 4 : 2; }
/* hk_f32_copy_bytes: an fp32 copy of what is not f32 */
static uint64_t f32_copy(DType dt, uint64_t numel) { return dt == DT_F32 ? 0 : align64(4 * numel); }

/* hostk's rows chunking of a norm (hostk_rows.c): its fp64 partial sums */
static uint64_t norm_partial(int64_t R, int64_t D) {
    int64_t c = (R + 63) / 64;
    if (c < 16) c = 16;
    int64_t chunks = R > 0 ? (R + c - 1) / c : 0;
    return align64((uint64_t)chunks * (uint64_t)D * 8);
}

typedef struct WsShape {
    uint64_t C, D, I;
    DType x, y, g, wg, wu, wd;
    uint64_t wnumel;
} WsShape;

static uint64_t ws_bytes(const WsShape *s) {
    uint64_t ed = dsize(s->y);
    /* the norm family: rstd and partial sums of a tile, then room for offset + g */
    uint64_t norm = align64(align64(align64(4 * s->C) + norm_partial((int64_t)s->C, (int64_t)s->D)) + 4 * s->D);
    /* hk_linear_workspace_bytes: fp32 copies of x, w, y and of the larger of x and w */
    uint64_t lin[3];
    DType w3[3] = {s->wg, s->wu, s->wd};
    for (int k = 0; k < 3; k++) {
        uint64_t in = k < 2 ? s->C * s->D : s->C * s->I, out = k < 2 ? s->C * s->I : s->C * s->D;
        uint64_t ga = f32_copy(s->y, in), gb = f32_copy(w3[k], s->wnumel), gy = f32_copy(s->y, out);
        lin[k] = ga + gb + gy + (ga > gb ? ga : gb);
    }
    uint64_t lw = lin[0] > lin[1] ? lin[0] : lin[1];
    lw = align64(lw > lin[2] ? lw : lin[2]);
    uint64_t acc = (s->g == DT_F32 ? 0 : align64(4 * s->D)) + (s->wg == DT_F32 ? 0 : align64(4 * s->wnumel)) +
                   (s->wu == DT_F32 ? 0 : align64(4 * s->wnumel)) + (s->wd == DT_F32 ? 0 : align64(4 * s->wnumel));
    return 2 * align64(s->C * s->D * ed) + 8 * align64(s->C * s->I * ed) + norm + lw + acc;
}

/* The workspace shape of a gated_mlp op (or of a block about to be one) at C rows. */
static WsShape ws_shape(const Graph *g, int x, int gain, int wg, int wu, int wd, int y, int64_t C) {
    const GTensor *xt = &g->tensors[x];
    WsShape s;
    s.D = (uint64_t)xt->dims[xt->rank - 1];
    s.I = (uint64_t)g->tensors[wg].dims[1];
    uint64_t R = s.D ? (uint64_t)xt->numel / s.D : 0;
    s.C = C <= 0 || (uint64_t)C > R ? R : (uint64_t)C;
    if (s.C < 1) s.C = 1;
    s.x = xt->dtype;
    s.y = g->tensors[y].dtype;
    s.g = g->tensors[gain].dtype;
    s.wg = g->tensors[wg].dtype;
    s.wu = g->tensors[wu].dtype;
    s.wd = g->tensors[wd].dtype;
    s.wnumel = s.D * s.I;
    return s;
}

uint64_t mlp_tile_workspace_bytes(const Graph *g) {
    uint64_t best = 0;
    for (int i = 0; i < g->nforward; i++) {
        const GOp *o = &g->ops[i];
        if (o->kind != OP_FWD || o->prim != PRIM_GATED_MLP || o->nin != 5 || o->out[0] < 0) continue;
        bool all = true;
        for (int k = 0; k < 5; k++) all = all && o->in[k] >= 0;
        if (!all) continue;
        WsShape s = ws_shape(g, o->in[0], o->in[1], o->in[2], o->in[3], o->in[4], o->out[0], o->iattr[IA_GATED_MLP_ROWS]);
        uint64_t b = ws_bytes(&s);
        if (b > best) best = b;
    }
    return best;
}

int64_t mlp_tile_rows(const Graph *g, const Target *t) {
    MlpBlock b;
    if (mlp_tile_find(g, &b, 1) < 1) return 0;
    const GOp *no = &g->ops[b.norm];
    int x = no->in[0], y = g->ops[b.down].out[0];
    WsShape s1 = ws_shape(g, x, no->in[1], g->ops[b.gate].in[1], g->ops[b.up].in[1], g->ops[b.down].in[1], y, 64);
    WsShape s2 = s1;
    s1.C = 64; /* unclamped by the rows: the growth of a tile of 64 more */
    s2.C = 128;
    int64_t R = s1.D ? g->tensors[x].numel / (int64_t)s1.D : 0;
    /* a row's share of the scratch; the tile-independent rest (the weights' fp32 copies and accumulators) is apart */
    int64_t per_row = (int64_t)((ws_bytes(&s2) - ws_bytes(&s1)) / 64);
    int64_t budget = (int64_t)(t->gpu_memory / 64);
    int64_t c = per_row > 0 ? budget / per_row : R;
    if (c >= 64) c -= c % 64;
    if (c < 1) c = 1;
    return c > R ? R : c;
}

int mlp_tile_apply(Graph *g, int64_t rows) {
    int n = mlp_tile_find(g, NULL, 0);
    if (n <= 0) return 0;
    MlpBlock *bl = malloc(sizeof *bl * (size_t)n);
    bool *gone = calloc((size_t)g->nops + 1, sizeof *gone);
    int *map = malloc(sizeof *map * ((size_t)g->nops + 1));
    if (!bl || !gone || !map) {
        free(bl), free(gone), free(map);
        return -1;
    }
    mlp_tile_find(g, bl, n);
    for (int k = 0; k < n; k++) {
        const MlpBlock *b = &bl[k];
        const GOp *no = &g->ops[b->norm];
        GOp f = g->ops[b->down];
        f.prim = PRIM_GATED_MLP;
        f.nin = 5;
        memset(f.in, -1, sizeof f.in);
        f.in[0] = no->in[0];
        f.in[1] = no->in[1];
        f.in[2] = g->ops[b->gate].in[1];
        f.in[3] = g->ops[b->up].in[1];
        f.in[4] = g->ops[b->down].in[1];
        memset(f.iattr, 0, sizeof f.iattr);
        memset(f.fattr, 0, sizeof f.fattr);
        f.iattr[IA_GATED_MLP_ACT] = g->ops[b->act].prim == PRIM_GELU ? GATED_MLP_GELU : GATED_MLP_SILU;
        f.iattr[IA_GATED_MLP_ROWS] = rows;
        f.fattr[FA_GATED_MLP_EPS] = no->fattr[FA_RMSNORM_EPS];
        f.fattr[FA_GATED_MLP_OFFSET] = no->fattr[FA_RMSNORM_OFFSET];
        f.scope = no->scope; /* the block's call path beside the down projection's own */
        int drop[5] = {b->norm, b->gate, b->act, b->up, b->mul};
        for (int j = 0; j < 5; j++) {
            gone[drop[j]] = true;
            g->tensors[g->ops[drop[j]].out[0]].producer = -1; /* made by nothing and used by nothing */
        }
        g->ops[b->down] = f;
    }
    /* drop the replaced ops, keeping the order of the rest */
    int w = 0, nf = 0, nb = 0;
    for (int i = 0; i < g->nops; i++) {
        map[i] = gone[i] ? -1 : w;
        if (gone[i]) continue;
        if (i < g->nforward) nf++;
        if (i < g->nbackward_end) nb++;
        g->ops[w++] = g->ops[i];
    }
    g->nops = w;
    g->nforward = nf;
    g->nbackward_end = nb;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].producer >= 0) g->tensors[i].producer = map[g->tensors[i].producer];
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].fwd >= 0) g->ops[i].fwd = map[g->ops[i].fwd];
    free(bl), free(gone), free(map);
    return n;
}
