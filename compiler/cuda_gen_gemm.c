/* cuda_gen_gemm: the launches of linear and matmul on stdlib/kernels/gemm.cu
 * (zk_gemm, its tile shape chosen here: tensor cores or SIMT), for the whole
 * op and for one tile of it alike. A tile of the weight (linear's w,
 * matmul's b) is a range of its rows, and the whole op is the range of all
 * of them, so each gemm below is written once for both. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

/* Tile rule constants (docs/kernels.md). */
enum {
    GEMM_BIG_TILES_MIN = 96, /* 128x128 tiles when there are at least this many of them
                              * (3/4 of the SMs when CudaGenOptions.sm_count is given) */
};

typedef struct Gemm {
    int C, A, B, bias;           /* tensor ids (bias -1); C, A, B may be CUDA_GEMM_WS */
    int64_t deqB;                /* B (a quantized weight) read dequantized from the op's workspace at this byte offset; -1: from B */
    int64_t offC, offA, offB;    /* elements past each operand's start (a tile's columns) */
    int64_t wsC, wsA, wsB;       /* a CUDA_GEMM_WS operand's start: a byte offset of the op's workspace */
    DType dt;                    /* the operands' dtype (DT_NONE: C's tensor's) */
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    int64_t batch, sA, sB, sC;   /* output batches (grid.z) */
    int64_t rbatch, rsA, rsB;    /* summed batches */
    double beta;
} Gemm;

/* Operand x of a gemm launch: its tensor plus off elements, or the op's workspace at ws bytes plus off. */
static void gemm_operand(CudaKernel *k, int t, int64_t off, int64_t ws, int64_t es) {
    if (t == CUDA_GEMM_WS) arg_ws(k, ws + off * es);
    else arg_t_off(k, t, off * es);
}

static void k_gemm(GenCtx *c, const Gemm *p, const char *role) {
    DType dt = p->dt != DT_NONE ? p->dt : T_(c, p->C)->dtype;
    int ts[4] = {p->C == CUDA_GEMM_WS ? -1 : p->C, p->A == CUDA_GEMM_WS ? -1 : p->A,
                 p->B == CUDA_GEMM_WS || p->deqB >= 0 ? -1 : p->B, p->bias};
    if (!cg_same_dtype(c, dt, ts, 4)) return;
    if (p->batch > 65535) {
        cg_fail(c, "%" PRId64 " batched products exceed the grid limit (65535)", p->batch);
        return;
    }
    int bm, bn, bk, wm = 0, wn = 0;
    bool tc = dt != DT_F32;
    if (!tc) {
        bm = bn = 64;
        bk = 16;
    } else {
        int64_t tiles = ((p->M + 127) / 128) * ((p->N + 127) / 128) * p->batch;
        int64_t min_tiles = c->cg->opt.sm_count > 0 ? (int64_t)c->cg->opt.sm_count * 3 / 4 : GEMM_BIG_TILES_MIN;
        if (p->M >= 128 && p->N >= 128 && tiles >= min_tiles) {
            bm = bn = 128;
            bk = 32;
            wm = 64;
            wn = 32;
        } else {
            bm = bn = 64;
            bk = 32;
            wm = wn = 32;
        }
    }
    if ((p->M + bm - 1) / bm > 65535) {
        cg_fail(c, "M = %" PRId64 " exceeds the gemm grid limit", p->M);
        return;
    }
    const char *spec = arena_printf(c->cg->arena, "%s %s ta=%d tb=%d tile=%dx%dx%d", cuda_dtype_name(dt),
                                    tc ? "mma.sync" : "simt", p->ta, p->tb, bm, bn, bk);
    const char *defs = arena_printf(c->cg->arena,
                                    "ZK_T %s\nZK_DT %d\nZK_TC %d\nZK_TA %d\nZK_TB %d\nZK_BM %d\nZK_BN %d\nZK_BK %d\n"
                                    "ZK_WM %d\nZK_WN %d",
                                    dtype_ctype(dt), dtype_code(dt), tc, p->ta, p->tb, bm, bn, bk, wm, wn);
    CudaKernel *k = cg_kbegin(c, "gemm", spec, defs, "zk_gemm", role);
    k->tile_m = bm;
    k->tile_n = bn;
    k->tile_k = bk;
    k->grid[0] = cg_gdim(c, ((p->N + bn - 1) / bn), 0x7fffffff);
    k->grid[1] = cg_gdim(c, ((p->M + bm - 1) / bm), 65535);
    k->grid[2] = cg_gdim(c, p->batch, 65535);
    k->block[0] = tc ? (unsigned)((bm / wm) * (bn / wn) * 32) : 256;
    int64_t es = dt == DT_F32 ? 4 : 2;
    gemm_operand(k, p->C, p->offC, p->wsC, es);
    gemm_operand(k, p->A, p->offA, p->wsA, es);
    if (p->deqB >= 0) arg_ws(k, p->deqB + p->offB * es);
    else gemm_operand(k, p->B, p->offB, p->wsB, es);
    arg_t(k, p->bias);
    arg_i(k, p->M);
    arg_i(k, p->N);
    arg_i(k, p->K);
    arg_i(k, p->lda);
    arg_i(k, p->ldb);
    arg_i(k, p->ldc);
    arg_i(k, p->sA);
    arg_i(k, p->sB);
    arg_i(k, p->sC);
    arg_i(k, p->rbatch);
    arg_i(k, p->rsA);
    arg_i(k, p->rsB);
    arg_f(k, 1.0);
    arg_f(k, p->beta);
    /* The same product for cuBLASLt, with the workspace it may use: the
     * executor gives every gemm of a queue one region of the largest such
     * size (the op's own workspace is untouched). */
    CudaGemm *g = &k->gemm;
    *g = (CudaGemm){.on = true, .lt = p->rbatch == 1, .why = p->rbatch == 1 ? CUDA_GEMM_WHY_NONE : CUDA_GEMM_WHY_BATCH_SUM,
                    .dtype = dt, .ta = p->ta, .tb = p->tb, .accumulate = p->beta != 0, .c = p->C, .a = p->A, .b = p->B,
                    .bias = p->bias, .off_c = (p->C == CUDA_GEMM_WS ? p->wsC : 0) + p->offC * es,
                    .off_a = (p->A == CUDA_GEMM_WS ? p->wsA : 0) + p->offA * es,
                    .off_b = (p->B == CUDA_GEMM_WS ? p->wsB : 0) + p->offB * es, .M = p->M,
                    .N = p->N, .K = p->K, .lda = p->lda, .ldb = p->ldb, .ldc = p->ldc, .batch = p->batch, .sA = p->sA,
                    .sB = p->sB, .sC = p->sC, .rbatch = p->rbatch, .rsA = p->rsA, .rsB = p->rsB};
    int64_t want = c->cg->opt.gemm_ws_bytes ? c->cg->opt.gemm_ws_bytes : CUDA_GEMM_WS_DEFAULT;
    if (g->lt && want > 0) g->ws_bytes = want;
    if (p->deqB >= 0) { /* B is the weight dequantized into the op's workspace: the launch runs it */
        g->lt = false;
        g->why = CUDA_GEMM_WHY_DEQUANT;
        g->ws_bytes = 0;
    }
}

/* A weight stored quantized (nf4, int8: a frozen one, train { quantize })
 * decoded whole into the op's workspace in the compute dtype dt, as the
 * host kernels decode it (stdlib/kernels/dequant.cu): the workspace
 * offset, or -1 (reported) when it cannot be. */
static int64_t dequant_weight(GenCtx *c, int w, DType dt) {
    const GTensor *W = T_(c, w);
    if (c->ntiles > 0) {
        cg_fail(c, "'%s' is stored quantized and cut into tiles, which the CUDA kernels do not read", W->name ? W->name : "?");
        return -1;
    }
    int64_t es = dt == DT_F32 ? 4 : 2, off = cg_ws_alloc(c, W->numel * es);
    CudaKernel *k = cg_kdt(c, "dequant", dt, W->dtype == DT_NF4 ? "zk_dequant_nf4" : "zk_dequant_int8",
                           arena_printf(c->cg->arena, "w (%s) dequantized into the workspace", dtype_name(W->dtype)));
    elementwise_grid(k, W->numel);
    arg_ws(k, off);
    arg_t(k, w);
    arg_i(k, W->numel);
    return off;
}

/* The product C = op(A) op(B) + beta C, its arguments in BLAS's order
 * (C [M, N], op(A) [M, K], op(B) [K, N], leading dimensions as stored):
 * one batch, no bias, each operand from its tensor's start. A launch sets
 * the offsets, the bias and the batches it needs on the result. */
static Gemm gemm_of(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int A, int64_t lda, int B, int64_t ldb,
                    double beta, int C, int64_t ldc) {
    Gemm p;
    memset(&p, 0, sizeof p);
    p.C = C;
    p.A = A;
    p.B = B;
    p.bias = -1;
    p.ta = ta;
    p.tb = tb;
    p.M = M;
    p.N = N;
    p.K = K;
    p.lda = lda;
    p.ldb = ldb;
    p.ldc = ldc;
    p.batch = 1;
    p.rbatch = 1;
    p.beta = beta;
    p.dt = DT_NONE;
    p.deqB = -1;
    return p;
}

/* A product of the chunked loss (cuda_gen_xent.c): one of its three
 * operands the op's workspace at ws bytes (c, a or b CUDA_GEMM_WS), the
 * others tensors from element offsets offc/offa/offb; dtype dt. */
void cg_gemm_ws(GenCtx *c, DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int A, int64_t offa, int64_t lda,
                int B, int64_t offb, int64_t ldb, double beta, int C, int64_t offc, int64_t ldc, int64_t ws,
                const char *role) {
    Gemm p = gemm_of(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    p.dt = dt;
    p.offA = offa;
    p.offB = offb;
    p.offC = offc;
    p.wsA = p.wsB = p.wsC = ws;
    k_gemm(c, &p, role);
}

/* The operands of y = x w (matmul: c = a b) and, backward, of its
 * gradients; -1 where absent or not computed. */
typedef struct XW {
    int x, w, bias, y;
    int dy, dx, dw, db;
    int64_t w_ws;               /* w dequantized into the workspace at this offset; -1: w itself */
} XW;

/* A whole op's launch comments: y, dx, dw, db (a tile's name its columns). */
typedef struct WRoles {
    const char *y, *dx, *dw, *db;
} WRoles;

/* y[M, N] = x[M, K] w[K, N] (+ bias) with w's rows (the reduction dim)
 * [r0, r0 + rows): this tile adds x[:, r0:r0+rows] w_t; tile 0 overwrites
 * y and adds the bias. Backward: dx[:, r0:r0+rows] += dy w_t^T, dw_t +=
 * x[:, r0:r0+rows]^T dy, db += column sums of dy at tile 0 only (each
 * tile's dy is the whole dy: summing it every tile would count it ntiles
 * times). The whole op is the one tile [0, K). Linear, and matmul without
 * transposes. */
static void gemm_w_rows(GenCtx *c, bool bwd, const XW *t, const WRoles *r, int64_t M, int64_t K, int64_t N, int64_t rows,
                        int64_t r0) {
    Arena *a = c->cg->arena;
    int64_t r1 = r0 + rows;
    bool first = c->tile == 0, tiled = c->ntiles > 0;
    if (!bwd) {
        Gemm p = gemm_of(false, false, M, N, rows, t->x, K, t->w, N, first ? 0 : 1, t->y, N);
        p.deqB = t->w_ws;
        p.offA = r0;
        p.bias = first ? t->bias : -1;
        k_gemm(c, &p,
               tiled ? arena_printf(a, "y %s x[:, %" PRId64 ":%" PRId64 "]*w_t%s", first ? "=" : "+=", r0, r1,
                                    first && t->bias >= 0 ? " + b" : "")
                     : r->y);
        return;
    }
    if (t->dx >= 0) {
        Gemm p = gemm_of(false, true, M, rows, N, t->dy, N, t->w, N, 1, t->dx, K);
        p.deqB = t->w_ws;
        p.offC = r0;
        k_gemm(c, &p, tiled ? arena_printf(a, "dx[:, %" PRId64 ":%" PRId64 "] += dy*w_t^T", r0, r1) : r->dx);
    }
    if (t->dw >= 0) {
        Gemm p = gemm_of(true, false, rows, N, M, t->x, K, t->dy, N, 1, t->dw, N);
        p.offA = r0;
        k_gemm(c, &p, tiled ? arena_printf(a, "dw_t += x[:, %" PRId64 ":%" PRId64 "]^T*dy", r0, r1) : r->dw);
    }
    if (t->db >= 0 && first) cg_colsum(c, t->db, t->dy, -1, M, N, tiled ? "db += sum_rows dy (tile 0 only)" : r->db);
}

void cg_gen_linear(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int nfin = bwd ? o->nfin : o->nin;
    int x = o->in[0], w = o->in[1], b = nfin >= 3 ? o->in[2] : -1;
    const GTensor *X = T_(c, x), *W = T_(c, w);
    if (!c->ntiles && W->rank != 2) {
        cg_fail(c, "linear weight must be 2-D");
        return;
    }
    int64_t rows, r0;
    if (!cg_tile_rows(c, w, &rows, &r0)) return;
    int64_t I = W->dims[0], O = W->dims[1];
    if (last_dim(X) != I) {
        cg_fail(c, "linear: x's last dim %" PRId64 " != weight's rows %" PRId64, last_dim(X), I);
        return;
    }
    XW t = {.x = x, .w = w, .bias = b, .y = -1, .dy = -1, .dx = -1, .dw = -1, .db = -1, .w_ws = -1};
    if (!bwd) t.y = o->out[0];
    else {
        t.dy = o->in[nfin + 1];
        t.dx = o->out[0];
        t.dw = o->nout > 1 ? o->out[1] : -1;
        t.db = o->nout > 2 ? o->out[2] : -1;
    }
    if (dtype_is_quant(W->dtype)) {
        if (t.dw >= 0) {
            cg_fail(c, "'%s' is stored quantized but has a gradient", W->name ? W->name : "?");
            return;
        }
        if ((!bwd || t.dx >= 0) && (t.w_ws = dequant_weight(c, w, X->dtype)) < 0) return; /* (read by y and dx only) */
    }
    WRoles r = {b >= 0 ? "y = x*w + b" : "y = x*w", "dx += dy*w^T", "dw += x^T*dy", "db += sum_rows dy"};
    gemm_w_rows(c, bwd, &t, &r, X->numel / I, I, O, rows, r0);
}

/* c[M, N] = a[M, K] b^T with b [N, K] and b's rows [r0, r0 + rows): they
 * are the output's columns; backward da += dc[:, r0:r0+rows] b_t, db_t +=
 * dc[:, r0:r0+rows]^T a. The whole op is the one tile [0, N). Matmul with
 * transpose_b (not transpose_a). */
static void gemm_bt_rows(GenCtx *c, bool bwd, const XW *t, int64_t M, int64_t K, int64_t N, int64_t rows, int64_t r0) {
    Arena *a = c->cg->arena;
    int64_t r1 = r0 + rows;
    bool tiled = c->ntiles > 0;
    if (!bwd) {
        Gemm p = gemm_of(false, true, M, rows, K, t->x, K, t->w, K, 0, t->y, N);
        p.offC = r0;
        k_gemm(c, &p, tiled ? arena_printf(a, "c[:, %" PRId64 ":%" PRId64 "] = a*b_t^T", r0, r1) : "c = op(a)*op(b)");
        return;
    }
    if (t->dx >= 0) {
        Gemm p = gemm_of(false, false, M, K, rows, t->dy, N, t->w, K, 1, t->dx, K);
        p.offA = r0;
        k_gemm(c, &p, tiled ? arena_printf(a, "da += dc[:, %" PRId64 ":%" PRId64 "]*b_t", r0, r1) : "da += dc*op(b)^T");
    }
    if (t->dw >= 0) {
        Gemm p = gemm_of(true, false, rows, K, M, t->dy, N, t->x, K, 1, t->dw, K);
        p.offA = r0;
        k_gemm(c, &p, tiled ? arena_printf(a, "db_t += dc[:, %" PRId64 ":%" PRId64 "]^T*a", r0, r1) : "db += dc^T*op(a)");
    }
}

/* transpose_a (the whole op only: a tiled matmul refuses it): a is
 * [batch, K, M]; c and da are per batch, db sums over the batches. */
static void gemm_ta(GenCtx *c, bool bwd, const XW *t, bool tb, int64_t M, int64_t K, int64_t N, int64_t batch) {
    if (!bwd) {
        Gemm p = gemm_of(true, tb, M, N, K, t->x, M, t->w, tb ? K : N, 0, t->y, N);
        p.batch = batch;
        p.sA = K * M;
        p.sC = M * N;
        k_gemm(c, &p, "c = op(a)*op(b)");
        return;
    }
    if (t->dx >= 0) {
        Gemm p = gemm_of(tb, true, K, M, N, t->w, tb ? K : N, t->dy, N, 1, t->dx, M);
        p.batch = batch;
        p.sB = M * N;
        p.sC = K * M;
        k_gemm(c, &p, "da += (op(b)*dc^T) per batch");
    }
    if (t->dw >= 0) {
        if (!tb) {
            Gemm p = gemm_of(false, false, K, N, M, t->x, M, t->dy, N, 1, t->dw, N);
            p.rbatch = batch;
            p.rsA = K * M;
            p.rsB = M * N;
            k_gemm(c, &p, "db += op(a)^T*dc");
        } else {
            Gemm p = gemm_of(true, true, N, K, M, t->dy, N, t->x, M, 1, t->dw, K);
            p.rbatch = batch;
            p.rsA = M * N;
            p.rsB = K * M;
            k_gemm(c, &p, "db += dc^T*op(a)");
        }
    }
}

/* The shape checks of the whole op and of a tile, each in its own order. */
void cg_gen_matmul(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int a = o->in[0], b = o->in[1];
    const GTensor *A = T_(c, a), *Bt = T_(c, b);
    bool ta = o->iattr[IA_MATMUL_TRANSPOSE_A] != 0, tb = o->iattr[IA_MATMUL_TRANSPOSE_B] != 0;
    if (c->ntiles && ta) {
        cg_fail(c, "a tiled matmul with transpose_a is not supported (tile b only when a is not transposed)");
        return;
    }
    if (!c->ntiles && Bt->rank != 2) {
        cg_fail(c, "matmul: b must be 2-D (got rank %d)", Bt->rank);
        return;
    }
    if (A->rank < 1) {
        cg_fail(c, "matmul: a must have rank >= 1");
        return;
    }
    if (ta && A->rank < 2) {
        cg_fail(c, "matmul: transpose_a needs a of rank >= 2");
        return;
    }
    int64_t rows, r0;
    if (!cg_tile_rows(c, b, &rows, &r0)) return;
    int64_t M, K, batch = 1;
    if (A->rank == 1) {
        M = 1;
        K = A->dims[0];
    } else if (!ta) {
        K = A->dims[A->rank - 1];
        M = A->numel / (K ? K : 1);
    } else {
        K = A->dims[A->rank - 2];
        M = A->dims[A->rank - 1];
        batch = (K > 0 && M > 0) ? A->numel / (K * M) : 1;
    }
    int64_t Kb = tb ? Bt->dims[1] : Bt->dims[0], N = tb ? Bt->dims[0] : Bt->dims[1];
    if (Kb != K) {
        cg_fail(c, "matmul: inner dims differ (%" PRId64 " and %" PRId64 ")", K, Kb);
        return;
    }
    if (dtype_is_quant(Bt->dtype)) {
        cg_fail(c, "'%s' is stored quantized (%s), which the CUDA kernels read as the weight of a linear only", Bt->name ? Bt->name : "?",
                dtype_name(Bt->dtype));
        return;
    }
    XW t = {.x = a, .w = b, .bias = -1, .y = bwd ? -1 : o->out[0], .dy = bwd ? o->in[o->nfin + 1] : -1,
            .dx = bwd ? o->out[0] : -1, .dw = bwd && o->nout > 1 ? o->out[1] : -1, .db = -1, .w_ws = -1};
    if (ta) gemm_ta(c, bwd, &t, tb, M, K, N, batch);
    else if (tb) gemm_bt_rows(c, bwd, &t, M, K, N, rows, r0);
    else {
        WRoles r = {"c = op(a)*op(b)", "da += dc*op(b)^T", "db += op(a)^T*dc", NULL};
        gemm_w_rows(c, bwd, &t, &r, M, K, N, rows, r0);
    }
}
