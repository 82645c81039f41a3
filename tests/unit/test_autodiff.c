/* autodiff + the reference executor, on the real example models.
 *  - The whole-model gradient of gpt2-tiny and llama-tiny matches central
 *    finite differences of the loss on a sample of parameter elements.
 *  - Checkpointed and non-checkpointed backward give bit-identical gradients.
 *  - The training graph has the expected structure (recompute per layer,
 *    one Adam per parameter, masters only under mixed precision).
 *  - The reference executor's loss falls over 50 steps on a real text. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "autodiff.h"
#include "loader.h"
#include "refexec.h"
#include "sema.h"
#include "tokens.h"

typedef struct Model {
    Arena a;
    SourceSet src;
    DiagSink d;
    Graph g;
} Model;

static void load(Model *m, const char *path, int64_t ckpt_every, int64_t batch) {
    arena_init(&m->a);
    source_set_init(&m->src);
    diag_init(&m->d);
    Program prog;
    LoadOptions lo = {.stdlib_dir = ZINF_STDLIB_DIR};
    ck_assert(program_load(&m->a, &m->src, &m->d, path, &lo, &prog));
    Sema *s = sema_new(&m->a, &prog, &m->src, &m->d);
    ck_assert_ptr_nonnull(s);
    TrainConfig *tc = (TrainConfig *)sema_train(s);
    if (batch) tc->micro_batch = batch;
    bool ok = sema_check(s, &m->g);
    if (!ok) diag_render(&m->d, &m->src, stderr, false);
    ck_assert(ok);
    m->g.train.checkpoint_every = ckpt_every;
    ck_assert(ad_build(&m->g, &m->d));
}

static void unload(Model *m) {
    diag_free(&m->d);
    source_set_free(&m->src);
    arena_free(&m->a);
}

static void fake_batch(const Graph *g, int32_t *tok, int32_t *tgt, uint64_t seed) {
    const GTensor *t = &g->tensors[g->inputs[0]];
    for (int64_t i = 0; i < t->numel; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((seed >> 33) % 256);
        tgt[i] = (int32_t)((tok[i] * 31 + 7) % 256);
    }
}

static void grad_check(const char *path) {
    Model m;
    load(&m, path, 1, 2);
    RefExec r;
    ck_assert_int_eq(ref_init(&r, &m.g, 7), 0);
    int64_t n = m.g.tensors[m.g.inputs[0]].numel;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *tgt = malloc(sizeof(int32_t) * (size_t)n);
    fake_batch(&m.g, tok, tgt, 99);
    float loss;
    ck_assert_int_eq(ref_forward_backward(&r, tok, tgt, 1.0f, &loss), 0);
    /* A sample of 10 parameter tensors spread over the model (embeddings,
     * every kind of layer weight, norms, the head): in each, its 2
     * largest-gradient elements and 1 random one. */
    int checked = 0, nparams = 0, seen = 0;
    uint64_t rs = 12345;
    for (int t = 0; t < m.g.ntensors; t++) nparams += m.g.tensors[t].cls == TC_PARAM;
    int stride = nparams / 10 > 1 ? nparams / 10 : 1;
    for (int t = 0; t < m.g.ntensors; t++) {
        const GTensor *p = &m.g.tensors[t];
        if (p->cls != TC_PARAM) continue;
        if (seen++ % stride != 0 && t != m.g.ntensors - 1) continue;
        int64_t pick[3] = {0, 0, 0};
        double best[2] = {-1, -1};
        for (int64_t i = 0; i < p->numel; i++) {
            double gv = fabs(ref_get(&r, p->grad, i));
            if (gv > best[0]) { best[1] = best[0]; pick[1] = pick[0]; best[0] = gv; pick[0] = i; }
            else if (gv > best[1]) { best[1] = gv; pick[1] = i; }
        }
        rs = rs * 6364136223846793005ull + 1;
        pick[2] = (int64_t)((rs >> 20) % (uint64_t)p->numel);
        for (int k = 0; k < 3; k++) {
            int64_t i = pick[k];
            double g = ref_get(&r, p->grad, i);
            double w = ref_get(&r, t, i), h = 1e-2;
            float lp, lm;
            ref_set(&r, t, i, w + h);
            ck_assert_int_eq(ref_forward(&r, tok, tgt, &lp), 0);
            ref_set(&r, t, i, w - h);
            ck_assert_int_eq(ref_forward(&r, tok, tgt, &lm), 0);
            ref_set(&r, t, i, w);
            double fd = ((double)lp - (double)lm) / (2 * h);
            /* fp32 forward: the difference quotient carries ~1e-5 of rounding noise. */
            ck_assert_msg(fabs(fd - g) <= 2e-2 * fabs(g) + 3e-5, "%s: d loss / d %s[%lld]: backward %.6g, finite difference %.6g",
                          path, p->name, (long long)i, g, fd);
            checked++;
        }
    }
    ck_assert_int_ge(checked, 27);
    free(tok);
    free(tgt);
    ref_free(&r);
    unload(&m);
}

START_TEST(test_gradcheck_gpt2_tiny) { grad_check("examples/gpt2-tiny.zl"); }
END_TEST
START_TEST(test_gradcheck_llama_tiny) { grad_check("examples/llama-tiny.zl"); }
END_TEST

START_TEST(test_checkpointing_same_gradients) {
    const char *paths[2] = {"examples/gpt2-tiny.zl", "examples/llama-tiny.zl"};
    for (int pi = 0; pi < 2; pi++) {
        Model a, b;
        load(&a, paths[pi], 1, 2);
        load(&b, paths[pi], 0, 2);
        int nre = 0;
        for (int k = 0; k < a.g.nops; k++) nre += a.g.ops[k].kind == OP_RECOMPUTE;
        ck_assert_int_gt(nre, 0);
        for (int k = 0; k < b.g.nops; k++) ck_assert_int_ne(b.g.ops[k].kind, OP_RECOMPUTE);
        RefExec ra, rb;
        ck_assert_int_eq(ref_init(&ra, &a.g, 3), 0);
        ck_assert_int_eq(ref_init(&rb, &b.g, 3), 0);
        int64_t n = a.g.tensors[a.g.inputs[0]].numel;
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *tgt = malloc(sizeof(int32_t) * (size_t)n);
        fake_batch(&a.g, tok, tgt, 5);
        float la, lb;
        ck_assert_int_eq(ref_forward_backward(&ra, tok, tgt, 1.0f, &la), 0);
        ck_assert_int_eq(ref_forward_backward(&rb, tok, tgt, 1.0f, &lb), 0);
        ck_assert(la == lb);
        /* Same tensors in the same order up to the forward's end: compare gradients by parameter. */
        for (int t = 0; t < a.g.ntensors; t++) {
            if (a.g.tensors[t].cls != TC_PARAM) continue;
            int ga = a.g.tensors[t].grad, gb = b.g.tensors[t].grad;
            ck_assert_str_eq(a.g.tensors[t].name, b.g.tensors[t].name);
            for (int64_t i = 0; i < a.g.tensors[t].numel; i++)
                ck_assert_msg(ref_get(&ra, ga, i) == ref_get(&rb, gb, i), "%s[%lld] differs", a.g.tensors[t].name, (long long)i);
        }
        free(tok);
        free(tgt);
        ref_free(&ra);
        ref_free(&rb);
        unload(&a);
        unload(&b);
    }
}
END_TEST

START_TEST(test_structure) {
    Model m;
    load(&m, "examples/gpt2-tiny.zl", 1, 0);
    int nparam = 0, nadam = 0, nmaster = 0, nckpt = 0;
    for (int t = 0; t < m.g.ntensors; t++) {
        nparam += m.g.tensors[t].cls == TC_PARAM;
        nmaster += m.g.tensors[t].cls == TC_MASTER;
        nckpt += m.g.tensors[t].cls == TC_CKPT;
    }
    for (int k = m.g.nbackward_end; k < m.g.nops; k++) nadam += m.g.ops[k].kind == OP_ADAM;
    ck_assert_int_eq(nadam, nparam);
    ck_assert_int_eq(nmaster, 0); /* f32 training: the parameter is its own master */
    ck_assert_int_ge(nckpt, m.g.nsegments); /* at least each layer's input is kept */
    ck_assert_int_eq(m.g.ops[m.g.nforward].kind, OP_LOSS_GRAD);
    unload(&m);
}
END_TEST

START_TEST(test_loss_falls_on_text) {
    Model m;
    load(&m, "examples/gpt2-tiny.zl", 1, 0);
    char err[512], path[128];
    snprintf(path, sizeof path, "/tmp/zinf-test-autodiff-%d.bin", (int)getpid());
    FILE *f = fopen("/usr/share/common-licenses/GPL-3", "rb");
    ck_assert_ptr_nonnull(f);
    static uint16_t text[40000];
    int64_t n = 0;
    int c;
    while (n < 40000 && (c = fgetc(f)) != EOF) text[n++] = (uint16_t)c;
    fclose(f);
    ck_assert_int_eq(tok_write(path, text, n, err, sizeof err), 0);
    TokReader tr;
    ck_assert_int_eq(tok_open(&tr, path, 256, err, sizeof err), 0);
    RefExec r;
    ck_assert_int_eq(ref_init(&r, &m.g, m.g.train.seed), 0);
    int64_t B = m.g.train.micro_batch, T = m.g.tensors[m.g.inputs[0]].dims[1];
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(B * T));
    double first = 0, last = 0;
    for (int s = 0; s < 50; s++) {
        float loss;
        ck_assert_int_eq(tok_batch(&tr, 0, 1, s, B, T, tok, tgt, err, sizeof err), 0);
        ck_assert_int_eq(ref_forward_backward(&r, tok, tgt, 1.0f, &loss), 0);
        ck_assert_int_eq(ref_optimizer_step(&r), 0);
        if (s < 5) first += loss / 5.0;
        if (s >= 45) last += loss / 5.0;
    }
    /* ln(256) = 5.55 at the start; byte statistics of English alone bring it well under 4. */
    ck_assert_msg(first > 5.0 && last < first - 1.0, "loss over the first 5 steps %.3f, last 5 %.3f", first, last);
    free(tok);
    free(tgt);
    tok_close(&tr);
    remove(path);
    ref_free(&r);
    unload(&m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("autodiff");
    TCase *tc = tcase_create("models");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_structure);
    tcase_add_test(tc, test_gradcheck_gpt2_tiny);
    tcase_add_test(tc, test_gradcheck_llama_tiny);
    tcase_add_test(tc, test_checkpointing_same_gradients);
    tcase_add_test(tc, test_loss_falls_on_text);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
