/* kernels_embed: the CUDA code of a plan. Generates every kernel launch of
 * the training graph (compiler/cuda_gen), compiles each distinct unit with
 * NVRTC for every architecture asked for (compiler/nvrtc, cached on disk)
 * and stores the cubins, with their ptxas resource reports, in the plan's
 * kernels section, so zinfrun on a cluster needs no compiler. */
#ifndef ZINF_KERNELS_EMBED_H
#define ZINF_KERNELS_EMBED_H
#include <stdbool.h>
#include <stdio.h>
#include "diag.h"
#include "graph.h"
#include "plan.h"

typedef struct EmbedStats {
    int units, archs, compiled, cached;
    double seconds;     /* NVRTC wall time */
    uint64_t bytes;     /* cubin bytes embedded */
} EmbedStats;

/* archs: "sm_80,sm_90" style list. Returns false with diagnostics (the NVRTC
 * log and the saved source of a failing unit) in d. */
bool kernels_embed(Plan *p, const Graph *g, const char *archs, const SourceSet *src, int sm_count, DiagSink *d,
                   EmbedStats *st);

#endif
