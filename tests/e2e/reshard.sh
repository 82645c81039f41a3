#!/bin/sh
# Resharding checkpoints (docs/runtime.md, "Checkpoints"): a checkpoint that
# 2 ranks wrote at step 3 resumes on 1 rank (micro-batch 4), on 4 ranks
# (micro-batch 1, --oversubscribe) and with another plan of the same model
# on 2 ranks (parameters on NVMe, Adam state in CPU memory, MLP weights in 2
# tiles); steps 4..6 must equal the uninterrupted 2-rank run's to the
# tolerance the world-size comparisons use (train_equiv.sh: relative 1e-5 a
# step; only the order of the reductions differs). A checkpoint of another
# model (gpt-micro with D = 32) is refused, naming the first tensor that
# differs, and nothing is loaded; a global batch that does not fit the data
# position is refused.
#   sh tests/e2e/reshard.sh [BUILD]
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir reshard
e2e_mpi
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL: $1"; [ -f "$W/out" ] && sed 's/^/    | /' "$W/out"; fail=1; }

"$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null || exit 1
# plan NAME RANKS MICRO_BATCH "PLAN BLOCK" [sed for the model]
plan() {
  sed -e "s/ranks = 4/ranks = $2/" -e "s/target host {/target host$2 {/" examples/targets/host.zl > "$W/t$1.zl"
  sed -e "s/micro_batch = 2/micro_batch = $3/" -e "s/^train {/plan { $4 }\ntrain {/" ${5:+-e "$5"} tests/e2e/models/gpt-micro.zl > "$W/$1.zl"
  "$B/bin/zinfc" "$W/$1.zl" -I tests/e2e/models --target "$W/t$1.zl" -o "$W/$1.plan" > "$W/out" 2>&1 || { bad "zinfc $1"; exit 1; }
}
plan p2 2 2 'whole_below = 1000'
plan p1 1 4 'whole_below = 1000'
plan p4 4 1 'whole_below = 1000'
plan q2 2 2 'params = "nvme"; optimizer = "cpu"; whole_below = 1000; tiles "*.mlp.w*" = 2'
plan d32 1 4 'whole_below = 1000' 's/D = 64/D = 32/'
plan b2 1 2 'whole_below = 1000'
mkdir -p "$W/nvme"
run() { np=$1; shift; timeout 120 mpirun -np "$np" --oversubscribe "$B/bin/zinfrun" "$@" --data "$W/train.bin" --nvme "$W/nvme" < /dev/null > "$W/out" 2>&1; }

# the uninterrupted 2-rank run, with a checkpoint at step 3
run 2 "$W/p2.plan" --steps 6 --checkpoint-every 3 --checkpoint-dir "$W/ck" --losses "$W/straight" --quiet || bad "the 2-rank run"
cp -r "$W/ck" "$W/ck-full"
rm -rf "$W/ck/step-00000006"
tail -n 3 "$W/straight" > "$W/want"

# resume NAME RANKS PLAN: from a copy of the 2-rank checkpoint
resume() {
  rm -rf "$W/ck-$1" "$W/got-$1"
  cp -r "$W/ck" "$W/ck-$1"
  if ! run "$2" "$W/$3.plan" --steps 6 --checkpoint-dir "$W/ck-$1" --resume --losses "$W/got-$1"; then bad "resume $1: zinfrun failed"; return; fi
  grep "^resume:" "$W/out" | sed 's/^/    /'
  if ! grep -q "resume: from step 3 (.*/step-00000003), resharded: written by 2 ranks (plan [0-9a-f]\{16\}), read by $2" "$W/out"; then
    bad "resume $1: no resharded resume line"; return
  fi
  if python3 - "$W/want" "$W/got-$1" <<'PY'
import sys
want = [l.split() for l in open(sys.argv[1])]
got = [l.split() for l in open(sys.argv[2])]
ok = [w[1] for w in want] == [g[1] for g in got] and all(abs(float(a[3]) - float(b[3])) <= 1e-5 * abs(float(a[3])) for a, b in zip(want, got))
print("    steps 4..6 (2 ranks straight / resumed): " + " ".join("%s/%s" % (a[3], b[3]) for a, b in zip(want, got)))
sys.exit(0 if ok else 1)
PY
  then ok "resume $1: steps 4..6 equal the 2-rank run's (relative 1e-5)"; else bad "resume $1: losses differ"; fi
}
resume 1rank 1 p1
resume 4ranks 4 p4
resume plan2 2 q2

# the 1-rank run's own checkpoint at step 6 resumes on 2 ranks again (written by 1 rank, partitioned on read)
run 2 "$W/p2.plan" --steps 7 --checkpoint-dir "$W/ck-1rank" --resume --losses "$W/back" ||  bad "resume on 2 ranks from the 1-rank run's checkpoint"
if grep -q "resume: from step 6 (.*step-00000006), resharded: written by 1 rank (plan [0-9a-f]*), read by 2; micro-batch 4 -> 2" "$W/out"; then
  ok "the 1-rank run's checkpoint resumes on 2 ranks, the micro-batch change said"
else bad "back to 2 ranks"; fi

# a flipped byte in writer 1's shard of step 6: found by the entry's checksum, set aside, step 3 resharded instead
# (byte 100: in the data of the first entry, wte, partitioned; a whole tensor is read from writer 0 only)
printf 'X' | dd of="$W/ck-full/step-00000006/rank-00001.zck" bs=1 seek=100 conv=notrunc 2> /dev/null
run 1 "$W/p1.plan" --steps 6 --checkpoint-dir "$W/ck-full" --resume --losses "$W/got-full"
rc=$?
if [ $rc -eq 0 ] && grep -q "resume: step-00000006 skipped: .*rank-00001.zck: checksum mismatch in '.*' (file corrupt)" "$W/out" &&
   grep -q "step-00000006 does not load; set aside as .*step-00000006.bad" "$W/out" && grep -q "resume: from step 3 .*resharded" "$W/out" &&
   [ "$(cut -d' ' -f2 "$W/got-full" | tr '\n' ' ')" = "4 5 6 " ]; then
  ok "a corrupt writer shard is caught by its checksum, set aside, and the checkpoint before is resharded"
else bad "corrupt writer shard: exit $rc"; fi

# a manifest written before layouts (version 1): its own plan and world resume it, another world lists it as skipped
rm -rf "$W/ck-v1"; cp -r "$W/ck" "$W/ck-v1"
python3 - "$W/ck-v1/step-00000003/manifest.json" <<'PY'
import sys
s = open(sys.argv[1]).read()
open(sys.argv[1], "w").write(s[:s.index(',\n  "layout"')].replace('"version": 2', '"version": 1') + "\n}\n")
PY
run 1 "$W/p1.plan" --steps 6 --checkpoint-dir "$W/ck-v1" --resume
if [ $? -eq 1 ] && grep -q "only step-00000003 (another plan or world: 2 ranks; its manifest records no layout" "$W/out"; then
  ok "a version-1 manifest (no layout) is not resharded"
else bad "version-1 manifest on another world"; fi
run 2 "$W/p2.plan" --steps 6 --checkpoint-dir "$W/ck-v1" --resume --losses "$W/got-v1"
if [ $? -eq 0 ] && grep -q "resume: from step 3 (.*step-00000003)$" "$W/out" && [ "$(cat "$W/got-v1")" = "$(cat "$W/want")" ]; then
  ok "a version-1 manifest resumes its own plan and world, bit for bit"
else bad "version-1 manifest on its own plan"; fi

# another model
rm -rf "$W/ck-d32"; cp -r "$W/ck" "$W/ck-d32"
run 1 "$W/d32.plan" --steps 6 --checkpoint-dir "$W/ck-d32" --resume
rc=$?
if [ $rc -eq 1 ] && grep -q "holds no checkpoint of this model that this plan on 1 rank can read, only step-00000003 (another model: tensor 'wte' is param \[256, 64\] f32 in the checkpoint, param \[256, 32\] f32 in this plan); nothing was loaded" "$W/out" &&
   [ "$(ls "$W/ck-d32")" = "step-00000003" ]; then ok "a checkpoint of another model is refused, naming the first tensor that differs"
else bad "another model: exit $rc"; fi

# a global batch of 2 rows a step (1 rank x 2) cannot continue 4 rows a step
rm -rf "$W/ck-b2"; cp -r "$W/ck" "$W/ck-b2"
run 1 "$W/b2.plan" --steps 6 --checkpoint-dir "$W/ck-b2" --resume
rc=$?
if [ $rc -eq 1 ] && grep -q "the checkpoint was trained on 4 rows a step (2 ranks x micro-batch 2 x grad_accum 1), this run reads 2 (1 rank x 2 x 1)" "$W/out"; then
  ok "a global batch that does not fit the data position is refused"
else bad "another global batch: exit $rc"; fi
[ -z "$(ls "$W/nvme")" ] || bad "swap files left: $(ls "$W/nvme")"
exit $fail
