#!/bin/sh
# train { no_decay }: which parameters AdamW steps without weight decay.
# A random GPT-2 (tests/e2e/no_decay.py: biases and norm weights away from 0
# and 1) compiled with zinfc --from-hf, whose train block says no_decay =
# ["bias", "norm"], and again with no_decay = [] (every parameter decayed);
# one step each from the same weights (lr 0.01, weight_decay 0.5), exported.
# Checked against the closed form of AdamW's decoupled decay: the parameters
# the default leaves undecayed are exactly the Hugging Face Trainer's
# (Trainer.get_decay_parameter_names), each moved -lr*wd*w0 less than with
# [], the others bit-identical. The same on the CUDA backend (fake driver:
# the weight decay of each zk_adam launch). Last, an unknown class is
# refused, naming the classes.
#   tests/e2e/no_decay.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir no-decay
T=$W
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
LR=0.01 WD=0.5
"$ZINF_PY" tests/e2e/no_decay.py make "$T" > "$T/make.log" 2>&1 || { cat "$T/make.log"; echo "FAIL: making the model"; exit 1; }
"$Z/zinfc" --from-hf "$T/hf" --emit=zl > "$T/gen.zl" 2> "$T/gen.err" || { cat "$T/gen.err"; echo "FAIL: zinfc --from-hf"; exit 1; }
grep -q '^  no_decay = \["bias", "norm"\]$' "$T/gen.zl" || { grep -n "train" -A12 "$T/gen.zl"; bad "--from-hf's train block has no no_decay = [\"bias\", \"norm\"]"; }
sed -e "s/lr = 2e-5/lr = $LR/" -e "s/weight_decay = 0.0/weight_decay = $WD/" -e 's/warmup = 20$/warmup = 0/' "$T/gen.zl" > "$T/def.zl"
sed -e 's/^  no_decay = .*/  no_decay = []/' "$T/def.zl" > "$T/all.zl"
cat > "$T/host.zl" <<ZL
target host1 { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
for m in def all; do
  "$Z/zinfc" "$T/$m.zl" --target "$T/host.zl" -o "$T/$m.plan" > "$T/$m.zinfc" 2>&1 || { cat "$T/$m.zinfc"; bad "zinfc $m"; continue; }
  timeout 120 "$Z/zinfrun" "$T/$m.plan" --backend host --init "$T/hf" --data "$T/tok.bin" --steps 1 \
    --export-hf "$T/out-$m" < /dev/null > "$T/$m.log" 2>&1 || { tail -5 "$T/$m.log"; bad "zinfrun $m"; }
done
printf 'host backend: '
"$ZINF_PY" tests/e2e/no_decay.py check "$T" $LR $WD "$T/out-all" "$T/out-def" 2> "$T/check.err" || { cat "$T/check.err"; fail=1; }

# the CUDA backend: the weight decay of each zk_adam launch
if . tests/fakecuda/env.sh; then
  for m in def all; do
    { cat "$T/$m.zl"; cat <<ZL
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 } }
ZL
    } > "$T/cuda-$m.zl"
    mkdir -p "$T/src-$m"
    if "$Z/zinfc" "$T/cuda-$m.zl" --kernels=sm_90 --kernel-src="$T/src-$m" -o "$T/cuda-$m.plan" > "$T/cuda-$m.zinfc" 2>&1 &&
       "$FAKE/fakecuda_prep" "$T/cuda-$m.plan" "$T/src-$m" sm_90 "$UNITS" > "$T/cuda-$m.prep" 2>&1; then
      env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=1 \
        timeout 300 "$Z/zinfrun" "$T/cuda-$m.plan" --backend cuda --init "$T/hf" --data "$T/tok.bin" --steps 1 \
        --export-hf "$T/cuda-out-$m" < /dev/null > "$T/cuda-$m.log" 2>&1 || { tail -5 "$T/cuda-$m.log"; bad "zinfrun $m on the fake CUDA driver"; }
    else
      cat "$T/cuda-$m.zinfc" "$T/cuda-$m.prep"; bad "zinfc or fakecuda_prep for the CUDA backend ($m)"
    fi
  done
  printf 'CUDA backend (fake driver): '
  "$ZINF_PY" tests/e2e/no_decay.py check "$T" $LR $WD "$T/cuda-out-all" "$T/cuda-out-def" 2> "$T/cuda-check.err" ||
    { cat "$T/cuda-check.err"; fail=1; }
else
  fail=1
fi

# an unknown class
sed -e 's/^  no_decay = .*/  no_decay = ["bias", "embedding"]/' "$T/def.zl" > "$T/badclass.zl"
if "$Z/zinfc" "$T/badclass.zl" --target "$T/host.zl" -o "$T/bad.plan" > "$T/badclass.out" 2>&1; then bad "an unknown class was compiled"
else
  grep -q 'no_decay: unknown parameter class "embedding"; the classes are "bias"' "$T/badclass.out" &&
    echo "ok   an unknown class is refused, naming the classes" || { cat "$T/badclass.out"; bad "the unknown class's message"; }
fi
exit $fail
