/* comm: collectives give the closed-form results for any world size. Run
 * alone it tests the world of one; tests/e2e/comm_mpi.sh runs it under
 * mpirun with 3 ranks (also as 2 nodes of a hostfile), and with a rank that
 * dies; tests/e2e/slurm.sh under srun and salloc on a two-node Slurm. */
#include <check.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "comm.h"

static Comm C;

START_TEST(test_allgather) {
    int n = 5;
    int *send = malloc(sizeof(int) * (size_t)n);
    int *recv = malloc(sizeof(int) * (size_t)n * (size_t)C.size);
    for (int i = 0; i < n; i++) send[i] = C.rank * 100 + i;
    ck_assert_int_eq(comm_allgather(&C, send, recv, sizeof(int) * (size_t)n), COMM_OK);
    for (int r = 0; r < C.size; r++)
        for (int i = 0; i < n; i++) ck_assert_int_eq(recv[r * n + i], r * 100 + i);
    free(send);
    free(recv);
}
END_TEST

START_TEST(test_reduce_scatter) {
    size_t n = 7;
    float *send = malloc(sizeof(float) * n * (size_t)C.size);
    float recv[7];
    for (int r = 0; r < C.size; r++)
        for (size_t i = 0; i < n; i++) send[(size_t)r * n + i] = (float)(C.rank + 1) * (float)(r * 10 + (int)i);
    ck_assert_int_eq(comm_reduce_scatter_f32(&C, send, recv, n), COMM_OK);
    /* Block `rank` summed over ranks: sum_q (q+1) * (rank*10+i). */
    float f = (float)(C.size * (C.size + 1) / 2);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq_tol(recv[i], f * (float)(C.rank * 10 + (int)i), 1e-4f);
    free(send);
}
END_TEST

START_TEST(test_allreduce) {
    float v[3] = {1.0f, (float)C.rank, 2.5f};
    ck_assert_int_eq(comm_allreduce_sum_f32(&C, v, 3), COMM_OK);
    ck_assert_float_eq(v[0], (float)C.size);
    ck_assert_float_eq(v[1], (float)(C.size * (C.size - 1) / 2));
    ck_assert_float_eq(v[2], 2.5f * (float)C.size);
    int64_t m = C.rank * 7;
    ck_assert_int_eq(comm_allreduce_max_i64(&C, &m), COMM_OK);
    ck_assert_int_eq(m, (C.size - 1) * 7);
    double d = 0.25;
    ck_assert_int_eq(comm_allreduce_sum_f64(&C, &d, 1), COMM_OK);
    ck_assert_double_eq(d, 0.25 * C.size);
}
END_TEST

/* comm_agree: 0 when no rank failed, else 1 + the highest failing rank, on every rank. */
START_TEST(test_agree) {
    ck_assert_int_eq(comm_agree(&C, 0), 0);
    ck_assert_int_eq(comm_agree(&C, C.rank == 0 ? -1 : 0), 1);
    ck_assert_int_eq(comm_agree(&C, C.rank == C.size - 1 ? 3 : 0), C.size);
    ck_assert_int_eq(comm_agree(&C, 1), C.size);
}
END_TEST

START_TEST(test_bcast_barrier) {
    char buf[32] = "xxxxxxxxxxxxxxx";
    if (C.rank == C.size - 1) snprintf(buf, sizeof buf, "from %d", C.rank);
    ck_assert_int_eq(comm_bcast(&C, buf, sizeof buf, C.size - 1), COMM_OK);
    char want[32];
    snprintf(want, sizeof want, "from %d", C.size - 1);
    ck_assert_str_eq(buf, want);
    ck_assert_int_eq(comm_barrier(&C), COMM_OK);
}
END_TEST

/* The layout arithmetic on made-up jobs. */
START_TEST(test_layout_of) {
    CommLayout l;
    int two_by_two[] = {0, 2, 1, 2, 0, 2, 1, 2};
    ck_assert(comm_layout_of(two_by_two, 4, &l));
    ck_assert_int_eq(l.nodes, 2);
    ck_assert_int_eq(l.min_per_node, 2);
    ck_assert_int_eq(l.max_per_node, 2);
    int uneven[] = {0, 3, 1, 3, 2, 3, 0, 1};
    ck_assert(comm_layout_of(uneven, 4, &l));
    ck_assert_int_eq(l.nodes, 2);
    ck_assert_int_eq(l.min_per_node, 1);
    ck_assert_int_eq(l.max_per_node, 3);
    int one[] = {0, 1};
    ck_assert(comm_layout_of(one, 1, &l));
    ck_assert_int_eq(l.nodes * l.max_per_node, 1);
    int no_lead[] = {1, 2, 1, 2};
    ck_assert(!comm_layout_of(no_lead, 2, &l));
    int short_node[] = {0, 3, 1, 3}; /* a node of 3 with only 2 ranks in the world */
    ck_assert(!comm_layout_of(short_node, 2, &l));
    int bad[] = {0, 0};
    ck_assert(!comm_layout_of(bad, 1, &l));
}
END_TEST

START_TEST(test_layout_check) {
    char err[512], buf[64];
    CommLayout four_by_four = {4, 4, 4}, two_by_eight = {2, 8, 8}, uneven = {3, 4, 6}, two_by_one = {2, 1, 1};
    ck_assert_int_eq(comm_layout_check(&two_by_eight, 2, 8, 16, err, sizeof err), 0);
    ck_assert_int_eq(comm_layout_check(&four_by_four, 2, 8, 16, err, sizeof err), -1);
    ck_assert_str_eq(err, "the plan is for 2 nodes x 8 GPUs (16 ranks); this job is 4 nodes x 4 ranks: start 8 ranks on "
                          "each of 2 nodes (Open MPI: mpirun -np 16 --map-by ppr:8:node; Slurm: srun --mpi=pmix -N 2 -n 16 "
                          "--ntasks-per-node=8) or recompile for this layout");
    ck_assert_int_eq(comm_layout_check(&two_by_one, 1, 2, 2, err, sizeof err), -1);
    ck_assert_str_eq(err, "the plan is for 1 node x 2 GPUs (2 ranks); this job is 2 nodes x 1 rank: start 2 ranks on "
                          "each of 1 node (Open MPI: mpirun -np 2 --map-by ppr:2:node; Slurm: srun --mpi=pmix -N 1 -n 2 "
                          "--ntasks-per-node=2) or recompile for this layout");
    /* 12 ranks on nodes of 8: the last node partly used */
    CommLayout six_six = {2, 6, 6}, nine_three = {2, 3, 9};
    ck_assert_int_eq(comm_layout_check(&six_six, 2, 8, 12, err, sizeof err), 0);
    ck_assert_int_eq(comm_layout_check(&nine_three, 2, 8, 12, err, sizeof err), -1);
    ck_assert_str_eq(err, "the plan is for 2 nodes x 8 GPUs (12 ranks); this job is 2 nodes x 3 to 9 ranks: start at "
                          "most 8 ranks on each of 2 nodes (Open MPI: mpirun -np 12 --map-by ppr:8:node; Slurm: srun "
                          "--mpi=pmix -N 2 -n 12 --ntasks-per-node=8) or recompile for this layout");
    comm_layout_str(&uneven, buf, sizeof buf);
    ck_assert_str_eq(buf, "3 nodes x 4 to 6 ranks");
}
END_TEST

/* This job's own layout: one node (one machine), or the node count the
 * launching test declared (ZINF_TEST_EXPECT_NODES: a hostfile's or Slurm's
 * nodes), or the test-only ZINF_TEST_NODE_SPLIT's. Each rank's local rank
 * is the one its launcher gave it (mpirun's OMPI_COMM_WORLD_LOCAL_RANK,
 * srun's SLURM_LOCALID), except under the pretend split. */
START_TEST(test_layout_live) {
    const CommLayout *l = &C.layout;
    const char *k = getenv("ZINF_TEST_NODE_SPLIT"), *e = getenv("ZINF_TEST_EXPECT_NODES");
    bool split = C.mpi && k && atoi(k) > 0 && atoi(k) <= C.size;
    int want = split ? atoi(k) : C.mpi && e ? atoi(e) : 1;
    ck_assert_int_eq(l->nodes, want);
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!lr && getenv("SLURM_STEP_NUM_TASKS") && atoi(getenv("SLURM_STEP_NUM_TASKS")) == C.size) lr = getenv("SLURM_LOCALID");
    if (C.mpi && !split && lr) ck_assert_int_eq(C.local_rank, atoi(lr));
    ck_assert_int_le(l->min_per_node, C.local_size);
    ck_assert_int_ge(l->max_per_node, C.local_size);
    ck_assert_int_lt(C.local_rank, C.local_size);
    int64_t sum = C.local_rank == 0 ? C.local_size : 0, leads = C.local_rank == 0;
    double v[2] = {(double)sum, (double)leads};
    ck_assert_int_eq(comm_allreduce_sum_f64(&C, v, 2), COMM_OK);
    ck_assert_int_eq((int)v[0], C.size);
    ck_assert_int_eq((int)v[1], l->nodes);
}
END_TEST

/* Several srun tasks without an MPI plugin are refused, not run as worlds
 * of one; the launcher is named from the environment. Run alone only: a
 * second comm_init under MPI would initialise MPI twice. */
static void set(const char *name, const char *v) {
    if (v) setenv(name, v, 1);
    else unsetenv(name);
}
START_TEST(test_launcher) {
    if (C.mpi) return;
    static const char *vars[] = {"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE"};
    char *saved[4], buf[128];
    for (int i = 0; i < 4; i++) saved[i] = getenv(vars[i]) ? strdup(getenv(vars[i])) : NULL;
    set("SLURM_JOB_ID", "41"), set("SLURM_STEP_ID", "0"), set("SLURM_STEP_NUM_TASKS", "2"), set("OMPI_COMM_WORLD_SIZE", NULL);
    comm_launcher_str(buf, sizeof buf);
    ck_assert_str_eq(buf, "srun (Slurm job 41, step 0)");
    Comm d;
    ck_assert_int_eq(comm_init(&d, NULL, NULL, NULL), COMM_ELAUNCH);
    ck_assert_str_eq(comm_last_error(&d),
                     "srun started 2 tasks but gave them no MPI bootstrap (no PMIX_RANK or PMI_SIZE in the environment), "
                     "so each would run alone: launch with srun --mpi=pmix (srun --mpi=list shows what this cluster offers)");
    set("SLURM_STEP_NUM_TASKS", "1"); /* srun -n 1: a world of one */
    ck_assert_int_eq(comm_init(&d, NULL, NULL, NULL), COMM_OK);
    ck_assert_int_eq(d.size, 1);
    set("SLURM_STEP_ID", NULL), set("SLURM_STEP_NUM_TASKS", NULL); /* an sbatch script or salloc shell: not a step */
    comm_launcher_str(buf, sizeof buf);
    ck_assert_str_eq(buf, "none");
    set("OMPI_COMM_WORLD_SIZE", "2");
    comm_launcher_str(buf, sizeof buf);
    ck_assert_str_eq(buf, "mpirun in Slurm job 41");
    set("SLURM_JOB_ID", NULL);
    comm_launcher_str(buf, sizeof buf);
    ck_assert_str_eq(buf, "mpirun");
    for (int i = 0; i < 4; i++) set(vars[i], saved[i]), free(saved[i]);
}
END_TEST

int main(int argc, char **argv) {
    /* as the programs take them (tests/e2e/comm_mpi.sh sets them) */
    const char *t = getenv("ZINF_COMM_TIMEOUT"), *k = getenv("ZINF_TEST_NODE_SPLIT");
    CommOptions co = {.timeout_s = t ? atof(t) : 0, .node_split = k ? atoi(k) : 0};
    if (comm_init(&C, &argc, &argv, &co) != COMM_OK) {
        fprintf(stderr, "%s\n", comm_last_error(&C));
        return 1;
    }
    if (getenv("ZINF_TEST_COMM_DIE")) {
        /* The dead-rank drill: the last rank dies before a collective the others wait in. */
        if (C.rank == C.size - 1) raise(SIGKILL);
        float v = 1;
        CommStatus s = comm_allreduce_sum_f32(&C, &v, 1);
        fprintf(stderr, "rank %d: all-reduce returned %d: %s\n", C.rank, s, comm_last_error(&C));
        comm_abort(&C, 3);
        return 3;
    }
    if (C.rank == 0) { /* what the launching test reads: the layout and the launcher comm found */
        char lay[96], who[128];
        comm_layout_str(&C.layout, lay, sizeof lay);
        comm_launcher_str(who, sizeof who);
        printf("comm: %d rank%s, %s, launcher: %s\n", C.size, C.size == 1 ? "" : "s", lay, who);
        fflush(stdout);
    }
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("collectives");
    tcase_add_test(tc, test_allgather);
    tcase_add_test(tc, test_reduce_scatter);
    tcase_add_test(tc, test_allreduce);
    tcase_add_test(tc, test_agree);
    tcase_add_test(tc, test_bcast_barrier);
    tcase_add_test(tc, test_layout_of);
    tcase_add_test(tc, test_layout_check);
    tcase_add_test(tc, test_layout_live);
    tcase_add_test(tc, test_launcher);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    if (C.mpi) srunner_set_fork_status(sr, CK_NOFORK); /* MPI state does not survive fork */
    srunner_run_all(sr, C.rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    comm_finalize(&C);
    return failed ? 1 : 0;
}
