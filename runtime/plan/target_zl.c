#include "target_zl.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A figure the reader takes: positive and finite (0 is "not given"). */
static bool given(double v) { return isfinite(v) && v > 0; }

/* v in the fewest digits that read back as v (at most 17). */
static void num(FILE *f, double v) {
    char b[40];
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(b, sizeof b, "%.*g", digits, v);
        if (strtod(b, NULL) == v) break;
    }
    fputs(b, f);
}

/* ` KEY = V;` for a given figure, V times scale (1e6 for the microsecond
 * keys); *first says whether a separator is due. */
static void fig(FILE *f, bool *first, const char *key, double v, double scale) {
    if (!given(v)) return;
    fprintf(f, "%s%s = ", *first ? " " : "; ", key);
    num(f, v * scale);
    *first = false;
}

static void str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c == '\n') fputs("\\n", f);
        else if (*c == '\t') fputs("\\t", f);
        else if (*c < 0x20 || *c == 0x7f) fprintf(f, "\\x%02x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

static bool point_given(const PlanKernelPoint *q, int fam) { return q->family == fam && given(q->flops) && given(q->secs); }

static void kernels(FILE *f, const PlanTarget *t) {
    int n = t->nkernel_points < PLAN_MAX_KERNEL_POINTS ? t->nkernel_points : PLAN_MAX_KERNEL_POINTS;
    bool open = false;
    for (int fam = 0; fam < PLAN_NFAMILIES; fam++) {
        int w = 0;
        for (int i = 0; i < n; i++) {
            const PlanKernelPoint *q = &t->kernel_points[i];
            if (!point_given(q, fam)) continue;
            if (!open) fputs("  kernels { # timed calls: FLOPs, microseconds\n", f);
            open = true;
            if (!w) fprintf(f, "    %s = [", plan_family_names[fam]);
            fputs(w++ ? ", " : "", f);
            num(f, q->flops);
            fputs(", ", f);
            num(f, q->secs * 1e6);
        }
        if (w) fputs("]\n", f);
    }
    if (open) fputs("  }\n", f);
}

bool plan_target_write(FILE *f, const PlanTarget *t, const char *name) {
    char id[128];
    snprintf(id, sizeof id, "%s", name ? name : t->name && *t->name ? t->name : "machine");
    for (char *c = id; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_')) *c = '_';
    if (id[0] >= '0' && id[0] <= '9') id[0] = '_';
    bool host = t->backend && !strcmp(t->backend, "host"), first;
    fprintf(f, "target %s {\n  backend = ", id);
    str(f, host ? "host" : "cuda");
    fputc('\n', f);
    if (host) {
        fprintf(f, "  ranks = %d\n  budget = %llu\n", t->gpus_per_node, (unsigned long long)t->gpu_memory);
    } else {
        fprintf(f, "  nodes = %d\n  gpus_per_node = %d\n", t->nodes, t->gpus_per_node);
        fprintf(f, "  gpu  {");
        first = true;
        fig(f, &first, "memory", (double)t->gpu_memory, 1);
        fig(f, &first, "flops", t->gpu_flops, 1);
        fig(f, &first, "hbm", t->gpu_hbm, 1);
        fig(f, &first, "pcie", t->gpu_pcie, 1);
        fprintf(f, "%sarch = ", first ? " " : "; ");
        str(f, t->gpu_arch);
        first = false;
        if (t->gpu_sms > 0) fprintf(f, "; sms = %d", t->gpu_sms);
        fig(f, &first, "pcie_latency_us", t->pcie_latency, 1e6);
        fig(f, &first, "launch_us", t->kernel_latency, 1e6);
        fputs(" }\n", f);
    }
    fprintf(f, "  cpu  {");
    first = true;
    fig(f, &first, "memory", (double)t->cpu_memory, 1);
    fig(f, &first, "bandwidth", t->cpu_bandwidth, 1);
    if (t->cpu_cores > 0) fprintf(f, "%scores = %d", first ? " " : "; ", t->cpu_cores), first = false;
    if (host) {
        fig(f, &first, "flops", t->gpu_flops, 1);
        fig(f, &first, "launch_us", t->kernel_latency, 1e6);
        fig(f, &first, "copy_us", t->pcie_latency, 1e6);
    }
    fig(f, &first, "wake_us", t->wake_latency, 1e6);
    fig(f, &first, "cache", t->cpu_cache, 1);
    fig(f, &first, "cache_bandwidth", t->cache_bandwidth, 1);
    fig(f, &first, "adam_bandwidth", t->adam_bandwidth, 1);
    fig(f, &first, "read_bandwidth", t->read_bandwidth, 1);
    fputs(" }\n", f);
    bool any_eff = false;
    for (int fam = 0; fam < PLAN_NFAMILIES; fam++) any_eff |= given(t->eff[fam]) && t->eff[fam] <= 1;
    if (any_eff) {
        fputs("  efficiency {", f);
        first = true;
        for (int fam = 0; fam < PLAN_NFAMILIES; fam++)
            if (t->eff[fam] <= 1) fig(f, &first, plan_family_names[fam], t->eff[fam], 1);
        fputs(" }\n", f);
    }
    kernels(f, t);
    if (t->nvme_npaths > 0) {
        fputs("  nvme { paths = [", f);
        for (int i = 0; i < t->nvme_npaths; i++) {
            if (i) fputs(", ", f);
            str(f, t->nvme_paths[i]);
        }
        fputs("]", f);
        first = false;
        fig(f, &first, "read", t->nvme_read, 1);
        fig(f, &first, "write", t->nvme_write, 1);
        fig(f, &first, "capacity", (double)t->nvme_capacity, 1);
        fig(f, &first, "latency_us", t->nvme_latency, 1e6);
        fig(f, &first, "request_us", t->nvme_request, 1e6);
        fig(f, &first, "cpu_us", t->nvme_cpu, 1e6);
        for (int dir = 0; dir < 2; dir++) {
            int w = 0;
            for (int i = 0; i < t->nnvme_points && i < PLAN_MAX_NVME_POINTS; i++) {
                const PlanNvmePoint *q = &t->nvme_points[i];
                if (q->write != dir || !given(q->bytes) || !given(q->drive) || !given(q->alone)) continue;
                fputs(w++ ? ", " : dir ? ";\n         writes = [" : ";\n         reads = [", f);
                num(f, q->bytes);
                fputs(", ", f);
                num(f, q->drive * 1e6);
                fputs(", ", f);
                num(f, q->alone * 1e6);
            }
            if (w) fputs("]", f);
        }
        fputs(" }\n", f);
    }
    fputs("  net  {", f);
    first = true;
    fig(f, &first, "bandwidth", t->net_bandwidth, 1);
    if (t->net_inter != t->net_bandwidth) fig(f, &first, "inter", t->net_inter, 1);
    fig(f, &first, "latency_us", t->net_latency, 1e6);
    fputs(" }\n}\n", f);
    return !ferror(f);
}
