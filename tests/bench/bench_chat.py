"""Helper of tests/bench/bench_chat.sh.

  python bench_chat.py make DIR N     DIR/chat.jsonl: N conversations (a system
                                      message and two to six turns of varied
                                      lengths, seeded), and DIR/llama3, DIR/qwen25:
                                      a tokenizer.json trained on them with the
                                      family's specials and the fixture's template
  python bench_chat.py speed DIR FAM  transformers' apply_chat_template(tokenize=False)
                                      + the tokenizers library's encode, one thread,
                                      of every conversation already in memory, and
                                      the assistant mask from offsets (what zinftok
                                      does): prints "seconds bytes tokens"
"""
import json
import os
import random
import sys
import time

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "chat_templates")
FAMS = {"llama3": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
                   ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]),
        "qwen25": ("Qwen-Qwen2.5-7B-Instruct.jinja", None, "<|im_end|>", ["<|im_start|>", "<|im_end|>"])}
WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have an they "
         "you were her she there one all we their can has been if more when will would who so no model data train "
         "answer question number memory offload compiler plan kernel tensor gradient").split()


def sentence(r, n):
    return " ".join(r.choice(WORDS) for _ in range(n)).capitalize() + "."


def make(d, n):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    r = random.Random(11)
    convs = []
    for _ in range(n):
        c = [{"role": "system", "content": sentence(r, r.randint(5, 20))}]
        for _ in range(r.randint(1, 3)):
            c.append({"role": "user", "content": " ".join(sentence(r, r.randint(4, 30)) for _ in range(r.randint(1, 3)))})
            c.append({"role": "assistant", "content": " ".join(sentence(r, r.randint(4, 40)) for _ in range(r.randint(1, 6)))})
        convs.append(c)
    with open(os.path.join(d, "chat.jsonl"), "w") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}) + "\n")
    for fam, (fix, bos, eos, specials) in FAMS.items():
        os.makedirs(os.path.join(d, fam), exist_ok=True)
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator([m["content"] for c in convs[:2000] for m in c],
                                trainers.BpeTrainer(vocab_size=4000, special_tokens=specials,
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                    show_progress=False))
        tok.save(os.path.join(d, fam, "tokenizer.json"))
        cfg = {"chat_template": open(os.path.join(FIX, fix)).read(), "eos_token": eos}
        if bos:
            cfg["bos_token"] = bos
        json.dump(cfg, open(os.path.join(d, fam, "tokenizer_config.json"), "w"))


def speed(d, fam):
    from transformers import PreTrainedTokenizerFast
    fix, bos, eos, _ = FAMS[fam]
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, fam, "tokenizer.json"), bos_token=bos, eos_token=eos)
    tok.chat_template = json.load(open(os.path.join(d, fam, "tokenizer_config.json")))["chat_template"]
    convs = [json.loads(l)["messages"] for l in open(os.path.join(d, "chat.jsonl"))]
    nbytes = os.path.getsize(os.path.join(d, "chat.jsonl"))
    t0 = time.perf_counter()
    ntok = 0
    for c in convs:
        text = tok.apply_chat_template(c, tokenize=False)
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        spans, cur = [], 0
        for m in c:
            if m["role"] == "assistant":
                s = text.find(m["content"].strip(), cur)
                e = text.find(eos, s) + len(eos)
                spans.append((s, e))
                cur = e
        mask = [any(a < se and b > ss for ss, se in spans) for a, b in enc["offset_mapping"]]
        ntok += len(mask)
    print("%.6f %d %d" % (time.perf_counter() - t0, nbytes, ntok))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    else:
        speed(sys.argv[2], sys.argv[3])
