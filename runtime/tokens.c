#include "tokens.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt.h"

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

int tok_open(TokReader *r, const char *path, int64_t vocab, char *err, size_t n) {
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    r->vocab = vocab;
    r->f = fopen(path, "rb");
    if (!r->f) return fail(err, n, "%s: cannot open the data file: %s", path, strerror(errno));
    unsigned char h[TOK_HEADER_INTS * 4];
    size_t got = fread(h, 1, sizeof h, r->f);
    if (got < sizeof h) {
        tok_close(r);
        return fail(err, n, "%s: %zu bytes, shorter than the %zu-byte header of a token file", path, got, sizeof h);
    }
    int32_t magic = le32(h), version = le32(h + 4), count = le32(h + 8);
    if (magic != TOK_MAGIC) {
        tok_close(r);
        return fail(err, n, "%s: bad magic %d (expected %d): not a token file (make one with zinftok)", path, magic, TOK_MAGIC);
    }
    if (version != TOK_VERSION) {
        tok_close(r);
        return fail(err, n, "%s: token file version %d; this zinfrun reads version %d", path, version, TOK_VERSION);
    }
    struct stat st;
    if (fstat(fileno(r->f), &st) != 0) {
        tok_close(r);
        return fail(err, n, "%s: %s", path, strerror(errno));
    }
    int64_t expect = (int64_t)sizeof h + 2 * (int64_t)count;
    if (count < 0 || (int64_t)st.st_size != expect) {
        tok_close(r);
        return fail(err, n, "%s: the header says %d tokens (%lld bytes) but the file has %lld bytes: truncated or corrupt",
                    path, count, (long long)expect, (long long)st.st_size);
    }
    r->ntokens = count;
    return 0;
}

void tok_close(TokReader *r) {
    if (r->f) fclose(r->f);
    r->f = NULL;
}

int tok_window(TokReader *r, int64_t m, int64_t B, int64_t T, int32_t *tokens, int32_t *targets, char *err, size_t n) {
    int64_t need = B * T + 1;
    if (r->ntokens < need + 1)
        return fail(err, n, "%s: %lld tokens, too few for one micro-batch of %lld x %lld (+1) tokens", r->path,
                    (long long)r->ntokens, (long long)B, (long long)T);
    int64_t span = r->ntokens - need;
    int64_t start = (int64_t)(((__int128)m * (B * T)) % span);
    uint16_t buf[4096];
    int64_t done = 0;
    if (fseeko(r->f, (off_t)(TOK_HEADER_INTS * 4 + 2 * start), SEEK_SET) != 0)
        return fail(err, n, "%s: seek failed: %s", r->path, strerror(errno));
    int32_t prev = 0;
    while (done < need) {
        int64_t k = need - done < 4096 ? need - done : 4096;
        if (fread(buf, 2, (size_t)k, r->f) != (size_t)k)
            return fail(err, n, "%s: read failed at token %lld: %s", r->path, (long long)(start + done),
                        ferror(r->f) ? strerror(errno) : "unexpected end of file");
        for (int64_t i = 0; i < k; i++) {
            int32_t v = (int32_t)(uint16_t)(((const unsigned char *)buf)[2 * i] | ((const unsigned char *)buf)[2 * i + 1] << 8);
            if (r->vocab > 0 && v >= r->vocab)
                return fail(err, n, "%s: token %d at position %lld is outside the model's vocabulary of %lld", r->path, v,
                            (long long)(start + done + i), (long long)r->vocab);
            int64_t j = done + i;
            if (j < need - 1) tokens[j] = v;
            if (j > 0) targets[j - 1] = v;
            prev = v;
        }
        done += k;
    }
    (void)prev;
    return 0;
}

int tok_batch(TokReader *r, int rank, int world, int64_t g, int64_t B, int64_t T, int32_t *tokens, int32_t *targets,
              char *err, size_t n) {
    return tok_window(r, g * world + rank, B, T, tokens, targets, err, n);
}

int tok_write(const char *path, const uint16_t *tokens, int64_t ntok, char *err, size_t n) {
    if (ntok > INT32_MAX) return fail(err, n, "%s: %lld tokens do not fit the format's 32-bit count", path, (long long)ntok);
    unsigned char h[TOK_HEADER_INTS * 4];
    memset(h, 0, sizeof h);
    int32_t v[3] = {TOK_MAGIC, TOK_VERSION, (int32_t)ntok};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++) h[4 * i + b] = (unsigned char)((uint32_t)v[i] >> (8 * b));
    const void *parts[2] = {h, tokens};
    size_t lens[2] = {sizeof h, (size_t)ntok * 2};
    return ckpt_write_file_atomic(path, parts, lens, 2, err, n);
}
