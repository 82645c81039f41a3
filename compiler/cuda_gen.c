/* cuda_gen: the public entry points of cuda_gen.h, the driver. Owns the
 * context of one op's launches, the per-op checks and the dispatch of an op
 * (or one tile of it) to its family's generator (cuda_gen_<family>.c), the
 * whole graph's module and its listing. The unit sources and the launch
 * helpers the generators share are below it in cuda_gen_util.c. */
#include "cuda_gen_impl.h"
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#ifndef ZINF_STDLIB_DIR
#define ZINF_STDLIB_DIR "stdlib"
#endif

const char *const cuda_rt_names[CRT_COUNT] = {"lr", "bc1", "bc2", "inv_loss_scale", "loss_grad"};

void cuda_gen_init(CudaGen *cg, Arena *a, const CudaGenOptions *opt) {
    memset(cg, 0, sizeof *cg);
    cg->arena = a;
    if (opt) cg->opt = *opt;
    const char *dir = cg->opt.kernel_dir;
    if (dir && *dir) snprintf(cg->kernel_dir, sizeof cg->kernel_dir, "%s", dir);
    else snprintf(cg->kernel_dir, sizeof cg->kernel_dir, "%s/kernels", ZINF_STDLIB_DIR);
}

/* ---- one op -------------------------------------------------------------------- */

static const char *where_str(GenCtx *c) {
    const GOp *o = c->o;
    const char *scope = o->scope && *o->scope ? o->scope : "";
    const char *pname = (o->kind == OP_FWD || o->kind == OP_BWD || o->kind == OP_RECOMPUTE) && o->prim < PRIM_COUNT
                            ? prim_names[o->prim] : "";
    return arena_printf(c->cg->arena, "op %d %s%s%s%s%s%s", c->op, op_kind_names[o->kind], *pname ? " " : "", pname,
                        *scope ? " (" : "", scope, *scope ? ")" : "");
}

/* Each primitive's generator is its family's (runtime/plan/prim.def). */
static void (*const prim_gen[PRIM_COUNT])(GenCtx *c, bool bwd) = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = cg_gen_##family,
#include "prim.def"
#undef PRIM
};

static void gen_prim(GenCtx *c, bool bwd) {
    if ((unsigned)c->o->prim >= PRIM_COUNT) cg_fail(c, "unknown primitive %d", (int)c->o->prim);
    else prim_gen[c->o->prim](c, bwd);
}

/* Only forward (and recompute) and backward ops of linear, matmul and
 * embedding (tiles of the weight's rows) and of moe_expert (tiles of whole
 * experts, compiler/cuda_gen_moe.c) have tiles. */
static bool tileable(GenCtx *c) {
    const GOp *o = c->o;
    if (o->kind != OP_FWD && o->kind != OP_RECOMPUTE && o->kind != OP_BWD) {
        cg_fail(c, "only forward, recompute and backward ops are tiled");
        return false;
    }
    if (o->prim != PRIM_LINEAR && o->prim != PRIM_MATMUL && o->prim != PRIM_EMBEDDING && o->prim != PRIM_MOE_EXPERT) {
        cg_fail(c, "only linear, matmul, embedding and moe_expert ops are tiled");
        return false;
    }
    return true;
}

/* The launches of the op, or of its tile c->tile. */
static void gen_kind(GenCtx *c) {
    const GOp *o = c->o;
    if (c->ntiles && !tileable(c)) return;
    switch (o->kind) {
    case OP_FWD:
    case OP_RECOMPUTE: gen_prim(c, false); break;
    case OP_BWD: gen_prim(c, true); break;
    case OP_ZERO_GRAD: cg_fill(c, o->out[0], 0.0, "zero the gradient"); break;
    case OP_LOSS_GRAD: cg_gen_loss_grad(c); break;
    case OP_GRAD_NORM: cg_gen_grad_norm(c); break;
    case OP_ADAM: cg_gen_adam(c); break;
    default: cg_fail(c, "unknown op kind %d", (int)o->kind); break;
    }
}

static bool tensor_ok(const Graph *g, int t) { return t >= -1 && t < g->ntensors; }

/* Every operand and result a tensor with elements (or absent). */
static bool operands_ok(GenCtx *c) {
    const Graph *g = c->g;
    const GOp *o = c->o;
    if (o->nin < 0 || o->nin > GRAPH_MAX_IN || o->nout < 0 || o->nout > GRAPH_MAX_OPOUT) {
        cg_fail(c, "malformed op");
        return false;
    }
    for (int i = 0; i < o->nin; i++)
        if (!tensor_ok(g, o->in[i])) {
            cg_fail(c, "operand %d is not a tensor", i);
            return false;
        }
    for (int i = 0; i < o->nout; i++)
        if (!tensor_ok(g, o->out[i])) {
            cg_fail(c, "result %d is not a tensor", i);
            return false;
        }
    for (int i = 0; i < o->nin + o->nout; i++) {
        int t = i < o->nin ? o->in[i] : o->out[i - o->nin];
        if (t < 0) continue;
        const GTensor *x = &g->tensors[t];
        bool ok = x->numel >= 1 && x->rank >= 0 && x->rank <= GRAPH_MAX_RANK;
        for (int j = 0; ok && j < x->rank; j++) ok = x->dims[j] >= 1;
        if (!ok) {
            cg_fail(c, "tensor %s has no elements (or a bad shape)", x->name ? x->name : "?");
            return false;
        }
    }
    return true;
}

/* The operands every lowering reads unconditionally are there. */
static bool arity_ok(GenCtx *c) {
    const GOp *o = c->o;
    bool prim_op = o->kind == OP_FWD || o->kind == OP_RECOMPUTE || o->kind == OP_BWD;
    if (prim_op && (o->prim < 0 || o->prim >= PRIM_COUNT)) {
        cg_fail(c, "unknown primitive");
        return false;
    }
    int need_in = 0, need_out = 0;
    if (prim_op) {
        static const int min_in[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) nin_min,
#include "prim.def"
#undef PRIM
        };
        need_in = min_in[o->prim];
        need_out = o->kind == OP_BWD ? 0 : 1;
        if (o->kind == OP_BWD) need_in = o->nfin + 2;
        if (o->kind == OP_BWD && (o->nfin < min_in[o->prim] || o->nfin > o->nin)) {
            cg_fail(c, "malformed backward op (nfin %d)", o->nfin);
            return false;
        }
    } else if (o->kind == OP_ZERO_GRAD || o->kind == OP_LOSS_GRAD || o->kind == OP_GRAD_NORM) {
        need_out = 1;
    } else if (o->kind == OP_ADAM) {
        need_in = 6;
    }
    if (o->nin < need_in || o->nout < need_out) {
        cg_fail(c, "has %d operands and %d results, expected at least %d and %d", o->nin, o->nout, need_in, need_out);
        return false;
    }
    for (int i = 0; i < need_in && o->kind != OP_ADAM; i++)
        if (o->in[i] < 0) {
            cg_fail(c, "operand %d is missing", i);
            return false;
        }
    for (int i = 0; i < need_out; i++)
        if (o->out[i] < 0) {
            cg_fail(c, "result %d is missing", i);
            return false;
        }
    return true;
}

/* GenCtx of op `op` (ntiles 0) or of its tile `tile`, the comments naming the
 * op's place in the source. */
static void ctx_init(GenCtx *c, CudaGen *cg, const Graph *g, int op, int tile, int ntiles, CudaKernel *out, int max_out,
                     DiagSink *d) {
    memset(c, 0, sizeof *c);
    c->cg = cg;
    c->g = g;
    c->o = &g->ops[op];
    c->op = op;
    c->out = out;
    c->max = out ? max_out : 0;
    c->d = d;
    c->info.err_off = -1;
    c->tile = tile;
    c->ntiles = ntiles;
    c->where = where_str(c);
    const SourceSet *s = cg->opt.sources;
    const GOp *o = c->o;
    if (o->span.file >= 0 && s && o->span.file < s->nfiles) {
        int line = 0, col = 0;
        source_line_col(s, o->span.file, o->span.off, &line, &col);
        c->where = arena_printf(cg->arena, "%s at %s:%d:%d", c->where, s->files[o->span.file].path, line, col);
    } else if (o->span.file >= 0) {
        c->where = arena_printf(cg->arena, "%s at file %d offset %u", c->where, (int)o->span.file, o->span.off);
    }
    if (ntiles) c->where = arena_printf(cg->arena, "%s, tile %d of %d", c->where, tile, ntiles);
}

/* The whole op (ntiles 0) or one tile of it. */
static int gen_op(CudaGen *cg, const Graph *g, int op, int tile, int ntiles, CudaKernel *out, int max_out,
                  CudaOpInfo *info, DiagSink *d) {
    if (op < 0 || op >= g->nops) {
        diag_error(d, SPAN_NONE, "cuda_gen: op %d out of range", op);
        return -1;
    }
    GenCtx c;
    int errs0 = d->errors;
    ctx_init(&c, cg, g, op, tile, ntiles, out, max_out, d);
    if (ntiles && (ntiles < 2 || tile < 0 || tile >= ntiles)) {
        cg_fail(&c, "no such tile");
        return -1;
    }
    if (!operands_ok(&c) || !arity_ok(&c)) return -1;
    gen_kind(&c);
    if (cg->arena->failed) {
        diag_error(d, c.o->span, "cuda_gen: out of memory");
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
    case CARG_SEG: fprintf(out, "$seg"); break;
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
