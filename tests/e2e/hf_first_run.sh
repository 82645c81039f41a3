#!/bin/sh
# A user's first fine-tune, the mistakes people make, and what they are
# told: each case runs the user's command and checks the exit status and
# the message (a fragment of it), and that nothing was trained or written
# where it was refused.
#   - zinfc: --ranks N (the detected host has one rank a core), zinfrun's
#     refusal of a plan for another rank count names it; --seq beyond the
#     model's positions; a pinned tier too small is named with its
#     shortfall;
#   - zinftok: an empty corpus, a directory as input, a model directory
#     as --tokenizer; a token file made by another tokenizer of the same
#     vocabulary size, refused by zinfrun --init (Python part);
#   - a host plan's --explain and zinfdump never say GPU;
#   - zinfrun: --quiet keeps the evaluation's loss; --steps under --resume;
#     a .zl given as the plan; zinfgen --prompt with the tokenizer of an
#     --init directory (Python part).
# The Python part needs the environment `make deps` makes; without it
# that part says "skip".
#   tests/e2e/hf_first_run.sh BUILD
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir first
export OMP_NUM_THREADS=1 ZINF_PROBE=none TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; [ -f "$W/out" ] && tail -6 "$W/out"; fail=1; }
# expect NAME RC FRAGMENT command...: exit RC and the message, no step trained
expect() {
  name=$1; want_rc=$2; want=$3; shift 3
  timeout 300 "$@" > "$W/out" 2>&1 < /dev/null
  rc=$?
  if [ $rc -ne "$want_rc" ]; then bad "$name: exit $rc, not $want_rc"; return 1; fi
  if ! grep -q -- "$want" "$W/out"; then bad "$name: the message lacks '$want'"; return 1; fi
  if grep -q "^step " "$W/out"; then bad "$name: a step was trained"; return 1; fi
  ok "$name (exit $rc): $(grep -m1 -- "$want" "$W/out" | cut -c1-180)"
}

"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
cat > "$W/m.zl" <<ZL
import "$ROOT/examples/gpt2-tiny"
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1 GB/s; write = 1 GB/s; capacity = 1 MiB } }
ZL
"$B/bin/zinfc" "$W/m.zl" -o "$W/m.plan" > /dev/null || exit 1
RUN="$B/bin/zinfrun"

# --- zinfc ---
# no target anywhere: the detected host, one rank a core; --ranks 1 plans for one process
cores=$(getconf _NPROCESSORS_ONLN)
"$B/bin/zinfc" "$ROOT/examples/gpt2-tiny.zl" -o "$W/auto.plan" > "$W/out" 2>&1 || bad "zinfc without a target"
if [ "$cores" -gt 1 ]; then
  grep -q "^  $cores ranks, one a core of this machine: run it with mpirun -np $cores zinfrun $W/auto.plan; zinfc --ranks 1 plans for a plain zinfrun" "$W/out" &&
    ok "zinfc without a target says how to run its $cores ranks and how to plan for one" || bad "no word on the detected rank count"
fi
"$B/bin/zinfc" "$ROOT/examples/gpt2-tiny.zl" --ranks 1 -o "$W/one.plan" > "$W/out" 2>&1 &&
  grep -q "^wrote $W/one.plan: gpt2_tiny on .*, 1 rank," "$W/out" && ok "zinfc --ranks 1: $(grep '^wrote' "$W/out" | cut -c1-120)" ||
  bad "zinfc --ranks 1"
timeout 120 "$RUN" "$W/one.plan" --data "$W/train.bin" --steps 1 --quiet > "$W/out" 2>&1 < /dev/null && ok "the --ranks 1 plan runs as a plain zinfrun" || bad "running the --ranks 1 plan"
"$B/bin/zinfc" "$ROOT/examples/gpt2-tiny.zl" --ranks 2 -o "$W/two.plan" > /dev/null 2>&1 || bad "zinfc --ranks 2"
expect "a 2-rank plan run as one process" 1 "zinfrun: the plan is for 2 ranks but this job has 1: run it with mpirun -np 2, or plan it for 1 with zinfc ... --ranks 1 -o PLAN" \
  "$RUN" "$W/two.plan" --data "$W/train.bin" --steps 1
expect "zinfc --ranks 0" 2 "zinfc: --ranks needs a number of ranks (1 or more), not '0'" "$B/bin/zinfc" "$ROOT/examples/gpt2-tiny.zl" --ranks 0 -o "$W/x.plan"
# a pinned tier too small: the tier is named, with its shortfall
cp "$W/m.zl" "$W/pin.zl"
echo 'plan { params = "nvme"; optimizer = "nvme" }' >> "$W/pin.zl"
expect "NVMe too small for the pinned state" 1 "error: the plan block puts params and optimizer on nvme: .* per rank, more than the target's 1.00 MiB of nvme per rank (short by " \
  "$B/bin/zinfc" "$W/pin.zl" -o "$W/pin.plan"
# --seq beyond the model's positions
mkdir -p "$W/cfg"
echo '{"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64}' > "$W/cfg/config.json"
expect "--seq beyond max_position_embeddings" 1 "error: --seq 512 is longer than max_position_embeddings = 64, the longest context the model supports" \
  "$B/bin/zinfc" --from-hf "$W/cfg" --seq 512 --check
grep -q "hint: --seq 64 or less; to train longer sequences, raise max_position_embeddings in config.json" "$W/out" && ok "  with the hint" || bad "no --seq hint"

# a target written by hand: every missing key in one message, and where a measured one comes from
echo 'target box { backend = "host" }' > "$W/t0.zl"
expect "a target missing its required keys" 1 "error: target 'box' needs 'ranks', 'budget', 'memory' in its cpu block" \
  "$B/bin/zinfc" "$ROOT/examples/gpt2-tiny.zl" --target "$W/t0.zl" -o "$W/x.plan"
grep -q "hint: a host target needs ranks, budget and cpu { memory }, and nvme { paths; capacity } to offload to NVMe; zinfprobe \[--nvme DIR\] -o FILE writes one" "$W/out" &&
  ok "  with the hint naming zinfprobe" || bad "no hint for the target's keys"
# a host target's plan speaks of the device arena in host memory, never of a GPU
"$B/bin/zinfc" "$W/m.zl" -o "$W/host.plan" --explain > "$W/out" 2>&1 && "$B/bin/zinfdump" "$W/host.plan" >> "$W/out" 2>&1 || bad "planning and dumping a host plan"
if ! grep -q "GPU" "$W/out" && grep -q "^wrote $W/host.plan: .*, device arena peak .* per rank (host memory)," "$W/out" &&
   grep -q "^host backend: the tier called gpu (plan { ... = \"gpu\" }) is each rank's device arena, in host memory" "$W/out" &&
   grep -q "^  (host backend: the gpu arena is each rank's device arena, in host memory)" "$W/out"; then
  ok "a host plan: --explain and zinfdump say device arena, never GPU"
else grep -n "GPU" "$W/out" | head -5; bad "a host plan's wording"; fi

# --- zinftok ---
: > "$W/empty.txt"
expect "zinftok of an empty corpus" 1 "zinftok: no tokens: the input is empty (0 bytes of text); nothing written" \
  "$B/bin/zinftok" "$W/empty.txt" -o "$W/empty.bin"
[ ! -e "$W/empty.bin" ] && ok "  no token file written" || bad "an empty token file was written"
expect "zinftok of a directory" 1 "zinftok: $W/cfg is a directory: give the text files in it ($W/cfg/\*.txt)" \
  "$B/bin/zinftok" "$W/cfg" -o "$W/dir.bin"
expect "zinftok --tokenizer of a directory without tokenizer.json" 1 "zinftok: --tokenizer $W/cfg is a directory without a tokenizer.json" \
  "$B/bin/zinftok" --tokenizer "$W/cfg" "$W/empty.txt" -o "$W/dir.bin"

# --- zinfrun ---
expect "a .zl given as the plan" 1 "is a model's source: compile it into a plan first, zinfc $W/m.zl -o model.plan" \
  "$RUN" "$W/m.zl" --data "$W/train.bin" --steps 1
timeout 120 "$RUN" "$W/one.plan" --data "$W/train.bin" --eval-data "$W/train.bin" --eval-batches 2 --steps 2 --quiet > "$W/out" 2>&1 < /dev/null &&
  grep -q "^eval: loss [0-9.]* at step 2 ($W/train.bin, 2 batches)" "$W/out" &&
  ok "--quiet keeps the evaluation: $(grep '^eval:' "$W/out")" || bad "--quiet hides the evaluation"
timeout 120 "$RUN" "$W/one.plan" --data "$W/train.bin" --steps 3 --checkpoint-dir "$W/ck" --quiet > /dev/null 2>&1 < /dev/null || bad "3 steps"
timeout 120 "$RUN" "$W/one.plan" --data "$W/train.bin" --steps 2 --checkpoint-dir "$W/ck" --resume > "$W/out" 2>&1 < /dev/null &&
  grep -q "^done: nothing to train: the checkpoint is at step 3 and --steps 2 is the step to train to, counted from the first run's step 0 (--steps 5 trains 2 more)" "$W/out" &&
  ok "--steps under --resume: $(grep '^done:' "$W/out" | cut -c1-150)" || bad "--steps under --resume"
timeout 120 "$RUN" "$W/one.plan" --data "$W/train.bin" --steps 5 --checkpoint-dir "$W/ck" --resume > "$W/out" 2>&1 < /dev/null &&
  grep -q "^done: 2 steps" "$W/out" && ok "  and --steps 5 trains 2 more" || bad "--steps 5 after step 3"

# --- the Python part: a model directory with its tokenizer ---
. tests/pyenv.sh
if [ -z "$ZINF_PY" ]; then e2e_skip_part "the tokenizer cases: no Python environment with transformers (make deps)"; e2e_end $fail; fi
cp /usr/share/common-licenses/GPL-3 "$W/corpus.txt"
cat README.md docs/*.md > "$W/other.txt"
"$ZINF_PY" - "$W" <<'PY' > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the model directory"; exit 1; }
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
w = sys.argv[1]
def train(text):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([text], trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok
tok, other = train(w + "/corpus.txt"), train(w + "/other.txt")
assert tok.get_vocab_size() == other.get_vocab_size()
other.save(w + "/other-tokenizer.json")
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
                  bos_token_id=0, eos_token_id=0)
LlamaForCausalLM(cfg).save_pretrained(w + "/hf")
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(w + "/hf")
PY
"$B/bin/zinfc" --from-hf "$W/hf" --ranks 1 -o "$W/hf.plan" > "$W/out" 2>&1 || bad "zinfc --from-hf --ranks 1"
"$B/bin/zinftok" --tokenizer "$W/hf" "$W/corpus.txt" -o "$W/own.bin" > "$W/out" 2>&1 &&
  grep -q "$W/hf/tokenizer.json: byte-level BPE" "$W/out" && ok "zinftok --tokenizer DIR takes DIR/tokenizer.json" || bad "zinftok --tokenizer DIR"
"$B/bin/zinftok" --tokenizer "$W/other-tokenizer.json" "$W/corpus.txt" -o "$W/other.bin" > /dev/null 2>&1 || bad "zinftok with the other tokenizer"
expect "a token file of another tokenizer of the same vocabulary size" 1 "zinfrun: $W/other.bin was made by another tokenizer than $W/hf/tokenizer.json (beside --init): its ids are other tokens to this model; tokenize the text again with zinftok --tokenizer $W/hf/tokenizer.json" \
  "$RUN" "$W/hf.plan" --init "$W/hf" --data "$W/other.bin" --steps 1
timeout 120 "$RUN" "$W/hf.plan" --init "$W/hf" --data "$W/own.bin" --steps 1 > "$W/out" 2>&1 < /dev/null &&
  ok "the model's own tokenizer's file is accepted" || bad "the own token file refused"
timeout 120 "$B/bin/zinfgen" "$W/hf.plan" --init "$W/hf" --prompt "The" --max-new 4 > "$W/out" 2>&1 < /dev/null &&
  ok "zinfgen --prompt with the tokenizer of --init's directory" || bad "zinfgen --prompt without --tokenizer"
e2e_end $fail
