/* exec: the host backend trains exactly like the reference executor.
 *
 * The same model, data and seed give the same loss at every step (f32,
 * relative 1e-5) whatever the placement of parameters, gradients, optimizer
 * state and checkpoints (GPU arena, CPU, NVMe), with and without tiling,
 * and whatever the number of ranks: run alone it is one rank; under mpirun
 * (tests/e2e/exec_mpi.sh) the ranks split the reference's global batch.
 * Checkpoint, resume and export are checked here too, and the nvme
 * queue's pipeline against one transfer at a time (RtOptions.nvme_unbatched,
 * zinfrun's ZINF_NVME_NOBATCH=1). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ckpt.h"
#include "exec.h"
#include "verify.h"
#include "planner.h"
#include "refexec.h"
#include "plan_fixture.h"

static Comm C;
enum { STEPS = 6 };

static FixtureShape shape(int64_t batch) {
    (void)fx_small;
    return (FixtureShape){.batch = batch, .seq = 8, .vocab = 64, .hidden = 32, .layers = 2, .dtype = DT_F32,
                          .checkpoint_every = 1, .grad_clip = 1.0};
}

/* Global batch of step s: (B*R) x T tokens, deterministic. */
static void batch(int64_t s, int64_t rows, int64_t T, int64_t V, int32_t *tok, int32_t *tgt) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(s + 1);
    for (int64_t i = 0; i < rows * T; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)V);
        tgt[i] = (int32_t)((tok[i] * 7 + 3) % V); /* a learnable mapping */
    }
}

static void reference_losses(double *out) {
    Arena a; DiagSink d; Graph g;
    arena_init(&a); diag_init(&d);
    FixtureShape fs = shape(2 * C.size);
    ck_assert(fx_build(&g, &a, &d, fs));
    RefExec r;
    ck_assert_int_eq(ref_init(&r, &g, g.train.seed), 0);
    int64_t rows = fs.batch, T = fs.seq;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(rows * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(rows * T));
    for (int s = 0; s < STEPS; s++) {
        batch(s, rows, T, fs.vocab, tok, tgt);
        float loss;
        ck_assert_int_eq(ref_forward_backward(&r, tok, tgt, 1.0f, &loss), 0);
        ck_assert_int_eq(ref_optimizer_step(&r), 0);
        out[s] = loss;
    }
    free(tok); free(tgt);
    ref_free(&r);
    arena_free(&a); diag_free(&d);
}

typedef struct Variant { int params, grads, optimizer, ckpts; int tiles; } Variant;

static char nvme_dir[128];

static Plan *make_plan(const Variant *v, Arena *a, DiagSink *d) {
    Graph g;
    ck_assert(fx_build(&g, a, d, shape(2)));
    Target t;
    ck_assert(target_builtin("host", &t));
    PlannerOptions o;
    planner_options_default(&o);
    o.ranks = C.size;
    o.tier[PC_PARAMS] = v->params;
    o.tier[PC_GRADS] = v->grads;
    o.tier[PC_OPTIMIZER] = v->optimizer;
    o.tier[PC_CHECKPOINTS] = v->ckpts;
    o.whole_below = 64; /* partition even this tiny model's tensors */
    TilePin pin = {"block.*.mlp.w*", v->tiles, SPAN_NONE};
    if (v->tiles > 1) { o.tiles = &pin; o.ntiles = 1; }
    PlannerResult res;
    bool ok = planner_run(&g, &t, &o, a, d, &res);
    if (!ok) diag_render(d, NULL, stderr, false);
    ck_assert(ok);
    return res.plan;
}

/* The losses of STEPS steps of plan p on this job's ranks (the same
 * batches as the reference); what names the run in a failure. */
static void plan_losses_with(const Plan *p, const char *what, bool unbatched, double *out) {
    char err[512] = "";
    RtOptions o = {.nvme_dir = nvme_dir, .nvme_unbatched = unbatched};
    Rt *r = rt_create(p, &C, &o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s: %s", what, err);
    for (int k = 0; k < PLAN_NARENAS; k++) ck_assert_uint_eq(rt_arena_bytes(r, k), p->arenas[k].size);
    int64_t B = 2, T = 8, R = C.size;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * R * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(B * R * T));
    for (int s = 0; s < STEPS; s++) {
        batch(s, B * R, T, 64, tok, tgt);
        const int32_t *mt[1] = {tok + C.rank * B * T}, *mg[1] = {tgt + C.rank * B * T};
        RtStepStats st;
        ck_assert_msg(rt_step(r, mt, mg, 1, &st, err, sizeof err) == 0, "%s: %s", what, err);
        out[s] = st.loss;
    }
    free(tok); free(tgt);
    rt_destroy(r);
}

static void plan_losses(const Plan *p, const char *what, double *out) { plan_losses_with(p, what, false, out); }

static void run_variant(const Variant *v, const double *ref, const char *what) {
    Arena a; DiagSink d;
    arena_init(&a); diag_init(&d);
    Plan *p = make_plan(v, &a, &d);
    char vm[4096];
    ck_assert_msg(verify_plan(p, vm, sizeof vm) == 0, "%s: %s", what, vm);
    double loss[STEPS];
    plan_losses(p, what, loss);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(fabs(loss[s] - ref[s]) <= 1e-5 * fabs(ref[s]), "%s: step %d loss %.9g, reference %.9g", what, s + 1,
                      loss[s], ref[s]);
    plan_free(p);
    arena_free(&a); diag_free(&d);
}

static double REF[STEPS];

START_TEST(test_reference_learns) {
    reference_losses(REF);
    ck_assert(REF[STEPS - 1] < REF[0]);
}
END_TEST

static const Variant variants[] = {
    {TIER_GPU, TIER_GPU, TIER_GPU, TIER_GPU, 1},
    {TIER_CPU, TIER_CPU, TIER_CPU, TIER_CPU, 1},
    {TIER_NVME, TIER_CPU, TIER_NVME, TIER_CPU, 1},
    {TIER_CPU, TIER_CPU, TIER_CPU, TIER_GPU, 2},
    {TIER_NVME, TIER_CPU, TIER_NVME, TIER_CPU, 4},
};

START_TEST(test_equivalence) {
    reference_losses(REF);
    const Variant *v = &variants[_i];
    char what[128];
    snprintf(what, sizeof what, "params %s, grads %s, optimizer %s, checkpoints %s, %d tiles, %d ranks",
             plan_tier_names[v->params], plan_tier_names[v->grads], plan_tier_names[v->optimizer],
             plan_tier_names[v->ckpts], v->tiles, C.size);
    run_variant(v, REF, what);
}
END_TEST

START_TEST(test_resume_bit_exact) {
    Arena a; DiagSink d;
    arena_init(&a); diag_init(&d);
    Variant v = {TIER_NVME, TIER_CPU, TIER_NVME, TIER_CPU, 1};
    Plan *p = make_plan(&v, &a, &d);
    char err[512], dir[160];
    snprintf(dir, sizeof dir, "/tmp/zinf-test-exec-%d-ckpt", (int)getppid()); /* shared by the ranks */
    RtOptions o = {.nvme_dir = nvme_dir};
    int64_t B = 2, T = 8, R = C.size;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * R * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(B * R * T));
    double straight[STEPS], resumed[STEPS];
    for (int pass = 0; pass < 2; pass++) {
        Rt *r = rt_create(p, &C, &o, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        for (int s = 0; s < STEPS; s++) {
            if (pass == 1 && s == STEPS / 2) {
                /* Save, throw the executor away, start a new one from the checkpoint. */
                ck_assert_msg(rt_checkpoint_save(r, dir, "{}", err, sizeof err) == 0, "%s", err);
                rt_destroy(r);
                r = rt_create(p, &C, &o, err, sizeof err);
                ck_assert_msg(r != NULL, "%s", err);
                int64_t step = -1;
                ck_assert_int_eq(ckpt_find_latest(dir, C.size, rt_plan_hash(r), &step, NULL, 0, err, sizeof err), 1);
                ck_assert_int_eq(step, STEPS / 2);
                ck_assert_msg(rt_checkpoint_load(r, dir, step, NULL, err, sizeof err) == 0, "%s", err);
                ck_assert_int_eq(rt_steps_done(r), STEPS / 2);
            }
            batch(s, B * R, T, 64, tok, tgt);
            const int32_t *mt[1] = {tok + C.rank * B * T}, *mg[1] = {tgt + C.rank * B * T};
            RtStepStats st;
            ck_assert_msg(rt_step(r, mt, mg, 1, &st, err, sizeof err) == 0, "%s", err);
            (pass ? resumed : straight)[s] = st.loss;
        }
        if (pass == 1) {
            char path[200];
            snprintf(path, sizeof path, "%s/model.safetensors", nvme_dir);
            ck_assert_msg(rt_export_safetensors(r, path, err, sizeof err) == 0, "%s", err);
            if (C.rank == 0) ck_assert_int_eq(access(path, R_OK), 0);
        }
        rt_destroy(r);
    }
    for (int s = 0; s < STEPS; s++) ck_assert_msg(straight[s] == resumed[s], "step %d: %.9g vs %.9g", s + 1, straight[s], resumed[s]);
    free(tok); free(tgt);
    plan_free(p);
    arena_free(&a); diag_free(&d);
}
END_TEST

/* The nvme queue's pipeline (runtime/exec/qrun qrun_set_pipe, exec_nvme.c
 * rt_nvme_pipe) against RtOptions.nvme_unbatched, one transfer at a time: the
 * same losses bit for bit (NVMe-homed parameters and optimizer state, the
 * MLP weights tiled, so transfers of one tensor go in flight together). */
START_TEST(test_nvme_pipe_bit_exact) {
    Arena a; DiagSink d;
    arena_init(&a); diag_init(&d);
    Variant v = {TIER_NVME, TIER_CPU, TIER_NVME, TIER_CPU, 4};
    Plan *p = make_plan(&v, &a, &d);
    double piped[STEPS], one[STEPS];
    plan_losses(p, "pipelined", piped);
    plan_losses_with(p, "one at a time", true, one);
    for (int s = 0; s < STEPS; s++) ck_assert_msg(piped[s] == one[s], "step %d: pipelined %.9g, one at a time %.9g", s + 1, piped[s], one[s]);
    plan_free(p);
    arena_free(&a); diag_free(&d);
}
END_TEST

START_TEST(test_rank_mismatch) {
    Arena a; DiagSink d;
    arena_init(&a); diag_init(&d);
    Variant v = {TIER_GPU, TIER_GPU, TIER_GPU, TIER_GPU, 1};
    Plan *p = make_plan(&v, &a, &d);
    p->ranks = C.size + 1;
    char err[512];
    RtOptions o = {.nvme_dir = nvme_dir};
    ck_assert_ptr_null(rt_create(p, &C, &o, err, sizeof err));
    ck_assert_msg(strstr(err, "mpirun -np") != NULL, "%s", err);
    p->ranks = C.size;
    plan_free(p);
    arena_free(&a); diag_free(&d);
}
END_TEST

int main(int argc, char **argv) {
    if (comm_init(&C, &argc, &argv, NULL) != COMM_OK) { fprintf(stderr, "%s\n", comm_last_error(&C)); return 1; }
    snprintf(nvme_dir, sizeof nvme_dir, "/tmp/zinf-test-exec-%d-%d", (int)getppid(), C.rank);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", nvme_dir, nvme_dir);
    if (system(cmd) != 0) return 1;
    Suite *s = suite_create("exec");
    TCase *tc = tcase_create("exec");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_reference_learns);
    tcase_add_loop_test(tc, test_equivalence, 0, (int)(sizeof variants / sizeof *variants));
    tcase_add_test(tc, test_resume_bit_exact);
    tcase_add_test(tc, test_nvme_pipe_bit_exact);
    tcase_add_test(tc, test_rank_mismatch);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    if (C.mpi) srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, C.rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    snprintf(cmd, sizeof cmd, "rm -rf %s", nvme_dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    comm_barrier(&C);
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/zinf-test-exec-%d-ckpt", (int)getppid());
    if (C.rank == 0 && system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    comm_finalize(&C);
    return failed ? 1 : 0;
}
