#include "target.h"
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* ---- schema ---- */

typedef enum Kind { K_BYTES, K_RATE, K_FLOPS, K_INT, K_STR, K_STRLIST, K_US, K_FRAC, K_POINTS, K_BYTESF, K_NVME_POINTS } Kind;

typedef struct Key {
    const char *block; /* "" for the top level */
    const char *key;
    Kind kind;
    size_t off;        /* field in PlanTarget */
} Key;

#define F(x) offsetof(PlanTarget, x)
static const Key keys[] = {
    {"", "backend", K_STR, F(backend)},
    {"", "nodes", K_INT, F(nodes)},
    {"", "gpus_per_node", K_INT, F(gpus_per_node)},
    {"", "ranks", K_INT, F(gpus_per_node)},     /* host: processes */
    {"", "budget", K_BYTES, F(gpu_memory)},     /* host: "GPU" memory per rank */
    {"gpu", "memory", K_BYTES, F(gpu_memory)},
    {"gpu", "flops", K_FLOPS, F(gpu_flops)},
    {"gpu", "hbm", K_RATE, F(gpu_hbm)},
    {"gpu", "pcie", K_RATE, F(gpu_pcie)},
    {"gpu", "arch", K_STR, F(gpu_arch)},
    {"gpu", "sms", K_INT, F(gpu_sms)},
    {"cpu", "memory", K_BYTES, F(cpu_memory)},
    {"cpu", "bandwidth", K_RATE, F(cpu_bandwidth)},
    {"cpu", "cores", K_INT, F(cpu_cores)},
    {"cpu", "flops", K_FLOPS, F(gpu_flops)},    /* host: the ranks' compute */
    {"nvme", "paths", K_STRLIST, F(nvme_paths)},
    {"nvme", "read", K_RATE, F(nvme_read)},
    {"nvme", "write", K_RATE, F(nvme_write)},
    {"nvme", "capacity", K_BYTES, F(nvme_capacity)},
    {"net", "bandwidth", K_RATE, F(net_bandwidth)},
    {"net", "inter", K_RATE, F(net_inter)},
    {"net", "latency_us", K_US, F(net_latency)},
    /* measured figures (zinfprobe writes them; docs/schedule.md, "Cost model") */
    {"gpu", "pcie_latency_us", K_US, F(pcie_latency)},
    {"gpu", "launch_us", K_US, F(kernel_latency)},
    {"cpu", "copy_us", K_US, F(pcie_latency)},  /* host: a copy's dispatch */
    {"cpu", "launch_us", K_US, F(kernel_latency)},
    {"nvme", "latency_us", K_US, F(nvme_latency)},
    {"nvme", "request_us", K_US, F(nvme_request)},
    {"nvme", "cpu_us", K_US, F(nvme_cpu)},
    {"efficiency", "gemm", K_FRAC, F(eff[FAM_GEMM])},
    {"efficiency", "attention", K_FRAC, F(eff[FAM_ATTENTION])},
    {"efficiency", "norm", K_FRAC, F(eff[FAM_NORM])},
    {"efficiency", "elementwise", K_FRAC, F(eff[FAM_ELEMENTWISE])},
    {"efficiency", "activation", K_FRAC, F(eff[FAM_ACTIVATION])},
    {"cpu", "wake_us", K_US, F(wake_latency)},
    {"cpu", "cache", K_BYTESF, F(cpu_cache)},
    {"cpu", "cache_bandwidth", K_RATE, F(cache_bandwidth)},
    {"cpu", "adam_bandwidth", K_RATE, F(adam_bandwidth)},
    {"cpu", "read_bandwidth", K_RATE, F(read_bandwidth)},
    /* timed calls per family: [flops, us, flops, us, ...] */
    {"kernels", "gemm", K_POINTS, F(kernel_points)},
    {"kernels", "attention", K_POINTS, F(kernel_points)},
    {"kernels", "norm", K_POINTS, F(kernel_points)},
    {"kernels", "elementwise", K_POINTS, F(kernel_points)},
    {"kernels", "activation", K_POINTS, F(kernel_points)},
    /* timed transfers per direction: [bytes, drive us, alone us, ...] */
    {"nvme", "reads", K_NVME_POINTS, F(nvme_points)},
    {"nvme", "writes", K_NVME_POINTS, F(nvme_points)},
};
#undef F
enum { NKEYS = sizeof keys / sizeof keys[0] };
static const char *const blocks[] = {"gpu", "cpu", "nvme", "net", "efficiency", "kernels"};
enum { NBLOCKS = sizeof blocks / sizeof blocks[0] };

static const char *kind_words(Kind k) {
    switch (k) {
    case K_BYTES:
    case K_BYTESF: return "a size in bytes (e.g. 32 GiB)";
    case K_RATE: return "a rate in bytes per second (e.g. 12 GB/s)";
    case K_FLOPS: return "a count of operations per second (e.g. 125 T)";
    case K_INT: return "a whole number";
    case K_STR: return "a string";
    case K_STRLIST: return "a list of strings";
    case K_US: return "a time in microseconds";
    case K_FRAC: return "a fraction of peak, in (0, 1]";
    case K_POINTS: return "a list of timed calls, each its FLOPs and its microseconds (e.g. [2.1e6, 23.5, 8.4e6, 88])";
    case K_NVME_POINTS:
        return "a list of timed transfers, each its bytes, its microseconds with the queues full and its microseconds "
               "alone (e.g. [4096, 7.5, 60, 65536, 40, 90])";
    }
    return "?";
}

static const char *unit_words(UnitKind u) {
    switch (u) {
    case UNIT_BYTES: return "a size in bytes";
    case UNIT_RATE: return "a rate";
    case UNIT_COUNT: return "a count";
    default: return "a plain number";
    }
}

/* A numeric literal's value with its unit's scale; false if it is not one. */
static bool number(const Expr *e, double *v, Unit *u, bool *neg) {
    *neg = false;
    if (e->kind == EX_UNARY && e->op == '-' && e->lhs) {
        *neg = true;
        e = e->lhs;
    }
    if (e->kind == EX_INT) *v = (double)e->ival;
    else if (e->kind == EX_FLOAT) *v = e->fval;
    else return false;
    *u = e->unit;
    if (u->kind != UNIT_NONE) *v *= (double)(u->scale ? u->scale : 1);
    if (*neg) *v = -*v;
    return true;
}

/* The numbers of a points list: e->args.len of them, each positive and
 * finite, into v; false (with a message) otherwise. */
static bool point_numbers(const Key *k, const Setting *s, DiagSink *d, double *v) {
    const Expr *e = s->value;
    for (int i = 0; i < e->args.len; i++) {
        const Expr *it = e->args.items[i].value;
        Unit u;
        bool neg;
        if (!it || !number(it, &v[i], &u, &neg) || (u.kind != UNIT_NONE && u.kind != UNIT_COUNT) || neg || !(v[i] > 0) ||
            !isfinite(v[i])) {
            diag_error(d, it ? it->span : e->span, "'%s' must be %s, each number positive", s->key, kind_words(k->kind));
            return false;
        }
    }
    return true;
}

/* kernels { FAMILY = [flops, us, ...] }: appended to the target's timed calls. */
static bool set_points(const Key *k, const Setting *s, DiagSink *d, Target *t) {
    const Expr *e = s->value;
    if (e->kind != EX_LIST || e->args.len < 2 || e->args.len % 2) {
        diag_error(d, e->span, "'%s' must be %s", s->key, kind_words(k->kind));
        return false;
    }
    int family = -1;
    for (int f = 0; f < PLAN_NFAMILIES; f++)
        if (!strcmp(plan_family_names[f], k->key)) family = f;
    for (int i = 0; i < t->nkernel_points; i++)
        if (t->kernel_points[i].family == family) {
            diag_error(d, s->span, "the timed calls of '%s' are given twice", s->key);
            return false;
        }
    if (family < 0 || t->nkernel_points + e->args.len / 2 > PLAN_MAX_KERNEL_POINTS) {
        diag_error(d, e->span, "at most %d timed calls in all", PLAN_MAX_KERNEL_POINTS);
        return false;
    }
    double v[2 * PLAN_MAX_KERNEL_POINTS];
    if (!point_numbers(k, s, d, v)) return false;
    for (int i = 0; i < e->args.len; i += 2)
        t->kernel_points[t->nkernel_points++] = (PlanKernelPoint){family, v[i], v[i + 1] * 1e-6};
    return true;
}

/* nvme { reads = [bytes, drive us, alone us, ...]; writes = [...] }: the
 * target's timed transfers (sizes in any order, each once). */
static bool set_nvme_points(const Key *k, const Setting *s, DiagSink *d, Target *t) {
    const Expr *e = s->value;
    int32_t write = !strcmp(k->key, "writes");
    if (e->kind != EX_LIST || e->args.len < 3 || e->args.len % 3) {
        diag_error(d, e->span, "'%s' must be %s", s->key, kind_words(k->kind));
        return false;
    }
    for (int i = 0; i < t->nnvme_points; i++)
        if (t->nvme_points[i].write == write) {
            diag_error(d, s->span, "the timed transfers of '%s' are given twice", s->key);
            return false;
        }
    if (t->nnvme_points + e->args.len / 3 > PLAN_MAX_NVME_POINTS) {
        diag_error(d, e->span, "at most %d timed transfers in all", PLAN_MAX_NVME_POINTS);
        return false;
    }
    double v[3 * PLAN_MAX_NVME_POINTS];
    if (!point_numbers(k, s, d, v)) return false;
    int first = t->nnvme_points;
    for (int i = 0; i < e->args.len; i += 3) {
        for (int j = first; j < t->nnvme_points; j++)
            if (t->nvme_points[j].bytes == v[i]) {
                diag_error(d, e->args.items[i].value->span, "'%s' times %.0f bytes twice", s->key, v[i]);
                return false;
            }
        t->nvme_points[t->nnvme_points++] = (PlanNvmePoint){write, v[i], v[i + 1] * 1e-6, v[i + 2] * 1e-6};
    }
    return true;
}

static bool set_value(const Key *k, const Setting *s, Arena *a, DiagSink *d, Target *t) {
    const Expr *e = s->value;
    char *field = (char *)t + k->off;
    if (k->kind == K_STR) {
        if (e->kind != EX_STR) {
            diag_error(d, e->span, "'%s' must be %s", s->key, kind_words(k->kind));
            return false;
        }
        *(const char **)field = arena_strndup(a, e->str, e->slen);
        return true;
    }
    if (k->kind == K_STRLIST) {
        if (e->kind != EX_LIST) {
            diag_error(d, e->span, "'%s' must be %s, e.g. [\"/local_nvme\"]", s->key, kind_words(k->kind));
            return false;
        }
        const char **paths = ARENA_NEWN(a, const char *, e->args.len ? e->args.len : 1);
        for (int i = 0; i < e->args.len; i++) {
            const Expr *it = e->args.items[i].value;
            if (!it || it->kind != EX_STR) {
                diag_error(d, it ? it->span : e->span, "'%s' must be %s", s->key, kind_words(k->kind));
                return false;
            }
            paths[i] = arena_strndup(a, it->str, it->slen);
        }
        t->nvme_paths = paths;
        t->nvme_npaths = e->args.len;
        return true;
    }
    if (k->kind == K_POINTS) return set_points(k, s, d, t);
    if (k->kind == K_NVME_POINTS) return set_nvme_points(k, s, d, t);
    double v;
    Unit u;
    bool neg;
    if (!number(e, &v, &u, &neg)) {
        diag_error(d, e->span, "'%s' must be %s", s->key, kind_words(k->kind));
        return false;
    }
    static const UnitKind want[] = {[K_BYTES] = UNIT_BYTES, [K_RATE] = UNIT_RATE, [K_FLOPS] = UNIT_COUNT,
                                    [K_INT] = UNIT_COUNT, [K_US] = UNIT_NONE,
                                    [K_FRAC] = UNIT_NONE, [K_POINTS] = UNIT_NONE, [K_BYTESF] = UNIT_BYTES,
                                    [K_NVME_POINTS] = UNIT_NONE};
    if (u.kind != UNIT_NONE && u.kind != want[k->kind]) {
        diag_error(d, e->span, "'%s' must be %s, not %s", s->key, kind_words(k->kind), unit_words(u.kind));
        return false;
    }
    if (e->kind == EX_INT && e->overflow) {
        diag_error(d, e->span, "'%s': number too large", s->key);
        return false;
    }
    if (neg || v <= 0 || !isfinite(v)) {
        diag_error(d, e->span, "'%s' must be positive", s->key);
        return false;
    }
    switch (k->kind) {
    case K_BYTES:
        if (v >= 1.8e19) {
            diag_error(d, e->span, "'%s': size too large", s->key);
            return false;
        }
        *(uint64_t *)field = (uint64_t)llround(v);
        break;
    case K_INT:
        if (v != floor(v) || v > 1e9) {
            diag_error(d, e->span, "'%s' must be a whole number up to 1e9", s->key);
            return false;
        }
        *(int32_t *)field = (int32_t)v;
        break;
    case K_US:
        *(double *)field = v * 1e-6; /* *_us -> seconds */
        break;
    case K_FRAC:
        if (v > 1) {
            diag_error(d, e->span, "'%s' must be %s", s->key, kind_words(k->kind));
            return false;
        }
        *(double *)field = v;
        break;
    default: *(double *)field = v;
    }
    return true;
}

static void hint_nearest(DiagSink *d, const char *name, const char *block) {
    const char *cands[NKEYS + NBLOCKS];
    int n = 0;
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].block, block)) cands[n++] = keys[i].key;
    if (!*block)
        for (int i = 0; i < NBLOCKS; i++) cands[n++] = blocks[i];
    const char *near = diag_nearest(name, cands, n);
    if (near) diag_hint(d, "did you mean '%s'?", near);
}

static bool eval_list(const SettingList *l, const char *block, Arena *a, DiagSink *d, Target *t, unsigned *seen) {
    bool ok = true;
    for (int i = 0; i < l->len; i++) {
        const Setting *s = l->items[i];
        if (s->is_block) {
            bool known = false;
            for (int b = 0; b < NBLOCKS && !*block; b++) known |= !strcmp(s->key, blocks[b]);
            if (!known) {
                diag_error(d, s->span, *block ? "unexpected block '%s' inside '%s'" : "unknown target block '%s'%s", s->key,
                           *block ? block : "");
                if (!*block) hint_nearest(d, s->key, "");
                ok = false;
                continue;
            }
            ok &= eval_list(&s->block, s->key, a, d, t, seen);
            continue;
        }
        int k = -1;
        for (int j = 0; j < NKEYS; j++)
            if (!strcmp(keys[j].block, block) && !strcmp(keys[j].key, s->key)) k = j;
        if (k < 0) {
            if (*block) diag_error(d, s->span, "unknown key '%s' in target block '%s'", s->key, block);
            else diag_error(d, s->span, "unknown target key '%s'", s->key);
            hint_nearest(d, s->key, block);
            ok = false;
            continue;
        }
        if (s->selector) {
            diag_error(d, s->selector_span, "'%s' takes no selector", s->key);
            ok = false;
            continue;
        }
        if (!s->value) {
            ok = false;
            continue;
        }
        if (!set_value(&keys[k], s, a, d, t)) ok = false;
        else seen[k / 32] |= 1u << (k % 32);
    }
    return ok;
}

static bool has(const unsigned *seen, const char *block, const char *key) {
    for (int j = 0; j < NKEYS; j++)
        if (!strcmp(keys[j].block, block) && !strcmp(keys[j].key, key)) return seen[j / 32] >> (j % 32) & 1;
    return false;
}

static void defaults(Target *t) {
    memset(t, 0, sizeof *t);
    t->name = "";
    t->backend = "cuda";
    t->gpu_arch = "";
    t->nodes = 1;
    t->gpus_per_node = 1;
    t->net_latency = 10e-6;
}

/* Fills what a block left out from what it gave, the same way for every
 * source of a target. */
static void complete(Target *t) {
    bool host = !strcmp(t->backend, "host");
    if (host) {
        t->nodes = 1;
        if (!t->cpu_bandwidth) t->cpu_bandwidth = 20e9;
        double per = t->cpu_bandwidth / (t->gpus_per_node > 0 ? t->gpus_per_node : 1);
        if (!t->gpu_flops) t->gpu_flops = 20e9;
        t->gpu_hbm = per;
        t->gpu_pcie = per;
        if (!t->net_bandwidth) t->net_bandwidth = per;
    }
    if (!t->gpu_hbm) t->gpu_hbm = 1e12;
    if (!t->cpu_bandwidth) t->cpu_bandwidth = 100e9;
    if (!t->cpu_cores) t->cpu_cores = 8;
    if (!t->net_bandwidth) t->net_bandwidth = 10e9;
    if (!t->net_inter) t->net_inter = t->net_bandwidth;
    if (t->nvme_capacity) {
        if (!t->nvme_read) t->nvme_read = 2e9;
        if (!t->nvme_write) t->nvme_write = t->nvme_read / 2;
    }
}

bool target_from_decl(const Decl *decl, Arena *a, DiagSink *d, Target *out) {
    Target t;
    defaults(&t);
    t.name = decl->name ? arena_strdup(a, decl->name) : "";
    unsigned seen[2] = {0, 0};
    int before = d->errors;
    bool ok = eval_list(&decl->settings, "", a, d, &t, seen);
    bool host = !strcmp(t.backend, "host");
    if (strcmp(t.backend, "cuda") && !host) {
        diag_error(d, decl->name_span, "target '%s': backend must be \"cuda\" or \"host\", not \"%s\"", t.name, t.backend);
        ok = false;
    }
    static const char *const need_cuda[][2] = {{"", "gpus_per_node"}, {"gpu", "memory"}, {"gpu", "flops"}, {"gpu", "pcie"}, {"cpu", "memory"}};
    static const char *const need_host[][2] = {{"", "ranks"}, {"", "budget"}, {"cpu", "memory"}};
    const char *const(*need)[2] = host ? need_host : need_cuda;
    int nneed = host ? 3 : 5;
    /* every missing key in one message, so that a target is written in one attempt */
    char missing[256] = "";
    int nmissing = 0;
    for (int i = 0; i < nneed && d->errors == before; i++)
        if (!has(seen, need[i][0], need[i][1])) {
            size_t u = strlen(missing);
            if (*need[i][0]) snprintf(missing + u, sizeof missing - u, "%s'%s' in its %s block", u ? ", " : "", need[i][1], need[i][0]);
            else snprintf(missing + u, sizeof missing - u, "%s'%s'", u ? ", " : "", need[i][1]);
            nmissing++;
        }
    if (nmissing) {
        diag_error(d, decl->name_span, "target '%s' needs %s", t.name, missing);
        diag_hint(d, host ? "a host target needs ranks, budget and cpu { memory }, and nvme { paths; capacity } to offload to NVMe; "
                            "zinfprobe [--nvme DIR] -o FILE writes one with this machine's measured figures"
                          : "a cuda target needs gpus_per_node, gpu { memory; flops; pcie } and cpu { memory }, and nvme { "
                            "paths; capacity } to offload to NVMe; zinfprobe -o FILE on the machine writes one with its figures");
        ok = false;
    }
    if (ok && t.nvme_capacity && !t.nvme_npaths) {
        diag_error(d, decl->name_span, "target '%s': nvme has a capacity but no paths", t.name);
        ok = false;
    }
    if (ok && t.nvme_npaths && !t.nvme_capacity) {
        diag_error(d, decl->name_span, "target '%s': nvme needs 'capacity'", t.name);
        ok = false;
    }
    if (!ok) return false;
    complete(&t);
    *out = t;
    return true;
}

const Decl *target_find(const Program *prog, const char *name) {
    for (int f = 0; f < prog->nfiles; f++)
        for (int i = 0; i < prog->files[f]->decls.len; i++) {
            const Decl *dl = prog->files[f]->decls.items[i];
            if (dl->kind == DL_TARGET && (!name || (dl->name && !strcmp(dl->name, name)))) return dl;
        }
    return NULL;
}

bool target_from_program(const Program *prog, const char *name, Arena *a, DiagSink *d, Target *out) {
    const Decl *dl = target_find(prog, name);
    if (!dl) {
        if (name) diag_error(d, SPAN_NONE, "no target named '%s' is declared", name);
        else diag_error(d, SPAN_NONE, "no target declaration (target NAME { ... }) found");
        return false;
    }
    return target_from_decl(dl, a, d, out);
}

/* ---- built-in targets (the same numbers as the files in examples/targets) ---- */

static const char *const dgx_paths[] = {"/local_nvme"};
static const char *const h200_paths[] = {"/tmp/zinf-nvme"};
static const char *const host_paths[] = {"/tmp/zinf-nvme"};

#define GB 1e9
#define GiB (1024.0 * 1024 * 1024)
#define TiB (GiB * 1024)
static const PlanTarget builtins[] = {
    {.name = "dgx2", .backend = "cuda", .nodes = 1, .gpus_per_node = 16, .gpu_memory = (uint64_t)(32 * GiB),
     .gpu_flops = 125e12, .gpu_hbm = 900 * GB, .gpu_pcie = 12 * GB, .gpu_arch = "sm_70", .gpu_sms = 80,
     .cpu_memory = (uint64_t)(1.5 * TiB), .cpu_bandwidth = 100 * GB, .cpu_cores = 48, .nvme_npaths = 1,
     .nvme_paths = (const char **)dgx_paths, .nvme_read = 25 * GB, .nvme_write = 12 * GB, .nvme_capacity = (uint64_t)30e12,
     .net_bandwidth = 150 * GB, .net_inter = 12.5 * GB, .net_latency = 5e-6},
    {.name = "dgx-a100", .backend = "cuda", .nodes = 1, .gpus_per_node = 8, .gpu_memory = (uint64_t)(80 * GiB),
     .gpu_flops = 312e12, .gpu_hbm = 2039 * GB, .gpu_pcie = 25 * GB, .gpu_arch = "sm_80", .gpu_sms = 108,
     .cpu_memory = (uint64_t)(2 * TiB), .cpu_bandwidth = 200 * GB, .cpu_cores = 128, .nvme_npaths = 1,
     .nvme_paths = (const char **)dgx_paths, .nvme_read = 25 * GB, .nvme_write = 12 * GB, .nvme_capacity = (uint64_t)30e12,
     .net_bandwidth = 300 * GB, .net_inter = 25 * GB, .net_latency = 5e-6},
    {.name = "dgx-h100", .backend = "cuda", .nodes = 1, .gpus_per_node = 8, .gpu_memory = (uint64_t)(80 * GiB),
     .gpu_flops = 989e12, .gpu_hbm = 3350 * GB, .gpu_pcie = 50 * GB, .gpu_arch = "sm_90", .gpu_sms = 132,
     .cpu_memory = (uint64_t)(2 * TiB), .cpu_bandwidth = 300 * GB, .cpu_cores = 112, .nvme_npaths = 1,
     .nvme_paths = (const char **)dgx_paths, .nvme_read = 50 * GB, .nvme_write = 25 * GB, .nvme_capacity = (uint64_t)30e12,
     .net_bandwidth = 450 * GB, .net_inter = 50 * GB, .net_latency = 5e-6},
    {.name = "h200", .backend = "cuda", .nodes = 1, .gpus_per_node = 1, .gpu_memory = (uint64_t)(139 * GiB),
     .gpu_flops = 989e12, .gpu_hbm = 4800 * GB, .gpu_pcie = 50 * GB, .gpu_arch = "sm_90", .gpu_sms = 132,
     .cpu_memory = (uint64_t)(128 * GiB), .cpu_bandwidth = 100 * GB, .cpu_cores = 16, .nvme_npaths = 1,
     .nvme_paths = (const char **)h200_paths, .nvme_read = 2 * GB, .nvme_write = 1 * GB, .nvme_capacity = (uint64_t)(64 * GiB),
     .net_bandwidth = 100 * GB, .net_inter = 100 * GB, .net_latency = 5e-6},
    {.name = "host", .backend = "host", .nodes = 1, .gpus_per_node = 4, .gpu_memory = (uint64_t)(2 * GiB),
     .gpu_flops = 20e9, .gpu_arch = "", .cpu_memory = (uint64_t)(16 * GiB), .cpu_bandwidth = 20 * GB, .cpu_cores = 2,
     .nvme_npaths = 1, .nvme_paths = (const char **)host_paths, .nvme_read = 1 * GB, .nvme_write = 1 * GB,
     .nvme_capacity = (uint64_t)(16 * GiB), .net_latency = 10e-6},
};
const char *const target_builtin_names[] = {"dgx2", "dgx-a100", "dgx-h100", "h200", "host"};
const int target_nbuiltins = sizeof builtins / sizeof builtins[0];

bool target_builtin(const char *name, Target *out) {
    for (int i = 0; i < target_nbuiltins; i++)
        if (!strcmp(builtins[i].name, name)) {
            *out = builtins[i];
            complete(out);
            return true;
        }
    return false;
}

int target_ranks(const Target *t) { return t->nodes * t->gpus_per_node; }

uint64_t target_cpu_per_rank(const Target *t) {
    return t->cpu_memory / (uint64_t)(t->gpus_per_node > 0 ? t->gpus_per_node : 1);
}

/* ---- this machine ---- */

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_mem_fn)(size_t *, int);
typedef int (*cu_attr_fn)(int *, int, int);

/* Dense half-precision tensor-core FLOPs per SM per clock, by major version. */
static double flops_per_sm_clock(int major) {
    return major >= 9 ? 4096 : major >= 8 ? 2048 : major >= 7 ? 1024 : 256;
}

static bool detect_cuda(Arena *a, Target *t, const char **how) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return false;
    cu_init_fn init = (cu_init_fn)(uintptr_t)dlsym(h, "cuInit");
    cu_count_fn count = (cu_count_fn)(uintptr_t)dlsym(h, "cuDeviceGetCount");
    cu_get_fn get = (cu_get_fn)(uintptr_t)dlsym(h, "cuDeviceGet");
    cu_mem_fn mem = (cu_mem_fn)(uintptr_t)dlsym(h, "cuDeviceTotalMem_v2");
    cu_attr_fn attr = (cu_attr_fn)(uintptr_t)dlsym(h, "cuDeviceGetAttribute");
    int n = 0, dev = 0;
    size_t bytes = 0;
    bool ok = init && count && get && mem && attr && init(0) == 0 && count(&n) == 0 && n > 0 && get(&dev, 0) == 0 &&
              mem(&bytes, dev) == 0;
    if (ok) {
        int sms = 0, major = 0, minor = 0, clock_khz = 0, memclk_khz = 0, bus = 0;
        attr(&sms, 16, dev);        /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
        attr(&major, 75, dev);      /* COMPUTE_CAPABILITY_MAJOR */
        attr(&minor, 76, dev);      /* COMPUTE_CAPABILITY_MINOR */
        attr(&clock_khz, 13, dev);  /* CLOCK_RATE */
        attr(&memclk_khz, 36, dev); /* MEMORY_CLOCK_RATE */
        attr(&bus, 37, dev);        /* GLOBAL_MEMORY_BUS_WIDTH */
        t->name = "detected";
        t->gpus_per_node = n;
        t->gpu_memory = bytes;
        t->gpu_sms = sms;
        t->gpu_arch = arena_printf(a, "sm_%d%d", major, minor);
        t->gpu_flops = sms * (double)clock_khz * 1e3 * flops_per_sm_clock(major);
        t->gpu_hbm = 2.0 * memclk_khz * 1e3 * bus / 8;
        t->gpu_pcie = 25e9;
        t->net_bandwidth = 100e9;
        char mb[32];
        *how = arena_printf(a, "%d GPU%s found through libcuda (%s, %s, %d SMs)", n, n > 1 ? "s" : "", t->gpu_arch,
                            plan_bytes_str(bytes, mb, sizeof mb), sms);
    }
    dlclose(h);
    return ok;
}

bool target_detect(Arena *a, Target *out, const char **how) {
    Target t;
    defaults(&t);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE), cores = sysconf(_SC_NPROCESSORS_ONLN);
    t.cpu_memory = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : (uint64_t)(8 * GiB);
    t.cpu_cores = cores > 0 ? (int32_t)cores : 1;
    if (!detect_cuda(a, &t, how)) {
        t.name = "detected-host";
        t.backend = "host";
        t.gpus_per_node = t.cpu_cores;
        /* a quarter of host memory for the ranks' working sets, the rest for homes */
        t.gpu_memory = t.cpu_memory / 4 / (uint64_t)t.gpus_per_node;
        char mb[32];
        *how = arena_printf(a, "no GPU driver found: host target from sysconf (%d cores, %s memory, %d ranks)", t.cpu_cores,
                            plan_bytes_str(t.cpu_memory, mb, sizeof mb), t.gpus_per_node);
    }
    complete(&t);
    *out = t;
    return true;
}
