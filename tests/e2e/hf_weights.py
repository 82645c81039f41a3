"""Helper of tests/e2e/hf_weights.sh: small random Hugging Face models made
with transformers (never downloaded), token files, and the losses
transformers computes on the batches zinfrun trains on.

  hf_weights.py make W [--big]  models, token file, broken copies; with --big also what big makes, in
                                the same process (importing torch and transformers costs seconds);
                                when that fails only W/big is missing, and the traceback is in W/big.log
  hf_weights.py big W           a larger LLaMA for the import's memory check
  hf_weights.py check W CASES   per case line "name micro_batch ranks hf_dir export_dir losses_a losses_b":
                                zinf's step-1 loss against transformers on the
                                checkpoint it started from, and zinf's step-4
                                loss (after resuming) against transformers on
                                the export of step 3, both f32, 1e-5 relative
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

MODELS = {
    # GPT-2: tied embeddings, odd vocabulary, 3 heads of 16
    "gpt2": dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=97, n_positions=24, n_embd=48,
                 n_layer=2, n_head=3, activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                 embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0),
    # LLaMA: grouped-query attention (4 heads, 2 kv heads), untied head, odd sizes
    "llama": dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=101, hidden_size=64,
                  intermediate_size=86, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=16, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
                  attention_bias=False, mlp_bias=False, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0),
    # LLaMA with attention_bias (q, k, v, o), mlp_bias and a head_dim of its own (4 x 20 != 64)
    "llama-bias": dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=101, hidden_size=64,
                       intermediate_size=86, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=20, max_position_embeddings=16, rms_norm_eps=1e-5, attention_bias=True, mlp_bias=True,
                       tie_word_embeddings=False, bos_token_id=0, eos_token_id=0),
    # OLMo 2: post-norm, q/k RMSNorm over all heads, with attention_bias, tied
    "olmo2": dict(model_type="olmo2", architectures=["Olmo2ForCausalLM"], vocab_size=101, hidden_size=64,
                  intermediate_size=86, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=16, rms_norm_eps=1e-6, attention_bias=True, tie_word_embeddings=True,
                  pad_token_id=1, bos_token_id=0, eos_token_id=0),
    # Phi-3: fused qkv_proj and gate_up_proj, grouped kv heads
    "phi3": dict(model_type="phi3", architectures=["Phi3ForCausalLM"], vocab_size=101, hidden_size=64,
                 intermediate_size=86, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=16, original_max_position_embeddings=16, rms_norm_eps=1e-5,
                 tie_word_embeddings=False, pad_token_id=0, bos_token_id=0, eos_token_id=0),
}
BIG = dict(MODELS["llama"], vocab_size=16000, hidden_size=512, intermediate_size=1376, num_hidden_layers=6,
           num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=32)


def make_model(cfg, out, seed):
    c = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
    c.architectures = cfg["architectures"]
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(c, dtype=torch.float32)
    with torch.no_grad():  # norms and biases away from 1 and 0, so that a misplaced one shows
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    m.save_pretrained(out)


def tokens(path, n, vocab, seed):
    ids = np.random.default_rng(seed).integers(0, vocab, n).astype(np.uint16)
    h = np.zeros(256, np.int32)
    h[:4] = [20240520, 1, n, vocab]
    with open(path, "wb") as f:
        f.write(h.tobytes() + ids.tobytes())


def broken(w):
    """Copies of the checkpoints with what --init must refuse or skip."""
    t = load_file(os.path.join(w, "llama/hf/model.safetensors"))
    missing = dict(t)
    del missing["model.layers.1.mlp.down_proj.weight"], missing["model.norm.weight"]
    missing["model.layers.1.mlp.down_proj.weight_renamed"] = t["model.layers.1.mlp.down_proj.weight"]
    shape = dict(t)
    shape["lm_head.weight"] = torch.zeros(101, 65)
    ints = dict(t)
    ints["model.norm.weight"] = torch.zeros(64, dtype=torch.int32)
    g = load_file(os.path.join(w, "gpt2/hf/model.safetensors"))
    g["lm_head.weight"] = g["transformer.wte.weight"].clone()  # as older GPT-2 checkpoints carry it
    g["transformer.h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 24, 24))
    for name, d in (("bad-missing", missing), ("bad-shape", shape), ("bad-dtype", ints), ("gpt2-extra", g)):
        os.makedirs(os.path.join(w, name))
        save_file(d, os.path.join(w, name, "model.safetensors"), metadata={"format": "pt"})


def make(w):
    for i, (name, cfg) in enumerate(MODELS.items()):
        make_model(cfg, os.path.join(w, name, "hf"), 10 + i)
    tokens(os.path.join(w, "tok.bin"), 4000, 97, 7)
    broken(w)


def big(w):
    make_model(BIG, os.path.join(w, "big", "hf"), 3)


def batch(tok, B, T, R, step):
    """The global batch of optimizer step `step` (1-based) on R ranks of
    micro-batches of B rows, as runtime/data/tokens.h defines it: rank r reads
    window (step-1)*R + r."""
    ids = np.fromfile(tok, np.uint16, offset=1024).astype(np.int64)
    W = (len(ids) - 1) // (B * T)
    xs, ys = [], []
    for r in range(R):
        m = ((step - 1) * R + r) % W
        win = ids[m * B * T: m * B * T + B * T + 1]
        xs.append(win[:-1].reshape(B, T))
        ys.append(win[1:].reshape(B, T))
    return torch.tensor(np.concatenate(xs)), torch.tensor(np.concatenate(ys))


def hf_loss(d, tok, B, R, step):
    m, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit("FAIL %s: from_pretrained reports %s" % (d, problems))
    T = m.config.n_positions if m.config.model_type == "gpt2" else m.config.max_position_embeddings
    x, y = batch(tok, B, T, R, step)
    m.eval()
    with torch.no_grad():
        lg = m(x).logits
        return torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item()


def zinf_losses(path):
    out = {}
    for line in open(path):
        f = line.split()
        out[int(f[1])] = float(f[3])
    return out


def check(w, cases):
    tok = os.path.join(w, "tok.bin")
    fail = 0
    for line in open(cases):
        name, B, R, hf, exp, la, lb = line.split()
        B, R = int(B), int(R)
        za, zb = zinf_losses(la), zinf_losses(lb)
        for what, d, step, z in (("init", hf, 1, za[1]), ("export", exp, 4, zb[4])):
            t = hf_loss(d, tok, B, R, step)
            rel = abs(z - t) / abs(t)
            ok = rel <= 1e-5
            fail |= not ok
            print("%s %-6s %d rank%s %-5s step %d: zinf %.9g, transformers %.9g (relative %.1e)" %
                  ("ok  " if ok else "FAIL", name, R, "" if R == 1 else "s", what, step, z, t, rel))
    return fail


if __name__ == "__main__":
    torch.set_num_threads(1)
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2])
        if sys.argv[3:] == ["--big"]:
            try:
                big(sys.argv[2])
            except Exception:
                import traceback
                with open(os.path.join(sys.argv[2], "big.log"), "w") as f:
                    traceback.print_exc(file=f)
    elif cmd == "big":
        big(sys.argv[2])
    elif cmd == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
