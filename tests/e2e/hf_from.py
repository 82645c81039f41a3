"""hf_from: the Python side of tests/e2e/hf_from.sh (never downloads anything).

    python hf_from.py make ROOT     for every case: ROOT/CASE (save_pretrained of a small random
                                    model), ROOT/CASE.bin (a token file, llm.c layout, of random
                                    ids below its vocabulary) and ROOT/CASE.seq (its sequence)
    python hf_from.py loss ROOT     "CASE LOSS" for every case: the mean cross-entropy transformers
                                    computes on the first micro-batch zinfrun reads from
                                    CASE.bin with B = 1 (tokens[0:T+1])
    python hf_from.py loss1 DIR TOKENS B T   the same for one model directory, B rows of T
    python hf_from.py make+loss ROOT   make, then loss (its lines on stdout, make's chatter on stderr)
    python hf_from.py batch FILE    one process for what hf_from.sh asks after its runs, a line each:
                                      check CASE LISTING DIR CONFIG   tests/e2e/hf_check.py LISTING DIR CONFIG
                                      loss1 NAME DIR TOKENS B T       loss1 DIR TOKENS B T
                                      gen CASE DIR IDS N              generate's greedy N tokens after the
                                                                      comma-separated prompt IDS
                                    each answered by its own output, then "result check CASE 0|1",
                                    "result loss1 NAME LOSS" ("result loss1 NAME error" when it raised)
                                    or "result gen CASE TOKENS..." ("result gen CASE error")

One process, not one per model: importing torch and transformers takes
each Python 3 s or more, and the comparisons themselves take a fraction of that.

The weights are drawn wider than the models' own initialisation (std 0.3,
norm gains around 1) so that attention, rotary frequencies and norms move
the loss by far more than the comparison's 1e-5.
"""
import contextlib
import io
import json
import os
import sys
import traceback

import torch
import transformers as T

import hf_ref

# name: (config class, keyword arguments, training sequence)
CASES = {
    "gpt2": (T.GPT2Config, dict(vocab_size=101, n_positions=40, n_embd=48, n_layer=2, n_head=3,
                                bos_token_id=0, eos_token_id=0, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0), 24),
    "gpt2-untied": (T.GPT2Config, dict(vocab_size=67, n_positions=32, n_embd=40, n_layer=2, n_head=5, n_inner=72,
                                       layer_norm_epsilon=1e-6, tie_word_embeddings=False,
                                       bos_token_id=0, eos_token_id=0,
                                       attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0), 32),
    "llama-gqa": (T.LlamaConfig, dict(vocab_size=97, hidden_size=48, intermediate_size=72, num_hidden_layers=2,
                                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                                      rms_norm_eps=1e-5), 24),
    "llama3-rope": (T.LlamaConfig, dict(vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                        rope_theta=500000.0,
                                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 16}), 24),
    "llama-linear-tied": (T.LlamaConfig, dict(vocab_size=89, hidden_size=32, intermediate_size=56, num_hidden_layers=1,
                                              num_attention_heads=4, max_position_embeddings=32,
                                              rope_scaling={"rope_type": "linear", "factor": 2.0},
                                              tie_word_embeddings=True), 20),
    "mistral": (T.MistralConfig, dict(vocab_size=83, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      sliding_window=32), 24),
    "qwen2": (T.Qwen2Config, dict(vocab_size=79, hidden_size=36, intermediate_size=60, num_hidden_layers=2,
                                  num_attention_heads=6, num_key_value_heads=1, max_position_embeddings=48,
                                  rope_theta=1000000.0, tie_word_embeddings=True), 16),
    "qwen3": (T.Qwen3Config, dict(vocab_size=71, hidden_size=40, intermediate_size=56, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                                  max_position_embeddings=48), 16),
    # LLaMA with attention_bias (q, k, v and o), mlp_bias and a head_dim of its own (4 x 12 != 40)
    "llama-bias": (T.LlamaConfig, dict(vocab_size=73, hidden_size=40, intermediate_size=52, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                                       max_position_embeddings=48, attention_bias=True, mlp_bias=True), 16),
    "qwen3-bias": (T.Qwen3Config, dict(vocab_size=71, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=1, head_dim=8,
                                       max_position_embeddings=48, attention_bias=True), 16),
    # no head_dim in config.json: Qwen3's config class has 128 (not hidden_size / heads = 16)
    "qwen3-default-hd": (T.Qwen3Config, dict(vocab_size=59, hidden_size=32, intermediate_size=40, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=48,
                                             _drop=("head_dim",)), 16),
    # OLMo 2: post-norm, q/k RMSNorm over all heads; grouped kv heads, untied
    "olmo2-gqa": (T.Olmo2Config, dict(vocab_size=83, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=48,
                                  rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                                  pad_token_id=1, eos_token_id=2), 20),
    "olmo2-bias-tied": (T.Olmo2Config, dict(vocab_size=61, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                            num_attention_heads=4, head_dim=10, max_position_embeddings=32,
                                            attention_bias=True, tie_word_embeddings=True,
                                            pad_token_id=1, eos_token_id=2), 16),
    # Phi-3: q, k, v in one qkv_proj and gate, up in one gate_up_proj; grouped kv heads
    "phi3-gqa": (T.Phi3Config, dict(vocab_size=77, hidden_size=48, intermediate_size=56, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=48,
                                original_max_position_embeddings=48, pad_token_id=0, bos_token_id=1,
                                eos_token_id=2), 24),
}


def make(case, d):
    cls, kw, _ = CASES[case]
    drop = kw.get("_drop", ())
    hf_ref.make_model(cls(**{k: v for k, v in kw.items() if k != "_drop"}), case, d)
    if drop:  # keys the config class fills in when config.json lacks them: zinf must do the same
        path = os.path.join(d, "config.json")
        cfg = json.load(open(path))
        for k in drop:
            del cfg[k]
        json.dump(cfg, open(path, "w"), indent=2)


tokens = hf_ref.write_tokens


def loss(d, path, b, t):
    ids = hf_ref.read_tokens(path)
    x, y = ids[:b * t].view(b, t), ids[1:b * t + 1].view(b, t)
    m = T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        lg = m(input_ids=x).logits.double()
    print("%.10f" % torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item())


def gen(d, ids, n):
    """Greedy generate (no early stop) of N tokens after the prompt IDS, as zinfgen --temperature 0."""
    m = T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    with torch.no_grad():
        out = m.eval().generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                                pad_token_id=0, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()


def batch(path):
    """hf_check.py and loss1 for every line of PATH, in this process."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import hf_check
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "check":
            sys.argv = ["hf_check.py"] + f[2:]
            try:
                rc = hf_check.main()
            except Exception:
                traceback.print_exc(file=sys.stdout)
                rc = 1
            print("result check %s %d" % (f[1], 1 if rc else 0))
        elif f[0] == "loss1":
            try:
                with contextlib.redirect_stdout(io.StringIO()) as out:
                    loss(f[2], f[3], int(f[4]), int(f[5]))
                print("result loss1 %s %s" % (f[1], out.getvalue().strip()))
            except Exception:
                traceback.print_exc(file=sys.stdout)
                print("result loss1 %s error" % f[1])
        elif f[0] == "gen":
            try:
                toks = gen(f[2], [int(i) for i in f[3].split(",")], int(f[4]))
                print("result gen %s %s" % (f[1], " ".join(map(str, toks))))
            except Exception:
                traceback.print_exc(file=sys.stdout)
                print("result gen %s error" % f[1])
        else:
            sys.exit("hf_from.py: unknown batch line " + line)
        sys.stdout.flush()


def main():
    cmd, root = sys.argv[1], sys.argv[2]
    if cmd == "loss1":
        loss(root, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    if cmd == "batch":
        batch(root)
        return
    cmds = {"make+loss": ["make", "loss"]}.get(cmd, [cmd])
    for c in cmds:
        if c not in ("make", "loss"):
            sys.exit("hf_from.py: unknown command " + cmd)
    for c in cmds:
        for case, (cls, kw, t) in CASES.items():
            d = "%s/%s" % (root, case)
            if c == "make":
                with contextlib.redirect_stdout(sys.stderr):
                    make(case, d)
                tokens(kw["vocab_size"], 4 * t + 1, d + ".bin")
                open(d + ".seq", "w").write("%d\n" % t)
            else:
                sys.stdout.write(case + " ")
                loss(d, d + ".bin", 1, t)


if __name__ == "__main__":
    main()
