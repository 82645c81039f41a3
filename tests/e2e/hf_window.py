"""hf_window: the Python side of tests/e2e/hf_window.sh (never downloads anything).

    python hf_window.py make ROOT    for every case: ROOT/CASE (save_pretrained of a small random model
                                     whose sliding window is shorter than its training sequence, or
                                     with yarn rope scaling), ROOT/CASE.bin (a token file, llm.c
                                     layout), ROOT/CASE.seq, and on stdout "CASE LOSS WITHOUT": the
                                     mean cross-entropy transformers computes on the first [1, T]
                                     batch (eager attention, which applies the window), and the same
                                     weights' loss without the window or the rope scaling (so that a
                                     test that ignored them would fail)
    python hf_window.py gen ROOT CASE IDS N   transformers' greedy tokens (generate, do_sample=False)

Weights are drawn wider than the models' own initialisation (std 0.3, norm
gains around 1), as tests/e2e/hf_from.py does, so that the window moves the
loss by far more than the comparison's 1e-5.
"""
import contextlib
import sys

import torch
import transformers as T

import hf_ref

SMALL = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, rope_theta=10000.0)
# name: (config class, keyword arguments, training sequence)
CASES = {
    # every layer slides (MistralModel ignores layer_types)
    "mistral-w5": (T.MistralConfig, dict(SMALL, vocab_size=83, num_hidden_layers=2, sliding_window=5), 24),
    # Qwen2: layers from max_window_layers on slide (layer 0 full, 1 and 2 a window of 6)
    "qwen2-mwl": (T.Qwen2Config, dict(SMALL, vocab_size=79, num_hidden_layers=3, use_sliding_window=True,
                                      sliding_window=6, max_window_layers=1), 20),
    # layer_types, alternating (a period of 2 over 4 layers), GQA 4:1
    "qwen2-types": (T.Qwen2Config, dict(SMALL, vocab_size=71, num_hidden_layers=4, num_key_value_heads=1,
                                        use_sliding_window=True, sliding_window=4,
                                        layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                                     "full_attention"]), 16),
    # Qwen3, layer_types with no period (full, sliding, sliding)
    "qwen3-types": (T.Qwen3Config, dict(SMALL, vocab_size=67, num_hidden_layers=3, head_dim=8,
                                        use_sliding_window=True, sliding_window=3,
                                        layer_types=["full_attention", "sliding_attention",
                                                     "sliding_attention"]), 18),
    # Phi-3 (fused qkv_proj, gate_up_proj): every layer a window of 6
    "phi3-w6": (T.Phi3Config, dict(SMALL, vocab_size=57, num_hidden_layers=2, sliding_window=6,
                                   original_max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                                   eos_token_id=2), 20),
    # yarn (Qwen2.5's 128K form: type, factor, original context): attention factor 1 + 0.1 ln 4
    "qwen2-yarn": (T.Qwen2Config, dict(SMALL, vocab_size=61, num_hidden_layers=2, head_dim=16, num_attention_heads=2,
                                       num_key_value_heads=1,
                                       rope_scaling={"type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 16}), 32),
    # yarn as DeepSeek writes it: its own betas, mscale / mscale_all_dim for the attention factor
    "llama-yarn-mscale": (T.LlamaConfig, dict(SMALL, vocab_size=59, num_hidden_layers=2, head_dim=16,
                                              num_attention_heads=2, num_key_value_heads=1,
                                              rope_scaling={"rope_type": "yarn", "factor": 8.0,
                                                            "original_max_position_embeddings": 8, "beta_fast": 16,
                                                            "beta_slow": 2, "mscale": 0.707,
                                                            "mscale_all_dim": 1.0}), 28),
    # yarn with an explicit attention_factor, and a window
    "mistral-yarn-w7": (T.MistralConfig, dict(SMALL, vocab_size=53, num_hidden_layers=2, sliding_window=7,
                                              rope_scaling={"rope_type": "yarn", "factor": 2.0,
                                                            "original_max_position_embeddings": 16,
                                                            "attention_factor": 1.25}), 24),
}


def make(case, d):
    cls, kw, _ = CASES[case]
    hf_ref.make_model(cls(**kw), case, d)


tokens = hf_ref.write_tokens


def load(d, full=False):
    kw = dict(dtype=torch.float32, attn_implementation="eager")
    if full:  # the same weights, no window anywhere and no rope scaling
        cfg = T.AutoConfig.from_pretrained(d)
        cfg.sliding_window = None
        cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": cfg.rope_parameters["rope_theta"]}
        kw["config"] = cfg
    return T.AutoModelForCausalLM.from_pretrained(d, **kw).eval()


def loss(m, ids, t):
    x, y = torch.tensor(ids[:t]).view(1, t), torch.tensor(ids[1:t + 1]).view(1, t)
    with torch.no_grad():
        lg = m(input_ids=x).logits.double()
    return torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item()


def main():
    cmd, root = sys.argv[1], sys.argv[2]
    if cmd == "make":
        for case, (_, kw, t) in CASES.items():
            d = "%s/%s" % (root, case)
            with contextlib.redirect_stdout(sys.stderr):
                make(case, d)
            ids = tokens(kw["vocab_size"], 4 * t + 1, d + ".bin")
            open(d + ".seq", "w").write("%d\n" % t)
            print("%s %.10f %.10f" % (case, loss(load(d), ids, t), loss(load(d, full=True), ids, t)))
    elif cmd == "gen":
        m = load("%s/%s" % (root, sys.argv[3]))
        ids = [int(x) for x in sys.argv[4].split(",")]
        out = m.generate(torch.tensor([ids]), max_new_tokens=int(sys.argv[5]), do_sample=False, eos_token_id=None,
                         pad_token_id=0)
        print(" ".join(map(str, out[0, len(ids):].tolist())))
    else:
        sys.exit("hf_window.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
