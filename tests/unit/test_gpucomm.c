/* gpucomm: NCCL is optional and loaded at run time. Without a GPU (this
 * machine, CI) joining fails with a message naming the rank and the cause,
 * and nothing stays open; a failing call's message names the call, the
 * place and NCCL's own text. (tests/e2e/cuda_fake.sh runs the collectives
 * for real on the fake NCCL.) */
#include <check.h>
#include <string.h>
#include "gpucomm.h"

START_TEST(test_open_without_gpu_fails_cleanly) {
    Comm c;
    ck_assert_int_eq(comm_init(&c, NULL, NULL, NULL), COMM_OK);
    GpuComm g;
    char err[512] = "";
    int rc = gpucomm_open(&g, &c, err, sizeof err);
    if (rc == 0) {
        /* a machine with a GPU and NCCL: a world of one joins */
        ck_assert_ptr_nonnull(g.comm);
        gpucomm_close(&g, false);
    } else {
        ck_assert_int_eq(rc, -1);
        ck_assert_msg(strncmp(err, "rank 0: ", 8) == 0, "%s", err);
        ck_assert_msg(strstr(err, "NCCL") || strstr(err, "nccl"), "%s", err);
        ck_assert_ptr_null(g.lib);
        ck_assert_ptr_null(g.comm);
    }
    comm_finalize(&c);
}
END_TEST

static const char *fake_text(ncclResult_t r) { return r == ncclSystemError ? "unhandled system error" : "?"; }

START_TEST(test_fail_message) {
    GpuComm g;
    memset(&g, 0, sizeof g);
    g.rank = 3;
    char err[512];
    ck_assert_int_eq(gpucomm_fail(&g, ncclSystemError, "ncclAllGather", "runtime/comm/gpucomm.c", 80, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 3: ncclAllGather failed at runtime/comm/gpucomm.c:80: no description (ncclResult 2)");
    g.GetErrorString = fake_text;
    ck_assert_int_eq(gpucomm_fail(&g, ncclSystemError, "ncclAllReduce", "x.c", 7, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 3: ncclAllReduce failed at x.c:7: unhandled system error (ncclResult 2)");
}
END_TEST

int main(void) {
    Suite *s = suite_create("gpucomm");
    TCase *tc = tcase_create("gpucomm");
    tcase_add_test(tc, test_open_without_gpu_fails_cleanly);
    tcase_add_test(tc, test_fail_message);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
