/* safetensors: the reader takes good files and checkpoint directories
 * (single file, sharded with an index) and refuses every kind of malformed
 * header with its exact message, naming the file and the tensor; dtype
 * conversions; the header writer's output reads back. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "half.h"
#include "safetensors.h"

static char dir[128], path[400];
static char err[4096], want[4096];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/zinf-test-st-%d", (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
}
static void teardown(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
}

static void write_raw(const char *p, const void *data, size_t len) {
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* A file: the header length of json, json, then data_len bytes 0, 1, 2... */
static void write_st(const char *p, const char *json, size_t data_len) {
    size_t hl = strlen(json);
    uint8_t *b = malloc(8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, json, hl);
    for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (uint8_t)i;
    write_raw(p, b, 8 + hl + data_len);
    free(b);
}

/* st_open refuses p with exactly `want`. */
static void refused(const char *p) {
    StFile f;
    ck_assert_msg(st_open(&f, p, err, sizeof err) == -1, "accepted %s", p);
    ck_assert_msg(!strcmp(err, want), "\n  got      %s\n  expected %s", err, want);
    st_close(&f);
}

static void bad_header(const char *json, size_t data_len, const char *msg) {
    write_st(path, json, data_len);
    snprintf(want, sizeof want, "%s: %s", path, msg);
    refused(path);
}

START_TEST(reads_a_good_file) {
    float w[6] = {1, -2, 3.5f, 0, -0.0f, 1e-3f};
    uint16_t b[3] = {half_f32_to_bf16(1.5f), half_f32_to_bf16(-2), half_f32_to_bf16(0.25f)};
    uint16_t h[2] = {half_f32_to_f16(0.5f), half_f32_to_f16(-3)};
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"h\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[30,34]},"
                       "\"e\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[34,34]}}";
    size_t hl = strlen(json);
    uint8_t buf[512];
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    memcpy(buf + 8 + hl, w, 24);
    memcpy(buf + 8 + hl + 24, b, 6);
    memcpy(buf + 8 + hl + 30, h, 4);
    write_raw(path, buf, 8 + hl + 34);
    StFile f;
    ck_assert_msg(st_open(&f, path, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(f.n, 4);
    ck_assert_uint_eq(f.data_start, 8 + hl);
    const StEntry *e = st_find(&f, "w");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->dtype, ST_F32);
    ck_assert_int_eq(e->rank, 2);
    ck_assert_int_eq(e->shape[1], 3);
    ck_assert_uint_eq(e->numel, 6);
    ck_assert_uint_eq(e->offset, 8 + hl);
    float got[6], conv[6];
    ck_assert_int_eq(st_read(&f, e->offset, got, e->bytes, err, sizeof err), 0);
    ck_assert_mem_eq(got, w, 24);
    const StEntry *eb = st_find(&f, "b");
    uint16_t raw[3];
    ck_assert_int_eq(st_read(&f, eb->offset, raw, eb->bytes, err, sizeof err), 0);
    st_to_f32(eb->dtype, raw, 1, conv, 3);
    ck_assert(conv[0] == 1.5f && conv[1] == -2 && conv[2] == 0.25f);
    st_to_f32(eb->dtype, raw, 2, conv, 2); /* strided: elements 0 and 2 */
    ck_assert(conv[0] == 1.5f && conv[1] == 0.25f);
    const StEntry *eh = st_find(&f, "h");
    ck_assert_int_eq(st_read(&f, eh->offset, raw, eh->bytes, err, sizeof err), 0);
    st_to_f32(eh->dtype, raw, 1, conv, 2);
    ck_assert(conv[0] == 0.5f && conv[1] == -3);
    ck_assert_ptr_null(st_find(&f, "x"));
    ck_assert_int_eq(st_find(&f, "e")->bytes, 0);
    st_close(&f);
    /* the file shrinks under the reader */
    ck_assert_int_eq(st_open(&f, path, err, sizeof err), 0);
    ck_assert_int_eq(truncate(path, (off_t)(8 + hl + 10)), 0);
    e = st_find(&f, "w");
    ck_assert_int_eq(st_read(&f, e->offset, got, e->bytes, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: the file ends at byte %zu, before the data its header promises (did it shrink?)", path, 8 + hl + 10);
    ck_assert_str_eq(err, want);
    st_close(&f);
}
END_TEST

START_TEST(dtypes) {
    for (int d = 0; d < ST_NDTYPES; d++) {
        const char *nm = st_dtype_name((StDtype)d);
        ck_assert_int_eq(st_dtype_parse(nm, strlen(nm)), d);
        ck_assert_uint_gt(st_dtype_size((StDtype)d), 0);
    }
    ck_assert_int_eq(st_dtype_parse("F3", 2), -1);
    ck_assert_int_eq(st_dtype_parse("F322", 4), -1);
    ck_assert_int_eq(st_dtype_from_plan(1), ST_F32);
    ck_assert_int_eq(st_dtype_from_plan(2), ST_BF16);
    ck_assert_int_eq(st_dtype_from_plan(3), ST_F16);
    ck_assert_int_eq(st_dtype_from_plan(4), -1);
    ck_assert_int_eq(st_dtype_to_plan(ST_BF16), 2);
    ck_assert_int_eq(st_dtype_to_plan(ST_I64), -1);
    float in[4] = {1.0f / 3, -2.5f, 65504, 1e-8f}, out[4];
    uint16_t h[4];
    st_from_f32(ST_BF16, in, h, 4);
    st_to_f32(ST_BF16, h, 1, out, 4);
    for (int i = 0; i < 4; i++) ck_assert(out[i] == half_bf16_to_f32(half_f32_to_bf16(in[i])));
    st_from_f32(ST_F16, in, h, 4);
    st_to_f32(ST_F16, h, 1, out, 4);
    for (int i = 0; i < 4; i++) ck_assert(out[i] == half_f16_to_f32(half_f32_to_f16(in[i])));
}
END_TEST

START_TEST(malformed_files) {
    snprintf(want, sizeof want, "%s: 3 bytes: too short for a safetensors file (an 8-byte header length, the header, the data)", path);
    write_raw(path, "abc", 3);
    refused(path);
    uint8_t big[16] = {0, 0, 0, 0, 0, 1, 0, 0}; /* 2^40 */
    write_raw(path, big, sizeof big);
    snprintf(want, sizeof want,
             "%s: header length 1099511627776 is absurd (the format allows at most 100000000 bytes): not a safetensors file?", path);
    refused(path);
    uint8_t past[18] = {100};
    write_raw(path, past, sizeof past);
    snprintf(want, sizeof want, "%s: header length 100 runs past the end of the file (18 bytes): truncated?", path);
    refused(path);
    snprintf(want, sizeof want, "%s/nothing.safetensors: No such file or directory", dir);
    char missing[400];
    snprintf(missing, sizeof missing, "%s/nothing.safetensors", dir);
    refused(missing);
    snprintf(want, sizeof want, "%s: not a regular file", dir);
    refused(dir);
}
END_TEST

START_TEST(malformed_headers) {
    bad_header("{\"w\": }", 0, "header: line 1, column 7: unexpected '}'");
    bad_header("[1]", 0, "header: a JSON array, not an object");
    bad_header("{\"__metadata__\": [], \"w\": {}}", 0, "header: __metadata__ is an array, not an object");
    bad_header("{\"w\": 3}", 0, "tensor 'w': a number, not an object");
    bad_header("{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "tensor 'w': no \"dtype\" string");
    bad_header("{\"w\": {\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "tensor 'w': unknown dtype 'Q4'");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, "tensor 'w': no \"shape\" array");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
               "tensor 'w': 9 axes (at most 8)");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1, -2], \"data_offsets\": [0, 4]}}", 4,
               "tensor 'w': shape[1] is not a non-negative integer");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4,
               "tensor 'w': shape[0] is not a non-negative integer");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 2], \"data_offsets\": [0, 4]}}", 4,
               "tensor 'w': the shape's size overflows");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4,
               "tensor 'w': \"data_offsets\" is not a pair of non-negative integers");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, \"4\"]}}", 4,
               "tensor 'w': \"data_offsets\" is not a pair of non-negative integers");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
               "tensor 'w': data_offsets [8, 4] end before they begin");
    bad_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24,
               "tensor 'w': data_offsets [0, 20] hold 20 bytes, but shape [2, 3] of F32 needs 24");
    bad_header("{\"w\": {\"dtype\": \"F64\", \"shape\": [4611686018427387904], \"data_offsets\": [0, 8]}}", 8,
               "tensor 'w': data_offsets [0, 8] hold 8 bytes, but shape [4611686018427387904] of F64 needs more than 2^64");
    /* a truncated file: the last tensor's data is not all there */
    bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
               " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}", 20,
               "tensor 'b': data_offsets [8, 24] run past the end of the file (20 bytes of data after the header): "
               "the file is truncated or the header lies");
    bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
               " \"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [4, 12]}}", 12,
               "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
               " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 16,
               "tensor 'a' is named twice in the header");
    /* zero-sized tensors anywhere overlap nothing */
    write_st(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                   " \"z\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [4, 4]}}", 8);
    StFile f;
    ck_assert_msg(st_open(&f, path, err, sizeof err) == 0, "%s", err);
    st_close(&f);
}
END_TEST

/* The in-memory parser gives the same verdicts. */
START_TEST(parse_in_memory) {
    const char *json = "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
    uint8_t buf[128];
    size_t hl = strlen(json);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    StFile f;
    ck_assert_int_eq(st_parse(&f, "mem", buf, 8 + hl, 8 + hl + 8, err, sizeof err), 0);
    ck_assert_uint_eq(st_find(&f, "w")->offset, 8 + hl);
    st_close(&f);
    ck_assert_int_eq(st_parse(&f, "mem", buf, 8 + hl, 8 + hl + 4, err, sizeof err), -1);
    ck_assert_str_eq(err, "mem: tensor 'w': data_offsets [0, 8] run past the end of the file (4 bytes of data after the header): "
                          "the file is truncated or the header lies");
    ck_assert_int_eq(st_parse(&f, "mem", buf, 10, 8 + hl + 8, err, sizeof err), -1);
    snprintf(want, sizeof want, "mem: only 2 of the header's %zu bytes given", hl);
    ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(header_writer_round_trip) {
    StOutTensor t[3] = {{.name = "a.weight", .dtype = ST_F32, .rank = 2, .shape = {3, 5}},
                        {.name = "quote\"and\\slash\x01", .dtype = ST_BF16, .rank = 1, .shape = {7}},
                        {.name = "scalar", .dtype = ST_F16, .rank = 0}};
    const char *meta[] = {"format", "pt", "who", "zinf \"test\""};
    uint8_t *hdr;
    size_t hl;
    ck_assert_int_eq(st_header_build(t, 3, meta, 2, &hdr, &hl, err, sizeof err), 0);
    ck_assert_uint_eq(hl % 8, 0);
    ck_assert_uint_eq(t[1].offset, 60);
    ck_assert_uint_eq(t[1].bytes, 14);
    ck_assert_uint_eq(t[2].offset, 74);
    ck_assert_uint_eq(t[2].bytes, 2);
    size_t total = hl + 76;
    uint8_t *file = calloc(1, total);
    memcpy(file, hdr, hl);
    StFile f;
    ck_assert_msg(st_parse(&f, "w", file, total, total, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(f.n, 3);
    const StEntry *e = st_find(&f, "quote\"and\\slash\x01");
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->offset, hl + 60);
    ck_assert_int_eq(e->dtype, ST_BF16);
    ck_assert_int_eq(st_find(&f, "scalar")->rank, 0);
    st_close(&f);
    free(file);
    free(hdr);
}
END_TEST

static void mk(const char *name, const char *json, size_t data) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_st(p, json, data);
}
static void mk_text(const char *name, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_raw(p, text, strlen(text));
}

static void set_refused(const char *p) {
    StSet s;
    ck_assert_msg(st_set_open(&s, p, err, sizeof err) == -1, "accepted %s", p);
    ck_assert_msg(!strcmp(err, want), "\n  got      %s\n  expected %s", err, want);
    st_set_close(&s);
}

START_TEST(checkpoint_directories) {
    StSet s;
    snprintf(want, sizeof want, "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
    set_refused(dir);
    mk_text("pytorch_model.bin", "x");
    snprintf(want, sizeof want,
             "%s: neither model.safetensors nor model.safetensors.index.json is there (only pytorch_model.bin: zinf reads "
             "safetensors; save it with safe_serialization=True)", dir);
    set_refused(dir);
    mk("model.safetensors", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8);
    ck_assert_msg(st_set_open(&s, dir, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.nfiles, 1);
    ck_assert_ptr_nonnull(st_set_find(&s, "a"));
    st_set_close(&s);
    /* a single file given directly */
    char one[600];
    snprintf(one, sizeof one, "%s/model.safetensors", dir);
    ck_assert_int_eq(st_set_open(&s, one, err, sizeof err), 0);
    st_set_close(&s);
    /* sharded */
    mk("model-00001-of-00002.safetensors", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8);
    mk("model-00002-of-00002.safetensors", "{\"b\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]},"
                                           " \"c\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [4, 6]}}", 6);
    mk_text("model.safetensors.index.json", "{\"metadata\": {\"total_size\": 14}, \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                                            " \"b\": \"model-00002-of-00002.safetensors\", \"c\": \"model-00002-of-00002.safetensors\"}}");
    ck_assert_msg(st_set_open(&s, dir, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.nfiles, 2);
    ck_assert_uint_eq(s.n, 3);
    const StEntry *c = st_set_find(&s, "c");
    ck_assert_ptr_nonnull(c);
    snprintf(want, sizeof want, "%s/model-00002-of-00002.safetensors", dir);
    ck_assert_str_eq(st_set_file(&s, c)->path, want);
    ck_assert_ptr_null(st_set_find(&s, "d"));
    st_set_close(&s);
    char ip[600];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", dir);
    /* the index names a shard that is not there */
    mk_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00003-of-00003.safetensors\"}}");
    snprintf(want, sizeof want, "%s names the shard model-00003-of-00003.safetensors, which does not exist", ip);
    set_refused(dir);
    /* the index places a tensor in a shard that does not hold it */
    mk_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\"}}");
    snprintf(want, sizeof want, "%s: the index puts 'a' in model-00002-of-00002.safetensors, which does not hold it", ip);
    set_refused(dir);
    mk_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../model.safetensors\"}}");
    snprintf(want, sizeof want, "%s: weight_map gives 'a' a file that is not a plain file name in the directory", ip);
    set_refused(dir);
    mk_text("model.safetensors.index.json", "{\"metadata\": {}}");
    snprintf(want, sizeof want, "%s: no \"weight_map\" object", ip);
    set_refused(dir);
    mk_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\",");
    snprintf(want, sizeof want, "%s: line 1, column 57: expected a string key in an object", ip);
    set_refused(dir);
    /* one name in two shards */
    mk("model-00002-of-00002.safetensors", "{\"a\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4);
    mk_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", \"x\": \"model-00002-of-00002.safetensors\"}}");
    snprintf(want, sizeof want, "%s: the index puts 'x' in model-00002-of-00002.safetensors, which does not hold it", ip);
    set_refused(dir);
    mk_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00002-of-00002.safetensors\"}}");
    mk("model-00002-of-00002.safetensors", "{\"a\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]},"
                                           " \"b\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [4, 6]}}", 6);
    snprintf(want, sizeof want, "tensor 'a' is in both %s/model-00001-of-00002.safetensors and %s/model-00002-of-00002.safetensors", dir, dir);
    set_refused(dir);
    /* a broken shard is named with its own path */
    mk("model-00002-of-00002.safetensors", "{\"b\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 2);
    snprintf(want, sizeof want, "%s/model-00002-of-00002.safetensors: tensor 'b': data_offsets [0, 4] run past the end of the file "
                                "(2 bytes of data after the header): the file is truncated or the header lies", dir);
    set_refused(dir);
    snprintf(want, sizeof want, "%s/none: No such file or directory", dir);
    char none[600];
    snprintf(none, sizeof none, "%s/none", dir);
    set_refused(none);
}
END_TEST

int main(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, reads_a_good_file);
    tcase_add_test(tc, dtypes);
    tcase_add_test(tc, malformed_files);
    tcase_add_test(tc, malformed_headers);
    tcase_add_test(tc, parse_in_memory);
    tcase_add_test(tc, header_writer_round_trip);
    tcase_add_test(tc, checkpoint_directories);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
