/* exec_packed: training on packed rows (several samples a row); see
 * rt_set_segments in exec.h. The kernels that read the rows' samples are
 * attention and rope (runtime/hostk/hostk.h, *_packed). */
#include "exec.h"
#include "exec_impl.h"

int rt_set_segments(Rt *r, const int32_t *const *seg, char *err, size_t errlen) {
    r->segs = NULL;
    if (!seg) return 0;
    if (r->cu)
        return rt_fail(err, errlen, "packed rows train on the host backend only (--backend host): the CUDA kernels keep "
                       "a row's attention causal over the whole row");
    for (uint32_t k = 0; k < r->p->nops; k++)
        if (r->p->ops[k].prim == PRIM_ARANGE)
            return rt_fail(err, errlen,
                           "packed rows need positions that restart at each sample, but this model's come from "
                           "arange (op %u%s%s: learned position embeddings); train it on rows of one sample "
                           "(a token file made without --pack)",
                           k, r->p->ops[k].scope && *r->p->ops[k].scope ? " in " : "",
                           r->p->ops[k].scope ? r->p->ops[k].scope : "");
    r->segs = seg;
    return 0;
}
