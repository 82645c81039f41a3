/* cuda_gen: graph op -> specialised CUDA kernels and their launches.
 *
 * The kernel sources live in stdlib/kernels/<family>.cu (docs/kernels.md).
 * A compile unit is one family specialised by a few #defines (storage dtype;
 * for gemm the transposes and tile shape; for attention the head dim): every
 * op with the same specialisation gets the byte-identical unit source, so a
 * whole model needs a handful of NVRTC compilations (dedupe by the source's
 * SHA-256). Plain sizes are kernel arguments. A launch (CudaKernel) names
 * its unit, entry point, grid/block, and arguments as tensor ids, workspace
 * offsets and values, so the executor can marshal them without knowing the
 * kernel. Generated text is deterministic (no pointers, times, hash order);
 * each launch carries a comment naming its op and the .zl line it lowers,
 * and cuda_module_dump lists every unit with the ops that use it.
 *
 * Kernel parameters are pointers (8 bytes), `long long` (CARG_I64) or
 * `float` (CARG_F32, CARG_RT), in args[] order.
 */
#ifndef ZINF_CUDA_GEN_H
#define ZINF_CUDA_GEN_H
#include <stdint.h>
#include <stdio.h>
#include "arena.h"
#include "diag.h"
#include "graph.h"

typedef enum CudaArgKind {
    CARG_TENSOR, /* device address of tensor `tensor`, plus off bytes */
    CARG_WS,     /* device address of the op's workspace + ws_off bytes */
    CARG_NULL,   /* a NULL pointer (optional operand absent) */
    CARG_I64,    /* long long i */
    CARG_F32,    /* float f */
    CARG_RT,     /* float the executor supplies at run time: rt */
    CARG_SEG,    /* const int *: the micro-batch's sample starts [B*T] (packed rows), NULL when a row is one sample */
} CudaArgKind;

typedef enum CudaRtValue {
    CRT_LR,             /* this step's learning rate (warmup, decay) */
    CRT_BC1,            /* Adam bias correction 1 - beta1^t */
    CRT_BC2,            /* 1 - beta2^t */
    CRT_INV_LOSS_SCALE, /* 1 / loss scale (1 unless f16) */
    CRT_LOSS_GRAD,      /* the loss gradient seed: loss scale / micro-batches */
    CRT_COUNT
} CudaRtValue;

extern const char *const cuda_rt_names[CRT_COUNT];

typedef struct CudaArg {
    CudaArgKind kind;
    int tensor;      /* CARG_TENSOR */
    int64_t off;     /* CARG_TENSOR: bytes past the tensor's address (a tile's columns); 0 otherwise */
    int64_t ws_off;  /* CARG_WS */
    int64_t i;       /* CARG_I64 */
    float f;         /* CARG_F32 */
    CudaRtValue rt;  /* CARG_RT */
} CudaArg;

enum { CUDA_MAX_ARGS = 20, CUDA_OP_MAX_KERNELS = 8 };

/* What a zk_gemm launch computes, for a library (cuBLASLt) to run instead
 * (docs/kernels.md, "GEMM paths"): row-major C[M, N] (+)= opA(A) opB(B)
 * (+ bias) over `batch` output batches, the launch's own arguments in
 * named fields. `lt` says whether cuBLASLt can run it; when not, `why`
 * (CUDA_GEMM_WHY_*) says what it cannot do and the launch always runs. The
 * cuBLASLt workspace is [ws_off, ws_off + ws_bytes) of the GEMM workspace the
 * executor allocates (per queue, the largest of the plan's gemms). */
enum { CUDA_GEMM_WHY_NONE, CUDA_GEMM_WHY_BATCH_SUM, CUDA_GEMM_WHY_DEQUANT };
/* An operand id (c, a or b) that is the op's workspace, not a tensor: the
 * launch's CARG_WS argument, off_* its byte offset there (the chunked
 * loss's logits; the plan's PLAN_GEMM_OP_WS). */
enum { CUDA_GEMM_WS = -2 };
typedef struct CudaGemm {
    bool on;               /* this launch is a gemm */
    bool lt;               /* cuBLASLt can run it */
    int why;               /* CUDA_GEMM_WHY_* when !lt */
    DType dtype;
    bool ta, tb, accumulate; /* accumulate: beta 1, else 0 */
    int c, a, b, bias;     /* tensor ids (c, a, b: CUDA_GEMM_WS, the op's workspace), bias -1: none */
    int64_t off_c, off_a, off_b; /* bytes (into the op's workspace for CUDA_GEMM_WS) */
    int64_t M, N, K, lda, ldb, ldc;
    int64_t batch, sA, sB, sC, rbatch, rsA, rsB;
    int64_t ws_off, ws_bytes;
} CudaGemm;

typedef struct CudaKernel {
    const char *entry;     /* extern "C" function in the unit */
    const char *family;    /* "gemm", "attention", ... (stdlib/kernels/<family>.cu) */
    const char *spec;      /* the specialisation: "bf16 ta=0 tb=1 tile=128x128x32" */
    const char *source;    /* the unit's full text, what NVRTC compiles */
    char hash[65];         /* SHA-256 of source, hex: identical units dedupe */
    const char *comment;   /* "op 12 fwd linear (block.3.mlp) at gpt2.zl:14:7: y = x*w + b" */
    unsigned grid[3], block[3];
    unsigned smem;         /* dynamic shared memory bytes (the kernels use static smem: 0) */
    int tile_m, tile_n, tile_k; /* gemm tile chosen, else 0 */
    CudaGemm gemm;         /* gemm.on: what the launch computes, for cuBLASLt */
    int nargs;
    CudaArg args[CUDA_MAX_ARGS];
    int op;                /* graph op index */
    int unit;              /* index into CudaModule.units (cuda_gen_graph), else -1 */
    Span span;             /* the .zl expression of the op */
} CudaKernel;

/* What an op's launches need besides tensors. */
typedef struct CudaOpInfo {
    int64_t ws_bytes;      /* scratch the op's launches share (slices 256-aligned); 0: none.
                            * The launches initialise what they read. */
    int64_t err_off;       /* >= 0: int32 err[3] in the workspace. After the op, err[0] != 0
                            * is a run-time error: err[1] the bad value, err[2] its position */
    const char *err_what;  /* what err reports: "embedding id", "cross_entropy target" */
} CudaOpInfo;

typedef struct CudaGenOptions {
    const char *kernel_dir;    /* NULL: ZINF_STDLIB_DIR/kernels (zinfc passes $ZINF_KERNEL_DIR) */
    const SourceSet *sources;  /* to turn spans into file:line:col; NULL: file#offset */
    int sm_count;              /* the target GPU's SMs, for the gemm tile rule; 0: 128 */
    int64_t gemm_ws_bytes;     /* cuBLASLt workspace a gemm may use; 0: CUDA_GEMM_WS_DEFAULT, -1: none */
} CudaGenOptions;

/* The default cuBLASLt workspace of a gemm: enough for split-K and most
 * Hopper kernels (cuBLAS itself takes 32 MiB on sm_90 for its handle; 4 MiB
 * lets most shapes pick their best algorithm). */
#define CUDA_GEMM_WS_DEFAULT ((int64_t)4 << 20)

typedef struct CudaUnitCache CudaUnitCache;
typedef struct CudaGen {
    Arena *arena;
    CudaGenOptions opt;
    char kernel_dir[1024];
    const char *common;         /* common.cuh, loaded on first use */
    const char *family_text[16];
    CudaUnitCache *units;       /* built unit sources, by (family, spec) */
} CudaGen;

/* Options are copied; opt may be NULL. */
void cuda_gen_init(CudaGen *cg, Arena *a, const CudaGenOptions *opt);

/* The launches of op `op`, in order, into out[0..max_out). Returns how many
 * the op needs (if more than max_out, only max_out were written: call again
 * with room; OP_GRAD_NORM needs one per parameter plus one), or -1 with
 * errors in d (unsupported shape, dtype or attribute; unreadable kernel
 * source). info may be NULL. */
int cuda_gen_op(CudaGen *cg, const Graph *g, int op, CudaKernel *out, int max_out, CudaOpInfo *info,
                DiagSink *d);

/* The launches of tile `tile` of `ntiles` of op `op` under memory-centric
 * tiling (docs/kernels.md, "Tile launches"): the op's 2-D weight (linear w,
 * matmul b, embedding table) cut by rows into ntiles equal tiles, or
 * moe_expert's [E, O, I] weight cut into tiles of E/ntiles whole experts,
 * the launches computing that tile's share of the op as the host
 * executor's run_tiled does. Tensor arguments are the op's tensor ids; the executor
 * binds the weight (and, backward, its gradient) to the tile's rows and
 * every other tensor whole, so a column slice of an activation is the
 * tensor's address plus CudaArg.off bytes. Forward (and recompute) ops and
 * their backward ops of linear, matmul (not transpose_a), embedding and
 * moe_expert only; anything else, or a weight whose rows (experts) ntiles
 * does not divide, is -1
 * with a diagnostic naming the op. Return value and info as cuda_gen_op;
 * info->err_off, when >= 0, is the op's (the same workspace offset). */
int cuda_gen_op_tile(CudaGen *cg, const Graph *g, int op, int tile, int ntiles, CudaKernel *out, int max_out,
                     CudaOpInfo *info, DiagSink *d);

/* Launches the executor needs outside the graph's ops (one each into *out;
 * 0, or -1 with a diagnostic). Tensors are the graph's.
 *   cast:  dst = src, between f32 and another float dtype (either way)
 *   axpy:  y += alpha * x (same dtype: gradient accumulation)
 *   scale: y *= alpha (gradient scaling, e.g. 1/micro-batches) */
int cuda_gen_cast(CudaGen *cg, const Graph *g, int dst, int src, CudaKernel *out, DiagSink *d);
int cuda_gen_axpy(CudaGen *cg, const Graph *g, int y, int x, double alpha, CudaKernel *out, DiagSink *d);
int cuda_gen_scale(CudaGen *cg, const Graph *g, int y, double alpha, CudaKernel *out, DiagSink *d);

typedef struct CudaUnit {
    const char *family, *spec, *source;
    char hash[65];
    int nlaunches;        /* launches that use it */
    int first_kernel;     /* index of its first launch in CudaModule.kernels */
} CudaUnit;

typedef struct CudaModule {
    CudaKernel *kernels;  /* every launch of the graph, op by op in graph order */
    int nkernels;
    int *op_first, *op_count; /* per op: kernels[op_first[i] .. + op_count[i]) */
    CudaOpInfo *op_info;      /* per op */
    CudaUnit *units;          /* distinct sources, in order of first use */
    int nunits;
} CudaModule;

/* Every op of g. Returns 0, or -1 with errors in d (every failing op reported). */
int cuda_gen_graph(CudaGen *cg, const Graph *g, CudaModule *m, DiagSink *d);
/* Listing: each unit's users (the launch comments), then every launch with
 * geometry and arguments. Deterministic. */
void cuda_module_dump(const CudaModule *m, const Graph *g, FILE *out);

/* Unit u as a reader wants it: a comment line per launch that uses it (op,
 * .zl line, role), then the exact text NVRTC compiles. */
void cuda_module_write_unit(const CudaModule *m, int u, FILE *out);
/* Every unit into dir/<family>-<hash12>.cu. Returns 0, or -1 with an error in d. */
int cuda_module_write_sources(const CudaModule *m, const char *dir, DiagSink *d);

const char *cuda_dtype_name(DType dt);

/* The decode unit (compiler/cuda_gen_decode.c): the one-position kernels
 * of zinfgen --decode kv on the CUDA backend, for each storage dtype of g's
 * forward, with no launches (the decoder finds its entry points by name).
 * 1 with *out filled (nlaunches 0, first_kernel -1) when every forward
 * primitive of g is one those kernels serve; 0, nothing written, when one
 * is not; -1 with a diagnostic when a kernel source does not read. */
int cuda_gen_decode_unit(CudaGen *cg, const Graph *g, CudaUnit *out, DiagSink *d);

#endif
