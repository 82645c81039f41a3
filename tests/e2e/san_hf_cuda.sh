#!/bin/sh
# Hugging Face weights on the CUDA backend (the fake driver of tests/fakecuda,
# one rank, parameters and Adam state in GPU memory), also under
# AddressSanitizer (san_*): --init writes the shards into GPU homes and
# --export-hf reads them back out, so a checkpoint imported and exported with
# --steps 0 comes back byte for byte; one step from it gives the host
# backend's loss from the same checkpoint.
#   tests/e2e/san_hf_cuda.sh BUILD
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir hfcuda
sh tests/fakecuda/build.sh "$B" > "$W/build.log" 2>&1 || { cat "$W/build.log"; echo "san_hf_cuda: the fake driver did not build"; exit 1; }
export ZINF_CACHE_DIR="$B/fakecuda/nvrtc-cache"
cat > "$W/m.zl" <<ZL
import "nn"
const V = 256, T = 16, D = 64, H = 2, L = 1
model gpt_micro_hf(tokens: i32[B, T], targets: i32[B, T]) {
  wte = param [V, D] init normal(0.02)
  wpe = param [T, D] init normal(0.01)
  x = embedding(wte, tokens) + embedding(wpe, arange(T))
  repeat L { x = block(x, H) }
  x = ln(x)
  loss cross_entropy(matmul(x, wte, transpose_b), targets)
}
train { micro_batch = 2; steps = 20; dtype = f32; grad_clip = 1.0
  optimizer = adam(lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1) }
hf "GPT2LMHeadModel" {
  config = "{\"model_type\": \"gpt2\"}"
  "wte" = "transformer.wte.weight"
  "wpe" = "transformer.wpe.weight"
  "ln.g" = "transformer.ln_f.weight"
  "ln.b" = "transformer.ln_f.bias"
}
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu" }
ZL
mkdir -p "$W/src"
"$B/bin/zinfc" "$W/m.zl" --kernels=sm_90 --kernel-src="$W/src" -o "$W/m.plan" > "$W/zinfc.log" 2>&1 || { cat "$W/zinfc.log"; exit 1; }
"$B/fakecuda/fakecuda_prep" "$W/m.plan" "$W/src" sm_90 "$B/fakecuda/units" > "$W/prep.log" 2>&1 || { cat "$W/prep.log"; exit 1; }
"$B/bin/zinftok" "$ROOT/README.md" -o "$W/train.bin" > /dev/null || exit 1
host() { timeout 300 "$B/bin/zinfrun" "$W/m.plan" --backend host --quiet "$@"; }
cuda() { LD_LIBRARY_PATH="$B/fakecuda" FAKECUDA_UNITS="$B/fakecuda/units" timeout 300 "$B/bin/zinfrun" "$W/m.plan" --backend cuda --quiet "$@"; }
# a checkpoint that is not the seeded initialisation: the host's state after 2 steps
host --data "$W/train.bin" --steps 2 --from-scratch --export-hf "$W/hf" > "$W/a.out" 2>&1 || { cat "$W/a.out"; echo "FAIL: host export"; exit 1; }
cuda --init "$W/hf" --steps 0 --export-hf "$W/back" > "$W/b.out" 2>&1 || { cat "$W/b.out"; echo "FAIL: cuda import/export"; exit 1; }
cmp "$W/hf/model.safetensors" "$W/back/model.safetensors" || { echo "FAIL: the GPU round trip changed the weights"; exit 1; }
host --init "$W/hf" --data "$W/train.bin" --steps 1 --losses "$W/h.loss" > "$W/c.out" 2>&1 || { cat "$W/c.out"; echo "FAIL: host from hf"; exit 1; }
cuda --init "$W/hf" --data "$W/train.bin" --steps 1 --losses "$W/c.loss" > "$W/d.out" 2>&1 || { cat "$W/d.out"; echo "FAIL: cuda from hf"; exit 1; }
h=$(awk '{print $4}' "$W/h.loss"); c=$(awk '{print $4}' "$W/c.loss")
awk -v h="$h" -v c="$c" 'BEGIN { d = h - c; if (d < 0) d = -d; exit !(h > 0 && d <= 1e-4 * h) }' ||
  { echo "FAIL: step 1 from the checkpoint: host $h, cuda $c"; exit 1; }
echo "san_hf_cuda: ok (GPU homes: import + export byte for byte; step 1 from the checkpoint: host $h, cuda $c)"
