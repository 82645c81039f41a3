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

size_t hk_align(size_t n);
float *hk_ws_take(HkWs *w, int64_t n);
size_t hk_f32_copy_bytes(const HkTensor *t);
void hk_load_f32(const HkTensor *t, float *dst);
void hk_store_f32(HkTensor *t, const float *src);
const float *hk_view_in(const HkTensor *t, HkWs *w);
float *hk_view_out(HkTensor *t, HkWs *w, bool load);
void hk_view_done(HkTensor *t, const float *p);
bool hk_is_float(const HkTensor *t);
bool hk_present(const HkTensor *t);
void hk_colsum_acc(const float *dy, int64_t R, int64_t N, HkTensor *g);

#endif
