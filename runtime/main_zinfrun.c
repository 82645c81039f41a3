/* zinfrun: executes a plan. Run alone it is one rank; under mpirun (or srun)
 * every process is a rank. Only this file prints and picks exit codes:
 * 0 done, 1 a runtime error (bad plan, data, I/O, a failed rank), 2 bad usage. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "ckpt.h"
#include "dataorder.h"
#include "nearest.h"
#include "comm.h"
#include "cost.h"
#include "exec.h"
#include "hostk_threads.h"
#include "hfio.h"
#include "main_env.h"
#include "hftok.h"
#include "outpath.h"
#include "plan.h"
#include "probe.h"
#include "adam.h"
#include "tbevents.h"
#include "tokens.h"
#include "verify.h"
#include "clock.h"
#include "progress_meter.h"

typedef struct Opts {
    const char *plan, *data, *backend, *ckpt_dir, *trace, *nvme, *export_path, *losses, *init, *export_hf;
    const char *eval_data, *tensorboard;
    int64_t steps, ckpt_every;
    int64_t eval_every, eval_batches; /* 0: at the end only; 0: every window of the file */
    uint64_t shard_size;
    bool resume, quiet, start_over, merge_lora, from_scratch;
    DordOrder data_order;
    uint64_t data_seed;
    bool data_seed_given;
    int64_t eos; /* -1: no document boundaries */
} Opts;

static const char *const flags[] = {"--data", "--steps", "--backend", "--checkpoint-dir", "--checkpoint-every",
                                    "--resume", "--start-over", "--trace", "--nvme", "--export", "--losses", "--quiet", "--help", "--version",
                                    "--init", "--export-hf", "--export-hf-shard-size", "--data-order", "--data-seed", "--eos",
                                    "--eval-data", "--eval-every", "--eval-batches", "--merge-lora", "--from-scratch",
                                    "--tensorboard"};

static void usage(FILE *f) {
    fprintf(f,
            "usage: zinfrun MODEL.plan --data TRAIN.bin [options]\n"
            "       mpirun -np N zinfrun MODEL.plan --data TRAIN.bin [options]\n"
            "  --steps N              the step to train to (default: the plan's train { steps }); counted from\n"
            "                         the first run's step 0, so a run resumed at step S trains N - S steps\n"
            "  --backend auto|host|cuda   where to run (auto: cuda when a GPU is there, else host)\n"
            "  --checkpoint-dir D     write checkpoints under D (atomically; the newest two are kept)\n"
            "  --checkpoint-every N   every N steps (default: only at the end, or when interrupted)\n"
            "  --resume               continue from the newest checkpoint of this plan in D that loads\n"
            "  --start-over           train from step 0 although D holds checkpoints (they are kept)\n"
            "  --nvme DIR             use DIR for the plan's NVMe swap space instead of the target's paths\n"
            "  --trace FILE           write the measured timeline of the last step (Chrome trace JSON)\n"
            "  --export FILE          after training, write the parameters as one safetensors file (a new file)\n"
            "  --init PATH            start from Hugging Face weights: a model directory (model.safetensors, or\n"
            "                         the shards of model.safetensors.index.json) or one .safetensors file;\n"
            "                         the plan's hf mapping says which tensors make each parameter. Also the\n"
            "                         file of --export (the plan's own names; any plan of the same model)\n"
            "  --export-hf DIR        after training, write DIR (config.json, model*.safetensors, and the\n"
            "                         tokenizer and generation_config.json of --init's directory) for\n"
            "                         transformers' from_pretrained; DIR must be new or empty. With --steps 0\n"
            "                         (and --resume or --init) it exports without training\n"
            "  --from-scratch         train a plan with a Hugging Face mapping from its seeded random weights\n"
            "                         (without it, such a plan needs --init or --resume to --export-hf)\n"
            "  --export-hf-shard-size SIZE  largest safetensors file of --export-hf (default 5GB; 500MB, 2GiB, bytes)\n"
            "  --merge-lora           --export-hf of a plan with LoRA adapters writes the base model with them\n"
            "                         merged (W + A B alpha/r), not the PEFT adapter (docs/huggingface.md)\n"
            "  --data-order sequential|shuffle  the order of the training rows (default sequential: the file's\n"
            "                         windows in order); shuffle: a seeded permutation of the rows of T+1\n"
            "                         tokens, a new one every epoch, the same on every number of ranks\n"
            "  --data-seed N          the shuffle's seed (default: the plan's train { seed })\n"
            "  --eos ID               token ID ends a document: rows start at document starts and never\n"
            "                         cross one (docs/training.md \"Data\")\n"
            "  --eval-data FILE       held-out tokens: report the mean loss on them (forward only: no gradient,\n"
            "                         no optimizer step) in the progress, --losses and --trace\n"
            "  --eval-every N         evaluate at step 0 and after every N steps (default: after the last step)\n"
            "  --eval-batches K       micro-batches per rank an evaluation reads, from the file's first window\n"
            "                         on (default: every window the file holds, divided among the ranks)\n"
            "  --losses FILE          append \"step N loss L grad_norm G\" lines (full precision) to FILE,\n"
            "                         and \"eval step N loss L batches K\" lines with --eval-data\n"
            "  --tensorboard DIR      write TensorBoard event files to DIR (rank 0): loss, eval loss, learning rate,\n"
            "                         grad norm, loss scale, tokens/s, TFLOP/s, step time against the prediction,\n"
            "                         busy time and bytes per queue; a resumed run adds a file, its steps continuing\n"
            "  --quiet                only the final summary (it has the last evaluation's loss)\n"
            "Output paths are checked, and their parent directories made, before step 1; the disk space that\n"
            "checkpoints and exports need is checked too. SIGINT (Ctrl-C), SIGTERM or SIGUSR1 stop the run at\n"
            "the end of the step in progress and write a checkpoint to --checkpoint-dir; exit status 128 + the\n"
            "signal's number. A second one exits at once.\n");
}

/* "5GB" (powers of 1000, as Hugging Face counts), "2GiB" (powers of 1024), "123". */
static int parse_size(const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || !(x > 0)) return -1;
    static const struct { const char *unit; double mul; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(end, units[i].unit)) {
            double b = x * units[i].mul;
            if (b < 1 || b > 1e19) return -1;
            *out = (uint64_t)b;
            return 0;
        }
    return -1;
}

static int parse(int argc, char **argv, Opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "auto";
    o->steps = -1;
    o->eos = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define VAL() (i + 1 < argc ? argv[++i] : (fprintf(stderr, "zinfrun: %s needs a value\n", a), (char *)NULL))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
        else if (!strcmp(a, "--version")) { printf("zinfrun %s\n", ZINF_VERSION); exit(0); }
        else if (!strcmp(a, "--data")) { if (!(o->data = VAL())) return 2; }
        else if (!strcmp(a, "--backend")) { if (!(o->backend = VAL())) return 2; }
        else if (!strcmp(a, "--checkpoint-dir")) { if (!(o->ckpt_dir = VAL())) return 2; }
        else if (!strcmp(a, "--trace")) { if (!(o->trace = VAL())) return 2; }
        else if (!strcmp(a, "--nvme")) { if (!(o->nvme = VAL())) return 2; }
        else if (!strcmp(a, "--export")) { if (!(o->export_path = VAL())) return 2; }
        else if (!strcmp(a, "--losses")) { if (!(o->losses = VAL())) return 2; }
        else if (!strcmp(a, "--init")) { if (!(o->init = VAL())) return 2; }
        else if (!strcmp(a, "--eval-data")) { if (!(o->eval_data = VAL())) return 2; }
        else if (!strcmp(a, "--tensorboard")) { if (!(o->tensorboard = VAL())) return 2; }
        else if (!strcmp(a, "--export-hf")) { if (!(o->export_hf = VAL())) return 2; }
        else if (!strcmp(a, "--export-hf-shard-size")) {
            const char *v = VAL();
            if (!v) return 2;
            if (parse_size(v, &o->shard_size)) {
                fprintf(stderr, "zinfrun: --export-hf-shard-size needs a size like 5GB, 500MB, 2GiB or a byte count, not '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--data-order")) {
            const char *v = VAL();
            if (!v) return 2;
            if (dord_parse_order(v, &o->data_order)) {
                fprintf(stderr, "zinfrun: --data-order must be sequential or shuffle, not '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--data-seed")) {
            const char *v = VAL();
            if (!v) return 2;
            char *end;
            errno = 0;
            unsigned long long x = strtoull(v, &end, 10);
            if (!*v || *end || errno || v[0] == '-' || v[0] == '+') {
                fprintf(stderr, "zinfrun: --data-seed needs an integer 0..%llu, not '%s'\n", (unsigned long long)UINT64_MAX, v);
                return 2;
            }
            o->data_seed = x;
            o->data_seed_given = true;
        }
        else if (!strcmp(a, "--eos")) {
            const char *v = VAL();
            if (!v) return 2;
            char *end;
            errno = 0;
            long long x = strtoll(v, &end, 10);
            if (!*v || *end || errno || x < 0 || x > INT32_MAX) {
                fprintf(stderr, "zinfrun: --eos needs a token id (an integer 0..%d), not '%s'\n", INT32_MAX, v);
                return 2;
            }
            o->eos = x;
        }
        else if (!strcmp(a, "--resume")) o->resume = true;
        else if (!strcmp(a, "--start-over")) o->start_over = true;
        else if (!strcmp(a, "--quiet")) o->quiet = true;
        else if (!strcmp(a, "--merge-lora")) o->merge_lora = true;
        else if (!strcmp(a, "--from-scratch")) o->from_scratch = true;
        else if (!strcmp(a, "--steps") || !strcmp(a, "--checkpoint-every") || !strcmp(a, "--eval-every") ||
                 !strcmp(a, "--eval-batches")) {
            const char *v = VAL();
            if (!v) return 2;
            char *end;
            errno = 0;
            long long x = strtoll(v, &end, 10);
            bool positive = !strncmp(a, "--eval", 6);
            if (*end || x < 0 || (positive && (!*v || errno || x < 1 || x > INT32_MAX))) {
                fprintf(stderr, "zinfrun: %s needs a %s integer, not '%s'\n", a, positive ? "positive" : "non-negative", v);
                return 2;
            }
            if (!strcmp(a, "--steps")) o->steps = x;
            else if (!strcmp(a, "--checkpoint-every")) o->ckpt_every = x;
            else if (!strcmp(a, "--eval-every")) o->eval_every = x;
            else o->eval_batches = x;
        } else if (a[0] == '-') {
            const char *near = nearest_word(a, flags, (int)(sizeof flags / sizeof *flags));
            if (near) fprintf(stderr, "zinfrun: unknown option '%s'; did you mean '%s'?\n", a, near);
            else fprintf(stderr, "zinfrun: unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (!o->plan) o->plan = a;
        else { fprintf(stderr, "zinfrun: more than one plan given ('%s' and '%s')\n", o->plan, a); return 2; }
#undef VAL
    }
    if (!o->plan) { fprintf(stderr, "zinfrun: no plan given\n"); usage(stderr); return 2; }
    if (strcmp(o->backend, "auto") && strcmp(o->backend, "host") && strcmp(o->backend, "cuda")) {
        fprintf(stderr, "zinfrun: --backend must be auto, host or cuda, not '%s'\n", o->backend);
        return 2;
    }
    if (o->resume && !o->ckpt_dir) { fprintf(stderr, "zinfrun: --resume needs --checkpoint-dir\n"); return 2; }
    if (o->start_over && !o->ckpt_dir) { fprintf(stderr, "zinfrun: --start-over needs --checkpoint-dir\n"); return 2; }
    if (o->ckpt_every && !o->ckpt_dir) {
        fprintf(stderr, "zinfrun: --checkpoint-every needs --checkpoint-dir (the directory the checkpoints go to)\n");
        return 2;
    }
    if (o->from_scratch && o->init) { fprintf(stderr, "zinfrun: --from-scratch and --init contradict each other\n"); return 2; }
    if (o->resume && o->start_over) { fprintf(stderr, "zinfrun: --resume and --start-over contradict each other\n"); return 2; }
    if (o->data_seed_given && o->data_order != DORD_SHUFFLE) {
        fprintf(stderr, "zinfrun: --data-seed needs --data-order shuffle\n");
        return 2;
    }
    if ((o->eval_every || o->eval_batches) && !o->eval_data) {
        fprintf(stderr, "zinfrun: %s needs --eval-data\n", o->eval_every ? "--eval-every" : "--eval-batches");
        return 2;
    }
    if (o->shard_size && !o->export_hf) { fprintf(stderr, "zinfrun: --export-hf-shard-size needs --export-hf\n"); return 2; }
    if (!o->data && (o->steps != 0)) { fprintf(stderr, "zinfrun: --data TRAIN.bin is required to train (or --steps 0)\n"); return 2; }
    return 0;
}

static Comm C;

/* SIGINT, SIGTERM (a scheduler's time limit; mpirun turns its own SIGINT
 * into one) and SIGUSR1 (what mpirun forwards untouched, and Slurm's
 * --signal sends ahead of a time limit) ask the run to stop: the step in
 * progress finishes, every rank agrees at the step's end, a checkpoint is
 * written when there is a directory, and the exit status is 128 + the
 * signal. A second one exits at once. The handler only sets the flag and
 * writes a line composed beforehand (rank 0's; write is async-signal-safe). */
static volatile sig_atomic_t stop_signal;
static char stop_line[1200];
static size_t stop_line_len;
/* Signals taken so far. The process has threads (I/O, the optimizer), and
 * two signals sent together may be handled at once on two of them: a
 * plain test of stop_signal would let both count as the first. A
 * lock-free atomic is async-signal-safe. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the stop-signal count must be lock-free to be used in a handler");
static atomic_int stop_signals_taken;

static void on_stop_signal(int sig) {
    if (atomic_fetch_add(&stop_signals_taken, 1) > 0) {
        static const char again[] = "zinfrun: interrupted again: exiting now, without a checkpoint of the step in progress\n";
        if (stop_line_len && write(2, again, sizeof again - 1) < 0) _exit(128 + sig);
        _exit(128 + sig);
    }
    stop_signal = sig;
    if (stop_line_len && write(2, stop_line, stop_line_len) < 0) return;
}

static void catch_stop_signals(const char *ckpt_dir, bool lead) {
    if (lead) {
        int k = snprintf(stop_line, sizeof stop_line,
                         "zinfrun: signal received: stopping at the end of the step in progress%s%s; send it again to exit at once\n",
                         ckpt_dir ? " and writing a checkpoint to " : " (nothing is saved: no --checkpoint-dir)",
                         ckpt_dir ? ckpt_dir : "");
        stop_line_len = k > 0 && (size_t)k < sizeof stop_line ? (size_t)k : 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);  /* on one thread, one handler at a time */
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

/* Whether to stop before the next step: every rank's flag, so that all
 * stop after the same step (a rank alone would leave the others waiting
 * in the next step's collectives). */
static int stop_agreed(char *err, size_t n) {
    int64_t sig = stop_signal;
    if (C.size > 1 && comm_allreduce_max_i64(&C, &sig) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(&C)), -1;
    return (int)sig;
}

/* Every error ends here: printed with the rank, and in a job of several
 * ranks the job is aborted so that no other rank waits in a collective. */
static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char m[16384];
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    /* messages from below may already name the rank: say it once */
    char own[32];
    int ol = snprintf(own, sizeof own, "rank %d", C.rank);
    bool named = !strncmp(m, own, (size_t)ol) && (m[ol] == ':' || m[ol] == ',');
    if (C.size > 1 && !named) fprintf(stderr, "zinfrun: rank %d: %s\n", C.rank, m);
    else fprintf(stderr, "zinfrun: %s\n", m);
    fflush(stderr);
    if (C.size > 1) comm_abort(&C, 1);
    return 1;
}

/* "step-00000040 (another plan or world: 4 ranks), ..." for the complete
 * checkpoints of other runs (with why[i] when --resume found out why it
 * cannot read one) and the manifests that do not parse; candidates are
 * left out. */
static void list_others(const CkptInfo *v, int n, const bool *cand, char (*why)[600], char *out, size_t len) {
    size_t used = 0;
    int shown = 0, more = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        const CkptInfo *c = &v[i];
        if (c->state == CKPT_INCOMPLETE || cand[i]) continue;
        if (shown == 4) { more++; continue; }
        char what[640];
        if (c->state == CKPT_BAD_MANIFEST) snprintf(what, sizeof what, "%s", c->why);
        else if (why && why[i][0]) snprintf(what, sizeof what, "%s", why[i]);
        else snprintf(what, sizeof what, "another plan or world: %d rank%s", c->world, c->world == 1 ? "" : "s");
        int w = snprintf(out + used, len - used, "%sstep-%08" PRId64 " (%s)", shown ? ", " : "", c->step, what);
        if (w > 0) used = (size_t)w < len - used ? used + (size_t)w : len - 1;
        shown++;
    }
    if (more && used + 1 < len) snprintf(out + used, len - used, " and %d more", more);
}

enum { MAXC = 64 };

/* Rank 0: which checkpoints --resume tries, newest first, into cand[1..]
 * (cand[0] the count): this run's, and with --resume the same model's
 * written by another world or plan (read by resharding); or the refusal
 * of a fresh run beside checkpoints. -1 with err. */
static int choose_checkpoints(Rt *r, const Opts *o, const CkptInfo *v, int nv, int64_t *cand, char *msg, size_t msgn,
                              char *err, size_t n) {
    uint64_t hash = rt_plan_hash(r);
    bool *is_cand = calloc((size_t)nv + 1, sizeof *is_cand);
    char (*why)[600] = o->resume ? calloc((size_t)nv + 1, sizeof *why) : NULL;
    if (!is_cand || (o->resume && !why)) {
        free(is_cand);
        free(why);
        snprintf(err, n, "out of memory listing %s", o->ckpt_dir);
        return -1;
    }
    int own = 0, other = 0, nc = 0, rc = 0;
    for (int i = 0; i < nv; i++) {
        if (v[i].state != CKPT_COMPLETE) {
            other += v[i].state != CKPT_INCOMPLETE;
            continue;
        }
        bool mine = ckpt_is_own(&v[i], C.size, hash);
        if (!mine && why && !v[i].layout)
            snprintf(why[i], sizeof why[i], "another plan or world: %d rank%s; its manifest records no layout (written before resharding existed)",
                     v[i].world, v[i].world == 1 ? "" : "s");
        if (!mine && why && (!v[i].layout || rt_checkpoint_check(r, o->ckpt_dir, v[i].step, why[i], sizeof why[i]) != 0)) {
            other++;
            continue;
        }
        if (!mine && !why) {
            other++;
            continue;
        }
        own += mine;
        is_cand[i] = true;
        if (nc < MAXC) cand[1 + nc++] = v[i].step;
    }
    cand[0] = nc;
    list_others(v, nv, is_cand, why, msg, msgn);
    if (!o->resume && !o->start_over && own + other > 0) {
        char mine[64] = "";
        if (own) snprintf(mine, sizeof mine, "%sstep-%08" PRId64 " (this plan)", other ? ", " : "", cand[1]);
        snprintf(err, n,
                 "%s already holds checkpoints: %s%s; add --resume to continue this plan's newest, "
                 "--start-over to train from step 0 beside them (other runs' are never pruned), "
                 "or choose another --checkpoint-dir",
                 o->ckpt_dir, msg, mine);
        rc = -1;
    } else if (o->resume && nc == 0 && other > 0) {
        snprintf(err, n, "--resume: %s holds no checkpoint of this model that this plan on %d rank%s can read, only %s; nothing was loaded",
                 o->ckpt_dir, C.size, C.size == 1 ? "" : "s", msg);
        rc = -1;
    } else if (o->resume && msg[0]) { /* said even with --quiet: something was not used */
        printf("resume: skipped: %s\n", msg);
    }
    free(is_cand);
    free(why);
    return rc;
}

/* "resume: from step 12 (ck/step-00000012), resharded: written by 2 ranks
 * (plan 3f2a...), read by 1; micro-batch 2 -> 4" */
static void say_resumed(const Plan *p, const Opts *o, int64_t start, int64_t step, const RtCkptOrigin *f) {
    printf("resume: from step %" PRId64 " (%s/step-%08" PRId64 ")", start, o->ckpt_dir, step);
    if (f->resharded)
        printf(", resharded: written by %d rank%s (plan %016" PRIx64 "), read by %d", f->world, f->world == 1 ? "" : "s",
               f->plan_hash, C.size);
    int64_t accum = p->train.grad_accum > 0 ? p->train.grad_accum : 1;
    if (f->micro_batch > 0 && f->micro_batch != p->train.micro_batch)
        printf("; micro-batch %" PRId64 " -> %" PRId64, f->micro_batch, p->train.micro_batch);
    if (f->grad_accum > 0 && f->grad_accum != accum) printf("; grad_accum %" PRId64 " -> %" PRId64, f->grad_accum, accum);
    printf("\n");
}

/* The checkpoint directory at start: rank 0 removes this run's debris and
 * decides, every rank loads. A fresh run never writes beside checkpoints
 * it did not make unless told to; --resume falls back to the newest
 * checkpoint of this model that loads (this plan's, or another world's or
 * plan's read by resharding) and never quietly starts over when the
 * directory holds only other models' checkpoints. */
static int checkpoint_start(Rt *r, const Opts *o, bool lead, int64_t *start, int64_t *loaded, RtCkptOrigin *from,
                            char *err, size_t n) {
    int64_t cand[MAXC + 1] = {0}; /* [0] = count, or -1: rank 0 failed (err) */
    uint64_t hash = rt_plan_hash(r);
    char msg[4096];
    if (lead) {
        char report[1024];
        int cleaned = ckpt_clean_debris(o->ckpt_dir, C.size, hash, report, sizeof report, err, n);
        CkptInfo *v = NULL;
        int nv = 0;
        if (cleaned < 0 || ckpt_scan(o->ckpt_dir, &v, &nv, err, n)) {
            cand[0] = -1;
        } else {
            if (cleaned > 0) printf("checkpoints: removed what a killed run left: %s\n", report);
            if (choose_checkpoints(r, o, v, nv, cand, msg, sizeof msg, err, n)) cand[0] = -1;
            free(v);
        }
    }
    if (comm_bcast(&C, cand, sizeof cand, 0) != COMM_OK) {
        snprintf(err, n, "%s", comm_last_error(&C));
        return -1;
    }
    if (cand[0] < 0) {
        if (!lead) snprintf(err, n, "rank 0 refused the checkpoint directory %s", o->ckpt_dir);
        return -1;
    }
    if (!o->resume) return 0;
    if (cand[0] == 0) {
        if (lead) printf("resume: no checkpoint in %s; starting from step 0\n", o->ckpt_dir);
        return 0;
    }
    for (int64_t k = 1; k <= cand[0]; k++) {
        bool mine = false;
        int rc = rt_checkpoint_load_from(r, o->ckpt_dir, cand[k], &mine, from, msg, sizeof msg);
        if (rc == 0) {
            /* a run killed before pruning left more than it keeps */
            if (lead && ckpt_prune(o->ckpt_dir, C.size, hash, cand[k], 2, msg, sizeof msg))
                fprintf(stderr, "zinfrun: resume: %s\n", msg);
            *start = rt_steps_done(r);
            *loaded = cand[k];
            return 0;
        }
        if (rc == RT_LOAD_FAILED || rc == RT_LOAD_REFUSED) { /* not the checkpoint's fault: an older one would fail alike */
            snprintf(err, n, "resume from step-%08" PRId64 ": %s", cand[k], msg);
            return -1;
        }
        /* the rank that found the defect says what it is; every rank moves on together */
        if (mine) {
            if (C.size > 1) fprintf(stderr, "zinfrun: rank %d: resume: step-%08" PRId64 " skipped: %s\n", C.rank, cand[k], msg);
            else fprintf(stderr, "zinfrun: resume: step-%08" PRId64 " skipped: %s\n", cand[k], msg);
            fflush(stderr);
        }
        if (lead) {
            char to[4200];
            if (ckpt_set_aside(o->ckpt_dir, cand[k], to, sizeof to, msg, sizeof msg))
                fprintf(stderr, "zinfrun: resume: %s\n", msg);
            else
                printf("resume: step-%08" PRId64 " does not load; set aside as %s (nothing deleted)%s\n", cand[k], to,
                       k < cand[0] ? ", trying the one before" : "");
        }
    }
    snprintf(err, n, "--resume: none of the %" PRId64 " checkpoint%s of this plan in %s loads (see above); nothing to resume from",
             cand[0], cand[0] == 1 ? "" : "s", o->ckpt_dir);
    return -1;
}

/* Every rank learns rank 0's verdict (bad: 1 when it refused, err then says why). */
static int lead_agrees(int64_t bad, const char *what, char *err, size_t n) {
    int v = comm_agree(&C, bad != 0);
    if (v < 0) {
        snprintf(err, n, "%s", comm_last_error(&C));
        return -1;
    }
    if (v && C.rank != 0) snprintf(err, n, "rank 0 refused %s (its message says why)", what);
    return v ? -1 : 0;
}

/* Rank 0 checks, before any step is trained, every path the run writes
 * at its end: --export a new file, --export-hf a new or empty directory,
 * --trace a file; their parent directories are made and must take new
 * files. A run is never lost to a path it cannot write. */
static int outputs_ok(const Opts *o, bool lead, char *err, size_t n) {
    int64_t bad = 0;
    if (lead)
        bad = (o->export_path && outpath_prepare_file("--export", o->export_path, true, err, n)) ||
              (o->export_hf && (outpath_prepare_dir("--export-hf", o->export_hf, err, n) || hfio_check_export_dir(o->export_hf, err, n))) ||
              (o->trace && outpath_prepare_file("--trace", o->trace, false, err, n));
    return lead_agrees(bad, "the output paths", err, n);
}

static double peak_rss_mib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) ? 0 : (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* --init: the weights from a Hugging Face checkpoint, at step 0. */
static int import_hf(Rt *r, const Opts *o, const HfioOptions *ho, bool lead, char *err, size_t n) {
    double t0 = clock_mono_s(), rss0 = peak_rss_mib();
    HfioReport rep;
    char e[16000];
    if (hfio_import(r, o->init, ho, &rep, e, sizeof e)) {
        snprintf(err, n, "--init: %s", e);
        return -1;
    }
    if (!lead) return 0;
    if (rep.nunused)
        fprintf(stderr, "zinfrun: init: warning: %d tensor%s in %s map%s to no parameter and %s not used: %s\n", rep.nunused,
                rep.nunused == 1 ? "" : "s", o->init, rep.nunused == 1 ? "s" : "", rep.nunused == 1 ? "is" : "are", rep.unused);
    if (o->quiet) return 0;
    char b1[32];
    printf("init: %d parameters from %d tensors of %s (%d file%s%s; rank 0 read %s) in %.2f s; peak RSS %.1f MiB (%.1f before the import)\n",
           rep.params, rep.tensors, o->init, rep.files, rep.files == 1 ? "" : "s",
           rep.own_names ? ", zinfrun --export: the plan's own names" : "", plan_bytes_str(rep.bytes, b1, sizeof b1), clock_mono_s() - t0,
           peak_rss_mib(), rss0);
    if (rep.params_kept)
        printf("init: %d parameter%s with no Hugging Face tensor keep%s the seeded initialisation\n", rep.params_kept,
               rep.params_kept == 1 ? "" : "s", rep.params_kept == 1 ? "s" : "");
    if (rep.nignored)
        printf("init: skipped %d tensor%s with no zinf counterpart (tied lm_head, mask buffers, rotary frequencies): %s\n", rep.nignored,
               rep.nignored == 1 ? "" : "s", rep.ignored);
    return 0;
}

static int64_t plan_vocab(const Plan *p) {
    for (uint32_t k = 0; k < p->nops; k++)
        if (p->ops[k].kind == 0 /* OP_FWD */ && p->ops[k].prim == 0 /* PRIM_EMBEDDING */ && p->ops[k].in[0] >= 0)
            return p->tensors[p->ops[k].in[0]].dims[0];
    return 0;
}

/* The checkpoint's "run" state: the data position. */
static void run_state(const DataOrder *d, int64_t g, char *buf, size_t n) {
    char js[400];
    dord_state_json(d, g, js, sizeof js);
    snprintf(buf, n, "{\"data\": %s}", js);
}

/* --resume: rank 0 checks that the checkpoint's data order is this run's
 * (order, seed, EOS, file size, position); every rank learns the verdict. */
static int data_resume_check(const DataOrder *d, const Opts *o, bool lead, int64_t step_dir, int64_t g, char *err,
                             size_t n) {
    int64_t bad = 0;
    if (lead) {
        char e[1024];
        char *st = ckpt_read_state(o->ckpt_dir, step_dir, e, sizeof e);
        if (!st || dord_state_check(d, st, g, e, sizeof e)) {
            snprintf(err, n, "resume from %s/step-%08" PRId64 ": %s", o->ckpt_dir, step_dir, e);
            bad = 1;
        }
        free(st);
    }
    if (comm_allreduce_max_i64(&C, &bad) != COMM_OK) {
        snprintf(err, n, "%s", comm_last_error(&C));
        return -1;
    }
    if (bad && !lead) snprintf(err, n, "rank 0 refused to resume from %s/step-%08" PRId64 " (another data order)", o->ckpt_dir, step_dir);
    return bad ? -1 : 0;
}

/* A checkpoint read by another world or micro-batch: the data position
 * (global micro-batches of the writer's ranks x micro-batch rows) falls on
 * a step of this run only when a step reads as many rows. */
static int global_batch_check(const RtCkptOrigin *f, const Opts *o, int64_t step_dir, int64_t B, int64_t accum, char *err,
                              size_t n) {
    if (f->micro_batch <= 0) return 0; /* an old manifest: its own plan and world only, as before */
    int64_t was = (int64_t)f->world * f->micro_batch * f->grad_accum, now = (int64_t)C.size * B * accum;
    if (was == now) return 0;
    snprintf(err, n,
             "resume from %s/step-%08" PRId64 ": the checkpoint was trained on %" PRId64 " rows a step (%d rank%s x micro-batch %" PRId64
             " x grad_accum %" PRId64 "), this run reads %" PRId64 " (%d rank%s x %" PRId64 " x %" PRId64
             "): its data position would not fall on a step of this run; choose micro_batch and grad_accum so that "
             "ranks x micro_batch x grad_accum = %" PRId64 ", or use --start-over",
             o->ckpt_dir, step_dir, was, f->world, f->world == 1 ? "" : "s", f->micro_batch, f->grad_accum, now, C.size,
             C.size == 1 ? "" : "s", B, accum, was);
    return -1;
}

/* "data: ..." before step 1: what one epoch is and where the run starts. */
static void data_describe(const DataOrder *d, const Opts *o, int64_t g) {
    char how[64] = "sequential";
    if (d->o.order == DORD_SHUFFLE) snprintf(how, sizeof how, "shuffle (seed %" PRIu64 ")", d->o.seed);
    printf("data: %s: %" PRId64 " tokens, %s, ", o->data, d->r->ntokens, how);
    if (d->windows)
        printf("%" PRId64 " windows of B*T+1 = %" PRId64 " tokens an epoch", d->rows / d->B, d->B * d->T + 1);
    else if (d->o.eos >= 0)
        printf("%" PRId64 " rows of T+1 = %" PRId64 " tokens an epoch in %" PRId64 " of %" PRId64
               " documents split at EOS %" PRId64 " (%" PRId64 " tokens read an epoch)",
               d->rows, d->T + 1, d->ndocs, d->docs_all, d->o.eos, d->tokens_used);
    else
        printf("%" PRId64 " rows of T+1 = %" PRId64 " tokens an epoch", d->rows, d->T + 1);
    if (d->packed)
        printf("; packed: %" PRId64 " samples in its rows", d->r->pack_samples);
    if (d->r->version == TOK_VERSION_MASKED || d->r->version == TOK_VERSION_PACKED)
        printf("; %" PRId64 " of its tokens trained (%.1f%%), the loss their mean over each global batch", d->r->ntrained,
               d->r->ntokens ? 100.0 * (double)d->r->ntrained / (double)d->r->ntokens : 0.0);
    if (g > 0) printf("; from global micro-batch %" PRId64 " (epoch %" PRId64 ")", g, dord_epoch(d, g) + 1);
    printf("\n");
}

/* Every id of a token file below the model's vocabulary, checked before
 * step 1: a bad id would otherwise stop the run at the step that reads it. */
static int ids_ok(TokReader *tr, char *err, size_t n) {
    char e[1024];
    if (!tok_check_ids(tr, e, sizeof e)) return 0;
    if (!strstr(e, "is not below the vocabulary size")) return snprintf(err, n, "%s", e), -1;
    snprintf(err, n, "%s (checked before step 1; the file was made for another vocabulary than the model's: "
             "tokenize the text with the model's own tokenizer, zinftok --tokenizer DIR/tokenizer.json)", e);
    return -1;
}

/* The fingerprint of the tokenizer.json beside --init (rank 0; 0: none
 * there, or no --init directory), for tokenizer_ok. */
static uint64_t init_tokenizer(const Opts *o, char *path, size_t pn) {
    struct stat st;
    if (!o->init || stat(o->init, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    snprintf(path, pn, "%s/tokenizer.json", o->init);
    HfTok *t = NULL;
    char e[1024];
    if (access(path, R_OK) != 0 || hftok_load(&t, path, e, sizeof e)) return 0; /* one zinftok cannot read made no token file */
    uint64_t fp = hftok_fingerprint(t);
    hftok_free(t);
    return fp;
}

/* --eval-data: the held-out micro-batches, read once (sequential windows,
 * global micro-batches 0..K-1, each rank its share as training reads). */
typedef struct Eval {
    TokReader tr;
    DataOrder d;
    bool have_tr, have_d;
    int k;                  /* micro-batches per rank */
    bool ran;               /* an evaluation ran: its step and loss are the last ones */
    int64_t last_step;
    double last_loss;
    int32_t **tok, **tgt;
    int32_t **seg;          /* a packed file's sample starts per batch, else NULL */
} Eval;

static void eval_close(Eval *e) {
    for (int b = 0; e->tok && b < e->k; b++) {
        free(e->tok[b]);
        free(e->tgt[b]);
        if (e->seg) free(e->seg[b]);
    }
    free(e->tok);
    free(e->tgt);
    free(e->seg);
    if (e->have_d) dord_close(&e->d);
    if (e->have_tr) tok_close(&e->tr);
    memset(e, 0, sizeof *e);
}

static int eval_open(Eval *e, const Opts *o, int64_t vocab, int64_t B, int64_t T, char *err, size_t n) {
    memset(e, 0, sizeof *e);
    if (tok_open(&e->tr, o->eval_data, vocab, err, n)) return -1;
    e->have_tr = true;
    if (ids_ok(&e->tr, err, n)) return -1;
    DordOptions dopt = {.order = DORD_SEQUENTIAL, .seed = 0, .eos = -1};
    if (dord_open(&e->d, &e->tr, &dopt, B, T, C.size, err, n)) return -1;
    e->have_d = true;
    int64_t w = e->d.rows / B, k = o->eval_batches ? o->eval_batches : w / C.size;
    if (k * C.size > w) {
        snprintf(err, n, "--eval-data %s: %" PRId64 " window%s of B*T+1 = %" PRId64 " tokens; --eval-batches %" PRId64
                 " on %d rank%s reads %" PRId64 ": give fewer batches or a longer file",
                 o->eval_data, w, w == 1 ? "" : "s", B * T + 1, k, C.size, C.size == 1 ? "" : "s", k * C.size);
        return -1;
    }
    if (k > INT32_MAX / 2) k = INT32_MAX / 2;
    e->tok = calloc((size_t)k, sizeof *e->tok);
    e->tgt = calloc((size_t)k, sizeof *e->tgt);
    if (e->d.packed) e->seg = calloc((size_t)k, sizeof *e->seg);
    if (!e->tok || !e->tgt || (e->d.packed && !e->seg)) return snprintf(err, n, "out of memory for the evaluation batches"), -1;
    e->k = (int)k;
    for (int b = 0; b < e->k; b++) {
        e->tok[b] = malloc(sizeof(int32_t) * (size_t)(B * T));
        e->tgt[b] = malloc(sizeof(int32_t) * (size_t)(B * T));
        if (!e->tok[b] || !e->tgt[b]) return snprintf(err, n, "out of memory for the evaluation batches"), -1;
        if (dord_batch(&e->d, C.rank, b, e->tok[b], e->tgt[b], err, n)) return -1;
        if (e->seg && (!(e->seg[b] = malloc(sizeof(int32_t) * (size_t)(B * T))) ||
                       dord_segments(&e->d, C.rank, b, e->seg[b], err, n)))
            return e->seg[b] ? -1 : (snprintf(err, n, "out of memory for the evaluation batches"), -1);
    }
    return 0;
}

/* Whether to evaluate with the weights of step s: at step 0 and every N
 * steps (--eval-every N; without it after the last step); a resumed run
 * not at its first step (its checkpointing run evaluated it); a run with
 * nothing to train once, at the step it loaded. */
static bool eval_due(const Opts *o, int64_t s, int64_t start, int64_t total) {
    if (!o->eval_data) return false;
    if (start >= total) return s == start;
    if (s == start && start > 0) return false;
    if (!o->eval_every) return s == total;
    return s % o->eval_every == 0;
}

/* "eval: step 20, loss 4.8123 over 8 batches (8192 tokens)" and the --losses line. */
static void tb_stop(TbWriter **tb, const char *why);

static int eval_at(Rt *r, Eval *e, int64_t s, int64_t tokens, const Opts *o, FILE *lossf, TbWriter **tb, bool tty,
                   char *err, size_t n) {
    RtEvalStats st;
    if (rt_eval_packed(r, (const int32_t *const *)e->tok, (const int32_t *const *)e->tgt, (const int32_t *const *)e->seg,
                       e->k, &st, err, n))
        return -1;
    int64_t g = (int64_t)e->k * C.size;
    e->ran = true;
    e->last_step = s;
    e->last_loss = st.loss;
    if (lossf) {
        fprintf(lossf, "eval step %" PRId64 " loss %.9g batches %" PRId64 "\n", s, st.loss, g);
        fflush(lossf);
    }
    char why[512];
    TbScalar v = {"eval/loss", st.loss};
    if (*tb && tb_scalars(*tb, s, &v, 1, why, sizeof why)) tb_stop(tb, why);
    if (C.rank == 0 && !o->quiet) {
        printf("%seval: step %" PRId64 ", loss %.4f over %" PRId64 " batch%s (%" PRId64 " tokens, %.1f ms)\n", tty ? "\n" : "", s,
               st.loss, g, g == 1 ? "" : "es", g * tokens, st.seconds * 1e3);
        fflush(stdout);
    }
    return 0;
}

/* The job's nodes against the plan's target, before anything is allocated.
 * A CUDA run must have the plan's node count and no more ranks on a node
 * than the plan's GPUs per node (with the plan's rank count: exactly that
 * many on each node, the last one possibly fewer). The host backend checks
 * the rank count only: its ranks are processes, and a host plan run across
 * several nodes is legitimate. A plain rank-count mismatch is left to
 * rt_create's message. Every rank holds the same layout, so all agree. */
static int check_layout(const Plan *p, RtBackend backend, char *err, size_t n) {
    if (backend != RT_BACKEND_CUDA || p->ranks != C.size) return 0;
    int nodes = p->target.nodes > 0 ? p->target.nodes : 1, per = p->target.gpus_per_node;
    if (per <= 0 || p->ranks > nodes * per) return 0; /* a target that does not say */
    return comm_layout_check(&C.layout, nodes, per, p->ranks, err, n);
}


/* Everything one run holds; run_close frees what exists. */
typedef struct Run {
    Opts o;
    MainEnv env;     /* the ZINF_* variables (main_env.h) */
    bool lead, tty;
    Plan *p;
    Rt *r;
    RtBackend backend;
    HfioOptions ho;
    ProgressMeter meter; /* rank 0's long phases (--init, --export-hf) on stderr */
    TokReader tr;
    DataOrder dord;
    bool have_data, have_order, have_cost;
    int32_t *tok[PLAN_MAX_ACCUM], *tgt[PLAN_MAX_ACCUM];
    int32_t *seg[PLAN_MAX_ACCUM]; /* a packed file's sample starts (dord_segments), else NULL */
    FILE *lossf;
    TbWriter *tb;                     /* --tensorboard, rank 0 */
    double tb_busy[PLAN_NQUEUES];     /* each queue's busy seconds at the last event */
    Eval ev;
    CostResult cr;
    int accum;
    int64_t B, T;              /* the token batch of a micro-batch (plan_batch_shape) */
    int64_t start, total;      /* steps: resumed from, to reach */
    int64_t loaded;            /* the checkpoint resumed from, -1: none */
    int64_t saved;             /* the newest checkpoint this run resumed from or wrote, -1: none */
    int stopped;               /* the signal that stopped training before its last step, 0: none */
    char tokpath[4200];        /* the tokenizer.json beside --init, and its fingerprint (0: none) */
    uint64_t tokfp;
    bool tok_read;             /* tokfp is known (read once, when a token file records its tokenizer) */
    RtCkptOrigin from;
    double first_loss, last_loss, time_sum; /* over the steps run */
    int64_t ran;
    /* the first step's time and queue totals, left out of the summary's means */
    double first_seconds, first_busy[PLAN_NQUEUES], first_wait[PLAN_NQUEUES];
    bool ticks;                /* the CPUs' steal and total time when the counted steps began (/proc/stat) */
    double steal0, total0;
} Run;

/* What the end-of-run means count: with more than one step, the steps
 * after the first, whose start also first touches the arenas' memory and
 * wakes the threads (the prediction is of a steady step). */
typedef struct Counted {
    int64_t steps;
    double seconds, busy[PLAN_NQUEUES], wait[PLAN_NQUEUES];
} Counted;

static Counted counted(const Run *u) {
    bool skip = u->ran > 1;
    Counted c = {skip ? u->ran - 1 : u->ran, u->time_sum - (skip ? u->first_seconds : 0), {0}, {0}};
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        c.busy[q] = rt_busy_seconds(u->r, q) - (skip ? u->first_busy[q] : 0);
        c.wait[q] = rt_wait_seconds(u->r, q) - (skip ? u->first_wait[q] : 0);
    }
    return c;
}

/* Rank 0 sets the disk space of each file system against what the run
 * will write there at its end or at an interruption: one more checkpoint
 * (the newest two are kept: the oldest goes only after the new one is
 * complete), the exports. The ranks' shards are alike, so world x this
 * rank's is the checkpoint. */
static int space_ok(const Run *u, char *err, size_t n) {
    const Opts *o = &u->o;
    const Plan *p = u->p;
    int64_t bad = 0;
    if (u->lead) {
        OutNeed nd = {0};
        char w1[600], w2[600], w3[600];
        uint64_t params = rt_export_bytes(u->r), adapters = 0;
        for (uint32_t t = 0; t < p->ntensors; t++)
            if (p->tensors[t].cls == TC_PARAM && p->tensors[t].name && strstr(p->tensors[t].name, ".lora_"))
                adapters += (uint64_t)p->tensors[t].numel * (uint64_t)plan_dtype_size(p->tensors[t].dtype);
        snprintf(w1, sizeof w1, "a checkpoint in %s", o->ckpt_dir ? o->ckpt_dir : "");
        snprintf(w2, sizeof w2, "--export %s", o->export_path ? o->export_path : "");
        snprintf(w3, sizeof w3, "--export-hf %s", o->export_hf ? o->export_hf : "");
        const uint64_t headers = 1 << 20;
        bad = (o->ckpt_dir && u->total > u->start &&
               outpath_need(&nd, w1, o->ckpt_dir, rt_checkpoint_bytes(u->r) * (uint64_t)C.size + headers, err, n)) ||
              (o->export_path && outpath_need(&nd, w2, o->export_path, params + headers, err, n)) ||
              (o->export_hf && outpath_need(&nd, w3, o->export_hf, (adapters && !o->merge_lora ? adapters : params) + headers, err, n)) ||
              outpath_check(&nd, err, n);
    }
    return lead_agrees(bad, "to start: too little disk space", err, n);
}

/* A run that starts from the plan's seeded random weights says so. One
 * that would also --export-hf them needs --from-scratch: a Hugging Face
 * export of a run with no --init is a fine-tune whose --init was
 * forgotten far more often than a model trained from nothing. */
static int random_start(const Run *u, char *err, size_t n) {
    const Opts *o = &u->o;
    const Plan *p = u->p;
    if (o->export_hf && !o->from_scratch)
        return snprintf(err, n,
                        "no --init: this run would train from random weights and --export-hf would write them as the "
                        "fine-tuned model; give --init HF_DIR to start from the model's weights, or --from-scratch to "
                        "train from random weights on purpose"), -1;
    if (u->lead && !o->quiet)
        printf("weights: random, the plan's seeded initialisation (seed %" PRIu64 "; --init PATH starts from saved weights)\n",
               p->train.seed);
    return 0;
}

/* The executor, the checkpoint resumed from, the Hugging Face weights. */
static int run_start(Run *u, char *err, size_t n) {
    const Opts *o = &u->o;
    Plan *p = u->p;
    RtOptions ro = {.backend = u->backend, .nvme_dir = o->nvme, .queue_depth = 32, .trace = o->trace != NULL,
                    .progress = u->ho.progress /* rank 0's meter, as for --init */};
    main_env_rt(&u->env, &ro);
    /* Hugging Face weights: the mapping and the target checked before anything is allocated or trained */
    char m[4096];
    /* --init may also read --export's file, which needs no mapping: hfio_import says which */
    if (o->export_hf && hfio_check_plan(p, m, sizeof m)) return snprintf(err, n, "%s: %s", o->plan, m), -1;
    if (outputs_ok(o, u->lead, err, n)) return -1;
    u->r = rt_create(p, &C, &ro, err, n);
    if (!u->r) return -1;
    if (u->lead && !o->quiet) {
        printf("plan %s: model %s, %d rank%s, %u instructions per step\n", o->plan, p->model_name ? p->model_name : "?",
               p->ranks, p->ranks == 1 ? "" : "s", p->ninstrs);
        printf("memory per rank (allocated once, as planned):\n");
        rt_memory_report(u->r, stdout);
    }
    u->have_cost = cost_simulate(p, &u->cr);
    u->total = o->steps >= 0 ? o->steps : p->train.steps;
    if (o->ckpt_dir && checkpoint_start(u->r, o, u->lead, &u->start, &u->loaded, &u->from, err, n)) return -1;
    if (u->lead && u->loaded >= 0) say_resumed(p, o, u->start, u->loaded, &u->from);
    u->saved = u->loaded;
    if (o->init && u->start > 0 && u->lead && !o->quiet)
        printf("init: not used: resumed from step %" PRId64 " (the checkpoint holds the weights)\n", u->start);
    if (o->init && u->start == 0 && import_hf(u->r, o, &u->ho, u->lead, err, n)) return -1;
    if (!o->init && u->start == 0 && random_start(u, err, n)) return -1;
    if (space_ok(u, err, n)) return -1;
    /* the verifier tied every INPUT copy to this shape */
    if (!plan_batch_shape(p, &u->B, &u->T)) return snprintf(err, n, "%s: the plan has no token input", o->plan), -1;
    return 0;
}

/* A token file zinftok made with another tokenizer than the one beside
 * --init: its ids are other tokens to this model, whatever the sizes say.
 * Rank 0. */
static int tokenizer_ok(Run *u, const TokReader *tr, char *err, size_t n) {
    if (!tr->tokenizer) return 0;
    if (!u->tok_read) {
        u->tokfp = init_tokenizer(&u->o, u->tokpath, sizeof u->tokpath);
        u->tok_read = true;
    }
    if (!u->tokfp || tr->tokenizer == u->tokfp) return 0;
    snprintf(err, n, "%s was made by another tokenizer than %s (beside --init): its ids are other tokens to this model; "
             "tokenize the text again with zinftok --tokenizer %s", tr->path, u->tokpath, u->tokpath);
    return -1;
}

/* The training data in its order (continued where the checkpoint left it),
 * the batches, the eval data and the --losses file. */
static int open_data(Run *u, char *err, size_t n) {
    const Opts *o = &u->o;
    if (u->start < u->total) {
        if (tok_open(&u->tr, o->data, plan_vocab(u->p), err, n)) return -1;
        u->have_data = true;
        if (ids_ok(&u->tr, err, n)) return -1;
        if (lead_agrees(u->lead && tokenizer_ok(u, &u->tr, err, n), "the token file", err, n)) return -1;
        DordOptions dopt = {.order = o->data_order, .seed = o->data_seed_given ? o->data_seed : u->p->train.seed, .eos = o->eos};
        if (dord_open(&u->dord, &u->tr, &dopt, u->B, u->T, C.size, err, n)) return -1;
        u->have_order = true;
        if (u->loaded >= 0 && global_batch_check(&u->from, o, u->loaded, u->B, u->accum, err, n)) return -1;
        /* the checkpoint counts micro-batches in its writer's accumulation */
        int64_t g_was = u->start * (u->from.grad_accum > 0 ? u->from.grad_accum : u->accum);
        if (u->loaded >= 0 && data_resume_check(&u->dord, o, u->lead, u->loaded, g_was, err, n)) return -1;
        if (u->lead && o->eos >= 0 && u->dord.eos_count == 0)
            fprintf(stderr, "zinfrun: warning: --eos %" PRId64 " does not occur in %s: the whole file is one document\n", o->eos, o->data);
        if (u->lead && !o->quiet) data_describe(&u->dord, o, u->start * u->accum);
        for (int a = 0; a < u->accum; a++) {
            u->tok[a] = malloc(sizeof(int32_t) * (size_t)(u->B * u->T));
            u->tgt[a] = malloc(sizeof(int32_t) * (size_t)(u->B * u->T));
            if (!u->tok[a] || !u->tgt[a]) return snprintf(err, n, "out of memory for batches"), -1;
            if (u->dord.packed && !(u->seg[a] = malloc(sizeof(int32_t) * (size_t)(u->B * u->T))))
                return snprintf(err, n, "out of memory for batches"), -1;
        }
        if (u->dord.packed && rt_set_segments(u->r, (const int32_t *const *)u->seg, err, n)) return -1;
    }
    if (o->eval_data && eval_open(&u->ev, o, plan_vocab(u->p), u->B, u->T, err, n)) return -1;
    if (o->eval_data && lead_agrees(u->lead && tokenizer_ok(u, &u->ev.tr, err, n), "the eval file", err, n))
        return -1;
    if (o->losses && u->lead && !(u->lossf = fopen(o->losses, "a")))
        return snprintf(err, n, "cannot open %s: %s", o->losses, strerror(errno)), -1;
    if (o->tensorboard && u->lead) {
        char why[512];
        if (!(u->tb = tb_open(o->tensorboard, why, sizeof why))) return snprintf(err, n, "--tensorboard: %s", why), -1;
        for (int q = 0; q < PLAN_NQUEUES; q++) u->tb_busy[q] = rt_busy_seconds(u->r, q);
        if (!o->quiet) printf("tensorboard: %s\n", tb_path(u->tb));
    }
    return 0;
}

/* A run's charts are worth less than the run: a TensorBoard file that
 * cannot be written any more is said once and closed, and training goes on. */
static void tb_stop(TbWriter **tb, const char *why) {
    char e2[512];
    fprintf(stderr, "zinfrun: warning: --tensorboard: %s; no more events are written\n", why);
    tb_close(*tb, e2, sizeof e2);
    *tb = NULL;
}

/* Step s's event: what the progress line says, and what it leaves out. */
static void tb_step(Run *u, int64_t s, const RtStepStats *st) {
    const PlanTrain *t = &u->p->train;
    AdamSchedule sch = adam_schedule_of(t);
    static const char *const busy_tags[PLAN_NQUEUES] = {"busy_ms/nvme", "busy_ms/h2d", "busy_ms/d2h", "busy_ms/comm", "busy_ms/compute", "busy_ms/cpu"};
    static const char *const byte_tags[PLAN_NQUEUES] = {"bytes/nvme", "bytes/h2d", "bytes/d2h", "bytes/comm", "bytes/compute", "bytes/cpu"};
    TbScalar v[32];
    int k = 0;
    v[k++] = (TbScalar){"train/loss", st->loss};
    v[k++] = (TbScalar){"train/grad_norm", st->grad_norm};
    v[k++] = (TbScalar){"train/lr", adam_lr(&sch, s + 1)};
    if (t->dtype == DT_F16) {
        v[k++] = (TbScalar){"train/loss_scale", rt_loss_scale(u->r)};
        v[k++] = (TbScalar){"train/skipped", st->skipped ? 1.0 : 0.0};
    }
    if (st->seconds > 0) {
        v[k++] = (TbScalar){"perf/tokens_per_s", (double)(u->B * u->T * u->accum * C.size) / st->seconds};
        v[k++] = (TbScalar){"perf/tflops_per_rank", rt_step_flops(u->r, u->accum) / st->seconds * 1e-12};
    }
    v[k++] = (TbScalar){"perf/step_ms", st->seconds * 1e3};
    if (u->have_cost) v[k++] = (TbScalar){"perf/step_ms_predicted", u->cr.step_time * 1e3};
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        double b = rt_busy_seconds(u->r, q);
        v[k++] = (TbScalar){busy_tags[q], (b - u->tb_busy[q]) * 1e3};
        u->tb_busy[q] = b;
        if (q != Q_COMPUTE && q != Q_CPU) v[k++] = (TbScalar){byte_tags[q], (double)st->bytes[q]};
    }
    char why[512];
    if (tb_scalars(u->tb, s + 1, v, k, why, sizeof why)) tb_stop(&u->tb, why);
}

/* The progress line of step s (rank 0). */
static void print_step(const Run *u, int64_t s, const RtStepStats *st) {
    char b1[32], b2[32], b3[32];
    double tps = (double)(u->B * u->T * u->accum * C.size) / st->seconds;
    /* a speculative plan's step that clips or is skipped redoes (or undoes)
     * the Adams that ran in the backward: said, since it costs time */
    const char *note = st->skipped ? (st->redone ? "  (skipped: overflow; speculative Adams undone)" : "  (skipped: overflow)")
                       : st->redone ? "  (clipped: speculative Adams redone)" : "";
    printf("%sstep %4" PRId64 "/%" PRId64 "  loss %.4f  %8.0f tok/s  %7.1f ms/step (predicted %.1f)  nvme %s  h2d %s  comm %s%s%s",
           u->tty ? "\r" : "", s + 1, u->total, st->loss, tps, st->seconds * 1e3, u->have_cost ? u->cr.step_time * 1e3 : 0.0,
           plan_bytes_str(st->bytes[Q_NVME], b1, sizeof b1), plan_bytes_str(st->bytes[Q_H2D], b2, sizeof b2),
           plan_bytes_str(st->bytes[Q_COMM], b3, sizeof b3), note, u->tty ? "\033[K" : "\n");
    if (u->tty && (s + 1 == u->total || (s + 1) % 10 == 0)) printf("\n");
    fflush(stdout);
}

/* A checkpoint of the steps done; a failure says what is still there. */
static int save_checkpoint(Run *u, char *err, size_t n) {
    const Opts *o = &u->o;
    char runst[512], e[8192];
    int64_t step = rt_steps_done(u->r);
    run_state(&u->dord, step * u->accum, runst, sizeof runst);
    if (rt_checkpoint_save(u->r, o->ckpt_dir, runst, e, sizeof e) == 0) {
        u->saved = step;
        return 0;
    }
    if (u->saved >= 0)
        snprintf(err, n, "the checkpoint of step %" PRId64 " was not written: %s; the newest checkpoint, %s/step-%08" PRId64
                 ", is untouched", step, e, o->ckpt_dir, u->saved);
    else
        snprintf(err, n, "the checkpoint of step %" PRId64 " was not written: %s; %s holds no earlier checkpoint of this run",
                 step, e, o->ckpt_dir);
    return -1;
}

/* Steps start..total, with evaluations and checkpoints where asked. */
static int train(Run *u, char *err, size_t n) {
    const Opts *o = &u->o;
    int64_t tokens = u->B * u->T;
    if (eval_due(o, u->start, u->start, u->total) && eval_at(u->r, &u->ev, u->start, tokens, o, u->lossf, &u->tb, u->tty, err, n)) return -1;
    u->first_loss = u->last_loss = NAN;
    for (int64_t s = u->start; s < u->total; s++) {
        int sig = stop_agreed(err, n);
        if (sig < 0) return -1;
        if (sig) {
            u->stopped = sig;
            return 0;
        }
        for (int a = 0; a < u->accum; a++)
            if (dord_batch(&u->dord, C.rank, s * u->accum + a, u->tok[a], u->tgt[a], err, n) ||
                (u->seg[a] && dord_segments(&u->dord, C.rank, s * u->accum + a, u->seg[a], err, n)))
                return -1;
        /* A file with a mask (or --eos, whose padding trains nothing): the
         * trained targets of the whole global batch, counted here on every
         * rank alike, set the loss's divisor. */
        int64_t trained = -1;
        if (u->tr.version == TOK_VERSION_MASKED || u->tr.version == TOK_VERSION_PACKED || u->dord.o.eos >= 0) {
            trained = 0;
            for (int a = 0; a < u->accum; a++) {
                int64_t c = dord_trained(&u->dord, s * u->accum + a, err, n);
                if (c < 0) return -1;
                trained += c;
            }
        }
        if (trained == 0) {
            if (u->lead)
                fprintf(stderr, "zinfrun: warning: step %" PRId64 ": no trained token in the global batch; step skipped\n",
                        s + 1);
            rt_step_skip(u->r);
            continue;
        }
        RtStepStats st;
        if (rt_step_trained(u->r, (const int32_t *const *)u->tok, (const int32_t *const *)u->tgt, u->accum, trained, &st, err,
                            n))
            return -1;
        u->ran++;
        if (u->lossf) {
            fprintf(u->lossf, "step %" PRId64 " loss %.9g grad_norm %.9g\n", s + 1, st.loss, st.grad_norm);
            fflush(u->lossf);
        }
        if (isnan(u->first_loss)) u->first_loss = st.loss;
        u->last_loss = st.loss;
        u->time_sum += st.seconds;
        if (u->ran == 1) {
            u->ticks = probe_cpu_ticks("/proc/stat", &u->steal0, &u->total0);
            u->first_seconds = st.seconds;
            for (int q = 0; q < PLAN_NQUEUES; q++) {
                u->first_busy[q] = rt_busy_seconds(u->r, q);
                u->first_wait[q] = rt_wait_seconds(u->r, q);
            }
        }
        if (u->lead && !o->quiet) print_step(u, s, &st);
        if (u->tb) tb_step(u, s, &st);
        if (eval_due(o, s + 1, u->start, u->total) && eval_at(u->r, &u->ev, s + 1, tokens, o, u->lossf, &u->tb, u->tty, err, n)) return -1;
        if (o->ckpt_dir && o->ckpt_every > 0 && (s + 1) % o->ckpt_every == 0 && s + 1 < u->total && save_checkpoint(u, err, n))
            return -1;
    }
    return 0;
}

/* An export that failed at the end of a run: the message says where the
 * trained weights still are and the command that exports them again. */
static int export_failed(const Run *u, const char *flag, const char *dest, const char *why, char *err, size_t n) {
    const Opts *o = &u->o;
    if (o->ckpt_dir && u->saved >= 0)
        snprintf(err, n, "%s %s failed: %s; the trained weights are in the checkpoint %s/step-%08" PRId64 ": export them with "
                 "zinfrun %s --checkpoint-dir %s --resume --steps 0 %s %s", flag, dest, why, o->ckpt_dir, u->saved, o->plan,
                 o->ckpt_dir, flag, dest);
    else
        snprintf(err, n, "%s %s failed: %s (no checkpoint holds the trained weights: --checkpoint-dir keeps them)", flag, dest, why);
    return -1;
}

/* What the run leaves behind: the last checkpoint, the exports, the trace. */
static int finish(Run *u, char *err, size_t n) {
    const Opts *o = &u->o;
    /* (a run stopped right after a --checkpoint-every checkpoint has it already) */
    if (o->ckpt_dir && u->ran > 0 && u->saved != rt_steps_done(u->r) && save_checkpoint(u, err, n)) return -1;
    if (u->stopped) return 0; /* the exports are of a finished run only */
    if (o->export_path) {
        char m[8192];
        if (rt_export_safetensors(u->r, o->export_path, m, sizeof m)) return export_failed(u, "--export", o->export_path, m, err, n);
        if (u->lead && !o->quiet) printf("exported the parameters to %s\n", o->export_path);
    }
    if (o->export_hf) {
        HfioReport rep;
        char m[8192];
        if (hfio_export(u->r, o->export_hf, &u->ho, &rep, m, sizeof m)) return export_failed(u, "--export-hf", o->export_hf, m, err, n);
        char b1[32];
        if (u->lead && !o->quiet)
            printf("exported %d Hugging Face tensors at step %" PRId64 " to %s (%d safetensors file%s, %s)\n", rep.tensors,
                   rt_steps_done(u->r), o->export_hf, rep.files, rep.files == 1 ? "" : "s", plan_bytes_str(rep.bytes, b1, sizeof b1));
        if (u->lead && !o->quiet && rep.companions)
            printf("  with %s copied from %s (--init)\n", rep.companion_list, o->init);
        else if (u->lead && !o->quiet)
            printf("  no tokenizer files copied (they come from an --init directory): copy tokenizer.json and its companions "
                   "from the original model to load %s with AutoTokenizer or pipeline()\n", o->export_hf);
    }
    if (o->trace) {
        /* Rank 0 writes FILE, every other rank FILE.rankR. */
        char path[1024];
        if (u->lead) snprintf(path, sizeof path, "%s", o->trace);
        else snprintf(path, sizeof path, "%s.rank%d", o->trace, C.rank);
        FILE *f = fopen(path, "w");
        if (!f) return snprintf(err, n, "cannot write the trace %s: %s", path, strerror(errno)), -1;
        int bad = rt_write_trace(u->r, f);
        if (fclose(f) || bad) return snprintf(err, n, "cannot write the trace %s: %s", path, strerror(errno)), -1;
    }
    return 0;
}

/* Which queue's divergence from the prediction matters most: the one whose
 * measured busy time differs most (in ms) from its predicted one, and
 * whether it is the busiest queue (what the step follows), so that a
 * person knows where to look first (zinfdump --compare has the rest). */
static void print_divergence(const Run *u, const Counted *c) {
    int worst = -1, busiest = 0;
    double m[PLAN_NQUEUES], pr[PLAN_NQUEUES], step = c->seconds / (double)c->steps * 1e3;
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        m[q] = c->busy[q] / (double)c->steps * 1e3;
        pr[q] = u->cr.busy[q] * u->accum * 1e3;
        if (worst < 0 || fabs(m[q] - pr[q]) > fabs(m[worst] - pr[worst])) worst = q;
        if (m[q] > m[busiest]) busiest = q;
    }
    double d = fabs(m[worst] - pr[worst]);
    if (d < 0.05 * step || d < 0.1) {
        printf("divergence: every queue's busy time is within %.1f ms of its prediction (5%% of the step)\n", d);
        return;
    }
    printf("divergence: %s is the queue to look at: %.1f ms measured against %.1f predicted (%.2fx), the largest difference; %s",
           plan_queue_names[worst], m[worst], pr[worst], pr[worst] > 0 ? m[worst] / pr[worst] : 0.0,
           worst == busiest ? "it is the busiest queue, so the step follows it" : "the busiest queue is ");
    if (worst != busiest) printf("%s (%.1f ms)", plan_queue_names[busiest], m[busiest]);
    printf(" (zinfdump PLAN --compare with a --trace of this run shows which instructions)\n");
}

/* The last evaluation's loss, in the summary (so --quiet keeps it too). */
static void say_eval(const Run *u) {
    const Eval *e = &u->ev;
    if (!e->ran) return;
    printf("eval: loss %.4f at step %" PRId64 " (%s, %" PRId64 " batch%s)\n", e->last_loss, e->last_step, u->o.eval_data,
           (int64_t)e->k * C.size, (int64_t)e->k * C.size == 1 ? "" : "es");
}

/* The end-of-run lines (rank 0). */
static void print_summary(const Run *u) {
    const Plan *p = u->p;
    int64_t ran = u->ran, start = u->start, total = u->total;
    if (ran == 0) {
        if (total > start || start == 0) printf("done: nothing to train (%" PRId64 " steps)\n", total);
        else if (total == start) printf("done: nothing to train (%" PRId64 " of %" PRId64 " steps already done)\n", start, total);
        else
            printf("done: nothing to train: the checkpoint is at step %" PRId64 " and --steps %" PRId64
                   " is the step to train to, counted from the first run's step 0 (--steps %" PRId64 " trains %" PRId64 " more)\n",
                   start, total, start + total, total);
        say_eval(u);
        return;
    }
    double pred = u->have_cost ? u->cr.step_time * 1e3 : 0.0;
    Counted c = counted(u);
    double per = 1e3 / (double)c.steps;
    printf("%s: %" PRId64 " steps, loss %.4f -> %.4f, %.1f ms/step measured, %.1f ms/step predicted", u->stopped ? "stopped" : "done", ran, u->first_loss,
           u->last_loss, c.seconds * per, pred);
    if (c.steps < ran) printf(" (steps after the first; the first took %.1f ms)", u->first_seconds * 1e3);
    printf("\n");
    double s1, t1;
    if (c.steps < ran && u->ticks && probe_cpu_ticks("/proc/stat", &s1, &t1) && t1 > u->total0 &&
        (s1 - u->steal0) / (t1 - u->total0) > PROBE_STEAL_WARN)
        printf("warning: other machines took %.0f%% of this one's CPU time during these steps (steal in /proc/stat): the\n"
               "  measured times are longer than this machine's own\n",
               (s1 - u->steal0) / (t1 - u->total0) * 100);
    printf("queue busy per step, measured (predicted):");
    for (int q = 0; q < PLAN_NQUEUES; q++)
        printf(" %s %.1f (%.1f)", plan_queue_names[q], c.busy[q] * per, u->have_cost ? u->cr.busy[q] * u->accum * 1e3 : 0.0);
    printf(" ms\n");
    if (u->have_cost) print_divergence(u, &c);
    bool waited = false;
    for (int q = 0; q < PLAN_NQUEUES; q++) waited |= c.wait[q] > 0;
    if (waited) { /* a collective's time until every rank arrived, an NVMe transfer's beside its batch: not busy */
        printf("waiting per step inside instructions, not in busy:");
        for (int q = 0; q < PLAN_NQUEUES; q++)
            if (c.wait[q] > 0)
                printf(" %s %.1f ms (%s)", plan_queue_names[q], c.wait[q] * per,
                       q == Q_NVME ? "in flight beside other transfers, summed over them" : "for other ranks");
        printf("\n");
    }
    double sec = c.seconds / (double)c.steps, flops = rt_step_flops(u->r, u->accum);
    printf("compute: %.2f TFLOP/s per rank achieved (the plan's %.3g kernel FLOPs per step / measured time)\n",
           sec > 0 ? flops / sec * 1e-12 : 0.0, flops);
    if (u->backend == RT_BACKEND_CUDA) {
        char a1[32], a2[32];
        printf("gpu memory: %s in use by zinfrun on rank 0 after the last step; the plan's gpu arena is %s\n",
               plan_bytes_str(rt_gpu_memory_used(u->r), a1, sizeof a1), plan_bytes_str(p->arenas[ARENA_GPU].size, a2, sizeof a2));
    }
    say_eval(u);
    int64_t g = (start + ran) * u->accum;
    printf("data: %s, epoch %" PRId64 " (%.2f epochs read: %" PRId64 " global micro-batch%s)\n", dord_order_name(u->dord.o.order),
           dord_epoch(&u->dord, g - 1) + 1, dord_epochs_read(&u->dord, g), g, g == 1 ? "" : "es");
}

/* The last lines of an interrupted run (rank 0 prints; every rank returns the status). */
static int say_stopped(const Run *u) {
    const Opts *o = &u->o;
    if (u->lead) {
        fflush(stdout);
        const char *name = u->stopped == SIGINT ? "SIGINT" : u->stopped == SIGTERM ? "SIGTERM" : u->stopped == SIGUSR1 ? "SIGUSR1" : "a signal";
        int64_t at = u->start + u->ran;
        fprintf(stderr, "zinfrun: interrupted by %s at step %" PRId64 " of %" PRId64 ": ", name, at, u->total);
        if (o->ckpt_dir && u->ran > 0)
            fprintf(stderr, "checkpoint %s/step-%08" PRId64 " written; run the same command with --resume to continue from it%s\n",
                    o->ckpt_dir, at, o->export_path || o->export_hf ? " (the exports are written when the run finishes)" : "");
        else if (o->ckpt_dir)
            fprintf(stderr, "no step was trained, nothing written\n");
        else
            fprintf(stderr, "the %" PRId64 " step%s trained are not saved (no --checkpoint-dir)\n", u->ran, u->ran == 1 ? "" : "s");
        fflush(stderr);
    }
    return 128 + u->stopped;
}

static void run_close(Run *u) {
    eval_close(&u->ev);
    if (u->have_order) dord_close(&u->dord);
    if (u->have_data) tok_close(&u->tr);
    for (int a = 0; a < PLAN_MAX_ACCUM; a++) {
        free(u->tok[a]);
        free(u->tgt[a]);
        free(u->seg[a]);
    }
    if (u->lossf) fclose(u->lossf);
    char why[512];
    if (tb_close(u->tb, why, sizeof why)) fprintf(stderr, "zinfrun: warning: --tensorboard: %s\n", why);
    if (u->have_cost) cost_free(&u->cr);
    rt_destroy(u->r);
    plan_free(u->p);
}

int main(int argc, char **argv) {
    main_blas_core(argv); /* OpenBLAS on this processor's kernels (blas_core.h) */
    /* A full disk or a file size limit must be an error we report, not a signal. */
    signal(SIGXFSZ, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    static Run u; /* zeroed: what run_close frees is what exists */
    int rc = parse(argc, argv, &u.o);
    if (rc) return rc;
    char env_err[256];
    if (main_env_read(&u.env, env_err, sizeof env_err) || main_env_apply(&u.env, env_err, sizeof env_err)) {
        fprintf(stderr, "zinfrun: %s\n", env_err);
        return 2;
    }
    if (comm_init(&C, &argc, &argv, &u.env.comm) != COMM_OK) {
        fprintf(stderr, "zinfrun: %s\n", comm_last_error(&C));
        return 1;
    }
    hk_threads_local_ranks(C.local_size); /* before any kernel: the team is cores / ranks on this node */
    catch_stop_signals(u.o.ckpt_dir, C.rank == 0);
    /* Under mpirun stdout is often a pseudo-terminal shared by every rank: plain lines then. */
    u.lead = C.rank == 0;
    u.tty = isatty(1) && C.size == 1 && !u.env.plain;
    u.loaded = -1;
    u.saved = -1;
    static char err[16384]; /* messages that list tensors or checkpoints */
    u.p = plan_read(u.o.plan, err, sizeof err);
    size_t pl = strlen(u.o.plan);
    if (!u.p && pl > 3 && !strcmp(u.o.plan + pl - 3, ".zl"))
        return die("%s; %s is a model's source: compile it into a plan first, zinfc %s -o model.plan", err, u.o.plan, u.o.plan);
    if (!u.p) return die("%s", err);
    char vm[4096];
    int nv = verify_plan(u.p, vm, sizeof vm);
    if (nv) return die("%s: the plan fails verification (%d problem%s):\n%s", u.o.plan, nv, nv == 1 ? "" : "s", vm);
    char said[512];
    if (rt_choose_backend(&C, u.o.backend, u.p, u.o.plan, &u.backend, said, sizeof said, err, sizeof err)) return die("%s", err);
    if (u.lead && !u.o.quiet && said[0]) printf("%s\n", said);
    if (check_layout(u.p, u.backend, err, sizeof err)) return die("%s", err);
    if (u.lead && !u.o.quiet && u.backend == RT_BACKEND_HOST) { /* the cores each rank's kernels get, and why */
        char tl[256];
        hk_threads_describe(tl, sizeof tl);
        printf("%s\n", tl);
    }
    u.accum = u.p->train.grad_accum > 0 ? (int)u.p->train.grad_accum : 1;
    u.ho = (HfioOptions){.staging_bytes = HFIO_STAGING_DEFAULT, .max_shard_bytes = u.o.shard_size, .merge_lora = u.o.merge_lora,
                        .companions_from = u.o.init};
    progress_meter_init(&u.meter, stderr, isatty(2) && C.size == 1 && !u.env.plain);
    if (u.lead && !u.o.quiet) u.ho.progress = &u.meter.base;
    int status = 0;
    if (run_start(&u, err, sizeof err) || open_data(&u, err, sizeof err) || train(&u, err, sizeof err) ||
        finish(&u, err, sizeof err)) {
        progress_meter_finish(&u.meter);
        status = die("%s", err);
    } else if (u.lead && !(u.stopped && u.ran == 0))
        print_summary(&u);
    if (!status && u.stopped) status = say_stopped(&u);
    run_close(&u);
    comm_finalize(&C);
    return status;
}
