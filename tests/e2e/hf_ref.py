"""What the Hugging Face reference scripts of tests/e2e share: random models
saved with save_pretrained, token files in zinftok's format, the loss
(and gradient norm) transformers computes on a window of such a file, and
the checks of an export (keys, loss, greedy tokens, the trained export's
loss).
Imported by hf_from.py, hf_gemma.py, hf_phi3.py and hf_window.py (which
Python finds beside them: a script's own directory is on sys.path)."""

import contextlib
import json
import os
import struct
import traceback

import torch
import transformers as T

TOKENS_MAGIC = 20240520  # zinftok's header: magic, version, count, vocabulary, then zeros to 256 int32


def make_model(config, seed_name, d, vector_mean=1.0):
    """A model of CONFIG with weights drawn for the test, not the
    initialiser's (matrices N(0, 0.3); vectors, the norms' scales among
    them, N(VECTOR_MEAN, 0.2), or N(0, 0.3) when VECTOR_MEAN is None:
    Gemma's norms scale by 1 + w), seeded by SEED_NAME, saved in D."""
    torch.manual_seed(sum(map(ord, seed_name)))
    m = T.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for _, p in m.named_parameters():
            if p.dim() >= 2 or vector_mean is None:
                p.normal_(0.0, 0.3)
            else:
                p.normal_(vector_mean, 0.2)
    m.save_pretrained(d)
    return m


def write_tokens(v, n, path):
    """N token ids below V (seeded), written as zinftok writes them; returned."""
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, v, (n,), generator=g).tolist()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([TOKENS_MAGIC, 1, n, v] + [0] * 252)))
        f.write(struct.pack("<%dH" % n, *ids))
    return ids


def read_tokens(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<256i", raw[:1024])[2]
    return torch.tensor(struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n]), dtype=torch.long)


def window_loss(m, path, t, grad=False, window=0):
    """The loss of M on tokens [window T, (window + 1) T + 1) of PATH, in
    float64 from the logits (with GRAD, the norm of the gradient instead)."""
    ids = read_tokens(path)
    o = window * t
    x, y = ids[o:o + t].view(1, t), ids[o + 1:o + t + 1].view(1, t)
    m.eval()
    if not grad:
        with torch.no_grad():
            lg = m(input_ids=x).logits.double()
        return torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item()
    # nn.Embedding's padding_idx keeps the pad token's row out of the gradient, a
    # convention of the module rather than the model's derivative: zinf differentiates it
    m.model.embed_tokens.padding_idx = None
    lg = m(input_ids=x).logits
    l = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))
    l.backward()
    return torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters())).item()


def export(argv, load):
    """The export command of hf_gemma.py and hf_phi3.py; ARGV: CASE DIR TOKENS T
    IDS N [NEXT STEP]. Loads DIR with LOAD (a function of a directory that
    returns from_pretrained's model and loading info) and prints "keys CASE
    missing=K unexpected=M [...]", "loss CASE L" on the first T + 1 tokens of
    TOKENS, "gen CASE ..." (generate, greedy, N new tokens after the
    comma-separated prompt IDS) and, with NEXT (the export after STEP - 1
    training steps), "next CASE missing=K unexpected=M LOSS BEFORE": NEXT's
    loss on the window step STEP trains on (B = 1, tokens[(STEP-1)T:STEP T+1])
    and that of DIR's weights on it. One Python for all of them: importing
    torch and transformers takes seconds."""
    case, d, path, t = argv[0], argv[1], argv[2], int(argv[3])
    m, info = load(d)
    print("keys %s missing=%d unexpected=%d %s" % (case, len(info["missing_keys"]), len(info["unexpected_keys"]),
                                                   json.dumps(sorted(info["missing_keys"]) + sorted(info["unexpected_keys"]))))
    print("loss %s %.10f" % (case, window_loss(m, path, t)))
    ids = [int(i) for i in argv[4].split(",")]
    with torch.no_grad():
        out = m.eval().generate(torch.tensor([ids]), max_new_tokens=int(argv[5]), do_sample=False,
                                eos_token_id=None, pad_token_id=0,
                                attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    print("gen %s %s" % (case, " ".join(map(str, out[0, len(ids):].tolist()))))
    if len(argv) > 7:
        step = int(argv[7])
        nm, ninfo = load(argv[6])
        print("next %s missing=%d unexpected=%d %.10f %.10f" % (
            case, len(ninfo["missing_keys"]), len(ninfo["unexpected_keys"]),
            window_loss(nm, path, t, window=step - 1), window_loss(m, path, t, window=step - 1)))


def export_all(path, load):
    """The exports command of hf_gemma.py and hf_phi3.py: export (above) for
    each line "OUT CASE DIR TOKENS T IDS N [NEXT STEP]" of PATH, in one
    Python, its lines written to OUT (created only when it succeeds; else
    the error in OUT.err, and the next line goes on). Exit status 1 when
    one failed."""
    failed = 0
    for line in open(path):
        words = line.split()
        if not words:
            continue
        out = words[0]
        try:
            with open(out + ".tmp", "w") as f, contextlib.redirect_stdout(f):
                export(words[1:], load)
            os.replace(out + ".tmp", out)
        except Exception:
            failed = 1
            with open(out + ".err", "w") as f:
                traceback.print_exc(file=f)
            if os.path.exists(out + ".tmp"):
                os.remove(out + ".tmp")
    return failed
