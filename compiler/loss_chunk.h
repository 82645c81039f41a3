/* loss_chunk: the chunked loss. A forward graph whose loss is
 * cross_entropy(matmul(x, w; transpose_b), targets) (or of linear(x, w)
 * without a bias), the logits used by nothing else, can be rewritten into
 * one linear_cross_entropy op that computes the logits `chunk` rows at a
 * time and never holds them whole (docs/primitives.md, docs/tuning.md
 * "Long context"). This module finds that pattern, sizes the chunk from
 * the memory a target has and rewrites the graph; zinfc decides when
 * (compiler/main_zinfc.c: the whole logits when the plan fits with them). */
#ifndef ZINF_LOSS_CHUNK_H
#define ZINF_LOSS_CHUNK_H
#include <stdbool.h>
#include <stdint.h>
#include "graph.h"
#include "target.h"

/* The loss pattern of a forward graph (before autodiff): its projection
 * op and loss op in *proj and *xent; false when the graph has none. */
bool loss_chunk_find(const Graph *g, int *proj, int *xent);
/* The rows of the loss's logits (B*T) and the logits' vocabulary. */
void loss_chunk_shape(const Graph *g, int xent, int64_t *rows, int64_t *vocab);
/* The rows per chunk for t: the most whose scratch (a chunk of logits and
 * of their gradient, in fp32 and the activation dtype) takes at most 1/64
 * of the GPU's memory (a quarter of the share a weight tile may take: the
 * GEMM of a chunk is still large, [rows, D] x [D, V]), a multiple of 64
 * where there are that many; at least 1, at most the rows. */
int64_t loss_chunk_rows(const Graph *g, const Target *t);
/* Rewrites the loss into linear_cross_entropy with `chunk` rows (0: all at
 * once). False when the graph has no such loss. */
bool loss_chunk_apply(Graph *g, int64_t chunk);
/* The bytes of the workspace of g's linear_cross_entropy op (0 when g has
 * none), as runtime/hostk/hostk_linxent.c lays it out: the row logsumexps,
 * dx and dw for dloss = 1 in fp32 (kept from forward to backward), an fp32
 * copy of w unless f32, and one chunk's scratch. It is outside the
 * planned arenas, so the planner keeps that much of the GPU (or, on the
 * host backend, the working budget) free for it. */
uint64_t loss_chunk_workspace_bytes(const Graph *g);
/* A copy of g (its tensors and ops arrays new, in g's arena), for planning
 * it twice. False when out of memory. */
bool loss_chunk_copy_graph(const Graph *g, Graph *out);

#endif
