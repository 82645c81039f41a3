/* rtio: the executor's view of its NVMe arena — one logical byte range per
 * rank, on the io_uring staging engine (runtime/nvme: one swap file per rank
 * per NVMe path, PATH/zinf-rankR.swap, striped round-robin in 1 MiB units,
 * O_DIRECT). Reads and writes are synchronous for the caller (the nvme
 * queue's worker keeps its own transfers in flight inside the engine).
 *
 * The engine needs every offset, length and buffer address aligned to
 * NVME_ALIGN; the plan aligns its NVMe buffers and pinned staging, so
 * transfers go straight through (registered buffers for the pinned arena).
 * Anything unaligned (small tensors at odd offsets) goes through an aligned
 * bounce buffer, with read-modify-write of the partial blocks (the
 * executor widens a transfer that ends a buffer to its last block first,
 * since the plan's NVMe and pinned buffers start on blocks and nothing
 * else lives in the rest of a buffer's last block). One lock serialises
 * callers: the engine is single-threaded. */
#ifndef ZINF_RTIO_H
#define ZINF_RTIO_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "nvme.h"

typedef struct RtIo {
    NvmeEngine e;
    pthread_mutex_t mu;
    uint64_t bytes;       /* logical size asked for */
    uint8_t *bounce;      /* NVME_ALIGN-aligned */
    size_t bounce_bytes;
    int open;
    char unregistered[192]; /* why the pinned arena is not registered (plain I/O then), "" */
} RtIo;

int rtio_open(RtIo *io, const char *const *dirs, int ndirs, int rank, uint64_t bytes, int queue_depth,
              char *err, size_t errlen);
/* Registers one host region (the pinned arena) for fixed-buffer I/O. A
 * refusal by the kernel (RLIMIT_MEMLOCK for a non-root user, ENOMEM) is not
 * an error: the same transfers then use plain reads and writes, and
 * rtio_mode says so and why. */
int rtio_register(RtIo *io, void *buf, size_t len, char *err, size_t errlen);
void rtio_close(RtIo *io, int remove_files);
int rtio_read(RtIo *io, uint64_t off, void *dst, uint64_t bytes, char *err, size_t errlen);
int rtio_write(RtIo *io, uint64_t off, const void *src, uint64_t bytes, char *err, size_t errlen);

/* One transfer: bytes at logical offset off to (write) or from buf. */
typedef struct RtioReq {
    uint64_t off, bytes;
    void *buf;
    int write;
} RtioReq;

/* Transfers kept in flight together (the nvme queue's pipeline,
 * runtime/exec/qrun qrun_set_pipe): each under a tag of the caller's, from
 * RTIO_TAG_FIRST up (lower ones are rtio_read/rtio_write's), unique among
 * those not yet retired. rtio_start queues an aligned transfer in pieces
 * of 128 KiB (so that one large transfer keeps several of the device's
 * queue slots busy) and returns 1: in flight; an unaligned one goes
 * through the bounce buffer at once and returns 0: done. -1 with err on a
 * refusal (nothing of it is left in flight then). rtio_progress sends what
 * was queued to the kernel (one submission for all) and reaps
 * completions, when wait first blocking until one arrives.
 * rtio_finished: 1 when the tag's transfer has ended well, 0 while in
 * flight, -1 with its error (the first of its pieces) when it failed.
 * The caller makes sure no two transfers in flight touch overlapping
 * bytes where one writes, and keeps each buffer valid until retired. */
enum { RTIO_TAG_FIRST = 2 };
int rtio_start(RtIo *io, const RtioReq *q, uint32_t tag, char *err, size_t errlen);
int rtio_progress(RtIo *io, int wait, char *err, size_t errlen);
int rtio_finished(RtIo *io, uint32_t tag, char *err, size_t errlen);
/* "io_uring, queue depth 32" or "pread/pwrite (why)". */
const char *rtio_mode(const RtIo *io, char *buf, size_t n);

#endif
