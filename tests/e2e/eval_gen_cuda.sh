#!/bin/sh
# Evaluation and generation on the CUDA backend: the plan's own kernels on
# the fake driver and NCCL of tests/fakecuda (docs/testing-gpu-fake.md).
# gpt-micro with GPU homes on 1 rank, and CPU homes on 2 ranks:
#   - zinfrun --eval-data: the eval losses (steps 0, 1, 2) and the training
#     losses equal the host backend's on the same plan (2e-4 relative, the
#     tolerance of cuda_fake.sh: the GPU's reductions run in another order);
#   - zinfgen (1 rank): greedy and seeded sampled tokens from the same
#     checkpoint equal the host backend's token for token.
#   tests/e2e/eval_gen_cuda.sh BUILD
B=${1:-build}
W=$(mktemp -d /tmp/zinf-evalcuda.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
. tests/fakecuda/env.sh || exit 1
fail=0
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
"$B/bin/zinftok" README.md -o "$W/eval.bin" > /dev/null || exit 1
cuda() { # RANKS PROGRAM ARGS...: on the fake driver
  r=$1; shift
  env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
    timeout 300 mpirun -np "$r" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES "$@" < /dev/null
}
for c in "1 gpu" "2 cpu"; do
  set -- $c; R=$1; k="micro-$R"
  cat > "$W/$k.zl" <<ZL
import "$(pwd)/tests/e2e/models/gpt-micro.zl"
target fake { nodes = 1; gpus_per_node = $R
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "$2"; optimizer = "$2"; grads = "$2"; whole_below = 1000 }
ZL
  mkdir -p "$W/src-$k"
  if ! "$B/bin/zinfc" "$W/$k.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1 ||
     ! "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1; then
    cat "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL: $k: zinfc or fakecuda_prep"; fail=1; continue
  fi
  run="$W/$k.plan --data $W/train.bin --steps 2 --eval-data $W/eval.bin --eval-every 1 --eval-batches 2 --quiet"
  # shellcheck disable=SC2086
  if ! timeout 120 mpirun -np "$R" --oversubscribe "$B/bin/zinfrun" $run --backend host --losses "$W/$k.host" \
         --checkpoint-dir "$W/ck-$k" --checkpoint-every 2 < /dev/null > "$W/$k.hout" 2>&1 ||
     ! cuda "$R" "$B/bin/zinfrun" $run --backend cuda --losses "$W/$k.cuda" > "$W/$k.cout" 2>&1; then
    tail -5 "$W/$k.hout" "$W/$k.cout"; echo "FAIL: $k: zinfrun"; fail=1; continue
  fi
  # every line (step and eval): the same kind, step, and loss within 2e-4
  if awk 'NR == FNR { a[FNR] = $0; n = FNR; next }
          { split(a[FNR], h); s = ($1 == "eval") ? 3 : 2; l = ($1 == "eval") ? 5 : 4
            if ($1 != h[1] || $s != h[s]) bad = 1
            d = $l - h[l]; if (d < 0) d = -d; if (d > 2e-4 * (h[l] < 0 ? -h[l] : h[l])) bad = 1; m = FNR }
          END { exit bad || m != n || n < 5 }' "$W/$k.host" "$W/$k.cuda"; then
    echo "ok   $k: eval and training losses on the CUDA backend = the host backend's ($(grep -c '^eval' "$W/$k.cuda") evals)"
  else
    echo "FAIL $k: the CUDA backend's losses differ from the host backend's"; paste "$W/$k.host" "$W/$k.cuda"; fail=1
  fi
done
# zinfgen, 1 rank, GPU homes, from the host run's checkpoint: greedy, and
# sampled with a seed (a varied text that reads the whole distribution)
for mode in "--temperature 0" "--temperature 1 --top-k 40 --seed 7"; do
  g="--checkpoint $W/ck-micro-1 --prompt-ids 5,17,30,2 --max-new 12 $mode --quiet"
  # shellcheck disable=SC2086
  if "$B/bin/zinfgen" "$W/micro-1.plan" $g --backend host > "$W/gen.host" 2> "$W/gen.herr" &&
     cuda 1 "$B/bin/zinfgen" "$W/micro-1.plan" $g --backend cuda > "$W/gen.cuda" 2> "$W/gen.cerr"; then
    if [ -s "$W/gen.host" ] && cmp -s "$W/gen.host" "$W/gen.cuda"; then
      echo "ok   zinfgen $mode on the CUDA backend = the host backend's: $(tr '\n' ' ' < "$W/gen.host")"
    else
      echo "FAIL zinfgen $mode: host [$(cat "$W/gen.host")] cuda [$(cat "$W/gen.cuda")]"; fail=1
    fi
  else
    cat "$W/gen.herr" "$W/gen.cerr" | tail -6; echo "FAIL: zinfgen $mode"; fail=1
  fi
done
exit $fail
