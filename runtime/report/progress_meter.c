#include "progress_meter.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "clock.h"

#define BAR_WIDTH 24
#define TTY_REDRAW_S 0.1

void progress_amount(char *buf, size_t n, const char *unit, double amount) {
    if (strcmp(unit, "B") == 0) {
        static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        int k = 0;
        while (amount >= 1024.0 && k < 5) {
            amount /= 1024.0;
            k++;
        }
        if (k == 0) snprintf(buf, n, "%.0f B", amount);
        else snprintf(buf, n, "%.*f %s", amount < 10 ? 2 : amount < 100 ? 1 : 0, amount, names[k]);
        return;
    }
    static const char *names[] = {"", "k", "M", "G", "T"};
    int k = 0;
    while (amount >= 1000.0 && k < 4) {
        amount /= 1000.0;
        k++;
    }
    if (k == 0) snprintf(buf, n, "%.0f %s", amount, unit);
    else snprintf(buf, n, "%.*f%s %s", amount < 10 ? 2 : amount < 100 ? 1 : 0, amount, names[k], unit);
}

void progress_duration(char *buf, size_t n, double seconds) {
    long s = seconds <= 0 ? 0 : (long)ceil(seconds);
    if (s < 60) snprintf(buf, n, "%ld s", s);
    else if (s < 3600) snprintf(buf, n, "%ld min %02ld s", s / 60, s % 60);
    else snprintf(buf, n, "%ld h %02ld min", s / 3600, (s % 3600) / 60);
}

/* "45%, 1.20 GiB of 2.70 GiB, 350 MiB/s, ETA 4 s" (no percentage or ETA
 * when the total is unknown) */
static void describe(const ProgressMeter *m, double elapsed, uint64_t done, uint64_t total, char *buf, size_t n) {
    char d[32], t[32], r[40], eta[32];
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    progress_amount(d, sizeof d, m->unit, (double)done);
    progress_amount(r, sizeof r, m->unit, rate);
    if (total == 0) {
        snprintf(buf, n, "%s, %s/s", d, r);
        return;
    }
    progress_amount(t, sizeof t, m->unit, (double)total);
    double left = done >= total ? 0 : (double)(total - done);
    if (rate > 0) progress_duration(eta, sizeof eta, left / rate);
    else snprintf(eta, sizeof eta, "unknown");
    snprintf(buf, n, "%3.0f%%, %s of %s, %s/s, ETA %s", floor(100.0 * (double)done / (double)total), d, t, r, eta);
}

static void draw_tty(ProgressMeter *m, double elapsed, uint64_t done, uint64_t total) {
    char what[160], bar[BAR_WIDTH + 1];
    describe(m, elapsed, done, total, what, sizeof what);
    int filled = total ? (int)((double)BAR_WIDTH * (double)done / (double)total) : 0;
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < filled ? '#' : '.';
    bar[BAR_WIDTH] = 0;
    /* \033[K clears what a longer earlier line left to the right */
    if (total) fprintf(m->out, "\r%s [%s] %s\033[K", m->phase, bar, what);
    else fprintf(m->out, "\r%s: %s\033[K", m->phase, what);
    fflush(m->out);
    m->line_open = 1;
}

static void end_phase(ProgressMeter *m, double elapsed, uint64_t done) {
    char d[32], r[40], secs[32];
    progress_amount(d, sizeof d, m->unit, (double)done);
    progress_amount(r, sizeof r, m->unit, elapsed > 0 ? (double)done / elapsed : 0);
    snprintf(secs, sizeof secs, "%.1f s", elapsed);
    if (m->tty) fprintf(m->out, "\r%s: %s in %s (%s/s)\033[K\n", m->phase, d, secs, r);
    else fprintf(m->out, "%s: %s in %s (%s/s)\n", m->phase, d, secs, r);
    fflush(m->out);
    m->line_open = 0;
}

static void meter_report(Progress *p, const char *phase, const char *unit, uint64_t done, uint64_t total) {
    ProgressMeter *m = (ProgressMeter *)p;
    double now = m->clock();
    if (strncmp(m->phase, phase, sizeof m->phase - 1) != 0 || m->phase[0] == 0) {
        progress_meter_finish(m);
        snprintf(m->phase, sizeof m->phase, "%s", phase);
        snprintf(m->unit, sizeof m->unit, "%s", unit);
        m->start = m->last = now;
        m->shown = 0;
    }
    double elapsed = now - m->start;
    if (total && done >= total) {
        if (m->shown) end_phase(m, elapsed, done);
        m->phase[0] = 0; /* the next report starts a new phase, even of the same name */
        m->shown = 0;
        return;
    }
    if (elapsed < m->quiet_s) return;
    if (m->tty) {
        if (m->shown && now - m->last < TTY_REDRAW_S) return;
        draw_tty(m, elapsed, done, total);
    } else {
        if (m->shown && now - m->last < m->every_s) return;
        char what[160];
        describe(m, elapsed, done, total, what, sizeof what);
        fprintf(m->out, "%s: %s\n", m->phase, what);
        fflush(m->out);
    }
    m->shown = 1;
    m->last = now;
}

void progress_meter_init(ProgressMeter *m, FILE *out, int tty) {
    memset(m, 0, sizeof *m);
    m->base.report = meter_report;
    m->out = out;
    m->tty = tty;
    m->clock = clock_mono_s;
    m->quiet_s = 1.0;
    m->every_s = 5.0;
}

void progress_meter_finish(ProgressMeter *m) {
    if (m->line_open) {
        fputc('\n', m->out);
        fflush(m->out);
        m->line_open = 0;
    }
}
