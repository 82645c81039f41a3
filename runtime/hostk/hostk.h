/* hostk: the host kernels, the numerical reference of the project.
 *
 * One forward and one backward kernel per primitive of runtime/plan/prim.def
 * (semantics: docs/primitives.md; this module: docs/host-kernels.md), plus
 * the plain fp32 optimizer helpers of the reference executor.
 *
 * Conventions, uniform over every kernel:
 * - A tensor is an HkTensor: row-major, contiguous, dtype f32, bf16 or f16
 *   for values and i32 for ids/targets. Kernels read every value into fp32,
 *   compute in fp32 (long reductions of the non-GEMM kernels accumulate in
 *   double) and round once into the output's dtype. GEMMs go through
 *   cblas_sgemm; operands that are not f32 are converted into the workspace.
 * - Forward kernels OVERWRITE their outputs.
 * - Backward kernels ACCUMULATE (+=) into their gradient outputs, which the
 *   caller zeroes first (the plan's convention, OP_BWD in runtime/plan/vocab.h).
 *   A gradient argument that is NULL (or whose data is NULL) is not wanted
 *   and not computed.
 * - No kernel allocates. A kernel that needs scratch takes `ws`, of at least
 *   the bytes its hk_*_workspace_bytes() returns (64-byte aligned is best;
 *   malloc's alignment is enough). One workspace serves a primitive's forward
 *   and its backward: what the forward saves for the backward (layernorm
 *   mean/rstd, rmsnorm rstd, attention row logsumexp, cross-entropy row
 *   logsumexp) sits at the start of it, so a backward must be given the
 *   workspace its forward (or a recompute of it on the same inputs) filled.
 * - Every kernel returns HK_OK (0) or a negative HK_ERR_* (hk_strerror) and
 *   checks shapes, dtypes, attributes and indices before writing anything.
 *
 * Executors call the generic entries: hk_run_fwd / hk_run_bwd on HkTensors
 * with the op's attributes (the iattr/fattr conventions of compiler/graph.h's
 * GOp, which PlanOp carries), or hk_op_forward / hk_op_backward directly on
 * a plan op and one buffer per tensor.
 */
#ifndef ZINF_HOSTK_H
#define ZINF_HOSTK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "plan.h"
#include "vocab.h"

enum { HK_MAX_RANK = 6 };

typedef struct HkTensor {
    void *data;
    DType dtype;
    int rank;                 /* 0 = scalar */
    int64_t dims[HK_MAX_RANK];
} HkTensor;

enum {
    HK_OK = 0,
    HK_ERR_ARG = -1,       /* a required tensor is missing (NULL data) or a count is wrong */
    HK_ERR_DTYPE = -2,     /* a dtype the kernel does not take there */
    HK_ERR_SHAPE = -3,     /* shapes do not agree */
    HK_ERR_ATTR = -4,      /* an attribute out of range (heads, eps, pieces, n) */
    HK_ERR_INDEX = -5,     /* an embedding id or a cross-entropy target outside [0, V) */
    HK_ERR_WORKSPACE = -6, /* workspace missing or smaller than declared */
    HK_ERR_PRIM = -7,      /* not a primitive / op kind these entries run */
};
const char *hk_strerror(int rc);

/* Tensor helpers. */
HkTensor hk_tensor(void *data, DType dt, int rank, const int64_t *dims);
int64_t hk_numel(const HkTensor *t);
size_t hk_dtype_size(DType dt); /* 0 for DT_NONE */
float hk_get(const HkTensor *t, int64_t i);          /* element i as fp32 (i32 converted) */
void hk_set(HkTensor *t, int64_t i, float v);         /* rounded to the dtype */

/* ---- Primitives: forward and backward. Shapes as in docs/primitives.md. ---- */

/* embedding: table [V,D], ids i32 [S...] -> y [S...,D]. */
int hk_embedding_fwd(const HkTensor *table, const HkTensor *ids, HkTensor *y);
int hk_embedding_bwd(const HkTensor *ids, const HkTensor *dy, HkTensor *dtable);

/* linear: x [S...,I], w [I,O], b [O] (nullable) -> y [S...,O]. */
size_t hk_linear_workspace_bytes(const HkTensor *x, const HkTensor *w, const HkTensor *y);
int hk_linear_fwd(const HkTensor *x, const HkTensor *w, const HkTensor *b, HkTensor *y, void *ws);
int hk_linear_bwd(const HkTensor *x, const HkTensor *w, const HkTensor *dy, HkTensor *dx, HkTensor *dw,
                  HkTensor *db, void *ws);

/* matmul: a [S...,M,K] (or [S...,K] without transpose_a), b [K,N] (or [N,K] with
 * transpose_b), or b batched with a's leading dims [S...,K,N] -> y [S...,M,N]. */
size_t hk_matmul_workspace_bytes(const HkTensor *a, const HkTensor *b, const HkTensor *y);
int hk_matmul_fwd(const HkTensor *a, const HkTensor *b, HkTensor *y, bool ta, bool tb, void *ws);
int hk_matmul_bwd(const HkTensor *a, const HkTensor *b, const HkTensor *dy, HkTensor *da, HkTensor *db, bool ta,
                  bool tb, void *ws);

/* add, mul: one operand's shape a suffix of the other's; y has the larger. */
int hk_add_fwd(const HkTensor *a, const HkTensor *b, HkTensor *y);
int hk_add_bwd(const HkTensor *a, const HkTensor *b, const HkTensor *dy, HkTensor *da, HkTensor *db);
int hk_mul_fwd(const HkTensor *a, const HkTensor *b, HkTensor *y);
int hk_mul_bwd(const HkTensor *a, const HkTensor *b, const HkTensor *dy, HkTensor *da, HkTensor *db);

/* layernorm: x [S...,D], g, b [D] (nullable: 1 and 0). Workspace: mean, rstd per row. */
size_t hk_layernorm_workspace_bytes(const HkTensor *x);
int hk_layernorm_fwd(const HkTensor *x, const HkTensor *g, const HkTensor *b, HkTensor *y, double eps, void *ws);
int hk_layernorm_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *dy, HkTensor *dx, HkTensor *dg,
                     HkTensor *db, void *ws);

/* rmsnorm: x [S...,D], g [D] (nullable). Workspace: rstd per row. Per head
 * (the primitive's heads = H): the same kernels on hk_heads_view(x, H), x
 * seen as [rows*H, D/H], with g [D/H]. */
HkTensor hk_heads_view(const HkTensor *x, int64_t heads);
size_t hk_rmsnorm_workspace_bytes(const HkTensor *x);
int hk_rmsnorm_fwd(const HkTensor *x, const HkTensor *g, HkTensor *y, double eps, void *ws);
int hk_rmsnorm_bwd(const HkTensor *x, const HkTensor *g, const HkTensor *dy, HkTensor *dx, HkTensor *dg, void *ws);

/* gelu (tanh approximation), silu: elementwise, any shape. */
int hk_gelu_fwd(const HkTensor *x, HkTensor *y);
int hk_gelu_bwd(const HkTensor *x, const HkTensor *dy, HkTensor *dx);
int hk_silu_fwd(const HkTensor *x, HkTensor *y);
int hk_silu_bwd(const HkTensor *x, const HkTensor *dy, HkTensor *dx);
/* scale: y = by * x; backward dx += by * dy (LoRA's alpha / rank). */
int hk_scale_fwd(const HkTensor *x, HkTensor *y, double by);
int hk_scale_bwd(const HkTensor *dy, HkTensor *dx, double by);
/* softcap: y = cap tanh(x / cap) (cap > 0); the backward adds dy (1 - tanh^2(x / cap)) to dx. */
int hk_softcap_fwd(const HkTensor *x, HkTensor *y, double cap);
int hk_softcap_bwd(const HkTensor *x, const HkTensor *dy, HkTensor *dx, double cap);

/* rope: x [B,T,H*hd], hd even, rotate-half; theta > 0; the frequencies
 * scaled as `scaling` (RopeScaling of vocab.h) says. */
typedef struct HkRope {
    int64_t heads;
    double theta;
    int scaling;               /* ROPE_NONE, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN */
    double factor, low_freq_factor, high_freq_factor;
    double original_max;       /* llama3, yarn: the context length the model was trained at */
    double beta_fast, beta_slow; /* yarn: the ramp's ends in rotations per original_max (0: 32 and 1) */
    int64_t rotary_dim;        /* the first rotary_dim of each head turn (rotate-half over them, the
                                  frequencies of a head of rotary_dim); the rest pass through. 0: hd */
    double attention_factor;   /* cos and sin multiplied by it (transformers' attention_scaling); 0: 1 */
    /* longrope: pair j's frequency divided by short_factor[j] while the sequence (the last position
     * + 1) is at most original_max, by long_factor[j] beyond; rotary_dim / 2 each */
    const double *short_factor, *long_factor;
} HkRope;
/* From an op's attributes (PlanOp conventions; fattr[FA_ROPE_THETA] == 0: theta 10000) and its
 * list attributes (PlanOp.table: longrope's short_factor, long_factor; NULL, 0: none). */
HkRope hk_rope_attrs(const int64_t *iattr, const double *fattr, const double *table, int64_t ntable);
/* The rotation frequency of pair j of a head of hd (the rotated columns), scaling applied; seq:
 * the sequence's length (longrope's choice of table). */
double hk_rope_freq(const HkRope *r, int64_t j, int64_t hd, int64_t seq);
int hk_rope_fwd(const HkTensor *x, HkTensor *y, const HkRope *r);
/* The same with x's position t at pos0 + t (a KV-cache decode step, whose
 * one row is position pos0 of the text). */
int hk_rope_fwd_at(const HkTensor *x, HkTensor *y, const HkRope *r, int64_t pos0);
/* The same with longrope's table chosen by a text of seq positions (at least pos0 + T): a decode
 * step that turns its cache again by the long factors. */
int hk_rope_fwd_seq(const HkTensor *x, HkTensor *y, const HkRope *r, int64_t pos0, int64_t seq);
int hk_rope_bwd(const HkTensor *dy, HkTensor *dx, const HkRope *r);
/* Packed rows: position t of row b at t - seg[b*T + t], its sample's own
 * position (seg as for hk_attention_fwd_packed). */
int hk_rope_fwd_packed(const HkTensor *x, HkTensor *y, const HkRope *r, const int32_t *seg);
int hk_rope_bwd_packed(const HkTensor *dy, HkTensor *dx, const HkRope *r, const int32_t *seg);

/* attention: causal, q [B,T,H*hd], k, v [B,T,KV*hd] -> y [B,T,H*hd].
 * Workspace: row logsumexp [B,H,T] (saved by forward), then two T x T and
 * eight T x hd fp32 blocks of scratch. */
size_t hk_attention_workspace_bytes(const HkTensor *q, int64_t heads);
int hk_attention_fwd(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                     int64_t kv_heads, void *ws);
int hk_attention_bwd(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                     HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, void *ws);
/* The same with the primitive's scale (0: 1/sqrt(hd)) and softcap (0: none;
 * else scores s = scale q.k become softcap tanh(s / softcap) before the
 * softmax, Gemma 2's attention-logit soft-capping). */
int hk_attention_fwd_capped(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                            int64_t kv_heads, double scale, double softcap, void *ws);
int hk_attention_bwd_capped(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                            HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, double scale, double softcap,
                            void *ws);

/* Packed rows (several samples in a row, runtime/data/tokens.h): seg
 * [B*T], seg[b*T + t] the position of row b where the sample holding t
 * begins (0 <= seg <= t; a position's start is its own or the one before
 * it's). Each sample attends only to itself, as if run alone. Same
 * workspace; -1 (HK_ERR_ARG) for a seg that is no such layout. */
int hk_attention_fwd_packed(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                            int64_t kv_heads, const int32_t *seg, void *ws);
int hk_attention_bwd_packed(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                            HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, const int32_t *seg, void *ws);

/* Sliding-window attention (the attention primitive's window): query t sees
 * the keys [max(start(t), t - window + 1), t], start(t) its sample's first
 * position (seg, as above; NULL: 0); window 0 is no window (the functions
 * above). Same workspace; only the key tiles within the window are
 * computed. */
int hk_attention_fwd_window(const HkTensor *q, const HkTensor *k, const HkTensor *v, HkTensor *y, int64_t heads,
                            int64_t kv_heads, int64_t window, const int32_t *seg, void *ws);
int hk_attention_bwd_window(const HkTensor *q, const HkTensor *k, const HkTensor *v, const HkTensor *dy, HkTensor *dq,
                            HkTensor *dk, HkTensor *dv, int64_t heads, int64_t kv_heads, int64_t window, const int32_t *seg,
                            void *ws);

/* split: x [S...,N] -> n pieces [S...,n_i] (sizes: the pieces' last dims, summing to N). */
int hk_split_fwd(const HkTensor *x, HkTensor *pieces, int n);
int hk_split_bwd(const HkTensor *dpieces, int n, HkTensor *dx); /* a piece with NULL data contributes 0 */

/* cross_entropy: logits [S...,V], targets i32 [S...] -> loss (one element, f32):
 * the sum over positions of lse - logit[target], divided by the number of
 * positions. A negative target (TOK_UNTRAINED) is an untrained position:
 * it adds no loss and gets no gradient, but still counts in the divisor,
 * so that the runtime can scale every micro-batch to the mean over the
 * trained targets of the whole global batch (exec.h, rt_step_trained).
 * Workspace: row logsumexp. */
size_t hk_cross_entropy_workspace_bytes(const HkTensor *logits);
int hk_cross_entropy_fwd(const HkTensor *logits, const HkTensor *targets, HkTensor *loss, void *ws);
int hk_cross_entropy_bwd(const HkTensor *logits, const HkTensor *targets, const HkTensor *dloss,
                         HkTensor *dlogits, void *ws);

/* linear_cross_entropy: x [S...,D], w [D,V] (or [V,D] with tb), targets
 * i32 [S...] -> loss (one element, f32) = cross_entropy(matmul(x, w; tb),
 * targets), with cross_entropy's untrained targets and divisor, computed
 * `chunk` rows at a time (0: all at once) so that only [chunk, V] logits
 * exist at once (hostk_linxent.c). The forward also computes dx and dw
 * for dloss = 1 into the workspace; the backward adds them scaled by
 * dloss (so it needs the workspace of the forward on the same inputs).
 * Workspace: the row logsumexps [R], those gradients in fp32 ([R, D] and
 * w's shape), then one chunk's scratch and an fp32 copy of w unless f32. */
size_t hk_linear_cross_entropy_workspace_bytes(const HkTensor *x, const HkTensor *w, const HkTensor *targets,
                                               int64_t chunk, bool tb);
int hk_linear_cross_entropy_fwd(const HkTensor *x, const HkTensor *w, const HkTensor *targets, HkTensor *loss,
                                int64_t chunk, bool tb, void *ws);
int hk_linear_cross_entropy_bwd(const HkTensor *x, const HkTensor *w, const HkTensor *targets, const HkTensor *dloss,
                                HkTensor *dx, HkTensor *dw, int64_t chunk, bool tb, void *ws);

/* gated_mlp: in = x [S...,D], g [D], w_gate, w_up [D,I], w_down [I,D]
 * and, with 11 inputs, LoRA adapters a_gate [D,r], b_gate [r,I], a_up,
 * b_up, a_down [I,r], b_down [r,D] (an absent pair: NULL) -> y [S...,D] =
 * down(act(gate(n)) * up(n)), n = rmsnorm(x, g) (gain offset + g), each
 * projection linear(v, w) + lora * linear(linear(v, a), b) (its adapter's
 * term where it has one), act silu or gelu (GatedMlpAct), computed `rows`
 * rows at a time (0: all at once) so that only [rows, I] intermediates
 * exist (hostk_gmlp.c). The backward recomputes each tile (nothing is
 * kept from the forward); din[i] is in[i]'s gradient (NULL: not wanted),
 * and an input whose bit is set in `frozen` gets none. Workspace: one
 * tile's intermediates and their gradients (the adapters' too), the
 * norm's and the largest linear's workspace of a tile, fp32 accumulators
 * of the wanted parameters' gradients that are not f32. */
typedef struct HkGatedMlp {
    int64_t act, rows, frozen;
    double eps, offset, lora[3]; /* lora: the adapters' scales (gate, up, down) */
} HkGatedMlp;
size_t hk_gated_mlp_workspace_bytes(const HkTensor *const *in, const HkTensor *y, const HkGatedMlp *at);
int hk_gated_mlp_fwd(const HkTensor *const *in, int nin, HkTensor *y, const HkGatedMlp *at, void *ws);
int hk_gated_mlp_bwd(const HkTensor *const *in, int nin, const HkTensor *dy, HkTensor *const *din, const HkGatedMlp *at, void *ws);

/* arange: y i32 [n] = 0..n-1 (no backward). */
int hk_arange_fwd(HkTensor *y, int64_t n);

/* ---- Generic entries (what the executors call). ----
 * in[0, nin): the op's tensor inputs (data NULL or index >= nin: an absent
 * optional input); out[0, nout): its outputs. iattr/fattr as PlanOp (plan.h);
 * an eps or theta of 0 (fattr[FA_LAYERNORM_EPS], fattr[FA_ROPE_THETA]) means
 * the default (1e-5, 10000), iattr[IA_ATTENTION_KV_HEADS] == 0 that kv_heads
 * = heads. Backward: dout[j] is the gradient of
 * out[j]; din[i] the gradient of in[i] (data NULL: not wanted). */
size_t hk_workspace_bytes(PrimId p, const HkTensor *in, int nin, const HkTensor *out, int nout,
                          const int64_t *iattr);
int hk_run_fwd(PrimId p, const HkTensor *in, int nin, HkTensor *out, int nout, const int64_t *iattr,
               const double *fattr, void *ws, size_t ws_bytes);
int hk_run_bwd(PrimId p, const HkTensor *in, int nin, const HkTensor *out, const HkTensor *dout, int nout,
               HkTensor *din, const int64_t *iattr, const double *fattr, void *ws, size_t ws_bytes);

/* On a plan's ops and tensors: buf[t] is tensor t's storage.
 * hk_op_workspace_bytes takes a forward op's index; forward takes an
 * OP_FWD or OP_RECOMPUTE op and backward an OP_BWD op (operand layout in
 * docs/autodiff.md), each with the workspace of the forward op. */
HkTensor hk_plan_tensor(const Plan *p, int t, void *const *buf);
size_t hk_op_workspace_bytes(const Plan *p, int fwd_op);
int hk_op_forward(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes);
int hk_op_backward(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes);
/* The same on a micro-batch of packed rows: seg as for
 * hk_attention_fwd_packed, [B*T] of the batch's tokens (NULL: a row is
 * one sample), read by attention and rope, and by add and mul of a tensor
 * broadcast over the batch ([T, ...] against [B, T, ...]: a learned
 * position embedding), which read it at each token's position in its
 * sample (hostk_packed.c); other ops ignore it. */
int hk_op_forward_packed(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes, const int32_t *seg);
int hk_op_backward_packed(const Plan *p, const PlanOp *o, void *const *buf, void *ws, size_t ws_bytes,
                          const int32_t *seg);

/* ---- Optimizer-side helpers (plain fp32 reference). ---- */
typedef struct HkAdam {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;        /* 1-based step, for the bias corrections */
    double grad_scale;   /* the gradient is multiplied by this first (clip / loss scale) */
} HkAdam;
/* AdamW on one tensor: g = grad * grad_scale; m = b1 m + (1-b1) g;
 * v = b2 v + (1-b2) g^2; w -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd w).
 * w is `master` (fp32, numel of param) when given, then rounded into param;
 * else param itself, which must then be f32. m, v: fp32, numel of param. */
int hk_adamw(HkTensor *param, const HkTensor *grad, float *master, float *m, float *v, const HkAdam *a);
double hk_sum_squares(const HkTensor *t);  /* in double */
bool hk_all_finite(const HkTensor *t);
int hk_scale(HkTensor *t, double s);       /* t *= s */
int hk_cast(const HkTensor *src, HkTensor *dst); /* same numel, any dtypes */
void hk_zero(HkTensor *t);

/* ---- Mixture of experts (hostk_moe.c; docs/primitives.md). R rows (the
 * leading dims), E experts, k of them a row. Backward kernels add into the
 * gradients they are given (NULL or no data: not wanted). ---- */
/* moe_topk: logits [R, E] -> idx i32 [R, k], the k largest, largest first (ties: the lower expert). */
int hk_moe_topk_fwd(const HkTensor *logits, HkTensor *idx);
/* moe_gate: y [R, k] = softmax(logits)[idx], over their sum when normalize. Workspace: per-unit rows. */
size_t hk_moe_gate_workspace_bytes(const HkTensor *logits, const HkTensor *idx);
int hk_moe_gate_fwd(const HkTensor *logits, const HkTensor *idx, HkTensor *y, bool normalize, void *ws);
int hk_moe_gate_bwd(const HkTensor *logits, const HkTensor *idx, const HkTensor *dy, HkTensor *dlogits,
                    bool normalize, void *ws);
/* moe_expert: x [R, I] (a row shared by its k slots) or [R, k, I], w [E, O, I] -> y [R, k, O],
 * y[r, j] = w[idx[r, j]] x[r (, j)]; grouped by expert (the file's header). */
size_t hk_moe_expert_workspace_bytes(const HkTensor *x, const HkTensor *idx, const HkTensor *w, const HkTensor *y);
int hk_moe_expert_fwd(const HkTensor *x, const HkTensor *idx, const HkTensor *w, HkTensor *y, void *ws);
int hk_moe_expert_bwd(const HkTensor *x, const HkTensor *idx, const HkTensor *w, const HkTensor *dy, HkTensor *dx,
                      HkTensor *dw, void *ws);
/* moe_expert tiled by expert: w holds experts [e0, e0 + E) of `all` (idx ranges over all of
 * them). The forward writes the (row, slot) places routed to those experts and leaves the
 * others; the backward adds their share of dx and their dw (w's shape). The tiles run in
 * order add dx's terms in the untiled kernel's order. Workspace: the untiled one's bound. */
int hk_moe_expert_fwd_tile(const HkTensor *x, const HkTensor *idx, const HkTensor *w, int64_t e0, int64_t all, HkTensor *y,
                           void *ws);
int hk_moe_expert_bwd_tile(const HkTensor *x, const HkTensor *idx, const HkTensor *w, int64_t e0, int64_t all,
                           const HkTensor *dy, HkTensor *dx, HkTensor *dw, void *ws);
/* moe_combine: o [R, k, D], weights [R, k] -> y [R, D] = sum_j weights[r, j] o[r, j]. */
int hk_moe_combine_fwd(const HkTensor *o, const HkTensor *wt, HkTensor *y);
int hk_moe_combine_bwd(const HkTensor *o, const HkTensor *wt, const HkTensor *dy, HkTensor *dout, HkTensor *dwt);
/* moe_load: y f32 [2, E] = acc (or 0) + (tokens routed to each expert; summed softmax(logits));
 * logits and idx NULL: zeros. */
size_t hk_moe_load_workspace_bytes(const HkTensor *logits);
int hk_moe_load_fwd(const HkTensor *logits, const HkTensor *idx, const HkTensor *acc, HkTensor *y, void *ws);
int hk_moe_load_bwd(const HkTensor *logits, const HkTensor *dy, HkTensor *dlogits, HkTensor *dacc, void *ws);
/* moe_balance: y f32 scalar = scale * sum_e load[0, e] load[1, e]; the gradient reaches load[1] only. */
int hk_moe_balance_fwd(const HkTensor *load, HkTensor *y, double scale);
int hk_moe_balance_bwd(const HkTensor *load, const HkTensor *dy, HkTensor *dload, double scale);
/* moe_shared_gate: out [R, D] = sigmoid(logit [R, 1]) y (Qwen2-MoE's gated shared expert). */
int hk_moe_shared_gate_fwd(const HkTensor *y, const HkTensor *logit, HkTensor *out);
int hk_moe_shared_gate_bwd(const HkTensor *y, const HkTensor *logit, const HkTensor *dout, HkTensor *dy, HkTensor *dlogit);

#endif
