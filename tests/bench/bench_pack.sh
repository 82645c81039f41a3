#!/bin/sh
# Packing (docs/training.md, "Packing"), two figures beside their targets:
# - efficiency: 20000 pre-tokenized samples, lengths drawn log-normally
#   around T/8 (sigma 0.8, cut to 1..T+1), packed by zinftok --pack T
#   (T = 2048): the samples' share of the row tokens (target >= 95%);
# - cost: a training step of llama-micro (tests/e2e/models, T = 256, B = 4,
#   one rank, host backend) on packed rows (samples around T/8, a mask)
#   against one on plain rows of as many tokens (no mask, no packing): the
#   median step time of each, runs interleaved, the best of 3 rounds of 30
#   steps (target: packed <= 1.03x plain).
#   tests/bench/bench_pack.sh BUILD
B=${1:-build}
W=$(mktemp -d /tmp/zinf-bench-pack.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
samples() { # N T SEED -> JSONL of pre-tokenized samples on stdout
  python3 -c '
import json, math, random, sys
n, t, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
for _ in range(n):
    l = max(1, min(t + 1, int(math.exp(math.log(t / 8) + 0.8 * r.gauss(0, 1)))))
    print(json.dumps({"input_ids": [r.randrange(256) for _ in range(l)]}))
' "$@"
}
samples 20000 2048 1 > "$W/eff.jsonl" || exit 1
"$B/bin/zinftok" "$W/eff.jsonl" -o "$W/eff.bin" --pack 2048 > "$W/eff.out" || { cat "$W/eff.out"; exit 1; }
eff=$(sed -n 's/^zinftok: packing efficiency \([0-9.]*\)%.*/\1/p' "$W/eff.out")
rows=$(sed -n 's/.* packed into \([0-9]*\) rows.*/\1/p' "$W/eff.out")
ok=$(awk -v e="$eff" 'BEGIN { print (e >= 95) ? "ok" : "BELOW TARGET" }')
echo "pack efficiency: $eff% (20000 samples log-normal around T/8 in $rows rows of T+1 = 2049; target >= 95%): $ok"

sed -e 's/T = 16, D = 64/T = 256, D = 64/' -e 's/micro_batch = 2/micro_batch = 4/' tests/e2e/models/llama-micro.zl > "$W/lm.zl"
"$B/bin/zinfc" "$W/lm.zl" -I tests/e2e/models --ranks 1 -o "$W/lm.plan" > /dev/null || exit 1
samples 3000 256 2 > "$W/step.jsonl" || exit 1
"$B/bin/zinftok" "$W/step.jsonl" -o "$W/packed.bin" --pack 256 > /dev/null || exit 1
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 README.md docs/*.md -o "$W/plain.bin" > /dev/null || exit 1
median() { # the median ms/step of a run's step lines after the first 5
  awk '$1 == "step" { split($2, s, "/"); if (s[1] > 5) for (i = 1; i < NF; i++) if ($(i+1) == "ms/step") print $i }' "$1" |
    sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
best_plain=0 best_packed=0
for round in 1 2 3; do
  for kind in plain packed; do
    "$B/bin/zinfrun" "$W/lm.plan" --backend host --data "$W/$kind.bin" --data-order shuffle --steps 30 < /dev/null \
      > "$W/$kind.log" 2>&1 || { tail -5 "$W/$kind.log"; exit 1; }
    m=$(median "$W/$kind.log")
    if [ "$kind" = plain ]; then best_plain=$(awk -v a="$best_plain" -v b="$m" 'BEGIN { print (a == 0 || b < a) ? b : a }')
    else best_packed=$(awk -v a="$best_packed" -v b="$m" 'BEGIN { print (a == 0 || b < a) ? b : a }'); fi
  done
done
awk -v p="$best_packed" -v u="$best_plain" 'BEGIN {
  r = p / u
  printf "pack step: %.2f ms packed and masked, %.2f ms plain (llama-micro T=256 B=4, host, median of 30 steps, best of 3): %.3fx (target <= 1.03x): %s\n",
    p, u, r, r <= 1.03 ? "ok" : "ABOVE TARGET" }'
