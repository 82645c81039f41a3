/* plan_mutator: libFuzzer's custom mutator and cross-over for fuzz_plan.
 *
 * A plan file carries an FNV-1a checksum per section and one over its
 * header (docs/plan-format.md), so byte mutations almost never get past
 * plan_decode. This mutator works on the decoded Plan instead: it decodes
 * the input, changes its structure (one to four mutations, below), and
 * writes it back with plan_encode, so the checksums, lengths and counts of
 * the file are right and the change reaches the index checks, the verifier,
 * the dumps and the executor. The structural mutations:
 *   - a field of any record: counts, lengths, offsets, enum codes,
 *     cross-references (tensor, op, shard, buffer, operand, instruction,
 *     dependency, launch, argument indices, Hugging Face pieces' tensors
 *     and column ranges), train fields (micro_batch and
 *     the others set to 0, -1, 1, 2^57+4, ...), the target, arenas, input
 *     tensor ids, dims; values are chosen mostly in range (the index just
 *     past the end, -1 and boundary numbers the rest of the time);
 *   - a tensor's shape with a matching element count (the decoder checks it);
 *   - a shard's tiling at its extremes (2^62 elements, 65536 tiles, ...)
 *     with the byte count the verifier computes for it;
 *   - an instruction's operand or dependency range: another instruction's
 *     (overlapping), a random one, or one running past the end;
 *   - a buffer moved onto another's offset, an operand's byte range over
 *     the edge of its buffer;
 *   - an array grown by a copy of one of its records, shrunk, or two records
 *     swapped (the op code table follows the ops);
 *   - a string: empty, long, with quotes and markup, or not UTF-8;
 *   - the op code table added or dropped.
 * A third of the time, when the input is a sound plan, the mutant must pass
 * the verifier too (a few tries), so that values the verifier lets through
 * reach the dumps and the executor's set-up. Some of the time (and whenever the input does not decode) it mutates the
 * bytes of one section with libFuzzer's own mutator instead and fixes up the
 * lengths and checksums; rarely it mutates raw bytes and leaves them.
 * Cross-over takes one part (meta, target, train, one record array) of the
 * second plan into the first.
 *
 * Everything is allocated in the decoded plan's arena and freed with it. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"
#include "graph.h"
#include "plan.h"
#include "verify.h"

/* The file's framing (docs/plan-format.md): a 24-byte header, then 24-byte
 * section headers (id, 0, payload length, checksum) each before its payload. */
enum { HEADER_BYTES = 24, SECHDR_BYTES = 24, MAX_SECTIONS = 64 };

/* ---- randomness (deterministic for a seed, as libFuzzer asks) ---- */

typedef struct Rng {
    uint64_t s;
} Rng;

static uint64_t rnd(Rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t below(Rng *r, uint64_t n) { return n ? rnd(r) % n : 0; }
static bool one_in(Rng *r, uint64_t n) { return below(r, n) == 0; }

/* ---- fields ---- */

typedef enum Kind { K_U8, K_I32, K_U32, K_I64, K_U64, K_F64, K_F32 } Kind;

/* One mutable number of a record. range > 0: an index into (or an enum of)
 * that many values; 0: a plain number. */
typedef struct Field {
    void *at;
    Kind kind;
    int64_t range;
} Field;

enum { MAX_FIELDS = 64 };

typedef struct Fields {
    Field f[MAX_FIELDS];
    int n;
} Fields;

static void add(Fields *fs, void *at, Kind k, int64_t range) {
    if (fs->n < MAX_FIELDS) fs->f[fs->n++] = (Field){at, k, range};
}

static const int64_t boundary[] = {
    0, 1, 2, 3, 4, 7, 8, 16, 64, 255, 256, 1023, 1024, 2048, 4095, 4096, 4097, 65535, 65536, -1, -2,
    INT32_MAX, (int64_t)INT32_MAX + 1, INT32_MIN, UINT32_MAX, (int64_t)1 << 32, ((int64_t)1 << 57) + 4,
    (int64_t)1 << 62, INT64_MAX / 16, INT64_MAX, INT64_MIN,
};
enum { NBOUNDARY = sizeof boundary / sizeof boundary[0] };

static int64_t get_int(const Field *f) {
    switch (f->kind) {
    case K_U8: return *(uint8_t *)f->at;
    case K_I32: return *(int32_t *)f->at;
    case K_U32: return *(uint32_t *)f->at;
    case K_I64: return *(int64_t *)f->at;
    case K_U64: return (int64_t)*(uint64_t *)f->at;
    default: return 0;
    }
}

static void set_int(const Field *f, int64_t v) {
    switch (f->kind) {
    case K_U8: *(uint8_t *)f->at = (uint8_t)v; break;
    case K_I32: *(int32_t *)f->at = (int32_t)v; break;
    case K_U32: *(uint32_t *)f->at = (uint32_t)v; break;
    case K_I64: *(int64_t *)f->at = v; break;
    case K_U64: *(uint64_t *)f->at = (uint64_t)v; break;
    default: break;
    }
}

static double pick_double(Rng *r, double cur) {
    static const double vals[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-8, 1e-300, 4.9e-324, 1e12, 1e300, -1e300, DBL_MAX, 1.8446744073709552e19};
    switch (below(r, 6)) {
    case 0: return INFINITY;
    case 1: return one_in(r, 2) ? -INFINITY : NAN;
    case 2: return cur * 2;
    case 3: return cur / 3;
    default: return vals[below(r, sizeof vals / sizeof vals[0])];
    }
}

/* cur + d, wrapping (the field is what it is; the sum may not overflow here) */
static int64_t plus(int64_t cur, int64_t d) { return (int64_t)((uint64_t)cur + (uint64_t)d); }

static int64_t pick_int(Rng *r, int64_t cur, int64_t range) {
    if (range > 0 && below(r, 10) < 6) return (int64_t)below(r, (uint64_t)range); /* a valid index or code */
    switch (below(r, 8)) {
    case 0: return -1;
    case 1: return range > 0 ? range : plus(cur, 1);      /* just past the end */
    case 2: return range > 0 ? range + 1 : plus(cur, -1);
    case 3: return plus(cur, (int64_t)below(r, 17) - 8);  /* nearby */
    case 4: return (int64_t)rnd(r);
    default: return boundary[below(r, NBOUNDARY)];
    }
}

static void mutate_field(Rng *r, const Field *f) {
    if (f->kind == K_F64) {
        *(double *)f->at = pick_double(r, *(double *)f->at);
    } else if (f->kind == K_F32) {
        double v = pick_double(r, *(float *)f->at);
        *(float *)f->at = isfinite(v) && fabs(v) > FLT_MAX ? (v > 0 ? INFINITY : -INFINITY) : (float)v;
    } else {
        set_int(f, pick_int(r, get_int(f), f->range));
    }
}

/* ---- the records of a plan ---- */

typedef enum Entity {
    E_META, E_TARGET, E_TRAIN, E_TENSOR, E_OP, E_SHARD, E_ARENA, E_BUFFER, E_OPERAND, E_INSTR, E_DEP,
    E_LAUNCH, E_LAUNCH_ARG, E_OP_CODE, E_TILE_CODE, E_UTIL, E_HF_PIECE, E_COUNT
} Entity;

/* How many records of entity e the plan has. */
static uint32_t records(const Plan *p, Entity e) {
    switch (e) {
    case E_META: case E_TARGET: case E_TRAIN: case E_UTIL: return 1;
    case E_TENSOR: return p->ntensors;
    case E_OP: return p->nops;
    case E_SHARD: return p->nshards;
    case E_ARENA: return PLAN_NARENAS;
    case E_BUFFER: return p->nbuffers;
    case E_OPERAND: return p->noperands;
    case E_INSTR: return p->ninstrs;
    case E_DEP: return p->ndeps;
    case E_LAUNCH: return p->nlaunches;
    case E_LAUNCH_ARG: return p->nlaunch_args;
    case E_OP_CODE: return p->op_code ? p->nops : 0;
    case E_TILE_CODE: return p->ntile_code;
    case E_HF_PIECE: return p->hf.npieces;
    case E_COUNT: break;
    }
    return 0;
}

/* The fields of record i of entity e, with the ranges their values index. */
static void fields_of(Plan *p, Entity e, uint32_t i, Fields *fs) {
    int64_t nt = p->ntensors, no = p->nops, nb = p->nbuffers;
    fs->n = 0;
    switch (e) {
    case E_META:
        add(fs, &p->ranks, K_I32, 0);
        add(fs, &p->loss, K_I32, nt);
        add(fs, &p->ninputs, K_I32, 5);
        for (int k = 0; k < 4; k++) add(fs, &p->inputs[k], K_I32, nt);
        add(fs, &p->opt_begin, K_U32, (int64_t)p->ninstrs + 1);
        break;
    case E_TARGET: {
        PlanTarget *t = &p->target;
        add(fs, &t->nodes, K_I32, 0);
        add(fs, &t->gpus_per_node, K_I32, 0);
        add(fs, &t->gpu_memory, K_U64, 0);
        add(fs, &t->gpu_flops, K_F64, 0);
        add(fs, &t->gpu_hbm, K_F64, 0);
        add(fs, &t->gpu_pcie, K_F64, 0);
        add(fs, &t->gpu_sms, K_I32, 0);
        add(fs, &t->cpu_memory, K_U64, 0);
        add(fs, &t->cpu_bandwidth, K_F64, 0);
        add(fs, &t->cpu_cores, K_I32, 0);
        add(fs, &t->nvme_read, K_F64, 0);
        add(fs, &t->nvme_write, K_F64, 0);
        add(fs, &t->nvme_capacity, K_U64, 0);
        add(fs, &t->net_bandwidth, K_F64, 0);
        add(fs, &t->net_inter, K_F64, 0);
        add(fs, &t->net_latency, K_F64, 0);
        break;
    }
    case E_TRAIN: {
        PlanTrain *t = &p->train;
        add(fs, &t->micro_batch, K_I64, 0);
        add(fs, &t->steps, K_I64, 0);
        add(fs, &t->warmup_steps, K_I64, 0);
        add(fs, &t->checkpoint_every, K_I64, 0);
        add(fs, &t->grad_accum, K_I64, 0);
        add(fs, &t->seed, K_U64, 0);
        add(fs, &t->dtype, K_U8, PLAN_NDTYPES);
        add(fs, &t->schedule, K_U8, 2);
        add(fs, &t->lr, K_F64, 0);
        add(fs, &t->beta1, K_F64, 0);
        add(fs, &t->beta2, K_F64, 0);
        add(fs, &t->eps, K_F64, 0);
        add(fs, &t->weight_decay, K_F64, 0);
        add(fs, &t->min_lr, K_F64, 0);
        add(fs, &t->grad_clip, K_F64, 0);
        add(fs, &t->loss_scale, K_F64, 0);
        break;
    }
    case E_TENSOR: {
        PlanTensor *t = &p->tensors[i];
        add(fs, &t->dtype, K_U8, PLAN_NDTYPES);
        add(fs, &t->cls, K_U8, TC_COUNT);
        add(fs, &t->init, K_U8, INIT_UNIFORM + 1);
        add(fs, &t->rank, K_U8, PLAN_MAX_RANK + 1);
        for (int d = 0; d < PLAN_MAX_RANK; d++) add(fs, &t->dims[d], K_I64, 0);
        add(fs, &t->numel, K_I64, 0);
        add(fs, &t->init_std, K_F64, 0);
        add(fs, &t->param, K_I32, nt);
        add(fs, &t->grad, K_I32, nt);
        add(fs, &t->master, K_I32, nt);
        add(fs, &t->momentum, K_I32, nt);
        add(fs, &t->variance, K_I32, nt);
        add(fs, &t->segment, K_I32, 0);
        add(fs, &t->shard, K_I32, p->nshards);
        break;
    }
    case E_OP: {
        PlanOp *o = &p->ops[i];
        add(fs, &o->kind, K_U8, OP_KIND_COUNT);
        add(fs, &o->prim, K_U8, PRIM_COUNT);
        add(fs, &o->nin, K_U8, PLAN_MAX_IN + 1);
        add(fs, &o->nout, K_U8, PLAN_MAX_OUT + 1);
        for (int k = 0; k < o->nin && k < PLAN_MAX_IN; k++) add(fs, &o->in[k], K_I32, nt);
        for (int k = 0; k < o->nout && k < PLAN_MAX_OUT; k++) add(fs, &o->out[k], K_I32, nt);
        for (int k = 0; k < 4; k++) add(fs, &o->iattr[k], K_I64, 0);
        for (int k = 0; k < 2; k++) add(fs, &o->fattr[k], K_F64, 0);
        add(fs, &o->segment, K_I32, 0);
        add(fs, &o->fwd, K_I32, no);
        add(fs, &o->nfin, K_I32, (int64_t)o->nin + 1);
        break;
    }
    case E_SHARD: {
        PlanShard *s = &p->shards[i];
        add(fs, &s->tensor, K_I32, nt);
        add(fs, &s->home, K_U8, PLAN_NTIERS);
        add(fs, &s->partitioned, K_U8, 2);
        add(fs, &s->ntiles, K_I32, 0);
        add(fs, &s->tile_elems, K_I64, 0);
        add(fs, &s->tile_shard, K_I64, 0);
        add(fs, &s->bytes, K_U64, 0);
        add(fs, &s->buffer, K_I32, nb);
        break;
    }
    case E_ARENA: {
        PlanArena *a = &p->arenas[i];
        add(fs, &a->kind, K_U8, PLAN_NARENAS);
        add(fs, &a->capacity, K_U64, 0);
        add(fs, &a->size, K_U64, 0);
        add(fs, &a->align, K_U64, 0);
        break;
    }
    case E_BUFFER: {
        PlanBuffer *b = &p->buffers[i];
        add(fs, &b->arena, K_U8, PLAN_NARENAS);
        add(fs, &b->flags, K_U8, 2);
        add(fs, &b->tensor, K_I32, nt);
        add(fs, &b->offset, K_U64, 0);
        add(fs, &b->bytes, K_U64, 0);
        break;
    }
    case E_OPERAND: {
        PlanOperand *o = &p->operands[i];
        add(fs, &o->buffer, K_I32, nb);
        add(fs, &o->mode, K_U8, PLAN_M + 1);
        add(fs, &o->offset, K_U64, 0);
        add(fs, &o->bytes, K_U64, 0);
        break;
    }
    case E_INSTR: {
        PlanInstr *s = &p->instrs[i];
        int64_t args = s->op == PI_KERNEL ? no : s->op == PI_INPUT ? p->ninputs : nt;
        add(fs, &s->op, K_U8, PI_COUNT);
        add(fs, &s->queue, K_U8, PLAN_NQUEUES);
        add(fs, &s->arg, K_I32, args);
        add(fs, &s->tile, K_I32, s->ntiles > 0 ? s->ntiles : 0);
        add(fs, &s->ntiles, K_I32, 0);
        add(fs, &s->opnd, K_U32, (int64_t)p->noperands + 1);
        add(fs, &s->nopnd, K_U32, (int64_t)p->noperands + 1);
        add(fs, &s->dep, K_U32, (int64_t)p->ndeps + 1);
        add(fs, &s->ndeps, K_U32, (int64_t)p->ndeps + 1);
        add(fs, &s->flops, K_F64, 0);
        add(fs, &s->bytes, K_U64, 0);
        break;
    }
    case E_DEP: add(fs, &p->deps[i], K_U32, p->ninstrs); break;
    case E_LAUNCH: {
        PlanLaunch *l = &p->launches[i];
        for (int k = 0; k < 3; k++) add(fs, &l->grid[k], K_U32, 0);
        for (int k = 0; k < 3; k++) add(fs, &l->block[k], K_U32, 0);
        add(fs, &l->smem, K_U32, 0);
        add(fs, &l->op, K_I32, no);
        add(fs, &l->arg, K_U32, (int64_t)p->nlaunch_args + 1);
        add(fs, &l->nargs, K_U32, (int64_t)p->nlaunch_args + 1);
        break;
    }
    case E_LAUNCH_ARG: {
        PlanLaunchArg *a = &p->launch_args[i];
        add(fs, &a->kind, K_U8, PLAN_NARGKINDS);
        add(fs, &a->rt, K_U8, PLAN_NRT);
        add(fs, &a->tensor, K_I32, nt);
        add(fs, &a->i, K_I64, 0);
        add(fs, &a->f, K_F32, 0);
        break;
    }
    case E_OP_CODE: {
        PlanOpCode *c = &p->op_code[i];
        add(fs, &c->first, K_U32, (int64_t)p->nlaunches + 1);
        add(fs, &c->count, K_U32, (int64_t)p->nlaunches + 1);
        add(fs, &c->ws_bytes, K_I64, 0);
        add(fs, &c->err_off, K_I64, 0);
        break;
    }
    case E_TILE_CODE: {
        PlanTileCode *t = &p->tile_code[i];
        add(fs, &t->op, K_I32, no);
        add(fs, &t->tile, K_I32, t->ntiles > 0 ? t->ntiles : 0);
        add(fs, &t->ntiles, K_I32, 0);
        add(fs, &t->first, K_U32, (int64_t)p->nlaunches + 1);
        add(fs, &t->count, K_U32, (int64_t)p->nlaunches + 1);
        add(fs, &t->ws_bytes, K_I64, 0);
        break;
    }
    case E_UTIL:
        for (int u = 0; u < PLAN_NUTIL; u++)
            for (int t = 0; t < PLAN_NDTYPES; t++) add(fs, &p->util[u][t], K_I32, p->nlaunches);
        break;
    case E_HF_PIECE: {
        PlanHfPiece *h = &p->hf.pieces[i];
        add(fs, &h->tensor, K_I32, nt);
        add(fs, &h->transpose, K_U8, 2);
        add(fs, &h->src_col, K_I64, 0);
        add(fs, &h->cols, K_I64, 0);
        add(fs, &h->stacked, K_U8, 2);
        add(fs, &h->index, K_I32, 0);
        break;
    }
    case E_COUNT: break;
    }
}

/* A random entity that has records, weighted to the schedule and memory. */
static Entity pick_entity(Rng *r, const Plan *p) {
    static const uint8_t weight[E_COUNT] = {
        [E_META] = 3, [E_TARGET] = 2, [E_TRAIN] = 4, [E_TENSOR] = 6, [E_OP] = 5, [E_SHARD] = 5, [E_ARENA] = 3,
        [E_BUFFER] = 6, [E_OPERAND] = 6, [E_INSTR] = 8, [E_DEP] = 4, [E_LAUNCH] = 2, [E_LAUNCH_ARG] = 2,
        [E_OP_CODE] = 2, [E_TILE_CODE] = 2, [E_UTIL] = 1, [E_HF_PIECE] = 3,
    };
    unsigned total = 0;
    for (int e = 0; e < E_COUNT; e++) total += records(p, (Entity)e) ? weight[e] : 0;
    uint64_t x = below(r, total);
    for (int e = 0; e < E_COUNT; e++) {
        unsigned w = records(p, (Entity)e) ? weight[e] : 0;
        if (x < w) return (Entity)e;
        x -= w;
    }
    return E_TRAIN;
}

static bool mutate_one_field(Rng *r, Plan *p) {
    Entity e = pick_entity(r, p);
    Fields fs;
    fields_of(p, e, (uint32_t)below(r, records(p, e)), &fs);
    if (!fs.n) return false;
    mutate_field(r, &fs.f[below(r, (uint64_t)fs.n)]);
    return true;
}

/* The train fields the executor divides by and sizes with, at their edges. */
static bool mutate_train_edge(Rng *r, Plan *p) {
    static const int64_t edge[] = {0, -1, 1, 2, ((int64_t)1 << 57) + 4, INT64_MAX, INT64_MIN, (int64_t)1 << 31};
    int64_t *f[] = {&p->train.micro_batch, &p->train.grad_accum, &p->train.steps, &p->train.warmup_steps,
                    &p->train.checkpoint_every};
    *f[below(r, sizeof f / sizeof f[0])] = edge[below(r, sizeof edge / sizeof edge[0])];
    return true;
}

/* A new shape with the element count that goes with it (when it fits). */
static bool mutate_shape(Rng *r, Plan *p) {
    if (!p->ntensors) return false;
    PlanTensor *t = &p->tensors[below(r, p->ntensors)];
    static const int64_t dims[] = {0, 1, 2, 3, 4, 7, 16, 64, 255, 256, 4096, 65536, (int64_t)1 << 31, (int64_t)1 << 40};
    if (one_in(r, 3)) t->rank = (uint8_t)below(r, PLAN_MAX_RANK + 1);
    int d = t->rank ? (int)below(r, t->rank) : 0;
    if (t->rank) t->dims[d] = one_in(r, 2) ? dims[below(r, sizeof dims / sizeof dims[0])] : plus(t->dims[d], t->dims[d]);
    int64_t n = 1;
    for (int k = 0; k < t->rank; k++) {
        if (t->dims[k] < 0 || (t->dims[k] && n > INT64_MAX / 16 / t->dims[k])) return true; /* the decoder says */
        n *= t->dims[k];
    }
    t->numel = n;
    return true;
}

/* A shard's tiling at its extremes, its byte count kept equal to
 * ntiles x tile_shard x dtype size as the verifier computes it (in 64 bits,
 * so a product past 2^64 comes around). */
static bool mutate_tiling(Rng *r, Plan *p) {
    if (!p->nshards) return false;
    PlanShard *s = &p->shards[below(r, p->nshards)];
    static const int64_t tiles[] = {1, 2, 3, 4, 7, 65536, INT32_MAX};
    static const int64_t elems[] = {0, 1, 2047, 2048, ((int64_t)1 << 57) + 4, (int64_t)1 << 61, (int64_t)1 << 62, INT64_MAX / 16,
                                    INT64_MAX};
    switch (below(r, 4)) {
    case 0: s->ntiles = (int32_t)tiles[below(r, sizeof tiles / sizeof tiles[0])]; break;
    case 1: s->tile_elems = elems[below(r, sizeof elems / sizeof elems[0])]; break;
    case 2: s->tile_shard = elems[below(r, sizeof elems / sizeof elems[0])]; break;
    default: s->partitioned = !s->partitioned; break;
    }
    if (one_in(r, 2) && s->tensor >= 0 && (uint32_t)s->tensor < p->ntensors && s->ntiles > 0)
        s->tile_elems = p->tensors[s->tensor].numel / s->ntiles; /* still the tensor's elements, mostly */
    if (!one_in(r, 4)) { /* the rank's slice as the planner cuts it, padding aside */
        uint64_t ranks = p->ranks > 0 ? (uint64_t)p->ranks : 1;
        s->tile_shard = s->partitioned ? (int64_t)(((uint64_t)s->tile_elems + ranks - 1) / ranks) : s->tile_elems;
    }
    int ds = s->tensor >= 0 && (uint32_t)s->tensor < p->ntensors ? plan_dtype_size(p->tensors[s->tensor].dtype) : 4;
    s->bytes = (uint64_t)s->ntiles * (uint64_t)s->tile_shard * (uint64_t)ds;
    return true;
}

/* An instruction's operand or dependency range: another's, random, past the end. */
static bool mutate_range(Rng *r, Plan *p) {
    if (!p->ninstrs) return false;
    PlanInstr *s = &p->instrs[below(r, p->ninstrs)];
    bool deps = one_in(r, 3);
    uint32_t *first = deps ? &s->dep : &s->opnd, *count = deps ? &s->ndeps : &s->nopnd;
    uint32_t n = deps ? p->ndeps : p->noperands;
    const PlanInstr *o = &p->instrs[below(r, p->ninstrs)];
    switch (below(r, 4)) {
    case 0: /* overlap another instruction's */
        *first = deps ? o->dep : o->opnd;
        if (one_in(r, 2)) *count = deps ? o->ndeps : o->nopnd;
        break;
    case 1: /* a random range inside */
        *first = (uint32_t)below(r, (uint64_t)n + 1);
        *count = (uint32_t)below(r, (uint64_t)(n - *first) + 1);
        break;
    case 2: /* one past the end */
        *first = n ? n - 1 : 0;
        *count = 2;
        break;
    default: /* shifted by one */
        *first += one_in(r, 2) ? 1 : (uint32_t)-1;
        break;
    }
    return true;
}

/* Buffers onto each other, operand ranges over the edge of their buffer. */
static bool mutate_overlap(Rng *r, Plan *p) {
    if (!p->nbuffers) return false;
    if (one_in(r, 2) || !p->noperands) {
        PlanBuffer *a = &p->buffers[below(r, p->nbuffers)];
        const PlanBuffer *b = &p->buffers[below(r, p->nbuffers)];
        a->arena = b->arena;
        a->offset = b->offset + (one_in(r, 2) ? 0 : b->bytes / 2);
        if (one_in(r, 2)) a->bytes = b->bytes;
        return true;
    }
    PlanOperand *o = &p->operands[below(r, p->noperands)];
    if (o->buffer < 0 || (uint32_t)o->buffer >= p->nbuffers) return false;
    uint64_t size = p->buffers[o->buffer].bytes;
    o->offset = below(r, size + 1);
    o->bytes = size - o->offset + below(r, 2);
    return true;
}

/* ---- arrays: grow by a copy, shrink, swap ---- */

typedef struct Array {
    void **items;
    uint32_t *n;
    size_t elem;
} Array;

static bool resize(Plan *p, Array a, uint32_t n) {
    void *fresh = n ? arena_alloc(&p->arena, a.elem * n) : NULL;
    if (n && !fresh) return false;
    uint32_t keep = *a.n < n ? *a.n : n;
    if (keep) memcpy(fresh, *a.items, a.elem * keep);
    *a.items = fresh;
    *a.n = n;
    return true;
}

static bool mutate_array(Rng *r, Plan *p) {
    Array arrays[] = {
        {(void **)&p->tensors, &p->ntensors, sizeof *p->tensors},
        {(void **)&p->ops, &p->nops, sizeof *p->ops},
        {(void **)&p->shards, &p->nshards, sizeof *p->shards},
        {(void **)&p->buffers, &p->nbuffers, sizeof *p->buffers},
        {(void **)&p->operands, &p->noperands, sizeof *p->operands},
        {(void **)&p->instrs, &p->ninstrs, sizeof *p->instrs},
        {(void **)&p->deps, &p->ndeps, sizeof *p->deps},
        {(void **)&p->kernels, &p->nkernels, sizeof *p->kernels},
        {(void **)&p->launches, &p->nlaunches, sizeof *p->launches},
        {(void **)&p->launch_args, &p->nlaunch_args, sizeof *p->launch_args},
        {(void **)&p->tile_code, &p->ntile_code, sizeof *p->tile_code},
        {(void **)&p->hf.pieces, &p->hf.npieces, sizeof *p->hf.pieces},
    };
    size_t which = below(r, sizeof arrays / sizeof arrays[0]);
    Array a = arrays[which];
    bool ops = a.items == (void **)&p->ops;
    uint32_t n = *a.n;
    uint8_t *tmp = NULL;
    switch (below(r, 3)) {
    case 0: { /* grow: append a copy of a record (the op code table follows) */
        if (!n || n == UINT32_MAX) return false;
        uint32_t src = (uint32_t)below(r, n);
        PlanOpCode *oc = p->op_code;
        if (!resize(p, a, n + 1)) return false;
        memcpy((uint8_t *)*a.items + (size_t)n * a.elem, (uint8_t *)*a.items + (size_t)src * a.elem, a.elem);
        if (ops && oc) {
            uint32_t old = n;
            Array c = {(void **)&p->op_code, &old, sizeof *p->op_code};
            if (!resize(p, c, n + 1)) return false;
            p->op_code[n] = oc[src];
        }
        return true;
    }
    case 1: { /* shrink: drop one record */
        if (!n) return false;
        uint32_t at = (uint32_t)below(r, n);
        uint8_t *base = *a.items;
        memmove(base + (size_t)at * a.elem, base + (size_t)(at + 1) * a.elem, (size_t)(n - at - 1) * a.elem);
        *a.n = n - 1;
        if (ops && p->op_code)
            memmove(&p->op_code[at], &p->op_code[at + 1], sizeof *p->op_code * (size_t)(n - at - 1));
        return true;
    }
    default: { /* swap two records */
        if (n < 2) return false;
        uint32_t x = (uint32_t)below(r, n), y = (uint32_t)below(r, n);
        tmp = arena_alloc(&p->arena, a.elem);
        if (!tmp) return false;
        uint8_t *base = *a.items;
        memcpy(tmp, base + (size_t)x * a.elem, a.elem);
        memcpy(base + (size_t)x * a.elem, base + (size_t)y * a.elem, a.elem);
        memcpy(base + (size_t)y * a.elem, tmp, a.elem);
        if (ops && p->op_code) {
            PlanOpCode c = p->op_code[x];
            p->op_code[x] = p->op_code[y];
            p->op_code[y] = c;
        }
        return true;
    }
    }
}

/* ---- strings ---- */

static const char *pick_string(Rng *r, Plan *p) {
    static const char *const vals[] = {
        "", "x", "host", "cuda", "sm_90", "\"quoted\" \\ <svg>&amp; %s %n %%", "line\nbreak\ttab\x01\x1f",
        "\xff\xfe not utf-8 \xc3", "block.0.attn.wqkv", "gemm-0123456789ab.cu", "zk_adam", "LlamaForCausalLM",
        "{\"n_embd\": 1e999, \"x\": [[[[", "model.layers.0.self_attn.q_proj.weight",
    };
    if (one_in(r, 5)) { /* long */
        size_t n = 1 + below(r, 600);
        char *s = arena_alloc(&p->arena, n + 1);
        if (!s) return "";
        memset(s, 'A' + (int)below(r, 26), n);
        return s;
    }
    return vals[below(r, sizeof vals / sizeof vals[0])];
}

static bool mutate_string(Rng *r, Plan *p) {
    const char **slot = NULL;
    switch (below(r, 11)) {
    case 0: slot = one_in(r, 2) ? &p->model_name : &p->source; break;
    case 9:
        if (one_in(r, 3) || !p->hf.npieces) slot = one_in(r, 2) ? &p->hf.arch : &p->hf.config;
        else slot = &p->hf.pieces[below(r, p->hf.npieces)].hf_name;
        break;
    case 1: slot = one_in(r, 3) ? &p->target.name : one_in(r, 2) ? &p->target.backend : &p->target.gpu_arch; break;
    case 2: if (p->ntensors) slot = &p->tensors[below(r, p->ntensors)].name; break;
    case 3: if (p->nbuffers) slot = &p->buffers[below(r, p->nbuffers)].name; break;
    case 4: if (p->nops) slot = &p->ops[below(r, p->nops)].scope; break;
    case 5:
        if (p->nkernels) {
            PlanKernel *k = &p->kernels[below(r, p->nkernels)];
            slot = one_in(r, 3) ? &k->name : one_in(r, 2) ? &k->arch : &k->resources;
        }
        break;
    case 6:
        if (p->nlaunches) {
            PlanLaunch *l = &p->launches[below(r, p->nlaunches)];
            slot = one_in(r, 2) ? &l->unit : &l->entry;
        }
        break;
    case 7: if (p->op_code && p->nops) slot = &p->op_code[below(r, p->nops)].err_what; break;
    case 8: if (p->target.nvme_npaths > 0) slot = &p->target.nvme_paths[below(r, (uint64_t)p->target.nvme_npaths)]; break;
    default: /* a launch's unit named after an embedded kernel, or the reverse */
        if (p->nlaunches && p->nkernels) {
            PlanLaunch *l = &p->launches[below(r, p->nlaunches)];
            l->unit = p->kernels[below(r, p->nkernels)].name;
            return true;
        }
        break;
    }
    if (!slot) return false;
    *slot = pick_string(r, p);
    return true;
}

/* The op code table added (zeroed, no error words) or dropped. */
static bool mutate_op_code(Rng *r, Plan *p) {
    if (p->op_code) {
        p->op_code = NULL;
        return true;
    }
    if (!p->nops) return false;
    p->op_code = arena_alloc(&p->arena, sizeof *p->op_code * p->nops);
    if (!p->op_code) return false;
    for (uint32_t i = 0; i < p->nops; i++) {
        p->op_code[i].err_off = one_in(r, 8) ? (int64_t)below(r, 64) : -1;
        p->op_code[i].err_what = "";
        p->op_code[i].ws_bytes = (int64_t)below(r, 4) * 64;
    }
    return true;
}

static void mutate_plan(Rng *r, Plan *p) {
    for (int tries = 0; tries < 8; tries++) {
        bool done;
        switch (below(r, 21)) {
        case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: done = mutate_one_field(r, p); break;
        case 8: done = mutate_train_edge(r, p); break;
        case 9: case 20: done = mutate_tiling(r, p); break;
        case 10: case 11: done = mutate_shape(r, p); break;
        case 12: case 13: done = mutate_range(r, p); break;
        case 14: case 15: done = mutate_overlap(r, p); break;
        case 16: case 17: done = mutate_array(r, p); break;
        case 18: done = mutate_string(r, p); break;
        default: done = mutate_op_code(r, p); break;
        }
        if (done) return;
    }
}

/* ---- bytes: one section's payload through libFuzzer, framing fixed ---- */

static uint64_t get_le(const uint8_t *b, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
    return v;
}
static void put_le(uint8_t *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* Payload offset and length of each section while the framing holds; returns the count. */
static int frame(const uint8_t *d, size_t size, size_t *at, size_t *len) {
    int n = 0;
    size_t pos = HEADER_BYTES;
    while (n < MAX_SECTIONS && size >= pos && size - pos >= SECHDR_BYTES) {
        uint64_t plen = get_le(d + pos + 8, 8);
        if (plen > size - pos - SECHDR_BYTES) break;
        at[n] = pos + SECHDR_BYTES;
        len[n++] = (size_t)plen;
        pos += SECHDR_BYTES + (size_t)plen;
    }
    return size < HEADER_BYTES ? 0 : n;
}

static void fix_checksums(uint8_t *d, size_t size) {
    if (size < HEADER_BYTES) return;
    put_le(d + 16, plan_fnv1a64(d, 16), 8);
    size_t at[MAX_SECTIONS], len[MAX_SECTIONS];
    int n = frame(d, size, at, len);
    for (int s = 0; s < n; s++) put_le(d + at[s] - 8, plan_fnv1a64(d + at[s], len[s]), 8);
}

static size_t mutate_bytes(Rng *r, uint8_t *d, size_t size, size_t max_size) {
    size_t at[MAX_SECTIONS], len[MAX_SECTIONS];
    int n = frame(d, size, at, len);
    int s = n ? (int)below(r, (uint64_t)n) : -1;
    if (s < 0 || !len[s] || size > max_size) {
        size = LLVMFuzzerMutate(d, size, max_size);
        fix_checksums(d, size);
        return size;
    }
    size_t room = max_size - size, cap = len[s] + (room < 256 ? room : 256);
    uint8_t *payload = malloc(cap);
    if (!payload) return size;
    memcpy(payload, d + at[s], len[s]);
    size_t nl = LLVMFuzzerMutate(payload, len[s], cap);
    size_t tail = size - at[s] - len[s];
    memmove(d + at[s] + nl, d + at[s] + len[s], tail);
    memcpy(d + at[s], payload, nl);
    free(payload);
    put_le(d + at[s] - 16, nl, 8);
    size = at[s] + nl + tail;
    fix_checksums(d, size);
    return size;
}

/* plan_encode writes as many dims, inputs and outputs as the counts say,
 * from fixed arrays: counts beyond them are for byte mutations to forge. */
static void clamp_counts(Plan *p) {
    for (uint32_t i = 0; i < p->ntensors; i++)
        if (p->tensors[i].rank > PLAN_MAX_RANK) p->tensors[i].rank = PLAN_MAX_RANK;
    for (uint32_t i = 0; i < p->nops; i++) {
        if (p->ops[i].nin > PLAN_MAX_IN) p->ops[i].nin = PLAN_MAX_IN;
        if (p->ops[i].nout > PLAN_MAX_OUT) p->ops[i].nout = PLAN_MAX_OUT;
    }
}

/* Writes p into out if it fits; returns the size or 0. */
static size_t emit(Plan *p, uint8_t *out, size_t max_size) {
    clamp_counts(p);
    uint8_t *bytes;
    size_t len;
    char err[128];
    if (!plan_encode(p, &bytes, &len, err, sizeof err)) return 0;
    size_t n = len <= max_size ? len : 0;
    if (n) memcpy(out, bytes, n);
    free(bytes);
    return n;
}

/* A mutant of a sound plan that is still sound (a few tries), or 0: the
 * verifier turns most mutants away, and libFuzzer keeps those for the
 * coverage of its messages, so without these few inputs would reach the
 * dumps and the executor's set-up with anything but the seeds' values. */
static size_t sound_mutant(Rng *r, uint8_t *data, size_t size, size_t max_size) {
    char err[128];
    Plan *p = plan_decode(data, size, "mutator", err, sizeof err);
    bool sound = p && verify_plan(p, NULL, 0) == 0;
    plan_free(p);
    if (!sound) return 0;
    uint8_t *mutant = malloc(max_size);
    size_t out = 0;
    for (int attempt = 0; mutant && attempt < 6 && !out; attempt++) {
        p = plan_decode(data, size, "mutator", err, sizeof err);
        if (!p) break;
        mutate_plan(r, p);
        size_t n = emit(p, mutant, max_size);
        plan_free(p);
        /* verified as read back: the verifier takes only what the decoder passes */
        Plan *q = n ? plan_decode(mutant, n, "mutant", err, sizeof err) : NULL;
        if (q && verify_plan(q, NULL, 0) == 0) {
            memcpy(data, mutant, n);
            out = n;
        }
        plan_free(q);
    }
    free(mutant);
    return out;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    Rng r = {((uint64_t)seed << 32) ^ seed ^ 0x5a17f00dull};
    if (one_in(&r, 40)) return LLVMFuzzerMutate(data, size, max_size); /* raw: checksums left wrong */
    if (one_in(&r, 3)) {
        size_t out = sound_mutant(&r, data, size, max_size);
        if (out) return out;
    }
    if (!one_in(&r, 6)) {
        char err[128];
        Plan *p = plan_decode(data, size, "mutator", err, sizeof err);
        if (p) {
            int n = 1 + (int)below(&r, 4);
            for (int k = 0; k < n; k++) mutate_plan(&r, p);
            size_t out = emit(p, data, max_size);
            plan_free(p);
            if (out) return out;
        }
    }
    return mutate_bytes(&r, data, size, max_size);
}

size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1, const uint8_t *data2, size_t size2, uint8_t *out,
                                 size_t max_out_size, unsigned int seed) {
    Rng r = {((uint64_t)seed << 32) ^ seed ^ 0xc105500full};
    char err[128];
    Plan *a = plan_decode(data1, size1, "first", err, sizeof err);
    Plan *b = a ? plan_decode(data2, size2, "second", err, sizeof err) : NULL;
    size_t n = 0;
    if (a && b) {
        /* a borrows b's records (b outlives the encoding) */
        switch (below(&r, 13)) {
        case 12: a->hf = b->hf; break;
        case 0: a->ranks = b->ranks; a->loss = b->loss; a->ninputs = b->ninputs;
            memcpy(a->inputs, b->inputs, sizeof a->inputs); a->opt_begin = b->opt_begin; break;
        case 1: a->target = b->target; break;
        case 2: a->train = b->train; break;
        case 3: a->tensors = b->tensors; a->ntensors = b->ntensors; break;
        case 4: a->ops = b->ops; a->nops = b->nops; a->op_code = b->op_code; break;
        case 5: a->shards = b->shards; a->nshards = b->nshards; break;
        case 6: memcpy(a->arenas, b->arenas, sizeof a->arenas); break;
        case 7: a->buffers = b->buffers; a->nbuffers = b->nbuffers; break;
        case 8: a->operands = b->operands; a->noperands = b->noperands; break;
        case 9: a->instrs = b->instrs; a->ninstrs = b->ninstrs; break;
        case 10: a->deps = b->deps; a->ndeps = b->ndeps; break;
        default:
            a->launches = b->launches; a->nlaunches = b->nlaunches;
            a->launch_args = b->launch_args; a->nlaunch_args = b->nlaunch_args;
            a->kernels = b->kernels; a->nkernels = b->nkernels;
            break;
        }
        n = emit(a, out, max_out_size);
    }
    plan_free(a);
    plan_free(b);
    return n;
}
