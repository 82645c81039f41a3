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
 * bounce buffer, with read-modify-write of the partial blocks. One lock
 * serialises callers: the engine is single-threaded. */
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
/* "io_uring, queue depth 32" or "pread/pwrite (why)". */
const char *rtio_mode(const RtIo *io, char *buf, size_t n);

#endif
