"""hf_long: the Python side of tests/e2e/hf_long.sh (never downloads anything).

    python hf_long.py make DIR T [I]
        DIR/model: a small random LLaMA (grouped kv heads, a vocabulary of 1000, an MLP of width I,
        48 unless given) whose context is T;
        DIR/train.bin: random tokens (hf_from.py's); on stdout transformers' loss of the first row
        zinfrun reads (tokens 0 .. T, one batch of one)
"""
import contextlib
import os
import sys

import torch
import transformers as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_from  # noqa: E402


def main():
    cmd, root, t = sys.argv[1], sys.argv[2], int(sys.argv[3])
    inter = int(sys.argv[4]) if len(sys.argv) > 4 else 48
    if cmd != "make":
        sys.exit("hf_long.py: unknown command " + cmd)
    kw = dict(vocab_size=1000, hidden_size=32, intermediate_size=inter, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=t, rms_norm_eps=1e-5, rope_theta=500000.0)
    hf_from.CASES["llama-long"] = (T.LlamaConfig, kw, t)
    d = root + "/model"
    with contextlib.redirect_stdout(sys.stderr):
        hf_from.make("llama-long", d)
    hf_from.tokens(kw["vocab_size"], 2 * t + 1, root + "/train.bin")
    torch.set_num_threads(2)
    hf_from.loss(d, root + "/train.bin", 1, t)


if __name__ == "__main__":
    main()
