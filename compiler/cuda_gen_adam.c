/* cuda_gen_adam: the launch of an AdamW step (fp32 master, moments, the
 * run-time learning rate and bias corrections) on stdlib/kernels/adam.cu. */
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
    if (T_(c, m)->dtype != DT_F32 || T_(c, v)->dtype != DT_F32 || (ms >= 0 && T_(c, ms)->dtype != DT_F32)) {
        cg_fail(c, "adam: master and moments must be f32");
        return;
    }
    if (ms < 0 && dt != DT_F32) {
        cg_fail(c, "adam: a %s parameter needs an fp32 master", cuda_dtype_name(dt));
        return;
    }
    int64_t n = T_(c, p)->numel;
    CudaKernel *k = cg_kdt(c, "adam", dt, "zk_adam", "AdamW step (fp32 master, m, v)");
    elementwise_grid(k, n);
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
