/* exec_operand: what the code of every instruction uses, on either
 * backend: operand addressing, element access, and reading and writing a
 * shard's home wherever it lives (GPU arena through the backend, host
 * arenas, NVMe through rtio). The lowest file of the executor: it calls no
 * other. */
#include "exec_impl.h"
#include <string.h>
#include "half.h"
#include "rtio.h"

/* ---- memory ---- */

size_t rt_dsz(int dt) {
    int s = plan_dtype_size(dt);
    return (size_t)(s > 0 ? s : 4);
}

uint8_t *rt_opnd_ptr(const Rt *r, const PlanOperand *o) {
    if (o->buffer < 0) return NULL;
    const PlanBuffer *b = &r->p->buffers[o->buffer];
    if (b->arena == ARENA_NVME || !r->arena[b->arena]) return NULL; /* NULL: device memory under CUDA */
    return r->arena[b->arena] + r->boff[o->buffer] + o->offset;
}

uint64_t rt_nvme_off(const Rt *r, const PlanOperand *o) {
    return r->boff[o->buffer] + o->offset;
}

const PlanOperand *rt_opnd(const Rt *r, const PlanInstr *in, uint32_t k) {
    return &r->p->operands[in->opnd + k];
}

double rt_elem_get(const void *p, int dt, int64_t i) {
    switch (dt) {
    case DT_BF16: return half_bf16_to_f32(((const uint16_t *)p)[i]);
    case DT_F16: return half_f16_to_f32(((const uint16_t *)p)[i]);
    case DT_I32: return ((const int32_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

void rt_elem_set(void *p, int dt, int64_t i, double v) {
    switch (dt) {
    case DT_BF16: ((uint16_t *)p)[i] = half_f32_to_bf16((float)v); break;
    case DT_F16: ((uint16_t *)p)[i] = half_f32_to_f16((float)v); break;
    case DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

/* Reads or writes bytes of a shard's home, wherever it lives. */
int rt_home_read(Rt *r, int buffer, uint64_t off, void *dst, uint64_t bytes, char *err, size_t n) {
    const PlanBuffer *b = &r->p->buffers[buffer];
    uint64_t at = r->boff[buffer] + off;
    if (b->arena == ARENA_GPU && r->be->device_memory) return r->be->home_read(r, at, dst, bytes, err, n);
    if (b->arena != ARENA_NVME) {
        memcpy(dst, r->arena[b->arena] + at, bytes);
        return 0;
    }
    return rtio_read(&r->io, at, dst, bytes, err, n);
}

int rt_home_write(Rt *r, int buffer, uint64_t off, const void *src, uint64_t bytes, char *err, size_t n) {
    const PlanBuffer *b = &r->p->buffers[buffer];
    uint64_t at = r->boff[buffer] + off;
    if (b->arena == ARENA_GPU && r->be->device_memory) return r->be->home_write(r, at, src, bytes, err, n);
    if (b->arena != ARENA_NVME) {
        memcpy(r->arena[b->arena] + at, src, bytes);
        return 0;
    }
    return rtio_write(&r->io, at, src, bytes, err, n);
}
