#!/bin/sh
# A training step on the host backend: gpt2-tiny, 2 MPI ranks, parameters
# and optimizer state on NVMe (examples/gpt2-tiny-offload.zl). Prints the
# measured step time beside the plan's prediction and each queue's measured
# busy time beside the predicted one (zinfrun's summary), after a warm-up.
#   tests/bench/bench_step.sh BUILD [STEPS]
B=${1:-build}
STEPS=${2:-20}
W=$(mktemp -d /tmp/zinf-bench-step.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMP_NUM_THREADS=1
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
"$B/bin/zinfc" examples/gpt2-tiny-offload.zl -o "$W/tiny.plan" | tail -1 || exit 1
mkdir -p "$W/nvme"
mpirun -np 2 --oversubscribe "$B/bin/zinfrun" "$W/tiny.plan" --data "$W/train.bin" --steps "$STEPS" \
  --nvme "$W/nvme" --quiet < /dev/null || exit 1
"$B/bin/zinfdump" "$W/tiny.plan" | head -20
