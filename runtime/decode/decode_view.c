/* decode_view: how a decode step sees a plan's tensors (decode_impl.h):
 * a tensor's one-row view, its sizes, the parameters' bytes. The analysis
 * (decode.c) and both step back ends read them; they read nothing back. */
#include "decode_impl.h"
#include <string.h>
#include "vocab.h"

const char *kvdec_prim_str(int prim) { return (unsigned)prim < PRIM_COUNT ? prim_names[prim] : "?"; }

void kvdec_view_dims(const KvDecoder *d, int t, int64_t dims[PLAN_MAX_RANK]) {
    const PlanTensor *pt = &d->p->tensors[t];
    memcpy(dims, pt->dims, sizeof pt->dims[0] * PLAN_MAX_RANK);
    if (d->kind[t] == DK_BT) dims[0] = dims[1] = 1;
    if (d->kind[t] == DK_T) dims[0] = 1;
}

int64_t kvdec_view_numel(const KvDecoder *d, int t) {
    const PlanTensor *pt = &d->p->tensors[t];
    int64_t rows = d->kind[t] == DK_BT ? d->B * d->T : d->kind[t] == DK_T ? d->T : 1;
    return pt->numel / rows;
}

uint64_t kvdec_view_bytes(const KvDecoder *d, int t) {
    return (uint64_t)kvdec_view_numel(d, t) * (uint64_t)plan_dtype_size(d->p->tensors[t].dtype);
}

int64_t kvdec_last_dim(const KvDecoder *d, int t) {
    const PlanTensor *pt = &d->p->tensors[t];
    return pt->rank ? pt->dims[pt->rank - 1] : 1;
}

uint64_t kvdec_param_bytes(const Plan *p) {
    uint64_t b = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].cls == TC_PARAM) b += (uint64_t)p->tensors[t].numel * (uint64_t)plan_dtype_size(p->tensors[t].dtype);
    return b;
}
