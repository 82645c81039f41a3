#!/bin/sh
# The fake CUDA stack (tests/fakecuda, docs/testing-gpu-fake.md) works as
# the CUDA executor will use it: the fake libcuda.so.1 opened by cudrv_open
# through LD_LIBRARY_PATH; streams that run asynchronously and are ordered
# only by events; event queries; a real kernel unit of a plan
# (gpt2-tiny, zinfc --kernel-src, fakecuda_prep) launched and checked;
# fault injection (FAKECUDA_FAIL, FAKECUDA_MEM, FAKECUDA_STUB,
# FAKECUDA_DEVICES); the fake NCCL under mpirun -np 2 (allgather, bf16
# reduce-scatter, allreduce, broadcast; a hang released by ncclCommAbort,
# an injected asynchronous error). Exit code is the verdict.
# $1: the build directory (the fake is built under $1/fakecuda).
set -u
B=${1:-build}
sh tests/fakecuda/build.sh "$B" >/dev/null || exit 1
case "$B" in /*) ;; *) B="$(pwd)/$B" ;; esac
F="$B/fakecuda"
. tests/e2e/lib.sh
e2e_workdir fakecuda-self; T=$W
fail() { echo "fakecuda_self: $*"; exit 1; }
# NVRTC's cubins and the emulated units are cached under the build
# directory: a second run compiles nothing
export ZINF_CACHE_DIR="$F/nvrtc-cache"
export LD_LIBRARY_PATH="$F${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKECUDA_UNITS="$F/units"
unset FAKECUDA_FAIL FAKECUDA_MEM FAKECUDA_STUB FAKECUDA_DEVICES FAKECUDA_ARCH FAKENCCL_HANG FAKENCCL_ASYNC_ERROR

"$B/bin/zinfc" --help 2>&1 | grep -q -- --kernel-src || fail "$B/bin/zinfc has no --kernel-src (rebuild with make)"
mkdir -p "$T/src"
"$B/bin/zinfc" --target h200 -o "$T/p.plan" --kernel-src="$T/src" examples/gpt2-tiny.zl >"$T/zinfc.log" 2>&1 ||
    { cat "$T/zinfc.log"; fail "zinfc failed"; }
# every unit, so the prep tool is checked on all of them (ELF sizes, builds)
"$F/fakecuda_prep" "$T/p.plan" "$T/src" sm_90 "$FAKECUDA_UNITS" >"$T/prep.log" 2>&1 || { cat "$T/prep.log"; fail "fakecuda_prep failed"; }
n=$(grep -c "sm_90 ->" "$T/prep.log")
[ "$n" -ge 5 ] || { cat "$T/prep.log"; fail "fakecuda_prep made $n units"; }
# a plan without kernels for the arch: a clear error
"$F/fakecuda_prep" "$T/p.plan" "$T/src" sm_75 "$T/none" >"$T/prep2.log" 2>&1 && fail "fakecuda_prep accepted sm_75"
grep -q "no kernels for sm_75" "$T/prep2.log" || { cat "$T/prep2.log"; fail "fakecuda_prep: unclear message"; }

run() { # mode [env...]: one selftest process
    mode=$1
    shift
    env "$@" "$F/fakecuda_selftest" "$mode" "$T/p.plan" >"$T/$mode.log" 2>&1 || { cat "$T/$mode.log"; fail "selftest $mode failed"; }
    grep -q "fakecuda_selftest $mode: ok" "$T/$mode.log" || { cat "$T/$mode.log"; fail "selftest $mode: no verdict"; }
}
run driver
run fail FAKECUDA_FAIL=cuMemAlloc_v2:3,kernel:1 FAKECUDA_MEM=1m
run stub FAKECUDA_STUB=1
run nodev FAKECUDA_DEVICES=0
grep -q "injected fault" "$T/fail.log" || fail "the kernel fault was not reported on stderr"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
mpi() { # mode [-x VAR=value...]
    mode=$1
    shift
    timeout 60 mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH "$@" "$F/fakecuda_selftest" "$mode" </dev/null >"$T/$mode.log" 2>&1 ||
        { cat "$T/$mode.log"; fail "selftest $mode under mpirun failed"; }
    grep -q "fakecuda_selftest $mode: ok" "$T/$mode.log" || { cat "$T/$mode.log"; fail "selftest $mode: no verdict"; }
}
mpi nccl
# The hang case once failed in a cold CI run (the hung collective seen
# complete; not reproduced since, in 40 runs, loaded or not): a first failure
# is shown and the case run once more, so a real regression still fails.
if ! timeout 60 mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH -x FAKENCCL_HANG=1:2 -x FAKENCCL_ASYNC_ERROR=0:1 \
    "$F/fakecuda_selftest" hang </dev/null >"$T/hang.log" 2>&1; then
    echo "fakecuda_self: the hang case failed once; its output, then a second run:"
    grep -v "^-\|^ \|^$" "$T/hang.log" | head -8
fi
grep -q "fakecuda_selftest hang: ok" "$T/hang.log" || mpi hang -x FAKENCCL_HANG=1:2 -x FAKENCCL_ASYNC_ERROR=0:1
grep -q "rank 1: FAKENCCL_HANG" "$T/hang.log" || { cat "$T/hang.log"; fail "the hang was not injected"; }
echo "fakecuda_self: ok"
