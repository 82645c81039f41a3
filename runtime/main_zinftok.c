/* zinftok: text -> token file in the llm.c layout zinfrun reads, and back.
 *   zinftok INPUT... -o TRAIN.bin [--val VAL.bin --val-fraction F]
 *       byte-level: token = byte, vocabulary 256; inputs concatenated
 *   zinftok --tokenizer tokenizer.json INPUT... -o TRAIN.bin
 *           [--bos TOKEN | --no-bos] [--eos TOKEN | --no-eos] [--val ...]
 *       a Hugging Face tokenizer (hftok.h); each INPUT is one document,
 *       framed by what the tokenizer's post-processor puts around one
 *       sequence unless --bos/--eos/--no-bos/--no-eos say otherwise
 *       an INPUT named *.jsonl holds instruction samples, one a line
 *       (runtime/data/sftdata.h): [--train-on completion|all]
 *       [--max-tokens N [--too-long truncate|refuse]]; when some token is
 *       untrained the file carries the mask (tokens.h, version 3)
 *       [--pack T [--pack-seed S]]: the samples (JSONL lines, documents)
 *       packed into rows of T+1 tokens (runtime/data/packing.h), written
 *       as a packed file (tokens.h, version 4); --val takes whole rows
 *   zinftok --decode [--tokenizer tokenizer.json] [--skip-special] [TRAIN.bin | -]
 *       ids back to text on stdout: a token file, or decimal ids on stdin
 * Exit 0, 1 on bad input or I/O errors, 2 on usage. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bpe.h"
#include "chattmpl.h"
#include "hftok.h"
#include "packing.h"
#include "sftdata.h"
#include "tokens.h"
#include "unicode.h"
#include "clock.h"
#include "progress_meter.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: zinftok INPUT.txt... -o TRAIN.bin [--val VAL.bin] [--val-fraction 0.1]\n"
            "         byte-level tokens (vocabulary 256) in the llm.c token-file layout\n"
            "       zinftok --tokenizer tokenizer.json INPUT.txt... -o TRAIN.bin [--bos TOKEN | --no-bos]\n"
            "               [--eos TOKEN | --no-eos] [--val VAL.bin] [--val-fraction 0.1]\n"
            "         a Hugging Face tokenizer.json (byte-level BPE as GPT-2, Llama-3, Qwen2; BPE with byte\n"
            "         fallback as LLaMA-2, Mistral); each input is one document, framed by the tokens the\n"
            "         tokenizer's post-processor puts around a sequence unless --bos/--eos say otherwise\n"
            "       an input named *.jsonl holds samples, one a line: {\"text\": ...}, {\"prompt\": ..., \"completion\": ...}\n"
            "         or {\"input_ids\": [...], \"labels\": [...]} (-100: untrained); the file then carries which\n"
            "         tokens are trained. --train-on completion (default) | all: what of a prompt/completion trains;\n"
            "         --max-tokens N: a longer sample is cut to N tokens, or refused with --too-long refuse\n"
            "       --pack T [--pack-seed S]: samples (JSONL lines, documents) packed into rows of T+1 tokens, each\n"
            "         sample attending only to itself in training (T: the model's sequence length)\n"
            "       zinftok --decode [--tokenizer tokenizer.json] [--skip-special] [TRAIN.bin | -]\n"
            "         token ids back to text (a token file, or decimal ids on standard input)\n");
}

/* The whole of path (or stdin for "-") into a malloc'd buffer. */
static int read_all(const char *path, char **out, size_t *outn, char *err, size_t errlen) {
    struct stat st;
    if (strcmp(path, "-") && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is a directory: give the text files in it (%s/*.txt)", path, path);
        return -1;
    }
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!b) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if (bad) {
        free(b);
        snprintf(err, errlen, "%s: read error", path);
        return -1;
    }
    *out = b;
    *outn = n;
    return 0;
}

/* A token given on the command line: its text in the tokenizer. */
static int token_arg(const HfTok *t, const char *opt, const char *s, uint32_t *id, char *err, size_t errlen) {
    int64_t v = hftok_token_id(t, s, strlen(s));
    if (v < 0) {
        snprintf(err, errlen, "%s '%s': no such token in the tokenizer", opt, s);
        return -1;
    }
    *id = (uint32_t)v;
    return 0;
}

typedef struct {
    const char *out, *val, *tokenizer, *bos, *eos, *chat_template;
    SftTrainOn train_on;
    int64_t max_tokens;
    bool refuse_long;
    int no_bos, no_eos, decode, skip_special;
    double frac;
    int64_t pack;        /* --pack T; 0: not packed */
    uint64_t pack_seed;
    const char **inputs; /* argv[1..nin], compacted there while parsing */
    int nin;
} Opts;

/* Whether an input is JSONL samples: by its name. */
static bool is_jsonl(const char *path) {
    size_t n = strlen(path);
    return n >= 6 && !strcmp(path + n - 6, ".jsonl");
}

/* Writes `s` to stdout; 0 or -1. */
static int put(const char *s, size_t n) { return fwrite(s, 1, n, stdout) == n ? 0 : -1; }

/* --decode: each run of tokens between special tokens is decoded as one
 * sequence, and the special tokens are written as their text (or dropped
 * with --skip-special), so each document of a token file decodes on its
 * own, as it was encoded. */
static int run_decode(const Opts *o, HfTok *t) {
    char err[1024];
    const char *src = o->nin ? o->inputs[0] : "-";
    uint32_t *ids = NULL;
    size_t n = 0;
    uint32_t vocab = t ? hftok_vocab_size(t) : 256;
    if (strcmp(src, "-")) {
        TokReader r;
        if (tok_open(&r, src, vocab, err, sizeof err)) {
            fprintf(stderr, "zinftok: %s\n", err);
            return 1;
        }
        n = (size_t)r.ntokens;
        ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids || tok_read(&r, 0, (int64_t)n, ids, err, sizeof err)) {
            fprintf(stderr, "zinftok: %s\n", ids ? err : "out of memory");
            free(ids);
            tok_close(&r);
            return 1;
        }
        tok_close(&r);
    } else {
        char *text;
        size_t tn;
        if (read_all("-", &text, &tn, err, sizeof err)) {
            fprintf(stderr, "zinftok: %s\n", err);
            return 1;
        }
        BpeIds v = {0};
        size_t i = 0;
        int rc = 0;
        while (i < tn && !rc) {
            while (i < tn && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r' || text[i] == ',')) i++;
            if (i == tn) break;
            uint64_t x = 0;
            size_t s = i;
            while (i < tn && text[i] >= '0' && text[i] <= '9' && x <= UINT32_MAX) x = x * 10 + (uint64_t)(text[i++] - '0');
            if (i == s || x > UINT32_MAX || (i < tn && !strchr(" \n\t\r,", text[i]))) {
                size_t e = s;
                while (e < tn && e - s < 20 && !strchr(" \n\t\r,", text[e])) e++;
                fprintf(stderr, "zinftok: stdin: '%.*s' is not a token id\n", (int)(e - s), text + s);
                rc = 1;
            } else if (x >= vocab) {
                fprintf(stderr, "zinftok: stdin: token %llu at position %zu is not below the vocabulary size %u\n",
                        (unsigned long long)x, v.n, vocab);
                rc = 1;
            } else if (bpe_ids_push(&v, (uint32_t)x)) {
                fprintf(stderr, "zinftok: out of memory\n");
                rc = 1;
            }
        }
        free(text);
        if (rc) {
            bpe_ids_free(&v);
            return 1;
        }
        ids = v.v;
        n = v.n;
    }
    int rc = 0;
    if (!t) { /* byte-level: the bytes themselves */
        for (size_t i = 0; i < n && !rc; i++) rc = putchar((int)ids[i]) == EOF;
    } else {
        size_t run = 0;
        for (size_t i = 0; i <= n && !rc; i++) {
            if (i < n && !hftok_is_special(t, ids[i])) continue;
            if (i > run) {
                char *s;
                size_t sn;
                if (hftok_decode(t, ids + run, i - run, 0, &s, &sn, err, sizeof err)) {
                    fprintf(stderr, "zinftok: %s: %s\n", src, err);
                    free(ids);
                    return 1;
                }
                rc = put(s, sn);
                free(s);
            }
            if (i < n && !(o->skip_special && hftok_is_special(t, ids[i]))) {
                size_t tn;
                const char *s = hftok_token_text(t, ids[i], &tn);
                rc = rc || put(s, tn);
            }
            run = i + 1;
        }
    }
    free(ids);
    if (rc || fflush(stdout)) {
        fprintf(stderr, "zinftok: write error on standard output\n");
        return 1;
    }
    return 0;
}

/* What the JSONL inputs held (the line goes on). */
static void print_samples(const Opts *o, const SftStats *st) {
    printf("zinftok: %" PRId64 " sample%s (%" PRId64 " text, %" PRId64 " prompt/completion, %" PRId64 " pre-tokenized)",
           st->samples, st->samples == 1 ? "" : "s", st->text, st->prompt_completion, st->pretokenized);
    if (st->conversations) printf(", %" PRId64 " conversation%s", st->conversations, st->conversations == 1 ? "" : "s");
    if (o->max_tokens > 0) printf(", %" PRId64 " longer than %" PRId64 " tokens truncated", st->truncated, o->max_tokens);
}

/* Rows [r0, r1) of a packing as a packed file. */
static int write_rows(const char *path, const PackRows *pr, int64_t r0, int64_t r1, int64_t vocab, uint64_t fp,
                      char *err, size_t errlen) {
    int64_t cap = pr->T + 1, s0 = pr->row_first[r0], ns = pr->row_first[r1] - s0;
    int32_t *first = malloc(sizeof *first * (size_t)(r1 - r0 + 1));
    if (!first) return snprintf(err, errlen, "%s: out of memory", path), -1;
    for (int64_t i = r0; i <= r1; i++) first[i - r0] = (int32_t)(pr->row_first[i] - s0);
    int rc = tok_write_packed(path, pr->ids + r0 * cap, pr->trained + r0 * cap, r1 - r0, pr->T, first,
                              pr->starts + s0, ns, vocab, fp, err, errlen);
    free(first);
    return rc;
}

/* --pack T: the samples in rows of T+1 tokens, the padding pad_id; the
 * last --val-fraction of the rows (in their seeded order) to --val. */
static int write_packed(const Opts *o, const SftOut *out, uint32_t pad_id, int64_t vocab, uint64_t fp) {
    char err[1024];
    PackRows pr;
    if (pack_samples(out->ids.v, out->trained, out->ends, (int64_t)out->nends, o->pack, pad_id, o->pack_seed, &pr, err,
                     sizeof err)) {
        fprintf(stderr, "zinftok: --pack %" PRId64 ": %s\n", o->pack, err);
        return 1;
    }
    int64_t nval = o->val ? (int64_t)((double)pr.rows * o->frac) : 0, ntrain = pr.rows - nval;
    int rc = 0;
    if (o->val && (nval == 0 || ntrain == 0)) {
        fprintf(stderr, "zinftok: --val with --pack: %" PRId64 " row%s cannot be split %.2f : %.2f\n", pr.rows,
                pr.rows == 1 ? "" : "s", 1 - o->frac, o->frac);
        rc = 1;
    } else if (write_rows(o->out, &pr, 0, ntrain, vocab, fp, err, sizeof err) ||
               (o->val && write_rows(o->val, &pr, ntrain, pr.rows, vocab, fp, err, sizeof err))) {
        fprintf(stderr, "zinftok: %s\n", err);
        rc = 1;
    } else {
        int64_t cap = o->pack + 1, trained = 0;
        for (int64_t i = 0; i < pr.rows * cap; i++) trained += pr.trained[i];
        printf("zinftok: %" PRId64 " sample%s packed into %" PRId64 " row%s of T+1 = %" PRId64 " tokens -> %s", pr.samples,
               pr.samples == 1 ? "" : "s", ntrain, ntrain == 1 ? "" : "s", cap, o->out);
        if (o->val) printf(", %" PRId64 " -> %s", nval, o->val);
        printf(" (seed %" PRIu64 ")\n", o->pack_seed);
        printf("zinftok: packing efficiency %.2f%% (%" PRId64 " sample tokens of %" PRId64 " row tokens); trained tokens: %"
               PRId64 "\n",
               100.0 * pack_efficiency(&pr), pr.real, pr.rows * cap, trained);
    }
    pack_rows_free(&pr);
    return rc;
}

/* The inputs as one phase: a file's own progress (sft_read_jsonl reports
 * bytes of its file) shifted by the bytes of the files before it. */
typedef struct InputsProgress {
    Progress base;
    Progress *to;
    uint64_t before, total;
} InputsProgress;

static void inputs_report(Progress *p, const char *phase, const char *unit, uint64_t done, uint64_t total) {
    InputsProgress *ip = (InputsProgress *)p;
    (void)total;
    if (ip->before + done > ip->total) ip->total = 0; /* an input stat did not size (a pipe): no total */
    progress_report(ip->to, phase, unit, ip->before + done, ip->total);
}

int main(int argc, char **argv) {
    Opts o = {.frac = 0.1, .inputs = (const char **)argv + 1, .train_on = SFT_TRAIN_COMPLETION};
    bool sft_opts = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int takes = !strcmp(a, "-o") || !strcmp(a, "--val") || !strcmp(a, "--val-fraction") || !strcmp(a, "--tokenizer") ||
                    !strcmp(a, "--bos") || !strcmp(a, "--eos") || !strcmp(a, "--train-on") || !strcmp(a, "--max-tokens") ||
                    !strcmp(a, "--too-long") || !strcmp(a, "--chat-template") || !strcmp(a, "--pack") ||
                    !strcmp(a, "--pack-seed");
        if (takes && i + 1 == argc) {
            fprintf(stderr, "zinftok: option '%s' needs an argument\n", a);
            return 2;
        }
        if (!strcmp(a, "-o")) o.out = argv[++i];
        else if (!strcmp(a, "--val")) o.val = argv[++i];
        else if (!strcmp(a, "--tokenizer")) o.tokenizer = argv[++i];
        else if (!strcmp(a, "--chat-template")) {
            sft_opts = true;
            o.chat_template = argv[++i];
        }
        else if (!strcmp(a, "--bos")) o.bos = argv[++i];
        else if (!strcmp(a, "--eos")) o.eos = argv[++i];
        else if (!strcmp(a, "--no-bos")) o.no_bos = 1;
        else if (!strcmp(a, "--no-eos")) o.no_eos = 1;
        else if (!strcmp(a, "--decode")) o.decode = 1;
        else if (!strcmp(a, "--skip-special")) o.skip_special = 1;
        else if (!strcmp(a, "--train-on")) {
            sft_opts = true;
            if (sft_parse_train_on(argv[++i], &o.train_on)) {
                fprintf(stderr, "zinftok: --train-on '%s': expected completion, assistant or all\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--max-tokens")) {
            sft_opts = true;
            char *end;
            long long v = strtoll(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 1 || v > INT32_MAX) {
                fprintf(stderr, "zinftok: --max-tokens '%s': expected a token count of 1 or more\n", argv[i]);
                return 2;
            }
            o.max_tokens = v;
        } else if (!strcmp(a, "--pack") || !strcmp(a, "--pack-seed")) {
            bool seed = !strcmp(a, "--pack-seed");
            char *end;
            errno = 0;
            unsigned long long v = strtoull(argv[++i], &end, 10);
            if (*end || end == argv[i] || argv[i][0] == '-' || errno || (!seed && (v < 1 || v > INT32_MAX - 1))) {
                fprintf(stderr, "zinftok: %s '%s': expected %s\n", a, argv[i],
                        seed ? "a seed (a whole number)" : "the model's sequence length T, 1 or more");
                return 2;
            }
            if (seed) o.pack_seed = v;
            else o.pack = (int64_t)v;
        } else if (!strcmp(a, "--too-long")) {
            sft_opts = true;
            if (strcmp(argv[++i], "truncate") && strcmp(argv[i], "refuse")) {
                fprintf(stderr, "zinftok: --too-long '%s': expected truncate or refuse\n", argv[i]);
                return 2;
            }
            o.refuse_long = !strcmp(argv[i], "refuse");
        }
        else if (!strcmp(a, "--val-fraction")) {
            char *end;
            o.frac = strtod(argv[++i], &end);
            if (*end || o.frac <= 0 || o.frac >= 1) {
                fprintf(stderr, "zinftok: --val-fraction must be between 0 and 1\n");
                return 2;
            }
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "zinftok: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else
            argv[1 + o.nin++] = argv[i]; /* never ahead of i */
    }
    if ((o.bos && o.no_bos) || (o.eos && o.no_eos)) {
        fprintf(stderr, "zinftok: --bos with --no-bos (or --eos with --no-eos) makes no sense\n");
        return 2;
    }
    if ((o.bos || o.eos || o.no_bos || o.no_eos) && !o.tokenizer) {
        fprintf(stderr, "zinftok: --bos, --eos, --no-bos and --no-eos need --tokenizer\n");
        return 2;
    }
    bool any_jsonl = false;
    for (int k = 0; k < o.nin; k++) any_jsonl |= is_jsonl(o.inputs[k]);
    if (sft_opts && (o.decode || !any_jsonl)) {
        fprintf(stderr, "zinftok: --train-on, --max-tokens, --too-long and --chat-template are for JSONL inputs (*.jsonl)\n");
        return 2;
    }
    if (o.decode && o.pack) {
        fprintf(stderr, "zinftok: --pack is for making a token file, not --decode\n");
        return 2;
    }
    if (o.refuse_long && !o.max_tokens) {
        fprintf(stderr, "zinftok: --too-long needs --max-tokens\n");
        return 2;
    }
    if (o.decode ? (o.out || o.val || o.nin > 1) : (!o.out || o.nin == 0 || o.skip_special)) {
        usage(stderr);
        return 2;
    }
    char err[1024];
    HfTok *t = NULL;
    /* a model directory stands for its tokenizer.json */
    char tokpath[4200];
    struct stat st;
    if (o.tokenizer && stat(o.tokenizer, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(tokpath, sizeof tokpath, "%s/tokenizer.json", o.tokenizer);
        if (access(tokpath, R_OK) != 0) {
            fprintf(stderr, "zinftok: --tokenizer %s is a directory without a tokenizer.json: give the tokenizer.json file\n",
                    o.tokenizer);
            return 1;
        }
        o.tokenizer = tokpath;
    }
    if (o.tokenizer) {
        if (hftok_load(&t, o.tokenizer, err, sizeof err)) {
            fprintf(stderr, "zinftok: %s\n", err);
            return 1;
        }
        const char *notes = hftok_notes(t);
        while (*notes) {
            const char *nl = strchr(notes, '\n');
            size_t l = nl ? (size_t)(nl - notes) : strlen(notes);
            fprintf(stderr, "zinftok: note: %s: %.*s\n", o.tokenizer, (int)l, notes);
            notes += l + (nl != NULL);
        }
    }
    if (o.decode) {
        int rc = run_decode(&o, t);
        hftok_free(t);
        return rc;
    }

    /* The tokens around each document. */
    uint32_t pre[16], post[16];
    size_t npre = 0, npost = 0;
    if (t) {
        const uint32_t *p = hftok_prefix(t, &npre), *s = hftok_suffix(t, &npost);
        memcpy(pre, p, npre * sizeof *pre);
        memcpy(post, s, npost * sizeof *post);
        if (o.no_bos) npre = 0;
        if (o.no_eos) npost = 0;
        if ((o.bos && token_arg(t, "--bos", o.bos, &pre[0], err, sizeof err)) ||
            (o.eos && token_arg(t, "--eos", o.eos, &post[0], err, sizeof err))) {
            fprintf(stderr, "zinftok: %s\n", err);
            hftok_free(t);
            return 1;
        }
        if (o.bos) npre = 1;
        if (o.eos) npost = 1;
    }

    /* The chat template of conversations: --chat-template, else the
     * tokenizer_config.json beside the tokenizer when it has one. */
    ChatTemplate *chat = NULL;
    if (sft_chat_template_load(o.chat_template, o.tokenizer, &chat, err, sizeof err)) {
        fprintf(stderr, "zinftok: %s\n", err);
        hftok_free(t);
        return 1;
    }

    /* Every input's ids and, beside them, whether each is trained (plain
     * text: all; JSONL: as its samples say). */
    SftOut out = {0};
    SftOptions so = {.tok = t, .prefix = pre, .nprefix = npre, .suffix = post, .nsuffix = npost, .train_on = o.train_on,
                     .max_tokens = o.max_tokens, .refuse_long = o.refuse_long, .chat = chat};
    SftStats sst = {0};
    int njsonl = 0;
    size_t bytes = 0;
    double t0 = clock_mono_s();
    int rc = 0;
    ProgressMeter meter;
    progress_meter_init(&meter, stderr, isatty(2));
    InputsProgress inputs = {.base = {inputs_report}, .to = &meter.base};
    for (int k = 0; k < o.nin; k++) {
        struct stat sb;
        if (stat(o.inputs[k], &sb) == 0) inputs.total += (uint64_t)sb.st_size;
    }
    so.progress = &inputs.base;
    for (int k = 0; k < o.nin && !rc; k++) {
        inputs.before = bytes;
        char *text;
        size_t n;
        if (read_all(o.inputs[k], &text, &n, err, sizeof err)) {
            progress_meter_finish(&meter);
            fprintf(stderr, "zinftok: %s\n", err);
            rc = 1;
            break;
        }
        bytes += n;
        if (is_jsonl(o.inputs[k])) {
            njsonl++;
            if (sft_read_jsonl(&so, o.inputs[k], text, n, &out, &sst, err, sizeof err)) {
                progress_meter_finish(&meter);
                fprintf(stderr, "zinftok: %s\n", err);
                rc = 1;
            }
            free(text);
            continue;
        }
        size_t from = out.ids.n;
        if (!t) {
            for (size_t i = 0; i < n && !rc; i++)
                if (bpe_ids_push(&out.ids, (uint8_t)text[i])) rc = 1;
            free(text);
        } else {
            size_t fixed_n, nbad;
            char *fixed = uni_utf8_repair((const uint8_t *)text, n, &fixed_n, &nbad);
            free(text);
            if (!fixed) {
                progress_meter_finish(&meter);
                fprintf(stderr, "zinftok: out of memory\n");
                rc = 1;
                break;
            }
            if (nbad) {
                progress_meter_finish(&meter);
                fprintf(stderr, "zinftok: note: %s: %zu invalid UTF-8 sequence%s replaced by U+FFFD\n", o.inputs[k], nbad,
                        nbad == 1 ? "" : "s");
            }
            for (size_t j = 0; j < npre && !rc; j++) rc = bpe_ids_push(&out.ids, pre[j]) ? 1 : 0;
            if (!rc && hftok_encode(t, fixed, fixed_n, &out.ids, err, sizeof err)) {
                progress_meter_finish(&meter);
                fprintf(stderr, "zinftok: %s: %s\n", o.inputs[k], err);
                free(fixed);
                rc = 1;
                break;
            }
            for (size_t j = 0; j < npost && !rc; j++) rc = bpe_ids_push(&out.ids, post[j]) ? 1 : 0;
            free(fixed);
        }
        if (rc || sft_out_mark_trained(&out, from) || sft_out_end_sample(&out)) {
            progress_meter_finish(&meter);
            fprintf(stderr, "zinftok: out of memory\n");
            rc = 1;
        }
        inputs_report(&inputs.base, "tokenizing", "B", n, n);
    }
    if (rc) progress_meter_finish(&meter);
    else progress_report(&meter.base, "tokenizing", "B", bytes, bytes);
    double secs = clock_mono_s() - t0;
    int64_t vocab = t ? hftok_vocab_size(t) : 256;
    if (!rc && out.ids.n == 0) {
        fprintf(stderr, "zinftok: no tokens: %s empty (%.0f bytes of text); nothing written\n",
                o.nin == 1 ? "the input is" : "the inputs are", (double)bytes);
        rc = 1;
    } else if (!rc && o.val && (size_t)((double)out.ids.n * o.frac) >= out.ids.n) {
        fprintf(stderr, "zinftok: --val takes all %zu tokens: nothing would be left to train on\n", out.ids.n);
        rc = 1;
    }
    uint64_t fp = t ? hftok_fingerprint(t) : 0;
    if (!rc && o.pack) {
        rc = write_packed(&o, &out, npost ? post[0] : 0, vocab, fp);
        if (!rc && njsonl) {
            print_samples(&o, &sst);
            printf("\n");
        }
    } else if (!rc) {
        const uint32_t *ids = out.ids.v;
        size_t ntok = out.ids.n, nval = o.val ? (size_t)((double)ntok * o.frac) : 0, ntrain = ntok - nval;
        int64_t trained[2] = {0, 0};
        for (size_t i = 0; i < ntok; i++) trained[i >= ntrain] += out.trained[i];
        if (tok_write_masked(o.out, ids, out.trained, (int64_t)ntrain, vocab, fp, err, sizeof err) ||
            (o.val && tok_write_masked(o.val, ids + ntrain, out.trained + ntrain, (int64_t)nval, vocab, fp, err, sizeof err))) {
            fprintf(stderr, "zinftok: %s\n", err);
            rc = 1;
        } else {
            printf("zinftok: %zu tokens -> %s", ntrain, o.out);
            if (o.val) printf(", %zu -> %s", nval, o.val);
            if (t)
                printf(" (%s: %s; %s ids; %d document%s, %.1f MB in %.2f s, %.1f MB/s)\n", o.tokenizer, hftok_describe(t),
                       vocab > TOK_MAX_VOCAB16 ? "32-bit" : "16-bit", o.nin, o.nin == 1 ? "" : "s", (double)bytes / 1e6,
                       secs, secs > 0 ? (double)bytes / 1e6 / secs : 0.0);
            else
                printf(" (byte-level, vocabulary 256)\n");
            if (njsonl) {
                print_samples(&o, &sst);
                printf("; trained tokens: %" PRId64 " of %zu", trained[0], ntrain);
                if (o.val) printf(", %" PRId64 " of %zu", trained[1], nval);
                printf(" (--train-on %s)\n", o.train_on == SFT_TRAIN_ALL ? "all" : "completion");
            }
        }
    }
    sft_out_free(&out);
    chattmpl_free(chat);
    hftok_free(t);
    return rc;
}
