/* cuda_gen_attention: the launches of causal attention (grouped kv heads)
 * on stdlib/kernels/attention.cu: the flash forward, and the backward as a
 * recompute of each query row's log-sum-exp, delta = rowsum(dO * O), dq,
 * and dk/dv summed over each kv head's query heads. The scores' scale
 * (the attribute, else 1/sqrt(hd)), the sliding window (0: none) and the
 * soft-cap (0: none) are arguments, so they share the units of plain
 * attention. Every launch takes the micro-batch's sample starts last
 * (arg_seg: packed rows, NULL otherwise). */
#include <inttypes.h>
#include <math.h>
#include "cuda_gen_impl.h"

/* The largest head dim: the kernels pad it to a multiple of 32 inside the
 * block. Above 128 they keep 48 KiB of static shared memory (every arch's
 * limit without opt-in) with smaller tiles: 32 query rows per tensor-core
 * block and 16-key tiles; f32 one row per warp in the backward (2 in the
 * forward) and one [32][hd+1] tile at a time. */
#define ATTN_MAX_HD 256

/* An attention op's shape and unit specialisation. */
typedef struct Attn {
    int q, k, v;
    int64_t B, Tn, H, KV, hd;
    const char *spec, *defs;
    float scale;   /* the scores' scale: the attribute, or 1/sqrt(hd) */
    float softcap; /* > 0: scores s become softcap tanh(s / softcap) (Gemma 2) */
    int64_t window; /* > 0: query t sees keys [t - window + 1, t] (sliding window) */
    bool tca;     /* on the tensor cores: qbt query rows per block of qbt / 16 warps */
    int qbt;
    int qbf, qbb; /* query rows per block: forward, SIMT backward */
} Attn;

static bool attn_shape(GenCtx *c, Attn *t) {
    const GOp *o = c->o;
    t->q = o->in[0];
    t->k = o->in[1];
    t->v = o->in[2];
    const GTensor *Q = T_(c, t->q), *Kt = T_(c, t->k);
    int64_t H = o->iattr[IA_ATTENTION_HEADS], KV = o->iattr[IA_ATTENTION_KV_HEADS] > 0 ? o->iattr[IA_ATTENTION_KV_HEADS] : H;
    if (Q->rank != 3 || Kt->rank != 3 || H <= 0 || KV <= 0 || H % KV != 0 || Q->dims[2] % H != 0) {
        cg_fail(c, "attention needs q [B, T, H*hd], k and v [B, T, KV*hd], H a multiple of KV");
        return false;
    }
    int64_t B = Q->dims[0], Tn = Q->dims[1], hd = Q->dims[2] / H;
    if (Kt->dims[2] != KV * hd || Kt->dims[1] != Tn || Kt->dims[0] != B) {
        cg_fail(c, "attention: k is [%" PRId64 ", %" PRId64 ", %" PRId64 "], expected [%" PRId64 ", %" PRId64
                ", %" PRId64 "]",
             Kt->dims[0], Kt->dims[1], Kt->dims[2], B, Tn, KV * hd);
        return false;
    }
    if (hd > ATTN_MAX_HD) {
        cg_fail(c, "attention head dim %" PRId64 ": the CUDA kernels support head dims up to %d (their query, key and "
                   "value tiles must fit a block's 48 KiB of static shared memory)", hd, ATTN_MAX_HD);
        return false;
    }
    int64_t window = o->iattr[IA_ATTENTION_WINDOW];
    double scale = o->fattr[FA_ATTENTION_SCALE], softcap = o->fattr[FA_ATTENTION_SOFTCAP];
    if (window < 0 || !(scale >= 0) || !(softcap >= 0)) {
        cg_fail(c, "attention: window %" PRId64 ", scale %g and softcap %g must not be negative", window, scale, softcap);
        return false;
    }
    if (B > 65535 || H > 65535) {
        cg_fail(c, "attention: batch or heads exceed the grid limit (65535)");
        return false;
    }
    DType dt = Q->dtype;
    int64_t hdp = (hd + 31) / 32 * 32; /* padded inside the kernels */
    int rf = hdp <= 64 ? 8 : hdp <= 128 ? 4 : 2, rb = hdp <= 64 ? 4 : hdp <= 128 ? 2 : 1;
    t->B = B;
    t->Tn = Tn;
    t->H = H;
    t->KV = KV;
    t->hd = hd;
    t->tca = dt != DT_F32;
    t->spec = arena_printf(c->cg->arena, "%s hd=%" PRId64 " %s rows/warp=%d/%d", cuda_dtype_name(dt), hd,
                           t->tca ? "fwd=mma.sync" : "fwd=simt", rf, rb);
    t->defs = arena_printf(c->cg->arena, "ZK_T %s\nZK_DT %d\nZK_HD %" PRId64 "\nZK_RPW_FWD %d\nZK_RPW_BWD %d\nZK_TC_ATTN %d",
                           dtype_ctype(dt), dtype_code(dt), hd, rf, rb, t->tca);
    if (hdp != hd) { /* unpadded units keep their defines */
        t->defs = arena_printf(c->cg->arena, "%s\nZK_HDP %" PRId64, t->defs, hdp);
        t->spec = arena_printf(c->cg->arena, "%s padded=%" PRId64, t->spec, hdp);
    }
    t->scale = (float)(scale > 0 ? scale : 1.0 / sqrt((double)hd));
    t->softcap = (float)softcap;
    t->window = window >= Tn ? 0 : window; /* a window of T or more is no window */
    t->qbt = hdp <= 128 ? 64 : 32;
    t->qbf = t->tca ? t->qbt : 4 * rf;
    t->qbb = 4 * rb;
    return true;
}

/* zk_attn_fwd writing the output `out` (>= 0) or, for the backward, each
 * query row's log-sum-exp into the workspace at `lse` (>= 0). */
static void attn_fwd(GenCtx *c, const Attn *t, int out, int64_t lse, const char *role) {
    CudaKernel *k = cg_kbegin(c, "attention", t->spec, t->defs, "zk_attn_fwd", role);
    k->grid[0] = cg_gdim(c, ((t->Tn + t->qbf - 1) / t->qbf), 0x7fffffff);
    k->grid[1] = cg_gdim(c, t->H, 65535);
    k->grid[2] = cg_gdim(c, t->B, 65535);
    k->block[0] = t->tca ? 2 * t->qbt : 128;
    arg_t(k, out);
    if (lse >= 0) arg_ws(k, lse);
    else arg_t(k, -1);
    arg_t(k, t->q);
    arg_t(k, t->k);
    arg_t(k, t->v);
    arg_i(k, out >= 0);
    arg_i(k, t->B);
    arg_i(k, t->Tn);
    arg_i(k, t->H);
    arg_i(k, t->KV);
    arg_f(k, t->scale);
    arg_i(k, t->window);
    arg_f(k, t->softcap);
    arg_seg(k); /* packed rows: each query sees its own sample's keys */
}

static void attn_bwd(GenCtx *c, const Attn *t) {
    const GOp *o = c->o;
    int out = o->in[o->nfin], dout = o->in[o->nfin + 1];
    int dq = o->out[0], dk = o->nout > 1 ? o->out[1] : -1, dv = o->nout > 2 ? o->out[2] : -1;
    int ts[8] = {t->q, t->k, t->v, out, dout, dq, dk, dv};
    if (!cg_same_dtype(c, T_(c, t->q)->dtype, ts, 8)) return;
    int64_t nst = t->B * t->H * t->Tn;
    int64_t lse = cg_ws_alloc(c, nst * 4), delta = cg_ws_alloc(c, nst * 4);
    attn_fwd(c, t, -1, lse, "recompute the log-sum-exp of each query row");
    CudaKernel *k = cg_kbegin(c, "attention", t->spec, t->defs, "zk_attn_bwd_pre", "delta = rowsum(dO * O)");
    k->grid[0] = cg_gdim(c, ((nst + 7) / 8), 0x7fffffff);
    k->block[0] = 256;
    arg_ws(k, delta);
    arg_t(k, out);
    arg_t(k, dout);
    arg_i(k, t->B);
    arg_i(k, t->Tn);
    arg_i(k, t->H);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0 && dq < 0) continue;
        if (pass == 1 && dk < 0 && dv < 0) continue;
        k = cg_kbegin(c, "attention", t->spec, t->defs, pass ? "zk_attn_bwd_dkdv" : "zk_attn_bwd_dq",
                      pass ? "dk, dv += (summed over the query heads of each kv head)" : "dq += ds k * scale");
        int rows_per_block = t->tca ? t->qbt : t->qbb; /* the tensor-core dq and dk/dv own qbt rows */
        k->grid[0] = cg_gdim(c, ((t->Tn + rows_per_block - 1) / rows_per_block), 0x7fffffff);
        k->grid[1] = cg_gdim(c, (pass ? t->KV : t->H), 65535);
        k->grid[2] = cg_gdim(c, t->B, 65535);
        k->block[0] = t->tca ? 2 * t->qbt : 128;
        if (pass) {
            arg_t(k, dk);
            arg_t(k, dv);
        } else {
            arg_t(k, dq);
        }
        arg_t(k, t->q);
        arg_t(k, t->k);
        arg_t(k, t->v);
        arg_t(k, dout);
        arg_ws(k, lse);
        arg_ws(k, delta);
        arg_i(k, t->B);
        arg_i(k, t->Tn);
        arg_i(k, t->H);
        arg_i(k, t->KV);
        arg_f(k, t->scale);
        arg_i(k, t->window);
        arg_f(k, t->softcap);
        arg_seg(k);
    }
}

void cg_gen_attention(GenCtx *c, bool bwd) {
    Attn t;
    if (!attn_shape(c, &t)) return;
    if (bwd) {
        attn_bwd(c, &t);
        return;
    }
    int ts[4] = {t.q, t.k, t.v, c->o->out[0]};
    if (!cg_same_dtype(c, T_(c, t.q)->dtype, ts, 4)) return;
    attn_fwd(c, &t, c->o->out[0], -1,
             t.window > 0 ? (t.softcap > 0 ? "o = windowed causal softmax(softcap(q k^T * scale)) v"
                                            : "o = windowed causal softmax(q k^T * scale) v")
                          : (t.softcap > 0 ? "o = causal softmax(softcap(q k^T * scale)) v"
                                           : "o = causal softmax(q k^T * scale) v"));
}
