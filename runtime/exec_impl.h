/* exec_impl: what the host and CUDA halves of the executor share (private
 * to runtime/exec.c and runtime/exec_cuda.c). The Rt struct, operand
 * addressing, element access, and the host implementation of every opcode,
 * which the CUDA backend runs for the instructions that stay on the host
 * (NVMe, CPU Adam, host-memory accumulation and collectives). */
#ifndef ZINF_EXEC_IMPL_H
#define ZINF_EXEC_IMPL_H
#include "exec.h"
#include "rtio.h"

typedef struct RtCuda RtCuda;

struct Rt {
    const Plan *p;
    Comm *c;
    RtOptions o;
    uint8_t *arena[PLAN_NARENAS];
    uint64_t arena_bytes[PLAN_NARENAS];
    RtIo io;                /* the NVMe arena */
    bool io_open;
    void **ws;              /* per forward op: kernel workspace kept from forward to backward */
    size_t *ws_bytes;
    size_t ws_total;
    void **table[PLAN_NQUEUES]; /* per worker: tensor id -> storage of the instruction at hand */
    uint8_t *scratch[PLAN_NQUEUES];
    size_t scratch_bytes;
    Qrun q;
    /* the step in flight */
    const int32_t *tokens, *targets;
    float loss_grad;
    double loss_sum;
    int loss_n;
    double grad_norm;       /* unscaled */
    bool skip;              /* f16: gradients not finite, step skipped */
    int64_t step;           /* optimizer steps done */
    double loss_scale;
    int good_steps;
    uint64_t bytes[PLAN_NQUEUES];
    RtCuda *cu;             /* the CUDA backend (runtime/exec_cuda.c), NULL on the host backend */
};

/* Formats into err; returns -1 (the executor's error convention). */
int rt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
size_t rt_dsz(int dt);
/* Host address of an operand; NULL for NVMe, absent, or device memory. */
uint8_t *rt_opnd_ptr(const Rt *r, const PlanOperand *o);
const PlanOperand *rt_opnd(const Rt *r, const PlanInstr *in, uint32_t k);
double rt_elem_get(const void *p, int dt, int64_t i);
void rt_elem_set(void *p, int dt, int64_t i, double v);
bool rt_tensor_partitioned(const Rt *r, int t);
/* Bytes [off, off+bytes) of home buffer `buffer` (a shard's home: GPU
 * arena, CPU arena or NVMe), to or from host memory. */
int rt_home_read(Rt *r, int buffer, uint64_t off, void *dst, uint64_t bytes, char *err, size_t errlen);
int rt_home_write(Rt *r, int buffer, uint64_t off, const void *src, uint64_t bytes, char *err, size_t errlen);
/* Instruction i on the host (the host backend's semantics). */
int rt_host_instr(Rt *r, uint32_t i, int worker, char *err, size_t errlen);

/* runtime/exec_cuda.c */
int rtc_create(Rt *r, char *err, size_t errlen);   /* after r->p, r->c and r->o are set */
void rtc_destroy(Rt *r);
/* Arena k of the CUDA backend: host arenas are page-locked, the GPU arena device memory. */
int rtc_alloc_arenas(Rt *r, char *err, size_t errlen);
int rtc_instr(void *ctx, uint32_t i, int worker, char *err, size_t errlen);
int rtc_home_read(Rt *r, uint64_t addr, void *dst, uint64_t bytes, char *err, size_t errlen);
int rtc_home_write(Rt *r, uint64_t addr, const void *src, uint64_t bytes, char *err, size_t errlen);
void rtc_step_begin(Rt *r);
/* Mid-step copies between an operand in GPU memory and host memory, on
 * queue q's stream, waited for against the job's deadline. */
/* Adds the squares of the GPU-resident gradient shards of a GRAD_NORM to
 * *ss on the GPU: 1 done, 0 not possible (copy them out), -1 error. */
int rtc_grad_sumsq(Rt *r, const PlanInstr *in, int worker, double *ss, char *err, size_t errlen);
int rtc_copy_from_gpu(Rt *r, int q, const PlanOperand *o, void *dst, char *err, size_t errlen);
int rtc_copy_to_gpu(Rt *r, int q, const PlanOperand *o, const void *src, size_t bytes, char *err, size_t errlen);
/* After a range of the stream: waits for the GPU, collects losses, error words, timings. */
int rtc_range_end(Rt *r, uint32_t begin, uint32_t end, char *err, size_t errlen);
double rtc_busy_seconds(const Rt *r, int q);
void rtc_memory_report(const Rt *r, FILE *out);
uint64_t rtc_gpu_memory_used(const Rt *r);
/* After a failure: abort NCCL so no peer waits, before anything synchronises. */
void rtc_abort(Rt *r);

#endif
