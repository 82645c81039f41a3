#!/bin/sh
# The walkthrough of README.md and docs/huggingface.md, command for command:
# a user with a Hugging Face model directory (config.json, safetensors
# weights, tokenizer.json) and a text file fine-tunes it with zinf on the
# host backend with parameters and Adam state offloaded to NVMe, exports it,
# and loads the result in transformers.
#
# The model directory is made here (nothing is downloaded): a tokenizer
# trained with the tokenizers library on the corpus, and a small random
# LlamaForCausalLM of that vocabulary saved with save_pretrained. Checked:
# the loss falls while training, the export loads with from_pretrained
# (no missing or unexpected keys), its loss on the training text is below
# the original model's (the fine-tuned weights went out), and the tokens
# zinftok wrote are the tokenizer's own.
#   tests/e2e/hf_finetune.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hfft
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
fail=0
# A corpus that does not change with the repository (the demo's text; the
# docs as a fallback), so the loss curve checked below is the same every run.
CORPUS=$(ls /usr/share/common-licenses/GPL-3 2>/dev/null || true)
if [ -n "$CORPUS" ]; then cp "$CORPUS" "$W/corpus.txt"; else cat README.md docs/*.md > "$W/corpus.txt"; fi

# The user's starting point: a model directory.
"$ZINF_PY" - "$W" <<'PY' > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the model directory"; exit 1; }
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
w = sys.argv[1]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([w + "/corpus.txt"], trainers.BpeTrainer(vocab_size=1024, special_tokens=["<|endoftext|>"],
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
                  bos_token_id=0, eos_token_id=0)
LlamaForCausalLM(cfg).save_pretrained(w + "/hf")
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(w + "/hf")
PY

# 1. the model as .zl, with a plan block that puts parameters and Adam state on NVMe
"$B/bin/zinfc" --from-hf "$W/hf" --seq 64 --emit=zl > "$W/model.zl" || { echo "FAIL: zinfc --from-hf"; exit 1; }
sed -i -e 's/lr = 2e-5/lr = 3e-3/' -e 's/warmup = 20$/warmup = 2/' "$W/model.zl"
cat >> "$W/model.zl" <<ZL
target laptop { backend = "host"; ranks = 1; budget = 512 MiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
plan { params = "nvme"; optimizer = "nvme"; grads = "cpu" }
ZL
mkdir -p "$W/nvme"
# 2. plan it, 3. tokenize the corpus with the model's tokenizer, 4. fine-tune from the weights and export
"$B/bin/zinfc" "$W/model.zl" -o "$W/model.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; echo "FAIL: zinfc"; exit 1; }
"$B/bin/zinftok" --tokenizer "$W/hf/tokenizer.json" "$W/corpus.txt" -o "$W/train.bin" > "$W/tok.out" 2>&1 || { cat "$W/tok.out"; echo "FAIL: zinftok"; exit 1; }
timeout 300 "$B/bin/zinfrun" "$W/model.plan" --init "$W/hf" --data "$W/train.bin" --steps 30 --nvme "$W/nvme" \
    --checkpoint-dir "$W/ck" --losses "$W/losses" --export-hf "$W/out" < /dev/null > "$W/run.out" 2>&1 ||
  { cat "$W/run.out"; echo "FAIL: zinfrun --init --export-hf"; exit 1; }
grep -q "^init: " "$W/run.out" || { cat "$W/run.out"; echo "FAIL: no init line"; fail=1; }
first=$(sed -n 1p "$W/losses" | awk '{print $4}')
last=$(tail -n 1 "$W/losses" | awk '{print $4}')
if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'; then echo "ok   fine-tuning on NVMe offload: loss $first -> $last over 30 steps"
else echo "FAIL: the loss did not fall: $first -> $last"; fail=1; fi

# 5. the result in transformers
"$ZINF_PY" - "$W" <<'PY' || fail=1
import sys, struct, torch
import numpy as np
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging
logging.disable_progress_bar()
w = sys.argv[1]
tok = AutoTokenizer.from_pretrained(w + "/hf")
ids = tok(open(w + "/corpus.txt", encoding="utf-8").read())["input_ids"]
# zinftok wrote the tokenizer's ids (header of 256 int32, then the ids)
raw = open(w + "/train.bin", "rb").read()
hdr = struct.unpack("<256i", raw[:1024])
width = 2 if hdr[1] == 1 else 4
got = np.frombuffer(raw[1024:], dtype=np.uint16 if width == 2 else np.uint32).tolist()
assert got == ids or got[1:] == ids or got[:-1] == ids or got[1:-1] == ids, "zinftok's ids differ from the tokenizer's"
out, info = AutoModelForCausalLM.from_pretrained(w + "/out", output_loading_info=True)
assert not info["missing_keys"] and not info["unexpected_keys"], info
base = AutoModelForCausalLM.from_pretrained(w + "/hf")
x = torch.tensor([ids[:64 * 8 + 1]]).view(-1)
batch = torch.stack([x[i * 64:(i + 1) * 64 + 1] for i in range(8)])
with torch.no_grad():
    lb = base(batch[:, :-1], labels=batch[:, :-1]).loss.item()
    lo = out(batch[:, :-1], labels=batch[:, :-1]).loss.item()
assert lo < lb - 0.5, (lb, lo)
print("ok   the export loads in transformers (no missing or unexpected keys); loss on the text %.3f before, %.3f after" % (lb, lo))
PY
exit $fail
