/* tokens: training data in the llm.c / nanoGPT token-file layout.
 *
 * A file is a header of 256 little-endian int32 — [0] magic 20240520,
 * [1] version 1, [2] the token count N — then N uint16 tokens. The reader
 * validates the header against the file's size and the model's vocabulary,
 * and serves micro-batches by a fixed formula, so every rank reads its own
 * disjoint windows in a deterministic order:
 *
 *   window w of B*T+1 consecutive tokens starts at token
 *       (w * B * T) mod (N - B*T - 1)
 *   micro-batch number m (counted over the whole run, all ranks: step s,
 *   accumulation a of A, rank r of R gives m = (s*A + a)*R + r) is window m;
 *   inputs are its first B*T tokens, targets the same shifted by one.
 *
 * With R ranks the global batch of a step is windows sR..sR+R-1: exactly
 * what one rank with micro-batch R*B would read as its rows (row-major),
 * so data parallelism changes nothing but who computes what. */
#ifndef ZINF_TOKENS_H
#define ZINF_TOKENS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { TOK_MAGIC = 20240520, TOK_VERSION = 1, TOK_HEADER_INTS = 256 };

typedef struct TokReader {
    FILE *f;
    char path[512];
    int64_t ntokens;
    int64_t vocab;      /* 0: unchecked */
} TokReader;

/* Opens and validates a token file; vocab > 0 checks every token read. */
int tok_open(TokReader *r, const char *path, int64_t vocab, char *err, size_t errlen);
void tok_close(TokReader *r);
/* Micro-batch number m (see above) of B rows of T tokens. */
int tok_window(TokReader *r, int64_t m, int64_t B, int64_t T, int32_t *tokens, int32_t *targets, char *err, size_t errlen);
/* The micro-batch of rank r of R at global micro-batch index g (= s*A + a). */
int tok_batch(TokReader *r, int rank, int world, int64_t g, int64_t B, int64_t T, int32_t *tokens, int32_t *targets,
              char *err, size_t errlen);
/* Writes a token file atomically (temp name, fsync, rename). */
int tok_write(const char *path, const uint16_t *tokens, int64_t n, char *err, size_t errlen);

#endif
