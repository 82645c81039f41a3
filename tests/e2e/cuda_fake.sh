#!/bin/sh
# zinfrun's CUDA backend, end to end, without a GPU: the real executor
# (runtime/exec/exec_cuda.c, cuexec.c, gpucomm.c) runs against the fake driver and
# fake NCCL of tests/fakecuda (streams with their own threads, events, copies
# when the stream reaches them, NCCL over MPI) and the plan's own CUDA
# kernels on the host emulator of tests/gpu/emu.c; the GEMMs go through the
# fake cuBLASLt beside them (tests/e2e/cublaslt_fake.sh runs both paths). Each configuration's
# losses and gradient norms must match the host backend running the same plan (untiled, and
# with the MLP weights and the embedding table cut into tiles) (f32, relative
# 2e-4 per step: the GPU kernels sum in another order), on micro models and
# on examples/gpt2-tiny; the NVMe plan's losses are the same bit for bit
# with ZINF_NVME_NOBATCH=1 (tests/e2e/san_cuda_nvme.sh has more on the
# pipeline). Then the error paths:
# a plan without code for the device, a failing allocation, a hung NCCL peer.
# $1: the build directory.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir cudafake
e2e_mpi
sh tests/fakecuda/build.sh "$B" > "$W/build.log" 2>&1 || { cat "$W/build.log"; echo "cuda_fake: the fake driver did not build"; exit 1; }
FAKE="$B/fakecuda"
UNITS="$B/fakecuda/units"
mkdir -p "$UNITS"
export ZINF_CACHE_DIR="$B/fakecuda/nvrtc-cache"
STEPS=3
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
fail=0
# Every stream operation first waits a random 0..200 us: an instruction
# enqueued without the wait for a dependency on another stream then reads
# stale data and the losses differ.
JITTER=${ZINF_FAKE_JITTER_US:-200}
runfake() { # ranks args...
  np=$1; shift
  env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES="${DEVICES:-2}" FAKECUDA_JITTER_US="$JITTER" \
    timeout 600 mpirun -np "$np" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES \
    -x FAKECUDA_FAIL -x FAKECUDA_JITTER_US -x FAKECUDA_ARCH -x FAKENCCL_HANG -x FAKENCCL_ASYNC_ERROR -x ZINF_COMM_TIMEOUT "$B/bin/zinfrun" "$@" < /dev/null
}
export FAKECUDA_FAIL="" FAKENCCL_HANG="" FAKENCCL_ASYNC_ERROR="" ZINF_COMM_TIMEOUT=300
# model ranks params optimizer grads tiles
while read -r model ranks params opt grads tiles; do
  [ -z "$model" ] && continue
  name="$model-$ranks-$params-$opt-$grads"
  tl=""
  if [ "${tiles:-1}" -gt 1 ]; then name="$name-t$tiles"; tl="tiles \"*.mlp.w*\" = $tiles; tiles \"wte\" = $tiles"; fi
  src="$ROOT/tests/e2e/models/$model"
  [ -f "$src.zl" ] || src="$ROOT/examples/$model"
  cat > "$W/$name.zl" <<ZL
import "$src"
target fake { nodes = 1; gpus_per_node = $ranks
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  nvme { paths = ["$W"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "$params"; optimizer = "$opt"; grads = "$grads"; whole_below = 1000; $tl }
ZL
  mkdir -p "$W/src-$name"
  if ! "$B/bin/zinfc" "$W/$name.zl" --kernels=sm_90 --kernel-src="$W/src-$name" -o "$W/$name.plan" > "$W/$name.zinfc" 2>&1; then
    echo "FAIL $name: zinfc"; cat "$W/$name.zinfc"; fail=1; continue
  fi
  if ! "$FAKE/fakecuda_prep" "$W/$name.plan" "$W/src-$name" sm_90 "$UNITS" > "$W/$name.prep" 2>&1; then
    echo "FAIL $name: fakecuda_prep"; cat "$W/$name.prep"; fail=1; continue
  fi
  if ! timeout 300 mpirun -np "$ranks" --oversubscribe "$B/bin/zinfrun" "$W/$name.plan" --data "$W/train.bin" --backend host \
        --steps $STEPS --nvme "$W" --losses "$W/$name.host" --quiet < /dev/null > "$W/$name.hout" 2>&1; then
    echo "FAIL $name: zinfrun --backend host"; tail -20 "$W/$name.hout"; fail=1; continue
  fi
  if ! runfake "$ranks" "$W/$name.plan" --data "$W/train.bin" --backend cuda --steps $STEPS --nvme "$W" \
        --losses "$W/$name.cuda" > "$W/$name.cout" 2>&1; then
    echo "FAIL $name: zinfrun --backend cuda on the fake driver"; tail -20 "$W/$name.cout"; fail=1; continue
  fi
  grep -q "^backend: cuda" "$W/$name.cout" || { echo "FAIL $name: zinfrun did not say it runs on cuda"; head -5 "$W/$name.cout"; fail=1; }
  if [ "$ranks" -gt 1 ]; then grep -q "nccl" "$W/$name.cout" || { echo "FAIL $name: no NCCL line in the memory report"; fail=1; }; fi
  if python3 - "$W/$name.host" "$W/$name.cuda" <<'PY'
import sys
ref = [l.split() for l in open(sys.argv[1])]
got = [l.split() for l in open(sys.argv[2])]
# the loss (field 4) and the global gradient norm (field 6, clipping at 1.0 acts on it)
ok = len(ref) == len(got) == 3 and all(abs(float(a[i]) - float(b[i])) <= 2e-4 * abs(float(a[i]))
                                      for a, b in zip(ref, got) for i in (3, 5))
print(" ".join("%.7f/%.7f (norm %.5f/%.5f)" % (float(a[3]), float(b[3]), float(a[5]), float(b[5])) for a, b in zip(ref, got)))
sys.exit(0 if ok else 1)
PY
  then echo "ok   $name"; else echo "FAIL $name: cuda losses differ from the host backend's (host/cuda above)"; fail=1; fi
done <<EOF2
gpt-micro 1 gpu gpu gpu 1
gpt-micro 2 nvme nvme cpu 1
llama-micro 2 gpu gpu gpu 1
olmo2-micro 1 gpu gpu gpu 1
gpt-micro 2 cpu cpu cpu 2
gpt2-tiny 1 cpu gpu gpu 1
EOF2

P="$W/gpt-micro-1-gpu-gpu-gpu.plan"
expect() { # name pattern cmd...
  what=$1; pat=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && echo "$out" | grep -q -- "$pat"; then echo "ok   $what (exit $rc): $(echo "$out" | grep -m1 -- "$pat" | cut -c1-220)"
  else echo "FAIL $what: exit $rc, expected a message with '$pat':"; echo "$out" | tail -5; fail=1; fi
}
if [ -f "$P" ]; then
  FAKECUDA_ARCH=sm_80; export FAKECUDA_ARCH
  expect "plan without code for the device" "recompile with zinfc --kernels=sm_80" \
    runfake 1 "$P" --data "$W/train.bin" --backend cuda --steps 1
  unset FAKECUDA_ARCH
  FAKECUDA_FAIL=kernel:7; export FAKECUDA_FAIL
  expect "a kernel fault on the GPU" "zinfrun: .*CUDA_ERROR_LAUNCH_FAILED" runfake 1 "$P" --data "$W/train.bin" --backend cuda --steps 1
  FAKECUDA_FAIL=""
  expect "device allocation fails" "zinfrun: .*cuMemAlloc.*out of memory" env FAKECUDA_FAIL=cuMemAlloc_v2:1 sh -c '
    LD_LIBRARY_PATH="$0" FAKECUDA_UNITS="$1" FAKECUDA_DEVICES=2 "$2" "$3" --data "$4" --backend cuda --steps 1' \
    "$FAKE" "$UNITS" "$B/bin/zinfrun" "$P" "$W/train.bin"
  "$B/bin/zinfc" "$W/gpt-micro-1-gpu-gpu-gpu.zl" --kernels=none -o "$W/none.plan" > /dev/null 2>&1 || fail=1
  expect "plan without GPU code on --backend cuda" "has no GPU code" env LD_LIBRARY_PATH="$FAKE" FAKECUDA_DEVICES=1 \
    "$B/bin/zinfrun" "$W/none.plan" --data "$W/train.bin" --backend cuda --steps 1
  out=$(env LD_LIBRARY_PATH="$FAKE" FAKECUDA_DEVICES=1 "$B/bin/zinfrun" "$W/none.plan" --data "$W/train.bin" --steps 1 2>&1)
  if echo "$out" | grep -q "^backend: host.*has no GPU code"; then echo "ok   auto picks the host for a plan without GPU code"
  else echo "FAIL auto with a GPU and a plan without GPU code:"; echo "$out" | head -3; fail=1; fi
fi
H="$W/gpt-micro-2-nvme-nvme-cpu.plan"
if [ -f "$H" ] && [ -f "$W/gpt-micro-2-nvme-nvme-cpu.cuda" ]; then
  # the nvme queue pipelined (the run above) and one transfer at a time: the same losses, bit for bit
  ZINF_NVME_NOBATCH=1; export ZINF_NVME_NOBATCH
  runfake 2 "$H" --data "$W/train.bin" --backend cuda --steps $STEPS --nvme "$W" --losses "$W/nobatch.cuda" > "$W/nobatch.cout" 2>&1 ||
    { echo "FAIL ZINF_NVME_NOBATCH=1 on cuda"; tail -20 "$W/nobatch.cout"; fail=1; }
  unset ZINF_NVME_NOBATCH
  if cmp -s "$W/gpt-micro-2-nvme-nvme-cpu.cuda" "$W/nobatch.cuda"; then echo "ok   gpt-micro-2-nvme-nvme-cpu: nvme pipelined = ZINF_NVME_NOBATCH=1, bit for bit"
  else echo "FAIL gpt-micro-2-nvme-nvme-cpu: the pipelined nvme queue's losses differ from ZINF_NVME_NOBATCH=1's:"
    paste "$W/gpt-micro-2-nvme-nvme-cpu.cuda" "$W/nobatch.cuda"; fail=1; fi
fi
if [ -f "$H" ]; then
  t0=$(date +%s)
  expect "a hung NCCL peer ends the job" "zinfrun: .*did not complete in 3 s" env FAKENCCL_HANG=1:3 ZINF_COMM_TIMEOUT=3 \
    sh -c 'LD_LIBRARY_PATH="$0" FAKECUDA_UNITS="$1" FAKECUDA_DEVICES=2 FAKENCCL_HANG=1:3 ZINF_COMM_TIMEOUT=3 timeout 120 mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES -x FAKENCCL_HANG -x ZINF_COMM_TIMEOUT "$2" "$3" --data "$4" --nvme "$5" --backend cuda --steps 2 < /dev/null' \
    "$FAKE" "$UNITS" "$B/bin/zinfrun" "$H" "$W/train.bin" "$W"
  t1=$(date +%s)
  [ $((t1 - t0)) -lt 100 ] || { echo "FAIL the hung peer took $((t1 - t0)) s to end the job"; fail=1; }
  DEVICES=1
  expect "more ranks on a node than GPUs" "zinfrun: .*2 ranks run on this node but it has 1 GPU" runfake 2 "$H" \
    --data "$W/train.bin" --nvme "$W" --backend cuda --steps 1
  DEVICES=2
  FAKENCCL_ASYNC_ERROR=0:2
  expect "NCCL reports an asynchronous error" "zinfrun: .*ncclCommGetAsyncError" runfake 2 "$H" --data "$W/train.bin" --nvme "$W" \
    --backend cuda --steps 2
  FAKENCCL_ASYNC_ERROR=""
fi
[ $fail -eq 0 ] && echo "cuda_fake: ok"
exit $fail
