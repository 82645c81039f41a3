/* packing: best-fit decreasing rows of samples; see packing.h. */
#include "packing.h"
#include "errorf.h"

#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void pack_plan_free(PackPlan *p) {
    free(p->first);
    free(p->sample);
    memset(p, 0, sizeof *p);
}

void pack_rows_free(PackRows *r) {
    free(r->ids);
    free(r->trained);
    free(r->row_first);
    free(r->starts);
    memset(r, 0, sizeof *r);
}

/* The order samples are placed in: longest first, ties by a seeded key. */
typedef struct Key {
    int64_t len;
    uint64_t tie;
    int64_t i;
} Key;

static int key_cmp(const void *a, const void *b) {
    const Key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    if (x->tie != y->tie) return x->tie < y->tie ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Counts of open rows by room left (a Fenwick tree over 1..cap): the
 * smallest room at least L that some row has. */
typedef struct Rooms {
    int64_t n, *tree;
} Rooms;

static void rooms_add(Rooms *f, int64_t room, int64_t d) {
    for (int64_t i = room; i <= f->n; i += i & -i) f->tree[i] += d;
}

static int64_t rooms_prefix(const Rooms *f, int64_t room) {
    int64_t s = 0;
    for (int64_t i = room; i > 0; i -= i & -i) s += f->tree[i];
    return s;
}

/* The smallest room >= L with a row, 0 when none. */
static int64_t rooms_find(const Rooms *f, int64_t L) {
    int64_t want = rooms_prefix(f, L - 1) + 1, pos = 0, step = 1;
    while (step * 2 <= f->n) step *= 2;
    for (; step; step /= 2)
        if (pos + step <= f->n && f->tree[pos + step] < want) {
            pos += step;
            want -= f->tree[pos];
        }
    return pos + 1 <= f->n ? pos + 1 : 0;
}

int pack_best_fit(const int64_t *len, int64_t n, int64_t cap, uint64_t seed, PackPlan *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (cap < 1) return errorf(err, errlen, "a row of %lld tokens holds nothing", (long long)cap);
    for (int64_t i = 0; i < n; i++)
        if (len[i] < 1 || len[i] > cap)
            return errorf(err, errlen, "sample %lld (of %lld) has %lld tokens, %s", (long long)i + 1, (long long)n,
                          (long long)len[i], len[i] < 1 ? "none to pack" : "more than a row holds");
    Key *keys = malloc(sizeof *keys * (size_t)(n ? n : 1));
    int64_t *row_of = malloc(sizeof *row_of * (size_t)(n ? n : 1)), *room = malloc(sizeof *room * (size_t)(n ? n : 1));
    int64_t *head = malloc(sizeof *head * (size_t)(cap + 1)), *next = malloc(sizeof *next * (size_t)(n ? n : 1));
    Rooms f = {cap, calloc((size_t)cap + 1, sizeof(int64_t))};
    int rc = 0;
    if (!keys || !row_of || !room || !head || !next || !f.tree) {
        rc = errorf(err, errlen, "out of memory packing %lld samples", (long long)n);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) keys[i] = (Key){len[i], splitmix64(seed ^ splitmix64((uint64_t)i)), i};
    qsort(keys, (size_t)n, sizeof *keys, key_cmp);
    for (int64_t r = 0; r <= cap; r++) head[r] = -1;
    /* rows with the same room form a stack (head[room], next[row]) */
    int64_t rows = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t L = keys[k].len, r = rooms_find(&f, L), row;
        if (r) {
            row = head[r];
            head[r] = next[row];
            rooms_add(&f, r, -1);
        } else {
            row = rows++;
            room[row] = cap;
        }
        row_of[keys[k].i] = row;
        room[row] -= L;
        if (room[row] > 0) {
            next[row] = head[room[row]];
            head[room[row]] = row;
            rooms_add(&f, room[row], 1);
        }
    }
    /* the rows in a seeded order: Fisher-Yates over their numbers */
    int64_t *perm = room; /* room is no longer needed */
    for (int64_t i = 0; i < rows; i++) perm[i] = i;
    for (int64_t i = rows - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix64(seed * 0x2545f4914f6cdd1dull + (uint64_t)i) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t *place = next; /* old row number -> its place */
    for (int64_t i = 0; i < rows; i++) place[perm[i]] = i;
    out->rows = rows;
    out->samples = n;
    out->first = calloc((size_t)rows + 1, sizeof *out->first);
    out->sample = malloc(sizeof *out->sample * (size_t)(n ? n : 1));
    if (!out->first || !out->sample) {
        rc = errorf(err, errlen, "out of memory packing %lld samples", (long long)n);
        pack_plan_free(out);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) out->first[place[row_of[i]] + 1]++;
    for (int64_t i = 0; i < rows; i++) out->first[i + 1] += out->first[i];
    /* samples in input order: each row's in increasing order */
    int64_t *at = malloc(sizeof *at * (size_t)(rows ? rows : 1));
    if (!at) {
        rc = errorf(err, errlen, "out of memory packing %lld samples", (long long)n);
        pack_plan_free(out);
        goto done;
    }
    for (int64_t i = 0; i < rows; i++) at[i] = out->first[i];
    for (int64_t i = 0; i < n; i++) out->sample[at[place[row_of[i]]]++] = i;
    free(at);
done:
    free(keys);
    free(row_of);
    free(room);
    free(head);
    free(next);
    free(f.tree);
    return rc;
}

int pack_samples(const uint32_t *ids, const uint8_t *trained, const size_t *ends, int64_t nsamples, int64_t T,
                 uint32_t pad_id, uint64_t seed, PackRows *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (T < 1) return errorf(err, errlen, "--pack %lld: a row needs T of 1 or more", (long long)T);
    int64_t cap = T + 1;
    int64_t *len = malloc(sizeof *len * (size_t)(nsamples ? nsamples : 1));
    int64_t *from = malloc(sizeof *from * (size_t)(nsamples ? nsamples : 1));
    if (!len || !from) {
        free(len);
        free(from);
        return errorf(err, errlen, "out of memory packing %lld samples", (long long)nsamples);
    }
    int64_t m = 0; /* samples with tokens */
    for (int64_t k = 0; k < nsamples; k++) {
        size_t s = k ? ends[k - 1] : 0;
        int64_t l = (int64_t)(ends[k] - s);
        if (l > cap) {
            free(len);
            free(from);
            return errorf(err, errlen,
                          "sample %lld (of %lld) has %lld tokens, more than a row of T+1 = %lld: cut the samples to "
                          "fit (JSONL samples: --max-tokens %lld)",
                          (long long)k + 1, (long long)nsamples, (long long)l, (long long)cap, (long long)cap);
        }
        if (l == 0) continue;
        len[m] = l;
        from[m++] = (int64_t)s;
    }
    PackPlan plan;
    int rc = pack_best_fit(len, m, cap, seed, &plan, err, errlen);
    if (rc) {
        free(len);
        free(from);
        return -1;
    }
    out->T = T;
    out->rows = plan.rows;
    out->samples = m;
    size_t ntok = (size_t)(plan.rows * cap);
    out->ids = malloc(sizeof *out->ids * (ntok ? ntok : 1));
    out->trained = calloc(ntok ? ntok : 1, 1);
    out->row_first = malloc(sizeof *out->row_first * (size_t)(plan.rows + 1));
    out->starts = malloc(sizeof *out->starts * (size_t)(m ? m : 1));
    if (!out->ids || !out->trained || !out->row_first || !out->starts || plan.rows * cap > INT32_MAX) {
        rc = errorf(err, errlen, "%lld rows of T+1 = %lld tokens: %s", (long long)plan.rows, (long long)cap,
                    plan.rows * cap > INT32_MAX ? "more than a token file holds" : "out of memory");
        pack_rows_free(out);
    } else {
        for (int64_t i = 0; i < plan.rows; i++) {
            uint32_t *row = out->ids + i * cap;
            uint8_t *tr = out->trained + i * cap;
            int64_t used = 0;
            out->row_first[i] = (int32_t)plan.first[i];
            for (int64_t j = plan.first[i]; j < plan.first[i + 1]; j++) {
                int64_t k = plan.sample[j];
                out->starts[j] = (int32_t)used;
                memcpy(row + used, ids + from[k], sizeof *row * (size_t)len[k]);
                for (int64_t t = 0; t < len[k]; t++) tr[used + t] = t > 0 && trained[from[k] + t];
                used += len[k];
            }
            out->real += used;
            for (int64_t t = used; t < cap; t++) row[t] = pad_id;
        }
        out->row_first[plan.rows] = (int32_t)m;
    }
    pack_plan_free(&plan);
    free(len);
    free(from);
    return rc;
}

double pack_efficiency(const PackRows *r) {
    return r->rows ? (double)r->real / ((double)r->rows * (double)(r->T + 1)) : 0;
}
