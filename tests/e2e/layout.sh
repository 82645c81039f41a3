#!/bin/sh
# The launch layout against the plan's target (docs/runtime.md, "Ranks and
# nodes"): a CUDA run must have the plan's nodes and at most its GPUs per
# node on each; the host backend checks the rank count only. One machine
# cannot look like two nodes to Open MPI (--host localhost,127.0.0.1 is still
# one shared-memory node), so the test-only ZINF_TEST_NODE_SPLIT=k makes
# zinfrun's comm pretend its ranks sit on k nodes. On the fake driver of
# tests/fakecuda.
#   tests/e2e/layout.sh BUILD
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir layout
e2e_mpi
. tests/fakecuda/env.sh || exit 1
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
fail=0
# RANKS NODE-SPLIT PLAN ARGS...: zinfrun on the fake driver, its ranks split
# over NODE-SPLIT pretend nodes (0: as MPI finds them)
job() {
  np=$1 split=$2; shift 2
  if [ "$split" -gt 0 ]; then export ZINF_TEST_NODE_SPLIT=$split; else unset ZINF_TEST_NODE_SPLIT; fi
  env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
    timeout 120 mpirun -np "$np" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES \
    ${ZINF_TEST_NODE_SPLIT:+-x ZINF_TEST_NODE_SPLIT} "$B/bin/zinfrun" "$@" --data "$W/train.bin" --steps 1 < /dev/null > "$W/out" 2>&1
}
refused() { # NAME WANT JOB-ARGS...
  name=$1 want=$2; shift 2
  job "$@"; rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "FAIL $name: exit $rc (0 = accepted, 124 = hang)"; tail -5 "$W/out"; fail=1
  elif ! grep -qF -- "$want" "$W/out"; then echo "FAIL $name: the message lacks '$want':"; tail -5 "$W/out"; fail=1
  else echo "ok   $name (exit $rc): $(grep -m1 -F -- "$want" "$W/out" | cut -c1-200)"; fi
}
runs() { # NAME WANT-LINE JOB-ARGS...
  name=$1 want=$2; shift 2
  if job "$@" && grep -q -- "$want" "$W/out"; then echo "ok   $name"
  else echo "FAIL $name:"; tail -5 "$W/out"; fail=1; fi
}
plan() { # NAME TARGET-LAYOUT: a CUDA plan of gpt-micro with its kernels prepared for the fake driver
  cat > "$W/$1.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro.zl"
target fake { $2
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu"; whole_below = 1000 }
ZL
  mkdir -p "$W/src-$1"
  "$B/bin/zinfc" "$W/$1.zl" --kernels=sm_90 --kernel-src="$W/src-$1" -o "$W/$1.plan" > "$W/$1.zinfc" 2>&1 &&
    "$FAKE/fakecuda_prep" "$W/$1.plan" "$W/src-$1" sm_90 "$UNITS" > "$W/$1.prep" 2>&1 ||
    { cat "$W/$1.zinfc" "$W/$1.prep"; echo "FAIL: $1: zinfc or fakecuda_prep"; exit 1; }
}
plan one-by-two "nodes = 1; gpus_per_node = 2"
plan two-by-one "nodes = 2; gpus_per_node = 1"
P12="$W/one-by-two.plan" P21="$W/two-by-one.plan"
refused "1 x 2 plan run as 2 nodes x 1 on cuda" \
  "the plan is for 1 node x 2 GPUs (2 ranks); this job is 2 nodes x 1 rank: start 2 ranks on each of 1 node" 2 2 "$P12" --backend cuda
runs "1 x 2 plan run as 1 node x 2 on cuda" "^backend: cuda" 2 0 "$P12" --backend cuda
refused "2 x 1 plan run as 1 node x 2 on cuda" \
  "the plan is for 2 nodes x 1 GPU (2 ranks); this job is 1 node x 2 ranks: start 1 rank on each of 2 nodes" 2 0 "$P21" --backend cuda
runs "2 x 1 plan run as 2 nodes x 1 on cuda" "^backend: cuda" 2 2 "$P21" --backend cuda
refused "the rank count keeps its own message" "the plan is for 2 ranks but this job has 1: run it with mpirun -np 2" \
  1 0 "$P12" --backend cuda
# The host backend: the rank count is what matters, on any number of nodes.
runs "1 x 2 CUDA plan as 2 nodes x 1 on the host backend" "^done: 1 steps" 2 2 "$P12" --backend host
sed 's/nodes = 1; gpus_per_node = 2/backend = "host"; ranks = 2; budget = 1 GiB/; /^  gpu /d; s/params = "gpu"; optimizer = "gpu"; grads = "gpu"/params = "cpu"; optimizer = "cpu"/' \
  "$W/one-by-two.zl" > "$W/host.zl"
"$B/bin/zinfc" "$W/host.zl" -o "$W/host.plan" > "$W/host.zinfc" 2>&1 || { cat "$W/host.zinfc"; echo "FAIL: host plan"; exit 1; }
runs "host plan of 2 ranks as 2 nodes x 1" "^backend: host" 2 2 "$W/host.plan"
[ $fail -eq 0 ] && echo "layout: ok"
exit $fail
