/* cuda_gen: op -> units and launches. No GPU and no NVRTC needed: the gemm
 * launches are checked by running the zk_gemm contract (stdlib/kernels/gemm.cu
 * header) on the host with the generated arguments, against independent
 * index-by-index references of the primitives' forward and backward, and
 * again from each launch's GEMM descriptor read as cuBLASLt reads it (the
 * column-major transposed product): both paths of every product. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_gen.h"
#include "cuda_models.h"

#define KDIR ZINF_STDLIB_DIR "/kernels"

static CudaGenOptions opts(void) {
    CudaGenOptions o = {.kernel_dir = KDIR};
    return o;
}

/* An op of prim p reading in[0..nin) and writing out[0..nout). */
static GOp io_op(PrimId p, int nin, const int *in, int nout, const int *out) {
    GOp op = cm_op(p);
    op.nin = nin;
    for (int i = 0; i < nin; i++) op.in[i] = in[i];
    op.nout = nout;
    for (int i = 0; i < nout; i++) op.out[i] = out[i];
    return op;
}

/* The backward op of forward op fi (its first nfin inputs), reading also
 * extra[0..nextra) and writing outs[0..nout). */
static int bwd_of(Graph *g, int fi, int nfin, int nextra, const int *extra, int nout, const int *outs) {
    GOp bw = g->ops[fi];
    bw.kind = OP_BWD;
    bw.fwd = fi;
    bw.nfin = nfin;
    for (int i = 0; i < nextra; i++) bw.in[nfin + i] = extra[i];
    bw.nin = nfin + nextra;
    bw.nout = nout;
    for (int i = 0; i < nout; i++) bw.out[i] = outs[i];
    return graph_add_op(g, &bw);
}

static int count_entry(const CudaModule *m, const char *entry) {
    int n = 0;
    for (int i = 0; i < m->nkernels; i++) n += !strcmp(m->kernels[i].entry, entry);
    return n;
}

/* A graph and its generator: one op at a time, or a whole model. */
typedef struct One {
    Arena a;
    DiagSink d;
    Graph g;
    CudaGen cg;
    CudaKernel k[64];
    CudaOpInfo info;
} One;

static void one_init(One *o) {
    arena_init(&o->a);
    diag_init(&o->d);
    graph_init(&o->g, &o->a);
    o->g.train.dtype = DT_BF16;
    CudaGenOptions op = opts();
    cuda_gen_init(&o->cg, &o->a, &op);
}
/* One over model s, as cm_build makes it. */
static void one_model(One *o, const CmShape *s) {
    arena_init(&o->a);
    diag_init(&o->d);
    ck_assert(cm_build(&o->g, &o->a, s, &o->d));
    CudaGenOptions op = opts();
    cuda_gen_init(&o->cg, &o->a, &op);
}
static void one_free(One *o) {
    diag_free(&o->d);
    arena_free(&o->a);
}

/* The launches of op into o->k. */
static int gen(One *o, int op) { return cuda_gen_op(&o->cg, &o->g, op, o->k, 64, NULL, &o->d); }

/* op is refused, its last diagnostic saying why. */
static void gen_refused(One *o, int op, const char *why) {
    ck_assert_int_eq(gen(o, op), -1);
    ck_assert_ptr_nonnull(strstr(o->d.items[o->d.len - 1].msg, why));
}

START_TEST(gpt2_module_is_complete) {
    One o;
    one_model(&o, &cm_gpt2_tiny);
    CudaModule m;
    ck_assert_int_eq(cuda_gen_graph(&o.cg, &o.g, &m, &o.d), 0);
    ck_assert_int_eq(o.d.errors, 0);
    for (int i = 0; i < o.g.nops; i++) {
        const GOp *op = &o.g.ops[i];
        if (op->kind == OP_FWD || op->kind == OP_ADAM || op->kind == OP_ZERO_GRAD) ck_assert_int_gt(m.op_count[i], 0);
    }
    for (int i = 0; i < m.nkernels; i++) {
        const CudaKernel *k = &m.kernels[i];
        ck_assert_ptr_nonnull(strstr(k->source, k->entry));
        unsigned threads = k->block[0] * k->block[1] * k->block[2];
        ck_assert_uint_ge(threads, 32);
        ck_assert_uint_le(threads, 1024);
        ck_assert_uint_ge(k->grid[0], 1);
        ck_assert_uint_le(k->grid[1], 65535);
        ck_assert_uint_le(k->grid[2], 65535);
        for (int j = 0; j < k->nargs; j++)
            if (k->args[j].kind == CARG_TENSOR) ck_assert(k->args[j].tensor >= 0 && k->args[j].tensor < o.g.ntensors);
            else if (k->args[j].kind == CARG_WS) ck_assert_int_lt(k->args[j].ws_off, m.op_info[k->op].ws_bytes);
        ck_assert_int_ge(k->unit, 0);
        ck_assert_int_lt(k->unit, m.nunits);
    }
    /* the distinct compilations stay few: units dedupe across ops and layers */
    ck_assert_int_le(m.nunits, 14);
    ck_assert_int_ge(m.nunits, 8);
    ck_assert_int_eq(count_entry(&m, "zk_attn_bwd_dkdv"), cm_gpt2_tiny.layers);
    ck_assert_int_eq(count_entry(&m, "zk_norm_final"), 1);
    /* the sources as written for a reader: users first, then the compiled text */
    char dir[] = "/tmp/zinf-cuda-gen-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(cuda_module_write_sources(&m, dir, &o.d), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/%s-%.12s.cu", dir, m.units[0].family, m.units[0].hash);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char head[256] = {0};
    ck_assert_ptr_nonnull(fgets(head, sizeof head, f));
    ck_assert_ptr_nonnull(strstr(head, "// unit 0: "));
    ck_assert_ptr_nonnull(fgets(head, sizeof head, f));
    ck_assert_ptr_nonnull(strstr(head, "launched by"));
    ck_assert_ptr_nonnull(fgets(head, sizeof head, f));
    ck_assert_ptr_nonnull(strstr(head, "//   op "));
    fclose(f);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(cuda_module_write_sources(&m, "/nonexistent/dir", &o.d), -1);
    ck_assert_ptr_nonnull(strstr(o.d.items[o.d.len - 1].msg, "cannot write /nonexistent/dir/"));
    o.d.errors = 0;
    one_free(&o);
}
END_TEST

static char *dump_of(const CmShape *s) {
    One o;
    one_model(&o, s);
    CudaModule m;
    ck_assert_int_eq(cuda_gen_graph(&o.cg, &o.g, &m, &o.d), 0);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    cuda_module_dump(&m, &o.g, f);
    for (int u = 0; u < m.nunits; u++) fputs(m.units[u].source, f);
    fclose(f);
    one_free(&o);
    return buf;
}

START_TEST(generation_is_deterministic) {
    char *x = dump_of(&cm_llama_gqa), *y = dump_of(&cm_llama_gqa);
    ck_assert_str_eq(x, y);
    ck_assert_ptr_nonnull(strstr(x, "zk_rope"));
    free(x);
    free(y);
}
END_TEST

static int linear_op(One *o, DType dt, int64_t M, int64_t I, int64_t N) {
    int x = cm_t(&o->g, "x", dt, TC_ACT, 2, M, I, 0), w = cm_t(&o->g, "w", dt, TC_PARAM, 2, I, N, 0);
    int y = cm_t(&o->g, "y", dt, TC_ACT, 2, M, N, 0);
    GOp op = io_op(PRIM_LINEAR, 2, (int[]){x, w}, 1, (int[]){y});
    return graph_add_op(&o->g, &op);
}

START_TEST(gemm_tile_rule) {
    One o;
    one_init(&o);
    int big = linear_op(&o, DT_BF16, 8192, 768, 3072), small = linear_op(&o, DT_BF16, 256, 256, 256);
    int f32 = linear_op(&o, DT_F32, 8192, 768, 768);
    ck_assert_int_eq(gen(&o, big), 1);
    ck_assert_int_eq(o.k[0].tile_m, 128);
    ck_assert_int_eq(o.k[0].block[0], 256);
    ck_assert_uint_eq(o.k[0].grid[0], 3072 / 128);
    ck_assert_uint_eq(o.k[0].grid[1], 8192 / 128);
    char h1[65];
    memcpy(h1, o.k[0].hash, 65);
    ck_assert_int_eq(gen(&o, small), 1);
    ck_assert_int_eq(o.k[0].tile_m, 64);
    ck_assert_int_eq(o.k[0].block[0], 128);
    ck_assert_str_ne(h1, o.k[0].hash);
    ck_assert_int_eq(gen(&o, f32), 1);
    ck_assert_int_eq(o.k[0].tile_k, 16);
    ck_assert_ptr_nonnull(strstr(o.k[0].spec, "simt"));
    ck_assert_ptr_nonnull(strstr(o.k[0].source, "#define ZK_TC 0"));
    /* 96 tiles of 128x128: big by default, small for a GPU of 200 SMs */
    int mid = linear_op(&o, DT_BF16, 1024, 512, 1536);
    ck_assert_int_eq(gen(&o, mid), 1);
    ck_assert_int_eq(o.k[0].tile_m, 128);
    CudaGenOptions many = opts();
    many.sm_count = 200;
    cuda_gen_init(&o.cg, &o.a, &many);
    ck_assert_int_eq(gen(&o, mid), 1);
    ck_assert_int_eq(o.k[0].tile_m, 64);
    ck_assert_int_eq(o.d.errors, 0);
    one_free(&o);
}
END_TEST

/* rope's scaling travels as five arguments (scaling, factor, low, high,
 * original context), then rotary_dim and the attention factor; a longrope
 * op's unit holds its two lists as constants (to the bit), named by a digest
 * of them; rmsnorm per head runs the same kernels over rows of hd values. */
START_TEST(rope_scaling_and_rmsnorm_heads) {
    One o;
    one_init(&o);
    int x = cm_t(&o.g, "x", DT_BF16, TC_ACT, 3, 2, 16, 128), y = cm_t(&o.g, "y", DT_BF16, TC_ACT, 3, 2, 16, 128);
    GOp op = io_op(PRIM_ROPE, 1, (int[]){x}, 1, (int[]){y});
    op.iattr[IA_ROPE_HEADS] = 4;
    op.iattr[IA_ROPE_SCALING] = ROPE_LLAMA3;
    op.iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] = 8192;
    op.fattr[FA_ROPE_THETA] = 500000;
    op.fattr[FA_ROPE_FACTOR] = 32;
    op.fattr[FA_ROPE_LOW_FREQ_FACTOR] = 1;
    op.fattr[FA_ROPE_HIGH_FREQ_FACTOR] = 4;
    int r = graph_add_op(&o.g, &op);
    ck_assert_int_eq(gen(&o, r), 1);
    ck_assert_int_eq(o.k[0].nargs, 17);
    ck_assert_int_eq(o.k[0].args[16].kind, CARG_SEG); /* packed rows: positions per sample */
    ck_assert_int_eq(o.k[0].args[14].i, 32);           /* rotary_dim 0: the whole head */
    ck_assert_float_eq(o.k[0].args[15].f, 1.0f);        /* attention_factor 0: 1 */
    ck_assert_int_eq(o.k[0].args[9].i, ROPE_LLAMA3);
    ck_assert_float_eq(o.k[0].args[10].f, 32.0f);
    ck_assert_float_eq(o.k[0].args[11].f, 1.0f);
    ck_assert_float_eq(o.k[0].args[12].f, 4.0f);
    ck_assert_float_eq(o.k[0].args[13].f, 8192.0f);
    /* Phi-4-mini's: 24 of 32 columns turned, longrope's 12 + 12 numbers, cos and sin times 1.19 */
    static const double lists[24] = {1, 1.25, 1.5, 2, 3, 4.5, 6, 8, 10, 12, 14, 16,
                                     0.1, 2.75, 4, 6.5, 9, 13, 21, 34, 55, 89, 144, 233.000000000001};
    o.g.ops[r].iattr[IA_ROPE_SCALING] = ROPE_LONGROPE;
    o.g.ops[r].iattr[IA_ROPE_ROTARY_DIM] = 24;
    o.g.ops[r].fattr[FA_ROPE_ATTENTION_FACTOR] = 1.19;
    o.g.ops[r].table = lists;
    o.g.ops[r].ntable = 24;
    ck_assert_int_eq(gen(&o, r), 1);
    ck_assert_int_eq(o.k[0].args[9].i, ROPE_LONGROPE);
    ck_assert_float_eq(o.k[0].args[10].f, 1.0f); /* longrope divides by its lists, not by factor */
    ck_assert_float_eq(o.k[0].args[13].f, 8192.0f);
    ck_assert_int_eq(o.k[0].args[14].i, 24);
    ck_assert_float_eq(o.k[0].args[15].f, 1.19f);
    ck_assert_ptr_nonnull(strstr(o.k[0].spec, "bf16 longrope 12 pairs "));
    ck_assert_ptr_nonnull(strstr(o.k[0].source, "#define ZK_ROPE_NPAIR 12\n"));
    ck_assert_ptr_nonnull(strstr(o.k[0].source, "#define ZK_ROPE_SHORT 1, 1.25, 1.5, 2, 3, 4.5, 6, 8, 10, 12, 14, 16\n"));
    ck_assert_ptr_nonnull(strstr(o.k[0].source, "#define ZK_ROPE_LONG 0.10000000000000001, 2.75, 4, 6.5, 9, 13, 21, 34, 55, 89, 144, "
                                                "233.00000000000099\n"));
    o.g.ops[r].ntable = 12; /* lists of another length than rotary_dim / 2 each */
    gen_refused(&o, r, "rope with scaling = \"longrope\" needs short_factor and long_factor of 12 numbers each");
    o.g.ops[r].ntable = 24;
    o.g.ops[r].iattr[IA_ROPE_ROTARY_DIM] = 34; /* wider than the head of 32 */
    gen_refused(&o, r, "rope: rotary_dim 34 must be even and within the head of 32");
    o.g.ops[r].iattr[IA_ROPE_SCALING] = 9; /* no such scaling */
    gen_refused(&o, r, "unknown scaling 9");
    int errs = o.d.errors;
    /* rmsnorm over 4 heads of 32: 2*16*4 rows of 32, g [32] */
    int g = cm_t(&o.g, "g", DT_BF16, TC_PARAM, 1, 32, 0, 0);
    GOp nm = io_op(PRIM_RMSNORM, 2, (int[]){x, g}, 1, (int[]){y});
    nm.iattr[IA_RMSNORM_HEADS] = 4;
    nm.fattr[FA_RMSNORM_EPS] = 1e-6;
    int n = graph_add_op(&o.g, &nm);
    ck_assert_int_eq(gen(&o, n), 1);
    ck_assert_uint_eq(o.k[0].grid[0], 2 * 16 * 4);
    ck_assert_int_eq(o.k[0].args[3].i, 2 * 16 * 4);
    ck_assert_int_eq(o.k[0].args[4].i, 32);
    ck_assert_int_eq(o.d.errors, errs);
    one_free(&o);
}
END_TEST

/* Gemma's and long context's attributes reach their kernels: rmsnorm's
 * offset (the last argument), softcap, YaRN's beta_fast/beta_slow in rope's
 * low/high slots, and the chunked loss: per chunk a gemm into the op's
 * workspace (its descriptor names CUDA_GEMM_WS at the workspace's offset)
 * and a kernel on those logits; backward recomputes them, turns them into
 * their gradient in place and feeds them to both weight products. */
START_TEST(gemma_and_long_context_launches) {
    One o;
    one_init(&o);
    int x = cm_t(&o.g, "x", DT_BF16, TC_ACT, 3, 2, 16, 64), y = cm_t(&o.g, "y", DT_BF16, TC_ACT, 3, 2, 16, 64);
    int g = cm_t(&o.g, "g", DT_BF16, TC_PARAM, 1, 64, 0, 0);
    GOp nm = io_op(PRIM_RMSNORM, 2, (int[]){x, g}, 1, (int[]){y});
    nm.fattr[FA_RMSNORM_OFFSET] = 1.0;
    int n = graph_add_op(&o.g, &nm);
    ck_assert_int_eq(gen(&o, n), 1);
    ck_assert_int_eq(o.k[0].nargs, 7);
    ck_assert_float_eq(o.k[0].args[6].f, 1.0f);
    nm.nin = 1; /* an offset scales a gain: none is an error */
    n = graph_add_op(&o.g, &nm);
    gen_refused(&o, n, "an offset needs a gain g");
    /* softcap */
    GOp sc = io_op(PRIM_SOFTCAP, 1, (int[]){x}, 1, (int[]){y});
    sc.fattr[FA_SOFTCAP_CAP] = 30;
    n = graph_add_op(&o.g, &sc);
    ck_assert_int_eq(gen(&o, n), 1);
    ck_assert_str_eq(o.k[0].entry, "zk_softcap_fwd");
    ck_assert_float_eq(o.k[0].args[3].f, 30.0f);
    sc.fattr[FA_SOFTCAP_CAP] = 0;
    n = graph_add_op(&o.g, &sc);
    gen_refused(&o, n, "softcap: cap must be positive");
    /* YaRN */
    GOp rp = io_op(PRIM_ROPE, 1, (int[]){x}, 1, (int[]){y});
    rp.iattr[IA_ROPE_HEADS] = 4;
    rp.iattr[IA_ROPE_SCALING] = ROPE_YARN;
    rp.iattr[IA_ROPE_ORIGINAL_MAX_POSITIONS] = 4096;
    rp.fattr[FA_ROPE_FACTOR] = 8;
    rp.fattr[FA_ROPE_BETA_FAST] = 16;
    n = graph_add_op(&o.g, &rp);
    ck_assert_int_eq(gen(&o, n), 1);
    ck_assert_int_eq(o.k[0].args[9].i, ROPE_YARN);
    ck_assert_float_eq(o.k[0].args[10].f, 8.0f);
    ck_assert_float_eq(o.k[0].args[11].f, 16.0f);
    ck_assert_float_eq(o.k[0].args[12].f, 0.0f);
    ck_assert_float_eq(o.k[0].args[13].f, 4096.0f);
    int errs = o.d.errors;
    /* linear_cross_entropy over 32 rows, 5 at a time: 7 chunks, the last of 2 */
    int w = cm_t(&o.g, "w", DT_BF16, TC_PARAM, 2, 64, 256, 0), tg = cm_t(&o.g, "t", DT_I32, TC_INPUT, 2, 2, 16, 0);
    int loss = cm_t(&o.g, "loss", DT_F32, TC_ACT, 0, 0, 0, 0);
    int dx = cm_t(&o.g, "dx", DT_BF16, TC_ACT, 3, 2, 16, 64), dw = cm_t(&o.g, "dw", DT_BF16, TC_PARAM, 2, 64, 256, 0);
    int dl = cm_t(&o.g, "dl", DT_F32, TC_ACT, 0, 0, 0, 0);
    GOp lx = io_op(PRIM_LINEAR_CROSS_ENTROPY, 3, (int[]){x, w, tg}, 1, (int[]){loss});
    lx.iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK] = 5;
    int f = graph_add_op(&o.g, &lx);
    CudaKernel ks[64];
    CudaOpInfo info;
    ck_assert_int_eq(cuda_gen_op(&o.cg, &o.g, f, ks, 64, &info, &o.d), 1 + 7 * 2 + 1);
    ck_assert_int_ge(info.ws_bytes, 5 * 256 * 2 + 32 * 4);
    ck_assert_int_ge(info.err_off, 0);
    for (int i = 0; i < 7; i++) {
        const CudaKernel *gm = &ks[1 + 2 * i], *xe = &ks[2 + 2 * i];
        ck_assert_str_eq(gm->entry, "zk_gemm");
        ck_assert(gm->gemm.on && gm->gemm.lt);
        ck_assert_int_eq(gm->gemm.c, CUDA_GEMM_WS);
        ck_assert_int_eq(gm->args[0].kind, CARG_WS);
        ck_assert_int_eq(gm->gemm.off_c, gm->args[0].ws_off);
        ck_assert_int_eq(gm->gemm.a, x);
        ck_assert_int_eq(gm->gemm.off_a, i * 5 * 64 * 2);
        ck_assert_int_eq(gm->gemm.M, i < 6 ? 5 : 2);
        ck_assert_str_eq(xe->entry, "zk_xent_fwd");
        ck_assert_int_eq(xe->args[1].ws_off, gm->args[0].ws_off);
        ck_assert_int_eq(xe->args[2].off, i * 5 * 4);
        ck_assert_int_eq(xe->args[6].i, i * 5);
    }
    ck_assert_str_eq(ks[15].entry, "zk_xent_mean");
    int b = bwd_of(&o.g, f, 3, 2, (int[]){loss, dl}, 3, (int[]){dx, dw, -1});
    ck_assert_int_eq(cuda_gen_op(&o.cg, &o.g, b, ks, 64, &info, &o.d), 7 * 4);
    for (int i = 0; i < 7; i++) {
        const CudaKernel *k = &ks[4 * i];
        ck_assert_str_eq(k[1].entry, "zk_xent_grad");
        ck_assert_int_eq(k[1].args[0].ws_off, k[0].args[0].ws_off);
        ck_assert_int_eq(k[2].gemm.c, dx);
        ck_assert_int_eq(k[2].gemm.a, CUDA_GEMM_WS);
        ck_assert(k[2].gemm.accumulate && k[2].gemm.tb);
        ck_assert_int_eq(k[3].gemm.c, dw);
        ck_assert_int_eq(k[3].gemm.b, CUDA_GEMM_WS);
        ck_assert(k[3].gemm.accumulate && k[3].gemm.ta);
    }
    ck_assert_int_eq(o.d.errors, errs);
    /* 1 row a chunk over 8192 rows: more chunks than a plan should launch, refused with the way out */
    int xl = cm_t(&o.g, "xl", DT_BF16, TC_ACT, 2, 8192, 64, 0), tl = cm_t(&o.g, "tl", DT_I32, TC_INPUT, 1, 8192, 0, 0);
    lx.in[0] = xl;
    lx.in[2] = tl;
    lx.iattr[IA_LINEAR_CROSS_ENTROPY_CHUNK] = 1;
    f = graph_add_op(&o.g, &lx);
    ck_assert_int_eq(cuda_gen_op(&o.cg, &o.g, f, ks, 64, &info, &o.d), -1);
    ck_assert_ptr_nonnull(strstr(o.d.items[o.d.len - 1].msg, "8192 rows in chunks of 1 are more than the CUDA kernels' 4096 "
                                                             "chunks (6 launches each, every step): plan a larger loss_chunk"));
    one_free(&o);
}
END_TEST

START_TEST(comment_names_op_and_line) {
    One o;
    one_init(&o);
    SourceSet ss;
    source_set_init(&ss);
    const char *text = "model m() {\n  x = 1\n  y = linear(x, w)\n}\n";
    ck_assert_int_eq(source_add(&ss, "m.zl", text, strlen(text)), 0);
    int op = linear_op(&o, DT_BF16, 64, 64, 64);
    o.g.ops[op].span = (Span){0, (uint32_t)(strstr(text, "linear") - text), 6};
    o.g.ops[op].scope = "block.3.mlp";
    CudaGenOptions go = opts();
    go.sources = &ss;
    cuda_gen_init(&o.cg, &o.a, &go);
    ck_assert_int_eq(gen(&o, op), 1);
    ck_assert_str_eq(o.k[0].comment, "op 0 fwd linear (block.3.mlp) at m.zl:3:7: y = x*w");
    /* without a SourceSet: the offset */
    cuda_gen_init(&o.cg, &o.a, NULL);
    CudaGenOptions go2 = opts();
    cuda_gen_init(&o.cg, &o.a, &go2);
    ck_assert_int_eq(gen(&o, op), 1);
    ck_assert_ptr_nonnull(strstr(o.k[0].comment, "at file 0 offset 26: y = x*w"));
    source_set_free(&ss);
    one_free(&o);
}
END_TEST

START_TEST(unsupported_input_is_an_error) {
    One o;
    one_init(&o);
    /* head dim 80: padded to 96 inside the kernels */
    int q = cm_t(&o.g, "q", DT_BF16, TC_ACT, 3, 2, 16, 160), y = cm_t(&o.g, "y", DT_BF16, TC_ACT, 3, 2, 16, 160);
    GOp op = cm_op(PRIM_ATTENTION);
    op.nin = 3;
    op.in[0] = op.in[1] = op.in[2] = q;
    op.nout = 1;
    op.out[0] = y;
    op.iattr[IA_ATTENTION_HEADS] = 2;
    int at = graph_add_op(&o.g, &op);
    ck_assert_int_eq(gen(&o, at), 1);
    ck_assert_ptr_nonnull(strstr(o.k[0].spec, "hd=80 fwd=mma.sync rows/warp=4/2 padded=96"));
    ck_assert_ptr_nonnull(strstr(o.k[0].source, "#define ZK_HDP 96"));
    /* head dim 320: past the kernels' limit */
    int q2 = cm_t(&o.g, "q2", DT_BF16, TC_ACT, 3, 2, 16, 640), y2 = cm_t(&o.g, "y2", DT_BF16, TC_ACT, 3, 2, 16, 640);
    op.in[0] = op.in[1] = op.in[2] = q2;
    op.out[0] = y2;
    at = graph_add_op(&o.g, &op);
    ck_assert_int_eq(gen(&o, at), -1);
    ck_assert_int_eq(o.d.errors, 1);
    ck_assert_ptr_nonnull(strstr(o.d.items[0].msg, "head dim 320: the CUDA kernels support head dims up to 256"));
    /* a sliding window: as long as T (16) is full attention (argument 0), shorter is the kernels'
     * argument after the scale; then the soft-cap and the scale attribute */
    op.in[0] = op.in[1] = op.in[2] = q;
    op.out[0] = y;
    op.iattr[IA_ATTENTION_WINDOW] = 16;
    at = graph_add_op(&o.g, &op);
    ck_assert_int_eq(gen(&o, at), 1);
    ck_assert_int_eq(o.k[0].nargs, 14);
    ck_assert_int_eq(o.k[0].args[11].kind, CARG_I64);
    ck_assert_int_eq(o.k[0].args[11].i, 0);
    op.iattr[IA_ATTENTION_WINDOW] = 5;
    op.fattr[FA_ATTENTION_SCALE] = 0.125;
    op.fattr[FA_ATTENTION_SOFTCAP] = 50;
    at = graph_add_op(&o.g, &op);
    ck_assert_int_eq(gen(&o, at), 1);
    ck_assert_int_eq(o.d.errors, 1);
    ck_assert_double_eq_tol(o.k[0].args[10].f, 0.125, 1e-9);
    ck_assert_int_eq(o.k[0].args[11].i, 5);
    ck_assert_double_eq_tol(o.k[0].args[12].f, 50, 1e-9);
    ck_assert_int_eq(o.k[0].args[13].kind, CARG_SEG);
    op.iattr[IA_ATTENTION_WINDOW] = -1;
    at = graph_add_op(&o.g, &op);
    ck_assert_int_eq(gen(&o, at), -1);
    ck_assert_int_eq(o.d.errors, 2);
    ck_assert_ptr_nonnull(strstr(o.d.items[o.d.len - 1].msg, "window -1, scale 0.125 and softcap 50 must not be negative"));
    op.iattr[IA_ATTENTION_WINDOW] = 0;
    op.fattr[FA_ATTENTION_SCALE] = op.fattr[FA_ATTENTION_SOFTCAP] = 0;
    /* mixed dtypes */
    int a = cm_t(&o.g, "a", DT_BF16, TC_ACT, 1, 8, 0, 0), b = cm_t(&o.g, "b", DT_F32, TC_ACT, 1, 8, 0, 0);
    GOp ad = io_op(PRIM_ADD, 2, (int[]){a, b}, 1, (int[]){a});
    int ai = graph_add_op(&o.g, &ad);
    gen_refused(&o, ai, "mixed dtypes (bf16 and f32)");
    /* malformed: a missing operand */
    GOp bad = cm_op(PRIM_GELU);
    bad.nin = 1;
    bad.nout = 1;
    bad.out[0] = a;
    int bi = graph_add_op(&o.g, &bad);
    gen_refused(&o, bi, "operand 0 is missing");
    /* a grid beyond the launch limits */
    int hx = cm_t(&o.g, "hx", DT_BF16, TC_ACT, 2, 3000000000LL, 2, 0), hy = cm_t(&o.g, "hy", DT_BF16, TC_ACT, 2, 3000000000LL, 2, 0);
    GOp ln = io_op(PRIM_RMSNORM, 1, (int[]){hx}, 1, (int[]){hy});
    int lni = graph_add_op(&o.g, &ln);
    gen_refused(&o, lni, "needs 3000000000 blocks along one grid axis");
    /* kernel sources missing */
    CudaGenOptions go = {.kernel_dir = "/nonexistent/kernels"};
    cuda_gen_init(&o.cg, &o.a, &go);
    int li = linear_op(&o, DT_BF16, 64, 64, 64);
    int e0 = o.d.errors;
    ck_assert_int_eq(gen(&o, li), -1);
    ck_assert_int_gt(o.d.errors, e0);
    ck_assert_ptr_nonnull(strstr(o.d.items[e0 < o.d.len ? o.d.len - 2 : 0].msg, "cannot read kernel source /nonexistent/kernels/"));
    one_free(&o);
}
END_TEST

START_TEST(workspace_and_error_words) {
    One o;
    one_model(&o, &cm_gpt2_tiny);
    CudaKernel k[CUDA_OP_MAX_KERNELS];
    int seen_emb_bwd = 0, seen_norm = 0, seen_gn = 0;
    for (int i = 0; i < o.g.nops; i++) {
        const GOp *op = &o.g.ops[i];
        CudaOpInfo info;
        int n = cuda_gen_op(&o.cg, &o.g, i, k, CUDA_OP_MAX_KERNELS, &info, &o.d);
        ck_assert_int_ge(n, 0);
        if (op->kind == OP_FWD && op->prim == PRIM_EMBEDDING) {
            ck_assert_int_ge(info.err_off, 0);
            ck_assert_str_eq(info.err_what, "embedding id");
        }
        if (op->kind == OP_BWD && op->prim == PRIM_EMBEDDING && o.g.tensors[op->in[0]].dims[0] == cm_gpt2_tiny.V) {
            /* bf16 table: fp32 accumulator, zeroed, atomics, then added into the gradient */
            ck_assert_int_eq(n, 3);
            ck_assert_int_ge(info.ws_bytes, cm_gpt2_tiny.V * cm_gpt2_tiny.D * 4);
            ck_assert_str_eq(k[0].entry, "zk_fill_f32");
            ck_assert_str_eq(k[1].entry, "zk_embed_bwd");
            ck_assert_str_eq(k[2].entry, "zk_cast_from_f32");
            seen_emb_bwd++;
        }
        if (op->kind == OP_BWD && op->prim == PRIM_LAYERNORM) {
            ck_assert_int_eq(n, 4); /* zero partials, bwd, dg, db */
            ck_assert_int_eq(info.ws_bytes, 2 * 128 * cm_gpt2_tiny.D * 4);
            seen_norm++;
        }
        if (op->kind == OP_GRAD_NORM) {
            int np = 0;
            for (int t = 0; t < o.g.ntensors; t++) np += o.g.tensors[t].cls == TC_PARAM;
            ck_assert_int_eq(n, np + 1); /* more than fits: the count says how many */
            CudaKernel *all = malloc(sizeof *all * (size_t)n);
            ck_assert_int_eq(cuda_gen_op(&o.cg, &o.g, i, all, n, &info, &o.d), n);
            ck_assert_str_eq(all[n - 1].entry, "zk_norm_final");
            ck_assert_int_eq(all[n - 1].args[2].i, (int64_t)np * 64);
            free(all);
            seen_gn++;
        }
    }
    ck_assert_int_eq(seen_emb_bwd, 1);
    ck_assert_int_eq(seen_norm, 2 * cm_gpt2_tiny.layers + 1);
    ck_assert_int_eq(seen_gn, 1);
    ck_assert_int_eq(o.d.errors, 0);
    one_free(&o);
}
END_TEST

/* ---- host emulation of the zk_gemm and column-sum contracts ---------------- */

typedef struct Bufs {
    float *t[64];
    float *ws;
} Bufs;

static float *argp(const CudaKernel *k, int j, Bufs *b) {
    const CudaArg *a = &k->args[j];
    if (a->kind == CARG_TENSOR) return b->t[a->tensor] + a->off / 4; /* f32 here: off is whole elements */
    if (a->kind == CARG_WS) return b->ws + a->ws_off / 4;
    return NULL;
}

/* 1: a gemm launch runs from its descriptor (CudaGemm) as cuBLASLt reads it
 * (column-major, the transposed product: its A is the plan's B), not from
 * its arguments, when the descriptor says cuBLASLt can run it; the tests
 * below run each product both ways against the same references. */
static int gemm_via_desc;
static int gemm_desc_runs;

static void emu_gemm_desc(const CudaKernel *k, Bufs *b) {
    const CudaGemm *g = &k->gemm;
    /* the descriptor names the launch's own operands */
    ck_assert(g->c == k->args[0].tensor && g->off_c == k->args[0].off && g->a == k->args[1].tensor &&
              g->off_a == k->args[1].off && g->b == k->args[2].tensor && g->off_b == k->args[2].off);
    ck_assert_int_eq(g->batch, k->grid[2]);
    const float *A = b->t[g->b] + g->off_b / 4, *B = b->t[g->a] + g->off_a / 4, *bias = g->bias >= 0 ? b->t[g->bias] : NULL;
    float *D = b->t[g->c] + g->off_c / 4;
    int64_t m = g->N, n = g->M, kk = g->K; /* column-major D [N, M] */
    for (int64_t z = 0; z < g->batch; z++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                double acc = 0;
                for (int64_t l = 0; l < kk; l++) {
                    double x = g->tb ? A[z * g->sB + l + i * g->ldb] : A[z * g->sB + i + l * g->ldb];
                    double y = g->ta ? B[z * g->sA + j + l * g->lda] : B[z * g->sA + l + j * g->lda];
                    acc += x * y;
                }
                float *d = &D[z * g->sC + i + j * g->ldc];
                *d = (float)(acc + (g->accumulate ? *d : 0) + (bias ? bias[i] : 0));
            }
    gemm_desc_runs++;
}

static void emu(const CudaKernel *k, Bufs *b) {
    if (!strcmp(k->entry, "zk_gemm") && gemm_via_desc) {
        ck_assert(k->gemm.on);
        ck_assert_int_eq(k->gemm.lt, k->args[13].i == 1); /* only a batch sum stays NVRTC */
        if (!k->gemm.lt) ck_assert_int_eq(k->gemm.why, CUDA_GEMM_WHY_BATCH_SUM);
    }
    if (!strcmp(k->entry, "zk_gemm") && gemm_via_desc && k->gemm.lt) {
        emu_gemm_desc(k, b);
    } else if (!strcmp(k->entry, "zk_gemm")) {
        int ta = strstr(k->spec, "ta=1") != NULL, tb = strstr(k->spec, "tb=1") != NULL;
        float *C = argp(k, 0, b), *A = argp(k, 1, b), *B = argp(k, 2, b), *bias = argp(k, 3, b);
        int64_t M = k->args[4].i, N = k->args[5].i, K = k->args[6].i, lda = k->args[7].i, ldb = k->args[8].i;
        int64_t ldc = k->args[9].i, sA = k->args[10].i, sB = k->args[11].i, sC = k->args[12].i;
        int64_t rb = k->args[13].i, rsA = k->args[14].i, rsB = k->args[15].i;
        float alpha = k->args[16].f, beta = k->args[17].f;
        for (unsigned z = 0; z < k->grid[2]; z++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double acc = 0;
                    for (int64_t r = 0; r < rb; r++)
                        for (int64_t kk = 0; kk < K; kk++) {
                            const float *Ab = A + z * sA + r * rsA, *Bb = B + z * sB + r * rsB;
                            acc += (double)(ta ? Ab[kk * lda + m] : Ab[m * lda + kk]) * (tb ? Bb[n * ldb + kk] : Bb[kk * ldb + n]);
                        }
                    float *c = C + z * sC + m * ldc + n;
                    *c = (float)(alpha * acc + (beta != 0 ? beta * *c : 0) + (bias ? bias[n] : 0));
                }
    } else if (!strcmp(k->entry, "zk_colsum_partial")) {
        float *ws = argp(k, 0, b), *x = argp(k, 1, b), *mul = argp(k, 2, b);
        int64_t rows = k->args[3].i, cols = k->args[4].i, rpp = k->args[5].i;
        for (unsigned p = 0; p < k->grid[1]; p++)
            for (int64_t c = 0; c < cols; c++) {
                double s = 0;
                for (int64_t r = p * rpp; r < rows && r < (p + 1) * rpp; r++) s += x[r * cols + c] * (mul ? mul[r * cols + c] : 1);
                ws[p * cols + c] = (float)s;
            }
    } else if (!strcmp(k->entry, "zk_colsum_final")) {
        float *out = argp(k, 0, b), *ws = argp(k, 1, b);
        int64_t parts = k->args[2].i, cols = k->args[3].i;
        for (int64_t c = 0; c < cols; c++) {
            double s = 0;
            for (int64_t p = 0; p < parts; p++) s += ws[p * cols + c];
            out[c] = (float)((k->args[5].i ? out[c] : 0) + k->args[4].f * s);
        }
    } else if (!strcmp(k->entry, "zk_fill_i32")) {
        int32_t *p = (int32_t *)argp(k, 0, b);
        for (int64_t i = 0; i < k->args[1].i; i++) p[i] = (int32_t)k->args[2].i;
    } else if (!strcmp(k->entry, "zk_embed_fwd")) {
        float *y = argp(k, 0, b), *tab = argp(k, 1, b);
        const int32_t *ids = (const int32_t *)argp(k, 2, b);
        int64_t n = k->args[3].i, V = k->args[4].i, D = k->args[5].i;
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < D; c++) y[i * D + c] = ids[i] >= 0 && ids[i] < V ? tab[ids[i] * D + c] : 0.f;
    } else if (!strcmp(k->entry, "zk_embed_bwd")) {
        float *dtab = argp(k, 0, b), *dy = argp(k, 1, b);
        const int32_t *ids = (const int32_t *)argp(k, 2, b);
        int64_t n = k->args[3].i, V = k->args[4].i, D = k->args[5].i;
        for (int64_t i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < V)
                for (int64_t c = 0; c < D; c++) dtab[ids[i] * D + c] += dy[i * D + c];
    } else if (!strcmp(k->entry, "zk_embed_fwd_tile")) {
        /* stdlib/kernels/embedding.cu's contract */
        float *y = argp(k, 0, b), *tab = argp(k, 1, b);
        const int32_t *ids = (const int32_t *)argp(k, 2, b);
        int32_t *err = (int32_t *)argp(k, 9, b);
        int64_t n = k->args[3].i, r0 = k->args[4].i, rows = k->args[5].i, V = k->args[6].i, D = k->args[7].i;
        for (int64_t i = 0; i < n; i++) {
            if ((ids[i] < 0 || ids[i] >= V) && !err[0]) {
                err[0] = 1;
                err[1] = ids[i];
                err[2] = (int32_t)i;
            }
            bool in = ids[i] >= r0 && ids[i] < r0 + rows;
            for (int64_t c = 0; c < D && (in || k->args[8].i); c++) y[i * D + c] = in ? tab[(ids[i] - r0) * D + c] : 0.f;
        }
    } else if (!strcmp(k->entry, "zk_embed_bwd_tile")) {
        float *dtab = argp(k, 0, b), *dy = argp(k, 1, b);
        const int32_t *ids = (const int32_t *)argp(k, 2, b);
        int64_t n = k->args[3].i, r0 = k->args[4].i, rows = k->args[5].i, D = k->args[6].i;
        for (int64_t i = 0; i < n; i++)
            if (ids[i] >= r0 && ids[i] < r0 + rows)
                for (int64_t c = 0; c < D; c++) dtab[(ids[i] - r0) * D + c] += dy[i * D + c];
    } else {
        ck_abort_msg("no emulation of %s", k->entry);
    }
}

static float *rnd(int64_t n, unsigned *seed) {
    float *p = malloc(sizeof *p * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return p;
}

static void run_op(One *o, int op, Bufs *b) {
    CudaOpInfo info;
    int n = cuda_gen_op(&o->cg, &o->g, op, o->k, 64, &info, &o->d);
    ck_assert_int_gt(n, 0);
    b->ws = calloc((size_t)(info.ws_bytes / 4 + 1), sizeof(float));
    for (int i = 0; i < n; i++) emu(&o->k[i], b);
    free(b->ws);
}

/* matmul [S, M, K] x [K, N] (and every transposition), forward and backward,
 * against the definitions written index by index. */
START_TEST(matmul_launches_compute_the_products) {
    int ta = _i & 1, tb = (_i >> 1) & 1;
    gemm_via_desc = _i >> 2;
    gemm_desc_runs = 0;
    const int64_t S = 2, M = 3, K = 4, N = 5;
    One o;
    one_init(&o);
    o.g.train.dtype = DT_F32;
    int a = ta ? cm_t(&o.g, "a", DT_F32, TC_ACT, 3, S, K, M) : cm_t(&o.g, "a", DT_F32, TC_ACT, 3, S, M, K);
    int b = tb ? cm_t(&o.g, "b", DT_F32, TC_PARAM, 2, N, K, 0) : cm_t(&o.g, "b", DT_F32, TC_PARAM, 2, K, N, 0);
    int c = cm_t(&o.g, "c", DT_F32, TC_ACT, 3, S, M, N), dc = cm_t(&o.g, "dc", DT_F32, TC_ACT, 3, S, M, N);
    int da = cm_t(&o.g, "da", DT_F32, TC_ACT, 3, 1, 1, S * M * K), db = cm_t(&o.g, "db", DT_F32, TC_GRAD, 2, K, N, 0);
    GOp f = io_op(PRIM_MATMUL, 2, (int[]){a, b}, 1, (int[]){c});
    f.iattr[IA_MATMUL_TRANSPOSE_A] = ta;
    f.iattr[IA_MATMUL_TRANSPOSE_B] = tb;
    int fi = graph_add_op(&o.g, &f);
    int bi = bwd_of(&o.g, fi, 2, 2, (int[]){c, dc}, 2, (int[]){da, db});
    unsigned seed = 7 + (unsigned)_i;
    Bufs B;
    memset(&B, 0, sizeof B);
    B.t[a] = rnd(S * M * K, &seed);
    B.t[b] = rnd(K * N, &seed);
    B.t[c] = rnd(S * M * N, &seed); /* poison: the forward overwrites */
    B.t[dc] = rnd(S * M * N, &seed);
    B.t[da] = rnd(S * M * K, &seed); /* backward accumulates onto these */
    B.t[db] = rnd(K * N, &seed);
    float *da0 = malloc(sizeof(float) * (size_t)(S * M * K)), *db0 = malloc(sizeof(float) * (size_t)(K * N));
    memcpy(da0, B.t[da], sizeof(float) * (size_t)(S * M * K));
    memcpy(db0, B.t[db], sizeof(float) * (size_t)(K * N));
#define AI(s, m, k) (ta ? ((s) * K + (k)) * M + (m) : ((s) * M + (m)) * K + (k))
#define BI(k, n) (tb ? (n) * K + (k) : (k) * N + (n))
    run_op(&o, fi, &B);
    for (int64_t s = 0; s < S; s++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double r = 0;
                for (int64_t k = 0; k < K; k++) r += (double)B.t[a][AI(s, m, k)] * B.t[b][BI(k, n)];
                ck_assert_double_eq_tol(B.t[c][(s * M + m) * N + n], r, 1e-5);
            }
    run_op(&o, bi, &B);
    for (int64_t s = 0; s < S; s++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) {
                double r = da0[AI(s, m, k)];
                for (int64_t n = 0; n < N; n++) r += (double)B.t[dc][(s * M + m) * N + n] * B.t[b][BI(k, n)];
                ck_assert_double_eq_tol(B.t[da][AI(s, m, k)], r, 1e-5);
            }
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) {
            double r = db0[BI(k, n)];
            for (int64_t s = 0; s < S; s++)
                for (int64_t m = 0; m < M; m++) r += (double)B.t[a][AI(s, m, k)] * B.t[dc][(s * M + m) * N + n];
            ck_assert_double_eq_tol(B.t[db][BI(k, n)], r, 1e-5);
        }
#undef AI
#undef BI
    if (gemm_via_desc) ck_assert_int_eq(gemm_desc_runs, ta ? 2 : 3); /* transpose_a's weight gradient sums over batches */
    gemm_via_desc = 0;
    for (int i = 0; i < 64; i++) free(B.t[i]);
    free(da0);
    free(db0);
    ck_assert_int_eq(o.d.errors, 0);
    one_free(&o);
}
END_TEST

/* linear with bias: y = x w + b; dx, dw, db accumulate. */
START_TEST(linear_launches_compute_the_products) {
    const int64_t R = 70, I = 6, O = 5; /* R > 64: the bias gradient takes several partial sums */
    gemm_via_desc = _i;
    One o;
    one_init(&o);
    o.g.train.dtype = DT_F32;
    int x = cm_t(&o.g, "x", DT_F32, TC_ACT, 2, R, I, 0), w = cm_t(&o.g, "w", DT_F32, TC_PARAM, 2, I, O, 0);
    int bb = cm_t(&o.g, "b", DT_F32, TC_PARAM, 1, O, 0, 0), y = cm_t(&o.g, "y", DT_F32, TC_ACT, 2, R, O, 0);
    int dy = cm_t(&o.g, "dy", DT_F32, TC_ACT, 2, R, O, 0), dx = cm_t(&o.g, "dx", DT_F32, TC_ACT, 2, R, I, 0);
    int dw = cm_t(&o.g, "dw", DT_F32, TC_GRAD, 2, I, O, 0), db = cm_t(&o.g, "db", DT_F32, TC_GRAD, 1, O, 0, 0);
    GOp f = io_op(PRIM_LINEAR, 3, (int[]){x, w, bb}, 1, (int[]){y});
    int fi = graph_add_op(&o.g, &f);
    int bi = bwd_of(&o.g, fi, 3, 2, (int[]){y, dy}, 3, (int[]){dx, dw, db});
    unsigned seed = 3;
    Bufs B;
    memset(&B, 0, sizeof B);
    B.t[x] = rnd(R * I, &seed);
    B.t[w] = rnd(I * O, &seed);
    B.t[bb] = rnd(O, &seed);
    B.t[y] = rnd(R * O, &seed);
    B.t[dy] = rnd(R * O, &seed);
    B.t[dx] = calloc((size_t)(R * I), sizeof(float));
    B.t[dw] = calloc((size_t)(I * O), sizeof(float));
    B.t[db] = rnd(O, &seed);
    float db0[5];
    memcpy(db0, B.t[db], sizeof db0);
    run_op(&o, fi, &B);
    run_op(&o, bi, &B);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < O; j++) {
            double s = B.t[bb][j];
            for (int64_t i = 0; i < I; i++) s += (double)B.t[x][r * I + i] * B.t[w][i * O + j];
            ck_assert_double_eq_tol(B.t[y][r * O + j], s, 1e-5);
        }
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < I; i++) {
            double s = 0;
            for (int64_t j = 0; j < O; j++) s += (double)B.t[dy][r * O + j] * B.t[w][i * O + j];
            ck_assert_double_eq_tol(B.t[dx][r * I + i], s, 1e-5);
        }
    for (int64_t i = 0; i < I; i++)
        for (int64_t j = 0; j < O; j++) {
            double s = 0;
            for (int64_t r = 0; r < R; r++) s += (double)B.t[x][r * I + i] * B.t[dy][r * O + j];
            ck_assert_double_eq_tol(B.t[dw][i * O + j], s, 1e-5);
        }
    for (int64_t j = 0; j < O; j++) {
        double s = db0[j];
        for (int64_t r = 0; r < R; r++) s += B.t[dy][r * O + j];
        ck_assert_double_eq_tol(B.t[db][j], s, 1e-4);
    }
    for (int i = 0; i < 64; i++) free(B.t[i]);
    one_free(&o);
}
END_TEST


static int rnd_int(unsigned *s, int n) {
    *s = *s * 1103515245u + 12345u;
    return (int)((*s >> 8) % (unsigned)n);
}

/* ---- tile launches: tile by tile, the same as the whole op ------------------ */

enum { TC_MAXT = 12 };
typedef struct TileCase {
    One o;
    int fwd, bwd;          /* op ids */
    int w, gw;             /* the tiled weight and its gradient (-1: none) */
    int64_t wrow;          /* elements per weight row */
    int ntiles;
    int ts[TC_MAXT];       /* every tensor, with its element count */
    int64_t tn[TC_MAXT];
    int nts;
    int ids;               /* an i32 tensor (embedding ids), -1 */
    int64_t V;             /* ids are drawn from [0, V) */
} TileCase;

static int tc_t(TileCase *c, const char *name, TensorClass cls, int rank, int64_t d0, int64_t d1, int64_t d2, DType dt) {
    int t = cm_t(&c->o.g, name, dt, cls, rank, d0, d1, d2);
    c->ts[c->nts] = t;
    c->tn[c->nts++] = c->o.g.tensors[t].numel;
    return t;
}

static void tc_fill(TileCase *c, Bufs *b, unsigned seed) {
    memset(b, 0, sizeof *b);
    for (int i = 0; i < c->nts; i++) {
        b->t[c->ts[i]] = rnd(c->tn[i], &seed);
        if (c->ts[i] == c->ids)
            for (int64_t j = 0; j < c->tn[i]; j++) ((int32_t *)b->t[c->ts[i]])[j] = rnd_int(&seed, (int)c->V);
    }
}

/* The launches of op (whole: tiles 0) on b, with the weight and its
 * gradient bound to the tile's rows as the executor binds them. */
static void tc_run(TileCase *c, int op, int tile, Bufs *b) {
    CudaOpInfo info;
    int n = c->ntiles ? cuda_gen_op_tile(&c->o.cg, &c->o.g, op, tile, c->ntiles, c->o.k, 64, &info, &c->o.d)
                      : cuda_gen_op(&c->o.cg, &c->o.g, op, c->o.k, 64, &info, &c->o.d);
    ck_assert_msg(n >= 0, "%s", c->o.d.len ? c->o.d.items[c->o.d.len - 1].msg : "");
    float *w = b->t[c->w], *gw = c->gw >= 0 ? b->t[c->gw] : NULL;
    if (c->ntiles) {
        int64_t r0 = (int64_t)tile * (c->o.g.tensors[c->w].dims[0] / c->ntiles);
        b->t[c->w] = w + r0 * c->wrow;
        if (gw) b->t[c->gw] = gw + r0 * c->wrow;
    }
    b->ws = calloc((size_t)(info.ws_bytes / 4 + 1), sizeof(float));
    for (int i = 0; i < n; i++) emu(&c->o.k[i], b);
    if (info.err_off >= 0) ck_assert_int_eq(((int32_t *)b->ws)[info.err_off / 4], 0);
    free(b->ws);
    b->t[c->w] = w;
    if (gw) b->t[c->gw] = gw;
}

/* Runs the case whole and tiled from the same values; every tensor agrees. */
static void tc_check(TileCase *c, int ntiles, const char *what) {
    Bufs whole, tiled;
    tc_fill(c, &whole, 11);
    tc_fill(c, &tiled, 11);
    c->ntiles = 0;
    tc_run(c, c->fwd, 0, &whole);
    tc_run(c, c->bwd, 0, &whole);
    c->ntiles = ntiles;
    for (int t = 0; t < ntiles; t++) tc_run(c, c->fwd, t, &tiled);
    for (int t = 0; t < ntiles; t++) tc_run(c, c->bwd, t, &tiled);
    for (int i = 0; i < c->nts; i++) {
        int t = c->ts[i];
        if (t == c->ids) continue;
        for (int64_t j = 0; j < c->tn[i]; j++)
            ck_assert_msg(fabsf(whole.t[t][j] - tiled.t[t][j]) <= 1e-5f * (1 + fabsf(whole.t[t][j])),
                          "%s, %d tiles: %s[%lld] whole %g, tiled %g", what, ntiles, c->o.g.tensors[t].name, (long long)j,
                          (double)whole.t[t][j], (double)tiled.t[t][j]);
    }
    for (int i = 0; i < 64; i++) {
        free(whole.t[i]);
        free(tiled.t[i]);
    }
    ck_assert_int_eq(c->o.d.errors, 0);
}

/* An empty f32 case. */
static void tc_init(TileCase *c) {
    memset(c, 0, sizeof *c);
    c->ids = -1;
    one_init(&c->o);
    c->o.g.train.dtype = DT_F32;
}

/* The case's ops: forward f, its backward (f's first nfin inputs, then y
 * and dy; writing outs[0..nout)), and the tiled weight w with its gradient
 * gw, rows of wrow elements. */
static void tc_ops(TileCase *c, const GOp *f, int nfin, int y, int dy, int nout, const int *outs, int w, int gw,
                   int64_t wrow) {
    c->fwd = graph_add_op(&c->o.g, f);
    c->bwd = bwd_of(&c->o.g, c->fwd, nfin, 2, (int[]){y, dy}, nout, outs);
    c->w = w;
    c->gw = gw;
    c->wrow = wrow;
}

/* linear with bias (x [R, I] * w [I, O]; w's rows, I, are the reduction dim) */
START_TEST(tile_launches_linear) {
    const int64_t R = 70, I = 6, O = 5;
    gemm_via_desc = _i;
    TileCase c;
    tc_init(&c);
    int x = tc_t(&c, "x", TC_ACT, 2, R, I, 0, DT_F32), w = tc_t(&c, "w", TC_PARAM, 2, I, O, 0, DT_F32);
    int bb = tc_t(&c, "b", TC_PARAM, 1, O, 0, 0, DT_F32), y = tc_t(&c, "y", TC_ACT, 2, R, O, 0, DT_F32);
    int dy = tc_t(&c, "dy", TC_ACT, 2, R, O, 0, DT_F32), dx = tc_t(&c, "dx", TC_ACT, 2, R, I, 0, DT_F32);
    int dw = tc_t(&c, "dw", TC_GRAD, 2, I, O, 0, DT_F32), db = tc_t(&c, "db", TC_GRAD, 1, O, 0, 0, DT_F32);
    GOp f = io_op(PRIM_LINEAR, 3, (int[]){x, w, bb}, 1, (int[]){y});
    tc_ops(&c, &f, 3, y, dy, 3, (int[]){dx, dw, db}, w, dw, O);
    tc_check(&c, 2, "linear");
    tc_check(&c, 3, "linear");
    tc_check(&c, 6, "linear");
    /* tile 1's launches: the columns of x and dx start at r0 = 3 elements, the bias is tile 0's */
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, c.fwd, 1, 2, c.o.k, 64, NULL, &c.o.d), 1);
    ck_assert_int_eq(c.o.k[0].args[1].off, 3 * 4);
    ck_assert_int_eq(c.o.k[0].args[3].kind, CARG_NULL);
    ck_assert_ptr_nonnull(strstr(c.o.k[0].comment, ", tile 1 of 2: y += x[:, 3:6]*w_t"));
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, c.bwd, 1, 2, c.o.k, 64, NULL, &c.o.d), 2); /* db at tile 0 only */
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, c.bwd, 0, 2, c.o.k, 64, NULL, &c.o.d), 4);
    one_free(&c.o);
}
END_TEST

/* matmul a [S, M, K] * b, b [K, N] (rows: the reduction dim) or [N, K] with
 * transpose_b (rows: output columns) */
START_TEST(tile_launches_matmul) {
    int tb = _i & 1;
    gemm_via_desc = _i >> 1;
    const int64_t S = 2, M = 3, K = 4, N = 6;
    TileCase c;
    tc_init(&c);
    int a = tc_t(&c, "a", TC_ACT, 3, S, M, K, DT_F32);
    int b = tb ? tc_t(&c, "b", TC_PARAM, 2, N, K, 0, DT_F32) : tc_t(&c, "b", TC_PARAM, 2, K, N, 0, DT_F32);
    int y = tc_t(&c, "c", TC_ACT, 3, S, M, N, DT_F32), dc = tc_t(&c, "dc", TC_ACT, 3, S, M, N, DT_F32);
    int da = tc_t(&c, "da", TC_ACT, 3, S, M, K, DT_F32);
    int db = tb ? tc_t(&c, "db", TC_GRAD, 2, N, K, 0, DT_F32) : tc_t(&c, "db", TC_GRAD, 2, K, N, 0, DT_F32);
    GOp f = io_op(PRIM_MATMUL, 2, (int[]){a, b}, 1, (int[]){y});
    f.iattr[IA_MATMUL_TRANSPOSE_B] = tb;
    tc_ops(&c, &f, 2, y, dc, 2, (int[]){da, db}, b, db, tb ? K : N);
    tc_check(&c, 2, tb ? "matmul transpose_b" : "matmul");
    tc_check(&c, tb ? 3 : 4, tb ? "matmul transpose_b" : "matmul");
    /* a tiled matmul with transpose_a is refused, naming the op */
    c.o.g.ops[c.fwd].iattr[IA_MATMUL_TRANSPOSE_A] = 1;
    int e0 = c.o.d.errors;
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, c.fwd, 0, 2, c.o.k, 64, NULL, &c.o.d), -1);
    ck_assert_int_eq(c.o.d.errors, e0 + 1);
    ck_assert_ptr_nonnull(strstr(c.o.d.items[c.o.d.len - 1].msg, "op 0 fwd matmul, tile 0 of 2: a tiled matmul with transpose_a is not supported"));
    one_free(&c.o);
}
END_TEST

/* embedding (table [V, D] cut by vocabulary rows) */
START_TEST(tile_launches_embedding) {
    const int64_t V = 12, D = 5, B = 3, T = 7;
    TileCase c;
    tc_init(&c);
    int tab = tc_t(&c, "table", TC_PARAM, 2, V, D, 0, DT_F32), ids = tc_t(&c, "ids", TC_INPUT, 2, B, T, 0, DT_I32);
    int y = tc_t(&c, "y", TC_ACT, 3, B, T, D, DT_F32), dy = tc_t(&c, "dy", TC_ACT, 3, B, T, D, DT_F32);
    int dt = tc_t(&c, "dtable", TC_GRAD, 2, V, D, 0, DT_F32);
    c.ids = ids;
    c.V = V;
    GOp f = io_op(PRIM_EMBEDDING, 2, (int[]){tab, ids}, 1, (int[]){y});
    tc_ops(&c, &f, 2, y, dy, 1, (int[]){dt}, tab, dt, D);
    tc_check(&c, 2, "embedding");
    tc_check(&c, 3, "embedding");
    tc_check(&c, 4, "embedding");
    /* the forward's error word is where the whole op's is */
    CudaOpInfo wi, ti;
    ck_assert_int_eq(cuda_gen_op(&c.o.cg, &c.o.g, c.fwd, c.o.k, 64, &wi, &c.o.d), 2);
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, c.fwd, 2, 3, c.o.k, 64, &ti, &c.o.d), 2);
    ck_assert_int_eq(ti.err_off, wi.err_off);
    ck_assert_str_eq(ti.err_what, "embedding id");
    /* 5 tiles do not divide 12 rows; a gelu is not tiled */
    int e0 = c.o.d.errors;
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, c.fwd, 0, 5, c.o.k, 64, NULL, &c.o.d), -1);
    ck_assert_ptr_nonnull(strstr(c.o.d.items[c.o.d.len - 1].msg, "5 tiles do not divide the 12 rows of table"));
    GOp g = io_op(PRIM_GELU, 1, (int[]){y}, 1, (int[]){dy});
    int gi = graph_add_op(&c.o.g, &g);
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, gi, 0, 2, c.o.k, 64, NULL, &c.o.d), -1);
    ck_assert_msg(strstr(c.o.d.items[c.o.d.len - 1].msg, "fwd gelu, tile 0 of 2: only linear, matmul, embedding and moe_expert ops are tiled"), "%s", c.o.d.items[c.o.d.len - 1].msg);
    /* a moe_expert tiled by expert: tile 1 of 2 of 4 experts runs the
     * products over experts 2 and 3 (E 2, start[] from expert 2 on) on the
     * same workspace as the whole op, and scatters only its own pairs */
    int mx = tc_t(&c, "mx", TC_ACT, 2, 4, 5, 0, DT_F32), mi = tc_t(&c, "midx", TC_ACT, 2, 4, 2, 0, DT_I32);
    int mw = tc_t(&c, "mw", TC_PARAM, 3, 4, 6, 5, DT_F32), my = tc_t(&c, "my", TC_ACT, 3, 4, 2, 6, DT_F32);
    GOp m = io_op(PRIM_MOE_EXPERT, 3, (int[]){mx, mi, mw}, 1, (int[]){my});
    int mo = graph_add_op(&c.o.g, &m);
    CudaOpInfo mwi, mti;
    ck_assert_int_eq(cuda_gen_op(&c.o.cg, &c.o.g, mo, c.o.k, 64, &mwi, &c.o.d), 5);
    ck_assert_str_eq(c.o.k[1].entry, "zk_moe_route"); /* after the error word's clear */
    int64_t st = c.o.k[1].args[0].ws_off; /* the route's start[] */
    ck_assert_str_eq(c.o.k[4].entry, "zk_moe_scatter");
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, mo, 1, 2, c.o.k, 64, &mti, &c.o.d), 5);
    ck_assert_int_eq(mti.err_off, mwi.err_off);
    ck_assert_int_eq(mti.ws_bytes, mwi.ws_bytes);
    ck_assert_str_eq(c.o.k[1].entry, "zk_moe_route");
    ck_assert_int_eq(c.o.k[1].args[5].i, 4); /* every pair listed, as untiled */
    ck_assert_str_eq(c.o.k[3].entry, "zk_moe_gemm_fwd");
    ck_assert_int_eq(c.o.k[3].args[3].ws_off, st + 2 * 4);
    ck_assert_int_eq(c.o.k[3].args[4].i, 2);
    ck_assert_int_eq(c.o.k[3].args[2].tensor, mw);
    ck_assert_int_eq(c.o.k[3].args[2].off, 0); /* the tile buffer holds expert 2 first */
    ck_assert_str_eq(c.o.k[4].entry, "zk_moe_scatter_tile");
    ck_assert_int_eq(c.o.k[4].args[3].ws_off, st + 2 * 4);
    ck_assert_int_eq(c.o.k[4].args[7].i, 2);
    ck_assert_int_eq(c.o.k[4].args[8].i, 1); /* a later tile adds onto tile 0's zeros */
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, mo, 0, 2, c.o.k, 64, &mti, &c.o.d), 5);
    ck_assert_int_eq(c.o.k[4].args[3].ws_off, st);
    ck_assert_int_eq(c.o.k[4].args[8].i, 0);
    /* 3 tiles do not divide 4 experts (the planner refuses them first) */
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, mo, 0, 3, c.o.k, 64, NULL, &c.o.d), -1);
    ck_assert_msg(strstr(c.o.d.items[c.o.d.len - 1].msg, "3 tiles do not divide the 4 experts of mw"), "%s",
                  c.o.d.items[c.o.d.len - 1].msg);
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, c.fwd, 2, 2, c.o.k, 64, NULL, &c.o.d), -1);
    ck_assert_ptr_nonnull(strstr(c.o.d.items[c.o.d.len - 1].msg, "tile 2 of 2: no such tile"));
    ck_assert_int_eq(cuda_gen_op_tile(&c.o.cg, &c.o.g, c.fwd, 0, 1, c.o.k, 64, NULL, &c.o.d), -1);
    ck_assert_int_eq(c.o.d.errors, e0 + 5);
    one_free(&c.o);
}
END_TEST

START_TEST(utility_launches) {
    One o;
    one_init(&o);
    int b = cm_t(&o.g, "b", DT_BF16, TC_GRAD, 2, 10, 30, 0), f = cm_t(&o.g, "f", DT_F32, TC_ACT, 2, 10, 30, 0);
    int h = cm_t(&o.g, "h", DT_F16, TC_ACT, 2, 10, 30, 0), b2 = cm_t(&o.g, "b2", DT_BF16, TC_GRAD, 2, 10, 30, 0);
    ck_assert_int_eq(cuda_gen_cast(&o.cg, &o.g, f, b, &o.k[0], &o.d), 0);
    ck_assert_str_eq(o.k[0].entry, "zk_cast_to_f32");
    ck_assert_str_eq(o.k[0].spec, "bf16");
    ck_assert_int_eq(o.k[0].args[0].tensor, f);
    ck_assert_int_eq(o.k[0].args[2].i, 300);
    ck_assert_int_eq(o.k[0].args[4].i, 0); /* overwrite */
    ck_assert_int_eq(cuda_gen_cast(&o.cg, &o.g, h, f, &o.k[0], &o.d), 0);
    ck_assert_str_eq(o.k[0].entry, "zk_cast_from_f32");
    ck_assert_str_eq(o.k[0].spec, "f16");
    ck_assert_int_eq(cuda_gen_axpy(&o.cg, &o.g, b, b2, 0.5, &o.k[0], &o.d), 0);
    ck_assert_str_eq(o.k[0].entry, "zk_axpy");
    ck_assert_double_eq(o.k[0].args[3].f, 0.5);
    ck_assert_int_eq(cuda_gen_scale(&o.cg, &o.g, b, 0.25, &o.k[0], &o.d), 0);
    ck_assert_str_eq(o.k[0].entry, "zk_scale");
    ck_assert_int_eq(o.d.errors, 0);
    ck_assert_int_eq(cuda_gen_cast(&o.cg, &o.g, h, b, &o.k[0], &o.d), -1);
    ck_assert_ptr_nonnull(strstr(o.d.items[o.d.len - 1].msg, "casts go between f32 and a float dtype (not bf16 to f16)"));
    ck_assert_int_eq(cuda_gen_axpy(&o.cg, &o.g, b, f, 1.0, &o.k[0], &o.d), -1);
    ck_assert_ptr_nonnull(strstr(o.d.items[o.d.len - 1].msg, "mixed dtypes"));
    ck_assert_int_eq(cuda_gen_scale(&o.cg, &o.g, 99, 1.0, &o.k[0], &o.d), -1);
    ck_assert_ptr_nonnull(strstr(o.d.items[o.d.len - 1].msg, "tensor 99 does not exist"));
    one_free(&o);
}
END_TEST

/* Random ops over random tensors: every call either lowers the op or reports
 * an error; none crashes (the suite also runs under ASan and UBSan). */
START_TEST(random_ops_never_crash) {
    One o;
    one_init(&o);
    unsigned seed = 12345;
#define RND(n) rnd_int(&seed, (n))
    const DType dts[] = {DT_F32, DT_BF16, DT_F16, DT_I32, DT_NONE};
    int pool[40];
    for (int i = 0; i < 40; i++) {
        int rank = RND(4);
        int64_t dims[3];
        dims[0] = 1 + RND(4) * (RND(3) ? 32 : 1);
        dims[1] = 1 + RND(70);
        dims[2] = 1 + RND(3) * 64;
        if (RND(10) == 0) dims[RND(3)] = 0;
        pool[i] = graph_add_tensor(&o.g, "t", dts[RND(5)], rank, dims, TC_ACT);
    }
    int lowered = 0, refused = 0;
    for (int it = 0; it < 3000; it++) {
        GOp op = cm_op((PrimId)RND(PRIM_COUNT + 1));
        op.kind = (OpKind)RND(OP_KIND_COUNT);
        op.nin = RND(7);
        op.nout = RND(4);
        for (int i = 0; i < op.nin; i++) op.in[i] = RND(8) ? pool[RND(40)] : (RND(2) ? -1 : 1000);
        for (int i = 0; i < op.nout; i++) op.out[i] = RND(8) ? pool[RND(40)] : -1;
        op.nfin = RND(5);
        op.iattr[0] = RND(5) - 1;
        op.iattr[1] = RND(5) - 1;
        op.fattr[0] = RND(3) ? 1e-5 : -1;
        int id = graph_add_op(&o.g, &op);
        int e0 = o.d.errors;
        int n = gen(&o, id);
        if (n < 0) {
            ck_assert_int_gt(o.d.errors, e0);
            refused++;
        } else {
            ck_assert_int_eq(o.d.errors, e0);
            for (int k = 0; k < n && k < 64; k++) ck_assert_ptr_nonnull(strstr(o.k[k].source, o.k[k].entry));
            lowered++;
        }
        /* and one tile of it, as a tiled kernel instruction would ask (crash-free; these rarely tile) */
        int e1 = o.d.errors, tn = cuda_gen_op_tile(&o.cg, &o.g, id, RND(3), 1 + RND(3), o.k, 64, NULL, &o.d);
        ck_assert(tn < 0 ? o.d.errors > e1 : o.d.errors == e1);
    }
#undef RND
    ck_assert_int_gt(lowered, 50);
    ck_assert_int_gt(refused, 50);
    one_free(&o);
}
END_TEST

/* moe_expert: route, gather, the grouped product, scatter; the arguments
 * runtime/gpu/cumoe.c reads to run the product through cuBLASLt (two
 * workspace blocks, the weight, start[], E, O, I); a workspace sized by
 * the n = R*k pairs, whatever the routing. */
START_TEST(moe_expert_gathers_by_expert) {
    One o;
    one_init(&o);
    const int64_t R = 10, k = 2, E = 4, I = 24, O = 40, n = R * k;
    int x = cm_t(&o.g, "x", DT_BF16, TC_ACT, 2, R, I, 0), idx = cm_t(&o.g, "idx", DT_I32, TC_ACT, 2, R, k, 0);
    int w = cm_t(&o.g, "w", DT_BF16, TC_PARAM, 3, E, O, I), y = cm_t(&o.g, "y", DT_BF16, TC_ACT, 3, R, k, O);
    int dy = cm_t(&o.g, "dy", DT_BF16, TC_ACT, 3, R, k, O), dx = cm_t(&o.g, "dx", DT_BF16, TC_ACT, 2, R, I, 0);
    int dw = cm_t(&o.g, "dw", DT_BF16, TC_GRAD, 3, E, O, I);
    GOp f = io_op(PRIM_MOE_EXPERT, 3, (int[]){x, idx, w}, 1, (int[]){y});
    int fi = graph_add_op(&o.g, &f);
    int bi = bwd_of(&o.g, fi, 3, 2, (int[]){y, dy}, 3, (int[]){dx, -1, dw});
    CudaKernel kk[CUDA_OP_MAX_KERNELS];
    CudaOpInfo info;
    int nf = cuda_gen_op(&o.cg, &o.g, fi, kk, CUDA_OP_MAX_KERNELS, &info, &o.d);
    ck_assert_int_ge(nf, 4);
    /* err word, start [E+1], order [n], pos [n], then [n, I] and [n, O] bf16 blocks, each slice 256-aligned */
    ck_assert_int_ge(info.ws_bytes, (E + 1 + 2 * n) * 4 + n * (I + O) * 2);
    ck_assert_int_le(info.ws_bytes, (E + 1 + 2 * n) * 4 + n * (I + O) * 2 + 6 * 256);
    const char *fwd[4] = {"zk_moe_route", "zk_moe_gather", "zk_moe_gemm_fwd", "zk_moe_scatter"};
    for (int i = 0; i < 4; i++) ck_assert_str_eq(kk[nf - 4 + i].entry, fwd[i]);
    const CudaKernel *g = &kk[nf - 2];
    ck_assert_int_eq(g->nargs, 7);
    const CudaArgKind want[7] = {CARG_WS, CARG_WS, CARG_TENSOR, CARG_WS, CARG_I64, CARG_I64, CARG_I64};
    for (int i = 0; i < 7; i++) ck_assert_int_eq(g->args[i].kind, want[i]);
    ck_assert_int_eq(g->args[2].tensor, w);
    ck_assert_int_eq(g->args[4].i, E);
    ck_assert_int_eq(g->args[5].i, O);
    ck_assert_int_eq(g->args[6].i, I);
    ck_assert_int_eq(g->grid[1], (n + 63) / 64 + E); /* the tile bound: every token on one expert fits */
    /* the C block holds n rows of O, the A block n rows of I, inside the workspace */
    ck_assert_int_le(g->args[0].ws_off + n * O * 2, info.ws_bytes);
    ck_assert_int_le(g->args[1].ws_off + n * I * 2, info.ws_bytes);
    const CudaKernel *ga = &kk[nf - 3];
    ck_assert_int_eq(ga->args[1].tensor, x);
    ck_assert_int_eq(ga->args[6].i, I);
    ck_assert_int_eq(ga->args[7].i, k); /* x has a row per token: pair p reads row p / k */
    int nb = cuda_gen_op(&o.cg, &o.g, bi, kk, CUDA_OP_MAX_KERNELS, &info, &o.d);
    ck_assert_int_ge(nb, 6);
    const char *bwd[6] = {"zk_moe_route", "zk_moe_gather", "zk_moe_gather", "zk_moe_gemm_dw", "zk_moe_gemm_dx", "zk_moe_scatter"};
    for (int i = 0; i < 6; i++) ck_assert_str_eq(kk[nb - 6 + i].entry, bwd[i]);
    ck_assert_int_eq(kk[nb - 3].args[0].tensor, dw);
    const CudaKernel *sc = &kk[nb - 1];
    ck_assert_int_eq(sc->args[0].tensor, dx);
    ck_assert_int_eq(sc->args[3].i, R); /* a row per token, */
    ck_assert_int_eq(sc->args[4].i, k); /* its k slots summed */
    ck_assert_int_eq(sc->args[6].i, 1); /* into dx */
    ck_assert_int_eq(o.d.errors, 0);
    one_free(&o);
}
END_TEST

/* Every example model, through the real front end: every op lowers, and the
 * launches of forward ops name their .zl line. */
START_TEST(example_models_lower) {
    const char *ex[] = {"gpt2-tiny", "gpt2-small", "gpt2-tiny-offload", "gpt3-175b", "llama-tiny", "llama2-7b", "llama2-70b",
                        "moe/mixtral-8x7b", "moe/qwen3-30b-a3b"};
    for (size_t e = 0; e < sizeof ex / sizeof *ex; e++) {
        Arena a;
        arena_init(&a);
        DiagSink d;
        diag_init(&d);
        SourceSet src;
        source_set_init(&src);
        char path[512];
        snprintf(path, sizeof path, "%s/../examples/%s.zl", ZINF_STDLIB_DIR, ex[e]);
        Graph g;
        if (!cm_load_zl(&g, &a, &src, path, &d)) {
            diag_render(&d, &src, stderr, false);
            ck_abort_msg("%s does not check", path);
        }
        CudaGen cg;
        CudaGenOptions o = opts();
        o.sources = &src;
        cuda_gen_init(&cg, &a, &o);
        CudaModule m;
        if (cuda_gen_graph(&cg, &g, &m, &d) != 0) {
            diag_render(&d, &src, stderr, false);
            ck_abort_msg("%s: cuda_gen failed", ex[e]);
        }
        ck_assert_int_gt(m.nkernels, 10);
        ck_assert_int_le(m.nunits, 16);
        int named = 0;
        for (int i = 0; i < m.nkernels; i++)
            if (g.ops[m.kernels[i].op].kind == OP_FWD) {
                ck_assert_msg(strstr(m.kernels[i].comment, ".zl:") != NULL, "%s: %s", ex[e], m.kernels[i].comment);
                named++;
            }
        ck_assert_int_gt(named, 0);
        source_set_free(&src);
        diag_free(&d);
        arena_free(&a);
    }
}
END_TEST

/* The decode unit (cuda_gen_decode.c): one text for models of the same
 * dtype, every kernel for each storage dtype of the forward (the loss's
 * f32 aside), deterministic; none when a forward primitive is one its
 * kernels do not serve. */
START_TEST(decode_unit) {
    Arena a;
    arena_init(&a);
    DiagSink d;
    diag_init(&d);
    Graph g, l, f;
    CmShape f32 = cm_gpt2_tiny;
    f32.dt = DT_F32;
    ck_assert(cm_build(&g, &a, &cm_gpt2_tiny, &d));
    ck_assert(cm_build(&l, &a, &cm_llama_gqa, &d));
    ck_assert(cm_build(&f, &a, &f32, &d));
    CudaGen cg;
    CudaGenOptions o = opts();
    cuda_gen_init(&cg, &a, &o);
    CudaUnit u, v, w;
    ck_assert_int_eq(cuda_gen_decode_unit(&cg, &g, &u, &d), 1);
    ck_assert_int_eq(cuda_gen_decode_unit(&cg, &l, &v, &d), 1);
    ck_assert_int_eq(cuda_gen_decode_unit(&cg, &f, &w, &d), 1);
    ck_assert_int_eq(d.errors, 0);
    ck_assert_str_eq(u.family, "decode");
    ck_assert_str_eq(u.spec, "bf16");
    ck_assert_str_eq(w.spec, "f32");
    ck_assert_str_eq(u.hash, v.hash); /* gpt2 and llama in bf16: one unit */
    ck_assert_str_eq(u.source, v.source);
    ck_assert_str_ne(u.hash, w.hash);
    ck_assert_int_eq(u.nlaunches, 0);
    static const char *const want[] = {"zkd_embed_bf16(", "zkd_linear_bf16(", "zkd_rope_bf16(", "zkd_attend_bf16(",
                                       "zkd_kv_append_bf16(", "zkd_rmsnorm_bf16(", "__global__ void zkd_set("};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) ck_assert_msg(strstr(u.source, want[i]), "no %s", want[i]);
    ck_assert_ptr_nonnull(strstr(u.source, "void zkd_linear_bf16(zk_bf16 *y, const zk_bf16 *x, const zk_bf16 *w"));
    ck_assert_ptr_null(strstr(u.source, "zkd_linear_f32("));
    ck_assert_ptr_nonnull(strstr(w.source, "void zkd_attend_f32(float *y, const float *q, const float *kc"));
    ck_assert_ptr_null(strstr(w.source, "zkd_linear_bf16("));
    ck_assert_ptr_null(strstr(u.source, "@"));
    /* the training kernels a step reuses are the training files' code, as
     * device functions in the dtype's namespace, which the entries call */
    ck_assert_ptr_nonnull(strstr(u.source, "namespace zkt_bf16 {\ntypedef zk_bf16 T;"));
    ck_assert_ptr_nonnull(strstr(u.source, "__device__ void zk_layernorm_fwd(T *y, const T *x"));
    ck_assert_ptr_nonnull(strstr(u.source, "{ zkt_bf16::zk_layernorm_fwd(y, x, g, b, rows, D, eps); }"));
    ck_assert_ptr_nonnull(strstr(v.source, "{ zkt_bf16::zk_silu_fwd(y, x, n); }"));
    /* a dense model's unit leaves moe.cu out (as much code as the rest) */
    ck_assert_ptr_null(strstr(u.source, "zk_moe_topk"));
    ck_assert_ptr_null(strstr(u.source, "zkd_moe_expert_bf16("));
    ck_assert_ptr_null(strstr(u.source, "#define ZK_DECODE_MOE"));
    /* a mixture of experts: moe.cu's routing, gates, combination and shared
     * gate, and decode.cu's expert products reading the ids on the device */
    One m;
    one_init(&m);
    int lg = cm_t(&m.g, "lg", DT_BF16, TC_ACT, 2, 4, 4, 0), idx = cm_t(&m.g, "idx", DT_I32, TC_ACT, 2, 4, 2, 0);
    int x = cm_t(&m.g, "x", DT_BF16, TC_ACT, 2, 4, 8, 0), we = cm_t(&m.g, "w", DT_BF16, TC_PARAM, 3, 4, 8, 8);
    int y = cm_t(&m.g, "y", DT_BF16, TC_ACT, 3, 4, 2, 8);
    GOp tk = io_op(PRIM_MOE_TOPK, 1, (int[]){lg}, 1, (int[]){idx}), ex = io_op(PRIM_MOE_EXPERT, 3, (int[]){x, idx, we}, 1, (int[]){y});
    graph_add_op(&m.g, &tk);
    graph_add_op(&m.g, &ex);
    m.g.nforward = m.g.nops;
    CudaUnit mu;
    ck_assert_int_eq(cuda_gen_decode_unit(&m.cg, &m.g, &mu, &m.d), 1);
    ck_assert_ptr_nonnull(strstr(mu.source, "#define ZK_DECODE_MOE 1\n"));
    ck_assert_ptr_nonnull(strstr(mu.source, "__device__ void zk_moe_topk(int *idx, const T *logits"));
    ck_assert_ptr_nonnull(strstr(mu.source, "{ zkt_bf16::zk_moe_topk(idx, logits, R, E, k); }"));
    ck_assert_ptr_nonnull(strstr(mu.source, "{ zkt_bf16::zk_moe_gate_fwd(y, logits, idx, R, E, k, normalize, err); }"));
    ck_assert_ptr_nonnull(strstr(mu.source, "{ zkt_bf16::zk_moe_combine_fwd(y, o, wt, R, k, D); }"));
    ck_assert_ptr_nonnull(strstr(mu.source, "{ zkt_bf16::zk_moe_sgate_fwd(y, x, g, R, D); }"));
    ck_assert_ptr_nonnull(strstr(mu.source, "void zkd_moe_expert_bf16(zk_bf16 *y, const zk_bf16 *x, const int *idx, const zk_bf16 *w"));
    ck_assert_ptr_null(strstr(mu.source, "zkd_moe_expert_f32("));
    ck_assert_str_ne(mu.hash, u.hash);
    one_free(&m);
    ck_assert_ptr_null(strstr(u.source, "extern \"C\" __global__ void zk_"));
    ck_assert_ptr_null(strstr(u.source, "namespace zkt_f32"));
    const char *set = strstr(u.source, "__global__ void zkd_set(");
    ck_assert_ptr_null(strstr(set + 1, "__global__ void zkd_set(")); /* one, whatever the dtypes */
    g.ops[0].prim = PRIM_COUNT; /* a primitive the decode kernels do not know */
    ck_assert_int_eq(cuda_gen_decode_unit(&cg, &g, &v, &d), 0);
    diag_free(&d);
    arena_free(&a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cuda_gen");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, gpt2_module_is_complete);
    tcase_add_test(t, moe_expert_gathers_by_expert);
    tcase_add_test(t, generation_is_deterministic);
    tcase_add_test(t, gemm_tile_rule);
    tcase_add_test(t, comment_names_op_and_line);
    tcase_add_test(t, rope_scaling_and_rmsnorm_heads);
    tcase_add_test(t, gemma_and_long_context_launches);
    tcase_add_test(t, unsupported_input_is_an_error);
    tcase_add_test(t, workspace_and_error_words);
    tcase_add_test(t, utility_launches);
    tcase_add_test(t, random_ops_never_crash);
    tcase_add_test(t, example_models_lower);
    /* each product twice: the launch's arguments, then its cuBLASLt descriptor */
    tcase_add_loop_test(t, matmul_launches_compute_the_products, 0, 8);
    tcase_add_loop_test(t, linear_launches_compute_the_products, 0, 2);
    tcase_add_loop_test(t, tile_launches_linear, 0, 2);
    tcase_add_loop_test(t, tile_launches_matmul, 0, 4);
    tcase_add_test(t, tile_launches_embedding);
    tcase_add_test(t, decode_unit);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
