/* bench_nvme: sequential write and read throughput of the nvme engine
 * beside fio (--ioengine=io_uring --direct=1) on the same directory, block
 * size and queue depth.
 *   bench_nvme [--dir D] [--size BYTES] [--bs BYTES] [--qd N]
 * Sizes accept K, M, G suffixes (powers of two). Defaults: build/bench-nvme,
 * 1G, 1M, 32. Each write is measured on its second pass, once the file's
 * extents are written (fio lays its file out before measuring too). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "nvme.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30;
    return (uint64_t)(v * (double)mul);
}

/* One sequential pass; returns GB/s or a negative value on error. */
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
    return (double)size / (now() - t0) / 1e9;
}

/* fio's bandwidth in GB/s for rw=read|write, or -1. */
static double fio(const char *dir, const char *rw, uint64_t size, uint64_t bs, int qd) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "fio --name=zinf-bench --filename='%s/fio-bench.dat' --size=%llu --bs=%llu --iodepth=%d "
             "--ioengine=io_uring --direct=1 --rw=%s --output-format=json 2>/dev/null",
             dir, (unsigned long long)size, (unsigned long long)bs, qd, rw);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    if (pclose(p) != 0) return -1;
    char key[32];
    snprintf(key, sizeof key, "\"%s\" : {", rw);
    char *sec = strstr(out, key);
    char *bw = sec ? strstr(sec, "\"bw_bytes\" : ") : NULL;
    if (!bw) return -1;
    return strtod(bw + strlen("\"bw_bytes\" : "), NULL) / 1e9;
}

int main(int argc, char **argv) {
    const char *dir = "build/bench-nvme";
    uint64_t size = 1ull << 30, bs = 1ull << 20;
    int qd = 32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--bs") && i + 1 < argc) bs = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--qd") && i + 1 < argc) qd = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_nvme [--dir D] [--size BYTES] [--bs BYTES] [--qd N]\n");
            return 2;
        }
    }
    if (bs == 0 || bs % NVME_ALIGN || size < bs || size % bs || qd < 1) {
        fprintf(stderr, "bench_nvme: block size must be a multiple of 4096 dividing the file size, QD >= 1\n");
        return 2;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_nvme: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
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
    double w0 = pass(&e, 1, size, bs, buf, bufsize); /* lays the extents out */
    double w = pass(&e, 1, size, bs, buf, bufsize);
    double r = pass(&e, 0, size, bs, buf, bufsize);
    int sync = e.sync;
    char reason[160];
    snprintf(reason, sizeof reason, "%s", e.sync_reason);
    nvme_close(&e, 1);
    free(buf);
    if (w0 < 0 || w < 0 || r < 0) return 1;

    printf("bench_nvme: %s, file %llu MiB, block %llu KiB, QD %d, engine %s%s\n", dir,
           (unsigned long long)(size >> 20), (unsigned long long)(bs >> 10), qd,
           sync ? "pread/pwrite fallback: " : "io_uring", sync ? reason : fixed ? " (registered buffers)" : "");
    int have_fio = system("command -v fio >/dev/null 2>&1") == 0;
    double fw = -1, fr = -1;
    if (have_fio) {
        fw = fio(dir, "write", size, bs, qd);
        fr = fio(dir, "read", size, bs, qd);
        char fn[1024];
        snprintf(fn, sizeof fn, "%s/fio-bench.dat", dir);
        unlink(fn);
    }
    printf("  %-6s %12s %12s %8s\n", "op", "zinf GB/s", "fio GB/s", "ratio");
    const char *ops[2] = {"write", "read"};
    double z[2] = {w, r}, f[2] = {fw, fr};
    for (int i = 0; i < 2; i++) {
        if (f[i] > 0)
            printf("  %-6s %12.3f %12.3f %7.0f%%\n", ops[i], z[i], f[i], 100.0 * z[i] / f[i]);
        else
            printf("  %-6s %12.3f %12s %8s\n", ops[i], z[i], "-", "-");
    }
    if (!have_fio) printf("  fio: not installed (command -v fio failed); install it with `make deps`\n");
    else if (fw < 0 || fr < 0) printf("  fio: run failed; no peer figure\n");
    printf("  target: zinf >= 90%% of fio\n");
    return 0;
}
