/* cudrv: the driver is optional. Without one (this machine, CI) opening it
 * fails with a message that says why and leaves nothing open; with one it
 * names a device. Failing calls are reported with call, place and the
 * driver's words. (tests/e2e/run_errors.sh checks zinfrun's messages, the
 * toolkit's stub library among them.) */
#include <check.h>
#include <string.h>
#include "cudrv.h"

START_TEST(test_open_or_explain) {
    CudaDrv d;
    char err[512] = "";
    int rc = cudrv_open(&d, err, sizeof err);
    if (rc == 0) {
        ck_assert_int_gt(d.ndevices, 0);
        char name[128], arch[16];
        size_t mem = 0;
        ck_assert_int_eq(cudrv_describe(&d, 0, name, sizeof name, &mem, arch, sizeof arch, err, sizeof err), 0);
        ck_assert(strncmp(arch, "sm_", 3) == 0);
        ck_assert_uint_gt(mem, 0);
        cudrv_close(&d);
    } else {
        ck_assert_int_eq(rc, -1);
        ck_assert_msg(strstr(err, "CUDA driver") != NULL, "%s", err);
        ck_assert_ptr_null(d.lib); /* nothing stays open */
    }
}
END_TEST

START_TEST(test_fail_message) {
    CudaDrv d;
    memset(&d, 0, sizeof d);
    char err[512];
    ck_assert_int_eq(cudrv_fail(&d, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2(&p, 8)", "exec_cuda.c", 120, 3, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 3: cuMemAlloc_v2(&p, 8) failed at exec_cuda.c:120: CUresult 2 (no description)");
    ck_assert_int_eq(cudrv_fail(&d, CUDA_ERROR_INVALID_VALUE, "cuInit(0)", "x.c", 1, -1, err, sizeof err), -1);
    ck_assert_str_eq(err, "cuInit(0) failed at x.c:1: CUresult 1 (no description)");
}
END_TEST

int main(void) {
    Suite *s = suite_create("cudrv");
    TCase *tc = tcase_create("cudrv");
    tcase_add_test(tc, test_open_or_explain);
    tcase_add_test(tc, test_fail_message);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
