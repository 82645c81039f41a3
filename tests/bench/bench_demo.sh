#!/bin/sh
# The demo's step (make demo: gpt2-tiny, 2 MPI ranks, parameters and
# optimizer state on NVMe) by two builds in one run, alternating, so that
# a noisy machine slows both alike: each build compiles its own plan of
# examples/gpt2-tiny-offload.zl and trains STEPS steps, ROUNDS times.
# Prints each run's ms/step (zinfrun's mean), each build's median, and
# the ratio of the medians; with one build, only its figures.
#   sh tests/bench/bench_demo.sh BEFORE_BUILD [AFTER_BUILD] [ROUNDS] [STEPS]
# e.g. git worktree add /tmp/before HEAD~3 && make -C /tmp/before all
#      sh tests/bench/bench_demo.sh /tmp/before/build build 5
A=${1:?usage: bench_demo.sh BEFORE_BUILD [AFTER_BUILD] [ROUNDS] [STEPS]}
B=${2:-}
ROUNDS=${3:-5}
STEPS=${4:-20}
W=$(mktemp -d /tmp/zinf-bench-demo.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMP_NUM_THREADS=1
TEXT=$(ls /usr/share/common-licenses/GPL-3 README.md 2>/dev/null | head -1)
"$A/bin/zinftok" "$TEXT" -o "$W/train.bin" > /dev/null || exit 1
builds="a"
[ -n "$B" ] && builds="a b"
for k in $builds; do
  if [ "$k" = a ]; then D=$A; else D=$B; fi
  "$D/bin/zinfc" examples/gpt2-tiny-offload.zl -o "$W/$k.plan" > "$W/$k.zc" 2>&1 || { echo "FAIL: zinfc ($D)"; cat "$W/$k.zc"; exit 1; }
  grep '^wrote' "$W/$k.zc" | sed "s|^|$D: |"
done
mkdir -p "$W/nvme"
: > "$W/a.ms"
: > "$W/b.ms"
for r in $(seq 1 "$ROUNDS"); do
  for k in $builds; do
    if [ "$k" = a ]; then D=$A; else D=$B; fi
    rm -rf "$W/nvme"/*
    mpirun -np 2 --oversubscribe "$D/bin/zinfrun" "$W/$k.plan" --data "$W/train.bin" --steps "$STEPS" --nvme "$W/nvme" \
      --quiet < /dev/null > "$W/$k.log" 2>&1 || { echo "FAIL: zinfrun ($D)"; cat "$W/$k.log"; exit 1; }
    ms=$(awk '/^done:/ { for (i = 1; i <= NF; i++) if ($i == "ms/step" && $(i+1) == "measured,") print $(i-1) }' "$W/$k.log")
    echo "$ms" >> "$W/$k.ms"
    printf "round %d  %-40s %8s ms/step\n" "$r" "$D" "$ms"
  done
done
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ma=$(median "$W/a.ms")
echo "median $A: $ma ms/step"
if [ -n "$B" ]; then
  mb=$(median "$W/b.ms")
  echo "median $B: $mb ms/step"
  awk -v a="$ma" -v b="$mb" 'BEGIN { printf "speed-up (before / after): %.2fx\n", a / b }'
fi
