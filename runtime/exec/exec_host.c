/* exec_host: the host backend (rt_backend_host): the plan's arenas in host
 * memory and every instruction run on the host through the executor's
 * rt_host_instr (runtime/exec/exec_instr.c). */
#include "exec_impl.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "hostk.h"

static int host_instr(void *ctx, uint32_t i, int worker, char *err, size_t n) { return rt_host_instr(ctx, i, worker, err, n); }

enum { HUGE_PAGE = 2 << 20 };

/* The arenas in host memory, page-aligned and zeroed; the host kernels'
 * workspace per forward op, kept from forward to backward. The pinned
 * arena (the NVMe transfers' buffers, registered with io_uring) is
 * 2 MiB-aligned and asks for transparent huge pages before its first
 * touch, so it is born on them: registration (nvme.c) then has nothing to
 * collapse, and a 1 MiB request is one scatter-gather entry
 * (docs/runtime.md, "NVMe transfers"). Best effort: where the kernel
 * refuses, 4 KiB pages; RtOptions.no_huge_pages leaves them too. */
static int host_create(Rt *r, char *err, size_t n) {
    const Plan *p = r->p;
    for (int k = 0; k < PLAN_NARENAS; k++) {
        if (k == ARENA_NVME) continue;
        uint64_t sz = p->arenas[k].size;
        if (!sz) continue;
        uint64_t align = k == ARENA_PINNED ? HUGE_PAGE : 4096;
        uint64_t rounded = (sz + align - 1) / align * align;
        r->arena[k] = aligned_alloc(align, rounded);
        if (!r->arena[k]) return errorf(err, n, "cannot allocate the %s arena (%llu bytes)", plan_arena_names[k], (unsigned long long)sz);
        if (k == ARENA_PINNED && !r->o.no_huge_pages)
            (void)madvise(r->arena[k], rounded, MADV_HUGEPAGE); /* a refusal leaves 4 KiB pages */
        memset(r->arena[k], 0, rounded);
        r->arena_bytes[k] = sz;
    }
    for (uint32_t k = 0; k < p->nops; k++) {
        if (p->ops[k].kind != OP_FWD) continue;
        size_t b = hk_op_workspace_bytes(p, (int)k);
        if (!b) continue;
        r->ws[k] = calloc(1, b);
        if (!r->ws[k]) return errorf(err, n, "out of memory for kernel workspace");
        r->ws_bytes[k] = b;
        r->ws_total += b;
    }
    return 0;
}

static void host_destroy(Rt *r) {
    for (int k = 0; k < PLAN_NARENAS; k++) free(r->arena[k]);
}

static int host_no_device(char *err, size_t n) { return errorf(err, n, "the host backend has no device memory"); }
static int host_home_read(Rt *r, uint64_t addr, void *dst, uint64_t bytes, char *err, size_t n) {
    (void)r, (void)addr, (void)dst, (void)bytes;
    return host_no_device(err, n);
}
static int host_home_write(Rt *r, uint64_t addr, const void *src, uint64_t bytes, char *err, size_t n) {
    (void)r, (void)addr, (void)src, (void)bytes;
    return host_no_device(err, n);
}
static int host_copy_from_gpu(Rt *r, int q, const PlanOperand *o, void *dst, char *err, size_t n) {
    (void)r, (void)q, (void)o, (void)dst;
    return host_no_device(err, n);
}
static int host_copy_to_gpu(Rt *r, int q, const PlanOperand *o, const void *src, size_t bytes, char *err, size_t n) {
    (void)r, (void)q, (void)o, (void)src, (void)bytes;
    return host_no_device(err, n);
}
static int host_grad_sumsq(Rt *r, const PlanInstr *in, int worker, double *ss, char *err, size_t n) {
    (void)r, (void)in, (void)worker, (void)ss, (void)err, (void)n;
    return 0; /* every shard is in host memory or on NVMe: summed by the caller */
}
static void host_step_begin(Rt *r) { (void)r; }
static int host_range_end(Rt *r, uint32_t begin, uint32_t end, char *err, size_t n) {
    (void)r, (void)begin, (void)end, (void)err, (void)n;
    return 0; /* the range ran to its end inside qrun_range */
}
static void host_abort(Rt *r) { (void)r; }
static double host_busy_seconds(const Rt *r, int q) { return r->q.busy[q]; }
static void host_memory_report(const Rt *r, FILE *out) {
    char a[32];
    fprintf(out, "  host kernel workspace %llu bytes (%s), scratch %llu bytes x %d queues\n",
            (unsigned long long)r->ws_total, plan_bytes_str(r->ws_total, a, sizeof a),
            (unsigned long long)r->scratch_bytes, PLAN_NQUEUES);
}
static uint64_t host_gpu_memory_used(const Rt *r) {
    (void)r;
    return 0;
}

const RtBackendOps rt_backend_host = {
    .name = "host",
    .device_memory = false,
    .create = host_create,
    .destroy = host_destroy,
    .instr = host_instr,
    .host_begin = NULL,
    .home_read = host_home_read,
    .home_write = host_home_write,
    .copy_from_gpu = host_copy_from_gpu,
    .copy_to_gpu = host_copy_to_gpu,
    .grad_sumsq = host_grad_sumsq,
    .step_begin = host_step_begin,
    .range_end = host_range_end,
    .abort = host_abort,
    .busy_seconds = host_busy_seconds,
    .memory_report = host_memory_report,
    .gpu_memory_used = host_gpu_memory_used,
};
