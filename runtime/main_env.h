/* main_env: what the runtime's programs (zinfrun, zinfgen, zinfprobe,
 * zinfref) take from ZINF_* environment variables, read and checked in one
 * place and handed to the libraries as options or process-wide settings.
 * docs/environment.md lists every variable; the libraries read none of them
 * (tests/e2e/layering.sh checks). Most are for comparison and tests.
 *
 * A value that is set but wrong is an error naming the variable (the
 * program prints it and exits 2); an empty value counts as unset. Each
 * program is one translation unit, so the functions live here, static. */
#ifndef ZINF_MAIN_ENV_H
#define ZINF_MAIN_ENV_H
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "adam.h"
#include "blas_core.h"
#include "comm.h"
#include "exec.h"
#include "hostk_threads.h"
#include "nvme.h"

typedef struct MainEnv {
    CommOptions comm;          /* ZINF_COMM_TIMEOUT, ZINF_TEST_NODE_SPLIT */
    NvmeOptions nvme;          /* ZINF_NVME_SYNC=1, ZINF_NVME_HUGEPAGES=0 */
    bool nvme_unbatched;       /* ZINF_NVME_NOBATCH=1 */
    int queue_slice_us;        /* ZINF_QUEUE_SLICE_US, as RtOptions.queue_slice_us */
    const char *cublaslt_off;  /* ZINF_CUBLASLT=0 */
    const char *hk_isa;        /* ZINF_HK_ISA (NULL: unset) */
    AdamIsa adam_isa;          /* ZINF_ADAM_ISA (ADAM_ISA_AUTO: unset) */
    int threads;               /* ZINF_THREADS (0: unset) */
    const char *probe;         /* ZINF_PROBE (NULL: unset; "" or "none": no probe file) */
    bool plain;                /* ZINF_PLAIN set (any value): no live progress line */
    const char *stdlib_dir;    /* ZINF_STDLIB (zinfref's imports; NULL: unset) */
} MainEnv;

/* The value of a variable, NULL when unset or empty. */
static inline const char *main_env_get(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* 0 or 1 into *out; -1 with the message in err otherwise. */
static inline int main_env_flag(const char *name, bool *out, char *err, size_t n) {
    const char *v = main_env_get(name);
    if (!v) return 0;
    if (strcmp(v, "0") && strcmp(v, "1")) return snprintf(err, n, "%s=%s: not 0 or 1", name, v), -1;
    *out = v[0] == '1';
    return 0;
}

/* A whole number in [lo, hi] into *out; -1 with the message otherwise. */
static inline int main_env_int(const char *name, long lo, long hi, long *out, char *err, size_t n) {
    const char *v = main_env_get(name);
    if (!v) return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) return snprintf(err, n, "%s=%s: not a whole number from %ld to %ld", name, v, lo, hi), -1;
    *out = x;
    return 0;
}

/* Reads every variable of the list into e (zeroed first); -1 with the
 * first bad value's message in err. */
static inline int main_env_read(MainEnv *e, char *err, size_t n) {
    memset(e, 0, sizeof *e);
    const char *v;
    if ((v = main_env_get("ZINF_COMM_TIMEOUT"))) {
        char *end;
        double t = strtod(v, &end);
        if (*end || !(t > 0 && t <= 1e9)) return snprintf(err, n, "ZINF_COMM_TIMEOUT=%s: not a number of seconds above 0", v), -1;
        e->comm.timeout_s = t;
    }
    long x = 0;
    if (main_env_int("ZINF_TEST_NODE_SPLIT", 1, 1 << 20, &x, err, n)) return -1;
    e->comm.node_split = (int)x;
    bool on = false;
    if (main_env_flag("ZINF_NVME_SYNC", &on, err, n)) return -1;
    if (on) e->nvme.sync = "ZINF_NVME_SYNC=1 in the environment";
    on = true;
    if (main_env_flag("ZINF_NVME_HUGEPAGES", &on, err, n)) return -1;
    e->nvme.no_huge_pages = !on;
    if (main_env_flag("ZINF_NVME_NOBATCH", &e->nvme_unbatched, err, n)) return -1;
    x = -1;
    if (main_env_int("ZINF_QUEUE_SLICE_US", 0, 1000000, &x, err, n)) return -1;
    e->queue_slice_us = x < 0 ? 0 : x == 0 ? -1 : (int)x; /* 0: the kernel's default */
    on = true;
    if (main_env_flag("ZINF_CUBLASLT", &on, err, n)) return -1;
    if (!on) e->cublaslt_off = "ZINF_CUBLASLT=0";
    if ((v = main_env_get("ZINF_HK_ISA"))) {
        if (strcmp(v, "auto") && strcmp(v, "scalar") && strcmp(v, "avx2") && strcmp(v, "avx512"))
            return snprintf(err, n, "ZINF_HK_ISA=%s: not scalar, avx2, avx512 or auto", v), -1;
        e->hk_isa = v;
    }
    if ((v = main_env_get("ZINF_ADAM_ISA")) && adam_isa_parse(v, &e->adam_isa))
        return snprintf(err, n, "ZINF_ADAM_ISA=%s: not scalar, avx2, avx512 or auto", v), -1;
    x = 0;
    if (main_env_int("ZINF_THREADS", 1, 4096, &x, err, n)) return -1;
    e->threads = (int)x;
    e->probe = getenv("ZINF_PROBE"); /* "" too: no probe file */
    e->plain = getenv("ZINF_PLAIN") != NULL;
    e->stdlib_dir = main_env_get("ZINF_STDLIB");
    return 0;
}

/* The process-wide settings (the host kernels' and Adam's instruction
 * sets, the thread count, the NVMe engines): once at start, before any
 * kernel runs or engine opens. -1 with the message in err when this
 * processor cannot do what a variable asks. */
static inline int main_env_apply(const MainEnv *e, char *err, size_t n) {
    nvme_set_options(&e->nvme);
    if (e->threads) hk_threads_ask(e->threads, "ZINF_THREADS");
    if (e->hk_isa && hk_threads_kernels_isa(e->hk_isa))
        return snprintf(err, n, "ZINF_HK_ISA=%s: this processor does not run it", e->hk_isa), -1;
    if (adam_isa_set(e->adam_isa))
        return snprintf(err, n, "ZINF_ADAM_ISA=%s: this processor does not run it", adam_isa_name(e->adam_isa)), -1;
    return 0;
}

/* The executor's share. */
static inline void main_env_rt(const MainEnv *e, RtOptions *o) {
    o->nvme_unbatched = e->nvme_unbatched;
    o->no_huge_pages = e->nvme.no_huge_pages;
    o->queue_slice_us = e->queue_slice_us;
    o->cublaslt_off = e->cublaslt_off;
}

/* OpenBLAS fell back to its slow kernels on a processor it does not know
 * by model (runtime/hostk/blas_core.h): set OPENBLAS_CORETYPE to the
 * kernels the processor runs and start this program again, first thing in
 * main (before MPI or a thread has started; the library reads the variable
 * only when it loads). A user's OPENBLAS_CORETYPE, even empty, is kept;
 * when the exec fails the program goes on with the kernels it has. */
static inline void main_blas_core(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *core = blas_core_better(blas_core_name(), blas_cpu_detect());
    if (!core || setenv("OPENBLAS_CORETYPE", core, 1)) return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE");
}

#endif
