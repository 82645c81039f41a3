/* tbevents: TensorBoard event files; see tbevents.h for the format. */
#include "tbevents.h"
#include "clock.h"
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct TbWriter {
    FILE *f;
    char path[4096];
};

/* ---- CRC-32C, reflected polynomial 0x82f63b78, table built once ---- */

static uint32_t crc_table[256];
static bool crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
    crc_ready = true;
}

uint32_t tb_crc32c(const void *data, size_t len) {
    if (!crc_ready) crc_init();
    const uint8_t *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t tb_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- protobuf encoding into a bounded buffer ---- */

typedef struct PbBuf {
    uint8_t *p;
    size_t len, cap;
    bool full;
} PbBuf;

static void pb_bytes(PbBuf *b, const void *src, size_t n) {
    if (b->full || n > b->cap - b->len) {
        b->full = true;
        return;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void pb_varint(PbBuf *b, uint64_t v) {
    uint8_t t[10];
    size_t k = 0;
    do {
        t[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(b, t, k);
}

static void pb_key(PbBuf *b, unsigned field, unsigned wire) { pb_varint(b, (uint64_t)field << 3 | wire); }

static void pb_le(PbBuf *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    pb_bytes(b, t, (size_t)n);
}

static void pb_double(PbBuf *b, unsigned field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    pb_key(b, field, 1);
    pb_le(b, u, 8);
}

static void pb_float(PbBuf *b, unsigned field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    pb_key(b, field, 5);
    pb_le(b, u, 4);
}

static void pb_string(PbBuf *b, unsigned field, const char *s) {
    size_t n = strlen(s);
    pb_key(b, field, 2);
    pb_varint(b, n);
    pb_bytes(b, s, n);
}

/* A length-delimited field whose body is `body`. */
static void pb_message(PbBuf *b, unsigned field, const PbBuf *body) {
    pb_key(b, field, 2);
    pb_varint(b, body->len);
    pb_bytes(b, body->p, body->len);
}

/* ---- records ---- */

static int write_record(TbWriter *w, const PbBuf *data, char *err, size_t n) {
    uint8_t head[12], tail[4];
    uint64_t len = data->len;
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
    uint32_t hc = tb_masked_crc(tb_crc32c(head, 8)), dc = tb_masked_crc(tb_crc32c(data->p, data->len));
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(hc >> (8 * i)), tail[i] = (uint8_t)(dc >> (8 * i));
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head || fwrite(data->p, 1, data->len, w->f) != data->len ||
        fwrite(tail, 1, sizeof tail, w->f) != sizeof tail || fflush(w->f) != 0)
        return snprintf(err, n, "cannot write %s: %s", w->path, strerror(errno)), -1;
    return 0;
}

/* Makes every missing directory of path. */
static int make_dirs(const char *path, char *err, size_t n) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return snprintf(err, n, "directory name too long: %s", path), -1;
    for (char *s = buf + 1;; s++) {
        bool end = *s == '\0';
        if (*s == '/' || end) {
            *s = '\0';
            struct stat st;
            if (stat(buf, &st) != 0) {
                if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                    return snprintf(err, n, "cannot create the directory %s: %s", buf, strerror(errno)), -1;
            } else if (!S_ISDIR(st.st_mode)) {
                return snprintf(err, n, "%s is not a directory", buf), -1;
            }
            if (end) break;
            *s = '/';
        }
    }
    return 0;
}

TbWriter *tb_open(const char *dir, char *err, size_t n) {
    if (!dir || !*dir) return snprintf(err, n, "no directory given"), NULL;
    if (make_dirs(dir, err, n)) return NULL;
    TbWriter *w = calloc(1, sizeof *w);
    if (!w) return snprintf(err, n, "out of memory"), NULL;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    if (snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld.zinf", dir, (long long)time(NULL), host,
                 (long)getpid()) >= (int)sizeof w->path) {
        free(w);
        return snprintf(err, n, "directory name too long: %s", dir), NULL;
    }
    /* "x": a name already taken is another writer's file, never appended to */
    if (!(w->f = fopen(w->path, "wbx"))) {
        snprintf(err, n, "cannot create %s: %s", w->path, strerror(errno));
        free(w);
        return NULL;
    }
    uint8_t mem[128];
    PbBuf ev = {mem, 0, sizeof mem, false};
    pb_double(&ev, 1, clock_wall_s());
    pb_key(&ev, 2, 0);
    pb_varint(&ev, 0);
    pb_string(&ev, 3, "brain.Event:2");
    if (write_record(w, &ev, err, n)) {
        fclose(w->f);
        free(w);
        return NULL;
    }
    return w;
}

const char *tb_path(const TbWriter *w) { return w->path; }

int tb_scalars(TbWriter *w, int64_t step, const TbScalar *v, int nv, char *err, size_t n) {
    enum { CAP = 16384 };
    uint8_t evm[CAP], summ[CAP], valm[512];
    PbBuf summary = {summ, 0, CAP, false};
    for (int i = 0; i < nv; i++) {
        PbBuf val = {valm, 0, sizeof valm, false};
        pb_string(&val, 1, v[i].tag);
        pb_float(&val, 2, (float)v[i].value);
        if (val.full) return snprintf(err, n, "tag too long: %.64s", v[i].tag), -1;
        pb_message(&summary, 1, &val);
    }
    PbBuf ev = {evm, 0, CAP, false};
    pb_double(&ev, 1, clock_wall_s());
    pb_key(&ev, 2, 0);
    pb_varint(&ev, (uint64_t)step);
    pb_message(&ev, 5, &summary);
    if (summary.full || ev.full) return snprintf(err, n, "%d scalars do not fit one event", nv), -1;
    return write_record(w, &ev, err, n);
}

int tb_close(TbWriter *w, char *err, size_t n) {
    if (!w) return 0;
    int rc = 0;
    if (fclose(w->f) != 0) rc = -1, snprintf(err, n, "cannot write %s: %s", w->path, strerror(errno));
    free(w);
    return rc;
}
