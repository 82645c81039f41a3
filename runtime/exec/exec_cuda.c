/* exec_cuda: the CUDA backend of the executor (runtime/exec/exec.h).
 *
 * The plan's queues keep their worker threads (runtime/exec/qrun); under CUDA
 * each worker ENQUEUES its instructions on its queue's stream instead of
 * running them, so the NVMe -> pinned -> GPU -> all-gather -> compute
 * pipeline overlaps as the plan says. Per instruction, statically:
 *   - device instructions (copies, kernels, NCCL collectives on GPU memory,
 *     GPU zero/accumulate, GPU Adam) wait for their dependencies on other
 *     streams with cuStreamWaitEvent, are enqueued between their begin and
 *     end events, and count as done for the queue runner once enqueued;
 *   - host instructions (NVMe, CPU Adam, host-memory work and collectives,
 *     the gradient norm, token input) first wait for their device
 *     dependencies' end events, polled against the job's deadline with NCCL's
 *     async error (cuda_host_begin), then run as on the host backend; the
 *     nvme queue's transfers are pipelined as there (rt_nvme_pipe), each
 *     started after that wait.
 * A range of the stream (a micro-batch, the optimizer) ends with every
 * stream drained, as the host backend's ranges do; then the losses, the
 * kernels' error words and the device timings of the range are collected. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuexec.h"
#include "devmem.h"
#include "exec_impl.h"
#include "gpucomm.h"
#include "adam.h"
#include "clock.h"

/* The backend table's entries (rt_backend_cuda, at the end). */
static int cuda_grad_sumsq(Rt *r, const PlanInstr *in, int worker, double *ss, char *err, size_t n);
static int cuda_copy_from_gpu(Rt *r, int q, const PlanOperand *o, void *dst, char *err, size_t n);
static int cuda_copy_to_gpu(Rt *r, int q, const PlanOperand *o, const void *src, size_t bytes, char *err, size_t n);
static int cuda_instr(void *ctx, uint32_t i, int worker, char *err, size_t n);
static int cuda_create(Rt *r, char *err, size_t n);
static int cuda_alloc_arenas(Rt *r, char *err, size_t n);
static void cuda_abort(Rt *r);
static void cuda_destroy(Rt *r);
static int cuda_home_read(Rt *r, uint64_t addr, void *dst, uint64_t bytes, char *err, size_t n);
static int cuda_home_write(Rt *r, uint64_t addr, const void *src, uint64_t bytes, char *err, size_t n);
static void cuda_step_begin(Rt *r);
static int cuda_range_end(Rt *r, uint32_t b0, uint32_t b1, char *err, size_t n);
static double cuda_busy_seconds(const Rt *r, int q);
static void cuda_memory_report(const Rt *r, FILE *out);
static uint64_t cuda_gpu_memory_used(const Rt *r);

enum { LOSS_SLOTS = 4096 };

struct RtCuda {
    CuExec x;
    GpuComm g;
    bool g_open, failed;
    CUdeviceptr gpu;              /* the GPU arena */
    CUdeviceptr ws[PLAN_NQUEUES]; /* kernel workspace, per queue that launches */
    CUdeviceptr gws[PLAN_NQUEUES]; /* cuBLASLt workspace, per queue that runs kernels (dm, = x.lt_ws_bytes) */
    CUdeviceptr cs[PLAN_NQUEUES]; /* collective padding scratch, per queue that runs NCCL */
    PlanDevMem dm;                /* what is allocated beside the arena, and on which queues (runtime/plan/devmem.h) */
    uint8_t *dev;                 /* per instruction: 1 = enqueued on a stream */
    int32_t *adam_op;             /* per tensor: its OP_ADAM, -1 */
    int32_t gnorm_op;             /* the OP_GRAD_NORM, -1 */
    int32_t *err_slot;            /* per instruction: index into errw, -1 */
    int32_t *tile_code;           /* per instruction: its PlanTileCode, -1 */
    double *hstart;               /* per host instruction: when its waits for the GPU ended */
    int32_t *errw;                /* pinned: 3 int32 per slot */
    int nerr;
    float *loss;                  /* pinned: one per loss kernel of the step */
    int nloss;
    uint8_t *input;               /* pinned staging of token input */
    uint64_t input_bytes;
    CUdeviceptr seg;              /* packed rows: the micro-batch's sample starts [B*T] (PARG_SEG), allocated at the first */
    CUdeviceptr *bind[PLAN_NQUEUES];
    int64_t *elems[PLAN_NQUEUES];
    CuExecRt rt;
    double epoch_host;            /* qrun clock when the range's epoch event was recorded */
    double busy[PLAN_NQUEUES];
    double timeout_s;
};

/* ---- addressing ---- */

static bool in_gpu(const Rt *r, const PlanOperand *o) {
    return o->buffer >= 0 && r->p->buffers[o->buffer].arena == ARENA_GPU;
}

/* The address of an operand as the GPU sees it: device memory, or the
 * page-locked host arenas (mapped, so the same address under UVA). 0 for
 * NVMe or absent operands. */
static CUdeviceptr dev_addr(const Rt *r, const PlanOperand *o) {
    if (o->buffer < 0) return 0;
    const PlanBuffer *b = &r->p->buffers[o->buffer];
    if (b->arena == ARENA_GPU) return r->cu->gpu + b->offset + o->offset;
    uint8_t *h = rt_opnd_ptr(r, o);
    return (CUdeviceptr)(uintptr_t)h;
}

/* ---- waiting ---- */

/* Polls an event (stream == NULL) or a stream until it is done, NCCL
 * reports an error, or the job's deadline passes. Never cuEventSynchronize
 * or cuStreamSynchronize mid-step: work waiting on a collective of a dead
 * peer would block forever. `what` names it for the timeout message. */
static int poll_done(Rt *r, CUevent ev, CUstream stream, const char *what, double t0, char *err, size_t n) {
    RtCuda *cu = r->cu;
    for (unsigned spin = 0;; spin++) {
        CUresult rc = stream ? cu->x.drv.StreamQuery(stream) : cu->x.drv.EventQuery(ev);
        if (rc == CUDA_SUCCESS) return 0;
        if (rc != CUDA_ERROR_NOT_READY) {
            char why[384];
            cudrv_fail(&cu->x.drv, rc, stream ? "cuStreamQuery" : "cuEventQuery", __FILE__, __LINE__, r->c->rank, why,
                       sizeof why);
            /* errors of asynchronous work surface here, not at their launch */
            return errorf(err, n, "%s: %s failed (compute-sanitizer zinfrun ... names the kernel)", why, what);
        }
        if (cu->g_open && gpucomm_check(&cu->g, err, n)) return -1;
        if (clock_mono_s() - t0 > cu->timeout_s)
            return errorf(err, n,
                          "rank %d: %s did not complete in %.0f s (a peer rank died or hangs?); set ZINF_COMM_TIMEOUT "
                          "to wait longer",
                          r->c->rank, what, cu->timeout_s);
        struct timespec ts = {0, spin < 100 ? 20000 : 500000};
        nanosleep(&ts, NULL);
    }
}

static int wait_stream(Rt *r, int q, double t0, char *err, size_t n) {
    char what[64];
    snprintf(what, sizeof what, "work queued on the %s stream", plan_queue_names[q]);
    return poll_done(r, NULL, r->cu->x.stream[q], what, t0, err, n);
}

/* Copies between device and host memory on queue q's stream, waited for. */
static int copy_d2h(Rt *r, int q, void *dst, CUdeviceptr src, size_t bytes, char *err, size_t n) {
    RtCuda *cu = r->cu;
    CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyDtoHAsync(dst, src, bytes, cu->x.stream[q]), err, n);
    return wait_stream(r, q, clock_mono_s(), err, n);
}

static int copy_h2d(Rt *r, int q, CUdeviceptr dst, const void *src, size_t bytes, char *err, size_t n) {
    RtCuda *cu = r->cu;
    CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyHtoDAsync(dst, src, bytes, cu->x.stream[q]), err, n);
    return wait_stream(r, q, clock_mono_s(), err, n);
}

static int wait_streams(Rt *r, char *err, size_t n) {
    double t0 = clock_mono_s();
    for (int q = 0; q < PLAN_NQUEUES; q++)
        if (wait_stream(r, q, t0, err, n)) return -1;
    return 0;
}

/* Device instructions: stream waits on other queues' end events. Host
 * instructions: host waits on every device dependency. */
static int order_deps(Rt *r, const PlanInstr *in, bool on_stream, char *err, size_t n) {
    RtCuda *cu = r->cu;
    for (uint32_t d = 0; d < in->ndeps; d++) {
        uint32_t j = r->p->deps[in->dep + d];
        if (!cu->dev[j]) continue; /* host work: the queue runner saw it finish */
        if (on_stream) {
            if (r->p->instrs[j].queue == in->queue) continue; /* stream order */
            CUEXEC_CHECK(&cu->x, cu->x.drv.StreamWaitEvent(cu->x.stream[in->queue], cu->x.ev_end[j], 0), err, n);
        } else {
            char what[160];
            const PlanInstr *dj = &r->p->instrs[j];
            bool named = dj->op != PI_KERNEL && dj->arg >= 0 && (uint32_t)dj->arg < r->p->ntensors;
            snprintf(what, sizeof what, "instruction %u (%s%s%s on the %s stream)", j, plan_opcode_names[dj->op],
                     named ? " " : "", named ? r->p->tensors[dj->arg].name : "", plan_queue_names[dj->queue]);
            if (poll_done(r, cu->x.ev_end[j], NULL, what, clock_mono_s(), err, n)) return -1;
        }
    }
    return 0;
}

/* ---- device instructions ---- */

/* Binds an op's tensors to its operands, as the host executor does. */
static void bind_op(Rt *r, const PlanOp *o, const PlanInstr *in, int worker) {
    CUdeviceptr *bt = r->cu->bind[worker];
    int64_t *el = r->cu->elems[worker];
    uint32_t k = 0;
    for (int i = 0; i < o->nin; i++, k++)
        if (o->in[i] >= 0) {
            const PlanOperand *po = k < in->nopnd ? rt_opnd(r, in, k) : NULL;
            bt[o->in[i]] = po ? dev_addr(r, po) : 0;
            el[o->in[i]] = po ? (int64_t)(po->bytes / rt_dsz(r->p->tensors[o->in[i]].dtype)) : 0;
        }
    for (int i = 0; i < o->nout; i++, k++)
        if (o->out[i] >= 0) {
            const PlanOperand *po = k < in->nopnd ? rt_opnd(r, in, k) : NULL;
            bt[o->out[i]] = po ? dev_addr(r, po) : 0;
            el[o->out[i]] = po ? (int64_t)(po->bytes / rt_dsz(r->p->tensors[o->out[i]].dtype)) : 0;
        }
}

static int run_launches(Rt *r, uint32_t first, uint32_t count, int worker, CUstream s, char *err, size_t n) {
    RtCuda *cu = r->cu;
    CuExecBind b = {.tensor = cu->bind[worker], .elems = cu->elems[worker], .ws = cu->ws[worker], .gemm_ws = cu->gws[worker],
                    .rt = &cu->rt, .seg = r->seg ? cu->seg : 0};
    for (uint32_t li = first; li < first + count; li++)
        if (cuexec_launch(&cu->x, r->p, li, &b, s, err, n)) return -1;
    return 0;
}

static int run_op_code(Rt *r, int op, int worker, CUstream s, char *err, size_t n) {
    const PlanOpCode *oc = &r->p->op_code[op];
    return run_launches(r, oc->first, oc->count, worker, s, err, n);
}

/* The launches of one tile of a tiled kernel, -1 when the plan has none. */
static int tile_code_of(const Plan *p, int op, int tile, int ntiles) {
    for (uint32_t k = 0; k < p->ntile_code; k++) {
        const PlanTileCode *t = &p->tile_code[k];
        if (t->op == op && t->tile == tile && t->ntiles == ntiles) return (int)k;
    }
    return -1;
}

static int dev_kernel(Rt *r, uint32_t i, const PlanInstr *in, int worker, CUstream s, char *err, size_t n) {
    RtCuda *cu = r->cu;
    const Plan *p = r->p;
    const PlanOp *o = &p->ops[in->arg];
    bind_op(r, o, in, worker);
    if (in->ntiles > 1) {
        const PlanTileCode *tc = &p->tile_code[cu->tile_code[i]];
        if (run_launches(r, tc->first, tc->count, worker, s, err, n)) return -1;
    } else if (run_op_code(r, in->arg, worker, s, err, n)) {
        return -1;
    }
    const PlanOpCode *oc = &p->op_code[in->arg];
    if (oc->err_off >= 0 && cu->err_slot[i] >= 0)
        CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyDtoHAsync(cu->errw + 3 * cu->err_slot[i], cu->ws[worker] + (CUdeviceptr)oc->err_off,
                                                   12, s),
                     err, n);
    if (o->kind == OP_FWD && o->nout > 0 && o->out[0] == p->loss && in->tile == in->ntiles - 1) {
        if (cu->nloss >= LOSS_SLOTS) return errorf(err, n, "rank %d: more than %d loss values in one step", r->c->rank, LOSS_SLOTS);
        CUdeviceptr lp = cu->bind[worker][p->loss];
        CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyDtoHAsync(cu->loss + cu->nloss, lp, sizeof(float), s), err, n);
        cu->nloss++;
    }
    return 0;
}

static int dev_axpy(Rt *r, int dt, CUdeviceptr y, CUdeviceptr x, int64_t ne, CUstream s, char *err, size_t n) {
    RtCuda *cu = r->cu;
    int li = dt >= 0 && dt < PLAN_NDTYPES ? r->p->util[PLAN_UTIL_AXPY][dt] : -1;
    if (li < 0) return errorf(err, n, "rank %d: the plan has no GPU accumulation kernel for %s", r->c->rank, dtype_name((DType)dt));
    CuExecBind b = {.rt = &cu->rt, .pos = {y, x}, .npos = 2, .i64 = {ne}, .ni64 = 1, .f32 = {1.0f}, .nf32 = 1};
    return cuexec_launch(&cu->x, r->p, (uint32_t)li, &b, s, err, n);
}

static int dev_collective(Rt *r, const PlanInstr *in, int worker, CUstream s, char *err, size_t n) {
    RtCuda *cu = r->cu;
    int R = r->c->size;
    switch ((PlanOpcode)in->op) {
    case PI_ALLGATHER: {
        const PlanOperand *so = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        CUdeviceptr sp = dev_addr(r, so), dp = dev_addr(r, d);
        if (so->bytes * (uint64_t)R == d->bytes) return gpucomm_allgather(&cu->g, sp, dp, so->bytes, s, err, n);
        /* the last rank's slice is padded: gather into scratch, keep the tile's bytes */
        if (gpucomm_allgather(&cu->g, sp, cu->cs[worker], so->bytes, s, err, n)) return -1;
        CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyDtoDAsync(dp, cu->cs[worker], d->bytes, s), err, n);
        return 0;
    }
    case PI_REDUCE_SCATTER: {
        const PlanOperand *so = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        int dt = r->p->tensors[in->arg].dtype;
        size_t es = rt_dsz(dt);
        uint64_t se = d->bytes / es;
        CUdeviceptr sp = dev_addr(r, so), dp = dev_addr(r, d), send = sp, recv = cu->cs[worker] + se * (uint64_t)R * es;
        if (so->bytes != se * (uint64_t)R * es) {
            /* a padded tile: zeros past its end */
            CUEXEC_CHECK(&cu->x, cu->x.drv.MemsetD8Async(cu->cs[worker], 0, se * (uint64_t)R * es, s), err, n);
            CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyDtoDAsync(cu->cs[worker], sp, so->bytes, s), err, n);
            send = cu->cs[worker];
        }
        if (gpucomm_reduce_scatter(&cu->g, send, recv, se, dt, s, err, n)) return -1;
        /* the shard accumulates (micro-batches) */
        return dev_axpy(r, dt, dp, recv, (int64_t)se, s, err, n);
    }
    case PI_ALLREDUCE: {
        const PlanOperand *m = rt_opnd(r, in, 0);
        int dt = r->p->tensors[in->arg].dtype;
        return gpucomm_allreduce(&cu->g, dev_addr(r, m), m->bytes / rt_dsz(dt), dt, s, err, n);
    }
    default: return errorf(err, n, "not a collective");
    }
}

static int dev_adam(Rt *r, const PlanInstr *in, int worker, CUstream s, char *err, size_t n) {
    RtCuda *cu = r->cu;
    if (r->skip) return 0;
    int op = in->arg >= 0 && (uint32_t)in->arg < r->p->ntensors ? cu->adam_op[in->arg] : -1;
    if (op < 0) return errorf(err, n, "rank %d: no Adam op for '%s'", r->c->rank, r->p->tensors[in->arg].name);
    const PlanOp *o = &r->p->ops[op];
    CUdeviceptr *bt = cu->bind[worker];
    int64_t *el = cu->elems[worker];
    /* operands: parameter, gradient, master, m, v, norm: the op's inputs in order */
    for (int k = 0; k < o->nin && k < 6; k++) {
        int t = o->in[k];
        if (t < 0) continue;
        const PlanOperand *po = (uint32_t)k < in->nopnd ? rt_opnd(r, in, (uint32_t)k) : NULL;
        bt[t] = po && po->bytes ? dev_addr(r, po) : 0;
        el[t] = po ? (int64_t)(po->bytes / rt_dsz(r->p->tensors[t].dtype)) : 0;
    }
    return run_op_code(r, op, worker, s, err, n);
}

static int dev_instr(Rt *r, uint32_t i, const PlanInstr *in, int worker, CUstream s, char *err, size_t n) {
    RtCuda *cu = r->cu;
    switch ((PlanOpcode)in->op) {
    case PI_H2D:
    case PI_D2H: {
        const PlanOperand *so = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        uint64_t bytes = so->bytes < d->bytes ? so->bytes : d->bytes;
        r->bytes[in->queue] += so->bytes;
        if (in_gpu(r, so) && in_gpu(r, d))
            CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyDtoDAsync(dev_addr(r, d), dev_addr(r, so), bytes, s), err, n);
        else if (in_gpu(r, d))
            CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyHtoDAsync(dev_addr(r, d), rt_opnd_ptr(r, so), bytes, s), err, n);
        else
            CUEXEC_CHECK(&cu->x, cu->x.drv.MemcpyDtoHAsync(rt_opnd_ptr(r, d), dev_addr(r, so), bytes, s), err, n);
        return 0;
    }
    case PI_KERNEL: return dev_kernel(r, i, in, worker, s, err, n);
    case PI_ALLGATHER: r->bytes[in->queue] += rt_opnd(r, in, 1)->bytes; return dev_collective(r, in, worker, s, err, n);
    case PI_REDUCE_SCATTER:
    case PI_ALLREDUCE: r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes; return dev_collective(r, in, worker, s, err, n);
    case PI_ZERO: {
        const PlanOperand *o = rt_opnd(r, in, 0);
        CUEXEC_CHECK(&cu->x, cu->x.drv.MemsetD8Async(dev_addr(r, o), 0, o->bytes, s), err, n);
        return 0;
    }
    case PI_ACCUM: {
        const PlanOperand *so = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
        int dt = r->p->tensors[in->arg].dtype;
        return dev_axpy(r, dt, dev_addr(r, d), dev_addr(r, so), (int64_t)(so->bytes / rt_dsz(dt)), s, err, n);
    }
    case PI_GPU_ADAM: return dev_adam(r, in, worker, s, err, n);
    default: return errorf(err, n, "instruction %u: %s is not a device instruction", i, plan_opcode_names[in->op]);
    }
}

/* ---- host instructions that touch the GPU ---- */

static int host_input(Rt *r, const PlanInstr *in, char *err, size_t n) {
    RtCuda *cu = r->cu;
    const PlanOperand *o = rt_opnd(r, in, 0);
    const int32_t *src = in->arg == 0 ? r->tokens : r->targets;
    if (!src) return errorf(err, n, "input %d has no data", in->arg);
    if (o->bytes > cu->input_bytes) return errorf(err, n, "input staging too small");
    memcpy(cu->input, src, o->bytes);
    r->bytes[in->queue] += o->bytes;
    /* waited for: the staging is reused by the next input */
    return cuda_copy_to_gpu(r, in->queue, o, cu->input, o->bytes, err, n);
}

/* Packed rows: the micro-batch's sample starts go to the GPU with its
 * tokens, waited for; the range's kernels read them (PARG_SEG), and the
 * previous range has drained before this input runs. Their buffer is the
 * input's second operand where the planner gave them one (every plan with
 * kernels from a zinfc that knows them), else allocated here once. */
static int seg_upload(Rt *r, const PlanInstr *in, char *err, size_t n) {
    RtCuda *cu = r->cu;
    int64_t B, T;
    if (!r->seg) return 0;
    if (!plan_batch_shape(r->p, &B, &T)) return errorf(err, n, "packed rows: the plan has no token batch [B, T]");
    size_t bytes = sizeof(int32_t) * (size_t)(B * T);
    if (!cu->seg && in->nopnd > 1) {
        const PlanOperand *o = rt_opnd(r, in, 1);
        if (o->bytes != bytes || !(cu->seg = dev_addr(r, o)))
            return errorf(err, n, "packed rows: the plan's buffer of sample starts holds %llu bytes, not %zu",
                          (unsigned long long)o->bytes, bytes);
    }
    if (!cu->seg && cuexec_alloc_device(&cu->x, bytes, "sample starts", &cu->seg, err, n)) return -1;
    r->bytes[in->queue] += bytes;
    return copy_h2d(r, in->queue, cu->seg, r->seg, bytes, err, n);
}

/* The squares of the gradient shards in GPU memory, summed on the GPU by
 * the plan's zk_sumsq_partial launches (one per gradient, SUMSQ blocks
 * each, into the workspace), the partials then added in f64 here: the
 * gradients never cross PCIe. Shards not in GPU memory, and whole tensors
 * on ranks other than 0 (counted once), are bound with no elements. 1 when
 * done, 0 when the plan has no such launches (the caller copies out). */
static int cuda_grad_sumsq(Rt *r, const PlanInstr *in, int worker, double *ss, char *err, size_t n) {
    RtCuda *cu = r->cu;
    const Plan *p = r->p;
    if (cu->gnorm_op < 0 || !cu->ws[worker]) return 0;
    CUdeviceptr *bt = cu->bind[worker];
    int64_t *el = cu->elems[worker];
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].cls == TC_GRAD) {
            bt[t] = cu->ws[worker]; /* a valid address that nothing reads */
            el[t] = 0;
        }
    for (uint32_t k = 0; k + 1 < in->nopnd; k++) {
        const PlanOperand *o = rt_opnd(r, in, k);
        if (!in_gpu(r, o)) continue;
        int t = p->buffers[o->buffer].tensor;
        if (t < 0) continue;
        bt[t] = dev_addr(r, o);
        el[t] = !rt_tensor_partitioned(r, t) && r->c->rank != 0 ? 0 : (int64_t)(o->bytes / rt_dsz(p->tensors[t].dtype));
    }
    const PlanOpCode *oc = &p->op_code[cu->gnorm_op];
    CuExecBind b = {.tensor = bt, .elems = el, .ws = cu->ws[worker], .rt = &cu->rt};
    uint64_t end = 0;
    CUstream s = cu->x.stream[in->queue];
    for (uint32_t li = oc->first; li < oc->first + oc->count; li++) {
        const PlanLaunch *l = &p->launches[li];
        if (strcmp(l->entry, "zk_sumsq_partial")) continue; /* the final pass is this function's */
        const PlanLaunchArg *slot = &p->launch_args[l->arg];
        if (l->nargs < 3 || slot->kind != PARG_WS) return errorf(err, n, "the plan's gradient norm launches have an unknown shape");
        uint64_t e = (uint64_t)slot->i + 4ull * l->grid[0];
        if (e > end) end = e;
        if (cuexec_launch(&cu->x, p, li, &b, s, err, n)) return -1;
    }
    if (end > r->scratch_bytes) return 0;
    float *part = (float *)r->scratch[worker];
    if (copy_d2h(r, in->queue, part, cu->ws[worker], end, err, n)) return -1;
    for (uint32_t li = oc->first; li < oc->first + oc->count; li++) {
        const PlanLaunch *l = &p->launches[li];
        if (strcmp(l->entry, "zk_sumsq_partial")) continue;
        const float *q = part + p->launch_args[l->arg].i / 4;
        for (uint32_t k = 0; k < l->grid[0]; k++) *ss += q[k];
    }
    return 1;
}

static int cuda_copy_from_gpu(Rt *r, int q, const PlanOperand *o, void *dst, char *err, size_t n) {
    return copy_d2h(r, q, dst, dev_addr(r, o), o->bytes, err, n);
}

static int cuda_copy_to_gpu(Rt *r, int q, const PlanOperand *o, const void *src, size_t bytes, char *err, size_t n) {
    return copy_h2d(r, q, dev_addr(r, o), src, bytes, err, n);
}

/* ---- dispatch ---- */

/* Whether a device dependency of host instruction `in` still runs (its
 * end event not reached). Never waits; an error counts as ended, for
 * order_deps to report. */
static bool deps_running(const Rt *r, const PlanInstr *in) {
    const RtCuda *cu = r->cu;
    for (uint32_t d = 0; d < in->ndeps; d++) {
        uint32_t j = r->p->deps[in->dep + d];
        if (cu->dev[j] && cu->x.drv.EventQuery(cu->x.ev_end[j]) == CUDA_ERROR_NOT_READY) return true;
    }
    return false;
}

/* Before a host instruction (cuda_instr's, and the nvme pipeline's
 * transfers: rt_nvme_pipe): the thread bound to the context, every device
 * dependency ended (a D2H into the pinned buffer an NVMe write reads, an
 * H2D out of the one a read overwrites), then the time noted: busy from
 * here, waiting for the GPU is not the queue's work (cuda_range_end).
 * Without `wait`, 1 at once when one still runs. */
static int cuda_host_begin(Rt *r, uint32_t i, int worker, bool wait, char *err, size_t n) {
    (void)worker;
    RtCuda *cu = r->cu;
    const PlanInstr *in = &r->p->instrs[i];
    if (cuexec_bind_thread(&cu->x, err, n)) return -1;
    if (!wait && deps_running(r, in)) return 1;
    if (order_deps(r, in, false, err, n)) return -1;
    cu->hstart[i] = qrun_now(&r->q);
    return 0;
}

static int cuda_instr(void *ctx, uint32_t i, int worker, char *err, size_t n) {
    Rt *r = ctx;
    RtCuda *cu = r->cu;
    const PlanInstr *in = &r->p->instrs[i];
    if (!cu->dev[i]) {
        if (cuda_host_begin(r, i, worker, true, err, n)) return -1;
        if (in->op == PI_INPUT && in->arg == 0 && seg_upload(r, in, err, n)) return -1;
        if (in->op == PI_INPUT && in_gpu(r, rt_opnd(r, in, 0))) return host_input(r, in, err, n);
        return rt_host_instr(r, i, worker, err, n);
    }
    if (cuexec_bind_thread(&cu->x, err, n)) return -1;
    if (order_deps(r, in, true, err, n)) return -1;
    CUstream s = cu->x.stream[in->queue];
    CUEXEC_CHECK(&cu->x, cu->x.drv.EventRecord(cu->x.ev_begin[i], s), err, n);
    if (dev_instr(r, i, in, worker, s, err, n)) return -1;
    CUEXEC_CHECK(&cu->x, cu->x.drv.EventRecord(cu->x.ev_end[i], s), err, n);
    return 0;
}

/* Which instructions run on a stream; a plan the GPU cannot run is refused
 * here, before the first step. */
static int classify(Rt *r, char *err, size_t n) {
    const Plan *p = r->p;
    RtCuda *cu = r->cu;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *in = &p->instrs[i];
        bool g0 = in->nopnd > 0 && in_gpu(r, rt_opnd(r, in, 0)), g1 = in->nopnd > 1 && in_gpu(r, rt_opnd(r, in, 1));
        bool dev = plan_instr_on_device(p, in); /* where it runs; here, what the GPU cannot run */
        switch ((PlanOpcode)in->op) {
        case PI_H2D:
        case PI_D2H: break;
        case PI_KERNEL:
            if (in->arg < 0 || (uint32_t)in->arg >= p->nops || !p->op_code || p->op_code[in->arg].count == 0)
                return errorf(err, n, "instruction %u: kernel of op %d has no GPU code in the plan", i, in->arg);
            if (in->ntiles > 1 && (cu->tile_code[i] = tile_code_of(p, in->arg, in->tile, in->ntiles)) < 0)
                return errorf(err, n, "instruction %u: tile %d of %d of op %d (%s) has no GPU code in the plan", i, in->tile,
                           in->ntiles, in->arg, p->ops[in->arg].scope ? p->ops[in->arg].scope : "");
            break;
        case PI_ALLGATHER:
        case PI_REDUCE_SCATTER:
            if (g0 != g1) return errorf(err, n, "instruction %u: %s between device and host memory", i, plan_opcode_names[in->op]);
            break;
        case PI_ALLREDUCE:
        case PI_ZERO: break;
        case PI_ACCUM:
            if (g0 != g1) return errorf(err, n, "instruction %u: accum between device and host memory", i);
            break;
        case PI_GPU_ADAM:
            if (in->arg < 0 || (uint32_t)in->arg >= p->ntensors || cu->adam_op[in->arg] < 0)
                return errorf(err, n, "instruction %u: GPU Adam of a tensor without an Adam op", i);
            break;
        case PI_CPU_ADAM:
            for (uint32_t k = 0; k < in->nopnd; k++)
                if (in_gpu(r, rt_opnd(r, in, k)))
                    return errorf(err, n, "instruction %u: CPU Adam on an operand in GPU memory", i);
            break;
        case PI_NVME_READ:
        case PI_NVME_WRITE:
            if (g0 || g1) return errorf(err, n, "instruction %u: NVMe transfer to GPU memory (it goes through pinned buffers)", i);
            break;
        default: break;
        }
        cu->dev[i] = dev;
        if (dev && (in->op == PI_ALLGATHER || in->op == PI_REDUCE_SCATTER || in->op == PI_ALLREDUCE) && in->queue != Q_COMM)
            return errorf(err, n, "instruction %u: a collective on the %s queue (NCCL runs on the comm stream)", i,
                       plan_queue_names[in->queue]);
    }
    return 0;
}

/* ---- life cycle ---- */

static int cuda_create(Rt *r, char *err, size_t n) {
    const Plan *p = r->p;
    RtCuda *cu = calloc(1, sizeof *cu);
    if (!cu) return errorf(err, n, "out of memory");
    r->cu = cu;
    cu->timeout_s = r->c->timeout_s > 0 ? r->c->timeout_s : 300;
    if (cuexec_open(&cu->x, p, r->c, r->o.cublaslt_off, err, n)) {
        free(cu);
        r->cu = NULL;
        return -1;
    }
    cu->dev = calloc(p->ninstrs ? p->ninstrs : 1, 1);
    cu->adam_op = malloc(sizeof *cu->adam_op * (p->ntensors ? p->ntensors : 1));
    cu->err_slot = malloc(sizeof *cu->err_slot * (p->ninstrs ? p->ninstrs : 1));
    cu->tile_code = malloc(sizeof *cu->tile_code * (p->ninstrs ? p->ninstrs : 1));
    cu->hstart = calloc(p->ninstrs ? p->ninstrs : 1, sizeof *cu->hstart);
    if (!cu->dev || !cu->adam_op || !cu->err_slot || !cu->tile_code || !cu->hstart) return errorf(err, n, "out of memory");
    for (uint32_t i = 0; i < p->ninstrs; i++) cu->tile_code[i] = -1;
    for (uint32_t t = 0; t < p->ntensors; t++) cu->adam_op[t] = -1;
    cu->gnorm_op = -1;
    for (uint32_t k = 0; k < p->nops; k++) {
        if (p->ops[k].kind == OP_ADAM && p->ops[k].nin > 0 && p->ops[k].in[0] >= 0) cu->adam_op[p->ops[k].in[0]] = (int32_t)k;
        if (p->ops[k].kind == OP_GRAD_NORM && p->op_code && p->op_code[k].count) cu->gnorm_op = (int32_t)k;
    }
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        cu->bind[q] = calloc(p->ntensors ? p->ntensors : 1, sizeof **cu->bind);
        cu->elems[q] = calloc(p->ntensors ? p->ntensors : 1, sizeof **cu->elems);
        if (!cu->bind[q] || !cu->elems[q]) return errorf(err, n, "out of memory");
    }
    if (cuda_alloc_arenas(r, err, n)) return -1;
    if (classify(r, err, n)) return -1;
    /* device scratch beside the arena: the plan's rules (runtime/plan/devmem.h), with cuBLASLt as it opened */
    plan_devmem(p, cu->x.lt_on, &cu->dm);
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        cu->err_slot[i] = -1;
        if (cu->dev[i] && p->instrs[i].op == PI_KERNEL && p->op_code[p->instrs[i].arg].err_off >= 0) cu->err_slot[i] = cu->nerr++;
    }
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        if (cu->dm.on[PLAN_DEV_KERNEL_WS][q] &&
            cuexec_alloc_device(&cu->x, cu->dm.bytes[PLAN_DEV_KERNEL_WS], "kernel workspace", &cu->ws[q], err, n))
            return -1;
        if (cu->dm.on[PLAN_DEV_COLL_SCRATCH][q] &&
            cuexec_alloc_device(&cu->x, cu->dm.bytes[PLAN_DEV_COLL_SCRATCH], "collective scratch", &cu->cs[q], err, n))
            return -1;
        if (cu->dm.on[PLAN_DEV_GEMM_WS][q] &&
            cuexec_alloc_device(&cu->x, cu->dm.bytes[PLAN_DEV_GEMM_WS], "cuBLASLt workspace", &cu->gws[q], err, n))
            return -1;
    }
    for (uint32_t i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].op == PI_INPUT && p->instrs[i].nopnd > 0 && rt_opnd(r, &p->instrs[i], 0)->bytes > cu->input_bytes)
            cu->input_bytes = rt_opnd(r, &p->instrs[i], 0)->bytes;
    void *h;
    if (cuexec_alloc_host(&cu->x, sizeof(float) * LOSS_SLOTS, "loss values", &h, err, n)) return -1;
    cu->loss = h;
    if (cuexec_alloc_host(&cu->x, 12 * (size_t)(cu->nerr ? cu->nerr : 1), "kernel error words", &h, err, n)) return -1;
    cu->errw = h;
    if (cuexec_alloc_host(&cu->x, cu->input_bytes ? cu->input_bytes : 64, "token staging", &h, err, n)) return -1;
    cu->input = h;
    bool any_nccl = false;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        any_nccl |= cu->dev[i] && (p->instrs[i].op == PI_ALLGATHER || p->instrs[i].op == PI_REDUCE_SCATTER ||
                                   p->instrs[i].op == PI_ALLREDUCE);
    /* every rank joins NCCL or none does: the decision is the plan's, the same everywhere */
    /* (one rank too: NCCL then copies, and the code path is the cluster's) */
    if (any_nccl) {
        if (gpucomm_open(&cu->g, r->c, err, n)) return -1;
        cu->g_open = true;
    }
    return 0;
}

static int cuda_alloc_arenas(Rt *r, char *err, size_t n) {
    RtCuda *cu = r->cu;
    const Plan *p = r->p;
    for (int k = 0; k < PLAN_NARENAS; k++) {
        if (k == ARENA_NVME) continue;
        uint64_t sz = p->arenas[k].size;
        if (!sz) continue;
        uint64_t rounded = (sz + 4095) / 4096 * 4096;
        char what[64];
        snprintf(what, sizeof what, "the %s arena", plan_arena_names[k]);
        if (k == ARENA_GPU) {
            if (cuexec_alloc_device(&cu->x, rounded, what, &cu->gpu, err, n)) return -1;
            CUEXEC_CHECK(&cu->x, cu->x.drv.MemsetD8Async(cu->gpu, 0, rounded, cu->x.stream[Q_COMPUTE]), err, n);
            CUEXEC_CHECK(&cu->x, cu->x.drv.StreamSynchronize(cu->x.stream[Q_COMPUTE]), err, n);
        } else {
            /* page-locked; the arena starts on an NVME_ALIGN boundary inside the allocation (the driver's
             * own alignment may be less: the fake's is 256), so NVMe transfers go straight to it */
            void *h;
            if (cuexec_alloc_host(&cu->x, rounded + NVME_ALIGN, what, &h, err, n)) return -1;
            r->arena[k] = (uint8_t *)(((uintptr_t)h + NVME_ALIGN - 1) & ~(uintptr_t)(NVME_ALIGN - 1));
        }
        r->arena_bytes[k] = sz;
    }
    return 0;
}

static void cuda_abort(Rt *r) {
    RtCuda *cu = r->cu;
    if (!cu) return;
    cu->failed = true;
    if (cu->g_open) {
        gpucomm_close(&cu->g, true);
        cu->g_open = false;
    }
}

static void cuda_destroy(Rt *r) {
    RtCuda *cu = r->cu;
    if (!cu) return;
    if (cu->g_open) gpucomm_close(&cu->g, cu->failed);
    cuexec_close(&cu->x); /* frees the arenas and staging */
    for (int k = 0; k < PLAN_NARENAS; k++)
        if (k != ARENA_NVME) r->arena[k] = NULL;
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        free(cu->bind[q]);
        free(cu->elems[q]);
    }
    free(cu->dev);
    free(cu->adam_op);
    free(cu->err_slot);
    free(cu->tile_code);
    free(cu->hstart);
    free(cu);
    r->cu = NULL;
}

static int cuda_home_read(Rt *r, uint64_t addr, void *dst, uint64_t bytes, char *err, size_t n) {
    if (cuexec_bind_thread(&r->cu->x, err, n)) return -1;
    return copy_d2h(r, Q_D2H, dst, r->cu->gpu + addr, bytes, err, n);
}

static int cuda_home_write(Rt *r, uint64_t addr, const void *src, uint64_t bytes, char *err, size_t n) {
    if (cuexec_bind_thread(&r->cu->x, err, n)) return -1;
    return copy_h2d(r, Q_H2D, r->cu->gpu + addr, src, bytes, err, n);
}

static void range_begin(Rt *r) {
    RtCuda *cu = r->cu;
    cu->epoch_host = qrun_now(&r->q);
    cu->x.drv.EventRecord(cu->x.epoch, cu->x.stream[Q_COMPUTE]);
}

static void cuda_step_begin(Rt *r) {
    RtCuda *cu = r->cu;
    const PlanTrain *t = &r->p->train;
    AdamSchedule sch = adam_schedule_of(t);
    double step = (double)(r->step + 1);
    cu->rt.v[PLAN_RT_LR] = (float)adam_lr(&sch, r->step + 1);
    cu->rt.v[PLAN_RT_BC1] = (float)(1.0 - pow(t->beta1, step));
    cu->rt.v[PLAN_RT_BC2] = (float)(1.0 - pow(t->beta2, step));
    cu->rt.v[PLAN_RT_INV_LOSS_SCALE] = (float)(1.0 / r->loss_scale);
    cu->rt.v[PLAN_RT_LOSS_GRAD] = (float)((double)r->loss_grad * r->loss_scale);
    cu->nloss = 0;
    range_begin(r);
}

static int cuda_range_end(Rt *r, uint32_t b0, uint32_t b1, char *err, size_t n) {
    RtCuda *cu = r->cu;
    const Plan *p = r->p;
    if (cuexec_bind_thread(&cu->x, err, n)) return -1;
    if (wait_streams(r, err, n)) return -1;
    int loss0 = r->loss_n;
    for (int k = loss0; k < cu->nloss; k++) {
        r->loss_sum += cu->loss[k];
        r->loss_n++;
    }
    for (uint32_t i = b0; i < b1; i++) {
        int s = cu->err_slot[i];
        if (s < 0 || !cu->errw[3 * s]) continue;
        const PlanInstr *in = &p->instrs[i];
        const PlanOp *o = &p->ops[in->arg];
        const PlanOpCode *oc = &p->op_code[in->arg];
        int v = cu->errw[3 * s + 1], at = cu->errw[3 * s + 2];
        memset(cu->errw + 3 * s, 0, 12);
        return errorf(err, n, "rank %d: op %d (%s): %s %d at position %d is out of range", r->c->rank, in->arg,
                   o->scope && *o->scope ? o->scope : "?", oc->err_what && *oc->err_what ? oc->err_what : "value", v, at);
    }
    /* device times of the range, on the host clock of its start */
    for (uint32_t i = b0; i < b1; i++) {
        const PlanInstr *in = &p->instrs[i];
        if (!cu->dev[i]) {
            /* The runner's busy share of it (a pipelined transfer's: its part of the time the queue had
             * anything in flight), less the wait for the GPU before it began when the runner counted that */
            QrunTiming *t = &r->q.timing[i];
            double own = t->end - t->start - t->wait;
            if (cu->hstart[i] > t->start && cu->hstart[i] <= t->end) {
                own -= cu->hstart[i] - t->start;
                t->start = cu->hstart[i];
            }
            if (in->queue < PLAN_NQUEUES && own > 0) cu->busy[in->queue] += own;
            continue;
        }
        float a = 0, b = 0;
        if (cu->x.drv.EventElapsedTime(&a, cu->x.epoch, cu->x.ev_begin[i]) != CUDA_SUCCESS ||
            cu->x.drv.EventElapsedTime(&b, cu->x.epoch, cu->x.ev_end[i]) != CUDA_SUCCESS)
            continue;
        r->q.timing[i].start = cu->epoch_host + 1e-3 * a;
        r->q.timing[i].end = cu->epoch_host + 1e-3 * b;
        if (in->queue < PLAN_NQUEUES) cu->busy[in->queue] += 1e-3 * (double)(b - a);
    }
    range_begin(r); /* the next range's epoch */
    return 0;
}

static double cuda_busy_seconds(const Rt *r, int q) { return r->cu->busy[q]; }

static void cuda_memory_report(const Rt *r, FILE *out) {
    const RtCuda *cu = r->cu;
    char a[32], b[32], c[32], d[32];
    fprintf(out, "  gpu %d: %s (%s), %s; %s free before zinfrun allocated\n", cu->x.ordinal, cu->x.name, cu->x.arch,
            plan_bytes_str(cu->x.mem_total, a, sizeof a), plan_bytes_str(cu->x.mem_free_at_open, b, sizeof b));
    char items[512];
    fprintf(out, "  gpu memory allocated %s (%zu bytes): the gpu arena %s plus %s; planned %s (%" PRIu64 " bytes)\n",
            plan_bytes_str(cu->x.dev_total, c, sizeof c), cu->x.dev_total, plan_bytes_str(cu->dm.arena, d, sizeof d),
            plan_devmem_items_str(&cu->dm, items, sizeof items), plan_bytes_str(cu->dm.total, a, sizeof a), cu->dm.total);
    char g[512];
    fprintf(out, "  gemm: %s\n", cuexec_gemm_summary(&cu->x, r->p, g, sizeof g));
    if (cu->g_open) fprintf(out, "  nccl %d.%d.%d, %d ranks\n", cu->g.version / 10000, cu->g.version / 100 % 100, cu->g.version % 100, cu->g.size);
}

static uint64_t cuda_gpu_memory_used(const Rt *r) {
    const RtCuda *cu = r->cu;
    size_t fr = 0, tot = 0;
    if (cu->x.drv.MemGetInfo(&fr, &tot) != CUDA_SUCCESS || fr > cu->x.mem_free_at_open) return cu->x.dev_total;
    return cu->x.mem_free_at_open - fr;
}

const RtBackendOps rt_backend_cuda = {
    .name = "cuda",
    .device_memory = true,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .instr = cuda_instr,
    .host_begin = cuda_host_begin,
    .home_read = cuda_home_read,
    .home_write = cuda_home_write,
    .copy_from_gpu = cuda_copy_from_gpu,
    .copy_to_gpu = cuda_copy_to_gpu,
    .grad_sumsq = cuda_grad_sumsq,
    .step_begin = cuda_step_begin,
    .range_end = cuda_range_end,
    .abort = cuda_abort,
    .busy_seconds = cuda_busy_seconds,
    .memory_report = cuda_memory_report,
    .gpu_memory_used = cuda_gpu_memory_used,
};
