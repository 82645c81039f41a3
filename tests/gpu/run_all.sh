#!/bin/sh
# tests/gpu/run_all.sh [--fake BUILD] [--bundle DIR] [--out DIR]
#
# THE script for a machine with a GPU (docs/gpu-results.md): one call does
#   1. build   make -j all (or the binaries of a bundle packed by
#              tests/gpu/bundle.sh when make cannot run there);
#   2. probe   the GPU's figures (nvidia-smi: name, memory, compute
#              capability, driver, PCIe link, clocks, power limit) and this
#              machine's as zinfprobe measures them (a cuda target file:
#              PCIe, HBM, cuBLASLt GEMMs, launch latency, host memory, NVMe);
#              then gpt2-small planned on that target, 10 steps on --backend
#              cuda: measured against predicted ms per step, then again on the
#              target calibrated from that run (zinfdump --calibrate);
#   3. kernels tests/gpu/check_kernels.sh: every kernel family against the
#              host reference (Gemma's norm offset, attention scale and
#              soft-capping, softcap, sliding windows, YaRN rope and the
#              chunked loss among them), then GEMMs timed three ways (the
#              NVRTC gemm, cuBLASLt as zinfrun calls it, cuBLAS) and
#              attention (full, and with a sliding window);
#   3b. long   tests/e2e/cuda_long_fake.sh with CUDA_LONG_GPU=1: a Gemma-style (f32, bf16),
#              a windowed Mistral-style (YaRN rope), a chunked-loss and a
#              tiled-MLP micro model, 3 steps on --backend cuda against
#              --backend host;
#   3c. moe    tests/e2e/moe_cuda_emu.sh: the mixture-of-experts kernels on
#              the emulator against the host kernels, then a micro MoE model
#              trained on the GPU against --backend host; then
#              tests/e2e/moe_gen_cuda.sh: zinfgen's CUDA decoder on MoE
#              models against the host decoder's tokens;
#   4. train   tests/gpu/train_e2e.sh: gpt2-small with parameters and
#              optimizer state in CPU memory, then on NVMe, on --backend
#              cuda, the first steps against --backend host, and again with
#              ZINF_CUBLASLT=0 (the NVRTC GEMMs) against the host;
#   5. decode  zinfgen's KV-cache decoder on the GPU (--backend cuda
#              --decode kv) and the window decoder on the GPU, each against
#              the host backend's KV decoder: gpt2-small's greedy tokens and
#              the logits of each (tests/gpu/kv_compare.py), tokens/s;
#   6. big     a model that does not fit the GPU: llama2-7b cut to 8 layers
#              (1.88 billion parameters, 3.8 GB of bf16 weights) on a target
#              saying the GPU has 3 GiB, every parameter, gradient and Adam
#              state in CPU memory: a few steps, tokens/s and TFLOP/s; then
#              the first steps of the same plan on --backend host, losses
#              compared.
# Each step runs under `timeout` within one budget (RUN_ALL_BUDGET seconds,
# default 540: 9 minutes on one H200; RUN_ALL_STEPS="kernels decode" runs
# only the steps named, to rerun what failed; a step that would start with less
# than 20 s left is skipped), writes NN-step.log into the output directory,
# and adds its verdict and key figures to summary.txt there. The output
# directory is --out, else $OUT when set (a remote runner's folder of
# results), else build/gpu-results. Exit 0 when every step
# passed, 1 when one failed, 2 on a usage error.
#
# --fake BUILD rehearses the whole script without a GPU (tests/e2e/gpu_script.sh
# runs it in make test): the fake driver, NCCL and cuBLASLt of
# tests/fakecuda built in BUILD stand in, models are micro ones, and the
# kernel step only names what it would run (tests/e2e/gpu_kernels_emu.sh runs
# the harness on the emulator; RUN_ALL_KERNELS=1 builds it here too).
# probe, decode and big run through --part (under timeout), which shellcheck does not follow;
# $RUNCUDA is a command prefix whose words are meant to split
# shellcheck disable=SC2317,SC2086
set -u
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)
FAKE="" BUNDLE="" OUTDIR=${OUT:-} PART=""
while [ $# -gt 0 ]; do
  case "$1" in
    --part) PART=$2; shift 2 ;; # internal: one step's body, run under timeout by the script itself
    --fake) FAKE=$2; shift 2 ;;
    --bundle) BUNDLE=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    *) echo "run_all: unknown option $1 (usage: run_all.sh [--fake BUILD] [--bundle DIR] [--out DIR])" >&2; exit 2 ;;
  esac
done
# ---- step bodies that are more than one command (run as --part NAME, so
# that `timeout` can end them and everything they started) ----
probe() {
  if [ -n "$FAKE" ]; then
    echo "gpu: zinf fake GPU (host emulation), sm_90 (fake)"
  else
    nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm,clocks.max.mem,power.limit \
      --format=csv 2>&1 | sed 's/^/gpu: /' || return 1
    nvidia-smi 2>/dev/null | head -12
  fi
  nproc | sed 's/^/cpu cores: /'
  free -g | awk '/^Mem:/ {print "cpu memory: " $2 " GiB"}'
  df -h "$W" | awk 'NR == 2 {print "disk (" $6 "): " $4 " free"}'
  mkdir -p "$W/probe-nvme" "$W/probed-src"
  if [ -n "$FAKE" ]; then
    model="$ROOT/tests/e2e/models/gpt-micro.zl" arch=sm_90 steps=2 quick=--quick
  else
    model="$ROOT/examples/gpt2-small.zl" steps=10 quick=
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
    arch=sm_${arch:-90}
  fi
  $RUNCUDA "$BIN/zinfprobe" $quick --nvme "$W/probe-nvme" -o "$OUTDIR/probe-target.zl" || return 1
  sed 's/^/probe: /' "$OUTDIR/probe-target.zl"
  grep -q '^  backend = "cuda"$' "$OUTDIR/probe-target.zl" || { echo "probed: FAIL: zinfprobe wrote no cuda target"; return 1; }
  # the model planned on what was measured, run: how close is the prediction?
  "$BIN/zinfc" "$model" --target "$OUTDIR/probe-target.zl" --kernels="$arch" --kernel-src="$W/probed-src" \
    -o "$W/probed.plan" || return 1
  if [ -n "$FAKE" ]; then "$FAKE/fakecuda/fakecuda_prep" "$W/probed.plan" "$W/probed-src" "$arch" "$FAKE/fakecuda/units" > /dev/null || return 1; fi
  "$BIN/zinftok" README.md docs/*.md -o "$W/probed.bin" > /dev/null || return 1
  $RUNCUDA "$BIN/zinfrun" "$W/probed.plan" --data "$W/probed.bin" --backend cuda --steps "$steps" --nvme "$W/probe-nvme" \
    --quiet --trace "$W/probed.json" > "$W/probed.out" 2>&1 || { tail -20 "$W/probed.out"; return 1; }
  grep -v '^step' "$W/probed.out"
  ratio() { # PREFIX WHAT OUT
    awk -v m="$(basename "$model" .zl)" -v pre="$1" -v what="$2" '/^done:/ { for (i = 1; i <= NF; i++) {
          if ($i == "ms/step" && $(i+1) == "measured,") x = $(i-1); if ($i == "ms/step" && $(i+1) == "predicted") p = $(i-1) } }
      END { if (p > 0) printf "%s: %s on %s: %.1f ms/step measured, %.1f predicted, measured/predicted %.2f\n", pre, m, what, x, p, x / p
            else { printf "%s: FAIL: zinfrun printed no done line\n", pre; exit 1 } }' "$3"
  }
  ratio probed "the probed target" "$W/probed.out" || return 1
  "$BIN/zinfdump" "$W/probed.plan" --compare "$W/probed.json" | sed -n '1,30p' | sed 's/^/compare: /'
  # the run's own kernel and collective times as the target (zinfdump --calibrate), planned and run again
  mkdir -p "$W/calibrated-src"
  "$BIN/zinfdump" "$W/probed.plan" --compare "$W/probed.json" --calibrate "$OUTDIR/calibrated-target.zl" > "$W/cal.out" ||
    { echo "calibrated: FAIL: zinfdump --calibrate"; return 1; }
  tail -1 "$W/cal.out" | sed 's/^/calibrated: /'
  "$BIN/zinfc" "$model" --target "$OUTDIR/calibrated-target.zl" --kernels="$arch" --kernel-src="$W/calibrated-src" \
    -o "$W/calibrated.plan" || return 1
  if [ -n "$FAKE" ]; then "$FAKE/fakecuda/fakecuda_prep" "$W/calibrated.plan" "$W/calibrated-src" "$arch" "$FAKE/fakecuda/units" > /dev/null || return 1; fi
  $RUNCUDA "$BIN/zinfrun" "$W/calibrated.plan" --data "$W/probed.bin" --backend cuda --steps "$steps" --nvme "$W/probe-nvme" \
    --quiet > "$W/calibrated.out" 2>&1 || { tail -20 "$W/calibrated.out"; return 1; }
  ratio calibrated "the target calibrated from that run" "$W/calibrated.out"
}
decode() {
  if [ -n "$FAKE" ]; then
    model="$ROOT/tests/e2e/models/gpt-micro" gpu="1 GiB" arch=sm_90 new=12 prompt=5,17,30,2 tol=1e-5
  else
    model="$ROOT/examples/gpt2-small" gpu="139 GiB" new=48 prompt=464,2068,7586,21831,18045,625,262,16931,3290,13 tol=2e-2
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
    arch=sm_${arch:-90}
  fi
  mkdir -p "$W/dec-src"
  cat > "$W/dec.zl" <<ZL
import "$model"
target h200 { nodes = 1; gpus_per_node = 1
  gpu  { memory = $gpu; flops = 989 T; hbm = 4800 GB/s; pcie = 50 GB/s; arch = "$arch"; sms = 132 }
  cpu  { memory = 120 GiB; bandwidth = 100 GB/s; cores = 16 }
  net  { bandwidth = 100 GB/s; latency_us = 5 } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu" }
ZL
  "$BIN/zinfc" "$W/dec.zl" --kernels="$arch" --kernel-src="$W/dec-src" -o "$W/dec.plan" || return 1
  if [ -n "$FAKE" ]; then "$FAKE/fakecuda/fakecuda_prep" "$W/dec.plan" "$W/dec-src" "$arch" "$FAKE/fakecuda/units" > /dev/null || return 1; fi
  g="$W/dec.plan --prompt-ids $prompt --max-new $new --temperature 0"
  fail=0
  # the reference: the host backend's KV decoder (the seeded initialisation: no weights to carry)
  "$BIN/zinfgen" $g --backend host --decode kv --logits "$W/kh.logits" > "$W/kh.tok" 2> "$W/kh.err" ||
    { cat "$W/kh.err"; echo "decode: FAIL: zinfgen --backend host --decode kv"; return 1; }
  grep "^generated" "$W/kh.err" | sed 's/^/host kv: /'
  for d in kv window; do
    if ! $RUNCUDA "$BIN/zinfgen" $g --backend cuda --decode $d --logits "$W/c$d.logits" > "$W/c$d.tok" 2> "$W/c$d.err"; then
      cat "$W/c$d.err"; echo "decode: FAIL: zinfgen --backend cuda --decode $d"; fail=1; continue
    fi
    grep "^zinfgen: \|^generated" "$W/c$d.err" | sed "s/^/cuda $d: /"
    python3 "$ROOT/tests/gpu/kv_compare.py" "$tol" "host kv" "$W/kh.tok" "$W/kh.logits" "cuda $d" "$W/c$d.tok" "$W/c$d.logits" > "$W/c$d.cmp"
    rc=$?
    sed 's/^/decode: /' "$W/c$d.cmp"
    [ $rc -eq 0 ] || fail=1
  done
  echo "tokens: host kv [$(cat "$W/kh.tok")]"
  return $fail
}
big() {
  if [ -n "$FAKE" ]; then
    model="$ROOT/tests/e2e/models/gpt-micro" gpu="1 GiB" arch=sm_90 steps=2 hsteps=2 htime=60
  else
    sed 's/L = 32$/L = 8/; s/T = 4096/T = 2048/; s/^model llama2_7b/model llama_1b9/; /^hf "/,$d' examples/llama2-7b.zl > "$W/llama-1b9.zl"
    model="$W/llama-1b9" gpu="3 GiB" steps=5 hsteps=2 htime=120
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
    arch=sm_${arch:-90}
  fi
  mkdir -p "$W/nvme" "$W/src"
  cat > "$W/big.zl" <<ZL
import "$model"
target h200_3g { nodes = 1; gpus_per_node = 1
  gpu  { memory = $gpu; flops = 989 T; hbm = 4800 GB/s; pcie = 50 GB/s; arch = "$arch"; sms = 132 }
  cpu  { memory = 120 GiB; bandwidth = 100 GB/s; cores = 16 }
  nvme { paths = ["$W/nvme"]; read = 2 GB/s; write = 1 GB/s; capacity = 48 GiB }
  net  { bandwidth = 100 GB/s; latency_us = 5 } }
plan { params = "cpu"; optimizer = "cpu"; grads = "cpu" }
ZL
  "$BIN/zinfc" "$W/big.zl" --kernels="$arch" --kernel-src="$W/src" -o "$W/big.plan" || return 1
  if [ -n "$FAKE" ]; then "$FAKE/fakecuda/fakecuda_prep" "$W/big.plan" "$W/src" "$arch" "$FAKE/fakecuda/units" > /dev/null || return 1; fi
  "$BIN/zinfdump" "$W/big.plan" | head -14
  "$BIN/zinftok" README.md docs/*.md -o "$W/big.bin" > /dev/null || return 1
  $RUNCUDA "$BIN/zinfrun" "$W/big.plan" --data "$W/big.bin" --backend cuda --steps "$steps" --nvme "$W/nvme" \
    --losses "$W/big.cuda" --trace "$OUTDIR/big.trace.json" || return 1
  # against the host backend (all of this machine's cores; bf16: 3e-2 relative, as train_e2e.sh). One
  # host step at T = 2048 outlasts the budget, so the same model at T = 128 (its own plan, on the
  # same target) runs its first steps on both backends; the fake's model is small enough as it is
  short="$W/big.plan" scuda="$W/big.cuda"
  if [ -z "$FAKE" ]; then
    sed 's/T = 2048/T = 128/; s/^model llama_1b9/model llama_1b9_t128/' "$W/llama-1b9.zl" > "$W/llama-1b9-t128.zl"
    sed "s#^import .*#import \"$W/llama-1b9-t128\"#" "$W/big.zl" > "$W/short.zl"
    "$BIN/zinfc" "$W/short.zl" --kernels="$arch" --kernel-src="$W/src" -o "$W/short.plan" > /dev/null || return 1
    short="$W/short.plan" scuda="$W/short.cuda"
    $RUNCUDA "$BIN/zinfrun" "$short" --data "$W/big.bin" --backend cuda --steps "$hsteps" --nvme "$W/nvme" \
      --losses "$scuda" --quiet || return 1
  fi
  echo "host: the first $hsteps steps of $(basename "$short" .plan) on --backend host"
  timeout "$htime" "$BIN/zinfrun" "$short" --data "$W/big.bin" --backend host --steps "$hsteps" --nvme "$W/nvme" \
    --losses "$W/big.host" > "$W/big.hout" 2>&1 < /dev/null
  rc=$?
  grep -v '^step' "$W/big.hout" | tail -3 | sed 's/^/host: /'
  [ $rc -eq 0 ] || [ $rc -eq 124 ] || { echo "host: FAIL: zinfrun --backend host exit $rc"; return 1; }
  [ $rc -eq 124 ] && echo "host: stopped after $htime s"
  # whatever steps the time allowed, at least one
  awk 'NR == FNR { h[FNR] = $4; n = FNR; next }
       FNR <= n { d = $4 - h[FNR]; if (d < 0) d = -d; r = d / (h[FNR] < 0 ? -h[FNR] : h[FNR]); if (r > 3e-2) bad = 1
                  printf "big: step %d: host %.5f cuda %.5f (rel %.2e)\n", FNR, h[FNR], $4, r; k++ }
       END { if (!n || k < n) { print "big: FAIL: no host loss to compare"; exit 1 }
             if (bad) { print "big: FAIL: the losses differ"; exit 1 }
             printf "big: losses agree within 3e-2 (%d step%s on the host)\n", n, n == 1 ? "" : "s" }' "$W/big.host" "$scuda"
}
if [ -n "$PART" ]; then
  case "$PART" in probe | decode | big) "$PART"; exit $? ;; *) echo "run_all: no part $PART" >&2; exit 2 ;; esac
fi

[ -n "$OUTDIR" ] || { if [ -n "$FAKE" ]; then OUTDIR="$FAKE/gpu-results-fake"; else OUTDIR=build/gpu-results; fi; }
mkdir -p "$OUTDIR" || exit 2
case "$OUTDIR" in /*) ;; *) OUTDIR="$ROOT/$OUTDIR" ;; esac
SUM="$OUTDIR/summary.txt"
: > "$SUM"
# the scratch directory is also the "NVMe" (swap files, the probe's): the first
# of these whose file system takes O_DIRECT (a tmpfs /tmp does not)
TMPDIR=""
for d in /tmp /var/tmp "$ROOT/build"; do
  mkdir -p "$d" 2> /dev/null && dd if=/dev/zero of="$d/.zinf-odirect.$$" bs=4096 count=1 oflag=direct 2> /dev/null &&
    rm -f "$d/.zinf-odirect.$$" && TMPDIR=$d && break
  rm -f "$d/.zinf-odirect.$$"
done
[ -n "$TMPDIR" ] || { echo "run_all: no directory here takes O_DIRECT writes (tried /tmp, /var/tmp, build)" >&2; exit 2; }
export TMPDIR
W=$(mktemp -d "$TMPDIR/zinf-runall.XXXXXX") || exit 2
trap 'rm -rf "$W"' EXIT
START=$(date +%s)
BUDGET=${RUN_ALL_BUDGET:-540}
say() { echo "$*" | tee -a "$SUM"; }
say "run_all: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$([ -n "$FAKE" ] && echo ', REHEARSAL on the fake driver')"
failed=0 nstep=0
# step NAME SECONDS CMD...: CMD under timeout (at most what the budget has left), its output in NN-NAME.log
step() {
  name=$1 limit=$2
  shift 2
  nstep=$((nstep + 1))
  LOG="$OUTDIR/$(printf %02d $nstep)-$name.log"
  # RUN_ALL_STEPS="kernels decode": only those (a rerun of what failed)
  case " build ${RUN_ALL_STEPS:-$name} " in *" $name "*) ;; *) say "step $name: not run (RUN_ALL_STEPS)"; return 1 ;; esac
  left=$((START + BUDGET - $(date +%s) - 5))
  if [ "$left" -lt 20 ]; then
    say "step $name: SKIPPED (the ${BUDGET} s budget is spent)"
    failed=$((failed + 1))
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s)
  timeout "$limit" "$@" > "$LOG" 2>&1 < /dev/null
  rc=$?
  dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then say "step $name: ok (${dt} s)"; return 0; fi
  if [ $rc -eq 124 ]; then say "step $name: FAIL: timed out after ${limit} s (log: $(basename "$LOG"))"
  else say "step $name: FAIL: exit $rc after ${dt} s (log: $(basename "$LOG"))"; fi
  tail -5 "$LOG" | sed 's/^/    /' | tee -a "$SUM"
  failed=$((failed + 1))
  return 1
}
# figures NAME PATTERN: the lines of the last step's log that match, into the summary
figures() { [ -f "$LOG" ] && grep -E "$1" "$LOG" | sed 's/^/    /' | tee -a "$SUM"; }

# ---- 1. build ----
if [ -n "$FAKE" ]; then
  BIN="$FAKE/bin"
  step build 120 sh -c 'sh tests/fakecuda/build.sh "$0" && ls -l "$0/fakecuda/"*.so*' "$FAKE" || { say "run_all: FAILED: no fakes"; exit 1; }
elif [ -n "$BUNDLE" ]; then
  BIN="$BUNDLE/bin"
  export LD_LIBRARY_PATH="$ROOT/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "step build: the bundle $BUNDLE"
else
  BIN=build/bin
  if ! step build 240 make -j"$(nproc)" all; then
    if [ -x .gpubundle/bin/zinfrun ]; then
      BUNDLE=.gpubundle BIN=.gpubundle/bin
      export LD_LIBRARY_PATH="$ROOT/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      say "    using the bundle .gpubundle instead"
    else
      say "run_all: FAILED: make failed and there is no bundle (tests/gpu/bundle.sh packs one)"; exit 1
    fi
  fi
fi
CUDA=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CUDA/lib64"
# NCCL from the toolkit or from pip's nvidia-nccl wheel (the probe's collectives, zinfrun's)
if [ -z "$FAKE" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2 && [ ! -e "$CUDA/lib64/libnccl.so.2" ]; then
  n=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$n" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$n"
fi
# the binaries of a bundle were built elsewhere: the stdlib and kernels are this checkout's
export ZINF_STDLIB="$ROOT/stdlib" ZINF_KERNEL_DIR="$ROOT/stdlib/kernels"
export ZINF_CACHE_DIR="$W/nvrtc-cache"
# the rehearsal keeps NVRTC's cache between runs, as the fake-driver e2e scripts do (tests/fakecuda/env.sh)
[ -n "$FAKE" ] && ZINF_CACHE_DIR="$ROOT/$FAKE/fakecuda/nvrtc-cache"
RUNCUDA=""
export BIN FAKE W OUTDIR RUNCUDA ROOT
[ -n "$FAKE" ] && RUNCUDA="env LD_LIBRARY_PATH=$ROOT/$FAKE/fakecuda:$LD_LIBRARY_PATH FAKECUDA_UNITS=$ROOT/$FAKE/fakecuda/units"

# ---- 2. probe ----
step probe 150 sh "$ROOT/tests/gpu/run_all.sh" --out "$OUTDIR" ${FAKE:+--fake "$FAKE"} --part probe &&
  figures "^(gpu|cpu|disk|probe: [^#]*(flops|memory|read|write|bandwidth)|  fit: |hbm |launch: |  peak bf16|  ring fit|probed: |calibrated: )"

# ---- 3. kernels ----
if [ -n "$FAKE" ] && [ "${RUN_ALL_KERNELS:-0}" != 1 ]; then
  say "step kernels: rehearsed by name only (fake): sh tests/gpu/check_kernels.sh (tests/e2e/gpu_kernels_emu.sh runs it on the emulator)"
elif [ -n "$FAKE" ]; then
  # a dry run (no GPU) exits 3 when it went through
  step kernels 300 env BUILD="$FAKE" sh -c 'sh tests/gpu/check_kernels.sh --dry --only "linear 37x7x33"; [ $? -eq 3 ]'
else
  step kernels 150 env BUILD=build sh tests/gpu/check_kernels.sh
  figures "cases, .* failed|FAIL|^cuBLASLt|^gemm |^attention|^timing"
fi

# ---- 3b. long: Gemma's attributes, sliding windows, YaRN, the chunked loss and the tiled MLP, end to end ----
if [ -n "$FAKE" ]; then
  say "step long: rehearsed by name only (fake): CUDA_LONG_GPU=1 sh tests/e2e/cuda_long_fake.sh (which runs on the fakes in the e2e suite)"
else
  step long 240 env CUDA_LONG_GPU=1 sh tests/e2e/cuda_long_fake.sh "${BUNDLE:-build}"
  figures "^ok |^FAIL|cuda_long_fake"
fi

# ---- 3c. moe: the mixture-of-experts kernels against the host's, and a MoE model trained on the GPU ----
if [ -n "$FAKE" ]; then
  say "step moe: rehearsed by name only (fake): GPU=1 sh tests/e2e/moe_cuda_emu.sh build (tests/e2e/moe_cuda_emu.sh runs it on the fakes)"
  say "step moegen: rehearsed by name only (fake): GPU=1 sh tests/e2e/moe_gen_cuda.sh build (tests/e2e/moe_gen_cuda.sh runs it on the fakes)"
elif [ -n "$BUNDLE" ]; then
  say "step moe: not run (a bundle has no build tree for tests/gpu/check_moe.c)"
else
  march=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  step moe 180 env GPU=1 MOE_ARCH="sm_${march:-90}" sh tests/e2e/moe_cuda_emu.sh build
  figures "cases, .* failed|FAIL|^moe-micro step|^moe_cuda_emu"
  step moegen 90 env GPU=1 MOE_ARCH="sm_${march:-90}" sh tests/e2e/moe_gen_cuda.sh build
  figures "^ok |^FAIL"
fi

# ---- 4. train: gpt2-small offloaded, against the host, both GEMM paths ----
if [ -n "$FAKE" ]; then
  set -- --fake "$FAKE" --model ../tests/e2e/models/gpt-micro --steps 4 --compare 3
else
  set -- --steps 10 --compare 2
  [ -n "$BUNDLE" ] && set -- "$@" --bundle "$BUNDLE"
fi
mkdir -p "$OUTDIR/train"
step train 200 env OUT="$OUTDIR/train" sh tests/gpu/train_e2e.sh --nvrtc-too "$@"
figures "^== |^gpu: |gemm:|^done|TFLOP/s per rank|losses agree|^FAIL|^train_e2e"

# ---- 5. decode: zinfgen's KV-cache decoder on the GPU against the host's ----
step decode 90 sh "$ROOT/tests/gpu/run_all.sh" --out "$OUTDIR" ${FAKE:+--fake "$FAKE"} --part decode
figures "^(host kv|cuda kv|cuda window|decode): "

# ---- 6. big: a model the GPU cannot hold, from CPU memory, against the host ----
step big 300 sh "$ROOT/tests/gpu/run_all.sh" --out "$OUTDIR" ${FAKE:+--fake "$FAKE"} --part big
figures "^parameters|^  gpu  |gemm:|^step|^done|TFLOP/s per rank|queue busy|gpu memory:|^big: |^host: "

dt=$(($(date +%s) - START))
if [ $failed -eq 0 ]; then say "run_all: ok ($nstep steps, ${dt} s; logs and summary in $OUTDIR)"; exit 0; fi
say "run_all: FAILED ($failed of $nstep steps, ${dt} s; logs and summary in $OUTDIR)"
exit 1
