"""What the Hugging Face reference scripts of tests/e2e share: random models
saved with save_pretrained, token files in zinftok's format, and the loss
(and gradient norm) transformers computes on a window of such a file.
Imported by hf_from.py, hf_gemma.py, hf_phi3.py and hf_window.py (which
Python finds beside them: a script's own directory is on sys.path)."""

import struct

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
