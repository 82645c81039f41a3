#!/bin/sh
# The two GEMM paths of zinfrun's CUDA backend, without a GPU: the fake
# driver with the fake cuBLASLt (tests/fakecuda/fake_cublaslt.c, plain
# loops on the host) and, with ZINF_CUBLASLT=0, the plan's NVRTC gemm
# kernels on the host emulator; each against the host backend on the same
# plan (gpt-micro, f32, every state on the GPU, the MLP weights in 2 tiles:
# tile gemms address column slices at byte offsets), losses and gradient
# norms within 2e-4 relative. Then: a version-3 plan (the same file before
# the gemms section) still runs, on its launches; a cuBLASLt that does not
# start is not an error (the launches run and the startup line says why);
# a shape the heuristic has no algorithm for runs its launch.
# $1: the build directory.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir cublaslt
sh tests/fakecuda/build.sh "$B" > "$W/build.log" 2>&1 || { cat "$W/build.log"; echo "cublaslt_fake: the fakes did not build"; exit 1; }
FAKE="$ROOT/$B/fakecuda"
case "$B" in /*) FAKE="$B/fakecuda" ;; esac
UNITS="$FAKE/units"
mkdir -p "$UNITS"
export ZINF_CACHE_DIR="$FAKE/nvrtc-cache"
STEPS=2
fail=0
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
cat > "$W/m.zl" <<ZL
import "$ROOT/tests/e2e/models/gpt-micro"
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  nvme { paths = ["$W"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu"; whole_below = 1000; tiles "*.mlp.w*" = 2 }
ZL
mkdir -p "$W/src"
"$B/bin/zinfc" "$W/m.zl" --kernels=sm_90 --kernel-src="$W/src" -o "$W/m.plan" > "$W/zinfc.out" 2>&1 ||
  { cat "$W/zinfc.out"; echo "FAIL zinfc"; exit 1; }
"$FAKE/fakecuda_prep" "$W/m.plan" "$W/src" sm_90 "$UNITS" > "$W/prep.out" 2>&1 || { cat "$W/prep.out"; echo "FAIL fakecuda_prep"; exit 1; }

# the plan describes every gemm; zinfdump lists the choice per gemm
"$B/bin/zinfdump" "$W/m.plan" --kernels > "$W/k" 2>&1
ng=$(grep -c "^ *[0-9]*: zk_gemm " "$W/k")
if grep -q "^$ng gemms: $ng through cuBLASLt when zinfrun has it (else their launch), 0 NVRTC only$" "$W/k" &&
   grep -q "^  launch [0-9]* (op [0-9]*): cublaslt f32 NN m=32 n=192 k=64 .* = .*\*block.0.attn.wqkv + block.0.attn.bqkv (overwrite), cuBLASLt workspace 4194304 B$" "$W/k"; then
  echo "ok   zinfdump --kernels: $ng gemms, each with its cuBLASLt descriptor"
else echo "FAIL zinfdump's gemm lines ($ng zk_gemm launches)"; grep -A3 "gemms" "$W/k" | head -5; fail=1; fi

# the same file as format version 3: no gemms section (the last), header patched,
# packed sections unpacked
python3 - "$W/m.plan" "$W/v3.plan" <<'PY' || { echo "FAIL writing the version-3 plan"; fail=1; }
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
def fnv(d):
    h = 0xcbf29ce484222325
    for x in d: h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
    return h
# format 5 packs big sections (docs/plan-format.md): a u64 length, a deflate
# stream; the operands, schedule and deps tables stored as columns of
# differences. Version 3 has only raw sections: unpack them.
widths = {8: [4, 1, 8, 8], 9: [1, 1, 4, 4, 4, 4, 4, 4, 4, 8, 8], 10: [4]}
def unpack(sid, d):
    raw = zlib.decompress(d[8:])
    assert len(raw) == struct.unpack_from("<Q", d, 0)[0]
    w = widths.get(sid)
    if not w or len(raw) < 4: return raw
    n = struct.unpack_from("<I", raw, 0)[0]; rec = sum(w)
    if (len(raw) - 4) != n * rec: return raw
    out = bytearray(raw[:4] + bytes(n * rec)); col = 4; off = 0
    for fw in w:
        prev = 0; mask = (1 << (8 * fw)) - 1
        for i in range(n):
            prev = (prev + int.from_bytes(raw[col + i * fw: col + (i + 1) * fw], "little")) & mask
            out[4 + i * rec + off: 4 + i * rec + off + fw] = prev.to_bytes(fw, "little")
        col += n * fw; off += fw
    return bytes(out)
def ops_v6(d):  # version 7 added two float attributes and the list attributes to each op
    n = struct.unpack_from("<I", d, 0)[0]; out = bytearray(d[:4]); p = 4
    for _ in range(n):
        nin, nout = d[p + 2], d[p + 3]; head = 4 + 4 * (nin + nout) + 8 * 6 + 8 * 6
        out += d[p:p + head]; p += head + 16
        slen = struct.unpack_from("<Q", d, p + 12)[0]; tail = 12 + 8 + slen
        out += d[p:p + tail]; p += tail
        p += 4 + 8 * struct.unpack_from("<I", d, p)[0]
    assert p == len(d)
    return bytes(out)
ver, nsec = struct.unpack_from("<II", b, 8)
assert (ver, nsec) == (7, 18), (ver, nsec)
pos, body = 24, b""
for s in range(17):
    sid, form, plen = struct.unpack_from("<IIQ", b, pos)
    d = b[pos + 24: pos + 24 + plen]
    if form == 1: d = unpack(sid, d)
    if sid == 0: d = d[:-8]  # version 6 added the speculative optimizer's two ranges to meta
    if sid == 4: d = ops_v6(d)
    body += struct.pack("<IIQQ", sid, 0, len(d), fnv(d)) + d
    pos += 24 + plen
hdr = bytearray(b[:24]); struct.pack_into("<II", hdr, 8, 3, 17); struct.pack_into("<Q", hdr, 16, fnv(hdr[:16]))
open(sys.argv[2], "wb").write(bytes(hdr) + body)
PY

"$B/bin/zinfrun" "$W/m.plan" --data "$W/train.bin" --backend host --steps $STEPS --losses "$W/host" --quiet > "$W/host.out" 2>&1 ||
  { tail -5 "$W/host.out"; echo "FAIL zinfrun --backend host"; exit 1; }
# run NAME PLAN [VAR=value...]: the CUDA backend on the fakes; its cuBLASLt calls in $W/NAME.lt
run() {
  name=$1; plan=$2; shift 2
  if env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUBLASLT_LOG="$W/$name.lt" \
       FAKECUDA_JITTER_US=50 "$@" timeout 300 "$B/bin/zinfrun" "$plan" --data "$W/train.bin" --backend cuda --steps $STEPS \
       --losses "$W/$name" > "$W/$name.out" 2>&1; then return 0; fi
  echo "FAIL $name: zinfrun --backend cuda"; tail -8 "$W/$name.out"; fail=1; return 1
}
same() { # A B [TOL]: losses and gradient norms within TOL (2e-4) relative
  python3 - "$1" "$2" "${3:-2e-4}" <<'PY'
import sys
ref = [l.split() for l in open(sys.argv[1])]
got = [l.split() for l in open(sys.argv[2])]
tol = float(sys.argv[3])
ok = len(ref) == len(got) > 0 and all(abs(float(a[i]) - float(b[i])) <= tol * abs(float(a[i])) for a, b in zip(ref, got) for i in (3, 5))
print(" ".join("%.7f/%.7f" % (float(a[3]), float(b[3])) for a, b in zip(ref, got)))
sys.exit(0 if ok else 1)
PY
}
matmuls() { awk '{ s += $4 } END { print s + 0 }' "$1" 2>/dev/null || echo 0; }
# check NAME 'startup line' expect_matmuls(yes|no)
check() {
  name=$1; line=$2; want=$3
  [ -f "$W/$name" ] || return
  n=$(matmuls "$W/$name.lt")
  if ! grep -q "^  gemm: $line" "$W/$name.out"; then echo "FAIL $name: no line '  gemm: $line'"; grep "gemm" "$W/$name.out"; fail=1
  elif [ "$want" = yes ] && [ "$n" -eq 0 ]; then echo "FAIL $name: the fake cuBLASLt ran no matmul"; fail=1
  elif [ "$want" = no ] && [ "$n" -ne 0 ]; then echo "FAIL $name: the fake cuBLASLt ran $n matmuls"; fail=1
  elif r=$(same "$W/host" "$W/$name"); then echo "ok   $name: $(grep "^  gemm:" "$W/$name.out" | cut -c9-), $n cublasLtMatmul calls; host/cuda $r"
  else echo "FAIL $name: losses differ from the host backend's: $r"; fail=1; fi
}
run cublaslt "$W/m.plan" && check cublaslt "cuBLASLt (libcublasLt.so.13 13.1.0) for $ng GEMMs, NVRTC for 0; workspace 4.00 MiB per queue$" yes
run nvrtc "$W/m.plan" ZINF_CUBLASLT=0 && check nvrtc "NVRTC for all $ng GEMMs (cuBLASLt off: ZINF_CUBLASLT=0)$" no
if [ -f "$W/cublaslt" ] && [ -f "$W/nvrtc" ]; then
  if r=$(same "$W/cublaslt" "$W/nvrtc"); then echo "ok   cuBLASLt and NVRTC paths agree: $r"; else echo "FAIL cuBLASLt vs NVRTC: $r"; fail=1; fi
fi
if "$B/bin/zinfdump" "$W/v3.plan" --kernels 2>&1 | grep -q "^gemms: none described (a version-3 plan): every GEMM runs its NVRTC launch$"; then
  echo "ok   zinfdump reads the version-3 plan"
else echo "FAIL zinfdump on the version-3 plan"; "$B/bin/zinfdump" "$W/v3.plan" --kernels 2>&1 | tail -3; fail=1; fi
run v3 "$W/v3.plan" && check v3 "NVRTC for all $ng GEMMs (a version-3 plan describes no GEMMs)$" no
run nostart "$W/m.plan" FAKECUBLASLT_FAIL=create &&
  check nostart "NVRTC for all $ng GEMMs (libcublasLt.so.13: cublasLtCreate failed: cublasStatus 1 (the library was not initialized))$" no
run noalgo "$W/m.plan" FAKECUBLASLT_FAIL=heuristic && check noalgo "cuBLASLt (libcublasLt.so.13 13.1.0) for $ng GEMMs" no
# bf16: the library's bf16 in and out with fp32 sums against the mma.sync kernels
# (the same to rounding) and the host backend (its bf16 rounding points differ: 2e-3)
sed 's/dtype = f32/dtype = bf16/' tests/e2e/models/gpt-micro.zl > "$W/gpt-micro-bf16.zl"
sed "s#$ROOT/tests/e2e/models/gpt-micro#$W/gpt-micro-bf16#" "$W/m.zl" > "$W/b.zl"
mkdir -p "$W/srcb"
if "$B/bin/zinfc" "$W/b.zl" --kernels=sm_90 --kernel-src="$W/srcb" -o "$W/b.plan" > "$W/zinfcb.out" 2>&1 &&
   "$FAKE/fakecuda_prep" "$W/b.plan" "$W/srcb" sm_90 "$UNITS" > "$W/prepb.out" 2>&1 &&
   "$B/bin/zinfrun" "$W/b.plan" --data "$W/train.bin" --backend host --steps $STEPS --losses "$W/hostb" --quiet > "$W/hostb.out" 2>&1 &&
   run bf16 "$W/b.plan" && run bf16nvrtc "$W/b.plan" ZINF_CUBLASLT=0; then
  n=$(matmuls "$W/bf16.lt")
  if [ "$n" -gt 0 ] && grep -q "^  gemm: cuBLASLt" "$W/bf16.out" && r1=$(same "$W/bf16nvrtc" "$W/bf16") && r2=$(same "$W/hostb" "$W/bf16" 2e-3); then
    echo "ok   bf16: $n cublasLtMatmul calls; nvrtc/cublaslt $r1; host/cublaslt $r2"
  else echo "FAIL bf16: $n matmuls; nvrtc/cublaslt ${r1:-}; host/cublaslt ${r2:-}"; fail=1; fi
else echo "FAIL bf16 plan or runs"; tail -3 "$W/zinfcb.out" "$W/prepb.out" "$W/hostb.out" 2>/dev/null; fail=1; fi
[ $fail -eq 0 ] && echo "cublaslt_fake: ok"
exit $fail
