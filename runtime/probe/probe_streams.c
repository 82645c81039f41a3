/* probe_streams: the rates of two instructions that only stream memory
 * (probe.h, probe_streams), each timed with the function the host runtime
 * calls for it (exec_optim.c): the CPU Adam (adam_step, the rank's thread
 * team) and the gradient norm's sum of squares (hk_sum_squares). A triad
 * says how fast memory is; these say how fast each pattern goes: on one
 * thread here an Adam moved its plan bytes at 1.1-1.4x the triad's rate,
 * so with the one rate the cost model priced gpt2-small's Adams 1.27x too
 * slow. (A ZERO keeps the triad's rate: a 64 MiB memset went 1.5-1.9x
 * faster, glibc's non-temporal stores, but a plan's zeros, mostly below
 * that size, went at the triad's.) */
#include <stdlib.h>
#include "adam.h"
#include "hostk.h"
#include "probe.h"
#include "clock.h"

/* Arrays of this many floats each: far beyond any CPU's shared cache,
 * as an optimizer's state is (4 of them for the Adam: 64 MiB each). */
enum { STREAM_N = 1 << 24, STREAM_QUICK_N = 1 << 18 };

typedef struct Streams {
    float *master, *m, *v, *grad;
    int64_t n;
} Streams;

/* The best of reps calls of pattern k (0 Adam, 1 sum of squares) in
 * bytes per second, counted as the plan counts an instruction's bytes
 * (planner_build.c: a read once, a write once, a read-modify-write twice):
 * an f32 Adam's parameter, m and v twice and its gradient once (28 bytes
 * per element), a sum's once. Every rank at once. */
static int stream_best(Comm *c, Streams *s, int k, int reps, double *best, char *err, size_t n) {
    AdamParams ap = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f,
                     .isa = ADAM_ISA_AUTO, .threads = 0};
    int64_t dims[1] = {s->n};
    HkTensor g = hk_tensor(s->grad, DT_F32, 1, dims);
    double bytes = k == 0 ? 28.0 * (double)s->n : 4.0 * (double)s->n, sink = 0;
    for (int rep = -1; rep < reps; rep++) { /* rep -1 faults the pages in */
        if (comm_barrier(c) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
        double t0 = clock_mono_s();
        if (k == 0) {
            AdamStatus as = adam_step(&ap, rep + 2, s->master, s->m, s->v, s->grad, DT_F32, NULL, DT_F32, s->n, 1.0f);
            if (as != ADAM_OK) return snprintf(err, n, "adam: %s", adam_status_str(as)), -1;
        } else {
            sink += hk_sum_squares(&g);
        }
        double secs = clock_mono_s() - t0;
        if (rep >= 0 && secs > 0 && bytes / secs > *best) *best = bytes / secs;
    }
    if (sink < 0) *best = 0; /* a sum of squares is never negative: keeps the sums from being optimised away */
    return 0;
}

int probe_streams(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n) {
    Streams s = {.n = o->quick ? STREAM_QUICK_N : STREAM_N};
    size_t bytes = (size_t)s.n * sizeof(float);
    s.master = malloc(bytes);
    s.m = malloc(bytes);
    s.v = malloc(bytes);
    s.grad = malloc(bytes);
    int rc = 0;
    if (!s.master || !s.m || !s.v || !s.grad) rc = (snprintf(err, n, "out of memory"), -1);
    for (int64_t i = 0; !rc && i < s.n; i++) {
        s.master[i] = 0.02f * (float)(i % 101) - 1.0f;
        s.m[i] = 0;
        s.v[i] = 0;
        s.grad[i] = 1e-3f * (float)(i % 13) - 6e-3f;
    }
    double v[2] = {0, 0};
    int reps = o->quick ? 2 : 5;
    for (int k = 0; k < 2 && !rc; k++) rc = stream_best(c, &s, k, reps, &v[k], err, n);
    free(s.master);
    free(s.m);
    free(s.v);
    free(s.grad);
    /* every rank takes part in the sum, so one rank's failure does not hang the others */
    double bad = rc ? 1 : 0;
    if (comm_allreduce_sum_f64(c, &bad, 1) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
    if (bad > 0) {
        if (!rc) snprintf(err, n, "memory streams: another rank failed");
        return -1;
    }
    if (comm_allreduce_sum_f64(c, v, 2) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
    /* called again later in the probe: the best of the calls, as for the triad */
    if (v[0] > r->adam_bandwidth) r->adam_bandwidth = v[0];
    if (v[1] > r->read_bandwidth) r->read_bandwidth = v[1];
    return 0;
}
