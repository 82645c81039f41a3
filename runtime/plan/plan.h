/* plan: the data model of a compiled training plan and its file format.
 *
 * This is the ONLY code the compiler (zinfc writes a plan) and the runtime
 * (zinfrun executes one, zinfdump shows one) share. A Plan owns all of its
 * memory (one Arena); plan_free releases it.
 *
 * The schedule is one instruction stream, the same for every rank: operands
 * name buffers in per-rank arenas (rank-relative), shards describe "this
 * rank's slice" of each tensor, so a plan's size does not depend on how many
 * ranks run it. The file format (docs/plan-format.md): a header (magic
 * "ZINFPLAN", version, section count, checksum), then sections, each with an
 * id, a length and an FNV-1a-64 checksum of its payload; all integers little
 * endian. The reader treats the file as untrusted: every count, offset, size
 * and index is bounds-checked and each section's checksum verified.
 */
#ifndef ZINF_PLAN_H
#define ZINF_PLAN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "arena.h"

/* PLAN_VERSION is what a plan is written as; PLAN_VERSION_STACKED only a plan
 * whose hf mapping stacks per-expert tensors (PlanHfPiece.stacked);
 * PLAN_VERSION_TABLES only a plan with an op that uses the seventh or eighth
 * float attribute or list attributes (rope's longrope); PLAN_VERSION_EXPERTS
 * only a plan whose hf mapping has a piece of PEFT's expert layout
 * (PlanHfPiece.layout); PLAN_VERSION_ZSTD (the newest read: version 9's
 * records, packed sections as zstd frames) a plan with a big table
 * (plan.c's written_version), from a build with libzstd. */
enum { PLAN_VERSION = 6, PLAN_VERSION_STACKED = 7, PLAN_VERSION_TABLES = 8, PLAN_VERSION_EXPERTS = 9, PLAN_VERSION_ZSTD = 10, PLAN_VERSION_OLDEST = 3, PLAN_MAX_RANK = 6, PLAN_MAX_IN = 24, PLAN_MAX_OUT = 12, PLAN_MAX_IATTR = 6, PLAN_MAX_FATTR = 8,
       PLAN_MAX_TABLE = 1 << 16 /* numbers in an op's list attributes */,
       PLAN_MAX_ACCUM = 64 /* micro-batches per optimizer step (grad_accum) */ };
#define PLAN_MAGIC "ZINFPLAN"

/* Queues: each runs its instructions in stream order, one at a time. */
typedef enum PlanQueue { Q_NVME, Q_H2D, Q_D2H, Q_COMM, Q_COMPUTE, Q_CPU, PLAN_NQUEUES, Q_ANY = 255 } PlanQueue;
extern const char *const plan_queue_names[PLAN_NQUEUES];

typedef enum PlanOpcode {
#define OP(id, name, queue, operands) PI_##id,
#include "sched.def"
#undef OP
    PI_COUNT
} PlanOpcode;
extern const char *const plan_opcode_names[PI_COUNT];
/* The opcode's fixed queue, or Q_ANY when the plan chooses. */
extern const uint8_t plan_opcode_queue[PI_COUNT];
/* The opcode's operand layout from sched.def ("RW", "*" = variable). */
extern const char *const plan_opcode_operands[PI_COUNT];

/* Where a shard lives between uses (its home). */
typedef enum PlanTier { TIER_GPU, TIER_CPU, TIER_NVME, PLAN_NTIERS } PlanTier;
extern const char *const plan_tier_names[PLAN_NTIERS];

/* The per-rank arenas. Pinned staging and CPU homes are both carved from
 * the rank's share of host memory. */
typedef enum PlanArenaKind { ARENA_GPU, ARENA_PINNED, ARENA_CPU, ARENA_NVME, PLAN_NARENAS } PlanArenaKind;
extern const char *const plan_arena_names[PLAN_NARENAS];

/* Op families of the cost model: what share of peak a kernel reaches
 * depends mostly on which of these it is (cost_family maps primitives). */
/* The cost model's families of kernels: activation (gelu, silu, the
 * cross-entropy's exponentials) was elementwise's before the probe timed
 * it apart: per element it costs several times an add. */
typedef enum PlanFamily { FAM_GEMM, FAM_ATTENTION, FAM_NORM, FAM_ELEMENTWISE, FAM_ACTIVATION, PLAN_NFAMILIES } PlanFamily;
/* A kernel call the probe timed: the cost model interpolates a kernel's
 * time between its family's nearest points (runtime/plan/cost.h). */
enum { PLAN_MAX_KERNEL_POINTS = 48 };
typedef struct PlanKernelPoint {
    int32_t family;            /* PlanFamily */
    double flops;              /* per call, in the plan's counting */
    double secs;
} PlanKernelPoint;
extern const char *const plan_family_names[PLAN_NFAMILIES];

/* A transfer size the probe timed through the nvme queue's engine (rtio):
 * `drive`, the node's time per transfer with every rank's pipeline full
 * (each rank's time per transfer over the ranks), and `alone`, a rank's
 * time for one with nothing else in flight. */
enum { PLAN_MAX_NVME_POINTS = 16 };
typedef struct PlanNvmePoint {
    int32_t write;             /* 0 read, 1 write */
    double bytes, drive, alone;
} PlanNvmePoint;

/* The machine a plan is for (compiler/target.h fills it from a .zl target). */
typedef struct PlanTarget {
    const char *name;
    const char *backend;       /* "cuda" or "host" */
    int32_t nodes, gpus_per_node; /* host backend: ranks = gpus_per_node, nodes = 1 */
    uint64_t gpu_memory;       /* bytes per GPU (host: the per-rank budget) */
    double gpu_flops;          /* FLOP/s per GPU (peak, the training dtype) */
    double gpu_hbm;            /* bytes/s, device memory */
    double gpu_pcie;           /* bytes/s per GPU, each direction */
    const char *gpu_arch;      /* "sm_70", "" for host */
    int32_t gpu_sms;
    uint64_t cpu_memory;       /* bytes per node */
    double cpu_bandwidth;      /* bytes/s per node */
    int32_t cpu_cores;         /* per node */
    int32_t nvme_npaths;
    const char **nvme_paths;
    double nvme_read, nvme_write; /* bytes/s per node, all drives */
    uint64_t nvme_capacity;    /* bytes per node, 0 = no NVMe */
    double net_bandwidth;      /* bytes/s per rank for collectives inside a node */
    double net_inter;          /* bytes/s per rank for collectives across nodes */
    double net_latency;        /* seconds per collective step */
    /* Measured figures (zinfprobe); 0 = not given, and the cost model then
     * prices as a target without them: bandwidth only, kernels at peak. */
    double nvme_latency;       /* seconds per NVMe request, on top of bytes / rate */
    double pcie_latency;       /* seconds per host<->device copy (host backend: a memcpy's dispatch) */
    double kernel_latency;     /* seconds per compute or cpu queue instruction (launch, dispatch) */
    double eff[PLAN_NFAMILIES]; /* fraction of gpu_flops each op family reaches (PlanFamily) */
    double wake_latency;       /* seconds for a queue to wake when another queue's instruction makes it ready */
    /* host: the CPUs' shared cache (bytes per node) and its bandwidth
     * (bytes/s per node); a plan whose ranks' memory fits in it streams at
     * that rate, not at cpu_bandwidth's */
    double cpu_cache, cache_bandwidth;
    double nvme_request;       /* seconds of the drive per request with the nvme queues full (the node's) */
    double nvme_cpu;           /* CPU seconds a transfer costs its rank (host: on the rank's cores) */
    /* bytes/s per node, beyond the cache, of two instructions that only
     * stream host memory, in the plan's counting of their bytes: the CPU
     * Adam and the norm's sum of squares (0: cpu_bandwidth's) */
    double adam_bandwidth, read_bandwidth;
    int32_t nkernel_points;
    PlanKernelPoint kernel_points[PLAN_MAX_KERNEL_POINTS];
    int32_t nnvme_points;      /* 0: the nvme figures above (rate, latency, request) price every size */
    PlanNvmePoint nvme_points[PLAN_MAX_NVME_POINTS];
} PlanTarget;

/* The training settings the runtime needs (from the model's train block). */
typedef struct PlanTrain {
    int64_t micro_batch, steps, warmup_steps, checkpoint_every, grad_accum;
    uint64_t seed;
    uint8_t dtype;             /* DType of lang/ast.h */
    uint8_t schedule;          /* LrSchedule */
    double lr, beta1, beta2, eps, weight_decay, min_lr, grad_clip, loss_scale;
} PlanTrain;

typedef struct PlanTensor {
    const char *name;
    uint8_t dtype, cls, init, rank; /* DType, TensorClass, InitKind */
    int64_t dims[PLAN_MAX_RANK];
    int64_t numel;
    double init_std;
    int32_t param, grad, master, momentum, variance, segment; /* -1 = none */
    int32_t shard;             /* index into shards, -1 for non-state tensors */
} PlanTensor;

/* OP_ADAM's attribute slot: 1 = step the parameter without weight decay
 * (train { no_decay }; compiler/graph.h's GRAPH_ADAM_NO_DECAY). */
enum { PLAN_ADAM_NO_DECAY = 0 };

/* A graph op, as the executor's KERNEL instructions need it. */
typedef struct PlanOp {
    uint8_t kind, prim, nin, nout; /* OpKind, PrimId of compiler/graph.h */
    int32_t in[PLAN_MAX_IN], out[PLAN_MAX_OUT]; /* tensor ids, -1 = none */
    int64_t iattr[PLAN_MAX_IATTR];
    double fattr[PLAN_MAX_FATTR];
    int32_t segment, fwd, nfin;
    const char *scope;
    /* the op's list attributes (prim.def's PRIM_LATTR), concatenated in
     * slot order; each primitive's shape rule fixes their lengths (rope's
     * short_factor and long_factor: rotary_dim / 2 each). Version 7. */
    uint32_t ntable;
    const double *table;
} PlanOp;

/* This rank's slice of a persistent tensor (parameter, gradient, optimizer
 * state). The tensor's elements are cut into ntiles equal tiles of
 * tile_elems; when partitioned, rank r holds elements
 * [t*tile_elems + r*tile_shard, ...+tile_shard) of tile t (the last rank's
 * slice is padded), stored at t*tile_shard in its buffer. Unpartitioned:
 * the whole tensor on every rank (tile_shard = tile_elems). */
typedef struct PlanShard {
    int32_t tensor;
    uint8_t home;              /* PlanTier */
    uint8_t partitioned;
    int32_t ntiles;
    int64_t tile_elems;
    int64_t tile_shard;        /* elements per rank per tile, padded to the I/O alignment */
    uint64_t bytes;            /* ntiles * tile_shard * dtype size */
    int32_t buffer;            /* its home buffer */
} PlanShard;

typedef struct PlanArena {
    uint8_t kind;              /* PlanArenaKind */
    uint64_t capacity;         /* what the target allows per rank */
    uint64_t size;             /* what the plan uses: the peak, exactly */
    uint64_t align;
} PlanArena;

enum { PLAN_BUF_PERSISTENT = 1, /* valid at the start of a step (a home) */
       /* the twin of its tensor's home (persistent too): the speculative
        * optimizer steps the home's state into it, and after every step that
        * is not skipped the two exchange roles (docs/schedule.md) */
       PLAN_BUF_TWIN = 2 };

typedef struct PlanBuffer {
    const char *name;
    uint8_t arena;
    uint8_t flags;
    int32_t tensor;            /* -1 when not one tensor's */
    uint64_t offset, bytes;
} PlanBuffer;

enum { PLAN_R = 1, PLAN_W = 2, PLAN_M = 3 }; /* operand access */

typedef struct PlanOperand {
    int32_t buffer;            /* -1: absent (KERNEL inputs that are not there) */
    uint8_t mode;
    uint64_t offset, bytes;    /* the range of the buffer accessed */
} PlanOperand;

typedef struct PlanInstr {
    uint8_t op, queue;
    int32_t arg;               /* KERNEL: op index; transfers: tensor id; INPUT: input index */
    int32_t tile, ntiles;      /* KERNEL and tile transfers: tile t of n; else 0 of 1 */
    uint32_t opnd, nopnd;      /* operands[opnd .. opnd+nopnd) */
    uint32_t dep, ndeps;       /* deps[dep .. dep+ndeps): instructions it waits for */
    double flops;              /* for the cost model */
    uint64_t bytes;            /* bytes moved (transfers) or touched (kernels) */
} PlanInstr;

/* A compiled kernel (filled by codegen): opaque bytes with a name. */
typedef struct PlanKernel {
    const char *name, *arch, *resources;
    const uint8_t *data;
    uint64_t size;
} PlanKernel;

/* CUDA launches (filled by compiler/kernels_embed from compiler/cuda_gen;
 * run by runtime/cuexec). A launch names its unit by the PlanKernel name
 * ("gemm-0123456789ab.cu", one PlanKernel per architecture), its entry
 * point, geometry, and arguments in kernel-parameter order. Argument kinds
 * mirror CudaArgKind, plus PARG_NUMEL: the element count of the operand
 * bound to `tensor` (the executor's shard of it, for Adam and the gradient
 * norm, which run on this rank's slice). */
typedef enum PlanArgKind {
    PARG_TENSOR, /* device address bound to tensor id `tensor`, plus i bytes (a tile's columns) */
    PARG_WS,     /* the op's workspace + i bytes */
    PARG_NULL,   /* a NULL pointer */
    PARG_I64,    /* long long i */
    PARG_F32,    /* float f */
    PARG_RT,     /* float supplied each step: rt (CudaRtValue order: lr, bc1, bc2, 1/loss scale, loss grad) */
    PARG_NUMEL,  /* long long: elements of the operand bound to `tensor` */
    PARG_SEG,    /* const int *: the micro-batch's sample starts [B*T] (packed rows), NULL when not packed */
    PLAN_NARGKINDS
} PlanArgKind;
enum { PLAN_RT_LR, PLAN_RT_BC1, PLAN_RT_BC2, PLAN_RT_INV_LOSS_SCALE, PLAN_RT_LOSS_GRAD, PLAN_NRT };

typedef struct PlanLaunchArg {
    uint8_t kind, rt;          /* PlanArgKind; for PARG_RT the value */
    int32_t tensor;            /* PARG_TENSOR, PARG_NUMEL; -1 = the executor binds it (utility launches) */
    int64_t i;                 /* PARG_I64 value, PARG_WS byte offset */
    float f;                   /* PARG_F32 */
} PlanLaunchArg;

typedef struct PlanLaunch {
    const char *unit;          /* PlanKernel name */
    const char *entry;         /* extern "C" entry point */
    uint32_t grid[3], block[3], smem;
    int32_t op;                /* graph op, -1 for a utility launch */
    uint32_t arg, nargs;       /* launch_args[arg .. arg+nargs) */
} PlanLaunch;

/* Per graph op: its launches, in order, and what they share. */
typedef struct PlanOpCode {
    uint32_t first, count;     /* launches[first .. first+count) */
    int64_t ws_bytes;          /* device workspace the launches share, 0: none */
    int64_t err_off;           /* >= 0: int32 err[3] in the workspace; err[0] != 0 after the op is a
                                * run-time error: err[1] the bad value, err[2] its position */
    const char *err_what;      /* "embedding id", "" */
} PlanOpCode;

/* A tiled KERNEL instruction (memory-centric tiling: the op's 2-D weight
 * cut by rows into ntiles, the instruction's weight operand holding only
 * tile `tile`'s rows) runs these launches instead of the op's; the other
 * operands are the op's whole tensors, addressed at an offset (PARG_TENSOR
 * with i bytes) where the tile touches only some columns. */
typedef struct PlanTileCode {
    int32_t op, tile, ntiles;
    uint32_t first, count;     /* launches[first .. first+count), their op = op */
    int64_t ws_bytes;          /* device workspace they share */
} PlanTileCode;

/* Utility launches the executor binds itself (arguments with tensor -1):
 *   PLAN_UTIL_AXPY: zk_axpy(y, x, n, alpha): y += alpha * x, same dtype
 *     (arguments: y, x, PARG_I64 n, PARG_F32 alpha), for accumulation on
 *     the GPU (ACCUM, reduce-scatter into a gradient shard). */
enum { PLAN_UTIL_AXPY, PLAN_NUTIL, PLAN_NDTYPES = 5 };

/* One GEMM of the plan (linear, matmul, forward and backward, whole op or
 * tile), as a library call can run it: every zk_gemm launch of a version-4
 * plan has one, the launch being its fallback. Row-major, as the kernel:
 *   C[M, N] (+)= opA(A)[M, K] opB(B)[K, N] (+ bias[N]) for `batch` output
 *   batches, each operand advancing by its stride (elements) per batch;
 *   opA(A)[m, k] = ta ? A[k*lda + m] : A[m*lda + k], opB likewise with tb.
 * Operands are the launch's tensors (bound by the executor as for the
 * launch) plus byte offsets (a tile's columns). The compiler chooses the
 * path: PLAN_GEMM_LT runs through cuBLASLt when the runtime has it (and
 * the launch otherwise), PLAN_GEMM_NVRTC always runs the launch, `why`
 * saying what cuBLASLt cannot do. The cuBLASLt workspace is
 * [ws_off, ws_off + ws_bytes) of the GEMM workspace: one region per queue
 * that runs gemms, of the largest ws_off + ws_bytes of the plan's
 * PLAN_GEMM_LT gemms, which the executor allocates beside the op
 * workspaces when it runs them through cuBLASLt (never otherwise). */
typedef enum PlanGemmPath { PLAN_GEMM_LT, PLAN_GEMM_NVRTC, PLAN_NGEMM_PATHS } PlanGemmPath;
typedef enum PlanGemmWhy {
    PLAN_GEMM_WHY_NONE,      /* cuBLASLt can run it */
    PLAN_GEMM_WHY_BATCH_SUM, /* sums products over batches (rbatch > 1: transpose_a's weight gradient):
                              * the reduction index is not one strided dimension, no matrix layout holds it */
    PLAN_GEMM_WHY_DEQUANT,   /* B is the weight b (stored quantized: nf4, int8) dequantized into the op's
                              * workspace by the launch before, at the launch's argument 2 (PARG_WS) */
    PLAN_NGEMM_WHYS
} PlanGemmWhy;
extern const char *const plan_gemm_path_names[PLAN_NGEMM_PATHS];
extern const char *const plan_gemm_why_names[PLAN_NGEMM_WHYS];
enum { PLAN_GEMM_TA = 1, PLAN_GEMM_TB = 2, PLAN_GEMM_ACCUM = 4 }; /* PlanGemm.flags; ACCUM: beta 1, else 0 */
/* An operand (c, a or b) that is the launch's op workspace rather than a
 * tensor: the launch's PARG_WS argument, off_* its byte offset there (the
 * chunked loss's logits, linear_cross_entropy on the CUDA backend). */
#define PLAN_GEMM_OP_WS (-2)
#define PLAN_GEMM_MAX_WS ((int64_t)1 << 30) /* a GEMM workspace beyond 1 GiB is a forged plan */

typedef struct PlanGemm {
    uint32_t launch;           /* its zk_gemm launch (the fallback) */
    uint8_t path, why;         /* PlanGemmPath, PlanGemmWhy */
    uint8_t dtype;             /* of A, B, C and bias */
    uint8_t flags;             /* PLAN_GEMM_TA | TB | ACCUM */
    int32_t c, a, b, bias;     /* tensor ids (c, a, b may be PLAN_GEMM_OP_WS); bias -1: none */
    int64_t off_c, off_a, off_b; /* bytes past the bound address */
    int64_t m, n, k, lda, ldb, ldc;
    int64_t batch, stride_a, stride_b, stride_c; /* output batches and their strides (elements) */
    int64_t rbatch, rstride_a, rstride_b;        /* summed batches (NVRTC only when > 1) */
    int64_t ws_off, ws_bytes;  /* cuBLASLt workspace inside the GEMM workspace (at most PLAN_GEMM_MAX_WS) */
} PlanGemm;

/* Hugging Face interchange (docs/huggingface.md): how the model's
 * parameters map to a Hugging Face checkpoint's tensors, for zinfrun --init
 * (import) and --export-hf. A parameter is the concatenation, along its
 * last axis, of its pieces in array order (a parameter's pieces are
 * adjacent). A piece is columns [src_col, src_col + cols) of the HF tensor
 * hf_name, that tensor read in zinf's [in, out] layout: transposed first
 * when `transpose` (nn.Linear stores [out, in]). So a fused zinf weight is
 * several pieces (cat), and a zinf weight cut from a fused HF one takes a
 * column range (cols); 1-D tensors have one axis to cut. Parameters with no
 * piece have no HF counterpart (e.g. adapters). A stacked piece (version 7)
 * makes only P[index, ...], the slice of index `index` along P's first
 * axis, read as a parameter of its own (its columns the slice's last
 * axis): the E per-expert tensors of a mixture-of-experts layer
 * ("...experts.3.w1.weight") stacked into one [E, ...] parameter. A
 * parameter's pieces are all stacked or none; stacked ones come in index
 * order, every index once, each index's pieces covering its columns.
 * A piece of an expert layout (version 9) is a rank-3 parameter's only
 * piece, whole, neither transposed nor stacked: the factors of PEFT's LoRA
 * on a fused [E, ...] expert weight (its ParamWrapper), one per expert.
 *   PLAN_HF_EXPERT_ROWS  P [E, r, I] is the HF tensor [E r, I] (lora_A: the
 *                        experts' blocks of r rows, in order)
 *   PLAN_HF_EXPERT_COLS  P [E, O, r] is the HF tensor [O, r E] with P[e, o, k]
 *                        at [o, k E + e] (lora_B: the experts interleaved) */
enum { PLAN_HF_PLAIN = 0, PLAN_HF_EXPERT_ROWS = 1, PLAN_HF_EXPERT_COLS = 2 };
typedef struct PlanHfPiece {
    int32_t tensor;            /* a TC_PARAM tensor id */
    const char *hf_name;       /* "model.layers.3.self_attn.q_proj.weight" */
    uint8_t transpose;
    int64_t src_col, cols;
    uint8_t stacked;           /* 1: the piece is part of P[index, ...] */
    int32_t index;             /* stacked: the index along P's first axis */
    uint8_t layout;            /* PLAN_HF_PLAIN or an expert layout */
} PlanHfPiece;

typedef struct PlanHf {
    const char *arch;          /* "LlamaForCausalLM"; NULL or "": the model has no hf block */
    const char *config;        /* config.json to write on export (JSON text), may be "" */
    PlanHfPiece *pieces;
    uint32_t npieces;
} PlanHf;

typedef struct Plan {
    Arena arena;               /* owns everything below */
    const char *model_name;
    const char *source;        /* the .zl file it was compiled from */
    PlanTarget target;
    PlanTrain train;
    int32_t ranks;             /* data-parallel world size */
    int32_t loss;              /* tensor id of the loss */
    int32_t ninputs;
    int32_t inputs[4];
    uint32_t opt_begin;        /* instrs[0..opt_begin) run once per micro-batch, the rest once per step */
    /* The optimizer overlapped with backward (docs/schedule.md, "The
     * speculative optimizer"): CPU Adams in the micro-batch update before
     * the gradient norm is known, keeping a copy of what they change. Then
     * [opt_begin, redo_begin) takes the norm; [redo_begin, redo_end) runs
     * only when the step clips or is skipped (it restores the copies and
     * redoes those Adams as the serial order would); [redo_end, ninstrs)
     * is the rest of the optimizer. Without it they are equal (and
     * ignored): plan_speculative. */
    uint32_t redo_begin, redo_end;
    PlanTensor *tensors; uint32_t ntensors;
    PlanOp *ops; uint32_t nops;
    PlanShard *shards; uint32_t nshards;
    PlanArena arenas[PLAN_NARENAS];
    PlanBuffer *buffers; uint32_t nbuffers;
    PlanOperand *operands; uint32_t noperands;
    PlanInstr *instrs; uint32_t ninstrs;
    uint32_t *deps; uint32_t ndeps;
    PlanKernel *kernels; uint32_t nkernels;
    /* CUDA launches: empty in a plan without GPU code (--kernels=none). */
    PlanLaunch *launches; uint32_t nlaunches;
    PlanLaunchArg *launch_args; uint32_t nlaunch_args;
    PlanOpCode *op_code;       /* nops entries when nlaunches > 0, else NULL */
    PlanTileCode *tile_code; uint32_t ntile_code; /* one per (op, tile, ntiles) of a tiled KERNEL instruction */
    int32_t util[PLAN_NUTIL][PLAN_NDTYPES]; /* launch index per utility and DType code, -1: none */
    PlanGemm *gemms; uint32_t ngemms; /* sorted by launch; none in a version-3 plan (every GEMM its launch) */
    uint32_t version;          /* the file's format version (plan_decode); PLAN_VERSION when built */
    PlanHf hf;                 /* empty when the model has no hf block */
} Plan;

/* A new empty plan (NULL on out of memory). */
Plan *plan_new(void);
void plan_free(Plan *p);
/* Bytes per element of a DType code (0 if unknown, and for the quantized
 * dtypes, which have bytes per block: plan_dtype_bytes). */
int plan_dtype_size(int dtype);
/* Bytes of n elements of a DType code (whole blocks for DT_NF4, DT_INT8,
 * DT_DYN8, DT_UDYN8). */
uint64_t plan_dtype_bytes(int dtype, int64_t n);
/* A DType code a tensor may have. */
bool plan_dtype_known(int dtype);

/* Serialises into a malloc'd buffer the caller frees. */
bool plan_encode(const Plan *p, uint8_t **out, size_t *len, char *err, size_t errlen);
/* Parses an untrusted buffer; name is used in messages ("model.plan: ...").
 * Reads versions PLAN_VERSION_OLDEST..PLAN_VERSION_ZSTD (a version-3 plan has
 * no gemms section: ngemms 0). */
Plan *plan_decode(const uint8_t *buf, size_t len, const char *name, char *err, size_t errlen);
bool plan_write(const Plan *p, const char *path, char *err, size_t errlen);
/* Writes buf[0..len), a plan_encode, to path (beside it, then renamed). */
bool plan_write_bytes(const uint8_t *buf, size_t len, const char *path, char *err, size_t errlen);
Plan *plan_read(const char *path, char *err, size_t errlen);

/* Index into p->gemms of launch li's GEMM descriptor, -1: none (binary
 * search: gemms are sorted by launch). */
int plan_gemm_of_launch(const Plan *p, uint32_t li);

/* The token batch the runtime feeds each micro-batch and rank: B =
 * train.micro_batch rows of T token ids, T the last dimension of input 0.
 * False when the plan defines none: no input, an input id out of range, a
 * scalar input, B or T below 1, or B*T int32 ids beyond what memory can
 * address. The verifier ties every INPUT instruction to it. */
bool plan_batch_shape(const Plan *p, int64_t *B, int64_t *T);

/* Whether the plan's optimizer is speculative (Plan.redo_begin). */
static inline bool plan_speculative(const Plan *p) { return p->redo_begin < p->redo_end; }

/* FNV-1a 64-bit hash, the sections' checksum. */
uint64_t plan_fnv1a64(const void *data, size_t n);
/* "1.50 GiB" */
const char *plan_bytes_str(uint64_t bytes, char *buf, size_t n);
/* Where this machine's probed target lives (zinfprobe writes it, zinfc with
 * no --target reads it, and measures it first when it is not there):
 * `chosen` when not NULL (the programs pass ZINF_PROBE; "" or "none": no
 * probe file, returns false), else $XDG_CACHE_HOME/zinf/probe-MACHINE.zl,
 * else $HOME/.cache/zinf/probe-MACHINE.zl (MACHINE: the CPU model, the
 * cores and the memory, "Intel_R_Xeon_R_Platinum_8481C-2c-31g": another
 * machine sharing the home directory has a file of its own). False when there is no such
 * place (no HOME) or it does not fit in n. */
bool plan_probe_path(const char *chosen, char *buf, size_t n);

#endif
