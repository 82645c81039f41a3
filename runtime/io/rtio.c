#include "rtio.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PIECE: a pipelined transfer goes to the engine in pieces of at most
 * this (a multiple of NVME_ALIGN), so that one large transfer keeps
 * several queue slots busy (bench_nvme on this VM's virtio disk, queue
 * depth 8: reads of 1 MiB 962 MB/s, of 128 KiB 1669 MB/s). */
enum { STRIPE = 1u << 20, BOUNCE = 4u << 20, PIECE = 128u << 10 };

static int fail_nvme(const NvmeError *ne, char *err, size_t n) {
    char b[1024];
    snprintf(err, n, "%s", nvme_error_format(ne, b, sizeof b));
    return -1;
}

int rtio_open(RtIo *io, const char *const *dirs, int ndirs, int rank, uint64_t bytes, int queue_depth,
              char *err, size_t n) {
    memset(io, 0, sizeof *io);
    if (ndirs < 1 || ndirs > NVME_MAX_PATHS) {
        snprintf(err, n, "nvme: %d paths (1 to %d are supported)", ndirs, NVME_MAX_PATHS);
        return -1;
    }
    /* whole blocks: a transfer widened to the end of its last block stays inside */
    io->bytes = (bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    /* Each file holds a whole number of stripe units; together at least `bytes`. */
    uint64_t units = (io->bytes + STRIPE - 1) / STRIPE;
    uint64_t per = (units + (uint64_t)ndirs - 1) / (uint64_t)ndirs * STRIPE;
    if (per == 0) per = STRIPE;
    NvmeError ne;
    if (nvme_open(&io->e, dirs, ndirs, rank, per, STRIPE, queue_depth > 0 ? queue_depth : 32, &ne) != NVME_OK)
        return fail_nvme(&ne, err, n);
    io->bounce_bytes = BOUNCE;
    io->bounce = aligned_alloc(NVME_ALIGN, io->bounce_bytes);
    if (!io->bounce) {
        nvme_close(&io->e, 1);
        snprintf(err, n, "nvme: out of memory for the bounce buffer");
        return -1;
    }
    pthread_mutex_init(&io->mu, NULL);
    io->open = 1;
    return 0;
}

int rtio_register(RtIo *io, void *buf, size_t len, char *err, size_t n) {
    if (((uintptr_t)buf % NVME_ALIGN) || (len % NVME_ALIGN) || !len) return 0; /* plain I/O then */
    NvmeError ne;
    void *bufs[1] = {buf};
    size_t lens[1] = {len};
    pthread_mutex_lock(&io->mu);
    NvmeStatus s = nvme_register_buffers(&io->e, bufs, lens, 1, &ne);
    pthread_mutex_unlock(&io->mu);
    if (s == NVME_OK) return 0;
    if (ne.err == ENOMEM || ne.err == EPERM || ne.err == EFAULT || ne.err == EOPNOTSUPP) {
        /* registration only saves the kernel pinning pages per request */
        char m[sizeof io->unregistered];
        fail_nvme(&ne, m, sizeof m);
        const char *hint = ne.err == ENOMEM ? " (ulimit -l too low for the pinned arena?)" : "";
        size_t keep = sizeof io->unregistered - strlen(hint) - 1;
        snprintf(io->unregistered, sizeof io->unregistered, "%.*s%s", (int)keep, m, hint);
        return 0;
    }
    return fail_nvme(&ne, err, n);
}

void rtio_close(RtIo *io, int remove_files) {
    if (!io->open) return;
    nvme_close(&io->e, remove_files);
    free(io->bounce);
    pthread_mutex_destroy(&io->mu);
    io->open = 0;
}

const char *rtio_mode(const RtIo *io, char *buf, size_t n) {
    if (io->e.sync) snprintf(buf, n, "pread/pwrite (%s)", io->e.sync_reason);
    else snprintf(buf, n, "io_uring, O_DIRECT, queue depth %d, %d path%s%s%s", io->e.queue_depth, io->e.npaths,
                  io->e.npaths == 1 ? "" : "s", io->unregistered[0] ? "; pinned arena not registered: " : "",
                  io->unregistered);
    return buf;
}

static bool aligned(uint64_t off, uint64_t len, const void *p) {
    return off % NVME_ALIGN == 0 && len % NVME_ALIGN == 0 && (uintptr_t)p % NVME_ALIGN == 0;
}

static int xfer_direct(RtIo *io, uint64_t off, void *buf, uint64_t len, int write, char *err, size_t n) {
    NvmeError ne;
    NvmeStatus s = write ? nvme_submit_write(&io->e, off, len, buf, 1, &ne) : nvme_submit_read(&io->e, off, len, buf, 1, &ne);
    if (s == NVME_OK) s = nvme_wait(&io->e, 1, &ne);
    return s == NVME_OK ? 0 : fail_nvme(&ne, err, n);
}

static int xfer(RtIo *io, uint64_t off, void *buf, uint64_t len, int write, char *err, size_t n) {
    if (off + len > io->bytes || off + len < off) {
        snprintf(err, n, "nvme: %s of %llu bytes at %llu is outside the %llu-byte swap space", write ? "write" : "read",
                 (unsigned long long)len, (unsigned long long)off, (unsigned long long)io->bytes);
        return -1;
    }
    if (!len) return 0;
    pthread_mutex_lock(&io->mu);
    int rc = 0;
    if (aligned(off, len, buf)) {
        rc = xfer_direct(io, off, buf, len, write, err, n);
    } else {
        /* Through the bounce buffer, one aligned window at a time. */
        uint8_t *p = buf;
        while (len && !rc) {
            uint64_t a0 = off / NVME_ALIGN * NVME_ALIGN;
            uint64_t span = io->bounce_bytes;
            uint64_t take = a0 + span - off;
            if (take > len) take = len;
            uint64_t a1 = (off + take + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
            uint64_t win = a1 - a0;
            /* A write that does not cover whole blocks keeps the rest of them. */
            if (!write || off != a0 || off + take != a1) rc = xfer_direct(io, a0, io->bounce, win, 0, err, n);
            if (rc) break;
            if (write) {
                memcpy(io->bounce + (off - a0), p, take);
                rc = xfer_direct(io, a0, io->bounce, win, 1, err, n);
            } else {
                memcpy(p, io->bounce + (off - a0), take);
            }
            p += take;
            off += take;
            len -= take;
        }
    }
    pthread_mutex_unlock(&io->mu);
    return rc;
}

int rtio_read(RtIo *io, uint64_t off, void *dst, uint64_t bytes, char *err, size_t n) {
    return xfer(io, off, dst, bytes, 0, err, n);
}
int rtio_write(RtIo *io, uint64_t off, const void *src, uint64_t bytes, char *err, size_t n) {
    return xfer(io, off, (void *)src, bytes, 1, err, n);
}

static int out_of_range(const RtIo *io, const RtioReq *q, char *err, size_t errlen) {
    if (q->off + q->bytes <= io->bytes && q->off + q->bytes >= q->off) return 0;
    snprintf(err, errlen, "nvme: %s of %llu bytes at %llu is outside the %llu-byte swap space", q->write ? "write" : "read",
             (unsigned long long)q->bytes, (unsigned long long)q->off, (unsigned long long)io->bytes);
    return -1;
}

int rtio_start(RtIo *io, const RtioReq *q, uint32_t tag, char *err, size_t errlen) {
    if (out_of_range(io, q, err, errlen)) return -1;
    if (!q->bytes) return 0;
    if (!aligned(q->off, q->bytes, q->buf)) return xfer(io, q->off, q->buf, q->bytes, q->write, err, errlen) ? -1 : 0;
    pthread_mutex_lock(&io->mu);
    NvmeError ne;
    NvmeStatus st = NVME_OK;
    nvme_batch_begin(&io->e); /* queued only: rtio_progress submits every transfer started since in one go */
    for (uint64_t at = 0; at < q->bytes && st == NVME_OK; at += PIECE) {
        uint64_t len = q->bytes - at < PIECE ? q->bytes - at : PIECE;
        st = q->write ? nvme_submit_write(&io->e, q->off + at, len, (uint8_t *)q->buf + at, tag, &ne)
                      : nvme_submit_read(&io->e, q->off + at, len, (uint8_t *)q->buf + at, tag, &ne);
    }
    if (st != NVME_OK) nvme_wait(&io->e, tag, NULL); /* its pieces already queued: none left in flight */
    pthread_mutex_unlock(&io->mu);
    return st == NVME_OK ? 1 : fail_nvme(&ne, err, errlen);
}

int rtio_progress(RtIo *io, int wait, char *err, size_t errlen) {
    NvmeError ne;
    pthread_mutex_lock(&io->mu);
    NvmeStatus st = nvme_progress(&io->e, wait, &ne);
    pthread_mutex_unlock(&io->mu);
    return st == NVME_OK ? 0 : fail_nvme(&ne, err, errlen);
}

int rtio_finished(RtIo *io, uint32_t tag, char *err, size_t errlen) {
    pthread_mutex_lock(&io->mu);
    int done = nvme_tag_done(&io->e, tag);
    NvmeError ne;
    NvmeStatus st = done ? nvme_wait(&io->e, tag, &ne) : NVME_OK; /* returns at once: collects its error */
    pthread_mutex_unlock(&io->mu);
    if (!done) return 0;
    return st == NVME_OK ? 1 : fail_nvme(&ne, err, errlen);
}
