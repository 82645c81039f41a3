/* cuda_gen_adam: the launch of an AdamW step (fp32 master, moments in f32,
 * bf16 or 8-bit blocks, the run-time learning rate and bias corrections)
 * on stdlib/kernels/adam.cu. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

void cg_gen_adam(GenCtx *c) {
    const GOp *o = c->o;
    const TrainConfig *tc = &c->g->train;
    int p = o->in[0], gr = o->in[1], ms = o->in[2], m = o->in[3], v = o->in[4], nrm = o->in[5];
    if (p < 0 || gr < 0 || m < 0 || v < 0) {
        cg_fail(c, "adam needs a parameter, its gradient and both moments");
        return;
    }
    DType dt = T_(c, p)->dtype;
    int ts[2] = {p, gr};
    if (!cg_same_dtype(c, dt, ts, 2)) return;
    DType md = T_(c, m)->dtype, vd = T_(c, v)->dtype;
    bool f32s = md == DT_F32 && vd == DT_F32, bf16s = md == DT_BF16 && vd == DT_BF16, q8 = md == DT_DYN8 && vd == DT_UDYN8;
    if ((!f32s && !bf16s && !q8) || (ms >= 0 && T_(c, ms)->dtype != DT_F32)) {
        cg_fail(c, "adam: the master must be f32 and the moments f32, bf16, or dyn8 and udyn8");
        return;
    }
    if (ms < 0 && dt != DT_F32) {
        cg_fail(c, "adam: a %s parameter needs an fp32 master", cuda_dtype_name(dt));
        return;
    }
    int64_t n = T_(c, p)->numel;
    CudaKernel *k = f32s ? cg_kdt(c, "adam", dt, "zk_adam", "AdamW step (fp32 master, m, v)")
                  : bf16s ? cg_kdt(c, "adam", dt, "zk_adam_bf16s", "AdamW step (fp32 master, bf16 m, v)")
                          : cg_kdt(c, "adam", dt, "zk_adam_q8", "AdamW step (fp32 master, 8-bit m, v)");
    if (q8) { /* a CUDA block of 256 threads per block of 2048 elements */
        int64_t nb = (n + DTYPE_QSTATE_BLOCK - 1) / DTYPE_QSTATE_BLOCK;
        k->grid[0] = (unsigned)(nb < 65535 ? nb : 65535);
        k->block[0] = 256;
    } else {
        elementwise_grid(k, n);
    }
    arg_t(k, p);
    arg_t(k, ms);
    arg_t(k, gr);
    arg_t(k, m);
    arg_t(k, v);
    arg_t(k, nrm);
    arg_i(k, n);
    arg_rt(k, CRT_LR);
    arg_f(k, tc->beta1);
    arg_f(k, tc->beta2);
    arg_f(k, tc->eps);
    arg_f(k, c->o->iattr[GRAPH_ADAM_NO_DECAY] ? 0.0 : tc->weight_decay); /* train { no_decay } */
    arg_rt(k, CRT_BC1);
    arg_rt(k, CRT_BC2);
    arg_rt(k, CRT_INV_LOSS_SCALE);
    arg_f(k, tc->grad_clip);
}
