/* rtio: the executor's view of its NVMe arena — one logical byte range per
 * rank, backed by one swap file per NVMe path (DIR/zinf-rank-R.swap),
 * striped round-robin in units of `stripe` bytes. Reads and writes are
 * synchronous from the caller's side (the nvme queue's worker); underneath
 * they go through the io_uring staging engine (runtime/nvme). Errors name
 * the file, the operation and the offset. */
#ifndef ZINF_RTIO_H
#define ZINF_RTIO_H
#include <stddef.h>
#include <stdint.h>

typedef struct RtIo {
    int npaths;
    int fd[16];
    char path[16][512];
    uint64_t bytes;     /* logical size */
    uint64_t stripe;
    void *engine;       /* the staging engine, when io_uring is available */
} RtIo;

int rtio_open(RtIo *io, const char *const *dirs, int ndirs, int rank, uint64_t bytes, uint64_t stripe,
              char *err, size_t errlen);
void rtio_close(RtIo *io, int remove_files);
int rtio_read(RtIo *io, uint64_t off, void *dst, uint64_t bytes, char *err, size_t errlen);
int rtio_write(RtIo *io, uint64_t off, const void *src, uint64_t bytes, char *err, size_t errlen);

#endif
