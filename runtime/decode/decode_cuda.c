/* decode_cuda: the GPU step back end of the KV-cache decoder
 * (decode_impl.h). Rank 0's GPU (the one its executor uses, through the
 * same primary context) holds everything a step reads in one allocation,
 * carved: the parameters whole, every constant, one row of every
 * activation, per attention op its f32 key and value caches [T, kv_dim],
 * the attention scores [heads, T] and the error words. The kernels are the
 * plan's decode unit (stdlib/kernels/decode.cu and the training kernels it
 * calls, put in the kernel table by zinfc with the entries of the model's
 * storage dtypes), found by name:
 * zkd_<kernel>_<storage dtype>. A step is its
 * launches on one stream and one copy of the logits back: a mixture of
 * experts' ids stay on the device, read there by the expert products. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cudrv.h"
#include "decode_impl.h"
#include "half.h"
#include "hostk.h"

/* The unit's kernels (compiler/cuda_gen_decode.c's entries, in its order); the
 * mixture-of-experts ones last, from KD_MOE_TOPK: a dense model's unit has none. */
enum {
    KD_EMBED, KD_LINEAR, KD_BINARY, KD_LAYERNORM, KD_RMSNORM, KD_GELU, KD_SILU, KD_SCALE, KD_SOFTCAP, KD_COLUMNS, KD_ROPE, KD_KV_APPEND,
    KD_ATTEND, KD_MOE_TOPK, KD_MOE_GATE, KD_MOE_EXPERT, KD_MOE_COMBINE, KD_MOE_SGATE, KD_N
};
static const char *const kd_names[KD_N] = {"embed",     "linear",   "binary",   "layernorm",  "rmsnorm",     "gelu",
                                           "silu",      "scale",    "softcap",  "columns",    "rope",        "kv_append",
                                           "attend",    "moe_topk", "moe_gate", "moe_expert", "moe_combine", "moe_shared_gate"};
enum { NSTORAGE = 3, ALIGN = 256, BLOCK = 256 };
/* The error words, int[3] each ({1, value, where}, first writer wins) in
 * the ALIGN bytes at errw: the embedding's id, then the experts' (an id
 * outside [0, E) in moe_gate or moe_expert). */
enum { ERR_EMBED = 0, ERR_MOE = 16 };
static const char *const storage_names[NSTORAGE] = {"f32", "bf16", "f16"};
static const char unit_prefix[] = "decode-";

typedef struct KvCuda {
    CudaDrv drv;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUstream s;
    CUfunction fn[KD_N][NSTORAGE], set;
    char name[128], arch[16];
    CUdeviceptr base;          /* the one allocation */
    uint64_t *off;             /* per tensor: its view's offset in it, UINT64_MAX: none */
    uint64_t *kc, *vc;         /* per op: its key and value caches' offsets (attention), else 0 */
    uint64_t *tab;             /* per op: its list attributes' offset (longrope's short and long lists, fp64), else 0 */
    uint64_t scores, errw, total;
    uint64_t param_bytes, cache_bytes;
    void *staging;             /* one parameter, gathered whole */
    void *lg;                  /* the logits as the device stores them */
} KvCuda;

static KvCuda *X_(const KvDecoder *d) { return d->state; }

static int storage_of(int dtype) { return dtype == DT_F32 ? 0 : dtype == DT_BF16 ? 1 : dtype == DT_F16 ? 2 : -1; }

static uint64_t align_up(uint64_t v) { return (v + ALIGN - 1) / ALIGN * ALIGN; }

static const PlanTensor *T_(const KvDecoder *d, int t) { return &d->p->tensors[t]; }

/* The plan's decode unit for arch (NULL: any arch), or -1. zinfc names a
 * unit "<family>-<hash12>.cu" (kernels_unit_name); the entry names are
 * compiler/cuda_gen_decode.c's. */
static int decode_kernel(const Plan *p, const char *arch) {
    for (uint32_t k = 0; k < p->nkernels; k++)
        if (p->kernels[k].name && !strncmp(p->kernels[k].name, unit_prefix, sizeof unit_prefix - 1) &&
            (!arch || (p->kernels[k].arch && !strcmp(p->kernels[k].arch, arch))))
            return (int)k;
    return -1;
}

/* ---- what the kernels take (every rank, from the plan) ---- */

/* Whether the small view's dims are a suffix of the big view's. */
static bool suffix_of(const KvDecoder *d, int small, int big) {
    int64_t ds[PLAN_MAX_RANK], db[PLAN_MAX_RANK];
    kvdec_view_dims(d, small, ds);
    kvdec_view_dims(d, big, db);
    int rs = T_(d, small)->rank, rb = T_(d, big)->rank;
    if (rs > rb) return false;
    for (int i = 0; i < rs; i++)
        if (ds[i] != db[rb - rs + i]) return false;
    return true;
}

/* ---- the families' checks (every rank, from the plan) ---- */

static int check_embedding(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    if (T_(d, op->in[0])->rank != 2 || d->kind[op->in[0]] != DK_CONST || T_(d, op->in[1])->dtype != DT_I32)
        return REFUSE(why, n, "op %d: embedding of a table that is not a [V, D] parameter", o);
    return 0;
}

/* linear and matmul: one row times a 2-D parameter, [K, N] (or [N, K]
 * with transpose_b). */
static int check_gemm(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    const char *ps = kvdec_prim_str(op->prim);
    int w = op->in[1];
    bool tb = op->prim == PRIM_MATMUL && op->iattr[IA_MATMUL_TRANSPOSE_B];
    if (op->prim == PRIM_MATMUL && op->iattr[IA_MATMUL_TRANSPOSE_A])
        return REFUSE(why, n, "op %d: a matmul with transpose_a has no GPU decode kernel", o);
    if (T_(d, w)->rank != 2 || d->kind[w] != DK_CONST)
        return REFUSE(why, n, "op %d (%s): its second operand '%s' is not a 2-D parameter", o, ps, T_(d, w)->name);
    int64_t K = kvdec_last_dim(d, op->in[0]), N = kvdec_last_dim(d, op->out[0]);
    if (T_(d, w)->dims[tb ? 1 : 0] != K || T_(d, w)->dims[tb ? 0 : 1] != N)
        return REFUSE(why, n, "op %d (%s): '%s' is not [%" PRId64 ", %" PRId64 "]", o, ps, T_(d, w)->name, K, N);
    if (kvdec_view_numel(d, op->in[0]) / K > 65535) return REFUSE(why, n, "op %d (%s): more than 65535 rows at once", o, ps);
    return 0;
}

static int check_binary(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    int a = op->in[0], b = op->in[1];
    bool a_big = T_(d, a)->rank >= T_(d, b)->rank;
    int big = a_big ? a : b, small = a_big ? b : a;
    if (!suffix_of(d, small, big) || kvdec_view_numel(d, op->out[0]) != kvdec_view_numel(d, big))
        return REFUSE(why, n, "op %d (%s): '%s' does not broadcast over one position of '%s'", o, kvdec_prim_str(op->prim),
                      T_(d, small)->name, T_(d, big)->name);
    return 0;
}

static int check_split(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    for (int j = 0; j < op->nout; j++)
        if (op->out[j] < 0) return REFUSE(why, n, "op %d: split with an absent piece", o);
    return 0;
}

/* rope and attention read the position: a row of it, not parameters whole. */
static int check_per_position(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    if (d->kind[op->out[0]] != DK_BT)
        return REFUSE(why, n, "op %d (%s) of parameters only has no GPU decode kernel", o, kvdec_prim_str(op->prim));
    return 0;
}

static int check_rope(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    int64_t C = kvdec_last_dim(d, op->in[0]), H = op->iattr[IA_ROPE_HEADS];
    if (H < 1 || C % H || (C / H) % 2) return REFUSE(why, n, "op %d: rope of %" PRId64 " over %" PRId64 " heads", o, C, H);
    int64_t rd = op->iattr[IA_ROPE_ROTARY_DIM] ? op->iattr[IA_ROPE_ROTARY_DIM] : C / H;
    if (rd < 2 || rd > C / H || rd % 2) return REFUSE(why, n, "op %d: rope with rotary_dim = %" PRId64 " of a head of %" PRId64, o, rd, C / H);
    if (op->iattr[IA_ROPE_SCALING] < ROPE_NONE || op->iattr[IA_ROPE_SCALING] > ROPE_LONGROPE)
        return REFUSE(why, n, "op %d: rope with scaling %" PRId64, o, op->iattr[IA_ROPE_SCALING]);
    if (op->iattr[IA_ROPE_SCALING] == ROPE_LONGROPE && (!op->table || op->ntable != rd))
        return REFUSE(why, n, "op %d: longrope without its short and long lists of %" PRId64 " numbers each", o, rd / 2);
    return check_per_position(d, o, why, n);
}

static int check_attention(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    int64_t H = op->iattr[IA_ATTENTION_HEADS], KV = op->iattr[IA_ATTENTION_KV_HEADS] ? op->iattr[IA_ATTENTION_KV_HEADS] : H;
    int64_t qd = kvdec_last_dim(d, op->in[0]), kd = kvdec_last_dim(d, op->in[1]);
    if (H < 1 || KV < 1 || H % KV || qd % H || kd != (qd / H) * KV || kvdec_last_dim(d, op->in[2]) != kd)
        return REFUSE(why, n, "op %d: attention of q %" PRId64 ", k %" PRId64 " with %" PRId64 " heads, %" PRId64 " kv heads", o, qd,
                      kd, H, KV);
    if (op->iattr[IA_ATTENTION_WINDOW] > 0 && op->iattr[IA_ATTENTION_WINDOW] < d->T)
        return REFUSE(why, n, "op %d: attention with a sliding window of %" PRId64 ", shorter than the cache of %" PRId64
                      " positions (the CUDA step attends to every position; the host decoder keeps to the window)", o,
                      op->iattr[IA_ATTENTION_WINDOW], (int64_t)d->T);
    return check_per_position(d, o, why, n);
}

/* Mixture of experts, a row at a time: routing (moe_topk, moe_gate), the
 * chosen experts' products (moe_expert of a stacked [E, O, I] parameter:
 * the experts, and LoRA's adapters on them), the gated sum (moe_combine)
 * and the shared expert's gate. The load statistics never reach a step
 * (decode.c refuses a step that needs them). */
static int check_moe(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    const char *ps = kvdec_prim_str(op->prim);
    switch (op->prim) {
    case PRIM_MOE_TOPK:
    case PRIM_MOE_GATE:
    case PRIM_MOE_COMBINE:
    case PRIM_MOE_SHARED_GATE: return 0;
    case PRIM_MOE_EXPERT: break;
    default: return REFUSE(why, n, "op %d (%s) has no GPU decode kernel", o, ps);
    }
    int w = op->in[2];
    if (T_(d, w)->rank != 3 || d->kind[w] != DK_CONST)
        return REFUSE(why, n, "op %d (%s): its experts '%s' are not a 3-D parameter", o, ps, T_(d, w)->name);
    int64_t k = kvdec_last_dim(d, op->in[1]), R = kvdec_view_numel(d, op->in[1]) / (k ? k : 1);
    int64_t xr = kvdec_view_numel(d, op->in[0]) / kvdec_last_dim(d, op->in[0]);
    if (kvdec_last_dim(d, op->in[0]) != T_(d, w)->dims[2] || (xr != R && xr != R * k) ||
        kvdec_view_numel(d, op->out[0]) != R * k * T_(d, w)->dims[1])
        return REFUSE(why, n, "op %d (%s): '%s' does not fit its input and output", o, ps, T_(d, w)->name);
    if (R * k > 65535) return REFUSE(why, n, "op %d (%s): more than 65535 (row, expert) pairs at once", o, ps);
    if (T_(d, w)->dims[1] > 16384 * (BLOCK / 32)) /* blocks()' grid, 8 outputs a block */
        return REFUSE(why, n, "op %d (%s): experts of %" PRId64 " outputs, more than %d", o, ps, T_(d, w)->dims[1], 16384 * (BLOCK / 32));
    return 0;
}

/* ---- rank 0: the device, the layout, the steps ---- */

/* A failing driver call: -1 with its name and the driver's words in err. */
#define DRV(x, call, what, err, n)                                                                         \
    do {                                                                                                   \
        CUresult rc_ = (call);                                                                             \
        if (rc_ != CUDA_SUCCESS) return cudrv_fail(&(x)->drv, rc_, what, __FILE__, __LINE__, 0, err, n); \
    } while (0)

static CUdeviceptr at(const KvDecoder *d, int t) { return t < 0 ? 0 : X_(d)->base + X_(d)->off[t]; }

static int cuda_param_put(KvDecoder *d, int t, char *err, size_t n) {
    KvCuda *x = X_(d);
    DRV(x, x->drv.MemcpyHtoDAsync(at(d, t), x->staging, kvdec_view_bytes(d, t), x->s), "cuMemcpyHtoDAsync", err, n);
    DRV(x, x->drv.StreamSynchronize(x->s), "cuStreamSynchronize", err, n); /* the staging is the next one's */
    return 0;
}

static unsigned blocks(int64_t work, int per) {
    int64_t b = (work + per - 1) / per;
    return (unsigned)(b < 1 ? 1 : b > 16384 ? 16384 : b);
}

/* One launch on the decoder's stream, for op o (-1: the step's token id). */
static int launch(KvDecoder *d, int o, CUfunction f, unsigned gx, unsigned gy, unsigned block, void **args, char *err, size_t n) {
    KvCuda *x = X_(d);
    CUresult rc = x->drv.LaunchKernel(f, gx, gy, 1, block, 1, 1, 0, x->s, args, NULL);
    if (rc == CUDA_SUCCESS) return 0;
    char e[384], what[64] = "the token id";
    cudrv_fail(&x->drv, rc, "cuLaunchKernel", __FILE__, __LINE__, 0, e, sizeof e);
    if (o >= 0) snprintf(what, sizeof what, "op %d (%s)", o, kvdec_prim_str(d->p->ops[o].prim));
    return errorf(err, n, "%s: %s at position %" PRId64 " <<<%u,%u / %u>>>", e, what, d->pos, gx, gy, block);
}

static int set_i32(KvDecoder *d, int o, CUdeviceptr p, long long v, char *err, size_t n) {
    void *args[] = {&p, &v};
    return launch(d, o, X_(d)->set, 1, 1, 32, args, err, n);
}

/* ---- the families' steps (rank 0) ---- */

/* The operands of op o on the device: y its first output, a, b, c its
 * first inputs (0: absent), st the storage of its float tensors. */
typedef struct Opnds {
    const PlanOp *op;
    CUdeviceptr y, a, b, c;
    int y0, st;
} Opnds;

static Opnds opnds(const KvDecoder *d, int o) {
    const PlanOp *op = &d->p->ops[o];
    Opnds v = {op, at(d, op->out[0]), at(d, op->in[0]), op->nin > 1 ? at(d, op->in[1]) : 0, op->nin > 2 ? at(d, op->in[2]) : 0,
               op->out[0], storage_of(T_(d, op->out[0])->dtype)}; /* check_op: one float dtype an op; arange's is -1 and unused */
    return v;
}

static int run_arange(KvDecoder *d, int o, char *err, size_t n) { return set_i32(d, o, opnds(d, o).y, d->pos, err, n); }

static int run_embedding(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    long long rows = kvdec_view_numel(d, v.op->in[1]), V = T_(d, v.op->in[0])->dims[0], D = T_(d, v.op->in[0])->dims[1];
    CUdeviceptr ew = x->base + x->errw + ERR_EMBED;
    void *args[] = {&v.y, &v.a, &v.b, &rows, &V, &D, &ew};
    return launch(d, o, x->fn[KD_EMBED][v.st], (unsigned)rows, 1, BLOCK, args, err, n);
}

static int run_gemm(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    bool matmul = v.op->prim == PRIM_MATMUL;
    long long K = kvdec_last_dim(d, v.op->in[0]), N = kvdec_last_dim(d, v.y0), tb = matmul && v.op->iattr[IA_MATMUL_TRANSPOSE_B];
    unsigned rows = (unsigned)(kvdec_view_numel(d, v.op->in[0]) / K);
    if (matmul) v.c = 0;
    void *args[] = {&v.y, &v.a, &v.b, &v.c, &K, &N, &tb};
    return launch(d, o, x->fn[KD_LINEAR][v.st], blocks(N, tb ? BLOCK / 32 : BLOCK), rows, BLOCK, args, err, n);
}

static int run_binary(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    bool a_big = T_(d, v.op->in[0])->rank >= T_(d, v.op->in[1])->rank;
    CUdeviceptr big = a_big ? v.a : v.b, small = a_big ? v.b : v.a;
    long long nb = kvdec_view_numel(d, v.y0), ns = kvdec_view_numel(d, a_big ? v.op->in[1] : v.op->in[0]), mul = v.op->prim == PRIM_MUL;
    if (ns == 0) return 0;
    void *args[] = {&v.y, &big, &small, &nb, &ns, &mul};
    return launch(d, o, x->fn[KD_BINARY][v.st], blocks(nb, BLOCK), 1, BLOCK, args, err, n);
}

static int run_norm(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    bool rms = v.op->prim == PRIM_RMSNORM;
    long long heads = rms && v.op->iattr[IA_RMSNORM_HEADS] > 1 ? v.op->iattr[IA_RMSNORM_HEADS] : 1;
    long long D = kvdec_last_dim(d, v.op->in[0]) / heads, rows = kvdec_view_numel(d, v.op->in[0]) / D;
    float eps = (float)(v.op->fattr[FA_LAYERNORM_EPS] != 0 ? v.op->fattr[FA_LAYERNORM_EPS] : 1e-5);
    float offset = rms ? (float)v.op->fattr[FA_RMSNORM_OFFSET] : 0.f; /* Gemma's 1 + w */
    void *ln[] = {&v.y, &v.a, &v.b, &v.c, &rows, &D, &eps}, *rmsa[] = {&v.y, &v.a, &v.b, &rows, &D, &eps, &offset};
    if (!rms) return launch(d, o, x->fn[KD_LAYERNORM][v.st], (unsigned)rows, 1, BLOCK, ln, err, n);
    return launch(d, o, x->fn[KD_RMSNORM][v.st], (unsigned)rows, 1, BLOCK, rmsa, err, n);
}

static int run_act(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    long long num = kvdec_view_numel(d, v.y0);
    void *args[] = {&v.y, &v.a, &num};
    return launch(d, o, x->fn[v.op->prim == PRIM_GELU ? KD_GELU : KD_SILU][v.st], blocks(num, BLOCK), 1, BLOCK, args, err, n);
}

static int run_scale(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    long long num = kvdec_view_numel(d, v.y0);
    bool cap = v.op->prim == PRIM_SOFTCAP; /* prim.def's scale family: scale and softcap */
    float by = (float)(cap ? v.op->fattr[FA_SOFTCAP_CAP] : v.op->fattr[FA_SCALE_BY]);
    void *args[] = {&v.y, &v.a, &num, &by};
    return launch(d, o, x->fn[cap ? KD_SOFTCAP : KD_SCALE][v.st], blocks(num, BLOCK), 1, BLOCK, args, err, n);
}

static int run_split(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    long long X = kvdec_last_dim(d, v.op->in[0]), rows = kvdec_view_numel(d, v.op->in[0]) / X, off = 0;
    for (int j = 0; j < v.op->nout; j++) {
        CUdeviceptr yj = at(d, v.op->out[j]);
        long long W = kvdec_last_dim(d, v.op->out[j]);
        void *args[] = {&yj, &v.a, &rows, &X, &off, &W};
        if (launch(d, o, x->fn[KD_COLUMNS][v.st], blocks(rows * W, BLOCK), 1, BLOCK, args, err, n)) return -1;
        off += W;
    }
    return 0;
}

static int run_rope(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    HkRope r = hk_rope_attrs(v.op->iattr, v.op->fattr, v.op->table, v.op->ntable);
    long long H = r.heads, hd = kvdec_last_dim(d, v.op->in[0]) / H, pos = d->pos, scaling = r.scaling;
    long long rd = r.rotary_dim ? r.rotary_dim : hd;
    bool yarn = r.scaling == ROPE_YARN;
    double theta = r.theta, factor = r.factor, orig = r.original_max, af = r.attention_factor > 0 ? r.attention_factor : 1.0;
    double low = yarn ? r.beta_fast : r.low_freq_factor, high = yarn ? r.beta_slow : r.high_freq_factor;
    /* longrope: the list the text's length chooses (as the host decoder's hk_rope_fwd_seq), on the device */
    int64_t seq = d->rope_seq > d->pos + 1 ? d->rope_seq : d->pos + 1;
    CUdeviceptr div = 0;
    if (r.scaling == ROPE_LONGROPE)
        div = x->base + x->tab[o] + ((double)seq > r.original_max ? sizeof(double) * (uint64_t)(rd / 2) : 0);
    void *args[] = {&v.y, &v.a, &H, &hd, &pos, &theta, &scaling, &factor, &low, &high, &orig, &rd, &af, &div};
    return launch(d, o, x->fn[KD_ROPE][v.st], blocks(H * (hd / 2), BLOCK), 1, BLOCK, args, err, n);
}

static int run_attention(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    long long H = v.op->iattr[IA_ATTENTION_HEADS], KV = v.op->iattr[IA_ATTENTION_KV_HEADS] ? v.op->iattr[IA_ATTENTION_KV_HEADS] : H, kd = kvdec_last_dim(d, v.op->in[1]), hd = kd / KV;
    long long T = d->T, pos = d->pos;
    CUdeviceptr kc = x->base + x->kc[o], vc = x->base + x->vc[o], sc = x->base + x->scores;
    void *app[] = {&kc, &vc, &v.b, &v.c, &kd, &pos};
    if (launch(d, o, x->fn[KD_KV_APPEND][v.st], blocks(kd, BLOCK), 1, BLOCK, app, err, n)) return -1;
    float scale = (float)v.op->fattr[FA_ATTENTION_SCALE], cap = (float)v.op->fattr[FA_ATTENTION_SOFTCAP]; /* 0: 1/sqrt(hd), none */
    void *args[] = {&v.y, &v.a, &kc, &vc, &sc, &H, &KV, &hd, &T, &pos, &scale, &cap};
    return launch(d, o, x->fn[KD_ATTEND][v.st], (unsigned)H, 1, 128, args, err, n);
}

/* The MoE ops of a step (check_moe). Each reads the expert ids where
 * moe_topk wrote them on the device: no copy back, no wait. */
static int run_moe(KvDecoder *d, int o, char *err, size_t n) {
    KvCuda *x = X_(d);
    Opnds v = opnds(d, o);
    int st = storage_of(T_(d, v.op->in[0])->dtype); /* moe_topk's output is the i32 ids */
    CUdeviceptr ew = x->base + x->errw + ERR_MOE;
    switch (v.op->prim) {
    case PRIM_MOE_TOPK:
    case PRIM_MOE_GATE: {
        long long E = kvdec_last_dim(d, v.op->in[0]), R = kvdec_view_numel(d, v.op->in[0]) / E;
        long long k = kvdec_last_dim(d, v.op->prim == PRIM_MOE_TOPK ? v.y0 : v.op->in[1]);
        long long norm = v.op->prim == PRIM_MOE_GATE && v.op->iattr[IA_MOE_GATE_NORMALIZE];
        void *topk[] = {&v.y, &v.a, &R, &E, &k}, *gate[] = {&v.y, &v.a, &v.b, &R, &E, &k, &norm, &ew};
        if (v.op->prim == PRIM_MOE_TOPK) return launch(d, o, x->fn[KD_MOE_TOPK][st], blocks(R, BLOCK), 1, BLOCK, topk, err, n);
        return launch(d, o, x->fn[KD_MOE_GATE][st], blocks(R, BLOCK), 1, BLOCK, gate, err, n);
    }
    case PRIM_MOE_EXPERT: {
        const PlanTensor *w = T_(d, v.op->in[2]);
        long long k = kvdec_last_dim(d, v.op->in[1]), R = kvdec_view_numel(d, v.op->in[1]) / k, E = w->dims[0], O = w->dims[1],
                  I = w->dims[2], shared = kvdec_view_numel(d, v.op->in[0]) / I == R;
        void *args[] = {&v.y, &v.a, &v.b, &v.c, &R, &k, &E, &O, &I, &shared, &ew};
        return launch(d, o, x->fn[KD_MOE_EXPERT][st], blocks(O, BLOCK / 32), (unsigned)(R * k), BLOCK, args, err, n);
    }
    case PRIM_MOE_COMBINE: {
        const PlanTensor *ot = T_(d, v.op->in[0]);
        long long D = kvdec_last_dim(d, v.op->in[0]), k = ot->rank >= 2 ? ot->dims[ot->rank - 2] : 1;
        long long R = kvdec_view_numel(d, v.op->in[0]) / (k * D);
        void *args[] = {&v.y, &v.a, &v.b, &R, &k, &D};
        return launch(d, o, x->fn[KD_MOE_COMBINE][st], blocks(R * D, BLOCK), 1, BLOCK, args, err, n);
    }
    default: { /* check_moe: moe_shared_gate */
        long long D = kvdec_last_dim(d, v.op->in[0]), R = kvdec_view_numel(d, v.op->in[0]) / D;
        void *args[] = {&v.y, &v.a, &v.b, &R, &D};
        return launch(d, o, x->fn[KD_MOE_SGATE][st], blocks(R * D, BLOCK), 1, BLOCK, args, err, n);
    }
    }
}

/* A family on the GPU (runtime/plan/prim.def's family column): cuda_<family>
 * below; a family without one does not compile. */
typedef struct CudaFamily {
    /* 1 and why when the decode kernels do not take op o (beyond one float
     * dtype an op); NULL: they take every one */
    int (*check)(const KvDecoder *d, int o, char *why, size_t n);
    /* its launches; NULL: none (the analysis refuses the family) */
    int (*run)(KvDecoder *d, int o, char *err, size_t n);
    /* an op of the step keeps a key and value cache ([T, kv_dim] f32 each)
     * and scores ([heads, T] f32) */
    bool cache;
    /* its tensors may all be integers (no float storage) */
    bool ints;
} CudaFamily;

static const CudaFamily cuda_embedding = {check_embedding, run_embedding, false, false},
                        cuda_linear = {check_gemm, run_gemm, false, false}, cuda_matmul = {check_gemm, run_gemm, false, false},
                        cuda_binary = {check_binary, run_binary, false, false}, cuda_norm = {NULL, run_norm, false, false},
                        cuda_act = {NULL, run_act, false, false}, cuda_rope = {check_rope, run_rope, false, false},
                        cuda_attention = {check_attention, run_attention, true, false},
                        cuda_split = {check_split, run_split, false, false}, cuda_scale = {NULL, run_scale, false, false},
                        cuda_arange = {NULL, run_arange, false, true}, cuda_xent = {NULL, NULL, false, false},
                        cuda_linxent = {NULL, NULL, false, false},
                        cuda_moe = {check_moe, run_moe, false, false}, cuda_gmlp = {NULL, NULL, false, false};

static const CudaFamily *const cuda_families[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = &cuda_##family,
#include "prim.def"
#undef PRIM
};

static int cuda_run_op(KvDecoder *d, int o, char *err, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    const CudaFamily *f = (unsigned)op->prim < PRIM_COUNT ? cuda_families[op->prim] : NULL;
    if (!f || !f->run) return errorf(err, n, "op %d (%s) has no GPU decode kernel", o, kvdec_prim_str(op->prim));
    return f->run(d, o, err, n);
}

/* Op o: one float dtype (the kernels take one an op), then its family's check. */
static int check_op(const KvDecoder *d, int o, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    const char *ps = kvdec_prim_str(op->prim);
    const CudaFamily *f = (unsigned)op->prim < PRIM_COUNT ? cuda_families[op->prim] : NULL;
    if (!f || !f->run) return REFUSE(why, n, "op %d (%s) has no GPU decode kernel", o, ps);
    int st = -1;
    for (int i = 0; i < op->nin + op->nout; i++) {
        int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
        if (t < 0 || T_(d, t)->dtype == DT_I32) continue;
        int s = storage_of(T_(d, t)->dtype);
        if (s < 0 || (st >= 0 && s != st))
            return REFUSE(why, n, "op %d (%s): '%s' is %s among other dtypes; the GPU decode kernels take one float dtype an op", o, ps,
                          T_(d, t)->name, dtype_name((DType)T_(d, t)->dtype));
        st = s;
    }
    if (st < 0 && !f->ints) return REFUSE(why, n, "op %d (%s) has no float tensor", o, ps);
    return f->check ? f->check(d, o, why, n) : 0;
}

static int cuda_check(const KvDecoder *d, char *why, size_t n) {
    if (decode_kernel(d->p, NULL) < 0)
        return REFUSE(why, n, "the plan has no GPU decode kernels (zinfc puts them in a plan with GPU code for a model they "
                              "serve): recompile it, or use --decode window");
    for (int i = 0; i < d->nops; i++) {
        int rc = check_op(d, d->ops[i], why, n);
        if (rc) return rc;
    }
    return 0;
}

/* Offsets of everything in the one allocation; the bytes by kind. */
static int layout(KvDecoder *d, KvCuda *x, char *err, size_t n) {
    const Plan *p = d->p;
    x->off = malloc(sizeof *x->off * (p->ntensors ? p->ntensors : 1));
    x->kc = calloc(p->nops ? p->nops : 1, sizeof *x->kc);
    x->vc = calloc(p->nops ? p->nops : 1, sizeof *x->vc);
    x->tab = calloc(p->nops ? p->nops : 1, sizeof *x->tab);
    if (!x->off || !x->kc || !x->vc || !x->tab) return errorf(err, n, "out of memory");
    uint64_t at = 0, maxh = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        x->off[t] = UINT64_MAX;
        if (d->kind[t] < DK_CONST) continue;
        x->off[t] = at;
        uint64_t b = align_up(kvdec_view_bytes(d, (int)t));
        at += b ? b : ALIGN;
        if (p->tensors[t].cls == TC_PARAM) x->param_bytes += b;
    }
    for (int i = 0; i < d->nops; i++) {
        const PlanOp *op = &p->ops[d->ops[i]];
        if (!cuda_families[op->prim]->cache || d->kind[op->out[0]] != DK_BT) continue;
        uint64_t b = align_up(sizeof(float) * (uint64_t)(d->T * kvdec_last_dim(d, op->in[1])));
        x->kc[d->ops[i]] = at;
        x->vc[d->ops[i]] = at + b;
        at += 2 * b;
        x->cache_bytes += 2 * b;
        if ((uint64_t)op->iattr[IA_ATTENTION_HEADS] > maxh) maxh = (uint64_t)op->iattr[IA_ATTENTION_HEADS];
    }
    for (int i = 0; i < d->nops; i++) {
        const PlanOp *op = &p->ops[d->ops[i]];
        if (op->prim != PRIM_ROPE || op->iattr[IA_ROPE_SCALING] != ROPE_LONGROPE || !op->table) continue;
        x->tab[d->ops[i]] = at;
        at += align_up(sizeof(double) * (uint64_t)op->ntable);
    }
    x->scores = at;
    at += align_up(sizeof(float) * maxh * (uint64_t)d->T);
    x->errw = at;
    at += ALIGN;
    x->total = at;
    return 0;
}

static int cuda_open(KvDecoder *d, char *why, size_t n) {
    KvCuda *x = calloc(1, sizeof *x);
    if (!x) return errorf(why, n, "out of memory");
    d->state = x;
    char e[512];
    if (cudrv_open(&x->drv, e, sizeof e)) return errorf(why, n, "the GPU decoder: %s", e);
    int ordinal = d->c->local_rank; /* the GPU this rank's executor uses */
    size_t mem = 0;
    if (cudrv_describe(&x->drv, ordinal, x->name, sizeof x->name, &mem, x->arch, sizeof x->arch, e, sizeof e))
        return errorf(why, n, "GPU %d: %s", ordinal, e);
    int k = decode_kernel(d->p, x->arch);
    if (k < 0)
        return REFUSE(why, n, "the plan has no GPU decode kernels for this GPU (%s, %s): recompile it for %s, or use --decode window",
                      x->name, x->arch, x->arch);
    DRV(x, x->drv.DeviceGet(&x->dev, ordinal), "cuDeviceGet", why, n);
    DRV(x, x->drv.DevicePrimaryCtxRetain(&x->ctx, x->dev), "cuDevicePrimaryCtxRetain", why, n);
    DRV(x, x->drv.CtxSetCurrent(x->ctx), "cuCtxSetCurrent", why, n);
    if (layout(d, x, why, n)) return -1;
    d->bytes = x->total;
    size_t fr = 0, tot = 0;
    DRV(x, x->drv.MemGetInfo(&fr, &tot), "cuMemGetInfo", why, n);
    /* the driver maps device memory in 2 MiB pages: what fits in fewer
     * free bytes than that would fail in cuMemAlloc instead */
    uint64_t page = (uint64_t)2 << 20, need = (x->total + page - 1) / page * page;
    if (need > fr) {
        char b[6][32];
        return REFUSE(why, n,
                      "the KV-cache decoder needs %s of GPU memory (the parameters whole %s, the KV cache %s, one position's "
                      "activations and scratch %s; %s in the driver's 2 MiB pages) and %s of %s is free beside the plan's arenas: "
                      "use --decode window",
                      plan_bytes_str(x->total, b[0], 32), plan_bytes_str(x->param_bytes, b[1], 32), plan_bytes_str(x->cache_bytes, b[2], 32),
                      plan_bytes_str(x->total - x->param_bytes - x->cache_bytes, b[3], 32), plan_bytes_str(need, b[4], 32),
                      plan_bytes_str(fr, b[5], 32), x->name);
    }
    CUresult rc = x->drv.ModuleLoadData(&x->mod, d->p->kernels[k].data);
    if (rc != CUDA_SUCCESS) {
        x->mod = NULL;
        cudrv_fail(&x->drv, rc, "cuModuleLoadData", __FILE__, __LINE__, 0, e, sizeof e);
        return errorf(why, n, "%s, loading %s for %s", e, d->p->kernels[k].name, x->arch);
    }
    /* the unit has the entries of the model's storage dtypes: those its ops
     * have; and the mixture-of-experts entries only for a model with such ops
     * (compiler/cuda_gen_decode.c leaves moe.cu out of a dense model's unit) */
    bool has[NSTORAGE] = {false}, moe = false;
    for (int i = 0; i < d->nops; i++) {
        const PlanOp *op = &d->p->ops[d->ops[i]];
        int st = storage_of(T_(d, op->out[0])->dtype);
        if (st >= 0) has[st] = true;
        moe |= op->prim == PRIM_MOE_TOPK || op->prim == PRIM_MOE_GATE || op->prim == PRIM_MOE_EXPERT ||
               op->prim == PRIM_MOE_COMBINE || op->prim == PRIM_MOE_SHARED_GATE;
    }
    for (int f = 0; f <= KD_N * NSTORAGE; f++) {
        char entry[64];
        CUfunction *fp = f == KD_N * NSTORAGE ? &x->set : &x->fn[f / NSTORAGE][f % NSTORAGE];
        if (f < KD_N * NSTORAGE && !has[f % NSTORAGE]) continue;
        if (f < KD_N * NSTORAGE && f / NSTORAGE >= KD_MOE_TOPK && !moe) continue;
        if (f == KD_N * NSTORAGE) snprintf(entry, sizeof entry, "zkd_set");
        else snprintf(entry, sizeof entry, "zkd_%s_%s", kd_names[f / NSTORAGE], storage_names[f % NSTORAGE]);
        rc = x->drv.ModuleGetFunction(fp, x->mod, entry);
        if (rc != CUDA_SUCCESS) {
            cudrv_fail(&x->drv, rc, "cuModuleGetFunction", __FILE__, __LINE__, 0, e, sizeof e);
            return errorf(why, n, "%s: entry %s of %s", e, entry, d->p->kernels[k].name);
        }
    }
    DRV(x, x->drv.StreamCreate(&x->s, CU_STREAM_NON_BLOCKING), "cuStreamCreate", why, n);
    return 0;
}

static int cuda_allocate(KvDecoder *d, char *err, size_t n) {
    KvCuda *x = X_(d);
    uint64_t big = 0;
    for (uint32_t t = 0; t < d->p->ntensors; t++)
        if (d->p->tensors[t].cls == TC_PARAM && kvdec_view_bytes(d, (int)t) > big) big = kvdec_view_bytes(d, (int)t);
    x->staging = malloc(big ? big : 1);
    x->lg = malloc(kvdec_view_bytes(d, d->logits) + 1);
    if (!x->staging || !x->lg) return errorf(err, n, "out of memory");
    DRV(x, x->drv.MemAlloc(&x->base, x->total), "cuMemAlloc", err, n);
    /* zeros: the caches past the position, the error word, padding */
    DRV(x, x->drv.MemsetD8Async(x->base, 0, x->total, x->s), "cuMemsetD8Async", err, n);
    for (int i = 0; i < d->nops; i++) { /* longrope's lists, as the plan holds them */
        const PlanOp *op = &d->p->ops[d->ops[i]];
        if (x->tab[d->ops[i]])
            DRV(x, x->drv.MemcpyHtoDAsync(x->base + x->tab[d->ops[i]], op->table, sizeof(double) * (size_t)op->ntable, x->s),
                "cuMemcpyHtoDAsync", err, n);
    }
    DRV(x, x->drv.StreamSynchronize(x->s), "cuStreamSynchronize", err, n);
    return 0;
}

static void *cuda_param_dst(KvDecoder *d, int t) {
    (void)t;
    return X_(d)->staging;
}

static int cuda_set_token(KvDecoder *d, int32_t token, char *err, size_t n) {
    return set_i32(d, -1, at(d, d->tokens), token, err, n);
}

static int cuda_logits(KvDecoder *d, float *out, char *err, size_t n) {
    KvCuda *x = X_(d);
    uint64_t bytes = kvdec_view_bytes(d, d->logits);
    int32_t ew[(ERR_MOE + 12) / 4];
    const int32_t *em = ew + ERR_EMBED / 4, *mo = ew + ERR_MOE / 4;
    DRV(x, x->drv.MemcpyDtoHAsync(x->lg, at(d, d->logits), bytes, x->s), "cuMemcpyDtoHAsync", err, n);
    DRV(x, x->drv.MemcpyDtoHAsync(ew, x->base + x->errw, sizeof ew, x->s), "cuMemcpyDtoHAsync", err, n);
    DRV(x, x->drv.StreamSynchronize(x->s), "cuStreamSynchronize", err, n);
    if (em[0] || mo[0]) {
        DRV(x, x->drv.MemsetD8Async(x->base + x->errw, 0, sizeof ew, x->s), "cuMemsetD8Async", err, n);
        if (em[0]) return errorf(err, n, "position %" PRId64 ": embedding id %d is outside its table", d->pos, em[1]);
        return errorf(err, n, "position %" PRId64 ": expert id %d (of the pair %d) is outside the experts", d->pos, mo[1], mo[2]);
    }
    int64_t V = kvdec_view_numel(d, d->logits);
    int dt = T_(d, d->logits)->dtype;
    const uint16_t *h = x->lg;
    for (int64_t v = 0; v < V; v++)
        out[v] = dt == DT_F32 ? ((const float *)x->lg)[v] : dt == DT_BF16 ? half_bf16_to_f32(h[v]) : half_f16_to_f32(h[v]);
    return 0;
}

static void cuda_close(KvDecoder *d) {
    KvCuda *x = X_(d);
    if (x->ctx) {
        x->drv.CtxSetCurrent(x->ctx);
        if (x->s) {
            x->drv.StreamSynchronize(x->s);
            x->drv.StreamDestroy(x->s);
        }
        if (x->base) x->drv.MemFree(x->base);
        if (x->mod) x->drv.ModuleUnload(x->mod);
        x->drv.DevicePrimaryCtxRelease(x->dev);
    }
    if (x->drv.lib) cudrv_close(&x->drv);
    free(x->off);
    free(x->kc);
    free(x->vc);
    free(x->tab);
    free(x->staging);
    free(x->lg);
    free(x);
    d->state = NULL;
}

const KvBackend kvdec_cuda = {
    .check = cuda_check,
    .open = cuda_open,
    .allocate = cuda_allocate,
    .param_dst = cuda_param_dst,
    .param_put = cuda_param_put,
    .run_op = cuda_run_op,
    .set_token = cuda_set_token,
    .logits = cuda_logits,
    .close = cuda_close,
};
