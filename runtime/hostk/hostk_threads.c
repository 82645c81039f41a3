/* hostk_threads: the rank's compute team (see hostk_threads.h). */
#include "hostk_threads.h"
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "hostk_vec.h"
#include "clock.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int policy_threads = 1, avail_cores = 1, online_cores = 1, local_ranks = 1;
static atomic_int told_local_ranks; /* hk_threads_local_ranks: what MPI said, 0: not told */
static atomic_int asked_threads;    /* hk_threads_ask: the user's count, 0: not asked */
static char asked_why[64];
static char policy_why[160];
static atomic_int override_threads;
static pthread_mutex_t team_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int team_depth;

/* A positive integer at the start of s (OMP_NUM_THREADS may be a list: its first entry), else 0. */
static int env_count(const char *name) {
    const char *s = getenv(name);
    if (!s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > 4096) return 0;
    return (int)v;
}

static void init(void) {
    online_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (online_cores < 1) online_cores = 1;
    avail_cores = online_cores;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) avail_cores = CPU_COUNT(&set);
    static const char *const local_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE",
                                             "SLURM_NTASKS_PER_NODE"};
    const char *local_from = NULL;
    if (atomic_load(&told_local_ranks) > 0) local_ranks = atomic_load(&told_local_ranks), local_from = "MPI";
    for (size_t i = 0; i < sizeof local_vars / sizeof local_vars[0] && !local_from; i++) {
        int v = env_count(local_vars[i]);
        if (v) local_ranks = v, local_from = local_vars[i];
    }
    int v;
    if ((v = atomic_load(&asked_threads)) > 0) {
        policy_threads = v;
        snprintf(policy_why, sizeof policy_why, "%s", asked_why);
    } else if ((v = env_count("OMP_NUM_THREADS"))) {
        policy_threads = v;
        snprintf(policy_why, sizeof policy_why, "OMP_NUM_THREADS");
    } else if (avail_cores < online_cores) {
        /* a launcher bound this rank to its cores: they are this rank's */
        policy_threads = avail_cores;
        snprintf(policy_why, sizeof policy_why, "bound to %d of %d cores", avail_cores, online_cores);
    } else {
        policy_threads = avail_cores / local_ranks;
        if (policy_threads < 1) policy_threads = 1;
        snprintf(policy_why, sizeof policy_why, "%d cores / %d rank%s on this node", avail_cores, local_ranks,
                 local_ranks == 1 ? "" : "s");
    }
    /* One pool: the kernels split GEMMs over their own team. */
    openblas_set_num_threads(1);
}

int hk_threads(void) {
    pthread_once(&once, init);
    int o = atomic_load_explicit(&override_threads, memory_order_relaxed);
    return o > 0 ? o : policy_threads;
}

int hk_team(double ns) {
    int t = hk_threads();
    double fit = ns / HK_TEAM_MIN_NS;
    if (fit < (double)t) t = fit < 1 ? 1 : (int)fit;
    return t;
}

void hk_threads_local_ranks(int n) { atomic_store(&told_local_ranks, n > 0 ? n : 0); }

int hk_threads_kernels_isa(const char *name) {
    HkIsa isa;
    if (hk_isa_parse(name, &isa)) return -1;
    return hk_isa_set(isa) ? -2 : 0;
}

void hk_threads_ask(int n, const char *why) {
    snprintf(asked_why, sizeof asked_why, "%s", why ? why : "asked for");
    atomic_store(&asked_threads, n > 0 ? n : 0);
}

void hk_threads_set(int n) {
    pthread_once(&once, init);
    atomic_store(&override_threads, n > 0 ? n : 0);
}

void hk_threads_adopt(void) {
    (void)hk_threads();
#ifdef _OPENMP
    /* every parallel loop of the host backend runs on the pool: an OpenMP
     * team would be a second set of threads spinning on the same cores */
    if (!omp_in_parallel() && omp_get_max_threads() != 1) omp_set_num_threads(1);
#endif
}

int hk_threads_describe(char *buf, size_t n) {
    int t = hk_threads();
    int o = atomic_load(&override_threads);
    return snprintf(buf, n, "threads: %d per rank (%s); OpenBLAS 1 thread, GEMMs split over the team; kernels %s", t,
                    o > 0 ? "set by the caller" : policy_why, hk_isa_name(hk_isa()));
}

void hk_team_enter(void) {
    if (team_depth++ == 0) pthread_mutex_lock(&team_mu);
}

void hk_team_leave(void) {
    if (--team_depth == 0) pthread_mutex_unlock(&team_mu);
}

/* ---- the pool ----
 * Workers claim units with a CAS on `ticket` (generation << 32 | next unit).
 * The master closes a generation (next = ~0) before it rewrites the job,
 * so a claim that succeeds always belongs to the job it read. Waiting
 * spins for a few microseconds, then sleeps on a condition variable: a
 * thread never burns a shared core for long, and a unit no worker has
 * claimed yet is simply run by the master (no join on a descheduled
 * thread). */
#define CLOSED 0xffffffffu
#define SPIN_S 20e-6

typedef struct Pool {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    int nworkers;              /* started */
    _Atomic uint64_t ticket;   /* generation << 32 | next unit (CLOSED: none) */
    _Atomic int64_t done;      /* units finished in this generation */
    _Atomic int64_t n;         /* units of this generation */
    _Atomic int allowed;       /* workers [0, allowed) take part */
    HkUnitFn fn;
    void *ctx;
    _Atomic int sleepers, master_sleeping;
} Pool;

static Pool pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .work_cv = PTHREAD_COND_INITIALIZER,
                    .done_cv = PTHREAD_COND_INITIALIZER, .ticket = CLOSED};
static _Thread_local int in_unit; /* this thread is running a unit: nested calls run inline */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claims and runs units of generation gen until none is left; returns how many this thread ran. */
static int64_t run_units(uint32_t gen) {
    int64_t ran = 0;
    for (;;) {
        uint64_t c = atomic_load_explicit(&pool.ticket, memory_order_acquire);
        if ((uint32_t)(c >> 32) != gen) return ran;
        uint32_t next = (uint32_t)c;
        if (next == CLOSED || (int64_t)next >= atomic_load_explicit(&pool.n, memory_order_relaxed)) return ran;
        if (!atomic_compare_exchange_weak(&pool.ticket, &c, c + 1)) continue;
        in_unit = 1;
        pool.fn(pool.ctx, (int64_t)next);
        in_unit = 0;
        ran++;
        int64_t d = atomic_fetch_add(&pool.done, 1) + 1;
        if (d == atomic_load(&pool.n) && atomic_load(&pool.master_sleeping)) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done_cv);
            pthread_mutex_unlock(&pool.mu);
        }
    }
}

static void *worker_main(void *arg) {
    int idx = (int)(intptr_t)arg;
    uint32_t seen = 0;
    for (;;) {
        /* wait for a new generation: spin a little, then sleep */
        uint64_t c = atomic_load(&pool.ticket);
        double t0 = 0;
        for (int k = 0; (uint32_t)(c >> 32) == seen; k++) {
            if ((k & 63) == 63) {
                if (t0 == 0) t0 = clock_mono_s();
                else if (clock_mono_s() - t0 > SPIN_S) {
                    pthread_mutex_lock(&pool.mu);
                    atomic_fetch_add(&pool.sleepers, 1);
                    while ((uint32_t)(atomic_load(&pool.ticket) >> 32) == seen) pthread_cond_wait(&pool.work_cv, &pool.mu);
                    atomic_fetch_sub(&pool.sleepers, 1);
                    pthread_mutex_unlock(&pool.mu);
                }
            }
            cpu_relax();
            c = atomic_load(&pool.ticket);
        }
        seen = (uint32_t)(c >> 32);
        if (idx < atomic_load(&pool.allowed)) run_units(seen);
    }
    return NULL;
}

/* Starts workers up to `want` (called with the team lock held). */
static void grow(int want) {
    while (pool.nworkers < want) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &at, worker_main, (void *)(intptr_t)pool.nworkers);
        pthread_attr_destroy(&at);
        if (rc != 0) break; /* fewer workers: the master runs what they would have */
        pool.nworkers++;
    }
}

/* Regions in a row whose workers ran nothing (they got no core in time:
 * the machine's cores are busy with other work), and how many regions then
 * run on the calling thread alone before the pool is tried again. The units
 * are the same either way, so results do not change. */
#define IDLE_STREAK 4
#define IDLE_SKIP 32
static int idle_streak, idle_skip; /* under the team lock */

void hk_parallel(int team, int64_t n, HkUnitFn fn, void *ctx) {
    if (n <= 0) return;
    if (team > hk_threads()) team = hk_threads();
    if (team > n) team = (int)n;
    if (team <= 1 || in_unit || n >= (int64_t)CLOSED) {
        for (int64_t u = 0; u < n; u++) fn(ctx, u);
        return;
    }
    hk_team_enter();
    if (idle_skip > 0) {
        idle_skip--;
        in_unit = 1;
        for (int64_t u = 0; u < n; u++) fn(ctx, u);
        in_unit = 0;
        hk_team_leave();
        return;
    }
    grow(team - 1);
    uint32_t gen = (uint32_t)(atomic_load(&pool.ticket) >> 32) + 1;
    pool.fn = fn;
    pool.ctx = ctx;
    atomic_store(&pool.n, n);
    atomic_store(&pool.done, 0);
    atomic_store(&pool.allowed, team - 1);
    atomic_store(&pool.ticket, (uint64_t)gen << 32); /* publish: next unit 0 */
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_broadcast(&pool.work_cv);
        pthread_mutex_unlock(&pool.mu);
    }
    int64_t mine = run_units(gen);
    if (mine == n) {
        if (++idle_streak >= IDLE_STREAK) idle_streak = 0, idle_skip = IDLE_SKIP;
    } else {
        idle_streak = 0;
    }
    /* wait for the units workers hold: spin a little, then sleep */
    double t0 = clock_mono_s();
    for (int k = 0; atomic_load(&pool.done) < n; k++) {
        if ((k & 63) == 63 && clock_mono_s() - t0 > SPIN_S) {
            pthread_mutex_lock(&pool.mu);
            atomic_store(&pool.master_sleeping, 1);
            while (atomic_load(&pool.done) < n) pthread_cond_wait(&pool.done_cv, &pool.mu);
            atomic_store(&pool.master_sleeping, 0);
            pthread_mutex_unlock(&pool.mu);
            break;
        }
        cpu_relax();
    }
    /* close the generation before the next job is written */
    atomic_store(&pool.ticket, ((uint64_t)gen << 32) | CLOSED);
    hk_team_leave();
}
