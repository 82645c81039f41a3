"""The PyTorch peer of tests/bench/bench_moe.sh: transformers'
MixtralForCausalLM of the given shape, trained in f32 on CPU with the step
zinfrun runs: forward, cross-entropy, backward, AdamW (torch's default
implementation for CPU tensors), no clipping, no load-balancing loss.
Prints the median milliseconds per step after the warm-up steps.

    python torch_moe.py --V 1024 --T 128 --D 256 --H 4 --KV 2 --E 8 --K 2 --F 512 --L 2 --B 4 --threads 1
"""
import argparse
import statistics
import time

import torch
from transformers import MixtralConfig, MixtralForCausalLM

p = argparse.ArgumentParser()
for k, v in dict(V=1024, T=128, D=256, H=4, KV=2, E=8, K=2, F=512, L=2, B=4, steps=10, warmup=2, threads=1).items():
    p.add_argument("--" + k, type=int, default=v)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
c = MixtralConfig(vocab_size=a.V, hidden_size=a.D, intermediate_size=a.F, num_hidden_layers=a.L,
                  num_attention_heads=a.H, num_key_value_heads=a.KV, num_local_experts=a.E, num_experts_per_tok=a.K,
                  max_position_embeddings=a.T, tie_word_embeddings=False, output_router_logits=False)
m = MixtralForCausalLM(c).float().train()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
x = torch.randint(0, a.V, (a.B, a.T))
y = torch.randint(0, a.V, (a.B, a.T))
times = []
for s in range(a.warmup + a.steps):
    t0 = time.perf_counter()
    lg = m(x).logits
    loss = torch.nn.functional.cross_entropy(lg.reshape(-1, a.V), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if s >= a.warmup:
        times.append((time.perf_counter() - t0) * 1e3)
ms = statistics.median(times)
print("torch %.3f ms/step, %.0f tokens/s" % (ms, a.B * a.T / ms * 1e3))
