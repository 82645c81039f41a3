#!/bin/sh
# (Run by make test in the ASan+UBSan pass: every refusal and fallback path leak-free.)
# What zinfrun does with a checkpoint directory it shares with other runs,
# and with checkpoints that do not load (docs/runtime.md, "Checkpoints"):
#   - a fresh run into a directory holding checkpoints is refused, naming
#     them and the flags; with --start-over it trains beside them and prunes
#     only its own (it used to delete each checkpoint it wrote when another
#     run's later ones were there);
#   - --resume that finds only another model's checkpoints fails, naming the
#     first difference, and loads nothing (it used to start over quietly and
#     later prune them; another world's or plan's checkpoints of the same
#     model are resharded: tests/e2e/reshard.sh);
#   - --resume falls back past a corrupt shard or a garbage manifest to the
#     newest checkpoint that loads, says which it skipped and why, and the
#     losses then equal an uninterrupted run's bit for bit; when none loads
#     it fails;
#   - two runs sharing an NVMe directory and rank: the second is refused.
B=${1:-build}
. tests/e2e/lib.sh
E2E_AT_EXIT='kill $bg 2>/dev/null'
e2e_workdir ckpt-policy
export OMP_NUM_THREADS=1
RUN="timeout 120 $B/bin/zinfrun"
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL: $1"; [ -f "$W/out" ] && sed 's/^/    | /' "$W/out"; fail=1; }

"$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null || exit 1
sed -e 's/ranks = 4/ranks = 1/' -e 's/target host {/target host1 {/' examples/targets/host.zl > "$W/t1.zl"
"$B/bin/zinfc" tests/e2e/models/gpt-micro.zl --target "$W/t1.zl" -o "$W/gpt.plan" > /dev/null || { echo "FAIL: zinfc gpt"; exit 1; }
"$B/bin/zinfc" tests/e2e/models/llama-micro.zl --target "$W/t1.zl" -o "$W/llama.plan" > /dev/null || { echo "FAIL: zinfc llama"; exit 1; }
gpt() { $RUN "$W/gpt.plan" --data "$W/train.bin" --quiet "$@" > "$W/out" 2>&1; }
steps() { ls "$1" | tr '\n' ' '; }

# --- another run's later checkpoints ---
$RUN "$W/llama.plan" --data "$W/train.bin" --steps 5 --checkpoint-every 1 --checkpoint-dir "$W/shared" --quiet > "$W/out" 2>&1 ||
  bad "the other run"
gpt --steps 3 --checkpoint-every 1 --checkpoint-dir "$W/shared"
rc=$?
if [ $rc -eq 1 ] && grep -q "already holds checkpoints: step-00000005 (another plan or world: 1 rank), step-00000004" "$W/out" &&
   grep -q -- "--start-over" "$W/out"; then ok "a fresh run into another run's checkpoints is refused, naming them"
else bad "fresh run into another run's directory: exit $rc"; fi
gpt --steps 3 --checkpoint-every 1 --checkpoint-dir "$W/shared" --start-over || bad "--start-over"
if [ "$(steps "$W/shared")" = "step-00000002 step-00000003 step-00000004 step-00000005 " ]; then
  ok "--start-over keeps its newest two and the other run's: $(steps "$W/shared")"
else bad "after --start-over the directory holds: $(steps "$W/shared")"; fi

# --- --resume finds only another model's ---
$RUN "$W/llama.plan" --data "$W/train.bin" --steps 2 --checkpoint-dir "$W/other" --quiet > "$W/out" 2>&1 || bad "llama run"
gpt --steps 4 --checkpoint-dir "$W/other" --resume
rc=$?
if [ $rc -eq 1 ] && grep -q "resume: .* holds no checkpoint of this model that this plan on 1 rank can read, only step-00000002 (another model: 'llama_micro', this plan's is 'gpt_micro'; first difference: tensor 'wte' of this plan is not in the checkpoint); nothing was loaded" "$W/out" &&
   [ "$(steps "$W/other")" = "step-00000002 " ]; then ok "--resume with only another model's checkpoints fails, naming the difference, and touches nothing"
else bad "--resume into another model's directory: exit $rc, holds $(steps "$W/other")"; fi
gpt --steps 2 --checkpoint-dir "$W/empty" --resume
if [ $? -eq 0 ]; then ok "--resume into an empty directory starts from step 0"; else bad "--resume into an empty directory"; fi

# --- fallback past a corrupt shard and a garbage manifest ---
gpt --steps 6 --losses "$W/straight" || bad "straight run"
gpt --steps 4 --checkpoint-every 1 --checkpoint-dir "$W/ck" || bad "first part"
shard="$W/ck/step-00000004/rank-00000.zck"
size=$(stat -c %s "$shard")
printf 'X' | dd of="$shard" bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
$RUN "$W/gpt.plan" --data "$W/train.bin" --steps 6 --checkpoint-dir "$W/ck" --resume --losses "$W/resumed" > "$W/out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "resume: step-00000004 skipped: .*rank-00000.zck: checksum mismatch" "$W/out" &&
   grep -q "step-00000004 does not load; set aside as .*step-00000004.bad (nothing deleted), trying the one before" "$W/out" &&
   grep -q "resume: from step 3" "$W/out" && [ -f "$W/ck/step-00000004.bad/rank-00000.zck" ]; then
  ok "a corrupt shard in the newest checkpoint: skipped with the reason, set aside, step 3 used"
else bad "fallback past a corrupt shard: exit $rc"; fi
if [ "$(tail -n 3 "$W/straight")" = "$(cat "$W/resumed")" ]; then ok "steps 4-6 after the fallback equal the straight run's bit for bit"
else bad "losses after the fallback differ"; paste "$W/straight" "$W/resumed"; fi
# the resumed run wrote step 6 and kept step 3; now step 6's manifest is cut short
echo '{"format": "zinf-checkpoint", "world": ' > "$W/ck/step-00000006/manifest.json"
gpt --steps 6 --checkpoint-dir "$W/ck" --resume
if [ $? -eq 0 ] && grep -q "resume: skipped: step-00000006 (manifest.json lacks a field" "$W/out" &&
   grep -q "done: 3 steps" "$W/out"; then
  ok "a garbage manifest is reported, and the previous checkpoint is used"
else bad "garbage manifest"; fi
for d in "$W"/ck/step-*; do
  [ -f "$d/rank-00000.zck" ] && printf 'garbage' | dd of="$d/rank-00000.zck" bs=1 seek=60 conv=notrunc 2> /dev/null
done
gpt --steps 8 --checkpoint-dir "$W/ck" --resume
rc=$?
if [ $rc -eq 1 ] && grep -q "resume: none of the [0-9]* checkpoints\{0,1\} of this plan in .* loads" "$W/out"; then
  ok "when no checkpoint of this plan loads, --resume fails"
else bad "no loadable checkpoint: exit $rc"; fi

# --- one owner per swap file ---
sed 's/^train {/plan { params = "nvme"; optimizer = "nvme" }\ntrain {/' tests/e2e/models/gpt-micro.zl > "$W/nv.zl"
"$B/bin/zinfc" "$W/nv.zl" -I tests/e2e/models --target "$W/t1.zl" -o "$W/nv.plan" > /dev/null || { echo "FAIL: zinfc nvme"; exit 1; }
mkdir -p "$W/nvme"
$RUN "$W/nv.plan" --data "$W/train.bin" --steps 100000 --nvme "$W/nvme" --quiet > /dev/null 2>&1 &
bg=$!
i=0
while [ ! -f "$W/nvme/zinf-rank0.swap" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
$RUN "$W/nv.plan" --data "$W/train.bin" --steps 2 --nvme "$W/nvme" --quiet > "$W/out" 2>&1
rc=$?
kill $bg 2> /dev/null
wait $bg 2> /dev/null
if [ $rc -eq 1 ] && grep -q "zinf-rank0.swap.*in use by another live process" "$W/out"; then
  ok "a second run on the same NVMe directory and rank is refused"
else bad "shared swap file: exit $rc"; fi
$RUN "$W/nv.plan" --data "$W/train.bin" --steps 2 --nvme "$W/nvme" --quiet > "$W/out" 2>&1 || bad "run after the owner died"
if [ -z "$(ls "$W/nvme")" ]; then ok "a dead owner's swap file is taken over, and removed at a normal exit"
else bad "swap files left: $(ls "$W/nvme")"; fi
exit $fail
