/* decode: the KV-cache decoder over a plan's forward ops (decode.h says
 * what it does and refuses): the analysis, the collective setup and the
 * entry points; the steps are a back end's (decode_impl.h). */
#include "decode_impl.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hfio.h"
#include "vocab.h"

#define prim_str kvdec_prim_str

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

/* ---- the families' decode rules ---- */

/* How a family's forward ops take part in a step (runtime/plan/prim.def's
 * family column): dec_<family> below; a family without one does not
 * compile. */
typedef struct DecRule {
    /* false: no decode rule; a plan whose step would run the op is refused */
    bool rows;
    /* DK_T: its outputs are [T, ...] whatever it reads (arange); DK_UNSEEN:
     * the largest kind of its inputs */
    DecKind makes;
    /* An op of the step (kind k, act inputs that are activations): 1 and
     * why when the family cannot decode it. NULL: every one can. */
    int (*check)(const KvDecoder *d, uint32_t o, DecKind k, int act, char *why, size_t n);
} DecRule;

/* x[K] times a parameter is one row; times another activation it is not. */
static int check_matmul(const KvDecoder *d, uint32_t o, DecKind k, int act, char *why, size_t n) {
    (void)d, (void)k;
    return act > 1 ? REFUSE(why, n, "op %u: a matmul of two activations looks across positions", o) : 0;
}

/* rope turns each row by its position, which only a [B, T, ...] row has. */
static int check_rope(const KvDecoder *d, uint32_t o, DecKind k, int act, char *why, size_t n) {
    (void)act;
    return k != DK_BT ? REFUSE(why, n, "op %u (%s) on a [T, ...] tensor", o, prim_str(d->p->ops[o].prim)) : 0;
}

/* attention reads the keys and values of the positions before: q, k and v
 * rows of the token ids' [B, T, ...]. */
static int check_attention(const KvDecoder *d, uint32_t o, DecKind k, int act, char *why, size_t n) {
    const PlanOp *op = &d->p->ops[o];
    int rc = check_rope(d, o, k, act, why, n);
    for (int i = 0; !rc && i < 3; i++)
        if (d->kind[op->in[i]] != DK_BT) rc = REFUSE(why, n, "op %u: attention of a parameter", o);
    return rc;
}

/* arange(T)'s one value a step is the position. */
static int check_arange(const KvDecoder *d, uint32_t o, DecKind k, int act, char *why, size_t n) {
    (void)k, (void)act;
    const PlanOp *op = &d->p->ops[o];
    if (op->nout != 1 || op->out[0] < 0 || op->iattr[IA_ARANGE_N] != d->T)
        return REFUSE(why, n, "op %u: arange(%" PRId64 ") is not of the window's T = %" PRId64, o, op->iattr[IA_ARANGE_N], d->T);
    return 0;
}

/* Mixture of experts: routing, experts and combination are per row; the
 * load-balancing statistics sum over the rows, so a step that needed them
 * is refused (a step runs only what the logits need: the statistics feed
 * the loss alone). */
static int check_moe(const KvDecoder *d, uint32_t o, DecKind k, int act, char *why, size_t n) {
    (void)k, (void)act;
    int prim = d->p->ops[o].prim;
    if (prim == PRIM_MOE_LOAD || prim == PRIM_MOE_BALANCE)
        return REFUSE(why, n, "op %u (%s): the load-balancing statistics sum over all positions (write the model's "
                      "moe_block with aux = false to decode it with the KV cache)", o, prim_str(prim));
    return 0;
}

static const DecRule dec_embedding = {true, DK_UNSEEN, NULL}, dec_linear = {true, DK_UNSEEN, NULL},
                     dec_matmul = {true, DK_UNSEEN, check_matmul}, dec_binary = {true, DK_UNSEEN, NULL},
                     dec_norm = {true, DK_UNSEEN, NULL}, dec_act = {true, DK_UNSEEN, NULL},
                     dec_rope = {true, DK_UNSEEN, check_rope}, dec_attention = {true, DK_UNSEEN, check_attention},
                     dec_split = {true, DK_UNSEEN, NULL}, dec_scale = {true, DK_UNSEEN, NULL},
                     dec_arange = {true, DK_T, check_arange},
                     dec_xent = {false, DK_UNSEEN, NULL}, /* the loss, which a step does not run */
                     dec_linxent = {false, DK_UNSEEN, NULL},
                     dec_moe = {true, DK_UNSEEN, check_moe},
                     dec_gmlp = {true, DK_UNSEEN, NULL}; /* position-wise: a row's MLP */

static const DecRule *const dec_rules[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout, family) [PRIM_##id] = &dec_##family,
#include "prim.def"
#undef PRIM
};

/* The forward op that makes tensor t, or -1. */
static int producer(const Plan *p, int t) {
    for (uint32_t o = 0; t >= 0 && o < p->nops; o++)
        if (p->ops[o].kind == OP_FWD && p->ops[o].nout > 0 && p->ops[o].out[0] == t) return (int)o;
    return -1;
}

/* The cross_entropy op of the logits: the loss op itself, or one input of
 * a loss that adds a term to it (an MoE model's load-balancing loss). -1
 * when there is none. */
static int xent_op(const Plan *p, int lo) {
    const PlanOp *L = &p->ops[lo];
    if (L->prim == PRIM_CROSS_ENTROPY) return lo;
    if (L->prim != PRIM_ADD) return -1;
    int found = -1;
    for (int i = 0; i < L->nin; i++) {
        int o = producer(p, L->in[i]);
        if (o >= 0 && p->ops[o].prim == PRIM_CROSS_ENTROPY) {
            if (found >= 0) return -1;
            found = o;
        }
    }
    return found;
}

/* Marks need[] (per op) for the forward ops the logits depend on: a step
 * runs only those (not the loss, nor an MoE model's load statistics). */
static int mark_needed(const Plan *p, int logits, uint8_t *need, char *why, size_t n) {
    uint8_t *want = calloc(p->ntensors ? p->ntensors : 1, 1);
    if (!want) return errorf(why, n, "out of memory");
    want[logits] = 1;
    for (uint32_t o = p->nops; o-- > 0;) {
        const PlanOp *op = &p->ops[o];
        if (op->kind != OP_FWD) continue;
        for (int j = 0; j < op->nout && !need[o]; j++) need[o] = op->out[j] >= 0 && want[op->out[j]];
        for (int i = 0; need[o] && i < op->nin; i++)
            if (op->in[i] >= 0) want[op->in[i]] = 1;
    }
    free(want);
    return 0;
}

static int classify(KvDecoder *d, const uint8_t *need, char *why, size_t n);

/* Classifies every tensor and picks the ops of a step; 1 and why when the
 * plan's forward cannot be decoded a position at a time. */
static int analyse(KvDecoder *d, char *why, size_t n) {
    const Plan *p = d->p;
    int lo = loss_op(p);
    if (lo < 0) return REFUSE(why, n, "the plan has no forward op that makes its loss");
    int xo = xent_op(p, lo);
    const PlanOp *L = &p->ops[xo >= 0 ? xo : lo];
    if (xo < 0 || L->nin < 1 || L->in[0] < 0)
        return REFUSE(why, n, "the loss is made by %s, not cross_entropy of logits (alone or plus another term)", prim_str(L->prim));
    d->tokens = p->inputs[0];
    d->logits = L->in[0];
    uint8_t *need = calloc(p->nops ? p->nops : 1, 1);
    if (!need) return errorf(why, n, "out of memory");
    int rc = mark_needed(p, d->logits, need, why, n);
    if (!rc) rc = classify(d, need, why, n);
    free(need);
    return rc;
}

/* The kinds of the tensors the needed ops make, and the ops of a step. */
static int classify(KvDecoder *d, const uint8_t *need, char *why, size_t n) {
    const Plan *p = d->p;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].cls == TC_PARAM) d->kind[t] = DK_CONST;
    for (int i = 0; i < p->ninputs; i++) d->kind[p->inputs[i]] = DK_ABSENT;
    d->kind[d->tokens] = DK_BT;
    for (uint32_t o = 0; o < p->nops; o++) {
        const PlanOp *op = &p->ops[o];
        if (op->kind != OP_FWD || !need[o]) continue;
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
        if ((unsigned)op->prim >= PRIM_COUNT) return REFUSE(why, n, "op %u has an unknown primitive %d", o, (int)op->prim);
        const DecRule *rule = dec_rules[op->prim];
        if (rule->makes != DK_UNSEEN) k = rule->makes;
        if (k >= DK_T) {
            if (!rule->rows) return REFUSE(why, n, "op %u (%s) has no decode rule", o, prim_str(op->prim));
            int rc = rule->check ? rule->check(d, o, k, act, why, n) : 0;
            if (rc) return rc;
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

/* Whether only parameters reach op o (its outputs are whole constants). */
static bool op_is_const(const KvDecoder *d, int o) {
    const PlanOp *op = &d->p->ops[o];
    for (int j = 0; j < op->nout; j++)
        if (op->out[j] >= 0) return d->kind[op->out[j]] == DK_CONST;
    return false;
}

/* Agrees on every rank whether any rank failed (rc < 0): -1 on every rank
 * then, with the failing rank's own words or "another rank ...". */
static int agree(Comm *c, int rc, const char *other, char *err, size_t n) {
    int64_t failed = rc < 0;
    if (comm_allreduce_max_i64(c, &failed) != COMM_OK) return errorf(err, n, "%s", comm_last_error(c));
    if (failed && rc >= 0) return errorf(err, n, "%s", other);
    return failed ? -1 : rc;
}

int kvdec_create(Rt *r, const Plan *p, Comm *c, KvDevice on, KvDecoder **out, char *err, size_t n) {
    *out = NULL;
    KvDecoder *d = calloc(1, sizeof *d);
    if (!d) return errorf(err, n, "out of memory");
    d->p = p;
    d->c = c;
    d->be = on == KV_CUDA ? &kvdec_cuda : &kvdec_host;
    int rc = plan_batch_shape(p, &d->B, &d->T) ? 0 : REFUSE(err, n, "the plan has no token input");
    if (!rc) {
        d->kind = calloc(p->ntensors ? p->ntensors : 1, 1);
        d->ops = calloc(p->nops ? p->nops : 1, sizeof *d->ops);
        rc = d->kind && d->ops ? analyse(d, err, n) : errorf(err, n, "out of memory");
    }
    for (int i = 0; !rc && i < d->nops; i++) {
        const PlanOp *op = &p->ops[d->ops[i]];
        int64_t orig = op->iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS];
        if (op->prim == PRIM_ROPE && op->iattr[IA_ROPE_SCALING] == ROPE_LONGROPE && (!d->longrope_orig || orig < d->longrope_orig))
            d->longrope_orig = orig;
    }
    if (!rc && d->longrope_orig && !(d->fed = calloc((size_t)d->T, sizeof *d->fed))) rc = errorf(err, n, "out of memory");
    if (!rc && d->be->check) rc = d->be->check(d, err, n);
    /* a failure of its own (out of memory) on any rank ends it on every
     * rank; a refusal (1) is the same on every rank, as it reads the plan */
    rc = agree(c, rc, "another rank could not set up the decoder", err, n);
    /* rank 0's memory (and device) decides for every rank, in its words */
    int64_t verdict = rc;
    if (!rc && c->rank == 0) verdict = d->be->open(d, err, n);
    if (!rc) {
        if (comm_bcast(c, &verdict, sizeof verdict, 0) != COMM_OK) verdict = errorf(err, n, "%s", comm_last_error(c));
        else if (verdict > 0 && comm_bcast(c, err, n, 0) != COMM_OK) verdict = errorf(err, n, "%s", comm_last_error(c));
        else if (verdict < 0 && c->rank != 0) verdict = errorf(err, n, "rank 0 could not open the decoder");
        rc = (int)verdict;
    }
    if (!rc && c->rank == 0) rc = d->be->allocate(d, err, n);
    if (!rc || rc < 0) rc = agree(c, rc, "rank 0 could not allocate the decoder", err, n);
    /* every rank takes part in every gather; a failure to put one on rank 0
     * is said once they are all done */
    HfioOptions ho = {.staging_bytes = HFIO_STAGING_DEFAULT};
    int put = 0;
    for (uint32_t t = 0; !rc && t < p->ntensors; t++) {
        if (p->tensors[t].cls != TC_PARAM) continue;
        rc = hfio_gather(r, (int)t, c->rank == 0 ? d->be->param_dst(d, (int)t) : NULL, &ho, err, n);
        if (!rc && !put && c->rank == 0) put = d->be->param_put(d, (int)t, err, n);
    }
    if (!rc) rc = agree(c, put, "rank 0 could not hold the parameters", err, n);
    /* ops that only parameters reach run now, once; the steps run the rest */
    int k = 0;
    for (int i = 0; !rc && i < d->nops; i++) {
        if (!op_is_const(d, d->ops[i])) d->ops[k++] = d->ops[i];
        else if (c->rank == 0) rc = d->be->run_op(d, d->ops[i], err, n);
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
    if (d->state) d->be->close(d);
    free(d->kind);
    free(d->ops);
    free(d->fed);
    free(d);
}

static int one_step(KvDecoder *d, int32_t token, float *logits, char *err, size_t n) {
    if (d->fed) d->fed[d->pos] = token;
    if (d->be->set_token(d, token, err, n)) return -1;
    for (int i = 0; i < d->nops; i++)
        if (d->be->run_op(d, d->ops[i], err, n)) return -1;
    if (d->be->logits(d, logits, err, n)) return -1;
    d->pos++;
    return 0;
}

int kvdec_step(KvDecoder *d, int32_t token, float *logits, char *err, size_t n) {
    if (!d->state) return errorf(err, n, "the decoder runs on rank 0");
    if (d->pos >= d->T) return errorf(err, n, "the cache holds the window's %" PRId64 " positions: reset it", d->T);
    /* longrope: the text outgrows original_max_positions with this token; from now on every
     * position turns by the long factors, the cached ones too: they are computed again, as
     * Phi3ForCausalLM's generate drops its cache there */
    if (d->longrope_orig && d->pos == d->longrope_orig && d->rope_seq <= d->longrope_orig) {
        int64_t p = d->pos;
        d->rope_seq = p + 1;
        d->pos = 0;
        for (int64_t i = 0; i < p; i++)
            if (one_step(d, d->fed[i], logits, err, n)) return -1;
    }
    return one_step(d, token, logits, err, n);
}

void kvdec_reset(KvDecoder *d) {
    d->pos = 0;
    d->rope_seq = 0;
}

int64_t kvdec_position(const KvDecoder *d) { return d->pos; }

uint64_t kvdec_bytes(const KvDecoder *d) { return d->bytes; }
