#!/bin/sh
# Prints the closing line of `make test` and fails if anything failed.
pass=0; fail=0
for b in "$@"; do
  [ -f "$b/results" ] || continue
  p=$(grep -c '^pass' "$b/results"); f=$(grep -c '^fail' "$b/results")
  pass=$((pass + p)); fail=$((fail + f))
  grep '^fail' "$b/results" | sed "s|^fail |FAILED ($b): |"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
