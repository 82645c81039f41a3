#!/bin/sh
# The collectives and the node layout across 3 MPI ranks (on one node, on
# the two nodes of a hostfile, split over 2 pretend nodes), and a rank killed
# mid-job: the others must end with an error within the comm timeout, not
# hang.
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir comm-mpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
timeout 120 mpirun -np 3 --oversubscribe "$B/tests/test_comm" < /dev/null || { echo "FAIL: collectives under mpirun"; exit 1; }
# Two nodes for real, as Open MPI sees them: a hostfile naming nodes A and B,
# whose orted mpirun starts through its rsh agent; the agent
# (tests/e2e/slurm/rsh-here) runs the command on this machine instead of over
# ssh, each pretend host with its own temporary directory. MPI's node groups
# are then the hostfile's (2 ranks on A, 1 on B): shared memory within a
# node, TCP on the loopback between them.
H=$W/hosts
mkdir "$H" || exit 1
printf 'nodeA slots=2\nnodeB slots=1\n' > "$H/hosts"
ZINF_HOSTS_TMP=$H ZINF_TEST_EXPECT_NODES=2 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo timeout 120 \
  mpirun -np 3 --hostfile "$H/hosts" --mca plm_rsh_agent "$(pwd)/tests/e2e/slurm/rsh-here" -x ZINF_TEST_EXPECT_NODES \
  "$B/tests/test_comm" < /dev/null > "$H/out" 2>&1
rc=$?
cat "$H/out"
grep -q "^comm: 3 ranks, 2 nodes x 1 to 2 ranks, launcher: mpirun$" "$H/out"; said=$?
[ $rc -eq 0 ] && [ $said -eq 0 ] || { echo "FAIL: 2 nodes of a hostfile: exit $rc, or not the layout 2 nodes x 1 to 2 ranks"; exit 1; }
# the test-only node split (comm.h): 3 ranks as 2 nodes of 2 and 1
ZINF_TEST_NODE_SPLIT=2 timeout 120 mpirun -np 3 --oversubscribe -x ZINF_TEST_NODE_SPLIT "$B/tests/test_comm" < /dev/null || { echo "FAIL: layout of 2 pretend nodes"; exit 1; }
start=$(date +%s)
ZINF_TEST_COMM_DIE=1 ZINF_COMM_TIMEOUT=5 timeout 60 mpirun -np 3 --oversubscribe -x ZINF_TEST_COMM_DIE -x ZINF_COMM_TIMEOUT "$B/tests/test_comm" < /dev/null > "$W/die.out" 2>&1
rc=$?
end=$(date +%s)
cat "$W/die.out"
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "FAIL: dead rank gave exit $rc (0 = not noticed, 124 = hang)"; exit 1; fi
echo "dead rank: job ended with exit $rc after $((end - start)) s"
