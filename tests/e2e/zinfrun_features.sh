#!/bin/sh
# zinfrun's command line on a real model (gpt2-tiny, 2 ranks, parameters
# and optimizer state on NVMe): 6 steps straight equal 3 steps, a
# checkpoint, and 3 resumed steps, bit for bit; --trace writes a Chrome
# trace of the measured step; --export writes safetensors that the
# safetensors Python package loads, with every parameter's full shape and
# the values of a fresh export equal across two runs.
B=${1:-build}
. tests/pyenv.sh
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir features
e2e_mpi
RUN="timeout 300 mpirun -np 2 --oversubscribe $B/bin/zinfrun"
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
"$B/bin/zinfc" examples/gpt2-tiny-offload.zl -o "$W/tiny.plan" > /dev/null || { echo "FAIL: zinfc"; exit 1; }
mkdir -p "$W/nvme"
fail=0
$RUN "$W/tiny.plan" --data "$W/train.bin" --steps 6 --nvme "$W/nvme" --losses "$W/straight" --quiet \
    --trace "$W/run.json" --export "$W/a.safetensors" < /dev/null > "$W/out" 2>&1 || { echo "FAIL: straight run"; cat "$W/out"; exit 1; }
$RUN "$W/tiny.plan" --data "$W/train.bin" --steps 3 --nvme "$W/nvme" --losses "$W/resumed" --quiet \
    --checkpoint-dir "$W/ckpt" < /dev/null > "$W/out" 2>&1 || { echo "FAIL: first half"; cat "$W/out"; exit 1; }
$RUN "$W/tiny.plan" --data "$W/train.bin" --steps 6 --nvme "$W/nvme" --losses "$W/resumed" \
    --checkpoint-dir "$W/ckpt" --resume --export "$W/b.safetensors" < /dev/null > "$W/out" 2>&1 || { echo "FAIL: resumed half"; cat "$W/out"; exit 1; }
grep -q "resume: from step 3" "$W/out" || { echo "FAIL: did not resume from step 3"; cat "$W/out"; fail=1; }
if cmp -s "$W/straight" "$W/resumed"; then echo "ok   resume: 3 + 3 steps equal 6 straight, bit for bit"
else echo "FAIL: resumed losses differ"; paste "$W/straight" "$W/resumed"; fail=1; fi
"${ZINF_PY:-python3}" - "$W" <<'PY' || fail=1
import json, sys
w = sys.argv[1]
t = json.load(open(w + "/run.json"))
ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
queues = {e["tid"] for e in ev}
assert len(ev) > 100 and len(queues) >= 3, (len(ev), queues)
assert all(e["dur"] >= 0 for e in ev)
print("ok   trace: %d measured instructions on %d queues" % (len(ev), len(queues)))
try:
    from safetensors.numpy import load_file
except ImportError:
    print("skip safetensors check: the safetensors package is not installed")
    sys.exit(0)
a = load_file(w + "/a.safetensors"); b = load_file(w + "/b.safetensors")
assert set(a) == set(b) and len(a) == 52, len(a)
assert a["wte"].shape == (256, 128) and a["block.0.mlp.w1"].shape == (128, 512), a["wte"].shape
import numpy as np
assert all(np.array_equal(a[k], b[k]) for k in a), "resumed export differs from the straight one"
print("ok   export: %d tensors load with safetensors; resumed and straight runs export the same values" % len(a))
PY

# An ordinary user's locked-memory limit refuses io_uring buffer
# registration: the run goes on with plain O_DIRECT reads and writes and
# says so (as root, checked as user nobody with ulimit -l 64).
if [ "$(id -u)" = 0 ] && command -v su > /dev/null && su nobody -s /bin/sh -c "test -x '$B/bin/zinfrun'" 2> /dev/null; then
  U=$(mktemp -d /tmp/zinf-memlock.XXXXXX) && chmod 777 "$U"
  cat > "$U/m.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro"
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$U"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
plan { params = "nvme"; optimizer = "nvme"; grads = "cpu" }
ZL
  "$B/bin/zinfc" "$U/m.zl" -o "$U/m.plan" > /dev/null && cp "$W/train.bin" "$U/" && chmod 644 "$U"/*
  out=$(su nobody -s /bin/sh -c "ulimit -l 64; '$B/bin/zinfrun' '$U/m.plan' --data '$U/train.bin' --nvme '$U' --steps 1" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && echo "$out" | grep -q "pinned arena not registered: .*ulimit -l"; then echo "ok   memlock limit: plain O_DIRECT I/O, said so"
  else echo "FAIL memlock limit: exit $rc"; echo "$out" | tail -5; fail=1; fi
  rm -rf "$U"
else
  echo "skip memlock limit: needs root, su and a build user nobody can run"
fi
exit $fail
