/* hostk_tensor: the host kernels' tensor helpers (HkTensor made, sized,
 * read and written element by element), their error strings, and the
 * carving of a workspace: the lowest file of runtime/hostk, which every
 * kernel file uses and which calls none. */
#include "hostk.h"
#include <string.h>
#include "hostk_impl.h"

const char *hk_strerror(int rc) {
    switch (rc) {
    case HK_OK: return "ok";
    case HK_ERR_ARG: return "a required tensor is missing or an operand count is wrong";
    case HK_ERR_DTYPE: return "unsupported dtype for this operand";
    case HK_ERR_SHAPE: return "operand shapes do not agree";
    case HK_ERR_ATTR: return "attribute out of range";
    case HK_ERR_INDEX: return "an index (embedding id or target) is outside [0, V)";
    case HK_ERR_WORKSPACE: return "workspace missing or smaller than declared";
    case HK_ERR_PRIM: return "not a primitive these kernels run";
    default: return "unknown host kernel error";
    }
}

HkTensor hk_tensor(void *data, DType dt, int rank, const int64_t *dims) {
    HkTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.rank = rank < 0 ? 0 : rank > HK_MAX_RANK ? HK_MAX_RANK : rank;
    for (int i = 0; i < t.rank; i++) t.dims[i] = dims[i];
    return t;
}

int64_t hk_numel(const HkTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

size_t hk_dtype_size(DType dt) {
    switch (dt) {
    case DT_F32: case DT_I32: return 4;
    case DT_BF16: case DT_F16: return 2;
    default: return 0;
    }
}

float hk_get(const HkTensor *t, int64_t i) {
    if (t->dtype == DT_I32) return (float)((const int32_t *)t->data)[i];
    return hk_ld(t->data, t->dtype, i);
}

void hk_set(HkTensor *t, int64_t i, float v) {
    if (t->dtype != DT_I32) {
        hk_st(t->data, t->dtype, i, v);
        return;
    }
    /* to i32: truncation, saturating, NaN -> 0 (a plain cast would be undefined there) */
    int32_t x = v != v ? 0 : v >= 2147483648.0f ? INT32_MAX : v < -2147483648.0f ? INT32_MIN : (int32_t)v;
    ((int32_t *)t->data)[i] = x;
}

size_t hk_align(size_t n) { return (n + 63) & ~(size_t)63; }

float *hk_ws_take(HkWs *w, int64_t n) {
    char *p = w->base + w->used;
    w->used += hk_align((size_t)n * sizeof(float));
    return (float *)p;
}

bool hk_is_float(const HkTensor *t) {
    return t && (t->dtype == DT_F32 || t->dtype == DT_BF16 || t->dtype == DT_F16);
}

bool hk_present(const HkTensor *t) { return t && t->data; }
