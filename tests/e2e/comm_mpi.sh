#!/bin/sh
# The collectives and the node layout across 3 MPI ranks (also split over 2
# pretend nodes), and a rank killed mid-job: the others
# must end with an error within the comm timeout, not hang.
B=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
timeout 120 mpirun -np 3 --oversubscribe "$B/tests/test_comm" < /dev/null || { echo "FAIL: collectives under mpirun"; exit 1; }
# the test-only node split (comm.h): 3 ranks as 2 nodes of 2 and 1
ZINF_TEST_NODE_SPLIT=2 timeout 120 mpirun -np 3 --oversubscribe -x ZINF_TEST_NODE_SPLIT "$B/tests/test_comm" < /dev/null || { echo "FAIL: layout of 2 pretend nodes"; exit 1; }
start=$(date +%s)
ZINF_TEST_COMM_DIE=1 ZINF_COMM_TIMEOUT=5 timeout 60 mpirun -np 3 --oversubscribe -x ZINF_TEST_COMM_DIE -x ZINF_COMM_TIMEOUT "$B/tests/test_comm" < /dev/null > /tmp/zinf-comm-die.$$ 2>&1
rc=$?
end=$(date +%s)
cat /tmp/zinf-comm-die.$$; rm -f /tmp/zinf-comm-die.$$
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "FAIL: dead rank gave exit $rc (0 = not noticed, 124 = hang)"; exit 1; fi
echo "dead rank: job ended with exit $rc after $((end - start)) s"
