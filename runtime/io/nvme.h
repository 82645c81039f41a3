/* nvme: the NVMe staging engine. Moves bytes between host buffers and swap
 * files with io_uring (liburing) and O_DIRECT.
 *
 * Layout. One swap file per rank per path: PATH/zinf-rankR.swap, each
 * preallocated (fallocate) to bytes_per_path. The planner addresses one
 * logical space of npaths * bytes_per_path bytes, striped round-robin in
 * units of `stripe` bytes:
 *     k      = L / stripe                  (stripe unit index)
 *     path   = k % npaths
 *     offset = (k / npaths) * stripe + L % stripe   (offset in that file)
 * so consecutive stripe units land on consecutive paths and a transfer of
 * npaths * stripe bytes keeps every device busy.
 *
 * O_DIRECT: logical offset, length and buffer address of every request must
 * be multiples of NVME_ALIGN; a request that is not is refused before
 * anything is submitted. stripe and bytes_per_path must be multiples of
 * NVME_ALIGN too, and bytes_per_path a multiple of stripe.
 *
 * Requests are split at stripe boundaries into chunks; up to queue_depth
 * chunks are in flight. Submitting queues the request and fills the ring
 * without blocking; nvme_wait() keeps the queue full, reaps completions in
 * batches, resumes short reads and writes, retries EAGAIN/EINTR, and returns
 * the first error of the tag it waits for.
 *
 * Registered buffers: nvme_register_buffers() registers the host staging
 * buffers once; buffer i is registered-buffer index i, and a request whose
 * memory lies inside buffer i uses read_fixed / write_fixed with index i.
 * Other memory still works (plain read/write). Registration first asks
 * the kernel to back each buffer's whole 2 MiB pages with transparent huge
 * pages (MADV_HUGEPAGE, then MADV_COLLAPSE, which moves what is there
 * now; the contents stay): the device gets one scatter-gather entry per
 * physically contiguous run, and on a virtio disk without indirect
 * descriptors (a 256-entry ring) a 1 MiB read into scattered 4 KiB pages
 * takes the whole ring, so reads went one request at a time (869 MB/s
 * against fio's 1523 here; 1.9 GB/s with huge pages). Best effort:
 * huge_bytes says how much it got; NvmeOptions.no_huge_pages turns it off.
 *
 * Fallback: when io_uring_queue_init fails (old kernel, seccomp sandbox) or
 * NvmeOptions.sync asks for it, the engine does the same work with
 * pread/pwrite on the same O_DIRECT files inside submit; `sync` is then 1 and
 * `sync_reason` says why. The API and the errors are the same.
 *
 * Threads: an engine is not shared; use one engine per worker thread (each
 * has its own ring). Several engines may open the same files.
 *
 * Errors are values (NvmeError); nvme_error_format() renders them as e.g.
 *   nvme: write of 1048576 bytes at offset 4096 in /nvme/zinf-rank0.swap
 *   failed: No space left on device */
#ifndef ZINF_NVME_H
#define ZINF_NVME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <liburing.h>

#define NVME_ALIGN 4096u
#define NVME_MAX_PATHS 16
#define NVME_PATH_MAX 512
/* Wait for every outstanding request. */
#define NVME_TAG_ALL UINT32_MAX

typedef struct NvmeError {
    int err;              /* errno value; 0 when there is no error */
    char op[16];          /* "open", "fallocate", "read", "write", "register", "init", "request" */
    char path[NVME_PATH_MAX]; /* file concerned, "" when none */
    uint64_t offset;      /* offset in that file (logical offset for "request") */
    uint64_t len;         /* bytes of the operation */
    char detail[160];     /* what was wrong when errno alone does not say it */
} NvmeError;

typedef enum NvmeStatus { NVME_OK = 0, NVME_FAIL = -1 } NvmeStatus;

/* One stripe-sized piece of a request, in flight or being resumed. */
typedef struct NvmeChunk {
    int is_write;
    int path;            /* index of the swap file */
    int buf_index;       /* registered buffer, -1 for none */
    uint32_t tag;
    uint64_t offset;     /* file offset of the whole chunk */
    uint64_t len;
    uint64_t done;       /* bytes already transferred (short I/O resumes here) */
    uint32_t retries;    /* EAGAIN / EINTR resubmissions of this chunk */
    char *buf;
} NvmeChunk;

/* A request not yet fully handed to the ring. */
typedef struct NvmeRequest {
    int is_write;
    uint32_t tag;
    uint64_t logical;    /* next byte to split off */
    uint64_t left;
    char *buf;
} NvmeRequest;

/* Outstanding bytes and first error of one tag. */
typedef struct NvmeTag {
    uint32_t tag;
    uint64_t outstanding;
    int failed;
    NvmeError error;
} NvmeTag;

typedef struct NvmeStats {
    uint64_t bytes_read, bytes_written;
    uint64_t ops;              /* chunk operations submitted (including resumes) */
    uint64_t short_resumed;    /* short transfers resumed */
    uint64_t again_retried;    /* EAGAIN / EINTR resubmissions */
    uint64_t fixed_ops;        /* operations that used a registered buffer */
    uint64_t submits;          /* io_uring submissions that queued chunks (several chunks each when batched) */
} NvmeStats;

typedef struct NvmeEngine {
    int npaths;
    int rank;
    int fds[NVME_MAX_PATHS];
    char files[NVME_MAX_PATHS][NVME_PATH_MAX];
    uint64_t bytes_per_path;
    uint32_t stripe;
    int queue_depth;
    int sync;                  /* 1: pread/pwrite fallback in use */
    char sync_reason[160];
    int ring_ok, files_registered;
    struct io_uring ring;
    /* In-flight slots (queue_depth of them); user_data is the slot index. */
    NvmeChunk *slots;
    int *free_slots;
    int nfree;
    int inflight;
    /* Requests waiting to be split and submitted (FIFO). */
    NvmeRequest *pending;
    size_t npending, pending_head, pending_cap;
    NvmeTag *tags;
    size_t ntags, tags_cap;
    /* Registered buffers. */
    char **reg_bufs;
    size_t *reg_lens;
    int nreg;
    uint64_t reg_bytes;        /* bytes registered */
    uint64_t huge_bytes;       /* of them, backed by huge pages at registration (0: none, or turned off) */
    /* Test hook: when non-zero, every operation transfers at most this many
     * bytes, so each chunk completes short and must be resumed. */
    uint64_t debug_max_io;
    NvmeStats stats;
    int batching;              /* nvme_batch_begin: submit only queues; nvme_wait / nvme_progress submit them all at once */
} NvmeEngine;

/* How the engines opened from now on work: for comparison and tests, set
 * once at start before any engine opens (the programs take them from
 * ZINF_NVME_SYNC and ZINF_NVME_HUGEPAGES: docs/environment.md). The
 * default, all zero: io_uring, huge pages where the kernel agrees. */
typedef struct NvmeOptions {
    const char *sync;    /* non-NULL: pread/pwrite, not io_uring; the engine's sync_reason */
    bool no_huge_pages;  /* registration leaves the buffers on the pages they have */
} NvmeOptions;
void nvme_set_options(const NvmeOptions *o);

/* Create or open PATH/zinf-rankR.swap in each of `paths`, preallocate it to
 * bytes_per_path and set up a ring of queue_depth entries. On failure the
 * engine holds nothing and *err says which file and why. */
NvmeStatus nvme_open(NvmeEngine *e, const char *const *paths, int npaths, int rank,
                     uint64_t bytes_per_path, uint32_t stripe, int queue_depth, NvmeError *err);

/* Register n host buffers (each address and length a multiple of NVME_ALIGN)
 * for fixed-buffer I/O; buffer i gets registered index i. Replaces any
 * previous registration. Nothing may be in flight. */
NvmeStatus nvme_register_buffers(NvmeEngine *e, void *const *bufs, const size_t *lens, int n,
                                 NvmeError *err);

/* Queue a transfer of len bytes between buf and the logical swap space at
 * logical_offset, under a caller-chosen tag (not NVME_TAG_ALL). Refuses
 * misaligned or out-of-range requests before submitting anything. The
 * buffer must stay valid until nvme_wait() covers the tag. */
NvmeStatus nvme_submit_read(NvmeEngine *e, uint64_t logical_offset, uint64_t len, void *buf,
                            uint32_t tag, NvmeError *err);
NvmeStatus nvme_submit_write(NvmeEngine *e, uint64_t logical_offset, uint64_t len,
                             const void *buf, uint32_t tag, NvmeError *err);

/* Block until every request of `tag` (or all, NVME_TAG_ALL) is done; return
 * the first error met by one of them. */
NvmeStatus nvme_wait(NvmeEngine *e, uint32_t tag, NvmeError *err);
/* Between nvme_batch_begin and the next nvme_wait or nvme_progress,
 * submits only queue their requests; the wait then fills the ring with
 * all of them in one io_uring submission (small transfers pay one system
 * call, not one each) and ends the batch. Without io_uring (sync) it
 * changes nothing. */
void nvme_batch_begin(NvmeEngine *e);

/* Without blocking on any one tag: ends a batch (nvme_batch_begin), hands
 * queued work to the ring, reaps what has completed and, when wait is
 * non-zero and something is in flight, first blocks until at least one
 * transfer completes; slots freed are refilled before it returns. For a
 * caller that keeps several tags in flight and retires each as
 * nvme_tag_done says (then nvme_wait(tag) returns its error at once).
 * Errors here are the ring's own (io_uring_submit_and_wait), not a tag's. */
NvmeStatus nvme_progress(NvmeEngine *e, int wait, NvmeError *err);
/* Whether every request of tag has finished (transferred or failed). */
int nvme_tag_done(const NvmeEngine *e, uint32_t tag);

/* Bytes of outstanding work for tag (NVME_TAG_ALL: all); 0 when done. */
uint64_t nvme_outstanding(const NvmeEngine *e, uint32_t tag);

/* Map a logical offset to (path index, file offset). */
void nvme_map(const NvmeEngine *e, uint64_t logical, int *path, uint64_t *file_offset);

/* Wait for what is in flight, release the ring and close the files; remove
 * the swap files too when unlink_files is non-zero. Safe on a zeroed or
 * already closed engine. */
void nvme_close(NvmeEngine *e, int unlink_files);

/* Render err as one line (no newline) into buf; returns buf. */
const char *nvme_error_format(const NvmeError *err, char *buf, size_t n);

#endif
