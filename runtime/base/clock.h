/* clock: the two clocks zinf reads, in seconds as a double.
 *   clock_mono_s  the monotonic clock: durations, timeouts, spin limits
 *                 (it never steps back when the wall clock is set)
 *   clock_wall_s  seconds since the Unix epoch: timestamps that other
 *                 programs read (TensorBoard's event wall_time)
 * Header-only: both are one system call, and every layer (compiler,
 * runtime, tests) reads them. */
#ifndef ZINF_CLOCK_H
#define ZINF_CLOCK_H
#include <time.h>

static inline double clock_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double clock_wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif
