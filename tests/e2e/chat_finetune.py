"""Helper of tests/e2e/chat_finetune.sh.

  python chat_finetune.py make DIR   DIR/hf: a small random LLaMA with a
                                     byte-level tokenizer and the ChatML
                                     template in its tokenizer_config.json;
                                     DIR/train.jsonl and DIR/heldout.jsonl:
                                     arithmetic conversations (a system
                                     message, a question, an answer)
  python chat_finetune.py check DIR  the full fine-tune DIR/full and the LoRA
                                     adapter DIR/adapter (onto DIR/hf with
                                     peft) load, and each one's loss on the
                                     held-out answers (labels -100 except the
                                     assistant message and its <|im_end|>) is
                                     below the original model's"""
import json
import warnings
import os
import random
import sys

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "chat_templates", "chatml.jinja")
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen"]


def conversation(r):
    a, b = r.randrange(10), r.randrange(10)
    return [{"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "What is %s plus %s?" % (WORDS[a], WORDS[b])},
            {"role": "assistant", "content": "%s plus %s is %s." % (WORDS[a], WORDS[b], WORDS[a + b])}]


def make(w):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    r = random.Random(7)
    train = [conversation(r) for _ in range(400)]
    held = [conversation(r) for _ in range(40)]
    for name, convs in (("train", train), ("heldout", held)):
        with open(os.path.join(w, name + ".jsonl"), "w") as f:
            for c in convs:
                f.write(json.dumps({"messages": c}) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [m["content"] for c in train for m in c] + ["system user assistant"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_start|>", "<|im_end|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(w + "/hf")
    t = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    t.save_pretrained(w + "/hf")
    p = w + "/hf/tokenizer_config.json"
    c = json.load(open(p))
    c["chat_template"] = open(FIX).read()
    json.dump(c, open(p, "w"))


def heldout_loss(model, tok, convs):
    import torch
    total, count = 0.0, 0
    for c in convs:
        text = tok.apply_chat_template(c, tokenize=False)
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ans = c[-1]["content"]
        s = text.rfind(ans)
        e = text.find("<|im_end|>", s) + len("<|im_end|>")
        labels = [i if a < e and b > s else -100 for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"])]
        x = torch.tensor([enc["input_ids"]])
        with torch.no_grad():
            out = model(x, labels=torch.tensor([labels]))
        n = sum(1 for l in labels[1:] if l != -100)
        total += out.loss.item() * n
        count += n
    return total / count


def check(w):
    warnings.filterwarnings("ignore")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging
    logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(w + "/hf")
    held = [json.loads(l)["messages"] for l in open(w + "/heldout.jsonl")]
    base = AutoModelForCausalLM.from_pretrained(w + "/hf").eval()
    lb = heldout_loss(base, tok, held)
    full, info = AutoModelForCausalLM.from_pretrained(w + "/full", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    lf = heldout_loss(full.eval(), tok, held)
    lora = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(w + "/hf"), w + "/adapter").eval()
    ll = heldout_loss(lora, tok, held)
    ok = lf < lb - 1.0 and ll < lb - 0.3
    print("%s held-out answer loss (%d conversations, the assistant tokens only): %.3f before, %.3f after the full "
          "fine-tune, %.3f with the LoRA adapter (peft)" % ("ok  " if ok else "FAIL", len(held), lb, lf, ll))
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
