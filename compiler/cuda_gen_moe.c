/* cuda_gen_moe: the launches of the mixture-of-experts family on
 * stdlib/kernels/moe.cu, forward and backward, the same arithmetic as the
 * host kernels (runtime/hostk/hostk_moe.c).
 *
 * moe_expert is dropless with buffers fixed at compile time: the routing
 * varies, the n = R*k (row, slot) pairs do not. Its workspace holds the
 * error word, start[E+1], order[n] and pos[n] (the pairs listed expert by
 * expert on the device, zk_moe_route) and two gathered blocks [n, I] and
 * [n, O]: rows copied in by zk_moe_gather, contiguous by expert, and
 * copied or added back by zk_moe_scatter. The products between them
 * (zk_moe_gemm_*) run through cuBLASLt at run time, one call per expert
 * with rows (runtime/gpu/cumoe.c), or as these NVRTC launches without it;
 * their grid is the bound on the 64-row tiles of the segments, ceil(n/64)
 * + min(E, n), which holds whatever the routing (every token on one
 * expert, experts with no token); the weight gradient has a block per
 * expert and tile of w[e]. The input gradient of x with a row per token is
 * added by the scatter, a thread per element summing a row's slots in slot
 * order: no atomics. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

enum { MOE_TILE = 64, MOE_BLOCK = 256 };

static int out_at(const GOp *o, int i) { return i < o->nout ? o->out[i] : -1; }

/* Thread per row launches: blocks of 128, as many as the rows need (grid-stride beyond). */
static void row_grid(CudaKernel *k, int64_t rows) {
    k->grid[0] = ew_blocks(rows, 128);
    k->block[0] = 128;
}
/* Warp per item launches: 8 warps a block. */
static void warp_grid(CudaKernel *k, int64_t items) {
    k->grid[0] = ew_blocks(items, 8);
    k->block[0] = 256;
}

static int64_t lead(const GTensor *t) {
    int64_t r = 1;
    for (int i = 0; i < t->rank - 1; i++) r *= t->dims[i];
    return r;
}

/* The float operands share one dtype (the unit's). */
static bool moe_dtype(GenCtx *c, const int *ts, int n, DType *dt) {
    *dt = DT_F32;
    for (int i = 0; i < n; i++)
        if (ts[i] >= 0) {
            *dt = T_(c, ts[i])->dtype;
            break;
        }
    return cg_same_dtype(c, *dt, ts, n);
}

static void gen_topk(GenCtx *c, bool bwd) {
    if (bwd) return; /* an integer choice: nothing flows back */
    const GOp *o = c->o;
    const GTensor *L = T_(c, o->in[0]), *I = T_(c, o->out[0]);
    DType dt;
    if (!moe_dtype(c, &o->in[0], 1, &dt)) return;
    CudaKernel *k = cg_kdt(c, "moe", dt, "zk_moe_topk", "idx = the top-k experts of each row");
    row_grid(k, lead(L));
    arg_t(k, o->out[0]);
    arg_t(k, o->in[0]);
    arg_i(k, lead(L));
    arg_i(k, last_dim(L));
    arg_i(k, last_dim(I));
}

static void gen_gate(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int logits = o->in[0], idx = o->in[1];
    const GTensor *L = T_(c, logits), *I = T_(c, idx);
    int dlog = bwd ? out_at(o, 0) : -1, y = bwd ? o->in[o->nfin + 1] : o->out[0];
    if (bwd && dlog < 0) return;
    int ts[3] = {logits, y, dlog};
    DType dt;
    if (!moe_dtype(c, ts, 3, &dt)) return;
    int64_t err = cg_err_word(c, dt, "moe_gate idx");
    bool norm = o->iattr[IA_MOE_GATE_NORMALIZE] != 0;
    CudaKernel *k = cg_kdt(c, "moe", dt, bwd ? "zk_moe_gate_bwd" : "zk_moe_gate_fwd",
                           bwd ? "dlogits += softmax gradient through the gates" : "gates = softmax(logits) at idx");
    row_grid(k, lead(L));
    arg_t(k, bwd ? dlog : y);
    arg_t(k, logits);
    arg_t(k, idx);
    if (bwd) arg_t(k, y);
    arg_i(k, lead(L));
    arg_i(k, last_dim(L));
    arg_i(k, last_dim(I));
    arg_i(k, norm);
    arg_ws(k, err);
}

/* A grouped product of moe_expert on the gathered rows, zk_moe_gemm_fwd or
 * zk_moe_gemm_dx: the result ws block c, A ws block a, the weights w, a
 * block per 64 of the result's cols columns and per 64-row tile of the
 * pairs (at most tiles of them). The argument list is what runtime/gpu
 * reads to run the same product through cuBLASLt (docs/kernels.md). */
static void grouped_gemm(GenCtx *c, DType dt, const char *entry, const char *role, int64_t cols, int64_t tiles,
                         int64_t cws, int64_t aws, int w, int64_t start, const int64_t *sizes) {
    CudaKernel *k = cg_kdt(c, "moe", dt, entry, role);
    k->grid[0] = cg_gdim(c, (cols + MOE_TILE - 1) / MOE_TILE, 2147483647);
    k->grid[1] = cg_gdim(c, tiles, 65535);
    k->block[0] = MOE_BLOCK;
    arg_ws(k, cws);
    arg_ws(k, aws);
    arg_t(k, w);
    arg_ws(k, start);
    for (int i = 0; i < 3; i++) arg_i(k, sizes[i]);
}

/* zk_moe_gather: the n rows of src (row order[q] / div, cols columns) into the ws block dst. */
static void gather(GenCtx *c, DType dt, const char *role, int64_t dst, int src, int64_t start, int64_t order, int64_t n,
                   int64_t E, int64_t cols, int64_t div) {
    CudaKernel *k = cg_kdt(c, "moe", dt, "zk_moe_gather", role);
    elementwise_grid(k, n * cols);
    arg_ws(k, dst);
    arg_t(k, src);
    arg_ws(k, start);
    arg_ws(k, order);
    arg_i(k, n);
    arg_i(k, E);
    arg_i(k, cols);
    arg_i(k, div);
}

/* zk_moe_scatter: the ws block src back to dst's rows rows of group pairs each. */
static void scatter(GenCtx *c, DType dt, const char *role, int dst, int64_t src, int64_t pos, int64_t rows, int64_t group,
                    int64_t cols, bool acc) {
    CudaKernel *k = cg_kdt(c, "moe", dt, "zk_moe_scatter", role);
    elementwise_grid(k, rows * cols);
    arg_t(k, dst);
    arg_ws(k, src);
    arg_ws(k, pos);
    arg_i(k, rows);
    arg_i(k, group);
    arg_i(k, cols);
    arg_i(k, acc);
}

/* zk_moe_scatter_tile: as scatter, only the pairs of the tile's experts
 * (the gathered rows [start[0], start[E]) of the advanced start). */
static void scatter_tile(GenCtx *c, DType dt, const char *role, int dst, int64_t src, int64_t pos, int64_t start, int64_t rows,
                         int64_t group, int64_t cols, int64_t E, bool acc) {
    CudaKernel *k = cg_kdt(c, "moe", dt, "zk_moe_scatter_tile", role);
    elementwise_grid(k, rows * cols);
    arg_t(k, dst);
    arg_ws(k, src);
    arg_ws(k, pos);
    arg_ws(k, start);
    arg_i(k, rows);
    arg_i(k, group);
    arg_i(k, cols);
    arg_i(k, E);
    arg_i(k, acc);
}

/* moe_expert: x [R, I] (a row per token) or [R*k, I], idx [R, k], w [E, O, I].
 * Workspace: the error word, start [E+1], order [n], pos [n] (int32), and
 * two gathered blocks, [n, I] and [n, O] in the op's dtype: sized by n =
 * R*k, which no routing changes. Forward: route, gather x, the products
 * into the [n, O] block, scatter it to y. Backward: route, gather dy (and
 * x for dw), dw[e] += dyg_e^T xg_e, then dxg = dyg_e w[e] into the [n, I]
 * block (xg is read no more) and dx += its rows, a row's slots in slot
 * order.
 *
 * Tile t of n (memory-centric tiling by expert, docs/tuning.md): w (and
 * dw) is bound to the tile's experts [e0, e0 + E/n) only, expert e at
 * e - e0, as the host executor's tiles (runtime/exec/exec_instr.c). The
 * route lists every pair as untiled (the same workspace, so the error word
 * where the op's is); the gathers, products and scatter read start from
 * expert e0 on with E/n experts, so they take only the tile's rows (the
 * products' offsets into the blocks are absolute); zk_moe_scatter_tile
 * leaves the other tiles' pairs out: tile 0 of the forward writes y whole
 * (zeros at the others' places), later tiles add theirs, and backward
 * tiles each add their share of dx. */
static void gen_expert(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int x = o->in[0], idx = o->in[1], w = o->in[2];
    const GTensor *X = T_(c, x), *Ix = T_(c, idx), *W = T_(c, w);
    if (W->rank != 3 || Ix->dtype != DT_I32) {
        cg_fail(c, "moe_expert needs w [E, O, I] and i32 idx");
        return;
    }
    int64_t n = Ix->numel, E = W->dims[0], O = W->dims[1], I = W->dims[2];
    int64_t kdiv = X->numel / I == n ? 1 : last_dim(Ix);
    if (n > INT32_MAX) {
        cg_fail(c, "%" PRId64 " routed (row, expert) pairs do not fit the 32-bit pair list of the kernels", n);
        return;
    }
    bool tiled = c->ntiles > 0;
    if (tiled && E % c->ntiles) { /* the planner refuses it */
        cg_fail(c, "%d tiles do not divide the %" PRId64 " experts of %s", c->ntiles, E, W->name ? W->name : "?");
        return;
    }
    int64_t Et = tiled ? E / c->ntiles : E, e0 = tiled ? (int64_t)c->tile * Et : 0;
    int dx = bwd ? out_at(o, 0) : -1, dw = bwd ? out_at(o, 2) : -1, dy = bwd ? o->in[o->nfin + 1] : o->out[0];
    if (bwd && dx < 0 && dw < 0) return;
    int ts[5] = {x, w, dy, dx, dw};
    DType dt;
    if (!moe_dtype(c, ts, 5, &dt)) return;
    int64_t es = dtype_size(dt);
    int64_t err = cg_err_word(c, dt, "moe_expert idx");
    int64_t start = cg_ws_alloc(c, (E + 1) * 4), order = cg_ws_alloc(c, n * 4), pos = cg_ws_alloc(c, n * 4);
    int64_t bi = cg_ws_alloc(c, n * I * es), bo = cg_ws_alloc(c, n * O * es); /* gathered [n, I], [n, O] */
    int64_t ts0 = start + e0 * 4; /* start[] from the tile's first expert: its Et experts' rows */
    const int64_t sizes[3] = {Et, O, I};
    /* the 64-row tiles of the n pairs cut by expert: at most ceil(n/64) + min(Et, n), whatever the routing */
    int64_t tiles = (n + MOE_TILE - 1) / MOE_TILE + (Et < n ? Et : n);
    Arena *a = c->cg->arena;
    const char *of = tiled ? arena_printf(a, ", experts %" PRId64 "..%" PRId64 " (the tile's)", e0, e0 + Et - 1) : "";
    CudaKernel *k = cg_kdt(c, "moe", dt, "zk_moe_route", "list the (row, slot) pairs by expert");
    k->block[0] = MOE_BLOCK;
    arg_ws(k, start);
    arg_ws(k, order);
    arg_ws(k, pos);
    arg_t(k, idx);
    arg_i(k, n);
    arg_i(k, E);
    arg_ws(k, err);
    if (!bwd) {
        gather(c, dt, arena_printf(a, "xg = x's rows by expert%s", of), bi, x, ts0, order, n, Et, I, kdiv);
        grouped_gemm(c, dt, "zk_moe_gemm_fwd", arena_printf(a, "yg = xg w[e]^T, expert by expert%s", of), O, tiles, bo, bi, w,
                     ts0, sizes);
        if (!tiled) scatter(c, dt, "y[p] = yg[pos[p]]", dy, bo, pos, n, 1, O, false);
        else
            scatter_tile(c, dt, c->tile ? "y[p] += yg[pos[p]] for the tile's pairs (zero there)"
                                        : "y[p] = yg[pos[p]] for the tile's pairs, else 0",
                         dy, bo, pos, ts0, n, 1, O, Et, c->tile > 0);
        return;
    }
    gather(c, dt, arena_printf(a, "dyg = dy's rows by expert%s", of), bo, dy, ts0, order, n, Et, O, 1);
    if (dw >= 0) {
        gather(c, dt, arena_printf(a, "xg = x's rows by expert%s", of), bi, x, ts0, order, n, Et, I, kdiv);
        k = cg_kdt(c, "moe", dt, "zk_moe_gemm_dw", arena_printf(a, "dw[e] += dyg_e^T xg_e, expert by expert%s", of));
        k->grid[0] = cg_gdim(c, (I + MOE_TILE - 1) / MOE_TILE, 2147483647);
        k->grid[1] = cg_gdim(c, (O + MOE_TILE - 1) / MOE_TILE, 65535);
        k->grid[2] = cg_gdim(c, Et, 65535);
        k->block[0] = MOE_BLOCK;
        arg_t(k, dw);
        arg_ws(k, bo);
        arg_ws(k, bi);
        arg_ws(k, ts0);
        for (int i = 0; i < 3; i++) arg_i(k, sizes[i]);
    }
    if (dx >= 0) {
        grouped_gemm(c, dt, "zk_moe_gemm_dx", arena_printf(a, "dxg = dyg w[e], expert by expert%s", of), I, tiles, bi, bo, w,
                     ts0, sizes);
        const char *role = kdiv > 1 ? "dx[r] += dxg[pos[r, j]] over the slots j" : "dx[p] += dxg[pos[p]]";
        if (!tiled) scatter(c, dt, role, dx, bi, pos, n / kdiv, kdiv, I, true);
        else scatter_tile(c, dt, arena_printf(a, "%s, the tile's pairs", role), dx, bi, pos, ts0, n / kdiv, kdiv, I, Et, true);
    }
}

/* A launch of moe_combine or moe_shared_gate: a "moe" kernel of the tensors
 * ts[0..nts) then the sizes dims[0..ndims), a thread per element of n, or
 * (warp) a warp per item of n. */
static void launch_ew(GenCtx *c, DType dt, const char *entry, const char *role, bool warp, int64_t n, const int *ts,
                      int nts, const int64_t *dims, int ndims) {
    CudaKernel *k = cg_kdt(c, "moe", dt, entry, role);
    if (warp) warp_grid(k, n);
    else elementwise_grid(k, n);
    for (int i = 0; i < nts; i++) arg_t(k, ts[i]);
    for (int i = 0; i < ndims; i++) arg_i(k, dims[i]);
}

/* moe_combine: o [R, k, D], weights [R, k] -> [R, D]. */
static void gen_combine(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int ov = o->in[0], wt = o->in[1];
    const GTensor *Ov = T_(c, ov);
    if (Ov->rank < 2) {
        cg_fail(c, "moe_combine needs o [S..., k, D]");
        return;
    }
    int64_t D = last_dim(Ov), k = Ov->dims[Ov->rank - 2], R = Ov->numel / (k * D);
    int dout = bwd ? out_at(o, 0) : -1, dwt = bwd ? out_at(o, 1) : -1, y = bwd ? o->in[o->nfin + 1] : o->out[0];
    int ts[5] = {ov, wt, y, dout, dwt};
    DType dt;
    if (!moe_dtype(c, ts, 5, &dt)) return;
    const int64_t dims[3] = {R, k, D};
    if (!bwd) launch_ew(c, dt, "zk_moe_combine_fwd", "y = sum_j weights[j] o[j]", false, R * D, (int[]){y, ov, wt}, 3, dims, 3);
    if (dout >= 0)
        launch_ew(c, dt, "zk_moe_combine_bwd_o", "do[j] += weights[j] dy", false, R * k * D, (int[]){dout, y, wt}, 3, dims, 3);
    if (dwt >= 0)
        launch_ew(c, dt, "zk_moe_combine_bwd_w", "dweights[j] += dy . o[j]", true, R * k, (int[]){dwt, y, ov}, 3, dims, 3);
}

/* moe_load: logits [R, E]?, idx [R, k]?, acc f32 [2, E]? -> f32 [2, E]. */
static void gen_load(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int nfwd = bwd ? o->nfin : o->nin;
    int logits = nfwd >= 2 ? o->in[0] : -1, idx = nfwd >= 2 ? o->in[1] : -1, acc = nfwd >= 3 ? o->in[2] : -1;
    int64_t E = o->iattr[IA_MOE_LOAD_EXPERTS];
    int64_t R = logits >= 0 ? lead(T_(c, logits)) : 0, k = idx >= 0 ? last_dim(T_(c, idx)) : 0;
    DType dt = logits >= 0 ? T_(c, logits)->dtype : DT_F32;
    if (!bwd) {
        int ts[1] = {logits};
        if (!moe_dtype(c, ts, 1, &dt)) return;
        int64_t st = -1;
        if (logits >= 0) {
            st = cg_ws_alloc(c, 2 * R * 4);
            CudaKernel *k_ = cg_kdt(c, "moe", dt, "zk_moe_row_stats", "each row's softmax max and 1/sum");
            row_grid(k_, R);
            arg_ws(k_, st);
            arg_t(k_, logits);
            arg_i(k_, R);
            arg_i(k_, E);
        }
        CudaKernel *k_ = cg_kdt(c, "moe", dt, "zk_moe_load_fwd",
                                logits >= 0 ? "load = acc + (tokens per expert, summed probabilities)" : "load = acc (or zeros)");
        k_->grid[0] = cg_gdim(c, E, 2147483647);
        k_->block[0] = MOE_BLOCK;
        arg_t(k_, o->out[0]);
        arg_t(k_, acc);
        arg_t(k_, logits);
        arg_t(k_, idx);
        if (st >= 0) arg_ws(k_, st);
        else arg_t(k_, -1);
        arg_i(k_, R);
        arg_i(k_, E);
        arg_i(k_, k);
        return;
    }
    int dlog = logits >= 0 ? out_at(o, 0) : -1, dacc = acc >= 0 ? out_at(o, 2) : -1, dy = o->in[o->nfin + 1];
    if (dlog < 0 && dacc < 0) return;
    int ts[2] = {logits, dlog};
    if (logits >= 0 && !moe_dtype(c, ts, 2, &dt)) return;
    CudaKernel *k_ = cg_kdt(c, "moe", dt, "zk_moe_load_bwd", "dlogits += softmax gradient of the summed probabilities; dacc += dload");
    row_grid(k_, R > 2 * E ? R : 2 * E);
    arg_t(k_, dlog);
    arg_t(k_, dacc);
    arg_t(k_, logits);
    arg_t(k_, dy);
    arg_i(k_, R);
    arg_i(k_, E);
}

static void gen_balance(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int load = o->in[0];
    int64_t E = T_(c, load)->numel / 2;
    double scale = o->fattr[FA_MOE_BALANCE_SCALE];
    if (!bwd) {
        CudaKernel *k = cg_kdt(c, "moe", DT_F32, "zk_moe_balance_fwd", "aux = scale sum_e load[0, e] load[1, e]");
        k->block[0] = MOE_BLOCK;
        arg_t(k, o->out[0]);
        arg_t(k, load);
        arg_i(k, E);
        arg_f(k, scale);
        return;
    }
    int dload = out_at(o, 0);
    if (dload < 0) return;
    CudaKernel *k = cg_kdt(c, "moe", DT_F32, "zk_moe_balance_bwd", "dload[1, e] += scale load[0, e] daux");
    row_grid(k, E);
    arg_t(k, dload);
    arg_t(k, load);
    arg_t(k, o->in[o->nfin + 1]);
    arg_i(k, E);
    arg_f(k, scale);
}

/* moe_shared_gate: y [R, D], logit [R, 1] -> sigmoid(logit) y. */
static void gen_shared_gate(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int y = o->in[0], g = o->in[1];
    const GTensor *Y = T_(c, y);
    int64_t D = last_dim(Y), R = Y->numel / D;
    int dyy = bwd ? out_at(o, 0) : -1, dg = bwd ? out_at(o, 1) : -1, out = bwd ? o->in[o->nfin + 1] : o->out[0];
    int ts[5] = {y, g, out, dyy, dg};
    DType dt;
    if (!moe_dtype(c, ts, 5, &dt)) return;
    const int64_t dims[2] = {R, D};
    if (!bwd) launch_ew(c, dt, "zk_moe_sgate_fwd", "out = sigmoid(logit) y", false, R * D, (int[]){out, y, g}, 3, dims, 2);
    if (dyy >= 0)
        launch_ew(c, dt, "zk_moe_sgate_bwd_y", "dy += sigmoid(logit) dout", false, R * D, (int[]){dyy, out, g}, 3, dims, 2);
    if (dg >= 0)
        launch_ew(c, dt, "zk_moe_sgate_bwd_g", "dlogit += s (1 - s) dout . y", true, R, (int[]){dg, out, y, g}, 4, dims, 2);
}

void cg_gen_moe(GenCtx *c, bool bwd) {
    switch (c->o->prim) {
    case PRIM_MOE_TOPK: gen_topk(c, bwd); break;
    case PRIM_MOE_GATE: gen_gate(c, bwd); break;
    case PRIM_MOE_EXPERT: gen_expert(c, bwd); break;
    case PRIM_MOE_COMBINE: gen_combine(c, bwd); break;
    case PRIM_MOE_LOAD: gen_load(c, bwd); break;
    case PRIM_MOE_BALANCE: gen_balance(c, bwd); break;
    case PRIM_MOE_SHARED_GATE: gen_shared_gate(c, bwd); break;
    default: cg_fail(c, "%s is not a mixture-of-experts primitive", prim_names[c->o->prim]); break;
    }
}
