#!/bin/sh
# zinfgen: greedy tokens of an imported Hugging Face model equal
# transformers' generate(do_sample=False) token for token, on the host
# backend with the parameters on NVMe (fetched layer by layer every token),
# for prompts given as ids and as text through tokenizer.json, including a
# text that outgrows the window (the window slides: compared with
# transformers fed the same last T tokens); a checkpoint gives what the
# weights it holds give; sampling with a seed is reproducible, top-k 1 is
# greedy; bad input is one message and exit 1 or 2.
#   tests/e2e/zinfgen.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir gen
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
fail=0
cp /usr/share/common-licenses/GPL-3 "$W/corpus.txt"  # a text that does not change with the repository
"$ZINF_PY" - "$W" <<'PY' > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the model directory"; exit 1; }
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
w = sys.argv[1]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([w + "/corpus.txt"], trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
                  bos_token_id=0, eos_token_id=0)
m = LlamaForCausalLM(cfg)
with torch.no_grad():  # larger weights than the default init: peaked, varied logits, so greedy ties are unlikely
    for p in m.parameters():
        if p.dim() == 2: p.normal_(0, 0.3)
m.save_pretrained(w + "/hf")
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(w + "/hf")
PY
"$B/bin/zinfc" --from-hf "$W/hf" --seq 64 --emit=zl > "$W/model.zl" || { echo "FAIL: zinfc --from-hf"; exit 1; }
cp "$W/model.zl" "$W/gpu.zl"
cat >> "$W/model.zl" <<ZL
target box { backend = "host"; ranks = 1; budget = 512 MiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
plan { params = "nvme"; optimizer = "nvme"; grads = "cpu" }
ZL
mkdir -p "$W/nvme"
"$B/bin/zinfc" "$W/model.zl" -o "$W/model.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; echo "FAIL: zinfc"; exit 1; }
# the plan keeps the model state on NVMe (what the decoders below read it from)
"$B/bin/zinfdump" "$W/model.plan" > "$W/dump.out" 2>&1 &&
  grep "^model state homes per rank: " "$W/dump.out" | grep -qv ", nvme 0 B$" ||
  { cat "$W/dump.out"; echo "FAIL: the plan has no model state on NVMe"; exit 1; }
G="$B/bin/zinfgen $W/model.plan --init $W/hf --nvme $W/nvme --temperature 0"

# transformers' greedy tokens: ids prompts, a text prompt, and one that outgrows T = 64
"$ZINF_PY" - "$W" > "$W/want" 2> "$W/hf.err" <<'PY' || { cat "$W/hf.err"; echo "FAIL: transformers generate"; exit 1; }
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
w = sys.argv[1]
m = AutoModelForCausalLM.from_pretrained(w + "/hf").eval()
tok = AutoTokenizer.from_pretrained(w + "/hf")
def greedy(ids, n):
    out = m.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0,
                     attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()
for ids in ([5, 17, 300, 42], [1], list(range(100, 130))):
    print("ids", ",".join(map(str, ids)), " ".join(map(str, greedy(ids, 16))))
text = "zinf is a compiler and a runtime"
ids = tok(text)["input_ids"]
print("text", " ".join(map(str, greedy(ids, 16))), "|" + tok.decode(greedy(ids, 16)))
# sliding: a 60-token prompt and 12 new tokens, each predicted from the last 64 tokens
ids = list(range(200, 260)); out = []
for _ in range(12):
    ctx = (ids + out)[-64:]
    with torch.no_grad():
        out.append(int(m(torch.tensor([ctx])).logits[0, -1].argmax()))
print("slide", ",".join(map(str, ids)), " ".join(map(str, out)))
PY
# both decodes: the KV cache (one position a token) and the window (a whole
# forward of the plan's schedule a token) against transformers
while read -r kind prompt want; do
  for mode in kv window; do
    case $kind in
      ids)
        got=$($G --decode $mode --prompt-ids "$prompt" --max-new 16 2> "$W/err") || { cat "$W/err"; echo "FAIL ids $prompt"; fail=1; continue; }
        grep -q "$([ $mode = kv ] && echo 'KV cache of T = 64 positions' || echo 'window 1 x 64')" "$W/err" || { cat "$W/err"; echo "FAIL: --decode $mode not said"; fail=1; }
        [ "$got" = "$want" ] && echo "ok   greedy ids $prompt ($mode): $got" || { echo "FAIL greedy ids $prompt ($mode): zinfgen $got, transformers $want"; fail=1; } ;;
      slide)
        got=$($G --decode $mode --prompt-ids "$prompt" --max-new 12 --quiet 2> "$W/err") || { cat "$W/err"; echo "FAIL slide"; fail=1; continue; }
        [ "$got" = "$want" ] && echo "ok   the window slides past T ($mode): $got" || { echo "FAIL slide ($mode): zinfgen $got, transformers $want"; fail=1; } ;;
    esac
  done
done < "$W/want"
# text in, text out: the same tokens as transformers, decoded as it decodes them
want_text=$(sed -n 's/^text [^|]*|//p' "$W/want")
got=$($G --tokenizer "$W/hf/tokenizer.json" --prompt "zinf is a compiler and a runtime" --max-new 16 --quiet 2> "$W/err")
[ "$got" = "$want_text" ] && echo "ok   greedy text: '$got'" || { cat "$W/err"; echo "FAIL greedy text: zinfgen '$got', transformers '$want_text'"; fail=1; }

# sampling: the same seed, the same tokens; top-k 1 is greedy
S="$B/bin/zinfgen $W/model.plan --init $W/hf --nvme $W/nvme --prompt-ids 5,17,300,42 --max-new 16 --quiet"
a=$($S --temperature 0.8 --top-p 0.9 --seed 7); b=$($S --temperature 0.8 --top-p 0.9 --seed 7); c=$($S --temperature 0.8 --top-p 0.9 --seed 8)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] && echo "ok   seeded sampling reproducible ($a), another seed differs" || { echo "FAIL sampling: '$a' '$b' '$c'"; fail=1; }
k1=$($S --temperature 1.5 --top-k 1 --seed 3); gr=$($S --temperature 0)
[ "$k1" = "$gr" ] && echo "ok   top-k 1 equals greedy" || { echo "FAIL top-k 1 '$k1' greedy '$gr'"; fail=1; }

# a checkpoint: one step of lr 1e-30 (an update below half an ulp of every weight) from the imported weights
sed 's/lr = [0-9.e-]*/lr = 1e-30/g' "$W/model.zl" > "$W/lr0.zl"
"$B/bin/zinfc" "$W/lr0.zl" -o "$W/lr0.plan" > "$W/lr0.out" 2>&1 || { cat "$W/lr0.out"; echo "FAIL: zinfc lr0"; fail=1; }
"$B/bin/zinftok" --tokenizer "$W/hf/tokenizer.json" "$W/corpus.txt" -o "$W/train.bin" > /dev/null 2>&1
if "$B/bin/zinfrun" "$W/lr0.plan" --init "$W/hf" --data "$W/train.bin" --steps 1 --nvme "$W/nvme" --checkpoint-dir "$W/ck" --export "$W/lr0.safetensors" --quiet > "$W/run.out" 2>&1; then
  got=$("$B/bin/zinfgen" "$W/lr0.plan" --checkpoint "$W/ck" --nvme "$W/nvme" --prompt-ids 5,17,300,42 --max-new 16 --temperature 0 --quiet)
  want=$(awk '$1 == "ids" && $2 == "5,17,300,42" { $1 = ""; $2 = ""; sub(/^  /, ""); print }' "$W/want")
  [ "$got" = "$want" ] && echo "ok   --checkpoint (lr 1e-30): the imported weights' tokens" || { echo "FAIL --checkpoint: '$got' want '$want'"; fail=1; }
  # zinfrun --export's file (zinf's own names) as --init, read by the other plan of the model
  got=$("$B/bin/zinfgen" "$W/model.plan" --init "$W/lr0.safetensors" --nvme "$W/nvme" --prompt-ids 5,17,300,42 --max-new 16 --temperature 0 2> "$W/exp.err")
  [ "$got" = "$want" ] && grep -q "zinfrun --export: the plan's own names" "$W/exp.err" && echo "ok   --init of zinfrun --export's file: the same tokens" \
    || { cat "$W/exp.err"; echo "FAIL --init export: '$got' want '$want'"; fail=1; }
else cat "$W/run.out"; echo "FAIL: zinfrun lr 0"; fail=1; fi

# GPT-2 (learned positions through arange, layernorm, gelu, a tied head) on
# 2 ranks with parameters partitioned: trained 40 steps (it writes mostly
# spaces then, so greedy would say little), exported, then the KV cache's
# seeded samples at temperature 1 equal the window's (the plan's own
# forward): the same draws land on the same tokens only when both give the
# same distribution at every step. A slide past T = 64 included.
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/gpl.bin" > /dev/null
sed -e 's/^  steps = 200$/  steps = 40/' -e 's/^  warmup = 100$/  warmup = 5/' -e 's/lr = 1e-3/lr = 3e-3/' examples/gpt2-tiny.zl > "$W/g2.zl"
e2e_mpi
M2="timeout 120 mpirun -np 2 --oversubscribe"
if "$B/bin/zinfc" "$W/g2.zl" -o "$W/g2.plan" > "$W/g2.run" 2>&1 &&
   $M2 "$B/bin/zinfrun" "$W/g2.plan" --data "$W/gpl.bin" --export "$W/g2.safetensors" --quiet < /dev/null >> "$W/g2.run" 2>&1; then
  for prompt in "84,104,101,32" "$(seq -s, 40 99)"; do
    a=$($M2 "$B/bin/zinfgen" "$W/g2.plan" --init "$W/g2.safetensors" --prompt-ids "$prompt" --max-new 16 --temperature 1 --seed 7 --decode kv 2> "$W/g2.err")
    b=$($M2 "$B/bin/zinfgen" "$W/g2.plan" --init "$W/g2.safetensors" --prompt-ids "$prompt" --max-new 16 --temperature 1 --seed 7 --decode window --quiet)
    [ -n "$a" ] && [ "$a" = "$b" ] && grep -q "KV cache" "$W/g2.err" && echo "ok   gpt2-tiny, 2 ranks, prompt of $(echo "$prompt" | tr ',' '\n' | wc -l): KV cache = window: $a" ||
      { cat "$W/g2.err"; echo "FAIL gpt2-tiny kv '$a' window '$b'"; fail=1; }
  done
else cat "$W/g2.run"; echo "FAIL: gpt2-tiny training"; fail=1; fi

# bad input: one line, exit 1 (input) or 2 (usage)
check() { # status message args...
  st_want=$1; msg=$2; shift 2
  out=$("$B/bin/zinfgen" "$@" 2>&1 >/dev/null); st=$?
  if [ $st -eq "$st_want" ] && [ "$out" = "$msg" ]; then echo "ok   exit $st: $msg"; else echo "FAIL $*: exit $st: $out"; fail=1; fi
}
P="$W/model.plan"
check 2 "zinfgen: --temperature needs a number 0..1e+06, not 'hot'" "$P" --prompt-ids 1 --temperature hot
check 2 "zinfgen: --max-new needs a positive integer, not '0'" "$P" --prompt-ids 1 --max-new 0
check 2 "zinfgen: --top-p needs a number 1e-09..1, not '1.5'" "$P" --prompt-ids 1 --top-p 1.5
check 2 "zinfgen: --prompt-ids needs token ids like 1,2,3, not '1,,2'" "$P" --prompt-ids 1,,2 --nvme "$W/nvme"
check 2 "zinfgen: give one of --prompt TEXT, --chat MESSAGES and --prompt-ids 1,2,3" "$P"
check 2 "zinfgen: --prompt needs --tokenizer tokenizer.json (or an --init directory that holds one, or --prompt-ids)" "$P" --prompt hi
check 1 "zinfgen: the prompt has 65 tokens, more than the plan's window of T = 64 (compile with a longer --seq)" "$P" --nvme "$W/nvme" \
  --prompt-ids "$(seq -s, 1 65)"
check 1 "zinfgen: prompt token 0 is id 9999, outside the model's vocabulary of 512" "$P" --nvme "$W/nvme" --prompt-ids 9999
check 2 "zinfgen: --decode needs auto, kv or window, not 'cache'" "$P" --prompt-ids 1 --decode cache
out=$("$B/bin/zinfgen" "$P" --nvme "$W/nvme" --tokenizer "$W/none.json" --prompt hi 2>&1 >/dev/null); st=$?
[ $st -eq 1 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "ok   exit 1: $out" || { echo "FAIL missing tokenizer: exit $st: $out"; fail=1; }
exit $fail
