/* cuexec: how a plan launch becomes cuLaunchKernel's parameters, checked
 * without a device by standing in for the driver's launch entry: every
 * argument kind (bound tensors plus a tile's byte offset, workspace offsets,
 * NULL, integers, floats, per-step values, shard element counts), the
 * utility launches' positional binding, and the messages when a tensor is
 * not bound or the launch fails. (tests/e2e/cuda_fake.sh runs whole plans.) */
#include <check.h>
#include <string.h>
#include "cuexec.h"

static struct {
    CUfunction f;
    unsigned grid[3], block[3], smem;
    CUstream s;
    unsigned char val[8][8];
    CUresult rc;
    int nparams; /* how many the launch at hand has */
} seen;

static CUresult fake_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned smem, CUstream s, void **params, void **extra) {
    (void)extra;
    seen.f = f;
    seen.grid[0] = gx, seen.grid[1] = gy, seen.grid[2] = gz;
    seen.block[0] = bx, seen.block[1] = by, seen.block[2] = bz;
    seen.smem = smem;
    seen.s = s;
    for (int k = 0; k < seen.nparams && k < 8; k++) memcpy(seen.val[k], params[k], 8); /* every value slot is 8 bytes */
    return seen.rc;
}

static PlanLaunchArg A(uint8_t kind, int32_t tensor, int64_t i, float f, uint8_t rt) {
    PlanLaunchArg a = {.kind = kind, .rt = rt, .tensor = tensor, .i = i, .f = f};
    return a;
}

static Plan *two_launches(void) {
    Plan *p = plan_new();
    p->ntensors = 2;
    p->tensors = ARENA_NEWN(&p->arena, PlanTensor, 2);
    p->tensors[0].name = "block.0.mlp.w1";
    p->tensors[1].name = "block.0.mlp.b1";
    p->nlaunch_args = 12;
    p->launch_args = ARENA_NEWN(&p->arena, PlanLaunchArg, 12);
    PlanLaunchArg *a = p->launch_args;
    a[0] = A(PARG_TENSOR, 0, 256, 0, 0); /* tile offset */
    a[1] = A(PARG_WS, -1, 512, 0, 0);
    a[2] = A(PARG_NULL, -1, 0, 0, 0);
    a[3] = A(PARG_I64, -1, 123456789012LL, 0, 0);
    a[4] = A(PARG_F32, -1, 0, 0.5f, 0);
    a[5] = A(PARG_RT, -1, 0, 0, PLAN_RT_BC2);
    a[6] = A(PARG_NUMEL, 0, 0, 0, 0);
    a[7] = A(PARG_TENSOR, 1, 0, 0, 0);
    /* utility axpy: y, x, n, alpha */
    a[8] = A(PARG_TENSOR, -1, 0, 0, 0);
    a[9] = A(PARG_TENSOR, -1, 0, 0, 0);
    a[10] = A(PARG_I64, -1, 7, 0, 0);
    a[11] = A(PARG_F32, -1, 0, 1.0f, 0);
    p->nlaunches = 2;
    p->launches = ARENA_NEWN(&p->arena, PlanLaunch, 2);
    p->launches[0] = (PlanLaunch){"gemm-0123456789ab.cu", "zk_gemm", {3, 2, 1}, {256, 1, 1}, 0, 5, 0, 8};
    p->launches[1] = (PlanLaunch){"elementwise-0123456789ab.cu", "zk_axpy", {8, 1, 1}, {256, 1, 1}, 0, -1, 8, 4};
    return p;
}

static void cux_stand_in(Cux *x, CUfunction *funcs) {
    memset(x, 0, sizeof *x);
    x->rank = 2;
    x->drv.LaunchKernel = fake_launch;
    x->funcs = funcs;
    x->nlaunches = 2;
}

static uint64_t u64(int k) {
    uint64_t v;
    memcpy(&v, seen.val[k], 8);
    return v;
}

START_TEST(test_every_argument_kind) {
    Plan *p = two_launches();
    Cux x;
    CUfunction funcs[2] = {(CUfunction)0x1111, (CUfunction)0x2222};
    cux_stand_in(&x, funcs);
    CUdeviceptr bind[2] = {0x10000, 0x20000};
    int64_t elems[2] = {4096, 64};
    CuxRt rt = {{0}};
    rt.v[PLAN_RT_BC2] = 0.25f;
    CuxBind b = {.tensor = bind, .elems = elems, .ws = 0x90000, .rt = &rt};
    char err[512] = "";
    memset(&seen, 0, sizeof seen);
    seen.nparams = 8;
    ck_assert_int_eq(cux_launch(&x, p, 0, &b, (CUstream)0x77, err, sizeof err), 0);
    ck_assert_ptr_eq(seen.f, funcs[0]);
    ck_assert_uint_eq(seen.grid[0], 3);
    ck_assert_uint_eq(seen.grid[1], 2);
    ck_assert_uint_eq(seen.block[0], 256);
    ck_assert_ptr_eq(seen.s, (CUstream)0x77);
    ck_assert_uint_eq(u64(0), 0x10000 + 256);
    ck_assert_uint_eq(u64(1), 0x90000 + 512);
    ck_assert_uint_eq(u64(2), 0);
    ck_assert_int_eq((int64_t)u64(3), 123456789012LL);
    float f;
    memcpy(&f, seen.val[4], 4);
    ck_assert_float_eq(f, 0.5f);
    memcpy(&f, seen.val[5], 4);
    ck_assert_float_eq(f, 0.25f);
    ck_assert_int_eq((int64_t)u64(6), 4096);
    ck_assert_uint_eq(u64(7), 0x20000);
    plan_free(p);
}
END_TEST

START_TEST(test_utility_binding_by_position) {
    Plan *p = two_launches();
    Cux x;
    CUfunction funcs[2] = {(CUfunction)0x1111, (CUfunction)0x2222};
    cux_stand_in(&x, funcs);
    CuxBind b = {.pos = {0xa000, 0xb000}, .npos = 2, .i64 = {99}, .ni64 = 1, .f32 = {-2.0f}, .nf32 = 1};
    char err[512] = "";
    seen.nparams = 4;
    ck_assert_int_eq(cux_launch(&x, p, 1, &b, NULL, err, sizeof err), 0);
    ck_assert_ptr_eq(seen.f, funcs[1]);
    ck_assert_uint_eq(u64(0), 0xa000);
    ck_assert_uint_eq(u64(1), 0xb000);
    ck_assert_int_eq((int64_t)u64(2), 99); /* the plan's 7 overridden */
    float f;
    memcpy(&f, seen.val[3], 4);
    ck_assert_float_eq(f, -2.0f);
    /* without overrides the plan's values stand */
    CuxBind b2 = {.pos = {0xa000, 0xb000}, .npos = 2};
    ck_assert_int_eq(cux_launch(&x, p, 1, &b2, NULL, err, sizeof err), 0);
    ck_assert_int_eq((int64_t)u64(2), 7);
    plan_free(p);
}
END_TEST

START_TEST(test_messages) {
    Plan *p = two_launches();
    Cux x;
    CUfunction funcs[2] = {(CUfunction)0x1111, (CUfunction)0x2222};
    cux_stand_in(&x, funcs);
    CUdeviceptr bind[2] = {0x10000, 0}; /* b1 not bound */
    int64_t elems[2] = {1, 1};
    CuxBind b = {.tensor = bind, .elems = elems, .ws = 0x90000};
    char err[512] = "";
    seen.nparams = 8;
    ck_assert_int_eq(cux_launch(&x, p, 0, &b, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 2: zk_gemm argument 7: tensor block.0.mlp.b1 is not bound to device memory");
    CuxBind nows = {.tensor = (CUdeviceptr[]){0x10000, 0x20000}, .elems = elems};
    ck_assert_int_eq(cux_launch(&x, p, 0, &nows, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 2: zk_gemm needs a workspace");
    ck_assert_int_eq(cux_launch(&x, p, 5, &b, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "rank 2: launch 5 outside the plan");
    seen.rc = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    bind[1] = 0x20000;
    ck_assert_int_eq(cux_launch(&x, p, 0, &b, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "rank 2: cuLaunchKernel failed at runtime/cuexec.c:") == err, "%s", err);
    ck_assert_msg(strstr(err, "CUresult 701") != NULL, "%s", err);
    ck_assert_msg(strstr(err, ": zk_gemm of gemm-0123456789ab.cu <<<3,2,1 / 256,1,1>>>") != NULL, "%s", err);
    seen.rc = CUDA_SUCCESS;
    plan_free(p);
}
END_TEST

START_TEST(test_open_without_driver) {
    Plan *p = plan_new();
    Comm c;
    ck_assert_int_eq(comm_init(&c, NULL, NULL, false), COMM_OK);
    Cux x;
    char err[512] = "";
    int rc = cux_open(&x, p, &c, err, sizeof err);
    if (rc == 0) {
        cux_close(&x); /* a machine with a GPU: a plan without code is refused below */
    } else {
        ck_assert_msg(strncmp(err, "rank 0: ", 8) == 0, "%s", err);
        ck_assert_msg(strstr(err, "CUDA driver") || strstr(err, "no GPU code"), "%s", err);
        ck_assert_ptr_null(x.drv.lib);
    }
    comm_finalize(&c);
    plan_free(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cuexec");
    TCase *tc = tcase_create("cuexec");
    tcase_add_test(tc, test_every_argument_kind);
    tcase_add_test(tc, test_utility_binding_by_position);
    tcase_add_test(tc, test_messages);
    tcase_add_test(tc, test_open_without_driver);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
