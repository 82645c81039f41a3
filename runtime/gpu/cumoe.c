#include "cumoe.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "errorf.h"
#include "vocab.h"

/* The argument kinds of each product, as compiler/cuda_gen_moe.c emits
 * them: fwd/dx (c block, a block, w, start, E, O, I), dw (dw, dyg block,
 * xg block, start, E, O, I). */
static const uint8_t kinds_cw[7] = {PARG_WS, PARG_WS, PARG_TENSOR, PARG_WS, PARG_I64, PARG_I64, PARG_I64};
static const uint8_t kinds_dw[7] = {PARG_TENSOR, PARG_WS, PARG_WS, PARG_WS, PARG_I64, PARG_I64, PARG_I64};

CuMoeKind cumoe_kind(const Plan *p, uint32_t li) {
    if (li >= p->nlaunches || !p->launches[li].entry) return CUMOE_NONE;
    const PlanLaunch *l = &p->launches[li];
    CuMoeKind k = !strcmp(l->entry, "zk_moe_gemm_fwd") ? CUMOE_FWD
                : !strcmp(l->entry, "zk_moe_gemm_dx")  ? CUMOE_DX
                : !strcmp(l->entry, "zk_moe_gemm_dw")  ? CUMOE_DW
                                                       : CUMOE_NONE;
    if (k == CUMOE_NONE || l->nargs != 7 || (uint64_t)l->arg + 7 > p->nlaunch_args) return CUMOE_NONE;
    const uint8_t *want = k == CUMOE_DW ? kinds_dw : kinds_cw;
    for (int i = 0; i < 7; i++)
        if (p->launch_args[l->arg + i].kind != want[i]) return CUMOE_NONE;
    int32_t t = p->launch_args[l->arg + (k == CUMOE_DW ? 0 : 2)].tensor;
    if (t < 0 || (uint32_t)t >= p->ntensors) return CUMOE_NONE;
    int dt = p->tensors[t].dtype;
    return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16 ? k : CUMOE_NONE;
}

/* off + rows * cols elements of es bytes lie within [0, limit). */
static bool fits(int64_t off, int64_t rows, int64_t cols, int64_t es, int64_t limit) {
    if (off < 0 || rows < 0 || cols < 1 || rows > INT64_MAX / 16 / cols || rows * cols > (INT64_MAX / 16) / es) return false;
    return off <= limit && rows * cols * es <= limit - off;
}

/* Expert e's gemm (rows c from row s0 of the blocks) as a row-major plan
 * GEMM (runtime/plan/plan.h, PlanGemm) and its operands. */
static void expert_gemm(CuMoeKind k, const PlanLaunchArg *a, int dtype, int64_t e, int64_t s0, int64_t c, int64_t O,
                        int64_t I, int64_t es, const CuMoeBind *b, PlanGemm *g, LtOperands *o) {
    memset(g, 0, sizeof *g);
    g->path = PLAN_GEMM_LT;
    g->dtype = (uint8_t)dtype;
    g->bias = -1;
    g->batch = g->rbatch = 1;
    g->ws_bytes = b->gemm_ws_bytes;
    *o = (LtOperands){.ws = b->gemm_ws};
    if (k == CUMOE_DW) { /* dw[e] [O, I] += dyg_e^T [O, c] xg_e [c, I] */
        *o = (LtOperands){.c = b->w, .a = b->ws, .b = b->ws, .ws = b->gemm_ws};
        g->flags = PLAN_GEMM_TA | PLAN_GEMM_ACCUM;
        g->off_c = e * O * I * es;
        g->off_a = a[1].i + s0 * O * es;
        g->off_b = a[2].i + s0 * I * es;
        g->m = O, g->n = I, g->k = c, g->lda = O, g->ldb = I, g->ldc = I;
        return;
    }
    *o = (LtOperands){.c = b->ws, .a = b->ws, .b = b->w, .ws = b->gemm_ws};
    g->off_b = e * O * I * es;
    if (k == CUMOE_FWD) { /* yg_e [c, O] = xg_e [c, I] w[e]^T */
        g->flags = PLAN_GEMM_TB;
        g->off_c = a[0].i + s0 * O * es;
        g->off_a = a[1].i + s0 * I * es;
        g->m = c, g->n = O, g->k = I, g->lda = I, g->ldb = I, g->ldc = O;
    } else { /* dxg_e [c, I] = dyg_e [c, O] w[e] [O, I] */
        g->off_c = a[0].i + s0 * I * es;
        g->off_a = a[1].i + s0 * O * es;
        g->m = c, g->n = I, g->k = O, g->lda = O, g->ldb = I, g->ldc = I;
    }
}

int cumoe_run(CublasLt *lt, CudaDrv *drv, const Plan *p, uint32_t li, CuMoeKind k, const CuMoeBind *b, CUstream s,
              char *err, size_t n) {
    const PlanLaunch *l = &p->launches[li];
    const PlanLaunchArg *a = &p->launch_args[l->arg];
    int32_t wt = a[k == CUMOE_DW ? 0 : 2].tensor;
    int dtype = p->tensors[wt].dtype;
    int64_t es = plan_dtype_size(dtype), E = a[4].i, O = a[5].i, I = a[6].i;
    int64_t cc = k == CUMOE_FWD ? O : I, ac = k == CUMOE_FWD ? I : O; /* columns of the c and a blocks (fwd, dx) */
    if (E < 1 || E > INT32_MAX || O < 1 || I < 1 || O > INT32_MAX || I > INT32_MAX || E * O > INT64_MAX / 16 / I ||
        E * O * I > b->w_elems || !fits(a[3].i, E + 1, 1, 4, b->ws_bytes))
        return errorf(err, n, "rank %d: %s (launch %u): E %" PRId64 ", O %" PRId64 ", I %" PRId64 " do not fit '%s' (%" PRId64
                      " elements) or start[] its %" PRId64 "-byte workspace", b->rank, l->entry, li, E, O, I,
                      p->tensors[wt].name, b->w_elems, b->ws_bytes);
    int32_t *start = malloc(sizeof *start * (size_t)(E + 1));
    if (!start) return errorf(err, n, "rank %d: out of memory", b->rank);
    /* the counts are the routing's, on the device: wait for them */
    CUresult rc = drv->MemcpyDtoHAsync(start, b->ws + (CUdeviceptr)a[3].i, sizeof *start * (size_t)(E + 1), s);
    if (rc == CUDA_SUCCESS) rc = drv->StreamSynchronize(s);
    if (rc != CUDA_SUCCESS) {
        char why[384];
        cudrv_fail(drv, rc, "cuMemcpyDtoHAsync of the expert offsets", __FILE__, __LINE__, b->rank, why, sizeof why);
        free(start);
        return errorf(err, n, "%s (%s, launch %u)", why, l->entry, li);
    }
    bool ok = start[0] >= 0; /* a tile's start[] begins at its first expert's rows */
    for (int64_t e = 0; e < E && ok; e++) ok = start[e + 1] >= start[e];
    int64_t rows = start[E];
    if (ok && k == CUMOE_DW) ok = fits(a[1].i, rows, O, es, b->ws_bytes) && fits(a[2].i, rows, I, es, b->ws_bytes);
    else if (ok) ok = fits(a[0].i, rows, cc, es, b->ws_bytes) && fits(a[1].i, rows, ac, es, b->ws_bytes);
    if (!ok) {
        free(start);
        return errorf(err, n, "rank %d: %s (launch %u): the expert offsets read back (%" PRId64 " rows) are not a routing of "
                      "the op's %" PRId64 "-byte workspace", b->rank, l->entry, li, rows, b->ws_bytes);
    }
    /* every expert's shape has an algorithm, or none runs (dw accumulates: no half-done fallback) */
    PlanGemm g;
    LtOperands o;
    int r = 0;
    for (int64_t e = 0; e < E && r == 0; e++)
        if (start[e + 1] > start[e]) {
            expert_gemm(k, a, dtype, e, start[e], start[e + 1] - start[e], O, I, es, b, &g, &o);
            g.launch = li;
            r = cublaslt_check(lt, &g, &o, err, n);
        }
    for (int64_t e = 0; e < E && r == 0; e++)
        if (start[e + 1] > start[e]) {
            expert_gemm(k, a, dtype, e, start[e], start[e + 1] - start[e], O, I, es, b, &g, &o);
            g.launch = li;
            r = cublaslt_gemm(lt, &g, &o, s, err, n);
            if (r > 0) r = errorf(err, n, "rank %d: %s (launch %u): cuBLASLt lost the algorithm of expert %" PRId64, b->rank,
                                 l->entry, li, e);
        }
    free(start);
    return r;
}
