/* progress: how a long phase (importing weights, exporting them, writing or
 * resharding a checkpoint, tokenizing a corpus) tells its caller how far it
 * has come, without printing. Library code calls progress_report() with the
 * Progress its caller passed in (NULL: nobody listens); the program decides
 * what a person sees (runtime/report/progress_meter.h draws it).
 *
 *   phase  what is being done, as the user would say it ("importing weights")
 *   unit   "B" for bytes, else a plural noun ("tokens", "tensors")
 *   done   how much is done, never decreasing within a phase
 *   total  how much there is; 0 when unknown. done == total ends the phase.
 *
 * Header-only: it is an interface, and every room may report. */
#ifndef ZINF_PROGRESS_H
#define ZINF_PROGRESS_H
#include <stdint.h>

typedef struct Progress Progress;
struct Progress {
    void (*report)(Progress *p, const char *phase, const char *unit, uint64_t done, uint64_t total);
};

static inline void progress_report(Progress *p, const char *phase, const char *unit, uint64_t done, uint64_t total) {
    if (p && p->report) p->report(p, phase, unit, done, total);
}
#endif
