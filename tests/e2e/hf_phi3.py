"""hf_phi3: the Python side of tests/e2e/hf_phi3.sh (never downloads anything).

    python hf_phi3.py make ROOT      for every case: ROOT/CASE (save_pretrained of a small random Phi-3),
                                     ROOT/CASE.bin (a token file, llm.c layout), ROOT/CASE.seq, and on
                                     stdout "CASE LOSS GNORM OTHER": transformers' mean cross-entropy on the
                                     first [1, T] batch (eager attention), the gradient's norm over every
                                     parameter, and the loss of the same weights with the feature under
                                     test turned off (rotary over the whole head, no rope scaling), so
                                     that a test that ignored it would fail (OTHER is the loss itself
                                     when the case changes nothing transformers computes)
    python hf_phi3.py export CASE DIR TOKENS T IDS N   loads DIR with from_pretrained: "keys CASE
                                     missing=K unexpected=M [...]", "loss CASE L" on the first T + 1
                                     tokens of TOKENS, "gen CASE ..." (generate, greedy, N new tokens)
    python hf_phi3.py export ... NEXT STEP   also loads NEXT (the export after STEP - 1 training steps):
                                     "next CASE missing=K unexpected=M LOSS BEFORE", its loss on the window
                                     step STEP trains on (B = 1, tokens[(STEP-1)T:STEP T+1] of the 4
                                     windows) and that of DIR's weights on it
    python hf_phi3.py exports LIST   export for each line "OUT CASE DIR ..." of LIST, in one Python,
                                     into the file OUT (hf_ref.export_all)

Weights are drawn wider than the model's own initialisation (std 0.3) so
that the features tested move the loss by far more than 1e-5.
"""
import sys

import torch
import transformers as T

import hf_ref

SMALL = dict(hidden_size=64, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, original_max_position_embeddings=64, rope_theta=10000.0,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
# name: (keyword arguments of Phi3Config, training sequence, what to turn off for the other loss)
CASES = {
    # Phi-4-mini's partial rotary: 12 of the 16 columns of each head turn
    "phi3-partial": (dict(SMALL, vocab_size=61, num_hidden_layers=2, partial_rotary_factor=0.75), 16, "partial"),
    # half of each head, with a window of 6 shorter than the sequence
    "phi3-partial-w6": (dict(SMALL, vocab_size=59, num_hidden_layers=2, partial_rotary_factor=0.5,
                             sliding_window=6), 20, "partial"),
    # Phi-4-mini's longrope beside its partial rotary: 6 pairs turned, an original context of 16 in 64
    # (attention factor sqrt(1 + ln 4 / ln 16)); T = 12 within it: the short factors
    "phi3-longrope": (dict(SMALL, vocab_size=67, num_hidden_layers=2, original_max_position_embeddings=16,
                           rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                                                short_factor=[1.0, 1.25, 1.5, 2.0, 2.5, 3.0],
                                                long_factor=[1.5, 2.0, 4.0, 6.0, 9.0, 12.0])), 12, "rope"),
    # the same beyond the original context (T = 24 > 16): the long factors; su as Phi-3-mini-128k writes it
    "phi3-longrope-long": (dict(SMALL, vocab_size=71, num_hidden_layers=2, original_max_position_embeddings=16,
                                rope_scaling=dict(type="su", short_factor=[1.0, 1.1, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2],
                                                  long_factor=[1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0])), 24, "rope"),
    # attention_bias and mlp_bias: keys transformers' Phi3 does not read (no biases)
    "phi3-bias": (dict(SMALL, vocab_size=53, num_hidden_layers=2, attention_bias=True, mlp_bias=True), 16, None),
}


def make(case, d):
    hf_ref.make_model(T.Phi3Config(**CASES[case][0]), case, d)


tokens = hf_ref.write_tokens
loss = hf_ref.window_loss


def load(d, off=None):
    kw = dict(dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    if off:  # the same weights, the feature under test turned off
        cfg = T.AutoConfig.from_pretrained(d)
        rp = dict(cfg.rope_parameters)
        if off == "partial":
            rp["partial_rotary_factor"] = 1.0
        else:
            rp = {"rope_type": "default", "rope_theta": rp["rope_theta"], "partial_rotary_factor":
                  rp.get("partial_rotary_factor", 1.0)}
        cfg.rope_parameters = rp
        cfg.partial_rotary_factor = rp["partial_rotary_factor"]
        kw["config"] = cfg
    return T.AutoModelForCausalLM.from_pretrained(d, **kw)


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        root = sys.argv[2]
        for case, (kw, t, off) in CASES.items():
            d = "%s/%s" % (root, case)
            make(case, d)
            tokens(kw["vocab_size"], 4 * t + 1, d + ".bin")
            open(d + ".seq", "w").write("%d\n" % t)
            m, _ = load(d)
            l = loss(m, d + ".bin", t)
            other = loss(load(d, off)[0], d + ".bin", t) if off else l
            print("%s %.10f %.10f %.10f" % (case, l, loss(m, d + ".bin", t, grad=True), other))
    elif cmd == "export":
        hf_ref.export(sys.argv[2:], load)
    elif cmd == "exports":
        sys.exit(hf_ref.export_all(sys.argv[2], load))
    else:
        sys.exit("hf_phi3.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
