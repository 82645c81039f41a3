/* bench_planner: plans the 195-layer, hidden 65536, 512-head transformer of
 * the ZeRO-Infinity paper's Table 1 (12 * 195 * 65536^2 = 10.05e12
 * parameters, 182.8 TiB of model states) on 128 DGX-2 nodes (2048 ranks),
 * built by hand (layernorm, qkv, attention, output, MLP per layer), and
 * prints the planning time beside the 2 s aim and the plan's size beside the
 * size of the same model planned for 16 ranks (it must not grow); then runs
 * the zinfc command that plans the largest row (zi-100t, 101T parameters,
 * on 2048 ranks) and prints its median wall time beside the same aim, its
 * user + sys CPU time (on a shared machine the wall time says more about
 * the others), and its plan's size beside 20 MB; ZINF_BENCH_BEFORE=ZINFC
 * times an older zinfc in the same loop. Run from the repository root.
 * Measured figures: docs/plan-format.md ("Packed sections"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "autodiff.h"
#include "planner.h"
#include "verify.h"

static int tensor(Graph *g, const char *name, int rank, int64_t a, int64_t b, int64_t c, TensorClass cls, int seg) {
    int64_t dims[3] = {a, b, c};
    int t = graph_add_tensor(g, name, DT_F16, rank, dims, cls);
    g->tensors[t].segment = seg;
    if (cls == TC_PARAM) g->tensors[t].init = INIT_NORMAL;
    return t;
}

static void op(Graph *g, PrimId prim, int seg, const int *in, int nin, const int *out, int nout, int heads) {
    GOp o;
    memset(&o, 0, sizeof o);
    o.kind = OP_FWD;
    o.prim = prim;
    o.segment = seg;
    o.fwd = -1;
    o.scope = "";
    o.span = SPAN_NONE;
    for (int i = 0; i < GRAPH_MAX_IN; i++) o.in[i] = i < nin ? in[i] : -1;
    for (int i = 0; i < GRAPH_MAX_OUT; i++) o.out[i] = i < nout ? out[i] : -1;
    o.nin = nin;
    o.nout = nout;
    o.iattr[0] = o.iattr[1] = heads;
    o.fattr[0] = 1e-5;
    graph_add_op(g, &o);
}

static bool build(Graph *g, Arena *a, DiagSink *d, int L, int64_t D, int H, int64_t B, int64_t T, int64_t V) {
    graph_init(g, a);
    g->model_name = "zero-infinity-table1-195x64K";
    g->train = (TrainConfig){.micro_batch = B, .steps = 1, .dtype = DT_F16, .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                             .min_lr = 1e-4, .loss_scale = 65536, .checkpoint_every = 1, .grad_accum = 1, .grad_clip = 1.0};
    int tok = tensor(g, "tokens", 2, B, T, 0, TC_INPUT, -1), tgt = tensor(g, "targets", 2, B, T, 0, TC_INPUT, -1);
    g->tensors[tok].dtype = g->tensors[tgt].dtype = DT_I32;
    g->inputs[0] = tok;
    g->inputs[1] = tgt;
    g->ninputs = 2;
    int wte = tensor(g, "wte", 2, V, D, 0, TC_PARAM, -1);
    int x = tensor(g, "%x", 3, B, T, D, TC_ACT, -1);
    op(g, PRIM_EMBEDDING, -1, (int[]){wte, tok}, 2, &x, 1, 0);
    for (int l = 0; l < L; l++) {
#define P(n, r, a_, b_) tensor(g, arena_printf(a, "block.%d.%s", l, n), r, a_, b_, 0, TC_PARAM, l)
#define A_(c) tensor(g, "%a", 3, B, T, c, TC_ACT, l)
        int g1 = P("ln1.g", 1, D, 0), b1 = P("ln1.b", 1, D, 0), wqkv = P("attn.wqkv", 2, D, 3 * D), bqkv = P("attn.bqkv", 1, 3 * D, 0);
        int wo = P("attn.wo", 2, D, D), bo = P("attn.bo", 1, D, 0), g2 = P("ln2.g", 1, D, 0), b2 = P("ln2.b", 1, D, 0);
        int w1 = P("mlp.w1", 2, D, 4 * D), c1 = P("mlp.b1", 1, 4 * D, 0), w2 = P("mlp.w2", 2, 4 * D, D), c2 = P("mlp.b2", 1, D, 0);
        int n1 = A_(D), qkv = A_(3 * D), q = A_(D), k = A_(D), v = A_(D), at = A_(D), o = A_(D), x1 = A_(D);
        int n2 = A_(D), h = A_(4 * D), hg = A_(4 * D), y = A_(D), x2 = A_(D);
        op(g, PRIM_LAYERNORM, l, (int[]){x, g1, b1}, 3, &n1, 1, 0);
        op(g, PRIM_LINEAR, l, (int[]){n1, wqkv, bqkv}, 3, &qkv, 1, 0);
        op(g, PRIM_SPLIT, l, &qkv, 1, (int[]){q, k, v}, 3, 3);
        op(g, PRIM_ATTENTION, l, (int[]){q, k, v}, 3, &at, 1, H);
        op(g, PRIM_LINEAR, l, (int[]){at, wo, bo}, 3, &o, 1, 0);
        op(g, PRIM_ADD, l, (int[]){x, o}, 2, &x1, 1, 0);
        op(g, PRIM_LAYERNORM, l, (int[]){x1, g2, b2}, 3, &n2, 1, 0);
        op(g, PRIM_LINEAR, l, (int[]){n2, w1, c1}, 3, &h, 1, 0);
        op(g, PRIM_GELU, l, &h, 1, &hg, 1, 0);
        op(g, PRIM_LINEAR, l, (int[]){hg, w2, c2}, 3, &y, 1, 0);
        op(g, PRIM_ADD, l, (int[]){x1, y}, 2, &x2, 1, 0);
        x = x2;
    }
    g->nsegments = L;
    int logits = tensor(g, "%logits", 3, B, T, V, TC_ACT, -1), loss = tensor(g, "%loss", 0, 0, 0, 0, TC_ACT, -1);
    g->tensors[loss].dtype = DT_F32;
    op(g, PRIM_MATMUL, -1, (int[]){x, wte}, 2, &logits, 1, 0);
    g->ops[g->nops - 1].iattr[IA_MATMUL_TRANSPOSE_A] = 0;
    g->ops[g->nops - 1].iattr[IA_MATMUL_TRANSPOSE_B] = 1; /* tied embedding, transposed */
    op(g, PRIM_CROSS_ENTROPY, -1, (int[]){logits, tgt}, 2, &loss, 1, 0);
    g->loss = loss;
    return ad_build(g, d);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The zinfc beside this benchmark (BUILD/bench/.. /bin/zinfc). */
static void zinfc_path(const char *argv0, char *out, size_t n) {
    const char *slash = strrchr(argv0, '/');
    int dir = slash ? (int)(slash - argv0) : 1;
    snprintf(out, n, "%.*s/../bin/zinfc", dir, slash ? argv0 : ".");
}

/* One run of zinfc (args[0]) with stdout to /dev/null: its wall and user +
 * sys CPU seconds; false when it fails. */
static bool run_zinfc(const char *const *args, double *wall, double *cpu) {
    double t0 = now();
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execv(args[0], (char *const *)args);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "bench_planner: %s failed (status %d)\n", args[0], st);
        return false;
    }
    *wall = now() - t0;
    *cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    return true;
}

static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* zinfc examples/zero-infinity/zi-100t.zl --target dgx2 --ranks 2048
 * --kernels=none -o PLAN (docs/plan-format.md), run ZI100T_RUNS times:
 * the median wall time beside the 2 s aim (and the best), the median user
 * + sys CPU time, the plan's size beside 20 MB. With ZINF_BENCH_BEFORE
 * naming another zinfc (an older build), that one runs the same command
 * in the same loop, alternated with this one, and its medians are printed
 * beside: on a machine shared with others only figures from one loop
 * compare. Nonzero when a zinfc fails. */
enum { ZI100T_RUNS = 5 };
static int bench_zinfc_100t(const char *argv0) {
    char zinfc[1024], plan[64] = "/tmp/zinf-bench-100t.XXXXXX";
    zinfc_path(argv0, zinfc, sizeof zinfc);
    const char *before = getenv("ZINF_BENCH_BEFORE");
    if (before && !*before) before = NULL;
    int fd = mkstemp(plan);
    if (fd < 0) {
        perror("bench_planner: mkstemp");
        return 1;
    }
    close(fd);
    const char *args[] = {zinfc, "examples/zero-infinity/zi-100t.zl", "--target", "dgx2", "--ranks", "2048", "--kernels=none", "-o", plan, NULL};
    const char *bargs[] = {before, args[1], args[2], args[3], args[4], args[5], args[6], args[7], plan, NULL};
    printf("bench_planner: %s examples/zero-infinity/zi-100t.zl --target dgx2 --ranks 2048 --kernels=none -o PLAN "
           "(101T parameters on 128 DGX-2 nodes), %d runs%s%s\n", zinfc, ZI100T_RUNS, before ? ", alternated with " : "",
           before ? before : "");
    fflush(stdout);
    double wall[ZI100T_RUNS], cpu[ZI100T_RUNS], bwall[ZI100T_RUNS], bcpu[ZI100T_RUNS];
    for (int r = 0; r < ZI100T_RUNS; r++)
        if ((before && !run_zinfc(bargs, &bwall[r], &bcpu[r])) || !run_zinfc(args, &wall[r], &cpu[r])) {
            unlink(plan);
            return 1;
        }
    struct stat sb;
    long long size = stat(plan, &sb) == 0 ? (long long)sb.st_size : -1;
    unlink(plan);
    double mw = median(wall, ZI100T_RUNS), mc = median(cpu, ZI100T_RUNS);
    printf("zinfc zi-100t, 2048 ranks: %.2f s wall, median of %d (best %.2f)   (aim: < 2 s), %.2f s user + sys, plan %lld bytes   "
           "(aim: < 20 MB)\n", mw, ZI100T_RUNS, wall[0], mc, size);
    if (before) {
        double bw = median(bwall, ZI100T_RUNS), bc = median(bcpu, ZI100T_RUNS);
        printf("before (%s), same loop: %.2f s wall, median (best %.2f), %.2f s user + sys: now %.2fx its wall, %.2fx its CPU\n", before,
               bw, bwall[0], bc, mw / bw, mc / bc);
    }
    return 0;
}

static int shape_layers = 195, shape_hidden = 65536, shape_heads = 512;

static int plan_once(int nodes, bool pinned, double *secs, size_t *bytes, PlannerResult *res, Arena *a) {
    DiagSink d;
    Graph g;
    diag_init(&d);
    if (!build(&g, a, &d, shape_layers, shape_hidden, shape_heads, 1, 1024, 50304)) {
        diag_render(&d, NULL, stderr, false);
        return 1;
    }
    Target t;
    target_builtin("dgx2", &t);
    t.nodes = nodes;
    PlannerOptions o;
    planner_options_default(&o);
    if (pinned) {
        o.tier[PC_PARAMS] = TIER_NVME;
        o.tier[PC_OPTIMIZER] = TIER_NVME;
        o.tier[PC_CHECKPOINTS] = TIER_CPU;
        o.prefetch = 2;
    }
    double t0 = now();
    bool ok = planner_run(&g, &t, &o, a, &d, res);
    *secs = now() - t0;
    if (!ok) {
        diag_render(&d, NULL, stderr, false);
        diag_free(&d);
        return 1;
    }
    uint8_t *buf;
    char err[256];
    if (!plan_encode(res->plan, &buf, bytes, err, sizeof err)) return 1;
    free(buf);
    printf("  %d nodes%s: %d tensors, %.4g T parameters, %u instructions, %u buffers\n", nodes, pinned ? " (placement pinned)" : "", g.ntensors,
           (double)graph_param_count(&g) / 1e12, res->plan->ninstrs, res->plan->nbuffers);
    diag_free(&d);
    return 0;
}

int main(int argc, char **argv) {
    (void)argc;
    const char *argv0 = argv[0];
    Arena a1, a2;
    arena_init(&a1);
    arena_init(&a2);
    PlannerResult big = {0}, small = {0}, pin512 = {0}, pin2048 = {0};
    double ts, tb, tp1, tp2;
    size_t ss, sb, sp1, sp2;
    printf("bench_planner: 195 layers x hidden 65536 x 512 heads on DGX-2 nodes\n");
    fflush(stdout);
    if (plan_once(32, false, &ts, &ss, &small, &a1) || plan_once(128, false, &tb, &sb, &big, &a2) ||
        plan_once(32, true, &tp1, &sp1, &pin512, &a1) || plan_once(128, true, &tp2, &sp2, &pin2048, &a2))
        return 1;
    double tv0 = now();
    char msgs[2048];
    int problems = verify_plan(big.plan, msgs, sizeof msgs);
    double tv = now() - tv0;
    printf("planning time, 2048 ranks: %.3f s   (aim: < 2 s)\n", tb);
    printf("planning time,  512 ranks: %.3f s\n", ts);
    printf("verify time,   2048 ranks: %.3f s   (%d problems)\n", tv, problems);
    printf("plan size, 2048 ranks: %zu bytes   vs 512 ranks: %zu bytes (placement chosen per size)\n", sb, ss);
    printf("plan size, same placement: 2048 ranks %zu bytes   vs 512 ranks %zu bytes (must not grow)\n", sp2, sp1);
    printf("predicted step, 2048 ranks: %.3f s\n", big.step_time);
    printf("%s", big.explain);
    /* The largest row of Table 1 (101T parameters) as a user plans it: the
     * zinfc command itself, timed from outside (parsing to the written plan). */
    int rc_100t = bench_zinfc_100t(argv0);
    plan_free(big.plan);
    plan_free(pin512.plan);
    plan_free(pin2048.plan);
    plan_free(small.plan);
    arena_free(&a1);
    arena_free(&a2);
    return problems || rc_100t ? 1 : 0;
}
