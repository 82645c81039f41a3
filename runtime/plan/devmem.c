#include "devmem.h"
#include <stdio.h>
#include <string.h>

const char *const plan_dev_item_names[PLAN_DEV_NITEMS] = {"kernel workspace", "collective scratch", "cuBLASLt workspace"};

static bool opnd_gpu(const Plan *p, const PlanInstr *in, uint32_t k) {
    if (k >= in->nopnd || in->opnd + k >= p->noperands) return false;
    int32_t b = p->operands[in->opnd + k].buffer;
    return b >= 0 && (uint32_t)b < p->nbuffers && p->buffers[b].arena == ARENA_GPU;
}

bool plan_instr_on_device(const Plan *p, const PlanInstr *in) {
    bool g0 = opnd_gpu(p, in, 0), g1 = opnd_gpu(p, in, 1);
    switch ((PlanOpcode)in->op) {
    case PI_H2D:
    case PI_D2H: return g0 || g1;
    case PI_KERNEL:
    case PI_GPU_ADAM: return true;
    case PI_ALLGATHER:
    case PI_REDUCE_SCATTER:
    case PI_ALLREDUCE:
    case PI_ZERO:
    case PI_ACCUM: return g0; /* the executor refuses a mix of device and host operands */
    default: return false;
    }
}

uint64_t plan_gemm_ws_bytes(const Plan *p) {
    uint64_t ws = 0;
    for (uint32_t i = 0; i < p->ngemms; i++)
        if (p->gemms[i].path == PLAN_GEMM_LT && (uint64_t)(p->gemms[i].ws_off + p->gemms[i].ws_bytes) > ws)
            ws = (uint64_t)(p->gemms[i].ws_off + p->gemms[i].ws_bytes);
    return ws;
}

static uint64_t opnd_bytes(const Plan *p, const PlanInstr *in, uint32_t k) {
    return k < in->nopnd && in->opnd + k < p->noperands ? p->operands[in->opnd + k].bytes : 0;
}

void plan_devmem(const Plan *p, bool gemm_lt, PlanDevMem *m) {
    memset(m, 0, sizeof *m);
    m->arena = (p->arenas[ARENA_GPU].size + 4095) / 4096 * 4096;
    m->code = p->nlaunches > 0 && p->nkernels > 0;
    bool *launches = m->on[PLAN_DEV_KERNEL_WS], *nccl = m->on[PLAN_DEV_COLL_SCRATCH], *gemms = m->on[PLAN_DEV_GEMM_WS];
    uint64_t R = (uint64_t)(p->ranks > 0 ? p->ranks : 1), cs = 0, ws = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *in = &p->instrs[i];
        if (in->queue >= PLAN_NQUEUES || !plan_instr_on_device(p, in)) continue;
        if (in->op == PI_KERNEL || in->op == PI_GPU_ADAM || in->op == PI_ACCUM) launches[in->queue] = true;
        if (in->op == PI_KERNEL) gemms[in->queue] = true; /* the only instructions with gemm launches */
        if (in->op == PI_ALLGATHER || in->op == PI_REDUCE_SCATTER) {
            nccl[in->queue] = true;
            launches[in->queue] = true; /* the accumulation after a reduce-scatter */
            /* an all-gather gathers every slice; a reduce-scatter pads its source and receives the shard after it */
            uint64_t need = in->op == PI_ALLGATHER ? R * opnd_bytes(p, in, 0) : (R + 1) * opnd_bytes(p, in, 1);
            if (need > cs) cs = need;
        }
    }
    for (uint32_t k = 0; k < p->nops && p->op_code; k++)
        if ((uint64_t)p->op_code[k].ws_bytes > ws) ws = (uint64_t)p->op_code[k].ws_bytes;
    for (uint32_t k = 0; k < p->ntile_code; k++)
        if ((uint64_t)p->tile_code[k].ws_bytes > ws) ws = (uint64_t)p->tile_code[k].ws_bytes;
    m->bytes[PLAN_DEV_KERNEL_WS] = (ws + 255) & ~(uint64_t)255;
    m->bytes[PLAN_DEV_COLL_SCRATCH] = (cs + 255) & ~(uint64_t)255;
    m->bytes[PLAN_DEV_GEMM_WS] = gemm_lt ? plan_gemm_ws_bytes(p) : 0;
    for (int k = 0; k < PLAN_DEV_NITEMS; k++) {
        for (int q = 0; q < PLAN_NQUEUES; q++) {
            m->on[k][q] = m->on[k][q] && m->bytes[k] > 0;
            m->nqueues[k] += m->on[k][q];
        }
        m->extra += m->bytes[k] * (uint64_t)m->nqueues[k];
    }
    m->total = m->arena + m->extra;
}

const char *plan_devmem_items_str(const PlanDevMem *m, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; k < PLAN_DEV_NITEMS && o < n; k++) {
        if (!m->nqueues[k]) continue;
        char b[32];
        o += (size_t)snprintf(buf + o, n - o, "%s%s %s x %d queue%s (", o ? ", " : "", plan_dev_item_names[k],
                              plan_bytes_str(m->bytes[k], b, sizeof b), m->nqueues[k], m->nqueues[k] > 1 ? "s" : "");
        bool first = true;
        for (int q = 0; q < PLAN_NQUEUES && o < n; q++)
            if (m->on[k][q]) {
                o += (size_t)snprintf(buf + o, n - o, "%s%s", first ? "" : " ", plan_queue_names[q]);
                first = false;
            }
        if (o < n) o += (size_t)snprintf(buf + o, n - o, ")");
    }
    if (!o) snprintf(buf, n, "none");
    return buf;
}
