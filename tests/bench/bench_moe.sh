#!/bin/sh
# Tokens/s of zinfrun (1 rank, host backend, nothing offloaded) on a
# Mixtral-shaped mixture of experts (stdlib/moe.zl) beside transformers'
# MixtralForCausalLM on PyTorch CPU (tests/bench/torch_moe.py), the same
# shape, batch and thread count: f32, forward + backward + AdamW each step,
# no clipping, no load-balancing loss, no activation checkpointing. The runs
# alternate ZINF_BENCH_REPS times (default 3); the table shows the median of
# each side's median step after the warm-up, and of their ratio.
#   tests/bench/bench_moe.sh BUILD
# ZINF_BENCH_THREADS (default "1 2").
B=${1:-build}
REPS=${ZINF_BENCH_REPS:-3}
THREADS=${ZINF_BENCH_THREADS:-"1 2"}
ROOT=$(pwd)
. tests/pyenv.sh
W=$(mktemp -d /tmp/zinf-bench-moe.XXXXXX)
trap 'rm -rf "$W"' EXIT
if [ -z "$ZINF_PY" ] || ! "$ZINF_PY" -c "import transformers" 2>/dev/null; then
  echo "transformers is not installed (make deps): zinfrun only"
  ZINF_PY=""
fi
V=1024 T=128 D=256 H=4 KV=2 E=8 K=2 F=512 L=2 MB=4 WU=2 ST=10
"$B/bin/zinftok" "$ROOT/README.md" -o "$W/train.bin" > /dev/null || exit 1
cat > "$W/moe.zl" <<ZL
import "llama"
import "moe"
const V = $V, T = $T, D = $D, H = $H, KV = $KV, E = $E, K = $K, F = $F, L = $L
model mixtral_bench(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = embedding(tok, tokens)
  load = moe_load(experts = E)
  repeat L { x, load = moe_block(x, load, H, KV, E, K, F, normalize = true) }
  x = rms(x)
  head = param [D, V] init normal(0.02)
  loss cross_entropy(linear(x, head), targets)
}
train {
  micro_batch = $MB
  steps = 100000
  dtype = f32
  optimizer = adam(lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0)
  checkpoint = "none"
}
target bench { backend = "host"; ranks = 1; budget = 12 GiB
  cpu { memory = 16 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu" }
ZL
"$B/bin/zinfc" "$W/moe.zl" -o "$W/moe.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; exit 1; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
run_zinf() { # threads
  OMP_NUM_THREADS=$1 ZINF_PLAIN=1 "$B/bin/zinfrun" "$W/moe.plan" --data "$W/train.bin" --steps $((WU + ST)) \
    --backend host < /dev/null > "$W/out" 2>&1 || { tail -5 "$W/out" >&2; echo nan; return; }
  grep -E '^step +[0-9]+/' "$W/out" | sed 's#^step *\([0-9]*\)/.* \([0-9.]*\) ms/step.*#\1 \2#' |
    awk -v w="$WU" '$1 > w {print $2}' | median
}
run_torch() { # threads
  [ -n "$ZINF_PY" ] || { echo nan; return; }
  OMP_NUM_THREADS=$1 "$ZINF_PY" "$ROOT/tests/bench/torch_moe.py" --V $V --T $T --D $D --H $H --KV $KV --E $E --K $K \
    --F $F --L $L --B $MB --threads "$1" --warmup $WU --steps $ST 2> "$W/terr" |
    sed -n 's/^torch \([0-9.]*\) ms\/step.*/\1/p' | grep . || { tail -3 "$W/terr" >&2; echo nan; }
}
echo "zinfrun (1 rank, host backend) vs transformers' MixtralForCausalLM on PyTorch CPU, f32, AdamW step included;"
echo "V $V, T $T, D $D, $H heads ($KV kv), $E experts of width $F, $K a token, $L layers; median of $REPS alternating runs"
printf "%9s %7s %14s %14s %9s\n" "B x T" threads "zinfrun tok/s" "PyTorch tok/s" "ratio"
status=0
for th in $THREADS; do
  : > "$W/z"; : > "$W/t"; : > "$W/r"
  for rep in $(seq "$REPS"); do
    z=$(run_zinf "$th"); t=$(run_torch "$th")
    echo "$z" >> "$W/z"; echo "$t" >> "$W/t"
    awk -v z="$z" -v t="$t" 'BEGIN { if (z + 0 > 0 && t + 0 > 0) print t / z }' >> "$W/r"
  done
  zm=$(median < "$W/z"); tm=$(median < "$W/t"); rm=$(median < "$W/r")
  awk -v b="$MB x $T" -v th="$th" -v zm="$zm" -v tm="$tm" -v rm="$rm" -v tok=$((MB * T)) 'BEGIN {
    zt = zm + 0 > 0 ? sprintf("%.0f", tok / zm * 1e3) : "-"; tt = tm + 0 > 0 ? sprintf("%.0f", tok / tm * 1e3) : "-";
    r = rm + 0 > 0 ? sprintf("%.2fx", rm) : "-";
    printf "%9s %7s %14s %14s %9s\n", b, th, zt, tt, r }'
  [ "$zm" = nan ] && status=1
done
echo "ratio: zinfrun tokens/s / PyTorch tokens/s (median of the per-run ratios); goal >= 1.00x"
exit $status
