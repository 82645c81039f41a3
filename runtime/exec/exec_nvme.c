/* exec_nvme: NVME_READ and NVME_WRITE as rtio transfers, and the nvme
 * queue's pipeline (rt_nvme_pipe) on either backend. */
#include "exec_impl.h"
#include "nvme.h"
#include "rtio.h"

/* ---- NVMe transfers ---- */

/* Whether operand o may be taken to the end of its last block: the buffer
 * starts on a block and its arena aligns every buffer to blocks, and no
 * operand of the plan addresses this buffer past o's end, so the rest of
 * that block is the buffer's rounding (the planner rounds buffers off the
 * GPU to whole blocks) or no buffer's at all. */
static bool widenable(const Rt *r, const PlanOperand *o) {
    const PlanBuffer *b = &r->p->buffers[o->buffer];
    const PlanArena *a = &r->p->arenas[b->arena];
    return o->offset + o->bytes == r->buf_reach[o->buffer] && b->offset % NVME_ALIGN == 0 && a->align &&
           a->align % NVME_ALIGN == 0 && (b->arena == ARENA_NVME || (r->arena[b->arena] && b->arena != ARENA_GPU));
}

/* An NVME_READ or NVME_WRITE as one rtio transfer. A transfer that is not
 * whole blocks (a 512-byte bias shard) is widened to its last block on
 * both sides when the rest of that block is nobody's data: O_DIRECT
 * then takes it as it is, where otherwise a read would go through the
 * bounce buffer and a write would read the block first. */
void rt_nvme_req(const Rt *r, const PlanInstr *in, RtioReq *q) {
    const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
    const PlanOperand *disk = in->op == PI_NVME_READ ? s : d, *mem = in->op == PI_NVME_READ ? d : s;
    q->write = in->op == PI_NVME_WRITE;
    q->off = rt_nvme_off(r, disk);
    q->buf = rt_opnd_ptr(r, mem);
    q->bytes = s->bytes;
    uint64_t wide = (q->bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    if (wide != q->bytes && q->buf && q->off % NVME_ALIGN == 0 && widenable(r, disk) && widenable(r, mem)) q->bytes = wide;
}

/* The nvme queue as a pipeline (QrunPipe), on either backend: each
 * transfer in flight under its slot's tag, the engine's queue kept full,
 * after the backend's host_begin (on CUDA: the GPU work it depends on has
 * ended), whose time is noted as waiting before it began. One that would
 * wait there while others are in flight starts alone instead: the worker
 * reaps and retires those first, so what depends on them is not held up
 * by a wait that is not theirs. Anything else on the queue runs alone,
 * in order, through the backend's instr. */
static int nvme_pipe_start(void *ctx, uint32_t i, int slot, int inflight, int worker, char *err, size_t n) {
    Rt *r = ctx;
    const PlanInstr *in = &r->p->instrs[i];
    if (in->op != PI_NVME_READ && in->op != PI_NVME_WRITE) {
        if (inflight) return QRUN_PIPE_ALONE;
        return r->be->instr(r, i, worker, err, n) ? -1 : 0;
    }
    if (r->be->host_begin) {
        double t0 = qrun_now(&r->q);
        int rc = r->be->host_begin(r, i, worker, inflight == 0, err, n);
        if (rc < 0) return -1;
        if (rc > 0) return QRUN_PIPE_ALONE; /* inflight > 0 */
        qrun_add_wait(&r->q, worker, qrun_now(&r->q) - t0);
    }
    RtioReq q;
    rt_nvme_req(r, in, &q);
    r->bytes[in->queue] += rt_opnd(r, in, 0)->bytes;
    return rtio_start(&r->io, &q, RTIO_TAG_FIRST + (uint32_t)slot, err, n);
}

static int nvme_pipe_progress(void *ctx, int wait, int worker, char *err, size_t n) {
    (void)worker;
    return rtio_progress(&((Rt *)ctx)->io, wait, err, n);
}

static int nvme_pipe_finished(void *ctx, int slot, int worker, char *err, size_t n) {
    (void)worker;
    return rtio_finished(&((Rt *)ctx)->io, RTIO_TAG_FIRST + (uint32_t)slot, err, n);
}

void rt_nvme_pipe(Rt *r) {
    QrunPipe pipe = {nvme_pipe_start, nvme_pipe_progress, nvme_pipe_finished};
    qrun_set_pipe(&r->q, Q_NVME, &pipe);
}
