#!/bin/sh
# zinfdump on a planned fixture: every view works, and bad input (missing
# file, corrupt plan, bad options) ends in a clear message and exit 1 or 2.
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir dump; T=$W
fail() { echo "FAIL: $*"; exit 1; }
"$B/tests/test_planner" --write-plan "$T/m.plan" host 4 || fail "planning the fixture"
D="$B/bin/zinfdump"
"$D" "$T/m.plan" > "$T/sum" || fail "summary"
grep -q "predicted step time: " "$T/sum" || fail "summary lacks the step time"
grep -q "^The step is bound by " "$T/sum" || fail "summary lacks the bottleneck"
grep -q "^  gpu " "$T/sum" || fail "summary lacks memory per tier"
"$D" "$T/m.plan" --memory > "$T/mem" || fail "--memory"
grep -q "^arena gpu: " "$T/mem" || fail "--memory lacks the gpu arena"
"$D" "$T/m.plan" --schedule --rank 3 > "$T/sched" || fail "--schedule"
grep -q "rank 3: elements" "$T/sched" || fail "--rank shows no slices"
"$D" "$T/m.plan" --trace "$T/t.json" --svg "$T/t.svg" || fail "--trace/--svg"
head -c 80 "$T/t.json" | grep -q traceEvents || fail "trace is not Chrome trace JSON"
tail -c 4 "$T/t.json" | grep -q "]}" || fail "trace JSON not closed"
if command -v python3 >/dev/null; then python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d['traceEvents']) > 10" "$T/t.json" || fail "trace JSON does not parse"; fi
grep -q "</svg>" "$T/t.svg" || fail "svg not closed"
expect() { # rc pattern command...
  rc=$1; pat=$2; shift 2
  "$@" > "$T/out" 2>&1; got=$?
  [ $got -eq $rc ] || { cat "$T/out"; fail "$* gave exit $got, expected $rc"; }
  grep -q -- "$pat" "$T/out" || { cat "$T/out"; fail "$* did not say '$pat'"; }
}
expect 1 "cannot open: No such file" "$D" "$T/none.plan"
cp "$T/m.plan" "$T/bad.plan"
printf 'X' | dd of="$T/bad.plan" bs=1 seek=3000 conv=notrunc 2>/dev/null
expect 1 "checksum mismatch (file corrupt?)" "$D" "$T/bad.plan"
head -c 1000 "$T/m.plan" > "$T/short.plan"
expect 1 "truncated" "$D" "$T/short.plan"
: > "$T/empty.plan"
expect 1 "not a zinf plan" "$D" "$T/empty.plan"
expect 2 "unknown option '--bogus'" "$D" "$T/m.plan" --bogus
expect 2 "the plan has 4 ranks" "$D" "$T/m.plan" --schedule --rank 4
expect 2 "needs a rank number" "$D" "$T/m.plan" --rank x
expect 2 "usage" "$D"
expect 1 "cannot write" "$D" "$T/m.plan" --trace /nonexistent/dir/t.json
echo "zinfdump: all views and bad inputs ok"
