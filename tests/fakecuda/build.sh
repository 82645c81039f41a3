#!/bin/sh
# tests/fakecuda/build.sh BUILD
#
# Builds the fake CUDA stack into BUILD/fakecuda/ (docs/testing-gpu-fake.md):
#   libcuda.so.1        the fake driver, with the kernel emulator (tests/gpu/emu.c)
#   libnccl.so.2        the fake NCCL, over MPI
#   libcublasLt.so.13   the fake cuBLASLt: matmuls on the host, arguments checked
#   fakecuda_prep       builds a plan's emulated kernel units
#   fakecuda_selftest   the checks of tests/e2e/fakecuda_self.sh
# Needs the BUILD/libzinf*.a libraries (make), cc, the CUDA headers (no GPU, no driver) and
# Open MPI (pkg-config ompi-c). Quick when up to date (each output is
# rebuilt only when an input is newer); outputs appear atomically, so
# concurrent runs do not see half a file. Exit 0, or 1 with a message.
# Use from an e2e script:  sh tests/fakecuda/build.sh "$B" || exit 1
set -u
# word splitting of the flag variables is meant; the *_cmd functions run through make_one
# shellcheck disable=SC2086,SC2317
B=${1:-}
[ -n "$B" ] || { echo "usage: tests/fakecuda/build.sh BUILD" >&2; exit 1; }
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
O="$B/fakecuda"
# every layer's library, in link order (the Makefile's LIB)
LIBZ="$B/libzinfref.a $B/libzinfcompiler.a $B/libzinflang.a $B/libzinfrt.a $B/libzinfplan.a $B/libzinfbase.a"
for l in $LIBZ; do [ -f "$l" ] || { echo "fakecuda/build.sh: $l is missing: run make first" >&2; exit 1; }; done
mkdir -p "$O" || exit 1
CC=${CC:-cc}
CUDA=${CUDA_HOME:-/usr/local/cuda}
[ -f "$CUDA/include/cuda.h" ] && [ -f "$CUDA/include/nccl.h" ] || {
    echo "fakecuda/build.sh: no cuda.h and nccl.h under $CUDA/include (set CUDA_HOME)" >&2; exit 1; }
MPI_CFLAGS=$(pkg-config --cflags ompi-c 2>/dev/null) && MPI_LIBS=$(pkg-config --libs ompi-c 2>/dev/null) || {
    echo "fakecuda/build.sh: Open MPI not found (pkg-config ompi-c)" >&2; exit 1; }
# the programs link zinf's libraries, so they take their libraries (the Makefile's
# LDLIBS) and, for the sanitizer build, its instrumentation
LIBS="$(pkg-config --libs ompi-c openblas liburing 2>/dev/null) -L$CUDA/lib64 -Wl,-rpath,$CUDA/lib64 -lnvrtc -lz -lzstd -ldl -lpthread -lm -fopenmp"
SAN=""
if nm -A "$B/libzinfrt.a" 2>/dev/null | grep -q __asan_init; then
    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
fi
F="-std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror"
INC="-Ilang -Icompiler -Iruntime $(printf -- "-I%s " runtime/*/) -I$B/gen -I$CUDA/include -Itests/gpu -Itests/fakecuda"
S=tests/fakecuda
LOG="$O/build.log"
: > "$LOG"

# stale TARGET INPUTS...: true when TARGET is missing or older than an input
stale() {
    t=$1
    shift
    [ -f "$t" ] || return 0
    for f in "$@"; do [ "$f" -nt "$t" ] && return 0; done
    return 1
}
# make_one TARGET "INPUTS" COMMAND...: COMMAND writes TARGET.tmp.$$ ($TMP)
make_one() {
    t=$1
    ins=$2
    shift 2
    # shellcheck disable=SC2086
    stale "$t" $ins "$S/build.sh" || return 0
    TMP="$t.tmp.$$"
    if "$@" >>"$LOG" 2>&1 && mv -f "$TMP" "$t"; then
        echo "fakecuda/build.sh: built $t"
        return 0
    fi
    rm -f "$TMP"
    echo "fakecuda/build.sh: building $t failed:" >&2
    tail -30 "$LOG" >&2
    exit 1
}

# the driver: no sanitizer (it is a stand-in for a system library; its
# threads and the emulator's coroutine stacks are not ASan's business)
cuda_cmd() { $CC $F -fPIC -shared -Wl,-soname,libcuda.so.1 $INC "$S/fake_cuda.c" tests/gpu/emu.c -o "$TMP" -lpthread -ldl; }
make_one "$O/libcuda.so.1" "$S/fake_cuda.c $S/fakecuda_elf.h tests/gpu/emu.c runtime/base/half.h" cuda_cmd
# shellcheck disable=SC2086
nccl_cmd() { $CC $F -fPIC -shared -Wl,-soname,libnccl.so.2 $INC $MPI_CFLAGS "$S/fake_nccl.c" -o "$TMP" $MPI_LIBS -lpthread -ldl; }
make_one "$O/libnccl.so.2" "$S/fake_nccl.c runtime/base/half.h" nccl_cmd
lt_cmd() { $CC $F -fPIC -shared -Wl,-soname,libcublasLt.so.13 $INC "$S/fake_cublaslt.c" -o "$TMP" -lpthread -ldl; }
make_one "$O/libcublasLt.so.13" "$S/fake_cublaslt.c runtime/base/half.h" lt_cmd
# shellcheck disable=SC2086
prep_cmd() { $CC $F $SAN $INC -DZINF_EMU_HEADER="\"$ROOT/tests/gpu/emu.h\"" "$S/fakecuda_prep.c" tests/gpu/emu_wrap.c $LIBZ -o "$TMP" $LIBS $SAN; }
make_one "$O/fakecuda_prep" "$S/fakecuda_prep.c $S/fakecuda_elf.h tests/gpu/emu_wrap.c tests/gpu/emu_wrap.h runtime/plan/plan.h $LIBZ" prep_cmd
# shellcheck disable=SC2086
self_cmd() { $CC $F $SAN $INC $MPI_CFLAGS "$S/fakecuda_selftest.c" $LIBZ -o "$TMP" $LIBS $SAN; }
make_one "$O/fakecuda_selftest" "$S/fakecuda_selftest.c runtime/gpu/cudrv.h runtime/gpu/cublaslt.h runtime/plan/plan.h $LIBZ" self_cmd
exit 0
