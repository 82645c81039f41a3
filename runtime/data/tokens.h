/* tokens: training data as token files, the llm.c / nanoGPT .bin layout:
 *   header: 256 little-endian int32: [0] magic 20240520, [1] version,
 *           [2] token count N, [3] vocabulary size (0: not recorded),
 *           [4], [5] the tokenizer's fingerprint, low and high 32 bits
 *           (0: not recorded; zinftok --tokenizer records it, so that a
 *           run can tell a file made by another tokenizer of the same
 *           vocabulary size), version 3 only: [6] bytes per id, 2 or 4,
 *           [7] trained tokens M, version 4 only: [6], [7] as version 3
 *           and [8] the row length T of a packed file, [9] its rows R,
 *           [10] its samples S; the rest zero
 *   body:   N little-endian token ids: version 1 uint16 (llm.c's own
 *           files), version 2 uint32 (written when the vocabulary has more
 *           than 65536 ids, which llm.c's readers refuse by its version),
 *           version 3 uint16 or uint32 as [6] says
 *   mask:   version 3 only: ceil(N/8) bytes after the ids, bit i (bit i%8,
 *           least significant first, of byte i/8) set when token i is
 *           trained: the loss counts predicting it from the tokens before
 *           it. M bits are set; the bits past N are zero.
 *   rows:   version 4 only (a packed file: samples packed into rows, see
 *           "Packed rows" below): after the mask, R+1 int32 row offsets
 *           (row i's samples are entries first[i]..first[i+1]-1; first[0]
 *           = 0, first[R] = S) then S int32 sample starts, each the token
 *           of its row (0..T) where the sample begins; a row's first
 *           sample begins at 0 and its starts increase.
 * so a valid file is exactly 1024 + 2*N (version 1), 1024 + 4*N
 * (version 2), 1024 + width*N + ceil(N/8) (version 3) or that plus
 * 4*(R+1+S) (version 4) bytes. Versions 1 and 2 train every token. Instruction data (a prompt and its answer,
 * labels -100 in transformers' terms) is a version 3 file whose prompt
 * tokens are untrained; zinftok writes it from JSONL. docs/huggingface.md
 * ("Tokenizers", "Instruction data") describes it.
 *
 * Packed rows (version 4, zinftok --pack T). The file is R rows of T+1
 * tokens (N = R*(T+1)): each row holds whole samples one after another,
 * then padding (untrained) up to T+1 tokens. A row's inputs are its first
 * T tokens and its targets the same shifted by one, as any row (see
 * dataorder.h); the first token of every sample is untrained, so that no
 * target is predicted across a sample's start. A model trained on such a
 * row keeps each sample's attention inside the sample and counts its
 * positions from the sample's start: the loss and gradients of a row are
 * those of its samples run one by one. The padding after the last sample
 * belongs to it (it attends only backwards and trains nothing).
 *
 * Targets. A target whose token is untrained reads TOK_UNTRAINED (-1)
 * in every targets array filled here and in dataorder.h; cross_entropy
 * counts neither its loss nor its gradient.
 *
 * Batches. A micro-batch is one window of B*T+1 consecutive tokens;
 * inputs are its first B*T tokens (row-major [B, T]) and targets the same
 * shifted by one. Windows start at multiples of B*T, so the file holds
 *     W = (N - 1) / (B*T)
 * windows whose inputs are disjoint. Window number m starts at token
 *     offset(m) = (m mod W) * B*T
 * and micro-batch g (counted over the run: step s, accumulation a of A
 * gives g = s*A + a) of rank r of R is window m = g*R + r. So the ranks of
 * one global batch read R different, disjoint windows (R <= W is
 * required), consecutive micro-batches walk the file in order, and after W
 * windows the walk wraps to the start: a pure function of its arguments,
 * the same on every run and every rank. This is zinfrun's default order;
 * runtime/data/dataorder.h chooses the rows of every other one (--data-order
 * shuffle, --eos).
 *
 * Errors are returned as one line "PATH: what is wrong" in the caller's
 * buffer, e.g.
 *   train.bin: bad magic 0x1234 (expected 20240520): not a token file */
#ifndef ZINF_TOKENS_H
#define ZINF_TOKENS_H

#include <stddef.h>
#include <stdint.h>

enum {
    TOK_MAGIC = 20240520,
    TOK_VERSION = 1,    /* uint16 ids */
    TOK_VERSION32 = 2,  /* uint32 ids */
    TOK_VERSION_MASKED = 3, /* uint16 or uint32 ids, then the trained-token mask */
    TOK_VERSION_PACKED = 4, /* version 3 and the packed rows' sample starts */
    TOK_HEADER_INTS = 256,
    TOK_HEADER_BYTES = 1024,
};
#define TOK_MAX_VOCAB16 65536
/* The target of an untrained token (see "Targets" above). */
#define TOK_UNTRAINED (-1)

typedef struct TokReader {
    int fd;
    char path[512];
    int64_t ntokens;
    int64_t vocab;      /* 0: token ids unchecked */
    int64_t file_vocab; /* header[3]: the vocabulary the file was made for, 0: not recorded */
    uint64_t tokenizer; /* header[4..5]: the fingerprint of the tokenizer that made it, 0: not recorded */
    int width;          /* bytes per id: 2 (version 1) or 4 (version 2); version 3 says */
    int version;
    int64_t ntrained;   /* tokens trained: the header's M (version 3), else ntokens */
    uint8_t *bits;      /* one window's mask bytes, owned by the reader */
    size_t bits_cap;
    unsigned char *buf; /* one window, owned by the reader */
    size_t buf_cap;     /* in bytes */
    /* a packed file (version 4); pack_T 0: not packed */
    int64_t pack_T, pack_rows, pack_samples;
    int32_t *row_first;     /* [pack_rows + 1], owned */
    int32_t *sample_start;  /* [pack_samples], owned */
} TokReader;

/* Open and validate a token file (magic, version, count against the file
 * size, a recorded vocabulary no larger than vocab). vocab > 0 makes every
 * read check ids < vocab. Returns 0, or -1 with the message in
 * err[errlen]. */
int tok_open(TokReader *r, const char *path, int64_t vocab, char *err, size_t errlen);
void tok_close(TokReader *r);

/* Number of windows W of B*T+1 tokens in ntokens (see above); 0 when too
 * short or B, T < 1. */
int64_t tok_windows(int64_t ntokens, int64_t B, int64_t T);
/* Token index where window m starts; -1 when W = 0 or m < 0. */
int64_t tok_window_offset(int64_t ntokens, int64_t m, int64_t B, int64_t T);

/* Window m into tokens[B*T] and targets[B*T] (TOK_UNTRAINED where the
 * target's token is untrained). Returns 0, or -1 with err (file too short
 * for one window, token id >= vocab, read error). */
int tok_window(TokReader *r, int64_t m, int64_t B, int64_t T, int32_t *tokens, int32_t *targets,
               char *err, size_t errlen);
/* The micro-batch of rank of world at global micro-batch index g: window
 * g*world + rank. Also fails when the file holds fewer than world windows. */
int tok_batch(TokReader *r, int rank, int world, int64_t g, int64_t B, int64_t T, int32_t *tokens,
              int32_t *targets, char *err, size_t errlen);

/* Tokens [off, off+n) of the file into ids[n] (ids checked against the
 * reader's vocab). Returns 0, or -1 with err. */
int tok_read(TokReader *r, int64_t off, int64_t n, uint32_t *ids, char *err, size_t errlen);

/* Whether tokens [off, off+n) are trained, one byte each (1 trained, 0
 * not) into trained[n]: the file's mask (version 3), else all 1. Returns
 * 0, or -1 with err. */
int tok_read_trained(TokReader *r, int64_t off, int64_t n, uint8_t *trained, char *err, size_t errlen);
/* targets[i] = TOK_UNTRAINED where token off+i is untrained, i < n (the
 * rest left as they are). 0, or -1 with err. */
int tok_mask_targets(TokReader *r, int64_t off, int64_t n, int32_t *targets, char *err, size_t errlen);
/* How many of tokens [off, off+n) are trained; -1 with err. */
int64_t tok_count_trained(TokReader *r, int64_t off, int64_t n, char *err, size_t errlen);
/* Every id of the file against the reader's vocab, in one pass of
 * reads (a bad id found at start, not at the step that reads it).
 * Returns 0, or -1 with tok_read's message for the first bad id. */
int tok_check_ids(TokReader *r, char *err, size_t errlen);

/* Packed file: the inputs of row `row` (0 <= row < pack_rows) into
 * seg[T]: seg[t] the token of the row where the sample holding input t
 * begins (0 <= seg[t] <= t). 0, or -1 with err (not a packed file, row
 * out of range). */
int tok_row_segments(const TokReader *r, int64_t row, int32_t *seg, char *err, size_t errlen);

/* Write n tokens to path atomically: a temporary file beside it, fsync,
 * rename over path, fsync of the directory. n must fit the int32 count.
 * Version 1, vocabulary not recorded. Returns 0, or -1 with err (and no
 * file left behind). */
int tok_write(const char *path, const uint16_t *tokens, int64_t n, char *err, size_t errlen);
/* The same for ids of a vocabulary of `vocab` ids (1..2^31-1), recorded
 * in the header: version 1 when vocab <= 65536, else version 2. Every id
 * must be below vocab. */
int tok_write_ids(const char *path, const uint32_t *ids, int64_t n, int64_t vocab, char *err, size_t errlen);
/* The same, recording the fingerprint of the tokenizer that made the ids
 * (hftok_fingerprint; 0: none). */
int tok_write_ids_of(const char *path, const uint32_t *ids, int64_t n, int64_t vocab, uint64_t tokenizer, char *err,
                     size_t errlen);
/* The same with trained[n] (0: untrained, else trained): version 3 (ids
 * of 2 bytes when vocab <= 65536, else 4) when some token is untrained,
 * else exactly what tok_write_ids_of writes. */
int tok_write_masked(const char *path, const uint32_t *ids, const uint8_t *trained, int64_t n, int64_t vocab,
                     uint64_t tokenizer, char *err, size_t errlen);

/* A packed file (version 4): rows*(T+1) ids and their trained[] (the
 * first token of each sample and the padding already untrained), the
 * rows' sample offsets row_first[rows+1] and starts[nsamples] as the
 * layout above says (checked). */
int tok_write_packed(const char *path, const uint32_t *ids, const uint8_t *trained, int64_t rows, int64_t T,
                     const int32_t *row_first, const int32_t *starts, int64_t nsamples, int64_t vocab,
                     uint64_t tokenizer, char *err, size_t errlen);

#endif
