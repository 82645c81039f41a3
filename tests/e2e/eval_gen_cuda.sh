#!/bin/sh
# Evaluation and generation on the CUDA backend: the plan's own kernels on
# the fake driver and NCCL of tests/fakecuda (docs/testing-gpu-fake.md).
# gpt-micro with GPU homes on 1 rank, and CPU homes on 2 ranks:
#   - zinfrun --eval-data: the eval losses (steps 0, 1, 2) and the training
#     losses equal the host backend's on the same plan (2e-4 relative, the
#     tolerance of cuda_fake.sh: the GPU's reductions run in another order);
#   - zinfgen (1 rank): greedy and seeded sampled tokens from the same
#     checkpoint equal the host backend's token for token.
# Then zinfgen --decode kv on the CUDA backend (the plan's decode kernels on
# the emulator; docs/generation.md): its 14 greedy tokens after a prompt of
# 4 (past T = 16: the window slides, the cache is filled again) equal the
# host decoder's and the window's, and the logits of every new token (--logits)
# are within 1e-5 of the largest of the host decoder's (f32; bf16: within
# two bf16 steps of it, 8e-3, and at most 2% of them not equal: both round
# at the same points, so only a rounding tipped by the order of a sum
# differs, where a changed kernel moves most of them),
# for gpt-micro (learned positions, layernorm, gelu; f32, GPU homes on 1
# rank, from the checkpoint above) and llama-micro
# (rope, rmsnorm, silu, grouped kv heads; f32, CPU homes on 1 rank, and
# bf16, NVMe homes with --nvme, on 2 ranks); and a decoder larger than the device memory the plan leaves is
# refused (exit 1, naming the way out; --decode auto then takes the window
# and says why). The models it cannot decode are refused by the analysis
# the host decoder shares (tests/unit/test_decode.c).
#   tests/e2e/eval_gen_cuda.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir evalcuda
e2e_mpi
. tests/fakecuda/env.sh || exit 1
fail=0
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
"$B/bin/zinftok" README.md -o "$W/eval.bin" > /dev/null || exit 1
cuda() { # RANKS PROGRAM ARGS...: on the fake driver
  r=$1; shift
  env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
    timeout 300 mpirun -np "$r" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES "$@" < /dev/null
}
for c in "1 gpu" "2 cpu"; do
  set -- $c; R=$1; k="micro-$R"
  cat > "$W/$k.zl" <<ZL
import "$(pwd)/tests/e2e/models/gpt-micro.zl"
target fake { nodes = 1; gpus_per_node = $R
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "$2"; optimizer = "$2"; grads = "$2"; whole_below = 1000 }
ZL
  mkdir -p "$W/src-$k"
  if ! "$B/bin/zinfc" "$W/$k.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1 ||
     ! "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1; then
    cat "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL: $k: zinfc or fakecuda_prep"; fail=1; continue
  fi
  run="$W/$k.plan --data $W/train.bin --steps 2 --eval-data $W/eval.bin --eval-every 1 --eval-batches 2 --quiet"
  # shellcheck disable=SC2086
  if ! timeout 120 mpirun -np "$R" --oversubscribe "$B/bin/zinfrun" $run --backend host --losses "$W/$k.host" \
         --checkpoint-dir "$W/ck-$k" --checkpoint-every 2 < /dev/null > "$W/$k.hout" 2>&1 ||
     ! cuda "$R" "$B/bin/zinfrun" $run --backend cuda --losses "$W/$k.cuda" > "$W/$k.cout" 2>&1; then
    tail -5 "$W/$k.hout" "$W/$k.cout"; echo "FAIL: $k: zinfrun"; fail=1; continue
  fi
  # every line (step and eval): the same kind, step, and loss within 2e-4
  if awk 'NR == FNR { a[FNR] = $0; n = FNR; next }
          { split(a[FNR], h); s = ($1 == "eval") ? 3 : 2; l = ($1 == "eval") ? 5 : 4
            if ($1 != h[1] || $s != h[s]) bad = 1
            d = $l - h[l]; if (d < 0) d = -d; if (d > 2e-4 * (h[l] < 0 ? -h[l] : h[l])) bad = 1; m = FNR }
          END { exit bad || m != n || n < 5 }' "$W/$k.host" "$W/$k.cuda"; then
    echo "ok   $k: eval and training losses on the CUDA backend = the host backend's ($(grep -c '^eval' "$W/$k.cuda") evals)"
  else
    echo "FAIL $k: the CUDA backend's losses differ from the host backend's"; paste "$W/$k.host" "$W/$k.cuda"; fail=1
  fi
done
# zinfgen, 1 rank, GPU homes, from the host run's checkpoint: greedy, and
# sampled with a seed (a varied text that reads the whole distribution)
for mode in "--temperature 0" "--temperature 1 --top-k 40 --seed 7"; do
  g="--checkpoint $W/ck-micro-1 --prompt-ids 5,17,30,2 --max-new 12 $mode --quiet"
  # shellcheck disable=SC2086
  if "$B/bin/zinfgen" "$W/micro-1.plan" $g --backend host > "$W/gen.host" 2> "$W/gen.herr" &&
     cuda 1 "$B/bin/zinfgen" "$W/micro-1.plan" $g --backend cuda > "$W/gen.cuda" 2> "$W/gen.cerr"; then
    if [ -s "$W/gen.host" ] && cmp -s "$W/gen.host" "$W/gen.cuda"; then
      echo "ok   zinfgen $mode on the CUDA backend = the host backend's: $(tr '\n' ' ' < "$W/gen.host")"
    else
      echo "FAIL zinfgen $mode: host [$(cat "$W/gen.host")] cuda [$(cat "$W/gen.cuda")]"; fail=1
    fi
  else
    cat "$W/gen.herr" "$W/gen.cerr" | tail -6; echo "FAIL: zinfgen $mode"; fail=1
  fi
done
# ---- --decode kv on the CUDA backend ----
mkplan() { # NAME MODEL.zl RANKS HOMES DTYPE: $W/NAME.plan with GPU code, its units emulated
  # the model's file at a path that does not change from run to run (the units' comments name
  # its lines, and fakecuda_prep keeps a unit built from the same text): the model itself in f32,
  # else a copy beside the emulated units
  m="$(pwd)/$2"
  if [ "$5" != f32 ]; then
    m="$(cd "$UNITS/.." && pwd)/eval_gen_cuda-$(basename "$2" .zl)-$5.zl"
    sed "s/dtype = f32/dtype = $5/" "$2" > "$W/copy.zl"
    cmp -s "$W/copy.zl" "$m" || mv -f "$W/copy.zl" "$m"
  fi
  cat > "$W/$1.zl" <<ZL
import "$m"
target fake { nodes = 1; gpus_per_node = $3
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  nvme { paths = ["$W"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "$4"; optimizer = "$4"; grads = "$4"; whole_below = 1000 }
ZL
  mkdir -p "$W/src-$1"
  "$B/bin/zinfc" "$W/$1.zl" --kernels=sm_90 --kernel-src="$W/src-$1" -o "$W/$1.plan" > "$W/$1.zinfc" 2>&1 &&
    "$FAKE/fakecuda_prep" "$W/$1.plan" "$W/src-$1" sm_90 "$UNITS" > "$W/$1.prep" 2>&1 ||
    { cat "$W/$1.zinfc" "$W/$1.prep"; echo "FAIL: $1: zinfc or fakecuda_prep"; fail=1; return 1; }
}
host() { r=$1; shift; timeout 120 mpirun -np "$r" --oversubscribe "$@" < /dev/null; }
kvcheck() { # NAME RANKS PLAN TOL FRAC ARGS...: kv on cuda = kv on host = the window (on the host:
  # the window on cuda = on the host is the part above; the emulated window is the slow one); the
  # logits within TOL of the largest, and at most FRAC of them not equal
  n=$1 r=$2 pl=$3 tol=$4 frac=$5; shift 5
  g="$pl --prompt-ids 5,17,30,2 --max-new 14 --temperature 0 --nvme $W $*"
  # shellcheck disable=SC2086
  if ! cuda "$r" "$B/bin/zinfgen" $g --backend cuda --decode kv --logits "$W/$n.lc" > "$W/$n.kc" 2> "$W/$n.ekc" ||
     ! host "$r" "$B/bin/zinfgen" $g --backend host --decode kv --logits "$W/$n.lh" --quiet > "$W/$n.kh" 2> "$W/$n.ekh" ||
     ! host "$r" "$B/bin/zinfgen" $g --backend host --decode window --quiet > "$W/$n.wh" 2> "$W/$n.ewh"; then
    tail -n 3 "$W/$n.ekc" "$W/$n.ekh" "$W/$n.ewh"; echo "FAIL $n: zinfgen"; fail=1; return
  fi
  e2e_kv_verdict "$n" 14 "$tol" "$frac" 1e-7 "--decode kv on cuda = kv on host = the window" 1 || fail=1
}
kvcheck kv-gpt-gpu-1 1 "$W/micro-1.plan" 1e-5 1 --checkpoint "$W/ck-micro-1"
mkplan llama-f32 tests/e2e/models/llama-micro.zl 1 cpu f32 && kvcheck kv-llama-f32-cpu-1 1 "$W/llama-f32.plan" 1e-5 1
mkplan llama-bf16 tests/e2e/models/llama-micro.zl 2 nvme bf16 && kvcheck kv-llama-bf16-nvme-2 2 "$W/llama-bf16.plan" 8e-3 0.02
# the device memory the plan leaves (FAKECUDA_MEM: the plan's use and half
# the decoder's): --decode kv refused, auto takes the window
used=$(sed -n 's/.*(\([0-9.]*\) KiB of rank 0.s GPU memory beside the plan.s \([0-9.]*\) MiB.*/\2 \1/p' "$W/kv-gpt-gpu-1.ekc" |
       awk '{ printf "%d", $1 * 1048576 + $2 * 512 }')
g="$W/micro-1.plan --prompt-ids 5 --max-new 1 --temperature 0 --backend cuda"
want="zinfgen: --decode kv: the KV-cache decoder needs 280.00 KiB of GPU memory (the parameters whole"
# shellcheck disable=SC2086
if [ -n "$used" ] && ! FAKECUDA_MEM=$used cuda 1 "$B/bin/zinfgen" $g --decode kv > /dev/null 2> "$W/mem.err" &&
   grep -q "^$want.* is free beside the plan's arenas: use --decode window$" "$W/mem.err" &&
   FAKECUDA_MEM=$used cuda 1 "$B/bin/zinfgen" $g > /dev/null 2> "$W/mem.auto" && grep -q "window 2 x 16.*(no KV cache: the KV-cache decoder needs" "$W/mem.auto"; then
  echo "ok   --decode kv refused beyond the device memory the plan leaves ($used bytes of device memory); auto takes the window"
else
  echo "FAIL: the device memory refusal (FAKECUDA_MEM=$used)"; cat "$W/mem.err" "$W/mem.auto" 2> /dev/null | tail -4; fail=1
fi
exit $fail
