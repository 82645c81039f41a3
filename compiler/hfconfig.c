/* hfconfig: config.json -> .zl (see hfconfig.h; docs/huggingface.md). */
#include "hfconfig.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"

enum { HFC_MAX_CONFIG = 16 << 20, HFC_MAX_LORA_NAMES = 16 };

/* FAM_GEMMA: Gemma 2 and 3, stdlib/gemma.zl (read_gemma, put_gemma);
 * FAM_MOE: Mixtral, Qwen3-MoE, OLMoE, Qwen2-MoE, stdlib/moe.zl (read_moe, put_moe) */
typedef enum Family { FAM_GPT2, FAM_LLAMA, FAM_GEMMA, FAM_MOE } Family;

/* The LLaMA family's block layouts: LLaMA's pre-norm llama_block; OLMo 2's
 * post-norm olmo2_block (stdlib/olmo2.zl); Phi-3's llama_block with q, k, v
 * and gate, up fused into one HF tensor each (the mapping cuts them). */
typedef enum Layout { LAY_LLAMA, LAY_OLMO2, LAY_PHI3 } Layout;

/* What a config's attention_bias means to the architecture: not read (the
 * key is unknown), read but not computed (true is refused), or biases on q,
 * k, v and o. */
typedef enum AttnBias { AB_NONE, AB_REFUSED, AB_QKVO } AttnBias;

typedef struct ArchInfo {
    const char *arch, *model_type;
    Family fam;
    bool qkv_bias, qk_norm; /* Qwen2: q/k/v biases; Qwen3: per-head q/k RMSNorm */
    bool window_flag;       /* the sliding window applies only with use_sliding_window (Qwen) */
    AttnBias attention_bias;
    bool mlp_bias;          /* reads mlp_bias: biases on the MLP's linears (else true is refused) */
    Layout layout;
    int64_t head_dim;       /* the config class's head_dim when config.json has none (0: hidden_size /
                               num_attention_heads) */
} ArchInfo;

static const ArchInfo archs[] = {
    {"GPT2LMHeadModel", "gpt2", FAM_GPT2, false, false, false, AB_NONE, false, LAY_LLAMA, 0},
    {"LlamaForCausalLM", "llama", FAM_LLAMA, false, false, false, AB_QKVO, true, LAY_LLAMA, 0},
    {"MistralForCausalLM", "mistral", FAM_LLAMA, false, false, false, AB_REFUSED, false, LAY_LLAMA, 0},
    {"Qwen2ForCausalLM", "qwen2", FAM_LLAMA, true, false, true, AB_NONE, false, LAY_LLAMA, 0},
    {"Qwen3ForCausalLM", "qwen3", FAM_LLAMA, false, true, true, AB_QKVO, false, LAY_LLAMA, 128},
    {"Olmo2ForCausalLM", "olmo2", FAM_LLAMA, false, true, false, AB_QKVO, false, LAY_OLMO2, 0},
    {"Phi3ForCausalLM", "phi3", FAM_LLAMA, false, false, false, AB_REFUSED, false, LAY_PHI3, 0},
    {"Gemma2ForCausalLM", "gemma2", FAM_GEMMA, false, false, false, AB_QKVO, false, LAY_LLAMA, 256},
    {"Gemma3ForCausalLM", "gemma3_text", FAM_GEMMA, false, true, false, AB_QKVO, false, LAY_LLAMA, 256},
    {"MixtralForCausalLM", "mixtral", FAM_MOE, false, false, false, AB_REFUSED, false, LAY_LLAMA, 0},
    {"Qwen3MoeForCausalLM", "qwen3_moe", FAM_MOE, false, true, true, AB_REFUSED, false, LAY_LLAMA, 0},
    {"OlmoeForCausalLM", "olmoe", FAM_MOE, false, true, false, AB_REFUSED, false, LAY_LLAMA, 0},
    {"Qwen2MoeForCausalLM", "qwen2_moe", FAM_MOE, true, false, true, AB_REFUSED, false, LAY_LLAMA, 0},
};
enum { NARCHS = sizeof archs / sizeof archs[0] };

typedef struct Cfg {
    Arena *a;
    const SourceSet *src;
    int file;
    DiagSink *d;
    const char *text;
    size_t len;
    const JsonValue *root;
    bool *handled;          /* per member of the root object */
    bool failed;
    const ArchInfo *arch;
    /* the model */
    int64_t V, D, L, H, KV, F, hd, ctx, T, seq;
    double eps, theta;
    bool tied;
    int scaling;            /* 0 none, 1 linear, 2 llama3, 3 yarn, 4 longrope (RopeScaling) */
    double factor, low, high;
    int64_t orig;
    bool attn_bias, mlp_bias; /* attention_bias, mlp_bias read true (AB_QKVO, ArchInfo.mlp_bias) */
    const char *dtype;
    /* Gemma: query_pre_attn_scalar, the attention and final-logit soft-caps (0: none) */
    double qpas, attn_cap, final_cap;
    /* Gemma 3: the sliding layers' rope base, and the period P of the layers
     * (layer i is global when (i + 1) % P == 0; P > L: none is) */
    double local_theta;
    int64_t period;
    /* --lora: rank, alpha, the target names of SPEC (none: the family's
     * default), and once the family is known the adapted linears (bits in
     * the family's LoraTarget table); lora false: no --lora */
    bool lora;
    int64_t lora_rank;
    double lora_alpha;
    const char *lora_names[HFC_MAX_LORA_NAMES];
    int lora_nnames;
    unsigned lora_mask;
    /* sliding-window attention: the window (0: none) and, per layer, whether
     * it slides (NULL: none does) */
    int64_t window;
    bool *sliding;
    /* yarn rope scaling (scaling 3): the ramp's ends (0: YaRN's defaults),
     * the factor q and k are multiplied by (1: none) */
    double beta_fast, beta_slow, attn_factor;
    int64_t rotary_dim;     /* rotated columns of a head (Phi-3's partial_rotary_factor); 0: all */
    const char *quantize;   /* --quantize: "nf4", "int8", or NULL */
    /* mixture of experts (FAM_MOE): experts E, top_k K, an expert's width
     * (moe_intermediate_size; Mixtral: intermediate_size), the gates
     * renormalised over the top k, the load-balancing loss (with
     * output_router_logits) and its coefficient, the shared expert's width
     * (Qwen2-MoE; 0 none), per-head (Qwen3-MoE) or whole-projection (OLMoE)
     * q/k norms, q/k/v biases (Qwen2-MoE's qkv_bias) */
    int64_t E, K, moe_F, shared_F;
    bool normalize, aux, qk_full, moe_qkv_bias;
    /* Qwen2-MoE, Qwen3-MoE: per layer, whether its MLP is dense (of width
     * intermediate_size; NULL: every layer is sparse), and the sparse layers' count */
    bool *dense;
    int64_t nsparse;
    double aux_coef;
    /* Phi-3: partial_rotary_factor (0: none given), read from rope_parameters or the top level */
    const JsonValue *partial_rotary;
    /* longrope (scaling 4): the per-pair tables as config.json gives them, the attention factor
     * (0: transformers' default from factor and the original context), factor (0: max / original) */
    const JsonValue *short_factor, *long_factor;
    double lr_attn, lr_factor;
    bool top_orig;          /* Phi-3: original_max_position_embeddings at the top level (it wins) */
} Cfg;

/* The linears --lora may adapt: PEFT's module name (the target_modules
 * entry) and the option of the stdlib block that puts an adapter there. A
 * name on several rows sets each (GPT-2's "c_proj" is attn's and mlp's, as
 * PEFT's target is). The first rows are the defaults when SPEC names none
 * (PEFT's own defaults: q_proj, v_proj for LLaMA; c_attn for GPT-2). */
typedef struct LoraTarget {
    const char *target, *option;
    bool dflt;
} LoraTarget;
static const LoraTarget llama_lora[] = {
    {"q_proj", "lora_q", true},     {"k_proj", "lora_k", false},       {"v_proj", "lora_v", true},
    {"o_proj", "lora_o", false},    {"gate_proj", "lora_gate", false}, {"up_proj", "lora_up", false},
    {"down_proj", "lora_down", false}, {NULL, NULL, false}};
/* Phi-3: q, k, v are one qkv_proj and gate, up one gate_up_proj, each one
 * linear to PEFT (one adapter over the fused output), which separate zinf
 * adapters are not: only o_proj and down_proj, and no default. */
/* MoE blocks: adapters on the attention's linears, and on the experts as
 * PEFT's target_parameters (transformers keeps them fused: experts.gate_up_proj
 * [E, 2F, D], experts.down_proj [E, D, F]; stdlib/moe.zl's moe_mlp). The
 * router, a gate, has none. */
static const LoraTarget moe_lora[] = {
    {"q_proj", "lora_q", true},
    {"k_proj", "lora_k", false},
    {"v_proj", "lora_v", true},
    {"o_proj", "lora_o", false},
    {"experts.gate_up_proj", "lora_gate_up", false},
    {"experts.down_proj", "lora_down", false},
    {"gate_up_proj", "lora_gate_up", false},
    /* the SwiGLU linears of Qwen2-MoE's shared expert and of the dense
     * layers (mlp_only_layers, decoder_sparse_step): nn.Linear modules */
    {"gate_proj", "lora_mlp_gate", false},
    {"up_proj", "lora_mlp_up", false},
    {"down_proj", "lora_mlp_down", false},
    {NULL, NULL, false}};
static const LoraTarget phi3_lora[] = {{"o_proj", "lora_o", false}, {"down_proj", "lora_down", false}, {NULL, NULL, false}};
static const LoraTarget gpt2_lora[] = {
    {"c_attn", "lora_c_attn", true},          {"c_proj", "lora_attn_c_proj", false}, {"attn.c_proj", "lora_attn_c_proj", false},
    {"c_fc", "lora_c_fc", false},             {"c_proj", "lora_mlp_c_proj", false},  {"mlp.c_proj", "lora_mlp_c_proj", false},
    {NULL, NULL, false}};

/* ---- spans and messages ---- */

/* The span of a value's text in config.json (a whole string or number; the
 * opening bracket of an object or array). */
static Span vspan(const Cfg *c, const JsonValue *v) {
    size_t o = v && v->offset < c->len ? v->offset : 0, e = o;
    const char *t = c->text;
    if (!v) return (Span){c->file, (uint32_t)o, 1};
    if (t[o] == '"') {
        e = o + 1;
        while (e < c->len && t[e] != '"') e += t[e] == '\\' ? 2 : 1;
        e++;
    } else if (t[o] == '{' || t[o] == '[') {
        e = o + 1;
    } else {
        while (e < c->len && strchr("+-.0123456789eEaflnrstu", t[e]) && t[e]) e++;
    }
    if (e > c->len) e = c->len;
    return (Span){c->file, (uint32_t)o, (uint32_t)(e > o ? e - o : 1)};
}

/* The value as written, for messages: the JSON text (cut at 60 bytes). */
static const char *vtext(const Cfg *c, const JsonValue *v) {
    if (!v) return "(absent)";
    if (v->type == JSON_OBJECT) return "{...}";
    if (v->type == JSON_ARRAY) return "[...]";
    Span sp = vspan(c, v);
    int n = (int)(sp.len > 60 ? 60 : sp.len);
    return arena_printf(c->a, "%.*s%s", n, c->text + sp.off, sp.len > 60 ? "..." : "");
}

static void errf(Cfg *c, const JsonValue *v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void errf(Cfg *c, const JsonValue *v, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    diag_error(c->d, vspan(c, v ? v : c->root), "%s", buf);
    c->failed = true;
}

static void warnf(Cfg *c, const JsonValue *v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void warnf(Cfg *c, const JsonValue *v, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    diag_warning(c->d, vspan(c, v ? v : c->root), "%s", buf);
}

/* ---- typed keys of the root object ---- */

/* The first member named key (marking every member of that name read), or
 * NULL; a null value counts as absent. */
static const JsonValue *get(Cfg *c, const char *key) {
    const JsonValue *r = c->root, *found = NULL;
    for (size_t i = 0; i < r->count; i++)
        if (!strcmp(r->items[i].key, key)) {
            c->handled[i] = true;
            if (!found) found = &r->items[i];
        }
    return found && found->type != JSON_NULL ? found : NULL;
}

static bool is_int(const JsonValue *v) { return v->type == JSON_NUMBER && v->is_integer; }

/* An integer at least lo; absent: an error when required, else *out kept. */
static void get_int(Cfg *c, const char *key, bool required, int64_t lo, int64_t *out) {
    const JsonValue *v = get(c, key);
    if (!v) {
        if (required) errf(c, NULL, "config.json has no %s", key);
        return;
    }
    if (!is_int(v)) errf(c, v, "%s must be an integer, got %s", key, vtext(c, v));
    else if (v->integer < lo) errf(c, v, "%s must be at least %" PRId64 ", got %" PRId64, key, lo, v->integer);
    else *out = v->integer;
}

/* A positive number; absent: *out kept. */
static void get_num(Cfg *c, const char *key, double *out) {
    const JsonValue *v = get(c, key);
    if (!v) return;
    if (v->type != JSON_NUMBER || !(v->number > 0) || !isfinite(v->number))
        errf(c, v, "%s must be a positive number, got %s", key, vtext(c, v));
    else *out = v->number;
}

static void get_bool(Cfg *c, const char *key, bool *out) {
    const JsonValue *v = get(c, key);
    if (!v) return;
    if (v->type != JSON_BOOL) errf(c, v, "%s must be true or false, got %s", key, vtext(c, v));
    else *out = v->boolean;
}

/* A boolean the model needs to be `want` (an option zinf does not have). */
static void need_bool(Cfg *c, const char *key, bool want, const char *what) {
    const JsonValue *v = get(c, key);
    if (!v) return;
    if (v->type != JSON_BOOL) errf(c, v, "%s must be true or false, got %s", key, vtext(c, v));
    else if (v->boolean != want) errf(c, v, "%s = %s is not supported: %s", key, vtext(c, v), what);
}

/* A boolean the architecture has no use for: true is refused, naming what it would add. */
static void refuse_true(Cfg *c, const char *key, const char *what) {
    const JsonValue *v = get(c, key);
    if (!v) return;
    if (v->type != JSON_BOOL) errf(c, v, "%s must be true or false, got %s", key, vtext(c, v));
    else if (v->boolean) errf(c, v, "%s = true is not supported: %s has no %s", key, c->arch->arch, what);
}

/* A boolean the architecture's transformers model reads nowhere (Phi-3's
 * attention_bias and mlp_bias: Phi3ForCausalLM builds its linears without
 * biases whatever they say): true is computed as transformers computes it,
 * without, and said in a warning. */
static void ignore_true(Cfg *c, const char *key, const char *what) {
    const JsonValue *v = get(c, key);
    if (!v) return;
    if (v->type != JSON_BOOL) errf(c, v, "%s must be true or false, got %s", key, vtext(c, v));
    else if (v->boolean)
        warnf(c, v, "%s = true is not read by transformers' %s, which has no %s: zinf computes without them too", key,
              c->arch->arch, what);
}

/* ---- the architecture ---- */

static void read_arch(Cfg *c) {
    const JsonValue *av = get(c, "architectures"), *mt = get(c, "model_type");
    const char *name = NULL;
    if (av && (av->type != JSON_ARRAY || av->count != 1 || av->items[0].type != JSON_STRING))
        errf(c, av, "architectures must list one architecture, got %s", vtext(c, av));
    else if (av)
        name = av->items[0].string;
    if (mt && mt->type != JSON_STRING) errf(c, mt, "model_type must be a string, got %s", vtext(c, mt));
    for (int i = 0; !name && mt && mt->type == JSON_STRING && i < NARCHS; i++)
        if (!strcmp(archs[i].model_type, mt->string)) name = archs[i].arch;
    if (!name) {
        if (!c->failed) errf(c, mt, "config.json names no architecture this zinf knows (architectures or model_type)");
        return;
    }
    for (int i = 0; i < NARCHS; i++)
        if (!strcmp(archs[i].arch, name)) c->arch = &archs[i];
    if (!c->arch) {
        errf(c, av, "architecture \"%s\" is not supported", name);
        diag_hint(c->d, "supported: GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                        "Qwen3ForCausalLM, Olmo2ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
                        "MixtralForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM, Qwen2MoeForCausalLM");
        return;
    }
    if (mt && mt->type == JSON_STRING && strcmp(mt->string, c->arch->model_type))
        errf(c, mt, "model_type = %s does not go with architecture %s (\"%s\")", vtext(c, mt), name, c->arch->model_type);
}

/* The training dtype from torch_dtype (or dtype): f32 for float32, else bf16. */
static void read_dtype(Cfg *c) {
    const JsonValue *v = get(c, "torch_dtype"), *w = get(c, "dtype");
    if (!v) v = w;
    c->dtype = "f32";
    if (!v) return;
    if (v->type != JSON_STRING) {
        errf(c, v, "torch_dtype must be a string, got %s", vtext(c, v));
        return;
    }
    if (!strcmp(v->string, "bfloat16") || !strcmp(v->string, "float16")) c->dtype = "bf16";
    else if (strcmp(v->string, "float32") != 0)
        warnf(c, v, "torch_dtype %s: training in f32", vtext(c, v));
}

/* The sequence: --seq, else min(context, 1024). Longer than the context
 * is refused: GPT-2 has no position embedding there, and rope past
 * max_position_embeddings (which already counts a rope_scaling's
 * extension) is positions the model never saw, a different model rather
 * than a fine-tune of this one. Training longer is a config change the
 * user makes on purpose. */
static void pick_seq(Cfg *c, const JsonValue *ctx_v, const char *ctx_key) {
    c->T = c->seq > 0 ? c->seq : c->ctx < 1024 ? c->ctx : 1024;
    if (c->seq <= c->ctx) return;
    if (c->arch->fam == FAM_GPT2) {
        errf(c, ctx_v, "--seq %" PRId64 " is longer than %s = %" PRId64 ": GPT-2 has a position embedding per position",
             c->seq, ctx_key, c->ctx);
        diag_hint(c->d, "--seq %" PRId64 " or less", c->ctx);
    } else {
        errf(c, ctx_v, "--seq %" PRId64 " is longer than %s = %" PRId64 ", the longest context the model supports (with its "
             "rope scaling, if any)", c->seq, ctx_key, c->ctx);
        diag_hint(c->d, "--seq %" PRId64 " or less; to train longer sequences, raise %s in config.json (with a "
                  "rope_scaling that extends the context) and plan again", c->ctx, ctx_key);
    }
}

static void read_gpt2(Cfg *c) {
    get_int(c, "vocab_size", true, 1, &c->V);
    get_int(c, "n_positions", true, 1, &c->ctx);
    get_int(c, "n_embd", true, 1, &c->D);
    get_int(c, "n_layer", true, 1, &c->L);
    get_int(c, "n_head", true, 1, &c->H);
    c->F = 4 * c->D;
    get_int(c, "n_inner", false, 1, &c->F);
    const JsonValue *nctx = get(c, "n_ctx");
    if (nctx && !(is_int(nctx) && nctx->integer == c->ctx))
        errf(c, nctx, "n_ctx = %s differs from n_positions = %" PRId64, vtext(c, nctx), c->ctx);
    const JsonValue *act = get(c, "activation_function");
    if (act && (act->type != JSON_STRING || (strcmp(act->string, "gelu_new") && strcmp(act->string, "gelu_pytorch_tanh") &&
                                             strcmp(act->string, "gelu_fast"))))
        errf(c, act, "activation_function = %s is not supported (zinf's gelu is the tanh approximation: gelu_new, "
             "gelu_pytorch_tanh, gelu_fast)", vtext(c, act));
    c->eps = 1e-5;
    get_num(c, "layer_norm_epsilon", &c->eps);
    need_bool(c, "scale_attn_weights", true, "attention scores are always divided by sqrt(head dim)");
    need_bool(c, "scale_attn_by_inverse_layer_idx", false, "no per-layer attention scaling");
    need_bool(c, "add_cross_attention", false, "a decoder-only model has no cross-attention");
    get(c, "reorder_and_upcast_attn"); /* numerics only: zinf's attention computes in fp32 */
    c->tied = true;
    get_bool(c, "tie_word_embeddings", &c->tied);
    if (c->D > 0 && c->H > 0 && c->D % c->H) errf(c, get(c, "n_head"), "n_embd = %" PRId64 " is not a multiple of n_head = %" PRId64, c->D, c->H);
    c->hd = c->H > 0 ? c->D / c->H : 0;
}

/* ---- LLaMA family ---- */

/* A member of a nested object (rope_scaling, rope_parameters), NULL if absent or null. */
static const JsonValue *sub(const JsonValue *obj, const char *key) {
    const JsonValue *v = json_get(obj, key);
    return v && v->type != JSON_NULL ? v : NULL;
}

static double sub_num(Cfg *c, const JsonValue *obj, const char *objname, const char *key, double def, bool required) {
    const JsonValue *v = sub(obj, key);
    if (!v) {
        if (required) errf(c, obj, "%s has no %s", objname, key);
        return def;
    }
    if (v->type != JSON_NUMBER || !(v->number > 0) || !isfinite(v->number)) {
        errf(c, v, "%s.%s must be a positive number, got %s", objname, key, vtext(c, v));
        return def;
    }
    return v->number;
}

/* YaRN's mscale (Eq. 21 of the paper, transformers' yarn_get_mscale). */
static double yarn_mscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0; }

/* yarn, as transformers' _compute_yarn_parameters reads it: factor (absent:
 * max_position_embeddings / original_max_position_embeddings), the
 * original context (absent: max_position_embeddings, as the config's
 * standardisation fills it in), beta_fast and beta_slow (absent or 0: 32
 * and 1), and the attention factor: attention_factor, else
 * mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are
 * set (DeepSeek), else mscale(factor, 1). truncate = false is refused. */
static void read_yarn(Cfg *c, const JsonValue *o, const char *name) {
    c->scaling = 3;
    const JsonValue *om = sub(o, "original_max_position_embeddings");
    c->orig = c->ctx;
    if (om && (!is_int(om) || om->integer < 1))
        errf(c, om, "%s.original_max_position_embeddings must be a positive integer, got %s", name, vtext(c, om));
    else if (om) c->orig = om->integer;
    c->factor = sub(o, "factor") ? sub_num(c, o, name, "factor", 1, true) : c->orig > 0 ? (double)c->ctx / (double)c->orig : 1;
    c->beta_fast = sub(o, "beta_fast") ? sub_num(c, o, name, "beta_fast", 32, true) : 0;
    c->beta_slow = sub(o, "beta_slow") ? sub_num(c, o, name, "beta_slow", 1, true) : 0;
    const JsonValue *tr = sub(o, "truncate");
    if (tr && !(tr->type == JSON_BOOL && tr->boolean))
        errf(c, tr, "%s.truncate = %s is not supported (zinf's yarn ramp is truncated to whole pairs, transformers' "
             "default)", name, vtext(c, tr));
    double ms = sub(o, "mscale") ? sub_num(c, o, name, "mscale", 1, true) : 0;
    double msa = sub(o, "mscale_all_dim") ? sub_num(c, o, name, "mscale_all_dim", 1, true) : 0;
    if (sub(o, "attention_factor")) c->attn_factor = sub_num(c, o, name, "attention_factor", 1, true);
    else if (ms != 0 && msa != 0) c->attn_factor = yarn_mscale(c->factor, ms) / yarn_mscale(c->factor, msa);
    else c->attn_factor = yarn_mscale(c->factor, 1);
}

/* longrope (Phi-3's su; Phi3Config reads yarn as it too), as transformers'
 * _compute_longrope_parameters: short_factor and long_factor (checked
 * against the rotated pairs once the head is known), the original context
 * (Phi-3's top-level original_max_position_embeddings wins, as the config's
 * standardisation does; else the object's, else max_position_embeddings),
 * factor (absent: max_position_embeddings / original) and attention_factor
 * (absent: sqrt(1 + ln factor / ln original), 1 for factor <= 1). */
static void read_longrope(Cfg *c, const JsonValue *o, const char *name) {
    c->scaling = 4;
    const JsonValue *om = sub(o, "original_max_position_embeddings");
    if (om && (!is_int(om) || om->integer < 1))
        errf(c, om, "%s.original_max_position_embeddings must be a positive integer, got %s", name, vtext(c, om));
    else if (om && !c->top_orig) c->orig = om->integer;
    if (!c->orig) c->orig = c->ctx;
    c->lr_factor = sub(o, "factor") ? sub_num(c, o, name, "factor", 1, true) : 0;
    c->lr_attn = sub(o, "attention_factor") ? sub_num(c, o, name, "attention_factor", 1, true) : 0;
    static const char *const tabs[] = {"short_factor", "long_factor"};
    for (int i = 0; i < 2; i++) {
        const JsonValue *t = sub(o, tabs[i]);
        if (!t) errf(c, o, "%s has no %s (longrope's per-pair factors)", name, tabs[i]);
        else if (t->type != JSON_ARRAY) errf(c, t, "%s.%s must be a list of numbers, got %s", name, tabs[i], vtext(c, t));
        for (size_t j = 0; t && t->type == JSON_ARRAY && j < t->count; j++)
            if (t->items[j].type != JSON_NUMBER || !(t->items[j].number > 0) || !isfinite(t->items[j].number))
                errf(c, &t->items[j], "%s.%s[%zu] must be a positive number, got %s", name, tabs[i], j, vtext(c, &t->items[j]));
        if (i == 0) c->short_factor = t;
        else c->long_factor = t;
    }
}

/* rope_scaling (transformers 4) or rope_parameters (transformers 5): the
 * type, its parameters, and (rope_parameters) the base. */
static void read_rope_obj(Cfg *c, const JsonValue *o, const char *name) {
    static const char *const known[] = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
                                        "original_max_position_embeddings"};
    static const char *const yarn_keys[] = {"beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim",
                                            "truncate"};
    static const char *const longrope_keys[] = {"short_factor", "long_factor", "attention_factor"};
    if (o->type != JSON_OBJECT) {
        errf(c, o, "%s must be an object, got %s", name, vtext(c, o));
        return;
    }
    const JsonValue *t = sub(o, "rope_type");
    if (!t) t = sub(o, "type");
    const char *kind = t && t->type == JSON_STRING ? t->string : "default";
    if (t && t->type != JSON_STRING) errf(c, t, "%s.rope_type must be a string, got %s", name, vtext(c, t));
    if (sub(o, "rope_theta")) c->theta = sub_num(c, o, name, "rope_theta", c->theta, true);
    if (!strcmp(kind, "default")) {
        c->scaling = 0;
    } else if (!strcmp(kind, "linear")) {
        c->scaling = 1;
        c->factor = sub_num(c, o, name, "factor", 1, true);
    } else if (!strcmp(kind, "llama3")) {
        c->scaling = 2;
        c->factor = sub_num(c, o, name, "factor", 8, true);
        c->low = sub_num(c, o, name, "low_freq_factor", 1, true);
        c->high = sub_num(c, o, name, "high_freq_factor", 4, true);
        const JsonValue *om = sub(o, "original_max_position_embeddings");
        if (!om) errf(c, o, "%s has no original_max_position_embeddings", name);
        else if (!is_int(om) || om->integer < 1)
            errf(c, om, "%s.original_max_position_embeddings must be a positive integer, got %s", name, vtext(c, om));
        else c->orig = om->integer;
        if (!(c->high > c->low)) errf(c, o, "%s: high_freq_factor must be greater than low_freq_factor", name);
    } else if (c->arch->layout == LAY_PHI3 && (!strcmp(kind, "longrope") || !strcmp(kind, "su") || !strcmp(kind, "yarn"))) {
        read_longrope(c, o, name); /* Phi3Config reads su and yarn as longrope */
    } else if (!strcmp(kind, "longrope") || !strcmp(kind, "su")) {
        /* elsewhere transformers' generate keeps the short-factor cache past the original context */
        errf(c, t, "%s.rope_type = %s is not supported for %s (zinf reads longrope as Phi3ForCausalLM computes it)", name,
             vtext(c, t), c->arch->arch);
        return;
    } else if (!strcmp(kind, "yarn")) {
        read_yarn(c, o, name);
    } else {
        errf(c, t, "%s.rope_type = %s is not supported (zinf has default, linear, llama3, yarn and longrope)", name,
             vtext(c, t));
        return;
    }
    for (size_t i = 0; i < o->count; i++) {
        const JsonValue *m = &o->items[i];
        bool k = false;
        for (size_t j = 0; j < sizeof known / sizeof *known; j++) k |= !strcmp(m->key, known[j]);
        for (size_t j = 0; c->scaling == 3 && j < sizeof yarn_keys / sizeof *yarn_keys; j++) k |= !strcmp(m->key, yarn_keys[j]);
        for (size_t j = 0; c->scaling == 4 && j < sizeof longrope_keys / sizeof *longrope_keys; j++)
            k |= !strcmp(m->key, longrope_keys[j]);
        if (!strcmp(m->key, "partial_rotary_factor") && c->arch && c->arch->layout == LAY_PHI3)
            c->partial_rotary = m; /* rope_parameters' wins over the top level's, as Phi3Config's setdefault */
        else if (!strcmp(m->key, "partial_rotary_factor") && !(m->type == JSON_NUMBER && m->number == 1.0))
            errf(c, m, "%s.partial_rotary_factor = %s is not supported (rotary embeddings over the whole head)", name,
                 vtext(c, m));
        else if (!k && strcmp(m->key, "partial_rotary_factor") && m->type != JSON_NULL)
            errf(c, m, "%s.%s = %s is not supported with rope_type %s", name, m->key, vtext(c, m), kind);
    }
}

/* The rotated columns of a head under Phi-3's partial_rotary_factor f:
 * int(head_dim * f), as Phi3RotaryEmbedding computes its dim; it must be
 * even and positive (the pairs of rotate-half). 0: the whole head. */
static int64_t rotary_dim(Cfg *c) {
    const JsonValue *v = c->partial_rotary;
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type != JSON_NUMBER || !(v->number > 0 && v->number <= 1)) {
        errf(c, v, "partial_rotary_factor must be a number in (0, 1], got %s", vtext(c, v));
        return 0;
    }
    int64_t rd = (int64_t)((double)c->hd * v->number);
    if (rd == c->hd) return 0;
    if (rd < 2 || rd % 2)
        errf(c, v, "partial_rotary_factor = %s turns %" PRId64 " of the %" PRId64 " columns of a head: rotary embeddings "
             "need an even number of them, at least 2", vtext(c, v), rd, c->hd);
    return rd;
}

static void read_rope(Cfg *c) {
    c->theta = 10000.0;
    get_num(c, "rope_theta", &c->theta);
    if (c->arch->layout == LAY_PHI3) c->partial_rotary = get(c, "partial_rotary_factor");
    const JsonValue *rs = get(c, "rope_scaling"), *rp = get(c, "rope_parameters");
    if (rs) read_rope_obj(c, rs, "rope_scaling");
    if (rp) read_rope_obj(c, rp, "rope_parameters");
    if (c->arch->layout == LAY_PHI3) c->rotary_dim = rotary_dim(c);
    if (c->scaling != 4) return;
    int64_t pairs = (c->rotary_dim ? c->rotary_dim : c->hd) / 2;
    const JsonValue *tabs[] = {c->short_factor, c->long_factor};
    for (int i = 0; i < 2; i++)
        if (tabs[i] && tabs[i]->type == JSON_ARRAY && (int64_t)tabs[i]->count != pairs)
            errf(c, tabs[i], "%s has %zu numbers: longrope needs one per pair of rotated columns, %" PRId64, i ? "long_factor" :
                 "short_factor", tabs[i]->count, pairs);
    double factor = c->lr_factor > 0 ? c->lr_factor : (double)c->ctx / (double)c->orig;
    if (!(c->lr_attn > 0)) c->lr_attn = factor <= 1 ? 1.0 : sqrt(1.0 + log(factor) / log((double)c->orig));
}

/* Sliding-window attention, per layer, as transformers applies it: Qwen2
 * and Qwen3 (window_flag) slide only with use_sliding_window, and then the
 * layers layer_types calls "sliding_attention", or without layer_types the
 * layers from max_window_layers (default 28) on; Mistral and Phi-3 slide
 * every layer (Mistral ignores layer_types); Gemma 2 and 3 the layers
 * layer_types calls "sliding_attention", without it Gemma 2 every other
 * layer from layer 0 and Gemma 3 all but the global ones (read_gemma3_layers'
 * period). LLaMA and OLMo 2 have no
 * window in transformers: one shorter than the sequence is refused there,
 * rather than silently trained without. */
static void read_window(Cfg *c) {
    const JsonValue *sw = get(c, "sliding_window"), *lt = get(c, "layer_types"), *mwl = get(c, "max_window_layers");
    bool use = !c->arch->window_flag;
    const char *mt = c->arch->model_type;
    bool applies = c->arch->window_flag || !strcmp(mt, "mistral") || !strcmp(mt, "phi3") || c->arch->fam == FAM_GEMMA;
    int64_t max_window_layers = 28; /* Qwen2Config's and Qwen3Config's default */
    get_bool(c, "use_sliding_window", &use);
    if (mwl && (!is_int(mwl) || mwl->integer < 0))
        errf(c, mwl, "max_window_layers must be a non-negative integer, got %s", vtext(c, mwl));
    else if (mwl) max_window_layers = mwl->integer;
    if (lt && lt->type != JSON_ARRAY) errf(c, lt, "layer_types must be a list, got %s", vtext(c, lt));
    for (size_t i = 0; lt && lt->type == JSON_ARRAY && i < lt->count; i++) {
        const JsonValue *x = &lt->items[i];
        if (!(x->type == JSON_STRING && (!strcmp(x->string, "sliding_attention") || !strcmp(x->string, "full_attention"))))
            errf(c, x, "layer_types has %s: zinf has full_attention and sliding_attention", vtext(c, x));
    }
    if (lt && lt->type == JSON_ARRAY && lt->count != (size_t)c->L && c->L > 0)
        errf(c, lt, "layer_types lists %zu layers, num_hidden_layers is %" PRId64, lt->count, c->L);
    if (!sw || !use) return;
    if (!is_int(sw) || sw->integer < 1) {
        errf(c, sw, "sliding_window must be a positive integer or null, got %s", vtext(c, sw));
        return;
    }
    if (!applies) {
        if (sw->integer < c->T) {
            errf(c, sw, "sliding_window = %" PRId64 " is shorter than the training sequence T = %" PRId64 ": %s has no "
                 "sliding-window attention in transformers", sw->integer, c->T, c->arch->arch);
            diag_hint(c->d, "--seq %" PRId64 " (or less) trains sequences the window covers whole", sw->integer);
        }
        return;
    }
    if (c->failed || c->L < 1 || !(c->sliding = ARENA_NEWN(c->a, bool, (size_t)c->L))) return;
    bool any = false;
    for (int64_t i = 0; i < c->L; i++) {
        if (c->arch->fam == FAM_GEMMA && lt) c->sliding[i] = !strcmp(lt->items[i].string, "sliding_attention");
        else if (c->arch->fam == FAM_GEMMA) c->sliding[i] = (i + 1) % (c->arch->qk_norm ? c->period : 2) != 0;
        else if (!c->arch->window_flag) c->sliding[i] = true;
        else if (lt) c->sliding[i] = !strcmp(lt->items[i].string, "sliding_attention");
        else c->sliding[i] = i >= max_window_layers;
        any |= c->sliding[i];
    }
    if (any) c->window = sw->integer;
    else c->sliding = NULL;
}

static void read_llama(Cfg *c) {
    get_int(c, "vocab_size", true, 1, &c->V);
    get_int(c, "hidden_size", true, 1, &c->D);
    get_int(c, "intermediate_size", true, 1, &c->F);
    get_int(c, "num_hidden_layers", true, 1, &c->L);
    get_int(c, "num_attention_heads", true, 1, &c->H);
    c->KV = c->H;
    get_int(c, "num_key_value_heads", false, 1, &c->KV);
    get_int(c, "max_position_embeddings", true, 1, &c->ctx);
    /* no head_dim: the config class's default (Qwen3's 128), else hidden_size / num_attention_heads
     * (LlamaConfig refuses heads that do not divide it) */
    c->hd = c->arch->head_dim ? c->arch->head_dim : c->H > 0 && c->D % c->H == 0 ? c->D / c->H : 0;
    const JsonValue *hdv = get(c, "head_dim");
    if (hdv) get_int(c, "head_dim", false, 2, &c->hd);
    else if (!c->hd && c->H > 0) errf(c, NULL, "hidden_size = %" PRId64 " is not a multiple of num_attention_heads = %" PRId64
                                      " and there is no head_dim", c->D, c->H);
    if (c->hd % 2) errf(c, hdv, "the head dimension %" PRId64 " must be even for rotary embeddings", c->hd);
    if (c->H > 0 && c->KV > 0 && c->H % c->KV)
        errf(c, get(c, "num_key_value_heads"), "num_attention_heads = %" PRId64 " is not a multiple of num_key_value_heads = %" PRId64,
             c->H, c->KV);
    const JsonValue *act = get(c, "hidden_act");
    if (act && !(act->type == JSON_STRING && (!strcmp(act->string, "silu") || !strcmp(act->string, "swish"))))
        errf(c, act, "hidden_act = %s is not supported (the MLP is SwiGLU: silu)", vtext(c, act));
    c->eps = 1e-6;
    get_num(c, "rms_norm_eps", &c->eps);
    c->tied = false;
    get_bool(c, "tie_word_embeddings", &c->tied);
    if (c->arch->layout == LAY_PHI3) {
        ignore_true(c, "attention_bias", "biases on qkv_proj and o_proj");
        ignore_true(c, "mlp_bias", "biases on gate_up_proj and down_proj");
    } else {
        if (c->arch->attention_bias == AB_QKVO) get_bool(c, "attention_bias", &c->attn_bias);
        else if (c->arch->attention_bias == AB_REFUSED) refuse_true(c, "attention_bias", "biases on q, k, v and o");
        if (c->arch->mlp_bias) get_bool(c, "mlp_bias", &c->mlp_bias);
        else refuse_true(c, "mlp_bias", "biases in the MLP");
    }
    /* Phi-3: the context longrope scaling starts from; read by no other rope type */
    const JsonValue *om = c->arch->layout == LAY_PHI3 ? get(c, "original_max_position_embeddings") : NULL;
    if (om && (!is_int(om) || om->integer < 1))
        errf(c, om, "original_max_position_embeddings must be a positive integer, got %s", vtext(c, om));
    else if (om) c->orig = om->integer, c->top_orig = true;
    get(c, "pretraining_tp"); /* tensor-parallel slicing of the same products: numerics only */
    read_rope(c);
}

/* ---- mixture of experts ---- */

static bool zero_like(const JsonValue *v);

/* The layers transformers makes sparse (Qwen2-MoE, Qwen3-MoE: its
 * Qwen3MoeDecoderLayer): those not in mlp_only_layers whose (i + 1) is a
 * multiple of decoder_sparse_step; the others have a dense MLP of width
 * intermediate_size (c->dense). An index past the layers matches none, as
 * in transformers. A model without a sparse layer is refused (transformers'
 * load-balancing loss has no router logits to read then). */
static void read_sparse_layers(Cfg *c) {
    int64_t step = 1;
    const JsonValue *sv = get(c, "decoder_sparse_step"), *ml = get(c, "mlp_only_layers");
    if (sv) get_int(c, "decoder_sparse_step", false, 1, &step);
    if (ml && ml->type != JSON_ARRAY) errf(c, ml, "mlp_only_layers must be a list of layer indices, got %s", vtext(c, ml));
    for (size_t i = 0; ml && ml->type == JSON_ARRAY && i < ml->count; i++) {
        const JsonValue *x = &ml->items[i];
        if (!is_int(x) || x->integer < 0) errf(c, x, "mlp_only_layers has %s: a layer index is an integer from 0", vtext(c, x));
    }
    if (c->failed || c->L < 1 || step < 1 || !(c->dense = ARENA_NEWN(c->a, bool, (size_t)c->L))) return;
    bool any = false;
    c->nsparse = 0;
    for (int64_t i = 0; i < c->L; i++) {
        c->dense[i] = (i + 1) % step != 0;
        for (size_t k = 0; ml && ml->type == JSON_ARRAY && k < ml->count; k++) c->dense[i] |= ml->items[k].integer == i;
        any |= c->dense[i];
        c->nsparse += !c->dense[i];
    }
    if (!c->nsparse)
        errf(c, ml && ml->count ? ml : sv, "every layer has a dense MLP (mlp_only_layers, decoder_sparse_step = %" PRId64 "): "
             "a %s without a sparse layer is not supported", step, c->arch->arch);
    if (!any) c->dense = NULL;
}

static void read_moe(Cfg *c) {
    const ArchInfo *ai = c->arch;
    bool mixtral = !strcmp(ai->model_type, "mixtral"), olmoe = !strcmp(ai->model_type, "olmoe");
    bool qwen2 = !strcmp(ai->model_type, "qwen2_moe");
    read_llama(c);
    const JsonValue *ev = get(c, "num_local_experts"), *ev2 = get(c, "num_experts");
    if (ev && ev2 && !(is_int(ev) && is_int(ev2) && ev->integer == ev2->integer))
        errf(c, ev2, "num_experts = %s and num_local_experts = %s disagree", vtext(c, ev2), vtext(c, ev));
    const char *ekey = ev ? "num_local_experts" : "num_experts";
    get_int(c, ekey, true, 1, &c->E);
    get_int(c, "num_experts_per_tok", true, 1, &c->K);
    if (c->E > 0 && c->K > c->E)
        errf(c, get(c, "num_experts_per_tok"), "num_experts_per_tok = %" PRId64 " is more than the %" PRId64 " experts (%s)",
             c->K, c->E, ekey);
    if (mixtral || olmoe) c->moe_F = c->F; /* their experts are intermediate_size wide */
    else get_int(c, "moe_intermediate_size", true, 1, &c->moe_F);
    c->normalize = mixtral;
    if (!mixtral) get_bool(c, "norm_topk_prob", &c->normalize);
    get_bool(c, "output_router_logits", &c->aux);
    c->aux_coef = olmoe ? 0.01 : 0.001; /* the config classes' defaults */
    const JsonValue *cv = get(c, "router_aux_loss_coef");
    if (cv && (cv->type != JSON_NUMBER || !(cv->number >= 0) || !isfinite(cv->number)))
        errf(c, cv, "router_aux_loss_coef must be a number of 0 or more, got %s", vtext(c, cv));
    else if (cv) c->aux_coef = cv->number;
    if (mixtral) {
        const JsonValue *jv = get(c, "router_jitter_noise");
        if (jv && !zero_like(jv))
            errf(c, jv, "router_jitter_noise = %s is not supported: zinf routes without noise on the router's input", vtext(c, jv));
    }
    if (olmoe) {
        const JsonValue *qv = get(c, "clip_qkv");
        if (qv) errf(c, qv, "clip_qkv = %s is not supported: OLMoE's q, k and v clamped to +-clip_qkv (the blocks clamp nothing)",
                     vtext(c, qv));
    }
    c->qk_full = olmoe;
    c->moe_qkv_bias = ai->qkv_bias;
    if (qwen2) {
        get_bool(c, "qkv_bias", &c->moe_qkv_bias);
        get_int(c, "shared_expert_intermediate_size", true, 1, &c->shared_F);
    }
    if (!mixtral && !olmoe) read_sparse_layers(c);
    if (c->scaling)
        errf(c, get(c, "rope_scaling") ? get(c, "rope_scaling") : get(c, "rope_parameters"),
             "rope scaling is not supported for %s (stdlib/moe.zl's moe_block rotates with rope_theta alone)", ai->arch);
}

/* Sliding-window attention of an MoE model: none in the blocks, so a
 * window shorter than the training sequence is refused (Mixtral's
 * sliding_window; Qwen's with use_sliding_window). */
static void read_moe_window(Cfg *c) {
    bool use = !c->arch->window_flag;
    get_bool(c, "use_sliding_window", &use);
    get(c, "max_window_layers");
    get(c, "layer_types");
    const JsonValue *sw = get(c, "sliding_window");
    if (!sw || !use || c->T < 1) return;
    if (!is_int(sw) || sw->integer < 0) errf(c, sw, "sliding_window must be a non-negative integer or null, got %s", vtext(c, sw));
    else if (sw->integer > 0 && sw->integer < c->T) {
        errf(c, sw, "sliding_window = %" PRId64 " is shorter than the training sequence T = %" PRId64 ": stdlib/moe.zl's "
             "moe_block has no sliding-window attention", sw->integer, c->T);
        diag_hint(c->d, "--seq %" PRId64 " (or less) trains sequences the window covers whole", sw->integer);
    }
}

/* ---- Gemma 2 ---- */

/* A soft-cap: a positive number, or null (none); absent: *out kept (the
 * config class's default). */
static void get_cap(Cfg *c, const char *key, double *out) {
    const JsonValue *r = c->root, *v = NULL;
    for (size_t i = 0; i < r->count; i++)
        if (!strcmp(r->items[i].key, key)) {
            c->handled[i] = true;
            if (!v) v = &r->items[i];
        }
    if (!v) return;
    if (v->type == JSON_NULL) *out = 0;
    else if (v->type != JSON_NUMBER || !(v->number > 0) || !isfinite(v->number))
        errf(c, v, "%s must be a positive number or null, got %s", key, vtext(c, v));
    else *out = v->number;
}

/* Gemma 3's two rope bases and which layers are global. rope_parameters
 * (transformers 5) holds one object per layer type; older configs have
 * rope_theta, rope_scaling (the global layers') and rope_local_base_freq.
 * The layers: layer_types, else sliding_window_pattern (6 when absent). */
static void read_gemma3_layers(Cfg *c) {
    const JsonValue *rp = get(c, "rope_parameters");
    c->theta = 1000000.0, c->local_theta = 10000.0; /* Gemma3TextConfig's defaults */
    if (rp && rp->type == JSON_OBJECT && (sub(rp, "full_attention") || sub(rp, "sliding_attention"))) {
        const JsonValue *full = sub(rp, "full_attention"), *slide = sub(rp, "sliding_attention");
        for (size_t i = 0; i < rp->count; i++)
            if (strcmp(rp->items[i].key, "full_attention") && strcmp(rp->items[i].key, "sliding_attention"))
                errf(c, &rp->items[i], "rope_parameters.%s is not a layer type of %s (full_attention, sliding_attention)",
                     rp->items[i].key, c->arch->arch);
        if (slide) {
            c->theta = c->local_theta;
            read_rope_obj(c, slide, "rope_parameters.sliding_attention");
            if (c->scaling) errf(c, slide, "rope_parameters.sliding_attention: only the default rope is supported for the sliding layers");
            c->local_theta = c->theta;
            c->theta = 1000000.0;
        }
        if (full) read_rope_obj(c, full, "rope_parameters.full_attention");
    } else {
        get_num(c, "rope_theta", &c->theta);
        const JsonValue *rs = get(c, "rope_scaling");
        if (rs) read_rope_obj(c, rs, "rope_scaling");
        if (rp) read_rope_obj(c, rp, "rope_parameters");
    }
    get_num(c, "rope_local_base_freq", &c->local_theta);
    c->period = 6;
    const JsonValue *pv = get(c, "sliding_window_pattern"), *pv_ = get(c, "_sliding_window_pattern");
    if (!pv) pv = pv_;
    if (pv && (!is_int(pv) || pv->integer < 1)) errf(c, pv, "sliding_window_pattern must be a positive integer, got %s", vtext(c, pv));
    else if (pv) c->period = pv->integer;
    const JsonValue *lt = get(c, "layer_types");
    if (!lt || lt->type != JSON_ARRAY || c->L < 1 || lt->count != (size_t)c->L) return; /* read_window says what is wrong */
    /* the period: the first global layer's number + 1 (none: every layer slides) */
    c->period = c->L + 1;
    for (size_t i = 0; i < lt->count; i++)
        if (lt->items[i].type == JSON_STRING && !strcmp(lt->items[i].string, "full_attention")) {
            c->period = (int64_t)i + 1;
            break;
        }
    for (size_t i = 0; i < lt->count; i++) {
        bool full = lt->items[i].type == JSON_STRING && !strcmp(lt->items[i].string, "full_attention");
        if (full != ((int64_t)(i + 1) % c->period == 0)) {
            errf(c, &lt->items[i], "layer_types: layer %zu is %s: zinf has Gemma 3's pattern, layer i global when "
                 "(i + 1) %% P == 0 (here P = %" PRId64 ", from the first global layer), and no other", i, vtext(c, &lt->items[i]),
                 c->period);
            return;
        }
    }
}

static void read_gemma(Cfg *c) {
    get_int(c, "vocab_size", true, 1, &c->V);
    get_int(c, "hidden_size", true, 1, &c->D);
    get_int(c, "intermediate_size", true, 1, &c->F);
    get_int(c, "num_hidden_layers", true, 1, &c->L);
    get_int(c, "num_attention_heads", true, 1, &c->H);
    c->KV = c->H;
    get_int(c, "num_key_value_heads", false, 1, &c->KV);
    get_int(c, "max_position_embeddings", true, 1, &c->ctx);
    c->hd = c->arch->head_dim; /* Gemma2Config's default */
    get_int(c, "head_dim", false, 2, &c->hd);
    if (c->hd % 2) errf(c, get(c, "head_dim"), "the head dimension %" PRId64 " must be even for rotary embeddings", c->hd);
    if (c->H > 0 && c->KV > 0 && c->H % c->KV)
        errf(c, get(c, "num_key_value_heads"), "num_attention_heads = %" PRId64 " is not a multiple of num_key_value_heads = %" PRId64,
             c->H, c->KV);
    /* hidden_activation (transformers' key), or hidden_act in older configs */
    const char *const acts[] = {"hidden_activation", "hidden_act"};
    for (int i = 0; i < 2; i++) {
        const JsonValue *act = get(c, acts[i]);
        if (act && !(act->type == JSON_STRING && !strcmp(act->string, "gelu_pytorch_tanh")))
            errf(c, act, "%s = %s is not supported (the MLP is GeGLU with gelu_pytorch_tanh)", acts[i], vtext(c, act));
    }
    c->eps = 1e-6;
    get_num(c, "rms_norm_eps", &c->eps);
    c->tied = true;
    get_bool(c, "tie_word_embeddings", &c->tied);
    get_bool(c, "attention_bias", &c->attn_bias);
    refuse_true(c, "use_bidirectional_attention", "bidirectional attention");
    c->qpas = 256;
    get_num(c, "query_pre_attn_scalar", &c->qpas);
    bool gemma3 = c->arch->qk_norm;
    c->attn_cap = gemma3 ? 0 : 50.0, c->final_cap = gemma3 ? 0 : 30.0; /* the config classes' defaults */
    get_cap(c, "attn_logit_softcapping", &c->attn_cap);
    get_cap(c, "final_logit_softcapping", &c->final_cap);
    if (gemma3 && c->attn_cap > 0) {
        /* Gemma3Attention keeps the value but never passes it to the attention */
        warnf(c, get(c, "attn_logit_softcapping"), "attn_logit_softcapping = %s: transformers' Gemma 3 does not soft-cap "
              "attention logits, nor does zinf", vtext(c, get(c, "attn_logit_softcapping")));
        c->attn_cap = 0;
    }
    get(c, "cache_implementation"); /* generation's cache layout: not the model */
    if (gemma3) read_gemma3_layers(c);
    else read_rope(c);
    if (c->scaling == 2) errf(c, get(c, "rope_scaling"), "rope scaling llama3 is not supported for %s (default and linear are)", c->arch->arch);
}

/* ---- every other key ---- */

typedef enum KeyRule {
    K_HARMLESS,   /* does not change what is computed */
    K_DROPOUT,    /* a probability: a warning when above 0 (zinf trains without dropout) */
    K_NONZERO,    /* an error unless null, 0 or false */
    K_NOT_ONE,    /* an error unless null or 1 */
    K_PRESENT,    /* an error unless null */
} KeyRule;

typedef struct KeyInfo {
    const char *key;
    KeyRule rule;
    const char *what; /* what it is, for the error */
} KeyInfo;

static const KeyInfo keys[] = {
    {"_name_or_path", K_HARMLESS, 0}, {"transformers_version", K_HARMLESS, 0}, {"initializer_range", K_HARMLESS, 0},
    {"use_cache", K_HARMLESS, 0}, {"bos_token_id", K_HARMLESS, 0}, {"eos_token_id", K_HARMLESS, 0},
    {"pad_token_id", K_HARMLESS, 0}, {"sep_token_id", K_HARMLESS, 0}, {"decoder_start_token_id", K_HARMLESS, 0},
    {"return_dict", K_HARMLESS, 0}, {"output_hidden_states", K_HARMLESS, 0}, {"output_attentions", K_HARMLESS, 0},
    {"torchscript", K_HARMLESS, 0}, {"use_bfloat16", K_HARMLESS, 0}, {"tf_legacy_loss", K_HARMLESS, 0},
    {"pruned_heads", K_HARMLESS, 0}, {"tie_encoder_decoder", K_HARMLESS, 0}, {"is_encoder_decoder", K_HARMLESS, 0},
    {"is_decoder", K_HARMLESS, 0}, {"chunk_size_feed_forward", K_HARMLESS, 0}, {"finetuning_task", K_HARMLESS, 0},
    {"id2label", K_HARMLESS, 0}, {"label2id", K_HARMLESS, 0}, {"tokenizer_class", K_HARMLESS, 0},
    {"prefix", K_HARMLESS, 0}, {"task_specific_params", K_HARMLESS, 0}, {"problem_type", K_HARMLESS, 0},
    {"_attn_implementation", K_HARMLESS, 0}, {"_attn_implementation_autoset", K_HARMLESS, 0},
    {"max_length", K_HARMLESS, 0}, {"min_length", K_HARMLESS, 0}, {"do_sample", K_HARMLESS, 0},
    {"early_stopping", K_HARMLESS, 0}, {"num_beams", K_HARMLESS, 0}, {"temperature", K_HARMLESS, 0},
    {"top_k", K_HARMLESS, 0}, {"top_p", K_HARMLESS, 0}, {"repetition_penalty", K_HARMLESS, 0},
    {"length_penalty", K_HARMLESS, 0}, {"no_repeat_ngram_size", K_HARMLESS, 0}, {"num_return_sequences", K_HARMLESS, 0},
    {"summary_type", K_HARMLESS, 0}, {"summary_use_proj", K_HARMLESS, 0}, {"summary_activation", K_HARMLESS, 0},
    {"summary_proj_to_labels", K_HARMLESS, 0}, {"summary_first_dropout", K_HARMLESS, 0},
    {"attn_pdrop", K_DROPOUT, 0}, {"resid_pdrop", K_DROPOUT, 0}, {"embd_pdrop", K_DROPOUT, 0},
    {"attention_dropout", K_DROPOUT, 0}, {"hidden_dropout", K_DROPOUT, 0},
    {"num_experts", K_NONZERO, "mixture of experts"}, {"num_local_experts", K_NONZERO, "mixture of experts"},
    {"num_experts_per_tok", K_NONZERO, "mixture of experts"}, {"n_routed_experts", K_NONZERO, "mixture of experts"},
    {"moe_intermediate_size", K_NONZERO, "mixture of experts"}, {"decoder_sparse_step", K_NONZERO, "mixture of experts"},
    {"alibi", K_NONZERO, "ALiBi position biases"}, {"use_alibi", K_NONZERO, "ALiBi position biases"},
    {"qk_layernorm", K_NONZERO, "layer norms of q and k"}, {"use_qk_norm", K_NONZERO, "layer norms of q and k"},
    {"use_parallel_residual", K_NONZERO, "parallel attention and MLP"}, {"parallel_attn", K_NONZERO, "parallel attention and MLP"},
    {"attn_logit_softcapping", K_PRESENT, "soft-capped attention logits"},
    {"final_logit_softcapping", K_PRESENT, "soft-capped output logits"},
    {"quantization_config", K_PRESENT, "quantized weights"},
    {"partial_rotary_factor", K_NOT_ONE, "rotary embeddings over part of a head"},
    {"rotary_pct", K_NOT_ONE, "rotary embeddings over part of a head"},
    {"embedding_multiplier", K_NOT_ONE, "a scaled embedding"}, {"logits_scaling", K_NOT_ONE, "scaled logits"},
    {"residual_multiplier", K_NOT_ONE, "scaled residuals"}, {"attention_multiplier", K_NOT_ONE, "scaled attention"},
};

static bool zero_like(const JsonValue *v) {
    return v->type == JSON_NULL || (v->type == JSON_BOOL && !v->boolean) || (v->type == JSON_NUMBER && v->number == 0);
}

static void check_rest(Cfg *c) {
    const JsonValue *r = c->root;
    for (size_t i = 0; i < r->count; i++) {
        if (c->handled[i]) continue;
        const JsonValue *m = &r->items[i];
        const KeyInfo *k = NULL;
        for (size_t j = 0; j < sizeof keys / sizeof *keys; j++)
            if (!strcmp(keys[j].key, m->key)) k = &keys[j];
        if (!k) {
            warnf(c, m, "%s = %s is a key zinf does not know: it is not read (if it changes the model, zinf computes "
                  "something else)", m->key, vtext(c, m));
            continue;
        }
        switch (k->rule) {
        case K_HARMLESS: break;
        case K_DROPOUT:
            if (m->type == JSON_NUMBER && m->number > 0)
                warnf(c, m, "%s = %s: zinf trains without dropout", m->key, vtext(c, m));
            break;
        case K_NONZERO:
            if (!zero_like(m)) errf(c, m, "%s = %s is not supported (%s)", m->key, vtext(c, m), k->what);
            break;
        case K_NOT_ONE:
            if (!(m->type == JSON_NULL || (m->type == JSON_NUMBER && m->number == 1)))
                errf(c, m, "%s = %s is not supported (%s)", m->key, vtext(c, m), k->what);
            break;
        case K_PRESENT:
            if (m->type != JSON_NULL) errf(c, m, "%s = %s is not supported (%s)", m->key, vtext(c, m), k->what);
            break;
        }
    }
}

/* ---- the .zl text ---- */

typedef struct Out {
    Arena *a;
    char *p;
    size_t len, cap;
} Out;

static void put(Out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Out *o, const char *fmt, ...) {
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !o->a) {
        va_end(aq);
        return;
    }
    if (o->len + (size_t)n + 1 > o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 8192;
        while (nc < o->len + (size_t)n + 1) nc *= 2;
        char *np = arena_alloc(o->a, nc);
        if (!np) {
            o->a = NULL; /* out of memory: the arena says so */
            va_end(aq);
            return;
        }
        if (o->len) memcpy(np, o->p, o->len);
        o->p = np;
        o->cap = nc;
    }
    vsnprintf(o->p + o->len, (size_t)n + 1, fmt, aq);
    va_end(aq);
    o->len += (size_t)n;
}

/* A double as a .zl float literal that reads back the same. */
static const char *flt(Cfg *c, double v) {
    char buf[48];
    if (v == floor(v) && fabs(v) < 1e15) { /* 10000.0, not 1e+04 */
        snprintf(buf, sizeof buf, "%.1f", v);
        return arena_strdup(c->a, buf);
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    return arena_strdup(c->a, buf);
}

/* One line of config.json as a .zl string literal. */
static void put_line(Out *o, const char *s, size_t n) {
    put(o, "    \"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') put(o, "\\%c", ch);
        else if (ch == '\t') put(o, "\\t");
        else if (ch < 0x20 || ch == 0x7f) put(o, "\\x%02x", ch);
        else put(o, "%c", ch);
    }
    put(o, "\"");
}

/* config = [ "line", ... ]: the text as is, each line followed by a newline. */
static void put_config(Out *o, const char *text, size_t len) {
    put(o, "  config = [\n");
    size_t i = 0;
    bool first = true;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        if (!first) put(o, ",\n");
        put_line(o, text + i, j - i);
        first = false;
        i = j + 1;
    }
    put(o, "\n  ]\n");
}

static const LoraTarget *lora_table(const Cfg *c) {
    /* Gemma's linears have LLaMA's names */
    return c->arch->fam == FAM_GPT2 ? gpt2_lora : c->arch->fam == FAM_MOE ? moe_lora : c->arch->layout == LAY_PHI3 ? phi3_lora : llama_lora;
}

/* Whether --lora set the block option opt. */
static bool lora_has(const Cfg *c, const char *opt) {
    const LoraTarget *t = lora_table(c);
    for (int i = 0; t[i].target; i++)
        if (c->lora_mask >> i & 1 && !strcmp(t[i].option, opt)) return true;
    return false;
}

/* ", lora_x = true" for each option --lora set, once each, in the table's order. */
static void put_lora_options(Cfg *c, Out *o) {
    const LoraTarget *t = lora_table(c);
    for (int i = 0; t[i].target; i++) {
        bool seen = false;
        for (int j = 0; j < i; j++) seen |= (c->lora_mask >> j & 1) && !strcmp(t[j].option, t[i].option);
        if (c->lora_mask >> i & 1 && !seen) put(o, ", %s = true", t[i].option);
    }
}

static void put_train(Cfg *c, Out *o) {
    put(o, "\n# Fine-tuning defaults: edit freely (docs/checking.md lists the keys).\n"
           "train {\n"
           "  micro_batch = 1\n"
           "  steps = 1000\n"
           "  dtype = %s\n"
           "  optimizer = adam(lr = 2e-5, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0)\n"
           "  # no weight decay for biases and norm weights, as the Hugging Face Trainer ([] decays every parameter)\n"
           "  no_decay = [\"bias\", \"norm\"]\n"
           "  warmup = 20\n"
           "  schedule = constant\n"
           "  grad_clip = 1.0\n"
           "  checkpoint = \"layer\"\n"
           "%s",
        c->dtype, c->lora_mask ? "  # LoRA: only the adapters are trained (zinfrun --export-hf writes them as PEFT does)\n"
                                 "  freeze = [\"*\", \"!*.lora_*\"]\n" : "");
    if (c->quantize)
        put(o, "  # QLoRA: the frozen linear weights of the blocks stored %s (docs/training.md)\n"
               "  quantize = \"%s\"\n", !strcmp(c->quantize, "nf4") ? "4-bit NF4" : "8-bit", c->quantize);
    put(o, "}\n");
}

static void put_gpt2(Cfg *c, Out *o, const char *name) {
    put(o, "import \"nn\"\n\n");
    put(o, "const V = %" PRId64 ", T = %" PRId64 ", P = %" PRId64 ", D = %" PRId64 ", H = %" PRId64 ", L = %" PRId64
           ", F = %" PRId64 "\n\n", c->V, c->T, c->ctx, c->D, c->H, c->L, c->F);
    put(o, "model %s(tokens: i32[B, T], targets: i32[B, T]) {\n", name);
    put(o, "  wte = param [V, D] init normal(0.02)\n");
    put(o, "  # a row per position of the model (n_positions = P); the first T are used\n");
    put(o, "  wpe = param [P, D] init normal(0.01)\n");
    put(o, "  x = embedding(wte, tokens) + embedding(wpe, arange(T))\n");
    put(o, "  repeat L { x = block(x, H, eps = %s, hidden = F", flt(c, c->eps));
    if (c->lora_mask) {
        put(o, ",\n                   lora_rank = %" PRId64 ", lora_alpha = %s, lora_init = %s", c->lora_rank,
            flt(c, c->lora_alpha), flt(c, 1.0 / sqrt((double)c->D)));
        if (lora_has(c, "lora_mlp_c_proj")) put(o, ", lora_init_mlp_proj = %s", flt(c, 1.0 / sqrt((double)c->F)));
        put_lora_options(c, o);
    }
    put(o, ") }\n");
    put(o, "  x = ln(x, %s)\n", flt(c, c->eps));
    if (c->tied) {
        put(o, "  # tied embeddings: the output head is wte transposed\n");
        put(o, "  loss cross_entropy(matmul(x, wte, transpose_b), targets)\n}\n");
    } else {
        put(o, "  head = param [D, V] init normal(0.02)\n");
        put(o, "  loss cross_entropy(linear(x, head), targets)\n}\n");
    }
}

/* A per-layer pattern (pat[i] for the L layers) as one 0/1 expression of
 * the repeat index i (the language has integer + - * / % and no
 * comparison): the smallest period p of the pattern (p = L when there is
 * none), then the pattern over r = i % p as its first value plus a step at
 * each change c, where for 0 <= r < p the quotient (r + p) / (p + c) is 1
 * from r = c on and 0 before. NULL when every layer is the same (*uniform:
 * their value). */
static const char *pattern_expr(Cfg *c, const bool *pat, bool *uniform) {
    int64_t L = c->L, p = 1;
    while (p < L) {
        bool ok = true;
        for (int64_t i = p; i < L && ok; i++) ok = pat[i] == pat[i % p];
        if (ok) break;
        p++;
    }
    *uniform = pat[0];
    if (p == 1) return NULL;
    const char *r = p < L ? arena_printf(c->a, "i %% %" PRId64, p) : "i";
    const char *e = pat[0] ? "1" : "0";
    for (int64_t k = 1; k < p; k++)
        if (pat[k] != pat[k - 1])
            e = arena_printf(c->a, "%s %c (%s + %" PRId64 ") / %" PRId64, e, pat[k] ? '+' : '-', r, p, p + k);
    return e;
}

/* The layers' windows as one expression of the repeat index i: the window
 * times the sliding pattern. NULL when every layer is the same (*uniform:
 * whether they slide). */
static const char *window_expr(Cfg *c, bool *uniform) {
    const char *e = pattern_expr(c, c->sliding, uniform);
    return e ? arena_printf(c->a, "%" PRId64 " * (%s)", c->window, e) : NULL;
}

/* The LLaMA and Gemma blocks' LoRA options, when --lora set any. */
static void put_block_lora(Cfg *c, Out *o) {
    if (!c->lora_mask) return;
    put(o, ",\n                    lora_rank = %" PRId64 ", lora_alpha = %s, lora_init = %s", c->lora_rank, flt(c, c->lora_alpha),
        flt(c, 1.0 / sqrt((double)c->D)));
    /* PEFT's kaiming-uniform bound is 1/sqrt(in) of the adapted linear: o_proj reads H*hd, down_proj F */
    if (lora_has(c, "lora_o") && c->H * c->hd != c->D) put(o, ", lora_init_o = %s", flt(c, 1.0 / sqrt((double)(c->H * c->hd))));
    if (lora_has(c, "lora_down")) put(o, ", lora_init_down = %s", flt(c, 1.0 / sqrt((double)c->F)));
    put_lora_options(c, o);
}

static void put_llama(Cfg *c, Out *o, const char *name) {
    const ArchInfo *ai = c->arch;
    bool own_hd = c->H > 0 && c->hd * c->H != c->D, olmo2 = ai->layout == LAY_OLMO2;
    put(o, "import \"llama\"\n%s\n", olmo2 ? "import \"olmo2\"\n" : "");
    put(o, "const V = %" PRId64 ", T = %" PRId64 ", D = %" PRId64 ", H = %" PRId64 ", KV = %" PRId64 ", F = %" PRId64
           ", L = %" PRId64, c->V, c->T, c->D, c->H, c->KV, c->F, c->L);
    if (own_hd) put(o, ", HD = %" PRId64, c->hd);
    if (c->scaling == 4) { /* longrope's tables, eight numbers a line */
        const JsonValue *tabs[] = {c->short_factor, c->long_factor};
        for (int i = 0; i < 2; i++) {
            put(o, ",\n      %s = [", i ? "LONG_FACTOR" : "SHORT_FACTOR");
            for (size_t j = 0; j < tabs[i]->count; j++)
                put(o, "%s%s", j ? (j % 8 ? ", " : ",\n        ") : "", flt(c, tabs[i]->items[j].number));
            put(o, "]");
        }
    }
    put(o, "\n\nmodel %s(tokens: i32[B, T], targets: i32[B, T]) {\n", name);
    put(o, "  tok = param [V, D] init normal(0.02)\n");
    put(o, "  x = embedding(tok, tokens)\n");
    bool all_slide = false;
    const char *wexpr = c->sliding ? window_expr(c, &all_slide) : NULL;
    if (c->sliding) {
        put(o, "  # sliding-window attention (%" PRId64 " positions) in layers", c->window);
        for (int64_t i = 0; i < c->L; i++)
            if (c->sliding[i]) put(o, " %" PRId64, i);
        put(o, "%s\n", wexpr ? ", full attention in the others" : "");
    }
    put(o, "  repeat L%s {\n    x = %s(x, H, KV, F, eps = %s, theta = %s", wexpr ? " as i" : "", olmo2 ? "olmo2_block" : "llama_block",
        flt(c, c->eps), flt(c, c->theta));
    if (own_hd) put(o, ", head_dim = HD");
    if (olmo2) {
        if (c->attn_bias) put(o, ", attention_bias = true");
    } else {
        if (ai->qkv_bias || c->attn_bias) put(o, ", qkv_bias = true");
        if (c->attn_bias) put(o, ", o_bias = true");
        if (c->mlp_bias) put(o, ", mlp_bias = true");
        if (ai->qk_norm) put(o, ", qk_norm = true");
    }
    put_block_lora(c, o);
    if (c->scaling == 1) put(o, ",\n                    rope_scaling = \"linear\", rope_factor = %s", flt(c, c->factor));
    if (c->scaling == 2)
        put(o, ",\n                    rope_scaling = \"llama3\", rope_factor = %s, low_freq_factor = %s,"
               "\n                    high_freq_factor = %s, original_max_positions = %" PRId64,
            flt(c, c->factor), flt(c, c->low), flt(c, c->high), c->orig);
    if (c->scaling == 3) {
        put(o, ",\n                    rope_scaling = \"yarn\", rope_factor = %s, original_max_positions = %" PRId64,
            flt(c, c->factor), c->orig);
        if (c->beta_fast > 0) put(o, ", beta_fast = %s", flt(c, c->beta_fast));
        if (c->beta_slow > 0) put(o, ", beta_slow = %s", flt(c, c->beta_slow));
        if (c->attn_factor != 1)
            put(o, ",\n                    rope_attention_scale = true, rope_attention_factor = %s", flt(c, c->attn_factor));
    }
    if (c->scaling == 4) {
        put(o, ",\n                    rope_scaling = \"longrope\", original_max_positions = %" PRId64
               ", attention_factor = %s,\n                    short_factor = SHORT_FACTOR, long_factor = LONG_FACTOR",
            c->orig, flt(c, c->lr_attn));
    }
    if (c->rotary_dim) put(o, ",\n                    rotary_dim = %" PRId64, c->rotary_dim);
    if (wexpr) put(o, ",\n                    window = %s", wexpr);
    else if (all_slide) put(o, ",\n                    window = %" PRId64, c->window);
    put(o, ")\n  }\n");
    put(o, "  x = rms(x, %s)\n", flt(c, c->eps));
    if (c->tied) {
        put(o, "  # tied embeddings: the output head is tok transposed\n");
        put(o, "  loss cross_entropy(matmul(x, tok, transpose_b), targets)\n}\n");
    } else {
        put(o, "  head = param [D, V] init normal(0.02)\n");
        put(o, "  loss cross_entropy(linear(x, head), targets)\n}\n");
    }
}

static void put_moe(Cfg *c, Out *o, const char *name) {
    bool own_hd = c->H > 0 && c->hd * c->H != c->D;
    put(o, "import \"llama\"\nimport \"moe\"\n\n");
    put(o, "const V = %" PRId64 ", T = %" PRId64 ", D = %" PRId64 ", H = %" PRId64 ", KV = %" PRId64 ", E = %" PRId64
           ", K = %" PRId64 ", F = %" PRId64 ", L = %" PRId64, c->V, c->T, c->D, c->H, c->KV, c->E, c->K, c->moe_F, c->L);
    if (own_hd) put(o, ", HD = %" PRId64, c->hd);
    if (c->shared_F) put(o, ", S = %" PRId64, c->shared_F);
    /* dense layers among the sparse ones: their width, the sparse layers' count (the load-balancing
     * loss's), and the pattern as a 0/1 expression of the layer (1: sparse) */
    bool *sparse = c->dense ? ARENA_NEWN(c->a, bool, (size_t)c->L) : NULL, all_sparse = true;
    for (int64_t i = 0; sparse && i < c->L; i++) sparse[i] = !c->dense[i];
    const char *sexpr = sparse ? pattern_expr(c, sparse, &all_sparse) : NULL;
    if (sexpr) put(o, ",\n      FD = %" PRId64 ", LS = %" PRId64, c->F, c->nsparse);
    put(o, "\n\nmodel %s(tokens: i32[B, T], targets: i32[B, T]) {\n", name);
    put(o, "  tok = param [V, D] init normal(0.02)\n");
    put(o, "  x = embedding(tok, tokens)\n");
    put(o, "  # %s a sparse MLP: E experts of width F, the top K of each token%s\n", sexpr ? "where SP = 1," : "every layer",
        c->normalize ? ", their gates renormalised over the K" : "");
    if (sexpr) {
        put(o, "  # where SP = 0 (mlp_only_layers, decoder_sparse_step), a dense MLP of width FD: layer%s",
            c->L - c->nsparse > 1 ? "s" : "");
        for (int64_t i = 0; i < c->L; i++)
            if (c->dense[i]) put(o, " %" PRId64, i);
        put(o, "\n");
    }
    put(o, "  load = moe_load(experts = E)\n");
    if (sexpr) put(o, "  repeat L as i {\n    SP = %s\n", sexpr);
    else put(o, "  repeat L {\n");
    put(o, "    x, load = moe_block(x, load, H, KV, E, K, F, normalize = %s, eps = %s, theta = %s",
        c->normalize ? "true" : "false", flt(c, c->eps), flt(c, c->theta));
    if (sexpr) put(o, ",\n                        sparse = SP, dense_hidden = FD");
    if (own_hd) put(o, ", head_dim = HD");
    if (c->arch->qk_norm) put(o, ", qk_norm = true%s", c->qk_full ? ", qk_norm_full = true" : "");
    if (c->moe_qkv_bias) put(o, ", qkv_bias = true");
    if (c->shared_F) put(o, ",\n                        shared_expert = true, shared_hidden = S");
    if (!c->aux) put(o, ",\n                        aux = false");
    if (c->lora_mask) {
        put(o, ",\n                        lora_rank = %" PRId64 ", lora_alpha = %s, lora_init = %s", c->lora_rank,
            flt(c, c->lora_alpha), flt(c, 1.0 / sqrt((double)c->D)));
        if (lora_has(c, "lora_o") && c->H * c->hd != c->D) put(o, ", lora_init_o = %s", flt(c, 1.0 / sqrt((double)(c->H * c->hd))));
        if (lora_has(c, "lora_down")) put(o, ", lora_init_down = %s", flt(c, 1.0 / sqrt((double)c->moe_F)));
        if (lora_has(c, "lora_mlp_down") && sexpr)
            put(o, ",\n                        lora_init_mlp_down = %s", flt(c, 1.0 / sqrt((double)c->F)));
        if (lora_has(c, "lora_mlp_down") && c->shared_F)
            put(o, ",\n                        lora_init_shared_down = %s", flt(c, 1.0 / sqrt((double)c->shared_F)));
        put_lora_options(c, o);
    }
    put(o, ")\n  }\n");
    put(o, "  x = rms(x, %s)\n", flt(c, c->eps));
    const char *logits = c->tied ? "matmul(x, tok, transpose_b)" : "linear(x, head)";
    if (c->tied) put(o, "  # tied embeddings: the output head is tok transposed\n");
    else put(o, "  head = param [D, V] init normal(0.02)\n");
    if (c->aux) {
        put(o, "  # output_router_logits: the load-balancing loss times router_aux_loss_coef, as transformers adds it\n");
        if (sexpr) put(o, "  # (over the LS sparse layers: a dense one has no router)\n");
        put(o, "  loss cross_entropy(%s, targets) + moe_aux_loss(load, E, %s, B * T, %s)\n}\n", logits, sexpr ? "LS" : "L",
            flt(c, c->aux_coef));
    } else {
        put(o, "  loss cross_entropy(%s, targets)\n}\n", logits);
    }
}

/* The MoE blocks' tensors: attention as LLaMA's, the router and the experts
 * (each expert's tensor one slice of the stacked [E, ...] parameter, in
 * its own [out, in] layout), Qwen2-MoE's shared expert and its gate. */
static void put_moe_map(Cfg *c, Out *o) {
    bool mixtral = !strcmp(c->arch->model_type, "mixtral");
    const char *p = "moe_block.{i}", *h = "model.layers.{i}", *m = mixtral ? "block_sparse_moe" : "mlp";
    static const char *const w[][2] = {{"wq", "q_proj"}, {"wk", "k_proj"}, {"wv", "v_proj"}, {"wo", "o_proj"}};
    put(o, "  \"tok\" = \"model.embed_tokens.weight\"\n");
    put(o, "  \"%s.rms.g\" = \"%s.input_layernorm.weight\"\n", p, h);
    for (int i = 0; i < 4; i++) put(o, "  \"%s.rope_attn.%s\" = transpose(\"%s.self_attn.%s.weight\")\n", p, w[i][0], h, w[i][1]);
    for (int i = 0; c->moe_qkv_bias && i < 3; i++)
        put(o, "  \"%s.rope_attn.b%c\" = \"%s.self_attn.%s.bias\"\n", p, "qkv"[i], h, w[i][1]);
    if (c->arch->qk_norm) {
        put(o, "  \"%s.rope_attn.q_norm\" = \"%s.self_attn.q_norm.weight\"\n", p, h);
        put(o, "  \"%s.rope_attn.k_norm\" = \"%s.self_attn.k_norm.weight\"\n", p, h);
    }
    put(o, "  \"%s.rms_1.g\" = \"%s.post_attention_layernorm.weight\"\n", p, h);
    put(o, "  \"%s.moe_mlp.wr\" = \"%s.%s.gate.weight\"\n", p, h, m);
    static const char *const ex[2][3] = {{"gate_proj", "up_proj", "down_proj"}, {"w1", "w3", "w2"}};
    static const char *const zw[3] = {"wg", "wu", "wd"};
    for (int i = 0; i < 3; i++)
        put(o, "  \"%s.moe_mlp.%s\" = stack(\"%s.%s.experts.{e}.%s.weight\")\n", p, zw[i], h, m, ex[mixtral][i]);
    if (c->shared_F) {
        put(o, "  \"%s.moe_mlp.ws\" = \"%s.mlp.shared_expert_gate.weight\"\n", p, h);
        static const char *const sw[][2] = {{"w1", "gate_proj"}, {"w3", "up_proj"}, {"w2", "down_proj"}};
        for (int i = 0; i < 3; i++)
            put(o, "  \"%s.moe_mlp.swiglu.%s\" = transpose(\"%s.mlp.shared_expert.%s.weight\")\n", p, sw[i][0], h, sw[i][1]);
    }
    /* the dense layers' MLP (moe_block's swiglu where sparse = 0) */
    static const char *const sw[][3] = {{"w1", "gate_proj", "gate"}, {"w3", "up_proj", "up"}, {"w2", "down_proj", "down"}};
    for (int i = 0; c->dense && i < 3; i++)
        put(o, "  \"%s.swiglu.%s\" = transpose(\"%s.mlp.%s.weight\")\n", p, sw[i][0], h, sw[i][1]);
    /* --lora gate_proj, up_proj, down_proj: the shared expert's and the dense MLP's linears */
    for (int i = 0; i < 3; i++) {
        char opt[16];
        snprintf(opt, sizeof opt, "lora_mlp_%s", sw[i][2]);
        for (int ab = 0; lora_has(c, opt) && ab < 2; ab++) {
            if (c->shared_F)
                put(o, "  \"%s.moe_mlp.swiglu.lora_%s_%c\" = transpose(\"base_model.model.%s.mlp.shared_expert.%s.lora_%c.weight\")\n",
                    p, sw[i][2], "ab"[ab], h, sw[i][1], "AB"[ab]);
            if (c->dense)
                put(o, "  \"%s.swiglu.lora_%s_%c\" = transpose(\"base_model.model.%s.mlp.%s.lora_%c.weight\")\n", p, sw[i][2],
                    "ab"[ab], h, sw[i][1], "AB"[ab]);
        }
    }
    for (int i = 0; i < 4; i++) { /* --lora: PEFT's adapter names */
        char opt[16];
        snprintf(opt, sizeof opt, "lora_%c", "qkvo"[i]);
        for (int ab = 0; lora_has(c, opt) && ab < 2; ab++)
            put(o, "  \"%s.rope_attn.%s_%c\" = transpose(\"base_model.model.%s.self_attn.%s.lora_%c.weight\")\n", p, opt,
                "ab"[ab], h, w[i][1], "AB"[ab]);
    }
    /* LoRA on the experts: PEFT's ParamWrapper of the loaded model's fused
     * mlp.experts (Mixtral's too), one per targeted parameter, nested:
     * down_proj's wraps gate_up_proj's, whose names gain ".base_layer" */
    bool gu = lora_has(c, "lora_gate_up"), dn = lora_has(c, "lora_down");
    for (int ab = 0; gu && ab < 2; ab++)
        put(o, "  \"%s.moe_mlp.lora_gate_up_%c\" = expert_%s(\"base_model.model.%s.mlp.experts%s.lora_%c.weight\")\n", p, "ab"[ab],
            ab ? "cols" : "rows", h, dn ? ".base_layer" : "", "AB"[ab]);
    for (int ab = 0; dn && ab < 2; ab++)
        put(o, "  \"%s.moe_mlp.lora_down_%c\" = expert_%s(\"base_model.model.%s.mlp.experts.lora_%c.weight\")\n", p, "ab"[ab],
            ab ? "cols" : "rows", h, "AB"[ab]);
    put(o, "  \"rms.g\" = \"model.norm.weight\"\n");
}

/* sqrt(D) as transformers multiplies the embeddings by it: a tensor of the
 * hidden dtype, so rounded to bf16 when training in bf16 (to nearest, ties
 * to even). */
static double embed_normalizer(const Cfg *c) {
    float f = (float)sqrt((double)c->D);
    if (strcmp(c->dtype, "bf16")) return f;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void put_gemma(Cfg *c, Out *o, const char *name) {
    bool all_slide = false;
    const char *wexpr = c->sliding ? window_expr(c, &all_slide) : NULL;
    const char *win = wexpr ? arena_printf(c->a, ",\n                    window = %s", wexpr)
                      : all_slide ? arena_printf(c->a, ",\n                    window = %" PRId64, c->window) : "";
    put(o, "import \"gemma\"\n\n");
    put(o, "const V = %" PRId64 ", T = %" PRId64 ", D = %" PRId64 ", H = %" PRId64 ", KV = %" PRId64 ", F = %" PRId64
           ", L = %" PRId64 ", HD = %" PRId64 "\n\n", c->V, c->T, c->D, c->H, c->KV, c->F, c->L, c->hd);
    put(o, "model %s(tokens: i32[B, T], targets: i32[B, T]) {\n", name);
    put(o, "  tok = param [V, D] init normal(0.02)\n");
    put(o, "  # the embeddings times sqrt(D), rounded to the training dtype as transformers does\n");
    put(o, "  x = scale(embedding(tok, tokens), %s)\n", flt(c, embed_normalizer(c)));
    put(o, "  # scores scaled by 1/sqrt(query_pre_attn_scalar = %s)\n", flt(c, c->qpas));
    if (c->arch->qk_norm) {
        /* Gemma 3: layer i is global when (i + 1) % P == 0 (G = 1), with rope_theta and
         * its scaling; the sliding layers (G = 0) rotate by the local base, unscaled
         * (linear by 1) */
        put(o, "  # layer i is global (G = 1) when (i + 1) %% %" PRId64 " == 0: rope base %s%s; the others %s\n", c->period,
            flt(c, c->theta), c->scaling == 1 ? arena_printf(c->a, ", linear scaling by %s", flt(c, c->factor)) : "",
            flt(c, c->local_theta));
        put(o, "  repeat L as i {\n    G = (i + 1) / %" PRId64 " - i / %" PRId64 "\n", c->period, c->period);
        put(o, "    x = gemma_block(x, H, KV, F, HD, %s", flt(c, 1.0 / sqrt(c->qpas)));
        if (c->attn_cap > 0) put(o, ", softcap = %s", flt(c, c->attn_cap));
        put(o, ", eps = %s, qk_norm = true,\n                    theta = %s * G + %s * (1 - G)", flt(c, c->eps),
            flt(c, c->theta), flt(c, c->local_theta));
        if (c->attn_bias) put(o, ", bias = true");
        if (c->scaling == 1)
            put(o, ",\n                    rope_scaling = \"linear\", rope_factor = %s * G + 1.0 * (1 - G)", flt(c, c->factor));
        put_block_lora(c, o);
        put(o, "%s)\n  }\n", win);
    } else {
        put(o, "  repeat L%s {\n    x = gemma_block(x, H, KV, F, HD, %s", wexpr ? " as i" : "", flt(c, 1.0 / sqrt(c->qpas)));
        if (c->attn_cap > 0) put(o, ", softcap = %s", flt(c, c->attn_cap));
        put(o, ", eps = %s, theta = %s", flt(c, c->eps), flt(c, c->theta));
        if (c->attn_bias) put(o, ", bias = true");
        if (c->scaling == 1) put(o, ",\n                      rope_scaling = \"linear\", rope_factor = %s", flt(c, c->factor));
        put_block_lora(c, o);
        put(o, "%s)\n  }\n", win);
    }
    put(o, "  x = gemma_rms(x, %s)\n", flt(c, c->eps));
    const char *logits = c->tied ? "matmul(x, tok, transpose_b)" : "linear(x, head)";
    if (c->tied) put(o, "  # tied embeddings: the output head is tok transposed\n");
    else put(o, "  head = param [D, V] init normal(0.02)\n");
    if (c->final_cap > 0) {
        put(o, "  # final-logit soft-capping\n");
        put(o, "  loss cross_entropy(softcap(%s, %s), targets)\n}\n", logits, flt(c, c->final_cap));
    } else {
        put(o, "  loss cross_entropy(%s, targets)\n}\n", logits);
    }
}

static void put_gemma_map(Cfg *c, Out *o) {
    const char *p = "gemma_block.{i}", *h = "model.layers.{i}";
    static const char *const w[][2] = {{"wq", "q_proj"}, {"wk", "k_proj"}, {"wv", "v_proj"}, {"wo", "o_proj"}};
    put(o, "  \"tok\" = \"model.embed_tokens.weight\"\n");
    put(o, "  \"%s.gemma_rms.g\" = \"%s.input_layernorm.weight\"\n", p, h);
    for (int i = 0; i < 4; i++) put(o, "  \"%s.gemma_attn.%s\" = transpose(\"%s.self_attn.%s.weight\")\n", p, w[i][0], h, w[i][1]);
    for (int i = 0; c->attn_bias && i < 4; i++)
        put(o, "  \"%s.gemma_attn.b%c\" = \"%s.self_attn.%s.bias\"\n", p, "qkvo"[i], h, w[i][1]);
    if (c->arch->qk_norm) {
        put(o, "  \"%s.gemma_attn.q_norm\" = \"%s.self_attn.q_norm.weight\"\n", p, h);
        put(o, "  \"%s.gemma_attn.k_norm\" = \"%s.self_attn.k_norm.weight\"\n", p, h);
    }
    put(o, "  \"%s.gemma_rms_1.g\" = \"%s.post_attention_layernorm.weight\"\n", p, h);
    put(o, "  \"%s.gemma_rms_2.g\" = \"%s.pre_feedforward_layernorm.weight\"\n", p, h);
    put(o, "  \"%s.geglu.w1\" = transpose(\"%s.mlp.gate_proj.weight\")\n", p, h);
    put(o, "  \"%s.geglu.w3\" = transpose(\"%s.mlp.up_proj.weight\")\n", p, h);
    put(o, "  \"%s.geglu.w2\" = transpose(\"%s.mlp.down_proj.weight\")\n", p, h);
    put(o, "  \"%s.gemma_rms_3.g\" = \"%s.post_feedforward_layernorm.weight\"\n", p, h);
    put(o, "  \"gemma_rms.g\" = \"model.norm.weight\"\n");
}

/* Every parameter's Hugging Face tensor (the stdlib's hf blocks say the same
 * for the blocks; written out here so the file says it all). */
static void put_map(Cfg *c, Out *o) {
    if (c->arch->fam == FAM_GEMMA) {
        put_gemma_map(c, o);
    } else if (c->arch->fam == FAM_MOE) {
        put_moe_map(c, o);
    } else if (c->arch->fam == FAM_GPT2) {
        static const char *const m[][2] = {
            {"wte", "transformer.wte.weight"}, {"wpe", "transformer.wpe.weight"},
            {"block.{i}.ln.g", "transformer.h.{i}.ln_1.weight"}, {"block.{i}.ln.b", "transformer.h.{i}.ln_1.bias"},
            {"block.{i}.attn.wqkv", "transformer.h.{i}.attn.c_attn.weight"},
            {"block.{i}.attn.bqkv", "transformer.h.{i}.attn.c_attn.bias"},
            {"block.{i}.attn.wo", "transformer.h.{i}.attn.c_proj.weight"},
            {"block.{i}.attn.bo", "transformer.h.{i}.attn.c_proj.bias"},
            {"block.{i}.ln_1.g", "transformer.h.{i}.ln_2.weight"}, {"block.{i}.ln_1.b", "transformer.h.{i}.ln_2.bias"},
            {"block.{i}.mlp.w1", "transformer.h.{i}.mlp.c_fc.weight"}, {"block.{i}.mlp.b1", "transformer.h.{i}.mlp.c_fc.bias"},
            {"block.{i}.mlp.w2", "transformer.h.{i}.mlp.c_proj.weight"}, {"block.{i}.mlp.b2", "transformer.h.{i}.mlp.c_proj.bias"},
            {"ln.g", "transformer.ln_f.weight"}, {"ln.b", "transformer.ln_f.bias"},
        };
        for (size_t i = 0; i < sizeof m / sizeof *m; i++) put(o, "  \"%s\" = \"%s\"\n", m[i][0], m[i][1]);
    } else {
        const Layout lay = c->arch->layout;
        const char *p = lay == LAY_OLMO2 ? "olmo2_block.{i}" : "llama_block.{i}", *h = "model.layers.{i}";
        put(o, "  \"tok\" = \"model.embed_tokens.weight\"\n");
        if (lay != LAY_OLMO2) put(o, "  \"%s.rms.g\" = \"%s.input_layernorm.weight\"\n", p, h);
        static const char *const w[][2] = {{"wq", "q_proj"}, {"wk", "k_proj"}, {"wv", "v_proj"}, {"wo", "o_proj"}};
        if (lay == LAY_PHI3) {
            /* one qkv_proj: q's H*hd columns (as read, transposed), then k's and v's KV*hd each */
            int64_t q = c->H * c->hd, kv = c->KV * c->hd, first[3] = {0, q, q + kv}, count[3] = {q, kv, kv};
            for (int i = 0; i < 3; i++)
                put(o, "  \"%s.rope_attn.%s\" = cols(transpose(\"%s.self_attn.qkv_proj.weight\"), %" PRId64 ", %" PRId64 ")\n",
                    p, w[i][0], h, first[i], count[i]);
            put(o, "  \"%s.rope_attn.wo\" = transpose(\"%s.self_attn.o_proj.weight\")\n", p, h);
        } else {
            for (int i = 0; i < 4; i++)
                put(o, "  \"%s.rope_attn.%s\" = transpose(\"%s.self_attn.%s.weight\")\n", p, w[i][0], h, w[i][1]);
        }
        for (int i = 0; (c->arch->qkv_bias || c->attn_bias) && i < 3; i++)
            put(o, "  \"%s.rope_attn.b%c\" = \"%s.self_attn.%s.bias\"\n", p, "qkv"[i], h, w[i][1]);
        if (c->attn_bias) put(o, "  \"%s.rope_attn.bo\" = \"%s.self_attn.o_proj.bias\"\n", p, h);
        if (c->arch->qk_norm) {
            put(o, "  \"%s.rope_attn.q_norm\" = \"%s.self_attn.q_norm.weight\"\n", p, h);
            put(o, "  \"%s.rope_attn.k_norm\" = \"%s.self_attn.k_norm.weight\"\n", p, h);
        }
        if (lay == LAY_OLMO2) put(o, "  \"%s.rms.g\" = \"%s.post_attention_layernorm.weight\"\n", p, h);
        else put(o, "  \"%s.rms_1.g\" = \"%s.post_attention_layernorm.weight\"\n", p, h);
        if (lay == LAY_PHI3) {
            /* one gate_up_proj: the gate's F columns, then the up projection's */
            put(o, "  \"%s.swiglu.w1\" = cols(transpose(\"%s.mlp.gate_up_proj.weight\"), 0, %" PRId64 ")\n", p, h, c->F);
            put(o, "  \"%s.swiglu.w3\" = cols(transpose(\"%s.mlp.gate_up_proj.weight\"), %" PRId64 ", %" PRId64 ")\n", p, h,
                c->F, c->F);
        } else {
            put(o, "  \"%s.swiglu.w1\" = transpose(\"%s.mlp.gate_proj.weight\")\n", p, h);
            put(o, "  \"%s.swiglu.w3\" = transpose(\"%s.mlp.up_proj.weight\")\n", p, h);
        }
        put(o, "  \"%s.swiglu.w2\" = transpose(\"%s.mlp.down_proj.weight\")\n", p, h);
        if (c->mlp_bias) {
            static const char *const mb[][2] = {{"b1", "gate_proj"}, {"b3", "up_proj"}, {"b2", "down_proj"}};
            for (int i = 0; i < 3; i++) put(o, "  \"%s.swiglu.%s\" = \"%s.mlp.%s.bias\"\n", p, mb[i][0], h, mb[i][1]);
        }
        if (lay == LAY_OLMO2) put(o, "  \"%s.rms_1.g\" = \"%s.post_feedforward_layernorm.weight\"\n", p, h);
        put(o, "  \"rms.g\" = \"model.norm.weight\"\n");
    }
    if (!c->tied) put(o, "  \"head\" = transpose(\"lm_head.weight\")\n");
}

static const char *generate(Cfg *c) {
    Out o = {c->a, NULL, 0, 0};
    const char *name = c->arch->model_type;
    const char *path = c->src->files[c->file].path;
    put(&o, "# %s: %s, generated by zinfc --from-hf from %s.\n", name, c->arch->arch, path);
    put(&o, "# The layers are the stdlib's; T (the training sequence) and the train block are\n"
            "# yours to edit. The hf block maps every parameter to its Hugging Face tensor\n"
            "# and carries config.json, for zinfrun --init and --export-hf.\n");
    if (c->arch->fam == FAM_GPT2) put_gpt2(c, &o, name);
    else if (c->arch->fam == FAM_GEMMA) put_gemma(c, &o, name);
    else if (c->arch->fam == FAM_MOE) put_moe(c, &o, name);
    else put_llama(c, &o, name);
    put_train(c, &o);
    put(&o, "\nhf \"%s\" {\n", c->arch->arch);
    put_config(&o, c->text, c->len);
    put_map(c, &o);
    put(&o, "}\n");
    return o.a ? o.p : NULL;
}

/* --lora SPEC: comma-separated r=N, alpha=X, targets=a,b,... (a word without
 * '=' continues the targets); the names are resolved by lora_resolve once the
 * family is known. 0, or -1 with the error reported. */
static int read_lora(Cfg *c, const char *spec) {
    c->lora = true;
    c->lora_rank = 8;
    c->lora_alpha = 16;
    bool in_targets = false;
    for (const char *p = spec; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char w[64];
        if (n == 0 || n >= sizeof w) goto bad;
        memcpy(w, p, n);
        w[n] = 0;
        char *eq = strchr(w, '='), *end;
        const char *t = w;
        if (eq) {
            *eq = 0;
            in_targets = !strcmp(w, "targets");
            t = eq + 1;
            if (!strcmp(w, "r") && (c->lora_rank = strtoll(t, &end, 10)) > 0 && !*end && *t) goto next;
            if (!strcmp(w, "alpha") && (c->lora_alpha = strtod(t, &end)) > 0 && !*end && *t) goto next;
            if (!in_targets) goto bad;
            c->lora_nnames = 0;
        }
        if (!in_targets) goto bad;
        if (c->lora_nnames == HFC_MAX_LORA_NAMES) {
            diag_error(c->d, SPAN_NONE, "--lora: more than %d targets", HFC_MAX_LORA_NAMES);
            return -1;
        }
        if (!(c->lora_names[c->lora_nnames++] = arena_strdup(c->a, t))) goto bad;
    next:
        p += n + (e != NULL);
    }
    return 0;
bad:
    diag_error(c->d, SPAN_NONE, "--lora needs r=N,alpha=X,targets=NAME[,NAME...] (e.g. r=8,alpha=16,targets=q_proj,v_proj), not '%s'", spec);
    return -1;
}

/* The names of --lora's targets to the family's block options (lora_mask);
 * none named: the family's defaults. 0, or -1 with the error reported. */
static int lora_resolve(Cfg *c) {
    const LoraTarget *t = lora_table(c);
    for (int i = 0; t[i].target; i++)
        if (!c->lora_nnames && t[i].dflt) c->lora_mask |= 1u << i;
    if (c->arch->layout == LAY_PHI3 && !c->lora_nnames) {
        diag_error(c->d, SPAN_NONE, "--lora: %s has no default targets zinf adapts (PEFT's, qkv_proj, is a fused linear)",
                   c->arch->arch);
        diag_hint(c->d, "name them: --lora targets=o_proj,down_proj");
        return -1;
    }
    for (int k = 0; k < c->lora_nnames; k++) {
        bool found = false;
        if (c->arch->layout == LAY_PHI3 && (!strcmp(c->lora_names[k], "qkv_proj") || !strcmp(c->lora_names[k], "gate_up_proj"))) {
            diag_error(c->d, SPAN_NONE, "--lora: target '%s' is a fused linear of %s (one adapter over %s): not supported; "
                       "its adaptable linears are o_proj and down_proj", c->lora_names[k], c->arch->arch,
                       strcmp(c->lora_names[k], "qkv_proj") ? "gate and up" : "q, k and v");
            return -1;
        }
        const char *nm = c->lora_names[k];
        bool mlp = !strcmp(nm, "gate_proj") || !strcmp(nm, "up_proj") || !strcmp(nm, "down_proj");
        if (c->arch->fam == FAM_MOE && ((mlp && !c->shared_F && !c->dense) || !strcmp(nm, "w1") || !strcmp(nm, "w2") ||
                                       !strcmp(nm, "w3"))) {
            diag_error(c->d, SPAN_NONE, "--lora: target '%s': %s's experts are fused parameters to PEFT (transformers' "
                       "experts.gate_up_proj and experts.down_proj, LoRA's target_parameters): name experts.gate_up_proj "
                       "(gate and up, one adapter) or experts.down_proj", nm, c->arch->arch);
            if (mlp) diag_hint(c->d, "%s adapts the linears of Qwen2-MoE's shared expert and of dense layers (mlp_only_layers, "
                               "decoder_sparse_step); this model has neither", nm);
            return -1;
        }
        for (int i = 0; t[i].target; i++)
            if (!strcmp(t[i].target, c->lora_names[k])) {
                c->lora_mask |= 1u << i;
                found = true;
            }
        if (found) continue;
        char names[256] = "";
        for (int i = 0; t[i].target; i++) {
            bool seen = false;
            for (int j = 0; j < i; j++) seen |= !strcmp(t[j].target, t[i].target);
            if (!seen)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? ", " : "", t[i].target);
        }
        diag_error(c->d, SPAN_NONE, "--lora: unknown target '%s' (%s: %s)", c->lora_names[k],
                   c->arch->fam == FAM_GPT2 ? "GPT-2 linears" : c->arch->fam == FAM_MOE ? "the MoE blocks' attention linears, experts and SwiGLU MLPs"
                                                                                      : "LLaMA-family linears", names);
        return -1;
    }
    return 0;
}

/* ---- entry points ---- */

const char *hfconfig_text_to_zl(Arena *a, const SourceSet *src, int file, DiagSink *d, const HfConfigOptions *o) {
    Cfg c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.src = src;
    c.file = file;
    c.d = d;
    c.text = src->files[file].text;
    c.len = src->files[file].len;
    c.seq = o ? o->seq : 0;
    if (o && o->lora && *o->lora && read_lora(&c, o->lora)) return NULL;
    c.quantize = o ? o->quantize : NULL;
    JsonDoc doc;
    char jerr[256];
    if (json_parse(c.text, c.len, &doc, jerr, sizeof jerr) != 0) {
        diag_error(d, (Span){file, 0, 0}, "%s is not valid JSON: %s", src->files[file].path, jerr);
        json_free(&doc);
        return NULL;
    }
    const char *out = NULL;
    c.root = doc.root;
    if (!c.root || c.root->type != JSON_OBJECT) {
        diag_error(d, (Span){file, 0, 0}, "%s must hold a JSON object", src->files[file].path);
    } else if ((c.handled = ARENA_NEWN(a, bool, c.root->count + 1))) {
        read_arch(&c);
        if (c.arch) {
            read_dtype(&c);
            if (c.arch->fam == FAM_GPT2) read_gpt2(&c);
            else if (c.arch->fam == FAM_GEMMA) read_gemma(&c);
            else if (c.arch->fam == FAM_MOE) read_moe(&c);
            else read_llama(&c);
            if (!c.failed) pick_seq(&c, get(&c, c.arch->fam == FAM_GPT2 ? "n_positions" : "max_position_embeddings"),
                                    c.arch->fam == FAM_GPT2 ? "n_positions" : "max_position_embeddings");
            if (c.arch->fam == FAM_MOE && c.quantize) {
                diag_error(d, SPAN_NONE, "--quantize: %s is not supported (the experts are stacked parameters the "
                           "quantized linears do not cover)", c.arch->arch);
                c.failed = true;
            }
            if (c.arch->fam == FAM_MOE) read_moe_window(&c);
            else if (c.arch->fam != FAM_GPT2) read_window(&c); /* T is 0 after errors: no window complaint then */
            check_rest(&c);
            if (c.lora && lora_resolve(&c)) c.failed = true;
            if (!c.failed) out = generate(&c);
        }
    }
    /* a table that could not be allocated (the layers' window or dense patterns) would read as "none" */
    if (!c.failed && a->failed) {
        diag_error(d, SPAN_NONE, "out of memory reading the model's config");
        c.failed = true;
    }
    json_free(&doc);
    return c.failed ? NULL : out;
}

const char *hfconfig_to_zl(Arena *a, SourceSet *src, DiagSink *d, const char *dir, const HfConfigOptions *o) {
    const char *path = arena_printf(a, "%s/config.json", dir);
    int err = 0, id = path ? source_load(src, path, &err) : -1;
    if (id < 0) {
        diag_error(d, SPAN_NONE, "cannot read %s: %s", path ? path : dir, strerror(err ? err : ENOMEM));
        if (err == ENOENT) diag_hint(d, "--from-hf takes a model directory, the one save_pretrained writes");
        return NULL;
    }
    if (src->files[id].len > HFC_MAX_CONFIG) {
        diag_error(d, SPAN_NONE, "%s is larger than %d MiB: not a config.json", path, HFC_MAX_CONFIG >> 20);
        return NULL;
    }
    return hfconfig_text_to_zl(a, src, id, d, o);
}
