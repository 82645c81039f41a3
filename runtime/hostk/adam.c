/* adam: AdamW in one pass; see adam.h. Each ISA has one kernel written
 * against a fixed (gradient dtype, parameter dtype) pair through an
 * always-inline body, so the dtype switch sits outside the loop. Tails run
 * the same vector body on a zero-padded copy, so every element of a tensor
 * gets bit-identical arithmetic whatever its position or the thread count. */
#include "adam.h"
#include "hostk_threads.h"
#include "plan.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
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

/* ---- conversions (round to nearest even) ---- */

static inline uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (e == 0) {
        float f = (float)mant * 5.9604644775390625e-8f; /* mant * 2^-24, exact */
        return u2f(f2u(f) | sign);
    }
    if (e == 31) return u2f(sign | 0x7f800000u | (mant << 13));
    return u2f(sign | ((e + 112u) << 23) | (mant << 13));
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t u = f2u(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);                        /* >= 2^16: inf */
    if (a < 0x38800000u) {
        /* Below 2^-14: f16 subnormal or zero. Adding 0.5 puts the f16 unit
         * 2^-24 at the float's last mantissa bit, and the FPU rounds. */
        float r = u2f(a) + 0.5f;
        return (uint16_t)(sign | (f2u(r) - 0x3f000000u));
    }
    uint32_t odd = (a >> 13) & 1u;
    a += 0xc8000fffu + odd; /* rebias exponent by (15 - 127) and round half to even */
    return (uint16_t)(sign | (a >> 13));
}

/* ---- plain C ---- */

static inline float load_g(const void *g, DType dt, int64_t i) {
    switch (dt) {
    case DT_BF16: return bf16_to_f32(((const uint16_t *)g)[i]);
    case DT_F16: return f16_to_f32(((const uint16_t *)g)[i]);
    default: return ((const float *)g)[i];
    }
}

static inline void store_p(void *p, DType dt, int64_t i, float w) {
    switch (dt) {
    case DT_BF16: ((uint16_t *)p)[i] = f32_to_bf16(w); break;
    case DT_F16: ((uint16_t *)p)[i] = f32_to_f16(w); break;
    case DT_F32: ((float *)p)[i] = w; break;
    default: break;
    }
}

static void kern_scalar(const Coef *c, const float *w0, const float *m0, const float *v0, float *w, float *m, float *v,
                        const void *g, DType gdt, void *p, DType pdt, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float gi = load_g(g, gdt, i) * c->scale;
        float mi = c->b1 * m0[i] + c->omb1 * gi;
        float vi = c->b2 * v0[i] + c->omb2 * gi * gi;
        float den = sqrtf(vi) * c->inv_sqrt_bc2 + c->eps;
        float wi = w0[i] * c->decay - c->step_size * (mi / den);
        m[i] = mi;
        v[i] = vi;
        w[i] = wi;
        store_p(p, pdt, i, wi);
    }
}

/* ---- AVX2 + FMA + F16C ---- */

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

AVX2_TARGET static inline __m256 avx2_load_g(const void *g, DType dt, int64_t i) {
    if (dt == DT_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)g + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    if (dt == DT_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)g + i)));
    return _mm256_loadu_ps((const float *)g + i);
}

AVX2_TARGET static inline void avx2_store_p(void *p, DType dt, int64_t i, __m256 w) {
    if (dt == DT_BF16) {
        __m256i u = _mm256_castps_si256(w);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
        __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
        __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(w, w, _CMP_UNORD_Q));
        r = _mm256_blendv_epi8(r, qnan, isnan);
        __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)((uint16_t *)p + i), _mm256_castsi256_si128(pk));
    } else if (dt == DT_F16) {
        _mm_storeu_si128((__m128i *)((uint16_t *)p + i),
                         _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else if (dt == DT_F32) {
        _mm256_storeu_ps((float *)p + i, w);
    }
}

__attribute__((always_inline)) AVX2_TARGET static inline void
avx2_body(const Coef *c, const float *w0, const float *m0, const float *v0, float *w, float *m, float *v,
          const void *g, DType gdt, void *p, DType pdt,
          int64_t n) {
    const __m256 b1 = _mm256_set1_ps(c->b1), omb1 = _mm256_set1_ps(c->omb1);
    const __m256 b2 = _mm256_set1_ps(c->b2), omb2 = _mm256_set1_ps(c->omb2);
    const __m256 ss = _mm256_set1_ps(c->step_size), ib = _mm256_set1_ps(c->inv_sqrt_bc2);
    const __m256 eps = _mm256_set1_ps(c->eps), dec = _mm256_set1_ps(c->decay);
    const __m256 sc = _mm256_set1_ps(c->scale);
    for (int64_t i = 0; i < n; i += 8) {
        __m256 gi = _mm256_mul_ps(avx2_load_g(g, gdt, i), sc);
        __m256 mi = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m0 + i), _mm256_mul_ps(omb1, gi));
        __m256 vi = _mm256_fmadd_ps(b2, _mm256_loadu_ps(v0 + i), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
        __m256 den = _mm256_fmadd_ps(_mm256_sqrt_ps(vi), ib, eps);
        __m256 wi = _mm256_fnmadd_ps(ss, _mm256_div_ps(mi, den), _mm256_mul_ps(_mm256_loadu_ps(w0 + i), dec));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(w + i, wi);
        avx2_store_p(p, pdt, i, wi);
    }
}

/* n a multiple of 8. */
AVX2_TARGET static void avx2_vec(const Coef *c, const float *w0, const float *m0, const float *v0, float *w, float *m,
                                 float *v, const void *g, DType gdt, void *p, DType pdt, int64_t n) {
#define AVX2_CASE(G, P) \
    if (gdt == G && pdt == P) { avx2_body(c, w0, m0, v0, w, m, v, g, G, p, P, n); return; }
#define AVX2_ROW(G) AVX2_CASE(G, DT_NONE) AVX2_CASE(G, DT_F32) AVX2_CASE(G, DT_BF16) AVX2_CASE(G, DT_F16)
    AVX2_ROW(DT_F32)
    AVX2_ROW(DT_BF16)
    AVX2_ROW(DT_F16)
#undef AVX2_ROW
#undef AVX2_CASE
}

/* ---- AVX-512F ---- */

#define AVX512_TARGET __attribute__((target("avx512f")))

AVX512_TARGET static inline __m512 avx512_load_g(const void *g, DType dt, int64_t i) {
    if (dt == DT_BF16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    if (dt == DT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i)));
    return _mm512_loadu_ps((const float *)g + i);
}

AVX512_TARGET static inline void avx512_store_p(void *p, DType dt, int64_t i, __m512 w) {
    if (dt == DT_BF16) {
        __m512i u = _mm512_castps_si512(w);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        __mmask16 isnan = _mm512_cmp_ps_mask(w, w, _CMP_UNORD_Q);
        r = _mm512_mask_blend_epi32(isnan, r, qnan);
        _mm256_storeu_si256((__m256i *)((uint16_t *)p + i), _mm512_cvtepi32_epi16(r));
    } else if (dt == DT_F16) {
        _mm256_storeu_si256((__m256i *)((uint16_t *)p + i),
                            _mm512_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else if (dt == DT_F32) {
        _mm512_storeu_ps((float *)p + i, w);
    }
}

__attribute__((always_inline)) AVX512_TARGET static inline void
avx512_body(const Coef *c, const float *w0, const float *m0, const float *v0, float *w, float *m, float *v,
          const void *g, DType gdt, void *p,
            DType pdt, int64_t n) {
    const __m512 b1 = _mm512_set1_ps(c->b1), omb1 = _mm512_set1_ps(c->omb1);
    const __m512 b2 = _mm512_set1_ps(c->b2), omb2 = _mm512_set1_ps(c->omb2);
    const __m512 ss = _mm512_set1_ps(c->step_size), ib = _mm512_set1_ps(c->inv_sqrt_bc2);
    const __m512 eps = _mm512_set1_ps(c->eps), dec = _mm512_set1_ps(c->decay);
    const __m512 sc = _mm512_set1_ps(c->scale);
    for (int64_t i = 0; i < n; i += 16) {
        __m512 gi = _mm512_mul_ps(avx512_load_g(g, gdt, i), sc);
        __m512 mi = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m0 + i), _mm512_mul_ps(omb1, gi));
        __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v0 + i), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
        __m512 den = _mm512_fmadd_ps(_mm512_sqrt_ps(vi), ib, eps);
        __m512 wi = _mm512_fnmadd_ps(ss, _mm512_div_ps(mi, den), _mm512_mul_ps(_mm512_loadu_ps(w0 + i), dec));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        _mm512_storeu_ps(w + i, wi);
        avx512_store_p(p, pdt, i, wi);
    }
}

/* n a multiple of 16. */
AVX512_TARGET static void avx512_vec(const Coef *c, const float *w0, const float *m0, const float *v0, float *w,
                                     float *m, float *v, const void *g, DType gdt, void *p, DType pdt, int64_t n) {
#define AVX512_CASE(G, P) \
    if (gdt == G && pdt == P) { avx512_body(c, w0, m0, v0, w, m, v, g, G, p, P, n); return; }
#define AVX512_ROW(G) AVX512_CASE(G, DT_NONE) AVX512_CASE(G, DT_F32) AVX512_CASE(G, DT_BF16) AVX512_CASE(G, DT_F16)
    AVX512_ROW(DT_F32)
    AVX512_ROW(DT_BF16)
    AVX512_ROW(DT_F16)
#undef AVX512_ROW
#undef AVX512_CASE
}

/* ---- dispatch ---- */

typedef void (*VecKernel)(const Coef *, const float *, const float *, const float *, float *, float *, float *,
                          const void *, DType, void *, DType, int64_t);

/* Run a vector kernel of width W over [0, n): whole vectors directly, the
 * tail through zero-padded copies. The state is read from w0, m0, v0 and
 * written to w, m, v (the same arrays for a step in place). */
static void run_vec(VecKernel k, int W, const Coef *c, const float *w0, const float *m0, const float *v0, float *w,
                    float *m, float *v, const void *g, DType gdt, void *p, DType pdt, int64_t n) {
    int64_t body = n - n % W;
    if (body) k(c, w0, m0, v0, w, m, v, g, gdt, p, pdt, body);
    int64_t r = n - body;
    if (!r) return;
    float tw[16] = {0}, tm[16] = {0}, tv[16] = {0}, tp[16] = {0};
    float tg[16] = {0}; /* big enough for 16 f32 or 16 halves */
    int gs = gdt == DT_F32 ? 4 : 2, ps = pdt == DT_F32 ? 4 : 2;
    memcpy(tw, w0 + body, (size_t)r * 4);
    memcpy(tm, m0 + body, (size_t)r * 4);
    memcpy(tv, v0 + body, (size_t)r * 4);
    memcpy(tg, (const char *)g + body * gs, (size_t)r * (size_t)gs);
    k(c, tw, tm, tv, tw, tm, tv, tg, gdt, p ? tp : NULL, pdt, W);
    memcpy(w + body, tw, (size_t)r * 4);
    memcpy(m + body, tm, (size_t)r * 4);
    memcpy(v + body, tv, (size_t)r * 4);
    if (p && pdt != DT_NONE) memcpy((char *)p + body * ps, tp, (size_t)r * (size_t)ps);
}

static void run_range(AdamIsa isa, const Coef *c, const float *w0, const float *m0, const float *v0, float *w, float *m,
                      float *v, const void *g, DType gdt, void *p, DType pdt, int64_t n) {
    switch (isa) {
    case ADAM_ISA_AVX512: run_vec(avx512_vec, 16, c, w0, m0, v0, w, m, v, g, gdt, p, pdt, n); break;
    case ADAM_ISA_AVX2: run_vec(avx2_vec, 8, c, w0, m0, v0, w, m, v, g, gdt, p, pdt, n); break;
    default: kern_scalar(c, w0, m0, v0, w, m, v, g, gdt, p, pdt, n); break;
    }
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
    case ADAM_ISA_AVX512: return __builtin_cpu_supports("avx512f");
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
    case ADAM_EDTYPE: return "adam: gradient dtype must be f32, bf16 or f16 and parameter dtype f32, bf16, f16 or none";
    case ADAM_EISA: return "adam: the requested instruction set is not available on this processor";
    case ADAM_EARG: return "adam: bad argument (n < 0, step < 1 or a NULL array)";
    }
    return "adam: unknown status";
}

typedef struct AdamJob {
    AdamIsa isa;
    const Coef *c;
    const float *w0, *m0, *v0;
    float *w, *m, *v;
    const void *g;
    DType gdt;
    void *p;
    DType pdt;
    int64_t n;
    int gs, ps;
} AdamJob;

static void adam_unit(void *ctx, int64_t b) {
    const AdamJob *j = ctx;
    int64_t lo = b * ADAM_BLOCK, len = j->n - lo < ADAM_BLOCK ? j->n - lo : ADAM_BLOCK;
    run_range(j->isa, j->c, j->w0 + lo, j->m0 + lo, j->v0 + lo, j->w + lo, j->m + lo, j->v + lo, (const char *)j->g + lo * j->gs, j->gdt,
              j->p ? (char *)j->p + lo * j->ps : NULL, j->pdt, len);
}

AdamStatus adam_step(const AdamParams *p, int64_t step, float *master, float *m, float *v,
                     const void *grad, DType grad_dt, void *param_out, DType param_dt, int64_t n,
                     float grad_scale) {
    return adam_step_to(p, step, master, m, v, master, m, v, grad, grad_dt, param_out, param_dt, n, grad_scale);
}

AdamStatus adam_step_to(const AdamParams *p, int64_t step, const float *master_in, const float *m_in, const float *v_in,
                        float *master, float *m, float *v, const void *grad, DType grad_dt, void *param_out,
                        DType param_dt, int64_t n, float grad_scale) {
    if (!p || n < 0 || step < 1) return ADAM_EARG;
    if (grad_dt != DT_F32 && grad_dt != DT_BF16 && grad_dt != DT_F16) return ADAM_EDTYPE;
    if (!param_out) param_dt = DT_NONE;
    if (param_dt != DT_NONE && param_dt != DT_F32 && param_dt != DT_BF16 && param_dt != DT_F16)
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
        run_range(isa, &c, master_in, m_in, v_in, master, m, v, grad, grad_dt, param_out, param_dt, n);
        return ADAM_OK;
    }
    /* the rank's pool (hostk_threads.h): one team of the rank at a time, kernels or Adam */
    AdamJob j = {isa, &c, master_in, m_in, v_in, master, m, v, grad, grad_dt, param_out, param_dt, n, gs, ps};
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
