#!/bin/sh
# Every example model on every example target: zinfc either writes a plan
# that zinfdump reads back and verifies, or says in words that the model does
# not fit (exit 1). Anything else (a crash, another error) fails.
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_bin zinfc zinfdump
e2e_workdir planex; T=$W
fail=0; planned=0; refused=0
for m in examples/*.zl examples/zero-infinity/*.zl; do
  for t in examples/targets/*.zl; do
    name="$(basename "$m" .zl) on $(basename "$t" .zl)"
    "$B/bin/zinfc" "$m" --target "$t" -o "$T/p.plan" --kernels=none > "$T/out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
      if "$B/bin/zinfdump" "$T/p.plan" > "$T/sum" 2>&1; then planned=$((planned + 1))
      else echo "FAIL: $name: the written plan does not verify:"; head -5 "$T/sum"; fail=1; fi
    elif [ $rc -eq 1 ] && grep -q -e "error: model states need" -e "error: no placement fits" -e "error: the plan block puts .* (short by" "$T/out"; then
      refused=$((refused + 1))
    else
      echo "FAIL: $name: zinfc exit $rc:"; head -5 "$T/out"; fail=1
    fi
  done
done
echo "$planned plans written and verified, $refused models that do not fit refused with a reason"
[ $planned -gt 10 ] || { echo "FAIL: too few plans"; fail=1; }
exit $fail
