/* hostk_simd: the functions of hostk_vec.h written once over a few vector
 * operations. runtime/hostk/hostk_vec.c includes this file three times, with
 * HK_SIMD set to 512 (AVX-512F), 256 (AVX2+FMA+F16C) or 1 (plain C); every
 * function carries the instruction set as a target attribute and gets the
 * suffix _avx512, _avx2 or _scalar. Another module of the room may write
 * its own functions over the same operations: it defines HK_SIMD_FUNCS to
 * the header that holds them, which is then included in place of
 * hostk_vec.h's (runtime/hostk/adam.c: adam_simd.h). Not a public header. */
#if !defined(HK_SIMD)
#error "hostk_simd.h is included by hostk_vec.c and adam.c only"
#endif

#define AI __attribute__((always_inline, unused))
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

#if HK_SIMD == 512
#define TGT __attribute__((target("avx512f,avx2,fma,f16c")))
#define W 16
#define FN(n) CAT(n, _avx512)
#define MR 6
#define MRX 12 /* rows of a tile one or two vectors wide */
#define NRMAX 4
#define VF __m512
#define VD __m512d /* 8 doubles: a VF is two VDs */
#define VM __mmask16
static inline AI TGT VF FN(v_zero)(void) { return _mm512_setzero_ps(); }
static inline AI TGT VF FN(v_set1)(float a) { return _mm512_set1_ps(a); }
static inline AI TGT VF FN(v_load)(const float *p) { return _mm512_loadu_ps(p); }
static inline AI TGT void FN(v_store)(float *p, VF v) { _mm512_storeu_ps(p, v); }
static inline AI TGT VM FN(v_mask)(int64_t n) { return (VM)(n >= 16 ? 0xffffu : ((1u << n) - 1u)); }
static inline AI TGT VF FN(v_load_m)(const float *p, VM m) { return _mm512_maskz_loadu_ps(m, p); }
static inline AI TGT void FN(v_store_m)(float *p, VM m, VF v) { _mm512_mask_storeu_ps(p, m, v); }
static inline AI TGT VF FN(v_add)(VF a, VF b) { return _mm512_add_ps(a, b); }
static inline AI TGT VF FN(v_sub)(VF a, VF b) { return _mm512_sub_ps(a, b); }
static inline AI TGT VF FN(v_mul)(VF a, VF b) { return _mm512_mul_ps(a, b); }
static inline AI TGT VF FN(v_div)(VF a, VF b) { return _mm512_div_ps(a, b); }
static inline AI TGT VF FN(v_sqrt)(VF a) { return _mm512_sqrt_ps(a); }
static inline AI TGT VF FN(v_fma)(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
static inline AI TGT VF FN(v_max)(VF a, VF b) { return _mm512_max_ps(a, b); }
static inline AI TGT VF FN(v_min)(VF a, VF b) { return _mm512_min_ps(a, b); }
static inline AI TGT VF FN(v_round)(VF a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* 2^h * 2^(n-h) as two factors, n an integral float in [-160, 130] */
static inline AI TGT void FN(v_pow2)(VF n, VF *s1, VF *s2) {
    __m512i ni = _mm512_cvtps_epi32(n), h = _mm512_srai_epi32(ni, 1), k = _mm512_sub_epi32(ni, h);
    __m512i b = _mm512_set1_epi32(127);
    *s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h, b), 23));
    *s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, b), 23));
}
static inline AI TGT VF FN(v_nan_keep)(VF x, VF r) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
}
static inline AI TGT float FN(v_hmax)(VF v) { return _mm512_reduce_max_ps(v); }
static inline AI TGT VD FN(d_zero)(void) { return _mm512_setzero_pd(); }
static inline AI TGT VD FN(d_set1)(double a) { return _mm512_set1_pd(a); }
static inline AI TGT VD FN(d_add)(VD a, VD b) { return _mm512_add_pd(a, b); }
static inline AI TGT VD FN(d_sub)(VD a, VD b) { return _mm512_sub_pd(a, b); }
static inline AI TGT VD FN(d_mul)(VD a, VD b) { return _mm512_mul_pd(a, b); }
static inline AI TGT VD FN(d_lo)(VF v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline AI TGT VD FN(d_hi)(VF v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
static inline AI TGT VD FN(d_load)(const double *p) { return _mm512_loadu_pd(p); }
static inline AI TGT void FN(d_store)(double *p, VD v) { _mm512_storeu_pd(p, v); }
static inline AI TGT double FN(d_hsum)(VD v) {
    double t[8];
    _mm512_storeu_pd(t, v);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}
/* 16-bit storage: bf16 is the top half of an f32; f16 through the hardware (RNE, as half.h) */
static inline AI TGT VF FN(v_ld_bf16)(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* f16 -> f32 by the hardware, except NaNs: half.h keeps their payload as it is (a signalling NaN stays one) */
static inline AI TGT VF FN(v_ld_f16)(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    __m512i u = _mm512_cvtepu16_epi32(h);
    __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7c00));
    __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x8000)), 16),
                                   _mm512_or_si512(_mm512_set1_epi32(0x7f800000), _mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x3ff)), 13)));
    return _mm512_mask_blend_ps(nan, _mm512_cvtph_ps(h), _mm512_castsi512_ps(bits));
}
static inline AI TGT void FN(v_st_bf16)(uint16_t *p, VF w) {
    __m512i u = _mm512_castps_si512(w);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(w, w, _CMP_UNORD_Q), r, q);
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
}
static inline AI TGT void FN(v_st_f16)(uint16_t *p, VF w) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#elif HK_SIMD == 256
#define TGT __attribute__((target("avx2,fma,f16c")))
#define W 8
#define FN(n) CAT(n, _avx2)
#define MR 4
#define MRX 4
#define NRMAX 3
#define VF __m256
#define VD __m256d
#define VM __m256i
static inline AI TGT VF FN(v_zero)(void) { return _mm256_setzero_ps(); }
static inline AI TGT VF FN(v_set1)(float a) { return _mm256_set1_ps(a); }
static inline AI TGT VF FN(v_load)(const float *p) { return _mm256_loadu_ps(p); }
static inline AI TGT void FN(v_store)(float *p, VF v) { _mm256_storeu_ps(p, v); }
static inline AI TGT VM FN(v_mask)(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n > 8 ? 8 : n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline AI TGT VF FN(v_load_m)(const float *p, VM m) { return _mm256_maskload_ps(p, m); }
static inline AI TGT void FN(v_store_m)(float *p, VM m, VF v) { _mm256_maskstore_ps(p, m, v); }
static inline AI TGT VF FN(v_add)(VF a, VF b) { return _mm256_add_ps(a, b); }
static inline AI TGT VF FN(v_sub)(VF a, VF b) { return _mm256_sub_ps(a, b); }
static inline AI TGT VF FN(v_mul)(VF a, VF b) { return _mm256_mul_ps(a, b); }
static inline AI TGT VF FN(v_div)(VF a, VF b) { return _mm256_div_ps(a, b); }
static inline AI TGT VF FN(v_sqrt)(VF a) { return _mm256_sqrt_ps(a); }
static inline AI TGT VF FN(v_fma)(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
static inline AI TGT VF FN(v_max)(VF a, VF b) { return _mm256_max_ps(a, b); }
static inline AI TGT VF FN(v_min)(VF a, VF b) { return _mm256_min_ps(a, b); }
static inline AI TGT VF FN(v_round)(VF a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline AI TGT void FN(v_pow2)(VF n, VF *s1, VF *s2) {
    __m256i ni = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(ni, 1), k = _mm256_sub_epi32(ni, h);
    __m256i b = _mm256_set1_epi32(127);
    *s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, b), 23));
    *s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, b), 23));
}
static inline AI TGT VF FN(v_nan_keep)(VF x, VF r) { return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
static inline AI TGT float FN(v_hmax)(VF v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}
static inline AI TGT VD FN(d_zero)(void) { return _mm256_setzero_pd(); }
static inline AI TGT VD FN(d_set1)(double a) { return _mm256_set1_pd(a); }
static inline AI TGT VD FN(d_add)(VD a, VD b) { return _mm256_add_pd(a, b); }
static inline AI TGT VD FN(d_sub)(VD a, VD b) { return _mm256_sub_pd(a, b); }
static inline AI TGT VD FN(d_mul)(VD a, VD b) { return _mm256_mul_pd(a, b); }
static inline AI TGT VD FN(d_lo)(VF v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
static inline AI TGT VD FN(d_hi)(VF v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
static inline AI TGT VD FN(d_load)(const double *p) { return _mm256_loadu_pd(p); }
static inline AI TGT void FN(d_store)(double *p, VD v) { _mm256_storeu_pd(p, v); }
static inline AI TGT double FN(d_hsum)(VD v) {
    double t[4];
    _mm256_storeu_pd(t, v);
    return (t[0] + t[1]) + (t[2] + t[3]);
}
static inline AI TGT VF FN(v_ld_bf16)(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline AI TGT VF FN(v_ld_f16)(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    __m256i u = _mm256_cvtepu16_epi32(h);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fff));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7c00));
    __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x8000)), 16),
                                   _mm256_or_si256(_mm256_set1_epi32(0x7f800000), _mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x3ff)), 13)));
    return _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
}
static inline AI TGT void FN(v_st_bf16)(uint16_t *p, VF w) {
    __m256i u = _mm256_castps_si256(w);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, q, _mm256_castps_si256(_mm256_cmp_ps(w, w, _CMP_UNORD_Q)));
    __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(pk));
}
static inline AI TGT void FN(v_st_f16)(uint16_t *p, VF w) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#else /* plain C: vectors of one */
#define TGT
#define W 1
#define FN(n) CAT(n, _scalar)
#define MR 4
#define MRX 4
#define NRMAX 4
#define VF float
#define VD double
#define VM int
static inline AI VF FN(v_zero)(void) { return 0.0f; }
static inline AI VF FN(v_set1)(float a) { return a; }
static inline AI VF FN(v_load)(const float *p) { return *p; }
static inline AI void FN(v_store)(float *p, VF v) { *p = v; }
static inline AI VM FN(v_mask)(int64_t n) { return n > 0; }
static inline AI VF FN(v_load_m)(const float *p, VM m) { return m ? *p : 0.0f; }
static inline AI void FN(v_store_m)(float *p, VM m, VF v) {
    if (m) *p = v;
}
static inline AI VF FN(v_add)(VF a, VF b) { return a + b; }
static inline AI VF FN(v_sub)(VF a, VF b) { return a - b; }
static inline AI VF FN(v_mul)(VF a, VF b) { return a * b; }
static inline AI VF FN(v_div)(VF a, VF b) { return a / b; }
static inline AI VF FN(v_sqrt)(VF a) { return sqrtf(a); }
static inline AI VF FN(v_fma)(VF a, VF b, VF c) { return fmaf(a, b, c); }
/* as the instructions: the second operand when either is NaN */
static inline AI VF FN(v_max)(VF a, VF b) { return a > b ? a : b; }
static inline AI VF FN(v_min)(VF a, VF b) { return a < b ? a : b; }
static inline AI VF FN(v_round)(VF a) { return nearbyintf(a); }
static inline AI void FN(v_pow2)(VF n, VF *s1, VF *s2) {
    int32_t ni = (int32_t)n, h = ni >> 1, k = ni - h; /* >> of a negative int: arithmetic on every target here */
    *s1 = half_bits_f32((uint32_t)(h + 127) << 23);
    *s2 = half_bits_f32((uint32_t)(k + 127) << 23);
}
static inline AI VF FN(v_nan_keep)(VF x, VF r) { return x != x ? x : r; }
static inline AI float FN(v_hmax)(VF v) { return v; }
static inline AI VD FN(d_zero)(void) { return 0.0; }
static inline AI VD FN(d_set1)(double a) { return a; }
static inline AI VD FN(d_add)(VD a, VD b) { return a + b; }
static inline AI VD FN(d_sub)(VD a, VD b) { return a - b; }
static inline AI VD FN(d_mul)(VD a, VD b) { return a * b; }
static inline AI VD FN(d_lo)(VF v) { return (double)v; }
static inline AI VD FN(d_hi)(VF v) { (void)v; return 0.0; }
static inline AI VD FN(d_load)(const double *p) { return *p; }
static inline AI void FN(d_store)(double *p, VD v) { *p = v; }
static inline AI double FN(d_hsum)(VD v) { return v; }
static inline AI VF FN(v_ld_bf16)(const uint16_t *p) { return half_bf16_to_f32(*p); }
static inline AI VF FN(v_ld_f16)(const uint16_t *p) { return half_f16_to_f32(*p); }
static inline AI void FN(v_st_bf16)(uint16_t *p, VF w) { *p = half_f32_to_bf16(w); }
static inline AI void FN(v_st_f16)(uint16_t *p, VF w) { *p = half_f32_to_f16(w); }
#endif

/* doubles in one VD (the scalar path: 1, and d_hi is unused) */
#define DW (W == 1 ? 1 : W / 2)

/* Prefetch (for writing) the line at element i of a row the next pass
 * reads and writes, so that a pass streams three rows from memory at once. */
static inline AI TGT void FN(prefetch_w)(const void *p, DType dt, int64_t i) {
    if (p) __builtin_prefetch((const char *)p + i * (dt == DT_F32 ? 4 : 2), 1, 3);
}
/* Prefetch for reading (the next row, during a pass that reads the cache only;
 * past the end of a tensor it touches nothing: a prefetch does not fault) */
static inline AI TGT void FN(prefetch_r)(const void *p, DType dt, int64_t i) {
    __builtin_prefetch((const char *)p + i * (dt == DT_F32 ? 4 : 2), 0, 3);
}

/* ---- loads and stores of any float dtype: whole vectors, and n < W elements
 * through a zero-padded copy ---- */

static inline AI TGT VF FN(v_ld)(const void *p, DType dt, int64_t i) {
    if (dt == DT_BF16) return FN(v_ld_bf16)((const uint16_t *)p + i);
    if (dt == DT_F16) return FN(v_ld_f16)((const uint16_t *)p + i);
    return FN(v_load)((const float *)p + i);
}
static inline AI TGT void FN(v_st)(void *p, DType dt, int64_t i, VF v) {
    if (dt == DT_BF16) FN(v_st_bf16)((uint16_t *)p + i, v);
    else if (dt == DT_F16) FN(v_st_f16)((uint16_t *)p + i, v);
    else FN(v_store)((float *)p + i, v);
}
static inline AI TGT VF FN(v_ld_n)(const void *p, DType dt, int64_t i, int64_t n, float fill) {
    if (dt == DT_F32 || dt == DT_NONE) {
        float t[W];
        for (int k = 0; k < W; k++) t[k] = k < n ? ((const float *)p)[i + k] : fill;
        return FN(v_load)(t);
    }
    uint16_t t[2 * W]; /* as large as a float vector: v_ld's f32 branch is not taken */
    uint16_t f16 = dt == DT_BF16 ? half_f32_to_bf16(fill) : half_f32_to_f16(fill);
    for (int k = 0; k < 2 * W; k++) t[k] = k < n ? ((const uint16_t *)p)[i + k] : f16;
    return FN(v_ld)(t, dt, 0);
}
static inline AI TGT void FN(v_st_n)(void *p, DType dt, int64_t i, int64_t n, VF v) {
    if (dt == DT_F32 || dt == DT_NONE) {
        float t[W];
        FN(v_store)(t, v);
        memcpy((float *)p + i, t, sizeof(float) * (size_t)n);
        return;
    }
    uint16_t t[2 * W];
    FN(v_st)(t, dt, 0, v);
    memcpy((uint16_t *)p + i, t, sizeof(uint16_t) * (size_t)n);
}

/* ---- exp, sigmoid-based activations ---- */

/* exp(x): x = n ln2 + r, |r| <= ln2/2, a degree-7 polynomial (Cephes expf's
 * coefficients) for exp(r), times 2^n applied as two factors so that
 * subnormal results round once and overflow gives inf. */
static inline AI TGT VF FN(v_exp)(VF x) {
    VF xc = FN(v_min)(FN(v_max)(x, FN(v_set1)(-110.0f)), FN(v_set1)(89.0f));
    VF n = FN(v_round)(FN(v_mul)(xc, FN(v_set1)(1.44269504088896341f)));
    VF r = FN(v_fma)(n, FN(v_set1)(-0.693359375f), xc);
    r = FN(v_fma)(n, FN(v_set1)(2.12194440e-4f), r);
    VF p = FN(v_set1)(1.9875691500e-4f);
    p = FN(v_fma)(p, r, FN(v_set1)(1.3981999507e-3f));
    p = FN(v_fma)(p, r, FN(v_set1)(8.3334519073e-3f));
    p = FN(v_fma)(p, r, FN(v_set1)(4.1665795894e-2f));
    p = FN(v_fma)(p, r, FN(v_set1)(1.6666665459e-1f));
    p = FN(v_fma)(p, r, FN(v_set1)(5.0000001201e-1f));
    p = FN(v_fma)(p, FN(v_mul)(r, r), FN(v_add)(r, FN(v_set1)(1.0f)));
    VF s1, s2;
    FN(v_pow2)(n, &s1, &s2);
    return FN(v_nan_keep)(x, FN(v_mul)(FN(v_mul)(p, s1), s2));
}

#define GELU_2K 1.5957691216057308f      /* 2 sqrt(2/pi) */
#define GELU_2KC 0.071354816273095f      /* 2 sqrt(2/pi) 0.044715 */
#define GELU_6KC 0.214064448819285f      /* 6 sqrt(2/pi) 0.044715 */

/* gelu(x) = x / (1 + exp(-2u)), 2u = x (2k + 2kc x^2); below -100 the
 * value is -0 in float, which the clamp gives (and -inf a NaN would not) */
static inline AI TGT VF FN(v_gelu)(VF x) {
    VF xc = FN(v_max)(x, FN(v_set1)(-100.0f));
    VF x2 = FN(v_mul)(xc, xc);
    VF t = FN(v_mul)(xc, FN(v_fma)(FN(v_set1)(-GELU_2KC), x2, FN(v_set1)(-GELU_2K)));
    VF e = FN(v_exp)(t);
    return FN(v_nan_keep)(x, FN(v_div)(xc, FN(v_add)(FN(v_set1)(1.0f), e)));
}
/* gelu'(x) = s + x e s^2 (2k + 6kc x^2), s = 1/(1+e), e = exp(-2u) (capped
 * at e^80); x clamped to [-30, 30], beyond which it is 0 or 1 in float */
static inline AI TGT VF FN(v_gelu_grad)(VF x) {
    VF xc = FN(v_min)(FN(v_max)(x, FN(v_set1)(-30.0f)), FN(v_set1)(30.0f));
    VF x2 = FN(v_mul)(xc, xc);
    VF t = FN(v_mul)(xc, FN(v_fma)(FN(v_set1)(-GELU_2KC), x2, FN(v_set1)(-GELU_2K)));
    VF e = FN(v_exp)(FN(v_min)(t, FN(v_set1)(80.0f)));
    VF s = FN(v_div)(FN(v_set1)(1.0f), FN(v_add)(FN(v_set1)(1.0f), e));
    VF q = FN(v_mul)(FN(v_mul)(FN(v_mul)(xc, e), s), s);
    return FN(v_nan_keep)(x, FN(v_fma)(q, FN(v_fma)(FN(v_set1)(GELU_6KC), x2, FN(v_set1)(GELU_2K)), s));
}
/* silu(x) = x / (1 + exp(-x)); below -200 it is -0 in float */
static inline AI TGT VF FN(v_silu)(VF x) {
    VF xc = FN(v_max)(x, FN(v_set1)(-200.0f));
    VF e = FN(v_exp)(FN(v_sub)(FN(v_zero)(), xc));
    return FN(v_nan_keep)(x, FN(v_div)(xc, FN(v_add)(FN(v_set1)(1.0f), e)));
}
/* silu'(x) = s + x e s^2, x clamped to [-200, 200] */
static inline AI TGT VF FN(v_silu_grad)(VF x) {
    VF xc = FN(v_min)(FN(v_max)(x, FN(v_set1)(-200.0f)), FN(v_set1)(200.0f));
    VF e = FN(v_exp)(FN(v_min)(FN(v_sub)(FN(v_zero)(), xc), FN(v_set1)(80.0f)));
    VF s = FN(v_div)(FN(v_set1)(1.0f), FN(v_add)(FN(v_set1)(1.0f), e));
    return FN(v_nan_keep)(x, FN(v_fma)(FN(v_mul)(FN(v_mul)(xc, e), s), s, s));
}

#if defined(HK_SIMD_FUNCS)
#include HK_SIMD_FUNCS
#else
/* ---- rows ---- */

static TGT void FN(cast)(const void *src, DType st, void *dst, DType dt, int64_t n) {
    if (st == dt || (st != DT_BF16 && st != DT_F16 && dt != DT_BF16 && dt != DT_F16)) {
        memmove(dst, src, (size_t)n * (st == DT_F32 ? 4 : 2));
        return;
    }
    int64_t i = 0;
    for (; i + W <= n; i += W) FN(v_st)(dst, dt, i, FN(v_ld)(src, st, i));
    if (i < n) FN(v_st_n)(dst, dt, i, n - i, FN(v_ld_n)(src, st, i, n - i, 0.0f));
}

static TGT void FN(acc)(const void *src, DType st, void *dst, DType dt, int64_t n) {
    int64_t i = 0;
    for (; i + W <= n; i += W) FN(v_st)(dst, dt, i, FN(v_add)(FN(v_ld)(dst, dt, i), FN(v_ld)(src, st, i)));
    if (i < n)
        FN(v_st_n)(dst, dt, i, n - i, FN(v_add)(FN(v_ld_n)(dst, dt, i, n - i, 0.0f), FN(v_ld_n)(src, st, i, n - i, 0.0f)));
}

/* y = a + b or a * b */
static TGT void FN(bin)(const void *a, DType at, const void *b, DType bt, void *y, DType yt, int64_t n, bool mul) {
    int64_t i = 0;
    if (mul)
        for (; i + W <= n; i += W) FN(v_st)(y, yt, i, FN(v_mul)(FN(v_ld)(a, at, i), FN(v_ld)(b, bt, i)));
    else
        for (; i + W <= n; i += W) FN(v_st)(y, yt, i, FN(v_add)(FN(v_ld)(a, at, i), FN(v_ld)(b, bt, i)));
    if (i < n) {
        VF x = FN(v_ld_n)(a, at, i, n - i, 0.0f), z = FN(v_ld_n)(b, bt, i, n - i, 0.0f);
        FN(v_st_n)(y, yt, i, n - i, mul ? FN(v_mul)(x, z) : FN(v_add)(x, z));
    }
}

/* y += a * b (the product rounded, then the sum) */
static TGT void FN(mul_acc)(const void *a, DType at, const void *b, DType bt, void *y, DType yt, int64_t n) {
    int64_t i = 0;
    for (; i + W <= n; i += W)
        FN(v_st)(y, yt, i, FN(v_add)(FN(v_ld)(y, yt, i), FN(v_mul)(FN(v_ld)(a, at, i), FN(v_ld)(b, bt, i))));
    if (i < n) {
        int64_t r = n - i;
        VF p = FN(v_mul)(FN(v_ld_n)(a, at, i, r, 0.0f), FN(v_ld_n)(b, bt, i, r, 0.0f));
        FN(v_st_n)(y, yt, i, r, FN(v_add)(FN(v_ld_n)(y, yt, i, r, 0.0f), p));
    }
}

#define UNARY_ROW(NAME, EXPR)                                                                \
    static TGT void FN(NAME)(const float *x, float *y, int64_t n) {                          \
        int64_t i = 0;                                                                       \
        for (; i + W <= n; i += W) {                                                         \
            VF v = FN(v_load)(x + i);                                                        \
            FN(v_store)(y + i, EXPR);                                                        \
        }                                                                                    \
        if (i < n) {                                                                         \
            VF v = FN(v_ld_n)(x, DT_F32, i, n - i, 0.0f);                                    \
            FN(v_st_n)(y, DT_F32, i, n - i, EXPR);                                           \
        }                                                                                    \
    }
UNARY_ROW(gelu_fwd, FN(v_gelu)(v))
UNARY_ROW(silu_fwd, FN(v_silu)(v))
UNARY_ROW(exp, FN(v_exp)(v))
#undef UNARY_ROW

#define GRAD_ROW(NAME, GRAD)                                                                                   \
    static TGT void FN(NAME)(const float *x, const float *dy, float *dx, int64_t n) {                          \
        int64_t i = 0;                                                                                         \
        for (; i + W <= n; i += W)                                                                             \
            FN(v_store)(dx + i, FN(v_fma)(FN(v_load)(dy + i), GRAD(FN(v_load)(x + i)), FN(v_load)(dx + i)));   \
        if (i < n) {                                                                                           \
            int64_t r = n - i;                                                                                 \
            VF g = GRAD(FN(v_ld_n)(x, DT_F32, i, r, 0.0f));                                                    \
            FN(v_st_n)(dx, DT_F32, i, r,                                                                       \
                       FN(v_fma)(FN(v_ld_n)(dy, DT_F32, i, r, 0.0f), g, FN(v_ld_n)(dx, DT_F32, i, r, 0.0f)));  \
        }                                                                                                      \
    }
GRAD_ROW(gelu_bwd, FN(v_gelu_grad))
GRAD_ROW(silu_bwd, FN(v_silu_grad))
#undef GRAD_ROW

static TGT float FN(max)(const void *x, DType xt, int64_t n) {
    VF m = FN(v_set1)(-INFINITY);
    int64_t i = 0;
    for (; i + W <= n; i += W) m = FN(v_max)(FN(v_ld)(x, xt, i), m);
    if (i < n) m = FN(v_max)(FN(v_ld_n)(x, xt, i, n - i, -INFINITY), m);
    return FN(v_hmax)(m);
}

static TGT double FN(exp_sum)(const void *x, DType xt, float shift, int64_t n) {
    VD a0 = FN(d_zero)(), a1 = FN(d_zero)();
    VF sh = FN(v_set1)(shift);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        VF e = FN(v_exp)(FN(v_sub)(FN(v_ld)(x, xt, i), sh));
        a0 = FN(d_add)(a0, FN(d_lo)(e));
        if (W > 1) a1 = FN(d_add)(a1, FN(d_hi)(e));
    }
    if (i < n) {
        VF e = FN(v_exp)(FN(v_sub)(FN(v_ld_n)(x, xt, i, n - i, -INFINITY), sh));
        a0 = FN(d_add)(a0, FN(d_lo)(e));
        if (W > 1) a1 = FN(d_add)(a1, FN(d_hi)(e));
    }
    return FN(d_hsum)(FN(d_add)(a0, a1));
}

static TGT double FN(exp_shift_sum)(float *x, float a, float shift, int64_t n) {
    VD a0 = FN(d_zero)(), a1 = FN(d_zero)();
    VF av = FN(v_set1)(a), sh = FN(v_set1)(-shift);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        VF e = FN(v_exp)(FN(v_fma)(FN(v_load)(x + i), av, sh));
        FN(v_store)(x + i, e);
        a0 = FN(d_add)(a0, FN(d_lo)(e));
        if (W > 1) a1 = FN(d_add)(a1, FN(d_hi)(e));
    }
    if (i < n) {
        VF e = FN(v_exp)(FN(v_fma)(FN(v_ld_n)(x, DT_F32, i, n - i, -INFINITY), av, sh));
        FN(v_st_n)(x, DT_F32, i, n - i, e);
        a0 = FN(d_add)(a0, FN(d_lo)(e));
        if (W > 1) a1 = FN(d_add)(a1, FN(d_hi)(e));
    }
    return FN(d_hsum)(FN(d_add)(a0, a1));
}

static TGT void FN(exp_shift)(float *x, float a, float shift, int64_t n) {
    VF av = FN(v_set1)(a), sh = FN(v_set1)(-shift);
    int64_t i = 0;
    for (; i + W <= n; i += W) FN(v_store)(x + i, FN(v_exp)(FN(v_fma)(FN(v_load)(x + i), av, sh)));
    if (i < n)
        FN(v_st_n)(x, DT_F32, i, n - i, FN(v_exp)(FN(v_fma)(FN(v_ld_n)(x, DT_F32, i, n - i, 0.0f), av, sh)));
}

static TGT void FN(exp_axpy)(const void *x, DType xt, float shift, float s, void *d, DType dt, int64_t n) {
    VF sh = FN(v_set1)(shift), sc = FN(v_set1)(s);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        VF e = FN(v_exp)(FN(v_sub)(FN(v_ld)(x, xt, i), sh));
        FN(v_st)(d, dt, i, FN(v_add)(FN(v_ld)(d, dt, i), FN(v_mul)(e, sc)));
    }
    if (i < n) {
        int64_t r = n - i;
        VF e = FN(v_exp)(FN(v_sub)(FN(v_ld_n)(x, xt, i, r, 0.0f), sh));
        FN(v_st_n)(d, dt, i, r, FN(v_add)(FN(v_ld_n)(d, dt, i, r, 0.0f), FN(v_mul)(e, sc)));
    }
}

static TGT void FN(scale)(float *x, float s, int64_t n) {
    VF sc = FN(v_set1)(s);
    int64_t i = 0;
    for (; i + W <= n; i += W) FN(v_store)(x + i, FN(v_mul)(FN(v_load)(x + i), sc));
    for (; i < n; i++) x[i] *= s;
}

static TGT void FN(dsoftmax)(const float *p, float *dp, float c, float sc, int64_t n) {
    VF cc = FN(v_set1)(c), ss = FN(v_set1)(sc);
    int64_t i = 0;
    for (; i + W <= n; i += W)
        FN(v_store)(dp + i, FN(v_mul)(FN(v_mul)(FN(v_load)(p + i), FN(v_sub)(FN(v_load)(dp + i), cc)), ss));
    for (; i < n; i++) dp[i] = p[i] * (dp[i] - c) * sc;
}

static TGT double FN(dot)(const float *a, const float *b, int64_t n) {
    VD a0 = FN(d_zero)(), a1 = FN(d_zero)();
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        VF x = FN(v_load)(a + i), y = FN(v_load)(b + i);
        a0 = FN(d_add)(a0, FN(d_mul)(FN(d_lo)(x), FN(d_lo)(y)));
        if (W > 1) a1 = FN(d_add)(a1, FN(d_mul)(FN(d_hi)(x), FN(d_hi)(y)));
    }
    double s = FN(d_hsum)(FN(d_add)(a0, a1));
    for (; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* ---- layernorm, rmsnorm rows. Each body is inlined with constant dtypes
 * for the common cases (all f32, all bf16, all f16) and with run-time
 * dtypes otherwise. Statistics in double as the reference kernels; the
 * elementwise parts are the reference's float operations in its order. ---- */

static inline AI TGT void FN(ln_fwd_body)(const void *x, DType xt, const void *g, DType gt, const void *b, DType bt,
                                           void *y, DType yt, int64_t D, double eps, float *mean, float *rstd) {
    VD s0 = FN(d_zero)(), s1 = FN(d_zero)();
    int64_t i = 0, T = D - D % W;
    for (; i < T; i += W) {
        VF v = FN(v_ld)(x, xt, i);
        s0 = FN(d_add)(s0, FN(d_lo)(v));
        if (W > 1) s1 = FN(d_add)(s1, FN(d_hi)(v));
        if ((i & 15) == 0) FN(prefetch_w)(y, yt, i);
    }
    if (T < D) {
        VF v = FN(v_ld_n)(x, xt, T, D - T, 0.0f);
        s0 = FN(d_add)(s0, FN(d_lo)(v));
        if (W > 1) s1 = FN(d_add)(s1, FN(d_hi)(v));
    }
    double mu = D ? FN(d_hsum)(FN(d_add)(s0, s1)) / (double)D : 0;
    VD mud = FN(d_set1)(mu);
    s0 = FN(d_zero)(), s1 = FN(d_zero)();
    for (i = 0; i < T; i += W) {
        VF v = FN(v_ld)(x, xt, i);
        VD d0 = FN(d_sub)(FN(d_lo)(v), mud);
        s0 = FN(d_add)(s0, FN(d_mul)(d0, d0));
        if (W > 1) {
            VD d1 = FN(d_sub)(FN(d_hi)(v), mud);
            s1 = FN(d_add)(s1, FN(d_mul)(d1, d1));
        }
    }
    double ss = FN(d_hsum)(FN(d_add)(s0, s1));
    if (T < D) {
        /* the tail element by element (a padded vector would add mu^2 per pad) */
        float t[W];
        FN(v_store)(t, FN(v_ld_n)(x, xt, T, D - T, 0.0f));
        for (int64_t k = 0; k < D - T; k++) {
            double d = (double)t[k] - mu;
            ss += d * d;
        }
    }
    float m = (float)mu, rs = (float)(1.0 / sqrt((D ? ss / (double)D : 0) + eps));
    *mean = m;
    *rstd = rs;
    VF mv = FN(v_set1)(m), rv = FN(v_set1)(rs);
    for (i = 0; i < D; i += W) {
        int64_t r = D - i < W ? D - i : W;
        VF v;
        if (r == W) v = FN(v_mul)(FN(v_sub)(FN(v_ld)(x, xt, i), mv), rv);
        else v = FN(v_mul)(FN(v_sub)(FN(v_ld_n)(x, xt, i, r, 0.0f), mv), rv);
        if (g) v = FN(v_mul)(v, r == W ? FN(v_ld)(g, gt, i) : FN(v_ld_n)(g, gt, i, r, 0.0f));
        if (b) v = FN(v_add)(v, r == W ? FN(v_ld)(b, bt, i) : FN(v_ld_n)(b, bt, i, r, 0.0f));
        if (r == W) FN(v_st)(y, yt, i, v);
        else FN(v_st_n)(y, yt, i, r, v);
    }
}

static inline AI TGT VF FN(v_ldr)(const void *p, DType dt, int64_t i, int64_t r) {
    return r == W ? FN(v_ld)(p, dt, i) : FN(v_ld_n)(p, dt, i, r, 0.0f);
}
static inline AI TGT void FN(v_str)(void *p, DType dt, int64_t i, int64_t r, VF v) {
    if (r == W) FN(v_st)(p, dt, i, v);
    else FN(v_st_n)(p, dt, i, r, v);
}
/* pd[i .. i+r) += (double) v */
static inline AI TGT void FN(d_accum)(double *pd, int64_t i, int64_t r, VF v) {
    if (r == W) {
        FN(d_store)(pd + i, FN(d_add)(FN(d_load)(pd + i), FN(d_lo)(v)));
        if (W > 1) FN(d_store)(pd + i + DW, FN(d_add)(FN(d_load)(pd + i + DW), FN(d_hi)(v)));
        return;
    }
    float t[W];
    FN(v_store)(t, v);
    for (int64_t k = 0; k < r; k++) pd[i + k] += (double)t[k];
}

static inline AI TGT void FN(ln_bwd_body)(const void *x, DType xt, const void *g, DType gt, const void *dy, DType dyt,
                                           void *dx, DType dxt, double *pg, double *pb, int64_t D, float m, float rs) {
    VF mv = FN(v_set1)(m), rv = FN(v_set1)(rs);
    VD a0 = FN(d_zero)(), a1 = FN(d_zero)(), b0 = FN(d_zero)(), b1 = FN(d_zero)();
    for (int64_t i = 0; i < D; i += W) {
        int64_t r = D - i < W ? D - i : W;
        VF xh = FN(v_mul)(FN(v_sub)(FN(v_ldr)(x, xt, i, r), mv), rv);
        VF d = FN(v_ldr)(dy, dyt, i, r);
        VF dh = g ? FN(v_mul)(d, FN(v_ldr)(g, gt, i, r)) : d;
        a0 = FN(d_add)(a0, FN(d_lo)(dh));
        b0 = FN(d_add)(b0, FN(d_mul)(FN(d_lo)(dh), FN(d_lo)(xh)));
        if (W > 1) {
            a1 = FN(d_add)(a1, FN(d_hi)(dh));
            b1 = FN(d_add)(b1, FN(d_mul)(FN(d_hi)(dh), FN(d_hi)(xh)));
        }
        if (pg) FN(d_accum)(pg, i, r, FN(v_mul)(d, xh));
        if (pb) FN(d_accum)(pb, i, r, d);
        if ((i & 15) == 0) FN(prefetch_w)(dx, dxt, i);
    }
    if (!dx) return;
    double s1 = FN(d_hsum)(FN(d_add)(a0, a1)), s2 = FN(d_hsum)(FN(d_add)(b0, b1));
    VF m1 = FN(v_set1)((float)(s1 / (double)D)), m2 = FN(v_set1)((float)(s2 / (double)D));
    for (int64_t i = 0; i < D; i += W) {
        int64_t r = D - i < W ? D - i : W;
        VF xh = FN(v_mul)(FN(v_sub)(FN(v_ldr)(x, xt, i, r), mv), rv);
        VF d = FN(v_ldr)(dy, dyt, i, r);
        VF dh = g ? FN(v_mul)(d, FN(v_ldr)(g, gt, i, r)) : d;
        VF v = FN(v_mul)(rv, FN(v_sub)(FN(v_sub)(dh, m1), FN(v_mul)(xh, m2)));
        FN(v_str)(dx, dxt, i, r, FN(v_add)(FN(v_ldr)(dx, dxt, i, r), v));
        if ((i & 15) == 0) {
            FN(prefetch_r)(x, xt, i + D);
            FN(prefetch_r)(dy, dyt, i + D);
        }
    }
}

static inline AI TGT void FN(rms_fwd_body)(const void *x, DType xt, const void *g, DType gt, void *y, DType yt,
                                            int64_t D, double eps, float *rstd) {
    VD s0 = FN(d_zero)(), s1 = FN(d_zero)();
    for (int64_t i = 0; i < D; i += W) {
        int64_t r = D - i < W ? D - i : W;
        VF v = FN(v_ldr)(x, xt, i, r);
        VD l = FN(d_lo)(v);
        if ((i & 15) == 0) FN(prefetch_w)(y, yt, i);
        s0 = FN(d_add)(s0, FN(d_mul)(l, l));
        if (W > 1) {
            VD h = FN(d_hi)(v);
            s1 = FN(d_add)(s1, FN(d_mul)(h, h));
        }
    }
    double ss = FN(d_hsum)(FN(d_add)(s0, s1));
    float rs = (float)(1.0 / sqrt((D ? ss / (double)D : 0) + eps));
    *rstd = rs;
    VF rv = FN(v_set1)(rs);
    for (int64_t i = 0; i < D; i += W) {
        int64_t r = D - i < W ? D - i : W;
        VF v = FN(v_mul)(FN(v_ldr)(x, xt, i, r), rv);
        if (g) v = FN(v_mul)(v, FN(v_ldr)(g, gt, i, r));
        FN(v_str)(y, yt, i, r, v);
    }
}

static inline AI TGT void FN(rms_bwd_body)(const void *x, DType xt, const void *g, DType gt, const void *dy, DType dyt,
                                            void *dx, DType dxt, double *pg, int64_t D, float rs) {
    VF rv = FN(v_set1)(rs);
    VD s0 = FN(d_zero)(), s1 = FN(d_zero)();
    for (int64_t i = 0; i < D; i += W) {
        int64_t r = D - i < W ? D - i : W;
        VF xv = FN(v_ldr)(x, xt, i, r), d = FN(v_ldr)(dy, dyt, i, r);
        VF dh = g ? FN(v_mul)(d, FN(v_ldr)(g, gt, i, r)) : d;
        s0 = FN(d_add)(s0, FN(d_mul)(FN(d_lo)(dh), FN(d_lo)(xv)));
        if (W > 1) s1 = FN(d_add)(s1, FN(d_mul)(FN(d_hi)(dh), FN(d_hi)(xv)));
        if (pg) FN(d_accum)(pg, i, r, FN(v_mul)(FN(v_mul)(d, xv), rv));
        if ((i & 15) == 0) FN(prefetch_w)(dx, dxt, i);
    }
    if (!dx) return;
    float c = (float)(FN(d_hsum)(FN(d_add)(s0, s1)) / (double)D) * rs * rs;
    VF cv = FN(v_set1)(c);
    for (int64_t i = 0; i < D; i += W) {
        int64_t r = D - i < W ? D - i : W;
        VF xv = FN(v_ldr)(x, xt, i, r), d = FN(v_ldr)(dy, dyt, i, r);
        VF dh = g ? FN(v_mul)(d, FN(v_ldr)(g, gt, i, r)) : d;
        VF v = FN(v_mul)(rv, FN(v_sub)(dh, FN(v_mul)(xv, cv)));
        FN(v_str)(dx, dxt, i, r, FN(v_add)(FN(v_ldr)(dx, dxt, i, r), v));
        if ((i & 15) == 0) {
            FN(prefetch_r)(x, xt, i + D);
            FN(prefetch_r)(dy, dyt, i + D);
        }
    }
}

/* acc[i] += (double) x[i] */
static TGT void FN(dacc)(double *acc, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + W <= n; i += W) FN(d_accum)(acc, i, W, FN(v_load)(x + i));
    for (; i < n; i++) acc[i] += (double)x[i];
}

/* acc[i] += (double)(a[i] * b[i]) (b NULL: a[i]) */
static TGT void FN(dacc2)(double *acc, const void *a, DType at, const void *b, DType bt, int64_t n) {
    int64_t i = 0;
    for (; i < n; i += W) {
        int64_t r = n - i < W ? n - i : W;
        VF v = FN(v_ldr)(a, at, i, r);
        if (b) v = FN(v_mul)(v, FN(v_ldr)(b, bt, i, r));
        FN(d_accum)(acc, i, r, v);
    }
}

/* sum of x[i]^2 in double (x any float dtype) */
static TGT double FN(sumsq)(const void *x, DType xt, int64_t n) {
    VD a0 = FN(d_zero)(), a1 = FN(d_zero)();
    for (int64_t i = 0; i < n; i += W) {
        int64_t r = n - i < W ? n - i : W;
        VF v = FN(v_ldr)(x, xt, i, r);
        VD l = FN(d_lo)(v);
        a0 = FN(d_add)(a0, FN(d_mul)(l, l));
        if (W > 1) {
            VD h = FN(d_hi)(v);
            a1 = FN(d_add)(a1, FN(d_mul)(h, h));
        }
    }
    return FN(d_hsum)(FN(d_add)(a0, a1));
}

/* The dtype switch outside the loops: all operands f32, all bf16, all f16,
 * else run-time dtypes. */
#define SAME3(a, b, c, T) ((a) == (T) && ((b) == (T) || (b) == DT_NONE) && ((c) == (T) || (c) == DT_NONE))

static TGT void FN(ln_fwd)(const void *x, DType xt, const void *g, DType gt, const void *b, DType bt, void *y,
                           DType yt, int64_t D, double eps, float *mean, float *rstd) {
    if (!g) gt = DT_NONE;
    if (!b) bt = DT_NONE;
    if (SAME3(xt, gt, bt, DT_F32) && yt == DT_F32)
        FN(ln_fwd_body)(x, DT_F32, g, DT_F32, b, DT_F32, y, DT_F32, D, eps, mean, rstd);
    else if (SAME3(xt, gt, bt, DT_BF16) && yt == DT_BF16)
        FN(ln_fwd_body)(x, DT_BF16, g, DT_BF16, b, DT_BF16, y, DT_BF16, D, eps, mean, rstd);
    else FN(ln_fwd_body)(x, xt, g, gt, b, bt, y, yt, D, eps, mean, rstd);
}

static TGT void FN(ln_bwd)(const void *x, DType xt, const void *g, DType gt, const void *dy, DType dyt, void *dx,
                           DType dxt, double *pg, double *pb, int64_t D, float mean, float rstd) {
    if (!g) gt = DT_NONE;
    if (!dx) dxt = DT_NONE;
    if (SAME3(xt, gt, dxt, DT_F32) && dyt == DT_F32)
        FN(ln_bwd_body)(x, DT_F32, g, DT_F32, dy, DT_F32, dx, DT_F32, pg, pb, D, mean, rstd);
    else if (SAME3(xt, gt, dxt, DT_BF16) && dyt == DT_BF16)
        FN(ln_bwd_body)(x, DT_BF16, g, DT_BF16, dy, DT_BF16, dx, DT_BF16, pg, pb, D, mean, rstd);
    else FN(ln_bwd_body)(x, xt, g, gt, dy, dyt, dx, dxt, pg, pb, D, mean, rstd);
}

static TGT void FN(rms_fwd)(const void *x, DType xt, const void *g, DType gt, void *y, DType yt, int64_t D,
                            double eps, float *rstd) {
    if (!g) gt = DT_NONE;
    if (SAME3(xt, gt, yt, DT_F32)) FN(rms_fwd_body)(x, DT_F32, g, DT_F32, y, DT_F32, D, eps, rstd);
    else if (SAME3(xt, gt, yt, DT_BF16)) FN(rms_fwd_body)(x, DT_BF16, g, DT_BF16, y, DT_BF16, D, eps, rstd);
    else FN(rms_fwd_body)(x, xt, g, gt, y, yt, D, eps, rstd);
}

static TGT void FN(rms_bwd)(const void *x, DType xt, const void *g, DType gt, const void *dy, DType dyt, void *dx,
                            DType dxt, double *pg, int64_t D, float rstd) {
    if (!g) gt = DT_NONE;
    if (!dx) dxt = DT_NONE;
    if (SAME3(xt, gt, dxt, DT_F32) && dyt == DT_F32)
        FN(rms_bwd_body)(x, DT_F32, g, DT_F32, dy, DT_F32, dx, DT_F32, pg, D, rstd);
    else if (SAME3(xt, gt, dxt, DT_BF16) && dyt == DT_BF16)
        FN(rms_bwd_body)(x, DT_BF16, g, DT_BF16, dy, DT_BF16, dx, DT_BF16, pg, D, rstd);
    else FN(rms_bwd_body)(x, xt, g, gt, dy, dyt, dx, dxt, pg, D, rstd);
}
#undef SAME3

/* lanes [0, k) of v replaced by -inf */
static inline AI TGT VF FN(v_ninf_below)(VF v, int64_t k) {
#if HK_SIMD == 512
    return _mm512_mask_blend_ps(FN(v_mask)(k), v, _mm512_set1_ps(-INFINITY));
#elif HK_SIMD == 256
    return _mm256_blendv_ps(v, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(FN(v_mask)(k)));
#else
    return k > 0 ? -INFINITY : v;
#endif
}

/* One tile of an online softmax over the rows of S [rows, ld] for each
 * column c < cols (a query; the rows are keys): with m[c] the running max of
 * scale*S and l[c] the running sum (double),
 *   m' = max(m, scale max_u S[u][c]),  corr[c] = exp(m - m'),
 *   S[u][c] = exp(scale S[u][c] - m'),  l = l corr + sum_u S[u][c],  m = m'.
 * diag: the tile is on the diagonal (row u and column c the same position):
 * keys after their query (u > c) are masked, and rows past a vector of
 * columns are only zeroed. A column must have an unmasked entry here or in
 * an earlier tile. m, l, corr hold cols rounded up to W. */
static TGT void FN(softmax_cols)(float *S, int64_t ld, int64_t rows, int64_t cols, float scale, float *m, double *l,
                                 float *corr, bool diag) {
    VF sc = FN(v_set1)(scale);
    for (int64_t c = 0; c < cols; c += W) {
        VM mk = FN(v_mask)(cols - c);
        int64_t end = diag && c + W < rows ? c + W : rows; /* rows [end, rows) are masked for every column here */
        VF mx = FN(v_set1)(-INFINITY);
        for (int64_t u = 0; u < end; u++) {
            VF v = FN(v_load_m)(S + u * ld + c, mk);
            if (diag && u > c) v = FN(v_ninf_below)(v, u - c);
            mx = FN(v_max)(v, mx);
        }
        VF mo = FN(v_load)(m + c), mn = FN(v_max)(FN(v_mul)(mx, sc), mo);
        VF cr = FN(v_exp)(FN(v_sub)(mo, mn));
        FN(v_store)(m + c, mn);
        FN(v_store)(corr + c, cr);
        VF nm = FN(v_sub)(FN(v_zero)(), mn);
        VD s0 = FN(d_zero)(), s1 = FN(d_zero)();
        for (int64_t u = 0; u < end; u++) {
            VF v = FN(v_load_m)(S + u * ld + c, mk);
            if (diag && u > c) v = FN(v_ninf_below)(v, u - c);
            VF e = FN(v_exp)(FN(v_fma)(v, sc, nm));
            FN(v_store_m)(S + u * ld + c, mk, e);
            s0 = FN(d_add)(s0, FN(d_lo)(e));
            if (W > 1) s1 = FN(d_add)(s1, FN(d_hi)(e));
        }
        for (int64_t u = end; u < rows; u++) FN(v_store_m)(S + u * ld + c, mk, FN(v_zero)());
        FN(d_store)(l + c, FN(d_add)(FN(d_mul)(FN(d_load)(l + c), FN(d_lo)(cr)), s0));
        if (W > 1) FN(d_store)(l + c + DW, FN(d_add)(FN(d_mul)(FN(d_load)(l + c + DW), FN(d_hi)(cr)), s1));
    }
}

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: 8 x 8 blocks
 * through AVX shuffles on the vector paths, the edges element by element */
#if HK_SIMD > 1
static inline AI TGT void FN(tr8)(const float *s, int64_t lds, float *d, int64_t ldd) {
    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds), r2 = _mm256_loadu_ps(s + 2 * lds),
           r3 = _mm256_loadu_ps(s + 3 * lds), r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds),
           r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee), u2 = _mm256_shuffle_ps(t1, t3, 0x44),
           u3 = _mm256_shuffle_ps(t1, t3, 0xee), u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

static TGT void FN(transpose)(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd) {
    int64_t r0 = 0;
#if HK_SIMD > 1
    for (; r0 + 8 <= rows; r0 += 8) {
        int64_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8) FN(tr8)(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd);
        for (int64_t r = r0; r < r0 + 8; r++)
            for (int64_t c = c0; c < cols; c++) dst[c * ldd + r] = src[r * lds + c];
    }
#endif
    for (int64_t r = r0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * ldd + r] = src[r * lds + c];
}

/* ---- GEMM tiles: C[rows, nv vectors] (+)= A B, the last vector masked ---- */

static inline AI TGT void FN(gemm_tile)(const int rows, const int nv, int64_t K, const float *A, int64_t sam,
                                         int64_t sak, const float *B, int64_t ldb, float *C, int64_t ldc, bool acc,
                                         VM last) {
    VF c[MRX][NRMAX];
#pragma GCC unroll 16
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) {
            if (!acc) c[r][v] = FN(v_zero)();
            else if (v == nv - 1) c[r][v] = FN(v_load_m)(C + r * ldc + v * W, last);
            else c[r][v] = FN(v_load)(C + r * ldc + v * W);
        }
    for (int64_t k = 0; k < K; k++) {
        VF b[NRMAX];
        const float *bk = B + k * ldb;
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) b[v] = v == nv - 1 ? FN(v_load_m)(bk + v * W, last) : FN(v_load)(bk + v * W);
        const float *ak = A + k * sak;
#pragma GCC unroll 16
        for (int r = 0; r < rows; r++) {
            VF a = FN(v_set1)(ak[r * sam]);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) c[r][v] = FN(v_fma)(a, b[v], c[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) {
            if (v == nv - 1) FN(v_store_m)(C + r * ldc + v * W, last, c[r][v]);
            else FN(v_store)(C + r * ldc + v * W, c[r][v]);
        }
}

#define GEMM_NV(R)                                                                                        \
    switch (nv) {                                                                                         \
    case 1: FN(gemm_tile)(R, 1, K, Am, sam, sak, B + n0, ldb, Cm, ldc, acc, last); break;                 \
    case 2: if (NRMAX >= 2) FN(gemm_tile)(R, NRMAX >= 2 ? 2 : 1, K, Am, sam, sak, B + n0, ldb, Cm, ldc, acc, last); break; \
    case 3: if (NRMAX >= 3) FN(gemm_tile)(R, NRMAX >= 3 ? 3 : 1, K, Am, sam, sak, B + n0, ldb, Cm, ldc, acc, last); break; \
    default: if (NRMAX >= 4) FN(gemm_tile)(R, NRMAX >= 4 ? 4 : 1, K, Am, sam, sak, B + n0, ldb, Cm, ldc, acc, last); break; \
    }

/* rows [m0, M) of one column block in tiles of MR rows */
static inline AI TGT void FN(gemm_rows)(int64_t m0, int64_t M, int nv, int64_t n0, int64_t K, const float *A,
                                         int64_t sam, int64_t sak, const float *B, int64_t ldb, float *C, int64_t ldc,
                                         bool acc, VM last) {
    for (; m0 < M; m0 += MR) {
        int rows = M - m0 < MR ? (int)(M - m0) : MR;
        const float *Am = A + m0 * sam;
        float *Cm = C + m0 * ldc + n0;
        switch (rows) {
        case MR: GEMM_NV(MR) break;
        case 1: GEMM_NV(1) break;
        case 2: GEMM_NV(2) break;
        case 3: GEMM_NV(3) break;
#if MR > 4
        case 4: GEMM_NV(4) break;
        case 5: GEMM_NV(5) break;
#endif
        default: break;
        }
    }
}

static TGT void FN(gemm)(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B,
                         int64_t ldb, float *C, int64_t ldc, bool acc) {
    for (int64_t n0 = 0; n0 < N; n0 += NRMAX * W) {
        int64_t cols = N - n0 < NRMAX * W ? N - n0 : NRMAX * W;
        int nv = (int)((cols + W - 1) / W);
        VM last = FN(v_mask)(cols - (int64_t)(nv - 1) * W);
        int64_t m0 = 0;
#if MRX > MR
        /* narrow blocks: taller tiles keep the FMA units busy (24 accumulators) */
        if (nv <= 2)
            for (; m0 + MRX <= M; m0 += MRX) {
                const float *Am = A + m0 * sam;
                float *Cm = C + m0 * ldc + n0;
                if (nv == 1) FN(gemm_tile)(MRX, 1, K, Am, sam, sak, B + n0, ldb, Cm, ldc, acc, last);
                else FN(gemm_tile)(MRX, 2, K, Am, sam, sak, B + n0, ldb, Cm, ldc, acc, last);
            }
#endif
        FN(gemm_rows)(m0, M, nv, n0, K, A, sam, sak, B, ldb, C, ldc, acc, last);
    }
}
#undef GEMM_NV

static const HkVec FN(table) = {
#if HK_SIMD == 512
    .isa = HK_ISA_AVX512,
#elif HK_SIMD == 256
    .isa = HK_ISA_AVX2,
#else
    .isa = HK_ISA_SCALAR,
#endif
    .width = W,
    .cast = FN(cast),
    .acc = FN(acc),
    .gelu_fwd = FN(gelu_fwd),
    .gelu_bwd = FN(gelu_bwd),
    .silu_fwd = FN(silu_fwd),
    .silu_bwd = FN(silu_bwd),
    .exp = FN(exp),
    .max = FN(max),
    .exp_sum = FN(exp_sum),
    .exp_shift_sum = FN(exp_shift_sum),
    .exp_shift = FN(exp_shift),
    .exp_axpy = FN(exp_axpy),
    .scale = FN(scale),
    .dsoftmax = FN(dsoftmax),
    .dot = FN(dot),
    .dacc = FN(dacc),
    .dacc2 = FN(dacc2),
    .sumsq = FN(sumsq),
    .bin = FN(bin),
    .mul_acc = FN(mul_acc),
    .ln_fwd = FN(ln_fwd),
    .ln_bwd = FN(ln_bwd),
    .rms_fwd = FN(rms_fwd),
    .rms_bwd = FN(rms_bwd),
    .gemm = FN(gemm),
    .softmax_cols = FN(softmax_cols),
    .transpose = FN(transpose),
};
#endif /* HK_SIMD_FUNCS */

#undef AI
#undef VF
#undef VD
#undef VM
#undef TGT
#undef W
#undef DW
#undef FN
#undef MR
#undef MRX
#undef NRMAX
#undef GELU_2K
#undef GELU_2KC
#undef GELU_6KC
