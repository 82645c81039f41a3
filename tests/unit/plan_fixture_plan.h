/* The fixture model planned on a built-in target, encoded: the starting
 * point of the plan-file and verifier suites. */
#ifndef ZINF_TEST_PLAN_FIXTURE_PLAN_H
#define ZINF_TEST_PLAN_FIXTURE_PLAN_H
#include <check.h>
#include <stdlib.h>
#include "planner.h"
#include "plan_fixture.h"

/* Plans the fixture with the given layers/ranks, parameters and optimizer
 * state pinned to the given tiers (-1: the planner's choice); returns the
 * plan (caller frees). */
static Plan *fx_plan_tiers(const char *target, int ranks, int layers, int prefetch, int param_tier, int opt_tier) {
    Arena a;
    DiagSink d;
    Graph g;
    Target t;
    arena_init(&a);
    diag_init(&d);
    FixtureShape s = fx_small();
    s.layers = layers;
    s.grad_clip = 1.0;
    ck_assert(fx_build(&g, &a, &d, s));
    ck_assert(target_builtin(target, &t));
    PlannerOptions o;
    planner_options_default(&o);
    o.ranks = ranks;
    o.whole_below = 1000;
    o.prefetch = prefetch;
    o.tier[PC_PARAMS] = param_tier;
    o.tier[PC_OPTIMIZER] = opt_tier;
    PlannerResult r = {0};
    ck_assert_msg(planner_run(&g, &t, &o, &a, &d, &r), "planning the fixture failed");
    diag_free(&d);
    arena_free(&a);
    return r.plan;
}

static Plan *fx_plan(const char *target, int ranks, int layers, int prefetch, int param_tier) {
    return fx_plan_tiers(target, ranks, layers, prefetch, param_tier, -1);
}
#endif
