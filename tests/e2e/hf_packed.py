"""hf_packed: the Python side of tests/e2e/hf_packed.sh (never downloads anything).

    python hf_packed.py make ROOT       for every case: ROOT/CASE (a small random model, hf_from.py's),
                                        ROOT/CASE.jsonl (pre-tokenized samples of random lengths, some
                                        labels -100), ROOT/CASE-eos.jsonl (the same, each ended by the
                                        EOS id, the vocabulary's last) and ROOT/CASE.seq (T)
    python hf_packed.py vocab ROOT      for every case: ROOT/CASE.bin's, CASE-eos.bin's and CASE-va.bin's header
                                        records the model's vocabulary (zinftok without a tokenizer
                                        records 256); "CASE VOCAB" on stdout
    python hf_packed.py evalref ROOT NAME ROWS   for every case: "CASE LOSS" of transformers on the samples of
                                        the first ROWS rows of ROOT/CASE-NAME.bin (another packed file) one
                                        by one
    python hf_packed.py eosref ROOT ROWS   for every case: ROOT/CASE-eos.bin (zinftok of CASE-eos.jsonl,
                                        the samples each ended by EOS, not packed) split into documents
                                        at EOS; "CASE LOSS GRAD_NORM" of transformers on the first ROWS
                                        documents one by one (what zinfrun --eos reads: a document a
                                        row, padded)
    python hf_packed.py ref ROOT ROWS   for every case: reads ROOT/CASE.bin, the packed file zinftok
                                        --pack made of CASE.jsonl, with a reader of its own; checks
                                        that its rows hold every sample once, whole, with its labels
                                        (and the first token of each untrained); then on stdout
                                        "CASE LOSS GRAD_NORM": transformers run on the samples of the
                                        first ROWS rows one by one (each alone, a batch of one), the
                                        loss the mean over their trained targets, and its gradient's
                                        norm

So the packed rows of zinfrun (each sample attending only to itself,
positions from its start) must give the loss and gradient of the samples
run one by one.
"""
import contextlib
import json
import os
import random
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_from  # noqa: E402

CASES = ["gpt2", "llama-gqa"]


def make(root):
    for case in CASES:
        _, kw, t = hf_from.CASES[case]
        d = "%s/%s" % (root, case)
        with contextlib.redirect_stdout(sys.stderr):
            hf_from.make(case, d)
        v = kw["vocab_size"]
        r = random.Random(77)
        with open(d + ".jsonl", "w") as f, open(d + "-eos.jsonl", "w") as g:
            for _ in range(40):
                n = r.randint(2, t // 2)
                ids = [r.randrange(v - 1) for _ in range(n)]
                lab = [i if r.random() < 0.7 else -100 for i in ids]
                f.write(json.dumps({"input_ids": ids, "labels": lab}) + "\n")
                # the same sample ended by EOS (the last id, in no sample), which trains
                g.write(json.dumps({"input_ids": ids + [v - 1], "labels": lab + [v - 1]}) + "\n")
        open(d + ".seq", "w").write("%d\n" % t)


def read_packed(path):
    b = open(path, "rb").read()
    h = struct.unpack_from("<256i", b, 0)
    assert h[0] == 20240520 and h[1] == 4, "not a packed token file: version %d" % h[1]
    n, width, T, R, S = h[2], h[6], h[8], h[9], h[10]
    assert n == R * (T + 1)
    off = 1024
    ids = list(struct.unpack_from("<%d%s" % (n, "H" if width == 2 else "I"), b, off))
    off += width * n
    mask = b[off:off + (n + 7) // 8]
    off += (n + 7) // 8
    trained = [(mask[i // 8] >> (i % 8)) & 1 for i in range(n)]
    first = struct.unpack_from("<%di" % (R + 1), b, off)
    starts = struct.unpack_from("<%di" % S, b, off + 4 * (R + 1))
    assert off + 4 * (R + 1 + S) == len(b)
    rows = []
    for i in range(R):
        s = list(starts[first[i]:first[i + 1]])
        rows.append([(a, e) for a, e in zip(s, s[1:] + [T + 1])])
    return T, ids, trained, rows


def one_by_one(m, docs, total, grad=True):
    """transformers on each (ids, trained) alone: the loss summed as the mean over total trained targets"""
    loss = 0.0
    for ids, trained in docs:
        x = torch.tensor([ids])
        lab = torch.tensor([[i if tr else -100 for i, tr in zip(ids, trained)]])
        c = int((lab[0, 1:] != -100).sum())
        if c == 0:
            continue
        one = m(input_ids=x, labels=lab).loss * (c / total)
        if grad:
            one.backward()
        loss += one.item()
    if not grad:
        return loss, None
    gn = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters() if p.grad is not None)).item()
    return loss, gn


def eosref(root, nrows):
    """--eos: ROOT/CASE-eos.bin (a version 3 file of the samples, each ended by EOS) read as documents, one
    padded row each: transformers on the first nrows documents one by one"""
    for case in CASES:
        d = "%s/%s" % (root, case)
        eos = hf_from.CASES[case][1]["vocab_size"] - 1
        b = open(d + "-eos.bin", "rb").read()
        h = struct.unpack_from("<256i", b, 0)
        n = h[2]
        ids = list(struct.unpack_from("<%dH" % n, b, 1024))
        mask = b[1024 + 2 * n:]
        trained = [(mask[i // 8] >> (i % 8)) & 1 for i in range(n)]
        docs, s = [], 0
        for i, x in enumerate(ids):
            if x == eos:
                docs.append((ids[s:i + 1], trained[s:i + 1]))
                s = i + 1
        docs = docs[:nrows]
        total = sum(sum(tr[1:]) for _, tr in docs)
        m = hf_from.T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        m.eval()
        loss, gn = one_by_one(m, docs, total)
        print("%s %.10f %.10f" % (case, loss, gn))


def ref(root, nrows):
    for case in CASES:
        d = "%s/%s" % (root, case)
        T, ids, trained, rows = read_packed(d + ".bin")
        samples = [json.loads(line) for line in open(d + ".jsonl")]
        unused = list(range(len(samples)))
        for i, row in enumerate(rows):
            base = i * (T + 1)
            for a, e in row:
                seg = ids[base + a:base + e]
                k = next((k for k in unused if seg[:len(samples[k]["input_ids"])] == samples[k]["input_ids"]
                          and (e < T + 1 and len(seg) == len(samples[k]["input_ids"]) or e == T + 1)), None)
                if k is None:
                    sys.exit("hf_packed.py: %s: row %d's sample at %d..%d is no sample of the input" % (case, i, a, e))
                unused.remove(k)
                lab = samples[k]["labels"]
                for j in range(e - a):
                    want = 1 if j < len(lab) and j > 0 and lab[j] != -100 else 0
                    if trained[base + a + j] != want:
                        sys.exit("hf_packed.py: %s: row %d token %d trained %d, its label says %d"
                                 % (case, i, a + j, trained[base + a + j], want))
        if unused:
            sys.exit("hf_packed.py: %s: samples %s are in no row" % (case, unused))
        m = hf_from.T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        m.eval()
        loss, gn = one_by_one(m, row_samples(T, ids, trained, rows, nrows), row_trained(T, trained, nrows))
        print("%s %.10f %.10f" % (case, loss, gn))


def row_samples(T, ids, trained, rows, nrows):
    """the samples of the first nrows rows: (ids, trained) each"""
    out = []
    for i in range(nrows):
        base = i * (T + 1)
        out += [(ids[base + a:base + e], trained[base + a:base + e]) for a, e in rows[i]]
    return out


def row_trained(T, trained, nrows):
    return sum(trained[i * (T + 1) + 1:(i + 1) * (T + 1)].count(1) for i in range(nrows))


def evalref(root, name, nrows):
    """ROOT/CASE-NAME.bin, another packed file: the loss of its first nrows rows' samples one by one"""
    for case in CASES:
        d = "%s/%s" % (root, case)
        T, ids, trained, rows = read_packed("%s-%s.bin" % (d, name))
        m = hf_from.T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        m.eval()
        with torch.no_grad():
            loss, _ = one_by_one(m, row_samples(T, ids, trained, rows, nrows), row_trained(T, trained, nrows), grad=False)
        print("%s %.10f" % (case, loss))


def vocab(root):
    for case in CASES:
        for path in ("%s/%s.bin" % (root, case), "%s/%s-eos.bin" % (root, case), "%s/%s-va.bin" % (root, case)):
            with open(path, "r+b") as f:
                f.seek(12)
                f.write(struct.pack("<i", hf_from.CASES[case][1]["vocab_size"]))
        print(case, hf_from.CASES[case][1]["vocab_size"])


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "vocab":
        vocab(sys.argv[2])
    elif sys.argv[1] == "ref":
        ref(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "evalref":
        evalref(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "eosref":
        eosref(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("hf_packed.py: unknown command " + sys.argv[1])


if __name__ == "__main__":
    main()
