#!/bin/sh
# Frozen weights stored quantized (train { quantize = "nf4" | "int8" },
# docs/training.md) on the CUDA backend: zinfc writes a dequant launch
# (stdlib/kernels/dequant.cu) before each GEMM that reads such a weight, into
# the op's workspace; the plan's kernels run on the fake driver and the host
# emulator (tests/fakecuda), and gpt-micro with its attention and MLP weights
# frozen and stored nf4 or int8 trains 6 steps with the host backend's
# losses and gradient norms (relative 2e-4, as cuda_fake.sh). The dequantized
# weights themselves are checked bit for bit against the host's decoding by
# tests/e2e/gpu_kernels_emu.sh. A quantized weight of a matmul is refused,
# naming it.
#   sh tests/e2e/qlora_cuda.sh [BUILD]
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_bin zinfc zinfrun zinftok
e2e_workdir qlora_cuda
ROOT=$(pwd)
. tests/fakecuda/env.sh || exit 1
"$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null || exit 1
target() {
  cat <<ZL
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  nvme { paths = ["$W"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
ZL
}
for q in nf4 int8; do
  name=q-$q
  sed -e "s/^  checkpoint = \"layer\"/  checkpoint = \"layer\"\n  freeze = [\"block.*.attn.*\", \"block.*.mlp.w*\"]\n  quantize = \"$q\"/" \
      tests/e2e/models/gpt-micro.zl > "$W/m-$q.zl"
  { echo "import \"$W/m-$q\""; target; echo 'plan { params = "gpu"; optimizer = "gpu"; grads = "gpu"; whole_below = 1000 }'; } > "$W/$name.zl"
  mkdir -p "$W/src-$name"
  if ! "$B/bin/zinfc" "$W/$name.zl" -I tests/e2e/models --kernels=sm_90 --kernel-src="$W/src-$name" -o "$W/$name.plan" > "$W/out" 2>&1 ||
     ! "$FAKE/fakecuda_prep" "$W/$name.plan" "$W/src-$name" sm_90 "$UNITS" >> "$W/out" 2>&1; then
    bad "$name: zinfc or fakecuda_prep"; sed 's/^/    | /' "$W/out"; continue
  fi
  nd=$("$B/bin/zinfdump" "$W/$name.plan" --kernels | grep -c "zk_dequant_$q <<<")
  [ "$nd" -eq 12 ] || bad "$name: $nd dequant launches, want 12 (4 weights: forward, its recompute, dx)"
  if ! timeout 300 "$B/bin/zinfrun" "$W/$name.plan" --data "$W/train.bin" --backend host --steps 6 --losses "$W/$name.host" --quiet \
       < /dev/null > "$W/out" 2>&1; then bad "$name: host backend"; sed 's/^/    | /' "$W/out"; continue; fi
  if ! LD_LIBRARY_PATH="$ROOT/$FAKE:${LD_LIBRARY_PATH:-}" FAKECUDA_UNITS="$UNITS" timeout 300 "$B/bin/zinfrun" "$W/$name.plan" \
       --data "$W/train.bin" --backend cuda --steps 6 --losses "$W/$name.cuda" --quiet < /dev/null > "$W/out" 2>&1; then
    bad "$name: cuda backend on the fake driver"; sed 's/^/    | /' "$W/out"; continue
  fi
  if python3 - "$W/$name.host" "$W/$name.cuda" <<'PY'
import sys
ref = [l.split() for l in open(sys.argv[1])]
got = [l.split() for l in open(sys.argv[2])]
ok = len(ref) == len(got) == 6 and all(abs(float(a[i]) - float(b[i])) <= 2e-4 * abs(float(a[i])) for a, b in zip(ref, got) for i in (3, 5))
print("    host/cuda: " + " ".join("%s/%s" % (a[3], b[3]) for a, b in zip(ref, got)))
sys.exit(0 if ok else 1)
PY
  then ok "$q weights on the CUDA backend (fake driver): $nd dequant launches, losses equal the host's (relative 2e-4)"
  else bad "$name: cuda losses differ from the host's"; fi
done
# a quantized weight that a matmul reads is refused by the CUDA kernels, named
cat > "$W/mm.zl" <<ZL
model mm(tokens: i32[B, T], targets: i32[B, T]) {
  wte = param [256, 64] init normal(0.02)
  w = param [64, 64] init normal(0.02) frozen
  loss cross_entropy(matmul(matmul(embedding(wte, tokens), w), wte, transpose_b), targets)
}
const T = 16
train { micro_batch = 2; steps = 2; dtype = f32; quantize = "nf4"; quantize_params = ["w"] }
ZL
target >> "$W/mm.zl"
if ! "$B/bin/zinfc" "$W/mm.zl" --kernels=sm_90 -o "$W/mm.plan" > "$W/out" 2>&1 &&
   grep -q "'w' is stored quantized (nf4), which the CUDA kernels read as the weight of a linear only" "$W/out"; then
  ok "a quantized weight of a matmul is refused on the CUDA backend, named"
else bad "a quantized matmul weight"; sed 's/^/    | /' "$W/out"; fi
e2e_end
