/* progress_meter: what a person sees of a long phase (base/progress.h):
 * bytes or items done, the rate and the time left.
 *   - on a terminal, one line redrawn in place (a bar, the percentage, done
 *     of total, the rate, the ETA) at most every tenth of a second, ended by
 *     a summary when the phase ends;
 *   - in a log (not a terminal), a line every every_s seconds (5), and the
 *     summary at the end;
 *   - a phase that ends before quiet_s (1 s) prints nothing at all: short
 *     runs stay as quiet as they were.
 * The clock is a field so that tests can drive it; progress_meter_init sets
 * the monotonic clock. The meter owns no memory. */
#ifndef ZINF_PROGRESS_METER_H
#define ZINF_PROGRESS_METER_H
#include <stdint.h>
#include <stdio.h>
#include "progress.h"

typedef struct ProgressMeter {
    Progress base; /* first, so that &m->base is what the library gets */
    FILE *out;
    int tty;              /* redraw one line in place */
    double (*clock)(void); /* seconds, monotonic */
    double quiet_s;       /* a phase shorter than this prints nothing */
    double every_s;       /* seconds between log lines */
    /* the phase in flight */
    char phase[64];
    char unit[16];
    double start, last;
    int shown;    /* something of this phase has been printed */
    int line_open; /* a terminal line was drawn and not yet ended */
} ProgressMeter;

void progress_meter_init(ProgressMeter *m, FILE *out, int tty);
/* Ends a terminal line left open by a phase that never reported its end
 * (an error stopped it), so that the next message starts on its own line. */
void progress_meter_finish(ProgressMeter *m);

/* "1.50 GiB", "12.3 MiB", "512 B"; "1.20M tokens", "950 tokens" */
void progress_amount(char *buf, size_t n, const char *unit, double amount);
/* "4 s", "3 min 20 s", "2 h 05 min" (rounded up to the second) */
void progress_duration(char *buf, size_t n, double seconds);
#endif
