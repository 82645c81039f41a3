/* plandump_moe: what a mixture-of-experts plan computes and moves, in one
 * paragraph: the expert GEMMs' FLOPs (the active experts: k of E a token),
 * beside what all E experts would cost, and the bytes of every expert's
 * parameters, which the schedule fetches each step whatever the routing
 * (docs/primitives.md, "Mixture of experts"). Nothing for a plan without a
 * moe_expert op. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include "plandump.h"
#include "vocab.h"


void plandump_moe(const Plan *p, FILE *out) {
    double expert_flops = 0, all_flops = 0, dense_flops = 0;
    uint64_t expert_bytes = 0, nparams = 0;
    int64_t E = 0, k = 0;
    int nops = 0;
    bool *seen = calloc(p->ntensors ? p->ntensors : 1, sizeof *seen);
    if (!seen) return;
    for (uint32_t i = 0; i < p->nops; i++) {
        const PlanOp *o = &p->ops[i];
        if (o->kind != OP_FWD || o->prim != PRIM_MOE_EXPERT || o->nin < 3) continue;
        nops++;
        int32_t w = o->in[2], idx = o->in[1];
        if (idx >= 0 && (uint32_t)idx < p->ntensors && p->tensors[idx].rank > 0)
            k = p->tensors[idx].dims[p->tensors[idx].rank - 1];
        if (w < 0 || (uint32_t)w >= p->ntensors || seen[w]) continue;
        seen[w] = true;
        const PlanTensor *t = &p->tensors[w];
        if (t->cls != TC_PARAM) continue;
        E = t->rank == 3 ? t->dims[0] : E;
        expert_bytes += (uint64_t)dtype_bytes((DType)t->dtype, t->numel); /* quantized experts by their blocks */
        nparams += (uint64_t)t->numel;
    }
    free(seen);
    if (!nops) return;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *in = &p->instrs[i];
        if (in->op != PI_KERNEL) continue;
        all_flops += in->flops;
        if (in->arg >= 0 && (uint32_t)in->arg < p->nops && p->ops[in->arg].prim == PRIM_MOE_EXPERT) expert_flops += in->flops;
    }
    dense_flops = all_flops - expert_flops + (k > 0 ? expert_flops * (double)E / (double)k : 0);
    char a[32];
    fprintf(out, "mixture of experts: %d expert GEMMs a step (moe_expert), %" PRId64 " experts, %" PRId64
            " a token; active FLOPs %.4g a step per rank (experts %.4g; all %" PRId64 " experts would make it %.4g); "
            "expert parameters %" PRIu64 " (%s), every expert fetched each step whatever the routing\n",
            nops, E, k, all_flops, expert_flops, E, dense_flops, nparams, plan_bytes_str(expert_bytes, a, sizeof a));
}
