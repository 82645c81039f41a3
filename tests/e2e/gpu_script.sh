#!/bin/sh
# The GPU machine's script (tests/gpu/train_e2e.sh) rehearsed here, so it
# does not rot between the rare sessions that have a GPU: the same steps
# (compile with CPU and NVMe offload, train on --backend cuda, compare the
# first steps with --backend host, print the figures) on the fake driver
# and NCCL of tests/fakecuda with a micro model. $1: the build directory.
B=${1:-build}
sh tests/fakecuda/build.sh "$B" > /dev/null 2>&1 || { echo "gpu_script: the fake driver did not build"; exit 1; }
out=$(sh tests/gpu/train_e2e.sh --fake "$B" --model ../tests/e2e/models/gpt-micro --steps 4 2>&1)
rc=$?
echo "$out" | grep -E "^(step [0-9]|losses|train_e2e|done|queue|compute|gpu memory|FAIL)"
[ $rc -eq 0 ] || { echo "gpu_script: train_e2e.sh failed (exit $rc)"; echo "$out" | tail -20; exit 1; }
for want in "losses agree" "TFLOP/s per rank achieved" "gpu memory:" "queue busy per step"; do
  echo "$out" | grep -q "$want" || { echo "gpu_script: no '$want' in the script's output"; exit 1; }
done
[ "$(echo "$out" | grep -c '^backend: cuda')" -eq 2 ] || { echo "gpu_script: both runs must say backend: cuda"; exit 1; }
echo "gpu_script: ok"
