#!/bin/sh
# Mixture-of-experts models through the Hugging Face interchange: small
# random MixtralForCausalLM (with and without the load-balancing loss),
# Qwen3MoeForCausalLM, OlmoeForCausalLM and Qwen2MoeForCausalLM models
# (and Qwen3-MoE with mlp_only_layers [1], Qwen2-MoE with
# decoder_sparse_step 2: dense layers among the sparse ones, each layer's
# MLP checked in the mapping) saved by transformers' save_pretrained (per-expert tensors,
# experts.N.w1/w2/w3 or experts.N.gate_proj/up_proj/down_proj), made by
# tests/e2e/moe_hf.py. For each:
#   - zinfc --from-hf plans it, each expert's tensor one slice of the
#     stacked [E, ...] parameter (zinfdump --hf);
#   - zinfrun --init DIR runs one step: its loss equals transformers' within
#     1e-5 relative (cross-entropy, plus router_aux_loss_coef times the
#     load-balancing loss with output_router_logits);
#   - its --export-hf after that step loads with from_pretrained with no
#     missing or unexpected keys and gives zinf's step-2 loss;
#   - zinfgen's greedy continuation equals transformers' generate (with the
#     KV cache, the load-balancing loss or not; and a forward of the window);
# then a round trip on 2 ranks with the experts partitioned (--steps 0
# --export-hf: the same tensors, bit for bit); LoRA on the attention and
# on the experts (PEFT's target_parameters experts.gate_up_proj and
# experts.down_proj; on Qwen2-MoE's shared expert and dense layers,
# gate_proj, up_proj, down_proj) exports a PEFT adapter and a merged model that give
# zinf's next loss, and zinfgen with the experts' adapter PEFT's tokens and
# logits (the router, and the experts by their per-expert names, are
# refused by name); and bad input is an error naming the key or the
# tensor: top-k above the expert count, a config with no sparse layer, a
# bad mlp_only_layers index, OLMoE's clip_qkv, a checkpoint without one
# expert's tensor.
#   tests/e2e/moe_hf.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir moe-hf
e2e_mpi
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
SEQ=8
"$ZINF_PY" tests/e2e/moe_hf.py make "$W" > "$W/losses" 2> "$W/make.log" ||
  { cat "$W/make.log"; echo "FAIL: making the models"; exit 1; }
cases=$(cut -d' ' -f1 "$W/losses")
for R in 1 2; do
  cat > "$W/t$R.zl" <<ZL
target t$R { backend = "host"; ranks = $R; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
done
: > "$W/batch"   # the checks in Python, run in one process after the zinf runs
relok() { awk -v g="$1" -v w="$2" 'BEGIN { e = (g - w) / w; if (e < 0) e = -e; exit !(g != "" && w != "" && e <= 1e-5) }'; }

for c in $cases; do
  d=$W/$c
  # the model, with a learning rate that moves the weights in one step
  "$Z/zinfc" --from-hf "$d" --seq $SEQ --emit=zl > "$d.zl" 2> "$d.emit" || { cat "$d.emit"; bad "$c: --from-hf"; continue; }
  [ -s "$d.emit" ] && { cat "$d.emit"; bad "$c: --from-hf warned"; }
  sed -i 's/lr = 2e-5/lr = 1e-2/; s/warmup = 20/warmup = 0/' "$d.zl"
  "$Z/zinfc" "$d.zl" --target "$W/t1.zl" -o "$d.plan" > "$d.zinfc" 2>&1 || { cat "$d.zinfc"; bad "$c: zinfc"; continue; }
  "$Z/zinfdump" "$d.plan" --hf > "$d.hf" 2>&1 || bad "$c: zinfdump --hf"
  E=$(sed -n 's/^const .* E = \([0-9]*\),.*/\1/p' "$d.zl")
  s0=$(sed -n 's/^piece moe_block\.\([0-9]*\)\.moe_mlp\.wg .*/\1/p' "$d.hf" | head -1)
  n=$(grep -c "moe_mlp.wg \[$E,.*\]\[[0-9]*\] <- model.layers.$s0\..*experts\.[0-9]*\.\(w1\|gate_proj\)\.weight - 0 32$" "$d.hf")
  [ "$n" = "$E" ] && ok "$c: layer $s0's gate projections are $E stacked expert tensors" ||
    { cat "$d.hf"; bad "$c: $n stacked pieces of wg, $E experts"; }
  # the dense layers (transformers': mlp_only_layers, decoder_sparse_step): the MLP's three linears, no experts
  case $c in qwen3moe-dense) want=1 ;; qwen2moe-step2) want="0 2" ;; *) want= ;; esac
  dl=
  for k in 0 1 2; do
    grep -q "^piece moe_block\.$k\.swiglu\.w1 \[32,40\] <- model\.layers\.$k\.mlp\.gate_proj\.weight T 0 40$" "$d.hf" &&
      grep -q "^piece moe_block\.$k\.swiglu\.w2 \[40,32\] <- model\.layers\.$k\.mlp\.down_proj\.weight T 0 32$" "$d.hf" &&
      ! grep -q "^piece moe_block\.$k\.moe_mlp\." "$d.hf" && dl="${dl:+$dl }$k"
  done
  [ "$dl" = "$want" ] && ok "$c: dense layers '$dl' (mlp.gate_proj, up_proj, down_proj)" ||
    { cat "$d.hf"; bad "$c: dense layers '$dl', transformers' '$want'"; }
  # one step from the checkpoint, then its export
  "$Z/zinfrun" "$d.plan" --backend host --init "$d" --data "$W/tok.bin" --steps 1 --losses "$d.l1" \
      --export-hf "$d.out" < /dev/null > "$d.run1" 2>&1 || { cat "$d.run1"; bad "$c: zinfrun --init --export-hf"; continue; }
  "$Z/zinfrun" "$d.plan" --backend host --init "$d" --data "$W/tok.bin" --steps 2 --losses "$d.l2" \
      < /dev/null > "$d.run2" 2>&1 || { cat "$d.run2"; bad "$c: zinfrun --steps 2"; continue; }
  got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$d.l1")
  want=$(awk -v c="$c" '$1 == c { print $2 }' "$W/losses")
  relok "$got" "$want" && ok "$c: step-1 loss $got, transformers' $want" || bad "$c: step-1 loss '$got', transformers' $want"
  z2=$(awk '$1 == "step" && $2 == 2 { print $4 }' "$d.l2")
  echo "export $W $c $d.out $z2" >> "$W/batch"
  # greedy generation against transformers' generate
  "$Z/zinfgen" "$d.plan" --init "$d" --prompt-ids 5,17,40 --temperature 0 --max-new 5 > "$d.gen" 2> "$d.gen.err" ||
    { cat "$d.gen.err"; bad "$c: zinfgen"; continue; }
  echo "gen $W $c 5,17,40 5 $d.gen" >> "$W/batch"
done
for c in mixtral mixtral-noaux; do
  grep -q "KV cache" "$W/$c.gen.err" || { cat "$W/$c.gen.err"; bad "$c: zinfgen without the KV cache"; }
done
# a forward of the window each token, the logits read before the load-balancing term is added
"$Z/zinfgen" "$W/mixtral.plan" --init "$W/mixtral" --prompt-ids 5,17,40 --temperature 0 --max-new 5 --decode window \
    > "$W/window.gen" 2> "$W/window.err" || { cat "$W/window.err"; bad "mixtral: zinfgen --decode window"; }
[ "$(cat "$W/window.gen")" = "$(cat "$W/mixtral.gen")" ] && ok "mixtral: zinfgen --decode window as the KV cache" ||
  bad "mixtral: --decode window '$(cat "$W/window.gen")', kv '$(cat "$W/mixtral.gen")'"

# 2 ranks, the experts partitioned: import and export again, the same tensors
c=qwen2moe d=$W/$c
{ cat "$d.zl"; echo 'plan { whole_below = 16 }'; } > "$d-2.zl"
if "$Z/zinfc" "$d-2.zl" --target "$W/t2.zl" -o "$d-2.plan" > "$d-2.zinfc" 2>&1; then
  timeout 120 mpirun -np 2 --oversubscribe "$Z/zinfrun" "$d-2.plan" --backend host --init "$d" --data "$W/tok.bin" \
      --steps 0 --export-hf "$d-2.out" < /dev/null > "$d-2.run" 2>&1 || { cat "$d-2.run"; bad "$c: 2 ranks, --steps 0 --export-hf"; }
  echo "same $d $d-2.out" >> "$W/batch"
else
  cat "$d-2.zinfc"; bad "$c: zinfc for 2 ranks"
fi

# LoRA with the load-balancing loss: on the attention (q, v, o) of Qwen3-MoE;
# on its experts alone (PEFT's target_parameters, both: nested wrappers); on
# Mixtral's fused gate and up and its v_proj; on OLMoE's down_proj experts.
# The PEFT adapter (its tensors exactly those PEFT holds after loading it)
# and the merged model give zinf's step-2 loss.
for ct in qwen3moe:q_proj,v_proj,o_proj qwen3moe:experts.gate_up_proj,experts.down_proj \
          mixtral:v_proj,gate_up_proj olmoe:experts.down_proj qwen2moe-step2:gate_proj,up_proj,down_proj,v_proj; do
  c=${ct%%:*} d=$W/$c l=$W/$c-lora-$(echo "${ct#*:}" | tr -c 'a-z_\n' '-')
  if "$Z/zinfc" --from-hf "$d" --seq $SEQ --lora "r=4,alpha=8,targets=${ct#*:}" --emit=zl > "$l.zl" 2> "$l.err"; then
    sed -i 's/lr = 2e-5/lr = 1e-2/; s/warmup = 20/warmup = 0/' "$l.zl"
    "$Z/zinfc" "$l.zl" --target "$W/t1.zl" -o "$l.plan" > "$l.zinfc" 2>&1 || { cat "$l.zinfc"; bad "$ct: zinfc --lora"; continue; }
    for m in adapter merged; do
      a=; [ $m = merged ] && a=--merge-lora
      "$Z/zinfrun" "$l.plan" --backend host --init "$d" --data "$W/tok.bin" --steps 1 --export-hf "$l-$m" $a \
        < /dev/null > "$l-$m.run" 2>&1 || { cat "$l-$m.run"; bad "$ct: LoRA --export-hf $a"; }
    done
    "$Z/zinfrun" "$l.plan" --backend host --init "$d" --data "$W/tok.bin" --steps 2 --losses "$l.l2" \
      < /dev/null > "$l.run2" 2>&1 || { cat "$l.run2"; bad "$ct: LoRA --steps 2"; }
    z2=$(awk '$1 == "step" && $2 == 2 { print $4 }' "$l.l2")
    echo "peft $W $c $l-adapter $l-merged $z2" >> "$W/batch"
  else
    cat "$l.err"; bad "$ct: --from-hf --lora"
  fi
done
l=$W/qwen3moe-lora-experts-gate_up_proj-experts-down_proj
grep -q '"target_parameters": \["experts.gate_up_proj", "experts.down_proj"\]' "$l-adapter/adapter_config.json" &&
  ok "the adapter's config names PEFT's target_parameters" || bad "no target_parameters in the experts' adapter_config.json"
# the experts' adapter read back (--init of the checkpoint with the adapter's tensors) on 2 ranks, the
# adapters partitioned, and written again: the same tensors, bit for bit
{ cat "$l.zl"; echo 'plan { whole_below = 16 }'; } > "$l-2.zl"
if "$ZINF_PY" tests/e2e/moe_hf.py join "$W/qwen3moe" "$l-adapter" "$l-both.safetensors" 2>> "$W/py.log" &&
   "$Z/zinfc" "$l-2.zl" --target "$W/t2.zl" -o "$l-2.plan" > "$l-2.zinfc" 2>&1; then
  timeout 120 mpirun -np 2 --oversubscribe "$Z/zinfrun" "$l-2.plan" --backend host --init "$l-both.safetensors" \
      --data "$W/tok.bin" --steps 0 --export-hf "$l-2.out" < /dev/null > "$l-2.run" 2>&1 ||
    { cat "$l-2.run"; bad "experts' LoRA: 2 ranks, --steps 0 --export-hf"; }
  echo "same $l-adapter $l-2.out" >> "$W/batch"
  # zinfgen with the experts' adapter (KV cache) against PEFT's generate
  "$Z/zinfgen" "$l.plan" --init "$l-both.safetensors" --prompt-ids 5,17,40 --temperature 0 --max-new 5 --logits "$l.gen.logits" \
      > "$l.gen" 2> "$l.gen.err" ||
    { cat "$l.gen.err"; bad "experts' LoRA: zinfgen"; }
  echo "gen $W qwen3moe 5,17,40 5 $l.gen $l-adapter" >> "$W/batch"
else
  cat "$l-2.zinfc"; bad "experts' LoRA: the checkpoint with the adapter, or zinfc for 2 ranks"
fi
# the experts' per-expert linears by their checkpoint names: refused, naming PEFT's fused targets
if "$Z/zinfc" --from-hf "$W/qwen3moe" --seq $SEQ --lora targets=gate_proj --emit=zl > /dev/null 2> "$W/lora-bad.err"; then
  bad "--lora targets=gate_proj accepted for an MoE model without a shared expert or dense layer"
elif grep -qF "target 'gate_proj': Qwen3MoeForCausalLM's experts are fused parameters to PEFT (transformers' experts.gate_up_proj and experts.down_proj, LoRA's target_parameters): name experts.gate_up_proj (gate and up, one adapter) or experts.down_proj" "$W/lora-bad.err" &&
     grep -qF "hint: gate_proj adapts the linears of Qwen2-MoE's shared expert and of dense layers (mlp_only_layers, decoder_sparse_step); this model has neither" "$W/lora-bad.err"; then
  ok "--lora targets=gate_proj is refused, naming the experts' fused targets"
else cat "$W/lora-bad.err"; bad "--lora targets=gate_proj: unclear error"; fi
if "$Z/zinfc" --from-hf "$W/qwen3moe" --seq $SEQ --lora targets=gate --emit=zl > /dev/null 2> "$W/lora-bad.err"; then
  bad "--lora targets=gate (the router) accepted"
elif grep -qF "unknown target 'gate' (the MoE blocks' attention linears, experts and SwiGLU MLPs: q_proj, k_proj, v_proj, o_proj, experts.gate_up_proj, experts.down_proj, gate_up_proj, gate_proj, up_proj, down_proj)" "$W/lora-bad.err"; then
  ok "--lora on the router is refused by name"
else cat "$W/lora-bad.err"; bad "--lora targets=gate: unclear error"; fi

"$ZINF_PY" tests/e2e/moe_hf.py batch "$W" "$W/batch" 2> "$W/py.log" || { tail -5 "$W/py.log"; bad "the checks in Python (above)"; }

# bad input: errors naming the key or the tensor
cfgerr() { # NAME SED MESSAGE: config.json of mixtral (or $CFG) edited by SED must fail with MESSAGE
  src=$W/${CFG:-mixtral}
  rm -rf "$W/bad"; mkdir "$W/bad"; sed "$2" "$src/config.json" > "$W/bad/config.json"
  if "$Z/zinfc" --from-hf "$W/bad" --seq $SEQ --emit=zl > /dev/null 2> "$W/bad.err"; then bad "$1: accepted"
  elif grep -qF "$3" "$W/bad.err"; then ok "$1: $3"
  else cat "$W/bad.err"; bad "$1: the error does not say '$3'"; fi
}
cfgerr "top-k above the experts" 's/"num_experts_per_tok": 2/"num_experts_per_tok": 5/' \
  "num_experts_per_tok = 5 is more than the 4 experts (num_local_experts)"
cfgerr "router noise" 's/"router_jitter_noise": 0.0/"router_jitter_noise": 0.1/' "router_jitter_noise = 0.1 is not supported"
CFG=qwen3moe cfgerr "every layer dense" 's/"mlp_only_layers": \[\]/"mlp_only_layers": [0, 1]/' \
  "every layer has a dense MLP (mlp_only_layers, decoder_sparse_step = 1): a Qwen3MoeForCausalLM without a sparse layer is not supported"
CFG=qwen2moe cfgerr "sparse step past the layers" 's/"decoder_sparse_step": 1/"decoder_sparse_step": 3/' \
  "every layer has a dense MLP (mlp_only_layers, decoder_sparse_step = 3): a Qwen2MoeForCausalLM without a sparse layer is not supported"
CFG=qwen3moe cfgerr "a bad layer index" 's/"mlp_only_layers": \[\]/"mlp_only_layers": [-1]/' \
  "mlp_only_layers has -1: a layer index is an integer from 0"
CFG=olmoe cfgerr "clip_qkv" 's/"clip_qkv": null/"clip_qkv": 8.0/' "clip_qkv = 8.0 is not supported"
CFG=qwen3moe cfgerr "no moe_intermediate_size" '/"moe_intermediate_size"/d' "config.json has no moe_intermediate_size"
# a checkpoint without one expert's tensor
miss=model.layers.1.block_sparse_moe.experts.2.w3.weight
"$ZINF_PY" tests/e2e/moe_hf.py drop "$W/mixtral" "$miss" "$W/miss" 2>> "$W/py.log" || bad "making the checkpoint without $miss"
if "$Z/zinfrun" "$W/mixtral.plan" --backend host --init "$W/miss" --data "$W/tok.bin" --steps 1 < /dev/null > "$W/miss.err" 2>&1; then
  bad "a checkpoint without $miss imported"
elif grep -qF "1 tensor the plan maps is not in the checkpoint: $miss" "$W/miss.err"; then ok "a missing expert tensor is named"
else cat "$W/miss.err"; bad "the missing expert tensor is not named"; fi
e2e_end
