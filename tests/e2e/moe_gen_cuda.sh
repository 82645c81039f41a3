#!/bin/sh
# zinfgen --decode kv of a mixture of experts on the CUDA backend: the
# plan's decode kernels (stdlib/kernels/decode.cu's zkd_moe_expert and
# moe.cu's routing, gates, combination and shared gate, as
# compiler/cuda_gen_decode.c puts them in the decode unit) on the fake
# driver and kernel emulator of tests/fakecuda (docs/testing-gpu-fake.md),
# against the host decoder (runtime/hostk/hostk_moe.c), for a micro model of
# each router variant of stdlib/moe.zl:
#   - mixtral: top-2 of 4 experts, renormalised gates (normalize = true),
#     trained with the load-balancing loss (which a step leaves out);
#   - qwen3: top-2 of 4, the gates not renormalised (norm_topk_prob false),
#     per-head q and k norms, aux = false;
#   - qwen2: top-1 of 4 not renormalised, q/k/v biases, and the shared
#     expert scaled by sigmoid(x ws^T) (moe_shared_gate); in f32 and bf16;
#   - lora: qwen3 with LoRA on the experts (lora_gate_up, lora_down: more
#     moe_expert products, of the [E, r, D] and [E, 2F, r] adapters), from
#     a checkpoint of 3 steps on the host (the adapters' B start at zero);
#   - tiled: mixtral's plan with the experts tiled by expert (2 tiles of 2),
#     which the decoder reads whole.
# Each: its 10 greedy tokens after a prompt of 3 (the cache of T = 16
# positions) equal the host decoder's, and the logits of every new token
# (--logits) are within 1e-5 of the largest of the host decoder's (f32: the
# GPU sums in another order; bf16: within two bf16 steps, 8e-3, and at most
# 2% of them not equal, as tests/e2e/eval_gen_cuda.sh). The embedding is drawn small (normal(0.001))
# so that what the blocks add, the experts' outputs among it, decides the
# tokens (the router reads rms(x), so its logits stay far from ties).
# The stderr line says the decoder runs on the CUDA backend.
#   tests/e2e/moe_gen_cuda.sh BUILD
# GPU=1 (a GPU machine): the same on the real device, with its driver.
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir moegencuda
e2e_mpi
fail=0
arch=${MOE_ARCH:-sm_90}
if [ "${GPU:-0}" = 1 ]; then
  M="$W/models" FAKEENV="env"
else
  . tests/fakecuda/env.sh || exit 1
  # the models at a path that does not change from run to run (the units' comments name their
  # lines, and fakecuda_prep keeps a unit built from the same text)
  M="$(cd "$UNITS/.." && pwd)/moe_gen_cuda"
  FAKEENV="env LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} FAKECUDA_UNITS=$UNITS"
fi
mkdir -p "$M" || exit 1
model() { # NAME DTYPE BLOCK-ARGS LOSS-TERM [LR [PLAN]]: PLAN, more of the plan block
  cat > "$W/model.zl" <<ZL
# tests/e2e/moe_gen_cuda.sh: a micro mixture of experts ($1)
import "llama"
import "moe"
const V = 256, T = 16, D = 32, H = 2, KV = 1, E = 4, F = 24, L = 2
model moe_gen_$1(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.001)
  x = embedding(tok, tokens)
  load = moe_load(experts = E)
  repeat L { x, load = moe_block(x, load, H, KV, E, $3) }
  x = rms(x)
  head = param [D, V] init normal(0.2)
  loss cross_entropy(linear(x, head), targets)$4
}
train { micro_batch = 1; steps = 1; dtype = $2; optimizer = adam(lr = ${5:-1e-3}) }
ZL
  cmp -s "$W/model.zl" "$M/$1.zl" || mv -f "$W/model.zl" "$M/$1.zl"
  cat > "$W/$1.zl" <<ZL
import "$M/$1.zl"
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "$arch"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu"; whole_below = 1000${6:+; $6} }
ZL
  mkdir -p "$W/src-$1"
  : > "$W/$1.prep"
  "$B/bin/zinfc" "$W/$1.zl" --kernels="$arch" --kernel-src="$W/src-$1" -o "$W/$1.plan" > "$W/$1.zinfc" 2>&1 &&
    { [ "${GPU:-0}" = 1 ] || "$FAKE/fakecuda_prep" "$W/$1.plan" "$W/src-$1" "$arch" "$UNITS" > "$W/$1.prep" 2>&1; } ||
    { cat "$W/$1.zinfc" "$W/$1.prep"; echo "FAIL: $1: zinfc or fakecuda_prep"; fail=1; return 1; }
}
kvcheck() { # NAME TOL FRAC [ARGS...]: the logits within TOL of the largest, at most FRAC of them not equal
  n=$1 tol=$2 frac=$3
  shift 3
  g="$W/$n.plan --prompt-ids 5,17,30 --max-new 10 --temperature 0 --decode kv $*"
  # shellcheck disable=SC2086
  if ! $FAKEENV timeout 300 "$B/bin/zinfgen" $g --backend cuda --logits "$W/$n.lc" > "$W/$n.kc" 2> "$W/$n.ekc" < /dev/null ||
     ! timeout 120 "$B/bin/zinfgen" $g --backend host --logits "$W/$n.lh" > "$W/$n.kh" 2> "$W/$n.ekh" < /dev/null; then
    tail -n 3 "$W/$n.ekc" "$W/$n.ekh"; echo "FAIL $n: zinfgen"; fail=1; return
  fi
  e2e_kv_verdict "$n" 10 "$tol" "$frac" 0 "--decode kv on cuda = on the host" 0 || fail=1
}
qwen2="1, F, normalize = false, qkv_bias = true, aux = false, shared_expert = true, shared_hidden = 16"
model mixtral f32 "2, F, normalize = true" " + moe_aux_loss(load, E, L, B * T, 0.02)" && kvcheck mixtral 1e-5 1
model qwen3 f32 "2, F, normalize = false, qk_norm = true, aux = false" "" && kvcheck qwen3 1e-5 1
model qwen2 f32 "$qwen2" "" && kvcheck qwen2 1e-5 1
# LoRA on the experts (moe_expert of the [E, r, D] and [E, 2F, r] adapters): B starts at zero,
# so 3 steps of zinfrun on the host first, at a rate that makes the adapters count
if model lora f32 "2, F, normalize = false, qk_norm = true, aux = false, lora_gate_up = true, lora_down = true" "" 3e-2; then
  "$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null &&
    timeout 120 "$B/bin/zinfrun" "$W/lora.plan" --data "$W/train.bin" --steps 3 --backend host --checkpoint-dir "$W/ck-lora" \
      --checkpoint-every 3 --quiet < /dev/null > "$W/lora.train" 2>&1 &&
    kvcheck lora 1e-5 1 --checkpoint "$W/ck-lora" || { tail -5 "$W/lora.train"; echo "FAIL lora: zinfrun"; fail=1; }
fi
model qwen2_bf16 bf16 "$qwen2" "" && kvcheck qwen2_bf16 8e-3 0.02
# the experts tiled by expert (2 tiles of 2 for training): the decoder reads whole experts whatever the tiling
if model tiled f32 "2, F, normalize = true" "" "" 'tiles "*.moe_mlp.wg" = 2; tiles "*.moe_mlp.wd" = 2'; then
  if "$B/bin/zinfc" "$W/tiled.zl" --kernels=none --explain -o "$W/tiled-x.plan" 2>&1 | grep -q "in 2 tiles of 2 experts"
  then kvcheck tiled 1e-5 1
  else echo "FAIL tiled: the plan's experts are not in 2 tiles"; fail=1; fi
fi
exit $fail
