#include "kernels_embed.h"
#include <stdlib.h>
#include <string.h>
#include "cuda_gen.h"
#include "nvrtc.h"

bool kernels_embed(Plan *p, const Graph *g, const char *archs, const SourceSet *src, int sm_count, DiagSink *d,
                   EmbedStats *st) {
    memset(st, 0, sizeof *st);
    char why[512];
    if (!nvrtc_available(why, sizeof why)) {
        diag_error(d, SPAN_NONE, "cannot compile the plan's CUDA kernels: %s", why);
        diag_hint(d, "install the CUDA toolkit (NVRTC), or plan with --kernels=none for a plan without GPU code");
        return false;
    }
    const char *list[8];
    char buf[128];
    snprintf(buf, sizeof buf, "%s", archs);
    int na = 0;
    for (char *s = strtok(buf, ","); s && na < 8; s = strtok(NULL, ",")) list[na++] = s;
    if (!na) {
        diag_error(d, SPAN_NONE, "--kernels: no architecture given (e.g. sm_80,sm_90)");
        return false;
    }
    Arena a;
    arena_init(&a);
    CudaGen cg;
    CudaGenOptions co = {.sources = src, .sm_count = sm_count};
    cuda_gen_init(&cg, &a, &co);
    CudaModule m;
    /* A shape the kernels cannot serve fails every layer alike: show the
     * first few, then the way out. */
    DiagSink gd;
    diag_init(&gd);
    gd.max_errors = 3;
    int grc = cuda_gen_graph(&cg, g, &m, &gd);
    for (int i = 0; i < gd.len; i++) {
        const Diag *x = &gd.items[i];
        if (x->level == DIAG_ERROR) diag_error(d, x->span, "%s", x->msg);
        else if (x->level == DIAG_NOTE) diag_note(d, x->span, "%s", x->msg);
        else if (x->level == DIAG_HINT) diag_hint(d, "%s", x->msg);
        else diag_warning(d, x->span, "%s", x->msg);
    }
    if (gd.truncated) diag_note(d, SPAN_NONE, "%d more ops fail the same way", gd.errors - gd.max_errors);
    diag_free(&gd);
    if (grc != 0) {
        diag_hint(d, "zinfc --kernels=none writes the plan without GPU code (for the host backend, or to inspect it)");
        arena_free(&a);
        return false;
    }
    int nj = m.nunits * na;
    NvrtcJob *jobs = calloc((size_t)(nj ? nj : 1), sizeof *jobs);
    if (!jobs) {
        arena_free(&a);
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    for (int u = 0; u < m.nunits; u++)
        for (int k = 0; k < na; k++) {
            NvrtcJob *j = &jobs[u * na + k];
            j->source = m.units[u].source;
            j->name = arena_printf(&a, "%s-%.12s.cu", m.units[u].family, m.units[u].hash);
            j->arch = list[k];
        }
    NvrtcOptions no = {0};
    int failed = nvrtc_compile_many(jobs, nj, &no, 0);
    bool ok = failed == 0;
    PlanKernel *pk = ok ? ARENA_NEWN(&p->arena, PlanKernel, nj ? nj : 1) : NULL;
    if (ok && !pk) ok = false;
    for (int i = 0; i < nj; i++) {
        NvrtcJob *j = &jobs[i];
        if (j->rc != 0) {
            diag_error(d, SPAN_NONE, "NVRTC failed on %s for %s: %s", j->name, j->arch,
                       j->result.error ? j->result.error : "unknown error");
            if (j->result.failed_source) diag_note(d, SPAN_NONE, "the generated source is saved in %s", j->result.failed_source);
        } else if (ok) {
            /* The resource report: one line per entry point. */
            /* The specialisation first (dtype, transposes, the planner's gemm tile), then ptxas. */
            char res[1024] = "";
            size_t o = (size_t)snprintf(res, sizeof res, "[%s] ", m.units[i / na].spec ? m.units[i / na].spec : "");
            if (o >= sizeof res) o = sizeof res - 1;
            for (int f = 0; f < j->result.nfuncs && o < sizeof res; f++) {
                const NvrtcFuncRes *fr = &j->result.funcs[f];
                o += (size_t)snprintf(res + o, sizeof res - o, "%s%s: %d registers, %d B smem, %d B stack, %d/%d spill",
                                      f ? "; " : "", fr->name, fr->registers, fr->smem_bytes, fr->stack_bytes,
                                      fr->spill_stores, fr->spill_loads);
            }
            uint8_t *data = ARENA_NEWN(&p->arena, uint8_t, j->result.cubin_size ? j->result.cubin_size : 1);
            if (!data) { ok = false; continue; }
            memcpy(data, j->result.cubin, j->result.cubin_size);
            pk[i] = (PlanKernel){arena_strdup(&p->arena, j->name), arena_strdup(&p->arena, j->arch),
                                 arena_strdup(&p->arena, res), data, j->result.cubin_size};
            st->bytes += j->result.cubin_size;
            st->seconds += j->result.seconds;
            if (j->result.cached) st->cached++;
            else st->compiled++;
        }
        nvrtc_result_free(&j->result);
    }
    if (ok) {
        p->kernels = pk;
        p->nkernels = (uint32_t)nj;
        st->units = m.nunits;
        st->archs = na;
    }
    free(jobs);
    arena_free(&a);
    return ok && !p->arena.failed;
}
