/* mlp_tile: the MLP tiled by rows (sequence tiling, ALST's tiled MLP). A
 * forward graph's MLP blocks
 *   n = rmsnorm(x, g); a = linear(n, w_gate); s = silu(a) (or gelu);
 *   u = linear(n, w_up); h = mul(s, u); y = linear(h, w_down)
 * (no biases; every intermediate used by the block alone; each linear may
 * carry a LoRA adapter, + scale(linear(linear(v, A), B))) can each be
 * rewritten into one gated_mlp op that computes them a tile of rows at a
 * time, so that the [rows, I] intermediates of a whole sequence never
 * exist (docs/primitives.md, docs/tuning.md "Long context"): the memory
 * model and the planner then count only y, and the op's tile scratch is a
 * workspace the planner keeps free. This module finds the blocks, sizes
 * the tile from the memory a target has and rewrites the graph; zinfc
 * decides when (compiler/main_zinfc.c: the MLP as written when the plan
 * fits with it). */
#ifndef ZINF_MLP_TILE_H
#define ZINF_MLP_TILE_H
#include <stdbool.h>
#include <stdint.h>
#include "graph.h"
#include "target.h"

/* A projection of a block: its linear (base) and, where it has a LoRA
 * adapter (out = base + scale(linear(linear(v, A), B))), the adapter's
 * ops (-1 without); out: the projection's value. */
typedef struct MlpProj {
    int base, a, b, scale, add;
    int out;
} MlpProj;

/* One MLP block of a forward graph: its norm, activation and product, and
 * its projections gate, up and down. */
typedef struct MlpBlock {
    int norm, act, mul;
    MlpProj proj[3];
} MlpBlock;

/* The MLP blocks of a forward graph (before autodiff), up to max of them
 * into out (may be NULL); returns how many there are. */
int mlp_tile_find(const Graph *g, MlpBlock *out, int max);
/* The rows (B*T) of the first block's input and its widths D and I; false
 * when the graph has no block. */
bool mlp_tile_shape(const Graph *g, int64_t *rows, int64_t *D, int64_t *I);
/* The rows per tile for t: the most whose scratch (a tile's intermediates
 * and their gradients, the norm's and the linears' fp32 copies of a tile)
 * takes at most 1/64 of the GPU's memory (the share of the chunked loss's
 * scratch), a multiple of 64 where there are that many; at least 1, at
 * most the rows. 0 when the graph has no block. */
int64_t mlp_tile_rows(const Graph *g, const Target *t);
/* Rewrites every block into gated_mlp with `rows` rows a tile (0: all at
 * once); returns how many (0: the graph has none). */
int mlp_tile_apply(Graph *g, int64_t rows);
/* The bytes of the largest workspace of g's gated_mlp ops (0 when g has
 * none), as runtime/hostk/hostk_gmlp.c lays it out. It is outside the
 * planned arenas, so the planner keeps that much of the GPU (or, on the
 * host backend, the working budget) free for it. */
uint64_t mlp_tile_workspace_bytes(const Graph *g);

/* The regions of one gated_mlp op's workspace, bytes from its start, as
 * runtime/hostk/hostk_gmlp.c lays them out (each 64-byte aligned). The
 * CUDA kernels (compiler/cuda_gen_gmlp.c) use the same regions, so the
 * op's workspace is the bytes mlp_tile_workspace_bytes charges on either
 * backend. */
typedef struct MlpTileWs {
    int64_t rows;              /* C: rows a tile */
    uint64_t n, dn;            /* the norm's output and its gradient, [C, D] */
    uint64_t mid[8];           /* a, s, u, h and dh, ds, du, da: [C, I] */
    uint64_t norm, norm_bytes; /* the norm's scratch */
    uint64_t lin, lin_bytes;   /* the linears' scratch */
    uint64_t ad[3][6];         /* per adapter (gate, up, down; width O = I, I, D): base, q, qs, dq [C, O], p, dp [C, r] */
    int64_t acc[11];           /* input i's fp32 gradient accumulator (wanted and not f32); -1: none */
    uint64_t total;
} MlpTileWs;
/* The layout of gated_mlp op o (forward or backward) at C rows a tile
 * (C <= 0: its rows attribute); false when o is not such an op with its
 * five tensors. */
bool mlp_tile_layout(const Graph *g, const GOp *o, int64_t C, MlpTileWs *w);

#endif
