/* check_moe: the mixture-of-experts kernels (stdlib/kernels/moe.cu, the
 * launches of compiler/cuda_gen_moe.c) RUN on the host emulator
 * (tests/gpu/emu.c, the real kernel sources compiled as C++), forward then
 * backward, against the host kernels (runtime/hostk/hostk_moe.c) on the same
 * random values: moe_topk, moe_gate (with and without renormalisation),
 * moe_expert (x a row per token and a row per (token, slot); random
 * routings, every token on the same experts with the others getting none,
 * top-1 with every token on one expert, segments of several 64-row tiles),
 * moe_combine, moe_load (with and without acc), moe_balance,
 * moe_shared_gate; f32 and bf16. Per case: the largest normwise relative
 * error over every tensor written (f32 1e-5, bf16 2e-2); idx exactly.
 * moe_expert tiled by expert (2 and 4 tiles, the launches of
 * cuda_gen_op_tile, the weight and its gradient bound to the tile's
 * experts, tile after tile as the executors run them): against the host
 * kernels' tiles (hk_moe_expert_*_tile, y cleared before tile 0 as
 * runtime/exec/exec_instr.c does) and against the untiled launches on the
 * same values, each within the same tolerance.
 *
 * No GPU, no NVRTC, no Check; needs c++ for the units and a cblas (the host
 * GEMMs). tests/e2e/moe_cuda_emu.sh builds and runs it; tests/gpu/run_all.sh
 * runs the same script on the GPU machine. Exit 0: every case passed; 1: a
 * case differs; 2: setup error. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../unit/cuda_models.h"
#include "cuda_gen.h"
#include "emu_check.h"
#include "hostk.h"

enum { MAXT = 16, ROUTE_RANDOM = 0, ROUTE_SAME = 1 };
typedef struct Case {
    char name[96];
    Arena a;
    DiagSink d;
    Graph g;
    CudaGen cg;
    DType dt;
    int fwd, bwd;
    int ts[MAXT], nts;
    int idx, E, route; /* the routing tensor (-1: none), its experts, how it is filled */
    int positive;      /* a tensor filled with values in [0, 4) (moe_load's statistics), or -1 */
    int ntiles, tile;  /* moe_expert tiled by expert (0: whole), the tile that runs */
    int w, dw;         /* the tiled weight and its gradient */
    void *gpu[MAXT], *host[MAXT], *ref[MAXT]; /* ref: the untiled launches (tiled cases) */
} Case;

static int slot_of(Case *c, int t) {
    for (int i = 0; i < c->nts; i++)
        if (c->ts[i] == t) return i;
    ec_die("no such tensor");
    return -1;
}
static int add_t(Case *c, const char *name, DType dt, TensorClass cls, int rank, int64_t d0, int64_t d1, int64_t d2) {
    int t = cm_t(&c->g, name, dt, cls, rank, d0, d1, d2);
    if (t < 0 || c->nts >= MAXT) ec_die("cannot add a tensor");
    c->ts[c->nts++] = t;
    return t;
}

/* The same random values into both copies; idx: k distinct experts a row
 * (ROUTE_SAME: experts E-1, E-2, ... on every row). */
static void fill(Case *c) {
    unsigned seed = 7;
    for (int i = 0; i < c->nts; i++) {
        const GTensor *t = &c->g.tensors[c->ts[i]];
        size_t bytes = (size_t)t->numel * ec_esz(t->dtype);
        void *p = calloc(bytes, 1), *q = malloc(bytes), *u = malloc(bytes);
        if (!p || !q || !u) ec_die("out of memory");
        if (c->ts[i] == c->idx) {
            int64_t k = t->dims[t->rank - 1];
            for (int64_t r = 0; r < t->numel / k; r++)
                for (int64_t j = 0; j < k; j++) {
                    int32_t e = (int32_t)(c->E - 1 - j);
                    if (c->route == ROUTE_RANDOM) {
                        seed = seed * 1103515245u + 12345u;
                        e = (int32_t)((seed >> 8) % (unsigned)c->E);
                        for (int64_t i2 = 0; i2 < j; i2++)
                            if (((int32_t *)p)[r * k + i2] == e) e = (e + 1) % c->E, i2 = -1;
                    }
                    ((int32_t *)p)[r * k + j] = e;
                }
        } else {
            for (int64_t j = 0; j < t->numel; j++) {
                seed = seed * 1103515245u + 12345u;
                float v = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
                if (c->ts[i] == c->positive) v = 2.0f * (v + 1.0f);
                if (t->dtype == DT_F32) ((float *)p)[j] = v;
                else if (t->dtype == DT_I32) ((int32_t *)p)[j] = 0;
                else ((uint16_t *)p)[j] = ec_to_bf16(v);
            }
        }
        memcpy(q, p, bytes);
        memcpy(u, p, bytes);
        c->gpu[i] = p;
        c->host[i] = q;
        c->ref[i] = u;
    }
}

/* Bytes past the tensor's start of the running tile's experts (the
 * weight and its gradient of a tiled case; 0 otherwise). */
static size_t tile_off(const Case *c, int t) {
    if (!c->ntiles || (t != c->w && t != c->dw)) return 0;
    const GTensor *x = &c->g.tensors[t];
    return (size_t)(x->numel / c->ntiles * c->tile) * ec_esz(x->dtype);
}

/* Where tensor t's GPU copy lies (a tile's experts: the first of them). */
static uint8_t *gpu_addr(void *ctx, int t) {
    Case *c = ctx;
    return (uint8_t *)c->gpu[slot_of(c, t)] + tile_off(c, t);
}

/* The launches of op (of its tile c->tile when c->ntiles) on the GPU copies. */
static void run_gpu(Case *c, int op) {
    static CudaKernel ks[64]; /* moe_expert's backward: 2 launches a slot (top-k up to 30) */
    CudaOpInfo info;
    int n = c->ntiles ? cuda_gen_op_tile(&c->cg, &c->g, op, c->tile, c->ntiles, ks, 64, &info, &c->d)
                      : cuda_gen_op(&c->cg, &c->g, op, ks, 64, &info, &c->d);
    if (n < 0 || n > 64) ec_die(c->d.len ? c->d.items[c->d.len - 1].msg : "cuda_gen failed");
    uint8_t *ws = malloc((size_t)info.ws_bytes + 16);
    if (!ws) ec_die("out of memory");
    memset(ws, 0xff, (size_t)info.ws_bytes + 16); /* as the fake driver poisons: the launches initialise what they read */
    ec_run(ks, n, &info, ws, gpu_addr, c);
    free(ws);
}

/* Tensor t of the host copies as the host kernels take it (t < 0: absent). */
static HkTensor H(Case *c, int t) {
    HkTensor h;
    memset(&h, 0, sizeof h);
    if (t < 0) return h;
    const GTensor *x = &c->g.tensors[t];
    h.data = c->host[slot_of(c, t)];
    h.dtype = x->dtype;
    h.rank = x->rank;
    for (int i = 0; i < x->rank; i++) h.dims[i] = x->dims[i];
    return h;
}

static void *ws_of(size_t bytes) {
    void *p = calloc(bytes + 64, 1);
    if (!p) ec_die("out of memory");
    return p;
}

/* The host kernels of the op's forward and backward. */
static void run_host(Case *c) {
    const GOp *f = &c->g.ops[c->fwd], *b = &c->g.ops[c->bwd];
    HkTensor a = H(c, f->in[0]), bb = H(c, f->in[1]), cc = H(c, f->nin > 2 ? f->in[2] : -1), y = H(c, f->out[0]);
    HkTensor dy = H(c, b->in[b->nfin + 1]), da = H(c, b->nout > 0 ? b->out[0] : -1), db = H(c, b->nout > 1 ? b->out[1] : -1),
             dc = H(c, b->nout > 2 ? b->out[2] : -1);
    int rc = 0;
    void *ws = NULL;
    switch (f->prim) {
    case PRIM_MOE_TOPK: rc = hk_moe_topk_fwd(&a, &y); break;
    case PRIM_MOE_GATE: {
        bool norm = f->iattr[IA_MOE_GATE_NORMALIZE] != 0;
        ws = ws_of(hk_moe_gate_workspace_bytes(&a, &bb));
        rc = hk_moe_gate_fwd(&a, &bb, &y, norm, ws);
        if (!rc) rc = hk_moe_gate_bwd(&a, &bb, &dy, &da, norm, ws);
        break;
    }
    case PRIM_MOE_EXPERT:
        ws = ws_of(hk_moe_expert_workspace_bytes(&a, &bb, &cc, &y));
        if (!c->ntiles) {
            rc = hk_moe_expert_fwd(&a, &bb, &cc, &y, ws);
            if (!rc) rc = hk_moe_expert_bwd(&a, &bb, &cc, &dy, &da, &dc, ws);
            break;
        }
        /* tile by tile, the weight and its gradient viewed as the tile's experts */
        memset(y.data, 0, (size_t)c->g.tensors[f->out[0]].numel * ec_esz(y.dtype));
        for (int bwd = 0; bwd < 2 && !rc; bwd++)
            for (int t = 0; t < c->ntiles && !rc; t++) {
                int64_t all = cc.dims[0], per = all / c->ntiles;
                HkTensor wt = cc, dwt = dc;
                wt.dims[0] = dwt.dims[0] = per;
                wt.data = (uint8_t *)cc.data + (size_t)(per * t * cc.dims[1] * cc.dims[2]) * ec_esz(cc.dtype);
                dwt.data = (uint8_t *)dc.data + (size_t)(per * t * dc.dims[1] * dc.dims[2]) * ec_esz(dc.dtype);
                rc = bwd ? hk_moe_expert_bwd_tile(&a, &bb, &wt, per * t, all, &dy, &da, &dwt, ws)
                         : hk_moe_expert_fwd_tile(&a, &bb, &wt, per * t, all, &y, ws);
            }
        break;
    case PRIM_MOE_COMBINE:
        rc = hk_moe_combine_fwd(&a, &bb, &y);
        if (!rc) rc = hk_moe_combine_bwd(&a, &bb, &dy, &da, &db);
        break;
    case PRIM_MOE_LOAD:
        ws = ws_of(hk_moe_load_workspace_bytes(&a));
        rc = hk_moe_load_fwd(&a, &bb, &cc, &y, ws);
        if (!rc) rc = hk_moe_load_bwd(&a, &dy, &da, &dc, ws);
        break;
    case PRIM_MOE_BALANCE:
        rc = hk_moe_balance_fwd(&a, &y, f->fattr[FA_MOE_BALANCE_SCALE]);
        if (!rc) rc = hk_moe_balance_bwd(&a, &dy, &da, f->fattr[FA_MOE_BALANCE_SCALE]);
        break;
    case PRIM_MOE_SHARED_GATE:
        rc = hk_moe_shared_gate_fwd(&a, &bb, &y);
        if (!rc) rc = hk_moe_shared_gate_bwd(&a, &bb, &dy, &da, &db);
        break;
    default: ec_die("not a MoE primitive");
    }
    free(ws);
    if (rc) {
        char m[160];
        snprintf(m, sizeof m, "%s: host kernel error %d", c->name, rc);
        ec_die(m);
    }
}

/* The forward then the backward on the GPU copies: whole, or tile after
 * tile of each (as the plan's instructions run them). */
static void run_ops(Case *c) {
    int n = c->ntiles ? c->ntiles : 1;
    for (c->tile = 0; c->tile < n; c->tile++) run_gpu(c, c->fwd);
    if (c->bwd >= 0)
        for (c->tile = 0; c->tile < n; c->tile++) run_gpu(c, c->bwd);
}

static int check(Case *c) {
    fill(c);
    run_ops(c);
    run_host(c);
    if (c->ntiles) { /* the untiled launches on the ref copies */
        int nt = c->ntiles;
        void *keep[MAXT];
        memcpy(keep, c->gpu, sizeof keep);
        memcpy(c->gpu, c->ref, sizeof keep);
        c->ntiles = 0;
        run_ops(c);
        c->ntiles = nt;
        memcpy(c->gpu, keep, sizeof keep);
    }
    double worst = 0, tol = c->dt == DT_F32 ? 1e-5 : 2e-2;
    const char *at = "";
    for (int i = 0; i < c->nts; i++) {
        const GTensor *x = &c->g.tensors[c->ts[i]];
        for (int r = 0; r < (c->ntiles ? 2 : 1); r++) {
            double e = ec_normwise(r ? c->ref[i] : c->host[i], c->gpu[i], x->dtype, x->numel);
            if (e > worst || isnan(e)) {
                worst = e;
                at = x->name;
            }
        }
        free(c->gpu[i]);
        free(c->host[i]);
        free(c->ref[i]);
    }
    bool ok = worst <= tol;
    printf("%-52s %-5s %10.3g  %6.0e  %s %s\n", c->name, cuda_dtype_name(c->dt), worst, tol, ok ? "PASS" : "FAIL",
           ok ? "" : at);
    diag_free(&c->d);
    arena_free(&c->a);
    return ok ? 0 : 1;
}

static void case_init(Case *c, DType dt, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void case_init(Case *c, DType dt, const char *fmt, ...) {
    memset(c, 0, sizeof *c);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->name, sizeof c->name, fmt, ap);
    va_end(ap);
    c->dt = dt;
    c->idx = c->positive = c->bwd = c->w = c->dw = -1;
    ec_gen_init(&c->a, &c->d, &c->g, &c->cg, dt);
}

static void set_fwd(Case *c, GOp *f, int nin, const int *in, int out) { c->fwd = ec_add_fwd(&c->g, f, nin, in, out); }
static void set_bwd(Case *c, int dy, int nout, const int *outs) {
    const GOp *f = &c->g.ops[c->fwd];
    c->bwd = ec_add_bwd(&c->g, c->fwd, f->nin, f->out[0], dy, nout, outs);
}

static int topk(DType dt, int64_t R, int64_t E, int64_t k) {
    Case c;
    case_init(&c, dt, "moe_topk R%lld E%lld k%lld", (long long)R, (long long)E, (long long)k);
    int l = add_t(&c, "logits", dt, TC_ACT, 2, R, E, 0), ix = add_t(&c, "idx", DT_I32, TC_ACT, 2, R, k, 0);
    GOp f = cm_op(PRIM_MOE_TOPK);
    f.iattr[IA_MOE_TOPK_K] = k;
    set_fwd(&c, &f, 1, &l, ix);
    c.bwd = c.fwd; /* nothing flows back: the forward twice */
    return check(&c);
}

static int gate(DType dt, int64_t R, int64_t E, int64_t k, bool norm) {
    Case c;
    case_init(&c, dt, "moe_gate R%lld E%lld k%lld%s fwd+bwd", (long long)R, (long long)E, (long long)k,
              norm ? " normalize" : "");
    int l = add_t(&c, "logits", dt, TC_ACT, 2, R, E, 0), ix = add_t(&c, "idx", DT_I32, TC_ACT, 2, R, k, 0);
    int y = add_t(&c, "gates", dt, TC_ACT, 2, R, k, 0), dy = add_t(&c, "dgates", dt, TC_ACT, 2, R, k, 0);
    int dl = add_t(&c, "dlogits", dt, TC_ACT, 2, R, E, 0);
    c.idx = ix;
    c.E = (int)E;
    GOp f = cm_op(PRIM_MOE_GATE);
    f.iattr[IA_MOE_GATE_NORMALIZE] = norm;
    int in[2] = {l, ix};
    set_fwd(&c, &f, 2, in, y);
    int outs[1] = {dl};
    set_bwd(&c, dy, 1, outs);
    return check(&c);
}

/* shared: x [R, I] (a row per token), else [R, k, I]; ntiles > 1: tiled by expert. */
static int expert_tiled(DType dt, int64_t R, int64_t E, int64_t k, int64_t I, int64_t O, bool shared, int route, int ntiles) {
    Case c;
    char tiled[24] = "";
    if (ntiles > 1) snprintf(tiled, sizeof tiled, " %d tiles", ntiles);
    case_init(&c, dt, "moe_expert R%lld E%lld k%lld I%lld O%lld x%s %s%s", (long long)R, (long long)E, (long long)k,
              (long long)I, (long long)O, shared ? "[R,I]" : "[R,k,I]",
              route == ROUTE_SAME ? (k == 1 ? "all on 1 expert" : "all on the same experts") : "random", tiled);
    int x = shared ? add_t(&c, "x", dt, TC_ACT, 2, R, I, 0) : add_t(&c, "x", dt, TC_ACT, 3, R, k, I);
    int ix = add_t(&c, "idx", DT_I32, TC_ACT, 2, R, k, 0), w = add_t(&c, "w", dt, TC_PARAM, 3, E, O, I);
    int y = add_t(&c, "y", dt, TC_ACT, 3, R, k, O), dy = add_t(&c, "dy", dt, TC_ACT, 3, R, k, O);
    int dx = shared ? add_t(&c, "dx", dt, TC_ACT, 2, R, I, 0) : add_t(&c, "dx", dt, TC_ACT, 3, R, k, I);
    int dw = add_t(&c, "dw", dt, TC_GRAD, 3, E, O, I);
    c.ntiles = ntiles > 1 ? ntiles : 0;
    c.w = w;
    c.dw = dw;
    c.idx = ix;
    c.E = (int)E;
    c.route = route;
    GOp f = cm_op(PRIM_MOE_EXPERT);
    int in[3] = {x, ix, w};
    set_fwd(&c, &f, 3, in, y);
    int outs[3] = {dx, -1, dw};
    set_bwd(&c, dy, 3, outs);
    return check(&c);
}

static int expert(DType dt, int64_t R, int64_t E, int64_t k, int64_t I, int64_t O, bool shared, int route) {
    return expert_tiled(dt, R, E, k, I, O, shared, route, 1);
}

static int combine(DType dt, int64_t R, int64_t k, int64_t D) {
    Case c;
    case_init(&c, dt, "moe_combine R%lld k%lld D%lld fwd+bwd", (long long)R, (long long)k, (long long)D);
    int o = add_t(&c, "o", dt, TC_ACT, 3, R, k, D), wt = add_t(&c, "weights", dt, TC_ACT, 2, R, k, 0);
    int y = add_t(&c, "y", dt, TC_ACT, 2, R, D, 0), dy = add_t(&c, "dy", dt, TC_ACT, 2, R, D, 0);
    int dout = add_t(&c, "do", dt, TC_ACT, 3, R, k, D), dwt = add_t(&c, "dweights", dt, TC_ACT, 2, R, k, 0);
    GOp f = cm_op(PRIM_MOE_COMBINE);
    int in[2] = {o, wt};
    set_fwd(&c, &f, 2, in, y);
    int outs[2] = {dout, dwt};
    set_bwd(&c, dy, 2, outs);
    return check(&c);
}

static int load(DType dt, int64_t R, int64_t E, int64_t k, bool acc, int route) {
    Case c;
    case_init(&c, dt, "moe_load R%lld E%lld k%lld%s %s fwd+bwd", (long long)R, (long long)E, (long long)k,
              acc ? " +acc" : "", route == ROUTE_SAME ? "all on the same experts" : "random");
    int l = add_t(&c, "logits", dt, TC_ACT, 2, R, E, 0), ix = add_t(&c, "idx", DT_I32, TC_ACT, 2, R, k, 0);
    int a = acc ? add_t(&c, "acc", DT_F32, TC_ACT, 2, 2, E, 0) : -1;
    int y = add_t(&c, "load", DT_F32, TC_ACT, 2, 2, E, 0), dy = add_t(&c, "dload", DT_F32, TC_ACT, 2, 2, E, 0);
    int dl = add_t(&c, "dlogits", dt, TC_ACT, 2, R, E, 0);
    int da = acc ? add_t(&c, "dacc", DT_F32, TC_ACT, 2, 2, E, 0) : -1;
    c.idx = ix;
    c.E = (int)E;
    c.route = route;
    c.positive = a;
    GOp f = cm_op(PRIM_MOE_LOAD);
    f.iattr[IA_MOE_LOAD_EXPERTS] = E;
    int in[3] = {l, ix, a};
    set_fwd(&c, &f, acc ? 3 : 2, in, y);
    int outs[3] = {dl, -1, da};
    set_bwd(&c, dy, acc ? 3 : 1, outs);
    return check(&c);
}

static int balance(int64_t E) {
    Case c;
    case_init(&c, DT_F32, "moe_balance E%lld fwd+bwd", (long long)E);
    int l = add_t(&c, "load", DT_F32, TC_ACT, 2, 2, E, 0), y = add_t(&c, "aux", DT_F32, TC_ACT, 0, 0, 0, 0);
    int dy = add_t(&c, "daux", DT_F32, TC_ACT, 0, 0, 0, 0), dl = add_t(&c, "dload", DT_F32, TC_ACT, 2, 2, E, 0);
    c.positive = l;
    GOp f = cm_op(PRIM_MOE_BALANCE);
    f.fattr[FA_MOE_BALANCE_SCALE] = 0.37;
    set_fwd(&c, &f, 1, &l, y);
    int outs[1] = {dl};
    set_bwd(&c, dy, 1, outs);
    return check(&c);
}

static int shared_gate(DType dt, int64_t R, int64_t D) {
    Case c;
    case_init(&c, dt, "moe_shared_gate R%lld D%lld fwd+bwd", (long long)R, (long long)D);
    int y = add_t(&c, "y", dt, TC_ACT, 2, R, D, 0), g = add_t(&c, "logit", dt, TC_ACT, 2, R, 1, 0);
    int out = add_t(&c, "out", dt, TC_ACT, 2, R, D, 0), dout = add_t(&c, "dout", dt, TC_ACT, 2, R, D, 0);
    int dyy = add_t(&c, "dy", dt, TC_ACT, 2, R, D, 0), dg = add_t(&c, "dlogit", dt, TC_ACT, 2, R, 1, 0);
    GOp f = cm_op(PRIM_MOE_SHARED_GATE);
    int in[2] = {y, g};
    set_fwd(&c, &f, 2, in, out);
    int outs[2] = {dyy, dg};
    set_bwd(&c, dout, 2, outs);
    return check(&c);
}

int main(void) {
    int fails = 0, n = 0;
    ec_init("check_moe", "moe");
    const DType dts[] = {DT_F32, DT_BF16};
    printf("%-52s %-5s  %10s  %6s\n", "case (emulated GPU kernels vs runtime/hostk)", "dtype", "error", "tol");
    for (int i = 0; i < 2; i++) {
        DType dt = dts[i];
        fails += topk(dt, 37, 8, 2) + topk(dt, 9, 5, 5) + topk(dt, 40, 128, 8);
        fails += gate(dt, 37, 8, 2, true) + gate(dt, 37, 8, 2, false) + gate(dt, 20, 5, 1, true);
        fails += expert(dt, 37, 4, 2, 40, 72, true, ROUTE_RANDOM) + expert(dt, 37, 4, 2, 24, 40, false, ROUTE_RANDOM);
        fails += expert(dt, 150, 8, 2, 40, 72, true, ROUTE_SAME) + expert(dt, 130, 4, 1, 33, 20, true, ROUTE_SAME);
        fails += expert(dt, 200, 16, 4, 24, 70, true, ROUTE_RANDOM);
        fails += combine(dt, 37, 2, 40) + combine(dt, 11, 1, 72);
        fails += load(dt, 37, 6, 2, true, ROUTE_RANDOM) + load(dt, 37, 6, 2, false, ROUTE_SAME);
        fails += shared_gate(dt, 37, 40);
        /* tiled by expert: 2 and 4 tiles; with every token on experts 7
         * and 6 of 8, tile 0 of 2 has no rows */
        fails += expert_tiled(dt, 37, 4, 2, 40, 72, true, ROUTE_RANDOM, 2) + expert_tiled(dt, 37, 4, 2, 24, 40, false, ROUTE_RANDOM, 4);
        fails += expert_tiled(dt, 150, 8, 2, 40, 72, true, ROUTE_SAME, 2) + expert_tiled(dt, 200, 16, 4, 24, 70, true, ROUTE_RANDOM, 4);
        n += 20;
    }
    fails += balance(6) + balance(300);
    n += 2;
    printf("%d cases, %d failed\n", n, fails);
    return fails ? 1 : 0;
}
