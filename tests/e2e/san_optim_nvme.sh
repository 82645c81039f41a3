#!/bin/sh
# The optimizer of NVMe state overlapped with the backward (twins on NVMe,
# redo when the step clips; docs/schedule.md "The speculative optimizer"),
# run by the build under test (also under AddressSanitizer: san_*):
# gpt-micro on one host rank (no mpirun, so the leak check sees only
# zinf's allocations) with parameters and optimizer state on NVMe and
# clipping every step. optimizer_overlap "on" gives the losses, norms and
# exported parameters of "off" bit for bit; then a checkpoint after step 3 (the twins hold the state after an
# odd step) resumed for 2 more steps equals 5 straight.
# $1: the build directory.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir sanoptnvme
export OMP_NUM_THREADS=1
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
for ov in on off; do
  cat > "$W/$ov.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro"
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1.5 GB/s; write = 4.5 GB/s; capacity = 4 GiB } }
plan { params = "nvme"; optimizer = "nvme"; grads = "cpu"; whole_below = 100; optimizer_overlap = "$ov" }
ZL
  "$B/bin/zinfc" "$W/$ov.zl" -o "$W/$ov.plan" --explain > "$W/$ov.zinfc" 2>&1 || { tail -5 "$W/$ov.zinfc"; echo "FAIL zinfc $ov"; exit 1; }
done
grep -q "^chosen: .*optimizer overlapped with the backward (speculative)" "$W/on.zinfc" ||
  { grep '^chosen' "$W/on.zinfc"; echo "FAIL: the on plan does not speculate"; exit 1; }
# run NAME PLAN ARGS...: losses in NAME.loss
run() {
  n=$1 plan=$2; shift 2
  rm -rf "$W/nvme"; mkdir -p "$W/nvme"
  timeout 600 "$B/bin/zinfrun" "$W/$plan.plan" --data "$W/train.bin" --nvme "$W/nvme" \
    --losses "$W/$n.loss" "$@" < /dev/null > "$W/$n.out" 2>&1 || { tail -20 "$W/$n.out"; echo "FAIL zinfrun $n"; exit 1; }
}
run on on --steps 5 --export "$W/on.safetensors"
run off off --steps 5 --export "$W/off.safetensors"
grep -q "speculative Adams redone" "$W/on.out" || { cat "$W/on.out"; echo "FAIL: no step redone"; exit 1; }
if ! cmp -s "$W/on.loss" "$W/off.loss" || ! cmp -s "$W/on.safetensors" "$W/off.safetensors"; then
  paste "$W/on.loss" "$W/off.loss"; echo "FAIL: the overlapped run differs from the serial one"; exit 1
fi
echo "ok   on = off over 5 steps, losses and parameters bit for bit ($(tail -1 "$W/on.loss"))"
run split1 on --steps 3 --checkpoint-every 3 --checkpoint-dir "$W/ck" --quiet
# the checkpoint holds the homes wherever the twins have put them: the resume must not need the old swap files
run split2 on --steps 5 --checkpoint-dir "$W/ck" --resume --export "$W/split.safetensors" --quiet
cat "$W/split1.loss" "$W/split2.loss" > "$W/split.loss"
if ! cmp -s "$W/split.loss" "$W/on.loss" || ! cmp -s "$W/split.safetensors" "$W/on.safetensors"; then
  paste "$W/split.loss" "$W/on.loss"; echo "FAIL: 3 steps, checkpoint, resume, 2 more differs from 5 straight"; exit 1
fi
echo "ok   3 + 2 steps through a checkpoint = 5 straight, bit for bit"
