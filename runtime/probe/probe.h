/* probe: measures this machine for the cost model and writes what it found
 * as a target (docs/schedule.md, "Probing the machine"; zinfprobe is the
 * program).
 *
 * Every figure is measured the way a plan uses the machine, through the
 * runtime's own engines, on every rank at once (so shared resources are
 * shared as in training):
 *  - NVMe: rtio (the io_uring engine, O_DIRECT, queue depth 32) reads and
 *    writes of 4 KiB to a few MiB, one at a time and 32 in flight (the
 *    nvme queue's pipeline); each size's time alone and the node's time
 *    per transfer with the queues full (nvme { reads; writes }, which the
 *    cost model interpolates between), and for a reader without them
 *    latency and bandwidth fitted per rank, the node's rate = the ranks'
 *    rates summed, the drive's time per request with the queues full =
 *    the pipelined latency over the ranks; and the CPU time (getrusage) a
 *    64 KiB read run alone costs its rank;
 *  - host memory: a triad (a = b + s c) over arrays far larger than caches,
 *    and over arrays that fill half the CPUs' shared cache together (what a
 *    small plan streams at), on the rank's thread team; the node's
 *    bandwidth is the ranks' sum, the best of two calls, before and after
 *    the kernels; and two instructions that only stream memory, each as
 *    the runtime runs it (the CPU Adam, the norm's sum of squares) over
 *    arrays beyond the cache, in the plan's bytes;
 *  - kernels: the host kernels (hostk) by family at sizes from a small
 *    model's to a large one's, each time counted in the plan's FLOPs (the
 *    planner's convention: 2 M N K per GEMM, 2 |q| T per attention, 5 per
 *    output element elsewhere, a backward twice its forward): the target
 *    lists every timed call (kernels { FAMILY = [flops, us, ...] }), and
 *    the cost model interpolates between a family's calls. The peak is the
 *    best GEMM rate and each family's efficiency the median of its rates
 *    over the peak (for targets read without the calls, and the summary).
 *    Every size is timed in five rounds, one after another over all
 *    sizes, and its median round kept: a burst of another process's work
 *    on a shared core moves one round, not the median;
 *  - dispatch: what a running queue spends per instruction (a tiny kernel,
 *    launch, or a tiny copy, copy, with the queue's lock and signal), and
 *    the wake-up of a queue's thread by another thread (wake);
 *  - collectives: comm (MPI) all-reduce, all-gather and reduce-scatter at a
 *    few sizes, fitted together to the ring model: f steps of latency
 *    plus f (R-1)/R bytes / bandwidth (f = 2 for the all-reduce).
 * Errors are values: each function returns 0 or -1 with a message in err;
 * nothing here prints or exits (zinfprobe's main does). */
#ifndef ZINF_PROBE_H
#define ZINF_PROBE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "comm.h"
#include "plan.h"

/* One timed transfer: secs for `bytes` over `steps` latencies. */
typedef struct ProbeSample {
    double steps, bytes, secs;
} ProbeSample;

/* secs = latency * steps + bytes / bandwidth. */
typedef struct ProbeFit {
    double latency;   /* seconds per step (>= 0) */
    double bandwidth; /* bytes per second (> 0) */
} ProbeFit;

/* Least squares fit of n samples (n >= 1), in relative error; where the best fit has a
 * negative latency, the latency is 0 and the bandwidth fitted alone. -1 when
 * the samples fix no positive bandwidth (no bytes, or no time). */
int probe_fit(const ProbeSample *s, int n, ProbeFit *out);
/* The median of n > 0 values (sorts them). */
double probe_median(double *v, int n);

enum { PROBE_MAX_RATES = 32 };
/* A kernel measured at one size. */
typedef struct ProbeRate {
    PlanFamily family;
    char what[48];    /* "linear 256x128x384 fwd" */
    double flops;     /* in the plan's counting */
    double secs;
} ProbeRate;

/* A transfer size timed through rtio: index 0 reads, 1 writes. */
enum { PROBE_NVME_SIZES = 5 };
typedef struct ProbeNvmeSize {
    double bytes;
    double alone[2]; /* seconds for one with nothing in flight (a rank's, the mean over ranks) */
    double drive[2]; /* the node's seconds per transfer with every rank's QRUN_PIPE_MAX in flight */
} ProbeNvmeSize;

typedef struct ProbeOptions {
    const char *nvme_dir; /* NULL: no NVMe figures */
    bool quick;           /* tiny sizes and few repetitions (tests) */
} ProbeOptions;

typedef struct ProbeResult {
    char host[64];        /* the host name, as an identifier */
    int ranks, cores;
    uint64_t cpu_memory;  /* bytes, this node */
    double mem_bandwidth; /* bytes/s, the node (all ranks at once) */
    uint64_t cache_bytes; /* the CPUs' largest cache (sysfs), 0 = unknown */
    double cache_bandwidth; /* bytes/s, the node, arrays within that cache */
    /* bytes/s, the node, arrays beyond the cache, in the plan's counting of
     * an instruction's bytes: the CPU Adam, the norm's sum of squares */
    double adam_bandwidth, read_bandwidth;
    double peak_flops;    /* per rank: the best GEMM rate */
    double eff[PLAN_NFAMILIES];
    double launch, copy;  /* seconds: an instruction's dispatch on a running queue */
    double wake;          /* seconds: a queue's thread woken by another's */
    ProbeRate rates[PROBE_MAX_RATES];
    int nrates;
    bool nvme;            /* measured */
    char nvme_dir[512];
    uint64_t nvme_capacity;
    ProbeFit nvme_read, nvme_write; /* per rank, all ranks at once */
    ProbeFit nvme_pipe_read, nvme_pipe_write; /* the same, 32 in flight per rank: time per transfer */
    double nvme_cpu;      /* CPU seconds a transfer run alone costs its rank */
    ProbeNvmeSize nvme_sizes[PROBE_NVME_SIZES]; /* the sizes timed both ways, smallest first */
    int nnvme_sizes;
    bool net;             /* measured (more than one rank) */
    ProbeFit coll;        /* per ring step, per rank's link */
    double coll_secs[3][4]; /* all-reduce, all-gather, reduce-scatter x sizes */
    double coll_bytes[4];
    int ncoll;
    double seconds;       /* the probe's own run time */
    double steal;         /* the share of the CPUs' time other machines took meanwhile (a VM's steal), -1: unknown */
} ProbeResult;

/* Measures everything; c is the job (a world of one without mpirun). Every
 * rank calls it; the result is the same on every rank. */
int probe_run(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n);
/* Parts of probe_run (each rank, collectively); probe_nvme is in probe_nvme.c. */
int probe_nvme(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n);
int probe_memory(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n);
/* The instructions that only stream memory, each through the function the
 * host runtime runs it with (probe_streams.c). */
int probe_streams(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n);
int probe_kernels(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n);
int probe_dispatch(const ProbeOptions *o, ProbeResult *r, char *err, size_t n);
int probe_collectives(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n);
/* The CPUs' steal and total time so far (clock ticks) from a /proc/stat
 * file; false when it has no "cpu" line with a steal column. */
bool probe_cpu_ticks(const char *proc_stat, double *steal, double *total);
/* Above this share of stolen CPU time the probe's figures are too low and
 * it says so. */
#define PROBE_STEAL_WARN 0.05
/* The size of the largest data cache of the CPU whose sysfs directory is
 * given (e.g. /sys/devices/system/cpu/cpu0); 0 when it says none. */
uint64_t probe_cache_bytes(const char *sysfs_cpu);
/* Peak and efficiencies from r->rates. */
void probe_summarise_rates(ProbeResult *r);

/* The target file for r: `target probe_HOST { backend = "host"; ranks; budget;
 * cpu { ... launch_us; copy_us; wake_us }; efficiency { ... }; kernels { ... }; nvme { ... latency_us };
 * net { bandwidth; latency_us } }` with a comment naming what was measured.
 * Returns the length (as snprintf: buf may be too small). */
int probe_target_text(const ProbeResult *r, char *buf, size_t n);
/* The drive's time per request with every rank's queue full (seconds,
 * the node's): the pipelined fits' latencies, averaged, over the ranks. */
double probe_nvme_request(const ProbeResult *r);
/* The target's nvme line for r ("" when NVMe was not measured); as snprintf.
 * The cuda target (runtime/probe/probe_gpu.h) writes the same. */
int probe_text_nvme(const ProbeResult *r, char *buf, size_t n);
/* The cpu block's measured streaming rates for r ("; adam_bandwidth = ...;
 * read_bandwidth", or "" when not measured); as snprintf.
 * The cuda target (runtime/probe/probe_gpu.h) writes the same. */
int probe_text_streams(const ProbeResult *r, char *buf, size_t n);
/* What was measured, in lines a person reads (zinfprobe prints it). */
void probe_report(const ProbeResult *r, FILE *out);

#endif
