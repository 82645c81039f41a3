/* hostk_gmlp: gated_mlp, a transformer's MLP block with its norm,
 *   y = down(act(gate(n)) * up(n)),  n = rmsnorm(x, g),
 * each projection a linear without a bias, plus, where the op has them,
 * its LoRA adapter (proj(v) = linear(v, w) + scale * linear(linear(v, A), B)),
 * computed `rows` rows (tokens) at a time: only one tile's [rows, I]
 * intermediates exist, in the workspace, never the [R, I] ones of the
 * unfused ops (ALST's tiled MLP; docs/tuning.md "Long context").
 *
 * Nothing is kept from the forward to the backward: the backward
 * recomputes each tile's forward and takes its gradients at once, so the
 * op is its own activation checkpoint. Every step of a tile is the
 * unfused primitives' own kernel on the tile's rows (the norm family with
 * its offset, hk_linear_*, the activation, hk_scale_*, hk_add_*, hk_mul_*),
 * each intermediate rounded to the activation dtype as the unfused op's
 * output is, and the backward in the unfused ops' reverse order, so that
 * a tile's rows equal the unfused ops' rows; the parameters' gradients
 * are summed over the tiles in fp32 (the workspace's accumulators when a
 * gradient is not f32) and added once, as the unfused linear's backward
 * adds its one GEMM. */
#include <string.h>
#include "hostk.h"
#include "hostk_impl.h"

enum { GM_X, GM_G, GM_WG, GM_WU, GM_WD, GM_NIN = 11 };

typedef struct GmShape {
    int64_t R, D, I, C; /* rows, model width, MLP width, rows per tile */
    int64_t r[3];       /* the adapters' ranks (gate, up, down), 0: none */
    DType dt;           /* the intermediates' dtype: y's */
} GmShape;

static bool fl(const HkTensor *t) { return hk_is_float(t) || dtype_is_quant(t->dtype); }

/* in[GM_NIN]: the inputs, NULL where absent */
static int gm_shape(const HkTensor *const *in, const HkTensor *y, int64_t rows, GmShape *s) {
    const HkTensor *x = in[GM_X], *g = in[GM_G], *wg = in[GM_WG], *wu = in[GM_WU], *wd = in[GM_WD];
    if (!x || !g || !wg || !wu || !wd || !y) return HK_ERR_ARG;
    if (!hk_is_float(x) || !hk_is_float(g) || !hk_is_float(y) || !fl(wg) || !fl(wu) || !fl(wd)) return HK_ERR_DTYPE;
    if (x->rank < 1 || g->rank != 1 || wg->rank != 2 || wu->rank != 2 || wd->rank != 2 || y->rank != x->rank) return HK_ERR_SHAPE;
    s->D = x->dims[x->rank - 1];
    s->I = wg->dims[1];
    s->R = s->D ? hk_numel(x) / s->D : 0;
    for (int i = 0; i < x->rank; i++)
        if (y->dims[i] != x->dims[i]) return HK_ERR_SHAPE;
    if (g->dims[0] != s->D || wg->dims[0] != s->D || wu->dims[0] != s->D || wu->dims[1] != s->I || wd->dims[0] != s->I ||
        wd->dims[1] != s->D)
        return HK_ERR_SHAPE;
    for (int k = 0; k < 3; k++) {
        const HkTensor *A = in[5 + 2 * k], *B = in[6 + 2 * k];
        s->r[k] = 0;
        if (!A && !B) continue;
        if (!A || !B) return HK_ERR_ARG;
        if (!fl(A) || !fl(B)) return HK_ERR_DTYPE;
        int64_t vin = k < 2 ? s->D : s->I, o = k < 2 ? s->I : s->D;
        if (A->rank != 2 || B->rank != 2 || A->dims[0] != vin || B->dims[0] != A->dims[1] || B->dims[1] != o) return HK_ERR_SHAPE;
        s->r[k] = A->dims[1];
    }
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

/* The largest workspace of a tile's linears: the three projections and the adapters' two each. */
static size_t lin_ws_bytes(const GmShape *s, const HkTensor *const *in) {
    static char present;
    size_t m = 0;
    for (int k = 0; k < 3; k++) {
        int64_t vin = k < 2 ? s->D : s->I, o = k < 2 ? s->I : s->D;
        HkTensor v = tile(&present, s->dt, s->C, vin), y = tile(&present, s->dt, s->C, o);
        size_t b = hk_linear_workspace_bytes(&v, in[2 + k], &y);
        m = b > m ? b : m;
        if (!s->r[k]) continue;
        HkTensor p = tile(&present, s->dt, s->C, s->r[k]);
        b = hk_linear_workspace_bytes(&v, in[5 + 2 * k], &p);
        m = b > m ? b : m;
        b = hk_linear_workspace_bytes(&p, in[6 + 2 * k], &y);
        m = b > m ? b : m;
    }
    return hk_align(m);
}

static size_t dt_bytes(DType dt, int64_t n) { return hk_align((size_t)n * hk_dtype_size(dt)); }
/* an fp32 accumulator of input i's gradient: where it is wanted (not frozen) and not f32 */
static size_t acc_bytes(const HkTensor *w, int i, int64_t frozen) {
    return !w || (frozen >> i & 1) || w->dtype == DT_F32 ? 0 : hk_align((size_t)hk_numel(w) * sizeof(float));
}

/* Layout: a tile's intermediates n [C, D], a, s, u, h [C, I] and their
 * gradients dh, ds, du, da [C, I], dn [C, D] in the activation dtype; per
 * adapter (gate, up, down: output width O = I, I, D) the projection's own
 * output [C, O], the adapter's p [C, r], q and its scaled copy [C, O], and
 * the gradients dp [C, r], dq [C, O]; the norm's workspace for a tile; the
 * largest linear workspace of a tile; fp32 accumulators of the gradients
 * of the parameters (inputs 1 to 10) that are wanted and not f32. */
static size_t ws_bytes(const GmShape *s, const HkTensor *const *in, int64_t frozen) {
    size_t n = 2 * dt_bytes(s->dt, s->C * s->D) + 8 * dt_bytes(s->dt, s->C * s->I) + norm_ws_bytes(s, in[GM_X], in[GM_G]) +
               lin_ws_bytes(s, in);
    for (int k = 0; k < 3; k++) {
        int64_t o = k < 2 ? s->I : s->D;
        if (s->r[k]) n += 4 * dt_bytes(s->dt, s->C * o) + 2 * dt_bytes(s->dt, s->C * s->r[k]);
    }
    for (int i = 1; i < GM_NIN; i++) n += acc_bytes(in[i], i, frozen);
    return n;
}

size_t hk_gated_mlp_workspace_bytes(const HkTensor *const *in, const HkTensor *y, const HkGatedMlp *at) {
    GmShape s;
    if (gm_shape(in, y, at->rows, &s)) return 0;
    return ws_bytes(&s, in, at->frozen);
}

typedef struct GmAdapter {
    HkTensor base, p, q, qs, dp, dq; /* the projection's own output, the adapter's */
} GmAdapter;

typedef struct GmWork {
    HkTensor n, a, s, u, h, dh, ds, du, da, dn; /* at C rows; a tile sets dims[0] */
    GmAdapter ad[3];                            /* gate, up, down; data NULL where none */
    void *norm_ws, *lin_ws;
    float *acc[GM_NIN];                         /* per input: its gradient's fp32 accumulator, NULL: none */
} GmWork;

static void *take(HkWs *w, size_t n) {
    char *p = w->base + w->used;
    w->used += hk_align(n);
    return p;
}

static void gm_carve(const GmShape *s, const HkTensor *const *in, int64_t frozen, void *ws, GmWork *k) {
    HkWs b = {ws, 0};
    size_t ed = hk_dtype_size(s->dt);
    memset(k, 0, sizeof *k);
    HkTensor *ci[8] = {&k->a, &k->s, &k->u, &k->h, &k->dh, &k->ds, &k->du, &k->da};
    k->n = tile(take(&b, (size_t)(s->C * s->D) * ed), s->dt, s->C, s->D);
    k->dn = tile(take(&b, (size_t)(s->C * s->D) * ed), s->dt, s->C, s->D);
    for (int i = 0; i < 8; i++) *ci[i] = tile(take(&b, (size_t)(s->C * s->I) * ed), s->dt, s->C, s->I);
    k->norm_ws = take(&b, norm_ws_bytes(s, in[GM_X], in[GM_G]));
    k->lin_ws = take(&b, lin_ws_bytes(s, in));
    for (int j = 0; j < 3; j++) {
        if (!s->r[j]) continue;
        int64_t o = j < 2 ? s->I : s->D, r = s->r[j];
        GmAdapter *a = &k->ad[j];
        a->base = tile(take(&b, (size_t)(s->C * o) * ed), s->dt, s->C, o);
        a->q = tile(take(&b, (size_t)(s->C * o) * ed), s->dt, s->C, o);
        a->qs = tile(take(&b, (size_t)(s->C * o) * ed), s->dt, s->C, o);
        a->dq = tile(take(&b, (size_t)(s->C * o) * ed), s->dt, s->C, o);
        a->p = tile(take(&b, (size_t)(s->C * r) * ed), s->dt, s->C, r);
        a->dp = tile(take(&b, (size_t)(s->C * r) * ed), s->dt, s->C, r);
    }
    for (int i = 1; i < GM_NIN; i++) {
        size_t n = acc_bytes(in[i], i, frozen);
        k->acc[i] = n ? (float *)take(&b, n) : NULL;
    }
}

static void set_rows(GmWork *k, int64_t n) {
    HkTensor *t[10] = {&k->n, &k->a, &k->s, &k->u, &k->h, &k->dh, &k->ds, &k->du, &k->da, &k->dn};
    for (int i = 0; i < 10; i++) t[i]->dims[0] = n;
    for (int j = 0; j < 3; j++) {
        GmAdapter *a = &k->ad[j];
        HkTensor *at[6] = {&a->base, &a->p, &a->q, &a->qs, &a->dp, &a->dq};
        for (int i = 0; i < 6; i++) at[i]->dims[0] = n;
    }
}

static int act_fwd(int64_t act, const HkTensor *a, HkTensor *s) { return act == GATED_MLP_GELU ? hk_gelu_fwd(a, s) : hk_silu_fwd(a, s); }
static int act_bwd(int64_t act, const HkTensor *a, const HkTensor *ds, HkTensor *da) {
    return act == GATED_MLP_GELU ? hk_gelu_bwd(a, ds, da) : hk_silu_bwd(a, ds, da);
}

/* Projection j of v into out: linear(v, w) and, with an adapter, + scale *
 * linear(linear(v, A), B), in the unfused ops' order. */
static int proj_fwd(const HkTensor *const *in, const HkGatedMlp *at, int j, const HkTensor *v, HkTensor *out, GmWork *k) {
    GmAdapter *a = &k->ad[j];
    if (!a->p.data) return hk_linear_fwd(v, in[2 + j], NULL, out, k->lin_ws);
    int rc = hk_linear_fwd(v, in[2 + j], NULL, &a->base, k->lin_ws);
    if (!rc) rc = hk_linear_fwd(v, in[5 + 2 * j], NULL, &a->p, k->lin_ws);
    if (!rc) rc = hk_linear_fwd(&a->p, in[6 + 2 * j], NULL, &a->q, k->lin_ws);
    if (!rc) rc = hk_scale_fwd(&a->q, &a->qs, at->lora[j]);
    if (!rc) rc = hk_add_fwd(&a->base, &a->qs, out);
    return rc;
}

/* Its backward: dout into dv (+=) and the parameters' gradients (tgt[i]
 * for input i, NULL: not wanted), the reverse of proj_fwd. */
static int proj_bwd(const HkTensor *const *in, const HkGatedMlp *at, int j, const HkTensor *v, const HkTensor *dout, HkTensor *dv,
                    HkTensor *const *tgt, GmWork *k) {
    GmAdapter *a = &k->ad[j];
    int rc = 0;
    if (a->p.data) {
        /* add: both operands get dout; scale: dq = scale * dout; then the adapter's two linears */
        memset(a->dq.data, 0, (size_t)hk_numel(&a->dq) * hk_dtype_size(a->dq.dtype));
        memset(a->dp.data, 0, (size_t)hk_numel(&a->dp) * hk_dtype_size(a->dp.dtype));
        rc = hk_scale_bwd(dout, &a->dq, at->lora[j]);
        if (!rc) rc = hk_linear_bwd(&a->p, in[6 + 2 * j], &a->dq, &a->dp, tgt[6 + 2 * j], NULL, k->lin_ws);
        if (!rc) rc = hk_linear_bwd(v, in[5 + 2 * j], &a->dp, dv, tgt[5 + 2 * j], NULL, k->lin_ws);
    }
    if (!rc) rc = hk_linear_bwd(v, in[2 + j], dout, dv, tgt[2 + j], NULL, k->lin_ws);
    return rc;
}

/* A tile's forward up to h (and y's rows when yt): the unfused ops' order. */
static int tile_fwd(const HkTensor *const *in, const HkGatedMlp *at, const HkTensor *xt, HkTensor *yt, GmWork *k) {
    NormCall nc;
    norm_call(&nc, xt, in[GM_G], at->eps, at->offset, k->norm_ws);
    nc.c.out = &k->n;
    nc.c.y = &k->n;
    int rc = hk_family_norm.fwd(&nc.c);
    if (!rc) rc = proj_fwd(in, at, 0, &k->n, &k->a, k);
    if (!rc) rc = act_fwd(at->act, &k->a, &k->s);
    if (!rc) rc = proj_fwd(in, at, 1, &k->n, &k->u, k);
    if (!rc) rc = hk_mul_fwd(&k->s, &k->u, &k->h);
    if (!rc && yt) rc = proj_fwd(in, at, 2, &k->h, yt, k);
    return rc;
}

/* The op's inputs as an array of GM_NIN, NULL where absent. */
static int gather(const HkTensor *const *in, int nin, const HkTensor **g) {
    if (nin != 5 && nin != GM_NIN) return HK_ERR_ARG;
    for (int i = 0; i < GM_NIN; i++) g[i] = i < nin && in[i] && in[i]->data ? in[i] : NULL;
    return HK_OK;
}

int hk_gated_mlp_fwd(const HkTensor *const *in0, int nin, HkTensor *y, const HkGatedMlp *at, void *ws) {
    const HkTensor *in[GM_NIN];
    GmShape s;
    int rc = gather(in0, nin, in);
    if (!rc) rc = gm_shape(in, y, at->rows, &s);
    if (rc) return rc;
    if (!hk_present(y)) return HK_ERR_ARG;
    if (at->act != GATED_MLP_SILU && at->act != GATED_MLP_GELU) return HK_ERR_ATTR;
    if (!ws) return HK_ERR_WORKSPACE;
    GmWork k;
    gm_carve(&s, in, at->frozen, ws, &k);
    for (int64_t r0 = 0; r0 < s.R && !rc; r0 += s.C) {
        int64_t n = s.R - r0 < s.C ? s.R - r0 : s.C;
        set_rows(&k, n);
        HkTensor xt = rows_of(in[GM_X], r0, n, s.D), yt = rows_of(y, r0, n, s.D);
        rc = tile_fwd(in, at, &xt, &yt, &k);
    }
    return rc;
}

static int grad_ok(const HkTensor *d, const HkTensor *t) {
    if (!hk_present(d)) return HK_OK;
    if (!t) return HK_ERR_ARG;
    if (!hk_is_float(d)) return HK_ERR_DTYPE;
    return hk_numel(d) == hk_numel(t) ? HK_OK : HK_ERR_SHAPE;
}

/* d += acc, rounded once into d's dtype. */
static void acc_add(HkTensor *d, const float *acc) {
    for (int64_t i = 0, n = hk_numel(d); i < n; i++) hk_st(d->data, d->dtype, i, hk_ld(d->data, d->dtype, i) + acc[i]);
}

int hk_gated_mlp_bwd(const HkTensor *const *in0, int nin, const HkTensor *dy, HkTensor *const *din, const HkGatedMlp *at, void *ws) {
    const HkTensor *in[GM_NIN];
    GmShape s;
    int rc = gather(in0, nin, in);
    if (!rc) rc = gm_shape(in, dy, at->rows, &s);
    if (rc) return rc;
    if (!hk_present(dy)) return HK_ERR_ARG;
    if (at->act != GATED_MLP_SILU && at->act != GATED_MLP_GELU) return HK_ERR_ATTR;
    /* where each gradient accumulates over the tiles: the gradient itself when f32, else its fp32
     * accumulator (zeroed); NULL: not wanted (absent, or frozen) */
    HkTensor views[GM_NIN], *tgt[GM_NIN], *want[GM_NIN];
    bool any = false;
    for (int i = 0; i < GM_NIN; i++) {
        want[i] = i < nin && din && hk_present(din[i]) && !(i > 0 && (at->frozen >> i & 1)) ? din[i] : NULL;
        if ((rc = grad_ok(want[i], in[i]))) return rc;
        any = any || want[i];
    }
    if (!any) return HK_OK;
    if (!ws) return HK_ERR_WORKSPACE;
    GmWork k;
    gm_carve(&s, in, at->frozen, ws, &k);
    for (int i = 0; i < GM_NIN; i++) {
        tgt[i] = want[i];
        if (!want[i] || i == GM_X || !k.acc[i]) continue;
        views[i] = *want[i];
        views[i].dtype = DT_F32;
        views[i].data = k.acc[i];
        memset(k.acc[i], 0, (size_t)hk_numel(want[i]) * sizeof(float));
        tgt[i] = &views[i];
    }
    size_t ed = hk_dtype_size(s.dt);
    for (int64_t r0 = 0; r0 < s.R && !rc; r0 += s.C) {
        int64_t n = s.R - r0 < s.C ? s.R - r0 : s.C;
        set_rows(&k, n);
        HkTensor xt = rows_of(in[GM_X], r0, n, s.D), dyt = rows_of(dy, r0, n, s.D), dxt;
        if (want[GM_X]) dxt = rows_of(want[GM_X], r0, n, s.D);
        if ((rc = tile_fwd(in, at, &xt, NULL, &k))) break;
        /* the down adapter's p, which its B's gradient reads (y itself is not needed) */
        if (k.ad[2].p.data && (rc = hk_linear_fwd(&k.h, in[9], NULL, &k.ad[2].p, k.lin_ws))) break;
        /* the activation gradients accumulate from zero, as autodiff's do */
        HkTensor *z[5] = {&k.dh, &k.ds, &k.du, &k.da, &k.dn};
        for (int i = 0; i < 5; i++) memset(z[i]->data, 0, (size_t)hk_numel(z[i]) * ed);
        /* the reverse of the forward's order: down, mul, up, act, gate, norm */
        rc = proj_bwd(in, at, 2, &k.h, &dyt, &k.dh, tgt, &k);
        if (!rc) rc = hk_mul_bwd(&k.s, &k.u, &k.dh, &k.ds, &k.du);
        if (!rc) rc = proj_bwd(in, at, 1, &k.n, &k.du, &k.dn, tgt, &k);
        if (!rc) rc = act_bwd(at->act, &k.a, &k.ds, &k.da);
        if (!rc) rc = proj_bwd(in, at, 0, &k.n, &k.da, &k.dn, tgt, &k);
        if (!rc && (want[GM_X] || tgt[GM_G])) {
            NormCall nc;
            norm_call(&nc, &xt, in[GM_G], at->eps, at->offset, k.norm_ws);
            nc.c.dy = &k.dn;
            nc.c.da = want[GM_X] ? &dxt : NULL;
            nc.c.db = tgt[GM_G];
            rc = hk_family_norm.bwd(&nc.c);
        }
    }
    for (int i = 1; i < GM_NIN && !rc; i++)
        if (want[i] && k.acc[i]) acc_add(want[i], k.acc[i]);
    return rc;
}

/* ---- family (runtime/plan/prim.def) ---- */

static HkGatedMlp gm_attrs(const HkCall *c) {
    HkGatedMlp a;
    a.act = hk_attr_i(c->iattr, IA_GATED_MLP_ACT);
    a.rows = hk_attr_i(c->iattr, IA_GATED_MLP_ROWS);
    a.frozen = hk_attr_i(c->iattr, IA_GATED_MLP_FROZEN);
    a.eps = c->fattr && c->fattr[FA_GATED_MLP_EPS] != 0 ? c->fattr[FA_GATED_MLP_EPS] : 1e-5;
    a.offset = c->fattr ? c->fattr[FA_GATED_MLP_OFFSET] : 0;
    a.lora[0] = c->fattr ? c->fattr[FA_GATED_MLP_LORA_GATE] : 1;
    a.lora[1] = c->fattr ? c->fattr[FA_GATED_MLP_LORA_UP] : 1;
    a.lora[2] = c->fattr ? c->fattr[FA_GATED_MLP_LORA_DOWN] : 1;
    return a;
}

/* The call's inputs as pointers (NULL: absent). */
static int call_inputs(const HkCall *c, const HkTensor **in) {
    if (c->nin > GM_NIN) return HK_ERR_ARG;
    for (int i = 0; i < c->nin; i++) in[i] = c->in[i].data ? &c->in[i] : NULL;
    return HK_OK;
}

static size_t fam_gmlp_ws(const HkCall *c) {
    const HkTensor *in[GM_NIN];
    if (call_inputs(c, in) || (c->nin != 5 && c->nin != GM_NIN) || !c->y) return 0;
    const HkTensor *g[GM_NIN];
    gather(in, c->nin, g);
    HkGatedMlp a = gm_attrs(c);
    return hk_gated_mlp_workspace_bytes(g, c->y, &a);
}
static int fam_gmlp_fwd(const HkCall *c) {
    const HkTensor *in[GM_NIN];
    int rc = call_inputs(c, in);
    HkGatedMlp a = gm_attrs(c);
    return rc ? rc : hk_gated_mlp_fwd(in, c->nin, &c->out[0], &a, c->ws);
}
static int fam_gmlp_bwd(const HkCall *c) {
    const HkTensor *in[GM_NIN];
    HkTensor *din[GM_NIN];
    int rc = call_inputs(c, in);
    if (rc) return rc;
    for (int i = 0; i < c->nin; i++) din[i] = c->din && c->din[i].data ? &c->din[i] : NULL;
    HkGatedMlp a = gm_attrs(c);
    return hk_gated_mlp_bwd(in, c->nin, c->dy, din, &a, c->ws);
}
const HkFamily hk_family_gmlp = {fam_gmlp_fwd, fam_gmlp_bwd, fam_gmlp_ws};
