#!/bin/sh
# Hugging Face weights in and out (tests/unit/test_hfio.c) across MPI
# ranks: each rank reads only its shards' byte ranges, the export gathers
# block by block; 2 ranks and 3 (uneven, padded shards). Runs in the plain
# and the asan builds (san_*); under ASan leak checking stays with the
# single-rank run of the suite (MPI's own allocations are not ours).
#   tests/e2e/san_hfio_mpi.sh BUILD
B=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
[ "${ZINF_TEST_MODE:-}" = asan ] && export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0"
for n in 2 3; do
  echo "== $n ranks"
  timeout 300 mpirun -np $n --oversubscribe "$B/tests/test_hfio" < /dev/null || { echo "FAIL: test_hfio with $n ranks"; exit 1; }
done
