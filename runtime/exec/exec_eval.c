/* exec_eval: the forward-only schedule of a plan (evaluation, generation).
 *
 * The forward-only schedule is the prefix of the micro-batch range up to
 * and including the last KERNEL instruction of the op that produces the
 * loss (the OP_FWD op whose output is p->loss), less every instruction of
 * it that would touch gradient or optimizer state: ZERO, ACCUM, the
 * gradient collectives, GRAD_NORM, Adam, backward and loss-gradient
 * kernels, and anything that writes a persistent buffer (a home). What is
 * left reads the weights (fetched from CPU memory or NVMe as the plan
 * says) and writes only transient buffers. If an instruction that runs
 * waited for one left out, the schedule is refused (the plan would need
 * the left-out one's ordering); no planner makes such a plan today.
 * The instruction timings of the last training step and the queues' busy
 * time are kept as they were (--trace and the summary show training).
 * The logits are the first operand of the loss kernel, or of the
 * cross_entropy kernel whose loss a later add extends (an MoE model's
 * load-balancing term) when nothing after it writes over them. */
#include "exec_impl.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool left_out(const Plan *p, const PlanInstr *in) {
    switch ((PlanOpcode)in->op) {
    case PI_ZERO: case PI_ACCUM: case PI_REDUCE_SCATTER: case PI_ALLREDUCE: case PI_GRAD_NORM:
    case PI_CPU_ADAM: case PI_GPU_ADAM: case PI_STEP_END:
        return true;
    case PI_INPUT: /* the batch, and the sample starts of packed rows (a persistent buffer, not state) */
        return false;
    case PI_KERNEL:
        if (in->arg < 0 || (uint32_t)in->arg >= p->nops) return true;
        if (p->ops[in->arg].kind == OP_BWD || p->ops[in->arg].kind == OP_LOSS_GRAD) return true;
        break;
    default: break;
    }
    for (uint32_t k = 0; k < in->nopnd; k++) {
        const PlanOperand *o = &p->operands[in->opnd + k];
        if (o->buffer >= 0 && (o->mode & PLAN_W) && (p->buffers[o->buffer].flags & PLAN_BUF_PERSISTENT)) return true;
    }
    return false;
}

/* The last forward kernel of op o before instruction end that runs, or -1. */
static int64_t last_kernel_of(const Rt *r, int op, uint32_t end) {
    for (uint32_t i = end; i-- > 0;) {
        const PlanInstr *in = &r->p->instrs[i];
        if (in->op == PI_KERNEL && in->arg == op && in->tile == in->ntiles - 1 && r->fwd_run[i]) return i;
    }
    return -1;
}

/* The kernel whose first operand holds the logits once the forward is
 * done: the loss kernel when the loss is cross_entropy; when the loss adds
 * a term to a cross_entropy (an MoE model's load-balancing loss), that
 * cross_entropy's kernel, provided no instruction after it writes over its
 * logits. -1: none (rt_forward_info says why). */
static int64_t logits_kernel(const Rt *r) {
    const Plan *p = r->p;
    uint32_t end = r->fwd_loss_kernel;
    const PlanOp *L = &p->ops[p->instrs[end].arg];
    if (L->prim == PRIM_CROSS_ENTROPY) return end;
    if (L->prim != PRIM_ADD) return -1;
    int xo = -1;
    for (int i = 0; i < L->nin; i++)
        for (uint32_t o = 0; L->in[i] >= 0 && o < p->nops; o++)
            if (p->ops[o].kind == OP_FWD && p->ops[o].prim == PRIM_CROSS_ENTROPY && p->ops[o].nout > 0 && p->ops[o].out[0] == L->in[i]) {
                if (xo >= 0) return -1;
                xo = (int)o;
            }
    int64_t k = xo >= 0 ? last_kernel_of(r, xo, end) : -1;
    if (k < 0 || p->instrs[k].nopnd < 1) return -1;
    const PlanOperand *lg = rt_opnd(r, &p->instrs[k], 0);
    for (uint32_t i = (uint32_t)k + 1; i <= end; i++) {
        const PlanInstr *in = &p->instrs[i];
        for (uint32_t j = 0; r->fwd_run[i] && j < in->nopnd; j++) {
            const PlanOperand *o = rt_opnd(r, in, j);
            if (o->buffer == lg->buffer && (o->mode & PLAN_W) && o->offset < lg->offset + lg->bytes && lg->offset < o->offset + o->bytes)
                return -1;
        }
    }
    return k;
}

/* The loss kernel and the logits operand; the run flags of the prefix. */
static int fwd_build(Rt *r, char *err, size_t n) {
    const Plan *p = r->p;
    uint32_t ob = p->opt_begin <= p->ninstrs ? p->opt_begin : p->ninstrs;
    int64_t end = -1;
    for (uint32_t i = 0; i < ob; i++) {
        const PlanInstr *in = &p->instrs[i];
        if (in->op != PI_KERNEL || in->arg < 0 || (uint32_t)in->arg >= p->nops) continue;
        const PlanOp *o = &p->ops[in->arg];
        if (o->kind == OP_FWD && o->nout > 0 && o->out[0] == p->loss && in->tile == in->ntiles - 1) end = i;
    }
    if (p->loss < 0 || end < 0) return errorf(err, n, "the plan has no forward kernel of its loss");
    r->fwd_run = calloc(p->ninstrs ? p->ninstrs : 1, 1);
    r->fwd_timing = malloc(sizeof *r->fwd_timing * ((size_t)end + 1));
    if (!r->fwd_run || !r->fwd_timing) return errorf(err, n, "out of memory for the forward schedule");
    for (uint32_t i = 0; i <= (uint32_t)end; i++) r->fwd_run[i] = !left_out(p, &p->instrs[i]);
    for (uint32_t i = 0; i <= (uint32_t)end; i++) {
        const PlanInstr *in = &p->instrs[i];
        for (uint32_t k = 0; r->fwd_run[i] && k < in->ndeps; k++) {
            uint32_t d = p->deps[in->dep + k];
            if (d <= (uint32_t)end && !r->fwd_run[d])
                return errorf(err, n, "the plan's forward schedule cannot run alone: instruction %u (%s) waits for %u (%s), "
                              "which touches gradient or optimizer state", i, plan_opcode_names[in->op], d,
                              plan_opcode_names[p->instrs[d].op]);
        }
    }
    r->fwd_end = (uint32_t)end + 1;
    r->fwd_loss_kernel = (uint32_t)end;
    r->fwd_logits_kernel = logits_kernel(r);
    r->fwd_skipped = 0;
    for (uint32_t i = 0; i < r->fwd_end; i++) r->fwd_skipped += !r->fwd_run[i];
    return 0;
}

int rt_forward_info(Rt *r, RtForwardInfo *fi, char *err, size_t n) {
    if (!r->fwd_run && fwd_build(r, err, n)) return -1;
    const Plan *p = r->p;
    const PlanOp *o = &p->ops[p->instrs[r->fwd_loss_kernel].arg];
    if (r->fwd_logits_kernel < 0) { /* linear_cross_entropy: the logits are never whole */
        if (o->prim == PRIM_ADD)
            return errorf(err, n, "the plan's loss adds a term to its cross_entropy, whose logits the forward does not keep "
                          "to its end (zinfgen --decode kv reads them a position at a time)");
        return errorf(err, n, "the plan's loss is %s, which holds no logits to read (a chunked loss: plan with "
                      "plan { loss_chunk = 0 } to generate)", (unsigned)o->prim < PRIM_COUNT ? prim_names[o->prim] : "?");
    }
    o = &p->ops[p->instrs[r->fwd_logits_kernel].arg];
    memset(fi, 0, sizeof *fi);
    fi->instructions = r->fwd_end - r->fwd_skipped;
    fi->prefix = r->fwd_end;
    fi->left_out = r->fwd_skipped;
    if (o->nin > 0 && o->in[0] >= 0) {
        const PlanTensor *t = &p->tensors[o->in[0]];
        fi->vocab = t->rank > 0 ? t->dims[t->rank - 1] : 0;
        fi->logits_rows = fi->vocab > 0 ? t->numel / fi->vocab : 0;
    }
    return 0;
}

/* One forward of this rank's micro-batch: *loss its mean loss. Every rank
 * runs it together (the schedule holds collectives). */
int rt_forward(Rt *r, const int32_t *tokens, const int32_t *targets, double *loss, char *err, size_t n) {
    if (!r->fwd_run && fwd_build(r, err, n)) return -1;
    double busy0[PLAN_NQUEUES];
    for (int q = 0; q < PLAN_NQUEUES; q++) busy0[q] = r->be->busy_seconds(r, q);
    memcpy(r->fwd_timing, r->q.timing, sizeof *r->fwd_timing * r->fwd_end);
    r->tokens = tokens;
    r->targets = targets;
    r->seg = r->fwd_seg;
    r->loss_sum = 0;
    r->loss_n = 0;
    r->be->step_begin(r);
    int rc = 0;
    char cerr[512];
    if (qrun_subset(&r->q, 0, r->fwd_end, r->fwd_run)) {
        r->be->abort(r);
        rc = errorf(err, n, "rank %d, forward: %s", r->c->rank, r->q.err);
    } else if (r->be->range_end(r, 0, r->fwd_end, cerr, sizeof cerr)) {
        r->be->abort(r);
        rc = errorf(err, n, "rank %d, forward: %s", r->c->rank, cerr);
    }
    memcpy(r->q.timing, r->fwd_timing, sizeof *r->fwd_timing * r->fwd_end);
    for (int q = 0; q < PLAN_NQUEUES; q++) r->eval_busy[q] += r->be->busy_seconds(r, q) - busy0[q];
    if (rc) return rc;
    if (r->loss_n != 1) return errorf(err, n, "rank %d, forward: %d loss values, expected 1", r->c->rank, r->loss_n);
    *loss = r->loss_sum;
    return 0;
}

int rt_logits(Rt *r, int64_t row, float *out, char *err, size_t n) {
    RtForwardInfo fi;
    if (rt_forward_info(r, &fi, err, n)) return -1;
    const Plan *p = r->p;
    const PlanInstr *in = &p->instrs[r->fwd_logits_kernel];
    const PlanOp *o = &p->ops[in->arg];
    if (in->nopnd < 1 || fi.vocab <= 0 || row < 0 || row >= fi.logits_rows)
        return errorf(err, n, "logits row %lld outside the plan's %lld rows", (long long)row, (long long)fi.logits_rows);
    int dt = p->tensors[o->in[0]].dtype;
    size_t es = rt_dsz(dt), rb = (size_t)fi.vocab * es;
    PlanOperand at = *rt_opnd(r, in, 0);
    if ((uint64_t)(row + 1) * rb > at.bytes) return errorf(err, n, "the logits operand holds fewer rows than its tensor");
    at.offset += (uint64_t)row * rb;
    at.bytes = rb;
    const uint8_t *src = rt_opnd_ptr(r, &at);
    uint8_t *tmp = NULL;
    if (!src) {
        if (p->buffers[at.buffer].arena != ARENA_GPU || !r->be->device_memory)
            return errorf(err, n, "the logits are not in memory");
        if (!(tmp = malloc(rb))) return errorf(err, n, "out of memory for the logits");
        if (r->be->copy_from_gpu(r, Q_COMPUTE, &at, tmp, err, n)) {
            free(tmp);
            return -1;
        }
        src = tmp;
    }
    for (int64_t v = 0; v < fi.vocab; v++) out[v] = (float)rt_elem_get(src, dt, v);
    free(tmp);
    return 0;
}

int rt_eval(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, int nb, RtEvalStats *st, char *err,
            size_t n) {
    /* Each batch's loss is its trained targets' sum over its B*T positions
     * (hostk.h, cross_entropy): the sum of those over every rank, times
     * B*T, over the trained targets of every rank, is the mean over the
     * trained targets, as in training. */
    double t0 = qrun_now(&r->q), sum[2] = {0, 0};
    int64_t B, T;
    if (!plan_batch_shape(r->p, &B, &T)) return errorf(err, n, "the plan has no token batch to evaluate");
    for (int b = 0; b < nb; b++) {
        double l;
        r->fwd_seg = r->eval_segs ? r->eval_segs[b] : NULL;
        int rc = rt_forward(r, tokens[b], targets[b], &l, err, n);
        r->fwd_seg = NULL;
        if (rc) return -1;
        sum[0] += l;
        for (int64_t i = 0; i < B * T; i++) sum[1] += targets[b][i] >= 0;
    }
    if (comm_allreduce_sum_f64(r->c, sum, 2)) return rt_comm_err(r, err, n);
    memset(st, 0, sizeof *st);
    st->loss = sum[1] > 0 ? sum[0] * (double)(B * T) / sum[1] : NAN;
    st->batches = nb;
    st->seconds = qrun_now(&r->q) - t0;
    if (r->o.trace) {
        if (r->neval == r->eval_cap) {
            int cap = r->eval_cap ? 2 * r->eval_cap : 16;
            RtEvalEvent *e = realloc(r->evals, sizeof *e * (size_t)cap);
            if (!e) return errorf(err, n, "out of memory for the trace");
            r->evals = e;
            r->eval_cap = cap;
        }
        r->evals[r->neval++] = (RtEvalEvent){r->step, t0, t0 + st->seconds, st->loss, nb};
    }
    return 0;
}

void rt_forward_free(Rt *r) {
    free(r->fwd_run);
    free(r->fwd_timing);
    free(r->evals);
}

/* The evaluations as instant events ("ph":"i"; readers of the
 * instructions' "X" events skip them), after the instructions' events. */
void rt_trace_evals(const Rt *r, FILE *out, bool first) {
    for (int k = 0; k < r->neval; k++) {
        const RtEvalEvent *e = &r->evals[k];
        char loss[32] = "null"; /* JSON has no NaN */
        if (isfinite(e->loss)) snprintf(loss, sizeof loss, "%.9g", e->loss);
        fprintf(out, "%s{\"name\":\"eval step %lld\",\"cat\":\"eval\",\"ph\":\"i\",\"s\":\"p\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                     "\"args\":{\"step\":%lld,\"loss\":%s,\"batches\":%d,\"dur_ms\":%.3f}}",
                first && k == 0 ? "" : ",\n", (long long)e->step, r->c->rank, Q_COMPUTE, e->start * 1e6, (long long)e->step,
                loss, e->batches, (e->end - e->start) * 1e3);
    }
}
