/* plan_pack: the packed form of large plan sections (runtime/plan/plan_pack.h).
 * In both forms (zstd frames, zlib streams): tables of every field width
 * and non-table payloads unpack to the same bytes; a regular table packs
 * small; damaged packed payloads (truncated, a flipped byte, a forged or
 * wrong length, bytes after the stream) are refused with a reason, never
 * read past. A zstd payload is one frame libzstd's own decoder reads back,
 * a zlib one the stream compress2 makes. A real plan (gpt2-small, compiled
 * here) is written as version 10 with its big sections zstd frames, reads
 * back, and writes the same bytes again. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include "plan.h"
#include "plan_pack.h"
#include "zl_fixture.h"


static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static void put_le(uint8_t *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* A table of n records of layout l: each field a ramp with a stride (as a
 * schedule's ids and offsets are) plus noise in `noisy` of them. */
static uint8_t *table(const PlanPackLayout *l, uint32_t n, int noisy, size_t *len) {
    size_t rec = 0;
    for (int f = 0; f < l->nfields; f++) rec += l->width[f];
    *len = 4 + (size_t)n * rec;
    uint8_t *b = malloc(*len);
    put_le(b, n, 4);
    for (uint32_t i = 0; i < n; i++) {
        size_t off = 4 + (size_t)i * rec;
        for (int f = 0; f < l->nfields; f++) {
            uint64_t v = (uint64_t)i * (uint64_t)(f + 3) + (f < noisy ? next() % 1000 : 0);
            put_le(b + off, v, l->width[f]);
            off += l->width[f];
        }
    }
    return b;
}

static const PlanPackForm forms[2] = {PLAN_PACK_ZSTD, PLAN_PACK_DEFLATE};

static void round_trip(const uint8_t *raw, size_t len, const PlanPackLayout *l, PlanPackForm form, size_t *packed) {
    uint8_t *pk, *back;
    size_t pklen, backlen;
    const char *why = NULL;
    ck_assert_msg(plan_pack(raw, len, l, form, &pk, &pklen, &why), "%s", why);
    ck_assert_msg(plan_unpack(pk, pklen, l, form, &back, &backlen, &why), "%s", why);
    ck_assert_uint_eq(backlen, len);
    ck_assert(len == 0 || memcmp(back, raw, len) == 0);
    if (packed) *packed = pklen;
    free(pk);
    free(back);
}

START_TEST(tables_and_blobs) {
    PlanPackForm form = forms[_i];
    ck_assert(plan_pack_has(form));
    const PlanPackLayout layouts[] = {{11, {1, 1, 4, 4, 4, 4, 4, 4, 4, 8, 8}}, {4, {4, 1, 8, 8}}, {1, {4}}, {3, {2, 8, 1}}};
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++)
        for (uint32_t n = 0; n < 5000; n = n * 3 + 1)
            for (int noisy = 0; noisy <= 2; noisy++) {
                size_t len, pk;
                uint8_t *t = table(&layouts[k], n, noisy, &len);
                round_trip(t, len, &layouts[k], form, &pk);
                if (noisy == 0 && n > 1000) ck_assert_msg(pk * 50 < len, "a regular table of %zu bytes packed to %zu", len, pk);
                /* one byte more or less is not a table: compressed as it is */
                round_trip(t, len - (len > 4), &layouts[k], form, NULL);
                free(t);
            }
    /* not tables at all */
    const PlanPackLayout none = {0, {0}};
    uint8_t blob[3000];
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (uint8_t)next();
    for (size_t n = 0; n <= sizeof blob; n += 499) round_trip(blob, n, &none, form, NULL);
}
END_TEST

/* A zstd payload is the raw length and then one frame that declares the
 * raw length and carries its checksum, which libzstd's own decoder reads
 * back to the raw bytes: random bytes, runs, and bytes of 255. */
START_TEST(zstd_frame) {
    const size_t lens[] = {PLAN_PACK_MIN, PLAN_PACK_MIN + 31, 100000, 1000003, 3u << 20};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int kind = 0; kind < 3; kind++) {
            size_t len = lens[li];
            uint8_t *raw = malloc(len), *back = malloc(len);
            for (size_t i = 0; i < len; i++) raw[i] = kind == 0 ? (uint8_t)next() : kind == 1 ? (uint8_t)(i / 300 % 7) : 255;
            uint8_t *pk;
            size_t pklen;
            const char *why = NULL;
            ck_assert_msg(plan_pack(raw, len, &(PlanPackLayout){0}, PLAN_PACK_ZSTD, &pk, &pklen, &why), "%s", why);
            uint64_t n = 0;
            for (int i = 7; i >= 0; i--) n = n << 8 | pk[i];
            ck_assert_uint_eq(n, len);
            ck_assert_uint_eq(ZSTD_getFrameContentSize(pk + 8, pklen - 8), len);
            ck_assert_uint_eq(ZSTD_findFrameCompressedSize(pk + 8, pklen - 8), pklen - 8);
            ck_assert_msg(pk[8 + 4] & 0x04, "length %zu, kind %d: the frame has no checksum", len, kind); /* frame header descriptor */
            ck_assert_uint_eq(ZSTD_decompress(back, len, pk + 8, pklen - 8), len);
            ck_assert_msg(memcmp(back, raw, len) == 0, "length %zu, kind %d: libzstd reads other bytes", len, kind);
            ck_assert_msg((len + pklen - 1) / pklen <= PLAN_PACK_MAX_RATIO_ZSTD, "a frame beyond the reader's ratio");
            free(pk);
            free(back);
            free(raw);
        }
}
END_TEST

/* A packed payload is the raw length and then, byte for byte, the stream
 * zlib's compress2 makes at level 1 (plan_pack writes the header and the
 * Adler-32 around a raw deflate itself): random bytes, runs, and bytes of
 * 255 (the largest sums), of lengths about the 32-byte blocks and the
 * 5552-byte stretches the checksum is reduced over. */
START_TEST(zlib_stream) {
    const size_t lens[] = {PLAN_PACK_MIN, PLAN_PACK_MIN + 31, 5552 * 7 + 33, 100000, 1000003};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int kind = 0; kind < 3; kind++) {
            size_t len = lens[li];
            uint8_t *raw = malloc(len);
            for (size_t i = 0; i < len; i++) raw[i] = kind == 0 ? (uint8_t)next() : kind == 1 ? (uint8_t)(i / 300 % 7) : 255;
            uint8_t *pk;
            size_t pklen;
            const char *why = NULL;
            ck_assert_msg(plan_pack(raw, len, &(PlanPackLayout){0}, PLAN_PACK_DEFLATE, &pk, &pklen, &why), "%s", why);
            uLongf zlen = compressBound((uLong)len);
            uint8_t *z = malloc(zlen);
            ck_assert_int_eq(compress2(z, &zlen, raw, (uLong)len, 1), Z_OK);
            ck_assert_uint_eq(pklen, 8 + zlen);
            ck_assert_msg(memcmp(pk + 8, z, zlen) == 0, "length %zu, kind %d: not zlib's stream", len, kind);
            free(z);
            free(pk);
            free(raw);
        }
}
END_TEST

START_TEST(damaged) {
    PlanPackForm form = forms[_i];
    const PlanPackLayout l = {4, {4, 1, 8, 8}};
    size_t len, pklen, backlen;
    uint8_t *t = table(&l, 3000, 1, &len), *pk, *back;
    const char *why;
    ck_assert(plan_pack(t, len, &l, form, &pk, &pklen, &why));
    /* every truncation */
    for (size_t cut = 0; cut < pklen; cut += 1 + cut / 7) {
        why = NULL;
        ck_assert_msg(!plan_unpack(pk, cut, &l, form, &back, &backlen, &why), "a packed payload cut to %zu of %zu bytes unpacked", cut,
                      pklen);
        ck_assert_ptr_nonnull(why);
        ck_assert_ptr_null(back);
    }
    /* flipped bytes of the stream: refused or (a flip the checksum cannot see) the same length */
    for (size_t at = 8; at < pklen; at += 1 + at / 5) {
        uint8_t *d = malloc(pklen);
        memcpy(d, pk, pklen);
        d[at] ^= 0x5a;
        if (plan_unpack(d, pklen, &l, form, &back, &backlen, &why)) {
            ck_assert_uint_eq(backlen, len);
            free(back);
        } else {
            ck_assert_ptr_nonnull(why);
        }
        free(d);
    }
    /* bytes after the stream */
    uint8_t *d = malloc(pklen + 4);
    memcpy(d, pk, pklen);
    memcpy(d + pklen, "\x28\xb5\x2f\xfd", 4);
    ck_assert(!plan_unpack(d, pklen + 4, &l, form, &back, &backlen, &why));
    ck_assert_ptr_nonnull(why);
    /* a length that does not match the stream, one beyond any plausible ratio */
    put_le(d, len + 1, 8);
    ck_assert(!plan_unpack(d, pklen, &l, form, &back, &backlen, &why));
    ck_assert_str_eq(why, "a packed section's length does not match its stream");
    put_le(d, len - 1, 8);
    ck_assert(!plan_unpack(d, pklen, &l, form, &back, &backlen, &why));
    /* deflate finds its output full first, zstd reads the frame's declared length */
    ck_assert_str_eq(why, form == PLAN_PACK_ZSTD ? "a packed section's length does not match its stream" : "a packed section's stream is corrupt");
    put_le(d, ((uint64_t)pklen + 1) * (form == PLAN_PACK_ZSTD ? PLAN_PACK_MAX_RATIO_ZSTD : PLAN_PACK_MAX_RATIO), 8);
    ck_assert(!plan_unpack(d, pklen, &l, form, &back, &backlen, &why));
    ck_assert_str_eq(why, "a packed section's unpacked length is implausible");
    put_le(d, UINT64_MAX, 8);
    ck_assert(!plan_unpack(d, pklen, &l, form, &back, &backlen, &why));
    free(d);
    free(pk);
    free(t);
}
END_TEST

/* The version follows the big tables' sizes: a schedule of 357
 * instructions (16426 bytes raw, PLAN_PACK_MIN or more) makes the file
 * version 10 with the schedule a zstd frame; one of 356 (16380 bytes)
 * leaves it version 6, the schedule raw. */
START_TEST(version_by_size) {
    for (uint32_t n = 356; n <= 357; n++) {
        Plan *p = plan_new();
        p->ninstrs = n;
        p->instrs = ARENA_NEWN(&p->arena, PlanInstr, n);
        ck_assert_ptr_nonnull(p->instrs);
        for (uint32_t i = 0; i < n; i++) p->instrs[i].bytes = (uint64_t)i * 4096;
        uint8_t *b;
        size_t len;
        char err[256];
        ck_assert_msg(plan_encode(p, &b, &len, err, sizeof err), "%s", err);
        ck_assert_uint_eq(b[8], n == 357 ? PLAN_VERSION_ZSTD : PLAN_VERSION);
        size_t pos = 24;
        while (b[pos] != 9) {
            uint64_t plen = 0;
            for (int i = 7; i >= 0; i--) plen = plen << 8 | b[pos + 8 + i];
            pos += 24 + plen;
        }
        ck_assert_uint_eq(b[pos + 4], n == 357 ? PLAN_PACK_ZSTD : 0);
        free(b);
        plan_free(p);
    }
}
END_TEST

START_TEST(plan_file) {
    ZlModel m;
    const Plan *made = zl_compile(&m, "examples/gpt2-small.zl", &(ZlOptions){.target = "dgx2", .state_tier = -1});
    uint8_t *b1, *b2;
    size_t n1, n2;
    char err[512];
    ck_assert_msg(plan_encode(made, &b1, &n1, err, sizeof err), "%s", err);
    /* version 10: the header's sections some packed as zstd frames (their second word 2), the schedule among them */
    ck_assert_uint_eq(b1[8], PLAN_VERSION_ZSTD);
    size_t pos = 24, raw_sched = 4 + (size_t)made->ninstrs * 46;
    int packed = 0;
    while (pos + 24 <= n1) {
        uint32_t id = b1[pos], form = b1[pos + 4];
        uint64_t plen = 0;
        for (int i = 7; i >= 0; i--) plen = plen << 8 | b1[pos + 8 + i];
        packed += form == PLAN_PACK_ZSTD;
        ck_assert_uint_ne(form, PLAN_PACK_DEFLATE);
        if (id == 9) ck_assert_msg(form == PLAN_PACK_ZSTD && plen * 10 < raw_sched, "schedule: form %u, %llu bytes of %zu", form, (unsigned long long)plen, raw_sched);
        pos += 24 + plen;
    }
    ck_assert_uint_eq(pos, n1);
    ck_assert_int_ge(packed, 3);
    /* the writer makes the big tables' columns straight from the plan: the
     * packed payloads are those plan_pack makes of their raw records */
    static const PlanPackLayout table_layout[3] = {{4, {4, 1, 8, 8}}, {11, {1, 1, 4, 4, 4, 4, 4, 4, 4, 8, 8}}, {1, {4}}};
    unsigned compared = 0; /* bit id - 8 */
    for (pos = 24; pos + 24 <= n1;) {
        uint32_t id = b1[pos], form = b1[pos + 4];
        uint64_t plen = 0;
        for (int i = 7; i >= 0; i--) plen = plen << 8 | b1[pos + 8 + i];
        if (form == PLAN_PACK_ZSTD && id >= 8 && id <= 10) { /* operands, schedule, deps */
            const PlanPackLayout *l = &table_layout[id - 8];
            uint8_t *rows, *again;
            size_t nrows, nagain;
            const char *why = NULL;
            ck_assert_msg(plan_unpack(b1 + pos + 24, plen, l, PLAN_PACK_ZSTD, &rows, &nrows, &why), "%s", why);
            ck_assert_msg(plan_pack(rows, nrows, l, PLAN_PACK_ZSTD, &again, &nagain, &why), "%s", why);
            ck_assert_msg(nagain == plen && memcmp(again, b1 + pos + 24, plen) == 0, "section %u: written columns differ from plan_pack's", id);
            free(rows);
            free(again);
            compared |= 1u << (id - 8);
        }
        pos += 24 + plen;
    }
    ck_assert_uint_eq(compared & 3, 3); /* the operands and the schedule (the deps of a small plan may stay raw) */
    Plan *p = plan_decode(b1, n1, "gpt2-small.plan", err, sizeof err);
    ck_assert_msg(p != NULL, "%s", err);
    ck_assert(p->ninstrs == made->ninstrs && p->noperands == made->noperands && p->ndeps == made->ndeps);
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *x = &p->instrs[i], *y = &made->instrs[i];
        ck_assert(x->op == y->op && x->queue == y->queue && x->arg == y->arg && x->opnd == y->opnd && x->nopnd == y->nopnd &&
                  x->dep == y->dep && x->ndeps == y->ndeps && x->bytes == y->bytes && x->flops == y->flops);
    }
    for (uint32_t i = 0; i < p->noperands; i++)
        ck_assert(p->operands[i].buffer == made->operands[i].buffer && p->operands[i].offset == made->operands[i].offset &&
                  p->operands[i].bytes == made->operands[i].bytes && p->operands[i].mode == made->operands[i].mode);
    ck_assert(memcmp(p->deps, made->deps, sizeof *p->deps * p->ndeps) == 0);
    /* and writes the same file again */
    ck_assert_msg(plan_encode(p, &b2, &n2, err, sizeof err), "%s", err);
    ck_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
    plan_free(p);
    free(b2);
    /* a flipped byte inside the packed schedule is caught by the section's checksum */
    pos = 24;
    while (b1[pos] != 9) {
        uint64_t plen = 0;
        for (int i = 7; i >= 0; i--) plen = plen << 8 | b1[pos + 8 + i];
        pos += 24 + plen;
    }
    b1[pos + 24 + 40] ^= 1;
    ck_assert_ptr_null(plan_decode(b1, n1, "gpt2-small.plan", err, sizeof err));
    ck_assert_str_eq(err, "gpt2-small.plan: section 'schedule' checksum mismatch (file corrupt?)");
    free(b1);
    zl_free(&m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("plan_pack");
    TCase *tc = tcase_create("plan_pack");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, tables_and_blobs, 0, 2);
    tcase_add_test(tc, zstd_frame);
    tcase_add_test(tc, zlib_stream);
    tcase_add_loop_test(tc, damaged, 0, 2);
    tcase_add_test(tc, version_by_size);
    tcase_add_test(tc, plan_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
