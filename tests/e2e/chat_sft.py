"""Helper of tests/e2e/chat_sft.sh: conversations as instruction data.

  python chat_sft.py make DIR     for each family below, DIR/NAME/ gets a
                                  small tokenizer.json trained here (byte-level
                                  BPE; SentencePiece-style Metaspace for
                                  Mistral), a tokenizer_config.json holding the
                                  fixture's chat_template and special tokens,
                                  and conv.jsonl (the conversations below)
  python chat_sft.py check DIR    reads DIR/NAME/conv.bin (zinftok's token
                                  file, version 3) and compares, conversation
                                  by conversation:
    - the ids with transformers' apply_chat_template(tokenize=True) on the
      same tokenizer and template;
    - the trained-token mask with the assistant spans found here
      independently: each assistant message's content (trimmed, as the
      templates write it) located in transformers' rendered text, on through
      the family's end-of-turn marker; a token is trained when its character
      span (the tokenizer's offsets) overlaps such a span."""
import json
import os
import struct
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "chat_templates")
# fixture, BOS, EOS, end-of-turn marker, the specials its template writes, Metaspace?
FAMILIES = {
    "chatml": ("chatml.jinja", "<s>", "<|im_end|>", "<|im_end|>", ["<|im_start|>", "<|im_end|>"], False),
    "qwen25": ("Qwen-Qwen2.5-7B-Instruct.jinja", None, "<|im_end|>", "<|im_end|>", ["<|im_start|>", "<|im_end|>"], False),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", None, "<|im_end|>", "<|im_end|>",
              ["<|im_start|>", "<|im_end|>", "<think>", "</think>"], False),
    "llama31": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>",
                ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], False),
    "mistral": ("mistralai-Mistral-7B-Instruct-v0.3.jinja", "<s>", "</s>", "</s>", ["<s>", "</s>", "[INST]", "[/INST]"], True),
}
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "The capital of France is Paris."}],
    [{"role": "system", "content": "You are a careful assistant."},
     {"role": "user", "content": "Name a prime number."},
     {"role": "assistant", "content": "Seven is prime."},
     {"role": "user", "content": "And an even one?"},
     {"role": "assistant", "content": "Two, the only even prime."}],
    [{"role": "user", "content": "Translate: good morning"},
     {"role": "assistant", "content": "Bonjour — «ß» 你好 ✓"}],
]
CORPUS = ["The capital of France is Paris. Seven is prime. Two, the only even prime.",
          "You are a careful assistant. Name a prime number. And an even one? What is the capital of France?",
          "Translate: good morning. Bonjour. Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024",
          "system user assistant tool You are Qwen, created by Alibaba Cloud. You are a helpful assistant."] * 20


def make(root):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    for name, (fixture, bos, eos, _end, specials, metaspace) in FAMILIES.items():
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        tok = Tokenizer(models.BPE(unk_token=None))
        if metaspace:
            tok.pre_tokenizer = pre_tokenizers.Metaspace()
            tok.decoder = decoders.Metaspace()
            alphabet = []
        else:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            alphabet = pre_tokenizers.ByteLevel.alphabet()
        extra = [s for s in (bos, eos) if s and s not in specials]
        trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=specials + extra, initial_alphabet=alphabet,
                                      show_progress=False)
        corpus = CORPUS + [m["content"] for c in CONVERSATIONS for m in c]
        tok.train_from_iterator(corpus, trainer)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(FIXTURES, fixture), encoding="utf-8") as f:
            template = f.read()
        cfg = {"chat_template": template, "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos}
        if bos:
            cfg["bos_token"] = bos
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        with open(os.path.join(d, "conv.jsonl"), "w", encoding="utf-8") as f:
            for c in CONVERSATIONS:
                f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")


def read_token_file(path):
    with open(path, "rb") as f:
        data = f.read()
    h = struct.unpack("<256i", data[:1024])
    assert h[0] == 20240520 and h[1] == 3, "not a version-3 token file: %s" % (h[:6],)
    n, width = h[2], h[6]
    fmt = "<%d%s" % (n, "H" if width == 2 else "I")
    ids = list(struct.unpack(fmt, data[1024:1024 + width * n]))
    bits = data[1024 + width * n:]
    mask = [(bits[i // 8] >> (i % 8)) & 1 for i in range(n)]
    return ids, mask


def check(root):
    from transformers import PreTrainedTokenizerFast
    bad = 0
    for name, (fixture, bos, eos, end, _s, _m) in FAMILIES.items():
        d = os.path.join(root, name)
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), bos_token=bos, eos_token=eos)
        tok.chat_template = cfg["chat_template"]
        ids, mask = read_token_file(os.path.join(d, "conv.bin"))
        at, trained_total = 0, 0
        for k, conv in enumerate(CONVERSATIONS):
            ref = tok.apply_chat_template(conv, tokenize=True)
            if hasattr(ref, "keys"):
                ref = ref["input_ids"]
            got = ids[at:at + len(ref)]
            text = tok.apply_chat_template(conv, tokenize=False)
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            if got != list(ref) or enc["input_ids"] != list(ref):
                print("FAIL %s conversation %d: ids differ from apply_chat_template's\n  zinf %s\n  hf   %s" % (name, k, got, list(ref)))
                bad = 1
                at += len(ref)
                continue
            spans, cur = [], 0
            for m in conv:
                if m["role"] != "assistant":
                    continue
                c = m["content"].strip()
                s = text.find(c, cur)
                if s < 0:
                    print("FAIL %s conversation %d: %r not in the rendered text" % (name, k, c))
                    bad = 1
                    break
                e = text.find(end, s + len(c))
                e = e + len(end) if e >= 0 else s + len(c)
                spans.append((s, e))
                cur = e
            want = [1 if any(a < se and b > ss for ss, se in spans) else 0 for a, b in enc["offset_mapping"]]
            have = mask[at:at + len(ref)]
            if want != have:
                print("FAIL %s conversation %d: the trained tokens differ\n  zinf %s\n  want %s\n  %s" % (
                    name, k, have, want, [tok.decode([t]) for t in ref]))
                bad = 1
            trained_total += sum(have)
            at += len(ref)
        if at != len(ids):
            print("FAIL %s: the file holds %d tokens, the conversations %d" % (name, len(ids), at))
            bad = 1
        if not bad:
            print("ok   %s (%s): %d conversations, %d tokens equal to apply_chat_template's, %d trained: the assistant "
                  "messages through %s" % (name, fixture, len(CONVERSATIONS), at, trained_total, end))
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
