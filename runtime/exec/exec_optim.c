/* exec_optim: the optimizer's instructions on the host: the gradient norm
 * (GRAD_NORM, with the device-resident shards summed by the backend), the
 * CPU Adam (CPU_ADAM, and GPU_ADAM on the host backend) with its twins,
 * speculative backups and skipped steps, and whether a speculative step
 * must be redone (rt_speculation_failed, which rt_step asks). */
#include "exec_impl.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "adam.h"
#include "hostk.h"
#include "rtio.h"

/* ---- optimizer ---- */

bool rt_tensor_partitioned(const Rt *r, int t) {
    int s = r->p->tensors[t].shard;
    return s >= 0 && r->p->shards[s].partitioned;
}

int rt_grad_norm(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    double ss = 0;
    int on_gpu = r->be->grad_sumsq(r, in, worker, &ss, err, n); /* the GPU-resident shards, summed there */
    if (on_gpu < 0) return -1;
    for (uint32_t k = 0; k + 1 < in->nopnd; k++) {
        const PlanOperand *o = rt_opnd(r, in, k);
        if (o->buffer < 0) continue;
        if (on_gpu && r->p->buffers[o->buffer].arena == ARENA_GPU) continue;
        int t = r->p->buffers[o->buffer].tensor;
        if (t < 0) continue;
        /* A whole (unpartitioned) gradient is the same on every rank: count it once. */
        if (!rt_tensor_partitioned(r, t) && r->c->rank != 0) continue;
        int dt = r->p->tensors[t].dtype;
        int64_t ne = (int64_t)(o->bytes / rt_dsz(dt));
        const uint8_t *gp = rt_opnd_ptr(r, o);
        if (!gp) {
            if (o->bytes > r->scratch_bytes) return errorf(err, n, "grad_norm scratch too small");
            bool dev = r->be->device_memory && r->p->buffers[o->buffer].arena == ARENA_GPU;
            if (dev ? r->be->copy_from_gpu(r, in->queue, o, r->scratch[worker], err, n)
                    : rtio_read(&r->io, rt_nvme_off(r, o), r->scratch[worker], o->bytes, err, n))
                return -1;
            gp = r->scratch[worker];
        }
        /* the host kernels' sum of squares: vectorised, in double, in fixed
         * chunks (the same result on every run and thread count) */
        HkTensor g = hk_tensor((void *)gp, (DType)dt, 1, &ne);
        ss += hk_sum_squares(&g);
    }
    CommWait w;
    if (rt_comm_done(r, worker, commw_allreduce_sum_f64(r->c, &ss, 1, &w), &w, err, n)) return -1;
    double norm = sqrt(ss) / r->loss_scale;
    r->grad_norm = norm;
    r->skip = !isfinite(norm);
    const PlanOperand *o = rt_opnd(r, in, in->nopnd - 1);
    /* The GPU Adam (zk_adam) reads the norm of the scaled gradients; the
     * CPU Adam takes r->grad_norm. */
    float v = (float)(r->be->device_memory ? sqrt(ss) : norm);
    if (r->be->device_memory && o->buffer >= 0 && r->p->buffers[o->buffer].arena == ARENA_GPU)
        return r->be->copy_to_gpu(r, in->queue, o, &v, sizeof v, err, n);
    uint8_t *np = rt_opnd_ptr(r, o);
    if (np) memcpy(np, &v, sizeof v);
    return 0;
}

/* The speculative optimizer's backup of an Adam (docs/schedule.md): what
 * the step changes and cannot recompute, in order: the parameter when it is
 * the fp32 state (read and written), the master, the moments. Saves them
 * (save) or puts them back. */
static int adam_backup(Rt *r, const PlanInstr *in, bool save, char *err, size_t n) {
    const PlanOperand *bk = rt_opnd(r, in, 6);
    uint8_t *bp = rt_opnd_ptr(r, bk);
    if (!bp) return errorf(err, n, "adam on '%s': its backup is not in memory", r->p->tensors[in->arg].name);
    uint64_t at = 0;
    for (uint32_t k = 0; k < 5; k++) {
        const PlanOperand *o = rt_opnd(r, in, k);
        if (k == 1 || o->buffer < 0 || (k == 0 && !(o->mode & PLAN_R))) continue;
        uint8_t *p = rt_opnd_ptr(r, o);
        if (!p || at + o->bytes > bk->bytes)
            return errorf(err, n, "adam on '%s': operand %u does not fit its backup", r->p->tensors[in->arg].name, k);
        if (save) memcpy(bp + at, p, o->bytes);
        else memcpy(p, bp + at, o->bytes);
        at += o->bytes;
    }
    return 0;
}

/* This step's clip coefficient (docs/training.md): min(1, c / (n + 1e-6)),
 * 1 without clipping. */
static double clip_coef(const Rt *r) {
    const PlanTrain *t = &r->p->train;
    return t->grad_clip > 0 ? fmin(1.0, t->grad_clip / (r->grad_norm + 1e-6)) : 1.0;
}

/* Whether this step's clipping or skip makes the speculative Adams wrong:
 * their coefficient was 1 (rt_step runs the redo range then). */
bool rt_speculation_failed(const Rt *r) { return r->skip || clip_coef(r) != 1.0; }

/* A skipped step's parameter where it is written apart from its state (a
 * staged copy, written home after the Adam) or a speculative step wrote
 * it: the old one again, the master rounded to the parameter's dtype, as
 * every step leaves it. */
static int param_from_master(Rt *r, const PlanInstr *in, uint8_t *pp, const float *master, int64_t ne, char *err,
                             size_t n) {
    HkTensor from = hk_tensor((void *)master, DT_F32, 1, &ne), to = hk_tensor(pp, (DType)r->p->tensors[in->arg].dtype, 1, &ne);
    if (hk_cast(&from, &to)) return errorf(err, n, "adam on '%s': cannot restore the parameter", r->p->tensors[in->arg].name);
    return 0;
}

int rt_optim_init(Rt *r, char *err, size_t n) {
    const Plan *p = r->p;
    r->no_decay = calloc(p->ntensors ? p->ntensors : 1, 1);
    if (!r->no_decay) return errorf(err, n, "out of memory");
    for (uint32_t k = 0; k < p->nops; k++) {
        const PlanOp *o = &p->ops[k];
        if (o->kind == OP_ADAM && o->nin > 0 && o->in[0] >= 0 && (uint32_t)o->in[0] < p->ntensors)
            r->no_decay[o->in[0]] = o->iattr[PLAN_ADAM_NO_DECAY] != 0;
    }
    return 0;
}

/* The dtype of parameter pt's momentum (variance: its variance): f32,
 * bf16, or dyn8 and udyn8 (train { optimizer = adam(state) }). */
static DType moment_dtype(const Rt *r, int pt, bool variance) {
    int s = variance ? r->p->tensors[pt].variance : r->p->tensors[pt].momentum;
    return s >= 0 && (uint32_t)s < r->p->ntensors ? (DType)r->p->tensors[s].dtype : DT_F32;
}

/* The AdamW settings of this step for parameter pt (docs/training.md):
 * no weight decay for one train { no_decay } names. */
static AdamParams adam_params(const Rt *r, int pt) {
    const PlanTrain *t = &r->p->train;
    AdamSchedule sch = adam_schedule_of(t);
    bool decay = !(r->no_decay && pt >= 0 && (uint32_t)pt < r->p->ntensors && r->no_decay[pt]);
    return (AdamParams){.lr = (float)adam_lr(&sch, r->step + 1), .beta1 = (float)t->beta1, .beta2 = (float)t->beta2,
                        .eps = (float)t->eps, .weight_decay = decay ? (float)t->weight_decay : 0.f,
                        .isa = ADAM_ISA_AUTO, .threads = 0};
}

/* A speculative Adam on twins (9 operands: param, grad, master, m, v
 * homes read, norm, their twins written): in the micro-batch without the
 * norm (coefficient 1), or its redo with it; under a skipped step the redo
 * leaves the parameter as the home's master has it (the old one). The
 * homes are never written, so nothing needs restoring; rt_step exchanges
 * twins and homes after a step that is not skipped. */
static int exec_adam_twin(Rt *r, const PlanInstr *in, char *err, size_t n) {
    int pt = in->arg;
    const char *name = r->p->tensors[pt].name;
    int pdt = r->p->tensors[pt].dtype;
    bool speculative = rt_opnd(r, in, 5)->buffer < 0;
    const PlanOperand *po = rt_opnd(r, in, 0);
    uint8_t *pp = rt_opnd_ptr(r, po), *gp = rt_opnd_ptr(r, rt_opnd(r, in, 1));
    void *src[3], *dst[3];
    for (int k = 0; k < 3; k++) {
        src[k] = rt_opnd_ptr(r, rt_opnd(r, in, 2 + (uint32_t)k));
        dst[k] = rt_opnd_ptr(r, rt_opnd(r, in, 6 + (uint32_t)k));
        if (!src[k] || !dst[k]) return errorf(err, n, "adam on '%s': its state or twin is not in memory", name);
    }
    if (!pp || !gp) return errorf(err, n, "adam on '%s': an operand is not in memory", name);
    int64_t ne = (int64_t)(po->bytes / rt_dsz(pdt));
    if (r->skip) return speculative ? 0 : param_from_master(r, in, pp, src[0], ne, err, n);
    int gt = r->p->tensors[pt].grad;
    int gdt = gt >= 0 ? r->p->tensors[gt].dtype : pdt;
    double clip = speculative ? 1.0 : clip_coef(r);
    AdamParams ap = adam_params(r, pt);
    AdamStatus as = adam_step_state(&ap, r->step + 1, src[0], src[1], src[2], dst[0], dst[1], dst[2], moment_dtype(r, pt, false),
                                    moment_dtype(r, pt, true), gp, (DType)gdt, pp, (DType)pdt, ne, (float)(clip / r->loss_scale));
    if (as != ADAM_OK) return errorf(err, n, "adam on '%s': %s", name, adam_status_str(as));
    return 0;
}

int rt_adam(Rt *r, const PlanInstr *in, char *err, size_t n) {
    if (in->nopnd < 6) return errorf(err, n, "adam needs 6 operands, has %u", in->nopnd);
    if (in->nopnd == 9) return exec_adam_twin(r, in, err, n);
    /* Without the norm operand: in the backward, before the norm exists:
     * coefficient 1, as the serial order has when the step neither clips
     * nor is skipped (in a plan without a norm it is 1 anyway). With 7
     * operands that is a speculative Adam (backup written); with 6, one on
     * a staged copy of NVMe state, written to twins. Its redo (the backup
     * read, or the copy staged again) runs only when the speculation
     * failed: restore, then the serial step. */
    bool speculative = rt_opnd(r, in, 5)->buffer < 0;
    if (in->nopnd == 7 && adam_backup(r, in, rt_opnd(r, in, 6)->mode == PLAN_W, err, n)) return -1;
    if (r->skip && !speculative) {
        /* (without this a skipped f16 step copied whatever the staging held into the parameter) */
        const PlanOperand *po = rt_opnd(r, in, 0), *mo = rt_opnd(r, in, 2);
        uint8_t *pp = rt_opnd_ptr(r, po), *mp = rt_opnd_ptr(r, mo);
        if (mo->buffer < 0 || (po->mode & PLAN_R)) return 0; /* no master: the parameter is the (restored) state */
        if (!pp || !mp) return errorf(err, n, "adam on '%s': an operand is not in memory", r->p->tensors[in->arg].name);
        return param_from_master(r, in, pp, (const float *)mp, (int64_t)(po->bytes / rt_dsz(r->p->tensors[in->arg].dtype)), err, n);
    }
    if (r->skip) return 0;
    int pt = in->arg;
    int pdt = r->p->tensors[pt].dtype;
    const PlanOperand *po = rt_opnd(r, in, 0), *go = rt_opnd(r, in, 1), *mo = rt_opnd(r, in, 2), *m1 = rt_opnd(r, in, 3),
                      *v1 = rt_opnd(r, in, 4);
    uint8_t *pp = rt_opnd_ptr(r, po), *gp = rt_opnd_ptr(r, go), *mp = rt_opnd_ptr(r, mo), *m1p = rt_opnd_ptr(r, m1),
            *v1p = rt_opnd_ptr(r, v1);
    if (!pp || !gp || !m1p || !v1p) return errorf(err, n, "adam on '%s': an operand is not in memory", r->p->tensors[pt].name);
    int64_t ne = (int64_t)(po->bytes / rt_dsz(pdt));
    int gt = r->p->tensors[pt].grad;
    int gdt = gt >= 0 ? r->p->tensors[gt].dtype : pdt;
    double clip = speculative ? 1.0 : clip_coef(r);
    AdamParams ap = adam_params(r, pt);
    /* Without an fp32 master (f32 training) the parameter is the master. */
    if (!mp && pdt != DT_F32) return errorf(err, n, "adam on '%s': a %s parameter needs an fp32 master", r->p->tensors[pt].name, dtype_name((DType)pdt));
    float *master = mp ? (float *)mp : (float *)pp;
    AdamStatus as = adam_step_state(&ap, r->step + 1, master, m1p, v1p, master, m1p, v1p, moment_dtype(r, pt, false),
                                    moment_dtype(r, pt, true), gp, (DType)gdt, mp ? pp : NULL, (DType)pdt, ne,
                                    (float)(clip / r->loss_scale));
    if (as != ADAM_OK) return errorf(err, n, "adam on '%s': %s", r->p->tensors[pt].name, adam_status_str(as));
    return 0;
}
