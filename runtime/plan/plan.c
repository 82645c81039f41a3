#include "plan.h"
#include "plan_pack.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "errorf.h"
#include "vocab.h"

const char *const plan_queue_names[PLAN_NQUEUES] = {"nvme", "h2d", "d2h", "comm", "compute", "cpu"};
const char *const plan_opcode_names[PI_COUNT] = {
#define OP(id, name, queue, operands) name,
#include "sched.def"
#undef OP
};
const uint8_t plan_opcode_queue[PI_COUNT] = {
#define OP(id, name, queue, operands) queue,
#include "sched.def"
#undef OP
};
const char *const plan_opcode_operands[PI_COUNT] = {
#define OP(id, name, queue, operands) operands,
#include "sched.def"
#undef OP
};
const char *const plan_tier_names[PLAN_NTIERS] = {"gpu", "cpu", "nvme"};
const char *const plan_family_names[PLAN_NFAMILIES] = {"gemm", "attention", "norm", "elementwise", "activation"};
const char *const plan_arena_names[PLAN_NARENAS] = {"gpu", "pinned", "cpu", "nvme"};
const char *const plan_gemm_path_names[PLAN_NGEMM_PATHS] = {"cublaslt", "nvrtc"};
const char *const plan_gemm_why_names[PLAN_NGEMM_WHYS] = {"", "sums products over batches",
                                                           "reads its weight dequantized in the workspace"};

Plan *plan_new(void) {
    Plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    arena_init(&p->arena);
    p->loss = -1;
    p->model_name = p->source = "";
    p->target.name = p->target.backend = p->target.gpu_arch = "";
    p->version = PLAN_VERSION;
    for (int i = 0; i < PLAN_NARENAS; i++) {
        p->arenas[i].kind = (uint8_t)i;
        p->arenas[i].align = 1;
    }
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++) p->util[u][t] = -1;
    return p;
}

void plan_free(Plan *p) {
    if (!p) return;
    arena_free(&p->arena);
    free(p);
}

int plan_gemm_of_launch(const Plan *p, uint32_t li) {
    uint32_t lo = 0, hi = p->ngemms;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->gemms[mid].launch < li) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->ngemms && p->gemms[lo].launch == li ? (int)lo : -1;
}

uint64_t plan_dtype_bytes(int dtype, int64_t n) { return (uint64_t)dtype_bytes((DType)dtype, n); }

bool plan_dtype_known(int dtype) { return plan_dtype_size(dtype) > 0 || dtype_is_blocked(dtype); }

int plan_dtype_size(int dtype) {
    switch (dtype) { /* DType of lang/ast.h: NONE, F32, BF16, F16, I32 */
    case 1: return 4;
    case 2: return 2;
    case 3: return 2;
    case 4: return 4;
    default: return 0;
    }
}

bool plan_batch_shape(const Plan *p, int64_t *B, int64_t *T) {
    if (p->ninputs < 1 || p->inputs[0] < 0 || (uint32_t)p->inputs[0] >= p->ntensors) return false;
    const PlanTensor *t = &p->tensors[p->inputs[0]];
    if (t->rank < 1 || t->rank > PLAN_MAX_RANK) return false;
    int64_t b = p->train.micro_batch, n = t->dims[t->rank - 1], ids;
    /* the runtime allocates B*T ids and reads windows of B*T+1 tokens */
    if (b < 1 || n < 1 || __builtin_mul_overflow(b, n, &ids) || ids > (INT64_MAX / 16) / (int64_t)sizeof(int32_t)) return false;
    *B = b;
    *T = n;
    return true;
}

uint64_t plan_fnv1a64(const void *data, size_t n) {
    const uint8_t *b = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

const char *plan_bytes_str(uint64_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, n, "%" PRIu64 " B", bytes);
    else snprintf(buf, n, "%.2f %s", v, units[u]);
    return buf;
}

/* ---- the codec: one description of each section, run to write or to read ---- */

typedef struct Codec {
    bool reading;
    uint32_t version;  /* the format being read or written */
    /* writing */
    uint8_t *buf;
    size_t len, cap;
    bool oom;
    /* reading */
    const uint8_t *in;
    size_t inlen, pos;
    bool bad;          /* truncated or malformed */
    const char *why;   /* what was malformed */
    Arena *arena;
} Codec;

/* Room for n more bytes: doubling, or exactly n more when that is more
 * (a table's count says how much follows). */
static bool reserve(Codec *c, size_t n) {
    if (c->oom) return false;
    if (c->len + n <= c->cap) return true;
    size_t nc = c->cap ? c->cap * 2 : 4096;
    if (nc < c->len + n) nc = c->len + n;
    uint8_t *nb = realloc(c->buf, nc);
    if (!nb) {
        c->oom = true;
        return false;
    }
    c->buf = nb;
    c->cap = nc;
    return true;
}

/* inline: a field's put is then one store (n is a constant there) */
static inline void put(Codec *c, const void *d, size_t n) {
    if (c->len + n > c->cap && !reserve(c, n)) return;
    memcpy(c->buf + c->len, d, n);
    c->len += n;
}

static bool take(Codec *c, void *d, size_t n) {
    if (c->bad || n > c->inlen - c->pos) {
        if (!c->bad) c->why = "truncated";
        c->bad = true;
        memset(d, 0, n);
        return false;
    }
    memcpy(d, c->in + c->pos, n);
    c->pos += n;
    return true;
}

/* Little-endian on the host: a value's bytes are its file bytes. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_LE 1
#else
#define HOST_LE 0
#endif
static void c_u64(Codec *c, uint64_t *v) {
    uint8_t b[8];
    if (c->reading) {
        take(c, b, 8);
        uint64_t x = 0;
        for (int i = 7; i >= 0; i--) x = x << 8 | b[i];
        *v = x;
    } else if (HOST_LE) {
        put(c, v, 8);
    } else {
        for (int i = 0; i < 8; i++) b[i] = (uint8_t)(*v >> (8 * i));
        put(c, b, 8);
    }
}
static void c_u32(Codec *c, uint32_t *v) {
    uint64_t x = *v;
    if (c->reading) {
        uint8_t b[4];
        take(c, b, 4);
        *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        return;
    }
    if (HOST_LE) {
        put(c, v, 4);
        return;
    }
    uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    put(c, b, 4);
}
static void c_i32(Codec *c, int32_t *v) {
    uint32_t x = (uint32_t)*v;
    c_u32(c, &x);
    *v = (int32_t)x;
}
static void c_i64(Codec *c, int64_t *v) {
    uint64_t x = (uint64_t)*v;
    c_u64(c, &x);
    *v = (int64_t)x;
}
static void c_u8(Codec *c, uint8_t *v) {
    if (c->reading) take(c, v, 1);
    else put(c, v, 1);
}
static void c_f32(Codec *c, float *v) {
    uint32_t x;
    memcpy(&x, v, 4);
    c_u32(c, &x);
    if (c->reading) memcpy(v, &x, 4); /* written values may lie in read-only memory */
}
static void c_f64(Codec *c, double *v) {
    uint64_t x;
    memcpy(&x, v, 8);
    c_u64(c, &x);
    if (c->reading) memcpy(v, &x, 8);
}
static void c_blob(Codec *c, const uint8_t **data, uint64_t *n) {
    c_u64(c, n);
    if (!c->reading) {
        put(c, *data, (size_t)*n);
        return;
    }
    if (c->bad) return;
    if (*n > c->inlen - c->pos) {
        c->bad = true;
        c->why = "a length runs past the section";
        *data = NULL;
        *n = 0;
        return;
    }
    uint8_t *d = arena_alloc(c->arena, (size_t)*n + 1);
    if (!d) {
        c->bad = true;
        c->why = "out of memory";
        return;
    }
    memcpy(d, c->in + c->pos, (size_t)*n);
    c->pos += (size_t)*n;
    *data = d;
}
static void c_str(Codec *c, const char **s) {
    uint64_t n = c->reading ? 0 : strlen(*s ? *s : "");
    const uint8_t *d = (const uint8_t *)(*s ? *s : "");
    c_blob(c, &d, &n);
    if (c->reading) {
        if (c->bad) {
            *s = "";
            return;
        }
        if (memchr(d, 0, (size_t)n)) {
            c->bad = true;
            c->why = "a name contains a NUL byte";
        }
        *s = (const char *)d; /* arena_alloc zeroed the terminator */
    }
}
/* An array count: on read, at least min_bytes per element must remain, so a
 * forged count cannot make the reader allocate more than the file holds. */
static bool c_count(Codec *c, uint32_t *n, size_t min_bytes, void **arr, size_t elem) {
    c_u32(c, n);
    if (!c->reading) return reserve(c, (size_t)*n * min_bytes);
    if (c->bad) return false;
    if ((uint64_t)*n * min_bytes > c->inlen - c->pos) {
        c->bad = true;
        c->why = "a count exceeds what the section holds";
        *n = 0;
        return false;
    }
    *arr = *n ? arena_alloc(c->arena, elem * *n) : NULL;
    if (*n && !*arr) {
        c->bad = true;
        c->why = "out of memory";
        return false;
    }
    return true;
}

/* ---- sections ---- */

static void sec_meta(Codec *c, Plan *p) {
    c_str(c, &p->model_name);
    c_str(c, &p->source);
    c_i32(c, &p->ranks);
    c_i32(c, &p->loss);
    c_i32(c, &p->ninputs);
    for (int i = 0; i < 4; i++) c_i32(c, &p->inputs[i]);
    c_u32(c, &p->opt_begin);
    if (c->version >= 6) {
        c_u32(c, &p->redo_begin);
        c_u32(c, &p->redo_end);
    } else if (c->reading) {
        p->redo_begin = p->redo_end = p->opt_begin; /* before the speculative optimizer */
    }
}

/* The measured figures (zinfprobe) follow the version-3 fields as a count
 * and that many f64s, so that version-3 plans written before them still
 * read (nothing follows: all 0, the cost model as before) and a later build
 * may append figures an older one skips. The timed kernel calls follow as
 * a count and that many (family, flops, seconds), then the timed NVMe
 * transfers as a count and that many (write, bytes, drive, alone); a plan
 * that ends before either has none. */
enum { FAM_V6 = 4, TARGET_NMEASURED = 3 + FAM_V6 + 1 + (PLAN_NFAMILIES - FAM_V6) + 6, TARGET_MAX_MEASURED = 64 };

/* An appended list's count: false where the section ends before it (a plan
 * from before the list: nothing read, nothing written) or, reading, where
 * the count is over max or more entries of `each` bytes than are left
 * (c->bad set). */
static bool list_count(Codec *c, uint32_t *n, uint32_t max, uint64_t each) {
    if (c->reading && !c->bad && c->pos == c->inlen) return false;
    c_u32(c, n);
    if (c->reading && !c->bad && (*n > max || (uint64_t)*n * each > c->inlen - c->pos)) {
        c->bad = true;
        c->why = "a count exceeds what the section holds";
    }
    return !c->bad;
}

static void target_measured(Codec *c, PlanTarget *t) {
    double *f[TARGET_NMEASURED] = {&t->nvme_latency, &t->pcie_latency, &t->kernel_latency};
    int k = 3;
    for (int i = 0; i < FAM_V6; i++) f[k++] = &t->eff[i];
    f[k++] = &t->wake_latency; /* appended later: a plan that stops before them reads 0 */
    for (int i = FAM_V6; i < PLAN_NFAMILIES; i++) f[k++] = &t->eff[i];
    f[k++] = &t->cpu_cache;
    f[k++] = &t->cache_bandwidth;
    f[k++] = &t->nvme_request;
    f[k++] = &t->nvme_cpu;
    f[k++] = &t->adam_bandwidth;
    f[k++] = &t->read_bandwidth;
    uint32_t n = TARGET_NMEASURED;
    if (!list_count(c, &n, TARGET_MAX_MEASURED, 8)) return; /* a plan from before the measured figures */
    for (uint32_t i = 0; i < n && !c->bad; i++) {
        double skip = 0;
        c_f64(c, i < TARGET_NMEASURED ? f[i] : &skip);
    }
    uint32_t np = (uint32_t)t->nkernel_points;
    if (!list_count(c, &np, PLAN_MAX_KERNEL_POINTS, 20)) return; /* a plan from before the timed calls */
    t->nkernel_points = (int32_t)np;
    for (uint32_t i = 0; i < np && !c->bad; i++) {
        PlanKernelPoint *q = &t->kernel_points[i];
        c_i32(c, &q->family);
        c_f64(c, &q->flops);
        c_f64(c, &q->secs);
        if (c->reading && !c->bad && (q->family < 0 || q->family >= PLAN_NFAMILIES)) {
            c->bad = true;
            c->why = "a timed kernel call of no known family";
        }
    }
    uint32_t nv = (uint32_t)t->nnvme_points;
    if (!list_count(c, &nv, PLAN_MAX_NVME_POINTS, 28)) return; /* a plan from before the timed transfers */
    t->nnvme_points = (int32_t)nv;
    for (uint32_t i = 0; i < nv && !c->bad; i++) {
        PlanNvmePoint *q = &t->nvme_points[i];
        c_i32(c, &q->write);
        c_f64(c, &q->bytes);
        c_f64(c, &q->drive);
        c_f64(c, &q->alone);
        if (c->reading && !c->bad && q->write != 0 && q->write != 1) {
            c->bad = true;
            c->why = "a timed transfer neither read nor write";
        }
    }
}

static void sec_target(Codec *c, Plan *p) {
    PlanTarget *t = &p->target;
    c_str(c, &t->name);
    c_str(c, &t->backend);
    c_i32(c, &t->nodes);
    c_i32(c, &t->gpus_per_node);
    c_u64(c, &t->gpu_memory);
    c_f64(c, &t->gpu_flops);
    c_f64(c, &t->gpu_hbm);
    c_f64(c, &t->gpu_pcie);
    c_str(c, &t->gpu_arch);
    c_i32(c, &t->gpu_sms);
    c_u64(c, &t->cpu_memory);
    c_f64(c, &t->cpu_bandwidth);
    c_i32(c, &t->cpu_cores);
    uint32_t np = (uint32_t)t->nvme_npaths;
    void *arr = (void *)t->nvme_paths;
    c_count(c, &np, 8, &arr, sizeof(char *));
    t->nvme_paths = arr;
    t->nvme_npaths = (int32_t)np;
    for (uint32_t i = 0; i < np && !c->bad; i++) c_str(c, &t->nvme_paths[i]);
    c_f64(c, &t->nvme_read);
    c_f64(c, &t->nvme_write);
    c_u64(c, &t->nvme_capacity);
    c_f64(c, &t->net_bandwidth);
    c_f64(c, &t->net_inter);
    c_f64(c, &t->net_latency);
    target_measured(c, t);
}

static void sec_train(Codec *c, Plan *p) {
    PlanTrain *t = &p->train;
    c_i64(c, &t->micro_batch);
    c_i64(c, &t->steps);
    c_i64(c, &t->warmup_steps);
    c_i64(c, &t->checkpoint_every);
    c_i64(c, &t->grad_accum);
    c_u64(c, &t->seed);
    c_u8(c, &t->dtype);
    c_u8(c, &t->schedule);
    c_f64(c, &t->lr);
    c_f64(c, &t->beta1);
    c_f64(c, &t->beta2);
    c_f64(c, &t->eps);
    c_f64(c, &t->weight_decay);
    c_f64(c, &t->min_lr);
    c_f64(c, &t->grad_clip);
    c_f64(c, &t->loss_scale);
}

static void sec_tensors(Codec *c, Plan *p) {
    void *arr = p->tensors;
    if (!c_count(c, &p->ntensors, 8 + 4 + 8 + 8 + 7 * 4, &arr, sizeof(PlanTensor))) return;
    p->tensors = arr;
    for (uint32_t i = 0; i < p->ntensors && !c->bad; i++) {
        PlanTensor *t = &p->tensors[i];
        c_str(c, &t->name);
        c_u8(c, &t->dtype);
        c_u8(c, &t->cls);
        c_u8(c, &t->init);
        c_u8(c, &t->rank);
        if (c->reading && t->rank > PLAN_MAX_RANK) {
            c->bad = true;
            c->why = "a tensor's rank exceeds 6";
            return;
        }
        for (int d = 0; d < t->rank; d++) c_i64(c, &t->dims[d]);
        c_i64(c, &t->numel);
        c_f64(c, &t->init_std);
        c_i32(c, &t->param);
        c_i32(c, &t->grad);
        c_i32(c, &t->master);
        c_i32(c, &t->momentum);
        c_i32(c, &t->variance);
        c_i32(c, &t->segment);
        c_i32(c, &t->shard);
    }
}

static void sec_ops(Codec *c, Plan *p) {
    void *arr = p->ops;
    size_t rec = 4 + 8 * (PLAN_MAX_IATTR + (c->version >= PLAN_VERSION_TABLES ? PLAN_MAX_FATTR : 6)) + 12 + 8 + (c->version >= PLAN_VERSION_TABLES ? 4 : 0);
    if (!c_count(c, &p->nops, rec, &arr, sizeof(PlanOp))) return;
    p->ops = arr;
    for (uint32_t i = 0; i < p->nops && !c->bad; i++) {
        PlanOp *o = &p->ops[i];
        c_u8(c, &o->kind);
        c_u8(c, &o->prim);
        c_u8(c, &o->nin);
        c_u8(c, &o->nout);
        if (c->reading && (o->nin > PLAN_MAX_IN || o->nout > PLAN_MAX_OUT)) {
            c->bad = true;
            c->why = "an op has too many operands";
            return;
        }
        for (int k = 0; k < o->nin; k++) c_i32(c, &o->in[k]);
        for (int k = 0; k < o->nout; k++) c_i32(c, &o->out[k]);
        for (int k = o->nin; c->reading && k < PLAN_MAX_IN; k++) o->in[k] = -1;
        for (int k = o->nout; c->reading && k < PLAN_MAX_OUT; k++) o->out[k] = -1;
        for (int k = 0; k < PLAN_MAX_IATTR; k++) c_i64(c, &o->iattr[k]);
        /* version 8: eight float attributes (six before) and the list attributes */
        for (int k = 0; k < (c->version >= PLAN_VERSION_TABLES ? PLAN_MAX_FATTR : 6); k++) c_f64(c, &o->fattr[k]);
        c_i32(c, &o->segment);
        c_i32(c, &o->fwd);
        c_i32(c, &o->nfin);
        c_str(c, &o->scope);
        if (c->version >= PLAN_VERSION_TABLES) {
            void *tab = (void *)o->table;
            if (!c_count(c, &o->ntable, 8, &tab, sizeof(double))) return;
            if (c->reading && o->ntable > PLAN_MAX_TABLE) {
                c->bad = true;
                c->why = "an op's list attributes are too long";
                return;
            }
            for (uint32_t k = 0; k < o->ntable && !c->bad; k++) c_f64(c, (double *)tab + k);
            o->table = tab;
        }
    }
}

static void sec_shards(Codec *c, Plan *p) {
    void *arr = p->shards;
    if (!c_count(c, &p->nshards, 4 + 2 + 4 + 8 * 3 + 4, &arr, sizeof(PlanShard))) return;
    p->shards = arr;
    for (uint32_t i = 0; i < p->nshards && !c->bad; i++) {
        PlanShard *s = &p->shards[i];
        c_i32(c, &s->tensor);
        c_u8(c, &s->home);
        c_u8(c, &s->partitioned);
        c_i32(c, &s->ntiles);
        c_i64(c, &s->tile_elems);
        c_i64(c, &s->tile_shard);
        c_u64(c, &s->bytes);
        c_i32(c, &s->buffer);
    }
}

static void sec_arenas(Codec *c, Plan *p) {
    for (int i = 0; i < PLAN_NARENAS; i++) {
        PlanArena *a = &p->arenas[i];
        c_u8(c, &a->kind);
        c_u64(c, &a->capacity);
        c_u64(c, &a->size);
        c_u64(c, &a->align);
    }
}

static void sec_buffers(Codec *c, Plan *p) {
    void *arr = p->buffers;
    if (!c_count(c, &p->nbuffers, 8 + 2 + 4 + 16, &arr, sizeof(PlanBuffer))) return;
    p->buffers = arr;
    for (uint32_t i = 0; i < p->nbuffers && !c->bad; i++) {
        PlanBuffer *b = &p->buffers[i];
        c_str(c, &b->name);
        c_u8(c, &b->arena);
        c_u8(c, &b->flags);
        c_i32(c, &b->tensor);
        c_u64(c, &b->offset);
        c_u64(c, &b->bytes);
    }
}

/* The three big tables' records, field by field (type, member): the codec
 * below, the packed form's layouts (sections[]) and its columns written
 * straight from the plan (write_columns) all read these lists. */
#define OPERAND_FIELDS(F) F(i32, buffer) F(u8, mode) F(u64, offset) F(u64, bytes)
#define INSTR_FIELDS(F)                                                                                        \
    F(u8, op) F(u8, queue) F(i32, arg) F(i32, tile) F(i32, ntiles) F(u32, opnd) F(u32, nopnd) F(u32, dep) \
    F(u32, ndeps) F(f64, flops) F(u64, bytes)
enum { W_u8 = 1, W_i32 = 4, W_u32 = 4, W_u64 = 8, W_f64 = 8 };
#define FIELD_WIDTH(t, m) W_##t,
#define FIELD_BYTES(t, m) +W_##t
#define FIELD_COUNT(t, m) +1

#define FIELD_CODEC(t, m) c_##t(c, &r->m);
static void sec_operands(Codec *c, Plan *p) {
    void *arr = p->operands;
    if (!c_count(c, &p->noperands, 0 OPERAND_FIELDS(FIELD_BYTES), &arr, sizeof(PlanOperand))) return;
    p->operands = arr;
    for (uint32_t i = 0; i < p->noperands && !c->bad; i++) {
        PlanOperand *r = &p->operands[i];
        OPERAND_FIELDS(FIELD_CODEC)
    }
}

static void sec_schedule(Codec *c, Plan *p) {
    void *arr = p->instrs;
    if (!c_count(c, &p->ninstrs, 0 INSTR_FIELDS(FIELD_BYTES), &arr, sizeof(PlanInstr))) return;
    p->instrs = arr;
    for (uint32_t i = 0; i < p->ninstrs && !c->bad; i++) {
        PlanInstr *r = &p->instrs[i];
        INSTR_FIELDS(FIELD_CODEC)
    }
}
#undef FIELD_CODEC

static void sec_deps(Codec *c, Plan *p) {
    void *arr = p->deps;
    if (!c_count(c, &p->ndeps, 4, &arr, sizeof(uint32_t))) return;
    p->deps = arr;
    for (uint32_t i = 0; i < p->ndeps && !c->bad; i++) c_u32(c, &p->deps[i]);
}

static void sec_kernels(Codec *c, Plan *p) {
    void *arr = p->kernels;
    if (!c_count(c, &p->nkernels, 32, &arr, sizeof(PlanKernel))) return;
    p->kernels = arr;
    for (uint32_t i = 0; i < p->nkernels && !c->bad; i++) {
        PlanKernel *k = &p->kernels[i];
        c_str(c, &k->name);
        c_str(c, &k->arch);
        c_str(c, &k->resources);
        c_blob(c, &k->data, &k->size);
    }
}

/* CUDA launches, in order; then the utility launch table. */
static void sec_launches(Codec *c, Plan *p) {
    void *arr = p->launches;
    if (!c_count(c, &p->nlaunches, 8 + 8 + 7 * 4 + 4 + 8, &arr, sizeof(PlanLaunch))) return;
    p->launches = arr;
    for (uint32_t i = 0; i < p->nlaunches && !c->bad; i++) {
        PlanLaunch *l = &p->launches[i];
        c_str(c, &l->unit);
        c_str(c, &l->entry);
        for (int k = 0; k < 3; k++) c_u32(c, &l->grid[k]);
        for (int k = 0; k < 3; k++) c_u32(c, &l->block[k]);
        c_u32(c, &l->smem);
        c_i32(c, &l->op);
        c_u32(c, &l->arg);
        c_u32(c, &l->nargs);
    }
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++) c_i32(c, &p->util[u][t]);
}

static void sec_launch_args(Codec *c, Plan *p) {
    void *arr = p->launch_args;
    if (!c_count(c, &p->nlaunch_args, 2 + 4 + 8 + 4, &arr, sizeof(PlanLaunchArg))) return;
    p->launch_args = arr;
    for (uint32_t i = 0; i < p->nlaunch_args && !c->bad; i++) {
        PlanLaunchArg *a = &p->launch_args[i];
        c_u8(c, &a->kind);
        c_u8(c, &a->rt);
        c_i32(c, &a->tensor);
        c_i64(c, &a->i);
        c_f32(c, &a->f);
    }
}

/* Per op: its launches and workspace. The count is 0 (no GPU code, op_code
 * NULL) or the plan's op count; the ops section comes first, so it is known. */
static void sec_op_code(Codec *c, Plan *p) {
    uint32_t n = p->op_code ? p->nops : 0;
    void *arr = p->op_code;
    if (!c_count(c, &n, 4 + 4 + 8 + 8 + 8, &arr, sizeof(PlanOpCode))) return;
    if (c->reading && n != 0 && n != p->nops) {
        c->bad = true;
        c->why = "the op code count is neither 0 nor the op count";
        return;
    }
    p->op_code = arr;
    for (uint32_t i = 0; i < n && !c->bad; i++) {
        PlanOpCode *o = &p->op_code[i];
        c_u32(c, &o->first);
        c_u32(c, &o->count);
        c_i64(c, &o->ws_bytes);
        c_i64(c, &o->err_off);
        c_str(c, &o->err_what);
    }
}

/* The launches of each tile of a tiled KERNEL instruction, sorted by op,
 * then tile (empty in a plan without GPU code or without tiling). */
static void sec_tile_code(Codec *c, Plan *p) {
    void *arr = p->tile_code;
    if (!c_count(c, &p->ntile_code, 3 * 4 + 2 * 4 + 8, &arr, sizeof(PlanTileCode))) return;
    p->tile_code = arr;
    for (uint32_t i = 0; i < p->ntile_code && !c->bad; i++) {
        PlanTileCode *t = &p->tile_code[i];
        c_i32(c, &t->op);
        c_i32(c, &t->tile);
        c_i32(c, &t->ntiles);
        c_u32(c, &t->first);
        c_u32(c, &t->count);
        c_i64(c, &t->ws_bytes);
    }
}

/* The Hugging Face mapping: architecture, config.json, pieces. */
static void sec_hf(Codec *c, Plan *p) {
    c_str(c, &p->hf.arch);
    c_str(c, &p->hf.config);
    void *arr = p->hf.pieces;
    if (!c_count(c, &p->hf.npieces, 4 + 8 + 1 + 8 + 8 + (c->version >= 7 ? 1 + 4 : 0) + (c->version >= 9 ? 1 : 0), &arr,
                 sizeof(PlanHfPiece)))
        return;
    p->hf.pieces = arr;
    for (uint32_t i = 0; i < p->hf.npieces && !c->bad; i++) {
        PlanHfPiece *h = &p->hf.pieces[i];
        c_i32(c, &h->tensor);
        c_str(c, &h->hf_name);
        c_u8(c, &h->transpose);
        c_i64(c, &h->src_col);
        c_i64(c, &h->cols);
        if (c->version >= 7) { /* stacked pieces */
            c_u8(c, &h->stacked);
            c_i32(c, &h->index);
        } else if (c->reading) {
            h->stacked = 0;
            h->index = 0;
        }
        if (c->version >= 9) c_u8(c, &h->layout); /* PEFT's expert layouts */
        else if (c->reading) h->layout = PLAN_HF_PLAIN;
    }
}

/* Per GEMM launch: the library call that can replace it (version 4). */
static void sec_gemms(Codec *c, Plan *p) {
    void *arr = p->gemms;
    if (!c_count(c, &p->ngemms, 4 + 4 + 4 * 4 + 18 * 8, &arr, sizeof(PlanGemm))) return;
    p->gemms = arr;
    for (uint32_t i = 0; i < p->ngemms && !c->bad; i++) {
        PlanGemm *g = &p->gemms[i];
        c_u32(c, &g->launch);
        c_u8(c, &g->path);
        c_u8(c, &g->why);
        c_u8(c, &g->dtype);
        c_u8(c, &g->flags);
        c_i32(c, &g->c);
        c_i32(c, &g->a);
        c_i32(c, &g->b);
        c_i32(c, &g->bias);
        int64_t *v[] = {&g->off_c,  &g->off_a,    &g->off_b,    &g->m,         &g->n,         &g->k,     &g->lda,
                        &g->ldb,    &g->ldc,      &g->batch,    &g->stride_a,  &g->stride_b,  &g->stride_c,
                        &g->rbatch, &g->rstride_a, &g->rstride_b, &g->ws_off, &g->ws_bytes};
        for (size_t k = 0; k < sizeof v / sizeof *v; k++) c_i64(c, v[k]);
    }
}

/* A big table's packed form is columns (plan_pack.h): each field's values
 * in record order, each minus the record before's modulo its width. These
 * write them straight from the plan, the bytes plan_pack makes of the
 * records the codec writes (tests/unit/test_plan_pack.c compares them),
 * without the raw records in between (a large plan's schedule and operands
 * are over a hundred megabytes each). Each returns its table's record
 * count; with out, the u32 count and the columns are written there. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline void store_le(uint8_t *b, uint64_t v, int n) { memcpy(b, &v, (size_t)n); }
#else
static inline void store_le(uint8_t *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
}
#endif
static inline uint64_t bits_u8(const uint8_t *v) { return *v; }
static inline uint64_t bits_i32(const int32_t *v) { return (uint32_t)*v; }
static inline uint64_t bits_u32(const uint32_t *v) { return *v; }
static inline uint64_t bits_u64(const uint64_t *v) { return *v; }
static inline uint64_t bits_f64(const double *v) {
    uint64_t x;
    memcpy(&x, v, 8);
    return x;
}
/* where each field's column starts: after the count, the columns in field order */
#define COLUMN_START(t, m) col[nf++] = at, at += W_##t * n;
#define FIELD_COLUMN(t, m)                                      \
    {                                                           \
        uint64_t v = bits_##t(&r->m);                           \
        store_le(col[f] + i * W_##t, v - prev[f], W_##t);       \
        prev[f++] = v;                                          \
    }
#define TABLE_COLUMNS(FIELDS, rows, count)                      \
    if (!out) return count;                                     \
    uint64_t n = count, prev[PLAN_PACK_MAX_FIELDS] = {0};       \
    uint8_t *col[PLAN_PACK_MAX_FIELDS], *at = out + 4;          \
    int nf = 0;                                                 \
    FIELDS(COLUMN_START)                                        \
    (void)nf;                                                   \
    store_le(out, n, 4);                                        \
    for (uint64_t i = 0; i < n; i++) {                          \
        const __typeof__(*(rows)) *r = &(rows)[i];              \
        int f = 0;                                              \
        FIELDS(FIELD_COLUMN)                                    \
    }                                                           \
    return count;

static uint32_t columns_operands(const Plan *p, uint8_t *out) { TABLE_COLUMNS(OPERAND_FIELDS, p->operands, p->noperands) }
static uint32_t columns_schedule(const Plan *p, uint8_t *out) { TABLE_COLUMNS(INSTR_FIELDS, p->instrs, p->ninstrs) }
#define DEP_FIELDS(F) F(u32, dep)
static uint32_t columns_deps(const Plan *p, uint8_t *out) {
    typedef struct { uint32_t dep; } Dep; /* a dependency as a one-field record */
    const Dep *deps = (const Dep *)p->deps;
    TABLE_COLUMNS(DEP_FIELDS, deps, p->ndeps)
}
#undef TABLE_COLUMNS
#undef FIELD_COLUMN
#undef COLUMN_START

typedef struct Section {
    const char *name;
    void (*codec)(Codec *, Plan *);
    PlanPackLayout pack;       /* the record of a table section (its fields' widths), for the packed form */
    uint32_t (*columns)(const Plan *, uint8_t *); /* a table's packed columns written directly, or NULL */
} Section;

static const Section sections[] = {
    {"meta", sec_meta, {0}, NULL},       {"target", sec_target, {0}, NULL},     {"train", sec_train, {0}, NULL},
    {"tensors", sec_tensors, {0}, NULL}, {"ops", sec_ops, {0}, NULL},           {"shards", sec_shards, {0}, NULL},
    {"arenas", sec_arenas, {0}, NULL},   {"buffers", sec_buffers, {0}, NULL},
    {"operands", sec_operands, {0 OPERAND_FIELDS(FIELD_COUNT), {OPERAND_FIELDS(FIELD_WIDTH)}}, columns_operands},
    {"schedule", sec_schedule, {0 INSTR_FIELDS(FIELD_COUNT), {INSTR_FIELDS(FIELD_WIDTH)}}, columns_schedule},
    {"deps", sec_deps, {0 DEP_FIELDS(FIELD_COUNT), {DEP_FIELDS(FIELD_WIDTH)}}, columns_deps},
    {"kernels", sec_kernels, {0}, NULL}, {"launches", sec_launches, {0}, NULL}, {"launch_args", sec_launch_args, {0}, NULL},
    {"op_code", sec_op_code, {0}, NULL}, {"tile_code", sec_tile_code, {0}, NULL}, {"hf", sec_hf, {0}, NULL}, {"gemms", sec_gemms, {0}, NULL},
};
/* The format this file writes and reads. Version 2 added the launches,
 * launch_args, op_code and tile_code sections; version 3 six float and six
 * integer attributes per op and the hf section; version 4 the gemms
 * section (a version-3 file is read as one without GEMM descriptors: its
 * GEMMs run their launches); version 5 packed sections (plan_pack.h: a
 * section header's second word is 1 where the payload is packed); version
 * 6 the speculative optimizer's ranges in meta (an older plan has none); version 7
 * stacked hf pieces; version 8 eight float attributes per op and its list
 * attributes (rope's longrope tables; an older plan has six and none); version
 * 9 an hf piece's layout (PEFT's LoRA on the experts); version 10 version
 * 9's records with packed sections as zstd frames (the header's second word
 * 2), 4 to 5 times as fast to write as deflate. A newer
 * plan is refused with the version message, not as a corrupt file. */
enum { SECTION_RAW = 0, SECTION_DEFLATE = PLAN_PACK_DEFLATE, SECTION_ZSTD = PLAN_PACK_ZSTD };
enum { FORMAT_VERSION = PLAN_VERSION_ZSTD }; /* the newest read */

/* Whether a table section packed as columns (operands, schedule, deps) has
 * PLAN_PACK_MIN raw bytes or more: known from the counts alone. */
static bool has_big_table(const Plan *p);

/* The version a plan is written as: 10 when this build has zstd and the
 * plan a big table (its packed sections zstd frames, its records version
 * 9's), else 9 when an hf piece has an expert layout, else 8 when an op
 * uses the last two float attributes or list attributes, else 7 when its
 * hf mapping stacks pieces, else 6, so that a plan without them reads as
 * it did before. (A small plan has no big table and keeps its version:
 * what is packed in it, if anything, is deflated.) */
static uint32_t written_version(const Plan *p) {
    if (plan_pack_has(PLAN_PACK_ZSTD) && has_big_table(p)) return PLAN_VERSION_ZSTD;
    for (uint32_t i = 0; i < p->hf.npieces; i++)
        if (p->hf.pieces[i].layout != PLAN_HF_PLAIN) return PLAN_VERSION_EXPERTS;
    for (uint32_t i = 0; i < p->nops; i++) {
        const PlanOp *o = &p->ops[i];
        if (o->ntable > 0) return PLAN_VERSION_TABLES;
        for (int k = 6; k < PLAN_MAX_FATTR; k++)
            if (o->fattr[k] != 0) return PLAN_VERSION_TABLES;
    }
    for (uint32_t i = 0; i < p->hf.npieces; i++)
        if (p->hf.pieces[i].stacked) return PLAN_VERSION_STACKED;
    return PLAN_VERSION;
}

static bool has_big_table(const Plan *p) {
    return 4 + (uint64_t)p->noperands * (0 OPERAND_FIELDS(FIELD_BYTES)) >= PLAN_PACK_MIN ||
           4 + (uint64_t)p->ninstrs * (0 INSTR_FIELDS(FIELD_BYTES)) >= PLAN_PACK_MIN ||
           4 + (uint64_t)p->ndeps * (0 DEP_FIELDS(FIELD_BYTES)) >= PLAN_PACK_MIN;
}
enum { NSECTIONS = sizeof sections / sizeof sections[0], NSECTIONS_V3 = NSECTIONS - 1, HEADER_BYTES = 24, SECHDR_BYTES = 24 };

static void put_le(uint8_t *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *b, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* One section's payload as written: raw, or packed where a large one
 * packs smaller; oom when out of memory. */
typedef struct SectionOut {
    uint8_t *buf;
    size_t len;
    uint32_t form;
    uint64_t hash;
    bool oom;
} SectionOut;

/* Room for a big table's columns (hundreds of MB for a large plan's
 * operands and schedule): from 32 MiB on a mapping of its own on huge
 * pages where the kernel gives them, a page fault per 2 MiB instead of per
 * 4 KiB; smaller from the heap. */
enum { SCRATCH_MAP_MIN = 32 << 20 };
static uint8_t *scratch_alloc(size_t n) {
    if (n < SCRATCH_MAP_MIN) return malloc(n ? n : 1);
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    (void)madvise(m, n, MADV_HUGEPAGE); /* a refusal leaves 4 KiB pages */
    return m;
}

static void scratch_free(uint8_t *m, size_t n) {
    if (n < SCRATCH_MAP_MIN) free(m);
    else if (m) munmap(m, n);
}

/* Section s packed into *o when its raw payload of len bytes is large and
 * packs smaller; false (*o untouched) when it stays raw. A table with its
 * columns writer is packed from its columns (compressed only: they are the
 * transform already), any other from its raw payload (raw, not NULL). */
static bool pack_section(const Plan *p, int s, const uint8_t *raw, size_t len, PlanPackForm form, SectionOut *o) {
    if (o->oom || len < PLAN_PACK_MIN || !plan_pack_has(form)) return false; /* a build without zlib writes it raw */
    const Section *sec = &sections[s];
    uint8_t *cols = NULL, *pk;
    size_t pklen;
    const char *why;
    if (!raw) {
        if (!(cols = scratch_alloc(len))) return o->oom = true, false;
        sec->columns(p, cols);
    }
    bool ok = raw ? plan_pack(raw, len, &sec->pack, form, &pk, &pklen, &why)
                  : plan_pack(cols, len, &(PlanPackLayout){0}, form, &pk, &pklen, &why);
    if (cols) scratch_free(cols, len);
    if (!ok) return o->oom = true, false;
    if (pklen >= len) {
        free(pk);
        return false;
    }
    o->buf = pk; /* the packed payload replaces the raw one */
    o->len = pklen;
    o->form = form;
    return true;
}

/* Section s of p in a file of version ver: packed (a zstd frame from
 * version 10, else deflated) where that is smaller, else raw. */
static void encode_section(const Plan *p, uint32_t ver, int s, SectionOut *o) {
    const Section *sec = &sections[s];
    PlanPackForm form = ver >= PLAN_VERSION_ZSTD ? PLAN_PACK_ZSTD : PLAN_PACK_DEFLATE;
    bool packed = false;
    if (sec->columns) {
        size_t rec = 0;
        for (int f = 0; f < sec->pack.nfields; f++) rec += sec->pack.width[f];
        packed = pack_section(p, s, NULL, 4 + (size_t)sec->columns(p, NULL) * rec, form, o);
    }
    if (!packed && !o->oom) {
        Codec raw = {.version = ver};
        sec->codec(&raw, (Plan *)p); /* writing only reads *p */
        o->buf = raw.buf;
        o->len = raw.len;
        o->form = SECTION_RAW;
        o->oom = raw.oom;
        /* a table whose columns packed no smaller stays raw */
        if (!sec->columns && pack_section(p, s, raw.buf, raw.len, form, o)) free(raw.buf);
    }
    o->hash = o->oom ? 0 : plan_fnv1a64(o->buf, o->len);
}

bool plan_encode(const Plan *p, uint8_t **out, size_t *len, char *err, size_t errlen) {
    Codec c = {.version = written_version(p)};
    uint8_t hdr[HEADER_BYTES];
    memcpy(hdr, PLAN_MAGIC, 8);
    put_le(hdr + 8, c.version, 4);
    put_le(hdr + 12, NSECTIONS, 4); /* always the newest format */
    put_le(hdr + 16, plan_fnv1a64(hdr, 16), 8);
    put(&c, hdr, sizeof hdr);
    /* the sections are independent: encoded (and the large ones packed)
     * side by side, then written in order */
    SectionOut outs[NSECTIONS];
    memset(outs, 0, sizeof outs);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (int s = 0; s < NSECTIONS; s++) encode_section(p, c.version, s, &outs[s]);
    for (int s = 0; s < NSECTIONS; s++) {
        c.oom |= outs[s].oom;
        uint8_t sh[SECHDR_BYTES];
        put_le(sh, (uint64_t)s, 4);
        put_le(sh + 4, outs[s].form, 4);
        put_le(sh + 8, outs[s].len, 8);
        put_le(sh + 16, outs[s].hash, 8);
        put(&c, sh, sizeof sh);
        if (outs[s].len) put(&c, outs[s].buf, outs[s].len);
        free(outs[s].buf);
    }
    if (c.oom) {
        free(c.buf);
        errorf(err, errlen, "out of memory encoding the plan");
        return false;
    }
    *out = c.buf;
    *len = c.len;
    return true;
}

/* Every index the reader hands on must be in range, so nothing downstream
 * can be made to read out of bounds by a forged file. */
static bool check_indices(const Plan *p, const char *name, char *err, size_t errlen) {
#define BAD(...) do { char m_[200]; snprintf(m_, sizeof m_, __VA_ARGS__); \
        errorf(err, errlen, "%s: %s (file corrupt?)", name, m_); return false; } while (0)
    int64_t nt = p->ntensors;
#define TID(x) ((x) >= -1 && (x) < nt)
#define GEMM_OPERAND(t) ((t) == PLAN_GEMM_OP_WS || ((t) >= 0 && (t) < nt)) /* a tensor or the op's workspace */
    if (p->ranks < 1) BAD("rank count %d", p->ranks);
    if (!TID(p->loss)) BAD("loss tensor %d out of range", p->loss);
    if (p->ninputs < 0 || p->ninputs > 4) BAD("input count %d", p->ninputs);
    for (int i = 0; i < p->ninputs; i++)
        if (!TID(p->inputs[i])) BAD("input tensor %d out of range", p->inputs[i]);
    if (p->opt_begin > p->ninstrs) BAD("optimizer start %u past the schedule", p->opt_begin);
    if (plan_speculative(p) && (p->redo_begin < p->opt_begin || p->redo_end > p->ninstrs))
        BAD("optimizer ranges %u, %u, %u out of order (%u instructions)", p->opt_begin, p->redo_begin, p->redo_end, p->ninstrs);
    for (uint32_t i = 0; i < p->ntensors; i++) {
        const PlanTensor *t = &p->tensors[i];
        if (!TID(t->param) || !TID(t->grad) || !TID(t->master) || !TID(t->momentum) || !TID(t->variance))
            BAD("tensor %u '%s' refers to a tensor out of range", i, t->name);
        if (t->shard < -1 || t->shard >= (int64_t)p->nshards) BAD("tensor %u '%s': shard %d out of range", i, t->name, t->shard);
        if (!plan_dtype_known(t->dtype)) BAD("tensor %u '%s': unknown dtype %u", i, t->name, t->dtype);
        int64_t n = 1;
        for (int d = 0; d < t->rank; d++) {
            if (t->dims[d] < 0 || (t->dims[d] && n > INT64_MAX / 16 / t->dims[d]))
                BAD("tensor %u '%s': bad shape", i, t->name);
            n *= t->dims[d];
        }
        if (n != t->numel) BAD("tensor %u '%s': element count %" PRId64 " does not match its shape", i, t->name, t->numel);
    }
    for (uint32_t i = 0; i < p->nops; i++) {
        const PlanOp *o = &p->ops[i];
        for (int k = 0; k < o->nin; k++) if (!TID(o->in[k])) BAD("op %u: input tensor %d out of range", i, o->in[k]);
        for (int k = 0; k < o->nout; k++) if (!TID(o->out[k])) BAD("op %u: output tensor %d out of range", i, o->out[k]);
        if (o->fwd < -1 || o->fwd >= (int64_t)p->nops) BAD("op %u: forward op %d out of range", i, o->fwd);
        if (o->nfin < 0 || o->nfin > o->nin) BAD("op %u: forward input count %d", i, o->nfin);
    }
    for (uint32_t i = 0; i < p->nshards; i++) {
        const PlanShard *s = &p->shards[i];
        if (s->tensor < 0 || s->tensor >= nt) BAD("shard %u: tensor %d out of range", i, s->tensor);
        if (s->buffer < 0 || s->buffer >= (int64_t)p->nbuffers) BAD("shard %u: buffer %d out of range", i, s->buffer);
        if (s->home >= PLAN_NTIERS) BAD("shard %u: home tier %u", i, s->home);
        if (s->ntiles < 1 || s->tile_elems < 0 || s->tile_shard < 0) BAD("shard %u: bad tiling", i);
    }
    for (int i = 0; i < PLAN_NARENAS; i++)
        if (p->arenas[i].kind != i || p->arenas[i].align == 0) BAD("arena %d malformed", i);
    for (uint32_t i = 0; i < p->nbuffers; i++) {
        const PlanBuffer *b = &p->buffers[i];
        if (b->arena >= PLAN_NARENAS) BAD("buffer %u '%s': arena %u out of range", i, b->name, b->arena);
        if (!TID(b->tensor)) BAD("buffer %u '%s': tensor %d out of range", i, b->name, b->tensor);
        if (b->offset > UINT64_MAX - b->bytes) BAD("buffer %u '%s': offset overflows", i, b->name);
    }
    for (uint32_t i = 0; i < p->noperands; i++) {
        const PlanOperand *o = &p->operands[i];
        if (o->buffer < -1 || o->buffer >= (int64_t)p->nbuffers) BAD("operand %u: buffer %d out of range", i, o->buffer);
        if (o->mode < PLAN_R || o->mode > PLAN_M) BAD("operand %u: access mode %u", i, o->mode);
        if (o->offset > UINT64_MAX - o->bytes) BAD("operand %u: range overflows", i);
    }
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op >= PI_COUNT) BAD("instruction %u: unknown opcode %u", i, s->op);
        if (s->queue >= PLAN_NQUEUES) BAD("instruction %u: queue %u out of range", i, s->queue);
        if ((uint64_t)s->opnd + s->nopnd > p->noperands) BAD("instruction %u: operands out of range", i);
        if ((uint64_t)s->dep + s->ndeps > p->ndeps) BAD("instruction %u: dependencies out of range", i);
        if (s->op == PI_KERNEL && (s->arg < 0 || s->arg >= (int64_t)p->nops)) BAD("instruction %u: op %d out of range", i, s->arg);
        if (s->ntiles < 1 || s->tile < 0 || s->tile >= s->ntiles) BAD("instruction %u: tile %d of %d", i, s->tile, s->ntiles);
    }
    for (uint32_t i = 0; i < p->ndeps; i++)
        if (p->deps[i] >= p->ninstrs) BAD("dependency %u: instruction %u out of range", i, p->deps[i]);
    for (uint32_t i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        if (l->op < -1 || l->op >= (int64_t)p->nops) BAD("launch %u: op %d out of range", i, l->op);
        if ((uint64_t)l->arg + l->nargs > p->nlaunch_args) BAD("launch %u: arguments out of range", i);
    }
    for (uint32_t i = 0; i < p->nlaunch_args; i++) {
        const PlanLaunchArg *a = &p->launch_args[i];
        if (a->kind >= PLAN_NARGKINDS) BAD("launch argument %u: unknown kind %u", i, a->kind);
        if (a->rt >= PLAN_NRT) BAD("launch argument %u: run-time value %u out of range", i, a->rt);
        if (!TID(a->tensor)) BAD("launch argument %u: tensor %d out of range", i, a->tensor);
    }
    for (uint32_t i = 0; p->op_code && i < p->nops; i++)
        if ((uint64_t)p->op_code[i].first + p->op_code[i].count > p->nlaunches) BAD("op %u: launches out of range", i);
    for (uint32_t i = 0; i < p->ntile_code; i++) {
        const PlanTileCode *t = &p->tile_code[i];
        if (t->op < 0 || t->op >= (int64_t)p->nops) BAD("tile code %u: op %d out of range", i, t->op);
        if (t->ntiles < 2 || t->tile < 0 || t->tile >= t->ntiles) BAD("tile code %u: tile %d of %d", i, t->tile, t->ntiles);
        if ((uint64_t)t->first + t->count > p->nlaunches) BAD("tile code %u: launches out of range", i);
        if (t->ws_bytes < 0) BAD("tile code %u: workspace of %" PRId64 " bytes", i, t->ws_bytes);
    }
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++)
            if (p->util[u][t] < -1 || p->util[u][t] >= (int64_t)p->nlaunches)
                BAD("utility launch %d for dtype %d: launch %d out of range", u, t, p->util[u][t]);
    for (uint32_t i = 0; i < p->ngemms; i++) {
        const PlanGemm *g = &p->gemms[i];
        if (g->launch >= p->nlaunches) BAD("gemm %u: launch %u out of range", i, g->launch);
        if (i > 0 && g->launch <= p->gemms[i - 1].launch) BAD("gemm %u: launch %u not after the previous gemm's", i, g->launch);
        if (g->path >= PLAN_NGEMM_PATHS || g->why >= PLAN_NGEMM_WHYS) BAD("gemm %u: path %u, reason %u", i, g->path, g->why);
        if (!plan_dtype_size(g->dtype) || g->flags > (PLAN_GEMM_TA | PLAN_GEMM_TB | PLAN_GEMM_ACCUM))
            BAD("gemm %u: dtype %u, flags %u", i, g->dtype, g->flags);
        if (!GEMM_OPERAND(g->c) || !GEMM_OPERAND(g->a) || !GEMM_OPERAND(g->b) || !TID(g->bias))
            BAD("gemm %u: tensor out of range", i);
        int64_t nonneg[] = {g->off_c, g->off_a, g->off_b, g->m, g->n, g->k, g->stride_a, g->stride_b, g->stride_c,
                            g->rstride_a, g->rstride_b, g->ws_off, g->ws_bytes};
        for (size_t k = 0; k < sizeof nonneg / sizeof *nonneg; k++)
            if (nonneg[k] < 0 || nonneg[k] > INT64_MAX / 16) BAD("gemm %u: size or offset %" PRId64 " out of range", i, nonneg[k]);
        int64_t pos[] = {g->lda, g->ldb, g->ldc, g->batch, g->rbatch};
        for (size_t k = 0; k < sizeof pos / sizeof *pos; k++)
            if (pos[k] < 1 || pos[k] > INT64_MAX / 16) BAD("gemm %u: leading dim or batch %" PRId64 " out of range", i, pos[k]);
    }
    for (uint32_t i = 0; i < p->hf.npieces; i++)
        if (p->hf.pieces[i].tensor < 0 || p->hf.pieces[i].tensor >= nt) BAD("hf piece %u: tensor %d out of range", i, p->hf.pieces[i].tensor);
    return true;
#undef TID
#undef GEMM_OPERAND
#undef BAD
}

Plan *plan_decode(const uint8_t *buf, size_t len, const char *name, char *err, size_t errlen) {
    if (len < HEADER_BYTES || memcmp(buf, PLAN_MAGIC, 8) != 0) {
        errorf(err, errlen, "%s: not a zinf plan (bad magic)", name);
        return NULL;
    }
    uint32_t ver = (uint32_t)get_le(buf + 8, 4), nsec = (uint32_t)get_le(buf + 12, 4);
    if (get_le(buf + 16, 8) != plan_fnv1a64(buf, 16)) {
        errorf(err, errlen, "%s: header checksum mismatch (file corrupt?)", name);
        return NULL;
    }
    if (ver < PLAN_VERSION_OLDEST || ver > FORMAT_VERSION) {
        errorf(err, errlen, "%s: plan format version %u, this build reads versions %d to %d (recompile the model)", name, ver,
               PLAN_VERSION_OLDEST, FORMAT_VERSION);
        return NULL;
    }
    int nsections = ver == 3 ? NSECTIONS_V3 : NSECTIONS;
    if (nsec != (uint32_t)nsections) {
        /* fewer: a version-2 plan from before the tile_code section */
        errorf(err, errlen, "%s: %u sections, expected %d (%s)", name, nsec, nsections,
               nsec < (uint32_t)nsections ? "written by an older build? recompile the model" : "file corrupt?");
        return NULL;
    }
    Plan *p = plan_new();
    if (!p) {
        errorf(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    p->version = ver;
    size_t pos = HEADER_BYTES;
    for (int s = 0; s < nsections; s++) {
        if (len - pos < SECHDR_BYTES) {
            errorf(err, errlen, "%s: truncated before section '%s'", name, sections[s].name);
            goto fail;
        }
        uint32_t id = (uint32_t)get_le(buf + pos, 4), pad = (uint32_t)get_le(buf + pos + 4, 4);
        uint64_t plen = get_le(buf + pos + 8, 8), sum = get_le(buf + pos + 16, 8);
        if (id != (uint32_t)s || pad > (ver >= PLAN_VERSION_ZSTD ? SECTION_ZSTD : ver >= 5 ? SECTION_DEFLATE : SECTION_RAW)) {
            errorf(err, errlen, "%s: expected section '%s', found id %u (file corrupt?)", name, sections[s].name, id);
            goto fail;
        }
        pos += SECHDR_BYTES;
        if (plen > len - pos) {
            errorf(err, errlen, "%s: section '%s' runs past the end of the file (truncated?)", name, sections[s].name);
            goto fail;
        }
        if (plan_fnv1a64(buf + pos, (size_t)plen) != sum) {
            errorf(err, errlen, "%s: section '%s' checksum mismatch (file corrupt?)", name, sections[s].name);
            goto fail;
        }
        uint8_t *raw = NULL;
        size_t rawlen = (size_t)plen;
        const char *why = NULL;
        if (pad != SECTION_RAW && !plan_unpack(buf + pos, (size_t)plen, &sections[s].pack, (PlanPackForm)pad, &raw, &rawlen, &why)) {
            errorf(err, errlen, "%s: section '%s' malformed: %s", name, sections[s].name, why);
            goto fail;
        }
        Codec c = {.reading = true, .version = ver, .in = raw ? raw : buf + pos, .inlen = rawlen, .arena = &p->arena};
        sections[s].codec(&c, p);
        free(raw);
        if (c.bad || c.pos != c.inlen) {
            errorf(err, errlen, "%s: section '%s' malformed: %s", name, sections[s].name,
                   c.bad ? c.why : "trailing bytes");
            goto fail;
        }
        pos += (size_t)plen;
    }
    if (pos != len) {
        errorf(err, errlen, "%s: %zu bytes after the last section (file corrupt?)", name, len - pos);
        goto fail;
    }
    if (!check_indices(p, name, err, errlen)) goto fail;
    return p;
fail:
    plan_free(p);
    return NULL;
}

bool plan_write(const Plan *p, const char *path, char *err, size_t errlen) {
    uint8_t *buf;
    size_t len;
    if (!plan_encode(p, &buf, &len, err, errlen)) return false;
    bool ok = plan_write_bytes(buf, len, path, err, errlen);
    free(buf);
    return ok;
}

bool plan_write_bytes(const uint8_t *buf, size_t len, const char *path, char *err, size_t errlen) {
    /* Write beside the destination and rename: a crash never leaves half a plan. */
    size_t pl = strlen(path) + 8;
    char *tmp = malloc(pl);
    if (!tmp) {
        errorf(err, errlen, "%s: out of memory", path);
        return false;
    }
    snprintf(tmp, pl, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(buf, 1, len, f) == len;
    int e = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        errorf(err, errlen, "%s: cannot write: %s", path, strerror(e));
        remove(tmp);
    }
    free(tmp);
    return ok;
}

Plan *plan_read(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        errorf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t nc = cap ? cap * 2 : 1 << 16;
            uint8_t *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                fclose(f);
                errorf(err, errlen, "%s: out of memory", path);
                return NULL;
            }
            buf = nb;
            cap = nc;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    bool rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(buf);
        errorf(err, errlen, "%s: read error", path);
        return NULL;
    }
    Plan *p = plan_decode(buf, len, path, err, errlen);
    free(buf);
    return p;
}

/* This machine as a file name's part: the probe's version, the CPU model
 * (/proc/cpuinfo's "model name", [A-Za-z0-9_-] kept, runs of others one
 * '_'), the cores and the memory in GiB:
 * "v2-Intel_R_Xeon_R_Platinum_8481C-2c-31g". A machine with another CPU,
 * more cores or more memory has another key, so its figures are measured
 * again; so has a probe of another version (v2: OpenBLAS on the processor's
 * kernels where it had fallen back to Prescott's, runtime/hostk/blas_core.h,
 * so that a v1 probe's GEMM rate is too slow). */
static void machine_key(char *key, size_t n) {
    char model[128] = "cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        size_t k = 0;
        bool sep = false;
        for (const char *c = colon + 1; *c && k + 2 < sizeof model; c++) {
            bool keep = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-';
            if (keep) {
                if (sep && k) model[k++] = '_';
                model[k++] = *c;
                sep = false;
            } else {
                sep = true;
            }
        }
        model[k] = 0;
        if (!k) snprintf(model, sizeof model, "cpu");
        break;
    }
    if (f) fclose(f);
    long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t gib = pages > 0 && psize > 0 ? ((uint64_t)pages * (uint64_t)psize + (1u << 29)) >> 30 : 0;
    snprintf(key, n, "v2-%s-%ldc-%" PRIu64 "g", model, cores > 0 ? cores : 1, gib);
}

bool plan_probe_path(const char *chosen, char *buf, size_t n) {
    if (chosen) return *chosen && strcmp(chosen, "none") && (size_t)snprintf(buf, n, "%s", chosen) < n;
    char key[192];
    machine_key(key, sizeof key);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int k;
    if (xdg && *xdg) k = snprintf(buf, n, "%s/zinf/probe-%s.zl", xdg, key);
    else if (home && *home) k = snprintf(buf, n, "%s/.cache/zinf/probe-%s.zl", home, key);
    else return false;
    return k > 0 && (size_t)k < n;
}
