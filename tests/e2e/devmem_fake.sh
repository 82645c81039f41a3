#!/bin/sh
# The GPU memory a CUDA plan holds, known before launch: zinfdump's "on the
# gpu" line (the gpu arena plus the kernel workspaces, collective scratch and
# cuBLASLt workspaces zinfrun allocates beside it, runtime/plan/devmem.h)
# against the bytes zinfrun's CUDA backend allocates on the fake driver
# (tests/fakecuda), equal to the byte: moe-micro on 2 ranks (expert kernels'
# workspace, all-gathers and reduce-scatters on the comm queue) and
# gpt-micro with its loss chunked (the chunked loss's workspace), 1 step
# each, moe-micro with cuBLASLt off (ZINF_CUBLASLT=0: no GEMM
# workspace), and moe-micro with its experts tiled by expert (2 tiles of 2
# experts a weight, the state in CPU memory: the tiles' launches share the
# op's workspace, the tile buffers are in the arena). Then: zinfc refuses a plan whose arena fits the target's GPU but
# whose allocations beside it do not, and a plan without GPU code says its
# workspaces are unknown.
# $1: the build directory.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir devmem
e2e_mpi
sh tests/fakecuda/build.sh "$B" > "$W/build.log" 2>&1 || { cat "$W/build.log"; echo "devmem_fake: the fakes did not build"; exit 1; }
FAKE="$ROOT/$B/fakecuda"
case "$B" in /*) FAKE="$B/fakecuda" ;; esac
export ZINF_CACHE_DIR="$FAKE/nvrtc-cache"
"$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null || exit 1

target() { # FILE MODEL RANKS GPU_MEMORY PLAN_EXTRA
  pins=${PINS-'params = "gpu"; optimizer = "gpu"; grads = "gpu";'}
  cat > "$1" <<ZL
import "$ROOT/tests/e2e/models/$2"
target fake { nodes = 1; gpus_per_node = $3
  gpu { memory = $4; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { $pins whole_below = 1000; $5 }
ZL
}

check() { # NAME MODEL RANKS PLAN_EXTRA ITEM...: predicted = allocated, and the line names each ITEM (GPU_MEM: the
          # target's GPU memory, 1 GiB; PINS: the plan block's tiers, all on the GPU)
  name=$1 model=$2 np=$3 extra=$4
  shift 4
  target "$W/$name.zl" "$model" "$np" "${GPU_MEM:-1 GiB}" "$extra"
  "$B/bin/zinfc" "$W/$name.zl" --kernels=sm_90 --kernel-src="$W/src-$name" -o "$W/$name.plan" > "$W/$name.zinfc" 2>&1 ||
    { cat "$W/$name.zinfc"; bad "$name: zinfc"; return; }
  "$FAKE/fakecuda_prep" "$W/$name.plan" "$W/src-$name" sm_90 "$FAKE/units" > "$W/$name.prep" 2>&1 ||
    { cat "$W/$name.prep"; bad "$name: fakecuda_prep"; return; }
  line=$("$B/bin/zinfdump" "$W/$name.plan" | grep "^  on the gpu: ")
  want=$(echo "$line" | sed -n 's/^  on the gpu: [^(]*(\([0-9]*\) bytes).*/\1/p')
  [ -n "$want" ] || { bad "$name: zinfdump has no 'on the gpu' line with bytes: $line"; return; }
  for item in "$@"; do
    echo "$line" | grep -q "$item" || bad "$name: zinfdump's line does not name the $item: $line"
  done
  env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$FAKE/units" FAKECUDA_DEVICES="$np" \
    timeout 300 mpirun -np "$np" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES \
    "$B/bin/zinfrun" "$W/$name.plan" --data "$W/train.bin" --backend cuda --steps 1 > "$W/$name.out" 2>&1 < /dev/null ||
    { tail -20 "$W/$name.out"; bad "$name: zinfrun --backend cuda on the fake driver"; return; }
  got=$(sed -n 's/^  gpu memory allocated [^(]*(\([0-9]*\) bytes).*/\1/p' "$W/$name.out")
  planned=$(sed -n 's/^  gpu memory allocated .*; planned [^(]*(\([0-9]*\) bytes)$/\1/p' "$W/$name.out")
  if [ -n "$got" ] && [ "$got" = "$want" ] && [ "$planned" = "$want" ]; then
    ok "$name: zinfrun allocated $got bytes on the GPU, as zinfdump predicted: ${line#  on the gpu: }"
  else
    bad "$name: zinfdump predicted ${want:-?} bytes, zinfrun allocated ${got:-?} (its own plan: ${planned:-?}):"
    grep "gpu memory allocated" "$W/$name.out"
  fi
}

check moe2 moe-micro 2 "" "kernel workspace" "collective scratch" "cuBLASLt workspace"
# cuBLASLt off: no GEMM workspace, the rest as predicted
if [ -f "$W/moe2.plan" ]; then
  env ZINF_CUBLASLT=0 LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$FAKE/units" FAKECUDA_DEVICES=2 \
    timeout 300 mpirun -np 2 --oversubscribe -x ZINF_CUBLASLT -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES \
    "$B/bin/zinfrun" "$W/moe2.plan" --data "$W/train.bin" --backend cuda --steps 1 > "$W/nolt.out" 2>&1 < /dev/null ||
    { tail -20 "$W/nolt.out"; bad "moe2 with ZINF_CUBLASLT=0: zinfrun"; }
  full=$("$B/bin/zinfdump" "$W/moe2.plan" | sed -n 's/^  on the gpu: [^(]*(\([0-9]*\) bytes).*/\1/p')
  lt=$(grep "^  gemm: .*workspace" "$W/moe2.out" | sed -n 's/.*; workspace \([0-9.]*\) MiB per queue.*/\1/p')
  got=$(sed -n 's/^  gpu memory allocated [^(]*(\([0-9]*\) bytes).*/\1/p' "$W/nolt.out")
  if [ -n "$got" ] && [ -n "$lt" ] && [ "$got" -eq "$(awk -v f="$full" -v l="$lt" 'BEGIN { printf "%d", f - l * 1048576 }')" ] &&
     ! grep -q "^  gpu memory allocated .*cuBLASLt workspace" "$W/nolt.out"; then
    ok "moe2 with ZINF_CUBLASLT=0: $got bytes, the prediction less its $lt MiB cuBLASLt workspace"
  else
    bad "moe2 with ZINF_CUBLASLT=0: allocated ${got:-?}, predicted ${full:-?} with a cuBLASLt workspace of ${lt:-?} MiB"
    grep "gpu memory allocated\|gemm:" "$W/nolt.out"
  fi
fi
PINS='params = "cpu"; optimizer = "cpu"; grads = "cpu";' check moetile moe-micro 2 \
  'tiles "*.moe_mlp.wg" = 2; tiles "*.moe_mlp.wu" = 2; tiles "*.moe_mlp.wd" = 2' "kernel workspace" "collective scratch" "cuBLASLt workspace"
"$B/bin/zinfc" "$W/moetile.zl" --kernels=none --explain -o "$W/moetile-explain.plan" > "$W/moetile.explain" 2>&1 &&
  grep -q "^tile moe_block.0.moe_mlp.wg \[4, 48, 64\] in 2 tiles of 2 experts" "$W/moetile.explain" ||
  { cat "$W/moetile.explain"; bad "moetile: the experts are not in 2 tiles"; }
check chunk1 gpt-micro 1 "loss_chunk = 8" "kernel workspace" "cuBLASLt workspace"
"$B/bin/zinfdump" "$W/chunk1.plan" --kernels | grep -q "fwd linear_cross_entropy, workspace" || bad "chunk1: the loss is not chunked"

# 5 MiB, the planner free to place state: the first plan's arena (1.75 MiB) and the
# 4.15 MiB beside it do not fit, so zinfc plans again with those kept free; the
# second plan's total is what zinfrun allocates
GPU_MEM="5 MiB" PINS="" check replan moe-micro 2 "" "kernel workspace" "cuBLASLt workspace"
if grep -q "^gpu: the arena [0-9.]* MiB and [0-9.]* MiB beside it exceed the 5.00 MiB of target 'fake': planning again with [0-9.]* MiB kept free beside the arena" "$W/replan.zinfc"; then
  ok "replan: zinfc planned again with the kernels' allocations kept free"
else bad "replan: no 'planning again' line"; cat "$W/replan.zinfc"; fi
# 4 MiB with everything pinned on the GPU: the second plan cannot hold the state
# beside the 4 MiB of cuBLASLt workspace; refused, nothing written
target "$W/small.zl" moe-micro 2 "4 MiB" ""
out=$("$B/bin/zinfc" "$W/small.zl" --kernels=sm_90 -o "$W/small.plan" 2>&1)
rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "planning again with [0-9.]* MiB kept free beside the arena" &&
   echo "$out" | grep -q "^error: the plan block puts params and grads and optimizer on gpu: .* more than the target's 0 B of gpu per rank"; then
  ok "zinfc refuses what the GPU cannot hold (exit $rc): $(echo "$out" | grep -m1 "^error" | cut -c1-200)"
else
  bad "zinfc of a plan too large for the GPU with its workspaces: exit $rc"
  echo "$out" | tail -5
fi
[ ! -f "$W/small.plan" ] || bad "zinfc wrote the refused plan"

"$B/bin/zinfc" "$W/moe2.zl" --kernels=none -o "$W/none.plan" > /dev/null 2>&1 || bad "zinfc --kernels=none"
if "$B/bin/zinfdump" "$W/none.plan" | grep -q "^  on the gpu: the arena .*, plus workspaces unknown until the kernels are generated (the plan has no GPU code: --kernels=none"; then
  ok "a plan without GPU code: its workspaces are unknown"
else
  bad "zinfdump of a plan without GPU code:"
  "$B/bin/zinfdump" "$W/none.plan" | grep "on the gpu"
fi
e2e_end
