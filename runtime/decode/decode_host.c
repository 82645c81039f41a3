/* decode_host: the host step back end of the KV-cache decoder
 * (decode_impl.h): every view in rank 0's memory, the ops through the host
 * kernels, attention over f32 caches with its sums in double. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "decode_impl.h"
#include "hostk.h"

typedef struct KvHost {
    void **buf;                /* per tensor: its view's values, NULL when none */
    float **kc, **vc;          /* per op: an attention op's key and value cache [rows, kv_dim], else NULL */
    int64_t *rows;             /* per op: its cache's rows, T, or W for a sliding window of W < T: a ring,
                                * position j in row j % W (the window never reads further back) */
    double *scores;            /* [T] scratch of the attention step */
    void *ws;
    size_t ws_bytes;
} KvHost;

static KvHost *H_(const KvDecoder *d) { return d->state; }

/* Tensor t as the decode sees it: its one row (DK_T, DK_BT) or whole. */
static HkTensor view(const KvDecoder *d, int t) {
    if (t < 0) return (HkTensor){0};
    int64_t dims[PLAN_MAX_RANK];
    kvdec_view_dims(d, t, dims);
    const PlanTensor *pt = &d->p->tensors[t];
    return hk_tensor(H_(d)->buf[t], (DType)pt->dtype, pt->rank, dims);
}

static void views(const KvDecoder *d, const PlanOp *op, HkTensor *in, HkTensor *out) {
    for (int i = 0; i < op->nin; i++) in[i] = view(d, op->in[i]);
    for (int j = 0; j < op->nout; j++) out[j] = view(d, op->out[j]);
}

/* Attention at position pos: this row's keys and values into the cache,
 * then softmax(q K^T / sqrt(hd)) V over positions lo..pos, per head (a query
 * head reads kv head h / (H / KV)); lo is 0, or pos - window + 1 with the
 * op's sliding window (the training kernels' rule), whose cache is a ring of
 * the window's rows. Sums in double. */
static int attend(KvDecoder *d, int o, char *err, size_t n) {
    KvHost *h_ = H_(d);
    const PlanOp *op = &d->p->ops[o];
    HkTensor q = view(d, op->in[0]), k = view(d, op->in[1]), v = view(d, op->in[2]), y = view(d, op->out[0]);
    int64_t H = op->iattr[IA_ATTENTION_HEADS], KV = op->iattr[IA_ATTENTION_KV_HEADS] ? op->iattr[IA_ATTENTION_KV_HEADS] : H;
    int64_t qd = q.dims[q.rank - 1], kd = k.dims[k.rank - 1];
    if (H < 1 || KV < 1 || H % KV || qd % H || kd != (qd / H) * KV || v.dims[v.rank - 1] != kd)
        return errorf(err, n, "op %d: attention of q %" PRId64 ", k %" PRId64 " with %" PRId64 " heads, %" PRId64 " kv heads", o, qd, kd, H, KV);
    int64_t hd = qd / H, pos = d->pos, W = op->iattr[IA_ATTENTION_WINDOW], lo = W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0;
    int64_t R = h_->rows[o];
    float *K = h_->kc[o] + pos % R * kd, *V = h_->vc[o] + pos % R * kd;
    for (int64_t i = 0; i < kd; i++) {
        K[i] = hk_get(&k, i);
        V[i] = hk_get(&v, i);
    }
    double scale = op->fattr[FA_ATTENTION_SCALE] > 0 ? op->fattr[FA_ATTENTION_SCALE] : 1.0 / sqrt((double)hd), *sc = h_->scores;
    double cap = op->fattr[FA_ATTENTION_SOFTCAP]; /* > 0: soft-capped scores */
    for (int64_t h = 0; h < H; h++) {
        int64_t g = h / (H / KV);
        double m = -INFINITY;
        for (int64_t j = lo; j <= pos; j++) {
            const float *kj = h_->kc[o] + j % R * kd + g * hd;
            double s = 0;
            for (int64_t e = 0; e < hd; e++) s += (double)hk_get(&q, h * hd + e) * kj[e];
            sc[j] = cap > 0 ? cap * tanh(s * scale / cap) : s * scale;
            if (sc[j] > m) m = sc[j];
        }
        double sum = 0;
        for (int64_t j = lo; j <= pos; j++) sum += sc[j] = exp(sc[j] - m);
        for (int64_t e = 0; e < hd; e++) {
            double acc = 0;
            for (int64_t j = lo; j <= pos; j++) acc += sc[j] * h_->vc[o][j % R * kd + g * hd + e];
            hk_set(&y, h * hd + e, (float)(acc / sum));
        }
    }
    return 0;
}

/* ---- the families' steps ---- */

/* An op of the step, through the host kernels: what a position-wise op
 * does to one row, and what an op of constants does once, whole. */
static int host_rows(KvDecoder *d, int o, char *err, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    HkTensor in[PLAN_MAX_IN], out[PLAN_MAX_OUT];
    views(d, op, in, out);
    int rc = hk_run_fwd((PrimId)op->prim, in, op->nin, out, op->nout, op->iattr, op->fattr, H_(d)->ws, H_(d)->ws_bytes);
    return rc ? errorf(err, n, "op %d (%s) at position %" PRId64 ": %s", o, kvdec_prim_str(op->prim), d->pos, hk_strerror(rc)) : 0;
}

/* rope of a row: turned by the step's position. */
static int host_rope_row(KvDecoder *d, int o, char *err, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    if (d->kind[op->out[0]] != DK_BT) return host_rows(d, o, err, n);
    HkTensor x = view(d, op->in[0]), y = view(d, op->out[0]);
    HkRope r = hk_rope_attrs(op->iattr, op->fattr, op->table, op->ntable);
    int rc = hk_rope_fwd_seq(&x, &y, &r, d->pos, d->rope_seq > d->pos + 1 ? d->rope_seq : d->pos + 1);
    return rc ? errorf(err, n, "op %d (%s) at position %" PRId64 ": %s", o, kvdec_prim_str(op->prim), d->pos, hk_strerror(rc)) : 0;
}

static int host_attention_row(KvDecoder *d, int o, char *err, size_t n) {
    return d->kind[d->p->ops[o].out[0]] == DK_BT ? attend(d, o, err, n) : host_rows(d, o, err, n);
}

/* arange(T)'s one value: the position. */
static int host_arange_row(KvDecoder *d, int o, char *err, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    if (d->kind[op->out[0]] != DK_T) return host_rows(d, o, err, n);
    ((int32_t *)H_(d)->buf[op->out[0]])[0] = (int32_t)d->pos;
    return 0;
}

/* A family's step on the host (runtime/plan/prim.def's family column):
 * host_<family> below; a family without one does not compile. */
typedef struct HostFamily {
    int (*run)(KvDecoder *d, int o, char *err, size_t n); /* NULL: the analysis refuses the family */
    bool cache;                                           /* an op of the step keeps a key and value cache */
} HostFamily;

static const HostFamily host_embedding = {host_rows, false}, host_linear = {host_rows, false},
                        host_matmul = {host_rows, false}, host_binary = {host_rows, false}, host_norm = {host_rows, false},
                        host_act = {host_rows, false}, host_rope = {host_rope_row, false},
                        host_attention = {host_attention_row, true}, host_split = {host_rows, false},
                        host_scale = {host_rows, false}, host_arange = {host_arange_row, false},
                        host_xent = {NULL, false}, host_linxent = {NULL, false}, host_moe = {host_rows, false},
                        host_gmlp = {host_rows, false};

static const HostFamily *const host_families[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = &host_##family,
#include "prim.def"
#undef PRIM
};

static int host_run_op(KvDecoder *d, int o, char *err, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    const HostFamily *f = (unsigned)op->prim < PRIM_COUNT ? host_families[op->prim] : NULL;
    if (!f || !f->run) return errorf(err, n, "op %d (%s) has no decode rule", o, kvdec_prim_str(op->prim));
    return f->run(d, o, err, n);
}

/* Rank 0 keeps the parameters whole in its memory: refused above half of
 * the machine's. */
static int host_open(KvDecoder *d, char *why, size_t n) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t half = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : UINT64_MAX;
    uint64_t pb = kvdec_param_bytes(d->p);
    if (pb > half) {
        char b1[32], b2[32];
        return REFUSE(why, n, "the parameters (%s) are more than half of this machine's memory (%s): the decode keeps them whole on rank 0",
                      plan_bytes_str(pb, b1, sizeof b1), plan_bytes_str(2 * half, b2, sizeof b2));
    }
    if (!(d->state = calloc(1, sizeof(KvHost)))) return errorf(why, n, "out of memory");
    return 0;
}

/* Rank 0's buffers, workspace and caches. */
static int host_allocate(KvDecoder *d, char *err, size_t n) {
    const Plan *p = d->p;
    KvHost *h = H_(d);
    h->buf = calloc(p->ntensors ? p->ntensors : 1, sizeof *h->buf);
    h->kc = calloc(p->nops ? p->nops : 1, sizeof *h->kc);
    h->vc = calloc(p->nops ? p->nops : 1, sizeof *h->vc);
    h->rows = calloc(p->nops ? p->nops : 1, sizeof *h->rows);
    if (!h->buf || !h->kc || !h->vc || !h->rows) return errorf(err, n, "out of memory");
    for (uint32_t t = 0; t < p->ntensors; t++) {
        if (d->kind[t] < DK_CONST) continue;
        uint64_t b = kvdec_view_bytes(d, (int)t);
        if (!(h->buf[t] = calloc(1, b ? b : 1))) return errorf(err, n, "out of memory for '%s'", p->tensors[t].name);
        d->bytes += b;
    }
    size_t ws = 0;
    for (int i = 0; i < d->nops; i++) {
        const PlanOp *op = &p->ops[d->ops[i]];
        HkTensor in[PLAN_MAX_IN], out[PLAN_MAX_OUT];
        views(d, op, in, out);
        if (host_families[op->prim]->cache && d->kind[op->out[0]] == DK_BT) {
            int64_t kd = kvdec_last_dim(d, op->in[1]), W = op->iattr[IA_ATTENTION_WINDOW];
            int64_t rows = h->rows[d->ops[i]] = W > 0 && W < d->T ? W : d->T;
            h->kc[d->ops[i]] = calloc((size_t)(rows * kd), sizeof(float));
            h->vc[d->ops[i]] = calloc((size_t)(rows * kd), sizeof(float));
            if (!h->kc[d->ops[i]] || !h->vc[d->ops[i]]) return errorf(err, n, "out of memory for the KV cache");
            d->bytes += 2 * sizeof(float) * (uint64_t)(rows * kd);
            continue;
        }
        size_t w = hk_workspace_bytes((PrimId)op->prim, in, op->nin, out, op->nout, op->iattr);
        if (w > ws) ws = w;
    }
    h->scores = malloc(sizeof *h->scores * (size_t)d->T);
    h->ws_bytes = ws;
    h->ws = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
    if (!h->scores || (ws && !h->ws)) return errorf(err, n, "out of memory for %zu bytes of workspace", ws);
    d->bytes += ws + sizeof *h->scores * (size_t)d->T;
    return 0;
}

/* The gather writes the parameter where the steps read it. */
static void *host_param_dst(KvDecoder *d, int t) { return H_(d)->buf[t]; }
static int host_param_put(KvDecoder *d, int t, char *err, size_t n) {
    (void)d, (void)t, (void)err, (void)n;
    return 0;
}

static int host_set_token(KvDecoder *d, int32_t token, char *err, size_t n) {
    (void)err, (void)n;
    ((int32_t *)H_(d)->buf[d->tokens])[0] = token;
    return 0;
}

static int host_logits(KvDecoder *d, float *logits, char *err, size_t n) {
    (void)err, (void)n;
    HkTensor lg = view(d, d->logits);
    for (int64_t v = 0, V = hk_numel(&lg); v < V; v++) logits[v] = hk_get(&lg, v);
    return 0;
}

static void host_close(KvDecoder *d) {
    KvHost *h = H_(d);
    for (uint32_t t = 0; h->buf && t < d->p->ntensors; t++) free(h->buf[t]);
    for (uint32_t o = 0; h->kc && o < d->p->nops; o++) free(h->kc[o]);
    for (uint32_t o = 0; h->vc && o < d->p->nops; o++) free(h->vc[o]);
    free(h->buf);
    free(h->kc);
    free(h->vc);
    free(h->rows);
    free(h->scores);
    free(h->ws);
    free(h);
    d->state = NULL;
}

const KvBackend kvdec_host = {
    .check = NULL,
    .open = host_open,
    .allocate = host_allocate,
    .param_dst = host_param_dst,
    .param_put = host_param_put,
    .run_op = host_run_op,
    .set_token = host_set_token,
    .logits = host_logits,
    .close = host_close,
};
