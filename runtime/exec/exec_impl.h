/* exec_impl: what the executor's files share (private to runtime/exec): the
 * Rt struct, the backend table, and the host semantics of every opcode,
 * which both backends run (the CUDA one for the instructions that stay on
 * the host: NVMe, CPU Adam, host-memory accumulation and collectives).
 * Files, calls going down (no loop):
 *   exec.c (life cycle, the step) -> exec_ckpt.c (checkpoints), exec_eval.c
 *     (the forward-only schedule); it picks rt_backend_host or
 *     rt_backend_cuda and reaches the backend only through that table;
 *   exec_host.c, exec_cuda.c (the backends) -> exec_instr.c (rt_host_instr:
 *     kernels and the dispatcher) -> exec_comm.c (collectives),
 *     exec_optim.c (the norm, Adam), exec_nvme.c (transfers, the pipeline);
 *   all of them -> exec_operand.c (operands, elements, homes).
 * Errors: errorf (runtime/base/errorf.h) into err, -1.
 * No file but the backends' own calls into a backend. */
#ifndef ZINF_EXEC_IMPL_H
#define ZINF_EXEC_IMPL_H
#include "exec.h"
#include "comm_wait.h"
#include "errorf.h"
#include "rtio.h"

typedef struct RtCuda RtCuda;
typedef struct RtEvalEvent {
    int64_t step;
    double start, end, loss;
    int batches;
} RtEvalEvent;
typedef struct RtBackendOps RtBackendOps;

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
    const int32_t *seg;               /* the micro-batch's packed rows (rt_set_segments), NULL: none */
    const int32_t *const *segs;       /* per micro-batch of the next steps, NULL: not packed */
    const int32_t *const *eval_segs;  /* per batch of the evaluation in progress (rt_eval_packed), NULL: none */
    const int32_t *fwd_seg;           /* the next rt_forward's, NULL: none */
    uint8_t *no_decay;                /* per tensor: 1 = its Adam steps it without weight decay (rt_optim_init) */
    float loss_grad;
    double loss_sum;
    int loss_n;
    double grad_norm;       /* unscaled */
    bool skip;              /* f16: gradients not finite, step skipped */
    bool redone;            /* this step ran the speculative optimizer's redo range */
    bool adam_in_batch;     /* an Adam runs in the micro-batch (the optimizer overlapped with the backward) */
    /* Where each buffer is in its arena: the plan's offset, except that a
     * twin and its home (PLAN_BUF_TWIN) exchange theirs after every step
     * that is not skipped. Every address of a buffer comes from here. */
    uint64_t *boff;
    uint32_t *twins;        /* pairs (home buffer, twin buffer) */
    uint32_t ntwins;
    int64_t step;           /* optimizer steps done */
    double loss_scale;
    int good_steps;
    uint64_t bytes[PLAN_NQUEUES];
    const RtBackendOps *be; /* the backend (rt_backend_host or rt_backend_cuda) */
    /* the forward-only schedule (runtime/exec/exec_eval.c), built at first use */
    uint8_t *fwd_run;       /* per instruction: runs in it */
    uint32_t fwd_end, fwd_loss_kernel, fwd_skipped; /* instrs[0, fwd_end); the loss kernel; left out */
    int64_t fwd_logits_kernel; /* the cross_entropy kernel whose logits operand holds them after a forward; -1: none */
    QrunTiming *fwd_timing; /* the training step's timings, kept across a forward */
    double eval_busy[PLAN_NQUEUES]; /* queue time spent in forwards, not counted as training's */
    RtEvalEvent *evals;     /* for --trace */
    int neval, eval_cap;
    RtCuda *cu;             /* the CUDA backend's state (runtime/exec/exec_cuda.c), NULL on the host backend */
    uint64_t *buf_reach;    /* per buffer: the furthest byte any operand of the plan addresses */
};

/* exec_operand.c */
size_t rt_dsz(int dt);
/* Host address of an operand; NULL for NVMe, absent, or device memory. */
uint8_t *rt_opnd_ptr(const Rt *r, const PlanOperand *o);
/* Byte offset of an NVMe operand in the NVMe arena. */
uint64_t rt_nvme_off(const Rt *r, const PlanOperand *o);
const PlanOperand *rt_opnd(const Rt *r, const PlanInstr *in, uint32_t k);
double rt_elem_get(const void *p, int dt, int64_t i);
void rt_elem_set(void *p, int dt, int64_t i, double v);
/* Bytes [off, off+bytes) of home buffer `buffer` (a shard's home: GPU
 * arena, CPU arena or NVMe), to or from host memory. */
int rt_home_read(Rt *r, int buffer, uint64_t off, void *dst, uint64_t bytes, char *err, size_t errlen);
int rt_home_write(Rt *r, int buffer, uint64_t off, const void *src, uint64_t bytes, char *err, size_t errlen);

/* exec_comm.c */
/* The communicator's last error into err; -1. */
int rt_comm_err(Rt *r, char *err, size_t errlen);
/* A collective's status s, its waiting w noted as the worker's waiting. */
int rt_comm_done(Rt *r, int worker, CommStatus s, const CommWait *w, char *err, size_t errlen);
int rt_allgather(Rt *r, const PlanInstr *in, int worker, char *err, size_t errlen);
int rt_reduce_scatter(Rt *r, const PlanInstr *in, int worker, char *err, size_t errlen);
int rt_allreduce(Rt *r, const PlanInstr *in, int worker, char *err, size_t errlen);

/* exec_optim.c */
bool rt_tensor_partitioned(const Rt *r, int t);
int rt_grad_norm(Rt *r, const PlanInstr *in, int worker, char *err, size_t errlen);
int rt_adam(Rt *r, const PlanInstr *in, char *err, size_t errlen);
/* The parameters stepped without weight decay (OP_ADAM's PLAN_ADAM_NO_DECAY)
 * into r->no_decay; freed by rt_destroy. */
int rt_optim_init(Rt *r, char *err, size_t errlen);
/* After the norm of a speculative plan's step: whether it clips or is
 * skipped, so that the speculative Adams must be redone. */
bool rt_speculation_failed(const Rt *r);

/* exec_nvme.c */
/* An NVME_READ or NVME_WRITE as one rtio transfer. */
void rt_nvme_req(const Rt *r, const PlanInstr *in, RtioReq *q);
/* Runs the nvme queue as a pipeline (qrun.h, qrun_set_pipe), on either
 * backend: each NVMe transfer, once the backend's host_begin has let it,
 * goes in flight through rtio under its slot's tag; any other instruction
 * of the queue runs alone through the backend's instr. */
void rt_nvme_pipe(Rt *r);

/* exec_instr.c: instruction i on the host (the host backend's semantics). */
int rt_host_instr(Rt *r, uint32_t i, int worker, char *err, size_t errlen);

/* The checkpoint code (runtime/exec/exec_ckpt.c), given which tensor classes a
 * checkpoint holds (exec.c decides). */
typedef bool (*RtCkptClass)(int cls);
int rt_ckpt_save(Rt *r, const char *dir, const char *state_json, RtCkptClass keep, char *err, size_t errlen);
int rt_ckpt_load(Rt *r, const char *dir, int64_t step, RtCkptClass keep, bool *mine, RtCkptOrigin *from, char *err,
                 size_t errlen);
int rt_ckpt_check(Rt *r, const char *dir, int64_t step, RtCkptClass keep, char *why, size_t errlen);

/* exec_eval.c: frees the forward schedule; writes the evaluations' trace events. */
void rt_forward_free(Rt *r);
void rt_trace_evals(const Rt *r, FILE *out, bool first);

/* A backend: what differs between running the plan on the host and on a
 * GPU. The executor (exec.c) and the host semantics (exec_instr.c and the
 * files below it) reach the device only through these, so no core file
 * calls into a backend and adding one is a new table, not new branches. */
struct RtBackendOps {
    const char *name;
    /* Whether the GPU arena is device memory (reached only through
     * home_read/home_write and copy_*); false: it is host memory. */
    bool device_memory;
    /* After r->p, r->c, r->o, r->ws are set: allocates the GPU, pinned and
     * CPU arenas into r->arena / r->arena_bytes (the GPU one stays NULL when
     * it is device memory) and whatever state the backend keeps. destroy
     * frees them, also after a create that failed halfway. */
    int (*create)(Rt *r, char *err, size_t errlen);
    void (*destroy)(Rt *r);
    /* Runs (or enqueues) instruction i on a queue's worker (QrunFn). */
    int (*instr)(void *ctx, uint32_t i, int worker, char *err, size_t errlen);
    /* Before host instruction i runs (or starts, on the nvme pipeline) on
     * a queue's worker: whatever instr does first for it (CUDA: binds the
     * thread, waits for the device work it depends on, notes when it
     * began); its time is waiting, not the instruction's. 0, or -1 with
     * err; without `wait`, 1 at once when it would have to wait (the
     * pipeline then lets the transfers in flight end first, so their
     * dependants are not held up). NULL: nothing to do. */
    int (*host_begin)(Rt *r, uint32_t i, int worker, bool wait, char *err, size_t errlen);
    /* Bytes at addr of the device GPU arena, to or from host memory. */
    int (*home_read)(Rt *r, uint64_t addr, void *dst, uint64_t bytes, char *err, size_t errlen);
    int (*home_write)(Rt *r, uint64_t addr, const void *src, uint64_t bytes, char *err, size_t errlen);
    /* Mid-step copies between an operand in device memory and host memory,
     * on queue q's stream, waited for against the job's deadline. */
    int (*copy_from_gpu)(Rt *r, int q, const PlanOperand *o, void *dst, char *err, size_t errlen);
    int (*copy_to_gpu)(Rt *r, int q, const PlanOperand *o, const void *src, size_t bytes, char *err, size_t errlen);
    /* Adds the squares of the device-resident gradient shards of a
     * GRAD_NORM to *ss on the device: 1 done, 0 none there (the caller sums
     * every operand), -1 error. */
    int (*grad_sumsq)(Rt *r, const PlanInstr *in, int worker, double *ss, char *err, size_t errlen);
    void (*step_begin)(Rt *r);
    /* After a range of the stream ran (or was enqueued): waits for it and
     * collects losses, error words and timings. */
    int (*range_end)(Rt *r, uint32_t begin, uint32_t end, char *err, size_t errlen);
    /* After a failure, before anything waits on the device (aborts NCCL so no peer waits). */
    void (*abort)(Rt *r);
    double (*busy_seconds)(const Rt *r, int q);
    /* The lines after the arenas in rt_memory_report. */
    void (*memory_report)(const Rt *r, FILE *out);
    uint64_t (*gpu_memory_used)(const Rt *r);
};
extern const RtBackendOps rt_backend_host; /* runtime/exec/exec_host.c */
extern const RtBackendOps rt_backend_cuda; /* runtime/exec/exec_cuda.c */

#endif
