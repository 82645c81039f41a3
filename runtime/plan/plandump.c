#include "plandump.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "devmem.h"
#include "plandump_impl.h"
#include "vocab.h"

const char *pd_instr_what(const Plan *p, const PlanInstr *s, char *buf, size_t n) {
    if (s->op == PI_KERNEL && s->arg >= 0 && (uint32_t)s->arg < p->nops) {
        const PlanOp *o = &p->ops[s->arg];
        const char *out = o->nout > 0 && o->out[0] >= 0 ? p->tensors[o->out[0]].name : "";
        bool prim = o->kind == OP_FWD || o->kind == OP_BWD || o->kind == OP_RECOMPUTE;
        snprintf(buf, n, "%s%s%s%s%s -> %s", o->kind < OP_KIND_COUNT ? op_kind_names[o->kind] : "?", prim ? " " : "",
                 prim && o->prim < PRIM_COUNT ? prim_names[o->prim] : "", *o->scope ? " @" : "", o->scope, out);
    } else if (s->op == PI_INPUT) {
        snprintf(buf, n, "input %d", s->arg);
    } else if (s->arg >= 0 && (uint32_t)s->arg < p->ntensors && s->op != PI_STEP_END) {
        snprintf(buf, n, "%s", p->tensors[s->arg].name);
    } else {
        buf[0] = 0;
    }
    return buf;
}

static void operand_str(const Plan *p, const PlanOperand *o, char *buf, size_t n) {
    if (o->buffer < 0 || (uint32_t)o->buffer >= p->nbuffers) {
        snprintf(buf, n, "-");
        return;
    }
    const PlanBuffer *b = &p->buffers[o->buffer];
    snprintf(buf, n, "%s%s:%s@%" PRIu64 "+%" PRIu64, o->mode == PLAN_R ? "" : o->mode == PLAN_W ? "=" : "+",
             b->arena < PLAN_NARENAS ? plan_arena_names[b->arena] : "?", b->name, b->offset + o->offset, o->bytes);
}

/* a * b + c for non-negative operands; false when it does not fit in 63 bits */
static bool mul_add(int64_t a, int64_t b, int64_t c, int64_t *out) {
    if (a < 0 || b < 0 || c < 0 || (b && a > (INT64_MAX - c) / b)) return false;
    *out = a * b + c;
    return true;
}

/* Rank's elements [lo, hi) of tile `tile` of a partitioned shard, and the
 * tile's end; false when a forged shard's figures overflow. */
static bool rank_slice(int32_t tile, int rank, const PlanShard *sh, int64_t *lo, int64_t *hi, int64_t *end) {
    int64_t mine;
    return mul_add(rank, sh->tile_shard, 0, &mine) && mul_add(tile, sh->tile_elems, mine, lo) &&
           mul_add(1, *lo, sh->tile_shard, hi) && mul_add((int64_t)tile + 1, sh->tile_elems, 0, end);
}

void plandump_schedule(const Plan *p, int rank, FILE *out) {
    fprintf(out, "# schedule of %s for %s: %d rank%s, %u instructions (%u per micro-batch, then the optimizer)\n",
            p->model_name, p->target.name, p->ranks, p->ranks > 1 ? "s" : "", p->ninstrs, p->opt_begin);
    fprintf(out, "# idx queue   opcode         tile  what | operands (=written +updated) | waits\n");
    char what[256], od[256];
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (i == p->opt_begin) fprintf(out, "# --- optimizer (once per step) ---\n");
        char tile[24] = "";
        if (s->ntiles > 1) snprintf(tile, sizeof tile, "%d/%d", s->tile, s->ntiles);
        fprintf(out, "%5u %-7s %-14s %-5s %s |", i, s->queue < PLAN_NQUEUES ? plan_queue_names[s->queue] : "?",
                s->op < PI_COUNT ? plan_opcode_names[s->op] : "?", tile, pd_instr_what(p, s, what, sizeof what));
        for (uint32_t k = 0; k < s->nopnd && s->opnd + k < p->noperands; k++) {
            operand_str(p, &p->operands[s->opnd + k], od, sizeof od);
            fprintf(out, " %s", od);
        }
        fprintf(out, " |");
        for (uint32_t d = 0; d < s->ndeps && s->dep + d < p->ndeps; d++) fprintf(out, "%s%u", d ? "," : " ", p->deps[s->dep + d]);
        if (rank >= 0 && (s->op == PI_ALLGATHER || s->op == PI_REDUCE_SCATTER || s->op == PI_NVME_READ || s->op == PI_NVME_WRITE ||
                          s->op == PI_H2D || s->op == PI_D2H) &&
            s->arg >= 0 && (uint32_t)s->arg < p->ntensors && p->tensors[s->arg].shard >= 0) {
            const PlanShard *sh = &p->shards[p->tensors[s->arg].shard];
            int64_t lo, hi, end;
            if (sh->partitioned && rank_slice(s->tile, rank, sh, &lo, &hi, &end)) {
                if (hi > end) hi = end;
                if (lo > end) lo = end;
                fprintf(out, " | rank %d: elements [%" PRId64 ", %" PRId64 ")", rank, lo, hi);
            } else if (sh->partitioned) {
                fprintf(out, " | rank %d: elements beyond 2^63", rank);
            }
        }
        fputc('\n', out);
    }
}

/* Frozen parameters (train { freeze }): a parameter without a gradient. The
 * bytes per rank of the gradient and optimizer state they do not have, with
 * their shards' geometry: gradient in the parameter's dtype, fp32 master
 * when it is not f32, momentum and variance. */
static void frozen_line(const Plan *p, FILE *out) {
    uint64_t n = 0, elems = 0, saved = 0;
    for (uint32_t i = 0; i < p->ntensors; i++) {
        const PlanTensor *t = &p->tensors[i];
        if (t->cls != TC_PARAM || t->grad >= 0) continue;
        n++;
        elems += (uint64_t)t->numel;
        if (t->shard < 0 || (uint32_t)t->shard >= p->nshards) continue;
        uint64_t e = (uint64_t)p->shards[t->shard].ntiles * (uint64_t)p->shards[t->shard].tile_shard;
        int dt = dtype_is_quant(t->dtype) ? p->train.dtype : t->dtype; /* stored quantized: what it would train in */
        saved += e * (uint64_t)(plan_dtype_size(dt) + (dt != DT_F32 ? 4 : 0) + 8);
    }
    char a[32];
    if (n) fprintf(out, "frozen: %" PRIu64 " parameter tensors, %" PRIu64 " parameters: no gradient or optimizer state, %s (%" PRIu64 " bytes) per rank saved\n",
                   n, elems, plan_bytes_str(saved, a, sizeof a), saved);
}

/* Frozen weights stored quantized (train { quantize }): their bytes per
 * rank, each tier's, against the same shards in the training dtype. */
static void quantized_line(const Plan *p, FILE *out) {
    uint64_t n = 0, elems = 0, bytes[PLAN_NTIERS] = {0}, plain = 0, all = 0;
    int dt = 0;
    for (uint32_t i = 0; i < p->ntensors; i++) {
        const PlanTensor *t = &p->tensors[i];
        if (t->cls != TC_PARAM || !dtype_is_quant(t->dtype) || t->shard < 0 || (uint32_t)t->shard >= p->nshards) continue;
        const PlanShard *s = &p->shards[t->shard];
        n++;
        dt = t->dtype;
        elems += (uint64_t)t->numel;
        bytes[s->home < PLAN_NTIERS ? s->home : 0] += s->bytes;
        all += s->bytes;
        plain += (uint64_t)s->ntiles * (uint64_t)s->tile_shard * (uint64_t)plan_dtype_size(p->train.dtype);
    }
    if (!n) return;
    char a[32], b[32];
    fprintf(out, "quantized: %" PRIu64 " frozen weights, %" PRIu64 " parameters stored %s: %s per rank (%.3g of %s in %s);", n, elems,
            dtype_name((DType)dt), plan_bytes_str(all, a, sizeof a), plain ? (double)all / (double)plain : 0.0,
            plan_bytes_str(plain, b, sizeof b), dtype_name((DType)p->train.dtype));
    for (int k = 0; k < PLAN_NTIERS; k++)
        if (bytes[k]) fprintf(out, " %s %s", plan_tier_names[k], plan_bytes_str(bytes[k], a, sizeof a));
    fputc('\n', out);
}

/* The long-context rewrites a plan carries (compiler/loss_chunk.h,
 * compiler/mlp_tile.h): the chunked loss and the tiled MLP, a line each. */
static void long_context_lines(const Plan *p, FILE *out) {
    int nmlp = 0;
    int64_t rows = 0, tile = 0;
    for (uint32_t i = 0; i < p->nops; i++) {
        const PlanOp *o = &p->ops[i];
        if (o->kind != OP_FWD || o->nin < 1 || o->in[0] < 0 || (uint32_t)o->in[0] >= p->ntensors) continue;
        const PlanTensor *x = &p->tensors[o->in[0]];
        int64_t d = x->rank ? x->dims[x->rank - 1] : 1, r = d > 0 ? x->numel / d : 0;
        if (o->prim == PRIM_LINEAR_CROSS_ENTROPY) {
            int64_t c = o->iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK];
            fprintf(out, "loss: chunked, linear_cross_entropy over %" PRId64 " of the %" PRId64 " rows at a time\n", c > 0 && c < r ? c : r, r);
        } else if (o->prim == PRIM_GATED_MLP) {
            int64_t c = o->iattr[IA_GATED_MLP_ROWS];
            nmlp++;
            rows = r;
            tile = c > 0 && c < r ? c : r;
        }
    }
    if (nmlp)
        fprintf(out, "mlp: tiled, gated_mlp over %" PRId64 " of the %" PRId64 " rows at a time in %d block%s\n", tile, rows, nmlp,
                nmlp > 1 ? "s" : "");
}

void plandump_devmem(const Plan *p, FILE *out) {
    PlanDevMem m;
    plan_devmem(p, true, &m);
    char a[32], b[32], c[32], items[512];
    if (!m.code) {
        fprintf(out, "  on the gpu: the arena %s, plus workspaces unknown until the kernels are generated (the plan has no GPU "
                     "code: --kernels=none, or zinfc without -o)\n",
                plan_bytes_str(m.arena, a, sizeof a));
        return;
    }
    fprintf(out, "  on the gpu: %s (%" PRIu64 " bytes) of %s = the arena %s + %s beside it: %s\n", plan_bytes_str(m.total, a, sizeof a),
            m.total, plan_bytes_str(p->target.gpu_memory, b, sizeof b), plan_bytes_str(m.arena, c, sizeof c),
            plan_bytes_str(m.extra, (char[32]){0}, 32), plan_devmem_items_str(&m, items, sizeof items));
}

void plandump_summary(const Plan *p, const CostResult *c, FILE *out) {
    char a[32], b[32];
    const PlanTarget *t = &p->target;
    fprintf(out, "plan: model %s%s%s, target %s (%s), %d rank%s\n", p->model_name, *p->source ? " from " : "", p->source,
            t->name, t->backend, p->ranks, p->ranks > 1 ? "s" : "");
    fprintf(out, "tensors %u, shards %u, buffers %u, instructions %u, kernels %u\n", p->ntensors, p->nshards, p->nbuffers,
            p->ninstrs, p->nkernels);
    uint64_t home[PLAN_NTIERS] = {0}, total_params = 0;
    for (uint32_t i = 0; i < p->nshards; i++) home[p->shards[i].home < PLAN_NTIERS ? p->shards[i].home : 0] += p->shards[i].bytes;
    for (uint32_t i = 0; i < p->ntensors; i++) if (p->tensors[i].cls == TC_PARAM) total_params += (uint64_t)p->tensors[i].numel;
    static const char *const sfx[] = {"", " thousand", " million", " billion", " trillion"};
    double pv = (double)total_params;
    int si = 0;
    while (pv >= 1000 && si < 4) {
        pv /= 1000;
        si++;
    }
    fprintf(out, "parameters: %" PRIu64 " (%.4g%s)\n", total_params, pv, sfx[si]);
    frozen_line(p, out);
    quantized_line(p, out);
    long_context_lines(p, out);
    fprintf(out, "memory per rank (peak = the allocation):\n");
    for (int k = 0; k < PLAN_NARENAS; k++)
        fprintf(out, "  %-7s %12s of %12s\n", plan_arena_names[k], plan_bytes_str(p->arenas[k].size, a, sizeof a),
                plan_bytes_str(p->arenas[k].capacity, b, sizeof b));
    if (p->target.backend && !strcmp(p->target.backend, "host"))
        fprintf(out, "  (host backend: the gpu arena is each rank's device arena, in host memory)\n");
    else
        plandump_devmem(p, out);
    fprintf(out, "model state homes per rank: gpu %s, cpu %s, nvme %s\n", plan_bytes_str(home[TIER_GPU], a, sizeof a),
            plan_bytes_str(home[TIER_CPU], b, sizeof b), plan_bytes_str(home[TIER_NVME], (char[32]){0}, 32));
    plandump_moe(p, out);
    if (!c) return;
    fprintf(out, "predicted step time: %.6g s", c->step_time);
    if (p->train.grad_accum > 1) fprintf(out, " (%" PRId64 " micro-batches)", p->train.grad_accum);
    double flops = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) if (p->instrs[i].op == PI_KERNEL) flops += p->instrs[i].flops;
    if (c->pass_time > 0) fprintf(out, ", %.3g TFLOP/s per rank", flops / c->pass_time / 1e12);
    fprintf(out, "\nqueue busy time per pass:\n");
    for (int q = 0; q < PLAN_NQUEUES; q++)
        fprintf(out, "  %-7s %10.6g s  %5.1f%%\n", plan_queue_names[q], c->busy[q], c->pass_time > 0 ? 100 * c->busy[q] / c->pass_time : 0);
    char sent[256];
    cost_bottleneck_sentence(p, c, sent, sizeof sent);
    fprintf(out, "%s\n", sent);
}

void pd_lifetimes(const Plan *p, int32_t *first, int32_t *last) {
    for (uint32_t b = 0; b < p->nbuffers; b++) first[b] = last[b] = -1;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        for (uint32_t k = 0; k < p->instrs[i].nopnd && p->instrs[i].opnd + k < p->noperands; k++) {
            int32_t b = p->operands[p->instrs[i].opnd + k].buffer;
            if (b < 0 || (uint32_t)b >= p->nbuffers) continue;
            if (first[b] < 0) first[b] = (int32_t)i;
            last[b] = (int32_t)i;
        }
}

typedef struct Row {
    uint64_t off;
    uint32_t buf;
} Row;
static int by_off(const void *x, const void *y) {
    const Row *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off ? 1 : (a->buf < b->buf ? -1 : 1);
}

void plandump_memory(const Plan *p, FILE *out) {
    int32_t *first = malloc(sizeof(int32_t) * (p->nbuffers + 1)), *last = malloc(sizeof(int32_t) * (p->nbuffers + 1));
    Row *rows = malloc(sizeof(Row) * (p->nbuffers + 1));
    if (!first || !last || !rows) {
        fprintf(out, "out of memory\n");
        goto done;
    }
    pd_lifetimes(p, first, last);
    char a[32], b[32];
    for (int k = 0; k < PLAN_NARENAS; k++) {
        int n = 0;
        for (uint32_t i = 0; i < p->nbuffers; i++)
            if (p->buffers[i].arena == k) rows[n++] = (Row){p->buffers[i].offset, i};
        qsort(rows, (size_t)n, sizeof *rows, by_off);
        fprintf(out, "arena %s: %s of %s, %d buffers\n", plan_arena_names[k], plan_bytes_str(p->arenas[k].size, a, sizeof a),
                plan_bytes_str(p->arenas[k].capacity, b, sizeof b), n);
        for (int r = 0; r < n; r++) {
            const PlanBuffer *bf = &p->buffers[rows[r].buf];
            fprintf(out, "  %14" PRIu64 " %12" PRIu64 "  ", bf->offset, bf->bytes);
            if (bf->flags & PLAN_BUF_PERSISTENT) fprintf(out, "%-13s", "persistent");
            else fprintf(out, "[%5d,%5d] ", first[rows[r].buf], last[rows[r].buf]);
            fprintf(out, " %s\n", bf->name);
        }
    }
done:
    free(first);
    free(last);
    free(rows);
}

static void json_str(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(out, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(out, "\\u%04x", *s);
        else fputc(*s, out);
    }
    fputc('"', out);
}

void plandump_trace(const Plan *p, const CostResult *c, FILE *out) {
    fprintf(out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    for (int q = 0; q < PLAN_NQUEUES; q++)
        fprintf(out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n", q, plan_queue_names[q]);
    char what[256];
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        fprintf(out, "{\"name\":");
        json_str(out, s->op < PI_COUNT ? plan_opcode_names[s->op] : "?");
        fprintf(out, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"i\":%u,\"what\":",
                s->queue < PLAN_NQUEUES ? plan_queue_names[s->queue] : "?", s->queue, c->start[i] * 1e6,
                (c->end[i] - c->start[i]) * 1e6, i);
        json_str(out, pd_instr_what(p, s, what, sizeof what));
        fprintf(out, ",\"bytes\":%" PRIu64 "}}%s\n", s->bytes, i + 1 < p->ninstrs ? "," : "");
    }
    fprintf(out, "]}\n");
}

/* ---- --kernels: embedded units, then the launches per op ---- */

static const char *const rt_names[PLAN_NRT] = {"lr", "bc1", "bc2", "inv_loss_scale", "loss_grad"};

static const char *tname(const Plan *p, int32_t t) {
    if (t == PLAN_GEMM_OP_WS) return "ws";
    return t >= 0 && (uint32_t)t < p->ntensors && p->tensors[t].name ? p->tensors[t].name : "?";
}

static void launch_arg_str(const Plan *p, const PlanLaunchArg *a, FILE *out) {
    switch (a->kind) {
    case PARG_TENSOR:
        fprintf(out, "%s", a->tensor < 0 ? "_" : tname(p, a->tensor));
        if (a->i) fprintf(out, "+%" PRId64 "B", a->i); /* a tile's columns: bytes past the address */
        break;
    case PARG_WS: fprintf(out, "ws+%" PRId64, a->i); break;
    case PARG_NULL: fprintf(out, "NULL"); break;
    case PARG_I64: fprintf(out, "%" PRId64, a->i); break;
    case PARG_F32: fprintf(out, "%.9g", (double)a->f); break;
    case PARG_RT: fprintf(out, "$%s", a->rt < PLAN_NRT ? rt_names[a->rt] : "?"); break;
    case PARG_NUMEL: fprintf(out, "numel(%s)", a->tensor < 0 ? "_" : tname(p, a->tensor)); break;
    case PARG_SEG: fprintf(out, "$seg"); break;
    default: fprintf(out, "?%u", a->kind); break;
    }
}

static void launch_line(const Plan *p, uint32_t i, FILE *out) {
    const PlanLaunch *l = &p->launches[i];
    fprintf(out, "    %u: %s <<<(%u,%u,%u), (%u,%u,%u), %u>>> (", i, l->entry, l->grid[0], l->grid[1], l->grid[2],
            l->block[0], l->block[1], l->block[2], l->smem);
    for (uint32_t k = 0; k < l->nargs && (uint64_t)l->arg + k < p->nlaunch_args; k++) {
        if (k) fprintf(out, ", ");
        launch_arg_str(p, &p->launch_args[l->arg + k], out);
    }
    fprintf(out, ") %s\n", l->unit);
}

/* Per GEMM: the path the compiler chose and, for NVRTC-only ones, why. */
static void gemm_lines(const Plan *p, FILE *out) {
    if (!p->ngemms) {
        if (p->version < 4) fprintf(out, "gemms: none described (a version-%u plan): every GEMM runs its NVRTC launch\n", p->version);
        return;
    }
    uint32_t nlt = 0;
    for (uint32_t i = 0; i < p->ngemms; i++) nlt += p->gemms[i].path == PLAN_GEMM_LT;
    fprintf(out, "%u gemms: %u through cuBLASLt when zinfrun has it (else their launch), %u NVRTC only\n", p->ngemms, nlt,
            p->ngemms - nlt);
    static const char *const dtype_names[PLAN_NDTYPES] = {"none", "f32", "bf16", "f16", "i32"};
    for (uint32_t i = 0; i < p->ngemms; i++) {
        const PlanGemm *g = &p->gemms[i];
        const PlanLaunch *l = &p->launches[g->launch];
        fprintf(out, "  launch %u (op %d): %s %s %c%c m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " ld=%" PRId64 ",%" PRId64
                     ",%" PRId64,
                g->launch, l->op, g->path < PLAN_NGEMM_PATHS ? plan_gemm_path_names[g->path] : "?",
                g->dtype < PLAN_NDTYPES ? dtype_names[g->dtype] : "?", g->flags & PLAN_GEMM_TA ? 'T' : 'N',
                g->flags & PLAN_GEMM_TB ? 'T' : 'N', g->m, g->n, g->k, g->lda, g->ldb, g->ldc);
        if (g->batch > 1) fprintf(out, " batch=%" PRId64, g->batch);
        if (g->rbatch > 1) fprintf(out, " sum of %" PRId64, g->rbatch);
        fprintf(out, " %s = %s*%s%s%s", tname(p, g->c), tname(p, g->a), tname(p, g->b), g->bias >= 0 ? " + " : "",
                g->bias >= 0 ? tname(p, g->bias) : "");
        fprintf(out, g->flags & PLAN_GEMM_ACCUM ? " (accumulate)" : " (overwrite)");
        if (g->path == PLAN_GEMM_LT) fprintf(out, ", cuBLASLt workspace %" PRId64 " B\n", g->ws_bytes);
        else fprintf(out, ": %s\n", g->why < PLAN_NGEMM_WHYS ? plan_gemm_why_names[g->why] : "?");
    }
}

void plandump_kernels(const Plan *p, FILE *out) {
    uint64_t total = 0;
    for (uint32_t k = 0; k < p->nkernels; k++) total += p->kernels[k].size;
    fprintf(out, "%u kernel%s embedded, %" PRIu64 " bytes of cubin\n", p->nkernels, p->nkernels == 1 ? "" : "s", total);
    for (uint32_t k = 0; k < p->nkernels; k++)
        fprintf(out, "  %-28s %-6s %8" PRIu64 " B  %s\n", p->kernels[k].name ? p->kernels[k].name : "?",
                p->kernels[k].arch ? p->kernels[k].arch : "?", p->kernels[k].size,
                p->kernels[k].resources ? p->kernels[k].resources : "");
    if (!p->nkernels) fprintf(out, "  (a plan for the host backend, or compiled with --kernels=none)\n");
    if (!p->nlaunches) return;
    uint32_t nutil = 0, ntile = 0;
    for (uint32_t i = 0; i < p->nlaunches; i++) nutil += p->launches[i].op < 0;
    for (uint32_t k = 0; k < p->ntile_code; k++) ntile += p->tile_code[k].count;
    if (ntile > p->nlaunches - nutil) ntile = p->nlaunches - nutil; /* a forged file: keep the counts sane */
    fprintf(out, "%u launches: %u for %u ops, %u for %u tiles of tiled ops, %u utility\n", p->nlaunches,
            p->nlaunches - nutil - ntile, p->nops, ntile, p->ntile_code, nutil);
    for (uint32_t o = 0; p->op_code && o < p->nops; o++) {
        const PlanOp *op = &p->ops[o];
        const PlanOpCode *c = &p->op_code[o];
        bool prim = op->kind == OP_FWD || op->kind == OP_BWD || op->kind == OP_RECOMPUTE;
        fprintf(out, "  op %u %s%s%s%s%s", o, op->kind < OP_KIND_COUNT ? op_kind_names[op->kind] : "?", prim ? " " : "",
                prim && op->prim < PRIM_COUNT ? prim_names[op->prim] : "", *op->scope ? " @" : "", op->scope);
        if (c->ws_bytes) fprintf(out, ", workspace %" PRId64 " B", c->ws_bytes);
        if (c->err_off >= 0) fprintf(out, ", error word at ws+%" PRId64 " (%s)", c->err_off, c->err_what);
        fprintf(out, ": %u launch%s\n", c->count, c->count == 1 ? "" : "es");
        for (uint32_t k = 0; k < c->count && (uint64_t)c->first + k < p->nlaunches; k++) launch_line(p, c->first + k, out);
        /* its tiles (tile_code is sorted by op): what a tiled KERNEL instruction runs instead */
        for (uint32_t t = 0; t < p->ntile_code; t++) {
            const PlanTileCode *tc = &p->tile_code[t];
            if (tc->op != (int32_t)o) continue;
            fprintf(out, "    tile %d of %d", tc->tile, tc->ntiles);
            if (tc->ws_bytes) fprintf(out, ", workspace %" PRId64 " B", tc->ws_bytes);
            fprintf(out, ": %u launch%s\n", tc->count, tc->count == 1 ? "" : "es");
            for (uint32_t k = 0; k < tc->count && (uint64_t)tc->first + k < p->nlaunches; k++) {
                fprintf(out, "  ");
                launch_line(p, tc->first + k, out);
            }
        }
    }
    static const char *const util_names[PLAN_NUTIL] = {"axpy"};
    static const char *const dtype_names[PLAN_NDTYPES] = {"none", "f32", "bf16", "f16", "i32"};
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++)
            if (p->util[u][t] >= 0 && (uint32_t)p->util[u][t] < p->nlaunches) {
                fprintf(out, "  utility %s %s:\n", util_names[u], dtype_names[t]);
                launch_line(p, (uint32_t)p->util[u][t], out);
            }
    gemm_lines(p, out);
}

void plandump_hf(const Plan *p, FILE *out) {
    const PlanHf *h = &p->hf;
    if (!h->arch || !h->arch[0]) {
        fputs("no Hugging Face mapping (the model has no hf block)\n", out);
        return;
    }
    uint32_t nparams = 0;
    for (uint32_t i = 0; i < h->npieces; i++) nparams += i == 0 || h->pieces[i].tensor != h->pieces[i - 1].tensor;
    fprintf(out, "hf %s: %u piece%s of %u parameter%s, config.json of %zu bytes\n", h->arch, h->npieces,
            h->npieces == 1 ? "" : "s", nparams, nparams == 1 ? "" : "s", strlen(h->config ? h->config : ""));
    for (uint32_t i = 0; i < h->npieces; i++) {
        const PlanHfPiece *x = &h->pieces[i];
        const PlanTensor *t = &p->tensors[x->tensor];
        fprintf(out, "piece %s [", t->name);
        for (int d = 0; d < t->rank; d++) fprintf(out, "%s%" PRId64, d ? "," : "", t->dims[d]);
        fprintf(out, "]");
        if (x->stacked) fprintf(out, "[%d]", x->index); /* the slice this per-expert tensor fills */
        if (x->layout) fprintf(out, " %s", x->layout == PLAN_HF_EXPERT_ROWS ? "expert_rows" : "expert_cols");
        fprintf(out, " <- %s %s %" PRId64 " %" PRId64 "\n", x->hf_name, x->transpose ? "T" : "-", x->src_col, x->cols);
    }
}
