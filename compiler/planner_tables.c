/* planner_tables: the instruction, operand and buffer tables a build
 * writes, with the hazard dependencies each access adds, and the tiled
 * parameter of an op. Below every stage of the build (planner_build.c,
 * planner_step.c, planner_optim.c, planner_alloc.c), which all call it; it
 * calls none of them. */
#include "planner_impl.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

bool pl_grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int nc = *cap ? *cap * 2 : 256;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np) return false;
    *p = np;
    *cap = nc;
    return true;
}

/* A big table's bytes for cap entries, whole pages (0: none mapped). */
static size_t table_bytes(int cap, size_t elem) {
    size_t page = 4096, n = (size_t)cap * elem;
    return (n + page - 1) / page * page;
}

bool pl_table_grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int nc = *cap ? *cap * 2 : 1024;
    while (nc < need) nc *= 2;
    size_t old = table_bytes(*cap, elem), now = table_bytes(nc, elem);
    void *np = *p ? mremap(*p, old, now, MREMAP_MAYMOVE) : mmap(NULL, now, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (np == MAP_FAILED) return false;
    madvise(np, now, MADV_HUGEPAGE);
    *p = np;
    *cap = nc;
    return true;
}

void pl_table_free(void *p, int cap, size_t elem) {
    if (p) munmap(p, table_bytes(cap, elem));
}

const uint64_t pl_arena_align[PLAN_NARENAS] = {GPU_ALIGN, IO_ALIGN, IO_ALIGN, IO_ALIGN};

int pl_newbuf(PlanBuilder *b, int arena, uint64_t bytes, int tensor, const char *name, bool persistent) {
    if (!pl_table_grow((void **)&b->bufs, &b->cbufs, b->nbufs + 1, sizeof(PlanBuf))) {
        b->oom = true;
        return -1;
    }
    PlanBuf *x = &b->bufs[b->nbufs];
    memset(x, 0, sizeof *x);
    if (arena != ARENA_GPU) bytes = (bytes + IO_ALIGN - 1) / IO_ALIGN * IO_ALIGN;
    x->b = (PlanBuffer){name, (uint8_t)arena, persistent ? PLAN_BUF_PERSISTENT : 0, tensor, 0, bytes};
    x->first = x->last = -1;
    x->writer = -1;
    for (int q = 0; q < PLAN_NQUEUES; q++) x->lastq[q] = x->readq[q] = -1;
    if (persistent) b->persist_end = b->nbufs + 1;
    return b->nbufs++;
}

void pl_dep_on(PlanBuilder *b, int i, int j) {
    if (j < 0 || j >= i) return;
    int q = b->ins[j].s.queue;
    if (q == b->ins[i].s.queue) return; /* queue order already */
    if (b->ins[i].depq[q] < j) b->ins[i].depq[q] = j;
}

int pl_ins(PlanBuilder *b, int op, int queue, int arg, int tile, int ntiles, double flops) {
    if (!pl_table_grow((void **)&b->ins, &b->cins, b->nins + 1, sizeof(Ins))) {
        b->oom = true;
        return -1;
    }
    Ins *x = &b->ins[b->nins];
    memset(x, 0, sizeof *x);
    x->s.op = (uint8_t)op;
    x->s.queue = (uint8_t)(queue == Q_ANY ? Q_COMPUTE : queue);
    x->s.arg = arg;
    x->s.tile = tile;
    x->s.ntiles = ntiles;
    x->s.opnd = (uint32_t)b->nopnds;
    x->s.flops = flops;
    for (int q = 0; q < PLAN_NQUEUES; q++) x->depq[q] = -1;
    return b->nins++;
}

/* Adds an operand to instruction i (the latest) and the dependencies its
 * access needs: read after write, write after read and write. */
void pl_opnd(PlanBuilder *b, int i, int buf, int mode, uint64_t off, uint64_t bytes) {
    if (i < 0 || b->oom) return;
    if (!pl_table_grow((void **)&b->opnds, &b->copnds, b->nopnds + 1, sizeof(PlanOperand))) {
        b->oom = true;
        return;
    }
    b->opnds[b->nopnds++] = (PlanOperand){buf, (uint8_t)mode, off, bytes};
    b->ins[i].s.nopnd++;
    int op = b->ins[i].s.op;
    if (op == PI_NVME_READ || op == PI_NVME_WRITE || op == PI_H2D || op == PI_D2H || op == PI_INPUT) {
        if (bytes > b->ins[i].s.bytes) b->ins[i].s.bytes = bytes; /* a copy moves its bytes once */
    } else {
        b->ins[i].s.bytes += bytes * (mode == PLAN_M ? 2 : 1);   /* memory touched */
    }
    if (buf < 0) return;
    PlanBuf *x = &b->bufs[buf];
    int q = b->ins[i].s.queue;
    if (x->first < 0) x->first = i;
    x->last = i;
    x->lastq[q] = i;
    pl_dep_on(b, i, x->writer);
    if (mode & PLAN_W) {
        for (int k = 0; k < PLAN_NQUEUES; k++) pl_dep_on_queue(b, i, x->readq[k], k);
        x->writer = i;
        for (int k = 0; k < PLAN_NQUEUES; k++) x->readq[k] = -1;
    } else {
        x->readq[q] = i;
    }
}


int pl_tiled_param_of(const PlanBuilder *b, const GOp *op) {
    int nfin = op->kind == OP_BWD ? op->nfin : op->nin;
    for (int k = 0; k < nfin; k++) {
        int x = op->in[k];
        if (x >= 0 && b->g->tensors[x].cls == TC_PARAM && b->ntiles[x] > 1 && pl_tileable_use(op, k)) return x;
    }
    return -1;
}
