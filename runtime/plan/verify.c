#include "verify.h"
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verify_impl.h"
#include "vocab.h"

/* ---- 1. ranges ---- */
static bool check_ranges(V *v) {
    const Plan *p = v->p;
    int before = v->problems;
    int64_t nt = p->ntensors;
    if (p->ranks < 1) vf_problem(v, "plan has %d ranks", p->ranks);
    for (uint32_t i = 0; i < p->ntensors; i++) {
        const PlanTensor *t = &p->tensors[i];
        int32_t refs[] = {t->param, t->grad, t->master, t->momentum, t->variance};
        for (int k = 0; k < 5; k++)
            if (refs[k] < -1 || refs[k] >= nt) vf_problem(v, "tensor %u '%s' refers to tensor %d, out of range", i, t->name, refs[k]);
        if (t->shard < -1 || t->shard >= (int64_t)p->nshards) vf_problem(v, "tensor %u '%s': shard %d out of range", i, t->name, t->shard);
        if (t->rank > PLAN_MAX_RANK) vf_problem(v, "tensor %u '%s': rank %u", i, t->name, t->rank);
    }
    for (uint32_t i = 0; i < p->nops; i++) {
        const PlanOp *o = &p->ops[i];
        if (o->nin > PLAN_MAX_IN || o->nout > PLAN_MAX_OUT) {
            vf_problem(v, "op %u: %u inputs, %u outputs", i, o->nin, o->nout);
            continue;
        }
        for (int k = 0; k < o->nin; k++) if (o->in[k] < -1 || o->in[k] >= nt) vf_problem(v, "op %u: input tensor %d out of range", i, o->in[k]);
        for (int k = 0; k < o->nout; k++) if (o->out[k] < -1 || o->out[k] >= nt) vf_problem(v, "op %u: output tensor %d out of range", i, o->out[k]);
    }
    for (uint32_t i = 0; i < p->nshards; i++) {
        const PlanShard *s = &p->shards[i];
        if (s->tensor < 0 || s->tensor >= nt) vf_problem(v, "shard %u: tensor %d out of range", i, s->tensor);
        if (s->buffer < 0 || s->buffer >= (int64_t)p->nbuffers) vf_problem(v, "shard %u: buffer %d out of range", i, s->buffer);
        if (s->home >= PLAN_NTIERS) vf_problem(v, "shard %u: home tier %u out of range", i, s->home);
    }
    for (uint32_t i = 0; i < p->nbuffers; i++) {
        const PlanBuffer *b = &p->buffers[i];
        if (b->arena >= PLAN_NARENAS) vf_problem(v, "buffer %u '%s': arena %u out of range", i, vf_bname(p, (int32_t)i), b->arena);
        if (b->tensor < -1 || b->tensor >= nt) vf_problem(v, "buffer %u '%s': tensor %d out of range", i, vf_bname(p, (int32_t)i), b->tensor);
    }
    for (uint32_t i = 0; i < p->noperands; i++) {
        const PlanOperand *o = &p->operands[i];
        if (o->buffer < -1 || o->buffer >= (int64_t)p->nbuffers) vf_problem(v, "operand %u: buffer %d out of range", i, o->buffer);
        else if (o->mode < PLAN_R || o->mode > PLAN_M) vf_problem(v, "operand %u: access mode %u", i, o->mode);
    }
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op >= PI_COUNT) {
            vf_problem(v, "instruction %u: unknown opcode %u", i, s->op);
            continue;
        }
        if (s->queue >= PLAN_NQUEUES) vf_problem(v, "instruction %u (%s): queue %u out of range", i, vf_iname(p, i), s->queue);
        else if (plan_opcode_queue[s->op] != Q_ANY && plan_opcode_queue[s->op] != s->queue)
            vf_problem(v, "instruction %u (%s) is on queue %s, its opcode runs on %s", i, vf_iname(p, i),
                    plan_queue_names[s->queue], plan_queue_names[plan_opcode_queue[s->op]]);
        if ((uint64_t)s->opnd + s->nopnd > p->noperands) vf_problem(v, "instruction %u (%s): operands out of range", i, vf_iname(p, i));
        if ((uint64_t)s->dep + s->ndeps > p->ndeps) vf_problem(v, "instruction %u (%s): dependencies out of range", i, vf_iname(p, i));
        if (s->op == PI_KERNEL && (s->arg < 0 || s->arg >= (int64_t)p->nops)) vf_problem(v, "instruction %u (kernel): op %d out of range", i, s->arg);
    }
    /* Each instruction's operand and dependency ranges come after the
     * previous instruction's (gaps allowed, overlap not): the per-buffer use
     * lists and the dependency graph are then bounded by the arrays' sizes. */
    uint64_t opnd_end = 0, dep_end = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op >= PI_COUNT) continue;
        if (s->nopnd && s->opnd < opnd_end)
            vf_problem(v, "instruction %u (%s): operands [%u, +%u) overlap the previous instruction's, which end at %" PRIu64, i,
                    vf_iname(p, i), s->opnd, s->nopnd, opnd_end);
        else if (s->nopnd) opnd_end = (uint64_t)s->opnd + s->nopnd;
        if (s->ndeps && s->dep < dep_end)
            vf_problem(v, "instruction %u (%s): dependencies [%u, +%u) overlap the previous instruction's, which end at %" PRIu64, i,
                    vf_iname(p, i), s->dep, s->ndeps, dep_end);
        else if (s->ndeps) dep_end = (uint64_t)s->dep + s->ndeps;
    }
    for (uint32_t i = 0; i < p->ndeps; i++)
        if (p->deps[i] >= p->ninstrs) vf_problem(v, "dependency %u names instruction %u, out of range", i, p->deps[i]);
    if (p->opt_begin > p->ninstrs) vf_problem(v, "optimizer start %u is past the schedule's %u instructions", p->opt_begin, p->ninstrs);
    return v->problems == before;
}


/* ---- 2. arenas, buffers, operands ---- */
static void check_memory(V *v) {
    const Plan *p = v->p;
    char a[32], b[32];
    for (int i = 0; i < PLAN_NARENAS; i++) {
        const PlanArena *ar = &p->arenas[i];
        if (ar->size > ar->capacity)
            vf_problem(v, "arena %s uses %s per rank, more than its capacity %s", plan_arena_names[i],
                    plan_bytes_str(ar->size, a, sizeof a), plan_bytes_str(ar->capacity, b, sizeof b));
    }
    int rpn = p->target.gpus_per_node > 0 ? p->target.gpus_per_node : 1;
    uint64_t host = p->target.cpu_memory / (uint64_t)rpn;
    uint64_t used = p->arenas[ARENA_PINNED].size + p->arenas[ARENA_CPU].size;
    if (used > host)
        vf_problem(v, "pinned staging and CPU homes take %s per rank, more than the rank's share of host memory %s",
                plan_bytes_str(used, a, sizeof a), plan_bytes_str(host, b, sizeof b));
    for (uint32_t i = 0; i < p->nbuffers && !STOP(v); i++) {
        const PlanBuffer *bf = &p->buffers[i];
        const PlanArena *ar = &p->arenas[bf->arena];
        if (bf->offset > ar->size || bf->bytes > ar->size - bf->offset)
            vf_problem(v, "buffer '%s' [%" PRIu64 ", +%" PRIu64 ") lies outside arena %s of %" PRIu64 " bytes", vf_bname(p, (int32_t)i),
                    bf->offset, bf->bytes, plan_arena_names[bf->arena], ar->size);
        else if (ar->align > 1 && bf->offset % ar->align)
            vf_problem(v, "buffer '%s' at offset %" PRIu64 " is not aligned to %" PRIu64 " in arena %s", vf_bname(p, (int32_t)i),
                    bf->offset, ar->align, plan_arena_names[bf->arena]);
    }
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        for (uint32_t k = 0; k < s->nopnd; k++) {
            const PlanOperand *o = &p->operands[s->opnd + k];
            if (o->buffer < 0) {
                if (strcmp(plan_opcode_operands[s->op], "*")) vf_problem(v, "instruction %u (%s): operand %u names no buffer", i, vf_iname(p, i), k);
                continue;
            }
            const PlanBuffer *bf = &p->buffers[o->buffer];
            if (o->offset > bf->bytes || o->bytes > bf->bytes - o->offset)
                vf_problem(v, "instruction %u (%s) accesses [%" PRIu64 ", +%" PRIu64 ") of buffer '%s', which has %" PRIu64 " bytes",
                        i, vf_iname(p, i), o->offset, o->bytes, vf_bname(p, o->buffer), bf->bytes);
        }
    }
}

/* ---- 2b. operand layouts and transfer sizes ---- */
static void check_layouts(V *v) {
    const Plan *p = v->p;
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        const char *lay = plan_opcode_operands[s->op];
        const PlanOperand *o = &p->operands[s->opnd];
        if (!strcmp(lay, "*")) {
            if ((s->op == PI_CPU_ADAM || s->op == PI_GPU_ADAM) && s->nopnd != 6 &&
                !(s->op == PI_CPU_ADAM && (s->nopnd == 7 || s->nopnd == 9)))
                vf_problem(v, "instruction %u (%s) has %u operands, expected 6 (a CPU Adam: 7 with a backup, 9 with twins)", i,
                        vf_iname(p, i), s->nopnd);
            if (s->op == PI_KERNEL && s->arg >= 0 && (uint32_t)s->arg < p->nops &&
                s->nopnd != (uint32_t)p->ops[s->arg].nin + p->ops[s->arg].nout)
                vf_problem(v, "instruction %u (kernel) has %u operands, its op %d has %u", i, s->nopnd, s->arg,
                        p->ops[s->arg].nin + p->ops[s->arg].nout);
            continue;
        }
        /* the input of the tokens may also write the sample starts of packed rows (the planner's sample_starts) */
        if (s->op == PI_INPUT && s->arg == 0 && s->nopnd == 2) lay = "WW";
        size_t n = strlen(lay);
        if (s->nopnd != n) {
            vf_problem(v, "instruction %u (%s) has %u operands, expected %zu (%s)", i, vf_iname(p, i), s->nopnd, n, lay);
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            int want = lay[k] == 'R' ? PLAN_R : lay[k] == 'W' ? PLAN_W : PLAN_M;
            if (o[k].mode != want)
                vf_problem(v, "instruction %u (%s): operand %zu is %s, its opcode %s it", i, vf_iname(p, i), k,
                        o[k].mode == PLAN_R ? "read" : o[k].mode == PLAN_W ? "written" : "updated",
                        want == PLAN_R ? "reads" : want == PLAN_W ? "writes" : "updates");
        }
        uint64_t r = (uint64_t)p->ranks;
        switch ((PlanOpcode)s->op) {
        case PI_NVME_READ:
        case PI_NVME_WRITE:
        case PI_H2D:
        case PI_D2H:
        case PI_ACCUM:
            if (o[0].bytes != o[1].bytes)
                vf_problem(v, "instruction %u (%s) moves %" PRIu64 " bytes into a range of %" PRIu64, i, vf_iname(p, i), o[0].bytes, o[1].bytes);
            break;
        case PI_ALLGATHER:
            if (o[1].bytes > r * o[0].bytes)
                vf_problem(v, "instruction %u (allgather): %d ranks x %" PRIu64 " bytes cannot fill %" PRIu64, i, p->ranks, o[0].bytes, o[1].bytes);
            break;
        case PI_REDUCE_SCATTER:
            if (o[0].bytes > r * o[1].bytes)
                vf_problem(v, "instruction %u (reduce_scatter): %" PRIu64 " bytes do not fit %d ranks x %" PRIu64, i, o[0].bytes, p->ranks, o[1].bytes);
            break;
        default: break;
        }
    }
}

/* ---- 2c. training settings and the token batch: what zinfrun sizes its
 * batches, loops and the INPUT copies by ---- */
static void check_train(V *v) {
    const Plan *p = v->p;
    const PlanTrain *t = &p->train;
    if (t->micro_batch < 1) vf_problem(v, "micro_batch is %" PRId64 ", must be at least 1", t->micro_batch);
    if (t->schedule >= LR_NSCHEDULES) vf_problem(v, "the learning-rate schedule is %u, not one of constant, cosine, linear", t->schedule);
    if (t->grad_accum < 1 || t->grad_accum > PLAN_MAX_ACCUM)
        vf_problem(v, "grad_accum is %" PRId64 ", must be 1 to %d", t->grad_accum, PLAN_MAX_ACCUM);
    if (t->steps < 0 || t->steps > (INT64_MAX >> 8)) vf_problem(v, "steps is %" PRId64 ", out of range", t->steps);
    if (t->warmup_steps < 0) vf_problem(v, "warmup_steps is %" PRId64 ", must not be negative", t->warmup_steps);
    if (t->checkpoint_every < 0) vf_problem(v, "checkpoint_every is %" PRId64 ", must not be negative", t->checkpoint_every);
    if (!plan_dtype_size(t->dtype)) vf_problem(v, "training dtype %u is unknown", t->dtype);
    for (int k = 0; k < p->ninputs; k++) {
        int32_t id = p->inputs[k];
        if (id < 0 || (uint32_t)id >= p->ntensors) vf_problem(v, "input %d: tensor %d out of range", k, id);
        else if (p->tensors[id].dtype != 4 /* i32 */)
            vf_problem(v, "input %d '%s' is not i32: the runtime feeds token ids", k, p->tensors[id].name);
    }
    int64_t B = 0, T = 0;
    bool batch = plan_batch_shape(p, &B, &T);
    if (!batch)
        vf_problem(v, "the plan defines no token batch (micro_batch %" PRId64 ", %d input%s): zinfrun feeds micro_batch rows of input 0's "
                "last dimension", t->micro_batch, p->ninputs, p->ninputs == 1 ? "" : "s");
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op != PI_INPUT || s->nopnd < 1) continue;
        if (s->arg < 0 || s->arg >= p->ninputs || p->inputs[s->arg] < 0 || (uint32_t)p->inputs[s->arg] >= p->ntensors) {
            vf_problem(v, "instruction %u (input) feeds input %d, out of range (%d inputs)", i, s->arg, p->ninputs);
            continue;
        }
        if (!batch) {
            vf_problem(v, "instruction %u (input) feeds a batch the plan does not define (micro_batch %" PRId64 ")", i, t->micro_batch);
            continue;
        }
        const PlanTensor *x = &p->tensors[p->inputs[s->arg]];
        uint64_t have = (uint64_t)x->numel * (uint64_t)plan_dtype_size(x->dtype), feed = (uint64_t)(B * T) * sizeof(int32_t);
        const PlanOperand *o = &p->operands[s->opnd];
        if (o->bytes != have)
            vf_problem(v, "instruction %u (input) copies %" PRIu64 " bytes into input '%s' of %" PRIu64 " bytes", i, o->bytes, x->name,
                    have);
        else if (have != feed)
            vf_problem(v, "input '%s' holds %" PRIu64 " bytes, but a micro-batch of %" PRId64 " x %" PRId64 " token ids is %" PRIu64
                    " bytes", x->name, have, B, T, feed);
    }
}


static void check_operands(V *v) {
    const Plan *p = v->p;
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        PlanOpcode op = (PlanOpcode)s->op;
        bool tensor_arg = op == PI_REDUCE_SCATTER || op == PI_ALLREDUCE || op == PI_ACCUM || op == PI_CPU_ADAM || op == PI_GPU_ADAM;
        if (tensor_arg && (s->arg < 0 || (uint32_t)s->arg >= p->ntensors || !plan_dtype_size(p->tensors[s->arg].dtype))) {
            vf_problem(v, "instruction %u (%s) names tensor %d, out of range", i, vf_iname(p, i), s->arg);
            continue;
        }
        for (uint32_t k = 0; k < s->nopnd; k++) {
            const PlanOperand *x = &p->operands[s->opnd + k];
            bool nvme_side = (op == PI_NVME_READ && k == 0) || (op == PI_NVME_WRITE && k == 1);
            bool any = op == PI_ZERO || op == PI_GRAD_NORM;
            if (x->buffer < 0 || any) continue;
            if (nvme_side != vf_on_nvme(p, x))
                vf_problem(v, "instruction %u (%s): operand %u is %s the nvme arena", i, vf_iname(p, i), k, nvme_side ? "not in" : "in");
        }
        if (op == PI_KERNEL && s->arg >= 0 && (uint32_t)s->arg < p->nops) vf_check_kernel_operands(v, i);
        if (op == PI_CPU_ADAM || op == PI_GPU_ADAM) vf_check_adam_operands(v, i);
    }
}

/* ---- 2c'. trained and frozen parameters ----
 * A trained parameter's gradient is a gradient of it; a frozen one (no
 * gradient: train { freeze }) has no optimizer state, and no Adam steps it.
 * Some parameter is trained. */
static void check_frozen(V *v) {
    const Plan *p = v->p;
    int nparams = 0, nfrozen = 0;
    for (uint32_t i = 0; i < p->ntensors && !STOP(v); i++) {
        const PlanTensor *t = &p->tensors[i];
        if (t->cls != TC_PARAM) continue;
        nparams++;
        if (t->grad >= 0) {
            const PlanTensor *g = &p->tensors[t->grad];
            if (g->cls != TC_GRAD || g->param != (int32_t)i) vf_problem(v, "parameter '%s' names '%s' as its gradient, which is not its gradient", t->name, g->name);
            continue;
        }
        nfrozen++;
        if (t->master >= 0 || t->momentum >= 0 || t->variance >= 0)
            vf_problem(v, "frozen parameter '%s' (no gradient) has optimizer state", t->name);
    }
    if (nparams > 0 && nfrozen == nparams) vf_problem(v, "every parameter is frozen (none has a gradient): nothing is trained");
    for (uint32_t i = 0; i < p->ninstrs && !STOP(v); i++) {
        const PlanInstr *s = &p->instrs[i];
        if ((s->op != PI_CPU_ADAM && s->op != PI_GPU_ADAM) || s->arg < 0 || (uint32_t)s->arg >= p->ntensors) continue;
        if (p->tensors[s->arg].cls == TC_PARAM && p->tensors[s->arg].grad < 0)
            vf_problem(v, "instruction %u (%s) steps the frozen parameter '%s' (no gradient)", i, vf_iname(p, i), p->tensors[s->arg].name);
    }
}

/* ---- 2d. the Hugging Face mapping: what import and export index by ---- */
static void check_hf(V *v) {
    const Plan *p = v->p;
    const PlanHf *h = &p->hf;
    if (h->npieces && (!h->arch || !h->arch[0])) vf_problem(v, "the hf mapping has %u pieces but no architecture", h->npieces);
    uint8_t *seen = calloc(p->ntensors ? p->ntensors : 1, 1);
    if (!seen) {
        vf_problem(v, "out of memory verifying the hf mapping");
        return;
    }
    for (uint32_t i = 0; i < h->npieces && !STOP(v);) {
        int32_t id = h->pieces[i].tensor;
        const PlanTensor *t = &p->tensors[id];
        if (t->cls != TC_PARAM || t->rank < 1) vf_problem(v, "hf piece %u maps '%s', which is not a parameter", i, t->name);
        if (seen[id]) vf_problem(v, "hf pieces of '%s' are not adjacent", t->name);
        seen[id] = 1;
        int64_t cols = 0, last = t->rank >= 1 ? t->dims[t->rank - 1] : 0;
        bool stacked = h->pieces[i].stacked != 0;
        int32_t index = 0; /* stacked: the index the pieces fill now */
        uint32_t j = i;
        for (; j < h->npieces && h->pieces[j].tensor == id; j++) {
            const PlanHfPiece *x = &h->pieces[j];
            if (!x->hf_name || !x->hf_name[0]) vf_problem(v, "hf piece %u of '%s' names no tensor", j, t->name);
            if ((x->stacked != 0) != stacked || x->stacked > 1)
                vf_problem(v, "hf piece %u of '%s': stacked %u among pieces that are%s", j, t->name, x->stacked, stacked ? "" : " not");
            if (stacked && cols == last) { /* the slice is full: the next index starts */
                index++;
                cols = 0;
            }
            if (stacked && (x->index != index || t->rank < 2 || x->index >= t->dims[0]))
                vf_problem(v, "hf piece %u of '%s': stacked index %d, expected %d of %" PRId64, j, t->name, x->index, index,
                           t->rank >= 1 ? t->dims[0] : 0);
            if (x->cols < 1 || x->src_col < 0 || x->src_col > INT64_MAX - x->cols || cols > INT64_MAX - x->cols)
                vf_problem(v, "hf piece %u of '%s': columns [%" PRId64 ", +%" PRId64 ")", j, t->name, x->src_col, x->cols);
            else cols += x->cols;
            if (x->transpose && t->rank != 2) vf_problem(v, "hf piece %u of '%s' transposes a tensor of rank %u", j, t->name, t->rank);
            if (x->transpose && stacked) vf_problem(v, "hf piece %u of '%s' is stacked and transposed", j, t->name);
            if (x->layout > PLAN_HF_EXPERT_COLS) vf_problem(v, "hf piece %u of '%s': layout %u", j, t->name, x->layout);
            else if (x->layout != PLAN_HF_PLAIN && (t->rank != 3 || x->transpose || stacked || x->src_col || x->cols != last ||
                                                    (j + 1 < h->npieces && h->pieces[j + 1].tensor == id) || j != i))
                vf_problem(v, "hf piece %u of '%s': an expert layout takes a rank-3 parameter whole, in one piece", j, t->name);
        }
        if (t->rank >= 1 && cols != last)
            vf_problem(v, "hf pieces of '%s' give %" PRId64 " columns, its last axis has %" PRId64, t->name, cols, last);
        if (stacked && t->rank >= 2 && index + 1 != t->dims[0])
            vf_problem(v, "hf pieces of '%s' stack %d slices, its first axis has %" PRId64, t->name, index + 1, t->dims[0]);
        i = j;
    }
    free(seen);
}

/* ---- 3. shards ---- */
static bool is_state(uint8_t cls) {
    return cls == TC_PARAM || cls == TC_GRAD || cls == TC_MASTER || cls == TC_MOMENTUM || cls == TC_VARIANCE;
}

static void check_shards(V *v) {
    const Plan *p = v->p;
    int *count = calloc(p->ntensors ? p->ntensors : 1, sizeof *count);
    if (!count) {
        vf_problem(v, "out of memory verifying shards");
        return;
    }
    static const uint8_t tier_arena[PLAN_NTIERS] = {ARENA_GPU, ARENA_CPU, ARENA_NVME};
    for (uint32_t i = 0; i < p->nshards && !STOP(v); i++) {
        const PlanShard *s = &p->shards[i];
        const PlanTensor *t = &p->tensors[s->tensor];
        count[s->tensor]++;
        int ds = plan_dtype_size(t->dtype);
        int64_t elems, cover, shard_elems, shard_bytes;
        if (s->ntiles < 1 || s->tile_elems < 0 || s->tile_shard < 0 || __builtin_mul_overflow(s->tile_elems, (int64_t)s->ntiles, &elems) ||
            elems != t->numel) {
            vf_problem(v, "shard of '%s': %d tiles of %" PRId64 " elements do not make its %" PRId64 " elements", t->name,
                    s->ntiles, s->tile_elems, t->numel);
            continue;
        }
        bool covers = s->partitioned ? !__builtin_mul_overflow(s->tile_shard, (int64_t)p->ranks, &cover) && cover >= s->tile_elems
                                     : s->tile_shard == s->tile_elems;
        if (!covers)
            vf_problem(v, "shard of '%s': %d ranks x %" PRId64 " elements do not cover a tile of %" PRId64, t->name, p->ranks,
                    s->tile_shard, s->tile_elems);
        /* 8-bit moments: blocks start at multiples of 2048 elements of the
         * tensor, so a tile and a rank's slice hold whole blocks (the last,
         * of an untiled tensor, may be short) */
        if (dtype_is_qstate(t->dtype) && ((s->ntiles > 1 && s->tile_elems % DTYPE_QSTATE_BLOCK) ||
                                          (s->partitioned && s->tile_shard % DTYPE_QSTATE_BLOCK)))
            vf_problem(v, "shard of '%s' (%s): its tiles or slices are not whole blocks of %d elements", t->name,
                    dtype_name((DType)t->dtype), DTYPE_QSTATE_BLOCK);
        if (__builtin_mul_overflow((int64_t)s->ntiles, s->tile_shard, &shard_elems) ||
            (dtype_is_blocked(t->dtype) ? (shard_bytes = (int64_t)s->ntiles * (int64_t)plan_dtype_bytes(t->dtype, s->tile_shard), 0)
                                      : __builtin_mul_overflow(shard_elems, (int64_t)ds, &shard_bytes)) ||
            (uint64_t)shard_bytes != s->bytes)
            vf_problem(v, "shard of '%s': %" PRIu64 " bytes does not match its tiles", t->name, s->bytes);
        const PlanBuffer *b = &p->buffers[s->buffer];
        if (b->bytes < s->bytes)
            vf_problem(v, "shard of '%s' (%" PRIu64 " bytes) does not fit its buffer '%s' (%" PRIu64 " bytes)", t->name, s->bytes,
                    vf_bname(p, s->buffer), b->bytes);
        if (!(b->flags & PLAN_BUF_PERSISTENT)) vf_problem(v, "shard of '%s' lives in buffer '%s', which is not persistent", t->name, vf_bname(p, s->buffer));
        if (b->arena != tier_arena[s->home])
            vf_problem(v, "shard of '%s' has home %s but its buffer is in arena %s", t->name, plan_tier_names[s->home], plan_arena_names[b->arena]);
        if (t->shard != (int32_t)i) vf_problem(v, "tensor '%s' does not name its shard %u", t->name, i);
    }
    for (uint32_t i = 0; i < p->ntensors && !STOP(v); i++) {
        const PlanTensor *t = &p->tensors[i];
        bool want = t->cls == TC_PARAM || (is_state(t->cls) && t->param >= 0);
        if (want && count[i] == 0) vf_problem(v, "%s '%s' has no shard on any rank", tensor_class_names[t->cls < TC_COUNT ? t->cls : 0], t->name);
        if (count[i] > 1) vf_problem(v, "tensor '%s' has %d shards per rank, expected exactly one", t->name, count[i]);
        if (!is_state(t->cls) && count[i]) vf_problem(v, "tensor '%s' is not model state but has a shard", t->name);
    }
    free(count);
}


/* A part of the checks run beside another: v's plan (and derived tables)
 * with a problem list of its own, in buf[0..n). */
static void part_init(V *part, const V *v, char *buf, size_t n) {
    *part = *v;
    part->msgs = buf;
    part->n = buf ? n : 0;
    part->used = 0;
    part->problems = 0;
    if (buf && n) buf[0] = 0;
}

/* part's problems appended to v's, as if its checks had reported to v:
 * the kept lines in order, within v's MAX_PROBLEMS and bytes; the rest
 * counted. */
static void merge(V *v, const V *part) {
    const char *s = part->msgs;
    int lines = 0;
    for (; s && *s && lines < part->problems; lines++) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        vf_problem(v, "%.*s", (int)len, s);
        s = nl ? nl + 1 : s + len;
    }
    v->problems += part->problems - lines;
}

/* The verifier's parts; each says whether the parts after it may run. */
typedef bool (*Part)(V *v);

/* The checks that read the plan's tables one at a time. */
static bool tables_part(V *v) {
    vf_check_launches(v);
    check_memory(v);
    check_layouts(v);
    check_train(v);
    check_operands(v);
    check_frozen(v);
    vf_check_speculation(v);
    check_hf(v);
    check_shards(v);
    return true;
}

/* The schedule's order and each buffer's uses, which the last two read. */
static bool order_part(V *v) { return vf_build_order(v) && vf_build_uses(v); }
static bool dataflow_part(V *v) { return vf_check_dataflow(v), true; }
static bool overlap_part(V *v) { return vf_check_overlap(v), true; }

/* f on x beside g on y (two threads where OpenMP is there); one after the
 * other where x and y are the same V (one problem list). g's result. */
static bool side_by_side(Part f, V *x, Part g, V *y) {
    if (x == y) return f(x), g(y);
    bool r = false;
#ifdef _OPENMP
#pragma omp parallel sections num_threads(2)
#endif
    {
#ifdef _OPENMP
#pragma omp section
#endif
        f(x);
#ifdef _OPENMP
#pragma omp section
#endif
        r = g(y);
    }
    return r;
}

/* The checks in four parts, two at a time (the schedule's order and uses
 * beside the per-table checks, then dataflow beside overlap: zi-100t's
 * 2.27 M instructions, 0.59 s alone, 0.38 s so); each part reports to a
 * list of its own and the lists are merged in the order the checks are
 * listed, so that the messages are those of running them one after
 * another. (Where a part reaches MAX_PROBLEMS the later parts still run,
 * and their problems are counted.) Without memory for the parts' lists,
 * one after another into msgs. */
int verify_plan(const Plan *p, char *msgs, size_t n) {
    V v = {.p = p, .msgs = msgs, .n = n};
    if (msgs && n) msgs[0] = 0;
    if (!check_ranges(&v)) return v.problems;
    char *buf = msgs && n ? malloc(4 * n) : NULL;
    bool split = buf || !(msgs && n);
    V a, b, c, d;
    V *pa = &v, *pb = &v, *pc = &v, *pd = &v;
    if (split) {
        part_init(pa = &a, &v, buf, n);
        part_init(pb = &b, &v, buf ? buf + n : NULL, n);
    }
    bool ordered = side_by_side(tables_part, pa, order_part, pb);
    if (split) merge(&v, &a), merge(&v, &b);
    if (ordered) {
        if (split) {
            part_init(pc = &c, &b, buf ? buf + 2 * n : NULL, n);
            part_init(pd = &d, &b, buf ? buf + 3 * n : NULL, n);
        }
        side_by_side(dataflow_part, pc, overlap_part, pd);
        if (split) merge(&v, &c), merge(&v, &d);
    }
    free(buf);
    free(pb->qpos);
    free(pb->queue);
    free(pb->vc);
    free(pb->order);
    free(pb->use_start);
    free(pb->use_list);
    free(pb->use_mode);
    return v.problems;
}
