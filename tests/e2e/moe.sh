#!/bin/sh
# Mixture-of-experts models (stdlib/moe.zl, the moe_* primitives) against
# transformers on the host backend. tests/e2e/moe.py makes small random
# MixtralForCausalLM, Qwen3MoeForCausalLM and OlmoeForCausalLM models (with
# and without the load-balancing loss; a routing where every token picks the
# same experts and the others get no token, top-2 and top-1) and writes each
# as a .zl model with its weights under zinf's names. For each, zinfrun
# --init runs one step and --export's the parameters:
#  - the step-1 loss equals transformers' (cross-entropy plus
#    router_aux_loss_coef * load_balancing_loss_func) within 1e-5 relative;
#  - every parameter's gradient (routers included), read off the AdamW
#    step, equals torch autograd's;
# on 1 rank, on 2 ranks (mpirun: the mean of the ranks' losses and
# gradients, as data parallelism in torch), and with the parameters homed
# on NVMe (2 ranks).
#   tests/e2e/moe.sh BUILD
set -u
B=${1:-build}
Z=$B/bin
. tests/e2e/lib.sh
e2e_need_py transformers
e2e_workdir moe
e2e_mpi
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
fail=0
"$ZINF_PY" tests/e2e/moe.py make "$W" > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the models"; exit 1; }
cases=$(grep -v '^\[' "$W/make.log")
mkdir -p "$W/nvme"
for R in 1 2; do
  cat > "$W/t$R.zl" <<ZL
target t$R { backend = "host"; ranks = $R; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1.5 GB/s; write = 1.5 GB/s; capacity = 4 GiB } }
ZL
done
run() { # CASE RANKS KIND(cpu|nvme)
  c=$1 R=$2 k=$3 n=$1-$2-$3
  if [ "$k" = nvme ]; then
    { cat "$W/$c.zl"; echo 'plan { params = "nvme"; optimizer = "nvme"; grads = "cpu"; whole_below = 1000 }'; } > "$W/$n.zl"
  else
    cp "$W/$c.zl" "$W/$n.zl"
  fi
  "$Z/zinfc" "$W/$n.zl" --target "$W/t$R.zl" -o "$W/$n.plan" > "$W/$n.zinfc" 2>&1 ||
    { cat "$W/$n.zinfc"; echo "FAIL: zinfc $n"; fail=1; return; }
  if [ "$R" = 1 ]; then set -- "$Z/zinfrun"; else set -- mpirun -np "$R" --oversubscribe "$Z/zinfrun"; fi
  rm -rf "$W/nvme"/*
  timeout 120 "$@" "$W/$n.plan" --backend host --init "$W/$c.safetensors" --data "$W/tok.bin" --steps 1 \
      --nvme "$W/nvme" --losses "$W/$n.losses" --export "$W/$n.out.safetensors" < /dev/null > "$W/$n.run" 2>&1 ||
    { cat "$W/$n.run"; echo "FAIL: zinfrun $n"; fail=1; return; }
  echo "$c $R $W/$n.out.safetensors $W/$n.losses" >> "$W/checks"
}
: > "$W/checks"
for c in $cases; do run "$c" 1 cpu; done
for c in mixtral qwen3moe skewed; do run "$c" 2 cpu; done
run olmoe 2 nvme
while read -r c R e l; do
  "$ZINF_PY" tests/e2e/moe.py check "$W" "$c" "$R" "$e" "$l" || fail=1
done < "$W/checks"
[ "$(wc -l < "$W/checks")" -ge 10 ] || { echo "FAIL: only $(wc -l < "$W/checks") runs"; fail=1; }
[ $fail = 0 ] && echo "moe: ok"
exit $fail
