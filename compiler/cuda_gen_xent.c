/* cuda_gen_xent: the launches of cross_entropy (row losses, their mean, the
 * logits' gradient) on stdlib/kernels/xent.cu. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

void cg_gen_xent(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int lg = o->in[0], tg = o->in[1];
    const GTensor *L = T_(c, lg);
    int64_t V = last_dim(L), N = L->numel / (V ? V : 1);
    DType dt = L->dtype;
    if (T_(c, tg)->dtype != DT_I32 || T_(c, tg)->numel != N) {
        cg_fail(c, "cross_entropy needs i32 targets with one per row of logits");
        return;
    }
    if (!float_dtype(dt)) {
        cg_fail(c, "cross_entropy: logits dtype %s is not supported", cuda_dtype_name(dt));
        return;
    }
    if (N > 0x7fffffff) {
        cg_fail(c, "cross_entropy: too many rows for the grid");
        return;
    }
    if (!bwd) {
        if (T_(c, o->out[0])->dtype != DT_F32) {
            cg_fail(c, "cross_entropy: the loss must be f32");
            return;
        }
        int64_t err = cg_err_word(c, dt, "cross_entropy target");
        int64_t rl = cg_ws_alloc(c, N * 4);
        CudaKernel *k = cg_kdt(c, "xent", dt, "zk_xent_fwd", "row_loss = logsumexp(logits) - logits[target]");
        k->grid[0] = cg_gdim(c, (N > 0 ? N : 1), 0x7fffffff);
        k->block[0] = 256;
        arg_ws(k, rl);
        arg_t(k, lg);
        arg_t(k, tg);
        arg_i(k, N);
        arg_i(k, V);
        arg_ws(k, err);
        k = cg_kdt(c, "xent", dt, "zk_xent_mean", "loss = mean(row_loss)");
        k->block[0] = 256;
        arg_t(k, o->out[0]);
        arg_ws(k, rl);
        arg_i(k, N);
        return;
    }
    int dl = o->out[0], dloss = o->in[o->nfin + 1];
    if (dl < 0) return;
    int ts[2] = {lg, dl};
    if (!cg_same_dtype(c, dt, ts, 2)) return;
    CudaKernel *k = cg_kdt(c, "xent", dt, "zk_xent_bwd", "dlogits += (softmax - onehot(target)) * dloss / N");
    k->grid[0] = cg_gdim(c, (N > 0 ? N : 1), 0x7fffffff);
    k->block[0] = 256;
    arg_t(k, dl);
    arg_t(k, lg);
    arg_t(k, tg);
    arg_t(k, dloss);
    arg_i(k, N);
    arg_i(k, V);
}

/* linear_cross_entropy has host kernels only (runtime/hostk/hostk_linxent.c):
 * a CUDA plan that needs the chunked loss is refused here, by name. */
void cg_gen_linxent(GenCtx *c, bool bwd) {
    (void)bwd;
    cg_fail(c, "linear_cross_entropy (the chunked loss) has no CUDA kernels yet: it runs on the host backend; plan with "
               "plan { loss_chunk = 0 } to keep the logits whole");
}
