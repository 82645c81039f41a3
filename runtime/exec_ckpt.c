/* exec_ckpt: the executor's checkpoints: rt_checkpoint_save and
 * rt_checkpoint_load (runtime/exec.c) come here with the plan's rule of
 * which tensor classes a checkpoint holds. The files themselves are
 * runtime/ckpt.c's. */
#include "exec_impl.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt.h"

/* Every rank learns whether any rank failed, so no rank waits forever. */
static int agree(Rt *r, int rc) {
    int64_t v = rc != 0;
    if (comm_allreduce_max_i64(r->c, &v)) return -1;
    return v ? -1 : 0;
}

int rt_ckpt_save(Rt *r, const char *dir, const char *state_json, RtCkptClass ckpt_class, char *err, size_t n) {
    const Plan *p = r->p;
    CkptEntry *e = calloc(p->nshards ? p->nshards : 1, sizeof *e);
    int ne = 0, rc = 0;
    if (!e) rc = rt_fail(err, n, "out of memory");
    for (uint32_t s = 0; s < p->nshards && !rc; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (!ckpt_class(t->cls)) continue;
        void *d = malloc(sh->bytes ? sh->bytes : 1);
        if (!d) { rc = rt_fail(err, n, "out of memory"); break; }
        e[ne] = (CkptEntry){t->name, t->dtype, sh->bytes, d};
        ne++;
        rc = rt_home_read(r, sh->buffer, 0, d, sh->bytes, err, n);
    }
    uint64_t h = rt_plan_hash(r);
    int64_t next = r->step;
    if (!rc) rc = ckpt_write_shard(dir, next, r->c->rank, r->c->size, h, e, ne, err, n);
    for (int i = 0; i < ne; i++) free(e[i].data);
    free(e);
    if (agree(r, rc)) return rc ? rc : rt_fail(err, n, "another rank failed to write its checkpoint shard; the previous checkpoint is kept");
    rc = 0;
    if (r->c->rank == 0) {
        char st[1024];
        snprintf(st, sizeof st, "{\"step\": %lld, \"loss_scale\": %.17g, \"good_steps\": %d, \"run\": %s}",
                 (long long)r->step, r->loss_scale, r->good_steps, state_json && *state_json ? state_json : "{}");
        rc = ckpt_write_manifest(dir, next, r->c->size, h, p->model_name, st, err, n);
        if (!rc) rc = ckpt_prune(dir, r->c->size, h, next, 2, err, n);
    }
    if (agree(r, rc)) return rc ? rc : rt_fail(err, n, "rank 0 failed to write the checkpoint manifest; the previous checkpoint is kept");
    return 0;
}

int rt_ckpt_load(Rt *r, const char *dir, int64_t step, RtCkptClass ckpt_class, bool *mine, RtCkptOrigin *from, char *err,
                 size_t n) {
    (void)from;
    const Plan *p = r->p;
    CkptEntry *e = calloc(p->nshards ? p->nshards : 1, sizeof *e);
    int *buf = calloc(p->nshards ? p->nshards : 1, sizeof *buf);
    int ne = 0, rc = 0;
    int64_t why = 0; /* 1: the checkpoint does not load, 2: something else failed */
    if (!e || !buf) rc = rt_fail(err, n, "out of memory");
    for (uint32_t s = 0; s < p->nshards && !rc; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (!ckpt_class(t->cls)) continue;
        void *d = malloc(sh->bytes ? sh->bytes : 1);
        if (!d) { rc = rt_fail(err, n, "out of memory"); break; }
        e[ne] = (CkptEntry){t->name, t->dtype, sh->bytes, d};
        buf[ne++] = sh->buffer;
    }
    if (rc) why = 2;
    else if ((rc = ckpt_read_shard(dir, step, r->c->rank, r->c->size, rt_plan_hash(r), e, ne, err, n))) why = 1;
    for (int i = 0; i < ne && !rc; i++)
        if ((rc = rt_home_write(r, buf[i], 0, e[i].data, e[i].bytes, err, n))) why = 2;
    for (int i = 0; i < ne; i++) free(e[i].data);
    free(e);
    free(buf);
    if (!rc) {
        char *st = ckpt_read_state(dir, step, err, n);
        if (!st) {
            rc = -1;
            why = 1;
        } else {
            const char *q = strstr(st, "\"step\":");
            const char *ls = strstr(st, "\"loss_scale\":");
            const char *gs = strstr(st, "\"good_steps\":");
            r->step = q ? atoll(q + 7) : step;
            if (ls) r->loss_scale = atof(ls + 13);
            if (gs) r->good_steps = atoi(gs + 13);
            free(st);
        }
    }
    if (mine) *mine = rc != 0;
    int64_t all = why;
    if (comm_allreduce_max_i64(r->c, &all)) {
        if (mine) *mine = true;
        rt_fail(err, n, "%s", comm_last_error(r->c));
        return RT_LOAD_FAILED;
    }
    if (all && !rc)
        rt_fail(err, n, "another rank %s step %" PRId64, all == 1 ? "found a defect in its shard of" : "failed loading", step);
    return all == 0 ? 0 : all == 1 ? RT_LOAD_DEFECT : RT_LOAD_FAILED;
}
