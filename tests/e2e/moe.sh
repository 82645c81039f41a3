#!/bin/sh
# Mixture-of-experts models (stdlib/moe.zl, the moe_* primitives) against
# transformers on the host backend. tests/e2e/moe.py makes small random
# MixtralForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM and
# Qwen2MoeForCausalLM (its shared expert and sigmoid gate) models (with
# and without the load-balancing loss; a routing where every token picks the
# same experts and the others get no token, top-2 and top-1; Qwen3-MoE with
# PEFT's LoRA on the experts, target_parameters experts.gate_up_proj and
# experts.down_proj, its B nonzero; Qwen3-MoE with dense layers among the
# sparse ones, mlp_only_layers [1] and decoder_sparse_step 2, the latter
# with and without the load-balancing loss: moe_block's sparse = an
# expression of the layer) and writes each
# as a .zl model with its weights under zinf's names. For each, zinfrun
# --init runs one step and --export's the parameters:
#  - the step-1 loss equals transformers' (cross-entropy plus
#    router_aux_loss_coef * load_balancing_loss_func) within 1e-5 relative;
#  - every parameter's gradient (routers included), read off the AdamW
#    step, equals torch autograd's;
# on 1 rank, on 2 ranks (mpirun: the mean of the ranks' losses and
# gradients, as data parallelism in torch), and with the parameters homed
# on NVMe (2 ranks); and with the experts' weights tiled by expert (plan
# { tiles }: 2 and 4 tiles of 4 experts, 1 and 2 ranks, experts homed on
# CPU and on NVMe, the skewed routings where every token picks expert 0
# and experts get no token among them), whose losses over 3 steps also
# equal the untiled run's within 1e-6 relative (the tiles add in the
# untiled kernel's order: in f32 the same bits). Then: zinfgen's greedy continuation equals
# transformers' generate; a CUDA target's plan compiles with the family's
# kernels (and plans tiles by expert); top_k above the expert
# count and a mismatched load are errors naming them.
#   tests/e2e/moe.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir moe
e2e_mpi
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
fail=0
"$ZINF_PY" tests/e2e/moe.py make "$W" > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the models"; exit 1; }
cases=$(grep -v '^\[' "$W/make.log")
mkdir -p "$W/nvme"
for R in 1 2; do
  cat > "$W/t$R.zl" <<ZL
target t$R { backend = "host"; ranks = $R; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1.5 GB/s; write = 1.5 GB/s; capacity = 4 GiB } }
ZL
done
run() { # CASE RANKS KIND(cpu|nvme) [TILES of each expert weight, 1: none [STEPS, 1: checked against transformers]]
  c=$1 R=$2 k=$3 nt=${4:-1} steps=${5:-1} n=$1-$2-$3
  [ "$nt" = 1 ] || n=$n-t$nt
  [ "$steps" = 1 ] || n=$n-s$steps
  pl=
  [ "$k" = nvme ] && pl='params = "nvme"; optimizer = "nvme"; grads = "cpu"; whole_below = 1000; '
  [ "$nt" = 1 ] || pl="$pl"'tiles "*.moe_mlp.wg" = '$nt'; tiles "*.moe_mlp.wu" = '$nt'; tiles "*.moe_mlp.wd" = '$nt
  if [ -n "$pl" ]; then { cat "$W/$c.zl"; echo "plan { $pl }"; } > "$W/$n.zl"; else cp "$W/$c.zl" "$W/$n.zl"; fi
  "$Z/zinfc" "$W/$n.zl" --target "$W/t$R.zl" -o "$W/$n.plan" --explain > "$W/$n.zinfc" 2>&1 ||
    { cat "$W/$n.zinfc"; echo "FAIL: zinfc $n"; fail=1; return; }
  if [ "$nt" != 1 ] && ! grep -q "^tile moe_block.1.moe_mlp.wd \[4, [0-9]*, [0-9]*\] in $nt tiles of $((4 / nt)) expert" "$W/$n.zinfc"; then
    cat "$W/$n.zinfc"; echo "FAIL: $n: the experts are not in $nt tiles"; fail=1; return
  fi
  if [ "$R" = 1 ]; then set -- "$Z/zinfrun"; else set -- mpirun -np "$R" --oversubscribe "$Z/zinfrun"; fi
  rm -rf "$W/nvme"/* "$W/$n.losses"
  timeout 120 "$@" "$W/$n.plan" --backend host --init "$W/$c.safetensors" --data "$W/tok.bin" --steps "$steps" \
      --nvme "$W/nvme" --losses "$W/$n.losses" --export "$W/$n.out.safetensors" < /dev/null > "$W/$n.run" 2>&1 ||
    { cat "$W/$n.run"; echo "FAIL: zinfrun $n"; fail=1; return; }
  [ "$steps" = 1 ] && echo "$c $R $W/$n.out.safetensors $W/$n.losses" >> "$W/checks"
}
# the losses of 3 steps tiled by expert against untiled: the same within 1e-6 relative
same_losses() { # CASE RANKS KIND TILES
  run "$1" "$2" "$3" 1 3
  run "$1" "$2" "$3" "$4" 3
  a="$W/$1-$2-$3-s3.losses" b="$W/$1-$2-$3-t$4-s3.losses"
  [ -s "$a" ] && [ -s "$b" ] && [ "$(wc -l < "$a")" = 3 ] && [ "$(wc -l < "$b")" = 3 ] &&
    paste "$a" "$b" | awk '{ d = $4 - $10; if (d < 0) d = -d; m = $4 < 0 ? -$4 : $4
                              if ($2 != $8 || d > 1e-6 * m) exit 1 }' ||
    { paste "$a" "$b"; echo "FAIL: $1 on $2 rank(s), $3, $4 tiles: the losses of 3 steps differ from untiled"; fail=1; }
}
: > "$W/checks"
for c in $cases; do run "$c" 1 cpu; done
for c in mixtral qwen3moe qwen3moe-lora skewed qwen3moe-step2; do run "$c" 2 cpu; done
run olmoe 2 nvme
# tiled by expert (4 experts a layer), checked against transformers as above
run mixtral 1 cpu 2
run skewed-top1 1 cpu 4
run skewed 2 cpu 2
run mixtral 2 nvme 4
run skewed-top1 1 nvme 2
# and their losses over 3 steps against untiled
same_losses mixtral 1 cpu 4
same_losses skewed 2 nvme 2
same_losses skewed-top1 2 cpu 2
"$ZINF_PY" tests/e2e/moe.py check "$W" "$W/checks" || fail=1
[ "$(wc -l < "$W/checks")" -ge 16 ] || { echo "FAIL: only $(wc -l < "$W/checks") runs"; fail=1; }

# generation, greedy, with the KV cache (the model written with aux = false) and
# with a forward of the window each token: the tokens and the logits of transformers' generate
for dm in kv window; do
  "$Z/zinfgen" "$W/mixtral-noaux-1-cpu.plan" --init "$W/mixtral-noaux.safetensors" --prompt-ids 5,17,40 --decode $dm \
      --temperature 0 --max-new 9 --logits "$W/logits-$dm" > "$W/gen-$dm" 2> "$W/zinfgen-$dm.err" ||
    { cat "$W/zinfgen-$dm.err"; echo "FAIL: zinfgen --decode $dm"; fail=1; }
done
grep -q "KV cache of T = 12 positions" "$W/zinfgen-kv.err" || { cat "$W/zinfgen-kv.err"; echo "FAIL: no KV cache"; fail=1; }
want=$("$ZINF_PY" tests/e2e/moe.py gen "$W" mixtral-noaux 5,17,40 9 "$W/logits-kv" "$W/logits-window" 2> "$W/gen.err") ||
  { cat "$W/gen.err"; fail=1; }
for dm in kv window; do
  got=$(cat "$W/gen-$dm")
  [ -n "$want" ] && [ "$got" = "$want" ] || { echo "FAIL: zinfgen --decode $dm greedy '$got', transformers '$want'"; fail=1; }
done

# the cost model's line: active FLOPs against all experts', the bytes of all experts
# (mixtral: 2 layers x 3 expert GEMMs, 4 experts of 3 [40, 48] weights each)
"$Z/zinfdump" "$W/mixtral-1-cpu.plan" > "$W/dump" 2>&1 || { cat "$W/dump"; fail=1; }
grep -q "^mixture of experts: 6 expert GEMMs a step (moe_expert), 4 experts, 2 a token; .*expert parameters 46080 " "$W/dump" ||
  { cat "$W/dump"; echo "FAIL: zinfdump's mixture-of-experts line"; fail=1; }

# the MoE examples plan on their targets (docs/tuning.md's figures; no GPU code)
for ex in qwen3-30b-a3b:h200 mixtral-8x7b:dgx-h100; do
  "$Z/zinfc" "examples/moe/${ex%%:*}.zl" --target "${ex#*:}" --kernels=none -o "$W/ex.plan" > "$W/ex.log" 2>&1 ||
    { cat "$W/ex.log"; echo "FAIL: planning examples/moe/${ex%%:*}.zl"; fail=1; }
done

# the CUDA backend's kernels for the family (stdlib/kernels/moe.cu; tests/e2e/moe_cuda_emu.sh runs them):
# a CUDA plan of the model compiles, its units through NVRTC, and lists the grouped expert GEMMs
if "$Z/zinfc" "$W/mixtral.zl" --target examples/targets/h200.zl --kernels=sm_90 -o "$W/cuda.plan" > "$W/cuda.err" 2>&1; then
  "$Z/zinfdump" "$W/cuda.plan" --kernels > "$W/cuda.kernels" 2>&1 || { cat "$W/cuda.kernels"; fail=1; }
  grep -q "zk_moe_gemm_fwd" "$W/cuda.kernels" && grep -q "zk_moe_gemm_dw" "$W/cuda.kernels" ||
    { echo "FAIL: the CUDA plan has no grouped expert GEMMs"; fail=1; }
else
  cat "$W/cuda.err"; echo "FAIL: a CUDA plan of an MoE model was refused"; fail=1
fi

# bad configurations: errors naming what is wrong
sed 's/^const \(.*\)K = 2,/const \1K = 5,/' "$W/mixtral.zl" > "$W/bad-k.zl"
if "$Z/zinfc" "$W/bad-k.zl" > "$W/bad-k.err" 2>&1; then echo "FAIL: top_k 5 of 4 experts accepted"; fail=1; fi
grep -q "moe_topk: k = 5 is larger than the number of experts, logits' last dimension 4" "$W/bad-k.err" ||
  { cat "$W/bad-k.err"; echo "FAIL: top_k > experts not named"; fail=1; }
sed 's/load = moe_load(experts = E)/load = moe_load(experts = E + 1)/' "$W/mixtral.zl" > "$W/bad-load.zl"
if "$Z/zinfc" "$W/bad-load.zl" > "$W/bad-load.err" 2>&1; then echo "FAIL: a load of 5 experts accepted"; fail=1; fi
grep -q "moe_load: acc must be f32\[2, 4\]" "$W/bad-load.err" ||
  { cat "$W/bad-load.err"; echo "FAIL: the mismatched load not named"; fail=1; }
# tiles by expert run on the CUDA backend too (tests/e2e/moe_cuda_emu.sh trains them on the fake driver): a CUDA target plans them
{ cat "$W/mixtral.zl"; echo 'plan { tiles "*.moe_mlp.wg" = 2 }'; } > "$W/cuda-tiled.zl"
"$Z/zinfc" "$W/cuda-tiled.zl" --target examples/targets/h200.zl --kernels=none --explain -o "$W/cuda-tiled.plan" > "$W/cuda-tiled.err" 2>&1 ||
  { cat "$W/cuda-tiled.err"; echo "FAIL: a CUDA plan with experts tiled by expert refused"; fail=1; }
grep -q "^tile moe_block.0.moe_mlp.wg \[4, [0-9]*, [0-9]*\] in 2 tiles of 2 experts" "$W/cuda-tiled.err" ||
  { cat "$W/cuda-tiled.err"; echo "FAIL: the CUDA plan's experts are not in 2 tiles"; fail=1; }
[ $fail = 0 ] && echo "moe: ok"
exit $fail
