"""The numpy reference of zinf's quantized storage (runtime/hostk/quant.h)
for tests/e2e/quant_codec.sh: bitsandbytes' NF4 (its 16 levels, blocks of
64 scaled by their absmax, x times the f32 reciprocal of absmax, the level
whose interval between midpoints holds it, the even element in the high
nibble) and int8 (rint(x * 127 / absmax)), each block's codes followed by
its absmax as f32.
  quant_codec.py make DIR       writes DIR/x.f32: test values
  quant_codec.py check DIR KIND compares DIR/KIND.q and DIR/KIND.f32 (the C
                                codec's) with the reference, bit for bit"""
import sys

import numpy as np

LEVELS = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                   -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                   0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                   0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float32)
BOUNDS = ((LEVELS[:-1].astype(np.float64) + LEVELS[1:].astype(np.float64)) / 2).astype(np.float32)


def blocks(x):
    pad = (-x.size) % 64
    return np.concatenate([x, np.zeros(pad, np.float32)]).reshape(-1, 64), x.size


def absmax_of(b, n):
    # the short last block's padding is zeros: it does not change the absmax
    return np.abs(b).max(axis=1).astype(np.float32)


def nf4(x):
    b, n = blocks(x)
    am = absmax_of(b, n)
    with np.errstate(divide="ignore"):
        r = np.where(am > 0, np.float32(1) / am, np.float32(0)).astype(np.float32)
    v = (b * r[:, None]).astype(np.float32)
    codes = (v[..., None] > BOUNDS).sum(axis=-1).astype(np.uint8)
    packed = (codes[:, 0::2] << 4) | codes[:, 1::2]
    q = np.concatenate([packed, am.view(np.uint8).reshape(-1, 4)], axis=1).reshape(-1)
    y = (LEVELS[codes] * am[:, None]).astype(np.float32).reshape(-1)[:n]
    return q, y


def int8(x):
    b, n = blocks(x)
    am = absmax_of(b, n)
    with np.errstate(divide="ignore"):
        s = np.where(am > 0, np.float32(127) / am, np.float32(0)).astype(np.float32)
    codes = np.clip(np.rint((b * s[:, None]).astype(np.float32)), -127, 127).astype(np.int8)
    q = np.concatenate([codes.view(np.uint8), am.view(np.uint8).reshape(-1, 4)], axis=1).reshape(-1)
    y = (codes.astype(np.float32) * (am / np.float32(127)).astype(np.float32)[:, None]).astype(np.float32)
    return q, y.reshape(-1)[:n]


def make(d):
    rng = np.random.default_rng(31)
    parts = [rng.standard_normal(64 * 40).astype(np.float32) * np.float32(0.02),
             (rng.standard_normal(64 * 8) * 10.0 ** rng.integers(-6, 3, 64 * 8)).astype(np.float32),
             np.zeros(64, np.float32),                      # a block of zeros
             np.repeat(LEVELS, 4) * np.float32(3.0),        # every level exactly
             np.tile(BOUNDS, 5)[:64] * np.float32(1.0),     # the midpoints themselves (absmax < 1)
             rng.standard_normal(37).astype(np.float32)]    # a short last block
    x = np.concatenate(parts).astype(np.float32)
    x[64 * 41] = 1.0  # a block whose absmax is exactly 1, where midpoints stay midpoints
    x.tofile(f"{d}/x.f32")


def check(d, kind):
    x = np.fromfile(f"{d}/x.f32", np.float32)
    q_ref, y_ref = (nf4 if kind == "nf4" else int8)(x)
    q = np.fromfile(f"{d}/{kind}.q", np.uint8)
    y = np.fromfile(f"{d}/{kind}.f32", np.float32)
    ok = True
    if q.shape != q_ref.shape or not np.array_equal(q, q_ref):
        bad = np.flatnonzero(q != q_ref) if q.shape == q_ref.shape else []
        print(f"FAIL: {kind}: encoded bytes differ from the reference ({q.size} vs {q_ref.size} bytes,"
              f" {len(bad)} differ, first at {bad[:5]})")
        ok = False
    if y.shape != y_ref.shape or not np.array_equal(y.view(np.uint32), y_ref.view(np.uint32)):
        print(f"FAIL: {kind}: decoded values differ from the reference")
        ok = False
    if ok:
        print(f"ok   {kind}: {x.size} values, {q.size} bytes and the decoded values equal numpy's bit for bit")
    return ok


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(0 if check(sys.argv[2], sys.argv[3]) else 1)
