/* verify_impl: what the verifier's files share; private to runtime/plan/verify*.c.
 * verify.c is the driver (verify_plan and the checks of ranges, memory,
 * training settings, shards); it calls down into verify_kernels.c (launches,
 * GEMMs, kernel operands), verify_optim.c (Adam operands and speculation)
 * and verify_order.c (the schedule's order, dataflow and overlap). All of
 * them report through verify_report.c, which calls nothing of theirs. */
#ifndef ZINF_VERIFY_IMPL_H
#define ZINF_VERIFY_IMPL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "plan.h"

enum { MAX_PROBLEMS = 20 };

typedef struct V {
    const Plan *p;
    char *msgs;
    size_t n, used;
    int problems;
    /* derived */
    uint32_t *qpos;   /* 1-based position of each instruction in its queue */
    uint8_t *queue;   /* each instruction's queue: the pairwise checks read it at random, a byte instead of a record */
    uint32_t *vc;     /* ninstrs x PLAN_NQUEUES vector clocks */
    uint32_t *order;  /* a topological order */
    /* per buffer: uses */
    uint32_t *use_start, *use_list; /* CSR: instructions using each buffer */
    uint8_t *use_mode;
} V;

/* Adds one problem line to v->msgs (at most MAX_PROBLEMS are kept). */
void vf_problem(V *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define STOP(v) ((v)->problems >= MAX_PROBLEMS)
const char *vf_iname(const Plan *p, uint32_t i);
const char *vf_bname(const Plan *p, int32_t b);

static inline bool vf_on_nvme(const Plan *p, const PlanOperand *o) {
    return o->buffer >= 0 && p->buffers[o->buffer].arena == ARENA_NVME;
}
static inline uint64_t vf_tensor_bytes(const PlanTensor *t) {
    return plan_dtype_bytes(t->dtype, t->numel);
}

/* verify_kernels.c */
void vf_check_launches(V *v);
void vf_check_kernel_operands(V *v, uint32_t i);
/* verify_optim.c */
void vf_check_adam_operands(V *v, uint32_t i);
void vf_check_speculation(V *v);
/* verify_order.c */
bool vf_build_order(V *v);
bool vf_build_uses(V *v);
void vf_check_dataflow(V *v);
void vf_check_overlap(V *v);

#endif
