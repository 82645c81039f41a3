/* verify_optim: the checks of Adam operands and of speculative Adams
 * (the redo range, NVMe twins). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verify_impl.h"
#include "vocab.h"

static int32_t home_buffer(const Plan *p, int32_t t) {
    if (t < 0 || (uint32_t)t >= p->ntensors) return -1;
    int32_t sh = p->tensors[t].shard;
    return sh >= 0 && (uint32_t)sh < p->nshards ? p->shards[sh].buffer : -1;
}

/* Whether parameter t's optimizer state is on NVMe (its momentum's home
 * there): its speculative Adams step staged copies and write twins on NVMe. */
static bool state_on_nvme(const Plan *p, int32_t t) {
    if (t < 0 || (uint32_t)t >= p->ntensors) return false;
    int32_t b = home_buffer(p, p->tensors[t].momentum);
    return b >= 0 && (uint32_t)b < p->nbuffers && p->buffers[b].arena == ARENA_NVME;
}

/* Whether operand o is a copy, not a persistent buffer (a home or twin). */
static bool staged(const Plan *p, const PlanOperand *o) {
    return o->buffer >= 0 && !(p->buffers[o->buffer].flags & PLAN_BUF_PERSISTENT);
}

/* A 6-operand CPU Adam of NVMe state stepping staged copies of its state
 * (and of its parameter when that is the state): the speculative form, or
 * its redo, of docs/schedule.md "The speculative optimizer". */
static bool staged_adam(const Plan *p, const PlanInstr *s) {
    if (s->op != PI_CPU_ADAM || s->nopnd != 6 || !state_on_nvme(p, s->arg)) return false;
    const PlanOperand *o = &p->operands[s->opnd];
    for (int k = 2; k < 5; k++)
        if (o[k].buffer >= 0 && !staged(p, &o[k])) return false;
    return !(o[0].mode & PLAN_R) || staged(p, &o[0]);
}

/* The bytes a speculative Adam's backup holds: what the step changes that
 * it cannot recompute (docs/schedule.md, "The speculative optimizer"). */
static uint64_t adam_backup_bytes(const PlanOperand *o, uint64_t ne, const int sdt[5]) {
    uint64_t b = (o[0].mode & PLAN_R) && o[0].buffer >= 0 ? ne * 4 : 0; /* the parameter, when it is the fp32 state */
    for (int k = 2; k < 5; k++)
        if (o[k].buffer >= 0) b += plan_dtype_bytes(sdt[k], (int64_t)ne);
    return b;
}

/* The dtype of parameter t's state tensor (master, momentum, variance;
 * f32 when it has none or names one out of range). */
static int state_dtype(const Plan *p, int32_t s) { return s >= 0 && (uint32_t)s < p->ntensors ? p->tensors[s].dtype : DT_F32; }

void vf_check_adam_operands(V *v, uint32_t i) {
    const Plan *p = v->p;
    const PlanInstr *s = &p->instrs[i];
    if (s->nopnd != 6 && s->nopnd != 7 && s->nopnd != 9) return; /* the layout check says so */
    const PlanTensor *t = &p->tensors[s->arg];
    const PlanOperand *o = &p->operands[s->opnd];
    int pdt = plan_dtype_size(t->dtype), gdt = t->grad >= 0 ? plan_dtype_size(p->tensors[t->grad].dtype) : pdt;
    uint64_t ne = o[0].bytes / (uint64_t)pdt;
    const int sdt[5] = {0, 0, state_dtype(p, t->master), state_dtype(p, t->momentum), state_dtype(p, t->variance)};
    const uint64_t need[5] = {0, ne * (uint64_t)gdt, plan_dtype_bytes(sdt[2], (int64_t)ne), plan_dtype_bytes(sdt[3], (int64_t)ne),
                              plan_dtype_bytes(sdt[4], (int64_t)ne)};
    for (int k = 1; k < 5; k++)
        if (o[k].buffer >= 0 && o[k].bytes < need[k])
            vf_problem(v, "instruction %u (%s) on '%s': operand %d holds %" PRIu64 " bytes, its %" PRIu64 " elements need %" PRIu64, i,
                    vf_iname(p, i), t->name, k, o[k].bytes, ne, need[k]);
    bool in_batch = i < p->opt_begin;
    if (s->nopnd == 6) {
        /* in the backward without a backup only where no norm can change the
         * step, or on staged NVMe state (its writes go to twins: check_speculation) */
        bool norm = p->train.grad_clip > 0 || p->train.dtype == DT_F16;
        bool staged_spec = norm && staged_adam(p, s) && plan_speculative(p) && o[5].buffer < 0;
        if (in_batch && !staged_spec && (norm || p->train.grad_accum > 1 || s->op != PI_CPU_ADAM))
            vf_problem(v, "instruction %u (%s) on '%s' steps in the micro-batch without a backup (%s)", i, vf_iname(p, i), t->name,
                    norm ? "the step has a gradient norm" : p->train.grad_accum > 1 ? "several micro-batches a step" : "not a CPU Adam");
        return;
    }
    bool in_redo = plan_speculative(p) && i >= p->redo_begin && i < p->redo_end;
    if (s->nopnd == 9) { /* out of place: the state read from its homes, written to their twins */
        for (int k = 2; k < 5; k++) {
            const PlanOperand *h = &o[k], *w = &o[k + 4];
            bool twin = w->buffer >= 0 && h->buffer >= 0 && (p->buffers[w->buffer].flags & PLAN_BUF_TWIN) &&
                        p->buffers[w->buffer].tensor == p->buffers[h->buffer].tensor && !(p->buffers[h->buffer].flags & PLAN_BUF_TWIN);
            if (h->mode != PLAN_R || w->mode != PLAN_W || !twin || w->offset != h->offset || w->bytes != h->bytes)
                vf_problem(v, "instruction %u (%s) on '%s': operand %d is not the twin of operand %d's home, written where that "
                        "is read", i, vf_iname(p, i), t->name, k + 4, k);
        }
        if (in_batch && (o[5].buffer >= 0 || p->train.grad_accum > 1 || !plan_speculative(p)))
            vf_problem(v, "instruction %u (%s) on '%s': a speculative Adam outside the micro-batch of a speculative plan with one "
                    "micro-batch per step, or reading the norm", i, vf_iname(p, i), t->name);
        if (!in_batch && (!in_redo || o[5].buffer < 0))
            vf_problem(v, "instruction %u (%s) on '%s': an Adam on twins outside the micro-batch and the redo range, or a redo "
                    "without the norm", i, vf_iname(p, i), t->name);
        return;
    }
    const PlanOperand *bk = &o[6];
    uint64_t want = adam_backup_bytes(o, ne, sdt);
    if (bk->buffer < 0 || bk->bytes != want)
        vf_problem(v, "instruction %u (%s) on '%s': its backup holds %" PRIu64 " bytes, what it changes is %" PRIu64, i, vf_iname(p, i),
                t->name, bk->buffer < 0 ? 0 : bk->bytes, want);
    if (bk->mode == PLAN_W) { /* speculative: in the micro-batch, before the norm exists */
        if (!in_batch || !plan_speculative(p) || p->train.grad_accum > 1)
            vf_problem(v, "instruction %u (%s) on '%s': a speculative Adam outside the micro-batch of a speculative plan with one "
                    "micro-batch per step", i, vf_iname(p, i), t->name);
        if (o[5].buffer >= 0)
            vf_problem(v, "instruction %u (%s) on '%s': a speculative Adam reads the gradient norm, which does not exist yet", i,
                    vf_iname(p, i), t->name);
    } else if (bk->mode == PLAN_R) { /* the redo: only where the step clipped or was skipped */
        if (!in_redo)
            vf_problem(v, "instruction %u (%s) on '%s': an Adam restoring a backup outside the redo range", i, vf_iname(p, i), t->name);
    } else {
        vf_problem(v, "instruction %u (%s) on '%s': its backup is neither written nor read", i, vf_iname(p, i), t->name);
    }
}

/* Every speculative Adam has exactly one redo, on the same state and
 * backup bytes; the redo range holds nothing else that steps. */
typedef struct SpecKey {
    int32_t buf;
    uint64_t off;
    uint32_t instr;
} SpecKey;

static int spec_key_cmp(const void *a, const void *b) {
    const SpecKey *x = a, *y = b;
    if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The speculative Adams of NVMe state (docs/schedule.md, "The speculative
 * optimizer"): they step staged copies, so what keeps the step redoable is
 * where their results go. In the micro-batch nothing writes the home of
 * such state (master, moments, a parameter without a master); every twin
 * range on NVMe written there is written once more in the redo range, and
 * nowhere else; as many staged Adams redo as speculate. */
typedef struct TwinWrite {
    int32_t buf;
    uint64_t off, bytes;
} TwinWrite;

static int twin_write_cmp(const void *a, const void *b) {
    const TwinWrite *x = a, *y = b;
    if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

static void check_nvme_speculation(V *v) {
    const Plan *p = v->p;
    if (!plan_speculative(p)) return;
    uint32_t nw = 0, spec = 0, redo = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        bool in_batch = i < p->opt_begin, in_redo = i >= p->redo_begin && i < p->redo_end;
        if (staged_adam(p, s) && p->operands[s->opnd + 5].buffer < 0 && in_batch) spec++;
        if (staged_adam(p, s) && p->operands[s->opnd + 5].buffer >= 0 && in_redo) redo++;
        for (uint32_t k = 0; k < s->nopnd; k++) {
            const PlanOperand *o = &p->operands[s->opnd + k];
            if (o->buffer < 0 || !(o->mode & PLAN_W)) continue;
            const PlanBuffer *x = &p->buffers[o->buffer];
            if ((x->flags & PLAN_BUF_TWIN) && x->arena == ARENA_NVME) {
                if (!in_batch && !in_redo)
                    vf_problem(v, "instruction %u (%s) writes twin '%s' outside the micro-batch and the redo range", i, vf_iname(p, i),
                            vf_bname(p, o->buffer));
                nw++;
            }
            if (!in_batch || (x->flags & PLAN_BUF_TWIN) || x->tensor < 0 || (uint32_t)x->tensor >= p->ntensors ||
                home_buffer(p, x->tensor) != o->buffer)
                continue;
            const PlanTensor *t = &p->tensors[x->tensor];
            bool state = t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE || (t->cls == TC_PARAM && t->master < 0);
            int32_t par = t->cls == TC_PARAM ? x->tensor : t->param;
            if (state && state_on_nvme(p, par))
                vf_problem(v, "instruction %u (%s) writes the home of '%s' in the micro-batch, where a speculative step must leave "
                        "it intact", i, vf_iname(p, i), t->name);
        }
    }
    if (spec != redo) vf_problem(v, "%u speculative Adams of NVMe state but %u redos", spec, redo);
    if (!nw || STOP(v)) return;
    TwinWrite *w = malloc(sizeof *w * nw);
    if (!w) {
        vf_problem(v, "out of memory verifying the speculative optimizer");
        return;
    }
    uint32_t nb = 0, nr = 0;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = pass ? p->redo_begin : 0; i < (pass ? p->redo_end : p->opt_begin) && i < p->ninstrs; i++) {
            const PlanInstr *s = &p->instrs[i];
            for (uint32_t k = 0; k < s->nopnd; k++) {
                const PlanOperand *o = &p->operands[s->opnd + k];
                if (o->buffer < 0 || !(o->mode & PLAN_W) || !(p->buffers[o->buffer].flags & PLAN_BUF_TWIN) ||
                    p->buffers[o->buffer].arena != ARENA_NVME || nb + nr >= nw)
                    continue;
                w[nb + nr] = (TwinWrite){o->buffer, o->offset, o->bytes};
                if (pass) nr++;
                else nb++;
            }
        }
    qsort(w, nb, sizeof *w, twin_write_cmp);
    qsort(w + nb, nr, sizeof *w, twin_write_cmp);
    bool same = nb == nr;
    for (uint32_t j = 0; j < nb && same; j++) same = twin_write_cmp(&w[j], &w[nb + j]) == 0 && (j == 0 || twin_write_cmp(&w[j - 1], &w[j]));
    if (!same)
        vf_problem(v, "the twins on NVMe written in the micro-batch (%u ranges) are not each written once by the redo (%u ranges)", nb,
                nr);
    free(w);
}

void vf_check_speculation(V *v) {
    const Plan *p = v->p;
    /* twins: persistent, in CPU memory or on NVMe (the runtime exchanges
     * their roles with their homes'), each the twin of a master or moment's
     * home in the same arena, or on NVMe of a parameter without a master
     * (the parameter is then the state) */
    for (uint32_t b = 0; b < p->nbuffers && !STOP(v); b++) {
        const PlanBuffer *x = &p->buffers[b];
        if (!(x->flags & PLAN_BUF_TWIN)) continue;
        const PlanTensor *t = x->tensor >= 0 && (uint32_t)x->tensor < p->ntensors ? &p->tensors[x->tensor] : NULL;
        int32_t hb = t ? home_buffer(p, x->tensor) : -1;
        bool state = t && (t->cls == TC_MASTER || t->cls == TC_MOMENTUM || t->cls == TC_VARIANCE ||
                           (t->cls == TC_PARAM && t->master < 0 && x->arena == ARENA_NVME));
        if (!(x->flags & PLAN_BUF_PERSISTENT) || (x->arena != ARENA_CPU && x->arena != ARENA_NVME) || !state || hb < 0 ||
            (uint32_t)hb >= p->nbuffers || p->buffers[hb].arena != x->arena || p->buffers[hb].bytes != x->bytes ||
            !plan_speculative(p))
            vf_problem(v, "buffer '%s' is a twin but not a persistent copy, in CPU memory or on NVMe, of an optimizer state "
                    "home of its size in the same arena in a speculative plan", x->name);
    }
    check_nvme_speculation(v);
    if (!plan_speculative(p)) return;
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].op == PI_CPU_ADAM && p->instrs[i].nopnd >= 7) n++;
    SpecKey *k = malloc(sizeof *k * (n ? n : 1));
    if (!k) {
        vf_problem(v, "out of memory verifying the speculative optimizer");
        return;
    }
    uint32_t ns = 0, nr = 0;
    for (uint32_t pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < p->ninstrs; i++) {
            const PlanInstr *s = &p->instrs[i];
            if (s->op != PI_CPU_ADAM || s->nopnd < 7) continue;
            /* the speculative ones in the micro-batch, the redos in their range (what else steps there is refused above) */
            if (pass == 0 ? i >= p->opt_begin : i < p->redo_begin || i >= p->redo_end) continue;
            const PlanOperand *bk = &p->operands[s->opnd + 6];
            k[ns + nr] = (SpecKey){bk->buffer, bk->offset, i};
            if (pass == 0) ns++;
            else nr++;
        }
    if (ns != nr) vf_problem(v, "%u speculative Adams but %u redos", ns, nr);
    uint32_t nstaged = 0;
    for (uint32_t i = 0; i < p->opt_begin && i < p->ninstrs; i++) nstaged += staged_adam(p, &p->instrs[i]);
    if (ns + nstaged == 0) vf_problem(v, "a speculative plan (redo range %u..%u) with no speculative Adam", p->redo_begin, p->redo_end);
    if (ns == nr && ns > 0) {
        qsort(k, ns, sizeof *k, spec_key_cmp);
        qsort(k + ns, nr, sizeof *k, spec_key_cmp);
        for (uint32_t j = 0; j < ns && !STOP(v); j++) {
            const PlanInstr *a = &p->instrs[k[j].instr], *r = &p->instrs[k[ns + j].instr];
            bool same = spec_key_cmp(&k[j], &k[ns + j]) == 0 && a->arg == r->arg;
            for (int m = 1; m < 5 && same; m++) {
                const PlanOperand *x = &p->operands[a->opnd + m], *y = &p->operands[r->opnd + m];
                same = x->buffer == y->buffer && x->offset == y->offset && x->bytes == y->bytes;
            }
            if (!same)
                vf_problem(v, "instruction %u (speculative Adam of '%s') has no redo on the same state and backup", k[j].instr,
                        a->arg >= 0 && (uint32_t)a->arg < p->ntensors ? p->tensors[a->arg].name : "?");
        }
    }
    free(k);
    for (uint32_t i = p->redo_begin; i < p->redo_end && i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        bool staged_redo = staged_adam(p, s) && p->operands[s->opnd + 5].buffer >= 0;
        if (s->op == PI_GPU_ADAM || (s->op == PI_CPU_ADAM && s->nopnd < 7 && !staged_redo) || s->op == PI_GRAD_NORM ||
            s->op == PI_KERNEL)
            vf_problem(v, "instruction %u (%s) in the redo range, which only restores and redoes speculative Adams", i, vf_iname(p, i));
    }
}
