#!/bin/sh
# zinfprobe --quick on 1 and 2 ranks into a temp dir: the file it writes
# compiles as a target, zinfc with no --target picks it up (ZINF_PROBE) and
# says so, zinfc --probe runs it; an unwritable -o and a bad --nvme dir give
# one message and exit 1, a bad option exit 2. No timings are checked.
#   tests/e2e/probe.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir probe
e2e_mpi
fail=0
bad() { echo "FAIL: $*"; fail=1; }
mkdir -p "$W/nvme"
"$B/bin/zinfprobe" --quick --host --nvme "$W/nvme" -o "$W/p1.zl" > "$W/p1.log" 2>&1 || { cat "$W/p1.log"; bad "zinfprobe on 1 rank"; }
grep -q '^target probe_[A-Za-z0-9_]* {$' "$W/p1.zl" || bad "no target block in p1.zl"
grep -q 'efficiency {' "$W/p1.zl" && grep -q 'latency_us' "$W/p1.zl" && grep -q 'wake_us = ' "$W/p1.zl" &&
  grep -q 'request_us = ' "$W/p1.zl" && grep -q 'adam_bandwidth = [0-9.]* GB/s; read_bandwidth = ' "$W/p1.zl" ||
  bad "p1.zl lacks the measured figures"
grep -q '^  kernels {' "$W/p1.zl" && grep -q '^    gemm = \[[0-9]' "$W/p1.zl" && grep -q '^    activation = \[[0-9]' "$W/p1.zl" ||
  bad "p1.zl lacks the timed kernel calls"
grep -q '^         reads = \[4096, [0-9]' "$W/p1.zl" && grep -q '^         writes = \[4096, [0-9]' "$W/p1.zl" ||
  bad "p1.zl lacks the timed NVMe transfers"
# a list of timed transfers not in threes, and one with a size twice: what it must be, exit 1
sed 's/^         reads = \[.*/         reads = [4096, 5, 60, 65536, 20]/' "$W/p1.zl" > "$W/odd.zl"
"$B/bin/zinfc" examples/gpt2-tiny.zl --target "$W/odd.zl" -o "$W/odd.plan" > "$W/odd.log" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "'reads' must be a list of timed transfers, each its bytes, its microseconds with the queues full" "$W/odd.log" ||
  { cat "$W/odd.log"; bad "a list of timed transfers not in threes: exit $rc"; }
sed 's/^         writes = \[.*/         writes = [4096, 5, 60, 4096, 6, 61]/' "$W/p1.zl" > "$W/odd.zl"
"$B/bin/zinfc" examples/gpt2-tiny.zl --target "$W/odd.zl" -o "$W/odd.plan" > "$W/odd.log" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "'writes' times 4096 bytes twice" "$W/odd.log" || { cat "$W/odd.log"; bad "a size timed twice: exit $rc"; }
# a malformed list of timed calls: the compiler says what it must be, exit 1
sed 's/^    gemm = \[.*/    gemm = [2e6, 25, 8e6]/' "$W/p1.zl" > "$W/odd.zl"
"$B/bin/zinfc" examples/gpt2-tiny.zl --target "$W/odd.zl" -o "$W/odd.plan" > "$W/odd.log" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "'gemm' must be a list of timed calls, each its FLOPs and its microseconds" "$W/odd.log" ||
  { cat "$W/odd.log"; bad "an odd list of timed calls: exit $rc"; }
grep -q '^host kernels per rank' "$W/p1.log" && grep -q '^nvme (' "$W/p1.log" || bad "zinfprobe printed no measurements"
[ -z "$(ls "$W/nvme")" ] || bad "zinfprobe left files in the NVMe directory: $(ls "$W/nvme")"
if command -v mpirun > /dev/null; then
  mpirun -np 2 --oversubscribe "$B/bin/zinfc" --probe --quick --host --nvme "$W/nvme" -o "$W/p2.zl" < /dev/null > "$W/p2.log" 2>&1 ||
    { cat "$W/p2.log"; bad "zinfc --probe on 2 ranks"; }
  grep -q '^  ranks = 2$' "$W/p2.zl" && grep -q '^  net  {' "$W/p2.zl" || bad "p2.zl: not 2 ranks with a net block"
  grep -q '^collectives (MPI, 2 ranks)' "$W/p2.log" || bad "no collectives measured on 2 ranks"
  [ "$(grep -c '^wrote ' "$W/p2.log")" = 1 ] || bad "not one 'wrote' line from 2 ranks"
else
  e2e_skip_part "no mpirun: the 2-rank probe (make deps installs Open MPI)"
  cp "$W/p1.zl" "$W/p2.zl"
fi
for r in 1 2; do
  "$B/bin/zinfc" examples/gpt2-tiny.zl --target "$W/p$r.zl" -o "$W/t$r.plan" > "$W/zc$r.log" 2>&1 || { cat "$W/zc$r.log"; bad "p$r.zl does not compile as a target"; }
  ZINF_PROBE="$W/p$r.zl" "$B/bin/zinfc" examples/gpt2-tiny.zl -o "$W/d$r.plan" > "$W/zd$r.log" 2>&1 || { cat "$W/zd$r.log"; bad "zinfc with ZINF_PROBE"; }
  grep -q "^target: probe_[A-Za-z0-9_]*, measured by zinfprobe, from $W/p$r.zl\$" "$W/zd$r.log" || { cat "$W/zd$r.log"; bad "zinfc did not say it read p$r.zl"; }
  grep -q "on probe_.*, $r rank" "$W/zd$r.log" || bad "the plan is not for the probed target on $r rank(s)"
  cmp -s "$W/t$r.plan" "$W/d$r.plan" || bad "--target p$r.zl and ZINF_PROBE=p$r.zl plan differently"
done
# with ZINF_PROBE=none, no probe file: zinfc says nothing about one
ZINF_PROBE=none "$B/bin/zinfc" examples/gpt2-tiny.zl -o "$W/n.plan" > "$W/n.log" 2>&1 || bad "ZINF_PROBE=none"
grep -q '^target:' "$W/n.log" && bad "ZINF_PROBE=none read a probe file"
# a missing ZINF_PROBE file: one message, exit 1
ZINF_PROBE="$W/missing.zl" "$B/bin/zinfc" examples/gpt2-tiny.zl -o "$W/n.plan" > "$W/m.log" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "ZINF_PROBE=$W/missing.zl: cannot read it" "$W/m.log" || { cat "$W/m.log"; bad "a missing ZINF_PROBE file: exit $rc"; }
# bad input
"$B/bin/zinfprobe" --quick -o "$W/no/such/dir/p.zl" > "$W/e1.log" 2>&1; rc=$?
[ $rc = 1 ] && [ "$(wc -l < "$W/e1.log")" = 1 ] && grep -q "^zinfprobe: -o $W/no/such/dir/p.zl: cannot write: No such file or directory\$" "$W/e1.log" ||
  { cat "$W/e1.log"; bad "unwritable -o: exit $rc"; }
"$B/bin/zinfprobe" --quick --nvme "$W/nonexistent" -o "$W/p.zl" > "$W/e2.log" 2>&1; rc=$?
[ $rc = 1 ] && [ "$(wc -l < "$W/e2.log")" = 1 ] && grep -q "^zinfprobe: --nvme $W/nonexistent: No such file or directory\$" "$W/e2.log" ||
  { cat "$W/e2.log"; bad "bad --nvme dir: exit $rc"; }
"$B/bin/zinfprobe" --quick --nvme "$W/p1.zl" -o "$W/p.zl" > "$W/e3.log" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "not a directory" "$W/e3.log" || { cat "$W/e3.log"; bad "--nvme on a file: exit $rc"; }
"$B/bin/zinfprobe" --quick --ranks zero > "$W/e4.log" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(wc -l < "$W/e4.log")" = 1 ] || { cat "$W/e4.log"; bad "--ranks zero: exit $rc"; }
"$B/bin/zinfprobe" --bogus > "$W/e5.log" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "unknown argument '--bogus'" "$W/e5.log" || { cat "$W/e5.log"; bad "unknown option: exit $rc"; }
[ -e "$W/p.zl" ] && bad "a failed probe wrote its file"
"$B/bin/zinfc" --help | grep -q -- '--probe' || bad "zinfc --help does not mention --probe"
[ $fail = 0 ] && echo "probe: ok"
e2e_end $fail
