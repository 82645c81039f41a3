/* plan_pack: the packed form of large plan sections (runtime/plan/plan_pack.h).
 * Tables of every field width and non-table payloads unpack to the same
 * bytes; a regular table packs small; damaged packed payloads (truncated,
 * a flipped byte, a forged or wrong length, a count that does not match)
 * are refused with a reason, never read past; and a real plan (gpt2-small,
 * compiled here) is written with its big sections packed, reads back, and
 * writes the same bytes again. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
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

static void round_trip(const uint8_t *raw, size_t len, const PlanPackLayout *l, size_t *packed) {
    uint8_t *pk, *back;
    size_t pklen, backlen;
    const char *why = NULL;
    ck_assert_msg(plan_pack(raw, len, l, &pk, &pklen, &why), "%s", why);
    ck_assert_msg(plan_unpack(pk, pklen, l, &back, &backlen, &why), "%s", why);
    ck_assert_uint_eq(backlen, len);
    ck_assert(len == 0 || memcmp(back, raw, len) == 0);
    if (packed) *packed = pklen;
    free(pk);
    free(back);
}

START_TEST(tables_and_blobs) {
    const PlanPackLayout layouts[] = {{11, {1, 1, 4, 4, 4, 4, 4, 4, 4, 8, 8}}, {4, {4, 1, 8, 8}}, {1, {4}}, {3, {2, 8, 1}}};
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++)
        for (uint32_t n = 0; n < 5000; n = n * 3 + 1)
            for (int noisy = 0; noisy <= 2; noisy++) {
                size_t len, pk;
                uint8_t *t = table(&layouts[k], n, noisy, &len);
                round_trip(t, len, &layouts[k], &pk);
                if (noisy == 0 && n > 1000) ck_assert_msg(pk * 50 < len, "a regular table of %zu bytes packed to %zu", len, pk);
                /* one byte more or less is not a table: deflated as it is */
                round_trip(t, len - (len > 4), &layouts[k], NULL);
                free(t);
            }
    /* not tables at all */
    const PlanPackLayout none = {0, {0}};
    uint8_t blob[3000];
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (uint8_t)next();
    for (size_t n = 0; n <= sizeof blob; n += 499) round_trip(blob, n, &none, NULL);
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
            ck_assert_msg(plan_pack(raw, len, &(PlanPackLayout){0}, &pk, &pklen, &why), "%s", why);
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
    const PlanPackLayout l = {4, {4, 1, 8, 8}};
    size_t len, pklen, backlen;
    uint8_t *t = table(&l, 3000, 1, &len), *pk, *back;
    const char *why;
    ck_assert(plan_pack(t, len, &l, &pk, &pklen, &why));
    /* every truncation */
    for (size_t cut = 0; cut < pklen; cut += 1 + cut / 7) {
        why = NULL;
        ck_assert_msg(!plan_unpack(pk, cut, &l, &back, &backlen, &why), "a packed payload cut to %zu of %zu bytes unpacked", cut, pklen);
        ck_assert_ptr_nonnull(why);
        ck_assert_ptr_null(back);
    }
    /* flipped bytes of the stream: refused or (a flip zlib cannot see) the same length */
    for (size_t at = 8; at < pklen; at += 1 + at / 5) {
        uint8_t *d = malloc(pklen);
        memcpy(d, pk, pklen);
        d[at] ^= 0x5a;
        if (plan_unpack(d, pklen, &l, &back, &backlen, &why)) {
            ck_assert_uint_eq(backlen, len);
            free(back);
        } else {
            ck_assert_ptr_nonnull(why);
        }
        free(d);
    }
    /* a length that does not match the stream, one beyond any plausible ratio */
    uint8_t *d = malloc(pklen);
    memcpy(d, pk, pklen);
    put_le(d, len + 1, 8);
    ck_assert(!plan_unpack(d, pklen, &l, &back, &backlen, &why));
    ck_assert_str_eq(why, "a packed section's length does not match its stream");
    put_le(d, len - 1, 8);
    ck_assert(!plan_unpack(d, pklen, &l, &back, &backlen, &why));
    ck_assert_str_eq(why, "a packed section's stream is corrupt");
    put_le(d, ((uint64_t)pklen + 1) * PLAN_PACK_MAX_RATIO, 8);
    ck_assert(!plan_unpack(d, pklen, &l, &back, &backlen, &why));
    ck_assert_str_eq(why, "a packed section's unpacked length is implausible");
    put_le(d, UINT64_MAX, 8);
    ck_assert(!plan_unpack(d, pklen, &l, &back, &backlen, &why));
    free(d);
    free(pk);
    free(t);
}
END_TEST

START_TEST(plan_file) {
    ZlModel m;
    const Plan *made = zl_compile(&m, "examples/gpt2-small.zl", &(ZlOptions){.target = "dgx2", .state_tier = -1});
    uint8_t *b1, *b2;
    size_t n1, n2;
    char err[512];
    ck_assert_msg(plan_encode(made, &b1, &n1, err, sizeof err), "%s", err);
    /* the header's sections: some packed (their second word 1), the schedule among them */
    ck_assert_uint_eq(b1[8], PLAN_VERSION);
    size_t pos = 24, raw_sched = 4 + (size_t)made->ninstrs * 46;
    int packed = 0;
    while (pos + 24 <= n1) {
        uint32_t id = b1[pos], form = b1[pos + 4];
        uint64_t plen = 0;
        for (int i = 7; i >= 0; i--) plen = plen << 8 | b1[pos + 8 + i];
        packed += form == 1;
        if (id == 9) ck_assert_msg(form == 1 && plen * 10 < raw_sched, "schedule: form %u, %llu bytes of %zu", form, (unsigned long long)plen, raw_sched);
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
        if (form == 1 && id >= 8 && id <= 10) { /* operands, schedule, deps */
            const PlanPackLayout *l = &table_layout[id - 8];
            uint8_t *rows, *again;
            size_t nrows, nagain;
            const char *why = NULL;
            ck_assert_msg(plan_unpack(b1 + pos + 24, plen, l, &rows, &nrows, &why), "%s", why);
            ck_assert_msg(plan_pack(rows, nrows, l, &again, &nagain, &why), "%s", why);
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
    tcase_add_test(tc, tables_and_blobs);
    tcase_add_test(tc, zlib_stream);
    tcase_add_test(tc, damaged);
    tcase_add_test(tc, plan_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
