#!/bin/sh
# Hugging Face weights in and out (tests/unit/test_hfio.c) across MPI
# ranks: each rank reads only its shards' byte ranges, the export gathers
# block by block; 2 ranks and 3 (uneven, padded shards). Runs in the plain
# and the asan builds (san_*); under ASan leak checking stays with the
# single-rank run of the suite (MPI's own allocations are not ours).
# The two jobs run at once: each waits on its I/O and its peers for most of
# its time (a third of it on the CPU), and each works in its own directory
# (test_hfio names it by its parent, the job's launcher).
#   tests/e2e/san_hfio_mpi.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir hfio-mpi; T=$W
e2e_mpi
[ "${ZINF_TEST_MODE:-}" = asan ] && export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0"
# Two mpiruns started at once: each with its own TMPDIR, so their Open MPI
# session directories do not race (tests/e2e/lib.sh).
for n in 2 3; do
  (e2e_own_tmp "$T/tmp$n"; exec timeout 300 mpirun -np $n --oversubscribe "$B/tests/test_hfio") < /dev/null > "$T/$n.log" 2>&1 &
  eval "pid$n=\$!"
done
fail=0
for n in 2 3; do
  eval "wait \$pid$n"
  rc=$?
  echo "== $n ranks"
  cat "$T/$n.log"
  [ $rc -eq 0 ] || { echo "FAIL: test_hfio with $n ranks (exit $rc)"; fail=1; }
done
exit $fail
