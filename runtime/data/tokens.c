/* tokens: token-file reader and atomic writer; see tokens.h. */
#include "tokens.h"
#include "errorf.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* Read exactly n bytes at off; returns bytes read (< n at end of file) or -1. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, off + (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* A packed file's sample table (after the mask), read whole and checked:
 * a corrupt table is refused here, not met at the step that reads it. */
static int read_rows(TokReader *r, const int32_t *h, char *err, size_t errlen) {
    int64_t T = h[8], R = h[9], S = h[10];
    r->pack_T = T, r->pack_rows = R, r->pack_samples = S;
    r->row_first = malloc((size_t)(R + 1) * sizeof *r->row_first);
    r->sample_start = malloc((size_t)(S ? S : 1) * sizeof *r->sample_start);
    if (!r->row_first || !r->sample_start)
        return errorf(err, errlen, "%s: out of memory for the sample table of %lld rows", r->path, (long long)R);
    off_t pos = (off_t)TOK_HEADER_BYTES + (off_t)r->ntokens * r->width + (off_t)((r->ntokens + 7) / 8);
    size_t a = (size_t)(R + 1) * 4, b = (size_t)S * 4;
    if (pread_full(r->fd, r->row_first, a, pos) != (ssize_t)a ||
        pread_full(r->fd, r->sample_start, b, pos + (off_t)a) != (ssize_t)b)
        return errorf(err, errlen, "%s: cannot read the sample table of the packed rows", r->path);
    if (r->row_first[0] != 0 || r->row_first[R] != S)
        return errorf(err, errlen, "%s: corrupt sample table: the row offsets run from %d to %d, expected 0 to %lld",
                      r->path, r->row_first[0], r->row_first[R], (long long)S);
    for (int64_t i = 0; i < R; i++) {
        int32_t f = r->row_first[i], l = r->row_first[i + 1];
        if (l <= f || l > S)
            return errorf(err, errlen, "%s: corrupt sample table: row %lld has samples %d..%d (of %lld)", r->path,
                          (long long)i, f, l - 1, (long long)S);
        for (int32_t k = f; k < l; k++) {
            int32_t st = r->sample_start[k];
            bool bad = k == f ? st != 0 : st <= r->sample_start[k - 1] || st > T;
            if (bad)
                return errorf(err, errlen,
                              "%s: corrupt sample table: row %lld's sample %d starts at token %d (starts run from 0 "
                              "upwards, below T+1 = %lld)",
                              r->path, (long long)i, k - f, st, (long long)T + 1);
        }
    }
    return 0;
}

int tok_row_segments(const TokReader *r, int64_t row, int32_t *seg, char *err, size_t errlen) {
    if (!r->pack_T) return errorf(err, errlen, "%s: not a packed token file", r->path);
    if (row < 0 || row >= r->pack_rows)
        return errorf(err, errlen, "%s: row %lld is outside the file's %lld packed rows", r->path, (long long)row,
                      (long long)r->pack_rows);
    int32_t k = r->row_first[row], last = r->row_first[row + 1] - 1;
    for (int64_t t = 0; t < r->pack_T; t++) {
        while (k < last && r->sample_start[k + 1] <= t) k++;
        seg[t] = r->sample_start[k];
    }
    return 0;
}

int tok_open(TokReader *r, const char *path, int64_t vocab, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    if (vocab < 0 || vocab > INT32_MAX)
        return errorf(err, errlen, "%s: vocabulary size %lld is not 0 (unchecked) or 1..%d", path, (long long)vocab,
                    INT32_MAX);
    snprintf(r->path, sizeof r->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errorf(err, errlen, "%s: cannot open token file: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int no = errno;
        close(fd);
        return errorf(err, errlen, "%s: cannot stat token file: %s", path, strerror(no));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return errorf(err, errlen, "%s: not a regular file", path);
    }
    int32_t h[TOK_HEADER_INTS];
    ssize_t got = pread_full(fd, h, sizeof h, 0);
    if (got < 0) {
        int no = errno;
        close(fd);
        return errorf(err, errlen, "%s: cannot read header: %s", path, strerror(no));
    }
    if ((size_t)got < sizeof h) {
        close(fd);
        return errorf(err, errlen, "%s: truncated header: the file has %lld bytes, a token file starts with a %d-byte header",
                    path, (long long)got, TOK_HEADER_BYTES);
    }
    if (h[0] != TOK_MAGIC) {
        close(fd);
        return errorf(err, errlen, "%s: bad magic 0x%x (expected %d): not a token file", path, (unsigned)h[0], TOK_MAGIC);
    }
    if (h[1] != TOK_VERSION && h[1] != TOK_VERSION32 && h[1] != TOK_VERSION_MASKED && h[1] != TOK_VERSION_PACKED) {
        close(fd);
        return errorf(err, errlen,
                      "%s: unsupported version %d (expected %d: uint16 tokens, %d: uint32 tokens, %d: tokens with a "
                      "trained-token mask, or %d: packed rows)",
                      path, h[1], TOK_VERSION, TOK_VERSION32, TOK_VERSION_MASKED, TOK_VERSION_PACKED);
    }
    int width = h[1] == TOK_VERSION ? 2 : 4;
    bool masked = h[1] == TOK_VERSION_MASKED || h[1] == TOK_VERSION_PACKED;
    if (masked) {
        width = h[6];
        if (width != 2 && width != 4) {
            close(fd);
            return errorf(err, errlen, "%s: version %d header says %d bytes per token id (expected 2 or 4)", path, h[1],
                          h[6]);
        }
        if (h[2] >= 0 && (h[7] < 0 || h[7] > h[2])) {
            close(fd);
            return errorf(err, errlen, "%s: the header says %d trained tokens of %d", path, h[7], h[2]);
        }
    }
    if (h[3] < 0) {
        close(fd);
        return errorf(err, errlen, "%s: negative vocabulary size %d in the header", path, h[3]);
    }
    if (vocab > 0 && h[3] > vocab) {
        close(fd);
        return errorf(err, errlen, "%s: made for a vocabulary of %d ids, more than the %lld expected", path, h[3],
                    (long long)vocab);
    }
    if (h[2] < 0) {
        close(fd);
        return errorf(err, errlen, "%s: negative token count %d in the header", path, h[2]);
    }
    int64_t want = TOK_HEADER_BYTES + width * (int64_t)h[2];
    if (masked) want += ((int64_t)h[2] + 7) / 8;
    if (h[1] == TOK_VERSION_PACKED) {
        if (h[8] < 1 || h[9] < 0 || h[10] < h[9] || (int64_t)h[9] * (h[8] + 1) != h[2]) {
            close(fd);
            return errorf(err, errlen,
                          "%s: corrupt packed header: %d rows of T+1 = %lld tokens and %d samples for %d tokens", path,
                          h[9], (long long)h[8] + 1, h[10], h[2]);
        }
        want += 4 * ((int64_t)h[9] + 1 + h[10]);
    }
    if ((int64_t)st.st_size != want) {
        close(fd);
        return errorf(err, errlen, "%s: %s: the header says %d tokens (%lld bytes) but the file has %lld bytes", path,
                    (int64_t)st.st_size < want ? "truncated" : "token count mismatch", h[2], (long long)want,
                    (long long)st.st_size);
    }
    r->fd = fd;
    r->ntokens = h[2];
    r->vocab = vocab;
    r->file_vocab = h[3];
    r->tokenizer = (uint64_t)(uint32_t)h[4] | (uint64_t)(uint32_t)h[5] << 32;
    r->width = width;
    r->version = h[1];
    r->ntrained = masked ? h[7] : h[2];
    if (h[1] == TOK_VERSION_PACKED && read_rows(r, h, err, errlen)) {
        tok_close(r);
        return -1;
    }
    return 0;
}

int64_t tok_windows(int64_t ntokens, int64_t B, int64_t T) {
    if (B < 1 || T < 1 || ntokens < 1 || B > (INT64_C(1) << 31) || T > (INT64_C(1) << 31)) return 0;
    return (ntokens - 1) / (B * T);
}

int64_t tok_window_offset(int64_t ntokens, int64_t m, int64_t B, int64_t T) {
    int64_t w = tok_windows(ntokens, B, T);
    if (w < 1 || m < 0) return -1;
    return (m % w) * B * T;
}

int tok_window(TokReader *r, int64_t m, int64_t B, int64_t T, int32_t *tokens, int32_t *targets,
               char *err, size_t errlen) {
    if (r->fd < 0) return errorf(err, errlen, "%s: token file is not open", r->path);
    if (B < 1 || T < 1 || B > (INT64_C(1) << 31) || T > (INT64_C(1) << 31))
        return errorf(err, errlen, "%s: bad micro-batch shape B=%lld T=%lld", r->path, (long long)B, (long long)T);
    if (m < 0) return errorf(err, errlen, "%s: negative window number %lld", r->path, (long long)m);
    int64_t bt = B * T;
    if (r->ntokens < bt + 1)
        return errorf(err, errlen, "%s: %lld tokens is too short for one window of B*T+1 = %lld tokens (B=%lld, T=%lld)",
                    r->path, (long long)r->ntokens, (long long)(bt + 1), (long long)B, (long long)T);
    int64_t off = tok_window_offset(r->ntokens, m, B, T);
    size_t need = (size_t)bt + 1;
    if (r->buf_cap < need * 4) {
        unsigned char *nb = realloc(r->buf, need * 4);
        if (!nb) return errorf(err, errlen, "%s: out of memory for a window of %zu tokens", r->path, need);
        r->buf = nb;
        r->buf_cap = need * 4;
    }
    /* The ids land in the window's own buffer (uint32) and are copied out. */
    uint32_t *ids = (uint32_t *)(void *)r->buf;
    if (tok_read(r, off, (int64_t)need, ids, err, errlen)) return -1;
    for (int64_t i = 0; i < bt; i++) {
        tokens[i] = (int32_t)ids[i];
        targets[i] = (int32_t)ids[i + 1];
    }
    return tok_mask_targets(r, off + 1, bt, targets, err, errlen);
}

/* Reads the mask bytes covering tokens [off, off+n) (n >= 1) into r->bits;
 * *first is the token of the first bit read. */
static int read_bits(TokReader *r, int64_t off, int64_t n, int64_t *first, char *err, size_t errlen) {
    int64_t b0 = off / 8, b1 = (off + n - 1) / 8;
    size_t nb = (size_t)(b1 - b0 + 1);
    if (r->bits_cap < nb) {
        uint8_t *p = realloc(r->bits, nb);
        if (!p) return errorf(err, errlen, "%s: out of memory for the mask of %lld tokens", r->path, (long long)n);
        r->bits = p;
        r->bits_cap = nb;
    }
    off_t pos = (off_t)TOK_HEADER_BYTES + (off_t)r->ntokens * r->width + (off_t)b0;
    ssize_t got = pread_full(r->fd, r->bits, nb, pos);
    if (got < 0)
        return errorf(err, errlen, "%s: read of the mask of tokens %lld..%lld failed: %s", r->path, (long long)off,
                      (long long)(off + n), strerror(errno));
    if ((size_t)got < nb)
        return errorf(err, errlen, "%s: read of the mask at token %lld came back short: file changed?", r->path,
                      (long long)off);
    *first = b0 * 8;
    return 0;
}

static int check_range(const TokReader *r, int64_t off, int64_t n, char *err, size_t errlen) {
    if (r->fd < 0) return errorf(err, errlen, "%s: token file is not open", r->path);
    if (off < 0 || n < 0 || off > r->ntokens || n > r->ntokens - off)
        return errorf(err, errlen, "%s: tokens %lld..%lld are outside the file's %lld", r->path, (long long)off,
                      (long long)(off + n), (long long)r->ntokens);
    return 0;
}

int tok_read_trained(TokReader *r, int64_t off, int64_t n, uint8_t *trained, char *err, size_t errlen) {
    if (check_range(r, off, n, err, errlen)) return -1;
    if ((r->version != TOK_VERSION_MASKED && r->version != TOK_VERSION_PACKED) || n == 0) {
        memset(trained, 1, (size_t)n);
        return 0;
    }
    const int64_t chunk = INT64_C(1) << 23;
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < chunk ? n - done : chunk, first;
        if (read_bits(r, off + done, k, &first, err, errlen)) return -1;
        for (int64_t i = 0; i < k; i++) {
            int64_t b = off + done + i - first;
            trained[done + i] = (uint8_t)((r->bits[b / 8] >> (b % 8)) & 1);
        }
        done += k;
    }
    return 0;
}

int64_t tok_count_trained(TokReader *r, int64_t off, int64_t n, char *err, size_t errlen) {
    if (check_range(r, off, n, err, errlen)) return -1;
    if ((r->version != TOK_VERSION_MASKED && r->version != TOK_VERSION_PACKED) || n == 0) return n;
    const int64_t chunk = INT64_C(1) << 23;
    int64_t count = 0;
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < chunk ? n - done : chunk, first;
        if (read_bits(r, off + done, k, &first, err, errlen)) return -1;
        for (int64_t i = 0; i < k; i++) {
            int64_t b = off + done + i - first;
            count += (r->bits[b / 8] >> (b % 8)) & 1;
        }
        done += k;
    }
    return count;
}

int tok_mask_targets(TokReader *r, int64_t off, int64_t n, int32_t *targets, char *err, size_t errlen) {
    if ((r->version != TOK_VERSION_MASKED && r->version != TOK_VERSION_PACKED) || n == 0) return 0;
    if (check_range(r, off, n, err, errlen)) return -1;
    int64_t first;
    if (read_bits(r, off, n, &first, err, errlen)) return -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t b = off + i - first;
        if (!((r->bits[b / 8] >> (b % 8)) & 1)) targets[i] = TOK_UNTRAINED;
    }
    return 0;
}

int tok_read(TokReader *r, int64_t off, int64_t n, uint32_t *ids, char *err, size_t errlen) {
    if (check_range(r, off, n, err, errlen)) return -1;
    /* Read in chunks into the tail of ids (a uint16 id takes half the room
     * of the uint32 it becomes, so widening walks forward safely). */
    const int64_t chunk = 1 << 20;
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < chunk ? n - done : chunk;
        size_t bytes = (size_t)k * (size_t)r->width;
        unsigned char *dst = (unsigned char *)(ids + done) + ((size_t)k * 4 - bytes);
        off_t pos = (off_t)TOK_HEADER_BYTES + (off_t)(off + done) * r->width;
        ssize_t got = pread_full(r->fd, dst, bytes, pos);
        if (got < 0)
            return errorf(err, errlen, "%s: read of %lld tokens at token %lld failed: %s", r->path, (long long)k,
                        (long long)(off + done), strerror(errno));
        if ((size_t)got < bytes)
            return errorf(err, errlen, "%s: read of %lld tokens at token %lld came back short (%lld bytes): file changed?",
                        r->path, (long long)k, (long long)(off + done), (long long)got);
        for (int64_t i = 0; i < k; i++) {
            uint32_t v;
            if (r->width == 2) {
                uint16_t h;
                memcpy(&h, dst + 2 * i, 2);
                v = h;
            } else
                memcpy(&v, dst + 4 * i, 4);
            ids[done + i] = v;
            if (r->vocab > 0 && v >= r->vocab)
                return errorf(err, errlen, "%s: token %u at position %lld is not below the vocabulary size %lld", r->path,
                            (unsigned)v, (long long)(off + done + i), (long long)r->vocab);
        }
        done += k;
    }
    return 0;
}

int tok_check_ids(TokReader *r, char *err, size_t errlen) {
    if (r->vocab <= 0) return 0;
    const int64_t chunk = 1 << 20;
    uint32_t *ids = malloc((size_t)chunk * sizeof *ids);
    if (!ids) return errorf(err, errlen, "%s: out of memory checking the token ids", r->path);
    int rc = 0;
    for (int64_t off = 0; off < r->ntokens && !rc; off += chunk)
        rc = tok_read(r, off, r->ntokens - off < chunk ? r->ntokens - off : chunk, ids, err, errlen);
    free(ids);
    return rc;
}

int tok_batch(TokReader *r, int rank, int world, int64_t g, int64_t B, int64_t T, int32_t *tokens,
              int32_t *targets, char *err, size_t errlen) {
    if (world < 1 || rank < 0 || rank >= world)
        return errorf(err, errlen, "%s: rank %d is not in a world of %d", r->path, rank, world);
    if (g < 0) return errorf(err, errlen, "%s: negative micro-batch index %lld", r->path, (long long)g);
    int64_t w = tok_windows(r->ntokens, B, T);
    if (w >= 1 && w < world)
        return errorf(err, errlen, "%s: %lld tokens hold %lld disjoint windows of B*T+1 = %lld tokens, fewer than the %d ranks",
                    r->path, (long long)r->ntokens, (long long)w, (long long)(B * T + 1), world);
    if (g > (INT64_MAX - rank) / world) g %= w > 0 ? w : 1; /* same window: (g*world + rank) mod W */
    return tok_window(r, g * world + rank, B, T, tokens, targets, err, errlen);
}

void tok_close(TokReader *r) {
    if (r->fd >= 0) close(r->fd);
    free(r->buf);
    free(r->bits);
    free(r->row_first);
    free(r->sample_start);
    memset(r, 0, sizeof *r);
    r->fd = -1;
}

static int write_full(int fd, const void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        done += (size_t)w;
    }
    return 0;
}

/* mask: NULL (versions 1, 2) or the version 3 mask, ceil(n/8) bytes with
 * `trained` bits set; tokenizer: the fingerprint recorded in [4..5], 0:
 * none. */
/* The sample table of a packed file (version 4): NULL for the others. */
typedef struct PackTable {
    int64_t T, rows, samples;
    const int32_t *row_first, *starts;
} PackTable;

static int write_file(const char *path, const void *body, int64_t n, int width, int32_t vocab, uint64_t tokenizer,
                      const uint8_t *mask, int64_t trained, const PackTable *pack, char *err, size_t errlen) {
    if (n < 0 || n > INT32_MAX)
        return errorf(err, errlen, "%s: %lld tokens do not fit the int32 count of the header", path, (long long)n);
    char tmp[600];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return errorf(err, errlen, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errorf(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    int32_t h[TOK_HEADER_INTS];
    memset(h, 0, sizeof h);
    h[0] = TOK_MAGIC;
    h[1] = width == 2 ? TOK_VERSION : TOK_VERSION32;
    h[2] = (int32_t)n;
    h[3] = vocab;
    h[4] = (int32_t)(uint32_t)tokenizer;
    h[5] = (int32_t)(uint32_t)(tokenizer >> 32);
    if (mask) {
        h[1] = TOK_VERSION_MASKED;
        h[6] = width;
        h[7] = (int32_t)trained;
    }
    if (pack) {
        h[1] = TOK_VERSION_PACKED;
        h[8] = (int32_t)pack->T;
        h[9] = (int32_t)pack->rows;
        h[10] = (int32_t)pack->samples;
    }
    const char *what = "write";
    if (write_full(fd, h, sizeof h) != 0 || write_full(fd, body, (size_t)n * (size_t)width) != 0) goto bad;
    if (mask && write_full(fd, mask, (size_t)(n + 7) / 8) != 0) goto bad;
    if (pack && (write_full(fd, pack->row_first, (size_t)(pack->rows + 1) * 4) != 0 ||
                 write_full(fd, pack->starts, (size_t)pack->samples * 4) != 0))
        goto bad;
    what = "fsync";
    if (fsync(fd) != 0) goto bad;
    what = "close";
    if (close(fd) != 0) {
        fd = -1;
        goto bad;
    }
    fd = -1;
    what = "rename";
    if (rename(tmp, path) != 0) goto bad;
    /* Make the rename durable. */
    char dirbuf[600];
    snprintf(dirbuf, sizeof dirbuf, "%s", path);
    int dfd = open(dirname(dirbuf), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
bad: {
    int no = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    return errorf(err, errlen, "%s: %s failed: %s", path, what, strerror(no));
}
}

int tok_write(const char *path, const uint16_t *tokens, int64_t n, char *err, size_t errlen) {
    return write_file(path, tokens, n, 2, 0, 0, NULL, 0, NULL, err, errlen);
}

static int write_ids(const char *path, const uint32_t *ids, const uint8_t *mask, int64_t trained, int64_t n,
                     int64_t vocab, uint64_t tokenizer, const PackTable *pack, char *err, size_t errlen) {
    if (vocab < 1 || vocab > INT32_MAX)
        return errorf(err, errlen, "%s: vocabulary size %lld is not 1..%d", path, (long long)vocab, INT32_MAX);
    if (n < 0 || n > INT32_MAX)
        return errorf(err, errlen, "%s: %lld tokens do not fit the int32 count of the header", path, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= vocab)
            return errorf(err, errlen, "%s: token %u at position %lld is not below the vocabulary size %lld", path,
                        (unsigned)ids[i], (long long)i, (long long)vocab);
    if (vocab > TOK_MAX_VOCAB16) return write_file(path, ids, n, 4, (int32_t)vocab, tokenizer, mask, trained, pack, err, errlen);
    uint16_t *narrow = malloc((size_t)(n ? n : 1) * sizeof *narrow);
    if (!narrow) return errorf(err, errlen, "%s: out of memory", path);
    for (int64_t i = 0; i < n; i++) narrow[i] = (uint16_t)ids[i];
    int rc = write_file(path, narrow, n, 2, (int32_t)vocab, tokenizer, mask, trained, pack, err, errlen);
    free(narrow);
    return rc;
}

int tok_write_ids(const char *path, const uint32_t *ids, int64_t n, int64_t vocab, char *err, size_t errlen) {
    return write_ids(path, ids, NULL, 0, n, vocab, 0, NULL, err, errlen);
}

int tok_write_ids_of(const char *path, const uint32_t *ids, int64_t n, int64_t vocab, uint64_t tokenizer, char *err,
                     size_t errlen) {
    return write_ids(path, ids, NULL, 0, n, vocab, tokenizer, NULL, err, errlen);
}

int tok_write_masked(const char *path, const uint32_t *ids, const uint8_t *trained, int64_t n, int64_t vocab,
                     uint64_t tokenizer, char *err, size_t errlen) {
    if (n < 0 || n > INT32_MAX)
        return errorf(err, errlen, "%s: %lld tokens do not fit the int32 count of the header", path, (long long)n);
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) count += trained[i] != 0;
    if (count == n) return write_ids(path, ids, NULL, 0, n, vocab, tokenizer, NULL, err, errlen);
    uint8_t *mask = calloc((size_t)(n + 7) / 8 + 1, 1);
    if (!mask) return errorf(err, errlen, "%s: out of memory", path);
    for (int64_t i = 0; i < n; i++)
        if (trained[i]) mask[i / 8] |= (uint8_t)(1u << (i % 8));
    int rc = write_ids(path, ids, mask, count, n, vocab, tokenizer, NULL, err, errlen);
    free(mask);
    return rc;
}

int tok_write_packed(const char *path, const uint32_t *ids, const uint8_t *trained, int64_t rows, int64_t T,
                     const int32_t *row_first, const int32_t *starts, int64_t nsamples, int64_t vocab,
                     uint64_t tokenizer, char *err, size_t errlen) {
    if (T < 1 || rows < 1 || rows > INT32_MAX / (T + 1) || nsamples < rows || nsamples > INT32_MAX)
        return errorf(err, errlen, "%s: %lld rows of T+1 = %lld tokens and %lld samples do not fit a packed file", path,
                      (long long)rows, (long long)T + 1, (long long)nsamples);
    if (row_first[0] != 0 || row_first[rows] != nsamples)
        return errorf(err, errlen, "%s: the row offsets run from %d to %d, expected 0 to %lld", path, row_first[0],
                      row_first[rows], (long long)nsamples);
    for (int64_t i = 0; i < rows; i++)
        for (int32_t k = row_first[i]; k < row_first[i + 1]; k++)
            if (k == row_first[i] ? starts[k] != 0 : starts[k] <= starts[k - 1] || starts[k] > T)
                return errorf(err, errlen, "%s: row %lld's sample starts are not 0, then increasing below %lld", path,
                              (long long)i, (long long)T + 1);
    int64_t n = rows * (T + 1), count = 0;
    for (int64_t i = 0; i < n; i++) count += trained[i] != 0;
    uint8_t *mask = calloc((size_t)(n + 7) / 8 + 1, 1);
    if (!mask) return errorf(err, errlen, "%s: out of memory", path);
    for (int64_t i = 0; i < n; i++)
        if (trained[i]) mask[i / 8] |= (uint8_t)(1u << (i % 8));
    PackTable pt = {T, rows, nsamples, row_first, starts};
    int rc = write_ids(path, ids, mask, count, n, vocab, tokenizer, &pt, err, errlen);
    free(mask);
    return rc;
}
