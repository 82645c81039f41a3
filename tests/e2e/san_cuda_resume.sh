#!/bin/sh
# The CUDA backend on one rank of the fake driver (tests/fakecuda), also run
# under AddressSanitizer (san_*): checkpoints read and write state homes in
# GPU memory; a run stopped after 2 steps and resumed gives step 3's loss bit
# for bit as an uninterrupted run does, and --export writes the parameters;
# a kernel fault ends the run with its message and frees everything.
# $1: the build directory.
B=${1:-build}
. tests/pyenv.sh
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir cudaresume
sh tests/fakecuda/build.sh "$B" > "$W/build.log" 2>&1 || { cat "$W/build.log"; echo "san_cuda_resume: the fake driver did not build"; exit 1; }
export ZINF_CACHE_DIR="$B/fakecuda/nvrtc-cache"
cat > "$W/m.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro"
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu" }
ZL
mkdir -p "$W/src"
"$B/bin/zinfc" "$W/m.zl" --kernels=sm_90 --kernel-src="$W/src" -o "$W/m.plan" > "$W/zinfc.log" 2>&1 || { cat "$W/zinfc.log"; exit 1; }
"$B/fakecuda/fakecuda_prep" "$W/m.plan" "$W/src" sm_90 "$B/fakecuda/units" > "$W/prep.log" 2>&1 || { cat "$W/prep.log"; exit 1; }
"$B/bin/zinftok" "$ROOT/README.md" "$ROOT/docs/runtime.md" -o "$W/train.bin" > /dev/null || exit 1
run() { LD_LIBRARY_PATH="$B/fakecuda" FAKECUDA_UNITS="$B/fakecuda/units" timeout 300 "$B/bin/zinfrun" "$W/m.plan" --data "$W/train.bin" --backend cuda --quiet "$@"; }
run --steps 3 --losses "$W/all.loss" > "$W/all.out" 2>&1 || { cat "$W/all.out"; echo "FAIL uninterrupted run"; exit 1; }
run --steps 2 --checkpoint-dir "$W/ck" --checkpoint-every 1 > "$W/a.out" 2>&1 || { cat "$W/a.out"; echo "FAIL first part"; exit 1; }
run --steps 3 --checkpoint-dir "$W/ck" --resume --losses "$W/b.loss" --export "$W/m.safetensors" > "$W/b.out" 2>&1 ||
  { cat "$W/b.out"; echo "FAIL resumed part"; exit 1; }
grep -q "resume: from step 2" "$W/b.out" || { cat "$W/b.out"; echo "FAIL: did not resume from step 2"; exit 1; }
want=$(sed -n 3p "$W/all.loss" | awk '{print $4}')
got=$(sed -n 1p "$W/b.loss" | awk '{print $4}')
[ -n "$want" ] && [ "$want" = "$got" ] || { echo "FAIL: step 3 loss $got after resume, $want uninterrupted"; exit 1; }
[ -s "$W/m.safetensors" ] || { echo "FAIL: no export"; exit 1; }
"${ZINF_PY:-python3}" -c "
import sys
from safetensors.numpy import load_file
t = load_file(sys.argv[1])
assert t['wte'].shape == (256, 64), t['wte'].shape
assert abs(float(t['wte'].std()) - 0.02) < 0.005, t['wte'].std()
" "$W/m.safetensors" || { echo "FAIL: the export does not load"; exit 1; }
# A kernel fault mid-step: exit 1 with the driver's words, and (under the
# sanitizers) nothing leaked on the way out (LeakSanitizer would exit 23).
# The fault is sticky: whichever queue meets it first reports it, the
# driver (CUDA_ERROR_LAUNCH_FAILED) or, when a GEMM's queue is first,
# cuBLASLt (EXECUTION_FAILED, "the GPU program failed to execute").
FAKECUDA_FAIL=kernel:7 run --steps 1 > "$W/k.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -Eq "zinfrun: .*(CUDA_ERROR_LAUNCH_FAILED|cublasLtMatmul failed .*the GPU program failed to execute)" "$W/k.out" ||
  { cat "$W/k.out"; echo "FAIL: a kernel fault gave exit $rc"; exit 1; }
echo "san_cuda_resume: ok (step 3 loss $got, resumed = uninterrupted; a kernel fault exits 1 cleanly)"
