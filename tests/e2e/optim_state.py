"""A numpy reference of zinf's AdamW step with compact moments
(docs/training.md, "Adam's moments"), for tests/e2e/optim_state.sh.

  optim_state.py map                       bitsandbytes' dynamic maps, printed as a check
  optim_state.py steps ADAM_STATE DIR N SEED   the maps (as map), then for each storage (fp32, bf16,
          8bit) and path (scalar, auto): inputs of N elements made in DIR/step-STATE-ISA (as make,
          SEED), 3 steps of ADAM_STATE (tests/tools/adam_state, 2 threads), each checked (as check)
          after a new gradient (as grad, SEED + STEP); "result STATE ISA ok", or "result STATE ISA
          step T" at the first step that differs ("inputs" where they could not be made)
  optim_state.py make DIR STATE N SEED     the inputs of a step in DIR
  optim_state.py grad DIR SEED             a new gradient in DIR (the state stays)
  optim_state.py check DIR STATE STEP LR B1 B2 EPS WD SCALE   DIR/ref (the inputs
          copied before the step) stepped here, compared with DIR bit for bit
  optim_state.py losses A B TOL            two --losses files' last losses within TOL relative

The step is the one adam.h states, in f32 with fused multiply-adds:
  g = grad * scale; m = fma(b1, m0, (1-b1) g); v = fma(b2, v0, ((1-b2) g) g)
  w = fma(-lr/bc1, m / fma(sqrt(v), 1/sqrt(bc2), eps), w0 * (1 - lr wd))
with bf16 moments widened exactly and stored rounded to nearest even, or
8-bit moments: blocks of 2048 decoded as map[code] * absmax, stepped as f32,
encoded with the block's new absmax, each value / absmax taking the code of
the nearest map value (midpoints in double rounded to f32; a tie takes the
lower code). bitsandbytes' maps are built here with torch, as its
functional.create_dynamic_map builds them."""
import functools
import os
import shutil
import subprocess
import sys

import numpy as np

BLOCK = 2048


@functools.lru_cache(maxsize=None)
def dynamic_map(signed):
    """bitsandbytes.functional.create_dynamic_map(signed, 7, 8), in f32."""
    import torch

    data = []
    max_exponent_bits, total_bits = 7, 8
    non_sign_bits = total_bits - 1
    for i in range(max_exponent_bits):
        items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                    else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, items, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 256
    data.sort()
    return np.array(data, dtype=np.float32)


def fma32(a, b, c):
    """f32 fma, correctly rounded: the product is exact in f64, the sum is
    rounded to odd there (TwoSum), then once to f32."""
    a, b, c = (np.asarray(x, dtype=np.float32).astype(np.float64) for x in (a, b, c))
    p = a * b
    s = p + c
    bb = s - p
    e = (p - (s - bb)) + (c - bb)
    odd = (s.view(np.uint64) & 1) == 1
    up = np.nextafter(s, np.where(e > 0, np.inf, -np.inf))
    r = np.where((e == 0) | odd, s, up)
    return r.astype(np.float32)


def bf16_round(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_widen(h):
    return (h.astype(np.uint32) << 16).view(np.float32)


def q8_decode(raw, n, signed, mp):
    nb = (n + BLOCK - 1) // BLOCK
    blocks = raw.reshape(nb, BLOCK + 4)
    codes = blocks[:, :BLOCK]
    absmax = blocks[:, BLOCK:].copy().view(np.float32).reshape(nb, 1)
    return (mp[codes] * absmax).astype(np.float32).reshape(-1)[:n]


def q8_encode(x, signed, mp):
    n = x.size
    nb = (n + BLOCK - 1) // BLOCK
    zero = 127 if signed else 0
    bounds = ((mp[:-1].astype(np.float64) + mp[1:].astype(np.float64)) / 2).astype(np.float32)
    out = np.zeros((nb, BLOCK + 4), dtype=np.uint8)
    for b in range(nb):
        blk = x[b * BLOCK:(b + 1) * BLOCK]
        absmax = np.float32(np.max(np.abs(blk)))
        codes = np.full(BLOCK, zero, dtype=np.uint8)
        if absmax > 0:
            codes[:blk.size] = np.searchsorted(bounds, (blk / absmax).astype(np.float32), side="left").astype(np.uint8)
        out[b, :BLOCK] = codes
        out[b, BLOCK:] = np.array([absmax], dtype=np.float32).view(np.uint8)
    return out.reshape(-1)


def state_bytes(state, n):
    if state == "fp32":
        return 4 * n
    if state == "bf16":
        return 2 * n
    return (n + BLOCK - 1) // BLOCK * (BLOCK + 4)


def load_moment(path, state, n, signed, mp):
    raw = np.fromfile(path, dtype=np.uint8)
    assert raw.size == state_bytes(state, n), (path, raw.size)
    if state == "fp32":
        return raw.view(np.float32).copy()
    if state == "bf16":
        return bf16_widen(raw.view(np.uint16))
    return q8_decode(raw, n, signed, mp)


def store_moment(x, state, signed, mp):
    if state == "fp32":
        return x.astype(np.float32).view(np.uint8)
    if state == "bf16":
        return bf16_round(x).view(np.uint8)
    return q8_encode(x, signed, mp)


def step(d, state, t, lr, b1, b2, eps, wd, scale):
    """The reference step on the files of d; returns w, m bytes, v bytes, p."""
    f = np.float32
    w0 = np.fromfile(os.path.join(d, "w.f32"), dtype=np.float32)
    g = np.fromfile(os.path.join(d, "g.f32"), dtype=np.float32)
    n = w0.size
    ms, mu = dynamic_map(True), dynamic_map(False)
    m0 = load_moment(os.path.join(d, "m.bin"), state, n, True, ms)
    v0 = load_moment(os.path.join(d, "v.bin"), state, n, False, mu)
    lr, b1, b2, eps, wd, scale = (f(x) for x in (lr, b1, b2, eps, wd, scale))
    bc1 = 1.0 - float(b1) ** t
    bc2 = 1.0 - float(b2) ** t
    step_size = f(float(lr) / bc1)
    ib = f(1.0 / np.sqrt(bc2))
    decay = f(1.0 - float(lr) * float(wd))
    omb1, omb2 = f(f(1) - b1), f(f(1) - b2)
    g = (g * scale).astype(np.float32)
    m = fma32(b1, m0, (omb1 * g).astype(np.float32))
    v = fma32(b2, v0, ((omb2 * g).astype(np.float32) * g).astype(np.float32))
    den = fma32(np.sqrt(v), ib, eps)
    w = fma32(-step_size, (m / den).astype(np.float32), (w0 * decay).astype(np.float32))
    return w, store_moment(m, state, True, ms), store_moment(v, state, False, mu), bf16_round(w)


def make(d, state, n, seed):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    (rng.standard_normal(n) * 0.02).astype(np.float32).tofile(os.path.join(d, "w.f32"))
    np.zeros(state_bytes(state, n), dtype=np.uint8).tofile(os.path.join(d, "m.bin"))
    np.zeros(state_bytes(state, n), dtype=np.uint8).tofile(os.path.join(d, "v.bin"))
    grad(d, seed)


def grad(d, seed):
    """Gradients over nine decades, block by block, a zero block, and a few
    values far above their block's others."""
    n = np.fromfile(os.path.join(d, "w.f32"), dtype=np.float32).size
    rng = np.random.default_rng(seed + 1000)
    g = rng.standard_normal(n)
    nb = (n + BLOCK - 1) // BLOCK
    for b in range(nb):
        g[b * BLOCK:(b + 1) * BLOCK] *= 10.0 ** rng.uniform(-7, 2)
    if nb > 2:
        g[BLOCK:2 * BLOCK] = 0
    g[rng.integers(0, n, 8)] *= 1000
    g.astype(np.float32).tofile(os.path.join(d, "g.f32"))
    ref = os.path.join(d, "ref")
    shutil.rmtree(ref, ignore_errors=True)
    os.makedirs(ref)
    for name in ("w.f32", "g.f32", "m.bin", "v.bin"):
        shutil.copy(os.path.join(d, name), ref)


def check(d, state, t, lr, b1, b2, eps, wd, scale):
    w, m, v, p = step(os.path.join(d, "ref"), state, int(t), float(lr), float(b1), float(b2), float(eps), float(wd), float(scale))
    got = {
        "w": np.fromfile(os.path.join(d, "w.f32"), dtype=np.float32).view(np.uint32),
        "m": np.fromfile(os.path.join(d, "m.bin"), dtype=np.uint8),
        "v": np.fromfile(os.path.join(d, "v.bin"), dtype=np.uint8),
        "p": np.fromfile(os.path.join(d, "p.bf16"), dtype=np.uint16),
    }
    want = {"w": w.view(np.uint32), "m": m, "v": v, "p": p}
    bad = 0
    for k in ("w", "m", "v", "p"):
        if got[k].shape != want[k].shape:
            print("    %s: %s bytes, want %s" % (k, got[k].shape, want[k].shape))
            bad += 1
            continue
        diff = int(np.count_nonzero(got[k] != want[k]))
        if diff:
            i = int(np.flatnonzero(got[k] != want[k])[0])
            print("    %s: %d of %d differ (first at %d: %r, reference %r)" % (k, diff, got[k].size, i, got[k][i], want[k][i]))
            bad += 1
    return bad


def print_maps():
    for signed in (True, False):
        mp = dynamic_map(signed)
        print("%s map: %d values, %g .. %g, 0 at code %d" % ("signed" if signed else "unsigned", mp.size, mp[0], mp[-1],
                                                               int(np.flatnonzero(mp == 0)[0])))


# the step's hyperparameters, as adam_state and check take them: LR B1 B2 EPS WD SCALE
HYPER = ("1e-3", "0.9", "0.999", "1e-8", "0.1", "0.5")


def steps(tool, root, n, seed):
    """What the commands make, grad and check do, for every storage and path,
    in one process (importing torch takes seconds): 3 steps of TOOL each."""
    print_maps()
    sys.stdout.flush()
    for state in ("fp32", "bf16", "8bit"):
        for isa in ("scalar", "auto"):
            d = os.path.join(root, "step-%s-%s" % (state, isa))
            try:
                make(d, state, n, seed)
            except OSError as e:
                print("making the inputs: %s" % e)
                print("result %s %s inputs" % (state, isa))
                continue
            verdict = "ok"
            for t in (1, 2, 3):
                if t > 1:
                    grad(d, seed + t)
                sys.stdout.flush()
                rc = subprocess.run([tool, state, isa, "2", str(t)] + list(HYPER) + [d]).returncode
                if rc != 0 or check(d, state, t, *HYPER):
                    verdict = "step %d" % t
                    break
            print("result %s %s %s" % (state, isa, verdict))
            sys.stdout.flush()
    return 0


def main():
    cmd = sys.argv[1]
    if cmd == "map":
        print_maps()
        return 0
    if cmd == "steps":
        return steps(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    if cmd == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    if cmd == "grad":
        grad(sys.argv[2], int(sys.argv[3]))
        return 0
    if cmd == "check":
        return 1 if check(*sys.argv[2:12]) else 0
    if cmd == "losses":
        a = [l.split() for l in open(sys.argv[2]) if l.startswith("step ")]
        b = [l.split() for l in open(sys.argv[3]) if l.startswith("step ")]
        la, lb = float(a[-1][3]), float(b[-1][3])
        rel = abs(la - lb) / abs(la)
        print("    step %s: loss %.6f against %.6f (relative %.4f, bound %s)" % (a[-1][1], lb, la, rel, sys.argv[4]))
        return 0 if a[-1][1] == b[-1][1] and rel <= float(sys.argv[4]) else 1
    print("unknown command " + cmd, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
