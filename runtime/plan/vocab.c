/* vocab: the names of the codes of vocab.h. */
#include <stdint.h>
#include "vocab.h"

const char *const prim_names[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) name,
#include "prim.def"
#undef PRIM
};

const char *const tensor_class_names[TC_COUNT] = {
    "input", "param", "grad", "master", "momentum", "variance",
    "activation", "checkpoint", "workspace", "const",
};

const char *const op_kind_names[OP_KIND_COUNT] = {
    "fwd", "bwd", "recompute", "zero_grad", "loss_grad", "grad_norm", "adam",
};

const char *dtype_name(DType t) {
    switch (t) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    case DT_NF4: return "nf4";
    case DT_INT8: return "int8";
    case DT_DYN8: return "dyn8";
    case DT_UDYN8: return "udyn8";
    default: return "any";
    }
}

int dtype_size(DType t) {
    switch (t) {
    case DT_F32:
    case DT_I32: return 4;
    case DT_BF16:
    case DT_F16: return 2;
    default: return 0;
    }
}

int64_t dtype_bytes(DType t, int64_t n) {
    if (n <= 0) return 0;
    int64_t blk = dtype_block(t), blocks = n / blk + (n % blk != 0), count = blocks, per;
    switch (t) {
    case DT_NF4: per = DTYPE_QBLOCK / 2 + 4; break;
    case DT_INT8: per = DTYPE_QBLOCK + 4; break;
    case DT_DYN8:
    case DT_UDYN8: per = DTYPE_QSTATE_BLOCK + 4; break;
    default: per = dtype_size(t), count = n; break;
    }
    /* a count read from an untrusted plan may be near INT64_MAX: saturate */
    return per <= 0 ? 0 : count > INT64_MAX / per ? INT64_MAX : count * per;
}

const char *const lr_schedule_names[LR_NSCHEDULES] = {"constant", "cosine", "linear"};
