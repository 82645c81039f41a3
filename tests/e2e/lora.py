"""Helper of tests/e2e/lora.sh: a small random LLaMA and a token file, then
zinf's LoRA fine-tuning held to peft's numbers.

  lora.py make W           model in W/hf, tokens in W/tok.bin
  lora.py check W STEP     W/adapter (zinfrun --export-hf: PEFT layout) loaded with
                           PeftModel.from_pretrained onto W/hf, and W/merged (--merge-lora)
                           with from_pretrained, each give zinf's loss of step STEP
                           (W/losses, the weights after STEP-1 steps) within 1e-5 relative;
                           the adapters moved; the base weights in W/all.safetensors
                           (zinfrun --export) are bit-identical to W/hf's
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_weights  # noqa: E402


def make(w):
    hf_weights.make_model(hf_weights.MODELS["llama"], os.path.join(w, "hf"), 10)
    hf_weights.tokens(os.path.join(w, "tok.bin"), 4000, 101, 7)


def loss_of(m, w, step):
    T = m.config.max_position_embeddings
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


def check(w, step):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging
    logging.disable_progress_bar()
    fail = 0
    want = hf_weights.zinf_losses(os.path.join(w, "losses"))[step]
    cfg = json.load(open(os.path.join(w, "adapter", "adapter_config.json")))
    ad = load_file(os.path.join(w, "adapter", "adapter_model.safetensors"))
    moved = [k for k in ad if "lora_B" in k and ad[k].abs().max() > 0]
    exp_targets = {"q_proj", "v_proj", "down_proj"}
    if cfg["r"] != 4 or cfg["lora_alpha"] != 8 or set(cfg["target_modules"]) != exp_targets or len(moved) != 6 or len(ad) != 12:
        print("FAIL adapter: r %s alpha %s targets %s, %d tensors, %d lora_B moved" % (cfg["r"], cfg["lora_alpha"], cfg["target_modules"], len(ad), len(moved)))
        fail = 1
    else:
        print("ok   adapter: r 4, lora_alpha 8, targets %s, %d tensors, every lora_B trained" % (sorted(exp_targets), len(ad)))
    base = AutoModelForCausalLM.from_pretrained(os.path.join(w, "hf"), dtype=torch.float32)
    fail |= close("base + peft adapter (PeftModel.from_pretrained)", loss_of(PeftModel.from_pretrained(base, os.path.join(w, "adapter")), w, step), want)
    m, info = AutoModelForCausalLM.from_pretrained(os.path.join(w, "merged"), dtype=torch.float32, output_loading_info=True)
    if any(v for v in info.values()):
        print("FAIL merged: from_pretrained reports %s" % info)
        fail = 1
    fail |= close("merged (--merge-lora, from_pretrained)", loss_of(m, w, step), want)
    merged_peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(os.path.join(w, "hf"), dtype=torch.float32),
                                            os.path.join(w, "adapter")).merge_and_unload().state_dict()
    ms = load_file(os.path.join(w, "merged", "model.safetensors"))
    worst = max((ms[k] - merged_peft[k]).abs().max().item() for k in ms)
    print("%s merged weights = peft's merge_and_unload within %.1e" % ("ok  " if worst < 1e-6 else "FAIL", worst))
    fail |= worst >= 1e-6
    # the base weights, as zinf holds them after training, against the checkpoint
    hf, z = load_file(os.path.join(w, "hf", "model.safetensors")), load_file(os.path.join(w, "all.safetensors"))
    pairs = [("tok", "model.embed_tokens.weight", False), ("head", "lm_head.weight", True)]
    for i in range(2):
        for zn, hn in (("rope_attn.wq", "self_attn.q_proj"), ("rope_attn.wv", "self_attn.v_proj"), ("swiglu.w2", "mlp.down_proj"),
                       ("rms.g", "input_layernorm")):
            pairs.append(("llama_block.%d.%s" % (i, zn), "model.layers.%d.%s.weight" % (i, hn), zn != "rms.g"))
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
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2], int(sys.argv[3])))
