/* blas_core: whether OpenBLAS runs this processor's GEMM kernels.
 *
 * OpenBLAS (built with DYNAMIC_ARCH, as distributions ship it) picks its
 * kernels from the CPUID family and model when it loads. A model its
 * version does not know (virtual machines that report "Intel(R) Xeon(R)
 * Processor", processors newer than the library) falls back to Prescott,
 * the SSE3 kernels: sgemm about 3 times slower on an AVX-512 machine
 * (the host backend's GEMMs are OpenBLAS's). The library reads
 * OPENBLAS_CORETYPE only when it loads, so the programs set it and start
 * themselves again (runtime/main_env.h, main_blas_core); a user's own
 * OPENBLAS_CORETYPE is always kept. */
#ifndef ZINF_BLAS_CORE_H
#define ZINF_BLAS_CORE_H
#include <stdbool.h>

/* What the processor can run, of what decides OpenBLAS's x86-64 kernels. */
typedef struct BlasCpu {
    bool avx, avx2, fma, avx512f, avx512bw, avx512vl, avx512dq;
} BlasCpu;

/* This processor's (CPUID, and the OS saving the AVX/AVX-512 state). */
BlasCpu blas_cpu_detect(void);

/* The OPENBLAS_CORETYPE that runs the kernels `cpu` can when OpenBLAS chose
 * `core` (openblas_get_corename()), or NULL when `core` is already as good:
 * a core OpenBLAS falls back to (Prescott and the older ones, any case)
 * on a processor with AVX-512 (F, BW, VL, DQ) gives "SkylakeX"; with AVX2
 * and FMA "Haswell"; with AVX "Sandybridge". A core OpenBLAS detected by
 * model is never replaced. */
const char *blas_core_better(const char *core, BlasCpu cpu);

/* The kernels OpenBLAS runs in this process ("Prescott", "SkylakeX", ...). */
const char *blas_core_name(void);

#endif
