/* cumoe: the expert products of a mixture-of-experts op (moe_expert)
 * through cuBLASLt, one call per expert that has rows.
 *
 * compiler/cuda_gen_moe.c emits them as NVRTC launches on blocks of the
 * op's workspace that hold the routed rows contiguous by expert
 * (stdlib/kernels/moe.cu: zk_moe_gemm_fwd, zk_moe_gemm_dx, zk_moe_gemm_dw;
 * docs/kernels.md, "Mixture of experts"). Their arguments name everything
 * a library call needs: the two blocks (workspace offsets), the weight or
 * its gradient (a tensor), start[E+1] (the workspace offset of each
 * expert's first row, written on the device by zk_moe_route) and E, O, I.
 * A tile of experts (memory-centric tiling) passes start[] from its first
 * expert on and its own E, the weight bound to the tile's experts only.
 * The row counts exist only on the device, so a product copies start[] to
 * the host first: one stream synchronisation per product, the price of
 * sizing each expert's matrix layout by its real rows rather than by the
 * worst case (all n rows, E times the flops). Every call writes where the
 * launch would, so the launch stays the fallback. */
#ifndef ZINF_CUMOE_H
#define ZINF_CUMOE_H
#include <stdint.h>
#include "cublaslt.h"
#include "cudrv.h"
#include "plan.h"

typedef enum CuMoeKind { CUMOE_NONE, CUMOE_FWD, CUMOE_DX, CUMOE_DW } CuMoeKind;

/* Launch li's kind: an expert product whose arguments have the kinds the
 * generator gives them, or CUMOE_NONE (any other launch, or a malformed
 * one: it then runs as a launch and the plan verifier judges it). */
CuMoeKind cumoe_kind(const Plan *p, uint32_t li);

/* What one product runs on: the op's workspace (base, bytes), the
 * weight tensor's (w, or dw for CUMOE_DW) address and elements as bound,
 * the queue's GEMM workspace. */
typedef struct CuMoeBind {
    CUdeviceptr ws, w, gemm_ws;
    int64_t ws_bytes, w_elems, gemm_ws_bytes;
    int rank;
} CuMoeBind;

/* Runs launch li (of kind k) on stream s: copies start[] to the host
 * (synchronising s), checks it against the workspace, then one cuBLASLt
 * matmul per expert with rows. Returns 0 when enqueued, 1 when cuBLASLt
 * has no algorithm for one of the experts' shapes (nothing was enqueued:
 * the caller runs the launch), -1 with why in err. */
int cumoe_run(CublasLt *lt, CudaDrv *drv, const Plan *p, uint32_t li, CuMoeKind k, const CuMoeBind *b, CUstream s,
              char *err, size_t errlen);

#endif
