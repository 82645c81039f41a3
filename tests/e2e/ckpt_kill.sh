#!/bin/sh
# kill -9 at random moments of a run that checkpoints every step (most of
# its time is spent writing checkpoints: shards, fsync, rename, manifest,
# pruning), then --resume: the resumed losses must equal an uninterrupted
# run's bit for bit, and the resumed run must leave no debris behind (no
# temporary files, no incomplete step directories, at most the two newest
# checkpoints, no swap files). Parameters and Adam state live on "NVMe",
# so the killed run's swap file is taken over too.
#   sh tests/e2e/ckpt_kill.sh [BUILD]
#   CKPT_KILL_SEED=N      the random moments (default 1; printed on failure)
#   CKPT_KILL_ITERS=N     kills (default 20; e.g. 200 for a long run)
B=${1:-build}
SEED=${CKPT_KILL_SEED:-1}
ITERS=${CKPT_KILL_ITERS:-20}
STEPS=8
. tests/e2e/lib.sh
e2e_workdir ckpt-kill
export OMP_NUM_THREADS=1
fail=0

"$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null || exit 1
sed -e 's/ranks = 4/ranks = 1/' -e 's/target host {/target host1 {/' examples/targets/host.zl > "$W/t1.zl"
sed 's/^train {/plan { params = "nvme"; optimizer = "nvme" }\ntrain {/' tests/e2e/models/gpt-micro.zl > "$W/nv.zl"
"$B/bin/zinfc" "$W/nv.zl" -I tests/e2e/models --target "$W/t1.zl" -o "$W/m.plan" > /dev/null || { echo "FAIL: zinfc"; exit 1; }
mkdir -p "$W/nvme"
run() { timeout 120 "$B/bin/zinfrun" "$W/m.plan" --data "$W/train.bin" --steps $STEPS --nvme "$W/nvme" --quiet "$@"; }

# the reference, and how long a whole run takes (the window the kills fall in)
t0=$(date +%s%N)
run --losses "$W/straight" --checkpoint-every 1 --checkpoint-dir "$W/ref" > /dev/null 2>&1 || { echo "FAIL: the reference run"; exit 1; }
t1=$(date +%s%N)
window_us=$(( (t1 - t0) / 1000 ))
# the kill moments: uniform over the run, from the seed
awk -v s="$SEED" -v n="$ITERS" -v w="$window_us" 'BEGIN { srand(s); for (i = 0; i < n; i++) printf "%d\n", rand() * w }' > "$W/delays"

i=0
debris=0
midway=0
while read -r us; do
  i=$((i + 1))
  ck="$W/ck$i"
  "$B/bin/zinfrun" "$W/m.plan" --data "$W/train.bin" --steps $STEPS --nvme "$W/nvme" --quiet \
      --checkpoint-every 1 --checkpoint-dir "$ck" > /dev/null 2>&1 &
  pid=$!
  sleep "$(awk -v u="$us" 'BEGIN { printf "%.6f", u / 1e6 }')"
  kill -9 $pid 2> /dev/null && midway=$((midway + 1))
  wait $pid 2> /dev/null
  # what the kill left: temporaries, step directories without a manifest
  left=$(find "$ck" -name '*.tmp.*' 2> /dev/null | wc -l)
  for d in "$ck"/step-*; do [ -d "$d" ] && [ ! -f "$d/manifest.json" ] && left=$((left + 1)); done
  [ "$left" -gt 0 ] && debris=$((debris + 1))
  before=$(cd "$ck" 2> /dev/null && find . | sort | tr '\n' ' ')
  rm -f "$W/resumed"
  if ! run --checkpoint-dir "$ck" --resume --losses "$W/resumed" > "$W/out" 2>&1; then
    echo "FAIL: kill $i (seed $SEED, ${us} us): the resumed run failed"; sed 's/^/    | /' "$W/out"; fail=1; continue
  fi
  n=$(cat "$W/resumed" 2> /dev/null | wc -l)
  if [ "$n" -gt 0 ] && [ "$(tail -n "$n" "$W/straight")" != "$(cat "$W/resumed")" ]; then
    echo "FAIL: kill $i (seed $SEED, ${us} us): resumed losses differ"; paste "$W/straight" "$W/resumed"; fail=1
  fi
  stray=$(find "$ck" -name '*.tmp.*' | wc -l)
  for d in "$ck"/step-*; do [ -f "$d/manifest.json" ] || stray=$((stray + 1)); done
  kept=$(ls -d "$ck"/step-* | wc -l)
  if [ "$stray" -ne 0 ] || [ "$kept" -gt 2 ] || [ -n "$(ls "$W/nvme")" ]; then
    echo "FAIL: kill $i (seed $SEED, ${us} us): left behind: $(ls "$ck" | tr '\n' ' ')| nvme: $(ls "$W/nvme")"
    echo "    the kill left: $before"; sed 's/^/    | /' "$W/out"; fail=1
  fi
  rm -rf "$ck"
done < "$W/delays"
echo "ok   $ITERS kills (seed $SEED, over ${window_us} us): $midway during the run, $debris left debris that the next start removed; every resume equal to the straight run"
[ $fail -eq 0 ] && [ "$midway" -gt 0 ] || { echo "FAIL: seed $SEED"; exit 1; }
exit 0
