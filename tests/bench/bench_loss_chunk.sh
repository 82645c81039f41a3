#!/bin/sh
# The chunked loss against the whole logits, per training step on the host
# backend: a LLaMA of small dims (D = 256, 2 layers) at V = 32000, T = 2048,
# micro-batch 1, planned with plan { loss_chunk = 0 } (the logits whole)
# and with chunks of 256 rows (docs/tuning.md "Long context"). The two
# alternate, ROUNDS runs each (whole first in odd rounds, chunked first in
# even ones) of STEPS steps after the first, so that a shared machine's
# load falls on both alike; the fastest step of each (the least disturbed)
# is printed side by side with their ratio (goal: at most 1.05; printed,
# never asserted). The kernels alone: build/bench/bench_linxent.
#   tests/bench/bench_loss_chunk.sh BUILD [STEPS] [ROUNDS]
B=${1:-build}
STEPS=${2:-6}
ROUNDS=${3:-3}
W=$(mktemp -d /tmp/zinf-bench-lchunk.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$W"' EXIT
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
sed -e 's/^const V = 256, T = 64, D = 128, H = 4, KV = 2, F = 352, L = 4/const V = 32000, T = 2048, D = 256, H = 4, KV = 2, F = 704, L = 2/' \
    -e 's/^  micro_batch = 4/  micro_batch = 1/' -e '/^hf "/,$d' examples/llama-tiny.zl > "$W/m.zl"
plan() { # CHUNK: the plan with that loss_chunk
  cp "$W/m.zl" "$W/m$1.zl"
  printf 'plan { loss_chunk = %s }\n' "$1" >> "$W/m$1.zl"
  "$B/bin/zinfc" "$W/m$1.zl" --target examples/targets/host.zl --ranks 1 -o "$W/m$1.plan" > /dev/null
}
ms() { # CHUNK -> the fastest step's ms after the first, of one run
  "$B/bin/zinfrun" "$W/m$1.plan" --backend host --data "$W/train.bin" --steps $((STEPS + 1)) > "$W/run$1.log" 2>&1 ||
    { tail "$W/run$1.log" >&2; return 1; }
  awk '$1 == "step" && $2 !~ /^1\// { for (i = 2; i < NF; i++) if ($(i + 1) == "ms/step" && (m == "" || $i < m)) m = $i }
       END { print m }' "$W/run$1.log"
}
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }
plan 0 && plan 256 || exit 1
whole="" chunked=""
r=1
while [ $r -le "$ROUNDS" ]; do
  if [ $((r % 2)) = 1 ]; then order="0 256"; else order="256 0"; fi
  for c in $order; do
    m=$(ms $c) || exit 1
    if [ $c = 0 ]; then whole=$(min "$whole" "$m"); else chunked=$(min "$chunked" "$m"); fi
  done
  r=$((r + 1))
done
echo "V = 32000, T = 2048, D = 256, L = 2, host backend, the fastest step of $ROUNDS alternating runs of $STEPS steps each"
printf '%-28s %10s ms/step\n' "logits whole (loss_chunk 0)" "$whole" "chunked (loss_chunk 256)" "$chunked"
awk -v a="$chunked" -v b="$whole" 'BEGIN { if (b > 0) printf "chunked / whole: %.3f (goal <= 1.05)\n", a / b }'
