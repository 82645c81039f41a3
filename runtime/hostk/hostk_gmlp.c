/* hostk_gmlp: gated_mlp, a transformer's MLP block with its norm,
 *   y = linear(act(linear(n, w_gate)) * linear(n, w_up), w_down),  n = rmsnorm(x, g),
 * computed `rows` rows (tokens) at a time: only one tile's [rows, I]
 * intermediates exist, in the workspace, never the [R, I] ones of the
 * unfused ops (ALST's tiled MLP; docs/tuning.md "Long context").
 *
 * Nothing is kept from the forward to the backward: the backward
 * recomputes each tile's forward and takes its gradients at once, so the
 * op is its own activation checkpoint. Every step of a tile is the
 * unfused primitives' own kernel on the tile's rows (the norm family with
 * its offset, hk_linear_*, the activation, hk_mul_*), each intermediate
 * rounded to the activation dtype as the unfused op's output is, and the
 * backward in the unfused ops' reverse order, so that a tile's rows equal
 * the unfused ops' rows; the weights' gradients are summed over the tiles
 * in fp32 (the workspace's accumulators when a gradient is not f32) and
 * added once, as the unfused linear's backward adds its one GEMM. */
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"

typedef struct GmShape {
    int64_t R, D, I, C; /* rows, model width, MLP width, rows per tile */
    DType dt;           /* the intermediates' dtype: y's */
} GmShape;

static int gm_shape(const HkTensor *x, const HkTensor *g, const HkTensor *wg, const HkTensor *wu, const HkTensor *wd,
                    const HkTensor *y, int64_t rows, GmShape *s) {
    if (!hk_present(x) || !hk_present(g) || !hk_present(wg) || !hk_present(wu) || !hk_present(wd) || !y) return HK_ERR_ARG;
    if (!hk_is_float(x) || !hk_is_float(g) || !hk_is_float(y)) return HK_ERR_DTYPE;
    for (const HkTensor *w = wg; w; w = w == wg ? wu : w == wu ? wd : NULL)
        if (!hk_is_float(w) && !dtype_is_quant(w->dtype)) return HK_ERR_DTYPE;
    if (x->rank < 1 || g->rank != 1 || wg->rank != 2 || wu->rank != 2 || wd->rank != 2 || y->rank != x->rank) return HK_ERR_SHAPE;
    s->D = x->dims[x->rank - 1];
    s->I = wg->dims[1];
    s->R = s->D ? hk_numel(x) / s->D : 0;
    for (int i = 0; i < x->rank; i++)
        if (y->dims[i] != x->dims[i]) return HK_ERR_SHAPE;
    if (g->dims[0] != s->D || wg->dims[0] != s->D || wu->dims[0] != s->D || wu->dims[1] != s->I || wd->dims[0] != s->I ||
        wd->dims[1] != s->D)
        return HK_ERR_SHAPE;
    if (rows < 0) return HK_ERR_ATTR;
    s->C = rows == 0 || rows > s->R ? s->R : rows;
    if (s->C < 1) s->C = 1;
    s->dt = y->dtype;
    return HK_OK;
}

/* A [n, cols] tensor of dtype dt at p. */
static HkTensor tile(void *p, DType dt, int64_t n, int64_t cols) {
    int64_t d[2] = {n, cols};
    return hk_tensor(p, dt, 2, d);
}

/* Rows [r0, r0 + n) of t seen as [n, cols]. */
static HkTensor rows_of(const HkTensor *t, int64_t r0, int64_t n, int64_t cols) {
    return tile((char *)t->data + (size_t)(r0 * cols) * hk_dtype_size(t->dtype), t->dtype, n, cols);
}

/* The norm family's call on x's tile (the gain's offset applied as rmsnorm's). */
typedef struct NormCall {
    HkTensor in[2];
    int64_t iattr[PLAN_MAX_IATTR];
    double fattr[PLAN_MAX_FATTR];
    HkCall c;
} NormCall;

static void norm_call(NormCall *k, const HkTensor *xt, const HkTensor *g, double eps, double offset, void *ws) {
    memset(k, 0, sizeof *k);
    k->in[0] = *xt;
    k->in[1] = *g;
    k->iattr[IA_RMSNORM_HEADS] = 1;
    k->fattr[FA_RMSNORM_EPS] = eps;
    k->fattr[FA_RMSNORM_OFFSET] = offset;
    k->c.prim = PRIM_RMSNORM;
    k->c.in = k->in;
    k->c.nin = 2;
    k->c.a = &k->in[0];
    k->c.b = &k->in[1];
    k->c.nout = 1;
    k->c.iattr = k->iattr;
    k->c.fattr = k->fattr;
    k->c.ws = ws;
}

/* Bytes of the norm's workspace for a tile of C rows. */
static size_t norm_ws_bytes(const GmShape *s, const HkTensor *x, const HkTensor *g) {
    HkTensor xt = tile(x->data, x->dtype, s->C, s->D);
    NormCall k;
    norm_call(&k, &xt, g, 1e-5, 0, NULL);
    return hk_align(hk_family_norm.ws(&k.c));
}

static size_t lin_ws_bytes(const GmShape *s, const HkTensor *wg, const HkTensor *wu, const HkTensor *wd) {
    static char present;
    HkTensor n = tile(&present, s->dt, s->C, s->D), a = tile(&present, s->dt, s->C, s->I), y = n;
    size_t b[3] = {hk_linear_workspace_bytes(&n, wg, &a), hk_linear_workspace_bytes(&n, wu, &a), hk_linear_workspace_bytes(&a, wd, &y)};
    size_t m = b[0] > b[1] ? b[0] : b[1];
    return hk_align(m > b[2] ? m : b[2]);
}

static size_t dt_bytes(DType dt, int64_t n) { return hk_align((size_t)n * hk_dtype_size(dt)); }
static size_t acc_bytes(const HkTensor *w) { return w->dtype == DT_F32 ? 0 : hk_align((size_t)hk_numel(w) * sizeof(float)); }

/* Layout: a tile's intermediates n [C, D], a, s, u, h [C, I] and their
 * gradients dh, ds, du, da [C, I], dn [C, D] in the activation dtype; the
 * norm's workspace for a tile; the largest linear workspace of a tile;
 * fp32 accumulators of the gradients of g and the three weights (each
 * only where the parameter is not f32). */
size_t hk_gated_mlp_workspace_bytes(const HkTensor *x, const HkTensor *g, const HkTensor *wg, const HkTensor *wu,
                                    const HkTensor *wd, const HkTensor *y, int64_t rows) {
    GmShape s;
    if (gm_shape(x, g, wg, wu, wd, y, rows, &s)) return 0;
    return 2 * dt_bytes(s.dt, s.C * s.D) + 8 * dt_bytes(s.dt, s.C * s.I) + norm_ws_bytes(&s, x, g) +
           lin_ws_bytes(&s, wg, wu, wd) + acc_bytes(g) + acc_bytes(wg) + acc_bytes(wu) + acc_bytes(wd);
}

typedef struct GmWork {
    HkTensor n, a, s, u, h, dh, ds, du, da, dn; /* at C rows; a tile sets dims[0] */
    void *norm_ws, *lin_ws;
    float *acc[4];                              /* g, w_gate, w_up, w_down: NULL where f32 */
} GmWork;

static void *take(HkWs *w, size_t n) {
    char *p = w->base + w->used;
    w->used += hk_align(n);
    return p;
}

static void gm_carve(const GmShape *s, const HkTensor *x, const HkTensor *g, const HkTensor *const *w, void *ws, GmWork *k) {
    HkWs b = {ws, 0};
    size_t ed = hk_dtype_size(s->dt);
    HkTensor *ci[8] = {&k->a, &k->s, &k->u, &k->h, &k->dh, &k->ds, &k->du, &k->da};
    k->n = tile(take(&b, (size_t)(s->C * s->D) * ed), s->dt, s->C, s->D);
    k->dn = tile(take(&b, (size_t)(s->C * s->D) * ed), s->dt, s->C, s->D);
    for (int i = 0; i < 8; i++) *ci[i] = tile(take(&b, (size_t)(s->C * s->I) * ed), s->dt, s->C, s->I);
    k->norm_ws = take(&b, norm_ws_bytes(s, x, g));
    k->lin_ws = take(&b, lin_ws_bytes(s, w[1], w[2], w[3]));
    for (int i = 0; i < 4; i++) k->acc[i] = w[i]->dtype == DT_F32 ? NULL : (float *)take(&b, acc_bytes(w[i]));
}

static void set_rows(GmWork *k, int64_t n) {
    HkTensor *t[10] = {&k->n, &k->a, &k->s, &k->u, &k->h, &k->dh, &k->ds, &k->du, &k->da, &k->dn};
    for (int i = 0; i < 10; i++) t[i]->dims[0] = n;
}

static int act_fwd(int64_t act, const HkTensor *a, HkTensor *s) { return act == GATED_MLP_GELU ? hk_gelu_fwd(a, s) : hk_silu_fwd(a, s); }
static int act_bwd(int64_t act, const HkTensor *a, const HkTensor *ds, HkTensor *da) {
    return act == GATED_MLP_GELU ? hk_gelu_bwd(a, ds, da) : hk_silu_bwd(a, ds, da);
}

/* A tile's forward up to h (and y's rows when yt): the unfused ops' order. */
static int tile_fwd(const GmShape *sh, const HkTensor *xt, const HkTensor *g, const HkTensor *wg, const HkTensor *wu,
                    const HkTensor *wd, HkTensor *yt, int64_t act, double eps, double offset, GmWork *k) {
    NormCall nc;
    norm_call(&nc, xt, g, eps, offset, k->norm_ws);
    nc.c.out = &k->n;
    nc.c.y = &k->n;
    int rc = hk_family_norm.fwd(&nc.c);
    if (!rc) rc = hk_linear_fwd(&k->n, wg, NULL, &k->a, k->lin_ws);
    if (!rc) rc = act_fwd(act, &k->a, &k->s);
    if (!rc) rc = hk_linear_fwd(&k->n, wu, NULL, &k->u, k->lin_ws);
    if (!rc) rc = hk_mul_fwd(&k->s, &k->u, &k->h);
    if (!rc && yt) rc = hk_linear_fwd(&k->h, wd, NULL, yt, k->lin_ws);
    (void)sh;
    return rc;
}

static int64_t attr_rows(const int64_t *iattr) { return hk_attr_i(iattr, IA_GATED_MLP_ROWS); }

int hk_gated_mlp_fwd(const HkTensor *x, const HkTensor *g, const HkTensor *wg, const HkTensor *wu, const HkTensor *wd,
                     HkTensor *y, int64_t act, int64_t rows, double eps, double offset, void *ws) {
    GmShape s;
    int rc = gm_shape(x, g, wg, wu, wd, y, rows, &s);
    if (rc) return rc;
    if (!hk_present(y)) return HK_ERR_ARG;
    if (act != GATED_MLP_SILU && act != GATED_MLP_GELU) return HK_ERR_ATTR;
    if (!ws) return HK_ERR_WORKSPACE;
    GmWork k;
    const HkTensor *w[4] = {g, wg, wu, wd};
    gm_carve(&s, x, g, w, ws, &k);
    for (int64_t r0 = 0; r0 < s.R && !rc; r0 += s.C) {
        int64_t n = s.R - r0 < s.C ? s.R - r0 : s.C;
        set_rows(&k, n);
        HkTensor xt = rows_of(x, r0, n, s.D), yt = rows_of(y, r0, n, s.D);
        rc = tile_fwd(&s, &xt, g, wg, wu, wd, &yt, act, eps, offset, &k);
    }
    return rc;
}

static int grad_ok(const HkTensor *d, const HkTensor *t) {
    if (!hk_present(d)) return HK_OK;
    if (!hk_is_float(d)) return HK_ERR_DTYPE;
    return hk_numel(d) == hk_numel(t) ? HK_OK : HK_ERR_SHAPE;
}

/* Where a parameter's gradient accumulates over the tiles: the gradient
 * itself when f32, else its fp32 accumulator (zeroed); NULL: not wanted. */
static HkTensor *acc_target(HkTensor *d, float *acc, HkTensor *view) {
    if (!hk_present(d)) return NULL;
    if (!acc) return d;
    *view = *d;
    view->dtype = DT_F32;
    view->data = acc;
    memset(acc, 0, (size_t)hk_numel(d) * sizeof(float));
    return view;
}

/* d += acc, rounded once into d's dtype. */
static void acc_add(HkTensor *d, const float *acc) {
    for (int64_t i = 0, n = hk_numel(d); i < n; i++) hk_st(d->data, d->dtype, i, hk_ld(d->data, d->dtype, i) + acc[i]);
}

int hk_gated_mlp_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *wg, const HkTensor *wu, const HkTensor *wd,
                     const HkTensor *dy, HkTensor *dx, HkTensor *dg, HkTensor *dwg, HkTensor *dwu, HkTensor *dwd,
                     int64_t act, int64_t rows, double eps, double offset, void *ws) {
    GmShape s;
    int rc = gm_shape(x, g, wg, wu, wd, dy, rows, &s);
    if (rc) return rc;
    if (!hk_present(dy)) return HK_ERR_ARG;
    if (act != GATED_MLP_SILU && act != GATED_MLP_GELU) return HK_ERR_ATTR;
    if ((rc = grad_ok(dx, x)) || (rc = grad_ok(dg, g)) || (rc = grad_ok(dwg, wg)) || (rc = grad_ok(dwu, wu)) ||
        (rc = grad_ok(dwd, wd)))
        return rc;
    if (!hk_present(dx) && !hk_present(dg) && !hk_present(dwg) && !hk_present(dwu) && !hk_present(dwd)) return HK_OK;
    if (!ws) return HK_ERR_WORKSPACE;
    GmWork k;
    const HkTensor *w[4] = {g, wg, wu, wd};
    gm_carve(&s, x, g, w, ws, &k);
    HkTensor *grads[4] = {dg, dwg, dwu, dwd}, views[4], *tgt[4];
    for (int i = 0; i < 4; i++) tgt[i] = acc_target(grads[i], k.acc[i], &views[i]);
    size_t ed = hk_dtype_size(s.dt);
    for (int64_t r0 = 0; r0 < s.R && !rc; r0 += s.C) {
        int64_t n = s.R - r0 < s.C ? s.R - r0 : s.C;
        set_rows(&k, n);
        HkTensor xt = rows_of(x, r0, n, s.D), dyt = rows_of(dy, r0, n, s.D), dxt;
        if (hk_present(dx)) dxt = rows_of(dx, r0, n, s.D);
        if ((rc = tile_fwd(&s, &xt, g, wg, wu, wd, NULL, act, eps, offset, &k))) break;
        /* the activation gradients accumulate from zero, as autodiff's do */
        memset(k.dh.data, 0, (size_t)(n * s.I) * ed);
        memset(k.ds.data, 0, (size_t)(n * s.I) * ed);
        memset(k.du.data, 0, (size_t)(n * s.I) * ed);
        memset(k.da.data, 0, (size_t)(n * s.I) * ed);
        memset(k.dn.data, 0, (size_t)(n * s.D) * ed);
        /* the reverse of the forward's order: down, mul, up, act, gate, norm */
        rc = hk_linear_bwd(&k.h, wd, &dyt, &k.dh, tgt[3], NULL, k.lin_ws);
        if (!rc) rc = hk_mul_bwd(&k.s, &k.u, &k.dh, &k.ds, &k.du);
        if (!rc) rc = hk_linear_bwd(&k.n, wu, &k.du, &k.dn, tgt[2], NULL, k.lin_ws);
        if (!rc) rc = act_bwd(act, &k.a, &k.ds, &k.da);
        if (!rc) rc = hk_linear_bwd(&k.n, wg, &k.da, &k.dn, tgt[1], NULL, k.lin_ws);
        if (!rc && (hk_present(dx) || tgt[0])) {
            NormCall nc;
            norm_call(&nc, &xt, g, eps, offset, k.norm_ws);
            nc.c.dy = &k.dn;
            nc.c.da = hk_present(dx) ? &dxt : NULL;
            nc.c.db = tgt[0];
            rc = hk_family_norm.bwd(&nc.c);
        }
    }
    for (int i = 0; i < 4 && !rc; i++)
        if (tgt[i] && k.acc[i]) acc_add(grads[i], k.acc[i]);
    return rc;
}

/* ---- family (runtime/plan/prim.def) ---- */

static const HkTensor *in_at(const HkCall *c, int i) { return i < c->nin && c->in[i].data ? &c->in[i] : NULL; }
static double gm_eps(const HkCall *c) { return c->fattr && c->fattr[FA_GATED_MLP_EPS] != 0 ? c->fattr[FA_GATED_MLP_EPS] : 1e-5; }
static double gm_offset(const HkCall *c) { return c->fattr ? c->fattr[FA_GATED_MLP_OFFSET] : 0; }

static size_t fam_gmlp_ws(const HkCall *c) {
    const HkTensor *wu = in_at(c, 3), *wd = in_at(c, 4);
    return c->b && c->c && wu && wd && c->y ? hk_gated_mlp_workspace_bytes(c->a, c->b, c->c, wu, wd, c->y, attr_rows(c->iattr)) : 0;
}
static int fam_gmlp_fwd(const HkCall *c) {
    const HkTensor *wu = in_at(c, 3), *wd = in_at(c, 4);
    if (!c->b || !c->c || !wu || !wd) return HK_ERR_ARG;
    return hk_gated_mlp_fwd(c->a, c->b, c->c, wu, wd, &c->out[0], hk_attr_i(c->iattr, IA_GATED_MLP_ACT), attr_rows(c->iattr),
                            gm_eps(c), gm_offset(c), c->ws);
}
/* The gradients of inputs 3 and 4 (w_up, w_down) come beside dc in the
 * call's din; hostk_run.c hands them over as c->din. */
static int fam_gmlp_bwd(const HkCall *c) {
    const HkTensor *wu = in_at(c, 3), *wd = in_at(c, 4);
    if (!c->b || !c->c || !wu || !wd) return HK_ERR_ARG;
    HkTensor *dwu = c->din && c->din[3].data ? &c->din[3] : NULL, *dwd = c->din && c->din[4].data ? &c->din[4] : NULL;
    return hk_gated_mlp_bwd(c->a, c->b, c->c, wu, wd, c->dy, c->da, c->db, c->dc, dwu, dwd, hk_attr_i(c->iattr, IA_GATED_MLP_ACT),
                            attr_rows(c->iattr), gm_eps(c), gm_offset(c), c->ws);
}
const HkFamily hk_family_gmlp = {fam_gmlp_fwd, fam_gmlp_bwd, fam_gmlp_ws};
