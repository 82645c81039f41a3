/* zl_fixture: a .zl model compiled into a plan inside a test, through the
 * whole front end (load, sema, autodiff, planner) and the verifier, as
 * zinfc does. For suites that need a real plan of an example model
 * (test_decode, test_plan_pack). Header-only: each suite includes it once. */
#ifndef ZINF_ZL_FIXTURE_H
#define ZINF_ZL_FIXTURE_H
#include <check.h>
#include "autodiff.h"
#include "loader.h"
#include "planner.h"
#include "sema.h"
#include "target.h"
#include "verify.h"

#ifndef ZINF_STDLIB_DIR
#define ZINF_STDLIB_DIR "stdlib"
#endif

/* Everything the plan was made from; zl_free releases it and the plan. */
typedef struct ZlModel {
    Arena a;
    SourceSet src;
    DiagSink d;
    Graph g;
    PlannerResult pr;
} ZlModel;

/* What may differ from the model's own settings: 0, DT_NONE or -1 keep them. */
typedef struct ZlOptions {
    const char *target;   /* a built-in target's name */
    int ranks;            /* 0: the target's */
    int64_t micro_batch;  /* 0: the model's */
    DType dtype;          /* DT_NONE: the model's */
    int state_tier;       /* PlanTier of parameters and optimizer state, -1: the planner's choice */
    int overlap;          /* PlannerOptions.overlap: 0 auto, 1 on, -1 off */
} ZlOptions;

static Plan *zl_compile(ZlModel *m, const char *path, const ZlOptions *zo) {
    arena_init(&m->a);
    source_set_init(&m->src);
    diag_init(&m->d);
    Program prog;
    LoadOptions lo = {.stdlib_dir = ZINF_STDLIB_DIR};
    ck_assert_msg(program_load(&m->a, &m->src, &m->d, path, &lo, &prog), "%s does not load", path);
    Sema *s = sema_new(&m->a, &prog, &m->src, &m->d);
    ck_assert_ptr_nonnull(s);
    TrainConfig *tc = (TrainConfig *)sema_train(s);
    if (zo->micro_batch) tc->micro_batch = zo->micro_batch;
    if (zo->dtype) tc->dtype = zo->dtype;
    ck_assert(sema_check(s, &m->g));
    ck_assert(ad_build(&m->g, &m->d));
    Target t;
    ck_assert(target_builtin(zo->target, &t));
    PlannerOptions o;
    planner_options_default(&o);
    o.ranks = zo->ranks;
    o.overlap = zo->overlap;
    if (zo->state_tier >= 0) o.tier[PC_PARAMS] = o.tier[PC_OPTIMIZER] = zo->state_tier;
    ck_assert_msg(planner_run(&m->g, &t, &o, &m->a, &m->d, &m->pr), "planner failed on %s", path);
    char msgs[2048];
    ck_assert_msg(verify_plan(m->pr.plan, msgs, sizeof msgs) == 0, "%s", msgs);
    return m->pr.plan;
}

static void zl_free(ZlModel *m) {
    plan_free(m->pr.plan);
    diag_free(&m->d);
    source_set_free(&m->src);
    arena_free(&m->a);
}

#endif
