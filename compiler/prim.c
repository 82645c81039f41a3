#include "prim.h"
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The words of rope's `scaling` attribute, in RopeScaling order (graph.h). */
static const char *const rope_scalings[] = {"none", "linear", "llama3", "yarn", "longrope", NULL};
/* The words of gated_mlp's `act` attribute: the gate's activation (GATED_MLP_SILU, GATED_MLP_GELU of vocab.h). */
static const char *const gmlp_acts[] = {"silu", "gelu", NULL};

void prim_defaults(PrimCall *c) {
    const PrimInfo *p = prim_info(c->prim);
    if (!p) return;
    for (int i = 0; i < p->nattr; i++) {
        const PrimAttr *a = &p->attrs[i];
        if (c->attr_set[i] || a->required) continue;
        if (a->kind == PA_FLOAT) c->fattr[a->slot] = a->def;
        else if (a->kind != PA_FLOATS) c->iattr[a->slot] = (int64_t)a->def;
    }
    /* kv_heads defaults to heads */
    if (c->prim == PRIM_ATTENTION && !c->attr_set[1]) c->iattr[IA_ATTENTION_KV_HEADS] = c->iattr[IA_ATTENTION_HEADS];
}

const char *prim_dtype_str(DType t) {
    switch (t) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    case DT_NF4: return "nf4";   /* a frozen weight stored quantized (train { quantize }) */
    case DT_INT8: return "int8";
    default: return "none";
    }
}

const char *prim_shape_str(const PrimShape *s, char *buf, size_t n) {
    size_t o = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    o += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < s->rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", s->dims[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

/* ---- rule helpers ---- */

static bool fail(PrimError *e, unsigned blame, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(PrimError *e, unsigned blame, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->blame = blame;
    return false;
}

#define SH(i) prim_shape_str(&c->in[i], sb[i], sizeof sb[i])
#define NAME(i) (p->in_names[i])
#define LAST(s) ((s).dims[(s).rank - 1])

static bool is_float(DType t) { return t == DT_F32 || t == DT_BF16 || t == DT_F16; }

/* Every tensor input named in mask must be floating point. */
static bool need_float(const PrimCall *c, const PrimInfo *p, unsigned mask, PrimError *e) {
    for (int i = 0; i < c->nin; i++)
        if ((mask >> i & 1) && !is_float(c->in[i].dtype))
            return fail(e, 1u << i, "%s: %s is %s, expected a floating-point tensor (f32, bf16 or f16)", p->name,
                        NAME(i), prim_dtype_str(c->in[i].dtype));
    return true;
}

static bool need_rank(const PrimCall *c, const PrimInfo *p, int i, int lo, int hi, PrimError *e) {
    char sb[1][96];
    int r = c->in[i].rank;
    if (r >= lo && r <= hi) return true;
    prim_shape_str(&c->in[i], sb[0], sizeof sb[0]);
    if (lo == hi)
        return fail(e, 1u << i, "%s: %s must have rank %d, but it is %s (rank %d)", p->name, NAME(i), lo, sb[0], r);
    if (hi >= GRAPH_MAX_RANK)
        return fail(e, 1u << i, "%s: %s must have rank at least %d, but it is %s (rank %d)", p->name, NAME(i), lo,
                    sb[0], r);
    return fail(e, 1u << i, "%s: %s must have rank %d to %d, but it is %s (rank %d)", p->name, NAME(i), lo, hi, sb[0],
                r);
}

static void copy_shape(PrimShape *o, const PrimShape *s, DType dt) {
    *o = *s;
    o->dtype = dt;
}

/* ---- rules ---- */

static bool rule_embedding(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[2][96];
    if (!need_rank(c, p, 0, 2, 2, e)) return false;
    if (!need_float(c, p, 1, e)) return false;
    if (c->in[1].dtype != DT_I32)
        return fail(e, 2, "embedding: ids must be i32, but they are %s", prim_dtype_str(c->in[1].dtype));
    if (c->in[1].rank + 1 > GRAPH_MAX_RANK)
        return fail(e, 2, "embedding: ids %s have too many dimensions (at most %d)", SH(1), GRAPH_MAX_RANK - 1);
    (void)sb;
    out->dtype = c->act_dtype;
    out->rank = c->in[1].rank + 1;
    for (int i = 0; i < c->in[1].rank; i++) out->dims[i] = c->in[1].dims[i];
    out->dims[out->rank - 1] = c->in[0].dims[1];
    return true;
}

static bool rule_linear(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[3][96];
    if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_rank(c, p, 1, 2, 2, e)) return false;
    if (c->nin == 3 && !need_rank(c, p, 2, 1, 1, e)) return false;
    if (!need_float(c, p, 7, e)) return false;
    const PrimShape *x = &c->in[0], *w = &c->in[1];
    if (LAST(*x) != w->dims[0])
        return fail(e, 3, "linear: x has last dimension %" PRId64 " but w has %" PRId64 " rows (x is %s, w is %s)",
                    LAST(*x), w->dims[0], SH(0), SH(1));
    if (c->nin == 3 && c->in[2].dims[0] != w->dims[1])
        return fail(e, 6, "linear: b has %" PRId64 " elements but w has %" PRId64 " columns (b is %s, w is %s)",
                    c->in[2].dims[0], w->dims[1], SH(2), SH(1));
    copy_shape(out, x, c->act_dtype);
    out->dims[out->rank - 1] = w->dims[1];
    return true;
}

static bool rule_matmul(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[2][96];
    bool ta = c->iattr[IA_MATMUL_TRANSPOSE_A] != 0, tb = c->iattr[IA_MATMUL_TRANSPOSE_B] != 0;
    if (!need_rank(c, p, 0, ta ? 2 : 1, GRAPH_MAX_RANK, e) || !need_rank(c, p, 1, 2, 2, e)) return false;
    if (!need_float(c, p, 3, e)) return false;
    const PrimShape *a = &c->in[0], *b = &c->in[1];
    int64_t k = ta ? a->dims[a->rank - 2] : LAST(*a);
    int64_t bk = tb ? b->dims[1] : b->dims[0], n = tb ? b->dims[0] : b->dims[1];
    if (k != bk)
        return fail(e, 3,
                    "matmul: a has inner dimension %" PRId64 " but b%s has %" PRId64 " %s (a is %s%s, b is %s)", k,
                    tb ? " (transposed)" : "", bk, tb ? "columns" : "rows", SH(0), ta ? ", transposed" : "", SH(1));
    copy_shape(out, a, c->act_dtype);
    if (ta) out->dims[a->rank - 2] = a->dims[a->rank - 1];
    out->dims[out->rank - 1] = n;
    return true;
}

static bool rule_binary(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[2][96];
    if (!need_float(c, p, 3, e)) return false;
    const PrimShape *a = &c->in[0], *b = &c->in[1];
    const PrimShape *big = a->rank >= b->rank ? a : b, *small = a->rank >= b->rank ? b : a;
    int off = big->rank - small->rank;
    for (int i = 0; i < small->rank; i++)
        if (small->dims[i] != big->dims[off + i])
            return fail(e, 3,
                        "%s: shapes %s and %s do not broadcast (the smaller must be a suffix of the larger: "
                        "dimension %d is %" PRId64 " against %" PRId64 ")",
                        p->name, SH(0), SH(1), off + i, big->dims[off + i], small->dims[i]);
    copy_shape(out, big, c->act_dtype);
    /* two f32 scalars (the loss and an auxiliary loss: moe_balance) make an
     * f32 loss whatever the training dtype */
    if (big->rank == 0 && a->dtype == DT_F32 && b->dtype == DT_F32) out->dtype = DT_F32;
    return true;
}

static bool rule_norm(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[3][96];
    if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e)) return false;
    if (!need_float(c, p, 7, e)) return false;
    /* rmsnorm with heads = H normalises each of the H slices of hd = D/H values */
    int64_t heads = c->prim == PRIM_RMSNORM ? c->iattr[IA_RMSNORM_HEADS] : 1, D = LAST(c->in[0]);
    if (heads < 1) return fail(e, 0, "%s: heads must be positive, got %" PRId64, p->name, heads);
    if (D % heads != 0)
        return fail(e, 1, "%s: x's last dimension %" PRId64 " is not a multiple of heads = %" PRId64 " (x is %s)", p->name,
                    D, heads, SH(0));
    for (int i = 1; i < c->nin; i++) {
        if (!need_rank(c, p, i, 1, 1, e)) return false;
        if (heads > 1 && c->in[i].dims[0] != D / heads)
            return fail(e, 1u | 1u << i, "%s: %s has %" PRId64 " elements but the head dimension is %" PRId64
                        " / %" PRId64 " = %" PRId64 " (x is %s, %s is %s)", p->name, NAME(i), c->in[i].dims[0], D,
                        heads, D / heads, SH(0), NAME(i), SH(i));
        if (heads == 1 && c->in[i].dims[0] != D)
            return fail(e, 1u | 1u << i, "%s: %s has %" PRId64 " elements but x has last dimension %" PRId64
                        " (x is %s, %s is %s)", p->name, NAME(i), c->in[i].dims[0], D, SH(0), NAME(i),
                        SH(i));
    }
    if (!(c->fattr[FA_LAYERNORM_EPS] > 0)) return fail(e, 0, "%s: eps must be positive, got %g", p->name, c->fattr[FA_LAYERNORM_EPS]);
    if (c->prim == PRIM_RMSNORM && !isfinite(c->fattr[FA_RMSNORM_OFFSET]))
        return fail(e, 0, "%s: offset must be a finite number, got %g", p->name, c->fattr[FA_RMSNORM_OFFSET]);
    copy_shape(out, &c->in[0], c->act_dtype);
    return true;
}

static bool rule_act(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    if (!need_float(c, p, 1, e)) return false;
    copy_shape(out, &c->in[0], c->act_dtype);
    return true;
}

static bool rule_scale(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    if (!need_float(c, p, 1, e)) return false;
    if (c->prim == PRIM_SOFTCAP && !(c->fattr[FA_SOFTCAP_CAP] > 0 && isfinite(c->fattr[FA_SOFTCAP_CAP])))
        return fail(e, 0, "%s: cap must be a positive number, got %g", p->name, c->fattr[FA_SOFTCAP_CAP]);
    if (!isfinite(c->fattr[FA_SCALE_BY])) return fail(e, 0, "%s: by must be a finite number, got %g", p->name, c->fattr[FA_SCALE_BY]);
    copy_shape(out, &c->in[0], c->act_dtype);
    return true;
}

/* The scaling attributes in their ranges. */
static bool rope_scaling_ok(const PrimCall *c, PrimError *e) {
    int64_t sc = c->iattr[IA_ROPE_SCALING];
    if (sc < ROPE_NONE || sc > ROPE_LONGROPE) return fail(e, 0, "rope: unknown scaling %" PRId64, sc);
    if (sc == ROPE_NONE) return true;
    if (sc == ROPE_LONGROPE) {
        if (c->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] < 1)
            return fail(e, 0, "rope: original_max_positions must be positive, got %" PRId64,
                        c->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS]);
        return true; /* the tables: rope_tables_ok */
    }
    if (!(c->fattr[FA_ROPE_FACTOR] > 0)) return fail(e, 0, "rope: factor must be positive, got %g", c->fattr[FA_ROPE_FACTOR]);
    if (sc == ROPE_LINEAR) return true;
    if (sc == ROPE_YARN) {
        if (c->fattr[FA_ROPE_BETA_FAST] < 0 || c->fattr[FA_ROPE_BETA_SLOW] < 0)
            return fail(e, 0, "rope: beta_fast and beta_slow must be positive (0: 32 and 1), got %g and %g",
                        c->fattr[FA_ROPE_BETA_FAST], c->fattr[FA_ROPE_BETA_SLOW]);
        if (c->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] < 1)
            return fail(e, 0, "rope: original_max_positions must be positive, got %" PRId64,
                        c->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS]);
        return true;
    }
    if (!(c->fattr[FA_ROPE_LOW_FREQ_FACTOR] > 0))
        return fail(e, 0, "rope: low_freq_factor must be positive, got %g", c->fattr[FA_ROPE_LOW_FREQ_FACTOR]);
    if (!(c->fattr[FA_ROPE_HIGH_FREQ_FACTOR] > c->fattr[FA_ROPE_LOW_FREQ_FACTOR]))
        return fail(e, 0, "rope: high_freq_factor (%g) must be greater than low_freq_factor (%g)", c->fattr[FA_ROPE_HIGH_FREQ_FACTOR],
                    c->fattr[FA_ROPE_LOW_FREQ_FACTOR]);
    if (c->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] < 1)
        return fail(e, 0, "rope: original_max_positions must be positive, got %" PRId64, c->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS]);
    return true;
}

/* longrope's short_factor and long_factor: given with it (and only with
 * it), rotary_dim / 2 positive numbers each (one per pair turned). */
static bool rope_tables_ok(const PrimCall *c, int64_t rd, PrimError *e) {
    static const char *const names[] = {"short_factor", "long_factor"};
    bool lr = c->iattr[IA_ROPE_SCALING] == ROPE_LONGROPE;
    for (int l = 0; l < 2; l++) {
        int n = c->nlists[l == 0 ? LA_ROPE_SHORT_FACTOR : LA_ROPE_LONG_FACTOR];
        const double *v = c->lists[l == 0 ? LA_ROPE_SHORT_FACTOR : LA_ROPE_LONG_FACTOR];
        if (!lr && n) return fail(e, 0, "rope: '%s' is used only with scaling = \"longrope\"", names[l]);
        if (!lr) continue;
        if (n != rd / 2)
            return fail(e, 0, "rope: %s has %d numbers, longrope needs one per pair turned: %" PRId64 " (rotary_dim %" PRId64
                        " / 2)", names[l], n, rd / 2, rd);
        for (int i = 0; i < n; i++)
            if (!(v[i] > 0) || !isfinite(v[i]))
                return fail(e, 0, "rope: %s[%d] must be a positive number, got %g", names[l], i, v[i]);
    }
    return true;
}

static bool rule_rope(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[1][96];
    if (!need_rank(c, p, 0, 3, 3, e) || !need_float(c, p, 1, e)) return false;
    int64_t h = c->iattr[IA_ROPE_HEADS], n = LAST(c->in[0]);
    if (h <= 0) return fail(e, 0, "rope: heads must be positive, got %" PRId64, h);
    if (n % h != 0)
        return fail(e, 1, "rope: x's last dimension %" PRId64 " is not a multiple of heads = %" PRId64 " (x is %s)", n,
                    h, SH(0));
    if ((n / h) % 2 != 0)
        return fail(e, 1, "rope: the head dimension %" PRId64 " / %" PRId64 " = %" PRId64 " must be even", n, h, n / h);
    if (!(c->fattr[FA_ROPE_THETA] > 0)) return fail(e, 0, "rope: theta must be positive, got %g", c->fattr[FA_ROPE_THETA]);
    int64_t rd = c->iattr[IA_ROPE_ROTARY_DIM];
    if (rd < 0 || rd > n / h || rd % 2)
        return fail(e, 0, "rope: rotary_dim = %" PRId64 " must be even and between 0 (the whole head) and the head dimension %" PRId64,
                    rd, n / h);
    if (!rope_scaling_ok(c, e) || !rope_tables_ok(c, rd ? rd : n / h, e)) return false;
    double af = c->fattr[FA_ROPE_ATTENTION_FACTOR];
    if (!(af >= 0) || !isfinite(af)) return fail(e, 0, "rope: attention_factor must be positive (0: 1), got %g", af);
    copy_shape(out, &c->in[0], c->act_dtype);
    return true;
}

static bool rule_attention(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[3][96];
    for (int i = 0; i < 3; i++)
        if (!need_rank(c, p, i, 3, 3, e)) return false;
    if (!need_float(c, p, 7, e)) return false;
    const PrimShape *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    int64_t h = c->iattr[IA_ATTENTION_HEADS], kv = c->iattr[IA_ATTENTION_KV_HEADS];
    if (h <= 0) return fail(e, 0, "attention: heads must be positive, got %" PRId64, h);
    if (kv <= 0) return fail(e, 0, "attention: kv_heads must be positive, got %" PRId64, kv);
    if (h % kv != 0)
        return fail(e, 0, "attention: heads = %" PRId64 " is not a multiple of kv_heads = %" PRId64, h, kv);
    if (c->iattr[IA_ATTENTION_WINDOW] < 0)
        return fail(e, 0, "attention: window must be 0 (none) or a positive number of positions, got %" PRId64,
                    c->iattr[IA_ATTENTION_WINDOW]);
    if (k->dims[0] != v->dims[0] || k->dims[1] != v->dims[1] || k->dims[2] != v->dims[2])
        return fail(e, 6, "attention: k and v must have the same shape, but k is %s and v is %s", SH(1), SH(2));
    if (q->dims[0] != k->dims[0] || q->dims[1] != k->dims[1])
        return fail(e, 3, "attention: q and k must agree in batch and sequence ([B, T, ...]), but q is %s and k is %s",
                    SH(0), SH(1));
    if (q->dims[2] % h != 0)
        return fail(e, 1, "attention: q's last dimension %" PRId64 " is not a multiple of heads = %" PRId64 " (q is %s)",
                    q->dims[2], h, SH(0));
    int64_t hd = q->dims[2] / h;
    if (k->dims[2] != kv * hd)
        return fail(e, 3,
                    "attention: k has last dimension %" PRId64 " but kv_heads * head dimension = %" PRId64 " * %" PRId64
                    " = %" PRId64 " (q is %s, k is %s)",
                    k->dims[2], kv, hd, kv * hd, SH(0), SH(1));
    if (!(c->fattr[FA_ATTENTION_SCALE] >= 0 && isfinite(c->fattr[FA_ATTENTION_SCALE])))
        return fail(e, 0, "attention: scale must be a positive number (0: 1/sqrt(head dimension)), got %g",
                    c->fattr[FA_ATTENTION_SCALE]);
    if (!(c->fattr[FA_ATTENTION_SOFTCAP] >= 0 && isfinite(c->fattr[FA_ATTENTION_SOFTCAP])))
        return fail(e, 0, "attention: softcap must be a positive number (0: none), got %g", c->fattr[FA_ATTENTION_SOFTCAP]);
    copy_shape(out, q, c->act_dtype);
    return true;
}

static bool rule_split(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    char sb[1][96];
    if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_float(c, p, 1, e)) return false;
    int64_t n = LAST(c->in[0]);
    if (c->nsizes == 0) {
        int64_t k = c->iattr[IA_SPLIT_N];
        if (k < 1 || k > GRAPH_MAX_OUT)
            return fail(e, 0, "split: the number of pieces must be 1 to %d, got %" PRId64, GRAPH_MAX_OUT, k);
        if (n % k != 0)
            return fail(e, 1, "split: x's last dimension %" PRId64 " does not divide into %" PRId64
                        " equal pieces (x is %s)", n, k, SH(0));
        for (int i = 0; i < k; i++) {
            copy_shape(&out[i], &c->in[0], c->act_dtype);
            out[i].dims[out[i].rank - 1] = n / k;
        }
        *nout = (int)k;
        return true;
    }
    if (c->nsizes > GRAPH_MAX_OUT)
        return fail(e, 0, "split: at most %d pieces, got %d", GRAPH_MAX_OUT, c->nsizes);
    int64_t sum = 0;
    for (int i = 0; i < c->nsizes; i++) {
        if (c->sizes[i] <= 0) return fail(e, 0, "split: piece %d has size %" PRId64 "; sizes must be positive", i,
                                          c->sizes[i]);
        if (c->sizes[i] > INT64_MAX - sum) return fail(e, 0, "split: the sizes overflow");
        sum += c->sizes[i];
    }
    if (sum != n)
        return fail(e, 1, "split: the sizes sum to %" PRId64 " but x's last dimension is %" PRId64 " (x is %s)", sum, n,
                    SH(0));
    for (int i = 0; i < c->nsizes; i++) {
        copy_shape(&out[i], &c->in[0], c->act_dtype);
        out[i].dims[out[i].rank - 1] = c->sizes[i];
    }
    *nout = c->nsizes;
    return true;
}

static bool rule_xent(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[2][96];
    if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_float(c, p, 1, e)) return false;
    if (c->in[1].dtype != DT_I32)
        return fail(e, 2, "cross_entropy: targets must be i32, but they are %s", prim_dtype_str(c->in[1].dtype));
    const PrimShape *l = &c->in[0], *t = &c->in[1];
    bool ok = t->rank == l->rank - 1;
    for (int i = 0; ok && i < t->rank; i++) ok = t->dims[i] == l->dims[i];
    if (!ok)
        return fail(e, 3, "cross_entropy: targets must have the shape of logits without its last dimension, "
                    "but logits are %s and targets %s", SH(0), SH(1));
    out->dtype = DT_F32;
    out->rank = 0;
    return true;
}

/* linear_cross_entropy: cross_entropy(matmul(x, w; transpose_b), targets)
 * in one op that never holds the logits whole (runtime/hostk/hostk.h). */
static bool rule_linxent(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[3][96];
    bool tb = c->iattr[IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B] != 0;
    if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_rank(c, p, 1, 2, 2, e) || !need_float(c, p, 3, e)) return false;
    if (c->in[2].dtype != DT_I32)
        return fail(e, 4, "linear_cross_entropy: targets must be i32, but they are %s", prim_dtype_str(c->in[2].dtype));
    const PrimShape *x = &c->in[0], *w = &c->in[1], *t = &c->in[2];
    int64_t k = tb ? w->dims[1] : w->dims[0];
    if (LAST(*x) != k)
        return fail(e, 3, "linear_cross_entropy: x has last dimension %" PRId64 " but w%s has %" PRId64 " %s (x is %s, w is %s)",
                    LAST(*x), tb ? " (transposed)" : "", k, tb ? "columns" : "rows", SH(0), SH(1));
    bool ok = t->rank == x->rank - 1;
    for (int i = 0; ok && i < t->rank; i++) ok = t->dims[i] == x->dims[i];
    if (!ok)
        return fail(e, 5, "linear_cross_entropy: targets must have the shape of x without its last dimension, "
                    "but x is %s and targets %s", SH(0), SH(2));
    if (c->iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK] < 0)
        return fail(e, 0, "linear_cross_entropy: chunk must be 0 (all rows at once) or a positive row count, got %" PRId64,
                    c->iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK]);
    out->dtype = DT_F32;
    out->rank = 0;
    return true;
}

/* gated_mlp: linear(act(linear(n, w_gate)) * linear(n, w_up), w_down) of
 * n = rmsnorm(x, g), computed `rows` rows at a time so that the [rows, I]
 * intermediates are all that exist of them (runtime/hostk/hostk_gmlp.c);
 * with 11 inputs, each of the three linears has a LoRA adapter (A, B). */
static bool rule_gmlp(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[11][96];
    if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_rank(c, p, 1, 1, 1, e) || !need_rank(c, p, 2, 2, 2, e) ||
        !need_rank(c, p, 3, 2, 2, e) || !need_rank(c, p, 4, 2, 2, e) || !need_float(c, p, 0x7ff, e))
        return false;
    const PrimShape *x = &c->in[0], *g = &c->in[1], *wg = &c->in[2], *wu = &c->in[3], *wd = &c->in[4];
    int64_t D = LAST(*x), I = wg->dims[1];
    if (g->dims[0] != D)
        return fail(e, 3, "gated_mlp: g has %" PRId64 " elements but x has last dimension %" PRId64 " (x is %s, g is %s)",
                    g->dims[0], D, SH(0), SH(1));
    if (wg->dims[0] != D || wu->dims[0] != D || wu->dims[1] != I)
        return fail(e, 0xd, "gated_mlp: w_gate and w_up must both be [%" PRId64 ", I], but they are %s and %s (x is %s)", D,
                    SH(2), SH(3), SH(0));
    if (wd->dims[0] != I || wd->dims[1] != D)
        return fail(e, 0x15, "gated_mlp: w_down must be [%" PRId64 ", %" PRId64 "], but it is %s (w_gate is %s)", I, D, SH(4),
                    SH(2));
    if (c->nin != 5 && c->nin != 11)
        return fail(e, 0, "gated_mlp takes 5 tensor inputs, or 11 with the LoRA adapters (A, B) of gate, up and down; got %d", c->nin);
    for (int k = 0; c->nin == 11 && k < 3; k++) {
        const PrimShape *A = &c->in[5 + 2 * k], *B = &c->in[6 + 2 * k];
        int64_t in = k < 2 ? D : I, o = k < 2 ? I : D;
        if (!need_rank(c, p, 5 + 2 * k, 2, 2, e) || !need_rank(c, p, 6 + 2 * k, 2, 2, e)) return false;
        if (A->dims[0] != in || B->dims[1] != o || B->dims[0] != A->dims[1])
            return fail(e, 3u << (5 + 2 * k), "gated_mlp: %s and %s must be [%" PRId64 ", r] and [r, %" PRId64 "], but they are %s and %s",
                        NAME(5 + 2 * k), NAME(6 + 2 * k), in, o, SH(5 + 2 * k), SH(6 + 2 * k));
    }
    if (!(c->fattr[FA_GATED_MLP_EPS] > 0)) return fail(e, 0, "gated_mlp: eps must be positive, got %g", c->fattr[FA_GATED_MLP_EPS]);
    if (!isfinite(c->fattr[FA_GATED_MLP_OFFSET]))
        return fail(e, 0, "gated_mlp: offset must be a finite number, got %g", c->fattr[FA_GATED_MLP_OFFSET]);
    if (c->iattr[IA_GATED_MLP_ACT] != GATED_MLP_SILU && c->iattr[IA_GATED_MLP_ACT] != GATED_MLP_GELU)
        return fail(e, 0, "gated_mlp: unknown act %" PRId64, c->iattr[IA_GATED_MLP_ACT]);
    if (c->iattr[IA_GATED_MLP_ROWS] < 0)
        return fail(e, 0, "gated_mlp: rows must be 0 (all rows at once) or a positive row count, got %" PRId64,
                    c->iattr[IA_GATED_MLP_ROWS]);
    copy_shape(out, x, c->act_dtype);
    return true;
}

static bool rule_arange(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)p, (void)nout;
    int64_t n = c->iattr[IA_ARANGE_N];
    if (n <= 0) return fail(e, 0, "arange: n must be positive, got %" PRId64, n);
    if (n > INT32_MAX) return fail(e, 0, "arange: n = %" PRId64 " does not fit in i32", n);
    out->dtype = DT_I32;
    out->rank = 1;
    out->dims[0] = n;
    return true;
}

/* The mixture-of-experts family (docs/primitives.md, "Mixture of experts"):
 * routing (moe_topk, moe_gate), the experts' GEMMs on the routed rows
 * (moe_expert), their weighted sum (moe_combine) and the load-balancing loss
 * (moe_load, moe_balance). idx[S..., k] says which k experts each of the
 * rows S... goes to. */

/* idx is i32 with the leading dims of `of` (its last dim aside): the routing
 * of of's rows. */
static bool moe_idx_rows(const PrimCall *c, const PrimInfo *p, int of, int idx, PrimError *e) {
    char sb[3][96];
    const PrimShape *a = &c->in[of], *r = &c->in[idx];
    if (r->dtype != DT_I32)
        return fail(e, 1u << idx, "%s: %s must be i32 (moe_topk's output), but it is %s", p->name, NAME(idx),
                    prim_dtype_str(r->dtype));
    bool ok = r->rank == a->rank;
    for (int i = 0; ok && i < a->rank - 1; i++) ok = r->dims[i] == a->dims[i];
    if (!ok)
        return fail(e, 1u << of | 1u << idx, "%s: %s must have the leading dimensions of %s ([S..., k] against [S..., %s]), "
                    "but %s is %s and %s is %s", p->name, NAME(idx), NAME(of), of == 0 && c->prim != PRIM_MOE_EXPERT ? "E" : "I",
                    NAME(idx), SH(idx), NAME(of), SH(of));
    return true;
}

static bool rule_moe(const PrimCall *c, const PrimInfo *p, PrimShape *out, int *nout, PrimError *e) {
    (void)nout; /* one output */
    char sb[3][96];
    switch (c->prim) {
    case PRIM_MOE_TOPK: {
        if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_float(c, p, 1, e)) return false;
        int64_t k = c->iattr[IA_MOE_TOPK_K], E = LAST(c->in[0]);
        if (k < 1) return fail(e, 0, "moe_topk: k must be positive, got %" PRId64, k);
        if (k > E)
            return fail(e, 1, "moe_topk: k = %" PRId64 " is larger than the number of experts, logits' last dimension %"
                        PRId64 " (logits are %s)", k, E, SH(0));
        copy_shape(out, &c->in[0], DT_I32);
        out->dims[out->rank - 1] = k;
        return true;
    }
    case PRIM_MOE_GATE: {
        if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_float(c, p, 1, e) || !moe_idx_rows(c, p, 0, 1, e))
            return false;
        if (LAST(c->in[1]) > LAST(c->in[0]))
            return fail(e, 3, "moe_gate: idx picks %" PRId64 " experts of %" PRId64 " (logits are %s, idx %s)",
                        LAST(c->in[1]), LAST(c->in[0]), SH(0), SH(1));
        copy_shape(out, &c->in[1], c->act_dtype);
        return true;
    }
    case PRIM_MOE_EXPERT: {
        if (!need_rank(c, p, 1, 1, GRAPH_MAX_RANK - 1, e) || !need_rank(c, p, 2, 3, 3, e) ||
            !need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_float(c, p, 5, e))
            return false;
        const PrimShape *x = &c->in[0], *r = &c->in[1], *w = &c->in[2];
        if (r->dtype != DT_I32)
            return fail(e, 2, "moe_expert: idx must be i32 (moe_topk's output), but it is %s", prim_dtype_str(r->dtype));
        /* x is a row per token (shared by its k experts) or a row per (token, expert) */
        bool ok = x->rank == r->rank || x->rank == r->rank + 1;
        int lead = x->rank == r->rank ? r->rank - 1 : r->rank;
        for (int i = 0; ok && i < lead; i++) ok = x->dims[i] == r->dims[i];
        if (!ok)
            return fail(e, 3, "moe_expert: x must be [S..., I] or [S..., k, I] for idx [S..., k], but x is %s and idx %s",
                        SH(0), SH(1));
        if (LAST(*x) != w->dims[2])
            return fail(e, 5, "moe_expert: x has last dimension %" PRId64 " but the experts' weights w [E, O, I] take I = %"
                        PRId64 " (x is %s, w is %s)", LAST(*x), w->dims[2], SH(0), SH(2));
        copy_shape(out, r, c->act_dtype);
        out->rank = r->rank + 1;
        out->dims[r->rank] = w->dims[1];
        return true;
    }
    case PRIM_MOE_COMBINE: {
        if (!need_rank(c, p, 0, 2, GRAPH_MAX_RANK, e) || !need_float(c, p, 3, e)) return false;
        const PrimShape *o = &c->in[0], *w = &c->in[1];
        bool ok = w->rank == o->rank - 1;
        for (int i = 0; ok && i < w->rank; i++) ok = w->dims[i] == o->dims[i];
        if (!ok)
            return fail(e, 3, "moe_combine: weights must be o's shape without its last dimension ([S..., k] for o "
                        "[S..., k, D]), but o is %s and weights %s", SH(0), SH(1));
        copy_shape(out, o, c->act_dtype);
        out->rank = o->rank - 1;
        out->dims[out->rank - 1] = LAST(*o);
        return true;
    }
    case PRIM_MOE_LOAD: {
        int64_t E = c->iattr[IA_MOE_LOAD_EXPERTS];
        if (E < 1) return fail(e, 0, "moe_load: experts must be positive, got %" PRId64, E);
        if (c->nin == 1) return fail(e, 1, "moe_load takes no tensor (zeros), or logits and idx (and acc), not logits alone");
        if (c->nin >= 2) {
            if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_float(c, p, 1, e) || !moe_idx_rows(c, p, 0, 1, e))
                return false;
            if (LAST(c->in[0]) != E)
                return fail(e, 1, "moe_load: logits have last dimension %" PRId64 " but experts = %" PRId64 " (logits are %s)",
                            LAST(c->in[0]), E, SH(0));
            if (LAST(c->in[1]) > E)
                return fail(e, 2, "moe_load: idx picks %" PRId64 " experts of %" PRId64, LAST(c->in[1]), E);
        }
        if (c->nin == 3) {
            const PrimShape *a = &c->in[2];
            if (a->dtype != DT_F32 || a->rank != 2 || a->dims[0] != 2 || a->dims[1] != E)
                return fail(e, 4, "moe_load: acc must be f32[2, %" PRId64 "] (a moe_load's output), but it is %s %s", E,
                            prim_dtype_str(a->dtype), SH(2));
        }
        out->dtype = DT_F32;
        out->rank = 2;
        out->dims[0] = 2;
        out->dims[1] = E;
        return true;
    }
    case PRIM_MOE_BALANCE: {
        const PrimShape *l = &c->in[0];
        if (l->dtype != DT_F32 || l->rank != 2 || l->dims[0] != 2)
            return fail(e, 1, "moe_balance: load must be f32[2, E] (moe_load's output), but it is %s %s",
                        prim_dtype_str(l->dtype), SH(0));
        if (!isfinite(c->fattr[FA_MOE_BALANCE_SCALE]))
            return fail(e, 0, "moe_balance: scale must be a finite number, got %g", c->fattr[FA_MOE_BALANCE_SCALE]);
        out->dtype = DT_F32;
        out->rank = 0;
        return true;
    }
    case PRIM_MOE_SHARED_GATE: {
        if (!need_rank(c, p, 0, 1, GRAPH_MAX_RANK, e) || !need_float(c, p, 3, e)) return false;
        const PrimShape *y = &c->in[0], *g = &c->in[1];
        bool ok = g->rank == y->rank && LAST(*g) == 1;
        for (int i = 0; ok && i < y->rank - 1; i++) ok = g->dims[i] == y->dims[i];
        if (!ok)
            return fail(e, 3, "moe_shared_gate: logit must be [S..., 1] for y [S..., D], but y is %s and logit %s", SH(0),
                        SH(1));
        copy_shape(out, y, c->act_dtype);
        return true;
    }
    default: return fail(e, 0, "%s is not a mixture-of-experts primitive", p->name);
    }
}

bool prim_unused_attrs(const PrimCall *c, PrimError *err) {
    err->msg[0] = 0;
    err->blame = 0;
    if (c->prim != PRIM_ROPE) return true;
    /* rope attribute indices: 2 scaling, 3 factor, 4 low_freq_factor, 5 high_freq_factor,
     * 6 original_max_positions, 7 beta_fast, 8 beta_slow; each is read by the scalings that
     * need it (bit i of a row: attribute 3 + i), and named by who takes it */
    static const unsigned used[] = {[ROPE_NONE] = 0, [ROPE_LINEAR] = 0x01, [ROPE_LLAMA3] = 0x0f, [ROPE_YARN] = 0x39,
                                    [ROPE_LONGROPE] = 0x08};
    static const char *const takers[] = {"\"linear\", \"llama3\" or \"yarn\"", "\"llama3\"", "\"llama3\"",
                                         "\"llama3\", \"yarn\" or \"longrope\"", "\"yarn\"", "\"yarn\""};
    const PrimInfo *p = prim_info(PRIM_ROPE);
    int64_t sc = c->iattr[IA_ROPE_SCALING];
    if (sc < ROPE_NONE || sc > ROPE_LONGROPE) return true; /* prim_infer reports it */
    for (int i = 3; i <= 8; i++) {
        const PrimAttr *a = &p->attrs[i];
        double v = a->kind == PA_FLOAT ? c->fattr[a->slot] : (double)c->iattr[a->slot];
        /* a layer passing its defaults through is fine: only a value that would change something */
        if (c->attr_set[i] && v != a->def && !(used[sc] >> (i - 3) & 1))
            return fail(err, 0, "rope: '%s' is not used with scaling = \"%s\" (it takes scaling = %s)", p->attrs[i].name,
                        rope_scalings[sc], takers[i - 3]);
    }
    return true;
}

/* The compiler's half of each primitive's row (the other half, identity
 * and family, is runtime/plan/prim.def): operand roles, attributes (in
 * the slots prim.def names), the one-line documentation, and
 * which inputs have gradients (a bit per input; autodiff's VJP rule: the
 * backward op of the primitive computes exactly those). */
#define ROW_EMBEDDING \
    {"table", "ids"}, 0, {{0}}, \
    "embedding(table[V, D], ids i32[S...]) -> [S..., D]", \
    .grad_inputs = 0x1 /* table; ids are integers */
#define ROW_LINEAR \
    {"x", "w", "b"}, 0, {{0}}, \
    "linear(x[S..., I], w[I, O], b[O]?) -> [S..., O]", \
    .grad_inputs = 0x7 /* x, w, b */
#define ROW_MATMUL \
    {"a", "b"}, 2, \
    {{"transpose_a", PA_FLAG, IA_MATMUL_TRANSPOSE_A, false, false, 0, NULL}, \
     {"transpose_b", PA_FLAG, IA_MATMUL_TRANSPOSE_B, false, false, 0, NULL}}, \
    "matmul(a[S..., M, K], b[K, N]; transpose_a, transpose_b) -> [S..., M, N]", \
    .grad_inputs = 0x3 /* a, b */
#define ROW_ADD \
    {"a", "b"}, 0, {{0}}, \
    "add(a[S], b[S']) with S' a suffix of S (or S of S') -> the larger shape", \
    .grad_inputs = 0x3
#define ROW_MUL \
    {"a", "b"}, 0, {{0}}, \
    "mul(a[S], b[S']) with S' a suffix of S (or S of S') -> the larger shape", \
    .grad_inputs = 0x3
#define ROW_LAYERNORM \
    {"x", "g", "b"}, 1, \
    {{"eps", PA_FLOAT, FA_LAYERNORM_EPS, false, true, 1e-5, NULL}}, \
    "layernorm(x[S..., D], g[D]?, b[D]?; eps = 1e-5) -> [S..., D]", \
    .grad_inputs = 0x7 /* x, g, b */
#define ROW_RMSNORM \
    {"x", "g"}, 3, \
    {{"eps", PA_FLOAT, FA_RMSNORM_EPS, false, true, 1e-5, NULL}, \
     {"heads", PA_INT, IA_RMSNORM_HEADS, false, false, 1, NULL}, \
     {"offset", PA_FLOAT, FA_RMSNORM_OFFSET, false, false, 0, NULL}}, \
    "rmsnorm(x[S..., H*hd], g[hd]?; eps = 1e-5, heads = 1, offset = 0) -> [S..., H*hd], scaled by (offset + g)", \
    .grad_inputs = 0x3 /* x, g */
#define ROW_GELU \
    {"x"}, 0, {{0}}, \
    "gelu(x) -> same shape", \
    .grad_inputs = 0x1
#define ROW_SILU \
    {"x"}, 0, {{0}}, \
    "silu(x) -> same shape", \
    .grad_inputs = 0x1
#define ROW_ROPE \
    {"x"}, 13, \
    {{"heads", PA_INT, IA_ROPE_HEADS, true, true, 0, NULL}, \
     {"theta", PA_FLOAT, FA_ROPE_THETA, false, true, 10000.0, NULL}, \
     {"scaling", PA_WORD, IA_ROPE_SCALING, false, false, ROPE_NONE, rope_scalings}, \
     {"factor", PA_FLOAT, FA_ROPE_FACTOR, false, false, 1.0, NULL}, \
     {"low_freq_factor", PA_FLOAT, FA_ROPE_LOW_FREQ_FACTOR, false, false, 1.0, NULL}, \
     {"high_freq_factor", PA_FLOAT, FA_ROPE_HIGH_FREQ_FACTOR, false, false, 4.0, NULL}, \
     {"original_max_positions", PA_INT, IA_ROPE_ORIGINAL_MAX_POSITIONS, false, false, 8192, NULL}, \
     {"beta_fast", PA_FLOAT, FA_ROPE_BETA_FAST, false, false, 0, NULL}, \
     {"beta_slow", PA_FLOAT, FA_ROPE_BETA_SLOW, false, false, 0, NULL}, \
     {"rotary_dim", PA_INT, IA_ROPE_ROTARY_DIM, false, false, 0, NULL}, \
     {"attention_factor", PA_FLOAT, FA_ROPE_ATTENTION_FACTOR, false, false, 0, NULL}, \
     {"short_factor", PA_FLOATS, LA_ROPE_SHORT_FACTOR, false, false, 0, NULL}, \
     {"long_factor", PA_FLOATS, LA_ROPE_LONG_FACTOR, false, false, 0, NULL}}, \
    "rope(x[B, T, H*hd]; heads, theta = 10000, scaling = \"none\" | \"linear\" | \"llama3\" | \"yarn\" | \"longrope\", " \
    "factor = 1, low_freq_factor = 1, high_freq_factor = 4, original_max_positions = 8192, beta_fast = 0 (32), " \
    "beta_slow = 0 (1), rotary_dim = 0 (hd), attention_factor = 0 (1), short_factor = [...], long_factor = [...]) " \
    "-> [B, T, H*hd]", \
    .grad_inputs = 0x1
#define ROW_ATTENTION \
    {"q", "k", "v"}, 5, \
    {{"heads", PA_INT, IA_ATTENTION_HEADS, true, true, 0, NULL}, \
     {"kv_heads", PA_INT, IA_ATTENTION_KV_HEADS, false, true, 0, NULL}, \
     {"window", PA_INT, IA_ATTENTION_WINDOW, false, false, 0, NULL}, \
     {"scale", PA_FLOAT, FA_ATTENTION_SCALE, false, false, 0, NULL}, \
     {"softcap", PA_FLOAT, FA_ATTENTION_SOFTCAP, false, false, 0, NULL}}, \
    "attention(q[B, T, H*hd], k[B, T, KV*hd], v[B, T, KV*hd]; heads, kv_heads = heads, window = 0, scale = 1/sqrt(hd), " \
    "softcap = none) -> [B, T, H*hd]", \
    .grad_inputs = 0x7 /* q, k, v */
#define ROW_SPLIT \
    {"x"}, 1, \
    {{"n", PA_SIZES, IA_SPLIT_N, true, true, 0, NULL}}, \
    "split(x[S..., N], n | [s0, s1, ...]) -> a tuple of pieces of the last dimension", \
    .grad_inputs = 0x1
#define ROW_CROSS_ENTROPY \
    {"logits", "targets"}, 0, {{0}}, \
    "cross_entropy(logits[S..., V], targets i32[S...]) -> f32 scalar", \
    .grad_inputs = 0x1 /* logits; targets are integers */
#define ROW_ARANGE \
    {NULL}, 1, \
    {{"n", PA_INT, IA_ARANGE_N, true, true, 0, NULL}}, \
    "arange(n) -> i32[n]", \
    .grad_inputs = 0x0

#define ROW_SCALE \
    {"x"}, 1, \
    {{"by", PA_FLOAT, FA_SCALE_BY, true, true, 0, NULL}}, \
    "scale(x, by) -> x * by, the same shape (by a finite number)", \
    .grad_inputs = 0x1
#define ROW_SOFTCAP \
    {"x"}, 1, \
    {{"cap", PA_FLOAT, FA_SOFTCAP_CAP, true, true, 0, NULL}}, \
    "softcap(x, cap) -> cap * tanh(x / cap), the same shape (cap a positive number)", \
    .grad_inputs = 0x1

#define ROW_LINEAR_CROSS_ENTROPY \
    {"x", "w", "targets"}, 2, \
    {{"transpose_b", PA_FLAG, IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B, false, false, 0, NULL}, \
     {"chunk", PA_INT, IA_LINEAR_CROSS_ENTROPY_CHUNK, false, false, 0, NULL}}, \
    "linear_cross_entropy(x[S..., D], w[D, V] (or [V, D] with transpose_b), targets i32[S...]; transpose_b, " \
    "chunk = 0) -> f32 scalar", \
    .grad_inputs = 0x3 /* x, w; targets are integers */

#define ROW_MOE_TOPK \
    {"logits"}, 1, \
    {{"k", PA_INT, IA_MOE_TOPK_K, true, true, 0, NULL}}, \
    "moe_topk(logits[S..., E], k) -> i32[S..., k], the k experts of largest logit, largest first", \
    .grad_inputs = 0x0 /* an integer choice */
#define ROW_MOE_GATE \
    {"logits", "idx"}, 1, \
    {{"normalize", PA_FLAG, IA_MOE_GATE_NORMALIZE, false, false, 0, NULL}}, \
    "moe_gate(logits[S..., E], idx i32[S..., k]; normalize) -> [S..., k], softmax(logits) at idx (over their sum)", \
    .grad_inputs = 0x1 /* logits */
#define ROW_MOE_EXPERT \
    {"x", "idx", "w"}, 0, {{0}}, \
    "moe_expert(x[S..., I] or [S..., k, I], idx i32[S..., k], w[E, O, I]) -> [S..., k, O], row j: w[idx[j]] x", \
    .grad_inputs = 0x5 /* x, w */
#define ROW_MOE_COMBINE \
    {"o", "weights"}, 0, {{0}}, \
    "moe_combine(o[S..., k, D], weights[S..., k]) -> [S..., D], the weighted sum over k", \
    .grad_inputs = 0x3 /* o, weights */
#define ROW_MOE_LOAD \
    {"logits", "idx", "acc"}, 1, \
    {{"experts", PA_INT, IA_MOE_LOAD_EXPERTS, true, false, 0, NULL}}, \
    "moe_load(logits[S..., E]?, idx i32[S..., k]?, acc f32[2, E]?; experts = E) -> f32[2, E]: acc + (tokens routed to " \
    "each expert, summed router probabilities)", \
    .grad_inputs = 0x5 /* logits, acc */
#define ROW_MOE_BALANCE \
    {"load"}, 1, \
    {{"scale", PA_FLOAT, FA_MOE_BALANCE_SCALE, true, true, 0, NULL}}, \
    "moe_balance(load f32[2, E], scale) -> f32 scalar, scale * sum(load[0] * load[1])", \
    .grad_inputs = 0x1
#define ROW_MOE_SHARED_GATE \
    {"y", "logit"}, 0, {{0}}, \
    "moe_shared_gate(y[S..., D], logit[S..., 1]) -> [S..., D], sigmoid(logit) * y", \
    .grad_inputs = 0x3

#define ROW_GATED_MLP \
    {"x", "g", "w_gate", "w_up", "w_down", "a_gate", "b_gate", "a_up", "b_up", "a_down", "b_down"}, 8, \
    {{"act", PA_WORD, IA_GATED_MLP_ACT, false, false, GATED_MLP_SILU, gmlp_acts}, \
     {"rows", PA_INT, IA_GATED_MLP_ROWS, false, false, 0, NULL}, \
     {"frozen", PA_INT, IA_GATED_MLP_FROZEN, false, false, 0, NULL}, \
     {"eps", PA_FLOAT, FA_GATED_MLP_EPS, false, true, 1e-5, NULL}, \
     {"offset", PA_FLOAT, FA_GATED_MLP_OFFSET, false, false, 0, NULL}, \
     {"lora_gate", PA_FLOAT, FA_GATED_MLP_LORA_GATE, false, false, 1, NULL}, \
     {"lora_up", PA_FLOAT, FA_GATED_MLP_LORA_UP, false, false, 1, NULL}, \
     {"lora_down", PA_FLOAT, FA_GATED_MLP_LORA_DOWN, false, false, 1, NULL}}, \
    "gated_mlp(x[S..., D], g[D], w_gate[D, I], w_up[D, I], w_down[I, D] (, a_gate[D, r], b_gate[r, I], a_up, b_up, " \
    "a_down[I, r], b_down[r, D]); act = \"silu\" | \"gelu\", rows = 0, frozen = 0, eps = 1e-5, offset = 0, lora_gate = 1, " \
    "lora_up = 1, lora_down = 1) -> [S..., D]: linear(act(gate) * up, w_down) (+ its adapter), gate = linear(n, w_gate) " \
    "+ lora_gate * linear(linear(n, a_gate), b_gate) and up alike, n = rmsnorm(x, g)", \
    .grad_inputs = 0x7ff /* every input */

/* Every slot prim.def names is one an op has. */
#define PRIM(id, name, nin_min, nin_max, nout, family)
#define PRIM_IATTR(id, NAME, slot, name) _Static_assert(slot >= 0 && slot < PLAN_MAX_IATTR, #id " " name ": no such iattr slot");
#define PRIM_FATTR(id, NAME, slot, name) _Static_assert(slot >= 0 && slot < PLAN_MAX_FATTR, #id " " name ": no such fattr slot");
#include "prim.def"
#undef PRIM
#undef PRIM_IATTR
#undef PRIM_FATTR

/* The table: prim.def's identity, the row above, the family's shape rule. */
static const PrimInfo prim_table[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) \
    [PRIM_##id] = {PRIM_##id, name, nin_min, nin_max, nout, ROW_##id, .rule = rule_##family},
#include "prim.def"
#undef PRIM
};

const PrimInfo *prim_info(PrimId id) {
    if ((int)id < 0 || id >= PRIM_COUNT) return NULL;
    return &prim_table[id];
}

const PrimInfo *prim_lookup(const char *name) {
    for (int i = 0; i < PRIM_COUNT; i++)
        if (strcmp(prim_table[i].name, name) == 0) return &prim_table[i];
    return NULL;
}

const PrimAttr *prim_attr(const PrimInfo *p, const char *name) {
    for (int i = 0; i < p->nattr; i++)
        if (strcmp(p->attrs[i].name, name) == 0) return &p->attrs[i];
    return NULL;
}

bool prim_infer(const PrimCall *c, PrimShape *out, int *nout, PrimError *err) {
    const PrimInfo *p = prim_info(c->prim);
    err->msg[0] = 0;
    err->blame = 0;
    *nout = 0;
    if (!p) return fail(err, 0, "unknown primitive %d", (int)c->prim);
    if (c->nin < p->nin_min || c->nin > p->nin_max)
        return fail(err, 0, "%s takes %d to %d tensor inputs, got %d", p->name, p->nin_min, p->nin_max, c->nin);
    for (int i = 0; i < p->nattr; i++)
        if (p->attrs[i].required && !c->attr_set[i] && !(p->attrs[i].kind == PA_SIZES && c->nsizes))
            return fail(err, 0, "%s: missing attribute '%s'", p->name, p->attrs[i].name);
    for (int i = 0; i < c->nin; i++)
        if (c->in[i].rank < 0 || c->in[i].rank > GRAPH_MAX_RANK) return fail(err, 1u << i, "%s: bad rank", p->name);
    bool ok;
    *nout = 1;
    ok = p->rule(c, p, out, nout, err);
    if (!ok) *nout = 0;
    return ok;
}
