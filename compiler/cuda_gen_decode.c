/* cuda_gen_decode: the decode unit, the kernels of zinfgen --decode kv on
 * the CUDA backend (runtime/decode/decode_cuda.c launches them; docs/generation.md).
 *
 * Unlike the other families it has no launches in the plan: the decoder
 * computes one position at a time, with sizes the training schedule never
 * has, and finds its entry points by name. The unit is common.cuh, then
 * for each storage dtype of the model's forward a namespace zkt_<dtype>
 * (with T its storage type) holding the training families' files that a
 * step reuses (reused[] below: their kernels become __device__ functions
 * there, their text otherwise as the training units have it) and
 * stdlib/kernels/decode.cu, then the extern "C" entry points this file
 * writes, one per kernel and storage dtype (zkd_<kernel>_<f32|bf16|f16>),
 * each a call into its dtype's namespace: one text per set of dtypes, so
 * models of the same dtype share one NVRTC compilation (cached). */
#include "cuda_gen_impl.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nvrtc.h"

/* The entry points: the name, its parameters with '@' for the storage
 * type, and the call in the dtype's namespace, a training kernel's or
 * decode.cu's. once: one entry whatever the dtypes (no '@'). moe: only in
 * the unit of a model with mixture-of-experts ops (with moe.cu). */
typedef struct DecodeEntry {
    const char *name, *params, *call;
    bool once, moe;
} DecodeEntry;

static const DecodeEntry entries[] = {
    {"embed", "@ *y, const @ *table, const int *ids, long long rows, long long V, long long D, int *err",
     "zk_embed_fwd(y, table, ids, rows, V, D, err)", false, false},
    {"linear", "@ *y, const @ *x, const @ *w, const @ *b, long long K, long long N, long long tb",
     "zkd_linear(y, x, w, b, K, N, tb)", false, false},
    {"binary", "@ *y, const @ *big, const @ *small, long long n, long long ns, long long mul",
     "zk_binary_fwd(y, big, small, n, n, ns, mul)", false, false},
    {"layernorm", "@ *y, const @ *x, const @ *g, const @ *b, long long rows, long long D, float eps",
     "zk_layernorm_fwd(y, x, g, b, rows, D, eps)", false, false},
    {"rmsnorm", "@ *y, const @ *x, const @ *g, long long rows, long long D, float eps, float offset",
     "zk_rmsnorm_fwd(y, x, g, rows, D, eps, offset)", false, false},
    {"gelu", "@ *y, const @ *x, long long n", "zk_gelu_fwd(y, x, n)", false, false},
    {"silu", "@ *y, const @ *x, long long n", "zk_silu_fwd(y, x, n)", false, false},
    {"scale", "@ *y, const @ *x, long long n, float by", "zkd_scale(y, x, n, by)", false, false},
    {"softcap", "@ *y, const @ *x, long long n, float cap", "zk_softcap_fwd(y, x, n, cap)", false, false},
    {"columns", "@ *y, const @ *x, long long rows, long long X, long long off, long long W", "zk_slice_cols(y, x, rows, X, off, W)",
     false, false},
    {"rope",
     "@ *y, const @ *x, long long H, long long hd, long long pos, double theta, long long scaling, double factor, "
     "double low, double high, double orig, long long rd, double af, const double *div",
     "zkd_rope(y, x, H, hd, pos, theta, scaling, factor, low, high, orig, rd, af, div)", false, false},
    {"kv_append", "float *kc, float *vc, const @ *k, const @ *v, long long kd, long long pos", "zkd_kv_append(kc, vc, k, v, kd, pos)",
     false, false},
    {"attend",
     "@ *y, const @ *q, const float *kc, const float *vc, float *sc, long long H, long long KV, long long hd, "
     "long long T, long long pos, float scale, float cap",
     "zkd_attend(y, q, kc, vc, sc, H, KV, hd, T, pos, scale, cap)", false, false},
    {"moe_topk", "int *idx, const @ *logits, long long R, long long E, long long k", "zk_moe_topk(idx, logits, R, E, k)", false, true},
    {"moe_gate", "@ *y, const @ *logits, const int *idx, long long R, long long E, long long k, long long normalize, int *err",
     "zk_moe_gate_fwd(y, logits, idx, R, E, k, normalize, err)", false, true},
    {"moe_expert",
     "@ *y, const @ *x, const int *idx, const @ *w, long long R, long long k, long long E, long long O, long long I, "
     "long long shared, int *err",
     "zkd_moe_expert(y, x, idx, w, R, k, E, O, I, shared, err)", false, true},
    {"moe_combine", "@ *y, const @ *o, const @ *wt, long long R, long long k, long long D", "zk_moe_combine_fwd(y, o, wt, R, k, D)",
     false, true},
    {"moe_shared_gate", "@ *y, const @ *x, const @ *g, long long R, long long D", "zk_moe_sgate_fwd(y, x, g, R, D)", false, true},
    {"set", "int *p, long long v", "zkd_set(p, v)", true, false},
};

/* The training families' files whose code the entries call, pasted before
 * decode.cu in each dtype's namespace; the last, moe.cu (21 KB, as much as
 * the others together), only for a model with mixture-of-experts ops, so
 * that a dense model's unit does not compile it. */
static const char *const reused[] = {"embedding.cu", "elementwise.cu", "norm.cu", "rope.cu", "moe.cu"};
enum { REUSED_MOE = 4 };

static const DType storage[] = {DT_F32, DT_BF16, DT_F16};

/* What the unit does with each family's forward ops (runtime/plan/prim.def's
 * family column), as decode_<family>: DECODE_RUN, the kernels above serve
 * them; DECODE_LOSS, the loss, which the decoder does not run; DECODE_NONE,
 * none (a plan whose forward has one carries no decode unit). A family
 * without an entry does not compile. */
enum { DECODE_NONE, DECODE_RUN, DECODE_LOSS };
enum {
    decode_embedding = DECODE_RUN,
    decode_linear = DECODE_RUN,
    decode_matmul = DECODE_RUN,
    decode_binary = DECODE_RUN,
    decode_norm = DECODE_RUN,
    decode_act = DECODE_RUN,
    decode_rope = DECODE_RUN,
    decode_attention = DECODE_RUN,
    decode_split = DECODE_RUN,
    decode_xent = DECODE_LOSS,
    decode_arange = DECODE_RUN,
    decode_scale = DECODE_RUN,
    decode_linxent = DECODE_LOSS,
    decode_moe = DECODE_RUN, /* routing, experts, combination, shared gate; the load statistics the decoder refuses */
    decode_gmlp = DECODE_NONE, /* the tiled MLP: no decode entry (zinfgen's host decoder runs it a row at a time) */
};
static const unsigned char decode_use[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = decode_##family,
#include "prim.def"
#undef PRIM
};

/* prim.def's moe family, whose decode entries need moe.cu. */
static bool is_moe_prim(int prim) {
    switch (prim) {
    case PRIM_MOE_TOPK:
    case PRIM_MOE_GATE:
    case PRIM_MOE_EXPERT:
    case PRIM_MOE_COMBINE:
    case PRIM_MOE_LOAD:
    case PRIM_MOE_BALANCE:
    case PRIM_MOE_SHARED_GATE: return true;
    default: return false;
    }
}

static char *read_kernel_text(CudaGen *cg, const char *name, DiagSink *d) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", cg->kernel_dir, name);
    FILE *f = fopen(path, "rb");
    char *out = NULL;
    int err = 0;
    if (!f) err = errno;
    else {
        long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (out = arena_alloc(cg->arena, (size_t)n + 1)) &&
            fread(out, 1, (size_t)n, f) == (size_t)n)
            out[n] = 0;
        else {
            out = NULL;
            err = ferror(f) ? EIO : ENOMEM;
        }
        fclose(f);
    }
    if (!out) {
        diag_error(d, SPAN_NONE, "cannot read kernel source %s: %s", path, strerror(err));
        diag_hint(d, "set ZINF_KERNEL_DIR to the stdlib/kernels directory");
    }
    return out;
}

/* Appends to an arena string (NULL once the arena failed). */
static char *cat(Arena *a, char *s, const char *t) { return s ? arena_printf(a, "%s%s", s, t) : NULL; }

/* params with every '@' replaced by ctype. */
static char *typed(Arena *a, const char *params, const char *ctype) {
    char *s = arena_strdup(a, "");
    for (const char *p = params; s && *p; p++) {
        const char *at = strchr(p, '@');
        size_t n = at ? (size_t)(at - p) : strlen(p);
        s = arena_printf(a, "%s%.*s%s", s, (int)n, p, at ? ctype : "");
        if (!at) break;
        p = at;
    }
    return s;
}

/* A kernel file's text as the unit holds it inside a dtype's namespace:
 * without its include of common.cuh (pasted once, before), and with each
 * `extern "C" __global__` a `__device__` (a function the entry points
 * call; an unmangled kernel could not be defined once per dtype). */
static char *device_text(Arena *a, const char *text) {
    static const char inc[] = "#include \"common.cuh\"", glob[] = "extern \"C\" __global__", dev[] = "__device__";
    char *s = arena_strdup(a, "");
    for (const char *p = text; s && *p;) {
        const char *i = strstr(p, inc), *g = strstr(p, glob);
        const char *at = i && (!g || i < g) ? i : g;
        if (!at) {
            s = cat(a, s, p);
            break;
        }
        s = arena_printf(a, "%s%.*s%s", s, (int)(at - p), p, at == i ? "" : dev);
        p = at + (at == i ? sizeof inc : sizeof glob) - 1;
    }
    return s;
}

int cuda_gen_decode_unit(CudaGen *cg, const Graph *g, CudaUnit *out, DiagSink *d) {
    bool used[sizeof storage / sizeof *storage] = {false}, moe = false;
    for (int o = 0; o < g->nforward; o++) {
        const GOp *op = &g->ops[o];
        if (op->kind != OP_FWD) continue;
        int use = (unsigned)op->prim < PRIM_COUNT ? decode_use[op->prim] : DECODE_NONE;
        moe |= use == DECODE_RUN && is_moe_prim(op->prim);
        if (use == DECODE_NONE) return 0;
        if (use == DECODE_LOSS) continue;
        for (int i = 0; i < op->nin + op->nout; i++) {
            int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
            for (size_t k = 0; t >= 0 && k < sizeof storage / sizeof *storage; k++) used[k] |= g->tensors[t].dtype == storage[k];
        }
    }
    size_t nused = 0;
    for (size_t k = 0; k < sizeof storage / sizeof *storage; k++) nused += used[k];
    if (!nused) return 0; /* no float tensor: nothing to decode */
    Arena *a = cg->arena;
    const char *common = cg->common ? cg->common : read_kernel_text(cg, "common.cuh", d);
    const char *text = common ? read_kernel_text(cg, "decode.cu", d) : NULL;
    const char *files[sizeof reused / sizeof *reused];
    for (size_t f = 0; text && f < sizeof reused / sizeof *reused; f++)
        if ((f != REUSED_MOE || moe) && !(files[f] = read_kernel_text(cg, reused[f], d))) text = NULL;
    if (!text) return -1;
    char *spec = arena_strdup(a, "");
    for (size_t k = 0; spec && k < sizeof storage / sizeof *storage; k++)
        if (used[k]) spec = arena_printf(a, "%s%s%s", spec, *spec ? ", " : "", cuda_dtype_name(storage[k]));
    if (!spec) {
        diag_error(d, SPAN_NONE, "cuda_gen: out of memory");
        return -1;
    }
    char *s = arena_printf(a,
                           "// zinf CUDA kernel unit: decode (%s)\n"
                           "// generated by zinfc from stdlib/kernels/decode.cu, the training kernels it calls and\n"
                           "// common.cuh: the one-position kernels of zinfgen --decode kv (no launches in the plan;\n"
                           "// the decoder finds them by name)\n"
                           "#define ZK_T float\n%s%s",
                           spec, moe ? "#define ZK_DECODE_MOE 1\n" : "", common);
    const char *first = NULL;
    for (size_t k = 0; k < sizeof storage / sizeof *storage; k++) {
        if (!used[k]) continue;
        const char *dn = cuda_dtype_name(storage[k]);
        if (!first) first = dn;
        s = cat(a, s, arena_printf(a, "\n// ---- %s: T = %s ----\nnamespace zkt_%s {\ntypedef %s T;\n", dn, dtype_ctype(storage[k]), dn,
                                   dtype_ctype(storage[k])));
        for (size_t f = 0; f < sizeof reused / sizeof *reused; f++)
            if (f != REUSED_MOE || moe) s = cat(a, s, device_text(a, files[f]));
        s = cat(a, s, device_text(a, text));
        s = cat(a, s, arena_printf(a, "} // namespace zkt_%s\n", dn));
    }
    s = cat(a, s, "\n// ---- the entry points, one per kernel and storage type ----\n");
    for (size_t e = 0; e < sizeof entries / sizeof *entries; e++)
        for (size_t k = 0; k < sizeof storage / sizeof *storage; k++) {
            const DecodeEntry *en = &entries[e];
            if (!used[k] || (en->once && strcmp(cuda_dtype_name(storage[k]), first)) || (en->moe && !moe)) continue;
            const char *dn = cuda_dtype_name(storage[k]);
            s = cat(a, s,
                    en->once ? arena_printf(a, "extern \"C\" __global__ void zkd_%s(%s) { zkt_%s::%s; }\n", en->name, en->params, dn, en->call)
                             : arena_printf(a, "extern \"C\" __global__ void zkd_%s_%s(%s) { zkt_%s::%s; }\n", en->name, dn,
                                            typed(a, en->params, dtype_ctype(storage[k])), dn, en->call));
        }
    if (!s || a->failed) {
        diag_error(d, SPAN_NONE, "cuda_gen: out of memory");
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->family = "decode";
    out->spec = spec;
    out->source = s;
    out->first_kernel = -1;
    unsigned char dg[32];
    nvrtc_sha256(s, strlen(s), dg);
    nvrtc_hex(dg, 32, out->hash);
    return 1;
}
