/* dataorder: which tokens of a token file (runtime/data/tokens.h) each rank's
 * micro-batch reads: the order of the training data, its epochs, document
 * boundaries, and the data position a checkpoint records. Prefix dord_.
 *
 * Rows. A micro-batch of shape [B, T] is B rows; a row is T+1 consecutive
 * tokens (inputs its first T, targets its last T). Global micro-batch g
 * (step s, accumulation a of A: g = s*A + a) on rank r of R reads the
 * global rows
 *     q = (g*R + r)*B + b,   b = 0..B-1
 * so the stream of rows depends only on the file, T and the options below,
 * never on how a global batch is split over ranks, micro-batches or
 * accumulation: R ranks of micro-batch B, one rank of micro-batch R*B and
 * one rank of B with A = R read the same rows in the same order.
 *
 * An epoch is E rows (the layout's rows, below); global row q belongs to
 * epoch e = q / E (counted from 0; printed from 1) at position i = q mod E
 * and reads layout row
 *     sequential: i
 *     shuffle:    dord_permute(seed, e, E, i)
 * so every epoch reads each row once and a shuffled epoch has its own
 * permutation.
 *
 * Layouts (where layout row j starts):
 *   sequential, no EOS: llm.c's windows, exactly as tok_batch reads them:
 *       W = (N-1) / (B*T) windows of B*T+1 tokens, E = W*B rows, row j at
 *       token (j / B mod W)*B*T + (j mod B)*T; a micro-batch is one window.
 *       (Unlike every other layout, E depends on B: 1 rank of R*B and R
 *       ranks of B agree until the walk first wraps.)
 *   shuffle, no EOS: E = (N-1) / T rows, row j at token j*T.
 *   EOS id given (either order): documents. A document ends with an EOS
 *       token (included) or at the end of the file; the next starts just
 *       after it. A document of n >= 2 tokens holds ceil((n-1) / T) rows,
 *       row k of it at its start + k*T: rows start at the document's
 *       start, step T, and never read past its last token, so no row (no
 *       input and no target) crosses a document boundary. The last row of
 *       a document reads what is left of it (a document of at most T
 *       tokens: all of it) and is padded with the EOS id to T+1 tokens,
 *       the padding's targets untrained (TOK_UNTRAINED): every target of
 *       every document trains once an epoch. E is the rows of all
 *       documents, numbered in file order.
 *
 *   packed file (tokens.h, version 4, either order; no EOS): its rows,
 *       E = R, row j at token j*(T+1); the file's T must be the model's.
 *
 * Permutation: a 6-round balanced Feistel network over the smallest 2h-bit
 * domain (4^h >= E) with splitmix64 round functions keyed by (seed, epoch),
 * cycle-walked into [0, E): a bijection of [0, E), O(1) memory, fewer than
 * 4 passes of the network per row on average. The EOS layout keeps the first
 * token, the end and the row count before each document that holds a row
 * (24 bytes a document, made by one scan of the file at open); row j (and
 * the document a row is in) is found by binary search.
 *
 * Errors are one line "PATH: what is wrong" (or "--eos ...") in the
 * caller's buffer; nothing here prints or exits. */
#ifndef ZINF_DATAORDER_H
#define ZINF_DATAORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tokens.h"

typedef enum DordOrder { DORD_SEQUENTIAL, DORD_SHUFFLE } DordOrder;

typedef struct DordOptions {
    DordOrder order;
    uint64_t seed;  /* shuffle only */
    int64_t eos;    /* the end-of-document token id, -1: none */
} DordOptions;

typedef struct DataOrder {
    DordOptions o;
    TokReader *r;            /* read through, not owned */
    int64_t B, T, world;
    bool windows;            /* sequential without EOS: tok_batch's windows */
    bool packed;             /* a packed file (tokens.h, version 4): its rows of T+1 tokens */
    int64_t rows;            /* E: rows of one epoch */
    /* EOS layout: documents holding at least one row, owned */
    int64_t ndocs;
    int64_t *doc_start;      /* [ndocs] first token */
    int64_t *doc_rows;       /* [ndocs + 1] rows before document d */
    int64_t *doc_end;        /* [ndocs] the token after its last */
    /* what the EOS scan saw */
    int64_t docs_all, eos_count, longest;
    int64_t tokens_used;     /* distinct tokens the rows of an epoch cover (not windows) */
    uint32_t *row;           /* one row of T+1 ids, owned */
} DataOrder;

/* i's image under the seeded permutation of [0, n) of epoch `epoch`; -1
 * when i is outside [0, n) or n > 2^62. */
int64_t dord_permute(uint64_t seed, uint64_t epoch, int64_t n, int64_t i);

/* The layout of r's file for micro-batches [B, T] on `world` ranks: checks
 * the EOS id against the reader's vocabulary (and the file's recorded
 * one), scans the documents when an EOS id is given, and refuses a file
 * holding fewer rows than one global micro-batch (B*world rows). 0, or -1
 * with err (and nothing to free). */
int dord_open(DataOrder *d, TokReader *r, const DordOptions *o, int64_t B, int64_t T, int world, char *err,
              size_t errlen);
void dord_close(DataOrder *d);

/* Token where layout row j (0 <= j < rows) starts; -1 when out of range. */
int64_t dord_row_start(const DataOrder *d, int64_t j);
/* Token where global row q starts (its epoch's order applied); -1 when q < 0. */
int64_t dord_global_row_start(const DataOrder *d, int64_t q);
/* The micro-batch of rank `rank` at global micro-batch g into tokens[B*T]
 * and targets[B*T] (TOK_UNTRAINED at untrained targets). 0, or -1 with err. */
int dord_batch(DataOrder *d, int rank, int64_t g, int32_t *tokens, int32_t *targets, char *err, size_t errlen);
/* Where each input's sample begins in its row (tokens.h, "Packed rows"),
 * for the micro-batch dord_batch reads: seg[b*T + t] for row b, input t;
 * all 0 for a file that is not packed (a row is one sample). 0, or -1
 * with err. */
int dord_segments(DataOrder *d, int rank, int64_t g, int32_t *seg, char *err, size_t errlen);
/* The trained targets (tokens.h, "Targets") of global micro-batch g on
 * every rank together: what each rank can count from the file before the
 * step, so that the step's loss is the mean over the trained targets of
 * the whole global batch without a collective. B*T*world for a file
 * without a mask. The count, or -1 with err. */
int64_t dord_trained(DataOrder *d, int64_t g, char *err, size_t errlen);
/* The epoch (from 0) that global micro-batch g starts in. */
int64_t dord_epoch(const DataOrder *d, int64_t g);
/* Epochs read after the first g global micro-batches (g*world*B / rows). */
double dord_epochs_read(const DataOrder *d, int64_t g);

/* "sequential", "shuffle"; dord_parse_order: 0, or -1 for another word. */
const char *dord_order_name(DordOrder o);
int dord_parse_order(const char *s, DordOrder *o);

/* The data position after `g` global micro-batches as a JSON object for a
 * checkpoint's run state:
 *   {"order": "shuffle", "seed": 7, "eos": -1, "tokens": N,
 *    "micro_batches": g, "epoch": e}
 * (epoch: of the next micro-batch, from 1; with an EOS id also
 * "eos_rows": "padded", the layout above: a checkpoint without it was
 * written when short documents were left out, and is refused). Returns snprintf's count. */
int dord_state_json(const DataOrder *d, int64_t g, char *buf, size_t n);
/* Checks a checkpoint's run state (the manifest's state object, which
 * holds the JSON above under "data", or none when written before data
 * orders existed: then sequential, no EOS) against this run's options and
 * file, and that its micro-batch counter is g. 0, or -1 with err naming
 * every difference. */
int dord_state_check(const DataOrder *d, const char *state, int64_t g, char *err, size_t errlen);

#endif
