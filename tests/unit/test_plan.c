#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "plan.h"
#include "plan_fixture_plan.h"
#include "plan_fixture_launches.h"

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
enum { S_META, S_TARGET, S_TRAIN, S_TENSORS, S_OPS, S_SHARDS, S_ARENAS, S_BUFFERS, S_OPERANDS, S_SCHEDULE, S_DEPS, S_KERNELS,
       S_LAUNCHES, S_LAUNCH_ARGS, S_OP_CODE, S_TILE_CODE, S_HF, S_GEMMS, S_COUNT };

static void encode(const Plan *p, uint8_t **buf, size_t *len) {
    char err[256];
    ck_assert_msg(plan_encode(p, buf, len, err, sizeof err), "%s", err);
}

/* p encoded with the count at the start of (raw) section sec raised past
 * what the section holds, checksum fixed: refused by name. */
static void count_past_section(const Plan *p, int sec, const char *name) {
    uint8_t *a;
    size_t n;
    char err[256], want[160];
    encode(p, &a, &n);
    size_t s = section_at(a, sec);
    uint64_t len = rd64(a + s + 8);
    a[s + 24 + 3] = 0x7f;
    wr64(a + s + 16, plan_fnv1a64(a + s + 24, len));
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    snprintf(want, sizeof want, "g.plan: section '%s' malformed: a count exceeds what the section holds", name);
    ck_assert_str_eq(err, want);
    free(a);
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

/* A copy of plan file a whose target section lacks its last `cut` bytes
 * (length and checksum mended), as a build that wrote less would have
 * written it; *no is its length. */
static uint8_t *cut_target(const uint8_t *a, size_t na, size_t cut, size_t *no) {
    size_t at = section_at(a, S_TARGET), plen = rd64(a + at + 8);
    uint8_t *old = malloc(na);
    ck_assert_ptr_nonnull(old);
    size_t n = at + 24 + plen - cut;
    memcpy(old, a, n);
    memcpy(old + n, a + at + 24 + plen, na - (at + 24 + plen));
    n += na - (at + 24 + plen);
    for (int i = 0; i < 8; i++) old[at + 8 + i] = (uint8_t)((plen - cut) >> (8 * i));
    uint64_t sum = plan_fnv1a64(old + at + 24, plen - cut);
    for (int i = 0; i < 8; i++) old[at + 16 + i] = (uint8_t)(sum >> (8 * i));
    *no = n;
    return old;
}

/* Rewrites the checksum of the target section after a change in place. */
static void reseal_target(uint8_t *a) {
    size_t at = section_at(a, S_TARGET), plen = rd64(a + at + 8);
    uint64_t sum = plan_fnv1a64(a + at + 24, plen);
    for (int i = 0; i < 8; i++) a[at + 16 + i] = (uint8_t)(sum >> (8 * i));
}

/* The measured figures, the timed kernel calls and the timed NVMe
 * transfers round-trip; plans from before them still read: one without
 * the transfers, one with the 7 figures of format 6's first
 * builds and no calls, a version-3 one whose target section ends at
 * net_latency; forged counts and families are refused. */
START_TEST(measured_figures) {
    Plan *p = fx_plan("host", 2, 2, 2, -1);
    p->target.nvme_latency = 5e-5;
    p->target.pcie_latency = 2e-6;
    p->target.kernel_latency = 3e-6;
    for (int f = 0; f < PLAN_NFAMILIES; f++) p->target.eff[f] = 0.1 * (f + 1);
    p->target.wake_latency = 7e-6;
    p->target.cpu_cache = 32 << 20;
    p->target.cache_bandwidth = 60e9;
    p->target.nvme_request = 4e-6;
    p->target.nvme_cpu = 2e-5;
    p->target.adam_bandwidth = 30e9;
    p->target.read_bandwidth = 25e9;
    p->target.nkernel_points = 3;
    p->target.kernel_points[0] = (PlanKernelPoint){FAM_GEMM, 2e6, 2.5e-5};
    p->target.kernel_points[1] = (PlanKernelPoint){FAM_GEMM, 8e6, 8e-5};
    p->target.kernel_points[2] = (PlanKernelPoint){FAM_ACTIVATION, 6e5, 6e-5};
    p->target.nnvme_points = 2;
    p->target.nvme_points[0] = (PlanNvmePoint){0, 4096, 5e-6, 6e-5};
    p->target.nvme_points[1] = (PlanNvmePoint){1, 65536, 2e-5, 9e-5};
    uint8_t *a;
    size_t na;
    encode(p, &a, &na);
    char err[256];
    Plan *q = plan_decode(a, na, "m.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert(q->target.nvme_latency == 5e-5 && q->target.pcie_latency == 2e-6 && q->target.kernel_latency == 3e-6);
    for (int f = 0; f < PLAN_NFAMILIES; f++) ck_assert(q->target.eff[f] == p->target.eff[f]);
    ck_assert(q->target.wake_latency == 7e-6 && q->target.cpu_cache == 32 << 20 && q->target.cache_bandwidth == 60e9);
    ck_assert(q->target.nvme_request == 4e-6 && q->target.nvme_cpu == 2e-5);
    ck_assert(q->target.adam_bandwidth == 30e9 && q->target.read_bandwidth == 25e9);
    ck_assert_int_eq(q->target.nkernel_points, 3);
    ck_assert(q->target.kernel_points[2].family == FAM_ACTIVATION && q->target.kernel_points[2].flops == 6e5 &&
              q->target.kernel_points[2].secs == 6e-5);
    ck_assert_int_eq(q->target.nnvme_points, 2);
    ck_assert(q->target.nvme_points[1].write == 1 && q->target.nvme_points[1].bytes == 65536 &&
              q->target.nvme_points[1].drive == 2e-5 && q->target.nvme_points[1].alone == 9e-5);
    plan_free(q);
    /* a plan from before the timed transfers: the calls, no transfers */
    size_t xfers = 4 + 28 * 2, no;
    uint8_t *old = cut_target(a, na, xfers, &no);
    q = plan_decode(old, no, "k.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert_int_eq(q->target.nkernel_points, 3);
    ck_assert_int_eq(q->target.nnvme_points, 0);
    plan_free(q);
    free(old);
    /* the first builds of format 6: 7 figures (latencies and four families), no calls */
    /* the figures: 3 latencies, the families' efficiencies, the wake-up, the cache and its bandwidth, the drive's
     * request time, a transfer's CPU time, the Adam's and a sum's rates */
    size_t calls = 4 + 20 * 3 + xfers, nfig = 3 + PLAN_NFAMILIES + 5 + 2;
    old = cut_target(a, na, calls + 8 * (nfig - 7), &no);
    size_t at = section_at(old, S_TARGET), plen = rd64(old + at + 8), cnt = at + 24 + plen - 4 - 8 * 7;
    ck_assert_uint_eq(old[cnt], nfig);
    old[cnt] = 7;
    reseal_target(old);
    q = plan_decode(old, no, "f6.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert(q->target.kernel_latency == 3e-6 && q->target.eff[FAM_ELEMENTWISE] == p->target.eff[FAM_ELEMENTWISE]);
    ck_assert(q->target.wake_latency == 0 && q->target.eff[FAM_ACTIVATION] == 0 && q->target.cpu_cache == 0 &&
              q->target.nvme_request == 0 && q->target.nvme_cpu == 0 && q->target.adam_bandwidth == 0);
    ck_assert_int_eq(q->target.nkernel_points, 0);
    plan_free(q);
    free(old);
    /* version 3: neither the figures nor their count */
    old = cut_target(a, na, calls + 4 + 8 * nfig, &no);
    q = plan_decode(old, no, "v3.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert(q->target.nvme_latency == 0 && q->target.kernel_latency == 0 && q->target.eff[FAM_GEMM] == 0);
    ck_assert_int_eq(q->target.gpus_per_node, 2);
    plan_free(q);
    free(old);
    at = section_at(a, S_TARGET);
    plen = rd64(a + at + 8);
    /* a count of transfers past the section, then a transfer neither read nor write */
    size_t nxfers = at + 24 + plen - xfers;
    ck_assert_uint_eq(a[nxfers], 2);
    a[nxfers] = 3;
    reseal_target(a);
    ck_assert_ptr_null(plan_decode(a, na, "m.plan", err, sizeof err));
    ck_assert_str_eq(err, "m.plan: section 'target' malformed: a count exceeds what the section holds");
    a[nxfers] = 2;
    a[nxfers + 4] = 2;
    reseal_target(a);
    ck_assert_ptr_null(plan_decode(a, na, "m.plan", err, sizeof err));
    ck_assert_str_eq(err, "m.plan: section 'target' malformed: a timed transfer neither read nor write");
    a[nxfers + 4] = 0;
    /* a count of calls past the section, then a call of no family */
    size_t ncalls = at + 24 + plen - calls;
    a[ncalls] = 4;
    reseal_target(a);
    ck_assert_ptr_null(plan_decode(a, na, "m.plan", err, sizeof err));
    ck_assert_str_eq(err, "m.plan: section 'target' malformed: a count exceeds what the section holds");
    a[ncalls] = 3;
    a[ncalls + 4] = PLAN_NFAMILIES;
    reseal_target(a);
    ck_assert_ptr_null(plan_decode(a, na, "m.plan", err, sizeof err));
    ck_assert_str_eq(err, "m.plan: section 'target' malformed: a timed kernel call of no known family");
    a[ncalls + 4] = FAM_GEMM;
    /* a count of figures past the section */
    cnt = at + 24 + plen - calls - 8 * nfig - 4;
    ck_assert_uint_eq(a[cnt], nfig);
    a[cnt] = 200;
    reseal_target(a);
    ck_assert_ptr_null(plan_decode(a, na, "m.plan", err, sizeof err));
    ck_assert_str_eq(err, "m.plan: section 'target' malformed: a count exceeds what the section holds");
    free(a);
    plan_free(p);
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
    ck_assert_str_eq(err, "model.plan: section 'gemms' runs past the end of the file (truncated?)");
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
    a[8] = 11;
    wr64(a + 16, plan_fnv1a64(a, 16));
    ck_assert_ptr_null(plan_decode(a, n, "e.plan", err, sizeof err));
    ck_assert_str_eq(err, "e.plan: plan format version 11, this build reads versions 3 to 10 (recompile the model)");
    /* a plan from before the launch sections */
    a[8] = 1;
    wr64(a + 16, plan_fnv1a64(a, 16));
    ck_assert_ptr_null(plan_decode(a, n, "old.plan", err, sizeof err));
    ck_assert_str_eq(err, "old.plan: plan format version 1, this build reads versions 3 to 10 (recompile the model)");
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

/* A GPU plan: every launch, argument, op code and utility entry survives. */
START_TEST(round_trip_launches) {
    Plan *p = fx_plan_launches("h200", 1, 2);
    ck_assert_uint_gt(p->nlaunches, 0);
    ck_assert_ptr_nonnull(p->op_code);
    uint8_t *a, *b;
    size_t na, nb;
    encode(p, &a, &na);
    char err[256];
    Plan *q = plan_decode(a, na, "g.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    encode(q, &b, &nb);
    ck_assert(na == nb && memcmp(a, b, na) == 0);
    ck_assert_uint_eq(q->nlaunches, p->nlaunches);
    ck_assert_uint_eq(q->nlaunch_args, p->nlaunch_args);
    for (uint32_t i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *x = &p->launches[i], *y = &q->launches[i];
        ck_assert_str_eq(y->unit, x->unit);
        ck_assert_str_eq(y->entry, x->entry);
        for (int k = 0; k < 3; k++) {
            ck_assert_uint_eq(y->grid[k], x->grid[k]);
            ck_assert_uint_eq(y->block[k], x->block[k]);
        }
        ck_assert_uint_eq(y->smem, x->smem);
        ck_assert_int_eq(y->op, x->op);
        ck_assert_uint_eq(y->arg, x->arg);
        ck_assert_uint_eq(y->nargs, x->nargs);
    }
    for (uint32_t i = 0; i < p->nlaunch_args; i++) {
        const PlanLaunchArg *x = &p->launch_args[i], *y = &q->launch_args[i];
        ck_assert_uint_eq(y->kind, x->kind);
        ck_assert_uint_eq(y->rt, x->rt);
        ck_assert_int_eq(y->tensor, x->tensor);
        ck_assert_int_eq(y->i, x->i);
        ck_assert(memcmp(&y->f, &x->f, sizeof x->f) == 0);
    }
    for (uint32_t o = 0; o < p->nops; o++) {
        const PlanOpCode *x = &p->op_code[o], *y = &q->op_code[o];
        ck_assert_uint_eq(y->first, x->first);
        ck_assert_uint_eq(y->count, x->count);
        ck_assert_int_eq(y->ws_bytes, x->ws_bytes);
        ck_assert_int_eq(y->err_off, x->err_off);
        ck_assert_str_eq(y->err_what, x->err_what);
    }
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++) ck_assert_int_eq(q->util[u][t], p->util[u][t]);
    /* the fixture is bf16: one utility axpy, for bf16 */
    ck_assert_int_ge(q->util[PLAN_UTIL_AXPY][DT_BF16], 0);
    ck_assert_int_eq(q->util[PLAN_UTIL_AXPY][DT_F16], -1);
    ck_assert_str_eq(q->launches[q->util[PLAN_UTIL_AXPY][DT_BF16]].entry, "zk_axpy");
    /* an error word survives with its name */
    bool err_word = false;
    for (uint32_t o = 0; o < q->nops; o++)
        if (q->op_code[o].err_off >= 0) err_word = !strcmp(q->op_code[o].err_what, "embedding id") || err_word;
    ck_assert(err_word);
    free(a);
    free(b);
    plan_free(p);
    plan_free(q);
}
END_TEST

/* A plan without GPU code keeps none: no launches, no op code table, every
 * utility entry -1. */
START_TEST(round_trip_no_launches) {
    Plan *p = fx_plan("host", 2, 1, 1, -1);
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++) ck_assert_int_eq(p->util[u][t], -1);
    uint8_t *a;
    size_t n;
    encode(p, &a, &n);
    char err[256];
    Plan *q = plan_decode(a, n, "h.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert_uint_eq(q->nlaunches, 0);
    ck_assert_uint_eq(q->nlaunch_args, 0);
    ck_assert_ptr_null(q->launches);
    ck_assert_ptr_null(q->op_code);
    for (int u = 0; u < PLAN_NUTIL; u++)
        for (int t = 0; t < PLAN_NDTYPES; t++) ck_assert_int_eq(q->util[u][t], -1);
    free(a);
    plan_free(p);
    plan_free(q);
}
END_TEST

/* The Hugging Face mapping survives the file, and a forged tensor index is
 * refused by the reader. */
START_TEST(round_trip_hf) {
    Plan *p = fx_plan("host", 2, 1, 1, -1);
    ck_assert_uint_eq(p->hf.npieces, 0);
    p->hf.arch = "LlamaForCausalLM";
    p->hf.config = "{\"model_type\": \"llama\"}";
    p->hf.pieces = arena_alloc(&p->arena, 2 * sizeof *p->hf.pieces);
    p->hf.pieces[0] = (PlanHfPiece){3, "model.layers.0.mlp.gate_proj.weight", 1, 0, 7, 0, 0, 0};
    p->hf.pieces[1] = (PlanHfPiece){3, "model.layers.0.mlp.up_proj.weight", 1, 5, 9, 0, 0, 0};
    p->hf.npieces = 2;
    uint8_t *a;
    size_t n;
    encode(p, &a, &n);
    char err[256];
    Plan *q = plan_decode(a, n, "h.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert_str_eq(q->hf.arch, "LlamaForCausalLM");
    ck_assert_str_eq(q->hf.config, "{\"model_type\": \"llama\"}");
    ck_assert_uint_eq(q->hf.npieces, 2);
    ck_assert_str_eq(q->hf.pieces[1].hf_name, "model.layers.0.mlp.up_proj.weight");
    ck_assert(q->hf.pieces[1].tensor == 3 && q->hf.pieces[1].transpose == 1 && q->hf.pieces[1].src_col == 5 &&
              q->hf.pieces[1].cols == 9);
    ck_assert_uint_eq(a[8], PLAN_VERSION); /* no stacked piece: written as before */
    ck_assert(!q->hf.pieces[0].stacked && !q->hf.pieces[1].stacked);
    plan_free(q);
    free(a);
    /* stacked pieces (one expert's tensor each): written as version 7, read back */
    p->hf.pieces[0] = (PlanHfPiece){3, "model.layers.0.mlp.experts.0.gate_proj.weight", 0, 0, 7, 1, 0, 0};
    p->hf.pieces[1] = (PlanHfPiece){3, "model.layers.0.mlp.experts.1.gate_proj.weight", 0, 0, 7, 1, 1, 0};
    encode(p, &a, &n);
    ck_assert_uint_eq(a[8], PLAN_VERSION_STACKED);
    q = plan_decode(a, n, "h.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert(q->hf.pieces[1].stacked == 1 && q->hf.pieces[1].index == 1 && q->hf.pieces[0].index == 0);
    ck_assert_str_eq(q->hf.pieces[1].hf_name, "model.layers.0.mlp.experts.1.gate_proj.weight");
    ck_assert(q->hf.pieces[0].layout == PLAN_HF_PLAIN && q->hf.pieces[1].layout == PLAN_HF_PLAIN);
    plan_free(q);
    free(a);
    /* a piece of PEFT's expert layout: written as version 9, its layout read back */
    p->hf.pieces[0] = (PlanHfPiece){3, "base_model.model.model.layers.0.mlp.experts.lora_B.weight", 0, 0, 7, 0, 0,
                                    PLAN_HF_EXPERT_COLS};
    p->hf.npieces = 1;
    encode(p, &a, &n);
    ck_assert_uint_eq(a[8], PLAN_VERSION_EXPERTS);
    q = plan_decode(a, n, "h.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert(q->hf.npieces == 1 && q->hf.pieces[0].layout == PLAN_HF_EXPERT_COLS && !q->hf.pieces[0].stacked);
    plan_free(q);
    free(a);
    p->hf.pieces[0].tensor = (int32_t)p->ntensors;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "h.plan", err, sizeof err));
    ck_assert_msg(strstr(err, "hf piece 0: tensor") != NULL, "%s", err);
    free(a);
    plan_free(p);
}
END_TEST

/* An op's seventh and eighth float attributes and its list attributes (rope's
 * attention_factor and longrope tables) survive the file, which is then
 * written as version 8; a plan without them stays version 6. */
START_TEST(round_trip_op_tables) {
    Plan *p = fx_plan("host", 2, 1, 1, -1);
    ck_assert_uint_gt(p->nops, 0);
    uint8_t *a;
    size_t n;
    encode(p, &a, &n);
    ck_assert_uint_eq(a[8], PLAN_VERSION);
    free(a);
    static const double tab[4] = {1.0, 1.25, 2.5, 4.0};
    PlanOp *o = &p->ops[p->nops - 1];
    o->fattr[6] = 1.1902380714238083;
    o->table = tab;
    o->ntable = 4;
    encode(p, &a, &n);
    ck_assert_uint_eq(a[8], PLAN_VERSION_TABLES);
    char err[256];
    Plan *q = plan_decode(a, n, "t.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    const PlanOp *r = &q->ops[q->nops - 1];
    ck_assert_uint_eq(r->ntable, 4);
    for (int k = 0; k < 4; k++) ck_assert_double_eq(r->table[k], tab[k]);
    ck_assert_double_eq(r->fattr[6], 1.1902380714238083);
    ck_assert_uint_eq(q->ops[0].ntable, p->nops > 1 ? 0u : 4u);
    plan_free(q);
    free(a);
    plan_free(p);
}
END_TEST

/* A tiled GPU plan: one tile code entry per (op, tile, ntiles) of its tiled
 * kernel instructions, sorted, each naming launches of its op, and all of
 * it survives the file. */
START_TEST(round_trip_tile_code) {
    Plan *p = fx_plan_launches_tiled("h200", 1, 2, 2);
    ck_assert_uint_gt(p->ntile_code, 0);
    uint32_t tiled = 0;
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *s = &p->instrs[i];
        if (s->op != PI_KERNEL || s->ntiles <= 1) continue;
        tiled++;
        uint32_t found = 0;
        for (uint32_t k = 0; k < p->ntile_code; k++) {
            const PlanTileCode *t = &p->tile_code[k];
            found += t->op == s->arg && t->tile == s->tile && t->ntiles == s->ntiles;
        }
        ck_assert_msg(found == 1, "instruction %u (tile %d of %d of op %d) has %u tile code entries", i, s->tile, s->ntiles,
                      s->arg, found);
    }
    ck_assert_uint_gt(tiled, 0);
    bool embedding = false, linear = false;
    for (uint32_t k = 0; k < p->ntile_code; k++) {
        const PlanTileCode *t = &p->tile_code[k];
        if (k) {
            const PlanTileCode *q = &p->tile_code[k - 1];
            ck_assert(q->op < t->op || (q->op == t->op && q->tile < t->tile));
        }
        ck_assert_int_eq(t->ntiles, 2);
        ck_assert_uint_le(t->first + t->count, p->nlaunches);
        for (uint32_t i = t->first; i < t->first + t->count; i++) ck_assert_int_eq(p->launches[i].op, t->op);
        /* the tile launches come after the ops' own */
        ck_assert_uint_ge(t->first, p->op_code[p->nops - 1].first + p->op_code[p->nops - 1].count);
        embedding = embedding || p->ops[t->op].prim == PRIM_EMBEDDING;
        linear = linear || p->ops[t->op].prim == PRIM_LINEAR;
    }
    ck_assert(embedding && linear);
    uint8_t *a, *b;
    size_t na, nb;
    encode(p, &a, &na);
    char err[256];
    Plan *q = plan_decode(a, na, "t.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    encode(q, &b, &nb);
    ck_assert(na == nb && memcmp(a, b, na) == 0);
    ck_assert_uint_eq(q->ntile_code, p->ntile_code);
    for (uint32_t k = 0; k < p->ntile_code; k++) {
        const PlanTileCode *x = &p->tile_code[k], *y = &q->tile_code[k];
        ck_assert_int_eq(y->op, x->op);
        ck_assert_int_eq(y->tile, x->tile);
        ck_assert_int_eq(y->ntiles, x->ntiles);
        ck_assert_uint_eq(y->first, x->first);
        ck_assert_uint_eq(y->count, x->count);
        ck_assert_int_eq(y->ws_bytes, x->ws_bytes);
    }
    free(a);
    free(b);
    plan_free(p);
    plan_free(q);
}
END_TEST

/* Every byte of the launch sections of a (tiled) GPU plan, flipped, is caught. */
START_TEST(every_flipped_launch_byte_is_caught) {
    Plan *p = fx_plan_launches_tiled("h200", 1, 1, 2);
    uint8_t *a;
    size_t n;
    encode(p, &a, &n);
    char err[256];
    size_t from = section_at(a, S_LAUNCHES);
    ck_assert_uint_gt(n - from, 1000);
    for (size_t i = from; i < n; i++) {
        a[i] ^= 0x10;
        Plan *q = plan_decode(a, n, "m.plan", err, sizeof err);
        if (q) {
            plan_free(q);
            ck_abort_msg("a flipped byte at %zu of %zu (launch sections from %zu) was not noticed", i, n, from);
        }
        ck_assert(strstr(err, "m.plan: ") == err);
        a[i] ^= 0x10;
    }
    free(a);
    plan_free(p);
}
END_TEST

/* Forged launch data with valid checksums: each index is refused by name. */
START_TEST(launch_messages) {
    Plan *p = fx_plan_launches("h200", 1, 1);
    uint8_t *a;
    size_t n;
    char err[256];
    char want[128];
    uint32_t keep = p->launches[3].nargs;
    p->launches[3].nargs = p->nlaunch_args + 1;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: launch 3: arguments out of range (file corrupt?)");
    free(a);
    p->launches[3].nargs = keep;
    int32_t op2 = p->launches[2].op;
    p->launches[2].op = (int32_t)p->nops;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    snprintf(want, sizeof want, "g.plan: launch 2: op %u out of range (file corrupt?)", p->nops);
    ck_assert_str_eq(err, want);
    free(a);
    p->launches[2].op = op2;
    uint8_t kind5 = p->launch_args[5].kind;
    p->launch_args[5].kind = PLAN_NARGKINDS;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: launch argument 5: unknown kind 8 (file corrupt?)");
    free(a);
    p->launch_args[5].kind = kind5;
    int32_t t6 = p->launch_args[6].tensor;
    p->launch_args[6].tensor = (int32_t)p->ntensors;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "launch argument 6: tensor "));
    free(a);
    p->launch_args[6].tensor = t6;
    uint32_t count4 = p->op_code[4].count;
    p->op_code[4].count = p->nlaunches;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: op 4: launches out of range (file corrupt?)");
    free(a);
    p->op_code[4].count = count4;
    p->util[PLAN_UTIL_AXPY][DT_F32] = (int32_t)p->nlaunches;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "utility launch 0 for dtype 1: launch "));
    free(a);
    p->util[PLAN_UTIL_AXPY][DT_F32] = -1;
    /* an op code count that is neither 0 nor the op count */
    encode(p, &a, &n);
    size_t s = section_at(a, S_OP_CODE);
    uint64_t len = rd64(a + s + 8);
    a[s + 24] ^= 1;
    wr64(a + s + 16, plan_fnv1a64(a + s + 24, len));
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: section 'op_code' malformed: the op code count is neither 0 nor the op count");
    free(a);
    plan_free(p);
}
END_TEST

/* Forged tile code with valid checksums: each index is refused by name. */
START_TEST(tile_code_messages) {
    Plan *p = fx_plan_launches_tiled("h200", 1, 1, 2);
    ck_assert_uint_gt(p->ntile_code, 1);
    uint8_t *a;
    size_t n;
    char err[256], want[160];
    PlanTileCode *t = &p->tile_code[1], keep = *t;
    t->op = (int32_t)p->nops;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    snprintf(want, sizeof want, "g.plan: tile code 1: op %u out of range (file corrupt?)", p->nops);
    ck_assert_str_eq(err, want);
    free(a);
    *t = keep;
    t->tile = t->ntiles;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: tile code 1: tile 2 of 2 (file corrupt?)");
    free(a);
    *t = keep;
    t->ntiles = 1;
    t->tile = 0;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: tile code 1: tile 0 of 1 (file corrupt?)");
    free(a);
    *t = keep;
    t->count = p->nlaunches - t->first + 1;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: tile code 1: launches out of range (file corrupt?)");
    free(a);
    *t = keep;
    t->first = UINT32_MAX;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: tile code 1: launches out of range (file corrupt?)");
    free(a);
    *t = keep;
    t->ws_bytes = -256;
    encode(p, &a, &n);
    ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err));
    ck_assert_str_eq(err, "g.plan: tile code 1: workspace of -256 bytes (file corrupt?)");
    free(a);
    *t = keep;
    /* a count larger than the section holds */
    count_past_section(p, S_TILE_CODE, "tile_code");
    /* a plan written before the tile_code section: one section short */
    encode(p, &a, &n);
    size_t s = section_at(a, S_TILE_CODE);
    a[8] = 3;
    a[12] = S_TILE_CODE;
    wr64(a + 16, plan_fnv1a64(a, 16));
    ck_assert_ptr_null(plan_decode(a, s, "old.plan", err, sizeof err));
    ck_assert_str_eq(err, "old.plan: 15 sections, expected 17 (written by an older build? recompile the model)");
    free(a);
    plan_free(p);
}
END_TEST

/* A version-6 meta section ends with the speculative optimizer's two
 * ranges (u32 each), which the older formats lack: dropped, the file after
 * moved down. Returns the file's new length. */
static size_t drop_redo_ranges(uint8_t *a, size_t len) {
    size_t meta = section_at(a, S_META);
    ck_assert_int_eq(a[meta + 4], 0);
    uint64_t plen = rd64(a + meta + 8);
    size_t cut = meta + 24 + (size_t)plen - 8;
    memmove(a + cut, a + cut + 8, len - cut - 8);
    wr64(a + meta + 8, plen - 8);
    wr64(a + meta + 16, plan_fnv1a64(a + meta + 24, (size_t)plen - 8));
    return len - 8;
}

/* The same bytes as the version-3 file of p's plan: without the gemms
 * section (the last), the header saying version 3 and 17 sections. Only
 * for plans whose sections are all raw (small: none packed, which version
 * 5 added). */
static size_t to_v3(uint8_t *a, size_t len) {
    drop_redo_ranges(a, len);
    size_t end = section_at(a, S_GEMMS);
    for (size_t pos = 24; pos < end; pos += 24 + (size_t)rd64(a + pos + 8)) ck_assert_int_eq(a[pos + 4], 0);
    a[8] = 3;
    a[12] = 17;
    wr64(a + 16, plan_fnv1a64(a, 16));
    return end;
}

/* Every GEMM descriptor survives, field by field; a version-3 file (before
 * the section) reads as the same plan without them; the section counts of
 * the two versions are not interchangeable. */
START_TEST(round_trip_gemms) {
    Plan *p = fx_plan_launches_tiled("h200", 1, 1, 2);
    ck_assert_uint_gt(p->ngemms, 0);
    uint8_t *a, *b;
    size_t na, nb;
    encode(p, &a, &na);
    char err[256];
    Plan *q = plan_decode(a, na, "g.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert_uint_eq(q->version, PLAN_VERSION);
    ck_assert_uint_eq(q->ngemms, p->ngemms);
    uint32_t tiled = 0;
    for (uint32_t i = 0; i < p->ngemms; i++) {
        const PlanGemm *x = &p->gemms[i], *y = &q->gemms[i];
        ck_assert(memcmp(x, y, sizeof *x) == 0); /* plain integers: padding zeroed by the arena and the initialisers */
        ck_assert_str_eq(q->launches[y->launch].entry, "zk_gemm");
        ck_assert_int_eq(plan_gemm_of_launch(q, y->launch), (int)i);
        tiled += y->off_a > 0 || y->off_c > 0;
    }
    ck_assert_uint_gt(tiled, 0); /* tile gemms address column slices */
    ck_assert_int_eq(plan_gemm_of_launch(q, 0), -1);
    encode(q, &b, &nb);
    ck_assert(na == nb && memcmp(a, b, na) == 0);
    free(b);
    plan_free(q);
    /* version 3: the file before the gemms section */
    size_t n3 = to_v3(a, na);
    q = plan_decode(a, n3, "old.plan", err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    ck_assert_uint_eq(q->version, 3);
    ck_assert_uint_eq(q->ngemms, 0);
    ck_assert_uint_eq(q->nlaunches, p->nlaunches);
    ck_assert_uint_eq(q->ntile_code, p->ntile_code);
    plan_free(q);
    /* version 3 with 18 sections, version 4 with 17: refused by count */
    a[12] = 18;
    wr64(a + 16, plan_fnv1a64(a, 16));
    ck_assert_ptr_null(plan_decode(a, na, "x.plan", err, sizeof err));
    ck_assert_str_eq(err, "x.plan: 18 sections, expected 17 (file corrupt?)");
    a[8] = 4;
    a[12] = 17;
    wr64(a + 16, plan_fnv1a64(a, 16));
    ck_assert_ptr_null(plan_decode(a, n3, "y.plan", err, sizeof err));
    ck_assert_str_eq(err, "y.plan: 17 sections, expected 18 (written by an older build? recompile the model)");
    free(a);
    plan_free(p);
}
END_TEST

/* Forged descriptors with valid checksums: each is refused by name. */
START_TEST(gemm_messages) {
    Plan *p = fx_plan_launches("h200", 1, 1);
    ck_assert_uint_gt(p->ngemms, 2);
    uint8_t *a;
    size_t n;
    char err[256], want[160];
#define FORGE(stmt, restore, ...)                                  \
    do {                                                           \
        stmt;                                                      \
        encode(p, &a, &n);                                         \
        ck_assert_ptr_null(plan_decode(a, n, "g.plan", err, sizeof err)); \
        snprintf(want, sizeof want, __VA_ARGS__);                  \
        ck_assert_str_eq(err, want);                               \
        free(a);                                                   \
        restore;                                                   \
    } while (0)
    PlanGemm keep = p->gemms[1];
    FORGE(p->gemms[1].launch = p->nlaunches, p->gemms[1] = keep, "g.plan: gemm 1: launch %u out of range (file corrupt?)", p->nlaunches);
    FORGE(p->gemms[1].launch = p->gemms[0].launch, p->gemms[1] = keep,
          "g.plan: gemm 1: launch %u not after the previous gemm's (file corrupt?)", p->gemms[0].launch);
    FORGE(p->gemms[1].path = PLAN_NGEMM_PATHS, p->gemms[1] = keep, "g.plan: gemm 1: path 2, reason 0 (file corrupt?)");
    FORGE(p->gemms[1].dtype = 9, p->gemms[1] = keep, "g.plan: gemm 1: dtype 9, flags %u (file corrupt?)", keep.flags);
    FORGE(p->gemms[1].b = (int32_t)p->ntensors, p->gemms[1] = keep, "g.plan: gemm 1: tensor out of range (file corrupt?)");
    FORGE(p->gemms[1].m = -1, p->gemms[1] = keep, "g.plan: gemm 1: size or offset -1 out of range (file corrupt?)");
    FORGE(p->gemms[1].ldb = 0, p->gemms[1] = keep, "g.plan: gemm 1: leading dim or batch 0 out of range (file corrupt?)");
    FORGE(p->gemms[1].ws_off = INT64_MAX, p->gemms[1] = keep,
          "g.plan: gemm 1: size or offset %lld out of range (file corrupt?)", (long long)INT64_MAX);
#undef FORGE
    /* a count larger than the section */
    count_past_section(p, S_GEMMS, "gemms");
    plan_free(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("plan");
    TCase *t = tcase_create("file");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, round_trip_bytes);
    tcase_add_test(t, measured_figures);
    tcase_add_test(t, file_round_trip);
    tcase_add_test(t, every_flipped_byte_is_caught);
    tcase_add_test(t, messages);
    tcase_add_test(t, version_and_helpers);
    tcase_add_test(t, round_trip_launches);
    tcase_add_test(t, round_trip_no_launches);
    tcase_add_test(t, round_trip_hf);
    tcase_add_test(t, round_trip_op_tables);
    tcase_add_test(t, round_trip_tile_code);
    tcase_add_test(t, tile_code_messages);
    tcase_add_test(t, every_flipped_launch_byte_is_caught);
    tcase_add_test(t, launch_messages);
    tcase_add_test(t, round_trip_gemms);
    tcase_add_test(t, gemm_messages);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
