"""hf_gemma: the Python side of tests/e2e/hf_gemma.sh (never downloads anything).

    python hf_gemma.py make ROOT        for every case: ROOT/CASE (save_pretrained of a small random
                                        Gemma model), ROOT/CASE.bin (a token file of random ids below
                                        its vocabulary) and ROOT/CASE.seq (its sequence); then
                                        "CASE LOSS" on stdout, transformers' mean cross-entropy on the
                                        first micro-batch zinfrun reads (B = 1, tokens[0:T+1]) and
                                        the norm of its gradient over every parameter
    python hf_gemma.py export CASE DIR TOKENS T IDS N   loads DIR (zinfrun --export-hf) with
                                        from_pretrained: "keys CASE missing=K unexpected=M", "loss CASE
                                        LOSS", and "gen CASE TOKENS...", greedy generate's N tokens
                                        after the comma-separated prompt IDS (one Python for the three:
                                        importing torch and transformers takes seconds)
    python hf_gemma.py export ... NEXT STEP   also loads NEXT (the export after STEP - 1 training
                                        steps): "next CASE missing=K unexpected=M LOSS BEFORE", its loss
                                        on the window step STEP trains on (B = 1, tokens[(STEP-1)T:
                                        STEP T+1] of the 4 windows) and that of DIR's weights on it
    python hf_gemma.py exports LIST     export for each line "OUT CASE DIR ..." of LIST, in one
                                        Python, into the file OUT (hf_ref.export_all)

Attention is transformers' eager implementation: the only one that soft-caps
attention logits. The weights are drawn wider than the models' own
initialisation (std 0.3; norm weights around 0, Gemma's norms scaling by
1 + w) and the soft-caps small, so that every feature moves the loss by far
more than the comparison's 1e-5.
"""
import sys

import torch
import transformers as T

import hf_ref

# name: (config class, keyword arguments, training sequence)
CASES = {
    # grouped kv heads, both soft-caps, a query_pre_attn_scalar of its own, a window the sequence fits in
    "gemma2": (T.Gemma2Config, dict(vocab_size=67, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    max_position_embeddings=64, sliding_window=24, query_pre_attn_scalar=24,
                                    attn_logit_softcapping=3.0, final_logit_softcapping=4.0,
                                    pad_token_id=0, eos_token_id=1, bos_token_id=2), 24),
    # untied head, attention biases, no soft-capping
    "gemma2-bias-untied": (T.Gemma2Config, dict(vocab_size=59, hidden_size=40, intermediate_size=56, num_hidden_layers=2,
                                                num_attention_heads=2, num_key_value_heads=1, head_dim=12,
                                                max_position_embeddings=48, sliding_window=32, query_pre_attn_scalar=12,
                                                attn_logit_softcapping=None, final_logit_softcapping=None,
                                                attention_bias=True, tie_word_embeddings=False,
                                                pad_token_id=0, eos_token_id=1, bos_token_id=2), 16),
    # Gemma 3: q/k norms per head; every second layer global (rope_theta, linearly scaled), the others
    # sliding (rope_local_base_freq); grouped kv heads
    "gemma3": (T.Gemma3TextConfig, dict(vocab_size=71, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                        max_position_embeddings=64, sliding_window=24, sliding_window_pattern=2,
                                        query_pre_attn_scalar=24, rope_theta=20000.0, rope_local_base_freq=100.0,
                                        rope_scaling={"rope_type": "linear", "factor": 4.0},
                                        pad_token_id=0, eos_token_id=1, bos_token_id=2), 24),
    # Gemma 3 untied, with attention biases and the final-logit soft-cap, the layer types listed, no
    # scaling; attn_logit_softcapping, which transformers' Gemma 3 attention does not apply
    "gemma3-untied-caps": (T.Gemma3TextConfig, dict(vocab_size=53, hidden_size=24, intermediate_size=40,
                                                    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                                    head_dim=12, max_position_embeddings=48, sliding_window=20,
                                                    layer_types=["sliding_attention", "full_attention"],
                                                    query_pre_attn_scalar=12, attn_logit_softcapping=3.0,
                                                    final_logit_softcapping=4.0, attention_bias=True,
                                                    tie_word_embeddings=False,
                                                    pad_token_id=0, eos_token_id=1, bos_token_id=2), 16),
    # sliding windows shorter than the sequence: Gemma 2's alternating layers (0 and 2 a window of 5)
    "gemma2-w5": (T.Gemma2Config, dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                       max_position_embeddings=64, sliding_window=5, query_pre_attn_scalar=8,
                                       attn_logit_softcapping=3.0, final_logit_softcapping=4.0,
                                       tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=2), 20),
    # Gemma 3's local/global pattern (every third layer global): layers 0, 1 and 3 a window of 4
    "gemma3-w4": (T.Gemma3TextConfig, dict(vocab_size=57, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                                           num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                           max_position_embeddings=64, sliding_window=4, sliding_window_pattern=3,
                                           query_pre_attn_scalar=8, rope_theta=20000.0, rope_local_base_freq=100.0,
                                           tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=2), 20),
}


def make(case, d):
    cls, kw, _ = CASES[case]
    hf_ref.make_model(cls(**kw), case, d, vector_mean=None)


tokens = hf_ref.write_tokens
loss = hf_ref.window_loss


def load(d):
    return T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                  output_loading_info=True)


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        root = sys.argv[2]
        for case, (cls, kw, t) in CASES.items():
            d = "%s/%s" % (root, case)
            make(case, d)
            tokens(kw["vocab_size"], 4 * t + 1, d + ".bin")
            open(d + ".seq", "w").write("%d\n" % t)
            m, _ = load(d)
            # the windowed cases: also the loss of the same weights with a window holding the sequence
            nowin = ""
            if "-w" in case:
                cfg = T.AutoConfig.from_pretrained(d)
                cfg.sliding_window = 4 * t
                w = T.AutoModelForCausalLM.from_pretrained(d, config=cfg, dtype=torch.float32, attn_implementation="eager")
                nowin = " %.10f" % loss(w, d + ".bin", t)
            print("%s %.10f %.10f%s" % (case, loss(m, d + ".bin", t), loss(m, d + ".bin", t, grad=True), nowin))
    elif cmd == "export":
        hf_ref.export(sys.argv[2:], load)
    elif cmd == "exports":
        sys.exit(hf_ref.export_all(sys.argv[2], load))
    else:
        sys.exit("hf_gemma.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
