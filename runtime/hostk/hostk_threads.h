/* hostk_threads: the threading model of one rank's CPU compute (the host
 * kernels, the GEMMs under them, the CPU Adam).
 *
 * One team of T threads per rank does all of it:
 *  - T is the count the program asked for (hk_threads_ask: zinfrun passes
 *    ZINF_THREADS), else OMP_NUM_THREADS when set (the user's
 *    explicit choice, kept even when it oversubscribes), else the cores this
 *    process may run on (sched_getaffinity) divided by the ranks on this node
 *    (what MPI's shared-memory split counted, given by hk_threads_local_ranks;
 *    else OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, PMI_LOCAL_SIZE,
 *    SLURM_NTASKS_PER_NODE), unless a launcher already bound the process to
 *    fewer cores than the machine has, in which case it is that count.
 *  - OpenBLAS is set to one thread: the kernels split each GEMM into
 *    column (or row) panels whose count depends only on the shape, and run
 *    the panels on the team, so there is one pool of spinning threads, not
 *    two competing for the same cores, and results do not depend on T.
 *  - The executor's queues are threads too; hk_team_enter/leave make the
 *    compute of one rank (a kernel, an Adam step) run one at a time, each
 *    with the whole team, so queue threads never multiply the team.
 *  - Parallel loops run on one pool of T - 1 worker threads plus the
 *    calling thread (hk_parallel), whose waits spin a few microseconds and
 *    then sleep, so that cores shared with other processes or ranks are
 *    not burnt by spinning (what made OpenMP teams 4-5x slower with 2
 *    threads than with 1 on a busy machine). When the workers run none of
 *    the units of a few regions in a row (no core was free for them in
 *    time), the next regions run on the calling thread alone, then the pool
 *    is tried again. hk_threads_adopt() sets the calling thread's OpenMP
 *    default to 1, so that an OpenMP loop left anywhere does not start a
 *    second team of spinning threads.
 * Nothing here prints; hk_threads_describe() writes the one line zinfrun
 * reports at start-up. */
#ifndef ZINF_HOSTK_THREADS_H
#define ZINF_HOSTK_THREADS_H
#include <stddef.h>
#include <stdint.h>

/* Threads of the team (>= 1), decided once per process (or by hk_threads_set). */
int hk_threads(void);
/* The team for one parallel region whose work would take `ns` nanoseconds
 * on one thread: hk_threads(), fewer so that each thread gets at least
 * HK_TEAM_MIN_NS (a fork and join cost microseconds, and far more when the
 * cores are shared), 1 for short work. */
#define HK_TEAM_MIN_NS 50000.0
int hk_team(double ns);
/* The ranks of this job on this node (Comm.local_size), which an
 * executable knows after comm_init: call it before the first kernel (the
 * count is decided once). An srun without --ntasks-per-node sets none of
 * the launcher variables above. */
void hk_threads_local_ranks(int n);
/* The user's count (n >= 1; before OMP_NUM_THREADS) and the words that say
 * where it came from (hk_threads_describe shows them, e.g. "ZINF_THREADS");
 * call it before the first kernel, as hk_threads_local_ranks. */
void hk_threads_ask(int n, const char *why);
/* Overrides the count for the whole process (tests, benchmarks); n <= 0
 * returns to the policy above. */
void hk_threads_set(int n);
/* The host kernels' vector path for the whole process, by name: "scalar",
 * "avx2", "avx512" or "auto" (the best the processor has, the default); for
 * comparison (zinfrun passes ZINF_HK_ISA). 0; -1 for a name not among
 * those, -2 when this processor does not run it (nothing changes). */
int hk_threads_kernels_isa(const char *name);
/* Sets the calling thread's OpenMP default team size to 1 (see above). */
void hk_threads_adopt(void);
/* What was chosen and why, one line without a newline, e.g.
 * "threads: 2 per rank (2 cores / 1 rank on this node); OpenBLAS 1 thread, GEMMs split over the team; kernels avx512".
 * Returns the length snprintf would have written. */
int hk_threads_describe(char *buf, size_t n);

/* Runs fn(ctx, u) for every u in [0, n) on `team` threads (the caller and
 * team - 1 workers of the rank's pool; at most hk_threads()) and returns
 * when all have run. Units are claimed one at a time, so their order over
 * threads varies but each unit's work does not: give each unit a fixed
 * piece of the result. Waits spin a few microseconds, then sleep: a
 * descheduled worker delays nothing it has not claimed. team <= 1, or a
 * call from inside a unit, runs the units in order on the calling thread.
 * Holds the team lock while it runs. */
typedef void (*HkUnitFn)(void *ctx, int64_t unit);
void hk_parallel(int team, int64_t n, HkUnitFn fn, void *ctx);

/* The compute of one rank runs one team at a time (see above). Nested
 * enters on one thread are counted; only the outermost takes the lock. */
void hk_team_enter(void);
void hk_team_leave(void);

#endif
