/* check_tiles: the tile launches of tiled ops (cuda_gen_op_tile) RUN on the
 * host emulator (tests/gpu/emu.c, the real kernel sources compiled as C++)
 * and, tile after tile, give what the op's whole launches give on the same
 * emulator from the same values: linear with bias, matmul with transpose_b
 * and embedding, forward then backward, f32 and bf16. The whole op's
 * kernels are checked against the host reference by check_kernels, and the
 * host executor's run_tiled computes each tile as the whole op split the
 * same way, so this ties the GPU tiles to the host backend. What the
 * emulator adds over test_cuda_gen's index-by-index emulation: the real
 * zk_gemm (tensor-core and SIMT) on operands at odd byte offsets, and the
 * real embedding tile entries. The weight and its gradient are bound to
 * the tile's rows as the executor binds them (here: pointers into the
 * whole weight, row r0 on).
 *
 * No GPU, no NVRTC, no Check; needs c++ for the units. make test runs it
 * through tests/e2e/gpu_tiles_emu.sh, which also shows how to build it by hand
 * (ROOMS is one -I for each folder under runtime):
 *   mkdir -p build/gpu && cc -std=c11 -D_GNU_SOURCE -O1 -rdynamic -Ilang -Icompiler -Iruntime $ROOMS -Ibuild/gen \
 *     -DZINF_STDLIB_DIR="\"$PWD/stdlib\"" -DZINF_EMU_HEADER="\"$PWD/tests/gpu/emu.h\"" \
 *     tests/gpu/check_tiles.c tests/gpu/emu_check.c tests/gpu/emu.c tests/gpu/emu_wrap.c runtime/base/arena.c runtime/plan/vocab.c \
 *     runtime/base/nearest.c lang/diag.c compiler/graph.c compiler/prim.c compiler/cuda_gen*.c compiler/mlp_tile.c compiler/nvrtc.c -o build/gpu/check_tiles -ldl -lm -lpthread
 *   build/gpu/check_tiles
 * Exit 0: every case passed; 1: a case differs; 2: setup error. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../unit/cuda_models.h"
#include "cuda_gen.h"
#include "emu_check.h"
#include "nvrtc.h"

enum { MAXT = 12 };
typedef struct Case {
    const char *name;
    Arena a;
    DiagSink d;
    Graph g;
    CudaGen cg;
    DType dt;
    int fwd, bwd, w, gw, ids;
    int64_t wrow, V;
    int ts[MAXT], nts;
} Case;

static int add_t(Case *c, const char *name, DType dt, TensorClass cls, int rank, int64_t d0, int64_t d1, int64_t d2) {
    int t = cm_t(&c->g, name, dt, cls, rank, d0, d1, d2);
    c->ts[c->nts++] = t;
    return t;
}

static void fill(Case *c, void **buf, unsigned seed) {
    for (int i = 0; i < c->nts; i++) {
        const GTensor *t = &c->g.tensors[c->ts[i]];
        void *p = calloc((size_t)t->numel, ec_esz(t->dtype));
        if (!p) ec_die("out of memory");
        for (int64_t j = 0; j < t->numel; j++) {
            seed = seed * 1103515245u + 12345u;
            float v = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
            if (c->ts[i] == c->ids) ((int32_t *)p)[j] = (int32_t)((seed >> 8) % (unsigned)c->V);
            else if (t->dtype == DT_F32) ((float *)p)[j] = v;
            else ((uint16_t *)p)[j] = ec_to_bf16(v);
        }
        buf[c->ts[i]] = p;
    }
}

/* The buffers of a run, the weight and its gradient bound from row r0 on. */
typedef struct Bound {
    Case *c;
    void **buf;
    int64_t r0;
} Bound;

/* Where tensor t lies: the executor's binding, the weight and its gradient
 * holding the tile's rows. */
static uint8_t *tile_addr(void *ctx, int t) {
    const Bound *b = ctx;
    uint8_t *p = b->buf[t];
    if (t == b->c->w || t == b->c->gw) p += b->r0 * (int64_t)ec_esz(b->c->g.tensors[t].dtype);
    return p;
}

/* The launches of op (whole when ntiles is 0, else tile `tile`) on buf. */
static void run(Case *c, int op, int tile, int ntiles, void **buf) {
    CudaKernel ks[CUDA_OP_MAX_KERNELS];
    CudaOpInfo info;
    int n = ntiles ? cuda_gen_op_tile(&c->cg, &c->g, op, tile, ntiles, ks, CUDA_OP_MAX_KERNELS, &info, &c->d)
                   : cuda_gen_op(&c->cg, &c->g, op, ks, CUDA_OP_MAX_KERNELS, &info, &c->d);
    if (n < 0 || n > CUDA_OP_MAX_KERNELS) ec_die(c->d.len ? c->d.items[c->d.len - 1].msg : "cuda_gen failed");
    uint8_t *ws = calloc((size_t)info.ws_bytes + 16, 1);
    if (!ws) ec_die("out of memory");
    int64_t r0 = ntiles ? (int64_t)tile * (c->g.tensors[c->w].dims[0] / ntiles) * c->wrow : 0;
    Bound bd = {c, buf, r0};
    ec_run(ks, n, &info, ws, tile_addr, &bd);
    free(ws);
}

/* Whole and tiled from the same values: the normwise error of every tensor. */
static int check(Case *c, int ntiles) {
    void *whole[256] = {0}, *tiled[256] = {0};
    fill(c, whole, 5);
    fill(c, tiled, 5);
    run(c, c->fwd, 0, 0, whole);
    run(c, c->bwd, 0, 0, whole);
    for (int t = 0; t < ntiles; t++) run(c, c->fwd, t, ntiles, tiled);
    for (int t = 0; t < ntiles; t++) run(c, c->bwd, t, ntiles, tiled);
    double worst = 0, tol = c->dt == DT_F32 ? 1e-5 : 2e-2;
    const char *at = "";
    for (int i = 0; i < c->nts; i++) {
        int t = c->ts[i];
        const GTensor *x = &c->g.tensors[t];
        double e = t == c->ids ? 0 : ec_normwise(whole[t], tiled[t], x->dtype, x->numel);
        if (e > worst) {
            worst = e;
            at = x->name;
        }
        free(whole[t]);
        free(tiled[t]);
    }
    bool ok = worst <= tol;
    printf("%-34s %-5s %d tiles  %10.3g  %6.0e  %s %s\n", c->name, cuda_dtype_name(c->dt), ntiles, worst, tol,
           ok ? "PASS" : "FAIL", ok ? "" : at);
    return ok ? 0 : 1;
}

static void case_init(Case *c, const char *name, DType dt) {
    memset(c, 0, sizeof *c);
    c->name = name;
    c->dt = dt;
    c->ids = -1;
    ec_gen_init(&c->a, &c->d, &c->g, &c->cg, dt);
}
static void case_free(Case *c) {
    diag_free(&c->d);
    arena_free(&c->a);
}

/* The case's forward op f, reading in[0..nin) and writing y, and its
 * backward (then y and dy; writing outs[0..nout)); the tiled weight w and
 * its gradient gw, rows of wrow elements. */
static void add_ops(Case *c, GOp *f, int nin, const int *in, int y, int dy, int nout, const int *outs, int w, int gw,
                    int64_t wrow) {
    c->fwd = ec_add_fwd(&c->g, f, nin, in, y);
    c->bwd = ec_add_bwd(&c->g, c->fwd, nin, y, dy, nout, outs);
    c->w = w;
    c->gw = gw;
    c->wrow = wrow;
}

/* linear x [R, I] * w [I, O] + b; I = 72 cut in 2 (36 columns: 16-byte loads only where aligned) and 3 */
static int linear(DType dt) {
    Case c;
    case_init(&c, "linear 130x72x96+b", dt);
    int x = add_t(&c, "x", dt, TC_ACT, 2, 130, 72, 0), w = add_t(&c, "w", dt, TC_PARAM, 2, 72, 96, 0);
    int b = add_t(&c, "b", dt, TC_PARAM, 1, 96, 0, 0), y = add_t(&c, "y", dt, TC_ACT, 2, 130, 96, 0);
    int dy = add_t(&c, "dy", dt, TC_ACT, 2, 130, 96, 0), dx = add_t(&c, "dx", dt, TC_ACT, 2, 130, 72, 0);
    int dw = add_t(&c, "dw", dt, TC_GRAD, 2, 72, 96, 0), db = add_t(&c, "db", dt, TC_GRAD, 1, 96, 0, 0);
    GOp f = cm_op(PRIM_LINEAR);
    add_ops(&c, &f, 3, (int[]){x, w, b}, y, dy, 3, (int[]){dx, dw, db}, w, dw, 96);
    int fails = check(&c, 2) + check(&c, 3);
    case_free(&c);
    return fails;
}

/* matmul a [2, 40, 64] * b^T, b [96, 64] (the tied head): b's rows are output columns */
static int matmul_tb(DType dt) {
    Case c;
    case_init(&c, "matmul 2x40x64 * [96,64]^T", dt);
    int a = add_t(&c, "a", dt, TC_ACT, 3, 2, 40, 64), b = add_t(&c, "b", dt, TC_PARAM, 2, 96, 64, 0);
    int y = add_t(&c, "c", dt, TC_ACT, 3, 2, 40, 96), dc = add_t(&c, "dc", dt, TC_ACT, 3, 2, 40, 96);
    int da = add_t(&c, "da", dt, TC_ACT, 3, 2, 40, 64), db = add_t(&c, "db", dt, TC_GRAD, 2, 96, 64, 0);
    GOp f = cm_op(PRIM_MATMUL);
    f.iattr[IA_MATMUL_TRANSPOSE_B] = 1;
    add_ops(&c, &f, 2, (int[]){a, b}, y, dc, 2, (int[]){da, db}, b, db, 64);
    int fails = check(&c, 2) + check(&c, 4);
    case_free(&c);
    return fails;
}

/* embedding table [64, 40], ids [3, 30] */
static int embedding(DType dt) {
    Case c;
    case_init(&c, "embedding V64 D40 ids[3,30]", dt);
    int tab = add_t(&c, "table", dt, TC_PARAM, 2, 64, 40, 0), ids = add_t(&c, "ids", DT_I32, TC_INPUT, 2, 3, 30, 0);
    int y = add_t(&c, "y", dt, TC_ACT, 3, 3, 30, 40), dy = add_t(&c, "dy", dt, TC_ACT, 3, 3, 30, 40);
    int dt_ = add_t(&c, "dtable", dt, TC_GRAD, 2, 64, 40, 0);
    c.ids = ids;
    c.V = 64;
    GOp f = cm_op(PRIM_EMBEDDING);
    add_ops(&c, &f, 2, (int[]){tab, ids}, y, dy, 1, (int[]){dt_}, tab, dt_, 40);
    int fails = check(&c, 2) + check(&c, 4);
    case_free(&c);
    return fails;
}

int main(void) {
    int fails = 0;
    ec_init("check_tiles", "tiles"); /* the tiles' own name space: the header may change under check_kernels' names */
    const DType dts[] = {DT_F32, DT_BF16};
    printf("%-34s %-5s %-7s  %10s  %6s\n", "case (tiles vs the whole op, emulated)", "dtype", "tiles", "error", "tol");
    for (int i = 0; i < 2; i++) fails += linear(dts[i]) + matmul_tb(dts[i]) + embedding(dts[i]);
    printf("%d failed\n", fails);
    return fails ? 1 : 0;
}
