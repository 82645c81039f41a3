#!/bin/sh
# Runs one pass of the suite against a build tree and records the results.
#   tests/run.sh BUILD MODE [unit]
# MODE is "plain" or "asan". Every test is a program or script whose exit code
# is the verdict: 0 passed, 77 skipped (it cannot run here: the Python
# environment, a program or a tool that make deps installs is missing; the
# test says why on a line "skip: WHY"; automake's convention), any other
# failed. Results go to BUILD/results (one line per test: pass, skip or fail,
# then its name) and the summary is printed by tests/summary.sh. Each test
# runs with a TMPDIR of its own, removed after it, so that two runs of the
# suite on one machine (or two tests) never share Open MPI's session
# directory <tmp>/ompi.<host>.<uid>: its creation races between mpiruns
# started at once.
BUILD=$1
MODE=$2
ONLY=$3
RES="$BUILD/results"
mkdir -p "$BUILD/logs"
: > "$RES"
export ZINF_BUILD="$BUILD" ZINF_TEST_MODE="$MODE"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# LeakSanitizer cannot run under ptrace (some sandboxes); leaks are still
# checked where it can run.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

run_one() { # name command...
  name=$1; shift
  log="$BUILD/logs/$(echo "$name" | tr '/' '_').log"
  start=$(date +%s)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/zinf-test.XXXXXX") || { echo "fail $name" >> "$RES"; return; }
  TMPDIR=$tmp "$@" > "$log" 2>&1
  rc=$?
  rm -rf "$tmp"
  case $rc in
    0) echo "pass $name" >> "$RES"; status=PASS ;;
    77) echo "skip $name: $(grep '^skip: ' "$log" | tail -1 | cut -c7-)" >> "$RES"; status=SKIP ;;
    *) echo "fail $name" >> "$RES"; status=FAIL ;;
  esac
  end=$(date +%s)
  printf '%-5s %-40s %4ss  [%s]\n' "$status" "$name" "$((end - start))" "$MODE"
  # the failed checks first (with what each printed after it), then the log's end
  if [ $status = FAIL ]; then
    grep -A6 '^FAIL' "$log" | head -30 | sed 's/^/    ! /'
    sed 's/^/    | /' "$log" | tail -40
  fi
  if [ $status = SKIP ]; then grep '^skip: ' "$log" | sed 's/^/    | /'; fi
}

for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  run_one "unit/$(basename "$t")" "$t"
done
[ "$ONLY" = unit ] && exit 0

if [ -f tests/golden/run.sh ]; then
  run_one golden sh tests/golden/run.sh "$BUILD" check
fi
for s in tests/e2e/*.sh; do
  [ -f "$s" ] || continue
  case "$MODE:$(basename "$s")" in
    *:lib.sh) ;; # the scripts' shared set-up, sourced by them: not a test
    asan:san_*|plain:*) run_one "e2e/$(basename "$s" .sh)" sh "$s" "$BUILD" ;;
  esac
done
exit 0
