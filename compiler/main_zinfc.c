/* zinfc: the compiler driver.
 *
 *   zinfc [--check] [-I dir]... model.zl      check; prints "ok: MODEL: N parameters"
 *   zinfc --emit=graph model.zl               the forward graph listing
 *   zinfc --emit=ast model.zl                 the syntax tree
 *   zinfc --from-hf DIR [--seq N] --emit=zl   the .zl model of a Hugging Face config.json
 *   zinfc --from-hf DIR [--seq N] [--target T] -o m.plan   plan it (every other option as for a file)
 *   zinfc model.zl --target t.zl -o m.plan    plan for a target and write the plan
 *         [--explain]                         (and print the planner's choices)
 *         [--kernels=sm_80,sm_90] [--kernel-src=DIR]  (CUDA code; its sources into DIR)
 *
 * Options live in ZincOptions; the pipeline is zinfc_run (load, check, emit),
 * so further stages (--target, -o model.plan, --explain) slot in as fields and
 * steps. Diagnostics are rendered once, at the end, to stderr (coloured when
 * stderr is a terminal). Exit: 0 ok, 1 errors in the input, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "arena.h"
#include "memmodel.h"
#include "ast.h"
#include "diag.h"
#include "graph.h"
#include "hfconfig.h"
#include "loader.h"
#include "sema.h"
/* planning (compiler/planner.h) */
#include "autodiff.h"
#include "loss_chunk.h"
#include "mlp_tile.h"
#include "plan.h"
#include "devmem.h"
#include "plandump.h"
#include "planner.h"
#include "kernels_embed.h"
#include "target.h"
#include "verify.h"

#ifndef ZINF_STDLIB_DIR
#define ZINF_STDLIB_DIR "stdlib"
#endif
#ifndef ZINF_VERSION
#define ZINF_VERSION "dev"
#endif

typedef enum Emit { EMIT_NONE, EMIT_AST, EMIT_GRAPH, EMIT_ZL } Emit;

typedef struct ZincOptions {
    const char *input;
    const char **includes;
    int ninclude;
    const char *stdlib_dir;
    Emit emit;
    bool check;
    bool color;
    /* planning */
    const char *target;   /* --target FILE or a built-in name (dgx2, host, ...) */
    const char *output;   /* -o model.plan */
    bool explain;         /* --explain */
    const char *kernels;  /* --kernels=auto|none|sm_80,sm_90 */
    const char *kernel_src; /* --kernel-src=DIR: each unit's source as DIR/<PlanKernel name> */
    const char *from_hf;  /* --from-hf DIR: the model is DIR/config.json's (compiler/hfconfig.h) */
    int64_t seq;          /* --seq N: its training sequence length (0: the default) */
    const char *lora;     /* --lora SPEC: LoRA adapters on the --from-hf model (compiler/hfconfig.h) */
    const char *quantize; /* --quantize nf4|int8: with --lora, the frozen weights stored quantized */
    int ranks;            /* --ranks N: plan for N data-parallel ranks (0: the target's) */
    /* from the environment (read_environment; docs/environment.md) */
    const char *probe;      /* ZINF_PROBE: the probe file in place of this machine's (NULL: unset) */
    const char *kernel_dir; /* ZINF_KERNEL_DIR: the CUDA kernel sources (NULL: the stdlib's) */
    const char *cache_dir;  /* ZINF_CACHE_DIR: NVRTC's cache (NULL: nvrtc_cache_dir's default) */
    bool reprobe;           /* --reprobe: measure this machine again, replacing the cached probe */
    const char *probe_args; /* ZINF_PROBE_ARGS: more arguments for the zinfprobe that measures it (NULL: none) */
} ZincOptions;

static const char *const known_options[] = {"--check", "--emit=graph", "--emit=ast", "--emit=zl", "--help", "--version",
                                            "-I", "--target", "-o", "--explain", "--probe", "--kernels=", "--kernel-src=",
                                            "--from-hf", "--seq", "--lora", "--ranks", "--reprobe", "--quantize"};
enum { NKNOWN = sizeof known_options / sizeof known_options[0] };

static void usage(FILE *out) {
    fputs("usage: zinfc [options] model.zl\n"
          "       zinfc [options] --from-hf DIR\n"
          "  --check         check the model; print \"ok: MODEL: N parameters\" (the default action)\n"
          "  --emit=graph    print the forward graph: ops with shapes and dtypes, parameters, total\n"
          "  --emit=ast      print the syntax tree of the main file\n"
          "  --from-hf DIR   the model is the Hugging Face model whose config.json is in DIR\n"
          "                  (GPT-2, LLaMA, Mistral, Qwen2, Qwen3; docs/huggingface.md)\n"
          "  --emit=zl       with --from-hf: print that model as .zl\n"
          "  --seq N         with --from-hf: the training sequence length (default: the model's\n"
          "                  context, at most 1024)\n"
          "  --lora SPEC     with --from-hf: LoRA adapters, the rest frozen; SPEC is r=8,alpha=16,\n"
          "                  targets=q_proj,v_proj (LLaMA family) or targets=c_attn,c_proj,c_fc (GPT-2);\n"
          "                  a part left out takes its default (r=8, alpha=16, q_proj,v_proj or c_attn)\n"
          "  --quantize Q    with --lora: the frozen linear weights of the blocks stored quantized,\n"
          "                  Q = nf4 (4-bit NormalFloat, QLoRA) or int8 (docs/training.md)\n"
          "  -I DIR          look for imports in DIR (repeatable; before the stdlib)\n"
          "  --target T      plan for target T: a .zl file with a target block, or dgx2, dgx-a100,\n"
          "                  dgx-h100, h200, host, or probe: this machine as zinfprobe measured it\n"
          "                  (default: the model's target block, else probe)\n"
          "  --reprobe       measure this machine again (the probe is measured once, on the first\n"
          "                  plan for it, and cached: zinf/probe-MACHINE.zl in $XDG_CACHE_HOME or\n"
          "                  ~/.cache)\n"
          "  --probe [ARGS]  measure this machine: runs zinfprobe ARGS (beside zinfc; zinfprobe --help),\n"
          "                  which writes the probe file that planning without --target reads\n"
          "  --ranks N       plan for N ranks (processes of zinfrun, or GPUs) instead of the target's\n"
          "                  count; the detected host target has one a core, so --ranks 1 plans for a\n"
          "                  plain `zinfrun PLAN` and --ranks N for `mpirun -np N zinfrun PLAN`\n"
          "  -o FILE         plan and write the plan to FILE (verified first)\n"
          "  --explain       print the memory model (bytes per class and per rank), then plan\n"
          "                  and print what the planner chose and why\n"
          "  --kernels=K     CUDA code in the plan: auto (sm_80,sm_90 for GPU targets, none for host),\n"
          "                  none, or a list such as sm_90 (compiled by NVRTC, cached on disk)\n"
          "  --kernel-src=DIR  also write each kernel unit's source to DIR/<unit name> (the names\n"
          "                  zinfdump --kernels lists), when the plan gets CUDA code\n"
          "  --help          this text\n"
          "  --version       the version\n"
          "environment: ZINF_STDLIB overrides the stdlib directory (" ZINF_STDLIB_DIR ")\n"
          "  ZINF_PROBE: the probe file (default $XDG_CACHE_HOME or ~/.cache: zinf/probe-MACHINE.zl;\n"
          "  \"none\": do not read or measure one; the target is what libcuda or sysconf say)\n"
          "  ZINF_PROBE_ARGS: more arguments for the zinfprobe that measures the cached probe\n"
          "  (\"--quick\": seconds, rough figures)\n"
          "exit status: 0 ok, 1 errors in the input, 2 usage\n",
          out);
}

/* Returns 0 to go on, or an exit code + 100 (help/version: 100, error: 102). */
static int parse_args(int argc, char **argv, ZincOptions *o) {
    o->includes = calloc((size_t)argc, sizeof *o->includes);
    if (!o->includes) {
        fprintf(stderr, "zinfc: out of memory\n");
        return 102;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--check") == 0) {
            o->check = true;
        } else if (strncmp(a, "--emit=", 7) == 0) {
            if (strcmp(a + 7, "graph") == 0) o->emit = EMIT_GRAPH;
            else if (strcmp(a + 7, "ast") == 0) o->emit = EMIT_AST;
            else if (strcmp(a + 7, "zl") == 0) o->emit = EMIT_ZL;
            else {
                fprintf(stderr, "zinfc: unknown --emit kind '%s' (graph, ast or zl)\n", a + 7);
                return 102;
            }
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 100;
        } else if (strcmp(a, "--version") == 0) {
            printf("zinfc %s\n", ZINF_VERSION);
            return 100;
        } else if (strncmp(a, "-I", 2) == 0) {
            const char *dir = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            if (!dir) {
                fprintf(stderr, "zinfc: -I needs a directory\n");
                return 102;
            }
            o->includes[o->ninclude++] = dir;
        } else if (strcmp(a, "--target") == 0 || strcmp(a, "-o") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zinfc: %s needs a value\n", a);
                return 102;
            }
            if (a[1] == 'o') o->output = argv[++i];
            else o->target = argv[++i];
        } else if (strcmp(a, "--quantize") == 0) {
            const char *v = i + 1 < argc ? argv[++i] : NULL;
            if (!v || (strcmp(v, "nf4") && strcmp(v, "int8"))) {
                fprintf(stderr, "zinfc: --quantize needs nf4 or int8%s%s%s\n", v ? ", not '" : "", v ? v : "", v ? "'" : "");
                return 102;
            }
            o->quantize = v;
        } else if (strcmp(a, "--from-hf") == 0 || strcmp(a, "--seq") == 0 || strcmp(a, "--lora") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zinfc: %s needs a value\n", a);
                return 102;
            }
            const char *v = argv[++i];
            if (a[2] == 'f' || a[2] == 'l') {
                *(a[2] == 'f' ? &o->from_hf : &o->lora) = v;
                continue;
            }
            char *end;
            errno = 0;
            long long n = strtoll(v, &end, 10);
            if (errno || *end || end == v || n < 1 || n > (1LL << 31)) {
                fprintf(stderr, "zinfc: --seq needs a positive sequence length, not '%s'\n", v);
                return 102;
            }
            o->seq = n;
        } else if (strcmp(a, "--ranks") == 0) {
            const char *v = i + 1 < argc ? argv[++i] : NULL;
            char *end = NULL;
            errno = 0;
            long n = v ? strtol(v, &end, 10) : 0;
            if (!v || errno || *end || end == v || n < 1 || n > 1000000) {
                fprintf(stderr, "zinfc: --ranks needs a number of ranks (1 or more), not '%s'\n", v ? v : "");
                return 102;
            }
            o->ranks = (int)n;
        } else if (strcmp(a, "--explain") == 0) {
            o->explain = true;
        } else if (strcmp(a, "--reprobe") == 0) {
            o->reprobe = true;
        } else if (strncmp(a, "--kernels=", 10) == 0) {
            o->kernels = a + 10;
        } else if (strncmp(a, "--kernel-src=", 13) == 0) {
            if (!a[13]) {
                fprintf(stderr, "zinfc: --kernel-src= needs a directory\n");
                return 102;
            }
            o->kernel_src = a + 13;
        } else if (a[0] == '-' && a[1]) {
            const char *near = diag_nearest(a, known_options, NKNOWN);
            if (near) fprintf(stderr, "zinfc: unknown option '%s'; did you mean '%s'?\n", a, near);
            else fprintf(stderr, "zinfc: unknown option '%s' (see zinfc --help)\n", a);
            return 102;
        } else if (o->input) {
            fprintf(stderr, "zinfc: more than one input file ('%s' and '%s')\n", o->input, a);
            return 102;
        } else {
            o->input = a;
        }
    }
    if (o->from_hf && o->input) {
        fprintf(stderr, "zinfc: --from-hf %s and the model file '%s': one model at a time\n", o->from_hf, o->input);
        return 102;
    }
    if (o->quantize && !o->lora) {
        fprintf(stderr, "zinfc: --quantize goes with --from-hf DIR --lora SPEC (only frozen weights are stored quantized)\n");
        return 102;
    }
    if (!o->from_hf && (o->emit == EMIT_ZL || o->seq || o->lora)) {
        fprintf(stderr, "zinfc: %s goes with --from-hf DIR\n", o->emit == EMIT_ZL ? "--emit=zl" : o->seq ? "--seq" : "--lora");
        return 102;
    }
    if (!o->input && !o->from_hf) {
        fprintf(stderr, "zinfc: no input file (see zinfc --help)\n");
        return 102;
    }
    return 0;
}

/* ---- --explain: the memory model's table (compiler/memmodel.h, docs/memory-model.md) ---- */
static void explain_memory(const Graph *g, const Target *t, const PlannerOptions *po, DiagSink *d) {
    MemOptions mo;
    memmodel_options_default(&mo);
    mo.ranks = po->ranks > 0 ? po->ranks : target_ranks(t);
    mo.nodes = t->nodes > 0 && mo.ranks % t->nodes == 0 && po->ranks <= 0 ? t->nodes : 1;
    mo.whole_below = po->whole_below;
    MemModel m;
    if (memmodel_compute(g, &mo, &m) != 0) diag_warning(d, SPAN_NONE, "%s", m.err);
    else memmodel_print(&m, stdout);
}

/* ---- planning: autodiff, target, planner, plan file ---- */
/* ---- this machine, measured once: the cached probe ---- */

/* zinfprobe's path: beside zinfc. False when /proc/self/exe is unreadable. */
static bool zinfprobe_path(char *exe, size_t n) {
    ssize_t k = readlink("/proc/self/exe", exe, n - 16);
    if (k <= 0) return false;
    exe[k] = 0;
    char *slash = strrchr(exe, '/');
    strcpy(slash ? slash + 1 : exe, "zinfprobe");
    return true;
}

/* The path of `name` on $PATH, into out; false when it is not there. */
static bool on_path(const char *name, char *out, size_t n) {
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len && (size_t)snprintf(out, n, "%.*s/%s", (int)len, path, name) < n && access(out, X_OK) == 0) return true;
        path = end ? end + 1 : NULL;
    }
    return false;
}

/* Runs args (args[0] the program) with its stdout on stderr and no stdin;
 * true when it exits 0. Under mpirun as root, Open MPI is told that is
 * meant (the probe's ranks are this user's processes). */
static bool run_quiet(const char *const *args) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(2, 1); /* the report beside zinfc's diagnostics, not in its output */
        if (!freopen("/dev/null", "r", stdin)) _exit(127);
        if (geteuid() == 0) setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0), setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
        execv(args[0], (char *const *)args);
        fprintf(stderr, "zinfc: cannot run %s: %s\n", args[0], strerror(errno));
        _exit(127);
    }
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Measures this machine for `ranks` ranks into file with zinfprobe (--host
 * where no GPU was found: a host target; else its GPUs, a cuda target; the
 * NVMe timed in the nvme folder beside file, which zinfprobe leaves empty),
 * plus the words of probe_args (ZINF_PROBE_ARGS, or NULL); zinfprobe's report goes to stderr.
 * More than one rank runs under mpirun where there is one, so that the
 * collectives between the ranks are measured too (else, or when that
 * fails, one process with a rank's share of the cores). False (reported
 * in d) when it fails. */
static bool measure_machine(const char *file, int ranks, bool host, const char *probe_args, DiagSink *d) {
    char exe[4096], nvme[4096], rs[16], extra[512] = "";
    if (!zinfprobe_path(exe, sizeof exe)) {
        diag_error(d, SPAN_NONE, "cannot find zinfc's own directory to run zinfprobe: %s", strerror(errno));
        return false;
    }
    snprintf(nvme, sizeof nvme, "%s", file);
    char *slash = strrchr(nvme, '/');
    snprintf(slash ? slash + 1 : nvme, sizeof nvme - (size_t)(slash ? slash + 1 - nvme : 0), "nvme");
    for (char *c = nvme + 1; (c = strchr(c, '/')); c++) { /* mkdir -p */
        *c = 0;
        mkdir(nvme, 0777);
        *c = '/';
    }
    if (mkdir(nvme, 0777) != 0 && errno != EEXIST) {
        diag_error(d, SPAN_NONE, "cannot make %s to measure this machine's disk in: %s", nvme, strerror(errno));
        return false;
    }
    snprintf(rs, sizeof rs, "%d", ranks);
    char mpirun[4096];
    const char *args[32] = {mpirun, "-np", rs, "--oversubscribe", exe, "--nvme", nvme, "-o", file};
    int na = 9;
    if (host) args[na++] = "--host";
    if (probe_args) snprintf(extra, sizeof extra, "%s", probe_args);
    for (char *w = strtok(extra, " \t"); w && na < 29; w = strtok(NULL, " \t")) args[na++] = w;
    args[na] = NULL;
    if (ranks > 1 && on_path("mpirun", mpirun, sizeof mpirun)) {
        if (run_quiet(args)) return true;
        printf("target: zinfprobe under mpirun failed (its messages above): measuring one process for %d ranks, without "
               "the collectives\n", ranks);
    }
    args[2] = exe, args[3] = "--ranks", args[4] = rs; /* one process: zinfprobe --ranks N --nvme ... */
    if (!run_quiet(args + 2)) {
        diag_error(d, SPAN_NONE, "measuring this machine failed (%s)", exe);
        diag_hint(d, "plan for a target file (--target), or set ZINF_PROBE=none to plan from what sysconf says");
        return false;
    }
    return true;
}

/* Reads file as a target into t, its errors into a sink of their own: NULL
 * when it is one, else the first error's message (in a). */
static const char *read_probe(const char *file, const LoadOptions *lo, Arena *a, SourceSet *src, Target *t) {
    DiagSink pd;
    diag_init(&pd);
    Program tp;
    memset(&tp, 0, sizeof tp);
    bool ok = program_load(a, src, &pd, file, lo, &tp) && !pd.errors && target_from_program(&tp, NULL, a, &pd, t) && !pd.errors;
    const char *why = NULL;
    if (!ok) {
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        if (m) {
            diag_render(&pd, src, m, false);
            fclose(m);
        }
        char *nl = text ? strchr(text, '\n') : NULL;
        if (nl) *nl = 0;
        why = arena_strdup(a, text && *text ? text : "not a target");
        free(text);
    }
    diag_free(&pd);
    return why;
}

/* This machine as zinfprobe measured it, from the cache (file): measured
 * now when the file is not there, --reprobe asks, the file is not a target
 * (a corrupt or truncated cache), or it is for other ranks than wanted
 * (--ranks, else the detected machine's: one a core, or a GPU each). Says
 * which on stdout. False on errors (in d). */
static bool cached_probe(const ZincOptions *o, const char *file, const LoadOptions *lo, Arena *a, SourceSet *src, DiagSink *d,
                         Target *t) {
    Target det;
    const char *dhow;
    target_detect(a, &det, &dhow);
    int ranks = o->ranks > 0 ? o->ranks : target_ranks(&det);
    const char *why = o->reprobe ? "--reprobe" : access(file, F_OK) != 0 ? "not measured yet" : NULL;
    if (!why) {
        const char *bad = read_probe(file, lo, a, src, t);
        if (bad) {
            printf("target: the cached probe %s is not a target (%s): it is refused and this machine measured again\n", file, bad);
            why = "the cached probe was refused";
        } else if (target_ranks(t) != ranks) {
            why = arena_printf(a, "the cached probe is for %d rank%s", target_ranks(t), target_ranks(t) > 1 ? "s" : "");
        } else {
            printf("target: %s, measured by zinfprobe, from %s (cached; zinfc --reprobe measures again)\n", t->name, file);
            return true;
        }
    }
    printf("target: measuring this machine for %d rank%s with zinfprobe (%s), once: cached in %s\n", ranks, ranks > 1 ? "s" : "", why,
           file);
    fflush(stdout);
    if (!measure_machine(file, ranks, !strcmp(det.backend, "host"), o->probe_args, d)) return false;
    const char *bad = read_probe(file, lo, a, src, t);
    if (bad) {
        diag_error(d, SPAN_NONE, "the probe zinfprobe wrote, %s, is not a target: %s", file, bad);
        return false;
    }
    printf("target: %s, measured by zinfprobe, wrote %s\n", t->name, file);
    return true;
}

/* The target: --target, else the model's target block, else the probe
 * file of this machine (plan_probe_path: $ZINF_PROBE, else the cache,
 * measured by zinfprobe the first time), else (ZINF_PROBE=none) what
 * target_detect finds. --target probe is the cache's. False on errors (in d). */
static bool choose_target(const ZincOptions *o, Arena *a, SourceSet *src, DiagSink *d, const Program *prog, Target *t,
                          const char **how) {
    LoadOptions lo = {o->includes, o->ninclude, o->stdlib_dir};
    char probe[1024];
    bool from_env = o->probe != NULL;
    bool want_probe = o->target && !strcmp(o->target, "probe");
    const char *file = want_probe ? NULL : o->target;
    if (file && target_builtin(file, t)) {
        *how = arena_printf(a, "the built-in target %s", o->target);
        return true;
    }
    if (!o->target && target_find(prog, NULL)) {
        if (!target_from_program(prog, NULL, a, d, t)) return false;
        *how = arena_printf(a, "the model's target %s", t->name);
        return true;
    }
    if (!file && plan_probe_path(o->probe, probe, sizeof probe)) {
        if (!from_env) {
            if (!cached_probe(o, probe, &lo, a, src, d, t)) return false;
            *how = arena_printf(a, "target %s from %s", t->name, probe);
            return true;
        }
        if (access(probe, R_OK) == 0) file = arena_strdup(a, probe);
        else {
            diag_error(d, SPAN_NONE, "ZINF_PROBE=%s: cannot read it: %s (run zinfprobe -o %s, or unset ZINF_PROBE)", probe,
                       strerror(errno), probe);
            return false;
        }
    }
    if (!file && want_probe) {
        diag_error(d, SPAN_NONE, "--target probe: no probe file (ZINF_PROBE is \"none\", or no HOME or XDG_CACHE_HOME)");
        return false;
    }
    if (!file) {
        target_detect(a, t, how);
        return true;
    }
    Program tp;
    memset(&tp, 0, sizeof tp);
    if (!program_load(a, src, d, file, &lo, &tp) || d->errors) return false;
    if (!target_from_program(&tp, NULL, a, d, t)) return false;
    *how = arena_printf(a, "target %s from %s", t->name, file);
    if (!o->target || want_probe) printf("target: %s, measured by zinfprobe, from %s\n", t->name, file);
    return true;
}

/* Diagnostics of a trial planning, copied into d. */
static void replay_diags(const DiagSink *from, DiagSink *d) {
    for (int i = 0; i < from->len; i++) {
        const Diag *x = &from->items[i];
        if (x->level == DIAG_ERROR) diag_error(d, x->span, "%s", x->msg);
        else if (x->level == DIAG_WARNING) diag_warning(d, x->span, "%s", x->msg);
        else if (x->level == DIAG_NOTE) diag_note(d, x->span, "%s", x->msg);
        else diag_hint(d, "%s", x->msg);
    }
}

/* Plans g, its loss chunked as po->loss_chunk says (compiler/loss_chunk.h)
 * and its MLP tiled as po->mlp_tile says (compiler/mlp_tile.h). "auto"
 * keeps the model as written when the plan fits with it: the candidates,
 * in order, are the model as written, the loss chunked, and the loss
 * chunked with the MLP tiled (each only where its setting allows it; a
 * pinned setting is in every candidate), the first that fits is the plan.
 * *chunked and *tiled: the rows a loss chunk and an MLP tile took, 0 when
 * not rewritten. */
static bool plan_with_rewrites(Graph *g, const Target *t, const PlannerOptions *po, Arena *a, DiagSink *d, PlannerResult *r,
                               int64_t *chunked, int64_t *tiled) {
    *chunked = *tiled = 0;
    int proj, xent;
    bool lc = po->loss_chunk != 0 && loss_chunk_find(g, &proj, &xent);
    bool mt = po->mlp_tile != 0 && mlp_tile_find(g, NULL, 0) > 0;
    if (po->loss_chunk > 0 && !lc) diag_warning(d, SPAN_NONE, "loss_chunk: the loss is not cross_entropy of a matmul or linear without a bias, so it is not chunked");
    if (po->mlp_tile > 0 && !mt)
        diag_warning(d, SPAN_NONE, "mlp_tile: the model has no MLP block of rmsnorm, gate and up linears, silu or gelu, their "
                                   "product and a down linear (no biases, no adapters), so nothing is tiled");
    int64_t lrows = !lc ? 0 : po->loss_chunk > 0 ? po->loss_chunk : loss_chunk_rows(g, t);
    int64_t mrows = !mt ? 0 : po->mlp_tile > 0 ? po->mlp_tile : mlp_tile_rows(g, t);
    /* (loss rows, MLP rows) per candidate: "auto" starts at 0, a pin stays */
    int64_t cand[3][2] = {{po->loss_chunk > 0 ? lrows : 0, po->mlp_tile > 0 ? mrows : 0}, {lrows, po->mlp_tile > 0 ? mrows : 0},
                          {lrows, mrows}};
    int ncand = 0;
    int64_t list[3][2];
    for (int k = 0; k < 3; k++) {
        bool dup = ncand > 0 && list[ncand - 1][0] == cand[k][0] && list[ncand - 1][1] == cand[k][1];
        if (!dup) list[ncand][0] = cand[k][0], list[ncand][1] = cand[k][1], ncand++;
    }
    Graph fwd;
    if (ncand > 1 && !loss_chunk_copy_graph(g, &fwd)) {
        diag_error(d, SPAN_NONE, "out of memory");
        return false;
    }
    for (int k = 0; k < ncand; k++) {
        if (k > 0 && !loss_chunk_copy_graph(&fwd, g)) {
            diag_error(d, SPAN_NONE, "out of memory");
            return false;
        }
        if (list[k][0] && !loss_chunk_apply(g, list[k][0])) return false;
        if (list[k][1] && mlp_tile_apply(g, list[k][1]) <= 0) {
            diag_error(d, SPAN_NONE, "out of memory");
            return false;
        }
        if (!ad_build(g, d)) return false;
        *chunked = list[k][0];
        *tiled = list[k][1];
        if (k == ncand - 1) return planner_run(g, t, po, a, d, r);
        DiagSink trial;
        diag_init(&trial);
        bool ok = planner_run(g, t, po, a, &trial, r);
        if (ok) replay_diags(&trial, d);
        diag_free(&trial);
        if (ok) return true;
    }
    return false;
}

/* The independent check of a plan (verify_plan), run in a thread of its
 * own while the plan is encoded: both only read the plan. */
typedef struct VerifyJob {
    const Plan *plan;
    int problems;
    char msgs[1024];
} VerifyJob;

static void *verify_job(void *arg) {
    VerifyJob *j = arg;
    j->problems = verify_plan(j->plan, j->msgs, sizeof j->msgs);
    return NULL;
}

/* Verifies plan p (planner_verified: the planner left it to zinfc) while
 * encoding it, and writes it to path only when it passes; false when it
 * fails or cannot be written (reported to d). */
static bool verify_and_write(const Plan *p, const char *path, DiagSink *d) {
    VerifyJob job = {.plan = p};
    pthread_t th;
    bool threaded = pthread_create(&th, NULL, verify_job, &job) == 0;
    if (!threaded) verify_job(&job);
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[512];
    bool encoded = plan_encode(p, &buf, &len, err, sizeof err);
    if (threaded) pthread_join(th, NULL);
    if (!planner_verified(job.problems, job.msgs, d)) {
        free(buf);
        return false;
    }
    bool ok = encoded && plan_write_bytes(buf, len, path, err, sizeof err);
    if (!ok) diag_error(d, SPAN_NONE, "%s", err);
    free(buf);
    return ok;
}

/* Whether the GPU holds what zinfrun will allocate on it: the gpu arena and,
 * beside it, the kernel workspaces, collective scratch and cuBLASLt
 * workspaces its kernels need (runtime/plan/devmem.h), known once the
 * kernels are generated. Reported when not. */
static bool devmem_fits(const Plan *p, DiagSink *d) {
    PlanDevMem m;
    plan_devmem(p, true, &m);
    if (m.total <= p->target.gpu_memory) return true;
    char a[32], b[32], c[32], e[32], items[512];
    diag_error(d, SPAN_NONE,
               "the plan needs %s of GPU memory per rank, more than target '%s' has (%s): the gpu arena %s plus %s beside it "
               "(%s)",
               plan_bytes_str(m.total, a, sizeof a), p->target.name, plan_bytes_str(p->target.gpu_memory, b, sizeof b),
               plan_bytes_str(m.arena, c, sizeof c), plan_bytes_str(m.extra, e, sizeof e), plan_devmem_items_str(&m, items, sizeof items));
    diag_hint(d, "plan for more ranks, move state off the GPU (plan { params = \"cpu\" ... }), or give the target more GPU memory");
    return false;
}

/* The plan's CUDA kernels: generated (or taken from the cache), embedded,
 * and the launches verified; reported. */
static bool gen_kernels(const ZincOptions *o, Plan *plan, const Graph *g, const char *archs, SourceSet *src, const Target *t,
                        DiagSink *d) {
    EmbedStats es;
    EmbedDirs dirs = {.source_dir = o->kernel_src, .kernel_dir = o->kernel_dir, .cache_dir = o->cache_dir};
    if (!kernels_embed(plan, g, archs, &dirs, src, t->gpu_sms, d, &es)) return false;
    /* The planner verified the schedule; the launches are new. */
    char vm[4096];
    int problems = verify_plan(plan, vm, sizeof vm);
    if (problems) {
        diag_error(d, SPAN_NONE, "internal error: the plan's CUDA launches fail verification (%d problem%s):\n%s", problems,
                   problems > 1 ? "s" : "", vm);
        return false;
    }
    printf("kernels: %d units x %d archs (%s): %d compiled in %.1f s, %d from the cache, %llu bytes of cubin\n", es.units,
           es.archs, archs, es.compiled, es.seconds, es.cached, (unsigned long long)es.bytes);
    return true;
}

static int zinfc_plan(const ZincOptions *o, Arena *a, SourceSet *src, DiagSink *d, const Program *prog, Graph *g) {
    Target t;
    const char *how = NULL;
    if (!choose_target(o, a, src, d, prog, &t, &how)) return 1;
    PlannerOptions po;
    planner_options_default(&po);
    if (!planner_options_from_program(prog, a, d, &po)) return 1;
    if (o->ranks > 0) po.ranks = o->ranks;
    const char *archs = o->kernels && strcmp(o->kernels, "auto") ? o->kernels : (strcmp(t.backend, "host") ? "sm_80,sm_90" : "none");
    po.sample_starts = o->output && strcmp(archs, "none"); /* the kernels read them: their buffer in the plan */
    po.verify_by_caller = o->output && !strcmp(archs, "none"); /* verify_and_write */
    int proj, xent;
    int64_t lrows = 0, lvocab = 0;
    if (loss_chunk_find(g, &proj, &xent)) loss_chunk_shape(g, xent, &lrows, &lvocab);
    int64_t mlp_rows = 0, mlp_d = 0, mlp_i = 0;
    int mlp_blocks = mlp_tile_find(g, NULL, 0);
    if (mlp_blocks) mlp_tile_shape(g, &mlp_rows, &mlp_d, &mlp_i);
    PlannerResult r;
    int64_t chunked = 0, tiled = 0;
    bool planned = plan_with_rewrites(g, &t, &po, a, d, &r, &chunked, &tiled);
    if (o->explain && g->nbackward_end > g->nforward) explain_memory(g, &t, &po, d);
    if (!planned) return 1;
    r.plan->source = o->input;
    if (o->explain) printf("planning for %s\n%s", how, r.explain);
    if (o->explain && lvocab) {
        if (chunked)
            printf("loss: chunked, linear_cross_entropy over %" PRId64 " of the %" PRId64 " rows at a time (%s of logits a "
                   "chunk instead of [%" PRId64 ", %" PRId64 "] whole: %s)\n",
                   chunked, lrows, plan_bytes_str((uint64_t)(chunked < lrows ? chunked : lrows) * (uint64_t)lvocab * 4, (char[32]){0}, 32),
                   lrows, lvocab, po.loss_chunk > 0 ? "pinned by loss_chunk" : "the plan does not fit with the whole logits");
        else
            printf("loss: logits [%" PRId64 ", %" PRId64 "] whole (%s)\n", lrows, lvocab,
                   po.loss_chunk == 0 ? "pinned by loss_chunk = 0" : "the plan fits with them");
    }
    if (o->explain && mlp_blocks) {
        char b1[32], b2[32];
        int dsz = g->train.dtype == DT_F32 ? 4 : 2;
        if (tiled)
            printf("mlp: tiled, gated_mlp over %" PRId64 " of the %" PRId64 " rows at a time in %d block%s (%s of [rows, %" PRId64
                   "] intermediates a tile instead of %s: %s)\n",
                   tiled < mlp_rows ? tiled : mlp_rows, mlp_rows, mlp_blocks, mlp_blocks > 1 ? "s" : "",
                   plan_bytes_str((uint64_t)(tiled < mlp_rows ? tiled : mlp_rows) * (uint64_t)mlp_i * (uint64_t)dsz, b1, sizeof b1), mlp_i,
                   plan_bytes_str((uint64_t)mlp_rows * (uint64_t)mlp_i * (uint64_t)dsz, b2, sizeof b2),
                   po.mlp_tile > 0 ? "pinned by mlp_tile" : "the plan does not fit with the MLP as written");
        else
            printf("mlp: as written, %d block%s of [%" PRId64 ", %" PRId64 "] intermediates (%s)\n", mlp_blocks,
                   mlp_blocks > 1 ? "s" : "", mlp_rows, mlp_i,
                   po.mlp_tile == 0 ? "pinned by mlp_tile = 0" : "the plan fits with them");
    }
    if (o->explain) plandump_moe(r.plan, stdout);
    int rc = 0;
    char err[512], gb[32];
    if (o->output && strcmp(archs, "none")) {
        /* --kernel-src names a directory to fill: make it (one level), as -o makes its file */
        if (o->kernel_src && mkdir(o->kernel_src, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "zinfc: --kernel-src=%s: cannot create the directory: %s\n", o->kernel_src, strerror(errno));
            plan_free(r.plan);
            return 1;
        }
        if (!gen_kernels(o, r.plan, g, archs, src, &t, d)) {
            plan_free(r.plan);
            return 1;
        }
        /* What zinfrun allocates beside the arena is known now. When the
         * first plan's arena leaves too little room for it, plan once more
         * with all of it kept free (the same graph: chunking and tiling as
         * chosen); the workspaces depend on the ops, not on the placement. */
        PlanDevMem m;
        plan_devmem(r.plan, true, &m);
        if (m.total > r.plan->target.gpu_memory && m.extra > po.gpu_keep) {
            char b1[32], b2[32], b3[32], b4[32];
            printf("gpu: the arena %s and %s beside it exceed the %s of target '%s': planning again with %s kept free beside "
                   "the arena\n",
                   plan_bytes_str(m.arena, b1, sizeof b1), plan_bytes_str(m.extra, b2, sizeof b2),
                   plan_bytes_str(r.plan->target.gpu_memory, b3, sizeof b3), t.name, plan_bytes_str(m.extra, b4, sizeof b4));
            po.gpu_keep = m.extra;
            plan_free(r.plan);
            if (!planner_run(g, &t, &po, a, d, &r)) return 1;
            r.plan->source = o->input;
            if (o->explain) printf("%s", r.explain);
            if (!gen_kernels(o, r.plan, g, archs, src, &t, d)) {
                plan_free(r.plan);
                return 1;
            }
        }
        if (!devmem_fits(r.plan, d)) {
            plan_free(r.plan);
            return 1;
        }
    }
    if (o->explain && strcmp(t.backend, "host")) plandump_devmem(r.plan, stdout);
    bool written = true;
    if (o->output && po.verify_by_caller) {
        written = verify_and_write(r.plan, o->output, d);
    } else if (o->output && !plan_write(r.plan, o->output, err, sizeof err)) {
        diag_error(d, SPAN_NONE, "%s", err);
        written = false;
    }
    if (!written) {
        rc = 1;
    } else if (o->output) {
        bool host = !strcmp(t.backend, "host");
        printf("wrote %s: %s on %s, %d rank%s, %u instructions, %s peak %s per rank%s, predicted %.4g s/step\n", o->output,
               g->model_name, t.name, r.plan->ranks, r.plan->ranks > 1 ? "s" : "", r.plan->ninstrs, host ? "device arena" : "GPU",
               plan_bytes_str(r.plan->arenas[ARENA_GPU].size, gb, sizeof gb), host ? " (host memory)" : "", r.step_time);
        /* the detected machine's rank count is a default the user did not choose: say how to run it, and how to change it */
        if (r.plan->ranks > 1 && !o->ranks && !strncmp(t.name, "detected", 8))
            printf("  %d ranks, one a core of this machine: run it with mpirun -np %d zinfrun %s; zinfc --ranks 1 plans for a "
                   "plain zinfrun\n", r.plan->ranks, r.plan->ranks, o->output);
    }
    plan_free(r.plan);
    return rc;
}

/* Load, check, emit. Diagnostics go to d; returns the exit code. */
static int zinfc_run(ZincOptions *o, Arena *a, SourceSet *src, DiagSink *d) {
    LoadOptions lo = {o->includes, o->ninclude, o->stdlib_dir};
    Program prog;
    memset(&prog, 0, sizeof prog);
    if (o->from_hf) {
        HfConfigOptions ho = {.seq = o->seq, .lora = o->lora, .quantize = o->quantize};
        const char *text = hfconfig_to_zl(a, src, d, o->from_hf, &ho);
        if (!text) return 1;
        if (o->emit == EMIT_ZL) {
            fputs(text, stdout);
            return 0;
        }
        o->input = arena_printf(a, "%s/config.json.zl", o->from_hf);
        if (!o->input || !program_load_text(a, src, d, o->input, text, &lo, &prog)) return 1;
    } else if (!program_load(a, src, d, o->input, &lo, &prog)) {
        return 1;
    }
    if (o->emit == EMIT_AST) {
        if (prog.nfiles > 0) ast_dump(prog.files[0], stdout);
        return d->errors ? 1 : 0;
    }
    if (d->errors) {
        /* syntax errors: still check what parsed, for more errors, but do not emit */
        Graph g;
        sema_build(a, &prog, src, d, &g);
        return 1;
    }
    Graph g;
    bool ok = sema_build(a, &prog, src, d, &g);
    if (!ok || d->errors) return 1;
    if (a->failed) {
        diag_error(d, SPAN_NONE, "out of memory");
        return 1;
    }
    if (o->emit == EMIT_GRAPH) graph_dump(&g, stdout);
    else if (o->output || o->target || o->explain) return zinfc_plan(o, a, src, d, &prog, &g);
    else printf("ok: %s: %" PRId64 " parameters\n", g.model_name, graph_param_count(&g));
    return 0;
}

/* zinfc --probe ARGS: zinfprobe ARGS. The probe measures this machine with
 * the runtime's engines (io_uring, MPI, the host kernels), which the
 * compiler may not link (docs/architecture.md), so it is its own program,
 * installed beside zinfc; this runs it. Returns only when it cannot. */
static int run_probe(int argc, char **argv) {
    char exe[4096];
    if (!zinfprobe_path(exe, sizeof exe)) {
        fprintf(stderr, "zinfc: --probe: cannot find zinfc's own directory: %s\n", strerror(errno));
        return 2;
    }
    argv[1] = exe;
    execv(exe, argv + 1);
    fprintf(stderr, "zinfc: --probe: cannot run %s: %s\n", exe, strerror(errno));
    (void)argc;
    return 2;
}

/* What zinfc takes from the environment, all of it here (docs/environment.md);
 * an empty value counts as unset. */
static void read_environment(ZincOptions *o) {
    const char *e;
    o->stdlib_dir = (e = getenv("ZINF_STDLIB")) && *e ? e : ZINF_STDLIB_DIR;
    o->color = isatty(fileno(stderr)) && !getenv("NO_COLOR");
    o->probe = getenv("ZINF_PROBE"); /* "" too: no probe file, as "none" */
    o->kernel_dir = (e = getenv("ZINF_KERNEL_DIR")) && *e ? e : NULL;
    o->cache_dir = (e = getenv("ZINF_CACHE_DIR")) && *e ? e : NULL;
    o->probe_args = (e = getenv("ZINF_PROBE_ARGS")) && *e ? e : NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--probe") == 0) return run_probe(argc, argv);
    /* The planner builds, costs and frees a schedule per candidate placement
     * (hundreds of MB each for the largest models): freed memory stays in
     * the heap for the next one, rather than going back to the kernel in
     * munmap and coming again as freshly zeroed pages (a fault a page). */
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    ZincOptions o;
    memset(&o, 0, sizeof o);
    read_environment(&o);
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        free(o.includes);
        return rc - 100;
    }
    Arena a;
    arena_init(&a);
    SourceSet src;
    source_set_init(&src);
    DiagSink d;
    diag_init(&d);
    rc = zinfc_run(&o, &a, &src, &d);
    diag_render(&d, &src, stderr, o.color);
    if (rc == 0 && d.errors) rc = 1;
    diag_free(&d);
    source_set_free(&src);
    arena_free(&a);
    free(o.includes);
    fflush(stdout);
    return rc;
}
