#!/bin/sh
# The tile launches of tiled ops RUN on the host emulator and give, tile by
# tile, what the whole op's launches give (tests/gpu/check_tiles.c: real
# zk_gemm on operands at byte offsets, the embedding tile entries; linear,
# matmul with transpose_b, embedding; f32 and bf16). Exit code is the verdict.
# $1: the build directory (the tool is built under it).
set -u
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir tiles-emu; T=$W
mkdir -p "$B/gpu" || exit 1
cc -std=c11 -D_GNU_SOURCE -O1 -rdynamic -Ilang -Icompiler -Iruntime $(printf -- "-I%s " runtime/*/) -I"$B/gen" \
  -DZINF_STDLIB_DIR="\"$ROOT/stdlib\"" -DZINF_EMU_HEADER="\"$ROOT/tests/gpu/emu.h\"" \
  tests/gpu/check_tiles.c tests/gpu/emu_check.c tests/gpu/emu.c tests/gpu/emu_wrap.c runtime/base/arena.c runtime/plan/vocab.c runtime/base/nearest.c \
  lang/diag.c compiler/graph.c compiler/prim.c compiler/cuda_gen*.c compiler/mlp_tile.c compiler/nvrtc.c -o "$B/gpu/check_tiles" -ldl -lm -lpthread \
  > "$T/build.log" 2>&1 || { cat "$T/build.log"; echo "gpu_tiles_emu: check_tiles did not build"; exit 1; }
out=$("$B/gpu/check_tiles" 2>&1)
rc=$?
echo "$out" | tail -6
[ $rc -eq 0 ] || { echo "gpu_tiles_emu: check_tiles failed (exit $rc)"; exit 1; }
n=$(echo "$out" | grep -c " PASS")
[ "$n" -ge 12 ] || { echo "gpu_tiles_emu: expected at least 12 passing cases, got $n"; exit 1; }
echo "$out" | grep -q "^0 failed$" || { echo "gpu_tiles_emu: no closing line \"0 failed\""; exit 1; }
echo "gpu_tiles_emu: ok ($n cases)"
