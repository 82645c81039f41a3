/* vocab: the names a plan's numbers stand for, which the compiler writes
 * and the runtime reads: element types, parameter initialisers, tensor
 * classes, op kinds, primitives (runtime/plan/prim.def) and rope's
 * frequency scalings. A PlanTensor's dtype/cls/init and a PlanOp's
 * kind/prim are these codes; changing one is a plan format change. */
#ifndef ZINF_VOCAB_H
#define ZINF_VOCAB_H
#include <stdint.h>

/* DT_NF4 and DT_INT8 are the quantized storage of frozen weights
 * (runtime/hostk/quant.h, docs/training.md): blocks of DTYPE_QBLOCK
 * elements with their absmax, a whole number of bytes per block, not per
 * element, so dtype_size is 0 for them and dtype_bytes counts them. */
/* DT_DYN8 and DT_UDYN8 are the 8-bit forms of Adam's moments (train {
 * optimizer = adam(state = "8bit") }, runtime/hostk/qstate.h): blocks of
 * DTYPE_QSTATE_BLOCK elements, a byte each (an index into bitsandbytes'
 * signed or unsigned dynamic map), then the block's f32 absmax. */
typedef enum DType { DT_NONE = 0, DT_F32, DT_BF16, DT_F16, DT_I32, DT_NF4, DT_INT8, DT_DYN8, DT_UDYN8 } DType;
/* "f32", "bf16", "f16", "i32", "nf4", "int8", "dyn8", "udyn8"; "any" for DT_NONE. */
const char *dtype_name(DType t);
/* Bytes per element; 0 for DT_NONE and the blocked dtypes. */
int dtype_size(DType t);
enum { DTYPE_QBLOCK = 64, DTYPE_QSTATE_BLOCK = 2048 };
/* DT_NF4 or DT_INT8 (a frozen weight stored quantized) */
static inline int dtype_is_quant(int t) { return t == DT_NF4 || t == DT_INT8; }
/* DT_DYN8 or DT_UDYN8 (an Adam moment stored in 8 bits) */
static inline int dtype_is_qstate(int t) { return t == DT_DYN8 || t == DT_UDYN8; }
/* Stored in blocks (either of the above): bytes count per block, not per element. */
static inline int dtype_is_blocked(int t) { return dtype_is_quant(t) || dtype_is_qstate(t); }
/* Elements of a block: 64, 2048; 1 for the other dtypes. */
static inline int64_t dtype_block(int t) { return dtype_is_quant(t) ? DTYPE_QBLOCK : dtype_is_qstate(t) ? DTYPE_QSTATE_BLOCK : 1; }
/* Bytes of n elements: n * dtype_size, or whole blocks of a blocked
 * dtype (36 bytes per 64 for nf4, 68 for int8, 2052 per 2048 for dyn8
 * and udyn8: a short last block takes a whole one); 0 for DT_NONE;
 * INT64_MAX where that many bytes would not fit in an int64_t (a count
 * from an untrusted plan). */
int64_t dtype_bytes(DType t, int64_t n);

typedef enum InitKind { INIT_NONE, INIT_NORMAL, INIT_ZEROS, INIT_ONES, INIT_UNIFORM } InitKind;

typedef enum PrimId {
#define PRIM(id, name, nin_min, nin_max, nout, family) PRIM_##id,
#include "prim.def"
#undef PRIM
    PRIM_COUNT
} PrimId;
extern const char *const prim_names[PRIM_COUNT];

/* The attribute slots (prim.def's PRIM_IATTR and PRIM_FATTR lines): an
 * op of primitive P keeps its attribute N in iattr[IA_P_N] or fattr[FA_P_N].
 * Where primitives of one family share an attribute its slots agree, so
 * the family's code may read it by either name. */
enum {
#define PRIM(id, name, nin_min, nin_max, nout, family)
#define PRIM_IATTR(id, NAME, slot, name) IA_##id##_##NAME = slot,
#define PRIM_FATTR(id, NAME, slot, name) FA_##id##_##NAME = slot,
#define PRIM_LATTR(id, NAME, slot, name) LA_##id##_##NAME = slot,
#include "prim.def"
#undef PRIM
#undef PRIM_IATTR
#undef PRIM_FATTR
#undef PRIM_LATTR
};
_Static_assert(FA_LAYERNORM_EPS == FA_RMSNORM_EPS, "the norm family reads eps at one slot");

/* What kind of state a tensor is: the memory model counts bytes per class
 * and the planner places each class. */
typedef enum TensorClass {
    TC_INPUT,      /* model inputs (tokens, targets) */
    TC_PARAM,      /* trainable parameter, in the training dtype */
    TC_GRAD,       /* gradient of a parameter */
    TC_MASTER,     /* fp32 master copy of a parameter (mixed precision) */
    TC_MOMENTUM,   /* Adam first moment, fp32 */
    TC_VARIANCE,   /* Adam second moment, fp32 */
    TC_ACT,        /* activation, live inside a layer only */
    TC_CKPT,       /* activation checkpoint: kept from forward to backward */
    TC_WORKSPACE,  /* scratch of an op (attention statistics, ...) */
    TC_CONST,      /* computed from nothing but attributes (arange) */
    TC_COUNT
} TensorClass;
extern const char *const tensor_class_names[TC_COUNT];

/* What an op does. Forward, backward and recompute ops run a primitive
 * (prim); the rest are the training step's bookkeeping, added by autodiff. */
typedef enum OpKind {
    OP_FWD,        /* forward of prim */
    OP_BWD,        /* backward of prim: in[] = the forward op's inputs, then its
                    * outputs, then the outputs' gradients (layout per prim in
                    * docs/autodiff.md); out[i] = gradient of forward input i or -1.
                    * Gradients are ACCUMULATED (+=) into zeroed buffers. */
    OP_RECOMPUTE,  /* forward of prim re-run inside backward (activation checkpointing) */
    OP_ZERO_GRAD,  /* out[0] := 0 (a gradient buffer, before backward) */
    OP_LOSS_GRAD,  /* out[0] (gradient of the loss, a scalar) := loss scale */
    OP_GRAD_NORM,  /* global L2 norm of every parameter gradient -> out[0] (f32 scalar) */
    OP_ADAM,       /* in: param, grad, master, momentum, variance, grad_norm (or -1);
                    * updates master/momentum/variance in place and writes param */
    OP_KIND_COUNT
} OpKind;
extern const char *const op_kind_names[OP_KIND_COUNT];

/* rope's frequency scaling (docs/primitives.md): none; linear (every
 * frequency divided by factor); llama3 (low frequencies divided by factor,
 * high ones kept, a smooth blend between); yarn (YaRN's ramp between the
 * two by rotations per original context, beta_fast and beta_slow). */
/* longrope (Phi-3's su): per-pair divisors, short_factor while the sequence is at most
 * original_max_positions long, long_factor beyond (the op's table, LA_ROPE_*) */
typedef enum RopeScaling { ROPE_NONE, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN, ROPE_LONGROPE } RopeScaling;
/* gated_mlp's gate activation (its iattr[IA_GATED_MLP_ACT], the word "silu" or "gelu"). */
typedef enum GatedMlpAct { GATED_MLP_SILU, GATED_MLP_GELU } GatedMlpAct;

/* The learning-rate schedule after warmup (train { schedule = ... };
 * docs/training.md): lr throughout, a cosine or a straight line from lr to
 * min_lr over the remaining steps. Stored as a u8 in plans (0 and 1 as the
 * boolean "cosine" of older plans). */
typedef enum LrSchedule { LR_CONSTANT, LR_COSINE, LR_LINEAR, LR_NSCHEDULES } LrSchedule;
extern const char *const lr_schedule_names[LR_NSCHEDULES];

#endif
