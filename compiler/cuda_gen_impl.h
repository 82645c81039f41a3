/* cuda_gen_impl: what compiler/cuda_gen*.c share; private to them (no other
 * file includes it).
 *
 * cuda_gen.c is the driver: the public entry points, the context of one
 * op's launches (GenCtx) and the dispatch to the generators. Each
 * cuda_gen_<family>.c lowers the ops whose kernels are
 * stdlib/kernels/<family>.cu. A tiled op (cuda_gen_op_tile) and the whole op
 * go through the same generator: GenCtx.ntiles 0 is the whole op, and
 * cg_tile_rows gives it all of the weight's rows as its one tile.
 * cuda_gen_util.c, below both, owns the unit sources and the helpers the
 * generators share (begin a launch, workspace, diagnostics, dtype checks,
 * tiles); it calls neither the driver nor a generator, so calls go one way.
 * Functions shared across the files carry the cg_ prefix; the small
 * argument helpers are static inline here.
 */
#ifndef ZINF_CUDA_GEN_IMPL_H
#define ZINF_CUDA_GEN_IMPL_H
#include <stdbool.h>
#include <string.h>
#include "cuda_gen.h"

enum {
    EW_MAX_BLOCKS = 16384, /* grid cap of grid-stride loops */
    WS_ALIGN = 256,
};

/* The launches of one op (or one tile of it) being built. */
typedef struct GenCtx {
    CudaGen *cg;
    const Graph *g;
    const GOp *o;
    int op;
    CudaKernel *out;
    int max, n;
    CudaKernel scratch;   /* written when out is full */
    CudaOpInfo info;
    DiagSink *d;
    const char *where;    /* "op 12 fwd linear (block.3.mlp) at f.zl:3:9" */
    int tile, ntiles;     /* the launches of one tile of a tiled op (cuda_gen_op_tile); ntiles 0: the whole op */
    bool failed;
} GenCtx;

static inline const GTensor *T_(GenCtx *c, int t) { return &c->g->tensors[t]; }
static inline int64_t last_dim(const GTensor *t) { return t->rank ? t->dims[t->rank - 1] : 1; }
static inline bool float_dtype(DType dt) { return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16; }
static inline const char *dtype_ctype(DType dt) {
    return dt == DT_BF16 ? "zk_bf16" : dt == DT_F16 ? "zk_f16" : "float";
}
static inline int dtype_code(DType dt) { return dt == DT_BF16 ? 1 : dt == DT_F16 ? 2 : 0; }

static inline unsigned ew_blocks(int64_t n, int per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > EW_MAX_BLOCKS) b = EW_MAX_BLOCKS;
    return (unsigned)b;
}
static inline void elementwise_grid(CudaKernel *k, int64_t n) {
    k->grid[0] = ew_blocks(n, 256);
    k->block[0] = 256;
}

/* ---- arguments, in the kernel's parameter order ---- */
static inline CudaArg *arg_new(CudaKernel *k) {
    static CudaArg sink; /* never reached: the longest signature (zk_gemm) has 18 of CUDA_MAX_ARGS */
    if (k->nargs >= CUDA_MAX_ARGS) return &sink;
    CudaArg *a = &k->args[k->nargs++];
    memset(a, 0, sizeof *a);
    a->tensor = -1;
    return a;
}
static inline void arg_t(CudaKernel *k, int t) {
    CudaArg *a = arg_new(k);
    if (t < 0) a->kind = CARG_NULL;
    else {
        a->kind = CARG_TENSOR;
        a->tensor = t;
    }
}
/* Tensor t's address plus off bytes (a column slice of a row-major tensor). */
static inline void arg_t_off(CudaKernel *k, int t, int64_t off) {
    arg_t(k, t);
    if (t >= 0) k->args[k->nargs - 1].off = off;
}
static inline void arg_ws(CudaKernel *k, int64_t off) {
    CudaArg *a = arg_new(k);
    a->kind = CARG_WS;
    a->ws_off = off;
}
static inline void arg_i(CudaKernel *k, int64_t v) {
    CudaArg *a = arg_new(k);
    a->kind = CARG_I64;
    a->i = v;
}
static inline void arg_f(CudaKernel *k, double v) {
    CudaArg *a = arg_new(k);
    a->kind = CARG_F32;
    a->f = (float)v;
}
/* The micro-batch's sample starts (packed rows; NULL when not packed). */
static inline void arg_seg(CudaKernel *k) { arg_new(k)->kind = CARG_SEG; }
static inline void arg_rt(CudaKernel *k, CudaRtValue rt) {
    CudaArg *a = arg_new(k);
    a->kind = CARG_RT;
    a->rt = rt;
}

/* ---- cuda_gen_util.c: launches and checks ---- */
/* A new launch of entry in the unit of family fam specialised by defines
 * ("NAME VALUE" lines; spec its readable name); role ends its comment. */
CudaKernel *cg_kbegin(GenCtx *c, const char *fam, const char *spec, const char *defines, const char *entry,
                      const char *role);
/* The same for the families specialised by a dtype only. */
CudaKernel *cg_kdt(GenCtx *c, const char *fam, DType dt, const char *entry, const char *role);
/* A 256-aligned slice of the op's workspace: its offset. */
int64_t cg_ws_alloc(GenCtx *c, int64_t bytes);
/* A diagnostic naming the op; the op fails. */
void cg_fail(GenCtx *c, const char *fmtstr, ...) __attribute__((format(printf, 2, 3)));
/* A grid dimension, or a diagnostic when it exceeds the launch limit. */
unsigned cg_gdim(GenCtx *c, int64_t v, int64_t lim);
/* All of ts[] (>= 0 entries) share dtype dt and it is a float dtype. */
bool cg_same_dtype(GenCtx *c, DType dt, const int *ts, int n);
/* The rows [*r0, *r0 + *rows) of 2-D weight w this launch list covers: all
 * of them for the whole op; the tile's for a tile (false, with a
 * diagnostic, when w is not 2-D or ntiles does not divide its rows). */
bool cg_tile_rows(GenCtx *c, int w, int64_t *rows, int64_t *r0);
/* GenCtx of a launch outside the graph's ops (cuda_gen_cast, ...): 0, or -1
 * with a diagnostic when one of ts[] is not a tensor. */
int cg_util_begin(GenCtx *c, CudaGen *cg, const Graph *g, CudaKernel *out, DiagSink *d, const char *what, const int *ts,
                  int nt);
int cg_util_end(GenCtx *c);

/* ---- cuda_gen_elementwise.c ---- */
void cg_fill(GenCtx *c, int t, double v, const char *role);
void cg_fill_ws_f32(GenCtx *c, DType unit_dt, int64_t off, int64_t n, const char *role);
/* Clears the op's error word (CudaOpInfo.err_off): its offset. */
int64_t cg_err_word(GenCtx *c, DType unit_dt, const char *what);
void cg_gen_binary(GenCtx *c, bool bwd);
void cg_gen_act(GenCtx *c, bool bwd);
void cg_gen_scale(GenCtx *c, bool bwd);
void cg_gen_split(GenCtx *c, bool bwd);
void cg_gen_arange(GenCtx *c, bool bwd);
void cg_gen_moe(GenCtx *c, bool bwd);       /* cuda_gen_moe.c */
void cg_gen_loss_grad(GenCtx *c);

/* ---- cuda_gen_reduce.c ---- */
/* Column sums: out (+)= sum over rows of x (times mulby) viewed as [rows, cols]. */
void cg_colsum(GenCtx *c, int out, int x, int mulby, int64_t rows, int64_t cols, const char *role);
void cg_gen_grad_norm(GenCtx *c);

/* ---- one generator per primitive family: the whole op, or (linear, matmul,
 * embedding) one tile of it ---- */
/* cuda_gen_gemm.c: a product with one operand (c, a or b: CUDA_GEMM_WS)
 * the op's workspace at byte ws, the others tensors at element offsets;
 * beta 0 overwrites C, 1 adds to it. */
void cg_gemm_ws(GenCtx *c, DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int A, int64_t offa, int64_t lda,
                int B, int64_t offb, int64_t ldb, double beta, int C, int64_t offc, int64_t ldc, int64_t ws,
                const char *role);
void cg_gen_linear(GenCtx *c, bool bwd);    /* cuda_gen_gemm.c */
void cg_gen_matmul(GenCtx *c, bool bwd);    /* cuda_gen_gemm.c */
void cg_gen_norm(GenCtx *c, bool bwd);      /* cuda_gen_norm.c */
void cg_gen_rope(GenCtx *c, bool bwd);      /* cuda_gen_rope.c */
void cg_gen_attention(GenCtx *c, bool bwd); /* cuda_gen_attention.c */
void cg_gen_embedding(GenCtx *c, bool bwd); /* cuda_gen_embedding.c */
void cg_gen_xent(GenCtx *c, bool bwd);      /* cuda_gen_xent.c */
void cg_gen_linxent(GenCtx *c, bool bwd);   /* cuda_gen_xent.c */
void cg_gen_gmlp(GenCtx *c, bool bwd);      /* cuda_gen_gmlp.c */
void cg_gen_adam(GenCtx *c);                /* cuda_gen_adam.c */

#endif
