/* decode_impl: what runtime/decode/decode*.c share; private to them (no other
 * file includes it).
 *
 * decode_view.c, below the rest, says how a step sees a tensor (its view:
 * one row of what the token ids, or arange, reach; the whole of a
 * constant).
 * decode.c owns the analysis of a plan's forward (what each tensor is in a
 * step, which ops a step runs), the collective setup (refusals, gathering
 * the parameters whole to rank 0, the ops only parameters reach) and the
 * public entry points. A step back end runs the ops: decode_host.c on the
 * host kernels in rank 0's memory, decode_cuda.c on the plan's decode
 * kernels in rank 0's GPU memory. Calls go down: decode.c to the back
 * ends, every file to decode_view.c. */
#ifndef ZINF_DECODE_IMPL_H
#define ZINF_DECODE_IMPL_H
#include "decode.h"
#include "errorf.h"

/* What a tensor is in a decode step. DK_ABSENT: not there (the targets, and
 * what only they reach); DK_CONST: parameters and what only they reach,
 * whole; DK_T: [T, ...] (what arange(T) reaches), one row; DK_BT: [B, T,
 * ...] (what the token ids reach), one row. Larger wins when an op mixes. */
typedef enum DecKind { DK_UNSEEN, DK_ABSENT, DK_CONST, DK_T, DK_BT } DecKind;

typedef struct KvBackend KvBackend;

struct KvDecoder {
    const Plan *p;
    const Comm *c;
    const KvBackend *be;
    int64_t B, T, pos;
    /* longrope (Phi-3): the smallest original_max_positions of its rope ops (0: none), the
     * text's length its tables are chosen by (0: the step's position + 1), and the ids fed at
     * positions 0..pos-1, to turn them again by the long factors when the text outgrows it */
    int64_t longrope_orig, rope_seq;
    int32_t *fed;
    uint8_t *kind;             /* per tensor: DecKind */
    int32_t *ops;              /* the forward ops a step runs, in plan order (at create: the constant ones too) */
    int nops;
    int32_t tokens, logits;
    uint64_t bytes;            /* what the back end holds on rank 0 */
    void *state;               /* the back end's, rank 0 only */
};

/* A step back end. Every function but check runs on rank 0 only. */
struct KvBackend {
    /* Every rank, after the analysis, on the plan only: 1 and why when an
     * op is beyond this back end. NULL: none is. */
    int (*check)(const KvDecoder *d, char *why, size_t n);
    /* Before anything is allocated: 1 and why when rank 0 cannot hold the
     * decoder there (memory, device, code); sets d->bytes. */
    int (*open)(KvDecoder *d, char *why, size_t n);
    int (*allocate)(KvDecoder *d, char *err, size_t n);
    /* Host memory for parameter t gathered whole, then put where the steps
     * read it. */
    void *(*param_dst)(KvDecoder *d, int t);
    int (*param_put)(KvDecoder *d, int t, char *err, size_t n);
    /* Op o at position d->pos (a constant op: once, whole). */
    int (*run_op)(KvDecoder *d, int o, char *err, size_t n);
    int (*set_token)(KvDecoder *d, int32_t token, char *err, size_t n);
    /* The step's logits (vocab values) as f32. */
    int (*logits)(KvDecoder *d, float *out, char *err, size_t n);
    void (*close)(KvDecoder *d);
};

extern const KvBackend kvdec_host, kvdec_cuda;

/* A refusal (the plan cannot be decoded this way): the reason into why, as
 * errorf words it, and 1 instead of errorf's -1. */
#define REFUSE(...) (errorf(__VA_ARGS__), 1)

/* ---- decode_view.c ---- */

const char *kvdec_prim_str(int prim);
/* Tensor t's dims as a step sees them: [B, T, ...] and [T, ...] with their
 * leading dims 1 (one row), a constant whole. */
void kvdec_view_dims(const KvDecoder *d, int t, int64_t dims[PLAN_MAX_RANK]);
int64_t kvdec_view_numel(const KvDecoder *d, int t);
uint64_t kvdec_view_bytes(const KvDecoder *d, int t);
/* The last dim of tensor t (1 for a scalar). */
int64_t kvdec_last_dim(const KvDecoder *d, int t);
/* The parameters' bytes, whole. */
uint64_t kvdec_param_bytes(const Plan *p);

#endif
