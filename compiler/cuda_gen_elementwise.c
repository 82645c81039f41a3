/* cuda_gen_elementwise: the launches on stdlib/kernels/elementwise.cu: add
 * and mul (with broadcasting), gelu and silu, split, arange, fills (zero
 * gradients, the loss gradient seed, workspace and error words) and the
 * executor's casts, axpy and scale (cuda_gen_cast, _axpy, _scale), and the
 * scale primitive on the fill and axpy kernels. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

void cg_fill(GenCtx *c, int t, double v, const char *role) {
    const GTensor *x = T_(c, t);
    CudaKernel *k;
    if (x->dtype == DT_I32) {
        k = cg_kdt(c, "elementwise", c->g->train.dtype, "zk_fill_i32", role);
        arg_t(k, t);
        arg_i(k, x->numel);
        arg_i(k, (int64_t)v);
    } else {
        k = cg_kdt(c, "elementwise", x->dtype, "zk_fill", role);
        arg_t(k, t);
        arg_i(k, x->numel);
        arg_f(k, v);
    }
    elementwise_grid(k, x->numel);
}

void cg_fill_ws_f32(GenCtx *c, DType unit_dt, int64_t off, int64_t n, const char *role) {
    CudaKernel *k = cg_kdt(c, "elementwise", unit_dt, "zk_fill_f32", role);
    arg_ws(k, off);
    arg_i(k, n);
    arg_f(k, 0.0);
    elementwise_grid(k, n);
}

int64_t cg_err_word(GenCtx *c, DType unit_dt, const char *what) {
    int64_t off = cg_ws_alloc(c, 16);
    c->info.err_off = off;
    c->info.err_what = what;
    CudaKernel *k = cg_kdt(c, "elementwise", unit_dt, "zk_fill_i32", "clear the error word");
    arg_ws(k, off);
    arg_i(k, 4);
    arg_i(k, 0);
    k->grid[0] = 1;
    k->block[0] = 32;
    return off;
}

/* A [T, ...] operand broadcast over the batch of a [B, T, ...] one (a
 * learned position embedding): its launches read the micro-batch's sample
 * starts, so that in a packed row each token reads its sample's own
 * position (zk_binary_pos_*). *big: the [B, T, ...] operand's index. */
static bool positional(GenCtx *c, int a, int b, int *big) {
    const GTensor *A = T_(c, a), *Bt = T_(c, b);
    const GTensor *g = A->rank >= Bt->rank ? A : Bt, *s = A->rank >= Bt->rank ? Bt : A;
    *big = A->rank >= Bt->rank ? 0 : 1;
    if (s->rank < 2 || g->rank != s->rank + 1) return false;
    for (int i = 0; i < s->rank; i++)
        if (s->dims[i] != g->dims[i + 1]) return false;
    return true;
}

static void gen_binary_pos(GenCtx *c, bool bwd, int ibig) {
    const GOp *o = c->o;
    int big = o->in[ibig], small = o->in[1 - ibig];
    const GTensor *S = T_(c, small);
    int64_t n = T_(c, big)->numel, ns = S->numel, Tn = S->dims[0];
    int64_t op = o->prim == PRIM_MUL;
    DType dt = T_(c, big)->dtype;
    if (!bwd) {
        int ts[3] = {big, small, o->out[0]};
        if (!cg_same_dtype(c, dt, ts, 3)) return;
        CudaKernel *k = cg_kdt(c, "elementwise", dt, "zk_binary_pos_fwd",
                               op ? "y = a * b[position in its sample]" : "y = a + b[position in its sample]");
        elementwise_grid(k, n);
        arg_t(k, o->out[0]);
        arg_t(k, big);
        arg_t(k, small);
        arg_seg(k);
        arg_i(k, n);
        arg_i(k, ns);
        arg_i(k, Tn);
        arg_i(k, op);
        return;
    }
    int dy = o->in[o->nfin + 1];
    int dbig = o->nout > ibig ? o->out[ibig] : -1, dsmall = o->nout > 1 - ibig ? o->out[1 - ibig] : -1;
    int ts[5] = {big, small, dy, dbig, dsmall};
    if (!cg_same_dtype(c, dt, ts, 5)) return;
    if (dbig >= 0) {
        CudaKernel *k = cg_kdt(c, "elementwise", dt, "zk_binary_pos_bwd_big",
                               op ? "d(batch operand) += dy * b[position]" : "d(batch operand) += dy");
        elementwise_grid(k, n);
        arg_t(k, dbig);
        arg_t(k, dy);
        arg_t(k, small);
        arg_seg(k);
        arg_i(k, n);
        arg_i(k, ns);
        arg_i(k, Tn);
        arg_i(k, op);
    }
    if (dsmall >= 0) {
        CudaKernel *k = cg_kdt(c, "elementwise", dt, "zk_binary_pos_bwd_small",
                               op ? "d(position operand) += sum over its tokens of dy * a"
                                  : "d(position operand) += sum over its tokens of dy");
        elementwise_grid(k, ns);
        arg_t(k, dsmall);
        arg_t(k, dy);
        arg_t(k, big);
        arg_seg(k);
        arg_i(k, n);
        arg_i(k, ns);
        arg_i(k, Tn);
        arg_i(k, op);
    }
}

void cg_gen_binary(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int ibig;
    if (positional(c, o->in[0], o->in[1], &ibig)) {
        gen_binary_pos(c, bwd, ibig);
        return;
    }
    int a = o->in[0], b = o->in[1];
    int64_t na = T_(c, a)->numel, nb = T_(c, b)->numel;
    int64_t n = na > nb ? na : nb;
    int64_t small = na < nb ? na : nb;
    bool mul = o->prim == PRIM_MUL;
    if (small <= 0 || n % small != 0) {
        cg_fail(c, "%s: sizes %" PRId64 " and %" PRId64 " do not broadcast", prim_names[o->prim], na, nb);
        return;
    }
    DType dt = T_(c, a)->dtype;
    if (!bwd) {
        int ts[3] = {a, b, o->out[0]};
        if (!cg_same_dtype(c, dt, ts, 3)) return;
        CudaKernel *k = cg_kdt(c, "elementwise", dt, "zk_binary_fwd", mul ? "y = a * b" : "y = a + b");
        elementwise_grid(k, n);
        arg_t(k, o->out[0]);
        arg_t(k, a);
        arg_t(k, b);
        arg_i(k, n);
        arg_i(k, na);
        arg_i(k, nb);
        arg_i(k, mul);
        return;
    }
    int dy = o->in[o->nfin + 1];
    int ts[5] = {a, b, dy, o->out[0], o->nout > 1 ? o->out[1] : -1};
    if (!cg_same_dtype(c, dt, ts, 5)) return;
    for (int i = 0; i < 2 && i < o->nout; i++) {
        int gx = o->out[i], x = i ? b : a, other = i ? a : b;
        if (gx < 0) continue;
        int64_t nx = T_(c, x)->numel, no = T_(c, other)->numel;
        if (nx == n) {
            CudaKernel *k = cg_kdt(c, "elementwise", dt, "zk_binary_bwd_full",
                                mul ? (i ? "db += dy * a" : "da += dy * b") : (i ? "db += dy" : "da += dy"));
            elementwise_grid(k, n);
            arg_t(k, gx);
            arg_t(k, dy);
            arg_t(k, other);
            arg_i(k, n);
            arg_i(k, no);
            arg_i(k, mul);
        } else {
            cg_colsum(c, gx, dy, mul ? other : -1, n / nx, nx,
                     mul ? "d(broadcast operand) += sum over broadcast dims of dy * other"
                         : "d(broadcast operand) += sum over broadcast dims of dy");
        }
    }
}

void cg_gen_act(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    bool gelu = o->prim == PRIM_GELU;
    int x = o->in[0];
    DType dt = T_(c, x)->dtype;
    int64_t n = T_(c, x)->numel;
    if (!bwd) {
        int ts[2] = {x, o->out[0]};
        if (!cg_same_dtype(c, dt, ts, 2)) return;
        CudaKernel *k = cg_kdt(c, "elementwise", dt, gelu ? "zk_gelu_fwd" : "zk_silu_fwd", gelu ? "y = gelu(x)" : "y = silu(x)");
        elementwise_grid(k, n);
        arg_t(k, o->out[0]);
        arg_t(k, x);
        arg_i(k, n);
        return;
    }
    if (o->out[0] < 0) return;
    int dy = o->in[o->nfin + 1];
    int ts[3] = {x, dy, o->out[0]};
    if (!cg_same_dtype(c, dt, ts, 3)) return;
    CudaKernel *k = cg_kdt(c, "elementwise", dt, gelu ? "zk_gelu_bwd" : "zk_silu_bwd",
                        gelu ? "dx += gelu'(x)*dy" : "dx += silu'(x)*dy");
    elementwise_grid(k, n);
    arg_t(k, o->out[0]);
    arg_t(k, x);
    arg_t(k, dy);
    arg_i(k, n);
}

/* softcap: y = cap tanh(x / cap); dx += dy (1 - tanh^2(x / cap)). */
static void gen_softcap(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int x = o->in[0], y = o->out[0];
    double cap = o->fattr[FA_SOFTCAP_CAP];
    DType dt = T_(c, x)->dtype;
    int64_t n = T_(c, x)->numel;
    if (!(cap > 0)) {
        cg_fail(c, "softcap: cap must be positive (got %g)", cap);
        return;
    }
    if (y < 0) return;
    int dy = bwd ? o->in[o->nfin + 1] : -1;
    int ts[3] = {x, y, dy};
    if (!cg_same_dtype(c, dt, ts, 3)) return;
    CudaKernel *k = cg_kdt(c, "elementwise", dt, bwd ? "zk_softcap_bwd" : "zk_softcap_fwd",
                           bwd ? "dx += dy*(1 - tanh^2(x/cap))" : "y = cap*tanh(x/cap)");
    elementwise_grid(k, n);
    arg_t(k, y);
    arg_t(k, x);
    if (bwd) arg_t(k, dy);
    arg_i(k, n);
    arg_f(k, cap);
}

/* scale on the existing kernels: y = 0 then y += by * x; dx += by * dy. */
void cg_gen_scale(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    if (o->prim == PRIM_SOFTCAP) {
        gen_softcap(c, bwd);
        return;
    }
    int x = o->in[0];
    DType dt = T_(c, x)->dtype;
    int64_t n = T_(c, x)->numel;
    int y = o->out[0], src = bwd ? o->in[o->nfin + 1] : x;
    if (y < 0) return;
    int ts[3] = {x, src, y};
    if (!cg_same_dtype(c, dt, ts, 3)) return;
    if (!bwd) cg_fill(c, y, 0.0, "y = 0 (then y += by * x)");
    CudaKernel *k = cg_kdt(c, "elementwise", dt, "zk_axpy", bwd ? "dx += by * dy" : "y += by * x");
    elementwise_grid(k, n);
    arg_t(k, y);
    arg_t(k, src);
    arg_i(k, n);
    arg_f(k, o->fattr[FA_SCALE_BY]);
}

void cg_gen_split(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int x = o->in[0];
    const GTensor *X = T_(c, x);
    int64_t N = last_dim(X), rows = X->numel / (N ? N : 1);
    int npieces = bwd ? (o->nin - 1) / 2 : o->nout;
    int64_t off = 0;
    for (int i = 0; i < npieces; i++) {
        int piece = bwd ? o->in[1 + i] : o->out[i];
        int gp = bwd ? o->in[1 + npieces + i] : -1;
        /* a malformed op (the checks above cover only operand 0 and result 0) */
        if (piece < 0 || (bwd && o->out[0] >= 0 && gp < 0)) {
            cg_fail(c, "split: piece %d is missing", i);
            return;
        }
        int64_t w = last_dim(T_(c, piece));
        int ts[2] = {x, piece};
        if (!cg_same_dtype(c, X->dtype, ts, 2)) return;
        if (!bwd) {
            CudaKernel *k = cg_kdt(c, "elementwise", X->dtype, "zk_slice_cols", "piece = x[..., off:off+w]");
            elementwise_grid(k, rows * w);
            arg_t(k, piece);
            arg_t(k, x);
            arg_i(k, rows);
            arg_i(k, N);
            arg_i(k, off);
            arg_i(k, w);
        } else if (o->out[0] >= 0) {
            CudaKernel *k = cg_kdt(c, "elementwise", X->dtype, "zk_unslice_cols", "dx[..., off:off+w] += dpiece");
            elementwise_grid(k, rows * w);
            arg_t(k, o->out[0]);
            arg_t(k, gp);
            arg_i(k, rows);
            arg_i(k, N);
            arg_i(k, off);
            arg_i(k, w);
        }
        off += w;
    }
    if (off != N) cg_fail(c, "split: pieces cover %" PRId64 " of %" PRId64 " columns", off, N);
}

void cg_gen_arange(GenCtx *c, bool bwd) {
    if (bwd) return; /* a constant: nothing flows back */
    CudaKernel *k = cg_kdt(c, "elementwise", c->g->train.dtype, "zk_iota_i32", "y = 0, 1, ..., n-1");
    int64_t n = T_(c, c->o->out[0])->numel;
    elementwise_grid(k, n);
    arg_t(k, c->o->out[0]);
    arg_i(k, n);
}

void cg_gen_loss_grad(GenCtx *c) {
    int t = c->o->out[0];
    if (T_(c, t)->dtype != DT_F32) {
        cg_fail(c, "the loss gradient must be f32");
        return;
    }
    CudaKernel *k = cg_kdt(c, "elementwise", c->g->train.dtype, "zk_fill_f32", "dloss = loss scale / micro-batches");
    k->block[0] = 32;
    arg_t(k, t);
    arg_i(k, T_(c, t)->numel);
    arg_rt(k, CRT_LOSS_GRAD);
}

/* ---- launches outside the graph's ops ---------------------------------------- */


int cuda_gen_cast(CudaGen *cg, const Graph *g, int dst, int src, CudaKernel *out, DiagSink *d) {
    GenCtx c;
    int ts[2] = {dst, src};
    if (cg_util_begin(&c, cg, g, out, d, "cast", ts, 2) != 0) return -1;
    const GTensor *D = T_(&c, dst), *S = T_(&c, src);
    if (D->numel != S->numel) cg_fail(&c, "%s and %s differ in size", D->name ? D->name : "?", S->name ? S->name : "?");
    else if (!float_dtype(D->dtype) || !float_dtype(S->dtype) || (D->dtype != DT_F32 && S->dtype != DT_F32))
        cg_fail(&c, "casts go between f32 and a float dtype (not %s to %s)", cuda_dtype_name(S->dtype), cuda_dtype_name(D->dtype));
    else {
        bool to32 = D->dtype == DT_F32;
        CudaKernel *k = cg_kdt(&c, "elementwise", to32 ? S->dtype : D->dtype, to32 ? "zk_cast_to_f32" : "zk_cast_from_f32",
                            "dst = src (cast)");
        elementwise_grid(k, D->numel);
        arg_t(k, dst);
        arg_t(k, src);
        arg_i(k, D->numel);
        arg_f(k, 1.0);
        arg_i(k, 0);
    }
    return cg_util_end(&c);
}

int cuda_gen_axpy(CudaGen *cg, const Graph *g, int y, int x, double alpha, CudaKernel *out, DiagSink *d) {
    GenCtx c;
    int ts[2] = {y, x};
    if (cg_util_begin(&c, cg, g, out, d, "axpy", ts, 2) != 0) return -1;
    const GTensor *Y = T_(&c, y);
    if (Y->numel != T_(&c, x)->numel) cg_fail(&c, "y and x differ in size");
    else if (cg_same_dtype(&c, Y->dtype, ts, 2)) {
        CudaKernel *k = cg_kdt(&c, "elementwise", Y->dtype, "zk_axpy", "y += alpha * x");
        elementwise_grid(k, Y->numel);
        arg_t(k, y);
        arg_t(k, x);
        arg_i(k, Y->numel);
        arg_f(k, alpha);
    }
    return cg_util_end(&c);
}

int cuda_gen_scale(CudaGen *cg, const Graph *g, int y, double alpha, CudaKernel *out, DiagSink *d) {
    GenCtx c;
    if (cg_util_begin(&c, cg, g, out, d, "scale", &y, 1) != 0) return -1;
    const GTensor *Y = T_(&c, y);
    if (cg_same_dtype(&c, Y->dtype, &y, 1)) {
        CudaKernel *k = cg_kdt(&c, "elementwise", Y->dtype, "zk_scale", "y *= alpha");
        elementwise_grid(k, Y->numel);
        arg_t(k, y);
        arg_i(k, Y->numel);
        arg_f(k, alpha);
    }
    return cg_util_end(&c);
}
