/* cuda_gen_norm: the launches of layernorm and rmsnorm (rmsnorm per head
 * too, and with Gemma's gain offset) on stdlib/kernels/norm.cu; the
 * backward's gain and bias gradients are partial sums that reduce.cu's
 * zk_colsum_final adds up. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

enum { NORM_PARTS = 128 }; /* blocks (partial sums) of a norm backward */

static double eps_of(const GOp *o) { return o->fattr[FA_LAYERNORM_EPS] > 0 ? o->fattr[FA_LAYERNORM_EPS] : 1e-5; }

void cg_gen_norm(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    bool ln = o->prim == PRIM_LAYERNORM;
    int nfin = bwd ? o->nfin : o->nin;
    int x = o->in[0], g = nfin >= 2 ? o->in[1] : -1, bb = ln && nfin >= 3 ? o->in[2] : -1;
    /* rmsnorm's offset: the gain is offset + g (Gemma: 1 + w), formed in fp32 inside the kernels */
    double offset = ln ? 0 : o->fattr[FA_RMSNORM_OFFSET];
    if (offset != 0 && g < 0) {
        cg_fail(c, "rmsnorm: an offset needs a gain g (it scales by offset + g)");
        return;
    }
    const GTensor *X = T_(c, x);
    /* rmsnorm with heads = H: the same kernels over rows of hd = D/H values */
    int64_t heads = !ln && o->iattr[IA_RMSNORM_HEADS] > 1 ? o->iattr[IA_RMSNORM_HEADS] : 1;
    if (last_dim(X) % heads != 0) {
        cg_fail(c, "rmsnorm: heads = %" PRId64 " does not divide the last dimension %" PRId64, heads, last_dim(X));
        return;
    }
    int64_t D = last_dim(X) / heads, rows = X->numel / (D ? D : 1);
    DType dt = X->dtype;
    if (g >= 0 && T_(c, g)->numel != D) {
        cg_fail(c, "%s: gain has %" PRId64 " elements, expected %" PRId64, prim_names[o->prim], T_(c, g)->numel, D);
        return;
    }
    if (!bwd) {
        int ts[4] = {x, g, bb, o->out[0]};
        if (!cg_same_dtype(c, dt, ts, 4)) return;
        CudaKernel *k = cg_kdt(c, "norm", dt, ln ? "zk_layernorm_fwd" : "zk_rmsnorm_fwd",
                            ln ? "y = (x - mean)/sqrt(var + eps)*g + b"
                               : offset != 0 ? "y = x/sqrt(mean(x^2) + eps)*(offset + g)" : "y = x/sqrt(mean(x^2) + eps)*g");
        k->grid[0] = cg_gdim(c, (rows > 0 ? rows : 1), 0x7fffffff);
        k->block[0] = 256;
        arg_t(k, o->out[0]);
        arg_t(k, x);
        arg_t(k, g);
        if (ln) arg_t(k, bb);
        arg_i(k, rows);
        arg_i(k, D);
        arg_f(k, eps_of(o));
        if (!ln) arg_f(k, offset);
        return;
    }
    int dy = o->in[nfin + 1];
    int dx = o->out[0], dg = o->nout > 1 ? o->out[1] : -1, db = ln && o->nout > 2 ? o->out[2] : -1;
    int ts[6] = {x, g, dy, dx, dg, db};
    if (!cg_same_dtype(c, dt, ts, 6)) return;
    int64_t P = rows < NORM_PARTS ? rows : NORM_PARTS;
    if (P < 1) P = 1;
    int nparts = ln ? 2 : 1;
    int64_t off = 0;
    if (dg >= 0 || db >= 0) {
        off = cg_ws_alloc(c, nparts * P * D * 4);
        cg_fill_ws_f32(c, dt, off, nparts * P * D, "zero the parameter-gradient partials");
    }
    CudaKernel *k = cg_kdt(c, "norm", dt, ln ? "zk_layernorm_bwd" : "zk_rmsnorm_bwd",
                        ln ? "dx += layernorm vjp; partials of dg, db" : "dx += rmsnorm vjp; partials of dg");
    k->grid[0] = cg_gdim(c, P, 0x7fffffff);
    k->block[0] = 256;
    arg_t(k, dx);
    if (dg >= 0 || db >= 0) arg_ws(k, off);
    else arg_t(k, -1); /* g and b frozen (LoRA): no partials, no workspace; the kernel leaves ws alone */
    arg_t(k, x);
    arg_t(k, g);
    arg_t(k, dy);
    arg_i(k, rows);
    arg_i(k, D);
    arg_f(k, eps_of(o));
    arg_i(k, dx >= 0);
    arg_i(k, dg >= 0);
    if (ln) arg_i(k, db >= 0);
    else arg_f(k, offset);
    for (int i = 0; i < nparts; i++) {
        int t = i ? db : dg;
        if (t < 0) continue;
        k = cg_kdt(c, "reduce", dt, "zk_colsum_final", i ? "db += sum of partials" : "dg += sum of partials");
        elementwise_grid(k, D);
        arg_t(k, t);
        arg_ws(k, off + (int64_t)i * P * D * 4);
        arg_i(k, P);
        arg_i(k, D);
        arg_f(k, 1.0);
        arg_i(k, 1);
    }
}
