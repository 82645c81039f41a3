/* adam: AdamW in one pass; see adam.h. The kernel is written once
 * (adam_simd.h) over the host kernels' vector operations (hostk_simd.h) and
 * compiled for each ISA, inlined per (gradient dtype, parameter dtype) pair
 * so the dtype switch sits outside the loop. Tails run the same lane
 * arithmetic on zero-padded vectors, so every element of a tensor gets
 * bit-identical results whatever its position, the thread count or the ISA. */
#include "adam.h"
#include "half.h"
#include "hostk_threads.h"
#include "plan.h"
#include "qstate.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
/* Elements per thread work unit; a multiple of every vector width. */
#define ADAM_BLOCK 65536

typedef struct Coef {
    float b1, omb1, b2, omb2;
    float step_size;    /* lr / (1 - beta1^t) */
    float inv_sqrt_bc2; /* 1 / sqrt(1 - beta2^t) */
    float eps;
    float decay;        /* 1 - lr * weight_decay */
    float scale;        /* gradient scale */
} Coef;

/* ---- the kernel, once per instruction set (adam_simd.h over hostk_simd.h) ---- */

#define HK_SIMD_FUNCS "adam_simd.h"
#define HK_SIMD 512
#include "hostk_simd.h"
#undef HK_SIMD
#define HK_SIMD 256
#include "hostk_simd.h"
#undef HK_SIMD
#define HK_SIMD 1
#include "hostk_simd.h"
#undef HK_SIMD
#undef HK_SIMD_FUNCS

static void run_vec(AdamIsa isa, const Coef *c, const float *w0, const void *m0, const void *v0, float *w, void *m, void *v,
                    const void *g, DType gdt, void *p, DType pdt, DType sdt, int64_t n) {
    switch (isa) {
    case ADAM_ISA_AVX512: adam_run_avx512(c, w0, m0, v0, w, m, v, g, gdt, p, pdt, sdt, n); break;
    case ADAM_ISA_AVX2: adam_run_avx2(c, w0, m0, v0, w, m, v, g, gdt, p, pdt, sdt, n); break;
    default: adam_run_scalar(c, w0, m0, v0, w, m, v, g, gdt, p, pdt, sdt, n); break;
    }
}

/* [0, n) of a tensor whose elements 0 start a block of 8-bit moments
 * (qstate.h; m0, v0, m, v point at that block): block after block, the
 * moments decoded to f32, stepped as f32 moments (the update uses them
 * before they are quantized again, as bitsandbytes' kernels do), then
 * encoded with the block's new absmax. */
static void run_q8(AdamIsa isa, const Coef *c, const float *w0, const uint8_t *m0, const uint8_t *v0, float *w, uint8_t *m,
                   uint8_t *v, const void *g, DType gdt, void *p, DType pdt, int64_t n) {
    float mf[QSTATE_BLOCK], vf[QSTATE_BLOCK];
    int gs = gdt == DT_F32 ? 4 : 2, ps = pdt == DT_F32 ? 4 : 2;
    for (int64_t b = 0, lo = 0; lo < n; b++, lo += QSTATE_BLOCK) {
        int len = (int)(n - lo < QSTATE_BLOCK ? n - lo : QSTATE_BLOCK);
        size_t at = (size_t)b * QSTATE_BLOCK_BYTES;
        qstate_decode_block(false, m0 + at, len, mf);
        qstate_decode_block(true, v0 + at, len, vf);
        run_vec(isa, c, w0 + lo, mf, vf, w + lo, mf, vf, (const char *)g + lo * gs, gdt, p ? (char *)p + lo * ps : NULL, pdt,
                DT_F32, len);
        qstate_encode_block(false, mf, len, m + at);
        qstate_encode_block(true, vf, len, v + at);
    }
}

/* Elements [lo, lo + n) of a tensor, with moments of dtype sdt. */
static void run_range(AdamIsa isa, const Coef *c, const float *w0, const void *m0, const void *v0, float *w, void *m, void *v,
                      const void *g, DType gdt, int gs, void *p, DType pdt, int ps, DType sdt, int64_t lo, int64_t n) {
    g = (const char *)g + lo * gs;
    if (p) p = (char *)p + lo * ps;
    if (sdt == DT_DYN8) {
        size_t at = (size_t)(lo / QSTATE_BLOCK) * QSTATE_BLOCK_BYTES;
        run_q8(isa, c, w0 + lo, (const uint8_t *)m0 + at, (const uint8_t *)v0 + at, w + lo, (uint8_t *)m + at, (uint8_t *)v + at, g,
               gdt, p, pdt, n);
        return;
    }
    size_t ss = sdt == DT_BF16 ? 2 : 4;
    run_vec(isa, c, w0 + lo, (const char *)m0 + lo * ss, (const char *)v0 + lo * ss, w + lo, (char *)m + lo * ss, (char *)v + lo * ss,
            g, gdt, p, pdt, sdt, n);
}

/* CPUID.1:ECX bit 29 (clang has no "f16c" for __builtin_cpu_supports). */
static int has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c >> 29) & 1u;
}

int adam_isa_supported(AdamIsa isa) {
    switch (isa) {
    case ADAM_ISA_AUTO:
    case ADAM_ISA_SCALAR: return 1;
    case ADAM_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case ADAM_ISA_AVX512: /* the 512-bit path uses the AVX2 path's conversions too (hostk_simd.h) */
        return __builtin_cpu_supports("avx512f") && adam_isa_supported(ADAM_ISA_AVX2);
    }
    return 0;
}

AdamIsa adam_isa_best(void) {
    if (adam_isa_supported(ADAM_ISA_AVX512)) return ADAM_ISA_AVX512;
    if (adam_isa_supported(ADAM_ISA_AVX2)) return ADAM_ISA_AVX2;
    return ADAM_ISA_SCALAR;
}

const char *adam_isa_name(AdamIsa isa) {
    switch (isa) {
    case ADAM_ISA_AUTO: return "auto";
    case ADAM_ISA_SCALAR: return "scalar";
    case ADAM_ISA_AVX2: return "avx2";
    case ADAM_ISA_AVX512: return "avx512";
    }
    return "?";
}

int adam_isa_parse(const char *name, AdamIsa *out) {
    static const AdamIsa all[] = {ADAM_ISA_AUTO, ADAM_ISA_SCALAR, ADAM_ISA_AVX2, ADAM_ISA_AVX512};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (name && !strcmp(name, adam_isa_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

static atomic_int chosen; /* adam_isa_set: ADAM_ISA_AUTO (0) for the best */

int adam_isa_set(AdamIsa isa) {
    if (!adam_isa_supported(isa)) return -1;
    atomic_store(&chosen, (int)isa);
    return 0;
}

AdamIsa adam_isa_resolve(AdamIsa requested) {
    if (requested != ADAM_ISA_AUTO) return adam_isa_supported(requested) ? requested : ADAM_ISA_AUTO;
    AdamIsa set = (AdamIsa)atomic_load_explicit(&chosen, memory_order_relaxed);
    return set != ADAM_ISA_AUTO ? set : adam_isa_best();
}

const char *adam_status_str(AdamStatus s) {
    switch (s) {
    case ADAM_OK: return "ok";
    case ADAM_EDTYPE: return "adam: gradient dtype must be f32, bf16 or f16, parameter dtype f32, bf16, f16 or none, and the moments f32, bf16 or dyn8 with udyn8";
    case ADAM_EISA: return "adam: the requested instruction set is not available on this processor";
    case ADAM_EARG: return "adam: bad argument (n < 0, step < 1 or a NULL array)";
    }
    return "adam: unknown status";
}

_Static_assert(ADAM_BLOCK % QSTATE_BLOCK == 0, "Adam's thread units hold whole 8-bit blocks");

typedef struct AdamJob {
    AdamIsa isa;
    const Coef *c;
    const float *w0;
    const void *m0, *v0;
    float *w;
    void *m, *v;
    const void *g;
    DType gdt;
    void *p;
    DType pdt, sdt;
    int64_t n;
    int gs, ps;
} AdamJob;

static void adam_unit(void *ctx, int64_t b) {
    const AdamJob *j = ctx;
    int64_t lo = b * ADAM_BLOCK, len = j->n - lo < ADAM_BLOCK ? j->n - lo : ADAM_BLOCK;
    run_range(j->isa, j->c, j->w0, j->m0, j->v0, j->w, j->m, j->v, j->g, j->gdt, j->gs, j->p, j->pdt, j->ps, j->sdt, lo, len);
}

AdamStatus adam_step(const AdamParams *p, int64_t step, float *master, float *m, float *v,
                     const void *grad, DType grad_dt, void *param_out, DType param_dt, int64_t n,
                     float grad_scale) {
    return adam_step_state(p, step, master, m, v, master, m, v, DT_F32, DT_F32, grad, grad_dt, param_out, param_dt, n, grad_scale);
}

AdamStatus adam_step_to(const AdamParams *p, int64_t step, const float *master_in, const float *m_in, const float *v_in,
                        float *master, float *m, float *v, const void *grad, DType grad_dt, void *param_out,
                        DType param_dt, int64_t n, float grad_scale) {
    return adam_step_state(p, step, master_in, m_in, v_in, master, m, v, DT_F32, DT_F32, grad, grad_dt, param_out, param_dt, n,
                           grad_scale);
}

AdamStatus adam_step_state(const AdamParams *p, int64_t step, const float *master_in, const void *m_in, const void *v_in,
                           float *master, void *m, void *v, DType m_dt, DType v_dt, const void *grad, DType grad_dt,
                           void *param_out, DType param_dt, int64_t n, float grad_scale) {
    if (!p || n < 0 || step < 1) return ADAM_EARG;
    if (grad_dt != DT_F32 && grad_dt != DT_BF16 && grad_dt != DT_F16) return ADAM_EDTYPE;
    if (!param_out) param_dt = DT_NONE;
    if (param_dt != DT_NONE && param_dt != DT_F32 && param_dt != DT_BF16 && param_dt != DT_F16)
        return ADAM_EDTYPE;
    if (!((m_dt == DT_F32 && v_dt == DT_F32) || (m_dt == DT_BF16 && v_dt == DT_BF16) || (m_dt == DT_DYN8 && v_dt == DT_UDYN8)))
        return ADAM_EDTYPE;
    if (n == 0) return ADAM_OK;
    if (!master || !m || !v || !master_in || !m_in || !v_in || !grad) return ADAM_EARG;
    AdamIsa isa = adam_isa_resolve(p->isa);
    if (isa == ADAM_ISA_AUTO) return ADAM_EISA;

    Coef c;
    double bc1 = 1.0 - pow((double)p->beta1, (double)step);
    double bc2 = 1.0 - pow((double)p->beta2, (double)step);
    c.b1 = p->beta1;
    c.omb1 = 1.0f - p->beta1;
    c.b2 = p->beta2;
    c.omb2 = 1.0f - p->beta2;
    c.step_size = (float)((double)p->lr / bc1);
    c.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    c.eps = p->eps;
    c.decay = (float)(1.0 - (double)p->lr * (double)p->weight_decay);
    c.scale = grad_scale;

    int gs = grad_dt == DT_F32 ? 4 : 2, ps = param_dt == DT_F32 ? 4 : 2;
    int64_t nblocks = (n + ADAM_BLOCK - 1) / ADAM_BLOCK;
    int threads = p->threads > 0 ? p->threads : hk_threads();
    if (nblocks < 2 || threads < 2) {
        run_range(isa, &c, master_in, m_in, v_in, master, m, v, grad, grad_dt, gs, param_out, param_dt, ps, m_dt, 0, n);
        return ADAM_OK;
    }
    /* the rank's pool (hostk_threads.h): one team of the rank at a time, kernels or Adam */
    AdamJob j = {isa, &c, master_in, m_in, v_in, master, m, v, grad, grad_dt, param_out, param_dt, m_dt, n, gs, ps};
    hk_parallel(threads, nblocks, adam_unit, &j);
    return ADAM_OK;
}

double adam_lr(const AdamSchedule *t, int64_t s) {
    if (t->warmup_steps > 0 && s <= t->warmup_steps) return t->lr * (double)s / (double)t->warmup_steps;
    if (t->schedule == LR_COSINE || t->schedule == LR_LINEAR) {
        double span = (double)(t->steps - t->warmup_steps);
        if (span < 1) span = 1;
        double p = (double)(s - t->warmup_steps) / span;
        if (p > 1) p = 1;
        if (t->schedule == LR_LINEAR) return t->min_lr + (t->lr - t->min_lr) * (1 - p);
        return t->min_lr + (t->lr - t->min_lr) * (1 + cos(M_PI * p)) / 2;
    }
    return t->lr;
}

AdamSchedule adam_schedule_of(const PlanTrain *t) {
    return (AdamSchedule){.lr = t->lr, .warmup_steps = t->warmup_steps, .schedule = t->schedule, .min_lr = t->min_lr, .steps = t->steps};
}
