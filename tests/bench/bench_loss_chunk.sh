#!/bin/sh
# The chunked loss against the whole logits, per training step on the host
# backend: a LLaMA of small dims (D = 256, 2 layers) at V = 32000, T = 2048,
# micro-batch 1, planned with plan { loss_chunk = 0 } (the logits whole)
# and with chunks of 256 rows (docs/tuning.md "Long context"); each runs
# STEPS steps after the first, and the fastest of them (the machine may be
# shared: the fastest is the least disturbed) is printed side by side with
# their ratio (goal: at most 1.05; printed, never asserted). The kernels
# alone: build/bench/bench_linxent.
#   tests/bench/bench_loss_chunk.sh BUILD [STEPS]
B=${1:-build}
STEPS=${2:-6}
W=$(mktemp -d /tmp/zinf-bench-lchunk.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$W"' EXIT
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
sed -e 's/^const V = 256, T = 64, D = 128, H = 4, KV = 2, F = 352, L = 4/const V = 32000, T = 2048, D = 256, H = 4, KV = 2, F = 704, L = 2/' \
    -e 's/^  micro_batch = 4/  micro_batch = 1/' -e '/^hf "/,$d' examples/llama-tiny.zl > "$W/m.zl"
ms() { # CHUNK -> the fastest step's ms after the first
  cp "$W/m.zl" "$W/m$1.zl"
  printf 'plan { loss_chunk = %s }\n' "$1" >> "$W/m$1.zl"
  "$B/bin/zinfc" "$W/m$1.zl" --target examples/targets/host.zl --ranks 1 -o "$W/m$1.plan" > /dev/null || return 1
  "$B/bin/zinfrun" "$W/m$1.plan" --backend host --data "$W/train.bin" --steps $((STEPS + 1)) > "$W/run$1.log" 2>&1 ||
    { tail "$W/run$1.log" >&2; return 1; }
  awk '$1 == "step" && $2 !~ /^1\// { for (i = 2; i < NF; i++) if ($(i + 1) == "ms/step" && (m == "" || $i < m)) m = $i }
       END { print m }' "$W/run$1.log"
}
whole=$(ms 0) || exit 1
chunked=$(ms 256) || exit 1
echo "V = 32000, T = 2048, D = 256, L = 2, host backend, the fastest of $STEPS steps"
printf '%-28s %10s ms/step\n' "logits whole (loss_chunk 0)" "$whole" "chunked (loss_chunk 256)" "$chunked"
awk -v a="$chunked" -v b="$whole" 'BEGIN { if (b > 0) printf "chunked / whole: %.3f (goal <= 1.05)\n", a / b }'
