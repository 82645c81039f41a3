/* dataorder: rows, epochs, the seeded permutation and document boundaries;
 * see dataorder.h. */
#include "dataorder.h"
#include "errorf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* splitmix64's finalizer: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

enum { FEISTEL_ROUNDS = 6 };

int64_t dord_permute(uint64_t seed, uint64_t epoch, int64_t n, int64_t i) {
    if (n < 1 || n > (INT64_C(1) << 62) || i < 0 || i >= n) return -1;
    if (n == 1) return 0;
    int h = 1; /* half width: the domain is 4^h >= n */
    while ((UINT64_C(1) << (2 * h)) < (uint64_t)n) h++;
    uint64_t mask = (UINT64_C(1) << h) - 1;
    uint64_t key[FEISTEL_ROUNDS];
    uint64_t base = mix64(mix64(seed ^ UINT64_C(0x6a09e667f3bcc909)) + epoch);
    for (int k = 0; k < FEISTEL_ROUNDS; k++) key[k] = mix64(base + UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(k + 1));
    uint64_t x = (uint64_t)i;
    do { /* cycle-walking: the permutation of [0, 4^h) applied until x lands in [0, n) */
        uint64_t l = x >> h, r = x & mask;
        for (int k = 0; k < FEISTEL_ROUNDS; k++) {
            uint64_t f = mix64(r ^ key[k]) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (l << h) | r;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

const char *dord_order_name(DordOrder o) { return o == DORD_SHUFFLE ? "shuffle" : "sequential"; }

int dord_parse_order(const char *s, DordOrder *o) {
    if (!strcmp(s, "sequential")) *o = DORD_SEQUENTIAL;
    else if (!strcmp(s, "shuffle")) *o = DORD_SHUFFLE;
    else return -1;
    return 0;
}

/* Appends a document [s, e) to the index when it holds a row. */
static int add_doc(DataOrder *d, int64_t s, int64_t e, int64_t *cap) {
    int64_t n = e - s;
    d->docs_all++;
    if (n > d->longest) d->longest = n;
    int64_t rows = n >= 2 ? (n - 2) / d->T + 1 : 0; /* ceil((n-1)/T): the last one padded */
    if (rows == 0) return 0;
    if (d->ndocs + 1 >= *cap) {
        int64_t nc = *cap ? *cap * 2 : 1024;
        int64_t *a = realloc(d->doc_start, (size_t)nc * sizeof *a);
        if (!a) return -1;
        d->doc_start = a;
        int64_t *b = realloc(d->doc_rows, (size_t)(nc + 1) * sizeof *b);
        if (!b) return -1;
        d->doc_rows = b;
        int64_t *c = realloc(d->doc_end, (size_t)nc * sizeof *c);
        if (!c) return -1;
        d->doc_end = c;
        *cap = nc;
    }
    if (d->ndocs == 0) d->doc_rows[0] = 0;
    d->doc_start[d->ndocs] = s;
    d->doc_end[d->ndocs] = e;
    d->doc_rows[d->ndocs + 1] = d->doc_rows[d->ndocs] + rows;
    d->ndocs++;
    d->tokens_used += n;
    return 0;
}

/* One pass over the file: the documents split at the EOS id. */
static int scan_docs(DataOrder *d, char *err, size_t errlen) {
    TokReader *r = d->r;
    const int64_t chunk = 1 << 20;
    uint32_t *ids = malloc((size_t)chunk * sizeof *ids);
    if (!ids) return errorf(err, errlen, "%s: out of memory scanning for documents", r->path);
    int64_t cap = 0, start = 0;
    int rc = 0;
    for (int64_t off = 0; off < r->ntokens && !rc; off += chunk) {
        int64_t k = r->ntokens - off < chunk ? r->ntokens - off : chunk;
        if (tok_read(r, off, k, ids, err, errlen)) { rc = -1; break; }
        for (int64_t i = 0; i < k; i++) {
            if ((int64_t)ids[i] != d->o.eos) continue;
            d->eos_count++;
            if (add_doc(d, start, off + i + 1, &cap)) { rc = errorf(err, errlen, "%s: out of memory indexing documents", r->path); break; }
            start = off + i + 1;
        }
    }
    if (!rc && start < r->ntokens && add_doc(d, start, r->ntokens, &cap))
        rc = errorf(err, errlen, "%s: out of memory indexing documents", r->path);
    free(ids);
    if (!rc) d->rows = d->ndocs ? d->doc_rows[d->ndocs] : 0;
    return rc;
}

/* A packed file (tokens.h, version 4): its rows, in either order. */
static int packed_open(DataOrder *d, char *err, size_t errlen) {
    TokReader *r = d->r;
    if (r->pack_T != d->T)
        return errorf(err, errlen,
                      "%s: packed into rows of T = %lld tokens, but the model's T is %lld: pack the samples again with "
                      "zinftok --pack %lld",
                      r->path, (long long)r->pack_T, (long long)d->T, (long long)d->T);
    if (d->o.eos >= 0)
        return errorf(err, errlen, "--eos does not apply to %s: a packed file's rows are its samples already", r->path);
    d->packed = true;
    d->rows = r->pack_rows;
    if (d->rows < d->B * d->world)
        return errorf(err, errlen,
                      "%s: %lld packed row%s, fewer than the %lld of one global micro-batch (B=%lld on %lld rank%s)",
                      r->path, (long long)d->rows, d->rows == 1 ? "" : "s", (long long)(d->B * d->world),
                      (long long)d->B, (long long)d->world, d->world == 1 ? "" : "s");
    d->tokens_used = r->ntokens;
    return 0;
}

int dord_segments(DataOrder *d, int rank, int64_t g, int32_t *seg, char *err, size_t errlen) {
    int64_t T = d->T;
    if (!d->packed) {
        memset(seg, 0, sizeof *seg * (size_t)(d->B * T));
        return 0;
    }
    if (rank < 0 || rank >= d->world || g < 0 || g > INT64_MAX / (d->B * d->world) - 1)
        return errorf(err, errlen, "%s: no micro-batch %lld on rank %d", d->r->path, (long long)g, rank);
    for (int64_t b = 0; b < d->B; b++) {
        int64_t off = dord_global_row_start(d, (g * d->world + rank) * d->B + b);
        if (off < 0) return errorf(err, errlen, "%s: no row for micro-batch %lld", d->r->path, (long long)g);
        if (tok_row_segments(d->r, off / (T + 1), seg + b * T, err, errlen)) return -1;
    }
    return 0;
}

int dord_open(DataOrder *d, TokReader *r, const DordOptions *o, int64_t B, int64_t T, int world, char *err,
              size_t errlen) {
    memset(d, 0, sizeof *d);
    d->o = *o;
    d->r = r;
    d->B = B;
    d->T = T;
    d->world = world;
    if (B < 1 || T < 1 || B > (INT64_C(1) << 31) || T > (INT64_C(1) << 31) || world < 1)
        return errorf(err, errlen, "%s: bad micro-batch shape B=%lld T=%lld on %d ranks", r->path, (long long)B,
                    (long long)T, world);
    int64_t global = B * world; /* rows of one global micro-batch */
    if (r->pack_T) {
        if (packed_open(d, err, errlen)) return -1;
    } else if (o->eos >= 0) {
        int64_t vocab = r->vocab > 0 ? r->vocab : r->file_vocab;
        if (vocab > 0 && o->eos >= vocab)
            return errorf(err, errlen, "--eos %lld is not a token id of the vocabulary of %lld ids (0..%lld)",
                        (long long)o->eos, (long long)vocab, (long long)(vocab - 1));
        if (scan_docs(d, err, errlen)) {
            dord_close(d);
            return -1;
        }
        if (d->rows == 0) {
            dord_close(d);
            return errorf(err, errlen,
                        "%s: no document holds a target: %lld document%s split at EOS %lld, of at most 1 token each",
                        r->path, (long long)d->docs_all, d->docs_all == 1 ? "" : "s", (long long)o->eos);
        }
        if (d->rows < global) {
            int64_t rows = d->rows;
            dord_close(d);
            return errorf(err, errlen,
                        "%s: the documents split at EOS %lld hold %lld row%s of T+1 = %lld tokens, fewer than the %lld "
                        "of one global micro-batch (B=%lld on %d rank%s)",
                        r->path, (long long)o->eos, (long long)rows, rows == 1 ? "" : "s", (long long)(T + 1),
                        (long long)global, (long long)B, world, world == 1 ? "" : "s");
        }
    } else if (o->order == DORD_SEQUENTIAL) {
        /* today's windows, with tok_batch's own messages */
        d->windows = true;
        int64_t w = tok_windows(r->ntokens, B, T);
        if (w < 1)
            return errorf(err, errlen, "%s: %lld tokens is too short for one window of B*T+1 = %lld tokens (B=%lld, T=%lld)",
                        r->path, (long long)r->ntokens, (long long)(B * T + 1), (long long)B, (long long)T);
        if (w < world)
            return errorf(err, errlen,
                        "%s: %lld tokens hold %lld disjoint windows of B*T+1 = %lld tokens, fewer than the %d ranks",
                        r->path, (long long)r->ntokens, (long long)w, (long long)(B * T + 1), world);
        d->rows = w * B;
    } else {
        d->rows = r->ntokens >= 1 ? (r->ntokens - 1) / T : 0;
        if (d->rows == 0)
            return errorf(err, errlen, "%s: %lld tokens is too short for one row of T+1 = %lld tokens", r->path,
                        (long long)r->ntokens, (long long)(T + 1));
        if (d->rows < global)
            return errorf(err, errlen,
                        "%s: %lld tokens hold %lld row%s of T+1 = %lld tokens, fewer than the %lld of one global "
                        "micro-batch (B=%lld on %d rank%s)",
                        r->path, (long long)r->ntokens, (long long)d->rows, d->rows == 1 ? "" : "s",
                        (long long)(T + 1), (long long)global, (long long)B, world, world == 1 ? "" : "s");
        d->tokens_used = d->rows * T + 1;
    }
    if (!d->windows) {
        d->row = malloc((size_t)(T + 1) * sizeof *d->row);
        if (!d->row) {
            dord_close(d);
            return errorf(err, errlen, "%s: out of memory for a row of %lld tokens", r->path, (long long)(T + 1));
        }
    }
    return 0;
}

void dord_close(DataOrder *d) {
    free(d->doc_start);
    free(d->doc_rows);
    free(d->doc_end);
    free(d->row);
    d->doc_start = d->doc_rows = d->doc_end = NULL;
    d->row = NULL;
    d->ndocs = 0;
}

int64_t dord_row_start(const DataOrder *d, int64_t j) {
    if (j < 0 || j >= d->rows) return -1;
    if (d->windows) {
        int64_t w = d->rows / d->B;
        return ((j / d->B) % w) * d->B * d->T + (j % d->B) * d->T;
    }
    if (d->packed) return j * (d->T + 1);
    if (d->o.eos < 0) return j * d->T;
    /* the last document whose first row is at or before j */
    int64_t lo = 0, hi = d->ndocs - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (d->doc_rows[mid] <= j) lo = mid;
        else hi = mid - 1;
    }
    return d->doc_start[lo] + (j - d->doc_rows[lo]) * d->T;
}

/* How many of the T+1 tokens of the row at `off` are its document's: T+1,
 * but for the last row of an EOS document, which the padding fills up. */
static int64_t row_len(const DataOrder *d, int64_t off) {
    if (d->o.eos < 0 || d->packed || d->windows) return d->T + 1;
    int64_t lo = 0, hi = d->ndocs - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (d->doc_start[mid] <= off) lo = mid;
        else hi = mid - 1;
    }
    int64_t n = d->doc_end[lo] - off;
    return n < d->T + 1 ? n : d->T + 1;
}

int64_t dord_global_row_start(const DataOrder *d, int64_t q) {
    if (q < 0 || d->rows < 1) return -1;
    int64_t e = q / d->rows, i = q % d->rows;
    int64_t j = d->o.order == DORD_SHUFFLE ? dord_permute(d->o.seed, (uint64_t)e, d->rows, i) : i;
    return dord_row_start(d, j);
}

int dord_batch(DataOrder *d, int rank, int64_t g, int32_t *tokens, int32_t *targets, char *err, size_t errlen) {
    TokReader *r = d->r;
    if (rank < 0 || rank >= d->world)
        return errorf(err, errlen, "%s: rank %d is not in a world of %lld", r->path, rank, (long long)d->world);
    if (g < 0) return errorf(err, errlen, "%s: negative micro-batch index %lld", r->path, (long long)g);
    if (d->windows) return tok_batch(r, rank, (int)d->world, g, d->B, d->T, tokens, targets, err, errlen);
    int64_t per = d->B * d->world;
    if (g > INT64_MAX / per - 1)
        return errorf(err, errlen, "%s: micro-batch index %lld is too large", r->path, (long long)g);
    int64_t T = d->T;
    for (int64_t b = 0; b < d->B; b++) {
        int64_t off = dord_global_row_start(d, (g * d->world + rank) * d->B + b);
        if (off < 0) return errorf(err, errlen, "%s: no row for micro-batch %lld", r->path, (long long)g);
        int64_t n = row_len(d, off); /* 2..T+1 */
        if (tok_read(r, off, n, d->row, err, errlen)) return -1;
        for (int64_t t = n; t <= T; t++) d->row[t] = (uint32_t)d->o.eos; /* padding */
        for (int64_t t = 0; t < T; t++) {
            tokens[b * T + t] = (int32_t)d->row[t];
            targets[b * T + t] = t + 1 < n ? (int32_t)d->row[t + 1] : TOK_UNTRAINED;
        }
        if (tok_mask_targets(r, off + 1, n - 1, targets + b * T, err, errlen)) return -1;
    }
    return 0;
}

int64_t dord_trained(DataOrder *d, int64_t g, char *err, size_t errlen) {
    TokReader *r = d->r;
    if (g < 0) return errorf(err, errlen, "%s: negative micro-batch index %lld", r->path, (long long)g);
    int64_t count = 0, T = d->T;
    if (d->windows) {
        int64_t w = tok_windows(r->ntokens, d->B, T), bt = d->B * T;
        if (w < 1) return errorf(err, errlen, "%s: no window of B*T+1 tokens", r->path);
        if (g > (INT64_MAX - d->world) / d->world) g %= w;
        for (int64_t k = 0; k < d->world; k++) {
            int64_t c = tok_count_trained(r, tok_window_offset(r->ntokens, g * d->world + k, d->B, T) + 1, bt, err, errlen);
            if (c < 0) return -1;
            count += c;
        }
        return count;
    }
    int64_t per = d->B * d->world;
    if (g > INT64_MAX / per - 1)
        return errorf(err, errlen, "%s: micro-batch index %lld is too large", r->path, (long long)g);
    for (int64_t q = g * per; q < (g + 1) * per; q++) {
        int64_t off = dord_global_row_start(d, q);
        if (off < 0) return errorf(err, errlen, "%s: no row for micro-batch %lld", r->path, (long long)g);
        int64_t c = tok_count_trained(r, off + 1, row_len(d, off) - 1, err, errlen);
        if (c < 0) return -1;
        count += c;
    }
    return count;
}

int64_t dord_epoch(const DataOrder *d, int64_t g) {
    if (g < 0 || d->rows < 1) return 0;
    int64_t per = d->B * d->world;
    if (g > INT64_MAX / per) return INT64_MAX / per / d->rows;
    return g * per / d->rows;
}

double dord_epochs_read(const DataOrder *d, int64_t g) {
    if (d->rows < 1) return 0;
    return (double)g * (double)(d->B * d->world) / (double)d->rows;
}

int dord_state_json(const DataOrder *d, int64_t g, char *buf, size_t n) {
    return snprintf(buf, n,
                    "{\"order\": \"%s\", \"seed\": %" PRIu64 ", \"eos\": %lld, \"tokens\": %lld, \"micro_batches\": %lld, "
                    "\"epoch\": %lld%s}",
                    dord_order_name(d->o.order), d->o.seed, (long long)d->o.eos, (long long)d->r->ntokens,
                    (long long)g, (long long)(dord_epoch(d, g) + 1), d->o.eos >= 0 ? ", \"eos_rows\": \"padded\"" : "");
}

/* A field of a flat JSON object [obj, end): its value's text into out. */
static bool field(const char *obj, const char *end, const char *key, char *out, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    size_t pl = strlen(pat);
    for (const char *p = obj; p + pl <= end; p++) {
        if (memcmp(p, pat, pl)) continue;
        p += pl;
        while (p < end && *p == ' ') p++;
        size_t i = 0;
        if (p < end && *p == '"') {
            p++;
            while (p < end && *p != '"' && i + 1 < n) out[i++] = *p++;
        } else {
            while (p < end && *p != ',' && *p != '}' && *p != ' ' && *p != '\n' && i + 1 < n) out[i++] = *p++;
        }
        out[i] = 0;
        return true;
    }
    return false;
}

static bool num(const char *s, bool is_unsigned, long long *v, unsigned long long *u) {
    char *e;
    if (!*s) return false;
    if (is_unsigned) *u = strtoull(s, &e, 10);
    else *v = strtoll(s, &e, 10);
    return *e == 0;
}

/* "; "-separated items appended to buf[n] (cut at n). */
static void diff_add(char *buf, size_t n, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void diff_add(char *buf, size_t n, size_t *used, const char *fmt, ...) {
    if (*used + 1 >= n) return;
    if (*used) {
        snprintf(buf + *used, n - *used, "; ");
        *used = strlen(buf);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + *used, n - *used, fmt, ap);
    va_end(ap);
    *used = strlen(buf);
}

static void eos_str(int64_t eos, char *b, size_t n) {
    if (eos < 0) snprintf(b, n, "none");
    else snprintf(b, n, "%lld", (long long)eos);
}

int dord_state_check(const DataOrder *d, const char *state, int64_t g, char *err, size_t errlen) {
    const char *p = state ? strstr(state, "\"data\":") : NULL;
    DordOptions was = {.order = DORD_SEQUENTIAL, .seed = 0, .eos = -1};
    long long tokens = -1, mb = -1;
    if (p) {
        const char *end = strchr(p, '}');
        if (!end) return errorf(err, errlen, "the checkpoint's data position does not parse");
        char v[64];
        long long x;
        unsigned long long u;
        if (!field(p, end, "order", v, sizeof v) || dord_parse_order(v, &was.order))
            return errorf(err, errlen, "the checkpoint's data position has no order it knows ('%s')", v);
        if (!field(p, end, "seed", v, sizeof v) || !num(v, true, NULL, &u) ||
            !field(p, end, "eos", v, sizeof v) || !num(v, false, &x, NULL))
            return errorf(err, errlen, "the checkpoint's data position lacks a seed or an eos");
        was.seed = u;
        was.eos = x;
        if (!field(p, end, "tokens", v, sizeof v) || !num(v, false, &tokens, NULL) ||
            !field(p, end, "micro_batches", v, sizeof v) || !num(v, false, &mb, NULL))
            return errorf(err, errlen, "the checkpoint's data position lacks tokens or micro_batches");
    }
    char diff[1024] = "", v_rows[32];
    size_t used = 0;
    if (was.order != d->o.order)
        diff_add(diff, sizeof diff, &used, "--data-order: the checkpoint's %s%s, this run's %s", dord_order_name(was.order),
             p ? "" : " (it records no data order: written before --data-order existed)", dord_order_name(d->o.order));
    else if (was.order == DORD_SHUFFLE && was.seed != d->o.seed)
        diff_add(diff, sizeof diff, &used, "--data-seed: the checkpoint's %" PRIu64 ", this run's %" PRIu64, was.seed, d->o.seed);
    if (was.eos != d->o.eos) {
        char a[32], b[32];
        eos_str(was.eos, a, sizeof a);
        eos_str(d->o.eos, b, sizeof b);
        diff_add(diff, sizeof diff, &used, "--eos: the checkpoint's %s, this run's %s", a, b);
    }
    else if (p && was.eos >= 0 && !field(p, strchr(p, '}'), "eos_rows", v_rows, sizeof v_rows))
        diff_add(diff, sizeof diff, &used,
                 "--eos: the checkpoint's rows left out documents of at most T tokens and the tails of longer ones "
                 "(written before they were padded to a row), this run's pad them");
    if (tokens >= 0 && tokens != d->r->ntokens)
        diff_add(diff, sizeof diff, &used, "the data file: the checkpoint's had %lld tokens, %s has %lld", tokens, d->r->path, (long long)d->r->ntokens);
    if (used)
        return errorf(err, errlen,
                    "the checkpoint was trained on another data order (%s): resuming would not continue it; resume with "
                    "the options and data file it was trained with, or use --start-over instead of --resume to train from step 0",
                    diff);
    if (mb >= 0 && mb != g)
        return errorf(err, errlen, "the checkpoint has read %lld global micro-batches, but its step and the plan give %lld",
                    mb, (long long)g);
    return 0;
}
