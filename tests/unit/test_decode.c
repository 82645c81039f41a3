/* decode: the KV-cache decoder (runtime/decode/decode.h) against the plan's own
 * forward. Each model is compiled here (sema, autodiff, planner), its
 * window of T positions run once through the executor (rt_forward), and the
 * decoder fed the same ids one position at a time: its logits at position
 * p must equal the window's at p (1e-5 of the largest logit for f32, 2e-2
 * for bf16, whose activations are rounded at other points), for GPT-2
 * (learned positions through arange, layernorm, gelu, a tied head) and
 * LLaMA (rope, rmsnorm, grouped kv heads, silu), on plans that keep the
 * parameters on the CPU or on NVMe. Then a reset starts again at position
 * 0, a step past T fails, and the models it cannot decode are refused
 * naming the op, before anything is gathered; on the GPU (KV_CUDA), a plan
 * without the decode kernels is refused from the plan alone. The GPU steps
 * themselves are tested on the fake driver (tests/e2e/eval_gen_cuda.sh). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "comm.h"
#include "decode.h"
#include "exec.h"
#include "zl_fixture.h"

static Comm C;
static char tmpdir[64];
static char err[4096];

static void setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_decode.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) { /* best effort */
    }
}

/* path compiled for the host target on 1 rank, micro-batch 2, parameters and optimizer state on `params`. */
static Plan *compile(ZlModel *m, const char *path, DType dt, int params) {
    return zl_compile(m, path, &(ZlOptions){.target = "host", .ranks = 1, .micro_batch = 2, .dtype = dt, .state_tier = params});
}

static const char *write_model(const char *text) {
    static char path[128];
    snprintf(path, sizeof path, "%s/main.zl", tmpdir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* The decoder's logits at every position against the window's. */
static void against_window(const char *path, DType dt, int params, double tol) {
    ZlModel m;
    Plan *p = compile(&m, path, dt, params);
    int64_t B, T;
    ck_assert(plan_batch_shape(p, &B, &T));
    RtOptions ro = {.nvme_dir = tmpdir};
    Rt *r = rt_create(p, &C, &ro, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    RtForwardInfo fi;
    ck_assert_msg(rt_forward_info(r, &fi, err, sizeof err) == 0, "%s", err);
    int64_t V = fi.vocab;
    int32_t *ids = malloc(sizeof *ids * (size_t)(B * T)), *tgt = calloc((size_t)(B * T), sizeof *tgt);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < B * T; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)V);
    }
    double loss;
    ck_assert_msg(rt_forward(r, ids, tgt, &loss, err, sizeof err) == 0, "%s", err);
    float *want = malloc(sizeof *want * (size_t)(T * V)), *got = malloc(sizeof *got * (size_t)V);
    for (int64_t t = 0; t < T; t++) ck_assert_msg(rt_logits(r, t, want + t * V, err, sizeof err) == 0, "%s", err);
    KvDecoder *d = NULL;
    ck_assert_msg(kvdec_create(r, p, &C, KV_HOST, &d, err, sizeof err) == 0, "%s: %s", path, err);
    for (int pass = 0; pass < 2; pass++) { /* the second after a reset */
        for (int64_t t = 0; t < T; t++) {
            ck_assert_int_eq(kvdec_position(d), t);
            ck_assert_msg(kvdec_step(d, ids[t], got, err, sizeof err) == 0, "%s", err);
            double big = 0, worst = 0;
            for (int64_t v = 0; v < V; v++) {
                if (fabs(want[t * V + v]) > big) big = fabs(want[t * V + v]);
                if (fabs(got[v] - want[t * V + v]) > worst) worst = fabs(got[v] - want[t * V + v]);
            }
            ck_assert_msg(worst <= tol * big + 1e-7, "%s (%s, params %s): position %ld: logits differ by %g (largest %g)", path,
                          dt == DT_BF16 ? "bf16" : "f32", params >= 0 ? plan_tier_names[params] : "chosen", (long)t, worst, big);
        }
        ck_assert_int_eq(kvdec_step(d, ids[0], got, err, sizeof err), -1);
        ck_assert_ptr_nonnull(strstr(err, "the cache holds the window's"));
        kvdec_reset(d);
    }
    ck_assert_uint_gt(kvdec_bytes(d), 0);
    kvdec_free(d);
    free(ids);
    free(tgt);
    free(want);
    free(got);
    rt_destroy(r);
    zl_free(&m);
}

START_TEST(gpt2_f32) { against_window("examples/gpt2-tiny.zl", DT_NONE, -1, 1e-5); }
END_TEST

START_TEST(llama_f32_nvme) { against_window("examples/llama-tiny.zl", DT_NONE, TIER_NVME, 1e-5); }
END_TEST

START_TEST(llama_bf16) { against_window("examples/llama-tiny.zl", DT_BF16, TIER_CPU, 2e-2); }
END_TEST

/* Sliding windows of 3 and 5 over 12 positions (the caches are rings of 3
 * and 5 rows, wrapping several times; the third layer attends to all),
 * partial rotary (12 of 16 columns) and longrope within its original
 * context: the KV cache's logits are the window's, and the windowed
 * caches are smaller than the same model's without windows. */
static const char *windowed(int w0, int w1) {
    static char text[2048];
    snprintf(text, sizeof text,
             "import \"llama\"\n"
             "const V = 40, T = 12, D = 32, H = 2, KV = 1, F = 48, L = 3\n"
             "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
             "  tok = param [V, D] init normal(0.3)\n"
             "  x = embedding(tok, tokens)\n"
             "  repeat L as i {\n"
             "    x = llama_block(x, H, KV, F, rotary_dim = 12, rope_scaling = \"longrope\", original_max_positions = 16,\n"
             "                    attention_factor = 1.2, short_factor = [1.0, 1.5, 2.0, 3.0, 4.0, 6.0],\n"
             "                    long_factor = [2.0, 3.0, 5.0, 8.0, 13.0, 21.0],\n"
             "                    window = %d * (1 - i / 2) * (1 - i %% 2) + %d * (i %% 2))\n"
             "  }\n"
             "  x = rms(x)\n"
             "  loss cross_entropy(matmul(x, tok, transpose_b), targets)\n}\n"
             "train { micro_batch = 2 }\n", w0, w1);
    return text;
}

START_TEST(windows_partial_longrope) {
    against_window(write_model(windowed(3, 5)), DT_NONE, TIER_CPU, 1e-5);
    uint64_t bytes[2];
    for (int k = 0; k < 2; k++) {
        ZlModel m;
        Plan *p = compile(&m, write_model(k ? windowed(0, 0) : windowed(3, 5)), DT_NONE, TIER_CPU);
        RtOptions ro = {.nvme_dir = tmpdir};
        Rt *r = rt_create(p, &C, &ro, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        KvDecoder *d = NULL;
        ck_assert_msg(kvdec_create(r, p, &C, KV_HOST, &d, err, sizeof err) == 0, "%s", err);
        bytes[k] = kvdec_bytes(d);
        kvdec_free(d);
        rt_destroy(r);
        zl_free(&m);
    }
    /* layer 0: 3 rows instead of 12, layer 1: 5; of 16 f32 a row, keys and values */
    ck_assert_uint_eq(bytes[1] - bytes[0], (uint64_t)((12 - 3) + (12 - 5)) * 16 * 4 * 2);
}
END_TEST

/* A model the decoder refuses on `on`: 1 and the reason, no decoder. */
static void refused_on(KvDevice on, const char *path, const char *needle) {
    ZlModel m;
    Plan *p = compile(&m, path, DT_NONE, -1);
    RtOptions ro = {.nvme_dir = tmpdir};
    Rt *r = rt_create(p, &C, &ro, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    KvDecoder *d = (KvDecoder *)&m; /* must be cleared */
    ck_assert_int_eq(kvdec_create(r, p, &C, on, &d, err, sizeof err), 1);
    ck_assert_ptr_null(d);
    ck_assert_msg(strstr(err, needle) != NULL, "got '%s', want '%s'", err, needle);
    rt_destroy(r);
    zl_free(&m);
}

static void refused(const char *text, const char *needle) { refused_on(KV_HOST, write_model(text), needle); }

START_TEST(refusals) {
    /* scores against every position made by hand: a matmul of two activations */
    refused("const V = 32, T = 8, D = 16\n"
            "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
            "  wte = param [V, D] init normal(0.02)\n"
            "  wpe = param [T, D] init normal(0.02)\n"
            "  w = param [T, D] init normal(0.02)\n"
            "  x = embedding(wte, tokens)\n"
            "  s = matmul(x, embedding(wpe, arange(T)), transpose_b)\n"
            "  loss cross_entropy(matmul(linear(s, w), wte, transpose_b), targets)\n}\n"
            "train { micro_batch = 2 }\n",
            "a matmul of two activations looks across positions");
    /* a sequence-wide feature: the targets reach an op before the loss */
    refused("const V = 32, T = 8, D = 16\n"
            "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
            "  wte = param [V, D] init normal(0.02)\n"
            "  x = embedding(wte, tokens) + embedding(wte, targets)\n"
            "  loss cross_entropy(matmul(x, wte, transpose_b), targets)\n}\n"
            "train { micro_batch = 2 }\n",
            "which a decode step does not have (only the loss may read the targets)");
    /* a family without a decode step (cross_entropy, the loss's) on the
     * token ids' activations before the loss */
    refused("const V = 32, T = 8, D = 16\n"
            "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
            "  wte = param [V, D] init normal(0.02)\n"
            "  x = embedding(wte, tokens)\n"
            "  aux = cross_entropy(x, tokens)\n"
            "  loss cross_entropy(matmul(x + aux, wte, transpose_b), targets)\n}\n"
            "train { micro_batch = 2 }\n",
            "(cross_entropy) has no decode rule");
    /* on the GPU: a plan without GPU code has no decode kernels, refused
     * from the plan alone (no driver is opened) with the way out */
    /* the same analysis on the GPU: a matmul of two activations is refused
     * before anything looks for kernels or a device */
    refused_on(KV_CUDA, write_model("const V = 32, T = 8, D = 16\n"
                                    "model m(tokens: i32[B, T], targets: i32[B, T]) {\n"
                                    "  wte = param [V, D] init normal(0.02)\n"
                                    "  wpe = param [T, D] init normal(0.02)\n"
                                    "  s = matmul(embedding(wte, tokens), embedding(wpe, arange(T)), transpose_b)\n"
                                    "  loss cross_entropy(matmul(s, wpe), targets)\n}\n"
                                    "train { micro_batch = 2 }\n"),
               "a matmul of two activations looks across positions");
    refused_on(KV_CUDA, "examples/gpt2-tiny.zl",
               "the plan has no GPU decode kernels (zinfc puts them in a plan with GPU code for a model they serve): "
               "recompile it, or use --decode window");
}
END_TEST

int main(int argc, char **argv) {
    if (comm_init(&C, &argc, &argv, NULL) != COMM_OK) { fprintf(stderr, "%s\n", comm_last_error(&C)); return 1; }
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, gpt2_f32);
    tcase_add_test(tc, llama_f32_nvme);
    tcase_add_test(tc, llama_bf16);
    tcase_add_test(tc, windows_partial_longrope);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    if (C.mpi) srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    comm_finalize(&C);
    return failed ? 1 : 0;
}
