/* cuda_gen_util: what the per-family generators (cuda_gen_<family>.c) share,
 * below the driver cuda_gen.c: the kernel unit sources (a family's .cu
 * specialised by #defines, deduplicated by hash), the helpers that begin a
 * launch and take a slice of the op's workspace, the op's diagnostics and
 * dtype checks, a tile's rows, and the context of a launch outside the
 * graph's ops. Calls go one way: the driver and the generators call down
 * into this file, which calls neither. */
#include "cuda_gen_impl.h"
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "nvrtc.h"

const char *cuda_dtype_name(DType dt) {
    switch (dt) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    default: return "none";
    }
}

/* ---- unit sources ---------------------------------------------------------- */

struct CudaUnitCache {
    const char *family, *spec, *source;
    char hash[65];
    CudaUnitCache *next;
};
static const char *const families[] = {"elementwise", "reduce", "norm", "rope", "embedding",
                                       "xent", "adam", "attention", "gemm", "dequant", "moe"};
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

/* The text of kernel file name (its first len bytes) in the kernel
 * directory; NULL with a diagnostic when it cannot be read. */
static char *read_kernel(CudaGen *cg, const char *name, int len, DiagSink *d, Span sp) {
    char path[1200];
    int err = 0;
    snprintf(path, sizeof path, "%s/%.*s", cg->kernel_dir, len, name);
    char *text = read_text(cg->arena, path, &err);
    if (!text) {
        diag_error(d, sp, "cannot read kernel source %s: %s", path, strerror(err));
        diag_hint(d, "set ZINF_KERNEL_DIR to the stdlib/kernels directory");
    }
    return text;
}

/* A growable string in the arena. */
typedef struct TextBuf {
    Arena *a;
    char *p;
    size_t len, cap;
} TextBuf;

static void buf_add(TextBuf *b, const char *s, size_t n) {
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
static void buf_str(TextBuf *b, const char *s) { buf_add(b, s, strlen(s)); }

/* A family's text with each `#include "NAME"` of a header beside it, other
 * than common.cuh (pasted per unit, after the defines), replaced by the
 * header's text, so that the unit is one self-contained text (NVRTC
 * compiles it with no include path): e.g. adam.cu's qmap.h, which the
 * host's runtime/hostk/qstate.c includes too. One level deep: a pasted
 * header includes nothing. NULL with a diagnostic when one is unreadable. */
static const char *paste_headers(CudaGen *cg, const char *text, DiagSink *d, Span sp) {
    static const char inc[] = "#include \"", common[] = "common.cuh\"";
    TextBuf b = {.a = cg->arena};
    const char *p = text;
    for (const char *at = strstr(p, inc); at; at = strstr(p, inc)) {
        const char *name = at + sizeof inc - 1, *end = strchr(name, '"');
        if (!end) break;
        if (!strncmp(name, common, sizeof common - 1)) {
            buf_add(&b, p, (size_t)(end + 1 - p));
            p = end + 1;
            continue;
        }
        const char *h = read_kernel(cg, name, (int)(end - name), d, sp);
        if (!h) return NULL;
        buf_add(&b, p, (size_t)(at - p));
        buf_str(&b, h);
        p = end + 1;
    }
    buf_str(&b, p);
    if (!b.p || cg->arena->failed) {
        diag_error(d, sp, "cuda_gen: out of memory");
        return NULL;
    }
    return b.p;
}

static const char *family_text(CudaGen *cg, const char *fam, DiagSink *d, Span sp) {
    int idx = -1;
    for (int i = 0; i < NFAMILIES; i++)
        if (!strcmp(families[i], fam)) idx = i;
    if (idx < 0) return NULL;
    if (!cg->common && !(cg->common = read_kernel(cg, "common.cuh", INT_MAX, d, sp))) return NULL;
    if (!cg->family_text[idx]) {
        char name[64];
        snprintf(name, sizeof name, "%s.cu", fam);
        const char *text = read_kernel(cg, name, INT_MAX, d, sp);
        if (!text) return NULL;
        cg->family_text[idx] = paste_headers(cg, text, d, sp);
    }
    return cg->family_text[idx];
}

/* The unit of family specialised by defines ("NAME VALUE" lines joined by
 * '\n'); spec is its human-readable name. */
static const CudaUnitCache *unit_get(CudaGen *cg, const char *fam, const char *spec, const char *defines,
                                     DiagSink *d, Span sp) {
    for (CudaUnitCache *u = cg->units; u; u = u->next)
        if (!strcmp(u->family, fam) && !strcmp(u->spec, spec)) return u;
    const char *text = family_text(cg, fam, d, sp);
    if (!text) return NULL;
    TextBuf b = {.a = cg->arena};
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

CudaKernel *cg_kbegin(GenCtx *c, const char *fam, const char *spec, const char *defines, const char *entry,
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

int64_t cg_ws_alloc(GenCtx *c, int64_t bytes) {
    int64_t off = c->info.ws_bytes;
    c->info.ws_bytes += (bytes + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    return off;
}

void cg_fail(GenCtx *c, const char *fmtstr, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmtstr);
    vsnprintf(msg, sizeof msg, fmtstr, ap);
    va_end(ap);
    diag_error(c->d, c->o->span, "%s: %s", c->where, msg);
    c->failed = true;
}

/* A grid dimension, or a diagnostic when it exceeds the launch limit. */
unsigned cg_gdim(GenCtx *c, int64_t v, int64_t lim) {
    if (v < 1) return 1;
    if (v > lim) {
        cg_fail(c, "a launch needs %" PRId64 " blocks along one grid axis (limit %" PRId64 ")", v, lim);
        return 1;
    }
    return (unsigned)v;
}

/* Specialisation of the families that take only a dtype. */
static void dt_spec(GenCtx *c, DType dt, const char **spec, const char **defines) {
    if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16) dt = DT_F32;
    *spec = cuda_dtype_name(dt);
    *defines = arena_printf(c->cg->arena, "ZK_T %s\nZK_DT %d", dtype_ctype(dt), dtype_code(dt));
}

CudaKernel *cg_kdt(GenCtx *c, const char *fam, DType dt, const char *entry, const char *role) {
    const char *spec, *defs;
    dt_spec(c, dt, &spec, &defs);
    return cg_kbegin(c, fam, spec, defs, entry, role);
}

/* All of ts[] (>= 0 entries) share dtype dt and it is a float dtype. */
bool cg_same_dtype(GenCtx *c, DType dt, const int *ts, int n) {
    if (!float_dtype(dt)) {
        cg_fail(c, "dtype %s is not supported by the CUDA kernels", cuda_dtype_name(dt));
        return false;
    }
    for (int i = 0; i < n; i++)
        if (ts[i] >= 0 && T_(c, ts[i])->dtype != dt) {
            cg_fail(c, "operands of mixed dtypes (%s and %s) are not supported by the CUDA kernels",
                 cuda_dtype_name(dt), cuda_dtype_name(T_(c, ts[i])->dtype));
            return false;
        }
    return true;
}

/* ---- tiles ---------------------------------------------------------------------
 * Under memory-centric tiling (cuda_gen_op_tile) the weight operand holds
 * only the tile's rows [r0, r0 + rows) (row 0 of the bound tensor is row r0
 * of the weight); every other operand is whole, so the columns a tile
 * touches are a tensor's address plus r0 elements, with the full width as
 * the leading dimension. The semantics are the host executor's run_tiled
 * (runtime/exec/exec.c), tile by tile, so the two backends agree to rounding.
 * The whole op is the one tile [0, rows): linear, matmul and embedding have
 * one generator for both. */

bool cg_tile_rows(GenCtx *c, int w, int64_t *rows, int64_t *r0) {
    const GTensor *W = T_(c, w);
    if (!c->ntiles) { /* the whole op: its generator has checked that w is 2-D */
        *rows = W->dims[0];
        *r0 = 0;
        return true;
    }
    /* a tile: the planner refuses both of these */
    const char *name = W->name ? W->name : "?";
    if (W->rank != 2) {
        cg_fail(c, "the tiled weight %s must be 2-D (rank %d)", name, W->rank);
        return false;
    }
    if (W->dims[0] % c->ntiles) {
        cg_fail(c, "%d tiles do not divide the %" PRId64 " rows of %s", c->ntiles, W->dims[0], name);
        return false;
    }
    *rows = W->dims[0] / c->ntiles;
    *r0 = (int64_t)c->tile * *rows;
    return true;
}

/* ---- launches outside the graph's ops (cuda_gen_elementwise.c) ---------------- */

int cg_util_begin(GenCtx *c, CudaGen *cg, const Graph *g, CudaKernel *out, DiagSink *d, const char *what,
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

int cg_util_end(GenCtx *c) {
    if (c->cg->arena->failed) {
        diag_error(c->d, SPAN_NONE, "cuda_gen: out of memory");
        return -1;
    }
    return c->failed ? -1 : 0;
}
