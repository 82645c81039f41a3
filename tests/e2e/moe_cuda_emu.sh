#!/bin/sh
# The mixture-of-experts primitives on the CUDA backend, without a GPU:
#  1. tests/gpu/check_moe.c: each kernel of stdlib/kernels/moe.cu, forward
#     and backward, as compiler/cuda_gen_moe.c launches it, RUN on the host
#     emulator (tests/gpu/emu.c) against runtime/hostk/hostk_moe.c on the same
#     values, f32 (1e-5) and bf16 (2e-2): top-k, gates with and without
#     renormalisation, the grouped expert GEMMs (random routings, every token
#     on the same experts so that the others get none, top-1 with every
#     token on one expert, several 64-row tiles an expert), combine, load
#     with and without acc, balance, the shared expert's gate;
#  2. tests/e2e/models/moe-micro.zl (Mixtral-shaped, 2 layers of top-2 of 4
#     experts, shared expert, load-balancing loss) trained 3 steps by zinfrun
#     --backend cuda on the fake driver (tests/fakecuda) and by --backend
#     host from the same plan: losses and gradient norms within 2e-4
#     relative (the GPU kernels sum in another order); 1 rank with the
#     state on the GPU, 2 ranks with it in CPU memory; and in bf16, within
#     2e-3; the expert products through the fake cuBLASLt, one matmul per
#     expert with rows (runtime/gpu/cumoe.c);
#  3. the same with ZINF_CUBLASLT=0: the products' NVRTC launches;
#  4. extreme routings through cuBLASLt: the embedding zero, so that the
#     router's logits tie at step 1: top-1 puts every token on expert 0,
#     top-2 every token on experts 0 and 1 and none on 2 and 3 (the fake's
#     matmul shapes show it), 3 steps against the host backend;
#  5. LoRA on the experts (stdlib/moe.zl's lora_gate_up, lora_down: expert
#     products of rank 4, a split, scales), 3 steps against the host, 2e-4;
#  6. the experts tiled by expert (plan { tiles }: memory-centric tiling,
#     one tile of experts at a time in GPU memory): 2 tiles of 2 experts on
#     1 rank (the products through the fake cuBLASLt), 4 tiles of 1 expert
#     on 2 ranks with the state in CPU memory (ZINF_CUBLASLT=0: the NVRTC
#     products), each against the host backend's tiles from the same plan,
#     2e-4 relative, and against part 2's untiled host run of the same
#     placement (the host's tiles add in the untiled order: 1e-6).
# $1: the build directory. GPU=1 (tests/gpu/run_all.sh on a GPU machine):
# part 1 on the emulator, part 2 on the real device and its cuBLASLt
# (without the two-rank case; no matmul shapes to check), and with
# MOE_ALL=1 parts 3, 4 and 5 there too.
set -u
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir moe-cuda-emu
mkdir -p "$B/gpu" || exit 1
blas=-lopenblas
[ "${ZINF_CBLAS_SHIM:-0}" != 1 ] && printf '#include <cblas.h>\nint main(void){return 0;}\n' | cc -x c - -o "$W/probe" -lopenblas > /dev/null 2>&1 ||
  blas="tests/gpu/cblas_shim.c -Itests/gpu/shim"
# plan.c's packed sections want zstd and zlib; without a header plan_pack.c builds without it (as check_kernels.sh)
printf '#include <zlib.h>\nint main(void){return zlibVersion() == 0;}\n' | cc -x c - -o "$W/zprobe" -lz > /dev/null 2>&1 && blas="$blas -lz"
printf '#include <zstd.h>\nint main(void){return ZSTD_versionNumber() == 0;}\n' | cc -x c - -o "$W/zsprobe" -lzstd > /dev/null 2>&1 && blas="$blas -lzstd"
# shellcheck disable=SC2046,SC2086
cc -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -Werror -Wno-unknown-pragmas -rdynamic -Ilang -Icompiler -Iruntime $(printf -- "-I%s " runtime/*/) -I"$B/gen" \
  -DZINF_STDLIB_DIR="\"$ROOT/stdlib\"" -DZINF_EMU_HEADER="\"$ROOT/tests/gpu/emu.h\"" \
  tests/gpu/check_moe.c tests/gpu/emu_check.c tests/gpu/emu.c tests/gpu/emu_wrap.c runtime/base/arena.c runtime/base/errorf.c runtime/plan/vocab.c \
  runtime/base/nearest.c lang/diag.c compiler/graph.c compiler/prim.c compiler/cuda_gen*.c compiler/mlp_tile.c compiler/nvrtc.c \
  runtime/hostk/hostk*.c runtime/hostk/quant.c runtime/plan/plan.c runtime/plan/plan_pack.c $blas -o "$B/gpu/check_moe" -ldl -lm -lpthread > "$W/build.log" 2>&1 ||
  { cat "$W/build.log"; echo "moe_cuda_emu: check_moe did not build"; exit 1; }
out=$(TMPDIR="${TMPDIR:-/tmp}" "$B/gpu/check_moe" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "moe_cuda_emu: check_moe failed (exit $rc)"; exit 1; }
n=$(echo "$out" | grep -c " PASS")
[ "$n" -eq 42 ] || { echo "moe_cuda_emu: expected 42 passing cases, got $n"; exit 1; }
echo "$out" | grep -q "^42 cases, 0 failed$" || { echo "moe_cuda_emu: no closing line \"42 cases, 0 failed\""; exit 1; }

# 2. end to end: the CUDA executor (fake driver, or the GPU) against the host backend
if [ "${GPU:-0}" = 1 ]; then
  FAKEENV="env"
else
  export ZINF_CACHE_DIR="$B/fakecuda/nvrtc-cache"
  sh tests/fakecuda/build.sh "$B" > "$W/fb.log" 2>&1 || { cat "$W/fb.log"; echo "moe_cuda_emu: the fakes did not build"; exit 1; }
  FAKEENV="env LD_LIBRARY_PATH=$ROOT/$B/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} FAKECUDA_UNITS=$ROOT/$B/fakecuda/units FAKECUDA_JITTER_US=100"
fi
arch=${MOE_ARCH:-sm_90}
e2e_mpi
# Open MPI's own allocations are reported as leaks under ASan (as tests/e2e/san_hfio_mpi.sh)
[ "${ZINF_TEST_MODE:-}" = asan ] && export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0"
"$B/bin/zinftok" README.md docs/primitives.md -o "$W/train.bin" > /dev/null || exit 1
fail=0
# the model in bf16 (the host backend computes in f32 from bf16 storage, as the kernels do)
sed 's/dtype = f32/dtype = bf16/; s/^model moe_micro/model moe_micro_bf16/' tests/e2e/models/moe-micro.zl > "$W/moe-micro-bf16.zl"
run_case() { # NAME RANKS PLACEMENT MODEL TOLERANCE [ENV [PLAN]]: zinfc, then 3 steps on each backend, losses and gradient
  # norms compared; ENV: variables for the CUDA run only; PLAN: more of the plan block
  name=$1 np=$2 place=$3 model=$4 tol=$5 extra=${6:-} more=${7:-}
  cat > "$W/$name.zl" <<ZL
import "$model"
target fake { nodes = 1; gpus_per_node = $np
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "$arch"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "$place"; optimizer = "$place"; grads = "$place"; whole_below = 1000$more }
ZL
  # shellcheck disable=SC2046
  "$B/bin/zinfc" "$W/$name.zl" --kernels="$arch" --kernel-src="$W/src-$name" -o "$W/$name.plan" $([ -n "$more" ] && echo --explain) \
    > "$W/$name.zinfc" 2>&1 ||
    { cat "$W/$name.zinfc"; echo "moe_cuda_emu: zinfc of $name for the CUDA backend failed"; fail=1; return; }
  if [ "${GPU:-0}" != 1 ]; then
    "$B/fakecuda/fakecuda_prep" "$W/$name.plan" "$W/src-$name" "$arch" "$B/fakecuda/units" > "$W/$name.prep" 2>&1 ||
      { cat "$W/$name.prep"; echo "moe_cuda_emu: fakecuda_prep $name failed"; fail=1; return; }
  fi
  if [ "$np" = 1 ]; then set -- "$B/bin/zinfrun"; else set -- mpirun -np "$np" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS \
    -x FAKECUDA_DEVICES -x FAKECUDA_JITTER_US "$B/bin/zinfrun"; fi
  # shellcheck disable=SC2086
  timeout 300 $FAKEENV $extra FAKECUDA_DEVICES="$np" "$@" "$W/$name.plan" --data "$W/train.bin" --backend cuda --steps 3 \
    --losses "$W/$name.cuda" > "$W/$name.cuda.out" 2>&1 < /dev/null ||
    { tail -20 "$W/$name.cuda.out"; echo "moe_cuda_emu: zinfrun --backend cuda $name failed"; fail=1; return; }
  timeout 300 "$@" "$W/$name.plan" --data "$W/train.bin" --backend host --steps 3 --losses "$W/$name.host" \
    > "$W/$name.host.out" 2>&1 < /dev/null ||
    { tail -20 "$W/$name.host.out"; echo "moe_cuda_emu: zinfrun --backend host $name failed"; fail=1; return; }
  awk -v name="$name" -v tol="$tol" 'NR == FNR { l[FNR] = $4; g[FNR] = $6; n = FNR; next }
       { for (i = 4; i <= 6; i += 2) { h = i == 4 ? l[FNR] : g[FNR]; d = $i - h; if (d < 0) d = -d
           r = d / (h < 0 ? -h : h); if (r > tol) bad = 1 }
         printf "moe-micro %s step %d: host loss %s grad_norm %s, cuda loss %s grad_norm %s\n", name, FNR, l[FNR], g[FNR], $4, $6; k++ }
       END { if (k != 3 || n != 3) { print "moe_cuda_emu: " name ": expected 3 steps of each"; exit 1 }
             if (bad) { print "moe_cuda_emu: " name ": the CUDA losses differ from the host backend'"'"'s"; exit 1 } }' \
    "$W/$name.host" "$W/$name.cuda" || fail=1
}
run_case gpu1 1 gpu "$ROOT/tests/e2e/models/moe-micro" 2e-4 "FAKECUBLASLT_SHAPES=$W/gpu1.shapes"
# two ranks (data parallel: the experts' gradients reduced over ranks), parameters and Adam state in CPU memory
[ "${GPU:-0}" = 1 ] || run_case cpu2 2 cpu "$ROOT/tests/e2e/models/moe-micro" 2e-4
run_case bf16 1 gpu "$W/moe-micro-bf16" 2e-3
fake=$([ "${GPU:-0}" = 1 ] && echo 0 || echo 1) # the fake cuBLASLt logs its matmul shapes; the real one does not
# the expert products' two paths. By default cuBLASLt runs them, one matmul
# per expert with rows: the forward products of wg and wu and the input
# gradient through wd are the only matmuls of 48 x rows x 64 (F x rows x D,
# column-major), and each covers the 2 * 16 * 2 (row, slot) pairs of a
# micro-batch.
grep -q "^  gemm: cuBLASLt (libcublasLt.so.1[0-9] [0-9.]*) for [0-9]* GEMMs, NVRTC for 0; expert GEMMs of 24 moe_expert launches per expert" \
  "$W/gpu1.cuda.out" || { grep gemm "$W/gpu1.cuda.out"; echo "moe_cuda_emu: gpu1 does not run the expert GEMMs through cuBLASLt"; fail=1; }
[ "$fake" = 0 ] || awk '$1 == 48 && $3 == 64 && $4 == 1 { n++; s += $2 } END { if (!n || s % 64) { print "moe_cuda_emu: " n + 0 " expert matmuls of 48 x m x 64 with " s + 0 " rows in all (want a multiple of 64)"; exit 1 }
     print "moe_cuda_emu: gpu1: " n " expert matmuls of 48 x m x 64 through the fake cuBLASLt, " s " rows = " s / 64 " products of 64 pairs" }' "$W/gpu1.shapes" || fail=1
# parts 3, 4 and 5 on the GPU machine only with MOE_ALL=1 (run_all.sh gives the step 150 s)
if [ "${GPU:-0}" != 1 ] || [ "${MOE_ALL:-0}" = 1 ]; then
  # 3. with ZINF_CUBLASLT=0 their NVRTC launches (zk_moe_gemm_*)
  run_case nvrtc 1 gpu "$ROOT/tests/e2e/models/moe-micro" 2e-4 "ZINF_CUBLASLT=0 FAKECUBLASLT_SHAPES=$W/nvrtc.shapes"
  if ! grep -q "^  gemm: NVRTC for all [0-9]* GEMMs and 24 moe_expert launches (cuBLASLt off: ZINF_CUBLASLT=0)" "$W/nvrtc.cuda.out" ||
     [ -s "$W/nvrtc.shapes" ]; then
    grep gemm "$W/nvrtc.cuda.out"; echo "moe_cuda_emu: ZINF_CUBLASLT=0 still calls cuBLASLt"; fail=1
  fi
  # 4. extreme routings through cuBLASLt: the embedding zero, every token's
  # router logits tie at step 1 and top-k takes the lowest experts: with top-1
  # every token on expert 0 (32 rows, the others none), with top-2 experts 0
  # and 1 get all 32 tokens each and experts 2 and 3 none
  sed 's/^\( *tok = param \[V, D\] init\) normal(0.02)/\1 zeros/' tests/e2e/models/moe-micro.zl > "$W/moe-tie2.zl"
  sed 's/K = 2,/K = 1,/; s/^model moe_micro/model moe_micro_top1/' "$W/moe-tie2.zl" > "$W/moe-tie1.zl"
  for k in 1 2; do
    run_case "tie$k" 1 gpu "$W/moe-tie$k" 2e-4 "FAKECUBLASLT_SHAPES=$W/tie$k.shapes"
    [ "$fake" = 1 ] || continue
    # the first forward product: k matmuls of all 32 rows, then the next product begins
    got=$(awk '$1 == 48 && $3 == 64 { printf "%s%s", sep, $2; sep = " " }' "$W/tie$k.shapes" | cut -d' ' -f1-"$((k + 1))")
    want=$([ $k = 1 ] && echo "32 32" || echo "32 32 32")
    if [ "$got" = "$want" ]; then echo "moe_cuda_emu: tie$k: the first expert matmuls have $got rows (top-$k of tied logits)"
    else echo "moe_cuda_emu: tie$k: first expert matmuls of $got rows, want $want"; fail=1; fi
  done
  # 5. LoRA on the experts
  sed 's/shared_hidden = 32)/shared_hidden = 32, lora_rank = 4, lora_alpha = 8.0, lora_gate_up = true, lora_down = true)/;
       s/^model moe_micro/model moe_micro_lora/' tests/e2e/models/moe-micro.zl > "$W/moe-micro-lora.zl"
  grep -q "lora_gate_up = true" "$W/moe-micro-lora.zl" || { echo "moe_cuda_emu: the LoRA variant was not made"; fail=1; }
  run_case lora 1 gpu "$W/moe-micro-lora" 2e-4
fi
# 6. tiled by expert: the CUDA tiles against the host's from the same plan,
# and the host's tiles against the untiled host run of part 2
tiled_case() { # NAME RANKS PLACEMENT TILES UNTILED [ENV]
  name=$1 nt=$4
  run_case "$1" "$2" "$3" "$ROOT/tests/e2e/models/moe-micro" 2e-4 "${6:-}" \
    "; tiles \"*.moe_mlp.wg\" = $nt; tiles \"*.moe_mlp.wu\" = $nt; tiles \"*.moe_mlp.wd\" = $nt"
  [ -s "$W/$name.cuda" ] || return
  grep -q "^tile moe_block.1.moe_mlp.wd \[4, 64, 48\] in $nt tiles of $((4 / nt)) expert" "$W/$name.zinfc" ||
    { cat "$W/$name.zinfc"; echo "moe_cuda_emu: $name: the experts are not in $nt tiles"; fail=1; return; }
  # the plan's moe_expert launches: the 24 of the whole ops and 24 more a tile
  grep -Eq "^  gemm: .*(expert GEMMs of|and) $((24 + 24 * nt)) moe_expert launches" "$W/$name.cuda.out" ||
    { grep gemm "$W/$name.cuda.out"; echo "moe_cuda_emu: $name: not the $((24 + 24 * nt)) moe_expert launches of $nt tiles"; fail=1; }
  # through the fake cuBLASLt: each tile's products take its experts' rows only, the tiles together all pairs
  [ "$fake" = 0 ] || [ ! -f "$W/$name.shapes" ] || awk -v name="$name" '$1 == 48 && $3 == 64 && $4 == 1 { n++; s += $2 }
     END { if (!n || s % 64) { print "moe_cuda_emu: " name ": " n + 0 " expert matmuls of 48 x m x 64 with " s + 0 " rows in all (want a multiple of 64)"; exit 1 }
       print "moe_cuda_emu: " name ": " n " expert matmuls of 48 x m x 64 through the fake cuBLASLt, " s " rows = " s / 64 " products of 64 pairs" }' "$W/$name.shapes" || fail=1
  awk -v name="$name" 'NR == FNR { l[FNR] = $4; next } { d = $4 - l[FNR]; if (d < 0) d = -d; if (d > 1e-6 * (l[FNR] < 0 ? -l[FNR] : l[FNR])) bad = 1 }
       END { if (bad) { print "moe_cuda_emu: " name ": the host backend'"'"'s tiled losses differ from untiled"; exit 1 }
             print "moe_cuda_emu: " name ": the host tiles'"'"' losses equal untiled within 1e-6" }' "$W/$5.host" "$W/$name.host" || fail=1
}
tiled_case tile2 1 gpu 2 gpu1 "FAKECUBLASLT_SHAPES=$W/tile2.shapes"
[ "${GPU:-0}" = 1 ] || tiled_case tile4 2 cpu 4 cpu2 "ZINF_CUBLASLT=0"
[ $fail = 0 ] || exit 1
echo "moe_cuda_emu: ok"
