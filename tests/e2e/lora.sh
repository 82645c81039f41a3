#!/bin/sh
# LoRA fine-tuning against peft (docs/huggingface.md "LoRA"), for a small
# random LLaMA, OLMo 2, Phi-3, Gemma and GPT-2 from transformers
# (tests/e2e/lora.py). Each is compiled with zinfc --from-hf --lora:
#   LLaMA  r=4,alpha=8,targets=q_proj,v_proj,down_proj
#   OLMo 2 the same (its q and k norms after the adapted projections)
#   LLaMA with attention_bias, mlp_bias and a head_dim of its own (heads *
#          head_dim != hidden) r=4,alpha=8,targets=q_proj,o_proj,down_proj
#   Phi-3  r=4,alpha=8,targets=o_proj,down_proj (its unfused linears)
#   Phi-4-mini's rope (partial rotary 0.75, longrope within the original
#          context, --seq 16) the same
#   Gemma 2 r=4,alpha=8,targets=q_proj,o_proj,up_proj,down_proj
#   Gemma 3 r=4,alpha=8,targets=q_proj,k_proj,v_proj,down_proj (q/k norms
#          after the adapted projections; a window holding the sequence)
#   GPT-2  r=4,alpha=16,targets=c_attn,c_proj,c_fc (Conv1D layers; "c_proj"
#          is attn's and mlp's, as PEFT's target is)
# adapters on those linears, everything else frozen (freeze = ["*",
# "!*.lora_*"]). zinfrun --init trains 3 steps on the host backend and
# --export-hf's the adapter (PEFT layout); --resume --steps 0 --merge-lora
# exports the merged model of the same checkpoint, and a --resume runs step
# 4 (its loss: the weights after 3 steps). Checked (lora.py): the adapter
# (r, lora_alpha, target_modules, fan_in_fan_out; each A [r, in] and B
# [out, r] of its linear) loads with
# PeftModel.from_pretrained onto the base and gives step 4's loss, and so
# does the merged model with from_pretrained (1e-5 relative); the merged
# weights equal peft's merge_and_unload and keep the checkpoint's biases;
# the frozen base weights are bit-identical to the checkpoint.
#   tests/e2e/lora.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py "transformers and peft"
e2e_workdir lora; W0=$W
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1
cat > "$W0/t.zl" <<ZL
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
# Python starts twice (lora.py make for both kinds, lora.py check for both):
# importing torch, transformers and peft costs seconds, each check less.
KINDS="llama llama-bias olmo2 phi3 phi4 gemma2 gemma3 gpt2"
for k in $KINDS; do mkdir -p "$W0/$k"; done
# shellcheck disable=SC2086
"$ZINF_PY" tests/e2e/lora.py make "$W0" $KINDS > "$W0/make.log" 2>&1 || { cat "$W0/make.log"; echo "FAIL: making the models"; exit 1; }
# one KIND SPEC OPTIONS [SEQ]: OPTIONS is what the generated block call must say
one() {
  W="$W0/$1"
  # shellcheck disable=SC2086
  "$B/bin/zinfc" --from-hf "$W/hf" ${4:+--seq $4} --lora "$2" --emit=zl > "$W/gen.zl" 2> "$W/gen.err" ||
    { cat "$W/gen.err"; echo "FAIL: $1: zinfc --from-hf --lora"; return 1; }
  grep -q "$3" "$W/gen.zl" && grep -q '^  freeze = \["\*", "!\*.lora_\*"\]' "$W/gen.zl" ||
    { cat "$W/gen.zl"; echo "FAIL: $1: --lora: no adapters or no freeze line"; return 1; }
  sed -e 's/lr = 2e-5/lr = 0.01/' -e 's/warmup = 20$/warmup = 0/' "$W/gen.zl" > "$W/lora.zl"
  "$B/bin/zinfc" "$W/lora.zl" --target "$W0/t.zl" -o "$W/lora.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; echo "FAIL: $1: zinfc"; return 1; }
  for a in "--init $W/hf --steps 3 --export-hf $W/adapter" "--resume --steps 0 --merge-lora --export-hf $W/merged" \
           "--resume --steps 4 --losses $W/losses --export $W/all.safetensors"; do
    # shellcheck disable=SC2086
    timeout 120 "$B/bin/zinfrun" "$W/lora.plan" --data "$W/tok.bin" --backend host --quiet --checkpoint-dir "$W/ck" $a \
      < /dev/null > "$W/run.out" 2>&1 || { cat "$W/run.out"; echo "FAIL: $1: zinfrun $a"; return 1; }
  done
  ran="$ran $1"
}
fail=0 ran=""
one llama r=4,alpha=8,targets=q_proj,v_proj,down_proj 'lora_q = true, lora_v = true, lora_down = true' || fail=1
one olmo2 r=4,alpha=8,targets=q_proj,v_proj,down_proj 'lora_q = true, lora_v = true, lora_down = true' || fail=1
one llama-bias r=4,alpha=8,targets=q_proj,o_proj,down_proj 'lora_q = true, lora_o = true, lora_down = true' || fail=1
one phi3 r=4,alpha=8,targets=o_proj,down_proj 'lora_o = true, lora_down = true' || fail=1
one phi4 r=4,alpha=8,targets=o_proj,down_proj 'lora_o = true, lora_down = true' 16 || fail=1
# (the case is Phi-4-mini's rope only if the model turns 12 columns by longrope's short factors, scaled)
grep -q "rotary_dim = 12" "$W0/phi4/gen.zl" &&
  grep -q 'rope_scaling = "longrope", original_max_positions = 16, attention_factor = 1.118033988' "$W0/phi4/gen.zl" ||
  { grep -n "rotary_dim\|longrope" "$W0/phi4/gen.zl"; echo "FAIL: phi4: no rotary_dim = 12 or no longrope"; fail=1; }
one gemma2 r=4,alpha=8,targets=q_proj,o_proj,up_proj,down_proj 'lora_q = true, lora_o = true, lora_up = true, lora_down = true' || fail=1
one gemma3 r=4,alpha=8,targets=q_proj,k_proj,v_proj,down_proj 'lora_q = true, lora_k = true, lora_v = true, lora_down = true' || fail=1
one gpt2 r=4,alpha=16,targets=c_attn,c_proj,c_fc \
  'lora_c_attn = true, lora_attn_c_proj = true, lora_c_fc = true, lora_mlp_c_proj = true' || fail=1
# shellcheck disable=SC2086
if [ -n "$ran" ]; then "$ZINF_PY" tests/e2e/lora.py check "$W0" 4 $ran || fail=1; fi
exit $fail
