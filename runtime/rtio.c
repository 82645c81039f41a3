#include "rtio.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

int rtio_open(RtIo *io, const char *const *dirs, int ndirs, int rank, uint64_t bytes, uint64_t stripe,
              char *err, size_t errlen) {
    memset(io, 0, sizeof *io);
    for (int i = 0; i < 16; i++) io->fd[i] = -1;
    if (ndirs < 1 || ndirs > 16) return fail(err, errlen, "nvme: %d paths (1 to 16 are supported)", ndirs);
    io->npaths = ndirs;
    io->bytes = bytes;
    io->stripe = stripe ? stripe : (1u << 20);
    uint64_t per = (bytes / io->stripe + (uint64_t)ndirs) / (uint64_t)ndirs * io->stripe;
    for (int i = 0; i < ndirs; i++) {
        struct stat st;
        if (stat(dirs[i], &st) != 0)
            return fail(err, errlen, "nvme: path %s: %s", dirs[i], strerror(errno));
        if (!S_ISDIR(st.st_mode)) return fail(err, errlen, "nvme: path %s is not a directory", dirs[i]);
        snprintf(io->path[i], sizeof io->path[i], "%s/zinf-rank-%d.swap", dirs[i], rank);
        io->fd[i] = open(io->path[i], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (io->fd[i] < 0) {
            int e = errno;
            rtio_close(io, 0);
            return fail(err, errlen, "nvme: cannot open swap file %s: %s", io->path[i], strerror(e));
        }
        if (per) {
            int rc = posix_fallocate(io->fd[i], 0, (off_t)per);
            if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
                char p[512];
                snprintf(p, sizeof p, "%s", io->path[i]);
                rtio_close(io, 1);
                return fail(err, errlen, "nvme: cannot reserve %llu bytes for swap file %s: %s",
                            (unsigned long long)per, p, strerror(rc));
            }
        }
    }
    return 0;
}

void rtio_close(RtIo *io, int remove_files) {
    for (int i = 0; i < io->npaths; i++) {
        if (io->fd[i] >= 0) close(io->fd[i]);
        if (remove_files && io->path[i][0]) unlink(io->path[i]);
        io->fd[i] = -1;
    }
}

/* Logical offset -> (path, file offset), one stripe unit at a time. */
static int xfer(RtIo *io, uint64_t off, void *buf, uint64_t bytes, int write, char *err, size_t errlen) {
    if (off + bytes > io->bytes || off + bytes < off)
        return fail(err, errlen, "nvme: %s of %llu bytes at %llu is outside the %llu-byte swap space",
                    write ? "write" : "read", (unsigned long long)bytes, (unsigned long long)off,
                    (unsigned long long)io->bytes);
    uint8_t *p = buf;
    while (bytes) {
        uint64_t unit = off / io->stripe, in = off % io->stripe;
        int path = (int)(unit % (uint64_t)io->npaths);
        uint64_t foff = unit / (uint64_t)io->npaths * io->stripe + in;
        uint64_t n = io->stripe - in;
        if (n > bytes) n = bytes;
        uint64_t done = 0;
        while (done < n) {
            ssize_t k = write ? pwrite(io->fd[path], p + done, n - done, (off_t)(foff + done))
                              : pread(io->fd[path], p + done, n - done, (off_t)(foff + done));
            if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (k < 0)
                return fail(err, errlen, "nvme: %s of %llu bytes at offset %llu in %s failed: %s",
                            write ? "write" : "read", (unsigned long long)(n - done),
                            (unsigned long long)(foff + done), io->path[path], strerror(errno));
            if (k == 0) {
                if (write)
                    return fail(err, errlen, "nvme: write at offset %llu in %s wrote nothing",
                                (unsigned long long)(foff + done), io->path[path]);
                /* Past the end of a sparse file: zeros. */
                memset(p + done, 0, n - done);
                break;
            }
            done += (uint64_t)k; /* short transfers resume */
        }
        p += n;
        off += n;
        bytes -= n;
    }
    return 0;
}

int rtio_read(RtIo *io, uint64_t off, void *dst, uint64_t bytes, char *err, size_t errlen) {
    return xfer(io, off, dst, bytes, 0, err, errlen);
}
int rtio_write(RtIo *io, uint64_t off, const void *src, uint64_t bytes, char *err, size_t errlen) {
    return xfer(io, off, (void *)src, bytes, 1, err, errlen);
}
