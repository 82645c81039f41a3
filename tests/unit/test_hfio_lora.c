/* hfio_lora: LoRA adapters in the Hugging Face mapping (runtime/hf/hfio_lora.c;
 * docs/huggingface.md "LoRA").
 *
 * Hand-built plans hold only what the adapter code reads: the parameters
 * (a base weight W [in, out], A [in, r], B [r, out] in PEFT's names) and the
 * forward ops scale(linear(linear(x, A), B), alpha / r); the mapping's
 * groups and pieces are made by hand too. Checked: adapter_config.json's r,
 * lora_alpha (scale * r), target_modules (short names when they adapt
 * exactly the adapted modules, else full paths) and fan_in_fan_out (a base
 * weight kept [in, out], GPT-2's Conv1D); the refusals of mixed ranks and
 * mixed alphas, of an adapter without its B or its scale; and the merge
 * W + A B alpha/r (hf_lora_add) against products worked out by hand, for
 * the whole weight and for a block of it; LoRA on the experts: PEFT's
 * target_parameters, and the merge of each expert's slice; target lists
 * past a line, and the stacked experts' tensors left out of the short
 * names' test. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hfio_impl.h"

enum { NT = 64, NO = 32, NG = 32, NAME = 160 };

typedef struct Fx {
    PlanTensor t[NT];
    PlanOp o[NO];
    HfGroup g[NG];
    HfPiece pc[NG];
    char names[NT + NG][NAME];
    int nnames;
    Plan p;
    HfLayout l;
} Fx;

static Fx F;
static char err[1024];

static const char *keep(const char *s) {
    char *d = F.names[F.nnames++];
    snprintf(d, NAME, "%s", s);
    return d;
}

static void fx_init(void) {
    memset(&F, 0, sizeof F);
    F.p.tensors = F.t;
    F.p.ops = F.o;
    F.l.groups = F.g;
    F.l.pieces = F.pc;
}

static int tensor(const char *name, uint8_t cls, int64_t d0, int64_t d1) {
    int i = (int)F.p.ntensors++;
    F.t[i] = (PlanTensor){.name = keep(name), .dtype = DT_F32, .cls = cls, .rank = 2, .dims = {d0, d1}, .numel = d0 * d1,
                          .param = -1, .grad = -1, .master = -1, .momentum = -1, .variance = -1, .segment = -1, .shard = -1};
    return i;
}

/* Group hf (one piece: parameter t whole). */
static void group(const char *hf, int t, bool transpose) {
    int g = F.l.ngroups++, k = F.l.npieces++;
    F.pc[k] = (HfPiece){.tensor = t, .rows = F.t[t].dims[0], .cols = F.t[t].dims[1], .w = F.t[t].dims[1], .group = g,
                        .transpose = transpose, .exported = true};
    F.g[g] = (HfGroup){.name = keep(hf), .transpose = transpose, .first = k, .rank = 2, .dtype = DT_F32,
                       .adapter = hf_is_adapter(hf)};
}

static void op(uint8_t prim, int a, int b, int y, double by) {
    PlanOp *o = &F.o[F.p.nops++];
    memset(o, 0, sizeof *o);
    o->kind = OP_FWD;
    o->prim = prim;
    o->nin = b < 0 ? 1 : 2;
    o->nout = 1;
    o->in[0] = a;
    o->in[1] = b;
    o->out[0] = y;
    o->fattr[FA_SCALE_BY] = by;
    o->fwd = o->segment = -1;
}

/* Base module m (HF "m.weight", transposed as nn.Linear's or kept as
 * Conv1D's), and unless r is 0 its adapter of rank r scaled by `scale`
 * (0: no scale op); with_b false leaves B out of the mapping. */
static void module(const char *m, bool transpose, int64_t in, int64_t out, int64_t r, double scale, bool with_b) {
    char n[NAME];
    snprintf(n, sizeof n, "%s.weight", m);
    group(n, tensor(n, TC_PARAM, in, out), transpose);
    if (!r) return;
    int x = tensor("x", TC_ACT, 5, in);
    snprintf(n, sizeof n, "%s.a", m);
    int a = tensor(n, TC_PARAM, in, r);
    snprintf(n, sizeof n, "%s.b", m);
    int b = tensor(n, TC_PARAM, r, out);
    int xa = tensor("xa", TC_ACT, 5, r), xab = tensor("xab", TC_ACT, 5, out), y = tensor("y", TC_ACT, 5, out);
    op(PRIM_LINEAR, x, a, xa, 0);
    op(PRIM_LINEAR, xa, b, xab, 0);
    if (scale) op(PRIM_SCALE, xab, -1, y, scale);
    snprintf(n, sizeof n, HF_PEFT_PREFIX "%s.lora_A.weight", m);
    group(n, a, true);
    snprintf(n, sizeof n, HF_PEFT_PREFIX "%s.lora_B.weight", m);
    if (with_b) group(n, b, true);
}

/* LoRA on the experts of layer "model.layers.0.mlp.experts" (stdlib/moe.zl):
 * A [E, r, in] (expert_rows), B [E, out, r] (expert_cols) under PEFT's
 * names (`wrap`: ".base_layer" or ""), and the ops
 * scale(moe_expert(moe_expert(x, idx, A), idx, B), scale), split in two
 * when `split` (gate and up sharing B). */
static void experts(const char *wrap, int64_t E, int64_t in, int64_t out, int64_t r, double scale, bool split) {
    char n[NAME];
    int x = tensor("x", TC_ACT, 5, in), idx = tensor("idx", TC_ACT, 5, 2);
    int a = tensor("a", TC_PARAM, E, r), b = tensor("b", TC_PARAM, E, out);
    F.t[a].rank = F.t[b].rank = 3; /* [E, r, in] and [E, out, r] */
    F.t[a].dims[2] = in;
    F.t[b].dims[2] = r;
    int t = tensor("t", TC_ACT, 10, r), u = tensor("u", TC_ACT, 10, out), s = tensor("s", TC_ACT, 10, out);
    op(PRIM_MOE_EXPERT, x, idx, t, 0);
    F.o[F.p.nops - 1].nin = 3;
    F.o[F.p.nops - 1].in[2] = a;
    op(PRIM_MOE_EXPERT, t, idx, u, 0);
    F.o[F.p.nops - 1].nin = 3;
    F.o[F.p.nops - 1].in[2] = b;
    op(PRIM_SCALE, u, -1, s, scale);
    if (split) {
        int d0 = tensor("d0", TC_ACT, 10, out / 2), d1 = tensor("d1", TC_ACT, 10, out / 2);
        op(PRIM_SPLIT, s, -1, d0, 0);
        F.o[F.p.nops - 1].nout = 2;
        F.o[F.p.nops - 1].out[1] = d1;
    }
    for (int k = 0; k < 2; k++) {
        snprintf(n, sizeof n, HF_PEFT_PREFIX "model.layers.0.mlp.experts%s.lora_%c.weight", wrap, "AB"[k]);
        group(n, k ? b : a, false);
        F.pc[F.l.npieces - 1].layout = k ? PLAN_HF_EXPERT_COLS : PLAN_HF_EXPERT_ROWS;
    }
}

/* adapter_config.json of F, which must contain each of the lines. */
static void config_has(const char *const *lines) {
    char *c = hf_adapter_config(&F.p, &F.l, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    for (int i = 0; lines[i]; i++) ck_assert_msg(strstr(c, lines[i]) != NULL, "'%s' not in:\n%s", lines[i], c);
    free(c);
}

static void config_refused(const char *msg) {
    char *c = hf_adapter_config(&F.p, &F.l, err, sizeof err);
    ck_assert_msg(c == NULL, "accepted:\n%s", c ? c : "");
    ck_assert_msg(strstr(err, msg) != NULL, "message '%s' lacks '%s'", err, msg);
}

START_TEST(config_llama) {
    fx_init();
    for (int i = 0; i < 2; i++) {
        char m[64];
        snprintf(m, sizeof m, "model.layers.%d.self_attn.q_proj", i);
        module(m, true, 8, 8, 4, 16.0 / 4, true);
        snprintf(m, sizeof m, "model.layers.%d.self_attn.k_proj", i);
        module(m, true, 8, 4, 0, 0, true);
        snprintf(m, sizeof m, "model.layers.%d.mlp.down_proj", i);
        module(m, true, 12, 8, 4, 16.0 / 4, true);
    }
    const char *want[] = {"\"peft_type\": \"LORA\"", "\"r\": 4,", "\"lora_alpha\": 16,",
                          "\"target_modules\": [\"q_proj\", \"down_proj\"],", "\"fan_in_fan_out\": false,",
                          "\"bias\": \"none\"", NULL};
    config_has(want);
}
END_TEST

/* GPT-2: Conv1D weights [in, out] (not transposed): fan_in_fan_out; an
 * alpha that is not a whole number is written as it is. */
START_TEST(config_gpt2) {
    fx_init();
    module("transformer.h.0.attn.c_attn", false, 8, 24, 2, 3.0 / 2, true);
    module("transformer.h.0.mlp.c_fc", false, 8, 32, 2, 3.0 / 2, true);
    const char *want[] = {"\"r\": 2,", "\"lora_alpha\": 3,", "\"target_modules\": [\"c_attn\", \"c_fc\"],",
                          "\"fan_in_fan_out\": true,", NULL};
    config_has(want);
    fx_init();
    module("transformer.h.0.attn.c_attn", false, 8, 24, 4, 0.625, true);
    const char *half[] = {"\"r\": 4,", "\"lora_alpha\": 2.5,", NULL};
    config_has(half);
}
END_TEST

/* A short name that would also adapt a module without an adapter (PEFT
 * matches every module whose path ends in it): the config lists paths. */
START_TEST(config_full_paths) {
    fx_init();
    module("transformer.h.0.attn.c_proj", false, 8, 8, 2, 2, true);
    module("transformer.h.0.mlp.c_proj", false, 32, 8, 0, 0, true);
    module("transformer.h.1.attn.c_proj", false, 8, 8, 2, 2, true);
    module("transformer.h.1.mlp.c_proj", false, 32, 8, 0, 0, true);
    const char *want[] = {"\"target_modules\": [\"transformer.h.0.attn.c_proj\", \"transformer.h.1.attn.c_proj\"],", NULL};
    config_has(want);
    fx_init();
    module("transformer.h.0.attn.c_proj", false, 8, 8, 2, 2, true);
    module("transformer.h.0.mlp.c_proj", false, 32, 8, 2, 2, true);
    const char *both[] = {"\"target_modules\": [\"c_proj\"],", NULL};
    config_has(both);
}
END_TEST

/* Full paths longer, together, than a line of the writer's (512 bytes):
 * written whole. */
START_TEST(config_long_paths) {
    fx_init();
    char m[NAME], want[1024] = "\"target_modules\": [";
    for (int i = 0; i < 8; i++) {
        snprintf(m, sizeof m, "model.layers.%d.mlp.shared_expert.a_projection_with_a_rather_long_module_name", i);
        module(m, true, 8, 8, 2, 2, true);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s\"%s\"", i ? ", " : "", m);
    }
    module("model.layers.9.mlp.a_projection_with_a_rather_long_module_name", true, 8, 8, 0, 0, true);
    strcat(want, "],");
    ck_assert_int_gt((int)strlen(want), 600);
    const char *lines[] = {want, "\"fan_in_fan_out\": false,", NULL};
    config_has(lines);
}
END_TEST

/* A stacked expert's tensor (experts.N.gate_proj: a slice of transformers'
 * fused parameter, no module) does not make the short name inexact. */
START_TEST(config_stacked_experts) {
    fx_init();
    module("model.layers.0.mlp.gate_proj", true, 8, 12, 2, 2, true);
    group("model.layers.1.mlp.experts.0.gate_proj.weight", tensor("e", TC_PARAM, 12, 8), false);
    F.pc[F.l.npieces - 1].stacked = true;
    const char *want[] = {"\"target_modules\": [\"gate_proj\"],", NULL};
    config_has(want);
    F.pc[F.l.npieces - 1].stacked = false; /* a module of that name: the adapted one by its path */
    const char *full[] = {"\"target_modules\": [\"model.layers.0.mlp.gate_proj\"],", NULL};
    config_has(full);
}
END_TEST

/* PEFT's target_parameters: gate_up_proj where B's product is split (gate
 * and up), down_proj where not, the nested wrappers' ".base_layer" left out;
 * with an attention adapter beside them. */
START_TEST(config_experts) {
    fx_init();
    experts(".base_layer", 4, 8, 12, 2, 3.0, true);
    experts("", 4, 6, 8, 2, 3.0, false);
    const char *want[] = {"\"r\": 2,", "\"lora_alpha\": 6,", "\"target_modules\": [],", "\"fan_in_fan_out\": false,",
                          "\"target_parameters\": [\"experts.gate_up_proj\", \"experts.down_proj\"]", NULL};
    config_has(want);
    fx_init();
    module("model.layers.0.self_attn.q_proj", true, 8, 8, 2, 3.0, true);
    experts("", 4, 6, 8, 2, 3.0, false);
    const char *mixed[] = {"\"target_modules\": [\"q_proj\"],", "\"target_parameters\": [\"experts.down_proj\"]", NULL};
    config_has(mixed);
    fx_init();
    module("model.layers.0.self_attn.q_proj", true, 8, 8, 2, 3.0, true);
    experts("", 4, 6, 8, 4, 3.0, false);
    config_refused("LoRA adapters of different ranks or alphas");
}
END_TEST

START_TEST(config_refusals) {
    fx_init();
    module("m.0.q_proj", true, 8, 8, 4, 4, true);
    module("m.0.v_proj", true, 8, 8, 2, 8, true); /* alpha 16 both, ranks 4 and 2 */
    config_refused("LoRA adapters of different ranks or alphas (m.0.v_proj: r = 2, alpha = 16; others r = 4, alpha = 16): "
                   "the export writes one r and lora_alpha");
    fx_init();
    module("m.0.q_proj", true, 8, 8, 4, 4, true);
    module("m.0.v_proj", true, 8, 8, 4, 2, true); /* rank 4 both, alphas 16 and 8 */
    config_refused("(m.0.v_proj: r = 4, alpha = 8; others r = 4, alpha = 16)");
    fx_init();
    module("m.0.q_proj", true, 8, 8, 4, 4, false);
    config_refused("LoRA adapter of 'm.0.q_proj.weight': the mapping has base_model.model.m.0.q_proj.lora_A.weight but not "
                   "base_model.model.m.0.q_proj.lora_B.weight");
    fx_init();
    module("m.0.q_proj", true, 8, 8, 4, 0, true);
    config_refused("LoRA adapter of 'm.0.q_proj.weight': no scale(...) of the product with 'm.0.q_proj.b'");
    fx_init();
    module("m.0.q_proj", true, 8, 8, 0, 0, true);
    config_refused("the plan's mapping has no LoRA adapter");
}
END_TEST

/* W [3, 4] + A [3, 2] B [2, 4] * 0.5, worked out by hand. */
static const float A[6] = {1, 2, -1, 0.5f, 0, 3};
static const float Bm[8] = {2, 0, -2, 1, 1, 4, 0, -1};
/* A B: row 0 (1, 2): (2+2, 0+8, -2+0, 1-2) = (4, 8, -2, -1)
 *      row 1 (-1, .5): (-2+.5, 0+2, 2+0, -1-.5) = (-1.5, 2, 2, -1.5)
 *      row 2 (0, 3): (3, 12, 0, -3) */
static const float AB[12] = {4, 8, -2, -1, -1.5f, 2, 2, -1.5f, 3, 12, 0, -3};

START_TEST(merge_arithmetic) {
    HfLora lo = {.a = 0, .b = 1, .rank = 2, .scale = 0.5}; /* alpha 1, r 2 */
    float w[12];
    for (int i = 0; i < 12; i++) w[i] = (float)i;
    hf_lora_add(&lo, A, Bm, 4, w, 0, 3, 0, 4);
    for (int i = 0; i < 12; i++) ck_assert_msg(w[i] == (float)i + 0.5f * AB[i], "W[%d] = %g, want %g", i, w[i], i + 0.5 * AB[i]);
    /* a block: rows [1, 3) x columns [1, 3) of W, row-major 2 x 2 */
    float blk[4] = {10, 20, 30, 40};
    lo.scale = 2;
    hf_lora_add(&lo, A, Bm, 4, blk, 1, 3, 1, 3);
    const float want[4] = {10 + 2 * 2, 20 + 2 * 2, 30 + 2 * 12, 40 + 2 * 0};
    for (int i = 0; i < 4; i++) ck_assert_msg(blk[i] == want[i], "block[%d] = %g, want %g", i, blk[i], want[i]);
}
END_TEST

/* The experts' merge: W [E = 2, WO = 2, I = 2] as a matrix of 4 rows, B [2,
 * BO = 4, r = 1] whose rows [2, 4) are W's (up's, after gate's), A [2, 1, 2]:
 * W[e, o, j] += B[e, 2 + o, 0] A[e, 0, j] scale. */
START_TEST(merge_experts) {
    const float a[4] = {1, 2, -1, 3};                 /* A[0] = (1, 2), A[1] = (-1, 3) */
    const float b[8] = {9, 9, 2, -1, 9, 9, 0.5f, 4};  /* B[0] rows 2, 3: 2, -1; B[1]: 0.5, 4 */
    HfLora lo = {.rank = 1, .scale = 2, .experts = 2, .wper = 2, .bper = 4, .brow0 = 2};
    float w[8] = {0};
    hf_lora_add(&lo, a, b, 2, w, 0, 4, 0, 2);
    const float want[8] = {4, 8, -2, -4, -1, 3, -8, 24}; /* 2 * (2 (1, 2); -1 (1, 2); 0.5 (-1, 3); 4 (-1, 3)) */
    for (int i = 0; i < 8; i++) ck_assert_msg(w[i] == want[i], "W[%d] = %g, want %g", i, w[i], want[i]);
    /* a block: rows [3, 4) x column [1, 2) */
    float blk[1] = {1};
    hf_lora_add(&lo, a, b, 2, blk, 3, 4, 1, 2);
    ck_assert_msg(blk[0] == 25, "block = %g, want 25", blk[0]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("hfio_lora");
    TCase *tc = tcase_create("hfio_lora");
    tcase_add_test(tc, config_llama);
    tcase_add_test(tc, config_gpt2);
    tcase_add_test(tc, config_full_paths);
    tcase_add_test(tc, config_long_paths);
    tcase_add_test(tc, config_stacked_experts);
    tcase_add_test(tc, config_refusals);
    tcase_add_test(tc, config_experts);
    tcase_add_test(tc, merge_experts);
    tcase_add_test(tc, merge_arithmetic);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
