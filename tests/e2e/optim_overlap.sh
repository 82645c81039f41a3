#!/bin/sh
# The optimizer overlapped with the backward (docs/schedule.md, "The
# speculative optimizer") gives the serial order's results bit for bit.
# gpt2-tiny with its optimizer state in CPU memory, compiled twice, with
# plan { optimizer_overlap = "on" } and "off", trained on the host backend:
# the loss lines (every digit, with the gradient norm) and the exported
# parameters (every byte) must be equal. Cases: 1, 2 and 4 ranks; f32, bf16
# and f16 with dynamic loss scaling (a scale that overflows, so that steps
# are skipped, then one that does not); clipping active (grad_clip = 1, the
# norm is about 6: every step redoes its speculative Adams) and inactive
# (grad_clip = 100: none does). The "on" plan must really speculate: its
# explanation says so and its schedule has Adams with a backup in the
# micro-batch; the run must have redone (clipping) or not (no clipping).
# The same on the CUDA backend over the fake driver.
B=${1:-build}
ROOT=$(pwd)
. tests/e2e/lib.sh
e2e_workdir overlap
e2e_mpi
STEPS=3
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
fail=0
# model FILE DTYPE CLIP LOSS_SCALE RANKS OVERLAP
model() {
  sed -e "s/grad_clip = 1.0/grad_clip = $3/" -e "s/dtype = f32/dtype = $2\n  loss_scale = $4/" \
      -e "s|^import \"nn\"|import \"$ROOT/stdlib/nn\"|" "$ROOT/examples/gpt2-tiny.zl" > "$1"
  cat >> "$1" <<ZL
target t { backend = "host"; ranks = $5; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
plan { params = "gpu"; optimizer = "cpu"; grads = "cpu"; whole_below = 1000; optimizer_overlap = "$6" }
ZL
}
# dtype clip loss_scale ranks redo(yes: every step redone; no: none; some)
while read -r dt clip ls ranks redo; do
  [ -z "$dt" ] && continue
  name="$dt-clip$clip-ls$ls-r$ranks"
  for ov in on off; do
    model "$W/$name-$ov.zl" "$dt" "$clip" "$ls" "$ranks" "$ov"
    if ! "$B/bin/zinfc" "$W/$name-$ov.zl" -o "$W/$name-$ov.plan" --explain > "$W/$name-$ov.zinfc" 2>&1; then
      echo "FAIL $name $ov: zinfc"; tail -5 "$W/$name-$ov.zinfc"; fail=1; continue 2
    fi
    if ! timeout 300 mpirun -np "$ranks" --oversubscribe "$B/bin/zinfrun" "$W/$name-$ov.plan" --data "$W/train.bin" \
          --steps $STEPS --losses "$W/$name-$ov.loss" --export "$W/$name-$ov.safetensors" < /dev/null > "$W/$name-$ov.out" 2>&1; then
      echo "FAIL $name $ov: zinfrun"; tail -10 "$W/$name-$ov.out"; fail=1; continue 2
    fi
  done
  if ! grep -q "^chosen: .*optimizer overlapped with the backward" "$W/$name-on.zinfc" ||
     grep -q "optimizer overlapped" "$W/$name-off.zinfc"; then
    echo "FAIL $name: the on plan does not overlap, or the off plan does"; grep '^chosen' "$W/$name-on.zinfc" "$W/$name-off.zinfc"; fail=1; continue
  fi
  nspec=$("$B/bin/zinfdump" "$W/$name-on.plan" --schedule --rank 0 2>/dev/null | grep -c "cpu_adam.* - =cpu:\(adam_backup\|twin\.\)")
  if [ "$nspec" -lt 10 ]; then echo "FAIL $name: $nspec speculative Adams in the on plan's schedule"; fail=1; continue; fi
  # one progress line per step (a terminal's \r ... ESC[K lines split apart)
  tr -d '\r' < "$W/$name-on.out" | sed 's/\x1b\[K/\n/g' | grep "^step" > "$W/$name-on.steps"
  nredo=$(grep -c "speculative Adams" "$W/$name-on.steps")
  case $redo in
    yes) [ "$nredo" -eq $STEPS ] ;;
    no) [ "$nredo" -eq 0 ] ;;
    some) [ "$nredo" -ge 1 ] && grep -q "skipped: overflow; speculative Adams undone" "$W/$name-on.steps" &&
          grep -vq "skipped" "$W/$name-on.steps" ;;
  esac || { echo "FAIL $name: $nredo of $STEPS steps redone, expected $redo"; cat "$W/$name-on.steps"; fail=1; continue; }
  # and finite: a skipped f16 step once left the staged parameter's garbage in its home
  if awk '$4 !~ /^[0-9.]+$/ { bad = 1 } END { exit !bad }' "$W/$name-on.loss"; then echo "FAIL $name: a loss is not a number"; cat "$W/$name-on.loss"; fail=1; continue; fi
  if cmp -s "$W/$name-on.loss" "$W/$name-off.loss" && cmp -s "$W/$name-on.safetensors" "$W/$name-off.safetensors"; then
    echo "ok   $name: $nspec speculative Adams, $nredo of $STEPS steps redone; losses and parameters bit-identical ($(tail -1 "$W/$name-on.loss"))"
  else
    echo "FAIL $name: the overlapped run differs from the serial one"; paste "$W/$name-on.loss" "$W/$name-off.loss"; fail=1
  fi
done <<EOF
f32 1.0 1 2 yes
f32 100.0 1 2 no
bf16 1.0 1 4 yes
bf16 100.0 1 1 no
f16 100.0 262144 2 some
f16 1.0 65536 1 yes
EOF

# no clipping and no loss scale: nothing can change a step after the
# fact, so the Adams run in the backward as they are (no redo range)
for ov in on off; do
  model "$W/noclip-$ov.zl" bf16 0 1 2 "$ov"
  "$B/bin/zinfc" "$W/noclip-$ov.zl" -o "$W/noclip-$ov.plan" --explain > "$W/noclip-$ov.zinfc" 2>&1 &&
    timeout 300 mpirun -np 2 --oversubscribe "$B/bin/zinfrun" "$W/noclip-$ov.plan" --data "$W/train.bin" --steps $STEPS \
      --losses "$W/noclip-$ov.loss" --export "$W/noclip-$ov.safetensors" --quiet < /dev/null > "$W/noclip-$ov.out" 2>&1 ||
    { tail -5 "$W/noclip-$ov.zinfc" "$W/noclip-$ov.out"; echo "FAIL no clipping, $ov"; fail=1; }
done
if grep -q "^chosen: .*optimizer overlapped with the backward (of" "$W/noclip-on.zinfc" &&
   cmp -s "$W/noclip-on.loss" "$W/noclip-off.loss" && cmp -s "$W/noclip-on.safetensors" "$W/noclip-off.safetensors"; then
  echo "ok   no clipping: the Adams in the backward without speculation, bit for bit the serial order's"
else echo "FAIL no clipping"; grep '^chosen' "$W/noclip-on.zinfc"; paste "$W/noclip-on.loss" "$W/noclip-off.loss"; fail=1; fi

# resume: the twins exchange roles every step, the checkpoint holds the
# state wherever it is. A bf16 speculative plan (twins), 2 ranks, clipping:
# 5 steps straight = 3 steps (an odd number: the twins hold the state), checkpoint, resume, 2 more, bit for bit
model "$W/res.zl" bf16 1.0 1 2 on
"$B/bin/zinfc" "$W/res.zl" -o "$W/res.plan" > /dev/null 2>&1 || { echo "FAIL resume: zinfc"; fail=1; }
run_res() { timeout 300 mpirun -np 2 --oversubscribe "$B/bin/zinfrun" "$W/res.plan" --data "$W/train.bin" --quiet "$@" < /dev/null > "$W/res.out" 2>&1 || { tail -5 "$W/res.out"; false; }; }
if run_res --steps 5 --losses "$W/res-straight" --export "$W/res-straight.safetensors" &&
   run_res --steps 3 --checkpoint-every 3 --checkpoint-dir "$W/ck" --losses "$W/res-split" &&
   run_res --steps 5 --checkpoint-dir "$W/ck" --resume --losses "$W/res-split" --export "$W/res-split.safetensors" &&
   cmp -s "$W/res-straight" "$W/res-split" && cmp -s "$W/res-straight.safetensors" "$W/res-split.safetensors"; then
  echo "ok   resume of a plan with twins: 3 + 2 steps = 5 steps, bit for bit ($(tail -1 "$W/res-split"))"
else echo "FAIL resume of a plan with twins"; paste "$W/res-straight" "$W/res-split"; fail=1; fi

# the CUDA backend (fake driver, kernels on the emulator): gpt-micro, 2
# ranks, optimizer state in CPU memory, speculative (f32: backups; bf16:
# twins): the same losses and norms, bit for bit, as its serial plan on the
# CUDA backend, and as the host backend's within 2e-4 (f32, split_cuda's
# tolerance: other kernels) or 2e-3 (bf16)
. tests/fakecuda/env.sh || exit 1
for dt in f32 bf16; do
  sed "s/dtype = f32/dtype = $dt/" "$ROOT/tests/e2e/models/gpt-micro.zl" > "$W/micro-$dt.zl"
  for ov in on off; do
    k=cu-$dt-$ov
    cat > "$W/$k.zl" <<ZL
import "$W/micro-$dt.zl"
target fake { nodes = 1; gpus_per_node = 2
  gpu { memory = 64 MiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 1 GB/s; cores = 2; flops = 1 T }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { whole_below = 1000; optimizer = "cpu"; optimizer_overlap = "$ov" }
ZL
    mkdir -p "$W/src-$k"
    if ! "$B/bin/zinfc" "$W/$k.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" --explain > "$W/$k.zinfc" 2>&1 ||
       ! "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1; then
      tail -5 "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL $k: zinfc or fakecuda_prep"; fail=1; continue
    fi
    if ! env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
           timeout 300 mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES \
           "$B/bin/zinfrun" "$W/$k.plan" --data "$W/train.bin" --steps $STEPS --backend cuda --losses "$W/$k.loss" \
           < /dev/null > "$W/$k.out" 2>&1; then
      tail -5 "$W/$k.out"; echo "FAIL $k: zinfrun"; fail=1; continue
    fi
  done
  k=cu-$dt
  timeout 120 mpirun -np 2 --oversubscribe "$B/bin/zinfrun" "$W/$k-on.plan" --data "$W/train.bin" --steps $STEPS --backend host \
    --losses "$W/$k-host.loss" --quiet < /dev/null > "$W/$k-host.out" 2>&1 || { tail -5 "$W/$k-host.out"; echo "FAIL $k: the host run"; fail=1; }
  tol=2e-4; form=adam_backup
  [ "$dt" = bf16 ] && tol=2e-3 && form=twin.
  if grep -q "overlapped with the backward (speculative)" "$W/$k-on.zinfc" && [ "$(grep -o "speculative Adams redone" "$W/$k-on.out" | wc -l)" -eq $STEPS ] &&
     "$B/bin/zinfdump" "$W/$k-on.plan" --schedule --rank 0 | grep -q "cpu_adam.* - =cpu:$form" &&
     cmp -s "$W/$k-on.loss" "$W/$k-off.loss" &&
     awk -v tol=$tol 'NR == FNR { a[FNR] = $0; n = FNR; next }
          { split(a[FNR], h); for (i = 4; i <= 6; i += 2) { d = $i - h[i]; if (d < 0) d = -d; if (d > tol * (h[i] < 0 ? -h[i] : h[i])) bad = 1 } m = FNR }
          END { exit bad || m != n || n != 3 }' "$W/$k-host.loss" "$W/$k-on.loss"; then
    echo "ok   CUDA backend, $dt, 2 ranks, speculative ($form): = its serial plan's losses and norms bit for bit, = the host backend's ($(tail -1 "$W/$k-on.loss"))"
  else
    echo "FAIL CUDA backend, $dt, with the speculative optimizer"; grep '^chosen' "$W/$k-on.zinfc"; paste "$W/$k-on.loss" "$W/$k-off.loss" "$W/$k-host.loss"; fail=1
  fi
done

# accumulation: the overlap needs one micro-batch per step, so "on" still
# compiles, serial, and says why
model "$W/acc.zl" f32 1.0 1 1 on
sed -i 's/micro_batch = 4/micro_batch = 2\n  grad_accum = 2/' "$W/acc.zl"
if "$B/bin/zinfc" "$W/acc.zl" -o "$W/acc.plan" --explain > "$W/acc.out" 2>&1 && ! grep -q "overlapped" "$W/acc.out"; then
  echo "ok   grad_accum = 2: serial order"
else echo "FAIL grad_accum = 2 with optimizer_overlap = \"on\""; tail -3 "$W/acc.out"; fail=1; fi
# a bad value is refused by name
model "$W/bad.zl" f32 1.0 1 1 sometimes
if "$B/bin/zinfc" "$W/bad.zl" -o "$W/bad.plan" > "$W/bad.out" 2>&1; then echo "FAIL optimizer_overlap = \"sometimes\" accepted"; fail=1
elif grep -q "optimizer_overlap must be \"auto\", \"on\" or \"off\"" "$W/bad.out"; then echo "ok   a bad optimizer_overlap is refused"
else echo "FAIL the refusal of a bad optimizer_overlap"; cat "$W/bad.out"; fail=1; fi
exit $fail
