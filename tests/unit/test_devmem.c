#include <check.h>
#include <stdio.h>
#include <string.h>
#include "devmem.h"

/* A hand-made plan of 2 ranks: a gpu arena of 10000 bytes (12288 as
 * allocated, in 4 KiB pages) and a cpu one; an op workspace of 1000 bytes
 * and a tile's of 3000 (3072, rounded to 256); one all-gather of a 1000-byte
 * slice (2000 gathered) and one reduce-scatter into a 700-byte shard (3 x
 * 700 = 2100 with the received shard after the padded source: 2304); a
 * cuBLASLt GEMM at [256, 256 + 4096) of the GEMM workspace and a launch
 * GEMM with a larger one, which allocates nothing. Instructions and where
 * they run:
 *   0 h2d     cpu -> gpu            device (no workspace: a copy)
 *   1 kernel  compute               device: kernel + cuBLASLt workspace
 *   2 allgather gpu, comm           device: kernel workspace + scratch
 *   3 reduce-scatter gpu, comm      device
 *   4 accum   cpu operands, cpu     host
 *   5 accum   gpu operands, d2h     device: kernel workspace
 *   6 cpu_adam cpu                  host
 *   7 allreduce cpu operand, cpu    host: no scratch */
static PlanBuffer bufs[2];
static PlanOperand opnds[16];
static PlanInstr ins[8];
static PlanOpCode code[1];
static PlanTileCode tiles[1];
static PlanGemm gemms[2];

static Plan hand(void) {
    Plan p;
    memset(&p, 0, sizeof p);
    p.ranks = 2;
    p.arenas[ARENA_GPU].size = 10000;
    p.arenas[ARENA_CPU].size = 50000;
    bufs[0] = (PlanBuffer){.name = "g", .arena = ARENA_GPU, .tensor = -1, .bytes = 10000};
    bufs[1] = (PlanBuffer){.name = "c", .arena = ARENA_CPU, .tensor = -1, .bytes = 50000};
    uint32_t k = 0;
#define OPND(b, n) (opnds[k++] = (PlanOperand){.buffer = (b), .bytes = (n)})
    ins[0] = (PlanInstr){.op = PI_H2D, .queue = Q_H2D, .opnd = k, .nopnd = 2, .ntiles = 1, .arg = -1};
    OPND(1, 100), OPND(0, 100);
    ins[1] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .opnd = k, .nopnd = 1, .ntiles = 1, .arg = 0};
    OPND(0, 64);
    ins[2] = (PlanInstr){.op = PI_ALLGATHER, .queue = Q_COMM, .opnd = k, .nopnd = 2, .ntiles = 1, .arg = -1};
    OPND(0, 1000), OPND(0, 1990);
    ins[3] = (PlanInstr){.op = PI_REDUCE_SCATTER, .queue = Q_COMM, .opnd = k, .nopnd = 2, .ntiles = 1, .arg = -1};
    OPND(0, 1390), OPND(0, 700);
    ins[4] = (PlanInstr){.op = PI_ACCUM, .queue = Q_CPU, .opnd = k, .nopnd = 2, .ntiles = 1, .arg = -1};
    OPND(1, 64), OPND(1, 64);
    ins[5] = (PlanInstr){.op = PI_ACCUM, .queue = Q_D2H, .opnd = k, .nopnd = 2, .ntiles = 1, .arg = -1};
    OPND(0, 64), OPND(0, 64);
    ins[6] = (PlanInstr){.op = PI_CPU_ADAM, .queue = Q_CPU, .opnd = k, .nopnd = 1, .ntiles = 1, .arg = -1};
    OPND(1, 64);
    ins[7] = (PlanInstr){.op = PI_ALLREDUCE, .queue = Q_CPU, .opnd = k, .nopnd = 1, .ntiles = 1, .arg = -1};
    OPND(1, 999999);
#undef OPND
    code[0] = (PlanOpCode){.count = 1, .ws_bytes = 1000, .err_off = -1};
    tiles[0] = (PlanTileCode){.op = 0, .tile = 1, .ntiles = 2, .count = 1, .ws_bytes = 3000};
    gemms[0] = (PlanGemm){.path = PLAN_GEMM_LT, .ws_off = 256, .ws_bytes = 4096};
    gemms[1] = (PlanGemm){.path = PLAN_GEMM_NVRTC, .ws_off = 0, .ws_bytes = 1 << 20};
    p.buffers = bufs;
    p.nbuffers = 2;
    p.operands = opnds;
    p.noperands = k;
    p.instrs = ins;
    p.ninstrs = 8;
    p.nops = 1;
    p.op_code = code;
    p.tile_code = tiles;
    p.ntile_code = 1;
    p.gemms = gemms;
    p.ngemms = 2;
    p.nlaunches = 1; /* devmem reads only the counts: the plan has code */
    p.nkernels = 1;
    return p;
}

START_TEST(where_each_runs) {
    Plan p = hand();
    const bool dev[8] = {true, true, true, true, false, true, false, false};
    for (int i = 0; i < 8; i++) ck_assert_msg(plan_instr_on_device(&p, &ins[i]) == dev[i], "instruction %d", i);
}
END_TEST

START_TEST(sizes_and_queues) {
    Plan p = hand();
    PlanDevMem m;
    plan_devmem(&p, true, &m);
    ck_assert(m.code);
    ck_assert_uint_eq(m.arena, 12288);
    ck_assert_uint_eq(m.bytes[PLAN_DEV_KERNEL_WS], 3072);
    ck_assert_uint_eq(m.bytes[PLAN_DEV_COLL_SCRATCH], 2304);
    ck_assert_uint_eq(m.bytes[PLAN_DEV_GEMM_WS], 4352);
    ck_assert_uint_eq(plan_gemm_ws_bytes(&p), 4352);
    ck_assert_int_eq(m.nqueues[PLAN_DEV_KERNEL_WS], 3);
    ck_assert(m.on[PLAN_DEV_KERNEL_WS][Q_COMPUTE] && m.on[PLAN_DEV_KERNEL_WS][Q_COMM] && m.on[PLAN_DEV_KERNEL_WS][Q_D2H]);
    ck_assert(!m.on[PLAN_DEV_KERNEL_WS][Q_CPU] && !m.on[PLAN_DEV_KERNEL_WS][Q_H2D]);
    ck_assert_int_eq(m.nqueues[PLAN_DEV_COLL_SCRATCH], 1);
    ck_assert(m.on[PLAN_DEV_COLL_SCRATCH][Q_COMM]);
    ck_assert_int_eq(m.nqueues[PLAN_DEV_GEMM_WS], 1);
    ck_assert(m.on[PLAN_DEV_GEMM_WS][Q_COMPUTE]);
    ck_assert_uint_eq(m.extra, 3 * 3072 + 2304 + 4352);
    ck_assert_uint_eq(m.total, 12288 + 3 * 3072 + 2304 + 4352);
    char s[512];
    plan_devmem_items_str(&m, s, sizeof s);
    ck_assert_msg(strstr(s, "kernel workspace 3.00 KiB x 3 queues (d2h comm compute)") != NULL, "%s", s);
    ck_assert_msg(strstr(s, "collective scratch 2.25 KiB x 1 queue (comm)") != NULL, "%s", s);
    ck_assert_msg(strstr(s, "cuBLASLt workspace 4.25 KiB x 1 queue (compute)") != NULL, "%s", s);
}
END_TEST

/* cuBLASLt off (or not loading): no GEMM workspace anywhere */
START_TEST(without_cublaslt) {
    Plan p = hand();
    PlanDevMem m;
    plan_devmem(&p, false, &m);
    ck_assert_uint_eq(m.bytes[PLAN_DEV_GEMM_WS], 0);
    ck_assert_int_eq(m.nqueues[PLAN_DEV_GEMM_WS], 0);
    ck_assert(!m.on[PLAN_DEV_GEMM_WS][Q_COMPUTE]);
    ck_assert_uint_eq(m.total, 12288 + 3 * 3072 + 2304);
}
END_TEST

/* One rank: the all-gather gathers 1 x 1000, the reduce-scatter 2 x 700 */
START_TEST(one_rank) {
    Plan p = hand();
    p.ranks = 1;
    PlanDevMem m;
    plan_devmem(&p, true, &m);
    ck_assert_uint_eq(m.bytes[PLAN_DEV_COLL_SCRATCH], 1536);
}
END_TEST

/* No workspaces: nothing beside the arena, and "none" */
START_TEST(nothing_beside) {
    Plan p = hand();
    p.ninstrs = 1; /* the copy only */
    p.ngemms = 0;
    code[0].ws_bytes = 0;
    tiles[0].ws_bytes = 0;
    PlanDevMem m;
    plan_devmem(&p, true, &m);
    ck_assert_uint_eq(m.extra, 0);
    ck_assert_uint_eq(m.total, 12288);
    char s[64];
    ck_assert_str_eq(plan_devmem_items_str(&m, s, sizeof s), "none");
}
END_TEST

/* A plan without GPU code (--kernels=none) says so */
START_TEST(without_code) {
    Plan p = hand();
    p.nlaunches = 0;
    p.nkernels = 0;
    PlanDevMem m;
    plan_devmem(&p, true, &m);
    ck_assert(!m.code);
}
END_TEST

int main(void) {
    Suite *s = suite_create("devmem");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, where_each_runs);
    tcase_add_test(tc, sizes_and_queues);
    tcase_add_test(tc, without_cublaslt);
    tcase_add_test(tc, one_rank);
    tcase_add_test(tc, nothing_beside);
    tcase_add_test(tc, without_code);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
