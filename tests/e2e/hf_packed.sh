#!/bin/sh
# Packed rows against transformers (never downloads anything): random GPT-2
# and LLaMA with GQA (tests/e2e/hf_from.py's), 40 pre-tokenized samples of
# random lengths (some labels -100) packed by zinftok --pack T into rows of
# T+1 tokens. tests/e2e/hf_packed.py reads the packed file with a reader of
# its own (every sample in one row, whole, its labels as the mask, its
# first token untrained) and runs transformers on the samples of the first
# 4 rows one by one. zinfrun reads the same 4 rows as one global batch
# (one micro-batch of 4; grad_accum 2 of 2; 2 ranks of 2): its step-1 loss
# and gradient norm must be the samples' one by one within 1e-5 relative
# (f32). LLaMA's positions are rope's; GPT-2's are learned (an embedding
# of arange(T) added to the tokens': read at each token's position in its
# sample).
# Then the bad inputs: a sample longer than a row, a corrupt sample table,
# a file packed for another T; a packed --eval-data (zinftok --pack --val's)
# evaluates to the samples' loss one by one; the CUDA backend (fake driver)
# trains and evaluates the same rows to the same figures. Last, --eos on the samples each ended by EOS
# (not packed): each document alone in a padded row gives transformers'
# loss and gradient of the documents one by one.
#   tests/e2e/hf_packed.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hf-packed
T=$W
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# |a - b| <= tol * |b|

"$ZINF_PY" tests/e2e/hf_packed.py make "$T" > "$T/make.log" 2>&1 || { cat "$T/make.log"; echo "FAIL: making the models"; exit 1; }
for c in gpt2 llama-gqa; do
  seq=$(cat "$T/$c.seq")
  "$Z/zinftok" "$T/$c.jsonl" -o "$T/$c.bin" --pack "$seq" --pack-seed 5 > "$T/$c.tok" 2>&1 ||
    { cat "$T/$c.tok"; bad "$c: zinftok --pack"; }
  grep -q "^zinftok: packing efficiency " "$T/$c.tok" || { cat "$T/$c.tok"; bad "$c: no packing efficiency in the summary"; }
  "$Z/zinftok" "$T/$c-eos.jsonl" -o "$T/$c-eos.bin" > "$T/$c-eos.tok" 2>&1 || { cat "$T/$c-eos.tok"; bad "$c: zinftok"; }
  # --val takes whole rows: half of them, a packed evaluation file
  "$Z/zinftok" "$T/$c.jsonl" -o "$T/$c-tr.bin" --val "$T/$c-va.bin" --val-fraction 0.5 --pack "$seq" --pack-seed 5 > "$T/$c-val.tok" 2>&1 ||
    { cat "$T/$c-val.tok"; bad "$c: zinftok --pack --val"; }
  grep -q "packed into [0-9]* rows of T+1 = $((seq + 1)) tokens -> $T/$c-tr.bin, [0-9]* -> $T/$c-va.bin (seed 5)" "$T/$c-val.tok" ||
    { cat "$T/$c-val.tok"; bad "$c: --pack --val's summary"; }
done
"$ZINF_PY" tests/e2e/hf_packed.py vocab "$T" > "$T/vocab" || bad "recording the vocabulary"
"$ZINF_PY" tests/e2e/hf_packed.py ref "$T" 4 > "$T/ref" 2> "$T/ref.log" || { cat "$T/ref.log"; echo "FAIL: transformers' reference"; exit 1; }

"$ZINF_PY" tests/e2e/hf_packed.py evalref "$T" va 4 > "$T/evalref" 2> "$T/evalref.log" || { cat "$T/evalref.log"; echo "FAIL: transformers' evaluation reference"; exit 1; }
"$ZINF_PY" tests/e2e/hf_packed.py eosref "$T" 4 > "$T/eosref" 2> "$T/eosref.log" || { cat "$T/eosref.log"; echo "FAIL: transformers' --eos reference"; exit 1; }

target() { # NAME RANKS
  cat > "$T/$1.target.zl" <<ZL
target $1 {
  backend = "host"
  ranks = $2
  budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
}
ZL
}
target one 1
target two 2
runs="mb4 1 4 1;accum2 1 2 2"
command -v mpirun > /dev/null && runs="$runs;ranks2 2 2 1"
for c in gpt2 llama-gqa; do
  d=$T/$c
  want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/ref")
  want_gn=$(awk -v c="$c" '$1 == c { print $3 }' "$T/ref")
  "$Z/zinfc" --from-hf "$d" --seq "$(cat "$d.seq")" --emit=zl > "$d.zl" 2> "$d.emit.err" || { cat "$d.emit.err"; bad "$c: --emit=zl"; continue; }
  echo "$runs" | tr ';' '\n' | while read -r name ranks mb acc; do
    n=$c-$name
    sed -e "s/^  micro_batch = .*/  micro_batch = $mb\n  grad_accum = $acc/" "$d.zl" > "$T/$n.zl"
    tgt=$T/one.target.zl
    [ "$ranks" = 2 ] && tgt=$T/two.target.zl
    "$Z/zinfc" "$T/$n.zl" --target "$tgt" -o "$T/$n.plan" > "$T/$n.zinfc" 2>&1 || { cat "$T/$n.zinfc"; bad "$n: zinfc"; continue; }
    if [ "$ranks" = 1 ]; then
      "$Z/zinfrun" "$T/$n.plan" --backend host --init "$d" --data "$d.bin" --steps 1 --losses "$T/$n.losses" > "$T/$n.log" 2>&1
    else
      TMPDIR=$(mktemp -d "$T/mpi.XXXXXX") timeout 300 mpirun -np 2 --oversubscribe "$Z/zinfrun" "$T/$n.plan" \
        --backend host --init "$d" --data "$d.bin" --steps 1 --losses "$T/$n.losses" > "$T/$n.log" 2>&1
    fi
    rc=$?
    if [ $rc -ne 0 ]; then tail -20 "$T/$n.log"; bad "$n: zinfrun"; continue; fi
    got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/$n.losses")
    gn=$(awk '$1 == "step" && $2 == 1 { print $6 }' "$T/$n.losses")
    if e2e_close "$got" "$want" 1e-5; then echo "ok $n: loss $got, the samples one by one $want"
    else bad "$n: loss $got, the samples one by one $want (more than 1e-5 apart)"; fi
    if e2e_close "$gn" "$want_gn" 1e-5; then echo "ok $n: gradient norm $gn, the samples one by one $want_gn"
    else bad "$n: gradient norm $gn, the samples one by one $want_gn (more than 1e-5 apart)"; fi
  done
done

# --eos: a document shorter than a row trains, alone in its row (padded): the documents one by one
for c in gpt2 llama-gqa; do
  d=$T/$c n=$c-mb4
  eos=$(( $(awk -v c="$c" '$1 == c { print $2 }' "$T/vocab") - 1 ))
  want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/eosref")
  want_gn=$(awk -v c="$c" '$1 == c { print $3 }' "$T/eosref")
  "$Z/zinfrun" "$T/$n.plan" --backend host --init "$d" --data "$d-eos.bin" --eos "$eos" --steps 1 --losses "$T/$n-eos.losses" \
    > "$T/$n-eos.log" 2>&1 || { tail -5 "$T/$n-eos.log"; bad "$n --eos: zinfrun"; continue; }
  got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/$n-eos.losses")
  gn=$(awk '$1 == "step" && $2 == 1 { print $6 }' "$T/$n-eos.losses")
  if e2e_close "$got" "$want" 1e-5 && e2e_close "$gn" "$want_gn" 1e-5; then
    echo "ok $n --eos $eos: loss $got, gradient norm $gn; the documents one by one $want, $want_gn"
  else
    bad "$n --eos $eos: loss $got, gradient norm $gn; the documents one by one $want, $want_gn (more than 1e-5 apart)"
  fi
done

# bad inputs: a clear message and exit 1
d=$T/llama-gqa
seq=$(cat "$d.seq")
printf '{"input_ids": [%s]}\n' "$(seq -s, 1 $((seq + 2)))" > "$T/long.jsonl"
if "$Z/zinftok" "$T/long.jsonl" -o "$T/long.bin" --pack "$seq" > "$T/long.out" 2>&1; then bad "a sample longer than a row was packed"
else
  grep -q "sample 1 (of 1) has $((seq + 2)) tokens, more than a row of T+1 = $((seq + 1))" "$T/long.out" &&
    echo "ok: a sample longer than a row is refused" || { cat "$T/long.out"; bad "the long sample's message"; }
fi
cp "$d.bin" "$T/corrupt.bin"
# the last int32 of the file is a sample start: past T+1
size=$(wc -c < "$T/corrupt.bin")
printf '\377\377\000\000' | dd of="$T/corrupt.bin" bs=1 seek=$((size - 4)) conv=notrunc 2> /dev/null
if "$Z/zinfrun" "$T/llama-gqa-mb4.plan" --backend host --init "$d" --data "$T/corrupt.bin" --steps 1 > "$T/corrupt.out" 2>&1; then
  bad "a corrupt sample table was read"
else
  grep -q "corrupt sample table" "$T/corrupt.out" && echo "ok: a corrupt sample table is refused" ||
    { cat "$T/corrupt.out"; bad "the corrupt table's message"; }
fi
"$Z/zinftok" "$T/llama-gqa.jsonl" -o "$T/other.bin" --pack $((seq - 4)) > /dev/null 2>&1
printf '\141\000\000\000' | dd of="$T/other.bin" bs=1 seek=12 conv=notrunc 2> /dev/null # vocabulary 97
if "$Z/zinfrun" "$T/llama-gqa-mb4.plan" --backend host --init "$d" --data "$T/other.bin" --steps 1 > "$T/other.out" 2>&1; then
  bad "a file packed for another T was read"
else
  grep -q "packed into rows of T = $((seq - 4)) tokens, but the model's T is $seq" "$T/other.out" &&
    echo "ok: a file packed for another T is refused" || { cat "$T/other.out"; bad "the other T's message"; }
fi
# a packed evaluation file (--val's rows): its first batch's loss before step 1 is the samples' one by one
for c in gpt2 llama-gqa; do
  d=$T/$c n=$c-mb4
  want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/evalref")
  "$Z/zinfrun" "$T/$n.plan" --backend host --init "$d" --data "$d.bin" --eval-data "$d-va.bin" --eval-batches 1 \
    --eval-every 1 --steps 1 --losses "$T/$n-eval.losses" > "$T/$n-eval.log" 2>&1 || { tail -5 "$T/$n-eval.log"; bad "$n --eval-data: zinfrun"; continue; }
  got=$(awk '$1 == "eval" && $3 == 0 { print $5 }' "$T/$n-eval.losses")
  if e2e_close "$got" "$want" 1e-5; then echo "ok $n: evaluation loss $got on packed rows, the samples one by one $want"
  else bad "$n: evaluation loss $got on packed rows, the samples one by one $want (more than 1e-5 apart)"; fi
done

# the CUDA backend (on the fake driver): the same 4 rows as one micro-batch,
# the kernels reading the rows' sample starts (a buffer of the plan, that the
# planner counts), give the samples' loss and gradient norm one by one; a
# packed --eval-data evaluates likewise
if . tests/fakecuda/env.sh; then
  for c in gpt2 llama-gqa; do
    d=$T/$c k=$c-cuda
    want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/ref")
    want_gn=$(awk -v c="$c" '$1 == c { print $3 }' "$T/ref")
    want_ev=$(awk -v c="$c" '$1 == c { print $2 }' "$T/evalref")
    cat > "$T/$k.zl" <<ZL
import "$T/$c-mb4.zl"
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 } }
ZL
    mkdir -p "$T/src-$k"
    if ! "$Z/zinfc" "$T/$k.zl" --kernels=sm_90 --kernel-src="$T/src-$k" -o "$T/$k.plan" > "$T/$k.zinfc" 2>&1 ||
       ! "$FAKE/fakecuda_prep" "$T/$k.plan" "$T/src-$k" sm_90 "$UNITS" > "$T/$k.prep" 2>&1; then
      cat "$T/$k.zinfc" "$T/$k.prep"; bad "$k: zinfc or fakecuda_prep"; continue
    fi
    # the planner counts the sample starts: a persistent GPU buffer of 4 bytes a token (B = 4 rows of T), written by the input of the tokens
    sb=$((4 * 4 * $(cat "$d.seq")))
    "$Z/zinfdump" "$T/$k.plan" --memory > "$T/$k.mem" 2>&1 && "$Z/zinfdump" "$T/$k.plan" --schedule > "$T/$k.sched" 2>&1
    if awk -v b="$sb" '$2 == b && $3 == "persistent" && $4 == "sample_starts" { f = 1 } END { exit !f }' "$T/$k.mem" &&
       grep -q " input 0 | =gpu:tokens@[0-9]*+$sb =gpu:sample_starts@[0-9]*+$sb |" "$T/$k.sched"; then
      echo "ok $k: the plan holds the sample starts ($sb bytes on the GPU, written with the tokens)"
    else
      grep -n "sample_starts\| input 0 " "$T/$k.mem" "$T/$k.sched"; bad "$k: the plan does not count the sample starts"
    fi
    if ! env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=1 \
         timeout 300 "$Z/zinfrun" "$T/$k.plan" --backend cuda --init "$d" --data "$d.bin" --eval-data "$d-va.bin" \
         --eval-batches 1 --eval-every 1 --steps 1 --losses "$T/$k.losses" < /dev/null > "$T/$k.log" 2>&1; then
      tail -5 "$T/$k.log"; bad "$k: zinfrun on the fake CUDA driver"; continue
    fi
    got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/$k.losses")
    gn=$(awk '$1 == "step" && $2 == 1 { print $6 }' "$T/$k.losses")
    ev=$(awk '$1 == "eval" && $3 == 0 { print $5 }' "$T/$k.losses")
    if e2e_close "$got" "$want" 1e-5 && e2e_close "$gn" "$want_gn" 1e-5; then
      echo "ok $k: loss $got, gradient norm $gn on the CUDA backend; the samples one by one $want, $want_gn"
    else
      bad "$k: loss $got, gradient norm $gn on the CUDA backend; the samples one by one $want, $want_gn (more than 1e-5 apart)"
    fi
    if e2e_close "$ev" "$want_ev" 1e-5; then echo "ok $k: evaluation loss $ev on packed rows, the samples one by one $want_ev"
    else bad "$k: evaluation loss $ev on packed rows, the samples one by one $want_ev (more than 1e-5 apart)"; fi
  done
else
  fail=1
fi
exit $fail
