"""Mixture-of-experts models (stdlib/moe.zl) against transformers, for
tests/e2e/moe.sh.

  moe.py make W      small random MixtralForCausalLM, Qwen3MoeForCausalLM,
                     OlmoeForCausalLM and Qwen2MoeForCausalLM models (and
                     variants: without the
                     auxiliary loss; a routing where every token picks the
                     same experts and the others get none; PEFT's LoRA on the
                     experts, every parameter trained; Qwen3-MoE with dense
                     layers, mlp_only_layers and decoder_sparse_step); for
                     each case C:
                     W/C.zl (the model written with stdlib/moe.zl),
                     W/C.safetensors (the weights under zinf's names: the
                     experts' [E, ...] tensors as transformers holds them),
                     W/C.ref (transformers' step-1 losses on 1 and 2 ranks);
                     torch's gradients of every parameter in W/C-gR.safetensors
                     (R ranks: the mean of the ranks' micro-batch gradients);
                     W/tok.bin
  moe.py gen W C IDS N LOGITS...
                     transformers' greedy continuation (N tokens) of the ids
                     IDS (1,2,3) by case C's model, one line of ids; each
                     LOGITS file (zinfgen --logits) must hold the logits
                     each token was picked from (1e-4 of their largest)
  moe.py check W CHECKS
                     for each line "C R EXPORT LOSSES" of the file CHECKS:
                     zinfrun's step-1 loss (LOSSES) against transformers' and
                     the gradients read off its one AdamW step (EXPORT: its
                     --export after it) against torch's
"""
import json
import os
import sys
import warnings

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

V, T, B = 96, 12, 2
LR, EPS = 1.0, 1.0  # AdamW's first update lr g / (|g| + eps) then gives g back

COMMON = dict(vocab_size=V, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=T, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_dropout=0.0,
              rope_theta=10000.0)

CASES = {
    # Mixtral: the gates are renormalised over the picked experts
    "mixtral": dict(model_type="mixtral", arch="MixtralForCausalLM", intermediate_size=40, num_local_experts=4,
                    num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.05),
    "mixtral-noaux": dict(model_type="mixtral", arch="MixtralForCausalLM", intermediate_size=40,
                          num_local_experts=4, num_experts_per_tok=2, output_router_logits=False),
    # Qwen3-MoE: per-head q/k norms, a head_dim of its own, norm_topk_prob
    "qwen3moe": dict(model_type="qwen3_moe", arch="Qwen3MoeForCausalLM", moe_intermediate_size=24,
                     intermediate_size=64, num_experts=6, num_experts_per_tok=3, norm_topk_prob=True, head_dim=16,
                     decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=True,
                     router_aux_loss_coef=0.02),
    # OLMoE: q/k norms over the whole projections, gates not renormalised
    "olmoe": dict(model_type="olmoe", arch="OlmoeForCausalLM", intermediate_size=32, num_experts=5,
                  num_experts_per_tok=2, norm_topk_prob=False, output_router_logits=True,
                  router_aux_loss_coef=0.01, clip_qkv=None),
    # every token routed to experts 0 and 1 (top-1: expert 0); experts 2, 3 get no token
    # Qwen2-MoE: q/k/v biases, a shared expert scaled by its sigmoid gate
    "qwen2moe": dict(model_type="qwen2_moe", arch="Qwen2MoeForCausalLM", moe_intermediate_size=20,
                     intermediate_size=64, shared_expert_intermediate_size=36, num_experts=4, num_experts_per_tok=2,
                     norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[], qkv_bias=True,
                     output_router_logits=True, router_aux_loss_coef=0.01),
    # LoRA on the experts (PEFT's target_parameters experts.gate_up_proj and experts.down_proj), its B
    # drawn nonzero so that the step-1 loss and every gradient see the adapters; every parameter trains
    "qwen3moe-lora": dict(model_type="qwen3_moe", arch="Qwen3MoeForCausalLM", moe_intermediate_size=24,
                          intermediate_size=64, num_experts=6, num_experts_per_tok=3, norm_topk_prob=True,
                          head_dim=16, decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=True,
                          router_aux_loss_coef=0.02, lora=(3, 5.0)),
    "skewed": dict(model_type="qwen3_moe", arch="Qwen3MoeForCausalLM", moe_intermediate_size=24,
                   intermediate_size=64, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, head_dim=12,
                   decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=True,
                   router_aux_loss_coef=0.03, skew=True),
    "skewed-top1": dict(model_type="mixtral", arch="MixtralForCausalLM", intermediate_size=40, num_local_experts=4,
                        num_experts_per_tok=1, output_router_logits=True, router_aux_loss_coef=0.05, skew=True),
    # dense layers among the sparse ones (Qwen3MoeMLP of intermediate_size): mlp_only_layers makes
    # layer 1 of 3 dense; decoder_sparse_step = 2 layers 0 and 2 of 4 (with and without the
    # load-balancing loss, which counts the sparse layers only)
    "qwen3moe-mlponly": dict(model_type="qwen3_moe", arch="Qwen3MoeForCausalLM", moe_intermediate_size=24,
                             intermediate_size=36, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
                             head_dim=16, decoder_sparse_step=1, mlp_only_layers=[1], num_hidden_layers=3,
                             output_router_logits=True, router_aux_loss_coef=0.3, sparse="1 - i % 2"),
    "qwen3moe-step2": dict(model_type="qwen3_moe", arch="Qwen3MoeForCausalLM", moe_intermediate_size=24,
                           intermediate_size=36, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                           head_dim=16, decoder_sparse_step=2, mlp_only_layers=[], num_hidden_layers=4,
                           output_router_logits=True, router_aux_loss_coef=0.3, sparse="i % 2"),
    "qwen3moe-step2-noaux": dict(model_type="qwen3_moe", arch="Qwen3MoeForCausalLM", moe_intermediate_size=24,
                                 intermediate_size=36, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                                 head_dim=16, decoder_sparse_step=2, mlp_only_layers=[], num_hidden_layers=4,
                                 output_router_logits=False, sparse="i % 2"),
}


def experts(c):
    return c.get("num_local_experts", c.get("num_experts"))


def hidden(c):
    return c.get("moe_intermediate_size", c["intermediate_size"])


def layers(c):
    return c.get("num_hidden_layers", COMMON["num_hidden_layers"])


def sparse_layers(c):
    """The layers transformers makes sparse (Qwen3MoeDecoderLayer's test)."""
    step, only = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers", [])
    return [i for i in range(layers(c)) if i not in only and (i + 1) % step == 0]


def zl_model(name, c):
    E, K, F, L = experts(c), c["num_experts_per_tok"], hidden(c), layers(c)
    D, H, KV = COMMON["hidden_size"], COMMON["num_attention_heads"], COMMON["num_key_value_heads"]
    opts = "normalize = %s, eps = 1e-6" % ("true" if c["model_type"] == "mixtral" or c.get("norm_topk_prob") else "false")
    if c["model_type"] == "qwen3_moe":
        opts += ", qk_norm = true, head_dim = %d" % c["head_dim"]
    if c["model_type"] == "olmoe":
        opts += ", qk_norm = true, qk_norm_full = true"
    if c["model_type"] == "qwen2_moe":
        opts += ", qkv_bias = true, shared_expert = true, shared_hidden = %d" % c["shared_expert_intermediate_size"]
    # dense layers: S, 0 or 1 by the layer, picks moe_block's MLP (the aux loss over the sparse layers)
    rep, LS = "repeat L", "L"
    if c.get("sparse"):
        rep, LS = "repeat L as i", str(len(sparse_layers(c)))
        opts = "sparse = %s, dense_hidden = %d, " % (c["sparse"], c["intermediate_size"]) + opts
    aux = " + moe_aux_loss(load, E, %s, B * T, %r)" % (LS, c["router_aux_loss_coef"]) if c["output_router_logits"] else ""
    if not c["output_router_logits"]:
        opts += ", aux = false"
    if c.get("lora"):
        opts += ", lora_rank = %d, lora_alpha = %r, lora_gate_up = true, lora_down = true" % c["lora"]
    return """import "llama"
import "moe"

const V = %d, T = %d, D = %d, H = %d, KV = %d, E = %d, K = %d, F = %d, L = %d

model %s(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = embedding(tok, tokens)
  load = moe_load(experts = E)
  %s { x, load = moe_block(x, load, H, KV, E, K, F, %s) }
  x = rms(x, 1e-6)
  head = param [D, V] init normal(0.02)
  loss cross_entropy(linear(x, head), targets)%s
}

train {
  micro_batch = %d
  steps = 1
  dtype = f32
  grad_clip = 0.0
  optimizer = adam(lr = %r, beta1 = 0.9, beta2 = 0.999, eps = %r, weight_decay = 0.0)
}
""" % (V, T, D, H, KV, E, K, F, L, name.replace("-", "_"), rep, opts, aux, B, LR, EPS)


def make_model(c, seed):
    cfg = dict(COMMON)
    cfg.update({k: v for k, v in c.items() if k not in ("arch", "skew", "lora", "sparse")})
    conf = AutoConfig.for_model(**cfg)
    conf.architectures = [c["arch"]]
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(conf, dtype=torch.float32)
    with torch.no_grad():
        for p in m.parameters():  # norms away from 1, routers and experts of some size
            p.add_(torch.randn_like(p) * 0.05)
        if c.get("skew"):
            # a large first coordinate in every embedding, so every token's normalised
            # input has it; the routers rank the experts by it alike for every token
            m.model.embed_tokens.weight[:, 0] = 4.0
            for layer in m.model.layers:
                w = layer.mlp.gate.weight
                w.zero_()
                w[:, 0] = torch.linspace(0.6, -0.6, w.shape[0])
    if c.get("lora"):
        from peft import LoraConfig, get_peft_model
        r, alpha = c["lora"]
        with warnings.catch_warnings():  # transformers' deprecation notes that peft triggers, not ours
            warnings.simplefilter("ignore")
            m = get_peft_model(m, LoraConfig(r=r, lora_alpha=alpha, target_modules=[],
                                             target_parameters=["experts.gate_up_proj", "experts.down_proj"]))
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn_like(p) * 0.2)
        for p in m.parameters():  # the base trains too, so its gradients are compared as well
            p.requires_grad_(True)
        m = m.base_model.model
    return m


def zinf_names(m, c):
    """The model's tensors under zinf's parameter names (stdlib/moe.zl)."""
    out = {"tok": m.model.embed_tokens.weight, "rms.g": m.model.norm.weight, "head": m.lm_head.weight.t()}
    F = hidden(c)
    for i, layer in enumerate(m.model.layers):
        p = "moe_block.%d." % i
        a = layer.self_attn
        out[p + "rms.g"] = layer.input_layernorm.weight
        out[p + "rms_1.g"] = layer.post_attention_layernorm.weight
        for n in "qkvo":
            out[p + "rope_attn.w" + n] = getattr(a, n + "_proj").weight.t()
        if getattr(a.q_proj, "bias", None) is not None:
            for n in "qkv":
                out[p + "rope_attn.b" + n] = getattr(a, n + "_proj").bias
        if hasattr(a, "q_norm"):
            out[p + "rope_attn.q_norm"] = a.q_norm.weight
            out[p + "rope_attn.k_norm"] = a.k_norm.weight
        mlp = layer.mlp
        if not hasattr(mlp, "experts"):  # a dense layer: moe_block's swiglu
            out[p + "swiglu.w1"] = mlp.gate_proj.weight.t()
            out[p + "swiglu.w3"] = mlp.up_proj.weight.t()
            out[p + "swiglu.w2"] = mlp.down_proj.weight.t()
            continue
        out[p + "moe_mlp.wr"] = mlp.gate.weight
        ex = mlp.experts
        while hasattr(ex, "base_layer"):  # PEFT's ParamWrappers, one per targeted parameter
            out.update(lora_names(p + "moe_mlp.", ex))
            ex = ex.base_layer
        gu = ex.gate_up_proj
        out[p + "moe_mlp.wg"] = gu[:, :F, :]
        out[p + "moe_mlp.wu"] = gu[:, F:, :]
        out[p + "moe_mlp.wd"] = ex.down_proj
        if hasattr(mlp, "shared_expert"):
            se = mlp.shared_expert
            out[p + "moe_mlp.ws"] = mlp.shared_expert_gate.weight
            out[p + "moe_mlp.swiglu.w1"] = se.gate_proj.weight.t()
            out[p + "moe_mlp.swiglu.w3"] = se.up_proj.weight.t()
            out[p + "moe_mlp.swiglu.w2"] = se.down_proj.weight.t()
    return out


def lora_names(p, w):
    """A ParamWrapper's factors under zinf's names: lora_A [r E, in] is
    [E, r, in] (expert e's rows e r .. e r + r - 1); lora_B [out, r E] holds
    expert e's column k at k E + e, so it is [out, r, E] permuted to
    [E, out, r]."""
    A, Bw = w.lora_A.default.weight, w.lora_B.default.weight
    E = w.num_experts
    r = A.shape[0] // E
    a = A.reshape(E, r, A.shape[1])
    b = Bw.reshape(Bw.shape[0], r, E).permute(2, 0, 1)
    n = {"gate_up_proj": "gate_up", "down_proj": "down"}[w.parameter_name]
    return {p + "lora_%s_a" % n: a, p + "lora_%s_b" % n: b}


def tokens(path, n, seed):
    ids = np.random.default_rng(seed).integers(0, V, n).astype(np.uint16)
    h = np.zeros(256, np.int32)
    h[:4] = [20240520, 1, n, V]
    with open(path, "wb") as f:
        f.write(h.tobytes() + ids.tobytes())


def batch(tok, R, step=1):
    """Micro-batch r of step 1 on R ranks: window r (runtime/data/tokens.h)."""
    ids = np.fromfile(tok, np.uint16, offset=1024).astype(np.int64)
    out = []
    for r in range(R):
        m = (step - 1) * R + r
        win = ids[m * B * T: m * B * T + B * T + 1]
        out.append((torch.tensor(win[:-1].reshape(B, T)), torch.tensor(win[1:].reshape(B, T))))
    return out


def hf_loss(m, c, x, y):
    """transformers' training loss: cross-entropy of the next token plus, with
    output_router_logits, router_aux_loss_coef times load_balancing_loss_func
    (the loss MoeCausalLMOutputWithPast carries with labels, here with the
    targets given directly)."""
    out = m(x, output_router_logits=c["output_router_logits"])
    lg = out.logits
    loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))
    if c["output_router_logits"]:
        loss = loss + c["router_aux_loss_coef"] * out.aux_loss
    return loss, out


def check_skew(m, c, x):
    """The skewed cases route every token to the same experts."""
    out = m(x, output_router_logits=True)
    K = c["num_experts_per_tok"]
    for lg in out.router_logits:
        picked = torch.topk(lg, K, dim=-1).indices.sort(dim=-1).values
        if not bool((picked == torch.arange(K)).all()):
            raise SystemExit("FAIL: the skewed routing is not every token to experts 0..%d" % (K - 1))


def make(w):
    tok = os.path.join(w, "tok.bin")
    tokens(tok, 600, 5)
    for i, (name, c) in enumerate(CASES.items()):
        m = make_model(c, 20 + i)
        got = [k for k, layer in enumerate(m.model.layers) if hasattr(layer.mlp, "experts")]
        if got != sparse_layers(c):
            raise SystemExit("FAIL: %s: transformers' sparse layers %s, expected %s" % (name, got, sparse_layers(c)))
        m.train()  # no dropout in these configs; train() as zinfrun trains
        with open(os.path.join(w, name + ".zl"), "w") as f:
            f.write(zl_model(name, c))
        save_file({k: v.detach().contiguous().clone() for k, v in zinf_names(m, c).items()},
                  os.path.join(w, name + ".safetensors"), metadata={"format": "pt"})
        ref = {}
        for R in (1, 2):
            mbs = batch(tok, R)
            if c.get("skew"):
                for x, _ in mbs:
                    check_skew(m, c, x)
            m.zero_grad()
            losses = []
            for x, y in mbs:
                loss, _ = hf_loss(m, c, x, y)
                (loss / R).backward()
                losses.append(loss.item())
            ref[R] = sum(losses) / R
            names = zinf_names(m, c)
            # the gradient under zinf's names: the same views of .grad
            grads = zinf_names_grad(m, c)
            save_file({k: v.detach().contiguous().clone() for k, v in grads.items()},
                      os.path.join(w, "%s-g%d.safetensors" % (name, R)), metadata={"format": "pt"})
            assert set(grads) == set(names)
        with open(os.path.join(w, name + ".ref"), "w") as f:
            json.dump(ref, f)
        print(name)


def zinf_names_grad(m, c):
    class G:  # the model seen through its parameters' gradients
        def __init__(self, mod):
            self.mod = mod

        def __getattr__(self, k):
            v = getattr(self.mod, k)
            if isinstance(v, torch.nn.Parameter):
                return v.grad if v.grad is not None else torch.zeros_like(v)
            if isinstance(v, torch.nn.ModuleList):
                return [G(x) for x in v]
            if isinstance(v, torch.nn.Module):
                return G(v)
            return v
    return zinf_names(G(m), c)


def check(w, name, R, export, losses):
    fail = 0
    ref = json.load(open(os.path.join(w, name + ".ref")))[str(R)]
    got = None
    for line in open(losses):
        f = line.split()
        if f[:2] == ["step", "1"]:
            got = float(f[3])
    rel = abs(got - ref) / abs(ref) if got is not None else float("inf")
    print("%s R=%s: step-1 loss zinf %.8f transformers %.8f (rel %.2e)" % (name, R, got or 0, ref, rel))
    if not rel <= 1e-5:
        print("FAIL %s R=%s: the step-1 loss differs by %.2e relative" % (name, R, rel))
        fail = 1
    before = load_file(os.path.join(w, name + ".safetensors"))
    after = load_file(export)
    want = load_file(os.path.join(w, "%s-g%s.safetensors" % (name, R)))
    if set(after) != set(want):
        print("FAIL %s: the export's names %s are not the model's %s" % (name, sorted(after), sorted(want)))
        return 1
    worst = (0.0, "")
    for k, g in want.items():
        u = -(after[k].double() - before[k].double()) / LR  # g / (|g| + eps)
        gz = u * EPS / (1 - u.abs())
        scale = g.double().norm().item()
        # what reading g off the f32 update can resolve: the updated value's rounding
        floor = 2 * 2.0 ** -24 * after[k].double().norm().item() * EPS / LR / (1 - u.abs().max().item())
        err = (gz - g.double()).norm().item() / max(scale, 1e-12)
        if err > worst[0]:
            worst = (err, k)
        if not (gz - g.double()).norm().item() <= 2e-4 * scale + floor:
            print("FAIL %s R=%s: %s's gradient differs from torch's by %.2e relative (norm %.3e)" % (name, R, k, err, scale))
            fail = 1
    print("%s R=%s: gradients of %d tensors, worst %.2e relative (%s)" % (name, R, len(want), worst[0], worst[1]))
    return fail


def gen(w, name, ids, n, logit_files):
    c = CASES[name]
    m = make_model(c, 20 + list(CASES).index(name))
    m.eval()
    x = torch.tensor([[int(i) for i in ids.split(",")]])
    with torch.no_grad():
        out = m.generate(x, max_new_tokens=int(n), do_sample=False, pad_token_id=0, eos_token_id=None,
                         output_logits=True, return_dict_in_generate=True)
    want = torch.cat(out.logits).double()
    bad = 0
    for f in logit_files:
        got = torch.tensor(np.loadtxt(f, ndmin=2), dtype=torch.float64)
        err = (got - want).abs().max().item() / want.abs().max().item() if got.shape == want.shape else float("inf")
        if not err <= 1e-4:
            sys.stderr.write("FAIL: %s holds logits %s off transformers' by %.2e of the largest\n" % (f, tuple(got.shape), err))
            bad = 1
    print(" ".join(str(int(t)) for t in out.sequences[0, x.shape[1]:]))
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "gen":
        sys.exit(gen(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]))
    elif sys.argv[1] == "check":
        bad = 0
        for line in open(sys.argv[3]):
            bad |= check(sys.argv[2], *line.split())
        sys.exit(bad)
    else:
        sys.exit(__doc__)
