/* prim: the shape and dtype rule of every primitive, accepted and rejected,
 * against shapes worked out by hand from docs/primitives.md. */
#include <check.h>
#include <math.h>
#include <string.h>
#include "prim.h"

static PrimShape S(DType dt, int rank, int64_t d0, int64_t d1, int64_t d2) {
    PrimShape s;
    memset(&s, 0, sizeof s);
    s.dtype = dt;
    s.rank = rank;
    s.dims[0] = d0;
    s.dims[1] = d1;
    s.dims[2] = d2;
    return s;
}

static PrimCall C(PrimId p, int nin, PrimShape a, PrimShape b, PrimShape c) {
    PrimCall k;
    memset(&k, 0, sizeof k);
    k.prim = p;
    k.nin = nin;
    k.in[0] = a;
    k.in[1] = b;
    k.in[2] = c;
    k.act_dtype = DT_BF16;
    return k;
}

static PrimShape out[GRAPH_MAX_OUT];
static int nout;
static PrimError err;

static bool infer(PrimCall *c) {
    prim_defaults(c);
    return prim_infer(c, out, &nout, &err);
}

static void expect_shape(int i, DType dt, int rank, int64_t d0, int64_t d1, int64_t d2) {
    ck_assert_int_eq(out[i].dtype, dt);
    ck_assert_int_eq(out[i].rank, rank);
    int64_t d[3] = {d0, d1, d2};
    for (int k = 0; k < rank && k < 3; k++) ck_assert_int_eq(out[i].dims[k], d[k]);
}

static const PrimShape NO = {0};

START_TEST(table_matches_def) {
    /* every primitive of prim.def has an entry with the same name and arity */
    for (int i = 0; i < PRIM_COUNT; i++) {
        const PrimInfo *p = prim_info((PrimId)i);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(p->id, i);
        ck_assert_str_eq(p->name, prim_names[i]);
        ck_assert_ptr_eq(prim_lookup(p->name), p);
    }
    ck_assert_int_eq(prim_info(PRIM_LINEAR)->nin_min, 2);
    ck_assert_int_eq(prim_info(PRIM_LINEAR)->nin_max, 3);
    ck_assert_int_eq(prim_info(PRIM_SPLIT)->nout, -1);
    ck_assert_ptr_null(prim_lookup("softmax"));
    ck_assert_ptr_null(prim_info(PRIM_COUNT));
    const PrimAttr *a = prim_attr(prim_info(PRIM_ROPE), "theta");
    ck_assert_ptr_nonnull(a);
    ck_assert_double_eq(a->def, 10000.0);
    ck_assert_ptr_null(prim_attr(prim_info(PRIM_ROPE), "eps"));
}
END_TEST

/* prim.def's slot names and prim.c's attributes agree: every attribute
 * of a row is at the slot prim.def names for its primitive and name, in
 * the array of its kind, and prim.def names no other. */
START_TEST(attr_slots_match_def) {
    static const struct {
        PrimId prim;
        const char *name;
        int f; /* 0 iattr, 1 fattr, 2 a list (the op's table) */
        int slot;
    } def[] = {
#define PRIM(id, name, nin_min, nin_max, nout, family)
#define PRIM_IATTR(id, NAME, slot, name) {PRIM_##id, name, 0, IA_##id##_##NAME},
#define PRIM_FATTR(id, NAME, slot, name) {PRIM_##id, name, 1, FA_##id##_##NAME},
#define PRIM_LATTR(id, NAME, slot, name) {PRIM_##id, name, 2, LA_##id##_##NAME},
#include "prim.def"
#undef PRIM
#undef PRIM_IATTR
#undef PRIM_FATTR
#undef PRIM_LATTR
    };
    int n = (int)(sizeof def / sizeof *def), rows = 0;
    for (int i = 0; i < PRIM_COUNT; i++) rows += prim_info((PrimId)i)->nattr;
    ck_assert_int_eq(rows, n);
    for (int i = 0; i < n; i++) {
        const PrimInfo *p = prim_info(def[i].prim);
        const PrimAttr *a = prim_attr(p, def[i].name);
        ck_assert_msg(a, "%s has no attribute %s", p->name, def[i].name);
        int k = a->kind == PA_FLOAT ? 1 : a->kind == PA_FLOATS ? 2 : 0;
        static const char *const kinds[] = {"an integer", "a number", "a list"};
        ck_assert_msg(k == def[i].f, "%s.%s: %s in prim.c, %s in prim.def", p->name, a->name, kinds[k], kinds[def[i].f]);
        ck_assert_msg(a->slot == def[i].slot, "%s.%s: slot %d in prim.c, %d in prim.def", p->name, a->name, a->slot, def[i].slot);
    }
    /* no two attributes of a primitive share a slot */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ck_assert_msg(def[i].prim != def[j].prim || def[i].f != def[j].f || def[i].slot != def[j].slot, "%s and %s share a slot",
                          def[i].name, def[j].name);
    /* the slots are the plan format's: existing plans keep their meaning */
    ck_assert_int_eq(IA_ROPE_ORIGINAL_MAX_POSITIONS, 2);
    ck_assert_int_eq(FA_ROPE_HIGH_FREQ_FACTOR, 3);
}
END_TEST

START_TEST(embedding_rule) {
    PrimCall c = C(PRIM_EMBEDDING, 2, S(DT_F32, 2, 256, 64, 0), S(DT_I32, 2, 4, 16, 0), NO);
    ck_assert(infer(&c));
    ck_assert_int_eq(nout, 1);
    expect_shape(0, DT_BF16, 3, 4, 16, 64); /* activations take the training dtype */
    c = C(PRIM_EMBEDDING, 2, S(DT_F32, 2, 256, 64, 0), S(DT_F32, 2, 4, 16, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "embedding: ids must be i32, but they are f32");
    ck_assert_int_eq(err.blame, 2);
    c = C(PRIM_EMBEDDING, 2, S(DT_F32, 1, 256, 0, 0), S(DT_I32, 1, 16, 0, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "embedding: table must have rank 2, but it is [256] (rank 1)");
}
END_TEST

START_TEST(linear_rule) {
    PrimCall c = C(PRIM_LINEAR, 3, S(DT_F32, 3, 8, 64, 768), S(DT_F32, 2, 768, 3072, 0), S(DT_F32, 1, 3072, 0, 0));
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 8, 64, 3072);
    c = C(PRIM_LINEAR, 2, S(DT_F32, 3, 8, 64, 768), S(DT_F32, 2, 1024, 3072, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "linear: x has last dimension 768 but w has 1024 rows (x is [8, 64, 768], w is [1024, 3072])");
    ck_assert_int_eq(err.blame, 3);
    c = C(PRIM_LINEAR, 3, S(DT_F32, 3, 8, 64, 768), S(DT_F32, 2, 768, 3072, 0), S(DT_F32, 1, 768, 0, 0));
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "linear: b has 768 elements but w has 3072 columns (b is [768], w is [768, 3072])");
    c = C(PRIM_LINEAR, 2, S(DT_I32, 2, 8, 4, 0), S(DT_F32, 2, 4, 4, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "linear: x is i32, expected a floating-point tensor (f32, bf16 or f16)");
    c = C(PRIM_LINEAR, 1, S(DT_F32, 2, 8, 4, 0), NO, NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "linear takes 2 to 3 tensor inputs, got 1");
}
END_TEST

START_TEST(matmul_rule) {
    PrimCall c = C(PRIM_MATMUL, 2, S(DT_F32, 3, 2, 16, 64), S(DT_F32, 2, 256, 64, 0), NO);
    c.iattr[IA_MATMUL_TRANSPOSE_B] = 1; /* transpose_b: b is [N, K] */
    c.attr_set[1] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 2, 16, 256);
    c = C(PRIM_MATMUL, 2, S(DT_F32, 3, 2, 16, 64), S(DT_F32, 2, 256, 64, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "matmul: a has inner dimension 64 but b has 256 rows (a is [2, 16, 64], b is [256, 64])");
    /* transpose_a swaps a's last two dims: [2, 64, 16]^T . [64, 8] -> [2, 16, 8] */
    c = C(PRIM_MATMUL, 2, S(DT_F32, 3, 2, 64, 16), S(DT_F32, 2, 64, 8, 0), NO);
    c.iattr[IA_MATMUL_TRANSPOSE_A] = 1;
    c.attr_set[0] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 2, 16, 8);
    /* a 1-D a: [K] . [K, N] -> [N]; transpose_a needs rank 2 */
    c = C(PRIM_MATMUL, 2, S(DT_F32, 1, 64, 0, 0), S(DT_F32, 2, 64, 8, 0), NO);
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 1, 8, 0, 0);
    c.iattr[IA_MATMUL_TRANSPOSE_A] = 1;
    c.attr_set[0] = true;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "matmul: a must have rank at least 2, but it is [64] (rank 1)");
}
END_TEST

START_TEST(add_mul_rule) {
    PrimCall c = C(PRIM_ADD, 2, S(DT_F32, 3, 4, 16, 64), S(DT_F32, 2, 16, 64, 0), NO);
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 4, 16, 64);
    c = C(PRIM_MUL, 2, S(DT_F32, 1, 64, 0, 0), S(DT_F32, 3, 4, 16, 64), NO); /* either side may be the smaller */
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 4, 16, 64);
    c = C(PRIM_ADD, 2, S(DT_F32, 3, 4, 16, 64), S(DT_F32, 2, 32, 64, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "add: shapes [4, 16, 64] and [32, 64] do not broadcast (the smaller must be a suffix "
                              "of the larger: dimension 1 is 16 against 32)");
}
END_TEST

START_TEST(norm_rules) {
    PrimCall c = C(PRIM_LAYERNORM, 3, S(DT_F32, 3, 4, 16, 64), S(DT_F32, 1, 64, 0, 0), S(DT_F32, 1, 64, 0, 0));
    ck_assert(infer(&c));
    ck_assert_double_eq(c.fattr[FA_LAYERNORM_EPS], 1e-5); /* default eps */
    expect_shape(0, DT_BF16, 3, 4, 16, 64);
    c = C(PRIM_LAYERNORM, 1, S(DT_F32, 3, 4, 16, 64), NO, NO);
    ck_assert(infer(&c));
    c = C(PRIM_RMSNORM, 2, S(DT_F32, 3, 4, 16, 64), S(DT_F32, 1, 32, 0, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rmsnorm: g has 32 elements but x has last dimension 64 (x is [4, 16, 64], g is [32])");
    c = C(PRIM_RMSNORM, 1, S(DT_F32, 3, 4, 16, 64), NO, NO);
    c.fattr[FA_RMSNORM_EPS] = -1;
    c.attr_set[0] = true;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rmsnorm: eps must be positive, got -1");
    /* per head: 4 heads of 16, g [16] */
    c = C(PRIM_RMSNORM, 2, S(DT_F32, 3, 4, 16, 64), S(DT_F32, 1, 16, 0, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_int_eq(c.iattr[IA_RMSNORM_HEADS], 1); /* default heads: g must cover the whole last dimension */
    c = C(PRIM_RMSNORM, 2, S(DT_F32, 3, 4, 16, 64), S(DT_F32, 1, 16, 0, 0), NO);
    c.iattr[IA_RMSNORM_HEADS] = 4;
    c.attr_set[1] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 4, 16, 64);
    c.in[1] = S(DT_F32, 1, 64, 0, 0);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rmsnorm: g has 64 elements but the head dimension is 64 / 4 = 16 (x is [4, 16, 64], g is [64])");
    c.iattr[IA_RMSNORM_HEADS] = 5;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rmsnorm: x's last dimension 64 is not a multiple of heads = 5 (x is [4, 16, 64])");
    c.iattr[IA_RMSNORM_HEADS] = 0;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rmsnorm: heads must be positive, got 0");
}
END_TEST

START_TEST(unary_rules) {
    PrimCall c = C(PRIM_GELU, 1, S(DT_F16, 2, 3, 5, 0), NO, NO);
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 2, 3, 5, 0);
    c = C(PRIM_SILU, 1, S(DT_I32, 2, 3, 5, 0), NO, NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "silu: x is i32, expected a floating-point tensor (f32, bf16 or f16)");
    c = C(PRIM_SCALE, 1, S(DT_F32, 2, 3, 5, 0), NO, NO);
    c.fattr[FA_SCALE_BY] = 2.0;
    c.attr_set[0] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 2, 3, 5, 0);
    c.fattr[FA_SCALE_BY] = INFINITY;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "scale: by must be a finite number, got inf");
    c.attr_set[0] = false;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "scale: missing attribute 'by'");
}
END_TEST

START_TEST(rope_rule) {
    PrimCall c = C(PRIM_ROPE, 1, S(DT_F32, 3, 2, 16, 64), NO, NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: missing attribute 'heads'");
    c.iattr[IA_ROPE_HEADS] = 4;
    c.attr_set[0] = true;
    ck_assert(infer(&c));
    ck_assert_double_eq(c.fattr[FA_ROPE_THETA], 10000.0);
    expect_shape(0, DT_BF16, 3, 2, 16, 64);
    c.iattr[IA_ROPE_HEADS] = 5;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: x's last dimension 64 is not a multiple of heads = 5 (x is [2, 16, 64])");
    c.iattr[IA_ROPE_HEADS] = 64; /* head dim 1: odd */
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: the head dimension 64 / 64 = 1 must be even");
    /* scaling: attribute indices 2 scaling, 3 factor, 4 low, 5 high, 6 original_max_positions */
    c = C(PRIM_ROPE, 1, S(DT_F32, 3, 2, 16, 64), NO, NO);
    c.iattr[IA_ROPE_HEADS] = 4;
    c.attr_set[0] = true;
    c.fattr[FA_ROPE_FACTOR] = 8;
    c.attr_set[3] = true;
    ck_assert(infer(&c)); /* the shape rule takes it; the checker asks prim_unused_attrs */
    ck_assert(!prim_unused_attrs(&c, &err));
    ck_assert_str_eq(err.msg, "rope: 'factor' is not used with scaling = \"none\" (it takes scaling = \"linear\", \"llama3\" or \"yarn\")");
    c.fattr[FA_ROPE_FACTOR] = 1; /* the default, given: changes nothing, accepted */
    ck_assert(prim_unused_attrs(&c, &err));
    c.fattr[FA_ROPE_FACTOR] = 8;
    c.iattr[IA_ROPE_SCALING] = ROPE_LINEAR;
    c.attr_set[2] = true;
    ck_assert(infer(&c));
    ck_assert(prim_unused_attrs(&c, &err));
    c.iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] = 4096;
    c.attr_set[6] = true;
    ck_assert(!prim_unused_attrs(&c, &err));
    ck_assert_str_eq(err.msg, "rope: 'original_max_positions' is not used with scaling = \"linear\" (it takes scaling = \"llama3\", \"yarn\" or \"longrope\")");
    c.iattr[IA_ROPE_SCALING] = ROPE_LLAMA3;
    ck_assert(prim_unused_attrs(&c, &err));
    ck_assert(infer(&c));
    ck_assert_double_eq(c.fattr[FA_ROPE_LOW_FREQ_FACTOR], 1.0); /* defaults: low 1, high 4 */
    ck_assert_double_eq(c.fattr[FA_ROPE_HIGH_FREQ_FACTOR], 4.0);
    c.fattr[FA_ROPE_HIGH_FREQ_FACTOR] = 0.5;
    c.attr_set[5] = true;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: high_freq_factor (0.5) must be greater than low_freq_factor (1)");
    c.fattr[FA_ROPE_HIGH_FREQ_FACTOR] = 4;
    c.fattr[FA_ROPE_FACTOR] = 0;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: factor must be positive, got 0");
    c.fattr[FA_ROPE_FACTOR] = 8;
    c.iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] = 0;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: original_max_positions must be positive, got 0");
    c.iattr[IA_ROPE_SCALING] = 5;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: unknown scaling 5");
    const PrimAttr *sc = prim_attr(prim_info(PRIM_ROPE), "scaling");
    ck_assert_int_eq(sc->kind, PA_WORD);
    ck_assert_str_eq(sc->words[ROPE_LLAMA3], "llama3");
    ck_assert_str_eq(sc->words[ROPE_YARN], "yarn");
    ck_assert_str_eq(sc->words[ROPE_LONGROPE], "longrope");
    ck_assert_ptr_null(sc->words[5]);
    /* longrope: a table per length, one number per pair turned (rotary_dim 12 of a head of 16: 6) */
    c.iattr[IA_ROPE_SCALING] = ROPE_LONGROPE;
    c.iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] = 8;
    c.iattr[IA_ROPE_ROTARY_DIM] = 12;
    c.attr_set[9] = true;
    static const double shortf[6] = {1, 1.5, 2, 2.5, 3, 3.5}, longf[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: short_factor has 0 numbers, longrope needs one per pair turned: 6 (rotary_dim 12 / 2)");
    c.lists[LA_ROPE_SHORT_FACTOR] = shortf, c.nlists[LA_ROPE_SHORT_FACTOR] = 6;
    c.lists[LA_ROPE_LONG_FACTOR] = longf, c.nlists[LA_ROPE_LONG_FACTOR] = 8;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: long_factor has 8 numbers, longrope needs one per pair turned: 6 (rotary_dim 12 / 2)");
    c.nlists[LA_ROPE_LONG_FACTOR] = 6;
    ck_assert(infer(&c));
    c.iattr[IA_ROPE_ROTARY_DIM] = 7;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: rotary_dim = 7 must be even and between 0 (the whole head) and the head dimension 16");
    c.iattr[IA_ROPE_ROTARY_DIM] = 12;
    c.iattr[IA_ROPE_SCALING] = ROPE_LINEAR;
    c.fattr[FA_ROPE_FACTOR] = 2;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "rope: 'short_factor' is used only with scaling = \"longrope\"");
}
END_TEST

START_TEST(attention_rule) {
    /* GQA: 8 query heads of 16, 2 kv heads */
    PrimCall c = C(PRIM_ATTENTION, 3, S(DT_F32, 3, 2, 16, 128), S(DT_F32, 3, 2, 16, 32), S(DT_F32, 3, 2, 16, 32));
    c.iattr[IA_ATTENTION_HEADS] = 8;
    c.attr_set[0] = true;
    c.iattr[IA_ATTENTION_KV_HEADS] = 2;
    c.attr_set[1] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 2, 16, 128);
    /* kv_heads defaults to heads: k must then be as wide as q */
    c.attr_set[1] = false;
    ck_assert(!infer(&c));
    ck_assert_int_eq(c.iattr[IA_ATTENTION_KV_HEADS], 8);
    ck_assert_str_eq(err.msg, "attention: k has last dimension 32 but kv_heads * head dimension = 8 * 16 = 128 (q is "
                              "[2, 16, 128], k is [2, 16, 32])");
    c.iattr[IA_ATTENTION_KV_HEADS] = 3;
    c.attr_set[1] = true;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "attention: heads = 8 is not a multiple of kv_heads = 3");
    c = C(PRIM_ATTENTION, 3, S(DT_F32, 3, 2, 16, 128), S(DT_F32, 3, 2, 16, 128), S(DT_F32, 3, 2, 8, 128));
    c.iattr[IA_ATTENTION_HEADS] = 8;
    c.attr_set[0] = true;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "attention: k and v must have the same shape, but k is [2, 16, 128] and v is [2, 8, 128]");
}
END_TEST

START_TEST(split_rule) {
    PrimCall c = C(PRIM_SPLIT, 1, S(DT_F32, 3, 2, 16, 192), NO, NO);
    c.iattr[IA_SPLIT_N] = 3;
    c.attr_set[0] = true;
    ck_assert(infer(&c));
    ck_assert_int_eq(nout, 3);
    for (int i = 0; i < 3; i++) expect_shape(i, DT_BF16, 3, 2, 16, 64);
    c.iattr[IA_SPLIT_N] = 5;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "split: x's last dimension 192 does not divide into 5 equal pieces (x is [2, 16, 192])");
    c.iattr[IA_SPLIT_N] = 2;
    c.nsizes = 2;
    c.sizes[0] = 128;
    c.sizes[1] = 64;
    ck_assert(infer(&c));
    ck_assert_int_eq(nout, 2);
    expect_shape(0, DT_BF16, 3, 2, 16, 128);
    expect_shape(1, DT_BF16, 3, 2, 16, 64);
    c.sizes[1] = 32;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "split: the sizes sum to 160 but x's last dimension is 192 (x is [2, 16, 192])");
    c.nsizes = 0;
    c.iattr[IA_SPLIT_N] = GRAPH_MAX_OUT + 1;
    ck_assert(!infer(&c));
}
END_TEST

START_TEST(xent_rule) {
    PrimCall c = C(PRIM_CROSS_ENTROPY, 2, S(DT_BF16, 3, 2, 16, 256), S(DT_I32, 2, 2, 16, 0), NO);
    ck_assert(infer(&c));
    ck_assert_int_eq(out[0].dtype, DT_F32);
    ck_assert_int_eq(out[0].rank, 0);
    c = C(PRIM_CROSS_ENTROPY, 2, S(DT_BF16, 3, 2, 16, 256), S(DT_I32, 2, 2, 8, 0), NO);
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "cross_entropy: targets must have the shape of logits without its last dimension, but "
                              "logits are [2, 16, 256] and targets [2, 8]");
    c = C(PRIM_CROSS_ENTROPY, 2, S(DT_BF16, 3, 2, 16, 256), S(DT_F32, 2, 2, 16, 0), NO);
    ck_assert(!infer(&c));
}
END_TEST

START_TEST(arange_rule) {
    PrimCall c = C(PRIM_ARANGE, 0, NO, NO, NO);
    c.iattr[IA_ARANGE_N] = 64;
    c.attr_set[0] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_I32, 1, 64, 0, 0);
    c.iattr[IA_ARANGE_N] = 0;
    ck_assert(!infer(&c));
    ck_assert_str_eq(err.msg, "arange: n must be positive, got 0");
}
END_TEST

/* The mixture-of-experts family: shapes of a routed MLP, and each rule's refusals. */
START_TEST(moe_rules) {
    PrimShape logits = S(DT_BF16, 3, 2, 8, 6), idx = S(DT_I32, 3, 2, 8, 2);
    /* moe_topk: [S..., E] -> i32 [S..., k]; k above E refused */
    PrimCall c = C(PRIM_MOE_TOPK, 1, logits, NO, NO);
    c.iattr[IA_MOE_TOPK_K] = 2;
    c.attr_set[0] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_I32, 3, 2, 8, 2);
    c.iattr[IA_MOE_TOPK_K] = 7;
    ck_assert(!infer(&c));
    ck_assert(strstr(err.msg, "k = 7 is larger than the number of experts") != NULL);
    /* moe_gate: [S..., k] of the training dtype; idx must be i32 with logits' rows */
    c = C(PRIM_MOE_GATE, 2, logits, idx, NO);
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 2, 8, 2);
    c = C(PRIM_MOE_GATE, 2, logits, S(DT_BF16, 3, 2, 8, 2), NO);
    ck_assert(!infer(&c));
    ck_assert(strstr(err.msg, "idx must be i32") != NULL);
    c = C(PRIM_MOE_GATE, 2, logits, S(DT_I32, 3, 2, 7, 2), NO);
    ck_assert(!infer(&c));
    /* moe_expert: shared x [S..., I] or per slot [S..., k, I]; w [E, O, I] */
    PrimShape x = S(DT_BF16, 3, 2, 8, 16), w = S(DT_BF16, 3, 6, 24, 16);
    c = C(PRIM_MOE_EXPERT, 3, x, idx, w);
    ck_assert(infer(&c));
    ck_assert_int_eq(out[0].rank, 4);
    ck_assert_int_eq(out[0].dims[2], 2);
    ck_assert_int_eq(out[0].dims[3], 24);
    PrimShape h = S(DT_BF16, 4, 2, 8, 2);
    h.dims[3] = 24;
    c = C(PRIM_MOE_EXPERT, 3, h, idx, S(DT_BF16, 3, 6, 16, 24));
    ck_assert(infer(&c));
    ck_assert_int_eq(out[0].dims[3], 16);
    c = C(PRIM_MOE_EXPERT, 3, x, idx, S(DT_BF16, 3, 6, 24, 15));
    ck_assert(!infer(&c));
    ck_assert(strstr(err.msg, "take I = 15") != NULL);
    /* moe_combine: o [S..., k, D], weights [S..., k] -> [S..., D] */
    PrimShape o = S(DT_BF16, 4, 2, 8, 2);
    o.dims[3] = 16;
    c = C(PRIM_MOE_COMBINE, 2, o, S(DT_BF16, 3, 2, 8, 2), NO);
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 2, 8, 16);
    c = C(PRIM_MOE_COMBINE, 2, o, S(DT_BF16, 3, 2, 8, 3), NO);
    ck_assert(!infer(&c));
    /* moe_load: f32 [2, E], with no tensor, with logits and idx, with acc too */
    c = C(PRIM_MOE_LOAD, 0, NO, NO, NO);
    c.iattr[IA_MOE_LOAD_EXPERTS] = 6;
    c.attr_set[0] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_F32, 2, 2, 6, 0);
    c.nin = 3;
    c.in[0] = logits, c.in[1] = idx, c.in[2] = S(DT_F32, 2, 2, 6, 0);
    ck_assert(infer(&c));
    c.in[2] = S(DT_F32, 2, 2, 5, 0);
    ck_assert(!infer(&c));
    ck_assert(strstr(err.msg, "acc must be f32[2, 6]") != NULL);
    c.nin = 1;
    ck_assert(!infer(&c));
    c.nin = 2;
    c.iattr[IA_MOE_LOAD_EXPERTS] = 5;
    ck_assert(!infer(&c));
    /* moe_balance: f32 scalar; a load of another shape refused */
    c = C(PRIM_MOE_BALANCE, 1, S(DT_F32, 2, 2, 6, 0), NO, NO);
    c.fattr[FA_MOE_BALANCE_SCALE] = 0.5;
    c.attr_set[0] = true;
    ck_assert(infer(&c));
    expect_shape(0, DT_F32, 0, 0, 0, 0);
    c.in[0] = S(DT_F32, 2, 3, 6, 0);
    ck_assert(!infer(&c));
    /* moe_shared_gate: y [S..., D] scaled by a [S..., 1] logit */
    c = C(PRIM_MOE_SHARED_GATE, 2, S(DT_BF16, 3, 2, 8, 16), S(DT_BF16, 3, 2, 8, 1), NO);
    ck_assert(infer(&c));
    expect_shape(0, DT_BF16, 3, 2, 8, 16);
    c.in[1] = S(DT_BF16, 3, 2, 8, 2);
    ck_assert(!infer(&c));
    ck_assert(strstr(err.msg, "logit must be [S..., 1]") != NULL);
    /* two f32 scalars add up to an f32 loss in a bf16 model */
    c = C(PRIM_ADD, 2, S(DT_F32, 0, 0, 0, 0), S(DT_F32, 0, 0, 0, 0), NO);
    ck_assert(infer(&c));
    expect_shape(0, DT_F32, 0, 0, 0, 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("prim");
    TCase *t = tcase_create("rules");
    tcase_add_test(t, table_matches_def);
    tcase_add_test(t, attr_slots_match_def);
    tcase_add_test(t, embedding_rule);
    tcase_add_test(t, linear_rule);
    tcase_add_test(t, matmul_rule);
    tcase_add_test(t, add_mul_rule);
    tcase_add_test(t, norm_rules);
    tcase_add_test(t, unary_rules);
    tcase_add_test(t, rope_rule);
    tcase_add_test(t, attention_rule);
    tcase_add_test(t, split_rule);
    tcase_add_test(t, xent_rule);
    tcase_add_test(t, arange_rule);
    tcase_add_test(t, moe_rules);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
