#!/bin/sh
# The fuzz runs of `make fuzz` (docs/testing.md, "Fuzzing"):
#   tests/fuzz/run.sh BUILD FUZZ_BUILD "TARGETS" SECONDS JOBS
# Seeds are made from BUILD's zinfc into FUZZ_BUILD/seeds; then each target
# FUZZ_BUILD/fuzz_T runs for SECONDS, growing FUZZ_BUILD/corpus/T (kept
# between runs) from that corpus, the seeds and tests/fuzz/regress/T, and
# writing what crashes, hangs or runs out of memory to FUZZ_BUILD/crashes/T.
# JOBS >= 1: libFuzzer's -fork=JOBS, going on past crashes (each is saved);
# JOBS = 0: one process that stops at the first crash. FUZZ_FLAGS adds
# libFuzzer options. Prints each run's last statistics; exits 1 when a run
# could not start or (JOBS = 0) found a crash.
set -u
BUILD=$1
FB=$2
TARGETS=$3
SECS=$4
JOBS=${5:-1}
sh tests/fuzz/seeds.sh "$BUILD" "$FB/seeds" --kernels || exit 1
# libFuzzer's fork mode keeps its jobs' files in TMPDIR, fuzz_plan its NVMe swap files
export TMPDIR="$(pwd)/$FB/tmp"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
rc=0
for t in $TARGETS; do
  bin=$FB/fuzz_$t
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin was not built"
    rc=1
    continue
  fi
  corpus=$FB/corpus/$t
  crashes=$FB/crashes/$t
  mkdir -p "$corpus" "$crashes" "$TMPDIR" "tests/fuzz/regress/$t"
  set -- -max_total_time="$SECS" -timeout=30 -rss_limit_mb=4096 -artifact_prefix="$crashes/" -print_final_stats=1
  [ -f "tests/fuzz/$t.dict" ] && set -- "$@" -dict="tests/fuzz/$t.dict"
  [ "$t" = frontend ] && set -- "$@" -max_len=8192
  [ "$JOBS" -ge 1 ] && set -- "$@" -fork="$JOBS" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1
  log=$FB/fuzz_$t.log
  before=$(ls "$crashes" | wc -l)
  echo "fuzz: $t for ${SECS}s (log $log)"
  # shellcheck disable=SC2086
  "$bin" "$@" ${FUZZ_FLAGS:-} "$corpus" "$FB/seeds/$t" "tests/fuzz/regress/$t" > "$log" 2>&1
  status=$?
  after=$(ls "$crashes" | wc -l)
  stats=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1)
  echo "fuzz: $t: ${stats:-no statistics (see the log)}"
  echo "fuzz: $t: corpus $(ls "$corpus" | wc -l) inputs, $((after - before)) new crash/timeout/oom files in $crashes"
  if [ "$JOBS" -eq 0 ] && [ "$status" -ne 0 ]; then rc=1; fi
done
rm -rf "$TMPDIR"
exit $rc
