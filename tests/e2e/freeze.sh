#!/bin/sh
# Fine-tuning with frozen weights (train { freeze = [...] }), on the host
# backend, 1 rank and 2 ranks (ZeRO-3: parameters over 1000 elements split).
# A small random LLaMA made with transformers (tests/e2e/freeze.py) is
# compiled with zinfc --from-hf, about half its parameters frozen: the
# embedding (upstream of everything), all of layer 1 (between trained layer
# 0 and the trained head: the backward must run through it) and layer 0's
# wq. zinfrun --init trains 3 steps and --export-hf's, then --resume's a 4th
# from its checkpoint and exports again; checked:
#  1. the frozen tensors of both exports are bit-identical to the HF
#     checkpoint's (zinf's checkpoint carries them);
#  2. the trained ones' updates equal torch autograd's on the same model with
#     requires_grad=False on the frozen ones, AdamW and clipping alike (1e-5
#     relative);
#  3. zinfc --explain's allocated model states shrink, per rank and whole,
#     by exactly the frozen parameters' gradient + optimizer bytes (f32:
#     4 + 4 + 4 per parameter), which zinfdump reports from the plan's shards;
#  4. on the CUDA backend (the plan's kernels on the fake driver and NCCL of
#     tests/fakecuda) a gpt-micro with frozen weights trains as on the host
#     backend, its frozen weights untouched.
#   tests/e2e/freeze.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir freeze
e2e_mpi
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
fail=0
# eps well above rounding noise: with eps = 1e-8 Adam's first steps are
# lr * sign(g), and an element whose gradient is a cancellation's rounding
# noise flips between zinf and torch (so they differ by 1e-4 relative
# without any freezing); with eps = 1e-3 the update is a smooth function of
# the gradients and comparing updates compares them.
STEPS=3 LR=0.01 WD=0.1 EPS=1e-3
"$ZINF_PY" tests/e2e/freeze.py make "$W" > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the model"; exit 1; }
"$B/bin/zinfc" --from-hf "$W/hf" --emit=zl > "$W/gen.zl" 2> "$W/gen.err" || { cat "$W/gen.err"; echo "FAIL: zinfc --from-hf"; exit 1; }
sed -e "s/lr = 2e-5/lr = $LR/" -e "s/weight_decay = 0.0/weight_decay = $WD/" -e "s/eps = 1e-8/eps = $EPS/" -e 's/warmup = 20$/warmup = 0/' "$W/gen.zl" > "$W/full.zl"
sed -e 's/^  checkpoint = "layer"$/&\n  freeze = ["tok", "llama_block.1.*", "llama_block.0.rope_attn.wq"]/' "$W/full.zl" > "$W/frozen.zl"
grep -q '^  freeze = ' "$W/frozen.zl" || { echo "FAIL: no freeze line added"; exit 1; }
for R in 1 2; do
  cat > "$W/t$R.zl" <<ZL
target t$R { backend = "host"; ranks = $R; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
  for m in full frozen; do { cat "$W/$m.zl"; echo 'plan { whole_below = 1000 }'; } > "$W/$m-$R.zl"; done
done
mkdir -p "$W/nvme"

# 1 and 2: train, export, compare with torch
runs=""
for R in 1 2; do
  "$B/bin/zinfc" "$W/frozen-$R.zl" --target "$W/t$R.zl" -o "$W/f$R.plan" > "$W/f$R.zinfc" 2>&1 || { cat "$W/f$R.zinfc"; echo "FAIL: zinfc $R"; fail=1; continue; }
  if [ "$R" = 1 ]; then set -- "$B/bin/zinfrun"; else set -- mpirun -np "$R" --oversubscribe "$B/bin/zinfrun"; fi
  timeout 120 "$@" "$W/f$R.plan" --init "$W/hf" --data "$W/tok.bin" --steps $STEPS --export-hf "$W/out$R" \
      --checkpoint-dir "$W/ck$R" --losses "$W/l$R" < /dev/null > "$W/run$R.out" 2>&1 ||
    { cat "$W/run$R.out"; echo "FAIL: zinfrun $R rank(s)"; fail=1; continue; }
  runs="$runs $R $W/out$R"
  # the checkpoint carries the frozen weights: a resumed step exports them unchanged
  timeout 120 "$@" "$W/f$R.plan" --data "$W/tok.bin" --steps $((STEPS + 1)) --checkpoint-dir "$W/ck$R" --resume \
      --export-hf "$W/res$R" < /dev/null > "$W/res$R.out" 2>&1 || { cat "$W/res$R.out"; echo "FAIL: resuming $R rank(s)"; fail=1; continue; }
  runs="$runs 0 $W/res$R"
done
# compared with torch at the end, in the one Python process that also checks part 4
py=""
[ -n "$runs" ] && py="check $W $STEPS $LR $WD $EPS $runs"

# A checkpoint whose trained set differs (frozen there, trained here) does
# not --resume, with the way out in the message: export its weights with its
# own plan, --init a new run from them (bit for bit the same weights).
if "$B/bin/zinfc" "$W/full-1.zl" --target "$W/t1.zl" -o "$W/full1.plan" > "$W/full1.zinfc" 2>&1; then
  timeout 60 "$B/bin/zinfrun" "$W/full1.plan" --data "$W/tok.bin" --steps $((STEPS + 2)) --checkpoint-dir "$W/ck1" --resume < /dev/null > "$W/unfreeze.out" 2>&1
  st=$?
  if [ $st = 1 ] && grep -q "parameter 'tok' is frozen in the checkpoint and trains in this plan: .* (zinfrun --resume --steps 0 --export W.safetensors) and begin a new run with --init W.safetensors" "$W/unfreeze.out"; then
    echo "ok   --resume of a frozen checkpoint into a plan that trains it: refused, naming the parameter and the way out"
  else cat "$W/unfreeze.out"; echo "FAIL: resume frozen -> trained (exit $st)"; fail=1; fi
  timeout 60 "$B/bin/zinfrun" "$W/f1.plan" --data "$W/tok.bin" --steps 0 --checkpoint-dir "$W/ck1" --resume --export "$W/w.safetensors" < /dev/null > "$W/w.out" 2>&1 &&
    timeout 60 "$B/bin/zinfrun" "$W/full1.plan" --data "$W/tok.bin" --init "$W/w.safetensors" --steps 0 --export "$W/w2.safetensors" < /dev/null > "$W/w2.out" 2>&1 &&
    cmp -s "$W/w.safetensors" "$W/w2.safetensors" && echo "ok   the way out: --export with the frozen plan, --init of it into the full plan: the same weights, byte for byte" ||
    { cat "$W/w.out" "$W/w2.out"; echo "FAIL: export and --init across the trained sets"; fail=1; }
else cat "$W/full1.zinfc"; echo "FAIL: zinfc full 1"; fail=1; fi

# 3: the bytes. "model states (zinf allocates)": whole and per rank, exact bytes.
alloc() { sed -n 's/^model states (zinf allocates) .* \([0-9][0-9]*\) .* \([0-9][0-9]*\)$/\1 \2/p' "$1"; }
for R in 1 2; do
  "$B/bin/zinfc" --explain "$W/full-$R.zl" --target "$W/t$R.zl" > "$W/full$R.explain" 2>&1 &&
    "$B/bin/zinfc" --explain "$W/frozen-$R.zl" --target "$W/t$R.zl" > "$W/frozen$R.explain" 2>&1 ||
    { cat "$W/full$R.explain" "$W/frozen$R.explain"; echo "FAIL: zinfc --explain $R"; fail=1; continue; }
  set -- $(alloc "$W/full$R.explain") $(alloc "$W/frozen$R.explain")
  fa=$1 fr=$2 za=$3 zr=$4
  saved=$(sed -n 's/^frozen: .* saving .* (\([0-9]*\) bytes) whole, .* (\([0-9]*\) bytes) per rank$/\1 \2/p' "$W/frozen$R.explain")
  sw=${saved% *} sr=${saved#* }
  # the frozen parameters' elements, from the graph; per rank from the plan's shards (zinfdump)
  fz=$("$B/bin/zinfc" --emit=graph "$W/frozen-$R.zl" | sed -n 's/^frozen parameters \([0-9]*\) .*/\1/p')
  dump=$("$B/bin/zinfdump" "$W/f$R.plan" | sed -n 's/^frozen: .* (\([0-9]*\) bytes) per rank saved$/\1/p')
  if [ -n "$fa" ] && [ -n "$za" ] && [ -n "$fz" ] && [ "$sw" = $((fz * 12)) ] && [ $((fa - za)) = "$sw" ] &&
     [ $((fr - zr)) = "$sr" ] && [ "$dump" = "$sr" ] && { [ "$R" = 1 ] && [ "$sr" = "$sw" ] || [ "$sr" -lt "$sw" ]; }; then
    echo "ok   $R rank(s): model states $fa -> $za bytes whole, $fr -> $zr per rank: the $fz frozen parameters' 12 bytes each (zinfdump: $dump per rank)"
  else
    echo "FAIL $R rank(s): model states whole $fa -> $za, per rank $fr -> $zr; saving reported $sw / $sr, zinfdump $dump, $fz frozen parameters"
    fail=1
  fi
done
# 4. The CUDA backend (the plan's own kernels on the fake driver and NCCL of
# tests/fakecuda): gpt-micro with its embedding table (tied to the head) and
# attention frozen, GPU homes on 1 rank and CPU homes on 2: the losses and
# gradient norms are the host backend's on the same plan (2e-4 relative, as
# cuda_fake.sh), and the frozen weights of both exports are bit-identical.
if sh tests/fakecuda/build.sh "$B" > "$W/fake.log" 2>&1; then
  FAKE="$B/fakecuda" UNITS="$B/fakecuda/units"
  mkdir -p "$UNITS"
  export ZINF_CACHE_DIR="$B/fakecuda/nvrtc-cache"
  "$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/gpl.bin" > /dev/null
  sed 's/^  checkpoint = "layer"$/&\n  freeze = ["wte", "block.*.attn.*"]/' tests/e2e/models/gpt-micro.zl > "$W/micro.zl"
  for c in "1 gpu" "2 cpu"; do
    set -- $c; R=$1; k="micro-$R"
    cat > "$W/$k.zl" <<ZL
import "$W/micro.zl"
target fake { nodes = 1; gpus_per_node = $R
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "$2"; optimizer = "$2"; grads = "$2"; whole_below = 1000 }
ZL
    mkdir -p "$W/src-$k"
    "$B/bin/zinfc" "$W/$k.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1 &&
      "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1 ||
      { cat "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL: $k: zinfc or fakecuda_prep"; fail=1; continue; }
    timeout 120 mpirun -np "$R" --oversubscribe "$B/bin/zinfrun" "$W/$k.plan" --data "$W/gpl.bin" --backend host --steps 3 \
        --losses "$W/$k.host" --export "$W/$k-host.safetensors" --quiet < /dev/null > "$W/$k.hout" 2>&1 &&
      env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
        timeout 300 mpirun -np "$R" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES "$B/bin/zinfrun" \
        "$W/$k.plan" --data "$W/gpl.bin" --backend cuda --steps 3 --losses "$W/$k.cuda" --export "$W/$k-cuda.safetensors" \
        < /dev/null > "$W/$k.cout" 2>&1 || { tail -5 "$W/$k.hout" "$W/$k.cout"; echo "FAIL: $k: zinfrun"; fail=1; continue; }
    py="$py + cuda $W/$k"   # freeze.py cuda, at the end
  done
else
  e2e_skip_part "the CUDA backend: the fake driver did not build (it needs the CUDA headers and Open MPI that make deps installs)"
fi
# parts 1, 2 and 4 against torch: one Python (importing torch and transformers
# costs seconds, each comparison less)
# shellcheck disable=SC2086
if [ -n "$py" ]; then "$ZINF_PY" tests/e2e/freeze.py $py || fail=1; fi
e2e_end $fail
