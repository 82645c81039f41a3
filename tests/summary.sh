#!/bin/sh
# Prints the closing line of `make test`, "N passed, N failed, N skipped"
# alone on its line, after one line per failed or skipped test, and fails if
# anything failed.
#   tests/summary.sh RESULTS-FILE...
# A skipped test (tests/run.sh: exit 77, something it needs is missing) is
# not a pass. Under CI=true, where `make deps` installed everything the
# tests need (.ci/run), a skip means that something is wrong and counts as a
# failure.
pass=0; fail=0; skip=0
for r in "$@"; do
  if [ ! -f "$r" ]; then echo "FAILED: no results in $r"; fail=$((fail + 1)); continue; fi
  p=$(grep -c '^pass ' "$r"); f=$(grep -c '^fail ' "$r"); s=$(grep -c '^skip ' "$r")
  pass=$((pass + p)); fail=$((fail + f))
  grep '^fail ' "$r" | sed "s|^fail |FAILED ($(dirname "$r")): |"
  if [ "${CI:-}" = true ]; then
    fail=$((fail + s))
    grep '^skip ' "$r" | sed "s|^skip |FAILED ($(dirname "$r"), skipped under CI=true, where make deps ran): |"
  else
    skip=$((skip + s))
    grep '^skip ' "$r" | sed "s|^skip |SKIPPED ($(dirname "$r")): |"
  fi
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
