#!/bin/sh
# Runs MPI-using end-to-end suites 4 at a time, round after round, as two
# runs of the suite on one machine do (a developer's and CI's): each mpirun
# must find its own Open MPI session directory (tests/run.sh gives every test
# a TMPDIR of its own, tests/e2e/lib.sh every script, and a script that
# starts two mpiruns at once gives each its own), never fail on another's.
#   tests/concurrent.sh BUILD [ROUNDS [SUITE...]]     (make test-concurrent)
# ROUNDS defaults to 20. SUITE is a tests/e2e script's name; the default is
# the quick ones that start mpirun (exec_mpi, comm_mpi, san_hfio_mpi,
# train_equiv), each twice. A round starts the suites in groups of 4 at the
# same moment and waits for each group. TMPDIR is left as the caller's, so
# without the scripts' own directories every mpirun would share one session
# directory. Prints one line per round and the total; exit 1 if any suite
# failed, with the end of its log.
B=${1:-build}
ROUNDS=${2:-20}
if [ $# -gt 2 ]; then shift 2; SUITES="$*"
else SUITES="exec_mpi comm_mpi san_hfio_mpi train_equiv exec_mpi comm_mpi san_hfio_mpi train_equiv"; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for s in $SUITES; do [ -f "tests/e2e/$s.sh" ] || { echo "concurrent: no tests/e2e/$s.sh"; exit 2; }; done
L="$B/concurrent"
rm -rf "$L" && mkdir -p "$L" || exit 1
passed=0; failed=0

group() { # round, then "index-suite" items: starts them at once, waits for each
  round=$1; shift
  pids=""
  for item in "$@"; do
    sh "tests/e2e/${item#*-}.sh" "$B" > "$L/r$round-$item.log" 2>&1 &
    pids="$pids $!"
  done
  for p in $pids; do
    if wait "$p"; then passed=$((passed + 1))
    else
      failed=$((failed + 1))
      echo "FAIL round $round: ${1#*-} ($L/r$round-$1.log):"; tail -n 15 "$L/r$round-$1.log" | sed 's/^/    | /'
    fi
    shift
  done
}

r=1
while [ "$r" -le "$ROUNDS" ]; do
  before=$failed; n=0; items=""
  for s in $SUITES; do
    n=$((n + 1)); items="$items $n-$s"
    # shellcheck disable=SC2086 # the items are words without blanks
    if [ $((n % 4)) -eq 0 ]; then group "$r" $items; items=""; fi
  done
  # shellcheck disable=SC2086
  [ -n "$items" ] && group "$r" $items
  echo "round $r: $((n - failed + before)) of $n passed"
  r=$((r + 1))
done
echo "concurrent: $ROUNDS rounds of $n suites, 4 at a time: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
