#!/bin/sh
# The cluster launch path for real (docs/runtime.md, "Launching on a
# cluster"): a single-machine Slurm started and stopped here, in a temporary
# directory under BUILD: munged, slurmctld and two slurmd posing as nodes zn1
# and zn2 of this machine (Debian's Slurm allows several slurmd per host:
# one NodeName and Port each, spool, logs and TmpFS per node with %n, and a
# task prolog that gives each node's tasks their own temporary directory).
#   srun --mpi=pmix -N 1 -n 2 zinfrun: exit 0, 2 ranks, the losses of mpirun
#   srun -n 3 with a 2-rank plan: zinfrun's message and exit 1, bounded
#   srun --mpi=none -n 2: comm's refusal (each task would run alone)
#   srun -N 2 -n 2: the same losses again, the ranks on two nodes
#   test_comm, 2 ranks on each of 2 nodes, under srun and salloc + mpirun: MPI's
#     node groups are Slurm's nodes, each local rank the launcher's
#   the fake CUDA driver (tests/fakecuda): a 2 nodes x 1 GPU plan is
#     refused on srun -N 1 -n 2 and runs with the srun line its message
#     gives; a 1 node x 2 GPUs plan is refused on the two nodes of an Open
#     MPI hostfile (no Slurm needed) and runs with the message's --map-by
# The Slurm part is skipped, saying why, when Slurm or munge is not
# installed (make deps installs them) or not run as root (slurmd starts job
# steps as root): the script's verdict is then a skip (exit 77) when the
# rest passed.
#   tests/e2e/slurm.sh BUILD
# word splitting of $TRAIN, $CTRAIN and an srun line is meant; stop runs from the trap
# shellcheck disable=SC2086,SC2317
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
# shared memory within a node, TCP on the loopback between the pretend nodes
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp \
  OMPI_MCA_btl_tcp_if_include=lo
# a job this test runs in must not leak into the cluster it makes
for v in $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
W=$(mktemp -d "$B/slurm.XXXXXX") || exit 1
# a unix socket path has 108 bytes at most: a long BUILD path moves the cluster to /tmp
[ ${#W} -gt 60 ] && { rmdir "$W"; W=$(mktemp -d /tmp/zinf-slurm.XXXXXX) || exit 1; }
chmod 755 "$W" # munged wants its socket's directory searchable by all
# Open MPI's session directories of this script's own (tests/e2e/lib.sh, e2e_workdir)
mkdir "$W/tmp" && export TMPDIR="$W/tmp" || exit 1
PIDS="" # the daemons, stopped in reverse order
stop() {
  if [ -n "$PIDS" ] && [ -n "$SLURM_CONF" ]; then
    timeout 5 scancel --quiet --user="$(id -un)" > /dev/null 2>&1
    i=0; while [ $i -lt 20 ] && [ -n "$(timeout 2 squeue -h 2>/dev/null)" ]; do sleep 0.25; i=$((i + 1)); done
  fi
  for p in $PIDS; do kill "$p" 2> /dev/null; done
  for p in $PIDS; do
    i=0; while [ $i -lt 40 ] && kill -0 "$p" 2> /dev/null; do sleep 0.25; i=$((i + 1)); done
    kill -9 "$p" 2> /dev/null
  done
  rm -rf "$W"
}
trap stop EXIT
trap 'exit 1' INT TERM HUP
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; tail -8 "$W/out"; fail=1; }

# The plans: a host plan of 2 ranks and the fake driver's 2 x 1 and 1 x 2 CUDA plans (as tests/e2e/layout.sh)
. tests/fakecuda/env.sh || exit 1
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
target() { # NAME TARGET-LINE PLAN-LINE
  cat > "$W/$1.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro.zl"
target fake { $2
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { $3; whole_below = 1000 }
ZL
}
target host 'backend = "host"; ranks = 2; budget = 1 GiB' 'params = "cpu"; optimizer = "cpu"'
"$B/bin/zinfc" "$W/host.zl" -o "$W/host.plan" > "$W/host.zinfc" 2>&1 || { cat "$W/host.zinfc"; echo "FAIL: host plan"; exit 1; }
cuda_plan() { # NAME LAYOUT
  target "$1" "$2" 'params = "gpu"; optimizer = "gpu"; grads = "gpu"'
  mkdir -p "$W/src-$1"
  "$B/bin/zinfc" "$W/$1.zl" --kernels=sm_90 --kernel-src="$W/src-$1" -o "$W/$1.plan" > "$W/$1.zinfc" 2>&1 &&
    "$FAKE/fakecuda_prep" "$W/$1.plan" "$W/src-$1" sm_90 "$UNITS" > "$W/$1.prep" 2>&1 ||
    { cat "$W/$1.zinfc" "$W/$1.prep"; echo "FAIL: $1: zinfc or fakecuda_prep"; exit 1; }
}
cuda_plan two-by-one "nodes = 2; gpus_per_node = 1"
cuda_plan one-by-two "nodes = 1; gpus_per_node = 2"
RUN="$B/bin/zinfrun"
TRAIN="--data $W/train.bin --steps 3" CTRAIN="--data $W/train.bin --steps 1 --backend cuda" # the emulated GPU is slow
# the fake driver's environment, for the CUDA runs (srun and mpirun pass it on)
fake_env() { export LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2; }
refused() { # NAME RC WANT: a run that must end with a non-zero exit (not 124: a hang) and WANT in its output
  if [ "$2" -eq 0 ] || [ "$2" -eq 124 ]; then bad "$1: exit $2 (0 = accepted, 124 = hang)"
  elif ! grep -qF -- "$3" "$W/out"; then bad "$1: the output lacks '$3'"
  else ok "$1 (exit $2): $(grep -m1 -F -- "$3" "$W/out" | cut -c1-160)"; fi
}

# The reference: mpirun on one node.
timeout 120 mpirun -np 2 "$RUN" "$W/host.plan" $TRAIN --losses "$W/mpirun.losses" < /dev/null > "$W/out" 2>&1 &&
  [ -s "$W/mpirun.losses" ] || { bad "mpirun -np 2 (the reference)"; exit 1; }

# Open MPI alone, two nodes from a hostfile: mpirun's rsh agent
# (tests/e2e/slurm/rsh-here) runs each node's orted here instead of over
# ssh, each pretend node with its own temporary directory (as
# tests/e2e/comm_mpi.sh).
printf 'nodeA slots=2\nnodeB slots=2\n' > "$W/hosts"
hostfile_run() { # MAP-BY PLAN: a fake CUDA run of 2 ranks on the hostfile's nodes
  (fake_env; ZINF_HOSTS_TMP="$W/hosts-tmp" timeout 120 mpirun -np 2 --map-by "$1" --hostfile "$W/hosts" \
    --mca plm_rsh_agent "$ROOT/tests/e2e/slurm/rsh-here" -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES \
    -x ZINF_CACHE_DIR "$RUN" "$2" $CTRAIN < /dev/null > "$W/out" 2>&1)
}
hostfile_run ppr:1:node "$W/one-by-two.plan"
refused "hostfile, 2 nodes x 1 rank: a 1 x 2 plan on cuda" $? \
  "the plan is for 1 node x 2 GPUs (2 ranks); this job is 2 nodes x 1 rank: start 2 ranks on each of 1 node"
# the mpirun line the message gives (--map-by ppr:2:node) puts both ranks on nodeA: it runs
map=$(sed -n 's/.*Open MPI: mpirun -np 2 --map-by \([^;]*\);.*/\1/p' "$W/out" | head -1)
if [ "$map" = ppr:2:node ] && hostfile_run "$map" "$W/one-by-two.plan" && grep -q "^backend: cuda (2 ranks" "$W/out" &&
  grep -q "^done: 1 steps" "$W/out"; then ok "hostfile, the message's --map-by $map: the 1 x 2 plan runs on cuda"
else bad "hostfile, the message's --map-by '$map'"; fi

# The Slurm cluster.
missing=""
for t in munged munge slurmctld slurmd srun salloc sinfo squeue scancel; do command -v "$t" > /dev/null || missing="$missing $t"; done
if [ -n "$missing" ]; then
  e2e_skip_part "the Slurm part: not installed:$missing (make deps installs slurmctld slurmd slurm-client munge)"; e2e_end $fail
fi
if [ "$(id -u)" -ne 0 ]; then e2e_skip_part "the Slurm part: slurmd must run as root"; e2e_end $fail; fi
# free ports: the controller, one per slurmd, srun's range
taken=$(ss -Htan 2> /dev/null | awk '{n = split($4, a, ":"); print a[n]}' | sort -un)
P=""
for _ in 1 2 3 4 5 6 7 8; do
  p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 400 * 100))
  clash=$(echo "$taken" | awk -v lo="$p" -v hi=$((p + 59)) '$1 >= lo && $1 <= hi' | head -1)
  [ -z "$clash" ] && { P=$p; break; }
done
[ -n "$P" ] || { echo "FAIL: no free port range for the cluster"; exit 1; }
mkdir -p "$W/munge" "$W/state" "$W/log" "$W/spool/zn1" "$W/spool/zn2" "$W/tmp/zn1" "$W/tmp/zn2"
chmod 755 "$W/munge"
dd if=/dev/urandom of="$W/munge/munge.key" bs=1024 count=1 2> /dev/null && chmod 600 "$W/munge/munge.key"
touch "$W/plugstack.conf"
# each node its own temporary directory, as separate machines have: Open
# MPI names its session directory and shared-memory segments after the host
# name, which both nodes share (the task prolog's "export" lines set the
# environment of every task, the orted mpirun starts with srun too)
cat > "$W/taskprolog" <<EOF
#!/bin/sh
d=$W/tmp/\$SLURMD_NODENAME
echo "export TMPDIR=\$d"
echo "export OMPI_MCA_orte_tmpdir_base=\$d"
echo "export OMPI_MCA_btl_vader_backing_directory=\$d"
EOF
chmod 755 "$W/taskprolog"
H=$(hostname)
export SLURM_CONF="$W/slurm.conf"
cat > "$SLURM_CONF" <<EOF
ClusterName=zinftest
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$P
SlurmdPort=$((P + 1))
SrunPortRange=$((P + 10))-$((P + 59))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$W/munge/sock
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool/%n
TmpFS=$W/tmp/%n
TaskProlog=$W/taskprolog
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd-%n.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd-%n.log
PlugStackConfig=$W/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
# job ids apart from those of another test's cluster on this machine
FirstJobId=$((P * 10))
MinJobAge=2
KillWait=2
InactiveLimit=0
NodeName=zn1 NodeHostname=$H NodeAddr=127.0.0.1 Port=$((P + 1)) CPUs=4 State=UNKNOWN
NodeName=zn2 NodeHostname=$H NodeAddr=127.0.0.1 Port=$((P + 2)) CPUs=4 State=UNKNOWN
PartitionName=zinf Nodes=zn1,zn2 Default=YES MaxTime=5 State=UP OverSubscribe=FORCE
EOF
munged -F --key-file="$W/munge/munge.key" --socket="$W/munge/sock" --pid-file="$W/munge/pid" \
  --log-file="$W/log/munged.log" --seed-file="$W/munge/seed" > "$W/log/munged.out" 2>&1 &
PIDS="$!"
i=0; until munge -S "$W/munge/sock" -n > /dev/null 2>&1; do
  i=$((i + 1)); [ $i -gt 40 ] && { cat "$W/log/munged.out"; echo "FAIL: munged did not start"; exit 1; }; sleep 0.25
done
slurmctld -D -i > "$W/log/slurmctld.out" 2>&1 &
PIDS="$! $PIDS"
for n in zn1 zn2; do slurmd -D -N $n > "$W/log/slurmd-$n.out" 2>&1 & PIDS="$! $PIDS"; done
i=0; until [ "$(sinfo -h -N -o '%N %t' 2> /dev/null | sort | tr '\n' ' ')" = "zn1 idle zn2 idle " ]; do
  i=$((i + 1))
  if [ $i -gt 120 ]; then
    sinfo -N 2>&1; tail -5 "$W"/log/*.out "$W"/log/*.log; echo "FAIL: the nodes did not become idle in 30 s"; exit 1
  fi
  sleep 0.25
done
echo "cluster: slurmctld on port $P, nodes zn1 and zn2 idle after $((i / 4)) s"
S() { timeout -k 5 120 srun "$@" < /dev/null > "$W/out" 2>&1; }

# One node: the host backend under srun gives mpirun's losses.
if S --mpi=pmix -N 1 -n 2 "$RUN" "$W/host.plan" $TRAIN --losses "$W/srun.losses" &&
  grep -q "^backend: host (2 ranks;" "$W/out" && grep -q "^done: 3 steps" "$W/out" &&
  cmp -s "$W/mpirun.losses" "$W/srun.losses"; then ok "srun --mpi=pmix -N 1 -n 2: 2 ranks, mpirun's losses"
else bad "srun --mpi=pmix -N 1 -n 2"; fi
S --mpi=pmix -N 1 -n 3 "$RUN" "$W/host.plan" $TRAIN
refused "srun -n 3 with a 2-rank plan" $? "the plan is for 2 ranks but this job has 3"
S --mpi=none -N 1 -n 2 "$RUN" "$W/host.plan" $TRAIN
refused "srun --mpi=none -n 2" $? "srun started 2 tasks but gave them no MPI bootstrap"

# Two nodes.
if S --mpi=pmix -N 2 -n 2 "$RUN" "$W/host.plan" $TRAIN --losses "$W/srun2.losses" &&
  grep -q "^backend: host (2 ranks;" "$W/out" && cmp -s "$W/mpirun.losses" "$W/srun2.losses"; then
  ok "srun --mpi=pmix -N 2 -n 2: mpirun's losses across two nodes"
else bad "srun --mpi=pmix -N 2 -n 2"; fi
export ZINF_TEST_EXPECT_NODES=2 # test_comm checks its layout against it
if S --mpi=pmix -N 2 --ntasks-per-node=2 "$B/tests/test_comm" &&
  grep -q "^comm: 4 ranks, 2 nodes x 2 ranks, launcher: srun (Slurm job [0-9]*, step 0)$" "$W/out"; then
  ok "test_comm under srun -N 2 --ntasks-per-node=2: $(grep -m1 '^comm:' "$W/out")"
else bad "test_comm under srun -N 2 --ntasks-per-node=2"; fi
if timeout -k 5 120 salloc -N 2 --ntasks-per-node=2 mpirun -np 4 --map-by ppr:2:node -x ZINF_TEST_EXPECT_NODES "$B/tests/test_comm" \
  < /dev/null > "$W/out" 2>&1 && grep -q "^comm: 4 ranks, 2 nodes x 2 ranks, launcher: mpirun in Slurm job [0-9]*$" "$W/out"; then
  ok "test_comm under salloc -N 2 --ntasks-per-node=2 mpirun -np 4: $(grep -m1 '^comm:' "$W/out")"
else bad "test_comm under salloc -N 2 --ntasks-per-node=2 mpirun -np 4"; fi
fake_env
S --mpi=pmix -N 1 -n 2 "$RUN" "$W/two-by-one.plan" $CTRAIN
refused "srun -N 1 -n 2: a 2 x 1 plan on cuda" $? \
  "the plan is for 2 nodes x 1 GPU (2 ranks); this job is 1 node x 2 ranks: start 1 rank on each of 2 nodes"
# the srun line the message gives runs it, one rank on each node
line=$(sed -n 's/.*Slurm: srun \([^)]*\)).*/\1/p' "$W/out" | head -1)
if [ "$line" = "--mpi=pmix -N 2 -n 2 --ntasks-per-node=1" ] && S $line "$RUN" "$W/two-by-one.plan" $CTRAIN &&
  grep -q "^backend: cuda (2 ranks" "$W/out" && grep -q "^done: 1 steps" "$W/out"; then
  ok "the message's srun line (srun $line): the 2 x 1 plan runs on cuda"
else bad "the message's srun line (srun $line)"; fi
[ $fail -eq 0 ] && echo "slurm: ok"
e2e_end $fail
