/* kernels_embed: the CUDA code of a plan. Generates every kernel launch of
 * the training graph (compiler/cuda_gen), compiles each distinct unit with
 * NVRTC for every architecture asked for (compiler/nvrtc, cached on disk)
 * and stores the cubins, with their ptxas resource reports, in the plan's
 * kernels section, and the launches (entry, geometry, arguments per op, and
 * the utility launches the executor binds itself) in its launch sections,
 * so zinfrun on a cluster needs no compiler. */
#ifndef ZINF_KERNELS_EMBED_H
#define ZINF_KERNELS_EMBED_H
#include <stdbool.h>
#include <stdio.h>
#include "cuda_gen.h"
#include "diag.h"
#include "graph.h"
#include "plan.h"

typedef struct EmbedStats {
    int units, archs, compiled, cached;
    double seconds;     /* NVRTC wall time */
    uint64_t bytes;     /* cubin bytes embedded */
} EmbedStats;

/* Where kernels_embed reads and writes; each NULL for its default. */
typedef struct EmbedDirs {
    const char *source_dir; /* every unit's source also written to source_dir/<PlanKernel name>
                             * (the names the plan's launches use) */
    const char *kernel_dir; /* the kernel sources (CudaGenOptions.kernel_dir) */
    const char *cache_dir;  /* NVRTC's cubin cache (NvrtcOptions.cache_dir) */
} EmbedDirs;

/* archs: "sm_80,sm_90" style list; dirs may be NULL (every default).
 * Returns false with diagnostics (the NVRTC log and the saved source of a
 * failing unit) in d. */
bool kernels_embed(Plan *p, const Graph *g, const char *archs, const EmbedDirs *dirs, const SourceSet *src,
                   int sm_count, DiagSink *d, EmbedStats *st);

/* The launch half of kernels_embed, which needs no NVRTC: appends the
 * utility launches (one zk_axpy per float dtype of the graph's parameters
 * and gradients) to m, then the tile launches of every distinct (op, tile,
 * ntiles) of p's KERNEL instructions with ntiles > 1 (cuda_gen_op_tile),
 * their units too when new, then fills p's launches, launch_args, op_code,
 * tile_code (sorted by op, then tile) and util from m. Adam's and the
 * gradient norm's element counts become PARG_NUMEL (the executor runs them
 * on its shard). Returns false with a diagnostic when cuda_gen's launches
 * are not the shape this expects or an op cannot be tiled on the GPU. */
bool kernels_embed_launches(Plan *p, const Graph *g, CudaGen *cg, CudaModule *m, DiagSink *d);

/* The PlanKernel name of unit u of m: "<family>-<hash12>.cu", as
 * cuda_module_write_sources names its files. */
const char *kernels_unit_name(const CudaModule *m, int u, char *buf, size_t n);

#endif
