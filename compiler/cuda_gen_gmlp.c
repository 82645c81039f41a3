/* cuda_gen_gmlp: the launches of gated_mlp, the MLP tiled by rows
 * (docs/primitives.md; the host's runtime/hostk/hostk_gmlp.c), composed of
 * the unfused ops' own kernels on a tile's rows: zk_rmsnorm_fwd/_bwd
 * (norm.cu), zk_gemm (gemm.cu, or cuBLASLt: its descriptor names the
 * workspace), zk_silu/zk_gelu, zk_binary (mul, add), zk_fill and zk_axpy
 * (scale) of elementwise.cu, in the unfused ops' order, so that a tile's
 * rows are the unfused CUDA ops' rows.
 *
 * Forward, per tile of C rows: n = rmsnorm(x rows), a = gate(n),
 * s = act(a), u = up(n), h = s * u, y rows = down(h); each projection a
 * GEMM and, with a LoRA adapter, base + scale * (v A) B as the unfused
 * linear, linear, linear, scale and add. Backward, per tile: the forward
 * again up to h (nothing is kept), then down, mul, up, act, gate and the
 * norm backward, the intermediates' gradients accumulating from zero. The
 * parameters' gradients: an f32 one accumulates tile by tile in place (a
 * GEMM with beta 1); another's per-tile product goes into the linears'
 * scratch and is added into its fp32 accumulator, which is added once to
 * the gradient after the last tile (the host's rule); the gain's
 * gradient is the norm backward's fp32 partial sums, kept over all tiles
 * and summed once.
 *
 * The workspace is the op's host layout (mlp_tile_layout), the bytes the
 * planner keeps free for it: the same tile intermediates, adapter buffers
 * and accumulators; the norm's partial sums take the norm's scratch (as
 * many blocks as fit, at most NORM_PARTS) and the per-tile weight
 * products the linears' scratch, which holds an fp32 copy of the largest
 * weight wherever one is needed. */
#include <inttypes.h>
#include "cuda_gen_impl.h"
#include "mlp_tile.h"

enum {
    GMLP_MAX_TILES = 4096, /* the launches of a tiled MLP grow with its tiles (as the chunked loss's) */
    GMLP_NORM_PARTS = 128, /* blocks of the norm's backward (cuda_gen_norm.c's NORM_PARTS) */
};

/* An operand: tensor t plus off elements, or (t == CUDA_GEMM_WS) the op's workspace at byte off. */
typedef struct Opnd {
    int t;
    int64_t off;
} Opnd;

typedef struct Gm {
    GenCtx *c;
    DType dt;
    int64_t es, ws;         /* element size; the layout's start in the op's workspace */
    int64_t R, D, I, C;     /* rows, widths, rows a tile */
    int nf;                 /* the forward op's inputs (5 or 11) */
    int in[11];             /* its tensors, -1 where absent */
    double lora[3], eps, offset;
    bool gelu;
    MlpTileWs L;
    int64_t parts;          /* the norm backward's blocks */
    const char *rows;       /* "rows [r0, r1)" of the tile */
} Gm;

static Opnd W_(Gm *m, uint64_t off) { return (Opnd){CUDA_GEMM_WS, m->ws + (int64_t)off}; }
static Opnd T_off(int t, int64_t off) { return (Opnd){t, off}; }
static void arg_o(Gm *m, CudaKernel *k, Opnd x) {
    if (x.t == CUDA_GEMM_WS) arg_ws(k, x.off);
    else arg_t_off(k, x.t, x.off * m->es);
}
/* For cg_gemm_ws (its workspace base 0): an operand's element offset. */
static int64_t gemm_off(Gm *m, Opnd x) { return x.t == CUDA_GEMM_WS ? x.off / m->es : x.off; }

static const char *say(Gm *m, const char *what) { return arena_printf(m->c->cg->arena, "%s, %s", what, m->rows); }

/* C[M, N] (beta 0: =, 1: +=) op(A) op(B), row-major with the given leading dimensions. */
static void gemm(Gm *m, bool ta, bool tb, int64_t M, int64_t N, int64_t K, Opnd A, int64_t lda, Opnd B, int64_t ldb,
                 double beta, Opnd C, int64_t ldc, const char *role) {
    cg_gemm_ws(m->c, m->dt, ta, tb, M, N, K, A.t, gemm_off(m, A), lda, B.t, gemm_off(m, B), ldb, beta, C.t, gemm_off(m, C),
               ldc, 0, say(m, role));
}

static void fill(Gm *m, Opnd y, int64_t n, const char *role) {
    CudaKernel *k = cg_kdt(m->c, "elementwise", m->dt, "zk_fill", say(m, role));
    elementwise_grid(k, n);
    arg_o(m, k, y);
    arg_i(k, n);
    arg_f(k, 0.0);
}

/* y = a * b (mul) or a + b, n elements. */
static void binary(Gm *m, Opnd y, Opnd a, Opnd b, int64_t n, bool mul, const char *role) {
    CudaKernel *k = cg_kdt(m->c, "elementwise", m->dt, "zk_binary_fwd", say(m, role));
    elementwise_grid(k, n);
    arg_o(m, k, y);
    arg_o(m, k, a);
    arg_o(m, k, b);
    arg_i(k, n);
    arg_i(k, n);
    arg_i(k, n);
    arg_i(k, mul);
}

/* y += by * x */
static void axpy(Gm *m, Opnd y, Opnd x, int64_t n, double by, const char *role) {
    CudaKernel *k = cg_kdt(m->c, "elementwise", m->dt, "zk_axpy", say(m, role));
    elementwise_grid(k, n);
    arg_o(m, k, y);
    arg_o(m, k, x);
    arg_i(k, n);
    arg_f(k, by);
}

static int64_t pin(int j, const Gm *m) { return j < 2 ? m->D : m->I; }  /* projection j's input width */
static int64_t pout(int j, const Gm *m) { return j < 2 ? m->I : m->D; } /* and its output width */
static bool has_ad(const Gm *m, int j) { return m->nf == 11 && m->in[5 + 2 * j] >= 0; }
static const char *const pname[3] = {"gate", "up", "down"};

/* Projection j of v [r, pin] into out [r, pout]: v w_j and, with an adapter,
 * + lora_j * (v A_j) B_j, in the unfused ops' order. */
static void proj_fwd(Gm *m, int j, int64_t r, Opnd v, Opnd out) {
    Arena *a = m->c->cg->arena;
    int64_t K = pin(j, m), O = pout(j, m);
    Opnd w = T_off(m->in[2 + j], 0);
    if (!has_ad(m, j)) {
        gemm(m, false, false, r, O, K, v, K, w, O, 0, out, O, arena_printf(a, "%s = v*w_%s", pname[j], pname[j]));
        return;
    }
    const uint64_t *ad = m->L.ad[j];
    int64_t rk = T_(m->c, m->in[5 + 2 * j])->dims[1];
    gemm(m, false, false, r, O, K, v, K, w, O, 0, W_(m, ad[0]), O, arena_printf(a, "%s base = v*w_%s", pname[j], pname[j]));
    gemm(m, false, false, r, rk, K, v, K, T_off(m->in[5 + 2 * j], 0), rk, 0, W_(m, ad[4]), rk,
         arena_printf(a, "%s p = v*A", pname[j]));
    gemm(m, false, false, r, O, rk, W_(m, ad[4]), rk, T_off(m->in[6 + 2 * j], 0), O, 0, W_(m, ad[1]), O,
         arena_printf(a, "%s q = p*B", pname[j]));
    fill(m, W_(m, ad[2]), r * O, "adapter qs = 0 (then qs += scale * q)");
    axpy(m, W_(m, ad[2]), W_(m, ad[1]), r * O, m->lora[j], "adapter qs += scale * q");
    binary(m, out, W_(m, ad[0]), W_(m, ad[2]), r * O, false, arena_printf(a, "%s = base + qs", pname[j]));
}

/* A weight's gradient for a tile: dW (+)= op(A) op(B) [M, N]. Where the
 * gradient is f32: in place (beta 1); else the tile's product in the
 * linears' scratch, added into the fp32 accumulator. */
static void wgrad(Gm *m, int i, bool ta, int64_t M, int64_t N, int64_t K, Opnd A, int64_t lda, Opnd B, int64_t ldb,
                  const int *din, const char *role) {
    if (din[i] < 0) return;
    if (m->L.acc[i] < 0) {
        gemm(m, ta, false, M, N, K, A, lda, B, ldb, 1, T_off(din[i], 0), N, role);
        return;
    }
    gemm(m, ta, false, M, N, K, A, lda, B, ldb, 0, W_(m, m->L.lin), N,
         arena_printf(m->c->cg->arena, "%s (the tile's, into the scratch)", role));
    CudaKernel *k = cg_kdt(m->c, "elementwise", m->dt, "zk_cast_to_f32", say(m, "fp32 accumulator += the tile's product"));
    elementwise_grid(k, M * N);
    arg_ws(k, m->ws + m->L.acc[i]);
    arg_ws(k, m->ws + (int64_t)m->L.lin);
    arg_i(k, M * N);
    arg_f(k, 1.0);
    arg_i(k, 1);
}

/* The backward of proj_fwd: dv += ... and the parameters' gradients
 * (din[i], -1: not wanted), the reverse of its order. */
static void proj_bwd(Gm *m, int j, int64_t r, Opnd v, Opnd dout, Opnd dv, const int *din) {
    Arena *a = m->c->cg->arena;
    int64_t K = pin(j, m), O = pout(j, m);
    int w = m->in[2 + j];
    if (has_ad(m, j)) {
        const uint64_t *ad = m->L.ad[j];
        int A = m->in[5 + 2 * j], B = m->in[6 + 2 * j];
        int64_t rk = T_(m->c, A)->dims[1];
        fill(m, W_(m, ad[3]), r * O, "adapter dq = 0");
        fill(m, W_(m, ad[5]), r * rk, "adapter dp = 0");
        axpy(m, W_(m, ad[3]), dout, r * O, m->lora[j], "adapter dq += scale * dout");
        gemm(m, false, true, r, rk, O, W_(m, ad[3]), O, T_off(B, 0), O, 1, W_(m, ad[5]), rk,
             arena_printf(a, "%s adapter dp += dq*B^T", pname[j]));
        wgrad(m, 6 + 2 * j, true, rk, O, r, W_(m, ad[4]), rk, W_(m, ad[3]), O, din,
              arena_printf(a, "d(%s B) += p^T*dq", pname[j]));
        gemm(m, false, true, r, K, rk, W_(m, ad[5]), rk, T_off(A, 0), rk, 1, dv, K,
             arena_printf(a, "%s adapter dv += dp*A^T", pname[j]));
        wgrad(m, 5 + 2 * j, true, K, rk, r, v, K, W_(m, ad[5]), rk, din, arena_printf(a, "d(%s A) += v^T*dp", pname[j]));
    }
    gemm(m, false, true, r, K, O, dout, O, T_off(w, 0), O, 1, dv, K, arena_printf(a, "%s dv += dout*w^T", pname[j]));
    wgrad(m, 2 + j, true, K, O, r, v, K, dout, O, din, arena_printf(a, "dw_%s += v^T*dout", pname[j]));
}

static void act(Gm *m, bool bwd, int64_t n) {
    const char *e = m->gelu ? (bwd ? "zk_gelu_bwd" : "zk_gelu_fwd") : (bwd ? "zk_silu_bwd" : "zk_silu_fwd");
    CudaKernel *k = cg_kdt(m->c, "elementwise", m->dt, e,
                           say(m, bwd ? (m->gelu ? "da += gelu'(a)*ds" : "da += silu'(a)*ds") : (m->gelu ? "s = gelu(a)" : "s = silu(a)")));
    elementwise_grid(k, n);
    const uint64_t *mid = m->L.mid; /* a, s, u, h, dh, ds, du, da */
    arg_o(m, k, W_(m, bwd ? mid[7] : mid[1]));
    arg_o(m, k, W_(m, mid[0]));
    if (bwd) arg_o(m, k, W_(m, mid[5]));
    arg_i(k, n);
}

/* A tile's forward up to h, and y's rows when y >= 0. */
static void tile_fwd(Gm *m, int64_t r0, int64_t r, int y) {
    const uint64_t *mid = m->L.mid;
    CudaKernel *k = cg_kdt(m->c, "norm", m->dt, "zk_rmsnorm_fwd",
                           say(m, m->offset != 0 ? "n = x/sqrt(mean(x^2) + eps)*(offset + g)" : "n = x/sqrt(mean(x^2) + eps)*g"));
    k->grid[0] = cg_gdim(m->c, r, 0x7fffffff);
    k->block[0] = 256;
    arg_o(m, k, W_(m, m->L.n));
    arg_o(m, k, T_off(m->in[0], r0 * m->D));
    arg_t(k, m->in[1]);
    arg_i(k, r);
    arg_i(k, m->D);
    arg_f(k, m->eps);
    arg_f(k, m->offset);
    proj_fwd(m, 0, r, W_(m, m->L.n), W_(m, mid[0]));
    act(m, false, r * m->I);
    proj_fwd(m, 1, r, W_(m, m->L.n), W_(m, mid[2]));
    binary(m, W_(m, mid[3]), W_(m, mid[1]), W_(m, mid[2]), r * m->I, true, "h = s * u");
    if (y >= 0) proj_fwd(m, 2, r, W_(m, mid[3]), T_off(y, r0 * m->D));
}

/* A tile's backward: the forward again, then down, mul, up, act, gate and the norm. */
static void tile_bwd(Gm *m, int64_t r0, int64_t r, int dy, int dx, const int *din) {
    const uint64_t *mid = m->L.mid; /* a, s, u, h, dh, ds, du, da */
    int64_t nI = r * m->I;
    tile_fwd(m, r0, r, -1);
    if (has_ad(m, 2)) /* the down adapter's p, which its B's gradient reads */
        gemm(m, false, false, r, T_(m->c, m->in[9])->dims[1], m->I, W_(m, mid[3]), m->I, T_off(m->in[9], 0),
             T_(m->c, m->in[9])->dims[1], 0, W_(m, m->L.ad[2][4]), T_(m->c, m->in[9])->dims[1], "down p = h*A");
    for (int i = 4; i < 8; i++) fill(m, W_(m, mid[i]), nI, "an intermediate's gradient = 0");
    fill(m, W_(m, m->L.dn), r * m->D, "dn = 0");
    proj_bwd(m, 2, r, W_(m, mid[3]), T_off(dy, r0 * m->D), W_(m, mid[4]), din);
    const char *fwd_roles[2] = {"ds += dh * u", "du += dh * s"};
    for (int i = 0; i < 2; i++) {
        CudaKernel *k = cg_kdt(m->c, "elementwise", m->dt, "zk_binary_bwd_full", say(m, fwd_roles[i]));
        elementwise_grid(k, nI);
        arg_o(m, k, W_(m, mid[5 + i]));
        arg_o(m, k, W_(m, mid[4]));
        arg_o(m, k, W_(m, mid[i ? 1 : 2]));
        arg_i(k, nI);
        arg_i(k, nI);
        arg_i(k, 1);
    }
    proj_bwd(m, 1, r, W_(m, m->L.n), W_(m, mid[6]), W_(m, m->L.dn), din);
    act(m, true, nI);
    proj_bwd(m, 0, r, W_(m, m->L.n), W_(m, mid[7]), W_(m, m->L.dn), din);
    if (dx < 0 && din[1] < 0) return;
    CudaKernel *k = cg_kdt(m->c, "norm", m->dt, "zk_rmsnorm_bwd",
                           say(m, din[1] >= 0 ? "dx += rmsnorm vjp; partials of dg (kept over the tiles)" : "dx += rmsnorm vjp"));
    k->grid[0] = cg_gdim(m->c, m->parts, 0x7fffffff);
    k->block[0] = 256;
    if (dx >= 0) arg_t_off(k, dx, r0 * m->D * m->es);
    else arg_t(k, -1);
    if (din[1] >= 0) arg_ws(k, m->ws + (int64_t)m->L.norm);
    else arg_t(k, -1);
    arg_o(m, k, T_off(m->in[0], r0 * m->D));
    arg_t(k, m->in[1]);
    arg_o(m, k, W_(m, m->L.dn));
    arg_i(k, r);
    arg_i(k, m->D);
    arg_f(k, m->eps);
    arg_i(k, dx >= 0);
    arg_i(k, din[1] >= 0);
    arg_f(k, m->offset);
}

/* The op's checks and its shape into m; false (reported) when the CUDA kernels cannot run it. */
static bool gm_setup(GenCtx *c, bool bwd, Gm *m) {
    const GOp *o = c->o;
    memset(m, 0, sizeof *m);
    m->c = c;
    m->nf = bwd ? o->nfin : o->nin;
    if (m->nf != 5 && m->nf != 11) {
        cg_fail(c, "gated_mlp takes 5 or 11 inputs, not %d", m->nf);
        return false;
    }
    for (int i = 0; i < 11; i++) m->in[i] = i < m->nf ? o->in[i] : -1;
    if (!mlp_tile_layout(c->g, o, 0, &m->L)) {
        cg_fail(c, "gated_mlp lacks one of x, g, w_gate, w_up, w_down or its output, or their shapes do not go together");
        return false;
    }
    const GTensor *X = T_(c, m->in[0]);
    m->dt = X->dtype;
    m->es = m->dt == DT_F32 ? 4 : 2;
    m->D = last_dim(X);
    m->I = T_(c, m->in[2])->dims[1];
    m->R = X->numel / (m->D ? m->D : 1);
    m->C = m->L.rows;
    for (int i = 2; i < m->nf; i++) {
        const GTensor *t = m->in[i] >= 0 ? T_(c, m->in[i]) : NULL;
        if (t && dtype_is_quant(t->dtype)) {
            cg_fail(c, "gated_mlp: '%s' is stored quantized (%s), which the CUDA kernels of the tiled MLP do not read: plan "
                       "with plan { mlp_tile = 0 }", t->name ? t->name : "?", dtype_name(t->dtype));
            return false;
        }
    }
    int ts[12];
    for (int i = 0; i < 11; i++) ts[i] = m->in[i];
    ts[11] = bwd ? o->in[m->nf] : o->out[0];
    if (!cg_same_dtype(c, m->dt, ts, 12)) return false;
    if (T_(c, ts[11])->numel != X->numel) {
        cg_fail(c, "gated_mlp: the output has %" PRId64 " elements, x %" PRId64, T_(c, ts[11])->numel, X->numel);
        return false;
    }
    if ((m->R + m->C - 1) / m->C > GMLP_MAX_TILES) {
        cg_fail(c, "gated_mlp: %" PRId64 " rows in tiles of %" PRId64 " are more than the CUDA kernels' %d tiles (some 30 "
                   "launches each, every step): plan a larger mlp_tile",
                m->R, m->C, GMLP_MAX_TILES);
        return false;
    }
    int64_t act_kind = o->iattr[IA_GATED_MLP_ACT];
    if (act_kind != GATED_MLP_SILU && act_kind != GATED_MLP_GELU) {
        cg_fail(c, "gated_mlp: unknown act %" PRId64, act_kind);
        return false;
    }
    m->gelu = act_kind == GATED_MLP_GELU;
    m->eps = o->fattr[FA_GATED_MLP_EPS] > 0 ? o->fattr[FA_GATED_MLP_EPS] : 1e-5;
    m->offset = o->fattr[FA_GATED_MLP_OFFSET];
    m->lora[0] = o->fattr[FA_GATED_MLP_LORA_GATE];
    m->lora[1] = o->fattr[FA_GATED_MLP_LORA_UP];
    m->lora[2] = o->fattr[FA_GATED_MLP_LORA_DOWN];
    /* the norm backward's blocks: as many fp32 partial rows of D as its scratch holds, at most one per row */
    m->parts = (int64_t)(m->L.norm_bytes / (4 * (uint64_t)m->D));
    if (m->parts > GMLP_NORM_PARTS) m->parts = GMLP_NORM_PARTS;
    if (m->parts > m->C) m->parts = m->C;
    if (m->parts < 1) {
        cg_fail(c, "gated_mlp: the norm's scratch holds no row of partial sums");
        return false;
    }
    m->ws = cg_ws_alloc(c, (int64_t)m->L.total);
    return true;
}

void cg_gen_gmlp(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    Gm m;
    if (!gm_setup(c, bwd, &m)) return;
    Arena *a = c->cg->arena;
    if (!bwd) {
        for (int64_t r0 = 0; r0 < m.R; r0 += m.C) {
            int64_t r = m.R - r0 < m.C ? m.R - r0 : m.C;
            m.rows = arena_printf(a, "rows [%" PRId64 ", %" PRId64 ")", r0, r0 + r);
            tile_fwd(&m, r0, r, o->out[0]);
        }
        return;
    }
    /* the gradients wanted: present and not frozen */
    int din[11], dx = o->nout > 0 ? o->out[0] : -1, dy = o->in[m.nf + 1];
    bool any = dx >= 0;
    din[0] = -1;
    for (int i = 1; i < 11; i++) {
        din[i] = i < m.nf && i < o->nout && !(o->iattr[IA_GATED_MLP_FROZEN] >> i & 1) ? o->out[i] : -1;
        any = any || din[i] >= 0;
    }
    if (!any) return;
    int ts[12] = {dy, dx};
    for (int i = 1; i < 11; i++) ts[i + 1] = din[i];
    if (!cg_same_dtype(c, m.dt, ts, 12)) return;
    for (int i = 0; i < 12; i++) { /* each gradient the size of its input (dy and dx: of x) */
        int of = i < 2 ? m.in[0] : m.in[i - 1];
        if (ts[i] >= 0 && T_(c, ts[i])->numel != T_(c, of)->numel) {
            cg_fail(c, "gated_mlp: a gradient of %" PRId64 " elements for an input of %" PRId64, T_(c, ts[i])->numel,
                    T_(c, of)->numel);
            return;
        }
    }
    m.rows = "before the tiles";
    for (int i = 2; i < 11; i++) { /* a non-f32 weight's product of a tile goes through the linears' scratch */
        if (din[i] < 0 || m.L.acc[i] < 0) continue;
        if ((uint64_t)T_(c, din[i])->numel * (uint64_t)m.es > m.L.lin_bytes) {
            cg_fail(c, "gated_mlp: the linears' scratch (%" PRIu64 " bytes) is smaller than %s's gradient",
                    m.L.lin_bytes, T_(c, din[i])->name ? T_(c, din[i])->name : "?");
            return;
        }
        cg_fill_ws_f32(c, m.dt, m.ws + m.L.acc[i], T_(c, din[i])->numel, "zero a weight gradient's fp32 accumulator");
    }
    if (din[1] >= 0) cg_fill_ws_f32(c, m.dt, m.ws + (int64_t)m.L.norm, m.parts * m.D, "zero the gain gradient's partials");
    for (int64_t r0 = 0; r0 < m.R; r0 += m.C) {
        int64_t r = m.R - r0 < m.C ? m.R - r0 : m.C;
        m.rows = arena_printf(a, "rows [%" PRId64 ", %" PRId64 ")", r0, r0 + r);
        tile_bwd(&m, r0, r, dy, dx, din);
    }
    m.rows = "after the tiles";
    if (din[1] >= 0) {
        CudaKernel *k = cg_kdt(c, "reduce", m.dt, "zk_colsum_final", "dg += sum of the partials of every tile");
        elementwise_grid(k, m.D);
        arg_t(k, din[1]);
        arg_ws(k, m.ws + (int64_t)m.L.norm);
        arg_i(k, m.parts);
        arg_i(k, m.D);
        arg_f(k, 1.0);
        arg_i(k, 1);
    }
    for (int i = 2; i < 11; i++) {
        if (din[i] < 0 || m.L.acc[i] < 0) continue;
        CudaKernel *k = cg_kdt(c, "elementwise", m.dt, "zk_cast_from_f32", "a weight's gradient += its fp32 accumulator (once)");
        elementwise_grid(k, T_(c, din[i])->numel);
        arg_t(k, din[i]);
        arg_ws(k, m.ws + m.L.acc[i]);
        arg_i(k, T_(c, din[i])->numel);
        arg_f(k, 1.0);
        arg_i(k, 1);
    }
}
