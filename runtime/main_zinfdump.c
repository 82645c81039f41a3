/* zinfdump: show a plan.
 *   zinfdump model.plan                 summary: memory per tier and rank, predicted step time,
 *                                       busy time per queue, the bottleneck
 *   zinfdump model.plan --schedule [--rank R]   one instruction per line
 *   zinfdump model.plan --memory        each arena's buffers
 *   zinfdump model.plan --kernels       the embedded CUDA kernels, their ptxas resource reports, the launches
 *   zinfdump model.plan --trace out.json  predicted timeline (Chrome trace / Perfetto)
 *   zinfdump model.plan --svg out.svg   timeline and GPU memory in use, drawn
 *   zinfdump model.plan --hf            the Hugging Face mapping: one line per piece
 *   zinfdump model.plan --hf-config     the config.json the plan carries, as is
 * Every plan is verified first; a plan that fails is reported and not shown. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cost.h"
#include "plan.h"
#include "plandump.h"
#include "verify.h"

static int usage(FILE *f, int rc) {
    fprintf(f, "usage: zinfdump PLAN [--schedule [--rank R]] [--memory] [--kernels] [--trace OUT.json] [--svg OUT.svg] [--hf]\n"
               "                [--hf-config]\n");
    return rc;
}

static int write_file(const char *path, const Plan *p, const CostResult *c, void (*fn)(const Plan *, const CostResult *, FILE *)) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "zinfdump: %s: cannot write: %s\n", path, strerror(errno));
        return 1;
    }
    fn(p, c, f);
    if (fclose(f) != 0) {
        fprintf(stderr, "zinfdump: %s: write failed: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *path = NULL, *trace = NULL, *svg = NULL;
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
        else if (!strcmp(a, "--rank") || !strcmp(a, "--trace") || !strcmp(a, "--svg")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zinfdump: %s needs a value\n", a);
                return usage(stderr, 2);
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--trace")) trace = v;
            else if (!strcmp(a, "--svg")) svg = v;
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
    if (!path) return usage(stderr, 2);
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
    CostResult c;
    if (!cost_simulate(p, &c)) {
        fprintf(stderr, "zinfdump: out of memory\n");
        plan_free(p);
        return 1;
    }
    int rc = 0;
    if (schedule) plandump_schedule(p, rank, stdout);
    if (memory) plandump_memory(p, stdout);
    if (trace) rc |= write_file(trace, p, &c, plandump_trace);
    if (svg) rc |= write_file(svg, p, &c, plandump_svg);
    if (kernels) plandump_kernels(p, stdout);
    if (hf) plandump_hf(p, stdout);
    if (hf_config) fputs(p->hf.config ? p->hf.config : "", stdout);
    if (!schedule && !memory && !trace && !svg && !kernels && !hf && !hf_config) plandump_summary(p, &c, stdout);
    cost_free(&c);
    plan_free(p);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}
