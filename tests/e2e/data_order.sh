#!/bin/sh
# zinfrun's data order (docs/training.md "Data"): --data-order shuffle is
# seeded (the same seed, the same losses; another seed or sequential,
# others), the same on 1 and 2 ranks (1 rank of B=4 against 2 ranks of
# B=2, relative 1e-5 per step), the default is sequential, a run stopped
# at step k and resumed gives the straight run's losses bit for bit (across
# an epoch boundary, with --eos documents), a resume with another data
# order or file is refused, and bad input ends with one clear message
# (exit 1; bad usage exit 2).
#   sh tests/e2e/data_order.sh [BUILD]
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir data-order
e2e_mpi
fail=0
RUN="$B/bin/zinfrun"
bad() { echo "FAIL: $*"; fail=1; }

"$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null || exit 1
head -c 600 README.md > "$W/small.txt"
"$B/bin/zinftok" "$W/small.txt" -o "$W/small.bin" > /dev/null || exit 1
printf 'ab\ncd\nef\n' > "$W/short.txt"
"$B/bin/zinftok" "$W/short.txt" -o "$W/short.bin" > /dev/null || exit 1
for r in 1 2; do
  sed -e "s/ranks = 4/ranks = $r/" -e "s/target host {/target host$r {/" examples/targets/host.zl > "$W/t$r.zl"
done
sed 's/micro_batch = 2/micro_batch = 4/' tests/e2e/models/gpt-micro.zl > "$W/b4.zl"
"$B/bin/zinfc" tests/e2e/models/gpt-micro.zl -I tests/e2e/models --target "$W/t1.zl" -o "$W/m1.plan" > /dev/null &&
"$B/bin/zinfc" tests/e2e/models/gpt-micro.zl -I tests/e2e/models --target "$W/t2.zl" -o "$W/m2.plan" > /dev/null &&
"$B/bin/zinfc" "$W/b4.zl" -I tests/e2e/models --target "$W/t1.zl" -o "$W/m4.plan" > /dev/null || { echo "FAIL: zinfc"; exit 1; }

# losses NAME PLAN [options]: one rank, the losses into $W/NAME
losses() {
  name=$1; plan=$2; shift 2
  rm -f "$W/$name"
  timeout 60 "$RUN" "$W/$plan.plan" --data "$W/train.bin" --steps 8 --quiet --losses "$W/$name" "$@" > "$W/$name.out" 2>&1 ||
    { bad "$name: zinfrun failed"; sed 's/^/    | /' "$W/$name.out"; }
}
same() { cmp -s "$W/$1" "$W/$2"; }

# 1. seeded, and not the sequential order
losses seq m1
losses seq2 m1 --data-order sequential
losses sh1 m1 --data-order shuffle --data-seed 1
losses sh1b m1 --data-order shuffle --data-seed 1
losses sh2 m1 --data-order shuffle --data-seed 2
losses shdef m1 --data-order shuffle
same seq seq2 || bad "--data-order sequential differs from the default"
same sh1 sh1b || bad "two shuffled runs of seed 1 differ"
same sh1 seq && bad "the shuffled losses equal the sequential ones"
same sh1 sh2 && bad "seeds 1 and 2 give the same losses"
grep -q "data: shuffle, epoch 1 " "$W/shdef.out" || bad "the summary lacks the epoch: $(cat "$W/shdef.out")"
[ $fail -eq 0 ] && echo "ok   shuffle: seeded (seed 1 twice equal; seed 2, the plan's seed and sequential differ); default = sequential"

# 2. the same global batches on 1 rank of B=4 and 2 ranks of B=2
close() { # A B: relative 1e-5 per step
  awk 'NR == FNR { a[FNR] = $4; n = FNR; next }
       { d = $4 - a[FNR]; if (d < 0) d = -d; m = a[FNR] < 0 ? -a[FNR] : a[FNR]; if (d > 1e-5 * m) bad = 1; k = FNR }
       END { exit (bad || k != n || n == 0) }' "$W/$1" "$W/$2"
}
for opts in "--data-order shuffle --data-seed 3" "--data-order shuffle --data-seed 3 --eos 10" "--eos 10"; do
  # shellcheck disable=SC2086
  losses one m4 $opts
  rm -f "$W/two"
  # shellcheck disable=SC2086
  if ! timeout 60 mpirun -np 2 --oversubscribe "$RUN" "$W/m2.plan" --data "$W/train.bin" --steps 8 --quiet \
      --losses "$W/two" $opts > "$W/two.out" 2>&1 < /dev/null; then
    bad "2 ranks ($opts) failed"; sed 's/^/    | /' "$W/two.out"
  elif ! close one two; then
    bad "1 rank of B=4 and 2 ranks of B=2 differ ($opts)"; paste "$W/one" "$W/two"
  else
    echo "ok   $opts: 1 rank of B=4 = 2 ranks of B=2 (8 steps)"
  fi
done

# 3. stopped at step 10 and resumed to 24 = straight (the epoch of 15 global micro-batches ends at step 16)
for opts in "--data-order shuffle --data-seed 5 --eos 10" "--data-order shuffle"; do
  rm -rf "$W/ck" "$W/ck2"; rm -f "$W/straight" "$W/resumed"
  # shellcheck disable=SC2086
  timeout 60 "$RUN" "$W/m1.plan" --data "$W/small.bin" --steps 24 --quiet --losses "$W/straight" --checkpoint-dir "$W/ck2" $opts > "$W/s.out" 2>&1 ||
    { bad "straight run failed"; cat "$W/s.out"; }
  grep -q "data: shuffle, epoch [2-9]" "$W/s.out" || bad "the straight run ($opts) did not reach epoch 2: $(grep data: "$W/s.out")"
  # shellcheck disable=SC2086
  timeout 60 "$RUN" "$W/m1.plan" --data "$W/small.bin" --steps 10 --quiet --checkpoint-dir "$W/ck" $opts > "$W/a.out" 2>&1 ||
    { bad "stopped run failed"; cat "$W/a.out"; }
  # shellcheck disable=SC2086
  timeout 60 "$RUN" "$W/m1.plan" --data "$W/small.bin" --steps 24 --quiet --checkpoint-dir "$W/ck" --resume --losses "$W/resumed" $opts > "$W/b.out" 2>&1 ||
    { bad "resumed run failed"; cat "$W/b.out"; }
  if [ "$(wc -l < "$W/resumed")" -ne 14 ] || [ "$(tail -n 14 "$W/straight")" != "$(cat "$W/resumed")" ]; then
    bad "resumed losses differ from the straight run's ($opts)"; paste "$W/straight" "$W/resumed"
  else
    echo "ok   $opts: stopped at step 10, resumed to 24 = straight, bit for bit"
  fi
  grep -q '"data": {"order": "shuffle"' "$W/ck/step-00000024/manifest.json" || bad "the manifest lacks the data position"
done

# expect NAME CODE FRAGMENT command...: exit CODE and a message holding FRAGMENT
expect() {
  name=$1; code=$2; want=$3; shift 3
  timeout 60 "$@" > "$W/out" 2>&1 < /dev/null
  rc=$?
  if [ $rc -ne "$code" ]; then bad "$name: exit $rc, not $code"; tail -3 "$W/out"; return; fi
  if ! grep -q -- "$want" "$W/out"; then bad "$name: the message lacks '$want'"; tail -3 "$W/out"; return; fi
  echo "ok   $name (exit $rc): $(grep -m1 -- "$want" "$W/out" | cut -c1-170)"
}
# 4. a resume with another data order or file (the checkpoint at step 10 of the last loop: shuffle, plan seed, no EOS)
expect "resume, another seed" 1 "another data order (--data-seed: the checkpoint's 1234, this run's 9)" \
  "$RUN" "$W/m1.plan" --data "$W/small.bin" --steps 30 --checkpoint-dir "$W/ck" --resume --data-order shuffle --data-seed 9
expect "resume, sequential" 1 "--data-order: the checkpoint's shuffle, this run's sequential" \
  "$RUN" "$W/m1.plan" --data "$W/small.bin" --steps 30 --checkpoint-dir "$W/ck" --resume
expect "resume, --eos" 1 "--eos: the checkpoint's none, this run's 10" \
  "$RUN" "$W/m1.plan" --data "$W/small.bin" --steps 30 --checkpoint-dir "$W/ck" --resume --data-order shuffle --eos 10
expect "resume, another file" 1 "the data file: the checkpoint's had 600 tokens, $W/train.bin has" \
  "$RUN" "$W/m1.plan" --data "$W/train.bin" --steps 30 --checkpoint-dir "$W/ck" --resume --data-order shuffle

# on 2 ranks: stopped and resumed = straight; another seed refused by every rank (exit 1, no hang)
M2="timeout 60 mpirun -np 2 --oversubscribe $RUN $W/m2.plan --data $W/small.bin --quiet --data-order shuffle --eos 10"
rm -f "$W/straight2" "$W/resumed2"
$M2 --steps 12 --losses "$W/straight2" > "$W/o2" 2>&1 < /dev/null &&
  $M2 --steps 5 --checkpoint-dir "$W/ck3" > "$W/o2" 2>&1 < /dev/null &&
  $M2 --steps 12 --checkpoint-dir "$W/ck3" --resume --losses "$W/resumed2" > "$W/o2" 2>&1 < /dev/null || { bad "2-rank runs failed"; cat "$W/o2"; }
if [ "$(tail -n 7 "$W/straight2")" = "$(cat "$W/resumed2")" ]; then echo "ok   2 ranks: stopped at step 5, resumed to 12 = straight, bit for bit"
else bad "2 ranks: resumed losses differ"; paste "$W/straight2" "$W/resumed2"; fi
# shellcheck disable=SC2086
expect "2 ranks, resume with another seed" 1 "--data-seed: the checkpoint's 1234, this run's 4" $M2 --steps 14 --checkpoint-dir "$W/ck3" --resume --data-seed 4

# 5. bad input
expect "--eos outside the vocabulary" 1 "--eos 256 is not a token id of the vocabulary of 256 ids (0..255)" \
  "$RUN" "$W/m1.plan" --data "$W/train.bin" --steps 1 --eos 256
# documents shorter than a row train, each a row padded with EOS
expect "short documents train" 0 "3 rows of T+1 = 17 tokens an epoch in 3 of 3 documents split at EOS 10 (9 tokens read an epoch)" \
  "$RUN" "$W/m1.plan" --data "$W/short.bin" --steps 1 --eos 10
printf '\n\n\n\n' > "$W/eos.txt"
"$B/bin/zinftok" "$W/eos.txt" -o "$W/eos.bin" > /dev/null || exit 1
expect "no document with a target" 1 "no document holds a target: 4 documents split at EOS 10, of at most 1 token each" \
  "$RUN" "$W/m1.plan" --data "$W/eos.bin" --steps 1 --eos 10
expect "file shorter than a row" 1 "9 tokens is too short for one row of T+1 = 17 tokens" \
  "$RUN" "$W/m1.plan" --data "$W/short.bin" --steps 1 --data-order shuffle
expect "file shorter than a window" 1 "too short for one window" "$RUN" "$W/m1.plan" --data "$W/short.bin" --steps 1
expect "--data-order random" 2 "--data-order must be sequential or shuffle, not 'random'" \
  "$RUN" "$W/m1.plan" --data "$W/train.bin" --data-order random
expect "--data-seed without shuffle" 2 "--data-seed needs --data-order shuffle" "$RUN" "$W/m1.plan" --data "$W/train.bin" --data-seed 4
expect "--data-seed -1" 2 "--data-seed needs an integer" "$RUN" "$W/m1.plan" --data "$W/train.bin" --data-order shuffle --data-seed -1
expect "--eos -1" 2 "--eos needs a token id" "$RUN" "$W/m1.plan" --data "$W/train.bin" --eos -1
expect "--eos x" 2 "--eos needs a token id" "$RUN" "$W/m1.plan" --data "$W/train.bin" --eos x
timeout 60 "$RUN" "$W/m1.plan" --data "$W/train.bin" --steps 1 --quiet --eos 255 > "$W/out" 2>&1 &&
  grep -q "warning: --eos 255 does not occur in" "$W/out" || bad "an EOS id that does not occur: no warning: $(cat "$W/out")"

[ $fail -eq 0 ] && echo "data_order: ok" || { echo "data_order: FAIL"; exit 1; }
