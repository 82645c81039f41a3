/* cuda_gen_xent: the launches of cross_entropy (row losses, their mean, the
 * logits' gradient) on stdlib/kernels/xent.cu. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

void cg_gen_xent(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int lg = o->in[0], tg = o->in[1];
    const GTensor *L = T_(c, lg);
    int64_t V = last_dim(L), N = L->numel / (V ? V : 1);
    DType dt = L->dtype;
    if (T_(c, tg)->dtype != DT_I32 || T_(c, tg)->numel != N) {
        cg_fail(c, "cross_entropy needs i32 targets with one per row of logits");
        return;
    }
    if (!float_dtype(dt)) {
        cg_fail(c, "cross_entropy: logits dtype %s is not supported", cuda_dtype_name(dt));
        return;
    }
    if (N > 0x7fffffff) {
        cg_fail(c, "cross_entropy: too many rows for the grid");
        return;
    }
    if (!bwd) {
        if (T_(c, o->out[0])->dtype != DT_F32) {
            cg_fail(c, "cross_entropy: the loss must be f32");
            return;
        }
        int64_t err = cg_err_word(c, dt, "cross_entropy target");
        int64_t rl = cg_ws_alloc(c, N * 4);
        CudaKernel *k = cg_kdt(c, "xent", dt, "zk_xent_fwd", "row_loss = logsumexp(logits) - logits[target]");
        k->grid[0] = cg_gdim(c, (N > 0 ? N : 1), 0x7fffffff);
        k->block[0] = 256;
        arg_ws(k, rl);
        arg_t(k, lg);
        arg_t(k, tg);
        arg_i(k, N);
        arg_i(k, V);
        arg_ws(k, err);
        arg_i(k, 0);
        k = cg_kdt(c, "xent", dt, "zk_xent_mean", "loss = mean(row_loss)");
        k->block[0] = 256;
        arg_t(k, o->out[0]);
        arg_ws(k, rl);
        arg_i(k, N);
        return;
    }
    int dl = o->out[0], dloss = o->in[o->nfin + 1];
    if (dl < 0) return;
    int ts[2] = {lg, dl};
    if (!cg_same_dtype(c, dt, ts, 2)) return;
    CudaKernel *k = cg_kdt(c, "xent", dt, "zk_xent_bwd", "dlogits += (softmax - onehot(target)) * dloss / N");
    k->grid[0] = cg_gdim(c, (N > 0 ? N : 1), 0x7fffffff);
    k->block[0] = 256;
    arg_t(k, dl);
    arg_t(k, lg);
    arg_t(k, tg);
    arg_t(k, dloss);
    arg_i(k, N);
    arg_i(k, V);
}

/* linear_cross_entropy, the chunked loss: x [R, D] (R the rows of its
 * leading dims), w [D, V] ([V, D] with transpose_b), `chunk` rows at a time
 * (0: all), only one chunk's logits [chunk, V] in the op's workspace.
 * Forward, per chunk: logits = x_c w (the gemm, cuBLASLt when the runtime
 * has it), row losses by zk_xent_fwd; then their mean over all R rows.
 * Backward, per chunk: the logits again (a fourth product instead of
 * keeping [R, D] and [D, V] fp32 gradients from the forward as the host
 * kernels do: the GPU's memory is the scarce one), zk_xent_grad turns them
 * into dlogits in place, then dx_c += dlogits w^T and dw += x_c^T dlogits
 * (tb: dw += dlogits^T x_c) accumulate straight into the gradients. */
enum { LINXENT_MAX_CHUNKS = 4096 }; /* the launches of a chunked loss grow with its chunks */

void cg_gen_linxent(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int x = o->in[0], w = o->in[1], tg = o->in[2];
    const GTensor *X = T_(c, x), *Wt = T_(c, w);
    bool tb = o->iattr[IA_LINEAR_CROSS_ENTROPY_TRANSPOSE_B] != 0;
    int64_t D = last_dim(X), R = X->numel / (D ? D : 1), chunk = o->iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK];
    DType dt = X->dtype;
    if (Wt->rank != 2 || Wt->dims[tb ? 1 : 0] != D) {
        cg_fail(c, "linear_cross_entropy: w must be [%" PRId64 ", V]%s", D, tb ? " transposed ([V, D])" : "");
        return;
    }
    int64_t V = Wt->dims[tb ? 0 : 1];
    if (T_(c, tg)->dtype != DT_I32 || T_(c, tg)->numel != R) {
        cg_fail(c, "linear_cross_entropy needs i32 targets with one per row of x");
        return;
    }
    if (chunk < 0) {
        cg_fail(c, "linear_cross_entropy: chunk %" PRId64 " is negative", chunk);
        return;
    }
    if (R > 0x7fffffff) {
        cg_fail(c, "linear_cross_entropy: too many rows for the grid");
        return;
    }
    int64_t n = chunk > 0 && chunk < R ? chunk : R;
    if (n < 1) n = 1;
    if ((R + n - 1) / n > LINXENT_MAX_CHUNKS) {
        cg_fail(c, "linear_cross_entropy: %" PRId64 " rows in chunks of %" PRId64 " are more than the CUDA kernels' %d "
                   "chunks (6 launches each, every step): plan a larger loss_chunk",
                R, n, LINXENT_MAX_CHUNKS);
        return;
    }
    int64_t es = dt == DT_F32 ? 4 : 2;
    if (!bwd) {
        int ts[2] = {x, w};
        if (!cg_same_dtype(c, dt, ts, 2)) return;
        if (T_(c, o->out[0])->dtype != DT_F32) {
            cg_fail(c, "linear_cross_entropy: the loss must be f32");
            return;
        }
        int64_t err = cg_err_word(c, dt, "linear_cross_entropy target");
        int64_t rl = cg_ws_alloc(c, R * 4), lg = cg_ws_alloc(c, n * V * es);
        for (int64_t r0 = 0; r0 < R; r0 += n) {
            int64_t m = R - r0 < n ? R - r0 : n;
            const char *rows = arena_printf(c->cg->arena, "rows [%" PRId64 ", %" PRId64 ")", r0, r0 + m);
            cg_gemm_ws(c, dt, false, tb, m, V, D, x, r0 * D, D, w, 0, tb ? D : V, 0, CUDA_GEMM_WS, 0, V, lg,
                       arena_printf(c->cg->arena, "logits = x[%s] * %s", rows, tb ? "w^T" : "w"));
            CudaKernel *k = cg_kdt(c, "xent", dt, "zk_xent_fwd",
                                   arena_printf(c->cg->arena, "row_loss[%s] = logsumexp(logits) - logits[target]", rows));
            k->grid[0] = cg_gdim(c, m, 0x7fffffff);
            k->block[0] = 256;
            arg_ws(k, rl + r0 * 4);
            arg_ws(k, lg);
            arg_t_off(k, tg, r0 * 4);
            arg_i(k, m);
            arg_i(k, V);
            arg_ws(k, err);
            arg_i(k, r0);
        }
        CudaKernel *k = cg_kdt(c, "xent", dt, "zk_xent_mean", "loss = mean(row_loss)");
        k->block[0] = 256;
        arg_t(k, o->out[0]);
        arg_ws(k, rl);
        arg_i(k, R);
        return;
    }
    int dx = o->out[0], dw = o->nout > 1 ? o->out[1] : -1, dloss = o->in[o->nfin + 1];
    if (dx < 0 && dw < 0) return;
    int ts[4] = {x, w, dx, dw};
    if (!cg_same_dtype(c, dt, ts, 4)) return;
    int64_t lg = cg_ws_alloc(c, n * V * es);
    for (int64_t r0 = 0; r0 < R; r0 += n) {
        int64_t m = R - r0 < n ? R - r0 : n;
        const char *rows = arena_printf(c->cg->arena, "rows [%" PRId64 ", %" PRId64 ")", r0, r0 + m);
        cg_gemm_ws(c, dt, false, tb, m, V, D, x, r0 * D, D, w, 0, tb ? D : V, 0, CUDA_GEMM_WS, 0, V, lg,
                   arena_printf(c->cg->arena, "logits = x[%s] * %s (recomputed)", rows, tb ? "w^T" : "w"));
        CudaKernel *k = cg_kdt(c, "xent", dt, "zk_xent_grad",
                               "dlogits = (softmax - onehot(target)) * dloss / rows, in place");
        k->grid[0] = cg_gdim(c, m, 0x7fffffff);
        k->block[0] = 256;
        arg_ws(k, lg);
        arg_t_off(k, tg, r0 * 4);
        arg_t(k, dloss);
        arg_i(k, m);
        arg_i(k, V);
        arg_i(k, R);
        if (dx >= 0)
            cg_gemm_ws(c, dt, false, !tb, m, D, V, CUDA_GEMM_WS, 0, V, w, 0, tb ? D : V, 1, dx, r0 * D, D, lg,
                       arena_printf(c->cg->arena, "dx[%s] += dlogits * %s", rows, tb ? "w" : "w^T"));
        if (dw >= 0) {
            if (!tb)
                cg_gemm_ws(c, dt, true, false, D, V, m, x, r0 * D, D, CUDA_GEMM_WS, 0, V, 1, dw, 0, V, lg,
                           arena_printf(c->cg->arena, "dw += x[%s]^T * dlogits", rows));
            else
                cg_gemm_ws(c, dt, true, false, V, D, m, CUDA_GEMM_WS, 0, V, x, r0 * D, D, 1, dw, 0, D, lg,
                           arena_printf(c->cg->arena, "dw += dlogits^T * x[%s]", rows));
        }
    }
}
