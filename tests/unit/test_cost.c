#include <check.h>
#include <math.h>
#include <string.h>
#include "cost.h"
#include "vocab.h"
#include "plan_fixture_plan.h"

/* A plan of a few instructions on a target with round numbers. */
static Plan *hand_plan(int ranks) {
    Plan *p = plan_new();
    p->ranks = ranks;
    p->target.name = "round";
    p->target.nodes = 1;
    p->target.gpus_per_node = ranks;
    p->target.gpu_pcie = 10e9;     /* 1 GB in 0.1 s */
    p->target.gpu_flops = 10e12;   /* 1 TFLOP in 0.1 s */
    p->target.gpu_hbm = 1e12;
    p->target.net_bandwidth = 10e9;
    p->target.net_inter = 10e9;
    p->target.net_latency = 0;
    p->target.nvme_read = 2e9 * ranks; /* per rank: 2 GB/s */
    p->target.nvme_write = 1e9 * ranks;
    p->target.cpu_bandwidth = 20e9 * ranks;
    static PlanInstr ins[8];
    static uint32_t deps[8];
    memset(ins, 0, sizeof ins);
    /* 0 h2d 1 GB; 1 h2d 1 GB; 2 kernel 1 TFLOP after 0; 3 kernel 1 TFLOP after 1;
     * 4 allgather 1 GB after 3; 5 nvme_read 1 GB; 6 cpu_adam 2 GB after 5; 7 step_end after 4, 6 */
    ins[0] = (PlanInstr){.op = PI_H2D, .queue = Q_H2D, .bytes = 1000000000, .ntiles = 1};
    ins[1] = ins[0];
    ins[2] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e12, .bytes = 1000, .ntiles = 1, .dep = 0, .ndeps = 1};
    deps[0] = 0;
    ins[3] = ins[2];
    ins[3].dep = 1;
    deps[1] = 1;
    ins[4] = (PlanInstr){.op = PI_ALLGATHER, .queue = Q_COMM, .bytes = 1000000000, .ntiles = 1, .dep = 2, .ndeps = 1};
    deps[2] = 3;
    ins[5] = (PlanInstr){.op = PI_NVME_READ, .queue = Q_NVME, .bytes = 1000000000, .ntiles = 1};
    ins[6] = (PlanInstr){.op = PI_CPU_ADAM, .queue = Q_CPU, .bytes = 2000000000, .ntiles = 1, .dep = 3, .ndeps = 1};
    deps[3] = 5;
    ins[7] = (PlanInstr){.op = PI_STEP_END, .queue = Q_COMPUTE, .ntiles = 1, .dep = 4, .ndeps = 2};
    deps[4] = 4;
    deps[5] = 6;
    p->instrs = ins;
    p->ninstrs = 8;
    p->deps = deps;
    p->ndeps = 6;
    p->opt_begin = 5;
    p->train.grad_accum = 1;
    return p;
}

static void release(Plan *p) {
    p->instrs = NULL;
    p->deps = NULL;
    plan_free(p);
}

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) < 1e-9, "%.12g != %.12g", (double)(a), (double)(b))

START_TEST(hand_computed) {
    Plan *p = hand_plan(4);
    CostResult r;
    ck_assert(cost_simulate(p, &r));
    /* h2d 0: [0, .1]; h2d 1: [.1, .2]; kernel 2: [.1, .2]; kernel 3: [.2, .3];
     * allgather of 1 GB over 4 ranks: 3/4 * 0.1 = .075 -> [.3, .375];
     * nvme_read at 2 GB/s per rank: [0, .5]; cpu_adam 2 GB at 20 GB/s: [.5, .6]; step end at .6 */
    NEAR(r.start[2], 0.1);
    NEAR(r.end[3], 0.3);
    NEAR(r.start[4], 0.3);
    NEAR(r.end[4], 0.375);
    NEAR(r.end[5], 0.5);
    NEAR(r.end[6], 0.6);
    NEAR(r.step_time, 0.6);
    NEAR(r.busy[Q_H2D], 0.2);
    NEAR(r.busy[Q_COMPUTE], 0.2);
    NEAR(r.busy[Q_NVME], 0.5);
    ck_assert_int_eq(r.bottleneck, Q_NVME);
    char s[256];
    cost_bottleneck_sentence(p, &r, s, sizeof s);
    ck_assert_str_eq(s, "The step is bound by NVMe reads and writes (busy 83% of the step, compute 33%): move state to CPU memory or add drives.");
    cost_free(&r);
    /* four micro-batches: the part before the optimizer (instructions 0-4, ending at .375) runs four times */
    p->train.grad_accum = 4;
    ck_assert(cost_simulate(p, &r));
    NEAR(r.step_time, 0.6 + 3 * 0.375);
    cost_free(&r);
    /* on one rank collectives are free */
    PlanInstr ag = p->instrs[4];
    p->ranks = 1;
    NEAR(cost_instr_time(p, &ag), 0);
    release(p);
}
END_TEST

/* The host backend: a rank's queues share its cores, so everything but
 * NVMe runs one instruction at a time, each in the earliest gap from when
 * it is ready (the same plan, backend "host"). */
START_TEST(host_cores_shared) {
    Plan *p = hand_plan(4);
    p->target.backend = "host";
    CostResult r;
    ck_assert(cost_simulate(p, &r));
    /* h2d 0: [0, .1]; h2d 1: [.1, .2]; kernel 2 (after 0): its gap after .2 -> [.2, .3];
     * kernel 3 (after 1): [.3, .4]; allgather (after 3): [.4, .475];
     * nvme_read: [0, .5], beside the rest; cpu_adam (after 5): the first gap from .5 -> [.5, .6] */
    NEAR(r.start[1], 0.1);
    NEAR(r.start[2], 0.2);
    NEAR(r.end[3], 0.4);
    NEAR(r.end[4], 0.475);
    NEAR(r.start[5], 0.0);
    NEAR(r.start[6], 0.5);
    NEAR(r.step_time, 0.6);
    cost_free(&r);
    /* the adam ready early (an nvme read of .25 GB: [0, .125]) still waits
     * for the cores, busy until the allgather ends: [.475, .575] */
    p->instrs[5].bytes = 250000000;
    ck_assert(cost_simulate(p, &r));
    NEAR(r.end[5], 0.125);
    NEAR(r.start[6], 0.475);
    NEAR(r.step_time, 0.575);
    cost_free(&r);
    /* copies hold the cores as kernels do: with h2d 0 of 3 GB ([0, .3]),
     * h2d 1 runs [.3, .4], and kernel 2, ready at .3, waits for it: [.4, .5] */
    p->instrs[0].bytes = 3000000000;
    ck_assert(cost_simulate(p, &r));
    NEAR(r.end[0], 0.3);
    NEAR(r.start[1], 0.3);
    NEAR(r.start[2], 0.4);
    cost_free(&r);
    /* a GPU target's queues overlap: kernel 2 right after its copy */
    p->target.backend = "cuda";
    ck_assert(cost_simulate(p, &r));
    NEAR(r.start[2], 0.3);
    cost_free(&r);
    release(p);
}
END_TEST

/* The measured figures of a probed target, by hand on the same plan: a
 * latency on every transfer, a ring step's latency per collective step, the
 * families' share of peak, and bytes over the rank's share of the node's
 * memory bandwidth where they take longer than the FLOPs. */
START_TEST(measured_terms) {
    Plan *p = hand_plan(4);
    PlanOp ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].prim = PRIM_LINEAR;
    ops[1].prim = PRIM_GELU;
    p->ops = ops;
    p->nops = 2;
    p->instrs[3].arg = 1;
    p->target.nvme_latency = 0.01;
    p->target.pcie_latency = 0.002;
    p->target.kernel_latency = 0.001;
    p->target.net_latency = 0.005;
    p->target.eff[FAM_GEMM] = 0.5;
    p->target.eff[FAM_ELEMENTWISE] = 0.25;
    CostResult r;
    ck_assert(cost_simulate(p, &r));
    /* h2d: .1 + .002 each -> [0, .102], [.102, .204]; kernel 2 (gemm): 1 TFLOP at 5 T + .001 = .201 -> [.102, .303];
     * kernel 3 (gelu): 1 TFLOP at 2.5 T + .001 = .401 -> [.303, .704]; allgather: .075 + 3 steps x .005 -> [.704, .794];
     * nvme_read: .5 + .01 -> [0, .51]; cpu_adam: .1 + .001 -> [.51, .611] */
    NEAR(r.end[0], 0.102);
    NEAR(r.end[2], 0.303);
    NEAR(r.end[3], 0.704);
    NEAR(r.end[4], 0.794);
    NEAR(r.end[5], 0.51);
    NEAR(r.end[6], 0.611);
    NEAR(r.step_time, 0.794);
    cost_free(&r);
    /* an all-reduce is two ring passes: 2 x 3/4 x .1 + 6 x .005 */
    PlanInstr ar = {.op = PI_ALLREDUCE, .queue = Q_COMM, .bytes = 1000000000, .ntiles = 1};
    NEAR(cost_instr_time(p, &ar), 0.15 + 0.03);
    /* a small one on many ranks goes up a tree and back: 8 bytes on 1024 ranks in 2 x 10 steps, not 2 x 1023 */
    ar.bytes = 8;
    p->ranks = 1024;
    NEAR(cost_instr_time(p, &ar), 2 * 10 * 0.005 + 2 * 8 / 10e9);
    p->ranks = 4;
    ar.bytes = 1000000000;
    /* memory-bound: 1 GB at 1 TB/s (1 ms) beats 1 GFLOP at 5 T (.2 ms) */
    PlanInstr k = {.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e9, .bytes = 1000000000, .ntiles = 1, .arg = 0};
    NEAR(cost_instr_time(p, &k), 0.001 + 0.001);
    /* the node's CPU bandwidth is shared by its ranks: 80 GB/s over 4 ranks, then over 2 */
    PlanInstr adam = p->instrs[6];
    NEAR(cost_instr_time(p, &adam), 2e9 / 20e9 + 0.001);
    p->target.gpus_per_node = 2;
    NEAR(cost_instr_time(p, &adam), 2e9 / 40e9 + 0.001);
    p->target.gpus_per_node = 4;
    /* the streaming instructions at the rates the probe timed for them (the node's, over 4 ranks): on the
     * cpu queue of a GPU plan, and on any queue of a host plan; not on the GPU, nor where the plan fits the cache */
    p->target.adam_bandwidth = 160e9;
    p->target.read_bandwidth = 120e9;
    NEAR(cost_instr_time(p, &adam), 2e9 / 40e9 + 0.001);
    PlanInstr norm = {.op = PI_GRAD_NORM, .queue = Q_CPU, .bytes = 1000000000, .ntiles = 1};
    NEAR(cost_instr_time(p, &norm), 1e9 / 30e9 + 2 * 2 * 0.005 + 8 * 2 / 10e9 + 0.001); /* + the all-reduce's tree */
    PlanInstr zero = {.op = PI_ZERO, .queue = Q_CPU, .bytes = 1000000000, .ntiles = 1};
    NEAR(cost_instr_time(p, &zero), 1e9 / 20e9 + 0.001); /* no rate of its own: the triad's */
    PlanInstr gadam = adam;
    gadam.op = PI_GPU_ADAM;
    gadam.queue = Q_COMPUTE;
    NEAR(cost_instr_time(p, &gadam), 2e9 / 1e12 + 0.001);
    const char *backend = p->target.backend;
    p->target.backend = "host";
    NEAR(cost_instr_time(p, &gadam), 2e9 / 40e9 + 0.001);
    norm.queue = Q_COMPUTE;
    NEAR(cost_instr_time(p, &norm), 1e9 / 30e9 + 2 * 2 * 0.005 + 8 * 2 / 10e9 + 0.001);
    p->target.cpu_cache = 1e18; /* everything fits: the cache's rate */
    p->target.cache_bandwidth = 400e9;
    NEAR(cost_instr_time(p, &gadam), 2e9 / 100e9 + 0.001);
    p->target.cpu_cache = p->target.cache_bandwidth = 0;
    p->target.backend = backend;
    p->target.adam_bandwidth = p->target.read_bandwidth = 0;
    /* a family the target is silent on runs at peak; a forged efficiency counts as none */
    ck_assert(cost_efficiency(&p->target, FAM_NORM) == 1);
    p->target.eff[FAM_NORM] = NAN;
    ck_assert(cost_efficiency(&p->target, FAM_NORM) == 1);
    ck_assert_int_eq(cost_family(PRIM_MATMUL), FAM_GEMM);
    ck_assert_int_eq(cost_family(PRIM_ATTENTION), FAM_ATTENTION);
    ck_assert_int_eq(cost_family(PRIM_RMSNORM), FAM_NORM);
    ck_assert_int_eq(cost_family(PRIM_CROSS_ENTROPY), FAM_ACTIVATION);
    ck_assert_int_eq(cost_family(PRIM_GELU), FAM_ACTIVATION);
    ck_assert_int_eq(cost_family(PRIM_ADD), FAM_ELEMENTWISE);
    ck_assert_int_eq(cost_family(PRIM_LINEAR), FAM_GEMM);
    ck_assert_int_eq(cost_family(PRIM_LAYERNORM), FAM_NORM);
    ck_assert_int_eq(cost_family(PRIM_SILU), FAM_ACTIVATION);
    ck_assert_int_eq(cost_family(PRIM_SCALE), FAM_ELEMENTWISE);
    ck_assert_int_eq(cost_family(PRIM_EMBEDDING), FAM_ELEMENTWISE);
    ck_assert_int_eq(cost_family(PRIM_COUNT), FAM_ELEMENTWISE); /* a forged plan's code */
    ck_assert_int_eq(cost_family(-1), FAM_ELEMENTWISE);
    /* a target measured before activations were timed apart: they take elementwise's share (the gelu above) */
    p->target.eff[FAM_ACTIVATION] = 0.5;
    ck_assert(cost_efficiency(&p->target, FAM_ACTIVATION) == 0.5);
    p->target.eff[FAM_ACTIVATION] = 0;
    ck_assert(cost_efficiency(&p->target, FAM_ACTIVATION) == 0.25);
    /* without measured figures: as before (one pass of latency for an all-reduce, kernels at peak) */
    memset(p->target.eff, 0, sizeof p->target.eff);
    p->target.nvme_latency = p->target.pcie_latency = p->target.kernel_latency = 0;
    NEAR(cost_instr_time(p, &ar), 0.15 + 0.015);
    NEAR(cost_instr_time(p, &p->instrs[3]), 0.1);
    p->ops = NULL;
    p->nops = 0;
    release(p);
}
END_TEST

/* The probe's timed kernel calls: between two of a family's calls the time
 * goes straight in log time over log flops, outside them at the nearest
 * call's rate, and a family with no calls keeps its share of peak. A timed
 * call moved its bytes: no memory term on top. */
START_TEST(timed_kernel_calls) {
    Plan *p = hand_plan(1);
    PlanOp ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].prim = PRIM_LINEAR;
    ops[1].prim = PRIM_LAYERNORM;
    p->ops = ops;
    p->nops = 2;
    PlanTarget *t = &p->target;
    t->eff[FAM_GEMM] = 0.5;
    t->nkernel_points = 4;
    t->kernel_points[0] = (PlanKernelPoint){FAM_GEMM, 1e6, 1e-4};  /* 10 GFLOP/s */
    t->kernel_points[1] = (PlanKernelPoint){FAM_GEMM, 1e8, 1e-3};  /* 100 GFLOP/s */
    t->kernel_points[2] = (PlanKernelPoint){FAM_ATTENTION, NAN, 1}; /* forged: ignored */
    t->kernel_points[3] = (PlanKernelPoint){FAM_GEMM, 1e7, -1};     /* forged: ignored */
    NEAR(cost_measured_kernel(t, FAM_GEMM, 1e6), 1e-4);
    NEAR(cost_measured_kernel(t, FAM_GEMM, 1e8), 1e-3);
    NEAR(cost_measured_kernel(t, FAM_GEMM, 1e7), sqrt(1e-4 * 1e-3)); /* halfway in logs */
    NEAR(cost_measured_kernel(t, FAM_GEMM, 1e5), 1e-5);               /* below: 10 GFLOP/s */
    NEAR(cost_measured_kernel(t, FAM_GEMM, 1e10), 1e-1);              /* above: 100 GFLOP/s */
    ck_assert(cost_measured_kernel(t, FAM_ATTENTION, 1e6) == -1);
    ck_assert(cost_measured_kernel(t, FAM_NORM, 1e6) == -1);
    /* as instructions: the gemm from its calls (plus the dispatch), even where its bytes would take longer */
    t->kernel_latency = 1e-6;
    PlanInstr k = {.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e7, .bytes = 4000000000ull, .ntiles = 1, .arg = 0};
    NEAR(cost_instr_time(p, &k), sqrt(1e-4 * 1e-3) + 1e-6);
    /* the norm has no calls: its bytes at memory bandwidth (4 GB at 1 TB/s) beat its flops at peak */
    k.arg = 1;
    NEAR(cost_instr_time(p, &k), 4e-3 + 1e-6);
    p->ops = NULL;
    p->nops = 0;
    release(p);
}
END_TEST

/* A GEMM that reads a weight stored quantized first decodes it whole: its
 * blocks read (nf4: 36 bytes per 64, int8: 68) and its elements written in
 * the compute dtype, at memory bandwidth; on CUDA in the activation's
 * dtype with a launch of its own, on the host in f32 within the kernel's
 * dispatch. A backward op decodes it only where it computes dx. */
START_TEST(dequant_before_gemm) {
    Plan *p = hand_plan(1);
    PlanTarget *t = &p->target;
    t->backend = "cuda";
    t->kernel_latency = 1e-6;
    PlanTensor ts[3];
    memset(ts, 0, sizeof ts);
    ts[0] = (PlanTensor){.name = "x", .dtype = DT_BF16, .rank = 2, .dims = {512, 4096}, .numel = 512 * 4096};
    ts[1] = (PlanTensor){.name = "w", .dtype = DT_NF4, .rank = 2, .dims = {4096, 4096}, .numel = 4096 * 4096};
    ts[2] = (PlanTensor){.name = "dx", .dtype = DT_BF16, .rank = 2, .dims = {512, 4096}, .numel = 512 * 4096};
    PlanOp ops[2];
    memset(ops, 0, sizeof ops);
    ops[0] = (PlanOp){.kind = OP_FWD, .prim = PRIM_LINEAR, .nin = 2, .nout = 1};
    ops[0].in[0] = 0, ops[0].in[1] = 1, ops[0].out[0] = -1;
    ops[1] = ops[0];
    ops[1].kind = OP_BWD;
    ops[1].out[0] = -1; /* no dx */
    p->tensors = ts;
    p->ntensors = 3;
    p->ops = ops;
    p->nops = 2;
    /* 1e9 flops at 10 TFLOP/s: 1e-4 s, beyond its bytes (1000 at 1 TB/s) */
    PlanInstr k = {.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e9, .bytes = 1000, .ntiles = 1, .arg = 0};
    /* nf4 [4096, 4096]: 262144 blocks of 36 bytes read, 16777216 bf16 written */
    double nf4 = 262144.0 * 36 + 16777216.0 * 2;
    NEAR(cost_dequant_bytes(p, &k), nf4);
    NEAR(cost_instr_time(p, &k), 1e-4 + 1e-6 + nf4 / 1e12 + 1e-6);
    /* backward without dx: the weight is not read */
    k.arg = 1;
    NEAR(cost_dequant_bytes(p, &k), 0);
    NEAR(cost_instr_time(p, &k), 1e-4 + 1e-6);
    ops[1].out[0] = 2; /* dx = dy w^T reads it */
    NEAR(cost_instr_time(p, &k), 1e-4 + 1e-6 + nf4 / 1e12 + 1e-6);
    /* int8: 68 bytes per block; an f32 activation: f32 written */
    ts[1].dtype = DT_INT8;
    ts[0].dtype = DT_F32;
    double i8 = 262144.0 * 68 + 16777216.0 * 4;
    NEAR(cost_instr_time(p, &k), 1e-4 + 1e-6 + i8 / 1e12 + 1e-6);
    /* the host: f32 at the rank's memory bandwidth (the plan's gpu_hbm), no launch of its own */
    t->backend = "host";
    t->gpu_hbm = 10e9;
    ts[1].dtype = DT_NF4;
    ts[0].dtype = DT_BF16;
    double host = 262144.0 * 36 + 16777216.0 * 4;
    k.arg = 0;
    NEAR(cost_dequant_bytes(p, &k), host);
    NEAR(cost_instr_time(p, &k), 1e-4 + host / 10e9 + 1e-6);
    /* timed GEMM calls read plain weights: the decoding comes on top */
    t->nkernel_points = 1;
    t->kernel_points[0] = (PlanKernelPoint){FAM_GEMM, 1e9, 2e-4};
    NEAR(cost_instr_time(p, &k), 2e-4 + host / 10e9 + 1e-6);
    /* a plain weight: nothing */
    ts[1].dtype = DT_BF16;
    NEAR(cost_dequant_bytes(p, &k), 0);
    NEAR(cost_instr_time(p, &k), 2e-4 + 1e-6);
    p->ops = NULL;
    p->nops = 0;
    p->tensors = NULL;
    p->ntensors = 0;
    release(p);
}
END_TEST

/* A queue idle until another queue's instruction makes it ready starts a
 * wake-up later; one that waits on its own queue, or is busy anyway, does
 * not. */
START_TEST(wake_up_across_queues) {
    Plan *p = hand_plan(4);
    p->target.wake_latency = 0.01;
    CostResult r;
    ck_assert(cost_simulate(p, &r));
    /* kernel 2 waits for h2d 0 (another queue, idle until .1): [.11, .21];
     * kernel 3 waits for h2d 1 (ends .2) but its queue is busy until .21: no wake-up, [.21, .31];
     * the allgather waits for kernel 3: [.32, .395]; cpu_adam after the nvme read: [.51, .61] */
    NEAR(r.start[2], 0.11);
    NEAR(r.start[3], 0.21);
    NEAR(r.start[4], 0.32);
    NEAR(r.start[6], 0.51);
    /* step_end waits for the allgather (.395) and the adam (.61), both elsewhere */
    NEAR(r.start[7], 0.62);
    cost_free(&r);
    release(p);
}
END_TEST

/* A host plan whose ranks' memory fits the shared cache streams at the
 * cache's bandwidth; a larger one, or a target without the figures, at the
 * memory's. */
START_TEST(cache_resident_plans) {
    Plan *p = hand_plan(2);
    p->target.backend = "host";
    p->target.cpu_cache = 64e6;
    p->target.cache_bandwidth = 200e9; /* the node's; 100 GB/s per rank */
    p->arenas[ARENA_GPU].size = 20000000;
    p->arenas[ARENA_CPU].size = 10000000;
    p->arenas[ARENA_NVME].size = 1000000000; /* not in memory */
    PlanInstr adam = p->instrs[6];           /* 2 GB */
    ck_assert(cost_in_cache(p));             /* 2 ranks x 30 MB <= 64 MB */
    NEAR(cost_instr_time(p, &adam), 2e9 / 100e9);
    p->arenas[ARENA_PINNED].size = 3000000; /* 2 x 33 MB > 64 MB */
    ck_assert(!cost_in_cache(p));
    NEAR(cost_instr_time(p, &adam), 2e9 / 20e9);
    p->arenas[ARENA_PINNED].size = 0;
    p->target.cache_bandwidth = 0;
    ck_assert(!cost_in_cache(p));
    p->target.cache_bandwidth = 200e9;
    p->target.backend = "cuda";
    ck_assert(!cost_in_cache(p));
    release(p);
}
END_TEST

/* The host's nvme queue keeps COST_NVME_DEPTH transfers in flight: their
 * bytes one after another at the drive's rate, each one's latency beside
 * the others', retired in order; the queue is busy while any is in flight,
 * and the rest of a transfer's time is waiting (as the runtime counts it),
 * on a GPU target as on the host. */
START_TEST(nvme_pipeline) {
    enum { N = COST_NVME_DEPTH + 2 };
    Plan *p = hand_plan(1);
    static PlanInstr ins[N];
    for (int i = 0; i < N; i++) ins[i] = (PlanInstr){.op = PI_NVME_READ, .queue = Q_NVME, .bytes = 20000000, .ntiles = 1};
    p->instrs = ins; /* each 0.01 s at 2 GB/s, + 0.5 s of latency */
    p->ninstrs = N;
    p->ndeps = 0;
    p->opt_begin = N;
    p->target.nvme_latency = 0.5;
    p->target.backend = "host";
    CostResult r;
    ck_assert(cost_simulate(p, &r));
    NEAR(r.start[1], 0.01);
    NEAR(r.end[1], 0.52);
    NEAR(r.wait[0], 0);
    NEAR(r.wait[1], 0.5);
    /* the 33rd waits for the 1st to retire (0.51), the 34th for the 2nd (0.52) */
    NEAR(r.start[COST_NVME_DEPTH], 0.51);
    NEAR(r.end[COST_NVME_DEPTH], 1.02);
    NEAR(r.start[N - 1], 0.52);
    NEAR(r.pass_time, 1.03);
    NEAR(r.busy[Q_NVME], 1.03);
    cost_free(&r);
    /* a rank with a core or less: each transfer's CPU time takes the rank's core from the rest when the
     * transfer starts (a 1 ms kernel ready at 0 waits for the first one's 2 ms); with a spare core it does not */
    p->target.nvme_cpu = 0.002;
    p->target.cpu_cores = 1;
    static PlanInstr more[N + 1];
    memcpy(more, ins, sizeof ins);
    more[N] = (PlanInstr){.op = PI_KERNEL, .queue = Q_COMPUTE, .flops = 1e10, .ntiles = 1, .arg = -1}; /* 1 ms at 10 T */
    p->instrs = more;
    p->ninstrs = N + 1;
    p->opt_begin = N + 1;
    ck_assert(cost_simulate(p, &r));
    NEAR(r.start[N], 0.002);
    NEAR(r.start[1], 0.01); /* the transfers themselves are not held back */
    cost_free(&r);
    p->target.cpu_cores = 2;
    ck_assert(cost_simulate(p, &r));
    NEAR(r.start[N], 0);
    cost_free(&r);
    p->instrs = ins;
    p->ninstrs = N;
    p->opt_begin = N;
    p->target.nvme_cpu = 0;
    /* the drive's time per request (the node's, shared by 1 rank here) joins the bytes: 0.01 + 0.005 each */
    p->target.nvme_request = 0.005;
    ck_assert(cost_simulate(p, &r));
    NEAR(r.start[1], 0.015);
    NEAR(r.end[1], 0.015 + 0.515);
    cost_free(&r);
    p->target.nvme_request = 0;
    p->target.backend = "cuda";
    ck_assert(cost_simulate(p, &r));
    NEAR(r.pass_time, 1.03);
    NEAR(r.busy[Q_NVME], 1.03);
    cost_free(&r);
    release(p);
}
END_TEST

/* Timed transfers (zinfprobe's nvme { reads; writes }) price a transfer by
 * its size: between two sizes straight in log time over log bytes, above
 * the largest at its rate, below the smallest as the smallest; in the
 * pipeline one alone takes its `alone` time and those in flight follow
 * one another at the drive's time each, which the node's ranks share. A
 * direction with none timed keeps the rate and latency. */
START_TEST(timed_nvme_transfers) {
    PlanTarget *t = &(PlanTarget){0};
    t->nnvme_points = 4;
    t->nvme_points[0] = (PlanNvmePoint){0, 4096, 1e-5, 1e-4};
    t->nvme_points[1] = (PlanNvmePoint){0, 65536, 4e-5, 1.6e-4};
    t->nvme_points[2] = (PlanNvmePoint){0, 16384, NAN, 1};  /* forged: ignored */
    t->nvme_points[3] = (PlanNvmePoint){0, 32768, 1e-5, -1}; /* forged: ignored */
    double drive, alone;
    ck_assert(cost_measured_nvme(t, false, 16384, &drive, &alone));
    NEAR(drive, 2e-5); /* halfway in log bytes: the geometric mean */
    NEAR(alone, sqrt(1e-4 * 1.6e-4));
    ck_assert(cost_measured_nvme(t, false, 512, &drive, &alone));
    NEAR(drive, 1e-5);
    NEAR(alone, 1e-4);
    ck_assert(cost_measured_nvme(t, false, 4 * 65536, &drive, &alone));
    NEAR(drive, 16e-5);
    NEAR(alone, 6.4e-4);
    ck_assert(!cost_measured_nvme(t, true, 4096, &drive, &alone));

    enum { N = 3 };
    Plan *p = hand_plan(2);
    static PlanInstr ins[N];
    for (int i = 0; i < N; i++) ins[i] = (PlanInstr){.op = PI_NVME_READ, .queue = Q_NVME, .bytes = 65536, .ntiles = 1};
    p->instrs = ins;
    p->ninstrs = N;
    p->ndeps = 0;
    p->opt_begin = N;
    p->target.backend = "host";
    p->target.nvme_latency = 0.5; /* the fits: not used where the size is timed */
    p->target.nvme_request = 0.5;
    p->target.nnvme_points = 2;
    memcpy(p->target.nvme_points, t->nvme_points, 2 * sizeof *t->nvme_points);
    NEAR(cost_instr_time(p, &ins[0]), 1.6e-4);
    CostResult r;
    ck_assert(cost_simulate(p, &r));
    /* 2 ranks share the drive: 8e-5 each; the first ends at its alone time */
    NEAR(r.start[1], 8e-5);
    NEAR(r.start[2], 16e-5);
    NEAR(r.end[0], 1.6e-4);
    NEAR(r.end[2], 16e-5 + 1.6e-4);
    NEAR(r.busy[Q_NVME], 16e-5 + 1.6e-4);
    cost_free(&r);
    /* writes: none timed, the write rate (1 GB/s per rank) and the latency */
    for (int i = 0; i < N; i++) ins[i].op = PI_NVME_WRITE;
    p->target.nvme_request = 0;
    ck_assert(cost_simulate(p, &r));
    NEAR(r.end[0], 65536 / 1e9 + 0.5);
    cost_free(&r);
    release(p);
}
END_TEST

START_TEST(planned_step_is_consistent) {
    /* the predicted step of a real plan is at least each queue's busy time and
     * at most their sum */
    Plan *p = fx_plan("dgx2", 0, 2, 2, TIER_NVME);
    CostResult r;
    ck_assert(cost_simulate(p, &r));
    double sum = 0;
    for (int q = 0; q < PLAN_NQUEUES; q++) {
        ck_assert(r.busy[q] <= r.pass_time + 1e-12);
        sum += r.busy[q];
    }
    ck_assert(r.pass_time <= sum + 1e-12);
    ck_assert(r.busy[Q_NVME] > 0 && r.busy[Q_COMM] > 0);
    for (uint32_t i = 0; i < p->ninstrs; i++) {
        ck_assert(r.end[i] >= r.start[i]);
        for (uint32_t d = 0; d < p->instrs[i].ndeps; d++) ck_assert(r.start[i] >= r.end[p->deps[p->instrs[i].dep + d]] - 1e-15);
    }
    cost_free(&r);
    plan_free(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cost");
    TCase *t = tcase_create("cost");
    tcase_add_test(t, hand_computed);
    tcase_add_test(t, measured_terms);
    tcase_add_test(t, host_cores_shared);
    tcase_add_test(t, timed_kernel_calls);
    tcase_add_test(t, dequant_before_gemm);
    tcase_add_test(t, wake_up_across_queues);
    tcase_add_test(t, cache_resident_plans);
    tcase_add_test(t, nvme_pipeline);
    tcase_add_test(t, timed_nvme_transfers);
    tcase_add_test(t, planned_step_is_consistent);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int f = srunner_ntests_failed(r);
    srunner_free(r);
    return f ? 1 : 0;
}
