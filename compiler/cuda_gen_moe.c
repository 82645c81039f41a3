/* cuda_gen_moe: the mixture-of-experts family on the GPU. Its kernels
 * (routing, the grouped expert GEMMs, the combination) run on the host
 * backend only so far: a plan with one of its ops is refused here, before
 * any kernel is made, with the primitive named and the way to run it. */
#include "cuda_gen_impl.h"

void cg_gen_moe(GenCtx *c, bool bwd) {
    cg_fail(c, "%s%s: mixture-of-experts primitives have no CUDA kernels yet; train this model with --backend host "
            "(docs/huggingface.md, \"Mixture of experts\")", prim_names[c->o->prim], bwd ? " (backward)" : "");
}
