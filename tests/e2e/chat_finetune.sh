#!/bin/sh
# "Fine-tune on a chat dataset" (docs/huggingface.md) end to end on a small
# random LLaMA whose tokenizer_config.json has the ChatML template
# (tests/e2e/chat_finetune.py makes it and the data): conversations in
# JSONL -> zinftok (the template renders them, the answers are trained) ->
# zinfc --from-hf, parameters and Adam state on NVMe -> zinfrun --init
# --export-hf, a full fine-tune and a LoRA one -> transformers loads the
# export and peft the adapter -> each one's loss on held-out answers is
# below the original model's. The training loss counts the answers only:
# the data line says how many tokens train.
#   tests/e2e/chat_finetune.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py "transformers and peft"
e2e_workdir chatft
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
"$ZINF_PY" tests/e2e/chat_finetune.py make "$W" > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the model and data"; exit 1; }
fail=0
"$B/bin/zinftok" --tokenizer "$W/hf/tokenizer.json" "$W/train.jsonl" -o "$W/train.bin" > "$W/tok.out" 2>&1 ||
  { cat "$W/tok.out"; echo "FAIL: zinftok"; exit 1; }
grep -q "400 conversations; trained tokens: " "$W/tok.out" || { cat "$W/tok.out"; echo "FAIL: zinftok's summary"; fail=1; }
cat > "$W/box.zl" <<ZL
target box { backend = "host"; ranks = 1; budget = 512 MiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
ZL
mkdir -p "$W/nvme"
for kind in full lora; do
  extra=""
  [ $kind = lora ] && extra="--lora r=8,alpha=16,targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
  # shellcheck disable=SC2086
  "$B/bin/zinfc" --from-hf "$W/hf" --seq 64 $extra --emit=zl > "$W/$kind.zl" 2> "$W/$kind.err" || { cat "$W/$kind.err"; echo "FAIL: $kind: zinfc --from-hf"; fail=1; continue; }
  lr=3e-3
  [ $kind = lora ] && lr=5e-2
  sed -i -e "s/lr = 2e-5/lr = $lr/" -e 's/warmup = 20$/warmup = 2/' "$W/$kind.zl"
  printf 'plan { params = "nvme"; optimizer = "nvme"; grads = "cpu" }\n' >> "$W/$kind.zl"
  out=full
  [ $kind = lora ] && out=adapter
  if ! "$B/bin/zinfc" "$W/$kind.zl" --target "$W/box.zl" -o "$W/$kind.plan" > "$W/$kind.zinfc" 2>&1; then
    cat "$W/$kind.zinfc"; echo "FAIL: $kind: zinfc"; fail=1; continue
  fi
  if ! timeout 300 "$B/bin/zinfrun" "$W/$kind.plan" --init "$W/hf" --data "$W/train.bin" --steps 60 --nvme "$W/nvme" \
       --losses "$W/$kind.losses" --export-hf "$W/$out" < /dev/null > "$W/$kind.out" 2>&1; then
    tail -5 "$W/$kind.out"; echo "FAIL: $kind: zinfrun"; fail=1; continue
  fi
  grep -q "^data: .*trained" "$W/$kind.out" || { grep "^data" "$W/$kind.out"; echo "FAIL: $kind: the data line does not count trained tokens"; fail=1; }
  echo "ok   $kind fine-tune on the answers, NVMe offload: loss $(sed -n 1p "$W/$kind.losses" | awk '{print $4}') -> $(tail -n 1 "$W/$kind.losses" | awk '{print $4}') over 60 steps"
done
[ $fail -eq 0 ] && { "$ZINF_PY" tests/e2e/chat_finetune.py check "$W" || fail=1; }
exit $fail
