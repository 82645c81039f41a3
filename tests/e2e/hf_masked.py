"""hf_masked: the Python side of tests/e2e/hf_masked.sh (never downloads anything).

    python hf_masked.py make ROOT ROWS
        for every case: ROOT/CASE (a small random model, hf_from.py's), ROOT/CASE.bin (a version 3
        token file: random ids, a trained-token mask whose rows hold different numbers of trained
        targets, one row none) and ROOT/CASE.seq; then on stdout "CASE LOSS GRAD_NORM": transformers'
        loss with labels = -100 at the untrained tokens over the first ROWS rows zinfrun reads (row k:
        tokens kT .. kT+T), as one batch, and the norm of its gradient

The loss is what transformers computes for labels with -100 (the mean over
the trained targets of the whole batch), so the runs of hf_masked.sh that
split these rows over micro-batches and ranks must give it and its gradient.
"""
import contextlib
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_from  # noqa: E402

CASES = ["gpt2", "llama-gqa", "qwen3"]


def write_masked(path, ids, trained, vocab):
    n = len(ids)
    mask = bytearray((n + 7) // 8)
    for i, t in enumerate(trained):
        if t:
            mask[i // 8] |= 1 << (i % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 3, n, vocab, 0, 0, 2, sum(trained)] + [0] * 248)))
        f.write(struct.pack("<%dH" % n, *ids))
        f.write(bytes(mask))


def main():
    cmd, root, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd != "make":
        sys.exit("hf_masked.py: unknown command " + cmd)
    for case in CASES:
        _, kw, t = hf_from.CASES[case]
        d = "%s/%s" % (root, case)
        with contextlib.redirect_stdout(sys.stderr):
            hf_from.make(case, d)
        v = kw["vocab_size"]
        n = 2 * rows * t + 1
        g = torch.Generator().manual_seed(4321)
        ids = torch.randint(0, v, (n,), generator=g).tolist()
        # row k's targets are tokens kT+1 .. kT+T: trained with a probability
        # that differs per row, and row 1 has none
        trained = [0] * n
        for k in range(2 * rows):
            p = [0.9, 0.0, 0.3, 0.6][k % 4]
            for i in range(k * t + 1, k * t + t + 1):
                trained[i] = 1 if torch.rand(1, generator=g).item() < p else 0
        write_masked(d + ".bin", ids, trained, v)
        open(d + ".seq", "w").write("%d\n" % t)
        x = torch.tensor([ids[k * t:k * t + t + 1] for k in range(rows)])
        lab = torch.tensor([[ids[k * t + i] if trained[k * t + i] else -100 for i in range(t + 1)] for k in range(rows)])
        lab[:, 0] = -100
        m = hf_from.T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        m.eval()
        # zinf's row of T+1 tokens: T inputs, T targets
        logits = m(input_ids=x[:, :t]).logits.double()
        y = lab[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, v), y.reshape(-1), ignore_index=-100)
        # and transformers' own loss for labels -100, on T+1 tokens (its last logit unused)
        hf = m(input_ids=x, labels=lab).loss
        hf.backward()
        gn = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters() if p.grad is not None)).item()
        if abs(hf.item() - loss.item()) > 1e-5 * abs(loss.item()):
            sys.exit("hf_masked.py: %s: transformers' loss %g and the shifted cross-entropy %g differ"
                     % (case, hf.item(), loss.item()))
        print("%s %.10f %.10f" % (case, loss.item(), gn))


if __name__ == "__main__":
    main()
