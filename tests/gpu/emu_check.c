/* emu_check: what the emulator checks of generated launches share (emu_check.h). */
#include "emu_check.h"
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emu_wrap.h"

int emu_launch(void (*fn)(void **), void **params, const unsigned grid[3], const unsigned block[3], char *err,
               size_t nerr);

static const char *prog = "emu_check", *prefix = "emu";

void ec_init(const char *p, const char *unit_prefix) {
    prog = p;
    prefix = unit_prefix;
}

void ec_die(const char *what) {
    fprintf(stderr, "%s: %s\n", prog, what);
    exit(2);
}

void ec_gen_init(Arena *a, DiagSink *d, Graph *g, CudaGen *cg, DType dt) {
    arena_init(a);
    diag_init(d);
    graph_init(g, a);
    g->train.dtype = dt;
    CudaGenOptions o = {.kernel_dir = ZINF_STDLIB_DIR "/kernels"};
    cuda_gen_init(cg, a, &o);
}

int ec_add_fwd(Graph *g, GOp *f, int nin, const int *in, int out) {
    f->nin = nin;
    for (int i = 0; i < nin; i++) f->in[i] = in[i];
    f->nout = 1;
    f->out[0] = out;
    return graph_add_op(g, f);
}

int ec_add_bwd(Graph *g, int fwd, int nfin, int y, int dy, int nout, const int *outs) {
    GOp b = g->ops[fwd];
    b.kind = OP_BWD;
    b.fwd = fwd;
    b.nfin = nfin;
    b.in[nfin] = y;
    b.in[nfin + 1] = dy;
    b.nin = nfin + 2;
    b.nout = nout;
    for (int i = 0; i < GRAPH_MAX_OUT; i++) b.out[i] = i < nout ? outs[i] : -1;
    return graph_add_op(g, &b);
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
    if (system(cmd) != 0) ec_die("cannot make the unit directory");
    snprintf(cu, sizeof cu, "%s/%s-%.24s.cu", dir, prefix, k->hash);
    snprintf(so, sizeof so, "%s/%s-%.24s.so", dir, prefix, k->hash);
    if (emu_compile_unit(k->source, cu, so, ZINF_EMU_HEADER, why, sizeof why) != 0) ec_die(why);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h || nmods >= 64) ec_die(h ? "too many units" : dlerror());
    memcpy(mods[nmods].hash, k->hash, 65);
    mods[nmods].h = h;
    return mods[nmods++].h;
}

size_t ec_esz(DType dt) { return dt == DT_F32 || dt == DT_I32 ? 4 : 2; }

uint16_t ec_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

float ec_ld(const void *p, DType dt, int64_t i) {
    if (dt == DT_F32) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void ec_run(const CudaKernel *ks, int n, const CudaOpInfo *info, uint8_t *ws, uint8_t *(*addr)(void *ctx, int tensor),
            void *ctx) {
    for (int i = 0; i < n; i++) {
        const CudaKernel *k = &ks[i];
        void *ptrs[CUDA_MAX_ARGS], *params[CUDA_MAX_ARGS];
        long long i64[CUDA_MAX_ARGS];
        float f32[CUDA_MAX_ARGS];
        for (int j = 0; j < k->nargs; j++) {
            const CudaArg *a = &k->args[j];
            switch (a->kind) {
            case CARG_TENSOR: ptrs[j] = addr(ctx, a->tensor) + a->off; params[j] = &ptrs[j]; break;
            case CARG_WS: ptrs[j] = ws + a->ws_off; params[j] = &ptrs[j]; break;
            case CARG_NULL:
            case CARG_SEG: ptrs[j] = NULL; params[j] = &ptrs[j]; break;
            case CARG_I64: i64[j] = a->i; params[j] = &i64[j]; break;
            case CARG_F32: f32[j] = a->f; params[j] = &f32[j]; break;
            case CARG_RT: f32[j] = 1.0f; params[j] = &f32[j]; break;
            }
        }
        char name[160], err[256];
        snprintf(name, sizeof name, "emu_tramp_%s", k->entry);
        void (*fn)(void **);
        *(void **)&fn = dlsym(unit_of(k), name);
        if (!fn) ec_die(name);
        if (emu_launch(fn, params, k->grid, k->block, err, sizeof err) != 0) ec_die(err);
    }
    if (info->err_off >= 0 && ((int32_t *)(ws + info->err_off))[0]) ec_die("the error word is set");
}

double ec_normwise(const void *ref, const void *got, DType dt, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t j = 0; j < n; j++) {
        if (dt == DT_I32) {
            if (((const int32_t *)got)[j] != ((const int32_t *)ref)[j]) md = INFINITY;
            continue;
        }
        double h = ec_ld(ref, dt, j), g = ec_ld(got, dt, j);
        md = fmax(md, isnan(g) || isnan(h) ? INFINITY : fabs(h - g));
        mr = fmax(mr, fabs(h));
    }
    return md / (mr > 0 ? mr : 1);
}
