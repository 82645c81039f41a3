/* zinfprobe: measures this machine (runtime/probe/probe.h) and, where a CUDA
 * driver and a GPU are found, this rank's GPU (runtime/probe/probe_gpu.h), and
 * writes it as a target file (host or cuda), which zinfc reads when
 * planning without --target.
 *
 *   zinfprobe [--nvme DIR] [--ranks N] [-o target.zl] [--quick] [--host]
 *   mpirun -np 2 zinfprobe --nvme /tmp/zinf-nvme          (collectives too)
 *   zinfc --probe ...                                     (the same: zinfc runs this)
 *
 * It is a program of its own, not a part of zinfc, because it measures with
 * the runtime's engines (io_uring, MPI, the host kernels, the CUDA driver,
 * cuBLASLt and NCCL) and the compiler
 * may not link runtime code (docs/architecture.md). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "comm.h"
#include "hostk_threads.h"
#include "main_env.h"
#include "plan.h"
#include "probe.h"
#include "probe_gpu.h"

typedef struct Opts {
    const char *nvme, *out;
    int ranks;
    int repeat; /* --repeat N: whole host measurements, the median of each figure kept (0: the default) */
    bool quick, host;
    const char *probe_env; /* ZINF_PROBE: the default output in place of this machine's probe file */
} Opts;

/* Host measurements repeated by default: a burst of another process's
 * work moves one of three, not the median. */
enum { REPEAT_DEFAULT = 3, REPEAT_MAX = 9 };

static void usage(FILE *f) {
    fputs("usage: zinfprobe [--nvme DIR] [--ranks N] [-o FILE] [--quick] [--host] [--repeat N]\n"
          "       mpirun -np N zinfprobe [...]     (measures the collectives of N ranks)\n"
          "Measures this machine as plans use it and writes a host target with what it found:\n"
          "NVMe through the io_uring engine (O_DIRECT; latency + bandwidth), host memory (a triad),\n"
          "the host kernels by family (peak and each family's efficiency), dispatch latencies,\n"
          "and under mpirun MPI all-reduce/all-gather/reduce-scatter (latency per ring step +\n"
          "bandwidth). With a CUDA driver and a GPU per rank (the node-local rank's) it writes a\n"
          "cuda target instead, adding pinned PCIe copies, HBM, cuBLASLt GEMMs (bf16 peak and\n"
          "efficiency), launch latency and under mpirun NCCL all-gather/reduce-scatter; attention,\n"
          "norm and elementwise rates are not measured (efficiency 1). Under a minute; zinfc also\n"
          "runs it as zinfc --probe.\n"
          "  --nvme DIR   measure NVMe in DIR (swap files are made there and removed); the\n"
          "               target's nvme block names DIR (default: no NVMe figures)\n"
          "  --ranks N    the ranks the target is for (default 1; under mpirun: the world, and\n"
          "               N must equal it); without mpirun, N > 1 measures one rank with its\n"
          "               share of the cores and no collectives\n"
          "  -o FILE      where to write the target (default: the probe file zinfc reads,\n"
          "               $ZINF_PROBE, else ~/.cache/zinf/probe-MACHINE.zl)\n"
          "  --quick      tiny sizes, a few seconds (tests; the figures are rough)\n"
          "  --repeat N   measure the host N times (default 3, at most 9) and keep each figure's\n"
          "               median; the report gives the spread (the GPU is measured once)\n"
          "  --host       a host target even where a GPU is found (the GPU is not measured)\n"
          "exit status: 0 ok, 1 a measurement or the file failed, 2 usage\n",
          f);
}

/* 0 to go on, else the exit code (+100 for --help). */
static int parse(int argc, char **argv, Opts *o, bool lead) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool val = !strcmp(a, "--nvme") || !strcmp(a, "--ranks") || !strcmp(a, "-o") || !strcmp(a, "--repeat");
        if (val && i + 1 >= argc) {
            if (lead) fprintf(stderr, "zinfprobe: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (lead) usage(stdout);
            return 100;
        } else if (!strcmp(a, "--quick")) {
            o->quick = true;
        } else if (!strcmp(a, "--host")) {
            o->host = true;
        } else if (!strcmp(a, "--nvme")) {
            o->nvme = argv[++i];
        } else if (!strcmp(a, "-o")) {
            o->out = argv[++i];
        } else if (!strcmp(a, "--repeat")) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || n < 1 || n > REPEAT_MAX) {
                if (lead) fprintf(stderr, "zinfprobe: --repeat needs a count from 1 to %d, not '%s'\n", REPEAT_MAX, argv[i]);
                return 2;
            }
            o->repeat = (int)n;
        } else if (!strcmp(a, "--ranks")) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || n < 1 || n > 4096) {
                if (lead) fprintf(stderr, "zinfprobe: --ranks needs a rank count from 1 to 4096, not '%s'\n", argv[i]);
                return 2;
            }
            o->ranks = (int)n;
        } else {
            if (lead) fprintf(stderr, "zinfprobe: unknown argument '%s' (see zinfprobe --help)\n", a);
            return 2;
        }
    }
    return 0;
}

/* The NVMe directory as an absolute path a target's string can hold. */
static int check_nvme(const char *dir, char *abs, size_t n, char *err, size_t en) {
    struct stat st;
    char rp[PATH_MAX];
    if (stat(dir, &st) != 0) return snprintf(err, en, "--nvme %s: %s", dir, strerror(errno)), -1;
    if (!S_ISDIR(st.st_mode)) return snprintf(err, en, "--nvme %s: not a directory", dir), -1;
    if (access(dir, W_OK) != 0) return snprintf(err, en, "--nvme %s: not writable: %s", dir, strerror(errno)), -1;
    if (!realpath(dir, rp) || strlen(rp) >= n) return snprintf(err, en, "--nvme %s: cannot resolve the path", dir), -1;
    if (strpbrk(rp, "\"\\\n")) return snprintf(err, en, "--nvme %s: a quote, backslash or newline in the path", dir), -1;
    memcpy(abs, rp, strlen(rp) + 1); /* fits: checked above */
    return 0;
}

/* Checks that the output can be written (before minutes of measuring): its
 * temporary file is created and removed. The default place's folder is made. */
static int check_out(const char *out, bool is_default, char *err, size_t en) {
    char tmp[4200];
    if (is_default) { /* mkdir -p of the cache folder */
        char d[4096];
        snprintf(d, sizeof d, "%s", out);
        for (char *s = strchr(d + 1, '/'); s; s = strchr(s + 1, '/')) {
            *s = 0;
            if (mkdir(d, 0777) != 0 && errno != EEXIST) break;
            *s = '/';
        }
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *f = fopen(tmp, "w");
    if (!f) return snprintf(err, en, "-o %s: cannot write: %s", out, strerror(errno)), -1;
    fclose(f);
    remove(tmp);
    return 0;
}

static int write_out(const ProbeResult *r, const ProbeGpu *g, const char *out, char *err, size_t en) {
    char text[4096], tmp[4200];
    int len = g->on ? probe_gpu_target_text(r, g, text, sizeof text) : probe_target_text(r, text, sizeof text);
    if (len < 0 || (size_t)len >= sizeof text) return snprintf(err, en, "the target text is too long"), -1;
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *f = fopen(tmp, "w");
    bool ok = f && fwrite(text, 1, (size_t)len, f) == (size_t)len;
    if (f && fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, out) != 0) {
        snprintf(err, en, "-o %s: cannot write: %s", out, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

/* The spread of n values, (max - min) / median; 0 when the median is 0. */
static double spread(const double *v, int n) {
    double lo = v[0], hi = v[0], s[REPEAT_MAX];
    for (int k = 0; k < n; k++) {
        s[k] = v[k];
        lo = v[k] < lo ? v[k] : lo;
        hi = v[k] > hi ? v[k] : hi;
    }
    double m = probe_median(s, n);
    return m > 0 ? (hi - lo) / m : 0;
}

/* r = the n runs with every measured figure their median (the kernels'
 * calls each, then the peak and efficiencies from those); the largest
 * spread of the main figures into *worst and its name into *what, a line
 * for the report into line. Runs are of one machine with the same sizes,
 * so their tables line up. */
static void merge_runs(const ProbeResult *runs, int n, ProbeResult *r, char *line, size_t ln) {
    double v[REPEAT_MAX];
    *r = runs[0];
#define MEDIAN(F)                                    \
    do {                                             \
        for (int k_ = 0; k_ < n; k_++) v[k_] = runs[k_].F; \
        r->F = probe_median(v, n);                   \
    } while (0)
    MEDIAN(mem_bandwidth);
    MEDIAN(cache_bandwidth);
    MEDIAN(adam_bandwidth);
    MEDIAN(read_bandwidth);
    MEDIAN(launch);
    MEDIAN(copy);
    MEDIAN(wake);
    for (int i = 0; i < r->nrates; i++) MEDIAN(rates[i].secs);
    probe_summarise_rates(r);
    if (r->nvme) {
        MEDIAN(nvme_read.latency);
        MEDIAN(nvme_read.bandwidth);
        MEDIAN(nvme_write.latency);
        MEDIAN(nvme_write.bandwidth);
        MEDIAN(nvme_pipe_read.latency);
        MEDIAN(nvme_pipe_read.bandwidth);
        MEDIAN(nvme_pipe_write.latency);
        MEDIAN(nvme_pipe_write.bandwidth);
        MEDIAN(nvme_cpu);
        for (int i = 0; i < r->nnvme_sizes; i++)
            for (int d = 0; d < 2; d++) {
                MEDIAN(nvme_sizes[i].alone[d]);
                MEDIAN(nvme_sizes[i].drive[d]);
            }
    }
    if (r->net) {
        MEDIAN(coll.latency);
        MEDIAN(coll.bandwidth);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < r->ncoll; j++) MEDIAN(coll_secs[i][j]);
    }
    double secs = 0;
    for (int k = 0; k < n; k++) {
        secs += runs[k].seconds;
        if (runs[k].steal > r->steal) r->steal = runs[k].steal;
    }
    r->seconds = secs;
#undef MEDIAN
    /* the spread of the figures a plan's time leans on most */
    double peak[REPEAT_MAX], mem[REPEAT_MAX], adam[REPEAT_MAX], nvr[REPEAT_MAX], coll[REPEAT_MAX], kern = 0;
    for (int k = 0; k < n; k++) {
        ProbeResult one = runs[k];
        probe_summarise_rates(&one);
        peak[k] = one.peak_flops;
        mem[k] = runs[k].mem_bandwidth;
        adam[k] = runs[k].adam_bandwidth;
        nvr[k] = runs[k].nvme_read.bandwidth;
        coll[k] = runs[k].coll.bandwidth;
    }
    for (int i = 0; i < r->nrates; i++) {
        for (int k = 0; k < n; k++) v[k] = runs[k].rates[i].secs;
        double sp = spread(v, n);
        kern = sp > kern ? sp : kern;
    }
    int k = snprintf(line, ln, "repeated %d times, each figure the median; spread (max - min) / median: gemm peak %.0f%%, "
                     "memory %.0f%%, CPU Adam %.0f%%, kernel calls up to %.0f%%", n, 100 * spread(peak, n), 100 * spread(mem, n),
                     100 * spread(adam, n), 100 * kern);
    if (r->nvme && k > 0 && (size_t)k < ln) k += snprintf(line + k, ln - (size_t)k, ", NVMe reads %.0f%%", 100 * spread(nvr, n));
    if (r->net && k > 0 && (size_t)k < ln) snprintf(line + k, ln - (size_t)k, ", collectives %.0f%%", 100 * spread(coll, n));
}

/* The checks every rank agrees on before measuring; 0, 1 or 2. */
static int setup(Comm *c, Opts *o, char *nvme_abs, size_t nn, char *outbuf, size_t on, char *err, size_t en) {
    bool from_env = o->probe_env != NULL;
    if (c->size > 1 && o->ranks && o->ranks != c->size)
        return snprintf(err, en, "--ranks %d, but mpirun started %d ranks (leave --ranks out under mpirun)", o->ranks, c->size), 2;
    if (!o->ranks) o->ranks = c->size;
    if (c->size == 1 && o->ranks > 1) { /* one rank's share of the cores, as in a run of ranks */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        hk_threads_set(cores / o->ranks > 1 ? (int)(cores / o->ranks) : 1);
    }
    if (o->nvme && check_nvme(o->nvme, nvme_abs, nn, err, en)) return 1;
    if (o->nvme) o->nvme = nvme_abs;
    bool is_default = !o->out;
    if (is_default && !plan_probe_path(o->probe_env, outbuf, on))
        return snprintf(err, en, "no place for the probe file (ZINF_PROBE is \"none\", or no HOME): give -o FILE"), 1;
    if (is_default) o->out = outbuf;
    double bad = c->rank == 0 && check_out(o->out, is_default && !from_env, err, en) ? 1 : 0;
    if (comm_allreduce_sum_f64(c, &bad, 1) != COMM_OK) return snprintf(err, en, "%s", comm_last_error(c)), 1;
    if (bad > 0 && c->rank != 0) snprintf(err, en, "rank 0 cannot write its file");
    return bad > 0 ? 1 : 0;
}

int main(int argc, char **argv) {
    main_blas_core(argv); /* OpenBLAS on this processor's kernels (blas_core.h) */
    static Comm C;
    MainEnv env;
    char env_err[256];
    if (main_env_read(&env, env_err, sizeof env_err) || main_env_apply(&env, env_err, sizeof env_err)) {
        fprintf(stderr, "zinfprobe: %s\n", env_err);
        return 2;
    }
    if (comm_init(&C, &argc, &argv, &env.comm) != COMM_OK) {
        fprintf(stderr, "zinfprobe: %s\n", comm_last_error(&C));
        return 1;
    }
    bool lead = C.rank == 0;
    Opts o = {.probe_env = env.probe};
    int rc = parse(argc, argv, &o, lead);
    static char err[1024], nvme_abs[512], outbuf[4096];
    if (!rc) rc = setup(&C, &o, nvme_abs, sizeof nvme_abs, outbuf, sizeof outbuf, err, sizeof err);
    if (rc && rc != 100 && *err && lead) fprintf(stderr, "zinfprobe: %s\n", err);
    static ProbeResult r, runs[REPEAT_MAX];
    static char spread_line[512];
    ProbeOptions po = {o.nvme, o.quick};
    int nrep = o.repeat ? o.repeat : REPEAT_DEFAULT;
    for (int k = 0; !rc && k < nrep; k++)
        if (probe_run(&C, &po, &runs[k], err, sizeof err)) {
            fprintf(stderr, "zinfprobe: rank %d: %s\n", C.rank, err);
            rc = 1;
        }
    if (!rc) merge_runs(runs, nrep, &r, spread_line, sizeof spread_line);
    static ProbeGpu g;
    if (!rc && o.host) snprintf(g.why, sizeof g.why, "--host");
    if (!rc && !o.host && probe_gpu_run(&C, &po, &g, err, sizeof err)) {
        fprintf(stderr, "zinfprobe: %s\n", err);
        rc = 1;
    }
    if (!rc && g.on && C.size == 1 && o.ranks > g.ndevices) {
        if (lead)
            fprintf(stderr, "zinfprobe: --ranks %d, but this node has %d GPU%s (give --host for a host target)\n", o.ranks,
                    g.ndevices, g.ndevices == 1 ? "" : "s");
        rc = 1;
    }
    if (!rc) r.ranks = g.ranks = o.ranks;
    if (!rc && lead) {
        probe_report(&r, stdout);
        if (nrep > 1) printf("%s\n", spread_line);
        probe_gpu_report(&g, stdout);
        if (write_out(&r, &g, o.out, err, sizeof err)) {
            fprintf(stderr, "zinfprobe: %s\n", err);
            rc = 1;
        } else {
            printf("wrote %s: %s target probe_%s for %d %s%s (zinfc --target %s; zinfc reads %s without --target)\n",
                   o.out, g.on ? "cuda" : "host", r.host, o.ranks, g.on ? "GPU" : "rank", o.ranks > 1 ? "s" : "", o.out,
                   strcmp(o.out, outbuf) ? "the probe file of ZINF_PROBE or ~/.cache/zinf" : "it");
        }
    }
    fflush(stdout);
    comm_finalize(&C);
    return rc == 100 ? 0 : rc;
}
