/* adam: AdamW on the CPU for optimizer state held off the GPU.
 *
 * One pass over n elements reads the gradient (f32, bf16 or f16) and the
 * fp32 master weight, momentum and variance, and writes the new master, m, v
 * and, when asked, the low-precision parameter copy (f32, bf16 or f16,
 * rounded to nearest even from the new master). With t = step (1-based):
 *     g  = grad * grad_scale
 *     m  = beta1 * m + (1 - beta1) * g
 *     v  = beta2 * v + (1 - beta2) * g * g
 *     w  = w * (1 - lr * weight_decay)                       (decoupled decay)
 *          - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * which is torch.optim.AdamW's update.
 *
 * Instruction set: AVX-512F, AVX2+FMA+F16C or plain C, chosen per call:
 * p->isa, or when that is ADAM_ISA_AUTO the one adam_isa_set chose for the
 * process (the programs pass ZINF_ADAM_ISA=scalar|avx2|avx512), or else the
 * best the processor has (__builtin_cpu_supports). One kernel
 * (runtime/hostk/adam_simd.h) serves the three, so they give bit-identical
 * results. Threads: the rank's pool over 64 Ki-element blocks;
 * p->threads (0: the rank's team, hk_threads() of hostk_threads.h). Small tensors run on
 * the calling thread. Results do not depend on the thread count. adam_step
 * is reentrant; it keeps no state. */
#ifndef ZINF_ADAM_H
#define ZINF_ADAM_H

#include <stdbool.h>
#include <stdint.h>
#include "vocab.h"

typedef enum AdamIsa { ADAM_ISA_AUTO = 0, ADAM_ISA_SCALAR, ADAM_ISA_AVX2, ADAM_ISA_AVX512 } AdamIsa;

typedef struct AdamParams {
    float lr, beta1, beta2, eps, weight_decay;
    AdamIsa isa;  /* ADAM_ISA_AUTO: adam_isa_set's, else the best available */
    int threads;  /* 0: the rank's team (hk_threads) */
} AdamParams;

/* The learning-rate schedule of the train block (docs/training.md): the
 * rate of optimizer step `step` (1-based) is lr * step / warmup_steps
 * during warmup, then (schedule, LrSchedule of vocab.h) lr, a cosine or a
 * straight line from lr to min_lr over the remaining steps. Every executor
 * (host, CUDA, the reference) takes it from here. */
typedef struct AdamSchedule {
    double lr, min_lr;
    int64_t warmup_steps, steps;
    int schedule;
} AdamSchedule;
double adam_lr(const AdamSchedule *s, int64_t step);
/* The schedule of a plan's train block (plan.h). */
struct PlanTrain;
AdamSchedule adam_schedule_of(const struct PlanTrain *t);

typedef enum AdamStatus {
    ADAM_OK = 0,
    ADAM_EDTYPE,  /* gradient or parameter dtype not f32/bf16/f16 */
    ADAM_EISA,    /* the ISA asked for is not available */
    ADAM_EARG,    /* n < 0, step < 1, or a NULL array */
} AdamStatus;

/* One AdamW step (see above). param_out may be NULL (param_dt ignored). */
AdamStatus adam_step(const AdamParams *p, int64_t step, float *master, float *m, float *v,
                     const void *grad, DType grad_dt, void *param_out, DType param_dt, int64_t n,
                     float grad_scale);

/* The same step out of place: the state is read from master_in, m_in,
 * v_in and the new state written to master, m, v (which must not overlap
 * the inputs unless they are the same arrays); bit for bit what adam_step
 * leaves in place. The speculative optimizer's twin state (docs/schedule.md)
 * steps this way, keeping the old state intact. */
AdamStatus adam_step_to(const AdamParams *p, int64_t step, const float *master_in, const float *m_in, const float *v_in,
                        float *master, float *m, float *v, const void *grad, DType grad_dt, void *param_out,
                        DType param_dt, int64_t n, float grad_scale);

/* The same step with moments stored as m_dt and v_dt: both DT_F32 (as
 * adam_step_to), both DT_BF16 (widened exactly, the new moments stored
 * rounded to nearest even; the update uses them before rounding), or
 * DT_DYN8 and DT_UDYN8, 8-bit blocks of bitsandbytes' dynamic maps
 * (qstate.h): elements 0 of the arrays start a block, every block is
 * decoded, stepped as f32 moments and encoded with its new absmax (a
 * short last block when n is not a multiple of 2048). In place or out of
 * place as adam_step_to. */
AdamStatus adam_step_state(const AdamParams *p, int64_t step, const float *master_in, const void *m_in, const void *v_in,
                           float *master, void *m, void *v, DType m_dt, DType v_dt, const void *grad, DType grad_dt,
                           void *param_out, DType param_dt, int64_t n, float grad_scale);

/* The best ISA this processor runs. */
AdamIsa adam_isa_best(void);
/* 1 when this processor runs isa (AUTO and SCALAR always). */
int adam_isa_supported(AdamIsa isa);
/* The ISA of ADAM_ISA_AUTO for the whole process (once at start; for
 * comparison and tests); ADAM_ISA_AUTO: back to the best. 0, or -1 when
 * this processor does not run it (nothing changes). */
int adam_isa_set(AdamIsa isa);
/* What adam_step would use for `requested`; ADAM_ISA_AUTO when requested
 * is not supported (adam_step then fails with EISA). */
AdamIsa adam_isa_resolve(AdamIsa requested);
/* "scalar", "avx2", "avx512"; "auto" for ADAM_ISA_AUTO. */
const char *adam_isa_name(AdamIsa isa);
/* Parse a name as printed by adam_isa_name; returns 0 on success. */
int adam_isa_parse(const char *name, AdamIsa *out);
const char *adam_status_str(AdamStatus s);

#endif
