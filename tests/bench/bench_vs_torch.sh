#!/bin/sh
# Tokens/s of zinfrun (1 rank, host backend, nothing offloaded) beside
# PyTorch's (tests/bench/torch_gpt2.py) on the same GPT-2 shapes, batch,
# sequence and thread count: gpt2-tiny (examples/gpt2-tiny.zl's shape) and a
# gpt2-small-shaped model at seq 256. Like for like on both sides: f32,
# forward + backward + global-norm clipping + the AdamW step in each step,
# no activation checkpointing (ZINF_BENCH_CKPT=layer checkpoints every block
# on both sides), OMP_NUM_THREADS and torch.set_num_threads equal. The runs
# alternate (zinfrun, PyTorch, per model and thread count) ZINF_BENCH_REPS
# times (default 3); each run's figure is the median step after the warm-up,
# and the table shows the median over the runs of each, and of their ratio.
#   tests/bench/bench_vs_torch.sh BUILD
# ZINF_BENCH_THREADS (default "1 2"), ZINF_BENCH_SMALL_BATCH (default 1),
# ZINF_BENCH_MODELS (default "tiny small").
B=${1:-build}
REPS=${ZINF_BENCH_REPS:-3}
THREADS=${ZINF_BENCH_THREADS:-"1 2"}
SB=${ZINF_BENCH_SMALL_BATCH:-1}
MODELS=${ZINF_BENCH_MODELS:-"tiny small"}
CKPT=${ZINF_BENCH_CKPT:-none}
ROOT=$(pwd)
. tests/pyenv.sh
W=$(mktemp -d /tmp/zinf-bench-torch.XXXXXX)
trap 'rm -rf "$W"' EXIT
if [ -z "$ZINF_PY" ] || ! "$ZINF_PY" -c "import torch" 2>/dev/null; then
  echo "PyTorch is not installed (make deps makes ~/.cache/zinf/venv with torch; tests/pyenv.sh finds it): zinfrun only"
  ZINF_PY=""
fi
"$B/bin/zinftok" "$ROOT/README.md" -o "$W/train.bin" > /dev/null || exit 1
[ -f /usr/share/common-licenses/GPL-3 ] && "$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null

# name V T D H L B warmup steps
model_line() {
  case "$1" in
    tiny) echo "gpt2-tiny 256 64 128 4 4 4 3 20" ;;
    small) echo "gpt2-small-s256 50257 256 768 12 12 $SB 1 4" ;;
  esac
}

write_model() { # name V T D H L B
  cat > "$W/$1.zl" <<ZL
import "nn"
const V = $2, T = $3, D = $4, H = $5, L = $6
model gpt2(tokens: i32[B, T], targets: i32[B, T]) {
  wte = param [V, D] init normal(0.02)
  wpe = param [T, D] init normal(0.01)
  x = embedding(wte, tokens) + embedding(wpe, arange(T))
  repeat L { x = block(x, H) }
  x = ln(x)
  loss cross_entropy(matmul(x, wte, transpose_b), targets)
}
train {
  micro_batch = $7
  steps = 100000
  dtype = f32
  optimizer = adam(lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1)
  grad_clip = 1.0
  checkpoint = "$CKPT"
}
target bench { backend = "host"; ranks = 1; budget = 12 GiB
  cpu { memory = 16 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu" }
ZL
  "$B/bin/zinfc" "$W/$1.zl" -o "$W/$1.plan" > "$W/$1.zinfc" 2>&1 || { cat "$W/$1.zinfc"; return 1; }
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# zinfrun: the median ms/step of the steps after the warm-up
run_zinf() { # name threads warmup steps
  OMP_NUM_THREADS=$2 ZINF_PLAIN=1 "$B/bin/zinfrun" "$W/$1.plan" --data "$W/train.bin" --steps $(($3 + $4)) \
    --backend host < /dev/null > "$W/out" 2>&1 || { tail -5 "$W/out" >&2; echo nan; return; }
  grep -E '^step +[0-9]+/' "$W/out" | sed 's#^step *\([0-9]*\)/.* \([0-9.]*\) ms/step.*#\1 \2#' |
    awk -v w="$3" '$1 > w {print $2}' | median
}

run_torch() { # V T D H L B threads warmup steps
  [ -n "$ZINF_PY" ] || { echo nan; return; }
  OMP_NUM_THREADS=$7 "$ZINF_PY" "$ROOT/tests/bench/torch_gpt2.py" --V $1 --T $2 --D $3 --H $4 --L $5 --B $6 \
    --threads $7 --warmup $8 --steps $9 --ckpt "$CKPT" 2> "$W/terr" |
    sed -n 's/^torch \([0-9.]*\) ms\/step.*/\1/p' | grep . || { tail -3 "$W/terr" >&2; echo nan; }
}

echo "zinfrun (1 rank, host backend, nothing offloaded) vs PyTorch $([ -n "$ZINF_PY" ] && "$ZINF_PY" -c 'import torch; print(torch.__version__)') on CPU:"
echo "f32, AdamW step and grad clipping included on both sides, activation checkpointing: $CKPT; median of $REPS alternating runs"
printf "%-18s %9s %7s %14s %14s %9s\n" model "B x T" threads "zinfrun tok/s" "PyTorch tok/s" "ratio"
status=0
for m in $MODELS; do
  set -- $(model_line "$m")
  name=$1 V=$2 T=$3 D=$4 H=$5 L=$6 MB=$7 WU=$8 ST=$9
  write_model "$name" "$V" "$T" "$D" "$H" "$L" "$MB" || { status=1; continue; }
  for th in $THREADS; do
    : > "$W/z"; : > "$W/t"; : > "$W/r"
    for rep in $(seq "$REPS"); do
      z=$(run_zinf "$name" "$th" "$WU" "$ST")
      t=$(run_torch "$V" "$T" "$D" "$H" "$L" "$MB" "$th" "$WU" "$ST")
      echo "$z" >> "$W/z"; echo "$t" >> "$W/t"
      awk -v z="$z" -v t="$t" 'BEGIN { if (z + 0 > 0 && t + 0 > 0) print t / z }' >> "$W/r"
    done
    zm=$(median < "$W/z"); tm=$(median < "$W/t"); rm=$(median < "$W/r")
    awk -v n="$name" -v b="$MB x $T" -v th="$th" -v zm="$zm" -v tm="$tm" -v rm="$rm" -v tok=$((MB * T)) 'BEGIN {
      zt = zm + 0 > 0 ? sprintf("%.0f", tok / zm * 1e3) : "-"; tt = tm + 0 > 0 ? sprintf("%.0f", tok / tm * 1e3) : "-";
      r = rm + 0 > 0 ? sprintf("%.2fx", rm) : "-";
      printf "%-18s %9s %7s %14s %14s %9s\n", n, b, th, zt, tt, r }'
    [ "$zm" = nan ] && status=1
  done
done
echo "ratio: zinfrun tokens/s / PyTorch tokens/s (median of the per-run ratios); goal >= 1.00x"
exit $status
