#include "cuexec.h"
#include "devmem.h"
#include "errorf.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int cuexec_bind_thread(CuExec *x, char *err, size_t n) {
    CUEXEC_CHECK(x, x->drv.CtxSetCurrent(x->ctx), err, n);
    return 0;
}

/* "sm_80, sm_90" */
static void plan_archs(const Plan *p, char *out, size_t n) {
    size_t o = 0;
    out[0] = 0;
    for (uint32_t k = 0; k < p->nkernels; k++) {
        const char *a = p->kernels[k].arch;
        bool seen = false;
        for (uint32_t j = 0; j < k && !seen; j++) seen = !strcmp(p->kernels[j].arch, a);
        if (seen || o >= n) continue;
        o += (size_t)snprintf(out + o, n - o, "%s%s", o ? ", " : "", a);
    }
}

static int load_code(CuExec *x, const Plan *p, char *err, size_t n) {
    if (p->nlaunches == 0 || p->nkernels == 0)
        return errorf(err, n,
                    "rank %d: the plan has no GPU code (compiled for the host target, or with --kernels=none): "
                    "compile it for a GPU target (zinfc --target h200), or run it with --backend host",
                    x->rank);
    bool any = false;
    for (uint32_t k = 0; k < p->nkernels && !any; k++) any = !strcmp(p->kernels[k].arch, x->arch);
    if (!any) {
        char have[128];
        plan_archs(p, have, sizeof have);
        return errorf(err, n,
                    "rank %d: the plan has GPU code for %s but this GPU (%s) is %s: recompile with zinfc --kernels=%s",
                    x->rank, have, x->name, x->arch, x->arch);
    }
    x->modules = calloc(p->nkernels, sizeof *x->modules);
    x->funcs = calloc(p->nlaunches, sizeof *x->funcs);
    if (!x->modules || !x->funcs) return errorf(err, n, "rank %d: out of memory", x->rank);
    x->nlaunches = p->nlaunches;
    x->nmodules = p->nkernels;
    for (uint32_t k = 0; k < p->nkernels; k++) {
        if (strcmp(p->kernels[k].arch, x->arch)) continue;
        CUresult rc = x->drv.ModuleLoadData(&x->modules[k], p->kernels[k].data);
        if (rc != CUDA_SUCCESS) {
            x->modules[k] = NULL;
            char why[384];
            cudrv_fail(&x->drv, rc, "cuModuleLoadData", __FILE__, __LINE__, x->rank, why, sizeof why);
            return errorf(err, n, "%s, loading %s for %s", why, p->kernels[k].name, x->arch);
        }
    }
    for (uint32_t li = 0; li < p->nlaunches; li++) {
        const PlanLaunch *l = &p->launches[li];
        CUmodule m = NULL;
        for (uint32_t k = 0; k < p->nkernels && !m; k++)
            if (x->modules[k] && !strcmp(p->kernels[k].name, l->unit)) m = x->modules[k];
        if (!m)
            return errorf(err, n, "rank %d: launch %u (%s) names unit %s, which the plan has no %s code for", x->rank, li,
                        l->entry, l->unit, x->arch);
        CUresult rc = x->drv.ModuleGetFunction(&x->funcs[li], m, l->entry);
        if (rc != CUDA_SUCCESS) {
            char why[384];
            cudrv_fail(&x->drv, rc, "cuModuleGetFunction", __FILE__, __LINE__, x->rank, why, sizeof why);
            return errorf(err, n, "%s: entry %s of %s", why, l->entry, l->unit);
        }
    }
    return 0;
}

/* cuBLASLt for the plan's GEMMs, unless the caller turned it off or the plan has
 * none it may run; a library that does not load or start is not an error:
 * the GEMMs run their launches and the startup line says why. */
static int open_gemms(CuExec *x, const Plan *p, const char *off, char *err, size_t n) {
    x->gemm_of = malloc(sizeof *x->gemm_of * (p->nlaunches ? p->nlaunches : 1));
    if (!x->gemm_of) return errorf(err, n, "rank %d: out of memory", x->rank);
    x->moe_of = calloc(p->nlaunches ? p->nlaunches : 1, sizeof *x->moe_of);
    if (!x->moe_of) return errorf(err, n, "rank %d: out of memory", x->rank);
    uint32_t nlt = 0;
    for (uint32_t li = 0; li < p->nlaunches; li++) {
        x->gemm_of[li] = -1;
        x->moe_of[li] = (uint8_t)cumoe_kind(p, li);
        x->nmoe += x->moe_of[li] != CUMOE_NONE;
    }
    for (uint32_t i = 0; i < p->ngemms; i++)
        if (p->gemms[i].path == PLAN_GEMM_LT) {
            const PlanGemm *g = &p->gemms[i];
            x->gemm_of[g->launch] = (int32_t)i;
            nlt++;
        }
    if (!nlt && !x->nmoe) snprintf(x->lt_why, sizeof x->lt_why, "%s", p->version < 4 ? "a version-3 plan describes no GEMMs" : "the plan gives cuBLASLt none");
    else if (off) snprintf(x->lt_why, sizeof x->lt_why, "cuBLASLt off: %s", off);
    else if (cublaslt_open(&x->lt, x->lt_why, sizeof x->lt_why) == 0) x->lt_on = true;
    x->lt_ws_bytes = x->lt_on ? plan_gemm_ws_bytes(p) : 0; /* without cuBLASLt the launches need none */
    return 0;
}

const char *cuexec_gemm_summary(const CuExec *x, const Plan *p, char *buf, size_t n) {
    uint32_t ngemm = 0, nlt = 0, nsum = 0;
    for (uint32_t li = 0; li < p->nlaunches; li++) ngemm += p->launches[li].entry && !strcmp(p->launches[li].entry, "zk_gemm");
    for (uint32_t i = 0; i < p->ngemms; i++) {
        nlt += p->gemms[i].path == PLAN_GEMM_LT;
        nsum += p->gemms[i].why == PLAN_GEMM_WHY_BATCH_SUM;
    }
    char d[128];
    if (x->lt_on) {
        char w[32];
        int k = snprintf(buf, n, "cuBLASLt (%s) for %u GEMM%s, NVRTC for %u", cublaslt_describe(&x->lt, d, sizeof d), nlt,
                         nlt == 1 ? "" : "s", ngemm - nlt);
        if (nsum && k > 0 && (size_t)k < n)
            k += snprintf(buf + k, n - (size_t)k, " (%u %s)", nsum, plan_gemm_why_names[PLAN_GEMM_WHY_BATCH_SUM]);
        if (x->nmoe && k > 0 && (size_t)k < n)
            k += snprintf(buf + k, n - (size_t)k, "; expert GEMMs of %u moe_expert launch%s per expert", x->nmoe,
                          x->nmoe == 1 ? "" : "es");
        if (x->lt_ws_bytes && k > 0 && (size_t)k < n)
            snprintf(buf + k, n - (size_t)k, "; workspace %s per queue", plan_bytes_str(x->lt_ws_bytes, w, sizeof w));
    } else {
        int k = snprintf(buf, n, "NVRTC for all %u GEMM%s", ngemm, ngemm == 1 ? "" : "s");
        if (x->nmoe && k > 0 && (size_t)k < n)
            k += snprintf(buf + k, n - (size_t)k, " and %u moe_expert launch%s", x->nmoe, x->nmoe == 1 ? "" : "es");
        if (k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, " (%s)", x->lt_why);
    }
    return buf;
}

int cuexec_open(CuExec *x, const Plan *p, const Comm *c, const char *cublaslt_off, char *err, size_t n) {
    memset(x, 0, sizeof *x);
    x->rank = c->rank;
    char why[512];
    if (cudrv_open(&x->drv, why, sizeof why)) return errorf(err, n, "rank %d: %s", c->rank, why);
    int local = c->local_rank, nlocal = c->local_size > 0 ? c->local_size : 1;
    if (nlocal > x->drv.ndevices) {
        errorf(err, n,
             "rank %d: %d ranks run on this node but it has %d GPU%s: each rank needs its own "
             "(start %d rank%s per node, or plan for fewer)",
             c->rank, nlocal, x->drv.ndevices, x->drv.ndevices == 1 ? "" : "s", x->drv.ndevices,
             x->drv.ndevices == 1 ? "" : "s");
        goto bad;
    }
    x->ordinal = local;
    if (cudrv_describe(&x->drv, x->ordinal, x->name, sizeof x->name, &x->mem_total, x->arch, sizeof x->arch, why,
                       sizeof why)) {
        errorf(err, n, "rank %d: GPU %d: %s", c->rank, x->ordinal, why);
        goto bad;
    }
    CUresult rc = x->drv.DeviceGet(&x->dev, x->ordinal);
    if (rc == CUDA_SUCCESS) rc = x->drv.DevicePrimaryCtxRetain(&x->ctx, x->dev);
    if (rc != CUDA_SUCCESS) {
        x->ctx = NULL;
        cudrv_fail(&x->drv, rc, "cuDevicePrimaryCtxRetain", __FILE__, __LINE__, x->rank, err, n);
        goto bad;
    }
    if (cuexec_bind_thread(x, err, n)) goto bad;
    size_t total = 0;
    if (x->drv.MemGetInfo(&x->mem_free_at_open, &total) != CUDA_SUCCESS) x->mem_free_at_open = 0;
    if (load_code(x, p, err, n)) goto bad;
    if (open_gemms(x, p, cublaslt_off, err, n)) goto bad;
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        rc = x->drv.StreamCreate(&x->stream[q], CU_STREAM_NON_BLOCKING);
        if (rc != CUDA_SUCCESS) {
            x->stream[q] = NULL;
            cudrv_fail(&x->drv, rc, "cuStreamCreate", __FILE__, __LINE__, x->rank, err, n);
            goto bad;
        }
    }
    x->ninstrs = p->ninstrs;
    x->ev_begin = calloc(p->ninstrs ? p->ninstrs : 1, sizeof *x->ev_begin);
    x->ev_end = calloc(p->ninstrs ? p->ninstrs : 1, sizeof *x->ev_end);
    if (!x->ev_begin || !x->ev_end) {
        errorf(err, n, "rank %d: out of memory", x->rank);
        goto bad;
    }
    rc = x->drv.EventCreate(&x->epoch, CU_EVENT_DEFAULT);
    for (uint32_t i = 0; i < p->ninstrs && rc == CUDA_SUCCESS; i++) {
        rc = x->drv.EventCreate(&x->ev_begin[i], CU_EVENT_DEFAULT);
        if (rc == CUDA_SUCCESS) rc = x->drv.EventCreate(&x->ev_end[i], CU_EVENT_DEFAULT);
    }
    if (rc != CUDA_SUCCESS) {
        cudrv_fail(&x->drv, rc, "cuEventCreate", __FILE__, __LINE__, x->rank, err, n);
        goto bad;
    }
    return 0;
bad:
    cuexec_close(x);
    return -1;
}

void cuexec_close(CuExec *x) {
    if (!x->drv.lib) return;
    if (x->ctx) {
        x->drv.CtxSetCurrent(x->ctx);
        x->drv.CtxSynchronize();
        for (uint32_t i = 0; i < x->ninstrs; i++) {
            if (x->ev_begin && x->ev_begin[i]) x->drv.EventDestroy(x->ev_begin[i]);
            if (x->ev_end && x->ev_end[i]) x->drv.EventDestroy(x->ev_end[i]);
        }
        if (x->epoch) x->drv.EventDestroy(x->epoch);
        for (int q = 0; q < PLAN_NQUEUES; q++)
            if (x->stream[q]) x->drv.StreamDestroy(x->stream[q]);
        for (uint32_t k = 0; x->modules && k < x->nmodules; k++)
            if (x->modules[k]) x->drv.ModuleUnload(x->modules[k]);
        if (x->lt_on) cublaslt_close(&x->lt); /* its handle before the context goes */
        x->lt_on = false;
        for (int i = 0; i < x->ndev; i++) x->drv.MemFree(x->dev_alloc[i]);
        for (int i = 0; i < x->nhost; i++) x->drv.MemFreeHost(x->host_alloc[i]);
        x->drv.DevicePrimaryCtxRelease(x->dev);
    }
    free(x->ev_begin);
    free(x->ev_end);
    free(x->modules);
    free(x->funcs);
    free(x->gemm_of);
    free(x->moe_of);
    cudrv_close(&x->drv);
    memset(x, 0, sizeof *x);
}

int cuexec_alloc_device(CuExec *x, size_t bytes, const char *what, CUdeviceptr *out, char *err, size_t n) {
    *out = 0;
    if (!bytes) return 0;
    if (x->ndev >= (int)(sizeof x->dev_alloc / sizeof *x->dev_alloc))
        return errorf(err, n, "rank %d: too many device allocations", x->rank);
    CUresult rc = x->drv.MemAlloc(out, bytes);
    if (rc != CUDA_SUCCESS) {
        *out = 0;
        char why[384], b[32], f[32];
        cudrv_fail(&x->drv, rc, "cuMemAlloc", __FILE__, __LINE__, x->rank, why, sizeof why);
        size_t fr = 0, tot = 0;
        if (x->drv.MemGetInfo(&fr, &tot) != CUDA_SUCCESS) fr = 0;
        return errorf(err, n, "%s: %s (%s) on %s, %s free", why, what, plan_bytes_str(bytes, b, sizeof b), x->name,
                    plan_bytes_str(fr, f, sizeof f));
    }
    x->dev_alloc[x->ndev++] = *out;
    x->dev_total += bytes;
    return 0;
}

int cuexec_alloc_host(CuExec *x, size_t bytes, const char *what, void **out, char *err, size_t n) {
    *out = NULL;
    if (!bytes) return 0;
    if (x->nhost >= (int)(sizeof x->host_alloc / sizeof *x->host_alloc))
        return errorf(err, n, "rank %d: too many pinned allocations", x->rank);
    CUresult rc = x->drv.MemHostAlloc(out, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (rc != CUDA_SUCCESS) {
        *out = NULL;
        char why[384], b[32];
        cudrv_fail(&x->drv, rc, "cuMemHostAlloc", __FILE__, __LINE__, x->rank, why, sizeof why);
        return errorf(err, n, "%s: %s (%s of page-locked host memory)", why, what, plan_bytes_str(bytes, b, sizeof b));
    }
    memset(*out, 0, bytes);
    x->host_alloc[x->nhost++] = *out;
    return 0;
}

int cuexec_launch(CuExec *x, const Plan *p, uint32_t li, const CuExecBind *b, CUstream s, char *err, size_t n) {
    if (li >= p->nlaunches) return errorf(err, n, "rank %d: launch %u outside the plan", x->rank, li);
    const PlanLaunch *l = &p->launches[li];
    if (x->lt_on && x->gemm_of && li < x->nlaunches && x->gemm_of[li] >= 0) {
        const PlanGemm *g = &p->gemms[x->gemm_of[li]];
        const CUdeviceptr *t = b->tensor;
#define LT_OPERAND(id) ((id) == PLAN_GEMM_OP_WS ? b->ws : t ? t[id] : 0) /* the op's workspace, or a tensor */
        LtOperands o = {.c = LT_OPERAND(g->c), .a = LT_OPERAND(g->a), .b = LT_OPERAND(g->b),
                        .bias = t && g->bias >= 0 ? t[g->bias] : 0, .ws = b->gemm_ws};
#undef LT_OPERAND
        if (!o.c || !o.a || !o.b || (g->bias >= 0 && !o.bias))
            return errorf(err, n, "rank %d: cuBLASLt gemm of launch %u: an operand is not bound to device memory", x->rank, li);
        int rc = cublaslt_gemm(&x->lt, g, &o, s, err, n);
        if (rc <= 0) return rc;
        /* no algorithm for this shape: its launch */
    }
    if (x->lt_on && x->moe_of && li < x->nlaunches && x->moe_of[li] != CUMOE_NONE) {
        CuMoeKind k = (CuMoeKind)x->moe_of[li];
        const PlanLaunchArg *wa = &p->launch_args[l->arg + (k == CUMOE_DW ? 0 : 2)];
        CUdeviceptr w = b->tensor ? b->tensor[wa->tensor] : 0;
        if (!w || !b->ws || l->op < 0 || (uint32_t)l->op >= p->nops || !p->op_code)
            return errorf(err, n, "rank %d: %s (launch %u): its weight or workspace is not bound to device memory", x->rank,
                          l->entry, li);
        const PlanTensor *wt = &p->tensors[wa->tensor]; /* f32, bf16 or f16 (cumoe_kind) */
        CuMoeBind mb = {.ws = b->ws, .w = w + (CUdeviceptr)wa->i, .gemm_ws = b->gemm_ws, .ws_bytes = p->op_code[l->op].ws_bytes,
                        /* what is bound: a tile of experts holds only its own */
                        .w_elems = (b->elems && b->elems[wa->tensor] > 0 ? b->elems[wa->tensor] : wt->numel) -
                                   wa->i / plan_dtype_size(wt->dtype),
                        .gemm_ws_bytes = b->gemm_ws ? (int64_t)x->lt_ws_bytes : 0, .rank = x->rank};
        int rc = cumoe_run(&x->lt, &x->drv, p, li, k, &mb, s, err, n);
        if (rc <= 0) return rc;
        /* no algorithm for an expert's shape: the launch */
    }
    union {
        void *ptr;
        long long i;
        float f;
    } val[32];
    void *params[32];
    if (l->nargs > 32) return errorf(err, n, "rank %d: %s has %u arguments", x->rank, l->entry, l->nargs);
    int pos = 0, i64 = 0, f32 = 0;
    for (uint32_t k = 0; k < l->nargs; k++) {
        const PlanLaunchArg *a = &p->launch_args[l->arg + k];
        memset(&val[k], 0, sizeof val[k]);
        switch ((PlanArgKind)a->kind) {
        case PARG_TENSOR: {
            CUdeviceptr d = 0;
            if (a->tensor < 0) d = pos < b->npos ? b->pos[pos++] : 0;
            else if ((uint32_t)a->tensor < p->ntensors && b->tensor) d = b->tensor[a->tensor];
            if (!d)
                return errorf(err, n, "rank %d: %s argument %u: tensor %s is not bound to device memory", x->rank,
                            l->entry, k, a->tensor >= 0 ? p->tensors[a->tensor].name : "(utility operand)");
            val[k].ptr = (void *)(uintptr_t)(d + (CUdeviceptr)a->i); /* i: a tile's byte offset */
            break;
        }
        case PARG_WS:
            if (!b->ws) return errorf(err, n, "rank %d: %s needs a workspace", x->rank, l->entry);
            val[k].ptr = (void *)(uintptr_t)(b->ws + (CUdeviceptr)a->i);
            break;
        case PARG_NULL: val[k].ptr = NULL; break;
        case PARG_I64: val[k].i = i64 < b->ni64 ? b->i64[i64] : a->i; i64++; break;
        case PARG_F32: val[k].f = f32 < b->nf32 ? b->f32[f32] : a->f; f32++; break;
        case PARG_RT: val[k].f = a->rt < PLAN_NRT && b->rt ? b->rt->v[a->rt] : 0.f; break;
        case PARG_NUMEL:
            val[k].i = a->tensor >= 0 && (uint32_t)a->tensor < p->ntensors && b->elems ? b->elems[a->tensor] : 0;
            break;
        case PARG_SEG: val[k].ptr = (void *)(uintptr_t)b->seg; break;
        default: return errorf(err, n, "rank %d: %s argument %u has unknown kind %u", x->rank, l->entry, k, a->kind);
        }
        params[k] = &val[k];
    }
    CUresult rc = x->drv.LaunchKernel(x->funcs[li], l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                                      l->block[2], l->smem, s, params, NULL);
    if (rc != CUDA_SUCCESS) {
        char why[384];
        cudrv_fail(&x->drv, rc, "cuLaunchKernel", __FILE__, __LINE__, x->rank, why, sizeof why);
        return errorf(err, n, "%s: %s of %s <<<%u,%u,%u / %u,%u,%u>>>", why, l->entry, l->unit, l->grid[0], l->grid[1],
                    l->grid[2], l->block[0], l->block[1], l->block[2]);
    }
    return 0;
}
