/* losschart: the --losses file as an SVG chart; see losschart.h. */
#include "losschart.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int push(LossPoint **v, int *n, int *cap, int64_t step, double loss, int line) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 256;
        LossPoint *g = realloc(*v, sizeof **v * (size_t)c);
        if (!g) return -1;
        *v = g, *cap = c;
    }
    (*v)[(*n)++] = (LossPoint){step, loss, line};
    return 0;
}

static int by_step_then_line(const void *a, const void *b) {
    const LossPoint *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Sorts by step, keeping for each step the point of its last line. */
static int dedupe(LossPoint *v, int n) {
    if (n > 1) qsort(v, (size_t)n, sizeof *v, by_step_then_line);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && v[m - 1].step == v[i].step) v[m - 1] = v[i];
        else v[m++] = v[i];
    }
    return m;
}

int losschart_read(const char *path, LossSeries *s, char *err, size_t n) {
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "r");
    if (!f) return snprintf(err, n, "%s: %s", path, strerror(errno)), -1;
    char line[1024];
    int ln = 0, ctrain = 0, ceval = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        if (!strchr(line, '\n') && !feof(f)) {
            rc = -1, snprintf(err, n, "%s:%d: line too long for a --losses file", path, ln);
            break;
        }
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == '\0') continue;
        int64_t step;
        double loss;
        int used = 0;
        if (sscanf(p, "step %" SCNd64 " loss %lf%n", &step, &loss, &used) == 2 && used > 0) {
            if (step < 0 || !isfinite(loss)) {
                rc = -1, snprintf(err, n, "%s:%d: step %" PRId64 " with loss %g", path, ln, step, loss);
                break;
            }
            if (push(&s->train, &s->ntrain, &ctrain, step, loss, ln)) rc = -1, snprintf(err, n, "out of memory");
        } else if (sscanf(p, "eval step %" SCNd64 " loss %lf%n", &step, &loss, &used) == 2 && used > 0) {
            if (step < 0 || !isfinite(loss)) {
                rc = -1, snprintf(err, n, "%s:%d: eval step %" PRId64 " with loss %g", path, ln, step, loss);
                break;
            }
            if (push(&s->eval, &s->neval, &ceval, step, loss, ln)) rc = -1, snprintf(err, n, "out of memory");
        } else {
            line[strcspn(line, "\n")] = '\0';
            rc = -1, snprintf(err, n, "%s:%d: not a line of zinfrun --losses: '%.60s'", path, ln, line);
        }
        if (rc) break;
    }
    if (!rc && ferror(f)) rc = -1, snprintf(err, n, "%s: read error", path);
    fclose(f);
    if (!rc && s->ntrain == 0 && s->neval == 0) rc = -1, snprintf(err, n, "%s: no step or eval lines (a file zinfrun --losses wrote has them)", path);
    if (!rc) {
        s->ntrain = dedupe(s->train, s->ntrain);
        s->neval = dedupe(s->eval, s->neval);
    }
    return rc;
}

void losschart_free(LossSeries *s) {
    free(s->train);
    free(s->eval);
    memset(s, 0, sizeof *s);
}

/* ---- drawing ---- */

enum { W = 880, H = 500, X0 = 80, X1 = 790, Y0 = 60, Y1 = 430 };

/* Round ticks over [lo, hi]: the step is 1, 2 or 5 times a power of ten,
 * about `want` of them; the range is widened to whole steps. */
typedef struct Ticks {
    double lo, hi, step;
} Ticks;

static Ticks ticks(double lo, double hi, int want) {
    if (!(hi > lo)) {
        double d = fabs(lo) > 0 ? fabs(lo) * 0.05 : 1.0;
        lo -= d, hi += d;
    }
    double raw = (hi - lo) / want, p = pow(10, floor(log10(raw))), m = raw / p;
    double st = (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
    return (Ticks){floor(lo / st) * st, ceil(hi / st) * st, st};
}

static double sx(const Ticks *t, double v) { return X0 + (v - t->lo) / (t->hi - t->lo) * (X1 - X0); }
static double sy(const Ticks *t, double v) { return Y1 - (v - t->lo) / (t->hi - t->lo) * (Y1 - Y0); }

/* A tick's label: as many decimals as the step needs, no more. */
static void label(char *b, size_t n, double v, double step) {
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(v) < step * 1e-6) v = 0;
    if (fabs(v) >= 1e5 || (v != 0 && fabs(v) < 1e-4)) snprintf(b, n, "%.2g", v);
    else snprintf(b, n, "%.*f", dec > 8 ? 8 : dec, v);
}

static void escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
    }
}

static void polyline(FILE *f, const LossPoint *v, int n, const Ticks *tx, const Ticks *ty, const char *style) {
    fprintf(f, "<polyline fill=\"none\" %s points=\"", style);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.1f,%.1f", i ? " " : "", sx(tx, (double)v[i].step), sy(ty, v[i].loss));
    fputs("\"/>\n", f);
}

int losschart_svg(FILE *f, const LossSeries *s, const char *title, const AdamSchedule *lr, char *err, size_t n) {
    int64_t smin = INT64_MAX, smax = INT64_MIN;
    double lmin = INFINITY, lmax = -INFINITY;
    const LossPoint *sets[2] = {s->train, s->eval};
    int counts[2] = {s->ntrain, s->neval};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < counts[k]; i++) {
            const LossPoint *p = &sets[k][i];
            if (p->step < smin) smin = p->step;
            if (p->step > smax) smax = p->step;
            if (p->loss < lmin) lmin = p->loss;
            if (p->loss > lmax) lmax = p->loss;
        }
    Ticks tx = ticks((double)smin, (double)smax, 8), ty = ticks(lmin, lmax, 6);
    if (tx.lo < 0 && smin >= 0) tx.lo = 0;
    /* the learning rate at every training step, on its own axis from 0 */
    double rmax = 0;
    if (lr && s->ntrain)
        for (int i = 0; i < s->ntrain; i++) {
            double r = adam_lr(lr, s->train[i].step);
            if (r > rmax) rmax = r;
        }
    bool with_lr = lr && rmax > 0;
    Ticks tr = ticks(0, with_lr ? rmax * 1.08 : 1, 5); /* headroom: a constant rate is not drawn on the frame */
    tr.lo = 0;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    fputs("<text x=\"435\" y=\"30\" text-anchor=\"middle\" font-size=\"16\">", f);
    escaped(f, title && *title ? title : "loss");
    fputs("</text>\n", f);
    /* grid and ticks */
    char b[64];
    for (double v = ty.lo; v <= ty.hi + ty.step * 1e-6; v += ty.step) {
        double y = sy(&ty, v);
        label(b, sizeof b, v, ty.step);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", X0, y, X1, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", X0 - 6, y + 4, b);
    }
    for (double v = tx.lo; v <= tx.hi + tx.step * 1e-6; v += tx.step) {
        double x = sx(&tx, v);
        label(b, sizeof b, v, tx.step);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e6e6e6\"/>\n", x, Y0, x, Y1);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, Y1 + 18, b);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", X0, Y0, X1 - X0, Y1 - Y0);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (X0 + X1) / 2, Y1 + 42);
    fprintf(f, "<text x=\"20\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 20 %d)\">loss</text>\n", (Y0 + Y1) / 2,
            (Y0 + Y1) / 2);
    if (with_lr) {
        for (double v = tr.lo; v <= tr.hi + tr.step * 1e-6; v += tr.step) {
            double y = sy(&tr, v);
            label(b, sizeof b, v, tr.step);
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>\n", X1, y, X1 + 5, y);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" fill=\"#666\">%s</text>\n", X1 + 8, y + 4, b);
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\" transform=\"rotate(90 %d %d)\">learning rate</text>\n",
                W - 14, (Y0 + Y1) / 2, W - 14, (Y0 + Y1) / 2);
        fputs("<polyline fill=\"none\" stroke=\"#888\" stroke-width=\"1.2\" stroke-dasharray=\"5,4\" points=\"", f);
        for (int i = 0; i < s->ntrain; i++)
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", sx(&tx, (double)s->train[i].step), sy(&tr, adam_lr(lr, s->train[i].step)));
        fputs("\"/>\n", f);
    }
    if (s->ntrain) polyline(f, s->train, s->ntrain, &tx, &ty, "stroke=\"#1f77b4\" stroke-width=\"1.6\" id=\"train\"");
    if (s->neval) {
        polyline(f, s->eval, s->neval, &tx, &ty, "stroke=\"#ff7f0e\" stroke-width=\"1.6\" id=\"eval\"");
        for (int i = 0; i < s->neval; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#ff7f0e\"/>\n", sx(&tx, (double)s->eval[i].step),
                    sy(&ty, s->eval[i].loss));
    }
    /* legend, top right inside the plot */
    int ly = Y0 + 18;
    const struct {
        bool on;
        const char *color, *dash, *name;
    } items[] = {{s->ntrain > 0, "#1f77b4", "", "training loss"},
                 {s->neval > 0, "#ff7f0e", "", "evaluation loss"},
                 {with_lr, "#888", " stroke-dasharray=\"5,4\"", "learning rate"}};
    for (size_t k = 0; k < sizeof items / sizeof *items; k++) {
        if (!items[k].on) continue;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", X1 - 150, ly - 4, X1 - 122,
                ly - 4, items[k].color, items[k].dash);
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", X1 - 116, ly, items[k].name);
        ly += 18;
    }
    fputs("</svg>\n", f);
    if (fflush(f) != 0 || ferror(f)) return snprintf(err, n, "write error: %s", strerror(errno)), -1;
    return 0;
}
