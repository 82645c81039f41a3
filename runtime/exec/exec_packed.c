/* exec_packed: training on packed rows (several samples a row); see
 * rt_set_segments in exec.h. The kernels that read the rows' samples are
 * attention, rope, and add and mul of a tensor broadcast over the batch
 * (a learned position embedding): on the host runtime/hostk/hostk.h,
 * "packed"; on the GPU the launches whose argument PARG_SEG the CUDA
 * backend binds to the micro-batch's sample starts (stdlib/kernels:
 * attention.cu, rope.cu, elementwise.cu's zk_binary_pos_*). */
#include "exec.h"
#include "exec_impl.h"

/* Whether op o reads the rows' samples on the GPU: a launch of it takes
 * PARG_SEG. */
static bool reads_seg(const Plan *p, uint32_t o) {
    const PlanOpCode *oc = &p->op_code[o];
    for (uint32_t l = oc->first; l < oc->first + oc->count && l < p->nlaunches; l++) {
        const PlanLaunch *pl = &p->launches[l];
        for (uint32_t a = 0; a < pl->nargs && pl->arg + a < p->nlaunch_args; a++)
            if (p->launch_args[pl->arg + a].kind == PARG_SEG) return true;
    }
    return false;
}

/* Whether tensor t is laid out [B, T, ...] over the token batch. */
static bool batch_major(const Plan *p, int32_t t, int64_t B, int64_t T) {
    if (t < 0 || (uint32_t)t >= p->ntensors) return false;
    const PlanTensor *x = &p->tensors[t];
    return x->rank >= 3 && x->dims[0] == B && x->dims[1] == T;
}

/* The CUDA kernels index the sample starts by [B, T]: every op whose
 * rows are the batch's positions (attention, rope, a position embedding
 * added or multiplied) must read them, over tensors of that batch. A plan
 * compiled before its kernels read packed rows has such ops without. */
static int cuda_check(const Plan *p, int64_t B, int64_t T, char *err, size_t errlen) {
    if (!p->op_code) return errorf(err, errlen, "packed rows on the CUDA backend: the plan has no CUDA kernels");
    for (uint32_t o = 0; o < p->nops; o++) {
        const PlanOp *op = &p->ops[o];
        if (op->kind != OP_FWD && op->kind != OP_BWD && op->kind != OP_RECOMPUTE) continue;
        if (op->prim != PRIM_ATTENTION && op->prim != PRIM_ROPE && op->prim != PRIM_ADD && op->prim != PRIM_MUL)
            continue;
        bool seg = reads_seg(p, o);
        if (op->prim == PRIM_ADD || op->prim == PRIM_MUL) {
            if (!seg) continue; /* not a position embedding */
            int32_t a = op->in[0], b = op->nin > 1 ? op->in[1] : -1;
            if (!batch_major(p, a, B, T) && !batch_major(p, b, B, T))
                return errorf(err, errlen, "packed rows: %s (op %u%s%s) broadcasts over a batch that is not the "
                              "tokens' [%lld, %lld]", prim_names[op->prim], o, op->scope ? " in " : "",
                              op->scope ? op->scope : "", (long long)B, (long long)T);
            continue;
        }
        if (!seg)
            return errorf(err, errlen, "packed rows: the plan's CUDA kernels for %s (op %u%s%s) do not read the rows' "
                          "samples (a plan compiled by an older zinfc): compile it again", prim_names[op->prim], o,
                          op->scope ? " in " : "", op->scope ? op->scope : "");
        if (!batch_major(p, op->in[0], B, T))
            return errorf(err, errlen, "packed rows: %s (op %u%s%s) is not over the tokens' batch [%lld, %lld]",
                          prim_names[op->prim], o, op->scope ? " in " : "", op->scope ? op->scope : "",
                          (long long)B, (long long)T);
    }
    return 0;
}

int rt_set_segments(Rt *r, const int32_t *const *seg, char *err, size_t errlen) {
    r->segs = NULL;
    if (!seg) return 0;
    int64_t B, T;
    if (!plan_batch_shape(r->p, &B, &T)) return errorf(err, errlen, "packed rows: the plan has no token batch [B, T]");
    if (r->cu && cuda_check(r->p, B, T, err, errlen)) return -1;
    r->segs = seg;
    return 0;
}

int rt_eval_packed(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, const int32_t *const *seg, int nb,
                   RtEvalStats *st, char *err, size_t errlen) {
    int64_t B, T;
    if (seg && r->cu) {
        if (!plan_batch_shape(r->p, &B, &T)) return errorf(err, errlen, "packed rows: the plan has no token batch [B, T]");
        if (cuda_check(r->p, B, T, err, errlen)) return -1;
    }
    r->eval_segs = seg;
    int rc = rt_eval(r, tokens, targets, nb, st, err, errlen);
    r->eval_segs = NULL;
    return rc;
}
