/* decode: the KV-cache decoder over a plan's forward ops (decode.h says
 * what it does and refuses). */
#include "decode.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "errorf.h"
#include "hfio.h"
#include "hostk.h"
#include "vocab.h"

/* What a tensor is in a decode step. DK_ABSENT: not there (the targets, and
 * what only they reach); DK_CONST: parameters and what only they reach,
 * whole; DK_T: [T, ...] (what arange(T) reaches), one row; DK_BT: [B, T,
 * ...] (what the token ids reach), one row. Larger wins when an op mixes. */
typedef enum DecKind { DK_UNSEEN, DK_ABSENT, DK_CONST, DK_T, DK_BT } DecKind;

struct KvDecoder {
    const Plan *p;
    int64_t B, T, pos;
    uint8_t *kind;             /* per tensor: DecKind */
    void **buf;                /* per tensor: its decode values (rank 0), NULL when none */
    int32_t *ops;              /* the forward ops a step runs, in plan order */
    int nops;
    float **kc, **vc;          /* per op: an attention op's key and value cache [T, kv_dim], else NULL */
    double *scores;            /* [T] scratch of the attention step */
    void *ws;
    size_t ws_bytes;
    int32_t tokens, logits;
    uint64_t bytes;
};

/* A refusal (the plan cannot be decoded this way): the reason into why, as
 * errorf words it, and 1 instead of errorf's -1. */
#define REFUSE(...) (errorf(__VA_ARGS__), 1)

static const char *prim_str(int prim) { return prim < PRIM_COUNT ? prim_names[prim] : "?"; }

/* The loss op: the forward whose output is the plan's loss. */
static int loss_op(const Plan *p) {
    for (uint32_t o = 0; o < p->nops; o++)
        if (p->ops[o].kind == OP_FWD && p->ops[o].nout > 0 && p->ops[o].out[0] == p->loss) return (int)o;
    return -1;
}

/* Whether tensor t's leading dims are those its kind says. */
static bool leading_ok(const PlanTensor *t, DecKind k, int64_t B, int64_t T) {
    if (k == DK_BT) return t->rank >= 2 && t->dims[0] == B && t->dims[1] == T;
    if (k == DK_T) return t->rank >= 1 && t->dims[0] == T;
    return true;
}

static bool position_wise(int prim) {
    switch (prim) {
    case PRIM_EMBEDDING: case PRIM_LINEAR: case PRIM_MATMUL: case PRIM_ADD: case PRIM_MUL: case PRIM_LAYERNORM:
    case PRIM_RMSNORM: case PRIM_GELU: case PRIM_SILU: case PRIM_SPLIT: case PRIM_SCALE: case PRIM_ROPE: case PRIM_ATTENTION:
    case PRIM_ARANGE:
        return true;
    default:
        return false;
    }
}

/* Classifies every tensor and picks the ops of a step; 1 and why when the
 * plan's forward cannot be decoded a position at a time. */
static int analyse(KvDecoder *d, char *why, size_t n) {
    const Plan *p = d->p;
    int lo = loss_op(p);
    if (lo < 0) return REFUSE(why, n, "the plan has no forward op that makes its loss");
    const PlanOp *L = &p->ops[lo];
    if (L->prim != PRIM_CROSS_ENTROPY || L->nin < 1 || L->in[0] < 0)
        return REFUSE(why, n, "the loss is made by %s, not cross_entropy of logits", prim_str(L->prim));
    d->tokens = p->inputs[0];
    d->logits = L->in[0];
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].cls == TC_PARAM) d->kind[t] = DK_CONST;
    for (int i = 0; i < p->ninputs; i++) d->kind[p->inputs[i]] = DK_ABSENT;
    d->kind[d->tokens] = DK_BT;
    for (uint32_t o = 0; o < p->nops; o++) {
        const PlanOp *op = &p->ops[o];
        if (op->kind != OP_FWD || (int)o == lo) continue;
        DecKind k = DK_CONST;
        int act = 0; /* inputs that are activations */
        for (int i = 0; i < op->nin; i++) {
            int t = op->in[i];
            if (t < 0) continue;
            DecKind ki = (DecKind)d->kind[t];
            if (ki == DK_UNSEEN) return REFUSE(why, n, "op %u (%s) reads '%s' before any op makes it", o, prim_str(op->prim), p->tensors[t].name);
            if (ki == DK_ABSENT)
                return REFUSE(why, n, "op %u (%s) reads '%s', which a decode step does not have (only the loss may read the targets)", o,
                              prim_str(op->prim), p->tensors[t].name);
            if (ki > k) k = ki;
            act += ki >= DK_T;
        }
        if (op->prim == PRIM_ARANGE) {
            k = DK_T;
            if (op->nout != 1 || op->out[0] < 0 || op->iattr[0] != d->T)
                return REFUSE(why, n, "op %u: arange(%" PRId64 ") is not of the window's T = %" PRId64, o, op->iattr[0], d->T);
        }
        if (k >= DK_T) {
            if (!position_wise(op->prim)) return REFUSE(why, n, "op %u (%s) has no decode rule", o, prim_str(op->prim));
            if (op->prim == PRIM_MATMUL && act > 1) return REFUSE(why, n, "op %u: a matmul of two activations looks across positions", o);
            if ((op->prim == PRIM_ATTENTION || op->prim == PRIM_ROPE) && k != DK_BT)
                return REFUSE(why, n, "op %u (%s) on a [T, ...] tensor", o, prim_str(op->prim));
            for (int i = 0; op->prim == PRIM_ATTENTION && i < 3; i++)
                if (d->kind[op->in[i]] != DK_BT) return REFUSE(why, n, "op %u: attention of a parameter", o);
            d->ops[d->nops++] = (int32_t)o;
        }
        for (int j = 0; j < op->nout; j++) {
            int t = op->out[j];
            if (t < 0) continue;
            if (!leading_ok(&p->tensors[t], k, d->B, d->T))
                return REFUSE(why, n, "'%s' (of op %u, %s) does not lead with [%s] = [%" PRId64 "%s%" PRId64 "]", p->tensors[t].name, o,
                              prim_str(op->prim), k == DK_BT ? "B, T" : "T", k == DK_BT ? d->B : d->T, k == DK_BT ? ", " : "",
                              k == DK_BT ? d->T : (int64_t)0);
            d->kind[t] = (uint8_t)k;
        }
        if (k == DK_CONST) d->ops[d->nops++] = (int32_t)o; /* run once, at create */
    }
    if (d->kind[d->logits] != DK_BT) return REFUSE(why, n, "the logits '%s' are not per position", p->tensors[d->logits].name);
    return 0;
}

/* Tensor t as the decode sees it: its one row (DK_T, DK_BT) or whole. */
static HkTensor view(const KvDecoder *d, int t) {
    if (t < 0) return (HkTensor){0};
    const PlanTensor *pt = &d->p->tensors[t];
    int64_t dims[PLAN_MAX_RANK];
    memcpy(dims, pt->dims, sizeof dims);
    if (d->kind[t] == DK_BT) dims[0] = dims[1] = 1;
    if (d->kind[t] == DK_T) dims[0] = 1;
    return hk_tensor(d->buf[t], (DType)pt->dtype, pt->rank, dims);
}

static uint64_t view_bytes(const KvDecoder *d, int t) {
    const PlanTensor *pt = &d->p->tensors[t];
    int64_t rows = d->kind[t] == DK_BT ? d->B * d->T : d->kind[t] == DK_T ? d->T : 1;
    return (uint64_t)(pt->numel / rows) * (uint64_t)plan_dtype_size(pt->dtype);
}

static void views(const KvDecoder *d, const PlanOp *op, HkTensor *in, HkTensor *out) {
    for (int i = 0; i < op->nin; i++) in[i] = view(d, op->in[i]);
    for (int j = 0; j < op->nout; j++) out[j] = view(d, op->out[j]);
}

/* Attention at position pos: this row's keys and values into the cache,
 * then softmax(q K^T / sqrt(hd)) V over positions 0..pos, per head (a query
 * head reads kv head h / (H / KV)). Sums in double. */
static int attend(KvDecoder *d, int o, char *err, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    HkTensor q = view(d, op->in[0]), k = view(d, op->in[1]), v = view(d, op->in[2]), y = view(d, op->out[0]);
    int64_t H = op->iattr[0], KV = op->iattr[1] ? op->iattr[1] : H;
    int64_t qd = q.dims[q.rank - 1], kd = k.dims[k.rank - 1];
    if (H < 1 || KV < 1 || H % KV || qd % H || kd != (qd / H) * KV || v.dims[v.rank - 1] != kd)
        return errorf(err, n, "op %d: attention of q %" PRId64 ", k %" PRId64 " with %" PRId64 " heads, %" PRId64 " kv heads", o, qd, kd, H, KV);
    int64_t hd = qd / H, pos = d->pos;
    float *K = d->kc[o] + pos * kd, *V = d->vc[o] + pos * kd;
    for (int64_t i = 0; i < kd; i++) {
        K[i] = hk_get(&k, i);
        V[i] = hk_get(&v, i);
    }
    double scale = 1.0 / sqrt((double)hd);
    for (int64_t h = 0; h < H; h++) {
        int64_t g = h / (H / KV);
        double m = -INFINITY;
        for (int64_t j = 0; j <= pos; j++) {
            const float *kj = d->kc[o] + j * kd + g * hd;
            double s = 0;
            for (int64_t e = 0; e < hd; e++) s += (double)hk_get(&q, h * hd + e) * kj[e];
            d->scores[j] = s * scale;
            if (d->scores[j] > m) m = d->scores[j];
        }
        double sum = 0;
        for (int64_t j = 0; j <= pos; j++) sum += d->scores[j] = exp(d->scores[j] - m);
        for (int64_t e = 0; e < hd; e++) {
            double acc = 0;
            for (int64_t j = 0; j <= pos; j++) acc += d->scores[j] * d->vc[o][j * kd + g * hd + e];
            hk_set(&y, h * hd + e, (float)(acc / sum));
        }
    }
    return 0;
}

/* Whether only parameters reach op o (its outputs are whole constants). */
static bool op_is_const(const KvDecoder *d, int o) {
    const PlanOp *op = &d->p->ops[o];
    for (int j = 0; j < op->nout; j++)
        if (op->out[j] >= 0) return d->kind[op->out[j]] == DK_CONST;
    return false;
}

/* One op of a step (or, for a DK_CONST op, of create). */
static int run_op(KvDecoder *d, int o, char *err, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    HkTensor in[PLAN_MAX_IN], out[PLAN_MAX_OUT];
    views(d, op, in, out);
    int rc;
    if (op->prim == PRIM_ARANGE && d->kind[op->out[0]] == DK_T) {
        ((int32_t *)d->buf[op->out[0]])[0] = (int32_t)d->pos;
        return 0;
    }
    if (op->prim == PRIM_ATTENTION && d->kind[op->out[0]] == DK_BT) return attend(d, o, err, n);
    if (op->prim == PRIM_ROPE && d->kind[op->out[0]] == DK_BT) {
        HkRope r = hk_rope_attrs(op->iattr, op->fattr);
        rc = hk_rope_fwd_at(&in[0], &out[0], &r, d->pos);
    } else {
        rc = hk_run_fwd((PrimId)op->prim, in, op->nin, out, op->nout, op->iattr, op->fattr, d->ws, d->ws_bytes);
    }
    return rc ? errorf(err, n, "op %d (%s) at position %" PRId64 ": %s", o, prim_str(op->prim), d->pos, hk_strerror(rc)) : 0;
}

/* Rank 0's buffers, workspace and caches; the parameters gathered. */
static int allocate(KvDecoder *d, Rt *r, char *err, size_t n) {
    const Plan *p = d->p;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        if (d->kind[t] < DK_CONST) continue;
        uint64_t b = view_bytes(d, (int)t);
        if (!(d->buf[t] = calloc(1, b ? b : 1))) return errorf(err, n, "out of memory for '%s'", p->tensors[t].name);
        d->bytes += b;
    }
    size_t ws = 0;
    for (int i = 0; i < d->nops; i++) {
        const PlanOp *op = &p->ops[d->ops[i]];
        HkTensor in[PLAN_MAX_IN], out[PLAN_MAX_OUT];
        views(d, op, in, out);
        if (op->prim == PRIM_ATTENTION && d->kind[op->out[0]] == DK_BT) {
            int64_t kd = p->tensors[op->in[1]].dims[p->tensors[op->in[1]].rank - 1];
            d->kc[d->ops[i]] = calloc((size_t)(d->T * kd), sizeof(float));
            d->vc[d->ops[i]] = calloc((size_t)(d->T * kd), sizeof(float));
            if (!d->kc[d->ops[i]] || !d->vc[d->ops[i]]) return errorf(err, n, "out of memory for the KV cache");
            d->bytes += 2 * sizeof(float) * (uint64_t)(d->T * kd);
            continue;
        }
        size_t w = hk_workspace_bytes((PrimId)op->prim, in, op->nin, out, op->nout, op->iattr);
        if (w > ws) ws = w;
    }
    d->scores = malloc(sizeof *d->scores * (size_t)d->T);
    d->ws_bytes = ws;
    d->ws = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
    if (!d->scores || (ws && !d->ws)) return errorf(err, n, "out of memory for %zu bytes of workspace", ws);
    d->bytes += ws + sizeof *d->scores * (size_t)d->T;
    (void)r;
    return 0;
}

static uint64_t param_bytes(const Plan *p) {
    uint64_t b = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].cls == TC_PARAM) b += (uint64_t)p->tensors[t].numel * (uint64_t)plan_dtype_size(p->tensors[t].dtype);
    return b;
}

int kvdec_create(Rt *r, const Plan *p, Comm *c, KvDecoder **out, char *err, size_t n) {
    *out = NULL;
    KvDecoder *d = calloc(1, sizeof *d);
    if (!d) return errorf(err, n, "out of memory");
    d->p = p;
    int rc = plan_batch_shape(p, &d->B, &d->T) ? 0 : REFUSE(err, n, "the plan has no token input");
    if (!rc) {
        d->kind = calloc(p->ntensors ? p->ntensors : 1, 1);
        d->buf = calloc(p->ntensors ? p->ntensors : 1, sizeof *d->buf);
        d->ops = calloc(p->nops ? p->nops : 1, sizeof *d->ops);
        d->kc = calloc(p->nops ? p->nops : 1, sizeof *d->kc);
        d->vc = calloc(p->nops ? p->nops : 1, sizeof *d->vc);
        rc = d->kind && d->buf && d->ops && d->kc && d->vc ? analyse(d, err, n) : errorf(err, n, "out of memory");
    }
    /* a failure of its own (out of memory) on any rank ends it on every
     * rank; a refusal (1) is the same on every rank, as it reads the plan */
    int64_t failed = rc < 0;
    if (comm_allreduce_max_i64(c, &failed) != COMM_OK) rc = errorf(err, n, "%s", comm_last_error(c)), failed = 1;
    else if (failed && rc >= 0) rc = errorf(err, n, "another rank could not set up the decoder");
    if (failed) {
        kvdec_free(d);
        return -1;
    }
    /* rank 0's memory decides for every rank */
    int64_t verdict = rc;
    if (!rc && c->rank == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        uint64_t half = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : UINT64_MAX;
        if (param_bytes(p) > half) {
            char b1[32], b2[32];
            verdict = REFUSE(err, n, "the parameters (%s) are more than half of this machine's memory (%s): the decode keeps them whole on rank 0",
                             plan_bytes_str(param_bytes(p), b1, sizeof b1), plan_bytes_str(2 * half, b2, sizeof b2));
        }
    }
    if (comm_bcast(c, &verdict, sizeof verdict, 0) != COMM_OK) verdict = errorf(err, n, "%s", comm_last_error(c));
    else if (verdict > 0 && rc == 0) snprintf(err, n, "rank 0 cannot hold the parameters whole");
    rc = (int)verdict;
    if (!rc && c->rank == 0) rc = allocate(d, r, err, n);
    int64_t bad = rc != 0;
    if (comm_allreduce_max_i64(c, &bad) != COMM_OK) rc = errorf(err, n, "%s", comm_last_error(c));
    else if (bad && !rc) rc = errorf(err, n, "rank 0 could not allocate the decoder");
    HfioOptions ho = {.staging_bytes = HFIO_STAGING_DEFAULT};
    for (uint32_t t = 0; !rc && t < p->ntensors; t++)
        if (p->tensors[t].cls == TC_PARAM) rc = hfio_gather(r, (int)t, c->rank == 0 ? d->buf[t] : NULL, &ho, err, n);
    /* ops that only parameters reach run now, once; the steps run the rest */
    int k = 0;
    for (int i = 0; !rc && i < d->nops; i++) {
        if (!op_is_const(d, d->ops[i])) d->ops[k++] = d->ops[i];
        else if (c->rank == 0) rc = run_op(d, d->ops[i], err, n);
    }
    d->nops = k;
    if (rc) {
        kvdec_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void kvdec_free(KvDecoder *d) {
    if (!d) return;
    for (uint32_t t = 0; d->buf && t < d->p->ntensors; t++) free(d->buf[t]);
    for (uint32_t o = 0; d->kc && o < d->p->nops; o++) free(d->kc[o]);
    for (uint32_t o = 0; d->vc && o < d->p->nops; o++) free(d->vc[o]);
    free(d->kind);
    free(d->buf);
    free(d->ops);
    free(d->kc);
    free(d->vc);
    free(d->scores);
    free(d->ws);
    free(d);
}

int kvdec_step(KvDecoder *d, int32_t token, float *logits, char *err, size_t n) {
    if (!d->buf[d->tokens]) return errorf(err, n, "the decoder runs on rank 0");
    if (d->pos >= d->T) return errorf(err, n, "the cache holds the window's %" PRId64 " positions: reset it", d->T);
    ((int32_t *)d->buf[d->tokens])[0] = token;
    for (int i = 0; i < d->nops; i++)
        if (run_op(d, d->ops[i], err, n)) return -1;
    HkTensor lg = view(d, d->logits);
    int64_t V = hk_numel(&lg);
    for (int64_t v = 0; v < V; v++) logits[v] = hk_get(&lg, v);
    d->pos++;
    return 0;
}

void kvdec_reset(KvDecoder *d) { d->pos = 0; }

int64_t kvdec_position(const KvDecoder *d) { return d->pos; }

uint64_t kvdec_bytes(const KvDecoder *d) { return d->bytes; }
