#!/bin/sh
# The optimizer of NVMe state overlapped with the backward (docs/schedule.md,
# "The speculative optimizer" and "The optimizer's first reads in the
# backward") gives the serial order's results bit for bit.
# gpt2-tiny with parameters and optimizer state on NVMe, gradients in CPU
# memory, on the host backend, compiled with plan { optimizer_overlap = "on" }
# and "off": the loss lines (every digit, with the gradient norm) and the
# exported parameters (every byte) must be equal.
# - "on": the Adams step staged copies of their state in the backward and
#   write it to twins on NVMe (f32: the parameter's too); the redo range
#   stages the intact homes again when the step clips or is skipped. Cases:
#   f32 and bf16, clipping every step (redo), never, and in the first step
#   only, f16 with skipped steps, 1 and 2 ranks; no clipping at all (no twins: the homes written).
# - resume: the NVMe twins exchange roles with their homes every step; 3
#   steps, checkpoint, 2 more = 5 straight.
# - "auto" on a target with fast kernels: the optimizer's first state reads
#   go into the backward (hoisted), and the run equals the serial one.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir optnvme
e2e_mpi
STEPS=3
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
fail=0
# model FILE DTYPE CLIP LOSS_SCALE RANKS OVERLAP [FLOPS]
model() {
  sed -e "s/grad_clip = 1.0/grad_clip = $3/" -e "s/dtype = f32/dtype = $2\n  loss_scale = $4/" \
      -e "s|^import \"nn\"|import \"$ROOT/stdlib/nn\"|" "$ROOT/examples/gpt2-tiny.zl" > "$1"
  cat >> "$1" <<ZL
target t { backend = "host"; ranks = $5; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = ${7:-20 G} }
  nvme { paths = ["$W/nvme"]; read = 1.5 GB/s; write = 4.5 GB/s; latency_us = 100; request_us = 5; capacity = 4 GiB } }
plan { params = "nvme"; optimizer = "nvme"; grads = "cpu"; whole_below = 1000; optimizer_overlap = "$6" }
ZL
}
# run NAME RANKS [ARGS...]: trains NAME.plan, losses in NAME.loss, parameters in NAME.safetensors
run() {
  n=$1 r=$2; shift 2
  rm -rf "$W/nvme"; mkdir -p "$W/nvme"
  timeout 300 mpirun -np "$r" --oversubscribe "$B/bin/zinfrun" "$W/$n.plan" --data "$W/train.bin" --nvme "$W/nvme" \
    --losses "$W/$n.loss" "$@" < /dev/null > "$W/$n.out" 2>&1 || { echo "FAIL $n: zinfrun"; tail -10 "$W/$n.out"; return 1; }
}
# dtype clip loss_scale ranks redo(yes: every step redone; no: none; first: the first step only (its norm is
# 8.8, the next ones' 7.7 and 6.3: a step after one that clipped steps with coefficient 1); some: f16 skips)
while read -r dt clip ls ranks redo; do
  [ -z "$dt" ] && continue
  name="$dt-clip$clip-ls$ls-r$ranks"
  for ov in on off; do
    model "$W/$name-$ov.zl" "$dt" "$clip" "$ls" "$ranks" "$ov"
    if ! "$B/bin/zinfc" "$W/$name-$ov.zl" -o "$W/$name-$ov.plan" --explain > "$W/$name-$ov.zinfc" 2>&1; then
      echo "FAIL $name $ov: zinfc"; tail -5 "$W/$name-$ov.zinfc"; fail=1; continue 2
    fi
    run "$name-$ov" "$ranks" --steps $STEPS --export "$W/$name-$ov.safetensors" || { fail=1; continue 2; }
  done
  if ! grep -q "^chosen: .*optimizer overlapped with the backward (speculative)" "$W/$name-on.zinfc" ||
     ! grep -q "twins [0-9.]* [KMG]*i*B on NVMe" "$W/$name-on.zinfc" || grep -q "optimizer overlapped" "$W/$name-off.zinfc"; then
    echo "FAIL $name: the on plan does not speculate with twins on NVMe, or the off plan overlaps"
    grep -E '^chosen|twins' "$W/$name-on.zinfc" "$W/$name-off.zinfc" | head -5; fail=1; continue
  fi
  # in the micro-batch: Adams on staged copies (no backup, no twins among their operands), their state written to twins
  "$B/bin/zinfdump" "$W/$name-on.plan" --schedule --rank 0 > "$W/$name-on.sched" 2>&1
  batch=$(sed -n '/^# --- optimizer/q;p' "$W/$name-on.sched")
  nspec=$(echo "$batch" | grep -c " cpu_adam .*pinned:m\.")
  ntwin=$(echo "$batch" | grep -c " nvme_write .*=nvme:twin\.")
  nparam=$(echo "$batch" | grep " nvme_write .*=nvme:twin\." | grep -vc "twin\.\(m\|v\|master\)\.")
  if [ "$nspec" -lt 10 ] || [ "$ntwin" -lt "$nspec" ]; then
    echo "FAIL $name: $nspec Adams of staged state, $ntwin writes to NVMe twins in the micro-batch"; fail=1; continue
  fi
  if [ "$dt" = f32 ] && [ "$nparam" -lt 10 ] || [ "$dt" != f32 ] && [ "$nparam" -ne 0 ]; then
    echo "FAIL $name ($dt): $nparam writes of parameters to twins (f32: the parameter is state; else it has a master)"; fail=1; continue
  fi
  tr -d '\r' < "$W/$name-on.out" | sed 's/\x1b\[K/\n/g' | grep "^step" > "$W/$name-on.steps"
  nredo=$(grep -c "speculative Adams" "$W/$name-on.steps")
  case $redo in
    yes) [ "$nredo" -eq $STEPS ] ;;
    no) [ "$nredo" -eq 0 ] ;;
    first) [ "$nredo" -eq 1 ] && head -1 "$W/$name-on.steps" | grep -q "speculative Adams" ;;
    some) [ "$nredo" -ge 1 ] && grep -q "skipped: overflow; speculative Adams undone" "$W/$name-on.steps" &&
          grep -vq "skipped" "$W/$name-on.steps" ;;
  esac || { echo "FAIL $name: $nredo of $STEPS steps redone, expected $redo"; cat "$W/$name-on.steps"; fail=1; continue; }
  if cmp -s "$W/$name-on.loss" "$W/$name-off.loss" && cmp -s "$W/$name-on.safetensors" "$W/$name-off.safetensors"; then
    echo "ok   $name: $nspec Adams of NVMe state in the backward, $ntwin writes to twins; $nredo of $STEPS steps redone; losses and parameters bit-identical ($(tail -1 "$W/$name-on.loss"))"
  else
    echo "FAIL $name: the overlapped run differs from the serial one"; paste "$W/$name-on.loss" "$W/$name-off.loss"; fail=1
  fi
done <<EOF
f32 1.0 1 2 yes
f32 100.0 1 1 no
f32 8.0 1 1 first
bf16 1.0 1 2 yes
f16 100.0 262144 2 some
EOF

# no clipping and no loss scale: the Adams step in the backward and write
# the homes (nothing can change the step after the fact: no twins)
for ov in on off; do
  model "$W/noclip-$ov.zl" f32 0 1 2 "$ov"
  "$B/bin/zinfc" "$W/noclip-$ov.zl" -o "$W/noclip-$ov.plan" --explain > "$W/noclip-$ov.zinfc" 2>&1 &&
    run "noclip-$ov" 2 --steps $STEPS --export "$W/noclip-$ov.safetensors" --quiet || { tail -3 "$W/noclip-$ov.zinfc"; fail=1; }
done
if grep -q "^chosen: .*optimizer overlapped with the backward (of" "$W/noclip-on.zinfc" &&
   ! "$B/bin/zinfdump" "$W/noclip-on.plan" --memory 2>&1 | grep -q "twin\." &&
   cmp -s "$W/noclip-on.loss" "$W/noclip-off.loss" && cmp -s "$W/noclip-on.safetensors" "$W/noclip-off.safetensors"; then
  echo "ok   no clipping: the Adams of NVMe state in the backward without speculation (no twins), bit for bit the serial order's"
else echo "FAIL no clipping"; grep '^chosen' "$W/noclip-on.zinfc"; paste "$W/noclip-on.loss" "$W/noclip-off.loss"; fail=1; fi

# resume: 3 steps (odd: the twins hold the state), checkpoint, 2 more = 5 straight, bit for bit
model "$W/res.zl" bf16 1.0 1 2 on
"$B/bin/zinfc" "$W/res.zl" -o "$W/res.plan" > /dev/null 2>&1 || { echo "FAIL resume: zinfc"; fail=1; }
if run res 2 --steps 5 --export "$W/res-straight.safetensors" --quiet && mv "$W/res.loss" "$W/res-straight" &&
   run res 2 --steps 3 --checkpoint-every 3 --checkpoint-dir "$W/ck" --quiet && mv "$W/res.loss" "$W/res-split" &&
   run res 2 --steps 5 --checkpoint-dir "$W/ck" --resume --export "$W/res-split.safetensors" --quiet &&
   cat "$W/res.loss" >> "$W/res-split" && cmp -s "$W/res-straight" "$W/res-split" &&
   cmp -s "$W/res-straight.safetensors" "$W/res-split.safetensors"; then
  echo "ok   resume of a plan with twins on NVMe: 3 + 2 steps = 5 steps, bit for bit ($(tail -1 "$W/res-split"))"
else echo "FAIL resume of a plan with twins on NVMe"; paste "$W/res-straight" "$W/res-split"; fail=1; fi

# the CUDA backend (fake driver, kernels on the emulator): gpt-micro on 2
# ranks, parameters and optimizer state on NVMe (staged through pinned
# memory), f32 with clipping: "on" (speculative, twins on NVMe) gives "off"'s
# losses and norms bit for bit
. tests/fakecuda/env.sh || exit 1
for ov in on off; do
  k=cu-$ov
  cat > "$W/$k.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro.zl"
target fake { nodes = 1; gpus_per_node = 2
  gpu { memory = 64 MiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 1 GB/s; cores = 2; flops = 1 T }
  net { bandwidth = 10 GB/s; latency_us = 5 }
  nvme { paths = ["$W/nvme"]; read = 1.5 GB/s; write = 4.5 GB/s; capacity = 4 GiB } }
plan { whole_below = 1000; params = "nvme"; optimizer = "nvme"; grads = "cpu"; optimizer_overlap = "$ov" }
ZL
  mkdir -p "$W/src-$k"
  if ! "$B/bin/zinfc" "$W/$k.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" --explain > "$W/$k.zinfc" 2>&1 ||
     ! "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1; then
    tail -5 "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL $k: zinfc or fakecuda_prep"; fail=1; continue
  fi
  rm -rf "$W/nvme"; mkdir -p "$W/nvme"
  env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
    timeout 300 mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES \
    "$B/bin/zinfrun" "$W/$k.plan" --data "$W/train.bin" --steps $STEPS --backend cuda --nvme "$W/nvme" --losses "$W/$k.loss" \
    < /dev/null > "$W/$k.out" 2>&1 || { tail -5 "$W/$k.out"; echo "FAIL $k: zinfrun"; fail=1; }
done
if grep -q "overlapped with the backward (speculative)" "$W/cu-on.zinfc" && grep -q "speculative Adams redone" "$W/cu-on.out" &&
   [ -s "$W/cu-on.loss" ] && cmp -s "$W/cu-on.loss" "$W/cu-off.loss"; then
  echo "ok   CUDA backend, NVMe state, speculative with twins on NVMe: = its serial plan's losses and norms bit for bit ($(tail -1 "$W/cu-on.loss"))"
else
  echo "FAIL CUDA backend with NVMe state overlapped"; grep '^chosen' "$W/cu-on.zinfc"; paste "$W/cu-on.loss" "$W/cu-off.loss"; fail=1
fi

# "auto" with fast kernels (80 GFLOP/s: the NVMe is idle in parts of the
# backward): the optimizer's first reads hoisted there, the run the serial one's
for ov in auto off; do
  model "$W/hoist-$ov.zl" f32 1.0 1 1 "$ov" "80 G"
  "$B/bin/zinfc" "$W/hoist-$ov.zl" -o "$W/hoist-$ov.plan" --explain > "$W/hoist-$ov.zinfc" 2>&1 &&
    run "hoist-$ov" 1 --steps $STEPS --export "$W/hoist-$ov.safetensors" --quiet || { tail -3 "$W/hoist-$ov.zinfc"; fail=1; }
done
batch=$("$B/bin/zinfdump" "$W/hoist-auto.plan" --schedule --rank 0 2>&1 | sed -n '/^# --- optimizer/q;p')
nhoist=$(echo "$batch" | grep -c " nvme_read  *[mv]\.")
if grep -q "^chosen: .*optimizer state read from NVMe in the backward ([0-9.]* MiB)" "$W/hoist-auto.zinfc" &&
   ! grep -q "optimizer overlapped\|read from NVMe in the backward" "$W/hoist-off.zinfc" && [ "$nhoist" -ge 10 ] &&
   cmp -s "$W/hoist-auto.loss" "$W/hoist-off.loss" && cmp -s "$W/hoist-auto.safetensors" "$W/hoist-off.safetensors"; then
  echo "ok   auto: $nhoist reads of optimizer state in the backward; losses and parameters bit-identical to the serial order's"
else
  echo "FAIL auto: hoisted reads ($nhoist in the micro-batch)"; grep '^chosen' "$W/hoist-auto.zinfc" "$W/hoist-off.zinfc"
  paste "$W/hoist-auto.loss" "$W/hoist-off.loss"; fail=1
fi
exit $fail
