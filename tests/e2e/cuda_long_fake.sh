#!/bin/sh
# Gemma's and long context's attributes on the CUDA backend, end to end
# without a GPU: zinfrun's CUDA executor on the fake driver of tests/fakecuda
# (docs/testing-gpu-fake.md), the plan's own kernels on the kernel emulator,
# against the host backend running the same plan (f32: losses and gradient
# norms within 2e-4 relative per step, cuda_fake.sh's tolerance):
#   gemma    a Gemma-2-style micro model (stdlib/gemma.zl): RMSNorm by 1 + w
#            (rmsnorm's offset, per q and k head too), attention scale and
#            soft-capping, final-logit softcap;
#   window   a Mistral-style micro model (stdlib/llama.zl): a sliding window
#            per layer (5 and 12 positions of T = 16, and one layer whose
#            window holds T), YaRN rope with its attention factor.
# Each plan must carry the kernels' arguments (zinfdump --kernels: the
# window, the scale and the soft-cap of each attention launch).
#   tests/e2e/cuda_long_fake.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir cudalong
e2e_mpi
. tests/fakecuda/env.sh || exit 1
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/gpl.bin" > /dev/null || exit 1
TRAIN='train {
  micro_batch = 2
  steps = 20
  dtype = f32
  optimizer = adam(lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-5, weight_decay = 0.1)
  warmup = 2
  grad_clip = 1.0
  checkpoint = "layer"
}
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }'
cat > "$W/gemma.zl" <<ZL
import "gemma"
const V = 256, T = 16, D = 64, H = 2, KV = 1, F = 96, L = 2, HD = 32
model gemma_micro(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = scale(embedding(tok, tokens), 8.0)
  repeat L { x = gemma_block(x, H, KV, F, HD, 0.25, softcap = 0.05, qk_norm = true) }
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
fail=0
for k in gemma window; do
  mkdir -p "$W/src-$k"
  "$B/bin/zinfc" "$W/$k.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1 &&
    "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1 ||
    { cat "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL: $k: zinfc or fakecuda_prep"; fail=1; continue; }
  # the attributes reach the kernels: zk_attn_fwd's scale, window and soft-cap (its 11th to 13th arguments)
  "$B/bin/zinfdump" "$W/$k.plan" --kernels > "$W/$k.kernels" 2>&1 || { echo "FAIL: $k: zinfdump --kernels"; fail=1; continue; }
  if [ $k = gemma ]; then
    want="zk_attn_fwd .*, 0.25, 0, 0.05[0-9]*, \\\$seg)" other="zk_softcap_fwd .*, 0.5)"
  else
    want="zk_attn_fwd .*, 0.25, 5, 0, \\\$seg)" other="zk_attn_fwd .*, 0.25, 12, 0, \\\$seg)"
  fi
  grep -q "$want" "$W/$k.kernels" && grep -q "$other" "$W/$k.kernels" ||
    { grep -m3 "zk_attn_fwd\|zk_softcap" "$W/$k.kernels"; echo "FAIL: $k: the launches lack the attributes"; fail=1; continue; }
  if [ $k = window ] && ! grep -q "zk_attn_fwd .*, 0.25, 0, 0, \$seg)" "$W/$k.kernels"; then
    echo "FAIL: window: a window of 23 >= T = 16 is not passed as no window"; fail=1; continue
  fi
  timeout 120 "$B/bin/zinfrun" "$W/$k.plan" --data "$W/gpl.bin" --backend host --steps 3 --losses "$W/$k.host" --quiet \
    < /dev/null > "$W/$k.hout" 2>&1 &&
    env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" \
      timeout 300 "$B/bin/zinfrun" "$W/$k.plan" --data "$W/gpl.bin" --backend cuda --steps 3 --losses "$W/$k.cuda" \
      --quiet < /dev/null > "$W/$k.cout" 2>&1 || { tail -5 "$W/$k.hout" "$W/$k.cout"; echo "FAIL: $k: zinfrun"; fail=1; continue; }
  awk -v name="$k" 'NR == FNR { l[FNR] = $4; n[FNR] = $6; rows = FNR; next }
    { d = ($4 - l[FNR]) / l[FNR]; e = ($6 - n[FNR]) / n[FNR]; d = d < 0 ? -d : d; e = e < 0 ? -e : e
      if (d > worst) worst = d; if (e > worst) worst = e; got++ }
    END { if (rows != 3 || got != 3 || worst > 2e-4) { printf "FAIL %s: %d and %d steps, worst relative difference %.2e\n", name, rows, got, worst; exit 1 }
          printf "ok   %s on the CUDA backend (fake driver): 3 steps, losses and gradient norms = the host backend'"'"'s (%.1e relative)\n", name, worst }' \
    "$W/$k.host" "$W/$k.cuda" || { cat "$W/$k.host" "$W/$k.cuda"; fail=1; }
done
[ $fail -eq 0 ] && echo "cuda_long_fake: ok"
exit $fail
