#include "exec_impl.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "quant.h"
#include "cost.h"

/* The cost model prices the nvme queue's pipeline (both backends run one) at its depth. */
_Static_assert((int)QRUN_PIPE_MAX == (int)COST_NVME_DEPTH, "runtime/plan/cost.h COST_NVME_DEPTH is the nvme queue's depth");
#include "adam.h"
#include "cudrv.h"
#include "ckpt.h"
#include "half.h"
#include "hostk.h"
#include "initrng.h"
#include "rtio.h"


double rt_loss_scale(const Rt *r) { return r->loss_scale; }

int64_t rt_steps_done(const Rt *r) { return r->step; }
double rt_busy_seconds(const Rt *r, int q) {
    if (q < 0 || q >= PLAN_NQUEUES) return 0;
    return r->be->busy_seconds(r, q) - r->eval_busy[q]; /* training's only */
}
double rt_wait_seconds(const Rt *r, int q) {
    if (q < 0 || q >= PLAN_NQUEUES) return 0;
    return r->q.waited[q];
}
uint64_t rt_arena_bytes(const Rt *r, int k) { return r->arena_bytes[k]; }
uint64_t rt_gpu_memory_used(const Rt *r) { return r->be->gpu_memory_used(r); }

double rt_step_flops(const Rt *r, int accum) {
    const Plan *p = r->p;
    double f = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].op == PI_KERNEL) f += p->instrs[i].flops * (i < p->opt_begin ? (accum > 0 ? accum : 1) : 1);
    return f;
}

/* ---- initial state ---- */

/* Parameters from (seed, name, element) and fp32 masters equal to them;
 * everything else zero. In chunks of INIT_CHUNK elements, so the memory it
 * takes does not grow with the largest shard (NVMe homes of any size). */
enum { INIT_CHUNK = 1 << 20 };

static int init_shard(Rt *r, const PlanShard *s, uint8_t *tmp, float *vals, char *err, size_t n) {
    const Plan *p = r->p;
    const PlanTensor *t = &p->tensors[s->tensor];
    const PlanTensor *src = t->cls == TC_MASTER && t->param >= 0 ? &p->tensors[t->param] : t;
    bool values = t->cls == TC_PARAM || t->cls == TC_MASTER;
    size_t es = rt_dsz(t->dtype);
    uint64_t total = s->bytes / es, done = 0;
    while (done < total) {
        int64_t m = (int64_t)(total - done < INIT_CHUNK ? total - done : INIT_CHUNK);
        memset(tmp, 0, (size_t)m * es);
        for (int64_t k = 0; values && k < m;) {
            /* element done+k of the buffer: tile u, position j of this rank's slice */
            int64_t pos = (int64_t)done + k, u = pos / s->tile_shard, j = pos % s->tile_shard;
            int64_t run = s->tile_shard - j < m - k ? s->tile_shard - j : m - k;
            int64_t w0 = s->partitioned ? (int64_t)r->c->rank * s->tile_shard : 0;
            int64_t valid = s->tile_elems - w0 - j; /* the rest of the slice is padding */
            if (valid > run) valid = run;
            if (u < s->ntiles && valid > 0) {
                init_fill_f32(vals, u * s->tile_elems + w0 + j, valid, p->train.seed, src->name, (InitKind)src->init, src->init_std);
                for (int64_t i = 0; i < valid; i++) {
                    /* The master holds the parameter's value as rounded to the parameter's dtype. */
                    double v = vals[i];
                    if (src->dtype == DT_BF16) v = half_bf16_to_f32(half_f32_to_bf16(vals[i]));
                    else if (src->dtype == DT_F16) v = half_f16_to_f32(half_f32_to_f16(vals[i]));
                    rt_elem_set(tmp, t->dtype, k + i, v);
                }
            }
            k += run;
        }
        if (rt_home_write(r, s->buffer, done * es, tmp, (uint64_t)m * es, err, n)) return -1;
        done += (uint64_t)m;
    }
    return 0;
}

static int init_state(Rt *r, char *err, size_t n) {
    uint8_t *tmp = malloc((size_t)INIT_CHUNK * 4);
    float *vals = malloc(sizeof(float) * INIT_CHUNK);
    int rc = tmp && vals ? 0 : errorf(err, n, "out of memory initialising the parameters");
    for (uint32_t si = 0; si < r->p->nshards && !rc; si++) rc = init_shard(r, &r->p->shards[si], tmp, vals, err, n);
    free(tmp);
    free(vals);
    return rc;
}

/* ---- life cycle ---- */

static size_t instr_scratch(const Rt *r, const PlanInstr *in) {
    const Plan *p = r->p;
    uint64_t R = (uint64_t)r->c->size;
    switch ((PlanOpcode)in->op) {
    case PI_ALLGATHER: return in->nopnd > 0 ? (size_t)(R * p->operands[in->opnd].bytes) : 0;
    case PI_REDUCE_SCATTER: {
        if (in->nopnd < 2) return 0;
        uint64_t se = p->operands[in->opnd + 1].bytes / rt_dsz(p->tensors[in->arg].dtype);
        return (size_t)(sizeof(float) * (R + 1) * se);
    }
    case PI_ALLREDUCE:
        return in->nopnd > 0 ? (size_t)(sizeof(float) * (p->operands[in->opnd].bytes / rt_dsz(p->tensors[in->arg].dtype))) : 0;
    case PI_ZERO:
    case PI_GRAD_NORM: {
        size_t m = 0;
        for (uint32_t k = 0; k < in->nopnd; k++)
            if (p->operands[in->opnd + k].bytes > m) m = p->operands[in->opnd + k].bytes;
        return m;
    }
    case PI_KERNEL: {
        if (in->ntiles <= 1 || in->arg < 0 || (uint32_t)in->arg >= p->nops) return 0;
        const PlanOp *o = &r->p->ops[in->arg];
        const PlanOp *fo = o->kind == OP_FWD ? o : &r->p->ops[o->fwd];
        if (fo->prim == PRIM_MOE_EXPERT) return 0; /* its tiles work in the op's workspace */
        size_t b = 256;
        if (fo->in[0] >= 0) b += 2 * (size_t)r->p->tensors[fo->in[0]].numel * rt_dsz(r->p->tensors[fo->in[0]].dtype);
        if (fo->out[0] >= 0) b += 2 * (size_t)r->p->tensors[fo->out[0]].numel * rt_dsz(r->p->tensors[fo->out[0]].dtype);
        return b;
    }
    default: return 0;
    }
}

Rt *rt_create(const Plan *p, Comm *c, const RtOptions *o, char *err, size_t n) {
    if (p->ranks != c->size) {
        errorf(err, n, "the plan is for %d rank%s but this job has %d: run it with mpirun -np %d, or plan it for %d with "
               "zinfc ... --ranks %d -o PLAN",
               p->ranks, p->ranks == 1 ? "" : "s", c->size, p->ranks, c->size, c->size);
        return NULL;
    }
    Rt *r = calloc(1, sizeof *r);
    if (!r) { errorf(err, n, "out of memory"); return NULL; }
    r->p = p;
    r->c = c;
    if (o) r->o = *o;
    r->loss_scale = p->train.dtype == DT_F16 ? (p->train.loss_scale > 0 ? p->train.loss_scale : 65536.0) : 1.0;
    for (uint32_t i = 0; i < p->opt_begin && i < p->ninstrs; i++)
        r->adam_in_batch |= p->instrs[i].op == PI_CPU_ADAM || p->instrs[i].op == PI_GPU_ADAM;
    r->be = r->o.backend == RT_BACKEND_CUDA ? &rt_backend_cuda : &rt_backend_host;
    r->ws = calloc(p->nops ? p->nops : 1, sizeof *r->ws);
    r->ws_bytes = calloc(p->nops ? p->nops : 1, sizeof *r->ws_bytes);
    if (!r->ws || !r->ws_bytes) { errorf(err, n, "out of memory"); goto bad; }
    /* how far into each buffer any instruction reaches: past it, a buffer's
     * last block is its rounding, which NVMe transfers may take (exec_nvme.c) */
    r->buf_reach = calloc(p->nbuffers ? p->nbuffers : 1, sizeof *r->buf_reach);
    if (!r->buf_reach) { errorf(err, n, "out of memory"); goto bad; }
    for (uint32_t k = 0; k < p->noperands; k++) {
        const PlanOperand *o = &p->operands[k];
        if (o->buffer >= 0 && (uint32_t)o->buffer < p->nbuffers && o->offset + o->bytes > r->buf_reach[o->buffer])
            r->buf_reach[o->buffer] = o->offset + o->bytes;
    }
    for (uint32_t k = 0; k < p->nshards; k++) { /* a home is read and written whole too (init, checkpoints) */
        const PlanShard *sh = &p->shards[k];
        if (sh->buffer >= 0 && (uint32_t)sh->buffer < p->nbuffers && sh->bytes > r->buf_reach[sh->buffer])
            r->buf_reach[sh->buffer] = sh->bytes;
    }
    r->boff = malloc(sizeof *r->boff * (p->nbuffers ? p->nbuffers : 1));
    r->twins = malloc(sizeof *r->twins * 2 * (p->nbuffers ? p->nbuffers : 1));
    if (!r->boff || !r->twins) { errorf(err, n, "out of memory"); goto bad; }
    for (uint32_t b = 0; b < p->nbuffers; b++) {
        r->boff[b] = p->buffers[b].offset;
        int32_t t = p->buffers[b].tensor;
        if (!(p->buffers[b].flags & PLAN_BUF_TWIN) || t < 0 || p->tensors[t].shard < 0) continue; /* the verifier says why */
        r->twins[2 * r->ntwins] = (uint32_t)p->shards[p->tensors[t].shard].buffer;
        r->twins[2 * r->ntwins + 1] = b;
        r->ntwins++;
    }
    if (r->be->create(r, err, n)) goto bad;
    if (p->arenas[ARENA_NVME].size) {
        const char *dirs[16];
        int nd = 0;
        if (r->o.nvme_dir) dirs[nd++] = r->o.nvme_dir;
        else
            for (int i = 0; i < p->target.nvme_npaths && nd < 16; i++) dirs[nd++] = p->target.nvme_paths[i];
        if (!nd) { errorf(err, n, "the plan keeps state on NVMe but names no NVMe path: pass --nvme DIR"); goto bad; }
        if (rtio_open(&r->io, dirs, nd, c->rank, p->arenas[ARENA_NVME].size, r->o.queue_depth, err, n)) goto bad;
        r->io_open = true;
        if (r->arena[ARENA_PINNED] &&
            rtio_register(&r->io, r->arena[ARENA_PINNED], (p->arenas[ARENA_PINNED].size + 4095) / 4096 * 4096, err, n))
            goto bad;
        r->arena_bytes[ARENA_NVME] = p->arenas[ARENA_NVME].size;
    }
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        size_t b = instr_scratch(r, &p->instrs[i]);
        if (b > r->scratch_bytes) r->scratch_bytes = b;
    }
    r->scratch_bytes = (r->scratch_bytes + 63) & ~(size_t)63;
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        r->table[q] = calloc(p->ntensors ? p->ntensors : 1, sizeof(void *));
        r->scratch[q] = r->scratch_bytes ? aligned_alloc(64, r->scratch_bytes) : NULL;
        if (!r->table[q] || (r->scratch_bytes && !r->scratch[q])) { errorf(err, n, "out of memory for scratch"); goto bad; }
    }
    if (init_state(r, err, n)) goto bad;
    if (rt_optim_init(r, err, n)) goto bad;
    if (qrun_init(&r->q, p, r->be->instr, r)) { errorf(err, n, "out of memory"); goto bad; }
    if (r->o.queue_slice_us) r->q.slice_us = r->o.queue_slice_us < 0 ? 0 : r->o.queue_slice_us;
    if (!r->o.nvme_unbatched) rt_nvme_pipe(r); /* either backend; one at a time is for comparison */
    return r;
bad:
    rt_destroy(r);
    return NULL;
}

void rt_destroy(Rt *r) {
    if (!r) return;
    if (r->io_open) rtio_close(&r->io, 1);
    if (r->be) r->be->destroy(r);
    if (r->ws)
        for (uint32_t k = 0; k < r->p->nops; k++) free(r->ws[k]);
    free(r->ws);
    free(r->ws_bytes);
    free(r->buf_reach);
    free(r->boff);
    free(r->twins);
    free(r->no_decay);
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        free(r->table[q]);
        free(r->scratch[q]);
    }
    if (r->q.plan) qrun_free(&r->q);
    rt_forward_free(r);
    free(r);
}

void rt_memory_report(const Rt *r, FILE *out) {
    char a[32], b[32];
    for (int k = 0; k < PLAN_NARENAS; k++) {
        if (!r->p->arenas[k].size && !r->arena_bytes[k]) continue;
        fprintf(out, "  arena %-6s %12llu bytes (%s) allocated; the plan says %llu (%s)%s\n", plan_arena_names[k],
                (unsigned long long)r->arena_bytes[k], plan_bytes_str(r->arena_bytes[k], a, sizeof a),
                (unsigned long long)r->p->arenas[k].size, plan_bytes_str(r->p->arenas[k].size, b, sizeof b),
                r->arena_bytes[k] == r->p->arenas[k].size ? "" : "  MISMATCH");
        if (k == ARENA_GPU && r->be == &rt_backend_host) fprintf(out, "               (the host backend's device arena: host memory)\n");
    }
    if (r->io_open) {
        char m[256];
        fprintf(out, "  nvme staging: %s\n", rtio_mode(&r->io, m, sizeof m));
    }
    fprintf(out, "  cpu adam: %s\n", adam_isa_name(adam_isa_resolve(ADAM_ISA_AUTO)));
    r->be->memory_report(r, out);
}

/* m without a leading "rank R: " of this rank (the caller names it). */
static const char *unranked(const Rt *r, const char *m) {
    char own[32];
    int ol = snprintf(own, sizeof own, "rank %d: ", r->c->rank);
    return strncmp(m, own, (size_t)ol) ? m : m + ol;
}

int rt_step(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, int accum, RtStepStats *st,
            char *err, size_t n) {
    return rt_step_trained(r, tokens, targets, accum, -1, st, err, n);
}

void rt_step_skip(Rt *r) { r->step++; }

int rt_step_trained(Rt *r, const int32_t *const *tokens, const int32_t *const *targets, int accum, int64_t trained,
                    RtStepStats *st, char *err, size_t n) {
    const Plan *p = r->p;
    int64_t B = 0, T = 0;
    if (trained == 0)
        return errorf(err, n, "step %lld: no trained target in the global batch (skip the step instead)",
                      (long long)r->step + 1);
    if (trained > 0 && !plan_batch_shape(p, &B, &T))
        return errorf(err, n, "the plan has no token batch to count trained targets in");
    double t0 = qrun_now(&r->q);
    memset(r->bytes, 0, sizeof r->bytes);
    r->loss_sum = 0;
    r->loss_n = 0;
    r->skip = false;
    r->redone = false;
    r->grad_norm = 0;
    if (accum < 1) accum = 1;
    if (accum > 1 && p->opt_begin > 0 && r->adam_in_batch)
        return errorf(err, n, "this plan steps the optimizer in the backward, which needs one micro-batch per step (it has "
                      "%d); recompile it with grad_accum = %d", accum, accum);
    /* Each micro-batch's loss is the sum over its trained targets divided
     * by its B*T positions (hostk.h, cross_entropy): scaled by B*T over
     * the global batch's trained targets, the micro-batches of every rank
     * add up to the mean over those targets, and so do their gradients.
     * Every target trained, that is 1 / (accum * ranks) exactly. */
    r->loss_grad = trained > 0 ? (float)((double)(B * T) / (double)trained)
                               : (float)(1.0 / ((double)accum * r->c->size));
    uint32_t ob = p->opt_begin <= p->ninstrs ? p->opt_begin : p->ninstrs;
    r->be->step_begin(r);
    /* The ranges: every micro-batch but the last alone; the last one with
     * the optimizer, in one range, so that the optimizer's transfers start
     * as soon as their dependencies allow (the plan's dependencies order
     * everything that must be: the verifier proves the stream race-free as
     * one range, and the cost model simulates it so). A speculative plan's
     * last range ends after the norm; then the redo (run only when the
     * speculation failed, which the norm decides) and the rest. */
    bool spec = plan_speculative(p);
    uint32_t last_end = spec ? p->redo_begin : p->ninstrs;
    int nextra = spec ? 2 : 0;
    for (int a = 0; a < accum + nextra; a++) {
        uint32_t b0 = 0, b1 = a < accum - 1 ? ob : last_end;
        if (a == accum) { /* the redo */
            if (!rt_speculation_failed(r)) continue;
            r->redone = true;
            b0 = p->redo_begin, b1 = p->redo_end;
        } else if (a == accum + 1) {
            b0 = p->redo_end, b1 = p->ninstrs;
        }
        if (a < accum) {
            r->tokens = tokens[a];
            r->targets = targets[a];
            r->seg = r->segs ? r->segs[a] : NULL;
        }
        if (qrun_range(&r->q, b0, b1)) {
            r->be->abort(r); /* before anything waits on the GPU */
            return errorf(err, n, "rank %d, step %lld: %s", r->c->rank, (long long)r->step + 1, unranked(r, r->q.err));
        }
        /* Under CUDA the range has been enqueued, not run: wait for it (and
         * collect its losses and error words) before the next reuses buffers. */
        char cerr[512];
        if (r->be->range_end(r, b0, b1, cerr, sizeof cerr)) {
            r->be->abort(r);
            return errorf(err, n, "rank %d, step %lld: %s", r->c->rank, (long long)r->step + 1, unranked(r, cerr));
        }
    }
    double loss[2] = {r->loss_sum, (double)r->loss_n};
    if (comm_allreduce_sum_f64(r->c, loss, 2)) return rt_comm_err(r, err, n);
    if (r->skip && p->train.dtype != DT_F16)
        return errorf(err, n, "step %lld: the gradient norm is not finite: training diverged", (long long)r->step + 1);
    if (r->skip) {
        r->loss_scale /= 2;
        r->good_steps = 0;
    } else {
        /* the speculative Adams stepped the state into the twins: they are the homes now */
        for (uint32_t k = 0; k < r->ntwins; k++) {
            uint64_t t = r->boff[r->twins[2 * k]];
            r->boff[r->twins[2 * k]] = r->boff[r->twins[2 * k + 1]];
            r->boff[r->twins[2 * k + 1]] = t;
        }
        r->step++;
        if (p->train.dtype == DT_F16 && ++r->good_steps >= 1000) {
            r->loss_scale *= 2;
            r->good_steps = 0;
        }
    }
    if (st) {
        memset(st, 0, sizeof *st);
        if (trained > 0) st->loss = loss[0] * (double)(B * T) / (double)trained;
        else st->loss = loss[1] > 0 ? loss[0] / loss[1] : NAN;
        st->seconds = qrun_now(&r->q) - t0;
        st->grad_norm = r->grad_norm;
        st->skipped = r->skip;
        st->redone = r->redone;
        memcpy(st->bytes, r->bytes, sizeof st->bytes);
    }
    return 0;
}

static bool ckpt_class(int cls) { return cls == TC_PARAM || cls == TC_MASTER || cls == TC_MOMENTUM || cls == TC_VARIANCE; }

/* The checkpoint code is runtime/exec/exec_ckpt.c's; which classes a checkpoint
 * holds is decided here. */
int rt_checkpoint_save(Rt *r, const char *dir, const char *state_json, char *err, size_t n) {
    return rt_ckpt_save(r, dir, state_json, ckpt_class, err, n);
}

int rt_checkpoint_load(Rt *r, const char *dir, int64_t step, bool *mine, char *err, size_t n) {
    return rt_ckpt_load(r, dir, step, ckpt_class, mine, NULL, err, n);
}

int rt_checkpoint_load_from(Rt *r, const char *dir, int64_t step, bool *mine, RtCkptOrigin *from, char *err, size_t n) {
    return rt_ckpt_load(r, dir, step, ckpt_class, mine, from, err, n);
}

int rt_checkpoint_check(Rt *r, const char *dir, int64_t step, char *why, size_t n) {
    return rt_ckpt_check(r, dir, step, ckpt_class, why, n);
}

uint64_t rt_checkpoint_bytes(const Rt *r) {
    const Plan *p = r->p;
    uint64_t b = 0;
    for (uint32_t s = 0; s < p->nshards; s++)
        if (ckpt_class(p->tensors[p->shards[s].tensor].cls)) b += p->shards[s].bytes;
    return b;
}

uint64_t rt_export_bytes(const Rt *r) {
    const Plan *p = r->p;
    uint64_t b = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].cls == TC_PARAM && p->tensors[t].shard >= 0)
            b += (uint64_t)p->tensors[t].numel * rt_dsz(dtype_is_quant(p->tensors[t].dtype) ? p->train.dtype : p->tensors[t].dtype);
    return b;
}

/* The n elements of a quantized tensor (DT_NF4, DT_INT8) in dtype dt, in a
 * malloc'd buffer (NULL: out of memory). */
static uint8_t *rt_dequantize(const uint8_t *q, int qdt, int64_t n, int dt) {
    float *f = malloc((size_t)n * sizeof *f + 1);
    uint8_t *out = malloc((size_t)n * rt_dsz(dt) + 1);
    if (f && out) {
        quant_decode(qdt == DT_NF4 ? QUANT_NF4 : QUANT_INT8, q, n, f);
        for (int64_t i = 0; i < n; i++) rt_elem_set(out, dt, i, f[i]);
    }
    free(f);
    if (!f) {
        free(out);
        return NULL;
    }
    return out;
}

int rt_export_safetensors(Rt *r, const char *path, char *err, size_t n) {
    const Plan *p = r->p;
    int np = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) np += p->tensors[t].cls == TC_PARAM && p->tensors[t].shard >= 0;
    StTensor *st = calloc((size_t)np + 1, sizeof *st);
    int k = 0, rc = st ? 0 : errorf(err, n, "out of memory");
    for (uint32_t t = 0; t < p->ntensors && !rc; t++) {
        const PlanTensor *pt = &p->tensors[t];
        if (pt->cls != TC_PARAM || pt->shard < 0) continue;
        const PlanShard *sh = &p->shards[pt->shard];
        /* a quantized weight moves in blocks of 64 (its tiles and shards are
         * whole blocks) and is written dequantized, in the training dtype */
        bool quant = dtype_is_quant(pt->dtype);
        int64_t unit = quant ? DTYPE_QBLOCK : 1;
        size_t es = quant ? (size_t)dtype_bytes((DType)pt->dtype, DTYPE_QBLOCK) : rt_dsz(pt->dtype);
        uint8_t *mine = malloc(sh->bytes ? sh->bytes : 1);
        uint8_t *all = malloc((size_t)(sh->tile_shard / unit) * es * (size_t)r->c->size + 1);
        uint8_t *full = r->c->rank == 0 ? malloc((size_t)(pt->numel / unit) * es + 1) : NULL;
        if (!mine || !all || (r->c->rank == 0 && !full)) rc = errorf(err, n, "out of memory exporting %s", pt->name);
        if (!rc) rc = rt_home_read(r, sh->buffer, 0, mine, sh->bytes, err, n);
        for (int32_t u = 0; u < sh->ntiles && !rc; u++) {
            size_t sb = (size_t)(sh->tile_shard / unit) * es;
            if (sh->partitioned) {
                if (comm_allgather(r->c, mine + (size_t)u * sb, all, sb)) { rc = rt_comm_err(r, err, n); break; }
            } else {
                memcpy(all, mine + (size_t)u * sb, sb);
            }
            if (full) memcpy(full + (size_t)u * (size_t)(sh->tile_elems / unit) * es, all, (size_t)(sh->tile_elems / unit) * es);
        }
        free(mine);
        free(all);
        int dt = pt->dtype;
        if (quant && full && !rc) {
            uint8_t *deq = rt_dequantize(full, pt->dtype, pt->numel, p->train.dtype);
            free(full);
            full = deq;
            if (!full) rc = errorf(err, n, "out of memory exporting %s", pt->name);
        }
        if (quant) {
            dt = p->train.dtype;
            es = rt_dsz(dt);
        }
        st[k] = (StTensor){pt->name, dt, pt->rank, {0}, full, (uint64_t)pt->numel * es};
        memcpy(st[k].dims, pt->dims, sizeof st[k].dims);
        k++;
    }
    if (!rc && r->c->rank == 0) rc = safetensors_write(path, st, k, p->model_name, err, n);
    for (int i = 0; i < k; i++) free((void *)st[i].data);
    free(st);
    if (comm_agree(r->c, rc)) return rc ? rc : errorf(err, n, "the export failed on another rank");
    return 0;
}

int rt_write_trace(const Rt *r, FILE *out) {
    const Plan *p = r->p;
    fprintf(out, "{\"traceEvents\":[\n");
    for (int q = 0; q < PLAN_NQUEUES; q++)
        fprintf(out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n", r->c->rank, q,
                plan_queue_names[q]);
    bool first = true;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *in = &p->instrs[i];
        const QrunTiming *t = &r->q.timing[i];
        if (t->end <= 0) continue;
        const char *what = in->op == PI_KERNEL && in->arg >= 0 && (uint32_t)in->arg < p->nops
                               ? prim_names[r->p->ops[in->arg].prim]
                               : (in->arg >= 0 && (uint32_t)in->arg < p->ntensors ? p->tensors[in->arg].name : "");
        /* wait: microseconds of it spent waiting for peers (zinfdump --compare counts the rest as busy) */
        fprintf(out, "%s{\"name\":\"%s %s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"i\":%u,\"wait\":%.3f}}",
                first ? "" : ",\n", plan_opcode_names[in->op], what, plan_queue_names[in->queue < PLAN_NQUEUES ? in->queue : 0],
                r->c->rank, in->queue, t->start * 1e6, (t->end - t->start) * 1e6, i, t->wait * 1e6);
        first = false;
    }
    rt_trace_evals(r, out, first);
    fprintf(out, "\n],\"displayTimeUnit\":\"ms\"}\n");
    return ferror(out) ? -1 : 0;
}

int rt_choose_backend(Comm *c, const char *want, const Plan *p, const char *plan_name, RtBackend *out, char *said,
                      size_t saidn, char *err, size_t n) {
    *out = RT_BACKEND_HOST;
    if (said && saidn) said[0] = 0;
    if (!strcmp(want, "host")) return 0;
    CudaDrv drv;
    char why[512], gpu[128] = "", arch[16] = "";
    size_t mem = 0;
    int have = cudrv_open(&drv, why, sizeof why) == 0 &&
               cudrv_describe(&drv, c->local_rank % (drv.ndevices ? drv.ndevices : 1), gpu, sizeof gpu, &mem, arch,
                              sizeof arch, why, sizeof why) == 0;
    if (drv.lib) cudrv_close(&drv);
    bool code = p->nlaunches > 0;
    int64_t missing = !have;
    if (comm_allreduce_max_i64(c, &missing) != COMM_OK) return errorf(err, n, "%s", comm_last_error(c));
    if (!strcmp(want, "cuda")) {
        if (!have) return errorf(err, n, "--backend cuda: %s; use --backend host", why);
        if (missing) return errorf(err, n, "--backend cuda: another rank has no usable GPU; use --backend host");
        if (!code)
            return errorf(err, n,
                          "--backend cuda: %s has no GPU code (compiled for the host target or with --kernels=none): "
                          "compile it for a GPU target, e.g. zinfc --target h200, or use --backend host",
                          plan_name);
        *out = RT_BACKEND_CUDA;
    } else if (have && !missing && code) {
        *out = RT_BACKEND_CUDA;
    }
    if (!said || !saidn) return 0;
    const char *pl = c->size == 1 ? "" : "s";
    if (*out == RT_BACKEND_CUDA)
        snprintf(said, saidn, "backend: cuda (%d rank%s, one GPU each; rank 0 has %s, %s)", c->size, pl, gpu, arch);
    else if (have && !missing)
        snprintf(said, saidn, "backend: host (%d rank%s; %s (%s) found, but the plan has no GPU code)", c->size, pl, gpu, arch);
    else if (have) snprintf(said, saidn, "backend: host (%d rank%s; another rank has no usable GPU)", c->size, pl);
    else snprintf(said, saidn, "backend: host (%d rank%s; %s)", c->size, pl, why);
    return 0;
}
