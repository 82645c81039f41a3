#!/bin/sh
# zinfrun on bad input: each case must end with a clear message (checked by
# a fragment of it) and a non-zero exit, never a crash, a hang or a lost
# checkpoint.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
# some cases leave read-only directories behind
E2E_AT_EXIT='chmod -R u+w "$E2E_DIR" 2>/dev/null'
e2e_workdir errors
e2e_mpi
fail=0
expect() { # name want-fragment command...
  name=$1; want=$2; shift 2
  timeout 120 "$@" > "$W/out" 2>&1 < /dev/null
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -ge 128 ] && [ $rc -ne 137 ]; then
    echo "FAIL $name: exit $rc (0 = accepted, 124 = hang, >=128 = crash)"; tail -5 "$W/out"; fail=1; return
  fi
  if ! grep -q -- "$want" "$W/out"; then
    echo "FAIL $name: exit $rc but the message lacks '$want':"; tail -5 "$W/out"; fail=1; return
  fi
  echo "ok   $name (exit $rc): $(grep -m1 -- "$want" "$W/out" | cut -c1-150)"
}
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
cat > "$W/m.zl" <<ZL
import "$ROOT/examples/gpt2-tiny"
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
plan { params = "nvme"; optimizer = "nvme"; whole_below = 1000 }
ZL
sed 's/ranks = 1/ranks = 2/' "$W/m.zl" > "$W/m2.zl"
"$B/bin/zinfc" "$W/m.zl" -o "$W/m.plan" > /dev/null || exit 1
"$B/bin/zinfc" "$W/m2.zl" -o "$W/m2.plan" > /dev/null || exit 1
mkdir -p "$W/nvme"
RUN="$B/bin/zinfrun"

# plans
size=$(wc -c < "$W/m.plan")
head -c $((size / 2)) "$W/m.plan" > "$W/trunc.plan"
expect "truncated plan" "trunc.plan" "$RUN" "$W/trunc.plan" --data "$W/train.bin" --steps 1 --nvme "$W/nvme"
cp "$W/m.plan" "$W/flip.plan"
printf '\377' | dd of="$W/flip.plan" bs=1 seek=$((size / 3)) conv=notrunc 2>/dev/null
expect "corrupted plan" "checksum" "$RUN" "$W/flip.plan" --data "$W/train.bin" --steps 1 --nvme "$W/nvme"
echo "not a plan at all" > "$W/text.plan"
expect "not a plan" "text.plan" "$RUN" "$W/text.plan" --data "$W/train.bin" --steps 1
expect "missing plan" "nope.plan" "$RUN" "$W/nope.plan" --data "$W/train.bin" --steps 1
expect "plan for 2 ranks run on 1" "mpirun -np 2" "$RUN" "$W/m2.plan" --data "$W/train.bin" --steps 1 --nvme "$W/nvme"

# data
expect "missing data file" "nodata.bin" "$RUN" "$W/m.plan" --data "$W/nodata.bin" --steps 1 --nvme "$W/nvme"
head -c 2000 "$W/train.bin" > "$W/short.bin"
expect "truncated data file" "truncated" "$RUN" "$W/m.plan" --data "$W/short.bin" --steps 1 --nvme "$W/nvme"
"$B/bin/zinftok" "$ROOT/examples/gpt2-tiny.zl" -o "$W/tiny.bin" > /dev/null
head -c 1124 "$W/train.bin" > "$W/few.bin"
python3 - "$W/few.bin" <<'PY'
import struct, sys
p = sys.argv[1]
d = bytearray(open(p, 'rb').read())
d[8:12] = struct.pack('<i', (len(d) - 1024) // 2)
open(p, 'wb').write(d)
PY
expect "data too short for a batch" "too short for one window" "$RUN" "$W/m.plan" --data "$W/few.bin" --steps 1 --nvme "$W/nvme"
expect "text as data" "bad magic" "$RUN" "$W/m.plan" --data "$ROOT/README.md" --steps 1 --nvme "$W/nvme"

# usage
expect "unknown option" "did you mean '--steps'" "$RUN" "$W/m.plan" --stpes 3
expect "cuda backend without a GPU" "--backend host" "$RUN" "$W/m.plan" --data "$W/train.bin" --backend cuda
for stub in /usr/local/cuda/lib64/stubs "${CUDA_HOME:-/nonexistent}/lib64/stubs"; do
  if [ -f "$stub/libcuda.so" ]; then
    expect "cuda backend on the toolkit's stub driver" "stub library" env LD_LIBRARY_PATH="$stub" "$RUN" "$W/m.plan" --data "$W/train.bin" --backend cuda
    break
  fi
done

# NVMe: missing, a file in place of the directory, full
expect "missing nvme dir" "$W/gone" "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 1 --nvme "$W/gone"
touch "$W/afile"
expect "nvme path is a file" "not a directory" "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 1 --nvme "$W/afile"
# a good checkpoint first, then a run that fills the disk (file size limit) must keep it loadable
"$RUN" "$W/m.plan" --data "$W/train.bin" --steps 2 --nvme "$W/nvme" --checkpoint-dir "$W/ckpt" --quiet > /dev/null 2>&1 || { echo "FAIL: the good run"; fail=1; }
mkdir -p "$W/nvme2"
expect "full disk (file size limit)" "File too large" sh -c "ulimit -f 256; exec '$RUN' '$W/m.plan' --data '$W/train.bin' --steps 3 --nvme '$W/nvme2' --checkpoint-dir '$W/ckpt' --resume"
if "$RUN" "$W/m.plan" --data "$W/train.bin" --steps 3 --nvme "$W/nvme" --checkpoint-dir "$W/ckpt" --resume > "$W/out" 2>&1 && grep -q "resume: from step 2" "$W/out"; then
  echo "ok   the checkpoint before the failure still loads"
else
  echo "FAIL: the checkpoint did not survive"; cat "$W/out"; fail=1
fi

# a rank that dies: the other must end within the comm timeout, not hang
start=$(date +%s)
ZINF_COMM_TIMEOUT=10 timeout 90 mpirun -np 2 --oversubscribe -x ZINF_COMM_TIMEOUT sh -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then ( sleep 1; kill -9 $$ ) & fi; exec "$0" "$@"' \
  "$RUN" "$W/m2.plan" --data "$W/train.bin" --steps 1000 --nvme "$W/nvme" --quiet > "$W/out" 2>&1 < /dev/null
rc=$?
end=$(date +%s)
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "FAIL dead rank: exit $rc"; tail -5 "$W/out"; fail=1
else echo "ok   dead rank: the job ended with exit $rc after $((end - start)) s"; fi
exit $fail
