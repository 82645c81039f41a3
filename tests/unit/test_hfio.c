/* hfio: Hugging Face weights in and out of the executor.
 *
 * A hand-built model (tests/unit/plan_fixture.h) gets an hf mapping that
 * uses every feature: transposed pieces, a parameter concatenated from two
 * HF tensors, one HF tensor cut into two parameters by column ranges, a
 * parameter made of two column ranges of one tensor in swapped order; the
 * checkpoint is sharded (index + 2 files) and mixes F32, BF16 and F16.
 * For every placement of the parameters (GPU arena, CPU, NVMe, tiled) and
 * a tiny and the default staging buffer: the import sets every parameter
 * exactly (gathered back and compared element by element), moments are
 * zero, training from it gives the reference executor's losses from the
 * same weights, the export writes the checkpoint back bit for bit (and
 * sharded when told), and a trained state survives export + import. A
 * bf16 plan gets exact f32 masters. Every bad input is refused with its
 * message, before anything is written. Run alone it is one rank; under
 * mpirun (tests/e2e/hfio_mpi.sh) the same on 2 ranks. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "exec.h"
#include "half.h"
#include "hfio.h"
#include "planner.h"
#include "refexec.h"
#include "safetensors.h"
#include "verify.h"
#include "plan_fixture.h"

static Comm C;
enum { V = 64, D = 32, STEPS = 3 };
static char work[128], nvme_dir[160];
static char err[16384];

/* ---- the Hugging Face checkpoint ---- */

typedef struct HfT {
    const char *name;
    int rank;
    int64_t shape[4];
    StDtype dtype;
    float *v;                  /* the values, exactly representable in dtype */
} HfT;

static HfT H[] = {
    {"model.embed.weight", 2, {V, D}, ST_F32, NULL},
    {"h.0.fc_a.weight", 2, {2 * D, D}, ST_BF16, NULL},
    {"h.0.fc_b.weight", 2, {2 * D, D}, ST_F32, NULL},
    {"h.0.b_fused", 1, {5 * D}, ST_F16, NULL},
    {"h.0.proj.weight", 2, {4 * D, D}, ST_F32, NULL},
    {"h.0.attn.bias", 4, {1, 1, 4, 4}, ST_F32, NULL},     /* a mask buffer: ignored */
    {"h.1.swap.weight", 2, {4 * D, D}, ST_F32, NULL},
    {"h.1.fc.bias", 1, {4 * D}, ST_F32, NULL},
    {"h.1.proj.weight", 2, {D, 4 * D}, ST_F32, NULL},
    {"h.1.proj.bias", 1, {D}, ST_BF16, NULL},
    {"lm_head.weight", 2, {V, D}, ST_F32, NULL},
    {"unused.thing", 1, {3}, ST_F32, NULL},               /* maps to nothing: a warning */
};
enum { NH = sizeof H / sizeof *H, SPLIT = 6 };

typedef struct Pc {
    const char *param, *hf;
    int transpose;
    int64_t src, cols;
} Pc;
static const Pc MAP[] = {
    {"wte", "model.embed.weight", 0, 0, D},
    {"block.0.mlp.w1", "h.0.fc_a.weight", 1, 0, 2 * D},
    {"block.0.mlp.w1", "h.0.fc_b.weight", 1, 0, 2 * D},
    {"block.0.mlp.b1", "h.0.b_fused", 0, 0, 4 * D},
    {"block.0.mlp.w2", "h.0.proj.weight", 0, 0, D},
    {"block.0.mlp.b2", "h.0.b_fused", 0, 4 * D, D},
    {"block.1.mlp.w1", "h.1.swap.weight", 1, 2 * D, 2 * D},
    {"block.1.mlp.w1", "h.1.swap.weight", 1, 0, 2 * D},
    {"block.1.mlp.b1", "h.1.fc.bias", 0, 0, 4 * D},
    {"block.1.mlp.w2", "h.1.proj.weight", 1, 0, D},
    {"block.1.mlp.b2", "h.1.proj.bias", 0, 0, D},
    {"head.w", "lm_head.weight", 1, 0, V},
};
enum { NMAP = sizeof MAP / sizeof *MAP };
/* The mapping in use (a test may swap in another of NMAP pieces). */
static const Pc *map = MAP;

static int64_t numel(const HfT *h) {
    int64_t n = 1;
    for (int d = 0; d < h->rank; d++) n *= h->shape[d];
    return n;
}
static const HfT *hf_named(const char *name) {
    for (int k = 0; k < NH; k++)
        if (!strcmp(H[k].name, name)) return &H[k];
    return NULL;
}

static void make_values(void) {
    uint64_t x = 0x1234567;
    for (int k = 0; k < NH; k++) {
        int64_t n = numel(&H[k]);
        H[k].v = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            float v = (float)((double)(x % 20001) / 10000.0 - 1.0) * 0.08f;
            if (H[k].dtype == ST_BF16) v = half_bf16_to_f32(half_f32_to_bf16(v));
            if (H[k].dtype == ST_F16) v = half_f16_to_f32(half_f32_to_f16(v));
            H[k].v[i] = v;
        }
    }
}

/* Outside a test (main writes the checkpoint) check's asserts may not run. */
#define REQUIRE(c)                                                                  \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, #c, err); \
            abort();                                                                \
        }                                                                           \
    } while (0)

static void write_file(const char *path, int k0, int k1) {
    StOutTensor t[NH];
    for (int k = k0; k < k1; k++) {
        t[k - k0] = (StOutTensor){.name = H[k].name, .dtype = H[k].dtype, .rank = H[k].rank};
        memcpy(t[k - k0].shape, H[k].shape, sizeof H[k].shape);
    }
    uint8_t *hdr;
    size_t hl;
    const char *meta[] = {"format", "pt"};
    REQUIRE(st_header_build(t, (size_t)(k1 - k0), meta, 1, &hdr, &hl, err, sizeof err) == 0);
    FILE *f = fopen(path, "wb");
    REQUIRE(f != NULL);
    REQUIRE(fwrite(hdr, 1, hl, f) == hl);
    for (int k = k0; k < k1; k++) {
        uint8_t *b = malloc(t[k - k0].bytes);
        st_from_f32(H[k].dtype, H[k].v, b, numel(&H[k]));
        REQUIRE(fwrite(b, 1, t[k - k0].bytes, f) == t[k - k0].bytes);
        free(b);
    }
    REQUIRE(fclose(f) == 0);
    free(hdr);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(text, f);
    REQUIRE(fclose(f) == 0);
}

/* work/ckpt: model-0000k-of-00002.safetensors and the index (rank 0 writes). */
static void write_checkpoint(void) {
    char p[300];
    if (C.rank == 0) {
        snprintf(p, sizeof p, "%s/ckpt", work);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/ckpt/model-00001-of-00002.safetensors", work);
        write_file(p, 0, SPLIT);
        snprintf(p, sizeof p, "%s/ckpt/model-00002-of-00002.safetensors", work);
        write_file(p, SPLIT, NH);
        char idx[4096];
        size_t u = (size_t)snprintf(idx, sizeof idx, "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {");
        for (int k = 0; k < NH; k++)
            u += (size_t)snprintf(idx + u, sizeof idx - u, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", k ? ", " : "", H[k].name,
                                  k < SPLIT ? 1 : 2);
        snprintf(idx + u, sizeof idx - u, "}}");
        snprintf(p, sizeof p, "%s/ckpt/model.safetensors.index.json", work);
        write_text(p, idx);
    }
    comm_barrier(&C);
}

/* ---- the plan ---- */

static FixtureShape shape(int64_t batch, DType dt) {
    (void)fx_small;
    return (FixtureShape){.batch = batch, .seq = 8, .vocab = V, .hidden = D, .layers = 2, .dtype = dt, .checkpoint_every = 1,
                          .grad_clip = 1.0};
}

static int tensor_named(const Plan *p, const char *name) {
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (!strcmp(p->tensors[t].name, name)) return (int)t;
    ck_abort_msg("no tensor %s", name);
    return -1;
}

static void attach_hf(Plan *p, const Pc *map, int n) {
    p->hf.arch = "TestForCausalLM";
    p->hf.config = "{\"model_type\": \"test\", \"hidden_size\": 32}\n";
    p->hf.pieces = arena_alloc(&p->arena, sizeof *p->hf.pieces * (size_t)n);
    for (int i = 0; i < n; i++)
        p->hf.pieces[i] = (PlanHfPiece){tensor_named(p, map[i].param), map[i].hf, (uint8_t)map[i].transpose, map[i].src, map[i].cols, 0, 0, 0};
    p->hf.npieces = (uint32_t)n;
}

typedef struct Variant { int params, optimizer, tiles; DType dtype; size_t staging; } Variant;

static Plan *make_plan(const Variant *v) {
    Arena a;
    DiagSink d;
    arena_init(&a);
    diag_init(&d);
    Graph g;
    ck_assert(fx_build(&g, &a, &d, shape(2, v->dtype)));
    Target t;
    ck_assert(target_builtin("host", &t));
    PlannerOptions o;
    planner_options_default(&o);
    o.ranks = C.size;
    o.tier[PC_PARAMS] = v->params;
    o.tier[PC_GRADS] = v->optimizer == TIER_GPU ? TIER_GPU : TIER_CPU;
    o.tier[PC_OPTIMIZER] = v->optimizer;
    o.tier[PC_CHECKPOINTS] = TIER_CPU;
    o.whole_below = 64;
    TilePin pin = {"block.*.mlp.w*", v->tiles, SPAN_NONE};
    if (v->tiles > 1) { o.tiles = &pin; o.ntiles = 1; }
    PlannerResult res;
    bool ok = planner_run(&g, &t, &o, &a, &d, &res);
    if (!ok) diag_render(&d, NULL, stderr, false);
    ck_assert(ok);
    diag_free(&d);
    arena_free(&a);
    attach_hf(res.plan, MAP, NMAP);
    char vm[4096];
    ck_assert_msg(verify_plan(res.plan, vm, sizeof vm) == 0, "%s", vm);
    return res.plan;
}

/* What parameter `name` must hold after the import, by the mapping's
 * definition (a straightforward loop over its elements). */
static void expected(const char *name, int64_t rows, int64_t cols, float *out) {
    int64_t pc = 0;
    for (int k = 0; k < NMAP; k++) {
        if (strcmp(map[k].param, name)) continue;
        const HfT *h = hf_named(map[k].hf);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = pc; j < pc + map[k].cols; j++) {
                int64_t c = map[k].src + j - pc;
                out[i * cols + j] = map[k].transpose ? h->v[c * h->shape[1] + i] : h->v[i * h->shape[h->rank - 1] + c];
            }
        pc += map[k].cols;
    }
}

static float *gather_f32(Rt *r, const Plan *p, int t, const HfioOptions *o) {
    const PlanTensor *pt = &p->tensors[t];
    size_t es = (size_t)plan_dtype_size(pt->dtype);
    uint8_t *raw = malloc((size_t)pt->numel * es);
    float *f = malloc(sizeof(float) * (size_t)pt->numel);
    ck_assert_msg(hfio_gather(r, t, raw, o, err, sizeof err) == 0, "%s", err);
    st_to_f32((StDtype)st_dtype_from_plan(pt->dtype), raw, 1, f, pt->numel);
    free(raw);
    return f;
}

/* Every mapped parameter equals the mapping's values (rounded to its
 * dtype), its master the exact values, its moments zero. */
static void check_imported(Rt *r, const Plan *p, const HfioOptions *o, const char *what) {
    for (int k = 0; k < NMAP; k++) {
        if (k && !strcmp(map[k - 1].param, map[k].param)) continue;
        int t = tensor_named(p, map[k].param);
        const PlanTensor *pt = &p->tensors[t];
        int64_t cols = pt->dims[pt->rank - 1], rows = pt->numel / cols;
        float *want = malloc(sizeof(float) * (size_t)pt->numel);
        expected(pt->name, rows, cols, want);
        float *got = gather_f32(r, p, t, o);
        float *master = pt->master >= 0 ? gather_f32(r, p, pt->master, o) : NULL;
        float *m1 = gather_f32(r, p, pt->momentum, o), *v1 = gather_f32(r, p, pt->variance, o);
        for (int64_t i = 0; C.rank == 0 && i < pt->numel; i++) {
            float w = pt->dtype == DT_BF16 ? half_bf16_to_f32(half_f32_to_bf16(want[i])) : want[i];
            /* one assertion per failure: check records every assertion it runs */
            if (got[i] != w) ck_abort_msg("%s: %s[%ld] = %.9g, expected %.9g", what, pt->name, (long)i, got[i], w);
            if (master && master[i] != want[i])
                ck_abort_msg("%s: master of %s[%ld] = %.9g, expected %.9g", what, pt->name, (long)i, master[i], want[i]);
            if (m1[i] != 0 || v1[i] != 0) ck_abort_msg("%s: moments of %s[%ld] not zero", what, pt->name, (long)i);
        }
        free(want); free(got); free(master); free(m1); free(v1);
    }
}

/* The exported directory holds the checkpoint's mapped tensors, bit for bit. */
static void check_exported(const char *dir, int want_files, bool exact) {
    if (C.rank != 0) return;
    StSet s;
    ck_assert_msg(st_set_open(&s, dir, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.nfiles, want_files);
    ck_assert_uint_eq(s.n, NH - 2);
    for (int k = 0; k < NH; k++) {
        const StEntry *e = st_set_find(&s, H[k].name);
        if (!strcmp(H[k].name, "unused.thing") || !strcmp(H[k].name, "h.0.attn.bias")) { ck_assert_ptr_null(e); continue; }
        ck_assert_msg(e != NULL, "%s: no %s", dir, H[k].name);
        ck_assert_int_eq(e->rank, H[k].rank);
        for (int d = 0; d < e->rank; d++) ck_assert_int_eq(e->shape[d], H[k].shape[d]);
        if (!exact) continue;
        uint8_t *raw = malloc(e->bytes);
        float *f = malloc(sizeof(float) * e->numel);
        ck_assert_int_eq(st_read(st_set_file(&s, e), e->offset, raw, e->bytes, err, sizeof err), 0);
        st_to_f32(e->dtype, raw, 1, f, (int64_t)e->numel);
        for (uint64_t i = 0; i < e->numel; i++)
            if (f[i] != H[k].v[i]) ck_abort_msg("%s: %s[%lu] = %.9g, expected %.9g", dir, H[k].name, (unsigned long)i, f[i], H[k].v[i]);
        free(raw); free(f);
    }
    st_set_close(&s);
    char p[400];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    char text[200] = "";
    ck_assert_uint_gt(fread(text, 1, sizeof text - 1, f), 0);
    fclose(f);
    ck_assert_str_eq(text, "{\"model_type\": \"test\", \"hidden_size\": 32}\n");
    snprintf(p, sizeof p, "%s.tmp.%d", dir, (int)getpid());
    ck_assert_int_ne(access(p, F_OK), 0);
}

/* ---- training from the imported weights, against the reference ---- */

static void batch(int64_t s, int64_t rows, int64_t T, int32_t *tok, int32_t *tgt) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(s + 1);
    for (int64_t i = 0; i < rows * T; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)V);
        tgt[i] = (int32_t)((tok[i] * 7 + 3) % V);
    }
}

/* The reference executor on the global batch, from the imported weights. */
static void reference_losses(double *out) {
    Arena a; DiagSink d; Graph g;
    arena_init(&a); diag_init(&d);
    FixtureShape fs = shape(2 * C.size, DT_F32);
    ck_assert(fx_build(&g, &a, &d, fs));
    RefExec r;
    ck_assert_int_eq(ref_init(&r, &g, g.train.seed), 0);
    for (int t = 0; t < g.ntensors; t++) {
        const GTensor *gt = &g.tensors[t];
        if (gt->cls != TC_PARAM) continue;
        int64_t cols = gt->dims[gt->rank - 1];
        float *v = malloc(sizeof(float) * (size_t)gt->numel);
        expected(gt->name, gt->numel / cols, cols, v);
        for (int64_t i = 0; i < gt->numel; i++) ref_set(&r, t, i, v[i]);
        free(v);
    }
    int64_t rows = fs.batch, T = fs.seq;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(rows * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(rows * T));
    for (int s = 0; s < STEPS; s++) {
        batch(s, rows, T, tok, tgt);
        float loss;
        ck_assert_int_eq(ref_forward_backward(&r, tok, tgt, 1.0f, &loss), 0);
        ck_assert_int_eq(ref_optimizer_step(&r), 0);
        out[s] = loss;
    }
    free(tok); free(tgt);
    ref_free(&r);
    arena_free(&a); diag_free(&d);
}

static void train(Rt *r, const double *ref, const char *what) {
    int64_t B = 2, T = 8, R = C.size;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * R * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(B * R * T));
    for (int s = 0; s < STEPS; s++) {
        batch(s, B * R, T, tok, tgt);
        const int32_t *mt[1] = {tok + C.rank * B * T}, *mg[1] = {tgt + C.rank * B * T};
        RtStepStats st;
        ck_assert_msg(rt_step(r, mt, mg, 1, &st, err, sizeof err) == 0, "%s: %s", what, err);
        if (ref)
            ck_assert_msg(fabs(st.loss - ref[s]) <= 1e-5 * fabs(ref[s]), "%s: step %d loss %.9g, reference %.9g", what, s + 1, st.loss, ref[s]);
    }
    free(tok); free(tgt);
}

static char ckpt[200];

static const Variant variants[] = {
    {TIER_GPU, TIER_GPU, 1, DT_F32, 3000},
    {TIER_CPU, TIER_CPU, 1, DT_F32, 0},
    {TIER_NVME, TIER_NVME, 1, DT_F32, 3000},
    {TIER_CPU, TIER_CPU, 2, DT_F32, 700},
    {TIER_NVME, TIER_NVME, 4, DT_F32, 3000},
    {TIER_NVME, TIER_NVME, 1, DT_F32, 480},
};

static void rmrf(const char *p) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", p);
    if (C.rank == 0) ck_assert_int_eq(system(cmd), 0);
    comm_barrier(&C);
}

/* A listener that keeps what a phase reported: how often, the last
 * figures, and whether done ever went down or past the total. */
typedef struct Recorder {
    Progress base;
    char phase[64], unit[16];
    int reports;
    uint64_t done, total;
    bool backwards, past_total;
} Recorder;

static void record(Progress *p, const char *phase, const char *unit, uint64_t done, uint64_t total) {
    Recorder *r = (Recorder *)p;
    if (r->reports && done < r->done) r->backwards = true;
    if (total && done > total) r->past_total = true;
    snprintf(r->phase, sizeof r->phase, "%s", phase);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->reports++;
    r->done = done;
    r->total = total;
}

START_TEST(import_train_export) {
    const Variant *v = &variants[_i];
    char what[160], out[300], out2[300];
    snprintf(what, sizeof what, "params %s, optimizer %s, %d tiles, staging %zu, %d ranks", plan_tier_names[v->params],
             plan_tier_names[v->optimizer], v->tiles, v->staging, C.size);
    Plan *p = make_plan(v);
    RtOptions ro = {.nvme_dir = nvme_dir};
    Recorder heard = {.base = {record}};
    HfioOptions ho = {.staging_bytes = v->staging, .max_shard_bytes = 20000, .progress = &heard.base};
    Rt *r = rt_create(p, &C, &ro, err, sizeof err);
    ck_assert_msg(r != NULL, "%s: %s", what, err);
    HfioReport rep;
    ck_assert_msg(hfio_import(r, ckpt, &ho, &rep, err, sizeof err) == 0, "%s: %s", what, err);
    /* the import's progress: bytes read, up to exactly what it read */
    ck_assert_str_eq(heard.phase, "importing weights");
    ck_assert_str_eq(heard.unit, "B");
    ck_assert_int_gt(heard.reports, 2);
    ck_assert_msg(!heard.backwards && !heard.past_total, "%s: progress went backwards or past its total", what);
    ck_assert_uint_eq(heard.total, rep.bytes);
    ck_assert_uint_eq(heard.done, rep.bytes);
    heard = (Recorder){.base = {record}};
    ck_assert_int_eq(rep.files, 2);
    ck_assert_int_eq(rep.tensors, NH - 2);
    ck_assert_int_eq(rep.params, 10);
    ck_assert_int_eq(rep.params_kept, 0);
    ck_assert_int_eq(rep.nunused, 1);
    ck_assert_str_eq(rep.unused, "unused.thing");
    ck_assert_int_eq(rep.nignored, 1);
    ck_assert_str_eq(rep.ignored, "h.0.attn.bias");
    ck_assert_uint_gt(rep.bytes, 0);
    check_imported(r, p, &ho, what);
    /* straight back out: the same bytes, in shards of at most 20000 bytes */
    snprintf(out, sizeof out, "%s/export-%d", work, _i);
    ck_assert_msg(hfio_export(r, out, &ho, &rep, err, sizeof err) == 0, "%s: %s", what, err);
    ck_assert_int_eq(rep.tensors, NH - 2);
    ck_assert_str_eq(heard.phase, "exporting weights");
    ck_assert_int_eq(heard.reports, NH - 2);
    ck_assert_msg(!heard.backwards && !heard.past_total, "%s: export progress went backwards or past its total", what);
    ck_assert_uint_eq(heard.done, NH - 2);
    ck_assert_uint_eq(heard.total, NH - 2);
    if (C.rank == 0) ck_assert_int_eq(rep.files, 6);
    check_exported(out, 6, true);
    double ref[STEPS];
    reference_losses(ref);
    train(r, ref, what);
    /* a trained state survives export + import */
    snprintf(out2, sizeof out2, "%s/trained-%d", work, _i);
    ck_assert_msg(hfio_export(r, out2, &(HfioOptions){.staging_bytes = v->staging}, &rep, err, sizeof err) == 0, "%s: %s", what, err);
    check_exported(out2, 1, false);
    char nvme2[200];
    snprintf(nvme2, sizeof nvme2, "%s/b", nvme_dir); /* two executors at once: one swap file each */
    mkdir(nvme2, 0755);
    RtOptions ro2 = {.nvme_dir = nvme2};
    Rt *r2 = rt_create(p, &C, &ro2, err, sizeof err);
    ck_assert_msg(r2 != NULL, "%s", err);
    ck_assert_msg(hfio_import(r2, out2, &ho, &rep, err, sizeof err) == 0, "%s: %s", what, err);
    ck_assert_int_eq(rep.nunused + rep.nignored, 0);
    for (uint32_t t = 0; t < p->ntensors; t++) {
        if (p->tensors[t].cls != TC_PARAM) continue;
        float *a = gather_f32(r, p, (int)t, &ho), *b = gather_f32(r2, p, (int)t, &ho);
        if (C.rank == 0) ck_assert_msg(!memcmp(a, b, sizeof(float) * (size_t)p->tensors[t].numel), "%s: %s differs after the round trip", what, p->tensors[t].name);
        free(a); free(b);
    }
    /* zinfrun --export's file (the plan's own names) reads back through the
     * same import, chosen by the names it holds */
    char own[300];
    snprintf(own, sizeof own, "%s/own-%d.safetensors", work, _i);
    ck_assert_msg(rt_export_safetensors(r, own, err, sizeof err) == 0, "%s: %s", what, err);
    /* r2 back to the untrained weights first (an HF import), then the export */
    ck_assert_msg(hfio_import(r2, ckpt, &ho, &rep, err, sizeof err) == 0, "%s: %s", what, err);
    ck_assert_int_eq(rep.own_names, false);
    ck_assert_msg(hfio_import(r2, own, &ho, &rep, err, sizeof err) == 0, "%s: %s", what, err);
    ck_assert_int_eq(rep.own_names, true);
    ck_assert_int_eq(rep.params, 10);
    ck_assert_int_eq(rep.nunused + rep.nignored + rep.params_kept, 0);
    for (uint32_t t = 0; t < p->ntensors; t++) {
        if (p->tensors[t].cls != TC_PARAM) continue;
        float *a = gather_f32(r, p, (int)t, &ho), *b = gather_f32(r2, p, (int)t, &ho);
        if (C.rank == 0) ck_assert_msg(!memcmp(a, b, sizeof(float) * (size_t)p->tensors[t].numel), "%s: %s differs after --export and import", what, p->tensors[t].name);
        free(a); free(b);
    }
    if (C.rank == 0) unlink(own);
    rt_destroy(r2);
    rt_destroy(r);
    plan_free(p);
    rmrf(out);
    rmrf(out2);
}
END_TEST

START_TEST(bf16_masters) {
    Variant v = {TIER_NVME, TIER_CPU, 2, DT_BF16, 2000};
    Plan *p = make_plan(&v);
    RtOptions ro = {.nvme_dir = nvme_dir};
    HfioOptions ho = {.staging_bytes = v.staging};
    Rt *r = rt_create(p, &C, &ro, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_msg(hfio_import(r, ckpt, &ho, NULL, err, sizeof err) == 0, "%s", err);
    check_imported(r, p, &ho, "bf16");
    char out[300];
    snprintf(out, sizeof out, "%s/bf16", work);
    ck_assert_msg(hfio_export(r, out, &ho, NULL, err, sizeof err) == 0, "%s", err);
    if (C.rank == 0) {
        StSet s;
        ck_assert_int_eq(st_set_open(&s, out, err, sizeof err), 0);
        const StEntry *e = st_set_find(&s, "lm_head.weight");
        ck_assert_int_eq(e->dtype, ST_BF16);
        uint16_t *raw = malloc(e->bytes);
        ck_assert_int_eq(st_read(st_set_file(&s, e), e->offset, raw, e->bytes, err, sizeof err), 0);
        const HfT *h = hf_named("lm_head.weight");
        for (uint64_t i = 0; i < e->numel; i++)
            if (raw[i] != half_f32_to_bf16(h->v[i])) ck_abort_msg("lm_head.weight[%lu] exported as %04x", (unsigned long)i, raw[i]);
        free(raw);
        st_set_close(&s);
    }
    train(r, NULL, "bf16");
    rt_destroy(r);
    plan_free(p);
    rmrf(out);
}
END_TEST

/* A tied weight read both ways: the head reads the embedding's tensor
 * transposed. The import sets both from it; the export writes it once, from
 * the embedding, and no lm_head.weight. */
START_TEST(tied_alias) {
    Pc tied[NMAP];
    memcpy(tied, MAP, sizeof tied);
    tied[11].hf = "model.embed.weight";
    map = tied;
    Variant v = {TIER_NVME, TIER_CPU, 2, DT_F32, 480};
    Plan *p = make_plan(&v);
    attach_hf(p, tied, NMAP);
    RtOptions ro = {.nvme_dir = nvme_dir};
    HfioOptions ho = {.staging_bytes = v.staging};
    Rt *r = rt_create(p, &C, &ro, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    HfioReport rep;
    ck_assert_msg(hfio_import(r, ckpt, &ho, &rep, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rep.nignored, 2); /* lm_head.weight (tied), h.0.attn.bias */
    ck_assert_str_eq(rep.ignored, "h.0.attn.bias, lm_head.weight");
    check_imported(r, p, &ho, "tied");
    char out[300];
    snprintf(out, sizeof out, "%s/tied", work);
    ck_assert_msg(hfio_export(r, out, &ho, &rep, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rep.tensors, NH - 3);
    if (C.rank == 0) {
        StSet s;
        ck_assert_int_eq(st_set_open(&s, out, err, sizeof err), 0);
        ck_assert_uint_eq(s.n, NH - 3);
        ck_assert_ptr_null(st_set_find(&s, "lm_head.weight"));
        const StEntry *e = st_set_find(&s, "model.embed.weight");
        float *f = malloc(e->bytes);
        ck_assert_int_eq(st_read(st_set_file(&s, e), e->offset, f, e->bytes, err, sizeof err), 0);
        ck_assert(!memcmp(f, hf_named("model.embed.weight")->v, e->bytes));
        free(f);
        st_set_close(&s);
    }
    map = MAP;
    rt_destroy(r);
    plan_free(p);
    rmrf(out);
}
END_TEST

/* ---- refusals ---- */

static void import_refused(Plan *p, const char *path, const char *msg) {
    RtOptions ro = {.nvme_dir = nvme_dir};
    Rt *r = rt_create(p, &C, &ro, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_msg(hfio_import(r, path, NULL, NULL, err, sizeof err) == -1, "accepted %s", path);
    ck_assert_msg(!strcmp(err, msg), "\n  got      %s\n  expected %s", err, msg);
    rt_destroy(r);
}

static void shard_path(char *buf, size_t n, int k) { snprintf(buf, n, "%s/bad/model-0000%d-of-00002.safetensors", work, k); }

START_TEST(import_refusals) {
    Variant v = {TIER_CPU, TIER_CPU, 1, DT_F32, 0};
    Plan *p = make_plan(&v);
    char msg[4096], bad[300], f1[300], f2[300];
    snprintf(bad, sizeof bad, "%s/bad", work);
    shard_path(f1, sizeof f1, 1);
    shard_path(f2, sizeof f2, 2);
    /* two tensors the plan maps are not there */
    Pc map2[NMAP];
    memcpy(map2, MAP, sizeof map2);
    map2[4].hf = "h.0.projection.weight";
    map2[11].hf = "model.lm_head.weight";
    attach_hf(p, map2, NMAP);
    snprintf(msg, sizeof msg, "%s: 2 tensors the plan maps are not in the checkpoint: h.0.projection.weight, model.lm_head.weight", ckpt);
    import_refused(p, ckpt, msg);
    map2[4].hf = H[4].name;
    snprintf(msg, sizeof msg, "%s: 1 tensor the plan maps is not in the checkpoint: model.lm_head.weight (the checkpoint has "
                              "'lm_head.weight' where the plan wants 'model.lm_head.weight': another naming?)", ckpt);
    attach_hf(p, map2, NMAP);
    import_refused(p, ckpt, msg);
    attach_hf(p, MAP, NMAP);
    /* a wrong shape, an integer dtype, a truncated shard, a missing shard */
    if (C.rank == 0) {
        char cmd[1000];
        snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", bad, ckpt, bad);
        ck_assert_int_eq(system(cmd), 0);
        H[10].shape[0] = V - 1;
        write_file(f2, SPLIT, NH);
        H[10].shape[0] = V;
    }
    comm_barrier(&C);
    snprintf(msg, sizeof msg, "%s: tensor 'lm_head.weight' has shape [63, 32], the plan needs [64, 32] (for 'head.w', transposed)", f2);
    import_refused(p, bad, msg);
    if (C.rank == 0) {
        H[7].dtype = ST_I32;
        write_file(f2, SPLIT, NH);
        H[7].dtype = ST_F32;
    }
    comm_barrier(&C);
    snprintf(msg, sizeof msg, "%s: tensor 'h.1.fc.bias' is I32; zinf imports F32, F16 and BF16", f2);
    import_refused(p, bad, msg);
    if (C.rank == 0) {
        write_file(f2, SPLIT, NH);
        struct stat sb;
        ck_assert_int_eq(stat(f2, &sb), 0);
        ck_assert_int_eq(truncate(f2, sb.st_size - 5), 0);
    }
    comm_barrier(&C);
    snprintf(msg, sizeof msg, "%s: tensor 'unused.thing': data_offsets [41536, 41548] run past the end of the file (41543 bytes of data "
                              "after the header): the file is truncated or the header lies", f2);
    import_refused(p, bad, msg);
    if (C.rank == 0) ck_assert_int_eq(unlink(f2), 0);
    comm_barrier(&C);
    snprintf(msg, sizeof msg, "%s/model.safetensors.index.json names the shard model-00002-of-00002.safetensors, which does not exist", bad);
    import_refused(p, bad, msg);
    /* no mapping at all */
    p->hf.npieces = 0;
    p->hf.arch = "";
    snprintf(msg, sizeof msg, "%s: the plan has no Hugging Face mapping (its model has no hf block), and this is not a zinfrun --export "
                              "file of its model (none of its parameter names is there): compile the model with an hf block, "
                              "or from a Hugging Face directory with zinfc --from-hf DIR", ckpt);
    import_refused(p, ckpt, msg);
    RtOptions ro = {.nvme_dir = nvme_dir};
    Rt *r = rt_create(p, &C, &ro, err, sizeof err);
    snprintf(msg, sizeof msg, "%s/x", work);
    ck_assert_int_eq(hfio_export(r, msg, NULL, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "no Hugging Face mapping"));
    ck_assert_int_ne(access(msg, F_OK), 0);
    rt_destroy(r);
    plan_free(p);
    rmrf(bad);
}
END_TEST

/* Mappings that cannot be exported are refused by hfio_check_plan. */
START_TEST(mapping_refusals) {
    Variant v = {TIER_CPU, TIER_CPU, 1, DT_F32, 0};
    Plan *p = make_plan(&v);
    ck_assert_int_eq(hfio_check_plan(p, err, sizeof err), 0);
    Pc map2[NMAP];
    memcpy(map2, MAP, sizeof map2);
    map2[5].src = 4 * D + 1; /* b2 leaves column 128 of h.0.b_fused to nobody */
    attach_hf(p, map2, NMAP);
    ck_assert_int_eq(hfio_check_plan(p, err, sizeof err), -1);
    ck_assert_str_eq(err, "hf tensor 'h.0.b_fused': columns [128, 129) come from no parameter");
    map2[5].src = 4 * D - 1;
    attach_hf(p, map2, NMAP);
    ck_assert_int_eq(hfio_check_plan(p, err, sizeof err), -1);
    ck_assert_str_eq(err, "hf tensor 'h.0.b_fused': columns [0, 128) of 'block.0.mlp.b1' and [127, 159) of 'block.0.mlp.b2' overlap");
    memcpy(map2, MAP, sizeof map2);
    map2[4].hf = "h.0.fc_a.weight"; /* w2 [128, 32] and w1 [32, 128] cannot share a tensor */
    map2[4].transpose = 1;
    attach_hf(p, map2, NMAP);
    ck_assert_int_eq(hfio_check_plan(p, err, sizeof err), -1);
    ck_assert_str_eq(err, "hf tensor 'h.0.fc_a.weight': 'block.0.mlp.w1' is [32, 128] but 'block.0.mlp.w2' is [128, 32]; the pieces of one "
                          "tensor need the same first axis");
    /* a tied weight read both ways is fine: the head reads the embedding transposed */
    memcpy(map2, MAP, sizeof map2);
    map2[11].hf = "model.embed.weight";
    attach_hf(p, map2, NMAP);
    ck_assert_msg(hfio_check_plan(p, err, sizeof err) == 0, "%s", err);
    plan_free(p);
}
END_TEST

/* A failed export leaves nothing under the target's name; a non-empty
 * target is refused. */
START_TEST(export_refusals) {
    Variant v = {TIER_CPU, TIER_CPU, 1, DT_F32, 0};
    Plan *p = make_plan(&v);
    RtOptions ro = {.nvme_dir = nvme_dir};
    Rt *r = rt_create(p, &C, &ro, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    char out[300], msg[1200];
    snprintf(out, sizeof out, "%s/full", work);
    if (C.rank == 0) {
        mkdir(out, 0755);
        char f[400];
        snprintf(f, sizeof f, "%s/keep", out);
        write_text(f, "x");
    }
    comm_barrier(&C);
    ck_assert_int_eq(hfio_export(r, out, NULL, NULL, err, sizeof err), -1);
    snprintf(msg, sizeof msg, "%s already exists and is not empty: --export-hf writes a new directory (remove it or choose another)", out);
    if (C.rank != 0) snprintf(msg, sizeof msg, "rank 0 could not start the export to %s (its message says why)", out);
    ck_assert_str_eq(err, msg);
    rt_destroy(r);
    plan_free(p);
}
END_TEST

int main(int argc, char **argv) {
    if (comm_init(&C, &argc, &argv, NULL) != COMM_OK) { fprintf(stderr, "%s\n", comm_last_error(&C)); return 1; }
    snprintf(work, sizeof work, "/tmp/zinf-test-hfio-%d", (int)getppid());
    snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme-%d", work, C.rank);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", work);
    char cmd[400];
    if (C.rank == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", work, work);
        if (system(cmd) != 0) return 1;
    }
    comm_barrier(&C);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", nvme_dir);
    if (system(cmd) != 0) return 1;
    make_values();
    write_checkpoint();
    Suite *s = suite_create("hfio");
    TCase *tc = tcase_create("hfio");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, import_train_export, 0, (int)(sizeof variants / sizeof *variants));
    tcase_add_test(tc, bf16_masters);
    tcase_add_test(tc, tied_alias);
    tcase_add_test(tc, import_refusals);
    tcase_add_test(tc, mapping_refusals);
    tcase_add_test(tc, export_refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    if (C.mpi) srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, C.rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int k = 0; k < NH; k++) free(H[k].v);
    comm_barrier(&C);
    snprintf(cmd, sizeof cmd, "rm -rf %s", work);
    if (C.rank == 0 && system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    comm_finalize(&C);
    return failed ? 1 : 0;
}
