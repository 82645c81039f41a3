"""The PyTorch peer of tests/bench/bench_vs_torch.sh: the GPT-2 of
stdlib/nn.zl (pre-LN blocks, fused qkv with bias, causal attention, GELU tanh
MLP, final layernorm, tied output head), trained in f32 on CPU with the step
zinfrun runs: forward, cross-entropy, backward, global-norm clipping to 1.0,
AdamW (torch's default implementation for CPU tensors). Prints the median
milliseconds per step after the warm-up steps, and tokens/s.

    python torch_gpt2.py --V 256 --T 64 --D 128 --H 4 --L 4 --B 4 --threads 1
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

p = argparse.ArgumentParser()
for k, v in dict(V=256, T=64, D=128, H=4, L=4, B=4, steps=20, warmup=3, threads=1).items():
    p.add_argument("--" + k, type=int, default=v)
p.add_argument("--ckpt", choices=["none", "layer"], default="none",
               help="activation checkpointing per block (torch.utils.checkpoint), as zinf's checkpoint = \"layer\"")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
V, T, D, H, L, B = a.V, a.T, a.D, a.H, a.L, a.B


def P(*s, std=0.02):
    return torch.nn.Parameter(torch.randn(*s) * std)


def Z(*s):
    return torch.nn.Parameter(torch.zeros(*s))


def O(*s):
    return torch.nn.Parameter(torch.ones(*s))


wte, wpe = P(V, D), P(T, D, std=0.01)
blocks = [dict(g1=O(D), b1=Z(D), wqkv=P(D, 3 * D), bqkv=Z(3 * D), wo=P(D, D), bo=Z(D),
               g2=O(D), b2=Z(D), w1=P(D, 4 * D), c1=Z(4 * D), w2=P(4 * D, D), c2=Z(D)) for _ in range(L)]
gf, bf = O(D), Z(D)
params = [wte, wpe, gf, bf] + [t for b in blocks for t in b.values()]


def block(x, p):
    h = F.layer_norm(x, (D,), p["g1"], p["b1"], 1e-5)
    q, k, v = (h @ p["wqkv"] + p["bqkv"]).split(D, dim=-1)
    q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
    x = x + y @ p["wo"] + p["bo"]
    h = F.layer_norm(x, (D,), p["g2"], p["b2"], 1e-5)
    return x + F.gelu(h @ p["w1"] + p["c1"], approximate="tanh") @ p["w2"] + p["c2"]


def loss_fn(tok, tgt):
    x = wte[tok] + wpe[torch.arange(T)]
    for b in blocks:
        x = checkpoint(block, x, b, use_reentrant=False) if a.ckpt == "layer" else block(x, b)
    x = F.layer_norm(x, (D,), gf, bf, 1e-5)
    return F.cross_entropy((x @ wte.t()).view(-1, V), tgt.view(-1))


opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
times = []
for s in range(a.warmup + a.steps):
    tok = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = loss_fn(tok, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    t1 = time.perf_counter()
    if s >= a.warmup:
        times.append(t1 - t0)
med = statistics.median(times)
print("torch %.3f ms/step %.1f tok/s (median of %d steps) loss %.4f" % (med * 1e3, B * T / med, len(times), loss.item()))
