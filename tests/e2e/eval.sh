#!/bin/sh
# zinfrun --eval-data: the mean forward loss on held-out tokens equals the
# reference executor's (zinfref --eval-data, ref_forward on the same global
# batches with the same weights) within 1e-6 relative, at step 0 and after
# training steps, for 1 and 2 ranks with parameters in GPU memory, on NVMe
# and tiled; the training losses with evaluation are bit-identical to a run
# without it; the trace holds one event per evaluation and still compares
# against the plan; bad options are one message and exit 2 (usage) or 1.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir eval
e2e_mpi
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
"$B/bin/zinftok" /usr/share/common-licenses/Apache-2.0 -o "$W/eval.bin" > /dev/null || exit 1
fail=0
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
  "$B/bin/zinfc" "$W/$name.zl" -o "$W/$name.plan" > "$W/$name.zinfc" 2>&1 || { echo "FAIL $name: zinfc"; cat "$W/$name.zinfc"; fail=1; continue; }
  mb=$(sed -n 's/^ *micro_batch *= *\([0-9]*\).*/\1/p' "$ROOT/examples/$model.zl" | head -1)
  "$B/bin/zinfref" "$ROOT/examples/$model.zl" --data "$W/train.bin" --steps 4 --batch $((mb * ranks)) \
      --eval-data "$W/eval.bin" --eval-every 2 --eval-batches 2 > "$W/$name.ref" || { echo "FAIL $name: zinfref"; fail=1; continue; }
  for ev in yes no; do
    opts=""
    [ $ev = yes ] && opts="--eval-data $W/eval.bin --eval-every 2 --eval-batches 2 --trace $W/$name.json"
    if ! timeout 300 mpirun -np "$ranks" --oversubscribe "$B/bin/zinfrun" "$W/$name.plan" --data "$W/train.bin" \
          --steps 4 --nvme "$W" --losses "$W/$name.$ev" $opts < /dev/null > "$W/$name.out.$ev" 2>&1; then
      echo "FAIL $name: zinfrun (eval $ev)"; tail -20 "$W/$name.out.$ev"; fail=1; continue 2
    fi
  done
  if python3 - "$W/$name.ref" "$W/$name.yes" "$W/$name.no" "$W/$name.out.yes" "$W/$name.json" <<'PY'
import json, sys
ref = [l.split() for l in open(sys.argv[1]) if l.startswith("eval ")]
got = [l.split() for l in open(sys.argv[2]) if l.startswith("eval ")]
ok = len(ref) == 3 and [r[2] for r in ref] == ["0", "2", "4"] and [g[2] for g in got] == ["0", "2", "4"]
ok = ok and all(abs(float(r[4]) - float(g[4])) <= 1e-6 * abs(float(r[4])) for r, g in zip(ref, got))
print(" ".join("%s/%s" % (r[4], g[4]) for r, g in zip(ref, got)))
steps_with = [l for l in open(sys.argv[2]) if l.startswith("step ")]
steps_without = open(sys.argv[3]).readlines()
if steps_with != steps_without or len(steps_with) != 4:
    print("training losses differ with evaluation"); ok = False
out = open(sys.argv[4]).read()
if "eval: step 2, loss " not in out: print("no eval progress line"); ok = False
ev = [e for e in json.load(open(sys.argv[5]))["traceEvents"] if e.get("cat") == "eval"]
if [e["args"]["step"] for e in ev] != [0, 2, 4] or any(e["ph"] != "i" for e in ev):
    print("trace events:", ev); ok = False
sys.exit(0 if ok else 1)
PY
  then echo "ok   $name"; else echo "FAIL $name: eval losses (reference/zinfrun above)"; fail=1; fi
  if ! "$B/bin/zinfdump" "$W/$name.plan" --compare "$W/$name.json" > "$W/$name.cmp" 2>&1; then
    echo "FAIL $name: zinfdump --compare reads no trace with eval events"; head -5 "$W/$name.cmp"; fail=1
  fi
done <<EOF2
gpt2-tiny 1 gpu gpu gpu 1
llama-tiny 2 nvme nvme cpu 2
gpt2-tiny 2 cpu cpu nvme 1
EOF2

P="$W/gpt2-tiny-1-gpu-gpu-gpu-t1.plan"
# --steps 0: evaluate the weights as they are, once
out=$("$B/bin/zinfrun" "$P" --steps 0 --eval-data "$W/eval.bin" --eval-batches 2 2>&1)
echo "$out" | grep -q "^eval: step 0, loss " && echo "ok   --steps 0 evaluates once" || { echo "FAIL --steps 0: $out"; fail=1; }
check() { # expected-status expected-message args...
  want=$1; msg=$2; shift 2
  got=$("$B/bin/zinfrun" "$P" "$@" 2>&1 >/dev/null); st=$?
  if [ $st -eq "$want" ] && [ "$got" = "$msg" ]; then echo "ok   $*"; else echo "FAIL $*: exit $st: $got"; fail=1; fi
}
check 2 "zinfrun: --eval-every needs --eval-data" --steps 0 --eval-every 2
check 2 "zinfrun: --eval-batches needs a positive integer, not '0'" --steps 0 --eval-data "$W/eval.bin" --eval-batches 0
check 2 "zinfrun: --eval-every needs a positive integer, not 'x'" --steps 0 --eval-data "$W/eval.bin" --eval-every x
check 1 "zinfrun: --eval-data $W/eval.bin: 44 windows of B*T+1 = 257 tokens; --eval-batches 90 on 1 rank reads 90: give fewer batches or a longer file" \
  --steps 0 --eval-data "$W/eval.bin" --eval-batches 90
m=$("$B/bin/zinfrun" "$P" --steps 0 --eval-data "$W/none.bin" 2>&1 >/dev/null); st=$?
[ $st -eq 1 ] && [ "$(echo "$m" | wc -l)" -eq 1 ] && echo "ok   missing eval file: $m" || { echo "FAIL missing eval file: exit $st: $m"; fail=1; }
exit $fail
