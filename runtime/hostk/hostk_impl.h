/* hostk_impl: what the hostk_*.c files share (private to the module). */
#ifndef ZINF_HOSTK_IMPL_H
#define ZINF_HOSTK_IMPL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "half.h"
#include "hostk.h"

/* Loops shorter than this run on one thread. */
#define HK_PAR_MIN 32768

/* Element i of a float tensor's storage as fp32, and back (rounded). */
static inline float hk_ld(const void *p, DType dt, int64_t i) {
    switch (dt) {
    case DT_BF16: return half_bf16_to_f32(((const uint16_t *)p)[i]);
    case DT_F16: return half_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void hk_st(void *p, DType dt, int64_t i, float v) {
    switch (dt) {
    case DT_BF16: ((uint16_t *)p)[i] = half_f32_to_bf16(v); break;
    case DT_F16: ((uint16_t *)p)[i] = half_f32_to_f16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* A workspace being carved into 64-byte aligned fp32 blocks. */
typedef struct HkWs {
    char *base;
    size_t used;
} HkWs;

/* hostk_tensor.c (below every other hostk file) */
size_t hk_align(size_t n);
float *hk_ws_take(HkWs *w, int64_t n);
bool hk_is_float(const HkTensor *t);
bool hk_present(const HkTensor *t);
/* hostk.c */
size_t hk_f32_copy_bytes(const HkTensor *t);
void hk_load_f32(const HkTensor *t, float *dst);
/* hostk_quant.c: a DT_NF4 or DT_INT8 tensor decoded into dst (its numel f32) */
void hk_dequant_f32(const HkTensor *t, float *dst);
void hk_store_f32(HkTensor *t, const float *src);
const float *hk_view_in(const HkTensor *t, HkWs *w);
float *hk_view_out(HkTensor *t, HkWs *w, bool load);
void hk_view_done(HkTensor *t, const float *p);
void hk_colsum_acc(const float *dy, int64_t R, int64_t N, HkTensor *g);

/* One call of a primitive's kernels, as hostk_run.c hands it to the
 * primitive's family (runtime/plan/prim.def's family column): operands
 * resolved, absent ones NULL. */
typedef struct HkCall {
    PrimId prim;
    const HkTensor *in;            /* the inputs (split's backward reads dout as pieces) */
    int nin;
    const HkTensor *a, *b, *c;     /* in[0..2] when present, else NULL */
    HkTensor *out;                 /* forward: the outputs it writes; NULL in backward */
    int nout;
    const HkTensor *y;             /* the first output, present or not (workspace sizes read its shape) */
    const HkTensor *dout, *dy;     /* backward: the outputs' gradients, dout[0] */
    HkTensor *da, *db, *dc;        /* backward: the inputs' gradients wanted, NULL: not */
    HkTensor *din;                 /* backward: every input's gradient, din[i] for in[i] (data NULL: not wanted) */
    const int64_t *iattr;
    const double *fattr;
    const double *table;           /* the op's list attributes (PlanOp.table), NULL: none */
    int64_t ntable;
    void *ws;
    const int32_t *seg;            /* packed rows' sample starts (hostk.h), NULL: a row is one sample */
    int64_t seg_T, seg_tokens;     /* with seg: the batch's T and B*T */
} HkCall;

/* Packed rows (hostk_packed.c): whether an add or mul is of a tensor
 * broadcast over the batch ([T, ...] against [B, T, ...]), read per
 * position of each sample; its kernels. */
bool hk_packed_binary(const HkCall *c);
int hk_packed_binary_fwd(const HkCall *c);
int hk_packed_binary_bwd(const HkCall *c);

/* A family's kernels. bwd NULL: no backward (arange); ws NULL: no
 * workspace. ws sees shapes only (data may be a dummy). Defined beside the
 * kernels as hk_family_<family>; hostk_run.c indexes them by primitive. */
typedef struct HkFamily {
    int (*fwd)(const HkCall *c);
    int (*bwd)(const HkCall *c);
    size_t (*ws)(const HkCall *c);
} HkFamily;
#define PRIM(id, name, nin_min, nin_max, nout, family) extern const HkFamily hk_family_##family;
#include "prim.def"
#undef PRIM

/* Attribute defaults of the generic entries (hostk.h). */
static inline double hk_attr_eps(const double *f) { return f && f[FA_LAYERNORM_EPS] != 0 ? f[FA_LAYERNORM_EPS] : 1e-5; }
static inline int64_t hk_attr_i(const int64_t *a, int i) { return a ? a[i] : 0; }
static inline bool hk_attr_flag(const int64_t *a, int i) { return hk_attr_i(a, i) != 0; }
static inline int64_t hk_attr_kv(const int64_t *a) {
    return hk_attr_i(a, IA_ATTENTION_KV_HEADS) ? hk_attr_i(a, IA_ATTENTION_KV_HEADS) : hk_attr_i(a, IA_ATTENTION_HEADS);
}

#endif
