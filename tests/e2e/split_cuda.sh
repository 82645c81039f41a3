#!/bin/sh
# Balanced plans on the CUDA backend: a GPU target whose memory holds only
# part of the optimizer state (so the planner's refinement splits the
# optimizer class: GPU Adam for some parameters, CPU Adam for the rest, the
# gradient norm on the CPU queue over GPU and host gradients) runs on the
# fake driver and NCCL of tests/fakecuda (gpt-micro) with the host backend's losses and
# gradient norms on the same plan (2e-4 relative, the tolerance of
# cuda_fake.sh), on 1 and 2 ranks.
#   tests/e2e/split_cuda.sh BUILD
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir splitcuda
e2e_mpi
. tests/fakecuda/env.sh || exit 1
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
fail=0
for R in 1 2; do
  k="split$R"
  cat > "$W/$k.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro.zl"
target fake { nodes = 1; gpus_per_node = $R
  gpu { memory = GPUMEM; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 1 GB/s; cores = 2; flops = 1 T }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { whole_below = 1000 }
ZL
  # the smallest GPU memory whose plan splits the optimizer, with the kernels:
  # beside the arena they need about 4.1 MiB (the cuBLASLt workspace, the
  # kernel workspace: tuning.md, "GPU memory beside the arena"), which zinfc
  # keeps free, planning again when the first plan leaves too little; the
  # split is the last plan's (its explanation comes last)
  split=""
  mkdir -p "$W/src-$k"
  mem=4976
  while [ $mem -lt 8192 ]; do
    mem=$((mem + 16))
    sed "s/GPUMEM/$mem KiB/" "$W/$k.zl" > "$W/$k-m.zl"
    "$B/bin/zinfc" "$W/$k-m.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" --explain > "$W/$k.explain" 2>&1 || continue
    if grep '^optimizer: ' "$W/$k.explain" | tail -1 | grep -q 'on gpu.*on cpu'; then split=$mem; break; fi
  done
  [ -n "$split" ] || { echo "FAIL $k: no GPU memory from 4.9 to 8 MiB (16 KiB steps) splits the optimizer"; tail -5 "$W/$k.explain"; fail=1; continue; }
  if ! "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1; then
    tail -5 "$W/$k.prep"; echo "FAIL $k: fakecuda_prep"; fail=1; continue
  fi
  "$B/bin/zinfdump" "$W/$k.plan" --schedule > "$W/$k.dump" 2>&1
  ga=$(grep -c ' gpu_adam ' "$W/$k.dump"); ca=$(grep -c ' cpu_adam ' "$W/$k.dump")
  [ "$ga" -gt 0 ] && [ "$ca" -gt 0 ] || { echo "FAIL $k: the plan has $ga gpu_adam and $ca cpu_adam"; fail=1; continue; }
  run="$W/$k.plan --data $W/train.bin --steps 3 --quiet"
  # shellcheck disable=SC2086
  if ! timeout 120 mpirun -np "$R" --oversubscribe "$B/bin/zinfrun" $run --backend host --losses "$W/$k.host" < /dev/null > "$W/$k.hout" 2>&1 ||
     ! env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
         timeout 300 mpirun -np "$R" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES \
         "$B/bin/zinfrun" $run --backend cuda --losses "$W/$k.cuda" < /dev/null > "$W/$k.cout" 2>&1; then
    tail -5 "$W/$k.hout" "$W/$k.cout"; echo "FAIL $k: zinfrun"; fail=1; continue
  fi
  if awk 'NR == FNR { a[FNR] = $0; n = FNR; next }
          { split(a[FNR], h); for (i = 4; i <= 6; i += 2) { d = $i - h[i]; if (d < 0) d = -d; if (d > 2e-4 * (h[i] < 0 ? -h[i] : h[i])) bad = 1 } m = FNR }
          END { exit bad || m != n || n != 3 }' "$W/$k.host" "$W/$k.cuda"; then
    echo "ok   $R rank(s), $split KiB GPU ($(grep '^optimizer: ' "$W/$k.explain" | tail -1)): $ga gpu_adam + $ca cpu_adam, CUDA losses and norms = host's"
  else
    echo "FAIL $k: the CUDA backend's losses differ from the host backend's"; paste "$W/$k.host" "$W/$k.cuda"; fail=1
  fi
done
exit $fail
