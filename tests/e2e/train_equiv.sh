#!/bin/sh
# zinfrun on the host backend gives the reference executor's losses (f32,
# relative 1e-5 per step) on the real example models, for 1, 2 and 4 ranks,
# parameters and optimizer state on the GPU arena, in CPU memory and on NVMe,
# with and without tiling. The reference runs the same global batch on one
# process (zinfref --batch R*B).
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir equiv
e2e_mpi
STEPS=4
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 "$ROOT/README.md" -o "$W/train.bin" > /dev/null || exit 1
fail=0
# model ranks params optimizer grads tiles
while read -r model ranks params opt grads tiles; do
  [ -z "$model" ] && continue
  name="$model-$ranks-$params-$opt-$grads-t$tiles"
  tl=""
  [ "$tiles" -gt 1 ] && tl="tiles \"*.mlp.w*\" = $tiles; tiles \"*.w1\" = $tiles"
  cat > "$W/$name.zl" <<ZL
import "$ROOT/examples/$model"
target t { backend = "host"; ranks = $ranks; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
plan { params = "$params"; optimizer = "$opt"; grads = "$grads"; whole_below = 1000; $tl }
ZL
  if ! "$B/bin/zinfc" "$W/$name.zl" -o "$W/$name.plan" > "$W/$name.zinfc" 2>&1; then
    echo "FAIL $name: zinfc"; cat "$W/$name.zinfc"; fail=1; continue
  fi
  mb=$(sed -n 's/^ *micro_batch *= *\([0-9]*\).*/\1/p' "$ROOT/examples/$model.zl" | head -1)
  ref="$W/ref-$model-$ranks"
  [ -f "$ref" ] || "$B/bin/zinfref" "$ROOT/examples/$model.zl" --data "$W/train.bin" --steps $STEPS --batch $((mb * ranks)) > "$ref" || { echo "FAIL $name: zinfref"; fail=1; continue; }
  rm -f "$W/$name.loss"
  if ! timeout 300 mpirun -np "$ranks" --oversubscribe "$B/bin/zinfrun" "$W/$name.plan" --data "$W/train.bin" \
        --steps $STEPS --nvme "$W" --losses "$W/$name.loss" --quiet < /dev/null > "$W/$name.out" 2>&1; then
    echo "FAIL $name: zinfrun"; tail -20 "$W/$name.out"; fail=1; continue
  fi
  if python3 - "$ref" "$W/$name.loss" <<'PY'
import sys
ref = [float(l.split()[3]) for l in open(sys.argv[1])]
got = [float(l.split()[3]) for l in open(sys.argv[2])]
ok = len(ref) == len(got) and all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(ref, got))
print(" ".join("%.7f/%.7f" % (a, b) for a, b in zip(ref, got)))
sys.exit(0 if ok else 1)
PY
  then echo "ok   $name"; else echo "FAIL $name: losses differ from the reference (reference/zinfrun above)"; fail=1; fi
done <<EOF2
gpt2-tiny 1 gpu gpu gpu 1
gpt2-tiny 2 nvme nvme cpu 1
gpt2-tiny 4 cpu cpu cpu 1
gpt2-tiny 2 cpu cpu cpu 2
llama-tiny 1 nvme cpu cpu 1
llama-tiny 2 gpu gpu gpu 1
llama-tiny 4 nvme nvme cpu 2
EOF2
exit $fail
