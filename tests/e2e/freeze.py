"""Helper of tests/e2e/freeze.sh: the small LLaMA of hf_weights.py and a token
file; then the reference of a fine-tuning run with frozen weights: torch
autograd on the same transformers model, requires_grad=False on the frozen
tensors, AdamW on the rest with zinf's settings (global-norm clipping over
the trainable gradients; no decay for biases and norm weights, in the Hugging
Face Trainer's groups), on the batches zinfrun trained on.

  freeze.py make W                      model in W/hf, tokens in W/tok.bin
  freeze.py check W STEPS LR WD EPS R EXP [R EXP ...]
                                        zinfrun's export EXP (R ranks, STEPS steps) against torch:
                                        frozen tensors bit-identical to W/hf's, the trainable ones'
                                        updates within 1e-5 relative of torch's; R = 0: EXP is an
                                        export after a resume, only its frozen tensors checked
  freeze.py cuda K                      the CUDA backend's run on the fake driver against the host
                                        backend's on the same plan: K.host and K.cuda (--losses: the
                                        losses and gradient norms within 2e-4 relative, 3 steps),
                                        K-host.safetensors and K-cuda.safetensors (--export: the frozen
                                        tensors wte and *.attn.* bit-identical)
  freeze.py CMD ARGS + CMD ARGS ...     several of these in one process (importing torch and
                                        transformers costs seconds, each check less); exit 1 when
                                        any fails, each having said why
"""
import os
import re
import sys
import traceback

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_weights  # noqa: E402

# The HF names of what freeze.sh freezes: "tok", "llama_block.1.*", "llama_block.0.rope_attn.wq"
FROZEN = re.compile(r"^model\.(embed_tokens\.weight|layers\.1\..*|layers\.0\.self_attn\.q_proj\.weight)$")


def make(w):
    hf_weights.make_model(hf_weights.MODELS["llama"], os.path.join(w, "hf"), 10)
    hf_weights.tokens(os.path.join(w, "tok.bin"), 4000, 101, 7)


def frozen_only(w, exp):
    """An export after a resume: the frozen tensors came back from the checkpoint."""
    init, got = load_file(os.path.join(w, "hf", "model.safetensors")), load_file(os.path.join(exp, "model.safetensors"))
    names = [n for n in init if FROZEN.match(n)]
    bad = [n for n in names if not torch.equal(init[n], got[n])]
    for n in bad:
        print("FAIL resumed: frozen %s changed" % n)
    if not bad:
        print("ok   resumed from the checkpoint: %d frozen tensors still bit-identical" % len(names))
    return 1 if bad or not names else 0


def check(w, steps, lr, wd, eps, R, exp):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging
    logging.disable_progress_bar()
    m = AutoModelForCausalLM.from_pretrained(os.path.join(w, "hf"), dtype=torch.float32)
    init = {k: v.clone() for k, v in m.state_dict().items()}
    trainable = []
    for name, p in m.named_parameters():
        p.requires_grad_(not FROZEN.match(name))
        if p.requires_grad:
            trainable.append(p)
    # the Hugging Face Trainer's groups: no decay for biases and norm weights
    # (zinfc --from-hf's no_decay = ["bias", "norm"])
    from transformers import Trainer
    decay = set(Trainer.get_decay_parameter_names(None, m))
    groups = [{"params": [p for n, p in m.named_parameters() if p.requires_grad and n in decay], "weight_decay": wd},
              {"params": [p for n, p in m.named_parameters() if p.requires_grad and n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=eps)
    T = m.config.max_position_embeddings
    m.train()
    for step in range(1, steps + 1):
        x, y = hf_weights.batch(os.path.join(w, "tok.bin"), 1, T, R, step)
        lg = m(x).logits
        loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
    got = load_file(os.path.join(exp, "model.safetensors"))
    fail, nfrozen, ntrain, worst, worst_name = 0, 0, 0, 0.0, ""
    for name, p in m.named_parameters():
        z = got[name]
        if FROZEN.match(name):
            nfrozen += 1
            if not torch.equal(z, init[name]):
                print("FAIL %d rank(s): frozen %s changed" % (R, name))
                fail = 1
            continue
        ntrain += 1
        dt, dz = p.detach() - init[name], z - init[name]
        rel = ((dz - dt).norm() / dt.norm()).item()
        if rel > worst:
            worst, worst_name = rel, name
        if not rel <= 1e-5:
            print("FAIL %d rank(s): %s: update differs from torch's by %.2e relative" % (R, name, rel))
            fail = 1
    if nfrozen == 0 or ntrain == 0:
        print("FAIL: %d frozen, %d trainable tensors" % (nfrozen, ntrain))
        fail = 1
    if not fail:
        print("ok   %d rank%s: %d frozen tensors bit-identical after %d steps; %d trained tensors' updates = torch "
              "autograd with requires_grad=False on the frozen (worst %.1e relative, %s)"
              % (R, "" if R == 1 else "s", nfrozen, steps, ntrain, worst, worst_name))
    return fail


def cuda(k):
    ref = [line.split() for line in open(k + ".host")]
    got = [line.split() for line in open(k + ".cuda")]
    ok = len(ref) == len(got) == 3 and all(abs(float(a[i]) - float(b[i])) <= 2e-4 * abs(float(a[i]))
                                           for a, b in zip(ref, got) for i in (3, 5))
    h, c = load_file(k + "-host.safetensors"), load_file(k + "-cuda.safetensors")
    frozen = [n for n in h if n == "wte" or ".attn." in n]
    same = all(torch.equal(h[n], c[n]) for n in frozen)
    name = k.rsplit("/", 1)[1]
    if ok and same and frozen:
        print("ok   %s on the CUDA backend (fake driver): losses and norms = the host backend's, %d frozen tensors "
              "bit-identical" % (name, len(frozen)))
        return 0
    print("FAIL %s on the CUDA backend: losses match %s, frozen tensors (%d) identical %s" % (name, ok, len(frozen), same))
    return 1


def run(args):
    if args[0] == "make":
        make(args[1])
        return 0
    if args[0] == "cuda":
        return cuda(args[1])
    if args[0] != "check":
        sys.exit("freeze.py: unknown command " + args[0])
    w, steps, lr, wd, eps = args[1:6]
    runs = args[6:]
    return max(check(w, int(steps), float(lr), float(wd), float(eps), int(runs[i]), runs[i + 1]) if runs[i] != "0"
               else frozen_only(w, runs[i + 1]) for i in range(0, len(runs), 2))


if __name__ == "__main__":
    torch.set_num_threads(1)
    cmds, cur = [], []
    for a in sys.argv[1:] + ["+"]:
        if a == "+":
            if cur:
                cmds.append(cur)
            cur = []
        else:
            cur.append(a)
    fail = 0
    for c in cmds:
        try:
            fail |= run(c)
        except Exception:
            traceback.print_exc(file=sys.stdout)
            print("FAIL freeze.py %s: raised (above)" % " ".join(c))
            fail = 1
        sys.stdout.flush()
    sys.exit(fail)
