/* probe_stats: the statistics every probe uses (probe.h): the median of
 * repeated timings and the latency-bandwidth fit of timed transfers. The
 * lowest file of runtime/probe: it calls no other. */
#include "probe.h"
#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double probe_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the fit ---- */

int probe_fit(const ProbeSample *s, int n, ProbeFit *out) {
    double ss = 0, sx = 0, xx = 0, st = 0, xt = 0, tt = 0;
    /* relative errors (weights 1/t^2), so the small transfers that fix the
     * latency count as much as the large ones that fix the bandwidth */
    for (int i = 0; i < n; i++) {
        double w = s[i].secs > 0 ? 1 / (s[i].secs * s[i].secs) : 0;
        ss += w * s[i].steps * s[i].steps;
        sx += w * s[i].steps * s[i].bytes;
        xx += w * s[i].bytes * s[i].bytes;
        st += w * s[i].steps * s[i].secs;
        xt += w * s[i].bytes * s[i].secs;
        tt += s[i].secs;
    }
    if (n < 1 || xx <= 0 || tt <= 0) return -1;
    double det = ss * xx - sx * sx, a = 0, b = 0;
    if (det > 1e-9 * ss * xx) {
        a = (st * xx - xt * sx) / det;
        b = (ss * xt - sx * st) / det;
    }
    if (det <= 1e-9 * ss * xx || a < 0) { /* bandwidth alone */
        a = 0;
        b = xt / xx;
    }
    if (b <= 0) { /* the time does not grow with the bytes: latency alone, bandwidth the best seen */
        a = ss > 0 ? st / ss : 0;
        double best = 0;
        for (int i = 0; i < n; i++)
            if (s[i].secs > 0 && s[i].bytes / s[i].secs > best) best = s[i].bytes / s[i].secs;
        if (best <= 0) return -1;
        b = 1 / best;
    }
    out->latency = a;
    out->bandwidth = 1 / b;
    return 0;
}
