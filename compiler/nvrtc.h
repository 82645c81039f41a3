/* nvrtc: CUDA C source -> CUBIN through NVRTC, with an on-disk cache.
 *
 * libnvrtc is loaded at run time (dlopen: $CUDA_HOME/lib64, libnvrtc.so.13,
 * .so.12, .so, /usr/local/cuda/lib64), so zinfc runs without the toolkit and
 * says so clearly when a compilation is asked for. No GPU is needed: NVRTC
 * runs on the CPU.
 *
 * Cache: an entry per (source, entry name, arch, options, NVRTC version),
 * keyed by the SHA-256 of all of them, in NvrtcOptions.cache_dir (zinfc
 * passes $ZINF_CACHE_DIR), else $XDG_CACHE_HOME/zinf/kernels, else
 * ~/.cache/zinf/kernels. An entry holds
 * the cubin and the compile log (so a hit still has the resource report),
 * is written atomically (temp file + rename) and checksummed: a corrupt or
 * truncated entry is ignored and rebuilt. A failed compilation saves its
 * source in <cache>/failed/ (or the current directory when that cannot be
 * written) and the error message names the file and carries the log.
 *
 * Every result is malloc-owned by the NvrtcResult (nvrtc_result_free).
 * Nothing here prints; errors are returned in NvrtcResult.error.
 */
#ifndef ZINF_NVRTC_H
#define ZINF_NVRTC_H
#include <stdbool.h>
#include <stddef.h>

typedef struct NvrtcOptions {
    const char *cache_dir;     /* NULL: the default location above */
    bool no_cache;             /* neither read nor write the cache */
    const char *const *extra;  /* further NVRTC options, e.g. "-lineinfo" */
    int nextra;
} NvrtcOptions;

/* One entry point's lines of the ptxas report (--ptxas-options=-v). */
typedef struct NvrtcFuncRes {
    char name[96];
    int registers;
    int barriers;
    int stack_bytes, spill_stores, spill_loads;
    int smem_bytes;            /* static shared memory */
    int cmem0_bytes;           /* constant bank 0 (kernel parameters) */
} NvrtcFuncRes;

typedef struct NvrtcResult {
    unsigned char *cubin;
    size_t cubin_size;
    char *log;                 /* NVRTC's log: the ptxas report, warnings, errors */
    NvrtcFuncRes *funcs;       /* parsed from log, one per entry point */
    int nfuncs;
    bool cached;               /* served from the cache: NVRTC did not run */
    double seconds;            /* wall time of the NVRTC compilation (0 when cached) */
    char key[65];              /* cache key, hex */
    char *failed_source;       /* compile failure: path of the saved source, else NULL */
    char *error;               /* NULL on success */
} NvrtcResult;

/* Compiles source (a whole translation unit; name is the file name in
 * messages) for arch ("sm_80", "sm_90", ...). Returns 0, or -1 with
 * out->error set (and out->log, out->failed_source on a compile error).
 * Safe to call from several threads. */
int nvrtc_compile(const char *source, const char *name, const char *arch, const NvrtcOptions *opt,
                  NvrtcResult *out);
void nvrtc_result_free(NvrtcResult *r);

/* A batch of compilations (every unit of a module, for every arch of a plan). */
typedef struct NvrtcJob {
    const char *source, *name, *arch;
    NvrtcResult result;  /* filled; free each with nvrtc_result_free */
    int rc;              /* nvrtc_compile's return */
} NvrtcJob;
/* Runs jobs[0..n) on up to `threads` threads (0: one per online CPU); the
 * results do not depend on the thread count. Returns how many failed. */
int nvrtc_compile_many(NvrtcJob *jobs, int n, const NvrtcOptions *opt, int threads);

/* Whether libnvrtc can be loaded; if not, why (into err). */
bool nvrtc_available(char *err, size_t n);
/* NVRTC's version; -1 when it cannot be loaded. */
int nvrtc_version(int *major, int *minor);
/* The cache directory opt selects (no directory is created). */
const char *nvrtc_cache_dir(const NvrtcOptions *opt, char *buf, size_t n);
/* Parses a ptxas -v report; returns the number of entry points (into a
 * malloc'd array at *out, NULL when none), or -1 on out of memory. */
int nvrtc_parse_resources(const char *log, NvrtcFuncRes **out);

/* SHA-256 (FIPS 180-4), and its lowercase hex form (65 bytes with NUL). */
void nvrtc_sha256(const void *data, size_t n, unsigned char out[32]);
void nvrtc_hex(const unsigned char *bytes, size_t n, char *out);

#endif
