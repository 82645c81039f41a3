#!/bin/sh
# zinfc --from-hf for Gemma 2 and Gemma 3 against transformers (eager
# attention, the one that soft-caps; never downloads anything): small random
# models made here with save_pretrained (tests/e2e/hf_gemma.py): Gemma 2 with
# grouped kv heads, both soft-caps, a query_pre_attn_scalar other than
# head_dim, tied embeddings, and untied with attention biases and no
# soft-capping; Gemma 3 with q/k norms, global and sliding layers on their
# own rope bases (the global ones linearly scaled), and untied with biases,
# the final soft-cap and an attn_logit_softcapping it warns it ignores, as
# transformers does. For each:
#   - zinfc --from-hf DIR --emit=zl prints a model that checks as a file;
#   - the plan's mapping covers the checkpoint exactly (tests/e2e/hf_check.py);
#   - zinfrun --init imports the weights and runs one step: its loss and its
#     gradient's norm match transformers' within 1e-5 relative (f32);
#   - zinfrun --export-hf writes weights from_pretrained loads with no
#     missing or unexpected key, on which transformers computes that loss;
#   - after 2 training steps (checkpointed, exported), the export loads with
#     no missing or unexpected key and transformers' loss on it, on step 3's
#     window, is zinf's step-3 loss (1e-5 relative) and not that of the
#     weights before training;
#   - zinfgen greedy (KV cache and window decodes) equals generate;
# then a CUDA plan of Gemma 2 compiles its kernels, and the keys zinf cannot
# compute for Gemma are errors naming them.
#   tests/e2e/hf_gemma.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hf-gemma; T=$W
bad() { echo "FAIL: $*"; echo "$*" >> "$T/failed"; }
# |a - b| <= 1e-5 |b|

cat > "$T/one.zl" <<'EOF2'
target one {
  backend = "host"
  ranks = 1
  budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
}
EOF2

"$ZINF_PY" tests/e2e/hf_gemma.py make "$T" > "$T/hf-losses" 2> "$T/make.log" ||
  { cat "$T/make.log"; echo "FAIL: making the models or transformers' losses (above)"; exit 1; }
: > "$T/batch"; : > "$T/exports"
for c in $(cut -d' ' -f1 "$T/hf-losses"); do
  d=$T/$c
  seq=$(cat "$d.seq")
  if ! "$Z/zinfc" --from-hf "$d" --seq "$seq" --emit=zl > "$d.zl" 2> "$d.emit.err"; then
    cat "$d.emit.err"; bad "$c: --emit=zl"; continue
  fi
  "$Z/zinfc" "$d.zl" > "$d.check" 2>&1 || { cat "$d.check"; bad "$c: the emitted file does not check"; }
  case $c in *-w[0-9]*)
    grep -q "window = " "$d.zl" || bad "$c: the emitted model has no window"
    nw=$(awk -v c="$c" '$1 == c { print $4 }' "$T/hf-losses"); lw=$(awk -v c="$c" '$1 == c { print $2 }' "$T/hf-losses")
    awk -v a="$nw" -v b="$lw" 'BEGIN { e = (a - b) / b; if (e < 0) e = -e; exit !(a != "" && e > 1e-3) }' ||
      bad "$c: the window does not change transformers' loss ($lw, $nw without): the case tests nothing" ;;
  esac
  case $c in gemma3-untied-caps)
    grep -qF "attn_logit_softcapping = 3.0: transformers' Gemma 3 does not soft-cap attention logits, nor does zinf" "$d.emit.err" ||
      { cat "$d.emit.err"; bad "$c: no warning for attn_logit_softcapping"; } ;;
  esac
  "$Z/zinfc" --from-hf "$d" --seq "$seq" --target "$T/one.zl" -o "$d.plan" > "$d.plan.log" 2>&1 ||
    { cat "$d.plan.log"; bad "$c: -o plan"; continue; }
  "$Z/zinfdump" "$d.plan" --hf > "$d.hf" || bad "$c: zinfdump --hf"
  "$Z/zinfdump" "$d.plan" --hf-config > "$d.config" || bad "$c: zinfdump --hf-config"
  echo "check $c $d.hf $d $d.config" >> "$T/batch"
  if ! "$Z/zinfrun" "$d.plan" --backend host --init "$d" --data "$d.bin" --steps 1 --losses "$d.losses" > "$d.run.log" 2>&1; then
    cat "$d.run.log"; bad "$c: zinfrun --init"; continue
  fi
  got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$d.losses")
  gn=$(awk '$1 == "step" && $2 == 1 { print $6 }' "$d.losses")
  want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/hf-losses")
  wgn=$(awk -v c="$c" '$1 == c { print $3 }' "$T/hf-losses")
  if e2e_close "$got" "$want" 1e-5; then echo "ok $c: loss $got, transformers $want"
  else bad "$c: loss $got, transformers $want (more than 1e-5 apart)"; fi
  if e2e_close "$gn" "$wgn" 1e-5; then echo "ok $c: gradient norm $gn, transformers $wgn"
  else bad "$c: gradient norm $gn, transformers $wgn (more than 1e-5 apart)"; fi
  # the imported weights out again: transformers loads them whole and computes the same loss
  if ! "$Z/zinfrun" "$d.plan" --backend host --init "$d" --data "$d.bin" --steps 0 --export-hf "$d.export" > "$d.export.log" 2>&1; then
    cat "$d.export.log"; bad "$c: --export-hf"; continue
  fi
  # trained weights out: 2 steps (lr 1e-3, no warmup) checkpointed and exported, step 3 resumed from
  # the checkpoint; transformers' loss on the export, on step 3's window, is zinf's step-3 loss
  next=""
  sed -e 's/lr = 2e-5/lr = 1e-3/' -e 's/warmup = 20$/warmup = 0/' "$d.zl" > "$d.train.zl"
  grep -q "lr = 1e-3" "$d.train.zl" || bad "$c: the emitted model has no lr = 2e-5 to raise"
  if "$Z/zinfc" "$d.train.zl" --target "$T/one.zl" -o "$d.train.plan" > "$d.train.log" 2>&1 &&
     "$Z/zinfrun" "$d.train.plan" --backend host --init "$d" --data "$d.bin" --steps 2 --checkpoint-dir "$d.ck" \
       --export-hf "$d.next" >> "$d.train.log" 2>&1 &&
     "$Z/zinfrun" "$d.train.plan" --backend host --data "$d.bin" --steps 3 --checkpoint-dir "$d.ck" --resume \
       --losses "$d.next.losses" >> "$d.train.log" 2>&1; then next="$d.next 3"
  else cat "$d.train.log"; bad "$c: training, checkpointing and exporting"; fi
  # the export has the imported weights: transformers' greedy tokens from it are the original's
  # (read below, every case's exports by one Python: importing torch and transformers takes seconds)
  echo "$got $next" > "$d.got"
  echo "$d.export.out $c $d.export $d.bin $seq 5,17,30,42 10 $next" >> "$T/exports"
done
"$ZINF_PY" tests/e2e/hf_gemma.py exports "$T/exports" > "$T/exports.log" 2>&1
for c in $(cut -d' ' -f2 "$T/exports"); do
  d=$T/$c
  read -r got next < "$d.got"
  [ -f "$d.export.out" ] || { cat "$d.export.out.err" "$T/exports.log"; bad "$c: from_pretrained of the export"; continue; }
  hf_export_checks "$c" "$d" "$got" "$next"
  # greedy decoding, with the KV cache and by windows: transformers' generate token for token
  want=$(awk '$1 == "gen" { $1 = ""; $2 = ""; sub(/^ +/, ""); print }' "$d.export.out")
  for mode in kv window; do
    gen=$("$Z/zinfgen" "$d.plan" --init "$d" --temperature 0 --decode $mode --prompt-ids 5,17,30,42 --max-new 10 --quiet 2> "$d.zgen.err") ||
      { cat "$d.zgen.err"; bad "$c: zinfgen --decode $mode"; continue; }
    if [ "$gen" = "$want" ]; then echo "ok $c: zinfgen greedy ($mode) $gen"
    else bad "$c: zinfgen greedy ($mode) '$gen', transformers '$want'"; fi
  done
done
hf_mapping_checks "$T/hf-losses" "$T/batch"

# ---- what zinf cannot compute for Gemma: an error naming the key and its value ----
G='"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 64, "hidden_size": 32,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8, "max_position_embeddings": 64'
printf '{%s, "hidden_activation": "gelu"}\n' "$G" | hf_expect activation 16 'hidden_activation = "gelu" is not supported'
printf '{%s, "attn_logit_softcapping": -1}\n' "$G" | hf_expect softcap 16 'attn_logit_softcapping must be a positive number or null, got -1'
printf '{%s, "use_bidirectional_attention": true}\n' "$G" |
  hf_expect bidirectional 16 'use_bidirectional_attention = true is not supported: Gemma2ForCausalLM has no bidirectional attention'
G3=$(echo "$G" | sed 's/Gemma2ForCausalLM/Gemma3ForCausalLM/; s/"gemma2"/"gemma3_text"/')
printf '{%s, "layer_types": ["full_attention", "sliding_attention"]}\n' "$G3" |
  hf_expect gemma3-pattern 16 'layer_types: layer 1 is "sliding_attention": zinf has Gemma 3'"'"'s pattern'
printf '{%s, "rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}}}\n' "$G3" |
  hf_expect gemma3-local-scaling 16 'only the default rope is supported for the sliding layers'
# --lora on Gemma 3: PEFT's defaults (q_proj, v_proj) on gemma_block, everything else frozen, and the
# plan maps the adapters to PEFT's names (tests/e2e/lora.sh trains Gemma 2's and Gemma 3's against peft)
e=$T/lora; mkdir -p "$e"; printf '{%s}\n' "$G3" > "$e/config.json"
if ! "$Z/zinfc" --from-hf "$e" --seq 16 --lora r=4 --emit=zl > "$e/lora.zl" 2> "$e/lora.err"; then cat "$e/lora.err"; bad "--lora on Gemma 3"
elif grep -qF "lora_q = true, lora_v = true" "$e/lora.zl" && grep -qF 'freeze = ["*", "!*.lora_*"]' "$e/lora.zl" &&
     "$Z/zinfc" "$e/lora.zl" --target "$T/one.zl" -o "$e/lora.plan" > "$e/plan.log" 2>&1 &&
     "$Z/zinfdump" "$e/lora.plan" --hf | grep -qF "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"; then
  echo "ok --lora on Gemma 3: q_proj and v_proj adapters, mapped to PEFT's names"
else cat "$e/lora.err" "$e/plan.log"; bad "--lora on Gemma 3: no adapters, freeze line or PEFT mapping"; fi
# the CUDA backend has kernels for Gemma's attributes (norm offset, attention scale and soft-capping, softcap):
# a plan for a GPU target compiles them (tests/e2e/cuda_long_fake.sh runs them on the fake driver)
if "$Z/zinfc" --from-hf "$T/gemma2" --seq 16 --target examples/targets/h200.zl -o "$T/gpu.plan" > "$T/gpu.log" 2>&1; then
  echo "ok a CUDA plan of Gemma 2 compiles its kernels"
elif grep -q "NVRTC not found" "$T/gpu.log"; then
  echo "skip a CUDA plan of Gemma 2: no NVRTC here"
else cat "$T/gpu.log"; bad "a CUDA plan of Gemma 2: refused"; fi
if [ -s "$T/failed" ]; then echo "hf_gemma: $(wc -l < "$T/failed") failed"; exit 1; fi
echo "hf_gemma: ok"
