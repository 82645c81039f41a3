#!/bin/sh
# zinfrun --tensorboard DIR (docs/training.md, "Watching a run"): the event
# files read back by the tensorboard package's own reader
# (tests/e2e/tb_events.py): gpt-micro on the host backend, 2 ranks, 4
# steps with an evaluation every 2, then --resume to step 6 into the same
# directory. Checked: the train/loss and eval/loss scalars equal the
# --losses file's (f32 rounding), their steps run 1..6 across both files
# (one file a run), train/lr follows the plan's warmup, the perf, busy and
# bytes tags are there for every step; a directory that cannot be made is
# refused before step 1, naming it, with nothing trained.
# Then zinfdump PLAN --losses FILE --svg OUT (runtime/report/losschart.h) draws the
# same --losses file: rsvg-convert renders it, the training line has a
# point a step (6, the resumed step 4 once) and the evaluations a dot each
# (4), the learning rate is drawn; without a plan too (no lr); a line that
# is not zinfrun's is refused with FILE:LINE, and --losses without --svg
# is a usage error.
#   tests/e2e/tensorboard.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py tensorboard
"$ZINF_PY" -c 'import tensorboard' 2> /dev/null || e2e_skip "no tensorboard package in $ZINF_PY (make deps installs it)"
e2e_workdir tb
e2e_mpi
cat > "$W/m.zl" <<ZL
import "$(pwd)/tests/e2e/models/gpt-micro"
target t { backend = "host"; ranks = 2; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
"$B/bin/zinfc" "$W/m.zl" -o "$W/m.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; echo "FAIL: zinfc"; exit 1; }
"$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null || exit 1
"$B/bin/zinftok" docs/language.md -o "$W/eval.bin" > /dev/null || exit 1
run() { timeout 120 mpirun -np 2 --oversubscribe "$B/bin/zinfrun" "$W/m.plan" --data "$W/train.bin" --checkpoint-dir "$W/ck" \
          --eval-data "$W/eval.bin" --eval-every 2 --eval-batches 1 --losses "$W/losses" "$@" < /dev/null; }
fail=0
if ! run --steps 4 --tensorboard "$W/tb/run1" > "$W/a.out" 2>&1 || ! run --steps 6 --resume --tensorboard "$W/tb/run1" > "$W/b.out" 2>&1; then
  tail -5 "$W/a.out" "$W/b.out"; echo "FAIL: zinfrun --tensorboard"; exit 1
fi
grep -q "^tensorboard: $W/tb/run1/events.out.tfevents\." "$W/a.out" || { cat "$W/a.out"; echo "FAIL: zinfrun did not say where the events go"; fail=1; }
[ "$(find "$W/tb/run1" -name 'events.out.tfevents.*' | wc -l)" -eq 2 ] || { ls -l "$W/tb/run1"; echo "FAIL: not one event file a run"; fail=1; }
if "$ZINF_PY" tests/e2e/tb_events.py "$W/tb/run1" "$W/losses" 6 > "$W/py.out" 2>&1; then
  cat "$W/py.out"
else
  cat "$W/py.out"; echo "FAIL: the event files against the --losses file"; fail=1
fi
# a directory that cannot be made: refused before step 1
: > "$W/afile"
if run --steps 2 --tensorboard "$W/afile/tb" --start-over > "$W/c.out" 2>&1; then
  echo "FAIL: --tensorboard under a file was accepted"; fail=1
elif ! grep -q "zinfrun: rank 0: --tensorboard: $W/afile is not a directory" "$W/c.out" || grep -q "^step " "$W/c.out"; then
  cat "$W/c.out"; echo "FAIL: the refusal of --tensorboard under a file"; fail=1
else
  echo "ok   --tensorboard under a file refused before step 1: $(grep -m1 "tensorboard:" "$W/c.out")"
fi
# ---- the chart of the --losses file ----
D="$B/bin/zinfdump"
if ! "$D" "$W/m.plan" --losses "$W/losses" --svg "$W/loss.svg" > "$W/d.out" 2>&1; then
  cat "$W/d.out"; echo "FAIL: zinfdump --losses --svg"; fail=1
elif ! grep -q "^wrote $W/loss.svg: 6 training steps (1 to 6), 4 evaluations$" "$W/d.out"; then
  cat "$W/d.out"; echo "FAIL: zinfdump --losses --svg's line"; fail=1
elif ! command -v rsvg-convert > /dev/null; then
  echo "FAIL: no rsvg-convert to render the chart (make deps installs librsvg2-bin)"; fail=1
elif ! rsvg-convert "$W/loss.svg" -o "$W/loss.png" || [ ! -s "$W/loss.png" ]; then
  echo "FAIL: rsvg-convert could not render the chart"; fail=1
else
  tr=$(grep 'id="train"' "$W/loss.svg" | sed 's/.*points="//; s/".*//' | wc -w)
  dots=$(grep -c '<circle ' "$W/loss.svg")
  if [ "$tr" -eq 6 ] && [ "$dots" -eq 4 ] && grep -q ">learning rate</text>" "$W/loss.svg" && grep -q ">gpt_micro: loss (" "$W/loss.svg"; then
    echo "ok   zinfdump --losses --svg: 6 training points, 4 evaluations, the learning rate; rendered by rsvg-convert"
  else
    echo "FAIL: the chart has $tr training points (6), $dots evaluation dots (4)"; fail=1
  fi
fi
"$D" --losses "$W/losses" --svg "$W/noplan.svg" > /dev/null 2>&1 && ! grep -q "learning rate" "$W/noplan.svg" && rsvg-convert "$W/noplan.svg" -o "$W/noplan.png" ||
  { echo "FAIL: the chart without a plan"; fail=1; }
printf 'step 1 loss 5.5 grad_norm 1\nstep two\n' > "$W/bad.losses"
if "$D" --losses "$W/bad.losses" --svg "$W/bad.svg" > "$W/bad.out" 2>&1 || [ -e "$W/bad.svg" ] ||
   ! grep -qF "zinfdump: $W/bad.losses:2: not a line of zinfrun --losses: 'step two'" "$W/bad.out"; then
  cat "$W/bad.out"; echo "FAIL: a malformed --losses file"; fail=1
fi
"$D" --losses "$W/losses" > "$W/usage.out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "zinfdump: --losses needs --svg OUT.svg: where to draw it" "$W/usage.out"; then
  cat "$W/usage.out"; echo "FAIL: --losses without --svg (exit $rc)"; fail=1
fi
[ $fail -eq 0 ] && echo "ok   the chart refuses a malformed file (FILE:LINE) and --losses without --svg"
exit $fail
