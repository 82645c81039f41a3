#!/bin/sh
# Balanced plans (docs/tuning.md, "Balanced plans"): the predicted step of
# llama2-70b on dgx-h100 and gpt3-175b on dgx2 with one tier per class (the
# class search's choice pinned, so nothing is refined) and with the
# refinement's split, and the planning time of each.
B=${1:-build}
W=$(mktemp -d /tmp/zinf-balanced.XXXXXX)
trap 'rm -rf "$W"' EXIT
printf '%-22s %-52s %12s %12s %10s\n' model "classes (pinned for 'one tier')" "one tier" balanced "plan time"
while read -r model target classes; do
  pins=$(echo "$classes" | sed 's/\([a-z]*\)=\([a-z]*\)/\1 = "\2";/g')
  printf 'import "%s/examples/%s"\nplan { %s }\n' "$(pwd)" "$model" "$pins" > "$W/pinned.zl"
  one=$("$B/bin/zinfc" "$W/pinned.zl" --target "$target" --kernels=none -o "$W/one.plan" | sed -n 's/.*predicted \([0-9.e+-]*\) s\/step.*/\1/p')
  t0=$(date +%s.%N)
  bal=$("$B/bin/zinfc" "examples/$model.zl" --target "$target" --kernels=none -o "$W/bal.plan" | sed -n 's/.*predicted \([0-9.e+-]*\) s\/step.*/\1/p')
  t1=$(date +%s.%N)
  printf '%-22s %-52s %10s s %10s s %8.2f s\n' "$model/$target" "$classes" "$one" "$bal" "$(echo "$t1 - $t0" | bc)"
done <<EOF2
llama2-70b dgx-h100 params=gpu grads=cpu optimizer=cpu checkpoints=cpu
gpt3-175b dgx2 params=gpu grads=cpu optimizer=nvme checkpoints=cpu
EOF2
