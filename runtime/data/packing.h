/* packing: samples packed into rows of T+1 tokens for a packed token file
 * (tokens.h, version 4, "Packed rows"): what zinftok --pack T writes.
 * Prefix pack_.
 *
 * Which samples share a row: best fit decreasing. The samples are taken
 * longest first (samples of one length in an order drawn from the seed),
 * each into the open row it fills the most (the one with the least room
 * that still holds it; a new row when none does). Then the rows are put
 * in an order drawn from the seed, and each row holds its samples in the
 * order of the input. The same samples and seed give the same file.
 * On lengths spread around an eighth of a row it leaves a few percent of
 * the row tokens to padding (tests/bench: pack efficiency).
 *
 * In a row, every sample's first token is untrained (its target would be
 * predicted from the sample before), and the padding after the last
 * sample (the pad id) is untrained. A sample longer than T+1 tokens is an
 * error: cut samples first (zinftok --max-tokens).
 *
 * Errors are one line in the caller's buffer; nothing here prints. */
#ifndef ZINF_PACKING_H
#define ZINF_PACKING_H

#include <stddef.h>
#include <stdint.h>

/* Rows of samples: row i holds samples sample[first[i] .. first[i+1]-1]
 * (indices into the input, increasing). */
typedef struct PackPlan {
    int64_t rows, samples;
    int64_t *first;  /* [rows + 1], owned */
    int64_t *sample; /* [samples], owned */
} PackPlan;
void pack_plan_free(PackPlan *p);

/* The rows of capacity `cap` tokens for samples of len[n] tokens (each 1..cap).
 * 0, or -1 with err (a sample longer than cap, out of memory). */
int pack_best_fit(const int64_t *len, int64_t n, int64_t cap, uint64_t seed, PackPlan *out, char *err, size_t errlen);

/* The packed file's content: rows*(T+1) ids and trained flags, the rows'
 * sample offsets and starts (tokens.h's table) and the real (not
 * padding) tokens. */
typedef struct PackRows {
    int64_t T, rows, samples, real;
    uint32_t *ids;
    uint8_t *trained;
    int32_t *row_first; /* [rows + 1] */
    int32_t *starts;    /* [samples] */
} PackRows;
void pack_rows_free(PackRows *r);

/* Samples given as one stream ids[ntok] and trained[ntok] cut at
 * ends[nsamples] (sample k is [ends[k-1], ends[k]), ends[-1] = 0),
 * packed into rows of T+1 tokens, the padding pad_id. 0, or -1 with err
 * ("sample K (of N) has L tokens, more than a row of T+1 = ...").
 * Samples of no token are left out. */
int pack_samples(const uint32_t *ids, const uint8_t *trained, const size_t *ends, int64_t nsamples, int64_t T,
                 uint32_t pad_id, uint64_t seed, PackRows *out, char *err, size_t errlen);

/* real / (rows * (T+1)): the share of the row tokens that are samples. */
double pack_efficiency(const PackRows *r);

#endif
