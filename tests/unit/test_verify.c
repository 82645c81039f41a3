#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "plan.h"
#include "plan_fixture_plan.h"
#include "plan_fixture_launches.h"
#include "verify.h"
#include "vocab.h"
#include "zl_fixture.h"

static char msgs[8192];

/* a fresh, valid plan to break (4 ranks, parameters fetched from the CPU,
 * the optimizer in CPU memory) */
static Plan *fresh(void) {
    Plan *p = fx_plan_tiers("host", 4, 2, 2, TIER_CPU, TIER_CPU);
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "the unbroken plan fails: %s", msgs);
    return p;
}

static void expect(Plan *p, const char *what) {
    int n = verify_plan(p, msgs, sizeof msgs);
    ck_assert_msg(n > 0, "not caught: %s", what);
    ck_assert_msg(strstr(msgs, what) != NULL, "expected \"%s\" among:\n%s", what, msgs);
    plan_free(p);
}

static void expectf(Plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expectf(Plan *p, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    expect(p, what);
}

static int find_op(const Plan *p, int op, int from) {
    for (uint32_t i = (uint32_t)from; i < p->ninstrs; i++)
        if (p->instrs[i].op == op) return (int)i;
    return -1;
}

START_TEST(valid_plans_on_every_target) {
    for (int k = 0; k < target_nbuiltins; k++)
        for (int tier = -1; tier < PLAN_NTIERS; tier++) {
            Plan *p = fx_plan(target_builtin_names[k], 0, 2, 0, tier);
            int n = verify_plan(p, msgs, sizeof msgs);
            ck_assert_msg(n == 0, "%s params=%d: %s", target_builtin_names[k], tier, msgs);
            plan_free(p);
        }
}
END_TEST

/* A kernel's output moved onto its live input (both in the GPU arena). */
static void overlap_kernel_output(Plan *p) {
    int k = find_op(p, PI_KERNEL, 0);
    for (; k >= 0; k = find_op(p, PI_KERNEL, k + 1)) {
        const PlanInstr *s = &p->instrs[k];
        const PlanOperand *in = &p->operands[s->opnd], *out = &p->operands[s->opnd + s->nopnd - 1];
        if (in->buffer >= 0 && out->buffer >= 0 && !(p->buffers[in->buffer].flags & PLAN_BUF_PERSISTENT) &&
            p->buffers[in->buffer].arena == ARENA_GPU && p->buffers[out->buffer].arena == ARENA_GPU) {
            p->buffers[out->buffer].offset = p->buffers[in->buffer].offset;
            break;
        }
    }
    ck_assert_int_ge(k, 0);
}

START_TEST(overlapping_buffers) {
    Plan *p = fresh();
    overlap_kernel_output(p);
    expect(p, "overlap in arena gpu while both are live");
}
END_TEST

START_TEST(missing_fetch) {
    Plan *p = fresh();
    int ag = find_op(p, PI_ALLGATHER, 0);
    ck_assert_int_ge(ag, 0);
    /* the all-gather no longer writes what the kernel reads */
    p->operands[p->instrs[ag].opnd + 1].mode = PLAN_R;
    expect(p, "before anything writes it (missing fetch?)");
}
END_TEST

START_TEST(dependency_cycle) {
    Plan *p = fresh();
    int k = find_op(p, PI_KERNEL, 0);
    while (k >= 0 && p->instrs[k].ndeps == 0) k = find_op(p, PI_KERNEL, k + 1);
    ck_assert_int_ge(k, 0);
    p->deps[p->instrs[k].dep] = p->ninstrs - 1; /* waits for the step's end, which waits for it */
    expect(p, "dependency cycle:");
}
END_TEST

START_TEST(over_capacity) {
    Plan *p = fresh();
    p->arenas[ARENA_GPU].capacity = p->arenas[ARENA_GPU].size - 1;
    expect(p, "arena gpu uses");
    p = fresh();
    p->target.cpu_memory = 1 << 20;
    expect(p, "more than the rank's share of host memory");
    p = fresh();
    p->buffers[p->nbuffers - 1].offset = p->arenas[p->buffers[p->nbuffers - 1].arena].size;
    expect(p, "lies outside arena");
}
END_TEST

START_TEST(race) {
    Plan *p = fresh();
    /* a kernel that no longer waits for the all-gather of its weight */
    int k = find_op(p, PI_KERNEL, 0);
    for (; k >= 0; k = find_op(p, PI_KERNEL, k + 1)) {
        bool waits_comm = false;
        for (uint32_t d = 0; d < p->instrs[k].ndeps; d++) waits_comm |= p->instrs[p->deps[p->instrs[k].dep + d]].queue == Q_COMM;
        if (waits_comm) break;
    }
    ck_assert_int_ge(k, 0);
    p->instrs[k].ndeps = 0;
    expect(p, "unordered with instruction");
}
END_TEST

/* The same race on a buffer with many uses (more than 16), where the
 * verifier first tries to prove the buffer clean from queue order and
 * vector clocks: it must not prove it, and the exhaustive check must word
 * the race as before. The gradient norm (read by every Adam): its writer
 * moved to the other queue it may run on, so that queue order no longer
 * orders its readers after it. */
START_TEST(race_on_a_busy_buffer) {
    Plan *p = fx_plan_tiers("host", 4, 8, 2, TIER_CPU, TIER_CPU);
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "the unbroken plan fails: %s", msgs);
    /* the gradient norm: written once, read by every Adam of the step */
    int w = find_op(p, PI_GRAD_NORM, 0);
    ck_assert_int_ge(w, 0);
    int32_t busy = p->operands[p->instrs[w].opnd + p->instrs[w].nopnd - 1].buffer;
    uint32_t uses = 0;
    int first = -1;
    for (uint32_t i = 0; i < p->ninstrs; i++)
        for (uint32_t k = 0; k < p->instrs[i].nopnd; k++)
            if (p->operands[p->instrs[i].opnd + k].buffer == busy) {
                uses++;
                if ((int)i > w && first < 0) first = (int)i;
            }
    ck_assert_uint_gt(uses, 16);
    ck_assert_int_ge(first, 0);
    /* its readers follow it on its queue, which orders them without a
     * dependency; on the other queue a GRAD_NORM may run on, nothing does */
    ck_assert_int_eq(p->instrs[first].queue, p->instrs[w].queue);
    p->instrs[w].queue = p->instrs[w].queue == Q_CPU ? Q_COMPUTE : Q_CPU;
    int n = verify_plan(p, msgs, sizeof msgs);
    ck_assert_msg(n > 0, "readers of '%s' (%u uses) unordered with its writer were not caught", p->buffers[busy].name, uses);
    char want[256];
    snprintf(want, sizeof want, "writes buffer '%s' unordered with instruction %d", p->buffers[busy].name, first);
    ck_assert_msg(strstr(msgs, want) != NULL, "expected \"%s\" among:\n%s", want, msgs);
    plan_free(p);
}
END_TEST

START_TEST(shards) {
    Plan *p = fresh();
    int a = -1, b = -1;
    for (uint32_t i = 0; i < p->nshards; i++)
        if (p->tensors[p->shards[i].tensor].cls == TC_PARAM) {
            if (a < 0) a = (int)i;
            else if (b < 0) b = (int)i;
        }
    p->shards[b].tensor = p->shards[a].tensor;
    expect(p, "has 2 shards per rank, expected exactly one");
    p = fresh();
    for (uint32_t i = 0; i < p->nshards; i++)
        if (p->shards[i].partitioned) {
            p->shards[i].tile_shard /= 8;
            p->shards[i].bytes /= 8;
            break;
        }
    expect(p, "ranks x");
    p = fresh();
    p->shards[0].home = TIER_NVME;
    expect(p, "has home nvme but its buffer is in arena");
    /* an 8-bit moment (dyn8) whose rank slices are not whole blocks of 2048 */
    p = fresh();
    int mo = -1;
    for (uint32_t i = 0; i < p->nshards && mo < 0; i++)
        if (p->tensors[p->shards[i].tensor].cls == TC_MOMENTUM && p->shards[i].partitioned) mo = (int)i;
    ck_assert_int_ge(mo, 0);
    p->tensors[p->shards[mo].tensor].dtype = DT_DYN8;
    p->shards[mo].tile_shard += 64;
    expectf(p, "shard of '%s' (dyn8): its tiles or slices are not whole blocks of 2048 elements", p->tensors[p->shards[mo].tensor].name);
}
END_TEST

START_TEST(ranges_and_queues) {
    Plan *p = fresh();
    p->operands[3].buffer = (int32_t)p->nbuffers + 5;
    expect(p, "out of range");
    p = fresh();
    int k = find_op(p, PI_KERNEL, 0);
    p->instrs[k].queue = Q_H2D;
    expect(p, "is on queue h2d, its opcode runs on compute");
    p = fresh();
    p->operands[p->instrs[1].opnd].bytes = 1ull << 40;
    expect(p, "which has");
}
END_TEST

START_TEST(layouts) {
    Plan *p = fresh();
    int h = find_op(p, PI_ALLGATHER, 0);
    p->operands[p->instrs[h].opnd + 1].bytes *= 8;
    expect(p, "(allgather): 4 ranks x");
    p = fresh();
    int k = find_op(p, PI_KERNEL, 0);
    p->instrs[k].nopnd--;
    expect(p, "(kernel) has");
    p = fresh();
    int z = find_op(p, PI_ZERO, 0);
    p->operands[p->instrs[z].opnd].mode = PLAN_R;
    expect(p, "operand 0 is read, its opcode writes it");
}
END_TEST

/* The checks run in parts side by side; their problems are listed in the
 * order the checks are, as if run one after another: a shard's home (the
 * per-table checks) before an overlap (the last part). */
START_TEST(problems_in_check_order) {
    Plan *p = fresh();
    p->shards[0].home = TIER_NVME;
    overlap_kernel_output(p);
    int n = verify_plan(p, msgs, sizeof msgs);
    ck_assert_int_ge(n, 2);
    const char *home = strstr(msgs, "has home nvme but its buffer is in arena"), *overlap = strstr(msgs, "overlap in arena gpu while both are live");
    ck_assert_msg(home && overlap && home < overlap, "expected the shard's problem before the overlap among:\n%s", msgs);
    /* with no room for messages, the same count */
    ck_assert_int_eq(verify_plan(p, NULL, 0), n);
    plan_free(p);
}
END_TEST

/* Regression (libFuzzer, UBSan): a CPU Adam whose parameter operand claims
 * nearly 2^64 bytes made the Adam check count 2^62 elements and multiply
 * them by 4 in int64_t. Sizes saturate now: refused, no overflow (the
 * sanitizer pass runs this with UBSan halting on error). */
START_TEST(adam_operand_bytes_overflow) {
    Plan *p = fresh();
    int a = find_op(p, PI_CPU_ADAM, 0);
    ck_assert_int_ge(a, 0);
    p->operands[p->instrs[a].opnd].bytes = UINT64_MAX - 3;
    int n = verify_plan(p, msgs, sizeof msgs);
    ck_assert_msg(n > 0, "an Adam operand of 2^64 - 4 bytes passed");
    plan_free(p);
    ck_assert_int_eq(dtype_bytes(DT_F32, INT64_MAX / 2), INT64_MAX);
    ck_assert_int_eq(dtype_bytes(DT_DYN8, INT64_MAX), INT64_MAX);
    ck_assert_int_eq(dtype_bytes(DT_NF4, INT64_MAX), INT64_MAX / 64 * 36 + 36);
    ck_assert_int_eq(dtype_bytes(DT_F32, 1000), 4000);
    ck_assert_int_eq(dtype_bytes(DT_NF4, 65), 72);
    ck_assert_int_eq(dtype_bytes(DT_DYN8, 2049), 2 * 2052);
}
END_TEST

/* Regression: overlapping operand ranges made the per-buffer use lists
 * (sized by the operand count) overflow; now they are refused by name. */
START_TEST(overlapping_operand_ranges) {
    Plan *p = fresh();
    uint32_t k = 1;
    while (k < p->ninstrs && !(p->instrs[k].nopnd && p->instrs[k - 1].nopnd)) k++;
    ck_assert_uint_lt(k, p->ninstrs);
    p->instrs[k].opnd = p->instrs[k - 1].opnd;
    expectf(p, "instruction %u (%s): operands [", k, plan_opcode_names[p->instrs[k].op]);
    /* every instruction names every operand: the worst case for the use lists */
    p = fresh();
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        p->instrs[i].opnd = 0;
        p->instrs[i].nopnd = p->noperands;
    }
    expect(p, "overlap the previous instruction's, which end at");
    p = fresh();
    k = 1;
    while (k < p->ninstrs && !(p->instrs[k].ndeps && p->instrs[k - 1].ndeps)) k++;
    ck_assert_uint_lt(k, p->ninstrs);
    p->instrs[k].dep = p->instrs[k - 1].dep;
    expectf(p, "instruction %u (%s): dependencies [", k, plan_opcode_names[p->instrs[k].op]);
}
END_TEST

/* Regression: zinfrun sized its token buffers from micro_batch and the
 * INPUT copies from the input tensors; the verifier now ties them. */
START_TEST(micro_batch_and_inputs) {
    Plan *p = fresh();
    int64_t B = 0, T = 0;
    ck_assert(plan_batch_shape(p, &B, &T));
    ck_assert_int_eq(B, 2);
    ck_assert_int_eq(T, 16);
    p->train.micro_batch = 1;
    expect(p, "but a micro-batch of 1 x 16 token ids is 64 bytes");
    p = fresh();
    p->train.micro_batch = 0;
    expect(p, "micro_batch is 0, must be at least 1");
    p = fresh();
    p->train.micro_batch = -1;
    expect(p, "micro_batch is -1, must be at least 1");
    p = fresh();
    p->train.micro_batch = (1ll << 57) + 4;
    ck_assert(!plan_batch_shape(p, &B, &T));
    expect(p, "(input) feeds a batch the plan does not define");
    p = fresh();
    p->inputs[0] = -1;
    expect(p, "input 0: tensor -1 out of range");
    p = fresh();
    int in = find_op(p, PI_INPUT, 0);
    ck_assert_int_ge(in, 0);
    p->instrs[in].arg = 7;
    expectf(p, "instruction %d (input) feeds input 7, out of range", in);
    p = fresh();
    p->operands[p->instrs[in].opnd].bytes /= 2;
    expectf(p, "instruction %d (input) copies", in);
    p = fresh();
    p->train.grad_accum = 0;
    expect(p, "grad_accum is 0, must be 1 to 64");
    p = fresh();
    p->train.grad_accum = 65;
    expect(p, "grad_accum is 65, must be 1 to 64");
    p = fresh();
    p->tensors[p->inputs[1]].dtype = 1;
    expect(p, "input 1 'targets' is not i32");
}
END_TEST

/* Regressions the fuzzer would find: an executor that indexes by the plan
 * must find every operand large enough and in memory it can address. */
START_TEST(operands_the_executor_addresses) {
    Plan *p = fresh();
    int k = find_op(p, PI_KERNEL, 0);
    ck_assert_int_ge(k, 0);
    PlanOperand *x = &p->operands[p->instrs[k].opnd];
    ck_assert_int_ge(x->buffer, 0);
    x->bytes /= 2;
    expectf(p, "instruction %d (kernel): operand 0 holds", k);
    p = fresh();
    int rs = find_op(p, PI_REDUCE_SCATTER, 0);
    ck_assert_int_ge(rs, 0);
    p->instrs[rs].arg = -1;
    expectf(p, "instruction %d (reduce_scatter) names tensor -1, out of range", rs);
    p = fresh();
    int a = find_op(p, PI_CPU_ADAM, 0); /* or the GPU Adam, where the planner keeps the optimizer there */
    if (a < 0) a = find_op(p, PI_GPU_ADAM, 0);
    ck_assert_int_ge(a, 0);
    p->operands[p->instrs[a].opnd + 3].bytes -= 4;
    expectf(p, "instruction %d (%s) on '%s': operand 3 holds", a, plan_opcode_names[p->instrs[a].op],
            p->tensors[p->instrs[a].arg].name);
    /* a kernel's operand on NVMe: the host kernels cannot address it */
    p = fx_plan("host", 4, 2, 2, TIER_NVME);
    int32_t nv = -1;
    for (uint32_t b = 0; b < p->nbuffers && nv < 0; b++)
        if (p->buffers[b].arena == ARENA_NVME) nv = (int32_t)b;
    ck_assert_int_ge(nv, 0);
    k = find_op(p, PI_KERNEL, 0);
    p->operands[p->instrs[k].opnd].buffer = nv;
    expectf(p, "instruction %d (kernel): operand 0 is in the nvme arena", k);
}
END_TEST

/* a mapping of the fixture's first 2-D parameter onto two HF tensors */
static Plan *with_hf(int32_t *param) {
    Plan *p = fresh();
    int32_t w = -1;
    for (uint32_t i = 0; i < p->ntensors && w < 0; i++)
        if (p->tensors[i].cls == TC_PARAM && p->tensors[i].rank == 2) w = (int32_t)i;
    ck_assert_int_ge(w, 0);
    int64_t n = p->tensors[w].dims[1];
    p->hf.arch = "GPT2LMHeadModel";
    p->hf.config = "{}";
    p->hf.pieces = arena_alloc(&p->arena, 2 * sizeof *p->hf.pieces);
    p->hf.pieces[0] = (PlanHfPiece){w, "a.weight", 1, 0, n / 2, 0, 0, 0};
    p->hf.pieces[1] = (PlanHfPiece){w, "b.weight", 1, 4, n - n / 2, 0, 0, 0};
    p->hf.npieces = 2;
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "%s", msgs);
    *param = w;
    return p;
}

START_TEST(hf_mapping) {
    int32_t w;
    Plan *p = with_hf(&w);
    p->hf.pieces[1].cols++;
    expectf(p, "hf pieces of '%s' give", p->tensors[w].name);
    p = with_hf(&w);
    p->hf.arch = "";
    expect(p, "but no architecture");
    p = with_hf(&w);
    p->hf.pieces[0].cols = -3;
    expect(p, "columns [0, +-3)");
    p = with_hf(&w);
    p->hf.pieces[1].hf_name = "";
    expect(p, "names no tensor");
    p = with_hf(&w);
    p->hf.pieces[1].tensor = p->inputs[0];
    expect(p, "which is not a parameter");
}
END_TEST

/* the fixture's first 2-D parameter [a, n] as a stack of a HF tensors [n] */
static Plan *with_stack(int32_t *param) {
    Plan *p = fresh();
    int32_t w = -1;
    for (uint32_t i = 0; i < p->ntensors && w < 0; i++)
        if (p->tensors[i].cls == TC_PARAM && p->tensors[i].rank == 2) w = (int32_t)i;
    ck_assert_int_ge(w, 0);
    int64_t a = p->tensors[w].dims[0], n = p->tensors[w].dims[1];
    p->hf.arch = "MixtralForCausalLM";
    p->hf.config = "{}";
    p->hf.pieces = arena_alloc(&p->arena, (size_t)a * sizeof *p->hf.pieces);
    for (int64_t e = 0; e < a; e++)
        p->hf.pieces[e] = (PlanHfPiece){w, arena_printf(&p->arena, "experts.%d.weight", (int)e), 0, 0, n, 1, (int32_t)e, 0};
    p->hf.npieces = (uint32_t)a;
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "%s", msgs);
    *param = w;
    return p;
}

START_TEST(hf_stacked) {
    int32_t w;
    Plan *p = with_stack(&w);
    int64_t a = p->tensors[w].dims[0];
    p->hf.npieces--;
    expectf(p, "hf pieces of '%s' stack %d slices, its first axis has %d", p->tensors[w].name, (int)a - 1, (int)a);
    p = with_stack(&w);
    p->hf.pieces[1].index = 2;
    expectf(p, "hf piece 1 of '%s': stacked index 2, expected 1", p->tensors[w].name);
    p = with_stack(&w);
    p->hf.pieces[1].stacked = 0;
    expect(p, "stacked 0 among pieces that are");
    p = with_stack(&w);
    p->hf.pieces[0].transpose = 1;
    expect(p, "is stacked and transposed");
    /* PEFT's expert layouts take a rank-3 parameter whole, in one piece */
    p = with_stack(&w);
    p->hf.pieces[0].layout = PLAN_HF_EXPERT_ROWS;
    expectf(p, "hf piece 0 of '%s': an expert layout takes a rank-3 parameter whole, in one piece", p->tensors[w].name);
    p = with_stack(&w);
    p->hf.pieces[0].layout = 3;
    expectf(p, "hf piece 0 of '%s': layout 3", p->tensors[w].name);
}
END_TEST

START_TEST(message_cap) {
    Plan *p = fresh();
    for (uint32_t i = 0; i < p->nbuffers; i++) p->buffers[i].offset = 0;
    char small[64];
    int n = verify_plan(p, small, sizeof small);
    ck_assert_int_ge(n, 20);
    ck_assert_uint_lt(strlen(small), sizeof small);
    plan_free(p);
}
END_TEST

/* ---- CUDA launches ---- */

/* a fresh, valid GPU plan to break: the fixture with its launches */
static Plan *fresh_gpu(void) {
    Plan *p = fx_plan_launches("h200", 2, 1);
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "the unbroken GPU plan fails: %s", msgs);
    return p;
}

/* the first launch of an op with a workspace argument; *op its op */
static uint32_t ws_launch(const Plan *p, uint32_t *arg) {
    for (uint32_t i = 0; i < p->nlaunches; i++)
        for (uint32_t k = 0; k < p->launches[i].nargs; k++)
            if (p->launch_args[p->launches[i].arg + k].kind == PARG_WS) {
                *arg = k;
                return i;
            }
    ck_abort_msg("no launch with a workspace argument");
    return 0;
}

START_TEST(gpu_plan_launches) {
    Plan *p = fresh_gpu();
    /* Adam and the gradient norm count this rank's shard */
    int adam = 0, sumsq = 0;
    for (uint32_t i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        const PlanLaunchArg *a = &p->launch_args[l->arg];
        if (!strcmp(l->entry, "zk_adam")) {
            ck_assert_int_eq(a[6].kind, PARG_NUMEL);
            ck_assert_int_eq(a[6].tensor, p->ops[l->op].in[0]);
            adam++;
        } else if (!strcmp(l->entry, "zk_sumsq_partial")) {
            ck_assert_int_eq(a[1].kind, PARG_TENSOR);
            ck_assert_int_eq(a[2].kind, PARG_NUMEL);
            ck_assert_int_eq(a[2].tensor, a[1].tensor);
            sumsq++;
        }
    }
    ck_assert_int_gt(adam, 0);
    ck_assert_int_eq(adam, sumsq);
    /* the utility axpy: y, x bound by the executor, then n and alpha */
    int32_t u = p->util[PLAN_UTIL_AXPY][DT_BF16];
    ck_assert_int_ge(u, 0);
    const PlanLaunch *l = &p->launches[u];
    ck_assert_int_eq(l->op, -1);
    ck_assert_uint_eq(l->nargs, 4);
    const PlanLaunchArg *a = &p->launch_args[l->arg];
    ck_assert(a[0].kind == PARG_TENSOR && a[0].tensor == -1 && a[1].kind == PARG_TENSOR && a[1].tensor == -1);
    ck_assert(a[2].kind == PARG_I64 && a[3].kind == PARG_F32);
    plan_free(p);
}
END_TEST

START_TEST(launch_names_and_ranges) {
    Plan *p = fresh_gpu();
    p->launches[1].unit = "gemm-000000000000.cu";
    expectf(p, "launch 1 (%s) names unit 'gemm-000000000000.cu', which the plan does not embed", "zk_embed_fwd");
    p = fresh_gpu();
    p->launches[2].entry = "";
    expect(p, "launch 2 has no entry point");
    p = fresh_gpu();
    p->launches[0].op = (int32_t)p->nops;
    expectf(p, "launch 0 (zk_fill_i32): op %u out of range", p->nops);
    p = fresh_gpu();
    p->launches[1].nargs = p->nlaunch_args;
    expectf(p, "launch 1 (zk_embed_fwd): arguments [%u, +%u) out of range (%u arguments)", p->launches[1].arg,
            p->nlaunch_args, p->nlaunch_args);
    p = fresh_gpu();
    p->launch_args[p->launches[1].arg + 2].kind = 9;
    expect(p, "launch 1 (zk_embed_fwd): argument 2 has unknown kind 9");
    p = fresh_gpu();
    p->launch_args[p->launches[1].arg + 3].rt = PLAN_NRT;
    expect(p, "launch 1 (zk_embed_fwd): argument 3: run-time value 5 out of range");
    p = fresh_gpu();
    p->launch_args[p->launches[1].arg + 1].tensor = (int32_t)p->ntensors + 3;
    expectf(p, "launch 1 (zk_embed_fwd): argument 1: tensor %u out of range", p->ntensors + 3);
    p = fresh_gpu();
    p->launch_args[p->launches[1].arg + 1].tensor = -1;
    expect(p, "launch 1 (zk_embed_fwd) of op 0: argument 1 binds no tensor");
}
END_TEST

START_TEST(launch_geometry_and_workspace) {
    Plan *p = fresh_gpu();
    p->launches[1].grid[1] = 0;
    expect(p, "launch 1 (zk_embed_fwd): empty grid (");
    p = fresh_gpu();
    p->launches[1].block[0] = 1024;
    p->launches[1].block[1] = 2;
    expect(p, "launch 1 (zk_embed_fwd): block (1024,2,1) exceeds CUDA's 1024 threads (z at most 64)");
    p = fresh_gpu();
    uint32_t k, i = ws_launch(p, &k);
    int64_t ws = p->op_code[p->launches[i].op].ws_bytes;
    p->launch_args[p->launches[i].arg + k].i = ws;
    expectf(p, "launch %u (%s): argument %u: workspace offset %lld outside the op's %lld bytes", i, p->launches[i].entry, k,
            (long long)ws, (long long)ws);
    p = fresh_gpu();
    i = ws_launch(p, &k);
    int32_t op = p->launches[i].op;
    p->op_code[op].err_off = p->op_code[op].ws_bytes - 8;
    expectf(p, "op %d: error word at %lld does not fit its %lld-byte workspace", op, (long long)p->op_code[op].err_off,
            (long long)p->op_code[op].ws_bytes);
}
END_TEST

START_TEST(op_code_and_utility) {
    Plan *p = fresh_gpu();
    p->op_code[3].count = p->nlaunches;
    expectf(p, "op 3: launches [%u, +%u) out of range (%u launches)", p->op_code[3].first, p->nlaunches, p->nlaunches);
    p = fresh_gpu();
    p->op_code[3].first = p->op_code[4].first;
    expectf(p, "op 3: its launch %u (%s) belongs to op 4", p->op_code[4].first, p->launches[p->op_code[4].first].entry);
    p = fresh_gpu();
    p->util[PLAN_UTIL_AXPY][DT_F16] = 0;
    expect(p, "utility launch 0 for dtype 3: launch 0 (zk_fill_i32) belongs to op 0");
    p = fresh_gpu();
    p->util[PLAN_UTIL_AXPY][DT_F32] = (int32_t)p->nlaunches;
    expectf(p, "utility launch 0 for dtype 1: launch %u out of range", p->nlaunches);
    p = fresh_gpu();
    int k = find_op(p, PI_KERNEL, 0);
    p->op_code[p->instrs[k].arg].count = 0;
    expectf(p, "instruction %d (kernel) runs op %d, which has no launches", k, p->instrs[k].arg);
    p = fresh_gpu();
    p->op_code = NULL;
    expectf(p, "the plan has %u launches but no op code table", p->nlaunches);
}
END_TEST

/* ---- tile launches ---- */

static Plan *fresh_tiled(void) {
    Plan *p = fx_plan_launches_tiled("h200", 2, 1, 2);
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "the unbroken tiled GPU plan fails: %s", msgs);
    ck_assert_uint_gt(p->ntile_code, 2);
    return p;
}

/* the first tile code entry of an op of prim (kind fwd when fwd, else bwd), tile tile */
static uint32_t tile_entry(const Plan *p, int prim, bool fwd, int tile) {
    for (uint32_t k = 0; k < p->ntile_code; k++) {
        const PlanOp *o = &p->ops[p->tile_code[k].op];
        if (o->prim == prim && (o->kind == OP_FWD) == fwd && o->kind != OP_RECOMPUTE && p->tile_code[k].tile == tile) return k;
    }
    ck_abort_msg("no tile %d of a %s %s op", tile, fwd ? "forward" : "backward", prim_names[prim]);
    return 0;
}

static const PlanLaunchArg *targ(const Plan *p, uint32_t launch, uint32_t k) {
    ck_assert_uint_lt(k, p->launches[launch].nargs);
    return &p->launch_args[p->launches[launch].arg + k];
}

/* The tile launches bind the op's tensors: the weight whole (the executor
 * binds it to the tile's rows), activations at the tile's column offset. */
START_TEST(tile_launch_arguments) {
    Plan *p = fresh_tiled();
    /* linear forward, tile 1 of 2 (the fixture's MLP: x [32, 64] * w1 [64, 256], bf16): y += x[:, 32:64] * w_t */
    uint32_t k = tile_entry(p, PRIM_LINEAR, true, 1);
    const PlanTileCode *t = &p->tile_code[k];
    const PlanOp *o = &p->ops[t->op];
    ck_assert_uint_eq(t->count, 1);
    ck_assert_str_eq(p->launches[t->first].entry, "zk_gemm");
    int64_t rows = p->tensors[o->in[1]].dims[0] / 2, K = p->tensors[o->in[1]].dims[0];
    ck_assert(targ(p, t->first, 0)->tensor == o->out[0] && targ(p, t->first, 0)->i == 0);
    ck_assert(targ(p, t->first, 1)->tensor == o->in[0] && targ(p, t->first, 1)->i == rows * 2);
    ck_assert(targ(p, t->first, 2)->tensor == o->in[1] && targ(p, t->first, 2)->i == 0);
    ck_assert_int_eq(targ(p, t->first, 3)->kind, PARG_NULL); /* the bias: tile 0's */
    ck_assert_int_eq(targ(p, t->first, 6)->i, rows);         /* K */
    ck_assert_int_eq(targ(p, t->first, 7)->i, K);            /* lda: x's full width */
    ck_assert_double_eq(targ(p, t->first, 17)->f, 1.0);      /* beta: accumulate onto tile 0 */
    k = tile_entry(p, PRIM_LINEAR, true, 0);
    t = &p->tile_code[k];
    ck_assert_int_eq(targ(p, t->first, 3)->tensor, p->ops[t->op].in[2]);
    ck_assert_double_eq(targ(p, t->first, 17)->f, 0.0);
    /* embedding: forward clears the error word then copies the tile's rows; backward (bf16) through fp32 */
    k = tile_entry(p, PRIM_EMBEDDING, true, 1);
    t = &p->tile_code[k];
    ck_assert_uint_eq(t->count, 2);
    ck_assert_str_eq(p->launches[t->first + 1].entry, "zk_embed_fwd_tile");
    ck_assert_int_eq(targ(p, t->first + 1, 4)->i, p->tensors[p->ops[t->op].in[0]].dims[0] / 2); /* r0 */
    ck_assert_int_eq(targ(p, t->first + 1, 8)->i, 0);                                           /* zero: tile 0 only */
    ck_assert_int_eq(targ(p, t->first + 1, 9)->i, p->op_code[t->op].err_off);
    k = tile_entry(p, PRIM_EMBEDDING, false, 0);
    t = &p->tile_code[k];
    ck_assert_uint_eq(t->count, 3);
    ck_assert_str_eq(p->launches[t->first + 1].entry, "zk_embed_bwd_tile");
    ck_assert_str_eq(p->launches[t->first + 2].entry, "zk_cast_from_f32");
    plan_free(p);
}
END_TEST

START_TEST(tile_code_rules) {
    Plan *p = fresh_tiled();
    p->tile_code[1].op = (int32_t)p->nops;
    expectf(p, "tile code 1: op %u out of range", p->nops);
    p = fresh_tiled();
    p->tile_code[1].tile = 2;
    expectf(p, "tile code 1 (op %d): tile 2 of 2 does not exist", p->tile_code[1].op);
    p = fresh_tiled();
    p->tile_code[1].count = p->nlaunches;
    expectf(p, "tile code 1 (op %d): launches [%u, +%u) out of range (%u launches)", p->tile_code[1].op, p->tile_code[1].first,
            p->nlaunches, p->nlaunches);
    p = fresh_tiled();
    int32_t op0 = p->launches[0].op;
    ck_assert_int_ne(p->tile_code[2].op, op0);
    p->tile_code[2].first = 0;
    expectf(p, "tile code 2 (op %d): its launch 0 (%s) belongs to op %d", p->tile_code[2].op, p->launches[0].entry, op0);
    p = fresh_tiled();
    PlanTileCode x = p->tile_code[0];
    p->tile_code[0] = p->tile_code[1];
    p->tile_code[1] = x;
    expectf(p, "tile code 1 (op %d, tile %d of 2) is not after entry 0 (op %d, tile %d of 2): entries are sorted and distinct",
            x.op, x.tile, p->tile_code[0].op, p->tile_code[0].tile);
    p = fresh_tiled();
    p->tile_code[1] = p->tile_code[0];
    expect(p, "tile code 1 (op ");
    /* a tiled kernel instruction without its tile launches */
    p = fresh_tiled();
    const PlanTileCode *last = &p->tile_code[--p->ntile_code];
    int i = -1;
    for (uint32_t k = 0; k < p->ninstrs && i < 0; k++)
        if (p->instrs[k].op == PI_KERNEL && p->instrs[k].arg == last->op && p->instrs[k].tile == last->tile &&
            p->instrs[k].ntiles == last->ntiles)
            i = (int)k;
    ck_assert_int_ge(i, 0);
    expectf(p, "instruction %d (kernel) runs tile %d of 2 of op %d, which has no tile launches", i, last->tile, last->op);
    /* the op's error word, read after each tile, and the tile's workspace arguments fit the tile's workspace */
    p = fresh_tiled();
    uint32_t k = tile_entry(p, PRIM_EMBEDDING, true, 0);
    p->tile_code[k].ws_bytes = 8;
    expectf(p, "tile code %u (op %d): the op's error word at 0 does not fit the tile's 8-byte workspace", k, p->tile_code[k].op);
    p = fresh_tiled();
    k = tile_entry(p, PRIM_EMBEDDING, true, 0);
    p->tile_code[k].ws_bytes = 0;
    expectf(p, "launch %u (zk_fill_i32): argument 0: workspace offset 0 outside the tile's 0 bytes", p->tile_code[k].first);
    p = fresh_tiled();
    k = tile_entry(p, PRIM_EMBEDDING, true, 0);
    p->tile_code[k].ws_bytes = -1;
    expectf(p, "tile code %u (op %d): workspace of -1 bytes", k, p->tile_code[k].op);
    p = fresh_tiled();
    p->op_code = NULL;
    expectf(p, "the plan has %u tile code entries but no op code table", p->ntile_code);
}
END_TEST

/* GEMM descriptors: each must say what its launch computes, inside its
 * tensors and its op's workspace. */
START_TEST(gemm_descriptors) {
    Plan *p = fresh_gpu();
    ck_assert_uint_gt(p->ngemms, 3);
    uint32_t g = 1, li = p->gemms[g].launch;
    p->gemms[g].m++;
    expectf(p, "gemm %u: its launch %u's arguments are not the descriptor's", g, li);
    /* launch and descriptor agree, but C has not that many rows */
    p = fresh_gpu();
    p->gemms[g].m *= 1000;
    p->launch_args[p->launches[li].arg + 4].i = p->gemms[g].m;
    expectf(p, "gemm %u: C reaches element", g);
    p = fresh_gpu();
    p->gemms[g].dtype = DT_F32;
    expectf(p, "gemm %u: tensor '%s' is bf16, the gemm f32", g, p->tensors[p->gemms[g].c].name);
    p = fresh_gpu();
    p->gemms[g].ws_off = 100;
    expectf(p, "gemm %u: workspace [100, +%lld) beyond 1073741824 bytes or not 256-aligned", g, (long long)p->gemms[g].ws_bytes);
    p = fresh_gpu();
    p->gemms[g].ws_bytes = PLAN_GEMM_MAX_WS;
    p->gemms[g].ws_off = 256;
    expectf(p, "gemm %u: workspace [256, +1073741824) beyond 1073741824 bytes", g);
    p = fresh_gpu();
    p->gemms[g].why = PLAN_GEMM_WHY_BATCH_SUM;
    expectf(p, "gemm %u: path cublaslt with reason 'sums products over batches'", g);
    p = fresh_gpu();
    p->gemms[g].path = PLAN_GEMM_NVRTC;
    p->gemms[g].why = PLAN_GEMM_WHY_BATCH_SUM;
    ck_assert_int_eq(verify_plan(p, msgs, sizeof msgs), 0); /* NVRTC only: allowed, the launch runs */
    plan_free(p);
    /* B dequantized into the workspace: the launch's argument 2 must be the workspace, b a quantized weight */
    p = fresh_gpu();
    p->gemms[g].path = PLAN_GEMM_NVRTC;
    p->gemms[g].why = PLAN_GEMM_WHY_DEQUANT;
    expectf(p, "gemm %u: its launch %u's arguments are not the descriptor's", g, li);
    p = fresh_gpu();
    p->gemms[g].rbatch = 2;
    p->launch_args[p->launches[li].arg + 13].i = 2;
    expectf(p, "gemm %u: a cuBLASLt gemm cannot sum 2 batches", g);
    p = fresh_gpu();
    p->gemms[0].launch = 0;
    expectf(p, "gemm 0: launch 0 (%s) is not a zk_gemm launch", p->launches[0].entry);
    /* one launch left without a descriptor */
    p = fresh_gpu();
    li = p->gemms[g].launch;
    memmove(&p->gemms[g], &p->gemms[g + 1], sizeof *p->gemms * (p->ngemms - g - 1));
    p->ngemms--;
    expectf(p, "launch %u (zk_gemm) has no gemm descriptor", li);
    /* an operand in the op's workspace (the chunked loss's logits): the launch must pass the workspace at that
     * offset, and the matrix must lie inside the op's workspace */
    p = fresh_gpu();
    li = p->gemms[g].launch;
    p->gemms[g].c = PLAN_GEMM_OP_WS;
    expectf(p, "gemm %u: its launch %u's arguments are not the descriptor's", g, li);
    p = fresh_gpu();
    PlanLaunchArg *c0 = &p->launch_args[p->launches[li].arg];
    p->gemms[g].c = PLAN_GEMM_OP_WS;
    p->gemms[g].off_c = 0;
    *c0 = (PlanLaunchArg){.kind = PARG_WS, .tensor = -1, .i = 0};
    int op = p->launches[li].op;
    int64_t need = p->gemms[g].m * p->gemms[g].ldc * plan_dtype_size(p->gemms[g].dtype);
    p->op_code[op].ws_bytes = need - 256;
    expectf(p, "gemm %u: C reaches element %lld of 'the op's workspace', which has %lld", g,
            (long long)(need / plan_dtype_size(p->gemms[g].dtype) - p->gemms[g].ldc + p->gemms[g].n),
            (long long)((need - 256) / plan_dtype_size(p->gemms[g].dtype)));
    p = fresh_gpu();
    c0 = &p->launch_args[p->launches[li].arg];
    p->gemms[g].c = PLAN_GEMM_OP_WS;
    p->gemms[g].off_c = 0;
    *c0 = (PlanLaunchArg){.kind = PARG_WS, .tensor = -1, .i = 0};
    p->op_code[op].ws_bytes = need;
    ck_assert_int_eq(verify_plan(p, msgs, sizeof msgs), 0);
    plan_free(p);
    /* a plan with no descriptors at all (version 3) is sound: its launches run */
    p = fresh_gpu();
    p->ngemms = 0;
    ck_assert_int_eq(verify_plan(p, msgs, sizeof msgs), 0);
    plan_free(p);
}
END_TEST

/* The speculative optimizer (docs/schedule.md): gpt2-tiny (clipping) on
 * 2 ranks of a GPU target, optimizer state in CPU memory, overlapped. Every
 * speculative Adam has its redo; each rule is found and worded. */
static Plan *speculative(ZlModel *m) {
    ZlOptions zo = {.target = "h200", .ranks = 2, .state_tier = TIER_CPU, .overlap = 1};
    Plan *p = zl_compile(m, "examples/gpt2-tiny.zl", &zo);
    ck_assert(plan_speculative(p));
    ck_assert_uint_lt(p->opt_begin, p->redo_begin);
    return p;
}

/* the first CPU Adam of the micro-batch (speculative), and the redo range's first */
static int first_spec(const Plan *p) {
    for (uint32_t i = 0; i < p->opt_begin; i++)
        if (p->instrs[i].op == PI_CPU_ADAM) return (int)i;
    return -1;
}

static void expect_spec(ZlModel *m, const char *what) {
    int n = verify_plan(m->pr.plan, msgs, sizeof msgs);
    ck_assert_msg(n > 0, "not caught: %s", what);
    ck_assert_msg(strstr(msgs, what) != NULL, "expected \"%s\" among:\n%s", what, msgs);
    zl_free(m);
}

START_TEST(speculative_optimizer) {
    ZlModel m;
    Plan *p = speculative(&m);
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "%s", msgs);
    int s = first_spec(p);
    ck_assert_int_ge(s, 0);
    ck_assert_uint_eq(p->instrs[s].nopnd, 7);
    ck_assert_int_eq(p->operands[p->instrs[s].opnd + 6].mode, PLAN_W);
    ck_assert_int_eq(p->instrs[p->redo_begin].op == PI_CPU_ADAM || p->instrs[p->redo_begin].op == PI_H2D, 1);
    zl_free(&m);
    /* a speculative Adam without its backup */
    p = speculative(&m);
    p->instrs[first_spec(p)].nopnd = 6;
    expect_spec(&m, "steps in the micro-batch without a backup (the step has a gradient norm)");
    /* a backup too small for what the step changes */
    p = speculative(&m);
    p->operands[p->instrs[first_spec(p)].opnd + 6].bytes -= 4;
    expect_spec(&m, "its backup holds");
    /* a speculative Adam that reads the norm it cannot have yet */
    p = speculative(&m);
    {
        const PlanInstr *r = &p->instrs[p->redo_begin];
        while (r->op != PI_CPU_ADAM) r++;
        p->operands[p->instrs[first_spec(p)].opnd + 5] = p->operands[r->opnd + 5];
    }
    expect_spec(&m, "reads the gradient norm, which does not exist yet");
    /* a redo that restores another sub-group's backup */
    p = speculative(&m);
    {
        uint32_t a = 0, b = 0;
        for (uint32_t i = p->redo_begin; i < p->redo_end; i++)
            if (p->instrs[i].op == PI_CPU_ADAM) {
                if (!a) a = i;
                else if (!b) b = i;
            }
        ck_assert_uint_gt(b, 0);
        PlanOperand t = p->operands[p->instrs[a].opnd + 6];
        p->operands[p->instrs[a].opnd + 6] = p->operands[p->instrs[b].opnd + 6];
        p->operands[p->instrs[b].opnd + 6] = t;
    }
    expect_spec(&m, "has no redo on the same state and backup");
    /* a redo range that does not hold the redos */
    p = speculative(&m);
    p->redo_end = p->redo_begin + 1;
    expect_spec(&m, "an Adam restoring a backup outside the redo range");
    /* speculation under accumulation: the gradient is not final in the micro-batch */
    p = speculative(&m);
    p->train.grad_accum = 2;
    expect_spec(&m, "a speculative Adam outside the micro-batch of a speculative plan with one micro-batch per step");
    /* ranges out of order are refused by the reader too (test_plan) */
}
END_TEST

/* bf16: the speculative Adams step out of place into twins (9 operands) */
START_TEST(speculative_twins) {
    ZlModel m;
    ZlOptions zo = {.target = "h200", .ranks = 2, .dtype = DT_BF16, .state_tier = TIER_CPU, .overlap = 1};
    Plan *p = zl_compile(&m, "examples/gpt2-tiny.zl", &zo);
    ck_assert_msg(verify_plan(p, msgs, sizeof msgs) == 0, "%s", msgs);
    int s = first_spec(p);
    ck_assert_uint_eq(p->instrs[s].nopnd, 9);
    const PlanOperand *o = &p->operands[p->instrs[s].opnd];
    ck_assert(p->buffers[o[6].buffer].flags & PLAN_BUF_TWIN);
    ck_assert_int_eq(o[2].mode, PLAN_R);
    /* the step writing its own home instead of the twin */
    p->operands[p->instrs[s].opnd + 7].buffer = o[3].buffer;
    expect_spec(&m, "operand 7 is not the twin of operand 3's home");
    /* a twin in GPU memory */
    p = zl_compile(&m, "examples/gpt2-tiny.zl", &zo);
    p->buffers[p->operands[p->instrs[first_spec(p)].opnd + 6].buffer].arena = ARENA_GPU;
    expect_spec(&m, "is a twin but not a persistent copy, in CPU memory or on NVMe");
}
END_TEST

/* Optimizer state on NVMe, overlapped: the speculative Adams step staged
 * copies (6 operands, no norm) and write the results to twins on NVMe; f32
 * (no master: the parameter is state, its twin on NVMe too) and bf16 (the
 * parameter written home as after any Adam). */
static Plan *speculative_nvme(ZlModel *m, DType dt) {
    ZlOptions zo = {.target = "h200", .ranks = 2, .dtype = dt, .state_tier = TIER_NVME, .overlap = 1};
    Plan *p = zl_compile(m, "examples/gpt2-tiny.zl", &zo);
    ck_assert(plan_speculative(p));
    return p;
}

/* the first NVME_WRITE in [from, to) into a twin (of a parameter when param), -1: none */
static int twin_write(const Plan *p, uint32_t from, uint32_t to, bool param) {
    for (uint32_t i = from; i < to; i++) {
        if (p->instrs[i].op != PI_NVME_WRITE) continue;
        const PlanBuffer *b = &p->buffers[p->operands[p->instrs[i].opnd + 1].buffer];
        if ((b->flags & PLAN_BUF_TWIN) && (!param || p->tensors[b->tensor].cls == TC_PARAM)) return (int)i;
    }
    return -1;
}

START_TEST(speculative_nvme_twins) {
    ZlModel m;
    Plan *p = speculative_nvme(&m, DT_F32);
    int s = first_spec(p);
    ck_assert_int_ge(s, 0);
    ck_assert_uint_eq(p->instrs[s].nopnd, 6);
    const PlanOperand *o = &p->operands[p->instrs[s].opnd];
    ck_assert_int_lt(o[5].buffer, 0); /* no norm in the backward */
    for (int k = 3; k < 5; k++) ck_assert(!(p->buffers[o[k].buffer].flags & PLAN_BUF_PERSISTENT));
    int w = twin_write(p, 0, p->opt_begin, true);
    ck_assert_int_ge(w, 0); /* f32: the parameter's twin */
    ck_assert_int_eq(p->buffers[p->operands[p->instrs[w].opnd + 1].buffer].arena, ARENA_NVME);
    ck_assert_int_ge(twin_write(p, p->redo_begin, p->redo_end, true), 0);
    /* a speculative write into the home instead of the twin */
    {
        PlanOperand *d = &p->operands[p->instrs[w].opnd + 1];
        const PlanBuffer *tb = &p->buffers[d->buffer];
        d->buffer = p->shards[p->tensors[tb->tensor].shard].buffer;
        char want[160];
        snprintf(want, sizeof want, "instruction %d (nvme_write) writes the home of '%s' in the micro-batch", w,
                 p->tensors[tb->tensor].name);
        expect_spec(&m, want);
    }
    /* a redo that writes another range than the speculative step did */
    p = speculative_nvme(&m, DT_F32);
    p->operands[p->instrs[twin_write(p, p->redo_begin, p->redo_end, false)].opnd + 1].offset += 4096;
    expect_spec(&m, "are not each written once by the redo");
    /* a redo range that ends before its writes */
    p = speculative_nvme(&m, DT_F32);
    p->redo_end = p->redo_begin + 1;
    expect_spec(&m, "outside the micro-batch and the redo range");
    /* a speculative Adam on the state's home, not a staged copy */
    p = speculative_nvme(&m, DT_F32);
    s = first_spec(p);
    p->operands[p->instrs[s].opnd + 3].buffer = p->shards[p->tensors[p->tensors[p->instrs[s].arg].momentum].shard].buffer;
    expect_spec(&m, "steps in the micro-batch without a backup (the step has a gradient norm)");
    /* a twin on NVMe in CPU memory */
    p = speculative_nvme(&m, DT_F32);
    p->buffers[p->operands[p->instrs[twin_write(p, 0, p->opt_begin, false)].opnd + 1].buffer].arena = ARENA_CPU;
    expect_spec(&m, "is a twin but not a persistent copy, in CPU memory or on NVMe");
    /* bf16: a master; the parameter is no state and has no twin */
    p = speculative_nvme(&m, DT_BF16);
    ck_assert_int_ge(twin_write(p, 0, p->opt_begin, false), 0);
    ck_assert_int_lt(twin_write(p, 0, p->ninstrs, true), 0);
    zl_free(&m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("verify");
    TCase *t = tcase_create("verify");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, valid_plans_on_every_target);
    tcase_add_test(t, overlapping_buffers);
    tcase_add_test(t, problems_in_check_order);
    tcase_add_test(t, adam_operand_bytes_overflow);
    tcase_add_test(t, missing_fetch);
    tcase_add_test(t, dependency_cycle);
    tcase_add_test(t, over_capacity);
    tcase_add_test(t, race);
    tcase_add_test(t, race_on_a_busy_buffer);
    tcase_add_test(t, shards);
    tcase_add_test(t, ranges_and_queues);
    tcase_add_test(t, layouts);
    tcase_add_test(t, overlapping_operand_ranges);
    tcase_add_test(t, micro_batch_and_inputs);
    tcase_add_test(t, operands_the_executor_addresses);
    tcase_add_test(t, hf_mapping);
    tcase_add_test(t, hf_stacked);
    tcase_add_test(t, message_cap);
    tcase_add_test(t, gpu_plan_launches);
    tcase_add_test(t, launch_names_and_ranges);
    tcase_add_test(t, launch_geometry_and_workspace);
    tcase_add_test(t, op_code_and_utility);
    tcase_add_test(t, tile_launch_arguments);
    tcase_add_test(t, tile_code_rules);
    tcase_add_test(t, gemm_descriptors);
    tcase_add_test(t, speculative_optimizer);
    tcase_add_test(t, speculative_twins);
    tcase_add_test(t, speculative_nvme_twins);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
