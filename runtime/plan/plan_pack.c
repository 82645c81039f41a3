/* plan_pack: columns of field differences, then a zstd frame or a deflate
 * stream (plan_pack.h). The Makefile always has both libraries; a build of
 * the plan layer elsewhere without a header (tests/gpu/check_kernels.sh on
 * a bare GPU machine) writes what it can (plan.c asks plan_pack_has) and
 * refuses the other form, saying why. */
#include "plan_pack.h"
#include <stdlib.h>
#include <string.h>
#if defined(__has_include) && !defined(PLAN_PACK_NO_ZLIB)
#if __has_include(<zlib.h>)
#define PLAN_PACK_ZLIB 1
#include <zlib.h>
#endif
#endif
#if defined(__has_include) && !defined(PLAN_PACK_NO_ZSTD)
#if __has_include(<zstd.h>)
#define PLAN_PACK_ZSTDLIB 1
#include <zstd.h>
#endif
#endif
#if defined(PLAN_PACK_ZLIB) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PLAN_PACK_SSSE3 1 /* stream_adler32's vector form, chosen at run time */
#include <tmmintrin.h>
#endif

bool plan_pack_has(PlanPackForm form) {
#ifdef PLAN_PACK_ZLIB
    if (form == PLAN_PACK_DEFLATE) return true;
#endif
#ifdef PLAN_PACK_ZSTDLIB
    if (form == PLAN_PACK_ZSTD) return true;
#endif
    (void)form;
    return false;
}

static const char *missing(PlanPackForm form) {
    return form == PLAN_PACK_ZSTD ? "a zstd-packed section, and this build has no zstd (rebuild with libzstd, or compile the model "
                                    "with this build)"
                                  : "a deflate-packed section, and this build has no zlib (rebuild with zlib, or compile the model "
                                    "with this build)";
}

/* Little-endian values of n bytes: on a little-endian host a copy, which
 * the compiler makes one load or store where n is a constant. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline uint64_t get_le(const uint8_t *b, int n) {
    uint64_t v = 0;
    memcpy(&v, b, (size_t)n);
    return v;
}

static inline void put_le(uint8_t *b, uint64_t v, int n) { memcpy(b, &v, (size_t)n); }
#else
static uint64_t get_le(const uint8_t *b, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static void put_le(uint8_t *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
}
#endif

static size_t record_bytes(const PlanPackLayout *l) {
    size_t r = 0;
    for (int f = 0; l && f < l->nfields; f++) r += l->width[f];
    return r;
}

/* Whether raw is a u32 count and exactly that many records of l. */
static bool is_table(const uint8_t *raw, size_t len, const PlanPackLayout *l, uint64_t *count) {
    size_t rec = record_bytes(l);
    if (!rec || len < 4) return false;
    *count = get_le(raw, 4);
    return (len - 4) % rec == 0 && (len - 4) / rec == *count;
}

/* One field of n records of rec bytes (at offset off) as a column of
 * differences (forward), or back; W the field's width, a constant in each
 * instance so that a value is one load and one store. */
#define COLUMN_LOOP(W)                                                                  \
    for (uint64_t i = 0; i < n; i++) {                                                  \
        if (forward) {                                                                  \
            uint64_t v = get_le(in + 4 + i * rec + off, W);                             \
            put_le(out + 4 + off * n + i * (uint64_t)(W), (v - prev) & mask, W);        \
            prev = v;                                                                   \
        } else {                                                                        \
            uint64_t v = (get_le(col + i * (uint64_t)(W), W) + prev) & mask;            \
            put_le(out + 4 + i * rec + off, v, W);                                      \
            prev = v;                                                                   \
        }                                                                               \
    }

/* Rows to columns, each value minus the row before's (mod 2^(8 width)), or back. */
static void columns(const uint8_t *in, uint8_t *out, uint64_t n, const PlanPackLayout *l, bool forward) {
    size_t rec = record_bytes(l), off = 0;
    memcpy(out, in, 4);
    const uint8_t *col_base = forward ? out + 4 : in + 4;
    for (int f = 0; f < l->nfields; f++) {
        int w = l->width[f];
        uint64_t mask = w == 8 ? UINT64_MAX : ((uint64_t)1 << (8 * w)) - 1, prev = 0;
        const uint8_t *col = col_base + off * n; /* columns are stored one after another */
        switch (w) {
        case 1: COLUMN_LOOP(1) break;
        case 2: COLUMN_LOOP(2) break;
        case 4: COLUMN_LOOP(4) break;
        case 8: COLUMN_LOOP(8) break;
        default: COLUMN_LOOP(w) break;
        }
        off += (size_t)w;
    }
}
#undef COLUMN_LOOP

#ifdef PLAN_PACK_ZLIB
/* The zlib stream's Adler-32 of buf, continuing from adler. zlib's own
 * reads a byte at a time; the big sections' (hundreds of MB) cost a tenth
 * of a second of the writer's time there. On x86 with SSSE3 32 bytes are
 * summed at once: s1 by sums of absolute differences from zero, s2 by the
 * bytes times their weights (32 down to 1) plus 32 times s1 before each
 * block, reduced mod 65521 every 5552 bytes as zlib does (no sum can
 * overflow in between); elsewhere, and for the tail, zlib's adler32. The
 * value is zlib's: tests/unit/test_plan_pack.c compares the streams. */
enum { ADLER_BASE = 65521, ADLER_NMAX = 5552 };
#ifdef PLAN_PACK_SSSE3
__attribute__((target("ssse3"))) static uint32_t adler32_ssse3(uint32_t adler, const uint8_t *buf, size_t len) {
    uint32_t s1 = adler & 0xffff, s2 = adler >> 16;
    size_t blocks = len / 32;
    const __m128i tap1 = _mm_setr_epi8(32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17);
    const __m128i tap2 = _mm_setr_epi8(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    const __m128i zero = _mm_setzero_si128(), ones = _mm_set1_epi16(1);
    while (blocks) {
        size_t n = blocks < ADLER_NMAX / 32 ? blocks : ADLER_NMAX / 32;
        blocks -= n;
        __m128i ps = _mm_set_epi32(0, 0, 0, (int)(s1 * (uint32_t)n)), v1 = zero, v2 = _mm_set_epi32(0, 0, 0, (int)s2);
        for (size_t k = 0; k < n; k++, buf += 32) {
            __m128i b1 = _mm_loadu_si128((const __m128i *)buf), b2 = _mm_loadu_si128((const __m128i *)(buf + 16));
            ps = _mm_add_epi32(ps, v1); /* s1 before this block, 32 times each (the shift below) */
            v1 = _mm_add_epi32(v1, _mm_add_epi32(_mm_sad_epu8(b1, zero), _mm_sad_epu8(b2, zero)));
            v2 = _mm_add_epi32(v2, _mm_madd_epi16(_mm_maddubs_epi16(b1, tap1), ones));
            v2 = _mm_add_epi32(v2, _mm_madd_epi16(_mm_maddubs_epi16(b2, tap2), ones));
        }
        v2 = _mm_add_epi32(v2, _mm_slli_epi32(ps, 5));
        v1 = _mm_add_epi32(v1, _mm_shuffle_epi32(v1, _MM_SHUFFLE(2, 3, 0, 1)));
        v1 = _mm_add_epi32(v1, _mm_shuffle_epi32(v1, _MM_SHUFFLE(1, 0, 3, 2)));
        v2 = _mm_add_epi32(v2, _mm_shuffle_epi32(v2, _MM_SHUFFLE(2, 3, 0, 1)));
        v2 = _mm_add_epi32(v2, _mm_shuffle_epi32(v2, _MM_SHUFFLE(1, 0, 3, 2)));
        s1 = (s1 + (uint32_t)_mm_cvtsi128_si32(v1)) % ADLER_BASE;
        s2 = (uint32_t)_mm_cvtsi128_si32(v2) % ADLER_BASE;
    }
    return (uint32_t)adler32_z((s2 << 16) | s1, buf, len % 32);
}
#endif

static uint32_t stream_adler32(uint32_t adler, const uint8_t *buf, size_t len) {
#ifdef PLAN_PACK_SSSE3
    if (__builtin_cpu_supports("ssse3")) return adler32_ssse3(adler, buf, len);
#endif
    return (uint32_t)adler32_z(adler, buf, len);
}

/* src[0..len) as a zlib stream (level 1) after the u64 length in a
 * malloc'd *out. */
static bool deflate_payload(const uint8_t *src, size_t len, uint8_t **out, size_t *outlen) {
    uLong bound = compressBound((uLong)len);
    uint8_t *buf = malloc(8 + (size_t)bound);
    if (!buf) return false;
    put_le(buf, (uint64_t)len, 8);
    z_stream z;
    memset(&z, 0, sizeof z);
    /* level 1: the differences are runs already; a higher level costs
     * seconds on a 300 MB schedule for a few percent. The zlib stream is
     * written around a raw deflate: its header (0x78 0x01: a 32 KiB window,
     * level 1), the deflate stream deflateInit(1) makes, then the Adler-32
     * of the input, big-endian (stream_adler32: faster than deflate's),
     * summed a chunk at a time right after deflate has read it, while it
     * is in cache. (deflate's output does not depend on how its input is
     * handed to it without a flush: the stream is compress2's,
     * test_plan_pack checks it.) */
    enum { CHUNK = 256 << 10 };
    uint32_t adler = 1;
    bool ok = deflateInit2(&z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK;
    if (ok) {
        buf[8] = 0x78;
        buf[9] = 0x01;
        z.next_in = (Bytef *)src;
        z.next_out = buf + 10;
        z.avail_out = (uInt)0;
        size_t in_left = len, out_left = (size_t)bound - 6; /* the bound counts the header and the checksum */
        int rc = Z_OK;
        while (rc == Z_OK) {
            uInt ic = in_left > CHUNK ? CHUNK : (uInt)in_left, oc = out_left > UINT32_MAX ? UINT32_MAX : (uInt)out_left;
            const uint8_t *from = z.next_in;
            z.avail_in = ic;
            z.avail_out = oc;
            rc = deflate(&z, in_left == ic ? Z_FINISH : Z_NO_FLUSH);
            adler = stream_adler32(adler, from, ic - z.avail_in);
            in_left -= ic - z.avail_in;
            out_left -= oc - z.avail_out;
            if (rc == Z_BUF_ERROR && !out_left) break;
        }
        ok = rc == Z_STREAM_END;
        if (ok) {
            uint32_t a = adler;
            uint8_t *end = buf + 10 + z.total_out;
            end[0] = (uint8_t)(a >> 24), end[1] = (uint8_t)(a >> 16), end[2] = (uint8_t)(a >> 8), end[3] = (uint8_t)a;
        }
        *outlen = 8 + 2 + (size_t)z.total_out + 4;
        deflateEnd(&z);
    }
    if (!ok) free(buf);
    else *out = buf;
    return ok;
}

/* The zlib stream in[0..len) into buf[0..n): false with why unless it
 * fills buf exactly and ends exactly at len. */
static bool inflate_payload(const uint8_t *in, size_t len, uint8_t *buf, uint64_t n, const char **why) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit(&z) != Z_OK) return *why = "out of memory unpacking a section", false;
    size_t in_left = len, out_left = (size_t)n;
    z.next_in = (Bytef *)in;
    z.next_out = buf;
    int rc = Z_OK;
    while (rc == Z_OK) {
        uInt ic = in_left > UINT32_MAX ? UINT32_MAX : (uInt)in_left, oc = out_left > UINT32_MAX ? UINT32_MAX : (uInt)out_left;
        z.avail_in = ic;
        z.avail_out = oc;
        rc = inflate(&z, Z_NO_FLUSH);
        in_left -= ic - z.avail_in;
        out_left -= oc - z.avail_out;
        if (rc == Z_OK && ic == z.avail_in && oc == z.avail_out) rc = Z_BUF_ERROR; /* no progress: truncated */
    }
    inflateEnd(&z);
    if (rc == Z_STREAM_END && !in_left && !out_left) return true;
    return *why = rc == Z_STREAM_END ? "a packed section's length does not match its stream" : "a packed section's stream is corrupt",
           false;
}
#endif

#ifdef PLAN_PACK_ZSTDLIB
/* src[0..len) as one zstd frame (level 3, zstd's default, with its
 * content size and checksum) after the u64 length in a malloc'd *out. On
 * the columns of zi-100t's plan it packs 4 to 5 times as fast as deflate at
 * level 1, to less than half the bytes (docs/plan-format.md); level 1 is
 * no faster there and packs a short period (a ramp's columns) ten times
 * worse. */
static bool zstd_payload(const uint8_t *src, size_t len, uint8_t **out, size_t *outlen) {
    size_t bound = ZSTD_compressBound(len);
    if (ZSTD_isError(bound)) return false;
    uint8_t *buf = malloc(8 + bound);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    bool ok = buf && cc && !ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3)) &&
              !ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1));
    size_t n = ok ? ZSTD_compress2(cc, buf + 8, bound, src, len) : 0;
    ok = ok && !ZSTD_isError(n);
    ZSTD_freeCCtx(cc);
    if (!ok) {
        free(buf);
        return false;
    }
    put_le(buf, (uint64_t)len, 8);
    *out = buf;
    *outlen = 8 + n;
    return true;
}

/* Whether in[0..len) is one zstd frame of exactly len bytes declaring n
 * bytes: checked before the n bytes are allocated. */
static bool zstd_frame_ok(const uint8_t *in, size_t len, uint64_t n, const char **why) {
    unsigned long long declared = ZSTD_getFrameContentSize(in, len);
    if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN)
        return *why = "a packed section's stream is corrupt", false;
    if (declared != n) return *why = "a packed section's length does not match its stream", false;
    size_t frame = ZSTD_findFrameCompressedSize(in, len);
    if (ZSTD_isError(frame)) return *why = "a packed section's stream is corrupt", false;
    if (frame != len) return *why = "a packed section's length does not match its stream", false;
    return true;
}

/* The zstd frame in[0..len) (zstd_frame_ok) into buf[0..n), its checksum
 * right. */
static bool unzstd_payload(const uint8_t *in, size_t len, uint8_t *buf, uint64_t n, const char **why) {
    size_t got = ZSTD_decompress(buf, (size_t)n, in, len);
    if (ZSTD_isError(got)) return *why = "a packed section's stream is corrupt", false;
    if (got != n) return *why = "a packed section's length does not match its stream", false;
    return true;
}
#endif

bool plan_pack(const uint8_t *raw, size_t len, const PlanPackLayout *l, PlanPackForm form, uint8_t **out, size_t *outlen,
               const char **why) {
    *out = NULL;
    if (!plan_pack_has(form)) return *why = missing(form), false;
    uint64_t n;
    uint8_t *cols = NULL;
    const uint8_t *src = raw;
    if (is_table(raw, len, l, &n)) {
        if (!(cols = malloc(len ? len : 1))) return *why = "out of memory packing a section", false;
        columns(raw, cols, n, l, true);
        src = cols;
    }
    bool ok = false;
    (void)src, (void)outlen; /* unused in a build with neither library */
#ifdef PLAN_PACK_ZSTDLIB
    if (form == PLAN_PACK_ZSTD) ok = zstd_payload(src, len, out, outlen);
#endif
#ifdef PLAN_PACK_ZLIB
    if (form == PLAN_PACK_DEFLATE) ok = deflate_payload(src, len, out, outlen);
#endif
    free(cols);
    if (!ok) return *why = "out of memory packing a section", false;
    return true;
}

bool plan_unpack(const uint8_t *in, size_t len, const PlanPackLayout *l, PlanPackForm form, uint8_t **raw, size_t *rawlen,
                 const char **why) {
    *raw = NULL;
    if (!plan_pack_has(form)) return *why = missing(form), false;
    if (len < 8) return *why = "a packed section shorter than its length field", false;
    uint64_t n = get_le(in, 8);
    uint64_t ratio = form == PLAN_PACK_ZSTD ? PLAN_PACK_MAX_RATIO_ZSTD : PLAN_PACK_MAX_RATIO;
    if (n > (uint64_t)1 << 40 || n / ratio > len) return *why = "a packed section's unpacked length is implausible", false;
#ifdef PLAN_PACK_ZSTDLIB
    if (form == PLAN_PACK_ZSTD && !zstd_frame_ok(in + 8, len - 8, n, why)) return false;
#endif
    uint8_t *buf = malloc(n ? (size_t)n : 1);
    if (!buf) return *why = "out of memory unpacking a section", false;
    bool ok = false;
#ifdef PLAN_PACK_ZSTDLIB
    if (form == PLAN_PACK_ZSTD) ok = unzstd_payload(in + 8, len - 8, buf, n, why);
#endif
#ifdef PLAN_PACK_ZLIB
    if (form == PLAN_PACK_DEFLATE) ok = inflate_payload(in + 8, len - 8, buf, n, why);
#endif
    if (!ok) {
        free(buf);
        return false;
    }
    uint64_t count;
    if (record_bytes(l) && is_table(buf, (size_t)n, l, &count)) {
        uint8_t *rows = malloc(n ? (size_t)n : 1);
        if (!rows) {
            free(buf);
            return *why = "out of memory unpacking a section", false;
        }
        columns(buf, rows, count, l, false);
        free(buf);
        buf = rows;
    }
    *raw = buf;
    *rawlen = (size_t)n;
    return true;
}
