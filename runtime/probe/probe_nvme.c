/* probe_nvme: the NVMe part of the probe (probe.h, probe_nvme): transfers
 * through rtio, the io_uring engine the nvme queue runs (O_DIRECT, queue
 * depth QRUN_PIPE_MAX), of each size a plan's transfers have, one at a
 * time and kept QRUN_PIPE_MAX in flight, on every rank at once; the fits
 * and the table of sizes, over the ranks; and a transfer's CPU time. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include "probe.h"
#include "clock.h"
#include "qrun.h"
#include "rtio.h"

typedef struct NvmeRun {
    RtIo *io;
    uint8_t *buf;
    uint64_t bufsz, region;
    bool quick;
} NvmeRun;

/* The sizes timed: the nvme queue's transfers run from a small tensor's
 * 4 KiB block to a few MiB; the table (ProbeNvmeSize) has the first
 * PROBE_NVME_SIZES, timed both alone and pipelined, and the fit of
 * transfers alone has 8 MiB besides. */
static const uint64_t nvme_bytes[] = {4096, 16384, 65536, 262144, 1 << 20, 8 << 20};
enum { NVME_NSERIES = sizeof nvme_bytes / sizeof nvme_bytes[0], NVME_QUICK_SIZES = 2 };
_Static_assert((int)PROBE_NVME_SIZES < (int)NVME_NSERIES, "the table's sizes are the first of the series'");

/* Timed transfers of each size (each one synchronous, as the nvme queue's
 * instructions are), into samples and the table's `alone` (dir 0 reads,
 * 1 writes); offsets cycle through the region. */
static int nvme_series(NvmeRun *u, ProbeResult *r, int dir, ProbeSample *smp, int *ns, char *err, size_t n) {
    int nsizes = u->quick ? NVME_QUICK_SIZES + 1 : NVME_NSERIES;
    for (int k = 0; k < nsizes; k++) {
        uint64_t sz = nvme_bytes[k], off = 0;
        int reps = (int)(u->quick ? 4 : (32u << 20) / sz);
        if (reps < 4) reps = 4;
        if (reps > 64) reps = 64;
        double t[64];
        for (int i = 0; i < reps; i++) {
            if (off + sz > u->region) off = 0;
            double t0 = clock_mono_s();
            int rc = dir ? rtio_write(u->io, off, u->buf, sz, err, n) : rtio_read(u->io, off, u->buf, sz, err, n);
            if (rc) return -1;
            t[i] = clock_mono_s() - t0;
            off += sz;
        }
        smp[*ns] = (ProbeSample){1, (double)sz, probe_median(t, reps)};
        if (k < PROBE_NVME_SIZES) r->nvme_sizes[k].alone[dir] = smp[*ns].secs;
        (*ns)++;
    }
    return 0;
}

static double cpu_seconds(void) {
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u)) return 0;
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/* The CPU time (this process's, user and system) a transfer costs when it
 * runs alone, as most of a plan's do (a read due just before its use):
 * its submission, the wait and the wake-up on its completion. 64 KiB
 * reads, the size of a plan's many small tensors. */
static int nvme_cpu_cost(NvmeRun *u, double *per, char *err, size_t n) {
    int reps = u->quick ? 16 : 128;
    uint64_t sz = 65536, off = 0;
    double c0 = cpu_seconds();
    for (int i = 0; i < reps; i++) {
        if (off + sz > u->region) off = 0;
        if (rtio_read(u->io, off, u->buf, sz, err, n)) return -1;
        off += sz;
    }
    *per = (cpu_seconds() - c0) / reps;
    return 0;
}

/* One round of `total` transfers of sz bytes kept QRUN_PIPE_MAX in flight,
 * as the nvme queue's pipeline keeps them (runtime/exec/qrun.h), each into its
 * own slice of the buffer and of the region; the seconds per transfer
 * into *per. */
static int nvme_round(NvmeRun *u, bool write, uint64_t sz, int total, double *per, char *err, size_t n) {
    int started = 0, retired = 0;
    bool at_once[QRUN_PIPE_MAX] = {false}; /* done by rtio_start itself (plain I/O): nothing in flight */
    double t0 = clock_mono_s();
    while (retired < total) {
        while (started < total && started - retired < QRUN_PIPE_MAX) {
            int slot = started % QRUN_PIPE_MAX;
            RtioReq q = {(uint64_t)slot * sz % u->region, sz, u->buf + (uint64_t)slot * sz % u->bufsz, write};
            int rc = rtio_start(u->io, &q, RTIO_TAG_FIRST + (uint32_t)slot, err, n);
            if (rc < 0) return -1;
            at_once[slot] = rc == 0;
            started++;
        }
        if (rtio_progress(u->io, !at_once[retired % QRUN_PIPE_MAX], err, n) < 0) return -1;
        while (retired < started) { /* retire in order, as the queue does */
            int slot = retired % QRUN_PIPE_MAX;
            int f = at_once[slot] ? 1 : rtio_finished(u->io, RTIO_TAG_FIRST + (uint32_t)slot, err, n);
            if (f < 0) return -1;
            if (f == 0) break;
            retired++;
        }
    }
    *per = (clock_mono_s() - t0) / total;
    return 0;
}

/* Each of the table's sizes pipelined (nvme_round), the median of three
 * rounds, into samples and the table's `drive` (a rank's time per
 * transfer here; probe_nvme makes it the node's). */
static int nvme_pipelined(NvmeRun *u, ProbeResult *r, int dir, ProbeSample *smp, int *ns, char *err, size_t n) {
    int nsizes = u->quick ? NVME_QUICK_SIZES : PROBE_NVME_SIZES;
    for (int k = 0; k < nsizes; k++) {
        uint64_t sz = nvme_bytes[k];
        int total = u->quick ? 2 * QRUN_PIPE_MAX : sz >= (1u << 20) ? 64 : sz >= (256u << 10) ? 128 : 256;
        double t[3];
        int rounds = u->quick ? 1 : 3;
        for (int i = 0; i < rounds; i++)
            if (nvme_round(u, dir == 1, sz, total, &t[i], err, n)) return -1;
        smp[*ns] = (ProbeSample){1, (double)sz, probe_median(t, rounds)};
        r->nvme_sizes[k].bytes = (double)sz;
        r->nvme_sizes[k].drive[dir] = smp[*ns].secs;
        (*ns)++;
    }
    r->nnvme_sizes = nsizes;
    return 0;
}

static int nvme_measure(Comm *c, NvmeRun *u, ProbeResult *r, char *err, size_t n) {
    for (uint64_t off = 0; off < u->region; off += 1 << 20) /* written once, so reads meet real blocks */
        if (rtio_write(u->io, off, u->buf, 1 << 20, err, n)) return -1;
    ProbeSample sw[NVME_NSERIES], sr[NVME_NSERIES], pw[PROBE_NVME_SIZES], pr[PROBE_NVME_SIZES];
    int nw = 0, nr = 0, npw = 0, npr = 0;
    if (comm_barrier(c) != COMM_OK || nvme_series(u, r, 1, sw, &nw, err, n)) return -1;
    if (comm_barrier(c) != COMM_OK || nvme_series(u, r, 0, sr, &nr, err, n)) return -1;
    if (comm_barrier(c) != COMM_OK || nvme_pipelined(u, r, 1, pw, &npw, err, n)) return -1;
    if (comm_barrier(c) != COMM_OK || nvme_pipelined(u, r, 0, pr, &npr, err, n)) return -1;
    if (comm_barrier(c) != COMM_OK || nvme_cpu_cost(u, &r->nvme_cpu, err, n)) return -1;
    if (probe_fit(sw, nw, &r->nvme_write) || probe_fit(sr, nr, &r->nvme_read) || probe_fit(pw, npw, &r->nvme_pipe_write) ||
        probe_fit(pr, npr, &r->nvme_pipe_read)) {
        snprintf(err, n, "nvme: the timings fit no bandwidth");
        return -1;
    }
    return 0;
}

/* Sums (bandwidth) and averages (latency) a per-rank fit over the ranks. */
static int node_fit(Comm *c, ProbeFit *f) {
    double v[2] = {f->bandwidth, f->latency};
    if (comm_allreduce_sum_f64(c, v, 2) != COMM_OK) return -1;
    f->bandwidth = v[0];
    f->latency = v[1] / c->size;
    return 0;
}

/* The table over the ranks: a transfer alone, the mean of the ranks'
 * times; with the queues full, the node's time per transfer, one over the
 * ranks' transfers per second summed. */
static int node_table(Comm *c, ProbeResult *r) {
    double v[4 * PROBE_NVME_SIZES];
    for (int k = 0; k < r->nnvme_sizes; k++)
        for (int dir = 0; dir < 2; dir++) {
            v[4 * k + dir] = r->nvme_sizes[k].alone[dir];
            v[4 * k + 2 + dir] = r->nvme_sizes[k].drive[dir] > 0 ? 1 / r->nvme_sizes[k].drive[dir] : 0;
        }
    if (comm_allreduce_sum_f64(c, v, 4 * r->nnvme_sizes) != COMM_OK) return -1;
    for (int k = 0; k < r->nnvme_sizes; k++)
        for (int dir = 0; dir < 2; dir++) {
            r->nvme_sizes[k].alone[dir] = v[4 * k + dir] / c->size;
            r->nvme_sizes[k].drive[dir] = v[4 * k + 2 + dir] > 0 ? 1 / v[4 * k + 2 + dir] : 0;
        }
    return 0;
}

int probe_nvme(Comm *c, const ProbeOptions *o, ProbeResult *r, char *err, size_t n) {
    if (!o->nvme_dir) return 0;
    RtIo io;
    memset(&io, 0, sizeof io);
    const char *dirs[1] = {o->nvme_dir};
    uint64_t region = o->quick ? 4u << 20 : 64u << 20, bufsz = o->quick ? 8u << 20 : 32u << 20;
    uint8_t *buf = aligned_alloc(NVME_ALIGN, bufsz);
    if (!buf) return snprintf(err, n, "out of memory"), -1;
    memset(buf, 0x5a, bufsz);
    int rc = rtio_open(&io, dirs, 1, c->rank, region, QRUN_PIPE_MAX, err, n);
    if (!rc) rc = rtio_register(&io, buf, bufsz, err, n);
    NvmeRun u = {&io, buf, bufsz, region, o->quick};
    if (!rc) rc = nvme_measure(c, &u, r, err, n);
    if (io.open) rtio_close(&io, 1);
    free(buf);
    /* every rank takes part in the sums, so one rank's failure does not hang the others */
    double bad = rc ? 1 : 0;
    if (comm_allreduce_sum_f64(c, &bad, 1) != COMM_OK) return snprintf(err, n, "%s", comm_last_error(c)), -1;
    if (bad > 0) {
        if (!rc) snprintf(err, n, "nvme: another rank failed");
        return -1;
    }
    if (node_fit(c, &r->nvme_write) || node_fit(c, &r->nvme_read) || node_fit(c, &r->nvme_pipe_write) ||
        node_fit(c, &r->nvme_pipe_read) || comm_allreduce_sum_f64(c, &r->nvme_cpu, 1) != COMM_OK ||
        node_table(c, r))
        return snprintf(err, n, "%s", comm_last_error(c)), -1;
    r->nvme_cpu /= c->size; /* a rank's, the mean over ranks */
    struct statvfs fs;
    uint64_t free_bytes = statvfs(o->nvme_dir, &fs) == 0 ? (uint64_t)fs.f_bavail * fs.f_frsize : 0;
    r->nvme_capacity = free_bytes / 2 / (1u << 20) * (1u << 20);
    if (r->nvme_capacity < (64u << 20)) r->nvme_capacity = 64u << 20;
    snprintf(r->nvme_dir, sizeof r->nvme_dir, "%s", o->nvme_dir);
    r->nvme = true;
    return 0;
}
