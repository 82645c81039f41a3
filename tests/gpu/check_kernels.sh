#!/bin/sh
# tests/gpu/check_kernels.sh [--make] [--dry | --emu] [--no-timing] [-v]
#
# Builds the GPU kernel check harness (tests/gpu/check_kernels.c) from the
# sources it needs, with any C compiler, and runs it: every CUDA kernel family
# against the host reference (runtime/hostk), then GEMM timings against
# cuBLAS and attention timings, one table; the GEMM timings run each shape
# three ways: the NVRTC gemm, cuBLASLt as zinfrun calls it
# (runtime/gpu/cublaslt.c; their outputs compared) and cuBLAS. Needs: cc, libnvrtc (CUDA toolkit),
# and for the run a GPU with its driver (libcuda.so.1); no nvcc, no
# OpenBLAS (a naive cblas_sgemm stands in when cblas.h is missing), no Check.
# --make also builds the whole project with make first (needs its packages).
# Without a GPU (or with --dry) it compiles every kernel and runs the host
# references only, and exits 3. --emu runs the kernels on the host emulator
# (tests/gpu/emu.c; needs c++), no GPU needed. Exit 0 = every case passed.
# On a GPU machine it runs in one call, e.g.:  sh tests/gpu/check_kernels.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build}
OUTD=$BUILD/gpu
mkdir -p "$OUTD" || exit 2
CC=${CC:-cc}
if [ -z "${CUDA_HOME:-}" ] && [ ! -d /usr/local/cuda ] && command -v nvcc >/dev/null 2>&1; then
    CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
    export CUDA_HOME
fi
CUDA=${CUDA_HOME:-/usr/local/cuda}
MAKE_ALL=0
for a in "$@"; do
    shift
    if [ "$a" = --make ]; then MAKE_ALL=1; else set -- "$@" "$a"; fi
done
if [ "$MAKE_ALL" = 1 ]; then
    if make -j"$(nproc)" all >"$OUTD/make.log" 2>&1; then echo "make: ok"; else echo "make: failed (see $OUTD/make.log); the harness does not need it"; fi
fi
blas="tests/gpu/cblas_shim.c"
blasinc="-Itests/gpu/shim"
bloblibs=""
if [ "${ZINF_CBLAS_SHIM:-0}" != 1 ] && printf '#include <cblas.h>\nint main(void){return 0;}\n' | $CC -x c - -o "$OUTD/cblas_probe" -lopenblas >/dev/null 2>&1; then
    blas=""; blasinc=""; bloblibs="-lopenblas"
fi
# plan files' packed sections need zstd (version 10) or zlib (version 5); without a header plan_pack.c builds without it
printf '#include <zlib.h>\nint main(void){return zlibVersion() == 0;}\n' | $CC -x c - -o "$OUTD/zlib_probe" -lz >/dev/null 2>&1 && bloblibs="$bloblibs -lz"
printf '#include <zstd.h>\nint main(void){return ZSTD_versionNumber() == 0;}\n' | $CC -x c - -o "$OUTD/zstd_probe" -lzstd >/dev/null 2>&1 && bloblibs="$bloblibs -lzstd"
omp="-fopenmp"
printf 'int main(void){return 0;}\n' | $CC -x c - -fopenmp -o "$OUTD/omp_probe" >/dev/null 2>&1 || omp=""
harness="tests/gpu/check_kernels.c tests/gpu/check_lt.c tests/gpu/emu.c tests/gpu/emu_wrap.c $blas"
lib="runtime/gpu/cublaslt.c runtime/base/errorf.c runtime/plan/plan.c runtime/plan/plan_pack.c runtime/base/arena.c runtime/plan/vocab.c runtime/base/nearest.c lang/diag.c compiler/graph.c compiler/prim.c compiler/autodiff.c $(ls compiler/cuda_gen*.c) compiler/mlp_tile.c compiler/nvrtc.c $(ls runtime/hostk/hostk*.c runtime/hostk/quant.c)"
cflags="-std=c11 -D_GNU_SOURCE -O2 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2 -g $omp -Wall -Wextra -Werror -Wno-unknown-pragmas -Ilang -Icompiler -Iruntime $(printf -- "-I%s " runtime/*/) -I$BUILD/gen -I$CUDA/include $blasinc"
ROOT=$(pwd)
# shellcheck disable=SC2086
ccall() { $CC $cflags -DZINF_STDLIB_DIR="\"$ROOT/stdlib\"" -DZINF_EMU_HEADER="\"$ROOT/tests/gpu/emu.h\"" "$@"; }
# shellcheck disable=SC2086
if [ "${ZINF_GPU_BUILD_ALL:-0}" = 1 ] || ! ccall -rdynamic $harness $lib -o "$OUTD/check_kernels" $bloblibs -ldl -lm -lpthread 2>"$OUTD/build.log"; then
    # The library grew dependencies: archive every library source that
    # compiles here and let the linker take what the harness needs.
    echo "check_kernels.sh: direct build failed (see $OUTD/build.log); trying every library source"
    mkdir -p "$OUTD/obj" && rm -f "$OUTD/libzk.a" "$OUTD"/obj/*.o
    for f in runtime/*/*.c lang/*.c compiler/*.c; do
        case "$f" in */main_*) continue ;; esac
        # shellcheck disable=SC2086
        ccall -c "$f" -o "$OUTD/obj/$(echo "$f" | tr / _).o" 2>>"$OUTD/build.log" || echo "  skipped $f"
    done
    ar rcs "$OUTD/libzk.a" "$OUTD"/obj/*.o || exit 2
    # shellcheck disable=SC2086
    if ! ccall -rdynamic $harness "$OUTD/libzk.a" -o "$OUTD/check_kernels" $bloblibs -ldl -lm -lpthread; then
        echo "check_kernels.sh: the harness did not build" >&2
        exit 2
    fi
fi
echo "built $OUTD/check_kernels ($( [ -n "$blas" ] && echo "cblas shim" || echo "OpenBLAS" ))"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CUDA/lib64"
exec "$OUTD/check_kernels" "$@"
