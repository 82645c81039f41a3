#!/bin/sh
# Prints the closing line of `make test` and fails if anything failed.
#   tests/summary.sh RESULTS-FILE...
pass=0; fail=0
for r in "$@"; do
  if [ ! -f "$r" ]; then echo "FAILED: no results in $r"; fail=$((fail + 1)); continue; fi
  p=$(grep -c '^pass' "$r"); f=$(grep -c '^fail' "$r")
  pass=$((pass + p)); fail=$((fail + f))
  grep '^fail' "$r" | sed "s|^fail |FAILED ($(dirname "$r")): |"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
