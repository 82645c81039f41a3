/* adam: every ISA this machine has, for every gradient and parameter dtype,
 * on odd lengths and over several steps, against a double-precision AdamW
 * written here; low-precision parameter copies equal to this file's own
 * round-to-nearest-even of the new master. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "adam.h"
#include "qstate.h"
#include "vocab.h"

/* Per-element checks: Check records every passing assertion (a write to its
 * pipe), so element loops only call into Check on failure. */
#define EXPECT(cond, ...) \
    do { \
        if (!(cond)) ck_abort_msg(__VA_ARGS__); \
    } while (0)

/* ---- independent reference conversions ---- */

static double ref_f16_decode(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double x;
    if (e == 0) x = ldexp((double)m, -24);
    else if (e == 31) x = m ? NAN : INFINITY;
    else x = ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -x : x;
}

static float ref_bf16_decode(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Nearest bf16 by comparing the two neighbours in double; ties to even. */
static uint16_t ref_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isinf(x)) return (uint16_t)(u >> 16);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    double vl = ref_bf16_decode((uint16_t)(lo >> 16)), vh = ref_bf16_decode((uint16_t)(hi >> 16));
    if (isinf(vh)) vh = copysign(ldexp(1.0, 128), vh); /* overflow rounds as if to 2^128 */
    double dl = fabs((double)x - vl), dh = fabs((double)x - vh);
    if (dl < dh) return (uint16_t)(lo >> 16);
    if (dh < dl) return (uint16_t)(hi >> 16);
    return (uint16_t)((lo >> 16) & 1 ? hi >> 16 : lo >> 16);
}

/* Nearest f16 by binary search over the table of all finite positive f16
 * values; ties to even; beyond 65520 (halfway past the largest) infinity. */
static double f16_table[0x7c00];
static void f16_table_init(void) {
    for (int i = 0; i < 0x7c00; i++) f16_table[i] = ref_f16_decode((uint16_t)i);
}
static uint16_t ref_f16_round(float xf) {
    double x = xf;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a >= 65520.0) return sign | 0x7c00;
    int lo = 0, hi = 0x7bff;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (f16_table[mid] <= a) lo = mid;
        else hi = mid;
    }
    if (f16_table[hi] <= a) lo = hi;
    int best = lo;
    if (lo < 0x7bff) {
        double dl = a - f16_table[lo], dh = f16_table[lo + 1] - a;
        if (dh < dl || (dh == dl && (lo & 1))) best = lo + 1;
    }
    return (uint16_t)(sign | best);
}

/* ---- data ---- */

static uint64_t rs = 88172645463325252ull;
static double urand(void) { /* [0, 1) */
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static const AdamParams BASE = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                .weight_decay = 0.1f, .isa = ADAM_ISA_SCALAR, .threads = 1};

static int dsize(DType t) { return t == DT_F32 ? 4 : 2; }
static const char *dtn(DType t) {
    return t == DT_F32 ? "f32" : t == DT_BF16 ? "bf16" : t == DT_F16 ? "f16" : "none";
}

/* Gradient in dtype gdt (raw) and its exact value as double. */
static void make_grad(DType gdt, int64_t n, void *raw, double *val) {
    for (int64_t i = 0; i < n; i++) {
        float f = (float)((urand() * 2 - 1) * pow(10.0, -3.0 * urand()));
        if (gdt == DT_F32) {
            ((float *)raw)[i] = f;
            val[i] = f;
        } else if (gdt == DT_BF16) {
            uint16_t h = ref_bf16_round(f);
            ((uint16_t *)raw)[i] = h;
            val[i] = ref_bf16_decode(h);
        } else {
            uint16_t h = ref_f16_round(f);
            ((uint16_t *)raw)[i] = h;
            val[i] = ref_f16_decode(h);
        }
    }
}

/* Runs `steps` steps with isa and checks each against the double reference
 * computed from the same pre-step state. */
static void check_case(AdamIsa isa, DType gdt, DType pdt, int64_t n, int steps, int threads,
                       float scale) {
    AdamParams p = BASE;
    p.isa = isa;
    p.threads = threads;
    float *w = malloc(sizeof(float) * (size_t)n), *m = malloc(sizeof(float) * (size_t)n);
    float *v = malloc(sizeof(float) * (size_t)n);
    void *g = malloc((size_t)n * 4);
    double *gv = malloc(sizeof(double) * (size_t)n);
    void *po = pdt == DT_NONE ? NULL : malloc((size_t)n * 4);
    float *w0 = malloc(sizeof(float) * (size_t)n), *m0 = malloc(sizeof(float) * (size_t)n);
    float *v0 = malloc(sizeof(float) * (size_t)n);
    /* Masters span f16's range edges: overflow, subnormals, underflow. */
    static const float special[] = {65519.0f, 65520.0f, 70000.0f, 1e-6f, 6e-8f, 3e-8f, -2.5e-5f, 0.0f};
    for (int64_t i = 0; i < n; i++) {
        w[i] = (float)((urand() * 2 - 1) * 2.0);
        if (i < 8 && n > 8) w[i] = special[i];
        m[i] = 0.0f;
        v[i] = 0.0f;
    }
    for (int t = 1; t <= steps; t++) {
        make_grad(gdt, n, g, gv);
        memcpy(w0, w, sizeof(float) * (size_t)n);
        memcpy(m0, m, sizeof(float) * (size_t)n);
        memcpy(v0, v, sizeof(float) * (size_t)n);
        AdamStatus st = adam_step(&p, t, w, m, v, g, gdt, po, pdt, n, scale);
        ck_assert_msg(st == ADAM_OK, "%s", adam_status_str(st));
        double b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, wd = p.weight_decay;
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        for (int64_t i = 0; i < n; i++) {
            double gi = gv[i] * scale;
            double mt1 = b1 * m0[i], mt2 = (1 - b1) * gi;
            double mr = mt1 + mt2;
            double vr = b2 * v0[i] + (1 - b2) * gi * gi;
            double den = sqrt(vr) / sqrt(bc2) + eps;
            double upd = (lr / bc1) * mr / den;
            double wr = w0[i] * (1 - lr * wd) - upd;
            double mscale = fabs(mt1) + fabs(mt2);
            double wscale = fabs((double)w0[i]) + (lr / bc1) * mscale / den;
            EXPECT(fabs(m[i] - mr) <= 1e-6 * mscale + 1e-30,
                          "%s g=%s p=%s n=%lld step %d: m[%lld] = %.9g, reference %.9g",
                          adam_isa_name(isa), dtn(gdt), dtn(pdt), (long long)n, t,
                          (long long)i, m[i], mr);
            EXPECT(fabs(v[i] - vr) <= 1e-6 * vr + 1e-30, "%s step %d: v[%lld] = %.9g, reference %.9g",
                          adam_isa_name(isa), t, (long long)i, v[i], vr);
            EXPECT(fabs(w[i] - wr) <= 1e-6 * wscale,
                          "%s g=%s p=%s n=%lld step %d: w[%lld] = %.9g, reference %.9g",
                          adam_isa_name(isa), dtn(gdt), dtn(pdt), (long long)n, t,
                          (long long)i, w[i], wr);
            if (pdt == DT_F32) EXPECT(((float *)po)[i] == w[i], "f32 copy differs at %lld", (long long)i);
            if (pdt == DT_BF16)
                EXPECT(((uint16_t *)po)[i] == ref_bf16_round(w[i]),
                              "%s: bf16 copy of %.9g is 0x%04x, expected 0x%04x", adam_isa_name(isa),
                              w[i], ((uint16_t *)po)[i], ref_bf16_round(w[i]));
            if (pdt == DT_F16)
                EXPECT(((uint16_t *)po)[i] == ref_f16_round(w[i]),
                              "%s: f16 copy of %.9g is 0x%04x, expected 0x%04x", adam_isa_name(isa),
                              w[i], ((uint16_t *)po)[i], ref_f16_round(w[i]));
        }
    }
    free(w); free(m); free(v); free(g); free(gv); free(po); free(w0); free(m0); free(v0);
}

static const AdamIsa ISAS[] = {ADAM_ISA_SCALAR, ADAM_ISA_AVX2, ADAM_ISA_AVX512};
static const DType GDTS[] = {DT_F32, DT_BF16, DT_F16};
static const DType PDTS[] = {DT_NONE, DT_F32, DT_BF16, DT_F16};

/* ---- compact moments (adam_step_state, qstate.h) ---- */

/* bitsandbytes' dynamic maps: ascending, 0 where qstate_zero_code says,
 * 1 last, the signed map symmetric but for its 1 and its 0. */
START_TEST(test_qstate_maps) {
    for (int i = 0; i < 255; i++) {
        ck_assert(qstate_map_signed[i] < qstate_map_signed[i + 1]);
        ck_assert(qstate_map_unsigned[i] < qstate_map_unsigned[i + 1]);
    }
    ck_assert(qstate_map_signed[qstate_zero_code(false)] == 0.0f && qstate_zero_code(false) == 127);
    ck_assert(qstate_map_unsigned[qstate_zero_code(true)] == 0.0f && qstate_zero_code(true) == 0);
    ck_assert(qstate_map_signed[255] == 1.0f && qstate_map_unsigned[255] == 1.0f);
    for (int i = 0; i < 127; i++) ck_assert(qstate_map_signed[i] == -qstate_map_signed[254 - i]);
    /* the smallest magnitudes: 10^-6 times the midpoint of linspace(0.1, 1, 2) */
    ck_assert_float_eq_tol(qstate_map_signed[128], 5.5e-7f, 1e-12f);
    ck_assert_float_eq_tol(qstate_map_unsigned[1], 3.25e-7f, 1e-12f);
}
END_TEST

/* A block's codes: the largest |x| decodes exactly to itself, every value
 * to the nearest map value (relative to absmax), a short block pads with
 * the code of 0, a zero block has absmax 0 and decodes to zeros. */
START_TEST(test_qstate_codec) {
    static float x[QSTATE_BLOCK], y[QSTATE_BLOCK];
    static uint8_t blk[QSTATE_BLOCK_BYTES];
    for (int u = 0; u < 2; u++) {
        const float *map = u ? qstate_map_unsigned : qstate_map_signed;
        int n = 1500;
        for (int i = 0; i < n; i++) x[i] = (float)((u ? 1.0 : (i % 2 ? -1.0 : 1.0)) * pow(10.0, -7.0 * (double)i / n) * 3.0);
        qstate_encode_block(u, x, n, blk);
        float absmax;
        memcpy(&absmax, blk + QSTATE_BLOCK, 4);
        ck_assert_float_eq(absmax, 3.0f);
        for (int i = n; i < QSTATE_BLOCK; i++) ck_assert_uint_eq(blk[i], qstate_zero_code(u));
        qstate_decode_block(u, blk, n, y);
        ck_assert_float_eq(y[0], 3.0f);
        for (int i = 0; i < n; i++) {
            float v = x[i] / absmax, got = map[blk[i]];
            for (int k = 0; k < 256; k++)
                EXPECT(fabsf(map[k] - v) >= fabsf(got - v) * (1 - 1e-6f), "element %d: code %d (%g) is not nearest %g (code %d: %g)", i,
                       blk[i], (double)got, (double)v, k, (double)map[k]);
            EXPECT(y[i] == got * absmax, "element %d decodes to %g, not map * absmax", i, (double)y[i]);
        }
        memset(x, 0, sizeof x);
        qstate_encode_block(u, x, QSTATE_BLOCK, blk);
        memcpy(&absmax, blk + QSTATE_BLOCK, 4);
        ck_assert_float_eq(absmax, 0.0f);
        qstate_decode_block(u, blk, QSTATE_BLOCK, y);
        for (int i = 0; i < QSTATE_BLOCK; i++) EXPECT(y[i] == 0.0f, "zero block element %d: %g", i, (double)y[i]);
    }
}
END_TEST

static AdamParams q_params(AdamIsa isa, int threads) {
    return (AdamParams){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .isa = isa, .threads = threads};
}

/* bf16 moments: each step equals an f32-moment step from the widened
 * moments, its new moments rounded to nearest even (this file's rounding);
 * every ISA the same bits. */
START_TEST(test_bf16_moments) {
    enum { N = 70001 };
    float *w = malloc(N * 4), *w2 = malloc(N * 4), *g = malloc(N * 4), *mf = malloc(N * 4), *vf = malloc(N * 4);
    uint16_t *m = calloc(N, 2), *v = calloc(N, 2);
    ck_assert(w && w2 && g && mf && vf && m && v);
    for (int i = 0; i < N; i++) w[i] = w2[i] = 0.01f * sinf((float)i);
    AdamParams ap = q_params(ADAM_ISA_SCALAR, 1);
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < N; i++) {
            g[i] = cosf((float)(i * t)) * powf(10.0f, (float)(i % 9) - 6.0f);
            mf[i] = ref_bf16_decode(m[i]);
            vf[i] = ref_bf16_decode(v[i]);
        }
        ck_assert_int_eq(adam_step(&ap, t, w2, mf, vf, g, DT_F32, NULL, DT_NONE, N, 1.0f), ADAM_OK);
        ck_assert_int_eq(adam_step_state(&ap, t, w, m, v, w, m, v, DT_BF16, DT_BF16, g, DT_F32, NULL, DT_NONE, N, 1.0f), ADAM_OK);
        for (int i = 0; i < N; i++) {
            EXPECT(w[i] == w2[i], "step %d element %d: master %g, f32 moments give %g", t, i, (double)w[i], (double)w2[i]);
            EXPECT(m[i] == ref_bf16_round(mf[i]) && v[i] == ref_bf16_round(vf[i]), "step %d element %d: moments not rounded", t, i);
        }
    }
    /* every ISA, threaded, the same bits */
    for (int isa = ADAM_ISA_AVX2; isa <= ADAM_ISA_AVX512; isa++) {
        if (!adam_isa_supported((AdamIsa)isa)) continue;
        uint16_t *m2 = malloc(N * 2), *v2 = malloc(N * 2);
        float *w3 = malloc(N * 4);
        ck_assert(m2 && v2 && w3);
        memcpy(m2, m, N * 2), memcpy(v2, v, N * 2), memcpy(w3, w, N * 4);
        AdamParams a1 = q_params(ADAM_ISA_SCALAR, 1), a2 = q_params((AdamIsa)isa, 3);
        ck_assert_int_eq(adam_step_state(&a1, 4, w, m, v, w, m, v, DT_BF16, DT_BF16, g, DT_F32, NULL, DT_NONE, N, 1.0f), ADAM_OK);
        ck_assert_int_eq(adam_step_state(&a2, 4, w3, m2, v2, w3, m2, v2, DT_BF16, DT_BF16, g, DT_F32, NULL, DT_NONE, N, 1.0f), ADAM_OK);
        ck_assert(!memcmp(w, w3, N * 4) && !memcmp(m, m2, N * 2) && !memcmp(v, v2, N * 2));
        free(m2), free(v2), free(w3);
        break;
    }
    free(w), free(w2), free(g), free(mf), free(vf), free(m), free(v);
}
END_TEST

/* 8-bit moments: each block is an f32-moment step from the decoded
 * moments, encoded after; the thread count and ISA change no bit; in
 * place and out of place agree. */
START_TEST(test_q8_moments) {
    enum { N = 3 * 65536 + 5000 };
    int64_t bytes = dtype_bytes(DT_DYN8, N);
    ck_assert_int_eq(bytes, (N + 2047) / 2048 * 2052);
    float *w = malloc(N * 4), *w2 = malloc(N * 4), *g = malloc(N * 4), *mf = malloc(N * 4), *vf = malloc(N * 4);
    uint8_t *m = calloc((size_t)bytes, 1), *v = calloc((size_t)bytes, 1), *m2 = malloc((size_t)bytes), *v2 = malloc((size_t)bytes);
    uint8_t *mr = malloc((size_t)bytes), *vr = malloc((size_t)bytes);
    ck_assert(w && w2 && g && mf && vf && m && v && m2 && v2 && mr && vr);
    for (int i = 0; i < N; i++) w[i] = w2[i] = 0.02f * cosf((float)i);
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < N; i++) g[i] = sinf((float)(i + t)) * powf(10.0f, (float)((i / 2048) % 9) - 6.0f);
        for (int64_t b = 0; b * 2048 < N; b++) {
            int len = (int)(N - b * 2048 < 2048 ? N - b * 2048 : 2048);
            qstate_decode_block(false, m + b * 2052, len, mf + b * 2048);
            qstate_decode_block(true, v + b * 2052, len, vf + b * 2048);
        }
        AdamParams a1 = q_params(ADAM_ISA_SCALAR, 1);
        ck_assert_int_eq(adam_step(&a1, t, w2, mf, vf, g, DT_F32, NULL, DT_NONE, N, 1.0f), ADAM_OK);
        for (int64_t b = 0; b * 2048 < N; b++) {
            int len = (int)(N - b * 2048 < 2048 ? N - b * 2048 : 2048);
            qstate_encode_block(false, mf + b * 2048, len, mr + b * 2052);
            qstate_encode_block(true, vf + b * 2048, len, vr + b * 2052);
        }
        AdamParams a2 = q_params(ADAM_ISA_AUTO, 3);
        memcpy(m2, m, (size_t)bytes), memcpy(v2, v, (size_t)bytes);
        float *w3 = malloc(N * 4);
        ck_assert(w3 != NULL);
        /* out of place, from the old state, then in place */
        ck_assert_int_eq(adam_step_state(&a2, t, w, m2, v2, w3, m2, v2, DT_DYN8, DT_UDYN8, g, DT_F32, NULL, DT_NONE, N, 1.0f), ADAM_OK);
        ck_assert_int_eq(adam_step_state(&a1, t, w, m, v, w, m, v, DT_DYN8, DT_UDYN8, g, DT_F32, NULL, DT_NONE, N, 1.0f), ADAM_OK);
        ck_assert(!memcmp(w, w2, N * 4) && !memcmp(w3, w, N * 4));
        ck_assert(!memcmp(m, mr, (size_t)bytes) && !memcmp(v, vr, (size_t)bytes));
        ck_assert(!memcmp(m2, m, (size_t)bytes) && !memcmp(v2, v, (size_t)bytes));
        free(w3);
    }
    free(w), free(w2), free(g), free(mf), free(vf), free(m), free(v), free(m2), free(v2), free(mr), free(vr);
}
END_TEST

/* The moments come in pairs: f32, bf16, or dyn8 with udyn8. */
START_TEST(test_state_pairs) {
    float w = 0, g = 1, s[2] = {0, 0};
    AdamParams ap = q_params(ADAM_ISA_SCALAR, 1);
    ck_assert_int_eq(adam_step_state(&ap, 1, &w, s, s + 1, &w, s, s + 1, DT_F32, DT_BF16, &g, DT_F32, NULL, DT_NONE, 1, 1.0f), ADAM_EDTYPE);
    ck_assert_int_eq(adam_step_state(&ap, 1, &w, s, s + 1, &w, s, s + 1, DT_UDYN8, DT_DYN8, &g, DT_F32, NULL, DT_NONE, 1, 1.0f), ADAM_EDTYPE);
    ck_assert_int_eq(adam_step_state(&ap, 1, &w, s, s + 1, &w, s, s + 1, DT_NF4, DT_NF4, &g, DT_F32, NULL, DT_NONE, 1, 1.0f), ADAM_EDTYPE);
    ck_assert_int_eq(adam_step_state(&ap, 1, &w, s, s + 1, &w, s, s + 1, DT_F32, DT_F32, &g, DT_F32, NULL, DT_NONE, 1, 1.0f), ADAM_OK);
}
END_TEST

START_TEST(test_all_isas_dtypes_tails) {
    f16_table_init();
    static const int64_t lens[] = {1, 7, 15, 17, 33, 1001};
    int ran = 0;
    for (size_t a = 0; a < 3; a++) {
        if (!adam_isa_supported(ISAS[a])) {
            fprintf(stderr, "note: %s not available on this processor; not tested\n", adam_isa_name(ISAS[a]));
            continue;
        }
        ran++;
        for (size_t gi = 0; gi < 3; gi++)
            for (size_t pi = 0; pi < 4; pi++)
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                    check_case(ISAS[a], GDTS[gi], PDTS[pi], lens[li], 3, 1, 1.0f);
    }
    ck_assert_int_ge(ran, 1);
}
END_TEST

/* Large tensors go through the OpenMP path, with a gradient scale. */
START_TEST(test_threaded_scaled) {
    f16_table_init();
    for (size_t a = 0; a < 3; a++) {
        if (!adam_isa_supported(ISAS[a])) continue;
        check_case(ISAS[a], DT_BF16, DT_BF16, 3 * 65536 + 5, 2, 2, 0.25f);
        check_case(ISAS[a], DT_F32, DT_F16, 2 * 65536 + 1, 2, 3, 4.0f);
    }
}
END_TEST

/* The same inputs give bit-identical outputs for 1 and 4 threads, and every
 * ISA's kernel (one operation sequence, runtime/hostk/adam_simd.h) agrees
 * bitwise with the best one's, tails included (n is odd). */
START_TEST(test_deterministic) {
    int64_t n = 4 * 65536 + 3;
    float *w[3], *m[3], *v[3];
    uint16_t *po[3];
    uint16_t *g = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) g[i] = ref_bf16_round((float)(urand() - 0.5));
    for (int k = 0; k < 3; k++) {
        w[k] = malloc(sizeof(float) * (size_t)n);
        m[k] = calloc((size_t)n, sizeof(float));
        v[k] = calloc((size_t)n, sizeof(float));
        po[k] = malloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) w[k][i] = (float)i * 1e-5f;
    }
    AdamParams p = BASE;
    p.isa = adam_isa_best();
    p.threads = 1;
    ck_assert_int_eq(adam_step(&p, 1, w[0], m[0], v[0], g, DT_BF16, po[0], DT_BF16, n, 1.0f), ADAM_OK);
    p.threads = 4;
    ck_assert_int_eq(adam_step(&p, 1, w[1], m[1], v[1], g, DT_BF16, po[1], DT_BF16, n, 1.0f), ADAM_OK);
    ck_assert(memcmp(w[0], w[1], sizeof(float) * (size_t)n) == 0);
    ck_assert(memcmp(v[0], v[1], sizeof(float) * (size_t)n) == 0);
    ck_assert(memcmp(po[0], po[1], (size_t)n * 2) == 0);
    for (size_t a = 0; a < sizeof ISAS / sizeof *ISAS; a++) {
        if (!adam_isa_supported(ISAS[a]) || ISAS[a] == adam_isa_best()) continue;
        for (int64_t i = 0; i < n; i++) w[2][i] = (float)i * 1e-5f, m[2][i] = v[2][i] = 0.0f;
        p.isa = ISAS[a];
        ck_assert_int_eq(adam_step(&p, 1, w[2], m[2], v[2], g, DT_BF16, po[2], DT_BF16, n, 1.0f), ADAM_OK);
        ck_assert_msg(memcmp(w[0], w[2], sizeof(float) * (size_t)n) == 0, "%s: w differs", adam_isa_name(ISAS[a]));
        ck_assert_msg(memcmp(m[0], m[2], sizeof(float) * (size_t)n) == 0, "%s: m differs", adam_isa_name(ISAS[a]));
        ck_assert_msg(memcmp(v[0], v[2], sizeof(float) * (size_t)n) == 0, "%s: v differs", adam_isa_name(ISAS[a]));
        ck_assert_msg(memcmp(po[0], po[2], (size_t)n * 2) == 0, "%s: the bf16 copy differs", adam_isa_name(ISAS[a]));
    }
    for (int k = 0; k < 3; k++) { free(w[k]); free(m[k]); free(v[k]); free(po[k]); }
    free(g);
}
END_TEST

/* adam_step_to (the speculative optimizer's twin state) leaves in its
 * outputs what adam_step leaves in place, bit for bit, on every ISA, with
 * tails and threads, and does not touch its inputs. */
START_TEST(test_out_of_place) {
    static const int64_t lens[] = {17, 2 * 65536 + 5};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (size_t k = 0; k < sizeof ISAS / sizeof *ISAS; k++) {
            if (!adam_isa_supported(ISAS[k])) continue;
            int64_t n = lens[li];
            size_t fb = sizeof(float) * (size_t)n;
            float *w = malloc(fb), *m = malloc(fb), *v = malloc(fb), *w0 = malloc(fb), *m0 = malloc(fb), *v0 = malloc(fb);
            float *w1 = malloc(fb), *m1 = malloc(fb), *v1 = malloc(fb), *keep = malloc(3 * fb);
            uint16_t *g = malloc((size_t)n * 2), *pa = malloc((size_t)n * 2), *pb = malloc((size_t)n * 2);
            for (int64_t i = 0; i < n; i++) {
                g[i] = ref_bf16_round((float)(urand() - 0.5));
                w[i] = w0[i] = (float)(urand() - 0.5);
                m[i] = m0[i] = (float)(urand() - 0.5) * 1e-2f;
                v[i] = v0[i] = (float)urand() * 1e-4f;
            }
            memcpy(keep, w0, fb);
            memcpy(keep + n, m0, fb);
            memcpy(keep + 2 * n, v0, fb);
            AdamParams p = BASE;
            p.isa = ISAS[k];
            p.threads = 2;
            ck_assert_int_eq(adam_step(&p, 3, w, m, v, g, DT_BF16, pa, DT_BF16, n, 0.5f), ADAM_OK);
            ck_assert_int_eq(adam_step_to(&p, 3, w0, m0, v0, w1, m1, v1, g, DT_BF16, pb, DT_BF16, n, 0.5f), ADAM_OK);
            ck_assert_msg(memcmp(w, w1, fb) == 0 && memcmp(m, m1, fb) == 0 && memcmp(v, v1, fb) == 0,
                          "%s n=%lld: out of place differs", adam_isa_name(ISAS[k]), (long long)n);
            ck_assert(memcmp(pa, pb, (size_t)n * 2) == 0);
            ck_assert(memcmp(keep, w0, fb) == 0 && memcmp(keep + n, m0, fb) == 0 && memcmp(keep + 2 * n, v0, fb) == 0);
            free(w); free(m); free(v); free(w0); free(m0); free(v0); free(w1); free(m1); free(v1); free(keep);
            free(g); free(pa); free(pb);
        }
}
END_TEST

START_TEST(test_isa_selection) {
    AdamIsa isa;
    ck_assert_int_eq(adam_isa_parse("avx2", &isa), 0);
    ck_assert_int_eq(isa, ADAM_ISA_AVX2);
    ck_assert_int_ne(adam_isa_parse("sse9", &isa), 0);
    ck_assert_str_eq(adam_isa_name(ADAM_ISA_AVX512), "avx512");
    ck_assert(adam_isa_supported(adam_isa_best()));
    ck_assert_int_eq(adam_isa_set(ADAM_ISA_SCALAR), 0);
    ck_assert_int_eq(adam_isa_resolve(ADAM_ISA_AUTO), ADAM_ISA_SCALAR);
    /* An explicit argument wins over the process's choice. */
    ck_assert_int_eq(adam_isa_resolve(ADAM_ISA_AVX2), adam_isa_supported(ADAM_ISA_AVX2) ? ADAM_ISA_AVX2 : ADAM_ISA_AUTO);
    ck_assert_int_eq(adam_isa_set(ADAM_ISA_AUTO), 0);
    ck_assert_int_eq(adam_isa_resolve(ADAM_ISA_AUTO), adam_isa_best());
    /* An ISA this processor lacks: refused by the setter, EISA from a step. */
    if (!adam_isa_supported(ADAM_ISA_AVX512)) {
        ck_assert_int_eq(adam_isa_set(ADAM_ISA_AVX512), -1);
        ck_assert_int_eq(adam_isa_resolve(ADAM_ISA_AUTO), adam_isa_best());
        float w = 1, m = 0, v = 0, g = 1;
        AdamParams p = BASE;
        p.isa = ADAM_ISA_AVX512;
        ck_assert_int_eq(adam_step(&p, 1, &w, &m, &v, &g, DT_F32, NULL, DT_NONE, 1, 1.0f), ADAM_EISA);
        ck_assert_float_eq(w, 1.0f); /* nothing written on failure */
    }
    ck_assert_ptr_nonnull(strstr(adam_status_str(ADAM_EISA), "not available"));
}
END_TEST

START_TEST(test_bad_arguments) {
    float w = 1, m = 0, v = 0, g = 1;
    AdamParams p = BASE;
    ck_assert_int_eq(adam_step(&p, 1, &w, &m, &v, &g, DT_I32, NULL, DT_NONE, 1, 1.0f), ADAM_EDTYPE);
    ck_assert_int_eq(adam_step(&p, 1, &w, &m, &v, &g, DT_F32, &g, DT_I32, 1, 1.0f), ADAM_EDTYPE);
    ck_assert_int_eq(adam_step(&p, 0, &w, &m, &v, &g, DT_F32, NULL, DT_NONE, 1, 1.0f), ADAM_EARG);
    ck_assert_int_eq(adam_step(&p, 1, &w, &m, &v, &g, DT_F32, NULL, DT_NONE, -1, 1.0f), ADAM_EARG);
    ck_assert_int_eq(adam_step(&p, 1, NULL, &m, &v, &g, DT_F32, NULL, DT_NONE, 1, 1.0f), ADAM_EARG);
    ck_assert_int_eq(adam_step(&p, 1, NULL, NULL, NULL, NULL, DT_F32, NULL, DT_NONE, 0, 1.0f), ADAM_OK);
    ck_assert_float_eq(w, 1.0f);
    ck_assert_int_eq(dsize(DT_F32), 4);
}
END_TEST

/* First step of Adam moves every weight by lr * sign(g) (plus decay): a
 * closed form independent of the reference above. */
START_TEST(test_first_step_closed_form) {
    for (size_t a = 0; a < 3; a++) {
        if (!adam_isa_supported(ISAS[a])) continue;
        float w[19], m[19] = {0}, v[19] = {0}, g[19];
        for (int i = 0; i < 19; i++) {
            w[i] = 1.0f;
            g[i] = (i % 2 ? 1.0f : -1.0f) * (float)(i + 1);
        }
        AdamParams p = BASE;
        p.isa = ISAS[a];
        p.weight_decay = 0.0f;
        p.eps = 0.0f;
        ck_assert_int_eq(adam_step(&p, 1, w, m, v, g, DT_F32, NULL, DT_NONE, 19, 1.0f), ADAM_OK);
        for (int i = 0; i < 19; i++)
            ck_assert_float_eq_tol(w[i], 1.0f - 1e-3f * (i % 2 ? 1.0f : -1.0f), 1e-7f);
    }
}
END_TEST

/* With lr = 0 the master is unchanged, so the parameter copy is the
 * conversion alone: sweep ties, near-ties, NaN, infinities, subnormals and
 * random bit patterns through every ISA. */
/* The learning-rate schedules against their closed forms (docs/training.md):
 * warmup lr*s/w, then constant, a cosine or a straight line to min_lr over
 * the remaining steps, held at min_lr past them. */
START_TEST(test_lr_schedules) {
    const double lr = 3e-4, mn = 3e-5;
    const int64_t w = 10, steps = 110;
    for (int k = 0; k < LR_NSCHEDULES; k++) {
        AdamSchedule sc = {.lr = lr, .min_lr = mn, .warmup_steps = w, .steps = steps, .schedule = k};
        for (int64_t s = 1; s <= steps + 5; s++) {
            double p = s <= w ? 0 : (double)(s - w) / (double)(steps - w), want;
            if (p > 1) p = 1;
            if (s <= w) want = lr * (double)s / (double)w;
            else if (k == LR_CONSTANT) want = lr;
            else if (k == LR_COSINE) want = mn + (lr - mn) * 0.5 * (1 + cos(M_PI * p));
            else want = mn + (lr - mn) * (1 - p);
            ck_assert_msg(fabs(adam_lr(&sc, s) - want) <= 1e-15, "%s step %lld: %.17g, want %.17g", lr_schedule_names[k], (long long)s,
                          adam_lr(&sc, s), want);
        }
    }
    /* the line's landmarks: lr right after warmup, halfway at the middle, min_lr at the end and after */
    AdamSchedule lin = {.lr = 1.0, .min_lr = 0.0, .warmup_steps = 0, .steps = 100, .schedule = LR_LINEAR};
    ck_assert(fabs(adam_lr(&lin, 50) - 0.5) < 1e-15 && adam_lr(&lin, 100) == 0.0 && adam_lr(&lin, 150) == 0.0);
    ck_assert(fabs(adam_lr(&lin, 1) - 0.99) < 1e-15);
    /* warmup as long as training: no division by zero after it */
    AdamSchedule all = {.lr = 1.0, .min_lr = 0.0, .warmup_steps = 100, .steps = 100, .schedule = LR_LINEAR};
    ck_assert(adam_lr(&all, 100) == 1.0 && adam_lr(&all, 101) == 0.0);
}
END_TEST

START_TEST(test_conversion_sweep) {
    f16_table_init();
    int64_t n = 1 << 18;
    float *w = malloc(sizeof(float) * (size_t)n), *m = calloc((size_t)n, 4), *v = calloc((size_t)n, 4);
    float *g = calloc((size_t)n, 4);
    uint16_t *po = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(urand() * 4294967296.0);
        switch (i % 8) {
        case 0: u = (u & 0xffff0000u) | 0x8000u; break;          /* bf16 tie */
        case 1: u = (u & 0xffff0000u) | 0x7fffu; break;          /* just below a bf16 tie */
        case 2: u = (u & 0x87ffe000u) | 0x38001000u; break;      /* f16 tie, normal range */
        case 3: u = (u & 0x807fffffu) | 0x33000000u; break;      /* f16 subnormal range */
        case 4: u = (u & 0x80001fffu) | 0x477fe000u; break;      /* around 65504..65536 */
        default: break;
        }
        if (i == 5) u = 0x7fc00001u; /* NaN */
        if (i == 6) u = 0xff800000u; /* -inf */
        if (i == 7) u = 0x00000001u; /* smallest float subnormal */
        memcpy(&w[i], &u, 4);
    }
    AdamParams p = BASE;
    p.lr = 0.0f;
    p.weight_decay = 0.0f;
    for (size_t a = 0; a < 3; a++) {
        if (!adam_isa_supported(ISAS[a])) continue;
        p.isa = ISAS[a];
        ck_assert_int_eq(adam_step(&p, 1, w, m, v, g, DT_F32, po, DT_BF16, n, 1.0f), ADAM_OK);
        for (int64_t i = 0; i < n; i++) {
            if (isnan(w[i])) {
                EXPECT((po[i] & 0x7f80) == 0x7f80 && (po[i] & 0x7f), "%s: bf16 of NaN is 0x%04x",
                       adam_isa_name(ISAS[a]), po[i]);
                continue;
            }
            EXPECT(po[i] == ref_bf16_round(w[i]), "%s: bf16 of %a is 0x%04x, expected 0x%04x",
                   adam_isa_name(ISAS[a]), (double)w[i], po[i], ref_bf16_round(w[i]));
        }
        ck_assert_int_eq(adam_step(&p, 1, w, m, v, g, DT_F32, po, DT_F16, n, 1.0f), ADAM_OK);
        for (int64_t i = 0; i < n; i++) {
            if (isnan(w[i])) {
                EXPECT((po[i] & 0x7c00) == 0x7c00 && (po[i] & 0x3ff), "%s: f16 of NaN is 0x%04x",
                       adam_isa_name(ISAS[a]), po[i]);
                continue;
            }
            EXPECT(po[i] == ref_f16_round(w[i]), "%s: f16 of %a is 0x%04x, expected 0x%04x",
                   adam_isa_name(ISAS[a]), (double)w[i], po[i], ref_f16_round(w[i]));
        }
    }
    free(w); free(m); free(v); free(g); free(po);
}
END_TEST

int main(void) {
    Suite *s = suite_create("adam");
    TCase *tq = tcase_create("compact moments");
    tcase_add_test(tq, test_qstate_maps);
    tcase_add_test(tq, test_qstate_codec);
    tcase_add_test(tq, test_bf16_moments);
    tcase_add_test(tq, test_q8_moments);
    tcase_add_test(tq, test_state_pairs);
    suite_add_tcase(s, tq);
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_all_isas_dtypes_tails);
    tcase_add_test(tc, test_threaded_scaled);
    tcase_add_test(tc, test_deterministic);
    tcase_add_test(tc, test_isa_selection);
    tcase_add_test(tc, test_out_of_place);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_first_step_closed_form);
    tcase_add_test(tc, test_conversion_sweep);
    tcase_add_test(tc, test_lr_schedules);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
