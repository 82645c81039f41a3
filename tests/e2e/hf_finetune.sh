#!/bin/sh
# The walkthrough of docs/huggingface.md, run as written: the block between
# its "walkthrough" markers is taken from the file and run by sh, command
# for command, with NVME set to a directory of this test and zinfprobe
# measuring once (--repeat 1) rather than three times, at the same sizes
# (the two lines changed: nothing checked reads the probe's figures, and
# three measurements take a minute on 2 cores). A user with a Hugging Face
# model directory (hf_dir: config.json, safetensors weights,
# tokenizer.json) and a text file (corpus.txt)
# fine-tunes it with zinf on the host backend with parameters and Adam
# state offloaded to NVMe, exports it, and generates text from the export
# with transformers' pipeline().
#
# The model directory is made here (nothing is downloaded): a tokenizer
# trained with the tokenizers library on the corpus, and a small random
# LlamaForCausalLM of that vocabulary saved with save_pretrained. Checked:
# every command of the block succeeds, the loss falls while training, the
# export loads with from_pretrained (no missing or unexpected keys) with
# the tokenizer and generation_config.json it was given, its loss on the
# training text is below the original model's (the fine-tuned weights went
# out), and the tokens zinftok wrote are the tokenizer's own.
#   tests/e2e/hf_finetune.sh BUILD
B=${1:-build}
ROOT=$(pwd)
case $B in /*) ;; *) B="$ROOT/$B" ;; esac
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
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False,
                  bos_token_id=0, eos_token_id=0)
LlamaForCausalLM(cfg).save_pretrained(w + "/hf_dir")
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(w + "/hf_dir")
PY

# The walkthrough's block, as docs/huggingface.md has it.
sed -n '/^<!-- walkthrough:/,/^<!-- \/walkthrough -->/p' docs/huggingface.md | sed -e '1d' -e '$d' -e 's/^    //' > "$W/walkthrough.sh"
grep -q '^zinfrun model.plan --init hf_dir' "$W/walkthrough.sh" && grep -q '^NVME=/mnt/nvme ' "$W/walkthrough.sh" &&
  grep -q '^zinfprobe --nvme \$NVME -o box.zl ' "$W/walkthrough.sh" ||
  { cat "$W/walkthrough.sh"; echo "FAIL: no walkthrough block in docs/huggingface.md"; exit 1; }
sed -i -e "s|^NVME=/mnt/nvme |NVME=$W/nvme |" -e 's|^zinfprobe --nvme \$NVME -o box.zl |zinfprobe --nvme $NVME --repeat 1 -o box.zl |' "$W/walkthrough.sh"
mkdir -p "$W/nvme" "$W/pybin"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$ZINF_PY" > "$W/pybin/python" && chmod +x "$W/pybin/python"  # the environment's python as `python`
# every command must succeed: set -e, and each command echoed (set -x) into the log
if (cd "$W" && PATH="$B/bin:$W/pybin:$PATH" ZINF_PROBE=none timeout 900 sh -ex walkthrough.sh < /dev/null > run.out 2>&1); then
  echo "ok   the walkthrough ran as written ($(grep -c "^+ " "$W/run.out") commands; pipeline() generated text from the export)"
else
  tail -30 "$W/run.out"; echo "FAIL: the walkthrough of docs/huggingface.md"; exit 1
fi
grep -q "^init: " "$W/run.out" || { echo "FAIL: no init line"; fail=1; }
grep -q "^  with tokenizer.json, tokenizer_config.json, generation_config.json copied from hf_dir (--init)" "$W/run.out" ||
  { echo "FAIL: the export does not say it copied the tokenizer"; fail=1; }
first=$(grep -m1 '^step ' "$W/run.out" | sed 's/.*loss \([0-9.]*\).*/\1/')
last=$(grep '^done: ' "$W/run.out" | sed 's/.*-> \([0-9.]*\),.*/\1/')
if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.1) }'; then echo "ok   fine-tuning on NVMe offload: loss $first -> $last"
else echo "FAIL: the loss did not fall: $first -> $last"; fail=1; fi

# 5. the result in transformers
"$ZINF_PY" - "$W" <<'PY' || fail=1
import sys, struct, torch
import numpy as np
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging
logging.disable_progress_bar()
w = sys.argv[1]
tok = AutoTokenizer.from_pretrained(w + "/finetuned")  # the export's own tokenizer files
ids = tok(open(w + "/corpus.txt", encoding="utf-8").read())["input_ids"]
# zinftok wrote the tokenizer's ids (header of 256 int32, then the ids)
raw = open(w + "/train.bin", "rb").read()
hdr = struct.unpack("<256i", raw[:1024])
width = 2 if hdr[1] == 1 else 4
got = np.frombuffer(raw[1024:], dtype=np.uint16 if width == 2 else np.uint32).tolist()
assert got == ids or got[1:] == ids or got[:-1] == ids or got[1:-1] == ids, "zinftok's ids differ from the tokenizer's"
out, info = AutoModelForCausalLM.from_pretrained(w + "/finetuned", output_loading_info=True)
assert not info["missing_keys"] and not info["unexpected_keys"], info
base = AutoModelForCausalLM.from_pretrained(w + "/hf_dir")
x = torch.tensor([ids[:512 * 4 + 1]]).view(-1)
batch = torch.stack([x[i * 512:(i + 1) * 512 + 1] for i in range(4)])
with torch.no_grad():
    lb = base(batch[:, :-1], labels=batch[:, :-1]).loss.item()
    lo = out(batch[:, :-1], labels=batch[:, :-1]).loss.item()
assert lo < lb - 0.1, (lb, lo)
import os
assert os.path.exists(w + "/finetuned/generation_config.json"), "no generation_config.json in the export"
print("ok   the export loads in transformers (no missing or unexpected keys); loss on the text %.3f before, %.3f after" % (lb, lo))
PY
exit $fail
