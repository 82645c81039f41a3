#!/bin/sh
# Trained-token masks against transformers (never downloads anything): a
# random GPT-2, a random LLaMA with GQA and a random Qwen3 (q/k norms per
# head; tests/e2e/hf_from.py's), a
# version 3 token file whose rows hold different numbers of trained targets
# (one row none), and transformers' loss with labels = -100 at the untrained
# tokens over the first 4 rows as one batch, and its gradient's norm
# (tests/e2e/hf_masked.py). zinfrun reads the same 4 rows as one global
# batch split four ways: one micro-batch of 4; grad_accum 2 of 2; 2 ranks
# of 2; 2 ranks with grad_accum 2 of 1 (so micro-batches and ranks hold
# different numbers of trained targets, one none). Each must give
# transformers' step-1 loss and gradient norm within 1e-5 relative (f32),
# and the same step-2 loss (the same update); then a run of one row a step
# skips the step whose row trains nothing, with a warning. Last, the CUDA
# backend on the fake driver and kernel emulator (docs/testing-gpu-fake.md):
# GPT-2 on 2 GPUs with grad_accum 2, the same loss and gradient norm within
# 2e-4 relative (the GPU kernels sum in another order).
#   tests/e2e/hf_masked.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
command -v mpirun > /dev/null || e2e_skip "no mpirun (make deps installs Open MPI)"
e2e_workdir hf-masked
T=$W
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# |a - b| <= tol * |b|

"$ZINF_PY" tests/e2e/hf_masked.py make "$T" 4 > "$T/ref" 2> "$T/make.log" ||
  { cat "$T/make.log"; echo "FAIL: making the models or transformers' losses (above)"; exit 1; }

target() { # NAME RANKS
  cat > "$T/$1.target.zl" <<EOF
target $1 {
  backend = "host"
  ranks = $2
  budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
}
EOF
}
target one 1
target two 2

for c in $(cut -d' ' -f1 "$T/ref"); do
  d=$T/$c
  seq=$(cat "$d.seq")
  want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/ref")
  want_gn=$(awk -v c="$c" '$1 == c { print $3 }' "$T/ref")
  "$Z/zinfc" --from-hf "$d" --seq "$seq" --emit=zl > "$d.zl" 2> "$d.emit.err" || { cat "$d.emit.err"; bad "$c: --emit=zl"; continue; }
  step2=""
  # name, ranks, micro_batch, grad_accum
  for run in "mb4 1 4 1" "accum2 1 2 2" "ranks2 2 2 1" "ranks2-accum2 2 1 2"; do
    set -- $run
    name=$c-$1
    sed -e "s/^  micro_batch = .*/  micro_batch = $3\n  grad_accum = $4/" "$d.zl" > "$T/$name.zl"
    tgt=$T/one.target.zl
    [ "$2" = 2 ] && tgt=$T/two.target.zl
    if ! "$Z/zinfc" "$T/$name.zl" --target "$tgt" -o "$T/$name.plan" > "$T/$name.zinfc" 2>&1; then
      cat "$T/$name.zinfc"; bad "$name: zinfc"; continue
    fi
    if [ "$2" = 1 ]; then
      "$Z/zinfrun" "$T/$name.plan" --backend host --init "$d" --data "$d.bin" --steps 2 --losses "$T/$name.losses" \
        > "$T/$name.log" 2>&1
    else
      TMPDIR=$(mktemp -d "$T/mpi.XXXXXX") timeout 300 mpirun -np 2 --oversubscribe "$Z/zinfrun" "$T/$name.plan" \
        --backend host --init "$d" --data "$d.bin" --steps 2 --losses "$T/$name.losses" > "$T/$name.log" 2>&1
    fi
    if [ $? -ne 0 ]; then tail -20 "$T/$name.log"; bad "$name: zinfrun"; continue; fi
    got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/$name.losses")
    gn=$(awk '$1 == "step" && $2 == 1 { print $6 }' "$T/$name.losses")
    s2=$(awk '$1 == "step" && $2 == 2 { print $4 }' "$T/$name.losses")
    if e2e_close "$got" "$want" 1e-5; then echo "ok $name: loss $got, transformers $want"
    else bad "$name: loss $got, transformers $want (more than 1e-5 apart)"; fi
    if e2e_close "$gn" "$want_gn" 1e-5; then echo "ok $name: gradient norm $gn, transformers $want_gn"
    else bad "$name: gradient norm $gn, transformers $want_gn (more than 1e-5 apart)"; fi
    grep -q "tokens trained" "$T/$name.log" || { [ "$2" = 2 ] || bad "$name: the data line does not count the trained tokens"; }
    if [ -z "$step2" ]; then step2=$s2
    elif e2e_close "$s2" "$step2" 1e-5; then echo "ok $name: step 2 loss $s2 as the first run's $step2"
    else bad "$name: step 2 loss $s2, the first run's $step2 (more than 1e-5 apart)"; fi
  done

  # one row a step: step 2 reads row 1, which trains nothing
  name=$c-mb1
  sed -e "s/^  micro_batch = .*/  micro_batch = 1/" "$d.zl" > "$T/$name.zl"
  "$Z/zinfc" "$T/$name.zl" --target "$T/one.target.zl" -o "$T/$name.plan" > /dev/null 2>&1 || { bad "$name: zinfc"; continue; }
  if "$Z/zinfrun" "$T/$name.plan" --backend host --init "$d" --data "$d.bin" --steps 3 --losses "$T/$name.losses" \
       > "$T/$name.log" 2> "$T/$name.err"; then
    grep -qx "zinfrun: warning: step 2: no trained token in the global batch; step skipped" "$T/$name.err" ||
      { cat "$T/$name.err"; bad "$name: no warning for the step without a trained token"; }
    steps=$(awk '$1 == "step" { printf "%s ", $2 }' "$T/$name.losses")
    [ "$steps" = "1 3 " ] && echo "ok $name: step 2 skipped, steps run: $steps" || bad "$name: steps run: $steps (expected 1 3)"
  else
    cat "$T/$name.err"; bad "$name: zinfrun"
  fi
done
# the CUDA kernels (xent.cu) on the fake driver
W=$T
if . tests/fakecuda/env.sh; then
  c=gpt2 d=$T/gpt2 k=gpt2-cuda
  want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/ref")
  want_gn=$(awk -v c="$c" '$1 == c { print $3 }' "$T/ref")
  sed -e "s/^  micro_batch = .*/  micro_batch = 1\n  grad_accum = 2/" "$d.zl" > "$T/$k.model.zl"
  cat > "$T/$k.zl" <<ZL
import "$T/$k.model.zl"
target fake { nodes = 1; gpus_per_node = 2
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
ZL
  mkdir -p "$T/src-$k"
  if "$Z/zinfc" "$T/$k.zl" --kernels=sm_90 --kernel-src="$T/src-$k" -o "$T/$k.plan" > "$T/$k.zinfc" 2>&1 &&
     "$FAKE/fakecuda_prep" "$T/$k.plan" "$T/src-$k" sm_90 "$UNITS" > "$T/$k.prep" 2>&1; then
    if env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
         OMPI_MCA_btl=self,vader TMPDIR=$(mktemp -d "$T/mpi.XXXXXX") timeout 300 mpirun -np 2 --oversubscribe \
         -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES "$Z/zinfrun" "$T/$k.plan" --backend cuda --init "$d" \
         --data "$d.bin" --steps 1 --losses "$T/$k.losses" < /dev/null > "$T/$k.log" 2>&1; then
      got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/$k.losses")
      gn=$(awk '$1 == "step" && $2 == 1 { print $6 }' "$T/$k.losses")
      if e2e_close "$got" "$want" 2e-4 && e2e_close "$gn" "$want_gn" 2e-4; then
        echo "ok $k: loss $got, gradient norm $gn; transformers $want, $want_gn"
      else
        bad "$k: loss $got, gradient norm $gn; transformers $want, $want_gn (more than 2e-4 apart)"
      fi
    else
      tail -20 "$T/$k.log"; bad "$k: zinfrun --backend cuda"
    fi
  else
    cat "$T/$k.zinfc" "$T/$k.prep"; bad "$k: zinfc or fakecuda_prep"
  fi
else
  fail=1
fi
exit $fail
