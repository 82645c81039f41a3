"""hf_check: a plan's Hugging Face mapping against a Hugging Face checkpoint.

    python hf_check.py PLAN_HF_LISTING MODEL_DIR [CONFIG_COPY]

PLAN_HF_LISTING is `zinfdump PLAN --hf` output; MODEL_DIR holds the
model.safetensors (or shards) that save_pretrained wrote. Checks that
every tensor of the checkpoint is mapped, every piece names one of them,
each piece's columns lie inside the tensor (transposed when the piece says
so) and its other axes match the parameter's, and that each tensor's
columns are covered exactly once. With CONFIG_COPY (zinfdump --hf-config
output), checks that it is config.json as is. Exit 0 when all hold;
prints what does not.
"""
import json
import os
import sys

from safetensors import safe_open


def checkpoint_shapes(d):
    files = []
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    shapes = {}
    for f in files:
        with safe_open(os.path.join(d, f), "pt") as st:
            for k in st.keys():
                shapes[k] = list(st.get_slice(k).get_shape())
    return shapes


def main():
    listing, d = sys.argv[1], sys.argv[2]
    shapes = checkpoint_shapes(d)
    bad = []
    covered = {}
    pieces = 0
    for line in open(listing):
        f = line.split()
        if not f or f[0] != "piece":
            continue
        pieces += 1
        # piece PARAM [d0,d1] <- HF_NAME T|- FIRST COUNT
        param, pshape, name, tr, first, count = f[1], json.loads(f[2]), f[4], f[5] == "T", int(f[6]), int(f[7])
        if name not in shapes:
            bad.append("%s: piece names %s, which the checkpoint does not have" % (param, name))
            continue
        s = list(shapes[name])
        if tr:
            if len(s) != 2:
                bad.append("%s: %s %s transposed, but it is not 2-D" % (param, name, s))
                continue
            s = [s[1], s[0]]
        if s[:-1] != pshape[:-1]:
            bad.append("%s %s: %s %s (as read) has other leading axes" % (param, pshape, name, s))
        if first < 0 or first + count > s[-1]:
            bad.append("%s: columns %d+%d of %s, which has %d" % (param, first, count, name, s[-1]))
        covered.setdefault(name, []).append((first, count, s[-1]))
    for name, s in shapes.items():
        if name not in covered:
            bad.append("%s %s: no parameter maps to it" % (name, s))
            continue
        spans = sorted(covered[name])
        at = 0
        for first, count, width in spans:
            if first != at:
                bad.append("%s: columns from %d not covered once (the next piece starts at %d)" % (name, at, first))
            at = first + count
        if at != spans[-1][2]:
            bad.append("%s %s: the pieces cover %d of its %d columns" % (name, s, at, spans[-1][2]))
    if len(sys.argv) > 3:
        got = open(sys.argv[3]).read()
        want = open(os.path.join(d, "config.json")).read()
        if not want.endswith("\n"):
            want += "\n"
        if got != want:
            bad.append("the plan's config.json differs from %s/config.json" % d)
    for b in bad:
        print("hf_check: " + b)
    print("hf_check: %s: %d pieces, %d checkpoint tensors, %s" % (d, pieces, len(shapes), "ok" if not bad else "%d problems" % len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
