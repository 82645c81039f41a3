"""Helper of tests/e2e/no_decay.sh: the random GPT-2 of hf_weights.py (biases
and norm weights away from 0 and 1) and a token file; then the closed form
of AdamW's decoupled decay. One step from the same weights on the same batch
gives every parameter the same gradient, Adam moment and update u in both
runs, so that a parameter decayed in one run and not in the other differs by
exactly the decay term: w_decayed - w_plain = (w0 (1 - lr wd) - u) - (w0 - u)
= -lr wd w0; one treated alike in both is bit-identical.

  no_decay.py make W                 model in W/hf, tokens in W/tok.bin
  no_decay.py check W LR WD ALL DEF  ALL: the export of the run with no_decay = [] (every parameter
                                     decayed), DEF: of the run with zinfc --from-hf's default; the
                                     parameters DEF leaves undecayed must be those the Hugging Face
                                     Trainer does (Trainer.get_decay_parameter_names), each
                                     ALL - DEF = -lr wd w0, the rest bit-identical
"""
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_weights  # noqa: E402


def check(w, lr, wd, all_dir, def_dir):
    from transformers import AutoModelForCausalLM, Trainer
    m = AutoModelForCausalLM.from_pretrained(os.path.join(w, "hf"), dtype=torch.float32)
    decay = set(Trainer.get_decay_parameter_names(None, m))
    w0 = {n: p.detach() for n, p in m.named_parameters()}
    a, d = load_file(os.path.join(all_dir, "model.safetensors")), load_file(os.path.join(def_dir, "model.safetensors"))
    fail, nplain, ndecay, worst = 0, 0, 0, 0.0
    for n, p0 in w0.items():
        if n not in a or n not in d:
            print("FAIL: %s missing from an export" % n)
            fail = 1
            continue
        if n in decay:
            ndecay += 1
            if not torch.equal(a[n], d[n]):
                print("FAIL: %s is decayed by the Trainer, but the two runs differ (max %.3g)"
                      % (n, (a[n] - d[n]).abs().max().item()))
                fail = 1
            continue
        nplain += 1
        want = -lr * wd * p0
        got = a[n] - d[n]
        # the two sides are rounded to f32 near w0: a few ulps of w0
        tol = 4 * torch.finfo(torch.float32).eps * p0.abs().max().item() + 1e-12
        err = (got - want).abs().max().item()
        worst = max(worst, err / (want.abs().max().item() or 1))
        if not err <= tol or want.abs().max().item() == 0:
            print("FAIL: %s: no_decay = [] minus the default = %.6g at most off -lr*wd*w0 (tolerance %.3g)" % (n, err, tol))
            fail = 1
    if nplain == 0 or ndecay == 0:
        print("FAIL: %d undecayed, %d decayed parameters" % (nplain, ndecay))
        fail = 1
    if not fail:
        print("ok   the default skips the Trainer's %d bias and norm parameters: each moved -lr*wd*w0 less than with "
              "no_decay = [] (worst %.1e relative); the other %d bit-identical" % (nplain, worst, ndecay))
    return fail


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        hf_weights.make_model(hf_weights.MODELS["gpt2"], os.path.join(sys.argv[2], "hf"), 11)
        hf_weights.tokens(os.path.join(sys.argv[2], "tok.bin"), 2000, 97, 3)
        sys.exit(0)
    if cmd == "check":
        sys.exit(check(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]))
    sys.exit("no_decay.py: unknown command " + cmd)
