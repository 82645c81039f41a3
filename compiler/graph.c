#include "graph.h"
#include <inttypes.h>
#include <string.h>

const char *const prim_names[PRIM_COUNT] = {
#define PRIM(id, name, nin_min, nin_max, nout) name,
#include "prim.def"
#undef PRIM
};

const char *const tensor_class_names[TC_COUNT] = {
    "input", "param", "grad", "master", "momentum", "variance",
    "activation", "checkpoint", "workspace", "const",
};

const char *const op_kind_names[OP_KIND_COUNT] = {
    "fwd", "bwd", "recompute", "zero_grad", "loss_grad", "grad_norm", "adam",
};

void graph_init(Graph *g, Arena *a) {
    memset(g, 0, sizeof *g);
    g->arena = a;
    g->loss = -1;
}

int graph_add_tensor(Graph *g, const char *name, DType dt, int rank, const int64_t *dims, TensorClass cls) {
    if (rank < 0 || rank > GRAPH_MAX_RANK) return -1;
    if (g->ntensors == g->tcap) {
        int nc = g->tcap ? g->tcap * 2 : 64;
        GTensor *nt = ARENA_NEWN(g->arena, GTensor, nc);
        if (!nt) return -1;
        if (g->ntensors) memcpy(nt, g->tensors, sizeof *nt * (size_t)g->ntensors);
        g->tensors = nt;
        g->tcap = nc;
    }
    GTensor *t = &g->tensors[g->ntensors];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dt;
    t->rank = rank;
    t->numel = 1;
    for (int i = 0; i < rank; i++) {
        t->dims[i] = dims[i];
        t->numel *= dims[i];
    }
    t->cls = cls;
    t->producer = -1;
    t->param = -1;
    t->grad = -1;
    t->grad_of = -1;
    t->master = t->momentum = t->variance = -1;
    t->segment = -1;
    t->span = SPAN_NONE;
    return g->ntensors++;
}

int graph_add_op(Graph *g, const GOp *op) {
    if (g->nops == g->ocap) {
        int nc = g->ocap ? g->ocap * 2 : 64;
        GOp *no = ARENA_NEWN(g->arena, GOp, nc);
        if (!no) return -1;
        if (g->nops) memcpy(no, g->ops, sizeof *no * (size_t)g->nops);
        g->ops = no;
        g->ocap = nc;
    }
    g->ops[g->nops] = *op;
    for (int i = 0; i < op->nout; i++)
        if (op->out[i] >= 0 && op->out[i] < g->ntensors) g->tensors[op->out[i]].producer = g->nops;
    return g->nops++;
}

int64_t graph_param_count(const Graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].cls == TC_PARAM) n += g->tensors[i].numel;
    return n;
}

const char *graph_shape_str(const Graph *g, int tensor, char *buf, size_t n) {
    const GTensor *t = &g->tensors[tensor];
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < t->rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}
