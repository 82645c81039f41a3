/* planner_plan: the Plan of one build: the target, training settings, the
 * graph's tables (compiler/graph_plan.h), shards, arenas, buffers and the
 * instruction stream with its dependencies. */
#include "planner_impl.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "graph_plan.h"

/* the model, the target as planned and the training settings */
static void plan_header(const PlanBuilder *b, Plan *p) {
    const Graph *g = b->g;
    Arena *pa = &p->arena;
    p->model_name = arena_strdup(pa, g->model_name ? g->model_name : "");
    p->target = *b->t;
    p->target.name = arena_strdup(pa, b->t->name ? b->t->name : "");
    p->target.backend = arena_strdup(pa, b->t->backend ? b->t->backend : "cuda");
    p->target.gpu_arch = arena_strdup(pa, b->t->gpu_arch ? b->t->gpu_arch : "");
    p->target.nvme_paths = ARENA_NEWN(pa, const char *, b->t->nvme_npaths + 1);
    for (int i = 0; i < b->t->nvme_npaths; i++) p->target.nvme_paths[i] = arena_strdup(pa, b->t->nvme_paths[i]);
    const TrainConfig *tc = &g->train;
    p->train = (PlanTrain){tc->micro_batch, tc->steps, tc->warmup_steps, tc->checkpoint_every, tc->grad_accum > 0 ? tc->grad_accum : 1,
                           tc->seed, (uint8_t)tc->dtype, tc->schedule, tc->lr, tc->beta1, tc->beta2, tc->eps, tc->weight_decay,
                           tc->min_lr, tc->grad_clip, tc->loss_scale};
    p->ranks = b->R;
    p->loss = g->loss;
    p->ninputs = g->ninputs;
    for (int i = 0; i < 4; i++) p->inputs[i] = i < g->ninputs ? g->inputs[i] : -1;
    p->opt_begin = b->opt_begin;
    p->redo_begin = b->redo_begin;
    p->redo_end = b->redo_end;
}

/* every state tensor's home, in tensor order; false when out of memory */
static bool plan_shards(const PlanBuilder *b, Plan *p) {
    const Graph *g = b->g;
    int nshards = 0;
    for (int i = 0; i < g->ntensors; i++) nshards += b->home[i] >= 0;
    p->shards = ARENA_NEWN(&p->arena, PlanShard, nshards + 1);
    if (!p->shards) return false;
    static const uint8_t tier_of_arena[PLAN_NARENAS] = {TIER_GPU, TIER_CPU, TIER_CPU, TIER_NVME};
    for (int i = 0; i < g->ntensors; i++) {
        if (b->home[i] < 0) continue;
        const GTensor *t = &g->tensors[i];
        p->tensors[i].shard = (int32_t)p->nshards;
        p->shards[p->nshards++] = (PlanShard){i, tier_of_arena[b->bufs[b->home[i]].b.arena], b->part[i], b->ntiles[i],
                                              t->numel / b->ntiles[i], b->tile_shard[i], pl_shard_bytes(b, i), b->home[i]};
    }
    return true;
}

/* the arenas' sizes and capacities; pinned and pageable CPU memory share
 * the CPU's */
static void plan_arenas(const PlanBuilder *b, Plan *p) {
    for (int a = 0; a < PLAN_NARENAS; a++)
        p->arenas[a] = (PlanArena){(uint8_t)a, 0, b->size[a], pl_arena_align[a]};
    p->arenas[ARENA_GPU].capacity = b->cap[ARENA_GPU];
    p->arenas[ARENA_NVME].capacity = b->cap[ARENA_NVME];
    uint64_t host = b->cap[ARENA_CPU];
    p->arenas[ARENA_PINNED].capacity = host > b->size[ARENA_CPU] ? host - b->size[ARENA_CPU] : 0;
    p->arenas[ARENA_CPU].capacity = host > b->size[ARENA_PINNED] ? host - b->size[ARENA_PINNED] : 0;
}

/* Copies of names in a plan's arena, one per name pointer (an open-addressed
 * table of pointers); a name is copied again only when out of memory. */
typedef struct Interned {
    struct { const char *src, *copy; } *slot;
    size_t cap, n;
} Interned;

static const char *intern(Interned *in, Arena *pa, const char *src) {
    if (2 * (in->n + 1) > in->cap) {
        size_t nc = in->cap ? 2 * in->cap : 1024;
        void *ns = calloc(nc, sizeof *in->slot);
        if (!ns) return arena_strdup(pa, src);
        Interned grown = {ns, nc, 0};
        for (size_t k = 0; k < in->cap; k++)
            if (in->slot[k].src) {
                size_t h = ((uintptr_t)in->slot[k].src >> 4) * 0x9E3779B97F4A7C15u & (nc - 1);
                while (grown.slot[h].src) h = (h + 1) & (nc - 1);
                grown.slot[h] = in->slot[k];
                grown.n++;
            }
        free(in->slot);
        *in = grown;
    }
    size_t h = ((uintptr_t)src >> 4) * 0x9E3779B97F4A7C15u & (in->cap - 1);
    while (in->slot[h].src && in->slot[h].src != src) h = (h + 1) & (in->cap - 1);
    if (!in->slot[h].src) {
        const char *copy = arena_strdup(pa, src);
        if (!copy) return NULL;
        in->slot[h].src = src;
        in->slot[h].copy = copy;
        in->n++;
    }
    return in->slot[h].copy;
}

/* buffers, operands, instructions and their dependencies (one list, each
 * instruction's a range of it). The three tables are copied side by side
 * (a deep model's are each over a hundred megabytes): everything is
 * allocated first, and only the buffers' copy allocates again (the names
 * it interns). */
static void plan_schedule(const PlanBuilder *b, Plan *p) {
    Arena *pa = &p->arena;
    p->nbuffers = (uint32_t)b->nbufs;
    p->buffers = ARENA_NEWN(pa, PlanBuffer, b->nbufs + 1);
    p->noperands = (uint32_t)b->nopnds;
    p->operands = ARENA_NEWN(pa, PlanOperand, b->nopnds + 1);
    p->ninstrs = (uint32_t)b->nins;
    p->instrs = ARENA_NEWN(pa, PlanInstr, b->nins + 1);
    uint32_t ndeps = 0;
    for (int i = 0; i < b->nins; i++)
        for (int q = 0; q < PLAN_NQUEUES; q++) ndeps += b->ins[i].depq[q] >= 0;
    p->deps = ARENA_NEWN(pa, uint32_t, ndeps + 1);
    if (!p->buffers || !p->operands || !p->instrs || !p->deps) return; /* p->arena.failed */
#ifdef _OPENMP
#pragma omp parallel sections num_threads(2)
#endif
    {
#ifdef _OPENMP
#pragma omp section
#endif
        {
            /* many buffers share a name (a tensor's, a tile's): one copy of each */
            Interned in = {0};
            for (int i = 0; i < b->nbufs; i++) {
                p->buffers[i] = b->bufs[i].b;
                p->buffers[i].name = intern(&in, pa, b->bufs[i].b.name ? b->bufs[i].b.name : "");
            }
            free(in.slot);
            if (b->nopnds) memcpy(p->operands, b->opnds, sizeof(PlanOperand) * (size_t)b->nopnds);
        }
#ifdef _OPENMP
#pragma omp section
#endif
        {
            uint32_t nd = 0;
            for (int i = 0; i < b->nins; i++) {
                p->instrs[i] = b->ins[i].s;
                p->instrs[i].dep = nd;
                p->instrs[i].ndeps = 0;
                for (int q = 0; q < PLAN_NQUEUES; q++)
                    if (b->ins[i].depq[q] >= 0) {
                        p->deps[nd++] = (uint32_t)b->ins[i].depq[q];
                        p->instrs[i].ndeps++;
                    }
            }
            p->ndeps = nd;
        }
    }
}

Plan *pl_emit_plan(PlanBuilder *b) {
    Plan *p = plan_new();
    if (!p) return NULL;
    plan_header(b, p);
    char err[160];
    if (!graph_plan_tables(b->g, p, err, sizeof err) || !plan_shards(b, p)) {
        plan_free(p);
        return NULL;
    }
    plan_arenas(b, p);
    plan_schedule(b, p);
    if (p->arena.failed) {
        plan_free(p);
        return NULL;
    }
    return p;
}
