/* tokens: token-file reader and atomic writer; see tokens.h. */
#include "tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

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

int tok_open(TokReader *r, const char *path, int64_t vocab, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    if (vocab < 0 || vocab > 65536)
        return fail(err, errlen, "%s: vocabulary size %lld is not 0 (unchecked) or 1..65536 (tokens are uint16)", path,
                    (long long)vocab);
    snprintf(r->path, sizeof r->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(err, errlen, "%s: cannot open token file: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int no = errno;
        close(fd);
        return fail(err, errlen, "%s: cannot stat token file: %s", path, strerror(no));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, errlen, "%s: not a regular file", path);
    }
    int32_t h[TOK_HEADER_INTS];
    ssize_t got = pread_full(fd, h, sizeof h, 0);
    if (got < 0) {
        int no = errno;
        close(fd);
        return fail(err, errlen, "%s: cannot read header: %s", path, strerror(no));
    }
    if ((size_t)got < sizeof h) {
        close(fd);
        return fail(err, errlen, "%s: truncated header: the file has %lld bytes, a token file starts with a %d-byte header",
                    path, (long long)got, TOK_HEADER_BYTES);
    }
    if (h[0] != TOK_MAGIC) {
        close(fd);
        return fail(err, errlen, "%s: bad magic 0x%x (expected %d): not a token file", path, (unsigned)h[0], TOK_MAGIC);
    }
    if (h[1] != TOK_VERSION) {
        close(fd);
        return fail(err, errlen, "%s: unsupported version %d (expected %d: uint16 tokens)", path, h[1], TOK_VERSION);
    }
    if (h[2] < 0) {
        close(fd);
        return fail(err, errlen, "%s: negative token count %d in the header", path, h[2]);
    }
    int64_t want = TOK_HEADER_BYTES + 2 * (int64_t)h[2];
    if ((int64_t)st.st_size != want) {
        close(fd);
        return fail(err, errlen, "%s: %s: the header says %d tokens (%lld bytes) but the file has %lld bytes", path,
                    (int64_t)st.st_size < want ? "truncated" : "token count mismatch", h[2], (long long)want,
                    (long long)st.st_size);
    }
    r->fd = fd;
    r->ntokens = h[2];
    r->vocab = vocab;
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
    if (r->fd < 0) return fail(err, errlen, "%s: token file is not open", r->path);
    if (B < 1 || T < 1 || B > (INT64_C(1) << 31) || T > (INT64_C(1) << 31))
        return fail(err, errlen, "%s: bad micro-batch shape B=%lld T=%lld", r->path, (long long)B, (long long)T);
    if (m < 0) return fail(err, errlen, "%s: negative window number %lld", r->path, (long long)m);
    int64_t bt = B * T;
    if (r->ntokens < bt + 1)
        return fail(err, errlen, "%s: %lld tokens is too short for one window of B*T+1 = %lld tokens (B=%lld, T=%lld)",
                    r->path, (long long)r->ntokens, (long long)(bt + 1), (long long)B, (long long)T);
    int64_t off = tok_window_offset(r->ntokens, m, B, T);
    size_t need = (size_t)bt + 1;
    if (r->buf_cap < need) {
        uint16_t *nb = realloc(r->buf, need * sizeof *nb);
        if (!nb) return fail(err, errlen, "%s: out of memory for a window of %zu tokens", r->path, need);
        r->buf = nb;
        r->buf_cap = need;
    }
    off_t pos = (off_t)TOK_HEADER_BYTES + (off_t)off * 2;
    ssize_t got = pread_full(r->fd, r->buf, need * 2, pos);
    if (got < 0)
        return fail(err, errlen, "%s: read of %zu tokens at token %lld failed: %s", r->path, need, (long long)off,
                    strerror(errno));
    if ((size_t)got < need * 2)
        return fail(err, errlen, "%s: read of %zu tokens at token %lld came back short (%lld bytes): file changed?",
                    r->path, need, (long long)off, (long long)got);
    if (r->vocab > 0)
        for (size_t i = 0; i < need; i++)
            if (r->buf[i] >= r->vocab)
                return fail(err, errlen, "%s: token %u at position %lld is not below the vocabulary size %lld",
                            r->path, (unsigned)r->buf[i], (long long)(off + (int64_t)i), (long long)r->vocab);
    for (int64_t i = 0; i < bt; i++) {
        tokens[i] = r->buf[i];
        targets[i] = r->buf[i + 1];
    }
    return 0;
}

int tok_batch(TokReader *r, int rank, int world, int64_t g, int64_t B, int64_t T, int32_t *tokens,
              int32_t *targets, char *err, size_t errlen) {
    if (world < 1 || rank < 0 || rank >= world)
        return fail(err, errlen, "%s: rank %d is not in a world of %d", r->path, rank, world);
    if (g < 0) return fail(err, errlen, "%s: negative micro-batch index %lld", r->path, (long long)g);
    int64_t w = tok_windows(r->ntokens, B, T);
    if (w >= 1 && w < world)
        return fail(err, errlen, "%s: %lld tokens hold %lld disjoint windows of B*T+1 = %lld tokens, fewer than the %d ranks",
                    r->path, (long long)r->ntokens, (long long)w, (long long)(B * T + 1), world);
    if (g > (INT64_MAX - rank) / world) g %= w > 0 ? w : 1; /* same window: (g*world + rank) mod W */
    return tok_window(r, g * world + rank, B, T, tokens, targets, err, errlen);
}

void tok_close(TokReader *r) {
    if (r->fd >= 0) close(r->fd);
    free(r->buf);
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

int tok_write(const char *path, const uint16_t *tokens, int64_t n, char *err, size_t errlen) {
    if (n < 0 || n > INT32_MAX)
        return fail(err, errlen, "%s: %lld tokens do not fit the int32 count of the header", path, (long long)n);
    char tmp[600];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return fail(err, errlen, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fail(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    int32_t h[TOK_HEADER_INTS];
    memset(h, 0, sizeof h);
    h[0] = TOK_MAGIC;
    h[1] = TOK_VERSION;
    h[2] = (int32_t)n;
    const char *what = "write";
    if (write_full(fd, h, sizeof h) != 0 || write_full(fd, tokens, (size_t)n * 2) != 0) goto bad;
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
    return fail(err, errlen, "%s: %s failed: %s", path, what, strerror(no));
}
}
