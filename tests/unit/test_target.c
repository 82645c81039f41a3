#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "loader.h"
#include "target.h"
#include "target_zl.h"

/* AST pieces built by hand, as the parser would */
static Arena A;
static Expr *num(double v, UnitKind k, uint64_t scale, bool is_float) {
    Expr *e = ARENA_NEW(&A, Expr);
    e->kind = is_float ? EX_FLOAT : EX_INT;
    e->ival = (int64_t)v;
    e->fval = v;
    e->unit = (Unit){k, k == UNIT_NONE ? 1 : scale};
    e->span = SPAN_NONE;
    return e;
}
static Expr *str(const char *s) {
    Expr *e = ARENA_NEW(&A, Expr);
    e->kind = EX_STR;
    e->str = s;
    e->slen = strlen(s);
    e->span = SPAN_NONE;
    return e;
}
static Setting *set(const char *key, Expr *v) {
    Setting *s = ARENA_NEW(&A, Setting);
    s->key = key;
    s->value = v;
    s->span = s->selector_span = SPAN_NONE;
    return s;
}
static void push(SettingList *l, Setting *s) {
    Setting **n = ARENA_NEWN(&A, Setting *, l->len + 1);
    if (l->len) memcpy(n, l->items, sizeof *n * (size_t)l->len);
    n[l->len++] = s;
    l->items = n;
    l->cap = l->len;
}
static Setting *block(const char *key) {
    Setting *s = set(key, NULL);
    s->is_block = true;
    return s;
}
static Decl *decl(const char *name) {
    Decl *d = ARENA_NEW(&A, Decl);
    d->kind = DL_TARGET;
    d->name = name;
    d->span = d->name_span = SPAN_NONE;
    return d;
}

static const char *msg(const DiagSink *d, int level, int nth) {
    for (int i = 0; i < d->len; i++)
        if ((int)d->items[i].level == level && nth-- == 0) return d->items[i].msg;
    return "";
}

/* target dgx2 { nodes = 2; gpus_per_node = 16; gpu { memory = 32 GiB; flops = 125 T; pcie = 12 GB/s; arch = "sm_70" }
 *               cpu { memory = 1.5 TiB }  nvme { paths = ["/a", "/b"]; read = 25 GB/s; capacity = 30 TB } net { latency_us = 5 } } */
static Decl *dgx2_decl(Setting **gpu_out) {
    Decl *d = decl("dgx2");
    push(&d->settings, set("nodes", num(2, UNIT_NONE, 1, false)));
    push(&d->settings, set("gpus_per_node", num(16, UNIT_NONE, 1, false)));
    Setting *gpu = block("gpu");
    push(&gpu->block, set("memory", num(32, UNIT_BYTES, 1ull << 30, false)));
    push(&gpu->block, set("flops", num(125, UNIT_COUNT, 1000000000000ull, false)));
    push(&gpu->block, set("pcie", num(12, UNIT_RATE, 1000000000ull, false)));
    push(&gpu->block, set("arch", str("sm_70")));
    push(&d->settings, gpu);
    Setting *cpu = block("cpu");
    push(&cpu->block, set("memory", num(1.5, UNIT_BYTES, 1ull << 40, true)));
    push(&d->settings, cpu);
    Setting *nv = block("nvme");
    Expr *paths = ARENA_NEW(&A, Expr);
    paths->kind = EX_LIST;
    paths->span = SPAN_NONE;
    Arg *args = ARENA_NEWN(&A, Arg, 2);
    args[0].value = str("/a");
    args[1].value = str("/b");
    paths->args = (ArgList){args, 2, 2};
    push(&nv->block, set("paths", paths));
    push(&nv->block, set("read", num(25, UNIT_RATE, 1000000000ull, false)));
    push(&nv->block, set("capacity", num(30, UNIT_BYTES, 1000000000000ull, false)));
    push(&d->settings, nv);
    Setting *net = block("net");
    push(&net->block, set("latency_us", num(5, UNIT_NONE, 1, false)));
    push(&d->settings, net);
    if (gpu_out) *gpu_out = gpu;
    return d;
}

START_TEST(from_decl) {
    arena_init(&A);
    DiagSink d;
    diag_init(&d);
    Target t;
    ck_assert(target_from_decl(dgx2_decl(NULL), &A, &d, &t));
    ck_assert_int_eq(d.errors, 0);
    ck_assert_str_eq(t.name, "dgx2");
    ck_assert_str_eq(t.backend, "cuda");
    ck_assert_int_eq(target_ranks(&t), 32);
    ck_assert_uint_eq(t.gpu_memory, 32ull << 30);
    ck_assert(t.gpu_flops == 125e12);
    ck_assert(t.gpu_pcie == 12e9);
    ck_assert_str_eq(t.gpu_arch, "sm_70");
    ck_assert_uint_eq(t.cpu_memory, 3ull << 39);
    ck_assert_int_eq(t.nvme_npaths, 2);
    ck_assert_str_eq(t.nvme_paths[1], "/b");
    ck_assert(t.nvme_read == 25e9);
    ck_assert(t.nvme_write == 12.5e9); /* default: half the read rate */
    ck_assert(fabs(t.net_latency - 5e-6) < 1e-12);
    ck_assert(t.net_inter == t.net_bandwidth);
    ck_assert_uint_eq(target_cpu_per_rank(&t), (3ull << 39) / 16);
    diag_free(&d);
    arena_free(&A);
}
END_TEST

START_TEST(errors) {
    arena_init(&A);
    DiagSink d;
    diag_init(&d);
    Target t;
    Setting *gpu;
    Decl *dl = dgx2_decl(&gpu);
    gpu->block.items[0]->key = "memroy";
    push(&gpu->block, set("hbm", num(32, UNIT_BYTES, 1ull << 30, false)));
    push(&dl->settings, set("gpus_per_nod", num(4, UNIT_NONE, 1, false)));
    push(&dl->settings, set("nodes", num(-1, UNIT_NONE, 1, false)));
    dl->settings.items[dl->settings.len - 1]->value->kind = EX_INT;
    dl->settings.items[dl->settings.len - 1]->value->ival = 0;
    push(&dl->settings, block("disk"));
    ck_assert(!target_from_decl(dl, &A, &d, &t));
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 0), "unknown key 'memroy' in target block 'gpu'");
    ck_assert_str_eq(msg(&d, DIAG_HINT, 0), "did you mean 'memory'?");
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 1), "'hbm' must be a rate in bytes per second (e.g. 12 GB/s), not a size in bytes");
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 2), "unknown target key 'gpus_per_nod'");
    ck_assert_str_eq(msg(&d, DIAG_HINT, 1), "did you mean 'gpus_per_node'?");
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 3), "'nodes' must be positive");
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 4), "unknown target block 'disk'");
    ck_assert_int_eq(d.errors, 5);
    diag_free(&d);

    /* missing required keys */
    diag_init(&d);
    Decl *e = decl("tiny");
    push(&e->settings, set("gpus_per_node", num(1, UNIT_NONE, 1, false)));
    ck_assert(!target_from_decl(e, &A, &d, &t));
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 0), "target 'tiny' needs 'memory' in its gpu block, 'flops' in its gpu block, "
                                             "'pcie' in its gpu block, 'memory' in its cpu block");
    diag_free(&d);

    diag_init(&d);
    Decl *h = decl("laptop");
    push(&h->settings, set("backend", str("host")));
    push(&h->settings, set("ranks", num(2, UNIT_NONE, 1, false)));
    ck_assert(!target_from_decl(h, &A, &d, &t));
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 0), "target 'laptop' needs 'budget', 'memory' in its cpu block");
    ck_assert_int_eq(d.errors, 1);
    ck_assert_str_eq(msg(&d, DIAG_HINT, 0), "a host target needs ranks, budget and cpu { memory }, and nvme { paths; capacity } to "
                                            "offload to NVMe; zinfprobe [--nvme DIR] -o FILE writes one with this machine's measured figures");
    diag_free(&d);

    diag_init(&d);
    push(&h->settings, set("budget", num(1, UNIT_BYTES, 1ull << 30, false)));
    Setting *cpu = block("cpu");
    push(&cpu->block, set("memory", num(8, UNIT_BYTES, 1ull << 30, false)));
    push(&cpu->block, set("cores", str("four")));
    push(&h->settings, cpu);
    ck_assert(!target_from_decl(h, &A, &d, &t));
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 0), "'cores' must be a whole number");
    diag_free(&d);

    diag_init(&d);
    cpu->block.len = 1;
    ck_assert(target_from_decl(h, &A, &d, &t));
    ck_assert_str_eq(t.backend, "host");
    ck_assert_int_eq(target_ranks(&t), 2);
    ck_assert_uint_eq(t.gpu_memory, 1ull << 30);
    diag_free(&d);
    arena_free(&A);
}
END_TEST

START_TEST(from_program) {
    arena_init(&A);
    DiagSink d;
    diag_init(&d);
    Decl *other = decl("x");
    other->kind = DL_CONST;
    Decl *items[] = {other, dgx2_decl(NULL)};
    AstFile f = {0, {items, 2, 2}};
    AstFile *files[] = {&f};
    Program prog = {files, 1, 1};
    Target t;
    ck_assert(target_from_program(&prog, NULL, &A, &d, &t));
    ck_assert_str_eq(t.name, "dgx2");
    ck_assert(target_from_program(&prog, "dgx2", &A, &d, &t));
    ck_assert(!target_from_program(&prog, "dgx3", &A, &d, &t));
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 0), "no target named 'dgx3' is declared");
    f.decls.len = 1;
    ck_assert(!target_from_program(&prog, NULL, &A, &d, &t));
    ck_assert_str_eq(msg(&d, DIAG_ERROR, 1), "no target declaration (target NAME { ... }) found");
    diag_free(&d);
    arena_free(&A);
}
END_TEST

START_TEST(builtins) {
    Target t;
    for (int i = 0; i < target_nbuiltins; i++) {
        ck_assert(target_builtin(target_builtin_names[i], &t));
        ck_assert_str_eq(t.name, target_builtin_names[i]);
        ck_assert_int_gt(target_ranks(&t), 0);
        ck_assert_uint_gt(t.gpu_memory, 0);
        ck_assert(t.net_inter > 0 && t.gpu_hbm > 0 && t.gpu_pcie > 0);
    }
    ck_assert(target_builtin("dgx2", &t));
    ck_assert_int_eq(target_ranks(&t), 16);
    ck_assert_uint_eq(t.gpu_memory, 32ull << 30);
    ck_assert_uint_eq(t.cpu_memory, 3ull << 39);
    ck_assert_uint_eq(t.nvme_capacity, 30000000000000ull);
    ck_assert(target_builtin("h200", &t));
    ck_assert_uint_eq(t.gpu_memory, 139ull << 30);
    ck_assert_uint_eq(t.cpu_memory, 128ull << 30);
    ck_assert_uint_eq(t.nvme_capacity, 64ull << 30);
    ck_assert(!target_builtin("dgx-9000", &t));
}
END_TEST

/* examples/targets/NAME.zl describe the same machines as the built-ins */
START_TEST(example_files_match_builtins) {
    static const char *const files[][2] = {{"examples/targets/dgx2.zl", "dgx2"}, {"examples/targets/dgx-a100.zl", "dgx-a100"},
                                           {"examples/targets/dgx-h100.zl", "dgx-h100"}, {"examples/targets/h200.zl", "h200"},
                                           {"examples/targets/host.zl", "host"}};
    for (int i = 0; i < 5; i++) {
        Arena a;
        arena_init(&a);
        SourceSet src;
        source_set_init(&src);
        DiagSink d;
        diag_init(&d);
        LoadOptions lo = {NULL, 0, "stdlib"};
        Program prog;
        memset(&prog, 0, sizeof prog);
        ck_assert_msg(program_load(&a, &src, &d, files[i][0], &lo, &prog) && d.errors == 0, "%s does not load", files[i][0]);
        Target t, bt;
        ck_assert_msg(target_from_program(&prog, NULL, &a, &d, &t), "%s: %s", files[i][0], d.len ? d.items[0].msg : "");
        ck_assert(target_builtin(files[i][1], &bt));
        ck_assert_str_eq(t.backend, bt.backend);
        ck_assert_int_eq(target_ranks(&t), target_ranks(&bt));
        ck_assert_uint_eq(t.gpu_memory, bt.gpu_memory);
        ck_assert_msg(t.gpu_flops == bt.gpu_flops && t.gpu_hbm == bt.gpu_hbm && t.gpu_pcie == bt.gpu_pcie, "%s: gpu rates", files[i][0]);
        ck_assert_str_eq(t.gpu_arch, bt.gpu_arch);
        ck_assert_uint_eq(t.cpu_memory, bt.cpu_memory);
        ck_assert(t.cpu_bandwidth == bt.cpu_bandwidth);
        ck_assert_uint_eq(t.nvme_capacity, bt.nvme_capacity);
        ck_assert(t.nvme_read == bt.nvme_read && t.nvme_write == bt.nvme_write);
        ck_assert_msg(t.net_bandwidth == bt.net_bandwidth && t.net_inter == bt.net_inter, "%s: net", files[i][0]);
        ck_assert_msg(fabs(t.net_latency - bt.net_latency) < 1e-12, "%s: latency", files[i][0]);
        ck_assert_str_eq(t.nvme_paths[0], bt.nvme_paths[0]);
        diag_free(&d);
        source_set_free(&src);
        arena_free(&a);
    }
}
END_TEST

/* a == b to the last bit, or within 1e-12 relative (the microsecond figures pass through a product) */
static bool close12(double a, double b) { return a == b || fabs(a - b) <= 1e-12 * fabs(b); }

static void same_target(const Target *a, const Target *b, const char *what) {
    ck_assert_msg(!strcmp(a->backend, b->backend) && a->nodes == b->nodes && a->gpus_per_node == b->gpus_per_node, "%s: shape", what);
    ck_assert_msg(a->gpu_memory == b->gpu_memory && a->gpu_flops == b->gpu_flops && a->gpu_hbm == b->gpu_hbm &&
                      a->gpu_pcie == b->gpu_pcie && !strcmp(a->gpu_arch, b->gpu_arch) && a->gpu_sms == b->gpu_sms,
                  "%s: gpu", what);
    ck_assert_msg(a->cpu_memory == b->cpu_memory && a->cpu_bandwidth == b->cpu_bandwidth && a->cpu_cores == b->cpu_cores,
                  "%s: cpu", what);
    ck_assert_msg(a->nvme_npaths == b->nvme_npaths && a->nvme_read == b->nvme_read && a->nvme_write == b->nvme_write &&
                      a->nvme_capacity == b->nvme_capacity,
                  "%s: nvme", what);
    for (int i = 0; i < a->nvme_npaths; i++) ck_assert_str_eq(a->nvme_paths[i], b->nvme_paths[i]);
    ck_assert_msg(a->net_bandwidth == b->net_bandwidth && a->net_inter == b->net_inter && close12(a->net_latency, b->net_latency),
                  "%s: net", what);
    ck_assert_msg(close12(a->nvme_latency, b->nvme_latency) && close12(a->pcie_latency, b->pcie_latency) &&
                      close12(a->kernel_latency, b->kernel_latency) && close12(a->wake_latency, b->wake_latency) &&
                      close12(a->nvme_request, b->nvme_request) && close12(a->nvme_cpu, b->nvme_cpu),
                  "%s: latencies", what);
    ck_assert_msg(a->cpu_cache == b->cpu_cache && a->cache_bandwidth == b->cache_bandwidth &&
                      a->adam_bandwidth == b->adam_bandwidth && a->read_bandwidth == b->read_bandwidth,
                  "%s: cache and streams", what);
    for (int f = 0; f < PLAN_NFAMILIES; f++) ck_assert_msg(a->eff[f] == b->eff[f], "%s: efficiency %d", what, f);
    ck_assert_int_eq(a->nkernel_points, b->nkernel_points);
    for (int i = 0; i < a->nkernel_points; i++) /* written by family, in their order within it */
        ck_assert_msg(a->kernel_points[i].family == b->kernel_points[i].family && a->kernel_points[i].flops == b->kernel_points[i].flops &&
                          close12(a->kernel_points[i].secs, b->kernel_points[i].secs),
                      "%s: kernel call %d", what, i);
    ck_assert_int_eq(a->nnvme_points, b->nnvme_points);
    for (int i = 0; i < a->nnvme_points; i++)
        ck_assert_msg(a->nvme_points[i].write == b->nvme_points[i].write && a->nvme_points[i].bytes == b->nvme_points[i].bytes &&
                          close12(a->nvme_points[i].drive, b->nvme_points[i].drive) &&
                          close12(a->nvme_points[i].alone, b->nvme_points[i].alone),
                      "%s: transfer %d", what, i);
}

/* t written by plan_target_write, then read as a program's target */
static void read_back(const Target *t, const char *name, Target *out, Arena *a, SourceSet *src, DiagSink *d) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert(plan_target_write(f, t, name));
    fclose(f);
    LoadOptions lo = {NULL, 0, "stdlib"};
    Program prog;
    memset(&prog, 0, sizeof prog);
    ck_assert_msg(program_load_text(a, src, d, "written.zl", arena_strdup(a, text), &lo, &prog) && d->errors == 0, "%s", text);
    ck_assert_msg(target_from_program(&prog, NULL, a, d, out), "%s\n%s", d->len ? d->items[0].msg : "", text);
    free(text);
}

/* A target written as .zl reads back as itself: every built-in, a probed
 * host target with every measured figure, timed calls and transfers (kept
 * in family order, as written), and a GPU one with its measured figures. */
START_TEST(written_targets_read_back) {
    Arena a;
    arena_init(&a);
    SourceSet src;
    source_set_init(&src);
    DiagSink d;
    diag_init(&d);
    Target t, back;
    for (int i = 0; i < target_nbuiltins; i++) {
        ck_assert(target_builtin(target_builtin_names[i], &t));
        read_back(&t, NULL, &back, &a, &src, &d);
        char want[32];
        snprintf(want, sizeof want, "%s", target_builtin_names[i]);
        for (char *c = want; *c; c++)
            if (*c == '-') *c = '_'; /* a name is an identifier */
        ck_assert_str_eq(back.name, want);
        same_target(&back, &t, target_builtin_names[i]);
    }
    ck_assert(target_builtin("host", &t));
    const char *paths[] = {"/tmp/a \"quoted\" dir", "/nvme\\b"};
    t.nvme_paths = paths;
    t.nvme_npaths = 2;
    t.nvme_latency = 6.1e-5;
    t.pcie_latency = 1.2e-8;
    t.kernel_latency = 9.5e-8;
    t.wake_latency = 3.3e-5;
    t.cpu_cache = 32.0 * (1 << 20);
    t.cache_bandwidth = 6.4e10;
    t.nvme_request = 3.6e-6;
    t.nvme_cpu = 2.4e-5;
    t.adam_bandwidth = 3.1e10;
    t.read_bandwidth = 2.7e10;
    for (int f = 0; f < PLAN_NFAMILIES; f++) t.eff[f] = 0.1 + 0.2 * f;
    t.nkernel_points = 3;
    t.kernel_points[0] = (PlanKernelPoint){FAM_GEMM, 2.09715e6, 2.584e-5};
    t.kernel_points[1] = (PlanKernelPoint){FAM_GEMM, 4.29497e9, 0.06114};
    t.kernel_points[2] = (PlanKernelPoint){FAM_ACTIVATION, 20480, 1.983e-6};
    t.nnvme_points = 3;
    t.nvme_points[0] = (PlanNvmePoint){0, 4096, 4.837e-6, 6.223e-5};
    t.nvme_points[1] = (PlanNvmePoint){0, 65536, 2.453e-5, 8.463e-5};
    t.nvme_points[2] = (PlanNvmePoint){1, 4096, 4.853e-6, 6.847e-5};
    t.net_inter = t.net_bandwidth / 2;
    read_back(&t, "probe vm-1", &back, &a, &src, &d);
    ck_assert_str_eq(back.name, "probe_vm_1");
    same_target(&back, &t, "probed host");
    ck_assert(target_builtin("h200", &t));
    t.pcie_latency = 3e-6;
    t.kernel_latency = 2.5e-6;
    t.adam_bandwidth = 1.2e11;
    t.nkernel_points = 1;
    t.kernel_points[0] = (PlanKernelPoint){FAM_GEMM, 1e12, 1.6e-3};
    read_back(&t, NULL, &back, &a, &src, &d);
    same_target(&back, &t, "probed h200");
    diag_free(&d);
    source_set_free(&src);
    arena_free(&a);
}
END_TEST

START_TEST(detect) {
    Arena a;
    arena_init(&a);
    Target t;
    const char *how = NULL;
    ck_assert(target_detect(&a, &t, &how));
    ck_assert_ptr_nonnull(how);
    ck_assert(strstr(how, "libcuda") || strstr(how, "host target from sysconf"));
    ck_assert_int_gt(target_ranks(&t), 0);
    ck_assert_uint_gt(t.cpu_memory, 0);
    ck_assert_uint_gt(t.gpu_memory, 0);
    arena_free(&a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("target");
    TCase *t = tcase_create("target");
    tcase_add_test(t, from_decl);
    tcase_add_test(t, errors);
    tcase_add_test(t, builtins);
    tcase_add_test(t, from_program);
    tcase_add_test(t, example_files_match_builtins);
    tcase_add_test(t, detect);
    tcase_add_test(t, written_targets_read_back);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
