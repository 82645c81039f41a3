#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "plan.h"
#include "plan_fixture_plan.h"

static uint64_t rd64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}
static void wr64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* offset of section number s's header in an encoded plan */
static size_t section_at(const uint8_t *buf, int s) {
    size_t pos = 24;
    for (int i = 0; i < s; i++) pos += 24 + rd64(buf + pos + 8);
    return pos;
}
enum { S_META, S_TARGET, S_TRAIN, S_TENSORS, S_OPS, S_SHARDS, S_ARENAS, S_BUFFERS, S_OPERANDS, S_SCHEDULE, S_DEPS, S_KERNELS };

static void encode(const Plan *p, uint8_t **buf, size_t *len) {
    char err[256];
    ck_assert_msg(plan_encode(p, buf, len, err, sizeof err), "%s", err);
}

START_TEST(round_trip_bytes) {
    Plan *p = fx_plan("host", 2, 2, 2, -1);
    /* a kernel blob, as codegen will add */
    static const uint8_t cubin[] = {0x7f, 'E', 'L', 'F', 0, 1, 2, 3};
    PlanKernel k = {"linear_fwd_64x256", "sm_90", "regs=64 smem=49152", cubin, sizeof cubin};
    p->kernels = &k;
    p->nkernels = 1;
    p->source = "examples/fixture.zl";
    uint8_t *a, *b;
    size_t na, nb;
    encode(p, &a, &na);
    char err[256];
    Plan *q = plan_decode(a, na, "x.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    encode(q, &b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(a, b, na) == 0);
    ck_assert_uint_eq(q->ninstrs, p->ninstrs);
    ck_assert_uint_eq(q->nbuffers, p->nbuffers);
    ck_assert_str_eq(q->tensors[5].name, p->tensors[5].name);
    ck_assert_str_eq(q->kernels[0].name, "linear_fwd_64x256");
    ck_assert_uint_eq(q->kernels[0].size, sizeof cubin);
    ck_assert(memcmp(q->kernels[0].data, cubin, sizeof cubin) == 0);
    ck_assert_str_eq(q->source, "examples/fixture.zl");
    ck_assert_int_eq(q->target.gpus_per_node, 2);
    ck_assert(q->train.lr == p->train.lr);
    p->kernels = NULL;
    p->nkernels = 0;
    free(a);
    free(b);
    plan_free(p);
    plan_free(q);
}
END_TEST

START_TEST(file_round_trip) {
    Plan *p = fx_plan("dgx2", 0, 1, 0, -1);
    char path[] = "/tmp/zinf-test-plan-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[256];
    ck_assert_msg(plan_write(p, path, err, sizeof err), "%s", err);
    Plan *q = plan_read(path, err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert_int_eq(q->ranks, 16);
    ck_assert_str_eq(q->target.nvme_paths[0], "/local_nvme");
    uint8_t *a, *b;
    size_t na, nb;
    encode(p, &a, &na);
    encode(q, &b, &nb);
    ck_assert(na == nb && memcmp(a, b, na) == 0);
    free(a);
    free(b);
    remove(path);
    plan_free(p);
    plan_free(q);
    ck_assert_ptr_null(plan_read("/nonexistent/dir/m.plan", err, sizeof err));
    ck_assert_str_eq(err, "/nonexistent/dir/m.plan: cannot open: No such file or directory");
}
END_TEST

START_TEST(every_flipped_byte_is_caught) {
    Plan *p = fx_plan("host", 1, 1, 1, TIER_GPU);
    uint8_t *a;
    size_t n;
    encode(p, &a, &n);
    char err[256];
    size_t caught = 0;
    for (size_t i = 0; i < n; i++) {
        a[i] ^= 0x10;
        Plan *q = plan_decode(a, n, "m.plan", err, sizeof err);
        if (q) {
            plan_free(q);
            ck_abort_msg("a flipped byte at %zu of %zu was not noticed", i, n);
        }
        ck_assert(strstr(err, "m.plan: ") == err);
        caught++;
        a[i] ^= 0x10;
    }
    ck_assert_uint_eq(caught, n);
    /* and every truncation */
    for (size_t len = 0; len < n; len += 1 + len / 64) {
        Plan *q = plan_decode(a, len, "m.plan", err, sizeof err);
        ck_assert_msg(q == NULL, "truncated to %zu bytes, not noticed", len);
    }
    free(a);
    plan_free(p);
}
END_TEST

START_TEST(messages) {
    Plan *p = fx_plan("host", 2, 1, 1, -1);
    uint8_t *a;
    size_t n;
    encode(p, &a, &n);
    char err[256];
    size_t s = section_at(a, S_SCHEDULE);
    a[s + 24 + 3] ^= 1;
    ck_assert_ptr_null(plan_decode(a, n, "model.plan", err, sizeof err));
    ck_assert_str_eq(err, "model.plan: section 'schedule' checksum mismatch (file corrupt?)");
    a[s + 24 + 3] ^= 1;
    a[0] = 'X';
    ck_assert_ptr_null(plan_decode(a, n, "model.plan", err, sizeof err));
    ck_assert_str_eq(err, "model.plan: not a zinf plan (bad magic)");
    a[0] = 'Z';
    ck_assert_ptr_null(plan_decode(a, n - 1, "model.plan", err, sizeof err));
    ck_assert_str_eq(err, "model.plan: section 'kernels' runs past the end of the file (truncated?)");
    /* a forged count with a valid checksum */
    size_t t = section_at(a, S_TENSORS);
    uint64_t len = rd64(a + t + 8);
    a[t + 24] = a[t + 25] = a[t + 26] = a[t + 27] = 0xff;
    wr64(a + t + 16, plan_fnv1a64(a + t + 24, len));
    ck_assert_ptr_null(plan_decode(a, n, "model.plan", err, sizeof err));
    ck_assert_str_eq(err, "model.plan: section 'tensors' malformed: a count exceeds what the section holds");
    free(a);
    /* a forged index with a valid checksum */
    p->deps[0] = 999999;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "model.plan", err, sizeof err));
    ck_assert_str_eq(err, "model.plan: dependency 0: instruction 999999 out of range (file corrupt?)");
    free(a);
    p->deps[0] = 0;
    p->buffers[3].arena = 9;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "model.plan", err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "arena 9 out of range (file corrupt?)"));
    free(a);
    plan_free(p);
}
END_TEST

START_TEST(version_and_helpers) {
    Plan *p = plan_new();
    uint8_t *a;
    size_t n;
    encode(p, &a, &n);
    char err[256];
    Plan *q = plan_decode(a, n, "e.plan", err, sizeof err);
    ck_assert_msg(q == NULL, "an empty plan has no ranks");
    ck_assert_str_eq(err, "e.plan: rank count 0 (file corrupt?)");
    a[8] = 7;
    wr64(a + 16, plan_fnv1a64(a, 16));
    ck_assert_ptr_null(plan_decode(a, n, "e.plan", err, sizeof err));
    ck_assert_str_eq(err, "e.plan: plan format version 7, this build reads version 1 (recompile the model)");
    free(a);
    plan_free(p);
    char b[32];
    ck_assert_str_eq(plan_bytes_str(1536ull << 30, b, sizeof b), "1.50 TiB");
    ck_assert_str_eq(plan_bytes_str(100, b, sizeof b), "100 B");
    /* FNV-1a 64 reference values */
    ck_assert_uint_eq(plan_fnv1a64("", 0), 0xcbf29ce484222325ull);
    ck_assert_uint_eq(plan_fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
    ck_assert_uint_eq(plan_fnv1a64("foobar", 6), 0x85944171f73967e8ull);
}
END_TEST

int main(void) {
    Suite *s = suite_create("plan");
    TCase *t = tcase_create("file");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, round_trip_bytes);
    tcase_add_test(t, file_round_trip);
    tcase_add_test(t, every_flipped_byte_is_caught);
    tcase_add_test(t, messages);
    tcase_add_test(t, version_and_helpers);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
