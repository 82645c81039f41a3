#!/bin/sh
# tests/gpu/train_e2e.sh [--bundle DIR] [--model NAME] [--steps N] [--compare K] [--fake BUILD] [--nvrtc-too]
#
# zinfrun's CUDA backend end to end on one GPU (an H200 by default; the
# target is examples/targets/h200.zl with this machine's arch):
#   1. compile examples/NAME.zl (default gpt2-small) for the GPU, twice: with
#      parameters and optimizer state offloaded to CPU memory, and to NVMe
#      (the machine's disk, swap files under a temporary directory);
#   2. train N steps (default 20) of each on --backend cuda;
#   3. train the first K steps (default 3) of the CPU-offload plan on
#      --backend host from the same data, and compare the losses (bf16
#      tolerance: relative 3e-2 per step);
#   4. print tokens/s, achieved TFLOP/s, each queue's measured busy time
#      against the plan's prediction, peak GPU memory against the plan's;
#   5. with --nvrtc-too, train the first K steps of the CPU-offload plan
#      again with ZINF_CUBLASLT=0 (every GEMM its NVRTC kernel, not
#      cuBLASLt) and compare those losses with the host's too.
# The binaries come from `make` when it works here, else from a bundle that
# tests/gpu/bundle.sh packed on the development machine (carry it). Exit 0 =
# every step ran and the losses agree. Budget: under 8 minutes on one H200.
# --fake BUILD rehearses the script without a GPU: the fake driver and NCCL
# of tests/fakecuda (built in BUILD) stand in, each plan's kernels are
# prepared for the host emulator; use a small model (tests/e2e/gpu_script.sh
# runs it so, with --model ../tests/e2e/models/gpt-micro).
# $RUNCUDA is a command prefix whose words are meant to split
# shellcheck disable=SC2086
set -u
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)
BUNDLE="" MODEL=gpt2-small STEPS=20 K=3 FAKE="" NVRTC_TOO=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --compare) K=$2; shift 2 ;;
    --fake) FAKE=$2; shift 2 ;;
    --nvrtc-too) NVRTC_TOO=1; shift ;;
    *) echo "train_e2e: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -n "$BUNDLE" ]; then
  BIN="$BUNDLE/bin"
  export LD_LIBRARY_PATH="$ROOT/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
elif [ -n "$FAKE" ]; then
  BIN="$FAKE/bin"
else
  make -j"$(nproc)" all > /tmp/zinf-make.log 2>&1 || { tail -20 /tmp/zinf-make.log; echo "train_e2e: make failed; pack a bundle with tests/gpu/bundle.sh"; exit 2; }
  BIN=build/bin
fi
CUDA=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CUDA/lib64"
# NCCL from the toolkit or from pip's nvidia-nccl wheel
if ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2 && [ ! -e "$CUDA/lib64/libnccl.so.2" ]; then
  n=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$n" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$n"
fi
export ZINF_STDLIB="$ROOT/stdlib" ZINF_KERNEL_DIR="$ROOT/stdlib/kernels"
W=$(mktemp -d "${TMPDIR:-/tmp}/zinf-gpu.XXXXXX") # run_all.sh sets TMPDIR to a directory that takes O_DIRECT
trap 'rm -rf "$W"' EXIT
export ZINF_CACHE_DIR="$W/cache"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
arch=sm_${arch:-90}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
texts="$ROOT/README.md $ROOT/docs/*.md $ROOT/stdlib/kernels/*.cu"
[ -f /usr/share/common-licenses/GPL-3 ] && texts="/usr/share/common-licenses/GPL-3 $texts" # Debian's; not on every image
# shellcheck disable=SC2086
"$BIN/zinftok" $texts -o "$W/train.bin" > /dev/null || { echo "train_e2e: zinftok failed"; exit 2; }
RUNCUDA=""
if [ -n "$FAKE" ]; then
  RUNCUDA="env LD_LIBRARY_PATH=$ROOT/$FAKE/fakecuda:$LD_LIBRARY_PATH FAKECUDA_UNITS=$ROOT/$FAKE/fakecuda/units"
fi
fail=0
for where in cpu nvme; do
  sed "s#/tmp/zinf-nvme#$W/nvme#; s#arch = \"sm_90\"#arch = \"$arch\"#" examples/targets/h200.zl > "$W/t.zl"
  mkdir -p "$W/nvme"
  cat > "$W/$where.zl" <<ZL
import "$ROOT/examples/$MODEL"
$(grep -v '^#' "$W/t.zl")
plan { params = "$where"; optimizer = "$where"; grads = "cpu" }
ZL
  t0=$(date +%s)
  mkdir -p "$W/src"
  if ! "$BIN/zinfc" "$W/$where.zl" --kernels="$arch" --kernel-src="$W/src" -o "$W/$where.plan" > "$W/$where.zinfc" 2>&1; then
    echo "FAIL $where: zinfc"; tail -20 "$W/$where.zinfc"; fail=1; continue
  fi
  if [ -n "$FAKE" ]; then
    "$FAKE/fakecuda/fakecuda_prep" "$W/$where.plan" "$W/src" "$arch" "$FAKE/fakecuda/units" > "$W/prep.log" 2>&1 ||
      { cat "$W/prep.log"; fail=1; continue; }
  fi
  echo "== $MODEL, parameters and optimizer state in $where memory: compiled in $(( $(date +%s) - t0 )) s"
  "$BIN/zinfdump" "$W/$where.plan" | head -12
  if ! timeout 240 $RUNCUDA "$BIN/zinfrun" "$W/$where.plan" --data "$W/train.bin" --backend cuda --steps "$STEPS" --nvme "$W/nvme" \
       --losses "$W/$where.cuda" --trace "$W/$where.trace.json" > "$W/$where.out" 2>&1 < /dev/null; then
    echo "FAIL $where: zinfrun --backend cuda"; tail -30 "$W/$where.out"; fail=1; continue
  fi
  cat "$W/$where.out" | grep -v "^step" ; grep "^step" "$W/$where.out" | tail -3
done
# compare NAME: the first K losses of $W/NAME against the host's
compare() {
  python3 - "$W/cpu.host" "$W/$1" "$K" "$1" <<'PY'
import sys
ref = [float(l.split()[3]) for l in open(sys.argv[1])]
got = [float(l.split()[3]) for l in open(sys.argv[2])][: int(sys.argv[3])]
for i, (a, b) in enumerate(zip(ref, got)):
    print("step %d: host %.5f %s %.5f (rel %.2e)" % (i + 1, a, sys.argv[4], b, abs(a - b) / abs(a)))
ok = len(ref) == len(got) and all(abs(a - b) <= 3e-2 * abs(a) for a, b in zip(ref, got))
print(("losses agree within 3e-2 (%s)" % sys.argv[4]) if ok else "FAIL: the losses differ (%s)" % sys.argv[4])
sys.exit(0 if ok else 1)
PY
}
if [ -f "$W/cpu.cuda" ]; then
  echo "== the first $K steps on --backend host (same plan, same data)"
  if timeout 240 "$BIN/zinfrun" "$W/cpu.plan" --data "$W/train.bin" --backend host --steps "$K" --losses "$W/cpu.host" \
      --quiet > "$W/host.out" 2>&1 < /dev/null; then
    compare cpu.cuda || fail=1
    if [ "$NVRTC_TOO" = 1 ]; then
      echo "== the first $K steps with ZINF_CUBLASLT=0 (every GEMM its NVRTC kernel)"
      if timeout 240 env ZINF_CUBLASLT=0 $RUNCUDA "$BIN/zinfrun" "$W/cpu.plan" --data "$W/train.bin" --backend cuda --steps "$K" \
           --nvme "$W/nvme" --losses "$W/cpu.nvrtc" > "$W/nvrtc.out" 2>&1 < /dev/null; then
        grep "gemm:\|ms/step" "$W/nvrtc.out" | tail -2
        compare cpu.nvrtc || fail=1
      else
        echo "FAIL ZINF_CUBLASLT=0 run"; tail -10 "$W/nvrtc.out"; fail=1
      fi
    fi
  else
    echo "FAIL host backend"; tail -10 "$W/host.out"; fail=1
  fi
fi
# With OUT set (a folder of results to keep), keep the runs' logs and measured traces
# (open them with zinfdump's predicted trace side by side in Perfetto).
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then cp "$W"/*.out "$W"/*.trace.json* "$W"/*.zl "$OUT"/ 2>/dev/null; fi
[ $fail -eq 0 ] && echo "train_e2e: ok" || echo "train_e2e: FAILED"
exit $fail
