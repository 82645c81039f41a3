#!/bin/sh
# The host backend across 2 and 4 MPI ranks gives the reference executor's
# losses (test_exec under mpirun: every placement, tiling, resume, export).
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir exec-mpi
e2e_mpi
for n in 2 4; do
  echo "== $n ranks"
  timeout 300 mpirun -np $n --oversubscribe "$B/tests/test_exec" < /dev/null || { echo "FAIL: test_exec with $n ranks"; exit 1; }
done
