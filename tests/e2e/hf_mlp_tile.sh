#!/bin/sh
# The MLP tiled by rows (plan { mlp_tile }, compiler/mlp_tile.h) on the host
# backend at a long sequence (never downloads anything): a random LLaMA of
# small dimensions and a wide MLP (D = 32, I = 512, 2 layers, V = 1000) at
# T = 8192 (tests/e2e/hf_long.py), its loss chunked by 512 rows in every plan.
#  - as written (mlp_tile = 0) on a 1 GiB host target: step 1's loss is
#    transformers' within 1e-5;
#  - tiled by 1000 rows (not a divisor of 8192): the losses and gradient
#    norms of two steps equal the plan as written within 1e-6, and the
#    device arena is smaller;
#  - "auto" on 1 GiB keeps the MLP as written (--explain says so); on a
#    64 MiB target, where it does not fit as written, the planner tiles it
#    by itself (--explain says so and why), and step 1's loss is the same;
#  - CUDA code generation gives the tiled plan's gated_mlp its launches
#    (a tile at a time);
#  - zinfdump's summary says the plan's MLP is tiled;
#  - every run allocates exactly the plan's device arena (the tiled one's
#    under its 64 MiB);
#  - with the logits whole, zinfgen decodes a tiled plan into the tokens
#    of the plan as written.
#   tests/e2e/hf_mlp_tile.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hf-mlp-tile
T=$W
export OMP_NUM_THREADS=1
col() { awk -v s="$2" -v c="$3" '$1 == "step" && $2 == s { print $c }' "$1"; }

want=$("$ZINF_PY" tests/e2e/hf_long.py make "$T" 8192 512 2> "$T/make.log") ||
  { cat "$T/make.log"; echo "FAIL: making the model or transformers' loss (above)"; exit 1; }
"$Z/zinfc" --from-hf "$T/model" --seq 8192 --emit=zl > "$T/m.zl" 2> "$T/emit.err" || { cat "$T/emit.err"; echo "FAIL: --emit=zl"; exit 1; }
sed -i -e 's/^  micro_batch = .*/  micro_batch = 1/' "$T/m.zl"
for mib in 1024 64; do e2e_host_target "$T/t$mib.zl" small$mib "$mib MiB"; done

# plan NAME TARGET_MIB PLAN_BLOCK: zinfc --explain into $T/NAME.zinfc
plan() {
  { cat "$T/m.zl"; printf '%s\n' "$3"; } > "$T/$1.zl"
  "$Z/zinfc" "$T/$1.zl" --target "$T/t$2.zl" --explain -o "$T/$1.plan" > "$T/$1.zinfc" 2>&1 || { cat "$T/$1.zinfc"; bad "$1: zinfc"; return 1; }
}
# run NAME STEPS: zinfrun, and the device arena allocated against the plan's
run() {
  "$Z/zinfrun" "$T/$1.plan" --backend host --init "$T/model" --data "$T/train.bin" --steps "$2" --losses "$T/$1.losses" > "$T/$1.run" 2>&1 ||
    { tail -20 "$T/$1.run"; bad "$1: zinfrun"; return 1; }
  a=$(sed -n 's/^  arena gpu *\([0-9]*\) bytes .* allocated; the plan says \([0-9]*\) .*/\1 \2/p' "$T/$1.run")
  set -- $1 $a
  if [ -n "$a" ] && [ "$2" = "$3" ]; then echo "ok $1: device arena $2 bytes, as the plan says"; eval "arena_$1=$2"
  else bad "$1: device arena allocated and planned differ or are missing ($a)"; fi
}

arena_written=0 arena_tiled=0 arena_auto=0
if plan written 1024 'plan { mlp_tile = 0; loss_chunk = 512 }'; then
  grep -q "^mlp: as written, 2 blocks of \[8192, 512\] intermediates (pinned by mlp_tile = 0)" "$T/written.zinfc" ||
    bad "written: --explain does not say the MLP is as written"
  if run written 2; then
    got=$(col "$T/written.losses" 1 4)
    if e2e_close "$got" "$want" 1e-5; then echo "ok written: loss $got, transformers $want"
    else bad "written: loss $got, transformers $want (more than 1e-5 apart)"; fi
  fi
fi
if plan tiled 1024 'plan { mlp_tile = 1000; loss_chunk = 512 }'; then
  grep -q "^mlp: tiled, gated_mlp over 1000 of the 8192 rows at a time in 2 blocks .*pinned by mlp_tile)" "$T/tiled.zinfc" ||
    bad "tiled: --explain does not say the MLP is tiled by 1000"
  grep -q "kept for the chunked loss's and the tiled MLP's workspace" "$T/tiled.zinfc" || bad "tiled: --explain keeps no workspace"
  "$Z/zinfdump" "$T/tiled.plan" > "$T/tiled.dump" 2>&1 && grep -q "^mlp: tiled, gated_mlp over 1000 of the 8192 rows at a time in 2 blocks" "$T/tiled.dump" ||
    bad "tiled: zinfdump does not say the MLP is tiled"
  if run tiled 2 && [ -f "$T/written.losses" ]; then
    for s in 1 2; do
      for c in 4 6; do
        a=$(col "$T/tiled.losses" $s $c) w=$(col "$T/written.losses" $s $c)
        if e2e_close "$a" "$w" 1e-6; then echo "ok tiled: step $s $(col "$T/tiled.losses" $s $((c - 1))) $a, as written $w"
        else bad "tiled: step $s column $c $a, as written $w (more than 1e-6 apart)"; fi
      done
    done
  fi
fi
# CUDA code generation: gated_mlp's launches, a tile (9 of them, the last of 192 rows) at a time
# (tests/e2e/cuda_long_fake.sh runs them on the fake driver)
if "$Z/zinfc" "$T/tiled.zl" --target h200 -o "$T/cuda.plan" > "$T/cuda.err" 2>&1 &&
  "$Z/zinfdump" "$T/cuda.plan" --kernels > "$T/cuda.kernels" 2>&1; then
  grep -q "fwd gated_mlp .*workspace [0-9]* B: 54 launches" "$T/cuda.kernels" &&
    grep -q "zk_rmsnorm_fwd <<<(192,1,1), .*+[0-9]*B, .*, 192, 32, " "$T/cuda.kernels" &&
    echo "ok cuda: zinfc generates gated_mlp's launches, 6 a tile" ||
    { grep -m3 "gated_mlp" "$T/cuda.kernels"; bad "cuda: gated_mlp's launches are not 6 a tile over 9 tiles"; }
else head -5 "$T/cuda.err"; bad "cuda: zinfc or zinfdump --kernels failed on the tiled plan"; fi
[ "$arena_tiled" -gt 0 ] && [ "$arena_tiled" -lt "$arena_written" ] && echo "ok the tiled device arena $arena_tiled < $arena_written" ||
  bad "the tiled device arena ($arena_tiled) is not smaller than the written one's ($arena_written)"

if plan roomy 1024 'plan { loss_chunk = 512 }'; then
  grep -q "^mlp: as written, 2 blocks of \[8192, 512\] intermediates (the plan fits with them)" "$T/roomy.zinfc" ||
    bad "roomy: \"auto\" with 1 GiB does not keep the MLP as written"
fi
if plan auto 64 ''; then
  grep -q "^mlp: tiled, gated_mlp over [0-9]* of the 8192 rows at a time in 2 blocks .*the plan does not fit with the MLP as written)" \
    "$T/auto.zinfc" || bad "auto: --explain does not say the planner tiled the MLP"
  if run auto 1 && [ -f "$T/written.losses" ]; then
    a=$(col "$T/auto.losses" 1 4) w=$(col "$T/written.losses" 1 4)
    if e2e_close "$a" "$w" 1e-6; then echo "ok auto: loss $a, as written $w"; else bad "auto: loss $a, as written $w (more than 1e-6 apart)"; fi
    [ "$arena_auto" -gt 0 ] && [ "$arena_auto" -le $((64 * 1048576)) ] && echo "ok auto: the device arena is under its 64 MiB" ||
      bad "auto: the device arena $arena_auto is over the budget"
  fi
fi

# decoding: the logits whole, the MLP tiled or not, the same tokens
for v in 0 1000; do
  plan gen$v 1024 "plan { mlp_tile = $v; loss_chunk = 0 }" || continue
  "$Z/zinfgen" "$T/gen$v.plan" --init "$T/model" --prompt-ids 1,2,3 --max-new 4 > "$T/gen$v.out" 2>&1 || { cat "$T/gen$v.out"; bad "gen$v: zinfgen"; }
done
a=$(grep -E "^[0-9]+( [0-9]+)*$" "$T/gen1000.out" 2> /dev/null) w=$(grep -E "^[0-9]+( [0-9]+)*$" "$T/gen0.out" 2> /dev/null)
[ -n "$a" ] && [ "$a" = "$w" ] && echo "ok zinfgen: the tiled plan decodes $a, as written" || bad "zinfgen: tiled '$a', as written '$w'"

[ $e2e_failed = 0 ] && echo "PASS hf_mlp_tile"
e2e_end
