#!/bin/sh
# Sliding-window attention and yarn rope scaling imported with zinfc
# --from-hf, against transformers (never downloads anything): small random
# Mistral (every layer a window of 5), Qwen2 with max_window_layers (layer 0
# full, then windows of 6), Qwen2 with alternating layer_types and Qwen3 with
# layer_types of no period, Phi-3 (every layer a window of 6), each window
# shorter than the training sequence;
# yarn as Qwen2.5 writes it (type, factor, original context), as DeepSeek
# does (its own betas, mscale and mscale_all_dim) and with an explicit
# attention_factor beside a window (Mistral). For each:
#   - the emitted model carries the layers' windows or the yarn scaling, and plans;
#   - zinfrun --init runs one step on a fixed batch: its loss equals
#     transformers' (eager attention) within 1e-5 relative, and differs from
#     the loss of the same weights without the window and the rope scaling
#     (they matter);
# then zinfgen's greedy tokens past the window equal transformers' generate,
# with the KV cache and with the window decode; and layer_types with another
# kind of layer, or a window on LLaMA (which has none in transformers) shorter
# than the sequence, are errors.
#   tests/e2e/hf_window.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hf-window
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error

cat > "$W/one.zl" <<'ZL'
target one {
  backend = "host"
  ranks = 1
  budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
}
ZL
"$ZINF_PY" tests/e2e/hf_window.py make "$W" > "$W/hf-losses" 2> "$W/make.log" ||
  { cat "$W/make.log"; echo "FAIL: making the models or transformers' losses"; exit 1; }

while read -r c want full; do
  d=$W/$c
  seq=$(cat "$d.seq")
  "$Z/zinfc" --from-hf "$d" --seq "$seq" --emit=zl > "$d.zl" 2> "$d.err" || { cat "$d.err"; bad "$c: --emit=zl"; continue; }
  case $c in
    *yarn*) grep -q 'rope_scaling = "yarn"' "$d.zl" || bad "$c: the emitted model has no yarn scaling" ;;
    *) grep -q "window = " "$d.zl" || bad "$c: the emitted model has no window" ;;
  esac
  "$Z/zinfc" --from-hf "$d" --seq "$seq" --target "$W/one.zl" -o "$d.plan" > "$d.plan.log" 2>&1 ||
    { cat "$d.plan.log"; bad "$c: plan"; continue; }
  "$Z/zinfrun" "$d.plan" --backend host --init "$d" --data "$d.bin" --steps 1 --losses "$d.losses" > "$d.run.log" 2>&1 ||
    { cat "$d.run.log"; bad "$c: zinfrun --init"; continue; }
  got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$d.losses")
  if awk -v g="$got" -v w="$want" 'BEGIN { e = (g - w) / w; if (e < 0) e = -e; exit !(g != "" && e <= 1e-5) }'; then
    ok "$c: loss $got, transformers $want"
  else
    bad "$c: loss $got, transformers $want (more than 1e-5 apart)"
  fi
  awk -v w="$want" -v f="$full" 'BEGIN { e = (f - w) / w; if (e < 0) e = -e; exit !(e > 1e-3) }' ||
    bad "$c: the window or rope scaling does not change transformers' loss ($want, $full without): the case tests nothing"
done < "$W/hf-losses"

# greedy past the window (5, 4 and 7 positions; the last with yarn): 4 prompt tokens, 12 new
for c in mistral-w5 qwen2-types mistral-yarn-w7; do
  want=$("$ZINF_PY" tests/e2e/hf_window.py gen "$W" "$c" 3,14,15,9 12 2> "$W/gen.err") ||
    { cat "$W/gen.err"; bad "$c: transformers generate"; continue; }
  for mode in kv window; do
    got=$("$Z/zinfgen" "$W/$c.plan" --init "$W/$c" --temperature 0 --decode "$mode" --prompt-ids 3,14,15,9 --max-new 12 \
          --quiet 2> "$W/err") || { cat "$W/err"; bad "$c: zinfgen --decode $mode"; continue; }
    [ "$got" = "$want" ] && ok "$c: greedy ($mode) $got" || bad "$c greedy ($mode): zinfgen $got, transformers $want"
  done
done

# errors: an unknown kind of layer; a window on LLaMA shorter than the sequence
# expect NAME 'message' < config.json
expect() {
  e=$W/err-$1
  mkdir -p "$e"
  cat > "$e/config.json"
  "$Z/zinfc" --from-hf "$e" --seq 16 --emit=zl > "$e/out" 2> "$e/err"
  rc=$?
  if [ $rc -ne 1 ]; then cat "$e/err"; bad "$1: exit $rc, expected 1"; return; fi
  grep -qF -- "$2" "$e/err" && ok "error $1" || { cat "$e/err"; bad "$1: no '$2'"; }
}
Q='"architectures": ["Qwen2ForCausalLM"], "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64'
printf '{%s, "use_sliding_window": true, "sliding_window": 4, "layer_types": ["full_attention", "chunked_attention"]}\n' "$Q" |
  expect layer-kind 'layer_types has "chunked_attention": zinf has full_attention and sliding_attention'
printf '{%s, "use_sliding_window": true, "sliding_window": 4, "layer_types": ["full_attention"]}\n' "$Q" |
  expect layer-count 'layer_types lists 1 layers, num_hidden_layers is 2'
echo '{"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64, "sliding_window": 8}' |
  expect llama-window 'LlamaForCausalLM has no sliding-window attention in transformers'
e2e_end
