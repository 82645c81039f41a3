#!/bin/sh
# zinfc embeds the CUDA kernels of a GPU plan: every unit compiled by NVRTC
# for sm_80 and sm_90 (no GPU needed), listed by zinfdump --kernels with
# the ptxas report; two compilations give byte-identical plans (the second
# from the cache); a model the kernels cannot serve is a clear error with
# the way out.
B=${1:-build}
W=$(mktemp -d /tmp/zinf-kernels.XXXXXX)
trap 'rm -rf "$W"' EXIT
export ZINF_CACHE_DIR="$W/cache"
fail=0
"$B/bin/zinfc" examples/gpt2-tiny.zl --target h200 -o "$W/a.plan" > "$W/out" 2>&1 || { echo "FAIL: zinfc"; cat "$W/out"; exit 1; }
grep "^kernels:" "$W/out"
"$B/bin/zinfc" examples/gpt2-tiny.zl --target h200 -o "$W/b.plan" > "$W/out2" 2>&1 || { echo "FAIL: zinfc again"; exit 1; }
grep -q "0 compiled" "$W/out2" || { echo "FAIL: the second compilation did not come from the cache"; cat "$W/out2"; fail=1; }
cmp -s "$W/a.plan" "$W/b.plan" && echo "ok   two runs give byte-identical plans" || { echo "FAIL: plans differ"; fail=1; }
"$B/bin/zinfdump" "$W/a.plan" --kernels > "$W/k" || { echo "FAIL: zinfdump --kernels"; fail=1; }
n80=$(grep -c " sm_80 " "$W/k"); n90=$(grep -c " sm_90 " "$W/k")
if [ "$n80" -ge 8 ] && [ "$n80" -eq "$n90" ] && grep -q "zk_gemm: [1-9][0-9]* registers" "$W/k"; then
  echo "ok   $n80 units for sm_80 and for sm_90, with ptxas resource reports"
else echo "FAIL: kernels listing"; head -5 "$W/k"; fail=1; fi
"$B/bin/zinfc" examples/gpt2-tiny.zl --target host -o "$W/h.plan" > /dev/null 2>&1 && "$B/bin/zinfdump" "$W/h.plan" --kernels | grep -q "^0 kernels" \
  && echo "ok   a host plan carries no GPU code" || { echo "FAIL: host plan kernels"; fail=1; }
"$B/bin/zinfc" examples/zero-infinity/zi-1t.zl --target dgx2 -o "$W/z.plan" > "$W/zo" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "head dim 100" "$W/zo" && grep -q "kernels=none" "$W/zo"; then echo "ok   unsupported head dim: error and hint"
else echo "FAIL: head dim 100 gave exit $rc"; head -5 "$W/zo"; fail=1; fi
exit $fail
