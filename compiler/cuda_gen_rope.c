/* cuda_gen_rope: the launch of rope (rotary position embedding, forward and
 * backward; linear, llama3 and YaRN frequency scaling) on stdlib/kernels/rope.cu. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

void cg_gen_rope(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int x = o->in[0];
    const GTensor *X = T_(c, x);
    int64_t H = o->iattr[IA_ROPE_HEADS], scaling = o->iattr[IA_ROPE_SCALING];
    double theta = o->fattr[FA_ROPE_THETA] > 0 ? o->fattr[FA_ROPE_THETA] : 10000.0;
    if (X->rank < 2 || H <= 0 || last_dim(X) % H != 0 || (last_dim(X) / H) % 2 != 0) {
        cg_fail(c, "rope needs x [B, T, H*hd] with heads dividing the last dim and hd even");
        return;
    }
    if (scaling < ROPE_NONE || scaling > ROPE_YARN) {
        cg_fail(c, "rope: unknown scaling %" PRId64, scaling);
        return;
    }
    int64_t C = last_dim(X), Tn = X->dims[X->rank - 2], B = X->numel / (C * Tn), hd = C / H;
    int y = o->out[0];
    int src = bwd ? o->in[o->nfin + 1] : x;
    if (y < 0) return;
    int ts[3] = {x, y, src};
    if (!cg_same_dtype(c, X->dtype, ts, 3)) return;
    CudaKernel *k = cg_kdt(c, "rope", X->dtype, "zk_rope", bwd ? "dx += rotate(dy, -t*f)" : "y = rotate(x, t*f)");
    elementwise_grid(k, X->numel / 2);
    arg_t(k, y);
    arg_t(k, src);
    arg_i(k, B);
    arg_i(k, Tn);
    arg_i(k, H);
    arg_i(k, hd);
    arg_f(k, theta);
    arg_i(k, bwd);
    arg_i(k, bwd);
    arg_i(k, scaling);
    arg_f(k, scaling ? o->fattr[FA_ROPE_FACTOR] : 1.0);
    /* low and high: llama3's frequency factors, or YaRN's beta_fast and beta_slow (0: 32 and 1) */
    bool yarn = scaling == ROPE_YARN, l3 = scaling == ROPE_LLAMA3;
    arg_f(k, l3 ? o->fattr[FA_ROPE_LOW_FREQ_FACTOR] : yarn ? o->fattr[FA_ROPE_BETA_FAST] : 1.0);
    arg_f(k, l3 ? o->fattr[FA_ROPE_HIGH_FREQ_FACTOR] : yarn ? o->fattr[FA_ROPE_BETA_SLOW] : 4.0);
    int64_t orig = o->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS];
    arg_f(k, (l3 || yarn) && orig > 0 ? (double)orig : 8192.0); /* 0: 8192, as hk_rope_attrs */
    arg_seg(k); /* packed rows: positions restart per sample */
}
