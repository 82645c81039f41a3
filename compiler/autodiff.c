#include "autodiff.h"
#include <string.h>
#include "prim.h"

/* The VJP rules: which inputs of each primitive receive a gradient (its
 * row's grad_inputs, compiler/prim.c). The arithmetic of each rule is the
 * backward kernel of the primitive (docs/primitives.md, runtime/hostk/hostk*.c,
 * stdlib/kernels/); autodiff only decides which backward ops run, in what
 * order, on which tensors. */
unsigned ad_differentiable_inputs(PrimId p) {
    const PrimInfo *pi = prim_info(p);
    return pi ? pi->grad_inputs : 0;
}

int ad_group_of(const Graph *g, int segment) {
    if (segment < 0 || g->train.checkpoint_every <= 0) return -1;
    return (int)(segment / g->train.checkpoint_every);
}


typedef struct AdState {
    Graph *g;
    DiagSink *d;
    int *grad;      /* tensor -> its gradient tensor, -1 */
    bool *needs;    /* tensor requires a gradient */
    bool *zeroed;   /* gradient tensor already zeroed in this backward */
    bool oom;
} AdState;

static int grad_tensor(AdState *s, int t) {
    if (s->grad[t] >= 0) return s->grad[t];
    Graph *g = s->g;
    GTensor src = g->tensors[t]; /* copy: adding may move the array */
    const char *name = src.cls == TC_PARAM ? arena_printf(g->arena, "grad.%s", src.name)
                                           : arena_printf(g->arena, "d%s", src.name ? src.name : "");
    int id = graph_add_tensor(g, name, src.dtype, src.rank, src.dims,
                              src.cls == TC_PARAM ? TC_GRAD : TC_ACT);
    if (id < 0) { s->oom = true; return -1; }
    g->tensors[id].grad_of = t;
    g->tensors[id].segment = src.segment;
    g->tensors[id].span = src.span;
    s->grad[t] = id;
    if (src.cls == TC_PARAM) g->tensors[t].grad = id;
    return id;
}

static void emit_zero(AdState *s, int gt) {
    if (gt < 0 || s->zeroed[gt]) return;
    GOp z = graph_op_blank(OP_ZERO_GRAD);
    z.nout = 1;
    z.out[0] = gt;
    z.segment = s->g->tensors[gt].segment;
    if (graph_add_op(s->g, &z) < 0) s->oom = true;
    s->zeroed[gt] = true;
}

static bool grow(AdState *s, int n) {
    Arena *a = s->g->arena;
    int *ng = ARENA_NEWN(a, int, n);
    bool *nn = ARENA_NEWN(a, bool, n);
    bool *nz = ARENA_NEWN(a, bool, n);
    if (!ng || !nn || !nz) return false;
    for (int i = 0; i < n; i++) ng[i] = -1;
    s->grad = ng;
    s->needs = nn;
    s->zeroed = nz;
    return true;
}

static void emit_recompute_group(AdState *s, int first, int last) {
    for (int k = first; k <= last; k++) {
        GOp r = s->g->ops[k];
        r.kind = OP_RECOMPUTE;
        r.fwd = k;
        if (graph_add_op(s->g, &r) < 0) { s->oom = true; return; }
    }
    /* graph_add_op set the recompute op as producer; the forward op stays the
     * tensor's producer of record. */
    for (int k = first; k <= last; k++)
        for (int j = 0; j < s->g->ops[k].nout; j++) s->g->tensors[s->g->ops[k].out[j]].producer = k;
}

/* A parameter that is trained: not frozen (train { freeze }). A frozen one
 * gets no gradient (its backward ops' out[] entry is -1), no optimizer
 * state and no Adam op; the backward ops through it still run for what is
 * upstream. */
static bool trainable(const Graph *g, int t) { return g->tensors[t].cls == TC_PARAM && !g->tensors[t].frozen; }

/* Which tensors need a gradient: trainable parameters, and anything computed
 * from one through a differentiable input. False (reported) when the loss is
 * not one of them. */
static bool mark_needs(AdState *s, int nf) {
    Graph *g = s->g;
    for (int t = 0; t < g->ntensors; t++) s->needs[t] = trainable(g, t);
    for (int k = 0; k < nf; k++) {
        const GOp *o = &g->ops[k];
        unsigned m = ad_differentiable_inputs(o->prim);
        bool any = false;
        for (int i = 0; i < o->nin; i++)
            if ((m >> i & 1) && o->in[i] >= 0 && s->needs[o->in[i]]) any = true;
        for (int j = 0; j < o->nout; j++) s->needs[o->out[j]] = any;
    }
    if (!s->needs[g->loss]) {
        diag_error(s->d, g->tensors[g->loss].span, "the loss does not depend on any %sparameter",
                   graph_frozen_count(g, NULL) > 0 ? "trainable " : "");
        return false;
    }
    return true;
}

/* Activation checkpoints: with checkpointing on, an activation produced in
 * one checkpoint group (or outside all) and read in another is kept from
 * forward to backward; everything else inside a group is recomputed. */
static void mark_checkpoints(Graph *g, int nf) {
    if (g->train.checkpoint_every <= 0) return;
    for (int k = 0; k < nf; k++) {
        const GOp *o = &g->ops[k];
        int gk = ad_group_of(g, o->segment);
        for (int i = 0; i < o->nin; i++) {
            int t = o->in[i];
            if (t < 0) continue;
            GTensor *tt = &g->tensors[t];
            if (tt->cls != TC_ACT || tt->producer < 0) continue;
            int gp = ad_group_of(g, g->ops[tt->producer].segment);
            if (gp != gk && (gp >= 0 || gk >= 0)) tt->cls = TC_CKPT;
        }
    }
}

/* The backward op of forward op k (after the recompute of its checkpoint
 * group when it starts one; *cur_group: the group last recomputed). False
 * when out of memory (s->oom) or the op has too many operands (reported). */
static bool emit_backward_op(AdState *s, int k, int *cur_group) {
    Graph *g = s->g;
    GOp fo = g->ops[k];
    bool any_out = false;
    for (int j = 0; j < fo.nout; j++) any_out |= s->needs[fo.out[j]];
    if (!any_out) return true;
    int gk = ad_group_of(g, fo.segment);
    if (gk >= 0 && gk != *cur_group) {
        int first = k;
        while (first > 0 && ad_group_of(g, g->ops[first - 1].segment) == gk) first--;
        emit_recompute_group(s, first, k);
        *cur_group = gk;
    }
    if (s->oom) return false;
    GOp b = graph_op_blank(OP_BWD);
    b.prim = fo.prim;
    b.fwd = k;
    b.segment = fo.segment;
    b.scope = fo.scope;
    b.span = fo.span;
    memcpy(b.iattr, fo.iattr, sizeof b.iattr);
    memcpy(b.fattr, fo.fattr, sizeof b.fattr);
    b.table = fo.table;
    b.ntable = fo.ntable;
    if (fo.nin + 2 * fo.nout > GRAPH_MAX_IN) {
        diag_error(s->d, fo.span, "autodiff: %s has too many operands for a backward op", prim_names[fo.prim]);
        return false;
    }
    int n = 0;
    for (int i = 0; i < fo.nin; i++) b.in[n++] = fo.in[i];
    b.nfin = fo.nin;
    for (int j = 0; j < fo.nout; j++) b.in[n++] = fo.out[j];
    for (int j = 0; j < fo.nout; j++) {
        int gt = grad_tensor(s, fo.out[j]);
        if (gt < 0) return false;
        emit_zero(s, gt); /* an output nothing downstream differentiated */
        b.in[n++] = gt;
    }
    b.nin = n;
    unsigned m = ad_differentiable_inputs(fo.prim);
    b.nout = fo.nin;
    for (int i = 0; i < fo.nin; i++) {
        int t = fo.in[i];
        if (!(m >> i & 1) || t < 0 || !s->needs[t]) { b.out[i] = -1; continue; }
        int gt = grad_tensor(s, t);
        if (gt < 0) return false;
        if (g->tensors[t].cls != TC_PARAM) emit_zero(s, gt);
        b.out[i] = gt;
    }
    if (s->oom || graph_add_op(g, &b) < 0) {
        s->oom = true;
        return false;
    }
    return true;
}

/* Backward: the loss's gradient, then the forward ops in reverse. */
static bool emit_backward(AdState *s, int nf) {
    Graph *g = s->g;
    int lg = grad_tensor(s, g->loss);
    if (lg < 0) return false;
    GOp l = graph_op_blank(OP_LOSS_GRAD);
    l.nout = 1;
    l.out[0] = lg;
    l.in[0] = g->loss;
    l.nin = 1;
    if (graph_add_op(g, &l) < 0) {
        s->oom = true;
        return false;
    }
    s->zeroed[lg] = true;
    int cur_group = -1;
    for (int k = nf - 1; k >= 0; k--)
        if (!emit_backward_op(s, k, &cur_group)) return false;
    return true;
}

/* The optimizer state of parameter t (a master copy when it is not f32)
 * and its Adam op (norm: the gradient norm's tensor, or -1). */
static bool emit_adam(AdState *s, int t, int norm) {
    Graph *g = s->g;
    GTensor p = g->tensors[t];
    int gt = p.grad;
    if (gt < 0) {
        /* A parameter the loss does not reach still gets a (zero) gradient
         * so that every parameter has the same optimizer state. */
        gt = grad_tensor(s, t);
        if (gt < 0) return false;
    }
    int ms = -1;
    if (p.dtype != DT_F32) {
        ms = graph_add_tensor(g, arena_printf(g->arena, "master.%s", p.name), DT_F32, p.rank, p.dims, TC_MASTER);
        if (ms < 0) return false;
        g->tensors[ms].param = t;
    }
    int mo = graph_add_tensor(g, arena_printf(g->arena, "m.%s", p.name), graph_moment_dtype(&g->train, p.numel, false), p.rank,
                              p.dims, TC_MOMENTUM);
    int va = graph_add_tensor(g, arena_printf(g->arena, "v.%s", p.name), graph_moment_dtype(&g->train, p.numel, true), p.rank,
                              p.dims, TC_VARIANCE);
    if (mo < 0 || va < 0) return false;
    g->tensors[gt].param = t;
    g->tensors[mo].param = t;
    g->tensors[va].param = t;
    g->tensors[t].master = ms;
    g->tensors[t].momentum = mo;
    g->tensors[t].variance = va;
    GOp a = graph_op_blank(OP_ADAM);
    a.nin = 6;
    a.in[0] = t;
    a.in[1] = gt;
    a.in[2] = ms;
    a.in[3] = mo;
    a.in[4] = va;
    a.in[5] = norm;
    a.iattr[GRAPH_ADAM_NO_DECAY] = g->tensors[t].no_decay;
    a.nout = 0;
    a.segment = p.segment;
    a.span = p.span;
    return graph_add_op(g, &a) >= 0;
}

/* Optimizer: the gradient norm (when clipping or f16 need it), an Adam op
 * per trainable parameter of the first nt0 tensors, then their gradients
 * zeroed.
 * False when out of memory. */
static bool emit_optimizer(AdState *s, int nt0) {
    Graph *g = s->g;
    DType dt = g->train.dtype ? g->train.dtype : DT_F32;
    bool need_norm = g->train.grad_clip > 0 || dt == DT_F16;
    int norm = -1;
    if (need_norm) {
        int64_t one = 1;
        norm = graph_add_tensor(g, "grad_norm", DT_F32, 0, &one, TC_WORKSPACE);
        if (norm < 0) return false;
        GOp n = graph_op_blank(OP_GRAD_NORM);
        /* Operands are implicit (every parameter gradient): the list would not fit. */
        n.nin = 0;
        n.nout = 1;
        n.out[0] = norm;
        if (graph_add_op(g, &n) < 0) return false;
    }
    for (int t = 0; t < nt0; t++)
        if (trainable(g, t) && !emit_adam(s, t, norm)) return false;
    for (int t = 0; t < nt0; t++) {
        if (!trainable(g, t)) continue;
        GOp z = graph_op_blank(OP_ZERO_GRAD);
        z.nout = 1;
        z.out[0] = g->tensors[t].grad;
        if (graph_add_op(g, &z) < 0) return false;
    }
    return true;
}

static bool out_of_memory(DiagSink *d) {
    diag_error(d, SPAN_NONE, "autodiff: out of memory");
    return false;
}

bool ad_build(Graph *g, DiagSink *d) {
    AdState s = {.g = g, .d = d};
    int nf = g->nops;
    g->nforward = nf;
    if (g->loss < 0 || g->loss >= g->ntensors) {
        diag_error(d, SPAN_NONE, "autodiff: the model has no loss");
        return false;
    }
    /* Upper bound on tensors: each tensor may get a gradient, each param 3 states, plus norm. */
    int nt0 = g->ntensors;
    int cap = nt0 * 5 + 16;
    if (!grow(&s, cap)) return out_of_memory(d);
    if (!mark_needs(&s, nf)) return false;
    mark_checkpoints(g, nf);
    if (!emit_backward(&s, nf)) return s.oom ? out_of_memory(d) : false;
    g->nbackward_end = g->nops;
    if (!emit_optimizer(&s, nt0)) return out_of_memory(d);
    return true;
}
