#!/bin/sh
# zinfgen --chat (docs/generation.md): a conversation rendered by the chat
# template of the tokenizer_config.json beside --tokenizer, with the
# generation prompt, tokenized whole, greedy: its text equals transformers'
# generate() on apply_chat_template(add_generation_prompt=True), for a
# small random LLaMA with a ChatML template (tests/fixtures/chat_templates).
# The template's eos_token stops it: the config names the token the model
# greedily makes third, and both stop there (the answer is the first two).
# Messages as a file too; refusals: --chat without a tokenizer, a tokenizer
# without a template, malformed JSON.
#   tests/e2e/zinfgen_chat.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir genchat
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
MSG='[{"role":"system","content":"You are terse."},{"role":"user","content":"Name the license of this text."}]'
"$ZINF_PY" - "$W" "$MSG" tests/fixtures/chat_templates/chatml.jinja <<'PY' > "$W/want" 2> "$W/make.log" || { cat "$W/make.log"; echo "FAIL: making the model"; exit 1; }
import json, sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
w, msgs, tmpl = sys.argv[1], json.loads(sys.argv[2]), open(sys.argv[3]).read()
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(["/usr/share/common-licenses/GPL-3"], trainers.BpeTrainer(vocab_size=512, special_tokens=["<|im_start|>", "<|im_end|>"],
          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)
m = LlamaForCausalLM(cfg)
with torch.no_grad():
    for p in m.parameters():
        if p.dim() == 2: p.normal_(0, 0.3)
m.save_pretrained(w + "/hf")
t = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
t.chat_template = tmpl
ids = t.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
if hasattr(ids, "keys"): ids = ids["input_ids"]
x = torch.tensor([list(ids)])
free = m.generate(x, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0, attention_mask=torch.ones_like(x))[0, x.shape[1]:].tolist()
print("free " + t.decode(free, skip_special_tokens=True))
# the template's eos_token made the token the model makes third: it stops there
third = free[2]
assert third not in free[:2], "the third token repeats an earlier one: choose another seed"
stopped = m.generate(x, max_new_tokens=8, do_sample=False, eos_token_id=third, pad_token_id=0, attention_mask=torch.ones_like(x))[0, x.shape[1]:].tolist()
print("stop " + t.decode(stopped[:-1] if stopped[-1] == third else stopped, skip_special_tokens=True))
t.save_pretrained(w + "/hf")
cfg_path = w + "/hf/tokenizer_config.json"
c = json.load(open(cfg_path)); c["chat_template"] = tmpl; json.dump(c, open(cfg_path, "w"))
import shutil, os
os.makedirs(w + "/stop", exist_ok=True)
shutil.copy(w + "/hf/tokenizer.json", w + "/stop/tokenizer.json")
c["eos_token"] = t.convert_ids_to_tokens(third)
json.dump(c, open(w + "/stop/tokenizer_config.json", "w"))
PY
"$B/bin/zinfc" --from-hf "$W/hf" --seq 64 --emit=zl > "$W/model.zl" || { echo "FAIL: zinfc --from-hf"; exit 1; }
cat >> "$W/model.zl" <<ZL
target box { backend = "host"; ranks = 1; budget = 512 MiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
"$B/bin/zinfc" "$W/model.zl" -o "$W/model.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; echo "FAIL: zinfc"; exit 1; }
G="$B/bin/zinfgen $W/model.plan --init $W/hf --temperature 0 --max-new 8 --quiet"
fail=0
check() { # NAME WANT-LINE-PREFIX ARGS...
  n=$1 k=$2
  shift 2
  want=$(sed -n "s/^$k //p" "$W/want")
  # shellcheck disable=SC2086
  got=$($G "$@" 2> "$W/err")
  if [ $? -ne 0 ] || [ "$got" != "$want" ]; then
    cat "$W/err"; echo "FAIL $n: zinfgen [$got], transformers [$want]"; fail=1
  else
    echo "ok   $n: [$got] = transformers' generate"
  fi
}
check "--chat, 8 tokens" free --tokenizer "$W/hf/tokenizer.json" --chat "$MSG"
printf '{"messages": %s}\n' "$MSG" > "$W/msgs.json"
check "--chat FILE, stopped by the template's eos_token" stop --tokenizer "$W/stop/tokenizer.json" --chat "$W/msgs.json"
refuse() { # WANT ARGS...
  want=$1
  shift
  # shellcheck disable=SC2086
  if $G "$@" > /dev/null 2> "$W/err" || ! grep -qF -e "$want" "$W/err"; then cat "$W/err"; echo "FAIL: refusal '$want'"; fail=1; fi
}
mkdir -p "$W/empty"
refuse "zinfgen: --chat needs --tokenizer tokenizer.json (or an --init directory that holds one" --chat "$MSG" --init "$W/empty"
mkdir -p "$W/bare" && cp "$W/hf/tokenizer.json" "$W/bare/"
refuse "--chat needs the model's chat template: no tokenizer_config.json with a chat_template beside $W/bare/tokenizer.json (give --chat-template FILE)" \
  --tokenizer "$W/bare/tokenizer.json" --chat "$MSG"
refuse "zinfgen: --chat: malformed JSON: " --tokenizer "$W/hf/tokenizer.json" --chat '[{"role":'
[ $fail -eq 0 ] && echo "ok   zinfgen --chat refusals (no tokenizer, no template, malformed JSON)"
exit $fail
