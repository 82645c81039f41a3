#!/bin/sh
# zinfc --from-hf against transformers (never downloads anything): small
# random Hugging Face models made here with save_pretrained (GPT-2 tied and
# untied; LLaMA with GQA, with llama3 rope scaling, with linear scaling and
# tied embeddings; Mistral with a sliding window the sequence fits in;
# Qwen2 with q/k/v biases; Qwen3 with per-head q/k norms and a head_dim of
# its own, and with attention_bias; LLaMA with attention_bias, mlp_bias and
# its own head_dim; Qwen3 whose config.json has no head_dim (its config
# class's 128, not hidden_size / heads);
# OLMo 2 (post-norm, q/k norms over all heads) with grouped
# kv heads, and with attention_bias, its own head_dim and tied embeddings;
# Phi-3 with its fused qkv_proj and gate_up_proj; odd sizes throughout). For each:
#   - zinfc --from-hf DIR --emit=zl prints a model, which checks as a file
#     and plans to the same Hugging Face mapping as -o does directly;
#   - the plan's mapping (zinfdump --hf) covers the checkpoint exactly: every
#     tensor, its shape, transposes and columns, and config.json as is
#     (tests/e2e/hf_check.py);
#   - zinfrun --init imports the weights and runs one step on a fixed batch:
#     its loss matches transformers' within 1e-5 relative (f32);
# then hand-written models (examples/gpt2-tiny.zl, llama-tiny.zl, their hf
# blocks and the stdlib's) export weights transformers loads and computes the
# same first loss with; then every unsupported config key is an error naming
# the key and its value.
#   tests/e2e/hf_from.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hf-from; T=$W
e2e_mpi
# failures are counted in a file: expect runs at the end of a pipeline (a subshell)
bad() { echo "FAIL: $*"; echo "$*" >> "$T/failed"; }

cat > "$T/one.zl" <<'EOF'
target one {
  backend = "host"
  ranks = 1
  budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
}
EOF

# Python starts twice: here (the models, then transformers' losses) and once
# after every zinf run (hf_check.py of each case and the losses of the
# hand-written models' exports, hf_from.py batch): torch and transformers
# take seconds to import, the comparisons a fraction of that.
"$ZINF_PY" tests/e2e/hf_from.py make+loss "$T" > "$T/hf-losses" 2> "$T/make.log" ||
  { cat "$T/make.log"; echo "FAIL: making the models or transformers' losses (above)"; exit 1; }
cases=$(cut -d' ' -f1 "$T/hf-losses")
: > "$T/batch"

for c in $cases; do
  d=$T/$c
  seq=$(cat "$d.seq")
  # the .zl model, as text and as a file
  if ! "$Z/zinfc" --from-hf "$d" --seq "$seq" --emit=zl > "$d.zl" 2> "$d.emit.err"; then
    cat "$d.emit.err"; bad "$c: --emit=zl"; continue
  fi
  grep -q "^hf \"" "$d.zl" || bad "$c: the emitted model has no hf block"
  grep -q "^train {" "$d.zl" || bad "$c: the emitted model has no train block"
  "$Z/zinfc" "$d.zl" > "$d.check" 2>&1 || { cat "$d.check"; bad "$c: the emitted file does not check"; }
  # planned directly and from the file: the same mapping
  "$Z/zinfc" --from-hf "$d" --seq "$seq" --target "$T/one.zl" -o "$d.plan" > "$d.plan.log" 2>&1 ||
    { cat "$d.plan.log"; bad "$c: -o plan"; continue; }
  "$Z/zinfc" "$d.zl" --target "$T/one.zl" -o "$d.file.plan" > /dev/null 2>&1 || bad "$c: planning the emitted file"
  "$Z/zinfdump" "$d.plan" --hf > "$d.hf" || bad "$c: zinfdump --hf"
  "$Z/zinfdump" "$d.plan" --hf-config > "$d.config" || bad "$c: zinfdump --hf-config"
  "$Z/zinfdump" "$d.file.plan" --hf > "$d.file.hf" 2>/dev/null
  cmp -s "$d.hf" "$d.file.hf" || bad "$c: the emitted file maps differently"
  echo "check $c $d.hf $d $d.config" >> "$T/batch"   # tests/e2e/hf_check.py, after the loop
  # weights in, one step: the loss transformers computes
  if "$Z/zinfrun" --help 2>&1 | grep -q -- "--init"; then
    if ! "$Z/zinfrun" "$d.plan" --backend host --init "$d" --data "$d.bin" --steps 1 --losses "$d.losses" \
         > "$d.run.log" 2>&1; then
      cat "$d.run.log"; bad "$c: zinfrun --init"; continue
    fi
    got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$d.losses")
    want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/hf-losses")
    if awk -v g="$got" -v w="$want" 'BEGIN { e = (g - w) / w; if (e < 0) e = -e; exit !(g != "" && e <= 1e-5) }'; then
      echo "ok $c: loss $got, transformers $want"
    else
      bad "$c: loss $got, transformers $want (more than 1e-5 apart)"
    fi
    # greedy decoding with the KV cache: transformers' generate token for token (compared after the batch)
    # (olmo2-bias-tied's tied embeddings repeat most prompts' last guess: one whose continuation changes)
    case $c in llama-bias|olmo2-gqa|olmo2-bias-tied)
      ids=5,17,30,42 n=10
      [ $c = olmo2-bias-tied ] && ids=3,9,27,50
      if "$Z/zinfgen" "$d.plan" --init "$d" --temperature 0 --decode kv --prompt-ids "$ids" --max-new "$n" --quiet \
           > "$d.zgen" 2> "$d.zgen.err"; then
        echo "gen $c $d $ids $n" >> "$T/batch"
      else cat "$d.zgen.err"; bad "$c: zinfgen --decode kv"; fi ;;
    esac
  else
    echo "ok $c: mapping (no zinfrun --init here: loss not compared)"
  fi
done

# ---- hand-written models (their hf blocks and the stdlib's): zinfrun exports
# the initial weights (--steps 0 --export-hf), transformers loads them with
# from_pretrained and computes the loss zinfrun's first step computes ----
"$Z/zinftok" README.md -o "$T/bytes.bin" > /dev/null || bad "zinftok"
: > "$T/ex-losses"
for ex in gpt2-tiny llama-tiny; do
  e=$T/ex-$ex
  "$Z/zinfc" "examples/$ex.zl" --target "$T/one.zl" -o "$e.plan" > "$e.log" 2>&1 || { cat "$e.log"; bad "$ex: plan"; continue; }
  "$Z/zinfrun" "$e.plan" --backend host --data "$T/bytes.bin" --steps 0 --from-scratch --export-hf "$e" > "$e.export.log" 2>&1 ||
    { cat "$e.export.log"; bad "$ex: --export-hf"; continue; }
  "$Z/zinfrun" "$e.plan" --backend host --data "$T/bytes.bin" --steps 1 --losses "$e.losses" > "$e.run.log" 2>&1 ||
    { cat "$e.run.log"; bad "$ex: one step"; continue; }
  echo "$ex $(awk '$1 == "step" && $2 == 1 { print $4 }' "$e.losses")" >> "$T/ex-losses"
  echo "loss1 $ex $e $T/bytes.bin 4 64" >> "$T/batch"
done

# ---- the Python side of both: hf_check.py of each case, transformers' loss on each export ----
"$ZINF_PY" tests/e2e/hf_from.py batch "$T/batch" > "$T/batch.out" 2> "$T/batch.log" ||
  { cat "$T/batch.out" "$T/batch.log"; bad "hf_from.py batch exited $?"; }
grep -v '^result ' "$T/batch.out"
for c in $cases; do
  grep -q "^check $c " "$T/batch" || continue
  grep -qx "result check $c 0" "$T/batch.out" || bad "$c: the mapping does not cover the checkpoint"
done
for c in $cases; do
  grep -q "^gen $c " "$T/batch" || continue
  want=$(awk -v c="$c" '$1 == "result" && $2 == "gen" && $3 == c { $1 = ""; $2 = ""; $3 = ""; sub(/^ +/, ""); print }' "$T/batch.out")
  gen=$(cat "$T/$c.zgen")
  if [ -n "$want" ] && [ "$want" != error ] && [ "$gen" = "$want" ]; then echo "ok $c: zinfgen greedy (kv) $gen"
  else bad "$c: zinfgen greedy (kv) '$gen', transformers '$want'"; fi
done
while read -r ex got; do
  want=$(awk -v e="$ex" '$1 == "result" && $2 == "loss1" && $3 == e { print $4 }' "$T/batch.out")
  case "$want" in ""|error) cat "$T/batch.log"; bad "$ex: transformers"; continue ;; esac
  if awk -v g="$got" -v w="$want" 'BEGIN { e = (g - w) / w; if (e < 0) e = -e; exit !(g != "" && e <= 1e-5) }'; then
    echo "ok $ex (hand-written): loss $got, transformers on its export $want"
  else
    bad "$ex: loss $got, transformers on its export $want"
  fi
done < "$T/ex-losses"

# ---- what zinf cannot compute: an error naming the key and its value ----
# expect NAME SEQ 'message' < config.json text
expect() {
  e=$T/err-$1
  mkdir -p "$e"
  cat > "$e/config.json"
  if [ "$2" = - ]; then set -- "$1" "" "$3"; else set -- "$1" "--seq $2" "$3"; fi
  # shellcheck disable=SC2086
  "$Z/zinfc" --from-hf "$e" $2 --emit=zl > "$e/out" 2> "$e/err"
  rc=$?
  if [ $rc -ne 1 ]; then cat "$e/err"; bad "$1: exit $rc, expected 1"; return; fi
  grep -qF -- "$3" "$e/err" || { cat "$e/err"; bad "$1: no '$3'"; return; }
  echo "ok error $1"
}
L='"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 32,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64'
G='"architectures": ["GPT2LMHeadModel"], "vocab_size": 64, "n_positions": 40, "n_embd": 32, "n_layer": 2, "n_head": 4'
printf '{\n  %s,\n  "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}\n}\n' "$L" |
  expect rope-dynamic - 'config.json:4:33: error: rope_scaling.rope_type = "dynamic" is not supported'
printf '{%s, "rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0}}\n' "$L" |
  expect rope-dynamic - 'rope_parameters.rope_type = "dynamic" is not supported'
printf '{%s, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "truncate": false}}\n' "$L" |
  expect rope-yarn-truncate - 'rope_scaling.truncate = false is not supported'
printf '{%s, "rope_scaling": {"type": "linear", "factor": 2.0, "attention_factor": 1.5}}\n' "$L" |
  expect rope-extra - 'rope_scaling.attention_factor = 1.5 is not supported with rope_type linear'
printf '{%s, "num_local_experts": 8, "num_experts_per_tok": 2}\n' "$L" |
  expect moe - 'num_local_experts = 8 is not supported (mixture of experts)'
M='"architectures": ["MistralForCausalLM"], "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64'
printf '{%s, "attention_bias": true}\n' "$M" |
  expect attention-bias - 'attention_bias = true is not supported: MistralForCausalLM has no biases on q, k, v and o'
printf '{%s, "mlp_bias": true}\n' "$(echo "$M" | sed 's/Mistral/Olmo2/')" |
  expect mlp-bias - 'mlp_bias = true is not supported: Olmo2ForCausalLM has no biases in the MLP'
P3='"architectures": ["Phi3ForCausalLM"], "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64'
printf '{%s, "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.0], "long_factor": [2.0, 2.0]}}\n' "$L" |
  expect llama-longrope - 'rope_scaling.rope_type = "longrope" is not supported for LlamaForCausalLM (zinf reads longrope as Phi3ForCausalLM computes it)'
printf '{%s, "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.0], "long_factor": [2.0, 2.0]}}\n' "$P3" |
  expect phi3-longrope-length - 'short_factor has 2 numbers: longrope needs one per pair of rotated columns, 4'
printf '{%s, "partial_rotary_factor": 0.5}\n' "$L" |
  expect partial-rotary - 'partial_rotary_factor = 0.5 is not supported'
printf '{%s, "hidden_act": "gelu"}\n' "$L" |
  expect hidden-act - 'hidden_act = "gelu" is not supported'
printf '{%s, "num_key_value_heads": 3}\n' "$L" |
  expect kv-heads - 'num_attention_heads = 4 is not a multiple of num_key_value_heads = 3'
printf '{%s, "alibi": true}\n' "$L" |
  expect alibi - 'alibi = true is not supported (ALiBi position biases)'
# (windows shorter than the sequence: tests/e2e/hf_window.sh)
echo '{"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 64}' |
  expect arch - 'architecture "DeepseekV3ForCausalLM" is not supported'
printf '{%s, "activation_function": "relu"}\n' "$G" |
  expect gpt2-act - 'activation_function = "relu" is not supported'
printf '{%s}\n' "$G" |
  expect gpt2-seq 100 '--seq 100 is longer than n_positions = 40'
printf '{%s, "scale_attn_by_inverse_layer_idx": true}\n' "$G" |
  expect gpt2-scale - 'scale_attn_by_inverse_layer_idx = true is not supported'
printf '{%s}\n' '"architectures": ["LlamaForCausalLM"], "vocab_size": 64' |
  expect missing - 'config.json has no hidden_size'
printf '{"architectures": ["LlamaForCausalLM"], "vocab_size": 64,,}\n' |
  expect not-json - 'is not valid JSON'
# the command line: usage errors exit 2, a directory without config.json 1
usage() { # WANT_RC 'message' args...
  want=$1 msg=$2
  shift 2
  "$Z/zinfc" "$@" > "$T/cli.out" 2> "$T/cli.err"
  rc=$?
  if [ $rc -eq "$want" ] && grep -qF -- "$msg" "$T/cli.err"; then echo "ok cli: $*"; else cat "$T/cli.err"; bad "zinfc $*: exit $rc"; fi
}
usage 2 "--emit=zl goes with --from-hf DIR" --emit=zl examples/gpt2-tiny.zl
usage 2 "--seq goes with --from-hf DIR" --seq 8 examples/gpt2-tiny.zl
usage 2 "one model at a time" --from-hf "$T/gpt2" examples/gpt2-tiny.zl
usage 2 "--seq needs a positive sequence length, not '0'" --from-hf "$T/gpt2" --seq 0
usage 2 "--from-hf needs a value" --from-hf
usage 1 "$T/none/config.json: No such file or directory" --from-hf "$T/none"
# Phi-3's fused linears take no zinf adapter; o_proj and down_proj do
e=$T/err-phi3-lora
mkdir -p "$e"
printf '{%s}\n' "$P3" > "$e/config.json"
usage 1 "--lora: target 'qkv_proj' is a fused linear of Phi3ForCausalLM (one adapter over q, k and v): not supported" \
  --from-hf "$e" --lora r=4,targets=qkv_proj,o_proj --emit=zl
usage 1 "--lora: Phi3ForCausalLM has no default targets zinf adapts" --from-hf "$e" --lora r=4 --emit=zl
if "$Z/zinfc" --from-hf "$e" --lora r=4,targets=o_proj,down_proj --emit=zl 2> "$e/err" | grep -q "lora_o = true, lora_down = true"; then
  echo "ok cli: Phi-3 --lora targets=o_proj,down_proj"
else cat "$e/err"; bad "Phi-3 --lora o_proj,down_proj"; fi

# a key zinf does not know is a warning, and the model is still made
w=$T/warn
mkdir -p "$w"
printf '{%s, "fancy_new_knob": 3}\n' "$L" > "$w/config.json"
if "$Z/zinfc" --from-hf "$w" --emit=zl > "$w/out" 2> "$w/err" && grep -qF "warning: fancy_new_knob = 3 is a key zinf does not know" "$w/err"; then
  echo "ok warning unknown key"
else
  cat "$w/err"; bad "unknown key: expected a warning and exit 0"
fi
if [ -s "$T/failed" ]; then echo "hf_from: $(wc -l < "$T/failed") failed"; exit 1; fi
echo "hf_from: ok"
