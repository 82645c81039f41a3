"""The PyTorch peer of bench_adam: one torch.optim.AdamW step over a single
f32 parameter of n elements with an f32 gradient (the layout zinf's Adam
runs as "f32 grad, no copy"), lr 1e-4, betas (0.9, 0.95), eps 1e-8,
weight decay 0.1, on `threads` threads, for each implementation asked for.
Prints one line per implementation, for bench_adam to parse:

    IMPL SECONDS          best step time after one warm-up step
    IMPL skipped: WHY     when this torch cannot run it

    python torch_adam.py --n 67108864 --threads 2 --reps 3 --impl fused,foreach
"""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=1 << 26)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--reps", type=int, default=3)
p.add_argument("--impl", default="fused,foreach")
a = p.parse_args()
torch.set_num_threads(a.threads)

for impl in a.impl.split(","):
    try:
        w = torch.zeros(a.n, requires_grad=True)
        w.grad = torch.full((a.n,), 0.01)
        kw = {"fused": True} if impl == "fused" else {"foreach": True} if impl == "foreach" else {"foreach": False}
        o = torch.optim.AdamW([w], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kw)
        o.step()  # warm-up: allocates exp_avg and exp_avg_sq
        best = float("inf")
        for _ in range(a.reps):
            t0 = time.perf_counter()
            o.step()
            best = min(best, time.perf_counter() - t0)
        print(f"{impl} {best:.6f}", flush=True)
    except Exception as e:  # an implementation this torch lacks on CPU
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"{impl} skipped: {msg}", flush=True)
    finally:
        o = w = None
