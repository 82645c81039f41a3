"""Helper of tests/e2e/lora.sh: a small random LLaMA (or GPT-2) and a token
file, then zinf's LoRA fine-tuning held to peft's numbers.

  lora.py make W0 KIND...        for each KIND (llama, llama-bias, olmo2, phi3, phi4, gemma2, gemma3, gpt2),
                                 W = W0/KIND: model in W/hf, tokens in W/tok.bin
  lora.py check W0 STEP KIND...  for each KIND, W = W0/KIND: W/adapter (zinfrun --export-hf: PEFT layout) loaded with
                           PeftModel.from_pretrained onto W/hf, and W/merged (--merge-lora)
                           with from_pretrained, each give zinf's loss of step STEP
                           (W/losses, the weights after STEP-1 steps) within 1e-5 relative;
                           the adapters moved, each A [r, in] and B [out, r] of its linear;
                           the merged model keeps the checkpoint's biases; the base weights in W/all.safetensors
                           (zinfrun --export) are bit-identical to W/hf's
One process for all kinds: importing torch, transformers and peft costs
seconds, each check a fraction of that.
"""
import json
import os
import sys
import traceback

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_weights  # noqa: E402


# What each kind's check expects: lora.sh's --lora targets (PEFT's module
# names), the adapted modules, and zinf's frozen base weights against the HF
# tensors (zinf name, HF name without ".weight", transposed).
KINDS = {
    "llama": dict(r=4, alpha=8, targets={"q_proj", "v_proj", "down_proj"}, modules=3,
                  base=[("rope_attn.wq", "model.layers.%d.self_attn.q_proj", True),
                        ("rope_attn.wv", "model.layers.%d.self_attn.v_proj", True),
                        ("swiglu.w2", "model.layers.%d.mlp.down_proj", True),
                        ("rms.g", "model.layers.%d.input_layernorm", False)],
                  block="llama_block.%d.", extra=[("tok", "model.embed_tokens.weight", False), ("head", "lm_head.weight", True)]),
    # OLMo 2: the block's norms come after attention (rms) and the MLP (rms_1)
    "olmo2": dict(r=4, alpha=8, targets={"q_proj", "v_proj", "down_proj"}, modules=3,
                  base=[("rope_attn.wq", "model.layers.%d.self_attn.q_proj", True),
                        ("rope_attn.wv", "model.layers.%d.self_attn.v_proj", True),
                        ("rope_attn.q_norm", "model.layers.%d.self_attn.q_norm", False),
                        ("swiglu.w2", "model.layers.%d.mlp.down_proj", True),
                        ("rms.g", "model.layers.%d.post_attention_layernorm", False)],
                  block="olmo2_block.%d.", extra=[("tok", "model.embed_tokens.weight", False)]),
    # LLaMA with attention_bias, mlp_bias and a head_dim of its own (4 heads of 20: q_proj's output and
    # o_proj's input 80, not hidden_size 64): adapters as wide as the heads, the biases frozen and merged as is
    "llama-bias": dict(r=4, alpha=8, targets={"q_proj", "o_proj", "down_proj"}, modules=3,
                       base=[("rope_attn.wq", "model.layers.%d.self_attn.q_proj", True),
                             ("rope_attn.wo", "model.layers.%d.self_attn.o_proj", True),
                             ("rope_attn.bq", "model.layers.%d.self_attn.q_proj.bias", False),
                             ("rope_attn.bo", "model.layers.%d.self_attn.o_proj.bias", False),
                             ("swiglu.w2", "model.layers.%d.mlp.down_proj", True),
                             ("swiglu.b2", "model.layers.%d.mlp.down_proj.bias", False),
                             ("rms.g", "model.layers.%d.input_layernorm", False)],
                       block="llama_block.%d.", extra=[("tok", "model.embed_tokens.weight", False),
                                                       ("head", "lm_head.weight", True)],
                       widths={"q_proj": 80, "o_proj": 80}),
    # Phi-3: the unfused linears (an adapter on the fused qkv_proj or gate_up_proj is refused)
    "phi3": dict(r=4, alpha=8, targets={"o_proj", "down_proj"}, modules=2,
                 base=[("rope_attn.wo", "model.layers.%d.self_attn.o_proj", True),
                       ("swiglu.w2", "model.layers.%d.mlp.down_proj", True),
                       ("rms.g", "model.layers.%d.input_layernorm", False)],
                 block="llama_block.%d.", extra=[("tok", "model.embed_tokens.weight", False), ("head", "lm_head.weight", True)]),
    # Gemma 2: LLaMA's linear names on its own block (norms after attention and the MLP too)
    "gemma2": dict(r=4, alpha=8, targets={"q_proj", "o_proj", "up_proj", "down_proj"}, modules=4,
                   base=[("gemma_attn.wq", "model.layers.%d.self_attn.q_proj", True),
                         ("gemma_attn.wo", "model.layers.%d.self_attn.o_proj", True),
                         ("geglu.w3", "model.layers.%d.mlp.up_proj", True),
                         ("geglu.w2", "model.layers.%d.mlp.down_proj", True),
                         ("gemma_rms.g", "model.layers.%d.input_layernorm", False)],
                   block="gemma_block.%d.", extra=[("tok", "model.embed_tokens.weight", False)]),
    # Gemma 3: q/k norms per head after the adapted q_proj (PEFT's adapter is on the nn.Linear)
    "gemma3": dict(r=4, alpha=8, targets={"q_proj", "k_proj", "v_proj", "down_proj"}, modules=4,
                   base=[("gemma_attn.wq", "model.layers.%d.self_attn.q_proj", True),
                         ("gemma_attn.wk", "model.layers.%d.self_attn.k_proj", True),
                         ("gemma_attn.q_norm", "model.layers.%d.self_attn.q_norm", False),
                         ("geglu.w2", "model.layers.%d.mlp.down_proj", True),
                         ("gemma_rms_1.g", "model.layers.%d.post_attention_layernorm", False)],
                   block="gemma_block.%d.", extra=[("tok", "model.embed_tokens.weight", False)]),
    # Phi-4-mini's rope: partial rotary (0.75) and longrope within the original context (the short
    # factors, longrope's attention factor); adapters on the unfused linears
    "phi4": dict(r=4, alpha=8, targets={"o_proj", "down_proj"}, modules=2,
                 base=[("rope_attn.wo", "model.layers.%d.self_attn.o_proj", True),
                       ("swiglu.w2", "model.layers.%d.mlp.down_proj", True),
                       ("rms_1.g", "model.layers.%d.post_attention_layernorm", False)],
                 block="llama_block.%d.", extra=[("tok", "model.embed_tokens.weight", False), ("head", "lm_head.weight", True)]),
    # GPT-2's Conv1D: "c_proj" is attn's and mlp's, 4 adapted modules a layer; weights [in, out] as zinf's
    "gpt2": dict(r=4, alpha=16, targets={"c_attn", "c_proj", "c_fc"}, modules=4,
                 base=[("attn.wqkv", "transformer.h.%d.attn.c_attn", False), ("attn.wo", "transformer.h.%d.attn.c_proj", False),
                       ("mlp.w1", "transformer.h.%d.mlp.c_fc", False), ("mlp.w2", "transformer.h.%d.mlp.c_proj", False),
                       ("ln.g", "transformer.h.%d.ln_1", False)],
                 block="block.%d.", extra=[("wte", "transformer.wte.weight", False)]),
}


# Models of this test alone (hf_weights.MODELS are every test's): Gemma 2 and Gemma 3, tied,
# without the attention soft-cap (transformers' sdpa attention, which loss_of uses, does not
# apply it); Phi-4-mini's rope
OWN = {
    "gemma2": dict(model_type="gemma2", architectures=["Gemma2ForCausalLM"], vocab_size=89, hidden_size=48,
                   intermediate_size=72, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   max_position_embeddings=16, sliding_window=16, query_pre_attn_scalar=16,
                   attn_logit_softcapping=None, final_logit_softcapping=10.0, pad_token_id=0, bos_token_id=2,
                   eos_token_id=1),
    # Gemma 3 (text): tied, the sliding layers' window holding the sequence (16), no attention soft-cap
    "gemma3": dict(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], vocab_size=83, hidden_size=48,
                   intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=16, max_position_embeddings=16, sliding_window=16, sliding_window_pattern=2,
                   query_pre_attn_scalar=16, rope_theta=20000.0, rope_local_base_freq=100.0,
                   final_logit_softcapping=None, attn_logit_softcapping=None, pad_token_id=0, bos_token_id=2,
                   eos_token_id=1),
    # Phi-4-mini's rope: 12 of each head's 16 columns turn; longrope with an original context of 16 in 32
    # (T = 16: the short factors, attention factor sqrt(1 + ln 2 / ln 16))
    "phi4": dict(model_type="phi3", architectures=["Phi3ForCausalLM"], vocab_size=79, hidden_size=64,
                 intermediate_size=72, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=32, original_max_position_embeddings=16, rms_norm_eps=1e-5,
                 rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                                      short_factor=[1.0, 1.25, 1.5, 2.0, 2.5, 3.0],
                                      long_factor=[1.5, 2.0, 4.0, 6.0, 9.0, 12.0]),
                 tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2),
}
# The sequence of a kind whose max_position_embeddings is longer than its training sequence (lora.sh's --seq)
SEQ = {"phi4": 16}


def make(w, kind):
    cfg = OWN.get(kind) or hf_weights.MODELS[kind]
    hf_weights.make_model(cfg, os.path.join(w, "hf"), 10)
    hf_weights.tokens(os.path.join(w, "tok.bin"), 4000, cfg["vocab_size"], 7)


def loss_of(m, w, step, kind):
    T = SEQ.get(kind, m.config.max_position_embeddings)
    x, y = hf_weights.batch(os.path.join(w, "tok.bin"), 1, T, 1, step)
    m.eval()
    with torch.no_grad():
        lg = m(x).logits
        return torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item()


def close(name, got, want):
    rel = abs(got - want) / abs(want)
    ok = rel <= 1e-5
    print("%s %s: loss %.8f, zinf %.8f (%.1e relative)" % ("ok  " if ok else "FAIL", name, got, want, rel))
    return 0 if ok else 1


def check(w, step, kind):
    k = KINDS[kind]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging
    logging.disable_progress_bar()
    fail = 0
    want = hf_weights.zinf_losses(os.path.join(w, "losses"))[step]
    cfg = json.load(open(os.path.join(w, "adapter", "adapter_config.json")))
    ad = load_file(os.path.join(w, "adapter", "adapter_model.safetensors"))
    moved = [k for k in ad if "lora_B" in k and ad[k].abs().max() > 0]
    exp_targets, nmod = k["targets"], 2 * k["modules"]
    fifo = kind == "gpt2"  # PEFT's fan_in_fan_out: GPT-2's Conv1D keeps [in, out]
    if (cfg["r"] != k["r"] or cfg["lora_alpha"] != k["alpha"] or set(cfg["target_modules"]) != exp_targets or len(moved) != nmod
            or len(ad) != 2 * nmod or cfg["fan_in_fan_out"] != fifo):
        print("FAIL adapter: r %s alpha %s targets %s fan_in_fan_out %s, %d tensors, %d lora_B moved"
              % (cfg["r"], cfg["lora_alpha"], cfg["target_modules"], cfg["fan_in_fan_out"], len(ad), len(moved)))
        fail = 1
    else:
        print("ok   adapter: r %d, lora_alpha %d, targets %s, fan_in_fan_out %s, %d tensors, every lora_B trained"
              % (k["r"], k["alpha"], sorted(exp_targets), fifo, len(ad)))
    # each adapter as wide as its linear: A [r, in], B [out, r] (GPT-2's Conv1D keeps its weight [in, out])
    hf = load_file(os.path.join(w, "hf", "model.safetensors"))
    wrong = []
    for name, t in sorted(ad.items()):
        mod = name.replace("base_model.model.", "").rsplit(".lora_", 1)[0]
        out_, in_ = hf[mod + ".weight"].shape[::-1] if fifo else hf[mod + ".weight"].shape
        want_shape = (k["r"], in_) if ".lora_A." in name else (out_, k["r"])
        if tuple(t.shape) != want_shape:
            wrong.append("%s %s, not %s" % (name, list(t.shape), list(want_shape)))
    for proj, width in k.get("widths", {}).items():  # the widths the test is about (heads * head_dim != hidden)
        got = [tuple(t.shape) for n, t in ad.items() if ("." + proj + ".") in n]
        if not got or not any(width in sh for sh in got):
            wrong.append("%s: no adapter of width %d (%s)" % (proj, width, got))
    if wrong:
        print("FAIL adapter shapes: %s" % "; ".join(wrong))
        fail = 1
    else:
        print("ok   adapter shapes: A [r, in], B [out, r] of every adapted linear%s"
              % "".join(", %s %d wide" % kv for kv in sorted(k.get("widths", {}).items())))
    base = AutoModelForCausalLM.from_pretrained(os.path.join(w, "hf"), dtype=torch.float32)
    fail |= close("base + peft adapter (PeftModel.from_pretrained)", loss_of(PeftModel.from_pretrained(base, os.path.join(w, "adapter")), w, step, kind), want)
    m, info = AutoModelForCausalLM.from_pretrained(os.path.join(w, "merged"), dtype=torch.float32, output_loading_info=True)
    if any(v for v in info.values()):
        print("FAIL merged: from_pretrained reports %s" % info)
        fail = 1
    fail |= close("merged (--merge-lora, from_pretrained)", loss_of(m, w, step, kind), want)
    merged_peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(os.path.join(w, "hf"), dtype=torch.float32),
                                            os.path.join(w, "adapter")).merge_and_unload().state_dict()
    ms = load_file(os.path.join(w, "merged", "model.safetensors"))
    worst = max((ms[k] - merged_peft[k]).abs().max().item() for k in ms)
    print("%s merged weights = peft's merge_and_unload within %.1e" % ("ok  " if worst < 1e-6 else "FAIL", worst))
    fail |= worst >= 1e-6
    # merging changes weights only: every bias of the checkpoint is in the merged model as it was
    biases = [n for n in hf if n.endswith(".bias")]
    lost = [n for n in biases if n not in ms or not torch.equal(ms[n], hf[n])]
    if lost:
        print("FAIL merged biases missing or changed: %s" % lost)
        fail = 1
    elif biases:
        print("ok   merged model keeps the checkpoint's %d biases" % len(biases))
    # the base weights, as zinf holds them after training, against the checkpoint
    z = load_file(os.path.join(w, "all.safetensors"))
    pairs = list(k["extra"])
    for i in range(2):
        for zn, hn, t in k["base"]:
            pairs.append((k["block"] % i + zn, hn % i + ("" if hn.endswith(".bias") else ".weight"), t))
    bad = [zn for zn, hn, t in pairs if zn in z and not torch.equal(z[zn], hf[hn].t() if t else hf[hn])]
    missing = [zn for zn, _, _ in pairs if zn not in z]
    if bad or missing:
        print("FAIL frozen base weights changed: %s; not exported: %s" % (bad, missing))
        fail = 1
    else:
        print("ok   %d frozen base weights bit-identical to the checkpoint after training" % len(pairs))
    return fail


if __name__ == "__main__":
    if sys.argv[1] == "make":
        for kind in sys.argv[3:]:
            make(os.path.join(sys.argv[2], kind), kind)
    else:
        fail = 0
        for kind in sys.argv[4:]:
            print("== %s" % kind)
            try:
                fail |= check(os.path.join(sys.argv[2], kind), int(sys.argv[3]), kind)
            except Exception:
                traceback.print_exc(file=sys.stdout)
                print("FAIL %s: the check raised (above)" % kind)
                fail = 1
        sys.exit(fail)
