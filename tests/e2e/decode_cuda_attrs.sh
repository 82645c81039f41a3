#!/bin/sh
# zinfgen --decode kv on the CUDA backend with Gemma's and Phi-4-mini's
# attributes: the plan's decode kernels on the fake driver of tests/fakecuda
# (the kernel emulator; docs/testing-gpu-fake.md) against the host decoder,
# 1 rank, f32, 14 greedy tokens after a prompt of 4 (past T = 16: the cache
# is filled again):
#   gemma  a Gemma-2-style micro model (stdlib/gemma.zl): RMSNorm by 1 + w
#          (rmsnorm's offset, per q and k head too), the attention's scale
#          and soft-capping, the final logits' softcap;
#   phi4   a Phi-4-mini-style one (stdlib/llama.zl): partial rotary (12 of
#          each head's 16 columns turn), longrope with its attention_factor,
#          an original context of 8 (the text outgrows it: the long list, the
#          cached positions turned again) in layer 0 and of 32 in layer 1;
#   yarn   a Mistral-style one (stdlib/llama.zl) with YaRN rope (factor 4,
#          an original context of 4096, beta_fast and beta_slow 16 and 2:
#          a ramp over pairs 3 to 6 of 8, where the defaults 32 and 1 give 2 to 6) and
#          its attention factor.
# The greedy tokens equal the host decoder's, and the logits of every new
# token (--logits) are within 1e-5 of the largest of the host decoder's
# (eval_gen_cuda.sh's f32 tolerance); gemma's and yarn's tokens equal the
# window's too (phi4's window is refused past its original context: hf_phi3.sh).
#   tests/e2e/decode_cuda_attrs.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir deccuda
e2e_mpi
. tests/fakecuda/env.sh || exit 1
fail=0
TARGET='target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "cpu"; optimizer = "cpu"; grads = "cpu"; whole_below = 1000 }
train {
  micro_batch = 2
  steps = 20
  dtype = f32
  optimizer = adam(lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-5, weight_decay = 0.1)
}'
# the models at paths that do not change from run to run (the units' comments name their lines, and
# fakecuda_prep keeps a unit built from the same text)
M="$(cd "$UNITS/.." && pwd)"
cat > "$W/gemma.zl" <<ZL
import "gemma"
const V = 256, T = 16, D = 64, H = 2, KV = 1, F = 96, L = 2, HD = 32
model gemma_micro(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = scale(embedding(tok, tokens), 8.0)
  repeat L as i {
    x = gemma_block(x, H, KV, F, HD, 0.25, softcap = 0.05, qk_norm = true, theta = 10000.0 * (i + 1))
  }
  x = gemma_rms(x)
  loss cross_entropy(softcap(matmul(x, tok, transpose_b), 0.5), targets)
}
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
ZL
cat > "$W/yarn.zl" <<ZL
import "llama"
const V = 256, T = 16, D = 64, H = 4, KV = 2, F = 96, L = 2
model yarn_micro(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = embedding(tok, tokens)
  repeat L {
    x = llama_block(x, H, KV, F, rope_scaling = "yarn", rope_factor = 4.0, original_max_positions = 4096, beta_fast = 16.0,
                    beta_slow = 2.0, rope_attention_scale = true, rope_attention_factor = 1.1386)
  }
  x = rms(x)
  loss cross_entropy(matmul(x, tok, transpose_b), targets)
}
ZL
cuda() { env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" timeout 300 "$@" < /dev/null; }
for k in gemma phi4 yarn; do
  { cat "$W/$k.zl"; echo "$TARGET"; } > "$W/copy.zl"
  cmp -s "$W/copy.zl" "$M/decode_cuda_attrs-$k.zl" || mv -f "$W/copy.zl" "$M/decode_cuda_attrs-$k.zl"
  mkdir -p "$W/src-$k"
  "$B/bin/zinfc" "$M/decode_cuda_attrs-$k.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1 &&
    "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1 ||
    { cat "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL: $k: zinfc or fakecuda_prep"; fail=1; continue; }
  g="$W/$k.plan --prompt-ids 5,17,30,2 --max-new 14 --temperature 0"
  # shellcheck disable=SC2086
  if ! cuda "$B/bin/zinfgen" $g --backend cuda --decode kv --logits "$W/$k.lc" > "$W/$k.kc" 2> "$W/$k.ekc" ||
     ! timeout 120 "$B/bin/zinfgen" $g --backend host --decode kv --logits "$W/$k.lh" --quiet < /dev/null > "$W/$k.kh" 2> "$W/$k.ekh"; then
    tail -n 3 "$W/$k.ekc" "$W/$k.ekh"; echo "FAIL $k: zinfgen"; fail=1; continue
  fi
  win=0
  if [ $k != phi4 ]; then
    # shellcheck disable=SC2086
    timeout 120 "$B/bin/zinfgen" $g --backend host --decode window --quiet < /dev/null > "$W/$k.wh" 2> "$W/$k.ewh" && win=1
    [ $win = 1 ] || { tail -n 3 "$W/$k.ewh"; echo "FAIL $k: zinfgen --decode window"; fail=1; continue; }
  fi
  # any number of the 14 x V logits may differ, by at most 1e-5 of the largest (+ 1e-7)
  e2e_kv_verdict "$k" 14 1e-5 1 1e-7 "--decode kv on cuda = kv on host" $win || fail=1
done
[ $fail -eq 0 ] && echo "decode_cuda_attrs: ok"
exit $fail
