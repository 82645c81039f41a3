/* Hand-built training graphs of the shapes the CUDA kernels must serve
 * (GPT-2 style and LLaMA style blocks, forward + autodiff's backward and
 * optimizer), for test_cuda_gen, test_nvrtc and bench_nvrtc. Header-only:
 * each includer gets its own static copies. */
#ifndef ZINF_TEST_CUDA_MODELS_H
#define ZINF_TEST_CUDA_MODELS_H
#include <string.h>
#include "arena.h"
#include "autodiff.h"
#include "graph.h"
#include "loader.h"
#include "sema.h"

typedef struct CmShape {
    const char *name;
    DType dt;
    int64_t B, T, D, H, KV, V, F; /* F: MLP hidden */
    int layers;
    bool llama;                   /* rmsnorm, rope, silu-gated MLP, no biases, untied head */
    double grad_clip;
} CmShape;

static const CmShape cm_gpt2_tiny = {"gpt2-tiny", DT_BF16, 4, 64, 256, 4, 4, 1024, 1024, 2, false, 1.0};
static const CmShape cm_llama2_7b = {"llama2-7b", DT_BF16, 1, 4096, 4096, 32, 32, 32000, 11008, 1, true, 1.0};
static const CmShape cm_llama_gqa = {"llama-gqa", DT_BF16, 2, 256, 1024, 16, 4, 4096, 2816, 1, true, 0.0};

static inline int cm_t(Graph *g, const char *name, DType dt, TensorClass cls, int rank, int64_t d0, int64_t d1, int64_t d2) {
    int64_t dims[3] = {d0, d1, d2};
    int t = graph_add_tensor(g, name, dt, rank, dims, cls);
    if (t >= 0 && cls == TC_PARAM) {
        g->tensors[t].init = INIT_NORMAL;
        g->tensors[t].init_std = 0.02;
    }
    return t;
}

static inline GOp cm_op(PrimId p) {
    GOp o;
    memset(&o, 0, sizeof o);
    o.kind = OP_FWD;
    o.prim = p;
    o.segment = -1;
    o.fwd = -1;
    o.scope = "";
    o.span = SPAN_NONE;
    for (int i = 0; i < GRAPH_MAX_IN; i++) o.in[i] = -1;
    for (int i = 0; i < GRAPH_MAX_OUT; i++) o.out[i] = -1;
    return o;
}

/* y = prim(ins...) with one result of the given shape; returns y. */
static inline int cm_apply(Graph *g, PrimId p, const int *ins, int nin, DType dt, int rank, int64_t d0, int64_t d1, int64_t d2,
                    int64_t i0, int64_t i1, double f0, int seg) {
    int y = cm_t(g, NULL, dt, TC_ACT, rank, d0, d1, d2);
    g->tensors[y].name = arena_printf(g->arena, "%%%d", y);
    GOp o = cm_op(p);
    o.nin = nin;
    for (int i = 0; i < nin; i++) o.in[i] = ins[i];
    o.nout = 1;
    o.out[0] = y;
    o.iattr[0] = i0;
    o.iattr[1] = i1;
    o.fattr[0] = f0;
    o.segment = seg;
    o.span = (Span){0, (uint32_t)(10 * g->nops), 5};
    g->tensors[y].segment = seg;
    graph_add_op(g, &o);
    return y;
}

static inline int cm_param(Graph *g, const char *name, int layer, int rank, int64_t d0, int64_t d1, DType dt) {
    const char *n = layer >= 0 ? arena_printf(g->arena, "blocks.%d.%s", layer, name) : name;
    return cm_t(g, n, dt, TC_PARAM, rank, d0, d1, 0);
}

/* Builds the training graph (forward, ad_build's backward and AdamW). */
static inline bool cm_build(Graph *g, Arena *a, const CmShape *s, DiagSink *d) {
    graph_init(g, a);
    g->model_name = s->name;
    g->train.micro_batch = s->B;
    g->train.dtype = s->dt;
    g->train.lr = 3e-4;
    g->train.beta1 = 0.9;
    g->train.beta2 = 0.95;
    g->train.eps = 1e-8;
    g->train.weight_decay = 0.1;
    g->train.grad_clip = s->grad_clip;
    g->train.loss_scale = 1;
    g->train.grad_accum = 1;
    g->train.checkpoint_every = 1;
    DType dt = s->dt;
    int64_t B = s->B, T = s->T, D = s->D, H = s->H, KV = s->KV, hd = D / H;
    int tok = cm_t(g, "tokens", DT_I32, TC_INPUT, 2, B, T, 0);
    int tgt = cm_t(g, "targets", DT_I32, TC_INPUT, 2, B, T, 0);
    g->inputs[0] = tok;
    g->inputs[1] = tgt;
    g->ninputs = 2;
    int wte = cm_param(g, "wte", -1, 2, s->V, D, dt);
    int ins[4];
    ins[0] = wte;
    ins[1] = tok;
    int x = cm_apply(g, PRIM_EMBEDDING, ins, 2, dt, 3, B, T, D, 0, 0, 0, -1);
    if (!s->llama) {
        int wpe = cm_param(g, "wpe", -1, 2, T, D, dt);
        int pos = cm_apply(g, PRIM_ARANGE, ins, 0, DT_I32, 1, T, 0, 0, T, 0, 0, -1);
        g->tensors[pos].cls = TC_CONST;
        ins[0] = wpe;
        ins[1] = pos;
        int pe = cm_apply(g, PRIM_EMBEDDING, ins, 2, dt, 2, T, D, 0, 0, 0, 0, -1);
        ins[0] = x;
        ins[1] = pe;
        x = cm_apply(g, PRIM_ADD, ins, 2, dt, 3, B, T, D, 0, 0, 0, -1);
    }
    g->nsegments = s->layers;
    for (int l = 0; l < s->layers; l++) {
        int h;
        if (s->llama) {
            int g1 = cm_param(g, "attn_norm", l, 1, D, 0, dt);
            ins[0] = x;
            ins[1] = g1;
            h = cm_apply(g, PRIM_RMSNORM, ins, 2, dt, 3, B, T, D, 0, 0, 1e-5, l);
            int wq = cm_param(g, "wq", l, 2, D, D, dt), wk = cm_param(g, "wk", l, 2, D, KV * hd, dt);
            int wv = cm_param(g, "wv", l, 2, D, KV * hd, dt);
            ins[0] = h;
            ins[1] = wq;
            int q = cm_apply(g, PRIM_LINEAR, ins, 2, dt, 3, B, T, D, 0, 0, 0, l);
            ins[1] = wk;
            int k = cm_apply(g, PRIM_LINEAR, ins, 2, dt, 3, B, T, KV * hd, 0, 0, 0, l);
            ins[1] = wv;
            int v = cm_apply(g, PRIM_LINEAR, ins, 2, dt, 3, B, T, KV * hd, 0, 0, 0, l);
            ins[0] = q;
            q = cm_apply(g, PRIM_ROPE, ins, 1, dt, 3, B, T, D, H, 0, 10000.0, l);
            ins[0] = k;
            k = cm_apply(g, PRIM_ROPE, ins, 1, dt, 3, B, T, KV * hd, KV, 0, 10000.0, l);
            ins[0] = q;
            ins[1] = k;
            ins[2] = v;
            int at = cm_apply(g, PRIM_ATTENTION, ins, 3, dt, 3, B, T, D, H, KV, 0, l);
            int wo = cm_param(g, "wo", l, 2, D, D, dt);
            ins[0] = at;
            ins[1] = wo;
            int pr = cm_apply(g, PRIM_LINEAR, ins, 2, dt, 3, B, T, D, 0, 0, 0, l);
            ins[0] = x;
            ins[1] = pr;
            x = cm_apply(g, PRIM_ADD, ins, 2, dt, 3, B, T, D, 0, 0, 0, l);
            int g2 = cm_param(g, "mlp_norm", l, 1, D, 0, dt);
            ins[0] = x;
            ins[1] = g2;
            h = cm_apply(g, PRIM_RMSNORM, ins, 2, dt, 3, B, T, D, 0, 0, 1e-5, l);
            int w1 = cm_param(g, "w1", l, 2, D, s->F, dt), w3 = cm_param(g, "w3", l, 2, D, s->F, dt);
            int w2 = cm_param(g, "w2", l, 2, s->F, D, dt);
            ins[0] = h;
            ins[1] = w1;
            int u = cm_apply(g, PRIM_LINEAR, ins, 2, dt, 3, B, T, s->F, 0, 0, 0, l);
            ins[1] = w3;
            int gt = cm_apply(g, PRIM_LINEAR, ins, 2, dt, 3, B, T, s->F, 0, 0, 0, l);
            ins[0] = u;
            u = cm_apply(g, PRIM_SILU, ins, 1, dt, 3, B, T, s->F, 0, 0, 0, l);
            ins[0] = u;
            ins[1] = gt;
            u = cm_apply(g, PRIM_MUL, ins, 2, dt, 3, B, T, s->F, 0, 0, 0, l);
            ins[0] = u;
            ins[1] = w2;
            int mo = cm_apply(g, PRIM_LINEAR, ins, 2, dt, 3, B, T, D, 0, 0, 0, l);
            ins[0] = x;
            ins[1] = mo;
            x = cm_apply(g, PRIM_ADD, ins, 2, dt, 3, B, T, D, 0, 0, 0, l);
        } else {
            int g1 = cm_param(g, "ln1.g", l, 1, D, 0, dt), b1 = cm_param(g, "ln1.b", l, 1, D, 0, dt);
            ins[0] = x;
            ins[1] = g1;
            ins[2] = b1;
            h = cm_apply(g, PRIM_LAYERNORM, ins, 3, dt, 3, B, T, D, 0, 0, 1e-5, l);
            int wqkv = cm_param(g, "attn.wqkv", l, 2, D, 3 * D, dt), bqkv = cm_param(g, "attn.bqkv", l, 1, 3 * D, 0, dt);
            ins[0] = h;
            ins[1] = wqkv;
            ins[2] = bqkv;
            int qkv = cm_apply(g, PRIM_LINEAR, ins, 3, dt, 3, B, T, 3 * D, 0, 0, 0, l);
            /* split into three pieces */
            int q = cm_t(g, NULL, dt, TC_ACT, 3, B, T, D), k = cm_t(g, NULL, dt, TC_ACT, 3, B, T, D);
            int v = cm_t(g, NULL, dt, TC_ACT, 3, B, T, D);
            g->tensors[q].name = "%q";
            g->tensors[k].name = "%k";
            g->tensors[v].name = "%v";
            GOp sp = cm_op(PRIM_SPLIT);
            sp.nin = 1;
            sp.in[0] = qkv;
            sp.nout = 3;
            sp.out[0] = q;
            sp.out[1] = k;
            sp.out[2] = v;
            sp.iattr[0] = 3;
            sp.segment = l;
            graph_add_op(g, &sp);
            ins[0] = q;
            ins[1] = k;
            ins[2] = v;
            int at = cm_apply(g, PRIM_ATTENTION, ins, 3, dt, 3, B, T, D, H, H, 0, l);
            int wo = cm_param(g, "attn.wo", l, 2, D, D, dt), bo = cm_param(g, "attn.bo", l, 1, D, 0, dt);
            ins[0] = at;
            ins[1] = wo;
            ins[2] = bo;
            int pr = cm_apply(g, PRIM_LINEAR, ins, 3, dt, 3, B, T, D, 0, 0, 0, l);
            ins[0] = x;
            ins[1] = pr;
            x = cm_apply(g, PRIM_ADD, ins, 2, dt, 3, B, T, D, 0, 0, 0, l);
            int g2 = cm_param(g, "ln2.g", l, 1, D, 0, dt), b2 = cm_param(g, "ln2.b", l, 1, D, 0, dt);
            ins[0] = x;
            ins[1] = g2;
            ins[2] = b2;
            h = cm_apply(g, PRIM_LAYERNORM, ins, 3, dt, 3, B, T, D, 0, 0, 1e-5, l);
            int w1 = cm_param(g, "mlp.w1", l, 2, D, s->F, dt), bb1 = cm_param(g, "mlp.b1", l, 1, s->F, 0, dt);
            int w2 = cm_param(g, "mlp.w2", l, 2, s->F, D, dt), bb2 = cm_param(g, "mlp.b2", l, 1, D, 0, dt);
            ins[0] = h;
            ins[1] = w1;
            ins[2] = bb1;
            int u = cm_apply(g, PRIM_LINEAR, ins, 3, dt, 3, B, T, s->F, 0, 0, 0, l);
            ins[0] = u;
            u = cm_apply(g, PRIM_GELU, ins, 1, dt, 3, B, T, s->F, 0, 0, 0, l);
            ins[0] = u;
            ins[1] = w2;
            ins[2] = bb2;
            int mo = cm_apply(g, PRIM_LINEAR, ins, 3, dt, 3, B, T, D, 0, 0, 0, l);
            ins[0] = x;
            ins[1] = mo;
            x = cm_apply(g, PRIM_ADD, ins, 2, dt, 3, B, T, D, 0, 0, 0, l);
        }
    }
    int logits;
    if (s->llama) {
        int gf = cm_param(g, "norm", -1, 1, D, 0, dt);
        ins[0] = x;
        ins[1] = gf;
        x = cm_apply(g, PRIM_RMSNORM, ins, 2, dt, 3, B, T, D, 0, 0, 1e-5, -1);
        int head = cm_param(g, "lm_head", -1, 2, D, s->V, dt);
        ins[0] = x;
        ins[1] = head;
        logits = cm_apply(g, PRIM_LINEAR, ins, 2, dt, 3, B, T, s->V, 0, 0, 0, -1);
    } else {
        int gf = cm_param(g, "ln_f.g", -1, 1, D, 0, dt), bf = cm_param(g, "ln_f.b", -1, 1, D, 0, dt);
        ins[0] = x;
        ins[1] = gf;
        ins[2] = bf;
        x = cm_apply(g, PRIM_LAYERNORM, ins, 3, dt, 3, B, T, D, 0, 0, 1e-5, -1);
        ins[0] = x;
        ins[1] = wte;
        logits = cm_apply(g, PRIM_MATMUL, ins, 2, dt, 3, B, T, s->V, 0, 1, 0, -1); /* transpose_b */
    }
    ins[0] = logits;
    ins[1] = tgt;
    int loss = cm_apply(g, PRIM_CROSS_ENTROPY, ins, 2, DT_F32, 0, 0, 0, 0, 0, 0, 0, -1);
    g->loss = loss;
    return ad_build(g, d);
}

/* The training graph of a .zl file (loader, checker, autodiff), its sources
 * in src (source_set_init'ed by the caller). false with diagnostics in d. */
static inline bool cm_load_zl(Graph *g, Arena *a, SourceSet *src, const char *path, DiagSink *d) {
    LoadOptions lo = {NULL, 0, ZINF_STDLIB_DIR};
    Program prog;
    memset(&prog, 0, sizeof prog);
    if (!program_load(a, src, d, path, &lo, &prog) || d->errors) return false;
    if (!sema_build(a, &prog, src, d, g) || d->errors) return false;
    return ad_build(g, d) && !d->errors;
}

#endif
