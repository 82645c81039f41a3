/* bench_nvme: sequential write and read throughput of the nvme engine
 * (runtime/nvme, the engine under rtio) beside fio (--ioengine=io_uring
 * --direct=1) in the same run, like for like: the same directory, block
 * size, queue depth, O_DIRECT, registered buffers when the engine got them
 * (fio --fixedbufs), and the same file state:
 *   write, fresh file: a new file preallocated with fallocate() and never
 *     written (the engine's nvme_open; fio --fallocate=native on a file it
 *     creates, which fio does not lay out for a write job);
 *   write, overwrite: the same file again, every block written before;
 *   read: that file.
 * The engine and fio alternate, one state at a time, so that the noise of
 * a shared disk (and the write-back of the last writer, which slows
 * whoever runs next) falls on both: the fresh write once each, engine
 * first; overwrite and read twice each, engine, fio, fio, engine, the best
 * of each kept. fio's figure is bw_bytes of its JSON output (bytes over its run
 * time); the engine's is bytes over the time from the first submission to
 * nvme_wait's return.
 *   bench_nvme [--dir D] [--size BYTES] [--bs LIST] [--qd N]
 * Sizes accept K, M, G suffixes (powers of two); --bs takes a comma list.
 * Defaults: build/bench-nvme, 1G, 1M (rtio's stripe unit: plans' transfers
 * reach the engine in 1 MiB chunks), 32 (zinfrun's queue depth). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "main_env.h"
#include "nvme.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t parse_size(const char *s, char **endp) {
    char *end;
    double v = strtod(s, &end);
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30, end++;
    if (endp) *endp = end;
    return (uint64_t)(v * (double)mul);
}

/* One sequential pass; returns MB/s (10^6 bytes) or a negative value on error. */
static double pass(NvmeEngine *e, int is_write, uint64_t size, uint64_t bs, char *buf, uint64_t bufsize) {
    NvmeError err;
    char msg[1024];
    double t0 = now();
    for (uint64_t off = 0, i = 0; off < size; off += bs, i++) {
        char *b = buf + (i * bs) % bufsize;
        NvmeStatus st = is_write ? nvme_submit_write(e, off, bs, b, (uint32_t)(i & 1), &err)
                                 : nvme_submit_read(e, off, bs, b, (uint32_t)(i & 1), &err);
        if (st != NVME_OK) {
            fprintf(stderr, "bench_nvme: %s\n", nvme_error_format(&err, msg, sizeof msg));
            return -1;
        }
    }
    if (nvme_wait(e, NVME_TAG_ALL, &err) != NVME_OK) {
        fprintf(stderr, "bench_nvme: %s\n", nvme_error_format(&err, msg, sizeof msg));
        return -1;
    }
    return (double)size / (now() - t0) / 1e6;
}

/* fio's bandwidth in MB/s for rw=read|write on dir/fio-bench.dat, parsed
 * from its JSON output (jobs[0].read|write.bw_bytes), or -1. */
static double fio(const char *dir, const char *rw, uint64_t size, uint64_t bs, int qd, int fixedbufs) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "fio --name=zinf-bench --filename='%s/fio-bench.dat' --size=%llu --bs=%llu --iodepth=%d "
             "--ioengine=io_uring --direct=1 --fallocate=native --rw=%s%s --output-format=json 2>/dev/null",
             dir, (unsigned long long)size, (unsigned long long)bs, qd, rw, fixedbufs ? " --fixedbufs" : "");
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    if (pclose(p) != 0) return -1;
    char key[32];
    snprintf(key, sizeof key, "\"%s\" : {", rw);
    char *jobs = strstr(out, "\"jobs\" : [");
    char *sec = jobs ? strstr(jobs, key) : NULL;
    char *bw = sec ? strstr(sec, "\"bw_bytes\" : ") : NULL;
    if (!bw) return -1;
    return strtod(bw + strlen("\"bw_bytes\" : "), NULL) / 1e6;
}

/* One block size: fills z[3] (engine) and f[3] (fio, -1 when not run) for
 * fresh write, overwrite, read. Returns 0, or 1 on an engine error. */
static int run_bs(const char *dir, uint64_t size, uint64_t bs, int qd, int have_fio, double z[3], double f[3],
                  char *mode, size_t nmode) {
    char fz[1200], ff[1200];
    snprintf(fz, sizeof fz, "%s/zinf-rank0.swap", dir);
    snprintf(ff, sizeof ff, "%s/fio-bench.dat", dir);
    unlink(fz); /* both fresh */
    unlink(ff);
    NvmeEngine e;
    NvmeError err;
    char msg[1024];
    const char *paths[1] = {dir};
    if (nvme_open(&e, paths, 1, 0, size, (uint32_t)bs, qd, &err) != NVME_OK) {
        fprintf(stderr, "bench_nvme: %s\n", nvme_error_format(&err, msg, sizeof msg));
        return 1;
    }
    uint64_t bufsize = bs * (uint64_t)qd;
    if (bufsize > size) bufsize = size;
    char *buf = aligned_alloc(NVME_ALIGN, bufsize);
    if (!buf) {
        fprintf(stderr, "bench_nvme: out of memory\n");
        nvme_close(&e, 1);
        return 1;
    }
    for (uint64_t i = 0; i < bufsize; i++) buf[i] = (char)(i * 131 + 7);
    void *bufs[1] = {buf};
    size_t lens[1] = {bufsize};
    int fixed = nvme_register_buffers(&e, bufs, lens, 1, &err) == NVME_OK;
    const char *rw[3] = {"write", "write", "read"};
    int bad = 0;
    for (int k = 0; k < 3 && !bad; k++) {
        z[k] = pass(&e, k < 2, size, bs, buf, bufsize);
        bad = z[k] < 0;
        f[k] = have_fio && !bad ? fio(dir, rw[k], size, bs, qd, fixed) : -1;
        if (k == 0 || bad) continue;
        double f2 = have_fio ? fio(dir, rw[k], size, bs, qd, fixed) : -1;
        double z2 = pass(&e, k < 2, size, bs, buf, bufsize);
        bad = z2 < 0;
        if (f2 > f[k] && f[k] > 0) f[k] = f2;
        if (z2 > z[k]) z[k] = z2;
    }
    char huge[160] = "";
    if (fixed)
        snprintf(huge, sizeof huge, ", %llu of %llu MiB of them in huge pages%s", (unsigned long long)(e.huge_bytes >> 20),
                 (unsigned long long)(e.reg_bytes >> 20), e.huge_bytes ? "" : " (ZINF_NVME_HUGEPAGES=0, or refused)");
    snprintf(mode, nmode, "%s%s%s; %llu KiB: %llu operations, %llu with a registered buffer, %llu short "
             "transfers resumed, %llu EAGAIN/EINTR retries",
             e.sync ? "pread/pwrite fallback: " : "io_uring",
             e.sync ? e.sync_reason : fixed ? ", registered buffers (fio --fixedbufs)" : ", plain buffers", huge,
             (unsigned long long)(bs >> 10), (unsigned long long)e.stats.ops,
             (unsigned long long)e.stats.fixed_ops, (unsigned long long)e.stats.short_resumed,
             (unsigned long long)e.stats.again_retried);
    nvme_close(&e, 1);
    unlink(ff);
    free(buf);
    return bad;
}

int main(int argc, char **argv) {
    MainEnv env; /* the ZINF_* variables, as the programs take them (docs/environment.md) */
    char env_err[256];
    if (main_env_read(&env, env_err, sizeof env_err) || main_env_apply(&env, env_err, sizeof env_err)) {
        fprintf(stderr, "%s: %s\n", argv[0], env_err);
        return 2;
    }
    const char *dir = "build/bench-nvme";
    uint64_t size = 1ull << 30, bss[8];
    int nbs = 1, qd = 32;
    bss[0] = 1ull << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = parse_size(argv[++i], NULL);
        else if (!strcmp(argv[i], "--bs") && i + 1 < argc) {
            char *s = argv[++i];
            for (nbs = 0; *s && nbs < 8; nbs++) {
                bss[nbs] = parse_size(s, &s);
                if (*s == ',') s++;
            }
        } else if (!strcmp(argv[i], "--qd") && i + 1 < argc) qd = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_nvme [--dir D] [--size BYTES] [--bs BYTES[,BYTES...]] [--qd N]\n");
            return 2;
        }
    }
    for (int i = 0; i < (nbs ? nbs : 1); i++)
        if (!nbs || bss[i] == 0 || bss[i] % NVME_ALIGN || size < bss[i] || size % bss[i] || bss[i] > UINT32_MAX ||
            qd < 1) {
            fprintf(stderr, "bench_nvme: block sizes must be multiples of 4096 dividing the file size, QD >= 1\n");
            return 2;
        }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_nvme: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int have_fio = system("command -v fio >/dev/null 2>&1") == 0;
    printf("bench_nvme: %s, file %llu MiB, QD %d, O_DIRECT, sequential; MB/s = 10^6 bytes/s\n", dir,
           (unsigned long long)(size >> 20), qd);
    printf("  fresh write once each (engine first); overwrite and read best of 2 (engine, fio, fio, engine)\n");
    printf("  %-8s %-16s %10s %10s %8s\n", "block", "op", "zinf MB/s", "fio MB/s", "zinf/fio");
    const char *ops[3] = {"write, fresh", "write, overwrite", "read"};
    int rc = 0, fio_failed = 0;
    char mode[768] = "";
    for (int b = 0; b < nbs && !rc; b++) {
        double z[3], f[3];
        if (run_bs(dir, size, bss[b], qd, have_fio, z, f, mode, sizeof mode)) {
            rc = 1;
            break;
        }
        char bl[32];
        snprintf(bl, sizeof bl, "%llu KiB", (unsigned long long)(bss[b] >> 10));
        for (int k = 0; k < 3; k++) {
            if (f[k] > 0)
                printf("  %-8s %-16s %10.0f %10.0f %7.0f%%\n", k ? "" : bl, ops[k], z[k], f[k], 100.0 * z[k] / f[k]);
            else {
                printf("  %-8s %-16s %10.0f %10s %8s\n", k ? "" : bl, ops[k], z[k], "-", "-");
                fio_failed |= have_fio;
            }
        }
        printf("  %-8s engine: %s\n", "", mode);
    }
    if (!have_fio) printf("  fio: not installed (command -v fio failed); install it with `make deps`: no peer figure\n");
    else if (fio_failed) printf("  fio: a run failed; no peer figure there\n");
    printf("  target: zinf >= 90%% of fio (printed, not checked)\n");
    return rc;
}
