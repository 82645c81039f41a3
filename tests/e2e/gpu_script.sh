#!/bin/sh
# The GPU machine's one script (tests/gpu/run_all.sh) rehearsed here, so it
# does not rot on machines without a GPU, where make test runs: every step (build,
# probe and a run calibrated from the probed one, kernels by name, gpt-micro with CPU and NVMe offload on --backend
# cuda against --backend host with cuBLASLt and with ZINF_CUBLASLT=0, a
# model from CPU memory with its TFLOP/s against the host's losses, zinfgen's KV
# decoder and window on the GPU against the host's KV decoder) on the fake driver, NCCL and
# cuBLASLt of tests/fakecuda, its logs and summary in one directory.
# $1: the build directory.
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir gpuscript; O=$W
out=$(sh tests/gpu/run_all.sh --fake "$B" --out "$O" 2>&1)
rc=$?
echo "$out" | grep -E "^(step |run_all)|losses agree|gemm:"
[ $rc -eq 0 ] || { echo "gpu_script: run_all.sh --fake failed (exit $rc)"; echo "$out" | tail -20; exit 1; }
for want in "losses agree within 3e-2 (cpu.cuda)" "losses agree within 3e-2 (cpu.nvrtc)" "gemm: cuBLASLt (libcublasLt.so.13" \
            "TFLOP/s per rank achieved" "gpu memory:" "queue busy per step" "step probe: ok" "step big: ok" "run_all: ok" \
            "decode: ok: cuda kv = host kv on 12 of 12 tokens" "decode: ok: cuda window = host kv on 12 of 12 tokens" \
            "big: losses agree within 3e-2 (2 steps on the host)" \
            "calibrated: gpt-micro on the target calibrated from that run: "; do
  grep -qF "$want" "$O/summary.txt" || { echo "gpu_script: no '$want' in the summary"; cat "$O/summary.txt"; exit 1; }
done
for f in 01-build.log 02-probe.log 03-train.log 04-decode.log 05-big.log probe-target.zl calibrated-target.zl big.trace.json train/cpu.out train/nvrtc.out; do
  [ -s "$O/$f" ] || { echo "gpu_script: $f missing from the output directory"; ls -R "$O"; exit 1; }
done
echo "gpu_script: ok"
