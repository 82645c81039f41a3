#!/bin/sh
# The CUDA backend's nvme queue pipeline (runtime/exec/exec_nvme.c rt_nvme_pipe,
# docs/runtime.md "NVMe transfers") on one rank of the fake driver
# (tests/fakecuda), also run under AddressSanitizer (san_*): gpt-micro with
# parameters, optimizer state and gradients on NVMe, so NVMe writes read
# pinned buffers that GPU copies fill and NVMe reads overwrite ones that GPU
# copies read (the pipeline must wait for that GPU work: the fake's streams
# start each operation after a random delay, so a transfer started too
# early moves stale bytes and the losses change). The pipelined run keeps
# transfers in flight together (its trace) and gives the losses of
# ZINF_NVME_NOBATCH=1 (one transfer at a time) bit for bit; a transfer that
# fails mid-run (the swap file truncated under it) ends the run with the
# engine's line and exit 1, without hanging and (under the sanitizers)
# without leaking.
# $1: the build directory.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir cudanvme
sh tests/fakecuda/build.sh "$B" > "$W/build.log" 2>&1 || { cat "$W/build.log"; echo "san_cuda_nvme: the fake driver did not build"; exit 1; }
export ZINF_CACHE_DIR="$B/fakecuda/nvrtc-cache"
cat > "$W/m.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro"
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  nvme { paths = ["$W"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "nvme"; optimizer = "nvme"; grads = "nvme"; whole_below = 1000 }
ZL
mkdir -p "$W/src" "$W/nvme"
"$B/bin/zinfc" "$W/m.zl" --kernels=sm_90 --kernel-src="$W/src" -o "$W/m.plan" > "$W/zinfc.log" 2>&1 || { cat "$W/zinfc.log"; exit 1; }
"$B/fakecuda/fakecuda_prep" "$W/m.plan" "$W/src" sm_90 "$B/fakecuda/units" > "$W/prep.log" 2>&1 || { cat "$W/prep.log"; exit 1; }
"$B/bin/zinftok" "$ROOT/README.md" "$ROOT/docs/runtime.md" -o "$W/train.bin" > /dev/null || exit 1
run() {
  LD_LIBRARY_PATH="$B/fakecuda" FAKECUDA_UNITS="$B/fakecuda/units" FAKECUDA_JITTER_US=200 timeout 120 \
    "$B/bin/zinfrun" "$W/m.plan" --data "$W/train.bin" --backend cuda --nvme "$W/nvme" "$@"
}
fail=0
run --steps 3 --losses "$W/pipe.loss" --trace "$W/pipe.json" > "$W/pipe.out" 2>&1 || { cat "$W/pipe.out"; echo "FAIL pipelined run"; exit 1; }
ZINF_NVME_NOBATCH=1 run --steps 3 --losses "$W/one.loss" > "$W/one.out" 2>&1 || { cat "$W/one.out"; echo "FAIL ZINF_NVME_NOBATCH=1 run"; exit 1; }
if cmp -s "$W/pipe.loss" "$W/one.loss" && [ "$(wc -l < "$W/pipe.loss")" -eq 3 ]; then
  echo "ok   pipelined = one at a time, bit for bit: $(awk '{printf "%s ", $4}' "$W/pipe.loss")"
else
  echo "FAIL the pipelined losses differ from ZINF_NVME_NOBATCH=1's:"; paste "$W/pipe.loss" "$W/one.loss"; fail=1
fi
# the most NVMe transfers in flight at once in the trace's step (ends exclusive)
peak=$(python3 - "$W/pipe.json" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["cat"] == "nvme"]
marks = sorted([(e["ts"], 1) for e in ev] + [(e["ts"] + e["dur"], -1) for e in ev], key=lambda m: (m[0], m[1]))
n = peak = 0
for _, d in marks:
    n += d
    peak = max(peak, n)
print(peak)
PY
)
if [ "${peak:-0}" -ge 2 ]; then echo "ok   up to $peak NVMe transfers in flight at once (trace)"
else echo "FAIL the CUDA backend's NVMe transfers ran one at a time (most in flight at once: ${peak:-?})"; fail=1; fi
# A transfer that fails: the swap file cut to nothing from step 2 on, until the run ends.
run --steps 100000 > "$W/cut.out" 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null && ! grep -qs "^step  *2/" "$W/cut.out"; do sleep 0.1; done
while kill -0 $pid 2>/dev/null; do truncate -s 0 "$W/nvme/zinf-rank0.swap" 2>/dev/null; sleep 0.05; done
wait $pid
rc=$?
pat="^zinfrun: rank 0, step [0-9]*: nvme: read of [0-9]* bytes at offset [0-9]* in $W/nvme/zinf-rank0.swap failed: Input/output error (unexpected end of file after [0-9]* of [0-9]* bytes)\$"
if [ $rc -eq 1 ] && grep -q "$pat" "$W/cut.out"; then echo "ok   a failing transfer (exit 1): $(grep "$pat" "$W/cut.out")"
else tail -5 "$W/cut.out"; echo "FAIL a failing transfer gave exit $rc (124: it hung), expected 1 and the engine's line"; fail=1; fi
[ $fail -eq 0 ] && echo "san_cuda_nvme: ok"
exit $fail
