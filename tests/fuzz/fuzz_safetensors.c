/* fuzz_safetensors: a .safetensors file's bytes through the reader zinfrun
 * --init uses (runtime/io/safetensors.c): st_open on the bytes as a file (an
 * anonymous in-memory file, memfd, so nothing touches the disk), which
 * checks the header length, the JSON header (runtime/base/json.c), dtypes,
 * shapes against byte ranges, ranges inside the file and not overlapping,
 * and names given once; then, for a file it accepts, every entry is found
 * again by name (st_find) and its bytes read with st_read (at most
 * FUZZ_MAX_READ of each) and converted to f32 (st_to_f32) for the first
 * elements. st_parse runs on the same bytes as a header in memory and must
 * agree with st_open. A crash, a sanitizer report, or an entry the checks
 * let through whose range is outside the file or whose read fails (abort)
 * is a finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fuzz_common.h"
#include "safetensors.h"

enum { FUZZ_MAX_READ = 1 << 16, FUZZ_MAX_CONVERT = 64 };

static int input_fd = -1;
static char input_path[64];

static int write_input(const uint8_t *data, size_t size) {
    if (input_fd < 0) {
        input_fd = memfd_create("st-input", 0);
        if (input_fd < 0) return -1;
        snprintf(input_path, sizeof input_path, "/proc/self/fd/%d", input_fd);
    }
    if (ftruncate(input_fd, 0) != 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(input_fd, data + done, size - done, (off_t)done);
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    return 0;
}

static void finding(const char *what, const char *name) {
    fprintf(stderr, "fuzz_safetensors: %s (%s)\n", what, name ? name : "?");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (write_input(data, size) != 0) return 0;
    char err[512] = "";
    StFile f;
    int rc = st_open(&f, input_path, err, sizeof err);
    fprintf(fuzz_sink(), "safetensors: %s\n", rc == 0 ? "ok" : err);
    if (rc == 0) {
        static _Alignas(8) uint8_t buf[FUZZ_MAX_READ];
        static float conv[FUZZ_MAX_CONVERT];
        for (size_t i = 0; i < f.n; i++) {
            const StEntry *e = &f.entries[i];
            if (st_find(&f, e->name) != e) finding("st_find does not find an entry", e->name);
            if (e->offset < f.data_start || e->offset > size || e->bytes > size - e->offset)
                finding("an entry outside the file", e->name);
            if (e->numel * st_dtype_size(e->dtype) != e->bytes) finding("an entry's size and bytes disagree", e->name);
            uint64_t n = e->bytes < sizeof buf ? e->bytes : sizeof buf;
            if (st_read(&f, e->offset, buf, n, err, sizeof err) != 0) finding(err, e->name);
            uint64_t elems = n / st_dtype_size(e->dtype);
            if (elems > FUZZ_MAX_CONVERT) elems = FUZZ_MAX_CONVERT;
            if (e->dtype == ST_F32 || e->dtype == ST_BF16 || e->dtype == ST_F16)
                st_to_f32(e->dtype, buf, (int64_t)st_dtype_size(e->dtype), conv, (int64_t)elems);
            fprintf(fuzz_sink(), "  %s %s rank %d %llu B\n", e->name, st_dtype_name(e->dtype), e->rank,
                    (unsigned long long)e->bytes);
        }
    }
    st_close(&f);
    /* the same checks on the bytes in memory */
    if (size >= 8) {
        StFile m;
        int mrc = st_parse(&m, "mem", data, size, size, err, sizeof err);
        if (mrc != rc) finding("st_parse and st_open disagree", NULL);
        st_close(&m);
    }
    return 0;
}
