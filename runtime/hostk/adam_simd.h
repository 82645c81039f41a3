/* adam_simd: the CPU Adam's kernel written once over hostk_simd.h's vector
 * operations. runtime/hostk/adam.c includes hostk_simd.h three times with
 * HK_SIMD_FUNCS naming this file, as hostk_vec.c does for its functions:
 * adam_run_avx512, adam_run_avx2 and adam_run_scalar. Every path does the
 * same IEEE operations in the same order (mul, fma, sqrt, div; the plain C
 * path calls fmaf and sqrtf), so the three give bit-identical results, at
 * any position in a tensor. Not a public header. */

/* Coef's numbers in every lane (set before a loop: the stores of the
 * loop could alias a Coef, so the compiler would reload it) */
typedef struct FN(AdamLanes) {
    VF scale, b1, omb1, b2, omb2, ib, eps, neg_step, decay;
} FN(AdamLanes);

static inline AI TGT FN(AdamLanes) FN(adam_lanes)(const Coef *c) {
    FN(AdamLanes) k = {FN(v_set1)(c->scale), FN(v_set1)(c->b1),           FN(v_set1)(c->omb1),
                       FN(v_set1)(c->b2),    FN(v_set1)(c->omb2),         FN(v_set1)(c->inv_sqrt_bc2),
                       FN(v_set1)(c->eps),   FN(v_set1)(-c->step_size),   FN(v_set1)(c->decay)};
    return k;
}

/* One element's (or lane's) update; see adam.h for the formula. The decay
 * and the step are one fma: w0 * decay - step_size * (m / den), rounded once. */
static inline AI TGT void FN(adam_lane)(const FN(AdamLanes) *k, VF g, VF w0, VF m0, VF v0, VF *w, VF *m, VF *v) {
    g = FN(v_mul)(g, k->scale);
    *m = FN(v_fma)(k->b1, m0, FN(v_mul)(k->omb1, g));
    *v = FN(v_fma)(k->b2, v0, FN(v_mul)(FN(v_mul)(k->omb2, g), g));
    VF den = FN(v_fma)(FN(v_sqrt)(*v), k->ib, k->eps);
    *w = FN(v_fma)(k->neg_step, FN(v_div)(*m, den), FN(v_mul)(w0, k->decay));
}

/* [0, n) for one (gradient, parameter, moments) dtype triple, inlined per
 * triple so the dtype tests leave the loop: whole vectors, then the last
 * n % W elements as zero-padded vectors. The state is read from w0, m0, v0
 * and written to w, m, v (the same arrays for a step in place); the
 * moments are f32 or bf16 (sdt: widened exactly, stored rounded to
 * nearest even; the update uses the new moments before rounding). */
static inline AI TGT void FN(adam_body)(const Coef *c, const float *w0, const void *m0, const void *v0, float *w, void *m,
                                        void *v, const void *g, DType gdt, void *p, DType pdt, DType sdt, int64_t n) {
    const FN(AdamLanes) k = FN(adam_lanes)(c);
    VF wi, mi, vi;
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        FN(adam_lane)(&k, FN(v_ld)(g, gdt, i), FN(v_load)(w0 + i), FN(v_ld)(m0, sdt, i), FN(v_ld)(v0, sdt, i), &wi, &mi, &vi);
        FN(v_st)(m, sdt, i, mi);
        FN(v_st)(v, sdt, i, vi);
        FN(v_store)(w + i, wi);
        if (pdt != DT_NONE) FN(v_st)(p, pdt, i, wi);
    }
    if (i == n) return;
    int64_t r = n - i;
    FN(adam_lane)(&k, FN(v_ld_n)(g, gdt, i, r, 0.0f), FN(v_ld_n)(w0, DT_F32, i, r, 0.0f), FN(v_ld_n)(m0, sdt, i, r, 0.0f),
                  FN(v_ld_n)(v0, sdt, i, r, 0.0f), &wi, &mi, &vi);
    FN(v_st_n)(m, sdt, i, r, mi);
    FN(v_st_n)(v, sdt, i, r, vi);
    FN(v_st_n)(w, DT_F32, i, r, wi);
    if (pdt != DT_NONE) FN(v_st_n)(p, pdt, i, r, wi);
}

static TGT void FN(adam_run)(const Coef *c, const float *w0, const void *m0, const void *v0, float *w, void *m, void *v,
                             const void *g, DType gdt, void *p, DType pdt, DType sdt, int64_t n) {
#define ADAM_CASE(G, P, S) \
    if (gdt == G && pdt == P && sdt == S) { \
        FN(adam_body)(c, w0, m0, v0, w, m, v, g, G, p, P, S, n); \
        return; \
    }
#define ADAM_ROW(G, S) ADAM_CASE(G, DT_NONE, S) ADAM_CASE(G, DT_F32, S) ADAM_CASE(G, DT_BF16, S) ADAM_CASE(G, DT_F16, S)
    ADAM_ROW(DT_F32, DT_F32)
    ADAM_ROW(DT_BF16, DT_F32)
    ADAM_ROW(DT_F16, DT_F32)
    ADAM_ROW(DT_F32, DT_BF16)
    ADAM_ROW(DT_BF16, DT_BF16)
    ADAM_ROW(DT_F16, DT_BF16)
#undef ADAM_ROW
#undef ADAM_CASE
}
