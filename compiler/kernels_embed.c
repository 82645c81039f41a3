#include "kernels_embed.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_gen.h"
#include "nvrtc.h"

const char *kernels_unit_name(const CudaModule *m, int u, char *buf, size_t n) {
    snprintf(buf, n, "%s-%.12s.cu", m->units[u].family, m->units[u].hash);
    return buf;
}

/* Kinds and run-time values are stored by the plan's codes; the two enums
 * must keep one meaning. */
_Static_assert((int)CRT_LR == PLAN_RT_LR && (int)CRT_BC1 == PLAN_RT_BC1 && (int)CRT_BC2 == PLAN_RT_BC2 &&
                   (int)CRT_INV_LOSS_SCALE == PLAN_RT_INV_LOSS_SCALE && (int)CRT_LOSS_GRAD == PLAN_RT_LOSS_GRAD &&
                   (int)CRT_COUNT == PLAN_NRT,
               "CudaRtValue and the plan's run-time values differ");
_Static_assert((int)DT_F32 < PLAN_NDTYPES && (int)DT_BF16 < PLAN_NDTYPES && (int)DT_F16 < PLAN_NDTYPES, "DType codes exceed PLAN_NDTYPES");

static PlanLaunchArg plan_arg(const CudaArg *a) {
    PlanLaunchArg r = {.tensor = -1};
    switch (a->kind) {
    case CARG_TENSOR: r.kind = PARG_TENSOR; r.tensor = a->tensor; r.i = a->off; break;
    case CARG_WS: r.kind = PARG_WS; r.i = a->ws_off; break;
    case CARG_NULL: r.kind = PARG_NULL; break;
    case CARG_I64: r.kind = PARG_I64; r.i = a->i; break;
    case CARG_F32: r.kind = PARG_F32; r.f = a->f; break;
    case CARG_RT: r.kind = PARG_RT; r.rt = (uint8_t)a->rt; break;
    case CARG_SEG: r.kind = PARG_SEG; break;
    }
    return r;
}

/* Adam and the gradient norm run on this rank's shard: their element count
 * argument becomes PARG_NUMEL of the tensor it counts. cuda_gen's argument
 * order is checked, not assumed: a changed kernel signature fails here. */
static bool shard_counts(const Graph *g, const CudaKernel *k, PlanLaunchArg *args, DiagSink *d) {
    const GOp *o = &g->ops[k->op];
    int at = -1, tensor = -1;
    if (o->kind == OP_ADAM) {
        if (strcmp(k->entry, "zk_adam") && strcmp(k->entry, "zk_adam_bf16s") && strcmp(k->entry, "zk_adam_q8")) {
            diag_error(d, o->span, "kernels: the adam op launches %s, expected zk_adam, zk_adam_bf16s or zk_adam_q8 (cuda_gen changed?)",
                       k->entry);
            return false;
        }
        at = 6;
        tensor = o->in[0];
    } else if (o->kind == OP_GRAD_NORM && !strcmp(k->entry, "zk_sumsq_partial")) {
        if (k->nargs < 3 || k->args[1].kind != CARG_TENSOR) {
            diag_error(d, o->span, "kernels: zk_sumsq_partial's argument 1 is not its gradient (cuda_gen changed?)");
            return false;
        }
        at = 2;
        tensor = k->args[1].tensor;
    } else {
        return true;
    }
    if (tensor < 0 || tensor >= g->ntensors || k->nargs <= at || k->args[at].kind != CARG_I64 ||
        k->args[at].i != g->tensors[tensor].numel) {
        diag_error(d, o->span, "kernels: %s's argument %d is not the element count of %s (cuda_gen changed?)", k->entry, at,
                   tensor >= 0 && tensor < g->ntensors && g->tensors[tensor].name ? g->tensors[tensor].name : "its tensor");
        return false;
    }
    args[at] = (PlanLaunchArg){.kind = PARG_NUMEL, .tensor = tensor};
    return true;
}

/* One zk_axpy per float dtype that a parameter or gradient has, appended to
 * m (with its unit when it is not among m's). util[dt] gets its index. */
static bool add_utility(CudaGen *cg, const Graph *g, CudaModule *m, int util[PLAN_NDTYPES], DiagSink *d) {
    static const DType dts[] = {DT_F32, DT_BF16, DT_F16};
    enum { NDT = sizeof dts / sizeof dts[0] };
    Arena *a = cg->arena;
    CudaKernel *ks = ARENA_NEWN(a, CudaKernel, m->nkernels + NDT);
    CudaUnit *us = ARENA_NEWN(a, CudaUnit, m->nunits + NDT);
    if (!ks || !us) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    memcpy(ks, m->kernels, sizeof *ks * (size_t)m->nkernels);
    memcpy(us, m->units, sizeof *us * (size_t)m->nunits);
    m->kernels = ks;
    m->units = us;
    for (int k = 0; k < NDT; k++) {
        int t = -1;
        for (int i = 0; i < g->ntensors && t < 0; i++)
            if ((g->tensors[i].cls == TC_GRAD || g->tensors[i].cls == TC_PARAM) && g->tensors[i].dtype == dts[k]) t = i;
        if (t < 0) continue;
        /* Any two tensors of the dtype give the unit and the argument
         * layout; the executor binds y, x and n itself. */
        CudaKernel *kn = &ks[m->nkernels];
        if (cuda_gen_axpy(cg, g, t, t, 1.0, kn, d) != 0) return false;
        if (strcmp(kn->entry, "zk_axpy") || kn->nargs != 4 || kn->args[0].kind != CARG_TENSOR ||
            kn->args[1].kind != CARG_TENSOR || kn->args[2].kind != CARG_I64 || kn->args[3].kind != CARG_F32) {
            diag_error(d, SPAN_NONE, "kernels: cuda_gen_axpy is not zk_axpy(y, x, n, alpha) (cuda_gen changed?)");
            return false;
        }
        int u = -1;
        for (int j = 0; j < m->nunits && u < 0; j++)
            if (!strcmp(us[j].hash, kn->hash)) u = j;
        if (u < 0) {
            u = m->nunits++;
            us[u] = (CudaUnit){.family = kn->family, .spec = kn->spec, .source = kn->source, .first_kernel = m->nkernels};
            memcpy(us[u].hash, kn->hash, sizeof us[u].hash);
        }
        us[u].nlaunches++;
        kn->unit = u;
        kn->op = -1;
        util[dts[k]] = m->nkernels++;
    }
    return true;
}

/* Appends launches ks[0..n) (of one tile) to m, adding their units when new. */
static bool module_append(CudaGen *cg, CudaModule *m, int *cap, const CudaKernel *ks, int n, DiagSink *d) {
    Arena *a = cg->arena;
    if (m->nkernels + n > *cap) {
        int nc = *cap * 2 > m->nkernels + n ? *cap * 2 : m->nkernels + n;
        CudaKernel *nk = ARENA_NEWN(a, CudaKernel, nc);
        CudaUnit *nu = ARENA_NEWN(a, CudaUnit, nc); /* a unit has a launch: never more units than launches */
        if (!nk || !nu) {
            diag_error(d, SPAN_NONE, "out of memory");
            return false;
        }
        memcpy(nk, m->kernels, sizeof *nk * (size_t)m->nkernels);
        memcpy(nu, m->units, sizeof *nu * (size_t)m->nunits);
        m->kernels = nk;
        m->units = nu;
        *cap = nc;
    }
    for (int i = 0; i < n; i++) {
        CudaKernel *kn = &m->kernels[m->nkernels];
        *kn = ks[i];
        int u = -1;
        for (int j = 0; j < m->nunits && u < 0; j++)
            if (!strcmp(m->units[j].hash, kn->hash)) u = j;
        if (u < 0) {
            u = m->nunits++;
            m->units[u] = (CudaUnit){.family = kn->family, .spec = kn->spec, .source = kn->source, .first_kernel = m->nkernels};
            memcpy(m->units[u].hash, kn->hash, sizeof m->units[u].hash);
        }
        m->units[u].nlaunches++;
        kn->unit = u;
        m->nkernels++;
    }
    return true;
}

typedef struct TileKey {
    int32_t op, tile, ntiles;
} TileKey;

static int tile_key_cmp(const void *a, const void *b) {
    const TileKey *x = a, *y = b;
    if (x->op != y->op) return x->op < y->op ? -1 : 1;
    if (x->tile != y->tile) return x->tile < y->tile ? -1 : 1;
    return x->ntiles < y->ntiles ? -1 : x->ntiles > y->ntiles;
}

/* The tile launches of every distinct (op, tile, ntiles) of p's tiled KERNEL
 * instructions, appended to m (after the op and utility launches), with
 * their PlanTileCode entries sorted by op, then tile. Their units are m's
 * when the specialisation is one the ops already use (most: a tile's gemm
 * differs only in sizes, which are arguments), else new ones in m. */
static bool add_tiles(CudaGen *cg, const Graph *g, CudaModule *m, const Plan *p, PlanTileCode **out, uint32_t *nout,
                      DiagSink *d) {
    *out = NULL;
    *nout = 0;
    uint32_t nk = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) nk += p->instrs[i].op == PI_KERNEL && p->instrs[i].ntiles > 1;
    if (!nk) return true;
    Arena *a = cg->arena;
    TileKey *keys = ARENA_NEWN(a, TileKey, nk);
    if (!keys) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op != PI_KERNEL || s->ntiles <= 1) continue;
        if (s->arg < 0 || s->arg >= g->nops || s->tile < 0 || s->tile >= s->ntiles) {
            diag_error(d, SPAN_NONE, "kernels: instruction %u runs tile %d of %d of op %d, which does not exist", i, s->tile,
                       s->ntiles, s->arg);
            return false;
        }
        keys[n++] = (TileKey){s->arg, s->tile, s->ntiles};
    }
    qsort(keys, n, sizeof *keys, tile_key_cmp);
    uint32_t u = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!i || tile_key_cmp(&keys[i], &keys[u - 1])) keys[u++] = keys[i];
    n = u;
    PlanTileCode *tc = ARENA_NEWN(a, PlanTileCode, n);
    if (!tc) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    int cap = m->nkernels;
    bool ok = true;
    for (uint32_t i = 0; i < n; i++) {
        const TileKey *k = &keys[i];
        CudaKernel tmp[CUDA_OP_MAX_KERNELS];
        CudaOpInfo info;
        int need = cuda_gen_op_tile(cg, g, k->op, k->tile, k->ntiles, tmp, CUDA_OP_MAX_KERNELS, &info, d);
        if (need < 0) {
            ok = false; /* every failing tile is reported */
            continue;
        }
        if (need > CUDA_OP_MAX_KERNELS) {
            diag_error(d, g->ops[k->op].span, "kernels: tile %d of %d of op %d needs %d launches (cuda_gen changed?)", k->tile,
                       k->ntiles, k->op, need);
            return false;
        }
        /* The executor reads a tile's error word where the op's is: the
         * launches must agree (the same workspace layout up to it). */
        const CudaOpInfo *whole = &m->op_info[k->op];
        if (info.err_off != whole->err_off) {
            diag_error(d, g->ops[k->op].span,
                       "kernels: tile %d of %d of op %d has its error word at %" PRId64 ", the op at %" PRId64 " (cuda_gen changed?)",
                       k->tile, k->ntiles, k->op, info.err_off, whole->err_off);
            return false;
        }
        tc[i] = (PlanTileCode){.op = k->op, .tile = k->tile, .ntiles = k->ntiles, .first = (uint32_t)m->nkernels,
                               .count = (uint32_t)need, .ws_bytes = info.ws_bytes};
        if (!module_append(cg, m, &cap, tmp, need, d)) return false;
    }
    if (!ok) return false;
    *out = tc;
    *nout = n;
    return true;
}

bool kernels_embed_launches(Plan *p, const Graph *g, CudaGen *cg, CudaModule *m, DiagSink *d) {
    int util[PLAN_NDTYPES];
    for (int t = 0; t < PLAN_NDTYPES; t++) util[t] = -1;
    if (!add_utility(cg, g, m, util, d)) return false;
    if ((uint32_t)g->nops != p->nops) {
        diag_error(d, SPAN_NONE, "kernels: the graph has %d ops, the plan %u", g->nops, p->nops);
        return false;
    }
    PlanTileCode *tiles;
    uint32_t ntiles;
    if (!add_tiles(cg, g, m, p, &tiles, &ntiles, d)) return false;
    uint32_t nargs = 0;
    for (int i = 0; i < m->nkernels; i++) nargs += (uint32_t)m->kernels[i].nargs;
    Arena *pa = &p->arena;
    PlanLaunch *ls = ARENA_NEWN(pa, PlanLaunch, m->nkernels + 1);
    PlanLaunchArg *as = ARENA_NEWN(pa, PlanLaunchArg, nargs + 1);
    PlanOpCode *oc = ARENA_NEWN(pa, PlanOpCode, g->nops + 1);
    const char **names = ARENA_NEWN(cg->arena, const char *, m->nunits + 1);
    if (!ls || !as || !oc || !names) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    char nb[96];
    for (int u = 0; u < m->nunits; u++) names[u] = arena_strdup(pa, kernels_unit_name(m, u, nb, sizeof nb));
    uint32_t na = 0;
    for (int i = 0; i < m->nkernels; i++) {
        const CudaKernel *k = &m->kernels[i];
        if (k->unit < 0 || k->unit >= m->nunits || k->op < -1 || k->op >= g->nops) {
            diag_error(d, SPAN_NONE, "kernels: launch %d (%s) has unit %d, op %d", i, k->entry, k->unit, k->op);
            return false;
        }
        PlanLaunch *l = &ls[i];
        *l = (PlanLaunch){.unit = names[k->unit], .entry = arena_strdup(pa, k->entry), .smem = k->smem, .op = k->op,
                          .arg = na, .nargs = (uint32_t)k->nargs};
        memcpy(l->grid, k->grid, sizeof l->grid);
        memcpy(l->block, k->block, sizeof l->block);
        for (int j = 0; j < k->nargs; j++) {
            as[na + (uint32_t)j] = plan_arg(&k->args[j]);
            /* A utility launch's tensors are the executor's to bind. */
            if (k->op < 0 && as[na + (uint32_t)j].kind == PARG_TENSOR) as[na + (uint32_t)j].tensor = -1;
        }
        if (k->op >= 0 && !shard_counts(g, k, as + na, d)) return false;
        na += (uint32_t)k->nargs;
    }
    /* every gemm launch's descriptor, in launch order */
    uint32_t ng = 0;
    for (int i = 0; i < m->nkernels; i++) ng += m->kernels[i].gemm.on;
    PlanGemm *gs = ng ? ARENA_NEWN(pa, PlanGemm, ng) : NULL;
    if (ng && !gs) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    ng = 0;
    for (int i = 0; i < m->nkernels; i++) {
        const CudaGemm *x = &m->kernels[i].gemm;
        if (!x->on) continue;
        gs[ng++] = (PlanGemm){.launch = (uint32_t)i, .path = x->lt ? PLAN_GEMM_LT : PLAN_GEMM_NVRTC,
                              .why = x->lt                                   ? PLAN_GEMM_WHY_NONE
                                     : x->why == CUDA_GEMM_WHY_DEQUANT ? PLAN_GEMM_WHY_DEQUANT
                                                                       : PLAN_GEMM_WHY_BATCH_SUM,
                              .dtype = (uint8_t)x->dtype,
                              .flags = (uint8_t)((x->ta ? PLAN_GEMM_TA : 0) | (x->tb ? PLAN_GEMM_TB : 0) |
                                                 (x->accumulate ? PLAN_GEMM_ACCUM : 0)),
                              .c = x->c, .a = x->a, .b = x->b, .bias = x->bias, .off_c = x->off_c, .off_a = x->off_a,
                              .off_b = x->off_b, .m = x->M, .n = x->N, .k = x->K, .lda = x->lda, .ldb = x->ldb,
                              .ldc = x->ldc, .batch = x->batch, .stride_a = x->sA, .stride_b = x->sB, .stride_c = x->sC,
                              .rbatch = x->rbatch, .rstride_a = x->rsA, .rstride_b = x->rsB, .ws_off = x->ws_off,
                              .ws_bytes = x->ws_bytes};
    }
    for (int o = 0; o < g->nops; o++) {
        const CudaOpInfo *in = &m->op_info[o];
        oc[o] = (PlanOpCode){.first = (uint32_t)m->op_first[o], .count = (uint32_t)m->op_count[o], .ws_bytes = in->ws_bytes,
                             .err_off = in->err_off, .err_what = arena_strdup(pa, in->err_what ? in->err_what : "")};
    }
    PlanTileCode *ptc = ntiles ? ARENA_NEWN(pa, PlanTileCode, ntiles) : NULL;
    if (ntiles && ptc) memcpy(ptc, tiles, sizeof *ptc * ntiles);
    if (pa->failed) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    p->tile_code = ptc;
    p->ntile_code = ntiles;
    p->launches = ls;
    p->nlaunches = (uint32_t)m->nkernels;
    p->launch_args = as;
    p->nlaunch_args = na;
    p->op_code = oc;
    p->gemms = gs;
    p->ngemms = ng;
    for (int t = 0; t < PLAN_NDTYPES; t++) p->util[PLAN_UTIL_AXPY][t] = util[t];
    return true;
}


/* The decode unit appended to m's units when the model can use it: the
 * plan's kernel table carries it like any unit (compiled, its source
 * written), though no launch names it. */
static bool add_decode(CudaGen *cg, const Graph *g, CudaModule *m, DiagSink *d) {
    CudaUnit du;
    int rc = cuda_gen_decode_unit(cg, g, &du, d);
    if (rc <= 0) return rc == 0;
    CudaUnit *us = ARENA_NEWN(cg->arena, CudaUnit, m->nunits + 1);
    if (!us) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    memcpy(us, m->units, sizeof *us * (size_t)m->nunits);
    us[m->nunits++] = du;
    m->units = us;
    return true;
}

/* A plan whose kernels failed to compile keeps no launches (they would name
 * units it does not have). */
static void drop_launches(Plan *p) {
    p->launches = NULL;
    p->nlaunches = 0;
    p->launch_args = NULL;
    p->nlaunch_args = 0;
    p->op_code = NULL;
    p->tile_code = NULL;
    p->ntile_code = 0;
    p->gemms = NULL;
    p->ngemms = 0;
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++) p->util[u][t] = -1;
}

/* The bf16/f16 kernels run on the tensor cores (mma.sync m16n8k16 with
 * bf16 or f16 operands): a hardware limit below sm_80 (the V100 is sm_70). */
static bool arch_serves(const Graph *g, const char *arch, DiagSink *d) {
    const char *u = strrchr(arch, '_');
    if (!u || atoi(u + 1) >= 80) return true;
    for (int i = 0; i < g->ntensors; i++) {
        DType dt = g->tensors[i].dtype;
        if (dt != DT_BF16 && dt != DT_F16) continue;
        diag_error(d, SPAN_NONE, "--kernels=%s: the %s kernels run on the tensor cores (mma.sync m16n8k16), which needs "
                   "sm_80 or newer", arch, dt == DT_BF16 ? "bf16" : "f16");
        diag_hint(d, "plan the model in f32 for this GPU, or compile for sm_80 or newer");
        return false;
    }
    return true;
}

bool kernels_embed(Plan *p, const Graph *g, const char *archs, const EmbedDirs *dirs, const SourceSet *src,
                   int sm_count, DiagSink *d, EmbedStats *st) {
    memset(st, 0, sizeof *st);
    EmbedDirs none = {0};
    if (!dirs) dirs = &none;
    const char *source_dir = dirs->source_dir;
    char why[512];
    if (!nvrtc_available(why, sizeof why)) {
        diag_error(d, SPAN_NONE, "cannot compile the plan's CUDA kernels: %s", why);
        diag_hint(d, "install the CUDA toolkit (NVRTC), or plan with --kernels=none for a plan without GPU code");
        return false;
    }
    const char *list[8];
    char buf[128];
    snprintf(buf, sizeof buf, "%s", archs);
    int na = 0;
    for (char *s = strtok(buf, ","); s && na < 8; s = strtok(NULL, ",")) list[na++] = s;
    if (!na) {
        diag_error(d, SPAN_NONE, "--kernels: no architecture given (e.g. sm_80,sm_90)");
        return false;
    }
    for (int i = 0; i < na; i++)
        if (!arch_serves(g, list[i], d)) return false;
    Arena a;
    arena_init(&a);
    CudaGen cg;
    CudaGenOptions co = {.kernel_dir = dirs->kernel_dir, .sources = src, .sm_count = sm_count};
    cuda_gen_init(&cg, &a, &co);
    CudaModule m;
    /* A shape the kernels cannot serve fails every layer alike: show the
     * first few, then the way out. */
    DiagSink gd;
    diag_init(&gd);
    gd.max_errors = 3;
    int grc = cuda_gen_graph(&cg, g, &m, &gd);
    for (int i = 0; i < gd.len; i++) {
        const Diag *x = &gd.items[i];
        if (x->level == DIAG_ERROR) diag_error(d, x->span, "%s", x->msg);
        else if (x->level == DIAG_NOTE) diag_note(d, x->span, "%s", x->msg);
        else if (x->level == DIAG_HINT) diag_hint(d, "%s", x->msg);
        else diag_warning(d, x->span, "%s", x->msg);
    }
    if (gd.truncated) diag_note(d, SPAN_NONE, "%d more ops fail the same way", gd.errors - gd.max_errors);
    diag_free(&gd);
    if (grc != 0) {
        diag_hint(d, "zinfc --kernels=none writes the plan without GPU code (for the host backend, or to inspect it)");
        arena_free(&a);
        return false;
    }
    /* The launches first: they add the utility units, which are compiled
     * and written like the others; then the decode unit. */
    if (!kernels_embed_launches(p, g, &cg, &m, d) || !add_decode(&cg, g, &m, d) ||
        (source_dir && cuda_module_write_sources(&m, source_dir, d) != 0)) {
        drop_launches(p);
        arena_free(&a);
        return false;
    }
    int nj = m.nunits * na;
    NvrtcJob *jobs = calloc((size_t)(nj ? nj : 1), sizeof *jobs);
    if (!jobs) {
        drop_launches(p);
        arena_free(&a);
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    for (int u = 0; u < m.nunits; u++)
        for (int k = 0; k < na; k++) {
            NvrtcJob *j = &jobs[u * na + k];
            j->source = m.units[u].source;
            char nb[96];
            j->name = arena_strdup(&a, kernels_unit_name(&m, u, nb, sizeof nb));
            j->arch = list[k];
        }
    NvrtcOptions no = {.cache_dir = dirs->cache_dir};
    int failed = nvrtc_compile_many(jobs, nj, &no, 0);
    bool ok = failed == 0;
    PlanKernel *pk = ok ? ARENA_NEWN(&p->arena, PlanKernel, nj ? nj : 1) : NULL;
    if (ok && !pk) ok = false;
    for (int i = 0; i < nj; i++) {
        NvrtcJob *j = &jobs[i];
        if (j->rc != 0) {
            diag_error(d, SPAN_NONE, "NVRTC failed on %s for %s: %s", j->name, j->arch,
                       j->result.error ? j->result.error : "unknown error");
            if (j->result.failed_source) diag_note(d, SPAN_NONE, "the generated source is saved in %s", j->result.failed_source);
        } else if (ok) {
            /* The resource report: one line per entry point. */
            /* The specialisation first (dtype, transposes, the planner's gemm tile), then ptxas. */
            char res[1024] = "";
            size_t o = (size_t)snprintf(res, sizeof res, "[%s] ", m.units[i / na].spec ? m.units[i / na].spec : "");
            if (o >= sizeof res) o = sizeof res - 1;
            for (int f = 0; f < j->result.nfuncs && o < sizeof res; f++) {
                const NvrtcFuncRes *fr = &j->result.funcs[f];
                o += (size_t)snprintf(res + o, sizeof res - o, "%s%s: %d registers, %d B smem, %d B stack, %d/%d spill",
                                      f ? "; " : "", fr->name, fr->registers, fr->smem_bytes, fr->stack_bytes,
                                      fr->spill_stores, fr->spill_loads);
            }
            uint8_t *data = ARENA_NEWN(&p->arena, uint8_t, j->result.cubin_size ? j->result.cubin_size : 1);
            if (!data) { ok = false; continue; }
            memcpy(data, j->result.cubin, j->result.cubin_size);
            pk[i] = (PlanKernel){arena_strdup(&p->arena, j->name), arena_strdup(&p->arena, j->arch),
                                 arena_strdup(&p->arena, res), data, j->result.cubin_size};
            st->bytes += j->result.cubin_size;
            st->seconds += j->result.seconds;
            if (j->result.cached) st->cached++;
            else st->compiled++;
        }
        nvrtc_result_free(&j->result);
    }
    if (ok) {
        p->kernels = pk;
        p->nkernels = (uint32_t)nj;
        st->units = m.nunits;
        st->archs = na;
    } else {
        drop_launches(p);
    }
    free(jobs);
    arena_free(&a);
    return ok && !p->arena.failed;
}
