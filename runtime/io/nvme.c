/* nvme: io_uring + O_DIRECT staging engine; see nvme.h for the layout,
 * the striping formula and the error contract. */
#include "nvme.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include "errorf.h"

/* A chunk that keeps answering EAGAIN this many times is an error. */
#define NVME_MAX_RETRIES 10000u
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; older C libraries lack the name */
#endif
/* The transparent huge page size this aims for (x86-64, arm64 with 4 KiB pages). */
#define NVME_HUGE (2u << 20)

static NvmeOptions options; /* nvme_set_options: once, before any engine opens */

void nvme_set_options(const NvmeOptions *o) { options = o ? *o : (NvmeOptions){0}; }

static void err_clear(NvmeError *err) {
    if (err) memset(err, 0, sizeof *err);
}

static NvmeStatus err_set(NvmeError *err, int no, const char *op, const char *path, uint64_t offset,
                          uint64_t len, const char *fmt, ...) {
    if (!err) return NVME_FAIL;
    memset(err, 0, sizeof *err);
    err->err = no;
    snprintf(err->op, sizeof err->op, "%s", op);
    snprintf(err->path, sizeof err->path, "%s", path ? path : "");
    err->offset = offset;
    err->len = len;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        verrorf(err->detail, sizeof err->detail, fmt, ap);
        va_end(ap);
    }
    return NVME_FAIL;
}

const char *nvme_error_format(const NvmeError *e, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    if (!e || (e->err == 0 && e->detail[0] == 0)) {
        snprintf(buf, n, "nvme: no error");
        return buf;
    }
    const char *why = e->err ? strerror(e->err) : e->detail;
    int both = e->err && e->detail[0];
    if (!strcmp(e->op, "read") || !strcmp(e->op, "write") || !strcmp(e->op, "fallocate")) {
        if (e->err)
            snprintf(buf, n, "nvme: %s of %llu bytes at offset %llu in %s failed: %s%s%s%s", e->op,
                     (unsigned long long)e->len, (unsigned long long)e->offset, e->path, why,
                     both ? " (" : "", both ? e->detail : "", both ? ")" : "");
        else
            snprintf(buf, n, "nvme: %s of %llu bytes at logical offset %llu refused: %s", e->op,
                     (unsigned long long)e->len, (unsigned long long)e->offset, e->detail);
    } else if (e->path[0]) {
        snprintf(buf, n, "nvme: %s of %s failed: %s%s%s%s", e->op, e->path, why, both ? " (" : "",
                 both ? e->detail : "", both ? ")" : "");
    } else {
        snprintf(buf, n, "nvme: %s failed: %s%s%s%s", e->op, why, both ? " (" : "",
                 both ? e->detail : "", both ? ")" : "");
    }
    return buf;
}

void nvme_map(const NvmeEngine *e, uint64_t logical, int *path, uint64_t *file_offset) {
    uint64_t k = logical / e->stripe;
    *path = (int)(k % (uint64_t)e->npaths);
    *file_offset = (k / (uint64_t)e->npaths) * e->stripe + logical % e->stripe;
}

/* ---- tags ---- */

static NvmeTag *tag_find(NvmeEngine *e, uint32_t tag) {
    for (size_t i = 0; i < e->ntags; i++)
        if (e->tags[i].tag == tag) return &e->tags[i];
    return NULL;
}

static NvmeTag *tag_get(NvmeEngine *e, uint32_t tag) {
    NvmeTag *t = tag_find(e, tag);
    if (t) return t;
    if (e->ntags == e->tags_cap) {
        size_t cap = e->tags_cap ? e->tags_cap * 2 : 16;
        NvmeTag *nt = realloc(e->tags, cap * sizeof *nt);
        if (!nt) return NULL;
        e->tags = nt;
        e->tags_cap = cap;
    }
    t = &e->tags[e->ntags++];
    memset(t, 0, sizeof *t);
    t->tag = tag;
    return t;
}

static void tag_remove(NvmeEngine *e, NvmeTag *t) {
    size_t i = (size_t)(t - e->tags);
    e->tags[i] = e->tags[e->ntags - 1];
    e->ntags--;
}

/* `bytes` of tag are finished (transferred or failed). Successful tags are
 * forgotten when done; failed ones wait for nvme_wait to report them. */
static void tag_done(NvmeEngine *e, uint32_t tag, uint64_t bytes) {
    NvmeTag *t = tag_find(e, tag);
    if (!t) return;
    t->outstanding -= bytes;
    if (t->outstanding == 0 && !t->failed) tag_remove(e, t);
}

static void tag_fail(NvmeEngine *e, uint32_t tag, const NvmeError *err) {
    NvmeTag *t = tag_find(e, tag);
    if (t && !t->failed) {
        t->failed = 1;
        t->error = *err;
    }
}

uint64_t nvme_outstanding(const NvmeEngine *e, uint32_t tag) {
    uint64_t sum = 0;
    for (size_t i = 0; i < e->ntags; i++)
        if (tag == NVME_TAG_ALL || e->tags[i].tag == tag) sum += e->tags[i].outstanding;
    return sum;
}

/* ---- open / close ---- */

static void close_files(NvmeEngine *e, int n, const int *created, int unlink_all) {
    for (int i = 0; i < n; i++) {
        if (e->fds[i] >= 0) close(e->fds[i]);
        e->fds[i] = -1;
        if (unlink_all || (created && created[i])) unlink(e->files[i]);
    }
}

NvmeStatus nvme_open(NvmeEngine *e, const char *const *paths, int npaths, int rank,
                     uint64_t bytes_per_path, uint32_t stripe, int queue_depth, NvmeError *err) {
    err_clear(err);
    memset(e, 0, sizeof *e);
    if (npaths < 1 || npaths > NVME_MAX_PATHS)
        return err_set(err, EINVAL, "open", "", 0, 0, "%d swap paths (must be 1 to %d)", npaths,
                       NVME_MAX_PATHS);
    if (stripe == 0 || stripe % NVME_ALIGN)
        return err_set(err, EINVAL, "open", "", 0, 0, "stripe %u is not a positive multiple of %u",
                       stripe, NVME_ALIGN);
    if (bytes_per_path == 0 || bytes_per_path % stripe)
        return err_set(err, EINVAL, "open", "", 0, 0,
                       "bytes per path %llu is not a positive multiple of the stripe %u",
                       (unsigned long long)bytes_per_path, stripe);
    if (queue_depth < 1 || queue_depth > 4096)
        return err_set(err, EINVAL, "open", "", 0, 0, "queue depth %d (must be 1 to 4096)",
                       queue_depth);
    if (rank < 0) return err_set(err, EINVAL, "open", "", 0, 0, "negative rank %d", rank);
    e->rank = rank;
    e->bytes_per_path = bytes_per_path;
    e->stripe = stripe;
    e->queue_depth = queue_depth;
    for (int i = 0; i < NVME_MAX_PATHS; i++) e->fds[i] = -1;

    int created[NVME_MAX_PATHS] = {0};
    for (int i = 0; i < npaths; i++) {
        const char *dir = paths[i];
        int n = snprintf(e->files[i], NVME_PATH_MAX, "%s/zinf-rank%d.swap", dir, rank);
        if (n < 0 || n >= NVME_PATH_MAX) {
            err_set(err, ENAMETOOLONG, "open", dir, 0, 0, "swap directory name too long");
            close_files(e, i, created, 0);
            return NVME_FAIL;
        }
        struct stat st;
        if (stat(dir, &st) != 0) {
            int no = errno;
            err_set(err, no, "open", e->files[i], 0, 0, "swap directory %s %s", dir,
                    no == ENOENT ? "does not exist" : "cannot be examined");
            close_files(e, i, created, 0);
            return NVME_FAIL;
        }
        if (!S_ISDIR(st.st_mode)) {
            err_set(err, ENOTDIR, "open", e->files[i], 0, 0, "swap path %s is not a directory", dir);
            close_files(e, i, created, 0);
            return NVME_FAIL;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(e->files[j], e->files[i])) {
                err_set(err, EINVAL, "open", e->files[i], 0, 0, "swap path %s is given twice", dir);
                close_files(e, i, created, 0);
                return NVME_FAIL;
            }
        int fd = open(e->files[i], O_RDWR | O_DIRECT | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) {
            fd = open(e->files[i], O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
            if (fd >= 0) created[i] = 1;
        }
        if (fd < 0) {
            int no = errno;
            err_set(err, no, "open", e->files[i], 0, 0, "%s",
                    no == EINVAL ? "the file system does not support O_DIRECT"
                    : (no == EROFS || no == EACCES || no == EPERM)
                        ? "swap directory is not writable"
                        : "");
            close_files(e, i, created, 0);
            return NVME_FAIL;
        }
        e->fds[i] = fd;
        /* One owner per swap file: two runs sharing a directory and a rank
         * would silently overwrite each other's parameters. The lock goes
         * with the process, so a killed run's file is taken over (and later
         * removed) by the next run, never by a live one's neighbour. */
        int locked = flock(fd, LOCK_EX | LOCK_NB), tries = 0;
        /* a run that just died lets go only once the kernel has torn down
         * its io_uring (which holds the file): give that a moment */
        while (locked != 0 && errno == EWOULDBLOCK && ++tries <= 40) {
            usleep(50 * 1000);
            locked = flock(fd, LOCK_EX | LOCK_NB);
        }
        if (locked != 0) {
            int no = errno;
            err_set(err, no, "open", e->files[i], 0, 0, "%s",
                    no == EWOULDBLOCK ? "the swap file is in use by another live process (a run sharing this NVMe "
                                        "directory and rank): give each run its own --nvme directory"
                                      : "cannot lock the swap file");
            close_files(e, i + 1, created, 0);
            return NVME_FAIL;
        }
        if (fstat(fd, &st) == 0 && (uint64_t)st.st_size < bytes_per_path) {
            int rc;
            do rc = fallocate(fd, 0, 0, (off_t)bytes_per_path);
            while (rc != 0 && errno == EINTR);
            if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) rc = ftruncate(fd, (off_t)bytes_per_path);
            if (rc != 0) {
                int no = errno;
                err_set(err, no, "fallocate", e->files[i], 0, bytes_per_path, "%s",
                        no == ENOSPC ? "swap file does not fit on the device"
                        : no == EFBIG ? "file size limit reached" : "");
                close_files(e, i + 1, created, 0);
                return NVME_FAIL;
            }
        }
    }
    e->npaths = npaths;

    e->slots = calloc((size_t)queue_depth, sizeof *e->slots);
    e->free_slots = calloc((size_t)queue_depth, sizeof *e->free_slots);
    if (!e->slots || !e->free_slots) {
        free(e->slots);
        free(e->free_slots);
        close_files(e, npaths, created, 0);
        e->npaths = 0;
        return err_set(err, ENOMEM, "open", "", 0, 0, "slot tables");
    }
    for (int i = 0; i < queue_depth; i++) e->free_slots[i] = queue_depth - 1 - i;
    e->nfree = queue_depth;

    if (options.sync) {
        e->sync = 1;
        snprintf(e->sync_reason, sizeof e->sync_reason, "%s", options.sync);
    } else {
        int rc = io_uring_queue_init((unsigned)queue_depth, &e->ring, 0);
        if (rc < 0) {
            e->sync = 1;
            snprintf(e->sync_reason, sizeof e->sync_reason, "io_uring_queue_init failed: %s",
                     strerror(-rc));
        } else {
            e->ring_ok = 1;
            if (io_uring_register_files(&e->ring, e->fds, (unsigned)npaths) == 0)
                e->files_registered = 1;
        }
    }
    return NVME_OK;
}

/* Asks the kernel to back the whole huge pages inside [buf, buf + len)
 * with huge pages, moving what is there now (MADV_COLLAPSE copies the
 * contents: the addresses and the data stay). Why: a request's pages go to
 * the device as one scatter-gather entry per physically contiguous run,
 * and a virtio disk without indirect descriptors (this VM's: a 256-entry
 * ring) then fits one 1 MiB request of scattered 4 KiB pages at a time;
 * with 2 MiB pages a 1 MiB request is one entry. Best effort: returns the
 * bytes collapsed, 0 when the kernel refused (THP off, no free huge page,
 * memory the kernel cannot move, such as a driver's pinned pages). */
static uint64_t huge_back(char *buf, size_t len) {
    uintptr_t lo = ((uintptr_t)buf + NVME_HUGE - 1) & ~(uintptr_t)(NVME_HUGE - 1);
    uintptr_t hi = ((uintptr_t)buf + len) & ~(uintptr_t)(NVME_HUGE - 1);
    if (hi <= lo) return 0;
    if (madvise((void *)lo, hi - lo, MADV_HUGEPAGE) != 0) return 0;
    if (madvise((void *)lo, hi - lo, MADV_COLLAPSE) != 0) return 0;
    return hi - lo;
}

static void reg_free(NvmeEngine *e) {
    free(e->reg_bufs);
    free(e->reg_lens);
    e->reg_bufs = NULL;
    e->reg_lens = NULL;
    e->nreg = 0;
    e->reg_bytes = e->huge_bytes = 0;
}

NvmeStatus nvme_register_buffers(NvmeEngine *e, void *const *bufs, const size_t *lens, int n,
                                 NvmeError *err) {
    err_clear(err);
    if (e->inflight || e->npending > e->pending_head)
        return err_set(err, EBUSY, "register", "", 0, 0, "requests are in flight");
    if (n < 0) return err_set(err, EINVAL, "register", "", 0, 0, "negative buffer count");
    for (int i = 0; i < n; i++)
        if (!bufs[i] || (uintptr_t)bufs[i] % NVME_ALIGN || lens[i] == 0 || lens[i] % NVME_ALIGN)
            return err_set(err, EINVAL, "register", "", 0, 0,
                           "buffer %d (%p, %zu bytes) is not %u-byte aligned", i, bufs[i], lens[i],
                           NVME_ALIGN);
    if (e->ring_ok && e->nreg) io_uring_unregister_buffers(&e->ring);
    reg_free(e);
    if (n == 0) return NVME_OK;
    e->reg_bufs = malloc(sizeof *e->reg_bufs * (size_t)n);
    e->reg_lens = malloc(sizeof *e->reg_lens * (size_t)n);
    struct iovec *iov = malloc(sizeof *iov * (size_t)n);
    if (!e->reg_bufs || !e->reg_lens || !iov) {
        free(iov);
        reg_free(e);
        return err_set(err, ENOMEM, "register", "", 0, 0, "buffer table");
    }
    int want_huge = !options.no_huge_pages;
    e->reg_bytes = e->huge_bytes = 0;
    for (int i = 0; i < n; i++) {
        e->reg_bufs[i] = bufs[i];
        e->reg_lens[i] = lens[i];
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = lens[i];
        e->reg_bytes += lens[i];
        if (want_huge) e->huge_bytes += huge_back(bufs[i], lens[i]); /* before registration pins the pages */
    }
    if (e->ring_ok) {
        int rc = io_uring_register_buffers(&e->ring, iov, (unsigned)n);
        if (rc < 0) {
            free(iov);
            reg_free(e);
            return err_set(err, -rc, "register", "", 0, 0, "io_uring_register_buffers of %d buffers", n);
        }
    }
    free(iov);
    e->nreg = n;
    return NVME_OK;
}

static int reg_index(const NvmeEngine *e, const char *buf, uint64_t len) {
    for (int i = 0; i < e->nreg; i++)
        if (buf >= e->reg_bufs[i] && buf + len <= e->reg_bufs[i] + e->reg_lens[i]) return i;
    return -1;
}

/* ---- synchronous path ---- */

static void sync_chunk(NvmeEngine *e, NvmeChunk *c) {
    int fd = e->fds[c->path];
    while (c->done < c->len) {
        uint64_t n = c->len - c->done;
        if (e->debug_max_io && n > e->debug_max_io) n = e->debug_max_io;
        ssize_t r = c->is_write ? pwrite(fd, c->buf + c->done, n, (off_t)(c->offset + c->done))
                                : pread(fd, c->buf + c->done, n, (off_t)(c->offset + c->done));
        e->stats.ops++;
        if (r < 0 && (errno == EINTR || errno == EAGAIN) && c->retries++ < NVME_MAX_RETRIES) {
            e->stats.again_retried++;
            continue;
        }
        if (r <= 0) {
            NvmeError er;
            err_set(&er, r < 0 ? errno : EIO, c->is_write ? "write" : "read", e->files[c->path],
                    c->offset + c->done, c->len - c->done, r < 0 ? NULL
                    : "unexpected end of file after %llu of %llu bytes",
                    (unsigned long long)c->done, (unsigned long long)c->len);
            tag_fail(e, c->tag, &er);
            return;
        }
        c->done += (uint64_t)r;
        if (c->is_write) e->stats.bytes_written += (uint64_t)r;
        else e->stats.bytes_read += (uint64_t)r;
        if (c->done < c->len) e->stats.short_resumed++;
    }
}

/* ---- ring path ---- */

static void prep_slot(NvmeEngine *e, int slot) {
    NvmeChunk *c = &e->slots[slot];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
    if (!sqe) { /* the SQ is full of unsubmitted entries: flush and retry */
        io_uring_submit(&e->ring);
        sqe = io_uring_get_sqe(&e->ring);
    }
    uint64_t n = c->len - c->done;
    if (e->debug_max_io && n > e->debug_max_io) n = e->debug_max_io;
    int fd = e->files_registered ? c->path : e->fds[c->path];
    char *p = c->buf + c->done;
    off_t off = (off_t)(c->offset + c->done);
    if (c->buf_index >= 0) {
        if (c->is_write) io_uring_prep_write_fixed(sqe, fd, p, (unsigned)n, (uint64_t)off, c->buf_index);
        else io_uring_prep_read_fixed(sqe, fd, p, (unsigned)n, (uint64_t)off, c->buf_index);
        e->stats.fixed_ops++;
    } else {
        if (c->is_write) io_uring_prep_write(sqe, fd, p, (unsigned)n, (uint64_t)off);
        else io_uring_prep_read(sqe, fd, p, (unsigned)n, (uint64_t)off);
    }
    if (e->files_registered) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, (uint64_t)slot);
    e->stats.ops++;
}

/* Split the next chunk off the head request into c; returns 0 when none. */
static int next_chunk(NvmeEngine *e, NvmeChunk *c) {
    while (e->pending_head < e->npending && e->pending[e->pending_head].left == 0) e->pending_head++;
    if (e->pending_head == e->npending) {
        e->pending_head = e->npending = 0;
        return 0;
    }
    NvmeRequest *r = &e->pending[e->pending_head];
    uint64_t in_stripe = e->stripe - r->logical % e->stripe;
    uint64_t n = r->left < in_stripe ? r->left : in_stripe;
    memset(c, 0, sizeof *c);
    c->is_write = r->is_write;
    c->tag = r->tag;
    nvme_map(e, r->logical, &c->path, &c->offset);
    c->len = n;
    c->buf = r->buf;
    c->buf_index = reg_index(e, r->buf, n);
    r->logical += n;
    r->buf += n;
    r->left -= n;
    return 1;
}

/* Hand pending chunks to free slots; submit them now unless the caller's
 * io_uring_submit_and_wait will (one system call, not two). */
static void fill(NvmeEngine *e, int submit_now) {
    int queued = 0;
    while (e->nfree > 0) {
        NvmeChunk c;
        if (!next_chunk(e, &c)) break;
        int slot = e->free_slots[--e->nfree];
        e->slots[slot] = c;
        e->inflight++;
        prep_slot(e, slot);
        queued++;
    }
    if (queued) {
        if (submit_now) io_uring_submit(&e->ring);
        e->stats.submits++;
    }
}

static void slot_release(NvmeEngine *e, int slot) {
    e->free_slots[e->nfree++] = slot;
    e->inflight--;
}

static int complete(NvmeEngine *e, int slot, int res) {
    NvmeChunk *c = &e->slots[slot];
    if ((res == -EAGAIN || res == -EINTR) && c->retries++ < NVME_MAX_RETRIES) {
        e->stats.again_retried++;
        prep_slot(e, slot);
        return 1;
    }
    if (res <= 0) {
        NvmeError er;
        err_set(&er, res < 0 ? -res : EIO, c->is_write ? "write" : "read", e->files[c->path],
                c->offset + c->done, c->len - c->done, res < 0 ? NULL
                : "unexpected end of file after %llu of %llu bytes",
                (unsigned long long)c->done, (unsigned long long)c->len);
        tag_fail(e, c->tag, &er);
        tag_done(e, c->tag, c->len);
        slot_release(e, slot);
        return 0;
    }
    c->done += (uint64_t)res;
    if (c->is_write) e->stats.bytes_written += (uint64_t)res;
    else e->stats.bytes_read += (uint64_t)res;
    if (c->done < c->len) {
        e->stats.short_resumed++;
        prep_slot(e, slot);
        return 1;
    }
    tag_done(e, c->tag, c->len);
    slot_release(e, slot);
    return 0;
}

/* Reap every completion available, waiting for at least one when asked. */
static int reap(NvmeEngine *e, int wait) {
    if (wait) {
        int rc;
        do rc = io_uring_submit_and_wait(&e->ring, 1);
        while (rc == -EINTR);
        if (rc < 0) return rc;
    }
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    int resubmit = 0;
    io_uring_for_each_cqe(&e->ring, head, cqe) {
        resubmit += complete(e, (int)io_uring_cqe_get_data64(cqe), cqe->res);
        seen++;
    }
    io_uring_cq_advance(&e->ring, seen);
    if (resubmit) io_uring_submit(&e->ring);
    return 0;
}

/* ---- submit / wait ---- */

static NvmeStatus submit(NvmeEngine *e, int is_write, uint64_t logical, uint64_t len, char *buf,
                         uint32_t tag, NvmeError *err) {
    err_clear(err);
    const char *op = is_write ? "write" : "read";
    if (e->npaths == 0) return err_set(err, EBADF, op, "", logical, len, "engine is not open");
    if (tag == NVME_TAG_ALL) return err_set(err, 0, op, "", logical, len, "tag %u is reserved", tag);
    if (logical % NVME_ALIGN)
        return err_set(err, 0, op, "", logical, len, "offset %llu is not a multiple of %u (O_DIRECT)",
                       (unsigned long long)logical, NVME_ALIGN);
    if (len % NVME_ALIGN)
        return err_set(err, 0, op, "", logical, len, "length %llu is not a multiple of %u (O_DIRECT)",
                       (unsigned long long)len, NVME_ALIGN);
    if ((uintptr_t)buf % NVME_ALIGN)
        return err_set(err, 0, op, "", logical, len,
                       "buffer address %p is not a multiple of %u (O_DIRECT)", (void *)buf, NVME_ALIGN);
    uint64_t cap = e->bytes_per_path * (uint64_t)e->npaths;
    if (logical > cap || len > cap - logical)
        return err_set(err, 0, op, "", logical, len, "beyond the end of the %llu-byte swap space",
                       (unsigned long long)cap);
    if (len == 0) return NVME_OK;
    NvmeTag *t = tag_get(e, tag);
    if (!t) return err_set(err, ENOMEM, op, "", logical, len, "tag table");
    t->outstanding += len;
    if (e->sync) {
        NvmeRequest r = {is_write, tag, logical, len, buf};
        for (;;) { /* chunk by chunk, each resumed until done or failed */
            uint64_t in_stripe = e->stripe - r.logical % e->stripe;
            uint64_t n = r.left < in_stripe ? r.left : in_stripe;
            NvmeChunk c;
            memset(&c, 0, sizeof c);
            c.is_write = is_write;
            c.tag = tag;
            nvme_map(e, r.logical, &c.path, &c.offset);
            c.len = n;
            c.buf = r.buf;
            c.buf_index = -1;
            sync_chunk(e, &c);
            r.logical += n;
            r.buf += n;
            r.left -= n;
            if (r.left == 0) break;
        }
        tag_done(e, tag, len);
        return NVME_OK;
    }
    if (e->npending == e->pending_cap) {
        size_t cap2 = e->pending_cap ? e->pending_cap * 2 : 64;
        NvmeRequest *np = realloc(e->pending, cap2 * sizeof *np);
        if (!np) {
            t->outstanding -= len;
            if (t->outstanding == 0 && !t->failed) tag_remove(e, t);
            return err_set(err, ENOMEM, op, "", logical, len, "request queue");
        }
        e->pending = np;
        e->pending_cap = cap2;
    }
    e->pending[e->npending++] = (NvmeRequest){is_write, tag, logical, len, buf};
    if (e->batching) return NVME_OK; /* nvme_wait or nvme_progress submits the batch */
    fill(e, 1);
    reap(e, 0);
    return NVME_OK;
}

NvmeStatus nvme_submit_read(NvmeEngine *e, uint64_t logical_offset, uint64_t len, void *buf,
                            uint32_t tag, NvmeError *err) {
    return submit(e, 0, logical_offset, len, buf, tag, err);
}

NvmeStatus nvme_submit_write(NvmeEngine *e, uint64_t logical_offset, uint64_t len,
                             const void *buf, uint32_t tag, NvmeError *err) {
    return submit(e, 1, logical_offset, len, (char *)(uintptr_t)buf, tag, err);
}

void nvme_batch_begin(NvmeEngine *e) { e->batching = 1; }

NvmeStatus nvme_wait(NvmeEngine *e, uint32_t tag, NvmeError *err) {
    err_clear(err);
    e->batching = 0;
    if (e->ring_ok) {
        while (nvme_outstanding(e, tag) > 0) {
            fill(e, 0);
            if (e->inflight == 0) break; /* cannot happen: outstanding work is queued or in flight */
            int rc = reap(e, 1); /* submits what fill queued */
            if (rc < 0) return err_set(err, -rc, "wait", "", 0, 0, "io_uring_submit_and_wait");
        }
    }
    NvmeStatus st = NVME_OK;
    for (size_t i = 0; i < e->ntags;) {
        NvmeTag *t = &e->tags[i];
        if ((tag == NVME_TAG_ALL || t->tag == tag) && t->outstanding == 0) {
            if (t->failed && st == NVME_OK) {
                if (err) *err = t->error;
                st = NVME_FAIL;
            }
            tag_remove(e, t);
            continue;
        }
        i++;
    }
    return st;
}

NvmeStatus nvme_progress(NvmeEngine *e, int wait, NvmeError *err) {
    err_clear(err);
    e->batching = 0;
    if (!e->ring_ok) return NVME_OK;
    fill(e, !wait);
    int rc = wait && e->inflight ? reap(e, 1) : reap(e, 0);
    if (rc < 0) return err_set(err, -rc, "wait", "", 0, 0, "io_uring_submit_and_wait");
    fill(e, 1); /* slots the completions freed take queued work at once */
    return NVME_OK;
}

int nvme_tag_done(const NvmeEngine *e, uint32_t tag) { return nvme_outstanding(e, tag) == 0; }

void nvme_close(NvmeEngine *e, int unlink_files) {
    if (e->ring_ok) {
        nvme_wait(e, NVME_TAG_ALL, NULL);
        if (e->nreg) io_uring_unregister_buffers(&e->ring);
        if (e->files_registered) io_uring_unregister_files(&e->ring);
        io_uring_queue_exit(&e->ring);
    }
    if (e->npaths > 0) close_files(e, e->npaths, NULL, unlink_files);
    reg_free(e);
    free(e->slots);
    free(e->free_slots);
    free(e->pending);
    free(e->tags);
    memset(e, 0, sizeof *e);
}
