#!/bin/sh
# Golden schedule dumps: the planner's schedule for fixed models and targets,
# written to a plan file, read back and dumped by zinfdump, compared with
# tests/golden/schedules/NAME.txt.
#   tests/e2e/golden_schedule.sh BUILD           check
#   tests/e2e/golden_schedule.sh BUILD update    rewrite the golden files (review the diff)
# Models: the hand-built MLP fixture of tests/unit/plan_fixture.h; and
# examples/gpt2-tiny.zl through zinfc.
B=${1:-build}
MODE=${2:-check}
G=tests/golden/schedules
. tests/e2e/lib.sh
e2e_need_bin zinfc zinfdump
e2e_workdir golden; T=$W
fail=0
check() { # name file
  if [ "$MODE" = update ]; then cp "$2" "$G/$1.txt"; echo "updated $G/$1.txt"; return; fi
  if [ ! -f "$G/$1.txt" ]; then echo "FAIL: $G/$1.txt missing (run with 'update')"; fail=1; return; fi
  if ! diff -u "$G/$1.txt" "$2" > "$T/diff"; then
    echo "FAIL: schedule $1 differs from $G/$1.txt:"; head -40 "$T/diff"; fail=1
  else echo "ok $1"; fi
}
for r in 1 4; do
  "$B/tests/test_planner" --write-plan "$T/fx$r.plan" host $r || { echo "FAIL: planning the fixture on $r ranks"; exit 1; }
  "$B/bin/zinfdump" "$T/fx$r.plan" --schedule --rank $((r - 1)) > "$T/fx$r.txt" 2>&1 || { echo "FAIL: zinfdump"; cat "$T/fx$r.txt"; exit 1; }
  check "fixture-host-$r" "$T/fx$r.txt"
done
for r in 1 4; do
  sed "s/ranks = [0-9]*/ranks = $r/" examples/targets/host.zl > "$T/host$r.zl"
  if "$B/bin/zinfc" examples/gpt2-tiny.zl --target "$T/host$r.zl" -o "$T/g$r.plan" > "$T/zc.log" 2>&1; then
    "$B/bin/zinfdump" "$T/g$r.plan" --schedule > "$T/g$r.txt" 2>&1 || { echo "FAIL: zinfdump gpt2-tiny"; fail=1; }
    check "gpt2-tiny-host-$r" "$T/g$r.txt"
  else
    echo "FAIL: zinfc cannot plan gpt2-tiny on $r ranks:"; tail -3 "$T/zc.log"; fail=1
  fi
done
exit $fail
