#!/bin/sh
# The host backend across 2 and 4 MPI ranks gives the reference executor's
# losses (test_exec under mpirun: every placement, tiling, resume, export).
B=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
for n in 2 4; do
  echo "== $n ranks"
  timeout 300 mpirun -np $n --oversubscribe "$B/tests/test_exec" < /dev/null || { echo "FAIL: test_exec with $n ranks"; exit 1; }
done
