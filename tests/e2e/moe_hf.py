"""Mixture-of-experts models through the Hugging Face interchange, for
tests/e2e/moe_hf.sh.

  moe_hf.py make W   small random MixtralForCausalLM (with and without the
                     load-balancing loss), Qwen3MoeForCausalLM,
                     OlmoeForCausalLM and Qwen2MoeForCausalLM models (and
                     Qwen3-MoE, Qwen2-MoE with dense layers) saved
                     with save_pretrained in W/C (per-expert tensors, as
                     transformers writes them), and W/tok.bin; prints one
                     line per case: "C L1 L2", transformers' training loss
                     (cross-entropy plus router_aux_loss_coef times the
                     load-balancing loss with output_router_logits) of the
                     step-1 and step-2 micro-batches
  moe_hf.py export W C OUT LOSS2
                     OUT (zinfrun --export-hf after one step) loads with
                     from_pretrained with no missing, unexpected or
                     mismatched keys, and its step-2 loss equals LOSS2
                     (zinf's) within 1e-5 relative, while the step-2 loss of
                     the checkpoint before the step differs from it
  moe_hf.py peft W C ADAPTER MERGED LOSS2
                     ADAPTER (--export-hf of a run with LoRA on the
                     attention or the experts, after one step) loads with
                     PeftModel.from_pretrained onto W/C, its tensors exactly
                     the adapter's (PEFT's state dict of it: no key missing
                     or unexpected, the same values), and MERGED
                     (--merge-lora) with from_pretrained, no key missing or
                     unexpected; both give zinf's step-2 loss LOSS2 within
                     1e-5 relative
  moe_hf.py same DIR OUT
                     every tensor of OUT's safetensors equals DIR's, bit for
                     bit, and they hold the same names
  moe_hf.py gen W C IDS N GOT [ADAPTER]
                     transformers' greedy continuation (N new tokens) of
                     the ids IDS (1,2,3) must be the ids of file GOT
                     (zinfgen's); with ADAPTER, of W/C with that PEFT
                     adapter (PeftModel.from_pretrained), and GOT.logits
                     (zinfgen --logits) the logits each token was picked
                     from (1e-4 of their largest), which the base model's
                     are not
  moe_hf.py batch W FILE
                     each line of FILE is the arguments of one command
                     above (export, peft, same, gen), run in one process
  moe_hf.py drop DIR NAME OUT
                     DIR copied to OUT without the tensor NAME
  moe_hf.py join DIR ADAPTER OUT
                     DIR's tensors and those of the PEFT adapter ADAPTER in
                     one safetensors file OUT
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

V, T, B = 80, 8, 1

COMMON = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_dropout=0.0,
              rope_theta=10000.0)

CASES = {
    "mixtral": dict(model_type="mixtral", intermediate_size=24, num_local_experts=4, num_experts_per_tok=2,
                    output_router_logits=True, router_aux_loss_coef=0.05),
    "mixtral-noaux": dict(model_type="mixtral", intermediate_size=24, num_local_experts=4, num_experts_per_tok=2,
                          output_router_logits=False),
    "qwen3moe": dict(model_type="qwen3_moe", moe_intermediate_size=16, intermediate_size=40, num_experts=6,
                     num_experts_per_tok=3, norm_topk_prob=True, head_dim=12, output_router_logits=True,
                     router_aux_loss_coef=0.02),
    "olmoe": dict(model_type="olmoe", intermediate_size=20, num_experts=5, num_experts_per_tok=2, norm_topk_prob=False,
                  output_router_logits=False, eos_token_id=None, pad_token_id=None),
    "qwen2moe": dict(model_type="qwen2_moe", moe_intermediate_size=12, intermediate_size=40,
                     shared_expert_intermediate_size=20, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                     output_router_logits=True, router_aux_loss_coef=0.01),
    # dense layers among the sparse ones: Qwen3-MoE's layer 1 of 3 by mlp_only_layers; Qwen2-MoE's
    # layers 0 and 2 of 3 by decoder_sparse_step = 2 (its shared expert in layer 1)
    "qwen3moe-dense": dict(model_type="qwen3_moe", moe_intermediate_size=16, intermediate_size=40, num_experts=4,
                           num_experts_per_tok=2, norm_topk_prob=True, head_dim=12, num_hidden_layers=3,
                           mlp_only_layers=[1], output_router_logits=True, router_aux_loss_coef=0.2),
    "qwen2moe-step2": dict(model_type="qwen2_moe", moe_intermediate_size=12, intermediate_size=40,
                           shared_expert_intermediate_size=20, num_experts=4, num_experts_per_tok=2,
                           norm_topk_prob=False, num_hidden_layers=3, decoder_sparse_step=2,
                           output_router_logits=True, router_aux_loss_coef=0.2),
}
ARCH = {"mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "olmoe": "OlmoeForCausalLM",
        "qwen2_moe": "Qwen2MoeForCausalLM"}


def make_model(c, seed):
    cfg = dict(COMMON)
    cfg.update(c)
    conf = AutoConfig.for_model(**cfg)
    conf.architectures = [ARCH[c["model_type"]]]
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(conf, dtype=torch.float32)
    with torch.no_grad():
        for p in m.parameters():  # norms away from 1, routers and experts of some size
            p.add_(torch.randn_like(p) * 0.05)
    return m


def tokens(path, n, seed):
    ids = np.random.default_rng(seed).integers(0, V, n).astype(np.uint16)
    h = np.zeros(256, np.int32)
    h[:4] = [20240520, 1, n, V]
    with open(path, "wb") as f:
        f.write(h.tobytes() + ids.tobytes())


def batch(tok, step):
    """The micro-batch of step `step` on one rank (runtime/data/tokens.h)."""
    ids = np.fromfile(tok, np.uint16, offset=1024).astype(np.int64)
    m = step - 1
    win = ids[m * B * T: m * B * T + B * T + 1]
    return torch.tensor(win[:-1].reshape(B, T)), torch.tensor(win[1:].reshape(B, T))


def hf_loss(m, x, y):
    aux = bool(m.config.output_router_logits)
    with torch.no_grad():
        out = m(x, output_router_logits=aux)
        lg = out.logits
        loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))
        if aux:
            loss = loss + m.config.router_aux_loss_coef * out.aux_loss
    return loss.item()


def load(d):
    return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()


def make(w):
    tokens(os.path.join(w, "tok.bin"), 4096, 7)
    for k, (name, c) in enumerate(CASES.items()):
        d = os.path.join(w, name)
        make_model(c, 100 + k).save_pretrained(d)
        m = load(d)
        ls = [hf_loss(m, *batch(os.path.join(w, "tok.bin"), s)) for s in (1, 2)]
        print(name, "%.9g %.9g" % tuple(ls))


def check_export(w, name, out, loss2):
    m, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        print("FAIL: %s: from_pretrained of the export: %s" % (name, bad))
        return 1
    x, y = batch(os.path.join(w, "tok.bin"), 2)
    got, before = hf_loss(m.eval(), x, y), hf_loss(load(os.path.join(w, name)), x, y)
    rel = abs(got - loss2) / abs(loss2)
    moved = abs(before - loss2) / abs(loss2)
    if rel > 1e-5 or moved < 1e-4:
        print("FAIL: %s: transformers' step-2 loss of the export %.9g, zinf's %.9g (rel %.2e); before the step %.9g "
              "(rel %.2e)" % (name, got, loss2, rel, before, moved))
        return 1
    print("ok   %s: the export loads (no missing or unexpected keys); its step-2 loss %.9g, zinf's %.9g (rel %.1e)"
          % (name, got, loss2, rel))
    return 0


def check_peft(w, name, adapter, merged, loss2):
    from peft import PeftModel, get_peft_model_state_dict
    x, y = batch(os.path.join(w, "tok.bin"), 2)
    fail = 0
    cfg = json.load(open(os.path.join(adapter, "adapter_config.json")))
    pm = PeftModel.from_pretrained(load(os.path.join(w, name)), adapter).eval()
    have, saved = get_peft_model_state_dict(pm), load_file(os.path.join(adapter, "adapter_model.safetensors"))
    if set(have) != set(saved) or any(not torch.equal(have[k], saved[k]) for k in saved):
        print("FAIL: %s: PEFT's adapter after loading differs from the file: missing %s, unexpected %s, other values %s"
              % (name, sorted(set(have) - set(saved))[:4], sorted(set(saved) - set(have))[:4],
                 [k for k in saved if k in have and not torch.equal(have[k], saved[k])][:4]))
        fail = 1
    got = hf_loss(pm, x, y)
    before = hf_loss(load(os.path.join(w, name)), x, y)
    if abs(before - loss2) / abs(loss2) < 1e-5:
        print("FAIL: %s: the LoRA step left the step-2 loss as it was (%.9g)" % (name, before))
        fail = 1
    m, info = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    got_m = hf_loss(m.eval(), x, y)
    for what, g in (("base + PEFT adapter", got), ("merged", got_m)):
        rel = abs(g - loss2) / abs(loss2)
        if rel > 1e-5 or bad:
            print("FAIL: %s: %s step-2 loss %.9g, zinf's %.9g (rel %.2e)%s" % (name, what, g, loss2, rel,
                                                                              " %s" % bad if bad else ""))
            fail = 1
        else:
            print("ok   %s: %s (targets %s) step-2 loss %.9g, zinf's %.9g (rel %.1e)"
                  % (name, what, sorted(cfg["target_modules"]) + cfg.get("target_parameters", []), g, loss2, rel))
    return fail


def same(a, b):
    def tensors(d):
        out = {}
        for f in sorted(os.listdir(d)):
            if f.endswith(".safetensors"):
                out.update(load_file(os.path.join(d, f)))
        return out
    x, y = tensors(a), tensors(b)
    if set(x) != set(y):
        print("FAIL: names differ: only in %s: %s; only in %s: %s" % (a, sorted(set(x) - set(y))[:4], b,
                                                                      sorted(set(y) - set(x))[:4]))
        return 1
    diff = [k for k in x if x[k].shape != y[k].shape or not torch.equal(x[k], y[k])]
    if diff:
        print("FAIL: %d tensors differ, e.g. %s" % (len(diff), diff[:4]))
        return 1
    print("ok   %s: %d tensors as the checkpoint's, bit for bit" % (b, len(x)))
    return 0


def gen(w, name, ids, n, got_file, adapter=None):
    m = load(os.path.join(w, name))
    if adapter:
        from peft import PeftModel
        m = PeftModel.from_pretrained(m, adapter).eval()
    x = torch.tensor([[int(i) for i in ids.split(",")]])
    with torch.no_grad():
        out = m.generate(x, max_new_tokens=n, do_sample=False, pad_token_id=0, output_logits=True,
                         return_dict_in_generate=True)
        y = out.sequences
    want = " ".join(str(int(t)) for t in y[0, x.shape[1]:])
    if adapter:  # the logits: PEFT's, and not the base model's
        lw = torch.cat(out.logits).double()
        lg = torch.tensor(np.loadtxt(got_file + ".logits", ndmin=2), dtype=torch.float64)
        err = (lg - lw).abs().max().item() / lw.abs().max().item() if lg.shape == lw.shape else float("inf")
        with m.disable_adapter():
            with torch.no_grad():
                lb = m(y[:, :-1]).logits[0, x.shape[1] - 1:].double()
        base = (lb - lw).abs().max().item() / lw.abs().max().item()
        if not err <= 1e-4 or base <= 1e-4:
            print("FAIL: %s + adapter: zinfgen's logits %.2e off PEFT's (of the largest), the base model's %.2e"
                  % (name, err, base))
            return 1
        print("ok   %s + PEFT adapter: zinfgen's logits %.1e off PEFT's, the base model's %.1e" % (name, err, base))
    got = open(got_file).read().strip()
    if got != want:
        print("FAIL: %s%s: zinfgen greedy '%s', transformers' generate '%s'" % (name, " + adapter" if adapter else "", got,
                                                                               want))
        return 1
    print("ok   %s%s: zinfgen greedy '%s' = generate's" % (name, " + PEFT adapter" if adapter else "", got))
    return 0


def command(a):
    if a[0] == "export":
        return check_export(a[1], a[2], a[3], float(a[4]))
    if a[0] == "peft":
        return check_peft(a[1], a[2], a[3], a[4], float(a[5]))
    if a[0] == "same":
        return same(a[1], a[2])
    if a[0] == "gen":
        return gen(a[1], a[2], a[3], int(a[4]), a[5], a[6] if len(a) > 6 else None)
    if a[0] == "drop":
        return drop(a[1], a[2], a[3])
    if a[0] == "join":
        t = load_file(os.path.join(a[1], "model.safetensors"))
        t.update(load_file(os.path.join(a[2], "adapter_model.safetensors")))
        save_file(t, a[3], metadata={"format": "pt"})
        return 0
    sys.exit("moe_hf.py: unknown command " + a[0])


def drop(d, name, out):
    shutil.copytree(d, out)
    f = os.path.join(out, "model.safetensors")
    t = load_file(f)
    del t[name]
    save_file(t, f, metadata={"format": "pt"})
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "batch":
        fail = 0
        for line in open(sys.argv[3]):
            if line.split():
                try:
                    fail |= command(line.split())
                except Exception as e:  # one check's error fails it, not the others
                    print("FAIL: %s: %s: %s" % (line.strip(), type(e).__name__, e))
                    fail = 1
        sys.exit(fail)
    else:
        sys.exit(command(sys.argv[1:]))
