/* cuda_gen_rope: the launch of rope (rotary position embedding, forward and
 * backward; linear, llama3, YaRN and longrope frequency scaling, partial
 * rotary, attention factor) on stdlib/kernels/rope.cu. */
#include <inttypes.h>
#include "cuda_gen_impl.h"
#include "nvrtc.h"

/* The unit of a longrope op: the dtype's, with its short_factor and
 * long_factor as constants (ZK_ROPE_SHORT, ZK_ROPE_LONG, npair numbers each,
 * printed to round-trip), named by a digest of the lists so that ops with the
 * same lists share it. */
static CudaKernel *longrope_unit(GenCtx *c, DType dt, int64_t npair, const char *role) {
    const GOp *o = c->o;
    Arena *a = c->cg->arena;
    const char *lists[2] = {"", ""};
    for (int l = 0; l < 2; l++)
        for (int64_t j = 0; j < npair; j++)
            lists[l] = arena_printf(a, "%s%s%.17g", lists[l], j ? ", " : "", o->table[l * npair + j]);
    const char *defs = arena_printf(a, "ZK_T %s\nZK_DT %d\nZK_ROPE_NPAIR %" PRId64 "\nZK_ROPE_SHORT %s\nZK_ROPE_LONG %s",
                                    dtype_ctype(dt), dtype_code(dt), npair, lists[0], lists[1]);
    unsigned char dg[32];
    char hex[65];
    nvrtc_sha256(defs, strlen(defs), dg);
    nvrtc_hex(dg, 6, hex);
    const char *spec = arena_printf(a, "%s longrope %" PRId64 " pairs %s", cuda_dtype_name(dt), npair, hex);
    return cg_kbegin(c, "rope", spec, defs, "zk_rope", role);
}

void cg_gen_rope(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int x = o->in[0];
    const GTensor *X = T_(c, x);
    int64_t H = o->iattr[IA_ROPE_HEADS], scaling = o->iattr[IA_ROPE_SCALING];
    double theta = o->fattr[FA_ROPE_THETA] > 0 ? o->fattr[FA_ROPE_THETA] : 10000.0;
    if (X->rank < 2 || H <= 0 || last_dim(X) % H != 0 || (last_dim(X) / H) % 2 != 0) {
        cg_fail(c, "rope needs x [B, T, H*hd] with heads dividing the last dim and hd even");
        return;
    }
    if (scaling < ROPE_NONE || scaling > ROPE_LONGROPE) {
        cg_fail(c, "rope: unknown scaling %" PRId64, scaling);
        return;
    }
    int64_t C = last_dim(X), Tn = X->dims[X->rank - 2], B = X->numel / (C * Tn), hd = C / H;
    int64_t rd = o->iattr[IA_ROPE_ROTARY_DIM] ? o->iattr[IA_ROPE_ROTARY_DIM] : hd;
    if (rd < 2 || rd > hd || rd % 2 != 0) {
        cg_fail(c, "rope: rotary_dim %" PRId64 " must be even and within the head of %" PRId64, rd, hd);
        return;
    }
    bool lr = scaling == ROPE_LONGROPE;
    int64_t orig = o->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS];
    if (lr && (!o->table || o->ntable != rd || orig <= 0)) {
        cg_fail(c, "rope with scaling = \"longrope\" needs short_factor and long_factor of %" PRId64
                   " numbers each and original_max_positions", rd / 2);
        return;
    }
    int y = o->out[0];
    int src = bwd ? o->in[o->nfin + 1] : x;
    if (y < 0) return;
    int ts[3] = {x, y, src};
    if (!cg_same_dtype(c, X->dtype, ts, 3)) return;
    const char *role = bwd ? "dx += rotate(dy, -t*f)" : "y = rotate(x, t*f)";
    CudaKernel *k = lr ? longrope_unit(c, X->dtype, rd / 2, role) : cg_kdt(c, "rope", X->dtype, "zk_rope", role);
    elementwise_grid(k, X->numel / 2); /* 256 threads a block: zk_rope_long_list's reduction */
    arg_t(k, y);
    arg_t(k, src);
    arg_i(k, B);
    arg_i(k, Tn);
    arg_i(k, H);
    arg_i(k, hd);
    arg_f(k, theta);
    arg_i(k, bwd);
    arg_i(k, bwd);
    arg_i(k, scaling);
    arg_f(k, scaling && !lr ? o->fattr[FA_ROPE_FACTOR] : 1.0);
    /* low and high: llama3's frequency factors, or YaRN's beta_fast and beta_slow (0: 32 and 1) */
    bool yarn = scaling == ROPE_YARN, l3 = scaling == ROPE_LLAMA3;
    arg_f(k, l3 ? o->fattr[FA_ROPE_LOW_FREQ_FACTOR] : yarn ? o->fattr[FA_ROPE_BETA_FAST] : 1.0);
    arg_f(k, l3 ? o->fattr[FA_ROPE_HIGH_FREQ_FACTOR] : yarn ? o->fattr[FA_ROPE_BETA_SLOW] : 4.0);
    arg_f(k, (l3 || yarn || lr) && orig > 0 ? (double)orig : 8192.0); /* 0: 8192, as hk_rope_attrs */
    arg_i(k, rd);
    double af = o->fattr[FA_ROPE_ATTENTION_FACTOR];
    arg_f(k, af > 0 ? af : 1.0); /* 0: 1, as the host's rope_unit */
    arg_seg(k); /* packed rows: positions restart per sample */
}
