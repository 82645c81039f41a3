/* zinfdump: show a plan.
 *   zinfdump model.plan                 summary: memory per tier and rank, predicted step time,
 *                                       busy time per queue, the bottleneck
 *   zinfdump model.plan --schedule [--rank R]   one instruction per line
 *   zinfdump model.plan --memory        each arena's buffers
 *   zinfdump model.plan --kernels       the embedded CUDA kernels, their ptxas resource reports, the launches
 *   zinfdump model.plan --trace out.json  predicted timeline (Chrome trace / Perfetto)
 *   zinfdump model.plan --svg out.svg   timeline (ms axis, critical path outlined) and GPU memory in use, drawn
 *   zinfdump model.plan --compare run.json  the prediction against a trace zinfrun --trace wrote: busy time
 *                                       per queue and per instruction class, largest divergence first, and
 *                                       both critical paths; with --svg, the measured lanes under the predicted
 *   zinfdump model.plan --compare run.json --calibrate t.zl  also writes the plan's target with the run's
 *                                       kernel times as its timed calls and, on several ranks, its collectives'
 *                                       fit as net (zinfc --target t.zl plans with them)
 *   zinfdump [model.plan] --losses FILE --svg out.svg   a run's --losses file drawn: training and
 *                                       evaluation loss against the step, the plan's learning rate on a
 *                                       second axis
 *   zinfdump model.plan --hf            the Hugging Face mapping: one line per piece
 *   zinfdump model.plan --hf-config     the config.json the plan carries, as is
 * Every plan is verified first; a plan that fails is reported and not shown. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "adam.h"
#include "calibrate.h"
#include "cost.h"
#include "losschart.h"
#include "plan.h"
#include "plandump.h"
#include "target_zl.h"
#include "timeline.h"
#include "verify.h"

static int usage(FILE *f, int rc) {
    fprintf(f, "usage: zinfdump PLAN [--schedule [--rank R]] [--memory] [--kernels] [--trace OUT.json] [--svg OUT.svg] [--hf]\n"
               "                [--hf-config] [--compare RUN.json [--calibrate OUT.zl]]\n"
               "       zinfdump [PLAN] --losses FILE --svg OUT.svg\n");
    return rc;
}

/* --trace writes the prediction; --svg draws it, with meas's lanes when given. */
static int write_file(const char *path, const Plan *p, const CostResult *c, const Timeline *meas, bool svg) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "zinfdump: %s: cannot write: %s\n", path, strerror(errno));
        return 1;
    }
    bool ok = true;
    if (svg) ok = plandump_svg_measured(p, c, meas, f);
    else plandump_trace(p, c, f);
    if (fclose(f) != 0) {
        fprintf(stderr, "zinfdump: %s: write failed: %s\n", path, strerror(errno));
        return 1;
    }
    if (!ok) fprintf(stderr, "zinfdump: %s: out of memory\n", path);
    return ok ? 0 : 1;
}

/* --calibrate: the plan's target with the run's kernel times, written to
 * a temporary file renamed over path once complete (a failure leaves no
 * half-written target); 1 (printed) on failure. */
static int calibrate(const char *path, const char *run, const Plan *p, const Timeline *m) {
    PlanTarget t;
    CalibrateInfo info;
    if (!plan_calibrate(p, m, &t, &info)) {
        if (info.kernels) fprintf(stderr, "zinfdump: out of memory\n");
        else fprintf(stderr, "zinfdump: --calibrate: %s has no kernel with a time (a zinfrun --trace of this plan has them)\n", run);
        return 1;
    }
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) {
        fprintf(stderr, "zinfdump: out of memory\n");
        return 1;
    }
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "zinfdump: %s: cannot write: %s\n", path, strerror(errno));
        free(tmp);
        return 1;
    }
    fprintf(f, "# The target of the plan, with the kernel times of %s (rank %d) as its timed calls\n"
               "# (zinfdump --calibrate; docs/schedule.md, \"Calibrating from a run\").\n", run, m->rank);
    bool ok = plan_target_write(f, &t, NULL);
    int e = errno;
    if (fclose(f) != 0 && ok) ok = false, e = errno;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        fprintf(stderr, "zinfdump: %s: write failed: %s\n", path, strerror(e));
        remove(tmp);
        free(tmp);
        return 1;
    }
    free(tmp);
    printf("wrote %s: target %s with the kernel times of %s, %d kernels:", path, t.name, run, info.kernels);
    for (int fam = 0; fam < PLAN_NFAMILIES; fam++)
        if (info.calls[fam]) printf(" %s %d", plan_family_names[fam], info.calls[fam]);
    printf(" timed calls%s", info.thinned ? " (some sizes left out to fit)" : "");
    if (info.net) printf("; net fitted to its %d collectives", info.collectives);
    else if (info.collectives) printf("; net kept (its %d collectives have one size)", info.collectives);
    if (info.transfers) {
        printf("; nvme scaled to its %d transfers (", info.transfers);
        for (int w = 0; w < 2; w++)
            if (info.nvme_scale[w][0] > 0)
                printf("%s%s: drive x%.2f, alone x%.2f", w && info.nvme_scale[0][0] > 0 ? "; " : "", w ? "writes" : "reads",
                       info.nvme_scale[w][0], info.nvme_scale[w][1]);
        printf(")");
    }
    printf("; zinfc --target %s plans with them\n", path);
    return 0;
}

/* The whole of a file, NUL-terminated (malloc'd; *len its length); NULL with err set. */
static char *read_all(const char *path, size_t *len, char *err, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, k = 0;
    char *buf = malloc(cap);
    for (size_t got = 1; buf && got;) {
        if (k + 1 >= cap) {
            char *b = cap < SIZE_MAX / 2 ? realloc(buf, cap *= 2) : NULL;
            if (!b) free(buf);
            buf = b;
            if (!buf) break;
        }
        got = fread(buf + k, 1, cap - k - 1, f);
        k += got;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        snprintf(err, n, "%s: %s", path, buf ? "read failed" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[k] = 0;
    *len = k;
    return buf;
}

/* Reads the measured trace for --compare into m; 1 (printed) on failure. */
static int read_measured(const char *path, const Plan *p, Timeline *m) {
    char err[512];
    size_t len = 0;
    char *text = read_all(path, &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "zinfdump: %s\n", err);
        return 1;
    }
    int rc = timeline_read_trace(p, text, len, m, err, sizeof err);
    free(text);
    if (rc) fprintf(stderr, "zinfdump: %s: %s\n", path, err);
    return rc ? 1 : 0;
}

/* --compare: the table; 1 (printed) on failure. */
static int compare(const char *path, const Plan *p, const CostResult *c, const Timeline *m) {
    Timeline pred;
    bool ok = timeline_predicted(p, c, &pred) && plandump_compare(p, &pred, m, path, stdout);
    timeline_free(&pred);
    if (!ok) fprintf(stderr, "zinfdump: out of memory\n");
    return ok ? 0 : 1;
}

/* --losses FILE --svg OUT: the chart, titled with the plan's model and
 * with its learning rate when a plan is given (already verified). */
static int loss_chart(const char *losses, const char *out, const Plan *p) {
    char err[512];
    LossSeries s;
    if (losschart_read(losses, &s, err, sizeof err)) {
        fprintf(stderr, "zinfdump: %s\n", err);
        losschart_free(&s);
        return 1;
    }
    AdamSchedule sch = {0};
    char title[512];
    if (p) {
        sch = adam_schedule_of(&p->train);
        snprintf(title, sizeof title, "%s: loss (%s)", p->model_name ? p->model_name : "model", losses);
    } else {
        snprintf(title, sizeof title, "loss (%s)", losses);
    }
    /* written beside, then renamed: an existing chart is never left half-written */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out) >= (int)sizeof tmp) {
        fprintf(stderr, "zinfdump: %s: name too long\n", out);
        losschart_free(&s);
        return 1;
    }
    FILE *f = fopen(tmp, "w");
    int rc = 0;
    if (!f) {
        fprintf(stderr, "zinfdump: %s: cannot write: %s\n", out, strerror(errno));
        rc = 1;
    } else {
        if (losschart_svg(f, &s, title, p ? &sch : NULL, err, sizeof err)) rc = 1, fprintf(stderr, "zinfdump: %s: %s\n", out, err);
        if (fclose(f) != 0 && !rc) rc = 1, fprintf(stderr, "zinfdump: %s: %s\n", out, strerror(errno));
        if (!rc && rename(tmp, out) != 0) rc = 1, fprintf(stderr, "zinfdump: %s: %s\n", out, strerror(errno));
        if (rc) remove(tmp);
    }
    if (!rc) printf("wrote %s: %d training steps (%" PRId64 " to %" PRId64 "), %d evaluations\n", out, s.ntrain,
                    s.ntrain ? s.train[0].step : 0, s.ntrain ? s.train[s.ntrain - 1].step : 0, s.neval);
    losschart_free(&s);
    return rc;
}

int main(int argc, char **argv) {
    const char *path = NULL, *trace = NULL, *svg = NULL, *cmp = NULL, *calib = NULL, *losses = NULL;
    bool schedule = false, memory = false, kernels = false, hf = false, hf_config = false;
    int rank = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--schedule")) schedule = true;
        else if (!strcmp(a, "--memory")) memory = true;
        else if (!strcmp(a, "--kernels")) kernels = true;
        else if (!strcmp(a, "--hf")) hf = true;
        else if (!strcmp(a, "--hf-config")) hf_config = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout, 0);
        else if (!strcmp(a, "--rank") || !strcmp(a, "--trace") || !strcmp(a, "--svg") || !strcmp(a, "--compare") ||
                 !strcmp(a, "--calibrate") || !strcmp(a, "--losses")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zinfdump: %s needs a value\n", a);
                return usage(stderr, 2);
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--trace")) trace = v;
            else if (!strcmp(a, "--svg")) svg = v;
            else if (!strcmp(a, "--compare")) cmp = v;
            else if (!strcmp(a, "--calibrate")) calib = v;
            else if (!strcmp(a, "--losses")) losses = v;
            else {
                char *end;
                long r = strtol(v, &end, 10);
                if (*end || end == v || r < 0 || r > 1 << 24) {
                    fprintf(stderr, "zinfdump: --rank needs a rank number, not '%s'\n", v);
                    return 2;
                }
                rank = (int)r;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "zinfdump: unknown option '%s'\n", a);
            return usage(stderr, 2);
        } else if (path) {
            fprintf(stderr, "zinfdump: one plan at a time ('%s' and '%s')\n", path, a);
            return 2;
        } else {
            path = a;
        }
    }
    if (losses && !svg) {
        fprintf(stderr, "zinfdump: --losses needs --svg OUT.svg: where to draw it\n");
        return 2;
    }
    if (losses && (schedule || memory || kernels || hf || hf_config || trace || cmp)) {
        fprintf(stderr, "zinfdump: --losses --svg draws a chart of the run; the plan's other views are separate calls\n");
        return 2;
    }
    if (losses && !path) return loss_chart(losses, svg, NULL);
    if (!path) return usage(stderr, 2);
    if (calib && !cmp) {
        fprintf(stderr, "zinfdump: --calibrate needs --compare RUN.json: the run whose kernel times it takes\n");
        return 2;
    }
    char err[512];
    Plan *p = plan_read(path, err, sizeof err);
    if (!p) {
        fprintf(stderr, "zinfdump: %s\n", err);
        return 1;
    }
    if (rank >= p->ranks) {
        fprintf(stderr, "zinfdump: --rank %d, but the plan has %d rank%s\n", rank, p->ranks, p->ranks > 1 ? "s" : "");
        plan_free(p);
        return 2;
    }
    char msgs[4096];
    int problems = verify_plan(p, msgs, sizeof msgs);
    if (problems) {
        fprintf(stderr, "zinfdump: %s: the plan fails verification (%d problem%s):\n%s", path, problems, problems > 1 ? "s" : "", msgs);
        plan_free(p);
        return 1;
    }
    if (losses) {
        int lrc = loss_chart(losses, svg, p);
        plan_free(p);
        return lrc;
    }
    CostResult c;
    if (!cost_simulate(p, &c)) {
        fprintf(stderr, "zinfdump: out of memory\n");
        plan_free(p);
        return 1;
    }
    Timeline m = {.rank = -1};
    int rc = cmp ? read_measured(cmp, p, &m) : 0;
    if (rc) {
        cost_free(&c);
        plan_free(p);
        return rc;
    }
    if (schedule) plandump_schedule(p, rank, stdout);
    if (memory) plandump_memory(p, stdout);
    if (cmp) rc |= compare(cmp, p, &c, &m);
    if (calib) rc |= calibrate(calib, cmp, p, &m);
    if (trace) rc |= write_file(trace, p, &c, NULL, false);
    if (svg) rc |= write_file(svg, p, &c, cmp ? &m : NULL, true);
    if (kernels) plandump_kernels(p, stdout);
    if (hf) plandump_hf(p, stdout);
    if (hf_config) fputs(p->hf.config ? p->hf.config : "", stdout);
    if (!schedule && !memory && !trace && !svg && !kernels && !hf && !hf_config && !cmp) plandump_summary(p, &c, stdout);
    timeline_free(&m);
    cost_free(&c);
    plan_free(p);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}
