#!/bin/sh
# Balanced plans: on a host target whose "GPU" budget holds only part of
# the optimizer state, the planner's refinement splits the optimizer class
# (on 1 rank; on 2 a pin splits it, see below)
# (some parameters' optimizer state and gradients on the GPU, stepped by GPU
# Adam; the rest in CPU memory, stepped by CPU Adam). --explain and zinfdump
# must show the split, and zinfrun on the host backend must give the losses
# of the unsplit plan (the same model with the classes pinned): bit for bit
# on 2 ranks; on 1 rank within 1e-6 relative, since there a gradient homed
# on the GPU is accumulated in place by the backward kernels while one homed
# in CPU memory is accumulated in a zeroed buffer and then added (the tied
# wte gets two contributions: the last bits of its gradient may differ).
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir split
e2e_mpi
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 "$ROOT/README.md" -o "$W/train.bin" > /dev/null || exit 1
fail=0
for r in 1 2; do
  for v in split unsplit; do
    pin=""
    [ $v = unsplit ] && pin='params = "cpu"; optimizer = "cpu"; grads = "cpu"'
    # On 2 ranks the refinement finds no move worth making (on the host
    # backend the GPU and CPU Adam run on the same cores of a rank, and the
    # cost model knows it): a pin makes the split there
    [ $v = split ] && [ $r -gt 1 ] && pin='optimizer = "cpu"; pin "block.0.*" = "gpu"'
    cat > "$W/$v$r.zl" <<ZL
import "$ROOT/examples/gpt2-tiny"
target t { backend = "host"; ranks = $r; budget = 10 MiB
  cpu { memory = 8 GiB; bandwidth = 1 GB/s; cores = 2; flops = 1 T } }
plan { whole_below = 1000; $pin }
ZL
    if ! "$B/bin/zinfc" "$W/$v$r.zl" --explain -o "$W/$v$r.plan" > "$W/$v$r.explain" 2>&1; then
      echo "FAIL $v$r: zinfc"; tail -5 "$W/$v$r.explain"; fail=1; continue 2
    fi
    if ! timeout 300 mpirun -np $r --oversubscribe "$B/bin/zinfrun" "$W/$v$r.plan" --data "$W/train.bin" --steps 4 \
          --losses "$W/$v$r.loss" --quiet < /dev/null > "$W/$v$r.out" 2>&1; then
      echo "FAIL $v$r: zinfrun"; tail -10 "$W/$v$r.out"; fail=1; continue 2
    fi
  done
  # the split, from --explain and from the plan file
  line=$(grep '^optimizer: ' "$W/split$r.explain")
  case "$line" in
    *"on gpu"*"on cpu"*) echo "ok   $r rank(s): $line" ;;
    *) echo "FAIL $r rank(s): the optimizer is not split: '$line'"; sed -n '/^refine/,$p' "$W/split$r.explain"; fail=1 ;;
  esac
  [ $r -gt 1 ] || grep -q ', kept: cpu busy' "$W/split$r.explain" || { echo "FAIL $r rank(s): --explain gives no kept move"; fail=1; }
  grep -q '^optimizer: .*on gpu' "$W/unsplit$r.explain" && { echo "FAIL $r rank(s): the pinned plan is split"; fail=1; }
  "$B/bin/zinfdump" "$W/split$r.plan" --schedule > "$W/split$r.dump" 2>&1
  ga=$(grep -c ' gpu_adam ' "$W/split$r.dump"); ca=$(grep -c ' cpu_adam ' "$W/split$r.dump")
  if [ "$ga" -gt 0 ] && [ "$ca" -gt 0 ]; then echo "ok   $r rank(s): zinfdump: $ga gpu_adam, $ca cpu_adam"
  else echo "FAIL $r rank(s): zinfdump shows $ga gpu_adam and $ca cpu_adam"; fail=1; fi
  # the losses
  if [ $r -gt 1 ]; then
    if cmp -s "$W/split$r.loss" "$W/unsplit$r.loss"; then echo "ok   $r ranks: losses bit for bit"
    else echo "FAIL $r ranks: losses differ"; paste "$W/split$r.loss" "$W/unsplit$r.loss"; fail=1; fi
  elif python3 - "$W/split$r.loss" "$W/unsplit$r.loss" <<'PY'
import sys
a = [float(l.split()[3]) for l in open(sys.argv[1])]
b = [float(l.split()[3]) for l in open(sys.argv[2])]
sys.exit(0 if len(a) == len(b) == 4 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(a, b)) else 1)
PY
  then echo "ok   1 rank: losses within 1e-6 relative"
  else echo "FAIL 1 rank: losses differ"; paste "$W/split$r.loss" "$W/unsplit$r.loss"; fail=1; fi
done
exit $fail
