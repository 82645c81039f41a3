/* exec_ckpt: the executor's checkpoints: rt_checkpoint_save and
 * rt_checkpoint_load (runtime/exec/exec.c) come here with the plan's rule of
 * which tensor classes a checkpoint holds. The files themselves are
 * runtime/store/ckpt.c's. */
#include "exec_impl.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt.h"

/* The checkpoint files name the plan by this hash (exec.h). */
uint64_t rt_plan_hash(const Rt *r) {
    const Plan *p = r->p;
    uint64_t h = 14695981039346656037ull;
#define MIX(v)                                       \
    do {                                             \
        uint64_t x_ = (uint64_t)(v);                 \
        h = (h ^ x_) * 1099511628211ull;             \
    } while (0)
    MIX(p->ranks);
    for (uint32_t s = 0; s < p->nshards; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        h ^= plan_fnv1a64(t->name, strlen(t->name));
        MIX(t->dtype);
        MIX(sh->ntiles);
        MIX(sh->tile_shard);
        MIX(sh->partitioned);
    }
#undef MIX
    return h;
}

/* The plan's checkpointed tensors as the manifest describes them, in the
 * order of the shard files' entries (names point into the plan; free l->t). */
static int plan_layout(const Rt *r, RtCkptClass keep, CkptLayout *l) {
    const Plan *p = r->p;
    memset(l, 0, sizeof *l);
    l->micro_batch = p->train.micro_batch;
    l->grad_accum = p->train.grad_accum > 0 ? p->train.grad_accum : 1;
    l->train_dtype = (uint8_t)p->train.dtype;
    l->t = calloc(p->nshards + 1, sizeof *l->t);
    if (!l->t) return -1;
    for (uint32_t s = 0; s < p->nshards; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (!keep(t->cls)) continue;
        CkptTensorLayout *c = &l->t[l->n++];
        *c = (CkptTensorLayout){.name = t->name, .dtype = (uint8_t)t->dtype, .cls = (uint8_t)t->cls, .rank = t->rank,
                                .s = {t->numel, sh->ntiles, sh->tile_elems, sh->tile_shard, sh->partitioned}};
        for (int d = 0; d < t->rank && d < 6; d++) c->dims[d] = t->dims[d];
    }
    return 0;
}

int rt_ckpt_save(Rt *r, const char *dir, const char *state_json, RtCkptClass ckpt_class, char *err, size_t n) {
    const Plan *p = r->p;
    CkptEntry *e = calloc(p->nshards ? p->nshards : 1, sizeof *e);
    int ne = 0, rc = 0;
    if (!e) rc = errorf(err, n, "out of memory");
    uint64_t total = 0, done = 0; /* the shards' bytes gathered from their homes (NVMe reads, device copies) */
    for (uint32_t s = 0; s < p->nshards; s++) total += ckpt_class(p->tensors[p->shards[s].tensor].cls) ? p->shards[s].bytes : 0;
    for (uint32_t s = 0; s < p->nshards && !rc; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (!ckpt_class(t->cls)) continue;
        void *d = malloc(sh->bytes ? sh->bytes : 1);
        if (!d) { rc = errorf(err, n, "out of memory"); break; }
        e[ne] = (CkptEntry){t->name, t->dtype, sh->bytes, d};
        ne++;
        rc = rt_home_read(r, sh->buffer, 0, d, sh->bytes, err, n);
        done += sh->bytes;
        if (!rc && total) progress_report(r->o.progress, "gathering the checkpoint", "B", done, total);
    }
    uint64_t h = rt_plan_hash(r);
    int64_t next = r->step;
    if (!rc) rc = ckpt_write_shard(dir, next, r->c->rank, r->c->size, h, e, ne, r->o.progress, err, n);
    for (int i = 0; i < ne; i++) free(e[i].data);
    free(e);
    if (comm_agree(r->c, rc)) return rc ? rc : errorf(err, n, "another rank failed to write its checkpoint shard");
    rc = 0;
    if (r->c->rank == 0) {
        char st[1024];
        snprintf(st, sizeof st, "{\"step\": %lld, \"loss_scale\": %.17g, \"good_steps\": %d, \"run\": %s}",
                 (long long)r->step, r->loss_scale, r->good_steps, state_json && *state_json ? state_json : "{}");
        CkptLayout l;
        rc = plan_layout(r, ckpt_class, &l) ? errorf(err, n, "out of memory") : 0;
        if (!rc) rc = ckpt_write_manifest(dir, next, r->c->size, h, p->model_name, st, &l, err, n);
        free(l.t);
        if (!rc) rc = ckpt_prune(dir, r->c->size, h, next, 2, err, n);
    }
    if (comm_agree(r->c, rc)) return rc ? rc : errorf(err, n, "rank 0 failed to write the checkpoint manifest");
    return 0;
}

/* This plan's own checkpoint: this rank's shard file, whole. *why: 1 the
 * checkpoint does not read back, 2 something else failed. */
static int load_own(Rt *r, const char *dir, int64_t step, RtCkptClass ckpt_class, int64_t *whyp, char *err, size_t n) {
    const Plan *p = r->p;
    CkptEntry *e = calloc(p->nshards ? p->nshards : 1, sizeof *e);
    int *buf = calloc(p->nshards ? p->nshards : 1, sizeof *buf);
    int ne = 0, rc = 0;
    int64_t why = 0; /* 1: the checkpoint does not load, 2: something else failed */
    if (!e || !buf) rc = errorf(err, n, "out of memory");
    for (uint32_t s = 0; s < p->nshards && !rc; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (!ckpt_class(t->cls)) continue;
        void *d = malloc(sh->bytes ? sh->bytes : 1);
        if (!d) { rc = errorf(err, n, "out of memory"); break; }
        e[ne] = (CkptEntry){t->name, t->dtype, sh->bytes, d};
        buf[ne++] = sh->buffer;
    }
    if (rc) why = 2;
    else if ((rc = ckpt_read_shard(dir, step, r->c->rank, r->c->size, rt_plan_hash(r), e, ne, r->o.progress, err, n))) why = 1;
    for (int i = 0; i < ne && !rc; i++)
        if ((rc = rt_home_write(r, buf[i], 0, e[i].data, e[i].bytes, err, n))) why = 2;
    for (int i = 0; i < ne; i++) free(e[i].data);
    free(e);
    free(buf);
    *whyp = why;
    return rc;
}

static void shape_str(const CkptTensorLayout *t, char *buf, size_t n) {
    size_t u = 0;
    buf[0] = 0;
    for (int d = 0; d < t->rank && u + 1 < n; d++) {
        int w = snprintf(buf + u, n - u, "%s%" PRId64, d ? ", " : "[", t->dims[d]);
        if (w > 0) u = (size_t)w < n - u ? u + (size_t)w : n - 1;
    }
    if (u + 2 < n) snprintf(buf + u, n - u, "%s %s", t->rank ? "]" : "[]", dtype_name((DType)t->dtype));
}

static const CkptTensorLayout *find_tensor(const CkptLayout *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->t[i].name, name)) return &l->t[i];
    return NULL;
}

/* The parameter an optimizer-state tensor belongs to, by autodiff's names
 * ("m.wte", "v.wte", "master.wte"); NULL for any other tensor. */
static const char *state_param(const CkptTensorLayout *t) {
    const char *pre = t->cls == TC_MOMENTUM ? "m." : t->cls == TC_VARIANCE ? "v." : t->cls == TC_MASTER ? "master." : NULL;
    return pre && !strncmp(t->name, pre, strlen(pre)) ? t->name + strlen(pre) : NULL;
}

/* Optimizer state one layout has and the other lacks while both hold its
 * parameter: the parameter trains in one and is frozen in the other. */
static int trained_set_difference(const CkptTensorLayout *state, const CkptLayout *other, bool in_plan, char *why, size_t n) {
    const char *pname = state_param(state);
    const CkptTensorLayout *pt = pname ? find_tensor(other, pname) : NULL;
    if (!pt || pt->cls != TC_PARAM) return 0;
    return errorf(why, n,
                  "parameter '%s' %s: a resume continues one run's optimizer, so the trained parameters must be the same; "
                  "to start from these weights, write them with the checkpoint's plan (zinfrun --resume --steps 0 --export W.safetensors) "
                  "and begin a new run with --init W.safetensors",
                  pname, in_plan ? "is frozen in the checkpoint and trains in this plan" : "trains in the checkpoint and is frozen in this plan");
}

/* The first checkpointed tensor in which two layouts differ (a missing or
 * extra tensor, a class, dtype or shape), into why; 0 when none does, 1
 * when it is another model, 2 when only the trained parameters differ. */
static int first_tensor_difference(const CkptLayout *mine, const CkptLayout *ck, char *why, size_t n) {
    char a[128], b[128];
    for (int i = 0; i < mine->n; i++) {
        const CkptTensorLayout *t = &mine->t[i], *c = find_tensor(ck, t->name);
        if (!c && trained_set_difference(t, ck, true, why, n)) return 2;
        if (!c) return errorf(why, n, "tensor '%s' of this plan is not in the checkpoint", t->name);
        shape_str(c, a, sizeof a);
        shape_str(t, b, sizeof b);
        bool same = c->cls == t->cls && c->rank == t->rank && c->dtype == t->dtype && c->s.numel == t->s.numel;
        for (int d = 0; same && d < t->rank; d++) same = c->dims[d] == t->dims[d];
        if (!same)
            return errorf(why, n, "tensor '%s' is %s %s in the checkpoint, %s %s in this plan", t->name,
                          c->cls < TC_COUNT ? tensor_class_names[c->cls] : "?", a, tensor_class_names[t->cls], b);
    }
    for (int i = 0; i < ck->n; i++) {
        if (find_tensor(mine, ck->t[i].name)) continue;
        if (trained_set_difference(&ck->t[i], mine, false, why, n)) return 2;
        return errorf(why, n, "the checkpoint holds tensor '%s', which this plan does not have", ck->t[i].name);
    }
    return 0;
}

static bool has_class(const CkptLayout *l, int cls) {
    for (int i = 0; i < l->n; i++)
        if (l->t[i].cls == cls) return true;
    return false;
}

/* Whether this plan can read checkpoint m by global element ranges: the
 * same model, training dtype, optimizer state and tensors. */
static int same_model(const Rt *r, const CkptLayout *mine, const CkptManifest *m, char *why, size_t n) {
    const Plan *p = r->p;
    char tw[1024] = "";
    int td = first_tensor_difference(mine, &m->layout, tw, sizeof tw);
    if (strcmp(m->model, p->model_name ? p->model_name : ""))
        return errorf(why, n, "another model: '%s', this plan's is '%s'%s%s", m->model, p->model_name ? p->model_name : "",
                      td ? "; first difference: " : "", td ? tw : "");
    if (m->layout.train_dtype != p->train.dtype)
        return errorf(why, n, "trained in %s, this plan trains in %s", dtype_name((DType)m->layout.train_dtype),
                      dtype_name((DType)p->train.dtype));
    if (has_class(mine, TC_MOMENTUM) != has_class(&m->layout, TC_MOMENTUM))
        return errorf(why, n, "%s", has_class(mine, TC_MOMENTUM) ? "the checkpoint holds no Adam state, this plan's optimizer needs it"
                                                                : "the checkpoint holds Adam state, this plan has none");
    if (td == 2) return errorf(why, n, "%s", tw);
    if (td) return errorf(why, n, "another model: %s", tw);
    return 0;
}

int rt_ckpt_check(Rt *r, const char *dir, int64_t step, RtCkptClass keep, char *why, size_t n) {
    CkptManifest m;
    if (ckpt_read_manifest(dir, step, &m, why, n)) return -1;
    int rc = 0;
    CkptLayout mine;
    if (m.world == r->c->size && m.plan_hash == rt_plan_hash(r)) {
        rc = 0;
    } else if (!m.has_layout) {
        rc = 1;
        errorf(why, n, "written by %d rank%s of plan %016" PRIx64 " before checkpoints recorded their layout: only that plan on %d rank%s resumes it",
               m.world, m.world == 1 ? "" : "s", m.plan_hash, m.world, m.world == 1 ? "" : "s");
    } else if (plan_layout(r, keep, &mine)) {
        rc = -1;
        errorf(why, n, "out of memory");
    } else {
        rc = same_model(r, &mine, &m, why, n) ? 1 : 0;
        free(mine.t);
    }
    ckpt_manifest_free(&m);
    return rc;
}

/* Another world's or plan's checkpoint: every slice from the writers'
 * files by global element ranges. *whyp as load_own's. */
static int load_resharded(Rt *r, const char *dir, int64_t step, const CkptManifest *m, const CkptLayout *mine, int64_t *whyp,
                          char *err, size_t n) {
    const Plan *p = r->p;
    CkptReader rd;
    *whyp = 2;
    if (ckpt_reader_open(&rd, dir, step, m, (size_t)64 << 20, err, n)) return -1;
    int rc = 0;
    uint64_t total = 0, done = 0; /* this rank's bytes of the checkpointed shards */
    for (uint32_t s = 0, k = 0; s < p->nshards; s++)
        if (k < (uint32_t)mine->n && !strcmp(mine->t[k].name, p->tensors[p->shards[s].tensor].name)) total += p->shards[s].bytes, k++;
    for (uint32_t s = 0, k = 0; s < p->nshards && !rc; s++) {
        const PlanShard *sh = &p->shards[s];
        const PlanTensor *t = &p->tensors[sh->tensor];
        if (k >= (uint32_t)mine->n || strcmp(mine->t[k].name, t->name)) continue; /* not checkpointed */
        const CkptTensorLayout *c = find_tensor(&m->layout, t->name);
        k++;
        if (!c) { rc = errorf(err, n, "tensor '%s' is not in the checkpoint", t->name); break; } /* same_model said it was */
        void *d = malloc(sh->bytes ? sh->bytes : 1);
        if (!d) { rc = errorf(err, n, "out of memory"); break; }
        rc = ckpt_reader_read(&rd, (int)(c - m->layout.t), &mine->t[k - 1].s, r->c->rank, d, err, n);
        if (rc == -1) *whyp = 1;
        if (!rc) rc = rt_home_write(r, sh->buffer, 0, d, sh->bytes, err, n);
        free(d);
        done += sh->bytes;
        if (!rc && total) progress_report(r->o.progress, "resharding the checkpoint", "B", done, total);
    }
    ckpt_reader_close(&rd);
    if (!rc) *whyp = 0;
    return rc ? -1 : 0;
}

/* The training state of the manifest: step, loss scale. */
static int load_state(Rt *r, const char *dir, int64_t step, char *err, size_t n) {
    char *st = ckpt_read_state(dir, step, err, n);
    if (!st) return -1;
    const char *q = strstr(st, "\"step\":");
    const char *ls = strstr(st, "\"loss_scale\":");
    const char *gs = strstr(st, "\"good_steps\":");
    r->step = q ? atoll(q + 7) : step;
    if (ls) r->loss_scale = atof(ls + 13);
    if (gs) r->good_steps = atoi(gs + 13);
    free(st);
    return 0;
}

int rt_ckpt_load(Rt *r, const char *dir, int64_t step, RtCkptClass keep, bool *mine, RtCkptOrigin *from, char *err,
                 size_t n) {
    CkptManifest m;
    CkptLayout lay = {0};
    int64_t why = 0; /* 1: the checkpoint does not load, 2: something else failed, 3: not this model's */
    int rc = ckpt_read_manifest(dir, step, &m, err, n);
    bool own = !rc && m.world == r->c->size && m.plan_hash == rt_plan_hash(r);
    if (rc) {
        why = 1;
    } else if (own) {
        rc = load_own(r, dir, step, keep, &why, err, n);
    } else if ((rc = rt_ckpt_check(r, dir, step, keep, err, n))) {
        why = rc > 0 ? 3 : 2;
    } else if ((rc = plan_layout(r, keep, &lay))) {
        why = 2;
        errorf(err, n, "out of memory");
    } else {
        rc = load_resharded(r, dir, step, &m, &lay, &why, err, n);
    }
    if (!rc && (rc = load_state(r, dir, step, err, n))) why = 1;
    if (!rc && from)
        *from = (RtCkptOrigin){.resharded = !own, .world = m.world, .plan_hash = m.plan_hash,
                               .micro_batch = m.has_layout ? m.layout.micro_batch : 0,
                               .grad_accum = m.has_layout ? m.layout.grad_accum : 0};
    free(lay.t);
    ckpt_manifest_free(&m);
    if (mine) *mine = rc != 0;
    int64_t all = why;
    if (comm_allreduce_max_i64(r->c, &all)) {
        if (mine) *mine = true;
        errorf(err, n, "%s", comm_last_error(r->c));
        return RT_LOAD_FAILED;
    }
    if (all && !rc)
        errorf(err, n, "another rank %s step %" PRId64, all == 1 ? "found a defect in its shard of" : "failed loading", step);
    return all == 0 ? 0 : all == 1 ? RT_LOAD_DEFECT : all == 3 ? RT_LOAD_REFUSED : RT_LOAD_FAILED;
}
