#!/bin/sh
# A run is never lost at its end, and never silent about what it keeps:
# the user's own commands, each checked by its exit status, its message
# (a fragment of it) and the files it leaves.
#   - output paths (--export, --export-hf, --trace) are checked, and their
#     parent directories made, before step 1; --export never writes over
#     a file; too little disk space is refused before step 1;
#   - a token id beyond the model's vocabulary is found before step 1;
#   - SIGINT, SIGTERM and SIGUSR1 stop the run at the end of a step with a
#     checkpoint that --resume continues from, exit 128 + the signal; a
#     second signal exits at once; under mpirun too;
#   - a checkpoint that cannot be written says what is still there;
#   - usage: --checkpoint-every without --checkpoint-dir; a random start
#     exported to Hugging Face needs --from-scratch.
#   tests/e2e/run_nothing_lost.sh BUILD
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh  # e2e_skip_part, e2e_end; the work directory is this script's own (tmpfs mounts in it)
W=$(mktemp -d /tmp/zinf-lost.XXXXXX)
mkdir -p "$W/tmp" && export TMPDIR="$W/tmp"
MNT="" MNT2=""
cleanup() {
  [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
  [ -n "$MNT2" ] && umount "$MNT2" 2>/dev/null
  chmod -R u+w "$W" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMP_NUM_THREADS=1
fail=0
RUN="$B/bin/zinfrun"
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; [ -f "$W/out" ] && tail -8 "$W/out"; fail=1; }
# refused NAME RC FRAGMENT command...: exit RC, the message, and no step trained
refused() {
  name=$1; want_rc=$2; want=$3; shift 3
  timeout 120 "$@" > "$W/out" 2>&1 < /dev/null
  rc=$?
  if [ $rc -ne "$want_rc" ]; then bad "$name: exit $rc, not $want_rc"; return 1; fi
  if ! grep -q -- "$want" "$W/out"; then bad "$name: the message lacks '$want'"; return 1; fi
  if grep -q "^step " "$W/out"; then bad "$name: a step was trained before the refusal"; return 1; fi
  ok "$name (exit $rc): $(grep -m1 -- "$want" "$W/out" | cut -c1-170)"
}

"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
cat > "$W/m.zl" <<ZL
import "$ROOT/examples/gpt2-tiny"
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
sed 's/ranks = 1/ranks = 2/' "$W/m.zl" > "$W/m2.zl"
"$B/bin/zinfc" "$W/m.zl" -o "$W/m.plan" > /dev/null || exit 1
"$B/bin/zinfc" "$W/m2.zl" -o "$W/m2.plan" > /dev/null || exit 1

# --- output paths before step 1 ---
if timeout 120 "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --export "$W/new/sub/m.safetensors" \
     --from-scratch --export-hf "$W/new/hf/out" --trace "$W/new/t/run.json" > "$W/out" 2>&1 < /dev/null &&
   [ -s "$W/new/sub/m.safetensors" ] && [ -s "$W/new/hf/out/config.json" ] && [ -s "$W/new/t/run.json" ]; then
  ok "--export, --export-hf and --trace into directories that do not exist yet: made, and written"
else bad "outputs into new directories"; fi
touch "$W/afile"
refused "--export under a file, before step 1" 1 "zinfrun: --export $W/afile/m.safetensors: $W/afile is not a directory" \
  "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --export "$W/afile/m.safetensors"
refused "--export-hf under a file, before step 1" 1 "zinfrun: --export-hf $W/afile/out: $W/afile is not a directory" \
  "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --from-scratch --export-hf "$W/afile/out"
refused "--trace that is a directory, before step 1" 1 "zinfrun: --trace $W/new is a directory: --trace names a file" \
  "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --trace "$W/new"
cp "$W/new/sub/m.safetensors" "$W/keep.safetensors"
refused "--export over an existing file" 1 "zinfrun: --export $W/new/sub/m.safetensors already exists: zinfrun does not write over it (remove it or choose another name)" \
  "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --export "$W/new/sub/m.safetensors"
cmp -s "$W/keep.safetensors" "$W/new/sub/m.safetensors" && ok "the existing export is untouched" || bad "the existing export changed"

# --- disk space (a 1 MiB tmpfs; needs root to mount) ---
mkdir -p "$W/small"
if mount -t tmpfs -o size=1m tmpfs "$W/small" 2>/dev/null; then
  MNT="$W/small"
  refused "--checkpoint-dir on a full file system, before step 1" 1 "zinfrun: not enough disk space for what this run writes: .* needed (a checkpoint in $W/small/ck .*), .* free on that file system; free some space or write elsewhere" \
    "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --checkpoint-dir "$W/small/ck"
  refused "--export on a full file system, before step 1" 1 "not enough disk space for what this run writes: .* needed (--export $W/small/m.safetensors" \
    "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --export "$W/small/m.safetensors"
  # an export that still fails at the end (the disk filled during the run,
  # while the run is stopped): the message says where the trained weights
  # are and the command that exports them, and that command works
  mkdir -p "$W/mid"
  if mount -t tmpfs -o size=8m tmpfs "$W/mid" 2>/dev/null; then
    MNT2="$W/mid"
    rm -f "$W/l"
    "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 300 --checkpoint-dir "$W/ckx" --losses "$W/l" \
      --export "$W/mid/m.safetensors" > "$W/out" 2>&1 < /dev/null &
    pid=$!
    while [ ! -s "$W/l" ]; do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill -STOP $pid
    dd if=/dev/zero of="$W/mid/fill" bs=1M count=64 2>/dev/null
    kill -CONT $pid
    wait $pid
    rc=$?
    if [ $rc -eq 1 ] && grep -q "^zinfrun: --export $W/mid/m.safetensors failed: .*; the trained weights are in the checkpoint $W/ckx/step-00000300: export them with zinfrun $W/m.plan --checkpoint-dir $W/ckx --resume --steps 0 --export $W/mid/m.safetensors" "$W/out" &&
       [ ! -e "$W/mid/m.safetensors" ]; then
      rm -f "$W/mid/fill"
      if timeout 120 "$RUN" "$W/m.plan" --checkpoint-dir "$W/ckx" --resume --steps 0 --export "$W/mid/m.safetensors" > "$W/out2" 2>&1 < /dev/null &&
         [ -s "$W/mid/m.safetensors" ]; then
        ok "an export that fails at the end (disk full): exit 1, the checkpoint named, and its command exports it"
      else bad "the command the failed export named"; fi
    else bad "an export that fails at the end: exit $rc"; fi
    umount "$W/mid" 2>/dev/null && MNT2=""
  fi
else
  e2e_skip_part "the disk-space refusals: cannot mount a tmpfs here (not root)"
fi

# --- a checkpoint that cannot be written (a file size limit) says what is kept ---
refused "a failed first checkpoint" 1 "the checkpoint of step 2 was not written: write to .*File too large; $W/ckf holds no earlier checkpoint of this run" \
  sh -c "ulimit -f 1024; exec '$RUN' '$W/m.plan' --data '$W/train.bin' --steps 2 --checkpoint-dir '$W/ckf' --quiet"
timeout 120 "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --checkpoint-dir "$W/ckg" --quiet > /dev/null 2>&1 < /dev/null || bad "a good checkpoint"
if sh -c "ulimit -f 1024; exec '$RUN' '$W/m.plan' --data '$W/train.bin' --steps 4 --checkpoint-dir '$W/ckg' --resume --quiet" > "$W/out" 2>&1 < /dev/null; then
  bad "a failed checkpoint after a good one: exit 0"
elif grep -q "the checkpoint of step 4 was not written: .*; the newest checkpoint, $W/ckg/step-00000002, is untouched" "$W/out" &&
     timeout 120 "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 3 --checkpoint-dir "$W/ckg" --resume > "$W/out2" 2>&1 < /dev/null &&
     grep -q "^resume: from step 2 " "$W/out2"; then
  ok "a failed checkpoint after a good one: $(grep -o 'the newest checkpoint.*' "$W/out")"
else bad "a failed checkpoint after a good one"; fi

# --- token ids checked before step 1 ---
python3 - "$W/train.bin" "$W/badid.bin" <<'PY'
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
pos = (len(d) - 1024) // 2 - 100          # near the end: read by no early step
d[1024 + 2 * pos:1024 + 2 * pos + 2] = (300).to_bytes(2, 'little')
open(sys.argv[2], 'wb').write(d)
PY
refused "a token id beyond the vocabulary near the end of the file" 1 "badid.bin: token 300 at position [0-9]* is not below the vocabulary size 256 (checked before step 1; .*zinftok --tokenizer" \
  "$RUN" "$W/m.plan" --data "$W/badid.bin" --steps 2
refused "the same in --eval-data" 1 "badid.bin: token 300 at position [0-9]* is not below the vocabulary size 256 (checked before step 1" \
  "$RUN" "$W/m.plan" --data "$W/train.bin" --eval-data "$W/badid.bin" --steps 2

# --- usage ---
refused "--checkpoint-every without --checkpoint-dir" 2 "zinfrun: --checkpoint-every needs --checkpoint-dir" \
  "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 4 --checkpoint-every 2
refused "--export-hf of a random start without --from-scratch" 1 "zinfrun: no --init: this run would train from random weights and --export-hf would write them as the fine-tuned model; give --init HF_DIR .* or --from-scratch" \
  "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --export-hf "$W/rnd"
[ ! -e "$W/rnd" ] && ok "nothing written by the refused export" || bad "the refused export left $W/rnd"
timeout 120 "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 1 > "$W/out" 2>&1 < /dev/null
grep -q "^weights: random, the plan's seeded initialisation (seed [0-9]*; --init PATH starts from saved weights)" "$W/out" &&
  ok "a random start says so: $(grep '^weights:' "$W/out")" || bad "no weights line"

# --- signals ---
# waits until the --losses file $1 has $2 lines (while the run $pid lives)
losses_at_least() { while [ ! -s "$1" ] || [ "$(wc -l < "$1")" -lt "$2" ]; do kill -0 "$pid" 2>/dev/null || return 1; sleep 0.1; done; }
# (SIGTERM with a checkpoint every step: the one of the step reached is there already)
for sig in INT TERM; do
  rm -rf "$W/ck" "$W/l"
  every=""; [ $sig = TERM ] && every="--checkpoint-every 1"
  # shellcheck disable=SC2086
  "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 1000000 --checkpoint-dir "$W/ck" $every --losses "$W/l" > "$W/out" 2>&1 < /dev/null &
  pid=$!
  losses_at_least "$W/l" 3 || { bad "SIG$sig: the run ended early"; continue; }
  kill -$sig $pid
  wait $pid
  rc=$?
  want=130; [ $sig = TERM ] && want=143
  step=$(tail -n 1 "$W/l" | awk '{print $2}')
  ck=$(printf '%s/ck/step-%08d' "$W" "$step")
  if [ $rc -eq $want ] && grep -q "^zinfrun: signal received: stopping at the end of the step in progress and writing a checkpoint to $W/ck; send it again to exit at once" "$W/out" &&
     grep -q "^zinfrun: interrupted by SIG$sig at step $step of 1000000: checkpoint $ck written; run the same command with --resume to continue from it" "$W/out" &&
     [ -d "$ck" ]; then
    ok "SIG$sig: exit $rc, $(grep '^zinfrun: interrupted' "$W/out")"
  else bad "SIG$sig: exit $rc (want $want)"; fi
done
timeout 120 "$RUN" "$W/m.plan" --data "$W/train.bin" --steps $((step + 2)) --checkpoint-dir "$W/ck" --resume > "$W/out" 2>&1 < /dev/null &&
  grep -q "^resume: from step $step ($W/ck/step-" "$W/out" && grep -q "^done: 2 steps" "$W/out" &&
  ok "--resume continues from the interrupted run's checkpoint (step $step)" || bad "resuming the interrupted run"
# no checkpoint directory: said, nothing written
rm -f "$W/l"
"$RUN" "$W/m.plan" --data "$W/train.bin" --steps 1000000 --losses "$W/l" > "$W/out" 2>&1 < /dev/null &
pid=$!
if losses_at_least "$W/l" 2; then
  kill -INT $pid; wait $pid; rc=$?
  [ $rc -eq 130 ] && grep -q "^zinfrun: interrupted by SIGINT at step [0-9]* of 1000000: the [0-9]* steps trained are not saved (no --checkpoint-dir)" "$W/out" &&
    ok "SIGINT without --checkpoint-dir: exit $rc, $(grep '^zinfrun: interrupted' "$W/out" | cut -c1-120)" || bad "SIGINT without --checkpoint-dir: exit $rc"
else bad "the run without a checkpoint directory ended early"; fi
# a second signal exits at once: both arrive together while the process is
# stopped (in either order: the status is 128 + the second's)
rm -rf "$W/ck" "$W/l"
"$RUN" "$W/m.plan" --data "$W/train.bin" --steps 1000000 --checkpoint-dir "$W/ck" --losses "$W/l" > "$W/out" 2>&1 < /dev/null &
pid=$!
if losses_at_least "$W/l" 2; then
  kill -STOP $pid; kill -INT $pid; kill -TERM $pid; kill -CONT $pid
  wait $pid; rc=$?
  { [ $rc -eq 130 ] || [ $rc -eq 143 ]; } && grep -q "^zinfrun: interrupted again: exiting now, without a checkpoint of the step in progress" "$W/out" &&
    ok "a second signal: exit $rc at once, 'interrupted again: exiting now'" || bad "a second signal: exit $rc"
else bad "the run for the second signal ended early"; fi
# under mpirun: SIGUSR1 to mpirun reaches every rank untouched. SIGINT to mpirun
# becomes SIGTERM to the ranks while Open MPI tears the job's runtime down, so
# whether their last agreement and checkpoint complete depends on Open MPI's
# timing (on a loaded machine it failed every time): ZINF_MPI_SIGNALS="USR1 INT"
# tries it too
mkdir -p "$W/mpitmp"
# under the sanitizers, Open MPI's own allocations at exit are not this program's leaks
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0"
for sig in ${ZINF_MPI_SIGNALS-USR1}; do  # ZINF_MPI_SIGNALS= leaves these out
  rm -rf "$W/ck" "$W/l"
  TMPDIR="$W/mpitmp" mpirun -np 2 --oversubscribe --mca odls_base_sigkill_timeout 10 "$RUN" "$W/m2.plan" --data "$W/train.bin" \
    --steps 1000000 --checkpoint-dir "$W/ck" --losses "$W/l" > "$W/out" 2>&1 < /dev/null &
  pid=$!
  losses_at_least "$W/l" 3 || { bad "mpirun, SIG$sig: the run ended early"; continue; }
  kill -$sig $pid
  wait $pid
  rc=$?
  how=SIG$sig; [ $sig = INT ] && how=SIGTERM
  line=$(grep "^zinfrun: interrupted by $how at step [0-9]* of 1000000: checkpoint $W/ck/step-[0-9]* written" "$W/out")
  step=$(echo "$line" | sed 's/.* at step \([0-9]*\) of.*/\1/')
  if [ $rc -eq 0 ]; then bad "mpirun -np 2, SIG$sig to mpirun: exit 0"
  elif [ -z "$line" ]; then grep "^zinfrun" "$W/out" | head -5; bad "mpirun -np 2, SIG$sig to mpirun: exit $rc, no line 'interrupted by $how ... checkpoint ... written'"
  elif [ ! -d "$(printf '%s/ck/step-%08d' "$W" "$step")" ]; then ls -l "$W/ck"; bad "mpirun -np 2, SIG$sig to mpirun: exit $rc, no checkpoint of step $step"
  elif ! TMPDIR="$W/mpitmp" timeout 120 mpirun -np 2 --oversubscribe "$RUN" "$W/m2.plan" --data "$W/train.bin" --steps $((step + 1)) \
       --checkpoint-dir "$W/ck" --resume > "$W/out2" 2>&1 < /dev/null || ! grep -q "^resume: from step $step " "$W/out2"; then
    tail -8 "$W/out2"; bad "mpirun -np 2, SIG$sig to mpirun: exit $rc, the checkpoint of step $step does not resume (above: the resumed run's end)"
  else ok "mpirun -np 2, SIG$sig to mpirun: exit $rc, every rank stopped after step $step with a checkpoint that resumes"; fi
done
e2e_end $fail
