/* fake_cuda: a CUDA driver (libcuda.so.1) that runs everything on the host,
 * so zinfrun's CUDA executor can be tested end to end on a machine without
 * a GPU. Put its directory first in LD_LIBRARY_PATH; runtime/gpu/cudrv.c opens
 * it like the real one. docs/testing-gpu-fake.md says what it models.
 *
 * Device memory is host memory. Every stream has its own worker thread that
 * runs a FIFO of operations (copies, memsets, kernels, host functions, event
 * records, event waits) when it reaches them, not when they are enqueued, so
 * a missing event dependency in the executor shows up as wrong values, not
 * as luck. The NULL (legacy) stream runs synchronously, after the blocking
 * streams' earlier work, as CUDA orders it. Kernels are the plan's real CUDA
 * units compiled for the host emulator of tests/gpu/emu.c (built by
 * fakecuda_prep, found by the cubin's hash under $FAKECUDA_UNITS) and run
 * under one global mutex: the emulator is one instance per process and not
 * thread-safe.
 *
 * Environment: FAKECUDA_DEVICES (1), FAKECUDA_ARCH (sm_90), FAKECUDA_MEM
 * (bytes per device, k/m/g suffixes; 8g), FAKECUDA_UNITS (the emulated
 * units), FAKECUDA_FAIL (fault injection, "entry:n[@rank],..."), FAKECUDA_STUB
 * (cuInit says it is the stub library), FAKECUDA_JITTER_US (each stream op
 * waits a random 0..N us first, to shake out ordering bugs), FAKECUDA_POISON
 * (0: new device memory is not filled with 0xff bytes). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fakecuda_elf.h"

/* cuda.h maps the name to _v2; old binaries (and cudrv.c, first) look up the v1 symbol. */
#undef cuEventElapsedTime
#undef cuDevicePrimaryCtxRelease
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);

/* the emulator (tests/gpu/emu.c, linked into this library) */
int emu_launch(void (*fn)(void **), void **params, const unsigned grid[3], const unsigned block[3], char *err,
               size_t nerr);
void emu_reset(void);

#define EXPORT __attribute__((visibility("default")))

enum { MAXDEV = 16, MAXFAIL = 16 };
enum { MAGIC_STREAM = 0x5354524du, MAGIC_EVENT = 0x45564e54u, MAGIC_MOD = 0x4d4f4455u, MAGIC_FUNC = 0x46554e43u };

/* ---- configuration -------------------------------------------------------- */

typedef struct FailSpec {
    char name[48];
    long nth, count;
    int rank; /* -1: every rank */
} FailSpec;

static struct {
    int ndev, major, minor, stub, poison;
    size_t mem;
    unsigned jitter_us;
    FailSpec fail[MAXFAIL];
    int nfail;
    int rank;
} cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

static long env_long(const char *name, long dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return *end ? dflt : v;
}

static size_t env_bytes(const char *name, size_t dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return dflt;
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024.0; break;
    case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    case 0: break;
    default: return dflt;
    }
    return (size_t)v;
}

/* The MPI rank of this process from the launcher's environment (Open MPI,
 * PMIx, MPICH, Slurm), for rank-qualified fault injection; 0 alone. */
static int env_rank(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *s = getenv(names[i]);
        if (s && *s) return atoi(s);
    }
    return 0;
}

static void cfg_load(void) {
    cfg.ndev = (int)env_long("FAKECUDA_DEVICES", 1);
    if (cfg.ndev < 0) cfg.ndev = 0;
    if (cfg.ndev > MAXDEV) cfg.ndev = MAXDEV;
    cfg.mem = env_bytes("FAKECUDA_MEM", (size_t)8 << 30);
    cfg.major = 9;
    cfg.minor = 0;
    const char *arch = getenv("FAKECUDA_ARCH");
    if (arch && !strncmp(arch, "sm_", 3) && strlen(arch) >= 5) {
        int v = atoi(arch + 3); /* sm_90 -> 90, sm_100 -> 100 */
        if (v >= 10) {
            cfg.major = v / 10;
            cfg.minor = v % 10;
        }
    }
    cfg.stub = env_long("FAKECUDA_STUB", 0) != 0;
    cfg.poison = env_long("FAKECUDA_POISON", 1) != 0;
    long j = env_long("FAKECUDA_JITTER_US", 0);
    cfg.jitter_us = j > 0 ? (unsigned)j : 0;
    cfg.rank = env_rank();
    const char *f = getenv("FAKECUDA_FAIL");
    while (f && *f && cfg.nfail < MAXFAIL) {
        const char *e = strchr(f, ',');
        size_t len = e ? (size_t)(e - f) : strlen(f);
        char item[96];
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), f);
        char *colon = strrchr(item, ':');
        if (colon) {
            FailSpec *s = &cfg.fail[cfg.nfail];
            *colon = 0;
            char *at = strchr(colon + 1, '@');
            s->rank = at ? atoi(at + 1) : -1;
            s->nth = atol(colon + 1);
            snprintf(s->name, sizeof s->name, "%.47s", item);
            if (s->nth > 0) cfg.nfail++;
        } else {
            fprintf(stderr, "fakecuda: FAKECUDA_FAIL item '%s' is not entry:n[@rank]; ignored\n", item);
        }
        f = e ? e + 1 : NULL;
    }
}

static void cfg_get(void) { pthread_once(&cfg_once, cfg_load); }

/* True when this call of `entry` is the one FAKECUDA_FAIL asks to fail.
 * Only entries named there are counted. */
static int injected(const char *entry) {
    cfg_get();
    if (!cfg.nfail) return 0;
    int hit = 0;
    pthread_mutex_lock(&fail_mu);
    for (int i = 0; i < cfg.nfail; i++) {
        FailSpec *s = &cfg.fail[i];
        if (strcmp(s->name, entry) || (s->rank >= 0 && s->rank != cfg.rank)) continue;
        if (++s->count == s->nth) hit = 1;
    }
    pthread_mutex_unlock(&fail_mu);
    if (hit) fprintf(stderr, "fakecuda: FAKECUDA_FAIL: failing this call of %s\n", entry);
    return hit;
}

#define INJECT(entry, code)                \
    do {                                   \
        if (injected(entry)) return (code); \
    } while (0)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- objects ---------------------------------------------------------------- */

struct Ctx;
struct Module;

typedef struct Func {
    uint32_t magic;
    struct Module *mod;
    void (*tramp)(void **);
    const unsigned *psize; /* per parameter, 0-terminated (emu_wrap.c) */
    int nparams;
    size_t argbytes;       /* the values, each at an 8-aligned offset */
    char name[128];
    struct Func *next;
} Func;

typedef struct Module {
    uint32_t magic;
    struct Ctx *ctx;
    void *dl;
    atomic_int refs;       /* the user's, plus one per launch not yet run */
    char path[512];
    Func *funcs;
    struct Module *prev, *next;
} Module;

typedef struct Event {
    uint32_t magic;
    struct Ctx *ctx;
    unsigned flags;
    atomic_int refs;       /* the user's, plus one per record not yet run */
    /* guarded by ev_mu: the last record, as of now */
    struct Stream *s;      /* NULL: never recorded (complete) */
    uint64_t seq;
    int have_t;
    double t;
    struct Event *prev, *next;
} Event;

enum { OP_COPY, OP_SET, OP_KERNEL, OP_HOST, OP_RECORD, OP_WAIT };

typedef struct Op {
    struct Op *next;
    int kind;
    uint64_t seq;
    union {
        struct { void *dst; const void *src; size_t n; } copy;
        struct { void *dst; unsigned char v; size_t n; } set;
        struct { Func *fn; void **params; unsigned grid[3], block[3]; } kern;
        struct { CUhostFn fn; void *ud; } host;
        struct { Event *ev; } rec;
        struct { struct Stream *s; uint64_t seq; } wait;
    } u;
    /* OP_KERNEL: void *params[nparams], then the values */
} Op;

typedef struct Stream {
    uint32_t magic;
    struct Ctx *ctx;
    int is_null, nonblocking, dead, stop, has_thread;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    Op *head, *tail;
    uint64_t enq, completed; /* ops enqueued / finished, by sequence number */
    unsigned rng;
    struct Stream *next;     /* the context's streams; kept until it is reset */
} Stream;

typedef struct Alloc {
    uintptr_t base;
    size_t size;             /* what was asked */
    size_t charged;          /* device bytes charged (rounded to 256), 0 for host memory */
    int host;
} Alloc;

typedef struct Ctx {
    int dev, refs, active;
    atomic_int sticky;       /* CUresult of an asynchronous failure; every later sync reports it */
    pthread_mutex_t mu;      /* streams, modules, events lists; allocations */
    Stream null;
    Stream *streams;
    Module *modules;
    Event *events;
    Alloc *allocs;           /* sorted by base */
    size_t nallocs, cap;
    size_t used;
} Ctx;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;   /* g_ctx, g_init */
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;  /* every event's last-record fields */
static pthread_mutex_t emu_mu = PTHREAD_MUTEX_INITIALIZER; /* the emulator */
static atomic_int g_init;
static Ctx *g_ctx[MAXDEV];
static __thread Ctx *t_cur;
static void *g_self; /* this library, promoted to RTLD_GLOBAL so the units resolve emu_* here */
static atomic_long g_kernels;
static atomic_int g_quit; /* the process is exiting: streams drop what is left */

static CUresult ctx_current(Ctx **out) {
    if (!atomic_load(&g_init)) return CUDA_ERROR_NOT_INITIALIZED;
    Ctx *c = t_cur;
    if (!c || !c->active) return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

#define CUR(c)                                      \
    Ctx *c = NULL;                                  \
    do {                                            \
        CUresult rc_ = ctx_current(&c);             \
        if (rc_ != CUDA_SUCCESS) return rc_;        \
    } while (0)

/* ---- memory table ---------------------------------------------------------- */

/* Index of the allocation containing [p, p + n), or -1. ctx->mu held. */
static long alloc_find(const Ctx *c, uintptr_t p, size_t n) {
    size_t lo = 0, hi = c->nallocs;
    while (lo < hi) { /* the last allocation with base <= p */
        size_t mid = (lo + hi) / 2;
        if (c->allocs[mid].base <= p) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    const Alloc *a = &c->allocs[lo - 1];
    if (p - a->base > a->size || n > a->size - (p - a->base)) return -1;
    return (long)(lo - 1);
}

static int alloc_add(Ctx *c, Alloc a) {
    if (c->nallocs == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 64;
        Alloc *na = realloc(c->allocs, nc * sizeof *na);
        if (!na) return -1;
        c->allocs = na;
        c->cap = nc;
    }
    size_t i = c->nallocs;
    while (i > 0 && c->allocs[i - 1].base > a.base) i--;
    memmove(&c->allocs[i + 1], &c->allocs[i], (c->nallocs - i) * sizeof *c->allocs);
    c->allocs[i] = a;
    c->nallocs++;
    return 0;
}

/* kind of a pointer for the copy checks */
enum { MEM_BAD, MEM_DEV, MEM_PINNED, MEM_PAGEABLE };

static int mem_kind(Ctx *c, const void *p, size_t n, int device_side) {
    pthread_mutex_lock(&c->mu);
    long i = alloc_find(c, (uintptr_t)p, n);
    int k = i < 0 ? (device_side ? MEM_BAD : MEM_PAGEABLE) : c->allocs[i].host ? MEM_PINNED : MEM_DEV;
    pthread_mutex_unlock(&c->mu);
    return k;
}

/* For the fake cuBLASLt (fake_cublaslt.c), which checks its operands as the
 * driver checks copies: 1 when [p, p + n) lies inside one device or pinned
 * allocation of the calling thread's context, 0 when not, -1 without a
 * current context. Not a CUDA entry point. */
EXPORT int fakecuda_mem_inside(const void *p, size_t n) {
    Ctx *c = NULL;
    if (ctx_current(&c) != CUDA_SUCCESS) return -1;
    return mem_kind(c, p, n, 1) != MEM_BAD;
}

/* ---- streams ------------------------------------------------------------------ */

static void module_unref(Module *m);
static void event_unref(Event *e);

static void op_free(Op *op) {
    if (op->kind == OP_KERNEL) module_unref(op->u.kern.fn->mod);
    if (op->kind == OP_RECORD) event_unref(op->u.rec.ev);
    free(op);
}

static uint64_t stream_enq(Stream *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t v = s->enq;
    pthread_mutex_unlock(&s->mu);
    return v;
}

static void stream_wait_seq(Stream *s, uint64_t seq) {
    pthread_mutex_lock(&s->mu);
    while (s->completed < seq) pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void run_op(Stream *s, Op *op) {
    Ctx *c = s->ctx;
    int failed = atomic_load(&c->sticky) != CUDA_SUCCESS;
    switch (op->kind) {
    case OP_COPY:
        /* after a device fault CUDA runs nothing more; skipping also keeps a
         * wrong address from turning into a host crash */
        if (!failed) memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.n);
        break;
    case OP_SET:
        if (!failed) memset(op->u.set.dst, op->u.set.v, op->u.set.n);
        break;
    case OP_KERNEL: {
        if (failed) break;
        Func *f = op->u.kern.fn;
        if (injected("kernel")) {
            fprintf(stderr, "fakecuda: kernel %s: injected fault (FAKECUDA_FAIL=kernel:n)\n", f->name);
            atomic_store(&c->sticky, CUDA_ERROR_LAUNCH_FAILED);
            break;
        }
        char err[256] = "";
        pthread_mutex_lock(&emu_mu);
        int rc = emu_launch(f->tramp, op->u.kern.params, op->u.kern.grid, op->u.kern.block, err, sizeof err);
        pthread_mutex_unlock(&emu_mu);
        atomic_fetch_add(&g_kernels, 1);
        if (rc != 0) {
            fprintf(stderr, "fakecuda: kernel %s grid (%u,%u,%u) block (%u,%u,%u) failed: %s\n", f->name,
                    op->u.kern.grid[0], op->u.kern.grid[1], op->u.kern.grid[2], op->u.kern.block[0],
                    op->u.kern.block[1], op->u.kern.block[2], err);
            atomic_store(&c->sticky, CUDA_ERROR_LAUNCH_FAILED);
        }
        break;
    }
    case OP_HOST:
        op->u.host.fn(op->u.host.ud);
        break;
    case OP_RECORD: {
        Event *e = op->u.rec.ev;
        pthread_mutex_lock(&ev_mu);
        if (e->s == s && e->seq == op->seq) { /* still the event's last record */
            e->t = now_ms();
            e->have_t = 1;
        }
        pthread_mutex_unlock(&ev_mu);
        break;
    }
    case OP_WAIT:
        stream_wait_seq(op->u.wait.s, op->u.wait.seq);
        break;
    }
}

static void op_done(Stream *s, Op *op) {
    pthread_mutex_lock(&s->mu);
    s->completed = op->seq;
    pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->mu);
    op_free(op);
}

static void *stream_main(void *arg) {
    Stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        Op *op = s->head;
        if (!op) { /* stopped, and nothing left */
            pthread_mutex_unlock(&s->mu);
            break;
        }
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        if (cfg.jitter_us) usleep((useconds_t)(rand_r(&s->rng) % (cfg.jitter_us + 1)));
        if (!atomic_load(&g_quit) || op->kind == OP_RECORD) run_op(s, op);
        op_done(s, op);
    }
    return NULL;
}

/* Waits until every stream of c that the legacy stream orders after (all
 * blocking ones, or all when all is set) has finished what was enqueued
 * before this call. */
static void ctx_drain(Ctx *c, int all) {
    enum { MAXS = 256 };
    Stream *ss[MAXS];
    uint64_t seqs[MAXS];
    for (;;) { /* in rounds of MAXS streams, without holding ctx->mu while waiting */
        int n = 0, more = 0;
        pthread_mutex_lock(&c->mu);
        for (Stream *s = c->streams; s; s = s->next) {
            if (s->nonblocking && !all) continue;
            pthread_mutex_lock(&s->mu);
            int busy = s->completed < s->enq;
            if (busy && n < MAXS) {
                ss[n] = s;
                seqs[n++] = s->enq;
            } else if (busy) {
                more = 1;
            }
            pthread_mutex_unlock(&s->mu);
        }
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < n; i++) stream_wait_seq(ss[i], seqs[i]);
        if (!more) return;
    }
}

/* Enqueues op on s (the NULL stream: runs it here, now, after the blocking
 * streams' earlier work). ev, for OP_RECORD, becomes the event's last record
 * under ev_mu so the worker sees its fields set. */
static void enqueue(Stream *s, Op *op) {
    if (s->is_null) {
        ctx_drain(s->ctx, 0);
        pthread_mutex_lock(&s->mu);
        op->seq = ++s->enq;
        pthread_mutex_unlock(&s->mu);
        if (op->kind == OP_RECORD) {
            pthread_mutex_lock(&ev_mu);
            op->u.rec.ev->s = s;
            op->u.rec.ev->seq = op->seq;
            op->u.rec.ev->have_t = 0;
            pthread_mutex_unlock(&ev_mu);
        }
        run_op(s, op);
        op_done(s, op);
        return;
    }
    op->next = NULL;
    /* once queued, the worker may run and free op: read nothing of it after */
    Event *ev = op->kind == OP_RECORD ? op->u.rec.ev : NULL;
    if (ev) pthread_mutex_lock(&ev_mu);
    pthread_mutex_lock(&s->mu);
    uint64_t seq = op->seq = ++s->enq;
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (ev) { /* the worker's record waits for ev_mu, so it sees these */
        ev->s = s;
        ev->seq = seq;
        ev->have_t = 0;
        pthread_mutex_unlock(&ev_mu);
    }
}

static void stream_init(Stream *s, Ctx *c, int is_null, int nonblocking) {
    memset(s, 0, sizeof *s);
    s->magic = MAGIC_STREAM;
    s->ctx = c;
    s->is_null = is_null;
    s->nonblocking = nonblocking;
    s->rng = (unsigned)(uintptr_t)s ^ (unsigned)getpid();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
}

/* The stream a handle names in context c, or NULL (destroyed, foreign, garbage). */
static Stream *stream_of(Ctx *c, CUstream h) {
    if (!h || h == CU_STREAM_LEGACY) return &c->null;
    if (h == CU_STREAM_PER_THREAD) return &c->null; /* per-thread default: synchronous here as well */
    Stream *s = (Stream *)h;
    pthread_mutex_lock(&c->mu);
    Stream *f = NULL;
    for (Stream *x = c->streams; x; x = x->next)
        if (x == s) f = x;
    pthread_mutex_unlock(&c->mu);
    if (!f || f->magic != MAGIC_STREAM || f->dead) return NULL;
    return f;
}

#define STREAM(s, c, h)                                 \
    Stream *s = stream_of((c), (h));                    \
    do {                                                \
        if (!s) return CUDA_ERROR_INVALID_HANDLE;       \
    } while (0)

static Op *op_new(int kind, size_t extra) {
    Op *op = calloc(1, sizeof *op + extra);
    if (op) op->kind = kind;
    return op;
}

/* ---- contexts --------------------------------------------------------------------- */

static void module_free(Module *m);

/* Stops every stream (their queues run out first) and frees everything the
 * context owns. A stream that does not stop (an operation that never
 * returns: a hung host function) is left running, with what it may touch. */
static void ctx_reset(Ctx *c, int wait_s) {
    int stuck = 0;
    for (Stream *s = c->streams; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
    }
    for (Stream *s = c->streams; s; s = s->next) {
        if (!s->has_thread) continue;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += wait_s;
        if (pthread_timedjoin_np(s->th, NULL, &ts) != 0) {
            fprintf(stderr, "fakecuda: a stream of device %d did not finish in %d s (an operation that never returns?); "
                            "its resources are left allocated\n", c->dev, wait_s);
            pthread_detach(s->th);
            stuck = 1;
        }
        s->has_thread = 0;
    }
    if (stuck) {
        c->streams = NULL; /* leaked on purpose: a running thread may still use it all */
        c->modules = NULL;
        c->events = NULL;
        c->allocs = NULL;
        c->nallocs = c->cap = c->used = 0;
        return;
    }
    while (c->streams) {
        Stream *s = c->streams;
        c->streams = s->next;
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->done);
        s->magic = 0;
        free(s);
    }
    while (c->modules) {
        Module *m = c->modules;
        c->modules = m->next;
        module_free(m);
    }
    while (c->events) {
        Event *e = c->events;
        c->events = e->next;
        e->magic = 0;
        free(e);
    }
    for (size_t i = 0; i < c->nallocs; i++) free((void *)c->allocs[i].base);
    free(c->allocs);
    c->allocs = NULL;
    c->nallocs = c->cap = c->used = 0;
    atomic_store(&c->sticky, CUDA_SUCCESS);
    pthread_mutex_destroy(&c->null.mu);
    pthread_cond_destroy(&c->null.work);
    pthread_cond_destroy(&c->null.done);
}

/* At exit (or the last dlclose): what is still queued is dropped, as when a
 * process with a CUDA context exits; threads are joined, memory freed. */
__attribute__((destructor)) static void fake_fini(void) {
    atomic_store(&g_quit, 1);
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAXDEV; i++) {
        Ctx *c = g_ctx[i];
        if (!c) continue;
        if (c->active) ctx_reset(c, 2);
        pthread_mutex_destroy(&c->mu);
        free(c);
        g_ctx[i] = NULL;
    }
    pthread_mutex_unlock(&g_mu);
    emu_reset();
}

/* ---- errors --------------------------------------------------------------------- */

static const struct {
    CUresult rc;
    const char *name, *text;
} errs[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++)
        if (errs[i].rc == error) {
            *pStr = errs[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++)
        if (errs[i].rc == error) {
            *pStr = errs[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- initialisation and devices ------------------------------------------------------ */

EXPORT CUresult cuInit(unsigned int Flags) {
    cfg_get();
    INJECT("cuInit", CUDA_ERROR_UNKNOWN);
    if (cfg.stub) return CUDA_ERROR_STUB_LIBRARY;
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&g_init, 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    if (!atomic_load(&g_init)) return CUDA_ERROR_NOT_INITIALIZED;
    INJECT("cuDeviceGetCount", CUDA_ERROR_UNKNOWN);
    *count = cfg.ndev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!atomic_load(&g_init)) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= cfg.ndev) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

#define DEVICE(dev)                                                    \
    do {                                                               \
        if (!atomic_load(&g_init)) return CUDA_ERROR_NOT_INITIALIZED;  \
        if ((dev) < 0 || (dev) >= cfg.ndev) return CUDA_ERROR_INVALID_DEVICE; \
    } while (0)

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    DEVICE(dev);
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "zinf fake GPU (host emulation)");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    DEVICE(dev);
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = cfg.mem;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    DEVICE(dev);
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x10 + dev);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    DEVICE(dev);
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if ((int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    int v = 0; /* attributes not modelled read as 0 */
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = cfg.major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = cfg.minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 50331648; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 2; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = 0x10 + dev; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    default: break;
    }
    *pi = v;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    DEVICE(dev);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    INJECT("cuDevicePrimaryCtxRetain", CUDA_ERROR_UNKNOWN);
    pthread_mutex_lock(&g_mu);
    Ctx *c = g_ctx[dev];
    if (!c) { /* kept until the library goes: a thread may still name it as current */
        c = calloc(1, sizeof *c);
        if (!c) {
            pthread_mutex_unlock(&g_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        c->dev = dev;
        pthread_mutex_init(&c->mu, NULL);
        g_ctx[dev] = c;
    }
    if (!c->active) {
        stream_init(&c->null, c, 1, 0);
        atomic_store(&c->sticky, CUDA_SUCCESS);
        c->active = 1;
    }
    c->refs++;
    pthread_mutex_unlock(&g_mu);
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    DEVICE(dev);
    pthread_mutex_lock(&g_mu);
    Ctx *c = g_ctx[dev];
    if (!c || !c->active || c->refs <= 0) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->refs == 0) { /* the last user: the device is reset, as CUDA does */
        ctx_reset(c, 10);
        c->active = 0;
        int any = 0;
        for (int i = 0; i < MAXDEV; i++) any |= g_ctx[i] && g_ctx[i]->active;
        if (!any) {
            pthread_mutex_lock(&emu_mu);
            emu_reset();
            pthread_mutex_unlock(&emu_mu);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (!atomic_load(&g_init)) return CUDA_ERROR_NOT_INITIALIZED;
    Ctx *c = (Ctx *)ctx;
    if (c) {
        int ok = 0;
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < MAXDEV; i++) ok |= g_ctx[i] == c && c->active;
        pthread_mutex_unlock(&g_mu);
        if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
    }
    t_cur = c;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
    if (!atomic_load(&g_init)) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = t_cur && t_cur->active ? (CUcontext)t_cur : NULL;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
    CUR(c);
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = c->dev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
    CUR(c);
    INJECT("cuCtxSynchronize", CUDA_ERROR_UNKNOWN);
    ctx_drain(c, 1);
    return (CUresult)atomic_load(&c->sticky);
}

/* ---- memory ------------------------------------------------------------------------- */

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    CUR(c);
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&c->mu);
    *total = cfg.mem;
    *free_bytes = cfg.mem - c->used;
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult mem_alloc(Ctx *c, void **out, size_t bytes, int host) {
    size_t rounded = (bytes + 255) & ~(size_t)255;
    if (rounded < bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    if (!host && rounded > cfg.mem - c->used) {
        pthread_mutex_unlock(&c->mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!host) c->used += rounded; /* charged now, so concurrent allocations see it */
    pthread_mutex_unlock(&c->mu);
    void *p = aligned_alloc(256, rounded);
    if (p && !host && cfg.poison && rounded <= ((size_t)256 << 20))
        memset(p, 0xff, rounded); /* NaN in every float format, -1 in ints: reading unwritten memory shows */
    pthread_mutex_lock(&c->mu);
    if (!p || alloc_add(c, (Alloc){(uintptr_t)p, bytes, host ? 0 : rounded, host}) != 0) {
        if (!host) c->used -= rounded;
        pthread_mutex_unlock(&c->mu);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&c->mu);
    *out = p;
    return CUDA_SUCCESS;
}

static CUresult mem_free(Ctx *c, uintptr_t p, int host) {
    ctx_drain(c, 1); /* CUDA's free waits for the device: work in flight may still use it */
    pthread_mutex_lock(&c->mu);
    long i = alloc_find(c, p, 0);
    if (i < 0 || c->allocs[i].base != p || c->allocs[i].host != host) {
        pthread_mutex_unlock(&c->mu);
        fprintf(stderr, "fakecuda: %s(%p): not an allocation of this context\n", host ? "cuMemFreeHost" : "cuMemFree_v2",
                (void *)p);
        return CUDA_ERROR_INVALID_VALUE;
    }
    c->used -= c->allocs[i].charged;
    memmove(&c->allocs[i], &c->allocs[i + 1], (c->nallocs - (size_t)i - 1) * sizeof *c->allocs);
    c->nallocs--;
    pthread_mutex_unlock(&c->mu);
    free((void *)p);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    CUR(c);
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    INJECT("cuMemAlloc_v2", CUDA_ERROR_OUT_OF_MEMORY);
    void *p;
    CUresult rc = mem_alloc(c, &p, bytesize, 0);
    if (rc == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
    return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    CUR(c);
    INJECT("cuMemFree_v2", CUDA_ERROR_UNKNOWN);
    if (!dptr) return CUDA_SUCCESS;
    return mem_free(c, (uintptr_t)dptr, 0);
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    (void)Flags; /* portable, mapped, write-combined: all host memory here */
    CUR(c);
    if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    INJECT("cuMemHostAlloc", CUDA_ERROR_OUT_OF_MEMORY);
    return mem_alloc(c, pp, bytesize, 1);
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

EXPORT CUresult cuMemFreeHost(void *p) {
    CUR(c);
    INJECT("cuMemFreeHost", CUDA_ERROR_UNKNOWN);
    if (!p) return CUDA_SUCCESS;
    return mem_free(c, (uintptr_t)p, 1);
}

/* ---- copies and memsets ------------------------------------------------------------------ */

static CUresult bad_range(const char *call, const char *which, const void *p, size_t n) {
    fprintf(stderr, "fakecuda: %s: %s %p + %zu bytes is not inside one allocation of this context\n", call, which, p, n);
    return CUDA_ERROR_INVALID_VALUE;
}

/* A copy: device-side pointers must lie inside one allocation; a pageable
 * host side makes it synchronous, as CUDA does (HtoD: after the stream's
 * earlier work, the source is read at the call; DtoH: returns when done),
 * so the executor may reuse a pageable buffer at once there and nowhere else. */
static CUresult copy(const char *call, Ctx *c, Stream *s, void *dst, int dst_dev, const void *src, int src_dev,
                     size_t n) {
    int sticky = atomic_load(&c->sticky);
    if (sticky != CUDA_SUCCESS) return (CUresult)sticky;
    if (n == 0) return CUDA_SUCCESS;
    int kd = mem_kind(c, dst, n, dst_dev), ks = mem_kind(c, src, n, src_dev);
    if (kd == MEM_BAD) return bad_range(call, "destination", dst, n);
    if (ks == MEM_BAD) return bad_range(call, "source", src, n);
    if ((!dst_dev && kd == MEM_PAGEABLE) || (!src_dev && ks == MEM_PAGEABLE)) {
        if (!s->is_null) stream_wait_seq(s, stream_enq(s)); /* the stream's earlier work first */
        else ctx_drain(c, 0);
        memmove(dst, src, n);
        return CUDA_SUCCESS;
    }
    Op *op = op_new(OP_COPY, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.n = n;
    enqueue(s, op);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream) {
    CUR(c);
    STREAM(s, c, hStream);
    INJECT("cuMemcpyHtoDAsync_v2", CUDA_ERROR_UNKNOWN);
    return copy("cuMemcpyHtoDAsync_v2", c, s, (void *)(uintptr_t)dstDevice, 1, srcHost, 0, ByteCount);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
    CUR(c);
    STREAM(s, c, hStream);
    INJECT("cuMemcpyDtoHAsync_v2", CUDA_ERROR_UNKNOWN);
    return copy("cuMemcpyDtoHAsync_v2", c, s, dstHost, 0, (const void *)(uintptr_t)srcDevice, 1, ByteCount);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
    CUR(c);
    STREAM(s, c, hStream);
    INJECT("cuMemcpyDtoDAsync_v2", CUDA_ERROR_UNKNOWN);
    return copy("cuMemcpyDtoDAsync_v2", c, s, (void *)(uintptr_t)dstDevice, 1, (const void *)(uintptr_t)srcDevice, 1,
                ByteCount);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    CUR(c);
    INJECT("cuMemcpyHtoD_v2", CUDA_ERROR_UNKNOWN);
    return copy("cuMemcpyHtoD_v2", c, &c->null, (void *)(uintptr_t)dstDevice, 1, srcHost, 0, ByteCount);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    CUR(c);
    INJECT("cuMemcpyDtoH_v2", CUDA_ERROR_UNKNOWN);
    return copy("cuMemcpyDtoH_v2", c, &c->null, dstHost, 0, (const void *)(uintptr_t)srcDevice, 1, ByteCount);
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
    CUR(c);
    INJECT("cuMemcpyDtoD_v2", CUDA_ERROR_UNKNOWN);
    return copy("cuMemcpyDtoD_v2", c, &c->null, (void *)(uintptr_t)dstDevice, 1, (const void *)(uintptr_t)srcDevice,
                1, ByteCount);
}

static CUresult memset_on(const char *call, Ctx *c, Stream *s, CUdeviceptr dst, unsigned char v, size_t n) {
    int sticky = atomic_load(&c->sticky);
    if (sticky != CUDA_SUCCESS) return (CUresult)sticky;
    if (n == 0) return CUDA_SUCCESS;
    if (mem_kind(c, (void *)(uintptr_t)dst, n, 1) == MEM_BAD) return bad_range(call, "destination", (void *)(uintptr_t)dst, n);
    Op *op = op_new(OP_SET, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = (void *)(uintptr_t)dst;
    op->u.set.v = v;
    op->u.set.n = n;
    enqueue(s, op);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    CUR(c);
    STREAM(s, c, hStream);
    INJECT("cuMemsetD8Async", CUDA_ERROR_UNKNOWN);
    return memset_on("cuMemsetD8Async", c, s, dstDevice, uc, N);
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
    CUR(c);
    INJECT("cuMemsetD8_v2", CUDA_ERROR_UNKNOWN);
    return memset_on("cuMemsetD8_v2", c, &c->null, dstDevice, uc, N);
}

/* ---- streams ------------------------------------------------------------------------------ */

EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    CUR(c);
    if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    INJECT("cuStreamCreate", CUDA_ERROR_UNKNOWN);
    Stream *s = malloc(sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    stream_init(s, c, 0, (Flags & CU_STREAM_NON_BLOCKING) != 0);
    if (pthread_create(&s->th, NULL, stream_main, s) != 0) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->has_thread = 1;
    pthread_mutex_lock(&c->mu);
    s->next = c->streams;
    c->streams = s;
    pthread_mutex_unlock(&c->mu);
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    (void)priority; /* one priority here */
    return cuStreamCreate(phStream, flags);
}

/* As CUDA: returns at once; the stream's work still runs, then its thread ends. */
EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
    CUR(c);
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
    STREAM(s, c, hStream);
    INJECT("cuStreamDestroy_v2", CUDA_ERROR_UNKNOWN);
    pthread_mutex_lock(&s->mu);
    s->dead = 1;
    s->stop = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

static CUresult sync_stream(Stream *s) {
    if (s->is_null) ctx_drain(s->ctx, 0);
    else stream_wait_seq(s, stream_enq(s));
    return (CUresult)atomic_load(&s->ctx->sticky);
}

EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    CUR(c);
    STREAM(s, c, hStream);
    INJECT("cuStreamSynchronize", CUDA_ERROR_UNKNOWN);
    return sync_stream(s);
}

EXPORT CUresult cuStreamQuery(CUstream hStream) {
    CUR(c);
    STREAM(s, c, hStream);
    INJECT("cuStreamQuery", CUDA_ERROR_UNKNOWN);
    int sticky = atomic_load(&c->sticky);
    if (sticky != CUDA_SUCCESS) return (CUresult)sticky;
    if (s->is_null) {
        int busy = 0;
        pthread_mutex_lock(&c->mu);
        for (Stream *x = c->streams; x; x = x->next) {
            if (x->nonblocking) continue;
            pthread_mutex_lock(&x->mu);
            busy |= x->completed < x->enq;
            pthread_mutex_unlock(&x->mu);
        }
        pthread_mutex_unlock(&c->mu);
        return busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    }
    pthread_mutex_lock(&s->mu);
    int busy = s->completed < s->enq;
    pthread_mutex_unlock(&s->mu);
    return busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

/* ---- events --------------------------------------------------------------------------------- */

static Event *event_of(Ctx *c, CUevent h) {
    Event *e = (Event *)h, *f = NULL;
    if (!e) return NULL;
    pthread_mutex_lock(&c->mu);
    for (Event *x = c->events; x; x = x->next)
        if (x == e) f = x;
    pthread_mutex_unlock(&c->mu);
    return f && f->magic == MAGIC_EVENT ? f : NULL;
}

#define EVENT(e, c, h)                                 \
    Event *e = event_of((c), (h));                     \
    do {                                               \
        if (!e) return CUDA_ERROR_INVALID_HANDLE;      \
    } while (0)

static void event_unref(Event *e) {
    if (atomic_fetch_sub(&e->refs, 1) != 1) return;
    Ctx *c = e->ctx;
    pthread_mutex_lock(&c->mu);
    if (e->prev) e->prev->next = e->next;
    else c->events = e->next;
    if (e->next) e->next->prev = e->prev;
    pthread_mutex_unlock(&c->mu);
    e->magic = 0;
    free(e);
}

EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    CUR(c);
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    INJECT("cuEventCreate", CUDA_ERROR_UNKNOWN);
    Event *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = MAGIC_EVENT;
    e->ctx = c;
    e->flags = Flags;
    atomic_init(&e->refs, 1);
    pthread_mutex_lock(&c->mu);
    e->next = c->events;
    if (c->events) c->events->prev = e;
    c->events = e;
    pthread_mutex_unlock(&c->mu);
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

/* As CUDA: a record still pending completes first, then the event goes. */
EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
    CUR(c);
    EVENT(e, c, hEvent);
    INJECT("cuEventDestroy_v2", CUDA_ERROR_UNKNOWN);
    e->magic = MAGIC_EVENT ^ 1; /* no longer a handle: later use is CUDA_ERROR_INVALID_HANDLE */
    event_unref(e);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
    CUR(c);
    EVENT(e, c, hEvent);
    STREAM(s, c, hStream);
    INJECT("cuEventRecord", CUDA_ERROR_UNKNOWN);
    int sticky = atomic_load(&c->sticky);
    if (sticky != CUDA_SUCCESS) return (CUresult)sticky;
    Op *op = op_new(OP_RECORD, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&e->refs, 1);
    op->u.rec.ev = e;
    enqueue(s, op);
    return CUDA_SUCCESS;
}

/* The event's last record as of now: (stream, position); NULL stream when never recorded. */
static Stream *event_pos(Event *e, uint64_t *seq) {
    pthread_mutex_lock(&ev_mu);
    Stream *s = e->s;
    *seq = e->seq;
    pthread_mutex_unlock(&ev_mu);
    return s;
}

static int event_done(Event *e) {
    uint64_t seq;
    Stream *s = event_pos(e, &seq);
    if (!s) return 1; /* never recorded: complete, as CUDA */
    pthread_mutex_lock(&s->mu);
    int done = s->completed >= seq;
    pthread_mutex_unlock(&s->mu);
    return done;
}

EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    CUR(c);
    STREAM(s, c, hStream);
    EVENT(e, c, hEvent);
    if (Flags != 0 && Flags != CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    INJECT("cuStreamWaitEvent", CUDA_ERROR_UNKNOWN);
    uint64_t seq;
    Stream *es = event_pos(e, &seq);
    if (!es) return CUDA_SUCCESS;
    Op *op = op_new(OP_WAIT, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.wait.s = es;
    op->u.wait.seq = seq;
    enqueue(s, op); /* on the NULL stream: waits here */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
    CUR(c);
    EVENT(e, c, hEvent);
    INJECT("cuEventSynchronize", CUDA_ERROR_UNKNOWN);
    uint64_t seq;
    Stream *s = event_pos(e, &seq);
    if (s) stream_wait_seq(s, seq);
    return (CUresult)atomic_load(&c->sticky);
}

EXPORT CUresult cuEventQuery(CUevent hEvent) {
    CUR(c);
    EVENT(e, c, hEvent);
    INJECT("cuEventQuery", CUDA_ERROR_UNKNOWN);
    int sticky = atomic_load(&c->sticky);
    if (sticky != CUDA_SUCCESS) return (CUresult)sticky;
    return event_done(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    CUR(c);
    if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
    EVENT(a, c, hStart);
    EVENT(b, c, hEnd);
    INJECT("cuEventElapsedTime", CUDA_ERROR_UNKNOWN);
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&ev_mu);
    int recorded = a->s && b->s;
    pthread_mutex_unlock(&ev_mu);
    if (!recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (!event_done(a) || !event_done(b)) return CUDA_ERROR_NOT_READY;
    pthread_mutex_lock(&ev_mu);
    double ta = a->t, tb = b->t;
    int ok = a->have_t && b->have_t;
    pthread_mutex_unlock(&ev_mu);
    if (!ok) return CUDA_ERROR_INVALID_HANDLE;
    *pMilliseconds = (float)(tb - ta);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

/* ---- host functions ------------------------------------------------------------------------- */

EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
    CUR(c);
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    STREAM(s, c, hStream);
    INJECT("cuLaunchHostFunc", CUDA_ERROR_UNKNOWN);
    int sticky = atomic_load(&c->sticky);
    if (sticky != CUDA_SUCCESS) return (CUresult)sticky;
    Op *op = op_new(OP_HOST, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.host.fn = fn;
    op->u.host.ud = userData;
    enqueue(s, op);
    return CUDA_SUCCESS;
}

/* ---- modules and kernels ----------------------------------------------------------------------- */

static void module_free(Module *m) {
    while (m->funcs) {
        Func *f = m->funcs;
        m->funcs = f->next;
        f->magic = 0;
        free(f);
    }
    if (m->dl) dlclose(m->dl);
    m->magic = 0;
    free(m);
}

static void module_unref(Module *m) {
    if (atomic_fetch_sub(&m->refs, 1) != 1) return;
    Ctx *c = m->ctx;
    pthread_mutex_lock(&c->mu);
    if (m->prev) m->prev->next = m->next;
    else c->modules = m->next;
    if (m->next) m->next->prev = m->prev;
    pthread_mutex_unlock(&c->mu);
    module_free(m);
}

/* The units need emu_* from this library, which the executor opened with
 * RTLD_LOCAL: make it global once (also keeps it loaded until exit, so a
 * dlclose by the executor cannot unmap code its stream threads run). */
static int promote_self(void) {
    pthread_mutex_lock(&g_mu);
    if (!g_self) {
        Dl_info info;
        if (dladdr((void *)cuInit, &info) && info.dli_fname)
            g_self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
    }
    int ok = g_self != NULL;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    CUR(c);
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    INJECT("cuModuleLoadData", CUDA_ERROR_UNKNOWN);
    size_t n = fk_elf_size(image);
    if (!n) {
        fprintf(stderr, "fakecuda: cuModuleLoadData: the image is not a cubin (an ELF64 file); PTX is not supported\n");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const char *dir = getenv("FAKECUDA_UNITS");
    if (!dir || !*dir) {
        fprintf(stderr, "fakecuda: cuModuleLoadData: FAKECUDA_UNITS is not set (the directory fakecuda_prep fills)\n");
        return CUDA_ERROR_NOT_FOUND;
    }
    Module *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(m->path, sizeof m->path, "%s/%016llx.so", dir, (unsigned long long)fk_fnv1a64(image, n));
    if (access(m->path, R_OK) != 0) {
        fprintf(stderr, "fakecuda: cuModuleLoadData: no emulated unit %s for this %zu-byte cubin (run fakecuda_prep on the plan)\n",
                m->path, n);
        free(m);
        return CUDA_ERROR_NOT_FOUND;
    }
    if (!promote_self()) {
        fprintf(stderr, "fakecuda: cannot make the driver's emulator visible to the units: %s\n", dlerror());
        free(m);
        return CUDA_ERROR_UNKNOWN;
    }
    m->dl = dlopen(m->path, RTLD_NOW | RTLD_LOCAL);
    if (!m->dl) {
        fprintf(stderr, "fakecuda: cuModuleLoadData: %s\n", dlerror());
        free(m);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    m->magic = MAGIC_MOD;
    m->ctx = c;
    atomic_init(&m->refs, 1);
    pthread_mutex_lock(&c->mu);
    m->next = c->modules;
    if (c->modules) c->modules->prev = m;
    c->modules = m;
    pthread_mutex_unlock(&c->mu);
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

static Module *module_of(Ctx *c, CUmodule h) {
    Module *m = (Module *)h, *f = NULL;
    if (!m) return NULL;
    pthread_mutex_lock(&c->mu);
    for (Module *x = c->modules; x; x = x->next)
        if (x == m) f = x;
    pthread_mutex_unlock(&c->mu);
    return f && f->magic == MAGIC_MOD ? f : NULL;
}

/* As CUDA leaves it undefined, but safely: launches still queued keep the unit loaded. */
EXPORT CUresult cuModuleUnload(CUmodule hmod) {
    CUR(c);
    Module *m = module_of(c, hmod);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    INJECT("cuModuleUnload", CUDA_ERROR_UNKNOWN);
    m->magic = MAGIC_MOD ^ 1;
    module_unref(m);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    CUR(c);
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    Module *m = module_of(c, hmod);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    INJECT("cuModuleGetFunction", CUDA_ERROR_UNKNOWN);
    pthread_mutex_lock(&c->mu);
    for (Func *f = m->funcs; f; f = f->next)
        if (!strcmp(f->name, name)) {
            pthread_mutex_unlock(&c->mu);
            *hfunc = (CUfunction)f;
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&c->mu);
    char sym[192];
    snprintf(sym, sizeof sym, "emu_tramp_%s", name);
    void *tramp = dlsym(m->dl, sym);
    snprintf(sym, sizeof sym, "emu_psize_%s", name);
    const unsigned *psize = dlsym(m->dl, sym);
    if (!tramp || !psize || strlen(name) >= sizeof ((Func *)0)->name) return CUDA_ERROR_NOT_FOUND;
    Func *f = calloc(1, sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    f->magic = MAGIC_FUNC;
    f->mod = m;
    *(void **)&f->tramp = tramp;
    f->psize = psize;
    while (psize[f->nparams]) {
        f->argbytes += (psize[f->nparams] + 7) & ~7u;
        f->nparams++;
    }
    snprintf(f->name, sizeof f->name, "%s", name);
    pthread_mutex_lock(&c->mu);
    f->next = m->funcs;
    m->funcs = f;
    pthread_mutex_unlock(&c->mu);
    *hfunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
    if (!pi || !hfunc || ((Func *)hfunc)->magic != MAGIC_FUNC) return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = 232448; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = cfg.major * 10 + cfg.minor; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
    (void)attrib;
    (void)value; /* nothing to configure on the host */
    if (!hfunc || ((Func *)hfunc)->magic != MAGIC_FUNC) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* The parameter VALUES are copied now, as CUDA does: the caller may reuse
 * its kernelParams (or the `extra` buffer) as soon as this returns. */
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                               unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
    CUR(c);
    Func *fn = (Func *)f;
    if (!fn || fn->magic != MAGIC_FUNC || fn->mod->ctx != c) return CUDA_ERROR_INVALID_HANDLE;
    STREAM(s, c, hStream);
    INJECT("cuLaunchKernel", CUDA_ERROR_LAUNCH_FAILED);
    int sticky = atomic_load(&c->sticky);
    if (sticky != CUDA_SUCCESS) return (CUresult)sticky;
    if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ) return CUDA_ERROR_INVALID_VALUE;
    if (gridDimY > 65535 || gridDimZ > 65535 || blockDimX > 1024 || blockDimY > 1024 || blockDimZ > 64 ||
        (uint64_t)blockDimX * blockDimY * blockDimZ > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (sharedMemBytes > 232448) return CUDA_ERROR_INVALID_VALUE;
    const char *buf = NULL;
    size_t buflen = 0;
    if (!kernelParams) {
        for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) buflen = *(size_t *)extra[i + 1];
            else return CUDA_ERROR_INVALID_VALUE;
        }
        if (fn->nparams && !buf) return CUDA_ERROR_INVALID_VALUE;
    }
    Op *op = op_new(OP_KERNEL, (size_t)fn->nparams * sizeof(void *) + fn->argbytes);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    void **params = (void **)(op + 1);
    char *vals = (char *)(params + fn->nparams);
    size_t boff = 0;
    for (int i = 0; i < fn->nparams; i++) {
        unsigned sz = fn->psize[i];
        if (kernelParams) {
            memcpy(vals, kernelParams[i], sz);
        } else { /* the packed buffer: each value at its natural alignment (up to 8) */
            size_t al = sz >= 8 ? 8 : sz >= 4 ? 4 : sz >= 2 ? 2 : 1;
            boff = (boff + al - 1) & ~(al - 1);
            if (boff + sz > buflen) {
                free(op);
                return CUDA_ERROR_INVALID_VALUE;
            }
            memcpy(vals, buf + boff, sz);
            boff += sz;
        }
        params[i] = vals;
        vals += (sz + 7) & ~7u;
    }
    op->u.kern.fn = fn;
    op->u.kern.params = params;
    op->u.kern.grid[0] = gridDimX;
    op->u.kern.grid[1] = gridDimY;
    op->u.kern.grid[2] = gridDimZ;
    op->u.kern.block[0] = blockDimX;
    op->u.kern.block[1] = blockDimY;
    op->u.kern.block[2] = blockDimZ;
    atomic_fetch_add(&fn->mod->refs, 1);
    enqueue(s, op);
    return CUDA_SUCCESS;
}

/* ---- for other users of libcuda in the process ------------------------------------------ */

/* NVRTC (zinfc's kernel compiles, with this directory in LD_LIBRARY_PATH)
 * opens libcuda.so.1 and asks for the driver's private export tables; the
 * fake has none, and says so, as a driver without the table does. */
EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
    (void)pExportTableId;
    if (ppExportTable) *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
