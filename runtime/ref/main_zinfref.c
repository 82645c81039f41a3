/* zinfref: the reference executor on the command line. Checks a model,
 * builds its training graph and trains it directly on the host kernels —
 * one process, nothing partitioned, nothing offloaded — printing the loss
 * of every step. It is the oracle zinfrun's losses are compared with.
 *   zinfref model.zl --data train.bin [--steps N] [--batch B] [-I dir]
 *           [--eval-data F [--eval-every N] [--eval-batches K]]
 * --batch overrides train { micro_batch } (to match R ranks of B: R*B).
 * --eval-data: "eval step S loss L batches K", the mean forward loss
 * (ref_forward) over windows 0..K-1 of F, at step 0 and every N steps
 * (without --eval-every after the last step), as zinfrun --eval-data. 
 * Exit 0, 1 on errors in the model or data, 2 on usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "autodiff.h"
#include "loader.h"
#include "main_env.h"
#include "refexec.h"
#include "sema.h"
#include "tokens.h"

int main(int argc, char **argv) {
    main_blas_core(argv); /* OpenBLAS on this processor's kernels (blas_core.h) */
    const char *model = NULL, *data = NULL, *incs[32];
    int ninc = 0;
    long long steps = -1, batch = 0, eval_every = 0, eval_batches = 1;
    const char *eval_data = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-I") && i + 1 < argc && ninc < 32) incs[ninc++] = argv[++i];
        else if (!strcmp(argv[i], "--eval-data") && i + 1 < argc) eval_data = argv[++i];
        else if (!strcmp(argv[i], "--eval-every") && i + 1 < argc) eval_every = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--eval-batches") && i + 1 < argc) eval_batches = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: zinfref model.zl --data train.bin [--steps N] [--batch B] [-I dir]\n");
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "zinfref: unknown option '%s'\n", argv[i]);
            return 2;
        } else model = argv[i];
    }
    if (!model || !data) {
        fprintf(stderr, "usage: zinfref model.zl --data train.bin [--steps N] [--batch B] [-I dir]\n");
        return 2;
    }
    MainEnv env; /* the host kernels' instruction set and threads (main_env.h) */
    char env_err[256];
    if (main_env_read(&env, env_err, sizeof env_err) || main_env_apply(&env, env_err, sizeof env_err)) {
        fprintf(stderr, "zinfref: %s\n", env_err);
        return 2;
    }
    Arena a;
    arena_init(&a);
    SourceSet src;
    source_set_init(&src);
    DiagSink d;
    diag_init(&d);
    Program prog;
    LoadOptions lo = {.include_dirs = incs, .ninclude = ninc, .stdlib_dir = env.stdlib_dir ? env.stdlib_dir : ZINF_STDLIB_DIR};
    Graph g;
    int rc = 1;
    if (!program_load(&a, &src, &d, model, &lo, &prog) || d.errors) goto out;
    Sema *s = sema_new(&a, &prog, &src, &d);
    if (!s) goto out;
    if (batch > 0) {
        /* B is a constant of the program: override it before the graph is built. */
        TrainConfig *tc = (TrainConfig *)sema_train(s);
        tc->micro_batch = batch;
    }
    if (!sema_check(s, &g) || !ad_build(&g, &d)) goto out;
    RefExec r;
    if (ref_init(&r, &g, g.train.seed)) {
        fprintf(stderr, "zinfref: %s\n", r.err);
        goto out;
    }
    int64_t B = g.train.micro_batch, T = g.tensors[g.inputs[0]].dims[g.tensors[g.inputs[0]].rank - 1];
    int64_t V = 0;
    for (int k = 0; k < g.nforward; k++)
        if (g.ops[k].prim == PRIM_EMBEDDING) { V = g.tensors[g.ops[k].in[0]].dims[0]; break; }
    char err[1024];
    TokReader tr;
    if (tok_open(&tr, data, V, err, sizeof err)) {
        fprintf(stderr, "zinfref: %s\n", err);
        ref_free(&r);
        goto out;
    }
    if (tr.pack_T) { /* its rows need each sample's attention to itself: zinfrun's */
        fprintf(stderr, "zinfref: %s is a packed file (zinftok --pack): zinfref reads windows; train it with zinfrun\n", data);
        tok_close(&tr);
        ref_free(&r);
        goto out;
    }
    int64_t n = steps >= 0 ? steps : g.train.steps;
    int64_t A = g.train.grad_accum > 0 ? g.train.grad_accum : 1;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(B * T));
    rc = 0;
    TokReader er;
    bool have_er = false;
    if (eval_data) {
        if (tok_open(&er, eval_data, V, err, sizeof err)) {
            fprintf(stderr, "zinfref: %s\n", err);
            rc = 1;
        } else {
            have_er = true;
        }
    }
    for (int64_t st = 0; st <= n && !rc; st++) {
        if (have_er && (eval_every > 0 ? st % eval_every == 0 : st == n)) {
            double sum = 0;
            for (int64_t k = 0; k < eval_batches && !rc; k++) {
                float loss = 0;
                if (tok_batch(&er, 0, 1, k, B, T, tok, tgt, err, sizeof err)) {
                    fprintf(stderr, "zinfref: %s\n", err);
                    rc = 1;
                } else if (ref_forward(&r, tok, tgt, &loss)) {
                    fprintf(stderr, "zinfref: %s\n", r.err);
                    rc = 1;
                }
                sum += loss;
            }
            if (!rc) printf("eval step %lld loss %.9g batches %lld\n", (long long)st, sum / (double)eval_batches, eval_batches);
        }
        if (st == n) break;
        double sum = 0;
        for (int64_t k = 0; k < A && !rc; k++) {
            float loss = 0;
            if (tok_batch(&tr, 0, 1, st * A + k, B, T, tok, tgt, err, sizeof err)) {
                fprintf(stderr, "zinfref: %s\n", err);
                rc = 1;
            } else if (ref_forward_backward(&r, tok, tgt, (float)(1.0 / (double)A), &loss)) {
                fprintf(stderr, "zinfref: %s\n", r.err);
                rc = 1;
            }
            sum += loss;
        }
        if (!rc && ref_optimizer_step(&r)) {
            fprintf(stderr, "zinfref: %s\n", r.err);
            rc = 1;
        }
        if (!rc) printf("step %lld loss %.9g\n", (long long)st + 1, sum / (double)A);
    }
    free(tok);
    free(tgt);
    if (have_er) tok_close(&er);
    tok_close(&tr);
    ref_free(&r);
out:
    diag_render(&d, &src, stderr, false);
    if (d.errors && rc == 0) rc = 1;
    if (d.errors) rc = 1;
    diag_free(&d);
    source_set_free(&src);
    arena_free(&a);
    return rc;
}
