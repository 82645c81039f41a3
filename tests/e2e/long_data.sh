#!/bin/sh
# Token files, data order, evaluation and packing at a long sequence
# (docs/training.md "Data", "Packing", "Evaluation"): a LLaMA of tiny
# dimensions (D = 16, 1 layer, byte-level vocabulary 256) at T = 8192, one
# micro-batch of one row, on the host backend, its learning rate 1e-30 so
# that no step changes a weight (an f32 weight of 1e-8 or more plus 1e-30
# is itself) and each step's loss is the loss of the rows it read:
#  - sequential: step s reads the window at token (s-1)·T: the file less
#    its first T tokens gives steps 2, 3, 4's losses at steps 1, 2, 3;
#  - shuffle: an epoch (E = (N-1) div T = 5 rows) reads every row once:
#    its 5 losses are the sequential ones in another order;
#  - --eval-data: at step 0 and after step 2, the mean of the file's first
#    3 windows' losses, as the sequential steps gave them;
#  - packing (zinftok --pack 8192): samples of 5000, 3000 and 6000 tokens
#    go into 2 rows ([6000], [5000 3000]); a row's loss is its samples'
#    run alone (each packed alone), the mean over their trained tokens
#    (a sample of n tokens trains n - 1); --eval-data on the packed file
#    is the mean over both rows' trained tokens.
# Losses compared within 1e-6 relative.
#   tests/e2e/long_data.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir long-data
RUN="$B/bin/zinfrun"
cat > "$W/m.zl" <<'ZL'
import "llama"
const V = 256, T = 8192, D = 16, H = 2, KV = 1, F = 32, L = 1
model llama_long(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = embedding(tok, tokens)
  repeat L { x = llama_block(x, H, KV, F) }
  x = rms(x)
  head = param [D, V] init normal(0.5)
  loss cross_entropy(linear(x, head), targets)
}
train {
  micro_batch = 1
  steps = 5
  dtype = f32
  optimizer = adam(lr = 1e-30, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0)
}
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
"$B/bin/zinfc" "$W/m.zl" -o "$W/m.plan" > "$W/m.zinfc" 2>&1 || { cat "$W/m.zinfc"; echo "FAIL: zinfc"; exit 1; }
# 46507 bytes of text: byte-level tokens, 5 rows of T + 1
cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 > "$W/f.txt"
tail -c +8193 "$W/f.txt" > "$W/f1.txt"
tr -cd 'A-Za-z0-9 .,\n' < "$W/f.txt" > "$W/clean.txt"
head -c 5000 "$W/clean.txt" > "$W/a.txt"
tail -c +5001 "$W/clean.txt" | head -c 3000 > "$W/b.txt"
tail -c +8001 "$W/clean.txt" | head -c 6000 > "$W/c.txt"
for f in f f1; do "$B/bin/zinftok" "$W/$f.txt" -o "$W/$f.bin" > /dev/null || { echo "FAIL: zinftok $f"; exit 1; }; done
"$B/bin/zinftok" "$W/a.txt" "$W/b.txt" "$W/c.txt" --pack 8192 -o "$W/p.bin" > "$W/p.tok" 2>&1 &&
  grep -q "3 samples packed into 2 rows of T+1 = 8193 tokens" "$W/p.tok" || { cat "$W/p.tok"; echo "FAIL: zinftok --pack 8192"; exit 1; }
for s in a b c; do "$B/bin/zinftok" "$W/$s.txt" --pack 8192 -o "$W/p$s.bin" > /dev/null || { echo "FAIL: zinftok --pack $s"; exit 1; }; done

# run NAME DATA STEPS [options]: the losses into $W/NAME
run() {
  name=$1 data=$2 steps=$3; shift 3
  rm -f "$W/$name"
  timeout 300 "$RUN" "$W/m.plan" --data "$W/$data.bin" --steps "$steps" --quiet --losses "$W/$name" "$@" < /dev/null \
    > "$W/$name.out" 2>&1 || { tail -5 "$W/$name.out"; bad "$name: zinfrun"; }
}
# loss NAME STEP: the step's loss; eval NAME STEP: the evaluation's
loss() { awk -v s="$2" '$1 == "step" && $2 == s { print $4 }' "$W/$1"; }
evl() { awk -v s="$2" '$1 == "eval" && $3 == s { print $5 }' "$W/$1"; }
close6() { e2e_close "$1" "$2" 1e-6; }

run seq f 5
run seq1 f1 3
run shuf f 5 --data-order shuffle --data-seed 3
run ev f1 2 --eval-data "$W/f.bin" --eval-batches 3 --eval-every 2
run pk p 2 --eval-data "$W/p.bin"
for s in a b c; do run p$s p$s 1; done

# sequential: window s at token (s-1)·T
n=0
for s in 1 2 3; do
  a=$(loss seq1 $s) w=$(loss seq $((s + 1)))
  close6 "$a" "$w" && n=$((n + 1)) || bad "sequential: step $s of the file less T tokens has loss '$a', the file's step $((s + 1)) '$w'"
done
l1=$(loss seq 1) l2=$(loss seq 2)
[ $n = 3 ] && ! close6 "$l1" "$l2" && ok "sequential at T = 8192: step s reads the window at token (s-1)*T ($l1, $l2, ...)"
[ "$l1" != "$l2" ] || bad "sequential: steps 1 and 2 have one loss: the check above proves nothing"
grep -q "^data: sequential, epoch 1 (1.00 epochs read: 5 global micro-batches)" "$W/seq.out" ||
  { grep "^data:" "$W/seq.out"; bad "sequential: the summary does not say 5 of the 5 rows were read"; }

# shuffle: one epoch is the 5 rows, in another order
for f in seq shuf; do awk '$1 == "step" { print $4 }' "$W/$f" > "$W/$f.l"; sort -g "$W/$f.l" > "$W/$f.sorted"; done
if paste "$W/seq.sorted" "$W/shuf.sorted" | awk '{ e = ($1 - $2) / $1; if (e < 0) e = -e; if (e > 1e-6) bad = 1; n++ } END { exit bad || n != 5 }'; then
  cmp -s "$W/seq.l" "$W/shuf.l" && bad "shuffle: seed 3 read the rows in file order" ||
    ok "shuffle at T = 8192: an epoch reads the 5 rows once each, in another order ($(tr '\n' ' ' < "$W/shuf.l"))"
else paste "$W/seq.l" "$W/shuf.l"; bad "shuffle: the epoch's losses are not the sequential rows'"; fi

# evaluation: the first 3 windows of f, at step 0 and after step 2 (no weight moved)
mean3=$(awk '$1 == "step" && $2 <= 3 { s += $4 } END { printf "%.9g", s / 3 }' "$W/seq")
for s in 0 2; do
  e=$(evl ev $s)
  close6 "$e" "$mean3" && ok "eval at T = 8192, step $s: $e, the mean of the first 3 windows' losses $mean3" ||
    bad "eval at step $s: '$e', the first 3 windows' mean $mean3"
done
grep -q "^eval step 2 loss [0-9.]* batches 3$" "$W/ev" || bad "eval: no 'eval step 2 ... batches 3' line"

# packing: the row [c] is c alone; the row [a b] the mean over a's 4999 and b's 2999 trained tokens
la=$(loss pa 1) lb=$(loss pb 1) lc=$(loss pc 1)
mix=$(awk -v a="$la" -v b="$lb" 'BEGIN { printf "%.9g", (4999 * a + 2999 * b) / 7998 }')
p1=$(loss pk 1) p2=$(loss pk 2)
if { close6 "$p1" "$lc" && close6 "$p2" "$mix"; } || { close6 "$p2" "$lc" && close6 "$p1" "$mix"; }; then
  ok "packing at T = 8192: the rows' losses $p1, $p2 are their samples' alone (c $lc; a and b $la, $lb: $mix)"
else bad "packing: the rows' losses $p1, $p2; the samples' alone c $lc, a and b $mix"; fi
# the evaluation's loss is the mean over the trained targets of the batches it reads (c's 5999, a's and b's 7998)
e=$(evl pk 2) want=$(awk -v a="$lc" -v b="$mix" 'BEGIN { printf "%.9g", (5999 * a + 7998 * b) / 13997 }')
close6 "$e" "$want" && ok "eval of the packed file: $e, the mean over its rows' trained tokens $want" ||
  bad "eval of the packed file: '$e', want $want"

[ $e2e_failed = 0 ] && echo "PASS long_data"
e2e_end
