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
 *     tests/gpu/check_tiles.c tests/gpu/emu.c tests/gpu/emu_wrap.c runtime/base/arena.c runtime/plan/vocab.c \
 *     runtime/base/nearest.c lang/diag.c compiler/graph.c compiler/prim.c compiler/cuda_gen*.c compiler/nvrtc.c -o build/gpu/check_tiles -ldl -lm -lpthread
 *   build/gpu/check_tiles
 * Exit 0: every case passed; 1: a case differs; 2: setup error. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../unit/cuda_models.h"
#include "cuda_gen.h"
#include "emu_wrap.h"
#include "nvrtc.h"

int emu_launch(void (*fn)(void **), void **params, const unsigned grid[3], const unsigned block[3], char *err,
               size_t nerr);

static void die(const char *what) {
    fprintf(stderr, "check_tiles: %s\n", what);
    exit(2);
}

/* The emulated unit of launch k (built once per source, cached in $TMPDIR/zinf-emu by the source's hash). */
static void *unit_of(const CudaKernel *k) {
    static struct { char hash[65]; void *h; } mods[64];
    static int nmods;
    for (int i = 0; i < nmods; i++)
        if (!strcmp(mods[i].hash, k->hash)) return mods[i].h;
    const char *tmp = getenv("TMPDIR");
    char dir[256], cu[320], so[320], cmd[300], why[1024];
    snprintf(dir, sizeof dir, "%s/zinf-emu", tmp && *tmp ? tmp : "/tmp");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) die("cannot make the unit directory");
    /* the tiles' own name space: the header may change under check_kernels' names */
    snprintf(cu, sizeof cu, "%s/tiles-%.24s.cu", dir, k->hash);
    snprintf(so, sizeof so, "%s/tiles-%.24s.so", dir, k->hash);
    if (emu_compile_unit(k->source, cu, so, ZINF_EMU_HEADER, why, sizeof why) != 0) die(why);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h || nmods >= 64) die(h ? "too many units" : dlerror());
    memcpy(mods[nmods].hash, k->hash, 65);
    mods[nmods].h = h;
    return mods[nmods++].h;
}

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

static size_t esz(DType dt) { return dt == DT_F32 || dt == DT_I32 ? 4 : 2; }

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float ld(const void *p, DType dt, int64_t i) {
    if (dt == DT_F32) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int add_t(Case *c, const char *name, DType dt, TensorClass cls, int rank, int64_t d0, int64_t d1, int64_t d2) {
    int t = cm_t(&c->g, name, dt, cls, rank, d0, d1, d2);
    c->ts[c->nts++] = t;
    return t;
}

static void fill(Case *c, void **buf, unsigned seed) {
    for (int i = 0; i < c->nts; i++) {
        const GTensor *t = &c->g.tensors[c->ts[i]];
        void *p = calloc((size_t)t->numel, esz(t->dtype));
        if (!p) die("out of memory");
        for (int64_t j = 0; j < t->numel; j++) {
            seed = seed * 1103515245u + 12345u;
            float v = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
            if (c->ts[i] == c->ids) ((int32_t *)p)[j] = (int32_t)((seed >> 8) % (unsigned)c->V);
            else if (t->dtype == DT_F32) ((float *)p)[j] = v;
            else ((uint16_t *)p)[j] = to_bf16(v);
        }
        buf[c->ts[i]] = p;
    }
}

/* The launches of op (whole when ntiles is 0, else tile `tile`) on buf. */
static void run(Case *c, int op, int tile, int ntiles, void **buf) {
    CudaKernel ks[CUDA_OP_MAX_KERNELS];
    CudaOpInfo info;
    int n = ntiles ? cuda_gen_op_tile(&c->cg, &c->g, op, tile, ntiles, ks, CUDA_OP_MAX_KERNELS, &info, &c->d)
                   : cuda_gen_op(&c->cg, &c->g, op, ks, CUDA_OP_MAX_KERNELS, &info, &c->d);
    if (n < 0 || n > CUDA_OP_MAX_KERNELS) die(c->d.len ? c->d.items[c->d.len - 1].msg : "cuda_gen failed");
    uint8_t *ws = calloc((size_t)info.ws_bytes + 16, 1);
    if (!ws) die("out of memory");
    int64_t r0 = ntiles ? (int64_t)tile * (c->g.tensors[c->w].dims[0] / ntiles) * c->wrow : 0;
    for (int i = 0; i < n; i++) {
        const CudaKernel *k = &ks[i];
        void *ptrs[CUDA_MAX_ARGS], *params[CUDA_MAX_ARGS];
        long long i64[CUDA_MAX_ARGS];
        float f32[CUDA_MAX_ARGS];
        for (int j = 0; j < k->nargs; j++) {
            const CudaArg *a = &k->args[j];
            switch (a->kind) {
            case CARG_TENSOR: {
                uint8_t *p = buf[a->tensor];
                /* the executor's binding: the weight and its gradient hold the tile's rows */
                if (a->tensor == c->w || a->tensor == c->gw) p += r0 * (int64_t)esz(c->g.tensors[a->tensor].dtype);
                ptrs[j] = p + a->off;
                params[j] = &ptrs[j];
                break;
            }
            case CARG_WS: ptrs[j] = ws + a->ws_off; params[j] = &ptrs[j]; break;
            case CARG_NULL: ptrs[j] = NULL; params[j] = &ptrs[j]; break;
            case CARG_I64: i64[j] = a->i; params[j] = &i64[j]; break;
            case CARG_F32: f32[j] = a->f; params[j] = &f32[j]; break;
            case CARG_RT: f32[j] = 1.0f; params[j] = &f32[j]; break;
            case CARG_SEG: ptrs[j] = NULL; params[j] = &ptrs[j]; break;
            }
        }
        char name[160], err[256];
        snprintf(name, sizeof name, "emu_tramp_%s", k->entry);
        void (*fn)(void **);
        *(void **)&fn = dlsym(unit_of(k), name);
        if (!fn) die(name);
        if (emu_launch(fn, params, k->grid, k->block, err, sizeof err) != 0) die(err);
    }
    if (info.err_off >= 0 && ((int32_t *)(ws + info.err_off))[0]) die("the error word is set");
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
        double md = 0, mr = 0;
        for (int64_t j = 0; t != c->ids && j < x->numel; j++) {
            double a = ld(whole[t], x->dtype, j), b = ld(tiled[t], x->dtype, j);
            md = fmax(md, isnan(b) ? INFINITY : fabs(a - b));
            mr = fmax(mr, fabs(a));
        }
        double e = md / (mr > 0 ? mr : 1);
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
    arena_init(&c->a);
    diag_init(&c->d);
    graph_init(&c->g, &c->a);
    c->g.train.dtype = dt;
    CudaGenOptions o = {.kernel_dir = ZINF_STDLIB_DIR "/kernels"};
    cuda_gen_init(&c->cg, &c->a, &o);
}
static void case_free(Case *c) {
    diag_free(&c->d);
    arena_free(&c->a);
}

static int add_bwd(Case *c, int nfin, int y, int dy, int nout, const int *outs) {
    GOp b = c->g.ops[c->fwd];
    b.kind = OP_BWD;
    b.fwd = c->fwd;
    b.nfin = nfin;
    b.in[nfin] = y;
    b.in[nfin + 1] = dy;
    b.nin = nfin + 2;
    b.nout = nout;
    for (int i = 0; i < nout; i++) b.out[i] = outs[i];
    return graph_add_op(&c->g, &b);
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
    f.nin = 3;
    f.in[0] = x;
    f.in[1] = w;
    f.in[2] = b;
    f.nout = 1;
    f.out[0] = y;
    c.fwd = graph_add_op(&c.g, &f);
    int outs[3] = {dx, dw, db};
    c.bwd = add_bwd(&c, 3, y, dy, 3, outs);
    c.w = w;
    c.gw = dw;
    c.wrow = 96;
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
    f.nin = 2;
    f.in[0] = a;
    f.in[1] = b;
    f.nout = 1;
    f.out[0] = y;
    f.iattr[IA_MATMUL_TRANSPOSE_B] = 1;
    c.fwd = graph_add_op(&c.g, &f);
    int outs[2] = {da, db};
    c.bwd = add_bwd(&c, 2, y, dc, 2, outs);
    c.w = b;
    c.gw = db;
    c.wrow = 64;
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
    f.nin = 2;
    f.in[0] = tab;
    f.in[1] = ids;
    f.nout = 1;
    f.out[0] = y;
    c.fwd = graph_add_op(&c.g, &f);
    int outs[1] = {dt_};
    c.bwd = add_bwd(&c, 2, y, dy, 1, outs);
    c.w = tab;
    c.gw = dt_;
    c.wrow = 40;
    int fails = check(&c, 2) + check(&c, 4);
    case_free(&c);
    return fails;
}

int main(void) {
    int fails = 0;
    const DType dts[] = {DT_F32, DT_BF16};
    printf("%-34s %-5s %-7s  %10s  %6s\n", "case (tiles vs the whole op, emulated)", "dtype", "tiles", "error", "tol");
    for (int i = 0; i < 2; i++) fails += linear(dts[i]) + matmul_tb(dts[i]) + embedding(dts[i]);
    printf("%d failed\n", fails);
    return fails ? 1 : 0;
}
