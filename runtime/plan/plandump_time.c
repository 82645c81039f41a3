/* plandump's views of the step in time: `zinfdump --compare` (prediction
 * against a measured trace, in words) and `zinfdump --svg` (in a picture). */
#include <stdlib.h>
#include <string.h>
#include "plandump.h"
#include "plandump_impl.h"

/* ---- --compare ---- */

static void row_line(const TimelineRow *r, int width, FILE *out) {
    fprintf(out, "  %-*s %6u %12.3f %12.3f ", width, r->name, r->count, r->pred * 1e3, r->meas * 1e3);
    if (r->pred > 0) fprintf(out, "%7.2f", r->meas / r->pred);
    else fprintf(out, "%7s", "-");
    double d = (r->meas - r->pred) * 1e3;
    fprintf(out, " %+10.3f\n", d > -5e-4 && d < 5e-4 ? 0 : d); /* no "-0.000" */
}

static void rows_table(const char *title, const char *col, const TimelineRow *rows, uint32_t n, int width, FILE *out) {
    fprintf(out, "%s\n  %-*s %6s %12s %12s %7s %10s\n", title, width, col, "count", "predicted ms", "measured ms", "ratio", "diff ms");
    for (uint32_t k = 0; k < n; k++) row_line(&rows[k], width, out);
}

typedef struct Longest {
    double dur;
    uint32_t i;
} Longest;

static int by_dur(const void *x, const void *y) {
    const Longest *a = x, *b = y;
    if (a->dur != b->dur) return a->dur > b->dur ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

enum { TOP = 5 };

/* One critical path: its length, where it spends its time, its longest instructions. */
static bool path_report(const Plan *p, const Timeline *t, const char *which, FILE *out) {
    TimelinePath path;
    if (!timeline_critical_path(p, t, &path)) return false;
    Longest *top = malloc(sizeof *top * (path.n ? path.n : 1));
    if (!top) {
        timeline_path_free(&path);
        return false;
    }
    double q[PLAN_NQUEUES] = {0};
    for (uint32_t k = 0; k < path.n; k++) {
        uint32_t i = path.instr[k];
        double d = timeline_busy(t, i);
        if (!(d > 0)) d = 0; /* NaN too, so the sort stays a total order */
        if (p->instrs[i].queue < PLAN_NQUEUES) q[p->instrs[i].queue] += d;
        top[k] = (Longest){d, i};
    }
    fprintf(out, "critical path, %s: %u instructions, %.3f ms (busy %.3f ms, waiting %.3f ms)", which, path.n, path.span * 1e3,
            path.busy * 1e3, (path.span - path.busy) * 1e3);
    for (int k = 0, first = 1; k < PLAN_NQUEUES; k++)
        if (q[k] > 0) {
            fprintf(out, "%s%s %.3f ms", first ? "; on " : ", ", plan_queue_names[k], q[k] * 1e3);
            first = 0;
        }
    fprintf(out, "\n");
    qsort(top, path.n, sizeof *top, by_dur);
    char what[256];
    for (uint32_t k = 0; k < path.n && k < TOP; k++) {
        const PlanInstr *s = &p->instrs[top[k].i];
        pd_instr_what(p, s, what, sizeof what);
        fprintf(out, "  %5u %-7s %-14s %10.3f ms%s%s\n", top[k].i, s->queue < PLAN_NQUEUES ? plan_queue_names[s->queue] : "?",
                s->op < PI_COUNT ? plan_opcode_names[s->op] : "?", top[k].dur * 1e3, *what ? "  " : "", what);
    }
    free(top);
    timeline_path_free(&path);
    return true;
}

bool plandump_compare(const Plan *p, const Timeline *pred, const Timeline *meas, const char *source, FILE *out) {
    TimelineRow queues[PLAN_NQUEUES], *classes;
    uint32_t nclasses;
    if (!timeline_queue_rows(p, pred, meas, queues) || !timeline_class_rows(p, pred, meas, &classes, &nclasses)) return false;
    fprintf(out, "compare: %s on %s, %d rank%s: the cost model against %s (rank %d), %u of %u instructions measured\n",
            p->model_name, p->target.name, p->ranks, p->ranks > 1 ? "s" : "", source, meas->rank, meas->count, p->ninstrs);
    fprintf(out, "pass: predicted %.3f ms, measured %.3f ms", pred->span * 1e3, meas->span * 1e3);
    if (pred->span > 0) fprintf(out, ", ratio %.2f", meas->span / pred->span);
    fprintf(out, "\n\n");
    rows_table("per queue, busy time (largest divergence first):", "queue", queues, PLAN_NQUEUES, 7, out);
    /* what the measured durations held besides work: a collective's wait for
     * its peers, an NVMe transfer's time in flight beside other transfers */
    bool waited = false;
    for (int q = 0; q < PLAN_NQUEUES; q++) waited |= queues[q].wait > 0;
    if (waited) {
        fprintf(out, "  measured waiting inside instructions, not counted as busy:");
        for (int q = 0, first = 1; q < PLAN_NQUEUES; q++)
            if (queues[q].wait > 0) {
                bool pipe = !strcmp(queues[q].name, "nvme"); /* the nvme queue's waiting is time in flight beside others */
                fprintf(out, "%s %s %.3f ms (%s)", first ? "" : ",", queues[q].name, queues[q].wait * 1e3,
                        pipe ? "in flight beside other transfers, summed over them" : "for other ranks");
                first = 0;
            }
        fprintf(out, "\n");
    }
    fprintf(out, "\n");
    rows_table("per instruction class (largest divergence first):", "class", classes, nclasses, 34, out);
    free(classes);
    fprintf(out, "\n");
    if (!path_report(p, pred, "predicted", out)) return false;
    return path_report(p, meas, "measured", out);
}

/* ---- --svg ---- */

enum { NB = 400 }; /* memory-in-use bins */

typedef struct Svg {
    FILE *out;
    double W, left, lane, T; /* T: seconds the width stands for */
} Svg;

static const char *const colour[PLAN_NQUEUES] = {"#8c564b", "#1f77b4", "#17becf", "#d62728", "#2ca02c", "#ff7f0e"};
static const char *const CRIT = "#e6007e"; /* the critical path's outline */

static void xml_text(FILE *out, const char *s) {
    for (; s && *s; s++) {
        if (*s == '<') fputs("&lt;", out);
        else if (*s == '>') fputs("&gt;", out);
        else if (*s == '&') fputs("&amp;", out);
        else if (*s == '"') fputs("&quot;", out);
        else if ((unsigned char)*s >= 0x20) fputc(*s, out);
    }
}

static double svg_x(const Svg *g, double t) { return g->left + (g->W - g->left) * t / g->T; }

/* A round step (1, 2 or 5 times a power of ten) for about 8 ticks over T ms. */
static double tick_step(double T_ms) {
    double raw = T_ms / 8, mag = 1;
    while (mag * 10 <= raw) mag *= 10;
    while (mag > raw) mag /= 10;
    double m = raw / mag;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * mag;
}

/* Grid lines from y0 to y1 and, at y1, the time axis: ticks labelled in ms. */
static void svg_axis(const Svg *g, double y0, double y1) {
    double T_ms = g->T * 1e3, step = tick_step(T_ms);
    int dec = 0;
    for (double s = step; s < 0.999999 && dec < 9; s *= 10) dec++;
    fprintf(g->out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", g->left, y1, g->W, y1);
    for (int k = 0; k <= 50 && k * step <= T_ms * (1 + 1e-9); k++) {
        double x = svg_x(g, k * step * 1e-3);
        fprintf(g->out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, y0, x, y1);
        fprintf(g->out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x, y1, x, y1 + 4);
        /* the origin is "0 ms" whatever the ticks' decimals (a fast run's axis is in tenths) */
        if (step < 1e6) fprintf(g->out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.*f ms</text>\n", x, y1 + 15, k ? dec : 0, k * step);
        else fprintf(g->out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g ms</text>\n", x, y1 + 15, k * step);
    }
}

/* Six empty lanes from y, one per queue, under a heading. */
static void svg_lane_bg(const Svg *g, double y, const char *heading, const char *prefix) {
    fprintf(g->out, "<text x=\"10\" y=\"%.1f\" font-weight=\"bold\">%s</text>\n", y - 6, heading);
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        double yq = y + q * g->lane;
        fprintf(g->out, "<text x=\"10\" y=\"%.1f\">%s%s</text>\n", yq + g->lane * 0.6, prefix, plan_queue_names[q]);
        fprintf(g->out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f4f4\"/>\n", g->left, yq, g->W - g->left,
                g->lane - 4);
    }
}

/* t's instructions in the lanes from y; marked ones outlined. */
static void svg_boxes(const Svg *g, const Plan *p, const Timeline *t, const uint8_t *marks, double y) {
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        double s0 = t->start[i], s1 = t->end[i];
        /* a forged plan's times can be infinite or NaN: those are not drawn */
        if (!t->have[i] || s->queue >= PLAN_NQUEUES || !(s1 > s0) || !(s0 >= 0) || !(s1 <= g->T)) continue;
        double x = svg_x(g, s0), w = svg_x(g, s1) - x;
        fprintf(g->out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"", x, y + s->queue * g->lane,
                w < 0.3 ? 0.3 : w, g->lane - 4, colour[s->queue]);
        if (marks && marks[i]) fprintf(g->out, " stroke=\"%s\" stroke-width=\"1.5\"", CRIT);
        fprintf(g->out, "><title>%u %s %.3f ms</title></rect>\n", i, plan_opcode_names[s->op], (s1 - s0) * 1e3);
    }
}

/* A sum of buffer sizes as bytes (a forged plan's can pass 2^64). */
static uint64_t bytes_of(double v) {
    if (!(v > 0)) return 0;
    return v >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)v;
}

/* The bin of [0, n) time t falls in, of T seconds (n: after the last).
 * Infinite or NaN times go to the ends rather than into an int they do not fit. */
static int time_bin(double t, double T, int n) {
    double x = t / T * n;
    if (!(x > 0)) return 0;
    return x >= n ? n : (int)x;
}

/* GPU memory in use over the predicted pass of T seconds, bytes per bin (each buffer from
 * its first use's start to its last use's end); false: out of memory. */
static bool memory_use(const Plan *p, const CostResult *c, double T, double use[NB]) {
    int32_t *first = malloc(sizeof(int32_t) * (p->nbuffers + 1)), *last = malloc(sizeof(int32_t) * (p->nbuffers + 1));
    bool ok = first && last;
    if (ok) {
        pd_lifetimes(p, first, last);
        for (uint32_t b = 0; b < p->nbuffers; b++) {
            if (p->buffers[b].arena != ARENA_GPU) continue;
            double t0 = 0, t1 = T;
            if (!(p->buffers[b].flags & PLAN_BUF_PERSISTENT)) {
                if (first[b] < 0) continue;
                t0 = c->start[first[b]];
                t1 = c->end[last[b]];
            }
            int k1 = time_bin(t1, T, NB);
            if (k1 >= NB) k1 = NB - 1;
            for (int k = time_bin(t0, T, NB); k <= k1; k++) use[k] += (double)p->buffers[b].bytes;
        }
    }
    free(first);
    free(last);
    return ok;
}

/* A dashed horizontal line across the panel with a label at its right end. */
static void svg_level(const Svg *g, double y, const char *stroke, const char *label) {
    fprintf(g->out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"6,3\"/>\n", g->left, y, g->W,
            y, stroke);
    fprintf(g->out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"%s\">%s</text>\n", g->W - 4, y - 3, stroke, label);
}

/* The memory panel at y, scaled to the peak; the budget a labelled line
 * when it is within twice the peak, else a note that it is off the scale. */
static bool svg_memory(const Svg *g, const Plan *p, const CostResult *c, double y, double h) {
    double use[NB] = {0}, peak = 0, pass = c->pass_time > 0 && c->pass_time <= g->T ? c->pass_time : g->T;
    if (!memory_use(p, c, pass, use)) return false;
    for (int k = 0; k < NB; k++) if (use[k] > peak) peak = use[k];
    double budget = (double)p->arenas[ARENA_GPU].capacity, hi = peak > 0 ? peak * 1.1 : 1;
    bool on_scale = budget > 0 && budget <= 2 * peak;
    if (on_scale && budget * 1.05 > hi) hi = budget * 1.05;
    char a[32], b[32], label[96];
    plan_bytes_str(bytes_of(peak), a, sizeof a);
    plan_bytes_str(bytes_of(budget), b, sizeof b);
    fprintf(g->out, "<text x=\"10\" y=\"%.1f\">GPU memory in use (predicted): peak %s", y - 8, a);
    if (budget > 0 && !on_scale) fprintf(g->out, "; budget %s, off the scale (%.2g%% of it used)", b, 100 * peak / budget);
    fprintf(g->out, "</text>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", g->left, y,
            g->W - g->left, h);
    svg_axis(g, y, y + h);
    fprintf(g->out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n", g->left - 4, y + h);
    snprintf(label, sizeof label, "peak %s", a);
    if (peak > 0) svg_level(g, y + h * (1 - peak / hi), "#9467bd", label);
    snprintf(label, sizeof label, "budget %s", b);
    if (on_scale) svg_level(g, y + h * (1 - budget / hi), "#555", label);
    fprintf(g->out, "<polyline fill=\"none\" stroke=\"#9467bd\" stroke-width=\"1.5\" points=\"");
    for (int k = 0; k < NB; k++) fprintf(g->out, "%.1f,%.1f ", svg_x(g, pass * k / NB), y + h * (1 - use[k] / hi));
    fprintf(g->out, "\"/>\n");
    return true;
}

/* Title and legend. */
static void svg_head(const Svg *g, const Plan *p, const CostResult *c, const Timeline *meas) {
    fprintf(g->out, "<text x=\"10\" y=\"20\" font-size=\"14\">");
    xml_text(g->out, p->model_name);
    fprintf(g->out, " on ");
    xml_text(g->out, p->target.name);
    fprintf(g->out, ": %.4g ms per pass predicted", c->pass_time * 1e3);
    if (meas) fprintf(g->out, ", %.4g ms measured", meas->span * 1e3);
    fprintf(g->out, ", %d rank%s</text>\n", p->ranks, p->ranks > 1 ? "s" : "");
    double x = g->W - 300;
    fprintf(g->out, "<rect x=\"%.1f\" y=\"10\" width=\"18\" height=\"10\" fill=\"#2ca02c\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", x, CRIT);
    fprintf(g->out, "<text x=\"%.1f\" y=\"19\">critical path</text>\n", x + 24);
    fprintf(g->out, "<line x1=\"%.1f\" y1=\"15\" x2=\"%.1f\" y2=\"15\" stroke=\"#9467bd\" stroke-width=\"1.5\"/>\n", x + 110, x + 128);
    fprintf(g->out, "<text x=\"%.1f\" y=\"19\">GPU memory in use</text>\n", x + 134);
}

/* One timeline's boxes in the lanes from y, its critical path outlined. */
static bool svg_section(const Svg *g, const Plan *p, const Timeline *t, double y) {
    TimelinePath path;
    if (!timeline_critical_path(p, t, &path)) return false;
    uint8_t *marks = timeline_path_marks(p, &path);
    timeline_path_free(&path);
    if (!marks) return false;
    svg_boxes(g, p, t, marks, y);
    free(marks);
    return true;
}

bool plandump_svg_measured(const Plan *p, const CostResult *c, const Timeline *meas, FILE *out) {
    Timeline pred;
    if (!timeline_predicted(p, c, &pred)) return false;
    Svg g = {out, 1200, 130, 22, c->pass_time};
    if (meas && meas->span > g.T) g.T = meas->span;
    if (!(g.T >= 1e-6) || !(g.T < 1e300)) g.T = g.T >= 1e300 ? 1e300 : 1e-6;
    double y_pred = 60, y_meas = y_pred + PLAN_NQUEUES * g.lane + 26;
    double y_axis = (meas ? y_meas : y_pred) + PLAN_NQUEUES * g.lane, top_mem = y_axis + 50, mem_h = 160;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\" "
                 "shape-rendering=\"crispEdges\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n",
            g.W + 20, top_mem + mem_h + 40);
    svg_head(&g, p, c, meas);
    char heading[64];
    snprintf(heading, sizeof heading, "measured (rank %d)", meas ? meas->rank : 0);
    svg_lane_bg(&g, y_pred, "predicted (cost model)", "");
    if (meas) svg_lane_bg(&g, y_meas, heading, "measured ");
    svg_axis(&g, y_pred, y_axis);
    fprintf(out, "<text x=\"10\" y=\"%.1f\">time (ms)</text>\n", y_axis + 15);
    bool ok = svg_section(&g, p, &pred, y_pred);
    if (ok && meas) ok = svg_section(&g, p, meas, y_meas);
    timeline_free(&pred);
    if (ok) ok = svg_memory(&g, p, c, top_mem, mem_h);
    fprintf(out, "</svg>\n");
    return ok;
}

void plandump_svg(const Plan *p, const CostResult *c, FILE *out) {
    if (!plandump_svg_measured(p, c, NULL, out)) fprintf(out, "<!-- out of memory -->\n");
}
