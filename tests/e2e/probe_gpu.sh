#!/bin/sh
# zinfprobe --quick on the fake CUDA driver, cuBLASLt and NCCL of
# tests/fakecuda (runtime/probe/probe_gpu.h): on 1 rank and on 2 under mpirun it
# writes a cuda target with positive, finite GPU figures (and NCCL's net
# block on 2), which zinfc plans with (--kernels=none) and whose figures the
# plan carries (zinfdump: the target and its GPU memory; the simulated trace:
# an input's copy = pcie_latency_us + bytes / pcie). No device, no driver or
# --host: a host target and one line saying why. A driver call failing
# mid-probe (FAKECUDA_FAIL) and an NCCL error on one of 2 ranks
# (FAKENCCL_ASYNC_ERROR): the call's message, exit 1, no file, no hang.
#   tests/e2e/probe_gpu.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir probegpu
e2e_mpi
. tests/fakecuda/env.sh || exit 1
LIB="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# the GPU figures of a target file, one "key value" a line
figures() {
  sed -n 's/^  gpu  {//p; s/^         //p; s/^  efficiency {//p; s/^  net  {//p' "$1" | tr ';' '\n' |
    sed -n 's/^ *\([a-z_]*\) = \([-0-9.a-z]*\).*/\1 \2/p'
}
# FILE RANKS: a cuda target for RANKS GPUs, every figure positive and finite
check_target() {
  grep -q '^target probe_[A-Za-z0-9_]* {$' "$1" && grep -q '^  backend = "cuda"$' "$1" && grep -q '^  nodes = 1$' "$1" &&
    grep -q "^  gpus_per_node = $2\$" "$1" || { cat "$1"; bad "$1: not a cuda target for $2 GPU(s)"; return; }
  figures "$1" > "$W/fig"
  for k in memory flops hbm pcie sms pcie_latency_us launch_us gemm; do
    v=$(awk -v k="$k" '$1 == k {print $2}' "$W/fig")
    awk -v v="$v" 'BEGIN { exit !(v ~ /^[0-9.]+$/ && v + 0 > 0) }' || bad "$1: $k = '$v' is not a positive number"
  done
  awk '$1 == "gemm" && $2 > 1 {exit 1}' "$W/fig" || bad "$1: a gemm efficiency above 1"
  grep -v '^#' "$1" | grep -q 'attention\|elementwise\|copy_us' && bad "$1: figures the GPU probe does not measure"
}

# ---- 1 rank ----
mkdir -p "$W/nvme"
env LD_LIBRARY_PATH="$LIB" "$B/bin/zinfprobe" --quick --nvme "$W/nvme" -o "$W/p1.zl" > "$W/p1.log" 2>&1 ||
  { cat "$W/p1.log"; bad "zinfprobe on the fake GPU"; }
check_target "$W/p1.zl" 1
grep -q '^  nvme {' "$W/p1.zl" && grep -q '^  cpu  { memory = ' "$W/p1.zl" || bad "p1.zl lacks the host figures"
grep -q '^  net ' "$W/p1.zl" && bad "p1.zl has a net block on one rank"
for l in '^gpu 0 of 1: zinf fake GPU' '^pcie (pinned' '^hbm (' '^launch: ' '^  bf16 ' '^  f32 ' \
         '^attention, norm, elementwise: not measured' '^nccl: not measured (one rank)' '^wrote .*: cuda target probe_'; do
  grep -q "$l" "$W/p1.log" || { cat "$W/p1.log"; bad "the 1-rank report has no '$l'"; }
done

# ---- 2 ranks: NCCL over MPI ----
if command -v mpirun > /dev/null; then
  env LD_LIBRARY_PATH="$LIB" FAKECUDA_DEVICES=2 timeout 60 mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH \
    -x FAKECUDA_DEVICES "$B/bin/zinfprobe" --quick -o "$W/p2.zl" < /dev/null > "$W/p2.log" 2>&1 ||
    { cat "$W/p2.log"; bad "zinfprobe on 2 fake GPUs"; }
  check_target "$W/p2.zl" 2
  grep -q '^  net  { bandwidth = .*; latency_us = ' "$W/p2.zl" || bad "p2.zl: no net block"
  grep -q '^nccl (2 ranks)' "$W/p2.log" && grep -q '^  ring fit: ' "$W/p2.log" || bad "no NCCL collectives measured"
  [ "$(grep -c '^wrote ' "$W/p2.log")" = 1 ] || bad "not one 'wrote' line from 2 ranks"
else
  e2e_skip_part "no mpirun: the 2-rank probe (make deps installs Open MPI)"
  sed 's/gpus_per_node = 1/gpus_per_node = 2/' "$W/p1.zl" > "$W/p2.zl"
fi

# ---- zinfc plans with them, and the plan carries the figures ----
for r in 1 2; do
  "$B/bin/zinfc" examples/gpt2-tiny.zl --target "$W/p$r.zl" --kernels=none -o "$W/t$r.plan" > "$W/zc$r.log" 2>&1 ||
    { cat "$W/zc$r.log"; bad "zinfc with p$r.zl"; continue; }
  "$B/bin/zinfdump" "$W/t$r.plan" > "$W/d$r.log" 2>&1 && "$B/bin/zinfdump" "$W/t$r.plan" --trace "$W/t$r.json" > /dev/null 2>&1 ||
    { cat "$W/d$r.log"; bad "zinfdump t$r.plan"; }
  grep -q "^plan: model gpt2_tiny from examples/gpt2-tiny.zl, target probe_[A-Za-z0-9_]* (cuda), $r rank" "$W/d$r.log" ||
    { head -3 "$W/d$r.log"; bad "zinfdump does not show the probed cuda target on $r rank(s)"; }
  # the first input's copy: pcie_latency_us + 1024 bytes / pcie, as the cost model prices it
  figures "$W/p$r.zl" > "$W/fig"
  lat=$(awk '$1 == "pcie_latency_us" {print $2}' "$W/fig") bw=$(awk '$1 == "pcie" {print $2}' "$W/fig")
  dur=$(grep -o '"what":"input 0","bytes":1024' "$W/t$r.json" > /dev/null &&
    grep '"what":"input 0"' "$W/t$r.json" | head -1 | sed 's/.*"dur":\([0-9.]*\).*/\1/')
  awk -v d="$dur" -v l="$lat" -v b="$bw" 'BEGIN { w = l + 1024 / (b * 1e3); exit !(d > 0 && (d - w) ^ 2 <= (0.01 * w + 0.002) ^ 2) }' ||
    bad "t$r.plan: input 0 takes ${dur} us, not pcie_latency_us $lat + 1 KiB / $bw GB/s"
done

# ---- no GPU: a host target and one line ----
env LD_LIBRARY_PATH="$LIB" FAKECUDA_DEVICES=0 "$B/bin/zinfprobe" --quick -o "$W/h0.zl" > "$W/h0.log" 2>&1 ||
  { cat "$W/h0.log"; bad "zinfprobe with no device"; }
grep -q '^  backend = "host"$' "$W/h0.zl" || bad "no device: not a host target"
[ "$(grep -c '^gpu' "$W/h0.log")" = 1 ] && grep -q '^gpu: not measured (the CUDA driver found no device.*): a host target$' "$W/h0.log" ||
  { cat "$W/h0.log"; bad "no device: not the one line"; }
env LD_LIBRARY_PATH="$LIB" "$B/bin/zinfprobe" --quick --host -o "$W/h1.zl" > "$W/h1.log" 2>&1 ||
  { cat "$W/h1.log"; bad "zinfprobe --host"; }
grep -q '^  backend = "host"$' "$W/h1.zl" && grep -q '^gpu: not measured (--host): a host target$' "$W/h1.log" ||
  { cat "$W/h1.log"; bad "--host: not a host target with its line"; }
if ldconfig -p 2> /dev/null | grep -q 'libcuda\.so\.1 '; then
  echo "note: this machine has a CUDA driver: the missing-driver probe is skipped"
else
  "$B/bin/zinfprobe" --quick -o "$W/h2.zl" > "$W/h2.log" 2>&1 || { cat "$W/h2.log"; bad "zinfprobe with no driver"; }
  grep -q '^  backend = "host"$' "$W/h2.zl" || bad "no driver: not a host target"
  [ "$(grep -c '^gpu' "$W/h2.log")" = 1 ] && grep -q '^gpu: not measured (no CUDA driver: libcuda.so.1: .*): a host target$' "$W/h2.log" ||
    { cat "$W/h2.log"; bad "no driver: not the one line"; }
fi

# ---- failures mid-probe: the call, exit 1, no file ----
env LD_LIBRARY_PATH="$LIB" FAKECUDA_FAIL=cuMemcpyDtoDAsync_v2:2 "$B/bin/zinfprobe" --quick -o "$W/f1.zl" > "$W/f1.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q '^zinfprobe: rank 0: cuMemcpyDtoDAsync_v2 failed at runtime/probe/probe_gpu.c:[0-9]*: CUDA_ERROR_UNKNOWN .*(the GPU probe: the HBM copy)$' "$W/f1.log" ||
  { cat "$W/f1.log"; bad "a failing device copy: exit $rc"; }
[ -e "$W/f1.zl" ] && bad "a failed probe wrote its file"
if command -v mpirun > /dev/null; then
  env LD_LIBRARY_PATH="$LIB" FAKECUDA_DEVICES=2 FAKENCCL_ASYNC_ERROR=1:2 timeout 60 mpirun -np 2 --oversubscribe \
    -x LD_LIBRARY_PATH -x FAKECUDA_DEVICES -x FAKENCCL_ASYNC_ERROR "$B/bin/zinfprobe" --quick -o "$W/f2.zl" < /dev/null > "$W/f2.log" 2>&1
  rc=$?
  [ $rc != 0 ] && [ $rc != 124 ] &&
    grep -q '^zinfprobe: rank 1: a collective (ncclCommGetAsyncError) failed at .*(the GPU probe: NCCL collectives)$' "$W/f2.log" &&
    grep -q '^zinfprobe: an NCCL collective failed on another rank (the GPU probe: NCCL collectives)$' "$W/f2.log" ||
    { cat "$W/f2.log"; bad "an NCCL error on rank 1 of 2: exit $rc (124: a hang)"; }
  [ -e "$W/f2.zl" ] && bad "a failed 2-rank probe wrote its file"
fi
[ $fail = 0 ] && echo "probe_gpu: ok"
e2e_end $fail
