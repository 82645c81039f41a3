#include "graph.h"
#include <inttypes.h>
#include <string.h>

GOp graph_op_blank(OpKind k) {
    GOp o;
    memset(&o, 0, sizeof o);
    o.kind = k;
    o.segment = -1;
    o.fwd = -1;
    o.scope = "";
    o.span = SPAN_NONE;
    for (int i = 0; i < GRAPH_MAX_IN; i++) o.in[i] = -1;
    for (int i = 0; i < GRAPH_MAX_OPOUT; i++) o.out[i] = -1;
    return o;
}

const char *const opt_state_names[OPT_NSTATES] = {"fp32", "bf16", "8bit"};

DType graph_moment_dtype(const TrainConfig *t, int64_t numel, bool variance) {
    if (t->opt_state == OPT_STATE_BF16) return DT_BF16;
    if (t->opt_state == OPT_STATE_8BIT && numel >= OPT_STATE_8BIT_MIN) return variance ? DT_UDYN8 : DT_DYN8;
    return DT_F32;
}

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
        if (dims[i] < 0 || __builtin_mul_overflow(t->numel, dims[i], &t->numel)) return -1; /* no such tensor */
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

int64_t graph_frozen_count(const Graph *g, int *ntensors) {
    int64_t n = 0;
    int k = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].cls == TC_PARAM && g->tensors[i].frozen) {
            n += g->tensors[i].numel;
            k++;
        }
    if (ntensors) *ntensors = k;
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

/* ---- the --emit=graph listing ----
 * Stable text, one item a line:
 *   graph NAME
 *   input NAME DTYPE SHAPE
 *   param NAME DTYPE SHAPE NUMEL INIT
 *   op INDEX [KIND] PRIM IN, IN -> OUT DTYPE SHAPE[, OUT ...] [ATTRS] [@SCOPE] [seg N]
 *   loss NAME
 *   total parameters N (in K tensors)
 */
#include "prim.h"

static void dump_init(const GTensor *t, FILE *out) {
    switch (t->init) {
    case INIT_NORMAL: fprintf(out, "normal(%g)", t->init_std); break;
    case INIT_UNIFORM: fprintf(out, "uniform(%g)", t->init_std); break;
    case INIT_ZEROS: fputs("zeros", out); break;
    case INIT_ONES: fputs("ones", out); break;
    default: fputs("none", out); break;
    }
}

static const char *tname(const Graph *g, int id, char *buf, size_t n) {
    if (id < 0 || id >= g->ntensors) return "-";
    if (g->tensors[id].name) return g->tensors[id].name;
    snprintf(buf, n, "%%%d", id);
    return buf;
}

/* Every attribute of the op's primitive, from its row (compiler/prim.c):
 * name=value, a flag by its name when set, a word attribute by its word;
 * an optional number whose default 0 means "not used" (attention's window,
 * scale and softcap, rope's beta_fast, rmsnorm's offset) only when it is
 * not 0. */
static void dump_attrs(const GOp *o, FILE *out) {
    const PrimInfo *p = prim_info(o->prim);
    for (int i = 0; p && i < p->nattr; i++) {
        const PrimAttr *a = &p->attrs[i];
        if (a->kind == PA_FLOATS) continue; /* the lists: the table, below */
        int64_t v = a->kind == PA_FLOAT ? 0 : o->iattr[a->slot];
        if (!a->required && a->def == 0 && (a->kind == PA_INT || a->kind == PA_FLOAT) &&
            (a->kind == PA_FLOAT ? o->fattr[a->slot] == 0 : v == 0))
            continue;
        switch (a->kind) {
        case PA_FLAG:
            if (v) fprintf(out, " %s", a->name);
            break;
        case PA_FLOAT:
            if (a->required || a->def != 0 || o->fattr[a->slot] != 0) fprintf(out, " %s=%g", a->name, o->fattr[a->slot]);
            break;
        case PA_WORD: {
            int nw = 0;
            while (a->words[nw]) nw++;
            if (v >= 0 && v < nw) fprintf(out, " %s=%s", a->name, a->words[v]);
            else fprintf(out, " %s=%" PRId64, a->name, v);
            break;
        }
        default: fprintf(out, " %s=%" PRId64, a->name, v); break;
        }
    }
    if (o->ntable) fprintf(out, " table=[%d numbers]", o->ntable);
}

void graph_dump(const Graph *g, FILE *out) {
    char b1[64], sh[160];
    fprintf(out, "graph %s\n", g->model_name ? g->model_name : "?");
    for (int i = 0; i < g->ntensors; i++) {
        const GTensor *t = &g->tensors[i];
        if (t->cls != TC_INPUT) continue;
        fprintf(out, "input %s %s %s\n", tname(g, i, b1, sizeof b1), prim_dtype_str(t->dtype),
                graph_shape_str(g, i, sh, sizeof sh));
    }
    int nparams = 0;
    for (int i = 0; i < g->ntensors; i++) {
        const GTensor *t = &g->tensors[i];
        if (t->cls != TC_PARAM) continue;
        nparams++;
        fprintf(out, "param %s %s %s %" PRId64 " ", tname(g, i, b1, sizeof b1), prim_dtype_str(t->dtype),
                graph_shape_str(g, i, sh, sizeof sh), t->numel);
        dump_init(t, out);
        if (t->frozen) fputs(" frozen", out);
        fputc('\n', out);
    }
    for (int k = 0; k < g->nops; k++) {
        const GOp *o = &g->ops[k];
        fprintf(out, "op %d ", k);
        if (o->kind != OP_FWD && o->kind >= 0 && o->kind < OP_KIND_COUNT) fprintf(out, "%s ", op_kind_names[o->kind]);
        fputs(o->prim >= 0 && o->prim < PRIM_COUNT ? prim_names[o->prim] : "?", out);
        for (int i = 0; i < o->nin; i++) fprintf(out, "%s%s", i ? ", " : " ", tname(g, o->in[i], b1, sizeof b1));
        fputs(" ->", out);
        for (int i = 0; i < o->nout; i++) {
            int t = o->out[i];
            fprintf(out, "%s %s", i ? "," : "", tname(g, t, b1, sizeof b1));
            if (t >= 0 && t < g->ntensors)
                fprintf(out, " %s %s", prim_dtype_str(g->tensors[t].dtype), graph_shape_str(g, t, sh, sizeof sh));
        }
        dump_attrs(o, out);
        if (o->scope && o->scope[0]) fprintf(out, " @%s", o->scope);
        if (o->segment >= 0) fprintf(out, " seg %d", o->segment);
        fputc('\n', out);
    }
    if (g->loss >= 0) fprintf(out, "loss %s\n", tname(g, g->loss, b1, sizeof b1));
    fprintf(out, "total parameters %" PRId64 " (in %d tensors)\n", graph_param_count(g), nparams);
    int nfrozen;
    int64_t frozen = graph_frozen_count(g, &nfrozen);
    if (nfrozen) fprintf(out, "frozen parameters %" PRId64 " (in %d tensors)\n", frozen, nfrozen);
}
