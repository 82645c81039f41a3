/* hfconfig: a Hugging Face config.json -> an equivalent .zl model.
 *
 * Reads DIR/config.json (into the SourceSet, so that problems are reported
 * at file:line:col of the key's value, like any diagnostic) and writes the
 * text of a .zl program that computes what the Hugging Face model computes,
 * with the stdlib layers hand-written models use (stdlib/nn.zl for
 * GPT2LMHeadModel; stdlib/llama.zl for LlamaForCausalLM,
 * MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM;
 * stdlib/olmo2.zl for Olmo2ForCausalLM; stdlib/gemma.zl for
 * Gemma2ForCausalLM, Gemma3ForCausalLM), a default
 * fine-tuning train block, and the hf block (every parameter's Hugging Face
 * tensor, the config.json text as is). Every key is accounted for: read,
 * known not to change the computation, or reported: an error for what zinf
 * cannot compute (another rope scaling, a sliding window shorter than the
 * sequence, experts, ...), a warning for dropout (zinf trains without it)
 * and for keys it does not know. docs/huggingface.md ("Models from Hugging
 * Face") lists them. Nothing is printed; the text lives in the arena.
 */
#ifndef ZINF_HFCONFIG_H
#define ZINF_HFCONFIG_H
#include <stdint.h>
#include "arena.h"
#include "diag.h"

typedef struct HfConfigOptions {
    int64_t seq;          /* the training sequence length T; 0: min(the model's context, 1024) */
    const char *lora;     /* --lora SPEC: LoRA adapters, "r=8,alpha=16,targets=q_proj,v_proj" (any part
                             may be left out: r=8, alpha=16, and PEFT's default targets, q_proj,v_proj
                             for the LLaMA family, c_attn for GPT-2); "" or NULL: none */
    const char *quantize; /* --quantize nf4|int8 (with --lora): the frozen weights stored quantized
                             (train { quantize }); NULL: none */
} HfConfigOptions;

/* The .zl text for DIR's config.json, or NULL with the errors in d. */
const char *hfconfig_to_zl(Arena *a, SourceSet *src, DiagSink *d, const char *dir, const HfConfigOptions *o);

/* The same from config.json text already in src as file `file`. */
const char *hfconfig_text_to_zl(Arena *a, const SourceSet *src, int file, DiagSink *d, const HfConfigOptions *o);

#endif
