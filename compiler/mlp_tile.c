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

static int prod(const Graph *g, int t) { return t >= 0 ? g->tensors[t].producer : -1; }

/* Projection `base` (a plain linear of v) and, when its output is added
 * to scale(linear(linear(v, A), B)), that LoRA adapter; p->out: the final
 * value. */
static void proj_of(const Graph *g, int v, int base, MlpProj *p) {
    *p = (MlpProj){base, -1, -1, -1, -1, g->ops[base].out[0]};
    int y0 = p->out;
    if (!inner(g, y0)) return;
    int add = user(g, y0);
    const GOp *ao = &g->ops[add];
    if (ao->kind != OP_FWD || ao->prim != PRIM_ADD || ao->nin != 2 || ao->in[0] == ao->in[1]) return;
    int r = ao->in[0] == y0 ? ao->in[1] : ao->in[0];
    int sc = prod(g, r);
    if (!inner(g, r) || sc < 0 || g->ops[sc].prim != PRIM_SCALE || g->ops[sc].nin != 1) return;
    int q = g->ops[sc].in[0], ob = prod(g, q);
    if (!inner(g, q) || ob < 0) return;
    int pt = g->ops[ob].in[0], oa = prod(g, pt);
    if (!plain_linear(g, ob, pt) || !inner(g, pt) || oa < 0 || !plain_linear(g, oa, v)) return;
    *p = (MlpProj){base, oa, ob, sc, add, ao->out[0]};
}

/* The projection among the plain linears ops[0..n) of v whose adapter's
 * A is every other one: false unless exactly one is. */
static bool pick_proj(const Graph *g, int v, const int *ops, int n, MlpProj *out) {
    int found = 0;
    for (int k = 0; k < n; k++) {
        MlpProj p;
        proj_of(g, v, ops[k], &p);
        bool rest = true;
        for (int m = 0; m < n; m++) rest = rest && (m == k || ops[m] == p.a);
        if (rest && (n == 1 || p.a >= 0)) *out = p, found++;
    }
    return found == 1;
}

/* The forward ops reading t, into ops (up to max); how many. */
static int readers(const Graph *g, int t, int *ops, int max) {
    int n = 0;
    for (int k = 0; k < g->nforward; k++)
        for (int s = 0; s < g->ops[k].nin; s++)
            if (g->ops[k].in[s] == t) {
                if (n < max) ops[n] = k;
                n++;
                break;
            }
    return n;
}

/* The block whose norm is op i, or false. */
static bool match(const Graph *g, int i, MlpBlock *b) {
    const GOp *no = &g->ops[i];
    if (no->kind != OP_FWD || no->prim != PRIM_RMSNORM || no->nin != 2 || no->in[1] < 0 || no->iattr[IA_RMSNORM_HEADS] > 1)
        return false;
    if (g->tensors[no->in[1]].cls != TC_PARAM || g->tensors[no->in[1]].rank != 1) return false;
    int n = no->out[0], u[4];
    int nu = n >= 0 && n != g->loss ? readers(g, n, u, 4) : 0;
    if (nu < 2 || nu > 4 || uses(g, n) != nu) return false;
    for (int k = 0; k < nu; k++)
        if (!plain_linear(g, u[k], n)) return false;
    /* the two projections of n: those no adapter reads through */
    MlpProj pr[4];
    int bases[2], nb = 0, nad = 0;
    for (int k = 0; k < nu; k++) proj_of(g, n, u[k], &pr[k]);
    for (int k = 0; k < nu; k++) {
        bool is_a = false;
        for (int m = 0; m < nu; m++) is_a = is_a || (m != k && pr[m].a == u[k]);
        if (is_a) continue;
        if (nb == 2) return false;
        bases[nb++] = k;
        nad += pr[k].a >= 0;
    }
    if (nb != 2 || nb + nad != nu) return false;
    for (int gi = 0; gi < 2; gi++) {
        const MlpProj *gp = &pr[bases[gi]], *up = &pr[bases[1 - gi]];
        int a = gp->out, uo = up->out;
        if (!inner(g, a) || !inner(g, uo)) continue;
        int act = user(g, a);
        const GOp *ao = &g->ops[act];
        if (ao->prim != PRIM_SILU && ao->prim != PRIM_GELU) continue;
        int s = ao->out[0];
        if (!inner(g, s)) continue;
        int mul = user(g, s);
        const GOp *mo = &g->ops[mul];
        if (mo->prim != PRIM_MUL || mo->nin != 2 || user(g, uo) != mul || mo->in[0] == mo->in[1]) continue;
        int h = mo->out[0], hu[2];
        if (h < 0 || h == g->loss) continue;
        int nh = readers(g, h, hu, 2);
        if (nh < 1 || nh > 2 || uses(g, h) != nh || !plain_linear(g, hu[0], h) || (nh == 2 && !plain_linear(g, hu[1], h))) continue;
        MlpProj dp;
        if (!pick_proj(g, h, hu, nh, &dp)) continue;
        const GTensor *wg = &g->tensors[g->ops[gp->base].in[1]], *wu = &g->tensors[g->ops[up->base].in[1]],
                      *wd = &g->tensors[g->ops[dp.base].in[1]], *x = &g->tensors[no->in[0]];
        int64_t D = x->dims[x->rank - 1], I = wg->dims[1];
        if (wg->dims[0] != D || wu->dims[0] != D || wu->dims[1] != I || wd->dims[0] != I || wd->dims[1] != D) continue;
        *b = (MlpBlock){i, act, mul, {*gp, *up, dp}};
        /* one checkpoint segment: the op replaces them in the down projection's place */
        int seg = no->segment;
        bool same = ao->segment == seg && mo->segment == seg;
        for (int k = 0; k < 3; k++) {
            const int *o = &b->proj[k].base;
            for (int m = 0; m < 5; m++) same = same && (o[m] < 0 || g->ops[o[m]].segment == seg);
        }
        if (same) return true;
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
    *I = g->tensors[g->ops[b.proj[0].base].in[1]].dims[1];
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

/* hk_linear_workspace_bytes of v [C, *] (activation dtype dt) by w into [C, *]: fp32 copies of v, w, y and of the larger of v and w */
static uint64_t lin_bytes(DType dt, uint64_t vnumel, const GTensor *w, uint64_t ynumel) {
    uint64_t ga = f32_copy(dt, vnumel), gb = f32_copy(w->dtype, (uint64_t)w->numel), gy = f32_copy(dt, ynumel);
    return ga + gb + gy + (ga > gb ? ga : gb);
}

/* x [..., D], g [D], w_gate and w_up [D, I], w_down [I, D], each adapter
 * [in, r] and [r, out] (what prim.c's rule checks; a graph built by hand
 * may not hold it). */
static bool gmlp_shapes_ok(const Graph *g, const GOp *o, int nf) {
    const GTensor *x = &g->tensors[o->in[0]], *gn = &g->tensors[o->in[1]], *w[3];
    for (int k = 0; k < 3; k++) w[k] = &g->tensors[o->in[2 + k]];
    if (x->rank < 1 || gn->rank != 1 || w[0]->rank != 2 || w[1]->rank != 2 || w[2]->rank != 2) return false;
    int64_t D = x->dims[x->rank - 1], I = w[0]->dims[1];
    if (D < 1 || I < 1 || gn->dims[0] != D || w[0]->dims[0] != D || w[1]->dims[0] != D || w[1]->dims[1] != I ||
        w[2]->dims[0] != I || w[2]->dims[1] != D)
        return false;
    for (int k = 0; nf == 11 && k < 3; k++) {
        int a = o->in[5 + 2 * k], b = o->in[6 + 2 * k];
        if (a < 0 && b < 0) continue;
        if (a < 0 || b < 0) return false;
        const GTensor *A = &g->tensors[a], *B = &g->tensors[b];
        int64_t vin = k < 2 ? D : I, out = k < 2 ? I : D;
        if (A->rank != 2 || B->rank != 2 || A->dims[0] != vin || A->dims[1] < 1 || B->dims[0] != A->dims[1] || B->dims[1] != out)
            return false;
    }
    return true;
}

/* The regions of gated_mlp op o's workspace at C rows a tile (C <= 0: its
 * own rows attribute, clamped to the rows), in hostk_gmlp.c's order:
 * false when o is not a gated_mlp op with its five tensors. */
bool mlp_tile_layout(const Graph *g, const GOp *o, int64_t C, MlpTileWs *w) {
    bool bwd = o->kind == OP_BWD;
    int nf = bwd ? o->nfin : o->nin, yt = bwd ? (nf < o->nin ? o->in[nf] : -1) : o->out[0];
    if (o->prim != PRIM_GATED_MLP || (nf != 5 && nf != 11) || yt < 0) return false;
    for (int k = 0; k < 5; k++)
        if (o->in[k] < 0) return false;
    if (!gmlp_shapes_ok(g, o, nf)) return false;
    memset(w, 0, sizeof *w);
    const GTensor *x = &g->tensors[o->in[0]], *wg = &g->tensors[o->in[2]];
    DType dt = g->tensors[yt].dtype;
    uint64_t D = (uint64_t)x->dims[x->rank - 1], I = (uint64_t)wg->dims[1], R = D ? (uint64_t)x->numel / D : 0, ed = dsize(dt);
    uint64_t c;
    if (C > 0) c = (uint64_t)C;
    else {
        int64_t rows = o->iattr[IA_GATED_MLP_ROWS];
        c = rows <= 0 || (uint64_t)rows > R ? R : (uint64_t)rows;
    }
    if (c < 1) c = 1;
    w->rows = (int64_t)c;
    uint64_t n = 0;
#define TAKE(field, bytes) (w->field = n, n += align64(bytes))
    TAKE(n, c * D * ed);
    TAKE(dn, c * D * ed);
    for (int i = 0; i < 8; i++) TAKE(mid[i], c * I * ed);
    /* the norm family: rstd and partial sums of a tile, then room for offset + g */
    w->norm_bytes = align64(align64(align64(4 * c) + norm_partial((int64_t)c, (int64_t)D)) + 4 * D);
    TAKE(norm, w->norm_bytes);
    uint64_t lw = 0;
    for (int k = 0; k < 3; k++) {
        uint64_t vin = k < 2 ? D : I, out = k < 2 ? I : D;
        uint64_t b = lin_bytes(dt, c * vin, &g->tensors[o->in[2 + k]], c * out);
        lw = b > lw ? b : lw;
        if (nf < 11 || o->in[5 + 2 * k] < 0) continue;
        const GTensor *A = &g->tensors[o->in[5 + 2 * k]];
        uint64_t r = (uint64_t)A->dims[1];
        b = lin_bytes(dt, c * vin, A, c * r);
        lw = b > lw ? b : lw;
        b = lin_bytes(dt, c * r, &g->tensors[o->in[6 + 2 * k]], c * out);
        lw = b > lw ? b : lw;
    }
    w->lin_bytes = align64(lw);
    TAKE(lin, w->lin_bytes);
    for (int k = 0; k < 3; k++) {
        if (nf < 11 || o->in[5 + 2 * k] < 0) continue;
        uint64_t out = k < 2 ? I : D, r = (uint64_t)g->tensors[o->in[5 + 2 * k]].dims[1];
        for (int j = 0; j < 4; j++) TAKE(ad[k][j], c * out * ed);
        for (int j = 4; j < 6; j++) TAKE(ad[k][j], c * r * ed);
    }
#undef TAKE
    /* fp32 accumulators of the wanted gradients that are not f32 */
    for (int i = 0; i < 11; i++) w->acc[i] = -1;
    for (int i = 1; i < nf; i++) {
        int t = o->in[i];
        if (t < 0 || (o->iattr[IA_GATED_MLP_FROZEN] >> i & 1) || g->tensors[t].dtype == DT_F32) continue;
        w->acc[i] = (int64_t)n;
        n += align64(4 * (uint64_t)g->tensors[t].numel);
    }
    w->total = n;
    return true;
}

static uint64_t op_ws_bytes(const Graph *g, const GOp *o, int64_t C) {
    MlpTileWs w;
    return mlp_tile_layout(g, o, C, &w) ? w.total : 0;
}

static bool is_gmlp(const GOp *o) { return o->kind == OP_FWD && o->prim == PRIM_GATED_MLP && (o->nin == 5 || o->nin == 11) && o->out[0] >= 0; }

uint64_t mlp_tile_workspace_bytes(const Graph *g) {
    uint64_t best = 0;
    for (int i = 0; i < g->nforward; i++) {
        const GOp *o = &g->ops[i];
        if (!is_gmlp(o)) continue;
        bool all = true;
        for (int k = 0; k < 5; k++) all = all && o->in[k] >= 0;
        if (!all) continue;
        uint64_t b = op_ws_bytes(g, o, 0);
        if (b > best) best = b;
    }
    return best;
}

/* The gated_mlp op that replaces block b, `rows` rows a tile. */
static GOp fused_op(const Graph *g, const MlpBlock *b, int64_t rows) {
    const GOp *no = &g->ops[b->norm];
    const MlpProj *dp = &b->proj[2];
    GOp f = g->ops[dp->add >= 0 ? dp->add : dp->base];
    f.prim = PRIM_GATED_MLP;
    memset(f.in, -1, sizeof f.in);
    f.in[0] = no->in[0];
    f.in[1] = no->in[1];
    bool lora = false;
    for (int k = 0; k < 3; k++) {
        f.in[2 + k] = g->ops[b->proj[k].base].in[1];
        lora = lora || b->proj[k].a >= 0;
    }
    f.nin = lora ? 11 : 5;
    memset(f.iattr, 0, sizeof f.iattr);
    memset(f.fattr, 0, sizeof f.fattr);
    static const int scale_slot[3] = {FA_GATED_MLP_LORA_GATE, FA_GATED_MLP_LORA_UP, FA_GATED_MLP_LORA_DOWN};
    for (int k = 0; k < 3; k++) {
        const MlpProj *p = &b->proj[k];
        f.fattr[scale_slot[k]] = 1;
        if (p->a < 0) continue;
        f.in[5 + 2 * k] = g->ops[p->a].in[1];
        f.in[6 + 2 * k] = g->ops[p->b].in[1];
        f.fattr[scale_slot[k]] = g->ops[p->scale].fattr[FA_SCALE_BY];
    }
    int64_t frozen = 0;
    for (int i = 1; i < f.nin; i++)
        if (f.in[i] >= 0 && g->tensors[f.in[i]].frozen) frozen |= (int64_t)1 << i;
    f.iattr[IA_GATED_MLP_ACT] = g->ops[b->act].prim == PRIM_GELU ? GATED_MLP_GELU : GATED_MLP_SILU;
    f.iattr[IA_GATED_MLP_ROWS] = rows;
    f.iattr[IA_GATED_MLP_FROZEN] = frozen;
    f.fattr[FA_GATED_MLP_EPS] = no->fattr[FA_RMSNORM_EPS];
    f.fattr[FA_GATED_MLP_OFFSET] = no->fattr[FA_RMSNORM_OFFSET];
    f.scope = no->scope; /* the block's call path beside the down projection's own */
    return f;
}

int64_t mlp_tile_rows(const Graph *g, const Target *t) {
    MlpBlock b;
    if (mlp_tile_find(g, &b, 1) < 1) return 0;
    GOp f = fused_op(g, &b, 0);
    const GTensor *x = &g->tensors[f.in[0]];
    int64_t D = x->dims[x->rank - 1], R = D ? x->numel / D : 0;
    /* a row's share of the scratch: the growth of a tile of 64 rows more; the tile-independent rest
     * (the weights' fp32 copies and accumulators) is apart */
    int64_t per_row = (int64_t)((op_ws_bytes(g, &f, 128) - op_ws_bytes(g, &f, 64)) / 64);
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
        GOp f = fused_op(g, b, rows);
        int last = b->proj[2].add >= 0 ? b->proj[2].add : b->proj[2].base;
        int drop[3 + 15], nd = 0;
        drop[nd++] = b->norm, drop[nd++] = b->act, drop[nd++] = b->mul;
        for (int j = 0; j < 3; j++) {
            const int *o = &b->proj[j].base;
            for (int m = 0; m < 5; m++)
                if (o[m] >= 0 && o[m] != last) drop[nd++] = o[m];
        }
        for (int j = 0; j < nd; j++) {
            gone[drop[j]] = true;
            g->tensors[g->ops[drop[j]].out[0]].producer = -1; /* made by nothing and used by nothing */
        }
        g->ops[last] = f;
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
