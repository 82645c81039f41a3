#!/bin/sh
# A long sequence on the host backend (never downloads anything): a small
# random LLaMA whose context is T = 8192 (tests/e2e/hf_long.py), planned
# with --from-hf --seq 8192 for two host targets: one whose 96 MiB hold the
# whole logits [8192, 1000] (and their gradient), and one of 64 MiB that
# does not, so that the planner chunks the loss by itself (--explain says
# so). One step of each must give transformers' loss within 1e-5 relative
# and each other's within 1e-6, the device arena zinfrun allocates must be
# the plan's, and the chunked plan's peak must be under its 64 MiB.
#   tests/e2e/hf_long.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hf-long
T=$W
export OMP_NUM_THREADS=1
fail=0
bad() { echo "FAIL: $*"; fail=1; }

want=$("$ZINF_PY" tests/e2e/hf_long.py make "$T" 8192 2> "$T/make.log") ||
  { cat "$T/make.log"; echo "FAIL: making the model or transformers' loss (above)"; exit 1; }
"$Z/zinfc" --from-hf "$T/model" --seq 8192 --emit=zl > "$T/m.zl" 2> "$T/emit.err" || { cat "$T/emit.err"; echo "FAIL: --emit=zl"; exit 1; }
sed -i -e 's/^  micro_batch = .*/  micro_batch = 1/' "$T/m.zl"
losses=""
for mib in 96 64; do
  cat > "$T/t$mib.zl" <<EOT
target small$mib {
  backend = "host"
  ranks = 1
  budget = $mib MiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
}
EOT
  if ! "$Z/zinfc" "$T/m.zl" --target "$T/t$mib.zl" --explain -o "$T/m$mib.plan" > "$T/zinfc$mib" 2>&1; then
    cat "$T/zinfc$mib"; bad "$mib MiB: zinfc"; continue
  fi
  if [ $mib = 96 ]; then grep -q "^loss: logits \[8192, 1000\] whole (the plan fits with them)" "$T/zinfc$mib" || bad "96 MiB: the logits are not whole"
  else grep -q "^loss: chunked, linear_cross_entropy over [0-9]* of the 8192 rows at a time .*the plan does not fit with the whole logits" "$T/zinfc$mib" ||
    bad "64 MiB: --explain does not say the loss is chunked"; fi
  "$Z/zinfrun" "$T/m$mib.plan" --backend host --init "$T/model" --data "$T/train.bin" --steps 1 --losses "$T/l$mib" > "$T/run$mib" 2>&1 ||
    { tail -20 "$T/run$mib"; bad "$mib MiB: zinfrun"; continue; }
  got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/l$mib")
  if e2e_close "$got" "$want" 1e-5; then echo "ok $mib MiB: loss $got, transformers $want"
  else bad "$mib MiB: loss $got, transformers $want (more than 1e-5 apart)"; fi
  losses="$losses $got"
  a=$(sed -n 's/^  arena gpu *\([0-9]*\) bytes .* allocated; the plan says \([0-9]*\) .*/\1 \2/p' "$T/run$mib")
  set -- $a
  if [ -n "$a" ] && [ "$1" = "$2" ]; then echo "ok $mib MiB: device arena $1 bytes, as the plan says"
  else bad "$mib MiB: device arena allocated and planned differ or are missing ($a)"; fi
  if [ $mib = 64 ]; then
    [ -n "$a" ] && [ "$1" -le $((64 * 1048576)) ] && echo "ok 64 MiB: the chunked plan's device arena is under its budget" ||
      bad "64 MiB: the device arena $1 is over the budget"
  fi
done
set -- $losses
if [ $# = 2 ] && e2e_close "$2" "$1" 1e-6; then echo "ok chunked loss $2, whole $1"; else bad "chunked and whole losses differ: $losses"; fi
[ $fail = 0 ] && echo "PASS hf_long"
exit $fail
