/* check_kernels: runs every CUDA kernel family on the GPU against the host
 * reference (runtime/hostk), then times the GEMMs against cuBLAS and the
 * attention against cuBLAS doing the same products, and prints one table.
 *
 *   check_kernels [--dry | --emu] [--only NAME] [--arch sm_90] [--no-timing] [-v]
 *
 * Each case is a small graph of ops (forward, then backward) built by hand;
 * cuda_gen lowers every op, NVRTC compiles the units for the device's
 * architecture, the driver API (libcuda, dlopen'd) runs the launches.
 * Inputs are fresh random values (never all zero: uniform in [-1, 1], ids
 * uniform in [0, V)); every tensor an op overwrites is poisoned with NaN on
 * both sides before it runs; gradients start from random values (the
 * kernels accumulate). Verdict per case: the largest normwise relative
 * error max|gpu - ref| / max|ref| over every tensor written, against
 * 1e-5 for f32 and 1e-2 for bf16/f16.
 *
 * --dry (or no GPU): compiles every unit and runs the host references, so
 * the harness itself is checked on a machine without a GPU; exit 3.
 * --emu: no GPU either, but the kernels RUN, compiled as C++ for the host
 * emulator (emu.h, emu.c: blocks of coroutine threads, mma.sync from the PTX
 * fragment layout); checks the kernels' logic here. Slow: small cases only.
 * Exit 0: every case passed; 1: a case failed; 2: setup error. */
#include <dlfcn.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../unit/cuda_models.h"
#include "check_lt.h"
#include "emu_wrap.h"
#include "cuda_gen.h"
#include "half.h"
#include "hostk.h"
#include "nvrtc.h"
#include "quant.h"

/* ---- driver API and cuBLAS, loaded at run time ------------------------------ */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUevent, *CUstream;

static struct {
    void *dl, *blas;
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(int *, int);
    CUresult (*DeviceGetAttribute)(int *, int, int);
    CUresult (*DeviceGetName)(char *, int, int);
    CUresult (*PrimaryCtxRetain)(CUcontext *, int);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*CtxSynchronize)(void);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*GetErrorString)(CUresult, const char **);
    /* cuBLAS */
    int (*blasCreate)(void **);
    int (*GemmEx)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                  const void *, void *, int, int, int, int);
    int (*GemmStridedBatchedEx)(void *, int, int, int, int, int, const void *, const void *, int, int, long long,
                                const void *, int, int, long long, const void *, void *, int, int, long long, int,
                                int, int);
    void *blas_handle;
} cu;

static void *sym(void *dl, const char *const *names) {
    for (; *names; names++) {
        void *p = dlsym(dl, *names);
        if (p) return p;
    }
    return NULL;
}
#define SYM(field, ...)                                                                     \
    do {                                                                                    \
        const char *n_[] = {__VA_ARGS__, NULL};                                             \
        *(void **)&cu.field = sym(cu.dl, n_);                                               \
        if (!cu.field) {                                                                    \
            snprintf(why, nwhy, "libcuda lacks %s", n_[0]);                                 \
            return false;                                                                   \
        }                                                                                   \
    } while (0)

static bool cu_load(char *why, size_t nwhy) {
    const char *libs[] = {"libcuda.so.1", "libcuda.so", "/usr/local/nvidia/lib64/libcuda.so.1",
                          "/usr/lib/x86_64-linux-gnu/libcuda.so.1", NULL};
    for (int i = 0; libs[i] && !cu.dl; i++) cu.dl = dlopen(libs[i], RTLD_NOW | RTLD_GLOBAL);
    if (!cu.dl) {
        snprintf(why, nwhy, "no CUDA driver (libcuda.so.1 not found)");
        return false;
    }
    SYM(Init, "cuInit");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
    SYM(DeviceGetName, "cuDeviceGetName");
    SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(ModuleLoadData, "cuModuleLoadData");
    SYM(ModuleGetFunction, "cuModuleGetFunction");
    SYM(MemAlloc, "cuMemAlloc_v2", "cuMemAlloc");
    SYM(MemFree, "cuMemFree_v2", "cuMemFree");
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2", "cuMemcpyHtoD");
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2", "cuMemcpyDtoH");
    SYM(MemsetD8, "cuMemsetD8_v2", "cuMemsetD8");
    SYM(LaunchKernel, "cuLaunchKernel");
    SYM(CtxSynchronize, "cuCtxSynchronize");
    SYM(EventCreate, "cuEventCreate");
    SYM(EventRecord, "cuEventRecord");
    SYM(EventSynchronize, "cuEventSynchronize");
    SYM(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
    SYM(GetErrorString, "cuGetErrorString");
    return true;
}

static const char *cu_err(CUresult r) {
    const char *s = NULL;
    if (cu.GetErrorString && cu.GetErrorString(r, &s) == 0 && s) return s;
    return "unknown CUDA error";
}

#define CK(call)                                                                                 \
    do {                                                                                         \
        CUresult r_ = (call);                                                                    \
        if (r_ != 0) {                                                                           \
            fprintf(stderr, "%s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #call, cu_err(r_), r_); \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)

static void blas_load(void) {
    const char *libs[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so",
                          NULL};
    for (int i = 0; libs[i] && !cu.blas; i++) cu.blas = dlopen(libs[i], RTLD_NOW | RTLD_GLOBAL);
    if (!cu.blas) return;
    *(void **)&cu.blasCreate = dlsym(cu.blas, "cublasCreate_v2");
    *(void **)&cu.GemmEx = dlsym(cu.blas, "cublasGemmEx");
    *(void **)&cu.GemmStridedBatchedEx = dlsym(cu.blas, "cublasGemmStridedBatchedEx");
    if (!cu.blasCreate || !cu.GemmEx || cu.blasCreate(&cu.blas_handle) != 0) cu.blas_handle = NULL;
}

/* ---- device memory and launches: the GPU, or host memory under --emu ---- */

static int gpu = 0, emu = 0, verbose = 0; /* gpu: kernels run (on the GPU, or emulated when emu) */

int emu_launch(void (*fn)(void **), void **params, const unsigned grid[3], const unsigned block[3], char *err,
               size_t nerr);

static void d_alloc(CUdeviceptr *p, size_t n) {
    if (emu) {
        void *h = malloc(n ? n : 4);
        if (!h) exit(2);
        *p = (CUdeviceptr)(uintptr_t)h;
    } else {
        CK(cu.MemAlloc(p, n ? n : 4));
    }
}
static void d_h2d(CUdeviceptr d, const void *h, size_t n) {
    if (emu) memcpy((void *)(uintptr_t)d, h, n);
    else CK(cu.MemcpyHtoD(d, h, n));
}
static void d_d2h(void *h, CUdeviceptr d, size_t n) {
    if (emu) memcpy(h, (void *)(uintptr_t)d, n);
    else CK(cu.MemcpyDtoH(h, d, n));
}
static void d_memset(CUdeviceptr d, int v, size_t n) {
    if (emu) memset((void *)(uintptr_t)d, v, n);
    else CK(cu.MemsetD8(d, (unsigned char)v, n));
}
static void d_free(CUdeviceptr d) {
    if (emu) free((void *)(uintptr_t)d);
    else CK(cu.MemFree(d));
}

/* Under --emu a unit is compiled by the host C++ compiler into a shared
 * object with a trampoline per entry point: emu_tramp_NAME(void **params)
 * (tests/gpu/emu_wrap.c, shared with the fake CUDA driver's unit builder). */
static void *emu_build(const CudaKernel *k) {
    char dir[256], cu_path[320], so[320], cmd[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zinf-emu", tmp && *tmp ? tmp : "/tmp");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) exit(2);
    /* named by the hash of the unit and of emu.h, so an edit of either rebuilds */
    static char *hdr;
    if (!hdr) {
        FILE *hf = fopen(ZINF_EMU_HEADER, "rb");
        if (!hf) {
            fprintf(stderr, "check_kernels: cannot read %s\n", ZINF_EMU_HEADER);
            exit(2);
        }
        hdr = calloc(1, 1 << 16);
        if (!hdr || fread(hdr, 1, (1 << 16) - 1, hf) == 0) exit(2);
        fclose(hf);
    }
    size_t ls = strlen(k->source), lh = strlen(hdr);
    char *both = malloc(ls + lh + 1);
    if (!both) exit(2);
    memcpy(both, k->source, ls);
    memcpy(both + ls, hdr, lh + 1);
    unsigned char dg[32];
    char hex[65];
    nvrtc_sha256(both, ls + lh, dg);
    nvrtc_hex(dg, 32, hex);
    free(both);
    snprintf(cu_path, sizeof cu_path, "%s/%.24s.cu", dir, hex);
    snprintf(so, sizeof so, "%s/%.24s.so", dir, hex);
    FILE *f = fopen(so, "r");
    if (f) fclose(f);
    else {
        char why[1024];
        if (emu_compile_unit(k->source, cu_path, so, ZINF_EMU_HEADER, why, sizeof why) != 0) {
            fprintf(stderr, "check_kernels: emulator build of %s failed: %s\n", k->family, why);
            exit(2);
        }
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "check_kernels: %s\n", dlerror());
        exit(2);
    }
    return h;
}

static void d_launch(CUmodule m, const CudaKernel *k, void **params) {
    if (emu) {
        char name[160], err[256];
        snprintf(name, sizeof name, "emu_tramp_%s", k->entry);
        void (*fn)(void **);
        *(void **)&fn = dlsym(m, name);
        if (!fn) {
            fprintf(stderr, "check_kernels: no %s in the emulated unit\n", name);
            exit(2);
        }
        if (emu_launch(fn, params, k->grid, k->block, err, sizeof err) != 0) {
            fprintf(stderr, "check_kernels: %s: %s\n", k->comment, err);
            exit(1);
        }
        return;
    }
    CUfunction fn;
    CK(cu.ModuleGetFunction(&fn, m, k->entry));
    CK(cu.LaunchKernel(fn, k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2], k->smem, NULL,
                       params, NULL));
    CK(cu.CtxSynchronize());
}

/* ---- cases -------------------------------------------------------------------- */

static char arch[16] = "sm_90";
static CudaGen cg;
static Arena garena;
static NvrtcOptions nvrtc_opts; /* ZINF_CACHE_DIR when set (main) */

typedef struct Mod {
    char hash[65];
    CUmodule mod;
} Mod;
static Mod mods[256];
static int nmods, ncompiled;

static CUmodule unit_module(const CudaKernel *k) {
    for (int i = 0; i < nmods; i++)
        if (!strcmp(mods[i].hash, k->hash)) return mods[i].mod;
    NvrtcResult r;
    if (emu) {
        CUmodule m = emu_build(k);
        if (nmods < 256) {
            memcpy(mods[nmods].hash, k->hash, 65);
            mods[nmods++].mod = m;
        }
        ncompiled++;
        return m;
    }
    if (nvrtc_compile(k->source, k->family, arch, &nvrtc_opts, &r) != 0) {
        fprintf(stderr, "check_kernels: %s\n", r.error);
        exit(2);
    }
    ncompiled++;
    CUmodule m = NULL;
    if (gpu) CK(cu.ModuleLoadData(&m, r.cubin));
    nvrtc_result_free(&r);
    if (nmods < 256) {
        memcpy(mods[nmods].hash, k->hash, 65);
        mods[nmods++].mod = m;
    }
    return m;
}

static const float rt_values[CRT_COUNT] = {[CRT_LR] = 1e-3f, [CRT_BC1] = 0.1f, [CRT_BC2] = 0.05f,
                                           [CRT_INV_LOSS_SCALE] = 1.0f, [CRT_LOSS_GRAD] = 1.0f};

typedef struct Case {
    const char *name;
    Arena a;
    Graph g;
    void *h[128];         /* host storage per tensor (dtype bytes) */
    CUdeviceptr d[128];
    int64_t irange[128];  /* i32 tensors: values in [0, irange) */
    bool positive[128];
    bool written[128];
    bool poisoned[128];
    int nkernels;
    int32_t *seg;         /* packed rows: the sample starts [B*T] (both sides read them), NULL: none */
    bool generic;         /* the reference through hk_run_fwd/bwd with every attribute of the op */
    int64_t nseg;
    CUdeviceptr dseg;
    int dequant_bad;      /* dequantized weights (zk_dequant_*) that differ from the host's decoding */
} Case;

/* bytes of a tensor: whole blocks of a quantized weight (nf4, int8) */
static size_t tbytes(const GTensor *t) {
    return dtype_is_quant(t->dtype) ? (size_t)dtype_bytes(t->dtype, t->numel) : (size_t)t->numel * hk_dtype_size(t->dtype);
}

static void case_init(Case *c, const char *name, DType dt) {
    memset(c, 0, sizeof *c);
    c->name = name;
    arena_init(&c->a);
    graph_init(&c->g, &c->a);
    c->g.train.dtype = dt;
    c->g.train.beta1 = 0.9;
    c->g.train.beta2 = 0.95;
    c->g.train.eps = 1e-8;
    c->g.train.weight_decay = 0.1;
    c->g.train.grad_clip = 0.5;
}

static int tn(Case *c, const char *name, DType dt, TensorClass cls, int rank, int64_t d0, int64_t d1, int64_t d2) {
    int t = cm_t(&c->g, name, dt, cls, rank, d0, d1, d2);
    if (t < 0 || t >= 128) {
        fprintf(stderr, "check_kernels: too many tensors in %s\n", c->name);
        exit(2);
    }
    return t;
}

static int fwd(Case *c, PrimId p, const int *ins, int nin, const int *outs, int nout, int64_t i0, int64_t i1, double f0) {
    GOp o = cm_op(p);
    o.nin = nin;
    for (int i = 0; i < nin; i++) o.in[i] = ins[i];
    o.nout = nout;
    for (int i = 0; i < nout; i++) o.out[i] = outs[i];
    o.iattr[0] = i0;
    o.iattr[1] = i1;
    o.fattr[0] = f0;
    return graph_add_op(&c->g, &o);
}

/* The backward op of forward op f: output gradients (inputs) dy, and a
 * gradient for every differentiable float input. */
static int bwd(Case *c, int f) {
    GOp fo = c->g.ops[f];
    GOp b = fo;
    b.kind = OP_BWD;
    b.fwd = f;
    b.nfin = fo.nin;
    int n = 0;
    for (int i = 0; i < fo.nin; i++) b.in[n++] = fo.in[i];
    for (int j = 0; j < fo.nout; j++) b.in[n++] = fo.out[j];
    for (int j = 0; j < fo.nout; j++) {
        const GTensor *y = &c->g.tensors[fo.out[j]];
        b.in[n++] = tn(c, arena_printf(&c->a, "d%s", y->name), y->dtype, TC_ACT, y->rank, y->dims[0], y->dims[1], y->dims[2]);
        if (y->rank == 0) c->g.tensors[b.in[n - 1]].rank = 0;
    }
    b.nin = n;
    b.nout = fo.nin;
    unsigned m = ad_differentiable_inputs(fo.prim);
    for (int i = 0; i < fo.nin; i++) {
        const GTensor *x = &c->g.tensors[fo.in[i]];
        if (!(m >> i & 1) || x->dtype == DT_I32 || dtype_is_quant(x->dtype)) { /* a quantized weight is frozen */
            b.out[i] = -1;
            continue;
        }
        GTensor xc = *x;
        int gt = tn(c, arena_printf(&c->a, "d%s", xc.name), xc.dtype, TC_ACT, xc.rank, xc.dims[0], xc.dims[1], xc.dims[2]);
        b.out[i] = gt;
    }
    return graph_add_op(&c->g, &b);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static HkTensor ht(Case *c, int t) {
    if (t < 0) {
        HkTensor z;
        memset(&z, 0, sizeof z);
        return z;
    }
    const GTensor *x = &c->g.tensors[t];
    return hk_tensor(c->h[t], x->dtype, x->rank, x->dims);
}

/* ---- host reference of one op ---- */

static double norm_of_grads(Case *c) {
    double s = 0;
    for (int t = 0; t < c->g.ntensors; t++) {
        const GTensor *p = &c->g.tensors[t];
        if (p->cls != TC_PARAM || p->grad < 0) continue;
        HkTensor g = ht(c, p->grad);
        for (int64_t i = 0; i < p->numel; i++) {
            double v = hk_get(&g, i);
            s += v * v;
        }
    }
    return sqrt(s);
}

static size_t ref_ws_bytes(Case *c, int op);

/* The host's generic entries (what the host executor calls), with the op's
 * attributes as they are: the window, scale and soft-cap of attention, the
 * offset of rmsnorm, YaRN's rope, softcap. */
static int ref_generic(const GOp *o, HkTensor *in, HkTensor *out, void *w, size_t wsz) {
    if (o->kind == OP_FWD) return hk_run_fwd(o->prim, in, o->nin, out, o->nout, o->iattr, o->fattr, w, wsz);
    int nf = o->nfin, nout = (o->nin - nf) / 2;
    return hk_run_bwd(o->prim, in, nf, &in[nf], &in[nf + nout], nout, out, o->iattr, o->fattr, w, wsz);
}

static void ref_op(Case *c, int op, void **ws) {
    const GOp *o = &c->g.ops[op];
    HkTensor in[GRAPH_MAX_IN], out[GRAPH_MAX_OUT];
    for (int i = 0; i < GRAPH_MAX_IN; i++) in[i] = ht(c, i < o->nin ? o->in[i] : -1);
    for (int i = 0; i < GRAPH_MAX_OUT; i++) out[i] = ht(c, i < o->nout ? o->out[i] : -1);
    int rc = 0;
    int f = o->kind == OP_BWD ? o->fwd : op;
    void *w = ws[f];
    if (c->generic && (o->kind == OP_FWD || o->kind == OP_BWD)) {
        int64_t W = o->prim == PRIM_ATTENTION ? o->iattr[IA_ATTENTION_WINDOW] : 0, kv = o->iattr[IA_ATTENTION_KV_HEADS];
        if (o->prim == PRIM_ATTENTION && c->seg) /* packed rows with a window */
            rc = o->kind == OP_FWD
                     ? hk_attention_fwd_window(&in[0], &in[1], &in[2], &out[0], o->iattr[IA_ATTENTION_HEADS],
                                               kv ? kv : o->iattr[IA_ATTENTION_HEADS], W, c->seg, w)
                     : hk_attention_bwd_window(&in[0], &in[1], &in[2], &in[o->nfin + 1], o->out[0] >= 0 ? &out[0] : NULL,
                                               o->out[1] >= 0 ? &out[1] : NULL, o->out[2] >= 0 ? &out[2] : NULL,
                                               o->iattr[IA_ATTENTION_HEADS], kv ? kv : o->iattr[IA_ATTENTION_HEADS], W,
                                               c->seg, w);
        else rc = ref_generic(o, in, out, w, ref_ws_bytes(c, f));
        if (rc != 0) {
            fprintf(stderr, "check_kernels: %s: host reference of op %d (%s %s) failed: %s\n", c->name, op,
                    op_kind_names[o->kind], prim_names[o->prim], hk_strerror(rc));
            exit(2);
        }
        return;
    }
    double eps = o->fattr[0] > 0 ? o->fattr[0] : 1e-5;
    HkRope rope = hk_rope_attrs(o->iattr, o->fattr, o->table, o->ntable);
    /* rmsnorm per head: the kernels on [rows*H, hd] views */
    int64_t nh = o->prim == PRIM_RMSNORM ? o->iattr[0] : 1;
    HkTensor x0 = hk_heads_view(&in[0], nh), y0 = hk_heads_view(&out[0], nh);
    if (o->kind == OP_FWD) {
        switch (o->prim) {
        case PRIM_EMBEDDING: rc = hk_embedding_fwd(&in[0], &in[1], &out[0]); break;
        case PRIM_LINEAR: rc = hk_linear_fwd(&in[0], &in[1], o->nin > 2 ? &in[2] : NULL, &out[0], w); break;
        case PRIM_MATMUL: rc = hk_matmul_fwd(&in[0], &in[1], &out[0], o->iattr[0], o->iattr[1], w); break;
        case PRIM_ADD: rc = hk_add_fwd(&in[0], &in[1], &out[0]); break;
        case PRIM_MUL: rc = hk_mul_fwd(&in[0], &in[1], &out[0]); break;
        case PRIM_LAYERNORM:
            rc = hk_layernorm_fwd(&in[0], o->nin > 1 ? &in[1] : NULL, o->nin > 2 ? &in[2] : NULL, &out[0], eps, w);
            break;
        case PRIM_RMSNORM: rc = hk_rmsnorm_fwd(&x0, o->nin > 1 ? &in[1] : NULL, &y0, eps, w); break;
        case PRIM_GELU: rc = hk_gelu_fwd(&in[0], &out[0]); break;
        case PRIM_SILU: rc = hk_silu_fwd(&in[0], &out[0]); break;
        case PRIM_ROPE: rc = c->seg ? hk_rope_fwd_packed(&in[0], &out[0], &rope, c->seg) : hk_rope_fwd(&in[0], &out[0], &rope); break;
        case PRIM_ATTENTION:
            if (c->seg)
                rc = hk_attention_fwd_packed(&in[0], &in[1], &in[2], &out[0], o->iattr[0],
                                             o->iattr[1] ? o->iattr[1] : o->iattr[0], c->seg, w);
            else
                rc = hk_attention_fwd(&in[0], &in[1], &in[2], &out[0], o->iattr[0], o->iattr[1] ? o->iattr[1] : o->iattr[0], w);
            break;
        case PRIM_SPLIT: rc = hk_split_fwd(&in[0], out, o->nout); break;
        case PRIM_CROSS_ENTROPY: rc = hk_cross_entropy_fwd(&in[0], &in[1], &out[0], w); break;
        case PRIM_ARANGE: rc = hk_arange_fwd(&out[0], o->iattr[0]); break;
        case PRIM_SCALE: rc = hk_scale_fwd(&in[0], &out[0], o->fattr[0]); break;
        default: rc = -99;
        }
    } else if (o->kind == OP_BWD) {
        int nf = o->nfin, nout = o->nin - nf;
        nout /= 2;
        HkTensor *dy = &in[nf + nout];
        HkTensor *d0 = o->out[0] >= 0 ? &out[0] : NULL, *d1 = o->nout > 1 && o->out[1] >= 0 ? &out[1] : NULL;
        HkTensor *d2 = o->nout > 2 && o->out[2] >= 0 ? &out[2] : NULL;
        switch (o->prim) {
        case PRIM_EMBEDDING: rc = hk_embedding_bwd(&in[1], dy, d0); break;
        case PRIM_LINEAR: rc = hk_linear_bwd(&in[0], &in[1], dy, d0, d1, d2, w); break;
        case PRIM_MATMUL: rc = hk_matmul_bwd(&in[0], &in[1], dy, d0, d1, o->iattr[0], o->iattr[1], w); break;
        case PRIM_ADD: rc = hk_add_bwd(&in[0], &in[1], dy, d0, d1); break;
        case PRIM_MUL: rc = hk_mul_bwd(&in[0], &in[1], dy, d0, d1); break;
        case PRIM_LAYERNORM: rc = hk_layernorm_bwd(&in[0], nf > 1 ? &in[1] : NULL, dy, d0, d1, d2, w); break;
        case PRIM_RMSNORM: {
            HkTensor dyv = hk_heads_view(dy, nh), d0v = d0 ? hk_heads_view(d0, nh) : x0;
            rc = hk_rmsnorm_bwd(&x0, nf > 1 ? &in[1] : NULL, &dyv, d0 ? &d0v : NULL, d1, w);
            break;
        }
        case PRIM_GELU: rc = hk_gelu_bwd(&in[0], dy, d0); break;
        case PRIM_SILU: rc = hk_silu_bwd(&in[0], dy, d0); break;
        case PRIM_ROPE: rc = c->seg ? hk_rope_bwd_packed(dy, d0, &rope, c->seg) : hk_rope_bwd(dy, d0, &rope); break;
        case PRIM_SCALE: rc = hk_scale_bwd(dy, d0, o->fattr[0]); break;
        case PRIM_ATTENTION:
            if (c->seg)
                rc = hk_attention_bwd_packed(&in[0], &in[1], &in[2], dy, d0, d1, d2, o->iattr[0],
                                             o->iattr[1] ? o->iattr[1] : o->iattr[0], c->seg, w);
            else
                rc = hk_attention_bwd(&in[0], &in[1], &in[2], dy, d0, d1, d2, o->iattr[0],
                                      o->iattr[1] ? o->iattr[1] : o->iattr[0], w);
            break;
        case PRIM_SPLIT: rc = hk_split_bwd(dy, nout, d0); break;
        case PRIM_CROSS_ENTROPY: rc = hk_cross_entropy_bwd(&in[0], &in[1], dy, d0, w); break;
        default: rc = -99;
        }
    } else if (o->kind == OP_ZERO_GRAD) {
        memset(c->h[o->out[0]], 0, tbytes(&c->g.tensors[o->out[0]]));
    } else if (o->kind == OP_GRAD_NORM) {
        ((float *)c->h[o->out[0]])[0] = (float)norm_of_grads(c);
    } else if (o->kind == OP_ADAM) {
        const TrainConfig *tc = &c->g.train;
        HkTensor p = ht(c, o->in[0]), g = ht(c, o->in[1]);
        float *ms = o->in[2] >= 0 ? c->h[o->in[2]] : NULL, *m = c->h[o->in[3]], *v = c->h[o->in[4]];
        double scale = rt_values[CRT_INV_LOSS_SCALE];
        if (o->in[5] >= 0) {
            double nr = ((float *)c->h[o->in[5]])[0] * scale;
            if (tc->grad_clip > 0 && nr > 0) scale *= fmin(1.0, tc->grad_clip / (nr + 1e-6));
        }
        for (int64_t i = 0; i < hk_numel(&p); i++) {
            double gi = hk_get(&g, i) * scale;
            m[i] = (float)(tc->beta1 * m[i] + (1 - tc->beta1) * gi);
            v[i] = (float)(tc->beta2 * v[i] + (1 - tc->beta2) * gi * gi);
            double w0 = ms ? ms[i] : hk_get(&p, i);
            double wn = w0 - rt_values[CRT_LR] * ((m[i] / rt_values[CRT_BC1]) / (sqrt(v[i] / rt_values[CRT_BC2]) + tc->eps) +
                                                  tc->weight_decay * w0);
            if (ms) ms[i] = (float)wn;
            hk_set(&p, i, (float)wn);
        }
    }
    if (rc != 0) {
        fprintf(stderr, "check_kernels: %s: host reference of op %d (%s %s) failed: %s\n", c->name, op,
                op_kind_names[o->kind], prim_names[o->prim], rc == -99 ? "no reference" : hk_strerror(rc));
        exit(2);
    }
}

static size_t ref_ws_bytes(Case *c, int op) {
    const GOp *o = &c->g.ops[op];
    if (o->kind != OP_FWD) return 0;
    if (c->generic) {
        HkTensor in[GRAPH_MAX_IN], out[GRAPH_MAX_OUT];
        for (int i = 0; i < GRAPH_MAX_IN; i++) in[i] = ht(c, i < o->nin ? o->in[i] : -1);
        for (int i = 0; i < GRAPH_MAX_OUT; i++) out[i] = ht(c, i < o->nout ? o->out[i] : -1);
        return hk_workspace_bytes(o->prim, in, o->nin, out, o->nout, o->iattr);
    }
    HkTensor in0 = ht(c, o->in[0]), in1 = ht(c, o->nin > 1 ? o->in[1] : -1), out0 = ht(c, o->out[0]);
    switch (o->prim) {
    case PRIM_LINEAR: return hk_linear_workspace_bytes(&in0, &in1, &out0);
    case PRIM_MATMUL: return hk_matmul_workspace_bytes(&in0, &in1, &out0);
    case PRIM_LAYERNORM: return hk_layernorm_workspace_bytes(&in0);
    case PRIM_RMSNORM: {
        HkTensor v = hk_heads_view(&in0, o->iattr[0]);
        return hk_rmsnorm_workspace_bytes(&v);
    }
    case PRIM_ATTENTION: return hk_attention_workspace_bytes(&in0, o->iattr[0]);
    case PRIM_CROSS_ENTROPY: return hk_cross_entropy_workspace_bytes(&in0);
    default: return 0;
    }
}

/* ---- device execution of one op ---- */

/* A weight dequantized into the workspace by launch k (zk_dequant_nf4,
 * zk_dequant_int8: ws, w, n) equals the host's decoding (quant_decode)
 * rounded to the case's dtype, bit for bit; false, said, when not. */
static bool dequant_exact(Case *c, const CudaKernel *k, CUdeviceptr ws) {
    int w = k->args[1].tensor;
    int64_t n = k->args[2].i;
    DType dt = c->g.train.dtype;
    size_t es = dt == DT_F32 ? 4 : 2;
    float *ref = malloc((size_t)n * 4);
    uint8_t *got = malloc((size_t)n * es);
    if (!ref || !got) {
        fprintf(stderr, "check_kernels: out of memory\n");
        exit(2);
    }
    quant_decode(c->g.tensors[w].dtype == DT_NF4 ? QUANT_NF4 : QUANT_INT8, c->h[w], n, ref);
    d_d2h(got, ws + (CUdeviceptr)k->args[0].ws_off, (size_t)n * es);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        bool same;
        if (dt == DT_F32) same = !memcmp(got + i * 4, &ref[i], 4);
        else {
            uint16_t h;
            memcpy(&h, got + i * 2, 2);
            same = h == (dt == DT_BF16 ? half_f32_to_bf16(ref[i]) : half_f32_to_f16(ref[i]));
        }
        if (!same && !bad++) first = i;
    }
    if (bad)
        printf("    %s: %s's dequantized %s differs from the host's in %lld of %lld elements (first %lld)\n", c->name, k->entry,
               c->g.tensors[w].name, (long long)bad, (long long)n, (long long)first);
    free(ref);
    free(got);
    return bad == 0;
}

static void dev_op(Case *c, int op) {
    CudaKernel ks[256];
    CudaOpInfo info;
    DiagSink d;
    diag_init(&d);
    int n = cuda_gen_op(&cg, &c->g, op, ks, 256, &info, &d);
    if (n < 0 || n > 256) {
        fprintf(stderr, "check_kernels: %s: cuda_gen failed on op %d:\n", c->name, op);
        diag_render(&d, NULL, stderr, false);
        exit(2);
    }
    diag_free(&d);
    c->nkernels += n;
    CUdeviceptr ws = 0;
    if (gpu && info.ws_bytes) {
        d_alloc(&ws, (size_t)info.ws_bytes);
        d_memset(ws, 0xff, (size_t)info.ws_bytes); /* the kernels must initialise what they read */
    }
    for (int i = 0; i < n; i++) {
        const CudaKernel *k = &ks[i];
        CUmodule m = unit_module(k);
        if (!gpu) continue;
        CUdeviceptr ptrs[CUDA_MAX_ARGS];
        long long ints[CUDA_MAX_ARGS];
        float flts[CUDA_MAX_ARGS];
        void *params[CUDA_MAX_ARGS];
        for (int j = 0; j < k->nargs; j++) {
            const CudaArg *a = &k->args[j];
            switch (a->kind) {
            case CARG_TENSOR: ptrs[j] = c->d[a->tensor] + (CUdeviceptr)a->off; params[j] = &ptrs[j]; break; /* off: rows of a chunk */
            case CARG_WS: ptrs[j] = ws + (CUdeviceptr)a->ws_off; params[j] = &ptrs[j]; break;
            case CARG_NULL: ptrs[j] = 0; params[j] = &ptrs[j]; break;
            case CARG_I64: ints[j] = a->i; params[j] = &ints[j]; break;
            case CARG_F32: flts[j] = a->f; params[j] = &flts[j]; break;
            case CARG_RT: flts[j] = rt_values[a->rt]; params[j] = &flts[j]; break;
            case CARG_SEG: ptrs[j] = c->dseg; params[j] = &ptrs[j]; break;
            }
        }
        d_launch(m, k, params);
        if (!strncmp(k->entry, "zk_dequant_", 11) && !dequant_exact(c, k, ws)) c->dequant_bad++;
    }
    if (gpu && info.err_off >= 0) {
        int err[3];
        d_d2h(err, ws + (CUdeviceptr)info.err_off, sizeof err);
        if (err[0]) {
            fprintf(stderr, "check_kernels: %s: the kernel reported a bad %s %d at %d\n", c->name, info.err_what, err[1], err[2]);
            exit(2);
        }
    }
    if (ws) d_free(ws);
}

typedef struct Row {
    char name[48];
    char dtype[8];
    int kernels;
    double err, limit;
    char worst[48];
    bool pass;
} Row;
/* One row a case, grown as cases are added (a fixed array overflowed
 * silently without _FORTIFY_SOURCE once the cases outgrew it). */
static Row *rows;
static int nrows, rows_cap;

/* The next row, zeroed; the harness cannot go on without it. */
static Row *row_new(void) {
    if (nrows == rows_cap) {
        int cap = rows_cap ? 2 * rows_cap : 64;
        Row *grown = realloc(rows, sizeof *rows * (size_t)cap);
        if (!grown) {
            fprintf(stderr, "check_kernels: out of memory for %d result rows\n", cap);
            exit(2);
        }
        rows = grown, rows_cap = cap;
    }
    Row *r = &rows[nrows++];
    memset(r, 0, sizeof *r);
    return r;
}

static double limit_of(DType dt) { return dt == DT_F32 ? 1e-5 : 1e-2; }

/* Runs every op of the case on both sides and compares what was written. */
static const char *only; /* --only A,B: run the cases whose name contains A or B */

static bool wanted(const char *name) {
    if (!only) return true;
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        for (const char *q = name; *q; q++)
            if (!strncmp(q, p, n)) return true;
        p += n + (e ? 1 : 0);
    }
    return false;
}

static void case_run(Case *c) {
    Graph *g = &c->g;
    if (!wanted(c->name)) {
        arena_free(&c->a);
        return;
    }
    for (int k = 0; k < g->nops; k++) {
        const GOp *o = &g->ops[k];
        for (int j = 0; j < o->nout; j++)
            if (o->out[j] >= 0) {
                c->written[o->out[j]] = true;
                if (o->kind != OP_BWD) c->poisoned[o->out[j]] = true;
            }
        if (o->kind == OP_ADAM)
            for (int j = 0; j < 5; j++)
                if (j != 1 && o->in[j] >= 0) c->written[o->in[j]] = true;
    }
    for (int t = 0; t < g->ntensors; t++) {
        const GTensor *x = &g->tensors[t];
        size_t nb = tbytes(x);
        c->h[t] = malloc(nb ? nb : 4);
        HkTensor h = ht(c, t);
        if (c->poisoned[t]) memset(c->h[t], 0xff, nb);
        else if (dtype_is_quant(x->dtype)) { /* a frozen weight stored quantized: values over three decades, encoded */
            float *v = malloc((size_t)x->numel * 4);
            if (!v) exit(2);
            for (int64_t i = 0; i < x->numel; i++) v[i] = (float)((2 * urand() - 1) * pow(10.0, -3.0 * urand()));
            quant_encode(x->dtype == DT_NF4 ? QUANT_NF4 : QUANT_INT8, v, x->numel, c->h[t]);
            free(v);
        } else if (x->dtype == DT_I32)
            for (int64_t i = 0; i < x->numel; i++) ((int32_t *)c->h[t])[i] = (int32_t)(urand() * (double)c->irange[t]);
        else
            for (int64_t i = 0; i < x->numel; i++) {
                double v = 2 * urand() - 1;
                if (c->positive[t]) v = fabs(v) * 0.01;
                if (v == 0) v = 0.5;
                hk_set(&h, i, (float)v);
            }
        if (gpu) {
            d_alloc(&c->d[t], nb);
            d_h2d(c->d[t], c->h[t], nb ? nb : 4);
        }
    }
    if (gpu && c->seg) {
        d_alloc(&c->dseg, (size_t)c->nseg * 4);
        d_h2d(c->dseg, c->seg, (size_t)c->nseg * 4);
    }
    void *ws[64] = {0};
    for (int k = 0; k < g->nops && k < 64; k++) {
        size_t b = ref_ws_bytes(c, k);
        if (b) ws[k] = malloc(b);
    }
    for (int k = 0; k < g->nops; k++) {
        dev_op(c, k);
        ref_op(c, k, ws);
    }
    Row *r = row_new();
    snprintf(r->name, sizeof r->name, "%s", c->name);
    snprintf(r->dtype, sizeof r->dtype, "%s", cuda_dtype_name(g->train.dtype));
    r->kernels = c->nkernels;
    r->limit = limit_of(g->train.dtype);
    r->pass = true;
    for (int t = 0; t < g->ntensors; t++) {
        const GTensor *x = &g->tensors[t];
        if (!c->written[t]) continue;
        if (gpu) {
            size_t nb = tbytes(x);
            void *dv = malloc(nb ? nb : 4);
            d_d2h(dv, c->d[t], nb ? nb : 4);
            HkTensor hd = hk_tensor(dv, x->dtype, x->rank, x->dims), hr = ht(c, t);
            double md = 0, mr = 0;
            bool nan = false;
            for (int64_t i = 0; i < x->numel; i++) {
                double a = hk_get(&hd, i), b = hk_get(&hr, i);
                if (!isfinite(a) || !isfinite(b)) nan = true;
                md = fmax(md, fabs(a - b));
                mr = fmax(mr, fabs(b));
            }
            double e = nan ? INFINITY : md / (mr > 0 ? mr : 1);
            if (verbose)
                printf("    %-20s %-12s rel err %.3g   [0] gpu %.6g ref %.6g   [last] gpu %.6g ref %.6g\n", c->name,
                       x->name, e, hk_get(&hd, 0), hk_get(&hr, 0), hk_get(&hd, x->numel - 1), hk_get(&hr, x->numel - 1));
            if (e > r->err || nan) {
                r->err = e;
                snprintf(r->worst, sizeof r->worst, "%s", x->name ? x->name : "?");
            }
            free(dv);
        }
    }
    if (gpu && !(r->err <= r->limit)) r->pass = false;
    if (c->dequant_bad) {
        r->pass = false;
        snprintf(r->worst, sizeof r->worst, "dequantized weight");
    }
    for (int t = 0; t < g->ntensors; t++) {
        free(c->h[t]);
        if (gpu && c->d[t]) d_free(c->d[t]);
    }
    for (int k = 0; k < 64; k++) free(ws[k]);
    if (gpu && c->dseg) d_free(c->dseg);
    free(c->seg);
    arena_free(&c->a);
}

/* ---- the cases ---- */

static void case_linear(DType dt, int64_t M, int64_t I, int64_t O, bool bias) {
    Case c;
    case_init(&c, arena_printf(&garena, "linear %ldx%ldx%ld%s", (long)M, (long)I, (long)O, bias ? "+b" : ""), dt);
    int x = tn(&c, "x", dt, TC_ACT, 2, M, I, 0), w = tn(&c, "w", dt, TC_PARAM, 2, I, O, 0);
    int b = tn(&c, "b", dt, TC_PARAM, 1, O, 0, 0), y = tn(&c, "y", dt, TC_ACT, 2, M, O, 0);
    int ins[3] = {x, w, b};
    int f = fwd(&c, PRIM_LINEAR, ins, bias ? 3 : 2, &y, 1, 0, 0, 0);
    bwd(&c, f);
    case_run(&c);
}

/* A linear whose frozen weight is stored quantized (train { quantize }):
 * dequantized into the op's workspace (checked bit for bit against the
 * host's decoding), then the GEMM; y and dx against the host kernels. */
static void case_linear_q(DType dt, DType qdt, int64_t M, int64_t I, int64_t O) {
    Case c;
    case_init(&c, arena_printf(&garena, "linear %s %ldx%ldx%ld", dtype_name(qdt), (long)M, (long)I, (long)O), dt);
    int x = tn(&c, "x", dt, TC_ACT, 2, M, I, 0), w = tn(&c, "w", qdt, TC_PARAM, 2, I, O, 0);
    int y = tn(&c, "y", dt, TC_ACT, 2, M, O, 0);
    c.g.tensors[w].frozen = true;
    int ins[2] = {x, w};
    int f = fwd(&c, PRIM_LINEAR, ins, 2, &y, 1, 0, 0, 0);
    bwd(&c, f);
    case_run(&c);
}

static void case_matmul(DType dt, bool ta, bool tb) {
    const int64_t S = 3, M = 70, K = 40, N = 50;
    Case c;
    case_init(&c, arena_printf(&garena, "matmul ta=%d tb=%d [3,70,40]", ta, tb), dt);
    int a = ta ? tn(&c, "a", dt, TC_ACT, 3, S, K, M) : tn(&c, "a", dt, TC_ACT, 3, S, M, K);
    int b = tb ? tn(&c, "b", dt, TC_PARAM, 2, N, K, 0) : tn(&c, "b", dt, TC_PARAM, 2, K, N, 0);
    int y = tn(&c, "y", dt, TC_ACT, 3, S, M, N);
    int ins[2] = {a, b};
    int f = fwd(&c, PRIM_MATMUL, ins, 2, &y, 1, ta, tb, 0);
    bwd(&c, f);
    case_run(&c);
}

static void case_attention(DType dt, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hd) {
    Case c;
    case_init(&c, arena_printf(&garena, "attention B%ld T%ld H%ld KV%ld hd%ld", (long)B, (long)T, (long)H, (long)KV, (long)hd), dt);
    int q = tn(&c, "q", dt, TC_ACT, 3, B, T, H * hd), k = tn(&c, "k", dt, TC_ACT, 3, B, T, KV * hd);
    int v = tn(&c, "v", dt, TC_ACT, 3, B, T, KV * hd), y = tn(&c, "o", dt, TC_ACT, 3, B, T, H * hd);
    int ins[3] = {q, k, v};
    int f = fwd(&c, PRIM_ATTENTION, ins, 3, &y, 1, H, KV, 0);
    bwd(&c, f);
    case_run(&c);
}

/* Packed rows: the sample lengths of each row in order (each row's sum T,
 * a 0 ends a row), as runtime/data/tokens.h lays them out: seg[b*T + t] is
 * where the sample holding t begins. */
static void case_seg(Case *c, int64_t B, int64_t T, const int *lens) {
    c->nseg = B * T;
    c->seg = malloc(sizeof *c->seg * (size_t)c->nseg);
    if (!c->seg) {
        fprintf(stderr, "check_kernels: out of memory\n");
        exit(2);
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t t = 0;
        for (; *lens; lens++) {
            for (int64_t i = 0; i < *lens && t + i < T; i++) c->seg[b * T + t + i] = (int32_t)t;
            t += *lens;
        }
        lens++;
        for (; t < T; t++) c->seg[b * T + t] = (int32_t)(t ? c->seg[b * T + t - 1] : 0);
    }
}

/* Attention over packed rows: each query sees the keys of its own sample
 * only (lens as for case_seg). */
static void case_attention_packed(DType dt, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hd, const int *lens) {
    Case c;
    case_init(&c, arena_printf(&garena, "attention packed B%ld T%ld H%ld KV%ld hd%ld", (long)B, (long)T, (long)H, (long)KV, (long)hd), dt);
    if (!wanted(c.name)) {
        arena_free(&c.a);
        return;
    }
    case_seg(&c, B, T, lens);
    int q = tn(&c, "q", dt, TC_ACT, 3, B, T, H * hd), k = tn(&c, "k", dt, TC_ACT, 3, B, T, KV * hd);
    int v = tn(&c, "v", dt, TC_ACT, 3, B, T, KV * hd), y = tn(&c, "o", dt, TC_ACT, 3, B, T, H * hd);
    int ins[3] = {q, k, v};
    int f = fwd(&c, PRIM_ATTENTION, ins, 3, &y, 1, H, KV, 0);
    bwd(&c, f);
    case_run(&c);
}

/* rope over packed rows: positions restart at each sample */
static void case_rope_packed(DType dt) {
    static const int lens[] = {7, 40, 1, 32, 0, 80, 0};
    Case c;
    case_init(&c, "rope packed [2,80,2*16]", dt);
    if (!wanted(c.name)) {
        arena_free(&c.a);
        return;
    }
    case_seg(&c, 2, 80, lens);
    int x = tn(&c, "x", dt, TC_ACT, 3, 2, 80, 32), y = tn(&c, "y", dt, TC_ACT, 3, 2, 80, 32);
    int f = fwd(&c, PRIM_ROPE, &x, 1, &y, 1, 2, 0, 10000.0);
    bwd(&c, f);
    case_run(&c);
}

static void case_norm(DType dt, bool ln, int64_t R, int64_t D) {
    Case c;
    case_init(&c, arena_printf(&garena, "%s [%ld,%ld]", ln ? "layernorm" : "rmsnorm", (long)R, (long)D), dt);
    int x = tn(&c, "x", dt, TC_ACT, 2, R, D, 0), g = tn(&c, "g", dt, TC_PARAM, 1, D, 0, 0);
    int b = tn(&c, "b", dt, TC_PARAM, 1, D, 0, 0), y = tn(&c, "y", dt, TC_ACT, 2, R, D, 0);
    int ins[3] = {x, g, b};
    int f = fwd(&c, ln ? PRIM_LAYERNORM : PRIM_RMSNORM, ins, ln ? 3 : 2, &y, 1, 0, 0, 1e-5);
    bwd(&c, f);
    case_run(&c);
}

static void case_unary(DType dt, PrimId p) {
    Case c;
    case_init(&c, arena_printf(&garena, "%s [7,333]", prim_names[p]), dt);
    int x = tn(&c, "x", dt, TC_ACT, 2, 7, 333, 0), y = tn(&c, "y", dt, TC_ACT, 2, 7, 333, 0);
    int f = fwd(&c, p, &x, 1, &y, 1, 0, 0, 0);
    bwd(&c, f);
    case_run(&c);
}

/* scale by -2.5 (LoRA's alpha / rank): the forward's fill then axpy, the backward's axpy */
static void case_scale(DType dt) {
    Case c;
    case_init(&c, "scale [7,333] by -2.5", dt);
    int x = tn(&c, "x", dt, TC_ACT, 2, 7, 333, 0), y = tn(&c, "y", dt, TC_ACT, 2, 7, 333, 0);
    int f = fwd(&c, PRIM_SCALE, &x, 1, &y, 1, 0, 0, -2.5);
    bwd(&c, f);
    case_run(&c);
}

static void case_binary(DType dt, PrimId p, bool bcast) {
    Case c;
    case_init(&c, arena_printf(&garena, "%s [4,30,20]%s", prim_names[p], bcast ? " + [20]" : ""), dt);
    int a = tn(&c, "a", dt, TC_ACT, 3, 4, 30, 20);
    int b = bcast ? tn(&c, "b", dt, TC_PARAM, 1, 20, 0, 0) : tn(&c, "b", dt, TC_ACT, 3, 4, 30, 20);
    int y = tn(&c, "y", dt, TC_ACT, 3, 4, 30, 20);
    int ins[2] = {a, b};
    int f = fwd(&c, p, ins, 2, &y, 1, 0, 0, 0);
    bwd(&c, f);
    case_run(&c);
}

static void case_rope(DType dt) {
    Case c;
    case_init(&c, "rope [2,300,3*32]", dt);
    int x = tn(&c, "x", dt, TC_ACT, 3, 2, 300, 96), y = tn(&c, "y", dt, TC_ACT, 3, 2, 300, 96);
    int f = fwd(&c, PRIM_ROPE, &x, 1, &y, 1, 3, 0, 10000.0);
    bwd(&c, f);
    case_run(&c);
}

/* llama3 frequency scaling (original context 64: some pairs kept, some
 * blended, the rest divided by 8) */
static void case_rope_llama3(DType dt) {
    Case c;
    case_init(&c, "rope llama3 [2,80,2*16]", dt);
    int x = tn(&c, "x", dt, TC_ACT, 3, 2, 80, 32), y = tn(&c, "y", dt, TC_ACT, 3, 2, 80, 32);
    int f = fwd(&c, PRIM_ROPE, &x, 1, &y, 1, 2, ROPE_LLAMA3, 10000.0);
    GOp *o = &c.g.ops[f];
    o->iattr[2] = 64;
    o->fattr[1] = 8;
    o->fattr[2] = 1;
    o->fattr[3] = 4;
    bwd(&c, f);
    case_run(&c);
}

/* rmsnorm per head (Qwen3's q/k norm): 4 heads of 24 over [40, 96], g [24] */
static void case_rmsnorm_heads(DType dt) {
    Case c;
    case_init(&c, "rmsnorm heads [40,4*24]", dt);
    int x = tn(&c, "x", dt, TC_ACT, 2, 40, 96, 0), g = tn(&c, "g", dt, TC_PARAM, 1, 24, 0, 0);
    int y = tn(&c, "y", dt, TC_ACT, 2, 40, 96, 0);
    int ins[2] = {x, g};
    int f = fwd(&c, PRIM_RMSNORM, ins, 2, &y, 1, 4, 0, 1e-6);
    bwd(&c, f);
    case_run(&c);
}

static void case_embedding(DType dt) {
    Case c;
    case_init(&c, "embedding V100 D64 ids[3,40]", dt);
    int tab = tn(&c, "table", dt, TC_PARAM, 2, 100, 64, 0), ids = tn(&c, "ids", DT_I32, TC_INPUT, 2, 3, 40, 0);
    int y = tn(&c, "y", dt, TC_ACT, 3, 3, 40, 64);
    c.irange[ids] = 100;
    int ins[2] = {tab, ids};
    int f = fwd(&c, PRIM_EMBEDDING, ins, 2, &y, 1, 0, 0, 0);
    bwd(&c, f);
    case_run(&c);
}

static void case_xent(DType dt) {
    Case c;
    case_init(&c, "cross_entropy [64,1000]", dt);
    int lg = tn(&c, "logits", dt, TC_ACT, 2, 64, 1000, 0), tg = tn(&c, "targets", DT_I32, TC_INPUT, 1, 64, 0, 0);
    int loss = tn(&c, "loss", DT_F32, TC_ACT, 0, 0, 0, 0);
    c.irange[tg] = 1000;
    int ins[2] = {lg, tg};
    int f = fwd(&c, PRIM_CROSS_ENTROPY, ins, 2, &loss, 1, 0, 0, 0);
    bwd(&c, f);
    case_run(&c);
}

static void case_split(DType dt) {
    Case c;
    case_init(&c, "split [4,10,96] -> 3", dt);
    int x = tn(&c, "x", dt, TC_ACT, 3, 4, 10, 96);
    int p[3] = {tn(&c, "p0", dt, TC_ACT, 3, 4, 10, 32), tn(&c, "p1", dt, TC_ACT, 3, 4, 10, 32),
                tn(&c, "p2", dt, TC_ACT, 3, 4, 10, 32)};
    int f = fwd(&c, PRIM_SPLIT, &x, 1, p, 3, 3, 0, 0);
    bwd(&c, f);
    case_run(&c);
}

/* grad norm over two parameters' gradients, clipping, AdamW of each. */
static void case_adam(DType dt) {
    Case c;
    case_init(&c, "grad_norm + clip + adamw", dt);
    Graph *g = &c.g;
    int ps[2] = {tn(&c, "p0", dt, TC_PARAM, 2, 100, 77, 0), tn(&c, "p1", dt, TC_PARAM, 1, 1000, 0, 0)};
    int norm = tn(&c, "grad_norm", DT_F32, TC_WORKSPACE, 0, 0, 0, 0);
    for (int i = 0; i < 2; i++) {
        GTensor p = g->tensors[ps[i]];
        int gr = tn(&c, arena_printf(&c.a, "grad.%s", p.name), dt, TC_GRAD, p.rank, p.dims[0], p.dims[1], 0);
        g->tensors[ps[i]].grad = gr;
    }
    GOp n = cm_op(PRIM_ARANGE);
    n.kind = OP_GRAD_NORM;
    n.nout = 1;
    n.out[0] = norm;
    graph_add_op(g, &n);
    for (int i = 0; i < 2; i++) {
        GTensor p = g->tensors[ps[i]];
        int ms = dt == DT_F32 ? -1 : tn(&c, "master", DT_F32, TC_MASTER, p.rank, p.dims[0], p.dims[1], 0);
        int m = tn(&c, "m", DT_F32, TC_MOMENTUM, p.rank, p.dims[0], p.dims[1], 0);
        int v = tn(&c, "v", DT_F32, TC_VARIANCE, p.rank, p.dims[0], p.dims[1], 0);
        c.positive[v] = true;
        GOp a = cm_op(PRIM_ARANGE);
        a.kind = OP_ADAM;
        a.nin = 6;
        a.in[0] = ps[i];
        a.in[1] = g->tensors[ps[i]].grad;
        a.in[2] = ms;
        a.in[3] = m;
        a.in[4] = v;
        a.in[5] = norm;
        graph_add_op(g, &a);
    }
    case_run(&c);
}


/* The launches outside the graph's ops: cast both ways, axpy, scale. Run
 * directly (not through case_run): f = cast(a); a2 = cast(f); a2 += 0.5 a; a2 *= 0.25. */
static void case_util(DType dt) {
    Case c;
    case_init(&c, "cast + axpy + scale [33,77]", dt);
    if (!wanted(c.name)) {
        arena_free(&c.a);
        return;
    }
    int a = tn(&c, "a", dt, TC_ACT, 2, 33, 77, 0), f = tn(&c, "f", DT_F32, TC_ACT, 2, 33, 77, 0);
    int a2 = tn(&c, "a2", dt, TC_ACT, 2, 33, 77, 0);
    int64_t n = 33 * 77;
    size_t es = hk_dtype_size(dt);
    for (int t = 0; t < 3; t++) c.h[t] = malloc((size_t)n * 4);
    HkTensor ha = ht(&c, a), ha2 = ht(&c, a2);
    for (int64_t i = 0; i < n; i++) hk_set(&ha, i, (float)(2 * urand() - 1 + 1e-3));
    memset(c.h[f], 0xff, (size_t)n * 4);
    memset(c.h[a2], 0xff, (size_t)n * es);
    CudaKernel ks[4];
    DiagSink d;
    diag_init(&d);
    int rc = cuda_gen_cast(&cg, &c.g, f, a, &ks[0], &d) | cuda_gen_cast(&cg, &c.g, a2, f, &ks[1], &d) |
             cuda_gen_axpy(&cg, &c.g, a2, a, 0.5, &ks[2], &d) | cuda_gen_scale(&cg, &c.g, a2, 0.25, &ks[3], &d);
    if (rc) {
        diag_render(&d, NULL, stderr, false);
        exit(2);
    }
    diag_free(&d);
    Row *r = row_new();
    snprintf(r->name, sizeof r->name, "%s", c.name);
    snprintf(r->dtype, sizeof r->dtype, "%s", cuda_dtype_name(dt));
    r->kernels = 4;
    r->limit = limit_of(dt);
    r->pass = true;
    if (gpu) {
        for (int t = 0; t < 3; t++) {
            d_alloc(&c.d[t], (size_t)n * 4);
            d_h2d(c.d[t], c.h[t], (size_t)n * 4);
        }
        for (int i = 0; i < 4; i++) {
            CUmodule m = unit_module(&ks[i]);
            CUdeviceptr ptrs[CUDA_MAX_ARGS];
            long long ints[CUDA_MAX_ARGS];
            float flts[CUDA_MAX_ARGS];
            void *params[CUDA_MAX_ARGS];
            for (int j = 0; j < ks[i].nargs; j++) {
                const CudaArg *ag = &ks[i].args[j];
                if (ag->kind == CARG_TENSOR) { ptrs[j] = c.d[ag->tensor]; params[j] = &ptrs[j]; }
                else if (ag->kind == CARG_I64) { ints[j] = ag->i; params[j] = &ints[j]; }
                else { flts[j] = ag->f; params[j] = &flts[j]; }
            }
            d_launch(m, &ks[i], params);
        }
    } else {
        for (int i = 0; i < 4; i++) unit_module(&ks[i]);
    }
    /* host reference */
    float *ref_f = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        ref_f[i] = hk_get(&ha, i);
        hk_set(&ha2, i, ref_f[i]);
        hk_set(&ha2, i, hk_get(&ha2, i) + 0.5f * hk_get(&ha, i));
        hk_set(&ha2, i, 0.25f * hk_get(&ha2, i));
    }
    if (gpu) {
        void *df = malloc((size_t)n * 4), *da2 = malloc((size_t)n * 4);
        d_d2h(df, c.d[f], (size_t)n * 4);
        d_d2h(da2, c.d[a2], (size_t)n * es);
        HkTensor tf = hk_tensor(df, DT_F32, 2, c.g.tensors[f].dims), ta2 = hk_tensor(da2, dt, 2, c.g.tensors[a2].dims);
        double m1 = 0, r1 = 0, m2 = 0, r2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double x = hk_get(&tf, i), y = hk_get(&ta2, i), rf = ref_f[i], ry = hk_get(&ha2, i);
            m1 = fmax(m1, isfinite(x) ? fabs(x - rf) : INFINITY);
            r1 = fmax(r1, fabs(rf));
            m2 = fmax(m2, isfinite(y) ? fabs(y - ry) : INFINITY);
            r2 = fmax(r2, fabs(ry));
        }
        double e1 = m1 / r1, e2 = m2 / r2;
        r->err = fmax(e1, e2);
        snprintf(r->worst, sizeof r->worst, "%s", e1 > e2 ? "f" : "a2");
        r->pass = r->err <= r->limit;
        free(df);
        free(da2);
        for (int t = 0; t < 3; t++) d_free(c.d[t]);
    }
    free(ref_f);
    for (int t = 0; t < 3; t++) free(c.h[t]);
    arena_free(&c.a);
}

/* ---- the attributes of long-context and Gemma models ---- */

/* Attention with a sliding window (0: none), the scores' scale (0:
 * 1/sqrt(hd)) and soft-capping (0: none), against the host's generic
 * entry; lens: packed rows as for case_seg (NULL: none). */
static void case_attention_attrs(DType dt, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hd, int64_t window,
                                 double scale, double softcap, const int *lens) {
    Case c;
    case_init(&c, arena_printf(&garena, "attention %s B%ldT%ld H%ld/%ld hd%ld w%ld s%g c%g",
                               lens ? "window seg" : window ? "window" : "softcap", (long)B, (long)T, (long)H,
                               (long)KV, (long)hd, (long)window, scale, softcap), dt);
    if (!wanted(c.name)) {
        arena_free(&c.a);
        return;
    }
    c.generic = true;
    if (lens) case_seg(&c, B, T, lens);
    int q = tn(&c, "q", dt, TC_ACT, 3, B, T, H * hd), k = tn(&c, "k", dt, TC_ACT, 3, B, T, KV * hd);
    int v = tn(&c, "v", dt, TC_ACT, 3, B, T, KV * hd), y = tn(&c, "o", dt, TC_ACT, 3, B, T, H * hd);
    int ins[3] = {q, k, v};
    int f = fwd(&c, PRIM_ATTENTION, ins, 3, &y, 1, H, KV, 0);
    c.g.ops[f].iattr[IA_ATTENTION_WINDOW] = window;
    c.g.ops[f].fattr[FA_ATTENTION_SCALE] = scale;
    c.g.ops[f].fattr[FA_ATTENTION_SOFTCAP] = softcap;
    bwd(&c, f);
    case_run(&c);
}

/* rmsnorm scaling by offset + g (Gemma: 1 + w), whole rows or per head */
static void case_rmsnorm_offset(DType dt, int64_t R, int64_t D, int64_t heads) {
    Case c;
    case_init(&c, arena_printf(&garena, "rmsnorm offset [%ld,%ld] heads %ld", (long)R, (long)D, (long)heads), dt);
    c.generic = true;
    int x = tn(&c, "x", dt, TC_ACT, 2, R, D, 0), g = tn(&c, "g", dt, TC_PARAM, 1, D / heads, 0, 0);
    int y = tn(&c, "y", dt, TC_ACT, 2, R, D, 0);
    int ins[2] = {x, g};
    int f = fwd(&c, PRIM_RMSNORM, ins, 2, &y, 1, heads > 1 ? heads : 0, 0, 1e-6);
    c.g.ops[f].fattr[FA_RMSNORM_OFFSET] = 1.0;
    bwd(&c, f);
    case_run(&c);
}

/* the softcap primitive (Gemma 2's final logits): inputs in [-1, 1] against a cap of 0.8 */
static void case_softcap(DType dt) {
    Case c;
    case_init(&c, "softcap [7,333] cap 0.8", dt);
    c.generic = true;
    int x = tn(&c, "x", dt, TC_ACT, 2, 7, 333, 0), y = tn(&c, "y", dt, TC_ACT, 2, 7, 333, 0);
    int f = fwd(&c, PRIM_SOFTCAP, &x, 1, &y, 1, 0, 0, 0.8);
    bwd(&c, f);
    case_run(&c);
}

/* YaRN frequency scaling: original context 32, factor 4; beta_fast and
 * beta_slow 0 (YaRN's 32 and 1) or 16 and 2 */
static void case_rope_yarn(DType dt, double fast, double slow) {
    Case c;
    case_init(&c, arena_printf(&garena, "rope yarn [2,80,2*16] beta %g/%g", fast, slow), dt);
    c.generic = true;
    int x = tn(&c, "x", dt, TC_ACT, 3, 2, 80, 32), y = tn(&c, "y", dt, TC_ACT, 3, 2, 80, 32);
    int f = fwd(&c, PRIM_ROPE, &x, 1, &y, 1, 2, ROPE_YARN, 10000.0);
    GOp *o = &c.g.ops[f];
    o->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] = 32;
    o->fattr[FA_ROPE_FACTOR] = 4;
    o->fattr[FA_ROPE_BETA_FAST] = fast;
    o->fattr[FA_ROPE_BETA_SLOW] = slow;
    bwd(&c, f);
    case_run(&c);
}

/* Phi-4-mini's rope on [2, T, 2 heads of 16]: partial rotary (rd of 16 columns of each head turn, the
 * rest pass through), attention_factor (cos and sin scaled) and longrope
 * (per-pair divisors, short_factor while the longest sample is at most
 * original_max_positions = 16, long_factor beyond; lens: packed rows as for
 * case_seg, NULL: a row is one sample), forward and backward against the
 * host's kernels (hk_rope_*, the lists through hk_rope_attrs). */
static void case_rope_phi(DType dt, const char *what, int64_t T, int64_t rd, double af, bool longrope, const int *lens) {
    /* 8 pairs at most (rd 16); distinct lists, neither all ones */
    static const double lists[2][16] = {
        {1.0, 1.25, 1.5, 2.0, 3.0, 4.5, 6.0, 8.0},
        {1.5, 2.75, 4.0, 6.5, 9.0, 13.0, 21.0, 34.0},
    };
    Case c;
    case_init(&c, arena_printf(&garena, "rope %s T%ld rd%ld af%.3g", what, (long)T, (long)rd, af), dt);
    if (!wanted(c.name)) {
        arena_free(&c.a);
        return;
    }
    if (lens) case_seg(&c, 2, T, lens);
    int x = tn(&c, "x", dt, TC_ACT, 3, 2, T, 32), y = tn(&c, "y", dt, TC_ACT, 3, 2, T, 32);
    int f = fwd(&c, PRIM_ROPE, &x, 1, &y, 1, 2, longrope ? ROPE_LONGROPE : ROPE_NONE, 10000.0);
    GOp *o = &c.g.ops[f];
    o->iattr[IA_ROPE_ROTARY_DIM] = rd;
    o->fattr[FA_ROPE_ATTENTION_FACTOR] = af;
    if (longrope) {
        double *tab = arena_alloc(&c.a, sizeof *tab * (size_t)rd);
        for (int64_t j = 0; j < rd / 2; j++) {
            tab[j] = lists[0][j];
            tab[rd / 2 + j] = lists[1][j];
        }
        o->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] = 16;
        o->table = tab;
        o->ntable = (int)rd;
    }
    bwd(&c, f);
    case_run(&c);
}

/* linear_cross_entropy, the chunked loss: x [R, D], w [D, V] ([V, D] with
 * transpose_b), `chunk` rows at a time (0: all; one that does not divide R
 * leaves a shorter last chunk), against the host's chunked kernels */
static void case_linxent(DType dt, int64_t R, int64_t D, int64_t V, int64_t chunk, bool tb) {
    Case c;
    case_init(&c, arena_printf(&garena, "linxent R%ld D%ld V%ld chunk %ld%s", (long)R, (long)D, (long)V, (long)chunk,
                               tb ? " tb" : ""), dt);
    c.generic = true;
    int x = tn(&c, "x", dt, TC_ACT, 2, R, D, 0);
    int w = tb ? tn(&c, "w", dt, TC_PARAM, 2, V, D, 0) : tn(&c, "w", dt, TC_PARAM, 2, D, V, 0);
    int tg = tn(&c, "targets", DT_I32, TC_INPUT, 1, R, 0, 0), loss = tn(&c, "loss", DT_F32, TC_ACT, 0, 0, 0, 0);
    c.irange[tg] = V;
    int ins[3] = {x, w, tg};
    int f = fwd(&c, PRIM_LINEAR_CROSS_ENTROPY, ins, 3, &loss, 1, tb, chunk, 0);
    bwd(&c, f);
    case_run(&c);
}

/* ---- timing ---- */

static double time_launches(const CudaKernel *ks, int n, CUdeviceptr *bufs, CUdeviceptr ws, int reps) {
    CUfunction fns[16];
    void *params[16][CUDA_MAX_ARGS];
    CUdeviceptr ptrs[16][CUDA_MAX_ARGS];
    long long ints[16][CUDA_MAX_ARGS];
    float flts[16][CUDA_MAX_ARGS];
    for (int i = 0; i < n; i++) {
        CK(cu.ModuleGetFunction(&fns[i], unit_module(&ks[i]), ks[i].entry));
        for (int j = 0; j < ks[i].nargs; j++) {
            const CudaArg *a = &ks[i].args[j];
            switch (a->kind) {
            case CARG_TENSOR: ptrs[i][j] = bufs[a->tensor]; params[i][j] = &ptrs[i][j]; break;
            case CARG_WS: ptrs[i][j] = ws + (CUdeviceptr)a->ws_off; params[i][j] = &ptrs[i][j]; break;
            case CARG_NULL: ptrs[i][j] = 0; params[i][j] = &ptrs[i][j]; break;
            case CARG_I64: ints[i][j] = a->i; params[i][j] = &ints[i][j]; break;
            case CARG_F32: flts[i][j] = a->f; params[i][j] = &flts[i][j]; break;
            case CARG_RT: flts[i][j] = rt_values[a->rt]; params[i][j] = &flts[i][j]; break;
            case CARG_SEG: ptrs[i][j] = 0; params[i][j] = &ptrs[i][j]; break;
            }
        }
    }
    CUevent e0, e1;
    CK(cu.EventCreate(&e0, 0));
    CK(cu.EventCreate(&e1, 0));
    for (int r = -3; r < reps; r++) {
        if (r == 0) CK(cu.EventRecord(e0, NULL));
        for (int i = 0; i < n; i++)
            CK(cu.LaunchKernel(fns[i], ks[i].grid[0], ks[i].grid[1], ks[i].grid[2], ks[i].block[0], ks[i].block[1],
                               ks[i].block[2], 0, NULL, params[i], NULL));
    }
    CK(cu.EventRecord(e1, NULL));
    CK(cu.EventSynchronize(e1));
    float ms = 0;
    CK(cu.EventElapsedTime(&ms, e0, e1));
    return ms / reps;
}

enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1 };

/* cuBLAS doing row-major C[M,N] = A[M,K] B[K,N] (as column-major C^T = B^T A^T). */
static double time_cublas(int64_t M, int64_t N, int64_t K, DType dt, CUdeviceptr A, CUdeviceptr B, CUdeviceptr C,
                          int64_t batch, int reps) {
    if (!cu.blas_handle) return -1;
    int ty = dt == DT_BF16 ? CUDA_R_16BF : dt == DT_F16 ? CUDA_R_16F : CUDA_R_32F;
    float one = 1, zero = 0;
    CUevent e0, e1;
    CK(cu.EventCreate(&e0, 0));
    CK(cu.EventCreate(&e1, 0));
    for (int r = -3; r < reps; r++) {
        if (r == 0) CK(cu.EventRecord(e0, NULL));
        int st;
        if (batch == 1)
            st = cu.GemmEx(cu.blas_handle, 0, 0, (int)N, (int)M, (int)K, &one, (void *)B, ty, (int)N, (void *)A, ty,
                           (int)K, &zero, (void *)C, ty, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        else
            st = cu.GemmStridedBatchedEx(cu.blas_handle, 0, 0, (int)N, (int)M, (int)K, &one, (void *)B, ty, (int)N,
                                         K * N, (void *)A, ty, (int)K, M * K, &zero, (void *)C, ty, (int)N, M * N,
                                         (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != 0) return -1;
    }
    CK(cu.EventRecord(e1, NULL));
    CK(cu.EventSynchronize(e1));
    float ms = 0;
    CK(cu.EventElapsedTime(&ms, e0, e1));
    return ms / reps;
}

static CUdeviceptr dev_random(size_t bytes) {
    CUdeviceptr p;
    CK(cu.MemAlloc(&p, bytes));
    unsigned short *h = malloc(bytes);
    for (size_t i = 0; i < bytes / 2; i++) h[i] = (unsigned short)(0x3c00 + (urand() * 0x300)); /* ~1..2 as f16, ~0.01 as bf16 */
    CK(cu.MemcpyHtoD(p, h, bytes));
    free(h);
    return p;
}

/* cuBLASLt as zinfrun calls it (runtime/gpu/cublaslt.c): ms per call, -1 when unavailable. */
static double time_lt(int64_t M, int64_t N, int64_t K, CUdeviceptr A, CUdeviceptr B, CUdeviceptr C, CUdeviceptr ws,
                      int64_t ws_bytes, int reps) {
    char err[512];
    CUevent e0, e1;
    CK(cu.EventCreate(&e0, 0));
    CK(cu.EventCreate(&e1, 0));
    for (int r = -3; r < reps; r++) {
        if (r == 0) CK(cu.EventRecord(e0, NULL));
        int rc = check_lt_gemm(M, N, K, DT_BF16, A, B, C, ws, ws_bytes, err, sizeof err);
        if (rc) {
            if (rc < 0) fprintf(stderr, "cuBLASLt: %s\n", err);
            return -1;
        }
    }
    CK(cu.EventRecord(e1, NULL));
    CK(cu.EventSynchronize(e1));
    float ms = 0;
    CK(cu.EventElapsedTime(&ms, e0, e1));
    return ms / reps;
}

/* Normwise relative difference of two bf16 device arrays of n elements. */
static double bf16_reldiff(CUdeviceptr a, CUdeviceptr b, size_t n) {
    unsigned short *x = malloc(2 * n), *y = malloc(2 * n);
    if (!x || !y) exit(2);
    CK(cu.MemcpyDtoH(x, a, 2 * n));
    CK(cu.MemcpyDtoH(y, b, 2 * n));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t ux = (uint32_t)x[i] << 16, uy = (uint32_t)y[i] << 16;
        float fx, fy;
        memcpy(&fx, &ux, 4);
        memcpy(&fy, &uy, 4);
        num += ((double)fx - fy) * ((double)fx - fy);
        den += (double)fx * fx;
    }
    free(x);
    free(y);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int timing_fails; /* cuBLASLt results that disagree with the NVRTC gemm */

static void timing(void) {
    const char *why = check_lt_open();
    char ltname[128];
    if (why) printf("\ncuBLASLt: not used (%s)\n", why);
    else printf("\ncuBLASLt: %s (runtime/gpu/cublaslt.c, 32 MiB workspace)\n", check_lt_name(ltname, sizeof ltname));
    printf("\n%-40s %9s %8s %10s %8s %10s %8s %7s %9s\n", "timing (bf16)", "nvrtc ms", "TFLOP/s", "cublasLt", "TFLOP/s",
           "cuBLAS ms", "TFLOP/s", "lt/nv", "lt-nv err");
    const int64_t shapes[][3] = {{8192, 3072, 768}, {8192, 768, 3072}, {8192, 768, 768}, {8192, 50304, 768},
                                 {4096, 4096, 4096}, {16384, 4096, 4096}, {512, 512, 512}};
    const int64_t lt_ws = 32 << 20;
    CUdeviceptr ws;
    CK(cu.MemAlloc(&ws, (size_t)lt_ws));
    for (int s = 0; s < (int)(sizeof shapes / sizeof *shapes); s++) {
        int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        Case c;
        case_init(&c, "t", DT_BF16);
        int x = tn(&c, "x", DT_BF16, TC_ACT, 2, M, K, 0), w = tn(&c, "w", DT_BF16, TC_PARAM, 2, K, N, 0);
        int y = tn(&c, "y", DT_BF16, TC_ACT, 2, M, N, 0);
        int ins[2] = {x, w};
        int f = fwd(&c, PRIM_LINEAR, ins, 2, &y, 1, 0, 0, 0);
        CudaKernel ks[4];
        DiagSink d;
        diag_init(&d);
        int n = cuda_gen_op(&cg, &c.g, f, ks, 4, NULL, &d);
        diag_free(&d);
        CUdeviceptr bufs[3] = {dev_random((size_t)(M * K * 2)), dev_random((size_t)(K * N * 2)), dev_random((size_t)(M * N * 2))};
        CUdeviceptr ylt = dev_random((size_t)(M * N * 2));
        double ms = time_launches(ks, n, bufs, 0, 20);
        double lms = why ? -1 : time_lt(M, N, K, bufs[0], bufs[1], ylt, ws, lt_ws, 20);
        double bms = time_cublas(M, N, K, DT_BF16, bufs[0], bufs[1], bufs[2], 1, 20);
        /* the last NVRTC result is in bufs[2] only if cuBLAS did not overwrite it: run it once more */
        time_launches(ks, n, bufs, 0, 1);
        double diff = lms > 0 ? bf16_reldiff(bufs[2], ylt, (size_t)(M * N)) : -1;
        double fl = 2.0 * M * N * K;
        char label[64], lcol[2][32] = {"n/a", ""}, bcol[2][32] = {"n/a", ""}, rcol[16] = "", dcol[16] = "";
        snprintf(label, sizeof label, "gemm %ldx%ldx%ld tile %dx%d", (long)M, (long)N, (long)K, ks[0].tile_m, ks[0].tile_n);
        if (lms > 0) {
            snprintf(lcol[0], 32, "%.3f", lms);
            snprintf(lcol[1], 32, "%.1f", fl / lms * 1e-9);
            snprintf(rcol, sizeof rcol, "%.2f", ms / lms);
        }
        if (bms > 0) {
            snprintf(bcol[0], 32, "%.3f", bms);
            snprintf(bcol[1], 32, "%.1f", fl / bms * 1e-9);
        }
        if (diff >= 0) snprintf(dcol, sizeof dcol, "%.1e", diff);
        printf("%-40s %9.3f %8.1f %10s %8s %10s %8s %7s %9s\n", label, ms, fl / ms * 1e-9, lcol[0], lcol[1], bcol[0], bcol[1],
               rcol, dcol);
        if (diff > 1e-2) {
            printf("  FAIL: cuBLASLt and the NVRTC gemm differ by %.2e (normwise, limit 1e-2)\n", diff);
            timing_fails++;
        }
        for (int i = 0; i < 3; i++) CK(cu.MemFree(bufs[i]));
        CK(cu.MemFree(ylt));
        arena_free(&c.a);
    }
    CK(cu.MemFree(ws));
    printf("(lt/nv: NVRTC time / cuBLASLt time; lt-nv err: normwise relative difference of the two outputs)\n");
    printf("\n%-44s %10s %9s %12s %9s %7s\n", "timing (bf16)", "zinf ms", "TFLOP/s", "cuBLAS ms", "TFLOP/s", "ratio");
    /* attention: fused causal forward, and the backward's 4 launches; the
     * reference is cuBLAS running the two products q k^T and p v (all
     * T x T blocks, no softmax, no mask) as strided batched GEMMs */
    /* then a sliding window: its cost should follow T*window, not T^2/2 (the kernels skip the key tiles before it) */
    const int64_t ash[][5] = {{4, 1024, 12, 64, 0}, {1, 4096, 32, 128, 0}, {1, 8192, 32, 128, 0}, {1, 8192, 32, 128, 1024}};
    for (int s = 0; s < 4; s++) {
        int64_t B = ash[s][0], T = ash[s][1], H = ash[s][2], hd = ash[s][3], win = ash[s][4];
        Case c;
        case_init(&c, "t", DT_BF16);
        int q = tn(&c, "q", DT_BF16, TC_ACT, 3, B, T, H * hd), k = tn(&c, "k", DT_BF16, TC_ACT, 3, B, T, H * hd);
        int v = tn(&c, "v", DT_BF16, TC_ACT, 3, B, T, H * hd), y = tn(&c, "o", DT_BF16, TC_ACT, 3, B, T, H * hd);
        int ins[3] = {q, k, v};
        int f = fwd(&c, PRIM_ATTENTION, ins, 3, &y, 1, H, H, 0);
        c.g.ops[f].iattr[IA_ATTENTION_WINDOW] = win;
        int b = bwd(&c, f);
        CudaKernel kf[4], kb[8];
        CudaOpInfo info;
        DiagSink d;
        diag_init(&d);
        int nf = cuda_gen_op(&cg, &c.g, f, kf, 4, NULL, &d), nb = cuda_gen_op(&cg, &c.g, b, kb, 8, &info, &d);
        diag_free(&d);
        CUdeviceptr bufs[16];
        size_t tb = (size_t)(B * T * H * hd * 2);
        for (int t = 0; t < c.g.ntensors; t++) bufs[t] = dev_random(tb);
        CUdeviceptr ws;
        CK(cu.MemAlloc(&ws, (size_t)info.ws_bytes));
        double fms = time_launches(kf, nf, bufs, 0, 10), bms = time_launches(kb, nb, bufs, ws, 10);
        /* causal: half of the two products; a window: T*window of them */
        double fl = win > 0 ? 4.0 * B * H * T * (double)win * hd : 4.0 * B * H * T * T * hd / 2;
        CUdeviceptr S;
        CK(cu.MemAlloc(&S, (size_t)(B * H) * (size_t)(T * T) * 2));
        /* per (b, h) as a batch: S = q k^T (M=T, N=T, K=hd) then o = S v (M=T, N=hd, K=T) */
        double r1 = time_cublas(T, T, hd, DT_BF16, bufs[q], bufs[k], S, B * H, 10);
        double r2 = time_cublas(T, hd, T, DT_BF16, S, bufs[v], bufs[y], B * H, 10);
        char label[64];
        snprintf(label, sizeof label, "attention fwd B%ld T%ld H%ld hd%ld%s", (long)B, (long)T, (long)H, (long)hd,
                 win ? arena_printf(&garena, " window %ld", (long)win) : "");
        if (r1 > 0 && r2 > 0)
            printf("%-44s %10.3f %9.1f %12.3f %9.1f %7.2f\n", label, fms, fl / fms * 1e-9, r1 + r2, 2 * fl / (r1 + r2) * 1e-9,
                   (r1 + r2) / fms);
        else
            printf("%-44s %10.3f %9.1f %12s\n", label, fms, fl / fms * 1e-9, "n/a");
        snprintf(label, sizeof label, "attention bwd (4 launches)");
        printf("%-44s %10.3f %9.1f %12s\n", label, bms, 2.5 * fl / bms * 1e-9, "");
        CK(cu.MemFree(S));
        CK(cu.MemFree(ws));
        for (int t = 0; t < c.g.ntensors; t++) CK(cu.MemFree(bufs[t]));
        arena_free(&c.a);
    }
    printf("(attention reference: cuBLAS strided-batched q k^T and p v over every T x T block, no mask or softmax;\n"
           " FLOP/s of zinf count the causal half, or T x window with a window; the bwd rate counts 2.5x the forward's\n"
           " products)\n");
}

int main(int argc, char **argv) {
    bool dry = false, timed = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dry")) dry = true;
        else if (!strcmp(argv[i], "--emu")) emu = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--no-timing")) timed = false;
        else if (!strcmp(argv[i], "-v")) verbose = 1;
        else if (!strcmp(argv[i], "--arch") && i + 1 < argc) snprintf(arch, sizeof arch, "%s", argv[++i]);
        else {
            fprintf(stderr, "usage: check_kernels [--dry | --emu] [--only NAME] [--no-timing] [-v] [--arch sm_90]\n");
            return 2;
        }
    }
    char why[512];
    if (!nvrtc_available(why, sizeof why)) {
        fprintf(stderr, "check_kernels: %s\n", why);
        return 2;
    }
    char devname[128] = "none";
    if (emu) {
        gpu = 1;
        snprintf(devname, sizeof devname, "host emulator (tests/gpu/emu.c)");
    } else if (!dry && cu_load(why, sizeof why)) {
        int dev, ma = 0, mi = 0;
        CUresult r = cu.Init(0);
        if (r == 0 && cu.DeviceGet(&dev, 0) == 0) {
            CK(cu.DeviceGetAttribute(&ma, 75, dev));
            CK(cu.DeviceGetAttribute(&mi, 76, dev));
            CK(cu.DeviceGetName(devname, sizeof devname, dev));
            CUcontext ctx;
            CK(cu.PrimaryCtxRetain(&ctx, dev));
            CK(cu.CtxSetCurrent(ctx));
            snprintf(arch, sizeof arch, "sm_%d%d", ma, mi);
            gpu = 1;
            blas_load();
        } else {
            snprintf(why, sizeof why, "cuInit: %s", cu_err(r));
        }
    }
    if (!gpu) printf("check_kernels: no GPU (%s): dry run, kernels compiled for %s, host references run\n", dry ? "--dry" : why, arch);
    else printf("check_kernels: %s (%s), cuBLAS %s\n", devname, arch, cu.blas_handle ? "loaded" : "not found");
    arena_init(&garena);
    CudaGenOptions o = {.kernel_dir = getenv("ZINF_KERNEL_DIR")}; /* as zinfc (docs/environment.md) */
    nvrtc_opts.cache_dir = getenv("ZINF_CACHE_DIR");
    cuda_gen_init(&cg, &garena, &o);

    double t0 = (double)clock();
    DType dts[2] = {DT_F32, DT_BF16};
    for (int di = 0; di < 2; di++) {
        DType dt = dts[di];
        case_linear(dt, 300, 200, 130, true);
        case_linear(dt, 1024, 256, 1536, false);
        case_linear(dt, 37, 7, 33, true); /* odd sizes: every tile edge partial */
        case_linear_q(dt, DT_NF4, 37, 64, 96);
        case_linear_q(dt, DT_INT8, 37, 64, 96);
        for (int t = 0; t < 4; t++) case_matmul(dt, t & 1, t >> 1);
        case_attention(dt, 2, 100, 4, 2, 64);
        case_attention(dt, 1, 70, 2, 2, 128);
        case_attention(dt, 1, 33, 2, 1, 32);
        /* head dims that are not multiples of 32: padded inside the kernels */
        case_attention(dt, 1, 33, 4, 2, 80);
        case_attention(dt, 1, 20, 2, 1, 96);
        case_attention(dt, 1, 33, 2, 2, 100);
        case_attention(dt, 1, 20, 3, 1, 112);
        case_attention(dt, 1, 33, 4, 1, 40);
        case_attention(dt, 1, 17, 2, 1, 72);
        case_attention(dt, 1, 17, 2, 1, 7);
        case_attention(dt, 1, 33, 2, 1, 256); /* above 128: smaller tiles */
        case_attention(dt, 1, 17, 2, 2, 200);
        {
            /* samples across tile edges, a 1-token sample, a row that is one sample */
            static const int p100[] = {5, 30, 1, 64, 0, 100, 0}, p70[] = {33, 2, 35, 0}, p33[] = {1, 16, 16, 0};
            case_attention_packed(dt, 2, 100, 4, 2, 64, p100);
            case_attention_packed(dt, 1, 70, 2, 2, 128, p70);
            case_attention_packed(dt, 1, 33, 2, 1, 40, p33);
            case_attention_packed(dt, 1, 33, 2, 1, 256, p33);
        }
        case_norm(dt, true, 50, 300);
        case_norm(dt, false, 50, 300);
        case_norm(dt, true, 9, 37);
        case_unary(dt, PRIM_GELU);
        case_unary(dt, PRIM_SILU);
        case_scale(dt);
        case_binary(dt, PRIM_ADD, false);
        case_binary(dt, PRIM_ADD, true);
        case_binary(dt, PRIM_MUL, true);
        case_rope(dt);
        case_rope_llama3(dt);
        case_rope_packed(dt);
        case_rmsnorm_heads(dt);
        case_embedding(dt);
        case_xent(dt);
        case_split(dt);
        case_adam(dt);
        case_util(dt == DT_F32 ? DT_F16 : dt);
        /* sliding windows (window 1, shorter than a tile, across tiles, as long as T and longer), the
         * scores' scale and soft-capping, GQA, padded and wide heads, packed rows with a window */
        case_attention_attrs(dt, 2, 70, 4, 2, 64, 16, 0, 0, NULL);
        case_attention_attrs(dt, 1, 70, 2, 1, 64, 1, 0, 0, NULL);
        case_attention_attrs(dt, 1, 100, 2, 2, 128, 40, 0, 0, NULL);
        case_attention_attrs(dt, 1, 33, 2, 1, 32, 33, 0, 0, NULL);
        case_attention_attrs(dt, 1, 33, 2, 1, 32, 100, 0, 0, NULL);
        case_attention_attrs(dt, 1, 70, 4, 2, 40, 7, 0, 0, NULL);
        case_attention_attrs(dt, 1, 40, 2, 1, 256, 9, 0, 0, NULL);
        case_attention_attrs(dt, 1, 33, 2, 1, 32, 0, 1.0, 0.5, NULL);
        case_attention_attrs(dt, 1, 70, 4, 2, 64, 0, 0.0625, 0, NULL);
        case_attention_attrs(dt, 1, 70, 4, 2, 64, 0, 0.0625, 2.0, NULL);
        case_attention_attrs(dt, 1, 40, 2, 1, 256, 0, 0.0625, 1.0, NULL);
        case_attention_attrs(dt, 1, 70, 4, 1, 72, 20, 0.25, 1.5, NULL);
        {
            static const int p70[] = {33, 2, 35, 0};
            case_attention_attrs(dt, 1, 70, 2, 2, 64, 12, 0, 0, p70);
        }
        case_rmsnorm_offset(dt, 50, 300, 1);
        case_rmsnorm_offset(dt, 40, 96, 4);
        case_softcap(dt);
        case_rope_yarn(dt, 0, 0);
        case_rope_yarn(dt, 16, 2);
        {
            /* packed rows of T 40: samples of 16 at most (the short list), or one of 17 (the long) */
            static const int p16[] = {16, 16, 8, 0, 10, 14, 16, 0}, p17[] = {16, 17, 7, 0, 8, 8, 24, 0};
            case_rope_phi(dt, "partial", 40, 12, 0, false, NULL);
            case_rope_phi(dt, "af", 40, 0, 1.224744871391589, false, NULL);
            case_rope_phi(dt, "longrope short", 16, 12, 1.224744871391589, true, NULL);
            case_rope_phi(dt, "longrope long", 40, 12, 1.224744871391589, true, NULL);
            case_rope_phi(dt, "longrope whole", 40, 16, 0, true, NULL);
            case_rope_phi(dt, "longrope packed 16", 40, 12, 1.1, true, p16);
            case_rope_phi(dt, "longrope packed 17", 40, 12, 1.1, true, p17);
        }
        case_linxent(dt, 70, 40, 300, 32, false);
        case_linxent(dt, 70, 40, 300, 35, false);
        case_linxent(dt, 70, 40, 300, 0, false);
        case_linxent(dt, 70, 40, 300, 16, true);
    }
    case_linear(DT_F16, 300, 200, 130, true);
    case_attention(DT_F16, 2, 100, 4, 2, 64);
    case_adam(DT_F16);

    int fails = 0;
    printf("\n%-40s %-5s %7s %11s %8s  %-6s %s\n", "case", "dtype", "kernels", "max relerr", "limit", "result", "worst tensor");
    for (int i = 0; i < nrows; i++) {
        Row *r = &rows[i];
        fails += !r->pass;
        if (gpu)
            printf("%-40s %-5s %7d %11.3g %8.0e  %-6s %s\n", r->name, r->dtype, r->kernels, r->err, r->limit,
                   r->pass ? "PASS" : "FAIL", r->worst);
        else
            printf("%-40s %-5s %7d %11s %8.0e  %-6s\n", r->name, r->dtype, r->kernels, "-", r->limit, "(dry)");
    }
    printf("%d cases, %d units compiled for %s, %d failed (host time %.1f s)\n", nrows, ncompiled, arch, fails,
           ((double)clock() - t0) / CLOCKS_PER_SEC);
    if (gpu && !emu && timed) timing();
    arena_free(&garena);
    if (!gpu || emu) return fails ? 1 : (emu ? 0 : 3);
    return fails || timing_fails ? 1 : 0;
}
