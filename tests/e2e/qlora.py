"""Helper of tests/e2e/qlora.sh: zinf's QLoRA (frozen weights stored NF4 or
int8, LoRA adapters trained) held to transformers and peft on the model
whose quantized weights are replaced by their dequantized values, computed
here with the numpy reference of tests/e2e/quant_codec.py (zinf quantizes
a weight as it holds it, [in, out]: the transpose of a torch Linear's).

  qlora.py check W KIND STEP [RANKS]  W/hf the base model, W/KIND.losses zinf's
        losses, W/KIND.all.safetensors (zinfrun --export, after any number
        of steps: its frozen weights), W/KIND.adapter (--export-hf) and
        W/KIND.merged (--merge-lora) of the weights after STEP - 1 steps.
        Checked: the quantized weights exported equal the reference's
        dequantized values bit for bit, the rest the checkpoint's; the step-1
        loss equals transformers' on the dequantized model, and the loss of
        step STEP equals peft's with the exported adapter on it and the
        merged model's, each within 1e-5 relative. RANKS: the ranks of the
        run whose step-1 loss is checked (its global batch), 1 by default.
"""
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_weights  # noqa: E402
import quant_codec  # noqa: E402

# the linears of the blocks that the default quantize stores quantized
LINEARS = [("rope_attn.wq", "self_attn.q_proj"), ("rope_attn.wk", "self_attn.k_proj"), ("rope_attn.wv", "self_attn.v_proj"),
           ("rope_attn.wo", "self_attn.o_proj"), ("swiglu.w1", "mlp.gate_proj"), ("swiglu.w3", "mlp.up_proj"),
           ("swiglu.w2", "mlp.down_proj")]


def dequantized(hf, kind):
    """The checkpoint with each block linear's weight replaced by its
    quantize-dequantize, zinf's layout ([in, out]) blocked."""
    out = dict(hf)
    codec = quant_codec.nf4 if kind == "nf4" else quant_codec.int8
    for name, t in hf.items():
        if any(name.endswith(h + ".weight") for _, h in LINEARS) and ".layers." in name:
            zl = t.t().contiguous().numpy().astype(np.float32).reshape(-1)   # [in, out], flat
            _, y = codec(zl)
            out[name] = torch.from_numpy(y.reshape(t.shape[1], t.shape[0])).t().contiguous()
    return out


def model_with(w, state):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(os.path.join(w, "hf"), dtype=torch.float32)
    m.load_state_dict(state, strict=False)
    return m


def loss_of(m, w, step, ranks=1):
    x, y = hf_weights.batch(os.path.join(w, "tok.bin"), 1, m.config.max_position_embeddings, ranks, step)
    m.eval()
    with torch.no_grad():
        lg = m(x).logits
        return torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item()


def close(name, got, want):
    rel = abs(got - want) / abs(want)
    ok = rel <= 1e-5
    print("%s %s: loss %.8f, zinf %.8f (%.1e relative)" % ("ok  " if ok else "FAIL", name, got, want, rel))
    return 0 if ok else 1


def check(w, kind, step, ranks=1):
    from peft import PeftModel
    fail = 0
    hf = load_file(os.path.join(w, "hf", "model.safetensors"))
    deq = dequantized(hf, kind)
    z = load_file(os.path.join(w, kind + ".all.safetensors"))
    nq, bad = 0, []
    for i in range(2):
        for zn, hn in LINEARS:
            a, b = z["llama_block.%d.%s" % (i, zn)], deq["model.layers.%d.%s.weight" % (i, hn)].t()
            nq += 1
            if not torch.equal(a.view(torch.int32), b.contiguous().view(torch.int32)):
                bad.append(zn)
    for zn, hn, t in (("tok", "model.embed_tokens.weight", False), ("head", "lm_head.weight", True), ("rms.g", "model.norm.weight", False)):
        if not torch.equal(z[zn], hf[hn].t() if t else hf[hn]):
            bad.append(zn)
    if bad:
        print("FAIL %s: exported weights differ from the reference: %s" % (kind, bad))
        fail = 1
    else:
        print("ok   %s: %d quantized weights exported equal numpy's dequantization bit for bit; embedding, head, norm"
              " untouched" % (kind, nq))
    losses = hf_weights.zinf_losses(os.path.join(w, kind + ".losses"))
    fail |= close("%s step 1 on %d rank%s: transformers on the dequantized model" % (kind, ranks, "s" if ranks > 1 else ""),
                  loss_of(model_with(w, deq), w, 1, ranks), losses[1])
    if os.path.isdir(os.path.join(w, kind + ".adapter")):
        peft = PeftModel.from_pretrained(model_with(w, deq), os.path.join(w, kind + ".adapter"))
        fail |= close("%s step %d: peft's adapter on the dequantized model" % (kind, step), loss_of(peft, w, step), losses[step])
        from transformers import AutoModelForCausalLM
        merged = AutoModelForCausalLM.from_pretrained(os.path.join(w, kind + ".merged"), dtype=torch.float32)
        fail |= close("%s step %d: the merged model (--merge-lora)" % (kind, step), loss_of(merged, w, step), losses[step])
    return fail


if __name__ == "__main__":
    sys.exit(check(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 1))
