/* exec_comm: the collectives of the instruction stream (ALLGATHER,
 * REDUCE_SCATTER, ALLREDUCE) through runtime/comm, over a tile with its
 * padding, and the communicator's errors in the executor's form. */
#include "exec_impl.h"
#include <string.h>

/* ---- collectives over a tile, with padding ---- */

static int to_f32(float *dst, const void *src, int dt, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (float)rt_elem_get(src, dt, i);
    return 0;
}

int rt_comm_err(Rt *r, char *err, size_t n) { return errorf(err, n, "%s", comm_last_error(r->c)); }

/* A collective's waiting for its peers is noted as the instruction's
 * waiting, so the queue's busy time is its transfers (runtime/comm_wait). */
int rt_comm_done(Rt *r, int worker, CommStatus s, const CommWait *w, char *err, size_t n) {
    qrun_add_wait(&r->q, worker, w->wait_s);
    return s ? rt_comm_err(r, err, n) : 0;
}

int rt_allgather(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
    uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
    if (!sp || !dp) return errorf(err, n, "allgather operands must be in memory");
    uint64_t sb = s->bytes, tb = d->bytes, R = (uint64_t)r->c->size;
    CommWait w;
    if (sb * R == tb) return rt_comm_done(r, worker, commw_allgather(r->c, sp, dp, sb, &w), &w, err, n);
    /* The last rank's slice is padded: gather into scratch, keep the tile's bytes. */
    if (sb * R > r->scratch_bytes) return errorf(err, n, "allgather scratch too small");
    if (rt_comm_done(r, worker, commw_allgather(r->c, sp, r->scratch[worker], sb, &w), &w, err, n)) return -1;
    memcpy(dp, r->scratch[worker], tb);
    return 0;
}

int rt_reduce_scatter(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const PlanOperand *s = rt_opnd(r, in, 0), *d = rt_opnd(r, in, 1);
    uint8_t *sp = rt_opnd_ptr(r, s), *dp = rt_opnd_ptr(r, d);
    if (!sp || !dp) return errorf(err, n, "reduce_scatter operands must be in memory");
    int dt = r->p->tensors[in->arg].dtype;
    size_t es = rt_dsz(dt);
    int64_t te = (int64_t)(s->bytes / es), se = (int64_t)(d->bytes / es), R = r->c->size;
    size_t need = sizeof(float) * (size_t)(se * R + se);
    if (need > r->scratch_bytes) return errorf(err, n, "reduce_scatter scratch too small");
    float *send = (float *)r->scratch[worker], *recv = send + se * R;
    memset(send, 0, sizeof(float) * (size_t)(se * R));
    to_f32(send, sp, dt, te < se * R ? te : se * R);
    CommWait w;
    if (rt_comm_done(r, worker, commw_reduce_scatter_f32(r->c, send, recv, (size_t)se, &w), &w, err, n)) return -1;
    for (int64_t i = 0; i < se; i++) rt_elem_set(dp, dt, i, rt_elem_get(dp, dt, i) + recv[i]);
    return 0;
}

int rt_allreduce(Rt *r, const PlanInstr *in, int worker, char *err, size_t n) {
    const PlanOperand *m = rt_opnd(r, in, 0);
    uint8_t *mp = rt_opnd_ptr(r, m);
    if (!mp) return errorf(err, n, "allreduce operand must be in memory");
    int dt = r->p->tensors[in->arg].dtype;
    int64_t ne = (int64_t)(m->bytes / rt_dsz(dt));
    CommWait w;
    if (dt == DT_F32) return rt_comm_done(r, worker, commw_allreduce_sum_f32(r->c, (float *)mp, (size_t)ne, &w), &w, err, n);
    if ((size_t)ne * sizeof(float) > r->scratch_bytes) return errorf(err, n, "allreduce scratch too small");
    float *f = (float *)r->scratch[worker];
    to_f32(f, mp, dt, ne);
    if (rt_comm_done(r, worker, commw_allreduce_sum_f32(r->c, f, (size_t)ne, &w), &w, err, n)) return -1;
    for (int64_t i = 0; i < ne; i++) rt_elem_set(mp, dt, i, f[i]);
    return 0;
}
