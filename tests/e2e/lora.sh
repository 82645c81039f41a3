#!/bin/sh
# LoRA fine-tuning against peft (docs/huggingface.md "LoRA"). A small random
# LLaMA from transformers (tests/e2e/lora.py) is compiled with zinfc
# --from-hf --lora r=4,alpha=8,targets=q_proj,v_proj,down_proj: adapters on
# those linears, everything else frozen (freeze = ["*", "!*.lora_*"]).
# zinfrun --init trains 3 steps on the host backend and --export-hf's the
# adapter (PEFT layout); --resume --steps 0 --merge-lora exports the merged
# model of the same checkpoint, and a --resume runs step 4 (its loss: the
# weights after 3 steps). Checked (lora.py): the
# adapter loads with PeftModel.from_pretrained onto the base and gives step
# 4's loss, and so does the merged model with from_pretrained (1e-5
# relative); the merged weights equal peft's merge_and_unload; the frozen
# base weights are bit-identical to the checkpoint.
#   tests/e2e/lora.sh BUILD
B=${1:-build}
. tests/pyenv.sh
[ -n "$ZINF_PY" ] || { echo "skip lora: no Python environment with transformers and peft (make deps)"; exit 0; }
W=$(mktemp -d /tmp/zinf-lora.XXXXXX)
trap 'rm -rf "$W"' EXIT
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1
"$ZINF_PY" tests/e2e/lora.py make "$W" > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the model"; exit 1; }
"$B/bin/zinfc" --from-hf "$W/hf" --lora r=4,alpha=8,targets=q_proj,v_proj,down_proj --emit=zl > "$W/gen.zl" 2> "$W/gen.err" ||
  { cat "$W/gen.err"; echo "FAIL: zinfc --from-hf --lora"; exit 1; }
grep -q 'lora_q = true, lora_v = true, lora_down = true' "$W/gen.zl" && grep -q '^  freeze = \["\*", "!\*.lora_\*"\]' "$W/gen.zl" ||
  { cat "$W/gen.zl"; echo "FAIL: --lora: no adapters or no freeze line"; exit 1; }
sed -e 's/lr = 2e-5/lr = 0.01/' -e 's/warmup = 20$/warmup = 0/' "$W/gen.zl" > "$W/lora.zl"
cat > "$W/t.zl" <<ZL
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
"$B/bin/zinfc" "$W/lora.zl" --target "$W/t.zl" -o "$W/lora.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; echo "FAIL: zinfc"; exit 1; }
run() { timeout 120 "$B/bin/zinfrun" "$W/lora.plan" --data "$W/tok.bin" --backend host --quiet "$@" < /dev/null > "$W/run.out" 2>&1 ||
          { cat "$W/run.out"; echo "FAIL: zinfrun $*"; exit 1; }; }
run --init "$W/hf" --steps 3 --checkpoint-dir "$W/ck" --export-hf "$W/adapter"
run --resume --steps 0 --checkpoint-dir "$W/ck" --merge-lora --export-hf "$W/merged"
run --resume --steps 4 --checkpoint-dir "$W/ck" --losses "$W/losses" --export "$W/all.safetensors"
"$ZINF_PY" tests/e2e/lora.py check "$W" 4
