#!/bin/sh
# The chunked loss (linear_cross_entropy, docs/tuning.md "Long context")
# against transformers and against the whole logits (never downloads
# anything): tests/e2e/hf_masked.py's random GPT-2 (tied embeddings: the
# head is wte transposed) and LLaMA with GQA (an untied linear head), its
# token file with trained-token masks (untrained targets, one row none).
# Each model is planned three ways on the host backend: the logits whole
# (plan { loss_chunk = 0 }), chunked by 5 rows (not a divisor of the rows),
# chunked by 1 row, and by 5 with the 4 rows as grad_accum 2 of 2 (the
# forward's gradients are each micro-batch's); --explain must say which. Step 1's loss and
# gradient norm must equal transformers' within 1e-5 relative, and the
# chunked runs' losses of 3 steps those of the whole within 1e-6 relative;
# zinfgen refuses a chunked plan by name.
#   tests/e2e/hf_loss_chunk.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir hf-loss-chunk
T=$W
export OMP_NUM_THREADS=1

"$ZINF_PY" tests/e2e/hf_masked.py make "$T" 4 > "$T/ref" 2> "$T/make.log" ||
  { cat "$T/make.log"; echo "FAIL: making the models or transformers' losses (above)"; exit 1; }
e2e_host_target "$T/one.target.zl" one "1 GiB"

for c in $(cut -d' ' -f1 "$T/ref"); do
  d=$T/$c
  seq=$(cat "$d.seq")
  want=$(awk -v c="$c" '$1 == c { print $2 }' "$T/ref")
  want_gn=$(awk -v c="$c" '$1 == c { print $3 }' "$T/ref")
  "$Z/zinfc" --from-hf "$d" --seq "$seq" --emit=zl > "$d.zl" 2> "$d.emit.err" || { cat "$d.emit.err"; bad "$c: --emit=zl"; continue; }
  for chunk in 0 5 1 5a; do
    name=$c-$chunk
    # 5a: chunks of 5 rows, the 4 rows as grad_accum 2 of micro-batches of 2
    case $chunk in
      5a) chunk=5; sed -e "s/^  micro_batch = .*/  micro_batch = 2\n  grad_accum = 2/" "$d.zl" > "$T/$name.zl" ;;
      *) sed -e "s/^  micro_batch = .*/  micro_batch = 4/" "$d.zl" > "$T/$name.zl" ;;
    esac
    printf 'plan { loss_chunk = %s }\n' "$chunk" >> "$T/$name.zl"
    if ! "$Z/zinfc" "$T/$name.zl" --target "$T/one.target.zl" -o "$T/$name.plan" --explain > "$T/$name.zinfc" 2>&1; then
      cat "$T/$name.zinfc"; bad "$name: zinfc"; continue
    fi
    if [ "$chunk" = 0 ]; then grep -q "^loss: logits .* whole (pinned by loss_chunk = 0)" "$T/$name.zinfc" || bad "$name: --explain does not say the logits are whole"
    else grep -q "^loss: chunked, linear_cross_entropy over $chunk of the" "$T/$name.zinfc" || bad "$name: --explain does not say the loss is chunked by $chunk"; fi
    if ! "$Z/zinfrun" "$T/$name.plan" --backend host --init "$d" --data "$d.bin" --steps 3 --losses "$T/$name.losses" \
      > "$T/$name.log" 2>&1; then tail -20 "$T/$name.log"; bad "$name: zinfrun"; continue; fi
    got=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/$name.losses")
    gn=$(awk '$1 == "step" && $2 == 1 { print $6 }' "$T/$name.losses")
    if e2e_close "$got" "$want" 1e-5; then echo "ok $name: loss $got, transformers $want"
    else bad "$name: loss $got, transformers $want (more than 1e-5 apart)"; fi
    if e2e_close "$gn" "$want_gn" 1e-5; then echo "ok $name: gradient norm $gn, transformers $want_gn"
    else bad "$name: gradient norm $gn, transformers $want_gn (more than 1e-5 apart)"; fi
    [ "$chunk" = 0 ] && continue
    # generation needs logits: a chunked plan is refused by name
    if "$Z/zinfgen" "$T/$name.plan" --init "$d" --prompt-ids 1,2,3 --max-new 2 > "$T/$name.gen" 2>&1; then bad "$name: zinfgen ran a chunked plan"
    else grep -q "loss is linear_cross_entropy, which holds no logits" "$T/$name.gen" && echo "ok $name: zinfgen refuses the chunked plan" ||
      { cat "$T/$name.gen"; bad "$name: zinfgen's refusal does not say why"; }; fi
    for s in 1 2 3; do
      a=$(awk -v s=$s '$1 == "step" && $2 == s { print $4 }' "$T/$name.losses")
      w=$(awk -v s=$s '$1 == "step" && $2 == s { print $4 }' "$T/$c-0.losses")
      if e2e_close "$a" "$w" 1e-6; then echo "ok $name: step $s loss $a, whole logits $w"
      else bad "$name: step $s loss $a, whole logits $w (more than 1e-6 apart)"; fi
    done
  done
done
[ $e2e_failed = 0 ] && echo "PASS hf_loss_chunk"
e2e_end
