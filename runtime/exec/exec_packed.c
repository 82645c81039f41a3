/* exec_packed: training on packed rows (several samples a row); see
 * rt_set_segments in exec.h. The kernels that read the rows' samples are
 * attention, rope, and add and mul of a tensor broadcast over the batch
 * (a learned position embedding): runtime/hostk/hostk.h, "packed". */
#include "exec.h"
#include "exec_impl.h"

int rt_set_segments(Rt *r, const int32_t *const *seg, char *err, size_t errlen) {
    r->segs = NULL;
    if (!seg) return 0;
    if (r->cu)
        return errorf(err, errlen, "packed rows train on the host backend only (--backend host): the CUDA kernels keep "
                       "a row's attention causal over the whole row");
    int64_t B, T;
    if (!plan_batch_shape(r->p, &B, &T)) return errorf(err, errlen, "packed rows: the plan has no token batch [B, T]");
    r->segs = seg;
    return 0;
}

int rt_eval_packed(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, const int32_t *const *seg, int nb,
                   RtEvalStats *st, char *err, size_t errlen) {
    if (seg && r->cu)
        return errorf(err, errlen, "packed rows evaluate on the host backend only (--backend host): the CUDA kernels "
                       "keep a row's attention causal over the whole row");
    r->eval_segs = seg;
    int rc = rt_eval(r, tokens, targets, nb, st, err, errlen);
    r->eval_segs = NULL;
    return rc;
}
