#!/bin/sh
# Gemma's and long context's attributes on the CUDA backend, end to end
# without a GPU: zinfrun's CUDA executor on the fake driver of tests/fakecuda
# (docs/testing-gpu-fake.md), the plan's own kernels on the kernel emulator,
# against the host backend running the same plan (f32: losses and gradient
# norms within 2e-4 relative per step, cuda_fake.sh's tolerance):
#   gemma2   a Gemma-2-style micro model (stdlib/gemma.zl): RMSNorm by 1 + w
#            (rmsnorm's offset, per q and k head too), attention scale and
#            soft-capping, final-logit softcap; Gemma 3's alternating
#            layers (a window of 5 of T = 16 and rope base 100, then no window
#            and base 10000); in f32 and in bf16 (the
#            tensor-core attention kernels; 3e-2, train_e2e.sh's bf16 tolerance);
#   phi4     a Phi-4-mini-style micro model (stdlib/llama.zl): partial rotary
#            (12 of each head's 16 columns turn), longrope with its
#            attention_factor, layer 0's original context of 8 < T = 16 (the
#            long list), layer 1's of 32 (the short list); in f32 (1e-5 on
#            the fake driver: rope moves this model's losses by ~3e-4) and bf16;
#   window   a Mistral-style micro model (stdlib/llama.zl): a sliding window
#            per layer (5 and 12 positions of T = 16, and one layer whose
#            window holds T), YaRN rope with its attention factor;
#   chunk    tests/e2e/models/llama-micro.zl with its loss chunked by 5 rows
#            (plan { loss_chunk = 5 }: 32 rows, the last chunk shorter):
#            linear_cross_entropy's GEMMs on the fake cuBLASLt, their logits
#            in the op's workspace;
#   whole    the same model as written (loss_chunk = 0, mlp_tile = 0);
#   mlp      the same with its MLP tiled by 5 rows (plan { mlp_tile = 5 }:
#            gated_mlp on the CUDA kernels, the last tile shorter);
#   mlp-lora the same with LoRA adapters on the MLP's three projections (and
#            q), only the adapters trained (lr 5e-2, so that by step 2 every
#            adapter's gradient moves the losses); lora-whole: its MLP as
#            written;
#   mlp-bf16 mlp in bf16 (the weights' gradients through fp32
#            accumulators; 3e-2).
# And on the CUDA backend itself, fp32: chunk, and mlp, equal whole, and
# mlp-lora equals lora-whole, within 1e-6 relative (losses and gradient
# norms of the 3 steps; 1e-5 on a GPU, where cuBLASLt may pick another
# algorithm for another shape): the chunked loss and the tiled MLP are the
# computation as written, not only close to the host's.
# Each plan must carry the kernels' arguments (zinfdump --kernels: the
# window, the scale and the soft-cap of each attention launch, each rope
# launch's base, the chunked
# loss's products with the workspace as an operand).
# With CUDA_LONG_GPU=1 (tests/gpu/run_all.sh on a machine with a GPU) the
# same runs take the real driver, cuBLASLt and the GPU's architecture.
#   tests/e2e/cuda_long_fake.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir cudalong
if [ "${CUDA_LONG_GPU:-0}" = 1 ]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  arch=sm_${arch:-90} FAKE=""
  cudaenv() { env "$@"; }
else
  e2e_mpi
  . tests/fakecuda/env.sh || exit 1
  arch=sm_90
  cudaenv() { env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" "$@"; }
fi
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/gpl.bin" > /dev/null || exit 1
TRAIN=$(cat <<ZL
train {
  micro_batch = 2
  steps = 20
  dtype = f32
  optimizer = adam(lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-5, weight_decay = 0.1)
  warmup = 2
  grad_clip = 1.0
  checkpoint = "layer"
}
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "$arch"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
ZL
)
cat > "$W/gemma2.zl" <<ZL
import "gemma"
const V = 256, T = 16, D = 64, H = 2, KV = 1, F = 96, L = 2, HD = 32
model gemma_micro(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = scale(embedding(tok, tokens), 8.0)
  # Gemma 3's pattern of period 2: layer 0 sliding (a window of 5, rope base 100), layer 1 global (10000)
  repeat L as i {
    G = (i + 1) / 2 - i / 2
    x = gemma_block(x, H, KV, F, HD, 0.25, softcap = 0.05, qk_norm = true, theta = 10000.0 * G + 100.0 * (1 - G),
                    window = 5 * (1 - G))
  }
  x = gemma_rms(x)
  loss cross_entropy(softcap(matmul(x, tok, transpose_b), 0.5), targets)
}
$TRAIN
ZL
cat > "$W/window.zl" <<ZL
import "llama"
const V = 256, T = 16, D = 64, H = 4, KV = 2, F = 96, L = 3
model window_micro(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = embedding(tok, tokens)
  repeat L as i {
    x = llama_block(x, H, KV, F, window = 5 + 7 * i + 4 * (i / 2), rope_scaling = "yarn", rope_factor = 4.0,
                    original_max_positions = 8, rope_attention_scale = true, rope_attention_factor = 1.1386)
  }
  x = rms(x)
  head = param [D, V] init normal(0.02)
  loss cross_entropy(linear(x, head), targets)
}
$TRAIN
ZL
cat > "$W/phi4.zl" <<ZL
import "llama"
const V = 256, T = 16, D = 64, H = 4, KV = 2, F = 96, L = 2
model phi4_micro(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = embedding(tok, tokens)
  repeat L as i {
    x = llama_block(x, H, KV, F, rotary_dim = 12, rope_scaling = "longrope", original_max_positions = 8 + 24 * i,
                    attention_factor = 1.224744871391589, short_factor = [1.0, 1.25, 1.5, 2.0, 3.0, 4.5],
                    long_factor = [1.5, 2.75, 4.0, 6.5, 9.0, 13.0])
  }
  x = rms(x)
  loss cross_entropy(matmul(x, tok, transpose_b), targets)
}
$TRAIN
ZL
sed 's/dtype = f32/dtype = bf16/; s/^model phi4_micro/model phi4_bf16/' "$W/phi4.zl" > "$W/phi4-bf16.zl"
# the Gemma model in bf16: the tensor-core attention kernels (mma.sync on the emulator); 3e-2 as train_e2e.sh's bf16
sed 's/dtype = f32/dtype = bf16/; s/^model gemma_micro/model gemma_bf16/' "$W/gemma2.zl" > "$W/gemma2-bf16.zl"
micro() { { sed "/^train {/,\$d; $2" tests/e2e/models/llama-micro.zl; printf '%s\nplan { %s }\n' "$TRAIN" "$1"; }; }
micro "loss_chunk = 5" "" > "$W/chunk.zl"
micro "loss_chunk = 0; mlp_tile = 0" "" > "$W/whole.zl"
micro "loss_chunk = 0; mlp_tile = 5" "" > "$W/mlp.zl"
LORA='s/llama_block(x, H, KV, F)/llama_block(x, H, KV, F, lora_rank = 4, lora_q = true, lora_gate = true, lora_up = true, lora_down = true)/'
# lr 5e-2: the adapters' B (zero at first) large enough by step 2 that every adapter gradient moves the losses
micro "loss_chunk = 0; mlp_tile = 5" "$LORA" | sed 's/^  grad_clip = 1.0/&\n  freeze = ["*", "!*.lora_*"]/; s/lr = 1e-3/lr = 5e-2/' > "$W/mlp-lora.zl"
micro "loss_chunk = 0; mlp_tile = 0" "$LORA" | sed 's/^  grad_clip = 1.0/&\n  freeze = ["*", "!*.lora_*"]/; s/lr = 1e-3/lr = 5e-2/' > "$W/lora-whole.zl"
sed 's/dtype = f32/dtype = bf16/' "$W/mlp.zl" > "$W/mlp-bf16.zl"
fail=0
for k in gemma2 gemma2-bf16 phi4 phi4-bf16 window chunk whole mlp mlp-lora lora-whole mlp-bf16; do
  mkdir -p "$W/src-$k"
  "$B/bin/zinfc" "$W/$k.zl" --kernels="$arch" --kernel-src="$W/src-$k" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1 &&
    { [ -z "$FAKE" ] || "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" "$arch" "$UNITS" > "$W/$k.prep" 2>&1; } ||
    { cat "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL: $k: zinfc or fakecuda_prep"; fail=1; continue; }
  # the attributes reach the kernels: zk_attn_fwd's scale, window and soft-cap (its 11th to 13th arguments);
  # the chunked loss: the last, shorter chunk's gradient, a weight gradient with the workspace as its B
  "$B/bin/zinfdump" "$W/$k.plan" --kernels > "$W/$k.kernels" 2>&1 || { echo "FAIL: $k: zinfdump --kernels"; fail=1; continue; }
  if [ $k = chunk ]; then
    want="zk_xent_grad <<<(2,1,1), (256,1,1), 0>>> (ws+0, targets+120B" other="cublaslt f32 TN m=64 n=256 k=5 .* grad.head = %[0-9]*\*ws (accumulate)"
  elif [ $k = whole ] || [ $k = lora-whole ]; then
    want="zk_xent_fwd" other="zk_silu_fwd"
    ! grep -q "gated_mlp\|linear_cross_entropy" "$W/$k.kernels" || { echo "FAIL: $k: the MLP is tiled or the loss chunked"; fail=1; continue; }
  elif [ $k = mlp ]; then
    # the last, shorter tile's norm (rows 30 and 31: x + 30 * 64 floats); its weight gradient, accumulated in place
    want="zk_rmsnorm_fwd <<<(2,1,1), (256,1,1), 0>>> (ws+0, %[0-9]*+7680B" other="cublaslt f32 TN m=64 n=96 k=2 .* grad.llama_block.0.swiglu.w1 = ws\*ws (accumulate)"
  elif [ $k = mlp-lora ]; then
    want="cublaslt f32 TN m=4 n=64 k=2 .* grad.llama_block.0.swiglu.lora_down_b = ws\*ws (accumulate)" other="zk_rmsnorm_bwd .*, 1, 0, 0)"
    ! grep -q "grad.llama_block.0.swiglu.w1" "$W/$k.kernels" || { echo "FAIL: $k: a frozen weight has a gradient"; fail=1; continue; }
  elif [ $k = mlp-bf16 ]; then
    # the weights' gradients: each tile's into the scratch, into an fp32 accumulator, added once after the last tile
    want="zk_cast_from_f32 <<<.*(grad.llama_block.0.swiglu.w1, ws+[0-9]*, 6144, 1, 1)" other="zk_cast_to_f32 <<<.*(ws+[0-9]*, ws+[0-9]*, 6144, 1, 1)"
  elif [ $k = phi4 ] || [ $k = phi4-bf16 ]; then
    # rope's scaling 4 (longrope), factor, low, high, original context, rotary_dim 12 and attention_factor, per layer
    want="zk_rope .*, 4, 1, 1, 4, 8, 12, 1.2247[0-9]*, \\\$seg)" other="zk_rope .*, 4, 1, 1, 4, 32, 12, 1.2247[0-9]*, \\\$seg)"
  elif [ $k = gemma2 ] || [ $k = gemma2-bf16 ]; then
    want="zk_attn_fwd .*, 0.25, 5, 0.05[0-9]*, \\\$seg)" other="zk_softcap_fwd .*, 0.5)"
  else
    want="zk_attn_fwd .*, 0.25, 5, 0, \\\$seg)" other="zk_attn_fwd .*, 0.25, 12, 0, \\\$seg)"
  fi
  grep -q "$want" "$W/$k.kernels" && grep -q "$other" "$W/$k.kernels" ||
    { grep -m3 "zk_attn_fwd\|zk_softcap\|zk_rope" "$W/$k.kernels"; echo "FAIL: $k: the launches lack the attributes"; fail=1; continue; }
  if [ $k = window ] && ! grep -q "zk_attn_fwd .*, 0.25, 0, 0, \$seg)" "$W/$k.kernels"; then
    echo "FAIL: window: a window of 23 >= T = 16 is not passed as no window"; fail=1; continue
  fi
  # Gemma's global layer: no window; each layer's rope base (zk_rope's 7th argument, after the head width 32)
  case $k in gemma2*)
    grep -q "zk_attn_fwd .*, 0.25, 0, 0.05[0-9]*, \$seg)" "$W/$k.kernels" && grep -q "zk_rope .*, 32, 100, " "$W/$k.kernels" &&
      grep -q "zk_rope .*, 32, 10000, " "$W/$k.kernels" ||
      { grep "zk_attn_fwd\|zk_rope " "$W/$k.kernels"; echo "FAIL: $k: the global layer has a window, or a layer lacks its rope base"; fail=1; continue; } ;;
  esac
  timeout 120 "$B/bin/zinfrun" "$W/$k.plan" --data "$W/gpl.bin" --backend host --steps 3 --losses "$W/$k.host" --quiet \
    < /dev/null > "$W/$k.hout" 2>&1 &&
    cudaenv timeout 300 "$B/bin/zinfrun" "$W/$k.plan" --data "$W/gpl.bin" --backend cuda --steps 3 --losses "$W/$k.cuda" \
      --quiet < /dev/null > "$W/$k.cout" 2>&1 || { tail -5 "$W/$k.hout" "$W/$k.cout"; echo "FAIL: $k: zinfrun"; fail=1; continue; }
  tol=2e-4
  case $k in *bf16) tol=3e-2 ;; esac
  # phi4's rope moves the losses of a model this small by a few 1e-4 (the long list taken for the short one:
  # 3.4e-4), within 2e-4 of nothing: on the fake driver (2e-7 from the host here) it is held to 1e-5
  [ $k = phi4 ] && [ -n "$FAKE" ] && tol=1e-5
  awk -v name="$k" -v tol=$tol -v dev="$([ -n "$FAKE" ] && echo "fake driver" || echo GPU)" 'NR == FNR { l[FNR] = $4; n[FNR] = $6; rows = FNR; next }
    { d = ($4 - l[FNR]) / l[FNR]; e = ($6 - n[FNR]) / n[FNR]; d = d < 0 ? -d : d; e = e < 0 ? -e : e
      if (d > worst) worst = d; if (e > worst) worst = e; got++ }
    END { if (rows != 3 || got != 3 || worst > tol) { printf "FAIL %s: %d and %d steps, worst relative difference %.2e\n", name, rows, got, worst; exit 1 }
          printf "ok   %s on the CUDA backend (%s): 3 steps, losses and gradient norms = the host backend'"'"'s (%.1e relative)\n", name, dev, worst }' \
    "$W/$k.host" "$W/$k.cuda" || { cat "$W/$k.host" "$W/$k.cuda"; fail=1; }
  [ $k = chunk ] && [ -n "$FAKE" ] || continue
  # the chunked loss's GEMMs both ways: through the fake cuBLASLt (it counts them), and as the NVRTC launches
  for lt in 1 0; do
    rm -f "$W/lt.log"
    cudaenv FAKECUBLASLT_LOG="$W/lt.log" ZINF_CUBLASLT=$lt timeout 300 "$B/bin/zinfrun" "$W/$k.plan" --data "$W/gpl.bin" --backend cuda --steps 3 \
      --losses "$W/$k.lt$lt" --quiet < /dev/null > "$W/$k.lt$lt.out" 2>&1 || { tail -3 "$W/$k.lt$lt.out"; echo "FAIL: chunk ZINF_CUBLASLT=$lt"; fail=1; continue; }
    m=$(awk '{ s += $4 } END { print s + 0 }' "$W/lt.log" 2>/dev/null)
    [ "$lt" = 1 ] && nlt=${m:-0}
    if [ "$lt" = 1 ] && [ "${m:-0}" -lt 1 ]; then echo "FAIL: chunk: cuBLASLt ran no GEMM"; fail=1; fi
    if [ "$lt" = 0 ] && [ "${m:-0}" -ne 0 ]; then echo "FAIL: chunk: cuBLASLt ran $m GEMMs with ZINF_CUBLASLT=0"; fail=1; fi
    cmp -s "$W/$k.cuda" "$W/$k.lt$lt" || [ "$lt" = 0 ] || { echo "FAIL: chunk: two cuBLASLt runs differ"; fail=1; }
    awk 'NR == FNR { l[FNR] = $4; next } { d = ($4 - l[FNR]) / l[FNR]; if (d < 0) d = -d; if (d > 2e-4) bad = 1 } END { exit bad }' \
      "$W/$k.host" "$W/$k.lt$lt" || { echo "FAIL: chunk: ZINF_CUBLASLT=$lt losses differ from the host's"; fail=1; }
  done
  echo "ok   chunk: its GEMMs (the workspace an operand) through cuBLASLt ($nlt products with ZINF_CUBLASLT=1 counted by the fake) and NVRTC alike"
done
# the chunked loss and the tiled MLP against the computation as written, both on the CUDA backend
tight=1e-6
[ -z "$FAKE" ] && tight=1e-5
for pair in "chunk whole" "mlp whole" "mlp-lora lora-whole"; do
  set -- $pair
  [ -s "$W/$1.cuda" ] && [ -s "$W/$2.cuda" ] || { echo "FAIL: $1 against $2: a CUDA run is missing"; fail=1; continue; }
  awk -v a="$1" -v b="$2" -v tol=$tight 'NR == FNR { l[FNR] = $4; n[FNR] = $6; rows = FNR; next }
    { d = ($4 - l[FNR]) / l[FNR]; e = ($6 - n[FNR]) / n[FNR]; d = d < 0 ? -d : d; e = e < 0 ? -e : e
      if (d > worst) worst = d; if (e > worst) worst = e; got++ }
    END { if (rows != 3 || got != 3 || worst > tol) { printf "FAIL %s against %s on the CUDA backend: worst relative difference %.2e (tolerance %s)\n", a, b, worst, tol; exit 1 }
          printf "ok   %s = %s on the CUDA backend: 3 steps, losses and gradient norms within %.1e relative\n", a, b, worst }' \
    "$W/$2.cuda" "$W/$1.cuda" || { cat "$W/$1.cuda" "$W/$2.cuda"; fail=1; }
done
[ $fail -eq 0 ] && echo "cuda_long_fake: ok"
exit $fail
