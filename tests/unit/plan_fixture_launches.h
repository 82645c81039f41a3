/* The fixture model planned, with its CUDA launches filled the way zinfc
 * fills them (cuda_gen, then kernels_embed_launches) and one stand-in
 * PlanKernel per unit (no NVRTC): a GPU plan for the plan-file and verifier
 * suites. fx_plan_launches_tiled also cuts the MLP weights and the
 * embedding table into `tiles` tiles (tile launches for linear forward and
 * backward and embedding forward and backward). */
#ifndef ZINF_TEST_PLAN_FIXTURE_LAUNCHES_H
#define ZINF_TEST_PLAN_FIXTURE_LAUNCHES_H
#include <check.h>
#include "cuda_gen.h"
#include "kernels_embed.h"
#include "planner.h"
#include "plan_fixture.h"

static Plan *fx_plan_launches_tiled(const char *target, int ranks, int layers, int tiles) {
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
    TilePin pins[2] = {{"block.*.mlp.w*", tiles, SPAN_NONE}, {"wte", tiles, SPAN_NONE}};
    if (tiles > 1) {
        o.tiles = pins;
        o.ntiles = 2;
    }
    PlannerResult r = {0};
    ck_assert_msg(planner_run(&g, &t, &o, &a, &d, &r), "planning the fixture failed");
    CudaGen cg;
    cuda_gen_init(&cg, &a, NULL);
    CudaModule m;
    ck_assert_msg(cuda_gen_graph(&cg, &g, &m, &d) == 0, "cuda_gen failed on the fixture: %s", d.len ? d.items[0].msg : "");
    ck_assert_msg(kernels_embed_launches(r.plan, &g, &cg, &m, &d), "kernels_embed_launches failed: %s",
                  d.len ? d.items[0].msg : "");
    Plan *p = r.plan;
    p->kernels = ARENA_NEWN(&p->arena, PlanKernel, m.nunits);
    ck_assert_ptr_nonnull(p->kernels);
    static const uint8_t cubin[] = {0x7f, 'E', 'L', 'F'};
    for (int u = 0; u < m.nunits; u++) {
        char nb[96];
        p->kernels[u] = (PlanKernel){arena_strdup(&p->arena, kernels_unit_name(&m, u, nb, sizeof nb)), "sm_90", "", cubin,
                                     sizeof cubin};
    }
    p->nkernels = (uint32_t)m.nunits;
    diag_free(&d);
    arena_free(&a);
    return p;
}

static Plan *fx_plan_launches(const char *target, int ranks, int layers) {
    return fx_plan_launches_tiled(target, ranks, layers, 1);
}
#endif
