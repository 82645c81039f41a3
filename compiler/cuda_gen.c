#include "cuda_gen.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "nvrtc.h"

#ifndef ZINF_STDLIB_DIR
#define ZINF_STDLIB_DIR "stdlib"
#endif

const char *const cuda_rt_names[CRT_COUNT] = {"lr", "bc1", "bc2", "inv_loss_scale", "loss_grad"};

/* Tile rule constants (docs/kernels.md). */
enum {
    GEMM_BIG_TILES_MIN = 96,  /* 128x128 tiles when there are at least this many of them
                               * (3/4 of the SMs when CudaGenOptions.sm_count is given) */
    NORM_PARTS = 128,         /* blocks (partial sums) of a norm backward */
    SUMSQ_PARTS = 64,         /* partial sums per gradient in the grad norm */
    EW_MAX_BLOCKS = 16384,    /* grid cap of grid-stride loops */
    WS_ALIGN = 256,
};

const char *cuda_dtype_name(DType dt) {
    switch (dt) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    default: return "none";
    }
}

static const char *dtype_ctype(DType dt) {
    return dt == DT_BF16 ? "zk_bf16" : dt == DT_F16 ? "zk_f16" : "float";
}
static int dtype_code(DType dt) { return dt == DT_BF16 ? 1 : dt == DT_F16 ? 2 : 0; }

/* ---- unit sources ---------------------------------------------------------- */

struct CudaUnitCache {
    const char *family, *spec, *source;
    char hash[65];
    CudaUnitCache *next;
};

void cuda_gen_init(CudaGen *cg, Arena *a, const CudaGenOptions *opt) {
    memset(cg, 0, sizeof *cg);
    cg->arena = a;
    if (opt) cg->opt = *opt;
    const char *dir = cg->opt.kernel_dir;
    const char *env = getenv("ZINF_KERNEL_DIR");
    if (dir && *dir) snprintf(cg->kernel_dir, sizeof cg->kernel_dir, "%s", dir);
    else if (env && *env) snprintf(cg->kernel_dir, sizeof cg->kernel_dir, "%s", env);
    else snprintf(cg->kernel_dir, sizeof cg->kernel_dir, "%s/kernels", ZINF_STDLIB_DIR);
}

static const char *const families[] = {"elementwise", "reduce", "norm", "rope", "embedding",
                                       "xent", "adam", "attention", "gemm"};
enum { NFAMILIES = sizeof families / sizeof *families };

static char *read_text(Arena *a, const char *path, int *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err = errno;
        return NULL;
    }
    char *out = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
            out = arena_alloc(a, (size_t)n + 1);
            if (out && fread(out, 1, (size_t)n, f) != (size_t)n) out = NULL;
            if (out) out[n] = 0;
        }
    }
    if (!out) *err = ferror(f) ? EIO : ENOMEM;
    fclose(f);
    return out;
}

static const char *family_text(CudaGen *cg, const char *fam, DiagSink *d, Span sp) {
    int idx = -1;
    for (int i = 0; i < NFAMILIES; i++)
        if (!strcmp(families[i], fam)) idx = i;
    if (idx < 0) return NULL;
    if (!cg->common) {
        char path[1200];
        int err = 0;
        snprintf(path, sizeof path, "%s/common.cuh", cg->kernel_dir);
        cg->common = read_text(cg->arena, path, &err);
        if (!cg->common) {
            diag_error(d, sp, "cannot read kernel source %s: %s", path, strerror(err));
            diag_hint(d, "set ZINF_KERNEL_DIR to the stdlib/kernels directory");
            return NULL;
        }
    }
    if (!cg->family_text[idx]) {
        char path[1200];
        int err = 0;
        snprintf(path, sizeof path, "%s/%s.cu", cg->kernel_dir, fam);
        cg->family_text[idx] = read_text(cg->arena, path, &err);
        if (!cg->family_text[idx]) {
            diag_error(d, sp, "cannot read kernel source %s: %s", path, strerror(err));
            diag_hint(d, "set ZINF_KERNEL_DIR to the stdlib/kernels directory");
            return NULL;
        }
    }
    return cg->family_text[idx];
}

/* A growable string in the arena. */
typedef struct Buf {
    Arena *a;
    char *p;
    size_t len, cap;
} Buf;

static void buf_add(Buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = arena_alloc(b->a, nc);
        if (!np) return;
        if (b->len) memcpy(np, b->p, b->len);
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void buf_str(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }

/* The unit of family specialised by defines ("NAME VALUE" lines joined by
 * '\n'); spec is its human-readable name. */
static const CudaUnitCache *unit_get(CudaGen *cg, const char *fam, const char *spec, const char *defines,
                                     DiagSink *d, Span sp) {
    for (CudaUnitCache *u = cg->units; u; u = u->next)
        if (!strcmp(u->family, fam) && !strcmp(u->spec, spec)) return u;
    const char *text = family_text(cg, fam, d, sp);
    if (!text) return NULL;
    Buf b = {.a = cg->arena};
    buf_str(&b, "// zinf CUDA kernel unit: ");
    buf_str(&b, fam);
    buf_str(&b, " (");
    buf_str(&b, spec);
    buf_str(&b, ")\n// generated by zinfc from stdlib/kernels/");
    buf_str(&b, fam);
    buf_str(&b, ".cu and common.cuh; the ops using it are listed by zinfc's kernel listing\n");
    const char *p = defines;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        buf_str(&b, "#define ");
        buf_add(&b, p, n);
        buf_str(&b, "\n");
        p += n + (e ? 1 : 0);
    }
    /* paste common.cuh in place of its include line */
    const char *inc = "#include \"common.cuh\"";
    const char *at = strstr(text, inc);
    if (at) {
        buf_add(&b, text, (size_t)(at - text));
        buf_str(&b, cg->common);
        buf_str(&b, at + strlen(inc));
    } else {
        buf_str(&b, cg->common);
        buf_str(&b, text);
    }
    if (!b.p || cg->arena->failed) {
        diag_error(d, sp, "cuda_gen: out of memory");
        return NULL;
    }
    CudaUnitCache *u = ARENA_NEW(cg->arena, CudaUnitCache);
    if (!u) {
        diag_error(d, sp, "cuda_gen: out of memory");
        return NULL;
    }
    u->family = arena_strdup(cg->arena, fam);
    u->spec = arena_strdup(cg->arena, spec);
    u->source = b.p;
    unsigned char dg[32];
    nvrtc_sha256(b.p, b.len, dg);
    nvrtc_hex(dg, 32, u->hash);
    u->next = cg->units;
    cg->units = u;
    return u;
}

/* ---- building launches ------------------------------------------------------ */

typedef struct Ctx {
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
} Ctx;

static const GTensor *T_(Ctx *c, int t) { return &c->g->tensors[t]; }

static const char *where_str(Ctx *c) {
    const GOp *o = c->o;
    const char *scope = o->scope && *o->scope ? o->scope : "";
    const char *pname = (o->kind == OP_FWD || o->kind == OP_BWD || o->kind == OP_RECOMPUTE) && o->prim < PRIM_COUNT
                            ? prim_names[o->prim] : "";
    return arena_printf(c->cg->arena, "op %d %s%s%s%s%s%s", c->op, op_kind_names[o->kind], *pname ? " " : "", pname,
                        *scope ? " (" : "", scope, *scope ? ")" : "");
}

static CudaKernel *kbegin(Ctx *c, const char *fam, const char *spec, const char *defines, const char *entry,
                          const char *role) {
    if (c->failed) return &c->scratch;
    const CudaUnitCache *u = unit_get(c->cg, fam, spec, defines, c->d, c->o->span);
    CudaKernel *k = c->n < c->max ? &c->out[c->n] : &c->scratch;
    c->n++;
    memset(k, 0, sizeof *k);
    if (!u) {
        c->failed = true;
        return k;
    }
    k->entry = entry;
    k->family = u->family;
    k->spec = u->spec;
    k->source = u->source;
    memcpy(k->hash, u->hash, sizeof k->hash);
    k->comment = arena_printf(c->cg->arena, "%s: %s", c->where, role);
    k->op = c->op;
    k->unit = -1;
    k->span = c->o->span;
    k->grid[0] = k->grid[1] = k->grid[2] = 1;
    k->block[0] = k->block[1] = k->block[2] = 1;
    return k;
}

static CudaArg *arg_new(CudaKernel *k) {
    static CudaArg sink; /* never reached: the longest signature (zk_gemm) has 18 of CUDA_MAX_ARGS */
    if (k->nargs >= CUDA_MAX_ARGS) return &sink;
    CudaArg *a = &k->args[k->nargs++];
    memset(a, 0, sizeof *a);
    a->tensor = -1;
    return a;
}
static void arg_t(CudaKernel *k, int t) {
    CudaArg *a = arg_new(k);
    if (t < 0) a->kind = CARG_NULL;
    else {
        a->kind = CARG_TENSOR;
        a->tensor = t;
    }
}
/* Tensor t's address plus off bytes (a column slice of a row-major tensor). */
static void arg_t_off(CudaKernel *k, int t, int64_t off) {
    arg_t(k, t);
    if (t >= 0) k->args[k->nargs - 1].off = off;
}
static void arg_ws(CudaKernel *k, int64_t off) {
    CudaArg *a = arg_new(k);
    a->kind = CARG_WS;
    a->ws_off = off;
}
static void arg_i(CudaKernel *k, int64_t v) {
    CudaArg *a = arg_new(k);
    a->kind = CARG_I64;
    a->i = v;
}
static void arg_f(CudaKernel *k, double v) {
    CudaArg *a = arg_new(k);
    a->kind = CARG_F32;
    a->f = (float)v;
}
static void arg_rt(CudaKernel *k, CudaRtValue rt) {
    CudaArg *a = arg_new(k);
    a->kind = CARG_RT;
    a->rt = rt;
}

static int64_t ws_alloc(Ctx *c, int64_t bytes) {
    int64_t off = c->info.ws_bytes;
    c->info.ws_bytes += (bytes + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    return off;
}

static unsigned ew_blocks(int64_t n, int per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > EW_MAX_BLOCKS) b = EW_MAX_BLOCKS;
    return (unsigned)b;
}

static void fail(Ctx *c, const char *fmtstr, ...) __attribute__((format(printf, 2, 3)));
static void fail(Ctx *c, const char *fmtstr, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmtstr);
    vsnprintf(msg, sizeof msg, fmtstr, ap);
    va_end(ap);
    diag_error(c->d, c->o->span, "%s: %s", c->where, msg);
    c->failed = true;
}

/* A grid dimension, or a diagnostic when it exceeds the launch limit. */
static unsigned gdim(Ctx *c, int64_t v, int64_t lim) {
    if (v < 1) return 1;
    if (v > lim) {
        fail(c, "a launch needs %" PRId64 " blocks along one grid axis (limit %" PRId64 ")", v, lim);
        return 1;
    }
    return (unsigned)v;
}

/* Specialisation of the families that take only a dtype. */
static void dt_spec(Ctx *c, DType dt, const char **spec, const char **defines) {
    if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16) dt = DT_F32;
    *spec = cuda_dtype_name(dt);
    *defines = arena_printf(c->cg->arena, "ZK_T %s\nZK_DT %d", dtype_ctype(dt), dtype_code(dt));
}

static CudaKernel *kdt(Ctx *c, const char *fam, DType dt, const char *entry, const char *role) {
    const char *spec, *defs;
    dt_spec(c, dt, &spec, &defs);
    return kbegin(c, fam, spec, defs, entry, role);
}

static bool float_dtype(DType dt) { return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16; }

/* All of ts[] (>= 0 entries) share dtype dt and it is a float dtype. */
static bool same_dtype(Ctx *c, DType dt, const int *ts, int n) {
    if (!float_dtype(dt)) {
        fail(c, "dtype %s is not supported by the CUDA kernels", cuda_dtype_name(dt));
        return false;
    }
    for (int i = 0; i < n; i++)
        if (ts[i] >= 0 && T_(c, ts[i])->dtype != dt) {
            fail(c, "operands of mixed dtypes (%s and %s) are not supported by the CUDA kernels",
                 cuda_dtype_name(dt), cuda_dtype_name(T_(c, ts[i])->dtype));
            return false;
        }
    return true;
}

static int64_t last_dim(const GTensor *t) { return t->rank ? t->dims[t->rank - 1] : 1; }

static void elementwise_grid(CudaKernel *k, int64_t n) {
    k->grid[0] = ew_blocks(n, 256);
    k->block[0] = 256;
}

static void k_fill(Ctx *c, int t, double v, const char *role) {
    const GTensor *x = T_(c, t);
    CudaKernel *k;
    if (x->dtype == DT_I32) {
        k = kdt(c, "elementwise", c->g->train.dtype, "zk_fill_i32", role);
        arg_t(k, t);
        arg_i(k, x->numel);
        arg_i(k, (int64_t)v);
    } else {
        k = kdt(c, "elementwise", x->dtype, "zk_fill", role);
        arg_t(k, t);
        arg_i(k, x->numel);
        arg_f(k, v);
    }
    elementwise_grid(k, x->numel);
}

static void k_fill_ws_f32(Ctx *c, DType unit_dt, int64_t off, int64_t n, const char *role) {
    CudaKernel *k = kdt(c, "elementwise", unit_dt, "zk_fill_f32", role);
    arg_ws(k, off);
    arg_i(k, n);
    arg_f(k, 0.0);
    elementwise_grid(k, n);
}

static int64_t k_err_word(Ctx *c, DType unit_dt, const char *what) {
    int64_t off = ws_alloc(c, 16);
    c->info.err_off = off;
    c->info.err_what = what;
    CudaKernel *k = kdt(c, "elementwise", unit_dt, "zk_fill_i32", "clear the error word");
    arg_ws(k, off);
    arg_i(k, 4);
    arg_i(k, 0);
    k->grid[0] = 1;
    k->block[0] = 32;
    return off;
}

/* ---- gemm --------------------------------------------------------------------- */

typedef struct Gemm {
    int C, A, B, bias;           /* tensor ids (bias -1) */
    int64_t offC, offA, offB;    /* elements past each operand's start (a tile's columns) */
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    int64_t batch, sA, sB, sC;   /* output batches (grid.z) */
    int64_t rbatch, rsA, rsB;    /* summed batches */
    double beta;
} Gemm;

static void k_gemm(Ctx *c, const Gemm *p, const char *role) {
    DType dt = T_(c, p->C)->dtype;
    int ts[3] = {p->A, p->B, p->bias};
    if (!same_dtype(c, dt, ts, 3)) return;
    if (p->batch > 65535) {
        fail(c, "%" PRId64 " batched products exceed the grid limit (65535)", p->batch);
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
        fail(c, "M = %" PRId64 " exceeds the gemm grid limit", p->M);
        return;
    }
    const char *spec = arena_printf(c->cg->arena, "%s %s ta=%d tb=%d tile=%dx%dx%d", cuda_dtype_name(dt),
                                    tc ? "mma.sync" : "simt", p->ta, p->tb, bm, bn, bk);
    const char *defs = arena_printf(c->cg->arena,
                                    "ZK_T %s\nZK_DT %d\nZK_TC %d\nZK_TA %d\nZK_TB %d\nZK_BM %d\nZK_BN %d\nZK_BK %d\n"
                                    "ZK_WM %d\nZK_WN %d",
                                    dtype_ctype(dt), dtype_code(dt), tc, p->ta, p->tb, bm, bn, bk, wm, wn);
    CudaKernel *k = kbegin(c, "gemm", spec, defs, "zk_gemm", role);
    k->tile_m = bm;
    k->tile_n = bn;
    k->tile_k = bk;
    k->grid[0] = gdim(c, ((p->N + bn - 1) / bn), 0x7fffffff);
    k->grid[1] = gdim(c, ((p->M + bm - 1) / bm), 65535);
    k->grid[2] = gdim(c, p->batch, 65535);
    k->block[0] = tc ? (unsigned)((bm / wm) * (bn / wn) * 32) : 256;
    int64_t es = dt == DT_F32 ? 4 : 2;
    arg_t_off(k, p->C, p->offC * es);
    arg_t_off(k, p->A, p->offA * es);
    arg_t_off(k, p->B, p->offB * es);
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
}

static Gemm gemm0(void) {
    Gemm p;
    memset(&p, 0, sizeof p);
    p.bias = -1;
    p.batch = 1;
    p.rbatch = 1;
    return p;
}

/* Column sums: out (+)= sum over rows of x (times mulby) viewed as [rows, cols]. */
static void k_colsum(Ctx *c, int out, int x, int mulby, int64_t rows, int64_t cols, const char *role) {
    DType dt = T_(c, x)->dtype;
    int64_t parts = rows / 64;
    if (parts < 1) parts = 1;
    if (parts > 64) parts = 64;
    int64_t rpp = (rows + parts - 1) / parts;
    parts = (rows + rpp - 1) / rpp;
    if (parts < 1) parts = 1;
    int64_t off = ws_alloc(c, parts * cols * 4);
    CudaKernel *k = kdt(c, "reduce", dt, "zk_colsum_partial", role);
    k->grid[0] = gdim(c, ((cols + 31) / 32), 0x7fffffff);
    k->grid[1] = gdim(c, parts, 65535);
    k->block[0] = 32;
    k->block[1] = 8;
    arg_ws(k, off);
    arg_t(k, x);
    arg_t(k, mulby);
    arg_i(k, rows);
    arg_i(k, cols);
    arg_i(k, rpp);
    k = kdt(c, "reduce", T_(c, out)->dtype, "zk_colsum_final", role);
    elementwise_grid(k, cols);
    arg_t(k, out);
    arg_ws(k, off);
    arg_i(k, parts);
    arg_i(k, cols);
    arg_f(k, 1.0);
    arg_i(k, 1);
}

/* ---- primitives --------------------------------------------------------------- */

static void gen_linear(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int nfin = bwd ? o->nfin : o->nin;
    int x = o->in[0], w = o->in[1], b = nfin >= 3 ? o->in[2] : -1;
    const GTensor *X = T_(c, x), *W = T_(c, w);
    if (W->rank != 2) {
        fail(c, "linear weight must be 2-D");
        return;
    }
    int64_t I = W->dims[0], O = W->dims[1];
    if (last_dim(X) != I) {
        fail(c, "linear: x's last dim %" PRId64 " != weight's rows %" PRId64, last_dim(X), I);
        return;
    }
    int64_t rows = X->numel / I;
    if (!bwd) {
        Gemm p = gemm0();
        p.C = o->out[0];
        p.A = x;
        p.B = w;
        p.bias = b;
        p.M = rows;
        p.N = O;
        p.K = I;
        p.lda = I;
        p.ldb = O;
        p.ldc = O;
        k_gemm(c, &p, b >= 0 ? "y = x*w + b" : "y = x*w");
        return;
    }
    int dy = o->in[nfin + 1];
    if (o->out[0] >= 0) {
        Gemm p = gemm0();
        p.C = o->out[0];
        p.A = dy;
        p.B = w;
        p.tb = true;
        p.M = rows;
        p.N = I;
        p.K = O;
        p.lda = O;
        p.ldb = O;
        p.ldc = I;
        p.beta = 1;
        k_gemm(c, &p, "dx += dy*w^T");
    }
    if (o->nout > 1 && o->out[1] >= 0) {
        Gemm p = gemm0();
        p.C = o->out[1];
        p.A = x;
        p.ta = true;
        p.B = dy;
        p.M = I;
        p.N = O;
        p.K = rows;
        p.lda = I;
        p.ldb = O;
        p.ldc = O;
        p.beta = 1;
        k_gemm(c, &p, "dw += x^T*dy");
    }
    if (o->nout > 2 && o->out[2] >= 0) k_colsum(c, o->out[2], dy, -1, rows, O, "db += sum_rows dy");
}

static void gen_matmul(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int a = o->in[0], b = o->in[1];
    const GTensor *A = T_(c, a), *Bt = T_(c, b);
    bool ta = o->iattr[0] != 0, tb = o->iattr[1] != 0;
    if (Bt->rank != 2) {
        fail(c, "matmul: b must be 2-D (got rank %d)", Bt->rank);
        return;
    }
    if (A->rank < 1) {
        fail(c, "matmul: a must have rank >= 1");
        return;
    }
    if (ta && A->rank < 2) {
        fail(c, "matmul: transpose_a needs a of rank >= 2");
        return;
    }
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
        fail(c, "matmul: inner dims differ (%" PRId64 " and %" PRId64 ")", K, Kb);
        return;
    }
    int64_t lda_f = ta ? M : K, ldb_f = tb ? K : N;
    if (!bwd) {
        Gemm p = gemm0();
        p.C = o->out[0];
        p.A = a;
        p.ta = ta;
        p.B = b;
        p.tb = tb;
        p.M = M;
        p.N = N;
        p.K = K;
        p.lda = lda_f;
        p.ldb = ldb_f;
        p.ldc = N;
        p.batch = batch;
        p.sA = ta ? K * M : 0;
        p.sC = ta ? M * N : 0;
        k_gemm(c, &p, "c = op(a)*op(b)");
        return;
    }
    int dc = o->in[o->nfin + 1];
    if (o->out[0] >= 0) {
        Gemm p = gemm0();
        p.C = o->out[0];
        p.beta = 1;
        if (!ta) {
            p.A = dc;
            p.lda = N;
            p.B = b;
            p.tb = !tb;
            p.ldb = ldb_f;
            p.M = M;
            p.N = K;
            p.K = N;
            p.ldc = K;
            k_gemm(c, &p, "da += dc*op(b)^T");
        } else {
            p.A = b;
            p.ta = tb;
            p.lda = tb ? K : N;
            p.B = dc;
            p.tb = true;
            p.ldb = N;
            p.M = K;
            p.N = M;
            p.K = N;
            p.ldc = M;
            p.batch = batch;
            p.sB = M * N;
            p.sC = K * M;
            k_gemm(c, &p, "da += (op(b)*dc^T) per batch");
        }
    }
    if (o->nout > 1 && o->out[1] >= 0) {
        Gemm p = gemm0();
        p.C = o->out[1];
        p.beta = 1;
        if (ta) {
            p.rbatch = batch;
        }
        if (!tb) {
            p.A = a;
            p.ta = !ta;
            p.lda = lda_f;
            p.B = dc;
            p.ldb = N;
            p.M = K;
            p.N = N;
            p.K = M;
            p.ldc = N;
            if (ta) {
                p.rsA = K * M;
                p.rsB = M * N;
            }
            k_gemm(c, &p, "db += op(a)^T*dc");
        } else {
            p.A = dc;
            p.ta = true;
            p.lda = N;
            p.B = a;
            p.tb = ta;
            p.ldb = ta ? M : K;
            p.M = N;
            p.N = K;
            p.K = M;
            p.ldc = K;
            if (ta) {
                p.rsA = M * N;
                p.rsB = K * M;
            }
            k_gemm(c, &p, "db += dc^T*op(a)");
        }
    }
}

static void gen_binary(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int a = o->in[0], b = o->in[1];
    int64_t na = T_(c, a)->numel, nb = T_(c, b)->numel;
    int64_t n = na > nb ? na : nb;
    int64_t small = na < nb ? na : nb;
    bool mul = o->prim == PRIM_MUL;
    if (small <= 0 || n % small != 0) {
        fail(c, "%s: sizes %" PRId64 " and %" PRId64 " do not broadcast", prim_names[o->prim], na, nb);
        return;
    }
    DType dt = T_(c, a)->dtype;
    if (!bwd) {
        int ts[3] = {a, b, o->out[0]};
        if (!same_dtype(c, dt, ts, 3)) return;
        CudaKernel *k = kdt(c, "elementwise", dt, "zk_binary_fwd", mul ? "y = a * b" : "y = a + b");
        elementwise_grid(k, n);
        arg_t(k, o->out[0]);
        arg_t(k, a);
        arg_t(k, b);
        arg_i(k, n);
        arg_i(k, na);
        arg_i(k, nb);
        arg_i(k, mul);
        return;
    }
    int dy = o->in[o->nfin + 1];
    int ts[5] = {a, b, dy, o->out[0], o->nout > 1 ? o->out[1] : -1};
    if (!same_dtype(c, dt, ts, 5)) return;
    for (int i = 0; i < 2 && i < o->nout; i++) {
        int gx = o->out[i], x = i ? b : a, other = i ? a : b;
        if (gx < 0) continue;
        int64_t nx = T_(c, x)->numel, no = T_(c, other)->numel;
        if (nx == n) {
            CudaKernel *k = kdt(c, "elementwise", dt, "zk_binary_bwd_full",
                                mul ? (i ? "db += dy * a" : "da += dy * b") : (i ? "db += dy" : "da += dy"));
            elementwise_grid(k, n);
            arg_t(k, gx);
            arg_t(k, dy);
            arg_t(k, other);
            arg_i(k, n);
            arg_i(k, no);
            arg_i(k, mul);
        } else {
            k_colsum(c, gx, dy, mul ? other : -1, n / nx, nx,
                     mul ? "d(broadcast operand) += sum over broadcast dims of dy * other"
                         : "d(broadcast operand) += sum over broadcast dims of dy");
        }
    }
}

static double eps_of(const GOp *o) { return o->fattr[0] > 0 ? o->fattr[0] : 1e-5; }

static void gen_norm(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    bool ln = o->prim == PRIM_LAYERNORM;
    int nfin = bwd ? o->nfin : o->nin;
    int x = o->in[0], g = nfin >= 2 ? o->in[1] : -1, bb = ln && nfin >= 3 ? o->in[2] : -1;
    const GTensor *X = T_(c, x);
    /* rmsnorm with heads = H: the same kernels over rows of hd = D/H values */
    int64_t heads = !ln && o->iattr[0] > 1 ? o->iattr[0] : 1;
    if (last_dim(X) % heads != 0) {
        fail(c, "rmsnorm: heads = %" PRId64 " does not divide the last dimension %" PRId64, heads, last_dim(X));
        return;
    }
    int64_t D = last_dim(X) / heads, rows = X->numel / (D ? D : 1);
    DType dt = X->dtype;
    if (g >= 0 && T_(c, g)->numel != D) {
        fail(c, "%s: gain has %" PRId64 " elements, expected %" PRId64, prim_names[o->prim], T_(c, g)->numel, D);
        return;
    }
    if (!bwd) {
        int ts[4] = {x, g, bb, o->out[0]};
        if (!same_dtype(c, dt, ts, 4)) return;
        CudaKernel *k = kdt(c, "norm", dt, ln ? "zk_layernorm_fwd" : "zk_rmsnorm_fwd",
                            ln ? "y = (x - mean)/sqrt(var + eps)*g + b" : "y = x/sqrt(mean(x^2) + eps)*g");
        k->grid[0] = gdim(c, (rows > 0 ? rows : 1), 0x7fffffff);
        k->block[0] = 256;
        arg_t(k, o->out[0]);
        arg_t(k, x);
        arg_t(k, g);
        if (ln) arg_t(k, bb);
        arg_i(k, rows);
        arg_i(k, D);
        arg_f(k, eps_of(o));
        return;
    }
    int dy = o->in[nfin + 1];
    int dx = o->out[0], dg = o->nout > 1 ? o->out[1] : -1, db = ln && o->nout > 2 ? o->out[2] : -1;
    int ts[6] = {x, g, dy, dx, dg, db};
    if (!same_dtype(c, dt, ts, 6)) return;
    int64_t P = rows < NORM_PARTS ? rows : NORM_PARTS;
    if (P < 1) P = 1;
    int nparts = ln ? 2 : 1;
    int64_t off = 0;
    if (dg >= 0 || db >= 0) {
        off = ws_alloc(c, nparts * P * D * 4);
        k_fill_ws_f32(c, dt, off, nparts * P * D, "zero the parameter-gradient partials");
    }
    CudaKernel *k = kdt(c, "norm", dt, ln ? "zk_layernorm_bwd" : "zk_rmsnorm_bwd",
                        ln ? "dx += layernorm vjp; partials of dg, db" : "dx += rmsnorm vjp; partials of dg");
    k->grid[0] = gdim(c, P, 0x7fffffff);
    k->block[0] = 256;
    arg_t(k, dx);
    arg_ws(k, off);
    arg_t(k, x);
    arg_t(k, g);
    arg_t(k, dy);
    arg_i(k, rows);
    arg_i(k, D);
    arg_f(k, eps_of(o));
    arg_i(k, dx >= 0);
    arg_i(k, dg >= 0);
    if (ln) arg_i(k, db >= 0);
    for (int i = 0; i < nparts; i++) {
        int t = i ? db : dg;
        if (t < 0) continue;
        k = kdt(c, "reduce", dt, "zk_colsum_final", i ? "db += sum of partials" : "dg += sum of partials");
        elementwise_grid(k, D);
        arg_t(k, t);
        arg_ws(k, off + (int64_t)i * P * D * 4);
        arg_i(k, P);
        arg_i(k, D);
        arg_f(k, 1.0);
        arg_i(k, 1);
    }
}

static void gen_act(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    bool gelu = o->prim == PRIM_GELU;
    int x = o->in[0];
    DType dt = T_(c, x)->dtype;
    int64_t n = T_(c, x)->numel;
    if (!bwd) {
        int ts[2] = {x, o->out[0]};
        if (!same_dtype(c, dt, ts, 2)) return;
        CudaKernel *k = kdt(c, "elementwise", dt, gelu ? "zk_gelu_fwd" : "zk_silu_fwd", gelu ? "y = gelu(x)" : "y = silu(x)");
        elementwise_grid(k, n);
        arg_t(k, o->out[0]);
        arg_t(k, x);
        arg_i(k, n);
        return;
    }
    if (o->out[0] < 0) return;
    int dy = o->in[o->nfin + 1];
    int ts[3] = {x, dy, o->out[0]};
    if (!same_dtype(c, dt, ts, 3)) return;
    CudaKernel *k = kdt(c, "elementwise", dt, gelu ? "zk_gelu_bwd" : "zk_silu_bwd",
                        gelu ? "dx += gelu'(x)*dy" : "dx += silu'(x)*dy");
    elementwise_grid(k, n);
    arg_t(k, o->out[0]);
    arg_t(k, x);
    arg_t(k, dy);
    arg_i(k, n);
}

static void gen_rope(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int x = o->in[0];
    const GTensor *X = T_(c, x);
    int64_t H = o->iattr[0], scaling = o->iattr[1];
    double theta = o->fattr[0] > 0 ? o->fattr[0] : 10000.0;
    if (X->rank < 2 || H <= 0 || last_dim(X) % H != 0 || (last_dim(X) / H) % 2 != 0) {
        fail(c, "rope needs x [B, T, H*hd] with heads dividing the last dim and hd even");
        return;
    }
    if (scaling < ROPE_NONE || scaling > ROPE_LLAMA3) {
        fail(c, "rope: unknown scaling %" PRId64, scaling);
        return;
    }
    int64_t C = last_dim(X), Tn = X->dims[X->rank - 2], B = X->numel / (C * Tn), hd = C / H;
    int y = o->out[0];
    int src = bwd ? o->in[o->nfin + 1] : x;
    if (y < 0) return;
    int ts[3] = {x, y, src};
    if (!same_dtype(c, X->dtype, ts, 3)) return;
    CudaKernel *k = kdt(c, "rope", X->dtype, "zk_rope", bwd ? "dx += rotate(dy, -t*f)" : "y = rotate(x, t*f)");
    elementwise_grid(k, X->numel / 2);
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
    arg_f(k, scaling ? o->fattr[1] : 1.0);
    arg_f(k, scaling == ROPE_LLAMA3 ? o->fattr[2] : 1.0);
    arg_f(k, scaling == ROPE_LLAMA3 ? o->fattr[3] : 4.0);
    arg_f(k, scaling == ROPE_LLAMA3 ? (double)o->iattr[2] : 8192.0);
}

static void gen_attention(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int q = o->in[0], kk = o->in[1], v = o->in[2];
    const GTensor *Q = T_(c, q), *Kt = T_(c, kk);
    int64_t H = o->iattr[0], KV = o->iattr[1] > 0 ? o->iattr[1] : H;
    if (Q->rank != 3 || Kt->rank != 3 || H <= 0 || KV <= 0 || H % KV != 0 || Q->dims[2] % H != 0) {
        fail(c, "attention needs q [B, T, H*hd], k and v [B, T, KV*hd], H a multiple of KV");
        return;
    }
    int64_t B = Q->dims[0], Tn = Q->dims[1], hd = Q->dims[2] / H;
    if (Kt->dims[2] != KV * hd || Kt->dims[1] != Tn || Kt->dims[0] != B) {
        fail(c, "attention: k is [%" PRId64 ", %" PRId64 ", %" PRId64 "], expected [%" PRId64 ", %" PRId64
                ", %" PRId64 "]",
             Kt->dims[0], Kt->dims[1], Kt->dims[2], B, Tn, KV * hd);
        return;
    }
    if (hd % 32 != 0 || hd > 128) {
        fail(c, "attention head dim %" PRId64 ": the CUDA kernel supports multiples of 32 up to 128", hd);
        return;
    }
    if (B > 65535 || H > 65535) {
        fail(c, "attention: batch or heads exceed the grid limit (65535)");
        return;
    }
    DType dt = Q->dtype;
    int rf = hd <= 64 ? 8 : 4, rb = hd <= 64 ? 4 : 2;
    bool tca = dt != DT_F32; /* forward on the tensor cores: 64 query rows per block */
    const char *spec = arena_printf(c->cg->arena, "%s hd=%" PRId64 " %s rows/warp=%d/%d", cuda_dtype_name(dt), hd,
                                    tca ? "fwd=mma.sync" : "fwd=simt", rf, rb);
    const char *defs = arena_printf(c->cg->arena,
                                    "ZK_T %s\nZK_DT %d\nZK_HD %" PRId64 "\nZK_RPW_FWD %d\nZK_RPW_BWD %d\nZK_TC_ATTN %d",
                                    dtype_ctype(dt), dtype_code(dt), hd, rf, rb, tca);
    float scale = (float)(1.0 / sqrt((double)hd));
    int qbf = tca ? 64 : 4 * rf, qbb = 4 * rb;
    if (!bwd) {
        int ts[4] = {q, kk, v, o->out[0]};
        if (!same_dtype(c, dt, ts, 4)) return;
        CudaKernel *k = kbegin(c, "attention", spec, defs, "zk_attn_fwd", "o = causal softmax(q k^T / sqrt(hd)) v");
        k->grid[0] = gdim(c, ((Tn + qbf - 1) / qbf), 0x7fffffff);
        k->grid[1] = gdim(c, H, 65535);
        k->grid[2] = gdim(c, B, 65535);
        k->block[0] = 128;
        arg_t(k, o->out[0]);
        arg_t(k, -1);
        arg_t(k, q);
        arg_t(k, kk);
        arg_t(k, v);
        arg_i(k, 1);
        arg_i(k, B);
        arg_i(k, Tn);
        arg_i(k, H);
        arg_i(k, KV);
        arg_f(k, scale);
        return;
    }
    int out = o->in[o->nfin], dout = o->in[o->nfin + 1];
    int dq = o->out[0], dk = o->nout > 1 ? o->out[1] : -1, dv = o->nout > 2 ? o->out[2] : -1;
    int ts[8] = {q, kk, v, out, dout, dq, dk, dv};
    if (!same_dtype(c, dt, ts, 8)) return;
    int64_t nst = B * H * Tn;
    int64_t lse = ws_alloc(c, nst * 4), delta = ws_alloc(c, nst * 4);
    CudaKernel *k = kbegin(c, "attention", spec, defs, "zk_attn_fwd", "recompute the log-sum-exp of each query row");
    k->grid[0] = gdim(c, ((Tn + qbf - 1) / qbf), 0x7fffffff);
    k->grid[1] = gdim(c, H, 65535);
    k->grid[2] = gdim(c, B, 65535);
    k->block[0] = 128;
    arg_t(k, -1);
    arg_ws(k, lse);
    arg_t(k, q);
    arg_t(k, kk);
    arg_t(k, v);
    arg_i(k, 0);
    arg_i(k, B);
    arg_i(k, Tn);
    arg_i(k, H);
    arg_i(k, KV);
    arg_f(k, scale);
    k = kbegin(c, "attention", spec, defs, "zk_attn_bwd_pre", "delta = rowsum(dO * O)");
    k->grid[0] = gdim(c, ((nst + 7) / 8), 0x7fffffff);
    k->block[0] = 256;
    arg_ws(k, delta);
    arg_t(k, out);
    arg_t(k, dout);
    arg_i(k, B);
    arg_i(k, Tn);
    arg_i(k, H);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0 && dq < 0) continue;
        if (pass == 1 && dk < 0 && dv < 0) continue;
        k = kbegin(c, "attention", spec, defs, pass ? "zk_attn_bwd_dkdv" : "zk_attn_bwd_dq",
                   pass ? "dk, dv += (summed over the query heads of each kv head)" : "dq += ds k * scale");
        int rows_per_block = tca ? 64 : qbb; /* the tensor-core dq and dk/dv own 64 rows */
        k->grid[0] = gdim(c, ((Tn + rows_per_block - 1) / rows_per_block), 0x7fffffff);
        k->grid[1] = gdim(c, (pass ? KV : H), 65535);
        k->grid[2] = gdim(c, B, 65535);
        k->block[0] = 128;
        if (pass) {
            arg_t(k, dk);
            arg_t(k, dv);
        } else {
            arg_t(k, dq);
        }
        arg_t(k, q);
        arg_t(k, kk);
        arg_t(k, v);
        arg_t(k, dout);
        arg_ws(k, lse);
        arg_ws(k, delta);
        arg_i(k, B);
        arg_i(k, Tn);
        arg_i(k, H);
        arg_i(k, KV);
        arg_f(k, scale);
    }
}

static void gen_embedding(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int table = o->in[0], ids = o->in[1];
    const GTensor *Tb = T_(c, table), *I = T_(c, ids);
    if (Tb->rank != 2 || I->dtype != DT_I32) {
        fail(c, "embedding needs a 2-D table and i32 ids");
        return;
    }
    int64_t V = Tb->dims[0], D = Tb->dims[1], n = I->numel;
    DType dt = Tb->dtype;
    unsigned blocks = (unsigned)(n < 65535 * 16 ? (n > 0 ? n : 1) : 65535 * 16);
    if (!bwd) {
        int ts[2] = {table, o->out[0]};
        if (!same_dtype(c, dt, ts, 2)) return;
        int64_t err = k_err_word(c, dt, "embedding id");
        CudaKernel *k = kdt(c, "embedding", dt, "zk_embed_fwd", "y[i] = table[ids[i]]");
        k->grid[0] = blocks;
        k->block[0] = 128;
        arg_t(k, o->out[0]);
        arg_t(k, table);
        arg_t(k, ids);
        arg_i(k, n);
        arg_i(k, V);
        arg_i(k, D);
        arg_ws(k, err);
        return;
    }
    int dtab = o->out[0], dy = o->in[o->nfin + 1];
    if (dtab < 0) return;
    int ts[3] = {table, dy, dtab};
    if (!same_dtype(c, dt, ts, 3)) return;
    int64_t acc = -1;
    if (dt != DT_F32) {
        acc = ws_alloc(c, V * D * 4);
        k_fill_ws_f32(c, dt, acc, V * D, "zero the fp32 accumulator of the table gradient");
    }
    CudaKernel *k = kdt(c, "embedding", dt, "zk_embed_bwd",
                        dt == DT_F32 ? "dtable[ids[i]] += dy[i] (fp32 atomics)"
                                     : "acc[ids[i]] += dy[i] (fp32 atomics into the workspace)");
    k->grid[0] = blocks;
    k->block[0] = 128;
    if (dt == DT_F32) arg_t(k, dtab);
    else arg_ws(k, acc);
    arg_t(k, dy);
    arg_t(k, ids);
    arg_i(k, n);
    arg_i(k, V);
    arg_i(k, D);
    if (dt != DT_F32) {
        k = kdt(c, "elementwise", dt, "zk_cast_from_f32", "dtable += acc");
        elementwise_grid(k, V * D);
        arg_t(k, dtab);
        arg_ws(k, acc);
        arg_i(k, V * D);
        arg_f(k, 1.0);
        arg_i(k, 1);
    }
}

static void gen_xent(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int lg = o->in[0], tg = o->in[1];
    const GTensor *L = T_(c, lg);
    int64_t V = last_dim(L), N = L->numel / (V ? V : 1);
    DType dt = L->dtype;
    if (T_(c, tg)->dtype != DT_I32 || T_(c, tg)->numel != N) {
        fail(c, "cross_entropy needs i32 targets with one per row of logits");
        return;
    }
    if (!float_dtype(dt)) {
        fail(c, "cross_entropy: logits dtype %s is not supported", cuda_dtype_name(dt));
        return;
    }
    if (N > 0x7fffffff) {
        fail(c, "cross_entropy: too many rows for the grid");
        return;
    }
    if (!bwd) {
        if (T_(c, o->out[0])->dtype != DT_F32) {
            fail(c, "cross_entropy: the loss must be f32");
            return;
        }
        int64_t err = k_err_word(c, dt, "cross_entropy target");
        int64_t rl = ws_alloc(c, N * 4);
        CudaKernel *k = kdt(c, "xent", dt, "zk_xent_fwd", "row_loss = logsumexp(logits) - logits[target]");
        k->grid[0] = gdim(c, (N > 0 ? N : 1), 0x7fffffff);
        k->block[0] = 256;
        arg_ws(k, rl);
        arg_t(k, lg);
        arg_t(k, tg);
        arg_i(k, N);
        arg_i(k, V);
        arg_ws(k, err);
        k = kdt(c, "xent", dt, "zk_xent_mean", "loss = mean(row_loss)");
        k->block[0] = 256;
        arg_t(k, o->out[0]);
        arg_ws(k, rl);
        arg_i(k, N);
        return;
    }
    int dl = o->out[0], dloss = o->in[o->nfin + 1];
    if (dl < 0) return;
    int ts[2] = {lg, dl};
    if (!same_dtype(c, dt, ts, 2)) return;
    CudaKernel *k = kdt(c, "xent", dt, "zk_xent_bwd", "dlogits += (softmax - onehot(target)) * dloss / N");
    k->grid[0] = gdim(c, (N > 0 ? N : 1), 0x7fffffff);
    k->block[0] = 256;
    arg_t(k, dl);
    arg_t(k, lg);
    arg_t(k, tg);
    arg_t(k, dloss);
    arg_i(k, N);
    arg_i(k, V);
}

static void gen_split(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int x = o->in[0];
    const GTensor *X = T_(c, x);
    int64_t N = last_dim(X), rows = X->numel / (N ? N : 1);
    int npieces = bwd ? (o->nin - 1) / 2 : o->nout;
    int64_t off = 0;
    for (int i = 0; i < npieces; i++) {
        int piece = bwd ? o->in[1 + i] : o->out[i];
        int gp = bwd ? o->in[1 + npieces + i] : -1;
        /* a malformed op (the checks above cover only operand 0 and result 0) */
        if (piece < 0 || (bwd && o->out[0] >= 0 && gp < 0)) {
            fail(c, "split: piece %d is missing", i);
            return;
        }
        int64_t w = last_dim(T_(c, piece));
        int ts[2] = {x, piece};
        if (!same_dtype(c, X->dtype, ts, 2)) return;
        if (!bwd) {
            CudaKernel *k = kdt(c, "elementwise", X->dtype, "zk_slice_cols", "piece = x[..., off:off+w]");
            elementwise_grid(k, rows * w);
            arg_t(k, piece);
            arg_t(k, x);
            arg_i(k, rows);
            arg_i(k, N);
            arg_i(k, off);
            arg_i(k, w);
        } else if (o->out[0] >= 0) {
            CudaKernel *k = kdt(c, "elementwise", X->dtype, "zk_unslice_cols", "dx[..., off:off+w] += dpiece");
            elementwise_grid(k, rows * w);
            arg_t(k, o->out[0]);
            arg_t(k, gp);
            arg_i(k, rows);
            arg_i(k, N);
            arg_i(k, off);
            arg_i(k, w);
        }
        off += w;
    }
    if (off != N) fail(c, "split: pieces cover %" PRId64 " of %" PRId64 " columns", off, N);
}

static void gen_prim(Ctx *c, bool bwd) {
    switch (c->o->prim) {
    case PRIM_EMBEDDING: gen_embedding(c, bwd); break;
    case PRIM_LINEAR: gen_linear(c, bwd); break;
    case PRIM_MATMUL: gen_matmul(c, bwd); break;
    case PRIM_ADD:
    case PRIM_MUL: gen_binary(c, bwd); break;
    case PRIM_LAYERNORM:
    case PRIM_RMSNORM: gen_norm(c, bwd); break;
    case PRIM_GELU:
    case PRIM_SILU: gen_act(c, bwd); break;
    case PRIM_ROPE: gen_rope(c, bwd); break;
    case PRIM_ATTENTION: gen_attention(c, bwd); break;
    case PRIM_SPLIT: gen_split(c, bwd); break;
    case PRIM_CROSS_ENTROPY: gen_xent(c, bwd); break;
    case PRIM_ARANGE:
        if (!bwd) {
            CudaKernel *k = kdt(c, "elementwise", c->g->train.dtype, "zk_iota_i32", "y = 0, 1, ..., n-1");
            int64_t n = T_(c, c->o->out[0])->numel;
            elementwise_grid(k, n);
            arg_t(k, c->o->out[0]);
            arg_i(k, n);
        }
        break;
    default: fail(c, "unknown primitive %d", (int)c->o->prim); break;
    }
}

/* ---- one tile of a tiled op (cuda_gen_op_tile) --------------------------------
 * The weight operand holds only the tile's rows [r0, r0 + rows) (row 0 of
 * the bound tensor is row r0 of the weight); every other operand is whole,
 * so the columns a tile touches are a tensor's address plus r0 elements,
 * with the full width as the leading dimension. The semantics are the host
 * executor's run_tiled (runtime/exec.c), tile by tile, so the two backends
 * agree to rounding. */

/* The tile's rows of weight w: false (with a diagnostic) when w is not 2-D
 * or ntiles does not divide its rows (the planner refuses both). */
static bool tile_rows(Ctx *c, int w, int64_t *rows, int64_t *r0) {
    const GTensor *W = T_(c, w);
    const char *name = W->name ? W->name : "?";
    if (W->rank != 2) {
        fail(c, "the tiled weight %s must be 2-D (rank %d)", name, W->rank);
        return false;
    }
    if (W->dims[0] % c->ntiles) {
        fail(c, "%d tiles do not divide the %" PRId64 " rows of %s", c->ntiles, W->dims[0], name);
        return false;
    }
    *rows = W->dims[0] / c->ntiles;
    *r0 = (int64_t)c->tile * *rows;
    return true;
}

/* y[M, N] = x[M, K] w[K, N] (+ bias) with w's rows (the reduction dim) tiled:
 * this tile adds x[:, r0:r0+rows] w_t; tile 0 overwrites y and adds the
 * bias. Backward: dx[:, r0:r0+rows] += dy w_t^T, dw_t += x[:, r0:r0+rows]^T
 * dy, db += column sums of dy at tile 0 only (each tile's dy is the whole
 * dy: summing it every tile would count it ntiles times). Linear, and
 * matmul without transposes. */
static void tile_reduction_rows(Ctx *c, bool bwd, int x, int w, int bias, int y, int dy, int dx, int dw, int db,
                                int64_t M, int64_t K, int64_t N, int64_t rows, int64_t r0) {
    int64_t r1 = r0 + rows;
    bool first = c->tile == 0;
    if (!bwd) {
        Gemm p = gemm0();
        p.C = y;
        p.A = x;
        p.offA = r0;
        p.B = w;
        p.bias = first ? bias : -1;
        p.M = M;
        p.N = N;
        p.K = rows;
        p.lda = K;
        p.ldb = N;
        p.ldc = N;
        p.beta = first ? 0 : 1;
        k_gemm(c, &p,
               arena_printf(c->cg->arena, "y %s x[:, %" PRId64 ":%" PRId64 "]*w_t%s", first ? "=" : "+=", r0, r1,
                            first && bias >= 0 ? " + b" : ""));
        return;
    }
    if (dx >= 0) {
        Gemm p = gemm0();
        p.C = dx;
        p.offC = r0;
        p.A = dy;
        p.B = w;
        p.tb = true;
        p.M = M;
        p.N = rows;
        p.K = N;
        p.lda = N;
        p.ldb = N;
        p.ldc = K;
        p.beta = 1;
        k_gemm(c, &p, arena_printf(c->cg->arena, "dx[:, %" PRId64 ":%" PRId64 "] += dy*w_t^T", r0, r1));
    }
    if (dw >= 0) {
        Gemm p = gemm0();
        p.C = dw;
        p.A = x;
        p.offA = r0;
        p.ta = true;
        p.B = dy;
        p.M = rows;
        p.N = N;
        p.K = M;
        p.lda = K;
        p.ldb = N;
        p.ldc = N;
        p.beta = 1;
        k_gemm(c, &p, arena_printf(c->cg->arena, "dw_t += x[:, %" PRId64 ":%" PRId64 "]^T*dy", r0, r1));
    }
    if (db >= 0 && first) k_colsum(c, db, dy, -1, M, N, "db += sum_rows dy (tile 0 only)");
}

static void gen_linear_tile(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int nfin = bwd ? o->nfin : o->nin;
    int x = o->in[0], w = o->in[1], b = nfin >= 3 ? o->in[2] : -1;
    int64_t rows, r0;
    if (!tile_rows(c, w, &rows, &r0)) return;
    const GTensor *X = T_(c, x), *W = T_(c, w);
    int64_t I = W->dims[0], O = W->dims[1];
    if (last_dim(X) != I) {
        fail(c, "linear: x's last dim %" PRId64 " != weight's rows %" PRId64, last_dim(X), I);
        return;
    }
    int64_t R = X->numel / I;
    if (!bwd) {
        tile_reduction_rows(c, false, x, w, b, o->out[0], -1, -1, -1, -1, R, I, O, rows, r0);
        return;
    }
    tile_reduction_rows(c, true, x, w, -1, -1, o->in[nfin + 1], o->out[0], o->nout > 1 ? o->out[1] : -1,
                        o->nout > 2 ? o->out[2] : -1, R, I, O, rows, r0);
}

static void gen_matmul_tile(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int a = o->in[0], b = o->in[1];
    const GTensor *A = T_(c, a), *Bt = T_(c, b);
    bool tb = o->iattr[1] != 0;
    if (o->iattr[0]) {
        fail(c, "a tiled matmul with transpose_a is not supported (tile b only when a is not transposed)");
        return;
    }
    if (A->rank < 1) {
        fail(c, "matmul: a must have rank >= 1");
        return;
    }
    int64_t rows, r0;
    if (!tile_rows(c, b, &rows, &r0)) return;
    int64_t K = A->dims[A->rank - 1], M = A->numel / K;
    int64_t Kb = tb ? Bt->dims[1] : Bt->dims[0], N = tb ? Bt->dims[0] : Bt->dims[1];
    if (Kb != K) {
        fail(c, "matmul: inner dims differ (%" PRId64 " and %" PRId64 ")", K, Kb);
        return;
    }
    int dc = bwd ? o->in[o->nfin + 1] : -1;
    int da = bwd ? o->out[0] : -1, db = bwd && o->nout > 1 ? o->out[1] : -1;
    if (!tb) {
        tile_reduction_rows(c, bwd, a, b, -1, bwd ? -1 : o->out[0], dc, da, db, -1, M, K, N, rows, r0);
        return;
    }
    /* b is [N, K]: its rows are the output's columns [r0, r0+rows). */
    int64_t r1 = r0 + rows;
    if (!bwd) {
        Gemm p = gemm0();
        p.C = o->out[0];
        p.offC = r0;
        p.A = a;
        p.B = b;
        p.tb = true;
        p.M = M;
        p.N = rows;
        p.K = K;
        p.lda = K;
        p.ldb = K;
        p.ldc = N;
        k_gemm(c, &p, arena_printf(c->cg->arena, "c[:, %" PRId64 ":%" PRId64 "] = a*b_t^T", r0, r1));
        return;
    }
    if (da >= 0) {
        Gemm p = gemm0();
        p.C = da;
        p.A = dc;
        p.offA = r0;
        p.B = b;
        p.M = M;
        p.N = K;
        p.K = rows;
        p.lda = N;
        p.ldb = K;
        p.ldc = K;
        p.beta = 1;
        k_gemm(c, &p, arena_printf(c->cg->arena, "da += dc[:, %" PRId64 ":%" PRId64 "]*b_t", r0, r1));
    }
    if (db >= 0) {
        Gemm p = gemm0();
        p.C = db;
        p.A = dc;
        p.offA = r0;
        p.ta = true;
        p.B = a;
        p.M = rows;
        p.N = K;
        p.K = M;
        p.lda = N;
        p.ldb = K;
        p.ldc = K;
        p.beta = 1;
        k_gemm(c, &p, arena_printf(c->cg->arena, "db_t += dc[:, %" PRId64 ":%" PRId64 "]^T*a", r0, r1));
    }
}

/* Forward: tile 0 zeroes y and every tile copies the rows of the ids in its
 * range (an id outside the whole table is the op's error word, at the op's
 * offset). Backward: dtable_t[id - r0] += dy[i] for the ids in range. */
static void gen_embedding_tile(Ctx *c, bool bwd) {
    const GOp *o = c->o;
    int table = o->in[0], ids = o->in[1];
    const GTensor *Tb = T_(c, table), *I = T_(c, ids);
    if (Tb->rank != 2 || I->dtype != DT_I32) {
        fail(c, "embedding needs a 2-D table and i32 ids");
        return;
    }
    int64_t rows, r0;
    if (!tile_rows(c, table, &rows, &r0)) return;
    int64_t V = Tb->dims[0], D = Tb->dims[1], n = I->numel, r1 = r0 + rows;
    DType dt = Tb->dtype;
    unsigned blocks = (unsigned)(n < 65535 * 16 ? (n > 0 ? n : 1) : 65535 * 16);
    if (!bwd) {
        int ts[2] = {table, o->out[0]};
        if (!same_dtype(c, dt, ts, 2)) return;
        int64_t err = k_err_word(c, dt, "embedding id");
        CudaKernel *k = kdt(c, "embedding", dt, "zk_embed_fwd_tile",
                            arena_printf(c->cg->arena, "y[i] = table_t[ids[i] - %" PRId64 "] for ids in [%" PRId64 ", %" PRId64 ")%s",
                                         r0, r0, r1, c->tile == 0 ? ", zeros elsewhere" : ""));
        k->grid[0] = blocks;
        k->block[0] = 128;
        arg_t(k, o->out[0]);
        arg_t(k, table);
        arg_t(k, ids);
        arg_i(k, n);
        arg_i(k, r0);
        arg_i(k, rows);
        arg_i(k, V);
        arg_i(k, D);
        arg_i(k, c->tile == 0);
        arg_ws(k, err);
        return;
    }
    int dtab = o->out[0], dy = o->in[o->nfin + 1];
    if (dtab < 0) return;
    int ts[3] = {table, dy, dtab};
    if (!same_dtype(c, dt, ts, 3)) return;
    int64_t acc = -1;
    if (dt != DT_F32) {
        acc = ws_alloc(c, rows * D * 4);
        k_fill_ws_f32(c, dt, acc, rows * D, "zero the fp32 accumulator of the tile's table gradient");
    }
    CudaKernel *k = kdt(c, "embedding", dt, "zk_embed_bwd_tile",
                        arena_printf(c->cg->arena, "%s[ids[i] - %" PRId64 "] += dy[i] for ids in [%" PRId64 ", %" PRId64 ") (fp32 atomics)",
                                     dt == DT_F32 ? "dtable_t" : "acc", r0, r0, r1));
    k->grid[0] = blocks;
    k->block[0] = 128;
    if (dt == DT_F32) arg_t(k, dtab);
    else arg_ws(k, acc);
    arg_t(k, dy);
    arg_t(k, ids);
    arg_i(k, n);
    arg_i(k, r0);
    arg_i(k, rows);
    arg_i(k, D);
    if (dt != DT_F32) {
        k = kdt(c, "elementwise", dt, "zk_cast_from_f32", "dtable_t += acc");
        elementwise_grid(k, rows * D);
        arg_t(k, dtab);
        arg_ws(k, acc);
        arg_i(k, rows * D);
        arg_f(k, 1.0);
        arg_i(k, 1);
    }
}

static void gen_tile(Ctx *c) {
    const GOp *o = c->o;
    bool bwd = o->kind == OP_BWD;
    if (o->kind != OP_FWD && o->kind != OP_RECOMPUTE && !bwd) {
        fail(c, "only forward, recompute and backward ops are tiled");
        return;
    }
    switch (o->prim) {
    case PRIM_LINEAR: gen_linear_tile(c, bwd); break;
    case PRIM_MATMUL: gen_matmul_tile(c, bwd); break;
    case PRIM_EMBEDDING: gen_embedding_tile(c, bwd); break;
    default: fail(c, "only linear, matmul and embedding ops are tiled"); break;
    }
}

static void gen_grad_norm(Ctx *c) {
    const Graph *g = c->g;
    int nslots = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].cls == TC_PARAM && g->tensors[t].grad >= 0) nslots++;
    int64_t ws = ws_alloc(c, (int64_t)(nslots ? nslots : 1) * SUMSQ_PARTS * 4);
    int slot = 0;
    for (int t = 0; t < g->ntensors; t++) {
        if (g->tensors[t].cls != TC_PARAM || g->tensors[t].grad < 0) continue;
        int gr = g->tensors[t].grad;
        DType dt = g->tensors[gr].dtype;
        if (!float_dtype(dt)) {
            fail(c, "gradient %s has dtype %s", g->tensors[gr].name, cuda_dtype_name(dt));
            return;
        }
        CudaKernel *k = kdt(c, "reduce", dt, "zk_sumsq_partial", "partial sums of squares of one gradient");
        k->grid[0] = SUMSQ_PARTS;
        k->block[0] = 256;
        arg_ws(k, ws + (int64_t)slot * SUMSQ_PARTS * 4);
        arg_t(k, gr);
        arg_i(k, g->tensors[gr].numel);
        slot++;
    }
    CudaKernel *k = kdt(c, "reduce", g->train.dtype, "zk_norm_final", "grad_norm = sqrt(sum of the partials)");
    k->block[0] = 256;
    arg_t(k, c->o->out[0]);
    arg_ws(k, ws);
    arg_i(k, (int64_t)nslots * SUMSQ_PARTS);
    arg_i(k, 1);
}

static void gen_adam(Ctx *c) {
    const GOp *o = c->o;
    const TrainConfig *tc = &c->g->train;
    int p = o->in[0], gr = o->in[1], ms = o->in[2], m = o->in[3], v = o->in[4], nrm = o->in[5];
    if (p < 0 || gr < 0 || m < 0 || v < 0) {
        fail(c, "adam needs a parameter, its gradient and both moments");
        return;
    }
    DType dt = T_(c, p)->dtype;
    int ts[2] = {p, gr};
    if (!same_dtype(c, dt, ts, 2)) return;
    if (T_(c, m)->dtype != DT_F32 || T_(c, v)->dtype != DT_F32 || (ms >= 0 && T_(c, ms)->dtype != DT_F32)) {
        fail(c, "adam: master and moments must be f32");
        return;
    }
    if (ms < 0 && dt != DT_F32) {
        fail(c, "adam: a %s parameter needs an fp32 master", cuda_dtype_name(dt));
        return;
    }
    int64_t n = T_(c, p)->numel;
    CudaKernel *k = kdt(c, "adam", dt, "zk_adam", "AdamW step (fp32 master, m, v)");
    elementwise_grid(k, n);
    arg_t(k, p);
    arg_t(k, ms);
    arg_t(k, gr);
    arg_t(k, m);
    arg_t(k, v);
    arg_t(k, nrm);
    arg_i(k, n);
    arg_rt(k, CRT_LR);
    arg_f(k, tc->beta1);
    arg_f(k, tc->beta2);
    arg_f(k, tc->eps);
    arg_f(k, tc->weight_decay);
    arg_rt(k, CRT_BC1);
    arg_rt(k, CRT_BC2);
    arg_rt(k, CRT_INV_LOSS_SCALE);
    arg_f(k, tc->grad_clip);
}

static bool tensor_ok(const Graph *g, int t) { return t >= -1 && t < g->ntensors; }

/* The whole op (ntiles 0) or one tile of it. */
static int gen_op(CudaGen *cg, const Graph *g, int op, int tile, int ntiles, CudaKernel *out, int max_out,
                  CudaOpInfo *info, DiagSink *d) {
    if (op < 0 || op >= g->nops) {
        diag_error(d, SPAN_NONE, "cuda_gen: op %d out of range", op);
        return -1;
    }
    Ctx c;
    memset(&c, 0, sizeof c);
    c.cg = cg;
    c.g = g;
    c.o = &g->ops[op];
    c.op = op;
    c.out = out;
    c.max = out ? max_out : 0;
    c.d = d;
    c.info.err_off = -1;
    c.tile = tile;
    c.ntiles = ntiles;
    int errs0 = d->errors;
    c.where = where_str(&c);
    /* locate the op in the source for the comments */
    {
        const SourceSet *s = cg->opt.sources;
        const GOp *o = c.o;
        if (o->span.file >= 0 && s && o->span.file < s->nfiles) {
            int line = 0, col = 0;
            source_line_col(s, o->span.file, o->span.off, &line, &col);
            c.where = arena_printf(cg->arena, "%s at %s:%d:%d", c.where, s->files[o->span.file].path, line, col);
        } else if (o->span.file >= 0) {
            c.where = arena_printf(cg->arena, "%s at file %d offset %u", c.where, (int)o->span.file, o->span.off);
        }
        if (ntiles) c.where = arena_printf(cg->arena, "%s, tile %d of %d", c.where, tile, ntiles);
    }
    if (ntiles && (ntiles < 2 || tile < 0 || tile >= ntiles)) {
        fail(&c, "no such tile");
        return -1;
    }
    const GOp *o = c.o;
    if (o->nin < 0 || o->nin > GRAPH_MAX_IN || o->nout < 0 || o->nout > GRAPH_MAX_OUT) {
        fail(&c, "malformed op");
        return -1;
    }
    for (int i = 0; i < o->nin; i++)
        if (!tensor_ok(g, o->in[i])) {
            fail(&c, "operand %d is not a tensor", i);
            return -1;
        }
    for (int i = 0; i < o->nout; i++)
        if (!tensor_ok(g, o->out[i])) {
            fail(&c, "result %d is not a tensor", i);
            return -1;
        }
    for (int i = 0; i < o->nin + o->nout; i++) {
        int t = i < o->nin ? o->in[i] : o->out[i - o->nin];
        if (t < 0) continue;
        const GTensor *x = &g->tensors[t];
        bool ok = x->numel >= 1 && x->rank >= 0 && x->rank <= GRAPH_MAX_RANK;
        for (int j = 0; ok && j < x->rank; j++) ok = x->dims[j] >= 1;
        if (!ok) {
            fail(&c, "tensor %s has no elements (or a bad shape)", x->name ? x->name : "?");
            return -1;
        }
    }
    bool prim_op = o->kind == OP_FWD || o->kind == OP_RECOMPUTE || o->kind == OP_BWD;
    if (prim_op && (o->prim < 0 || o->prim >= PRIM_COUNT)) {
        fail(&c, "unknown primitive");
        return -1;
    }
    /* operands every lowering reads unconditionally */
    int need_in = 0, need_out = 0;
    if (prim_op) {
        static const int min_in[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout) nin_min,
#include "prim.def"
#undef PRIM
        };
        need_in = min_in[o->prim];
        need_out = o->kind == OP_BWD ? 0 : 1;
        if (o->kind == OP_BWD) need_in = o->nfin + 2;
        if (o->kind == OP_BWD && (o->nfin < min_in[o->prim] || o->nfin > o->nin)) {
            fail(&c, "malformed backward op (nfin %d)", o->nfin);
            return -1;
        }
    } else if (o->kind == OP_ZERO_GRAD || o->kind == OP_LOSS_GRAD || o->kind == OP_GRAD_NORM) {
        need_out = 1;
    } else if (o->kind == OP_ADAM) {
        need_in = 6;
    }
    if (o->nin < need_in || o->nout < need_out) {
        fail(&c, "has %d operands and %d results, expected at least %d and %d", o->nin, o->nout, need_in, need_out);
        return -1;
    }
    for (int i = 0; i < need_in && o->kind != OP_ADAM; i++)
        if (o->in[i] < 0) {
            fail(&c, "operand %d is missing", i);
            return -1;
        }
    for (int i = 0; i < need_out; i++)
        if (o->out[i] < 0) {
            fail(&c, "result %d is missing", i);
            return -1;
        }

    if (ntiles) gen_tile(&c);
    else switch (o->kind) {
    case OP_FWD:
    case OP_RECOMPUTE: gen_prim(&c, false); break;
    case OP_BWD: gen_prim(&c, true); break;
    case OP_ZERO_GRAD: k_fill(&c, o->out[0], 0.0, "zero the gradient"); break;
    case OP_LOSS_GRAD: {
        int t = o->out[0];
        if (T_(&c, t)->dtype != DT_F32) {
            fail(&c, "the loss gradient must be f32");
            break;
        }
        CudaKernel *k = kdt(&c, "elementwise", g->train.dtype, "zk_fill_f32", "dloss = loss scale / micro-batches");
        k->block[0] = 32;
        arg_t(k, t);
        arg_i(k, T_(&c, t)->numel);
        arg_rt(k, CRT_LOSS_GRAD);
        break;
    }
    case OP_GRAD_NORM: gen_grad_norm(&c); break;
    case OP_ADAM: gen_adam(&c); break;
    default: fail(&c, "unknown op kind %d", (int)o->kind); break;
    }
    if (cg->arena->failed) {
        diag_error(d, o->span, "cuda_gen: out of memory");
        return -1;
    }
    if (c.failed || d->errors > errs0) return -1;
    if (info) *info = c.info;
    return c.n;
}

int cuda_gen_op(CudaGen *cg, const Graph *g, int op, CudaKernel *out, int max_out, CudaOpInfo *info,
                DiagSink *d) {
    return gen_op(cg, g, op, 0, 0, out, max_out, info, d);
}

int cuda_gen_op_tile(CudaGen *cg, const Graph *g, int op, int tile, int ntiles, CudaKernel *out, int max_out,
                     CudaOpInfo *info, DiagSink *d) {
    if (ntiles < 2) {
        diag_error(d, op >= 0 && op < g->nops ? g->ops[op].span : SPAN_NONE,
                   "cuda_gen: op %d: tile %d of %d: a tiled op has at least 2 tiles", op, tile, ntiles);
        return -1;
    }
    return gen_op(cg, g, op, tile, ntiles, out, max_out, info, d);
}

/* ---- launches outside the graph's ops ---------------------------------------- */

static int util_begin(Ctx *c, CudaGen *cg, const Graph *g, CudaKernel *out, DiagSink *d, const char *what,
                      const int *ts, int nt) {
    static const GOp util_op = {.kind = OP_ZERO_GRAD, .segment = -1, .fwd = -1, .span = {-1, 0, 0}};
    memset(c, 0, sizeof *c);
    c->cg = cg;
    c->g = g;
    c->o = &util_op;
    c->op = -1;
    c->out = out;
    c->max = out ? 1 : 0;
    c->d = d;
    c->info.err_off = -1;
    c->where = arena_printf(cg->arena, "%s", what);
    for (int i = 0; i < nt; i++)
        if (ts[i] < 0 || ts[i] >= g->ntensors) {
            diag_error(d, SPAN_NONE, "cuda_gen: %s: tensor %d does not exist", what, ts[i]);
            return -1;
        }
    return 0;
}

static int util_end(Ctx *c) {
    if (c->cg->arena->failed) {
        diag_error(c->d, SPAN_NONE, "cuda_gen: out of memory");
        return -1;
    }
    return c->failed ? -1 : 0;
}

int cuda_gen_cast(CudaGen *cg, const Graph *g, int dst, int src, CudaKernel *out, DiagSink *d) {
    Ctx c;
    int ts[2] = {dst, src};
    if (util_begin(&c, cg, g, out, d, "cast", ts, 2) != 0) return -1;
    const GTensor *D = T_(&c, dst), *S = T_(&c, src);
    if (D->numel != S->numel) fail(&c, "%s and %s differ in size", D->name ? D->name : "?", S->name ? S->name : "?");
    else if (!float_dtype(D->dtype) || !float_dtype(S->dtype) || (D->dtype != DT_F32 && S->dtype != DT_F32))
        fail(&c, "casts go between f32 and a float dtype (not %s to %s)", cuda_dtype_name(S->dtype), cuda_dtype_name(D->dtype));
    else {
        bool to32 = D->dtype == DT_F32;
        CudaKernel *k = kdt(&c, "elementwise", to32 ? S->dtype : D->dtype, to32 ? "zk_cast_to_f32" : "zk_cast_from_f32",
                            "dst = src (cast)");
        elementwise_grid(k, D->numel);
        arg_t(k, dst);
        arg_t(k, src);
        arg_i(k, D->numel);
        arg_f(k, 1.0);
        arg_i(k, 0);
    }
    return util_end(&c);
}

int cuda_gen_axpy(CudaGen *cg, const Graph *g, int y, int x, double alpha, CudaKernel *out, DiagSink *d) {
    Ctx c;
    int ts[2] = {y, x};
    if (util_begin(&c, cg, g, out, d, "axpy", ts, 2) != 0) return -1;
    const GTensor *Y = T_(&c, y);
    if (Y->numel != T_(&c, x)->numel) fail(&c, "y and x differ in size");
    else if (same_dtype(&c, Y->dtype, ts, 2)) {
        CudaKernel *k = kdt(&c, "elementwise", Y->dtype, "zk_axpy", "y += alpha * x");
        elementwise_grid(k, Y->numel);
        arg_t(k, y);
        arg_t(k, x);
        arg_i(k, Y->numel);
        arg_f(k, alpha);
    }
    return util_end(&c);
}

int cuda_gen_scale(CudaGen *cg, const Graph *g, int y, double alpha, CudaKernel *out, DiagSink *d) {
    Ctx c;
    if (util_begin(&c, cg, g, out, d, "scale", &y, 1) != 0) return -1;
    const GTensor *Y = T_(&c, y);
    if (same_dtype(&c, Y->dtype, &y, 1)) {
        CudaKernel *k = kdt(&c, "elementwise", Y->dtype, "zk_scale", "y *= alpha");
        elementwise_grid(k, Y->numel);
        arg_t(k, y);
        arg_i(k, Y->numel);
        arg_f(k, alpha);
    }
    return util_end(&c);
}

/* ---- whole graph ------------------------------------------------------------- */

int cuda_gen_graph(CudaGen *cg, const Graph *g, CudaModule *m, DiagSink *d) {
    memset(m, 0, sizeof *m);
    Arena *a = cg->arena;
    m->op_first = ARENA_NEWN(a, int, g->nops + 1);
    m->op_count = ARENA_NEWN(a, int, g->nops + 1);
    m->op_info = ARENA_NEWN(a, CudaOpInfo, g->nops + 1);
    if (!m->op_first || !m->op_count || !m->op_info) {
        diag_error(d, SPAN_NONE, "cuda_gen: out of memory");
        return -1;
    }
    int cap = 64, n = 0;
    CudaKernel *ks = ARENA_NEWN(a, CudaKernel, cap);
    bool bad = false;
    for (int i = 0; i < g->nops; i++) {
        CudaKernel tmp[CUDA_OP_MAX_KERNELS];
        CudaOpInfo info;
        int need = cuda_gen_op(cg, g, i, tmp, CUDA_OP_MAX_KERNELS, &info, d);
        if (need < 0) {
            bad = true;
            m->op_info[i].err_off = -1;
            continue;
        }
        CudaKernel *src = tmp;
        if (need > CUDA_OP_MAX_KERNELS) {
            src = ARENA_NEWN(a, CudaKernel, need);
            if (!src || cuda_gen_op(cg, g, i, src, need, &info, d) != need) {
                bad = true;
                continue;
            }
        }
        if (n + need > cap) {
            while (n + need > cap) cap *= 2;
            CudaKernel *nk = ARENA_NEWN(a, CudaKernel, cap);
            if (!nk) {
                diag_error(d, SPAN_NONE, "cuda_gen: out of memory");
                return -1;
            }
            memcpy(nk, ks, sizeof *ks * (size_t)n);
            ks = nk;
        }
        m->op_first[i] = n;
        m->op_count[i] = need;
        m->op_info[i] = info;
        memcpy(ks + n, src, sizeof *ks * (size_t)need);
        n += need;
    }
    m->kernels = ks;
    m->nkernels = n;
    /* units: distinct sources in order of first use */
    m->units = ARENA_NEWN(a, CudaUnit, n + 1);
    if (!m->units) {
        diag_error(d, SPAN_NONE, "cuda_gen: out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int u = -1;
        for (int j = 0; j < m->nunits; j++)
            if (!strcmp(m->units[j].hash, ks[i].hash)) u = j;
        if (u < 0) {
            u = m->nunits++;
            CudaUnit *cu = &m->units[u];
            cu->family = ks[i].family;
            cu->spec = ks[i].spec;
            cu->source = ks[i].source;
            memcpy(cu->hash, ks[i].hash, sizeof cu->hash);
            cu->first_kernel = i;
        }
        m->units[u].nlaunches++;
        ks[i].unit = u;
    }
    return bad ? -1 : 0;
}

static void dump_arg(FILE *out, const Graph *g, const CudaArg *a) {
    switch (a->kind) {
    case CARG_TENSOR: fprintf(out, "%s", g->tensors[a->tensor].name ? g->tensors[a->tensor].name : "?"); break;
    case CARG_WS: fprintf(out, "ws+%" PRId64, a->ws_off); break;
    case CARG_NULL: fprintf(out, "NULL"); break;
    case CARG_I64: fprintf(out, "%" PRId64, a->i); break;
    case CARG_F32: fprintf(out, "%.9g", (double)a->f); break;
    case CARG_RT: fprintf(out, "$%s", cuda_rt_names[a->rt]); break;
    }
}

void cuda_module_dump(const CudaModule *m, const Graph *g, FILE *out) {
    fprintf(out, "# %d kernel units, %d launches\n", m->nunits, m->nkernels);
    for (int u = 0; u < m->nunits; u++) {
        const CudaUnit *cu = &m->units[u];
        fprintf(out, "unit %d: %s (%s) %.16s, %d launches\n", u, cu->family, cu->spec, cu->hash, cu->nlaunches);
        for (int i = 0; i < m->nkernels; i++)
            if (m->kernels[i].unit == u) fprintf(out, "  // %s [%s]\n", m->kernels[i].comment, m->kernels[i].entry);
    }
    for (int i = 0; i < m->nkernels; i++) {
        const CudaKernel *k = &m->kernels[i];
        fprintf(out, "launch %d: unit %d %s<<<(%u,%u,%u), (%u,%u,%u)>>>(", i, k->unit, k->entry, k->grid[0], k->grid[1],
                k->grid[2], k->block[0], k->block[1], k->block[2]);
        for (int j = 0; j < k->nargs; j++) {
            if (j) fprintf(out, ", ");
            dump_arg(out, g, &k->args[j]);
        }
        fprintf(out, ")\n");
    }
    for (int i = 0; i < g->nops; i++)
        if (m->op_info[i].ws_bytes)
            fprintf(out, "op %d workspace %" PRId64 " bytes%s%s\n", i, m->op_info[i].ws_bytes,
                    m->op_info[i].err_off >= 0 ? ", error word for " : "",
                    m->op_info[i].err_off >= 0 ? m->op_info[i].err_what : "");
}

void cuda_module_write_unit(const CudaModule *m, int u, FILE *out) {
    if (u < 0 || u >= m->nunits) return;
    const CudaUnit *cu = &m->units[u];
    fprintf(out, "// unit %d: %s (%s), sha256 %s\n// launched by %d op(s):\n", u, cu->family, cu->spec, cu->hash,
            cu->nlaunches);
    for (int i = 0; i < m->nkernels; i++)
        if (m->kernels[i].unit == u) fprintf(out, "//   %s [%s]\n", m->kernels[i].comment, m->kernels[i].entry);
    fputs(cu->source, out);
}

int cuda_module_write_sources(const CudaModule *m, const char *dir, DiagSink *d) {
    for (int u = 0; u < m->nunits; u++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s-%.12s.cu", dir, m->units[u].family, m->units[u].hash);
        FILE *f = fopen(path, "w");
        if (!f) {
            diag_error(d, SPAN_NONE, "cannot write %s: %s", path, strerror(errno));
            return -1;
        }
        cuda_module_write_unit(m, u, f);
        if (fclose(f) != 0) {
            diag_error(d, SPAN_NONE, "cannot write %s: %s", path, strerror(errno));
            return -1;
        }
    }
    return 0;
}
