#!/bin/sh
# zinfc --from-hf for Phi-3 beyond tests/e2e/hf_from.sh's case, against
# transformers (eager attention; never downloads anything): small random
# Phi3ForCausalLM made here with save_pretrained (tests/e2e/hf_phi3.py):
# Phi-4-mini's partial rotary (partial_rotary_factor 0.75: 12 of 16 columns
# of a head turn), half a head beside a window shorter than the sequence,
# longrope (Phi-4-mini's form, within the original context; su beyond it, where
# generate drops its cache and turns every position by the long factors), and
# attention_bias / mlp_bias true (keys transformers' Phi3 does not read:
# a warning, and no biases). For each:
#   - the emitted model carries rotary_dim and checks as a file;
#   - the plan's mapping covers the checkpoint exactly (tests/e2e/hf_check.py);
#   - zinfrun --init runs one step: its loss and its gradient's norm match
#     transformers' within 1e-5 relative (f32), and the loss differs from
#     that of the same weights turning whole heads (the case tests something);
#   - zinfrun --export-hf writes weights from_pretrained loads with no
#     missing or unexpected key, on which transformers computes that loss;
#   - for Phi-4-mini's partial rotary and its longrope: after 2 training steps
#     (checkpointed, exported), the export loads with no missing or unexpected
#     key and transformers' loss on it, on step 3's window, is zinf's step-3
#     loss (1e-5 relative) and not that of the weights before training;
#   - zinfgen greedy (KV cache and window decodes) equals generate, past
#     the window where there is one;
# then a partial_rotary_factor that turns an odd number of columns is an error,
# and CUDA plans of partial rotary and of longrope compile their kernels.
#   tests/e2e/hf_phi3.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hf-phi3; T=$W
bad() { echo "FAIL: $*"; echo "$*" >> "$T/failed"; }
# |a - b| <= 1e-5 |b|
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error

cat > "$T/one.zl" <<'EOF2'
target one {
  backend = "host"
  ranks = 1
  budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
}
EOF2

"$ZINF_PY" tests/e2e/hf_phi3.py make "$T" > "$T/hf-losses" 2> "$T/make.log" ||
  { cat "$T/make.log"; echo "FAIL: making the models or transformers' losses (above)"; exit 1; }
: > "$T/batch"; : > "$T/exports"
while read -r c want wgn other; do
  d=$T/$c
  seq=$(cat "$d.seq")
  if ! "$Z/zinfc" --from-hf "$d" --seq "$seq" --emit=zl > "$d.zl" 2> "$d.emit.err"; then
    cat "$d.emit.err"; bad "$c: --emit=zl"; continue
  fi
  "$Z/zinfc" "$d.zl" > "$d.check" 2>&1 || { cat "$d.check"; bad "$c: the emitted file does not check"; }
  case $c in
    phi3-partial) grep -q "rotary_dim = 12" "$d.zl" || bad "$c: the emitted model has no rotary_dim = 12" ;;
    phi3-partial-w6) grep -q "rotary_dim = 8" "$d.zl" && grep -q "window = 6" "$d.zl" ||
      bad "$c: the emitted model has no rotary_dim = 8 and window = 6" ;;
    phi3-longrope*) grep -q 'rope_scaling = "longrope", original_max_positions = 16, attention_factor = 1.224744871391589' "$d.zl" ||
      { grep -n longrope "$d.zl"; bad "$c: the emitted model has no longrope scaling with its attention factor"; } ;;
    phi3-bias)
      grep -qF "attention_bias = true is not read by transformers' Phi3ForCausalLM, which has no biases on qkv_proj and o_proj" "$d.emit.err" &&
      grep -qF "mlp_bias = true is not read by transformers' Phi3ForCausalLM" "$d.emit.err" ||
        { cat "$d.emit.err"; bad "$c: no warnings for attention_bias and mlp_bias"; } ;;
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
  if e2e_close "$got" "$want" 1e-5; then echo "ok $c: loss $got, transformers $want"
  else bad "$c: loss $got, transformers $want (more than 1e-5 apart)"; fi
  if e2e_close "$gn" "$wgn" 1e-5; then echo "ok $c: gradient norm $gn, transformers $wgn"
  else bad "$c: gradient norm $gn, transformers $wgn (more than 1e-5 apart)"; fi
  if [ "$other" != "$want" ] && e2e_close "$other" "$want" 1e-5; then
    bad "$c: turning the feature off does not change transformers' loss ($want, $other): the case tests nothing"
  fi
  if ! "$Z/zinfrun" "$d.plan" --backend host --init "$d" --data "$d.bin" --steps 0 --export-hf "$d.export" > "$d.export.log" 2>&1; then
    cat "$d.export.log"; bad "$c: --export-hf"; continue
  fi
  # trained weights out (Phi-4-mini's partial rotary and longrope): 2 steps (lr 1e-3, no warmup)
  # checkpointed and exported, step 3 resumed; transformers' loss on the export, on step 3's window,
  # is zinf's step-3 loss
  next=""
  case $c in phi3-partial|phi3-longrope)
    sed -e 's/lr = 2e-5/lr = 1e-3/' -e 's/warmup = 20$/warmup = 0/' "$d.zl" > "$d.train.zl"
    grep -q "lr = 1e-3" "$d.train.zl" || bad "$c: the emitted model has no lr = 2e-5 to raise"
    if "$Z/zinfc" "$d.train.zl" --target "$T/one.zl" -o "$d.train.plan" > "$d.train.log" 2>&1 &&
       "$Z/zinfrun" "$d.train.plan" --backend host --init "$d" --data "$d.bin" --steps 2 --checkpoint-dir "$d.ck" \
         --export-hf "$d.next" >> "$d.train.log" 2>&1 &&
       "$Z/zinfrun" "$d.train.plan" --backend host --data "$d.bin" --steps 3 --checkpoint-dir "$d.ck" --resume \
         --losses "$d.next.losses" >> "$d.train.log" 2>&1; then next="$d.next 3"
    else cat "$d.train.log"; bad "$c: training, checkpointing and exporting"; fi ;;
  esac
  # greedy within the plan's T (a longer text slides its window, which transformers does not);
  # read below, every case's exports by one Python (importing torch and transformers takes seconds)
  new=$((seq - 4)); [ $new -gt 16 ] && new=16
  echo "$got $new $next" > "$d.got"
  echo "$d.export.out $c $d.export $d.bin $seq 5,17,30,42 $new $next" >> "$T/exports"
done < "$T/hf-losses"
"$ZINF_PY" tests/e2e/hf_phi3.py exports "$T/exports" > "$T/exports.log" 2>&1
for c in $(cut -d' ' -f2 "$T/exports"); do
  d=$T/$c
  read -r got new next < "$d.got"
  [ -f "$d.export.out" ] || { cat "$d.export.out.err" "$T/exports.log"; bad "$c: from_pretrained of the export"; continue; }
  hf_export_checks "$c" "$d" "$got" "$next"
  # greedy decoding (past phi3-partial-w6's window of 6 and phi3-longrope-long's original
  # context of 16), with the KV cache and by windows
  gw=$(awk '$1 == "gen" { $1 = ""; $2 = ""; sub(/^ +/, ""); print }' "$d.export.out")
  for mode in kv window; do
    if [ "$c" = phi3-longrope-long ] && [ $mode = window ]; then
      # T = 24 > the original 16: a window forward would turn a short text by the long factors
      if "$Z/zinfgen" "$d.plan" --init "$d" --temperature 0 --decode window --prompt-ids 5,17,30,42 --max-new 12 --quiet \
           > /dev/null 2> "$d.zgen.err"; then bad "$c: zinfgen --decode window accepted"
      elif grep -qF "the plan's rope is longrope with original_max_positions 16 < T = 24" "$d.zgen.err"; then
        echo "ok $c: zinfgen --decode window refused (longrope past the original context)"
      else cat "$d.zgen.err"; bad "$c: zinfgen --decode window: message"; fi
      continue
    fi
    gen=$("$Z/zinfgen" "$d.plan" --init "$d" --temperature 0 --decode $mode --prompt-ids 5,17,30,42 --max-new $new --quiet 2> "$d.zgen.err") ||
      { cat "$d.zgen.err"; bad "$c: zinfgen --decode $mode"; continue; }
    if [ "$gen" = "$gw" ]; then echo "ok $c: zinfgen greedy ($mode) $gen"
    else bad "$c: zinfgen greedy ($mode) '$gen', transformers '$gw'"; fi
  done
done
hf_mapping_checks "$T/hf-losses" "$T/batch"

# ---- what zinf cannot compute: an error naming the key and its value ----
P='"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 64, "hidden_size": 64,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64'
printf '{%s, "partial_rotary_factor": 0.33}\n' "$P" |
  hf_expect partial-odd 16 'partial_rotary_factor = 0.33 turns 5 of the 16 columns'
printf '{%s, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.33}}\n' "$P" |
  hf_expect partial-odd-rope 16 'partial_rotary_factor = 0.33 turns 5 of the 16 columns'
printf '{%s, "rope_scaling": {"type": "su", "short_factor": [1, 1, 1], "long_factor": [1, 2, 3, 4, 5, 6, 7, 8]}}\n' "$P" |
  hf_expect longrope-length 16 'short_factor has 3 numbers: longrope needs one per pair of rotated columns, 8'
printf '{%s, "rope_scaling": {"type": "longrope", "short_factor": [1, 1, 1, 1, 1, 1, 1, 0], "long_factor": [1, 2, 3, 4, 5, 6, 7, 8]}}\n' "$P" |
  hf_expect longrope-value 16 'rope_scaling.short_factor[7] must be a positive number, got 0'
printf '{%s, "rope_scaling": {"type": "longrope", "long_factor": [1, 2, 3, 4, 5, 6, 7, 8]}}\n' "$P" |
  hf_expect longrope-missing 16 'rope_scaling has no short_factor'
L='"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 64,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64'
printf '{%s, "partial_rotary_factor": 0.5}\n' "$L" |
  hf_expect llama-partial 16 'partial_rotary_factor = 0.5 is not supported (rotary embeddings over part of a head)'
# the CUDA backend runs partial rotary and longrope too (tests/e2e/cuda_long_fake.sh trains them on the fake driver): both plans compile their kernels
if "$Z/zinfc" --from-hf "$T/phi3-partial" --seq 16 --target examples/targets/h200.zl -o "$T/gpu.plan" > "$T/gpu.log" 2>&1; then
  echo "ok a CUDA plan with partial rotary compiles its kernels"
else cat "$T/gpu.log"; bad "a CUDA plan with partial rotary: refused"; fi
if "$Z/zinfc" --from-hf "$T/phi3-longrope-long" --seq 16 --target examples/targets/h200.zl -o "$T/gpu2.plan" > "$T/gpu2.log" 2>&1; then
  echo "ok a CUDA plan with longrope compiles its kernels"
else cat "$T/gpu2.log"; bad "a CUDA plan with longrope: refused"; fi
if [ -s "$T/failed" ]; then echo "hf_phi3: $(wc -l < "$T/failed") failed"; exit 1; fi
echo "hf_phi3: ok"
