/* decode: generation with a KV cache (zinfgen --decode kv) over a plan's
 * forward ops, on the host kernels or on the GPU.
 *
 * A training plan's forward runs a [B, T] window; generating one token with
 * it recomputes every position. The decoder instead runs the plan's forward
 * ops (PlanOp, in plan order, up to the loss) for one position at a time:
 * every activation that the token ids reach is [B, T, ...] (or [T, ...]
 * for what arange(T) reaches, e.g. learned positions), and a decode step
 * computes its one row, position p of row 0. The only ops that look across
 * positions are attention (its keys and values of positions 0..p-1 are the
 * cache: each attention op keeps [T, kv_dim] of f32 keys and values, filled
 * one row a step), rope (applied at position p) and arange (whose one value
 * is p). Every other primitive is position-wise. Ops that only parameters
 * reach run once. Only the ops the logits depend on run: the loss is
 * cross_entropy of the logits, or that plus another term (an MoE model's
 * load-balancing loss, whose statistics a step then never computes).
 *
 * Where it runs (KvDevice): KV_HOST, the host kernels in rank 0's memory
 * (runtime/decode/decode_host.c); KV_CUDA, the plan's decode kernels (the decode
 * unit zinfc puts in the kernel table of a plan with GPU code,
 * stdlib/kernels/decode.cu) on rank 0's GPU, with the parameters, the
 * caches and one position's activations in its memory beside the plan's
 * arenas (runtime/decode/decode_cuda.c). The analysis, the refusals and the
 * gathering are the same for both.
 *
 * Where the weights come from: the plan keeps them wherever it does (GPU,
 * CPU memory, NVMe, partitioned over ranks); kvdec_create gathers each
 * parameter, whole, to rank 0 (hfio_gather, collective) and keeps them
 * there: in host memory (refused above half of the machine's memory) or
 * on the GPU (refused above the device memory the plan leaves free), with
 * the window mode as the way out. Rank 0 alone runs the steps.
 *
 * What it refuses (kvdec_create returns 1 with the reason, before any
 * gathering, the same verdict on every rank): a primitive it has no decode
 * rule for, an activation whose leading dims are not [B, T] (or [T]), a
 * matmul of two activations, a tensor that the targets reach before the
 * loss (all from the plan); on the GPU also a plan without the decode
 * unit, an operand layout its kernels do not take, and a decoder larger
 * than the free device memory (rank 0's verdict, in its words).
 *
 * Nothing here prints or exits; errors come back as -1 and a message. */
#ifndef ZINF_DECODE_H
#define ZINF_DECODE_H
#include <stddef.h>
#include <stdint.h>
#include "comm.h"
#include "exec.h"
#include "plan.h"

typedef struct KvDecoder KvDecoder;

typedef enum KvDevice { KV_HOST, KV_CUDA } KvDevice;

/* Collective (every rank calls it): 0 with *out set, 1 when the plan cannot
 * be decoded this way on `on` (why says which op or tensor, or what rank 0
 * lacks; nothing was gathered), -1 on an error (err). Ranks other than 0
 * get a decoder that holds nothing and only frees. */
int kvdec_create(Rt *r, const Plan *p, Comm *c, KvDevice on, KvDecoder **out, char *err, size_t errlen);
void kvdec_free(KvDecoder *d);
/* Rank 0: token id `token` at the next position (0 after create or reset);
 * the logits of that position into logits (vocab f32 values). Past the
 * plan's T positions it fails: reset and feed the window again. */
int kvdec_step(KvDecoder *d, int32_t token, float *logits, char *err, size_t errlen);
/* Empties the cache: the next step is position 0. */
void kvdec_reset(KvDecoder *d);
/* Positions in the cache (the next step's position). */
int64_t kvdec_position(const KvDecoder *d);
/* Bytes rank 0 holds (in host memory, or on the GPU): parameters, the KV
 * cache, one position's activations, scratch. */
uint64_t kvdec_bytes(const KvDecoder *d);

#endif
