/* zinfgen: samples text from a plan's model with the plan's forward-only
 * schedule (runtime/exec/exec_eval.c), weights from a Hugging Face directory or
 * a zinfrun --export file (--init), a zinfrun checkpoint (--checkpoint) or the plan's seeded
 * initialisation, wherever the plan keeps them (GPU, CPU memory, NVMe:
 * fetched layer by layer as in training). Each new token is one forward of
 * the plan's whole [B, T] window (--decode window), or one position with a
 * KV cache (--decode kv: runtime/decode/decode.h, on the host kernels or the
 * GPU). Tokens stream to stdout; everything else goes to stderr. Only this file prints and picks exit
 * codes: 0 done, 1 a runtime error or bad input, 2 bad usage. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "ckpt.h"
#include "comm.h"
#include "decode.h"
#include "exec.h"
#include "hfio.h"
#include "progress_meter.h"
#include "hftok.h"
#include "json.h"
#include "sftdata.h"
#include "hostk_threads.h"
#include "main_env.h"
#include "nearest.h"
#include "plan.h"
#include "verify.h"
#include "clock.h"

typedef struct GenOpts {
    const char *plan, *init, *ckpt, *tokenizer, *prompt, *prompt_ids, *backend, *nvme, *decode, *logits;
    const char *chat, *chat_template; /* --chat MESSAGES: rendered by the model's chat template */
    int64_t step, max_new, top_k, eos;
    double temperature, top_p;
    uint64_t seed;
    bool quiet;
} GenOpts;

static const char *const flags[] = {"--init", "--checkpoint", "--step", "--tokenizer", "--prompt", "--prompt-ids",
                                    "--max-new", "--temperature", "--top-k", "--top-p", "--seed", "--eos",
                                    "--backend", "--nvme", "--decode", "--logits", "--quiet", "--help", "--version",
                                    "--chat", "--chat-template"};

static void usage(FILE *f) {
    fprintf(f,
            "usage: zinfgen MODEL.plan (--prompt TEXT | --chat MESSAGES) --tokenizer tokenizer.json [options]\n"
            "       zinfgen MODEL.plan --prompt-ids 1,2,3 [options]\n"
            "  --init PATH            weights from a Hugging Face model directory, one .safetensors file, or\n"
            "                         the file of zinfrun --export (the plan's own parameter names)\n"
            "  --checkpoint DIR       weights from a zinfrun checkpoint directory (its newest, or --step N)\n"
            "                         (neither: the plan's seeded initialisation)\n"
            "  --tokenizer FILE       a Hugging Face tokenizer.json: encodes --prompt, decodes the output\n"
            "                         (default: the tokenizer.json of an --init directory)\n"
            "  --prompt TEXT          the prompt (needs --tokenizer); --prompt-ids 1,2,3: token ids, ids out\n"
            "  --chat MESSAGES        a conversation, [{\"role\": \"user\", \"content\": \"...\"}, ...] as JSON text or a\n"
            "                         file of it: rendered by the model's chat template with the generation prompt,\n"
            "                         the answer written until the template's end-of-turn token\n"
            "  --chat-template PATH   a tokenizer_config.json or .jinja file (default: the tokenizer_config.json\n"
            "                         beside --tokenizer)\n"
            "  --max-new N            tokens to generate (default 32)\n"
            "  --temperature T        0: greedy (argmax); else sample softmax(logits / T) (default 1)\n"
            "  --top-k K              sample among the K likeliest tokens (default 0: all)\n"
            "  --top-p P              sample among the likeliest tokens whose probabilities reach P (default 1)\n"
            "  --seed N               the sampler's seed (default 0): the same seed, the same text\n"
            "  --eos ID               stop after generating token ID\n"
            "  --backend auto|host|cuda   where to run (auto: cuda when a GPU is there and the plan has GPU code)\n"
            "  --nvme DIR             the plan's NVMe swap space in DIR instead of the target's paths\n"
            "  --decode auto|kv|window  kv: a KV cache, one position per token, with the parameters gathered whole\n"
            "                         on rank 0 (its memory on the host backend, its GPU's on the CUDA backend);\n"
            "                         window: each token one forward of the plan's whole [B, T] window (its\n"
            "                         schedule). auto (default): kv when the model allows it, else window\n"
            "  --logits FILE          the logits each new token was drawn from, one line of V numbers a token\n"
            "  --quiet                no lines on stderr but errors\n"
            "A text longer than T keeps its last T tokens (the window slides; with the KV cache, the cache is\n"
            "filled again from them); a prompt longer than T is refused.\n");
}

static int bad_value(const char *flag, const char *what, const char *v) {
    fprintf(stderr, "zinfgen: %s needs %s, not '%s'\n", flag, what, v);
    return 2;
}

static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo) return bad_value(flag, lo > 0 ? "a positive integer" : "a non-negative integer", v);
    *out = x;
    return 0;
}

static int parse_f64(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !(x >= lo && x <= hi)) {
        char what[64];
        snprintf(what, sizeof what, "a number %g..%g", lo, hi);
        return bad_value(flag, what, v);
    }
    *out = x;
    return 0;
}

static int parse_value(const char *a, const char *v, GenOpts *o) {
    if (!strcmp(a, "--init")) o->init = v;
    else if (!strcmp(a, "--checkpoint")) o->ckpt = v;
    else if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
    else if (!strcmp(a, "--prompt")) o->prompt = v;
    else if (!strcmp(a, "--prompt-ids")) o->prompt_ids = v;
    else if (!strcmp(a, "--chat")) o->chat = v;
    else if (!strcmp(a, "--chat-template")) o->chat_template = v;
    else if (!strcmp(a, "--backend")) o->backend = v;
    else if (!strcmp(a, "--nvme")) o->nvme = v;
    else if (!strcmp(a, "--decode")) o->decode = v;
    else if (!strcmp(a, "--logits")) o->logits = v;
    else if (!strcmp(a, "--step")) return parse_i64(a, v, 0, &o->step);
    else if (!strcmp(a, "--max-new")) return parse_i64(a, v, 1, &o->max_new);
    else if (!strcmp(a, "--top-k")) return parse_i64(a, v, 0, &o->top_k);
    else if (!strcmp(a, "--eos")) return parse_i64(a, v, 0, &o->eos);
    else if (!strcmp(a, "--temperature")) return parse_f64(a, v, 0, 1e6, &o->temperature);
    else if (!strcmp(a, "--top-p")) return parse_f64(a, v, 1e-9, 1, &o->top_p);
    else if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || v[0] == '-' || v[0] == '+') return bad_value(a, "an integer 0..2^64-1", v);
        o->seed = x;
    } else return -1;
    return 0;
}

static int parse(int argc, char **argv, GenOpts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "auto";
    o->decode = "auto";
    o->step = -1;
    o->max_new = 32;
    o->eos = -1;
    o->temperature = 1;
    o->top_p = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
        if (!strcmp(a, "--version")) { printf("zinfgen %s\n", ZINF_VERSION); exit(0); }
        if (!strcmp(a, "--quiet")) { o->quiet = true; continue; }
        if (a[0] != '-') {
            if (o->plan) { fprintf(stderr, "zinfgen: more than one plan given ('%s' and '%s')\n", o->plan, a); return 2; }
            o->plan = a;
            continue;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof flags / sizeof *flags; k++) known |= !strcmp(a, flags[k]);
        if (!known) {
            const char *near = nearest_word(a, flags, (int)(sizeof flags / sizeof *flags));
            if (near) fprintf(stderr, "zinfgen: unknown option '%s'; did you mean '%s'?\n", a, near);
            else fprintf(stderr, "zinfgen: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) { fprintf(stderr, "zinfgen: %s needs a value\n", a); return 2; }
        int rc = parse_value(a, argv[++i], o);
        if (rc) return 2;
    }
    if (!o->plan) { fprintf(stderr, "zinfgen: no plan given\n"); usage(stderr); return 2; }
    if (strcmp(o->backend, "auto") && strcmp(o->backend, "host") && strcmp(o->backend, "cuda"))
        return bad_value("--backend", "auto, host or cuda", o->backend);
    if (strcmp(o->decode, "auto") && strcmp(o->decode, "kv") && strcmp(o->decode, "window"))
        return bad_value("--decode", "auto, kv or window", o->decode);
    if ((o->prompt != NULL) + (o->prompt_ids != NULL) + (o->chat != NULL) != 1) {
        fprintf(stderr, "zinfgen: give one of --prompt TEXT, --chat MESSAGES and --prompt-ids 1,2,3\n");
        return 2;
    }
    /* a model directory given to --init has its tokenizer beside the weights */
    static char beside[4200];
    struct stat st;
    if ((o->prompt || o->chat) && !o->tokenizer && o->init && stat(o->init, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(beside, sizeof beside, "%s/tokenizer.json", o->init);
        if (access(beside, R_OK) == 0) o->tokenizer = beside;
    }
    if (o->chat && !o->tokenizer) {
        fprintf(stderr, "zinfgen: --chat needs --tokenizer tokenizer.json (or an --init directory that holds one; the "
                        "tokenizer_config.json beside it has the chat template)\n");
        return 2;
    }
    if (o->chat_template && !o->chat) { fprintf(stderr, "zinfgen: --chat-template is for --chat\n"); return 2; }
    if (o->prompt && !o->tokenizer) {
        fprintf(stderr, "zinfgen: --prompt needs --tokenizer tokenizer.json (or an --init directory that holds one, or --prompt-ids)\n");
        return 2;
    }
    if (o->init && o->ckpt) { fprintf(stderr, "zinfgen: --init and --checkpoint both give the weights: choose one\n"); return 2; }
    if (o->step >= 0 && !o->ckpt) { fprintf(stderr, "zinfgen: --step needs --checkpoint\n"); return 2; }
    return 0;
}

static Comm C;
static MainEnv E; /* the ZINF_* variables (main_env.h) */

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char m[16384];
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (C.size > 1) fprintf(stderr, "zinfgen: rank %d: %s\n", C.rank, m);
    else fprintf(stderr, "zinfgen: %s\n", m);
    fflush(stderr);
    if (C.size > 1) comm_abort(&C, 1);
    return 1;
}

/* "1,2,3" into ids (malloc'd): 0, or 2 with a message (usage). */
static int parse_ids(const char *s, int32_t **ids, int64_t *n) {
    int64_t cap = 1;
    for (const char *c = s; *c; c++) cap += *c == ',';
    *ids = malloc(sizeof **ids * (size_t)cap);
    if (!*ids) return die("out of memory"), 1;
    *n = 0;
    const char *c = s;
    for (;;) {
        char *end;
        errno = 0;
        long long x = strtoll(c, &end, 10);
        if (end == c || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) return bad_value("--prompt-ids", "token ids like 1,2,3", s);
        (*ids)[(*n)++] = (int32_t)x;
        if (!*end) return 0;
        c = end + 1;
    }
}

/* --checkpoint DIR [--step N]: the newest checkpoint this plan can read, or step N. */
static int load_checkpoint(Rt *r, const GenOpts *o, int64_t *step, char *err, size_t n) {
    CkptInfo *v = NULL;
    int nv = 0;
    if (ckpt_scan(o->ckpt, &v, &nv, err, n)) return -1;
    int64_t pick = -1;
    char why[600] = "";
    for (int i = 0; i < nv && pick < 0; i++) {
        if (v[i].state != CKPT_COMPLETE || (o->step >= 0 && v[i].step != o->step)) continue;
        if (rt_checkpoint_check(r, o->ckpt, v[i].step, why, sizeof why) == 0) pick = v[i].step;
    }
    free(v);
    if (pick < 0) {
        if (o->step >= 0) snprintf(err, n, "--checkpoint %s: no complete checkpoint of step %" PRId64 " this plan can read%s%s", o->ckpt, o->step, why[0] ? ": " : "", why);
        else snprintf(err, n, "--checkpoint %s: no complete checkpoint this plan can read%s%s", o->ckpt, why[0] ? ": " : "", why);
        return -1;
    }
    bool mine = false;
    RtCkptOrigin from;
    char e[4096];
    if (rt_checkpoint_load_from(r, o->ckpt, pick, &mine, &from, e, sizeof e)) {
        snprintf(err, n, "--checkpoint %s: step %" PRId64 ": %s", o->ckpt, pick, e);
        return -1;
    }
    *step = pick;
    return 0;
}

/* The weights: --init, --checkpoint, or the seeded initialisation. */
static int load_weights(Rt *r, const Plan *p, const GenOpts *o, char *err, size_t n) {
    bool say = C.rank == 0 && !o->quiet;
    if (o->init) {
        ProgressMeter meter;
        progress_meter_init(&meter, stderr, isatty(2) && C.size == 1);
        HfioOptions ho = {.staging_bytes = HFIO_STAGING_DEFAULT, .progress = say ? &meter.base : NULL};
        HfioReport rep;
        char e[16000];
        int rc = hfio_import(r, o->init, &ho, &rep, e, sizeof e);
        progress_meter_finish(&meter);
        if (rc) return snprintf(err, n, "--init: %s", e), -1;
        if (say)
            fprintf(stderr, "weights: %d parameters from %s%s\n", rep.params, o->init,
                    rep.own_names ? " (zinfrun --export: the plan's own names)" : "");
    } else if (o->ckpt) {
        int64_t step = 0;
        if (load_checkpoint(r, o, &step, err, n)) return -1;
        if (say) fprintf(stderr, "weights: %s/step-%08" PRId64 "\n", o->ckpt, step);
    } else if (say) {
        fprintf(stderr, "weights: the plan's seeded initialisation (seed %" PRIu64 "; no --init or --checkpoint)\n", p->train.seed);
    }
    return 0;
}

/* ---- sampling ---- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct Cand {
    float logit;
    int32_t id;
} Cand;

static int by_logit(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Greedy (temperature 0: the first largest logit, as argmax), else
 * softmax(logits / temperature) cut to the top k, then to the top p of
 * probability, renormalised and sampled with one draw of the seeded stream. */
static int32_t sample(const float *logits, int64_t V, const GenOpts *o, uint64_t *rng, Cand *c, double *prob) {
    if (o->temperature == 0) {
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        return (int32_t)best;
    }
    for (int64_t v = 0; v < V; v++) c[v] = (Cand){(float)(logits[v] / o->temperature), (int32_t)v};
    qsort(c, (size_t)V, sizeof *c, by_logit);
    int64_t k = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    double sum = 0;
    for (int64_t i = 0; i < k; i++) sum += prob[i] = exp((double)c[i].logit - (double)c[0].logit);
    if (o->top_p < 1) {
        double cum = 0;
        int64_t keep = 0;
        while (keep < k && cum < o->top_p * sum) cum += prob[keep++];
        k = keep > 0 ? keep : 1;
        sum = cum > 0 ? cum : prob[0];
    }
    double u = (double)(splitmix64(rng) >> 11) * 0x1.0p-53 * sum;
    for (int64_t i = 0; i < k; i++) {
        if (u < prob[i]) return c[i].id;
        u -= prob[i];
    }
    return c[k - 1].id;
}

/* ---- generation ---- */

typedef struct Gen {
    Rt *r;
    const GenOpts *o;
    HfTok *tok;             /* NULL: ids in, ids out */
    int64_t B, T, V;
    int32_t *ids;           /* the prompt and what was generated */
    int64_t nids, nprompt, cap;
    int32_t *win, *tgt;     /* the [B, T] window and its targets */
    float *logits;
    Cand *cand;
    double *prob;
    size_t printed;         /* bytes of decoded text written */
    KvDecoder *kv;          /* --decode kv: the decoder (rank 0 holds it), else NULL */
    FILE *lf;               /* --logits: rank 0's file, else NULL */
    int32_t stop[16];       /* --chat: the template's end-of-turn ids, then --eos */
    int nstop;
    int64_t base;           /* kv: the id at the cache's position 0 */
} Gen;

/* The ids a chat stops at: the template's eos_token and the end-of-turn
 * markers of the known families that the vocabulary has. */
static void chat_stops(Gen *g, const ChatTemplate *t) {
    static const char *const marks[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>", "</s>", "<|endoftext|>"};
    const char *eos = chattmpl_token(t, "eos_token");
    for (size_t k = 0; k <= sizeof marks / sizeof *marks && g->nstop < (int)(sizeof g->stop / sizeof *g->stop); k++) {
        const char *m = k == 0 ? eos : marks[k - 1];
        int64_t id = m ? hftok_token_id(g->tok, m, strlen(m)) : -1;
        bool have = false;
        for (int i = 0; i < g->nstop; i++) have |= g->stop[i] == id;
        if (id >= 0 && !have) g->stop[g->nstop++] = (int32_t)id;
    }
}

/* --chat: the conversation (JSON text, or a file of it: a list of messages
 * or {"messages": [...]}) rendered with the generation prompt, tokenized
 * whole as apply_chat_template(..., add_generation_prompt=True,
 * tokenize=True) does. 0 with *ids, 2 for a bad value, 1 with err. */
static int chat_ids(Gen *g, int32_t **ids, int64_t *nids, char *err, size_t n) {
    const GenOpts *o = g->o;
    char *text = NULL;
    size_t len = 0;
    const char *v = o->chat;
    while (*v == ' ' || *v == '\t' || *v == '\n') v++;
    if (*v != '[' && *v != '{') {
        FILE *f = fopen(o->chat, "rb");
        if (!f) return snprintf(err, n, "--chat %s: %s (give the messages as JSON text or a file of it)", o->chat, strerror(errno)), 1;
        char buf[65536];
        size_t r;
        bool oom = false;
        while (!oom && (r = fread(buf, 1, sizeof buf, f)) > 0) {
            char *t = realloc(text, len + r + 1);
            if (!t) {
                oom = true;
                break;
            }
            text = t;
            memcpy(text + len, buf, r);
            len += r;
        }
        bool bad = oom || ferror(f) || !text;
        fclose(f);
        if (bad) {
            free(text);
            return snprintf(err, n, "--chat %s: read error", o->chat), 1;
        }
        text[len] = '\0';
    }
    const char *src = text ? text : o->chat;
    JsonDoc doc;
    char e[1024];
    int rc = 0;
    ChatTemplate *t = NULL;
    ChatRender r = {0};
    BpeIds b = {0};
    if (json_parse(src, strlen(src), &doc, e, sizeof e)) rc = (snprintf(err, n, "--chat: malformed JSON: %s", e), 1);
    const JsonValue *msgs = rc ? NULL : doc.root->type == JSON_OBJECT ? json_get(doc.root, "messages") : doc.root;
    if (!rc && !msgs) rc = (snprintf(err, n, "--chat: an object needs \"messages\""), 1);
    if (!rc && sft_chat_template_load(o->chat_template, o->tokenizer, &t, err, n)) rc = 1;
    if (!rc && !t)
        rc = (snprintf(err, n, "--chat needs the model's chat template: no tokenizer_config.json with a chat_template beside %s "
                       "(give --chat-template FILE)", o->tokenizer), 1);
    ChatRenderOptions ro = {.add_generation_prompt = 1};
    if (!rc && sft_chat_render(t, msgs, &ro, "--chat", &r, err, n)) rc = 1;
    if (!rc && hftok_encode(g->tok, r.text, r.len, &b, err, n)) rc = 1;
    if (!rc) {
        chat_stops(g, t);
        *ids = malloc(sizeof **ids * (b.n ? b.n : 1));
        if (!*ids) rc = (snprintf(err, n, "out of memory"), 1);
        for (size_t i = 0; !rc && i < b.n; i++) (*ids)[i] = (int32_t)b.v[i];
        *nids = (int64_t)b.n;
    }
    bpe_ids_free(&b);
    chattmpl_render_free(&r);
    chattmpl_free(t);
    json_free(&doc);
    free(text);
    return rc;
}

/* The prompt's ids: --prompt-ids, --chat, or --prompt through the tokenizer
 * with its post-processor's tokens (as the tokenizers library encodes). */
static int prompt_ids(Gen *g, char *err, size_t n) {
    const GenOpts *o = g->o;
    int64_t np = 0;
    int32_t *p = NULL;
    if (o->prompt_ids) {
        if (parse_ids(o->prompt_ids, &p, &np)) return 2;
    } else if (o->chat) {
        int rc = chat_ids(g, &p, &np, err, n);
        if (rc) return rc;
    } else {
        BpeIds b = {0};
        size_t npre = 0, npost = 0;
        const uint32_t *pre = hftok_prefix(g->tok, &npre), *post = hftok_suffix(g->tok, &npost);
        (void)post;
        if (hftok_encode(g->tok, o->prompt, strlen(o->prompt), &b, err, n)) {
            bpe_ids_free(&b);
            return 1;
        }
        np = (int64_t)(npre + b.n);
        p = malloc(sizeof *p * (size_t)(np ? np : 1));
        if (!p) { bpe_ids_free(&b); snprintf(err, n, "out of memory"); return 1; }
        for (size_t i = 0; i < npre; i++) p[i] = (int32_t)pre[i];
        for (size_t i = 0; i < b.n; i++) p[npre + i] = (int32_t)b.v[i];
        bpe_ids_free(&b);
    }
    int rc = 0;
    if (np == 0) rc = snprintf(err, n, "the prompt has no tokens");
    else if (np > g->T)
        rc = snprintf(err, n, "the prompt has %" PRId64 " tokens, more than the plan's window of T = %" PRId64 " (compile with a longer --seq)", np, g->T);
    for (int64_t i = 0; !rc && i < np; i++)
        if (p[i] >= g->V) rc = snprintf(err, n, "prompt token %" PRId64 " is id %d, outside the model's vocabulary of %" PRId64, i, p[i], g->V);
    g->cap = np + g->o->max_new;
    g->ids = rc ? NULL : malloc(sizeof *g->ids * (size_t)g->cap);
    if (!rc && !g->ids) rc = snprintf(err, n, "out of memory");
    rc = rc ? 1 : 0;
    if (!rc) memcpy(g->ids, p, sizeof *p * (size_t)np);
    g->nids = g->nprompt = rc ? 0 : np;
    free(p);
    return rc;
}

/* Writes what the new token adds to the output, as it comes. */
static int emit(Gen *g, int32_t id, bool last, char *err, size_t n) {
    if (!g->tok) {
        printf("%s%d", g->nids - 1 > g->nprompt ? " " : "", id);
        fflush(stdout);
        return 0;
    }
    char *s = NULL;
    size_t sn = 0;
    const uint32_t *gen = (const uint32_t *)(g->ids + g->nprompt);
    if (hftok_decode(g->tok, gen, (size_t)(g->nids - g->nprompt), 1, &s, &sn, err, n)) return -1;
    /* a character cut between tokens decodes as U+FFFD until its last byte comes */
    size_t keep = sn;
    if (!last && keep >= 3 && !memcmp(s + keep - 3, "\xef\xbf\xbd", 3)) keep -= 3;
    if (keep > g->printed) {
        fwrite(s + g->printed, 1, keep - g->printed, stdout);
        fflush(stdout);
        g->printed = keep;
    }
    free(s);
    return 0;
}

/* One token: the last T ids into row 0 of the window, a forward, the
 * logits of the last position on rank 0, sampled there and broadcast. */
static int step(Gen *g, uint64_t *rng, int32_t *out, char *err, size_t n) {
    int64_t w = g->nids < g->T ? g->nids : g->T;
    memset(g->win, 0, sizeof *g->win * (size_t)(g->B * g->T));
    memcpy(g->win, g->ids + g->nids - w, sizeof *g->win * (size_t)w);
    double loss;
    if (rt_forward(g->r, g->win, g->tgt, &loss, err, n)) return -1;
    int64_t id = 0;
    if (C.rank == 0) {
        if (rt_logits(g->r, w - 1, g->logits, err, n)) return -1;
        id = sample(g->logits, g->V, g->o, rng, g->cand, g->prob);
    }
    if (comm_bcast(&C, &id, sizeof id, 0) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(&C)), -1;
    *out = (int32_t)id;
    return 0;
}

/* One token with the KV cache: rank 0 feeds the ids the cache lacks (all
 * of the last T when the text outgrew the window, which slid) and samples
 * from the last one's logits; the id, or -1 for a failure there, is
 * broadcast, so no rank waits for one that failed. */
static int step_kv(Gen *g, uint64_t *rng, int32_t *out, char *err, size_t n) {
    int64_t id = 0;
    if (C.rank == 0) {
        int64_t w = g->nids < g->T ? g->nids : g->T;
        if (g->nids - w != g->base) {
            kvdec_reset(g->kv);
            g->base = g->nids - w;
        }
        int rc = 0;
        for (int64_t i = g->base + kvdec_position(g->kv); !rc && i < g->nids; i++) rc = kvdec_step(g->kv, g->ids[i], g->logits, err, n);
        id = rc ? -1 : sample(g->logits, g->V, g->o, rng, g->cand, g->prob);
    }
    if (comm_bcast(&C, &id, sizeof id, 0) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(&C)), -1;
    if (id < 0 && C.rank != 0) snprintf(err, n, "rank 0 failed decoding");
    *out = (int32_t)id;
    return id < 0 ? -1 : 0;
}

/* --logits: the V logits of the token just drawn, one line (%.9g: an f32
 * read back exactly). */
static int write_logits(Gen *g, char *err, size_t n) {
    for (int64_t v = 0; v < g->V; v++) fprintf(g->lf, "%s%.9g", v ? " " : "", (double)g->logits[v]);
    if (fputc('\n', g->lf) == EOF || ferror(g->lf)) return snprintf(err, n, "--logits %s: %s", g->o->logits, strerror(errno)), -1;
    return 0;
}

static int generate(Gen *g, char *err, size_t n) {
    size_t V = (size_t)g->V, BT = (size_t)(g->B * g->T);
    g->win = calloc(BT, sizeof *g->win);
    g->tgt = calloc(BT, sizeof *g->tgt);
    g->logits = malloc(sizeof *g->logits * V);
    g->cand = malloc(sizeof *g->cand * V);
    g->prob = malloc(sizeof *g->prob * V);
    if (!g->win || !g->tgt || !g->logits || !g->cand || !g->prob) return snprintf(err, n, "out of memory"), -1;
    uint64_t rng = g->o->seed;
    double t0 = clock_mono_s();
    int64_t made = 0;
    for (; made < g->o->max_new; made++) {
        int32_t id;
        if ((g->kv ? step_kv(g, &rng, &id, err, n) : step(g, &rng, &id, err, n))) return -1;
        if (C.rank == 0 && g->lf && write_logits(g, err, n)) return -1;
        /* a chat's end-of-turn token ends the answer and is not part of it;
         * --eos's token is written, as it always was */
        bool end_of_turn = false;
        for (int k = 0; k < g->nstop; k++) end_of_turn |= id == g->stop[k];
        bool stop = end_of_turn || id == g->o->eos;
        if (!end_of_turn) g->ids[g->nids++] = id;
        bool last = stop || made + 1 == g->o->max_new;
        if (C.rank == 0 && emit(g, id, last, err, n)) return -1;
        if (stop) { made++; break; }
    }
    if (C.rank == 0) {
        printf("\n");
        fflush(stdout);
        double s = clock_mono_s() - t0;
        if (!g->o->quiet && g->kv)
            fprintf(stderr, "generated %" PRId64 " token%s in %.2f s (%.1f tokens/s; KV cache: one position a token, the prompt's first)\n",
                    made, made == 1 ? "" : "s", s, s > 0 ? (double)made / s : 0.0);
        else if (!g->o->quiet)
            fprintf(stderr, "generated %" PRId64 " token%s in %.2f s (%.1f tokens/s; each a forward of %" PRId64 " x %" PRId64 " positions, no KV cache)\n",
                    made, made == 1 ? "" : "s", s, s > 0 ? (double)made / s : 0.0, g->B, g->T);
    }
    return 0;
}

static void gen_free(Gen *g) {
    free(g->ids);
    free(g->win);
    free(g->tgt);
    free(g->logits);
    free(g->cand);
    free(g->prob);
    kvdec_free(g->kv);
    if (g->lf) fclose(g->lf);
    if (g->tok) hftok_free(g->tok);
}

/* Everything after the plan is read and the job is up: 0, or an exit code
 * with the message printed. */
static int run(const Plan *p, const GenOpts *o) {
    static char err[20480];
    Gen g = {.o = o};
    int status = 0;
    RtBackend be;
    RtForwardInfo fi;
#define FAIL(...) do { status = die(__VA_ARGS__); goto out; } while (0)
    if (!plan_batch_shape(p, &g.B, &g.T)) FAIL("%s: the plan has no token input", o->plan);
    if (o->tokenizer && hftok_load(&g.tok, o->tokenizer, err, sizeof err)) FAIL("%s", err);
    if (rt_choose_backend(&C, o->backend, p, o->plan, &be, NULL, 0, err, sizeof err)) FAIL("%s", err);
    RtOptions ro = {.backend = be, .nvme_dir = o->nvme, .queue_depth = 32};
    main_env_rt(&E, &ro);
    if (!(g.r = rt_create(p, &C, &ro, err, sizeof err))) FAIL("%s", err);
    if (rt_forward_info(g.r, &fi, err, sizeof err)) FAIL("%s: %s", o->plan, err);
    g.V = fi.vocab;
    if (fi.logits_rows != g.B * g.T) FAIL("%s: the loss's logits have %" PRId64 " rows, not B*T = %" PRId64, o->plan, fi.logits_rows, g.B * g.T);
    int rc = prompt_ids(&g, err, sizeof err);
    if (rc == 2) { status = 2; goto out; }
    if (rc) FAIL("%s", err);
    if (load_weights(g.r, p, o, err, sizeof err)) FAIL("%s", err);
    if (C.rank == 0 && o->logits && !(g.lf = fopen(o->logits, "w"))) FAIL("--logits %s: %s", o->logits, strerror(errno));
    char why[1024] = "";
    uint64_t plan_used = rt_gpu_memory_used(g.r); /* before the decoder's */
    if (strcmp(o->decode, "window")) {
        rc = kvdec_create(g.r, p, &C, be == RT_BACKEND_CUDA ? KV_CUDA : KV_HOST, &g.kv, why, sizeof why);
        if (rc < 0) FAIL("%s", why);
        if (rc > 0 && !strcmp(o->decode, "kv")) FAIL("--decode kv: %s", why);
    }
    if (!g.kv) { /* a window forward turns every position by the table of T's length */
        for (uint32_t k = 0; k < p->nops; k++) {
            const PlanOp *op = &p->ops[k];
            if (op->prim == PRIM_ROPE && op->iattr[IA_ROPE_SCALING] == ROPE_LONGROPE && op->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] < g.T)
                FAIL("--decode window: the plan's rope is longrope with original_max_positions %" PRId64 " < T = %" PRId64
                     ": each forward of the window would turn a shorter text by the long factors, which transformers uses only past %" PRId64
                     " positions; use --decode kv (or plan with --seq %" PRId64 ")%s%s", op->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS], g.T,
                     op->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS], op->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS], why[0] ? "; no KV cache: " : "", why);
        }
    }
    if (C.rank == 0 && !o->quiet && g.kv && be == RT_BACKEND_CUDA) {
        char b1[32], b2[32];
        fprintf(stderr, "zinfgen: %s on the cuda backend, KV cache of T = %" PRId64 " positions (%s of rank 0's GPU memory beside the "
                        "plan's %s: parameters, cache, scratch), %" PRId64 " prompt token%s\n", p->model_name ? p->model_name : "?", g.T,
                plan_bytes_str(kvdec_bytes(g.kv), b1, sizeof b1), plan_bytes_str(plan_used, b2, sizeof b2), g.nprompt, g.nprompt == 1 ? "" : "s");
    } else if (C.rank == 0 && !o->quiet && g.kv) {
        char b1[32];
        fprintf(stderr, "zinfgen: %s on the host backend, KV cache of T = %" PRId64 " positions (%s on rank 0: parameters, cache, scratch), %" PRId64
                        " prompt token%s\n", p->model_name ? p->model_name : "?", g.T, plan_bytes_str(kvdec_bytes(g.kv), b1, sizeof b1), g.nprompt,
                g.nprompt == 1 ? "" : "s");
    } else if (C.rank == 0 && !o->quiet) {
        fprintf(stderr, "zinfgen: %s on the %s backend, window %" PRId64 " x %" PRId64 ", %" PRId64 " prompt token%s; %u of the plan's instructions a token%s%s%s\n",
                p->model_name ? p->model_name : "?", be == RT_BACKEND_CUDA ? "cuda" : "host", g.B, g.T, g.nprompt,
                g.nprompt == 1 ? "" : "s", fi.instructions, why[0] ? " (no KV cache: " : "", why, why[0] ? ")" : "");
    }
    if (generate(&g, err, sizeof err)) FAIL("%s", err);
out:
#undef FAIL
    gen_free(&g);
    rt_destroy(g.r);
    return status;
}

int main(int argc, char **argv) {
    main_blas_core(argv); /* OpenBLAS on this processor's kernels (blas_core.h) */
    signal(SIGPIPE, SIG_IGN);
    GenOpts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    char env_err[256];
    if (main_env_read(&E, env_err, sizeof env_err) || main_env_apply(&E, env_err, sizeof env_err)) {
        fprintf(stderr, "zinfgen: %s\n", env_err);
        return 2;
    }
    if (comm_init(&C, &argc, &argv, &E.comm) != COMM_OK) {
        fprintf(stderr, "zinfgen: %s\n", comm_last_error(&C));
        return 1;
    }
    hk_threads_local_ranks(C.local_size);
    char err[2048];
    Plan *p = plan_read(o.plan, err, sizeof err);
    if (!p) rc = die("%s", err);
    char vm[4096];
    int nv = p ? verify_plan(p, vm, sizeof vm) : 0;
    if (nv) rc = die("%s: the plan fails verification (%d problem%s):\n%s", o.plan, nv, nv == 1 ? "" : "s", vm);
    if (!rc) rc = run(p, &o);
    plan_free(p);
    comm_finalize(&C);
    return rc;
}
