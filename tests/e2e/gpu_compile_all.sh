#!/bin/sh
# Every example model compiles for every built-in GPU target with CUDA
# kernels for the target's own architecture: zinfc plans it, generates and
# NVRTC-compiles its kernels and verifies the plan, and zinfdump reads it
# back (--kernels lists every unit and launch). A model that does not fit a
# target is refused by the planner with its reason; no refusal may be a
# kernel limit (an op the CUDA kernels cannot serve). A target whose
# architecture the kernels or this NVRTC cannot serve (the dgx2's sm_70: the
# bf16/f16 kernels need sm_80's tensor cores, and CUDA 13 dropped sm_70) must
# say so, and its plans are then checked with sm_80 kernels.
# $1: the build directory; $2: "all" for every model, else a subset (one
# model per kind of kernel configuration, with the paper's 1T model).
# The NVRTC cache (ZINF_CACHE_DIR) is shared across the runs, so a unit
# configuration compiles once.
set -u
B=${1:-build}
SET=${2:-subset}
. tests/e2e/lib.sh
e2e_workdir compile-all
export ZINF_CACHE_DIR="${ZINF_CACHE_DIR:-$W/cache}"
if [ "$SET" = all ]; then
    models=$(ls examples/*.zl examples/zero-infinity/*.zl)
else
    models="examples/gpt2-tiny.zl examples/llama-tiny.zl examples/llama2-7b.zl examples/zero-infinity/zi-1t.zl"
fi
fail=0 ok=0 refused=0
# one zinfc run: 0 = plan written and read back, 1 = refused (reason in $W/out), 2 = broken
plan_one() { # model target arch
    rm -f "$W/p.plan"
    "$B/bin/zinfc" "$1" --target "$2" --kernels="$3" -o "$W/p.plan" >"$W/out" 2>&1 || return 1
    "$B/bin/zinfdump" "$W/p.plan" >/dev/null 2>"$W/dump" || { echo "FAIL $1 on $2 ($3): zinfdump"; cat "$W/dump"; return 2; }
    "$B/bin/zinfdump" "$W/p.plan" --kernels >"$W/k" 2>"$W/dump" || { echo "FAIL $1 on $2 ($3): zinfdump --kernels"; return 2; }
    grep -q " $3 " "$W/k" || { echo "FAIL $1 on $2: no $3 units listed"; return 2; }
    return 0
}
# a refusal must come from the planner, not from the kernels
kernel_limit() {
    grep -q "CUDA kernel\|NVRTC\|the kernels\|--kernels\|grid axis\|internal error" "$W/out"
}
for t in examples/targets/*.zl; do
    name=$(basename "$t" .zl)
    [ "$name" = host ] && continue
    arch=$(sed -n 's/.*arch = "\(sm_[0-9]*\)".*/\1/p' "$t")
    [ -n "$arch" ] || { echo "FAIL $t: no arch"; fail=1; continue; }
    for m in $models; do
        plan_one "$m" "$t" "$arch"
        rc=$?
        karch=$arch
        if [ $rc -eq 1 ] && [ "${arch#sm_}" -lt 80 ] && kernel_limit; then
            # an arch below sm_80: the refusal names the tensor cores or NVRTC's list
            if ! grep -q "needs sm_80 or newer\|cannot compile for $arch: it supports" "$W/out"; then
                echo "FAIL $m on $name: $arch refused without naming the limit"; cat "$W/out"; fail=1; continue
            fi
            karch=sm_80
            plan_one "$m" "$t" sm_80
            rc=$?
        fi
        case $rc in
        0) ok=$((ok + 1)) ;;
        1) if kernel_limit; then
               echo "FAIL $m on $name ($karch): refused by the kernels"; grep "error" "$W/out" | head -3; fail=1
           else
               refused=$((refused + 1))
               echo "     $m on $name: refused by the planner: $(grep -m1 "error" "$W/out" | cut -c1-150)"
           fi ;;
        *) fail=1 ;;
        esac
    done
done
echo "gpu_compile_all: $ok plans written and read back, $refused refused by the planner ($SET)"
[ "$ok" -gt 0 ] || fail=1
[ $fail -eq 0 ] && echo "gpu_compile_all: ok" || echo "gpu_compile_all: FAILED"
exit $fail
